"""Stage 0's later micro-step backward holds one new gradient beside the kept param.grad (issue 15, cause (f)).

By hand from torch's AccumulateGrad (``torch/csrc/autograd/functions/accumulate_grad.h`` accumulateGrad: when
``variable.grad`` is defined and not stealable, ``variable_grad += new_grad``, the node's ``new_grad`` made first)
and DeepSpeed 0.19.8's wrappers, which keep param.grad through micro-step 2: FP16_Optimizer / FP16_UnfusedOptimizer
zero it only at the boundary (``runtime/engine.py`` _take_model_step l.3529-3530, ``fused_optimizer.py`` zero_grad
l.137, ``unfused_optimizer.py`` zero_grad l.110, set_to_none); BF16_Optimizer (stage 0 under pipeline parallelism)
zeroes it in place (``bf16_optimizer.py`` clear_lp_grads l.612-623, from ``pipe/engine.py`` l.838-840). The moment:
the largest trainable gradient, or an nn.Linear's weight and bias together (the bias's AccumulateGrad runs while the
weight's gradient is still whole: state.autograd_siblings), x the 16-bit gradient's bytes (2).
"""
from __future__ import annotations

from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan, compute_ledger, plan_optimizer
from advisor.ledger.timeline import resolve_load, role_timeline
from advisor.model.inventory import Inventory, TensorSpec

#: embed 150 x 20 = 3,000 elements, the largest trainable tensor; l1 an nn.Linear 64 -> 40 (2,560 + 40); a frozen
#: 4,000-element tensor autograd makes no gradient for
BIG_EMBED = Inventory(name="embed", source="test", tensors=[
    TensorSpec("frozen.weight", (200, 20), trainable=False), TensorSpec("embed.weight", (150, 20)),
    TensorSpec("l1.weight", (40, 64)), TensorSpec("l1.bias", (40,)),
    TensorSpec("l2.weight", (8, 40)), TensorSpec("l2.bias", (8,))])
#: the same with a 2,000-element embedding: the largest moment is l1's weight (2,560) with its bias (40)
SMALL_EMBED = Inventory(name="embed", source="test", tensors=[
    TensorSpec("embed.weight", (100, 20)), TensorSpec("l1.weight", (40, 64)), TensorSpec("l1.bias", (40,)),
    TensorSpec("l2.weight", (8, 40)), TensorSpec("l2.bias", (8,))])

FP16 = {"fp16": {"enabled": True}, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}}
FP16_TORCH = {"fp16": {"enabled": True}, "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}}}
BF16 = {"bf16": {"enabled": True}, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}}


def _ledger(extra: dict, inv: Inventory, ga: int, pp: int = 1):
    cfg = {**extra, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": ga,
           "train_batch_size": ga, "zero_optimization": {"stage": 0}}
    return compute_ledger(Plan(effective_config(cfg), inv, Cluster(world_size=pp, pipeline_parallel=pp)))


def _new(led, rank=0):
    return [(e.bytes, e.life) for e in led.rank(rank).entries if e.item == "accumulate_grad_new"]


def test_ga2_adds_the_largest_new_gradient_under_each_stage0_16bit_wrapper():
    for extra, pp, wrapper in ((FP16, 1, "FP16_Optimizer"), (FP16_TORCH, 1, "FP16_UnfusedOptimizer"),
                               (BF16, 2, "BF16_Optimizer")):
        for inv, want in ((BIG_EMBED, 3000 * 2), (SMALL_EMBED, (2560 + 40) * 2)):
            led = _ledger(extra, inv, 2, pp)
            assert plan_optimizer(led.plan)[0] == wrapper
            assert _new(led) == [(want, "accumulated_backward")], (wrapper, inv.tensors[0].name)
            # GA 1: the boundary's zero_grad(set_to_none) leaves no param.grad for the next backward
            assert _new(_ledger(extra, inv, 1, pp)) == [], wrapper


def _acc_at(led, ga: int, key: str) -> int:
    tl = role_timeline(led, led.rank(0), resolve_load(led.plan.config), ga=ga, rank=0)
    return tl.series(("accelerator",))[[x.key for x in tl.instants].index(key)]


def test_the_boundary_backward_holds_the_larger_of_it_and_the_flat_copy():
    # FP16_Optimizer, one rank, no activations, GA 2: backward:2 is the boundary, where the engine all-reduces
    # (engine.py allreduce_gradients l.3088-3095) after loss.backward returns: the flat copy of the one bucket,
    # N x 2 = 5,928 x 2 = 11,856 B (engine.py allreduce_bucket), is made when no new gradient is left, so the
    # instant holds GA 1's boundary backward (param.grad + the flat copy), the moment (6,000 B) being smaller
    ga1, ga2 = _ledger(FP16, BIG_EMBED, 1), _ledger(FP16, BIG_EMBED, 2)
    assert _acc_at(ga2, 2, "backward:2") == _acc_at(ga1, 1, "backward:1")
    assert _acc_at(ga2, 2, "steady:backward") == _acc_at(ga1, 1, "steady:backward")
    # a model of one tensor: its one-tensor bucket is flattened as a view (no copy), so the boundary holds it
    one = Inventory(name="one", source="test", tensors=[TensorSpec("w", (5000,))])
    assert _acc_at(_ledger(FP16, one, 2), 2, "backward:2") - _acc_at(_ledger(FP16, one, 1), 1, "backward:1") \
        == 5000 * 2


def test_pipeline_stage0_backward_of_microbatch_2_holds_it():
    # BF16_Optimizer, 2 stages, GA 2: the all-reduce is in ReduceGrads, so micro-batch 2's backward holds the
    # moment in full over micro-batch 1's (stage 0: embed.weight is the largest, 3,000 x 2)
    led = _ledger(BF16, BIG_EMBED, 2, 2)
    assert _acc_at(led, 2, "backward:2") - _acc_at(led, 2, "backward:1") == _new(led)[0][0]
