"""The column-wise ZeRO-3 reduce-flush pass (state._zero3_reduce_flush_bytes, issue 21's bounds) against
the gradient-by-gradient walk it replaces where it applies (state._zero3_reduce_flush_walk, the rules of
state.zero3_reduce_flush_bytes, whose hand-computed figures tests/test_timeline.py checks): bytes, words
and regions equal on seeded random inventories (layers and not, nn.Linear pairs, Conv1D and LayerNorm pairs
whose whole sibling gradient counts at ZeRO-3, frozen tensors, zero-size tensors), W 1-8, bucket sizes from one gradient to all of them, reduce_scatter, the fp64 norm copy, the
fp32 gradient tails an NVMe optimizer swap keeps after each flush, and with random gathered bytes per
module (the joint pass of state.zero3_backward_fetch)."""
import random

import pytest

from advisor.ledger import state
from advisor.model.inventory import Inventory, TensorSpec


def _inventory(rng: random.Random) -> Inventory:
    out = []
    if rng.random() < 0.3:
        out.append(TensorSpec("embed.weight", (rng.randint(0, 50), rng.randint(1, 8))))
    prefix = rng.choice(["layers", "h", "blocks", "model.layers", "stack"])
    for li in range(rng.randint(0, 8)):
        for mi in range(rng.randint(1, 3)):
            o = rng.randint(1, 20)
            r = rng.random()
            if r < 0.4:  # an nn.Linear: 2-D weight (out, in), 1-D bias of out
                out.append(TensorSpec(f"{prefix}.{li}.m{mi}.weight", (o, rng.randint(1, 20)),
                                      trainable=rng.random() < 0.9))
                out.append(TensorSpec(f"{prefix}.{li}.m{mi}.bias", (o,), trainable=rng.random() < 0.9))
            elif r < 0.6:  # a GPT-2 Conv1D (weight (in, out), bias of out) or a LayerNorm: autograd siblings at ZeRO-3
                w = (rng.randint(1, 20), o) if r < 0.5 else (o,)
                out.append(TensorSpec(f"{prefix}.{li}.m{mi}.weight", w, trainable=rng.random() < 0.9))
                out.append(TensorSpec(f"{prefix}.{li}.m{mi}.bias", (o,), trainable=rng.random() < 0.9))
            else:
                for pn in rng.sample(["weight", "bias", "scale"], rng.randint(1, 3)):
                    out.append(TensorSpec(f"{prefix}.{li}.m{mi}.{pn}", (rng.randint(0, 300),)))
    for t in range(rng.randint(0, 4)):
        out.append(TensorSpec(f"tail{rng.randint(0, 2)}.p{t}", (rng.randint(1, 400),)))
    if rng.random() < 0.2:
        rng.shuffle(out)  # modules out of order
    return Inventory("rand", out)


@pytest.mark.parametrize("seed", range(30))
def test_columns_equal_walk(seed):
    rng = random.Random(seed)
    checked = 0
    for _ in range(40):
        inv = _inventory(rng)
        W, C = rng.randint(1, 8), rng.choice([2, 4])
        ns = [t.numel for t in inv.tensors if t.trainable] or [1]
        # below the largest gradient too: those larger than the bucket stay their own tensor in it (walked
        # where an empty gradient comes before one of them)
        rbs = rng.choice([max(ns), max(ns) + rng.randint(0, 50), sum(ns) // 2 + 1, sum(ns), 10**9,
                          rng.randint(1, max(max(ns) - 1, 1)), max(max(ns) // 3, 1)])
        rs, norm, linear = rng.random() < 0.4, rng.random() < 0.4, rng.random() < 0.7
        # the model's and gradient partitions' dtypes (the casts of _zero3_flush_copies), the predivide factor
        D, G = rng.choice([0, 0, 2, 4]), rng.choice([0, 0, 2, 4])
        pf = rng.choice([1.0, 1.0, None, 2.0, float(W)])
        gathered = None
        if rng.random() < 0.6:
            mod_of = state._zero3_replay_inputs(inv, type("Z", (), {"param_persistence_threshold": 0,
                                                                    "model_persistence_threshold": 10**18})(),
                                                W)[4]
            M = max(mod_of, default=-1) + 1
            gathered = (mod_of, tuple(rng.choice([0, rng.randint(0, 5000)]) for _ in range(M)),
                        tuple(rng.choice([0, rng.randint(0, 3000)]) for _ in range(M)),
                        rng.choice([0, rng.randint(0, 6000)]))
        # NVMe optimizer swap: per tensor, fp32 gradient bytes a flush keeps (state.zero3_flush_grad_tails)
        tails = (tuple(rng.choice([0, rng.randint(0, 900)]) for _ in inv.tensors)
                 if rng.random() < 0.4 else None)
        fast = state._zero3_reduce_flush_bytes(inv, W, C, rbs, True, rs, norm, gathered, linear, tails,
                                               D=D, G=G, predivide=pf)
        walk = state._zero3_reduce_flush_walk(inv, W, C, rbs, True, rs, norm, gathered, linear, tails,
                                              D=D, G=G, predivide=pf)
        assert fast == walk, (seed, [(t.name, t.shape, t.trainable) for t in inv.tensors], W, C, rbs, rs, norm)
        checked += fast is not None
    assert checked > 20  # not every case empty


def test_gathered_columns_kept_per_table():
    # the columns made from a gathered table are kept on the tensor list (zero3_flush_gathered_cols): two tables
    # differing only in the bytes gathered during a module, or only at its fetch, passed in turn and again, each
    # get the walk's answer, which differs between them
    inv = Inventory("kept", [TensorSpec(f"layers.{i}.m.weight", (8, 4)) for i in range(6)])
    mod_of = state._zero3_replay_inputs(inv, type("Z", (), {"param_persistence_threshold": 0,
                                                            "model_persistence_threshold": 10**18})(), 2)[4]
    M = max(mod_of) + 1
    fetch0, during0 = tuple([100] * M), tuple([50] * M)
    tables = [(mod_of, fetch0, during0, 0), (mod_of, fetch0, tuple([50] * (M - 1) + [900]), 0),
              (mod_of, tuple([100] * (M - 1) + [2000]), during0, 0)]
    for tails in (None, tuple([16] * 6)):
        answers = []
        for g in tables + tables:
            fast = state._zero3_reduce_flush_bytes(inv, 2, 2, 64, True, True, False, g, True, tails)
            assert fast == state._zero3_reduce_flush_walk(inv, 2, 2, 64, True, True, False, g, True, tails)
            answers.append(fast)
        assert len({a[0] for a in answers[:3]}) == 3


def test_kept_tails_per_table():
    # the fp32 tails kept before each position are kept on the tensor list (zero3_flush_kept_at) per tails table
    # and flushes: two tables differing in one tensor's tail, and two bucket sizes (other flushes), in turn and
    # again, each get the walk's answer
    inv = Inventory("tails", [TensorSpec(f"t{i}", (8 + i,)) for i in range(7)])
    ta, tb = tuple([10] * 7), tuple([10] * 6 + [5000])
    answers = []
    for rbs in (20, 40, 20):
        for tails in (ta, tb, ta):
            fast = state._zero3_reduce_flush_bytes(inv, 2, 2, rbs, True, True, False, None, True, tails)
            assert fast == state._zero3_reduce_flush_walk(inv, 2, 2, rbs, True, True, False, None, True, tails)
            answers.append(fast)
    assert answers[0] != answers[1] and answers[0] != answers[3]
