"""One workload for every command: generate records what it assumed in a sidecar next to the
config (advisor.views.workload); check and estimate read it back, and say what they assumed."""

from __future__ import annotations

import json

from tests.conftest import run_cli

GEN = ["generate", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
       "--global-batch", "64", "--seq-len", "4096"]
# the dgx-h100 preset's capacity as nvidia-smi reports it (81,559 MiB), which generate planned for:
# a plan that fits there can be "tight" on 80 GB, and check then exits 4
CHECK = ["--model", "llama-3.1-8b", "--world-size", "8", "--gpus-per-node", "8", "--gpu-memory", "81559MiB",
         "--host-memory", "2000GB", "--format", "json"]


def test_generate_then_check_round_trip_is_go(tmp_path):
    cfg = tmp_path / "ds.json"
    g = run_cli(GEN + ["-o", str(cfg)])
    assert g.returncode == 0, g.stderr
    side = json.loads((tmp_path / "ds.workload.json").read_text())
    assert side["seq_len"] == 4096 and side["checkpointing"] in ("none", "full")
    c = run_cli(["check", str(cfg)] + CHECK)
    d = json.loads(c.stdout)
    assert c.returncode == 0, (d["tiers"], d["warnings"])
    assert any("seq_len = 4096 (from ds.workload.json)" in w for w in d["warnings"])
    # the same job judged with the model's full context and no checkpointing: the NO-GO the
    # issue reported, now only when the sidecar is missing, and it says what it assumed
    (tmp_path / "ds.workload.json").unlink()
    c2 = run_cli(["check", str(cfg)] + CHECK)
    d2 = json.loads(c2.stdout)
    assert c2.returncode == 1
    assert any("131,072 tokens" in w for w in d2["warnings"])
    assert any("seq_len = the model's maximum context (default)" in w for w in d2["warnings"])


def test_flags_beat_the_sidecar_and_bad_sidecar_is_exit_2(tmp_path):
    cfg = tmp_path / "ds.json"
    assert run_cli(GEN + ["-o", str(cfg)]).returncode == 0
    e = run_cli(["estimate", str(cfg), "--model", "llama-3.1-8b", "--world-size", "8", "--seq-len", "1024",
                 "--format", "json"])
    d = json.loads(e.stdout)
    assert d["assumptions"]["workload"]["seq_len"] == 1024
    (tmp_path / "ds.workload.json").write_text('{"seq_len": "long"}')
    bad = run_cli(["check", str(cfg)] + CHECK)
    assert bad.returncode == 2 and "ds.workload.json" in bad.stderr and "/seq_len" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_estimate_warns_loudly_without_seq_len(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}))
    p = run_cli(["estimate", str(f), "--model", "llama-3.1-8b", "--world-size", "8", "--format", "json"])
    assert "warning" in p.stderr and "131,072 tokens" in p.stderr


def test_check_takes_the_parallel_options(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8,
                             "bf16": {"enabled": True}, "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 1}}))
    base = ["check", str(f), "--model", "llama-2-13b", "--world-size", "32", "--gpus-per-node", "8",
            "--gpu-memory", "80GB", "--host-memory", "2000GB", "--seq-len", "4096", "--checkpointing", "full",
            "--format", "json"]
    tp1 = json.loads(run_cli(base).stdout)
    tp4 = json.loads(run_cli(base + ["--tensor-parallel", "4"]).stdout)
    need = lambda d: next(t["need"] for t in d["tiers"] if t["tier"] == "accelerator")  # noqa: E731
    assert need(tp4) < need(tp1) / 2
