"""Partial optimizer offload at ZeRO-3 (Twin-Flow, ``offload_optimizer: {device: cpu, ratio: r}``): what a
checkpoint holds and what crosses PCIe per step, computed here by hand from DeepSpeed 0.19.8's code.

Sub-groups (tests/test_twin_flow_offload.py derives them): TINY (tests/engine/parity.py) at W = 2 has the
partitions p = 9,632, 151, 11,589, 39, 193, 3 (sum P3 = 21,607); sub_group_size 5,000 gives
S = [9,632, 11,740, 235] and ratio 0.5 keeps int(0.5 x 3) = 1 on the accelerator (``stage3.py`` l.1100-1108);
sub_group_size 200 gives S = [9,632, 11,740, 232, 3] and ratio 0.25 keeps int(0.75 x 4) = 3.

Checkpoint (a GPU run's file; on DeepSpeed's CPU accelerator DeepSpeedCPUAdam steps every sub-group, so a
CPU run's file holds every moment and no engine run here proves this figure): ``_rigid_state_dict``
(l.3442-3444) saves ``self.optimizer.state_dict()`` -- DeepSpeedCPUAdam's, whose state (torch
Optimizer.state_dict packs ``self.state``) holds exp_avg and exp_avg_sq of the sub-groups it stepped, the
host ones (_optimizer_step l.1249-1258) -- and FP32_FLAT_GROUPS, every sub-group's fp32 partition.
DeepSpeedCPUAdam's 'step' is a python int (ops/adam/cpu_adam.py l.155): 0 tensor bytes.

PCIe: the pinned gradient buffer is on the host for every parameter (l.333 self.device = cpu, l.790-792),
so its per-micro-step copies are unchanged; the boundary fp32 gradient copy (l.1456-1457) and the updated
16-bit copy (l.2858-2859) go to ``fp32_partitioned_groups_flat[i]`` / come from it, on
``subgroup_to_device[i]``: across PCIe for host sub-groups only. With ``offload_param`` the 16-bit
partitions are on the host, so the accelerator sub-groups' fp32 masters cross instead, 4 B per element
(a blocking device-to-host copy casts on the CPU: aten Copy.cu copy_kernel_cuda).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine"))
import parity  # noqa: E402

from advisor.config.effective import effective_config  # noqa: E402
from advisor.ledger.checkpoint import checkpoint_files  # noqa: E402
from advisor.ledger.movement import rank_movements  # noqa: E402
from advisor.ledger.state import Cluster, Plan, twin_flow_backup_stepped  # noqa: E402
from advisor.model.inventory import from_dict  # noqa: E402

P3 = 21607


def _cfg(ratio, sgs, dtype="bf16", device="cpu", offload_param=False):
    z = {"stage": 3, "reduce_bucket_size": 50000, "sub_group_size": sgs,
         "offload_optimizer": {"device": device, "ratio": ratio}}
    if offload_param:
        z["offload_param"] = {"device": "cpu"}
    c = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
         "zero_optimization": z}
    if dtype != "fp32":
        c[dtype] = {"enabled": True}
    return c


def _plan(cfg, W=2):
    return Plan(effective_config(cfg), from_dict(parity.TINY, "tiny"), Cluster(world_size=W))


def _optim_file(cfg, r=0):
    res = checkpoint_files(_plan(cfg))
    return next(f for f in res.files if f.kind == "optim_states" and f.rank == r), res


def test_backup_stepped_count_is_deepspeeds_int():
    assert twin_flow_backup_stepped(effective_config(_cfg(0.5, 5000)), 3) == 1
    assert twin_flow_backup_stepped(effective_config(_cfg(0.25, 200)), 4) == 3
    assert twin_flow_backup_stepped(effective_config(_cfg(0.7, 5000)), 3) == 0   # int(0.9000000000000001)
    assert twin_flow_backup_stepped(effective_config(_cfg(1.0, 5000)), 3) == 0
    # nvme: l.1100 maps every offloaded sub-group too, and l.1250 picks the optimizer by that map alone
    assert twin_flow_backup_stepped(effective_config(_cfg(0.5, 5000, device="nvme")), 4) == 2
    c = _cfg(0.5, 5000)
    del c["zero_optimization"]["offload_optimizer"]
    assert twin_flow_backup_stepped(effective_config(c), 3) == 0


def test_optimizer_file_holds_host_moments_only():
    f, res = _optim_file(_cfg(0.5, 5000))
    assert f.name == "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"
    assert f.parts == {"fp32_flat_groups": P3 * 4, "optimizer_state": 2 * (11740 + 235) * 4, "step": 0}
    assert f.bytes == 86428 + 95800
    assert any("first 1 of 3 sub-groups" in n and "CPU run's file holds all the moments" in n for n in res.notes)
    full, res1 = _optim_file(_cfg(1.0, 5000))
    assert full.parts == {"fp32_flat_groups": P3 * 4, "optimizer_state": 2 * P3 * 4, "step": 0}
    assert not any("partial optimizer offload" in n for n in res1.notes)
    # fp32, ratio 0.25 over [9,632, 11,740, 232, 3]: only the last sub-group's moments, 2 x 3 x 4 B
    f4, _ = _optim_file(_cfg(0.25, 200, dtype="fp32"))
    assert f4.name == "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    assert f4.parts == {"fp32_flat_groups": P3 * 4, "optimizer_state": 24, "step": 0}
    # both ranks' files alike (ZeRO-3 partitions are the same size on every rank)
    assert _optim_file(_cfg(0.5, 5000), r=1)[0].bytes == f.bytes


def _pcie(cfg):
    out: dict[tuple[str, str, str], int] = {}
    for m in rank_movements(_plan(cfg), 0):
        if m.link == "pcie":
            k = (m.direction, m.item, m.phase)
            out[k] = out.get(k, 0) + m.bytes
    return out


def test_pcie_bytes_cover_host_sub_groups_only():
    full, part = _pcie(_cfg(1.0, 5000)), _pcie(_cfg(0.5, 5000))
    host = 11740 + 235
    # the pinned gradient buffer: every parameter, both ways, GA = 1, bf16 gradients (2 B)
    for d in ("to_host", "to_accelerator"):
        assert full[(d, "grad_partitions_flat_buffer", "backward")] == P3 * 2
        assert part[(d, "grad_partitions_flat_buffer", "backward")] == P3 * 2
    assert full[("to_host", "fp32_grad", "backward")] == P3 * 4
    assert part[("to_host", "fp32_grad", "backward")] == host * 4
    assert full[("to_accelerator", "lp_param_partitions", "after_step")] == P3 * 2
    assert part[("to_accelerator", "lp_param_partitions", "after_step")] == host * 2
    assert ("to_host", "lp_param_partitions", "after_step") not in part
    # fp32, ratio 0.25: the 3-element host sub-group alone crosses
    p4 = _pcie(_cfg(0.25, 200, dtype="fp32"))
    assert p4[("to_host", "fp32_grad", "backward")] == 3 * 4
    assert p4[("to_accelerator", "lp_param_partitions", "after_step")] == 3 * 4


def test_pcie_with_offloaded_parameters():
    """offload_param cpu: the 16-bit partitions live on the host, so nothing goes up after the step; under
    partial offload the accelerator sub-group's updated fp32 master (9,632 elements) goes down, 4 B each."""
    full = _pcie(_cfg(1.0, 5000, offload_param=True))
    part = _pcie(_cfg(0.5, 5000, offload_param=True))
    assert ("to_accelerator", "lp_param_partitions", "after_step") not in full
    assert ("to_host", "lp_param_partitions", "after_step") not in full
    assert ("to_accelerator", "lp_param_partitions", "after_step") not in part
    assert part[("to_host", "lp_param_partitions", "after_step")] == 9632 * 4
    assert part[("to_host", "fp32_grad", "backward")] == (11740 + 235) * 4
