"""M002 optimizer-swap-pool: the NVMe optimizer swap pool is as large as what it swaps.

What DeepSpeed does: with ZeRO-3 and ``offload_optimizer.device: "nvme"`` the optimizer state
(fp32 master, exp_avg, exp_avg_sq) of each *sub-group* lives in swap files and is swapped in
and out every step through a pool of ``offload_optimizer.buffer_count`` pinned buffers, each
sized to the **largest** sub-group: buffer_count x A_256(max_k S_k) x 4 bytes
(``swap_tensor/optimizer_utils.py:184-189``, reference 5.2). Sub-groups are built per rank by
appending ZeRO-3 partitions (ceil(numel / W)) until ``sub_group_size`` is reached, so with the
default 1e9 and a model of up to a billion partition elements per rank there is a single
sub-group, and the pool (4 x the whole partition x 4 B) is *larger* than the optimizer state on
NVMe (3 x partition x 4 B): NVMe offload then saves no host memory at all compared with
``device: "cpu"``, and the pinned pool may not fit in RAM.

Anti-pattern (1.3B model, one GPU)::

    "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}, "sub_group_size": 1e9

Fix: a sub_group_size well below the per-rank partition, so the pool holds a few slices::

    "sub_group_size": 100000000
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.findings import literal
from advisor.rules._util import zptr


@register
class OptimizerSwapPool(Rule):
    code = "M002"
    reads_stage = True
    name = "optimizer-swap-pool"
    severity = "warning"
    needs_model = True

    def check(self, ctx: LintContext):
        sp = swap_pool_shrink(ctx.effective, ctx.inventory, ctx.dp_world_size)
        if sp is None:
            return
        z = ctx.effective.zero
        bc, suggest = sp["buffer_count"], sp["suggest"]
        yield self.finding(
            zptr("sub_group_size"),
            f"the pinned optimizer swap pool ({bc} x {sp['largest']} elements x 4 B = {{pool_bytes:bytes}}) is at least "
            f"the optimizer state it swaps to NVMe ({{nvme_state_bytes:bytes}}): sub_group_size {z.sub_group_size} "
            f"makes {sp['groups']} sub-group(s) per rank at world size {ctx.dp_world_size}",
            f"set zero_optimization.sub_group_size to {suggest} (pool about {{new_pool_bytes:bytes}})",
            sizes=dict(pool_bytes=sp["pool"], nvme_state_bytes=sp["on_nvme"], new_pool_bytes=sp["new_pool"]),
            pool_bytes=sp["pool"], nvme_state_bytes=sp["on_nvme"], sub_groups=sp["groups"],
            set=[f"zero_optimization.sub_group_size={suggest}"])


def swap_pool_shrink(ec, inventory, dp_world_size) -> dict | None:
    """M002's case and its change, or None: under ZeRO-3 NVMe optimizer offload, when the pinned swap pool
    (``offload_optimizer.buffer_count`` x the largest sub-group, aligned, x 4 B:
    ``swap_tensor/optimizer_utils.py:184-189``) is at least the optimizer state it swaps to NVMe (3 x each swapped
    sub-group x 4 B), the smaller ``sub_group_size`` to set (``suggest``, elements: 3/4 of the rank's partition over
    the buffer count, two significant digits, at least the swap threshold) and the pool it gives (``new_pool``,
    bytes). Keys: buffer_count, largest (elements), groups (sub-groups per rank), pool, on_nvme, new_pool (bytes),
    suggest. Read by the rule and by the M100 fix search (advisor.views.fixes), so both propose one change."""
    # imported here, not at module import: lint without a model never loads the ledger
    from advisor.rules._bytes import align_up, io_alignment_elems, swap_threshold_bytes, two_sig_floor, zero3_sub_groups
    if ec.offload_optimizer_effective != "nvme" or inventory is None or not dp_world_size:
        return None
    z = ec.zero
    groups = [sg.numel for sg in zero3_sub_groups(inventory, dp_world_size, z.sub_group_size)]  # S_k
    if not groups:
        return None
    m = 4  # fp32 master / moments (reference: M = 4)
    k = io_alignment_elems(ec, m)
    thr = swap_threshold_bytes(ec)
    swapped = [s for s in groups if s * m >= thr]
    if not swapped:
        return None
    pool = z.offload_optimizer.buffer_count * align_up(max(groups), k) * m
    on_nvme = sum(3 * align_up(s, k) * m for s in swapped)
    if pool < on_nvme:
        return None
    p3 = sum(groups)
    bc = max(1, z.offload_optimizer.buffer_count)
    suggest = max(two_sig_floor(3 * p3 // (4 * bc)), thr // m)
    new_pool = bc * align_up(min(suggest, max(groups)), k) * m
    return {"buffer_count": bc, "largest": max(groups), "groups": len(groups), "pool": pool, "on_nvme": on_nvme,
            "new_pool": new_pool, "suggest": suggest}
