"""Z004 allgather-bucket-odd: allgather_bucket_size not a multiple of 2 at ZeRO stage 1/2.

What DeepSpeed does: ``DeepSpeedZeroOptimizer.__init__`` (``zero/stage_1_and_2.py``) asserts
``allgather_bucket_size % nccl_start_alignment_factor == 0`` with the factor 2 (4-byte alignment
of 16-bit all-gather buffers), so an odd value fails ``deepspeed.initialize``. (The value
allocates nothing in 0.19.8: the all-gather of updated parameters is in place.)

Anti-pattern::

    "zero_optimization": {"stage": 2, "allgather_bucket_size": 200000001}

Fix: an even number, e.g. ``200000000``.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import zero_raw, zptr


@register
class AllgatherBucketOdd(Rule):
    code = "Z004"
    reads_stage = True
    name = "allgather-bucket-odd"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        z = ctx.effective.zero
        if z.stage not in (1, 2) or "allgather_bucket_size" not in zero_raw(ctx.raw):
            return
        v = z.allgather_bucket_size
        if v % 2 == 0:
            return
        yield self.finding(zptr("allgather_bucket_size"), f"allgather_bucket_size {v} is odd: ZeRO stage {z.stage} "
                                                          "asserts it is a multiple of 2",
                           f"set zero_optimization.allgather_bucket_size to {v + 1}")
