"""P006 lamb-static-loss-scale: the LAMB optimizer with a static fp16 loss scale.

What DeepSpeed does: ``engine._do_sanity_check`` asserts ``DeepSpeed lamb optimizer requires
dynamic loss scaling`` when ``optimizer.type`` is Lamb and ``fp16.loss_scale`` is not 0. The
check reads ``fp16.loss_scale`` even when fp16 is disabled, so a leftover static scale in a
bf16/fp32 config fails too.

Anti-pattern::

    "optimizer": {"type": "Lamb", "params": {"lr": 1e-3}},
    "fp16": {"enabled": true, "loss_scale": 1024}

Fix: dynamic loss scaling (0, the default)::

    "fp16": {"enabled": true, "loss_scale": 0}
"""

from __future__ import annotations

from advisor.config.effective import _as_float
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import section


@register
class LambStaticLossScale(Rule):
    code = "P006"
    name = "lamb-static-loss-scale"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        if ctx.effective.optimizer.family != "lamb":
            return
        ls = _as_float(section(ctx.raw, "fp16").get("loss_scale"))
        if ls is None or ls == 0:
            return
        yield self.finding("/fp16/loss_scale", f"Lamb requires dynamic loss scaling but fp16.loss_scale is {ls:g} "
                                               "(static): deepspeed.initialize asserts",
                           "set fp16.loss_scale to 0 (dynamic) or remove it")
