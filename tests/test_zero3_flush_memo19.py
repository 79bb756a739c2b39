"""Issue 21 (perf19): the columns the ZeRO-3 reduce-flush pass (state._zero3_reduce_flush_bytes) now keeps per tensor
list -- each position's whole arriving gradient and autograd sibling in bytes, per (linear, D), and each position's
module and module-start flag, per linear, with the mod_of they came from -- give what the gradient-by-gradient walk
(state._zero3_reduce_flush_walk, the reference of tests/test_reduce_flush_identity.py) gives, when one inventory is
asked many times with other D, linear, bucket sizes, W and gathered bytes (generate's plans share one tensor list);
and two asks that differ only in D, or only in linear, get different answers, each the walk's."""
import random

import pytest

from advisor.ledger import state
from advisor.model.inventory import Inventory, TensorSpec


def _inventory(rng: random.Random) -> Inventory:
    out = [TensorSpec("embed.weight", (rng.randint(1, 50), rng.randint(1, 8)))]
    for li in range(rng.randint(1, 8)):
        for mi in range(rng.randint(1, 3)):
            o, i = rng.randint(1, 20), rng.randint(1, 20)
            if rng.random() < 0.5:  # an nn.Linear: weight and bias (autograd siblings without memory_efficient_linear)
                out.append(TensorSpec(f"layers.{li}.m{mi}.weight", (o, i)))
                out.append(TensorSpec(f"layers.{li}.m{mi}.bias", (o,)))
            else:
                out.append(TensorSpec(f"layers.{li}.m{mi}.scale", (rng.randint(1, 300),)))
    out.append(TensorSpec("lm_head.weight", (rng.randint(1, 50), 8)))
    return Inventory("rand", out)


def _gathered(inv: Inventory, rng: random.Random, W: int, copy: bool) -> tuple:
    mod_of = state._zero3_replay_inputs(inv, type("Z", (), {"param_persistence_threshold": 0,
                                                            "model_persistence_threshold": 10**18})(), W)[4]
    if copy:  # another module index (each tensor its own module) in another object: not the kept one's columns
        mod_of = list(range(len(mod_of)))
    M = max(mod_of, default=-1) + 1
    return (mod_of, tuple(rng.choice([0, rng.randint(0, 5000)]) for _ in range(M)),
            tuple(rng.choice([0, rng.randint(0, 3000)]) for _ in range(M)), rng.choice([0, rng.randint(0, 6000)]))


@pytest.mark.parametrize("seed", range(15))
def test_kept_columns_equal_walk(seed):
    rng = random.Random(1900 + seed)
    inv = _inventory(rng)
    ns = [t.numel for t in inv.tensors if t.trainable]
    for _ in range(12):  # one inventory, many asks: later ones read the columns earlier ones kept
        W, C, D = rng.randint(1, 8), rng.choice([2, 4]), rng.choice([2, 4])
        rbs = rng.choice([max(ns), max(ns) + rng.randint(0, 50), sum(ns) // 2 + 1, 10**9])
        rs, norm, linear = rng.random() < 0.4, rng.random() < 0.4, rng.random() < 0.5
        gathered = _gathered(inv, rng, W, rng.random() < 0.3) if rng.random() < 0.7 else None
        fast = state._zero3_reduce_flush_bytes(inv, W, C, rbs, True, rs, norm, gathered, linear, None, D=D)
        walk = state._zero3_reduce_flush_walk(inv, W, C, rbs, True, rs, norm, gathered, linear, None, D=D)
        assert fast == walk, (seed, W, C, D, rbs, rs, norm, linear)


def _pair_inventory() -> Inventory:
    # nn.Linear pairs (weight, bias) in 6 layers of other sizes (no identical layers: the column pass): without memory_efficient_linear the bias's hook fires with the
    # weight's gradient whole beside it (state.zero3_autograd_siblings), so linear changes the arriving bytes
    return Inventory("pairs", [TensorSpec(f"layers.{i}.fc.{p}", s) for i in range(6)
                               for p, s in (("weight", (40 + i, 30)), ("bias", (40 + i,)))])


@pytest.mark.parametrize("changed", ["D", "linear"])
def test_asks_differing_in_one_key_get_their_own_columns(changed):
    inv = _pair_inventory()
    W, C, rbs = 2, 2, 10**9  # one bucket: every instant but the epilogue's is an arrival, whole bytes x D
    asks = [dict(D=2, linear=False), dict(D=4, linear=False)] if changed == "D" else \
        [dict(D=2, linear=False), dict(D=2, linear=True)]
    got = []
    for a in asks:
        fast = state._zero3_reduce_flush_bytes(inv, W, C, rbs, True, False, False, None, a["linear"], None, D=a["D"])
        assert fast == state._zero3_reduce_flush_walk(inv, W, C, rbs, True, False, False, None, a["linear"], None,
                                                      D=a["D"])
        got.append(fast)
    assert got[0] != got[1]
