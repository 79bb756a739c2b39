"""ZeRO-2 under CPU optimizer offload: the per-rank flush terms of
``state.zero12_offload_reduce_terms`` against every rank and every tensor walked directly from the
rule its docstring cites (DeepSpeed 0.19.8 ``stage_1_and_2.py`` l.1443-1446 clone of a gradient
larger than reduce_bucket_size, l.1886 / l.2172 the fp64 copy of a rank's slice of each flushed
gradient): per rank r, the flush of parameter p that holds the most, s_{p,r} x 8 + c_p bytes
(s_{p,r} = elements of p in r's slice [r P, (r+1) P), c_p = n_p x D when n_p > RBS, a rank owning
none of p still holding p's clone), and h = max over extra-large p of 2 x n_p x D.

Issue 21 made the function keep one update per rank (their maximum) instead of one per tensor;
this checks it still gives every rank the value of the per-tensor walk."""

from __future__ import annotations

import random

import pytest

from advisor.config.effective import effective_config
from advisor.ledger import state


def _walk(layouts, W: int, rbs: int, D: int) -> list[tuple[int, int, int]]:
    h = max((2 * n * D for lay in layouts for n in lay.numels if n > rbs), default=0)
    out = []
    for r in range(W):
        best = (0, 0, 0)  # (bytes at the flush, clone bytes, slice elements)
        for lay in layouts:
            lo, hi = r * lay.P, (r + 1) * lay.P
            for a, n in zip(lay.starts, lay.numels):
                if n <= 0:
                    continue
                s = max(0, min(a + n, hi) - max(a, lo))
                c = n * D if n > rbs else 0
                if s or c:
                    best = max(best, (s * 8 + c, c, s))
        out.append((best[2], best[1], h))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_offload_reduce_terms_match_the_per_rank_per_tensor_walk(seed: int) -> None:
    rng = random.Random(seed)
    W = rng.choice((1, 2, 3, 7, 8, 16, 61))
    rbs = rng.choice((50, 200, 1000))
    groups = [[rng.choice((1, 7, 64, 199, 256, 1500, rng.randint(1, 3000))) for _ in range(rng.randint(1, 40))]
              for _ in range(rng.randint(1, 3))]
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                           "zero_optimization": {"stage": 2, "reduce_bucket_size": rbs,
                                                 "offload_optimizer": {"device": "cpu"}}})
    wrapper = state.select_optimizer(ec)[0]
    assert state.zero12_offload_xl_clone_modeled(ec, wrapper)
    D = 2
    layouts = [state.zero12_group_layout(tuple(g), W, D, bool(rng.getrandbits(1))) for g in groups]
    got = state.zero12_offload_reduce_terms(ec, layouts, W, wrapper)
    if any(n > rbs for g in groups for n in g):
        assert got.to_list() == _walk(layouts, W, rbs, D)
    # asked again for the same layouts: the same runs
    assert state.zero12_offload_reduce_terms(ec, layouts, W, wrapper).to_list() == got.to_list()


@pytest.mark.parametrize("seed", range(30))
def test_save_16bit_gather_moment_matches_the_module_walk(seed: int) -> None:
    """``timeline.save_16bit_gather_moment``: _zero3_consolidated_16bit_state_dict (engine.py
    l.5631-5700) gathers one module's own parameters at a time, modules in order of first
    appearance; the moment is the first module with the largest sum ceil(n_i / W) x W, with the
    elements of the modules before it already in rank 0's state dict."""
    from advisor.ledger.timeline import save_16bit_gather_moment
    from advisor.model.inventory import Inventory, TensorSpec

    rng = random.Random(seed)
    W = rng.choice((1, 2, 3, 8))
    mods = [f"m{i}" for i in range(rng.randint(1, 8))]
    ts = [TensorSpec(f"{rng.choice(mods)}.{k}.w" if rng.random() < 0.2 else f"{rng.choice(mods)}.w{k}",
                     (rng.randint(1, 50),)) for k in range(rng.randint(1, 30))]
    inv = Inventory("t", ts)
    order: list[str] = []
    gathered: dict[str, int] = {}
    own: dict[str, int] = {}
    for t in ts:
        m = state.module_of(t.name)
        if m not in order:
            order.append(m)
        gathered[m] = gathered.get(m, 0) + -(-t.numel // W) * W
        own[m] = own.get(m, 0) + t.numel
    top = max(gathered.values())
    best = next(i for i, m in enumerate(order) if gathered[m] == top)
    assert save_16bit_gather_moment(inv, W) == (sum(own[m] for m in order[:best]), own[order[best]], order[best])
