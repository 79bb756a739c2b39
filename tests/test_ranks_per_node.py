"""More ranks per node than the hardware spec's accelerators per node is refused, the same way
by every command (issue 17): one line naming the flag, the value and the spec's count, exit 2.
The DGX H100 preset has 8 GPUs per node (advisor/data/hardware_presets.json, NVIDIA's DGX H100
datasheet); 16 ranks on it would leave half of them without a GPU."""

from __future__ import annotations

import json

import pytest

from advisor.cluster.hardware import resolve_hardware
from advisor.cluster.launch import job_shape
from advisor.errors import AdvisorError
from tests.conftest import run_cli

CFG = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
       "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3}}


def test_preset_has_eight():
    assert resolve_hardware("dgx-h100").accelerators_per_node == 8


@pytest.mark.parametrize("cmd", ["estimate", "check", "checkpoint", "report", "generate"])
def test_every_command_refuses_16_ranks_on_an_8_gpu_node(cmd, tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(CFG))
    if cmd == "generate":
        args = ["generate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "16",
                "--global-batch", "16", "--seq-len", "512"]
    else:
        args = [cmd, str(cfg), "--model", "gpt2", "--hardware", "dgx-h100", "--world-size", "16",
                "--gpus-per-node", "16", "--seq-len", "512"]
        if cmd == "checkpoint":
            args.remove("--seq-len"), args.remove("512")
        if cmd == "report":
            args += ["--output", str(tmp_path / "r.html")]
    p = run_cli(args, cwd=tmp_path)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr
    assert "--gpus-per-node 16" in lines[0] and "8 accelerators per node" in lines[0] and "dgx-h100" in lines[0]


def test_within_the_node_and_accelerator_only_specs_pass():
    hw = resolve_hardware("dgx-h100")
    assert job_shape(world_size=16, gpus_per_node=8, hardware=hw).gpus_per_node.value == 8
    # an accelerator preset alone says nothing about the node: its "1 per node" is a placeholder
    acc = resolve_hardware("h100-sxm-80gb")
    assert job_shape(world_size=16, gpus_per_node=8, hardware=acc).gpus_per_node.value == 8
    with pytest.raises(AdvisorError, match="--gpus-per-node 9 is more ranks per node than the 8"):
        job_shape(world_size=16, gpus_per_node=9, hardware=hw)
