"""Z003 sub-group-size-below-stage3: sub_group_size outside ZeRO-3.

What DeepSpeed does: ``zero_optimization.sub_group_size`` splits each rank's ZeRO-3 partition
into sub-groups that are stepped (and, with NVMe offload, swapped) one at a time
(``zero/stage3.py``). ZeRO stages 0-2 never read it: they step each param group's flat
partition in one piece.

Why it matters: a user lowering ``sub_group_size`` at stage 1/2 to shrink the step's memory
peak or the offload buffers gets no change.

Anti-pattern::

    "zero_optimization": {"stage": 2, "sub_group_size": 1e9}

Fix: remove it (or move to stage 3 if sub-grouped stepping was intended).
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import is_auto, zero_raw, zptr


@register
class SubGroupSizeBelowStage3(Rule):
    code = "Z003"
    reads_stage = True
    name = "sub-group-size-below-stage3"
    severity = "warning"

    def check(self, ctx: LintContext):
        stage = ctx.effective.zero.stage
        zr = zero_raw(ctx.raw)
        if stage == 3 or "sub_group_size" not in zr or is_auto(zr["sub_group_size"]):
            return
        yield self.finding(zptr("sub_group_size"), f"sub_group_size only applies to ZeRO stage 3; it is ignored "
                                                   f"at stage {stage}",
                           "remove zero_optimization.sub_group_size, or set zero_optimization.stage to 3")
