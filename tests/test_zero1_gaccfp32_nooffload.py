"""ZeRO-1 on an fp16 model with ``data_types.grad_accum_dtype`` fp32 and no optimizer offload
(state.zero1_compact_grad_accum), hand-computed from DeepSpeed 0.19.8 ``runtime/zero/stage_1_and_2.py`` on the engine
cell's model (TINY of tests/engine/parity.py as nn.Linear pairs, W 2, reduce_bucket_size 10,000, contiguous_gradients
on, overlap_comm off; the engine cell is tests/engine/test_peak_parity.py z1_fp16_gaccfp32_tbsga2_w2, whose measured
peaks are these figures + 32-36 B of scalars at every backward / reduce / norm instant, 2026-12-06).

Facts used, each from the source:
- every hook makes ``param.grad_accum = param.grad.to(fp32)`` (l.1237; a later micro-step adds such a copy, l.1239)
  and drops param.grad (l.1240); nothing is reduced before the boundary (engine.py allreduce_gradients l.3088-3092);
- the ipg bucket is fp32 (setup_buckets l.3266, _gradient_reduction_buffer_dtype l.1253-1254): RBS x 4;
- the boundary's epilogue loop moves the gradients in model order (reduce_gradients l.971-976); a gradient over the
  bucket is reduced in its own fp32 storage (l.1441-1449, no clone without offload); each run is flattened when it
  has several slices (allreduce_bucket l.2367, x 4) and cast to the fp16 communication dtype (l.2376-2377, x 2);
- the rank's reduced slice is cast back, ``source.to(fp32)`` (l.1326, x 4), into the compact fp32 partition P x 4
  (l.1268-1270), made at the rank's first flush; when the run was flattened its flat copy is freed first
  (l.2391-2393);
- copy_grads_in_partition clears grad_accum only for the rank's own gradients (l.2272-2274, l.2179-2182,
  clear_grad_attribute l.1348-1350); the others (bucket views, whole fp32 storages) stay to the step's norm
  (get_grad_norm_direct l.2684, one fp64 copy of a slice at a time) and are freed before the update
  (free_grad_in_param_list l.2898-2901).
TINY: l1.weight 19,264, l1.bias 301, l2.weight 23,177, l2.bias 77, l3.weight 385, l3.bias 5: N = 43,209, N_pad =
43,212, P = 21,606. Rank 0's slice meets l1.weight, l1.bias and 2,041 elements of l2.weight; rank 1's the other
21,136 of l2.weight, l2.bias, l3.*. Persistent before the first update: the fp16 flat copy N_pad x 2 and the fp32
master P x 4 (86,424 B each; the Adam moments are made at the first update)."""

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
PERSIST = 43212 * 2 + P * 4
BUCKET = RBS * 4

# rank 0's boundary peak is l1.weight's flush (triggered by l1.bias): no gradient moved yet (4 N), the partition made
# there, l1.weight's one-slice run cast to fp16 and its slice cast back (19,264 x (2 + 4)); rank 1's is l2.weight's:
# l1.bias moved into the bucket, l1.weight kept (not rank 1's: 4 (N - 301) with the later ones), the partition, and
# the two ranks' slices flattened (23,177 x 4) and cast (x 2), rank 1's 21,136 x 4 slice copy after the flat copy
REDUCE = {0: PERSIST + BUCKET + 4 * N + 4 * P + 19264 * (2 + 4),
          1: PERSIST + BUCKET + 4 * (N - 301) + 4 * P + 23177 * (4 + 2)}
# the step's norm: the partition, the largest slice's fp64 copy, the bucket (l2.bias, l3.* on rank 0 and l1.bias on
# rank 1 are views of it, not their ranks') and, on rank 1, l1.weight's fp32 grad_accum
NORM = {0: PERSIST + 4 * P + 19264 * 8 + BUCKET,
        1: PERSIST + 4 * P + 21136 * 8 + BUCKET + 19264 * 4}
ENGINE = {("backward:1", 0): 424248, ("forward:2", 0): 386320, ("reduce", 0): 587724, ("first_step:norm", 0): 453416,
          ("reduce", 1): 609998, ("first_step:norm", 1): 545448}


def _cfg(ga=2, **zero):
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": ga, "fp16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "data_types": {"grad_accum_dtype": "fp32"},
            "zero_optimization": {"stage": 1, "reduce_bucket_size": RBS, "overlap_comm": False,
                                  "contiguous_gradients": True, **zero}}


def _series(cfg, r, inv=TINY):
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, from_dict(inv, "tiny-mlp"), Cluster(world_size=2)))
    tl = role_timeline(led, led.rank(r), resolve_load(ec), ga=cfg["gradient_accumulation_steps"], rank=r)
    ser = tl.series(("accelerator",))
    return led, {x.key: ser[i] for i, x in enumerate(tl.instants)}


@pytest.mark.parametrize("r", (0, 1))
def test_first_iteration_by_hand(r):
    led, s = _series(_cfg(), r)
    assert not led.peak_lower_bound
    # micro-step 1's last hook (l1.weight's, autograd's last): every fp32 copy beside its 16-bit gradient
    assert s["backward:1"] == PERSIST + BUCKET + 4 * N + 19264 * 2
    assert s["forward:2"] == PERSIST + BUCKET + 4 * N  # the grad_accum and the bucket kept to micro-step 2
    assert s["reduce"] == REDUCE[r]
    assert s["first_step:norm"] == NORM[r]
    for (k, rr), eng in ENGINE.items():  # what the engine measured (the proxy's scalars over the ledger)
        if rr == r:
            assert 0 <= eng - s[k] <= 36 or k == "forward:2" and eng - s[k] == 636, (k, eng, s[k])


@pytest.mark.parametrize("r", (0, 1))
def test_ga1_boundary_is_the_same_reduce(r):
    # GA 1 (engine probe 2026-12-06, one run: backward:1 587,724 / 609,998 B, step:1 453,416 / 545,448 B): the same
    # epilogue after micro-step 1's hooks
    _, s = _series(_cfg(ga=1), r)
    assert s["reduce"] == REDUCE[r] and s["first_step:norm"] == NORM[r]


# contiguous_gradients off (the newcomer's tests/data/lb15 buckets; engine probes 2026-12-06, 2 runs, TINY and its decay /
# no-decay groups, GA 1 and 2, overlap_comm on and off: every phase within 0.37%). No ipg buffer (setup_buckets needs
# contiguous_gradients, l.3260); the boundary's bucket holds the gradients by reference and
# _buffered_reduce_fallback_preserving_fp32 (l.2231-2235 -> l.2484-2511) flushes each run: a one-gradient run is not
# flattened, cast to fp16 (l.2377, x 2) and the rank's slice cast back into the compact partition (l.1326, x 4); stage 1
# clears no gradient without contiguous_gradients (l.2272), so every fp32 grad_accum (4 N) lives to the step's norm.
# Rank 0 peaks at l1.weight's flush, rank 1 at l2.weight's (+ l1.weight's new fp16 gradient beside l1.bias's hook, which
# triggers that flush, with overlap_comm)
NC_BACKWARD1 = PERSIST + 4 * N + 19264 * 2
NC_REDUCE = {0: PERSIST + 4 * N + 4 * P + 19264 * (2 + 4), 1: PERSIST + 4 * N + 4 * P + 23177 * 2 + 21136 * 4}
NC_NORM = {0: PERSIST + 4 * N + 4 * P + 19264 * 8, 1: PERSIST + 4 * N + 4 * P + 21136 * 8}
NC_ENGINE = {(False, "backward:1"): 384248, (False, "forward:2"): 346320, (False, "reduce", 0): 547724,
             (False, "reduce", 1): 563038, (False, "first_step:norm", 0): 586252, (False, "first_step:norm", 1): 601228,
             (True, "reduce", 0): 547728, (True, "reduce", 1): 601570}


@pytest.mark.parametrize("ov", (False, True))
@pytest.mark.parametrize("r", (0, 1))
def test_noncontiguous_by_hand(r, ov):
    led, s = _series(_cfg(contiguous_gradients=False, overlap_comm=ov), r)
    assert not led.peak_lower_bound
    assert s["backward:1"] == NC_BACKWARD1 and s["forward:2"] == PERSIST + 4 * N
    assert s["reduce"] == NC_REDUCE[r] + (19264 * 2 if ov and r == 1 else 0)
    assert s["first_step:norm"] == NC_NORM[r]
    for key, eng in NC_ENGINE.items():
        if key[0] == ov and (len(key) == 2 or key[2] == r):
            got = s[key[1]]
            assert 0 <= eng - got <= 36 or key[1] == "forward:2" and eng - got == 636, (key, eng, got)


# communication_data_type fp32 (engine probes 2026-12-06, 2 runs of TINY GA 2, and its decay / no-decay groups, GA 1,
# overlap_comm, contiguous_gradients off: every phase within 0.37%): the fp32 grad_accum runs need no cast
# (l.2376: the dtypes agree) and the reduced slices reach the fp32 partition without ``source.to(fp32)``'s copy
# (l.1326), so both ranks' reduce peaks at l2.weight's flush with its flat copy alone (rank 0 has dropped l1.weight, its
# own, and moved l1.bias into the bucket; rank 1 keeps l1.weight, rank 0's), and rank 0's backward peak is a hook of
# micro-step 2: l2.weight's new fp16 gradient beside its fp32 copy being added (l.1239) over every grad_accum and the
# bucket
C32_BACKWARD2_R0 = PERSIST + BUCKET + 4 * N + 23177 * (2 + 4)
C32_REDUCE = {0: PERSIST + BUCKET + 4 * (N - 19264 - 301) + 4 * P + 23177 * 4,
              1: PERSIST + BUCKET + 4 * (N - 301) + 4 * P + 23177 * 4}
C32_ENGINE = {("backward:2", 0): 524788, ("reduce", 1): 563644, ("first_step:norm", 0): 453416,
              ("first_step:norm", 1): 545448}


@pytest.mark.parametrize("r", (0, 1))
def test_fp32_communication_by_hand(r):
    led, s = _series({**_cfg(), "communication_data_type": "fp32"}, r)
    assert not led.peak_lower_bound
    assert s["reduce"] == C32_REDUCE[r] and s["first_step:norm"] == NORM[r]
    if r == 0:
        assert s["backward:2"] == C32_BACKWARD2_R0 > s["reduce"]
    for (k, rr), eng in C32_ENGINE.items():
        if rr == r:
            assert 0 <= eng - s[k] <= 42, (k, eng, s[k])


@pytest.mark.parametrize("r", (0, 1))
def test_fp32_communication_noncontiguous_overlap_groups_by_hand(r):
    # the newcomer's buckets with fp32 communication and the decay / no-decay groups (engine probe 2026-12-06: backward:2
    # 546,960 / 547,728 B): no flush casts, so the boundary's peak is l1.weight's hook (the last), its new fp16 gradient
    # and fp32 copy over every grad_accum (none cleared without contiguous_gradients, l.2272) and the partitions the
    # flushes before it made: rank 0 only group 0's (its l1.bias slice is flushed in l1.weight's hook, after that
    # accumulation), rank 1 both
    cfg = {**_cfg(contiguous_gradients=False, overlap_comm=True), "communication_data_type": "fp32"}
    led, s = _series(cfg, r, DECAY)
    assert not led.peak_lower_bound
    want = PERSIST2 + 4 * N + 19264 * (2 + 4) + 4 * (P0 if r == 0 else P0 + P1)
    assert s["reduce"] == want and 0 <= {0: 546960, 1: 547728}[r] - want <= 36


@pytest.mark.parametrize("zero", ({}, {"contiguous_gradients": False, "overlap_comm": True}))
@pytest.mark.parametrize("r", (0, 1))
def test_bf16_communication_is_fp16s(r, zero):
    # bf16 communication (engine probes 2026-12-06, TINY GA 1 and 2 in 2 runs, and the newcomer's buckets with the
    # decay / no-decay groups: every phase within 0.37%): the runs' cast is 2 bytes as fp16's (l.2376-2377) and the
    # slices are cast back (l.1326), so every instant is the fp16-communication plan's
    cfg = _cfg(**zero)
    led, s = _series({**cfg, "communication_data_type": "bf16"}, r)
    _, s16 = _series(cfg, r)
    assert not led.peak_lower_bound and s == s16
    assert s["reduce"] == (REDUCE[r] if not zero else NC_REDUCE[r] + (19264 * 2 if r == 1 else 0))


def test_bf16_accumulation_stays_a_lower_bound():
    # a 16-bit accumulation dtype unlike the model's (bf16 on fp16) without offload: not modelled (engine probe
    # 2026-12-06, the newcomer's buckets with two groups: forward:2 +87,054 B (50%), step:4 rank 1 +78,296 B (15%))
    led, _ = _series({**_cfg(), "data_types": {"grad_accum_dtype": "bf16"}}, 0)
    assert "grad_accum_dtype bf16" in led.peak_lower_bound


# overlap_comm (engine cell z1_fp16_gaccfp32_overlap_groups_tbsga2_w2 and a TINY probe, 2026-12-06: backward:1
# 464,248 B, forward:2 426,320 B, backward:2 687,866 B on both ranks, step:2 453,416 / 545,448 B): two fp32 ipg buffers
# (setup_buckets l.3266, l.3275); micro-step 1's hooks reduce nothing (l.2293-2295); the boundary's hooks, in autograd's
# order (l3.bias, l3.weight, l2.bias, l2.weight, l1.bias, l1.weight), move each grad_accum into a buffer (l.1456-1461,
# freeing it) or, over the bucket, keep it for the next hook's flush (l.1441-1449). The peak is l1.bias's hook flushing
# l2.weight: every grad_accum but the 467 elements moved, l1.weight's new fp16 gradient (made with l1.bias's, not yet
# accumulated), l2.weight's run of both ranks' slices flattened (x 4, l.2367) and cast to fp16 (x 2, l.2377), and the
# compact partition (rank 0's made in that flush, rank 1's in the first)
OV_BACKWARD1 = PERSIST + 2 * BUCKET + 4 * N + 19264 * 2
OV_FORWARD2 = PERSIST + 2 * BUCKET + 4 * N
OV_REDUCE = PERSIST + 2 * BUCKET + 4 * (N - 467) + 19264 * 2 + 23177 * (4 + 2) + 4 * P
OV_ENGINE = {"backward:1": 464248, "forward:2": 426320, "reduce": 687866}


@pytest.mark.parametrize("r", (0, 1))
def test_overlap_comm_by_hand(r):
    led, s = _series(_cfg(overlap_comm=True), r)
    assert not led.peak_lower_bound
    assert s["backward:1"] == OV_BACKWARD1 and s["forward:2"] == OV_FORWARD2
    assert s["reduce"] == OV_REDUCE
    assert s["first_step:norm"] == NORM[r]  # the kept grad_accum as without overlap_comm (one buffer keeps views)
    for k, eng in OV_ENGINE.items():
        assert 0 <= eng - s[k] <= 36 or k == "forward:2" and eng - s[k] == 636, (k, eng, s[k])


# The HF Trainer's two param groups (weights with decay, biases without; engine cell z1_fp16_gaccfp32_groups_tbsga2_w2,
# probe 2026-12-06: reduce 586,956 / 610,434 B, first step 470,616 / 504,576 B on ranks 0 / 1). Group 0 = l1.weight,
# l2.weight, l3.weight: 42,826 elements padded to 42,828 (P0 = 21,414: rank 0 holds l1.weight whole and 2,150 of
# l2.weight, rank 1 the other 21,027 and l3.weight); group 1 = the biases, 383 -> 384 (P1 = 192: rank 0 192 of l1.bias,
# rank 1 its other 109, l2.bias, l3.bias). The epilogue walks group 0 then group 1 in one fp32 bucket (l.971-976).
DECAY = {**TINY, "tensors": [dict(t, group=1 if t["name"].endswith("bias") else 0) for t in TINY["tensors"]]}
P0, P1 = 21414, 192
PERSIST2 = (2 * P0 + 2 * P1) * 2 + (P0 + P1) * 4  # the fp16 flat groups and the fp32 masters
# rank 0 at l1.weight's flush (extra-large, one slice of its own: l.1441-1449): every grad_accum (4 N), group 0's compact
# partition made there (P0 x 4, l.1303-1310), l1.weight cast to fp16 (l.2377) and its slice cast back (l.1326);
# rank 1 at l2.weight's: l1.weight kept (rank 0's, l.2272-2274) so still 4 N, group 0's partition, the run of both
# ranks' slices flattened (23,177 x 4, l.2367) beside its fp16 cast (x 2)
GREDUCE = {0: PERSIST2 + BUCKET + 4 * N + 4 * P0 + 19264 * (2 + 4),
           1: PERSIST2 + BUCKET + 4 * N + 4 * P0 + 23177 * (4 + 2)}
# the norm: both partitions, the largest slice's fp64 copy (l.2684), rank 0 the bucket (l3.weight, l2.bias, l3.bias miss
# its slices), rank 1 l1.weight's fp32 grad_accum
GNORM = {0: PERSIST2 + 4 * (P0 + P1) + 19264 * 8 + BUCKET, 1: PERSIST2 + 4 * (P0 + P1) + 21027 * 8 + 19264 * 4}
# rank 0's first update of group 0 (step's loop, l.3075-3103): group 0's unowned grad_accum freed, its fp32 gradient
# the compact partition (no copy), its Adam moments 2 x P0 x 4 made, group 1's partition and the bucket its l2.bias /
# l3.bias still keep
GUPDATE0 = PERSIST2 + 4 * P0 + 8 * P0 + 4 * P1 + BUCKET
GENGINE = {("reduce", 0): 586956, ("reduce", 1): 610434, ("first_step:norm", 1): 504576,
           ("first_step:update", 0): 470616}


@pytest.mark.parametrize("r", (0, 1))
def test_two_param_groups_by_hand(r):
    led, s = _series(_cfg(), r, DECAY)
    assert not led.peak_lower_bound
    assert s["reduce"] == GREDUCE[r]
    assert s["first_step:norm"] == GNORM[r]
    if r == 0:
        # the ledger's one update instant counts both groups' moments: over the hand figure by at most group 1's
        assert 0 <= s["first_step:update"] - GUPDATE0 <= 8 * P1, s["first_step:update"]
        assert s["first_step:update"] > GNORM[0]  # the first step's peak is the update, not the norm
    for (k, rr), eng in GENGINE.items():
        if rr == r:
            assert abs(eng - s[k]) <= 0.01 * eng, (k, eng, s[k])


def test_overlap_comm_keeps_both_buffers_by_hand():
    """overlap_comm's two fp32 ipg buffers: setup_buckets resets the index to 0 (l.3270) and each flush a hook triggers
    swaps it (l.1427-1429), so eight 6,000-element tensors at reduce_bucket_size 10,000 are flushed one at a time,
    alternately from buffer 0 and 1, in hook order t7 .. t0; rank 0 owns t0-t3 (P = 24,000) and keeps the views of
    t4-t7 (l.2272-2274), rank 1 those of t0-t3, in both buffers: 2 x RBS x 4 to the step's norm. Engine probe
    (2026-12-06, W 2, GA 2 and GA 1, flat proxy): steady_step:norm 608,060 B on both ranks, 40,060 B over the ledger
    that counted one buffer; now +60 B (proxy scalars)."""
    inv = {"name": "small8", "tensors": [{"name": f"t{i}.w", "shape": [6000]} for i in range(8)]}
    n, p = 48000, 24000
    for r in (0, 1):
        led, s = _series(_cfg(overlap_comm=True), r, inv)
        assert not led.peak_lower_bound
        base = n * 2 + p * 4 + 4 * p + 6000 * 8 + 2 * BUCKET  # flat fp16, master, partition, the fp64 copy, 2 buffers
        assert s["first_step:norm"] == base
        assert s["steady_step:norm"] == base + 8 * p and 608060 - s["steady_step:norm"] == 60
