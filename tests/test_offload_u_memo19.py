"""Issue 21 (perf19): the u columns ``state.zero12_offload_reduce_terms`` keeps on a flush replay
(``_Flushes.memo``, ``state.ZERO12_OFFLOAD_U_MEMO``) give the ledgers the per-plan derivation gives.

u (the bytes of the gradients not yet moved at a flush, per flush and per flush position) reads the replay (its
triggers, hook order, numel prefix sums, hooked elements) and three inputs beside it: the bytes D of the gradients
the offload reduce moves (``zero12_offload_grad_bytes``: fp32 under ``grad_accum_dtype`` fp32), the model dtype's
bytes Dm (the trigger's autograd sibling) and whether the boundary holds every gradient
(``zero12_boundary_holds_all``: ZeRO-1 with ``overlap_comm`` at GA > 1). The memo is keyed by all three. Here
plans sharing one replay are computed one after the other on one inventory (later plans read what earlier ones
kept) and compared with the same plan on a fresh inventory with the memo off; and for D and held, two plans that
share a replay and differ in that input alone must keep two different u columns, each the unmemoised one.
"""

from __future__ import annotations

import random

import pytest

from advisor.ledger import state
from advisor.model.inventory import Inventory, TensorSpec
from test_shared_walks_identity17b import _ledger  # one ledger-to-text for the identity tests


def _tensors(rng: random.Random) -> list:
    tensors = []
    for t in range(rng.randint(3, 40)):
        o, i = rng.randint(1, 60), rng.randint(1, 60)
        tensors.append(TensorSpec(f"m{t}.weight", (o, i), rng.random() > 0.05, 0, "bf16"))
        if rng.random() < 0.5:
            tensors.append(TensorSpec(f"m{t}.bias", (o,), True, 0, "bf16"))
    if not any(t.trainable for t in tensors):
        tensors.append(TensorSpec("last.weight", (8, 8), True, 0, "bf16"))
    return tensors


def _config(W: int, stage: int, rbs: int, ga: int, overlap: bool, accum32: bool) -> dict:
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": ga, "train_batch_size": ga * W,
           "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": stage, "reduce_bucket_size": rbs, "overlap_comm": overlap,
                                 "contiguous_gradients": True, "offload_optimizer": {"device": "cpu"}}}
    if accum32:
        cfg["data_types"] = {"grad_accum_dtype": "fp32"}
    return cfg


def _recording(monkeypatch) -> list:
    made = []
    orig = state._Flushes.__init__

    def init(self, *a):
        orig(self, *a)
        made.append(self)
    monkeypatch.setattr(state._Flushes, "__init__", init)
    return made


def _fresh(cfg: dict, tensors: list, W: int, monkeypatch) -> str:
    with monkeypatch.context() as m:
        m.setattr(state, "ZERO12_OFFLOAD_U_MEMO", False)
        return _ledger(Inventory("u", list(tensors), "test", {}), cfg, W)


@pytest.mark.parametrize("seed", range(10))
def test_kept_u_equals_per_plan(monkeypatch, seed):
    rng = random.Random(1900 + seed)
    made = _recording(monkeypatch)
    for _ in range(3):
        tensors = _tensors(rng)
        W = rng.choice([1, 2, 3, 4, 8])
        largest = max(t.numel for t in tensors if t.trainable)
        rbs = rng.choice([max(1, largest // 2), largest, 2 * largest + 1, 4 * largest])
        stage, overlap = rng.choice([1, 2]), rng.random() < 0.5
        shared = Inventory("u", list(tensors), "test", {})
        for ga, accum32 in ((1, False), (2, False), (1, True), (3, True), (2, False), (1, False)):
            cfg = _config(W, stage, rbs, ga, overlap, accum32)
            assert _ledger(shared, cfg, W) == _fresh(cfg, tensors, W, monkeypatch), (seed, cfg)
    assert any(k[0] == "offload_u" for f in made for k in f.memo if isinstance(k, tuple))


def _u_entries(made: list) -> dict:
    out = {}
    for f in made:
        for k, v in f.memo.items():
            if isinstance(k, tuple) and k[0] in ("offload_u", "offload_upos"):
                out.setdefault(id(f), {})[k] = list(v)
    return out


# W 4, 30 tensors of 300 elements and 30 of 17, RBS 1,000: several flushes of a few gradients each
_TENSORS = [TensorSpec(f"m{i}.weight", (20, 15), True, 0, "bf16") for i in range(30)] + \
           [TensorSpec(f"n{i}.bias", (17,), True, 0, "bf16") for i in range(30)]


@pytest.mark.parametrize("a, b, key_at", [
    # held: ZeRO-1 overlap_comm at GA 1 (each hook moves its gradient) vs GA 2 (every gradient whole at the boundary)
    ((1, True, False), (2, True, False), 3),
    # D: the reduce's gradients in bf16 vs in fp32 (grad_accum_dtype fp32 under offload)
    ((1, False, False), (1, False, True), 1),
])
def test_u_memo_keys_plans_apart(monkeypatch, a, b, key_at):
    """Two plans that share a replay and differ in one keyed input alone: two u columns on the replay, not equal,
    and each plan's ledger the unmemoised one."""
    W, rbs = 4, 1000
    made = _recording(monkeypatch)
    inv = Inventory("u", list(_TENSORS), "test", {})
    ca, cb = (_config(W, 1, rbs, ga, ov, acc) for ga, ov, acc in (a, b))
    la, lb = _ledger(inv, ca, W), _ledger(inv, cb, W)
    assert la == _fresh(ca, _TENSORS, W, monkeypatch)
    assert lb == _fresh(cb, _TENSORS, W, monkeypatch)
    shared = [e for e in _u_entries(made).values() if len([k for k in e if k[0] == "offload_u"]) == 2]
    assert shared, _u_entries(made)  # one replay holds both plans' u
    (ka, ua), (kb, ub) = [(k, v) for k, v in shared[0].items() if k[0] == "offload_u"]
    assert ka[key_at] != kb[key_at] and ka[:key_at] + ka[key_at + 1:] == kb[:key_at] + kb[key_at + 1:]
    assert ua != ub


# --- the runs kept by content (state.ZERO12_OFFLOAD_CONTENT_MEMO) -------------------------------------------------


def _counting_walks(monkeypatch) -> list:
    calls = [0]
    walk = state._zero12_offload_reduce_runs

    def counted(*a, **k):
        calls[0] += 1
        return walk(*a, **k)
    monkeypatch.setattr(state, "_zero12_offload_reduce_runs", counted)
    return calls


def _fresh_all(cfg: dict, tensors: list, W: int, monkeypatch) -> str:
    with monkeypatch.context() as m:
        m.setattr(state, "ZERO12_OFFLOAD_U_MEMO", False)
        m.setattr(state, "ZERO12_OFFLOAD_CONTENT_MEMO", False)
        return _ledger(Inventory("u", list(tensors), "test", {}), cfg, W)


@pytest.mark.parametrize("seed", range(6))
def test_runs_kept_by_content_equal_fresh_ones(monkeypatch, seed):
    """A second inventory of the same numbers under other names (a pipeline stage like another) reads the first's
    runs; its ledgers are those of a fresh inventory with nothing kept."""
    rng = random.Random(1950 + seed)
    calls = _counting_walks(monkeypatch)
    tensors = _tensors(rng)
    renamed = [TensorSpec("s1." + t.name, t.shape, t.trainable, t.group, t.dtype) for t in tensors]
    W = rng.choice([1, 2, 3, 4, 8])
    largest = max(t.numel for t in tensors if t.trainable)
    rbs = rng.choice([max(1, largest // 2), largest, 2 * largest + 1])
    first, second = Inventory("u", list(tensors), "test", {}), Inventory("u", list(renamed), "test", {})
    for ga, overlap, accum32 in ((1, False, False), (2, True, False), (1, True, True), (2, False, True)):
        cfg = _config(W, 1, rbs, ga, overlap, accum32)
        _ledger(first, cfg, W)
        before = calls[0]
        got = _ledger(second, cfg, W)
        assert calls[0] == before, cfg  # no walk: the first inventory's runs
        assert got == _fresh_all(cfg, renamed, W, monkeypatch), (seed, cfg)


def test_content_key_holds_every_column():
    """Layouts that differ in one tensor's size, and u columns that differ in one position, give different runs by
    the walk itself, and so must different keys."""
    W, rbs, D = 4, 1000, 2
    numels = [300] * 30 + [17] * 30
    lays = [state.zero12_group_layout(numels, W, D, True)]
    other = [state.zero12_group_layout(numels[:5] + [2000] + numels[6:], W, D, True)]
    up = [4000 - 10 * k for k in range(len(numels))]
    up2 = list(up)
    up2[40] = 10 ** 6

    def runs(ls, u):
        return list(state._zero12_offload_reduce_runs(ls, W, rbs, D, zero1=True, hook_clone=False, upos=u).pieces())
    key = state._offload_runs_content_key
    assert runs(lays, up) != runs(other, up)
    assert key(lays, W, rbs, D, True, False, None, up) != key(other, W, rbs, D, True, False, None, up)
    assert runs(lays, up) != runs(lays, up2)
    assert key(lays, W, rbs, D, True, False, None, up) != key(lays, W, rbs, D, True, False, None, up2)
    assert key(lays, W, rbs, D, True, False, None, up) == key(list(lays), W, rbs, D, True, False, None, list(up))
