"""Issue 21: ZeRO-1's CPU-offload kept-clone runs by C-level columns give what the dict and the monotonic
stack give.

``advisor.ledger.state._zero12_offload_kept_runs`` (ZeRO-1 under CPU optimizer offload, one param group)
took u per flush position from a dict keyed by flat start (9e5 entries a plan at 1e5 layers) and each rank's
non-owner moments from a monotonic stack with a Python query per owned extra-large gradient (3e5 of them at
1e5 layers and RBS = h^2). ``state.ZERO12_KEPT_COLS`` (default on) makes u an array and the non-owner moments
a prefix and a suffix maximum; False keeps the dict and the stack. Compared on seeded random layered models
(heads and tails of varied sizes, nn.Linear pairs, sometimes a tensor of no elements) and configs (ZeRO-1,
CPU optimizer offload, buckets from a few elements to more than the model -- gradients over the bucket in
most cases --, overlap_comm on/off, GA 1-3, W 1-9): the reduce terms per rank and the whole ledger, equal both
ways. The periodic shortcut (``ZERO12_OFFLOAD_PERIOD``) is off in both so the walks run; and the column path
must be taken in most cases (a change that makes it always decline fails here).
"""

from __future__ import annotations

import random

import pytest

from advisor.ledger import state
from advisor.model.inventory import Inventory, TensorSpec
from tests.offload_identity import terms_and_ledger


def _model(rng: random.Random) -> Inventory:
    layers = rng.choice([1, 2, 3, 5, 17, 64, rng.randint(2, 300)])
    h = rng.choice([2, 4, 8, 16])
    head = [TensorSpec("model.embed_tokens.weight", (rng.randint(1, 400), h), True, 0, "bf16")]
    unit = []
    for mi in range(rng.randint(1, 6)):
        o, i = rng.randint(1, 48), rng.randint(1, 48)
        unit.append((f"m{mi}.weight", (o, i)))
        if rng.random() < 0.5:
            unit.append((f"m{mi}.bias", (o,)))
    if rng.random() < 0.1:
        unit.append(("empty", (0,)))  # a tensor of no elements: the dict's path (equal flat starts)
    tensors = list(head)
    for t in range(layers):
        tensors += [TensorSpec(f"model.layers.{t}.{n}", s, True, 0, "bf16") for n, s in unit]
    tail = [("model.norm.weight", (h,)), ("lm_head.weight", (rng.randint(1, 900), h))]
    tensors += [TensorSpec(n, s, True, 0, "bf16") for n, s in tail[:rng.randint(0, 2)]]
    return Inventory("rand", tensors, "test", {})


def _config(rng: random.Random, inv: Inventory, W: int) -> dict:
    n = sum(t.numel for t in inv.tensors)
    largest = max(t.numel for t in inv.tensors)
    in_layer = max(t.numel for t in inv.tensors if ".layers." in t.name)  # only the head / tail over the bucket
    rbs = rng.choice([1, rng.randint(1, largest), max(1, largest // 2), max(1, largest // 5), largest,
                      in_layer, in_layer, max(1, n // 7), n + 5])
    ga = rng.choice([1, 1, 2, 3])
    z = {"stage": 1, "reduce_bucket_size": rbs, "overlap_comm": rng.random() < 0.5,
         "contiguous_gradients": True, "offload_optimizer": {"device": "cpu"}}
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": ga, "train_batch_size": ga * W,
            "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": z}


def _terms(monkeypatch, seed: int, cols: bool, taken: list):
    rng = random.Random(seed)
    inv = _model(rng)
    W = rng.choice([1, 2, 3, 4, 8, 9])
    cfg = _config(rng, inv, W)
    real = state._zero12_offload_kept_runs

    def spy(*a, **k):
        taken.append(len(a) > 9 and a[9] is not None)
        return real(*a, **k)

    return terms_and_ledger(monkeypatch, inv, W, cfg, ZERO12_KEPT_COLS=cols, ZERO12_OFFLOAD_PERIOD=False,
                            _zero12_offload_kept_runs=spy)


@pytest.mark.parametrize("block", range(6))
def test_kept_cols_equal_the_stack(monkeypatch, block):
    taken: list = []
    for i in range(25):
        seed = 21_000 + block * 1000 + i
        fast = _terms(monkeypatch, seed, True, taken)
        plain = _terms(monkeypatch, seed, False, [])  # fresh inventory and layouts: no memo shared
        assert fast == plain, f"seed {seed}"
    assert sum(taken) >= len(taken) // 2, f"column path taken {sum(taken)} of {len(taken)}"
