"""Per-process runtime overhead on the accelerator: what a training process holds beyond the
training state the ledger itemises.

Each :class:`OverheadTerm` has a default, an uncertainty band (``low``..``high``), the formula
and the source of its numbers. None of the defaults is calibrated on a GPU by this project yet
(no GPU was available where it was written; ``benchmarks/gpu_peak.py`` is the prepared
calibration run): they are the public figures cited, and the band says how far real runs are
reported to stray. A fit verdict is "tight" when the headroom is smaller than the band's upper
excess (:func:`verdict`), so an uncalibrated term never hides behind a confident "fits".
An accelerator preset (or a hardware spec) may give its own CUDA-context and allocator defaults
(:class:`OverheadDefaults`, applied by :meth:`OverheadSettings.for_hardware`); the built-in
presets hold the generic figures below until a GPU run measures them.

Terms (bytes per process, i.e. per rank):

* ``cuda_context``: the CUDA context with its loaded kernels. About 300-400 MiB since CUDA 11.7
  loads kernels lazily (``CUDA_MODULE_LOADING=LAZY``, PyTorch's default), over 1,000 MiB when
  every kernel is loaded at start (``CUDA_MODULE_LOADING=EAGER``). Sources: pytorch/pytorch
  issue #107667 (maintainer: "~300MB ... before CUDA 11.7 ... >1000MB") and #109888 ("around
  400MB if CUDA >= 11.7 is used and lazy module loading enabled").
* ``nccl``: NCCL's communication buffers, per communicator (process group): for each channel,
  a send and a receive buffer of ``NCCL_BUFFSIZE`` bytes (default 4 MiB) per ring neighbour, for
  the Simple and LL128 protocols: ``2 x channels x NCCL_BUFFSIZE x 2`` per communicator.
  Channels: ``NCCL_MAX_NCHANNELS`` when set, else 16 (band 4-32: NCCL picks them by topology).
  Communicators: the data-parallel group, plus the tensor- and pipeline-parallel groups when
  those degrees exceed 1. Source: NCCL User Guide, Environment Variables (NCCL_BUFFSIZE default
  4194304; NCCL_MIN/MAX_NCHANNELS); the per-communicator formula is this module's reading of
  those documented sizes, not a measurement.
* ``allocator``: the caching allocator's reserve beyond what is allocated (fragmentation:
  ``torch.cuda.max_memory_reserved - max_memory_allocated``), as a fraction of the peak: 10%
  (band 3-25%), or 3% (band 1-10%) when ``PYTORCH_CUDA_ALLOC_CONF`` enables
  ``expandable_segments``, which maps segments that grow instead of caching fixed blocks.
  Source: PyTorch docs, "CUDA semantics - Memory management" (caching allocator,
  expandable_segments); the fractions are assumptions to be replaced by gpu_peak.py's figures.
  At ZeRO stage 3 (without expandable_segments) the band reaches 50% (:data:`ZERO3_ALLOCATOR_HIGH`):
  parameters are gathered and released module by module, the churn the public measurements
  of sharded-parameter training report. meta-llama/llama-cookbook issue #120 (a maintainer's FSDP
  run, 70B on 16 x A100-80GB): max memory allocated 42 GB, max reserved 63 GB (reserved 50% over
  allocated), 58 GB with AnyPrecisionAdamW (38% over); GMLake (Guo et al., ASPLOS 2024,
  arXiv:2401.08156): the caching allocator leaves up to 30% of the reserved memory fragmented
  under recomputation, offloading, distributed training and LoRA on A100-80GB, i.e. reserved up
  to 1/0.7 = 1.43 x allocated. Those are high-water marks on cards with room to spare (the
  allocator frees its cached blocks and retries before it reports an OOM), so they widen the band;
  the default stays 10% until a GPU run (``benchmarks/gpu_peak.py``) measures it.
* ``deepspeed``: DeepSpeed's own extras beyond the ledger. The ledger already itemises
  DeepSpeed's buffers (ipg buckets, gathered parameters, swap buffers, reduce buffers) from
  deepspeed/runtime/zero/*.py; the open-world engine check (``measure``) reports anything it
  allocates that the ledger does not name. One transient it leaves out is counted here
  (:func:`deepspeed_extras`): without ZeRO, the engine's gradient all-reduce flattens buckets of
  up to 5e8 elements (deepspeed/runtime/engine.py allreduce_gradients ->
  buffered_allreduce_fallback, elements_per_buffer=MEMORY_OPT_ALLREDUCE_SIZE = 500000000).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Mapping

MIB = 1 << 20
GIB = 1 << 30
NCCL_BUFFSIZE_DEFAULT = 4 * MIB
NCCL_CHANNELS_DEFAULT, NCCL_CHANNELS_LOW, NCCL_CHANNELS_HIGH = 16, 4, 32
#: Simple and LL128 buffers (LL's is 16x smaller and left in the band).
NCCL_PROTOCOL_BUFFERS = 2
#: The overhead terms, in the fit table's order.
TERMS = ("cuda_context", "nccl", "allocator", "deepspeed")
#: The allocator band's upper fraction at ZeRO stage 3 (reserved beyond allocated, of the tracked
#: peak): meta-llama/llama-cookbook #120, FSDP: max reserved 63 GB / max allocated 42 GB = 1.50;
#: GMLake (arXiv:2401.08156): up to 30% of reserved fragmented = 0.30 / 0.70 = 0.43 of allocated.
ZERO3_ALLOCATOR_HIGH = 0.50
ZERO3_ALLOCATOR_SOURCE = ("ZeRO-3 band: meta-llama/llama-cookbook issue #120 (FSDP 70B, 16 x A100-80GB: max allocated "
                          "42 GB, max reserved 63 GB) and GMLake, ASPLOS 2024, arXiv:2401.08156 (up to 30% of the "
                          "reserved memory fragmented under recomputation and distributed training)")


@dataclass(frozen=True)
class OverheadTerm:
    """One row of the fit table: ``bytes`` (default) with its band ``low``..``high`` (bytes)."""

    key: str
    name: str
    bytes: int
    low: int
    high: int
    formula: str
    source: str
    overridden: bool = False

    def to_dict(self) -> dict:
        return {"key": self.key, "name": self.name, "bytes": self.bytes, "low": self.low, "high": self.high,
                "formula": self.formula, "source": self.source, "overridden": self.overridden}


@dataclass(frozen=True)
class OverheadDefaults:
    """An accelerator preset's own defaults for the CUDA-context and allocator terms (bytes and
    fractions of the tracked peak, each with its band), and where they come from. The built-in
    presets carry them in ``data/hardware_presets.json`` (``runtime_overhead``); a hardware spec
    may give measured ones (``benchmarks/gpu_peak.py`` prints them). They replace the generic
    figures for lazy kernel loading and the default allocator; ``CUDA_MODULE_LOADING=EAGER`` and
    ``expandable_segments`` keep the generic figures of those settings."""

    cuda_context: tuple[int, int, int]
    allocator_fraction: tuple[float, float, float]
    #: where the block's figures come from (a measurement names both terms' figures at once)
    source: str
    #: the source of each term's figure where the block gives one of its own (a preset's generic figures cite
    #: different things for the two); "" = ``source``. The fractions themselves are in ``allocator_fraction``
    #: only: a source text does not restate them (the rows print the band from the numbers).
    cuda_context_source: str = ""
    allocator_source: str = ""

    @property
    def context_source(self) -> str:
        """The CUDA-context term's source: its own, else the block's."""
        return self.cuda_context_source or self.source

    @property
    def allocator_term_source(self) -> str:
        """The allocator term's source: its own, else the block's."""
        return self.allocator_source or self.source

    def __post_init__(self) -> None:
        b, lo, hi = self.cuda_context
        f, flo, fhi = self.allocator_fraction
        if not (0 <= lo <= b <= hi and 0 <= flo <= f <= fhi < 1):
            raise ValueError("runtime_overhead: need low <= default <= high (fractions below 1)")


class OverheadError(ValueError):
    """An environment variable or override that does not parse (message names it)."""


def _env_int(env: Mapping[str, str], name: str, lo: int, hi: int) -> int | None:
    v = env.get(name)
    if v is None or str(v).strip() == "":
        return None
    try:
        n = int(str(v).strip(), 0)
    except ValueError:
        raise OverheadError(f"{name}={v!r} is not an integer") from None
    if not lo <= n <= hi:
        raise OverheadError(f"{name}={v!r} is outside {lo}..{hi}")
    return n


def communicators(world_size: int, tensor_parallel: int = 1, pipeline_parallel: int = 1) -> int:
    """Process groups a rank joins that NCCL builds buffers for: 0 on one rank; else the
    data-parallel group, plus TP and PP groups when their degree exceeds 1."""
    if world_size <= 1:
        return 0
    return 1 + (tensor_parallel > 1) + (pipeline_parallel > 1)


#: deepspeed/runtime/constants.py MEMORY_OPT_ALLREDUCE_SIZE: elements per all-reduce bucket (ZeRO-0).
ALLREDUCE_BUCKET_ELEMENTS = 500_000_000


def deepspeed_extras(zero_stage: int, trainable_numel: int, grad_dtype_bytes: int) -> tuple[int, str, str]:
    """(bytes, formula, source) of DeepSpeed's transients the ledger does not itemise: at ZeRO
    stage 0 the flattened all-reduce bucket, min(trainable elements on the rank, 5e8) x the
    gradient dtype's bytes; nothing at stages 1-3 (their buckets are ledger items)."""
    if zero_stage == 0 and trainable_numel:
        n = min(trainable_numel, ALLREDUCE_BUCKET_ELEMENTS)
        return (n * grad_dtype_bytes, f"ZeRO-0 all-reduce bucket: min(N, 5e8) = {n:,} elements x {grad_dtype_bytes} B",
                "deepspeed/runtime/engine.py allreduce_gradients -> buffered_allreduce_fallback "
                "(elements_per_buffer = MEMORY_OPT_ALLREDUCE_SIZE 500000000, flattened per bucket)")
    return (0, "none known: the ledger itemises DeepSpeed's buffers",
            "deepspeed/runtime/zero/*.py (the ledger's workspace items)")


def _ceil_times(n: int | float, f: float) -> int:
    """``math.ceil(n * f)`` (bytes), with an integer ``n`` past the float range (a config's
    400-digit bucket size makes the tracked peak one: ``n * f`` raised OverflowError, issue 21)
    multiplied exactly by ``f``'s own value instead (``f.as_integer_ratio()``)."""
    try:
        return math.ceil(n * f)
    except OverflowError:
        if not isinstance(n, int):
            raise
        num, den = float(f).as_integer_ratio()
        return -(-n * num // den)


def runtime_overhead(peak_bytes: int, *, world_size: int = 1, tensor_parallel: int = 1, pipeline_parallel: int = 1,
                     env: Mapping[str, str] | None = None,
                     overrides: Mapping[str, int] | None = None,
                     deepspeed: tuple[int, str, str] | None = None,
                     defaults: OverheadDefaults | None = None,
                     zero_stage: int | None = None) -> list[OverheadTerm]:
    """The overhead rows for one rank whose tracked accelerator peak is ``peak_bytes``.

    ``env``: the environment to read NCCL_BUFFSIZE, NCCL_MAX_NCHANNELS, CUDA_MODULE_LOADING and
    PYTORCH_CUDA_ALLOC_CONF from (default os.environ). ``deepspeed``: the DeepSpeed-extras term's
    (bytes, formula, source), :func:`deepspeed_extras` (default: none). ``defaults``: the
    accelerator preset's :class:`OverheadDefaults` (None: the generic cited figures). ``zero_stage``:
    the config's ZeRO stage; at 3 the allocator band reaches :data:`ZERO3_ALLOCATOR_HIGH` of the
    peak (unless expandable_segments is on). ``overrides``: key -> bytes, replacing a
    term's default (its band collapses to it: the user measured it). Raises
    :class:`OverheadError` for an unparseable variable or an unknown override key."""
    env = os.environ if env is None else env
    overrides = dict(overrides or {})
    if "total" in overrides:  # one measured figure for the whole overhead: one row, named so
        b = int(overrides["total"])
        return [OverheadTerm("total", "runtime overhead (one figure given for all terms)", b, b, b,
                             f"given: {b:,} bytes", "--runtime-overhead", overridden=True)]
    unknown = set(overrides) - {"cuda_context", "nccl", "allocator", "deepspeed"}
    if unknown:
        raise OverheadError(f"unknown overhead term(s) {', '.join(sorted(unknown))}: use cuda_context, nccl, "
                            "allocator, deepspeed")
    terms: list[OverheadTerm] = []

    eager = str(env.get("CUDA_MODULE_LOADING", "")).strip().upper() == "EAGER"
    ctx = (1200 * MIB, 1000 * MIB, 2 * GIB) if eager else (400 * MIB, 256 * MIB, 1 * GIB)
    ctx_src = "pytorch/pytorch issues #107667 and #109888 (the maintainers' figures for lazy and eager loading)"
    if defaults is not None and not eager:
        ctx, ctx_src = defaults.cuda_context, defaults.context_source
    terms.append(OverheadTerm(
        "cuda_context", "CUDA context and loaded kernels", *ctx,
        formula=("CUDA_MODULE_LOADING=EAGER: every kernel loaded at start" if eager else
                 "lazy kernel loading (CUDA >= 11.7, PyTorch's default)"),
        source=ctx_src))

    n_comm = communicators(world_size, tensor_parallel, pipeline_parallel)
    buffsize = _env_int(env, "NCCL_BUFFSIZE", 1 << 12, 1 << 32) or NCCL_BUFFSIZE_DEFAULT
    ch_env = _env_int(env, "NCCL_MAX_NCHANNELS", 1, 64)
    ch, ch_lo, ch_hi = (ch_env, ch_env, ch_env) if ch_env else (NCCL_CHANNELS_DEFAULT, NCCL_CHANNELS_LOW,
                                                                 NCCL_CHANNELS_HIGH)
    per = 2 * buffsize * NCCL_PROTOCOL_BUFFERS
    terms.append(OverheadTerm(
        "nccl", "NCCL communicator buffers", n_comm * per * ch, n_comm * 2 * buffsize * ch_lo,
        n_comm * per * ch_hi,
        formula=(f"{n_comm} communicator(s) x {ch} channels x 2 (send, recv) x NCCL_BUFFSIZE "
                 f"{buffsize:,} B x "  # bytes, as NCCL reads the variable: no unit system to mix in
                 f"{NCCL_PROTOCOL_BUFFERS} protocols" + (" (NCCL_BUFFSIZE from the environment)"
                                                          if env.get("NCCL_BUFFSIZE") else "")),
        source="NCCL User Guide, Environment Variables: NCCL_BUFFSIZE (default 4194304), NCCL_MAX_NCHANNELS"))

    expandable = "expandable_segments:true" in str(env.get("PYTORCH_CUDA_ALLOC_CONF", "")).replace(" ", "").lower()
    f, f_lo, f_hi = (0.03, 0.01, 0.10) if expandable else (0.10, 0.03, 0.25)
    a_src = ("PyTorch docs, CUDA semantics - memory management (caching allocator, expandable_segments); "
             "fractions assumed, not yet calibrated on a GPU")
    if defaults is not None and not expandable:
        (f, f_lo, f_hi), a_src = defaults.allocator_fraction, defaults.allocator_term_source
    zero3 = zero_stage == 3 and not expandable and f_hi < ZERO3_ALLOCATOR_HIGH
    if zero3:
        # the band is printed from the numbers (the formula); the source says why ZeRO-3 widens it (newcomer D10)
        a_src = (f"{a_src}; {ZERO3_ALLOCATOR_SOURCE} (at ZeRO-3 the band's top is raised from {f_hi:.0%} "
                 f"to {ZERO3_ALLOCATOR_HIGH:.0%})")
        f_hi = ZERO3_ALLOCATOR_HIGH
    terms.append(OverheadTerm(
        "allocator", "allocator reserve and fragmentation", _ceil_times(peak_bytes, f), _ceil_times(peak_bytes, f_lo),
        _ceil_times(peak_bytes, f_hi),
        formula=f"{f:.0%} of the tracked peak (band {f_lo:.0%}-{f_hi:.0%}"
                + (": ZeRO-3 gathers and releases parameters module by module" if zero3 else "") + ")"
                + ("; expandable_segments on" if expandable else ""),
        source=a_src))

    dsb, dsf, dss = deepspeed or deepspeed_extras(1, 0, 2)
    terms.append(OverheadTerm("deepspeed", "DeepSpeed extras beyond the ledger", dsb, dsb, dsb, formula=dsf, source=dss))

    out = []
    for t in terms:
        if t.key in overrides:
            b = int(overrides[t.key])
            t = OverheadTerm(t.key, t.name, b, b, b, f"given: {b:,} bytes", "--runtime-overhead", overridden=True)
        out.append(t)
    return out


def _size_or_zero(v: str, parse_size) -> int:
    """A term's size: ``0`` (with or without a unit) is a valid overhead (the term is absent);
    anything else goes through :func:`advisor.units.parse_size` (a unit is required)."""
    import re
    if re.fullmatch(r"0+(\.0*)?\s*(B|[kKMGT]i?B)?", v):
        return 0
    return parse_size(v)


def parse_overrides(text: str, source: str = "--runtime-overhead") -> dict[str, int]:
    """``--runtime-overhead`` value: ``TERM=SIZE[,TERM=SIZE...]`` (e.g. ``cuda_context=600MiB,nccl=1GiB``)
    or one SIZE for the whole overhead (key ``total``: one row replacing every term). A term
    given twice, or a SIZE mixed with TERM=SIZE parts, is an error.
    Raises :class:`OverheadError` naming ``source`` (the flag, or the Python parameter
    ``runtime_overhead=`` for :func:`advisor.preflight`) and the bad part."""
    from advisor.units import parse_size

    text = (text or "").strip()
    if not text:
        raise OverheadError(f"{source}: empty value")
    try:
        if "=" not in text:
            if "," in text:
                raise ValueError("give one SIZE for the whole overhead or TERM=SIZE parts, not a list of sizes")
            return {"total": _size_or_zero(text, parse_size)}
        out = {}
        for part in text.split(","):
            k, eq, v = part.partition("=")
            if not eq:
                raise ValueError(f"{part.strip()!r} is not TERM=SIZE: give one SIZE for the whole overhead "
                                 "or TERM=SIZE parts, not both")
            if k.strip() in out:
                raise ValueError(f"term {k.strip()!r} given twice")
            if k.strip() not in TERMS:
                raise ValueError(f"unknown overhead term {k.strip()!r}: use {', '.join(TERMS)}")
            out[k.strip()] = _size_or_zero(v.strip(), parse_size)
        return out
    except ValueError as e:
        raise OverheadError(f"{source}: {e}") from None


@dataclass(frozen=True)
class OverheadSettings:
    """How the fit table's overhead rows are made: ``env`` (None: os.environ, read at
    :meth:`terms` time), ``overrides`` (term key -> bytes, from ``--runtime-overhead``) and
    ``allocator_fraction`` (the deprecated ``--fragmentation``: the allocator term as that
    fraction of the tracked peak, its band collapsed to it). ``exclude`` names terms already
    inside the capacity (the in-process preflight reads free memory after the CUDA context exists,
    so ``cuda_context`` is 0 there)."""

    env: Mapping[str, str] | None = None
    overrides: Mapping[str, int] | None = None
    allocator_fraction: float | None = None
    exclude: tuple[str, ...] = ()
    source_of_overrides: str = "--runtime-overhead"
    #: The accelerator preset's own CUDA-context / allocator defaults (None: the generic figures).
    defaults: OverheadDefaults | None = None

    def for_hardware(self, hardware) -> "OverheadSettings":
        """These settings with the defaults of ``hardware``'s accelerator (an
        :class:`advisor.cluster.hardware.Hardware`, or None: unchanged)."""
        from dataclasses import replace
        acc = getattr(hardware, "accelerator", None)
        d = getattr(acc, "runtime_overhead", None)
        return replace(self, defaults=d) if d is not None else self

    def terms(self, peak_bytes: int, *, world_size: int = 1, tensor_parallel: int = 1,
              pipeline_parallel: int = 1, deepspeed: tuple[int, str, str] | None = None,
              zero_stage: int | None = None) -> list[OverheadTerm]:
        """:func:`runtime_overhead` for one rank whose tracked accelerator peak is ``peak_bytes``
        (``zero_stage``: the config's ZeRO stage, which sets the allocator band), with these
        settings applied. Raises :class:`OverheadError` (bad env or override)."""
        ov = dict(self.overrides or {})
        if self.allocator_fraction is not None and "allocator" not in ov:
            ov["allocator"] = _ceil_times(peak_bytes, self.allocator_fraction)
        for k in self.exclude:
            ov[k] = 0
        out = []
        for t in runtime_overhead(peak_bytes, world_size=world_size, tensor_parallel=tensor_parallel,
                                  pipeline_parallel=pipeline_parallel, env=self.env, overrides=ov,
                                  deepspeed=deepspeed, defaults=self.defaults, zero_stage=zero_stage):
            if t.key in self.exclude:
                t = OverheadTerm(t.key, t.name, 0, 0, 0, "already inside the free memory read", "measured free memory",
                                 overridden=True)
            elif t.overridden and t.key == "allocator" and self.allocator_fraction is not None \
                    and "allocator" not in (self.overrides or {}):
                t = OverheadTerm(t.key, t.name, t.bytes, t.bytes, t.bytes,
                                 f"{self.allocator_fraction:.0%} of the tracked peak (--fragmentation, deprecated)",
                                 "--fragmentation", overridden=True)
            elif t.overridden:
                t = OverheadTerm(t.key, t.name, t.bytes, t.low, t.high, t.formula, self.source_of_overrides,
                                 overridden=True)
            out.append(t)
        return out


def uncertain_terms(terms: list[OverheadTerm]) -> list[OverheadTerm]:
    """The terms whose band reaches above their default (largest excess first): what a "tight"
    verdict names."""
    return sorted((t for t in terms if t.high > t.bytes), key=lambda t: t.bytes - t.high)


Verdict = str  # "fits" | "tight" | "does not fit" | "unknown"


def verdict(capacity: int | None, tracked_peak: int, terms: list[OverheadTerm]) -> tuple[Verdict, int | None, int]:
    """(verdict, headroom, uncertainty) for one accelerator.

    need = tracked peak + the terms' defaults; headroom = capacity - need; uncertainty = the
    terms' upper excess (sum of high - default). "does not fit" when headroom < 0, "tight" when
    0 <= headroom < uncertainty, else "fits"; "unknown" without a capacity."""
    need = tracked_peak + sum(t.bytes for t in terms)
    unc = sum(t.high - t.bytes for t in terms)
    if capacity is None:
        return "unknown", None, unc
    head = capacity - need
    return ("does not fit" if head < 0 else "tight" if head < unc else "fits"), head, unc
