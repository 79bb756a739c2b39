"""The config's AutoTP / AutoEP size is the job's TP / EP (session 23, fixi23).

DeepSpeed 0.19.8 shards the model by the config, not by any flag of ours: AutoTP at
tensor_parallel.autotp_size when > 1 (runtime/tensor_parallel/config.py TPTrainingConfig.autotp_size l.45;
runtime/engine.py l.595-596 _configure_tensor_parallel, TP mesh (W / autotp_size, autotp_size) via
utils/groups.py _init_tp_mesh_device l.212-220), AutoEP at expert_parallel.autoep_size when expert_parallel.enabled
(module_inject/auto_ep_config.py parse_autoep_config l.48-50; engine.py l.821-828). main estimated such a config
with no --tensor-parallel at TP 1. A flag that disagrees with the config is refused (exit 2, one line): DeepSpeed
would run the config's size. An accelerate launch runs a transformers model (no deepspeed.moe.layer.MoE), so
--expert-parallel without AutoEP is refused there as under --hf (85cea9e).

Hand count, Llama-3.2-1B (config.json: hidden 2048, intermediate 8192, 16 layers, 32 heads x 64, 8 KV heads,
vocab 128256, tied embeddings): per layer q, o 2048 x 2048, k, v 2048 x 512, gate, up, down 2048 x 8192 =
60,817,408; x 16 = 973,078,528; embed (= the tied head) 128256 x 2048 = 262,668,288; RMSNorm weights 2 x 2048
per layer + 2048 final = 67,584 (replicated). The tied head is vocab-parallel under AutoTP by default
(engine.py l.1126-1127: vocab_parallel_lm_head None and a tied vocab head), the embedding sharing its shard.
"""

from __future__ import annotations

import json

import pytest

LINEARS = 16 * (2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192)
EMBED = 128256 * 2048
NORMS = 16 * 2 * 2048 + 2048
BF16 = 2


def _cfg(tmp_path, name="c.json", **extra) -> str:
    p = tmp_path / name
    p.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                             "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}, **extra}))
    return str(p)


def _json(cli, args):
    p = cli(args + ["--format", "json"])
    assert p.returncode in (0, 1, 4), (p.returncode, p.stderr)
    return json.loads(p.stdout)


def test_hand_count_is_the_preset():
    assert LINEARS + EMBED + NORMS == 1_235_814_400  # `ds-advisor models`: llama-3.2-1b


def test_autotp_size_is_the_tp_without_a_flag(cli, tmp_path):
    d = _json(cli, ["estimate", _cfg(tmp_path, tensor_parallel={"autotp_size": 2}), "--model", "llama-3.2-1b",
                    "--world-size", "8", "--seq-len", "1024"])
    cl = d["cluster"]
    assert cl["tensor_parallel"] == 2 and cl["dp_world_size"] == 4, cl
    assert cl["tensor_parallel_source"] == "tensor_parallel.autotp_size"
    assert "tensor parallelism 2 from tensor_parallel.autotp_size" in d["assumptions"]["sharding"]
    # per-rank 16-bit parameters: the split tensors / TP, the norms whole (ZeRO-2 keeps 16-bit params whole)
    assert d["ranks"][0]["tiers"]["accelerator"]["parameters"] == (LINEARS + EMBED) // 2 * BF16 + NORMS * BF16


def test_autoep_size_is_the_ep_without_a_flag(cli, tmp_path):
    d = _json(cli, ["estimate", _cfg(tmp_path, expert_parallel={"enabled": True, "autoep_size": 8}), "--model",
                    "mixtral-8x7b", "--world-size", "16", "--seq-len", "1024"])
    assert d["cluster"]["expert_parallel"] == 8, d["cluster"]
    assert d["cluster"]["expert_parallel_source"] == "expert_parallel.autoep_size"


def test_autoep_not_enabled_is_no_ep(cli, tmp_path):
    # engine.py l.821: AutoEP off unless enabled, whatever autoep_size says
    d = _json(cli, ["estimate", _cfg(tmp_path, expert_parallel={"autoep_size": 8}), "--model", "mixtral-8x7b",
                    "--world-size", "16", "--seq-len", "1024"])
    assert d["cluster"]["expert_parallel"] == 1 and "expert_parallel_source" not in d["cluster"]


@pytest.mark.parametrize("cmd", [["estimate"], ["check"], ["checkpoint"], ["report", "-o", "REPORT"]])
def test_flag_that_disagrees_with_autotp_is_refused(cli, tmp_path, cmd):
    cmd = [str(tmp_path / "r.html") if c == "REPORT" else c for c in cmd]
    p = cli([cmd[0], _cfg(tmp_path, tensor_parallel={"autotp_size": 2}), *cmd[1:], "--model", "llama-3.2-1b",
             "--world-size", "8", "--seq-len", "1024", "--tensor-parallel", "4"])
    assert p.returncode == 2, (p.returncode, p.stdout[-1500:], p.stderr)
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "--tensor-parallel 4" in err and "tensor_parallel.autotp_size 2" in err and "c.json" in err, err
    assert not (tmp_path / "r.html").exists()


def test_flag_that_agrees_runs(cli, tmp_path):
    d = _json(cli, ["estimate", _cfg(tmp_path, tensor_parallel={"autotp_size": 2}), "--model", "llama-3.2-1b",
                    "--world-size", "8", "--seq-len", "1024", "--tensor-parallel", "2"])
    assert d["cluster"]["tensor_parallel"] == 2


def test_flag_that_disagrees_with_autoep_is_refused(cli, tmp_path):
    p = cli(["estimate", _cfg(tmp_path, expert_parallel={"enabled": True, "autoep_size": 8}), "--model",
             "mixtral-8x7b", "--world-size", "16", "--seq-len", "1024", "--expert-parallel", "4"])
    assert p.returncode == 2 and "expert_parallel.autoep_size 8" in p.stderr, (p.returncode, p.stderr)


def test_autotp_size_that_does_not_divide_the_world_is_refused(cli, tmp_path):
    # torch's DeviceMesh (W / autotp_size, autotp_size) must cover the world (utils/groups.py l.212-220)
    p = cli(["estimate", _cfg(tmp_path, tensor_parallel={"autotp_size": 3}), "--model", "llama-3.2-1b",
             "--world-size", "8", "--seq-len", "1024"])
    assert p.returncode == 2 and "does not divide the world size 8" in p.stderr, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("cmd", ["estimate", "check"])
def test_accelerate_expert_parallel_without_autoep_is_refused(cli, tmp_path, monkeypatch, cmd):
    _cfg(tmp_path, "ds.json")
    (tmp_path / "acc.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 16\nnum_machines: 2\n"
                                       "mixed_precision: bf16\n"
                                       "deepspeed_config:\n  deepspeed_config_file: ds.json\n")
    monkeypatch.chdir(tmp_path)
    p = cli([cmd, str(tmp_path / "acc.yaml"), "--model", "mixtral-8x7b", "--seq-len", "1024",
             "--expert-parallel", "8", "--hardware", "dgx-h200:2"])
    assert p.returncode == 2, (p.returncode, p.stdout[-1500:], p.stderr)
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "--expert-parallel 8 with an accelerate launch" in err and '"autoep_size": 8' in err, err
