"""Z007 allreduce-sum-unsupported: gradient_allreduce_op "sum" where DeepSpeed refuses it.

What DeepSpeed does: ``gradient_allreduce_op: "sum"`` (sum instead of average gradients across
ranks) is rejected while the config is constructed (``runtime/config.py`` ``_do_error_check``)
with ``ValueError``:

* with ZeRO stage 3: "gradient_allreduce_op='sum' is not supported with ZeRO stage 3";
* with ZenFlow (``zero_optimization.zenflow``);
* with DeepCompile (``compile.deepcompile: true``).

Anti-pattern::

    "gradient_allreduce_op": "sum", "zero_optimization": {"stage": 3}

Fix: use the default ``"mean"`` and scale the loss (or learning rate) by the data-parallel size
if summed gradients were intended.
"""

from __future__ import annotations

from advisor.config.effective import _as_bool
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import section, zero_raw


@register
class AllreduceSumUnsupported(Rule):
    code = "Z007"
    reads_stage = True
    name = "allreduce-sum-unsupported"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        op = ctx.raw.get("gradient_allreduce_op")
        if not (isinstance(op, str) and op.lower() == "sum"):
            return
        why = None
        if ctx.effective.zero.stage == 3:
            why = "ZeRO stage 3"
        elif zero_raw(ctx.raw).get("zenflow") is not None:
            why = "ZenFlow"
        elif _as_bool(section(ctx.raw, "compile").get("deepcompile")):
            why = "DeepCompile"
        if why:
            yield self.finding("/gradient_allreduce_op", f'gradient_allreduce_op "sum" is not supported with {why}: '
                                                         "deepspeed.initialize raises ValueError",
                               'set gradient_allreduce_op to "mean" (the default) or remove it')
