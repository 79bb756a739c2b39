"""ZeRO-1 bf16 under CPU optimizer offload with ``data_types.grad_accum_dtype`` fp32 (state.zero12_offload_fp32_accum),
hand-computed from DeepSpeed 0.19.8 ``runtime/zero/stage_1_and_2.py`` on the engine cell's model (TINY of
tests/engine/parity.py as nn.Linear pairs, W 2, GA 2, reduce_bucket_size 10,000; the engine cell is
tests/engine/test_peak_parity.py z1_bf16_noncontig_oo_cpu_gaccfp32_tbsga2_w2, which these figures matched within 0.16%).

Facts used, each from the source:
- use_grad_accum_attribute at stage 1 when the model dtype is not the accumulation dtype (l.397-404): every hook makes
  ``param.grad_accum = param.grad.to(fp32)`` (l.1237) or adds such a copy (l.1239), then drops param.grad (l.1240);
- the ipg bucket is fp32 then (setup_buckets l.3266 with _gradient_reduction_buffer_dtype l.1253-1254): RBS x 4;
- gradients over the bucket are cloned (l.1446), in fp32 since grad_accum is what is reduced (l.1248-1249);
- the compact fp32 partition P x 4 (l.1268-1270) lives to the end of the group's step (l.3098);
- copy_grads_in_partition's fp64 norm copy of the rank's slice (l.2152), s x 8;
- only gradients meeting the rank's slice are copied and cleared (l.2272-2274, l.2159): the others' grad_accum (bucket
  views, fp32 clones) stay to zero_grad after the step (l.2613-2624).
TINY: l1.weight 19,264, l1.bias 301, l2.weight 23,177, l2.bias 77, l3.weight 385, l3.bias 5: N = 43,209, N_pad =
43,212 (2W alignment), P = 21,606. Rank 0's slice [0, 21,606) meets l1.weight, l1.bias, l2.weight (2,041 of it);
rank 1's [21,606, 43,212) l2.weight (21,136), l2.bias, l3.*."""

from __future__ import annotations

import pytest

from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.ledger.timeline import resolve_load, role_timeline
from advisor.model.inventory import from_dict

TINY = {"name": "tiny-mlp", "tensors": [
    {"name": "l1.weight", "shape": [301, 64]}, {"name": "l1.bias", "shape": [301]},
    {"name": "l2.weight", "shape": [77, 301]}, {"name": "l2.bias", "shape": [77]},
    {"name": "l3.weight", "shape": [5, 77]}, {"name": "l3.bias", "shape": [5]}]}
N, P, RBS = 43209, 21606, 10000


def _reduce_and_kept(r: int, ipg: int, g: int) -> tuple[int, int]:
    """Bytes of rank ``r``'s boundary reduce over the ipg bucket, and what it keeps to the step, for
    grad_accum copies of ``g`` bytes (TINY, W 2, RBS 10,000; stage_1_and_2.py's flush of a bucket).
    Rank 0: l1.weight's flush (triggered by l1.bias): its clone, its slice's fp64 norm copy, every
    later grad_accum; l2.bias and l3.* were moved into the bucket and are not rank 0's, so only the
    bucket is kept. Rank 1: l2.weight's flush (triggered by l2.bias): its clone, rank 1's 21,136
    elements in fp64, l2.bias and l3.* unmoved, and l1.weight's clone, not rank 1's, kept (with
    l1.bias's bucket view)."""
    if r == 0:
        return 19264 * 8 + 19264 * g + (N - 19264) * g, ipg
    return 21136 * 8 + 23177 * g + (77 + 385 + 5) * g + 19264 * g, ipg + 19264 * g


def _cfg(stage=1, ga=2, overlap=False, gacc="fp32", dtype="bf16", comm=None):
    c = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": ga, dtype: {"enabled": True},
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "data_types": {"grad_accum_dtype": gacc},
         "zero_optimization": {"stage": stage, "reduce_bucket_size": RBS, "overlap_comm": overlap,
                               "contiguous_gradients": False, "offload_optimizer": {"device": "cpu"}}}
    if comm:
        c["communication_data_type"] = comm
    return c


def _timeline(cfg, r):
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, from_dict(TINY, "tiny-mlp"), Cluster(world_size=2)))
    tl = role_timeline(led, led.rank(r), resolve_load(ec), ga=ec.gradient_accumulation_steps or 1, rank=r)
    ser = tl.series(("accelerator", "host_pinned", "host_pageable"))
    return led, {x.key: ser[i] for i, x in enumerate(tl.instants)}


def test_modelled_not_a_lower_bound():
    led, _ = _timeline(_cfg(), 0)
    assert not led.peak_lower_bound
    led, _ = _timeline(_cfg(ga=1), 0)
    assert not led.peak_lower_bound
    for cfg in (_cfg(stage=2), _cfg(stage=2, ga=1)):  # ZeRO-2: state.zero12_offload_compact
        led, _ = _timeline(cfg, 0)
        assert not led.peak_lower_bound
    # overlap_comm too (the cells z1/z2_bf16_noncontig_oo_cpu_gaccfp32_overlap_tbsga2_w2, GA-1 twins in probes)
    for cfg in (_cfg(overlap=True), _cfg(overlap=True, ga=1), _cfg(stage=2, overlap=True),
                _cfg(stage=2, overlap=True, ga=1)):
        led, _ = _timeline(cfg, 0)
        assert not led.peak_lower_bound
    # an fp16 model (engine: z1_fp16_noncontig_oo_cpu_gaccfp32_tbsga2_w2, ZeRO-2 and GA-1 probes) and ZeRO-2 with
    # another communication_data_type (z2_bf16_noncontig_oo_cpu_gaccfp32_commfp16_tbsga2_w2, fp32 and GA-1 probes)
    for cfg in (_cfg(dtype="fp16"), _cfg(dtype="fp16", ga=1), _cfg(stage=2, dtype="fp16"), _cfg(stage=2, comm="fp32"),
                _cfg(stage=2, comm="fp16"), _cfg(stage=2, overlap=True, comm="fp32"), _cfg(stage=2, ga=1, comm="fp16")):
        led, _ = _timeline(cfg, 0)
        assert not led.peak_lower_bound
    # a 16-bit accumulation dtype unlike the model's at ZeRO-1 (test_zero1_16bit_accumulation_by_hand)
    for cfg in (_cfg(dtype="fp16", gacc="bf16"), _cfg(gacc="fp16"), _cfg(gacc="fp16", ga=1, overlap=True)):
        led, _ = _timeline(cfg, 0)
        assert not led.peak_lower_bound
    # an fp32 model with a 16-bit accumulation dtype (test_fp32_model_16bit_accumulation_by_hand; ZeRO-2:
    # test_zero2_16bit_accumulation_is_the_model_dtype_path)
    for cfg in (_cfg(dtype="fp32", gacc="bf16"), _cfg(dtype="fp32", gacc="fp16", ga=1, overlap=True),
                _cfg(stage=2, dtype="fp32", gacc="bf16"), _cfg(stage=2, dtype="fp32", gacc="fp16", overlap=True)):
        led, _ = _timeline(cfg, 0)
        assert not led.peak_lower_bound
    # without offload ZeRO-1 with a grad_accum_dtype unlike the model's is not this regime: modelled with
    # any communication dtype and buckets (state.zero1_compact_grad_accum, engine cells z1_fp16_gaccfp32_tbsga2_w2,
    # z1_fp16_gaccfp32_overlap_groups_tbsga2_w2, the rest in probes); bf16 accumulation on it stays a lower bound
    # (engine probe 2026-12-06: forward:2 +50%)
    for ov in (False, True):
        for cg in (False, True):
            led, _ = _timeline({**_cfg(dtype="fp16"), "zero_optimization": {
                "stage": 1, "reduce_bucket_size": RBS, "overlap_comm": ov, "contiguous_gradients": cg}}, 0)
            assert not led.peak_lower_bound
    led, _ = _timeline({**_cfg(dtype="fp16"), "communication_data_type": "bf16",
                        "zero_optimization": {"stage": 1, "reduce_bucket_size": RBS}}, 0)
    assert not led.peak_lower_bound
    led, _ = _timeline({**_cfg(dtype="fp16", gacc="bf16"), "zero_optimization": {"stage": 1, "reduce_bucket_size": RBS}}, 0)
    assert "grad_accum_dtype bf16" in led.peak_lower_bound


@pytest.mark.parametrize("dtype,gacc", (("bf16", "fp16"), ("fp16", "bf16")))
@pytest.mark.parametrize("r", (0, 1))
def test_zero1_16bit_accumulation_by_hand(r, dtype, gacc):
    # ZeRO-1 with a 16-bit grad_accum_dtype unlike the model's: param.grad_accum (l.397-404 ask only for a dtype
    # unlike self.dtype) in G = 2 bytes, the ipg bucket in it (l.1253-1254, l.3266: RBS x 2), no compact partition
    # (l.1260-1262: fp32 only). The figures of test_hand_computed_instants with 4 -> 2 and no P x 4. Engine (TINY W 2,
    # GA 2, RBS 10,000, real Linears, 2026-12-06, bf16 with fp16; initialize 395,192 B): backward:1 540,170 B
    # (+ 144,946 + 32 B of scalars), forward:2 502,242 (+ 106,418 + 632 of proxy inputs), backward:2 (its reduce)
    # 655,758 / 670,132 B (+ 260,530 / 274,904 + 36); the steps 20,052 / 58,588 B over the model-dtype plan's
    led, at = _timeline(_cfg(dtype=dtype, gacc=gacc), r)
    assert not led.peak_lower_bound
    base = at["initialize"]
    ipg = RBS * 2
    assert at["backward:1"] - base == ipg + 2 * N + 2 * 19264      # l1.weight's hook: every copy beside its gradient
    assert at["forward:2"] - base == ipg + 2 * N
    assert at["backward:2"] - base == ipg + 2 * N + (2 + 2) * 23177  # l2.weight's new gradient and its copy
    reduce, kept = _reduce_and_kept(r, ipg, 2)
    assert at["reduce"] - base == ipg + reduce
    _, ref = _timeline(_cfg(gacc=dtype, dtype=dtype), r)
    assert at["first_step:update"] - ref["first_step:update"] == kept
    assert sum(e.bytes for e in led.rank(r).by_item("offload_kept_grad_accum")) == kept
    assert sum(e.bytes for e in led.rank(r).by_item("offload_compact_grad_partition")) == 0


@pytest.mark.parametrize("r", (0, 1))
def test_fp32_model_16bit_accumulation_by_hand(r):
    # ZeRO-1 on an fp32 model (D = 4) with grad_accum_dtype bf16 (G = 2): the path of
    # test_zero1_16bit_accumulation_by_hand (l.397-404 ask only for a dtype unlike self.dtype; l.1260-1262 no compact
    # partition), the hooks' 4-byte gradients beside their 2-byte copies, the ipg bucket in bf16 (l.1253-1254,
    # setup_buckets l.3266: RBS x 2 = 20,000 B, not RBS x 4). Hooks in autograd's order (l3.bias 5, l3.weight 385,
    # l2.bias 77, l2.weight 23,177, l1.bias 301, l1.weight 19,264; a bias's AddmmBackward0 sibling is its weight):
    # micro-step 1 peaks at l1.weight's hook, every copy (N x 2) beside its fp32 gradient (19,264 x 4); micro-step 2 at
    # l2.weight's, N x 2 kept + its new gradient x 4 + its copy x 2. Engine (TINY W 2, GA 2, RBS 10,000, real Linears,
    # CPU offload, 2026-12-06, 2 probe runs, initialize 617,536 B): backward:1 +183,522 (+48 B of scalars), forward:2
    # +107,670 (+1,252 of proxy inputs), backward:2 +260,582 / +274,956 (the reduce, +52), step:2 +192,916 / +231,452
    # (+68 / +76): the model-dtype plan's N_pad x 4 = 172,848 B at the update + what grad_accum keeps
    led, at = _timeline(_cfg(dtype="fp32", gacc="bf16"), r)
    assert not led.peak_lower_bound
    base = at["initialize"]
    ipg = RBS * 2
    assert at["backward:1"] - base == ipg + 2 * N + 4 * 19264
    assert at["forward:2"] - base == ipg + 2 * N
    assert at["backward:2"] - base == ipg + 2 * N + (4 + 2) * 23177
    reduce, kept = _reduce_and_kept(r, ipg, 2)
    assert at["reduce"] - base == ipg + reduce
    assert at["first_step:update"] - base == 43212 * 4 + kept
    _, ref = _timeline(_cfg(gacc="fp32", dtype="fp32"), r)
    assert ref["first_step:update"] - ref["initialize"] == 43212 * 4


@pytest.mark.parametrize("r", (0, 1))
@pytest.mark.parametrize("ga", (1, 2))
@pytest.mark.parametrize("dtype,gacc", (("bf16", "fp16"), ("fp16", "bf16"), ("fp32", "bf16"), ("fp32", "fp16")))
def test_zero2_16bit_accumulation_is_the_model_dtype_path(dtype, gacc, ga, r):
    # ZeRO-2 never reads a 16-bit grad_accum_dtype (stage_1_and_2.py: param.grad_accum needs stage 1, l.401; the
    # compact partition fp32, l.1260-1262; the ipg buffers self.dtype, l.1253-1254; l.1038-1053 only without
    # offload), so DeepSpeed runs the plan as with grad_accum_dtype = the model's: the same bytes at every instant of
    # every rank, and not a lower bound (engine: tests/engine/test_peak_parity.py z2_bf16_oo_cpu_gaccfp16_tbsga2_w2;
    # probes at GA 1, with overlap_comm, fp32 communication and fp16 with bf16 accumulation, all within 0.16%; an fp32
    # model with bf16 accumulation, GA 2, 2 probe runs, 2026-12-06: every phase within 0.20%, the proxy inputs)
    led, got = _timeline(_cfg(stage=2, ga=ga, dtype=dtype, gacc=gacc), r)
    assert led.peak_lower_bound == ""
    _, want = _timeline(_cfg(stage=2, ga=ga, dtype=dtype, gacc=dtype), r)
    assert got == want


@pytest.mark.parametrize("dtype", ("bf16", "fp16"))
@pytest.mark.parametrize("r", (0, 1))
def test_hand_computed_instants(r, dtype):
    # fp16: the same grad_accum path (l.397-404 asks only for an accumulation dtype unlike the model's), D = 2 as bf16;
    # the loss scaler and overflow check hold scalars (runtime/utils.py has_inf_or_nan l.228: amax / amin)
    led, at = _timeline(_cfg(dtype=dtype), r)
    base = at["initialize"]  # the persistent state: what every instant below adds to
    ipg = RBS * 4
    # micro-step 1's hooks in autograd order (l3.bias, l3.weight, l2.bias, l2.weight, l1.bias, l1.weight; a bias's
    # hook sees its weight's 16-bit gradient whole): the largest is l1.weight's, every fp32 copy made beside its
    # 16-bit gradient: 4 N + 2 x 19,264
    assert at["backward:1"] - base == ipg + 4 * N + 2 * 19264
    # the next forward: every grad_accum and the bucket (no epilogue before the boundary at stage 1)
    assert at["forward:2"] - base == ipg + 4 * N
    # micro-step 2's hooks: all grad_accum, l2.weight's new gradient and its fp32 copy
    assert at["backward:2"] - base == ipg + 4 * N + (2 + 4) * 23177
    compact = P * 4
    reduce, kept = _reduce_and_kept(r, ipg, 4)
    assert at["reduce"] - base == ipg + compact + reduce
    assert at["steady:reduce"] == at["reduce"] + (at["steady:forward"] - at["forward:2"])
    # the step holds the compact partition and what the reduce left (over the step's own entries, as without it)
    ref_led, ref = _timeline(_cfg(gacc=dtype, dtype=dtype), r)
    assert at["first_step:update"] - ref["first_step:update"] == compact + kept
    assert sum(e.bytes for e in led.rank(r).by_item("offload_kept_grad_accum")) == kept


@pytest.mark.parametrize("r", (0, 1))
def test_ga1_hooks_and_reduce(r):
    # GA 1: every backward is a first micro-step (the hooks' moment as micro-step 1's at GA 2), the reduce and the
    # step as at GA 2's boundary (engine probe: the same residuals to the byte before)
    _, at = _timeline(_cfg(ga=1), r)
    _, at2 = _timeline(_cfg(), r)
    base = at["initialize"]
    assert at["backward:1"] - base == RBS * 4 + 4 * N + 2 * 19264
    assert at["reduce"] == at2["reduce"]
    assert at["first_step:update"] == at2["first_step:update"]


# ZeRO-2 (state.zero12_offload_compact). Hook order l3.bias, l3.weight, l2.bias, l2.weight, l1.bias, l1.weight; buckets
# of 10,000: [l3.*, l2.bias] flushed by l2.weight's hook, l2.weight (cloned, bf16, l.1446) alone flushed by l1.bias's,
# [l1.bias] by l1.weight's, l1.weight's clone alone by the epilogue. The 16-bit ipg bucket is RBS x 2.

@pytest.mark.parametrize("r", (0, 1))
def test_zero2_ga1(r):
    _, at = _timeline(_cfg(stage=2, ga=1), r)
    base = at["initialize"]
    if r == 0:
        # l1.weight's flush: its clone, the fp64 norm copy of its (rank 0's) slice
        moment = 19264 * 8 + 19264 * 2
    else:
        # l2.weight's flush in l1.bias's hook: its clone, rank 1's 21,136 elements in fp64, l1.bias and l1.weight whole
        moment = 21136 * 8 + 23177 * 2 + (301 + 19264) * 2
    assert at["reduce"] - base == RBS * 2 + P * 4 + moment
    # the step holds the partition until the group's update is done (l.3098); the next forward does not
    _, ref = _timeline(_cfg(stage=2, ga=1, gacc="bf16"), r)
    assert at["first_step:update"] - ref["first_step:update"] == P * 4
    assert at["steady:forward"] == ref["steady:forward"]


@pytest.mark.parametrize("dtype", ("bf16", "fp16"))
@pytest.mark.parametrize("r", (0, 1))
def test_zero2_ga2_first_microstep(r, dtype):
    _, at = _timeline(_cfg(stage=2, dtype=dtype), r)
    base = at["initialize"]
    if r == 0:
        # the epilogue's flush of l1.weight's clone: the fp32 cast of rank 0's slice (all of l1.weight, l.1326) beside
        # the partition, and l2.weight's clone kept (rank 0 owns part of it: not cleared before the boundary, l.2145-2161)
        moment = 19264 * 2 + 19264 * 4 + 23177 * 2
    else:
        # l2.weight's flush: its flat copy of two ranks' runs (l.2367) and clone, l1.bias and l1.weight whole, and the
        # cast of rank 1's 21,136 elements
        moment = 23177 * 2 + 23177 * 2 + (301 + 19264) * 2 + 21136 * 4
    assert at["reduce:1"] - base == RBS * 2 + P * 4 + moment
    # no host buffer (accumulated_grads_in_cpu): the next forward holds the partition only
    _, ref = _timeline(_cfg(stage=2, gacc=dtype, dtype=dtype), r)
    assert at["forward:2"] - base == P * 4
    assert at["forward:1"] == ref["forward:1"]


# overlap_comm (issue 15). ZeRO-1: the boundary's hooks reduce in autograd's order (process_gradients l.2290 ->
# reduce_ready_partitions_and_remove_grads l.2294); two fp32 ipg buffers (setup_buckets l.3266 and l.3272-3278).
# Hook order l3.bias, l3.weight, l2.bias, l2.weight, l1.bias, l1.weight: l2.weight's hook flushes [l3.*, l2.bias] and
# clones its grad_accum (fp32, l.1446); l1.bias's hook, after adding its gradient into grad_accum (l.1237-1240),
# flushes that clone: allreduce_bucket flattens the two ranks' slices (fp32, l.2367) and casts them to bf16
# (l.2376-2377) while l1.weight's 16-bit gradient (its autograd sibling) is whole. Engine figures (2 runs) matched
# these within 0.16%.

@pytest.mark.parametrize("r", (0, 1))
def test_zero1_overlap_ga2(r):
    _, at = _timeline(_cfg(overlap=True), r)
    base = at["initialize"]
    ipg2 = 2 * RBS * 4
    compact = P * 4
    # micro-step 1's hooks reduce nothing (l.2293-2295): the fp32 copies as without overlap_comm, two buffers
    assert at["backward:1"] - base == ipg2 + 4 * N + 2 * 19264
    assert at["forward:2"] - base == ipg2 + 4 * N
    # l1's grad_accum (micro-step 1's, plus l1.bias's new gradient) unmoved, l1.weight's new 16-bit gradient
    held = (301 + 19264) * 4 + 19264 * 2
    if r == 0:
        # l2.weight's flush: the flat copy, its bf16 cast and the clone
        moment = 23177 * 4 + 23177 * 2 + 23177 * 4 + held
    else:
        # after that flush, rank 1's 21,136 elements of l2.weight in fp64 (l.2152) beside the clone
        moment = 21136 * 8 + 23177 * 4 + held
    assert at["reduce"] - base == ipg2 + compact + moment
    # the step: as without overlap_comm, and the second bucket buffer is not live there
    _, ref = _timeline(_cfg(), r)
    assert at["first_step:update"] == ref["first_step:update"]


@pytest.mark.parametrize("r", (0, 1))
def test_zero1_overlap_ga1(r):
    # GA 1: the boundary is micro-step 1, each hook moves its fp32 copy into the bucket at once (l.1461): at a flush
    # only the trigger's grad_accum (l1.bias, 301 x 4) is unmoved beside its sibling's 16-bit gradient
    _, at = _timeline(_cfg(overlap=True, ga=1), r)
    base = at["initialize"]
    ipg2 = 2 * RBS * 4
    held = 301 * 4 + 19264 * 2
    if r == 0:
        moment = 23177 * 4 + 23177 * 2 + 23177 * 4 + held
    else:
        moment = 21136 * 8 + 23177 * 4 + held
    assert at["reduce"] - base == ipg2 + P * 4 + moment
    # the hooks: the largest moment is l2.weight's clone (l.1446) made beside its fp32 grad_accum copy, 2 x 23,177 x 4,
    # over its copy beside its 16-bit gradient (23,177 x 6) and l1.bias's hook (301 x 6 + l1.weight's 19,264 x 2 beside
    # l2.weight's clone): one of them, not their sum
    assert at["backward:1"] - base == ipg2 + max(2 * 23177 * 4, 23177 * 6, 301 * 6 + 19264 * 2 + 23177 * 4)


@pytest.mark.parametrize("ga", (1, 2))
@pytest.mark.parametrize("r", (0, 1))
def test_zero2_overlap(r, ga):
    # ZeRO-2: overlap_comm adds the second 16-bit ipg buffer (l.3272-3278, RBS x 2) to every backward moment
    _, at = _timeline(_cfg(stage=2, ga=ga, overlap=True), r)
    _, ref = _timeline(_cfg(stage=2, ga=ga), r)
    keys = ("reduce:1", "reduce") if ga > 1 else ("reduce",)
    for k in keys:
        assert at[k] - ref[k] == RBS * 2
    assert at["first_step:update"] == ref["first_step:update"]


# Several param groups (issue 15; every HF Trainer run has the weight-decay groups): TINY_FROZEN_GROUPS of
# tests/engine/parity.py as nn.Linears: group 0 = l1.weight (19,264) and l1.bias (301), l2 frozen, group 1 = l3.weight
# (385) and l3.bias (5). Group 0: 19,565 elements padded to 19,568 (2W alignment), P0 = 9,784: rank 0 l1.weight[0,
# 9,784), rank 1 its other 9,480 and l1.bias. Group 1: 390 -> 392, P1 = 196. ZeRO-2 keeps one compact fp32 buffer per
# group (_get_compact_grad_partition_buffer(group_idx), l.1303-1310), made at the rank's first slice of that group.
# Hooks l3.bias, l3.weight, l1.bias, then l1.weight (19,264 > RBS - 691): flush 0 = {l3.*, l1.bias} inside l1.weight's
# hook; the epilogue's flush 1 = l1.weight's clone alone (l.1446), its two ranks' slices one run, flattened (l.2367):
# clone + flat copy + both buffers + the fp32 cast of the rank's slice (l.1326). Engine cell
# z2_bf16_noncontig_oo_cpu_gaccfp32_groups_tbsga2_w2 (2 runs): backward:1 - initialize = 176,140 / 174,924 B on ranks
# 0 / 1, i.e. these figures + 28 B of proxy scalars.
TINY_FROZEN_GROUPS = {"name": "tiny-frozen-groups", "tensors": [
    {"name": "l1.weight", "shape": [301, 64]}, {"name": "l1.bias", "shape": [301]},
    {"name": "l2.weight", "shape": [77, 301], "trainable": False}, {"name": "l2.bias", "shape": [77], "trainable": False},
    {"name": "l3.weight", "shape": [5, 77], "group": 1}, {"name": "l3.bias", "shape": [5], "group": 1}]}


@pytest.mark.parametrize("r, slice_r", ((0, 9784), (1, 9480)))
def test_zero2_two_groups_one_buffer_each(r, slice_r):
    ec = effective_config(_cfg(stage=2))
    led = compute_ledger(Plan(ec, from_dict(TINY_FROZEN_GROUPS, "tiny-frozen-groups"), Cluster(world_size=2)))
    assert led.peak_lower_bound == ""
    tl = role_timeline(led, led.rank(r), resolve_load(ec), ga=2, rank=r)
    ser = tl.series(("accelerator",))
    at = {x.key: ser[i] for i, x in enumerate(tl.instants)}
    bufs = (9784 + 196) * 4
    assert at["reduce:1"] - at["initialize"] == RBS * 2 + 19264 * 2 + 19264 * 2 + bufs + slice_r * 4
    assert at["forward:2"] - at["initialize"] == bufs  # both kept to the step, no host buffer


def test_zero1_two_groups_bucket_kept_where_a_group_misses_the_slice():
    # ZeRO-1: only gradients meeting the rank's slice of their own group's partition are copied and cleared (l.2272-2274,
    # l.2159); the others' grad_accum views keep the fp32 ipg bucket (RBS x 4, setup_buckets l.3266) to zero_grad.
    # Rank 0 ([0, 9,784) of group 0, [0, 196) of group 1): l1.bias (group 0 elements 19,264..19,565) and l3.bias (385..390)
    # miss it; l1.weight (19,264 > RBS, cloned, l.1446) meets it. Rank 1 meets every tensor: nothing kept. Engine
    # z1_bf16_noncontig_oo_cpu_gaccfp32_groups_tbsga2_w2: step:2 rank 0 +38,476 B without the bucket, rank 1 matched
    ec = effective_config(_cfg(stage=1))
    led = compute_ledger(Plan(ec, from_dict(TINY_FROZEN_GROUPS, "t"), Cluster(world_size=2)))
    assert led.peak_lower_bound == ""
    kept = {r: sum(e.bytes for e in led.rank(r).entries if e.item == "offload_kept_grad_accum") for r in (0, 1)}
    assert kept == {0: RBS * 4, 1: 0}
    part = {r: sum(e.bytes for e in led.rank(r).entries if e.item == "offload_compact_grad_partition") for r in (0, 1)}
    assert part == {0: (9784 + 196) * 4, 1: (9784 + 196) * 4}  # both groups' compact partitions (l.1268-1270)


# ZeRO-2 with a communication_data_type unlike the model's (bf16): allreduce_bucket casts each run to it
# (l.2376-2377, beside its flat copy l.2367, a view for a run of one slice) and returns the cast, so the flat copy is
# freed (l.2391-2393) before _add_to_grad_partition_buffer casts the rank's slice to fp32 (``source.to(fp32)``, l.1326,
# nothing when the communication is fp32). Micro-step 1's flushes as in test_zero2_ga2_first_microstep: l2.weight's
# clone flushed whole (both ranks' runs, a flat copy) in l1.bias's hook with l1.bias and l1.weight whole; l1.weight's
# clone (rank 0's slice only, a view) by the epilogue, l2.weight's clone kept by rank 0. Engine probes (2 runs each,
# 2026-12-06) matched these within 0.16%.

@pytest.mark.parametrize("r", (0, 1))
def test_zero2_comm_fp32_first_microstep(r):
    _, at = _timeline(_cfg(stage=2, comm="fp32"), r)
    base = at["initialize"]
    # l2.weight's flush on either rank: its flat copy (bf16) and fp32 cast, its clone, l1.bias and l1.weight whole; no
    # slice cast (the reduced run is fp32). Rank 0's partition is made at this flush (its first slice, l.1312-1321).
    # The epilogue's (19,264 x (4 + 2) + 23,177 x 2 = 161,938 B on rank 0) is smaller
    moment = 23177 * (2 + 4) + 23177 * 2 + (301 + 19264) * 2
    assert at["reduce:1"] - base == RBS * 2 + P * 4 + moment


@pytest.mark.parametrize("r", (0, 1))
def test_zero2_comm_fp16_first_microstep(r):
    # fp16 on a bf16 model is a cast of the same bytes (state.zero12_comm_cast_bytes compares dtypes)
    _, at = _timeline(_cfg(stage=2, comm="fp16"), r)
    base = at["initialize"]
    if r == 0:
        # the epilogue's flush of l1.weight's clone: its fp16 cast (the run is a view), the clone, the fp32 cast of
        # rank 0's slice (all of l1.weight), l2.weight's clone kept
        moment = 19264 * 2 + 19264 * 2 + 19264 * 4 + 23177 * 2
    else:
        # l2.weight's flush: after allreduce_bucket its fp16 cast (the bf16 flat copy freed), the clone, l1.bias and
        # l1.weight whole, the fp32 cast of rank 1's 21,136 elements; above the all-reduce moment (flat + cast,
        # 23,177 x 2 more, the slice cast not yet made)
        moment = 23177 * 2 + 23177 * 2 + (301 + 19264) * 2 + 21136 * 4
        assert 21136 * 4 > 23177 * 2
    assert at["reduce:1"] - base == RBS * 2 + P * 4 + moment


def test_comm_cast_bytes():
    from advisor.ledger.state import zero12_comm_cast_bytes
    # allreduce_bucket l.2376-2377: ``if communication_data_type != tensor.dtype``, by dtype: bf16 -> fp16 copies 2 B
    want = {("bf16", "fp16"): 2, ("bf16", "fp32"): 4, ("bf16", None): 0, ("fp16", "bf16"): 2, ("fp16", "fp16"): 0}
    for (dtype, comm), b in want.items():
        assert zero12_comm_cast_bytes(effective_config(_cfg(stage=2, dtype=dtype, comm=comm))) == b, (dtype, comm)
    # a flat bucket in fp32 (ZeRO-1's fp32 grad_accum, l.3266) cast only when the communication is not fp32
    assert zero12_comm_cast_bytes(effective_config(_cfg(comm="fp32")), "fp32") == 0
    assert zero12_comm_cast_bytes(effective_config(_cfg()), "fp32") == 2
