"""ZeRO-2 under CPU optimizer offload: the per-rank flush terms of
``state.zero12_offload_reduce_terms`` against every rank and every tensor walked directly from the
rule its docstring cites (DeepSpeed 0.19.8 ``stage_1_and_2.py`` l.1443-1446 clone of a gradient
larger than reduce_bucket_size, l.1886 / l.2172 the fp64 copy of a rank's slice of each flushed
gradient): per rank r, the flush of parameter p that holds the most, s_{p,r} x 8 + c_p bytes
(s_{p,r} = elements of p in r's slice [r P, (r+1) P), c_p = n_p x D when n_p > RBS, a rank owning
none of p still holding p's clone), and h = max over extra-large p of 2 x n_p x D.

Issue 21 made the function keep one update per rank (their maximum) instead of one per tensor;
this checks it still gives every rank the value of the per-tensor walk."""

from __future__ import annotations

import random

import pytest

from advisor.config.effective import effective_config
from advisor.ledger import state


def _walk(layouts, W: int, rbs: int, D: int) -> list[tuple[int, int, int]]:
    h = max((2 * n * D for lay in layouts for n in lay.numels if n > rbs), default=0)
    out = []
    for r in range(W):
        best = (0, 0, 0)  # (bytes at the flush, clone bytes, slice elements)
        for lay in layouts:
            lo, hi = r * lay.P, (r + 1) * lay.P
            for a, n in zip(lay.starts, lay.numels):
                if n <= 0:
                    continue
                s = max(0, min(a + n, hi) - max(a, lo))
                c = n * D if n > rbs else 0
                if s or c:
                    best = max(best, (s * 8 + c, c, s))
        out.append((best[2], best[1], h, 0))  # u = 0: no tensor list given, no flush replay
    return out


@pytest.mark.parametrize("seed", range(40))
def test_offload_reduce_terms_match_the_per_rank_per_tensor_walk(seed: int) -> None:
    rng = random.Random(seed)
    W = rng.choice((1, 2, 3, 7, 8, 16, 61))
    rbs = rng.choice((50, 200, 1000))
    groups = [[rng.choice((1, 7, 64, 199, 256, 1500, rng.randint(1, 3000))) for _ in range(rng.randint(1, 40))]
              for _ in range(rng.randint(1, 3))]
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                           "zero_optimization": {"stage": 2, "reduce_bucket_size": rbs,
                                                 "offload_optimizer": {"device": "cpu"}}})
    wrapper = state.select_optimizer(ec)[0]
    assert state.zero12_offload_xl_clone_modeled(ec, wrapper)
    D = 2
    layouts = [state.zero12_group_layout(tuple(g), W, D, bool(rng.getrandbits(1))) for g in groups]
    got = state.zero12_offload_reduce_terms(ec, layouts, W, wrapper)
    if any(n > rbs for g in groups for n in g):
        assert got.to_list() == _walk(layouts, W, rbs, D)
    # asked again for the same layouts: the same runs
    assert state.zero12_offload_reduce_terms(ec, layouts, W, wrapper).to_list() == got.to_list()


@pytest.mark.parametrize("seed", range(30))
def test_save_16bit_gather_moment_matches_the_module_walk(seed: int) -> None:
    """``timeline.save_16bit_gather_moment``: _zero3_consolidated_16bit_state_dict (engine.py
    l.5631-5700) gathers one module's own parameters at a time, modules in order of first
    appearance; the moment is the first module with the largest sum ceil(n_i / W) x W, with the
    elements of the modules before it already in rank 0's state dict."""
    from advisor.ledger.timeline import save_16bit_gather_moment
    from advisor.model.inventory import Inventory, TensorSpec

    rng = random.Random(seed)
    W = rng.choice((1, 2, 3, 8))
    mods = [f"m{i}" for i in range(rng.randint(1, 8))]
    ts = [TensorSpec(f"{rng.choice(mods)}.{k}.w" if rng.random() < 0.2 else f"{rng.choice(mods)}.w{k}",
                     (rng.randint(1, 50),)) for k in range(rng.randint(1, 30))]
    inv = Inventory("t", ts)
    order: list[str] = []
    gathered: dict[str, int] = {}
    own: dict[str, int] = {}
    for t in ts:
        m = state.module_of(t.name)
        if m not in order:
            order.append(m)
        gathered[m] = gathered.get(m, 0) + -(-t.numel // W) * W
        own[m] = own.get(m, 0) + t.numel
    top = max(gathered.values())
    best = next(i for i, m in enumerate(order) if gathered[m] == top)
    assert save_16bit_gather_moment(inv, W) == (sum(own[m] for m in order[:best]), own[order[best]], order[best])


#: TINY (tests/engine/parity.py): Linear(64,301) -> Linear(301,77) -> Linear(77,5), 43,209 elements.
_TINY = {"name": "tiny", "tensors": [
    {"name": "l1.weight", "shape": [301, 64]}, {"name": "l1.bias", "shape": [301]},
    {"name": "l2.weight", "shape": [77, 301]}, {"name": "l2.bias", "shape": [77]},
    {"name": "l3.weight", "shape": [5, 77]}, {"name": "l3.bias", "shape": [5]}]}


def _oo_plan(W: int, stage: int = 2, dtype: str = "bf16"):
    from advisor.ledger.state import Cluster, Plan, compute_ledger
    from advisor.model.inventory import from_dict
    cfg = {"train_micro_batch_size_per_gpu": 1, dtype: {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": stage, "reduce_bucket_size": 50000, "overlap_comm": False,
                                 "contiguous_gradients": True, "offload_optimizer": {"device": "cpu"}}}
    ec = effective_config(cfg)
    inv = from_dict(_TINY, "tiny")
    return ec, inv, compute_ledger(Plan(ec, inv, Cluster(world_size=W)))


@pytest.mark.parametrize("stage,dtype", [(2, "bf16"), (1, "fp16")])
def test_offload_flush_flat_copy_by_hand(stage: int, dtype: str) -> None:
    """All 43,209 gradients fit one 50,000-element bucket: one flush, in the epilogue (no gradient
    whole beside it). average_tensor cuts it into one slice per (parameter, owning rank) and
    allreduce_and_scatter hands them to allreduce_bucket, whose ``self.flatten(bucket)``
    (stage_1_and_2.py l.2367) copies all of them (43,209 <= reduce_bucket_size): 43,209 x 2 B.
    Rank r's fp64 norm moment is its largest gradient slice x 8 (l.1886); at W = 4, P =
    43,216 / 4 = 10,804 (43,209 padded to a multiple of 2W): rank 0 [0, 10,804) l1.weight 10,804; rank 1 l1.weight's
    19,264 - 10,804 = 8,460; rank 2 l2.weight's 10,804; rank 3 [32,412, 43,216) l2.weight's
    42,742 - 32,412 = 10,330. The reduce holds the larger of the two moments. ZeRO-1 moves every
    gradient in its boundary epilogue: before the first moves, all 43,209 x 2 B of them are live
    (the same bytes here)."""
    ec, inv, led = _oo_plan(4, stage, dtype)
    assert state.zero12_offload_flush_bytes(ec, inv, state.placement(ec, inv, 4).zero12, 4) == 43209 * 2
    largest = {0: 10804, 1: 8460, 2: 10804, 3: 10330}
    for r, s in largest.items():
        items = {e.item: e.bytes for e in led.rank(r).entries if e.life == "reduce"}
        assert items["offload_grad_norm_fp64"] == s * 8
        assert items.get("offload_reduce_flush", 0) == max(0, 43209 * 2 - s * 8), r
    # W = 2: P = 43,212 / 2 = 21,606; rank 0's largest slice is l1.weight's 19,264 (154,112 B), rank 1's
    # l2.weight's 42,742 - 21,606 = 21,136 (169,088 B), both over 86,418 B: no flat-copy entry
    ec, inv, led = _oo_plan(2, stage, dtype)
    for r, s in ((0, 19264), (1, 21136)):
        items = {e.item: e.bytes for e in led.rank(r).entries if e.life == "reduce"}
        assert items["offload_grad_norm_fp64"] == s * 8 and "offload_reduce_flush" not in items, r


@pytest.mark.parametrize("overlap", (False, True))
def test_offload_norm_beside_unmoved_gradients_by_hand(overlap: bool) -> None:
    """TINY at W = 4, ZeRO-2 bf16 offload, reduce_bucket_size 10,000 (tests/engine/test_peak_parity.py
    z2_bf16_oo_cpu_bigtensor_w4, real Linears). Hooks in autograd's order, an nn.Linear's bias first with
    its weight's gradient whole (AddmmBackward0): l3.bias 5, l3.weight 385, l2.bias 77 fill the bucket;
    l2.weight (23,177 > 10,000) flushes them and is cloned; l1.bias's hook flushes l2.weight's clone alone
    (stage_1_and_2.py reduce_ipg_grads, extra_large_param_to_reduce) while l1.bias (301) and l1.weight
    (19,264) are whole: u = 19,565 x 2 = 39,130 B. That flush's flat copy: average_tensor's slices of
    l2.weight by owner, rank 1 [19,565, 21,608) 2,043, rank 2 10,804, rank 3 10,330; allreduce_and_scatter
    flattens a run once it passes 10,000 elements: 2,043 + 10,804 = 12,847 x 2 = 25,694 B, 10,330 alone is a
    view. Flush moment F = 25,694 + 46,354 (clone) + 39,130 = 111,178 B. Norm moments: rank 2 l2.weight's
    10,804 x 8 + 46,354 + 39,130; rank 3 10,330 x 8 + the same; rank 0 l1.weight's 10,804 x 8 + its clone
    38,528 (the epilogue's flush, nothing unmoved) = 124,960 B; rank 1 the l2.weight flush: 2,043 x 8 +
    46,354 + 39,130 = 101,828 B < its l1.weight flush 8,460 x 8 + 38,528 = 106,208 B.
    The same with overlap_comm: it swaps the two ipg buffers after each flush (l.1425-1427) and runs the
    reduce on reduction_stream (None on a synchronized device, l.599), the same storages beside a second
    ipg buffer (engine: z2_bf16_oo_cpu_overlap_bigtensor_w2 at W = 2)."""
    from advisor.ledger.state import Cluster, Plan, compute_ledger
    from advisor.model.inventory import from_dict
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2, "reduce_bucket_size": 10000, "overlap_comm": overlap,
                                 "contiguous_gradients": True, "offload_optimizer": {"device": "cpu"}}}
    ec = effective_config(cfg)
    inv = from_dict(_TINY, "tiny")
    lay = state.placement(ec, inv, 4).zero12
    assert state.zero12_offload_flush_bytes(ec, inv, lay, 4) == 25694 + 46354 + 39130
    want = {0: (10804, 38528, 0), 1: (8460, 38528, 0), 2: (10804, 46354, 39130), 3: (10330, 46354, 39130)}
    got = state.zero12_offload_reduce_terms(ec, lay, 4, "DeepSpeedZeroOptimizer", inv).to_list()
    assert [(s, c, u) for s, c, _, u in got] == [want[r] for r in range(4)]
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=4)))
    for r, (s, c, u) in want.items():
        items = {e.item: e.bytes for e in led.rank(r).entries if e.life == "reduce"}
        assert items["offload_grad_norm_fp64"] == s * 8 and items.get("offload_norm_unmoved_grads", 0) == u, r
        assert items.get("offload_reduce_flush", 0) == max(0, 111178 - (s * 8 + c + u)), r


def _walk_zero1(sizes: list[int], layout, W: int, rbs: int, D: int) -> list[tuple[int, int, int, int]]:
    """ZeRO-1 (one param group) walked from DeepSpeed's rules directly: reduce_gradients' epilogue loop
    moves the gradients in order (l.971-976); a gradient whose arrival would take the bucket past RBS
    flushes it first (l.1421-1424), one over RBS is cloned (l.1444-1446) and reduced alone; at a flush the
    trigger and every later gradient are still whole (u); a rank's fp64 norm copy of its slice of each
    flushed gradient (l.1886) sits beside the flushed clone and the clones of earlier extra-large gradients
    the rank owns no part of, which ZeRO-1 never drops in the reduce (l.2272-2274: only owners copy)."""
    N = sum(sizes)
    starts = list(layout.starts)
    flushes, bucket, elems = [], [], 0
    for k, n in enumerate(sizes):
        if elems + n > rbs:
            flushes.append((bucket, k))
            bucket, elems = [], 0
        bucket.append(k)
        elems += n
    flushes.append((bucket, None))
    out = []
    for r in range(W):
        lo, hi = r * layout.P, (r + 1) * layout.P
        best, K = (0, 0, 0, 0), 0
        for ks, trig in flushes:
            u = 0 if trig is None else (N - sum(sizes[:trig])) * D
            gone = 0
            for k in ks:
                a, n = starts[k], sizes[k]
                s = max(0, min(a + n, hi) - max(a, lo))
                c = n * D if n > rbs else 0
                if s or c:
                    best = max(best, (s * 8 + c + K + u, u, c + K, s))
                if c and not s:
                    gone += c
            K += gone
        out.append((best[3], best[2], 0, best[1]))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_zero1_offload_terms_keep_the_clones_of_non_owners(seed: int) -> None:
    from advisor.model.inventory import from_dict
    rng = random.Random(seed)
    W = rng.choice((1, 2, 3, 4, 7, 8))
    rbs = rng.choice((50, 200, 1000))
    sizes = [rng.choice((1, 7, 64, 199, 256, 1500, rng.randint(1, 3000))) for _ in range(rng.randint(1, 30))]
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                           "zero_optimization": {"stage": 1, "reduce_bucket_size": rbs,
                                                 "offload_optimizer": {"device": "cpu"}}})
    wrapper = state.select_optimizer(ec)[0]
    assert state.zero12_offload_xl_clone_modeled(ec, wrapper)
    inv = from_dict({"name": "t", "tensors": [{"name": f"m{i}.w", "shape": [n]} for i, n in enumerate(sizes)]}, "t")
    layout = state.zero12_group_layout(tuple(sizes), W, 2, False)
    got = state.zero12_offload_reduce_terms(ec, [layout], W, wrapper, inv)
    assert got.to_list() == _walk_zero1(sizes, layout, W, rbs, 2)


def test_zero1_offload_terms_tiny_w4_by_hand() -> None:
    """parity.TINY at W = 4, reduce_bucket_size 10,000, bf16: l1.weight (19,264 elements, flat [0, 19,264))
    and l2.weight (23,177, [19,565, 42,742)) are over the bucket; P = ceil(43,209 / 4) = 10,803 (no
    alignment padding at W = 4, 2 B: 43,212 / 4). Ranks 2 and 3 own no part of l1.weight, so at
    l2.weight's flush they hold both clones, (19,264 + 23,177) x 2 = 84,882 B: the engine's allocation
    sites at their peak (z1_bf16_oo_cpu_smallbucket_w4, l.1446 84,882 B)."""
    from advisor.model.inventory import from_dict
    sys_path = __import__("os").path.join(__import__("os").path.dirname(__file__), "engine")
    __import__("sys").path.insert(0, sys_path)
    import parity
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                           "zero_optimization": {"stage": 1, "reduce_bucket_size": 10000,
                                                 "offload_optimizer": {"device": "cpu"}}})
    wrapper = state.select_optimizer(ec)[0]
    inv = from_dict(parity.TINY, "tiny")
    sizes = tuple(t.numel for t in inv.tensors)
    layout = state.zero12_group_layout(sizes, 4, 2, False)
    got = state.zero12_offload_reduce_terms(ec, [layout], 4, wrapper, inv).to_list()
    assert [c for _, c, _, _ in got[2:]] == [(19264 + 23177) * 2] * 2
    assert got[0][1] == 19264 * 2  # rank 0 at l1.weight's own flush: its clone alone


def _walk_zero1_groups(tensors: list[tuple[int, int]], layouts, W: int, rbs: int, D: int,
                       overlap: bool) -> list[tuple[int, int, int, int]]:
    """ZeRO-1 under CPU offload with several param groups and/or overlap_comm, walked from DeepSpeed's rules:
    without overlap_comm reduce_gradients' epilogue loop moves the gradients group by group, each in order
    (l.971-976), and at a flush the trigger and every later gradient are whole; with it each hook moves its
    gradient at the boundary (process_gradients l.2290) in autograd's order, the reverse of the proxy's use
    order, and at a flush only the trigger is whole (the earlier ones moved, the later ones not made yet). A
    gradient over RBS is cloned (l.1444-1446) and reduced alone; the rank's fp64 norm copy of its slice of each
    flushed gradient (l.1886) sits beside the flushed clone and the earlier clones the rank owns no part of,
    kept (only owners copy_grads_in_partition, l.2272-2274). Each group has its own flat buffer and partition
    (the layout's starts and P). With overlap_comm the clone is made in its hook beside its autograd gradient:
    h = 2 x n x D of the largest."""
    pos: list[tuple[int, int]] = []  # (group, index in group) per tensor, inventory order
    seen = [0] * len(layouts)
    for _, g in tensors:
        pos.append((g, seen[g]))
        seen[g] += 1
    idx = list(range(len(tensors)))
    order = idx[::-1] if overlap else sorted(idx, key=lambda i: (tensors[i][1], i))
    sizes = [tensors[i][0] for i in order]
    flushes, bucket, elems = [], [], 0
    for k, n in enumerate(sizes):
        if elems + n > rbs:
            flushes.append((bucket, k))
            bucket, elems = [], 0
        bucket.append(k)
        elems += n
    flushes.append((bucket, None))
    h = max((2 * n * D for n in sizes if n > rbs), default=0) if overlap else 0
    out = []
    for r in range(W):
        best, K = (0, 0, 0, 0), 0
        for ks, trig in flushes:
            u = 0 if trig is None else (sizes[trig] if overlap else sum(sizes[trig:])) * D
            gone = 0
            for k in ks:
                g, j = pos[order[k]]
                lay = layouts[g]
                a, n = lay.starts[j], sizes[k]
                s = max(0, min(a + n, (r + 1) * lay.P) - max(a, r * lay.P))
                c = n * D if n > rbs else 0
                if s or c:
                    best = max(best, (s * 8 + c + K + u, u, c + K, s))
                if c and not s:
                    gone += c
            K += gone
        out.append((best[3], best[2], h, best[1]))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_zero1_offload_terms_groups_and_overlap_keep_the_clones_of_non_owners(seed: int) -> None:
    from advisor.model.inventory import from_dict
    rng = random.Random(seed)
    W = rng.choice((1, 2, 3, 4, 7, 8))
    rbs = rng.choice((50, 200, 1000))
    overlap = seed % 2 == 1
    ngroups = 1 if overlap and seed % 4 == 1 else rng.choice((2, 3))
    tensors = [(rng.choice((1, 7, 64, 199, 256, 1500, rng.randint(1, 3000))), rng.randrange(ngroups))
               for _ in range(rng.randint(2, 24))]
    for g in range(ngroups):  # every group trainable and non-empty
        tensors.append((rng.randint(1, 3000), g))
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                           "zero_optimization": {"stage": 1, "reduce_bucket_size": rbs, "overlap_comm": overlap,
                                                 "offload_optimizer": {"device": "cpu"}}})
    wrapper = state.select_optimizer(ec)[0]
    assert state.zero12_offload_xl_clone_modeled(ec, wrapper)
    inv = from_dict({"name": "t", "tensors": [{"name": f"m{i}.w", "shape": [n], "group": g}
                                              for i, (n, g) in enumerate(tensors)]}, "t")
    layouts = state.placement(ec, inv, W).zero12
    assert len(layouts) == ngroups
    got = state.zero12_offload_reduce_terms(ec, layouts, W, wrapper, inv)
    assert got.to_list() == _walk_zero1_groups(tensors, layouts, W, rbs, 2, overlap)


def test_zero1_offload_clone_of_the_other_groups_gradient_by_hand() -> None:
    """Two param groups, W = 2, reduce_bucket_size 10,000, bf16 (engine: tests/engine/test_peak_parity.py
    z1_bf16_oo_cpu_xgroups_w2, allocation sites l.1446 and l.1886 at the peak). Group 0 = a, b (12,000 each,
    P = 12,000: rank 0 owns a, rank 1 b); group 1 = c (40,000), d (100) (P = 20,050: rank 0 owns c[0, 20,050),
    rank 1 the rest and d). The epilogue loop (l.971-976) clones a, b and c (each over the bucket); after a's
    flush rank 1 keeps a's clone, after b's rank 0 keeps b's (only owners copy, l.2272-2274). At c's flush
    (trigger d, 100 x 2 B whole) rank 0 holds c's clone 80,000 + b's 24,000 + its fp64 slice 20,050 x 8;
    rank 1 c's clone + a's + 19,950 x 8."""
    from advisor.config.effective import effective_config as eff
    from advisor.ledger.state import Cluster, Plan, compute_ledger
    from advisor.model.inventory import from_dict
    inv = from_dict({"name": "x", "tensors": [
        {"name": "a.w", "shape": [12000]}, {"name": "b.w", "shape": [12000]},
        {"name": "c.w", "shape": [40000], "group": 1}, {"name": "d.w", "shape": [100], "group": 1}]}, "x")
    ec = eff({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
              "zero_optimization": {"stage": 1, "reduce_bucket_size": 10000, "overlap_comm": False,
                                    "offload_optimizer": {"device": "cpu"}}})
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=2)))
    for r, s in ((0, 20050), (1, 19950)):
        items = {e.item: e.bytes for e in led.rank(r).entries if e.life == "reduce"}
        assert items["offload_xl_grad_clone"] == 80000 + 24000, r
        assert items["offload_grad_norm_fp64"] == s * 8, r
        assert items["offload_norm_unmoved_grads"] == 200, r


@pytest.mark.parametrize("overlap", (False, True))
def test_offload_microstep_reduce_by_hand(overlap: bool) -> None:
    """ZeRO-2 bf16 under CPU offload at GA 2 (train_batch_size 4 at W = 2), TINY with real Linears, reduce_bucket_size
    10,000: micro-step 1's reduce (before the boundary). copy_grads_in_partition (stage_1_and_2.py l.2161-2174) makes
    each owned gradient's host buffer (torch.zeros(n_p), l.1822-1824) and neither norms nor clears it, so a clone of a
    gradient over the bucket (l.1443-1446) that the rank owns part of stays to the epilogue; one it owns none of is
    dropped (l.2267). P = 21,606: rank 0 owns l1.weight, l1.bias, l2.weight's head; rank 1 l2.weight's tail, l2.bias, l3.
    Hooks (AddmmBackward0: a bias first with its weight whole): l3.bias, l3.weight, l2.bias fill the bucket; l2.weight
    (23,177) flushes them (467 elements: rank 1's buffers 934 B after) and is cloned; l1.bias's hook flushes the clone
    alone with l1.bias and l1.weight whole: flat copy (slices 2,041 + 21,136 > 10,000 flattened: 46,354 B) + clone
    46,354 + (301 + 19,264) x 2 = 131,838 B, every rank's largest accelerator moment (a_r). Then l1.weight's hook
    flushes l1.bias and clones l1.weight (2 x 38,528 B) beside the kept l2.weight clone (46,354 B): rank 1 with its
    47,288 B of buffers = 170,698 B; rank 0 as its epilogue's flush of l1.weight's clone (a view: one slice) leaves it
    (38,528) with l2.weight's clone and its 85,484 B of buffers = 170,366 B (as at its clone moment). h_r = those
    less 131,838: 38,528 / 38,860 B. The engine's tracker (tests/engine/test_peak_parity.py
    z2_bf16_oo_cpu_overlap_bigtensor_tbsga2_w2, backward:1): 605,590 / 605,922 B = 395,192 B at initialize + the ipg
    buckets + these + 32 B of scalars. At 50,000 (one flush, the epilogue's, no clone) the flat copy's 86,418 B
    comes before any buffer is made: a_r = 86,418, h_r = 0 (rank 0's 85,484 B of buffers come after it)."""
    from advisor.ledger.state import Cluster, Plan, compute_ledger
    from advisor.model.inventory import from_dict
    for rbs, want in ((10000, {0: (131838, 38528), 1: (131838, 38860)}), (50000, {0: (86418, 0), 1: (86418, 0)})):
        cfg = {"train_micro_batch_size_per_gpu": 1, "train_batch_size": 4, "bf16": {"enabled": True},
               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
               "zero_optimization": {"stage": 2, "reduce_bucket_size": rbs, "overlap_comm": overlap,
                                     "contiguous_gradients": True, "offload_optimizer": {"device": "cpu"}}}
        ec = effective_config(cfg)
        inv = from_dict(_TINY, "tiny")
        wrapper = state.select_optimizer(ec)[0]
        assert state.zero12_offload_microstep_modeled(ec, wrapper, 2, 1)
        assert not state.zero12_offload_microstep_modeled(ec, wrapper, 1, 1)
        lay = state.placement(ec, inv, 2).zero12
        got = state.zero12_offload_microstep_terms(ec, inv, lay, 2, wrapper).to_list()
        assert got == [want[0], want[1]], rbs
        led = compute_ledger(Plan(ec, inv, Cluster(world_size=2)))
        for r in (0, 1):
            lives = {e.item: (e.life, e.bytes) for e in led.rank(r).entries}
            assert lives["offload_microstep_reduce"] == ("first_microstep_reduce", want[r][0])
            assert lives.get("offload_microstep_accumulated", ("first_microstep_reduce", 0)) == (
                "first_microstep_reduce", want[r][1])
            assert lives["offload_accumulated_grads_cpu"][0] == "from_first_reduce"
            assert lives["offload_grad_norm_fp64"][0] == "boundary_reduce"


def test_offload_microstep_lifetimes_on_the_timeline() -> None:
    """The host buffers of async_accumulate_grad_in_cpu_via_gpu (stage_1_and_2.py l.1822-1824) do not exist before
    micro-step 1's reduce makes them (the engine's tracker at initialize: 395,192 B on both ranks of
    z2_bf16_oo_cpu_overlap_bigtensor_tbsga2_w2, the ledger's GA-1 initialize, not + I_r x D) and are kept from then
    on; the fp64 norm copies are the boundary's only (set_norm_for_param_grad_in_gpu, l.2170-2171)."""
    from advisor.ledger.state import Cluster, Plan, compute_ledger
    from advisor.ledger.timeline import resolve_load, role_timeline
    from advisor.model.inventory import from_dict
    cfg = {"train_micro_batch_size_per_gpu": 1, "train_batch_size": 4, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2, "reduce_bucket_size": 10000, "overlap_comm": True,
                                 "contiguous_gradients": True, "offload_optimizer": {"device": "cpu"}}}
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, from_dict(_TINY, "tiny"), Cluster(world_size=2)))
    tl = role_timeline(led, led.rank(0), resolve_load(ec), ga=2, rank=0)
    where = {}
    for inst, ents in zip(tl.instants, tl.entries):
        for item, *_ in ents:
            where.setdefault(item, set()).add(inst.key)
    assert not where["offload_accumulated_grads_cpu"] & {"initialize", "forward:1", "backward:1", "reduce:1"}
    assert {"forward:2", "reduce", "first_step:update", "steady:reduce"} <= where["offload_accumulated_grads_cpu"]
    assert where["offload_microstep_reduce"] == {"reduce:1"}
    assert where["offload_grad_norm_fp64"] == {"reduce", "steady:reduce"}


def _walk_microstep(numels: list[int], layout, W: int, rbs: int, D: int, copies,
                    groups: "list[int] | None" = None, layouts=None) -> list[tuple[int, int]]:
    """Micro-step 1's reduce of ZeRO-2 under CPU offload walked hook by hook from DeepSpeed's rules (tensors each
    used alone: no autograd sibling): hooks in the reverse of model order; a gradient whose arrival would take
    the bucket past RBS flushes it first (l.1422), beside itself; one over RBS is cloned in its hook (l.1443-1446:
    clone beside the autograd gradient) and reduced alone; a flush holds its flat copy (``copies``, the flush
    replay's, one per flush in order) and a clone reduced alone; after it the owned gradients' host buffers are
    made (l.1822-1824) and an owned clone is kept to the epilogue (no clear before the boundary), another rank's
    dropped. Per rank: (most accelerator bytes at one moment, most bytes with the host buffers - that).
    ``groups`` (the tensors' param groups, model order) with ``layouts`` (one per group): a rank owns a
    tensor meeting its slice of the tensor's own group's buffer; the bucket fills across groups (l.1422)."""
    groups = groups or [0] * len(numels)
    layouts = layouts or [layout]
    starts, seen = [], {}
    for g in groups:
        starts.append(layouts[g].starts[seen.get(g, 0)])
        seen[g] = seen.get(g, 0) + 1
    out = []
    for r in range(W):
        def owns(i):
            a, n, P = starts[i], numels[i], layouts[groups[i]].P
            return max(0, min(a + n, (r + 1) * P) - max(a, r * P)) > 0
        acc = keep = 0
        best_a = best_c = 0
        bucket: list[int] = []
        j = 0

        def moment(accel: int, host: int) -> None:
            nonlocal best_a, best_c
            best_a = max(best_a, accel)
            best_c = max(best_c, accel + host)

        def flush(trigger: int) -> None:
            nonlocal acc, keep, j
            big = numels[bucket[0]] * D if len(bucket) == 1 and numels[bucket[0]] > rbs else 0
            moment(copies[j] + trigger * D + big + keep, acc)
            acc += sum(numels[i] for i in bucket if owns(i)) * D
            moment(trigger * D + big + keep, acc)
            if big and owns(bucket[0]):
                keep += big
            j += 1

        for i in reversed(range(len(numels))):
            n = numels[i]
            if bucket and sum(numels[k] for k in bucket) + n > rbs:
                flush(n)
                bucket = []
            moment(n * D * (2 if n > rbs else 1) + keep, acc)
            bucket.append(i)
        if bucket:
            flush(0)
        out.append((best_a, best_c - best_a))
    return out


@pytest.mark.parametrize("seed", range(25))
def test_offload_microstep_matches_the_hook_walk(seed: int) -> None:
    from advisor.model.inventory import from_dict
    rng = random.Random(500 + seed)
    W = rng.choice((1, 2, 3, 5, 8, 16))
    rbs = rng.choice((50, 300, 2000))
    numels = [rng.choice((1, 7, 64, 199, 256, 1500, rng.randint(1, 3000))) for _ in range(rng.randint(1, 12))]
    inv = from_dict({"name": "walk", "tensors": [{"name": f"m{i}.w", "shape": [n]} for i, n in enumerate(numels)]},
                    "walk")
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                           "zero_optimization": {"stage": 2, "reduce_bucket_size": rbs, "overlap_comm": False,
                                                 "contiguous_gradients": True,
                                                 "offload_optimizer": {"device": "cpu"}}})
    wrapper = state.select_optimizer(ec)[0]
    layouts = state.placement(ec, inv, W).zero12
    copies = state._zero12_flush_replay(ec, inv, layouts, W)[10]
    got = state.zero12_offload_microstep_terms(ec, inv, layouts, W, wrapper).to_list()
    assert got == _walk_microstep(numels, layouts[0], W, rbs, 2, copies)


@pytest.mark.parametrize("seed", range(20))
def test_offload_microstep_groups_match_the_hook_walk(seed: int) -> None:
    from advisor.model.inventory import from_dict
    rng = random.Random(700 + seed)
    W = rng.choice((1, 2, 3, 5, 8, 16))
    rbs = rng.choice((50, 300, 2000))
    G = rng.choice((2, 3))
    n = rng.randint(G, 14)
    groups = [i % G if i < G else rng.randrange(G) for i in range(n)]
    numels = [rng.choice((1, 7, 64, 199, 256, 1500, rng.randint(1, 3000))) for _ in range(n)]
    inv = from_dict({"name": "walk", "tensors": [{"name": f"m{i}.w", "shape": [x], "group": g}
                                                 for i, (g, x) in enumerate(zip(groups, numels))]}, "walk")
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                           "zero_optimization": {"stage": 2, "reduce_bucket_size": rbs, "overlap_comm": True,
                                                 "contiguous_gradients": True,
                                                 "offload_optimizer": {"device": "cpu"}}})
    wrapper = state.select_optimizer(ec)[0]
    layouts = state.placement(ec, inv, W).zero12
    assert len(layouts) == G and state.zero12_offload_microstep_modeled(ec, wrapper, 2, G)
    copies = state._zero12_flush_replay(ec, inv, layouts, W)[10]
    got = state.zero12_offload_microstep_terms(ec, inv, layouts, W, wrapper).to_list()
    assert got == _walk_microstep(numels, None, W, rbs, 2, copies, groups, layouts)


def test_zero1_overlap_offload_ga2_flush_by_hand() -> None:
    """parity.TINY at W = 2, ZeRO-1 bf16, reduce_bucket_size 10,000, overlap_comm, CPU offload, GA 2. Micro-step
    1's hooks move nothing (reduce_ready_partitions_and_remove_grads, stage_1_and_2.py l.2293-2295), so the
    boundary's hooks (autograd order: l3.bias, l3.weight, l2.bias, l2.weight, l1.bias, l1.weight) meet every
    param.grad whole. l2.weight (23,177 elements, flat [19,565, 42,742)) is over the bucket: cloned (l.1446) and
    flushed by l1.bias's hook; at that flush l1.bias (301) and l1.weight (19,264) are still whole, and l1.bias's
    autograd node has just made l1.weight's new gradient beside its old param.grad (19,264 more): u = (301 +
    19,264 + 19,264) x 2 = 77,658 B. P = 43,212 / 2 = 21,606 (2 B alignment padding), so rank 1's slice of
    l2.weight is 42,742 - 21,606 = 21,136 elements (fp64 copy 169,088 B, l.1886). Engine
    (z1_bf16_overlap_oo_cpu_tbsga2_bigtensor_w2, rank 1's backward:2 peak): l.1886 169,120 B (the slice and 32
    B of norm scalars), engine.py l.3428 77,662 B, l.1446 46,354 B. The clone is made beside those same
    gradients, under that moment: h = 0, and micro-step 1 clones nothing."""
    from advisor.model.inventory import from_dict
    sys_path = __import__("os").path.join(__import__("os").path.dirname(__file__), "engine")
    __import__("sys").path.insert(0, sys_path)
    import parity
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "train_batch_size": 4, "bf16": {"enabled": True},
                           "zero_optimization": {"stage": 1, "reduce_bucket_size": 10000, "overlap_comm": True,
                                                 "offload_optimizer": {"device": "cpu"}}})
    wrapper = state.select_optimizer(ec)[0]
    assert state.zero12_offload_flush_modeled(ec, wrapper, 2)
    inv = from_dict(parity.TINY, "tiny")
    layout = state.zero12_group_layout(tuple(t.numel for t in inv.tensors), 2, 2, False)
    assert layout.P == 21606
    got = state.zero12_offload_reduce_terms(ec, [layout], 2, wrapper, inv, 2).to_list()
    assert got[1] == (21136, 23177 * 2, 0, (301 + 19264 + 19264) * 2)
    # the flat-copy moment (zero12_offload_flush_bytes): at l1.bias's flush, l2.weight's clone (46,354 B) and
    # allreduce_bucket's flat copy of it (l.2367: it spans both ranks' slices, 46,354 B) beside the same u
    assert state.zero12_offload_flush_bytes(ec, inv, [layout], 2, wrapper, 2) == 2 * 23177 * 2 + 77658
