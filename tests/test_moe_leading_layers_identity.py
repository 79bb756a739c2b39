"""Issue 21: identical MoE layers after leading dense ones are walked as a repeat, exactly.

A per-expert MoE (Kimi-K2: 1 dense layer, then 60 MoE layers of 384 experts each; DeepSeek-V3: 3 dense, 58 MoE)
has layers that are not all identical, so ``model.parallel.layer_repeat`` found no repeat and every pass of
generate's ledgers walked all ~70,000 tensors. With ``parallel.LEADING_LAYERS`` it finds the longest run of
identical layers ending at the last one (``LayerRepeat.lead``: the leading layers' tensors just before it), and
the passes that read it (ZeRO-1/2 flush replay, CPU-offload reduce terms, ZeRO-3 fetch replay, reduce-flush walk,
container steps, zero.Init load peak) repeat one of those layers. Compared on seeded MoE inventories (1-3 leading
dense layers, 4-12 MoE layers, 2-9 experts, shared experts or not, a router bias or not, frozen embeddings at
times, a frozen router bias at times) and configs (ZeRO 0-3, CPU/NVMe offload, GA 1-2, buckets, persistence, W 1-8): estimate's whole JSON
equal with the switch on and off (off: no repeat, the plain walk of every tensor). The repeat must be found in
every model built (a change that declines it is caught by the first test), and a repeat that claims one layer
too many (a dense layer taken for an MoE one) must change the figures (the last test: the comparison can fail).
"""

import dataclasses
import json
import random

import pytest

from advisor.config.effective import effective_config
from advisor.ledger import timeline
from advisor.ledger.state import Cluster, Plan
from advisor.model import parallel
from advisor.model.inventory import Inventory, TensorSpec
from layer_repeat_cases import fresh_copy, random_zero_config


def _moe(rng: random.Random) -> tuple[Inventory, tuple[int, int, int, int]]:
    """A DeepseekV3-style per-expert MoE (transformers 4 modeling_deepseek_v3.py module names) and the
    (head, unit, count, lead) its repeat must have."""
    h = rng.choice([4, 8, 12])
    ffn, moe_ffn = rng.randint(5, 40), rng.randint(2, 20)
    experts = rng.randint(2, 9)
    dense_n, moe_n = rng.randint(1, 3), rng.randint(4, 12)
    attn = [("self_attn.q_proj.weight", (h, h)), ("self_attn.kv_proj.weight", (rng.randint(2, 9), h)),
            ("self_attn.o_proj.weight", (h, h))]
    norms = [("input_layernorm.weight", (h,)), ("post_attention_layernorm.weight", (h,))]
    dense = attn + [("mlp.gate_proj.weight", (ffn, h)), ("mlp.up_proj.weight", (ffn, h)),
                    ("mlp.down_proj.weight", (h, ffn))] + norms
    moe = list(attn)
    for e in range(experts):
        moe += [(f"mlp.experts.{e}.gate_proj.weight", (moe_ffn, h)), (f"mlp.experts.{e}.up_proj.weight", (moe_ffn, h)),
                (f"mlp.experts.{e}.down_proj.weight", (h, moe_ffn))]
    moe.append(("mlp.gate.weight", (experts, h)))
    if rng.random() < 0.5:
        # a buffer in transformers (not trainable, as the Kimi-K2 inventory's 60), or trainable
        moe.append(("mlp.gate.e_score_correction_bias", (experts,), rng.random() < 0.5))
    if rng.random() < 0.7:
        s = moe_ffn * rng.randint(1, 2)
        moe += [("mlp.shared_experts.gate_proj.weight", (s, h)), ("mlp.shared_experts.up_proj.weight", (s, h)),
                ("mlp.shared_experts.down_proj.weight", (h, s))]
    moe += norms
    vocab = rng.randint(10, 300)
    frozen_embed = rng.random() < 0.2
    tensors = [TensorSpec("model.embed_tokens.weight", (vocab, h), not frozen_embed)]
    for i in range(dense_n):
        tensors += [TensorSpec(f"model.layers.{i}.{n}", s) for n, s in dense]
    for i in range(dense_n, dense_n + moe_n):
        tensors += [TensorSpec(f"model.layers.{i}.{m[0]}", m[1], *m[2:]) for m in moe]
    tensors += [TensorSpec("model.norm.weight", (h,)), TensorSpec("lm_head.weight", (vocab, h))]
    return Inventory("moe", tensors), (1 + dense_n * len(dense), len(moe), moe_n, dense_n * len(dense))


_copy = fresh_copy


def _config(rng: random.Random) -> dict:
    # the draws this file always made (tests/layer_repeat_cases.py): ZeRO-1/2 weighted up, with their flags
    return random_zero_config(rng, stages=(0, 1, 1, 2, 2, 3, 3, 3), bucket_p=0.6, zero12_flags=True)


def _estimate_json(ec, inv: Inventory, W: int, load) -> str:
    from advisor.views.estimate import estimate
    return json.dumps(estimate(Plan(ec, inv, Cluster(world_size=W, gpus_per_node=W)), load=load).to_dict(),
                      sort_keys=True, default=str)


@pytest.mark.parametrize("seed", range(10))
def test_repeat_after_leading_layers_found_exactly(seed, monkeypatch):
    rng = random.Random(seed)
    for _ in range(10):
        inv, want = _moe(rng)
        rep = parallel.layer_repeat(inv)
        assert rep is not None and (rep.head, rep.unit, rep.count, rep.lead) == want
        assert parallel.layer_period(inv) is None  # pipeline stages of unlike layers: accounted stage by stage
        for t in range(rep.count):  # the property it claims, tensor by tensor
            for j in range(rep.unit):
                a, b = inv.tensors[rep.head + j], inv.tensors[rep.head + t * rep.unit + j]
                assert b.name == a.name.replace(f"{rep.prefix}{rep.first}.", f"{rep.prefix}{rep.first + t}.", 1)
                assert (a.shape, a.trainable, a.group, a.dtype) == (b.shape, b.trainable, b.group, b.dtype)
        with monkeypatch.context() as m:
            m.setattr(parallel, "LEADING_LAYERS", False)
            assert parallel.layer_repeat(_copy(inv)) is None


def test_a_leading_layer_numbered_as_a_repeating_one_is_refused():
    rng = random.Random(7)
    inv, (head, unit, count, lead) = _moe(rng)
    ts = list(inv.tensors)
    first = int(ts[head].name.split(".")[2])
    ts[1] = TensorSpec(ts[1].name.replace("layers.0.", f"layers.{first + 1}.", 1), ts[1].shape)
    assert parallel.layer_repeat(Inventory("moe", ts)) is None


@pytest.mark.parametrize("seed", range(12))
def test_estimate_equal_with_and_without_the_leading_layers_repeat(seed, monkeypatch):
    rng = random.Random(2100 + seed)
    for _ in range(5):
        inv, _ = _moe(rng)
        ec = effective_config(_config(rng))
        W = rng.choice([1, 2, 3, 4, 8])
        load = dataclasses.replace(timeline.LoadAssumption(), zero_init=rng.random() < 0.6,
                                   dtype=rng.choice(["fp32", "bf16"]))
        fast = _estimate_json(ec, _copy(inv), W, load)
        with monkeypatch.context() as m:
            m.setattr(parallel, "LEADING_LAYERS", False)
            plain = _estimate_json(ec, _copy(inv), W, load)
        assert fast == plain


def test_a_repeat_one_layer_too_long_changes_the_figures(monkeypatch):
    """The comparison can fail: a repeat that takes the last dense layer for an MoE one (head one layer earlier,
    count + 1, as a detector skipping its checks would) gives other figures than the plain walk."""
    rng = random.Random(5)
    inv, (head, unit, count, lead) = _moe(rng)
    real = parallel.layer_repeat(_copy(inv))
    wrong = parallel.LayerRepeat(head - unit, unit, count + 1, real.prefix, real.first - 1, lead - unit)
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                           "optimizer": {"type": "Adam", "params": {"lr": 1e-4}}, "bf16": {"enabled": True},
                           "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}})
    load = dataclasses.replace(timeline.LoadAssumption(), zero_init=True, dtype="bf16")
    with monkeypatch.context() as m:
        m.setattr(parallel, "LEADING_LAYERS", False)
        plain = _estimate_json(ec, _copy(inv), 8, load)
    with monkeypatch.context() as m:
        m.setattr(parallel, "layer_repeat", lambda i: wrong)
        assert _estimate_json(ec, _copy(inv), 8, load) != plain


@pytest.mark.parametrize("seed", range(8))
def test_offload_reduce_terms_equal_and_periodic(seed, monkeypatch):
    """ZeRO-1/2 CPU offload, buckets of the largest gradient and over (several flushes, none over the bucket: the
    CPU-offload reduce terms' periodic runs apply), or of the largest layer gradient or one less (the embedding,
    lm_head and a layer tensor over it, cloned: periodic at ZeRO-2, state.ZERO12_OFFLOAD_XL_PERIOD, the walk at
    ZeRO-1):
    estimate equal both ways, and the periodic runs taken with the repeat (None without it)."""
    from advisor.ledger import state
    taken = []
    real = state._zero12_offload_periodic_runs

    def spy(*a, **k):
        r = real(*a, **k)
        taken.append(r is not None)
        return r
    monkeypatch.setattr(state, "_zero12_offload_periodic_runs", spy)
    rng = random.Random(4200 + seed)
    xls: set = set()
    for k in range(8):
        inv, _ = _moe(rng)
        largest = max(t.numel for t in inv.tensors)  # a bucket of at least it: no gradient over the bucket
        in_layer = max(t.numel for t in inv.tensors if ".layers." in t.name)
        # or of the largest layer tensor: the embedding / lm_head over it, cloned in their hooks (ZeRO-2 periodic)
        xl = (k == 0 or rng.random() < 0.5) and largest > in_layer
        stage = 2 if k == 0 else rng.choice([1, 2])
        # (in_layer - 1: a layer tensor over the bucket too, in every repeating layer)
        z = {"stage": stage, "reduce_bucket_size": rng.choice([in_layer, in_layer - 1]) if xl else
             rng.choice([largest, largest + 3, 2 * largest]),
             "overlap_comm": rng.random() < 0.5,
             "offload_optimizer": {"device": "cpu"}}
        ec = effective_config({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": rng.choice([1, 2]),
                               "optimizer": {"type": "Adam", "params": {"lr": 1e-4}}, "zero_optimization": z,
                               **rng.choice([{"bf16": {"enabled": True}}, {"fp16": {"enabled": True}}, {}])})
        W = rng.choice([2, 3, 4, 8])
        load = timeline.LoadAssumption()
        del taken[:]
        fast = _estimate_json(ec, _copy(inv), W, load)
        # (ZeRO-1 with a gradient over the bucket: the walk where its clones are modelled, kept by ranks not owning it)
        assert taken and (xl and stage == 1 or all(taken))
        xls.add(xl and stage == 2 and all(taken) or not (xl and stage == 2))
        del taken[:]
        with monkeypatch.context() as m:
            m.setattr(parallel, "LEADING_LAYERS", False)
            plain = _estimate_json(ec, _copy(inv), W, load)
        assert not any(taken)
        assert fast == plain
        if xl and stage == 2:  # and with the repeat, the walk of the extra-large case alone
            with monkeypatch.context() as m:
                m.setattr(state, "ZERO12_OFFLOAD_XL_PERIOD", False)
                assert _estimate_json(ec, _copy(inv), W, load) == fast
    assert False not in xls  # the extra-large periodic case is taken wherever it applies


def test_the_passes_take_the_repeat(monkeypatch):
    """The comparison above is not between two plain walks: over its models the ZeRO-3 reduce-flush period, the
    ZeRO-1/2 flush replay's period and the fetch replay's jump are found (each None without the repeat)."""
    from advisor.ledger import state
    seen: dict = {}
    for name in ("_flush_period", "_zero12_flush_period", "_replay_jump_plan"):
        def spy(*a, _f=getattr(state, name), _n=name, **k):
            r = _f(*a, **k)
            seen.setdefault(_n, set()).add(r is not None)
            return r
        monkeypatch.setattr(state, name, spy)
    for seed in range(4):
        rng = random.Random(2100 + seed)
        for _ in range(5):
            inv, _ = _moe(rng)
            ec = effective_config(_config(rng))
            W = rng.choice([1, 2, 3, 4, 8])
            load = dataclasses.replace(timeline.LoadAssumption(), zero_init=rng.random() < 0.6,
                                       dtype=rng.choice(["fp32", "bf16"]))
            _estimate_json(ec, _copy(inv), W, load)
    assert all(True in seen.get(n, ()) for n in ("_flush_period", "_zero12_flush_period", "_replay_jump_plan")), seen
