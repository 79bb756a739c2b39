"""DeepSpeed 0.19.8's own process-group builders, called without a process group.

A stand-in for ``deepspeed.comm`` records every ``new_group(ranks)`` call in order, so a test can compare the
groups DeepSpeed builds with the advisor's rank arithmetic. Shared by tests/test_group_crossing.py,
tests/test_hpz_tensor_parallel22.py and tests/test_moe_expert_groups22.py.

* hpZ: ``utils/groups.py`` _create_zero_param_parallel_group l.944-949 (min(h, world) consecutive global
  ranks);
* MoE without expert tensor parallelism (the default path of ``moe/layer.py`` l.93-97):
  ``utils/groups.py`` _create_expert_and_data_parallel, which makes the pp x ep expert-data-parallel groups
  first (l.433-439) and then the expert-parallel groups of ep consecutive ranks (l.462-463), the pipeline
  degree read from ``groups.mpu`` (l.412)."""

from __future__ import annotations

import types

import pytest


class RecordingComm:
    """Stands in for ``deepspeed.comm`` inside a group builder: a world of ``world`` ranks, this rank 0,
    every ``new_group`` call's ranks recorded in order in ``made``."""

    def __init__(self, world: int):
        self.world, self.made = world, []

    def is_initialized(self):
        return True

    def get_world_size(self, group=None):
        return self.world

    def get_rank(self, group=None):
        return 0

    def new_group(self, ranks):
        self.made.append(list(ranks))
        return object()


def hpz_groups(monkeypatch, world: int, h: int) -> list[list[int]]:
    """The hpZ (zero_param_process_group) groups DeepSpeed builds for ``world`` ranks and
    zero_hpz_partition_size ``h`` (groups.py l.944-949)."""
    groups = pytest.importorskip("deepspeed.utils.groups")
    comm = RecordingComm(world)
    monkeypatch.setattr(groups, "dist", comm)
    monkeypatch.setattr(groups, "_ZERO_PARAM_INTRA_PARALLEL_GROUP", None)
    groups._create_zero_param_parallel_group(h)
    return comm.made


def expert_groups(monkeypatch, world: int, pp: int, ep: int) -> tuple[list[list[int]], list[list[int]]]:
    """(expert-data-parallel groups, expert-parallel groups) DeepSpeed builds for ``world`` ranks, ``pp``
    pipeline stages and ep_size ``ep``, as moe/layer.py l.96-97 calls _create_expert_and_data_parallel.
    Raises what DeepSpeed raises (an AssertionError where ep does not divide world / pp, l.417)."""
    groups = pytest.importorskip("deepspeed.utils.groups")
    comm = RecordingComm(world)
    monkeypatch.setattr(groups, "dist", comm)
    for g in ("_EXPERT_PARALLEL_GROUP", "_EXPERT_PARALLEL_GROUP_RANKS", "_EXPERT_DATA_PARALLEL_GROUP",
              "_EXPERT_DATA_PARALLEL_GROUP_RANKS"):
        monkeypatch.setattr(groups, g, {})
    monkeypatch.setattr(groups, "mpu", types.SimpleNamespace(get_pipe_parallel_world_size=lambda: pp))
    groups._create_expert_and_data_parallel(ep)
    assert len(comm.made) == pp * ep + world // ep  # l.433-434 (expert-data), then l.462 (expert)
    return comm.made[:pp * ep], comm.made[pp * ep:]
