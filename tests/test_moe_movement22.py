"""The routed experts' ZeRO collectives in the movement ledger run over DeepSpeed's expert-data-parallel group
(advisor.plan.Cluster.expert_data_parallel_size = DP x SP x TP / ep; utils/groups.py
_create_expert_and_data_parallel l.426-445; stage_1_and_2.py l.880-881 makes it a moe param group's partition
count and l.1641 its reduce group), the dense ones over DP x SP. Expected bytes by hand from Mixtral-8x7B's shapes
(h 4096, MLP 14336, 32 layers, 8 experts of 3 h x m each, 46,702,792,704 parameters): bf16 (C = D = 2 B), GA 1,
ZeRO-1/2: reduce-scatter (W-1)/W x N x C and all-gather (W-1)/W x N x D (ZeRO paper s.7.1), per part."""

from __future__ import annotations

import json

import pytest

from advisor.config.loading import parse_text
from advisor.ledger.movement import movement_plan, movement_roles
from advisor.model.specs import resolve_model
from advisor.plan import Cluster, Workload
from advisor.planning import build_plan

H, M, L, E = 4096, 14336, 32, 8
EXPERT = 3 * H * M  # one expert's gate, up and down projections
DENSE = 46_702_792_704 - L * E * EXPERT


def _collectives(stage, ws, ep):
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": stage}}
    plan = build_plan(parse_text(json.dumps(cfg), "x.json"), resolve_model("mixtral-8x7b"),
                      Cluster(world_size=ws, expert_parallel=ep), workload=Workload(seq_len=4096))
    roles = movement_roles(movement_plan(plan))
    out = {}
    for _, ms in roles:
        got = {m.item: (m.group, m.bytes) for m in ms if m.link == "network" and "alltoall" not in m.item}
        assert out in ({}, got)  # every rank moves the same collective bytes
        out = got
    return out


@pytest.mark.parametrize("stage", [1, 2])
@pytest.mark.parametrize("ws,ep", [(8, 8), (8, 4), (16, 8), (16, 2)])
def test_expert_collectives_over_the_expert_data_parallel_group(stage, ws, ep):
    we = ws // ep  # TP 1, SP 1: DP x SP x TP / ep
    rank_experts = L * (E // ep) * EXPERT
    got = _collectives(stage, ws, ep)
    dense = (ws - 1) * DENSE * 2 // ws
    assert got["grad_reduce_scatter"] == ("data_parallel", dense)
    assert got["param_allgather"] == ("data_parallel", dense)
    if we == 1:  # ep 8 on 8 ranks: each expert on one rank, nothing to reduce (main counted 7/8 of them)
        assert not [k for k in got if k.startswith("experts_")], got
    else:
        exp = (we - 1) * rank_experts * 2 // we
        assert got["experts_grad_reduce_scatter"] == ("expert_data_parallel", exp)
        assert got["experts_param_allgather"] == ("expert_data_parallel", exp)
