"""Issue 21 (bounded work): the per-inventory passes generate makes at 1e5 layers take each
distinct tensor size once (times its count), or a module's sums in one pass. Each is checked
here against the straightforward per-tensor (and per-rank) computation, written in this file
from the DeepSpeed 0.19.8 rule it models, on small inventories of varied shapes: odd numels,
world sizes that do not divide them, sub_group_size boundaries in the middle of a layer,
frozen tensors, one-parameter modules and numeric (``params.3``) names."""

from __future__ import annotations

import random

import pytest

from advisor.config.effective import effective_config
from advisor.ledger import state
from advisor.ledger.timeline import zero_init_load_peak
from advisor.model.inventory import Inventory, TensorSpec

WORLDS = (1, 2, 3, 7, 8)


def _inventory(seed: int, layers: int = 6) -> Inventory:
    """Identical layers (an odd-sized bias and norm among them), plus an embedding, a frozen
    tensor and a synthetic numeric-name tensor (its own module)."""
    rng = random.Random(seed)
    h = rng.choice((5, 7, 12, 33))
    ts = [TensorSpec("model.embed_tokens.weight", (rng.choice((97, 100)), h))]
    for i in range(layers):
        p = f"model.layers.{i}"
        ts += [TensorSpec(f"{p}.self_attn.q_proj.weight", (h, h)),
               TensorSpec(f"{p}.self_attn.q_proj.bias", (h,)),
               TensorSpec(f"{p}.mlp.up_proj.weight", (3 * h + 1, h)),
               TensorSpec(f"{p}.input_layernorm.weight", (h,), trainable=(i % 3 != 1)),
               TensorSpec(f"{p}.mlp.down_proj.weight", (h, 3 * h + 1), group=i % 2)]
    ts += [TensorSpec("params.3", (rng.randint(1, 999),)), TensorSpec("model.norm.weight", (h,))]
    return Inventory("t", ts)


def _ec(zero: dict):
    return effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": zero})


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _module(name: str) -> str:
    # the unit ZeRO-3 fetches: the name without its last component, a numeric last component
    # (--params chunks) being a tensor of its own (advisor.ledger.state.module_of's rule)
    head, _, last = name.rpartition(".")
    return name if (not head or last.isdigit()) else head


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("W", WORLDS)
def test_first_fetch_bytes_match_per_module_sums(seed: int, W: int) -> None:
    """partition_parameters.py _all_gather_dtype (l. 1343) / AllGatherCoalescedHandle.wait
    (l. 795): a module of >= 2 params fetches sum ceil(n/W) x W x D into one flat buffer and
    torch.cat-copies its persistent params (n x D); one param is its own buffer. The first
    module reaching the largest figure is named."""
    inv = _inventory(seed)
    D = 2
    for thr in (0, 40, 10**9):
        z = _ec({"stage": 3, "stage3_param_persistence_threshold": thr}).zero
        keep = state.zero3_persistent(inv, z)
        order: list[str] = []
        members: dict[str, list[int]] = {}
        for i, t in enumerate(inv.tensors):
            m = _module(t.name)
            if m not in members:
                order.append(m)
                members[m] = []
            members[m].append(i)
        best, where = 0, ""
        for m in order:
            idx = members[m]
            if not any(keep[i] for i in idx):
                continue
            flat = sum(_ceil(inv.tensors[i].numel, W) * W * D for i in idx)
            copies = sum(inv.tensors[i].numel * D for i in idx if keep[i]) if len(idx) >= 2 else 0
            if flat + copies > best:
                best, where = flat + copies, f"module {m}"
        assert state._zero3_first_fetch_bytes(inv, z, W, D) == (best, where)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("W", WORLDS)
@pytest.mark.parametrize("sgs", (None, 50, 333))
def test_grad_swap_by_rank_matches_every_rank_every_tensor(seed: int, W: int, sgs: int | None) -> None:
    """§5.4 (optimizer_utils.py _swap_out_gradients): on every rank, every parameter of a
    swappable sub-group (S_k x 4 >= the swap threshold) adds zero3_grad_swap_bytes of the real
    elements that rank holds, r_i = max(0, min(p_i, n_i - r p_i)) (§3.2). Sub-groups of 50 or
    333 partition elements end in the middle of a layer."""
    inv = _inventory(seed)
    sub_groups = state.zero3_sub_groups(inv, W, sgs)
    for smin, al in ((0, 1), (40, 4), (400, 3)):
        got = state._zero3_grad_swap_by_rank(inv, W, sub_groups, smin, al)
        want = []
        for r in range(W):
            f = k = 0
            for sg in sub_groups:
                if sg.numel * 4 < smin:
                    continue
                for i in sg.tensors:
                    n = inv.tensors[i].numel
                    p = _ceil(n, W)
                    r_i = max(0, min(p, n - r * p))
                    b = r_i * 4  # the fp32 gradient piece
                    if b < smin or r_i // al * al * 4 < smin:
                        k += b
                    else:
                        whole = r_i // al * al
                        f += whole * 4
                        k += b if whole != r_i else 0
            want.append((f, k))
        assert got.to_list() == want


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("W", WORLDS)
def test_param_swap_bytes_from_counts_match_per_partition_sum(seed: int, W: int) -> None:
    """partitioned_param_swapper.py swappable_tensor / _io_aligned_numel: every partition with
    p_i x D >= max(1 MiB, aio.block_size) is written as A_k(p_i) x D, k = 1024 x
    intra_op_parallelism / D. The projections are scaled up so they cross the 1 MiB threshold."""
    inv = _inventory(seed)
    big = Inventory("big", [TensorSpec(t.name, (t.numel * (99_991 if t.name.endswith("proj.weight") else 1),),
                                       t.trainable, t.group) for t in inv.tensors])
    ec = _ec({"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/x"}})
    D, k, pmin = 2, 1024 * max(1, ec.aio.intra_op_parallelism) // 2, max(1 << 20, ec.aio.block_size)
    totals = {}
    for which, pick in (("all", lambda t: True), ("trainable", lambda t: t.trainable),
                        ("frozen", lambda t: not t.trainable)):
        want = 0
        for t in big.tensors:
            if pick(t):
                p = _ceil(t.numel, W)
                if p * D >= pmin:
                    want += (p if p % k == 0 else p + k - p % k) * D
        assert state.zero3_param_swap_bytes_counted(ec, state.zero3_partition_counts(big, W, which)) == want
        assert state.zero3_param_swap_bytes(ec, (_ceil(t.numel, W) for t in big.tensors if pick(t))) == want
        totals[which] = want
    # not vacuous: some partitions cross the threshold, and the small ones (norms, biases) do not
    assert 0 < totals["trainable"] < totals["all"] * 2
    assert any(_ceil(t.numel, W) * D < pmin for t in big.tensors)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("W", WORLDS)
@pytest.mark.parametrize("cast,swap_min", ((False, None), (True, None), (True, 60)))
def test_zero_init_load_peak_matches_instant_by_instant_walk(seed: int, W: int, cast: bool,
                                                             swap_min: int | None) -> None:
    """partition_parameters.py (zero_wrapper_for_fp_tensor_constructor, _post_init_method,
    _partition_param): every instant of the build is listed -- a parameter being created (the
    module's earlier ones whole, this one in both dtypes when cast), then each partition
    allocated while its whole tensor lives -- and the first instant of the largest total is
    the peak."""
    inv = _inventory(seed)
    sizes = [(_module(t.name), t.numel) for t in inv.tensors]
    _check_load_peak_walk(sizes, W, cast, swap_min)
    # every module one parameter (Llama-like layers without biases): zero_init_load_peak's column-wise path
    _check_load_peak_walk([(f"{m}.{i}", n) for i, (m, n) in enumerate(sizes)], W, cast, swap_min)


def _check_load_peak_walk(sizes: list, W: int, cast: bool, swap_min: "int | None") -> None:
    D, Dl = 2, 4
    instants = []
    done = 0
    i = 0
    while i < len(sizes):
        mod = sizes[i][0]
        ns = []
        while i < len(sizes) and sizes[i][0] == mod:
            ns.append(sizes[i][1])
            i += 1
        for j, n in enumerate(ns):
            whole_before = sum(ns[:j]) * D
            instants.append((done, whole_before + n * (Dl + (D if cast else 0)), f"{mod}: building a parameter"))
        made = 0
        for j, n in enumerate(ns):
            pb = _ceil(n, W) * D
            made += 0 if (swap_min is not None and pb >= swap_min) else pb
            instants.append((done + made, sum(ns[j:]) * D, f"{mod}: partitioning"))
        done += made
    top = max(a + b for a, b, _ in instants)
    want = next(x for x in instants if x[0] + x[1] == top)
    assert zero_init_load_peak(sizes, W, D, Dl, cast, swap_min) == (want if top > 0 else (0, 0, ""))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("W", (1, 3, 8))
@pytest.mark.parametrize("sgs", (60, 10**9))
def test_stage3_partition_figures_from_counts_match_per_tensor_sums(seed: int, W: int, sgs: int) -> None:
    """The ZeRO-3 ledger's partition figures, now summed over distinct sizes, against per-tensor
    sums (stage3.py _create_fp16_sub_groups / _create_fp16_partitions_with_defragmentation;
    partitioned_param_swapper.py reserve_partitioned_swap_space; §3.2, §5.1): lp_param_partitions
    P3 x D (P3 = sum ceil(n_i / W) over trainable params), and with offload_param nvme and a
    max_in_cpu too small for any group, the pinned 'param_partitioned_swap_buffer' = sum over the
    largest sub-group of A_k(n_i) x D (full n_i), and the pinned partitions below the aio swap
    size kept in host memory (sum of p_i x D with p_i x D < max(1 MiB, block_size))."""
    from advisor.ledger.state import Cluster, Plan, compute_ledger

    inv = _inventory(seed)
    inv = Inventory("scaled", [TensorSpec(t.name, (t.numel * (40_009 if t.name.endswith("proj.weight") else 1),),
                                          t.trainable, t.group) for t in inv.tensors])
    base = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    D = 2
    sub_groups = state.zero3_sub_groups(inv, W, sgs)
    P3 = sum(_ceil(inv.tensors[i].numel, W) for sg in sub_groups for i in sg.tensors)

    ec = effective_config({**base, "zero_optimization": {"stage": 3, "sub_group_size": sgs}})
    ents = compute_ledger(Plan(ec, inv, Cluster(world_size=W))).rank(0).entries
    assert sum(e.bytes for e in ents if e.item == "lp_param_partitions" and e.tier == "accelerator") == P3 * D

    ec = effective_config({**base, "zero_optimization": {
        "stage": 3, "sub_group_size": sgs,
        "offload_param": {"device": "nvme", "nvme_path": "/x", "max_in_cpu": 1}}})
    ents = compute_ledger(Plan(ec, inv, Cluster(world_size=W))).rank(0).entries
    k = 1024 * max(1, ec.aio.intra_op_parallelism) // D
    sizes = [sum(_ceil(inv.tensors[i].numel, W) for i in sg.tensors) for sg in sub_groups]
    big = sizes.index(max(sizes))  # the first of the largest
    full = sum(-(-inv.tensors[i].numel // k) * k for i in sub_groups[big].tensors)
    got = [e.bytes for e in ents if e.item == "param_partitioned_swap_buffer"]
    assert got == [full * D]
    pmin = max(1 << 20, ec.aio.block_size)
    small = sum(_ceil(inv.tensors[i].numel, W) * D for sg in sub_groups for i in sg.tensors
                if _ceil(inv.tensors[i].numel, W) * D < pmin)
    pinned = [e for e in ents if e.item == "lp_param_partitions" and e.tier == "host_pinned"]
    assert len(pinned) == 1
    # max_in_cpu of 1 element: no sub-group is in a flat buffer (that 1-element buffer is
    # 'max_in_cpu_buffer'), so the pinned partitions are just the ones below the swap size
    assert pinned[0].bytes == small
    assert (f"+ {small} B of partitions below the aio swap size" in pinned[0].formula) == bool(small)


def test_k_of_l_checkpointing_counts_dense_and_moe_layers_like_the_walk() -> None:
    """Megatron's block method checkpoints the stage's first k layers: each swaps the layer's
    saved activations for its kept input (model.activations, checkpointing K). With
    first_dense_layers = 3 of a MoE model, going from k to k + 1 checkpointed layers lowers the
    saved bytes by (layer k's activations - its input): the dense layer's figure for k < 3, the
    MoE layer's after. The replaced total is now counted, not walked; the walk's per-step change
    is what this checks, from the per-layer terms."""
    from advisor.model.activations import ActivationInputs, estimate_activations, layer_terms

    meta = {"hidden_size": 64, "num_layers": 12, "num_heads": 4, "num_kv_heads": 4, "intermediate_size": 96,
            "vocab_size": 500, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
            "first_dense_layers": 3}
    s, b, D = 32, 2, 2
    saved = [estimate_activations(meta, ActivationInputs(seq_len=s, micro_batch=b, dtype_bytes=D,
                                                         checkpointing=str(k))).saved_accelerator
             for k in range(1, 12)]
    x = ActivationInputs(seq_len=s, micro_batch=b, dtype_bytes=D)
    kern = {"mask_bytes": x.dropout_mask_bytes, "stat_bytes": x.norm_stat_bytes}
    dense = sum(layer_terms(meta, s, b, D, x.attention, 1, False, moe=False, **kern).values())
    moe = sum(layer_terms(meta, s, b, D, x.attention, 1, False, moe=True, **kern,
                          capacity_factor=x.moe_capacity_factor, min_capacity=x.moe_min_capacity).values())
    inp = D * s * b * 64
    assert dense != moe
    steps = [saved[i] - saved[i + 1] for i in range(len(saved) - 1)]  # k = i + 1 -> i + 2: layer i + 1
    assert steps == [(dense if i + 1 < 3 else moe) - inp for i in range(len(steps))]
