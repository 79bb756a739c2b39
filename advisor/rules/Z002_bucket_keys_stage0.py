"""Z002 bucket-keys-stage0: ZeRO communication settings without ZeRO.

What DeepSpeed does: at stage 0 (no ``zero_optimization`` block, or ``stage: 0``) gradients are
all-reduced by the engine in fixed buckets of ``MEMORY_OPT_ALLREDUCE_SIZE`` (5e8 elements,
``engine.py``); ``reduce_bucket_size``, ``allgather_bucket_size``, ``overlap_comm``,
``contiguous_gradients``, ``reduce_scatter``, ``allgather_partitions``,
``round_robin_gradients`` and ``use_multi_rank_bucket_allreduce`` belong to the ZeRO optimizers
and are not read.

Why it matters: mostly harmless leftovers of a template, but a user tuning them to fix memory or
speed at stage 0 changes nothing.

Anti-pattern::

    "zero_optimization": {"stage": 0, "reduce_bucket_size": 5e8, "overlap_comm": true}

Fix: delete the keys (or use ZeRO stage 1 or 2, where they apply)::

    "zero_optimization": {"stage": 0}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import is_auto, zero_raw, zptr

ZERO_COMM_KEYS = ("reduce_bucket_size", "allgather_bucket_size", "overlap_comm", "contiguous_gradients",
                  "reduce_scatter", "allgather_partitions", "round_robin_gradients", "use_multi_rank_bucket_allreduce")


@register
class BucketKeysStage0(Rule):
    code = "Z002"
    reads_stage = True
    name = "bucket-keys-stage0"
    severity = "info"

    def check(self, ctx: LintContext):
        if ctx.effective.zero.stage != 0:
            return
        zr = zero_raw(ctx.raw)
        for k in ZERO_COMM_KEYS:
            if k in zr and not is_auto(zr[k]):
                yield self.finding(zptr(k), f"{k} has no effect at ZeRO stage 0 (the engine all-reduces gradients "
                                            "in its own fixed buckets)",
                                   f"remove zero_optimization.{k}, or use zero_optimization.stage 1 or 2")
