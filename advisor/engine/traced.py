"""The estimate view's activations measured by the trace (:mod:`advisor.engine.trace`),
with the op-level selective checkpointing policy (:mod:`advisor.engine.sac`) when
``--checkpointing sac[:BUDGET]`` is asked for. Imported only for ``--activations trace``."""

from __future__ import annotations

from typing import Any

from advisor.engine.sac import sac_model_policy, sac_policy
from advisor.engine.trace import TraceUnavailable, trace_activations


def traced_estimate(inventory, x, meta: dict[str, Any]):
    """The estimate view's activations from a trace instead of the formulas.

    ``inventory``: an advisor Inventory carrying ``hf_config`` (presets and config.json files);
    ``x``: advisor.model.activations.ActivationInputs. Returns (ActivationEstimate, note): the
    note says what was traced and what was extrapolated. Raises TraceUnavailable (one line)
    without torch/transformers, without a config.json to build from, or with tensor/pipeline/
    sequence parallelism (the trace measures one whole-model rank).

    The trace runs at ``x.checkpointing``: ``full`` and ``K`` (k of L) enable transformers' own
    activation checkpointing (``activation_checkpointing_enable``, formerly
    ``gradient_checkpointing_enable``: non-reentrant ``torch.utils.checkpoint`` per decoder
    layer; for K, the layer flag ``gradient_checkpointing`` left on the first K layers only),
    ``selective`` wraps transformers' attention function in ``torch.utils.checkpoint``, ``sac``
    applies torch's op-level policy -- so what autograd and the checkpoints keep is measured, not
    assumed. The estimate's fields (bytes), as the formula's (:class:`ActivationEstimate`):

    * ``saved_accelerator``: the trace's end of forward (every layer as it ran: a checkpointed
      layer's bytes are what it leaves alive from its pre-forward to the next layer's, i.e. the
      hidden state it hands on -- kept as the next checkpoint's input --, the tensors its
      checkpoint holds beyond that (eager's attention mask, the rotary cos/sin) counted once
      where they are made, outside the layers), less what ``cpu_checkpointing`` moves to host;
    * ``per_layer``: as the formula's: one layer's activations without recompute (the last
      traced layer, not checkpointed for K; for full from the trace without recompute); for
      ``selective`` and ``sac`` what a layer keeps under that recompute;
    * ``recompute_layer``: the largest backward instant inside a decoder layer (the recompute of
      one layer and its activation gradients) on top of the end of forward, net of the later
      layers already freed (0 without recompute); ``loss_backward_spike`` the largest outside
      the layers (the loss);
    * ``peak_without_recompute``: the peak of the trace without recompute (the second trace),
      so the memory recompute saves is reported beside ``recompute_flops_fraction`` (the
      formula's FLOPs share, Narayanan et al. 2021; torch's flop counter for ``sac``).
    """
    from advisor.model.activations import ActivationEstimate, estimate_activations

    if getattr(inventory, "hf_config", None) is None:
        raise TraceUnavailable("--activations trace needs --model as a preset or a Hugging Face config.json "
                               "(an inventory or model spec file has no config to build the model from)")
    if x.tensor_parallel > 1 or x.pipeline_parallel > 1 or x.sequence_parallel or getattr(x, "ulysses", 1) > 1:
        raise TraceUnavailable("--activations trace measures one rank of the whole model: no tensor, pipeline or "
                               "sequence parallelism; use --activations formula")
    from advisor.model.activations import (ASYNC_OFFLOAD_ON_ACCELERATOR, cpu_checkpoint_traffic, parse_checkpointing,
                                           parse_sac, parse_sac_bytes)

    dtype = "fp32" if x.dtype_bytes == 4 else "bf16"  # fp16 and bf16: the same bytes
    source = getattr(inventory, "source", "") or "config.json"  # named in a refusal: the file or preset
    budget = parse_sac(x.checkpointing)
    model_budget = parse_sac_bytes(x.checkpointing)
    policy = None
    k = 0
    traced_layers: dict[str, int] = {}
    if model_budget is not None:  # the whole model: every layer built, the MILP chooses among them
        policy = sac_model_policy(inventory.hf_config, x.seq_len, x.micro_batch, model_budget, dtype=dtype,
                                  attention=x.attention, source=source)
        traced_layers = {"max_layers": policy.layers_total}
        mode, ck = "sac", "sac"
    elif budget is not None:
        policy = sac_policy(inventory.hf_config, x.seq_len, x.micro_batch, budget, dtype=dtype, attention=x.attention,
                             source=source)
        mode, ck = "sac", "sac"
    else:
        mode, k = parse_checkpointing(x.checkpointing, int(meta.get("num_layers") or 0) or None)
        ck = k if mode == "layers" else mode
    tr = trace_activations(inventory.hf_config, x.seq_len, x.micro_batch, dtype=dtype, attention=x.attention,
                           checkpointing=ck, sac=policy, source=source, **traced_layers)
    # the same model without recompute: what recompute saves, and a layer's bytes without it
    base = tr if mode == "none" else trace_activations(inventory.hf_config, x.seq_len, x.micro_batch, dtype=dtype,
                                                       attention=x.attention, source=source)
    if mode == "full":
        k = tr.layers_total
    saved, host = tr.end_of_forward, 0
    traffic, overlapped = (0, 0), False
    gathered = 0
    if mode in ("full", "layers") and x.deepspeed_checkpointing and (
            x.cpu_checkpointing or (x.contiguous_memory_optimization and x.partition_activations)):
        # DeepSpeed's activation_checkpointing section on the k kept layer inputs, as the formula
        # applies it (advisor.model.activations' docstring; one rank, mp_size 1: a partition is
        # the whole input). inp: a checkpointed layer's kept input, as traced (layer 0 is one)
        inp = tr.per_layer[0]
        n_kept = k
        if x.contiguous_memory_optimization and x.partition_activations:
            n_kept = x.number_checkpoints or k  # number_checkpoints buffers allocated at once
            saved += (n_kept - k) * inp
        if x.cpu_checkpointing:
            # the async offload engine keeps the newest on the accelerator (and the last copied
            # out in its forward stash); with partitioning, or on a synchronized device, all go
            # (DeepSpeed checkpointing.py:_get_cpu_offload_engine)
            overlapped = x.offload_keeps_newest and not x.partition_activations
            on_acc = min(n_kept, ASYNC_OFFLOAD_ON_ACCELERATOR) if overlapped else 0
            host = max(0, n_kept - 1) * inp if overlapped else n_kept * inp
            saved -= (n_kept - on_acc) * inp
            traffic = cpu_checkpoint_traffic(k, inp, overlapped)
            gathered = inp  # brought back to the accelerator before its layer's recompute
    if policy is not None:
        frac = policy.recompute_flops_fraction()
    else:
        try:
            frac = estimate_activations(meta, x).recompute_flops_fraction
        except (KeyError, ValueError, TypeError):
            frac = 0.0
    import transformers

    if mode == "none":
        recompute, loss_bw = 0, tr.backward_extra
    else:
        recompute = max(0, tr.layer_backward_extra + gathered)
        loss_bw = max(0, tr.outside_backward_extra)
    est = ActivationEstimate(
        per_layer=base.per_layer[-1] if mode == "full" else tr.per_layer[-1],
        layers_on_rank=tr.layers_total, saved_accelerator=saved, saved_host=host,
        recompute_layer=recompute, loss_head=tr.outside_layers, loss_spike=tr.loss_spike,
        loss_backward_spike=loss_bw, recompute_flops_fraction=frac,
        breakdown={f"layer.{i}": v for i, v in enumerate(tr.per_layer)} | {"outside_layers": tr.outside_layers},
        recompute=mode, checkpointed_layers=(sum(lp.checkpointed for lp in policy.layers) if policy is not None
                                             else k),
        peak_without_recompute=0 if mode == "none" else base.peak,
        host_offload_bytes=traffic[0], host_restore_bytes=traffic[1], host_offload_overlapped=overlapped and traffic[0] > 0,
        sac_policy=policy.to_dict() if policy is not None else None)
    what = f"{tr.layers_traced} of {tr.layers_total} layers, the rest extrapolated" if tr.extrapolated \
        else f"all {tr.layers_total} layers"
    ckw = {"none": "", "full": "; gradient checkpointing on every layer",
           "layers": f"; gradient checkpointing on the first {k} layers", "selective": "; the attention core checkpointed",
           "sac": ""}[mode]
    note = (f"activations: traced on transformers {transformers.__version__}'s {tr.model_type} ({what}; "
            f"{tr.attention} attention{ckw}; backward peak at {tr.backward_peak_module}; {tr.seconds:.1f} s"
            + (f", without recompute {base.seconds:.1f} s" if base is not tr else "") + ")")
    if policy is not None:
        from advisor.units import human

        lp = policy.layers[-1]
        pct = f"{lp.recompute_flops / lp.forward_flops:.0%}" if lp.forward_flops else "0%"
        if policy.scope == "model":
            ck_layers = [p for p in policy.layers if p.checkpointed]
            note += (f"; op-level SAC chosen for the whole model by torch's MILP (sac_milp) under "
                     f"{human(policy.budget_bytes or 0)} of activations: {len(ck_layers)} of {len(policy.layers)} "
                     f"layers checkpointed, each keeping "
                     + ", ".join(f"{len(p.saved_ops())}/{len(p.ops)} ops" for p in ck_layers[:4])
                     + (" ..." if len(ck_layers) > 4 else "")
                     + f"; the traced peak is {human(tr.peak)} (the MILP's memory model is approximate)")
        else:
            note += (f"; op-level SAC ({policy.solver}, torch SACEstimator, budget {policy.budget:g} of a layer's "
                     f"{human(lp.total_bytes)} op outputs): each layer keeps {len(lp.saved_ops())} of {len(lp.ops)} "
                     f"ops, {human(lp.saved_bytes)}, and recomputes {pct} of its forward FLOPs")
        note += "; " + "; ".join(policy.notes)
    if tr.notes:
        note += "; " + "; ".join(tr.notes)
    return est, note
