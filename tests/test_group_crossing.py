"""cross22 (issue 15): which link ZeRO++ hpZ's, DeepSpeed MoE's and DeepSpeed-Ulysses' collectives cross.

The expected groups are the ones DeepSpeed 0.19.8's own builders make, called here with a stand-in for
``deepspeed.comm`` that records every ``new_group(ranks)`` (no process group needed):

* hpZ: ``utils/groups.py`` _create_zero_param_parallel_group l.944-949, min(h, world) consecutive global
  ranks, whatever the TP / PP / data-parallel groups (called by ``stage3.py`` l.752-753 and
  ``partition_parameters.py`` l.1118-1120);
* MoE: ``utils/groups.py`` _create_expert_and_data_parallel, the path ``moe/layer.py`` l.93-97 takes
  without expert tensor parallelism (the default): expert-data-parallel groups first (l.433-438, pp x ep of
  them), then the expert-parallel groups, ep consecutive ranks (l.462-463); the pipeline degree from
  ``groups.mpu`` (l.412, ``utils/bwc.py`` bwc_pipeline_parallel_world_size);
* Ulysses: ``runtime/sequence_parallel/parallel_state_sp.py`` initialize_sequence_parallel l.51-52 (sp
  consecutive ranks; it knows no TP), and for TP > 1 the advisor's order (``plan.Cluster``: the sequence
  axis inside the data axis, TP fastest) built with DeepSpeed's ``ProcessTopology`` (``runtime/pipe/
  topology.py``), which the TP-1 groups must equal.

A group crosses nodes when its ranks sit on more than one node, nodes holding consecutive ranks (rank //
ranks per node). The times: bytes / the preset's peer link (h100-sxm-80gb ``peer_bytes_per_s``) within a
node, bytes / (dgx-h100 ``network_bytes_per_s`` / ranks per node) across nodes
(advisor/data/hardware_presets.json, read here)."""

from __future__ import annotations

import itertools
import json
import types
from pathlib import Path

import pytest

from advisor.cluster.hardware import resolve_hardware
from advisor.config.effective import effective_config
from advisor.ledger.movement import group_spans_nodes, movement_roles
from advisor.ledger.state import Cluster, Plan
from advisor.model.specs import resolve_model
from advisor.plan import Workload
from tests.deepspeed_groups import RecordingComm, expert_groups, hpz_groups

ROOT = Path(__file__).resolve().parents[1]
PRESETS = json.loads((ROOT / "advisor" / "data" / "hardware_presets.json").read_text())
PEER = PRESETS["accelerators"]["h100-sxm-80gb"]["peer_bytes_per_s"]
NET = PRESETS["systems"]["dgx-h100"]["network_bytes_per_s"]


def _ds_hpz_groups(monkeypatch, world, h):
    return hpz_groups(monkeypatch, world, h)


def _ds_expert_groups(monkeypatch, world, pp, ep):
    return expert_groups(monkeypatch, world, pp, ep)[1]


def _ds_sequence_groups(monkeypatch, world, sp):
    sps = pytest.importorskip("deepspeed.runtime.sequence_parallel.parallel_state_sp")
    comm = RecordingComm(world)
    monkeypatch.setattr(sps, "dist", comm)
    monkeypatch.setattr(sps, "_SEQUENCE_PARALLEL_GROUP", None)
    monkeypatch.setattr(sps, "_SEQUENCE_DATA_PARALLEL_GROUP", None)
    sps.initialize_sequence_parallel(sp)
    return comm.made[:world // sp]  # l.51-52; then the one sequence-data-parallel group (l.61-62)


def _stage_spans(groups, stage, width, rpn):
    """Whether a group holding one of pipeline ``stage``'s ranks (stage x width .. + width - 1) is on two nodes."""
    lo, hi = stage * width, (stage + 1) * width
    return any(len({r // rpn for r in g}) > 1 for g in groups if any(lo <= r < hi for r in g))


TPS, PPS, RPNS = (1, 2, 4), (1, 2), (3, 4, 6, 8)


@pytest.mark.parametrize("tp, pp, rpn", list(itertools.product(TPS, PPS, RPNS)))
def test_hpz_groups_are_deepspeeds_consecutive_global_ranks(monkeypatch, tp, pp, rpn):
    """hpZ's groups are h consecutive *global* ranks, not h members of the ZeRO (data-parallel) group at
    stride TP: under TP 2, h 2 the group {0, 1} is a tensor-parallel pair."""
    for dp, h in itertools.product((2, 4, 8), (2, 4, 8)):
        world = pp * dp * tp
        if world % h:
            continue  # groups.py l.945 asserts it
        gs = _ds_hpz_groups(monkeypatch, world, h)
        assert gs == [list(range(i, i + min(h, world))) for i in range(0, world, min(h, world))]
        for s in range(pp):
            want = _stage_spans(gs, s, dp * tp, rpn)
            assert group_spans_nodes("hpz", tp, pp, dp, rpn, s, min(h, world)) == want, (dp, h, s, gs)


@pytest.mark.parametrize("tp, pp, rpn", list(itertools.product(TPS, PPS, RPNS)))
def test_expert_groups_are_deepspeeds_consecutive_ranks(monkeypatch, tp, pp, rpn):
    """MoE's expert-parallel groups without expert tensor parallelism: ep consecutive global ranks inside a
    stage, tensor-parallel ranks among them under TP (TP 4, ep 4: {0, 1, 2, 3}, within an 8-rank node, where
    the movement ledger had said ep x t = 16 > 8 ranks: across nodes)."""
    for dp, ep in itertools.product((2, 4, 8), (2, 4, 8)):
        width = dp * tp
        if width % ep:
            continue  # groups.py l.417 asserts it
        gs = _ds_expert_groups(monkeypatch, pp * width, pp, ep)
        for s in range(pp):
            want = _stage_spans(gs, s, width, rpn)
            assert group_spans_nodes("expert", tp, pp, dp, rpn, s, ep) == want, (dp, ep, s, gs)


@pytest.mark.parametrize("pp, rpn", list(itertools.product(PPS, RPNS)))
def test_sequence_groups_match_deepspeeds_builders(monkeypatch, pp, rpn):
    """Ulysses' sequence-parallel groups against parallel_state_sp's own consecutive groups, at TP 1: the only
    tensor-parallel size DeepSpeed's builders know (neither takes a TP size; Megatron-DeepSpeed asserts TP = PP = 1
    with DeepSpeed's sequence parallelism). The advisor's order under TP > 1 is its own assumption (movement.py
    group_spans_nodes' docstring), which no DeepSpeed builder can confirm, so it is not asserted here (review23: a
    ProcessTopology in the advisor's own axis order compared the code with itself)."""
    topo_mod = pytest.importorskip("deepspeed.runtime.pipe.topology")
    tp = 1
    for dp, sp in itertools.product((1, 2, 4), (2, 4)):
        topo = topo_mod.ProcessTopology(axes=["pipe", "data", "seq", "model"], dims=[pp, dp, sp, tp])
        gs = topo.get_axis_comm_lists("seq")
        world = pp * dp * sp * tp
        assert sorted(gs) == sorted(_ds_sequence_groups(monkeypatch, world, sp)), (dp, sp)
        for s in range(pp):
            want = _stage_spans(gs, s, dp * sp * tp, rpn)
            assert group_spans_nodes("sequence", tp, pp, dp * sp, rpn, s, sp) == want, (dp, sp, s, gs)


def test_expert_group_of_tensor_parallel_ranks_takes_the_peer_link():
    """Mixtral-8x7B, TP 4 x ep 4 on 16 ranks of 2 dgx-h100 nodes: DeepSpeed's expert-parallel groups are
    {0..3}, {4..7}, ...: each within a node, so the MoE all-to-alls are bytes / 450e9 (0.00224 s for
    1,006,632,960 B), not bytes / (400e9 / 8) = 0.0201 s as when ep x t = 16 > 8 said across nodes. The
    ZeRO-1 collectives over DP {0, 4, 8, 12} do cross: bytes / 50e9."""
    cfg = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 1}}
    plan = Plan(effective_config(cfg), resolve_model("mixtral-8x7b"),
                Cluster(world_size=16, tensor_parallel=4, expert_parallel=4),
                Workload(4096, 1, "none", moe_capacity_factor=1.25))
    one = 8 * 1280 * 4096 * 2 // 4 * 3 // 4  # (ep-1)/ep x E x C x h x D / t, C = 1280 (capacity 1.25, top-2)
    seen = set()
    for _, ms in movement_roles(plan, resolve_hardware("dgx-h100:2")):
        for m in ms:
            if m.item.startswith("moe_alltoall"):
                seen.add(m.item)
                assert m.crosses == "within_node" and m.seconds == pytest.approx(m.bytes / PEER, rel=1e-12), m
                assert m.bytes == 32 * 2 * one and m.seconds == pytest.approx(0.00223696, rel=1e-5), m
            if m.item in ("grad_reduce_scatter", "param_allgather"):
                assert m.crosses == "across_nodes" and m.seconds == pytest.approx(m.bytes / (NET / 8), rel=1e-12)
    assert seen == {"moe_alltoall_fwd", "moe_alltoall_bwd"}


def test_hpz_under_tensor_parallelism_by_hand():
    """Llama-3-8B ZeRO-3, TP 2 x ZeRO group 8 on 2 dgx-h100 nodes, hpZ h = 8: DeepSpeed's hpZ groups are
    ranks {0..7} and {8..15}, one node each: the hpZ all-gathers take the peer link (bytes / 450e9), the
    first forward's all-gather over the ZeRO group {0, 2, .., 14} the NIC share (bytes / (400e9 / 8))."""
    cfg = {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "Adam"},
           "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8, "stage3_max_reuse_distance": 0}}
    plan = Plan(effective_config(cfg), resolve_model("llama-3-8b"), Cluster(world_size=16, tensor_parallel=2),
                Workload(4096, 1))
    seen = set()
    for _, ms in movement_roles(plan, resolve_hardware("dgx-h100:2")):
        for m in ms:
            if m.item.endswith("_hpz"):
                seen.add(m.item)
                assert m.crosses == "within_node" and m.seconds == pytest.approx(m.bytes / PEER, rel=1e-12), m
            if m.item == "param_allgather_fwd":
                assert m.crosses == "across_nodes" and m.seconds == pytest.approx(m.bytes / (NET / 8), rel=1e-12)
    assert seen == {"param_allgather_fwd_hpz", "param_allgather_bwd_hpz"}, seen


def test_hpz_group_straddling_nodes_under_tensor_parallelism():
    """h = 3 on 12 ranks (TP 2 x ZeRO 6) of 8-rank nodes: DeepSpeed's group {6, 7, 8} straddles nodes 0 and
    1, so the hpZ rows are across nodes; before, the stage's sub-plan of 6 ranks gave 6 ranks per node and
    6 % 3 == 0 said within."""
    cfg = {"train_batch_size": 6, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 3}}
    plan = Plan(effective_config(cfg), resolve_model("llama-3-8b"),
                Cluster(world_size=12, gpus_per_node=8, tensor_parallel=2), Workload(4096, 1))
    rows = [m for _, ms in movement_roles(plan) for m in ms if m.item.endswith("_hpz")]
    assert rows and all(m.crosses == "across_nodes" for m in rows), rows


def test_ulysses_group_straddling_a_six_rank_node_by_hand():
    """Llama-3-8B, SP 4 on 12 ranks of 6 per node: DeepSpeed's sequence groups {0..3}, {4..7}, {8..11};
    {4..7} is on nodes 0 and 1, so the all-to-alls are timed at the NIC share, 400e9 / 6 B/s (one group of the
    stage crossing decides, as group_spans_nodes does for every axis), where u x t = 4 <= 6 said the peer link."""
    cfg = {"train_batch_size": 3, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 1}}
    plan = Plan(effective_config(cfg), resolve_model("llama-3-8b"),
                Cluster(world_size=12, gpus_per_node=6, sequence_parallel=4), Workload(32768, 1))
    assert group_spans_nodes("sequence", 1, 1, 12, 6, 0, 4)
    rows = [m for _, ms in movement_roles(plan, resolve_hardware("dgx-h100:2")) for m in ms
            if m.item.startswith("ulysses_alltoall")]
    assert rows
    one = 3 * 8192 * (2 * 32 * 128 + 2 * 8 * 128) * 2 // 4  # test_parallel_traffic's 125,829,120 B per layer
    for m in rows:
        assert m.bytes == 32 * one and m.crosses == "across_nodes", m
        assert m.seconds == pytest.approx(32 * one / (NET / 6), rel=1e-12), m
