"""``generate --hf`` -> ``check --hf`` / ``estimate --hf`` (newcomer session 19, finding 1).

Under ``--hf`` generate writes "auto" for the batch keys and the precision, which the HF Trainer
fills from its arguments (transformers integrations/deepspeed.py trainer_config_process:
``fill_match``); the workload sidecar records the Trainer arguments the plan assumed, and check and
estimate take them for the config's "auto" keys no flag gives -- as they take the config's own
values without --hf. check takes the same Trainer-argument options as estimate.
"""

from __future__ import annotations

import json
import shutil

from tests.conftest import run_cli, run_json

SHAPE = ["--model", "llama-3-8b", "--world-size", "4", "--gpus-per-node", "4", "--hardware", "dgx-h100"]


def _acc_need(d: dict) -> int:
    rows = d["tiers"] if "tiers" in d else d["fit"]
    (r,) = [r for r in rows if r["tier"] == "accelerator"]
    return r["need"]


def _generate(tmp_path):
    out = tmp_path / "hf.json"
    rc, g = run_json(["generate", "--model", "llama-3-8b", "--hardware", "dgx-h100", "--nodes", "1",
                      "--gpus-per-node", "4", "--global-batch", "32", "--seq-len", "2048", "--hf", "-o", str(out),
                      "--format", "json"])
    assert rc == 0, g
    return out, g["plans"][0]


def test_generate_hf_check_hf_round_trip_gives_estimates_need(tmp_path):
    cfg, best = _generate(tmp_path)
    data = json.loads(cfg.read_text())
    assert data["train_micro_batch_size_per_gpu"] == "auto" and data["bf16"]["enabled"] == "auto"
    # the independent side: the config alone (no sidecar) with the Trainer arguments the plan names
    # (micro-batch, accumulation, bf16: generate's "HF Trainer:" line) and its workload as flags
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(cfg, alone / "hf.json")
    rc, est = run_json(["estimate", str(alone / "hf.json"), "--hf", *SHAPE, "--seq-len", "2048", "--checkpointing",
                        "none", "--per-device-train-batch-size", str(best["micro_batch"]),
                        "--gradient-accumulation-steps", str(best["gradient_accumulation"]), "--bf16",
                        "--format", "json"])
    want = _acc_need(est)
    assert want == best["accelerator_bytes_per_rank"]
    rc, chk = run_json(["check", str(cfg), "--hf", *SHAPE, "--format", "json"])
    assert _acc_need(chk) == want, chk["warnings"]
    rc, est2 = run_json(["estimate", str(cfg), "--hf", *SHAPE, "--format", "json"])
    assert _acc_need(est2) == want
    # a flag still wins over the sidecar, in both commands alike (per-device batch 2, the rest the sidecar's)
    flag = ["--per-device-train-batch-size", "2"]
    rc, chk2 = run_json(["check", str(cfg), "--hf", *SHAPE, *flag, "--format", "json"])
    rc, est3 = run_json(["estimate", str(cfg), "--hf", *SHAPE, *flag, "--format", "json"])
    rc, est4 = run_json(["estimate", str(alone / "hf.json"), "--hf", *SHAPE, "--seq-len", "2048", "--checkpointing",
                         "none", *flag, "--gradient-accumulation-steps", str(best["gradient_accumulation"]), "--bf16",
                         "--format", "json"])
    assert _acc_need(chk2) == _acc_need(est3) == _acc_need(est4) > want


def _long_options(help_text: str) -> set[str]:
    return {w.rstrip(",") for w in help_text.split() if w.startswith("--")}


def test_check_takes_estimates_trainer_options():
    est = run_cli(["estimate", "--help"]).stdout
    chk = run_cli(["check", "--help"]).stdout
    # the Trainer arguments estimate takes (cli.TRAINER_OPTS, --bf16, --fp16, --hidden-size), named by hand
    trainer = {o for o in _long_options(est) if o in {
        "--per-device-train-batch-size", "--gradient-accumulation-steps", "--learning-rate", "--weight-decay",
        "--adam-beta1", "--adam-beta2", "--adam-epsilon", "--max-grad-norm", "--warmup-steps", "--warmup-ratio",
        "--max-steps", "--lr-scheduler-type", "--resume-from-checkpoint", "--bf16", "--fp16", "--hidden-size"}}
    assert len(trainer) == 16, trainer
    assert trainer <= _long_options(chk), trainer - _long_options(chk)


def _wl(tmp_path, side: dict):
    from advisor.views.workload import resolve
    cfg = tmp_path / "c.json"
    cfg.write_text("{}")
    (tmp_path / "c.workload.json").write_text(json.dumps(side))
    return resolve(str(cfg), {}, {})


def test_trainer_args_fill_only_the_configs_auto_keys(tmp_path):
    from advisor.views.workload import trainer_args_for
    wl = _wl(tmp_path, {"seq_len": 128, "micro_batch": 2,
                        "trainer": {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4, "bf16": True}})
    auto = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "bf16": {"enabled": "auto"}}
    assert trainer_args_for(wl, {}, auto) == {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4,
                                              "bf16": True}
    # the Trainer's fill_match fills only "auto": a value written in the config is the config's
    edited = dict(auto, train_micro_batch_size_per_gpu=4)
    assert "per_device_train_batch_size" not in trainer_args_for(wl, {}, edited)
    # flags win; a precision flag replaces the sidecar's precision (TrainingArguments takes one of them)
    assert trainer_args_for(wl, {"fp16": True, "gradient_accumulation_steps": 1}, auto) == {
        "fp16": True, "gradient_accumulation_steps": 1, "per_device_train_batch_size": 2}
    # a sidecar without a trainer record (written without --hf): its micro_batch for the "auto" micro-batch
    wl2 = _wl(tmp_path, {"micro_batch": 3})
    assert trainer_args_for(wl2, {}, auto) == {"per_device_train_batch_size": 3}


def test_bad_trainer_record_is_one_line_naming_file_and_key(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}')
    (tmp_path / "c.workload.json").write_text('{"trainer": {"per_device_train_batch_size": 0}}')
    for cmd in ("check", "estimate"):
        p = run_cli([cmd, str(cfg), "--hf", "--params", "1000000", "--world-size", "1", "--gpu-memory", "80GB"])
        assert p.returncode == 2, (cmd, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "c.workload.json" in lines[0] and "/trainer/per_device_train_batch_size" in lines[0], \
            lines
        assert "Traceback" not in p.stderr


def test_a_flag_that_fills_the_auto_micro_batch_is_not_listed_as_assumed(tmp_path):
    """Review 2026-12-06: check --hf with --per-device-train-batch-size listed "micro_batch = auto (the config's
    train_micro_batch_size_per_gpu)" among the workload assumed, though the flag fills that "auto" (the Trainer's
    fill_match, transformers integrations/deepspeed.py); estimate did not. Without the flag the Trainer's default
    fills it, which is an assumption and stays listed."""
    cfg = tmp_path / "so.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                               "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2}}))
    base = ["check", str(cfg), "--model", "llama-3.2-1b", "--world-size", "1", "--gpu-memory", "80GB", "--hf",
            "--seq-len", "2048", "--format", "json"]
    rc, with_flag = run_json(base + ["--per-device-train-batch-size", "4", "--gradient-accumulation-steps", "2",
                                     "--bf16"])
    rc, without = run_json(base)
    said = json.dumps(with_flag)
    assert "micro_batch = auto" not in said, [w for w in with_flag.get("warnings", []) if "micro_batch" in w]
    assert "micro_batch = auto" in json.dumps(without)
