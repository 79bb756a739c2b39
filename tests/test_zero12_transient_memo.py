"""Issue 21: what ``state.zero12_backward_transients`` keeps on a flush replay (``_Flushes.memo``,
``state.ZERO12_TRANSIENT_MEMO``) gives the ledgers the per-plan derivation gives.

generate asks for the transients of many plans that share one flush replay (its layouts are kept per tensor
list and world size): the columns of flushes (B, A and their prefix / suffix maxima, by whether the boundary
holds every gradient and the model dtype's bytes), each rank range's first flush, the largest gradient from
each position on, and ZeRO-1 overlap_comm's accumulation moments are made once per replay and kept. Here the
plans of one seeded model at one world size and bucket (GA 1-3, ZeRO-1/2, overlap_comm, contiguous
gradients, CPU offload, fp32 communication drawn) are computed one after the other on the same inventory, so
later plans read what earlier ones kept, and each ledger is compared with the same plan's on a fresh copy of
the inventory with the memo off.
"""

from __future__ import annotations

import random

import pytest

from advisor.config.effective import effective_config
from advisor.ledger import state
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.model.inventory import Inventory, TensorSpec
from test_shared_walks_identity17b import _ledger  # one ledger-to-text for the identity tests


def _model(rng: random.Random) -> Inventory:
    tensors = []
    for t in range(rng.randint(2, 40)):
        o, i = rng.randint(1, 60), rng.randint(1, 60)
        tensors.append(TensorSpec(f"m{t}.weight", (o, i), rng.random() > 0.05, 0, "bf16"))
        if rng.random() < 0.5:
            tensors.append(TensorSpec(f"m{t}.bias", (o,), True, 0, "bf16"))
    if not any(t.trainable for t in tensors):
        tensors[0] = TensorSpec(tensors[0].name, tensors[0].shape, True, 0, "bf16")
    return Inventory("rand", tensors, "test", {})


def _config(rng: random.Random, rbs: int, W: int, stage: int, overlap: bool, contiguous: bool) -> dict:
    ga = rng.choice([1, 2, 3])
    z = {"stage": stage, "reduce_bucket_size": rbs, "overlap_comm": overlap, "contiguous_gradients": contiguous}
    if rng.random() < 0.3:
        z["offload_optimizer"] = {"device": "cpu"}
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": ga, "train_batch_size": ga * W,
           "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": z}
    if rng.random() < 0.2:
        cfg["communication_data_type"] = "fp32"
    return cfg


@pytest.mark.parametrize("seed", range(12))
def test_kept_transients_equal_per_plan(monkeypatch, seed):
    rng = random.Random(4400 + seed)
    hits = [0]
    get = dict.get

    class Counting(dict):
        def get(self, k, default=None):
            got = get(self, k, default)
            hits[0] += got is not None
            return got
    orig = state._Flushes.__init__

    def init(self, *a):
        orig(self, *a)
        self.memo = Counting()
    monkeypatch.setattr(state._Flushes, "__init__", init)
    for _ in range(4):
        inv = _model(rng)
        W = rng.choice([1, 2, 3, 4, 8, 16])
        largest = max(t.numel for t in inv.tensors)
        rbs = rng.choice([max(1, largest // 2), largest, 3 * largest + 1, 10**6])
        stage, overlap, contiguous = rng.choice([1, 2]), rng.random() < 0.5, rng.random() < 0.8
        cfgs = [_config(rng, rbs, W, stage, overlap, contiguous) for _ in range(4)]
        kept = [_ledger(inv, c, W) for c in cfgs]  # one inventory: the later plans read the replay's memo
        with monkeypatch.context() as m:
            m.setattr(state, "ZERO12_TRANSIENT_MEMO", False)
            fresh = [_ledger(Inventory("rand", list(inv.tensors), "test", {}), c, W) for c in cfgs]
        assert kept == fresh, seed
    assert hits[0], "no plan read a kept figure: the comparison tests nothing"
