"""Issue 21: generate's micro-batch search by pieces picks the plan the exhaustive search picks.

``advisor.views.generate.MICRO_BATCH_SEARCH`` "pieces" (the default) fits O(pieces x log divisors)
micro-batches of each (layout, stage/offload) pair (:func:`generate.micro_batch_representatives`, with
:func:`generate.implied_fit` skipping plans the ones fitted already decide); "exhaustive" fits every
divisor of the sequences per rank with its recompute choice, the search as it was. On seeded small shapes
(tiny llama/gpt2 configs and the gpt2 preset, 1-16 ranks, global batches with many divisors, --micro-batch
unset, --checkpointing unset or fixed, with and without tensor/pipeline layouts, accelerator memory drawn
between the least and the most any plan needs, so that recompute, offload and the largest fitting
micro-batch all move) both must write the same config, byte for byte, and rank the same step time first.

The mutations (each a plausible bug in the shortcut: only each GA range's ends read, a piece's wrong end
ranked, a piece's end one divisor short) must make at least one shape differ: the test above would catch
them. Not a mutation here: one GA range for all micro-batches (``ga_regimes``) changed no shape's answer
(tried on these 36): the split at GA 1 and 2 is a precaution from the code's structure, not shown needed.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from advisor.cluster.hardware import resolve_hardware
from advisor.cluster.overhead import OverheadSettings
from advisor.model.specs import resolve_model
from advisor.views import generate as gen

# sequences per rank with many divisors (12: 6, 36: 9, 48: 10, 60: 12, 72: 12, 96: 12, 120: 16, 180: 18)
PER_RANK = (12, 24, 36, 48, 60, 72, 96, 120, 180)


def _hf(rng: random.Random) -> dict:
    h = rng.choice([128, 256])  # states and activations of one order: offload and recompute both matter
    layers = rng.choice([4, 8, 12, 16])
    if rng.random() < 0.5:
        return {"model_type": "gpt2", "n_embd": h, "n_layer": layers, "n_head": 4, "n_inner": None,
                "vocab_size": rng.choice([500, 2000]), "n_positions": 1024}
    return {"model_type": "llama", "hidden_size": h, "intermediate_size": 3 * h, "num_attention_heads": 4,
            "num_key_value_heads": rng.choice([2, 4]), "vocab_size": rng.choice([500, 2000]),
            "max_position_embeddings": 1024, "num_hidden_layers": layers}


def _shape(rng: random.Random, tmp_path, i: int):
    preset = rng.random() < 0.1
    if preset or rng.random() < 0.2:  # the real card: estimate's runtime overhead with its uncertainty band
        inv = resolve_model("gpt2")
    else:
        p = tmp_path / f"m{i}.json"
        p.write_text(json.dumps(_hf(rng)))
        inv = resolve_model(str(p))
    nodes, gpus = rng.choice([(1, 1), (1, 2), (1, 4), (1, 8), (2, 4), (2, 8)])
    hw = replace(resolve_hardware(rng.choice(["dgx-h100", "dgx-a100"])), nodes=nodes, accelerators_per_node=gpus)
    kw = dict(global_batch=nodes * gpus * rng.choice(PER_RANK), seq_len=rng.choice([128, 256, 512]), nodes=nodes,
              gpus_per_node=gpus, model_parallel=rng.random() < 0.5,
              checkpointing=rng.choice([None, None, None, "full", "selective", "2"]))
    if not preset:  # tiny models: no runtime overhead (its GiB band would hide their MiB), memory calibrated
        kw["overhead"] = OverheadSettings(overrides={"total": 0})
    return inv, hw, kw, preset


def _calibrated(inv, hw, kw, rng: random.Random):
    """``hw`` with accelerator memory drawn around the least a data-parallel plan needs (micro-batch 1, full
    recompute, the least-memory plan) and up to the most (the whole per-rank batch in one micro-batch, no
    recompute), read from two one-micro-batch searches on a large card."""
    big = replace(hw, accelerator=replace(hw.accelerator, memory_bytes=1 << 50))
    per_rank = kw["global_batch"] // (kw["nodes"] * kw["gpus_per_node"])
    lo = gen.search(inv, big, gen.Request(**{**kw, "micro_batch": 1, "checkpointing": "full",
                                            "model_parallel": False}))
    hi = gen.search(inv, big, gen.Request(**{**kw, "micro_batch": per_rank, "checkpointing": "none",
                                            "model_parallel": False}))
    n_lo = min(c.accelerator for c in lo.ranked)
    n_hi = max(c.accelerator for c in hi.ranked)
    # near the least (offload, recompute; below it only tensor/pipeline layouts fit), low, or anywhere
    u = rng.choice([None, rng.uniform(0.0, 0.15), rng.uniform(0.0, 1.1)])
    mem = int(n_lo * rng.uniform(0.6, 1.05)) if u is None else int(n_lo + u * (n_hi - n_lo))
    return replace(hw, accelerator=replace(hw.accelerator, memory_bytes=mem))


def _best(inv, hw, req, mode: str, monkeypatch) -> tuple:
    monkeypatch.setattr(gen, "MICRO_BATCH_SEARCH", mode)
    res = gen.search(inv, hw, req)
    b = res.best
    if b is None:
        return (None,)
    return (json.dumps(b.config, sort_keys=True), b.tp, b.pp, b.sp, b.step_time_s, res.evaluated)


def _cases(tmp_path, seed: int, n: int):
    rng = random.Random(2100 + seed)
    for i in range(n):
        inv, hw, kw, preset = _shape(rng, tmp_path, 100 * seed + i)
        yield inv, hw if preset else _calibrated(inv, hw, kw, rng), gen.Request(**kw), kw


@pytest.mark.parametrize("seed", range(6))
def test_pieces_search_picks_the_exhaustive_best(tmp_path, monkeypatch, seed):
    found = 0
    for inv, hw, req, kw in _cases(tmp_path, seed, 6):
        ex = _best(inv, hw, req, "exhaustive", monkeypatch)
        pc = _best(inv, hw, req, "pieces", monkeypatch)
        assert ex[:5] == pc[:5], (inv.name, kw, hw.accelerator.memory_bytes, ex, pc)
        found += ex[0] is not None
    assert found  # the shapes are not all refusals


def _mutant_top_only(micros, per_rank, choose, pipeline):
    """A bisection that trusts each GA range's ends: the settings between them never read."""
    out = []
    for xs in gen.ga_regimes(micros, per_rank):
        for b in {xs[0], xs[-1]}:
            c = choose(b)
            if c is not None:
                out.append(c)
    return sorted(out, key=lambda c: -c.micro)


def _mutant_wrong_end(micros, per_rank, choose, pipeline):
    """The representatives taken at the wrong end of each piece."""
    return gen.__dict__["_real_reps"](micros, per_rank, choose, not pipeline)


def _mutant_shifted_split(micros, per_rank, choose, pipeline):
    """The bisection's midpoint read, but a piece's end taken one divisor short (an off-by-one)."""
    reps = gen.__dict__["_real_reps"](micros, per_rank, choose, pipeline)
    out = []
    for c in reps:
        i = micros.index(c.micro)
        j = i - 1 if not pipeline else i + 1
        d = choose(micros[j]) if 0 <= j < len(micros) else None
        out.append(d if d is not None and d.checkpointing == c.checkpointing else c)
    return sorted(out, key=lambda c: -c.micro)


@pytest.mark.parametrize("mutant", ["top_only", "wrong_end", "shifted_split"])
def test_the_identity_test_catches_a_broken_bisection(tmp_path, monkeypatch, mutant):
    real = gen.micro_batch_representatives
    monkeypatch.setitem(gen.__dict__, "_real_reps", real)
    caught = False
    for seed in range(6):
        for inv, hw, req, kw in _cases(tmp_path, seed, 6):
            ex = _best(inv, hw, req, "exhaustive", monkeypatch)
            with monkeypatch.context() as m:
                m.setattr(gen, "micro_batch_representatives",
                          {"top_only": _mutant_top_only, "wrong_end": _mutant_wrong_end,
                           "shifted_split": _mutant_shifted_split}[mutant])
                pc = _best(inv, hw, req, "pieces", monkeypatch)
            if ex[:5] != pc[:5]:
                caught = True
                break
        if caught:
            break
    assert caught, f"mutant {mutant} went unnoticed by the identity shapes"


def _divisor_count(n: int) -> int:
    """d(n) from n's prime factorisation: the product of (exponent + 1) (independent of generate.divisors)."""
    count, p = 1, 2
    while p * p <= n:
        e = 0
        while n % p == 0:
            n //= p
            e += 1
        count *= e + 1
        p += 1
    return count * (2 if n > 1 else 1)


def test_plans_fitted_grow_with_log_divisors_not_divisors(monkeypatch):
    """gpt2 on one H100, sequence 1024: 7,560 sequences per rank (2^3 3^3 5 7: 64 divisors) and
    963,761,198,400 (2^6 3^4 5^2 7^2 11 13 17 19: 6,720 divisors, the most of any number up to --global-batch's
    2^40; more than 200 s when each divisor was searched, then refused by genlim21's 64-divisor limit) are both
    searched, and the second fits fewer than 4x the plans of the first for 105x the divisors: the search by
    pieces reads O(log divisors) micro-batches per piece. The exhaustive reference fits each divisor's recompute
    choice (at least one plan per divisor and stage/offload combination that passes the probe)."""
    assert (_divisor_count(7_560), _divisor_count(963_761_198_400)) == (64, 6_720)
    inv = resolve_model("gpt2")
    hw = replace(resolve_hardware("dgx-h100"), nodes=1, accelerators_per_node=1)
    got = {}
    for per_rank in (7_560, 963_761_198_400):
        res = gen.search(inv, hw, gen.Request(global_batch=per_rank, seq_len=1024, nodes=1, gpus_per_node=1))
        assert res.best is not None
        got[per_rank] = res.evaluated
    assert got[963_761_198_400] < 4 * got[7_560], got
    monkeypatch.setattr(gen, "MICRO_BATCH_SEARCH", "exhaustive")
    assert gen.search(inv, hw, gen.Request(global_batch=7_560, seq_len=1024, nodes=1,
                                           gpus_per_node=1)).evaluated > 2 * got[7_560]


def test_many_divisors_cli_runs_and_micro_batch_given_still_searches_one():
    """The request genlim21 refused (exit 2) now writes a config (exit 0); --micro-batch still fixes it."""
    from tests.conftest import run_cli
    args = ["generate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "1",
            "--global-batch", "963761198400", "--seq-len", "1024", "--format", "json"]
    p = run_cli(args)
    assert p.returncode == 0, p.stderr[-500:]
    best = json.loads(p.stdout)["best"]
    assert best["train_batch_size"] == 963_761_198_400
    assert 963_761_198_400 % best["train_micro_batch_size_per_gpu"] == 0
    q = run_cli([*args, "--micro-batch", "4"])
    assert q.returncode == 0, q.stderr[-500:]
    assert json.loads(q.stdout)["best"]["train_micro_batch_size_per_gpu"] == 4
