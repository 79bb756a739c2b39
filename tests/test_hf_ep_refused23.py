"""Review finding (session 23, fixf23): --hf with --expert-parallel (no AutoEP in the config) contradicted itself.
An HF (transformers) model holds no deepspeed.moe.layer.MoE -- the only layer with an ep_size (deepspeed/moe/layer.py
MoE) -- so the HF Trainer's job runs every expert on every rank; only the load said so, while the step state, the
movements and the checkpoint split the experts E / ep: hf2.json, mixtral-8x7b EP8, ZeRO-2 on 2 x DGX-H200 printed
16-bit parameters 13.49 GiB per GPU and fits, where each GPU holds 46,702,792,704 x 2 B = 86.99 GiB of them.
Decision: refuse it (exit 2, one line saying why and what to do) unless the config turns on DeepSpeed's AutoEP
(expert_parallel.enabled, module_inject/auto_ep_config.py parse_autoep_config l.48), which is what splits a
transformers model's experts (runtime/engine.py _configure_expert_parallel l.816-821). lint and generate take no
--expert-parallel; checkpoint takes no --hf."""

from __future__ import annotations

import json

import pytest

ARGS = ["--hf", "--bf16", "--model", "mixtral-8x7b", "--expert-parallel", "8", "--seq-len", "1024",
        "--checkpointing", "full", "--hardware", "dgx-h200:2", "--per-device-train-batch-size", "1"]


def _cfg(tmp_path, **extra) -> str:
    p = tmp_path / "hf.json"
    p.write_text(json.dumps({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                             "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
                             "zero_optimization": {"stage": 2}, **extra}))
    return str(p)


@pytest.mark.parametrize("cmd", [["estimate"], ["check"], ["report", "-o", "REPORT"]])
def test_hf_expert_parallel_without_autoep_is_refused(cli, tmp_path, cmd):
    cmd = [str(tmp_path / "r.html") if c == "REPORT" else c for c in cmd]
    p = cli([cmd[0], _cfg(tmp_path), *cmd[1:], *ARGS])
    assert p.returncode == 2, (p.returncode, p.stdout[-1500:], p.stderr)
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "--expert-parallel 8 with --hf" in err and '"autoep_size": 8' in err, err
    assert not (tmp_path / "r.html").exists()


def test_hf_expert_parallel_with_autoep_runs(cli, tmp_path):
    p = cli(["estimate", _cfg(tmp_path, expert_parallel={"enabled": True, "autoep_size": 8}), *ARGS,
             "--format", "json"])
    assert p.returncode in (0, 1, 4), p.stderr
    assert json.loads(p.stdout)["load"]["host_per_rank"] > 0


def test_expert_parallel_without_hf_is_not_refused(cli, tmp_path):
    # DeepSpeed's own MoE layer (a Megatron-DeepSpeed / DeepSpeed-MoE model): --expert-parallel is its ep_size
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                             "zero_optimization": {"stage": 2}}))
    r = cli(["estimate", str(p), "--model", "mixtral-8x7b", "--expert-parallel", "8", "--seq-len", "1024",
             "--hardware", "dgx-h200:2", "--format", "json"])
    assert r.returncode in (0, 1, 4), r.stderr
