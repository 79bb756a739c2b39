"""One DeepSpeed fact, one place: the ledger, the movements, the checkpoint files and the rules
agree, each figure computed by hand from DeepSpeed's source (and measured by the parity cells
*-adagrad and big-z3-bf16-op_nvme-frozen in tests/engine/parity.py)."""

from __future__ import annotations

from advisor.config.effective import effective_config
from advisor.config.loading import LoadedConfig
from advisor.ledger.checkpoint import checkpoint_files
from advisor.ledger.movement import NVME, movement_for
from advisor.ledger.state import compute_ledger, optimizer_states
from advisor.model.inventory import Inventory, TensorSpec
from advisor.plan import Cluster, Plan
from advisor.views.lint import lint_config

ADAGRAD = {"type": "Adagrad", "params": {"lr": 1e-2}}


def big(frozen_first: bool = False) -> Inventory:
    """MLP 1024 -> 1031 -> 1029 (2,118,703 parameters)."""
    tr = not frozen_first
    return Inventory("mlp", [TensorSpec("0.weight", (1031, 1024), trainable=tr), TensorSpec("0.bias", (1031,), trainable=tr),
                             TensorSpec("1.weight", (1029, 1031)), TensorSpec("1.bias", (1029,))])


def _nvme_adagrad(buffer_count=None):
    oo = {"device": "nvme", "nvme_path": "/nvme", **({"buffer_count": buffer_count} if buffer_count else {})}
    return {"bf16": {"enabled": True}, "optimizer": ADAGRAD, "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {"stage": 3, "offload_optimizer": oo}}


def test_adagrad_has_one_state_tensor_everywhere():
    # torch/optim/adagrad.py: state 'sum' only; ops/adagrad/cpu_adagrad.py: 'exp_avg_sq' only
    assert optimizer_states(effective_config({"optimizer": ADAGRAD})).items == ("sum",)
    cfg = _nvme_adagrad()
    ec = effective_config(cfg)
    assert optimizer_states(ec).items == ("exp_avg_sq",)
    plan = Plan(ec, big(), Cluster(world_size=1))
    led = compute_ledger(plan).rank(0)
    # S = 2,118,703 (one sub-group, W = 1) -> A_256(S) = 2,118,912 elements x 4 B on NVMe, once
    assert {e.item for e in led.entries if e.cls == "optimizer_states" and e.bytes and e.life == "persistent"} \
        == {"exp_avg_sq"}
    # the first step's host copy (DeepSpeedCPUAdagrad creates its state as a host tensor, then swaps
    # it out) is one state too: S x 4 B, not Adam's 8 B
    assert [e.bytes for e in led.entries if e.item == "first_step_moments"] == [2_118_703 * 4]
    assert sum(e.bytes for e in led.entries if e.item == "exp_avg_sq" and e.tier == "nvme") == 2_118_912 * 4
    moves = [m for m in movement_for(plan) if m.link == NVME and m.cls == "optimizer_states"]
    assert sorted((m.item, m.direction, m.bytes) for m in moves) == [("exp_avg_sq", "read", 2_118_912 * 4),
                                                                  ("exp_avg_sq", "write", 2_118_912 * 4)]
    names = {f.name for f in checkpoint_files(plan, tag="t").files if f.kind == "offloaded_tensors"}
    assert names == {"0_3.tensor.swp", "exp_avg_sq-0_3.tensor.swp"}
    # O006: master + 1 state + gradients = 3 buffers; 2 is too few, 3 enough
    loaded = LoadedConfig("c.json", _nvme_adagrad(2))
    assert [f.code for f in lint_config(loaded, select={"O006"})] == ["O006"]
    assert lint_config(LoadedConfig("c.json", _nvme_adagrad(3)), select={"O006"}) == []


def test_frozen_params_under_offload_param_nvme_are_swap_files():
    cfg = {"bf16": {"enabled": True}, "optimizer": {"type": "AdamW"}, "train_micro_batch_size_per_gpu": 1,
           "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/nvme"}}}
    plan = Plan(effective_config(cfg), big(frozen_first=True), Cluster(world_size=1))
    led = compute_ledger(plan).rank(0)
    frozen = {e.tier: e.bytes for e in led.entries if e.item == "frozen_params" and e.bytes}
    # 0.weight: 1,055,744 x 2 B >= 1 MiB -> a swap file of A_512(1,055,744) x 2 = 2,111,488 B;
    # 0.bias: 1,031 x 2 = 2,062 B < 1 MiB -> pinned host; the 2 B invalid_buffer they point to
    assert frozen == {"nvme": 2_111_488, "host_pinned": 2_062, "host_pageable": 2}
    reads = [m for m in movement_for(plan) if m.link == NVME and m.item == "frozen_params"]
    # read once per step (the whole model stays gathered from forward to backward), never written
    assert [(m.direction, m.bytes) for m in reads] == [("read", frozen["nvme"])]
