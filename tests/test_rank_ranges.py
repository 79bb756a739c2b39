"""Ranks as ranges (advisor.ledger.ranks) and the ledger staying O(roles) at the maximum world size
(issue 21): every figure is checked against the per-rank definition computed rank by rank."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from advisor.ledger.ranks import RankSet, Runs
from advisor.ledger.state import (Cluster, Plan, compute_ledger, zero12_all_ranks, zero12_group_layout,
                                  zero12_rank_coverage)
from advisor.config.effective import effective_config
from advisor.config.validation import MAX_WORLD_SIZE
from advisor.model.inventory import Inventory, TensorSpec


def test_rankset_reads_like_the_sorted_list():
    rnd = random.Random(3)
    for _ in range(200):
        xs = sorted({rnd.randrange(60) for _ in range(rnd.randrange(0, 40))})
        s = RankSet.of(reversed(xs))
        assert list(s) == xs and len(s) == len(xs) and s == xs
        assert [s[i] for i in range(len(xs))] == xs
        assert all(s[-i] == xs[-i] for i in range(1, len(xs) + 1))
        k = rnd.randrange(0, 10)
        assert s[:k] == xs[:k] and s[2:k] == xs[2:k]
        assert all((x in s) == (x in xs) for x in range(-1, 62))
        ys = sorted({rnd.randrange(60) for _ in range(rnd.randrange(0, 40))})
        assert list(s | RankSet.of(ys)) == sorted(set(xs) | set(ys))
        assert list(s & RankSet.of(ys)) == sorted(set(xs) & set(ys))
        assert list(s.scaled(3, 7)) == [7 + 3 * x + m for x in xs for m in range(3)]
        # ranges are maximal: no two touch
        assert all(b < a2 for (_, b), (a2, _) in zip(s.ranges, s.ranges[1:]))
    with pytest.raises(IndexError):
        RankSet.of([1, 2])[2]


def test_runs_updates_and_zip_equal_rank_by_rank():
    rnd = random.Random(5)
    for _ in range(100):
        W = rnd.randrange(1, 40)
        ups = [(a, a + rnd.randrange(0, 8), rnd.randrange(100)) for a in (rnd.randrange(W) for _ in range(6))]
        hi = Runs.from_updates(W, ups, -1, "max").to_list()
        lo = Runs.from_updates(W, ups, 999, "min").to_list()
        assert hi == [max([x for a, b, x in ups if a <= r < b], default=-1) for r in range(W)]
        assert lo == [min([x for a, b, x in ups if a <= r < b], default=999) for r in range(W)]
        z = Runs.zip(Runs.of(hi), Runs.of(lo))
        assert z.to_list() == list(zip(hi, lo)) and [z[r] for r in range(W)] == list(zip(hi, lo))
        groups = z.groups()
        assert sorted(r for rs in groups.values() for r in rs) == list(range(W))
        assert all(z[r] == v for v, rs in groups.items() for r in rs)


@pytest.mark.parametrize("seed", range(6))
def test_zero12_pieces_equal_the_per_rank_coverage(seed):
    """zero12_all_ranks evaluates the coverage only where it can change; every rank of every
    piece must still have zero12_rank_coverage's (I_r, Cov_r, K_r) (§3.1 step 4)."""
    rnd = random.Random(seed)
    for _ in range(30):
        numels = [rnd.choice([0, 1, 5, 8, 31, 100, 1000, rnd.randrange(1, 5000)]) for _ in range(rnd.randrange(1, 9))]
        W = rnd.choice([1, 2, 3, 7, 16, 64, 257, 1000])
        lay = zero12_group_layout(numels, W, rnd.choice([2, 4]), rnd.random() < 0.5)
        runs = zero12_all_ranks(lay, W)
        assert runs.to_list() == [zero12_rank_coverage(lay, r) for r in range(W)], (numels, W)


def _plan(stage, W, numels, **zero):
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": stage, **zero}}
    inv = Inventory("t", [TensorSpec(f"m{i}.w", (n,)) for i, n in enumerate(numels)])
    return Plan(effective_config(cfg), inv, Cluster(world_size=W))


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_ledger_at_the_maximum_world_size_is_o_roles(stage):
    """2^20 ranks (the --world-size limit): the roles' ranks are a few ranges, every rank is
    found, and building the ledger allocates a few MB, not per-rank lists (tracemalloc; the
    per-rank version held about 2.7 GB at this size)."""
    W = MAX_WORLD_SIZE
    numels = [128256 * 4096, *([4096 * 4096, 4096, 14336 * 4096 + 3] * 8), 4096]
    tracemalloc.start()
    try:
        led = compute_ledger(_plan(stage, W, numels))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2 ** 20, peak
    assert led.world_size == W
    assert sum(len(rl.ranks.ranges) for rl in led.ranks) < 200
    for r in (0, 1, W // 3, W - 2, W - 1):
        assert r in led.role_of(r).ranks and led.rank(r).rank == r



# --- ZeRO-1/2 per-rank figures against DeepSpeed's own partition formulas, rank by rank ------
# Computed here straight from DeepSpeed 0.19.8's runtime/zero/stage_1_and_2.py, per tensor and
# per rank, without the advisor's layout helpers:
#  * DeepSpeedZeroOptimizer.__init__: param_alignment = 16 // gcd(16, element_size) with
#    parameter_alignment (else 1); after every param but the last, padding = (-offset) %
#    param_alignment; the group is flattened and padded to nccl_start_alignment_factor (2) x dp
#    (flatten_dense_tensors_aligned);
#  * get_data_parallel_partitions: partition_size = numel // dp (the padded numel divides);
#  * get_partition_info: a param is in partition r when its start lies in [r P, (r+1) P) or it
#    straddles r P;
#  * _get_flat_partition_unpadded: each such param contributes numel (less first_offset for the
#    first), capped at what is left of the partition; the rest of P is zero padding;
#  * copy_grads_in_partition: grads_in_partition holds the full numel of every param in the
#    partition (averaged_gradients = that buffer + the pads, model dtype);
#  * get_grad_norm_direct: each gradient slice cast to fp64 one at a time (max slice x 8).


def _ds_group_partition(numels, W, elem_bytes, parameter_alignment):
    """(offsets, P) of one param group, DeepSpeedZeroOptimizer.__init__ + get_data_parallel_partitions."""
    param_alignment = 16 // __import__("math").gcd(16, elem_bytes) if parameter_alignment else 1
    offsets, cur = [], 0
    for i, n in enumerate(numels):
        offsets.append(cur)
        cur += n
        cur += 0 if i == len(numels) - 1 else (-cur) % param_alignment
    alignment = 2 * W
    padded = -(-cur // alignment) * alignment
    return offsets, padded // W


def _ds_rank_figures(numels, offsets, P, r):
    """(I_r, covered_r, largest slice_r) of partition r: get_partition_info then
    _get_flat_partition_unpadded's num_elements per param."""
    start_index, end_index = P * r, P * (r + 1)
    in_part, first_offset = [], 0
    for n, cur in zip(numels, offsets):
        if start_index <= cur < end_index:
            in_part.append(n)
        elif cur < start_index < cur + n:
            in_part.append(n)
            first_offset = start_index - cur
    covered, largest = 0, 0
    for i, n in enumerate(in_part):
        num = n - first_offset if i == 0 and first_offset > 0 else n
        num = min(num, P - covered)
        covered += num
        largest = max(largest, num)
    return sum(in_part), covered, largest


def _irregular_inventory(rnd):
    """A model of repeated identical blocks between an embedding and a head, odd sizes, spread
    over two or three param groups (decay / no-decay style), a frozen tensor sometimes."""
    groups = rnd.choice([1, 2, 3])
    block = [(rnd.choice([7, 33, 255, 1000, 4097, rnd.randrange(1, 3000)]), rnd.randrange(groups))
             for _ in range(rnd.randrange(1, 5))]
    tensors = [TensorSpec("embed.w", (rnd.randrange(1, 9000),), group=0)]
    for layer in range(rnd.randrange(1, 12)):
        tensors += [TensorSpec(f"layers.{layer}.p{j}", (n,), group=g) for j, (n, g) in enumerate(block)]
    if rnd.random() < 0.3:
        tensors.append(TensorSpec("frozen.w", (rnd.randrange(1, 500),), trainable=False))
    tensors.append(TensorSpec("head.w", (rnd.randrange(1, 9000),), group=groups - 1))
    return Inventory("blocks", tensors)


@pytest.mark.parametrize("seed", range(4))
def test_zero12_ledger_equals_deepspeed_partitions_rank_by_rank(seed):
    """Every rank's ZeRO-1/2 entries equal DeepSpeed's partition formulas applied per tensor and
    per rank (above), on irregular inventories of repeated blocks: odd sizes, partition
    boundaries inside tensors, several param groups, W from 1 to over 4 x tensors (both ways the
    ledger evaluates ranks), with and without parameter_alignment."""
    rnd = random.Random(100 + seed)
    for _ in range(12):
        inv = _irregular_inventory(rnd)
        T = sum(t.trainable for t in inv.tensors)
        W = rnd.choice([1, 2, 3, 5, 8, 13, 4 * T + 3, 257])
        stage = rnd.choice([1, 2])
        dtype = rnd.choice(["bf16", "fp16"])
        align = rnd.random() < 0.3
        cfg = {"train_micro_batch_size_per_gpu": 1, dtype: {"enabled": True},
               "zero_optimization": {"stage": stage, "parameter_alignment": align}}
        led = compute_ledger(Plan(effective_config(cfg), inv, Cluster(world_size=W)))
        by_group: dict[int, list[int]] = {}
        for t in inv.tensors:
            if t.trainable:
                by_group.setdefault(t.group, []).append(t.numel)
        parts = [(ns, *_ds_group_partition(ns, W, 2, align)) for _, ns in sorted(by_group.items())]
        p_t = sum(P for _, _, P in parts)
        for r in range(W):
            items = {e.item: e.bytes for e in led.rank(r).entries}
            assert items["fp32_master"] == p_t * 4, (r, W)
            assert items["lp_params_flat"] == p_t * W * 2
            if align:  # the padded get_flat_partition path: partition sizes only
                continue
            figs = [_ds_rank_figures(ns, offs, P, r) for ns, offs, P in parts]
            inter = sum(f[0] for f in figs)
            pads = sum(P - f[1] for (_, _, P), f in zip(parts, figs))
            assert items["averaged_gradients"] == (inter + pads) * 2, (r, W, [t.numel for t in inv.tensors])
            if "grad_norm_fp64" in items:
                assert items["grad_norm_fp64"] == max(f[2] for f in figs) * 8, (r, W)
