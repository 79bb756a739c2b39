"""An HF Trainer config with no optimizer block: the Trainer's own torch AdamW, not DeepSpeed's FusedAdam.

Sources (transformers 5.25.0, accelerate 1.16.0, DeepSpeed 0.19.8, torch 2.13 as installed):

* ``transformers/integrations/deepspeed.py`` deepspeed_optim_sched l.577-590: no "optimizer" in the config ->
  ``trainer.create_optimizer()``, passed to deepspeed.initialize as the client optimizer;
* ``training_args.py`` l.806-811: ``optim`` defaults to "adamw_torch_fused" on torch >= 2.8 (else "adamw_torch");
  ``trainer_optimizer.py`` _get_adamw_torch l.201-208: torch.optim.AdamW, ``fused=True`` for the fused one;
* DeepSpeed ``engine.py`` _configure_optimizer l.2334-2337 keeps a client optimizer as the basic one;
  ``_configure_fp16_optimizer`` l.2559-2564: FP16_Optimizer only for FusedAdam, else FP16_UnfusedOptimizer;
* ``torch/optim/adam.py`` _init_group l.163-175: with ``fused`` the 0-dim ``step`` is on the parameter's device
  (4 B each, fp32); exp_avg / exp_avg_sq zeros_like the fp32 tensor (N x 4 each); the fused step is one kernel,
  no temporaries; _multi_tensor_adam (foreach, "adamw_torch") l.790: one _foreach_sqrt list, N_call x 4;
* accelerate ``accelerator.py`` l.2336-2345: with offload_optimizer and zero_force_ds_cpu_optimizer (default true)
  the Trainer's optimizer becomes DeepSpeedCPUAdam (``utils/deepspeed.py`` map_pytorch_optim_to_deepspeed).

TINY proxy (tests/engine/parity.py): 6 tensors, N = 43,209 elements, one param group in the inventory; under
``--hf`` without an optimizer block the plan holds the Trainer's two (tests/test_trainer_groups.py): the three weights
(N_DECAY = 42,826) and the three biases.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine"))
import parity  # noqa: E402

from advisor.config.hf import TrainerArgs, trainer_optimizer
from advisor.config.loading import LoadedConfig
from advisor.ledger.state import Cluster, compute_ledger
from advisor.model.inventory import from_dict
from advisor.planning import build_plan

TINY = from_dict(parity.TINY, "tiny")
N, NT = 43_209, 6
N_DECAY = 301 * 64 + 77 * 301 + 5 * 77


def _cfg(stage, **zero):
    return {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "fp16": {"enabled": "auto"}, "zero_optimization": {"stage": stage, **zero}}


def _ledger(cfg, hf=True, targs=None, W=2):
    plan = build_plan(LoadedConfig("t.json", cfg), TINY, Cluster(world_size=W), hf=hf,
                      trainer_args=({"fp16": True, **(targs or {})}) if hf else None)
    return compute_ledger(plan)


def _by_item(led, r=0):
    out = {}
    for e in led.rank(r).entries:
        out.setdefault(e.item, []).append(e)
    return out


def test_trainer_default_matches_transformers_own_choice():
    # transformers' own code (torch 2.13 installed, >= 2.8): the fused AdamW
    from transformers import Trainer, TrainingArguments
    args = TrainingArguments(output_dir=os.devnull, report_to=[])
    cls, kw = Trainer.get_optimizer_cls_and_kwargs(args)
    assert str(args.optim.value if hasattr(args.optim, "value") else args.optim) == TrainerArgs().optim
    name, params, words = trainer_optimizer({}, {})
    assert name == cls.__name__ == "AdamW"
    assert params["fused"] is kw["fused"] is True
    assert (params["lr"], tuple(params["betas"]), params["eps"]) == (kw["lr"], tuple(kw["betas"]), kw["eps"])
    assert "optimizer block" in words
    cls2, kw2 = Trainer.get_optimizer_cls_and_kwargs(TrainingArguments(output_dir=os.devnull, report_to=[],
                                                                        optim="adamw_torch"))
    name2, params2, _ = trainer_optimizer({}, {"optim": "adamw_torch"})
    assert name2 == cls2.__name__ and "fused" not in kw2 and "fused" not in params2
    # an optimizer block: the Trainer passes a DummyOptim, DeepSpeed builds the block's optimizer
    assert trainer_optimizer({"optimizer": {"type": "AdamW"}}, {})[0] is None


def test_stage0_fp16_unfused_wrapper_fused_step_on_device():
    led = _ledger(_cfg(0))
    assert (led.wrapper, led.basic_optimizer) == ("FP16_UnfusedOptimizer", "AdamW")
    items = _by_item(led)
    # fused AdamW: no step temporaries (one kernel), its 0-dim fp32 steps on the accelerator (4 B x 6 tensors)
    assert not any(k.startswith("torch_step") for k in items)
    (step,) = items["step"]
    assert (step.tier, step.bytes) == ("accelerator", 4 * NT)
    assert [e.bytes for e in items["exp_avg"]] == [N * 4] and [e.bytes for e in items["exp_avg_sq"]] == [N * 4]
    from advisor.ledger.timeline import init_transients_excluded, resolve_load
    # its warm-up step is modelled (timeline.unfused_optimizer_init_transients): the two zeroed gradients, no
    # temporaries for the fused step
    assert init_transients_excluded(led.plan.config, led, resolve_load(led.plan.config)) is None
    from advisor.ledger.timeline import init_entries
    warm = {e.item: e.bytes for e in init_entries(led.plan.config, led, resolve_load(led.plan.config), 0)
            if e.item.startswith("init_warmup")}
    assert warm == {"init_warmup_lp_grads": N * 2, "init_warmup_fp32_grads": N * 4}
    # the estimate's optimizer line says the assumption and how to change it
    from advisor.views.estimate import estimate
    a = estimate(led.plan).to_dict()["assumptions"]["optimizer"]
    assert (a["basic"], a["wrapper"]) == ("AdamW", "FP16_UnfusedOptimizer")
    assert "HF Trainer builds torch.optim.AdamW(fused=True)" in a["type"] and "optimizer block" in a["type"]


def test_adamw_torch_takes_foreach_and_zero2_hands_it_the_partition():
    # "adamw_torch": no fused flag -> torch 2.13's foreach on a GPU, one _foreach_sqrt list per param group: the
    # Trainer's decay group is TINY's three weights (the biases are no-decay, trainer.py l.1431), N_decay =
    # 301 x 64 + 77 x 301 + 5 x 77 = 42,826 -> N_decay x 4 at stage 0
    led = _ledger(_cfg(0), targs={"optim": "adamw_torch"})
    (e,) = _by_item(led)["torch_step_foreach"]
    assert e.bytes == N_DECAY * 4
    assert _by_item(led)["step"][0].tier == "host_pageable"  # neither fused nor capturable: a CPU step
    # ZeRO-2, W 2: the decay group's P = 42,828 / 2 = 21,414 (N_decay rounded up to the 2W alignment), the flat fp32
    # partition per call, the larger of the two groups' calls (the no-decay group's: 384 / 2 = 192)
    led = _ledger(_cfg(2, reduce_bucket_size=50000), targs={"optim": "adamw_torch"})
    assert (led.wrapper, led.basic_optimizer) == ("DeepSpeedZeroOptimizer", "AdamW")
    assert _by_item(led)["torch_step_foreach"][0].bytes == 21_414 * 4


def test_offload_becomes_cpu_adam_and_without_hf_nothing_changes():
    led = _ledger(_cfg(2, offload_optimizer={"device": "cpu"}))
    assert led.basic_optimizer == "DeepSpeedCPUAdam"
    # without --hf: a client optimizer, Adam assumed -> FusedAdam (DeepSpeed builds none without one:
    # engine.py l.653-689, so the script is taken to pass it)
    cfg = {"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True}, "zero_optimization": {"stage": 0}}
    led = _ledger(cfg, hf=False)
    assert (led.wrapper, led.basic_optimizer) == ("FP16_Optimizer", "FusedAdam")
    assert _by_item(led)["step"][0].tier == "host_pageable"
