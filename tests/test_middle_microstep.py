"""A middle micro-step (1 < m < GA) on the step timeline: one ``forward:2`` / ``backward:2`` pair stands for every
such m (advisor.ledger.timeline.middle_microstep). Expected figures by hand from DeepSpeed 0.19.8's order: the engine
steps and zeroes the gradients only at the accumulation boundary (runtime/engine.py ``step`` l.3611-3615,
``_take_model_step`` l.3529-3532), and below ZeRO-2 all-reduces only there (``allreduce_gradients`` l.3088-3095);
torch adds a later micro-step's new gradient into the kept param.grad in place, the new one made whole first
(torch/csrc/autograd/functions/accumulate_grad.h accumulateGrad). The engine cells are
tests/engine/test_peak_parity.py z0_fp16_tbsga4_w2, z1_bf16_tbsga3_w2, z3_bf16_tbsga3_w2, and with the middle reduce
``reduce:2`` z2_bf16_tbsga3_w2 and z1_bf16_gaccfp32_tbsga3_w2 (MIDDLE_CELLS)."""

from __future__ import annotations

import json

from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.ledger.timeline import Instant, Timeline, resolve_load, role_timeline
from advisor.model.inventory import from_dict
from tests.conftest import run_cli
from tests.test_timeline import MLP

N = 43209  # MLP's elements: 19264 + 301 + 23177 + 77 + 385 + 5
OPT = {"type": "AdamW", "params": {"lr": 1e-3}}


def _timeline(cfg, W=2, ga=4):
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, MLP, Cluster(world_size=W)))
    return role_timeline(led, led.rank(0), resolve_load(ec), ga=ga, rank=0)


def _at(tl, key):
    return tl.series(("accelerator",))[[x.key for x in tl.instants].index(key)]


def test_stage0_fp32_ga4_middle_micro_step_by_hand():
    # plain fp32 at stage 0: the basic optimizer without a wrapper (engine.py _do_optimizer_sanity_check l.2313-2315)
    cfg = {"train_micro_batch_size_per_gpu": 1, "train_batch_size": 8, "optimizer": OPT,
           "zero_optimization": {"stage": 0}}
    tl = _timeline(cfg)
    keys = [x.key for x in tl.instants]
    assert keys[keys.index("forward:1"):keys.index("reduce") + 1] == [
        "forward:1", "backward:1", "forward:2", "backward:2", "forward:4", "backward:4", "reduce"]
    mid = {x.key for x in tl.instants if x.middle}
    assert mid == {"forward:2", "backward:2"}
    params, grads = N * 4, N * 4
    # a middle forward holds micro-step 1's param.grad (no zero_grad before the boundary); the moments are made by
    # the first step (torch AdamW's lazy state), not yet
    assert _at(tl, "forward:2") == params + grads
    assert _at(tl, "forward:4") == params + grads
    # a middle backward: the kept param.grad plus the largest new gradient (l2.w, 23,177 elements: a 1-D tensor
    # with no autograd sibling) being added into it; no all-reduce's flat copy before the boundary
    assert _at(tl, "backward:2") == params + grads + 23177 * 4
    # the boundary's backward: the all-reduce flattens the one bucket of all six tensors (N x 4), the larger of its
    # two moments (the new gradient's is smaller)
    assert _at(tl, "backward:4") == params + grads + N * 4
    # the steady iteration's middle micro-steps have no instant (not modelled: their state adds the moments)
    assert not any(k.startswith("steady:") and k.endswith((":2", ":3")) for k in keys)


def test_zero2_middle_backward_has_its_own_reduce_holding_micro_step_1s_partition():
    # ZeRO-2 reduces inside every backward (stage_1_and_2.py independent_gradient_partition_epilogue l.1016-1054):
    # the middle backward is followed by its own reduce:2, as micro-step 1's by reduce:1
    cfg = {"train_micro_batch_size_per_gpu": 1, "train_batch_size": 6, "optimizer": OPT, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 2, "reduce_bucket_size": 10000}}
    tl = _timeline(cfg, ga=3)
    keys = [x.key for x in tl.instants]
    assert keys[keys.index("forward:1"):keys.index("reduce") + 1] == [
        "forward:1", "backward:1", "reduce:1", "forward:2", "backward:2", "reduce:2", "forward:3", "backward:3",
        "reduce"]
    assert {x.key for x in tl.instants if x.middle} == {"forward:2", "backward:2", "reduce:2"}
    # micro-step 2's reduce runs the same flushes as micro-step 1's, beside the grads_in_partition micro-step 1's
    # copy_grads_in_partition made and kept (l.2161-2174, freed only by the step): on rank 0 (slice [0, 21606) of
    # the 43,212 padded elements) every tensor meeting the slice, l1.w + l1.b + l2.w = 19,264 + 301 + 23,177, in bf16
    assert _at(tl, "reduce:2") - _at(tl, "reduce:1") == (19264 + 301 + 23177) * 2


def test_bf16_optimizer_middle_reduce_by_hand():
    # bf16 with grad_accum_dtype fp32 at ZeRO-1 without offload is BF16_Optimizer (engine.py
    # _do_optimizer_sanity_check l.2305-2310); the last layer in a second param group
    inv = from_dict({"name": "mlp2", "tensors": [
        {"name": "l1.w", "shape": [301, 64]}, {"name": "l1.b", "shape": [301]},
        {"name": "l2.w", "shape": [77, 301], "group": 1}, {"name": "l2.b", "shape": [77], "group": 1},
        {"name": "l3.w", "shape": [5, 77], "group": 1}, {"name": "l3.b", "shape": [5], "group": 1}]}, "mlp2")
    cfg = {"train_micro_batch_size_per_gpu": 1, "train_batch_size": 6, "optimizer": OPT, "bf16": {"enabled": True},
           "data_types": {"grad_accum_dtype": "fp32"}, "zero_optimization": {"stage": 1}}
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=2)))
    assert led.wrapper == "BF16_Optimizer"
    tl = role_timeline(led, led.rank(0), resolve_load(ec), ga=3, rank=0)
    keys = [x.key for x in tl.instants]
    assert keys[keys.index("backward:2"):keys.index("backward:2") + 2] == ["backward:2", "reduce:2"]
    # each group padded to a multiple of 2W = 4 elements (bf16_optimizer.py flatten aligned): 19,565 -> 19,568 and
    # 23,644; N = 43,209
    npad, n = 19568 + 23644, 43209
    # bf16 flat groups (N_pad x 2), the fp32 master partition (N_pad / 2 x 4), the fp32 accumulation buffer of the
    # whole model (N_pad x 4, bf16_optimizer.py l.191), every param.grad (N x 2), and backward_epilogue's
    # lp.grad.to(fp32) of one gradient at a time, the largest l2.w's 23,177 x 4 (l.523, l.503-505)
    mid = npad * 2 + npad // 2 * 4 + npad * 4 + n * 2 + 23177 * 4
    assert _at(tl, "reduce:2") == mid
    # no all-reduce before the boundary (engine.py allreduce_gradients l.3088-3095); the boundary's
    # buffered_allreduce_fallback flattens both groups' fp32 buffers into one (npad x 4) and casts it to bf16
    # (npad x 2, engine.py allreduce_bucket l.3796-3801), all param.grad alive: above the cast moment
    assert _at(tl, "reduce") == mid - 23177 * 4 + npad * (4 + 2)
    # micro-step 1's reduce holds the same as the middle one (the 16-bit grads are zeroed in place, not freed)
    assert _at(tl, "reduce:1") == mid


def test_zero2_offload_and_pipe_have_no_middle_backward():
    # ZeRO-2 under optimizer offload: micro-step 1's reduce makes the host buffers a middle one finds made
    # (lifetime first_microstep_reduce), not modelled for a middle reduce: forward:2 only
    cfg = {"train_micro_batch_size_per_gpu": 1, "train_batch_size": 8, "optimizer": OPT, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    keys = [x.key for x in _timeline(cfg).instants]
    assert "forward:2" in keys and "backward:2" not in keys and "reduce:2" not in keys
    # GA 2: micro-step 2 is the boundary, no middle one
    cfg1 = {**cfg, "train_batch_size": 4, "zero_optimization": {"stage": 1}}
    tl = _timeline(cfg1, ga=2)
    assert not any(x.middle for x in tl.instants)
    assert _at(tl, "backward:2") >= _at(tl, "backward:1")


def test_a_middle_instant_names_the_peak_only_above_every_other():
    tl = Timeline([Instant("backward:2", "backward", "m", middle=True), Instant("backward:4", "backward", "b")],
                  [{"accelerator": 5}, {"accelerator": 5}], [[], []])
    assert tl.peak(("accelerator",)) == (5, 1)
    tl.live[0]["accelerator"] = 6
    assert tl.peak(("accelerator",)) == (6, 0)


def _estimate(tmp_path, tbs, stage=0):
    f = tmp_path / f"ds_{tbs}_{stage}.json"
    f.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "train_batch_size": tbs, "optimizer": OPT,
                             "zero_optimization": {"stage": stage}}))
    p = run_cli(["estimate", str(f), "--params", "1000000", "--world-size", "2", "--format", "json"])
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["ranks"][0]


def test_estimate_lists_the_middle_instants_only_at_a_peak(tmp_path):
    # stage 0 fp32: the boundary's backward (the all-reduce's flat copy) is above the middle one, so the report's
    # timeline (text table, HTML chart: these rows) has the same rows at GA 3 and GA 8
    r3, r8 = _estimate(tmp_path, 6), _estimate(tmp_path, 16)
    k3, k8 = [x["instant"] for x in r3["timeline"]], [x["instant"] for x in r8["timeline"]]
    assert "backward:2" not in k3 and "forward:2" not in k3 and "backward:3" in k3
    assert [k.replace(":8", ":3") for k in k8] == k3
    assert r8["peak"]["accelerator"]["instant"] in k8
