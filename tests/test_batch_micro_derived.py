"""The micro-batch estimate, check and generate count is the one DeepSpeed runs (session 23, fixe23).

``{"train_batch_size": 64, "gradient_accumulation_steps": 4}`` at world size 8 runs micro-batch 2
(DeepSpeed 0.19.8 ``runtime/config.py`` ``_set_batch_related_parameters``: 64 // 8 // 4), and
``{"train_batch_size": 64}`` alone runs micro-batch 8 with GA 1; estimate counted the activations (the
peak, movements, M100 fixes) at micro-batch 1: a peak too low. The expected micro-batch here is
DeepSpeed's own: its ``DeepSpeedConfig`` built with the world size faked (``dist.get_world_size``), and
under tensor / pipeline parallelism with an mpu whose data-parallel size is W / (TP x PP) (what
``DeepSpeedConfig.__init__`` l.462-463 reads from a PipelineModule's grid or Megatron's mpu).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_json

MODEL = "llama-3.2-1b"
BASE = {"bf16": {"enabled": True}}

#: (batch keys, world size, tensor parallel, pipeline parallel): the DeepSpeed config's triples.
CASES = [
    ({"train_batch_size": 64, "gradient_accumulation_steps": 4}, 8, 1, 1),   # the lead's: 2
    ({"train_batch_size": 64}, 8, 1, 1),                                      # GA 1: 8
    ({"train_batch_size": 48, "gradient_accumulation_steps": 2}, 4, 1, 1),   # 6
    ({"train_batch_size": 32, "gradient_accumulation_steps": 2}, 8, 2, 1),   # TP 2, DP 4: 4
    ({"train_batch_size": 24, "gradient_accumulation_steps": 3}, 8, 1, 2),   # PP 2, DP 4: 2
    ({"train_batch_size": 16}, 8, 2, 2),                                      # TP 2 x PP 2, DP 2: 8
]
IDS = ["tb64-ga4-w8", "tb64-w8", "tb48-ga2-w4", "tb32-ga2-w8-tp2", "tb24-ga3-w8-pp2", "tb16-w8-tp2-pp2"]


def deepspeed_micro_batch(keys: dict, world: int, tp: int, pp: int, monkeypatch) -> int:
    """train_micro_batch_size_per_gpu as DeepSpeed's DeepSpeedConfig sets it at ``world`` ranks."""
    ds_config = pytest.importorskip("deepspeed.runtime.config")
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(ds_config.dist, "get_world_size", lambda *a, **k: world)

    class Mpu:  # a PipelineParallelGrid / Megatron mpu: data-parallel ranks = W / (TP x PP)
        def get_data_parallel_world_size(self):
            return world // (tp * pp)

    mpu = Mpu() if tp * pp > 1 else None
    c = ds_config.DeepSpeedConfig({**BASE, **keys, "zero_optimization": {"stage": 1}}, mpu)
    assert c.world_size == world // (tp * pp)
    return c.train_micro_batch_size_per_gpu


def _config(tmp_path, name: str, keys: dict, stage: int) -> str:
    p = tmp_path / name
    p.write_text(json.dumps({**BASE, **keys, "zero_optimization": {"stage": stage}}))
    return str(p)


def _shape(world: int, tp: int, pp: int) -> list[str]:
    return (["--model", MODEL, "--world-size", str(world), "--seq-len", "2048"]
            + (["--tensor-parallel", str(tp)] if tp > 1 else []) + (["--pipeline-parallel", str(pp)] if pp > 1 else []))


def _activations(d: dict) -> list[int]:
    return [r["tiers"]["accelerator"]["activations"] for r in d["ranks"]]


@pytest.mark.parametrize("keys, world, tp, pp", CASES, ids=IDS)
def test_estimate_counts_the_micro_batch_deepspeed_derives(tmp_path, monkeypatch, keys, world, tp, pp):
    want = deepspeed_micro_batch(keys, world, tp, pp, monkeypatch)
    stage = 1 if pp > 1 else 2  # ZeRO-2 under pipeline parallelism is refused (G001)
    derived = _config(tmp_path, "derived.json", keys, stage)
    rc, d = run_json(["estimate", derived, *_shape(world, tp, pp), "--format", "json"])
    assert d["assumptions"]["workload"]["micro_batch"] == want, d["assumptions"]["workload"]
    # the activations row: the bytes of the same job with the micro-batch written explicitly
    explicit = _config(tmp_path, "explicit.json", {**keys, "train_micro_batch_size_per_gpu": want}, stage)
    rc2, e = run_json(["estimate", explicit, *_shape(world, tp, pp), "--format", "json"])
    assert rc == rc2 and e["assumptions"]["workload"]["micro_batch"] == want
    assert _activations(d) == _activations(e) and all(_activations(d)), (_activations(d), _activations(e))
    if want != 1:  # the row depends on the micro-batch at all: 1 would give other bytes (main's count)
        one = _config(tmp_path, "one.json", {**keys, "train_micro_batch_size_per_gpu": 1,
                                             "gradient_accumulation_steps": 1,
                                             "train_batch_size": world // (tp * pp)}, stage)
        rc3, o = run_json(["estimate", one, *_shape(world, tp, pp), "--format", "json"])
        assert _activations(o) != _activations(d)


def test_check_judges_the_micro_batch_deepspeed_derives(tmp_path, monkeypatch):
    keys, world = CASES[0][0], CASES[0][1]
    want = deepspeed_micro_batch(keys, world, 1, 1, monkeypatch)
    assert want == 2
    common = [*_shape(world, 1, 1), "--gpu-memory", "80GB", "--host-memory", "1TB", "--format", "json"]
    need = {}
    for name, k in (("derived", keys), ("explicit", {**keys, "train_micro_batch_size_per_gpu": want}),
                    ("one", {"train_batch_size": 32, "gradient_accumulation_steps": 4,
                             "train_micro_batch_size_per_gpu": 1})):
        rc, d = run_json(["check", _config(tmp_path, f"{name}.json", k, 2), *common])
        need[name] = [t["need"] for t in d["tiers"] if t["tier"] == "accelerator"]
    assert need["derived"] == need["explicit"] and need["derived"] != need["one"], need


def test_generate_writes_a_micro_batch_estimate_derives_back(tmp_path, monkeypatch):
    """generate's plan at micro-batch m writes the triple; without its train_micro_batch_size_per_gpu key
    DeepSpeed derives m back from the other two, and so does estimate."""
    out = tmp_path / "gen" / "ds.json"
    out.parent.mkdir()
    rc, _ = run_json(["generate", "--model", MODEL, "--hardware", "dgx-h100", "--nodes", "1", "--global-batch", "64",
                      "--seq-len", "2048", "-o", str(out), "--format", "json"])
    written = json.loads(out.read_text())
    m = json.loads((tmp_path / "gen" / "ds.workload.json").read_text())["micro_batch"]
    assert written["train_micro_batch_size_per_gpu"] == m
    trimmed = {k: v for k, v in written.items() if k != "train_micro_batch_size_per_gpu"}
    assert deepspeed_micro_batch({k: trimmed[k] for k in ("train_batch_size", "gradient_accumulation_steps")},
                                 8, 1, 1, monkeypatch) == m
    p = tmp_path / "trimmed.json"  # no sidecar beside it
    p.write_text(json.dumps(trimmed))
    rc, d = run_json(["estimate", str(p), *_shape(8, 1, 1), "--format", "json"])
    assert d["assumptions"]["workload"]["micro_batch"] == m


def test_a_micro_batch_flag_is_a_what_if_and_says_what_deepspeed_runs(tmp_path, monkeypatch):
    keys, world = CASES[0][0], CASES[0][1]
    want = deepspeed_micro_batch(keys, world, 1, 1, monkeypatch)
    cfg = _config(tmp_path, "derived.json", keys, 2)
    rc, d = run_json(["estimate", cfg, *_shape(world, 1, 1), "--micro-batch", "1", "--format", "json"])
    assert d["assumptions"]["workload"]["micro_batch"] == 1  # the flag: the user's what-if
    notes = [n for n in d["assumptions"]["notes"] if "--micro-batch" in n["message"]]
    assert len(notes) == 1 and f"micro-batch {want}" in notes[0]["message"], d["assumptions"]["notes"]
    rc, d = run_json(["estimate", cfg, *_shape(world, 1, 1), "--micro-batch", str(want), "--format", "json"])
    assert not [n for n in d["assumptions"]["notes"] if "--micro-batch" in n["message"]]
    # check says it too (a warning), and judges the flag's micro-batch
    rc, c = run_json(["check", cfg, *_shape(world, 1, 1), "--micro-batch", "1", "--gpu-memory", "80GB",
                      "--host-memory", "1TB", "--format", "json"])
    assert [w for w in c["warnings"] if "--micro-batch 1 is a what-if" in w and f"micro-batch {want}" in w], c["warnings"]
