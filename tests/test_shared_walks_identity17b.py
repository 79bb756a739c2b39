"""perf17b (issue 21): walks kept across ledgers give what a fresh computation gives.

generate fits many plans on one tensor list; two walks are now kept across them, keyed by their exact inputs:
``state._zero12_offload_reduce_runs`` (ZeRO-1/2 with CPU optimizer offload: its u column and hook order by
value, the layouts by identity) and ZeRO-3's reduce-flush positions and per-flush buffers
(``zero3_grad_flushes`` per bucket size, ``zero3_grad_flush_extra`` per W, communication bytes, reduce_scatter
and norm). Each plan's ledger on one shared inventory (the memos hit) must equal its ledger on a fresh copy of
the inventory (nothing kept), on seeded models without layer names (runs of equal tensors, as generate's
1e5-tensor limit case) and configs; and the memos must actually be hit.
"""

from __future__ import annotations

import random

import pytest

from advisor.config.effective import effective_config
from advisor.ledger import state
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.model.inventory import Inventory, TensorSpec


def _tensors(rng: random.Random) -> list:
    tensors = []
    for r in range(rng.randint(1, 4)):
        shape = rng.choice([(16, 16), (rng.randint(1, 60), rng.randint(1, 30)), (rng.randint(1, 200),)])
        tensors += [TensorSpec(f"w{r}_{i}", shape, rng.random() > 0.03, 0, "bf16")
                    for i in range(rng.choice([1, 5, 70, rng.randint(20, 300)]))]
    if not any(t.trainable for t in tensors):
        tensors.append(TensorSpec("last", (8, 8), True, 0, "bf16"))
    return tensors


def _configs(rng: random.Random, stage: int, largest: int, W: int) -> list:
    rbs = rng.choice([largest, largest + 1, 2 * largest, rng.randint(largest, 6 * largest)])
    z = {"stage": stage, "reduce_bucket_size": rbs, "overlap_comm": rng.random() < 0.5,
         "contiguous_gradients": rng.random() < 0.85, "reduce_scatter": rng.random() < 0.8}
    if stage == 3:
        z["stage3_param_persistence_threshold"] = rng.choice([0, 10, 100])
        z["stage3_prefetch_bucket_size"] = rng.choice([0, largest, 5 * largest])
    if rng.random() < 0.6:
        z["offload_optimizer"] = {"device": "cpu"}
    out = []
    # plans at other batch sizes and GA, overlap_comm / contiguous_gradients either way, fp32 communication: the
    # same bucket and layouts, other hook orders and unmoved gradients
    for ga, mb, oc, cg, comm in ((1, 1, False, True, None), (2, 1, False, True, None), (1, 2, True, True, None),
                                 (3, 2, True, False, None), (2, 4, False, False, "fp32"), (1, 1, True, True, "fp32"),
                                 (2, 2, True, True, None), (1, 1, False, True, None)):
        zz = dict(z)
        if rng.random() < 0.7:
            zz["overlap_comm"], zz["contiguous_gradients"] = oc, cg
        cfg = {"train_micro_batch_size_per_gpu": mb, "gradient_accumulation_steps": ga,
               "train_batch_size": ga * mb * W, "bf16": {"enabled": True},
               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": zz}
        if comm:
            cfg["communication_data_type"] = comm
        out.append(cfg)
    # an fp32 model and bf16 with fp32 gradient accumulation: the same gradient bytes D = 4 (ZeRO-1's grad_accum),
    # other bytes for the autograd siblings (u)
    for ga in (1, 2):
        fp32 = {k: v for k, v in out[0].items() if k != "bf16"}
        fp32.update(gradient_accumulation_steps=ga, train_batch_size=ga * W)
        acc = dict(out[0], gradient_accumulation_steps=ga, train_batch_size=ga * W,
                   data_types={"grad_accum_dtype": "fp32"})
        out += [fp32, acc]
    return out


def _ledger(inv: Inventory, cfg: dict, W: int) -> str:
    try:
        return repr([(rl.rank, list(rl.ranks.ranges), rl.entries)
                     for rl in compute_ledger(Plan(effective_config(cfg), inv, Cluster(world_size=W))).ranks])
    except ValueError as e:
        return f"ValueError: {e}"


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_shared_walks_equal_fresh_ones(monkeypatch, stage):
    calls = {"shared": 0, "fresh": 0}
    side = ["shared"]
    runs = state._zero12_offload_reduce_runs

    def counted(*a, **k):
        calls[side[0]] += 1
        return runs(*a, **k)
    monkeypatch.setattr(state, "_zero12_offload_reduce_runs", counted)
    for seed in range(16):
        rng = random.Random(stage * 100 + seed)
        tensors = _tensors(rng)
        W = rng.choice([1, 2, 3, 4, 8, 16])
        largest = max(t.numel for t in tensors if t.trainable)
        shared = Inventory("runs", list(tensors), "test", {})
        for cfg in _configs(rng, stage, largest, W):
            side[0] = "shared"
            got = _ledger(shared, cfg, W)
            side[0] = "fresh"
            with monkeypatch.context() as m:  # nothing kept: not by content either (perf19)
                m.setattr(state, "ZERO12_OFFLOAD_CONTENT_MEMO", False)
                fresh = _ledger(Inventory("runs", list(tensors), "test", {}), cfg, W)
            assert got == fresh, (stage, seed, cfg)
    if stage != 3:
        # the fresh ledgers walk every time they ask; the shared ones only on a miss
        assert calls["shared"] < calls["fresh"], calls


def test_zero3_flush_memos_are_hit(monkeypatch):
    """The flush positions are found once per (tensor list, bucket size), whatever W and the other keys."""
    found = []
    tensors = [TensorSpec(f"w{i}", (16, 16), True, 0, "bf16") for i in range(400)]
    inv = Inventory("runs", tensors, "test", {})
    for W in (2, 4, 8):
        for oo in (False, True):
            z = {"stage": 3, "reduce_bucket_size": 1000, "stage3_param_persistence_threshold": 0}
            if oo:
                z["offload_optimizer"] = {"device": "cpu"}
            cfg = {"train_micro_batch_size_per_gpu": 1, "train_batch_size": W, "bf16": {"enabled": True},
                   "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": z}
            _ledger(inv, cfg, W)
            found.append(sum(1 for k in inv._memo if isinstance(k, tuple) and k[:1] == ("zero3_grad_flushes",)))
    assert found[-1] == 1, found
    extra = [k for k in inv._memo if isinstance(k, tuple) and k[:1] == ("zero3_grad_flush_extra",)]
    assert len(extra) >= 2, extra  # one per (W, norm) asked
