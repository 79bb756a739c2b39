"""Generate: search the DeepSpeed plans that fit a model on a cluster and rank them by step time.

The search space (``enumerate_combos``): ZeRO stage 0-3 x ``offload_optimizer`` none/cpu/nvme x
``offload_param`` none/cpu/nvme, valid combinations only (``offload_param`` exists only in ZeRO-3,
NVMe optimizer swapping only in ZeRO-3: at stages 1/2 DeepSpeed turns ``nvme`` into CPU offload,
reference section 2.2; nothing write-active goes to a storage tier marked read-oriented) x
micro-batch b x gradient accumulation GA with ``global = b x GA x DP`` exactly x activation
checkpointing: per (stage, offload, b) the recompute setting with the least extra FLOPs that fits
(:func:`cheapest_recompute`): none if it fits, else the cheaper of selective (attention core) and
the fewest checkpointed layers k of L that fit (binary search: memory falls as k grows), full
when no k < L fits; the HF Trainer (``--hf``) checkpoints every layer or none (``gradient_checkpointing``), so
there only none and full. Bucket and prefetch sizes scale with the hidden size h as the Hugging Face
DeepSpeed integration sets them (``transformers/integrations/deepspeed.py``
``trainer_config_finalize``): ``reduce_bucket_size = h^2``, ``stage3_prefetch_bucket_size =
int(0.9 h^2)``, ``stage3_param_persistence_threshold = 10 h`` (elements).

Micro-batches (:func:`micro_batch_representatives`): within a gradient-accumulation range (GA 1, 2,
>= 3) memory grows with b at a fixed recompute setting, so the micro-batches that choose one setting
are a run of consecutive divisors (a piece), found by bisection; only the piece's fastest plan is
ranked (its largest b; under pipeline parallelism, whose 1F1B bubble grows with b, its smallest), so
O(pieces x log divisors) recompute choices are made, not one per divisor of the sequences per rank
(``MICRO_BATCH_SEARCH`` "exhaustive" keeps that one as the reference the tests compare).

Pruning (none changes which plan ranks first): tensor x pipeline layouts are tried by their step-time
lower bound and skipped when it cannot beat the best plan found (:func:`layout_lower_bound`); a
stage/offload combo whose first plan does not fit is probed with its least-memory plan (smallest
micro-batch, full recompute) and skipped when that does not fit either.

Per plan, the fit is estimate's own (:func:`advisor.views.estimate.plan_fit`): the config is built,
the ledger, activations and step timeline computed, and the fit rows judged against the
hardware's capacities (accelerator per rank: the timeline peak plus the runtime overhead rows,
CUDA context, NCCL buffers, allocator reserve, DeepSpeed extras, advisor/cluster/overhead.py;
host and NVMe: one node's ranks summed, the load phase included). Only plans whose verdict is
"fits" are ranked ("tight" ones, those whose accelerator peak is a lower bound (rule M104) among them,
are rejected and say so), so a plan generate writes is one
``estimate`` says fits for the same model, hardware and workload sidecar -- except for a model whose
activations have no formula (:func:`advisor.views.estimate.activations_gap`: DeepSeek-V3's multi-head
latent attention, ``models --types``). Its plans leave out the activations, so each accelerator need is a
lower bound (rule M104: estimate and check say at best "tight"); the search then fixes what it can to the
least exposure to that unknown -- micro-batch 1 and every layer checkpointed (activations grow with
micro-batch x sequence, and full recompute keeps only each layer's input) -- unless ``--micro-batch`` /
``--checkpointing`` fix them, prints every such need as ">=" (JSON: ``accelerator_lower_bound``,
``assumptions.peak_lower_bound``) and warns once with the command that measures them
(:func:`activations_warning`).

Step time (seconds per optimizer step), the ranking key (:func:`step_time`): the one step-time
model, :mod:`advisor.ledger.steptime` (compute at (6 x N_active + the attention scores' 12 L H Q s)
x tokens / (peak x MFU) plus recomputation, ring collectives, PCIe copies and NVMe swaps from the movement ledger, the CPU
optimizer step over the node's host memory bandwidth, and DeepSpeed's overlap: the step is the
critical path, each plan's output names the resource that costs it most);

* plans within ``tie_tolerance`` (3 %) of the fastest are ties, won by the simplest
  (no model parallelism, fewest offloads, least recomputation, lowest stage, then the faster plan:
  :func:`simplicity`): the cost model cannot resolve finer differences. That plan is first (the
  config written); every other plan follows by step time (equal times simplest first), each
  saying what its step spends against the first: every part's exposed seconds more or less, its
  CPU optimizer step with the bytes per rank and the rate per rank it assumes, the recompute it
  adds or saves, and, for a faster plan inside the tie, by how much and what made it less simple.
  Differences under :func:`time_resolution` (0.5% of the best step, at least 10 us) are not named: such a
  plan is "as fast as #1" (the ranking itself uses only the tie tolerance).

No torch or deepspeed import.
"""

from __future__ import annotations

import functools
import json
import math
import os
import posixpath
from dataclasses import dataclass, field, replace
from typing import Any

from advisor.files import write_atomic  # noqa: F401  (re-exported: callers and tests use it from here)
from advisor.config.defaults import OFFLOAD_OPTIMIZER, OFFLOAD_PARAM, ZERO, hidden_size_values
from advisor.config.effective import DTYPE_BYTES, effective_config, pipeline_effective
from advisor.errors import AdvisorError, WorkLimitError
from advisor.model.inventory import Inventory
from advisor.model.parallel import forget_shard
from advisor.ledger import steptime as _steptime
from advisor.ledger.state import (MIN_AIO_BYTES, Cluster, Ledger, Plan, ceil_div, unsupported_reason,
                                  zero3_partition_numel, zero3_partition_sums)

#: Model FLOPs utilisation assumed for the compute term (named in every output): the step-time
#: model's (advisor.ledger.steptime.MFU).
MFU = _steptime.MFU
#: Stage-3 knobs written explicitly (DeepSpeed's defaults, advisor.config.defaults; elements).
MAX_LIVE = ZERO.value("stage3_max_live_parameters")
MAX_REUSE = ZERO.value("stage3_max_reuse_distance")
SUB_GROUP_DEFAULT = ZERO.value("sub_group_size")
PARAM_BUFFER_COUNT = OFFLOAD_PARAM.value("buffer_count")
PARAM_BUFFER_SIZE = OFFLOAD_PARAM.value("buffer_size")
PARAM_MAX_IN_CPU = OFFLOAD_PARAM.value("max_in_cpu")
OPT_BUFFER_COUNT = OFFLOAD_OPTIMIZER.value("buffer_count")
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
    """What the user asks for. Sizes in elements/tokens."""

    global_batch: int
    seq_len: int
    nodes: int
    gpus_per_node: int
    optimizer: str = "adamw"
    precision: str = "bf16"
    hf: bool = False
    mfu: float = MFU
    #: Step times within this fraction of the fastest are ties, broken by simplicity: the model
    #: leaves out hook, launch and latency overheads, which grow with the ZeRO stage.
    tie_tolerance: float = 0.03
    #: Search tensor/pipeline-parallel layouts too (:func:`model_parallel_layouts`), not only data
    #: parallelism: the default (each layout is evaluated only when its step-time lower bound could
    #: beat the best plan found so far, so a model data parallelism fits fast stays data parallel);
    #: False: data parallelism only (``generate --no-model-parallel``).
    model_parallel: bool = True
    #: The runtime overhead terms of the accelerator fit (advisor.cluster.overhead.OverheadSettings;
    #: None: the cited defaults, the environment's NCCL/CUDA variables read).
    overhead: Any = None
    #: The workload options estimate and check take (the CLI's WORKLOAD_OPTIONS / PARALLEL_OPTIONS),
    #: each fixed instead of searched when given (None: searched). ``attention``: the kernel every
    #: plan's activations assume (flash / eager); ``moe_capacity_factor``: DeepSpeed MoE's fixed
    #: dispatch buffer (None: dropless, advisor.model.activations.moe_capacity).
    attention: str = "flash"
    moe_capacity_factor: float | None = None
    micro_batch: int | None = None
    checkpointing: str | None = None
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    sequence_parallel: int | None = None
    #: OpenMP threads per rank for the CPU optimizer step and where that came from (``--omp-threads``
    #: or OMP_NUM_THREADS); None: the launcher's default (advisor.ledger.steptime.cpu_threads_per_rank).
    omp_threads: int | None = None
    omp_threads_source: str = ""
    #: The load phase, as estimate and check take it (``--zero-init/--no-zero-init``,
    #: ``--load-dtype``, ``--low-cpu-mem-usage``, ``--pipeline-build``; None: the default,
    #: :func:`advisor.ledger.timeline.resolve_load` per plan's stage, ``hf`` as the Trainer loads).
    zero_init: bool | None = None
    load_dtype: str | None = None
    low_cpu_mem_usage: bool | None = None
    pipeline_build: str | None = None

    def layout_allowed(self, tp: int, pp: int, sp: int) -> bool:
        """Whether the layout (tensor, pipeline, Ulysses degrees) matches the degrees given."""
        return all(want is None or want == got for want, got in
                   ((self.tensor_parallel, tp), (self.pipeline_parallel, pp), (self.sequence_parallel, sp)))

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


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


def divisors_cached(n: int) -> tuple[int, ...]:
    """:func:`divisors` of ``n`` as a tuple, computed once per ``n`` in a process (O(sqrt n): ~0.1 s at
    --global-batch's limit 2^40; search asks it per layout, and suggest per request)."""
    got = _DIVISORS.get(n)
    if got is None:
        if len(_DIVISORS) > 64:
            _DIVISORS.clear()
        got = _DIVISORS[n] = tuple(divisors(n))
    return got


_DIVISORS: dict[int, tuple[int, ...]] = {}


def hidden_sizes(h: int) -> dict[str, int]:
    """The HF integration's hidden-size based values (elements), by ``zero_optimization`` key:
    :func:`advisor.config.defaults.hidden_size_values` (its docstring has the formulas and their
    transformers/accelerate source)."""
    return {k.rsplit(".", 1)[1]: v for k, v in hidden_size_values(h).items()}


def sub_group_size_for(inv: Inventory, w: int, combo: Combo) -> int:
    """``sub_group_size`` (elements). With NVMe optimizer swap the pinned pool holds
    ``buffer_count`` buffers of the largest sub-group (reference 5.2), so the sub-group is
    sized to an eighth of the rank's partition P3 (two significant digits, at least the 1 MiB
    swap threshold / 4 B); otherwise DeepSpeed's default 1e9."""
    if combo.offload_optimizer != "nvme":
        return SUB_GROUP_DEFAULT
    p3 = zero3_partition_sums(inv, w)[1]  # sum over trainable p_i, once per (tensor list, w)
    target = max(MIN_AIO_BYTES // 4, p3 // 8)
    digits = len(str(target)) - 2
    target = (target // 10 ** digits) * 10 ** digits if digits > 0 else target
    return min(SUB_GROUP_DEFAULT, target)


@functools.lru_cache(maxsize=None)
def pipeline_effective_overlap(stage: int, pp: int) -> bool:
    """The ``overlap_comm`` generate writes at ZeRO ``stage`` on ``pp`` pipeline stages: true (the ZeRO-1/2
    gradient reduce and ZeRO-3's fetches on side streams), unless the engine turns it off there
    (:func:`advisor.config.effective.pipeline_effective`: ZeRO-1/2 under a PipelineModule, ``engine.py``
    l.2663-2666), so the written config is the one DeepSpeed runs."""
    ec = effective_config({"zero_optimization": {"stage": stage, "overlap_comm": True}})
    return pipeline_effective(ec, pp).zero.overlap_comm


def param_buffer_size_for(inv: Inventory, w: int, dtype_bytes: int) -> int:
    """``offload_param.buffer_size`` (elements): at least the largest ZeRO-3 partition p_i that
    goes to NVMe (rule M001), DeepSpeed's 1e8 otherwise; rounded up to a multiple of 1e6."""
    # ceil(n / w) never decreases with n: the largest partition is the largest tensor's (numel once per tensor list)
    largest = zero3_partition_numel(inv.memo(("max_numel",), lambda: max((t.numel for t in inv.tensors), default=0)), w)
    need = max(PARAM_BUFFER_SIZE, largest)
    return ceil_div(need, 1_000_000) * 1_000_000


def build_config(combo: Combo, micro: int, ga: int, dp: int, checkpointing: str, inv: Inventory,
                 req: Request, nvme_path: str | None, hf: bool = False, sp: int = 1, pp: int = 1) -> dict[str, Any]:
    """The DeepSpeed config dict of one plan (``hf``: "auto" where the HF Trainer fills values in:
    batch sizes, gradient_clipping, optimizer params, precision ``enabled``, and the three
    hidden-size based zero keys). ``sp`` > 1: DeepSpeed-Ulysses ``sequence_parallel_size``, with
    which DeepSpeed checks the batch over world / sp ranks (``runtime/config.py``
    ``DeepSpeedConfig.__init__`` :468-469: ``world_size = dist.get_world_size() / sequence_parallel_size``);
    ``dp`` is that data-parallel size. ``pp`` > 1: the plan's pipeline stages; ``overlap_comm`` is then written
    false, as DeepSpeed runs it under a PipelineModule (``engine.py`` l.2663-2666:
    :func:`advisor.config.effective.pipeline_effective`), not true with a warning the engine overrides."""
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
        z["overlap_comm"] = pipeline_effective_overlap(combo.stage, pp)
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
    if checkpointing != "none":
        cfg["activation_checkpointing"] = {"partition_activations": False, "cpu_checkpointing": False,
                                           "contiguous_memory_optimization": False,
                                           "synchronize_checkpoint_boundary": False}
    if sp > 1:
        cfg["sequence_parallel_size"] = sp
    cfg["steps_per_print"] = 100
    cfg["wall_clock_breakdown"] = False
    return cfg


# ---------------------------------------------------------------------------------------------
# the search


@dataclass
class Rejection:
    """Why a plan does not fit: the tier, what it needs and what may be used (bytes)."""

    tier: str
    need: int
    usable: int | None
    scope: str
    #: estimate's verdict for the row: "does not fit" or "tight" (advisor.views.estimate.FitRow).
    verdict: str = "does not fit"
    #: tight: the bytes the overhead may exceed its defaults by, and those terms.
    uncertainty: int = 0
    terms: tuple[str, ...] = ()
    #: tight because the accelerator peak is a lower bound (FitRow.lower_bound, rule M104): its fit is unknown.
    lower_bound: bool = False
    #: The row's need without the load phase and deepspeed.initialize before partitioning (FitRow.steady_need,
    #: estimate's ONE_OFF); None where the row has none. Below ``need``: the row's peak is in the load phase.
    steady_need: int | None = None
    #: The accelerator need leaves out the activations (no formula for the family, rule M104): a floor, so
    #: "needs >= X" and "over by at least"; set by :func:`search` on accelerator rejections only.
    activations_unknown: bool = False

    @property
    def load_binds(self) -> bool:
        """The row's peak is the load phase (the model materialised before deepspeed.initialize partitions it)
        and the row would leave room without it: steady_need <= usable (headroom not judged: a load option's
        re-search, :func:`load_suggestion`, says whether a plan then fits)."""
        return (self.steady_need is not None and self.usable is not None and self.steady_need < self.need
                and self.steady_need <= self.usable)

    @property
    def over(self) -> int | None:
        return None if self.usable is None else self.need - self.usable

    def describe(self, units: str = "GiB") -> str:
        """E.g. "accelerator per rank: needs 90.1 GiB, 67.1 GiB usable, over by 23.0 GiB" (``units``: GiB or GB)."""
        from advisor.units import size
        if self.usable is None:
            return f"{self.tier} {self.scope}: needs {size(self.need, units, digits=1)}, capacity unknown"
        if self.verdict == "tight":  # enough digits that each pair compares as stated (units.digits_to_compare)
            from advisor.units import digits_to_compare
            dn = digits_to_compare(self.need, self.usable, units)
            ge = ">= " if self.lower_bound else ""  # the peak is a floor (FitRow.lower_bound, rule M104)
            head = f"{self.tier} {self.scope}: needs {ge}{size(self.need, units, digits=dn)} of {size(self.usable, units, digits=dn)}"
            if self.lower_bound and not 0 <= -self.over < self.uncertainty:
                return head + (": tight (the peak is a lower bound, its activations not counted: M104)"
                               if self.activations_unknown else
                               ": tight (the peak is a lower bound, its ZeRO-1/2 transients not modelled: M104)")
            dh = digits_to_compare(-self.over, self.uncertainty, units)
            return (head + f": tight (headroom {size(-self.over, units, digits=dh)} < "
                    f"{size(self.uncertainty, units, digits=dh)}: {', '.join(self.terms)})")
        if self.activations_unknown:  # a floor over the capacity: over by at least that (M104)
            return (f"{self.tier} {self.scope}: needs >= {size(self.need, units, digits=1)}, "
                    f"{size(self.usable, units, digits=1)} available, over by at least {size(self.over, units, digits=1)}")
        return (f"{self.tier} {self.scope}: needs {size(self.need, units, digits=1)}, "
                f"{size(self.usable, units, digits=1)} available, over by {size(self.over, units, digits=1)}")


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
    #: (template, sizes) when ``why`` names sizes (:func:`advisor.findings.render_sized`): the
    #: table prints it in its ``--units``; ``why`` holds it in the default units (GiB).
    why_sized: tuple[str, dict] | None = None
    #: The CPU optimizer step's bytes per rank and bytes/s per rank (offloaded optimizer only), and
    #: ``cpu_optimizer_threads_limited`` True where its OpenMP threads limit the rate.
    cpu_optimizer: dict[str, float | bool] = field(default_factory=dict)
    #: Parts of the step time the hardware spec gives no rate for (:func:`unknown_parts`): counted
    #: as 0, so ``step_time_s`` is a lower bound; :func:`rank` never ranks it as if they were free.
    unknown: list[str] = field(default_factory=list)
    #: Set by :func:`rank`: the step time leaves out a part that the best plans' times do not
    #: (ranked after them).
    incomplete: bool = False
    rejection: Rejection | None = None
    config: dict[str, Any] | None = None
    #: Tensor and pipeline parallel degrees (Megatron sequence parallelism with every t > 1), and
    #: DeepSpeed-Ulysses ``sequence_parallel_size``.
    tp: int = 1
    pp: int = 1
    sp: int = 1
    #: Recompute FLOPs as a fraction of the step's (the activations estimate's
    #: ``recompute_flops_fraction``, :mod:`advisor.model.flops`): how much the plan recomputes, a
    #: tie-break of :func:`simplicity` finer than the setting's kind (K = 1 and K = 79 are both "k of L").
    recompute: float = 0.0
    #: Why the accelerator need is a lower bound ("" when it is not): the plan's activations are not
    #: estimated (:func:`advisor.views.estimate.activations_for`'s note; rule M104), so ``accelerator``
    #: leaves them out; printed ">=" and, in JSON, ``accelerator_lower_bound`` true.
    accelerator_lower_bound: str = ""

    def layout(self) -> str:
        """"-" for data parallelism only, else e.g. "TP8 PP2" (+SP: Megatron sequence parallelism)."""
        if self.tp == 1 and self.pp == 1 and self.sp == 1:
            return "-"
        return " ".join(x for x in (f"TP{self.tp}+SP" if self.tp > 1 else "", f"PP{self.pp}" if self.pp > 1 else "",
                                    f"Ulysses{self.sp}" if self.sp > 1 else "") if x)

    def row(self) -> dict[str, Any]:
        return {"tensor_parallel": self.tp, "pipeline_parallel": self.pp, "megatron_sp": self.tp > 1,
                "sequence_parallel": self.sp,
                "stage": self.combo.stage, "offload_optimizer": self.combo.offload_optimizer,
                "offload_param": self.combo.offload_param, "micro_batch": self.micro,
                "gradient_accumulation": self.ga, "checkpointing": self.checkpointing,
                "accelerator_bytes_per_rank": self.accelerator, "host_bytes_per_node": self.host,
                "nvme_bytes_per_node": self.nvme, "activation_bytes_per_rank": self.activations,
                "step_time_s": self.step_time_s, "parts_seconds": self.parts, "why": self.why,
                "cpu_optimizer": self.cpu_optimizer or None,
                "unknown_parts": list(self.unknown), "step_time_is_lower_bound": bool(self.unknown),
                "incomplete": self.incomplete,
                "states_source": self.states_source,
                # present (true) only when the need leaves out the activations (M104), as estimate's timeline
                # entries' accelerator_lower_bound: a plan whose need is modelled keeps its keys unchanged
                **({"accelerator_lower_bound": True} if self.accelerator_lower_bound else {})}


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
    #: (template, sizes) per suggestion (:func:`advisor.findings.render_sized`): the text prints
    #: them in its ``--units``; ``suggestions`` holds them in the default units (GiB).
    suggestions_sized: list[tuple[str, dict]] = field(default_factory=list)
    #: Candidates fitted (each one :func:`advisor.views.estimate.plan_fit`); they partition into
    #: ``ranked`` (fit, the cheapest recompute setting of its stage x offload x micro-batch, and the
    #: representative of its piece: :func:`micro_batch_representatives`), ``superseded`` (fit, but a setting
    #: with fewer extra FLOPs of the same stage x offload x micro-batch fits too, or the same setting is
    #: ranked at the micro-batch of its piece whose step is no slower) and ``rejected`` (does not fit, or
    #: tight): evaluated == len(ranked) + superseded + len(rejected). Plans the search decides without
    #: fitting them (:func:`implied_fit`, micro-batches inside a piece) are in none of them.
    evaluated: int = 0
    superseded: int = 0
    #: Layouts (t, p) considered, (1, 1) included, and those not evaluated because their
    #: step-time lower bound (:func:`layout_lower_bound`, seconds) was slower than the best plan.
    layouts: int = 1
    pruned_layouts: list[tuple[int, int, float]] = field(default_factory=list)
    #: Why no plan's activations are estimated ("" when they are): :func:`advisor.views.estimate.activations_gap`
    #: (a family without an activation formula). Every plan's accelerator need is then a lower bound (M104).
    activations_unknown: str = ""
    #: The micro-batch / checkpointing the search fixed because of :attr:`activations_unknown` (None: searched
    #: or fixed by the user's flag).
    least_exposed: dict[str, Any] = field(default_factory=dict)
    #: Set by the CLI for :func:`activations_warning`'s command: the config written (None: standard output)
    #: and the ``--model`` given.
    output: str | None = None
    model_arg: str | None = None

    @property
    def best(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    def assumptions(self) -> dict[str, Any]:
        acc = self.hardware.accelerator
        return {
            "mfu": self.request.mfu,
            "compute": _steptime.COMPUTE_MODEL,
            "peak_flops": _peak(self.hardware, self.request.precision),
            "fit": "estimate's fit (advisor.views.estimate.plan_fit): timeline peak + runtime overhead rows; "
                   "only \"fits\" is ranked",
            "overlap": ("critical path (advisor.ledger.steptime): overlapped collectives and copies hide behind the "
                        "forward/backward compute of their window, synchronous ones and the CPU optimizer step count "
                        "in full, a pipelined NVMe optimizer swap overlaps the CPU step"),
            "cpu_optimizer": _steptime.CPU_OPTIMIZER_MODEL,
            "omp_threads_per_rank": self.request.omp_threads,
            "host_memory_bandwidth_bytes_per_s": getattr(self.hardware, "host_memory_bandwidth_bytes_per_s", None),
            "activations": f"{self.request.attention} attention, dropout off (advisor.model.activations)"
                           + (f", MoE capacity factor {self.request.moe_capacity_factor:g}"
                              if self.request.moe_capacity_factor is not None else ""),
            "nvme_path": self.nvme_path,
            "accelerator": acc.name if acc else None,
            "excluded": "step time leaves out collective latency, first-iteration fetches, kernel launch and hook "
                        "overheads",
            "tie_tolerance": self.request.tie_tolerance,
            # only when the activations are not counted (rule M104, as estimate's assumptions.peak_lower_bound):
            # absent otherwise, so a modelled model's JSON keeps its keys
            **({"peak_lower_bound": self.activations_unknown} if self.activations_unknown else {}),
        }


def _peak(hw: Any, precision: str) -> float | None:
    return _steptime.peak_flops(hw, precision)


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


def nvme_path_note(path: str, tier: Any) -> str:
    """What generate says of the ``nvme_path`` it writes (:func:`_nvme_path`): a folder under the
    spec's drive mount that need not exist (DeepSpeed creates it, ``os.makedirs``: DeepSpeed 0.19.8
    runtime/swap_tensor/partitioned_param_swapper.py l.89, optimizer_utils.py l.175), and that
    check verifies on the node (K102/K103: on the drive's filesystem, creatable)."""
    mount = tier.mounts[0]
    where = ("the root filesystem: the spec's drive is mounted at /" if mount == "/"
             else f"the mount of {tier.name} in the hardware spec")
    return (f"nvme_path {path}: a folder under {mount} ({where}); DeepSpeed creates it at initialize. It must be "
            "on the NVMe drive: edit it if the drive is mounted elsewhere on your nodes; check CONFIG --hardware "
            "... verifies it on the node")


#: The step-time parts (:func:`step_time`) by the step-time model's resource, and what the hardware
#: spec lacks when a term of that part has no rate (advisor.ledger.steptime: its ``unknown``).
UNKNOWN_PART = {"compute": ("compute", "the accelerator's peak FLOP/s"),
                "network": ("network", "network_bytes_per_s across nodes, or peer_bytes_per_s within one"),
                "pcie": ("pcie", "the accelerator's host link bandwidth"),
                "nvme": ("nvme", "a storage tier holding the NVMe path"),
                "host_memory": ("cpu_optimizer", "host_memory_bandwidth_bytes_per_s"),
                "accelerator_memory": ("gpu_optimizer", "the accelerator's memory_bandwidth_bytes_per_s")}
#: How the table and notes name each part.
#: Generate's time resolution, as a fraction of the best plan's step time: two step times, or one part's exposed
#: seconds in two plans, that differ by less are "as fast" and the part is not named (``_explain_ranks``,
#: ``_delta_words``, ``spent_text``). Relative, because what the step-time model can tell apart scales with the
#: step: it is a product of rates given to two or three figures (peak FLOP/s x MFU, link and PCIe/NVMe rates,
#: advisor.ledger.steptime) and leaves out hook, launch and latency overheads (``Request.tie_tolerance``'s reason),
#: so 0.5% of a 30 s step (150 ms) is below what it resolves, while the absolute 5 ms used before (issue 21) was
#: that noise there and, for a 2 ms step (gpt2 at sequence 128 on 8 H100s), more than a part's whole time: every
#: plan of such a search read "as fast as #1" and listed no part at all. 0.5% is a sixth of the 3% tie tolerance,
#: so a plan that beats the tie winner by a tolerance's worth is always said to ("faster than #1 by ...").
TIME_RESOLUTION = 0.005
#: The resolution's absolute floor, seconds: 10 us, about one kernel launch or one collective's latency on
#: NVLink, which the step-time model leaves out (its assumptions line), so a smaller difference is not one it
#: can claim whatever the step.
TIME_RESOLUTION_FLOOR_S = 1e-5


def time_resolution(step_time_s: float) -> float:
    """The smallest difference of seconds generate names for a step of ``step_time_s`` seconds (the best plan's, or
    the plan's own for its parts): :data:`TIME_RESOLUTION` of it, at least :data:`TIME_RESOLUTION_FLOOR_S`."""
    return max(TIME_RESOLUTION * step_time_s, TIME_RESOLUTION_FLOOR_S)


def seconds_text(s: float) -> str:
    """``s`` seconds as generate prints them: two decimals from 0.1 s up (and for 0), else two significant
    digits (0.0021, 0.000047), so a difference :func:`time_resolution` keeps is never printed "0.00"."""
    if s == 0 or abs(s) >= 0.095:
        return f"{s:,.2f}"
    return f"{s:.{max(2, 1 - math.floor(math.log10(abs(s))))}f}"


PART_NAMES = {"compute": "compute", "network": "collectives", "pcie": "PCIe offload", "nvme": "NVMe swap",
              "cpu_optimizer": "CPU optimizer step", "gpu_optimizer": "GPU optimizer step (partial offload)"}


def unknown_parts(st: Any) -> list[str]:
    """The parts of a step time (``compute``, ``network``, ``pcie``, ``nvme``, ``cpu_optimizer``)
    with at least one term the hardware spec gives no rate for (:class:`advisor.ledger.steptime.Term`
    ``seconds`` None: counted as 0 on the critical path) or only an upper limit of its rate for
    (``lower_bound``: its seconds a lower bound, e.g. the CPU optimizer step at its threads' rate
    without ``host_memory_bandwidth_bytes_per_s``), in that order."""
    have = {UNKNOWN_PART[t.resource][0] for t in st.terms
            if (t.seconds is None or t.lower_bound) and t.resource in UNKNOWN_PART}
    return [k for k in PART_NAMES if k in have]


def unknown_words(parts: Any) -> str:
    """``parts`` (:func:`unknown_parts`) in words, each with what the hardware spec lacks."""
    why = {v[0]: v[1] for v in UNKNOWN_PART.values()}
    return "; ".join(f"{PART_NAMES[k]} (no {why[k]})" for k in parts)


def step_time(plan: Plan, hardware: Any, req: Request, recompute_fraction: float,
              notes: set[str] | None = None) -> dict[str, float]:
    """Seconds per optimizer step by resource, from the one step-time model
    (:func:`advisor.ledger.steptime.step_time`, the critical path with DeepSpeed's overlap):
    ``compute`` (with recomputation), ``network``, ``pcie``, ``nvme`` and ``cpu_optimizer`` are
    each resource's EXPOSED seconds (on the critical path); ``total`` the step. ``unknown``: the
    parts (:func:`unknown_parts`) with a term whose rate the hardware spec lacks (counted as 0 in
    ``total``, so ``total`` is a lower bound), absent when none. ``notes`` collects the step
    time's CPU-threads note when the rank's OpenMP threads limit its CPU optimizer step
    (``cpu_optimizer_threads_limited`` is then True)."""
    from advisor.ledger import steptime as stm

    st = stm.step_time(plan, hardware, seq_len=req.seq_len, global_batch=req.global_batch,
                       recompute_fraction=recompute_fraction, precision=req.precision, mfu=req.mfu)
    exp = st.by_resource()
    out: dict[str, float] = {"compute": exp.get("compute", 0.0), "network": exp.get("network", 0.0),
                             "pcie": exp.get("pcie", 0.0), "nvme": exp.get("nvme", 0.0),
                             "cpu_optimizer": exp.get("host_memory", 0.0), "total": st.total}
    unknown = unknown_parts(st)
    if unknown:
        out["unknown"] = unknown  # type: ignore[assignment]  # popped by the caller into Candidate.unknown
    cpu = next((t for t in st.terms if t.name == "cpu_optimizer"), None)
    if cpu is not None:
        out["cpu_optimizer_bytes_per_rank"] = float(cpu.amount)
        out["cpu_optimizer_bytes_per_s_per_rank"] = float(cpu.rate or 0.0)
        th = st.assumptions.get("cpu_optimizer_threads") or {}
        if th.get("limited_by") == "threads" and th.get("note") and notes is not None:
            notes.add(th["note"])  # the same for every plan of one request: one note for the run
            out["cpu_optimizer_threads_limited"] = True  # type: ignore[assignment]  # a flag: JSON true, not 1.0
    return out


def _capacity(hw: Any, tier: Any):
    """The hardware's capacities as estimate takes them (bytes: accelerator per rank, host per
    node, the NVMe tier per node or, a shared tier, for all nodes together)."""
    from advisor.cluster.hardware import Capacity
    a = hw.accelerator
    return Capacity(accelerator=int(a.memory_bytes) if a else None,
                    host=int(hw.host_memory_bytes) if hw.host_memory_bytes else None,
                    nvme=int(tier.capacity_bytes) if tier else None, nvme_shared=bool(tier and tier.shared))


def _peak_activations(pf) -> int:
    """The plan's largest per-rank activation footprint on the accelerator (bytes), as estimate shows it
    per rank: under pipeline parallelism each stage's own (:func:`advisor.views.estimate.plan_fit`
    splits the roles by stage, 1F1B keeping min(p - stage, GA) micro-batches in flight), not the
    stage-less ``pf.activations``, which no rank holds (llama-3.1-8b PP 2: 33.8 GB where estimate's
    ranks hold 26.4 and 22.9); 0 when the activations are not estimated."""
    staged = [r.activations.peak_accelerator for r in pf.roles if r.activations is not None]
    if staged and pf.ledger.plan.cluster.pipeline_parallel > 1:
        return max(staged)
    return pf.activations.peak_accelerator if pf.activations is not None else 0

def _rejection(pf: Any) -> Rejection | None:
    """None when estimate's verdict for the plan is "fits"; else the first row that does not fit
    (or the load phase, M101), else the first tight row."""
    if pf.verdict == "fits":
        return None
    rows = pf.rows
    for want in ("does not fit", "tight", "unknown"):
        for r in rows:
            if r.verdict == want and (r.need or want != "unknown"):
                return Rejection(r.tier, r.need, r.capacity, r.scope, want if want != "unknown" else "does not fit",
                                 r.uncertainty, tuple(r.uncertain), bool(r.lower_bound), r.steady_need)
    r = rows[0]
    return Rejection(r.tier, r.need, r.capacity, r.scope)


def model_parallel_layouts(inv: Inventory, req: Request) -> list[tuple[int, int]]:
    """(tensor parallel t, pipeline parallel p) layouts generate tries, (1, 1) first, then by
    t x p: t divides the GPUs per node (Megatron keeps the tensor-parallel group inside a node)
    and the attention heads, key/value heads and MLP width (``megatron/core/utils.py:divide``,
    :func:`advisor.model.parallel.check_tp_divisibility`); p divides the layers (equal stages)
    and p <= layers; t x p divides the world size (``utils/groups.py:_ensure_divisibility``).
    The HF Trainer (``req.hf``) has neither, and with ``req.model_parallel`` False: (1, 1) only."""
    from advisor.model.parallel import ParallelismError, check_tp_divisibility
    if req.hf or not req.model_parallel:
        return [(1, 1)]
    meta = inv.meta or {}
    tps = []
    for t in divisors(req.gpus_per_node):
        try:
            check_tp_divisibility(meta, t)
        except ParallelismError:
            continue
        tps.append(t)
    L = int(meta.get("num_layers") or 1)
    out = [(t, p) for t in tps for p in divisors(L) if req.world_size % (t * p) == 0]
    return sorted(out, key=lambda x: (x[0] * x[1], x[1]))


def ulysses_degrees(inv: Inventory, req: Request, batch: bool = True) -> list[int]:
    """DeepSpeed-Ulysses degrees u > 1 generate tries (with t = p = 1: ZeRO over DP x SP, as the
    HF/ALST integration runs it): u divides the GPUs per node (its all-to-alls stay on the peer
    link), the attention heads and the key/value heads (``sequence/layer.py`` scatters heads over
    the group; an uneven head count takes a slower path without overlap), the world size, and
    the data-parallel size world / u divides the global batch, and u divides the sequence (each
    rank holds s / u tokens). None for the HF Trainer path
    (``req.hf``) or with ``req.model_parallel`` False. ``batch`` False: without the global-batch
    test (the degrees whose layout exists on these ranks, :func:`layout_problem`).

    Only with t = p = 1: DeepSpeed 0.19.8 builds Ulysses groups over data x sequence only
    (``deepspeed/__init__.py`` l. 537-546 mesh ("data_parallel", "sequence_parallel");
    ``utils/groups.py`` _get_model_parallel_world_size l. 851-856 is 1 under the
    ``runtime/sequence_parallel/parallel_state_sp.py`` mpu); Ulysses with TP/PP needs
    Megatron-DeepSpeed's mpu, which generate's configs do not target."""
    if req.hf or not req.model_parallel:
        return []
    meta = inv.meta or {}
    a = int(meta.get("num_heads") or 0)
    kv = int(meta.get("num_kv_heads") or a)
    from advisor.rules.G005_ulysses_heads import ulysses_heads_problem
    out = []
    for u in divisors(req.gpus_per_node):
        # DeepSpeed's refusals (rule G005), and kv % u too: KV heads replicated over u > kv are not modelled
        if u == 1 or not a or ulysses_heads_problem(a, kv, u) or kv % u or req.world_size % u or req.seq_len % u:
            continue
        if batch and req.global_batch % (req.world_size // u):
            continue
        out.append(u)
    return out


def layout_writable(inv: Inventory, req: Request) -> bool:
    """Whether some layout generate searches (:func:`model_parallel_layouts`, :func:`ulysses_degrees`)
    matches the degrees given (``Request.layout_allowed``); :func:`search` refuses the request
    otherwise, and :func:`suggest` skips such a re-search (its nodes or sequence changed)."""
    return (any(req.layout_allowed(t, p, 1) for t, p in model_parallel_layouts(inv, req))
            or any(req.layout_allowed(1, 1, u) for u in ulysses_degrees(inv, req)))


def _batch_fits(req: Request, t: int, p: int, u: int) -> bool:
    """Whether the layout's data-parallel size world / (t x p x u) divides the global batch
    (``train_batch_size = micro x GA x DP``, ``runtime/config.py`` _batch_assertion l. 590-605)."""
    return req.global_batch % (req.world_size // (t * p * u)) == 0


def nearby_batches(g: int, dps: list[int]) -> list[int]:
    """The global batches nearest ``g`` on either side that some data-parallel size of ``dps`` divides
    (``train_batch_size = micro x GA x DP``, ``runtime/config.py`` _batch_assertion), once each, above 0
    and within ``MAX_GLOBAL_BATCH``: what a refusal or note offers instead of ``g``."""
    from advisor.config.validation import MAX_GLOBAL_BATCH
    lo = max((g // d) * d for d in dps)
    hi = min((g // d + 1) * d for d in dps)
    return [x for x in dict.fromkeys((lo, hi)) if 0 < x <= MAX_GLOBAL_BATCH]


def layout_problem(inv: Inventory, req: Request) -> str | None:
    """Why no layout generate searches can hold the request, naming the flag, or None; :func:`search`
    raises it (exit 2) and :func:`request_problem` says it first (before ``--checkpointing`` /
    ``--micro-batch``, which are about the layouts this leaves).

    1. The degrees given (``--tensor-parallel`` ...) match no layout of :func:`model_parallel_layouts`
       / :func:`ulysses_degrees` on these ranks, whatever the global batch.
    2. The global batch: a multiple of the data-parallel size world / (T x P x U) of some layout
       that matches the degrees given (all of them when none is given: :func:`search` tries data
       parallelism first, but a global batch smaller than the world, or not a multiple of it, is
       still held by a tensor- or pipeline-parallel layout whose data-parallel size divides it).
       Names the nearest valid values."""
    given = [(f, v) for f, v in (("--tensor-parallel", req.tensor_parallel),
                                 ("--pipeline-parallel", req.pipeline_parallel),
                                 ("--sequence-parallel", req.sequence_parallel)) if v is not None]
    lays = ([(t, p, 1) for t, p in model_parallel_layouts(inv, req)]
            + [(1, 1, u) for u in ulysses_degrees(inv, req, batch=False)])
    lays = [lay for lay in lays if req.layout_allowed(*lay)]
    names = ", ".join(f"{f} {v}" for f, v in given)
    if not lays and req.hf and any(v not in (None, 1) for _, v in given):
        # the HF Trainer path has no tensor, pipeline or Ulysses layout (model_parallel_layouts, ulysses_degrees)
        return (f"{names}: not a layout generate writes under --hf (for the HF Trainer it searches ZeRO over data "
                "parallelism only: no tensor, pipeline or sequence-parallel layout); drop "
                f"{' and '.join(f for f, v in given if v not in (None, 1))} or --hf")
    if not lays:
        return (f"{names}: not a layout generate can write for {inv.name} on {req.world_size} ranks (TP "
                "divides the GPUs per node, the heads, KV heads and MLP width; PP divides the layers; "
                "T x P divides the world; Ulysses with T = P = 1, dividing the heads, KV heads, GPUs per "
                "node, world and sequence)" + ("" if req.model_parallel else "; --no-model-parallel is set"))
    dps = sorted({req.world_size // (t * p * u) for t, p, u in lays})
    if any(req.global_batch % d == 0 for d in dps):
        return None
    g = req.global_batch
    near = nearby_batches(g, dps)
    shape = f"{req.nodes} node{'s' if req.nodes != 1 else ''} x {req.gpus_per_node} GPUs"
    if len(dps) == 1 and dps[0] == req.world_size:
        what = f"the data-parallel size {dps[0]} (= {shape})"
    elif len(dps) == 1:
        what = f"the data-parallel size {dps[0]} (= {shape} / {req.world_size // dps[0]}, {names} given)"
    else:
        # largest first (data parallelism's, the world, when no degree is given); one line, so at most 8
        shown = sorted(dps, reverse=True)
        listed = ", ".join(map(str, shown[:8])) + (f", ... ({len(shown)} sizes)" if len(shown) > 8 else "")
        what = (f"any data-parallel size of the layouts {f'with {names} ' if names else ''}on {shape} "
                f"({listed})")
    return f"--global-batch {g} is not a multiple of {what}: use {' or '.join(map(str, near))}"


def _shard_inventory(inv: Inventory, tp: int, pp: int) -> Inventory:
    """Stage 0's tensor-parallel shard (the sizes of the config's buckets and sub-groups)."""
    from advisor.model.parallel import shard
    return shard(inv, tp, pp)[0].inventory


def layout_lower_bound(inv: Inventory, hardware: Any, req: Request, tp: int, pp: int) -> float | None:
    """Seconds per step no plan of layout (tp, pp) can beat (the step-time model's own terms,
    :mod:`advisor.ledger.steptime`): the compute (6 x N_active + the attention scores' FLOPs per
    token, :func:`advisor.ledger.steptime.attention_flops_per_token`) x G x s / world / (peak x MFU), with
    the 1F1B bubble at the most micro-batches (micro-batch 1: m = G / DP), plus the tensor-parallel
    all-reduces (4 per layer of the largest stage, 2 (t-1)/t x b s h D each, over the peer link,
    synchronous: :func:`advisor.ledger.movement.model_parallel_movements`). None without a peak."""
    peak = _steptime.peak_flops(hardware, req.precision)
    if not peak:
        return None
    meta = inv.meta or {}
    n_active = int(meta.get("active_params") or inv.numel)
    per_token = 6.0 * n_active + _steptime.attention_flops_per_token(meta, req.seq_len)
    comp = per_token * req.global_batch * req.seq_len / req.world_size / (peak * req.mfu)
    m = req.global_batch // (req.world_size // (tp * pp))
    comp *= 1 + (pp - 1) / m if pp > 1 else 1.0  # m >= 1: search keeps layouts whose DP divides G
    tpc = 0.0
    bw = getattr(hardware, "peer_bytes_per_s", None) or getattr(hardware, "host_link_bytes_per_s", None)
    if tp > 1 and bw:
        h, L = int(meta["hidden_size"]), int(meta["num_layers"])
        per_sample = 4 * (-(-L // pp)) * 2 * (tp - 1) / tp * req.seq_len * h * DTYPE_BYTES[req.precision]
        tpc = m * per_sample / bw
    return comp + tpc


#: How :func:`search` tries the micro-batches of a (layout, stage/offload) pair: "pieces"
#: (:func:`micro_batch_representatives`: O(settings x log divisors) recompute choices, the plans that can
#: rank first) or "exhaustive" (every divisor of the sequences per rank, each with its recompute choice:
#: the reference, kept for tests/test_generate_micro_pieces21.py, which compares the two).
MICRO_BATCH_SEARCH = "pieces"


def ga_regimes(micros: list[int], per_rank: int) -> list[list[int]]:
    """``micros`` (ascending divisors of ``per_rank``) split by gradient accumulation GA = per_rank / b
    into the three ranges within which a plan's structure does not change: GA >= 3, GA = 2, GA = 1.
    Across them it does: the ledger's entries differ at GA 1 and GA > 1 (search's ``led_cache``; e.g.
    ``timeline.py`` lifetimes ``accumulated*``, ZeRO-2's ``reduce:1``), and the timeline's micro-steps are
    [1], [1, GA] or, ZeRO-3 refetching at GA > 2, [1, 2, GA] (``timeline._instants``); step-time terms
    like ``(GA - 1) x ...`` vanish at GA 1 (``movement._rank_movements`` adds no zero-byte row).
    Within one range only the activations' b-linear terms and the GA-scaled movement bytes change.
    Ascending lists, empty ones left out."""
    out = [[b for b in micros if per_rank // b >= 3], [b for b in micros if per_rank // b == 2],
           [b for b in micros if per_rank // b == 1]]
    return [r for r in out if r]


def implied_fit(g0: int, b0: int, ck0: str, g: int, b: int, ck: str, fits: bool = False) -> bool | None:
    """What plan (GA range ``g0``, micro-batch ``b0``, recompute ``ck0``), fitted, says of (``g``, ``b``,
    ``ck``) of the same layout and stage/offload (:func:`micro_batch_representatives`: memory is
    non-decreasing in b within a GA range, :func:`ga_regimes`, and non-increasing in k of L, as
    :func:`cheapest_recompute`'s bisection has it): ``fits`` True (it fitted): True when (g, b, ck) fits
    too (same range, b <= b0, the same setting or k >= k0); ``fits`` False (it did not fit): False when
    (g, b, ck) does not either (b >= b0, the same setting, k <= k0, or ck0 full: every layer recomputed keeps
    the least of any setting, the premise of search's least-memory probe). None: nothing follows."""
    if g != g0:
        return None
    same = ck == ck0
    if fits:
        if b <= b0 and (same or (ck.isdigit() and ck0.isdigit() and int(ck) >= int(ck0))):
            return True
        return None
    if b >= b0 and (same or ck0 == "full" or (ck.isdigit() and ck0.isdigit() and int(ck) <= int(ck0))):
        return False
    return None


def micro_batch_representatives(micros: list[int], per_rank: int, choose: Any, pipeline: bool) -> list:
    """The plans of one (layout, stage/offload) pair that can rank first, with O(pieces x log divisors)
    calls of ``choose(b)`` (the plan generate makes of micro-batch ``b``: the recompute setting with the
    least extra FLOPs that fits, or None) in place of one per divisor. Descending micro-batch.

    Why it gives the exhaustive search's best plan (tests/test_generate_micro_pieces21.py compares them):

    * memory is non-decreasing in b at a fixed recompute setting within a GA range (:func:`ga_regimes`):
      the ledger's entries are the same for every GA > 1 (no micro-batch term, ``advisor.ledger.state``)
      and each activation term is linear in b (``advisor.model.activations.layer_terms``: s b h, b a s^2,
      ``moe_capacity(s b)``), as is the 1F1B in-flight count times b, min(p - stage, GA) x b =
      min((p - stage) b, per_rank) (``runtime/pipe/schedule.py`` ``TrainSchedule.num_pipe_buffers``); so
      a setting that fits at b fits at every smaller b of its range, and the setting chosen is
      monotone: its (extra FLOPs, :data:`advisor.model.activations.RECOMPUTE_ORDER`) key never falls as b
      grows (a cheaper setting fitting at b fits below it). The micro-batches choosing one setting are
      thus one run of consecutive divisors (a *piece*), and where ``choose`` gives the same setting at
      two divisors it gives it at each between: bisection finds every piece's ends;
    * at a fixed setting the step time (:mod:`advisor.ledger.steptime`) within a GA range: compute and
      recompute are G x s / DP tokens whatever b; every movement's bytes are GA x (a constant) or GA x
      b x (a constant) (``movement.py``: ZeRO-2/3 collectives and fetches per micro-step, the TP/PP/MoE/
      Ulysses activation traffic per micro-batch) or once per step; the windows take their max and sum,
      so without pipeline parallelism it never grows with b, and the piece's largest b is as fast as
      any of its plans and wins :func:`simplicity`'s last key (the larger micro-batch). Under pipeline
      parallelism (ZeRO-0/1 only, G001) every term but the 1F1B bubble, (p - 1) / GA of the compute,
      is GA x b x (a constant) or once per step, so the step time grows with b and the piece's
      smallest b is the fastest (its simplicity key the least).

    So the piece's largest (``pipeline``: smallest) micro-batch is the one plan of the piece ranked;
    every other plan of the piece is fitted only where the bisection reads it (counted superseded).
    Caveat: equal up to float rounding, e.g. a TP degree t whose (t - 1) / t is not a binary fraction
    rounds ``int(GA x ... x (t - 1) / t x b s h D)`` by a byte differently at two b of the same tokens."""
    out: list = []
    for xs in ga_regimes(micros, per_rank):
        known: dict[int, Any] = {}

        def at(i: int) -> Any:
            if i not in known:
                known[i] = choose(xs[i])
            return known[i]

        def key(c: Any) -> Any:
            return None if c is None else c.checkpointing

        stack = [(0, len(xs) - 1)]
        while stack:
            i, j = stack.pop()
            if j - i <= 1 or key(at(i)) == key(at(j)):
                at(i), at(j)
                continue
            m = (i + j) // 2
            stack += [(m, j), (i, m)]
        idx = sorted(known)
        runs: list[list[int]] = []
        for i in idx:
            if runs and key(known[runs[-1][-1]]) == key(known[i]):
                runs[-1].append(i)
            else:
                runs.append([i])
        for run in runs:
            c = known[run[0] if pipeline else run[-1]]
            if c is not None:
                out.append(c)
    return sorted(out, key=lambda c: -c.micro)


#: The ledgers' roles shared by the searches of one :func:`run` (None outside it): :func:`suggest`'s up to 64 + 20
#: re-searches of the request (more nodes, an NVMe tier, the sequence-length bisection) fit the same
#: (config, cluster) plans again, and a plan's ledger (:func:`advisor.ledger.state.compute_ledger`) reads only
#: its config, inventory and cluster, and its workload only under pipeline parallelism (the pipe buffers,
#: ``state.pipeline_stage_entries``; the sequence length also in ``excluded``). Issue 21: on Kimi-K2 per-expert
#: (nothing fits on 16 x 8) the sequence bisection's 12 searches recomputed each ZeRO-1/2 ledger 12 times.
#: Scoped to :func:`run` (its first search's too) and dropped as soon as a plan fits (memory).
_SHARED_LEDGERS: "dict[tuple, tuple] | None" = None
#: False: :func:`suggest`'s searches compute every ledger again (the reference tests/test_generate_shared_ledgers17.py
#: compares with).
SHARE_LEDGERS = True


def _ledger_key(cfg: dict[str, Any], cluster: Cluster, workload: Any) -> tuple:
    """What a plan's ledger is a function of, for :data:`_SHARED_LEDGERS`: the config written (micro-batch,
    GA and recompute in it), the cluster, and the workload but for the sequence length without pipeline
    parallelism (read by the ledger only for the pipe buffers and the words of ``excluded``, both PP only:
    ``state.compute_ledger``, ``state._model_parallel_roles``). The inventory is the search's own."""
    w = workload if cluster.pipeline_parallel > 1 else replace(workload, seq_len=None)
    return json.dumps(cfg, sort_keys=True), repr(cluster), repr(w)


#: The config keys a data-parallel plan's ledger does not read (:func:`_dp_ledger_key`).
_NOT_IN_LEDGER = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                  "sequence_parallel_size")


def _dp_ledger_key(cfg: dict[str, Any], cluster: Cluster) -> tuple:
    """What the ledger of a plan without tensor, pipeline or expert parallelism is a function of, within one
    search (one inventory): its config but for the batch sizes and the Ulysses degree, whether GA > 1, and the
    ZeRO group's size. Such a ledger is ``state._roles`` over ``Cluster.zero_world_size`` (DP x SP) ranks with
    GA from ``derive_batch``, which its terms compare with 1 only (``ga > 1``, ``ga == 1``: the one other use,
    ``state.pipe_buffers_used``, is PP's): no ledger term reads the micro-batch or GA itself (the premise of the
    search's per-combo ``led_cache``), the train batch or ``sequence_parallel_size`` (Ulysses' all-to-alls are
    the movement ledger's, ``ledger/movement.py``), and the data-parallel size only in
    ``state.unsupported_reason``, which a shared ledger is checked against. Issue 21: the Ulysses layouts
    (1, 1, u) of Kimi-K2 per-expert on 16 x 8 all partition over the same 128 ranks, and each recomputed the
    same ZeRO-1/2 ledgers (~0.3 s each)."""
    assert cluster.tensor_parallel == cluster.pipeline_parallel == cluster.expert_parallel == 1
    kept = {k: v for k, v in cfg.items() if k not in _NOT_IN_LEDGER}
    return json.dumps(kept, sort_keys=True), cfg["gradient_accumulation_steps"] > 1, cluster.zero_world_size


def search(inv: Inventory, hardware: Any, req: Request, top: int = 5) -> SearchResult:
    """Enumerate, fit (estimate's :func:`advisor.views.estimate.plan_fit`) and rank (see the
    module docstring). ``hardware``: an
    :class:`advisor.cluster.hardware.Hardware` whose shape is the request's (``nodes`` x
    ``gpus_per_node``). Raises AdvisorError for requests no plan can express (global batch not a
    multiple of DP, a model without architecture facts, a sequence longer than a learned position
    table: rule W001's error) and, as WorkLimitError, a model of more tensors than generate's limit
    (``advisor.config.validation.MAX_GENERATE_TENSORS``), before any plan is built. The result's ``ranked`` is
    best first."""
    meta = inv.meta or {}
    from advisor.model.specs import architecture_missing
    from advisor.config.validation import generate_tensors_problem
    problem = architecture_missing(meta, inv.name)
    if problem:
        raise AdvisorError(problem)
    # generate's own work limit (MAX_GENERATE_TENSORS): each ledger the search builds walks every
    # tensor, so the tensor count is refused here, before any plan is built
    problem = generate_tensors_problem(len(inv.tensors), inv.name)
    if problem:
        raise WorkLimitError(problem)
    problem = layout_problem(inv, req)  # degrees given and global batch: no layout holds the request
    if problem:
        raise AdvisorError(problem)
    from advisor.rules.W001_seq_len_beyond_positions import positions_problem
    pos = positions_problem(meta, req.seq_len)
    if pos is not None and pos[0] == "error":
        # every plan of the request has this sequence length, so each would carry error W001 and
        # check would say NO-GO on the config written (newcomer D5): no plan is written, exit 2
        raise AdvisorError(f"--seq-len {req.seq_len}: error W001: {pos[1]}: use --seq-len at most "
                           f"{int(meta['max_seq_len'])}")
    tier = choose_nvme_tier(hardware)
    nvme_path = _nvme_path(tier)
    cap = _capacity(hardware, tier)
    from advisor.cluster.overhead import OverheadSettings
    from advisor.plan import Workload
    from advisor.ledger.timeline import checkpoint_load_dtype, resolve_load
    from advisor.views.estimate import plan_fit
    ckpt_dtype = checkpoint_load_dtype(inv.hf_config)
    overhead = req.overhead if req.overhead is not None else OverheadSettings()
    notes: list[str] = []
    # a family without an activation formula (generate never traces: no torch): every plan's need leaves the
    # activations out and is a floor (M104). The plan least exposed to them is searched: micro-batch 1 (they
    # grow with micro-batch x sequence, advisor.model.activations.layer_terms) and every layer recomputed (full
    # recompute keeps each layer's input only), unless the user fixed either
    from advisor.views.estimate import activations_gap
    unknown_acts = activations_gap(meta)
    least_exposed: dict[str, Any] = {}
    if unknown_acts:
        if req.micro_batch is None:
            least_exposed["micro_batch"] = 1
        if req.checkpointing is None:
            least_exposed["checkpointing"] = "full"
    threads_notes: set[str] = set()  # the CPU-threads notes of the plans' step times (step_time)
    if tier is None:
        ro = [t.name for t in getattr(hardware, "storage", ()) if t.read_oriented]
        notes.append("no read-write storage tier: NVMe offload not considered"
                     + (f" (read-oriented: {', '.join(ro)}; never used for write-active state)" if ro else ""))
    if cap.host is None:
        notes.append("host memory unknown (hardware spec without host_memory_bytes): host offload not considered")
    if pos is not None:  # a warning (RoPE / ALiBi / unknown positions): the errors were refused above
        notes.append(f"warning W001: {pos[1]}")
    combos = [c for c in enumerate_combos(nvme_ok=tier is not None)
              if cap.host is not None or (c.offload_optimizer == "none" and c.offload_param == "none")]
    if req.moe_capacity_factor is not None and (meta.get("num_experts") or 0):
        # --moe-capacity-factor is DeepSpeed's MoE layer (deepspeed.moe.layer.MoE), which deepspeed.initialize
        # refuses at ZeRO-3 (rule G008, runtime/engine.py _validate_zero3_moe_compatibility l.2197-2216)
        combos = [c for c in combos if c.stage != 3]
        notes.append("DeepSpeed's MoE layer (--moe-capacity-factor): ZeRO-3 plans not considered, deepspeed.initialize "
                     "refuses them (G008)")

    ranked: list[Candidate] = []
    rejected: list[Candidate] = []
    evaluated = 0
    superseded = 0
    L = int(meta["num_layers"])
    fitted: dict[int, tuple[Plan, Any]] = {}  # id(candidate) -> its plan and activations
    dp_ledgers: dict[tuple, tuple] = {}  # _dp_ledger_key -> the roles of a data-parallel (and Ulysses) plan
    skipped: list[tuple[int, int, float]] = []  # (t, p, lower bound s) of the layouts pruned
    limited: list[str] = []
    # the layouts whose data-parallel size divides the global batch (with degrees given, (1, 1) may not)
    layouts = [lay for lay in model_parallel_layouts(inv, req) if _batch_fits(req, *lay, 1)]
    if req.layout_allowed(1, 1, 1) and not _batch_fits(req, 1, 1, 1):
        # no degree given, yet data parallelism cannot hold the batch (micro x GA x world): the
        # model-parallel layouts whose data-parallel size divides it are searched, and the batch
        # sizes that would let data parallelism alone run are named (layout_problem passed)
        g, w = req.global_batch, req.world_size
        near = " or ".join(map(str, nearby_batches(g, [w])))
        notes.append(f"--global-batch {g} is not a multiple of the world {w}: data parallelism alone cannot "
                     f"hold it (train_batch_size = micro-batch x GA x data-parallel ranks), so only layouts whose "
                     f"data-parallel size divides it were searched; --global-batch {near} "
                     "would allow data parallelism alone")
    bounds = {lay: layout_lower_bound(inv, hardware, req, *lay) for lay in layouts if lay != (1, 1)}
    # data parallelism first (the simplest: it wins every tie), then the layouts by their lower
    # bound, fastest first, so that a good plan is found early and prunes the rest
    layouts = sorted(layouts, key=lambda lay: (lay != (1, 1), bounds.get(lay) is None, bounds.get(lay) or 0.0,
                                               lay[0] * lay[1], lay[1]))
    queue: list[tuple[int, int, int]] = [(t, p, 1) for t, p in layouts]
    # degrees given (--tensor-parallel ...) are fixed: only the layouts that match them
    queue = [lay for lay in queue if req.layout_allowed(*lay)]
    ulysses_added = False
    qi = 0
    while True:
        if qi == len(queue):
            if ulysses_added:
                break
            # DeepSpeed-Ulysses only helps where activations bind (compute per rank is the same as
            # data parallelism; it adds all-to-alls): searched when nothing fits or the fastest plan
            # recomputes, e.g. at long sequences
            ulysses_added = True
            fastest_now = min(ranked, key=lambda c: c.step_time_s) if ranked else None
            if fastest_now is None or fastest_now.checkpointing != "none" or (req.sequence_parallel or 1) > 1:
                queue += [(1, 1, u) for u in ulysses_degrees(inv, req) if req.layout_allowed(1, 1, u)]
            if qi == len(queue):
                break
        if qi and queue[qi - 1][0] * queue[qi - 1][1] > 1:
            # memory: the layout searched, and its tensor-parallel shards once no layout left to search shares them
            forget_shard(inv, queue[qi - 1][0], queue[qi - 1][1],
                         split=all(lay[0] != queue[qi - 1][0] for lay in queue[qi:]))  # (issue 21)
        tp, pp, sp = queue[qi]
        qi += 1
        mdp = req.world_size // (tp * pp * sp)
        per_rank = req.global_batch // mdp
        if ranked and tp * pp * sp > 1:
            # a plan whose time leaves out a part (unknown) is no bound to prune by, unless all are
            best_s = min(c.step_time_s for c in ([c for c in ranked if not c.unknown] or ranked))
            lb = bounds[(tp, pp)] if sp == 1 else layout_lower_bound(inv, hardware, req, 1, 1)
            if lb is not None and lb > best_s * (1 + req.tie_tolerance):
                if sp == 1:
                    skipped.append((tp, pp, lb))
                continue
        cluster = Cluster(world_size=req.world_size, gpus_per_node=req.gpus_per_node, tensor_parallel=tp,
                          pipeline_parallel=pp, sequence_parallel=sp, megatron_sequence_parallel=tp > 1,
                          omp_threads=req.omp_threads, omp_threads_source=req.omp_threads_source)
        size_inv = inv if tp * pp == 1 else _shard_inventory(inv, tp, pp)
        want_micro = req.micro_batch or least_exposed.get("micro_batch")
        micros = [m for m in divisors_cached(per_rank) if want_micro is None or m == want_micro]
        if not micros:  # --micro-batch does not divide this layout's sequences per rank
            continue
        fixed_ck = req.checkpointing or least_exposed.get("checkpointing")
        Ls = -(-L // pp)  # layers of the largest stage (runtime/utils.py:partition_uniform)
        if fixed_ck is not None and fixed_ck.isdigit() and int(fixed_ck) > Ls:
            continue  # K checkpointed layers of a stage that holds fewer (advisor.model.activations)
        layout_combos = combos if pp == 1 else [c for c in combos if c.stage <= 1]  # G001: PP with ZeRO-0/1 only
        for combo in layout_combos:
            # The ledger's entries depend on the config only through the stage, offload and whether
            # GA > 1 (advisor.ledger.state: no micro-batch or recompute term), so its roles are computed
            # once per (combo, GA > 1) and given to each plan's own Ledger (its timeline reads that
            # plan's GA). Not under pipeline parallelism: its pipe buffers are b x s x h x D each and
            # max(2, min(stages - stage, GA)) of them (state.pipeline_stage_entries, pipe_buffers_used), so
            # there the roles are per (GA, micro-batch) -- shared across micro-batches, a PP plan at GA 2
            # and b 8 took b 1's buffers: gpt2 on 2 ranks, PP 2, accelerator 11.72 GB where estimate says 12.57.
            led_cache: dict[Any, Ledger] = {}

            def led_key(b: int, ga: int) -> Any:
                return ga > 1 if pp == 1 else (ga, b)
            fitting: list[Candidate] = []
            done: dict[tuple[int, str], Candidate] = {}  # (micro-batch, recompute) -> its fitted candidate

            def evaluate(b: int, ck: str) -> Candidate:
                nonlocal evaluated
                if (b, ck) in done:
                    return done[(b, ck)]
                ga = per_rank // b
                cfg = build_config(combo, b, ga, mdp, ck, size_inv, req, nvme_path, sp=sp, pp=pp)
                plan = Plan(effective_config(cfg), inv, cluster, Workload(req.seq_len, b, ck, req.attention,
                                                                          moe_capacity_factor=req.moe_capacity_factor))
                hit = led_cache.get(led_key(b, ga))
                shared_key = dp_key = None
                if hit is not None:
                    plan.derived["ledger"] = Ledger(plan, hit.ranks, hit.wrapper, hit.basic_optimizer,
                                                    list(hit.excluded))
                else:
                    got = None
                    if tp * pp == 1 and SHARE_LEDGERS:
                        dp_key = _dp_ledger_key(cfg, cluster)
                        got = dp_ledgers.get(dp_key)
                    if got is None and _SHARED_LEDGERS is not None:
                        shared_key = _ledger_key(cfg, cluster, plan.workload)
                        got = _SHARED_LEDGERS.get(shared_key)
                    if got is not None and unsupported_reason(plan.config, cluster.dp_world_size) is None:
                        plan.derived["ledger"] = Ledger(plan, got[0], got[1], got[2], list(got[3]), got[4])
                load = resolve_load(plan.config, req.zero_init, req.load_dtype, req.low_cpu_mem_usage, hf=req.hf,
                                    checkpoint_dtype=ckpt_dtype, pipeline_build=req.pipeline_build,
                                    pipeline_parallel=plan.cluster.pipeline_parallel)
                pf = plan_fit(plan, cap, overhead, load=load, hf=req.hf, activations_floor=False)
                evaluated += 1  # counted once fitted (a WorkLimitError drops the whole combo)
                led_cache.setdefault(led_key(b, ga), pf.ledger)
                if shared_key is not None or dp_key is not None:
                    led = pf.ledger  # its roles only: the Ledger holds its plan and every figure derived from it
                    roles = (led.ranks, led.wrapper, led.basic_optimizer, tuple(led.excluded), led.peak_lower_bound)
                    if dp_key is not None:
                        dp_ledgers.setdefault(dp_key, roles)
                    if shared_key is not None:
                        _SHARED_LEDGERS.setdefault(shared_key, roles)
                rows = {r.tier: r for r in pf.rows}
                a = pf.activations
                cand = Candidate(combo, b, ga, ck, tp=tp, pp=pp, sp=sp, accelerator=rows["accelerator"].need,
                                 host=rows["host"].need if "host" in rows else 0,
                                 nvme=rows["nvme"].need if "nvme" in rows else 0,
                                 activations=_peak_activations(pf),
                                 states_source="estimate's fit (advisor.views.estimate.plan_fit)")
                cand.rejection = _rejection(pf)
                # activations_floor=False above keeps such a plan rankable (its verdict would be at best
                # tight); its need is a floor all the same, and says so
                cand.accelerator_lower_bound = pf.activations_note if a is None else ""
                if cand.accelerator_lower_bound and cand.rejection is not None and cand.rejection.tier == "accelerator":
                    cand.rejection.activations_unknown = cand.rejection.lower_bound = True
                cand.config = cfg
                fitted[id(cand)] = (plan, a)
                done[(b, ck)] = cand
                return cand

            # The combo's least memory: the smallest micro-batch, every layer recomputed (memory grows
            # with b and with what recompute keeps; under 1F1B min(P - stage, G / b) x b in flight
            # grows with b too). If even that does not fit, no plan of the combo does: one fit, not
            # one per micro-batch and recompute setting.
            # Probed only when the search's own first plan (the largest micro-batch, no recompute)
            # does not fit: a combo whose first plan fits needs no probe.
            try:
                probe = None
                if evaluate(micros[-1], fixed_ck or "none").rejection is not None:
                    probe = evaluate(micros[0], fixed_ck or "full")
            except WorkLimitError as e:
                limited.append(f"{e} (offload {combo.label()}" + (f", TP {tp} x PP {pp})" if tp * pp > 1 else ")"))
                continue
            if probe is not None and probe.rejection is not None:
                rejected.extend(done.values())  # the first plan and the probe: neither fits
                continue
            chosen_at: dict[int, Candidate | None] = {}  # micro-batch -> the setting chosen there (None: none fits)
            # what the plans fitted so far imply (micro_batch_representatives: memory grows with b within a GA
            # range, and falls as k of L grows): (GA range, b, setting) fitted and fitting / not fitting
            fit_at: list[tuple[int, int, str]] = []
            miss_at: list[tuple[int, int, str]] = []
            acts_of: dict[str, Any] = {}  # setting -> an ActivationEstimate of it (its recompute fraction: no b term)

            def judged(b: int, ck: str) -> Candidate:
                """``evaluate(b, ck)``, or in the "pieces" search a stand-in (not fitted, not counted) where
                a plan fitted already decides it: one of the same setting at a larger b of the same GA
                range (or with k of L, fewer layers) fits, or one at a smaller b (more layers) does not
                (:func:`implied_fit`)."""
                if MICRO_BATCH_SEARCH != "exhaustive" and (b, ck) not in done:
                    g = min(per_rank // b, 3)
                    if any(implied_fit(g2, b2, ck2, g, b, ck) is False for g2, b2, ck2 in miss_at):
                        stub = Candidate(combo, b, per_rank // b, ck, 0, 0, 0, 0, "implied", tp=tp, pp=pp, sp=sp)
                        stub.rejection = Rejection("accelerator", 0, None, "implied")
                        return stub
                    if ck in acts_of and any(implied_fit(g2, b2, ck2, g, b, ck, fits=True) for g2, b2, ck2 in fit_at):
                        stub = Candidate(combo, b, per_rank // b, ck, 0, 0, 0, 0, "implied", tp=tp, pp=pp, sp=sp)
                        fitted[id(stub)] = (None, acts_of[ck])
                        return stub
                c = evaluate(b, ck)
                (fit_at if c.rejection is None else miss_at).append((min(per_rank // b, 3), b, ck))
                acts_of.setdefault(ck, fitted[id(c)][1])
                return c

            def choose(b: int) -> Candidate | None:
                """The plan of micro-batch ``b``: --checkpointing's setting if it fits, else the recompute
                setting with the least extra FLOPs that fits (:func:`cheapest_recompute`); None: none fits."""
                if b not in chosen_at:
                    if fixed_ck is not None:  # --checkpointing given: that setting, not the search
                        c = judged(b, fixed_ck)
                        chosen_at[b] = c if c.rejection is None else None
                    elif (MICRO_BATCH_SEARCH != "exhaustive" and judged(b, "none").rejection is not None
                          and judged(b, "full").rejection is not None):
                        chosen_at[b] = None  # every layer recomputed keeps the least: nothing fits (the probe's premise)
                    else:
                        chosen_at[b] = cheapest_recompute(recompute_settings(Ls, req.hf), Ls,
                                                          lambda ck: judged(b, ck), lambda c: fitted[id(c)][1])
                return chosen_at[b]

            try:
                if MICRO_BATCH_SEARCH == "exhaustive":  # the reference: every divisor (tests compare)
                    fitting = [c for c in (choose(b) for b in reversed(micros)) if c is not None]
                else:
                    fitting = micro_batch_representatives(micros, per_rank, choose, pp > 1)
                    # a representative implied to fit is fitted now (its figures and step time); one that did
                    # not fit would break the monotony the search rests on: not ranked, counted rejected
                    fitting = [c if (c.micro, c.checkpointing) in done else evaluate(c.micro, c.checkpointing)
                               for c in fitting]
                    fitting = [c for c in fitting if c.rejection is None]
            except WorkLimitError as e:
                # past a work limit for this stage over this world size (it does not depend on the
                # micro-batch, so it is the combo's first plan): the combo is not searched, and says why
                limited.append(f"{e} (offload {combo.label()}" + (f", TP {tp} x PP {pp})" if tp * pp > 1 else ")"))
                fitting = []
            # every plan fitted is counted once: ranked (``fitting``), superseded (fits, not ranked: a setting with
            # fewer extra FLOPs fits at its micro-batch, or its setting is ranked at a micro-batch whose step is
            # no slower, micro_batch_representatives) or rejected (does not fit, or tight)
            ranked_ids = {id(c) for c in fitting}
            for c in done.values():
                if id(c) in ranked_ids:
                    continue
                if c.rejection is None:
                    superseded += 1
                else:
                    rejected.append(c)
            for cand in fitting:
                plan, a = fitted[id(cand)]
                parts = step_time(plan, hardware, req, a.recompute_flops_fraction if a is not None else 0.0,
                                  threads_notes)
                cand.step_time_s = parts.pop("total")
                cand.recompute = a.recompute_flops_fraction if a is not None else 0.0
                cand.unknown = list(parts.pop("unknown", []))  # type: ignore[arg-type]
                cand.cpu_optimizer = {k: parts.pop(k) for k in ("cpu_optimizer_bytes_per_rank",
                                                                  "cpu_optimizer_bytes_per_s_per_rank",
                                                                  "cpu_optimizer_threads_limited") if k in parts}
                cand.parts = parts
                ranked.append(cand)
            fitted.clear()  # the combo's plans (ledgers, timelines) are not read again: memory (issue 21)
    if queue and queue[-1][0] * queue[-1][1] > 1:
        forget_shard(inv, queue[-1][0], queue[-1][1], split=True)
    # "not needed" only where data parallelism was searched: a global batch it cannot hold (not a
    # multiple of the world) leaves only model-parallel layouts, and the best plan is one of them
    if skipped and (1, 1) in layouts and len(skipped) == len(layouts) - 1:
        notes.append(f"tensor/pipeline parallelism considered, not needed: each of its {len(skipped)} layouts has a "
                     "step-time lower bound slower than the best data-parallel plan (JSON: pruned_layouts)")
    elif skipped:
        notes.append(f"{len(skipped)} tensor/pipeline-parallel layouts not evaluated: even their lower bound (compute "
                     "/ (t x p) with the 1F1B bubble at micro-batch 1, plus the tensor-parallel all-reduces) is slower "
                     "than the best plan: " + ", ".join(f"TP {t} x PP {p} ({seconds_text(lb)} s)" for t, p, lb in skipped))
    if limited:
        notes.append(f"{len(limited)} stage/offload combinations not evaluated (over a documented work limit): "
                     + "; ".join(dict.fromkeys(limited)))
    ranked = rank(ranked, req.tie_tolerance)
    notes.extend(unknown_notes(ranked))
    if any(c.cpu_optimizer.get("cpu_optimizer_threads_limited") for c in ranked[:top]):
        notes.extend("CPU optimizer step: " + n for n in sorted(threads_notes))
    if ranked and nvme_path and "nvme" in (ranked[0].combo.offload_optimizer, ranked[0].combo.offload_param):
        notes.append(nvme_path_note(nvme_path, tier))
    if ranked and ranked[0].checkpointing != "none" and not req.hf and "checkpointing" not in least_exposed:
        notes.append(sac_note(ranked[0].checkpointing))  # not where full recompute was fixed, not searched
    result = SearchResult(req, hardware, inv, ranked, rejected, nvme_path, notes, evaluated=evaluated,
                          superseded=superseded, layouts=len(layouts), pruned_layouts=skipped,
                          activations_unknown=unknown_acts, least_exposed=least_exposed)
    _explain_ranks(result)
    if req.hf and ranked:
        for c in ranked[:top]:
            c.config = build_config(c.combo, c.micro, c.ga, req.world_size // (c.tp * c.pp * c.sp), c.checkpointing,
                                    inv, req, nvme_path, hf=True, sp=c.sp, pp=c.pp)
    return result


def unknown_notes(ranked: list[Candidate]) -> list[str]:
    """What generate says when the hardware spec lacks a rate some step-time part needs
    (:func:`rank`'s ``unknown`` / ``incomplete``): the parts every plan's time leaves out (ranked
    on the others; the times are lower bounds), and the parts only some plans need (those plans
    ranked after the complete ones)."""
    if not ranked:
        return []
    out = []
    common = [k for k in PART_NAMES if all(k in c.unknown for c in ranked)]
    if common:
        out.append(f"step time leaves out {unknown_words(common)} for every plan: the hardware spec gives no rate "
                   "for it, so each step time counts it at 0 or at a lower bound (the CPU step at its OpenMP threads' "
                   "rate) and is a lower bound (>=), plans ranked on what is known; add it to a --hardware JSON to "
                   "rank by it")
    extra = [c for c in ranked if c.incomplete]
    if extra:
        parts = [k for k in PART_NAMES if any(k in c.unknown and k not in common for c in extra)]
        out.append(f"{len(extra)} plan{'s' if len(extra) != 1 else ''} need{'s' if len(extra) == 1 else ''} "
                   f"{unknown_words(parts)}, which the hardware spec gives no rate for: "
                   f"{'its' if len(extra) == 1 else 'their'} step time leaves it out or counts a lower bound of it "
                   "(>=), so "
                   f"{'it is' if len(extra) == 1 else 'they are'} ranked after the plans whose time is complete, "
                   "marked incomplete")
    return out


def sac_note(checkpointing: str) -> str:
    """What generate says when its best plan recomputes (``checkpointing`` not none): the search
    covers none, selective, k of L and full only. Op-level selective checkpointing (SAC, torch's
    choice of the ops to keep, :mod:`advisor.engine.sac`) needs torch and transformers to record
    the model's ops, and generate never imports them (tests/test_architecture.py); nor can a
    DeepSpeed config express it: it is applied in the training script, through
    ``torch.utils.checkpoint``'s ``context_fn`` (``create_selective_checkpoint_contexts``).
    So the note points to estimate's trace mode, which can choose and emit such a policy."""
    return (f"recompute searched among none, selective, k of L and full (chosen: {checkpointing}); op-level "
            "selective checkpointing (SAC) may keep more for less recompute: check the written config with "
            "estimate --activations trace --checkpointing sac:BUDGET (a fraction of each layer) or sac:SIZE (the "
            "whole model's activation budget, e.g. sac:20GiB), which emits the policy to apply in the training "
            "script (torch.utils.checkpoint context_fn); needs the sac extra")


def recompute_settings(layers: int, hf: bool = False) -> tuple[str, ...]:
    """Recompute settings generate tries, cheapest first (extra FLOPs:
    :data:`advisor.model.activations.RECOMPUTE_ORDER`); ``layers`` stands for the k-of-L
    search. The HF Trainer's ``gradient_checkpointing`` checkpoints every layer: none and full."""
    if hf:
        return ("none", "full")
    return tuple(m for m in ("none", "selective", "layers", "full") if m != "layers" or layers >= 2)


def cheapest_recompute(settings: tuple[str, ...], layers: int, candidate: Any, activations_of: Any) -> Any:
    """The recompute setting with the least extra FLOPs among those that fit, or None.

    ``settings``: :func:`recompute_settings`; ``layers``: the largest pipeline stage's layers
    (K runs 1..layers-1); ``candidate(ck)`` evaluates one setting and returns a Candidate
    (``rejection`` None when it fits); ``activations_of(c)`` its ActivationEstimate, whose
    ``recompute_flops_fraction`` (:func:`advisor.model.activations.estimate_activations`, from
    :mod:`advisor.model.flops`: k of L one more forward of k / L of the layers, 2 N_layers +
    attention / 3 per token; selective the attention core's forward, attention / 3; over the
    step's 6 N + attention) is the cost. ``none`` is tried first and wins when it fits. Otherwise
    selective (it recomputes the attention core of every layer, L x 4 s h, which at long
    sequences costs more than a few whole layers) and the fewest layers K that fit (binary
    search: memory falls and FLOPs grow as K grows, so the smallest K that fits is the cheapest
    K) are both evaluated, and full only when no K < layers fits (full recomputes more than
    any K); of those that fit, the least FLOPs wins (a tie: the order of
    :data:`advisor.model.activations.RECOMPUTE_ORDER`)."""
    if "none" in settings:
        c = candidate("none")
        if c.rejection is None:
            return c
    fits = []
    if "selective" in settings:
        c = candidate("selective")
        if c.rejection is None:
            fits.append(c)
    best_k = None
    if "layers" in settings:
        lo, hi = 1, layers - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            c = candidate(str(mid))
            if c.rejection is None:
                best_k, hi = c, mid - 1
            else:
                lo = mid + 1
        if best_k is not None:
            fits.append(best_k)
    if "full" in settings and best_k is None:
        c = candidate("full")
        if c.rejection is None:
            fits.append(c)

    def cost(c: Any) -> tuple:
        a = activations_of(c)
        return (a.recompute_flops_fraction if a is not None else 0.0, recompute_rank(c.checkpointing))

    return min(fits, key=cost) if fits else None


def recompute_rank(checkpointing: str) -> int:
    """0 none, 1 selective, 2 k of L, 3 full: the tie-break order (cheapest recompute first)."""
    from advisor.model.activations import RECOMPUTE_ORDER, parse_checkpointing

    return RECOMPUTE_ORDER.index(parse_checkpointing(checkpointing)[0])


def simplicity(c: Candidate) -> tuple:
    """Tie-break key, simplest first: less model parallelism (t x p: tensor and pipeline parallelism
    need a Megatron-style model), fewer offloads (each adds host and link load the model only
    approximates), less recomputation (its FLOPs fraction, :attr:`Candidate.recompute`, then the
    kind: none, selective, k of L, full), lower ZeRO stage (fewer collectives and hooks), then the
    faster plan (a larger micro-batch only when the times are equal). Recompute comes before the
    stage: a ZeRO-2 plan recomputing layers is no simpler than a ZeRO-3 plan recomputing none."""
    offloads = (c.combo.offload_optimizer != "none") + (c.combo.offload_param != "none")
    return (c.tp * c.pp * c.sp, offloads, c.recompute, recompute_rank(c.checkpointing), c.combo.stage,
            c.step_time_s, -c.micro)


def rank(cands: list[Candidate], tolerance: float = 0.03) -> list[Candidate]:
    """Best first. Plans within ``tolerance`` (a fraction, default 3 %) of the fastest step time
    are a tie (finer differences are below the cost model's resolution: it leaves latency and
    kernel overheads out): the simplest of them (:func:`simplicity`) goes first, and is the config
    written; every other plan follows by step time, equal times simplest first.

    A part whose rate the hardware spec lacks (``Candidate.unknown``) counts 0 in a step time, so
    times are compared only over the same parts: the plans whose unknown parts are the ones every
    plan shares (none, when the spec is complete) are ranked as above; a plan whose time also
    leaves out another part (e.g. the CPU optimizer step without a host memory bandwidth, which
    only the offloading plans have) is ``incomplete`` and follows them, ranked the same way among
    themselves (its time is a lower bound)."""
    if not cands:
        return []
    common = set(cands[0].unknown).intersection(*(set(c.unknown) for c in cands[1:]))
    for c in cands:
        c.incomplete = set(c.unknown) != common
    full = [c for c in cands if not c.incomplete]
    part = [c for c in cands if c.incomplete]
    return _rank_times(full, tolerance) + _rank_times(part, tolerance)


def _rank_times(cands: list[Candidate], tolerance: float) -> list[Candidate]:
    """:func:`rank`'s order within plans whose step times cover the same parts: first the
    simplest plan (:func:`simplicity`) within ``tolerance`` of the fastest, the one a tie gives
    the config; then every other plan by step time, equal times simplest first. So a plan the
    model finds faster than the first one (an optimizer offload whose freed memory removes
    recomputation, a tensor-parallel layout) is listed right after it, with what it spends
    (:func:`_explain_ranks`), not below slower, simpler plans."""
    if not cands:
        return []
    fastest = min(c.step_time_s for c in cands)
    first = min((c for c in cands if c.step_time_s <= fastest * (1 + tolerance)), key=simplicity)
    rest = sorted((c for c in cands if c is not first), key=lambda c: (c.step_time_s, simplicity(c)))
    return [first] + rest


def _explain_ranks(res: SearchResult) -> None:
    """Fill each ranked plan's ``why``: the best names what bounds it (and, when it won a tie, the
    fastest plan); every other names what its step spends against the best, each part's exposed
    seconds more (+) or less (-) than the best's, largest first: its CPU optimizer step with the
    bytes it streams per rank and the rate per rank it assumes (:func:`_cpu_rate_words`), the
    recompute a plan adds or saves. A plan within the tie tolerance of the fastest also says why it
    is not first (:func:`_tie_reason`); one faster than the best says by how much."""
    if not res.ranked:
        return
    best = res.ranked[0]
    names = PART_NAMES
    tol = res.request.tie_tolerance
    # every plan can be incomplete (two plans each missing a different part): then all are compared
    pool = [c for c in res.ranked if not c.incomplete] or res.ranked
    fastest_c = min(pool, key=lambda c: c.step_time_s)
    fastest = fastest_c.step_time_s
    bound = max(names, key=lambda k: best.parts.get(k, 0))
    won = best.step_time_s == fastest
    best.why = (f"{'fastest' if won else f'within {tol:.0%} of the fastest and simplest'}; "
                f"{names[bound]} {seconds_text(best.parts.get(bound, 0))} s of {seconds_text(best.step_time_s)} s"
                + ("" if won else f"; the fastest is #{res.ranked.index(fastest_c) + 1} ({seconds_text(fastest)} s)"))
    res_s = time_resolution(best.step_time_s)
    common = set(best.unknown)
    for c in res.ranked[1:]:
        if c.incomplete:
            c.why = (f"incomplete: {unknown_words([k for k in c.unknown if k not in common])} unknown; ranked after "
                     "the plans whose step time is complete")
            continue
        spent = _delta_words(c, best, res_s)
        # faster than #1 by more than the resolution: #1 won the tie (within tol of the fastest) as the simpler plan
        if c.step_time_s < best.step_time_s - res_s:
            template = (f"faster than #1 by {seconds_text(best.step_time_s - c.step_time_s)} s (within {tol:.0%}: #1 is "
                        f"simpler, this one {_tie_reason(c, best, res.request.world_size)})" + (f": {spent}" if spent else ""))
        elif c.step_time_s <= best.step_time_s + res_s:
            template = f"as fast as #1 (this one {_tie_reason(c, best, res.request.world_size)})" + (f": {spent}" if spent else "")
        else:
            template = (spent or f"+{seconds_text(c.step_time_s - best.step_time_s)} s") \
                + (f"; within {tol:.0%} of the fastest" if c.step_time_s <= fastest * (1 + tol) else "")
        if "{amount" in template:
            _why(c, template, c.cpu_optimizer)
        else:
            c.why, c.why_sized = template, None


def _cpu_words(seconds: float, co: dict, sign: str = "+", upper: bool = False) -> str:
    """A CPU optimizer step's seconds, the bytes it streams per rank and its rate per rank (a sized
    template: ``{amount}``, ``{rate}``, :func:`_why`); ``upper``: the rate is only an upper limit
    (its step time a lower bound, :func:`unknown_parts`), written "at <="."""
    return (f"{sign}{seconds_text(seconds)} s CPU optimizer step ({{amount:1}} per rank at {'<= ' if upper else ''}{{rate:1/s}} "
            f"{_cpu_rate_words(co)})")


def _delta_words(c: "Candidate", best: "Candidate", res_s: float | None = None) -> str:
    """What plan ``c`` spends against ``best``: each part whose exposed seconds differ by more than
    ``res_s`` (default :func:`time_resolution` of the best's step time), more (+) first, largest first, then
    less (-), as a sized template (braces doubled except the CPU step's ``{amount}`` / ``{rate}``)."""
    names = PART_NAMES
    if res_s is None:
        res_s = time_resolution(best.step_time_s)
    deltas = {k: c.parts.get(k, 0) - best.parts.get(k, 0) for k in names}
    more = sorted((k for k in names if deltas[k] > res_s), key=lambda k: -deltas[k])
    less = sorted((k for k in names if deltas[k] < -res_s), key=lambda k: deltas[k])
    out = []
    for k in more + less:
        d = deltas[k]
        sign = "+" if d > 0 else "-"
        if k == "cpu_optimizer" and c.cpu_optimizer and d > 0:
            out.append(_cpu_words(d, c.cpu_optimizer, sign, "cpu_optimizer" in c.unknown))
            continue
        word = names[k]
        if k == "compute" and c.recompute != best.recompute and (d > 0) == (c.recompute > best.recompute):
            word = (f"recomputation (checkpointing {c.checkpointing} vs {best.checkpointing})" if d > 0 else
                    f"compute (recomputes less: checkpointing {c.checkpointing} vs {best.checkpointing})")
        elif k == "network" and d > 0 and c.ga > best.ga and c.combo.stage >= 2:
            word = f"collectives (GA {c.ga}: a reduction per micro-step)"
        out.append(f"{sign}{seconds_text(abs(d))} s {word}")
    return ", ".join(out)


def _tie_reason(c: "Candidate", best: "Candidate", world_size: int) -> str:
    """What makes a plan within the tie tolerance less simple than the best: the first key of
    :func:`simplicity` in which it is, in words (completing "this one ...").

    A higher ZeRO stage shards more only over a data-parallel size (``world_size`` / (t x p x sp)) above 1:
    ZeRO partitions states over the data-parallel group (``runtime/zero/stage_1_and_2.py`` l.289-294: ``dp_size =
    dist.get_world_size(group=self.dp_process_group)``, ``partition_count = [dp_size ...]``), so at data-parallel size 1 each partition is the
    whole; the stage then changes only DeepSpeed's optimizer wrapper and its hooks, and says so."""
    a, b = simplicity(c), simplicity(best)
    if a[0] > b[0]:
        return f"is model parallel ({c.layout()})"
    if a[1] > b[1]:
        return "offloads more"
    if a[2:4] > b[2:4]:
        return (f"recomputes more: checkpointing {c.checkpointing}, {c.recompute:.1%} of the step's FLOPs"
                f" vs {best.recompute:.1%}")
    if a[4] > b[4]:
        # a[0] == b[0] here: the same t x p x sp, so the same data-parallel size as the best
        if world_size // max(1, c.tp * c.pp * c.sp) > 1:
            return f"shards more: ZeRO-{c.combo.stage}"
        return (f"runs a higher ZeRO stage (ZeRO-{c.combo.stage} vs ZeRO-{best.combo.stage}), which shards nothing at "
                "data-parallel size 1: only DeepSpeed's optimizer wrapper and its hooks differ")
    if c.micro < best.micro:
        return f"has the smaller micro-batch ({c.micro})"
    return "is as simple: the search order decides"


# ---------------------------------------------------------------------------------------------
# nothing fits: the smallest change that would


def _cpu_rate_words(co: dict) -> str:
    """What a plan's CPU optimizer rate is: the rank's share of the host memory bandwidth, or what
    its OpenMP threads stream when they limit it (advisor.ledger.steptime.cpu_optimizer_rate; the
    run's notes name the fix)."""
    return ("per rank, its OpenMP threads' limit" if co.get("cpu_optimizer_threads_limited")
            else "host memory per rank")


def _why(c: "Candidate", template: str, co: dict | None) -> None:
    """Set ``c.why`` from a sized template naming the CPU optimizer step's bytes per rank
    (``{amount}``) and bytes/s per rank (``{rate}``), kept for the table's ``--units``."""
    from advisor.findings import render_sized
    from advisor.units import DEFAULT_UNITS

    sizes = {"amount": co["cpu_optimizer_bytes_per_rank"], "rate": co["cpu_optimizer_bytes_per_s_per_rank"]} \
        if co else {}
    c.why, c.why_sized = render_sized(template, sizes, DEFAULT_UNITS), (template, sizes)


def load_suggestion(inv: Inventory, hardware: Any, req: Request, rejected: list[Candidate]) -> tuple[str, dict] | None:
    """When the load phase is what does not fit: the load flag (``--load-dtype`` the training precision,
    ``--zero-init``, ``--low-cpu-mem-usage``) with which a plan of the same request fits, or None.

    Asked only where a rejected plan's binding row peaks in the load phase and fits without it
    (:attr:`Rejection.load_binds`: every rank materialises the whole model before deepspeed.initialize
    partitions it, :func:`advisor.ledger.timeline.resolve_load`); each option is then proven by a
    re-search of the request with it (:func:`search`, estimate's fit), so a suggestion always names a
    plan that fits. The options are only those the request does not already take: 16-bit weights
    (``from_pretrained(torch_dtype=torch.bfloat16)`` halves the fp32 copy; with fp32 training there is
    none), deepspeed.zero.Init (partitions at construction, ZeRO-3 only: ``runtime/zero/partition_parameters.py``
    ``Init``; pipeline parallelism runs at ZeRO 0-1, ``runtime/pipe/engine.py`` l.75-77), one copy of
    the weights while loading, and under ``--pipeline-build whole`` the stage built from LayerSpecs
    (``--pipeline-build stage``: each rank builds only its stage's layers, ``runtime/pipe/module.py``
    PipelineModule._build l.235-276, :data:`advisor.ledger.timeline.PIPELINE_STAGE_LOAD`). One at a time,
    then all together when none fits alone."""
    bound = [c.rejection for c in rejected if c.rejection is not None and c.rejection.load_binds]
    # --pipeline-build whole: the other stages' layers stay in host memory after the load too
    # (timeline.PIPELINE_WHOLE_LOAD), so a host rejection of a pipeline plan is theirs even where the load is
    # not its peak
    kept = [c.rejection for c in rejected if c.rejection is not None and c.rejection.tier == "host" and c.pp > 1
            ] if req.pipeline_build == "whole" else []
    if not bound and not kept:
        return None
    options: list[tuple[str, dict[str, Any]]] = []
    if bound:  # the load's own options help only where the load is the peak
        if req.precision in ("bf16", "fp16") and req.load_dtype != req.precision:
            options.append((f"--load-dtype {req.precision}", {"load_dtype": req.precision}))
        if req.zero_init is False:
            options.append(("--zero-init", {"zero_init": True}))
        if req.low_cpu_mem_usage is False:
            options.append(("--low-cpu-mem-usage", {"low_cpu_mem_usage": True}))
    if kept:
        options.append(("--pipeline-build stage", {"pipeline_build": "stage"}))
    tries = options + ([(" ".join(f for f, _ in options), {k: v for _, kw in options for k, v in kw.items()})]
                       if len(options) > 1 else [])
    worst = min(bound or kept, key=lambda r: r.need - r.usable)  # the closest, as the rejected line names it
    for flags, kw in tries:
        res = search(inv, hardware, replace(req, **kw), top=1)
        if res.best:
            b = res.best
            where = "" if b.layout() == "-" else f"{b.layout()}, "
            torch_dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(kw.get("load_dtype", ""))
            how = f" (from_pretrained(..., torch_dtype=torch.{torch_dtype}))" if torch_dtype else ""
            if kw.get("pipeline_build") == "stage":
                how += " (PipelineModule(layers=[LayerSpec(...), ...]): each rank builds only its stage)"
            what = (f"the load phase is what does not fit (the weights as loaded, before deepspeed.initialize "
                    f"partitions them: {worst.tier} {worst.scope} " + "{load:1}, {steady:1} without it)" if bound else
                    f"the model built whole is what does not fit (every rank loads the whole model and keeps the "
                    f"other stages' layers in host memory: {worst.tier} {worst.scope} " + "{load:1} at its peak, "
                    "{steady:1} after the load)")
            return (what + f": {flags}{how} fits with {where}ZeRO-{b.combo.stage} {b.combo.label()}, micro-batch {b.micro} "
                    f"x GA {b.ga}, checkpointing {b.checkpointing}: " + "{accelerator:1} per GPU",
                    {"load": worst.need, "steady": worst.steady_need, "accelerator": b.accelerator})
    return None


def suggest(inv: Inventory, hardware: Any, req: Request,
            rejected: list[Candidate] | None = None) -> list[tuple[str, dict]]:
    """When nothing fits: (0) with the search's ``rejected`` plans, the load flag that fits when the
    load phase binds (:func:`load_suggestion`); (1) the fewest nodes (same GPUs per node, same global batch, so the
    batch must split evenly) up to 64x the request; (2) a read-write NVMe tier of the size the
    best NVMe plan needs per node, when the hardware has none; (3) the longest sequence length
    (a multiple of 128, or any length below 128) that fits. Each with numbers: (text, sizes), the
    text a sized template (:func:`advisor.findings.render_sized`) naming ``sizes`` in bytes.
    These searches are data parallel only (up to 64 + 20 searches: with every tensor/pipeline
    layout each, minutes): a suggested plan fits, a 3D one might need less. Degrees given
    (--tensor-parallel ...) stay fixed, the others 1: the one layout they name, said in the text."""
    global _SHARED_LEDGERS
    outer = _SHARED_LEDGERS  # the re-searches share ledgers, with run's first search's where it kept them
    _SHARED_LEDGERS = outer if outer is not None else {} if SHARE_LEDGERS else None
    try:
        return _suggest(inv, hardware, req, rejected)
    finally:
        _SHARED_LEDGERS = outer


def _suggest(inv: Inventory, hardware: Any, req: Request, rejected: list[Candidate] | None) -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = []
    mp_searched = req.model_parallel and not req.hf
    loaded = load_suggestion(inv, hardware, req, rejected or [])
    if loaded:
        out.append(loaded)
    fixed = [v for v in (req.tensor_parallel, req.pipeline_parallel, req.sequence_parallel) if v is not None]
    if fixed and max(fixed) > 1:
        # degrees given stay fixed (the one layout they name; data parallelism alone would not be the
        # request, and search refuses it: newcomer genmsg21 saw "--no-model-parallel is set" here)
        req = replace(req, tensor_parallel=req.tensor_parallel or 1, pipeline_parallel=req.pipeline_parallel or 1,
                      sequence_parallel=req.sequence_parallel or 1)
    else:
        req = replace(req, model_parallel=False)
    g = req.gpus_per_node

    def where(b: Candidate) -> str:
        return "" if b.layout() == "-" else f"{b.layout()}, "

    for n in range(req.nodes + 1, req.nodes * 64 + 1):
        r2 = replace(req, nodes=n)
        if request_problem(inv, r2) or not layout_writable(inv, r2):
            continue  # no plan of that shape whatever the memory (e.g. --micro-batch past the sequences per rank)
        res = search(inv, replace(hardware, nodes=n), r2, top=1)
        if res.best:
            b = res.best
            out.append((f"more GPUs: {n} nodes x {g} GPUs ({n * g} ranks, +{(n - req.nodes) * g}) fit with {where(b)}ZeRO-"
                        f"{b.combo.stage} {b.combo.label()}, micro-batch {b.micro} x GA {b.ga}, "
                        f"checkpointing {b.checkpointing}: " + "{accelerator:1} per GPU", {"accelerator": b.accelerator}))
            break
    if choose_nvme_tier(hardware) is None and hardware.host_memory_bytes:
        from advisor.cluster.hardware import StorageTier
        big = StorageTier(name="hypothetical-nvme", mounts=("/local_nvme",), capacity_bytes=10 ** 18,
                          read_bytes_per_s=7e9, write_bytes_per_s=3.8e9, access="read-write")
        res = search(inv, replace(hardware, storage=tuple(hardware.storage) + (big,)), req, top=1)
        if res.best:
            b = res.best
            need = b.nvme
            out.append(("an NVMe tier: a read-write drive of at least {nvme:T} per node (mounted e.g. at "
                        f"/local_nvme) fits with {where(b)}ZeRO-3 {b.combo.label()}, micro-batch {b.micro} x GA {b.ga}, "
                        f"checkpointing {b.checkpointing} " + "({nvme:T} of swap files per node)", {"nvme": need}))
    # a shorter length, never past the model's positions (max_position_embeddings: rule W001)
    u = req.sequence_parallel or 1  # a fixed Ulysses degree: lengths it divides (u x m tokens)
    lo, hi, best_s = 1, req.seq_len - 1, None
    if (inv.meta or {}).get("max_seq_len"):
        hi = min(hi, int(inv.meta["max_seq_len"]))
    hi //= u
    while lo <= hi:
        mid = (lo + hi) // 2
        r2 = replace(req, seq_len=mid * u)
        res = search(inv, hardware, r2, top=1) if layout_writable(inv, r2) else None  # Ulysses: u divides s
        if res is not None and res.best:
            best_s, lo = mid * u, mid + 1
        else:
            hi = mid - 1
    if best_s:
        s = best_s if best_s < 128 else best_s // 128 * 128
        out.append((f"shorter sequence: --seq-len {s} (from {req.seq_len}) fits", {}))
    if not out:
        given = ", ".join(f"{f} {v}" for f, v in (("--tensor-parallel", req.tensor_parallel),
                                                 ("--pipeline-parallel", req.pipeline_parallel),
                                                 ("--sequence-parallel", req.sequence_parallel)) if (v or 1) > 1)
        out.append(("no single change up to 64x the nodes, an NVMe tier or a shorter sequence fits with "
                    + (f"{given} fixed: other degrees or a smaller model" if given else "ZeRO data parallelism: ")
                    + ("" if given else "a smaller model (tensor/pipeline parallelism was searched on the requested "
                                       "nodes too)" if mp_searched else
                                       "use tensor/pipeline parallelism or a smaller model"), {}))
    return out


def request_problem(inv: Inventory, req: Request) -> str | None:
    """Why no plan of the request can exist whatever the memory, naming the flag, or None: checked
    by :func:`run` before the search (exit 2, one line), so that such a request is not reported as
    "no plan fits" with suggestions about memory. Not in :func:`search` itself: :func:`suggest`'s
    searches change the nodes and drop model parallelism, where a layout without plans is skipped.

    - First :func:`layout_problem` (degrees given that are no layout on these ranks, a global batch no
      such layout's data-parallel size divides): the checks below are about the layouts it leaves.
    - ``--checkpointing K`` past the layers a pipeline stage holds: estimate's check,
      :func:`advisor.model.activations.checkpointing_problem` (ceil(L / p) layers per stage,
      ``runtime/utils.py`` partition_uniform l. 606-624), at the pipeline degree given, else 1 (the search's
      most layers per stage).
    - ``--micro-batch b`` dividing no searched layout's sequences per rank: a layout (t, p, u) has
      global batch / (world / (t x p x u)) sequences per rank and its micro-batches are their
      divisors (``train_batch_size = micro x GA x DP``, ``runtime/config.py``
      _batch_assertion l. 590-605); the layouts are the search's (:func:`model_parallel_layouts`,
      :func:`ulysses_degrees`, the degrees given, and the pipeline degrees whose stages hold
      ``--checkpointing K``)."""
    from advisor.model.activations import checkpointing_problem
    problem = layout_problem(inv, req)  # first: the K and micro-batch checks are about the layouts it leaves
    if problem:
        return problem
    ck = req.checkpointing
    if ck is not None:
        problem = checkpointing_problem(ck, inv, req.pipeline_parallel or 1)
        if problem:
            return f"--checkpointing {ck}: {problem}"
    if req.micro_batch is None:
        return None
    L = int((inv.meta or {}).get("num_layers") or 1)
    k = int(ck) if ck is not None and str(ck).isdigit() else 0
    layouts = [(t, p, 1) for t, p in model_parallel_layouts(inv, req)] + [(1, 1, u) for u in ulysses_degrees(inv, req)]
    layouts = [lay for lay in layouts if req.layout_allowed(*lay) and k <= -(-L // lay[1]) and _batch_fits(req, *lay)]
    if not layouts:
        return None  # the degrees given are no layout: search's own refusal names them
    per_rank = sorted({req.global_batch * t * p * u // req.world_size for t, p, u in layouts})
    if any(n % req.micro_batch == 0 for n in per_rank):
        return None
    usable = sorted({d for n in per_rank for d in divisors_cached(n)})
    if len(usable) > 12:  # one line: the usable sizes nearest the one given
        lo = [d for d in usable if d < req.micro_batch][-3:]
        usable = lo + [d for d in usable if d > req.micro_batch][:3]
    return (f"--micro-batch {req.micro_batch} divides no layout's sequences per rank (--global-batch "
            f"{req.global_batch} on {req.world_size} ranks: {', '.join(map(str, per_rank))} per rank in the "
            f"layouts generate can write): use {', '.join(map(str, usable[:-1]))}"
            + (" or " if len(usable) > 1 else "") + str(usable[-1]))


def run(inv: Inventory, hardware: Any, req: Request, top: int = 5) -> SearchResult:
    """:func:`request_problem` (raises AdvisorError), then :func:`search`, plus :func:`suggest`
    when nothing fits (then raises :class:`NothingFits`)."""
    problem = request_problem(inv, req)
    if problem:
        raise AdvisorError(problem)
    global _SHARED_LEDGERS
    outer = _SHARED_LEDGERS
    # the search's ledgers kept for suggest's re-searches (_SHARED_LEDGERS), dropped when a plan fits
    _SHARED_LEDGERS = outer if outer is not None else {} if SHARE_LEDGERS else None
    try:
        res = search(inv, hardware, req, top=top)
        if res.best is not None:
            return res
        res.suggestions_sized = suggest(inv, hardware, req, res.rejected)
    finally:
        _SHARED_LEDGERS = outer
    from advisor.findings import render_sized
    from advisor.units import DEFAULT_UNITS

    res.suggestions = [render_sized(t, s, DEFAULT_UNITS) for t, s in res.suggestions_sized]
    raise NothingFits("no plan fits " + f"{inv.name} on {req.nodes} x {req.gpus_per_node} "
                      f"{hardware.accelerator.name if hardware.accelerator else 'accelerators'}", res)


# ---------------------------------------------------------------------------------------------
# output


SPENT_NAMES = (("compute", "compute"), ("network", "net"), ("pcie", "pcie"), ("nvme", "nvme"),
               ("cpu_optimizer", "cpu-opt"))


def spent_text(c: "Candidate", units: str = "GiB") -> str:
    """What a plan's step spends its time on: each resource's exposed seconds (those > 0); the CPU
    optimizer step's with the bytes it streams per rank and the rate per rank it assumes (in
    ``units``, GiB or GB: :func:`advisor.findings.render_sized`), e.g. "cpu-opt 3.32 (86.2 GiB/rank
    at 26.0 GiB/s)"."""
    from advisor.findings import render_sized

    out = []
    res_s = time_resolution(c.step_time_s)  # a part under the plan's own resolution is not worth a column word
    for k, short in SPENT_NAMES:
        if c.parts.get(k, 0) <= res_s:
            continue
        out.append(f"{short} {seconds_text(c.parts[k])}")
        co = c.cpu_optimizer
        if k == "cpu_optimizer" and co and co.get("cpu_optimizer_bytes_per_s_per_rank"):
            # a rate the spec gives only an upper limit of (no host memory bandwidth): "<="
            out[-1] += render_sized(" ({amount:1}/rank at " + ("<= " if k in c.unknown else "") + "{rate:1/s})",
                                    {"amount": co["cpu_optimizer_bytes_per_rank"],
                                     "rate": co["cpu_optimizer_bytes_per_s_per_rank"]}, units)
    return " ".join(out)


def table_text(res: SearchResult, top: int = 5, units: str = "GiB", cols: int | None = None) -> str:
    """The top plans as a fixed-width table (sizes in ``units``, GiB or GB, via
    :func:`advisor.units.size`; host and NVMe per node), its last column ("why") folded to fit
    ``cols`` columns (:func:`advisor.render.style.columns`; None: not folded). The other lines
    are folded by the caller (:func:`advisor.render.render`)."""
    from advisor.findings import render_sized
    from advisor.units import size, unit_name

    U = unit_name(units)

    def _gb(n: int) -> str:
        return size(n, units, suffix=False, digits=1) if n else "-"

    req = res.request
    acc = res.hardware.accelerator
    head = (f"{res.inventory.name} on {req.nodes} node{'s' if req.nodes != 1 else ''} x {req.gpus_per_node} {acc.name if acc else '?'}; "
            f"global batch {req.global_batch}, sequence {req.seq_len}, {req.precision}, "
            f"{res.evaluated} plans evaluated = {len(res.ranked)} ranked + {res.superseded} superseded (fit, but "
            f"less recompute fits at the same stage, offload and micro-batch, or its setting is ranked at a "
            f"micro-batch no slower) + {len(res.rejected)} rejected (estimate's fit: peak + runtime overhead)")
    lines = [head]
    head_row = ("#", "stage", "offload", "micro", "GA", "ckpt", f"accel {U}", f"host {U}", f"nvme {U}", "step s",
                "exposed s", "why")
    rows = []
    for i, c in enumerate(res.ranked[:top], 1):
        rows.append((str(i), str(c.combo.stage), c.combo.label(), str(c.micro), str(c.ga), c.checkpointing,
                     (">= " if c.accelerator_lower_bound else "") + _gb(c.accelerator), _gb(c.host), _gb(c.nvme),
                     (">=" if c.unknown else "") + seconds_text(c.step_time_s), spent_text(c, units),
                     render_sized(*c.why_sized, units) if c.why_sized else c.why))
    if any(c.tp * c.pp * c.sp > 1 for c in res.ranked[:top]):  # a model-parallel column only when a plan uses it
        head_row = head_row[:1] + ("parallel",) + head_row[1:]
        rows = [r[:1] + (c.layout(),) + r[1:] for r, c in zip(rows, res.ranked[:top])]
    if rows:
        from advisor.render.style import columns
        lines += columns([head_row, *rows], cols=cols)
        lines.append(f"accel: {U} per rank, the need: the peak live bytes + the runtime overhead (estimate's \"need per "
                     f"rank\", above its \"peak live\"); host, nvme: {U} per node, the need; exposed s: the seconds of "
                     "each resource the step waits for"
                     + ("; >=: a lower bound, the activations not counted (warning below)"
                        if any(c.accelerator_lower_bound for c in res.ranked[:top]) else ""))
    by_tier: dict[str, int] = {}
    for c in res.rejected:
        k = c.rejection.tier + (" (tight)" if c.rejection.verdict == "tight" else "")
        by_tier[k] = by_tier.get(k, 0) + 1
    if res.rejected:
        closest = min(res.rejected, key=lambda c: (c.rejection.over or 0) / max(1, c.rejection.usable or 1))
        lines.append(f"rejected: {len(res.rejected)} ("
                     + ", ".join(f"{n} on {t}" for t, n in sorted(by_tier.items()))
                     + f"); closest: ZeRO-{closest.combo.stage} {closest.combo.label()} micro {closest.micro} "
                       f"ckpt {closest.checkpointing}: {closest.rejection.describe(units)}")
    a = res.assumptions()
    lines.append(f"assumptions: MFU {a['mfu']}, peak {(a['peak_flops'] or 0) / 1e12:,.1f} TFLOP/s dense; "
                 f"{a['overlap']}; {a['activations']}; {a['excluded']}")
    for n in res.notes:
        lines.append(f"note: {n}")
    if res.activations_unknown:
        lines.append("warning: " + activations_warning(res))
    b = res.best
    if b is not None:
        if b.sp > 1:
            lines.append(f"note: the best plan uses DeepSpeed-Ulysses sequence parallelism (sequence_parallel_size "
                         f"{b.sp} in the config, data parallel {req.world_size // b.sp}): the model's attention must "
                         "run through deepspeed.sequence.layer.DistributedAttention (HF: UlyssesSPAttentionHF) with "
                         "its sequence-parallel groups; the workload sidecar records it")
        if b.tp * b.pp > 1:
            lines.append(f"note: the best plan is model parallel ({b.layout()}, data parallel "
                         f"{req.world_size // (b.tp * b.pp)}): Megatron-DeepSpeed --tensor-model-parallel-size {b.tp} "
                         f"--pipeline-model-parallel-size {b.pp}" + (" --sequence-parallel" if b.tp > 1 else "")
                         + "; the workload sidecar records it for check and estimate")
        if b.checkpointing == "full":
            lines.append("note: the best plan needs activation checkpointing in the model "
                         "(HF: gradient_checkpointing=True; Megatron-style: deepspeed.checkpointing)")
        elif b.checkpointing == "selective":
            lines.append("note: the best plan needs selective recompute of the attention core "
                         "(Megatron: --recompute-granularity selective)")
        elif b.checkpointing != "none":
            lines.append(f"note: the best plan checkpoints the first {b.checkpointing} layers of each stage "
                         f"(Megatron: --recompute-granularity full --recompute-method block --recompute-num-layers "
                         f"{b.checkpointing}; HF: gradient_checkpointing on those decoder layers only)")
        if req.hf:
            lines.append(f"HF Trainer: per_device_train_batch_size={b.micro}, gradient_accumulation_steps={b.ga}"
                         + (f", {req.precision}=True" if req.precision != "fp32" else "")
                         + (", gradient_checkpointing=True" if b.checkpointing == "full" else ""))
        lines.append("optimizer params are torch.optim.AdamW's defaults: set your own learning rate"
                     if not req.hf else "optimizer params come from the Trainer (\"auto\")")
    for i, s in enumerate(res.suggestions):
        sized = res.suggestions_sized[i] if i < len(res.suggestions_sized) else None
        lines.append(f"suggestion: {render_sized(*sized, units) if sized else s}")
    from advisor.config.versions import release_lines
    return "\n".join(lines + release_lines())


def result_json(res: SearchResult, top: int = 5) -> dict[str, Any]:
    """Machine-readable result: request, assumptions, the top plans with their configs, the
    rejections by tier, suggestions."""
    req = res.request
    return {
        "schema_version": 1,
        "model": {"name": res.inventory.name, "parameters": res.inventory.numel},
        "request": {"nodes": req.nodes, "gpus_per_node": req.gpus_per_node, "global_batch": req.global_batch,
                    "seq_len": req.seq_len, "precision": req.precision, "optimizer": req.optimizer,
                    "hf": req.hf, "zero_init": req.zero_init, "load_dtype": req.load_dtype,
                    "low_cpu_mem_usage": req.low_cpu_mem_usage, "pipeline_build": req.pipeline_build},
        "assumptions": res.assumptions(),
        "evaluated": res.evaluated,
        "superseded": res.superseded,
        "plans": [dict(c.row(), config=c.config) for c in res.ranked[:top]],
        "fitting": len(res.ranked),
        "rejected": [{"tensor_parallel": c.tp, "pipeline_parallel": c.pp, "megatron_sp": c.tp > 1,
                      "sequence_parallel": c.sp, "gradient_accumulation": c.ga, "stage": c.combo.stage, "offload_optimizer": c.combo.offload_optimizer,
                      "offload_param": c.combo.offload_param, "micro_batch": c.micro, "checkpointing": c.checkpointing,
                      "tier": c.rejection.tier, "need": c.rejection.need, "usable": c.rejection.usable,
                      "over": c.rejection.over, "verdict": c.rejection.verdict,
                      # present (true) only where the need leaves out the activations (M104): need/over are floors
                      **({"accelerator_lower_bound": True} if c.rejection.activations_unknown else {})}
                     for c in res.rejected],
        "notes": res.notes,
        "layouts_considered": res.layouts,
        "pruned_layouts": [{"tensor_parallel": t, "pipeline_parallel": p, "lower_bound_step_time_s": lb}
                           for t, p, lb in res.pruned_layouts],
        "suggestions": res.suggestions,
        "best": res.best.config if res.best else None,
        # only when the activations are not counted: absent otherwise (a modelled model's JSON keeps its keys)
        **({"warnings": [activations_warning(res)]} if res.activations_unknown else {}),
    }


def activations_warning(res: SearchResult) -> str:
    """generate's one warning for a model whose activations have no formula (``res.activations_unknown``,
    :func:`advisor.views.estimate.activations_gap`): the family, that no plan counts its activations (each
    accelerator need is a lower bound, rule M104, so check says TIGHT), what the search fixed to be least
    exposed to them (micro-batch 1, full recompute: ``res.least_exposed``) and the command that measures them
    on the written config (estimate --activations trace, which imports torch). The layer inputs full recompute
    keeps, 2 x s x b x h bytes per layer in bf16 (``CheckpointFunction.forward`` saves its args, the layer's
    input, for backward: ``runtime/activation_checkpointing/checkpointing.py`` l.643 in 0.19.8), are among what
    is not counted."""
    import shlex
    why = res.activations_unknown.removeprefix("activations: not estimated (").removesuffix(")")
    why = why.split("; use --activations trace")[0]  # the command is named in full below
    fixed = res.least_exposed
    chose = ", ".join(x for x in (f"micro-batch {fixed['micro_batch']}" if "micro_batch" in fixed else "",
                                  "every layer checkpointed" if "checkpointing" in fixed else "") if x)
    cfg = shlex.quote(res.output) if res.output else "CONFIG"
    model = shlex.quote(res.model_arg or res.inventory.name)
    return (f"{res.inventory.name}: {why}: its activations are not counted in any plan, so each accelerator need is a lower bound (>=), not a fit"
            + (f"; the search fixed {chose}, the least exposure to them (they grow with micro-batch x sequence; "
               "full recompute keeps only each layer's input, by hand 2 x s x b x h bytes per layer in bf16, "
               "not counted either)" if chose else "")
            + f"; measure them: ds-advisor estimate {cfg} --model {model} --activations trace (imports torch); "
              "until then check reports the config TIGHT (M104)")


def config_text(cfg: dict[str, Any]) -> str:
    return json.dumps(cfg, indent=2) + "\n"


