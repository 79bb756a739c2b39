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


def _need(d):
    return next(t["need"] for t in d["tiers"] if t["tier"] == "accelerator")


def test_the_configs_micro_batch_beats_the_sidecar_and_the_mismatch_is_W002(tmp_path):
    """Issue #17 item 1: a generated config edited to another micro-batch (the batch triple kept
    consistent), its sidecar kept, was judged at the sidecar's micro-batch. DeepSpeed feeds each
    rank train_micro_batch_size_per_gpu (runtime/config.py), so the config's value is the one
    judged: the same need as --micro-batch with that value, and W002 names the disagreement."""
    cfg = tmp_path / "ds.json"
    assert run_cli(GEN + ["-o", str(cfg)]).returncode == 0
    side = json.loads((tmp_path / "ds.workload.json").read_text())
    c0 = json.loads(run_cli(["check", str(cfg)] + CHECK).stdout)
    assert not any(f["code"] == "W002" for f in c0["findings"]), c0["findings"]  # the config it was written for
    d = json.loads(cfg.read_text())
    m, ga = d["train_micro_batch_size_per_gpu"], d["gradient_accumulation_steps"]
    assert side["batch"] == {"train_batch_size": d["train_batch_size"], "train_micro_batch_size_per_gpu": m,
                             "gradient_accumulation_steps": ga}
    assert ga % 2 == 0, d  # the edit below keeps train_batch_size = micro x GA x 8
    d["train_micro_batch_size_per_gpu"], d["gradient_accumulation_steps"] = 2 * m, ga // 2
    cfg.write_text(json.dumps(d, indent=1))  # re-indented too: only values count
    edited = json.loads(run_cli(["check", str(cfg)] + CHECK).stdout)
    flag = json.loads(run_cli(["check", str(cfg), "--micro-batch", str(2 * m)] + CHECK).stdout)
    old = json.loads(run_cli(["check", str(cfg), "--micro-batch", str(m)] + CHECK).stdout)
    assert _need(edited) == _need(flag) > _need(old)
    w = [f for f in edited["findings"] if f["code"] == "W002"]
    assert len(w) == 1 and w[0]["severity"] == "warning" and w[0]["pointer"] == "/train_micro_batch_size_per_gpu"
    assert f"train_micro_batch_size_per_gpu {2 * m} (the sidecar: {m})" in w[0]["message"]
    assert f"gradient_accumulation_steps {ga // 2} (the sidecar: {ga})" in w[0]["message"]
    assert any(f"micro_batch = {2 * m} (the config's train_micro_batch_size_per_gpu)" in x for x in edited["warnings"])
    # estimate reads the same: the config's micro-batch, W002 among its findings
    e = json.loads(run_cli(["estimate", str(cfg), "--model", "llama-3.1-8b", "--world-size", "8",
                            "--format", "json"]).stdout)
    assert e["assumptions"]["workload"]["micro_batch"] == 2 * m
    assert any(f["code"] == "W002" for f in e["findings"])


def test_a_sidecar_from_before_the_batch_record_is_compared_by_micro_batch(tmp_path):
    """A sidecar written before it recorded the config (only micro_batch): still compared."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
                               "bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}))
    (tmp_path / "ds.workload.json").write_text(json.dumps({"written_by": "ds-advisor generate", "seq_len": 1024,
                                                           "micro_batch": 2, "checkpointing": "full"}))
    c = json.loads(run_cli(["check", str(cfg)] + CHECK).stdout)
    w = [f for f in c["findings"] if f["code"] == "W002"]
    assert w and "train_micro_batch_size_per_gpu 4 (the sidecar: 2)" in w[0]["message"]
    assert "checkpointing full" in w[0]["message"]  # the sidecar's assumption still in use


def test_an_edited_config_with_the_same_batch_is_W002_info(tmp_path):
    cfg = tmp_path / "ds.json"
    assert run_cli(GEN + ["-o", str(cfg)]).returncode == 0
    d = json.loads(cfg.read_text())
    d["optimizer"]["params"]["lr"] = 3e-4
    cfg.write_text(json.dumps(d))
    c = json.loads(run_cli(["check", str(cfg)] + CHECK).stdout)
    w = [f for f in c["findings"] if f["code"] == "W002"]
    assert [x["severity"] for x in w] == ["info"] and "config_sha256 differs" in w[0]["message"]


def _gen(tmp_path, *extra, model="llama-3.1-8b", seq="4096", name="g.json"):
    cfg = tmp_path / name
    args = ["generate", "--model", model, "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
            "--global-batch", "64", "--seq-len", seq, "-o", str(cfg), "--format", "json", *extra]
    p = run_cli(args)
    assert p.returncode == 0, p.stderr[-2000:]
    return cfg, json.loads(p.stdout), json.loads(cfg.with_name(cfg.stem + ".workload.json").read_text())


def test_generate_takes_the_workload_options_fixed_and_records_them(tmp_path):
    """Issue #17 item 5: generate takes estimate's workload options from the one definition
    (cli.WORKLOAD_OPTIONS and the parallel sizes), fixes each one given instead of searching it,
    and records it in the sidecar, which check and estimate read back."""
    cfg, d, side = _gen(tmp_path, "--attention", "eager", "--micro-batch", "2", "--checkpointing", "full")
    assert d["plans"] and all(p["micro_batch"] == 2 and p["checkpointing"] == "full" for p in d["plans"])
    assert side["attention"] == "eager" and side["checkpointing"] == "full"
    assert json.loads(cfg.read_text())["train_micro_batch_size_per_gpu"] == 2
    assert d["assumptions"]["activations"].startswith("eager attention")
    # eager attention keeps the s x s scores (and more) that flash does not: the same plan needs more
    _, f, _ = _gen(tmp_path, "--attention", "flash", "--micro-batch", "2", "--checkpointing", "full", name="f.json")
    key = lambda p: (p["stage"], p["offload_optimizer"], p["offload_param"])  # noqa: E731
    flash = {key(p): p["activation_bytes_per_rank"] for p in f["plans"]}
    both = [p for p in d["plans"] if key(p) in flash]
    assert both and all(p["activation_bytes_per_rank"] > flash[key(p)] for p in both)
    c = json.loads(run_cli(["check", str(cfg)] + CHECK).stdout)
    assert any("attention = eager (from g.workload.json)" in w for w in c["warnings"]), c["warnings"]
    assert c["exit_code"] == 0 and not any(x["code"] == "W002" for x in c["findings"])


def test_generate_fixed_parallel_sizes_and_capacity_factor(tmp_path):
    # --tensor-parallel fixes TP only: the pipeline degree is still searched (32eaee4 ranks one plan per run of
    # micro-batches, so a TP 2 x PP 2 plan now reaches the top five); fixing both fixes both
    _, d, side = _gen(tmp_path, "--tensor-parallel", "2")
    assert d["plans"] and all(p["tensor_parallel"] == 2 for p in d["plans"])
    assert side["tensor_parallel"] == 2
    _, d, side = _gen(tmp_path, "--tensor-parallel", "2", "--pipeline-parallel", "1", name="tp.json")
    assert d["plans"] and all(p["tensor_parallel"] == 2 and p["pipeline_parallel"] == 1 for p in d["plans"])
    assert side["tensor_parallel"] == 2
    cfg, d, side = _gen(tmp_path, "--sequence-parallel", "4", seq="32768", name="u.json")
    assert d["plans"] and all(p["sequence_parallel"] == 4 for p in d["plans"])
    assert json.loads(cfg.read_text())["sequence_parallel_size"] == 4
    bad = run_cli(GEN + ["--tensor-parallel", "3"])  # 3 divides neither 8 GPUs per node nor 32 heads
    assert bad.returncode == 2 and "--tensor-parallel 3" in bad.stderr and "Traceback" not in bad.stderr
    # MoE capacity factor: generate's activations are estimate's for the written config + sidecar
    cfg, d, side = _gen(tmp_path, "--moe-capacity-factor", "1.0", model="mixtral-8x7b", name="m.json")
    assert side["moe_capacity_factor"] == 1.0 and "MoE capacity factor 1" in d["assumptions"]["activations"]
    # ZeRO-3 is out for DeepSpeed's MoE layer (G008: deepspeed.initialize refuses it), so the plan is a
    # pipeline one: its activations are its largest stage's, each estimate role's peak_accelerator
    # (saved + the largest transient, advisor.model.activations.ActivationEstimate.peak_accelerator)
    assert d["plans"][0]["stage"] != 3 and side["pipeline_parallel"] > 1
    e = json.loads(run_cli(["estimate", str(cfg), "--model", "mixtral-8x7b", "--world-size", "8",
                            "--format", "json"]).stdout)
    peaks = [r["activations"]["saved_accelerator"] + max(r["activations"]["loss_spike"],
                                                          r["activations"]["loss_backward_spike"],
                                                          r["activations"]["recompute_layer"]) for r in e["ranks"]]
    assert max(peaks) == d["plans"][0]["activation_bytes_per_rank"]


def test_the_configs_sequence_parallel_size_beats_the_sidecar(tmp_path):
    """DeepSpeed reads sequence_parallel_size from the config (runtime/config.py, default 1): a
    sidecar saying otherwise is W002, and the config's degree is the one estimated."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1,
                               "gradient_accumulation_steps": 1, "sequence_parallel_size": 2,
                               "bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}))
    (tmp_path / "ds.workload.json").write_text(json.dumps({"seq_len": 8192, "sequence_parallel": 4}))
    e = json.loads(run_cli(["estimate", str(cfg), "--model", "llama-3.1-8b", "--world-size", "8",
                            "--format", "json"]).stdout)
    assert e["cluster"]["sequence_parallel"] == 2, e["cluster"]
    w = [f for f in e["findings"] if f["code"] == "W002"]
    assert w and w[0]["pointer"] == "/sequence_parallel_size" and "(the sidecar: 4)" in w[0]["message"]


def test_lint_checks_the_batch_over_the_sidecars_data_parallel_ranks(tmp_path):
    """A generated model-parallel plan (TP 2 on 16 ranks) is linted over its data-parallel ranks:
    with Megatron's mpu DeepSpeed asserts train_batch_size == micro x GA x mpu's data-parallel
    world size (runtime/config.py DeepSpeedConfig._batch_assertion), here 1 x 32 x 16 / 2 = 256.
    The clean-clone CI run caught lint calling generate's own TP-2 config a B001 error at dp 16."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_batch_size": 256, "train_micro_batch_size_per_gpu": 1,
                               "gradient_accumulation_steps": 32, "bf16": {"enabled": True}}))
    lint = ["lint", "--format", "json", "--world-size", "16", str(cfg)]
    no_side = json.loads(run_cli(lint).stdout)["files"][0]["findings"]
    assert [f["code"] for f in no_side] == ["B001"] and no_side[0]["data"]["dp_world_size"] == 16
    (tmp_path / "ds.workload.json").write_text(json.dumps({"tensor_parallel": 2, "pipeline_parallel": 1}))
    r = run_cli(lint)
    assert r.returncode == 0 and json.loads(r.stdout)["files"][0]["findings"] == []
    (tmp_path / "ds.workload.json").write_text(json.dumps({"tensor_parallel": 4, "pipeline_parallel": 2}))
    bad = json.loads(run_cli(lint).stdout)["files"][0]["findings"]
    assert [f["code"] for f in bad] == ["B001"] and bad[0]["data"]["dp_world_size"] == 2
    assert "tensor parallel 4 x pipeline parallel 2 from ds.workload.json" in bad[0]["message"]
