"""O007 partial-offload-below-stage3: offload_optimizer.ratio < 1 below ZeRO stage 3.

What DeepSpeed does: ``offload_optimizer.ratio`` (Twin-Flow partial offload: the fraction of
sub-groups stepped on the CPU) exists only in ZeRO-3. ``DeepSpeedZeroConfig``'s validator
``offload_ratio_check`` (``runtime/zero/config.py``) asserts "Partial offloading only supported
for ZeRO Stage 3." when ``ratio < 1`` at any other stage, so the config is rejected at
``deepspeed.initialize`` (pydantic ``ValidationError``), whatever the device. Releases before
0.12.3 have neither the key nor the validator: there V001 reports ``ratio`` as an unknown key.

Anti-pattern::

    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}

Fix: use stage 3 for partial offload, or drop ``ratio`` (full offload)::

    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}
"""

from __future__ import annotations

from advisor.config.versions import key_status
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import zero_raw, zptr


#: The key, added with its validator in 0.12.3 (runtime/zero/offload_config.py ratio,
#: runtime/zero/config.py offload_ratio_check; both absent in 0.12.2's sdist).
RATIO = "/zero_optimization/offload_optimizer/ratio"


@register
class PartialOffloadBelowStage3(Rule):
    code = "O007"
    reads_stage = True
    name = "partial-offload-below-stage3"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        z = ctx.effective.zero
        b = zero_raw(ctx.raw).get("offload_optimizer")
        if z.stage == 3 or not isinstance(b, dict) or "ratio" not in b or z.offload_optimizer.ratio >= 1.0:
            return
        if ctx.release is not None and key_status(RATIO, ctx.release.checked).state == "absent":
            return  # before 0.12.3 there is no ratio (nor its validator): V001 reports the unknown key
        yield self.finding(zptr("offload_optimizer", "ratio"),
                           f"offload_optimizer.ratio {z.offload_optimizer.ratio} (partial offload) is only supported "
                           f"with ZeRO stage 3: DeepSpeed rejects the config at stage {z.stage}",
                           "remove offload_optimizer.ratio (full offload), or set zero_optimization.stage to 3")
