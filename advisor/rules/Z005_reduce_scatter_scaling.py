"""Z005 reduce-scatter-scaling: gradient pre-scaling with ZeRO reduce-scatter.

What DeepSpeed does: with ``reduce_scatter: true`` (the default) ZeRO-2
(``stage_1_and_2.py``, when gradients are averaged, i.e. ``gradient_allreduce_op: "mean"``) and
ZeRO-3 (``stage3.py``) assert at ``deepspeed.initialize``:

* ``gradient_predivide_factor == 1.0`` ("gradient_predivide_factor != 1.0 is not yet supported
  with ZeRO-2/3 with reduce scatter enabled");
* ``prescale_gradients: false`` ("pre-scale gradients is not yet supported ...").

Anti-pattern::

    "prescale_gradients": true, "gradient_predivide_factor": 8.0,
    "zero_optimization": {"stage": 2}

Fix: remove both (DeepSpeed averages after the reduction), or set
``zero_optimization.reduce_scatter: false`` if pre-division is really needed for fp16 range.
"""

from __future__ import annotations

from advisor.config.effective import _as_bool, _as_float
from advisor.rules import LintContext, Rule, register


@register
class ReduceScatterScaling(Rule):
    code = "Z005"
    reads_stage = True
    name = "reduce-scatter-scaling"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        raw = ctx.raw
        z = ctx.effective.zero
        if not z.reduce_scatter or z.stage not in (2, 3):
            return
        op = raw.get("gradient_allreduce_op", "mean")
        if z.stage == 2 and isinstance(op, str) and op.lower() == "sum":
            return  # no averaging: the checks are skipped
        pf = _as_float(raw.get("gradient_predivide_factor"))
        if pf is not None and pf != 1.0:
            yield self.finding("/gradient_predivide_factor",
                               f"gradient_predivide_factor {pf} is not supported with ZeRO stage {z.stage} reduce-scatter: "
                               "deepspeed.initialize asserts it is 1.0",
                               "remove gradient_predivide_factor (or set zero_optimization.reduce_scatter to false)")
        if _as_bool(raw.get("prescale_gradients")):
            yield self.finding("/prescale_gradients",
                               f"prescale_gradients is not supported with ZeRO stage {z.stage} reduce-scatter: "
                               "deepspeed.initialize asserts it is false",
                               "set prescale_gradients to false (or zero_optimization.reduce_scatter to false)")
