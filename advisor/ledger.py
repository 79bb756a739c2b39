"""The state ledger: bytes DeepSpeed 0.19.8 allocates on each rank, by class, item and tier.

INTERFACE (stable; views depend on it):

* :class:`Plan` — the effective config x the model inventory x the cluster shape.
* :func:`compute_ledger(plan) -> Ledger` — one :class:`RankLedger` per data-parallel rank.
* Each :class:`Entry` is one allocation DeepSpeed makes: which rank, tier, state class, the
  fine-grained item name (the vocabulary below, shared with ``advisor.measure``), bytes,
  lifetime, the formula in words and the DeepSpeed source it comes from.

Tiers: ``accelerator``, ``host_pinned``, ``host_pageable``, ``nvme``.
Classes: ``parameters``, ``gradients``, ``master_weights``, ``optimizer_states``,
``activations``, ``workspace``.
Lifetimes: ``persistent`` (from init or the first step, kept), ``backward`` (from backward
until the optimizer step consumes it), ``step`` (transient inside ``optimizer.step``),
``init`` (initialisation only), ``in_backward`` (added: transient inside backward, gone
when ``engine.backward`` returns).

Items (the census names used by the engine harness; see the reference section 8):
  parameters:        lp_params_flat, lp_param_partitions, lp_params_gathered,
                     offload_bit16_param_buffer, max_in_cpu_buffer, frozen_params (added:
                     trainable=False tensors)
  gradients:         lp_grads, averaged_gradients, grad_partitions_flat_buffer, fp32_grad,
                     fp32_grad_accum, offload_accumulated_grads_cpu, opt_unswapped_grad_tails
  master_weights:    fp32_master
  optimizer_states:  exp_avg, exp_avg_sq, step
  workspace:         ipg_bucket, offload_temp_grad_cpu, offload_temp_grad_accel,
                     opt_swap_buffers, param_swap_buffers, param_partitioned_swap_buffer

Formulas follow ../shared/reference/deepspeed-0.19.8-state-accounting.md sections 2-5, each
verified by tests/engine parity runs against the real engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from advisor.effective import DTYPE_BYTES, EffectiveConfig
from advisor.inventory import Inventory

Tier = Literal["accelerator", "host_pinned", "host_pageable", "nvme"]
StateClass = Literal["parameters", "gradients", "master_weights", "optimizer_states", "activations", "workspace"]
Life = Literal["persistent", "backward", "step", "init", "in_backward"]

TIERS: tuple[str, ...] = ("accelerator", "host_pinned", "host_pageable", "nvme")
CLASSES: tuple[str, ...] = ("parameters", "gradients", "master_weights", "optimizer_states", "activations", "workspace")


@dataclass(frozen=True)
class Cluster:
    """The launch shape. ``world_size`` is the total number of ranks; the data-parallel
    world size (which ZeRO partitions over) is world_size / (tp x pp x sp)."""

    world_size: int = 1
    gpus_per_node: int | None = None
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    sequence_parallel: int = 1

    @property
    def dp_world_size(self) -> int:
        return max(1, self.world_size // (self.tensor_parallel * self.pipeline_parallel * self.sequence_parallel))


@dataclass(frozen=True)
class Plan:
    config: EffectiveConfig
    inventory: Inventory
    cluster: Cluster


@dataclass(frozen=True)
class Entry:
    rank: int
    tier: str
    cls: str
    item: str
    bytes: int
    life: str = "persistent"
    formula: str = ""
    source: str = ""


@dataclass
class RankLedger:
    rank: int
    entries: list[Entry] = field(default_factory=list)

    def total(self, tier: str | None = None, cls: str | None = None, lives: tuple[str, ...] | None = None) -> int:
        """Sum of entry bytes filtered by tier, class and lifetime (None = all)."""
        return sum(e.bytes for e in self.entries
                   if (tier is None or e.tier == tier) and (cls is None or e.cls == cls)
                   and (lives is None or e.life in lives))

    def by_item(self, item: str) -> list[Entry]:
        return [e for e in self.entries if e.item == item]


@dataclass
class Ledger:
    plan: Plan
    ranks: list[RankLedger]
    #: Which DeepSpeed objects this plan gets (wrapper, basic optimizer), for the assumptions.
    wrapper: str = ""
    basic_optimizer: str = ""
    #: What the ledger leaves out, in words.
    excluded: list[str] = field(default_factory=list)
    #: Per-step data movement (filled by the tiers/traffic work).
    movement: list = field(default_factory=list)


# =============================================================================================
# Implementation. Section numbers (§) refer to
# ../shared/reference/deepspeed-0.19.8-state-accounting.md; file:function citations are relative
# to the installed deepspeed 0.19.8 package. Every formula here is checked byte for byte
# against the real engine by tests/engine (advisor.measure).

#: Items that are model state (as opposed to config-driven workspace buffers).
MODEL_STATE_CLASSES: tuple[str, ...] = ("parameters", "gradients", "master_weights", "optimizer_states")

#: aio constants (``runtime/swap_tensor/constants.py``): MIN_AIO_BYTES, AIO_ALIGNED_BYTES.
MIN_AIO_BYTES = 1024 ** 2
AIO_ALIGNED_BYTES = 1024


def _align(v: int, a: int) -> int:
    """v rounded up to a multiple of a (elements)."""
    return v if a <= 1 or v % a == 0 else v + a - v % a


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def select_optimizer(ec: EffectiveConfig) -> tuple[str, str]:
    """(wrapper, basic optimizer) DeepSpeed 0.19.8 builds for ``ec`` (§2).

    Basic (``engine.py`` ``_configure_basic_optimizer``): ``torch_adam`` -> torch.optim.AdamW
    (Adam when ``adam_w_mode: false``); else ``offload_optimizer.device`` cpu or nvme as written,
    at any stage (``engine.zero_use_cpu_optimizer``) -> DeepSpeedCPUAdam; else FusedAdam.
    Wrapper (``engine._configure_optimizer`` / ``_do_optimizer_sanity_check``): stage 3 ->
    DeepSpeedZeroOptimizer_Stage3; stage 1 + bf16 + fp32 grad accumulation without
    ``device: cpu`` -> BF16_Optimizer; stages 1/2 -> DeepSpeedZeroOptimizer; stage 0 16-bit ->
    FP16_Optimizer (FusedAdam) or FP16_UnfusedOptimizer; stage 0 fp32 -> none.
    """
    o = ec.optimizer
    written = ec.zero.offload_optimizer.device
    fam = o.family
    if fam in ("adam", "adamw", "none"):
        if o.torch_adam:
            basic = "AdamW" if (fam != "adam" or o.adam_w_mode) else "Adam"
        elif written in ("cpu", "nvme"):
            basic = "DeepSpeedCPUAdam"
        else:
            basic = "FusedAdam"
    else:
        basic = o.type or "client optimizer"
    st = ec.zero.stage
    if st == 3:
        wrapper = "DeepSpeedZeroOptimizer_Stage3"
    elif st in (1, 2):
        if st == 1 and ec.bf16_enabled and ec.grad_dtype == "fp32" and written != "cpu":
            wrapper = "BF16_Optimizer"
        else:
            wrapper = "DeepSpeedZeroOptimizer"
    elif ec.model_dtype == "fp32":
        wrapper = basic
    else:
        wrapper = "FP16_Optimizer" if basic == "FusedAdam" else "FP16_UnfusedOptimizer"
    return wrapper, basic


def unsupported_reason(ec: EffectiveConfig, dp_world_size: int | None = None) -> str | None:
    """Why DeepSpeed 0.19.8 refuses this combination at ``initialize()``, or None.

    Found by running the engine (tests/engine) and reading the source; each reason names it.
    """
    if ec.fp16_enabled and ec.bf16_enabled:
        return "fp16 and bf16 cannot both be enabled (runtime/config.py: DeepSpeedConfig._do_error_check)"
    if ec.zero.stage == 0 and ec.bf16_enabled and ec.grad_dtype == "fp32":
        return ("bf16 with grad_accum_dtype fp32 at stage 0: NotImplementedError 'unsupported mix' "
                "(engine.py: _do_optimizer_sanity_check; BF16_Optimizer needs ZeRO-1 or pipeline parallelism)")
    if ec.zero.stage == 3:
        for what, off in (("offload_optimizer", ec.zero.offload_optimizer), ("offload_param", ec.zero.offload_param)):
            if off.device == "nvme" and not off.nvme_path:
                return f"{what}.device nvme without nvme_path: the swapper fails (swap_tensor: os.path.join(None, ...))"
    return None


@dataclass(frozen=True)
class _T:
    """A trainable tensor in flat order within its param group."""
    numel: int
    start: int  # flat offset (elements), including parameter_alignment padding


class _Builder:
    def __init__(self, rank: int):
        self.rank = rank
        self.entries: list[Entry] = []

    def add(self, tier: str, cls: str, item: str, nbytes: int, life: str, formula: str, source: str) -> None:
        self.entries.append(Entry(self.rank, tier, cls, item, int(nbytes), life, formula, source))


def _host(pin: bool) -> str:
    return "host_pinned" if pin else "host_pageable"


def _opt_src(basic: str) -> str:
    """Where the basic optimizer creates its state (file:function)."""
    return {"FusedAdam": "ops/adam/fused_adam.py:FusedAdam.step",
            "DeepSpeedCPUAdam": "ops/adam/cpu_adam.py:DeepSpeedCPUAdam.step",
            "AdamW": "torch/optim/adamw.py:AdamW._init_group",
            "Adam": "torch/optim/adam.py:Adam._init_group"}.get(basic, "engine.py:DeepSpeedEngine._configure_basic_optimizer")


def _moment_items(basic: str, family: str) -> tuple[str, ...]:
    if family in ("lion",):
        return ("exp_avg",)
    return ("exp_avg", "exp_avg_sq")


def _zero12_layout(group, W: int, D: int, align_params: bool):
    """Flat layout of one ZeRO-1/2 param group (§3.1; ``stage_1_and_2.py`` __init__,
    ``runtime/utils.py`` align_dense_tensors): per-param alignment padding, N_pad = A_{2W}(.),
    P = N_pad / W. Returns (tensors with flat offsets, N_pad, P)."""
    a = 16 // math.gcd(16, D) if align_params else 1
    out = []
    off = 0
    for j, t in enumerate(group):
        out.append(_T(t.numel, off))
        off += t.numel
        if align_params and j < len(group) - 1:
            off += (-off) % a
    n_pad = _align(off, 2 * W)
    return out, n_pad, n_pad // W


def _zero12_rank(ts, P: int, r: int) -> tuple[int, int]:
    """(I_r, Cov_r): full numel of params intersecting rank r's slice, and elements of the
    slice covered by params (``stage_1_and_2.py`` get_partition_info)."""
    lo, hi = r * P, (r + 1) * P
    inter = cov = 0
    for t in ts:
        a, b = t.start, t.start + t.numel
        if a < hi and b > lo:
            inter += t.numel
            cov += min(b, hi) - max(a, lo)
    return inter, cov


def _stage0(b: _Builder, ec: EffectiveConfig, inv: Inventory, wrapper: str, basic: str) -> None:
    D = DTYPE_BYTES[ec.model_dtype]
    groups = inv.groups()
    N = sum(t.numel for g in groups for t in g)
    ntensors = sum(len(g) for g in groups)
    src_s = "runtime/fp16/fused_optimizer.py:FP16_Optimizer.__init__" if wrapper == "FP16_Optimizer" else \
        "runtime/fp16/unfused_optimizer.py:FP16_UnfusedOptimizer.__init__"
    b.add("accelerator", "parameters", "lp_params_flat", N * D, "persistent",
          f"N x D = {N} x {D}" + (" (one flat tensor per group, no padding)" if wrapper == "FP16_Optimizer" else ""),
          "engine.py:DeepSpeedEngine._configure_distributed_model" if ec.model_dtype == "fp32" else src_s)
    if ec.model_dtype != "fp32":
        b.add("accelerator", "master_weights", "fp32_master", N * 4, "persistent", f"N x 4 = {N} x 4", src_s)
    for m in _moment_items(basic, ec.optimizer.family):
        b.add("accelerator", "optimizer_states", m, N * 4, "persistent",
              f"N x 4 = {N} x 4 (fp32 moments; created at init by the wrapper's dummy step for 16-bit)",
              _opt_src(basic) + " (state zeros_like(param))")
    step_b = 4 * ntensors if basic in ("AdamW", "Adam") else 0
    b.add("host_pageable", "optimizer_states", "step", step_b, "persistent",
          f"4 B x {ntensors} param tensors (torch Adam keeps a 0-dim fp32 CPU step)" if step_b else
          "0 (step is a python int)", _opt_src(basic))
    gD = 4 if ec.model_dtype == "fp32" else D
    b.add("accelerator", "gradients", "lp_grads", N * gD, "backward", f"N x D = {N} x {gD} (param.grad)",
          "engine.py:DeepSpeedEngine.backward (param.grad from autograd)")
    if ec.model_dtype != "fp32":
        b.add("accelerator", "gradients", "fp32_grad", N * 4, "step", f"N x 4 = {N} x 4 (fp32 copy of the grads)",
              src_s.replace("__init__", "step"))


def _zero12(b: _Builder, ec: EffectiveConfig, inv: Inventory, W: int, r: int, wrapper: str, basic: str,
            ga: int) -> None:
    z = ec.zero
    D = DTYPE_BYTES[ec.model_dtype]
    M = 4
    off = ec.offload_optimizer_effective != "none" and wrapper != "BF16_Optimizer"
    pin = z.offload_optimizer.pin_memory
    align = z.parameter_alignment and wrapper != "BF16_Optimizer"
    S = "runtime/zero/stage_1_and_2.py:DeepSpeedZeroOptimizer"
    if wrapper == "BF16_Optimizer":
        S = "runtime/bf16_optimizer.py:BF16_Optimizer"
    groups = inv.groups()
    npad_t = p_t = n_t = inter_t = cov_t = 0
    p_max = 0
    largest = 0
    for g in groups:
        ts, n_pad, P = _zero12_layout(g, W, D, align)
        inter, cov = _zero12_rank(ts, P, r)
        lo, hi = r * P, (r + 1) * P
        single = cov == P and sum(1 for t in ts if t.start < hi and t.start + t.numel > lo) == 1
        # step: flatten(averaged_gradients[i]).to(fp32); for an fp32 model whose slice is one
        # tensor with no pad, flatten and .to() return views: no new bytes (stage_1_and_2.py step)
        # ... then the fp32 grad is a view of grads_in_partition (the kept grads, same storage)
        p_max = max(p_max, (inter + P - cov) if (D == 4 and single) else P)
        npad_t += n_pad
        p_t += P
        n_t += sum(t.numel for t in g)
        inter_t += inter
        cov_t += cov
        largest = max([largest] + [t.numel for t in g])
    ng = len(groups)
    b.add("accelerator", "parameters", "lp_params_flat", npad_t * D, "persistent",
          f"N_pad x D = {npad_t} x {D}; N_pad = A_2W(N) per group (full 16-bit copy on every rank)",
          f"{S}.__init__ (flatten_dense_tensors_aligned)")
    m_tier = _host(pin) if off else "accelerator"
    b.add(m_tier, "master_weights", "fp32_master", p_t * M, "persistent",
          f"P x 4 = {p_t} x 4 (P = N_pad / W)", f"{S}.__init__ (single_partition_of_fp32_groups)")
    mom_tier = "host_pageable" if off else "accelerator"
    for m in _moment_items(basic, ec.optimizer.family):
        b.add(mom_tier, "optimizer_states", m, p_t * 4, "persistent",
              f"P x 4 = {p_t} x 4" + (" (DeepSpeedCPUAdam zeros_like: never pinned)" if off else ""),
              _opt_src(basic))
    step_b = 4 * ng if basic in ("AdamW", "Adam") else 0
    b.add("host_pageable", "optimizer_states", "step", step_b, "persistent",
          f"4 B x {ng} flat fp32 partitions" if step_b else "0 (python int)", _opt_src(basic))
    if wrapper == "BF16_Optimizer":
        b.add("accelerator", "gradients", "fp32_grad_accum", npad_t * 4, "persistent",
              f"N_pad x 4 = {npad_t} x 4 (full model, NOT partitioned)", f"{S}._setup_for_real_optimizer")
        b.add("accelerator", "gradients", "lp_grads", n_t * D, "backward", f"N x 2 = {n_t} x 2 (param.grad)",
              "engine.py:DeepSpeedEngine.backward")
        return
    if off:
        b.add(_host(pin), "gradients", "fp32_grad", p_t * 4, "persistent",
              f"P x 4 = {p_t} x 4 (fp32 grad partition on the host)", f"{S}.__init__ (single_partition_of_fp32_groups[i].grad)")
        b.add(_host(pin), "parameters", "offload_bit16_param_buffer", p_t * D, "persistent",
              f"P x D = {p_t} x {D}", f"{S}.__init__ (param_buffer_of_bit16_for_cpu_offload_groups)")
        b.add(_host(pin), "workspace", "offload_temp_grad_cpu", largest * D, "persistent",
              f"max_i n_i x D = {largest} x {D}", f"{S}.__init__ (temp_grad_buffer_for_cpu_offload)")
        b.add("accelerator", "workspace", "offload_temp_grad_accel", largest * D, "persistent",
              f"max_i n_i x D = {largest} x {D}", f"{S}.__init__ (temp_grad_buffer_for_gpu_offload)")
        if ga > 1:
            b.add(_host(pin), "gradients", "offload_accumulated_grads_cpu", inter_t * D, "persistent",
                  f"I_r x D = {inter_t} x {D} (full numel of every param touching the partition)",
                  f"{S}.async_accumulate_grad_in_cpu_via_gpu")
    else:
        b.add("accelerator", "gradients", "fp32_grad", p_max * 4, "step",
              f"P x 4 = {p_max} x 4 (one param group at a time; for an fp32 model whose slice lies in one "
              "tensor it is a view of the kept grads: (I_r + P - Cov_r) x 4, the averaged_gradients storage, "
              "not an extra allocation)", f"{S}.step")
        compact = (z.stage == 2 and ec.grad_dtype == "fp32" and ec.model_dtype != "fp32")
        if compact:
            b.add("accelerator", "gradients", "averaged_gradients", p_t * 4, "backward",
                  f"P x 4 = {p_t} x 4 (compact fp32 partition)", f"{S}._build_compact_grad_partition_buffer")
        else:
            kept = inter_t + (p_t - cov_t)
            b.add("accelerator", "gradients", "averaged_gradients", kept * D, "backward",
                  f"(I_r + P - Cov_r) x D = ({inter_t} + {p_t} - {cov_t}) x {D} (grads_in_partition + pads)",
                  f"{S}.copy_grads_in_partition / get_flat_partition")
    if z.contiguous_gradients or off:
        B = 4 if (z.stage == 1 and ec.grad_dtype == "fp32") else D
        mult = 2 if z.overlap_comm else 1
        b.add("accelerator", "workspace", "ipg_bucket", z.reduce_bucket_size * B * mult, "backward",
              f"reduce_bucket_size x B x (1 + overlap_comm) = {z.reduce_bucket_size} x {B} x {mult} "
              "(elements x bytes; allocated at full size each backward)", f"{S}.setup_buckets")


def _stage3(b: _Builder, ec: EffectiveConfig, inv: Inventory, W: int, r: int, basic: str) -> dict:
    z = ec.zero
    D = DTYPE_BYTES[ec.model_dtype]
    G = DTYPE_BYTES[ec.grad_dtype]
    C = DTYPE_BYTES[ec.comm_dtype]
    M = 4
    S = "runtime/zero/stage3.py:DeepSpeedZeroOptimizer_Stage3"
    oo = ec.offload_optimizer_effective
    op = ec.offload_param_effective
    oo_pin = z.offload_optimizer.pin_memory
    groups = inv.groups()
    # per-param partitions (§3.2, partition_parameters.py:_partition_param)
    parts = [[(t.numel, _ceil_div(t.numel, W)) for t in g] for g in groups]
    P3 = sum(p for g in parts for _, p in g)
    # sub-groups (stage3.py:_create_fp16_sub_groups)
    subs: list[list[tuple[int, int]]] = []
    sub_group_of_group: list[list[int]] = []
    for g in parts:
        idx = []
        total = sum(p for _, p in g)
        if z.sub_group_size >= total:
            idx.append(len(subs))
            subs.append(list(g))
        else:
            cur, acc = [], 0
            for j, (n, p) in enumerate(g):
                cur.append((n, p))
                acc += p
                if acc >= z.sub_group_size or j == len(g) - 1:
                    idx.append(len(subs))
                    subs.append(cur)
                    cur, acc = [], 0
        sub_group_of_group.append(idx)
    Sk = [sum(p for _, p in s) for s in subs]

    # ---- 16-bit parameter partitions
    flat_of_sub: list[bool] = [True] * len(subs)
    if op == "none":
        b.add("accelerator", "parameters", "lp_param_partitions", P3 * D, "persistent",
              f"P3 x D = {P3} x {D}; P3 = sum_i ceil(n_i / W) (one defragmented buffer)",
              f"{S}._create_fp16_partitions_with_defragmentation (lp_param_buffer)")
    else:
        nvme = op == "nvme"
        agg = 0
        pinned_bytes = 0
        pageable = 0
        used_any = []
        pmin = max(MIN_AIO_BYTES, ec.aio.block_size)
        nvme_bytes = 0
        resident_small = 0
        unused_flat = 0
        for gi, g in enumerate(parts):
            pg = sum(p for _, p in g)
            size = pg
            if nvme and agg + pg > z.offload_param.max_in_cpu:
                size = max(0, z.offload_param.max_in_cpu - agg)
            agg += pg
            off = 0
            used = False
            for si in sub_group_of_group[gi]:
                tot = Sk[si]
                if not nvme or off + tot <= size:
                    used = True
                else:
                    flat_of_sub[si] = False
                    for n, p in subs[si]:
                        if p * D < pmin:
                            resident_small += p * D
                off += tot
            used_any.append(used)
            if nvme:  # every swappable partition is written to NVMe at init, even if kept in RAM
                nvme_bytes += sum(_align(p, AIO_ALIGNED_BYTES // D) * D for _, p in g if p * D >= pmin)
            if size > 0 and used:
                pinned_bytes += size * D
            elif size > 0:
                unused_flat += size * D
            else:
                pageable += 1 * D
        item = "lp_param_partitions"
        b.add("host_pinned", "parameters", item, pinned_bytes + resident_small, "persistent",
              "sum_groups P3_g x D in one pinned flat buffer per group (capped at offload_param.max_in_cpu "
              "elements for nvme; pinned whatever pin_memory says)" + (
                  f" + {resident_small} B of partitions below the aio swap size" if resident_small else ""),
              f"{S}._create_param_groups_fp16_flat_cpu_memory")
        if unused_flat:
            b.add("host_pinned", "parameters", "max_in_cpu_buffer", unused_flat, "persistent",
                  "min(P3_g, max_in_cpu) x D pinned flat buffer that no sub-group fits in (allocated anyway)",
                  f"{S}._create_param_groups_fp16_flat_cpu_memory")
        if pageable:
            b.add("host_pageable", "parameters", "max_in_cpu_buffer", pageable, "persistent",
                  "torch.empty(1) placeholder per group without a flat buffer", f"{S}._create_param_groups_fp16_flat_cpu_memory")
        if not all(flat_of_sub) and nvme_bytes:
            b.add("host_pageable", "parameters", "lp_param_partitions", 2, "persistent",
                  "2 B: the shared one-element fp16 invalid_buffer that swapped-out partitions point to",
                  "runtime/swap_tensor/partitioned_param_swapper.py:AsyncPartitionedParameterSwapper.__init__")
        if nvme_bytes:
            b.add("nvme", "parameters", "lp_param_partitions", nvme_bytes, "persistent",
                  "sum over partitions with p_i x D >= max(1 MiB, aio.block_size) of A_{1024/D}(p_i) x D "
                  "({ds_id}_param.tensor.swp; written at init even when max_in_cpu keeps them in RAM)",
                  "runtime/swap_tensor/partitioned_param_swapper.py:AsyncPartitionedParameterSwapper.swap_out")
        if nvme:
            ob = z.offload_param
            al = AIO_ALIGNED_BYTES * ec.aio.intra_op_parallelism // D
            b.add("host_pinned", "workspace", "param_swap_buffers", ob.buffer_count * _align(ob.buffer_size, al) * D,
                  "persistent", f"buffer_count x A_{al}(buffer_size) x D = {ob.buffer_count} x "
                  f"{_align(ob.buffer_size, al)} x {D} (aio-locked)",
                  "runtime/swap_tensor/partitioned_param_swapper.py:AsyncPartitionedParameterSwapper._configure_aio")
            if not all(flat_of_sub):
                big = max(range(len(subs)), key=lambda i: (Sk[i], -i))
                full = sum(_align(n, al) for n, _ in subs[big])
                b.add("host_pinned", "workspace", "param_partitioned_swap_buffer", full * D, "persistent",
                      f"sum over the largest sub-group of A_{al}(n_i) x D = {full} x {D} (FULL numel n_i, not p_i)",
                      "runtime/swap_tensor/partitioned_param_swapper.py:reserve_partitioned_swap_space")

    # ---- persistent (always gathered) parameters
    persist = persist_frozen = 0
    tot = 0
    for t in inv.tensors:  # mark_persistent_parameters walks module.named_parameters(), frozen too
        if t.numel + tot > z.model_persistence_threshold:
            continue
        if t.numel <= z.param_persistence_threshold:
            if t.trainable:
                persist += _ceil_div(t.numel, W) * W
            else:
                persist_frozen += _ceil_div(t.numel, W) * W
            tot += t.numel
    aliased = W == 1  # the gathered tensor is the partition itself (any offload_param)
    b.add("accelerator", "parameters", "lp_params_gathered", 0 if aliased else persist * D, "persistent",
          "0 (W = 1: the gathered tensor is the partition)" if aliased else
          f"sum over params with n_i <= stage3_param_persistence_threshold of ceil(n_i/W) x W x D = {persist} x {D}",
          "runtime/zero/parameter_offload.py:mark_persistent_parameters; stage3.py:_post_step")

    # ---- gradient partition buffer and ipg bucket
    g_tier = _host(oo_pin) if oo != "none" else "accelerator"
    b.add(g_tier, "gradients", "grad_partitions_flat_buffer", P3 * G, "persistent",
          f"P3 x G = {P3} x {G} (grad_accum_dtype, default the model dtype)", f"{S}.__init__ (grad_partitions_flat_buffer)")
    if z.contiguous_gradients:
        b.add("accelerator", "workspace", "ipg_bucket", z.reduce_bucket_size * C, "persistent",
              f"reduce_bucket_size x C = {z.reduce_bucket_size} x {C} (allocated at initialize, kept)",
              f"{S}.__init__ (ipg_buckets[dtype].buffer)")

    # ---- master, moments, fp32 grads per sub-group
    smin = max(MIN_AIO_BYTES, ec.aio.block_size)
    al = AIO_ALIGNED_BYTES * ec.aio.intra_op_parallelism // M
    swappable = [oo == "nvme" and s * M >= smin for s in Sk]
    moments = _moment_items(basic, ec.optimizer.family)
    ram = sum(s for s, sw in zip(Sk, swappable) if not sw)
    files = sum(_align(s, al) for s, sw in zip(Sk, swappable) if sw)
    tier = "accelerator" if oo == "none" else "host_pageable"
    b.add(tier, "master_weights", "fp32_master", ram * M, "persistent",
          f"sum_k S_k x 4 = {ram} x 4" + (" (separate copy even for fp32 models)" if ec.model_dtype == "fp32" else ""),
          f"{S}._create_fp32_partitions")
    for m in moments:
        b.add(tier, "optimizer_states", m, ram * 4, "persistent", f"sum_k S_k x 4 = {ram} x 4",
              _opt_src(basic) + " (state zeros_like(fp32 partition))")
    if files:
        b.add("nvme", "master_weights", "fp32_master", files * M, "persistent",
              f"sum over swappable sub-groups of A_{al}(S_k) x 4", "runtime/swap_tensor/partitioned_optimizer_swapper.py:PartitionedOptimizerSwapper.swap_out_optimizer_state")
        for m in moments:
            b.add("nvme", "optimizer_states", m, files * 4, "persistent",
                  f"sum over swappable sub-groups of A_{al}(S_k) x 4 ({m}-*.tensor.swp)",
                  "runtime/swap_tensor/partitioned_optimizer_swapper.py:PartitionedOptimizerSwapper.swap_out_optimizer_state")
    nsub = len(subs)
    step_b = 4 * nsub if basic in ("AdamW", "Adam") else 0
    b.add("host_pageable", "optimizer_states", "step", step_b, "persistent",
          f"4 B x {nsub} sub-groups" if step_b else "0 (python int)", _opt_src(basic))
    if oo == "none":
        b.add("accelerator", "gradients", "fp32_grad", max(Sk) * 4, "step",
              f"max_k S_k x 4 = {max(Sk)} x 4 (current sub-group only)", f"{S}._prepare_fp32_grad_for_sub_group")
    else:
        b.add(_host(oo_pin), "gradients", "fp32_grad", ram * 4, "persistent",
              f"sum over RAM sub-groups S_k x 4 = {ram} x 4 (one buffer per sub-group)", f"{S}.initialize_optimizer_states")
    if oo == "nvme":
        bc = z.offload_optimizer.buffer_count
        big = _align(max(Sk), al)
        b.add("host_pinned", "workspace", "opt_swap_buffers", bc * big * M, "persistent",
              f"buffer_count x A_{al}(max_k S_k) x 4 = {bc} x {big} x 4 (aio-locked)",
              "runtime/swap_tensor/optimizer_utils.py:OptimizerSwapper.__init__ (SwapBufferManager)")
        # gradient swap files and unswapped tails (optimizer_utils.py:_swap_out_gradients)
        gfiles = tails = 0
        for s, sw in zip(subs, swappable):
            if not sw:
                continue
            for n, p in s:
                ri = max(0, min(p, n - r * p))
                if ri * 4 >= smin:
                    whole = ri // al * al
                    gfiles += whole * 4
                    if whole != ri:
                        tails += ri * 4
                elif ri:
                    tails += ri * 4
        if gfiles:
            b.add("nvme", "gradients", "fp32_grad", gfiles, "persistent",
                  f"per param partition with r_i x 4 >= {smin}: floor(r_i / {al}) x {al} x 4",
                  "runtime/swap_tensor/optimizer_utils.py:OptimizerSwapper._swap_out_gradients")
        b.add("accelerator", "gradients", "opt_unswapped_grad_tails", tails, "backward",
              "r_i x 4 for every partition of a swappable sub-group smaller than the aio size or not aligned "
              "(the fp32 copy stays alive until the step)",
              "runtime/swap_tensor/optimizer_utils.py:OptimizerSwapper._swap_out_gradients")
    if persist_frozen and not aliased:
        b.add("accelerator", "parameters", "frozen_params", persist_frozen * D, "persistent",
              f"persistent frozen params gathered: sum ceil(n_i/W) x W x D = {persist_frozen} x {D}",
              "runtime/zero/parameter_offload.py:mark_persistent_parameters")
    return {"P3": P3, "S": Sk}


def _frozen(b: _Builder, ec: EffectiveConfig, inv: Inventory, W: int) -> None:
    D = DTYPE_BYTES[ec.model_dtype]
    fr = [t for t in inv.tensors if not t.trainable]
    if not fr:
        return
    if ec.zero.stage == 3:
        n = sum(_ceil_div(t.numel, W) for t in fr)
        tier = "accelerator" if ec.offload_param_effective == "none" else "host_pinned"
        b.add(tier, "parameters", "frozen_params", n * D, "persistent",
              f"sum_frozen ceil(n_i / W) x D = {n} x {D} (partitioned, no grads or optimizer state)",
              "runtime/zero/partition_parameters.py:_partition_param")
    else:
        n = sum(t.numel for t in fr)
        b.add("accelerator", "parameters", "frozen_params", n * D, "persistent",
              f"sum_frozen n_i x D = {n} x {D} (no grads or optimizer state)",
              "engine.py:DeepSpeedEngine._configure_distributed_model")


def compute_ledger(plan: Plan) -> Ledger:
    """Per-rank bytes by tier x class x item for ``plan`` (bytes; config sizes are elements).

    Follows the DeepSpeed 0.19.8 code path ``plan.config`` selects (:func:`select_optimizer`):
    stage 0 wrappers, ZeRO-1/2 (``DeepSpeedZeroOptimizer``), ``BF16_Optimizer``, ZeRO-3 with
    offload_optimizer / offload_param none, cpu or nvme. Each :class:`Entry` carries its formula
    and the DeepSpeed file:function it comes from. Raises ValueError when
    :func:`unsupported_reason` says DeepSpeed refuses the combination.
    """
    ec = plan.config
    inv = plan.inventory
    W = plan.cluster.dp_world_size
    why = unsupported_reason(ec, W)
    if why:
        raise ValueError(f"DeepSpeed 0.19.8 rejects this configuration: {why}")
    wrapper, basic = select_optimizer(ec)
    from advisor.effective import derive_batch
    ga = derive_batch(ec, W)[2] or 1
    ranks = []
    for r in range(W):
        b = _Builder(r)
        if not inv.groups():
            pass
        elif ec.zero.stage == 0:
            _stage0(b, ec, inv, wrapper, basic)
        elif ec.zero.stage in (1, 2):
            _zero12(b, ec, inv, W, r, wrapper, basic, ga)
        else:
            _stage3(b, ec, inv, W, r, basic)
        _frozen(b, ec, inv, W)
        ranks.append(RankLedger(r, b.entries))
    excluded = [
        "activations (depend on the model's forward, not on the config)",
        "CUDA context, NCCL workspaces, caching-allocator fragmentation, optimizer-kernel temporaries",
        "ZeRO-3 gathered non-persistent parameters during forward/backward (see the reference section 4.5)",
        "transient copies inside backward (ZeRO-1 full 16-bit grads until the boundary reduce, "
        "reduce-scatter staging) and inside the step (flatten/cast temporaries)",
    ]
    if ec.zero.stage == 1 and ec.grad_dtype == "fp32" and wrapper == "DeepSpeedZeroOptimizer":
        excluded.append("ZeRO-1 grad_accum_dtype fp32 param.grad_accum buffers (reference section 4.2)")
    if not ec.optimizer.is_adam and ec.optimizer.family != "none":
        excluded.append(f"optimizer {ec.optimizer.type!r}: state assumed Adam-like (two fp32 moments)")
    return Ledger(plan=plan, ranks=ranks, wrapper=wrapper, basic_optimizer=basic, excluded=excluded)


def model_state_bytes(rank_ledger: RankLedger, lives: tuple[str, ...] | None = None) -> dict[str, dict[str, int]]:
    """Bytes per item per tier for one rank ({item: {tier: bytes}}), all entries (model state
    and workspace buffers), optionally only those with the given lifetimes."""
    out: dict[str, dict[str, int]] = {}
    for e in rank_ledger.entries:
        if lives is not None and e.life not in lives:
            continue
        d = out.setdefault(e.item, {})
        d[e.tier] = d.get(e.tier, 0) + e.bytes
    return out


def fold_for_cpu(items: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Fold ``accelerator`` and ``host_pageable`` into ``unpinned`` and drop zero tiers, the way
    a measurement on a CPU accelerator sees them (device memory is pageable RAM there)."""
    out: dict[str, dict[str, int]] = {}
    for item, tiers in items.items():
        d: dict[str, int] = {}
        for tier, v in tiers.items():
            t = "unpinned" if tier in ("accelerator", "host_pageable") else tier
            d[t] = d.get(t, 0) + v
        d = {k: v for k, v in d.items() if v}
        if d:
            out[item] = d
    return out
