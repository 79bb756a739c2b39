"""Stage 0's FP16_UnfusedOptimizer warm-up step inside deepspeed.initialize (timeline.unfused_optimizer_init_transients),
each figure worked out by hand from DeepSpeed 0.19.8's ``runtime/fp16/unfused_optimizer.py``
initialize_optimizer_states (l.412-433: a zeroed 16-bit gradient per trainable parameter, l.415, a zeroed fp32 gradient
per fp32 copy, l.421, then ``self.optimizer.step()``, l.425, all gradients dropped only after it) and torch 2.13's step
temporaries on the TINY proxy (l1.weight 19,264, l1.bias 301, l2.weight 23,177, l2.bias 77, l3.weight 385, l3.bias 5;
N = 43,209 elements):

* bf16, torch AdamW: 16-bit zeros N x 2 = 86,418 B, fp32 zeros N x 4 = 172,836 B; the GPU's foreach step one
  _foreach_sqrt list (torch/optim/adam.py l.790) N x 4 = 172,836 B, the CPU's single-tensor loop (l.544) max_i
  (n_(i-1) + 2 n_i) x 4 = (301 + 2 x 23,177) x 4 = 186,620 B: the engine's initialize high-water mark on cell
  z0_bf16_torchadam_w2 was its end + 86,418 + 172,836 + 186,620 B;
* TINY with l2 frozen and l3 in param group 1, fp16: N_t = 19,264 + 301 + 385 + 5 = 19,955 trainable elements (a
  frozen parameter gets no warm-up gradient: is_optimized_parameter, l.73): 39,910 B + 79,820 B; foreach, one
  adam() call per param group, max(19,565, 390) x 4 = 78,260 B;
* torch Adagrad, bf16: foreach std + numerator lists 2 N x 4 = 345,672 B (adagrad.py l.530, l.538).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine"))
import parity  # noqa: E402

from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.ledger.timeline import init_entries, init_transients_excluded, resolve_load, role_timeline
from advisor.model.inventory import from_dict

TINY = from_dict(parity.TINY, "tiny")
FROZEN_GROUPS = from_dict(parity.TINY_FROZEN_GROUPS, "tiny-frozen-groups")
N = 43_209
ADAMW = {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}
TIERS = ("accelerator", "host_pinned", "host_pageable")
WARMUP = ("init_warmup_lp_grads", "init_warmup_fp32_grads", "init_warmup_step_foreach", "init_warmup_step_temporaries")


def _cfg(opt, dtype="bf16", stage=0):
    return {"train_micro_batch_size_per_gpu": 1, "optimizer": opt, dtype: {"enabled": True},
            "zero_optimization": {"stage": stage}}


def _ledger(cfg, inv=TINY, W=2, **cluster):
    return compute_ledger(Plan(effective_config(cfg), inv, Cluster(world_size=W, **cluster)))


def _warmup(led, r=0):
    ec = led.plan.config
    return {e.item: e for e in init_entries(ec, led, resolve_load(ec, zero_init=False), r) if e.item in WARMUP}


def _series(led, r=0):
    tl = role_timeline(led, led.rank(r), resolve_load(led.plan.config, zero_init=False), ga=1, rank=r)
    return dict(zip((x.key for x in tl.instants), tl.series(TIERS)))


def test_bf16_torch_adamw_warmup_bytes_from_the_source():
    led = _ledger(_cfg(ADAMW))
    for r in (0, 1):  # stage 0: every rank holds the whole model
        got = {k: (e.tier, e.bytes, e.life) for k, e in _warmup(led, r).items()}
        assert got == {"init_warmup_lp_grads": ("accelerator", N * 2, "init_optimizer_states"),
                       "init_warmup_fp32_grads": ("accelerator", N * 4, "init_optimizer_states"),
                       "init_warmup_step_foreach": ("accelerator", N * 4, "init_optimizer_states")}
        s = _series(led, r)
        # the warm-up's instant is initialize's high-water mark: its end plus the three, nothing else
        assert s["initialize:optimizer_states"] == s["initialize"] + N * 2 + N * 4 + N * 4
        assert max(v for k, v in s.items() if k.startswith("initialize")) == s["initialize:optimizer_states"]
    assert init_transients_excluded(led.plan.config, led, resolve_load(led.plan.config, zero_init=False)) is None


def test_cpu_run_compares_the_single_tensor_warmup_step():
    from advisor.engine.measure import torch_step_cpu_figures
    from advisor.ledger.state import TORCH_STEP_GPU_ONLY
    led = _ledger(_cfg(ADAMW))
    e = _warmup(led)["init_warmup_step_foreach"]
    assert e.item in TORCH_STEP_GPU_ONLY
    gpu, cpu = torch_step_cpu_figures(led)
    # measure.peak_parity swaps the GPU figure for the CPU one in proportion: the warm-up's is the whole step's
    assert e.bytes * cpu // gpu == (301 + 2 * 23_177) * 4
    s = _series(led)
    assert s["initialize:optimizer_states"] - e.bytes + e.bytes * cpu // gpu == s["initialize"] + 86_418 + 172_836 + 186_620


def test_frozen_parameters_get_no_warmup_gradient_and_groups_step_apart():
    led = _ledger(_cfg(ADAMW, "fp16"), FROZEN_GROUPS, W=1)
    nt = 19_264 + 301 + 385 + 5
    got = {k: e.bytes for k, e in _warmup(led).items()}
    assert got == {"init_warmup_lp_grads": nt * 2, "init_warmup_fp32_grads": nt * 4,
                   "init_warmup_step_foreach": (19_264 + 301) * 4}
    # torch's Adam.step makes each group's state just before that group's adam() call (torch/optim/adam.py l.229-248):
    # at group 0's call, the worst, group 1's exp_avg / exp_avg_sq (385 + 5 elements x 4 B each) and its two 0-dim
    # step tensors (4 B each) do not exist yet
    s = _series(led)
    later = (385 + 5) * 4 * 2 + 2 * 4
    assert s["initialize:optimizer_states"] == s["initialize"] + nt * 2 + nt * 4 + (19_264 + 301) * 4 - later


def test_frozen_groups_cpu_run_figure():
    # what the engine's CPU run makes (cell z0_fp16_torchadam_groups_tbsga2_w1): group 0's single-tensor AdamW step,
    # max_i (n_(i-1) + 2 n_i) over (19,264, 301) = 2 x 19,264, in place of the foreach figure
    from advisor.engine.measure import torch_step_cpu_figures
    led = _ledger({**_cfg(ADAMW, "fp16"), "train_batch_size": 2}, FROZEN_GROUPS, W=1)
    gpu, cpu = torch_step_cpu_figures(led)
    e = _warmup(led)["init_warmup_step_foreach"]
    s = _series(led)
    nt = 19_264 + 301 + 385 + 5
    assert s["initialize:optimizer_states"] - e.bytes + e.bytes * cpu // gpu == (
        s["initialize"] + nt * 2 + nt * 4 + 2 * 19_264 * 4 - ((385 + 5) * 8 + 2 * 4))


def test_adagrad_warmup_step_temporaries():
    led = _ledger(_cfg({"type": "Adagrad", "params": {"lr": 1e-3}}))
    assert led.wrapper == "FP16_UnfusedOptimizer"
    got = {k: e.bytes for k, e in _warmup(led).items()}
    assert got == {"init_warmup_lp_grads": N * 2, "init_warmup_fp32_grads": N * 4,
                   "init_warmup_step_foreach": 2 * N * 4}


def test_single_tensor_path_given_is_what_a_cpu_makes_too():
    led = _ledger(_cfg({"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True, "foreach": False}}))
    got = {k: e.bytes for k, e in _warmup(led).items()}
    assert got["init_warmup_step_temporaries"] == (301 + 2 * 23_177) * 4
    assert "init_warmup_step_foreach" not in got


def test_fused_step_makes_no_temporaries_the_zero_gradients_remain():
    led = _ledger(_cfg({"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True, "fused": True}}))
    got = {k: e.bytes for k, e in _warmup(led).items()}
    assert got == {"init_warmup_lp_grads": N * 2, "init_warmup_fp32_grads": N * 4}


def test_other_wrappers_have_no_warmup_step():
    # FusedAdam at stage 0 16-bit is FP16_Optimizer (its own warm-up: one fp32 flat zero gradient); ZeRO-1 / fp32
    # take other wrappers
    for cfg in (_cfg({"type": "AdamW", "params": {"lr": 1e-3}}), _cfg(ADAMW, stage=1),
                {"train_micro_batch_size_per_gpu": 1, "optimizer": ADAMW, "zero_optimization": {"stage": 0}}):
        assert not _warmup(_ledger(cfg)), cfg


def test_tensor_parallel_is_listed_as_excluded():
    led = _ledger(_cfg(ADAMW), W=2, tensor_parallel=2)
    load = resolve_load(led.plan.config, zero_init=False)
    assert not _warmup(led)
    line = init_transients_excluded(led.plan.config, led, load)
    assert line and "FP16_UnfusedOptimizer" in line and "tensor parallelism" in line


def test_pipeline_stages_warm_up_their_own_parameters():
    # fp16 under a PipelineModule (bf16 would take BF16_Optimizer): each stage's warm-up covers its own parameters,
    # the two stages together the whole model once
    led = _ledger(_cfg(ADAMW, "fp16"), W=2, pipeline_parallel=2)
    assert led.wrapper == "FP16_UnfusedOptimizer"
    lp = [_warmup(led, r)["init_warmup_lp_grads"].bytes for r in (0, 1)]
    fp = [_warmup(led, r)["init_warmup_fp32_grads"].bytes for r in (0, 1)]
    assert all(lp) and sum(lp) == N * 2 and sum(fp) == N * 4


def test_unfused_keeps_micro_step_gradients_to_the_boundary():
    # the engine zeroes param.grad only at the accumulation boundary (engine.py _take_model_step l.3529-3530 ->
    # unfused_optimizer.py zero_grad l.110), so at GA 2 micro-step 1's 16-bit gradients of the trainable parameters
    # live into micro-step 2's forward: N_t x 2 = 39,910 B (the engine's forward:2 / forward:4 on cell
    # z0_fp16_torchadam_groups_tbsga2_w1, engine.py backward:3428)
    cfg = {**_cfg(ADAMW, "fp16"), "train_batch_size": 2}
    led = _ledger(cfg, FROZEN_GROUPS, W=1)
    got = [(e.bytes, e.life) for e in led.rank(0).entries if e.item == "lp_grads_accumulated"]
    assert got == [((19_264 + 301 + 385 + 5) * 2, "accumulated_forward")]
    assert not [e for e in _ledger(_cfg(ADAMW, "fp16"), FROZEN_GROUPS, W=1).rank(0).entries
                if e.item == "lp_grads_accumulated"]
