"""M101 names the largest need once the model is loaded; when that is a checkpoint save's instant it
says so, never "the training step" (the save is no part of the step).

A 7B ZeRO-3 model built without zero.Init on 8 ranks of a node, no offload: the training step keeps
nothing on the host, while ``engine.save_checkpoint`` writes each rank's optimizer-states file with
torch.save, which copies each accelerator storage to host memory one at a time
(torch/serialization.py ``_save``: ``storage.cpu()``); a rank's largest is its fp32 flat partition,
7e9 / 8 parameters x 4 B (one sub-group: 875e6 < sub_group_size 1e9, deepspeed/runtime/zero/stage3.py
``_create_fp32_partitions``), 8 ranks on the node: 28e9 B. With the optimizer offloaded to the host
the step's host state is larger than that, and the words are the training step's."""

from __future__ import annotations

import json

BASE = ["--params", "7000000000", "--world-size", "8", "--gpus-per-node", "8", "--no-zero-init",
        "--host-memory", "64GB", "--gpu-memory", "80GB", "--seq-len", "1024", "--format", "json"]


def _m101(cli, config):
    p = cli(["estimate", config, *BASE])
    assert p.returncode in (0, 1), p.stderr
    d = json.loads(p.stdout)
    return [f for f in d["findings"] if f["code"] == "M101" and f["data"]["tier"] == "host"]


def test_a_save_peak_after_the_load_is_called_the_checkpoint_save(cli):
    (f,) = _m101(cli, "sample_configs/zero3.json")
    assert f["data"]["steady_need"] == 8 * 7_000_000_000 // 8 * 4
    assert "the checkpoint save then needs" in f["message"] and "(save_checkpoint:" in f["message"]
    assert "training step itself" not in f["message"]


def test_a_step_peak_after_the_load_is_called_the_training_step(cli):
    (f,) = _m101(cli, "sample_configs/zero3_cpu_offload.json")
    # host-offloaded fp32 master weights and two moments: 12 B a parameter over the node's 8 ranks,
    # more than the save's 28e9 B copy
    assert f["data"]["steady_need"] >= 7_000_000_000 * 12
    assert "the training step itself needs" in f["message"] and "checkpoint save" not in f["message"]


def test_m100_names_a_save_peak_as_the_checkpoint_save(cli):
    """A 20B ZeRO-2 job through the HF Trainer (bf16 "auto" with the Trainer's default bf16=False: fp32
    training) on 4 ranks of a node with 64 GB of host memory and no offload: the step keeps nothing on
    the host, while save_16bit_model's torch.save copies rank 0's parameters to host memory; at
    ZeRO-1/2 they are views of one flat buffer (stage_1_and_2.py: the bit16 groups flattened), so the
    copy is the whole storage, 20e9 x 4 B = 80e9 B > 64e9 B. M100 says it is the save that needs it."""
    p = cli(["estimate", "sample_configs/hf_trainer_zero3_auto.json", "--hf", "--params", "20000000000",
             "--world-size", "4", "--gpus-per-node", "4", "--gpu-memory", "141GB", "--host-memory", "64GB",
             "--seq-len", "2048", "--set", "zero_optimization.stage=2",
             "--set", "zero_optimization.offload_optimizer.device=none", "--format", "json"])
    assert p.returncode in (0, 1), p.stderr
    (f,) = [f for f in json.loads(p.stdout)["findings"] if f["code"] == "M100" and f["data"]["tier"] == "host"]
    assert f["data"]["need"] == 20_000_000_000 * 4
    assert "the checkpoint save needs" in f["message"] and "(save_16bit_model:" in f["message"]
    assert "the step needs" not in f["message"]
