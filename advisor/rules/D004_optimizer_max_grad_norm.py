"""D004 optimizer-max-grad-norm: max_grad_norm in optimizer.params.

What DeepSpeed does: ``engine._configure_basic_optimizer`` raises ``ValueError: 'max_grad_norm'
is not supported as an optimizer parameter, please switch to using the deepspeed parameter
'gradient_clipping'`` at ``deepspeed.initialize``. Clipping is configured at the top level, and
in 0.19.8 ``gradient_clipping`` defaults to **1.0** (older releases: 0, no clipping).

Anti-pattern::

    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "max_grad_norm": 1.0}}

Fix::

    "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import section


@register
class OptimizerMaxGradNorm(Rule):
    code = "D004"
    name = "optimizer-max-grad-norm"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        params = section(ctx.raw, "optimizer", "params")
        if "max_grad_norm" not in params:
            return
        v = params["max_grad_norm"]
        yield self.finding("/optimizer/params/max_grad_norm",
                           "max_grad_norm is not accepted in optimizer.params: deepspeed.initialize raises ValueError",
                           f"remove optimizer.params.max_grad_norm and set top-level \"gradient_clipping\": {v!r}"
                           if isinstance(v, (int, float)) and not isinstance(v, bool) else
                           "remove optimizer.params.max_grad_norm and set top-level gradient_clipping")
