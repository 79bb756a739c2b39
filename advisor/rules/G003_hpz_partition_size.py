"""G003 hpz-partition-size: ZeRO++ hpZ ``zero_hpz_partition_size`` that does not fit the launch.

What DeepSpeed does: ZeRO-3 with ``zero_hpz_partition_size`` h > 1 builds a secondary
parameter partition within groups of h consecutive ranks
(``utils/groups.py:_create_zero_param_parallel_group``, called from ``runtime/zero/stage3.py``).
The group size it uses is ``min(h, world_size)`` (l. 944: ``zero_param_parallel_size_ =
min(group_size, world_size)``), asserting ``_ensure_divisibility(world_size, that size)``:
"{world} is not divisible by {size}" (an error). So h larger than the world is one group of
all the ranks: on one node (h 16 on 8 ranks) nothing straddles, and the ledger's secondary
partition uses the same min (``ledger/state.py``).
The groups are meant to be the ranks of one node (Wang et al. 2023, ZeRO++ arXiv:2306.10209
section 3.2: the secondary copy is gathered over intra-node links); when h does not divide the
ranks per node, a group straddles two nodes and the backward all-gather goes over the
inter-node network, which is what hpZ exists to avoid (a warning).

Anti-pattern: ``"zero_hpz_partition_size": 16`` with 8 GPUs per node.

Fix: ``zero_hpz_partition_size`` = the GPUs per node (or a divisor of it).
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class HpzPartitionSize(Rule):
    code = "G003"
    reads_stage = True
    name = "hpz-partition-size"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        z = ctx.effective.zero
        h = z.zero_hpz_partition_size
        if z.stage != 3 or not h or h <= 1:
            return
        ptr = "/zero_optimization/zero_hpz_partition_size"
        ws = ctx.world_size
        # groups.py l. 944: the group is min(h, world_size) ranks
        he = min(h, ws) if ws else h
        if ws and ws % he:
            yield self.finding(ptr, f"zero_hpz_partition_size {h} does not divide the world size {ws}: DeepSpeed "
                                    f"asserts \"{ws} is not divisible by {he}\" (utils/groups.py:"
                                    "_create_zero_param_parallel_group)",
                               "set zero_hpz_partition_size to the GPUs per node", hpz=h, world_size=ws)
            return
        cl = ctx.cluster
        g = getattr(cl, "gpus_per_node", None)
        if g and ws and ws <= g:
            return  # one node holds every rank: a group of min(h, world) ranks cannot straddle nodes
        if g and g % he:
            yield self.finding(ptr, f"zero_hpz_partition_size {h} does not divide the {g} ranks per node: hpZ's "
                                    "secondary partition groups straddle nodes, so its all-gather crosses the "
                                    "network (ZeRO++ section 3.2)",
                               f"set zero_hpz_partition_size to {g} or a divisor of it", severity="warning",
                               hpz=h, gpus_per_node=g)
