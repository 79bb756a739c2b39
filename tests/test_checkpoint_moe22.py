"""ckpt22: the files a native-MoE ZeRO-1/2 save writes, by hand from a Mixtral-like toy's shapes.

DeepSpeed 0.19.8 ``runtime/engine.py``: with MoE layers ``save_checkpoint`` calls ``_save_moe_checkpoint``
(l.4914-4919), then every data-parallel rank writes its optimizer-states file (``_save_zero_checkpoint``,
l.4930-4932). ``_save_moe_checkpoint`` writes, from the ranks of expert-data-parallel rank 0
(``is_data_parallel_writer``: ``dp_rank == 0``, checkpoint_engine.py l.47-48; engine.py l.5084-5090), one
``layer_{moe_layer_id}_expert_{global_id}_mp_rank_00_model_states.pt`` per MoE layer and expert
(``_get_expert_ckpt_name`` l.4368-4381; global id = expp_rank x num_local_experts + local id, l.5097-5098), its
parameters cloned (l.5102), and from data-parallel rank 0 ``mp_rank_00_model_states.pt`` with the non-expert
module only (``_get_non_moe_state_dict`` l.4984, l.5291-5297). The ZeRO-1/2 optimizer's state dict holds every
param group: the dense fp32 partition over the W data-parallel ranks and the ``moe`` groups' over the
expert-data-parallel group of W / ep ranks (``stage_1_and_2.py`` l.880-881), each with Adam's two moments.

Expected bytes: dense N_d and expert X elements from the toy's shapes (tests/test_moe_expert_groups22.py), every
size divisible by 2 x its group (ZeRO's alignment pads nothing, ``stage_1_and_2.py`` l.441-446)."""

from __future__ import annotations

import pytest

from advisor.config.effective import effective_config
from advisor.ledger.checkpoint import checkpoint_files
from advisor.ledger.state import Cluster, Plan, compute_ledger
from tests.test_moe_expert_groups22 import E, H, L, M, _cfg, _dense_stage, _toy


@pytest.mark.parametrize("stage, world, ep", [(1, 8, 4), (1, 16, 8), (2, 8, 2), (2, 16, 4)])
def test_moe_files_by_hand(stage, world, ep):
    n_local = E // ep
    per_expert = 2 * M * H + H * M  # gate_up (2m, h) + down (h, m)
    dense = _dense_stage(1, 1, 0)
    experts = L * n_local * per_expert  # on each rank
    we = world // ep  # expert-data-parallel group (groups.py l.438)
    assert dense % (2 * world) == 0 and experts % (2 * we) == 0
    res = checkpoint_files(Plan(effective_config(_cfg(stage)), _toy(), Cluster(world_size=world, expert_parallel=ep)))
    by = {f.name: f for f in res.files}
    # the non-expert module, bf16, from data-parallel rank 0
    ms = by["mp_rank_00_model_states.pt"]
    assert (ms.rank, ms.parts["module"]) == (0, 2 * dense)
    # one file per MoE layer and global expert, 2 B x its parameters, written by expert-parallel rank g // n_local
    ex = {f.name: f for f in res.files if "_expert_" in f.name}
    assert sorted(ex) == sorted(f"layer_{i}_expert_{g}_mp_rank_00_model_states.pt" for i in range(L) for g in range(E))
    for i in range(L):
        for g in range(E):
            f = ex[f"layer_{i}_expert_{g}_mp_rank_00_model_states.pt"]
            assert (f.rank, f.bytes) == (g // n_local, 2 * per_expert), f.name
    # every data-parallel rank: fp32 partition dense / W + experts / (W / ep), 2 Adam moments of it
    opt = [f for f in res.files if f.kind == "optim_states"]
    assert sorted(f.rank for f in opt) == list(range(world))
    part = dense // world + experts // we
    for f in opt:
        assert f.name == f"bf16_zero_pp_rank_{f.rank}_mp_rank_00_optim_states.pt"
        assert f.parts["fp32_partition"] + f.parts["expert_fp32_partition"] == 4 * part
        assert f.parts["optimizer_state"] == 2 * 4 * part


def test_reviewer_case_in_numbers():
    """ZeRO-1, 16 ranks, ep 8 (the reviewer's mixtral case, on the toy): the experts' partition is over 2 ranks,
    not 16: 2 layers x 1 expert x 393,216 = 786,432 expert elements -> 393,216 x 4 B fp32 on each rank, where the
    old ledger wrote 786,432 / 16 x 4 (8x understated)."""
    res = checkpoint_files(Plan(effective_config(_cfg(1)), _toy(), Cluster(world_size=16, expert_parallel=8)))
    f = next(f for f in res.files if f.kind == "optim_states")
    assert f.parts["expert_fp32_partition"] == 786_432 // 2 * 4


@pytest.mark.parametrize("stage, world, ep", [(1, 16, 8), (2, 8, 2)])
def test_optim_file_is_the_ledgers_master_and_moments(stage, world, ep):
    """One source: each rank's optimizer-states fp32 partition and moments are the ledger's fp32 master and
    optimizer-state entries of that rank (estimate's figures)."""
    plan = Plan(effective_config(_cfg(stage)), _toy(), Cluster(world_size=world, expert_parallel=ep))
    led = compute_ledger(plan)
    opt = {f.rank: f for f in checkpoint_files(plan).files if f.kind == "optim_states"}
    for rl in led.ranks:
        for r in rl.ranks:
            f = opt[r]
            assert f.parts["fp32_partition"] + f.parts["expert_fp32_partition"] == rl.total("accelerator", "master_weights")
            assert f.parts["optimizer_state"] == rl.total("accelerator", "optimizer_states")
