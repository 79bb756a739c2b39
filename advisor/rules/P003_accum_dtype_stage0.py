"""P003 accum-dtype-stage0: a gradient-accumulation dtype other than the model dtype without ZeRO.

What DeepSpeed does: without ZeRO (stage 0) the engine picks the optimizer wrapper from the model
dtype and ``data_types.grad_accum_dtype`` (``engine.py`` ``_do_optimizer_sanity_check``). When
they differ (e.g. bf16 training with ``grad_accum_dtype: "fp32"``) 0.19.8 has no wrapper for the
mix and raises ``NotImplementedError: unsupported mix of model_dtype=torch.bfloat16 and
grad_accum_dtype=torch.float32`` at ``deepspeed.initialize``, with or without pipeline
parallelism (``engine.py`` l.2322-2323: the branch for unequal dtypes at stage 0; a
``PipelineModule`` gets BF16_Optimizer at stage 0 only when it accumulates in bf16, l.2316-2320;
with ZeRO stage 1, bf16 + fp32 accumulation selects BF16_Optimizer).

Anti-pattern::

    "bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"}   # no zero_optimization

Fix: either remove ``grad_accum_dtype`` (accumulate in bf16), or use ZeRO stage 1, where bf16 +
fp32 accumulation is supported (BF16_Optimizer: note it keeps a *full*, unpartitioned fp32
gradient buffer, 4 bytes per parameter)::

    "bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"},
    "zero_optimization": {"stage": 1}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class AccumDtypeStage0(Rule):
    code = "P003"
    reads_stage = True
    name = "accum-dtype-stage0"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        ec = ctx.effective
        if ec.zero.stage != 0 or ec.grad_accum_dtype is None or ec.grad_accum_dtype == ec.model_dtype:
            return
        yield self.finding(
            "/data_types/grad_accum_dtype",
            f"{ec.model_dtype} model with grad_accum_dtype {ec.grad_accum_dtype} at ZeRO stage 0: deepspeed.initialize "
            "raises NotImplementedError (unsupported mix, with or without pipeline parallelism)",
            f"remove data_types.grad_accum_dtype (accumulate in {ec.model_dtype}), or set zero_optimization.stage to 1"
            + (" (BF16_Optimizer)" if ec.model_dtype == "bf16" and ec.grad_accum_dtype == "fp32" else ""))
