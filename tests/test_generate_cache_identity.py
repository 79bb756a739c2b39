"""Issue 21: the ZeRO-1/2 flush-replay passes' column-wise forms give what their per-flush walks give.

generate at 1e5 layers runs the ZeRO-1/2 flush replay and the passes that read it
(``advisor.ledger.state.zero12_backward_transients``, ``_zero12_kept_xl``) for every ZeRO-1/2 plan
of every layout. ``state.ZERO12_COLUMNS`` selects their column-wise forms: a bucket whose slices
all lie in one rank's partition answered from its flat span (one slice: a view, no copy), the
per-flush unmoved / copy / prefix and suffix maxima, the kept extra-large gradients and the
held regime's accumulation moments and boundary maxima, and ZeRO-1 CPU offload's kept clones
(``_zero12_offload_kept_runs``) by C-level maps. False selects the per-flush walks they replace.
The tests compare the two on seeded random inventories (sizes around the bucket, zero-size
tensors, several param groups, frozen tensors, nn.Linear weight/bias pairs) and configs (ZeRO-1/2, overlap_comm,
contiguous_gradients, CPU offload, fp32 communication, GA 1/2, W 1-9): whole ledgers, every role's ranks and
entries with their formulas; and generate's JSON report, text table and written config.
"""

from __future__ import annotations

import json
import random

import pytest

from advisor.config.effective import effective_config
from advisor.ledger import state
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.model.inventory import Inventory, TensorSpec


def _inventory(rng: random.Random, rbs: int) -> Inventory:
    tensors = []
    groups = rng.choice([1, 1, 2, 3])
    for layer in range(rng.randint(2, 6)):
        for name in ("q", "k", "mlp", "norm", "bias"):
            n = rng.choice([1, 3, rbs // 3 or 1, rbs - 1, rbs, rbs + 1, 2 * rbs + 5, 5 * rbs])
            if rng.random() < 0.05:
                n = 0
            tensors.append(TensorSpec(f"layers.{layer}.{name}.weight", (n,), rng.random() > 0.08,
                                      f"g{rng.randrange(groups)}" if groups > 1 else "default", "bf16"))
        # an nn.Linear's weight and bias: autograd siblings (state.autograd_siblings), whole in each other's hook
        o, i = rng.choice([1, 4, 16]), rng.choice([2, max(1, rbs // 8), rbs])
        grp = f"g{rng.randrange(groups)}" if groups > 1 else "default"
        tensors.append(TensorSpec(f"layers.{layer}.fc.weight", (o, i), True, grp, "bf16"))
        tensors.append(TensorSpec(f"layers.{layer}.fc.bias", (o,), True, grp, "bf16"))
    tensors.insert(0, TensorSpec("embed.weight", (rng.choice([rbs // 2 or 1, 3 * rbs]),), True, "default", "bf16"))
    return Inventory("rand", tensors, "test", {})


def _ledger_text(led) -> str:
    return repr([(rl.rank, list(rl.ranks.ranges), rl.entries) for rl in led.ranks])


def _both(monkeypatch, make_inv, cfg: dict, W: int) -> list[str]:
    out = []
    for columns in (True, False):
        with monkeypatch.context() as m:
            m.setattr(state, "ZERO12_COLUMNS", columns)
            inv = make_inv()  # a fresh tensor list: no memo (flush replay, layouts) shared between the two
            try:
                out.append(_ledger_text(compute_ledger(Plan(effective_config(cfg), inv, Cluster(world_size=W)))))
            except ValueError as e:
                out.append(f"ValueError: {e}")
    return out


@pytest.mark.parametrize("seed", range(12))
def test_zero12_ledger_columns_equal_the_walks(monkeypatch, seed):
    rng = random.Random(seed)
    for i in range(12):
        rbs = rng.choice([7, 50, 500, 4096])
        W = rng.choice([1, 2, 3, 4, 8, 9])
        ga = rng.choice([1, 2])
        stage = rng.choice([1, 1, 2])
        z = {"stage": stage, "reduce_bucket_size": rbs, "overlap_comm": rng.random() < 0.5,
             "contiguous_gradients": rng.random() < 0.85}
        if rng.random() < 0.35:
            z["offload_optimizer"] = {"device": "cpu"}
        cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": ga, "train_batch_size": ga * W,
               "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
               "zero_optimization": z}
        if rng.random() < 0.25:  # each flushed run cast to fp32 beside its flat copy (a one-slice run too)
            cfg["communication_data_type"] = "fp32"
        s = rng.randrange(1 << 30)
        got = _both(monkeypatch, lambda: _inventory(random.Random(s), rbs), cfg, W)
        assert got[0] == got[1], (seed, i, cfg, W)


def test_the_walks_are_reached(monkeypatch):
    """The cases above reach the column-wise forms: ZeRO-1 overlap_comm at GA 2 with extra-large gradients
    (the held regime's boundary with kept gradients), and one-rank buckets at W 2 (copy 0)."""
    seen = {"kept": 0, "held": 0}
    kept = state._zero12_kept_xl

    def counted(ec, layouts, W, order, flushes, xl):
        runs = kept(ec, layouts, W, order, flushes, xl)
        seen["kept"] += any(any(v) for v in runs.values)  # some rank keeps an extra-large gradient
        return runs
    monkeypatch.setattr(state, "_zero12_kept_xl", counted)
    rbs = 50
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2, "train_batch_size": 4,
           "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 1, "reduce_bucket_size": rbs, "overlap_comm": True,
                                 "contiguous_gradients": True}}
    tensors = [TensorSpec(f"layers.{i}.{n}.weight", (s,), True, "default", "bf16")
               for i in range(4) for n, s in (("a", 10), ("b", 3 * rbs), ("c", 20))]
    got = _both(monkeypatch, lambda: Inventory("t", list(tensors), "test", {}), cfg, 2)
    assert got[0] == got[1]
    assert "zero12" in got[0] or "reduce" in got[0]
    assert seen["kept"]
    # a held regime (ZeRO-1 overlap_comm, GA 2) is modelled for this plan
    assert state.zero12_boundary_holds_all(effective_config(cfg), 2)


@pytest.mark.parametrize("layers,gpus,gb", [(6, 4, 8), (9, 8, 16)])
def test_generate_report_columns_equal_the_walks(tmp_path, monkeypatch, layers, gpus, gb):
    from dataclasses import replace

    from advisor.cluster.hardware import resolve_hardware
    from advisor.model.specs import resolve_model
    from advisor.views import generate as gen

    hf = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2,
          "num_key_value_heads": 2, "vocab_size": 500, "max_position_embeddings": 256, "num_hidden_layers": layers}
    p = tmp_path / "m.json"
    p.write_text(json.dumps(hf))
    hw = replace(resolve_hardware("dgx-h100"), nodes=1, accelerators_per_node=gpus)
    req = gen.Request(global_batch=gb, seq_len=128, nodes=1, gpus_per_node=gpus)
    out = []
    for columns in (True, False):
        with monkeypatch.context() as m:
            m.setattr(state, "ZERO12_COLUMNS", columns)
            res = gen.run(resolve_model(str(p)), hw, req, top=100)
            out.append((json.dumps(gen.result_json(res, top=100), sort_keys=True), gen.table_text(res, top=100),
                        gen.config_text(res.best.config)))
    assert out[0] == out[1]
    # ZeRO-1/2 plans were fitted (the passes ran): the report ranks some
    assert any(c["stage"] in (1, 2) for c in json.loads(out[0][0])["plans"])
