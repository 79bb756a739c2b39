"""Z008 overlap-comm-under-pipeline: ``overlap_comm: true`` at ZeRO-1 with pipeline parallelism.

What DeepSpeed does (0.19.8, ``runtime/engine.py`` ``_configure_zero_optimizer`` l.2663-2666, before it builds
DeepSpeedZeroOptimizer)::

    if isinstance(self.module, PipelineModule):
        if overlap_comm:
            logger.warning("Pipeline parallelism does not support overlapped communication, "
                           "will be disabled.")
            overlap_comm = False

So under a PipelineModule the gradient reduce runs on the compute stream (``stage_1_and_2.py`` l.2239-2245)
with one ipg bucket, not two: the step is not overlapped however the file says it. BF16_Optimizer (ZeRO-1 with
bf16 and ``grad_accum_dtype`` fp32) never reads the key. ds-advisor's estimate already runs the plan with
``overlap_comm`` false (one ipg bucket, an exposed reduce); ZeRO-2 with pipeline stages is refused (G001).

Why it matters: the config promises communication overlap the run does not get; the step-time and memory
figures a user expects from it (the second bucket, the hidden reduce) do not apply.

Anti-pattern (with ``--pipeline-parallel 2``)::

    "zero_optimization": {"stage": 1, "overlap_comm": true}

Fix: write what runs::

    "zero_optimization": {"stage": 1, "overlap_comm": false}
"""

from __future__ import annotations

from advisor.config.effective import pipeline_effective
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import is_auto, zero_raw, zptr


@register
class OverlapCommUnderPipeline(Rule):
    code = "Z008"
    reads_stage = True
    name = "overlap-comm-under-pipeline"
    severity = "info"

    def check(self, ctx: LintContext):
        pp = getattr(ctx.cluster, "pipeline_parallel", 1) or 1
        ec = ctx.effective
        v = zero_raw(ctx.raw).get("overlap_comm")
        if ec.zero.stage >= 2 or v is None or is_auto(v):  # ZeRO-2/3 with pipeline stages: G001
            return
        if pipeline_effective(ec, pp).zero.overlap_comm != ec.zero.overlap_comm:
            yield self.finding(zptr("overlap_comm"),
                               f"overlap_comm true has no effect with {pp} pipeline stages: DeepSpeed disables it for "
                               "a PipelineModule (engine.py _configure_zero_optimizer warns \"Pipeline parallelism "
                               "does not support overlapped communication, will be disabled.\"), so the gradient "
                               "reduce runs on the compute stream with one ipg bucket",
                               "set zero_optimization.overlap_comm to false (what runs under pipeline parallelism)",
                               pipeline_parallel=pp)
