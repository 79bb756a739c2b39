"""M104 peak-is-lower-bound: The accelerator peak is a lower bound: its activations are not estimated, or this plan's ZeRO-1/2 transients are not modelled.

Activations not estimated. The activations (what the forward pass keeps for backward) are usually the largest
term of the accelerator's need: 31.49 GiB per rank for Llama-3-8B at 4096 tokens, micro-batch 1, no recompute, beside
2.10 GiB of ZeRO-3 CPU-offload model states at 8 ranks. They are estimated only from an architecture and a sequence
length (``advisor.views.estimate.activations_for``); where one is missing the need leaves them out and is a floor:
``--params N`` or an inventory JSON without the architecture (no hidden size, layers, heads, ...), a family the
formulas do not cover (DeepSeek-V3's latent attention: ``--activations trace`` measures it), or no ``--seq-len``
and no context length in the model. Fix: give ``--model`` with an architecture (a preset, ``ds-advisor models``, or
a Hugging Face ``config.json``), ``--activations trace`` where the formulas do not cover the family, ``--seq-len``
where the length is unknown. ``generate`` always has an architecture (it refuses ``--params``); where a family has
no formula it marks its plans' needs ">=" itself. ``advisor.preflight`` (inside a training script) judges the same
way: a module without a Hugging Face ``model.config`` of a known model_type (a plain ``nn.Module``) has no
architecture, so its need is a floor and its verdict at best "tight" (``raise_on="tight"`` raises); its finding names
what the caller gives instead of the flags -- a module with such a ``model.config``, ``seq_len=`` -- and that the
trace is the command line's.

ZeRO-1/2 transients not modelled. For a few ZeRO-1/2 regimes the ledger does not replay DeepSpeed 0.19.8's backward and step-norm
transients (``advisor/ledger/state.py`` zero12_transients_unmodeled): each bucket flush's flat copy
(``runtime/zero/stage_1_and_2.py`` allreduce_bucket l.2367), its cast to ``communication_data_type``
(l.2376-2377), the fp32 ``param.grad_accum`` copies (l.1237), the compact fp32 gradient partition
(l.1268-1274) and the fp64 norm copies (l.2152, l.2684). Those regimes are, without optimizer offload, the
combinations ``zero12_transients_modeled`` does not cover: a ``data_types.grad_accum_dtype`` unlike the model's
outside ZeRO-2's fp32 accumulation and ZeRO-1 fp16's (modelled with any ``communication_data_type``,
``contiguous_gradients`` / ``overlap_comm`` and param groups; bf16 with fp32 takes BF16_Optimizer, which is modelled):
a 16-bit accumulation dtype unlike the model's at ZeRO-1/2, e.g. bf16 on fp16 (engine probe at ZeRO-1: forward:2 +50%). Under CPU optimizer offload every dtype combination is modelled, any param groups,
any ``communication_data_type``; so is ZeRO-2 with ``contiguous_gradients`` off and another
``communication_data_type``. There the accelerator peak estimate prints (and every
need derived from it) is a floor: the engine measured +12-124% on the affected phases of its small model
before the regimes it now models were modelled. The finding is raised whenever estimate's JSON has
``assumptions.peak_lower_bound`` (either reason, or both); ``check`` never says GO for such a plan (its
accelerator verdict is TIGHT, exit 4 -- 0 with ``--allow-tight`` -- or NO-GO) and estimate never says "fits".

Anti-pattern: ``check`` of a ZeRO-3 CPU-offload config with ``--params 8e9 --seq-len 4096`` on 80 GB ranks said
GO with a 2.95 GiB need, the activations' 31.49 GiB (``--model llama-3-8b``) left out. Anti-pattern: ZeRO-1, bf16, ``grad_accum_dtype`` fp32, ``offload_optimizer`` cpu, a model whose
norms sit in a second (no-weight-decay) param group: ``check`` said GO with 0.04 GiB of headroom (that regime
is modelled since, and so are its fp16 and ZeRO-2 fp32-communication twins; the same plan on an fp16 model
without optimizer offload is modelled too; with bf16 accumulation it is a floor).

Fix (transients): a setting under which the transients are modelled: ``data_types.grad_accum_dtype`` equal to the model
dtype, or CPU optimizer offload (every ``grad_accum_dtype`` modelled there); or measure the real peak on
one accelerator (``ds-advisor measure``) before relying on the fit.
"""

from __future__ import annotations

from advisor.rules import Rule, emit, register


@register
class PeakIsLowerBound(Rule):
    """Explanation and registry entry for M104; the findings come from estimate / check / preflight
    (:func:`lower_bound_finding`)."""

    code = "M104"
    name = "peak-is-lower-bound"
    produced_by = "estimate"
    severity = "warning"

    def check(self, ctx):
        return ()


def lower_bound_fix(ec, groups: int) -> str:
    """The settings that make this plan's ZeRO-1/2 transients modelled (the conditions of
    ``advisor.ledger.state.zero12_transients_unmodeled`` / ``zero12_offload_fp32_accum`` /
    ``zero12_offload_compact`` / ``zero12_transients_modeled``), as a fix sentence."""
    ways = []
    if ec.grad_dtype != ec.model_dtype:
        ways.append(f"data_types.grad_accum_dtype {ec.model_dtype} (the model dtype)")
    if ec.offload_optimizer_effective == "none" and ec.grad_dtype != ec.model_dtype:
        # every grad_accum_dtype is modelled under CPU optimizer offload (state.zero12_transients_unmodeled)
        ways.append("offload_optimizer cpu (every grad_accum_dtype is modelled there)")
    head = ("for a modelled peak set " + " or ".join(ways) + "; otherwise ") if ways else ""
    return head + "measure the real peak on one accelerator (ds-advisor measure) before trusting the fit"


def activations_fix(note: str, api: bool = False) -> str:
    """How to give the activations that ``note`` (:func:`advisor.views.estimate.activations_for`'s
    "activations: not estimated (...)") says are missing, as a fix sentence. ``api``: in the words of
    :func:`advisor.preflight` (a Python caller, no command-line flags): its module's Hugging Face
    ``model.config`` for ``--model``, ``seq_len=`` for ``--seq-len``; the trace is the command line's only."""
    if "--seq-len" in note:
        how = ("pass seq_len= (tokens per sequence; the model states no context length)" if api else
               "give --seq-len (the model states no context length)")
    elif "--activations trace" in note:
        how = ("measure them with the command line's trace (ds-advisor estimate on the model's config.json, "
               "activations trace; transformers' own model on fake tensors): preflight has no trace" if api else
               "use --activations trace (transformers' own model on fake tensors) for this family")
    else:
        how = ("pass a module whose model.config is a Hugging Face config of a model_type the advisor knows (a "
               "transformers model, e.g. from_pretrained or from_config, on the meta device if need be); a plain "
               "nn.Module has no architecture" if api else
               "give --model with an architecture (a preset, see `ds-advisor models`, or a Hugging Face config.json; "
               "--params and an inventory without layers have none)")
    return "for the activations, usually the largest term, " + how


def api_activations_note(note: str) -> str:
    """``note`` (:func:`advisor.views.estimate.activations_for`'s "activations: not estimated (...)")
    in :func:`advisor.preflight`'s words, as :func:`activations_fix` with ``api``: what the module
    lacks, not the flag that would give it."""
    if "--seq-len" in note:
        return "activations: not estimated (no sequence length: seq_len= not given and the model states no context length)"
    if "--activations trace" in note:
        return note.replace("use --activations trace", "the command line's trace measures it, preflight has none")
    if "--model" in note:
        return ("activations: not estimated (the model has no Hugging Face model.config of a model_type the advisor "
                "knows, so its architecture is unknown)")
    return note


def lower_bound_finding(reason: str, ec, groups: int, row=None, activations: str = "", api: bool = False):
    """M104's warning for a plan whose ledger says ``peak_lower_bound`` = ``reason`` (the ledger's
    words: what is not modelled, with its DeepSpeed lines; "" when it is modelled) and/or whose
    activations are not estimated (``activations``: the estimate's note, "activations: not estimated
    (...)"; "" when they are). ``row``: the accelerator's
    :class:`advisor.views.estimate.FitRow` (bytes per rank), whose tracked peak, need (peak plus the
    runtime overhead rows) and capacity the message and data name, so every format (GitHub and SARIF
    show no fit table) carries the floor's figures. ``api``: the activations' reason and fix in
    :func:`advisor.preflight`'s words (:func:`api_activations_note`, :func:`activations_fix`), no flags."""
    from advisor.findings import literal

    sizes: dict = {}
    data: dict = {"tier": "accelerator", "peak_lower_bound": True, "activations_missing": bool(activations),
                  "transients_unmodeled": bool(reason)}
    figures = ""
    if row is not None:
        peak = row.need if row.tracked is None else row.tracked
        sizes = {"peak": peak, "need": row.need}
        data.update({"peak": peak, "need": row.need, "capacity": row.capacity})
        figures = " (peak >= {peak}, need >= {need}"
        if row.capacity is not None:
            sizes["capacity"] = row.capacity
            figures += " of {capacity}"
        figures += literal(f" {row.scope}") + ")"
    why = "; ".join(x for x in ((api_activations_note(activations) if api else activations), reason) if x)
    fix = "; ".join(([activations_fix(activations, api)] if activations else [])
                    + ([lower_bound_fix(ec, groups)] if reason else []))
    return emit(code="M104", severity="warning", pointer="" if activations and not reason else "/zero_optimization",
                message="accelerator peak is a lower bound" + figures + ": " + (literal(why) if sizes else why),
                sizes=sizes or None, fix=fix, data=data)
