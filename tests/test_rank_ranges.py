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

