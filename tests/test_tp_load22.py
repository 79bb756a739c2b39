"""Newcomer report 22, finding 4: under tensor parallelism the load phase counted the whole model on every
rank (llama-3-8b at TP2: 8,030,261,248 x 4 B = 29.92 GiB per rank), although a Megatron tensor-parallel rank
builds only its shard: ColumnParallelLinear allocates output_size / tp x input_size, RowParallelLinear
output_size x input_size / tp, VocabParallelEmbedding vocab / tp x hidden (Megatron-DeepSpeed
megatron/core/tensor_parallel/layers.py), norms replicated. And M101's fix named the HF Trainer for what is
a Megatron plan.

The shard's parameter count here is computed by hand from Llama-3-8B's shapes (its config.json: vocab 128256,
hidden 4096, 32 layers, 32 heads of 128, 8 KV heads, intermediate 14336, untied embedding and head), not with
the advisor's shard()."""

from __future__ import annotations

import json

import pytest

V, H, L, KV, I = 128256, 4096, 32, 8 * 128, 14336


def _whole() -> int:
    layer = H * H + KV * H + KV * H + H * H + 3 * I * H + 2 * H  # q k v o, gate up down, 2 RMSNorms
    return V * H + L * layer + H + V * H  # embedding, layers, final norm, lm_head


def _tp_shard(tp: int) -> int:
    # column-parallel q, k, v, gate, up: out / tp x in; row-parallel o, down: out x in / tp; norms whole
    layer = (H // tp) * H + 2 * (KV // tp) * H + H * (H // tp) + 2 * (I // tp) * H + H * (I // tp) + 2 * H
    return 2 * (V // tp) * H + L * layer + H  # vocab-parallel embedding and head, layers, final norm


ARGS = ["sample_configs/zero2.json", "--model", "llama-3-8b", "--world-size", "16", "--gpus-per-node", "8",
        "--tensor-parallel", "2", "--seq-len", "4096", "--set", "zero_optimization.stage=1",
        "--format", "json"]


def test_hand_counts_match_the_model():
    assert _whole() == 8_030_261_248  # the newcomer's figure for the whole model


def test_tp2_rank_loads_its_shard_only(cli):
    p = cli(["estimate", *ARGS])
    assert p.returncode in (0, 1, 4), p.stderr
    ld = json.loads(p.stdout)["load"]
    assert not ld["zero_init"] and ld["dtype"] == "fp32" and ld["low_cpu_mem_usage"]
    assert ld["host_per_rank"] == _tp_shard(2) * 4, (ld["host_per_rank"], _tp_shard(2) * 4)
    assert ld["host_per_rank"] < _whole() * 4 / 2 + 4 * 300_000  # half, plus the replicated norms
    # the assumption is stated: which tier and what Megatron does by default
    assert "--use-cpu-initialization" in ld["per_shard"] and "accelerator" in ld["per_shard"]
    assert ld["per_stage"] is None


def test_without_tp_the_load_is_the_whole_model(cli):
    # TP 1: the 16 ranks are all data parallel, so one micro-step per step keeps train_batch_size 64
    args = [a if a != "2" else "1" for a in ARGS] + ["--set", "gradient_accumulation_steps=1"]
    p = cli(["estimate", *args])
    assert p.returncode in (0, 1, 4), p.stderr
    ld = json.loads(p.stdout)["load"]
    assert ld["host_per_rank"] == _whole() * 4 and ld["per_shard"] is None


def test_m101_under_tp_names_megatron_not_the_hf_trainer(cli):
    p = cli(["estimate", *ARGS, "--host-memory", "64GB"])
    d = json.loads(p.stdout)
    m101 = [f for f in d["findings"] if f["code"] == "M101"]
    assert m101, [f["code"] for f in d["findings"]]
    f = m101[0]
    assert f["data"]["per_rank"] >= _tp_shard(2) * 4
    assert "HF Trainer" not in f["fix"] and "Megatron" in f["fix"] and "zero.Init" in f["fix"]
    assert "tensor-parallel shard" in f["message"] and "whole model" not in f["message"]
