"""Z001 stage3-keys-below-stage3: ZeRO-3-only settings at stage 0, 1 or 2.

What DeepSpeed does: the ``stage3_*`` keys (and their unprefixed names, which 0.19.8 also
accepts: ``prefetch_bucket_size``, ``param_persistence_threshold``,
``model_persistence_threshold``, ``max_live_parameters``, ``max_reuse_distance``,
``module_granularity_threshold``, ``use_all_reduce_for_fetch_params``, ``allgather_sequential``)
and the ZeRO++ keys (``zero_hpz_partition_size``, ``zero_quantized_weights``,
``zero_quantized_nontrainable_weights``) are read only by the ZeRO-3 parameter partitioner and
coordinator. Below stage 3 they are validated and ignored, with no message.

Why it matters: these are the knobs people turn to bound GPU memory (``max_live_parameters``,
``prefetch_bucket_size``); below stage 3 they bound nothing, so the tuning is an illusion. Often
it is a stage-3 config whose ``stage`` was lowered.

Anti-pattern::

    "zero_optimization": {"stage": 2, "stage3_max_live_parameters": 1e9,
                          "stage3_prefetch_bucket_size": 5e8}

Fix: delete them, or set ``"stage": 3`` if parameter partitioning was intended.
(``stage3_gather_16bit_weights_on_model_save`` is left alone: below stage 3
``save_16bit_model`` works without it.)
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import is_auto, zero_raw, zptr

STAGE3_ONLY = (
    "stage3_prefetch_bucket_size", "prefetch_bucket_size",
    "stage3_param_persistence_threshold", "param_persistence_threshold",
    "stage3_model_persistence_threshold", "model_persistence_threshold",
    "stage3_max_live_parameters", "max_live_parameters",
    "stage3_max_reuse_distance", "max_reuse_distance",
    "stage3_module_granularity_threshold", "module_granularity_threshold",
    "stage3_use_all_reduce_for_fetch_params", "use_all_reduce_for_fetch_params",
    "stage3_allgather_sequential", "allgather_sequential",
    "zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_nontrainable_weights",
)


@register
class Stage3KeysBelowStage3(Rule):
    code = "Z001"
    reads_stage = True
    name = "stage3-keys-below-stage3"
    severity = "warning"

    def check(self, ctx: LintContext):
        stage = ctx.effective.zero.stage
        if stage == 3:
            return
        zr = zero_raw(ctx.raw)
        for k in STAGE3_ONLY:
            if k in zr and not is_auto(zr[k]):
                v = zr[k]
                if k.startswith("zero_quantized") and v is False:
                    continue  # explicitly off: nothing to mislead
                if k == "zero_hpz_partition_size" and v == 1:
                    continue
                yield self.finding(zptr(k), f"{k} only applies to ZeRO stage 3; it is ignored at stage {stage}",
                                   f"remove zero_optimization.{k}, or set zero_optimization.stage to 3")
