"""Review finding (session 23, fixf23): a rank under --tensor-parallel / --expert-parallel was counted as
building only its shard unless --hf, but when the CONFIG turns on DeepSpeed's own AutoTP
(tensor_parallel.autotp_size > 1) or AutoEP (expert_parallel.enabled) the model handed to
deepspeed.initialize was built whole on every rank: DeepSpeed shards it only inside the engine
(runtime/engine.py l.587-588 _configure_expert_parallel, l.595-596 _configure_tensor_parallel ->
_apply_autotp_partitioning l.1009). Llama-3-8B, AutoTP 2, one DGX-H100, 200 GB host: main said
14.96 GiB per rank (the TP shard) and fits; it is 29.92 GiB per rank, 239.32 GiB per node, over 186.26 GiB.

Parameter counts by hand from the models' config.json shapes (tests/test_hf_tp_load22.py's hand counts:
Llama-3-8B 8,030,261,248; Mixtral-8x7B 46,702,792,704). The load dtype is fp32 (4 B): a model built
without torch_dtype, the advisor's stated default (no --load-dtype given)."""

from __future__ import annotations

import json

from tests.test_hf_tp_load22 import _llama, _mixtral

FP32 = 4
GIB = 2 ** 30


def _cfg(tmp_path, **extra) -> str:
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                             "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}, **extra}))
    return str(p)


def _estimate(cli, cfg: str, *args: str) -> dict:
    p = cli(["estimate", cfg, "--seq-len", "4096", *args, "--format", "json"])
    assert p.returncode in (0, 1, 4), p.stderr
    return json.loads(p.stdout)


def test_autotp_every_rank_builds_the_whole_model(cli, tmp_path):
    d = _estimate(cli, _cfg(tmp_path, tensor_parallel={"autotp_size": 2}), "--model", "llama-3-8b",
                  "--tensor-parallel", "2", "--hardware", "dgx-h100", "--host-memory", "200GB")
    ld = d["load"]
    assert ld["host_per_rank"] == _llama() * FP32  # 29.92 GiB, not the TP shard's 14.96
    assert ld["host_per_node"] == 8 * _llama() * FP32  # 239.32 GiB
    assert ld["host_per_node"] > 200e9 and ld["fits"] is False
    assert "AutoTP" in ld["per_shard"] and "l.1009" in ld["per_shard"]
    m101 = [f for f in d["findings"] if f["code"] == "M101"]
    assert m101 and "Megatron" not in m101[0]["fix"], [f["code"] for f in d["findings"]]


def test_autotp_check_is_no_go(cli, tmp_path):
    p = cli(["check", _cfg(tmp_path, tensor_parallel={"autotp_size": 2}), "--model", "llama-3-8b",
             "--tensor-parallel", "2", "--seq-len", "4096", "--hardware", "dgx-h100", "--host-memory", "200GB"])
    assert p.returncode != 0 and "M101" in p.stdout, (p.returncode, p.stdout[-2000:])


def test_autoep_every_rank_builds_all_experts(cli, tmp_path):
    d = _estimate(cli, _cfg(tmp_path, expert_parallel={"enabled": True, "autoep_size": 8}), "--model",
                  "mixtral-8x7b", "--expert-parallel", "8", "--hardware", "dgx-h100:2", "--host-memory", "512GB")
    ld = d["load"]
    assert ld["host_per_rank"] == _mixtral() * FP32  # 173.98 GiB: all 8 experts of every layer
    assert ld["fits"] is False and "AutoEP" in ld["per_shard"]


def test_megatron_tp_still_builds_its_shard(cli, tmp_path):
    # the control: no AutoTP in the config, --tensor-parallel 2 is Megatron's (TENSOR_PARALLEL_LOAD): the shard
    # is smaller than the whole model (norms replicated, so a little over half)
    d = _estimate(cli, _cfg(tmp_path), "--model", "llama-3-8b", "--tensor-parallel", "2", "--hardware", "dgx-h100",
                  "--host-memory", "200GB")
    assert _llama() * FP32 / 2 <= d["load"]["host_per_rank"] < 0.51 * _llama() * FP32
