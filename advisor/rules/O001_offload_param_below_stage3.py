"""O001 offload-param-below-stage3: parameter offload below ZeRO stage 3 is ignored.

What DeepSpeed does: only ZeRO-3 partitions (and can offload) parameters. At stages 0, 1 and 2
``zero_optimization.offload_param`` (and its deprecated boolean form ``cpu_offload_param``) is
parsed, validated and then never read: the full 16-bit model stays on every GPU, with no warning
(verified on 0.19.8: identical allocations with and without the block).

Why it matters: the user budgets GPU memory as if the parameters lived in host memory, and the
job runs out of memory, or the config is copied around as "the offload config".

Anti-pattern::

    "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}

Fix: use stage 3 if the parameters must leave the GPU; otherwise delete the block::

    "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import zero_raw, zptr


@register
class OffloadParamBelowStage3(Rule):
    code = "O001"
    reads_stage = True
    name = "offload-param-below-stage3"
    severity = "warning"

    def check(self, ctx: LintContext):
        z = ctx.effective.zero
        if z.stage == 3 or z.offload_param.device == "none":
            return
        key = "offload_param" if isinstance(zero_raw(ctx.raw).get("offload_param"), dict) else "cpu_offload_param"
        yield self.finding(zptr(key), f"offload_param (device {z.offload_param.device}) is ignored at ZeRO stage "
                                      f"{z.stage}: only stage 3 offloads parameters; the full 16-bit model stays on "
                                      "every GPU",
                           f"set zero_optimization.stage to 3 to offload parameters, or remove zero_optimization.{key}")
