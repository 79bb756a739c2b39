"""Issue 21: the ZeRO-1/2 CPU-offload reduce terms from identical layers' repeating unit give what the
per-tensor walks give.

``advisor.ledger.state.zero12_offload_reduce_terms`` with flushes replayed walks every tensor
(``_zero12_offload_kept_runs`` at ZeRO-1, ``_zero12_offload_reduce_runs`` at ZeRO-2): ~2 s a candidate
fix at 1e5 layers. ``_zero12_offload_periodic_runs`` answers it per rank and bucket from one layer's
largest gradient where ``model.parallel.layer_repeat`` finds identical layers (no extra-large gradient,
one param group). ``state.ZERO12_OFFLOAD_PERIOD = False`` selects the walks. Compared on seeded random
models of 2-300 identical layers (heads and tails of varied sizes, nn.Linear pairs) and configs (ZeRO-1/2
with CPU optimizer offload, bucket sizes from a few elements to more than the model, overlap_comm, GA 1-3,
W 1-9): the reduce terms per rank and the whole ledger, equal both ways; and the fast path must be taken
in most cases (a change that makes it always decline fails here, as one that takes a wrong period does
in the comparison).
"""

from __future__ import annotations

import random

import pytest

from advisor.config.effective import effective_config
from advisor.ledger import state
from advisor.model.inventory import Inventory, TensorSpec
from tests.offload_identity import terms_and_ledger


def _model(rng: random.Random) -> Inventory:
    layers = rng.choice([2, 3, 5, 17, 64, rng.randint(2, 300)])
    h = rng.choice([2, 4, 8, 16])
    head = [TensorSpec("model.embed_tokens.weight", (rng.randint(1, 400), h), True, 0, "bf16")]
    unit = []
    for mi in range(rng.randint(1, 6)):
        o, i = rng.randint(1, 48), rng.randint(1, 48)
        unit.append((f"m{mi}.weight", (o, i)))
        if rng.random() < 0.5:
            unit.append((f"m{mi}.bias", (o,)))
    tensors = list(head)
    for t in range(layers):
        tensors += [TensorSpec(f"model.layers.{t}.{n}", s, True, 0, "bf16") for n, s in unit]
    tail = [("model.norm.weight", (h,)), ("lm_head.weight", (rng.randint(1, 900), h))]
    tensors += [TensorSpec(n, s, True, 0, "bf16") for n, s in tail[:rng.randint(0, 2)]]
    return Inventory("rand", tensors, "test", {})


def _config(rng: random.Random, inv: Inventory, W: int) -> dict:
    n = sum(t.numel for t in inv.tensors)
    largest = max(t.numel for t in inv.tensors)
    rbs = rng.choice([largest, largest + 1, 2 * largest, max(1, n // 7), max(1, n // 3), n + 5,
                      rng.randint(largest, max(largest, n))])
    ga = rng.choice([1, 1, 2, 3])
    z = {"stage": rng.choice([1, 1, 2]), "reduce_bucket_size": rbs, "overlap_comm": rng.random() < 0.4,
         "contiguous_gradients": True, "offload_optimizer": {"device": "cpu"}}
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": ga, "train_batch_size": ga * W,
            "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": z}


def _terms(monkeypatch, seed: int, period: bool):
    rng = random.Random(seed)
    inv = _model(rng)
    W = rng.choice([1, 1, 2, 3, 4, 8, 9])
    cfg = _config(rng, inv, W)
    return terms_and_ledger(monkeypatch, inv, W, cfg, ZERO12_OFFLOAD_PERIOD=period)


@pytest.mark.parametrize("block", range(6))
def test_periodic_offload_terms_equal_the_walks(monkeypatch, block):
    for i in range(25):
        seed = block * 1000 + i
        fast = _terms(monkeypatch, seed, True)
        walk = _terms(monkeypatch, seed, False)  # fresh inventory and layouts: no memo shared
        assert fast == walk, seed


def test_the_period_is_taken(monkeypatch):
    """Most of the seeded cases above answer from the repeating unit (not the walk's fallback)."""
    took = {"yes": 0, "all": 0}
    real = state._zero12_offload_periodic_runs

    def counted(*a, **k):
        got = real(*a, **k)
        took["all"] += 1
        took["yes"] += got is not None
        return got
    monkeypatch.setattr(state, "_zero12_offload_periodic_runs", counted)
    for seed in range(60):
        _terms(monkeypatch, seed, True)
    assert took["all"] >= 30 and took["yes"] >= 0.8 * took["all"], took


def _one_group(rng: random.Random) -> Inventory:
    """One param group whose tensors often end exactly on, or one element past, a partition boundary."""
    T = rng.randint(1, 60)
    base = rng.choice([1, 2, 7, 16, 64])
    if rng.random() < 0.4:  # small tensors: some start one element before a partition bound and cross it
        sizes = [rng.choice([0, 1, 2, 2, 3]) for _ in range(T)]
    else:
        sizes = [rng.choice([0, 1, base, base + 1, 2 * base - 1, 5 * base, rng.randint(1, 9 * base)]) for _ in range(T)]
    return Inventory("one", [TensorSpec(f"layers.{i}.w", (n,), True, 0, "bf16") for i, n in enumerate(sizes)],
                     "test", {})


@pytest.mark.parametrize("block", range(4))
def test_one_group_replay_columns_equal_the_walk(monkeypatch, block):
    """The flush replay's bucket flat copies and rank ranges (state._zero12_flush_replay_compute): one param
    group's bucket answered from the layout's monotone columns and its runs of tensors whole in one rank
    folded (ZERO12_COLUMNS) equal the per-tensor block walk, W 1-9, tensors around the partition bounds,
    ZeRO-1/2, fp32 communication (the run's cast: its elements count), parameter alignment on and off."""
    for i in range(60):
        seed = block * 1000 + i
        outs = []
        for columns in (True, False):
            rng = random.Random(seed)
            inv = _one_group(rng)
            W = rng.choice([1, 2, 3, 4, 5, 8, 9])
            n = max(1, sum(t.numel for t in inv.tensors))
            cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                   "zero_optimization": {"stage": rng.choice([1, 2]), "overlap_comm": rng.random() < 0.5,
                                         "reduce_bucket_size": rng.choice([1, 3, max(1, n // 5), max(1, n // 2), n + 1]),
                                         "parameter_alignment": rng.random() < 0.5}}
            if rng.random() < 0.5:
                cfg["communication_data_type"] = "fp32"
            with monkeypatch.context() as m:
                m.setattr(state, "ZERO12_COLUMNS", columns)
                ec = effective_config(cfg)
                layouts = state.zero12_layouts(ec, inv, W, state.select_optimizer(ec)[0])
                got = state._zero12_flush_replay_compute(ec, inv, layouts, W)
            outs.append((list(got[10]), list(got[9].triples()), list(got[11])))
        assert outs[0] == outs[1], seed
