"""ZeRO-2 (DeepSpeedZeroOptimizer) on a bf16 model with ``data_types.grad_accum_dtype`` fp32, by hand from DeepSpeed
0.19.8's code (stage_1_and_2.py): _use_compact_grad_partition_buffer (l.1259-1266) keeps no grads_in_partition
(copy_grads_in_partition returns at l.2179-2182); the rank's fp32 buffer of P elements is made inside its first flush
(_build_compact_grad_partition_buffer l.1268-1274, from average_tensor l.1674 before the all-reduce), each reduced
slice of the rank is added into it through ``source.to(fp32)`` (_add_to_grad_partition_buffer l.1324-1326) beside the
flush's flat copy (allreduce_bucket l.2367), the buffer is kept across micro-steps until the step frees it (l.3131)
and the step's norm casts each slice to fp64 (get_grad_norm_direct l.2684).
Engine (tests/engine/test_peak_parity.py z2_bf16_gaccfp32_tbsga2_w2, TINY at W = 2, GA 2, one flush): backward
522,778 / 530,266 B on ranks 0 / 1, forward:2 259,328 B, steady step 586,268 / 601,244 B: the figures below + 32-60 B
of scalars."""

from __future__ import annotations

from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan, compute_ledger, zero12_transients_modeled
from advisor.ledger.timeline import resolve_load, role_timeline
from advisor.model.inventory import Inventory, TensorSpec

#: n = [19264, 301, 23177, 77, 385, 5], N = 43,209; at W = 2 N_pad = 43,212, P = 21,606. Rank 0 owns
#: 19264 + 301 + 2041 elements (largest slice 19,264), rank 1 21136 + 77 + 385 + 5 (+ 3 of padding; largest 21,136)
TINY = Inventory(name="tiny", tensors=[TensorSpec(f"l{i}.w", (n,)) for i, n in
                                       enumerate([19264, 301, 23177, 77, 385, 5])], source="test")
P = 21606
PERSISTENT = 43212 * 2 + P * 4          # the bf16 flat partitions' whole model + the rank's fp32 master
MOMENTS = 2 * P * 4                     # AdamW's exp_avg / exp_avg_sq, from the first update on
IPG = 50000 * 2                          # one ipg buffer of reduce_bucket_size elements (no overlap_comm)
FLAT = 43209 * 2                         # the one flush's flat copy of all six gradients
LARGEST = {0: 19264, 1: 21136}


def _cfg(ga=2, **zero):
    return {"train_micro_batch_size_per_gpu": 1, "train_batch_size": 2 * ga, "bf16": {"enabled": True},
            "data_types": {"grad_accum_dtype": "fp32"},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": 2, "reduce_bucket_size": 50000, "overlap_comm": False,
                                  "contiguous_gradients": True, **zero}}


def _at(cfg, r, ga):
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, TINY, Cluster(world_size=2)))
    tl = role_timeline(led, led.rank(r), resolve_load(ec), ga=ga, rank=r)
    return dict(zip([x.key for x in tl.instants], tl.series(("accelerator",))))


def test_flush_holds_buffer_flat_copy_and_the_cast_of_the_rank_largest_slice():
    for r in (0, 1):
        at = _at(_cfg(), r, 2)
        flush = PERSISTENT + IPG + P * 4 + FLAT + LARGEST[r] * 4
        assert at["reduce:1"] == flush                  # engine 522,778 / 530,266 B (+32 B of scalars)
        assert at["reduce"] == flush                    # the boundary's: the buffer kept, the same flush
        assert at["steady:reduce"] == flush + MOMENTS   # engine 695,630 / 703,118 B


def test_buffer_kept_across_micro_steps_and_norm_copy_at_the_step():
    for r in (0, 1):
        at = _at(_cfg(), r, 2)
        assert at["forward:1"] == PERSISTENT             # made by the first flush, not before
        assert at["forward:2"] == PERSISTENT + P * 4     # engine 259,328 B (+56 B of scalars)
        # the step's norm: each fp32 slice cast to fp64, one at a time, the largest beside the buffer
        assert at["steady_step:norm"] == PERSISTENT + MOMENTS + P * 4 + LARGEST[r] * 8  # engine 586,268 / 601,244 B


def test_ga1_has_no_kept_buffer_in_forward():
    for r in (0, 1):
        at = _at(_cfg(ga=1), r, 1)
        assert at["reduce"] == PERSISTENT + IPG + P * 4 + FLAT + LARGEST[r] * 4
        assert at["steady:forward"] == PERSISTENT + MOMENTS   # the step freed the buffer (l.3131)


def test_overlap_comm_adds_only_the_second_ipg_buffer():
    # setup_buckets l.3272-3278: a second reduce_bucket_size buffer; the flush is the same code (reduce_ipg_grads
    # l.2226-2228 -> average_tensor), the index swap (l.1425-1427) moves no buffer. Engine
    # (z2_bf16_gaccfp32_overlap_tbsga2_w2): backward 622,778 / 630,266 B, steady backward 795,630 / 803,118 B
    assert zero12_transients_modeled(effective_config(_cfg(overlap_comm=True)), "DeepSpeedZeroOptimizer", 2, 1)
    for r in (0, 1):
        at = _at(_cfg(overlap_comm=True), r, 2)
        flush = PERSISTENT + 2 * IPG + P * 4 + FLAT + LARGEST[r] * 4
        assert at["reduce:1"] == at["reduce"] == flush
        assert at["steady:reduce"] == flush + MOMENTS
        assert at["forward:2"] == PERSISTENT + P * 4
        assert at["steady_step:norm"] == PERSISTENT + MOMENTS + P * 4 + LARGEST[r] * 8  # engine 586,268 / 601,244 B


def test_fp16_model_takes_the_same_buffer():
    # _use_compact_grad_partition_buffer (l.1259-1266) asks only for fp32 accumulation unlike self.dtype: an fp16 model
    # takes the same path with the same 2-byte gradients. Engine (TINY, W 2, GA 2, 2 runs): backward 522,778 /
    # 530,266 B, the bf16 cell's bytes
    cfg = {**_cfg(), "bf16": {"enabled": False}, "fp16": {"enabled": True}}
    assert zero12_transients_modeled(effective_config(cfg), "DeepSpeedZeroOptimizer", 2, 1)
    for r in (0, 1):
        at = _at(cfg, r, 2)
        assert at["reduce:1"] == PERSISTENT + IPG + P * 4 + FLAT + LARGEST[r] * 4
        assert at["forward:2"] == PERSISTENT + P * 4


def test_fp32_communication_casts_the_run_not_the_slices():
    # allreduce_bucket casts the flat run to fp32 (l.2376-2377) and returns that cast, so the reduced slices reach
    # _add_to_grad_partition_buffer already fp32 and ``source.to(fp32)`` copies nothing (l.1326): the flush holds the
    # flat copy (N x 2), its fp32 cast (N x 4) and the buffer, no per-slice cast. Engine (TINY, one flush, W 2, GA 2):
    # backward 618,558 B on both ranks = this + 32 B of scalars (2 runs at reduce_bucket_size 10,000, real Linears,
    # also within 0.01%)
    cfg = {**_cfg(), "communication_data_type": "fp32"}
    assert zero12_transients_modeled(effective_config(cfg), "DeepSpeedZeroOptimizer", 2, 1)
    for r in (0, 1):
        at = _at(cfg, r, 2)
        assert at["reduce:1"] == PERSISTENT + IPG + P * 4 + FLAT + 43209 * 4


def test_fp16_communication_on_bf16_is_a_cast_and_frees_the_flat_copy_before_the_slice_cast():
    # fp16 on a bf16 model: allreduce_bucket casts (``communication_data_type != tensor.dtype``, l.2376-2377; the same
    # bytes, still a copy) and returns the cast, so the flat copy is freed (l.2391-2393) before ``source.to(fp32)``
    # copies the slice (l.1326; fp16 is not fp32). One flush of all six (no flat copy at its slice casts): the flush
    # holds the larger of FLAT + its cast and the cast + the largest slice's fp32 copy. Engine (TINY at
    # reduce_bucket_size 10,000, real Linears, W 2, GA 2, 2026-12-06, 2 runs) within 0.37% on every phase (the
    # forward's proxy scalars); before, with the cast compared by bytes, rank 0 38,560 B under (l1.weight's 38,528 B
    # fp16 cast, l.2377), then rank 1 46,318 B over with l2.weight's flat copy counted beside its slice cast
    cfg = {**_cfg(), "communication_data_type": "fp16"}
    for r in (0, 1):
        at = _at(cfg, r, 2)
        assert at["reduce:1"] == PERSISTENT + IPG + P * 4 + max(FLAT + 43209 * 2, 43209 * 2 + LARGEST[r] * 4)


def test_noncontiguous_fp32_communication_frees_the_flat_copy_before_the_buffer():
    # allreduce_bucket casts the flat bucket to fp32 (l.2376-2377), copies the result back and returns the cast
    # (l.2391-2393): the flat copy is freed before _allreduce_noncontiguous_bucket_preserving_fp32's loop makes the
    # buffer (l.2506), whose slices come fp32 (no n x 4 cast). TINY at 50,000 (one flush): micro-step 1's flush holds
    # N x 2 of gradients + max(flat copy N x 2, buffer P x 4) + the cast N x 4; micro-step 2 both (the buffer kept).
    # Engine (2026-12-06): backward:1 518,558 B, backward:2 604,976 B on both ranks = these + 32-38 B of scalars
    cfg = {**_cfg(contiguous_gradients=False), "communication_data_type": "fp32"}
    assert zero12_transients_modeled(effective_config(cfg), "DeepSpeedZeroOptimizer", 2, 1)
    for r in (0, 1):
        at = _at(cfg, r, 2)
        assert at["reduce:1"] == PERSISTENT + FLAT + max(FLAT, P * 4) + 43209 * 4
        assert at["reduce"] == PERSISTENT + FLAT + FLAT + P * 4 + 43209 * 4


def test_noncontiguous_keeps_the_gradients_meeting_the_slice_whole_beside_the_buffer():
    # contiguous_gradients off: reduce_ipg_grads -> _buffered_reduce_fallback_preserving_fp32 (l.2231-2235) ->
    # _allreduce_noncontiguous_bucket_preserving_fp32 (l.2484-2511): the whole bucket flattened (l.2367), each of the
    # rank's slices cast to fp32 into its buffer (l.2506-2508, l.1326); gradients meeting the slice stay whole in
    # param.grad (l.2270 needs contiguous_gradients) to the epilogue's _clear_param_grad_only (l.1067), none into
    # the next micro-step. No ipg buffer (setup_buckets: contiguous_gradients only). TINY at 50,000: one flush of all
    # six gradients at the epilogue: N x 2 of gradients + their N x 2 flat copy + the buffer + the largest slice's cast.
    # Engine (2026-12-06): backward 509,196 / 516,684 B on ranks 0 / 1 = this + 32 B of scalars
    for r in (0, 1):
        at = _at(_cfg(contiguous_gradients=False), r, 2)
        flush = PERSISTENT + FLAT + FLAT + P * 4 + LARGEST[r] * 4
        assert at["reduce:1"] == at["reduce"] == flush
        assert at["forward:2"] == PERSISTENT + P * 4        # the buffer only: param.grad cleared at the epilogue
        assert at["steady:reduce"] == flush + MOMENTS


def test_owned_extra_large_gradient_kept_whole_to_the_end_of_the_epilogue():
    # reduce_bucket_size 10,000: hook order l5, l4, l3 | l2 (23,177 > RBS: reduced alone in its own storage) | l1 |
    # l0 (19,264, alone at the epilogue). Rank 0 owns l0, l1 and 2,041 elements of l2, so copy_grads_in_partition
    # returns without replacing l2's autograd storage (l.2179-2182): at the epilogue's flush l2's gradient (46,354 B)
    # is still whole beside l0's own storage and the fp32 cast of l0's slice (19,264 x 4; a one-slice run: no flat
    # copy). Engine (real Linears, the same moment on rank 0): backward 441,242 B = this + 32 B of scalars
    at = _at(_cfg(ga=2, reduce_bucket_size=10000), 0, 2)
    assert at["reduce:1"] == PERSISTENT + 10000 * 2 + P * 4 + 23177 * 2 + 19264 * 2 + 19264 * 4
    assert at["reduce"] == at["reduce:1"]


def test_one_rank_flush_of_several_slices_is_flattened_on_that_rank():
    # big (40,000), t1, t2 (10,000 each): N = 60,000, P = 30,000; rank 0 holds big[0, 30000), rank 1 big's last 10,000,
    # t1 and t2. Hook order t2, t1, big: big's hook flushes t2 + t1 (20,000 + 40,000 > 50,000), both in rank 1's
    # partition: merged into one slice on rank 0 (a view, no flat copy), kept apart on rank 1 (each has an output,
    # l.1677-1683), so rank 1 flattens 20,000 x 2 B; then the epilogue flushes big, two slices (a flat copy)
    inv = Inventory(name="t", tensors=[TensorSpec(f"l{i}.w", (n,)) for i, n in enumerate([40000, 10000, 10000])],
                    source="test")
    led = compute_ledger(Plan(effective_config(_cfg(ga=1)), inv, Cluster(world_size=2)))
    red = {r: next(e.bytes for e in led.rank(r).entries if e.item == "reduce_transient") for r in (0, 1)}
    P2 = 30000
    # rank 1, flush 0 (its first: the buffer made): t1 + t2 flattened, big's gradient (its trigger, not yet in the
    # bucket), the cast of a 10,000-element slice; flush 1: big's flat copy and the cast of rank 1's 10,000
    f0 = 20000 * 2 + 40000 * 2 + 10000 * 4 + P2 * 4
    f1 = 40000 * 2 + 10000 * 4 + P2 * 4
    assert red[1] == max(f0, f1) == f0
    # rank 0: flush 0 holds no slice of it (the view, big's gradient), flush 1 its first: big's copy, its 30,000 cast
    assert red[0] == max(40000 * 2, 40000 * 2 + 30000 * 4 + P2 * 4)


def test_extra_large_gradient_runs_as_allreduce_and_scatter_cuts_them():
    # stage_1_and_2.py allreduce_and_scatter l.1558-1575: slices appended one by one, a run closed by the slice that
    # takes it over numel_per_bucket (= reduce_bucket_size); walked here slice by slice over every rank
    import os
    import random
    from advisor.ledger.state import _xl_runs

    def walk(own, rbs):
        out, cum, cur = {}, 0, []
        for r, n in [(r, n) for a, b, n in own for r in range(a, b)]:
            cur.append((r, n))
            cum += n
            if cum > rbs:
                out.update({rr: (cum, len(cur), nn) for rr, nn in cur})
                cur, cum = [], 0
        out.update({rr: (cum, len(cur), nn) for rr, nn in cur})
        return out

    rng = random.Random(15)
    for _ in range(3000):
        P, rbs, W = rng.randint(1, 50), rng.randint(1, 200), rng.randint(1, 30)
        r0 = rng.randint(0, W - 1)
        r1 = rng.randint(r0, W - 1)
        own = [(r0, r0 + 1, rng.randint(1, P))] + ([(r0 + 1, r1, P)] if r1 > r0 + 1 else []) \
            + ([(r1, r1 + 1, rng.randint(1, P))] if r1 > r0 else [])
        got = {}
        for _, _, elems, cnt, members in _xl_runs(own, P, rbs):
            got.update({r: (elems, cnt, n) for x0, x1, n in members for r in range(x0, x1)})
        assert got == walk(own, rbs), (own, P, rbs)
    # the whole runs between the ends come as one item, not one per rank: 1e6 ranks of P = 10 at RBS 95
    items = list(_xl_runs([(0, 1, 5), (1, 1_000_000, 10), (1_000_000, 1_000_001, 3)], 10, 95))
    assert len(items) <= 4


def test_two_groups_one_buffer_each_made_at_the_rank_first_flush_of_its_group():
    # TINY_FROZEN_GROUPS' shapes, 1-D (no autograd siblings): group 0 = a0 (19,264), a1 (301); frozen f0, f1; group 1 =
    # b0 (385), b1 (5). Group 0: 19,565 elements padded to 19,568 (2W-aligned), P0 = 9,784: rank 0 a0[0, 9784), rank 1
    # a0's other 9,480 and a1. Group 1: 390 -> 392, P1 = 196: rank 0 b0[0, 196), rank 1 b0's other 189 and b1.
    # Hooks (reverse order): b1, b0, a1 (691 in the 10,000-element bucket), a0 (19,264 > RBS): flush 0 = {b1, b0, a1}
    # inside a0's hook (a0's autograd storage live), one run of several slices flattened (691 x 2 B, l.2367); the
    # epilogue's flush 1 = a0 alone in its own storage (l.1444-1449), its two slices one run over RBS, flattened.
    # Each group's buffer (_get_compact_grad_partition_buffer(group_idx), l.1303-1310) is made at the rank's first
    # slice of that group: rank 0 makes group 1's at flush 0 and group 0's at flush 1; rank 1 both at flush 0.
    # Engine (real Linears, the same moments): backward 302,492 / 301,276 B = forward:1 + the figures below + 32 B
    inv = Inventory(name="g", tensors=[TensorSpec("a0.w", (19264,)), TensorSpec("a1.w", (301,)),
                                       TensorSpec("f0.w", (23177,), trainable=False),
                                       TensorSpec("f1.w", (77,), trainable=False),
                                       TensorSpec("b0.w", (385,), group=1), TensorSpec("b1.w", (5,), group=1)],
                    source="test")
    cfg = _cfg(ga=2, reduce_bucket_size=10000)
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=2)))
    assert zero12_transients_modeled(ec, "DeepSpeedZeroOptimizer", 2, 2)
    P0, P1, ipg = 9784, 196, 10000 * 2
    bufs = (P0 + P1) * 4
    f0_copy, a0 = 691 * 2, 19264 * 2
    flush0 = {0: f0_copy + a0 + P1 * 4 + 196 * 4,            # rank 0: group 1's buffer, the cast of b0's 196
              1: f0_copy + a0 + bufs + 301 * 4}              # rank 1: both buffers, the cast of a1's 301
    flush1 = {r: a0 + a0 + bufs + n * 4 for r, n in ((0, 9784), (1, 9480))}  # a0 whole, its flat copy, the cast
    for r in (0, 1):
        tl = role_timeline(led, led.rank(r), resolve_load(ec), ga=2, rank=r)
        at = dict(zip([x.key for x in tl.instants], tl.series(("accelerator",))))
        assert at["reduce:1"] - at["forward:1"] == ipg + max(flush0[r], flush1[r])  # 176,112 / 174,896 B
        assert at["forward:2"] - at["forward:1"] == bufs                           # both kept (l.3131)
        assert at["reduce"] == at["reduce:1"]


def test_groups_walk_agrees_with_the_one_group_terms_on_one_group(monkeypatch):
    # the several-groups walk (state._zero12_compact_groups_transients, per-rank buffers as a step function of the
    # flush) must reduce to the one-group terms (state._zero12_compact_transients, engine-checked by
    # z2_bf16_gaccfp32_tbsga2_w2 and probes at reduce_bucket_size 10,000, W 2 and 4) when there is one group: random
    # 1-D inventories (no autograd siblings), reduce bucket sizes that make extra-large gradients and several
    # flushes, W from 1 to 9 (several ranks per tensor and several tensors per rank)
    import os
    import random

    from advisor.ledger import state

    rng = random.Random(1515)
    calls = []
    one = state._zero12_compact_transients

    def both(layouts, W, D, rbs, order, flushes, copies, A, xl, hooked, first, gmax, C=0):
        a = one(layouts, W, D, rbs, order, flushes, copies, A, xl, hooked, first, gmax, C=C)
        b = state._zero12_compact_groups_transients(layouts, W, D, rbs, order, flushes, copies, A, xl, hooked, gmax,
                                                      C=C)
        calls.append(W)
        for r in range(W):
            assert a[r] == b[r], (W, rbs, r, a[r], b[r])
        return a

    monkeypatch.setattr(state, "_zero12_compact_transients", both)
    for _ in range(int(os.environ.get("COMPACT_ITERS", 60))):
        inv = Inventory(name="r", tensors=[TensorSpec(f"t{i}.w", (rng.randint(1, 3000),))
                                           for i in range(rng.randint(1, 9))], source="test")
        W = rng.randint(1, 9)
        cfg = _cfg(ga=2, reduce_bucket_size=rng.choice([50, 500, 2000, 50000]), overlap_comm=rng.random() < 0.5)
        cfg["communication_data_type"] = rng.choice([None, "fp32", "fp16"])
        if rng.random() < 0.3:
            cfg["bf16"], cfg["fp16"] = {"enabled": False}, {"enabled": True}
        cfg["train_batch_size"] = 2 * W
        ec = effective_config(cfg)
        state.zero12_backward_transients(ec, inv, state.zero12_layouts(ec, inv, W), W, 2)
    assert len(calls) == int(os.environ.get("COMPACT_ITERS", 60))
