"""estimate and check give one world size for the same flags, launcher variables and --hardware (fixa23).

Both take it from the launch (flags, accelerate file, WORLD_SIZE / SLURM_NTASKS) and, when none states it, from
one fallback, ``advisor.cluster.launch.unlaunched_world_size``: the hardware spec's nodes x the job's ranks per
node, or those ranks on one node. Before, estimate's fallback ignored --gpus-per-node against a spec (16 ranks on
``dgx-h100:2 --gpus-per-node 4``, check 8) and took no world from ranks per node without one (1, check 4).
Expected values by hand: dgx-h100 has 8 GPUs per node (advisor/data/hardware_presets.json), ``:2`` two nodes; a
torchrun / Slurm node runs LOCAL_WORLD_SIZE / SLURM_GPUS_ON_NODE ranks (torch/distributed/run.py --nproc-per-node).
The visible devices (CUDA_VISIBLE_DEVICES) stay check's alone: it probes the node it runs on, estimate runs
anywhere (tests/test_ranks_per_node.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

ARGS = [str(ROOT / "sample_configs" / "zero2.json"), "--params", "1000000", "--format", "json"]


def _env(extra: dict[str, str]) -> dict[str, str]:
    """No inherited launcher variables and no nvidia-smi on PATH (check's probe finds no devices)."""
    e = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8",
         "PYTHONPATH": str(ROOT)}
    e.update(extra)
    return e


def _world(cmd: str, args: list[str], env: dict[str, str]) -> int:
    p = subprocess.run([sys.executable, "-m", "advisor", cmd, *ARGS, *args], env=_env(env), capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    assert p.stdout.strip(), (cmd, p.returncode, p.stderr)
    d = json.loads(p.stdout)
    return d["cluster"]["world_size"] if cmd == "estimate" else d["launch"]["world_size"]["value"]


@pytest.mark.parametrize("args,env,expected", [
    (["--gpus-per-node", "4"], {}, 4),                                  # 4 ranks, one node
    ([], {"LOCAL_WORLD_SIZE": "4"}, 4),
    ([], {"SLURM_GPUS_ON_NODE": "4"}, 4),
    (["--hardware", "dgx-h100:2", "--gpus-per-node", "4"], {}, 8),     # 2 nodes x 4
    (["--hardware", "h100-sxm-80gb", "--gpus-per-node", "4"], {}, 4),  # an accelerator preset: 1 node x 4
    (["--hardware", "dgx-h100:2"], {}, 16),                            # 2 nodes x 8 (agreed before)
    (["--hardware", "h100-sxm-80gb"], {}, 1),                          # the preset alone says no node: 1
])
def test_estimate_and_check_one_world_size(args, env, expected):
    assert (_world("estimate", args, env), _world("check", args, env)) == (expected, expected)
