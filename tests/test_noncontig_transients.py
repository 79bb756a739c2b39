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


def test_noncontig_not_modelled_with_groups() -> None:
    # several param groups step apart: not replayed; overlap_comm is (previous_reduced_grads,
    # l.2264-2267: the walk above) and GA > 1 (test_noncontig_accumulation_keeps_the_slice_gradients_by_hand)
    base = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}}
    ov = effective_config({**base, "zero_optimization": {"stage": 2, "contiguous_gradients": False,
                                                         "overlap_comm": True}})
    plain = effective_config({**base, "zero_optimization": {"stage": 2, "contiguous_gradients": False,
                                                            "overlap_comm": False}})
    w = state.select_optimizer(plain)[0]
    assert state.zero12_transients_modeled(ov, w, 1, 1)
    assert state.zero12_transients_modeled(plain, w, 2, 1)
    assert not state.zero12_transients_modeled(plain, w, 1, 2)
    assert state.zero12_transients_modeled(plain, w, 1, 1)


@pytest.mark.parametrize("overlap", (False, True))
def test_noncontig_accumulation_keeps_the_slice_gradients_by_hand(overlap: bool) -> None:
    """GA 2 (train_batch_size 4 at W = 2), TINY: the first micro-step's epilogue keeps the gradients meeting
    the rank's slice in all_grad_tensors (stage_1_and_2.py l.1038-1040) after _clear_param_grad_only drops
    param.grad (l.1063), so micro-step 2 runs beside them. P = 43,212 / 2 = 21,606: rank 0's slice meets
    l1.weight 19,264, l1.bias 301, l2.weight 23,177 (42,742 x 2 = 85,484 B), rank 1's l2.weight, l2.bias 77,
    l3.weight 385, l3.bias 5 (23,644 x 2 = 47,288 B): the bytes the engine's tracker found at forward:2
    (tests/engine/test_peak_parity.py z2_bf16_noncontig_tbsga2_w2, engine.py l.3428). Only from micro-step
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
