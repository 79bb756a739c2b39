"""The step timeline (advisor.ledger.timeline): peaks are maxima over instants of what is live
together. Expected figures are computed here by hand from the reference's partition rules
(../shared/reference/deepspeed-0.19.8-state-accounting.md sections 3.1, 4.2, 5) and DeepSpeed's
code order in ``stage_1_and_2.py`` DeepSpeedZeroOptimizer.step / ``_release_ipg_buffers``."""

from __future__ import annotations

import json

from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.ledger.timeline import resolve_load, role_timeline
from advisor.model.inventory import Inventory, TensorSpec, from_param_count
from tests.conftest import run_cli

#: The reference's odd-sized MLP (section 0): n = [19264, 301, 23177, 77, 385, 5], N = 43,209.
MLP = Inventory(name="mlp", tensors=[TensorSpec(f"l{i}.w", (n,)) for i, n in
                                     enumerate([19264, 301, 23177, 77, 385, 5])], source="test")
ACC = ("accelerator",)
HOST = ("host_pinned", "host_pageable")


def _tl(cfg, inv, W, rank=0, **load):
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=W)))
    return role_timeline(led, led.rank(rank), resolve_load(ec, **load), ga=1, rank=rank)


def _at(tl, key, tiers=ACC):
    i = [x.key for x in tl.instants].index(key)
    return tl.series(tiers)[i]


def test_zero2_bf16_step_does_not_count_the_freed_ipg_bucket():
    # W = 4: N_pad = A_8(43209) = 43216, P = 10804. Rank 1's slice [10804, 21608) meets tensors
    # 0, 1, 2: I_1 = 19264 + 301 + 23177 = 42742, Cov_1 = P, so averaged_gradients = 42742 x 2 B.
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2, "reduce_bucket_size": 50000, "overlap_comm": False,
                                 "contiguous_gradients": True}}
    tl = _tl(cfg, MLP, 4, rank=1)
    P, params, kept = 10804, 43216 * 2, 42742 * 2
    states = params + P * 4 + 2 * P * 4          # 16-bit flat + fp32 master + exp_avg + exp_avg_sq
    ipg = 50000 * 2                               # one bucket (overlap_comm false), freed by the epilogue
    # backward (ZeRO-2 hooks, reverse model order): one gradient at a time is moved into the
    # bucket; the largest is tensor 2, 23177 x 2 B. All 43,209 elements fit one bucket, reduced
    # in the epilogue: allreduce_bucket flattens its slices (several ranks: a new 43209 x 2 B
    # tensor) before grads_in_partition (averaged_gradients) is allocated.
    assert _at(tl, "steady:backward") == states + ipg + 23177 * 2
    assert _at(tl, "steady:reduce") == states + ipg + 43209 * 2
    # norm: get_grad_norm_direct casts each of rank 1's slices to fp64; the largest is the end of
    # tensor 0, 19264 - 10804 = 8460 elements x 8 B
    assert _at(tl, "steady_step:norm") == states + kept + 8460 * 8
    # step: flatten(averaged) (P x 2, a new tensor: three tensors meet the slice) cast to fp32 (P x 4)
    assert _at(tl, "steady_step:prep") == states + kept + P * 2 + P * 4
    # update: averaged_gradients released before _optimizer_step, the flat copy deleted
    assert _at(tl, "steady_step:update") == states + P * 4
    b, i = tl.peak(ACC)
    assert b == states + ipg + 43209 * 2 and tl.instants[i].key == "steady:reduce"
    # lazily created moments: not live in the first iteration
    assert _at(tl, "reduce") == params + P * 4 + ipg + 43209 * 2


def test_zero12_bucket_flushes_by_hand():
    # TINY with tensors 2-3 frozen and 4-5 in group 1, bf16, W = 2, reduce_bucket_size 10,000.
    # Group 0: [19264, 301] -> N_pad 19568, P = 9784; group 1: [385, 5] -> P = 196.
    # Rank 0 owns tensor 0's first 9784 and group 1's first 196: I_0 = 19264 + 385 = 19649.
    inv = Inventory(name="g", source="test", tensors=[
        TensorSpec("a", (19264,)), TensorSpec("b", (301,)), TensorSpec("c", (23177,), trainable=False),
        TensorSpec("d", (77,), trainable=False), TensorSpec("e", (385,), group=1), TensorSpec("f", (5,), group=1)])
    base = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    z = {"reduce_bucket_size": 10000, "overlap_comm": False, "contiguous_gradients": True}
    ec = effective_config({**base, "zero_optimization": {"stage": 2, **z}})
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=2)))
    got = {e.item: e.bytes for e in led.rank(0).entries}
    # ZeRO-2 hooks f, e, b (691 elements), then a (19264 > 10,000): flush 1 of f, e, b (three
    # merged slices r1, r0, r1: a 691 x 2 copy) while a's gradient is live; a then stays in its
    # own storage (extra large) and is reduced by the epilogue as slices r0 + r1 (one run over
    # 10,000: flattened, 19264 x 2), with grads_in_partition (I_0 x 2) allocated by flush 1.
    assert got["reduce_transient"] == max(691 * 2 + 19264 * 2, 19264 * 2 + 19264 * 2 + 19649 * 2)
    assert got["backward_transient"] == (19264 + 19649) * 2
    assert got["grad_norm_fp64"] == 9784 * 8  # rank 0's largest slice, cast to fp64
    ec = effective_config({**base, "zero_optimization": {"stage": 1, **z}})
    got = {e.item: e.bytes for e in compute_ledger(Plan(ec, inv, Cluster(world_size=2))).rank(0).entries}
    # ZeRO-1's epilogue loop a, b, e, f: a flushes the empty bucket, b flushes a (its own
    # storage, flattened 19264 x 2) while b, e, f (691 x 2) are not yet moved; after that flush,
    # copy_grads_in_partition allocates grads_in_partition (19649 x 2) while a's own storage is
    # still live (the flat copy freed); the epilogue flushes b, e, f (691 x 2) with
    # grads_in_partition live
    assert got["reduce_transient"] == max(19264 * 2 + 19264 * 2 + 691 * 2, 691 * 2 + 19264 * 2 + 19649 * 2,
                                          691 * 2 + 19649 * 2) == 691 * 2 + 19264 * 2 + 19649 * 2
    assert "backward_transient" not in got


def test_zero2_linear_bias_hook_runs_beside_its_weights_gradient():
    # nn.Linear layers (weight (out, in), bias (out)): AddmmBackward0 makes both gradients; the
    # bias's AccumulateGrad runs first (the weight's passes TBackward0), so its ZeRO-2 hook runs
    # while the weight's gradient is whole (measured: z2_bf16_linear_smallbucket_w2).
    # bf16, W = 2, reduce_bucket_size 10,000: N_pad = A_4(43209) = 43212, P = 21606; rank 0 owns
    # l1.weight, l1.bias and 2,041 of l2.weight: I_0 = 19264 + 301 + 23177 = 42742, Cov_0 = P.
    # Hooks l3.bias, l3.weight, l2.bias (467), l2.weight flushes them (one rank-1 slice, a view);
    # l2.weight (23,177 > 10,000) stays in its own storage; l1.bias flushes it (two slices, one
    # run: 23177 x 2 copy) and allocates grads_in_partition: live then the unmoved l1.bias (301)
    # + l1.weight's gradient (19,264, the sibling) + l2.weight's own storage (23,177) + I_0.
    shapes = [("l1.weight", (301, 64)), ("l1.bias", (301,)), ("l2.weight", (77, 301)), ("l2.bias", (77,)),
              ("l3.weight", (5, 77)), ("l3.bias", (5,))]
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2, "reduce_bucket_size": 10000, "overlap_comm": False,
                                 "contiguous_gradients": True}}
    lin = Inventory(name="lin", tensors=[TensorSpec(n, sh) for n, sh in shapes], source="test")
    from advisor.ledger.state import autograd_siblings
    assert autograd_siblings(lin) == [0, 19264, 0, 23177, 0, 385]
    led = compute_ledger(Plan(effective_config(cfg), lin, Cluster(world_size=2)))
    got = {e.item: e.bytes for e in led.rank(0).entries}
    assert got["reduce_transient"] == (301 + 19264 + 23177 + 42742) * 2
    # a hook's autograd bytes: l2.bias (77) with l2.weight whole (23,177) before grads_in_partition
    # exists; l1.bias's hook allocates it and still holds l1.bias (301) with l1.weight (19,264)
    assert got["backward_transient"] == max(77 + 23177, 301 + 19264 + 42742) * 2
    # the same shapes with one autograd node per tensor (names that are no weight/bias pair):
    # the unmoved gradient is l1's bias alone
    flat = Inventory(name="flat", tensors=[TensorSpec(f"t{i}", sh) for i, (_, sh) in enumerate(shapes)],
                     source="test")
    assert autograd_siblings(flat) == [0] * 6
    got = {e.item: e.bytes for e in compute_ledger(Plan(effective_config(cfg), flat, Cluster(world_size=2)))
           .rank(0).entries}
    assert got["reduce_transient"] == (301 + 23177 + 42742) * 2
    # ZeRO-1 moves every gradient in the epilogue (all of them live anyway): no sibling term
    z1 = {**cfg, "zero_optimization": {**cfg["zero_optimization"], "stage": 1}}
    a = {e.item: e.bytes for e in compute_ledger(Plan(effective_config(z1), lin, Cluster(world_size=2))).rank(0).entries}
    b = {e.item: e.bytes for e in compute_ledger(Plan(effective_config(z1), flat, Cluster(world_size=2))).rank(0).entries}
    assert a["reduce_transient"] == b["reduce_transient"]


def test_zero12_steps_one_param_group_at_a_time_by_hand():
    # The two-group model above, bf16, W = 2 (stage_1_and_2.py step: for each group i, flatten
    # and cast, drop its views, _optimizer_step(i) with param_groups = [group i]).
    # Group 0: P_0 = 9784, group 1: P_1 = 196. Rank 0: I = 19264 + 385 = 19649, no pads, both
    # slices inside one tensor (no flat copy). Rank 1: group 0's slice [9784, 19568) meets a and b
    # (I = 19565, Cov = 9781, pad 3, flat copy), group 1's [196, 392) meets e and f (I = 390,
    # Cov = 194, pad 2, flat copy). grads_in_partition = sum I x 2, one buffer for both groups.
    inv = Inventory(name="g", source="test", tensors=[
        TensorSpec("a", (19264,)), TensorSpec("b", (301,)), TensorSpec("c", (23177,), trainable=False),
        TensorSpec("d", (77,), trainable=False), TensorSpec("e", (385,), group=1), TensorSpec("f", (5,), group=1)])
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2, "reduce_bucket_size": 10000, "overlap_comm": False,
                                 "contiguous_gradients": True}}
    # persistent: 16-bit flat groups (19568 + 392) x 2, fp32 master (9784 + 196) x 4, the frozen
    # tensors (23177 + 77) x 2 (not partitioned at ZeRO-1/2)
    base = (19568 + 392) * 2 + (9784 + 196) * 4 + (23177 + 77) * 2
    for rank, gip, pads, flats in ((0, 19649 * 2, (0, 0), (0, 0)), (1, 19955 * 2, (3, 2), (9784, 196))):
        tl = _tl(cfg, inv, 2, rank=rank)
        keys = [x.key for x in tl.instants]
        assert [k for k in keys if k.startswith("first_step")] == [
            "first_step:norm", "first_step:g0:prep", "first_step:g0:update", "first_step:g1:prep", "first_step:g1:update"]
        # group 0 prep: no moments yet; both groups' gradients (grads_in_partition + pads), the
        # flat copy and the fp32 gradient of group 0
        assert _at(tl, "first_step:g0:prep") == base + gip + (pads[0] + pads[1]) * 2 + flats[0] * 2 + 9784 * 4
        # group 0 update: its moments created (2 x P_0 x 4); group 1's views keep grads_in_partition
        # live, with group 1's pads; group 1 has no moments yet
        assert _at(tl, "first_step:g0:update") == base + 2 * 9784 * 4 + 9784 * 4 + gip + pads[1] * 2
        assert _at(tl, "first_step:g1:prep") == base + 2 * 9784 * 4 + gip + pads[1] * 2 + flats[1] * 2 + 196 * 4
        # group 1 update: its views dropped, grads_in_partition freed; every moment exists
        assert _at(tl, "first_step:g1:update") == base + 2 * 9980 * 4 + 196 * 4
        assert _at(tl, "steady_step:g0:update") == base + 2 * 9980 * 4 + 9784 * 4 + gip + pads[1] * 2
        # the first step peaks at group 0's update, and its label names the group
        first = [i for i, x in enumerate(tl.instants) if x.phase == "first_step"]
        top = max(first, key=lambda i: tl.series(ACC)[i])
        assert keys[top] == "first_step:g0:update" and "param group 0 of 2" in tl.instants[top].label


def test_zero12_fp32_groups_step_one_at_a_time_by_hand():
    # The two-group model above in fp32 (D = 4), W = 2, at ZeRO-2 and ZeRO-1: the step updates one
    # group at a time as in 16-bit (stage_1_and_2.py step's group loop), but flatten's result is
    # already fp32 and .to(fp32) returns it (l.3112-3118): the fp32 gradient is the flat copy (P_g x 4,
    # rank 1) or, where the slice lies in one tensor (rank 0, both groups), a view of
    # grads_in_partition that keeps it whole through the group's update. Engine
    # (tests/engine/test_peak_parity.py z2_fp32_groups_w2 / z1_fp32_groups_w2, step:1): rank 0
    # 371,260 B at group 1's update, rank 1 410,060 B at group 0's, these + 48 B of scalars.
    inv = Inventory(name="g", source="test", tensors=[
        TensorSpec("a", (19264,)), TensorSpec("b", (301,)), TensorSpec("c", (23177,), trainable=False),
        TensorSpec("d", (77,), trainable=False), TensorSpec("e", (385,), group=1), TensorSpec("f", (5,), group=1)])
    base = (19568 + 392) * 4 + (9784 + 196) * 4 + (23177 + 77) * 4   # flat model, master, frozen: fp32
    for stage in (1, 2):
        cfg = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
               "zero_optimization": {"stage": stage, "reduce_bucket_size": 10000, "overlap_comm": False,
                                     "contiguous_gradients": True}}
        t0 = _tl(cfg, inv, 2, rank=0)
        gip = 19649 * 4                                    # grads_in_partition, I_0 = 19264 + 385
        assert _at(t0, "first_step:g0:prep") == base + gip
        assert _at(t0, "first_step:g0:update") == base + 2 * 9784 * 4 + gip
        assert _at(t0, "first_step:g1:update") == base + 2 * 9980 * 4 + gip
        t1 = _tl(cfg, inv, 2, rank=1)
        gip = 19955 * 4                                    # I_1 = 19565 + 390; pads 3 and 2
        assert _at(t1, "first_step:g0:prep") == base + gip + (3 + 2) * 4 + 9784 * 4
        assert _at(t1, "first_step:g0:update") == base + 2 * 9784 * 4 + 9784 * 4 + gip + 2 * 4
        assert _at(t1, "first_step:g1:update") == base + 2 * 9980 * 4 + 196 * 4


def test_zero12_cpu_offload_norm_copy_in_backward_by_hand():
    # CPU offload: copy_grads_in_partition -> set_norm_for_param_grad_in_gpu casts each of the
    # rank's gradient slices to fp64 (one at a time) during the reduce. W = 2: N_pad = 43212,
    # P = 21606. Rank 0's slice [0, 21606): tensor 0 whole (19264), tensor 1 (301), tensor 2's
    # first 2041; rank 1's [21606, 43212): tensor 2's rest 23177 - 2041 = 21136, then 77, 385, 5.
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2, "reduce_bucket_size": 50000, "overlap_comm": False,
                                 "offload_optimizer": {"device": "cpu"}}}
    for rank, big in ((0, 19264), (1, 21136)):
        tl = _tl(cfg, MLP, 2, rank=rank)
        every = ("accelerator", "host_pinned", "host_pageable")
        assert _at(tl, "steady:reduce", every) - _at(tl, "steady:backward", every) == big * 8
        assert _at(tl, "steady_step:prep", every) == _at(tl, "steady_step:update", every)  # no copy in the step


def test_zero2_cpu_offload_clones_a_gradient_larger_than_the_bucket_by_hand():
    # CPU offload, reduce_bucket_size 10,000 < tensors 0 (19,264) and 2 (23,177): each is cloned in
    # its hook (stage_1_and_2.py l.1443-1446, _offload_gradient_safety_enabled = cpu_offload, l.232)
    # and reduced alone in that clone; its flush casts the rank's slice of it to fp64
    # (set_norm_for_param_grad_in_gpu). Slices as in the test above (W = 2, P = 21606): rank 0 holds
    # tensor 0 whole, 301 and 2041 of tensor 2; rank 1 21136 of tensor 2, then 77, 385, 5. A flush of
    # p holds s_p,r x 8 + n_p x 2 (bf16) + the gradient whose hook triggered the flush, still whole (the
    # norm copies run inside reduce_ipg_grads, before the trigger is moved: tensor 2's flush is triggered
    # by tensor 1, 301 x 2; tensor 0's is the epilogue's): rank 0 max(19264 x 8 + 19264 x 2,
    # 2041 x 8 + 23177 x 2 + 301 x 2) = 192,640; rank 1 max(21136 x 8 + 23177 x 2 + 301 x 2, 0 + 19264 x 2)
    # = 216,044 (the engine's z2_bf16_oo_cpu_bigtensor_w2 tracker with these one-node-per-tensor
    # gradients: 192,692 and 216,112 over the bytes before backward)
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2, "reduce_bucket_size": 10000, "overlap_comm": False,
                                 "offload_optimizer": {"device": "cpu"}}}
    every = ("accelerator", "host_pinned", "host_pageable")
    for rank, flush in ((0, 19264 * 8 + 19264 * 2), (1, 21136 * 8 + 23177 * 2 + 301 * 2)):
        tl = _tl(cfg, MLP, 2, rank=rank)
        before = _at(tl, "steady:forward", every) + 10000 * 2  # + the ipg bucket (10,000 x bf16)
        assert _at(tl, "steady:reduce", every) - before == flush
        # in the hook, the clone of tensor 2 beside the autograd gradient it replaces
        assert _at(tl, "steady:backward", every) - before == 2 * 23177 * 2
    # ZeRO-1 reaches that code in its boundary reduce (the epilogue loop, tensors in order), and a rank
    # owning no part of a cloned gradient keeps the clone (l.2272-2274: only owners copy, and so drop it).
    # Rank 0's largest moment is tensor 0's flush (19264 x 8 + its clone 19264 x 2 + tensors 1.. whole,
    # 23945 x 2 = 240,530 B, over tensor 2's 2041 x 8 + 23177 x 2 + 467 x 2 = 63,616): clone 38,528 B;
    # rank 1's tensor 2's flush, 21136 x 8 + 23177 x 2 + tensor 0's kept clone 19264 x 2 + 467 x 2:
    # clones 84,882 B (the engine's z1_bf16_oo_cpu_smallbucket_w4 holds both clones on its non-owners)
    z1 = {**cfg, "zero_optimization": {**cfg["zero_optimization"], "stage": 1}}
    ec = effective_config(z1)
    led = compute_ledger(Plan(ec, MLP, Cluster(world_size=2)))
    for rank, clones in ((0, 19264 * 2), (1, (23177 + 19264) * 2)):
        got = [e.bytes for e in led.rank(rank).entries if e.item == "offload_xl_grad_clone"]
        assert got == [clones], (rank, got)
        assert not [e for e in led.rank(rank).entries if e.item == "offload_xl_grad_cloning"]


def test_zero2_fp32_flattened_grad_is_the_kept_storage():
    # fp32, W = 4: rank 0's slice [0, 10804) lies inside tensor 0, so flatten returns the kept
    # averaged_gradients view ((I + P - Cov) x 4 = 19264 x 4) and .to(fp32) is a no-op: one storage.
    cfg = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2, "reduce_bucket_size": 50000, "overlap_comm": False}}
    tl = _tl(cfg, MLP, 4, rank=0)
    P = 10804
    states = 43216 * 4 + P * 4 + 2 * P * 4
    assert _at(tl, "steady_step:prep") == states + 19264 * 4
    assert _at(tl, "steady_step:update") == states + 19264 * 4


def test_zero12_fp32_bucket_copy_and_norm_copies_by_hand():
    # fp32 (D = 4), W = 2, one 50,000-element bucket: N_pad = A_4(43209) = 43212, P = 21606. Rank 0's
    # slice [0, 21606) meets tensors 0, 1, 2: I_0 = 19264 + 301 + 23177 = 42742, Cov_0 = P; rank 1's
    # [21606, 43212) holds 23177 - 2041 = 21136 of tensor 2 and tensors 3-5: I_1 = 23644, Cov_1 = 21603.
    # stage_1_and_2.py, the same code as a 16-bit model with self.dtype fp32: the epilogue's flush
    # flattens the whole bucket (allreduce_bucket l.2367 self.flatten(bucket): the two ranks' runs,
    # 43,209 elements <= reduce_bucket_size, in one allreduce_and_scatter bucket) before
    # copy_grads_in_partition (l.2192) allocates grads_in_partition; the step's norm casts each slice
    # to fp64 (get_grad_norm_direct l.2684, zero/utils.py get_norm_dtype l.59-63) beside it.
    # Engine (tests/engine/test_peak_parity.py z2_fp32_w2 / z1_fp32_w2): these + 48-60 B of scalars.
    base = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    z = {"reduce_bucket_size": 50000, "overlap_comm": False, "contiguous_gradients": True}
    P = 21606
    kept = 43212 * 4 + P * 4                      # fp32 flat model copy + fp32 master (moments lazy)
    ipg = 50000 * 4
    for stage in (1, 2):
        cfg = {**base, "zero_optimization": {"stage": stage, **z}}
        t0, t1 = _tl(cfg, MLP, 2, rank=0), _tl(cfg, MLP, 2, rank=1)
        for tl in (t0, t1):
            assert _at(tl, "reduce") == kept + ipg + 43209 * 4
        # the first step's norm: averaged_gradients (I_r + P - Cov_r) x 4 + the largest slice x 8
        assert _at(t0, "first_step:norm") == kept + 42742 * 4 + 19264 * 8
        assert _at(t1, "first_step:norm") == kept + (23644 + 3) * 4 + 21136 * 8
    # ZeRO-1's backward holds every autograd gradient (N x 4) with the bucket; ZeRO-2's hooks one at a time
    cfg = {**base, "zero_optimization": {"stage": 1, **z}}
    assert _at(_tl(cfg, MLP, 2), "backward:1") == kept + ipg + 43209 * 4
    cfg = {**base, "zero_optimization": {"stage": 2, **z}}
    assert _at(_tl(cfg, MLP, 2), "backward:1") == kept + ipg + 23177 * 4


def test_nvme_first_step_creates_the_moments_on_the_host():
    # ZeRO-3, optimizer on NVMe, W = 1, one sub-group of S = 2,000,000 elements (8 MB >= 1 MiB: swapped):
    # DeepSpeedCPUAdam creates exp_avg and exp_avg_sq (2 x S x 4 B) in step 1 only.
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp/x"}}}
    inv = Inventory(name="one", tensors=[TensorSpec("w", (2000, 1000))], source="test")
    tl = _tl(cfg, inv, 1)
    extra = _at(tl, "first_step:update", HOST) - _at(tl, "steady_step:update", HOST)
    assert extra == 2 * 2_000_000 * 4


def test_save_16bit_gathers_a_module_on_every_rank_and_the_state_dict_on_rank_0():
    """engine.save_16bit_model (engine.py l.5707-5755) at ZeRO-3 with the gather:
    _zero3_consolidated_16bit_state_dict (l.5631-5700) runs checkpoint_event_prologue (stage3.py
    l.3844: every parameter partitioned, the persistent ones too), then GatheredParameters on each
    module's own parameters on EVERY rank (rank 0 copies each to the CPU), then the epilogue
    gathers the persistent parameters again while rank 0's state dict is whole."""
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}}
    t0, t1 = _tl(cfg, MLP, 2, rank=0), _tl(cfg, MLP, 2, rank=1)
    persistent = (19264 + 302 + 23178 + 78 + 386 + 6) * 2      # every MLP tensor <= 1e5: sum ceil(n/2) x 2 x 2 B
    for t in (t0, t1):
        # during the gather: the persistent parameters released, the largest module l2.w whole,
        # ceil(23177/2) x 2 x 2 B, on rank 1 as on rank 0
        assert _at(t, "save:16bit") == _at(t, "save") - persistent + 23178 * 2
        assert _at(t, "save:16bit:end") == _at(t, "save")
    # host: rank 0's state dict; while l2.w is gathered it holds l0.w, l1.w and l2.w's own copy
    # ((19264 + 301 + 23177) x 2 B); whole at the epilogue, N x 2 B; nothing on rank 1
    assert _at(t0, "save:16bit", HOST) == (19264 + 301 + 23177) * 2
    assert _at(t0, "save:16bit:end", HOST) == 43209 * 2
    assert _at(t1, "save:16bit", HOST) == _at(t1, "save:16bit:end", HOST) == 0
    # save_checkpoint never gathers (engine.py l.4869-4966: module_state_dict, placeholders at
    # ZeRO-3); its prologue releases the persistent parameters while the files are written
    assert _at(t0, "save:model") == _at(t0, "save") - persistent
    assert _at(t0, "save:model", HOST) == 0
    # torch.save copies one accelerator storage at a time to the host (torch/serialization.py
    # l.1290-1310): the optimizer file's largest, the sub-group's fp32 partition, sum ceil(n/2) x 4 B
    assert _at(t0, "save:optim", HOST) == _at(t1, "save:optim", HOST) == 21607 * 4


def test_save_checkpoint_stages_rank_0s_model_file_below_zero3():
    """ZeRO-1, W = 4: only dp rank 0 writes mp_rank_00_model_states.pt (engine.py l.1909-1911),
    whose module weights are views of the padded flat bf16 buffer, N_pad = A_8(43209) = 43216
    elements: torch.save copies that whole storage to the host (86,432 B); every rank writes its
    optimizer file, whose largest storages are the fp32 partition and moments, P = 43216 / 4 =
    10804 elements x 4 B = 43,216 B, one at a time."""
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1}}
    t0, t1 = _tl(cfg, MLP, 4, rank=0), _tl(cfg, MLP, 4, rank=1)
    assert _at(t0, "save:model", HOST) == 43216 * 2 and _at(t1, "save:model", HOST) == 0
    assert _at(t0, "save:optim", HOST) == _at(t1, "save:optim", HOST) == 10804 * 4
    assert _at(t0, "save:16bit", HOST) == 43216 * 2  # save_16bit_model: the same module state dict
    # with the optimizer in host memory nothing of it is staged
    off = {**cfg, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}}
    assert _at(_tl(off, MLP, 4, rank=1), "save:optim", HOST) == _at(_tl(off, MLP, 4, rank=1), "save", HOST)


def test_rank_0_is_its_own_role_when_it_gathers_the_16bit_model_on_save():
    """8 ranks, ZeRO-3, stage3_gather_16bit_weights_on_model_save: only rank 0 keeps the gathered
    16-bit model (engine.py _zero3_consolidated_16bit_state_dict: GatheredParameters with
    modifier_rank=0, rank 0 copies each tensor to the CPU). Every rank's ledger is the same
    (ceil(n / 8) of each tensor), yet the roles must be {0} and {1..7}: the role of ranks 0-7
    showed rank 0's N x 2 B on all eight."""
    from advisor.views.estimate import plan_fit
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}}
    pf = plan_fit(Plan(effective_config(cfg), MLP, Cluster(world_size=8, gpus_per_node=8)))
    assert [list(r.ranks) for r in pf.roles] == [[0], list(range(1, 8))]
    r0, rest = pf.roles
    # host: N x 2 B on rank 0 (43209 elements in bf16), nothing on the others (no offload)
    assert _at(r0.timeline, "save:16bit:end", HOST) == 43209 * 2 and _at(rest.timeline, "save:16bit:end", HOST) == 0
    # accelerator: every rank gathers the same module, the largest: l2.w, ceil(23177 / 8) x 8 = 23184 x 2 B
    assert _at(r0.timeline, "save:16bit") == _at(rest.timeline, "save:16bit")
    # the node's host peak: the eight optimizer files staged at once, each the rank's sub-group
    # fp32 partition sum ceil(n_i / 8) = 2408 + 38 + 2898 + 10 + 49 + 1 = 5404 elements x 4 B,
    # more than rank 0's 86,418 B state dict
    host = next(r for r in pf.rows if r.tier == "host")
    assert (host.need, host.instant) == (8 * 5404 * 4, "save:optim")
    # without the gather every rank is alike: one role
    cfg["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = False
    pf = plan_fit(Plan(effective_config(cfg), MLP, Cluster(world_size=8, gpus_per_node=8)))
    assert [list(r.ranks) for r in pf.roles] == [list(range(8))]


def test_hf_zero3_rank_0_holds_the_checkpoint_state_dict_at_load():
    """transformers 5.25.0 from_pretrained under ZeRO-3 (modeling_utils.py _load_pretrained_model
    l. 4576-4591): once the model is built under zero.Init, rank 0 reads the whole checkpoint
    (map_location "cpu", every file merged), the other ranks only its shapes ("meta"); then
    _load_state_dict_into_zero3_model gathers one module at a time (GatheredParameters,
    modifier_rank=0) and rank 0 copies the values in. By hand, MLP (N = 43209) on W = 4, bf16
    config, offload_param cpu (the partitions in host memory), a bf16 checkpoint:
    partitions ceil(n / 4) = 4816 + 76 + 5795 + 20 + 97 + 2 = 10806 elements x 2 B = 21612 B per
    rank; rank 0's state dict 43209 x 2 B = 86418 B; the largest module gathered, l2:
    5795 x 4 x 2 B = 46360 B on the accelerator."""
    from advisor.views.estimate import plan_fit
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}
    ec = effective_config(cfg)
    plan = Plan(ec, MLP, Cluster(world_size=4, gpus_per_node=4))
    load = resolve_load(ec, hf=True, checkpoint_dtype="bf16")
    assert load.zero_init and load.state_dict_dtype == "bf16"
    pf = plan_fit(plan, load=load)
    assert [list(r.ranks) for r in pf.roles] == [[0], [1, 2, 3]]
    r0, rest = pf.roles
    parts = 10806 * 2
    assert _at(r0.timeline, "load:state_dict", HOST) == 43209 * 2 + parts
    assert _at(rest.timeline, "load:state_dict", HOST) == parts
    assert _at(r0.timeline, "load:state_dict") == _at(rest.timeline, "load:state_dict") == 5795 * 4 * 2
    host = next(r for r in pf.rows if r.tier == "host")
    assert host.load_need == 43209 * 2 + 4 * parts  # the node: rank 0's state dict once, 4 ranks' partitions
    # the state dict is read as stored: an fp32 checkpoint (config.json torch_dtype float32) is 4 B each
    pf = plan_fit(plan, load=resolve_load(ec, hf=True, checkpoint_dtype="fp32"))
    assert _at(pf.roles[0].timeline, "load:state_dict", HOST) == 43209 * 4 + parts
    # gone once from_pretrained returns: nothing of it at initialize
    assert _at(pf.roles[0].timeline, "initialize", HOST) == _at(pf.roles[1].timeline, "initialize", HOST)
    # not HF (a script's own zero.Init build), or HF below ZeRO-3 (every rank loads): no such instant
    for ld in (resolve_load(ec), resolve_load(effective_config({**cfg, "zero_optimization": {"stage": 2}}), hf=True,
                                              checkpoint_dtype="bf16")):
        assert ld.state_dict_dtype is None
    pf = plan_fit(plan, load=resolve_load(ec))
    assert "load:state_dict" not in [x.key for x in pf.roles[0].timeline.instants] and len(pf.roles) == 1


def test_load_phase_options():
    ec2 = effective_config({"zero_optimization": {"stage": 2}})
    ec3 = effective_config({"zero_optimization": {"stage": 3}})
    assert not resolve_load(ec2, hf=True).zero_init and resolve_load(ec3, hf=True).zero_init
    assert not resolve_load(ec2, zero_init=True).zero_init  # zero.Init partitions for ZeRO-3 only
    assert not resolve_load(ec3, zero_init=False).zero_init
    inv = from_param_count(1_000_000)
    tl = _tl({"zero_optimization": {"stage": 2}}, inv, 1, dtype="bf16", low_cpu_mem_usage=False)
    assert _at(tl, "load", HOST) == 2 * 1_000_000 * 2  # random-init model + loaded state dict, bf16
    tl = _tl({"zero_optimization": {"stage": 3}}, inv, 1)
    assert _at(tl, "load", HOST) == 0


def test_zero_init_load_peak_is_one_module_whole_beside_the_partitions_made():
    # DeepSpeed 0.19.8 partition_parameters.py, by hand for Linear(64,301) -> Linear(301,77) ->
    # Linear(77,5) at W = 2 (the engine cells z3_*_zinit_w2 measure the same): a module's tensors
    # stay whole until its __init__ returns; each is created in fp32 and cast to the config's dtype
    # (zero_wrapper_for_fp_tensor_constructor: tensor.data = tensor.data.to(dtype), both alive)
    inv = Inventory(name="tiny", tensors=[TensorSpec(n, s) for n, s in [
        ("l1.weight", (301, 64)), ("l1.bias", (301,)), ("l2.weight", (77, 301)), ("l2.bias", (77,)),
        ("l3.weight", (5, 77)), ("l3.bias", (5,))]], source="test")
    cfg = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 3}}
    l1_parts = (-(-19264 // 2) + -(-301 // 2))  # 9632 + 151 elements per rank
    # bf16: at l2.weight's cast, l1's bf16 partitions + 23177 x (4 + 2)
    tl = _tl({**cfg, "bf16": {"enabled": True}}, inv, 2, zero_init=True)
    assert _at(tl, "load") == l1_parts * 2 + 23177 * 6 and _at(tl, "load", HOST) == 0
    # fp32 (no cast copy): l2 whole (23177 + 77) x 4 while its first partition (11589 x 4) is made
    tl = _tl(cfg, inv, 2, zero_init=True)
    assert _at(tl, "load") == l1_parts * 4 + 11589 * 4 + (23177 + 77) * 4
    # the partitions live where offload_param puts them: host memory
    tl = _tl({**cfg, "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}, inv, 2, zero_init=True)
    assert _at(tl, "load", HOST) == l1_parts * 4 + 11589 * 4 and _at(tl, "load") == (23177 + 77) * 4


#: The config of case C11-load-time-host-zero2 (20B, ZeRO-2, bf16, AdamW; 4 GPUs and 256 GB per node).
C11 = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 16, "bf16": {"enabled": True},
       "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "weight_decay": 0.1}},
       "zero_optimization": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True,
                             "reduce_bucket_size": 200000000, "allgather_bucket_size": 200000000}}


def _c11(tmp_path, *extra):
    f = tmp_path / "config.json"
    f.write_text(json.dumps(C11))
    p = run_cli(["estimate", str(f), "--params", "20000000000", "--world-size", "4", "--gpus-per-node", "4",
                 "--host-memory", "256GB", "--format", "json", *extra])
    return p, json.loads(p.stdout)


def test_C11_load_fits_in_bf16_and_the_finding_names_zero_init(tmp_path):
    p, d = _c11(tmp_path)
    assert p.returncode == 1 and d["load"]["host_per_node"] == 4 * 4 * 20_000_000_000
    (m101,) = [f for f in d["findings"] if f["code"] == "M101"]
    assert m101["pointer"] == "/zero_optimization/stage" and "zero.Init" in m101["fix"]
    host = next(f for f in d["fit"] if f["tier"] == "host")
    # the host's peak is deepspeed.initialize casting the fp32 model to bf16 one tensor at a time
    # (engine.py _cast_module_mixed_precision): the first chunk (2^24 elements) in both dtypes
    # outside the load, the host's need is the checkpoint save: each rank's torch.save copies its
    # optimizer file's largest storage, the fp32 partition P = 20e9 / 4 elements x 4 B, to the
    # host (torch/serialization.py l.1290-1310), the node's 4 ranks at once
    assert host["instant"] == "initialize:cast" and host["steady_need"] == 4 * 5_000_000_000 * 4
    assert host["need"] == 4 * (4 * 20_000_000_000 + 2 * 2 ** 24)
    assert m101["data"]["per_rank"] == 4 * 20_000_000_000 + 2 * 2 ** 24
    p, d = _c11(tmp_path, "--load-dtype", "bf16")  # 4 ranks x 2 B x 20e9 = 160 GB < 256 GB
    assert p.returncode == 0 and d["load"]["host_per_node"] == 160_000_000_000
    assert not [f for f in d["findings"] if f["code"] in ("M100", "M101")]
    # ZeRO-3 under zero.Init (the default at stage 3, as the HF Trainer does): no full copy at load
    C11["zero_optimization"]["stage"] = 3
    try:
        p, d = _c11(tmp_path)
    finally:
        C11["zero_optimization"]["stage"] = 2
    assert d["load"]["zero_init"] and d["load"]["host_per_node"] == 0


def test_initialize_without_zero_init_puts_the_whole_model_on_the_accelerator():
    # engine.py _configure_distributed_model (l. 2080-2094): cast one tensor at a time in host
    # memory, then module.to(device); at ZeRO-3 the optimizer then partitions it in place
    # (partition_parameters.py _partition_param: the partition made before the whole tensor goes)
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 3}}
    N = 43209
    tl = _tl(cfg, MLP, 4, zero_init=False)
    keys = [x.key for x in tl.instants]
    # (between initialize:module and initialize: the fp32 masters' cast and the parameters gathered for their
    # gradient hooks, tested below)
    assert keys[:6] == ["load", "initialize:cast", "initialize:module", "initialize:fp32_partitions",
                        "initialize:grad_hooks", "initialize"]
    # cast fp32 -> bf16: at tensor 0 all of it fp32 plus tensor 0 in bf16; later tensors are
    # smaller than the bytes already halved, so tensor 0 is the peak
    assert _at(tl, "initialize:cast", HOST) == N * 4 + 19264 * 2 and _at(tl, "initialize:cast") == 0
    # the whole bf16 model, plus tensor 0's partition ceil(19264 / 4) = 4816 while it is still whole
    assert _at(tl, "initialize:module") == (N + 4816) * 2 and _at(tl, "initialize:module", HOST) == 0
    # W = 1: each partition is the whole tensor: the largest one doubles (tensor 2, 23177)
    tl = _tl(cfg, MLP, 1, zero_init=False)
    assert _at(tl, "initialize:module") == (N + 23177) * 2
    # loaded in bf16: no cast instant; offload_param cpu: the first partition goes to host memory
    off = {**cfg, "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}
    tl = _tl(off, MLP, 4, zero_init=False, dtype="bf16")
    assert "initialize:cast" not in [x.key for x in tl.instants]
    assert _at(tl, "initialize:module") == N * 2 and _at(tl, "initialize:module", HOST) == 4816 * 2
    # fp32 training: nothing is cast (param_dtype None), a bf16-built model stays bf16
    tl = _tl({**cfg, "bf16": {"enabled": False}}, MLP, 4, zero_init=False, dtype="bf16")
    assert _at(tl, "initialize:module") == (N + 4816) * 2
    # ZeRO-2: the whole 16-bit model after module.to(device), nothing partitioned yet
    z2 = {**cfg, "zero_optimization": {"stage": 2}}
    tl = _tl(z2, MLP, 4)
    assert _at(tl, "initialize:module") == N * 2
    # under zero.Init neither instant exists (is_zero_init_model: no cast, no move)
    tl = _tl(cfg, MLP, 4, zero_init=True)
    assert not {"initialize:cast", "initialize:module"} & {x.key for x in tl.instants}


def test_zero_init_casts_bf16_to_fp16_too():
    # zero_wrapper_for_fp_tensor_constructor: tensor.data = tensor.data.to(target_fp_dtype) for
    # any dtype that differs: a bf16 checkpoint built under an fp16 config holds both 2 B copies
    inv = Inventory(name="tiny", tensors=[TensorSpec(n, s) for n, s in [
        ("l1.weight", (301, 64)), ("l1.bias", (301,)), ("l2.weight", (77, 301)), ("l2.bias", (77,))]],
        source="test")
    cfg = {"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 3}}
    l1_parts = -(-19264 // 2) + -(-301 // 2)
    tl = _tl(cfg, inv, 2, zero_init=True, dtype="bf16")
    assert _at(tl, "load") == l1_parts * 2 + 23177 * (2 + 2)
    tl = _tl(cfg, inv, 2, zero_init=True, dtype="fp16")   # no cast: l2 whole beside its first partition
    assert _at(tl, "load") == l1_parts * 2 + (23177 + 77) * 2 + 11589 * 2


def test_zero_init_nvme_load_holds_the_swappers_pinned_buffers():
    # partition_parameters.py Init.__init__ l. 1174 makes AsyncPartitionedParameterSwapper before the
    # first parameter; its buffers are buffer_count x A_k(buffer_size) x D pinned
    # (partitioned_param_swapper.py _configure_aio: k = 1024 x intra_op_parallelism / D = 512)
    inv = Inventory(name="tiny", tensors=[TensorSpec("l1.weight", (301, 64)), TensorSpec("l2.weight", (77, 301))],
                    source="test")
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/tmp/x",
                                                                "buffer_count": 3, "buffer_size": 100000}}}
    tl = _tl(cfg, inv, 2, zero_init=True, dtype="bf16")
    bufs = 3 * (-(-100000 // 512) * 512) * 2
    # _configure_aio: torch.empty(buffers) then new_cpu_locked_tensor copies it, both alive: 2 x bufs,
    # before any parameter exists, is more than the buffers beside the model's own load peak
    # (l2 whole, 23177 x 2, beside l1's and l2's first partitions, all under 1 MiB: in host memory)
    later = bufs + (9632 + 11589) * 2 + 23177 * 2
    assert 2 * bufs > later
    assert _at(tl, "load", HOST) == 2 * bufs and _at(tl, "load") == 0 and _at(tl, "load", ("nvme",)) == 0
    # smaller buffers: the load's own peak beside them is the larger moment
    cfg["zero_optimization"]["offload_param"]["buffer_size"] = 10000
    tl = _tl(cfg, inv, 2, zero_init=True, dtype="bf16")
    bufs = 3 * (-(-10000 // 512) * 512) * 2
    assert 2 * bufs < bufs + (9632 + 11589) * 2 + 23177 * 2
    assert _at(tl, "load", HOST) == bufs + (9632 + 11589) * 2 and _at(tl, "load") == 23177 * 2


def test_70b_zero3_without_zero_init_does_not_fit_8x80gb_at_initialize(tmp_path):
    # sample_configs/zero3_cpu_offload.json (bf16, offload_param and offload_optimizer cpu): the step
    # holds a few GiB per accelerator, but a model built without zero.Init is moved whole to each
    # accelerator inside deepspeed.initialize before ZeRO-3 partitions it (engine.py
    # _configure_distributed_model l. 2094): 70e9 x 2 B = 130.39 GiB > 80 GB
    from pathlib import Path
    cfg = str(Path(__file__).resolve().parents[1] / "sample_configs" / "zero3_cpu_offload.json")
    args = ["estimate", cfg, "--params", "70000000000", "--world-size", "8", "--gpus-per-node", "8",
            "--gpu-memory", "80GB", "--host-memory", "4TB", "--format", "json"]
    p = run_cli(args + ["--no-zero-init"])
    d = json.loads(p.stdout)
    acc = next(f for f in d["fit"] if f["tier"] == "accelerator")
    assert acc["instant"] == "initialize:module" and acc["tracked"] == 70_000_000_000 * 2
    assert acc["verdict"] == "does not fit" and p.returncode == 1
    (m103,) = [f for f in d["findings"] if f["code"] == "M103"]
    assert "zero.Init" in m103["message"] and "zero.Init" in m103["fix"] and "HfDeepSpeedConfig" not in m103["fix"]
    assert acc["steady_need"] < 80_000_000_000 and not [f for f in d["findings"] if f["code"] == "M100"]
    # the first partition, ceil(2^24 / 8) x 2 B, is made in pinned host memory while the model is whole
    row = next(r for r in d["ranks"][0]["timeline"] if r["instant"] == "initialize:module")
    assert row["host"] == 2 ** 24 // 8 * 2
    # with --hf at ZeRO-3 the finding says the Trainer itself builds under zero.Init (the Trainer
    # arguments the config's numbers need: with TrainingArguments' defaults the Trainer raises, H001)
    p = run_cli(args + ["--no-zero-init", "--hf", "--per-device-train-batch-size", "1", "--gradient-accumulation-steps",
                        "8", "--bf16", "--learning-rate", "1e-5", "--adam-beta2", "0.95"])
    assert not [f for f in json.loads(p.stdout)["findings"] if f["code"] == "H001"]
    (m103,) = [f for f in json.loads(p.stdout)["findings"] if f["code"] == "M103"]
    assert "HfDeepSpeedConfig" in m103["fix"]
    # built under zero.Init (the default at ZeRO-3): no such instant, and the accelerator fits
    p = run_cli(args)
    d = json.loads(p.stdout)
    acc = next(f for f in d["fit"] if f["tier"] == "accelerator")
    assert not acc["instant"].startswith("initialize:") and acc["verdict"] != "does not fit"
    assert not [f for f in d["findings"] if f["code"] in ("M100", "M103")]


def test_initialize_module_is_the_ranks_shard_under_tensor_parallelism():
    # engine.py moves self.module, which under tensor parallelism is already the rank's shard:
    # llama-2-13b at TP 4 holds 3,254,277,120 parameters per rank (Megatron's split by hand in
    # test_parallel._llama_rank_params), so the instant is that x 2 B, not the whole model
    from advisor.model.specs import resolve_model
    from tests.test_parallel import _llama_rank_params
    n = _llama_rank_params(5120, 13824, 40, 32000, 40, 40, 4)
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1}}
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, resolve_model("llama-2-13b"), Cluster(world_size=32, tensor_parallel=4)))
    for r in (0, 31):
        tl = role_timeline(led, led.rank(r), resolve_load(ec), ga=1, rank=r)
        assert _at(tl, "initialize:module") == n * 2


def test_hf_string_stage_builds_without_zero_init(tmp_path):
    # transformers' HfDeepSpeedConfig.is_zero3() is `self._stage == 3` on the stage as written:
    # "3" is not ZeRO-3 to the Trainer (no zero.Init in from_pretrained) while DeepSpeed coerces it
    # and partitions: the whole model reaches initialize and is moved to each accelerator
    cfg = {"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
           "zero_optimization": {"stage": "3", "offload_optimizer": {"device": "cpu"},
                                 "offload_param": {"device": "cpu"}}}
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    args = ["estimate", str(f), "--hf", "--bf16", "--params", "70000000000", "--world-size", "8",
            "--gpus-per-node", "8", "--gpu-memory", "80GB", "--host-memory", "4TB", "--format", "json"]
    d = json.loads(run_cli(args).stdout)
    assert d["load"]["zero_init"] is False and "is_zero3" in d["load"]["zero_init_source"]
    acc = next(x for x in d["fit"] if x["tier"] == "accelerator")
    assert acc["instant"] == "initialize:module" and acc["tracked"] == 70_000_000_000 * 2
    (m103,) = [x for x in d["findings"] if x["code"] == "M103"]
    assert "number 3" in m103["fix"]
    # the number 3: the Trainer builds under zero.Init, no such instant
    cfg["zero_optimization"]["stage"] = 3
    f.write_text(json.dumps(cfg))
    d = json.loads(run_cli(args).stdout)
    assert d["load"]["zero_init"] is True and not [x for x in d["findings"] if x["code"] == "M103"]


def test_zero2_flattens_in_host_memory_when_the_accelerator_has_no_room(tmp_path):
    # stage_1_and_2.py __init__: flatten_on_accelerator only when available_memory() >= the flat
    # buffer; else param.cpu_data = param.data.cpu() and the flat buffer is built on the CPU: the
    # group's n x 2 B plus its flat n_pad x 2 B per rank in host memory. 30e9 bf16 parameters on
    # 80 GB: 60e9 B of model leave no room for a 60e9 B flat copy; n_pad = n (2^24-element chunks
    # align to 2 x 256), so 8 ranks x 120e9 B = 960e9 B > 512 GB, while the load in bf16 (8 x 60e9)
    # and the step fit
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
           "zero_optimization": {"stage": 2, "reduce_bucket_size": 10000000, "allgather_bucket_size": 10000000}}
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    args = ["estimate", str(f), "--params", "30000000000", "--world-size", "256", "--gpus-per-node", "8",
            "--host-memory", "512GB", "--load-dtype", "bf16", "--format", "json"]
    d = json.loads(run_cli(args + ["--gpu-memory", "80GB"]).stdout)
    host = next(x for x in d["fit"] if x["tier"] == "host")
    assert host["instant"] == "initialize:module" and host["need"] == 8 * (30_000_000_000 * 2 * 2)
    assert host["verdict"] == "does not fit" and d["load"]["host_per_node"] == 8 * 60_000_000_000
    acc = next(x for x in d["fit"] if x["tier"] == "accelerator")
    assert acc["verdict"] == "tight" and acc["lower_bound"]  # fits; --params leaves the activations out (M104)
    (m103,) = [x for x in d["findings"] if x["code"] == "M103"]
    assert "host memory" in m103["message"] and not [x for x in d["findings"] if x["code"] in ("M100", "M101")]
    # a 141 GB accelerator has room for the flat copy beside the model: flattened there, no host peak
    d = json.loads(run_cli(args + ["--gpu-memory", "141GB"]).stdout)
    host = next(x for x in d["fit"] if x["tier"] == "host")
    assert host["instant"] != "initialize:module" and not [x for x in d["findings"] if x["code"] == "M103"]


def test_the_host_flat_copy_at_initialize_is_on_the_timeline_text_and_html_chart(tmp_path):
    # the same plan as above: the fit's host row peaks at initialize:module with the flat copy built in
    # host memory, 30e9 x 2 B (the group's parameters copied there) + 30e9 x 2 B (the flat buffer) =
    # 120e9 B per rank. Every view of the timeline shows that instant with those bytes, not "-".
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
           "zero_optimization": {"stage": 2, "reduce_bucket_size": 10000000, "allgather_bucket_size": 10000000}}
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    args = [str(f), "--params", "30000000000", "--world-size", "256", "--gpus-per-node", "8",
            "--host-memory", "512GB", "--gpu-memory", "80GB", "--load-dtype", "bf16"]
    per_rank = 30_000_000_000 * 2 * 2
    d = json.loads(run_cli(["estimate", *args, "--format", "json"]).stdout)
    for role in d["ranks"]:
        row = next(x for x in role["timeline"] if x["instant"] == "initialize:module")
        assert row["host"] == per_rank and "flattens a param group in host memory" in row["label"]
        pk = role["peak"]["host"]
        assert pk["instant"] == "initialize:module" and pk["top"][0] == {
            "item": "zero12_flat_fallback", "tier": "host_pageable", "class": "parameters", "bytes": per_rank}
    # the text's timeline table: that row, 120e9 B = 111.76 GiB, starred as the host's peak
    text = run_cli(["estimate", *args]).stdout
    table = text[text.index("Step timeline"):]
    row = next(ln for ln in table.splitlines() if "flattens a param group in host memory" in ln)
    assert "111.76*" in row, row
    # the HTML report's chart: the instant's words under the axis, the host's peak star, and the
    # contributors at that peak
    out = tmp_path / "r.html"
    p = run_cli(["report", *args, "--output", str(out)])
    assert p.returncode in (0, 1), p.stderr
    html = out.read_text()
    chart = html[html.index("id=timeline-chart"):]
    chart = chart[:chart.index("</svg>")]
    assert "flattens a param group in host memory" in chart and 'id="timeline-peak-host"' in chart
    assert "host at initialize: ZeRO-1/2 flattens a param group in host memory" in html
    assert "zero12_flat_fallback 120,000,000,000 bytes" in html


#: TINY's layers (tests/engine/parity.py): l1 (301 x 64, 301), l2 (77 x 301, 77), l3 (5 x 77, 5).
TINY3 = Inventory(name="tiny", tensors=[TensorSpec(n, s) for n, s in [
    ("l1.weight", (301, 64)), ("l1.bias", (301,)), ("l2.weight", (77, 301)), ("l2.bias", (77,)),
    ("l3.weight", (5, 77)), ("l3.bias", (5,))]], source="test")
#: TINY3 as parameters each used alone (not an nn.Linear's weight and bias: state.zero3_linear_pairs
#: finds none), so their gradients arrive in the plain reverse order, the bias of a module first
TINY3M = Inventory(name="tiny-means", tensors=[TensorSpec(t.name.replace(".weight", ".w").replace(".bias", ".b"),
                                                          t.shape) for t in TINY3.tensors], source="test")
Z3 = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
      "zero_optimization": {"stage": 3, "reduce_bucket_size": 50000}}


def test_zero3_first_forward_fetches_one_module_at_a_time():
    # W = 2, every tensor persistent (<= 1e5 elements). First forward (incomplete trace,
    # partitioned_param_coordinator.py release_sub_module releases the module's params): the peak is
    # l2's fetch: its torch.cat copies (23177 + 77) x 2 B = 46,508 (AllGatherCoalescedHandle.wait)
    # beside its flat all-gather buffer (ceil(23177/2) + ceil(77/2)) x 2 x 2 B = 46,512
    # (_all_gather_dtype) = 93,020 B, more than l1's 39,130 + 39,132
    tl = _tl(Z3, TINY3, 2)
    gathered = (19264 + 302 + 23178 + 78 + 386 + 6) * 2       # persistent: sum ceil(n/W) x W x D = 86,428
    l2 = (23177 + 77) * 2 + (11589 + 39) * 2 * 2
    assert l2 == 93020 and l2 > (19264 + 301) * 2 + (9632 + 151) * 2 * 2
    assert _at(tl, "forward:1") - _at(tl, "initialize") == l2
    # from the second trace on the persistent parameters stay gathered, without a flat buffer
    assert _at(tl, "steady:forward") - _at(tl, "save") == 0
    assert any(e[0] == "lp_params_gathered" and e[3] == gathered for e in tl.entries[[x.key for x in tl.instants].index("save")])


def test_zero3_step_releases_the_persistent_parameters_until_post_step():
    # stage3.py step: _partition_all_parameters (every param partitioned, persistent ones too);
    # per sub-group flatten(averaged_gradients) (P3 x 2 B, bf16) .to(fp32) (P3 x 4 B) at prep;
    # _post_step all-gathers the persistent ones again (sum ceil(n/W) x W x 2 B = 86,428)
    tl = _tl(Z3, TINY3, 2)
    P3 = 43214 // 2                                     # A_2 per tensor, halves: 21,607 elements
    gathered = 86428
    moments = 2 * P3 * 4
    rest = _at(tl, "initialize")                        # partitions, grad buffer, ipg bucket, fp32 master
    assert _at(tl, "first_step:prep") == rest + P3 * 4 + P3 * 2
    assert _at(tl, "first_step:update") == rest + P3 * 4 + moments
    assert _at(tl, "first_step:post") == rest + moments + gathered
    assert _at(tl, "steady_step:prep") == rest + moments + P3 * 4 + P3 * 2
    # fp32 model: the flatten is already fp32, .to(fp32) copies nothing
    fp32 = {k: v for k, v in Z3.items() if k != "bf16"}
    t32 = _tl(fp32, TINY3, 2)
    assert _at(t32, "steady_step:prep") - _at(t32, "initialize") == 2 * P3 * 4 + P3 * 4


def test_zero3_reduce_scatter_flat_buffer_and_first_backward():
    # reduce_scatter_coalesced (coalesced_collectives.py) torch.cat's every gradient of a flush,
    # padded to ceil(n_i/W) per rank: one flush at the end of backward when the whole model fits
    # the bucket (43,209 <= 50,000): sum ceil(n_i/2) x 2 x 2 B = 86,428; every gradient was copied
    # into the bucket buffer on arrival, the largest arriving whole l2.weight's 23,177 x 2 = 46,354 B
    from advisor.ledger.state import zero3_reduce_flush_bytes
    ec = effective_config(Z3)
    assert zero3_reduce_flush_bytes(ec, TINY3, 2)[0] == 86428
    # reduce_bucket_size 20,000, gradients in backward order (module l3, l2, l1; bias before
    # weight: TINY3M, parameters used one at a time): a bucket holding elements flushes before the arriving gradient joins it, while that
    # gradient is whole (stage3.py l. 1583-1585), and a gradient larger than the bucket is not
    # copied into the buffer but held whole until its flush (__add_grad_to_ipg_bucket):
    #   l2.weight arrives: flush [5, 385, 77] (3 + 193 + 39) x 4 = 940 + arriving 23177 x 2 = 47,294
    #   l1.bias arrives: flush [23177]: flat 11,589 x 4 = 46,356 + held 46,354 + arriving 301 x 2
    #     = 93,312 B, the largest
    #   l1.weight arrives: 301 + 19,264 <= 20,000, copied: 38,528; end: flush [301, 19264]
    #     (151 + 9632) x 4 = 39,132
    small = effective_config({**Z3, "zero_optimization": {"stage": 3, "reduce_bucket_size": 20000}})
    assert 46356 + 46354 + 602 == 93312
    got = zero3_reduce_flush_bytes(small, TINY3M, 2)
    assert got[0] == 93312 and "l2.w " in got[1] and "l1.b'" in got[1]
    # without contiguous_gradients every gradient stays whole in the bucket: l1.bias arrives to
    # [23177] as above (93,312); l1.weight arrives to [301] (held 602): flat 151 x 4 + 602 + 38,528
    # = 39,734; end [19264]: even, a view, held 38,528. Max 93,312 again; at bucket 50,000 all six
    # stay whole to the end: 86,428 + 43,209 x 2 = 172,846 B
    nc = effective_config({**Z3, "zero_optimization": {"stage": 3, "reduce_bucket_size": 50000,
                                                       "contiguous_gradients": False}})
    assert zero3_reduce_flush_bytes(nc, TINY3, 2)[0] == 86428 + 43209 * 2
    # W = 1 takes the same path (measured, z3_bf16_smallbucket_w1): the end flush of all six is a
    # torch.cat without padding, 43,209 x 2 = 86,418 B
    assert zero3_reduce_flush_bytes(ec, TINY3, 1)[0] == 43209 * 2
    tl = _tl(Z3, TINY3, 2)
    # first backward (incomplete trace): at its reduce only l1's persistent parameters are
    # gathered, (19264 + 301) x 2 B (torch.cat copies), beside the flat buffer; from the second
    # iteration all of them (86,428) stay gathered
    assert _at(tl, "reduce") == _at(tl, "initialize") + 39130 + 86428
    assert _at(tl, "steady:reduce") == _at(tl, "save") + 86428


def test_zero3_offload_norm_is_one_partition_in_fp64_inside_its_flush():
    # partition_grads -> _offload_grad_partition_at_boundary -> _constant_buffered_norm2:
    # part.to(fp64) of one gradient partition at a time, inside the flush (the reduce-scatter's
    # outputs, views of its flat buffer, still alive), not at every backward instant.
    # reduce_bucket_size 50,000: all 43,209 elements flush once, at the end of backward: flat
    # sum ceil(n_i/2) x 2 x 2 B = 86,428 + the largest partition, l2.weight's ceil(23177/2) = 11,589 x 8
    from advisor.ledger.state import zero3_reduce_flush_bytes
    cfg = {**Z3, "zero_optimization": {"stage": 3, "reduce_bucket_size": 50000,
                                       "offload_optimizer": {"device": "cpu"}}}
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, TINY3, Cluster(world_size=2)))
    assert not [e for e in led.rank(0).entries if e.item == "zero3_offload_norm_fp64"]
    flush = [e for e in led.rank(0).entries if e.item == "zero3_reduce_flush"]
    assert [e.bytes for e in flush] == [86428 + 11589 * 8]
    # arrivals (no layers: the start region) hold only the arriving gradient, l2.weight's 23,177 x 2;
    # the norm copy is at the end, with the epilogue's flush
    assert flush[0].regions == (23177 * 2, 0, 86428 + 11589 * 8)
    # bucket 10,000: l2.weight's arrival flushes l3.bias, l3.weight, l2.bias (flat (3 + 193 + 39) x 2
    # x 2 = 940 + whole l2.weight 46,354 + norm l3.weight's 193 x 8); l1.bias's arrival flushes
    # l2.weight (flat 46,356 + held whole 46,354 + l1.bias 602 + norm 11,589 x 8): the largest
    small = effective_config({**Z3, "zero_optimization": {"stage": 3, "reduce_bucket_size": 10000,
                                                          "offload_optimizer": {"device": "cpu"}}})
    got = zero3_reduce_flush_bytes(small, TINY3M, 2)
    assert got[0] == 46356 + 46354 + 602 + 11589 * 8 and "fp64 norm copy 92,712" in got[1]


def test_zero3_backward_grad_order_is_by_module_in_reverse():
    # autograd runs the node made last in forward first (torch engine.cpp ReadyQueue by sequence
    # number) and DeepSpeed's post-accumulate hook fires as each gradient is accumulated: modules in
    # the reverse of their first appearance, and within a module its parameters in reverse. a's
    # parameters are not consecutive here (a.w, b.w, a.b): a is still one module, run first in
    # forward, so it delivers last; params.N tensors are modules of their own (module_of); a frozen
    # parameter has no hook
    from advisor.ledger.state import zero3_backward_grad_order
    names = ["a.w", "b.w", "a.b", "params.1", "params.2", "c"]
    inv = Inventory(name="t", tensors=[TensorSpec(n, (2,), trainable=(n != "params.1")) for n in names],
                    source="test")
    assert [names[i] for i in zero3_backward_grad_order(inv)] == ["c", "params.2", "b.w", "a.b", "a.w"]
    # consecutive modules: the plain reverse of the inventory (TINY3M: l3.b first, l1.w last)
    assert list(zero3_backward_grad_order(TINY3M)) == [5, 4, 3, 2, 1, 0]
    # TINY3's modules are nn.Linears (2-D weight (out, in), bias (out)): under ZeRO-3's
    # memory_efficient_linear one LinearFunctionForZeroStage3 node returns (grad_input,
    # grad_weight, grad_bias) and the weight's hook fires first (measured, the engine's allocation
    # log: l3.weight, l3.bias, l2.weight, l2.bias, l1.weight, l1.bias); without it, the reverse
    assert list(zero3_backward_grad_order(TINY3)) == [4, 5, 2, 3, 0, 1]
    assert list(zero3_backward_grad_order(TINY3, linear=False)) == [5, 4, 3, 2, 1, 0]


def test_zero3_linear_weight_first_flushes_with_its_module_gathered():
    # The engine cell z3_bf16_linear_smallbucket_w2 (W = 2, bf16, bucket 10,000, TINY's Linears),
    # by hand in the order above: l3.weight arrives (385 <= 10,000: copied), l3.bias copied;
    # l2.weight arrives: 390 + 23,177 > 10,000, flush [l3] flat (193 + 3) x 2 x 2 = 784 + arriving
    # 46,354; l2.weight is larger than the bucket and stays whole; l2.bias arrives: flush
    # [l2.weight] (odd: torch.cat, flat 11,589 x 2 x 2 = 46,356) + held 46,354 + arriving 77 x 2 =
    # 154 -> 92,864 B, the largest; l1.weight arrives: flush [l2.bias] flat 39 x 4 = 156 + 38,528;
    # l1.bias arrives: flush [l1.weight] (even: a view) + held 38,528 + 602; end [l1.bias] 151 x 4.
    from advisor.ledger.state import zero3_reduce_flush_bytes
    small = effective_config({**Z3, "zero_optimization": {"stage": 3, "reduce_bucket_size": 10000}})
    got = zero3_reduce_flush_bytes(small, TINY3, 2)
    assert got[0] == 46356 + 46354 + 154 and "l2.bias" in got[1]
    # the first backward re-fetches each module (incomplete trace): l2 is gathered while its gradients
    # arrive, its torch.cat copies (23,177 + 77) x 2 = 46,508 B (the flat buffer was freed at the
    # fetch); the engine measured 332,273 - 192,861 = 139,412 B over its initialize (40 B of scalars)
    tl = _tl({**Z3, "zero_optimization": {"stage": 3, "reduce_bucket_size": 10000}}, TINY3, 2)
    assert _at(tl, "backward:1") - _at(tl, "initialize") == 46356 + 46354 + 154 + 46508
    # memory_efficient_linear off: F.linear is torch's, the bias first as in TINY3M; l1.bias's arrival
    # flushes l2.weight: 46,356 + 46,354 + 602, with l1.weight's gradient whole beside it (AddmmBackward0 made
    # both: state.zero3_autograd_siblings), 19,264 x 2. Engine (2026-12-06, this config on TINY's real Linears,
    # W = 2): backward:2 584,027 B vs the ledger's 583,980 B; 545,452 B (-6.6%) without the sibling
    off = effective_config({**Z3, "zero_optimization": {"stage": 3, "reduce_bucket_size": 10000,
                                                        "memory_efficient_linear": False}})
    assert zero3_reduce_flush_bytes(off, TINY3, 2)[0] == 46356 + 46354 + 602 + 38528


def test_zero3_backward_places_each_flush_with_the_activations_live_then():
    # Issue 15: a backward instant is the worst moment of backward, not saved activations + the
    # loss spike + the largest flush of anywhere in backward. W = 2, bf16 (C = 2), bucket 500,
    # contiguous_gradients and reduce_scatter on (defaults). Backward order (zero3_backward_grad_order,
    # modules in reverse forward order): head (800), layers.1 (100), layers.0 (100), embed (1000).
    #   start: head.weight arrives whole, no flush: 800 x 2 = 1,600 B
    #   layers: layers.1 arrives, flush [head] (one even tensor: a view, flat 0) + held 800 x 2
    #     + arriving 100 x 2 = 1,800 B; layers.0 copied: 200 B
    #   end: embed arrives, flush [layers.1, layers.0]: flat (50 + 50) x 2 x 2 = 400 + arriving
    #     1000 x 2 = 2,400 B; epilogue [embed]: a view + held 2,000 B
    from types import SimpleNamespace
    from advisor.ledger.state import zero3_reduce_flush_bytes
    inv = Inventory(name="ends", tensors=[TensorSpec(n, (k,)) for n, k in [
        ("embed.weight", 1000), ("layers.0.w.weight", 100), ("layers.1.w.weight", 100),
        ("head.weight", 800)]], source="test")
    cfg = {**Z3, "zero_optimization": {"stage": 3, "reduce_bucket_size": 500}}
    ec = effective_config(cfg)
    got = zero3_reduce_flush_bytes(ec, inv, 2)
    assert got[0] == 2400 and got[2] == (1600, 1800, 2400)
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=2)))
    load = resolve_load(ec)
    acts = SimpleNamespace(saved_accelerator=10000, saved_host=0, loss_spike=0,
                           loss_backward_spike=3000, recompute_layer=500)
    bare = role_timeline(led, led.rank(0), load, ga=1)
    full = role_timeline(led, led.rank(0), load, acts, ga=1)
    # without activations the instant holds the largest flush (2,400). With them (autograd frees a
    # node's saved tensors once it has run, engine.cpp release_variables):
    #   start  10,000 saved + 3,000 loss gradients + 1,600 = 14,600
    #   layers 10,000 saved (bound: layer L-1, all live) + 500 recompute + 1,800 = 12,300
    #   end    saved freed + 2,400 = 2,400
    # -> 14,600 at the start, where the sum of maxima said 10,000 + 3,000 + 2,400 = 15,400
    assert _at(full, "steady:backward") - _at(bare, "steady:backward") == 14600 - 2400
    # the first backward also fetches each module again (every parameter persistent here, but the trace is
    # incomplete: released after each module, state.zero3_fetch_replay), one parameter each: its padded
    # buffer (head 1,600, layers 200 each, embed 2,000), embed still gathered at the epilogue:
    #   start  head arriving 1,600 + head 1,600 = 3,200 -> 13,000 + 3,200 = 16,200
    #   layers flush [head] 1,800 + layers.1 200 = 2,000 -> 10,500 + 2,000 = 12,500
    #   end    embed's flush 2,400 + embed 2,000 = 4,400 (the bare instant)
    assert _at(full, "backward:1") - _at(bare, "backward:1") == 16200 - 4400
    # with a recompute larger than the loss spike the layers' moment wins: 10,000 + 5,000 + 1,800
    acts.recompute_layer = 5000
    full = role_timeline(led, led.rank(0), load, acts, ga=1)
    assert _at(full, "steady:backward") - _at(bare, "steady:backward") == 16800 - 2400


def test_zero0_backward_gradients_made_where_their_layer_runs_back():
    # Issue 15 at stage 0: the 16-bit param.grad (lp_grads, N x 2) is made by autograd node by node as backward
    # runs (accumulate_grad.h), and each node's saved tensors go once it has run (engine.cpp evaluate_function ->
    # release_variables), so a backward instant is the worst of start / each layer / end, not all saved + all
    # gradients. fp16 stage 0 (FP16_Optimizer), W = 1, GA 1; tensors (forward order) embed 1,000, layers.0 100,
    # layers.1 100, head 800 (x 2 B). Activations: saved 10,000 of which loss head 1,000, so a layer's saved
    # tensors s = (10,000 - 1,000) / 2 = 4,500; loss gradients 3,000, one recomputed layer 500.
    #   start   10,000 + 3,000, no gradient made yet                          = 13,000
    #   layer 1 10,000 + 500 + (head 800 + layers.1 100) x 2 = 10,500 + 1,800 = 12,300
    #   layer 0 10,000 - 4,500 + 500 + (800 + 200) x 2 = 6,000 + 2,000        =  8,000
    #   end     layers' and head's saved freed (0) + 2,000 x 2                  =  4,000
    # -> 13,000 where the sum said 10,000 + 3,000 + 4,000 = 17,000 (bare: the 4,000 B of gradients)
    from types import SimpleNamespace
    inv = Inventory(name="ends", tensors=[TensorSpec(n, (k,)) for n, k in [
        ("embed.weight", 1000), ("layers.0.w.weight", 100), ("layers.1.w.weight", 100),
        ("head.weight", 800)]], source="test")
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True},
                           "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 0}})
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=1)))
    assert next(e.bytes for e in led.rank(0).entries if e.item == "lp_grads") == 4000
    load = resolve_load(ec)
    bare = role_timeline(led, led.rank(0), load, ga=1)
    acts = SimpleNamespace(saved_accelerator=10000, saved_host=0, loss_spike=0, loss_head=1000,
                           loss_backward_spike=3000, recompute_layer=500)
    full = role_timeline(led, led.rank(0), load, acts, ga=1)
    for key in ("backward:1", "steady:backward"):
        assert _at(full, key) - _at(bare, key) == 13000 - 4000, key
    # no loss spike, no recompute, saved 4,000 (no loss head: s = 2,000): start 4,000; layer 1 4,000 + 1,800 =
    # 5,800; layer 0 2,000 + 2,000 = 4,000; end 4,000 -> layer 1's moment, 5,800
    acts = SimpleNamespace(saved_accelerator=4000, saved_host=0, loss_spike=0, loss_head=0,
                           loss_backward_spike=0, recompute_layer=0)
    full = role_timeline(led, led.rank(0), load, acts, ga=1)
    assert _at(full, "steady:backward") - _at(bare, "steady:backward") == 5800 - 4000
    # saved 2,000 (s = 1,000): start 2,000; layer 1 3,800; layer 0 1,000 + 2,000; end 4,000 -> the end: the
    # gradients alone, no activation beside them
    acts.saved_accelerator = 2000
    full = role_timeline(led, led.rank(0), load, acts, ga=1)
    assert _at(full, "steady:backward") == _at(bare, "steady:backward")
    # the logits the model returns are held by the caller's output, not autograd (ActivationEstimate.loss_head_kept;
    # `outputs = model(batch); engine.backward(outputs.loss)`): saved 2,000 of which loss head 1,000, all of it
    # logits (s = 500): start 2,000; layer 1 2,000 + 1,800 = 3,800; layer 0 2,000 - 500 + 2,000 = 3,500; end the
    # layers' 1,000 freed, the logits kept: 1,000 + 4,000 = 5,000 -> 1,000 over the gradients alone. Freed with
    # the head's other saved tensors (loss_head_kept 0) the end is the gradients alone, 4,000.
    acts = SimpleNamespace(saved_accelerator=2000, saved_host=0, loss_spike=0, loss_head=1000, loss_head_kept=1000,
                           loss_backward_spike=0, recompute_layer=0)
    full = role_timeline(led, led.rank(0), load, acts, ga=1)
    assert _at(full, "steady:backward") - _at(bare, "steady:backward") == 5000 - 4000
    acts.loss_head_kept = 0
    full = role_timeline(led, led.rank(0), load, acts, ga=1)
    assert _at(full, "steady:backward") == _at(bare, "steady:backward")
    # a recomputed layer below L-1 is its whole peak: recompute_layer is net of what activations.py frees before it
    # (recompute_freed: the loss head's 1,000 with eager attention, un-checkpointed layers), which the moment frees
    # itself (review 2026-12-07: subtracted twice, the peak 4 GiB low for llama-3-8b ZeRO-1 eager full recompute).
    # saved 3,000 of which head 1,000 (all freed once its nodes ran), s = 1,000; recompute 500 net, freed 3,000:
    #   start 3,000; layer 1 3,000 + 500 + 1,800 = 5,300; layer 0 3,000 - 1,000 + (500 + 3,000) - 1,000 + 2,000 =
    #   6,500; end 3,000 - 1,000 - 2,000 + 4,000 = 4,000 -> 6,500 (twice subtracted: 3,500, layer 1's 5,300 won)
    acts = SimpleNamespace(saved_accelerator=3000, saved_host=0, loss_spike=0, loss_head=1000, loss_head_freed=1000,
                           loss_backward_spike=0, recompute_layer=500, recompute_freed=3000)
    full = role_timeline(led, led.rank(0), load, acts, ga=1)
    assert _at(full, "steady:backward") - _at(bare, "steady:backward") == 6500 - 4000


def test_a_composite_accumulate_grad_new_is_not_split_as_one_gradient():
    # state.py's ZeRO-1 offload GA > 1 accumulate_grad_new is the fp32 accumulation of every gradient plus the largest
    # new one (not one gradient): its bytes / the largest tensor's elements is then more than 4 bytes per element, and
    # the moments leave it whole (review 2026-12-07: 30,000 B over 1,000-element tensors was split as a 30-byte
    # gradient and read 0 at the start moment). One 2-byte gradient (2,000 B) is split.
    from types import SimpleNamespace
    from advisor.ledger.timeline import _made_grad_moments
    lay = (1000, 1000, (1000, 1000, 1000, 1000), 1000, 1000, (1000, 1000, 1000, 1000), 6000)
    e = SimpleNamespace(item="accumulate_grad_new")
    assert _made_grad_moments(e, 30000, lay, [0, 1, 3]) is None
    assert _made_grad_moments(e, 2000, lay, [0, 1, 3]) == [0, 2000, 2000, 2000, 2000]
    assert _made_grad_moments(SimpleNamespace(item="lp_grads"), 6000 * 6, lay, [0]) is None


def test_zero0_backward_identical_layers_worst_moment_at_layer_zero():
    # The same rule over 5 identical layers (layers.i 200 elements each), embed 10, head 800, fp16 stage 0, W = 1:
    # lp_grads = 1,810 x 2 = 3,620 B. Activations saved 1,000 (no loss head: s = 200 per layer), no loss gradients,
    # no recompute. Layer moments j = layers run back before it (timeline._layer_moments evaluates j = 0, 1, 4):
    #   start 1,000; layer 4 1,000 + (800 + 200) x 2 = 3,000; layer 3 800 + 1,200 x 2 = 3,200; ...
    #   layer 0 200 + (800 + 1,000) x 2 = 3,800 (the worst); end 0 + 3,620
    from types import SimpleNamespace
    from advisor.ledger.timeline import _layer_moments, backward_grad_layout
    inv = Inventory(name="five", tensors=[TensorSpec("embed.weight", (10,))]
                    + [TensorSpec(f"layers.{i}.w.weight", (200,)) for i in range(5)]
                    + [TensorSpec("head.weight", (800,))], source="test")
    assert backward_grad_layout(inv)[:3] == (10, 800, (200,) * 5)
    assert _layer_moments(backward_grad_layout(inv)) == [0, 1, 4]
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True},
                           "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 0}})
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=1)))
    load = resolve_load(ec)
    bare = role_timeline(led, led.rank(0), load, ga=1)
    acts = SimpleNamespace(saved_accelerator=1000, saved_host=0, loss_spike=0, loss_head=0,
                           loss_backward_spike=0, recompute_layer=0)
    full = role_timeline(led, led.rank(0), load, acts, ga=1)
    assert _at(full, "steady:backward") - _at(bare, "steady:backward") == 3800 - 3620


def test_zero3_offload_norm_sits_in_its_flush_not_at_backward_start():
    # The inventory above with offload_optimizer cpu: each flush also holds the fp64 norm copy of
    # its largest gradient partition (ceil(n/2) x 8: head 400, layers 50, embed 500), only then.
    #   start:  head arrives, no flush: 1,600
    #   layers: flush [head] (a view) + head whole 1,600 + arriving 200 + 400 x 8 = 5,000
    #   end:    flush [layers.1, layers.0] 400 + arriving 2,000 + 50 x 8 = 2,800; epilogue [embed]
    #           (a view) + held whole 2,000 + 500 x 8 = 6,000
    from types import SimpleNamespace
    from advisor.ledger.state import zero3_reduce_flush_bytes
    inv = Inventory(name="ends", tensors=[TensorSpec(n, (k,)) for n, k in [
        ("embed.weight", 1000), ("layers.0.w.weight", 100), ("layers.1.w.weight", 100),
        ("head.weight", 800)]], source="test")
    ec = effective_config({**Z3, "zero_optimization": {"stage": 3, "reduce_bucket_size": 500,
                                                       "offload_optimizer": {"device": "cpu"}}})
    assert zero3_reduce_flush_bytes(ec, inv, 2)[2] == (1600, 5000, 6000)
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=2)))
    load = resolve_load(ec)
    acts = SimpleNamespace(saved_accelerator=10000, saved_host=0, loss_spike=0,
                           loss_backward_spike=3000, recompute_layer=500)
    bare = role_timeline(led, led.rank(0), load, ga=1)
    full = role_timeline(led, led.rank(0), load, acts, ga=1)
    # start 10,000 + 3,000 + 1,600 = 14,600; layers 10,000 + 500 + 5,000 = 15,500; end 6,000.
    # Counted at every backward instant (before), the start read 14,600 + 4,000 = 18,600.
    assert _at(full, "steady:backward") - _at(bare, "steady:backward") == 15500 - 6000
    # the first backward with each module fetched again (see the test above): start 1,600 + head 1,600
    # -> 16,200; layers 5,000 + layers.1 200 -> 15,700; end: the epilogue 6,000 + embed 2,000 = 8,000
    assert _at(full, "backward:1") - _at(bare, "backward:1") == 16200 - 8000


def test_hf_load_dtype_is_the_checkpoints():
    """Issue 15: transformers >= 5 from_pretrained sets ``if dtype is None: dtype = "auto"``
    (transformers 5.25.0 modeling_utils.py l.4236-4237), loading in config.json's torch_dtype;
    Meta-Llama-3-8B's config.json says "torch_dtype": "bfloat16". Without a dtype in the config,
    "auto" falls back to torch's default (fp32); a plain script (no --hf) keeps fp32; a flag wins."""
    from advisor.ledger.timeline import checkpoint_load_dtype
    from advisor.model.specs import resolve_model
    assert checkpoint_load_dtype({"torch_dtype": "bfloat16"}) == "bf16"
    assert checkpoint_load_dtype({"dtype": "torch.float16"}) == "fp16"
    assert checkpoint_load_dtype({"dtype": "float32", "torch_dtype": "bfloat16"}) == "fp32"  # dtype wins (v5 name)
    assert checkpoint_load_dtype({}) is None and checkpoint_load_dtype(None) is None
    assert checkpoint_load_dtype({"torch_dtype": "float8_e4m3fn"}) is None
    ec = effective_config({"zero_optimization": {"stage": 2}})
    assert resolve_load(ec, hf=True, checkpoint_dtype="bf16").dtype == "bf16"
    assert "checkpoint's dtype" in resolve_load(ec, hf=True, checkpoint_dtype="bf16").dtype_source
    no = resolve_load(ec, hf=True, checkpoint_dtype=None)
    assert no.dtype == "fp32" and "no torch_dtype" in no.dtype_source
    assert resolve_load(ec, checkpoint_dtype="bf16").dtype == "fp32"  # not from_pretrained: torch's default
    assert resolve_load(ec, dtype="fp32", hf=True, checkpoint_dtype="bf16").dtype == "fp32"
    assert checkpoint_load_dtype(resolve_model("llama-3-8b").hf_config) == "bf16"


def test_hf_load_dtype_of_a_llama_2_preset_is_its_checkpoints_float16(tmp_path):
    """The presets carry their config.json torch_dtype (advisor/model/specs.py, each with its hub
    URL): meta-llama/Llama-2-7b-hf's config.json says "torch_dtype": "float16", so under --hf
    from_pretrained loads it in fp16 (dtype="auto", modeling_utils.py l. 4236-4237). ZeRO-2 (no
    zero.Init), 4 ranks on a node: 4 x 2 B x 6,738,415,616 = 53,907,324,928 B at load, not the
    4 B per parameter of torch's default dtype; without --hf the script's default stays fp32."""
    f = tmp_path / "z2.json"
    f.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                             "optimizer": {"type": "AdamW", "params": {"lr": 5e-5}},
                             "zero_optimization": {"stage": 2}}))
    common = [str(f), "--model", "llama-2-7b", "--world-size", "4", "--gpus-per-node", "4", "--seq-len", "1024",
              "--format", "json"]
    p = run_cli(["estimate", *common, "--hf", "--bf16", "--per-device-train-batch-size", "1"])
    d = json.loads(p.stdout)
    assert p.returncode == 0, p.stderr
    assert d["load"]["dtype"] == "fp16" and d["load"]["host_per_node"] == 4 * 2 * 6_738_415_616
    p = run_cli(["estimate", *common])
    d = json.loads(p.stdout)
    assert d["load"]["dtype"] == "fp32" and d["load"]["host_per_node"] == 4 * 4 * 6_738_415_616


def test_hf_zero3_state_dict_that_does_not_fit_the_node_is_m101_at_its_instant(tmp_path):
    """Llama-3-70B through the HF Trainer at ZeRO-3 (no offload) on 32 ranks, 8 per node, 128 GB of
    host memory per node: the step needs no host memory, but rank 0 reads the whole bf16
    checkpoint while from_pretrained loads it: 70,553,706,496 x 2 = 141,107,412,992 B > 128e9.
    M101 names that instant; there is nothing else on the host then."""
    f = tmp_path / "z3.json"
    f.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                             "optimizer": {"type": "AdamW", "params": {"lr": 5e-5}},
                             "zero_optimization": {"stage": 3}}))
    p = run_cli(["estimate", str(f), "--model", "llama-3-70b", "--world-size", "32", "--gpus-per-node", "8",
                 "--seq-len", "1024", "--hf", "--bf16", "--per-device-train-batch-size", "1",
                 "--host-memory", "128GB", "--format", "json"])
    d = json.loads(p.stdout)
    assert p.returncode == 1, p.stderr
    host = next(r for r in d["fit"] if r["tier"] == "host")
    assert (host["need"], host["instant"]) == (70_553_706_496 * 2, "load:state_dict")
    # outside the load: the checkpoint save, each of the node's 8 ranks staging its largest
    # sub-group's fp32 partition, S x 4 B (torch/serialization.py l.1290-1310); sub-groups are
    # filled to sub_group_size 1e9 elements and exceed it by less than one partition, at most the
    # embedding's ceil(128256 x 8192 / 32) = 32,833,536 elements
    S = host["steady_need"] // (8 * 4)
    assert host["steady_need"] == 8 * 4 * S and 10 ** 9 <= S < 10 ** 9 + 32_833_536
    assert d["load"]["host_per_node"] == 70_553_706_496 * 2 and d["load"]["fits"] is False
    (m101,) = [x for x in d["findings"] if x["code"] == "M101"]
    assert m101["data"]["instant"] == "load:state_dict" and "rank 0" in m101["message"]
    assert "16-bit" not in m101["fix"]  # the checkpoint is bf16 already
    assert not [x for x in d["findings"] if x["code"] == "M100"]


def test_zero2_accumulation_holds_the_previous_micro_steps_gradient_partition():
    """ZeRO-2, GA 2 (train_batch_size 4 / (micro 1 x 2 ranks)), the 6-tensor proxy of
    tests/engine/test_peak_parity.py (engine-proven there, cell z2_bf16_tbsga2_w2). DeepSpeed
    0.19.8 stage_1_and_2.py: grads_in_partition holds every tensor touching the rank's partition
    (copy_grads_in_partition l.2184-2194: total_size over params_in_partition), and
    all_grad_tensors (l.1038-1040) keeps micro-step 1's alive into micro-step 2 (freed l.1059).
    By hand: 43,209 elements, partitions of ceil(43,209 / 2) = 21,605; rank 0 [0, 21,605) touches
    l1.weight 19,264 + l1.bias 301 + l2.weight 23,177 = 42,742 -> x 2 B = 85,484 B; rank 1
    touches l2.weight, l2.bias 77, l3.weight 385, l3.bias 5 = 23,644 -> 47,288 B (the engine's
    copy_grads_in_partition site measured exactly these)."""
    from advisor.model.inventory import from_dict

    tiny = {"name": "tiny-mlp", "tensors": [
        {"name": "l1.weight", "shape": [301, 64]}, {"name": "l1.bias", "shape": [301]},
        {"name": "l2.weight", "shape": [77, 301]}, {"name": "l2.bias", "shape": [77]},
        {"name": "l3.weight", "shape": [5, 77]}, {"name": "l3.bias", "shape": [5]}]}
    cfg = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2, "reduce_bucket_size": 50000, "overlap_comm": False,
                                 "contiguous_gradients": True}}
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, from_dict(tiny, "t"), Cluster(world_size=2)))
    load = resolve_load(ec, zero_init=False, dtype=None)
    tiers = ("accelerator", "host_pinned", "host_pageable")
    for r, want in ((0, 85484), (1, 47288)):
        got = [e.bytes for e in led.rank(r).entries if e.item == "prev_grads_in_partition"]
        assert got == [want], (r, got)
        tl = role_timeline(led, led.rank(r), load, rank=r)
        s = dict(zip((x.key for x in tl.instants), tl.series(tiers)))
        # micro-step 2's forward = micro-step 1's + the held partition; nothing else differs
        assert s["forward:2"] - s["forward:1"] == want
        # ZeRO-2 reduces inside micro-step 1's backward: an instant of its own
        assert "reduce:1" in s
    # the same at GA 1: no such entry, no reduce:1
    led1 = compute_ledger(Plan(effective_config({**cfg, "train_batch_size": 2}), from_dict(tiny, "t"),
                               Cluster(world_size=2)))
    assert not [e for e in led1.rank(0).entries if e.item == "prev_grads_in_partition"]
    assert "reduce:1" not in [x.key for x in role_timeline(led1, led1.rank(0), load, rank=0).instants]


def test_save_model_file_holds_cpu_copies_of_the_frozen_parameters_from_zero2():
    """save_checkpoint's model-states state (engine.py _common_checkpoint_state l.5017-5038) holds
    frozen_param_fragments at ZeRO-2/3 (save_frozen_param, l.5383): ``.cpu()`` of each frozen
    parameter (ZeRO-2: whole; ZeRO-3: its partition ds_tensor, ceil(n / W)), built on every rank.
    TINY3 with l2 frozen, W = 2, bf16, optimizer offloaded (no other host copy at the save)."""
    inv = Inventory(name="tiny-frozen", tensors=[TensorSpec(t.name, t.shape, trainable=not t.name.startswith("l2"))
                                                 for t in TINY3.tensors], source="test")
    for stage, frag in ((2, (23177 + 77) * 2), (3, (11589 + 39) * 2)):
        cfg = {**Z3, "zero_optimization": {"stage": stage, "offload_optimizer": {"device": "cpu"}}}
        t1 = _tl(cfg, inv, 2, rank=1)
        assert _at(t1, "save:model", HOST) - _at(t1, "save", HOST) == frag
    z1 = _tl({**Z3, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}}, inv, 2, rank=1)
    assert _at(z1, "save:model", HOST) == _at(z1, "save", HOST)


def test_zero3_nonpersistent_fetch_follows_the_coordinator():
    """TINY3 at stage3_param_persistence_threshold 100 (l2.bias, l3.bias persistent), W = 2, bf16: the
    gathered-parameter entries by hand from DeepSpeed 0.19.8 (partitioned_param_coordinator.py
    fetch_sub_module / release_sub_module, partition_parameters.py _all_gather_dtype l. 1343 and
    AllGatherCoalescedHandle.wait l. 795); the engine cell z3_bf16_nonpersist_w2 measured each phase
    within 0.01% of these."""
    cfg = {**Z3, "zero_optimization": {"stage": 3, "reduce_bucket_size": 50000,
                                       "stage3_param_persistence_threshold": 100}}
    led = compute_ledger(Plan(effective_config(cfg), TINY3, Cluster(world_size=2)))
    got = {e.item: e.bytes for e in led.rank(0).entries}
    # first forward, one module at a time: l2's flat buffer (ceil(23177/2) + ceil(77/2)) x 2 x 2 beside its
    # torch.cat copies (23177 + 77) x 2
    assert got["zero3_first_fetch"] == (11589 + 39) * 2 * 2 + (23177 + 77) * 2
    # later forwards: the root module's prefetch takes the four non-persistent parameters (43,127 elements
    # < the 5e7 bucket) in one all-gather, flat (9632 + 151 + 11589 + 193) x 2 x 2; l1's wait cats all four
    assert got["zero3_gathered_params"] == (9632 + 151 + 11589 + 193) * 2 * 2 + (19264 + 301 + 23177 + 385) * 2
    # the bucket (50,000) takes every gradient: one flush at the end, flat 43,214 x 2 (zero3_reduce_flush)
    assert got["zero3_reduce_flush"] == 86428
    # first backward: l1 (first in forward, its post-backward hook never fires) is still gathered at that
    # flush, (19264 + 301) x 2; every other moment is less (l2's fetch 93,020)
    assert got["zero3_first_backward_gathered"] == (19264 + 301) * 2
    # later backwards: l2.weight's gradient arrives whole (23,177 x 2) with l1 and l2.weight gathered (l3
    # released after its backward): 39,130 + 46,354 + 46,354 = 131,838, less the flush's 86,428
    assert got["zero3_gathered_params_backward"] == (19264 + 301) * 2 + 23177 * 2 * 2 - 86428


def test_zero3_nvme_grad_tails_appear_flush_by_flush():
    # offload_optimizer nvme at ZeRO-3: a swappable sub-group's fp32 gradient pieces below the aio
    # size (1 MiB, swap_tensor/constants.py MIN_AIO_BYTES) or unaligned (optimizer_utils.py
    # _adjust_for_misaligned_lengths l. 462-475: the remainder is a view of the whole copy) stay in
    # memory from their flush (stage3.py partition_grads l. 2053) to the step. W = 2, sub_group_size
    # 300,000 -> sub-groups [l1.weight 527,872] [l1.bias 516, l2.weight 530,450] [l2.bias 515]
    # (stage3.py _create_fp16_sub_groups); the last is 2,060 B < 1 MiB: not swapped.
    #   l1.weight: 527,872 = 2,062 x 256 (aligned, 1024 B / 4 B): no tail
    #   l1.bias:   516 x 4 = 2,064 B < 1 MiB: kept whole
    #   l2.weight: 530,450 = 2,072 x 256 + 18: unaligned, the whole 530,450 x 4 = 2,121,800 B kept
    from advisor.ledger.state import zero3_flush_grad_tails, zero3_reduce_flush_bytes
    inv = Inventory(name="big", tensors=[TensorSpec(n, s) for n, s in [
        ("l1.weight", (1031, 1024)), ("l1.bias", (1031,)), ("l2.weight", (1029, 1031)), ("l2.bias", (1029,))]],
        source="test")
    ec = effective_config({**Z3, "zero_optimization": {
        "stage": 3, "reduce_bucket_size": 50000, "sub_group_size": 300000,
        "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"}}})
    assert zero3_flush_grad_tails(ec, inv, 2) == (0, 2064, 2121800, 0)
    # gradients arrive l2.weight, l2.bias, l1.weight, l1.bias (Linear pairs, weight first). The first
    # flush (l2.weight's, as l2.bias arrives) has no tail yet: flat 530,450 x 2 x 2 + whole 1,060,899 x 2
    # + arriving 1,029 x 2 + fp64 norm 530,450 x 8; the epilogue's (l1.bias alone: flat 516 x 2 x 2,
    # norm 516 x 8) holds l2.weight's 2,121,800 B tail
    best, _, reg = zero3_reduce_flush_bytes(ec, inv, 2)
    assert best == 2121800 + 2121798 + 2058 + 4243600
    assert reg[2] == 2064 + 516 * 8 + 2121800
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=2)))
    tails = [e for e in led.rank(0).entries if e.item == "opt_unswapped_grad_tails"]
    assert [(e.bytes, e.life) for e in tails] == [(2064 + 2121800, "step")]
    # no tails at the first flush: the backward instant is the flush + what persists, not + the tails
    tl = role_timeline(led, led.rank(0), resolve_load(ec), ga=1)
    at = {x.key: i for i, x in enumerate(tl.instants)}
    items = {e[0] for e in tl.entries[at["backward:1"]]}
    assert "opt_unswapped_grad_tails" not in items and "zero3_reduce_flush" in items
    assert "opt_unswapped_grad_tails" in {e[0] for e in tl.entries[at["first_step:prep"]]}


def test_zero0_allreduce_bucket_of_one_tensor_makes_no_flat_copy():
    # ZeRO-0 fp32, W = 2: engine.py allreduce_no_retain buckets the gradients (module order) until
    # numel > 5e8; allreduce_bucket (l.3796) flattens each bucket with torch's _flatten_dense_tensors,
    # which returns a single tensor's own storage viewed flat (torch/csrc/utils/tensor_flatten.h), so
    # a one-tensor model (--params 1,000,000: one 1e6-element tensor) has no flat copy in backward.
    # Measured (issue 15, ds-advisor measure --params 1000000 --world-size 2): backward:1 8,000,052 B
    # (params + grads, 48 B of scalars), the ledger had 12,000,000 B with a 4 MB copy.
    cfg = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 0}}
    n = 1_000_000
    one = _tl(cfg, from_param_count(n), 2)
    assert _at(one, "backward:1") == n * 4 + n * 4            # the fp32 parameters + their gradients
    # the steady iteration's backward adds exp_avg and exp_avg_sq; the step (update) the same four
    assert _at(one, "steady:backward") == 4 * n * 4
    # several tensors in one bucket: a new N x 4 flat tensor beside the gradients (torch.cat)
    many = _tl(cfg, MLP, 2)
    N = 43209
    assert _at(many, "backward:1") == N * 4 * 3


def test_zero3_step_norm_casts_the_largest_gradient_partition_to_fp64():
    # ZeRO-3 fp32, W = 1 (every partition whole): stage3.py step -> _get_norm_groups ->
    # get_grad_norm_direct (l.2457) casts each gradient partition to fp64 for its norm, one at a
    # time, after _partition_all_parameters and before the sub-group loop's fp32 gradient. MLP's
    # largest is 23,177 elements: 23,177 x 8 B. Beside it, the steady step holds the fp32 partitions
    # (N x 4), the gradient partitions (N x 4), the ipg bucket (reduce_bucket_size x 4), the fp32
    # master and both moments (3 N x 4). Measured (issue 15, z3_fp32_tbsga2_w1 step:4, TINY has
    # these sizes): 1,249,669 B, 73 B of scalars over this.
    cfg = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 3, "reduce_bucket_size": 50000}}
    N = 43209
    tl = _tl(cfg, MLP, 1)
    base = N * 4 * 5 + 50000 * 4
    assert _at(tl, "steady_step:norm") == base + 23177 * 8
    assert _at(tl, "steady_step:prep") == base + N * 4          # the fp32 gradient instead (one sub-group)
    b, i = tl.peak(ACC + HOST)
    assert b == base + 23177 * 8 and tl.instants[i].key == "steady_step:norm"
    # W = 2: partitions ceil(n/2); the largest 11,589 x 8 B
    tl2 = _tl(cfg, MLP, 2)
    got = {e[0]: e[3] for e in tl2.entries[[x.key for x in tl2.instants].index("steady_step:norm")]}
    assert got["grad_norm_fp64"] == 11589 * 8


def test_zero3_one_tensor_sub_group_step_makes_no_flat_copy():
    # stage3.py _prepare_fp32_grad_for_sub_group (l.2686): flatten(averaged_gradients[k]).to(fp32).
    # One tensor: torch's _flatten_dense_tensors returns its own storage viewed flat, and .to(fp32)
    # of fp32 gradients is the same tensor: nothing new (measured, issue 15: measure --params 1000000,
    # ZeRO-3 fp32 W = 1, the in_step census found no fp32_grad storage). With bf16 gradients .to(fp32)
    # makes the N x 4 copy, and the 16-bit flatten is still a view (no N x 2 copy beside it).
    n = 1_000_000
    base = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": 3, "reduce_bucket_size": 50000}}

    def items(cfg, inv):
        ec = effective_config(cfg)
        return {e.item: e.bytes for e in compute_ledger(Plan(ec, inv, Cluster(world_size=1))).rank(0).entries}
    got = items(base, from_param_count(n))
    assert got["fp32_grad"] == 0 and got.get("zero3_grad_flat_copy", 0) == 0
    got = items({**base, "bf16": {"enabled": True}}, from_param_count(n))
    assert got["fp32_grad"] == n * 4 and got.get("zero3_grad_flat_copy", 0) == 0
    # several tensors in the sub-group: the flatten is a torch.cat, N x 2, beside its fp32 cast
    got = items({**base, "bf16": {"enabled": True}}, MLP)
    assert got["fp32_grad"] == 43209 * 4 and got["zero3_grad_flat_copy"] == 43209 * 2
    assert items(base, MLP)["fp32_grad"] == 43209 * 4


def test_zero3_nvme_params_first_iteration_is_the_replays():
    # offload_param nvme: only the coordinator's prefetch stops at a partition on NVMe
    # (partitioned_param_coordinator.py _is_currently_on_nvme); the first iteration has no prefetch
    # (incomplete trace), one module at a time. Its largest fetch, l2 (two parameters, W = 2): the
    # coalesced all-gather's flat buffer sum ceil(n_i/2) x 2 x 2 B = (530,450 + 515) x 4 = 2,123,860 B
    # (partition_parameters.py _all_gather_dtype l. 1343) beside the torch.cat copies
    # (1,060,899 + 1,029) x 2 = 2,123,856 B (AllGatherCoalescedHandle.wait l. 795). The reference's
    # rule (every non-persistent parameter, padded: sum ceil(n_i/2) x 2 x 2 B = (1,055,744 + 530,450 x 2) x 2,
    # zero3_gathered_params_numel) only from the second forward.
    inv = Inventory(name="big", tensors=[TensorSpec(n, s) for n, s in [
        ("l1.weight", (1031, 1024)), ("l1.bias", (1031,)), ("l2.weight", (1029, 1031)), ("l2.bias", (1029,))]],
        source="test")
    ec = effective_config({**Z3, "zero_optimization": {
        "stage": 3, "reduce_bucket_size": 50000,
        "offload_param": {"device": "nvme", "nvme_path": "/tmp", "buffer_count": 5, "buffer_size": 1100000,
                          "max_in_cpu": 1000}}})
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=2)))
    by = {e.item: e for e in led.rank(0).entries}
    assert by["zero3_first_fetch"].bytes == 2123860 + 2123856
    assert (by["zero3_gathered_params"].bytes, by["zero3_gathered_params"].life) == (
        (1055744 + 530450 * 2) * 2, "steady_forward_backward")
    tl = role_timeline(led, led.rank(0), resolve_load(ec), ga=1)
    at = {x.key: {e[0] for e in tl.entries[i]} for i, x in enumerate(tl.instants)}
    assert "zero3_gathered_params" not in at["forward:1"] | at["backward:1"]
    assert "zero3_gathered_params" in at["steady:forward"] and "zero3_gathered_params" in at["steady:backward"]


def test_zero1_overlap_comm_accumulation_moves_gradients_in_hook_order_at_the_boundary():
    """ZeRO-1, overlap_comm, GA 2 (train_batch_size 4 / (micro 1 x 2 ranks)), TINY's real Linears (engine-proven:
    tests/engine/test_peak_parity.py z1_bf16_overlap_tbsga2_bigtensor_w2, and this flat bucket on the proxy).
    DeepSpeed 0.19.8 stage_1_and_2.py: micro-step 1's hooks only set up the two ipg buffers (setup_buckets
    l.3256-3278, overlap_comm's second one) and move nothing (reduce_ready_partitions_and_remove_grads l.2294:
    ZeRO-1 only at the boundary), so every param.grad (N x 2 B) and both buffers (2 x 50,000 x 2 B) live from
    micro-step 1's backward into micro-step 2's forward. At the boundary each hook (process_gradients l.2290,
    overlap_comm) moves its accumulated gradient into the bucket right after torch adds the new one, in autograd's
    order: l3.bias (5, made with l3.weight 385), l3.weight, l2.bias (77, with l2.weight 23,177), l2.weight, l1.bias
    (301, with l1.weight 19,264), l1.weight. At l2.bias's accumulation 5 + 385 elements are moved: live are
    43,209 - 390 accumulated + 77 + 23,177 new = 66,073 elements -> 132,146 B, the largest (l2.weight's: 42,742 +
    23,177 = 65,919); one flush (43,209 < 50,000), the epilogue's flat copy N x 2 = 86,418 B, below it."""
    from advisor.model.inventory import from_dict

    tiny = {"name": "tiny-mlp", "tensors": [
        {"name": "l1.weight", "shape": [301, 64]}, {"name": "l1.bias", "shape": [301]},
        {"name": "l2.weight", "shape": [77, 301]}, {"name": "l2.bias", "shape": [77]},
        {"name": "l3.weight", "shape": [5, 77]}, {"name": "l3.bias", "shape": [5]}]}
    cfg = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 1, "reduce_bucket_size": 50000, "overlap_comm": True,
                                 "contiguous_gradients": True}}
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, from_dict(tiny, "t"), Cluster(world_size=2)))
    load = resolve_load(ec, zero_init=False, dtype=None)
    tiers = ("accelerator", "host_pinned", "host_pageable")
    for r in (0, 1):
        tl = role_timeline(led, led.rank(r), load, ga=2, rank=r)
        s = dict(zip((x.key for x in tl.instants), tl.series(tiers)))
        assert s["backward:1"] - s["forward:1"] == 2 * 50000 * 2 + 43209 * 2
        assert s["forward:2"] == s["backward:1"]
        assert s["backward:2"] - s["forward:1"] == 2 * 50000 * 2 + 66073 * 2
        assert s["reduce"] < s["backward:2"]
        # the step has its fp64 norm instant (get_grad_norm_direct l.2684), as at GA 1
        assert "first_step:norm" in s and "steady_step:norm" in s


def _walk_zero1_overlap_boundary(sizes: list[int], W: int, rbs: int, D: int) -> list[int]:
    """ZeRO-1 overlap_comm at GA > 1, the boundary's backward walked from DeepSpeed 0.19.8's rules, per rank:
    every param.grad of micro-step 1 is live (l.2294: nothing moved before the boundary); autograd reaches the
    parameters in the reverse of their use (the proxy touches them in order), torch adds each new gradient into
    param.grad (accumulateGrad) and then its hook (process_gradients l.2290) moves it into the bucket, first
    flushing the bucket when it would pass RBS (l.1421-1424); a gradient over RBS stays in its own storage until
    its flush (extra_large_param_to_reduce, l.1447-1449), after which only the ranks owning part of it drop it
    (copy_grads_in_partition, l.2272-2274), and the first flush holding part of the rank's slice allocates its
    grads_in_partition (I_r elements: every tensor meeting the slice, l.2184-2194). Returns, per rank, the most
    bytes of gradients at an accumulation, over the N x D of param.grad: the moment of the new gradient beside
    those not yet moved (1-D names: no autograd siblings)."""
    N = sum(sizes)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    n_pad = -(-N // (2 * W)) * 2 * W
    P = n_pad // W
    out = []
    for r in range(W):
        lo, hi = r * P, (r + 1) * P
        meets = [max(0, min(starts[i] + sizes[i], hi) - max(starts[i], lo)) > 0 for i in range(len(sizes))]
        inter = sum(n for n, m in zip(sizes, meets) if m)
        best = moved = elems = kept = 0
        bucket: list[int] = []
        pending = None
        alloc = False
        for i in reversed(range(len(sizes))):
            n = sizes[i]
            best = max(best, (N - moved) + n + (sizes[pending] if pending is not None else 0) + kept
                       + (inter if alloc else 0))
            if elems + n > rbs:
                if any(meets[j] for j in bucket):
                    alloc = True
                if pending is not None and not meets[pending]:
                    kept += sizes[pending]
                bucket, elems, pending = [], 0, None
            bucket.append(i)
            elems += n
            moved += n
            if n > rbs:
                pending = i
        out.append(max(0, best - N) * D)
    return out


def test_zero1_overlap_comm_boundary_accumulation_walks_deepspeeds_rules():
    import random
    # reduce_bucket_size 3,000 / 5,000: no gradient over the bucket (the ledger's prefix / suffix maxima);
    # 1,000 with sizes [999, 999, 5, 5] among them: the rank's grads_in_partition beside a later accumulation
    for seed in range(80):
        rng = random.Random(seed)
        W = rng.choice((1, 2, 3, 4, 8))
        rbs = rng.choice((50, 200, 1000, 3000, 5000))
        sizes = [rng.choice((1, 7, 64, 199, 256, 1500, rng.randint(1, 3000))) for _ in range(rng.randint(1, 20))]
        if seed % 10 == 0:
            sizes, rbs = [999, 999, 5, 5], 1000
        inv = Inventory(name="w", source="test", tensors=[TensorSpec(f"m{i}.w", (n,)) for i, n in enumerate(sizes)])
        cfg = {"train_batch_size": 2 * W, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
               "zero_optimization": {"stage": 1, "reduce_bucket_size": rbs, "overlap_comm": True,
                                     "contiguous_gradients": True}}
        led = compute_ledger(Plan(effective_config(cfg), inv, Cluster(world_size=W)))
        want = _walk_zero1_overlap_boundary(sizes, W, rbs, 2)
        for r in range(W):
            got = [e.bytes for e in led.rank(r).entries if e.item == "accumulate_grad_new"]
            assert got == [want[r]], (seed, W, rbs, sizes, r)


def test_zero12_initialize_has_the_flatten_and_the_optimizer_states_zeros():
    # stage_1_and_2.py DeepSpeedZeroOptimizer.__init__: flatten_dense_tensors_aligned (l.505-508) makes the
    # n_pad-element flat copy while the parameters are still their own storages (views of it only at l.534);
    # initialize_optimizer_states (l.934-953) makes torch.zeros(partition_size) in fp32 per group and drops
    # it without cpu_offload (l.950-952). MLP: N = 43,209; W = 2: n_pad = A_4(N) = 43,212, P = 21,606
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1}}
    N = 43209
    tl = _tl(cfg, MLP, 2)
    keys = [x.key for x in tl.instants]
    assert keys[:6] == ["load", "initialize:cast", "initialize:module", "initialize:flatten",
                        "initialize:optimizer_states", "initialize"]
    assert _at(tl, "initialize:flatten") == (N + 43212) * 2
    assert _at(tl, "initialize") == 43212 * 2 + 21606 * 4  # the flat buffer + the fp32 master partition
    assert _at(tl, "initialize:optimizer_states") == 43212 * 2 + 21606 * 4 + 21606 * 4
    # fp32 at W = 4: n_pad = A_8(N) = 43,216, P = 10,804; the module's fp32 parameters beside the flat copy
    fp32 = {**cfg, "bf16": {"enabled": False}, "zero_optimization": {"stage": 2}}
    tl = _tl(fp32, MLP, 4)
    assert _at(tl, "initialize:flatten") == (N + 43216) * 4
    assert _at(tl, "initialize:optimizer_states") == 43216 * 4 + 10804 * 4 + 10804 * 4
    # CPU optimizer offload keeps the zeros (the fp32 gradient partition): no such instant, the flatten stays
    off = {**cfg, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    tl = _tl(off, MLP, 2)
    keys = [x.key for x in tl.instants]
    assert "initialize:optimizer_states" not in keys and _at(tl, "initialize:flatten") == (N + 43212) * 2
    # ZeRO-3 builds no DeepSpeedZeroOptimizer
    tl = _tl({**cfg, "zero_optimization": {"stage": 3}}, MLP, 2, zero_init=False)
    assert not {"initialize:flatten", "initialize:optimizer_states"} & {x.key for x in tl.instants}


def test_fp16_optimizer_initialize_has_its_warm_up_zeros():
    # fused_optimizer.py FP16_Optimizer.initialize_optimizer_states (l.125-134): a zeroed fp32 gradient of each
    # flat fp32 master's size (torch.zeros l.127) for a warm-up step, dropped after it (l.132): N x 4 more than
    # what is live at initialize (the bf16 flat N x 2, the fp32 master N x 4, Adam's two moments 2 x N x 4)
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 0}}
    N = 43209
    tl = _tl(cfg, MLP, 2)
    assert "initialize:flatten" not in [x.key for x in tl.instants]
    assert _at(tl, "initialize") == N * 2 + N * 4 * 3
    assert _at(tl, "initialize:optimizer_states") == N * 2 + N * 4 * 4


def test_zero3_initialize_gathers_each_parameter_for_its_gradient_hook():
    # stage3.py create_reduce_and_remove_grad_hooks (called at l.519 of __init__): param.all_gather() (l.1504),
    # the hook registered, param.partition() (l.1531), one parameter at a time: the largest one's flat buffer,
    # ceil(n / W) x W elements (partition_parameters.py _allgather_params_sequential l.2142), beside what
    # initialize holds. MLP's largest tensor: 23,177 -> W = 4: 5,795 x 4 = 23,180 elements
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 3}}
    for zi in (False, True):
        tl = _tl(cfg, MLP, 4, zero_init=zi)
        keys = [x.key for x in tl.instants]
        assert keys.index("initialize:grad_hooks") == keys.index("initialize") - 1
        assert _at(tl, "initialize:grad_hooks") - _at(tl, "initialize") == 23180 * 2
    # fp32: the buffer in fp32; W = 1: the whole tensor
    tl = _tl({**cfg, "bf16": {"enabled": False}}, MLP, 1, zero_init=True)
    assert _at(tl, "initialize:grad_hooks") - _at(tl, "initialize") == 23177 * 4


def test_zero3_initialize_casts_and_clones_each_fp32_master():
    # stage3.py _create_fp32_partitions without offload in 16-bit (l.1167-1171): converted = partition.to(fp32),
    # then converted.clone(): at sub-group i the masters made so far and the cast, beside the 16-bit partitions.
    # MLP, W = 2, sub_group_size 10,000 -> S = [21,372, 235] (zero3_sub_groups' docstring, measured):
    # max(21,372 + 21,372, 21,607 + 235) x 4; the partitions: sum ceil(n/2) = 21,607 elements x 2 B
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 3, "sub_group_size": 10000}}
    tl = _tl(cfg, MLP, 2, zero_init=True)
    assert _at(tl, "initialize:fp32_partitions") == 21372 * 2 * 4 + 21607 * 2
    # optimizer offload casts into host memory (another branch): no such instant
    off = {**cfg, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}
    assert "initialize:fp32_partitions" not in [x.key for x in _tl(off, MLP, 2, zero_init=True).instants]


def test_zero1_initialize_transients_under_pipeline_parallelism_are_the_stages():
    """Issue 15: a PipelineModule's ZeRO-1 optimizer flattens and partitions only its stage's parameters
    (runtime/pipe/module.py _build l.235-276), so initialize:optimizer_states is initialize + the stage's zeroed fp32
    partition (stage_1_and_2.py l.937) and initialize:flatten the stage's bf16 parameters beside their flat copy
    (l.505-508); with --pipeline-build whole the other stages' fp32 modules (module.py l.188) are live at both.
    By hand, pipe_worker's model at DP 1: stage 0 = embedding + 2 blocks, stage 1 = 2 blocks + norm + head."""
    from tests.pipe_proxy import F, H, L, V, pipe_inventory
    assert L == 4
    blk = H + 2 * F * H
    n = {0: V * H + 2 * blk, 1: 2 * blk + H + V * H}  # elements per stage (even: no alignment padding at DP 1)
    assert n[0] % 2 == 0 and n[1] % 2 == 0
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
                           "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}})
    led = compute_ledger(Plan(ec, pipe_inventory(), Cluster(world_size=2, pipeline_parallel=2)))
    for build in ("stage", "whole"):
        for r in (0, 1):
            tl = role_timeline(led, led.rank(r), resolve_load(ec, zero_init=False, pipeline_build=build), ga=2, rank=r)
            ser = tl.series(("accelerator", "host_pinned", "host_pageable"))
            at = {x.key: ser[i] for i, x in enumerate(tl.instants)}
            off = n[1 - r] * 4 if build == "whole" else 0  # the other stage's modules, fp32
            assert at["initialize:optimizer_states"] - at["initialize"] == n[r] * 4, (build, r, at)
            assert at["initialize:flatten"] == off + n[r] * 2 + n[r] * 2, (build, r, at)


def test_made_gradient_moments_of_a_model_without_layers():
    # 2a3587a's head moment read layer_maxes[L - 1] with L = 0 (`A if head else B if L else 0` binds as
    # `A if head else (B if L else 0)`): generate of 10,000 nameless [64, 64] tensors (no layer) exited 2 with an
    # internal IndexError, and so did bounds.py's "1e5 no-rep" case. By hand: with no layer backward_grad_layout puts
    # every tensor with the head (`post`: 6,000 elements, the largest 1,000), so the largest new gradient (1,000
    # elements x 2 B) is made at the head's moment and at the one layer moment (layer L-1's, where the head's
    # gradients count without a head moment); none at the start or the end.
    from types import SimpleNamespace
    from advisor.ledger.timeline import _made_grad_moments
    lay = (0, 6000, (), 0, 1000, (), 6000)
    e = SimpleNamespace(item="accumulate_grad_new")
    assert _made_grad_moments(e, 2000, lay, [], head=True) == [0, 2000, 2000, 0]
    assert _made_grad_moments(e, 2000, lay, [], head=False) == [0, 2000, 0]


def test_generate_of_nameless_tensors_without_layers_runs(tmp_path):
    arch = {"family": "llama", "hidden_size": 64, "num_layers": 32, "num_heads": 4, "num_kv_heads": 4,
            "intermediate_size": 128, "vocab_size": 1000, "max_seq_len": 128}
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"meta": arch, "tensors": [{"shape": [64, 64]}] * 10_000}))
    r = run_cli(["generate", "--model", str(inv), "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
                 "--global-batch", "8", "--seq-len", "128", "--format", "json"])
    assert r.returncode == 0, r.stderr
    assert "internal error" not in r.stderr
    assert json.loads(r.stdout)
