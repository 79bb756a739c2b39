"""O009 partial-offload-moves-nothing: offload_optimizer.ratio splits no sub-group.

What DeepSpeed does: under ZeRO-3 partial optimizer offload (Twin-Flow, ``offload_optimizer``
``device: cpu`` with ``ratio`` below 1) the split is made per sub-group, not per element:
``runtime/zero/stage3.py`` l.1100-1108 (_create_fp32_partitions) sends sub-group i of a rank's n to
'cpu' when i >= int((1 - ratio) x n), else to the accelerator. Sub-groups are the rank's partitions
appended until ``sub_group_size`` elements (_create_fp16_sub_groups), so with the default
``sub_group_size`` (1e9) a model of up to 1e9 x world-size parameters has one sub-group per rank,
and int((1 - ratio) x 1) = 0 for every ratio above 0: every sub-group is on the host, exactly as at
ratio 1, and the ratio changes nothing (int() of a float: ratio 0.7 over 3 sub-groups,
int(0.9000000000000001) = 0, too). At the other end int((1 - ratio) x n) = n (ratio 0) keeps every
sub-group's fp32 master weights, fp32 gradients and Adam moments on the accelerator, stepped by the
backup torch AdamW (l.1249-1258), yet the offload code path stays: ``self.offload_optimizer`` is
set from the config (l.824), so ``self.device`` is 'cpu' (l.333) and the rank's gradient partition
buffer ``grad_partitions_flat_buffer`` is made on the host (l.791-793), each micro-step's gradient
is added through it (l.2030-2038) and copied into the accelerator fp32 gradient at the boundary
(_offload_grad_partition_at_boundary, l.1443-1458). Offload is then not "none": only the gradient
partitions are on the host. The finding needs the model and the world size (n); without them it is
silent, except at ratio 0, where every n gives n.

With ``device: nvme`` the same split is made (l.1100-1108 maps the sub-groups whenever the optimizer
is offloaded), so int((1 - ratio) x n) = 0 moves nothing there either. And more often: a swappable
sub-group (S x 4 >= max(1 MiB, ``aio.block_size``), ``_swappable_optimizer_subgroup`` l.1264-1269) is
tested first (l.1117) and its fp32 master made an NVMe swap file whatever ``subgroup_to_device`` says;
only a sub-group under the swap size is put on the device it maps to (l.1157-1161). The first
int((1 - ratio) x n) sub-groups, when swapped, are then stepped by the backup torch AdamW on their
swapped-in host copy (``_prepare_sub_group`` l.2702-2708, ``_optimizer_step`` l.1249-1258), their
moments in that optimizer's host state (confirmed on an H100, ``benchmarks/results/gpu_twin_flow_nvme-h100.json``):
no sub-group reaches the accelerator. Under NVMe the rule fires when no sub-group is on the accelerator
(``advisor.ledger.state.twin_flow_on_accelerator``, the ledger's placement), ratio 0 included; it needs
the model and the world size (which sub-groups are swapped), and without them it is silent. Its fix is
``device: cpu``, where the ratio splits as written (with a ``sub_group_size`` that splits, where
int((1 - ratio) x n) is 0), or ratio 1.

Anti-pattern (llama-3-8b, world size 8: one sub-group of 1,003,782,656 elements per rank)::

    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5},
                          "sub_group_size": 1e9}

Fix: a ``sub_group_size`` that makes enough sub-groups for int((1 - ratio) x n) >= 1 (the
finding computes one and checks it against the model's partitions), or, at ratio 0,
``offload_optimizer.device: none`` (the block's other keys then have no effect: removed, O005);
under ``device: nvme``, ``device: cpu`` without the NVMe-only keys (``nvme_path``...; see above), and
at ratio 0 under NVMe ``ratio: 1`` (device cpu would keep every sub-group on the accelerator, the
ratio-0 finding again). A ratio outside [0, 1] is refused by DeepSpeed (``offload_config.py`` l.99,
reported by S004); the rule is silent on it::

    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5},
                          "sub_group_size": 500000000}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import offload_switch_set, zero3_partial_offload_ratio, zptr

SOURCE = "stage3.py l.1100-1108"
NVME_SOURCE = ("stage3.py l.1117-1121: a swappable sub-group's fp32 master is an NVMe file whatever subgroup_to_device "
               "says; l.1157-1161 only the others go to their device")
#: Most candidate sub_group_size values tried for the fix (each is one O(tensors) pass).
MAX_TRIES = 40


def backup_count(ratio: float, n: int) -> int:
    """Sub-groups of n kept on the accelerator at ``ratio``: int((1 - ratio) x n), the int() of a
    float as ``stage3.py`` l.1105 computes it (ledger: :func:`advisor.ledger.state.twin_flow_backup_stepped`)."""
    return int((1 - ratio) * n)


def splitting_sub_group_size(inventory, W: int, ratio: float) -> tuple[int, int] | None:
    """A ``sub_group_size`` (elements) whose ZeRO-3 sub-groups of this model at W ranks put at least
    one sub-group on the accelerator and one on the host at ``ratio`` (0 < ratio < 1), and its
    sub-group count n; None where even one tensor per sub-group does not. Candidates: the rank's
    trainable partition sum over k sub-groups, k doubling from the least n with int((1 - ratio) x n)
    >= 1, rounded down to two significant digits where that still splits; each checked with DeepSpeed's
    greedy grouping (:func:`advisor.ledger.state.zero3_sub_groups`)."""
    from advisor.ledger.state import _zero3_sub_groups, zero3_partition_sums
    from advisor.rules._bytes import two_sig_floor

    def count(s: int) -> int:
        return len(_zero3_sub_groups(inventory, W, s))

    def splits(n: int) -> bool:
        return 1 <= backup_count(ratio, n) < n

    total = zero3_partition_sums(inventory, W)[1]
    if total <= 0:
        return None
    m = 2
    while not splits(m) and m < 1 << 40:
        m += 1 if m < 64 else m
    k = m
    for _ in range(MAX_TRIES):
        s = max(1, total // k)
        n = count(s)
        if splits(n):
            r = two_sig_floor(s)
            if r != s and splits(nr := count(r)):
                return r, nr
            return s, n
        if s == 1:
            return None
        k *= 2
    return None


@register
class PartialOffloadMovesNothing(Rule):
    code = "O009"
    reads_stage = True
    name = "partial-offload-moves-nothing"
    severity = "warning"

    def check(self, ctx: LintContext):
        z = ctx.effective.zero
        r = zero3_partial_offload_ratio(ctx, ("cpu", "nvme"))
        if r is None:
            return
        from advisor.ledger.state import zero3_sub_groups
        ptr = zptr("offload_optimizer", "ratio")
        if ctx.effective.offload_optimizer_effective == "nvme":
            yield from self._nvme(ctx, r, ptr)
            return
        if r <= 0.0:
            yield self.finding(
                ptr,
                "offload_optimizer.ratio 0: int((1 - 0) x n) = n, every sub-group's fp32 master weights, fp32 "
                f"gradients and optimizer moments stay on the accelerator ({SOURCE}), stepped by the backup torch "
                "AdamW; only the gradient partitions are on the host (self.device 'cpu', stage3.py l.333, "
                "grad_partitions_flat_buffer l.791-793) and pass through it each micro-step (l.2030-2038)",
                "set zero_optimization.offload_optimizer.device to none (no host copy of the gradients; the "
                "block's other keys, ratio included, are then read by nothing, so remove them), or a ratio above 0 "
                "to offload some sub-groups",
                set=offload_switch_set(ctx, {"offload_optimizer": "none"}))
            return
        if ctx.inventory is None or not ctx.dp_world_size:
            return  # n is unknown without the model and the world size
        W = ctx.dp_world_size
        n = len(zero3_sub_groups(ctx.inventory, W, z.sub_group_size))
        cut = backup_count(r, n)
        if cut != 0:
            return  # the ratio moves some sub-groups (cut == n needs ratio 0, handled above)
        msg = (f"offload_optimizer.ratio {r:g} moves no sub-group to the accelerator: each rank has {n} "
               f"sub-group{'s' if n != 1 else ''} (sub_group_size {z.sub_group_size} at world size {W}) and "
               f"int((1 - {r:g}) x {n}) = 0 ({SOURCE}), so every sub-group is offloaded, as at ratio 1")
        fix = splitting_sub_group_size(ctx.inventory, W, r)
        if fix is None:
            yield self.finding(ptr, msg, "no sub_group_size splits this model's partitions so that "
                               f"int((1 - {r:g}) x n) >= 1: lower the ratio, or drop it (full offload)",
                               sub_groups=n)
            return
        s, n2 = fix
        yield self.finding(
            ptr, msg,
            f"set zero_optimization.sub_group_size to {s} ({n2} sub-groups per rank, "
            f"int((1 - {r:g}) x {n2}) = {backup_count(r, n2)} on the accelerator)",
            set=[f"zero_optimization.sub_group_size={s}"], sub_groups=n, suggested_sub_group_size=s,
            suggested_sub_groups=n2)

    def _nvme(self, ctx: LintContext, r: float, ptr: str):
        """``device: nvme``: fires when no sub-group is on the accelerator (needs the model and W)."""
        if ctx.inventory is None or not ctx.dp_world_size:
            return  # which sub-groups are swapped is unknown without the model and the world size
        from advisor.ledger.state import swap_threshold_bytes, twin_flow_on_accelerator, zero3_sub_groups
        ec = ctx.effective
        W = ctx.dp_world_size
        sgs = zero3_sub_groups(ctx.inventory, W, ec.zero.sub_group_size)
        n = len(sgs)
        smin = swap_threshold_bytes(ec)
        swapped = [sg.numel * 4 >= smin for sg in sgs]
        if n == 0 or any(twin_flow_on_accelerator(ec, n, swapped)):
            return
        cut = backup_count(r, n)
        where = (f"each rank has {n} sub-group{'s' if n != 1 else ''} (sub_group_size {ec.zero.sub_group_size} at "
                 f"world size {W})")
        if cut == 0:
            msg = (f"offload_optimizer.ratio {r:g} moves no sub-group to the accelerator: {where} and "
                   f"int((1 - {r:g}) x {n}) = 0 ({SOURCE}), so every sub-group is offloaded to NVMe, as at ratio 1")
        else:
            k = sum(swapped[:cut])
            msg = (f"offload_optimizer.ratio {r:g} moves no sub-group to the accelerator under device nvme: {where}, "
                   f"int((1 - {r:g}) x {n}) = {cut} map to the accelerator ({SOURCE}), but "
                   f"{'all ' if k > 1 else ''}{k} of them {'are' if k != 1 else 'is'} swapped (S x 4 >= {smin:,} B) and "
                   f"stay{'s an' if k == 1 else ''} NVMe file{'' if k == 1 else 's'} ({NVME_SOURCE}): the backup torch AdamW steps "
                   f"{'them' if k != 1 else 'it'} on the host copy swapped in for the step (stage3.py _optimizer_step "
                   "l.1249-1258), its moments in host memory, where DeepSpeedCPUAdam would step and swap them at ratio 1")
        data: dict = {"sub_groups": n, "mapped_to_accelerator": cut}
        if cut == n:  # ratio 0: under device cpu every sub-group would stay on the accelerator, O009's ratio-0 case
            yield self.finding(
                ptr, msg, "set zero_optimization.offload_optimizer.ratio to 1 (every sub-group on NVMe, as now, "
                "stepped by DeepSpeedCPUAdam with its moments swapped too), or, to keep every sub-group on the "
                "accelerator as ratio 0 asks, offload_optimizer.device none (nothing offloaded; remove the block's "
                "other keys)", set=["zero_optimization.offload_optimizer.ratio=1"], **data)
            return
        # under device cpu the ratio splits as written; with int(...) = 0 it needs a sub_group_size that splits.
        # The block is rewritten without its NVMe-only keys (nvme_path...), which device cpu does not read (O005)
        sets = offload_switch_set(ctx, {"offload_optimizer": "cpu"})
        fix = ("set zero_optimization.offload_optimizer.device to cpu and remove its NVMe-only keys (nvme_path, "
               "buffer_count, pipeline_read/write, fast_init), where the ratio keeps ")
        if cut == 0:
            split = splitting_sub_group_size(ctx.inventory, W, r)
            if split is None:
                yield self.finding(ptr, msg, "no sub_group_size splits this model's partitions so that "
                                   f"int((1 - {r:g}) x n) >= 1: lower the ratio, or drop it (full offload)", **data)
                return
            s, n2 = split
            sets.append(f"zero_optimization.sub_group_size={s}")
            fix += (f"int((1 - {r:g}) x {n2}) = {backup_count(r, n2)} sub-group(s) on the accelerator with "
                    f"sub_group_size {s} ({n2} sub-groups per rank)")
            data["suggested_sub_group_size"] = s
        else:
            fix += f"the first {cut} sub-group(s) on the accelerator"
        yield self.finding(ptr, msg, fix + "; or drop the ratio (ratio 1: every sub-group on NVMe, stepped by "
                           "DeepSpeedCPUAdam)", set=sets, **data)
