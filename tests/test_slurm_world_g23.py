"""The world size from the launch environment, estimate and check alike (fixg23, review of main be84412).

1. One Slurm task per node (SLURM_NTASKS == SLURM_JOB_NUM_NODES) is nodes x G ranks only where the launch states
   G ranks per node (--gpus-per-node, LOCAL_WORLD_SIZE, SLURM_GPUS_ON_NODE / SLURM_GPUS_PER_NODE: Slurm's GPUs
   allocated to the job on each node, sbatch(1) OUTPUT ENVIRONMENT VARIABLES), never from the visible devices
   alone: ``srun --ntasks-per-node=1 python train.py`` on 2 nodes whose CUDA_VISIBLE_DEVICES lists 8 is 2 ranks,
   one per task (Slurm starts SLURM_NTASKS tasks, each a rank), where both commands said 16 (a missed OOM: the
   per-rank ZeRO-3 peak of 2 ranks read as that of 16). Estimate notes it, check warns, each naming the flag.
2. With no SLURM_NTASKS, the nodes Slurm states (SLURM_JOB_NUM_NODES / SLURM_NNODES) x the ranks per node the
   launch states are the world: 2 x 4 = 8, where estimate said 4 "(one node assumed)".
Expected values by hand from those rules; dgx-h100 has 8 GPUs per node (advisor/data/hardware_presets.json).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

ARGS = [str(ROOT / "sample_configs" / "zero2.json"), "--params", "1000000", "--format", "json"]
EIGHT = "0,1,2,3,4,5,6,7"


def _run(cmd: str, args: list[str], env: dict[str, str]) -> tuple[tuple[int, int | None, int | None], str, dict]:
    """(world size, ranks per node, nodes), stderr and the JSON of ``cmd``; no inherited launcher variables and no
    nvidia-smi on PATH (check's probe finds no devices)."""
    e = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8", "PYTHONPATH": str(ROOT)}
    e.update(env)
    p = subprocess.run([sys.executable, "-m", "advisor", cmd, *ARGS, *args], env=e, capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert p.stdout.strip(), (cmd, p.returncode, p.stderr)
    d = json.loads(p.stdout)
    if cmd == "estimate":
        c = d["cluster"]
        shape = (c["world_size"], c["gpus_per_node"], -(-c["world_size"] // c["gpus_per_node"]))
    else:
        ls = d["launch"]
        shape = (ls["world_size"]["value"], ls["gpus_per_node"]["value"], ls["num_nodes"]["value"])
    return shape, p.stderr, d


SRUN_ONE_TASK_PER_NODE = {"SLURM_NTASKS": "2", "SLURM_JOB_NUM_NODES": "2", "CUDA_VISIBLE_DEVICES": EIGHT}


@pytest.mark.parametrize("cmd", ["estimate", "check"])
def test_visible_devices_alone_do_not_turn_slurm_tasks_into_per_node_launchers(cmd):
    """Review finding 1: 2 tasks on 2 nodes, 8 visible devices, nothing that says a task starts 8 ranks: 2 ranks,
    1 per node on 2 nodes (was 16 = 2 x 8 in both), and the report says why and how to say otherwise."""
    shape, err, d = _run(cmd, [], SRUN_ONE_TASK_PER_NODE)
    assert shape == (2, 1, 2)
    said = " ".join(err.split()) if cmd == "estimate" else " ".join(" ".join(d["warnings"]).split())
    assert "SLURM_NTASKS" in said and "CUDA_VISIBLE_DEVICES lists 8 devices" in said
    assert "--gpus-per-node 8: world size 16" in said


@pytest.mark.parametrize("cmd", ["estimate", "check"])
@pytest.mark.parametrize("args,env,expected", [
    (["--gpus-per-node", "8"], SRUN_ONE_TASK_PER_NODE, (16, 8, 2)),  # the flag states 8 ranks per task: 2 x 8
    ([], {**SRUN_ONE_TASK_PER_NODE, "SLURM_GPUS_ON_NODE": "8"}, (16, 8, 2)),  # Slurm gave each task 8 GPUs
    ([], {**SRUN_ONE_TASK_PER_NODE, "LOCAL_WORLD_SIZE": "8"}, (16, 8, 2)),  # torchrun's own count
    # --hardware dgx-h100 holds 8 per node: capacity, not ranks; SLURM_NTASKS stays the world (was 2 x 8 capped)
    (["--hardware", "dgx-h100"], {"SLURM_NTASKS": "2", "SLURM_JOB_NUM_NODES": "2"}, (2, 1, 2)),
])
def test_per_node_launchers_need_a_ranks_per_node_the_launch_states(cmd, args, env, expected):
    assert _run(cmd, args, env)[0] == expected


@pytest.mark.parametrize("cmd", ["estimate", "check"])
@pytest.mark.parametrize("args,env,expected", [
    ([], {"SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "4"}, (8, 4, 2)),  # review finding 2: 2 x 4 (was 4)
    ([], {"SLURM_NNODES": "3", "SLURM_GPUS_PER_NODE": "gpu:2"}, (6, 2, 3)),    # 3 x 2
    (["--gpus-per-node", "4"], {"SLURM_JOB_NUM_NODES": "2"}, (8, 4, 2)),      # the flag's 4 on Slurm's 2 nodes
    (["--hardware", "dgx-h100"], {"SLURM_JOB_NUM_NODES": "2"}, (16, 8, 2)),   # Slurm's 2 nodes x the spec's 8
])
def test_slurm_nodes_times_stated_ranks_per_node_is_the_world(cmd, args, env, expected):
    assert _run(cmd, args, env)[0] == expected


@pytest.mark.parametrize("cmd", ["estimate", "check"])
def test_slurm_nodes_other_than_the_named_ones_are_refused(cmd):
    """--hardware dgx-h100:3 names 3 nodes; Slurm allocated 2: 2 x 8 = 16 ranks is not 3 x 8, exit 2 in both."""
    e = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8", "PYTHONPATH": str(ROOT),
         "SLURM_JOB_NUM_NODES": "2"}
    p = subprocess.run([sys.executable, "-m", "advisor", cmd, *ARGS, "--hardware", "dgx-h100:3"], env=e,
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2 and not p.stdout, (p.stdout, p.stderr)
    line, = p.stderr.strip().splitlines()
    assert "world size 16" in line and "dgx-h100:3" in line
