"""G001 pipeline-with-zero23: pipeline parallelism with ZeRO stage 2 or 3.

What DeepSpeed does (``runtime/pipe/engine.py`` ``PipelineEngine.__init__``)::

    assert self.zero_optimization_stage() < ZeroStageEnum.gradients, \\
        "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"

A ``PipelineModule`` model goes through ``PipelineEngine``, which refuses ZeRO-2 and ZeRO-3:
gradient partitioning would reduce-scatter inside every micro-batch's backward, which the 1F1B
schedule interleaves across stages. Only ZeRO-0 and ZeRO-1 (optimizer-state partitioning over
each stage's data-parallel group) run under pipeline parallelism.

Anti-pattern (with ``--pipeline-parallel 2``)::

    "zero_optimization": {"stage": 3}

Fix: ZeRO-1 with pipeline parallelism, or drop pipeline parallelism and use ZeRO-3.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class PipelineWithZero23(Rule):
    code = "G001"
    reads_stage = True
    name = "pipeline-with-zero23"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        cl = ctx.cluster
        pp = getattr(cl, "pipeline_parallel", 1) or 1
        st = ctx.effective.zero.stage
        if pp > 1 and st >= 2:
            yield self.finding("/zero_optimization/stage",
                               f"ZeRO-{st} with {pp} pipeline stages: DeepSpeed's PipelineEngine asserts \"ZeRO-2 and "
                               "ZeRO-3 are incompatible with pipeline parallelism\" (runtime/pipe/engine.py: "
                               "PipelineEngine.__init__)",
                               "set zero_optimization.stage to 1 (or 0) with pipeline parallelism, or drop "
                               "pipeline parallelism and use ZeRO-3", pipeline_parallel=pp, stage=st)
