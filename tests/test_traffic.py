"""The movement ledger and the endurance arithmetic, against hand computations and the
reference's measured NVMe traffic (deepspeed-0.19.8-state-accounting.md section 5.4)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from advisor.config.effective import effective_config
from advisor.cluster.hardware import from_dict
from advisor.model.inventory import Inventory, TensorSpec, from_param_count
from advisor.ledger.state import Cluster, Plan, zero3_sub_groups, zero12_group_layout, zero12_rank_coverage
from advisor.config.loading import load_config
from advisor.rules import LintContext, all_rules
from advisor.ledger.movement import (NETWORK, NVME, PCIE, endurance, endurance_report, movement_for,
                             movement_roles, not_modelled, nvme_bytes_per_step, totals)


from tests.conftest import CASES as _CASES  # noqa: E402  (tests/data/cases)
CASES = _CASES
C10 = CASES / "C10-nvme-writes-per-step"

# The reference's NVMe model: MLP 1024 -> 1031 -> 1029 (model.parameters() order)
MLP = [((1031, 1024), True), ((1031,), True), ((1029, 1031), True), ((1029,), True)]
# The reference's odd model: Linear(64,301) -> Linear(301,77) -> Linear(77,5), N = 43,209
ODD = [19264, 301, 23177, 77, 385, 5]


def _inv(shapes=MLP) -> Inventory:
    return Inventory("t", [TensorSpec(f"t{i}", s, trainable=tr) for i, (s, tr) in enumerate(shapes)])


def _plan(zero: dict, inv: Inventory, world: int = 1, **top) -> Plan:
    raw = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": zero, **top}
    return Plan(effective_config(raw), inv, Cluster(world_size=world))


def _nvme_opt(**extra) -> dict:
    return {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}, **extra}


# ---------------------------------------------------------------------------------------------
# endurance arithmetic, a worked example by hand


def test_endurance_worked_example_by_hand():
    # 50 GB written per step, 12 s per step: 86,400 / 12 = 7,200 steps a day,
    # 7,200 x 5e10 = 3.6e14 bytes (360 TB) a day. A 3.84 TB drive rated 1 DWPD for 5 years
    # absorbs 3.84e12 x 365 x 5 = 7.008e15 bytes: 7.008e15 / 3.6e14 = 19.4666... days.
    spd, per_day, days = endurance(5e10, 12, 7.008e15)
    assert spd == 7200
    assert per_day == 3.6e14
    assert days == pytest.approx(19.46667, rel=1e-5)
    assert endurance(0, 12, 7.008e15)[2] == math.inf
    assert endurance(5e10, 12, None)[2] is None
    with pytest.raises(ValueError):
        endurance(1, 0, 1)


# ---------------------------------------------------------------------------------------------
# case C10: the folder's config, --params 6700000000, world size 1


def _c10_hw(access: str):
    return from_dict({"base": "workstation-4090", "storage": [
        {"name": "nvme0", "mounts": ["/scratch"], "capacity_bytes": 2e12, "read_bytes_per_s": 7.45e9,
         "write_bytes_per_s": 6.9e9, "endurance": {"tbw": 1200}, "access": access}]}, "c10-hw.json")


def _c10_plan() -> Plan:
    raw = load_config(str(C10 / "config.json")).data
    return Plan(effective_config(raw), from_param_count(6_700_000_000), Cluster(world_size=1))


def test_C10_nvme_writes_per_step():
    expect = json.loads((C10 / "expect.json").read_text())
    fig = next(f for f in expect["figures"] if f["name"] == "nvme bytes written per step")
    ms = movement_for(_c10_plan())
    written = nvme_bytes_per_step(ms, "write")
    # case.md: 16 B per partition element (3 x 4 B master + moments, 4 B fp32 gradient)
    assert abs(written - fig["value"]) <= fig["rel_tol"] * fig["value"]
    assert abs(written - 16 * 6_700_000_000) <= 0.03 * 16 * 6_700_000_000
    assert nvme_bytes_per_step(ms, "read") == written  # "and as much read"
    # which classes: master weights, both moments, gradients; no parameters (offload_param: cpu)
    assert {m.cls for m in ms if m.link == NVME} == {"master_weights", "optimizer_states", "gradients"}


def test_C10_endurance_at_30_s_per_step():
    hw = _c10_hw("read-write")
    lines = endurance_report(movement_for(_c10_plan(), hw), hw, step_time_s=30)
    (ln,) = lines
    assert ln.tier == "nvme0" and ln.paths == ["/scratch/nvme"]
    assert ln.steps_per_day == 2880  # 86,400 / 30
    assert ln.write_bytes_per_day == pytest.approx(308.7e12, rel=0.03)  # case.md: about 308.7 TB a day
    assert ln.days_of_life == pytest.approx(3.9, abs=0.1)  # 1,200 TBW last about 3.9 days
    assert ln.endurance_used_per_day == pytest.approx(ln.write_bytes_per_day / 1.2e15)
    # time at the drive's 6.9 GB/s write bandwidth
    assert ln.write_seconds_per_step == pytest.approx(ln.write_bytes_per_step / 6.9e9)


def _t001(plan: Plan, hw, step_time_s=30, raw=None):
    loaded = load_config(str(C10 / "config.json")) if raw is None else raw
    ctx = LintContext(loaded=loaded, effective=plan.config, world_size=plan.cluster.world_size,
                      dp_world_size=plan.cluster.dp_world_size, inventory=plan.inventory,
                      hardware=hw, step_time_s=step_time_s)
    return list(all_rules()["T001"]().check(ctx))


def test_C10_read_oriented_drive_is_a_T001_error_with_the_figures():
    (f,) = _t001(_c10_plan(), _c10_hw("read-oriented"))
    assert f.severity == "error" and f.pointer == "/zero_optimization/offload_optimizer/nvme_path"
    assert abs(f.data["bytes_written_per_step"] - 107_200_000_000) <= 0.03 * 107_200_000_000
    assert f.data["steps_per_day"] == 2880
    assert f.data["days_of_life"] == pytest.approx(3.9, abs=0.1)
    for word in ("read-oriented", "optimizer moments", "master weights", "TiB written per day", "3.9 days"):
        assert word in f.message  # the message is in the default unit system, GiB (TiB = 2^40 B)
    assert f"{f.data['bytes_written_per_day'] / 2**40:,.1f} TiB written per day" in f.message


def test_C10_read_write_drive_is_not_a_T001_finding_but_still_reports_endurance():
    assert _t001(_c10_plan(), _c10_hw("read-write")) == []


def test_T001_needs_hardware_and_says_to_give_a_step_time():
    p = _c10_plan()
    ctx = LintContext(loaded=load_config(str(C10 / "config.json")), effective=p.config, world_size=1,
                      dp_world_size=1, inventory=p.inventory)
    assert list(all_rules()["T001"]().check(ctx)) == []
    (f,) = _t001(p, _c10_hw("read-oriented"), step_time_s=None)
    assert "--step-time" in f.message and "days_of_life" not in f.data


def test_T001_frozen_parameters_on_a_read_oriented_tier_are_fine(tmp_path):
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/scratch/w"}}}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    inv = _inv([((4096, 4096), False), ((4096,), False), ((64, 4096), True)])  # a frozen base + a small adapter
    plan = Plan(effective_config(cfg), inv, Cluster(world_size=1))
    (f,) = _t001(plan, _c10_hw("read-oriented"), raw=load_config(str(path)))
    assert f.severity == "info" and "frozen" in f.message and "never" in f.message
    rows = [m for m in movement_for(plan) if m.link == NVME]
    assert {(m.direction, m.item) for m in rows} == {("read", "frozen_params")}
    # the frozen 4096x4096 weight: A_512(16,777,216) x 2 B read once per step (stays gathered to backward)
    assert sum(m.bytes for m in rows) == 16_777_216 * 2


def test_T001_trained_parameters_on_nvme_beyond_max_in_cpu_are_an_error(tmp_path):
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/scratch/w",
                                                               "max_in_cpu": 1000}}}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    plan = Plan(effective_config(cfg), _inv(), Cluster(world_size=1))
    (f,) = _t001(plan, _c10_hw("read-oriented"), raw=load_config(str(path)))
    assert f.severity == "error" and "trained parameters" in f.message
    assert f.pointer == "/zero_optimization/offload_param/nvme_path"


# ---------------------------------------------------------------------------------------------
# partitions and sub-groups (reference section 3), measured examples


def test_sub_groups_reference_example():
    # reference 3.2: sub_group_size = 10,000, W = 2 -> S = [21,372, 235] [M]
    inv = _inv([((n,), True) for n in ODD])
    assert [s.numel for s in zero3_sub_groups(inv, 2, 10_000)] == [21_372, 235]
    assert [s.numel for s in zero3_sub_groups(inv, 2, 10**9)] == [21_607]  # P3 for W = 2


def test_zero12_partition_reference_example():
    # reference 3.1: N = 43,209, W = 2: N_pad = 43,212, P = 21,606, I_0 = 42,742, I_1 = 23,644 [M]
    lay = zero12_group_layout(ODD, 2, 2, False)
    assert lay.P == 21_606
    assert zero12_rank_coverage(lay, 0)[:2] == (42_742, 21_606)  # (I_r, Cov_r)
    assert zero12_rank_coverage(lay, 1)[:2] == (23_644, 43_209 - 21_606)


# ---------------------------------------------------------------------------------------------
# NVMe bytes per step: the reference's measured runs (section 5.4 table)


@pytest.mark.parametrize("name,zero,world,write,read", [
    ("N1 W=1 opt=nvme", _nvme_opt(), 1, 33_893_376, 33_893_376),
    ("N3 W=2 opt=nvme", _nvme_opt(), 2, 16_948_224, 16_948_224),
    ("N5 sub_group_size=6e5", _nvme_opt(sub_group_size=600_000), 1, 33_881_088, 33_881_088),
    ("N2 W=2 opt+param nvme, max_in_cpu=1000",
     _nvme_opt(offload_param={"device": "nvme", "nvme_path": "/nvme", "buffer_size": 2_000_000,
                              "max_in_cpu": 1000}), 2, 16_948_224 + 2_117_632, 16_948_224 + 2_117_632),
    ("N4 W=1 param nvme, default max_in_cpu",
     {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/nvme"}}, 1, 0, 0),
])
def test_reference_measured_nvme_traffic(name, zero, world, write, read):
    ms = movement_for(_plan(zero, _inv(), world))
    for r in range(world):
        assert nvme_bytes_per_step(ms, "write", rank=r) == write, (name, r)
        assert nvme_bytes_per_step(ms, "read", rank=r) == read, (name, r)


def test_first_step_reads_no_moments():
    # reference 5.4: "The very first step reads only the master (+ grads)"
    ms = [m for m in movement_for(_plan(_nvme_opt(), _inv())) if m.link == NVME and m.direction == "read"]
    first = sum(m.bytes if m.first_step_bytes is None else m.first_step_bytes for m in ms)
    assert first == 2_118_912 * 4 + (1_055_744 + 1_060_864) * 4


def test_nvme_below_stage_3_is_cpu_offload_and_moves_nothing_to_disk():
    ms = movement_for(_plan({"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}}, _inv(), 2))
    assert not [m for m in ms if m.link == NVME]
    assert [m for m in ms if m.link == PCIE]  # but it is ZeRO-Offload: PCIe traffic


# ---------------------------------------------------------------------------------------------
# ZeRO-Offload PCIe and collectives


def test_zero2_offload_pcie_by_hand():
    # W = 2, N = 43,209 (bf16): rank 1 covers 43,209 - 21,606 = 21,603 real elements:
    # fp32 gradients to host 21,603 x 4, updated bf16 partition back 21,606 x 2.
    ms = movement_for(_plan({"stage": 2, "offload_optimizer": {"device": "cpu"}}, _inv([((n,), True) for n in ODD]), 2))
    t = totals(ms, rank=1)
    assert t["pcie/to_host"]["bytes"] == 21_603 * 4
    assert t["pcie/to_accelerator"]["bytes"] == 21_606 * 2


def test_collective_volumes_follow_the_zero_paper():
    # ZeRO paper s.7: stages 1/2 move 2 Psi per step, stage 3 3 Psi (1.5x) when parameters are
    # gathered again in backward; ring collectives: (W-1)/W of the buffer per rank.
    inv = _inv([((8192, 8192), True)])  # divisible by 2W: no padding
    psi = 8192 * 8192
    w = 8

    def net(zero):
        return sum(m.bytes for m in movement_for(_plan(zero, inv, w)) if m.link == NETWORK and m.rank == 0)

    z2 = net({"stage": 2})
    z3_regather = net({"stage": 3, "stage3_max_reuse_distance": 0})
    z3_kept = net({"stage": 3})  # default reuse distance 1e9 >= 2 x 67M: no backward all-gather
    assert z2 == 2 * psi * 2 * (w - 1) // w  # 2 Psi elements x 2 B x 7/8
    assert z3_regather == pytest.approx(1.5 * z2)
    assert z3_kept == pytest.approx(z2)
    assert net({"stage": 0}) == z2  # all-reduce = reduce-scatter + all-gather
    assert movement_for(_plan({"stage": 3}, inv, 1)) == []  # one rank: nothing moves


def test_gradient_accumulation_multiplies_stage_3_collectives_not_the_swap():
    inv = _inv()
    one = movement_for(_plan(_nvme_opt(), inv, 2))
    four = movement_for(_plan(_nvme_opt(), inv, 2, gradient_accumulation_steps=4))
    assert nvme_bytes_per_step(four, "write") == nvme_bytes_per_step(one, "write")
    assert totals(four, 0)["network/send"]["bytes"] == 4 * totals(one, 0)["network/send"]["bytes"]


# ---------------------------------------------------------------------------------------------
# time at the hardware's bandwidths


def test_seconds_use_the_rank_share_of_each_link():
    hw = from_dict({"base": "dgx-h100"})  # /raid: 30.4 GB/s write, PCIe Gen5 64 GB/s per direction
    plan = Plan(effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                  "zero_optimization": _nvme_opt(offload_optimizer={"device": "nvme",
                                                                                     "nvme_path": "/raid/ds"})}),
                _inv(), Cluster(world_size=8, gpus_per_node=8))
    ms = movement_for(plan, hw)
    w = next(m for m in ms if m.link == NVME and m.direction == "write" and m.item == "fp32_master")
    assert w.tier == "raid"
    # 8 ranks share the array, at DeepSpeed's aio defaults: 8 x 8 MiB = 67,108,864 B in flight against
    # 30.4e9 B/s x 20 us = 608,000 B (advisor.ledger.movement.aio_bandwidth) -> 30.4e9 x 67,108,864 / 67,716,864
    # -- plus one file's aio op (one sub-group, one fp32 master file: 91 us written, movement.AIO_PER_FILE_S)
    assert w.files == 1
    assert w.seconds == pytest.approx(w.bytes / (30.4e9 * 67_108_864 / 67_716_864 / 8) + 91e-6)
    p = next(m for m in ms if m.link == PCIE)
    assert p.seconds == pytest.approx(p.bytes / 64e9)
    n = next(m for m in ms if m.link == NETWORK)
    assert n.seconds == pytest.approx(n.bytes / 450e9)  # one node: NVLink, 900 GB/s bidirectional
    lines = endurance_report(ms, hw, step_time_s=10)
    raid = next(ln for ln in lines if ln.tier == "raid")
    os_ = next(ln for ln in lines if ln.tier == "os")
    assert raid.write_bytes_per_step == 8 * nvme_bytes_per_step(ms, "write", rank=0)  # the node's 8 ranks
    assert os_.write_bytes_per_step == 0 and os_.days_of_life == math.inf  # every tier reported


def test_T002_read_write_consumer_drive_worn_out_in_days():
    ctx_hw = _c10_hw("read-write")
    p = _c10_plan()
    ctx = LintContext(loaded=load_config(str(C10 / "config.json")), effective=p.config, world_size=1,
                      dp_world_size=1, inventory=p.inventory, hardware=ctx_hw, step_time_s=30)
    (f,) = list(all_rules()["T002"]().check(ctx))
    assert f.severity == "warning" and f.pointer == "/zero_optimization/offload_optimizer/nvme_path"
    assert f.data["days_of_life"] == pytest.approx(3.9, abs=0.1)
    # at one step every 12 hours the same drive lasts 1.2e15 / (2 x 1.072e11) = 5,597 days: no finding
    ctx.step_time_s = 43_200
    assert list(all_rules()["T002"]().check(ctx)) == []
    # read-oriented drives are T001's, not T002's
    ctx.hardware, ctx.step_time_s = _c10_hw("read-oriented"), 30
    assert list(all_rules()["T002"]().check(ctx)) == []


def test_movement_section_shape_for_estimate():
    from advisor.ledger.movement import movement_section
    from advisor.render.text import movement_lines

    hw = _c10_hw("read-write")
    s = movement_section(_c10_plan(), hw, step_time_s=30)
    json.dumps(s)
    role = s["ranks"][0]
    assert role["ranks"] == [0]
    assert role["nvme"]["write_bytes"] == role["nvme"]["read_bytes"] == 16 * 6_700_000_000
    # the case's aio (1 MiB x queue_depth 16), one rank: 16,777,216 B in flight against
    # 6.9e9 B/s x 20 us = 138,000 B (advisor.ledger.movement.aio_bandwidth)
    # 6.9e9 B/s x 20 us = 138,000 B (advisor.ledger.movement.aio_bandwidth), plus 91 us per file written
    # (movement.AIO_PER_FILE_S): 67 sub-groups of sub_group_size 1e8 (6.7e9 / 1e8, rounded up) x 3 files
    # (master, two moments) + one gradient file per tensor of the 400 (from_param_count)
    assert role["nvme"]["write_seconds"] == pytest.approx(16 * 6.7e9 / (6.9e9 * 16_777_216 / 16_915_216)
                                                          + (3 * 67 + 400) * 91e-6)
    assert s["endurance"][0]["days_of_life"] == pytest.approx(3.887, abs=0.01)
    text = "\n".join(movement_lines(s))
    assert "projected life 3.9 days" in text and "fp32_master" in text
    # two ranks with the same movements are one role
    two = movement_section(_plan({"stage": 2}, _inv([((1024, 1024), True)]), 2))
    assert [r["ranks"] for r in two["ranks"]] == [[0, 1]] and two["ranks"][0]["pcie"]["to_host_bytes"] == 0


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("sub_group_size", [10**9, 600_000, 10_000])
def test_every_swap_file_is_rewritten_once_per_step(world, sub_group_size):
    """Cross-check with the state ledger (advisor.ledger.state, written independently from the same
    reference): with parameters beyond max_in_cpu, each NVMe swap file the ledger places on a rank
    (fp32 master, both moments, gradient pieces, parameter partitions) is written exactly once
    and read once per steady step, so the movement bytes equal the ledger's nvme bytes per item."""
    from advisor.ledger.state import compute_ledger

    inv = _inv(MLP + [((300, 1029), True), ((7,), True)])
    zero = _nvme_opt(sub_group_size=sub_group_size,
                     offload_param={"device": "nvme", "nvme_path": "/nvme", "max_in_cpu": 1000,
                                    "buffer_size": 2_000_000})
    plan = _plan(zero, inv, world)
    ledger = compute_ledger(plan)
    ms = movement_for(plan)
    for rl in ledger.ranks:
        files: dict[str, int] = {}
        for e in rl.entries:
            if e.tier == "nvme":
                files[e.item] = files.get(e.item, 0) + e.bytes
        for direction in ("write", "read"):
            moved: dict[str, int] = {}
            for m in ms:
                if m.rank == rl.rank and m.link == NVME and m.direction == direction:
                    moved[m.item] = moved.get(m.item, 0) + m.bytes
            assert moved == files, (rl.rank, direction)


def test_network_time_across_nodes_uses_the_nics_share():
    # 16 ranks on 2 DGX H100 nodes: a rank gets 400 GB/s / 8 ranks = 50 GB/s of inter-node bandwidth
    hw = from_dict({"base": "dgx-h100", "nodes": 2})
    plan = Plan(effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                  "zero_optimization": {"stage": 2}}),
                _inv([((4096, 4096), True)]), Cluster(world_size=16, gpus_per_node=8))
    n = next(m for m in movement_for(plan, hw) if m.link == NETWORK)
    assert n.seconds == pytest.approx(n.bytes / 50e9)


# ---------------------------------------------------------------------------------------------
# activation checkpoints moved to host (cpu_checkpointing), from the activation ledger


def _cpu_ckpt_movements(ac: dict):
    """estimate's movement rows for GPT-2 (h 768, 12 layers), bf16, micro-batch 2, GA 4, seq 128,
    every layer checkpointed through deepspeed.checkpointing with ``ac`` as its section."""
    from advisor.model.specs import preset_inventory
    from advisor.plan import Workload
    from advisor.views.estimate import estimate

    raw = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 1}, "activation_checkpointing": ac}
    plan = Plan(effective_config(raw), preset_inventory("gpt2"), Cluster(world_size=1),
                Workload(seq_len=128, micro_batch=2, checkpointing="full"))
    res = estimate(plan)
    (role,) = res.sections["movement"]["ranks"]
    rows = {m["direction"]: m for m in role["movements"] if m["item"] == "activation_checkpoints"}
    return rows, res.sections["movement"]["not_modelled"]


def test_cpu_checkpointing_pcie_bytes_by_hand():
    # One checkpointed layer input: D x s x b x h = 2 x 128 x 2 x 768 = 393,216 B; 12 layers,
    # 4 micro-steps per optimizer step (train_batch_size 8 = 2 x 4 x 1 rank).
    inp = 2 * 128 * 2 * 768
    # Async offload engine (an accelerator with streams; checkpointing.py:_get_cpu_offload_engine,
    # keep_last_count=1, max_fwd_stash_count=2): 11 inputs copied out in forward, the newest kept;
    # 10 copied back, the last one copied out still held by the forward stash.
    rows, notes = _cpu_ckpt_movements({"cpu_checkpointing": True})
    assert rows["to_host"]["bytes"] == 4 * 11 * inp == 17_301_504
    assert rows["to_accelerator"]["bytes"] == 4 * 10 * inp == 15_728_640
    assert (rows["to_host"]["phase"], rows["to_accelerator"]["phase"]) == ("forward", "backward")
    assert rows["to_host"]["overlap"] and rows["to_host"]["link"] == PCIE
    assert not any("cpu_checkpointing" in n for n in notes)
    # Partitioned (mp_size 1: the partition is the whole input): every input goes out with a blocking
    # partition.cpu() (:436) and comes back into the gather buffer (gather_partitioned_activations).
    rows, _ = _cpu_ckpt_movements({"cpu_checkpointing": True, "partition_activations": True})
    assert rows["to_host"]["bytes"] == rows["to_accelerator"]["bytes"] == 4 * 12 * inp == 18_874_368
    assert not rows["to_host"]["overlap"]
    rows, _ = _cpu_ckpt_movements({"partition_activations": True})
    assert rows == {}


def test_cpu_checkpoint_traffic_counts():
    from advisor.model.activations import cpu_checkpoint_traffic
    assert cpu_checkpoint_traffic(3, 10, async_engine=False) == (30, 30)
    assert cpu_checkpoint_traffic(3, 10, async_engine=True) == (20, 10)
    assert cpu_checkpoint_traffic(1, 10, async_engine=True) == (0, 0)
    assert cpu_checkpoint_traffic(0, 10, async_engine=False) == (0, 0)


def test_movements_without_activations_say_cpu_checkpointing_is_not_counted():
    plan = _plan({"stage": 1}, _inv(), activation_checkpointing={"cpu_checkpointing": True})
    assert not [m for m in movement_for(plan) if m.cls == "activations"]
    from advisor.ledger.movement import not_modelled
    assert any("cpu_checkpointing" in n for n in not_modelled(plan))


# ---------------------------------------------------------------------------------------------
# ZeRO++ qwZ / qgZ (DeepSpeed 0.19.8)


def _zpp_plan(world: int, per_node: int, **zero) -> Plan:
    inv = _inv([((4096, 4096), True), ((4096,), True)])
    raw = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 3, **zero}}
    return Plan(effective_config(raw), inv, Cluster(world_size=world, gpus_per_node=per_node))


def _rank0(plan: Plan) -> dict[str, object]:
    return {m.item: m for m in movement_for(plan) if m.rank == 0}


def test_qwz_all_gathers_int8_by_hand():
    """qwZ: partition_parameters.py _all_gather_coalesced gathers an int8 flat buffer of
    sum(p_i) x W elements (1 byte each) instead of the bf16 one; gradients unchanged."""
    W = 16
    p_sum = 4096 * 4096 // W + 4096 // W  # both divisible by W: no padding
    plain = _rank0(_zpp_plan(W, 8))
    q = _rank0(_zpp_plan(W, 8, zero_quantized_weights=True))
    assert plain["param_allgather_fwd"].bytes == (W - 1) * p_sum * 2
    assert q["param_allgather_fwd"].bytes == (W - 1) * p_sum * 1
    assert q["grad_reduce_scatter"].bytes == plain["grad_reduce_scatter"].bytes
    assert any("qwZ" in x and "scales" in x for x in not_modelled(_zpp_plan(W, 8, zero_quantized_weights=True)))


def test_qgz_two_stage_all_to_all_by_hand():
    """qgZ on 2 nodes x 8 ranks (coalesced_collectives.py all_to_all_quant_reduce): the 4096 x 4096
    weight (n % 2W == 0) goes int4 with g = max(4096, 4096, 16) = 4096 fp32 scales; the node-local
    all-to-all sends 7/8 x (n/2 + 4g), the cross-node one 1/2 x (n/16 + 4 x 4096//8); the 1-D bias
    falls back to the bf16 reduce-scatter, 15/16 x 4096 x 2."""
    n, g = 4096 * 4096, 4096
    q = _rank0(_zpp_plan(16, 8, zero_quantized_gradients=True))
    intra, inter, rs = q["qgz_intra_node_all_to_all"], q["qgz_inter_node_all_to_all"], q["grad_reduce_scatter"]
    assert intra.bytes == 7 * (n // 2 + 4 * g) // 8 and intra.intra_node is True
    assert inter.bytes == (n // 16 + 4 * (g // 8)) // 2 and inter.intra_node is False
    assert rs.bytes == 15 * 4096 * 2 // 16
    # one node: stage3.py uses the plain reduce-scatter (num_nodes > 1 is the condition)
    one = _rank0(_zpp_plan(8, 8, zero_quantized_gradients=True))
    assert "qgz_intra_node_all_to_all" not in one
    assert one["grad_reduce_scatter"].bytes == 7 * (n + 4096) * 2 // 8


def _hpz_plan(world: int, per_node: int, shapes, ga: int = 1, **zero) -> Plan:
    inv = _inv(shapes)
    raw = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": ga, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, **zero}}
    return Plan(effective_config(raw), inv, Cluster(world_size=world, gpus_per_node=per_node))


def test_hpz_all_gathers_by_hand():
    """hpZ h = 8 on 2 nodes x 8 ranks, GA = 4, parameters re-gathered in backward
    (stage3_max_reuse_distance 0). DeepSpeed 0.19.8 partition_parameters.py all_gather_coalesced
    l. 1571-1575 gathers over the hpZ group when ds_secondary_tensor is set; stage3.py _post_step
    -> invalidate_secondary_tensor (l. 755-759) drops it for trainable parameters after every step,
    and _partition_param_sec rebuilds it at the first release (a local copy). So per step the
    trainable 4096 x 4096 weight crosses the 16-rank group once (first forward), and the other 3
    forwards plus all 4 backwards run within the node; the frozen 4096 x 4096 weight keeps its
    secondary tensor, so all its 4 forwards and 4 backwards are intra-node.
    Every n_i here is divisible by 2W = 32: p_i x W = n_i, no padding."""
    n = 4096 * 4096
    W, h, ga, D = 16, 8, 4, 2
    plan = _hpz_plan(W, 8, [((4096, 4096), True), ((4096, 4096), False)], ga=ga,
                     zero_hpz_partition_size=h, stage3_max_reuse_distance=0)
    q = _rank0(plan)
    assert q["param_allgather_fwd"].bytes == 15 * n * D // 16            # trainable, once per step
    assert q["param_allgather_fwd"].intra_node is None                    # the whole ZeRO group: 2 nodes
    assert q["param_allgather_fwd_hpz"].bytes == 7 * (3 * n + 4 * n) * D // 8
    assert q["param_allgather_bwd_hpz"].bytes == 4 * 7 * (2 * n) * D // 8
    assert q["param_allgather_fwd_hpz"].intra_node is True and q["param_allgather_bwd_hpz"].intra_node is True
    assert "param_allgather_bwd" not in q
    # against plain ZeRO-3: 4 x (fwd + bwd) x 15/16 x 2n x D over the whole group
    plain = _rank0(_hpz_plan(W, 8, [((4096, 4096), True), ((4096, 4096), False)], ga=ga,
                             stage3_max_reuse_distance=0))
    assert plain["param_allgather_fwd"].bytes == 4 * 15 * 2 * n * D // 16
    assert plain["param_allgather_bwd"].bytes == plain["param_allgather_fwd"].bytes
    # the gradient reduce-scatter is not changed by hpZ (stage3.py __avg_scatter_grads, whole group)
    assert q["grad_reduce_scatter"].bytes == plain["grad_reduce_scatter"].bytes


def test_hpz_with_qwz_gathers_int8_and_h_not_dividing_the_node_is_inter_node():
    """qwZ + hpZ: the secondary partition is gathered as int8 too (partition_parameters.py
    l. 1490-1500, ds_secondary_tensor quantized); h = 3 does not divide 8 ranks per node, so the
    hpZ groups straddle nodes (G003 warns): the rows are marked inter-node."""
    n = 4096 * 4096
    q = _rank0(_hpz_plan(24, 8, [((4096, 4096), True)], ga=2, zero_hpz_partition_size=3,
                         zero_quantized_weights=True, stage3_max_reuse_distance=0))
    p_w = -(-n // 24)  # A_W(n)/W: 16,777,216 / 24 is not whole, so the partition rounds up
    assert q["param_allgather_fwd"].bytes == int(23 / 24 * p_w * 24 * 1)
    assert q["param_allgather_fwd_hpz"].bytes == int(2 / 3 * 1 * p_w * 24 * 1)
    assert q["param_allgather_bwd_hpz"].bytes == int(2 * 2 / 3 * p_w * 24 * 1)
    assert q["param_allgather_bwd_hpz"].intra_node is False


def test_qwz_scales_travel_beside_the_int8_weights_by_hand():
    """qwZ all-gathers each fetch's fp32 scales (partition_parameters.py _all_gather_coalesced
    l. 1480-1533: quant_scale_buffer of groups x W floats), groups from CUDAQuantizer.quantize
    over the concatenated partitions of the fetch (l. 867-891), one module per fetch here.
    W = 16: t0 (4096 x 4096, its own module) has p = 2^20 -> ceil(2^20/8000) = 132, first g with
    2^20 % 8g == 0 is 256; t1 (4096) has p = 256 -> 1 group: G = 257, each rank sends 15 x 257 x 4."""
    q = _rank0(_zpp_plan(16, 8, zero_quantized_weights=True))
    assert q["qwz_scales_fwd"].bytes == 15 * 257 * 4
    assert "qwz_scales_bwd" not in q  # default reuse distance: no backward all-gather
    # one module "m" (weight + bias): S = 2^20 + 256 = 256 x 4097 = 2^8 x 17 x 241; from 132 the
    # first g with S % 8g == 0 is 136 (7,712 per group, not > 8,000: no doubling)
    inv = Inventory("t", [TensorSpec("m.weight", (4096, 4096)), TensorSpec("m.bias", (4096,))])
    raw = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "gradient_accumulation_steps": 2,
           "zero_optimization": {"stage": 3, "zero_quantized_weights": True, "stage3_max_reuse_distance": 0}}
    m = _rank0(Plan(effective_config(raw), inv, Cluster(world_size=16, gpus_per_node=8)))
    assert m["qwz_scales_fwd"].bytes == 2 * 15 * 136 * 4 and m["qwz_scales_bwd"].bytes == 2 * 15 * 136 * 4
    plain = _rank0(_zpp_plan(16, 8))
    assert not any(k.startswith("qwz_") for k in plain)


def test_qwz_scales_with_hpz_by_hand():
    """qwZ + hpZ h = 8, W = 16, GA = 2, re-gathered in backward: the first forward gathers the
    primary partitions' scales over 16 ranks (G = 257 as above); the rest quantize the secondary
    partitions of 2^21 (ceil(2^21/8000) = 263 -> 512 groups) and 512 elements (1 group), G_h = 513,
    over the 8-rank hpZ group: 7 x 513 x 4 for the second forward, 2 x 7 x 513 x 4 for backward."""
    inv = _inv([((4096, 4096), True), ((4096,), True)])
    raw_ga = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "gradient_accumulation_steps": 2,
              "zero_optimization": {"stage": 3, "zero_quantized_weights": True, "zero_hpz_partition_size": 8,
                                    "stage3_max_reuse_distance": 0}}
    q = _rank0(Plan(effective_config(raw_ga), inv, Cluster(world_size=16, gpus_per_node=8)))
    assert q["qwz_scales_fwd"].bytes == 15 * 257 * 4 and q["qwz_scales_fwd"].intra_node is None
    assert q["qwz_scales_fwd_hpz"].bytes == 7 * 513 * 4 and q["qwz_scales_fwd_hpz"].intra_node is True
    assert q["qwz_scales_bwd_hpz"].bytes == 2 * 7 * 513 * 4
