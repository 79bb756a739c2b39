"""Issue 21: the ZeRO-3 column pass's flush_extra (state._zero3_reduce_flush_bytes) computes a bucket's flat buffer
once per distinct (held elements, count, padded elements, largest numel with the norm copy, first numel) -- what
flat_of reads -- through C-level maps (``state.ZERO3_FLUSH_BY_VALUES``, default on), not once per flush (False: the
reference). Compared on seeded random inventories: sizes drawn from a small pool (buckets that agree in part of
what flat_of reads), or runs of equal-size tensors (the 1e5-tensor
limit's shape: every bucket one gradient) mixed with other sizes, zero-size and frozen tensors, buckets below,
at and above a gradient, W 1-9, reduce_scatter, the fp64 norm copy, the casts (D, G), the predivide factor and NVMe
fp32 gradient tails: the
kept columns (each flush's flat bytes, norm elements and the bytes it adds) and the pass's answer, equal both ways;
and the switch is in the memo key (a result kept one way is not read the other). Mutants: the largest numel, the
count, the padded or the held elements left out of the key each fail; the first numel left out does not, and
cannot: own_of is nonzero only for a gradient over the bucket, always alone in it (held = its numel).
"""
import random

import pytest

from advisor.ledger import state
from advisor.model.inventory import Inventory, TensorSpec


def _inventory(rng: random.Random) -> Inventory:
    out = []
    if rng.random() < 0.5:
        # sizes drawn one by one from a small pool (zero-size included), under small buckets: many buckets of
        # different make-up that agree in some of what flat_of reads and differ in the rest
        pool = rng.sample([0, 1, 2, 3, 4, 5, 6, 8, 12, 16], rng.randint(2, 6))
        return Inventory("pool", [TensorSpec(f"p{k}", (rng.choice(pool),), trainable=rng.random() < 0.97)
                                  for k in range(rng.randint(1, 300))])
    for r in range(rng.randint(1, 6)):
        # sizes from a small pool as well (runs of near and equal sizes: a key that merges two sizes is seen)
        shape = rng.choice([(rng.randint(0, 40),), (rng.randint(1, 12), rng.randint(1, 12)), (64,), (8, 8),
                            (rng.choice([6, 7, 8, 9, 63, 65]),)])
        for k in range(rng.choice([1, 2, 3, rng.randint(4, 60)])):
            name = f"layers.{r}.m{k}.weight" if rng.random() < 0.5 else f"p{r}_{k}"
            out.append(TensorSpec(name, shape, trainable=rng.random() < 0.95))
    return Inventory("rand", out)


def _pass(inv, args, on, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(state, "ZERO3_FLUSH_BY_VALUES", on)
        got = state._zero3_reduce_flush_bytes(inv, *args[:6], None, args[6], args[10],
                                              D=args[7], G=args[8], predivide=args[9])
    cols = [(k, list(v[0].fbs), list(v[0].pms), list(v[1])) for k, v in inv._memo.items()
            if isinstance(k, tuple) and k[:1] == ("zero3_grad_flush_extra",) and k[-1] == on]
    return got, cols


@pytest.mark.parametrize("block", range(4))
def test_flat_buffers_by_values_equal_per_flush(monkeypatch, block):
    rng = random.Random(22_000 + block)
    fired = 0
    for _ in range(100):
        inv = _inventory(rng)
        ns = [t.numel for t in inv.tensors if t.trainable] or [1]
        big = max(ns)
        rbs = rng.choice([big, big + rng.randint(0, 30), max(big // 2, 1), 1, sum(ns), rng.randint(1, 2 * big + 1),
                          rng.randint(big, 3 * big + 1)])
        args = (rng.choice([1, 2, 3, 4, rng.randint(1, 9)]), rng.choice([2, 4]), rbs, True, rng.random() < 0.5, rng.random() < 0.5,
                rng.random() < 0.7, rng.choice([0, 2, 4]), rng.choice([0, 2, 4]),
                rng.choice([1.0, None, 2.0, 3.0]),
                # NVMe fp32 gradient tails (state.zero3_flush_grad_tails): with them a gradient over the bucket
                # takes the column pass, whole in its bucket (own_of)
                tuple(rng.choice([0, rng.randint(0, 900)]) for _ in inv.tensors) if rng.random() < 0.5 else None)
        off, cols_off = _pass(inv, args, False, monkeypatch)
        on, cols_on = _pass(inv, args, True, monkeypatch)
        assert on == off, (args, [(t.name, t.shape, t.trainable) for t in inv.tensors])
        assert [c[1:] for c in cols_on] == [c[1:] for c in cols_off], args
        fired += bool(cols_on)
    assert fired > 40  # the column pass (and flush_extra) ran in most cases


def test_switch_is_in_the_memo_key(monkeypatch):
    # one inventory, the pass asked with the switch off then on: two flush_extra entries, one per switch value
    inv = Inventory("k", [TensorSpec(f"p{i}", (8, 8)) for i in range(10)])  # no layer: no period skip
    args = (2, 2, 64, True, True, False, True, 0, 0, 1.0, None)
    _pass(inv, args, False, monkeypatch)
    _pass(inv, args, True, monkeypatch)
    keys = [k for k in inv._memo if isinstance(k, tuple) and k[:1] == ("zero3_grad_flush_extra",)]
    assert sorted(k[-1] for k in keys) == [False, True]
