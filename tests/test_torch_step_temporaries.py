"""torch's optimizer step temporaries (state.torch_step_temporaries), each figure worked out by hand from torch 2.13's
source on the TINY proxy (l1.weight 19,264, l1.bias 301, l2.weight 23,177, l2.bias 77, l3.weight 385, l3.bias 5;
N = 43,209 elements):

* _single_tensor_adam (torch/optim/adam.py l.544): max_i (n_(i-1) + 2 n_i) -> l2.weight after l1.bias:
  (301 + 2 x 23,177) x 4 = 186,620 B (the engine's step:1 over the ledger without it, cell z0_bf16_torchadam_w2);
  with Adam's coupled weight decay the grad copy (l.428): (301 + 3 x 23,177) x 4 = 279,328 B;
* _multi_tensor_adam (l.790): one _foreach_sqrt list, N x 4 = 172,836 B;
* _single_tensor_adagrad (adagrad.py l.425): max_i (n_(i-1) + n_i) = 301 + 23,177 -> 93,912 B;
* _multi_tensor_adagrad (l.530, l.538): the std and numerator lists, 2 N x 4 = 345,672 B.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine"))
import parity  # noqa: E402

from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.ledger.timeline import resolve_load, role_timeline
from advisor.model.inventory import from_dict

TINY = from_dict(parity.TINY, "tiny")
N = 43_209


def _cfg(stage, opt, dtype="bf16", **zero):
    c = {"train_micro_batch_size_per_gpu": 1, "optimizer": opt,
         "zero_optimization": {"stage": stage, **zero}}
    if dtype != "fp32":
        c[dtype] = {"enabled": True}
    return c


def _ledger(cfg, inv=TINY, W=2):
    return compute_ledger(Plan(effective_config(cfg), inv, Cluster(world_size=W)))


def _items(led, r=0):
    return {e.item: e for e in led.rank(r).entries if e.item.startswith("torch_step")}


ADAMW = {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}


def test_stage0_foreach_is_the_estimate_single_tensor_is_the_cpu_run():
    from advisor.engine.measure import torch_step_cpu_figures
    led = _ledger(_cfg(0, ADAMW))
    (e,) = _items(led).values()
    assert (e.item, e.tier, e.bytes, e.life) == ("torch_step_foreach", "accelerator", N * 4, "step_update")
    assert torch_step_cpu_figures(led) == (N * 4, (301 + 2 * 23_177) * 4)
    # live at the updates only, not at prep
    tl = role_timeline(led, led.rank(0), resolve_load(led.plan.config), ga=1, rank=0)
    live = {x.key: any(it == "torch_step_foreach" for it, *_ in tl.entries[i]) for i, x in enumerate(tl.instants)}
    assert live["first_step:update"] and live["steady_step:update"]
    assert not live["first_step:prep"] and not live["steady_step:prep"] and not live["backward:1"]


def test_forced_paths_and_optimizers():
    # foreach: false -> the single-tensor loop on a GPU too: no longer GPU-only
    e = _items(_ledger(_cfg(0, {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True, "foreach": False}})))
    assert e["torch_step_temporaries"].bytes == (301 + 2 * 23_177) * 4
    # Adam with coupled weight decay: the grad copy
    adam = {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True, "adam_w_mode": False, "weight_decay": 0.1,
                                       "foreach": False}}
    assert _items(_ledger(_cfg(0, adam)))["torch_step_temporaries"].bytes == (301 + 3 * 23_177) * 4
    # fused: one kernel, nothing
    assert not _items(_ledger(_cfg(0, {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True, "fused": True}})))
    # Adagrad (torch.optim.Adagrad without offload)
    ada = {"type": "Adagrad", "params": {"lr": 1e-2}}
    assert _items(_ledger(_cfg(0, ada)))["torch_step_foreach"].bytes == 2 * N * 4
    ada1 = {"type": "Adagrad", "params": {"lr": 1e-2, "foreach": False}}
    assert _items(_ledger(_cfg(0, ada1)))["torch_step_temporaries"].bytes == (301 + 23_177) * 4
    # FusedAdam (the default AdamW): in-place kernel, no item, no excluded line about it
    led = _ledger(_cfg(0, {"type": "AdamW", "params": {"lr": 1e-3}}))
    assert not _items(led) and not any("temporaries of" in x for x in led.excluded)
    assert not any("optimizer step's temporaries" in x for x in _ledger(_cfg(0, ADAMW)).excluded)
    led = _ledger(_cfg(0, {"type": "Lamb", "params": {"lr": 1e-3}}))
    assert any("temporaries of Lamb" in x for x in led.excluded)


def test_zero2_one_partition_per_call_and_offload_on_the_host():
    # ZeRO-2 W 2: P = ceil(N / 2) rounded to the 2W alignment: 21,606 (half of 43,212)
    led = _ledger(_cfg(2, ADAMW, reduce_bucket_size=50000))
    assert _items(led)["torch_step_foreach"].bytes == 21_606 * 4
    from advisor.engine.measure import torch_step_cpu_figures
    assert torch_step_cpu_figures(led) == (21_606 * 4, 2 * 21_606 * 4)
    # CPU optimizer offload: torch steps the host partition, single-tensor on any accelerator
    led = _ledger(_cfg(2, ADAMW, offload_optimizer={"device": "cpu"}))
    e = _items(led)["torch_step_temporaries"]
    assert (e.tier, e.bytes) == ("host_pageable", 2 * 21_606 * 4)
    assert torch_step_cpu_figures(led) == (0, 0)


def test_zero2_per_group_update_holds_the_group_own():
    # two param groups stepped one at a time (timeline per-group instants): group g's update holds P_g x 4
    inv = from_dict(parity.TINY_FROZEN_GROUPS, "groups")
    from advisor.ledger.state import placement_of
    led = _ledger(_cfg(2, ADAMW, reduce_bucket_size=10000), inv)
    Ps = [lay.P for lay in placement_of(led.plan).zero12]
    assert len(Ps) == 2
    tl = role_timeline(led, led.rank(0), resolve_load(led.plan.config), ga=1, rank=0)
    got = {x.key: sum(b for it, _, _, b in tl.entries[i] if it == "torch_step_foreach")
           for i, x in enumerate(tl.instants) if x.phase == "first_step"}
    assert got["first_step:g0:update"] == Ps[0] * 4 and got["first_step:g1:update"] == Ps[1] * 4
    assert got["first_step:g0:prep"] == 0 == got["first_step:g1:prep"]


def test_pipeline_stage_figures_are_the_stage_partition():
    # ZeRO-1 under 2 pipeline stages, data-parallel 1: each stage's optimizer steps its own flat fp32 partition
    # (pipe/module.py builds the stage only); the plan's stage split (timeline._rank_shard) puts l1.weight, l1.bias,
    # l2.weight on stage 0 (19,264 + 301 + 23,177 = 42,742 elements) and l2.bias, l3 on stage 1 (77 + 385 + 5 = 467,
    # padded to 468 = A_2W at W 1) -- the foreach figure x 4 B, the CPU's single-tensor 2 x that
    from advisor.engine.measure import torch_step_cpu_figures
    c = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
         "bf16": {"enabled": True}, "optimizer": ADAMW, "zero_optimization": {"stage": 1}}
    led = compute_ledger(Plan(effective_config(c), TINY, Cluster(world_size=2, pipeline_parallel=2)))
    got = [(_items(led, r)["torch_step_foreach"].bytes, torch_step_cpu_figures(led, r)) for r in range(2)]
    assert got == [(42_742 * 4, (42_742 * 4, 2 * 42_742 * 4)), (468 * 4, (468 * 4, 2 * 468 * 4))]


def test_zero_rebuilt_adagrad_state_from_initialize_and_the_first_kept():
    # ZeRO-1/2 (stage_1_and_2.py l.943-946) and ZeRO-3 (stage3.py l.1357-1358) rebuild torch's Adagrad over the fp32
    # partitions, whose 'sum' Adagrad makes at construction: live at initialize already (engine probes
    # z1/z2/z3_bf16_adagrad_w2: initialize 432,142 / ... B within 0.01%); the first Adagrad, over the 16-bit
    # parameters, is kept by the engine (engine.py l.2353): N x 2 + 6 x 4 = 86,442 B at every instant after it
    ada = {"type": "Adagrad", "params": {"lr": 1e-2}}
    for stage, zero in ((1, {"reduce_bucket_size": 50000}), (2, {"reduce_bucket_size": 50000}),
                        (3, {"reduce_bucket_size": 50000})):
        led = _ledger(_cfg(stage, ada, **zero))
        ents = {e.item: e for e in led.rank(0).entries}
        assert ents["adagrad_lp_state"].bytes == N * 2 and ents["adagrad_lp_step"].bytes == 6 * 4
        tl = role_timeline(led, led.rank(0), resolve_load(led.plan.config), ga=1, rank=0)
        at_init = {it: b for it, _, _, b in tl.entries[[x.key for x in tl.instants].index("initialize")]}
        P = 21_606 if stage in (1, 2) else 21_607  # ZeRO-3: sum ceil(n_i / 2) over TINY's tensors
        assert at_init["sum"] == P * 4 and at_init["adagrad_lp_state"] == N * 2
    # stage 0 keeps no second optimizer (FP16_UnfusedOptimizer steps the same one): no such item
    assert "adagrad_lp_state" not in {e.item for e in _ledger(_cfg(0, ada)).rank(0).entries}
