"""Issue 21: generate's shortcuts give what the plain path gives, byte for byte.

The shortcuts: (1) under pipeline parallelism, the stages between the first and the last of a model
whose layers are identical up to their index (``advisor.model.parallel.layer_period``) take the first
such stage's ZeRO roles (``advisor.ledger.state._model_parallel_roles``); (2) generate drops each
layout's pipeline-stage shards once searched (``parallel.forget_shard``) and each stage/offload
combo's plans once ranked; (3) under pipeline parallelism ``plan_fit`` computes only the per-stage
roles' timelines, not also ``group_roles``' (which it replaced). The plain path is the same code with
``layer_period`` answering None (every stage accounted on its own), ``forget_shard`` doing nothing
and ``group_roles`` computing its timelines: the test compares the two on
seeded random models, configs and requests (whole ledgers: every role's ranks, stages and entries
with their formulas; generate's JSON report and the config it writes). ``layer_period`` itself is
checked against the layer size counted by hand from the architectures' module lists.
"""

from __future__ import annotations

import json
import random

import pytest

from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.model import parallel
from advisor.model.inventory import Inventory, TensorSpec
from advisor.model.specs import resolve_model


def _hf(rng: random.Random, layers: int) -> dict:
    kind = rng.choice(["llama", "gpt2"])
    h = rng.choice([32, 64, 96])
    heads = rng.choice([2, 4])
    if kind == "gpt2":
        return {"model_type": "gpt2", "n_embd": h, "n_layer": layers, "n_head": heads, "n_inner": None,
                "vocab_size": rng.choice([500, 1000]), "n_positions": 256}
    return {"model_type": "llama", "hidden_size": h, "intermediate_size": rng.choice([2 * h, 3 * h]),
            "num_attention_heads": heads, "num_key_value_heads": rng.choice([1, 2]) if heads == 2 else 2,
            "vocab_size": rng.choice([500, 1000]), "max_position_embeddings": 256, "num_hidden_layers": layers,
            "tie_word_embeddings": rng.random() < 0.3}


def _model(tmp_path, hf: dict, i: int):
    p = tmp_path / f"m{i}.json"
    p.write_text(json.dumps(hf))
    return resolve_model(str(p))


def _plain(monkeypatch) -> None:
    import advisor.ledger.timeline as tl
    import advisor.views.generate as gen
    monkeypatch.setattr(parallel, "layer_period", lambda inv, rules=False: None)
    monkeypatch.setattr(parallel, "forget_shard", lambda *a, **k: None)
    monkeypatch.setattr(gen, "forget_shard", lambda *a, **k: None)
    # group_roles' timelines computed under pipeline parallelism too (plan_fit then splits the roles)
    import advisor.views.estimate as est
    grouped = est.group_roles
    monkeypatch.setattr(est, "group_roles", lambda ledger, acts=None, load=None, timelines=True:
                        grouped(ledger, acts, load, timelines=True))


def _ledger_text(led) -> str:
    return repr([(rl.rank, list(rl.ranks.ranges), list(rl.stages), rl.entries) for rl in led.ranks])


def test_layer_period_is_the_layer_size_counted_by_hand(tmp_path):
    # llama: q, k, v, o, gate, up, down projections and two RMSNorm weights per layer (modeling_llama.py)
    assert parallel.layer_period(_model(tmp_path, {"model_type": "llama", "hidden_size": 64,
                                                   "intermediate_size": 128, "num_attention_heads": 4,
                                                   "num_hidden_layers": 6, "vocab_size": 100,
                                                   "max_position_embeddings": 64}, 0)) == 9
    # gpt2: ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj, each a weight and a bias (modeling_gpt2.py)
    gpt2 = _model(tmp_path, {"model_type": "gpt2", "n_embd": 64, "n_layer": 5, "n_head": 4, "n_inner": None,
                             "vocab_size": 100, "n_positions": 64}, 1)
    assert parallel.layer_period(gpt2) == 12
    # a layer that differs (one shape, or one name beyond its index) is no period
    ts = list(gpt2.tensors)
    k = next(i for i, t in enumerate(ts) if ".3.mlp.c_fc.bias" in t.name)
    for bad in (TensorSpec(ts[k].name, (ts[k].shape[0] + 1,), ts[k].trainable, ts[k].group, ts[k].dtype),
                TensorSpec(ts[k].name.replace("c_fc", "c_fx"), ts[k].shape, ts[k].trainable, ts[k].group, ts[k].dtype),
                TensorSpec(ts[k].name, ts[k].shape, False, ts[k].group, ts[k].dtype)):
        inv = Inventory(gpt2.name, ts[:k] + [bad] + ts[k + 1:], gpt2.source, dict(gpt2.meta))
        assert parallel.layer_period(inv) is None
    # layers numbered from 3, not 0 (layer_of reads 3..7: no stage split by index 0..L-1), and a single layer:
    # no period (layer_repeat's detector, issue 21); the ledger then accounts every stage on its own
    renum = [TensorSpec(t.name.replace(f"h.{parallel.layer_of(t)}.", f"h.{parallel.layer_of(t) + 3}.")
                        if parallel.layer_of(t) is not None else t.name, t.shape, t.trainable, t.group, t.dtype)
             for t in gpt2.tensors]
    assert parallel.layer_repeat(Inventory(gpt2.name, renum)).first == 3
    assert parallel.layer_period(Inventory(gpt2.name, renum)) is None
    one = _model(tmp_path, {"model_type": "gpt2", "n_embd": 64, "n_layer": 1, "n_head": 4, "n_inner": None,
                            "vocab_size": 100, "n_positions": 64}, 2)
    assert parallel.layer_period(one) is None


@pytest.mark.parametrize("seed", range(6))
def test_pipeline_ledger_fast_equals_plain(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    for i in range(5):
        pp = rng.choice([3, 4, 5, 8])
        hf = _hf(rng, rng.choice([pp, pp + 1, 2 * pp, 3 * pp + 2, 17]))
        tp = rng.choice([1, 2])
        dp = rng.choice([1, 2, 3])
        stage = rng.choice([0, 1])
        ga = rng.choice([1, 2])
        cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": ga,
               "train_batch_size": ga * dp, rng.choice(["bf16", "fp16"]): {"enabled": True},
               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
               "zero_optimization": {"stage": stage, "reduce_bucket_size": rng.choice([500, 4096, 10 ** 6]),
                                     "overlap_comm": rng.random() < 0.5,
                                     "contiguous_gradients": rng.random() < 0.7}}
        if stage == 1 and rng.random() < 0.3:
            cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
        out = []
        for plain in (False, True):
            with monkeypatch.context() as m:
                if plain:
                    _plain(m)
                inv = _model(tmp_path, hf, 10 * seed + i)
                cl = Cluster(world_size=tp * pp * dp, tensor_parallel=tp, pipeline_parallel=pp,
                             megatron_sequence_parallel=tp > 1)
                try:
                    out.append(_ledger_text(compute_ledger(Plan(effective_config(cfg), inv, cl))))
                except (ValueError, parallel.ParallelismError) as e:
                    out.append(f"{type(e).__name__}: {e}")
        assert out[0] == out[1], (hf, cfg, tp, pp, dp)


def _search_both(tmp_path, monkeypatch, hf, hw, req, i):
    import advisor.ledger.timeline as tl
    from advisor.views import generate as gen
    out, computed = [], []
    for plain in (False, True):
        with monkeypatch.context() as m:
            if plain:
                _plain(m)
            n = [0]
            inner = tl.role_timeline

            def counted(*a, **k):
                n[0] += 1
                return inner(*a, **k)
            import advisor.views.estimate as est0
            m.setattr(est0, "role_timeline", counted)
            # every plan's role timelines, whole (instants and their labels, bytes per tier, rows)
            import advisor.views.estimate as est
            fit, seen = est.plan_fit, []

            def recorded(*a, **k):
                pf = fit(*a, **k)
                seen.append(repr([(list(r.ranks.ranges), r.timeline.instants, r.timeline.live, r.timeline.entries)
                                  for r in pf.roles]))
                return pf
            m.setattr(est, "plan_fit", recorded)
            inv = _model(tmp_path, hf, i) if isinstance(hf, dict) else resolve_model(hf)
            try:
                res = gen.run(inv, hw, req, top=100)
            except gen.NothingFits as e:
                res = e.result
            out.append((seen, json.dumps(gen.result_json(res, top=100), sort_keys=True),
                        gen.table_text(res, top=100),
                        gen.config_text(res.best.config) if res.best else None))
            computed.append(n[0])
    assert out[0] == out[1]
    return json.loads(out[0][1]), computed


@pytest.mark.parametrize("seed", range(3))
def test_generate_fast_equals_plain(tmp_path, monkeypatch, seed):
    from advisor.cluster.hardware import resolve_hardware
    from advisor.views import generate as gen
    from dataclasses import replace

    rng = random.Random(100 + seed)
    hf = _hf(rng, rng.choice([16, 24, 40]))
    gpus = rng.choice([4, 8])
    gb = gpus * rng.choice([1, 2, 4])
    hw = replace(resolve_hardware(rng.choice(["dgx-h100", "dgx-a100"])), nodes=1, accelerators_per_node=gpus)
    req = gen.Request(global_batch=gb, seq_len=rng.choice([64, 128]), nodes=1, gpus_per_node=gpus)
    rep, computed = _search_both(tmp_path, monkeypatch, hf, hw, req, 100 + seed)
    # the search did try pipeline layouts beyond two stages, where the shortcut applies
    assert any(p["pipeline_parallel"] > 2 for p in rep["plans"]) or rep["layouts_considered"] > 2
    if any(p["pipeline_parallel"] > 1 for p in rep["plans"]):
        assert computed[0] < computed[1]  # fewer role timelines computed where pipeline plans were fitted


@pytest.mark.parametrize("model,seq,gb", [("llama-3-8b", 4096, 64), ("gpt2", 1024, 512)])
def test_generate_recompute_search_fast_equals_plain(tmp_path, monkeypatch, model, seq, gb):
    """Where "none" does not fit, each micro-batch tries selective, K of L and full on one shared ledger."""
    from advisor.cluster.hardware import resolve_hardware
    from advisor.views import generate as gen
    from dataclasses import replace

    hw = replace(resolve_hardware("dgx-a100"), nodes=1, accelerators_per_node=8)
    req = gen.Request(global_batch=gb, seq_len=seq, nodes=1, gpus_per_node=8, model_parallel=False)
    rep, computed = _search_both(tmp_path, monkeypatch, model, hw, req, 0)
    assert any(p["checkpointing"] != "none" for p in rep["plans"]) or rep["superseded"] or \
        any(r["checkpointing"] != "none" for r in rep["rejected"])
