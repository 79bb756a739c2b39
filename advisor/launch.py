"""The launch shape as the launchers set it in the environment.

torchrun and the deepspeed launcher set WORLD_SIZE, RANK, LOCAL_WORLD_SIZE; Slurm sets
SLURM_NTASKS, SLURM_JOB_NUM_NODES, SLURM_GPUS_ON_NODE / SLURM_GPUS_PER_NODE. Flags beat the
environment; every value says where it came from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Found:
    value: int
    source: str


def _int(env: Mapping[str, str], name: str) -> Found | None:
    v = env.get(name)
    if v is None:
        return None
    try:
        n = int(str(v).split("(")[0].strip())
    except ValueError:
        return None
    return Found(n, name) if n > 0 else None


def world_size_from_env(env: Mapping[str, str] | None = None) -> Found | None:
    """Total ranks: WORLD_SIZE (torchrun, deepspeed launcher), else SLURM_NTASKS."""
    env = os.environ if env is None else env
    return _int(env, "WORLD_SIZE") or _int(env, "SLURM_NTASKS")


def gpus_per_node_from_env(env: Mapping[str, str] | None = None) -> Found | None:
    """Ranks per node: LOCAL_WORLD_SIZE, else SLURM_GPUS_ON_NODE / SLURM_GPUS_PER_NODE
    (Slurm may write "gpu:8" or "8(x2)"), else the count in CUDA_VISIBLE_DEVICES /
    ROCR_VISIBLE_DEVICES."""
    env = os.environ if env is None else env
    f = _int(env, "LOCAL_WORLD_SIZE") or _int(env, "SLURM_GPUS_ON_NODE")
    if f:
        return f
    v = env.get("SLURM_GPUS_PER_NODE")
    if v:
        try:
            return Found(int(v.split(":")[-1].split("(")[0]), "SLURM_GPUS_PER_NODE")
        except ValueError:
            pass
    for name in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        v = env.get(name)
        if v:
            ids = [x for x in v.split(",") if x.strip()]
            if ids:
                return Found(len(ids), name)
    return None
