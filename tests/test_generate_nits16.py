"""Newcomer nits (s16): four user-visible defects of generate / --model.

1. An inventory whose ``tensors`` is not a non-empty list of objects was refused by generate for its missing
   architecture (no meta) while estimate named the real defect; both now name the entry (``/tensors/0: ...,
   got a number``), the words of ``inventory.from_dict``.
2. A --model file whose top level is not an object says what it is (``got an array``: JSON's words,
   ``config/validation.json_kind``), not a list of keys it lacks.
3. "shards more: ZeRO-1" was said of a plan at data-parallel size 1, where ZeRO partitions over one rank
   (``runtime/zero/stage_1_and_2.py`` l.289-294: ``partition_count`` = the data-parallel group's size).
4. generate's JSON ``rejected`` entries carry their layout, as ``plans`` do; checked against DeepSpeed's batch
   identity ``train_batch_size = micro x GA x DP`` (``runtime/config.py`` _batch_assertion), DP = world / (t x p x sp).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

GEN = ["--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "8", "--seq-len", "128"]
ENTRY = 'expected an object (one tensor, e.g. {"name": "w", "shape": [64, 64]}), got '


def _one_line(p, code=2):
    assert p.returncode == code, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("ds-advisor:")]
    assert len(lines) == 1, p.stderr
    return lines[0]


@pytest.mark.parametrize("tensors, words", [
    ([1, 2, 3], "/tensors/0: " + ENTRY + "a number"),
    ([{"name": "a", "shape": [2]}, "x", None], "/tensors/1: " + ENTRY + "a string"),
    ({}, "/tensors: expected a non-empty array of tensor objects, got an object"),
    ([], "/tensors: expected a non-empty array of tensor objects, got an empty array"),
])
def test_generate_names_the_bad_tensors_entry_not_the_architecture(tmp_path, tensors, words):
    f = tmp_path / "inv.json"
    f.write_text(json.dumps({"tensors": tensors}))
    line = _one_line(run_cli(["generate", "--model", str(f), *GEN]))
    assert words in line and "architecture" not in line, line


def test_generate_still_asks_for_the_architecture_of_a_well_formed_inventory(tmp_path):
    f = tmp_path / "inv.json"
    f.write_text(json.dumps({"name": "n", "tensors": [{"name": "w0", "shape": [4, 4]}]}))
    line = _one_line(run_cli(["generate", "--model", str(f), *GEN]))
    assert "generate needs the architecture (hidden_size missing)" in line, line


@pytest.mark.parametrize("doc, kind", [([1, 2], "an array"), ("hello", "a string"), (42, "a number"),
                                       (None, "null"), (True, "true")])
@pytest.mark.parametrize("command", ["estimate", "generate"])
def test_a_model_file_that_is_not_an_object_says_what_it_is(tmp_path, doc, kind, command):
    f = tmp_path / "m.json"
    f.write_text(json.dumps(doc))
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1}))
    args = (["estimate", str(cfg), "--model", str(f), "--world-size", "1"] if command == "estimate"
            else ["generate", "--model", str(f), *GEN])
    line = _one_line(run_cli(args))
    assert line.endswith(f"got {kind}"), line
    assert str(f) in line


def test_shards_more_only_over_more_than_one_data_parallel_rank():
    """gpt2 on 1 x 8, global batch 8: #1 and #2 are TP2+SP PP4 (DP 8 / 8 = 1) at ZeRO-0 and ZeRO-1."""
    p = run_cli(["generate", "--model", "gpt2", *GEN, "--format", "json"])
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)
    seen = 0
    for c in d["plans"]:
        dp = 8 // (c["tensor_parallel"] * c["pipeline_parallel"] * c["sequence_parallel"])
        if dp == 1:
            assert "shards more" not in c["why"], c
            if c["stage"] > d["plans"][0]["stage"] and "ZeRO" in c["why"]:
                assert "shards nothing at data-parallel size 1" in c["why"], c
                seen += 1
    assert seen, [c["why"] for c in d["plans"]]  # the case the newcomer found is still in the top plans


def test_the_same_wording_at_data_parallel_size_above_1_says_shards_more():
    from advisor.views import generate as gen
    best = gen.Candidate(combo=gen.Combo(0, "none"), micro=1, ga=1, checkpointing="none", accelerator=1, host=1,
                         nvme=0, activations=0, states_source="t", tp=2, pp=2)
    other = gen.Candidate(combo=gen.Combo(1, "none"), micro=1, ga=1, checkpointing="none", accelerator=1, host=1,
                          nvme=0, activations=0, states_source="t", tp=2, pp=2)
    assert gen._tie_reason(other, best, 8) == "shards more: ZeRO-1"  # DP 8 / 4 = 2
    assert "shards nothing at data-parallel size 1" in gen._tie_reason(other, best, 4)  # DP 1


def test_rejected_entries_carry_their_layout():
    """llama-3-8b on 1 x 2 H100s: ZeRO-0 (16 B per parameter) cannot fit, so plans are rejected."""
    p = run_cli(["generate", "--model", "llama-3-8b", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node",
                 "2", "--global-batch", "8", "--seq-len", "128", "--format", "json"])
    assert p.returncode in (0, 1), p.stderr[-2000:]
    d = json.loads(p.stdout)
    assert d["rejected"]
    for r in d["rejected"]:
        for k in ("tensor_parallel", "pipeline_parallel", "sequence_parallel", "gradient_accumulation"):
            assert isinstance(r[k], int) and r[k] >= 1, (k, r)
        dp = 2 // (r["tensor_parallel"] * r["pipeline_parallel"] * r["sequence_parallel"])
        assert r["micro_batch"] * r["gradient_accumulation"] * dp == 8, r  # train_batch = micro x GA x DP
        assert r["megatron_sp"] == (r["tensor_parallel"] > 1)
    assert {r["tensor_parallel"] * r["pipeline_parallel"] for r in d["rejected"]} != {1}, "only DP layouts"


# 5. estimate --save-dir: the tier's wear in the text report, or one note saying why it is not counted. By hand:
# dgx-h100's 'raid' tier is mounted at /raid (hardware preset), one save every 3,600 s = 86,400 / 3,600 = 24 saves/day.
EST = ["estimate", "CFG", "--model", "llama-3-8b", "--world-size", "8"]


@pytest.fixture
def z1_config(tmp_path):
    f = tmp_path / "z1.json"
    f.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                             "zero_optimization": {"stage": 1}}))
    return str(f)


def _estimate(cfg, *extra):
    p = run_cli([cfg if a == "CFG" else a for a in EST] + list(extra))
    assert p.returncode in (0, 1), p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    return " ".join(p.stdout.split())  # folded lines joined


def test_estimate_shows_the_save_dirs_tier_wear(z1_config):
    out = _estimate(z1_config, "--hardware", "dgx-h100", "--save-dir", "/raid/ckpt", "--save-interval", "3600")
    assert "save_dir /raid/ckpt on tier 'raid'" in out, out[-3000:]
    assert "24.00 saves/day" in out and "of the drive's rated endurance per day" in out, out[-3000:]


@pytest.mark.parametrize("extra, why", [
    (["--hardware", "dgx-h100", "--save-dir", "ckpt"],
     "save_dir ckpt: its tier's wear is not counted: no storage tier of the --hardware spec holds it "
     "(give an absolute path)"),
    (["--save-dir", "/raid/ckpt"], "save_dir /raid/ckpt: its tier's wear is not counted: no --hardware"),
])
def test_estimate_says_why_a_save_dir_is_not_counted(z1_config, extra, why):
    out = _estimate(z1_config, *extra)
    assert why in out, out[-3000:]
    assert "saves/day" not in out
