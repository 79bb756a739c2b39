"""The estimate view's activations measured by the trace (:mod:`advisor.engine.trace`),
with the op-level selective checkpointing policy (:mod:`advisor.engine.sac`) when
``--checkpointing sac[:BUDGET]`` is asked for. Imported only for ``--activations trace``."""

from __future__ import annotations

from typing import Any

from advisor.engine.sac import sac_policy
from advisor.engine.trace import TraceUnavailable, trace_activations


def traced_estimate(inventory, x, meta: dict[str, Any]):
    """The estimate view's activations from a trace instead of the formulas.

    ``inventory``: an advisor Inventory carrying ``hf_config`` (presets and config.json files);
    ``x``: advisor.model.activations.ActivationInputs. Returns (ActivationEstimate, note): the
    note says what was traced and what was extrapolated. Raises TraceUnavailable (one line)
    without torch/transformers, without a config.json to build from, or with tensor/pipeline/
    sequence parallelism (the trace measures one whole-model rank)."""
    from advisor.model.activations import ActivationEstimate, estimate_activations

    if getattr(inventory, "hf_config", None) is None:
        raise TraceUnavailable("--activations trace needs --model as a preset or a Hugging Face config.json "
                               "(an inventory or model spec file has no config to build the model from)")
    if x.tensor_parallel > 1 or x.pipeline_parallel > 1 or x.sequence_parallel or getattr(x, "ulysses", 1) > 1:
        raise TraceUnavailable("--activations trace measures one rank of the whole model: no tensor, pipeline or "
                               "sequence parallelism; use --activations formula")
    from advisor.model.activations import (ASYNC_OFFLOAD_ON_ACCELERATOR, cpu_checkpoint_traffic, parse_checkpointing,
                                           parse_sac)

    dtype = "fp32" if x.dtype_bytes == 4 else "bf16"  # fp16 and bf16: the same bytes
    budget = parse_sac(x.checkpointing)
    policy = None
    if budget is not None:
        policy = sac_policy(inventory.hf_config, x.seq_len, x.micro_batch, budget, dtype=dtype, attention=x.attention)
        mode, ck = "sac", "sac"
    else:
        mode, k = parse_checkpointing(x.checkpointing, int(meta.get("num_layers") or 0) or None)
        ck = k if mode == "layers" else mode
    tr = trace_activations(inventory.hf_config, x.seq_len, x.micro_batch, dtype=dtype, attention=x.attention,
                           checkpointing=ck, sac=policy)
    saved, host = tr.end_of_forward, 0
    traffic, overlapped = (0, 0), False
    if mode == "full" and x.cpu_checkpointing and x.deepspeed_checkpointing:
        # the kept layer inputs go to host memory (the async offload engine keeps the newest:
        # advisor.model.activations' docstring, DeepSpeed checkpointing.py:_get_cpu_offload_engine)
        overlapped = x.offload_keeps_newest and not x.partition_activations
        n = tr.layers_total - (1 if overlapped else 0)
        host = tr.per_layer[-1] * n
        # the async engine's forward stash keeps the last input copied out on the accelerator too
        saved -= tr.per_layer[-1] * (max(0, tr.layers_total - ASYNC_OFFLOAD_ON_ACCELERATOR) if overlapped else n)
        traffic = cpu_checkpoint_traffic(tr.layers_total, tr.per_layer[-1], overlapped)
    if policy is not None:
        frac = policy.recompute_flops_fraction()
    else:
        try:
            frac = estimate_activations(meta, x).recompute_flops_fraction
        except (KeyError, ValueError, TypeError):
            frac = 0.0
    import transformers

    est = ActivationEstimate(
        per_layer=tr.per_layer[-1], layers_on_rank=tr.layers_total, saved_accelerator=saved, saved_host=host,
        recompute_layer=0, loss_head=tr.outside_layers, loss_spike=tr.loss_spike,
        loss_backward_spike=tr.backward_extra, recompute_flops_fraction=frac,
        breakdown={f"layer.{i}": v for i, v in enumerate(tr.per_layer)} | {"outside_layers": tr.outside_layers},
        host_offload_bytes=traffic[0], host_restore_bytes=traffic[1], host_offload_overlapped=overlapped and traffic[0] > 0,
        **({"recompute": "sac", "checkpointed_layers": tr.layers_total} if policy is not None else {}))
    what = f"{tr.layers_traced} of {tr.layers_total} layers, the rest extrapolated" if tr.extrapolated \
        else f"all {tr.layers_total} layers"
    note = (f"activations: traced on transformers {transformers.__version__}'s {tr.model_type} ({what}; "
            f"{tr.attention} attention; backward peak at {tr.backward_peak_module}; {tr.seconds:.1f} s)")
    if policy is not None:
        from advisor.units import human

        lp = policy.layers[-1]
        pct = f"{lp.recompute_flops / lp.forward_flops:.0%}" if lp.forward_flops else "0%"
        note += (f"; op-level SAC ({policy.solver}, torch SACEstimator, budget {policy.budget:g} of a layer's "
                 f"{human(lp.total_bytes)} op outputs): each layer keeps {len(lp.saved_ops())} of {len(lp.ops)} ops, "
                 f"{human(lp.saved_bytes)}, and recomputes {pct} of its forward FLOPs")
        note += "; " + "; ".join(policy.notes)
    if tr.notes:
        note += "; " + "; ".join(tr.notes)
    return est, note
