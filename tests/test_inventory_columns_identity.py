"""Issue 21, large tensor inventories: two per-tensor passes made column-wise give what the per-tensor
walks give.

* ``timeline._single_param_load_peak_runs`` (``timeline.SIZE_RUNS``): zero.Init's load peak where every
  module has one parameter, over runs of consecutive tensors of equal size, one candidate instant a run
  (an inventory of 2M identical tensors is one run; the per-tensor columns took ~2.5 s);
* ``state._zero3_sub_groups`` with ``state.SUB_GROUP_COLUMNS``: the sub-groups cut at the bisections of
  the p_i prefix sums, not a Python step per tensor.

False selects the walks. Compared on seeded random inventories (runs of identical tensors, one module a
tensor as a nameless inventory's ``t0, t1, ...`` or modules of several, frozen tensors, a second param
group) and, for the whole estimate, on random configs (ZeRO stages 0-3, CPU/NVMe offload, sub-group
sizes from one partition to more than the model, GA, W 1-8, zero.Init loads): every figure and word of
estimate's JSON equal both ways. The functions are also compared alone at sizes and thresholds the
estimates do not reach (partitions swapped to NVMe, p = 0 runs)."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from advisor.config.effective import effective_config
from advisor.ledger import state, timeline
from advisor.ledger.state import Cluster, Plan
from advisor.model.inventory import Inventory, TensorSpec


def _inventory(rng: random.Random) -> Inventory:
    sizes = [rng.choice([(1,), (3,), (64, 2), (7, 7), (100,), (4, 4), (9,)]) for _ in range(rng.randint(1, 4))]
    shapes: list[tuple[int, ...]] = []
    while len(shapes) < rng.randint(1, 60):
        shapes += [rng.choice(sizes)] * rng.randint(1, 12)  # runs of identical tensors
    named = rng.random() < 0.5
    frozen = rng.random() < 0.2
    groups = rng.random() < 0.2
    ts = []
    for i, s in enumerate(shapes):
        name = f"t{i}" if not named else f"m{i // rng.choice([1, 1, 2, 3])}.{'weight' if i % 2 else 'bias'}"
        ts.append(TensorSpec(name, s, not (frozen and rng.random() < 0.3), rng.choice([0, 1]) if groups else 0))
    return Inventory("rand", ts, "test", {})


def _config(rng: random.Random, inv: Inventory, W: int) -> dict:
    n = sum(t.numel for t in inv.tensors)
    stage = rng.choice([0, 1, 2, 3, 3, 3])
    z: dict = {"stage": stage}
    if stage == 3:
        z["sub_group_size"] = rng.choice([1, 5, max(1, n // (3 * W)), max(1, n // W), n + 1, 10**9])
        z["stage3_param_persistence_threshold"] = rng.choice([0, 10, 100_000])
        off = rng.choice(["none", "none", "cpu", "nvme"])
        if off != "none":
            z["offload_optimizer"] = {"device": off, **({"nvme_path": "/nvme"} if off == "nvme" else {})}
        if rng.random() < 0.3:
            z["offload_param"] = {"device": "cpu"}
    elif stage in (1, 2) and rng.random() < 0.4:
        z["offload_optimizer"] = {"device": "cpu"}
    ga = rng.choice([1, 2])
    prec = rng.choice([{"bf16": {"enabled": True}}, {"fp16": {"enabled": True}}, {}])
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": ga, "train_batch_size": ga * W,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "zero_optimization": z, **prec}


def _copy(inv: Inventory) -> Inventory:
    return Inventory(inv.name, list(inv.tensors), inv.source, dict(inv.meta))  # a fresh memo


@pytest.mark.parametrize("seed", range(16))
def test_estimate_equal_with_columns_and_walks(seed, monkeypatch):
    from advisor.views.estimate import estimate
    rng = random.Random(2100 + seed)
    runs = 0
    for _ in range(6):
        inv = _inventory(rng)
        if not inv.has_trainable():
            continue
        W = rng.choice([1, 2, 3, 4, 8])
        ec = effective_config(_config(rng, inv, W))
        load = dataclasses.replace(timeline.LoadAssumption(), zero_init=rng.random() < 0.7,
                                   dtype=rng.choice(["fp32", "bf16"]))

        def run(columns: bool) -> str:
            with monkeypatch.context() as m:
                m.setattr(timeline, "SIZE_RUNS", columns)
                m.setattr(state, "SUB_GROUP_COLUMNS", columns)
                plan = Plan(ec, _copy(inv), Cluster(world_size=W, gpus_per_node=W))
                return json.dumps(estimate(plan, load=load).to_dict(), sort_keys=True, default=str)
        assert run(True) == run(False)
        runs += 1
    assert runs


@pytest.mark.parametrize("seed", range(40))
def test_load_peak_runs_equal_the_columns(seed):
    rng = random.Random(seed)
    for _ in range(100):
        pool = [rng.choice([1, 2, 3, 7, 8, 64, 100, 4096, 10**6]) for _ in range(3)]
        ns: list[int] = []
        L = rng.randint(2, 40)
        while len(ns) < L:
            ns += [rng.choice(pool)] * rng.randint(1, 8)
        ns = ns[:L]
        mods = [f"t{i}" for i in range(L)]
        W, D, build = rng.randint(1, 9), rng.choice([2, 4]), rng.choice([2, 4, 6, 8])
        swap = rng.choice([None, None, 1, 4, 16, 300, 10**9])  # 1: every partition swapped (p = 0 runs)
        want = timeline._single_param_load_peak(list(zip(mods, ns)), mods, W, D, build, swap)
        assert timeline._single_param_load_peak_runs(mods, ns, W, D, build, swap) == want, (ns, W, D, build, swap)


@pytest.mark.parametrize("seed", range(20))
def test_sub_groups_cut_by_bisection_equal_the_walk(seed, monkeypatch):
    rng = random.Random(seed)
    for _ in range(50):
        inv = _inventory(rng)
        W = rng.randint(1, 9)
        sgs = rng.choice([None, 0, 1, 5, 20, 100, sum(t.numel for t in inv.tensors), 10**9])
        got = {}
        for columns in (True, False):
            monkeypatch.setattr(state, "SUB_GROUP_COLUMNS", columns)
            got[columns] = [(sg.group, tuple(sg.tensors), sg.numel) for sg in state._zero3_sub_groups(inv, W, sgs)]
        assert got[True] == got[False], (W, sgs)


@pytest.mark.parametrize("meta", [None, {}, {"hidden_size": 64}, "x",
                                  {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "intermediate_size": 8,
                                   "vocab_size": None}])
def test_generate_refuses_an_inventory_without_architecture_before_building_it(tmp_path, monkeypatch, meta):
    """generate's refusal of an inventory lacking the architecture (2M tensors: ~5.5 s and 650 MB, all of it
    building the tensors) comes before the tensors are built, with the message search() gives the built one."""
    from advisor.errors import AdvisorError
    from advisor.model import inventory, specs
    from advisor.views import generate
    f = tmp_path / "inv.json"
    f.write_text(json.dumps({"name": "n", **({} if meta is None else {"meta": meta}),
                             "tensors": [{"name": "w", "shape": [2, 2]}]}))
    built = specs.resolve_model(str(f))  # as estimate reads it (a meta that is no object is dropped)
    with pytest.raises(AdvisorError) as searched:
        generate.search(built, None, None)
    monkeypatch.setattr(specs, "from_dict", lambda *a, **k: pytest.fail("built before the refusal"))
    with pytest.raises(AdvisorError) as early:
        specs.resolve_model(str(f), architecture=True)
    assert str(early.value) == str(searched.value)
