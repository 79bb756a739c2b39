"""checkpoint --hardware times the save interval's steps with estimate's step time on the same
workload (issue 23): the flags, else the workload sidecar generate wrote, else the defaults, and
it says which. It used the defaults only (the model's maximum context, no recompute): for a
generate-written config with its sidecar 71.46 s against estimate's 47.06 s."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from advisor.cli import main


def _run(*args: str) -> dict:
    r = CliRunner().invoke(main, list(args), env={"COLUMNS": "200"})
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout if hasattr(r, "stdout") else r.output)


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("gen") / "plan.json")
    r = CliRunner().invoke(main, ["generate", "--model", "llama-3-8b", "--hardware", "dgx-h100", "--nodes", "1",
                                  "--gpus-per-node", "8", "--global-batch", "64", "--seq-len", "4096",
                                  "--checkpointing", "full", "--no-model-parallel", "--output", out])
    assert r.exit_code == 0, r.output
    side = json.load(open(out[:-len(".json")] + ".workload.json"))
    assert side["seq_len"] == 4096 and side["checkpointing"] == "full"
    return out


def test_checkpoint_step_time_is_estimates_on_the_sidecars_workload(generated):
    est = _run("estimate", generated, "--model", "llama-3-8b", "--hardware", "dgx-h100", "--format", "json")
    ck = _run("checkpoint", generated, "--model", "llama-3-8b", "--hardware", "dgx-h100", "--save-dir", "/raid/ck",
              "--node-mtbf-hours", "1000", "--format", "json")
    want = est["step_time"]["step_time_s"]
    assert est["step_time"]["seq_len"] == 4096
    assert ck["step_time_source"] == "model"
    assert ck["step_time_s"] == pytest.approx(want, rel=1e-12)
    wl = ck["step_time_workload"]
    assert wl["seq_len"]["value"] == 4096 and wl["seq_len"]["origin"].startswith("from ")
    assert wl["checkpointing"] == {"value": "full", "origin": wl["seq_len"]["origin"]}
    # the defaults (the model's 8,192-token context, no recompute) give another step time: the
    # comparison above could fail
    dflt = _run("estimate", generated, "--model", "llama-3-8b", "--hardware", "dgx-h100", "--format", "json",
                "--seq-len", "8192", "--checkpointing", "none")
    assert abs(dflt["step_time"]["step_time_s"] - want) > 0.1 * want


def test_checkpoint_takes_estimates_workload_flags(generated):
    args = ["--model", "llama-3-8b", "--hardware", "dgx-h100", "--format", "json", "--seq-len", "2048",
            "--checkpointing", "selective", "--omp-threads", "4"]
    est = _run("estimate", generated, *args)
    ck = _run("checkpoint", generated, *args, "--save-dir", "/raid/ck", "--node-mtbf-hours", "1000")
    assert est["step_time"]["seq_len"] == 2048
    assert ck["step_time_s"] == pytest.approx(est["step_time"]["step_time_s"], rel=1e-12)
    assert ck["step_time_workload"]["seq_len"] == {"value": 2048, "origin": "flag"}
    assert ck["step_time_workload"]["checkpointing"] == {"value": "selective", "origin": "flag"}


def test_checkpoint_text_states_the_workload(generated):
    r = CliRunner().invoke(main, ["checkpoint", generated, "--model", "llama-3-8b", "--hardware", "dgx-h100",
                                  "--save-dir", "/raid/ck", "--node-mtbf-hours", "1000"], env={"COLUMNS": "400"})
    line = next(x for x in r.output.splitlines() if "step time's workload" in x)
    assert "seq_len 4,096 (from " in line and "checkpointing full (from " in line, line


def test_checkpoint_under_expert_parallelism_is_estimates(tmp_path):
    """--expert-parallel 4 (Mixtral 8x7B, ZeRO-1, 2 dgx-h100 nodes): estimate times the step and
    lists the files of the rank's experts (views.estimate.movement_plan); checkpoint takes the same
    plan, so its step time and bytes per save are estimate's (it read the whole model: 4.38 s and
    654 GB per save against 1.85 s and 180 GB)."""
    cfg = tmp_path / "moe.json"
    cfg.write_text(json.dumps({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                               "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 1}}))
    args = ["--model", "mixtral-8x7b", "--hardware", "dgx-h100:2", "--seq-len", "4096", "--expert-parallel", "4",
            "--format", "json"]
    est = _run("estimate", str(cfg), *args)
    ck = _run("checkpoint", str(cfg), *args, "--node-mtbf-hours", "1000", "--write-bandwidth", "10GB/s")
    assert ck["step_time_s"] == pytest.approx(est["step_time"]["step_time_s"], rel=1e-12)
    assert ck["per_save_bytes"] == est["checkpoint"]["per_save_bytes"]
    assert ck["step_time_workload"]["expert_parallel"] == {"value": 4, "origin": "flag"}


def test_checkpoint_warns_when_the_step_time_falls_back_to_the_models_context(tmp_path):
    from tests.conftest import run_cli
    cfg = tmp_path / "c.json"  # no sidecar beside it, no --seq-len
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                               "zero_optimization": {"stage": 2}}))
    p = run_cli(["checkpoint", str(cfg), "--model", "llama-3-8b", "--hardware", "dgx-h100", "--node-mtbf-hours", "1000",
                 "--save-dir", "/raid/ck"])
    assert p.returncode == 0, p.stderr
    assert "warning: no --seq-len (and no workload sidecar): activations are for the model's maximum context, 8,192" \
        in " ".join(p.stderr.split()), p.stderr
    assert "seq_len 8,192 (the model's maximum context)" in " ".join(p.stdout.split())
