"""ZeRO-2 with ``contiguous_gradients`` off: the reduce transient R_r of
``state.zero12_backward_transients`` (``state._zero12_noncontig_transients``) against a walk, rank by
rank and hook by hook, of what DeepSpeed 0.19.8's ``stage_1_and_2.py`` keeps live (the rules its
docstring cites): hooks in the reverse of model order; a gradient whose arrival would take the bucket
past reduce_bucket_size flushes it first (l.1422), beside itself; every gradient stays whole in
``bucket.grads`` (l.1472, no ipg buffer without contiguous_gradients); a flush flattens the whole bucket
(allreduce_bucket l.2367, a view for one gradient); after it a gradient meeting the rank's slice
[r P, (r+1) P) stays whole and the others are dropped (l.2266-2270); the epilogue flushes the last
bucket and leaves (I_r + P - Cov_r) x D (get_flat_partition's views and zero pad, l.1047). With
``overlap_comm`` the dropped ones wait in previous_reduced_grads (l.2265-2267) until the next flush's
allreduce_and_copy clears them before it flattens (l.2411-2415): that flush opens with them whole.
The engine proves the single-flush and the several-flush cases on TINY
(tests/engine/test_peak_parity.py z2_bf16_noncontig_w2, z2_bf16_noncontig_smallbucket_w2;
z2_bf16_noncontig_overlap_normlife_w2 with overlap_comm); this checks
the per-rank pieces over many shapes and world sizes."""

from __future__ import annotations

import random

import pytest

from advisor.config.effective import effective_config
from advisor.ledger import state
from advisor.model.inventory import from_dict


def _walk(numels: list[int], W: int, rbs: int, D: int, overlap: bool = False) -> list[int]:
    lay = state.zero12_group_layout(tuple(numels), W, D, True)
    P = lay.P
    spans = list(zip(lay.starts, lay.numels))
    out = []
    for r in range(W):
        lo, hi = r * P, (r + 1) * P
        meets = [max(0, min(a + n, hi) - max(a, lo)) > 0 for a, n in spans]
        inter = sum(n for (a, n), m in zip(spans, meets) if m)
        cov = sum(max(0, min(a + n, hi) - max(a, lo)) for a, n in spans)
        kept, bucket, best, waiting = 0, [], 0, 0

        def flush(trigger: int) -> int:
            el = sum(numels[i] for i in bucket)
            flat = el if len(bucket) > 1 else 0
            # overlap_comm: the previous flush's dropped gradients, whole until this flush clears them
            opened = (kept + el + trigger + waiting) * D
            return max(opened, (kept + el + flat + trigger) * D)

        for i in reversed(range(len(numels))):
            n = numels[i]
            if sum(numels[k] for k in bucket) + n > rbs:
                best = max(best, flush(n))
                kept += sum(numels[k] for k in bucket if meets[k])
                waiting = sum(numels[k] for k in bucket if not meets[k]) if overlap else 0
                bucket = []
            bucket.append(i)
        best = max(best, flush(0))
        out.append(max(best, (inter + P - cov) * D))
    return out


@pytest.mark.parametrize("overlap", (False, True))
@pytest.mark.parametrize("seed", range(30))
def test_noncontig_reduce_transient_matches_the_hook_walk(seed: int, overlap: bool) -> None:
    rng = random.Random(seed)
    W = rng.choice((1, 2, 3, 5, 8, 64))
    rbs = rng.choice((50, 300, 2000))
    numels = [rng.choice((1, 7, 64, 199, 256, 1500, rng.randint(1, 3000))) for _ in range(rng.randint(1, 30))]
    inv = from_dict({"name": "walk", "tensors": [{"name": f"m{i}.w", "shape": [n]} for i, n in enumerate(numels)]},
                    "walk")
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                           "zero_optimization": {"stage": 2, "reduce_bucket_size": rbs,
                                                 "contiguous_gradients": False, "overlap_comm": overlap}})
    wrapper = state.select_optimizer(ec)[0]
    assert state.zero12_transients_modeled(ec, wrapper, 1, 1)
    assert state.ipg_bucket_bytes(ec) is None  # no ipg buffer without contiguous_gradients (l.3260)
    layouts = [state.zero12_group_layout(tuple(numels), W, 2, True)]
    got = [row[1] for row in state.zero12_backward_transients(ec, inv, layouts, W).to_list()]
    assert got == _walk(numels, W, rbs, 2, overlap)


def _walk_groups(tensors: list[tuple[int, int]], layouts, W: int, rbs: int, D: int, overlap: bool) -> list[int]:
    """The walk above over several param groups: ``tensors`` = (group, numel) in model order; each group has
    its own flat buffer and partition (stage_1_and_2.py __init__: one per param group; ``layouts``, the groups'
    flat starts and P, in group order), the hooks run over all trainable tensors in the reverse of model order
    and fill one bucket (l.1422: the elements of every group count), and a gradient is kept when it meets the
    rank's slice of its own group's buffer."""
    groups = sorted({g for g, _ in tensors})
    lays = dict(zip(groups, layouts))
    spans = []
    seen = {g: 0 for g in groups}
    for g, n in tensors:
        spans.append((g, lays[g].starts[seen[g]], n))
        seen[g] += 1
    out = []
    for r in range(W):
        def inside(g, a, n):
            P = lays[g].P
            return max(0, min(a + n, (r + 1) * P) - max(a, r * P))
        meets = [inside(g, a, n) > 0 for g, a, n in spans]
        inter = sum(n for (_, _, n), m in zip(spans, meets) if m)
        cov = sum(inside(g, a, n) for g, a, n in spans)
        p_t = sum(lay.P for lay in lays.values())
        kept, bucket, best, waiting = 0, [], 0, 0

        def flush(trigger: int) -> int:
            el = sum(spans[i][2] for i in bucket)
            flat = el if len(bucket) > 1 else 0
            return max((kept + el + trigger + waiting) * D, (kept + el + flat + trigger) * D)

        for i in reversed(range(len(spans))):
            n = spans[i][2]
            if sum(spans[k][2] for k in bucket) + n > rbs:
                best = max(best, flush(n))
                kept += sum(spans[k][2] for k in bucket if meets[k])
                waiting = sum(spans[k][2] for k in bucket if not meets[k]) if overlap else 0
                bucket = []
            bucket.append(i)
        best = max(best, flush(0))
        out.append(max(best, (inter + p_t - cov) * D))
    return out


@pytest.mark.parametrize("overlap", (False, True))
@pytest.mark.parametrize("seed", range(20))
def test_noncontig_groups_reduce_transient_matches_the_hook_walk(seed: int, overlap: bool) -> None:
    rng = random.Random(1000 + seed)
    W = rng.choice((1, 2, 3, 5, 8))
    rbs = rng.choice((50, 300, 2000))
    G = rng.choice((2, 3))
    # interleaved groups (weights / biases / norms), each group at least one tensor
    tensors = [(i % G if i < G else rng.randrange(G), rng.choice((1, 7, 64, 199, 256, 1500, rng.randint(1, 3000))))
               for i in range(rng.randint(G, 24))]
    inv = from_dict({"name": "walk", "tensors": [{"name": f"m{i}.w", "shape": [n], "group": g}
                                                 for i, (g, n) in enumerate(tensors)]}, "walk")
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                           "zero_optimization": {"stage": 2, "reduce_bucket_size": rbs,
                                                 "contiguous_gradients": False, "overlap_comm": overlap}})
    wrapper = state.select_optimizer(ec)[0]
    assert state.zero12_transients_modeled(ec, wrapper, 1, G)
    layouts = state.placement(ec, inv, W).zero12
    assert len(layouts) == G
    got = [row[1] for row in state.zero12_backward_transients(ec, inv, layouts, W).to_list()]
    assert got == _walk_groups(tensors, layouts, W, rbs, 2, overlap)


def test_noncontig_groups_step_frees_each_group_by_hand() -> None:
    """TINY_FROZEN_GROUPS (l2 frozen, l3 in group 1) at W = 2: group 0 = l1 (19,565 elements, padded 19,568,
    P_0 = 9,784), group 1 = l3 (390, padded 392, P_1 = 196). Rank 0 meets l1.weight (I_0 = 19,264, no pad) and
    l3.weight (I_1 = 385, no pad); rank 1 l1.weight and l1.bias (I_0 = 19,565, pad 9,784 - 9,781 = 3) and
    l3 (I_1 = 390, pad 196 - 194 = 2). Without contiguous_gradients group g's averaged_gradients views those
    whole gradients, its own storages, freed by ``averaged_gradients[g] = None`` before group g's update
    (stage_1_and_2.py step): at group 0's prep (I_0 + pad_0 + I_1 + pad_1) x 2 = 39,298 / 39,920 B, at its update
    group 1's alone, 770 / 784 B: the engine's tracker at step:1's high-water mark (z2_bf16_noncontig_groups_w2,
    2026-12-06): 770 B of engine.py l.3428 gradients on rank 0, 780 + 4 B (a pad of _get_flat_partition_unpadded)
    on rank 1."""
    from advisor.ledger.state import Cluster, Plan, compute_ledger
    from advisor.ledger.timeline import resolve_load, role_timeline
    inv = from_dict({"name": "tfg", "tensors": [
        {"name": "l1.weight", "shape": [301, 64]}, {"name": "l1.bias", "shape": [301]},
        {"name": "l2.weight", "shape": [77, 301], "trainable": False},
        {"name": "l2.bias", "shape": [77], "trainable": False},
        {"name": "l3.weight", "shape": [5, 77], "group": 1}, {"name": "l3.bias", "shape": [5], "group": 1}]}, "tfg")
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                           "zero_optimization": {"stage": 2, "reduce_bucket_size": 10000,
                                                 "contiguous_gradients": False, "overlap_comm": False}})
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=2)))
    for r, prep, upd in ((0, 39298, 770), (1, 39920, 784)):
        tl = role_timeline(led, led.rank(r), resolve_load(ec), ga=1, rank=r)
        at = {x.key: sum(b for item, _, _, b in ents if item == "averaged_gradients")
              for x, ents in zip(tl.instants, tl.entries)}
        assert (at["first_step:g0:prep"], at["first_step:g0:update"]) == (prep, upd), r


def test_noncontig_modelled_at_zero1_and_zero2_at_any_ga_and_groups() -> None:
    # ZeRO-1 without contiguous_gradients is replayed at any GA and param groups, overlap_comm on or off
    # (test_zero1_noncontig_transients_by_hand, test_zero1_noncontig_accumulation_by_hand,
    # test_zero1_noncontig_overlap_accumulation_by_hand); at ZeRO-2 overlap_comm (previous_reduced_grads,
    # l.2264-2267: the walk above), GA > 1 (test_noncontig_accumulation_keeps_the_slice_gradients_by_hand) and
    # several param groups (the groups walk) are. What still keeps the coarse lifetimes: optimizer offload and a
    # gradient or communication dtype other than the model's
    base = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}}
    ov = effective_config({**base, "zero_optimization": {"stage": 2, "contiguous_gradients": False,
                                                         "overlap_comm": True}})
    plain = effective_config({**base, "zero_optimization": {"stage": 2, "contiguous_gradients": False,
                                                            "overlap_comm": False}})
    w = state.select_optimizer(plain)[0]
    assert state.zero12_transients_modeled(ov, w, 1, 1)
    assert state.zero12_transients_modeled(plain, w, 2, 1)
    assert state.zero12_transients_modeled(plain, w, 1, 2)
    z1 = effective_config({**base, "zero_optimization": {"stage": 1, "contiguous_gradients": False,
                                                         "overlap_comm": False}})
    w1 = state.select_optimizer(z1)[0]
    assert state.zero12_transients_modeled(z1, w1, 1, 1)
    assert state.zero12_transients_modeled(z1, w1, 2, 1)
    assert state.zero12_transients_modeled(z1, w1, 1, 2)
    assert state.zero12_transients_modeled(z1, w1, 4, 3)
    z1o = effective_config({**base, "zero_optimization": {"stage": 1, "contiguous_gradients": False,
                                                          "overlap_comm": True}})
    assert state.zero12_transients_modeled(z1o, w1, 1, 1)
    assert state.zero12_transients_modeled(z1o, w1, 2, 1)
    assert state.zero12_transients_modeled(z1o, w1, 1, 2)
    assert state.zero12_transients_modeled(z1o, w1, 3, 2)
    z1oc = effective_config({**base, "zero_optimization": {"stage": 1, "contiguous_gradients": False,
                                                           "overlap_comm": True,
                                                           "offload_optimizer": {"device": "cpu"}}})
    assert not state.zero12_transients_modeled(z1oc, state.select_optimizer(z1oc)[0], 2, 1)
    # another communication_data_type: ZeRO-1's and ZeRO-2's flushes hold their casts
    # (test_zero1_noncontig_comm_cast_by_hand, test_zero2_noncontig_comm_cast_by_hand)
    z1comm = effective_config({**base, "communication_data_type": "fp32",
                               "zero_optimization": {"stage": 1, "contiguous_gradients": False, "overlap_comm": True}})
    assert state.zero12_transients_modeled(z1comm, state.select_optimizer(z1comm)[0], 2, 1)
    for ov in (False, True):
        z2comm = effective_config({**base, "communication_data_type": "fp32",
                                   "zero_optimization": {"stage": 2, "contiguous_gradients": False, "overlap_comm": ov}})
        assert state.zero12_transients_modeled(z2comm, state.select_optimizer(z2comm)[0], 2, 1)
        assert state.zero12_transients_unmodeled(z2comm, state.select_optimizer(z2comm)[0], 2, 1) == ""
    assert state.zero12_transients_modeled(plain, w, 1, 1)


@pytest.mark.parametrize("overlap", (False, True))
def test_noncontig_accumulation_keeps_the_slice_gradients_by_hand(overlap: bool) -> None:
    """GA 2 (train_batch_size 4 at W = 2), TINY: the first micro-step's epilogue keeps the gradients meeting
    the rank's slice in all_grad_tensors (stage_1_and_2.py l.1038-1040) after _clear_param_grad_only drops
    param.grad (l.1063), so micro-step 2 runs beside them. P = 43,212 / 2 = 21,606: rank 0's slice meets
    l1.weight 19,264, l1.bias 301, l2.weight 23,177 (42,742 x 2 = 85,484 B), rank 1's l2.weight, l2.bias 77,
    l3.weight 385, l3.bias 5 (23,644 x 2 = 47,288 B): the bytes the engine's tracker found at forward:2
    (TINY at GA 2, engine.py l.3428: the note of tests/engine/test_peak_parity.py z2_bf16_noncontig_groups_tbsga2_w2). Only from micro-step
    2 on: not at the first forward or backward, nor in the step."""
    from advisor.ledger.state import Cluster, Plan, compute_ledger
    from advisor.ledger.timeline import resolve_load, role_timeline
    inv = from_dict({"name": "tiny", "tensors": [
        {"name": "l1.weight", "shape": [301, 64]}, {"name": "l1.bias", "shape": [301]},
        {"name": "l2.weight", "shape": [77, 301]}, {"name": "l2.bias", "shape": [77]},
        {"name": "l3.weight", "shape": [5, 77]}, {"name": "l3.bias", "shape": [5]}]}, "tiny")
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "train_batch_size": 4, "bf16": {"enabled": True},
                           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                           "zero_optimization": {"stage": 2, "reduce_bucket_size": 50000,
                                                 "contiguous_gradients": False, "overlap_comm": overlap}})
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=2)))
    for r, want in ((0, 85484), (1, 47288)):
        kept = [e for e in led.rank(r).entries if e.item == "prev_grads_in_partition"]
        assert [e.bytes for e in kept] == [want], r
        tl = role_timeline(led, led.rank(r), resolve_load(ec), ga=2, rank=r)
        live = {x.key for x, ents in zip(tl.instants, tl.entries) if any(n == "prev_grads_in_partition" for n, *_ in ents)}
        assert {"forward:2", "backward:2", "reduce", "steady:forward"} <= live, (r, live)
        assert not live & {"forward:1", "backward:1", "reduce:1", "first_step:norm", "first_step:update"}, (r, live)


def test_zero1_noncontig_transients_by_hand() -> None:
    """parity.TINY at W = 2, ZeRO-1 bf16 without contiguous_gradients, reduce_bucket_size 10,000. The epilogue
    (reduce_gradients l.971-976) puts the gradients in the bucket by reference in model order: l1.weight (19,264)
    alone, l1.bias (301) alone, l2.weight (23,177) alone, then l2.bias + l3.weight + l3.bias (77 + 385 + 5 = 467) at
    the end; a bucket of one tensor is flattened as a view, so the largest flat copy (allreduce_bucket l.2367) is
    467 x 2 = 934 B, beside all 43,209 x 2 = 86,418 B of gradients, whole to the step (no partition copy at ZeRO-1
    without contiguous_gradients, l.2272). The step's fp64 norm copy: the rank's largest slice x 8 (P = 21,606;
    rank 0 meets l1.weight whole, 19,264 x 8 = 154,112 B; rank 1 l2.weight's 42,742 - 21,606 = 21,136 elements,
    169,088 B). Engine (z1_bf16_noncontig_smallbucket_w2, 2026-12-06): backward 934 B at l.2367 beside 86,418 B of
    engine.py l.3428 gradients; step l.2684 154,120 / 169,096 B (+8 B of norm scalars)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "engine"))
    import parity
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                           "zero_optimization": {"stage": 1, "reduce_bucket_size": 10000,
                                                 "contiguous_gradients": False}})
    inv = from_dict(parity.TINY, "tiny")
    layout = state.zero12_group_layout(tuple(t.numel for t in inv.tensors), 2, 2, False)
    got = state.zero12_backward_transients(ec, inv, [layout], 2, 1).to_list()
    assert got == [(0, 934 + 86418, 154112), (0, 934 + 86418, 169088)]


def test_zero1_noncontig_accumulation_by_hand() -> None:
    """parity.TINY at W = 2, ZeRO-1 bf16 without contiguous_gradients or overlap_comm, GA 2 (train_batch_size 4),
    reduce_bucket_size 50,000: the whole model (43,209 elements) is one bucket. Micro-step 1 reduces nothing
    (runtime/engine.py allreduce_gradients l.3088-3092: stage 1 calls reduce_gradients only at the accumulation
    boundary; stage_1_and_2.py process_gradients l.2290 moves nothing without overlap_comm), and no ipg buffer exists
    (setup_buckets l.3260: contiguous_gradients only), so its backward and micro-step 2's forward hold the N x D =
    43,209 x 2 = 86,418 B of param.grad over the first forward's bytes; the boundary's epilogue walks those
    accumulated gradients into one bucket by reference (reduce_gradients l.971-976) and flattens it
    (allreduce_bucket l.2367), another 86,418 B: 172,836 B. On both ranks. The engine's tracker (the note of
    tests/engine/test_peak_parity.py z1_bf16_noncontig_tbsga2_w2, 2026-12-06, 2 runs): forward:2 - forward:1 =
    259,322 - 172,904 = 86,418 B of engine.py l.3428 gradients; backward:2 - forward:1 = 345,716 - 172,904 =
    172,812 B (the forward's 56 B of proxy scalars gone)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "engine"))
    import parity
    from advisor.ledger.state import Cluster, Plan, compute_ledger
    from advisor.ledger.timeline import resolve_load, role_timeline
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "train_batch_size": 4, "bf16": {"enabled": True},
                           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                           "zero_optimization": {"stage": 1, "reduce_bucket_size": 50000,
                                                 "contiguous_gradients": False, "overlap_comm": False}})
    inv = from_dict(parity.TINY, "tiny")
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=2)))
    for r in (0, 1):
        tl = role_timeline(led, led.rank(r), resolve_load(ec), ga=2, rank=r)
        at = {x.key: sum(e[-1] for e in ents) for x, ents in zip(tl.instants, tl.entries)}
        got = {k: at[k] - at["forward:1"] for k in ("backward:1", "forward:2", "reduce")}
        assert got == {"backward:1": 86418, "forward:2": 86418, "reduce": 172836}, (r, got)


def test_zero1_noncontig_overlap_accumulation_by_hand() -> None:
    """parity.TINY at W = 2, ZeRO-1 bf16 without contiguous_gradients, with overlap_comm, GA 2 (train_batch_size 4),
    reduce_bucket_size 10,000, real Linears. Micro-step 1's hooks move nothing (stage_1_and_2.py
    reduce_ready_partitions_and_remove_grads l.2293-2295: only at the accumulation boundary), so its N x D = 43,209 x 2
    = 86,418 B of param.grad live into micro-step 2. There each node's new gradients are whole beside them before
    accumulateGrad adds them in place: l2's AddmmBackward0 makes l2.bias's and l2.weight's, (77 + 23,177) x 2 =
    46,508 B, the largest (backward:2 = 86,418 + 46,508 = 132,926 B over forward:1). The boundary's hooks, in the
    reverse of model order (l3.bias 5, l3.weight 385, l2.bias 77, l2.weight 23,177, l1.bias 301, l1.weight 19,264),
    flush when the bucket would pass 10,000 elements (l.1422): at l2.weight's hook the bucket l3.bias, l3.weight,
    l2.bias, flattened (allreduce_bucket l.2367): 467 x 2 = 934 B; at l1.bias's hook l2.weight alone (a view) while
    l1.weight's new gradient, made with l1.bias's, is whole: 19,264 x 2 = 38,528 B; the rest single tensors. No flush
    moves a gradient out of param.grad (l.2272), so the reduce holds 86,418 + 38,528 = 124,946 B. On both ranks.
    The engine's tracker (tests/engine/test_peak_parity.py z1_bf16_noncontig_overlap_tbsga2_w2, 2026-12-06, 2 runs):
    backward:2 peaks at 305,972 B, l2's new 46,354 + 154 B beside the 86,418 B; its event order has l2.weight's new
    gradient freed before the 934 B flat copy is made, and l1.weight's 38,528 B live as l1.bias's new one is freed."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "engine"))
    import parity
    from advisor.ledger.state import Cluster, Plan, compute_ledger
    from advisor.ledger.timeline import resolve_load, role_timeline
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "train_batch_size": 4, "bf16": {"enabled": True},
                           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                           "zero_optimization": {"stage": 1, "reduce_bucket_size": 10000,
                                                 "contiguous_gradients": False, "overlap_comm": True}})
    inv = from_dict(parity.TINY, "tiny")
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=2)))
    for r in (0, 1):
        tl = role_timeline(led, led.rank(r), resolve_load(ec), ga=2, rank=r)
        at = {x.key: sum(e[-1] for e in ents) for x, ents in zip(tl.instants, tl.entries)}
        got = {k: at[k] - at["forward:1"] for k in ("backward:1", "forward:2", "backward:2", "reduce")}
        assert got == {"backward:1": 86418, "forward:2": 86418, "backward:2": 86418 + 46508,
                       "reduce": 86418 + 38528}, (r, got)


@pytest.mark.parametrize("comm,C", (("fp32", 4), ("fp16", 2)))
def test_zero1_noncontig_comm_cast_by_hand(comm: str, C: int) -> None:
    """parity.TINY at W = 2, ZeRO-1 bf16 without contiguous_gradients, reduce_bucket_size 10,000, with a
    communication_data_type unlike the model's: the buckets of test_zero1_noncontig_transients_by_hand (l1.weight
    19,264 alone, l1.bias 301 alone, l2.weight 23,177 alone, then 467 elements flattened, 934 B), each also cast to
    it while the all-reduce runs (allreduce_bucket l.2376-2377: ``communication_data_type != tensor.dtype``, so
    fp16 on bf16 too, from a view for one tensor); the largest is l2.weight's 23,177 x C (fp32 92,708 B, fp16
    46,354 B), beside the 86,418 B of whole gradients. Engine (TINY W 2, GA 2, real Linears, 2026-12-06, probe):
    fp32 communication backward:2 352,006 B = 172,848 persistent + 86,418 + 92,708 + 32 B of scalars."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "engine"))
    import parity
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                           "communication_data_type": comm,
                           "zero_optimization": {"stage": 1, "reduce_bucket_size": 10000,
                                                 "contiguous_gradients": False}})
    inv = from_dict(parity.TINY, "tiny")
    layout = state.zero12_group_layout(tuple(t.numel for t in inv.tensors), 2, 2, False)
    got = state.zero12_backward_transients(ec, inv, [layout], 2, 1).to_list()
    R = 86418 + max(23177 * C, 934 + 467 * C)
    assert got == [(0, R, 154112), (0, R, 169088)]


def test_zero1_noncontig_overlap_comm_fp32_by_hand() -> None:
    """test_zero1_noncontig_overlap_accumulation_by_hand's boundary with communication_data_type fp32: each flush
    also holds its run's fp32 cast (allreduce_bucket l.2376-2377). At l1.bias's hook l2.weight alone is cast,
    23,177 x 4 = 92,708 B, beside l1.weight's new 38,528 B; the other flushes are smaller (the 467-element bucket
    934 + 1,868 B; l1.bias 1,204 B; the epilogue's l1.weight 77,056 B). So the reduce holds 86,418 + 92,708 +
    38,528 = 217,654 B over forward:1. Engine (TINY W 2, GA 2, 2026-12-06, probe): backward:2 390,538 B = 172,848
    persistent + 217,654 + 36 B of scalars."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "engine"))
    import parity
    from advisor.ledger.state import Cluster, Plan, compute_ledger
    from advisor.ledger.timeline import resolve_load, role_timeline
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "train_batch_size": 4, "bf16": {"enabled": True},
                           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "communication_data_type": "fp32",
                           "zero_optimization": {"stage": 1, "reduce_bucket_size": 10000,
                                                 "contiguous_gradients": False, "overlap_comm": True}})
    inv = from_dict(parity.TINY, "tiny")
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=2)))
    assert not led.peak_lower_bound
    for r in (0, 1):
        tl = role_timeline(led, led.rank(r), resolve_load(ec), ga=2, rank=r)
        at = {x.key: sum(e[-1] for e in ents) for x, ents in zip(tl.instants, tl.entries)}
        assert at["reduce"] - at["forward:1"] == 86418 + 92708 + 38528, r


@pytest.mark.parametrize("overlap", (False, True))
@pytest.mark.parametrize("comm,C", (("fp32", 4), ("fp16", 2)))
def test_zero2_noncontig_comm_cast_by_hand(comm: str, C: int, overlap: bool) -> None:
    """parity.TINY at W = 2, ZeRO-2 bf16 without contiguous_gradients, reduce_bucket_size 10,000, with a
    communication_data_type unlike the model's. Hooks in autograd's order (l3.bias 5, l3.weight 385, l2.bias 77,
    l2.weight 23,177, l1.bias 301, l1.weight 19,264); a gradient that takes the bucket past 10,000 flushes it first
    (l.1422): [l3.*, l2.bias] (467, flattened: 934 B) at l2.weight's hook, [l2.weight] (a view) at l1.bias's, whose
    autograd sibling l1.weight (19,264) is made with it, [l1.bias] at l1.weight's, [l1.weight] in the epilogue. Each
    flush also holds its run's cast to C bytes while the all-reduce runs (allreduce_bucket l.2376-2377, by dtype: fp16
    on bf16 too); with overlap_comm the previous flush's dropped gradients (467 x 2 B) are cleared before it
    (l.2411-2415), under the cast. The largest: l2.weight's, (23,177 + 301 + 19,264) x 2 B of gradients + 23,177 x C,
    and on rank 1 the 467 elements its slice keeps whole (l.2266-2270) + 934 B. Engine (TINY W 2, GA 2, real Linears,
    2026-12-06, probe, fp32): backward:1 351,076 / 352,010 B = 172,848 persistent + 178,192 / 179,126 + 36 B of
    scalars, the fp32 cast 92,708 B at l.2377 among the storages."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "engine"))
    import parity
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                           "communication_data_type": comm,
                           "zero_optimization": {"stage": 2, "reduce_bucket_size": 10000,
                                                 "contiguous_gradients": False, "overlap_comm": overlap}})
    inv = from_dict(parity.TINY, "tiny")
    layout = state.zero12_group_layout(tuple(t.numel for t in inv.tensors), 2, 2, False)
    got = state.zero12_backward_transients(ec, inv, [layout], 2, 1).to_list()
    R = (23177 + 301 + 19264) * 2 + 23177 * C
    A = (23177 + 77) * 2  # l2's AddmmBackward0 outputs at l2.bias's hook
    assert got == [(A, R, 19264 * 8), (A, R + 934, 21136 * 8)]
