"""Issue 21: the ZeRO-1/2 backward transients read the prefix and suffix maxima of their flush moments at the flushes
they need (``state._RangeMaxAt``), not from two whole columns.

``advisor.ledger.state.zero12_backward_transients`` reads max(A[:f + 1]) and max(A[f + 1:]) at each rank range's
first flush f; ``state.ZERO12_RANGE_MAX_AT`` (default on) computes those few, False the whole
``itertools.accumulate`` columns (the reference). Compared on seeded random layered models and ZeRO-1/2 configs
(buckets from one element to more than the model, overlap_comm, CPU offload or none, GA 1-3, W 1-9): the
transients per rank and the whole ledger, equal both ways; and ``_RangeMaxAt`` itself against max over slices by
hand, at given points and at others read later.
"""

from __future__ import annotations

import random

import pytest

from advisor.config.effective import effective_config
from advisor.ledger import state
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.model.inventory import Inventory, TensorSpec


def _model(rng: random.Random) -> Inventory:
    h = rng.choice([2, 4, 8, 16])
    tensors = [TensorSpec("model.embed_tokens.weight", (rng.randint(1, 400), h), True, 0, "bf16")]
    unit = [(f"m{mi}.weight", (rng.randint(1, 48), rng.randint(1, 48))) for mi in range(rng.randint(1, 5))]
    for t in range(rng.choice([1, 2, 5, 17, rng.randint(2, 200)])):
        tensors += [TensorSpec(f"model.layers.{t}.{n}", s, True, 0, "bf16") for n, s in unit]
    tensors.append(TensorSpec("lm_head.weight", (rng.randint(1, 900), h), True, 0, "bf16"))
    return Inventory("rand", tensors, "test", {})


def _run(monkeypatch, seed: int, on: bool):
    rng = random.Random(seed)
    inv = _model(rng)
    W = rng.choice([1, 2, 3, 4, 8, 9])
    n = sum(t.numel for t in inv.tensors)
    largest = max(t.numel for t in inv.tensors)
    ga = rng.choice([1, 1, 2, 3])
    z = {"stage": rng.choice([1, 2]), "overlap_comm": rng.random() < 0.5, "contiguous_gradients": True,
         "reduce_bucket_size": rng.choice([1, largest, max(1, largest // 3), max(1, n // 7), n + 5])}
    if rng.random() < 0.5:
        z["offload_optimizer"] = {"device": "cpu"}
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": ga, "train_batch_size": ga * W,
           "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": z}
    with monkeypatch.context() as m:
        m.setattr(state, "ZERO12_RANGE_MAX_AT", on)
        ec = effective_config(cfg)
        led = compute_ledger(Plan(ec, inv, Cluster(world_size=W)))
        wrapper = state.select_optimizer(ec)[0]
        bt = state.zero12_backward_transients(ec, inv, state.zero12_layouts(ec, inv, W, wrapper), W, ga)
    return (bt.bounds, bt.values), repr([(rl.rank, list(rl.ranks.ranges), rl.entries) for rl in led.ranks])


@pytest.mark.parametrize("block", range(4))
def test_range_max_at_equals_the_columns(monkeypatch, block):
    for i in range(40):
        seed = 21_700 + block * 1000 + i
        assert _run(monkeypatch, seed, True) == _run(monkeypatch, seed, False), f"seed {seed}"


@pytest.mark.parametrize("seed", range(50))
def test_range_max_at_by_hand(seed):
    rng = random.Random(seed)
    A = [rng.randint(0, 50) for _ in range(rng.randint(1, 40))]
    pts = {rng.randrange(len(A)) for _ in range(rng.randint(0, 6))}
    pre, suf = state._RangeMaxAt(A, False, pts), state._RangeMaxAt(A, True, pts)
    for i in list(pts) + list(range(len(A))):
        assert pre[i] == max(A[:i + 1]) and suf[i] == max(A[i:]), (A, pts, i)
