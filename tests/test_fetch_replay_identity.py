"""The fast ZeRO-3 fetch replay (state._zero3_fetch_replay, issue 21's bounds) against the
straightforward walk it was made from (state._zero3_fetch_replay_reference): every field of the
Zero3Fetch equal on seeded random inventories, repeating and not, W 1-8, random prefetch buckets,
max live, reuse distances, persistence thresholds, allgather_sequential; layered inventories with
container modules one and two levels deep (the prefetch of state.zero3_container_steps), declared
parameterless leaves (with and without a backward hook, before a module or after the last) and nn.Sequential
layer lists (Inventory.modules)."""
import dataclasses
import random
import types

import pytest

from advisor.ledger import state
from advisor.model.inventory import Inventory, ModuleSpec, TensorSpec, module_of


def _inventory(rng: random.Random) -> Inventory:
    out = []
    if rng.random() < 0.5:  # a model of identical layers (periodic module sequence), with head and tail
        layer = [[(rng.choice(["weight", "bias", "scale"]), rng.randint(1, 300)) for _ in range(rng.randint(1, 3))]
                 for _ in range(rng.randint(1, 4))]
        # containers (state.zero3_container_steps): layers.i always; with ``top`` a model.* wrapper as HF's
        # LlamaModel, with ``sub`` a second level (layers.i.attn / layers.i.mlp) as LlamaAttention / LlamaMLP
        top = "model." if rng.random() < 0.5 else ""
        sub = rng.random() < 0.5
        out.append(TensorSpec(f"{top}embed.weight", (rng.randint(1, 500),)))
        for li in range(rng.randint(1, 12)):
            for mi, params in enumerate(layer):
                seen = set()
                for pname, n in params:
                    if pname in seen:
                        continue
                    seen.add(pname)
                    grp = ("attn." if mi < len(layer) // 2 else "mlp.") if sub else ""
                    out.append(TensorSpec(f"{top}layers.{li}.{grp}m{mi}.{pname}", (n,)))
        out.append(TensorSpec("head.weight", (rng.randint(1, 500),)))
        if rng.random() < 0.6:  # modules the names cannot spell (Inventory.modules)
            owning = list(dict.fromkeys(module_of(t.name) for t in out))
            decl = [ModuleSpec(f"{top}layers.{rng.randint(0, 11)}.act{j}" if rng.random() < 0.7 else f"drop{j}",
                               before=rng.choice(owning + [None]), backward=rng.random() < 0.7)
                    for j in range(rng.randint(1, 4))]
            if rng.random() < 0.5:
                decl.append(ModuleSpec(f"{top}layers", sequential=True))
            return Inventory("rand", out, modules=tuple(decl))
    else:  # no period: random module names (some reused out of order) and sizes
        mods = [f"mod{j}" for j in range(rng.randint(1, 15))]
        for t in range(rng.randint(1, 40)):
            out.append(TensorSpec(f"{rng.choice(mods)}.p{t}", (rng.randint(1, 400),)))
    return Inventory("rand", out)


def _zero(rng: random.Random, inv: Inventory) -> types.SimpleNamespace:
    total = sum(t.numel for t in inv.tensors)
    return types.SimpleNamespace(
        param_persistence_threshold=rng.choice([0, 0, 50, 150, 10**9]),
        model_persistence_threshold=rng.choice([10**18, 200, 1000]),
        prefetch_bucket_size=rng.choice([0, 1, 100, 400, total // 3 + 1, int(5e7)]),
        max_live_parameters=rng.choice([0, 100, 500, total // 2 + 1, int(1e9)]),
        max_reuse_distance=rng.choice([0, 50, 300, total, int(1e9)]),
        allgather_sequential=rng.random() < 0.2)


@pytest.mark.parametrize("seed", range(40))
def test_fast_replay_equals_reference(seed):
    rng = random.Random(seed)
    for _ in range(25):
        inv = _inventory(rng)
        zero = _zero(rng, inv)
        W, D = rng.randint(1, 8), rng.choice([2, 4])
        fast = state._zero3_fetch_replay(inv, zero, W, D)
        ref = state._zero3_fetch_replay_reference(inv, zero, W, D)
        assert fast == ref, (seed, [t.name for t in inv.tensors], vars(zero), W, D)


def test_reference_is_not_trivial():
    # the comparison would pass for two replays that always return zeros: the random cases gather something
    rng = random.Random(7)
    seen = set()
    for _ in range(50):
        inv = _inventory(rng)
        seen.add(state._zero3_fetch_replay_reference(inv, _zero(rng, inv), rng.randint(2, 8), 2).forward[0])
    assert len(seen) > 10


@pytest.mark.parametrize("seed", range(10))
def test_all_persistent_equals_reference(seed):
    # every parameter persistent (the default 1e5 threshold on a small model): the fast path skips the
    # later iteration's walk; the GA-2 refetch, which gathers them again, is still walked
    rng = random.Random(1000 + seed)
    for _ in range(20):
        inv = _inventory(rng)
        zero = _zero(rng, inv)
        zero.param_persistence_threshold, zero.model_persistence_threshold = 10**9, 10**18
        W, D = rng.randint(1, 8), rng.choice([2, 4])
        fast = state._zero3_fetch_replay(inv, zero, W, D)
        assert fast == state._zero3_fetch_replay_reference(inv, zero, W, D)


def _same_as_reference_and_off(monkeypatch, switch: str, inv: Inventory, zero, W: int, D: int) -> None:
    """The fast fetch replay equals the reference walk's in every field, and the fast walk's with the state switch
    ``switch`` off (on a copy of the inventory with a new tensor list: the original's memo holds the walk with the
    switch on)."""
    fast = state._zero3_fetch_replay(inv, zero, W, D)
    assert fast == state._zero3_fetch_replay_reference(inv, zero, W, D), (vars(zero), W, D)
    with monkeypatch.context() as m:
        m.setattr(state, switch, False)
        assert fast == state._zero3_fetch_replay(dataclasses.replace(inv, tensors=list(inv.tensors)), zero, W, D)


@pytest.mark.parametrize("seed", range(12))
def test_refetch_held_pass_equals_reference(seed, monkeypatch):
    # the GA-2 refetch whose prefetch stops (n at max live, or no bucket) with parameters still in flight ends in
    # one pass (state.REFETCH_HELD_PASS): every field equals the reference walk's and the fast walk's with the
    # pass off, and the pass is taken in these cases (else this compares nothing new)
    rng = random.Random(3000 + seed)
    monkeypatch.setattr(state, "PASSES", __import__("collections").Counter())
    for _ in range(50):
        inv = _inventory(rng)
        zero = _zero(rng, inv)
        if rng.random() < 0.5:  # persistent layers, max live reached: the 1e5-layer default's regime
            zero.param_persistence_threshold = 10**9
            zero.max_live_parameters = rng.randint(1, sum(t.numel for t in inv.tensors))
        W, D = rng.randint(2, 8), rng.choice([2, 4])
        _same_as_reference_and_off(monkeypatch, "REFETCH_HELD_PASS", inv, zero, W, D)
    assert state.PASSES["refetch_held"]


def _equal_run_inventory(rng: random.Random) -> Inventory:
    """Nameless one-tensor modules (t0, t1, ...: no layer repeat) with a run of 64-200 equal numels between a
    few random ones, the way generate's 100,000-tensor limit is one run."""
    sizes = [rng.randint(1, 400) for _ in range(rng.randint(0, 6))]
    sizes += [rng.randint(1, 400)] * rng.randint(64, 200)
    sizes += [rng.randint(1, 400) for _ in range(rng.randint(0, 6))]
    return Inventory("eq", [TensorSpec(f"t{i}", (n,)) for i, n in enumerate(sizes)])


@pytest.mark.parametrize("seed", range(16))
def test_equal_run_as_layers_equals_reference(seed, monkeypatch):
    # state.ZERO3_EQUAL_RUN: the longest run of equal one-tensor modules is taken as identical layers for the
    # period skips (state._zero3_equal_run); every field equals the reference walk's and the walk's with the run
    # off, with prefetch buckets of a fraction of a parameter to several, max live and reuse distances reached
    # or not, and the skips are taken (else this compares nothing new)
    rng = random.Random(9100 + seed)
    monkeypatch.setattr(state, "PASSES", __import__("collections").Counter())
    for _ in range(12):
        inv = _equal_run_inventory(rng)
        zero = _zero(rng, inv)
        n = max(t.numel for t in inv.tensors)
        if rng.random() < 0.7:
            zero.prefetch_bucket_size = rng.choice([1, n // 2 + 1, n, 3 * n + 1, 7 * n])
            zero.max_live_parameters = rng.choice([10**9, 20 * n, 50 * n + 3])
            zero.max_reuse_distance = rng.choice([0, 10 * n, 10**9])
        W, D = rng.randint(2, 8), rng.choice([2, 4])
        assert state._zero3_equal_run(inv, [t.numel for t in inv.tensors], len(inv.tensors)) is not None
        _same_as_reference_and_off(monkeypatch, "ZERO3_EQUAL_RUN", inv, zero, W, D)
    assert sum(v for k, v in state.PASSES.items() if "periods" in k or "frozen" in k), state.PASSES


@pytest.mark.parametrize("seed", range(8))
def test_refetch_same_start_equals_reference(seed, monkeypatch):
    # state.REFETCH_SAME_START: where every persistent parameter is the first module's (or none is), the GA-2
    # refetch is the run's forward, not a second walk; every field equals the reference walk's and the fast walk's
    # with the shortcut off, on cases where it applies (none persistent) and where it does not
    rng = random.Random(9900 + seed)
    applied = 0
    for _ in range(25):
        inv = _inventory(rng) if rng.random() < 0.5 else _equal_run_inventory(rng)
        zero = _zero(rng, inv)
        if rng.random() < 0.6:
            zero.param_persistence_threshold = 0
        W, D = rng.randint(2, 8), rng.choice([2, 4])
        keep = state.zero3_persistent(inv, zero)
        applied += not any(keep)
        fast = state._zero3_fetch_replay(inv, zero, W, D)
        assert fast == state._zero3_fetch_replay_reference(inv, zero, W, D), (seed, vars(zero), W, D)
        with monkeypatch.context() as m:
            m.setattr(state, "REFETCH_SAME_START", False)
            assert fast == state._zero3_fetch_replay(Inventory("r", list(inv.tensors), modules=inv.modules), zero, W, D)
    assert applied
