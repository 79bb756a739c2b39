"""Issue 21: ZeRO-1's CPU-offload kept-clone runs without an extra-large gradient, by the shortcut.

``advisor.ledger.state._zero12_offload_kept_runs`` walks ~20 columns over every tensor (clone bytes, clones
before each, positions, owned runs, prefix and suffix maxima); with one param group, every tensor with elements
and none over the bucket (no clone at all), ``state.ZERO12_KEPT_NO_XL`` (default on) takes each rank's largest
(8 s + u, u, s) over the tensors meeting its slice directly (``_zero12_offload_kept_no_xl``). Compared with the
walk (the switch off) on seeded random layered models and configs (ZeRO-1, CPU optimizer offload, buckets from
the largest tensor to more than the model, overlap_comm on/off, GA 1-3, W 1-9): the reduce terms per rank and the
whole ledger, equal both ways (ZeRO-2 too: ``state.ZERO12_OFFLOAD_NO_XL2`` gives the shortcut u per hook position
in place of the dict keyed by flat start, where hook order is the flat order reversed); and on the walk itself with u per position chosen to tie (the ties in 8 s + u must
be broken by the larger u, as the walk's packed maximum breaks them). The periodic shortcut is off so the walk runs.
"""

from __future__ import annotations

import random

import pytest

from advisor.config.effective import effective_config
from advisor.ledger import state
from advisor.model.inventory import Inventory, TensorSpec
from tests.offload_identity import terms_and_ledger


def _model(rng: random.Random) -> Inventory:
    layers = rng.choice([1, 2, 3, 5, 17, 64, rng.randint(2, 300)])
    h = rng.choice([2, 4, 8, 16])
    head = [TensorSpec("model.embed_tokens.weight", (rng.randint(1, 400), h), True, 0, "bf16")]
    unit = []
    same = rng.random() < 0.3  # every layer tensor one size: ties in 8 s + u
    for mi in range(rng.randint(1, 6)):
        o, i = (16, 16) if same else (rng.randint(1, 48), rng.randint(1, 48))
        unit.append((f"m{mi}.weight", (o, i)))
        if rng.random() < 0.5 and not same:
            unit.append((f"m{mi}.bias", (o,)))
    tensors = list(head)
    for t in range(layers):
        tensors += [TensorSpec(f"model.layers.{t}.{n}", s, True, 0, "bf16") for n, s in unit]
    tail = [("model.norm.weight", (h,)), ("lm_head.weight", (rng.randint(1, 900), h))]
    tensors += [TensorSpec(n, s, True, 0, "bf16") for n, s in tail[:rng.randint(0, 2)]]
    return Inventory("rand", tensors, "test", {})


def _config(rng: random.Random, inv: Inventory, W: int, stage: int = 1) -> dict:
    n = sum(t.numel for t in inv.tensors)
    largest = max(t.numel for t in inv.tensors)
    rbs = rng.choice([largest, largest, largest + 1, max(largest, n // 7), n + 5, max(1, largest - 1),
                      max(1, largest // 2)])
    ga = rng.choice([1, 1, 2, 3])
    z = {"stage": stage, "reduce_bucket_size": rbs, "overlap_comm": rng.random() < 0.5,
         "contiguous_gradients": True, "offload_optimizer": {"device": "cpu"}}
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": ga, "train_batch_size": ga * W,
            "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": z}


def _terms(monkeypatch, seed: int, fast: bool, taken: list, stage: int = 1):
    rng = random.Random(seed)
    inv = _model(rng)
    W = rng.choice([1, 2, 3, 4, 8, 9])
    cfg = _config(rng, inv, W, stage)
    real = state._zero12_offload_kept_no_xl

    def spy(*a, **k):
        taken.append(1)
        return real(*a, **k)

    switch = "ZERO12_KEPT_NO_XL" if stage == 1 else "ZERO12_OFFLOAD_NO_XL2"
    return terms_and_ledger(monkeypatch, inv, W, cfg, **{switch: fast}, ZERO12_OFFLOAD_PERIOD=False,
                            _zero12_offload_kept_no_xl=spy)


@pytest.mark.parametrize("block", range(4))
def test_no_xl_shortcut_equals_the_walk(monkeypatch, block):
    taken: list = []
    for i in range(50):
        seed = 21_500 + block * 1000 + i
        fast = _terms(monkeypatch, seed, True, taken)
        plain = _terms(monkeypatch, seed, False, [])  # fresh inventory and layouts: no memo shared
        assert fast == plain, f"seed {seed}"
    assert len(taken) >= 20, f"the shortcut ran {len(taken)} times"


@pytest.mark.parametrize("block", range(2))
def test_zero2_no_xl_shortcut_equals_the_walk(monkeypatch, block):
    """ZeRO-2 (``ZERO12_OFFLOAD_NO_XL2``): u per hook position and the shortcut, against the dict and the walk."""
    taken: list = []
    for i in range(50):
        seed = 22_500 + block * 1000 + i
        fast = _terms(monkeypatch, seed, True, taken, stage=2)
        plain = _terms(monkeypatch, seed, False, [], stage=2)
        assert fast == plain, f"seed {seed}"
    assert len(taken) >= 20, f"the shortcut ran {len(taken)} times"


@pytest.mark.parametrize("seed", range(300))
def test_no_xl_shortcut_breaks_ties_as_the_walk(monkeypatch, seed):
    """The walk itself on one group, flat or hook order, u per position chosen to tie: tensors of 1-6 elements,
    u a random small multiple of 8 bytes, the exact complement of 8 s (every first field equal) or none."""
    rng = random.Random(seed)
    W = rng.choice([1, 2, 3, 4, 5, 7])
    inv = Inventory("ties", [TensorSpec(f"t{j}", (rng.randint(1, 6),), True, 0, "bf16")
                             for j in range(rng.randint(1, 40))], "test", {})
    cfg = {"train_micro_batch_size_per_gpu": 1, "train_batch_size": W, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}}
    lay = state.zero12_layouts(effective_config(cfg), inv, W, "DeepSpeedZeroOptimizer")[0]
    rbs, D = rng.randint(6, 9), 2
    T = len(lay.numels)
    mode = seed % 3
    upos = ([8 * rng.randint(0, 3) for _ in range(T)] if mode == 1 else
            [8 * (7 - n) for n in lay.numels] if mode == 2 else None)
    hook = rng.random() < 0.5
    if hook and upos is not None and mode == 2:
        upos.reverse()  # position k is tensor T - 1 - k
    seq = state._FlushOrder(None, lay.starts[::-1], lay.numels[::-1]) if hook else None
    got = {}
    for fast in (True, False):
        monkeypatch.setattr(state, "ZERO12_KEPT_NO_XL", fast)
        items = ((0, lay.P, a, n) for a, n in zip(lay.starts, lay.numels))
        r = state._zero12_offload_kept_runs([lay], W, rbs, D, {}, items, hook, True, seq, upos)
        got[fast] = (r.bounds, r.values)
    assert got[True] == got[False]
