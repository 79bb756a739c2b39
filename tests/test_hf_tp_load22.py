"""Review finding (session 22, fixc22): with --hf the load under tensor / expert parallelism was counted per shard
(2b11866), but the HF Trainer's from_pretrained builds the WHOLE model on every rank: tensor parallelism is applied
afterwards (deepspeed.tp_model_init in transformers/integrations/deepspeed.py deepspeed_init l.661-668), and an HF
model has no DeepSpeed MoE layer, so every rank holds all experts. Mixtral-8x7B at EP8 on two DGX-H100 nodes with
512 GiB host memory: HEAD said 107.93 GiB per node fits; it is 8 x 86.99 = 695.93 GiB and does not fit (M101).

Parameter counts by hand from the models' config.json shapes (not the advisor's inventory):
Llama-3-8B: vocab 128256, hidden 4096, 32 layers, 8 KV heads of 128, intermediate 14336, untied head.
Mixtral-8x7B: vocab 32000, hidden 4096, 32 layers, 8 KV heads of 128, 8 experts of intermediate 14336 (w1 w2 w3),
router 8 x 4096, untied head."""

from __future__ import annotations

import json

H, KV, L, I = 4096, 8 * 128, 32, 14336
V_LLAMA, V_MIXTRAL, E = 128256, 32000, 8
BF16 = 2


def _llama() -> int:
    layer = 2 * H * H + 2 * KV * H + 3 * I * H + 2 * H
    return 2 * V_LLAMA * H + L * layer + H


def _mixtral() -> int:
    layer = 2 * H * H + 2 * KV * H + E * H + E * 3 * I * H + 2 * H
    return 2 * V_MIXTRAL * H + L * layer + H


def _config(tmp_path, stage: int, **extra) -> str:
    # the HF Trainer's usual config: everything "auto"
    p = tmp_path / f"z{stage}.json"
    p.write_text(json.dumps({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                             "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
                             "zero_optimization": {"stage": stage}, **extra}))
    return str(p)


def _estimate(cli, cfg: str, *args: str) -> dict:
    p = cli(["estimate", cfg, "--hardware", "dgx-h100:2", "--seq-len", "1024", "--hf", "--bf16", *args,
             "--format", "json"])
    assert p.returncode in (0, 1, 4), p.stderr
    return json.loads(p.stdout)


def test_hand_counts():
    assert _llama() == 8_030_261_248 and _mixtral() == 46_702_792_704


def test_hf_ep8_every_rank_loads_all_experts(cli, tmp_path):
    # --expert-parallel under --hf needs the config's AutoEP (fixf23: refused otherwise, test_hf_ep_refused23),
    # which splits the experts only inside deepspeed.initialize: from_pretrained built all of them on every rank
    d = _estimate(cli, _config(tmp_path, 2, expert_parallel={"enabled": True, "autoep_size": 8}), "--model",
                  "mixtral-8x7b", "--expert-parallel", "8", "--host-memory", "512GiB")
    ld = d["load"]
    assert ld["host_per_rank"] == _mixtral() * BF16, (ld["host_per_rank"], _mixtral() * BF16)
    assert ld["host_per_node"] == 8 * _mixtral() * BF16  # 695.93 GiB
    assert ld["fits"] is False and "all experts" in ld["per_shard"]
    m101 = [f for f in d["findings"] if f["code"] == "M101"]
    assert m101, [f["code"] for f in d["findings"]]
    assert "whole model" in m101[0]["message"] and "HF Trainer" in m101[0]["fix"]


def test_hf_tp2_every_rank_loads_the_whole_model(cli, tmp_path):
    d = _estimate(cli, _config(tmp_path, 2), "--model", "llama-3-8b", "--tensor-parallel", "2")
    ld = d["load"]
    assert ld["host_per_rank"] == _llama() * BF16  # 14.96 GiB, not the TP shard's 7.48
    # the assumption is stated: the HF Trainer's whole-model build, TP only afterwards
    assert "tp_model_init" in ld["per_shard"] and "whole model" in ld["per_shard"]
    assert "--use-cpu-initialization" not in ld["per_shard"]


def test_hf_tp2_zero3_zero_init_partitions_the_whole_model(cli, tmp_path):
    # ZeRO-3: the HF Trainer builds under zero.Init, the whole model partitioned over the ZeRO group (16 ranks /
    # TP 2 = 8). Peak at the last module (lm_head) being partitioned: every partition (all sizes divisible by 8)
    # plus lm_head whole on the accelerator (partition_parameters.py Init)
    d = _estimate(cli, _config(tmp_path, 3), "--model", "llama-3-8b", "--tensor-parallel", "2")
    load = next(t for t in d["ranks"][0]["timeline"] if t["instant"] == "load")
    assert load["accelerator"] == _llama() * BF16 // 8 + V_LLAMA * H * BF16, load
