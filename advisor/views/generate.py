"""Generate: search the DeepSpeed plans that fit a model on a cluster and rank them by step time.

The search space (``enumerate_combos``): ZeRO stage 0-3 x ``offload_optimizer`` none/cpu/nvme x
``offload_param`` none/cpu/nvme, valid combinations only (``offload_param`` exists only in ZeRO-3,
NVMe optimizer swapping only in ZeRO-3: at stages 1/2 DeepSpeed turns ``nvme`` into CPU offload,
reference section 2.2; nothing write-active goes to a storage tier marked read-oriented) x
micro-batch b x gradient accumulation GA with ``global = b x GA x DP`` exactly x activation
checkpointing none/full. Bucket and prefetch sizes scale with the hidden size h as the Hugging Face
DeepSpeed integration sets them (``transformers/integrations/deepspeed.py``
``trainer_config_finalize``): ``reduce_bucket_size = h^2``, ``stage3_prefetch_bucket_size =
int(0.9 h^2)``, ``stage3_param_persistence_threshold = 10 h`` (elements).

Per plan, memory per tier (bytes) is the model states of the worst rank plus the activations of
one micro-batch (:func:`advisor.model.activations.estimate_activations`):

* model states come from :func:`model_states`: the state ledger
  (:func:`advisor.ledger.state.compute_ledger`, every formula with its DeepSpeed source, O(tensors + W)
  per plan through its rank roles), worst role per tier, every lifetime summed (ZeRO-3's gathered
  parameters included), cached per (stage, offload, GA > 1);
* accelerator: per rank, against the accelerator's memory; host: the ranks of one node summed,
  against the node's host memory; NVMe: the node's ranks summed, against the chosen tier;
* every tier keeps ``margin`` (default 10 %) of its capacity free for what the ledger leaves out
  (CUDA context, NCCL buffers, allocator fragmentation, the OS).

Step time (seconds per optimizer step), the ranking key (:func:`step_time`):

* compute = 6 x N_active x T / (peak x MFU) x (1 + recompute fraction), T = global batch x
  sequence length / DP tokens per rank per step (Kaplan et al. 2020, "Scaling Laws for Neural
  Language Models", section 2.1: C ~ 6 N per token for forward + backward), peak = the
  accelerator's dense 16-bit FLOP/s, ``MFU`` = 0.4 (an assumption, named in the output); the
  recompute fraction is the activations estimate's (one extra forward of the layers);
* data movement per link from :mod:`advisor.ledger.movement` (ZeRO paper volumes for collectives, PCIe
  offload copies, NVMe swaps) at the hardware's bandwidths: movements DeepSpeed issues
  synchronously count in full; of the overlapped ones ``OVERLAP_EFFICIENCY`` (0.5, an
  assumption) hides behind compute, at most the compute time; links are summed (no assumption
  that two links hide each other);
* plans within ``tie_tolerance`` (3 %) of the fastest are ties, broken towards the simplest
  (fewest offloads, lowest stage, no recomputation, largest micro-batch): the cost model cannot
  resolve finer differences.

No torch or deepspeed import.
"""

from __future__ import annotations

import json
import math
import os
import posixpath
from dataclasses import dataclass, field, replace
from typing import Any

from advisor.model.activations import ActivationInputs, estimate_activations
from advisor.files import write_atomic  # noqa: F401  (re-exported: callers and tests use it from here)
from advisor.config.effective import DTYPE_BYTES, EffectiveConfig, effective_config
from advisor.errors import AdvisorError
from advisor.model.inventory import Inventory
from advisor.ledger.state import (MIN_AIO_BYTES, Cluster, Ledger, Plan, ceil_div, compute_ledger,
                            zero3_partition_numel)

#: Model FLOPs utilisation assumed for the compute term (named in every output).
MFU = 0.4
#: Fraction of an overlapped transfer that actually hides behind compute. DeepSpeed issues
#: these collectives and copies on side streams of the same GPU, where they contend with the
#: compute kernels for SMs and memory bandwidth, and the first fetch of a pass has nothing to
#: hide behind; perfect overlap (1.0) would make ZeRO-3's 1.5x collective volume look free.
OVERLAP_EFFICIENCY = 0.5
#: Stage-3 knobs written explicitly (DeepSpeed's defaults; elements).
MAX_LIVE = 1_000_000_000
MAX_REUSE = 1_000_000_000
SUB_GROUP_DEFAULT = 1_000_000_000
PARAM_BUFFER_COUNT = 5
PARAM_BUFFER_SIZE = 100_000_000
PARAM_MAX_IN_CPU = 1_000_000_000
OPT_BUFFER_COUNT = 4
OFFLOAD_DIR = "deepspeed_offload"

OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam"}
PRECISIONS = ("bf16", "fp16", "fp32")
REPORT_TIERS = ("accelerator", "host", "nvme")


class NothingFits(AdvisorError):
    """No plan fits; ``suggestions`` says what would."""

    exit_code = 1

    def __init__(self, message: str, result: "SearchResult"):
        super().__init__(message)
        self.result = result


# ---------------------------------------------------------------------------------------------
# inputs


@dataclass(frozen=True)
class Request:
    """What the user asks for. Sizes in elements/tokens; ``margin`` a fraction of capacity."""

    global_batch: int
    seq_len: int
    nodes: int
    gpus_per_node: int
    margin: float = 0.10
    optimizer: str = "adamw"
    precision: str = "bf16"
    hf: bool = False
    mfu: float = MFU
    overlap_efficiency: float = OVERLAP_EFFICIENCY
    #: Step times within this fraction of the fastest are ties, broken by simplicity.
    tie_tolerance: float = 0.03

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


def parse_margin(text: str | float) -> float:
    """"10%" / "0.1" / 0.1 -> 0.1 (fraction of each tier's capacity kept free)."""
    s = str(text).strip()
    try:
        v = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise ValueError(f"--margin: not a fraction or percentage: {text!r} (e.g. 10% or 0.1)")
    if not 0 <= v < 1:
        raise ValueError(f"--margin must be in [0%, 100%), got {text!r}")
    return v


# ---------------------------------------------------------------------------------------------
# combos and configs


@dataclass(frozen=True)
class Combo:
    """ZeRO stage and where optimizer state and parameters live."""

    stage: int
    offload_optimizer: str = "none"
    offload_param: str = "none"

    def label(self) -> str:
        parts = []
        if self.offload_optimizer != "none":
            parts.append(f"opt->{self.offload_optimizer}")
        if self.offload_param != "none":
            parts.append(f"param->{self.offload_param}")
        return "+".join(parts) or "none"


def enumerate_combos(nvme_ok: bool = True) -> list[Combo]:
    """Valid (stage, offload_optimizer, offload_param) triples: stage 0 never offloads
    (DeepSpeed ignores offload_optimizer there); stages 1/2 offload the optimizer to CPU only
    (``nvme`` there is CPU offload, reference 2.2) and never parameters; stage 3 takes every
    combination. ``nvme_ok`` False drops every NVMe placement (no read-write storage tier)."""
    out = [Combo(0), Combo(1), Combo(1, "cpu"), Combo(2), Combo(2, "cpu")]
    for oo in ("none", "cpu", "nvme"):
        for op in ("none", "cpu", "nvme"):
            if not nvme_ok and "nvme" in (oo, op):
                continue
            out.append(Combo(3, oo, op))
    return out


def divisors(n: int) -> list[int]:
    """Positive divisors of n, ascending."""
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def hidden_sizes(h: int) -> dict[str, int]:
    """HF integration's hidden-size based values (elements): ``reduce_bucket_size = h^2``,
    ``stage3_prefetch_bucket_size = int(0.9 h^2)``, ``stage3_param_persistence_threshold = 10 h``
    (``transformers/integrations/deepspeed.py`` ``trainer_config_finalize``)."""
    return {"reduce_bucket_size": h * h, "stage3_prefetch_bucket_size": int(0.9 * h * h),
            "stage3_param_persistence_threshold": 10 * h}


def sub_group_size_for(inv: Inventory, w: int, combo: Combo) -> int:
    """``sub_group_size`` (elements). With NVMe optimizer swap the pinned pool holds
    ``buffer_count`` buffers of the largest sub-group (reference 5.2), so the sub-group is
    sized to an eighth of the rank's partition P3 (two significant digits, at least the 1 MiB
    swap threshold / 4 B); otherwise DeepSpeed's default 1e9."""
    if combo.offload_optimizer != "nvme":
        return SUB_GROUP_DEFAULT
    p3 = sum(zero3_partition_numel(t.numel, w) for t in inv.tensors if t.trainable)
    target = max(MIN_AIO_BYTES // 4, p3 // 8)
    digits = len(str(target)) - 2
    target = (target // 10 ** digits) * 10 ** digits if digits > 0 else target
    return min(SUB_GROUP_DEFAULT, target)


def param_buffer_size_for(inv: Inventory, w: int, dtype_bytes: int) -> int:
    """``offload_param.buffer_size`` (elements): at least the largest ZeRO-3 partition p_i that
    goes to NVMe (rule M001), DeepSpeed's 1e8 otherwise; rounded up to a multiple of 1e6."""
    largest = max((zero3_partition_numel(t.numel, w) for t in inv.tensors), default=0)
    need = max(PARAM_BUFFER_SIZE, largest)
    return ceil_div(need, 1_000_000) * 1_000_000


def build_config(combo: Combo, micro: int, ga: int, dp: int, checkpointing: str, inv: Inventory,
                 req: Request, nvme_path: str | None, hf: bool = False) -> dict[str, Any]:
    """The DeepSpeed config dict of one plan (``hf``: "auto" where the HF Trainer fills values in:
    batch sizes, gradient_clipping, optimizer params, precision ``enabled``, and the three
    hidden-size based zero keys)."""
    h = int(inv.meta["hidden_size"])
    A = "auto"
    hs = hidden_sizes(h)
    cfg: dict[str, Any] = {
        "train_batch_size": A if hf else micro * ga * dp,
        "train_micro_batch_size_per_gpu": A if hf else micro,
        "gradient_accumulation_steps": A if hf else ga,
        "gradient_clipping": A if hf else 1.0,
    }
    if req.precision in ("bf16", "fp16"):
        cfg[req.precision] = {"enabled": A if hf else True}
    opt_params = ({"lr": A, "betas": A, "eps": A, "weight_decay": A} if hf else
                  {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01})
    cfg["optimizer"] = {"type": OPTIMIZERS[req.optimizer], "params": opt_params}
    z: dict[str, Any] = {"stage": combo.stage}
    if combo.stage >= 1:
        z["overlap_comm"] = True
        z["contiguous_gradients"] = True
        z["reduce_bucket_size"] = A if hf else hs["reduce_bucket_size"]
    if combo.stage in (1, 2) and combo.offload_optimizer == "cpu":
        z["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if combo.stage == 3:
        z["stage3_prefetch_bucket_size"] = A if hf else hs["stage3_prefetch_bucket_size"]
        z["stage3_param_persistence_threshold"] = A if hf else hs["stage3_param_persistence_threshold"]
        z["stage3_max_live_parameters"] = MAX_LIVE
        z["stage3_max_reuse_distance"] = MAX_REUSE
        z["sub_group_size"] = sub_group_size_for(inv, dp, combo)
        z["stage3_gather_16bit_weights_on_model_save"] = True
        if combo.offload_optimizer != "none":
            oo: dict[str, Any] = {"device": combo.offload_optimizer, "pin_memory": True}
            if combo.offload_optimizer == "nvme":
                oo.update(nvme_path=nvme_path, buffer_count=OPT_BUFFER_COUNT)
            z["offload_optimizer"] = oo
        if combo.offload_param != "none":
            op: dict[str, Any] = {"device": combo.offload_param, "pin_memory": True}
            if combo.offload_param == "nvme":
                op.update(nvme_path=nvme_path, buffer_count=PARAM_BUFFER_COUNT,
                          buffer_size=param_buffer_size_for(inv, dp, DTYPE_BYTES[req.precision]),
                          max_in_cpu=PARAM_MAX_IN_CPU)
            z["offload_param"] = op
    cfg["zero_optimization"] = z
    if checkpointing == "full":
        cfg["activation_checkpointing"] = {"partition_activations": False, "cpu_checkpointing": False,
                                           "contiguous_memory_optimization": False,
                                           "synchronize_checkpoint_boundary": False}
    cfg["steps_per_print"] = 100
    cfg["wall_clock_breakdown"] = False
    return cfg


# ---------------------------------------------------------------------------------------------
# model states, closed form (per worst rank)


@dataclass
class States:
    """Worst-rank model-state bytes per ledger tier, with the items (tier, item, bytes)."""

    accelerator: int = 0
    host_pinned: int = 0
    host_pageable: int = 0
    nvme: int = 0
    items: list[tuple[str, str, int]] = field(default_factory=list)
    source: str = "closed form (reference sections 3-5)"

    def add(self, tier: str, item: str, nbytes: int) -> None:
        if nbytes:
            setattr(self, tier, getattr(self, tier) + int(nbytes))
            self.items.append((tier, item, int(nbytes)))

    @property
    def host(self) -> int:
        return self.host_pinned + self.host_pageable


def _worst_role_entries(led: Ledger, tier: str) -> list[tuple[str, str, int]]:
    """(tier, item, bytes) of the role with the most bytes on ``tier`` (every lifetime)."""
    if not led.ranks:
        return []
    worst = max(led.ranks, key=lambda rl: rl.total(tier))
    return [(e.tier, e.item, e.bytes) for e in worst.entries if e.tier == tier and e.bytes]


#: Transients inside backward the ledger lists under ``excluded`` (not measured by its parity
#: harness) that the search still budgets for, with their reference rows: ZeRO-1's full 16-bit
#: ``param.grad`` until the boundary reduction (reference section 4.2 table, N x D,
#: ``stage_1_and_2.py`` reduce_gradients) and stage 0's all-reduce bucket (min(N, 5e8) x G,
#: ``engine.py`` allreduce_gradients, bucket 5e8 elements).
LEDGER_EXCLUDED = ("lp_grads", "allreduce_bucket")


def model_states(ec: EffectiveConfig, inv: Inventory, w: int) -> States:
    """Worst-rank model-state bytes by tier, every lifetime summed (persistent, backward, step and
    forward/backward transients such as ZeRO-3's gathered parameters), from
    :func:`advisor.ledger.state.compute_ledger` on ``w`` data-parallel ranks: per tier the role with the
    most bytes there (its rank lists come from the ledger's O(tensors + W) role grouping). Adds the
    two backward transients the ledger leaves out (``LEDGER_EXCLUDED``). Raises ValueError for a
    configuration DeepSpeed refuses."""
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=w)))
    s = States(source="ledger (advisor.ledger.state.compute_ledger, worst role per tier)")
    for tier in ("accelerator", "host_pinned", "host_pageable", "nvme"):
        for t, item, nbytes in _worst_role_entries(led, tier):
            s.add(t, item, nbytes)
    N = inv.trainable_numel
    if ec.zero.stage == 1 and led.wrapper != "BF16_Optimizer":
        s.add("accelerator", "lp_grads", N * DTYPE_BYTES[ec.model_dtype])
    if ec.zero.stage == 0:
        s.add("accelerator", "allreduce_bucket", min(N, 500_000_000) * DTYPE_BYTES[ec.grad_dtype])
    return s


# ---------------------------------------------------------------------------------------------
# the search


@dataclass
class Rejection:
    """Why a plan does not fit: the tier, what it needs and what may be used (bytes)."""

    tier: str
    need: int
    usable: int | None
    scope: str

    @property
    def over(self) -> int | None:
        return None if self.usable is None else self.need - self.usable

    def describe(self) -> str:
        if self.usable is None:
            return f"{self.tier} {self.scope}: needs {self.need / 1e9:,.1f} GB, capacity unknown"
        return (f"{self.tier} {self.scope}: needs {self.need / 1e9:,.1f} GB, {self.usable / 1e9:,.1f} GB usable, "
                f"over by {self.over / 1e9:,.1f} GB")


@dataclass
class Candidate:
    """One plan: its choices, memory per report tier, step time and its parts (seconds)."""

    combo: Combo
    micro: int
    ga: int
    checkpointing: str
    accelerator: int
    host: int
    nvme: int
    activations: int
    states_source: str
    step_time_s: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)
    why: str = ""
    rejection: Rejection | None = None
    config: dict[str, Any] | None = None

    def row(self) -> dict[str, Any]:
        return {"stage": self.combo.stage, "offload_optimizer": self.combo.offload_optimizer,
                "offload_param": self.combo.offload_param, "micro_batch": self.micro,
                "gradient_accumulation": self.ga, "checkpointing": self.checkpointing,
                "accelerator_bytes_per_rank": self.accelerator, "host_bytes_per_node": self.host,
                "nvme_bytes_per_node": self.nvme, "activation_bytes_per_rank": self.activations,
                "step_time_s": self.step_time_s, "parts_seconds": self.parts, "why": self.why,
                "states_source": self.states_source}


@dataclass
class SearchResult:
    request: Request
    hardware: Any
    inventory: Inventory
    ranked: list[Candidate]
    rejected: list[Candidate]
    nvme_path: str | None
    notes: list[str] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    evaluated: int = 0

    @property
    def best(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    def assumptions(self) -> dict[str, Any]:
        acc = self.hardware.accelerator
        return {
            "mfu": self.request.mfu,
            "compute": "6 x active parameters x tokens per rank per step / (dense peak FLOP/s x MFU), "
                       "x (1 + recompute fraction) with checkpointing",
            "peak_flops": _peak(self.hardware, self.request.precision),
            "margin": self.request.margin,
            "overlap": (f"synchronous movements count in full; overlapped ones hide "
                        f"{self.request.overlap_efficiency:.0%} of their time behind compute, at most the compute time"),
            "activations": "flash attention, dropout off (advisor.model.activations)",
            "nvme_path": self.nvme_path,
            "accelerator": acc.name if acc else None,
            "excluded": "CUDA context, NCCL buffers, allocator fragmentation: covered by the margin; "
                        "CPU optimizer step time not modelled",
            "tie_tolerance": self.request.tie_tolerance,
        }


def _peak(hw: Any, precision: str) -> float | None:
    a = hw.accelerator
    if a is None:
        return None
    if precision == "fp16":
        return a.peak_fp16_flops or a.peak_bf16_flops
    if precision == "bf16":
        return a.peak_bf16_flops
    return (a.peak_bf16_flops or 0) / 2 or None  # fp32 trains on TF32 at half the 16-bit peak (assumption)


def choose_nvme_tier(hardware: Any):
    """The storage tier for write-active swap files: read-write tiers only (never a
    read-oriented one), the fastest writer first, then the largest. None when there is none."""
    rw = [t for t in getattr(hardware, "storage", ()) if not t.read_oriented]
    if not rw:
        return None
    return max(rw, key=lambda t: (t.write_bytes_per_s, t.capacity_bytes))


def _nvme_path(tier: Any) -> str | None:
    if tier is None:
        return None
    mount = tier.mounts[0]
    return posixpath.join(mount, OFFLOAD_DIR)


def step_time(plan: Plan, hardware: Any, req: Request, recompute_fraction: float) -> dict[str, float]:
    """Seconds per optimizer step by part: compute (see the module docstring), then per link
    (network, pcie, nvme) the exposed movement time from :mod:`advisor.ledger.movement` for rank 0 (ranks
    move equal volumes up to padding): synchronous movements + overlapped ones - min(overlapped x
    ``overlap_efficiency``, compute). ``total`` = compute + every link's exposed time. Unknown bandwidths count as 0 and
    are listed under ``unknown``."""
    from advisor.ledger import movement as traffic

    inv = plan.inventory
    dp = plan.cluster.dp_world_size
    n_active = int(inv.meta.get("active_params") or inv.numel)
    tokens = req.global_batch * req.seq_len / dp
    peak = _peak(hardware, req.precision) or 1e12
    compute = 6 * n_active * tokens / (peak * req.mfu) * (1 + recompute_fraction)
    moves = traffic._rank_movements(plan, 0)
    moves = traffic.timed(moves, hardware, ranks_per_node=req.gpus_per_node, world_size=dp)
    out: dict[str, float] = {"compute": compute}
    unknown = 0.0
    for link in ("network", "pcie", "nvme"):
        sync = over = 0.0
        for m in moves:
            if m.link != link:
                continue
            if m.seconds is None:
                unknown += 1
                continue
            if m.overlap:
                over += m.seconds
            else:
                sync += m.seconds
        hidden = min(over * req.overlap_efficiency, compute)
        out[link] = sync + over - hidden
    out["total"] = compute + out["network"] + out["pcie"] + out["nvme"]
    if unknown:
        out["unknown"] = unknown
    return out


def _capacities(hw: Any, tier: Any, margin: float) -> dict[str, int | None]:
    keep = 1 - margin
    a = hw.accelerator
    return {"accelerator": int(a.memory_bytes * keep) if a else None,
            "host": int(hw.host_memory_bytes * keep) if hw.host_memory_bytes else None,
            "nvme": int(tier.capacity_bytes * keep) if tier else None}


def _fit(c: Candidate, caps: dict[str, int | None], g: int) -> Rejection | None:
    for tier, need, scope in (("accelerator", c.accelerator, "per rank"), ("host", c.host, f"per node ({g} ranks)"),
                              ("nvme", c.nvme, f"per node ({g} ranks)")):
        cap = caps[tier]
        if need and (cap is None or need > cap):
            return Rejection(tier, need, cap, scope)
    return None


def search(inv: Inventory, hardware: Any, req: Request, top: int = 5, verify: bool = True) -> SearchResult:
    """Enumerate, fit and rank (see the module docstring). ``verify`` is kept for callers and has
    no effect: the states are the ledger's already. ``hardware``: an
    :class:`advisor.cluster.hardware.Hardware` whose shape is the request's (``nodes`` x
    ``gpus_per_node``). Raises AdvisorError for requests no plan can express (global batch not a
    multiple of DP, a model without architecture facts). The result's ``ranked`` is best first."""
    meta = inv.meta or {}
    for k in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "vocab_size"):
        if k not in meta:
            raise AdvisorError(f"model {inv.name}: generate needs the architecture ({k} missing): give a preset "
                               "or a Hugging Face config.json, not a bare parameter count")
    dp = req.world_size
    if req.global_batch % dp:
        lo = (req.global_batch // dp) * dp
        raise AdvisorError(f"--global-batch {req.global_batch} is not a multiple of the data-parallel size {dp} "
                           f"(= {req.nodes} nodes x {req.gpus_per_node} GPUs): use {lo or dp} or {lo + dp}")
    per_rank = req.global_batch // dp
    tier = choose_nvme_tier(hardware)
    nvme_path = _nvme_path(tier)
    caps = _capacities(hardware, tier, req.margin)
    D = DTYPE_BYTES[req.precision]
    notes: list[str] = []
    if tier is None:
        ro = [t.name for t in getattr(hardware, "storage", ()) if t.read_oriented]
        notes.append("no read-write storage tier: NVMe offload not considered"
                     + (f" (read-oriented: {', '.join(ro)}; never used for write-active state)" if ro else ""))
    if caps["host"] is None:
        notes.append("host memory unknown (hardware spec without host_memory_bytes): host offload not considered")
    combos = [c for c in enumerate_combos(nvme_ok=tier is not None)
              if caps["host"] is not None or (c.offload_optimizer == "none" and c.offload_param == "none")]
    act_cache: dict[tuple[int, str], Any] = {}

    def acts(b: int, ck: str):
        key = (b, ck)
        if key not in act_cache:
            act_cache[key] = estimate_activations(meta, ActivationInputs(seq_len=req.seq_len, micro_batch=b,
                                                                         dtype_bytes=D, checkpointing=ck))
        return act_cache[key]

    cluster = Cluster(world_size=dp, gpus_per_node=req.gpus_per_node)
    ranked: list[Candidate] = []
    rejected: list[Candidate] = []
    evaluated = 0
    micros = divisors(per_rank)
    for combo in combos:
        # states depend on GA only through ZeRO-1/2 offload's host accumulation buffers: two cases
        state_cache: dict[bool, States] = {}
        for ck in ("none", "full"):
            fitting: list[Candidate] = []
            for b in reversed(micros):  # largest micro-batch first: memory falls with b
                ga = per_rank // b
                evaluated += 1
                key = ga > 1
                if key not in state_cache:
                    ec0 = effective_config(build_config(combo, b, ga, dp, ck, inv, req, nvme_path))
                    state_cache[key] = model_states(ec0, inv, dp)
                stt = state_cache[key]
                a = acts(b, ck)
                g = req.gpus_per_node
                cand = Candidate(combo, b, ga, ck, accelerator=stt.accelerator + a.peak_accelerator,
                                 host=(stt.host + a.saved_host) * g, nvme=stt.nvme * g, activations=a.peak_accelerator,
                                 states_source=stt.source)
                rej = _fit(cand, caps, g)
                if rej is not None:
                    cand.rejection = rej
                    rejected.append(cand)
                    continue
                fitting.append(cand)
            for cand in fitting:
                cand.config = build_config(combo, cand.micro, cand.ga, dp, ck, inv, req, nvme_path)
                plan = Plan(effective_config(cand.config), inv, cluster)
                parts = step_time(plan, hardware, req, acts(cand.micro, ck).recompute_flops_fraction)
                cand.step_time_s = parts.pop("total")
                cand.parts = parts
                ranked.append(cand)
    ranked = rank(ranked, req.tie_tolerance)
    result = SearchResult(req, hardware, inv, ranked, rejected, nvme_path, notes, evaluated=evaluated)
    _explain_ranks(result)
    if req.hf and ranked:
        for c in ranked[:top]:
            c.config = build_config(c.combo, c.micro, c.ga, dp, c.checkpointing, inv, req, nvme_path, hf=True)
    return result


def simplicity(c: Candidate) -> tuple:
    """Tie-break key, simplest first: fewer offloads (the CPU optimizer step is not in the cost
    model), lower ZeRO stage (fewer collectives and hooks), no recomputation, larger micro-batch."""
    offloads = (c.combo.offload_optimizer != "none") + (c.combo.offload_param != "none")
    return (offloads, c.combo.stage, c.checkpointing != "none", -c.micro)


def rank(cands: list[Candidate], tolerance: float = 0.03) -> list[Candidate]:
    """Best first. Plans within ``tolerance`` (a fraction, default 3 %) of the fastest step time
    are a tie (finer differences are below the cost model's resolution: MFU alone is an
    assumption) and go first, simplest first (:func:`simplicity`); the rest follow by step time."""
    if not cands:
        return []
    fastest = min(c.step_time_s for c in cands)
    tied = sorted((c for c in cands if c.step_time_s <= fastest * (1 + tolerance)), key=simplicity)
    rest = sorted((c for c in cands if c.step_time_s > fastest * (1 + tolerance)), key=lambda c: (c.step_time_s, simplicity(c)))
    return tied + rest


def _explain_ranks(res: SearchResult) -> None:
    """Fill each ranked plan's ``why``: the best names what bounds it; the others name the part
    of the step that costs them most against the best, or, in a tie, what makes them less simple."""
    if not res.ranked:
        return
    best = res.ranked[0]
    names = {"compute": "compute", "network": "collectives", "pcie": "PCIe offload", "nvme": "NVMe swap"}
    tol = res.request.tie_tolerance
    fastest = min(c.step_time_s for c in res.ranked)
    bound = max(("compute", "network", "pcie", "nvme"), key=lambda k: best.parts.get(k, 0))
    best.why = (f"{'fastest' if best.step_time_s == fastest else f'within {tol:.0%} of the fastest and simplest'}; "
                f"{names[bound]} {best.parts.get(bound, 0):,.2f} s of {best.step_time_s:,.2f} s")
    for c in res.ranked[1:]:
        if c.step_time_s <= fastest * (1 + tol):
            a, b = simplicity(c), simplicity(best)
            if a[0] > b[0]:
                c.why = "tie; offloads more (CPU optimizer step not modelled)"
            elif a[1] > b[1]:
                c.why = f"tie; shards more (ZeRO-{c.combo.stage})"
            elif a[2] > b[2]:
                c.why = "tie; recomputes (checkpointing)"
            else:
                c.why = f"tie; smaller micro-batch ({c.micro})"
            continue
        deltas = {k: c.parts.get(k, 0) - best.parts.get(k, 0) for k in names}
        k = max(deltas, key=lambda x: deltas[x])
        if k == "compute" and c.checkpointing == "full":
            c.why = f"+{deltas[k]:,.2f} s recomputation (checkpointing)"
        elif k == "network" and c.ga > best.ga and c.combo.stage >= 2:
            c.why = f"+{deltas[k]:,.2f} s collectives (GA {c.ga}: a reduction per micro-step)"
        else:
            c.why = f"+{deltas[k]:,.2f} s {names[k]}"


# ---------------------------------------------------------------------------------------------
# nothing fits: the smallest change that would


def suggest(inv: Inventory, hardware: Any, req: Request) -> list[str]:
    """When nothing fits: (1) the fewest nodes (same GPUs per node, same global batch, so the
    batch must split evenly) up to 64x the request; (2) a read-write NVMe tier of the size the
    best NVMe plan needs per node, when the hardware has none; (3) the longest sequence length
    (a multiple of 128, or any length below 128) that fits. Each with numbers."""
    out: list[str] = []
    g = req.gpus_per_node
    for n in range(req.nodes + 1, req.nodes * 64 + 1):
        if req.global_batch % (n * g):
            continue
        r2 = replace(req, nodes=n)
        res = search(inv, replace(hardware, nodes=n), r2, top=1, verify=False)
        if res.best:
            b = res.best
            out.append(f"more GPUs: {n} nodes x {g} GPUs ({n * g} ranks, +{(n - req.nodes) * g}) fit with ZeRO-"
                       f"{b.combo.stage} {b.combo.label()}, micro-batch {b.micro} x GA {b.ga}, "
                       f"checkpointing {b.checkpointing}: {b.accelerator / 1e9:,.1f} GB per GPU")
            break
    if choose_nvme_tier(hardware) is None and hardware.host_memory_bytes:
        from advisor.cluster.hardware import StorageTier
        big = StorageTier(name="hypothetical-nvme", mounts=("/local_nvme",), capacity_bytes=10 ** 18,
                          read_bytes_per_s=7e9, write_bytes_per_s=3.8e9, access="read-write")
        res = search(inv, replace(hardware, storage=tuple(hardware.storage) + (big,)), req, top=1, verify=False)
        if res.best:
            b = res.best
            need = b.nvme / (1 - req.margin)
            out.append(f"an NVMe tier: a read-write drive of at least {need / 1e12:,.2f} TB per node (mounted e.g. at "
                       f"/local_nvme) fits with ZeRO-3 {b.combo.label()}, micro-batch {b.micro} x GA {b.ga}, "
                       f"checkpointing {b.checkpointing} ({b.nvme / 1e12:,.2f} TB of swap files per node)")
    lo, hi, best_s = 1, req.seq_len - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        res = search(inv, hardware, replace(req, seq_len=mid), top=1, verify=False)
        if res.best:
            best_s, lo = mid, mid + 1
        else:
            hi = mid - 1
    if best_s:
        s = best_s if best_s < 128 else best_s // 128 * 128
        out.append(f"shorter sequence: --seq-len {s} (from {req.seq_len}) fits")
    if not out:
        out.append("no single change up to 64x the nodes, an NVMe tier or a shorter sequence fits: "
                   "use tensor/pipeline parallelism or a smaller model")
    return out


def run(inv: Inventory, hardware: Any, req: Request, top: int = 5) -> SearchResult:
    """:func:`search`, plus :func:`suggest` when nothing fits (then raises :class:`NothingFits`)."""
    res = search(inv, hardware, req, top=top)
    if res.best is None:
        res.suggestions = suggest(inv, hardware, req)
        raise NothingFits("no plan fits " + f"{inv.name} on {req.nodes} x {req.gpus_per_node} "
                          f"{hardware.accelerator.name if hardware.accelerator else 'accelerators'}", res)
    return res


# ---------------------------------------------------------------------------------------------
# output


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f}" if n else "-"


def table_text(res: SearchResult, top: int = 5) -> str:
    """The top plans as a fixed-width table (GB = 1e9 bytes; host and NVMe per node)."""
    req = res.request
    acc = res.hardware.accelerator
    head = (f"{res.inventory.name} on {req.nodes} node(s) x {req.gpus_per_node} {acc.name if acc else '?'}; "
            f"global batch {req.global_batch}, sequence {req.seq_len}, {req.precision}, "
            f"margin {req.margin:.0%}; {res.evaluated} plans evaluated, {len(res.ranked)} fit")
    lines = [head]
    cols = ("#", "stage", "offload", "micro", "GA", "ckpt", "accel GB/rank", "host GB/node", "nvme GB/node",
            "step s", "why")
    rows = []
    for i, c in enumerate(res.ranked[:top], 1):
        rows.append((str(i), str(c.combo.stage), c.combo.label(), str(c.micro), str(c.ga), c.checkpointing,
                     _gb(c.accelerator), _gb(c.host), _gb(c.nvme), f"{c.step_time_s:,.2f}", c.why))
    if rows:
        w = [max(len(cols[j]), *(len(r[j]) for r in rows)) for j in range(len(cols))]
        lines.append("  ".join(cols[j].ljust(w[j]) for j in range(len(cols))).rstrip())
        for r in rows:
            lines.append("  ".join(r[j].ljust(w[j]) for j in range(len(cols))).rstrip())
    by_tier: dict[str, int] = {}
    for c in res.rejected:
        by_tier[c.rejection.tier] = by_tier.get(c.rejection.tier, 0) + 1
    if res.rejected:
        closest = min(res.rejected, key=lambda c: (c.rejection.over or 0) / max(1, c.rejection.usable or 1))
        lines.append(f"rejected: {len(res.rejected)} ("
                     + ", ".join(f"{n} on {t}" for t, n in sorted(by_tier.items()))
                     + f"); closest: ZeRO-{closest.combo.stage} {closest.combo.label()} micro {closest.micro} "
                       f"ckpt {closest.checkpointing}: {closest.rejection.describe()}")
    a = res.assumptions()
    lines.append(f"assumptions: MFU {a['mfu']}, peak {(a['peak_flops'] or 0) / 1e12:,.1f} TFLOP/s dense; "
                 f"{a['overlap']}; {a['activations']}; {a['excluded']}")
    for n in res.notes:
        lines.append(f"note: {n}")
    b = res.best
    if b is not None:
        if b.checkpointing == "full":
            lines.append("note: the best plan needs activation checkpointing in the model "
                         "(HF: gradient_checkpointing=True; Megatron-style: deepspeed.checkpointing)")
        if req.hf:
            lines.append(f"HF Trainer: per_device_train_batch_size={b.micro}, gradient_accumulation_steps={b.ga}"
                         + (f", {req.precision}=True" if req.precision != "fp32" else "")
                         + (", gradient_checkpointing=True" if b.checkpointing == "full" else ""))
        lines.append("optimizer params are torch.optim.AdamW's defaults: set your own learning rate"
                     if not req.hf else "optimizer params come from the Trainer (\"auto\")")
    for s in res.suggestions:
        lines.append(f"suggestion: {s}")
    return "\n".join(lines)


def result_json(res: SearchResult, top: int = 5) -> dict[str, Any]:
    """Machine-readable result: request, assumptions, the top plans with their configs, the
    rejections by tier, suggestions."""
    req = res.request
    return {
        "schema_version": 1,
        "model": {"name": res.inventory.name, "parameters": res.inventory.numel},
        "request": {"nodes": req.nodes, "gpus_per_node": req.gpus_per_node, "global_batch": req.global_batch,
                    "seq_len": req.seq_len, "precision": req.precision, "optimizer": req.optimizer,
                    "margin": req.margin, "hf": req.hf},
        "assumptions": res.assumptions(),
        "evaluated": res.evaluated,
        "plans": [dict(c.row(), config=c.config) for c in res.ranked[:top]],
        "fitting": len(res.ranked),
        "rejected": [{"stage": c.combo.stage, "offload_optimizer": c.combo.offload_optimizer,
                      "offload_param": c.combo.offload_param, "micro_batch": c.micro, "checkpointing": c.checkpointing,
                      "tier": c.rejection.tier, "need": c.rejection.need, "usable": c.rejection.usable,
                      "over": c.rejection.over} for c in res.rejected],
        "notes": res.notes,
        "suggestions": res.suggestions,
        "best": res.best.config if res.best else None,
    }


def config_text(cfg: dict[str, Any]) -> str:
    return json.dumps(cfg, indent=2) + "\n"


