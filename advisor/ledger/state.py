"""The state ledger: bytes DeepSpeed 0.19.8 allocates on each rank, by class, item and tier.

INTERFACE (stable; views depend on it):

* :class:`advisor.plan.Plan` — the effective config x the model inventory x the cluster shape
  (built once per command by :func:`advisor.planning.build_plan`; re-exported here).
* :func:`compute_ledger(plan) -> Ledger` — one :class:`RankLedger` per rank role (ranks with
  identical entries, as :class:`advisor.ledger.ranks.RankSet` ranges; ``Ledger.rank(r)`` gives one rank).
* Each :class:`Entry` is one allocation DeepSpeed makes: which rank, tier, state class, the
  fine-grained item name (the vocabulary below, shared with ``advisor.engine.measure``), bytes,
  lifetime, the formula in words and the DeepSpeed source it comes from.

Tiers: ``accelerator``, ``host_pinned``, ``host_pageable``, ``nvme``.
Classes: ``parameters``, ``gradients``, ``master_weights``, ``optimizer_states``,
``activations``, ``workspace``.
Lifetimes: ``persistent`` (from init or the first step, kept), ``backward`` (from backward
until the optimizer step consumes it), ``step`` (transient inside ``optimizer.step``),
``init`` (initialisation only), ``in_backward`` (transient inside backward, gone when
``engine.backward`` returns: ZeRO-1/2 ipg buckets, ZeRO-1's full 16-bit grads until the boundary
reduce), ``forward_backward`` (ZeRO-3 gathered parameters), ``accumulated`` (ZeRO-2 at GA > 1: the micro-steps
after an iteration's first, forward, backward and reduce), ``step_prep`` (inside the step,
while the gradients are flattened and cast, freed before the update), ``first_step`` (only in the
first optimizer step), and three timeline-only ZeRO-1/2 transients (:func:`zero12_backward_transients`):
``autograd`` (a gradient being moved into the bucket), ``reduce`` (a bucket flush), ``step_norm``
(the step's fp64 norm copy); ``first_forward`` / ``first_backward`` (ZeRO-3: only in the first iteration's forward, :func:`zero3_first_fetch_bytes`, or its backward);
``refetch_forward`` (ZeRO-3 at GA > 1: only the first iteration's forward of micro-step 2,
:func:`zero3_refetch_prefetch_bytes`); ``accumulated_forward`` / ``accumulated_backward``
(ZeRO-1 and stage 0's wrappers at GA > 1: the forward / backward of the micro-steps after an iteration's first: what
the previous micro-step left, a new gradient being added to it); ``first_microstep_backward`` (ZeRO-1 under
offload at GA > 1: micro-step 1's backward, every param.grad before any reduce); ``first_microstep_reduce`` /
``boundary_reduce`` (ZeRO-2 under offload at GA > 1: the reduce of micro-step 1 only / of the boundary only,
:func:`zero12_offload_microstep_terms`); ``from_first_reduce`` (kept from micro-step 1's reduce on: the
host buffers of async_accumulate_grad_in_cpu_via_gpu); ``init_cast`` / ``init_module`` (deepspeed.initialize before the
optimizer is built, without zero.Init: the module cast in host memory, then the whole model on the
accelerator; :func:`advisor.ledger.timeline.init_entries`); ``hpz_secondary`` / ``hpz_secondary_backward`` /
``hpz_secondary_persistent`` (ZeRO++ hpZ's secondary partitions of the non-persistent parameters released after a
forward / only after their backward, of the persistent ones; freed at every step's end and made again at their
next release: :func:`advisor.ledger.timeline.hpz_secondary_live`). Where each lifetime sits on the step timeline (and which persistent
items only appear at the first step) is :mod:`advisor.ledger.timeline`. An entry with
``alias_of`` set is a view of that item's storage: it costs nothing while that item is live.

Items (the census names used by the engine harness; see the reference section 8):
  parameters:        lp_params_flat, lp_param_partitions, lp_params_gathered, lp_param_secondary /
                     lp_param_secondary_persist / lp_param_secondary_frozen (added: ZeRO++ hpZ secondary
                     partition, non-persistent / persistent trainable parameters', frozen ones'),
                     offload_bit16_param_buffer, max_in_cpu_buffer, frozen_params (added:
                     trainable=False tensors), frozen_params_gathered (ZeRO-3: the persistent
                     frozen ones gathered, with lp_params_gathered's lifetime)
  gradients:         lp_grads, averaged_gradients, grad_partitions_flat_buffer, fp32_grad,
                     fp32_grad_accum, offload_accumulated_grads_cpu, opt_unswapped_grad_tails,
                     fp32_grad_copies (added: ZeRO-0 FP16_Optimizer.step's per-parameter fp32 casts)
  master_weights:    fp32_master
  optimizer_states:  exp_avg, exp_avg_sq, step
  workspace:         ipg_bucket, offload_temp_grad_cpu, offload_temp_grad_accel,
                     opt_swap_buffers, param_swap_buffers, param_partitioned_swap_buffer

Formulas follow ../shared/reference/deepspeed-0.19.8-state-accounting.md sections 2-5, each
verified by tests/engine parity runs against the real engine.
"""

from __future__ import annotations

import array
import bisect
import collections
import functools
import hashlib
import itertools
import math
import operator
from collections.abc import Sequence as _AbcSequence
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Iterator, Literal, Sequence, get_args

from advisor.config.effective import DTYPE_BYTES, EffectiveConfig, batch_world_size
from advisor.config.validation import MAX_RANK_ROLES, MAX_ZERO12_CHANGE_RANKS
from advisor.errors import WorkLimitError
from advisor.model.inventory import Inventory, module_of  # noqa: F401  (module_of: the rule lives with the inventory, issue 15)
from advisor.ledger.ranks import RankSet, Runs
from advisor.plan import Cluster, Plan  # noqa: F401  (the ledger's input; re-exported for callers)

Tier = Literal["accelerator", "host_pinned", "host_pageable", "nvme"]
StateClass = Literal["parameters", "gradients", "master_weights", "optimizer_states", "activations", "workspace"]
Life = Literal["persistent", "backward", "step", "init", "in_backward", "forward_backward", "step_prep",
               "first_step", "load", "load_state_dict", "save", "save_16bit", "save_16bit_end", "save_gather", "save_model",
               "save_optim", "autograd", "reduce", "step_norm", "init_cast", "init_module", "init_flatten", "init_optimizer_states", "init_grad_hooks", "init_fp32_partitions",
               "first_forward", "first_backward", "accumulated", "accumulated_forward", "accumulated_backward",
               "accumulated_reduce", "reduce_step", "compact_accumulated",
               "first_microstep_backward", "first_microstep_reduce", "boundary_reduce", "from_first_reduce",
               "refetch_forward", "steady_forward", "steady_backward", "steady_forward_backward", "after_load",
               "step_update", "hpz_secondary", "hpz_secondary_backward", "hpz_secondary_persistent"]

TIERS: tuple[Tier, ...] = get_args(Tier)
CLASSES: tuple[StateClass, ...] = get_args(StateClass)
LIVES: tuple[Life, ...] = get_args(Life)


@dataclass(frozen=True)
class Entry:
    """One item of per-rank state: ``bytes`` of state class ``cls`` on ``tier`` for ``life``, with
    the formula in words and its DeepSpeed source. Raises ValueError for a tier, class or lifetime
    outside :data:`Tier`, :data:`StateClass`, :data:`Life`."""

    rank: int
    tier: Tier
    cls: StateClass
    item: str
    bytes: int
    life: Life = "persistent"
    formula: str = ""
    source: str = ""
    #: The item whose storage this entry is a view of (costs nothing while that item is live).
    alias_of: str = ""
    #: Backward transients only (``zero3_reduce_flush``): the entry's bytes at the start of
    #: backward (gradients of the modules after the last layer), in the layers' backward, and at
    #: its end (the modules before the first layer, the epilogue's flush): (start, body, end) bytes,
    #: each <= ``bytes`` (= their maximum). Empty where not split. The timeline places each beside
    #: the activations live there (:func:`advisor.ledger.timeline.role_timeline`).
    regions: tuple = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.tier not in TIERS or self.cls not in CLASSES or self.life not in LIVES:
            raise ValueError(f"ledger entry {self.item!r}: tier {self.tier!r}, class {self.cls!r}, "
                             f"life {self.life!r} (allowed: {TIERS}, {CLASSES}, {LIVES})")


@dataclass
class RankLedger:
    """The entries of one rank *role*: ``ranks`` (ascending ranges) are every rank whose
    entries are exactly these (same tier, class, item, bytes, lifetime, formula and source);
    ``rank`` is the first of them and the ``rank`` of every entry."""

    rank: int
    entries: list[Entry] = field(default_factory=list)
    #: The ranks of the role as ranges (:class:`advisor.ledger.ranks.RankSet`; a list is converted).
    ranks: RankSet = field(default_factory=RankSet)
    #: Pipeline stages whose ranks this role covers (empty without pipeline parallelism).
    stages: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.ranks, RankSet):
            self.ranks = RankSet.of(self.ranks)
        if not len(self.ranks):
            self.ranks = RankSet.span(self.rank, self.rank + 1)

    def total(self, tier: Tier | None = None, cls: StateClass | None = None,
              lives: tuple[Life, ...] | None = None) -> int:
        """Sum of entry bytes filtered by tier, class and lifetime (None = all)."""
        return sum(e.bytes for e in self.entries
                   if (tier is None or e.tier == tier) and (cls is None or e.cls == cls)
                   and (lives is None or e.life in lives))

    def by_item(self, item: str) -> list[Entry]:
        return [e for e in self.entries if e.item == item]


@dataclass
class Ledger:
    """The state ledger of a plan. ``ranks`` holds one :class:`RankLedger` per distinct rank
    role (ascending first rank; their ``ranks`` range sets partition 0..W-1), so a 2^20-rank job
    is a handful of entries and ranges, not 2^20 copies or rank lists. :meth:`rank` gives any single rank's ledger,
    :meth:`expanded` every rank's."""

    plan: Plan
    ranks: list[RankLedger]
    #: Which DeepSpeed objects this plan gets (wrapper, basic optimizer), for the assumptions.
    wrapper: str = ""
    basic_optimizer: str = ""
    #: What the ledger leaves out, in words.
    excluded: list[str] = field(default_factory=list)
    #: Why the accelerator peak is a lower bound (transients this plan makes that are not modelled), or "".
    peak_lower_bound: str = ""

    @property
    def world_size(self) -> int:
        """Ranks the roles stand for: the ZeRO group (DP x SP) without model parallelism, every
        global rank with tensor / pipeline / expert parallelism (:meth:`Cluster.coords`)."""
        return sum(len(rl.ranks) for rl in self.ranks)

    def role_of(self, r: int) -> RankLedger:
        """The role (shared :class:`RankLedger`) rank ``r`` belongs to; IndexError if none."""
        import bisect

        idx = self.__dict__.get("_role_index")
        if idx is None:  # (range start, range end, role), by start: O(ranges), never O(ranks)
            idx = sorted((a, b, i) for i, rl in enumerate(self.ranks) for a, b in rl.ranks.ranges)
            self.__dict__["_role_index"] = idx
        k = bisect.bisect_right(idx, (r, float("inf"), 0)) - 1
        if k >= 0 and idx[k][0] <= r < idx[k][1]:
            return self.ranks[idx[k][2]]
        raise IndexError(f"rank {r} is not in this ledger (ranks 0..{self.world_size - 1})")

    def rank(self, r: int) -> RankLedger:
        """Rank ``r``'s own ledger: its role's entries with ``rank`` = r."""
        rl = self.role_of(r)
        if rl.rank == r and len(rl.ranks) == 1:
            return rl
        return RankLedger(r, [replace(e, rank=r) for e in rl.entries], RankSet.span(r, r + 1))

    def expanded(self) -> list[RankLedger]:
        """One :class:`RankLedger` per rank, in rank order (O(W x entries): for small W)."""
        return [self.rank(r) for r in range(self.world_size)]


# =============================================================================================
# Implementation. Section numbers (§) refer to
# ../shared/reference/deepspeed-0.19.8-state-accounting.md; file:function citations are relative
# to the installed deepspeed 0.19.8 package. Every formula here is checked byte for byte
# against the real engine by tests/engine (advisor.engine.measure).

#: Items that are model state (as opposed to config-driven workspace buffers).
MODEL_STATE_CLASSES: tuple[str, ...] = ("parameters", "gradients", "master_weights", "optimizer_states")

#: ``engine.py`` MEMORY_OPT_ALLREDUCE_SIZE: elements per stage-0 gradient all-reduce bucket.
MEMORY_OPT_ALLREDUCE_SIZE = 500_000_000

#: aio constants (``runtime/swap_tensor/constants.py``): MIN_AIO_BYTES, AIO_ALIGNED_BYTES.
MIN_AIO_BYTES = 1024 ** 2
AIO_ALIGNED_BYTES = 1024


# =============================================================================================
# Shared building blocks (public). Every other module that needs a partition, padding,
# sub-group, persistence, swap or bucket figure imports it from here: the formulas live once.
# Sizes are elements unless the name says bytes.


#: The name every swap file DeepSpeed writes ends with (optimizer_utils.py l.33 and l.106,
#: partitioned_param_swapper.py l.156).
SWAP_FILE_SUFFIX = ".tensor.swp"


def swap_folder(nvme_path: str, role: str, rank: int, model_dtype: str) -> str:
    """The folder DeepSpeed 0.19.8 writes rank ``rank``'s swap files to under ``nvme_path``.

    ``role`` ``offload_optimizer``: ``zero_stage_3/optimizer/rank{r}`` (stage3.py l.840
    ``os.path.join(nvme_path, 'zero_stage_3')``, optimizer_utils.py l.174 ``'optimizer',
    f'rank{dist.get_rank()}'``); its files are named by parameter / sub-group id, so a run of the
    same model rewrites them in place. ``offload_param``: ``zero_stage_3/{dtype}params/rank{r}``,
    ``dtype`` the torch name of the parameters' dtype (partitioned_param_swapper.py l.85-86), which
    the swapper empties when it starts (l.88 ``shutil.rmtree(self.swap_folder)``)."""
    import os
    from advisor.config.dtypes import TRAINING_TO_TORCH
    kind = "optimizer" if role == "offload_optimizer" else f"{TRAINING_TO_TORCH[model_dtype]}params"
    return os.path.join(nvme_path, "zero_stage_3", kind, f"rank{rank}")


def align_up(v: int, a: int) -> int:
    """A_a(v): ``v`` rounded up to a multiple of ``a`` (elements; ``a <= 1`` leaves v as is)."""
    return v if a <= 1 or v % a == 0 else v + a - v % a


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for non-negative integers."""
    return -(-a // b)


_align = align_up
_ceil_div = ceil_div


def zero12_param_alignment(dtype_bytes: int, parameter_alignment: bool) -> int:
    """Per-parameter alignment a (elements) inside a ZeRO-1/2 flat group: 16 / gcd(16, D) with
    ``zero_optimization.parameter_alignment`` (8 for 16-bit, 4 for fp32), else 1 (§3.1 step 1;
    ``stage_1_and_2.py`` DeepSpeedZeroOptimizer.__init__, padding after every param but the last)."""
    return 16 // math.gcd(16, dtype_bytes) if parameter_alignment else 1


def _filled(values: "Iterable[int]", typecode: str, overflow) -> "Sequence[int]":
    """``values`` in an ``array(typecode)`` filled in chunks, not from one list of every value (an int
    object each: 1.8M of them, ~65 MB, for a trace at 1e5 layers, issue 21); when a value does not fit,
    ``overflow(iterable of every value)`` gives the result (fromlist leaves the array as it was)."""
    it = iter(values)
    out = array.array(typecode)
    while True:
        chunk = list(itertools.islice(it, 65536))
        if not chunk:
            return out
        try:
            out.fromlist(chunk)
        except OverflowError:
            return overflow(itertools.chain(out, chunk, it))


def _packed(values: "Iterable[int]") -> "Sequence[int]":
    """``values`` as an ``array('q')`` (indexing and bisect as on a list, 8 bytes an element, not
    an int object each: generate at 1e5 layers keeps these per layout and world size, issue 21),
    or a list when one exceeds int64 (2^48-element tensors x 2e6 tensors could)."""
    return _filled(values, "q", list)


def _narrow(values: "Iterable[int]") -> "Sequence[int]":
    """:func:`_packed`, 4 bytes a value (``array('i')``) while every value fits a C int, else as
    :func:`_packed` gives it (``array('q')`` or a list): for the ZeRO-3 fetch replay's columns of queue
    positions, steps and per-module bytes, ~1.8M values each at 1e5 layers (issue 21). Its typecode
    depends on the values: a reader may index, slice, iterate, compare and concatenate it with its own
    slices, but copy it into another array only through ``array.array(typecode, ...)``."""
    return _filled(values, "i", _packed)


@dataclass(frozen=True)
class Zero12Layout:
    """Flat layout of one ZeRO-1/2 (or BF16_Optimizer) param group, elements (§3.1).

    ``starts[j]`` is tensor j's flat offset (parameter_alignment padding included), ``numels[j]``
    its numel; ``n`` = sum of numels (no padding); ``n_pad`` = A_{2W}(end of the last tensor);
    ``P`` = n_pad / W, the slice every rank owns: rank r owns flat elements [r P, (r+1) P)."""

    starts: "Sequence[int]"  # packed (:func:`_packed`): a fresh int per tensor otherwise
    numels: tuple[int, ...]
    n: int
    n_pad: int
    P: int
    #: Figures derived from the layout, computed once (:func:`zero12_all_ranks` per world size,
    #: ...): a ledger asks for them several times per plan. Not part of the value.
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @functools.cached_property
    def ends(self) -> "Sequence[int]":
        """Flat end offset of each tensor (start + numel), elements; non-decreasing. A packed
        int64 array (:func:`_packed`): 8 bytes a tensor instead of a list of int objects."""
        return _packed(map(operator.add, self.starts, self.numels))  # C-level sums (issue 21)

    @functools.cached_property
    def prefix(self) -> "Sequence[int]":
        """prefix[j] = numels[0] + ... + numels[j-1] (elements; len = tensors + 1), packed like :attr:`ends`."""
        return _packed(itertools.accumulate(self.numels, initial=0))

    @functools.cached_property
    def largest(self) -> int:
        """The largest tensor's numel (0 for an empty group)."""
        return max(self.numels, default=0)

    def meeting(self, r: int) -> tuple[int, int]:
        """(jl, jh): the tensors j in [jl, jh) whose flat range [start_j, end_j) meets rank r's
        slice [r P, (r+1) P) -- the first whose end is past r P, up to the first starting at or past
        (r+1) P (starts and ends never decrease, so two bisections). O(log tensors)."""
        lo = r * self.P
        return bisect.bisect_right(self.ends, lo), bisect.bisect_left(self.starts, lo + self.P)


def zero12_group_layout(numels: "list[int] | tuple[int, ...]", W: int, dtype_bytes: int,
                        parameter_alignment: bool) -> Zero12Layout:
    """The :class:`Zero12Layout` of a param group with tensor numels ``numels`` (model order) on
    ``W`` data-parallel ranks (§3.1; ``stage_1_and_2.py`` DeepSpeedZeroOptimizer.__init__ with
    ``nccl_start_alignment_factor`` 2 x W, ``runtime/utils.py`` align_dense_tensors;
    ``bf16_optimizer.py`` _setup_for_real_optimizer, which never pads per parameter: pass
    ``parameter_alignment=False`` for BF16_Optimizer). Example (§3.1): N = 43,209, W = 2 ->
    N_pad = 43,212, P = 21,606."""
    a = zero12_param_alignment(dtype_bytes, parameter_alignment)
    if a <= 1:  # no per-parameter padding: the starts are the prefix sums
        starts = list(itertools.accumulate(numels, initial=0))
        off = starts.pop()
    else:
        starts = []
        off = 0
        last = len(numels) - 1
        for j, n in enumerate(numels):
            starts.append(off)
            off += n
            if j < last:
                off += (-off) % a
    n_pad = align_up(off, 2 * W)
    return Zero12Layout(_packed(starts), tuple(numels), sum(numels), n_pad, n_pad // W)


def zero12_rank_coverage(layout: Zero12Layout, r: int) -> tuple[int, int, int]:
    """(I_r, Cov_r, K_r) of rank ``r`` in one group, elements (§3.1 step 4; ``stage_1_and_2.py``
    get_partition_info / get_data_parallel_partitions): I_r = full numel of every parameter whose
    flat range meets r's slice [r P, (r+1) P) (a straddling parameter counts for both ranks),
    Cov_r = elements of the slice covered by parameters, K_r = how many parameters meet it.
    O(tensors); :func:`zero12_all_ranks` gives every rank in O(tensors + W)."""
    lo, hi = r * layout.P, (r + 1) * layout.P
    inter = cov = k = 0
    for a, n in zip(layout.starts, layout.numels):
        b = a + n
        if a < hi and b > lo:
            inter += n
            cov += min(b, hi) - max(a, lo)
            k += 1
    return inter, cov, k


def zero12_all_ranks(layout: Zero12Layout, W: int) -> Runs:
    """Runs of (I_r, Cov_r, K_r): :func:`zero12_rank_coverage` for every rank 0..W-1, in
    O(min(W, tensors) log tensors) once the layout's prefix sums exist (O(tensors), C loops),
    whatever W is; computed once per layout and W (the layout's memo).

    The parameters meeting rank r's slice [r P, (r+1) P) are a contiguous run j in [lo_r, hi_r)
    of the model-ordered tensors (starts and ends never decrease: :meth:`Zero12Layout.meeting`).
    With W <= 4 x tensors (and W <= MAX_ZERO12_CHANGE_RANKS) every rank is evaluated. Otherwise the run changes only where a
    tensor's start or end crosses a slice, and a rank whose slice holds a tensor boundary is
    alone in its piece: between those ranks every slice lies inside one tensor (I = its numel,
    Cov = P, K = 1) or past the last (padding: 0, 0, 0). So the candidate change ranks are, per
    tensor j, floor(start_j / P), floor((end_j - 1) / P) and the rank after each; the figure is
    evaluated at each piece start (I_r from prefix sums, Cov_r = I_r minus what the first and
    last parameter stick out of the slice)."""
    key = ("all_ranks", W)
    got = layout._memo.get(key)
    if got is not None:
        return got
    starts, numels, P = layout.starts, layout.numels, layout.P
    T = len(numels)
    if P <= 0:
        got = layout._memo[key] = Runs.const(W, (0, 0, 0))
        return got
    ends, pre = layout.ends, layout.prefix
    br, bl = bisect.bisect_right, bisect.bisect_left

    def value_at(rs: Iterable[int]):
        for r in rs:
            lo = r * P
            hi = lo + P
            jl, jh = br(ends, lo), bl(starts, hi)
            if jh > jl:
                inter = pre[jh] - pre[jl]
                a0, b1 = starts[jl], ends[jh - 1]
                yield inter, inter - (lo - a0 if lo > a0 else 0) - (b1 - hi if b1 > hi else 0), jh - jl
            else:
                yield 0, 0, 0

    if W <= 4 * T and W <= MAX_ZERO12_CHANGE_RANKS:
        got = Runs(range(W + 1), list(value_at(range(W))))
    else:
        got = Runs.at_points(W, _change_points(layout, W), value_at)
    layout._memo[key] = got
    return got


def _change_points(layout: Zero12Layout, W: int) -> set[int]:
    """The ranks where :func:`zero12_all_ranks`' figure may change (see there): per tensor j,
    floor(start_j / P), floor((end_j - 1) / P) and the rank after each (a zero-numel tensor's
    "last" rank is its start's: it still counts in K). Once per layout and W (P > 0)."""
    key = ("change_points", W)
    got = layout._memo.get(key)
    if got is None:
        P = layout.P
        # C-level maps into sets of the few distinct ranks (a Python expression per tensor before: ~20 ms a layout
        # at the 1e5-tensor limit, issue 21); last = (b - 1) // P if b > a else a // P = (b - (b > a)) // P
        starts, ends = layout.starts, layout.ends
        lasts = set(map(operator.floordiv, map(operator.sub, ends, map(operator.gt, ends, starts)), itertools.repeat(P)))
        firsts = set(map(operator.floordiv, starts, itertools.repeat(P)))
        got = layout._memo[key] = {*firsts, *(f + 1 for f in firsts), *lasts, *(x + 1 for x in lasts)}
    return got


def zero12_change_ranks(layouts: list[Zero12Layout], W: int) -> int:
    """How many of the ranks 0..W-1 start a piece where some group's per-rank figure
    (:func:`zero12_all_ranks`) may change: |{0} U change points of every group| (at most W). Every
    ZeRO-1/2 per-rank figure is constant between them (:func:`zero12_largest_slices` and
    :func:`zero12_backward_transients` change only at owners' first and last ranks, which are
    among them), so the ledger's work is O(this); W when W is small (not counted)."""
    if W <= MAX_ZERO12_CHANGE_RANKS:
        return W
    pts: set[int] = {0}
    for lay in layouts:
        if lay.P > 0:
            pts |= _change_points(lay, W)
    return sum(1 for p in pts if 0 <= p < W)


def check_zero12_work(layouts: list[Zero12Layout], W: int, stage: int) -> None:
    """Refuse (:class:`advisor.errors.WorkLimitError`, one line) a ZeRO-1/2 plan with more than
    :data:`advisor.config.validation.MAX_ZERO12_CHANGE_RANKS` change ranks
    (:func:`zero12_change_ranks`), before the O(change ranks) per-rank accounting runs: ranks
    whose slice holds a tensor boundary each need their own figures (1e5 layers of a small model
    at 2^20 ranks: ~10^6 of them, minutes and GBs)."""
    if W <= MAX_ZERO12_CHANGE_RANKS:
        return
    n = zero12_change_ranks(layouts, W)
    if n > MAX_ZERO12_CHANGE_RANKS:
        raise WorkLimitError(
            f"ZeRO-{stage} over {W:,} data-parallel ranks: {n:,} ranks' partitions hold a tensor boundary "
            f"(ranks differ there), more than the {MAX_ZERO12_CHANGE_RANKS:,} ds-advisor accounts per rank "
            "(documented limit); use fewer ranks, fewer tensors (layers) or ZeRO-3")


def zero3_partition_numel(n: int, W: int) -> int:
    """ZeRO-3 partition of one parameter, elements: p_i = ceil(n_i / W), identical on every rank
    (§3.2; ``partition_parameters.py`` _partition_param, padding (W - n_i mod W) mod W)."""
    return -(-n // W)


def zero3_rank_numel(n: int, W: int, r: int) -> int:
    """Real (non-padding) elements of a parameter of n elements on rank r: r_i = max(0, min(p_i,
    n_i - r p_i)) (§3.2). Ranks below floor(n_i / p_i) hold p_i, that rank holds n_i mod p_i, the
    ranks after it only padding."""
    p = zero3_partition_numel(n, W)
    return max(0, min(p, n - r * p))


@dataclass(frozen=True)
class SubGroup:
    """A ZeRO-3 sub-group: its optimizer param group, indices into ``Inventory.tensors`` (model
    order; a ``range`` where one param group holds every tensor, else a tuple: a tuple of 2M ints held
    ~72 MB at the tensor limit, issue 21) and S_k = sum of their partitions p_i (elements)."""

    group: int
    tensors: Sequence[int]
    numel: int


def zero3_sub_groups(inventory: Inventory, W: int, sub_group_size: int | None) -> list[SubGroup]:
    """ZeRO-3 sub-groups of the trainable parameters (§3.2; ``stage3.py``
    _create_fp16_sub_groups): per optimizer param group (index order), parameters are appended in
    model order until the running sum of p_i reaches ``sub_group_size`` (elements), so a
    sub-group can exceed it by up to one partition; a group whose sum of p_i is at most
    ``sub_group_size`` (or ``None``) is one sub-group. Example (§3.2, measured): the 43,209-element
    MLP, W = 2, sub_group_size 10,000 -> S = [21,372, 235]. Memoised per inventory
    (:meth:`advisor.model.inventory.Inventory.memo`)."""
    return list(inventory.memo(("zero3_sub_groups", W, sub_group_size),
                               lambda: tuple(_zero3_sub_groups(inventory, W, sub_group_size))))


#: True: :func:`_zero3_sub_groups` cuts each param group at the bisections of its p_i prefix sums (C-level
#: columns, one p_i per distinct size); False: the per-tensor walk, the reference of
#: tests/test_inventory_columns_identity.py.
SUB_GROUP_COLUMNS = True


def _zero3_sub_groups(inventory: Inventory, W: int, sub_group_size: int | None) -> list[SubGroup]:
    tensors = inventory.tensors
    by: dict[int, "Sequence[int]"] = {}
    if all(map(operator.attrgetter("trainable"), tensors)) and not any(map(operator.attrgetter("group"), tensors)):
        by[0] = range(len(tensors))  # the common case: one group of every tensor
    else:
        for i, t in enumerate(tensors):
            if t.trainable:
                by.setdefault(t.group, []).append(i)
    out: list[SubGroup] = []
    for g in sorted(by):
        idx = by[g]
        if SUB_GROUP_COLUMNS:
            # p_i = ceil(n_i / W) once per distinct size, their prefix sums packed; a sub-group started at
            # tensor a ends at the first q with P[q] - P[a] >= sub_group_size (p_i >= 1: P rises)
            ns = list(map(operator.attrgetter("numel"), map(tensors.__getitem__, idx)))
            p_of = {n: -(-n // W) for n in set(ns)}
            P = _packed(itertools.accumulate(map(p_of.__getitem__, ns), initial=0))
            del ns
            L = len(idx)
            held = (lambda s: s) if isinstance(idx, range) else tuple  # a range's slice is a range
            if sub_group_size is None or sub_group_size >= P[L]:
                out.append(SubGroup(g, held(idx), P[L]))
                continue
            a = 0
            while a < L:
                q = min(L, bisect.bisect_left(P, P[a] + sub_group_size, a + 1))
                out.append(SubGroup(g, held(idx[a:q]), P[q] - P[a]))
                a = q
            continue
        # p_i = zero3_partition_numel(n_i, W) = ceil(n_i / W), inlined (one call per tensor
        # was ~0.2 s of a 1M-tensor inventory)
        parts = [-(-tensors[i].numel // W) for i in idx]
        if sub_group_size is None or sub_group_size >= sum(parts):
            out.append(SubGroup(g, tuple(idx), sum(parts)))
            continue
        cur: list[int] = []
        size = 0
        for j, (i, p) in enumerate(zip(idx, parts)):
            cur.append(i)
            size += p
            if size >= sub_group_size or j == len(idx) - 1:
                out.append(SubGroup(g, tuple(cur), size))
                cur, size = [], 0
    return out


def zero3_partition_sums(inventory: Inventory, W: int) -> tuple[int, int]:
    """(sum p_i over every parameter, sum p_i over the trainable ones), elements, p_i =
    :func:`zero3_partition_numel` (§3.2): once per (tensor list, W), since movement, step time
    and generate's plans each ask for them (an O(tensors) pass apiece)."""
    def compute() -> tuple[int, int]:
        a = t_ = 0
        for t in inventory.tensors:
            p = zero3_partition_numel(t.numel, W)
            a += p
            if t.trainable:
                t_ += p
        return a, t_
    return inventory.memo(("zero3_partition_sums", W), compute)


def twin_flow_on_accelerator(ec: EffectiveConfig, n_sub_groups: int,
                             swapped: "list[bool] | None" = None) -> list[bool]:
    """Per ZeRO-3 sub-group (DeepSpeed's order, :func:`zero3_sub_groups`): True where partial
    optimizer offload (Twin-Flow, ``offload_optimizer`` ``device: cpu`` or ``nvme`` with ``ratio`` < 1)
    keeps its fp32 master, fp32 gradient and optimizer state on the accelerator. DeepSpeed 0.19.8
    ``runtime/zero/stage3.py`` l.1100-1108 (_create_fp32_partitions): sub-group i goes to 'cpu' when
    i >= int((1 - ratio) x n_sub_groups), else to the accelerator, so the first int((1 - ratio) x n)
    stay there (ratio 0.5 over 3 sub-groups: 1; the int() of a float, as DeepSpeed computes it).
    ``offload_config.py`` l.99 bounds ratio to [0, 1]; ``config.py`` l.396-400 (offload_ratio_check)
    refuses ratio < 1 below stage 3. With ``device: nvme`` a swappable sub-group (``swapped[i]``,
    :attr:`Placement.opt_swapped`) is not on the accelerator whatever its index: l.1117 tests
    ``_swappable_optimizer_subgroup(i)`` before ``subgroup_to_device`` is read (l.1157), so its fp32
    master is an NVMe swap file (:func:`twin_flow_backup_swapped`). All False without optimizer offload
    and at ratio 1."""
    if not twin_flow_splits(ec) or n_sub_groups <= 0:
        return [False] * max(0, n_sub_groups)
    cut = twin_flow_backup_stepped(ec, n_sub_groups)
    sw = swapped if swapped is not None else [False] * n_sub_groups
    return [i < cut and not sw[i] for i in range(n_sub_groups)]


def twin_flow_backup_swapped(ec: EffectiveConfig, swapped: list[bool]) -> list[bool]:
    """Per ZeRO-3 sub-group: True where partial optimizer offload to NVMe (``device: nvme``, ``ratio`` < 1)
    steps a sub-group swapped to NVMe with the backup torch AdamW (a GPU run). DeepSpeed 0.19.8
    ``stage3.py``: a swappable sub-group's fp32 master is an NVMe file (l.1117-1121, whatever
    ``subgroup_to_device[i]`` says), swapped into the pinned buffers for its step (_prepare_sub_group
    l.2702-2708), and _optimizer_step (l.1249-1258) steps it with ``backup_optimizer`` where
    ``subgroup_to_device[i]`` is the accelerator (i < int((1 - ratio) x n), l.1105). That torch AdamW then
    keeps exp_avg / exp_avg_sq in its own ``state`` as zeros_like of the swapped-in host parameter
    (torch/optim/adam.py Adam._init_group): host memory, never swapped, since the swapper swaps only
    DeepSpeedCPUAdam's state (``swap_tensor/optimizer_utils.py`` _get_state_tensors l.492-502 reads
    ``self.optimizer.state[parameter]``, empty for these), so their NVMe files are the fp32 master's alone.
    On DeepSpeed's CPU accelerator (name 'cpu', ``accelerator/cpu_accelerator.py`` l.28) DeepSpeedCPUAdam
    steps them as at ratio 1."""
    if not swapped or not twin_flow_splits(ec) or ec.offload_optimizer_effective != "nvme":
        return [False] * len(swapped)
    cut = twin_flow_backup_stepped(ec, len(swapped))
    return [i < cut and sw for i, sw in enumerate(swapped)]


def twin_flow_backup_stepped(ec: EffectiveConfig, n_sub_groups: int) -> int:
    """How many ZeRO-3 sub-groups (the first ones, DeepSpeed's order) a GPU run steps with the backup
    torch AdamW under partial optimizer offload, not with DeepSpeedCPUAdam: int((1 - ratio) x n) with any
    optimizer offload device at ZeRO-3 and ``ratio`` < 1, else 0. ``stage3.py`` l.1100-1108 maps every
    sub-group to a device whenever the optimizer is offloaded (cpu or nvme), and _optimizer_step
    l.1249-1258 picks the optimizer by that map alone (a swapped sub-group included). Their moments
    live in ``backup_optimizer.state``, which no checkpoint saves (``_rigid_state_dict`` l.3442-3444
    saves ``self.optimizer.state_dict()``, DeepSpeedCPUAdam's, whose state holds the sub-groups it
    stepped only: torch/optim/optimizer.py state_dict l.757-760 packs ``self.state``;
    ``_rigid_load_state_dict`` l.3551-3552 loads that alone, so a resume restarts those moments and
    their step count). On DeepSpeed's CPU accelerator (its name is 'cpu') these sub-groups map to 'cpu'
    too and DeepSpeedCPUAdam steps them: this count is a GPU run's."""
    r = ec.zero.offload_optimizer.ratio
    if ec.zero.stage != 3 or ec.offload_optimizer_effective == "none" or r is None or r >= 1.0 or n_sub_groups <= 0:
        return 0
    return int((1 - r) * n_sub_groups)


def twin_flow_splits(ec: EffectiveConfig) -> bool:
    """Whether partial optimizer offload splits the sub-groups (:func:`twin_flow_on_accelerator`,
    :func:`twin_flow_backup_swapped`): ZeRO-3, ``offload_optimizer`` ``device: cpu`` or ``nvme``,
    ``ratio`` < 1 (``stage3.py`` l.1100-1108 maps the sub-groups whenever the optimizer is offloaded)."""
    r = ec.zero.offload_optimizer.ratio
    return (ec.zero.stage == 3 and ec.offload_optimizer_effective in ("cpu", "nvme")
            and r is not None and r < 1.0)


#: Items of partial optimizer offload that only a GPU (an accelerator whose name is not 'cpu') makes:
#: ``stage3.py`` _optimizer_step (l.1249-1258) steps a sub-group with the backup torch AdamW only where
#: ``subgroup_to_device[i]`` is not 'cpu', and on DeepSpeed's CPU accelerator its name is 'cpu'
#: (``accelerator/cpu_accelerator.py`` l.28), so there DeepSpeedCPUAdam steps every sub-group: no
#: foreach sqrt temporary, no 0-dim step tensors. A CPU measurement leaves them out
#: (``advisor.engine.measure.peak_parity``, through ``timeline.GPU_ONLY``). With ``device: nvme`` the backup
#: AdamW's moments of the swapped sub-groups it steps and its single-tensor step's host temporaries
#: (:func:`twin_flow_backup_swapped`) are such items too: there DeepSpeedCPUAdam steps those sub-groups, their
#: moments made in step 1 and swapped out as at ratio 1.
TWIN_FLOW_GPU_ONLY = ("backup_adamw_sqrt", "backup_adamw_step", "backup_adamw_host_moments", "backup_adamw_host_denom")


#: The torch optimizers DeepSpeed 0.19.8 hands its fp32 tensors to whose step makes temporaries
#: (:func:`torch_step_temporaries`): ``torch_adam`` -> torch.optim.AdamW / Adam, Adagrad without CPU offload ->
#: torch.optim.Adagrad (``engine.py`` _configure_basic_optimizer l.2377-2382, l.2495-2500).
TORCH_STEP_OPTIMIZERS = ("AdamW", "Adam", "Adagrad")
#: The item of torch's foreach step temporaries where a GPU run makes them and a CPU run does not
#: (:func:`torch_step_path`): torch picks _multi_tensor_adam / _multi_tensor_adagrad by default only for
#: tensors on cuda / xpu / mtia / privateuse1 (``torch/optim/optimizer.py`` _default_to_fused_or_foreach
#: l.161-186, ``torch/utils/_foreach_utils.py`` l.8-10), so on DeepSpeed's CPU accelerator the same step runs
#: _single_tensor_adam / _single_tensor_adagrad, whose figure (``device="cpu"``) a CPU measurement compares
#: instead (``advisor.engine.measure.peak_parity``; ``timeline.GPU_ONLY``). The GPU figure is read from torch
#: 2.13's source, not measured on a GPU (none lent); its lists are measured through torch's CPU foreach fallback
#: (``foreach=True``: tests/engine/test_torch_step_kernels.py, equal to the byte). ``init_warmup_step_foreach`` is the
#: same step run by FP16_UnfusedOptimizer's warm-up inside deepspeed.initialize (``timeline.WARMUP_STEP_ITEMS``).
TORCH_STEP_GPU_ONLY = ("torch_step_foreach", "init_warmup_step_foreach")


def torch_step_path(ec: EffectiveConfig, basic: str, host: bool, device: str = "gpu") -> str | None:
    """Which of torch's step implementations steps the fp32 tensors DeepSpeed hands ``basic``: "fused",
    "foreach", "single" (tensor), or None where ``basic`` is not one of :data:`TORCH_STEP_OPTIMIZERS`.
    ``host``: the tensors are host tensors (optimizer offload); ``device``: "gpu" (what the ledger
    models) or "cpu" (DeepSpeed's CPU accelerator, where every tensor is a host tensor).

    ``torch/optim/adam.py`` adam() l.937-967 (adagrad.py adagrad() l.319-340 alike): ``fused`` / ``foreach``
    as the optimizer's params give them (DeepSpeed passes the config's ``optimizer.params``, ``foreach`` popped
    and passed again for torch_adam: ``engine.py`` l.2380-2382), else foreach where every tensor is on a
    foreach device (``optimizer.py`` _default_to_fused_or_foreach l.178-185: cuda, xpu, mtia, privateuse1 --
    never cpu), else the single-tensor loop."""
    if basic not in TORCH_STEP_OPTIMIZERS:
        return None
    p = ec.optimizer.params or {}
    if p.get("fused"):
        return "fused"
    fe = p.get("foreach")
    if fe is None:
        fe = not host and device != "cpu"
    return "foreach" if fe else "single"


def step_tier(ec: EffectiveConfig, basic: str) -> str:
    """The tier of torch's 0-dim ``step`` state tensors: the parameter's device (fp32 partitions on the
    accelerator: "accelerator") when ``fused`` or ``capturable`` is on, else a CPU tensor ("host_pageable"):
    ``torch/optim/adam.py`` _init_group l.163-175 ("Deliberately host `step` on CPU if both capturable and fused
    are off"); under optimizer offload the partitions are host tensors either way. DeepSpeed's own optimizers
    keep a python int or a CPU tensor (:data:`_OPTIMIZER_STATES`): "host_pageable"."""
    p = ec.optimizer.params or {}
    on_device = basic in ("Adam", "AdamW") and (p.get("fused") or p.get("capturable"))
    return "accelerator" if on_device and ec.offload_optimizer_effective == "none" else "host_pageable"


def torch_step_lists(ec: EffectiveConfig, inv: Inventory, W: int, wrapper: str, pl: "Placement") -> list[tuple[int, ...]]:
    """The numels (elements, fp32) of the tensors each torch ``step`` call is given, one tuple per param
    group / sub-group in DeepSpeed's order (torch's Optimizer.step loops over its param_groups, each one
    ``adam()`` / ``adagrad()`` call whose locals are freed on return):

    * stage 0 (no wrapper, or FP16_UnfusedOptimizer): each param group's trainable parameters in model order
      (fp32 ones; FP16_UnfusedOptimizer's fp32 copies ``fp32_groups``, ``fp16/unfused_optimizer.py`` __init__,
      stepped by ``self.optimizer.step()`` l.230);
    * ZeRO-1/2 (DeepSpeedZeroOptimizer): group g's flat fp32 partition, P_g (``stage_1_and_2.py``
      _optimizer_step l.2967-2983: ``self.optimizer.param_groups = [original_param_groups[group_no]]``, whose
      params are ``[single_partition_of_fp32_groups[g]]``); BF16_Optimizer: ``fp32_groups_flat_partition[g]``,
      P_g, one ``self.optimizer.step()`` over every group (``bf16_optimizer.py`` l.422);
    * ZeRO-3: sub-group k's fp32 partition S_k = sum ceil(n_i / W) (``stage3.py`` _optimizer_step l.1235-1262:
      ``param_groups[...]['params'] = [fp32_param]``, one sub-group per call)."""
    if ec.zero.stage == 3:
        return list(inv.memo(("torch_step_lists3", W, tuple((sg.numel, len(sg.tensors)) for sg in pl.sub_groups)),
                             lambda: tuple((sum(_ceil_div(inv.tensors[i].numel, W) for i in sg.tensors),)
                                           for sg in pl.sub_groups)))
    if ec.zero.stage in (1, 2) or wrapper == "BF16_Optimizer":
        return [(lay.P,) for lay in pl.zero12]
    return list(inv.memo(("torch_step_lists0",), lambda: tuple(tuple(t.numel for t in g) for g in inv.groups())))


def torch_step_temporaries(ec: EffectiveConfig, basic: str, lists: "list[tuple[int, ...]]",
                           path: str | None) -> tuple[int, str]:
    """(bytes, formula) of the largest set of temporaries torch 2.13's ``basic`` step makes at once over the
    step calls ``lists`` (:func:`torch_step_lists`) on ``path`` (:func:`torch_step_path`); fp32 tensors, 4 B an
    element. The moments, the 0-dim step tensors and the in-place updates are the optimizer state's, not these.

    * Adam / AdamW single-tensor (``torch/optim/adam.py`` _single_tensor_adam l.347-551): ``denom =
      (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`` (l.544) makes the sqrt and the quotient while the
      previous parameter's denom is still bound: max_i (n_(i-1) + 2 n_i) within a call; a ``grad`` copy
      (``-grads[i]`` with maximize, l.397; ``grad.add(param, alpha=weight_decay)`` for Adam's coupled weight
      decay, l.428) adds n_i: n_(i-1) + 3 n_i. AdamW decays in place (``param.mul_``, l.419).
    * Adam / AdamW foreach (_multi_tensor_adam l.553-800, not capturable): ``exp_avg_sq_sqrt =
      torch._foreach_sqrt(device_exp_avg_sqs)`` (l.790), every tensor's at once: N_call; the grads copy of
      maximize / coupled weight decay (l.675, l.697) is deleted before it (``del device_grads`` l.726); the bias
      corrections are Python floats (l.771-779).
    * Adagrad single-tensor (``torch/optim/adagrad.py`` _single_tensor_adagrad l.364-429): ``std =
      state_sum.sqrt().add_(eps)`` (l.425) beside the previous std: n_(i-1) + n_i, + n_i for a grad copy
      (weight decay l.400, maximize l.393).
    * Adagrad foreach (_multi_tensor_adagrad l.432-540): ``std = torch._foreach_sqrt`` (l.530) and the
      numerator ``torch._foreach_mul(device_grads, minus_clr)`` (l.538; with weight decay or maximize the grads
      copy, l.520, scaled in place instead): 2 N_call.
    * fused (``_fused_adam`` / ``_fused_adagrad``): one kernel in place, none.

    The config's ``weight_decay`` / ``maximize`` apply to every group (a client's per-group values are not
    read); defaults torch's (Adam 0, AdamW 1e-2 decoupled, Adagrad 0)."""
    if path in (None, "fused") or not lists:
        return 0, ""
    p = ec.optimizer.params or {}
    wd = p.get("weight_decay", 1e-2 if basic == "AdamW" else 0) or 0
    maxi = bool(p.get("maximize"))
    adam = basic in ("Adam", "AdamW")
    decoupled = bool(p.get("decoupled_weight_decay", basic == "AdamW"))
    copy = 1 if (maxi or (wd and not (adam and decoupled))) else 0
    if path == "foreach":
        f = 1 if adam else 2
        big = max(sum(c) for c in lists)
        what = ("exp_avg_sq_sqrt = torch._foreach_sqrt, every tensor of the call at once" if adam else
                "torch._foreach_sqrt std and the numerator list")
        return f * big * 4, f"{f} x max over step calls of N_call x 4 = {f} x {big} x 4 (foreach: {what})"
    k = (2 if adam else 1) + copy
    best, at = 0, (0, 0)
    for c in lists:
        prev = 0
        for n in c:
            if prev + k * n > best:
                best, at = prev + k * n, (prev, n)
            prev = n
    what = ("the previous denom, exp_avg_sq.sqrt() and its quotient" if adam else "the previous std and the sqrt")
    if copy:
        what += " and the grad copy" + (" (maximize)" if maxi else " (weight decay)")
    return best * 4, (f"max_i (n_(i-1) + {k} n_i) x 4 = ({at[0]} + {k} x {at[1]}) x 4 (single-tensor: {what})")


#: DeepSpeed's own optimizers, whose step updates the parameter and its state in place in one kernel (no
#: step temporaries): FusedAdam ``ops/adam/fused_adam.py`` l.179-191 (multi_tensor_applier of multi_tensor_adam),
#: DeepSpeedCPUAdam ``ops/adam/cpu_adam.py`` l.170 (ds_opt_adam.adam_update), FusedLion ``ops/lion/fused_lion.py``
#: l.118-128, DeepSpeedCPULion ``ops/lion/cpu_lion.py`` l.130, DeepSpeedCPUAdagrad ``ops/adagrad/cpu_adagrad.py``
#: l.94-100 (their state is made before the kernel: :data:`_OPTIMIZER_STATES`).
IN_PLACE_OPTIMIZERS = ("FusedAdam", "DeepSpeedCPUAdam", "FusedLion", "DeepSpeedCPULion", "DeepSpeedCPUAdagrad")


def adagrad_rebuilt(ec: EffectiveConfig, wrapper: str, basic: str) -> bool:
    """Whether the ZeRO optimizer rebuilds torch's Adagrad over its fp32 partitions (basic torch.optim.Adagrad:
    no CPU offload): ZeRO-1/2 ``stage_1_and_2.py`` initialize_optimizer_states l.943-946, ZeRO-3 ``stage3.py``
    l.1357-1358 (``self.optimizer = torch.optim.Adagrad(<the fp32 partitions>, **self.optimizer.defaults)``),
    whose state Adagrad makes at construction (``adagrad.py`` __init__ l.78-98): the moments exist from
    initialize, not from the first update (``timeline``'s lazy state). The first Adagrad, over the 16-bit
    parameters, is kept by the engine (``engine.py`` l.2353 ``self.basic_optimizer``) with its state
    (:func:`_adagrad_first_state`)."""
    return basic == "Adagrad" and (ec.zero.stage == 3 or (ec.zero.stage in (1, 2)
                                                          and wrapper == "DeepSpeedZeroOptimizer"))


def _adagrad_first_state(b: "_Builder", ec: EffectiveConfig, inv: Inventory, S: str, where: str) -> None:
    """The first torch Adagrad's state, kept (:func:`adagrad_rebuilt`): 'sum' full_like of each 16-bit parameter
    it was built over (whole: ZeRO partitions them later, in the ZeRO optimizer's construction) and a 0-dim step
    each (``adagrad.py`` __init__ l.78-98). Engine: z1_bf16_adagrad_w2 (probe) 86,442 B allocated at
    ``engine.py`` l.2500 live from initialize through the second step; census z2 / z3-bf16-oo_none-adagrad-w1
    (engine.basic_optimizer.state). Under ``zero.Init`` a ZeRO-3 parameter is an empty placeholder when the
    Adagrad is built, so full_like makes ~0 there: this figure is then an upper bound."""
    D = DTYPE_BYTES[ec.model_dtype]
    n_all, nt = inv.memo(("trainable_numel_count",), lambda: (sum(t.numel for t in inv.tensors if t.trainable),
                                                              sum(1 for t in inv.tensors if t.trainable)))
    b.add("accelerator", "optimizer_states", "adagrad_lp_state", n_all * D, "persistent",
          f"N x D = {n_all} x {D} (the first Adagrad's 'sum' of the 16-bit parameters, kept{where})",
          "engine.py:DeepSpeedEngine._configure_basic_optimizer (l.2500 torch.optim.Adagrad), kept as "
          "self.basic_optimizer (l.2353); torch/optim/adagrad.py:Adagrad.__init__; " + S)
    b.add("host_pageable", "optimizer_states", "adagrad_lp_step", 4 * nt, "persistent",
          f"4 B x {nt} step tensors of the 16-bit parameters (kept, as above)", "torch/optim/adagrad.py:Adagrad.__init__")
    if ec.zero.stage == 3:
        # without zero.Init the ZeRO-3 optimizer partitions the whole module after _configure_basic_optimizer made
        # this state (engine.py l.2332 before l.2359): at initialize:module (the whole model, before partitioning)
        # it is live too (engine z3_bf16_adagrad_w2 probe: initialize:module +86,418 B over the ledger without it)
        b.add("accelerator", "optimizer_states", "adagrad_lp_state_before_partition", n_all * D + 4 * nt, "init_module",
              f"N x D + 4 x {nt} = {n_all} x {D} + {4 * nt} (the first Adagrad's state, beside the whole module before "
              "ZeRO-3 partitions it)", "engine.py:DeepSpeedEngine._configure_optimizer (l.2332, before "
              "_configure_zero_optimizer l.2359); torch/optim/adagrad.py:Adagrad.__init__")


def optimizer_kernel_excluded(ec: EffectiveConfig, basic: str) -> list[str]:
    """The ``Ledger.excluded`` lines of the basic optimizer's step: none for DeepSpeed's in-place kernels
    (:data:`IN_PLACE_OPTIMIZERS`) and for torch's Adam / AdamW / Adagrad, whose temporaries are entries
    (:func:`torch_step_temporaries`) -- except amsgrad's third state tensor (``torch/optim/adam.py``
    _init_group l.187-190, max_exp_avg_sq, N x 4) and capturable's 0-dim bias-correction tensors
    (l.734-746); any other optimizer's step temporaries are left out."""
    p = ec.optimizer.params or {}
    if basic in TORCH_STEP_OPTIMIZERS:
        out = []
        if p.get("amsgrad") and basic != "Adagrad":
            out.append(f"torch {basic}'s amsgrad state max_exp_avg_sq (N x 4 beside the moments; "
                       "torch/optim/adam.py _init_group)")
        if p.get("capturable") and torch_step_path(ec, basic, ec.offload_optimizer_effective != "none") != "fused":
            out.append(f"torch {basic}'s capturable step: its 0-dim bias-correction tensors (torch/optim/adam.py "
                       "_multi_tensor_adam l.734-746)")
        return out
    if basic in IN_PLACE_OPTIMIZERS:
        return []
    return [f"the optimizer step's temporaries of {basic} (DeepSpeed's FusedAdam, DeepSpeedCPUAdam, Lion and "
            "DeepSpeedCPUAdagrad kernels make none; torch's Adam, AdamW and Adagrad are modelled)"]


def _torch_step(b: "_Builder", ec: EffectiveConfig, inv: Inventory, W: int, wrapper: str, basic: str,
                pl: "Placement") -> None:
    """The step temporaries of torch's optimizer (:func:`torch_step_temporaries`), entry ``torch_step_foreach``
    (GPU-only: :data:`TORCH_STEP_GPU_ONLY`) or ``torch_step_temporaries`` (what a CPU run makes too: host
    tensors under optimizer offload, or ``foreach`` given), lifetime ``step_update``."""
    if basic not in TORCH_STEP_OPTIMIZERS:
        return
    host = ec.offload_optimizer_effective != "none"
    path = torch_step_path(ec, basic, host)
    nb, formula = torch_step_temporaries(ec, basic, torch_step_lists(ec, inv, W, wrapper, pl), path)
    if not nb:
        return
    cpu_same = torch_step_path(ec, basic, host, "cpu") == path
    src = ("torch/optim/adagrad.py " + ("_multi_tensor_adagrad l.530-540" if path == "foreach" else
                                         "_single_tensor_adagrad l.425") if basic == "Adagrad" else
           "torch/optim/adam.py " + ("_multi_tensor_adam l.790" if path == "foreach" else "_single_tensor_adam l.544"))
    src += "; torch/optim/optimizer.py _default_to_fused_or_foreach l.161-186; " + {
        3: "runtime/zero/stage3.py _optimizer_step l.1235-1262"}.get(
        ec.zero.stage, "runtime/zero/stage_1_and_2.py _optimizer_step l.2967-2983" if ec.zero.stage in (1, 2) else
        "runtime/bf16_optimizer.py step l.422" if wrapper == "BF16_Optimizer" else
        "runtime/fp16/unfused_optimizer.py step l.230" if wrapper == "FP16_UnfusedOptimizer" else
        "runtime/engine.py _take_model_step (the basic optimizer's step)")
    b.add("host_pageable" if host else "accelerator", "workspace",
          "torch_step_temporaries" if cpu_same else "torch_step_foreach", nb, "step_update",
          formula + ("" if cpu_same else "; a GPU's default, from torch's source (on a CPU torch takes the "
                     "single-tensor loop instead)"), src)


def zero3_persistent(inventory: Inventory, zero) -> list[bool]:
    """Which parameters ZeRO-3 keeps gathered on every rank (per tensor, model order), frozen ones
    too (§3.2; ``parameter_offload.py`` mark_persistent_parameters walks module.named_parameters()):
    n_i <= ``stage3_param_persistence_threshold`` while the running persistent numel stays <=
    ``stage3_model_persistence_threshold`` (elements). Once per (tensor list, thresholds):
    callers must not mutate the list."""
    return inventory.memo(("zero3_persistent", zero.param_persistence_threshold, zero.model_persistence_threshold),
                          lambda: _zero3_persistent(inventory, zero))


def _zero3_persistent(inventory: Inventory, zero) -> list[bool]:
    out = []
    tot = 0
    for t in inventory.tensors:
        n = t.numel
        keep = n <= zero.param_persistence_threshold and tot + n <= zero.model_persistence_threshold
        out.append(keep)
        if keep:
            tot += n
    return out


def zero3_stays_gathered(inventory: Inventory, zero, persistent: "list[bool] | None" = None) -> bool:
    """True when ZeRO-3 keeps every parameter gathered from its forward use to its backward use,
    so backward fetches nothing again: ``stage3_max_reuse_distance`` >= 2 x the non-persistent
    numel (§4.5 advisor rule 1, measured G1/G6/G7; ``partitioned_param_coordinator.py``
    __params_to_release: forward->backward reuse distance of a layer ~ 2 x the params after it)."""
    def non_persistent(persistent: "list[bool]") -> int:
        return sum(t.numel for t, p in zip(inventory.tensors, persistent) if not p)
    if persistent is None or persistent is zero3_persistent(inventory, zero):
        # the inventory's own flags: the sum once per (tensor list, thresholds), generate asks per plan
        non_persist = inventory.memo(("zero3_non_persistent_numel", zero.param_persistence_threshold,
                                      zero.model_persistence_threshold),
                                     lambda: non_persistent(zero3_persistent(inventory, zero)))
    else:
        non_persist = non_persistent(persistent)
    return zero.max_reuse_distance >= 2 * non_persist


class JoinedNames(_AbcSequence):
    """A sequence of strings ``heads[i] + tails[i]``, joined when read (iteration is a C-level map): the
    module names of an inventory of repeated layers (:func:`module_names`), whose heads are the layers'
    prefixes (``LayerTensorSpec.prefix``, one string per layer, shared with the tensors) and whose tails
    are one string per position in the layer: two pointer columns (16 B a tensor), not a name string
    each (9e5 module names were 79 MB of check ZeRO-3's peak at 1e5 layers, issue 21)."""

    __slots__ = ("heads", "tails")

    def __init__(self, heads: "list[str]", tails: "list[str]"):
        self.heads, self.tails = heads, tails

    def __len__(self) -> int:
        return len(self.heads)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return list(map(operator.add, self.heads[i], self.tails[i]))
        return self.heads[i] + self.tails[i]

    def __iter__(self) -> "Iterator[str]":
        return map(operator.add, self.heads, self.tails)

    def __reversed__(self) -> "Iterator[str]":
        return map(operator.add, reversed(self.heads), reversed(self.tails))

    def take(self, idx: "Iterable[int]") -> "JoinedNames":
        """The names at ``idx``, joined too (module_index's module names: no string per module)."""
        idx = list(idx)
        return JoinedNames(list(map(self.heads.__getitem__, idx)), list(map(self.tails.__getitem__, idx)))

    def membership(self) -> "_JoinedMembership":
        """A container whose ``in`` is ``in set(self)`` without making the strings (see the class)."""
        return _JoinedMembership(self)


class _JoinedMembership:
    """``q in`` this is ``q in set(names)`` for a :class:`JoinedNames`: for each distinct tail t that ends q,
    whether q minus t is the head of a name with tail t (the heads with each tail, as sets of the shared
    head strings: zero3_container_steps' set of every module name was 104 MB at 1e5 layers, issue 21)."""

    __slots__ = ("names", "tails", "by_tail", "dotted")

    def __init__(self, names: JoinedNames):
        self.names, self.tails, self.by_tail = names, set(names.tails), {}
        # every tail "" or ".<module part>" (_layer_module_names): a tail ending q is then q[i:] at one of q's dots
        self.dotted = all(t[:1] == "." for t in self.tails if t)

    def _heads(self, t: str) -> set:
        # made for a tail when a query first ends with it (a pass over the columns each)
        got = self.by_tail.get(t)
        if got is None:
            got = self.by_tail[t] = set(itertools.compress(self.names.heads, map(t.__eq__, self.names.tails)))
        return got

    def __contains__(self, q: object) -> bool:
        if not isinstance(q, str):
            return False
        if not self.dotted:
            return any((q[:len(q) - len(t)] if t else q) in self._heads(t) for t in self.tails if q.endswith(t))
        # the tails that end q, found at q's dots, not by trying each of the layer's tails: Kimi-K2 per-expert has
        # ~1,000 tails, and generate asked 12,480 queries (7.2M endswith, twice its CPU time, issue 21)
        if "" in self.tails and q in self._heads(""):
            return True
        i = q.find(".")
        while i >= 0:
            if q[i:] in self.tails and q[:i] in self._heads(q[i:]):
                return True
            i = q.find(".", i + 1)
        return False


def _layer_module_names(ts: "Sequence[Any]") -> "JoinedNames | None":
    """:func:`module_names` of ``ts`` as a :class:`JoinedNames` where some are LayerTensorSpecs (their
    module, :func:`module_of` of prefix + suffix, is the prefix + the suffix's own module part: the last dot
    of the name is the suffix's, which starts with one), else None."""
    from advisor.model.inventory import LayerTensorSpec
    if not any(map(isinstance, ts, itertools.repeat(LayerTensorSpec))):
        return None
    L = len(ts)
    heads = list(map(getattr, ts, itertools.repeat("prefix"), itertools.repeat(None)))
    sufs = list(map(getattr, ts, itertools.repeat("suffix"), itertools.repeat(None)))
    tail_of: dict = {None: ""}
    for sfx in set(sufs):
        if sfx is not None and sfx.startswith("."):
            tail_of[sfx] = sfx if sfx.rpartition(".")[2].isdigit() else sfx.rpartition(".")[0]
    tails = list(map(tail_of.get, sufs, itertools.repeat(None)))
    del sufs
    # plain TensorSpecs (no prefix) and any copy whose suffix has no dot (renamed whole): the whole module name
    for i in itertools.compress(range(L), map(operator.not_, map(operator.and_, map(bool, heads),
                                                                 map(operator.is_not, tails, itertools.repeat(None))))):
        heads[i], tails[i] = module_of(ts[i].name), ""
    return JoinedNames(heads, tails)


def module_names(inv: Inventory) -> "Sequence[str]":
    """:func:`module_of` of every tensor's name, in inventory order (a list, or a :class:`JoinedNames` for
    an inventory of repeated layers); once per tensor list (``Inventory.memo``: the load peak, the backward
    order and the fetch passes each walked the names again, ~0.3 s apiece at 1M tensors, issue 21). Callers
    must not mutate it."""
    def compute() -> "Sequence[str]":
        joined = _layer_module_names(inv.tensors)
        if joined is not None:
            return joined
        # module_of inlined (no Python call per tensor; the names and their rpartition by C-level map)
        names = list(map(operator.attrgetter("name"), inv.tensors))
        return [head if dot and not last.isdigit() else name
                for name, (head, dot, last) in zip(names, map(str.rpartition, names, itertools.repeat(".")))]
    return inv.memo(("module_names",), compute)


class ModuleRanges(_AbcSequence):
    """``module_index``'s ``members`` where every module's tensors are consecutive: module k's tensor
    indices ``range(bounds[k], bounds[k + 1])``, made when asked for, from the packed ``bounds``
    (:func:`_packed`). A list of one ``range`` per module held ~120 B a module (the range and its two
    int objects): 241 MB of estimate's 0.8 GB peak on a 2,000,000-tensor inventory (tracemalloc,
    issue 21). Iteration, ``reversed`` and ``len`` of the ranges are C-level maps, as over the list."""

    __slots__ = ("bounds",)

    def __init__(self, bounds: "Sequence[int]"):
        self.bounds = bounds

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        n = len(self.bounds) - 1
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError("module index out of range")
        b = self.bounds
        return range(b[k], b[k + 1])

    def __iter__(self) -> "Iterator[range]":
        return map(range, self.bounds, itertools.islice(self.bounds, 1, None))

    def __reversed__(self) -> "Iterator[range]":
        return map(range, itertools.islice(reversed(self.bounds), 1, None), reversed(self.bounds))


def module_index(inv: Inventory) -> tuple:
    """(members, mod_of, names, bounds): the tensor indices of each owning module (:func:`module_of`) in
    order of first appearance, each tensor's module index, the module names and, where every module's
    tensors are consecutive in the inventory (as in a model's own parameter order), the boundaries
    ``bounds[k] .. bounds[k + 1]`` of module k's tensors (``members[k]`` is then that ``range``), else
    None. Once per tensor list (``Inventory.memo``); found with C-level passes where the modules are
    consecutive (a dict look-up and list per tensor before: ~1 s at 1e5 layers, issue 21). Callers
    must not mutate it."""
    def compute() -> tuple:
        names = module_names(inv)
        L = len(names)
        if not L:
            return [], [], [], [0]
        # packed columns (4 bytes a value, _narrow, not an int object each: ~60 MB at 1e5 layers; the list of
        # module starts alone was 81 MB of a 2M-tensor estimate's peak, issue 21)
        bounds = _narrow(itertools.chain((0,), itertools.compress(range(1, L), map(operator.ne, names,
                                                                                  itertools.islice(names, 1, None))),
                                         (L,)))
        # every module one tensor (a nameless inventory's t0, t1, ...): the heads are the names, not a copy
        heads = names if len(bounds) - 1 == L else (
            names.take(itertools.islice(bounds, len(bounds) - 1)) if isinstance(names, JoinedNames)
            else list(map(names.__getitem__, itertools.islice(bounds, len(bounds) - 1))))
        # every head distinct (each module's tensors consecutive): adjacent in sorted order, not a set of them (a
        # 2M-entry set was 67 MB; the sort of names mostly in order is a few merges)
        ordered = sorted(heads)
        distinct = not any(map(operator.eq, ordered, itertools.islice(ordered, 1, None)))
        del ordered
        if distinct:
            members = ModuleRanges(bounds)
            # every module one tensor (a nameless inventory's t0, t1, ...): tensor i is module i
            mod_of = _narrow(range(L)) if len(heads) == L else _narrow(itertools.chain.from_iterable(
                map(itertools.repeat, range(len(heads)), map(len, members))))
            return members, mod_of, heads, bounds
        index: dict[str, int] = {}
        members_l: list[list[int]] = []
        mod_of = []
        for i, m in enumerate(names):
            k = index.get(m)
            if k is None:
                k = index[m] = len(members_l)
                members_l.append([])
            members_l[k].append(i)
            mod_of.append(k)
        return members_l, mod_of, list(index), None
    return inv.memo(("module_index",), compute)


def zero3_backward_grad_order(inv: Inventory, linear: bool = True) -> "Sequence[int]":
    """Indices into ``inv.tensors`` (packed, an ``array('q')``) of the trainable parameters in the order ZeRO-3's gradient
    hooks fire in backward: module by module (:func:`module_of`) in the reverse of the order the
    modules first appear in the inventory (taken as the forward order), and within a module in
    the reverse of its parameters' order, except an nn.Linear's (:func:`zero3_linear_pairs`) when
    ``linear`` (ZeRO-3's ``memory_efficient_linear``, on by default): its weight's hook fires before
    its bias's.

    Rule: DeepSpeed 0.19.8 hooks each parameter's gradient with ``utils/torch.py``
    register_grad_hook (torch's ``register_post_accumulate_grad_hook``), called from
    ``stage3.py`` create_reduce_and_remove_grad_hooks; the hook fires when autograd's
    AccumulateGrad for that parameter runs. torch's engine (``torch/csrc/autograd/engine.cpp``,
    ReadyQueue ordered by CompareNodeTaskTime) runs the ready node with the highest sequence
    number first, i.e. the one created last in forward, and AccumulateGrad nodes as soon as their
    gradient is ready, so a module run later in forward delivers its gradients first, and within a
    module the parameter used last (registered last, for a 3-D nn.Linear: the bias before the
    weight) first. Measured on the engine (ZeRO-3 bf16, W = 2, the per-module proxy l1..l3):
    l3.bias, l3.weight, l2.bias, l2.weight, l1.bias, l1.weight. Under ``memory_efficient_linear``
    F.linear is ``zero/linear.py`` LinearFunctionForZeroStage3 (partition_parameters.py
    Init._enable_mem_efficient_linear, l. 419, called from Init(module=...) l. 1091 without
    zero.Init too), one node whose backward returns (grad_input, grad_weight, grad_bias)
    (l. 134, l. 141); measured (engine cell z3_bf16_linear_smallbucket_w2, its tracker's
    allocation log): l3.weight, l3.bias, l2.weight, l2.bias, l1.weight, l1.bias, the bias's
    gradient already made when the weight's hook fires. Once per tensor list and flag
    (``Inventory.memo``), O(tensors)."""
    def compute() -> "Sequence[int]":
        tensors = inv.tensors
        # packed (:func:`_packed`): a list held an int object per tensor, 56 MB of a 2M-tensor estimate's peak
        # (tracemalloc, issue 21)
        idx = _packed(itertools.compress(range(len(tensors)), map(operator.attrgetter("trainable"), tensors)))
        # a module's parameters are usually consecutive in the inventory; then the order is
        # simply the reverse. One set look-up per module change detects the other case.
        if module_index(inv)[3] is not None:
            return _weights_first(idx[::-1])  # every module's tensors consecutive (a C-level check)
        seen: set[str] = set()
        prev = None
        names = module_names(inv)
        for i in idx:
            m = names[i]
            if m != prev:
                if m in seen:
                    break
                seen.add(m)
                prev = m
        else:
            return _weights_first(idx[::-1])
        mods: dict[str, list[int]] = {}
        for i in idx:
            mods.setdefault(names[i], []).append(i)
        out: list[int] = []
        for ix in reversed(list(mods.values())):
            out.extend(reversed(ix))
        return _weights_first(_packed(out))

    def _weights_first(order: "Sequence[int]") -> "Sequence[int]":
        pairs = zero3_linear_pairs(inv) if linear else {}
        if not pairs:
            return order
        members = set(pairs)
        members.update(pairs.values())
        pos = {i: k for k, i in enumerate(order) if i in members}
        for w, b in pairs.items():
            if w in pos and b in pos and pos[b] < pos[w]:
                order[pos[b]], order[pos[w]] = w, b
        return order
    return inv.memo(("zero3_backward_grad_order", bool(linear)), compute)


def zero3_linear_pairs(inv: Inventory) -> dict[int, int]:
    """{weight index: bias index} of the modules of ``inv`` that are an nn.Linear: a module
    (:func:`module_of`) whose tensors are exactly a 2-D ``weight`` (out, in) and a 1-D ``bias`` of
    out elements (torch ``nn/modules/linear.py`` Linear.__init__), both trainable. Such a module
    runs F.linear, which ZeRO-3's ``memory_efficient_linear`` replaces (see
    :func:`zero3_backward_grad_order`). A square GPT-2 Conv1D (weight (in, out), torch.addmm) has the
    same shapes and is taken as a Linear too. Memoised per tensor list, O(tensors)."""
    def compute() -> dict[int, int]:
        from collections import Counter
        tensors = inv.tensors
        members, _, _, bounds = module_index(inv)
        if bounds is not None:
            # consecutive modules: only the two-tensor ones can be a Linear (no per-tensor dicts, issue 21)
            out: dict[int, int] = {}
            for k in itertools.compress(range(len(members)), map((2).__eq__, map(len, members))):
                i0 = bounds[k]
                n0, n1 = tensors[i0].name, tensors[i0 + 1].name
                if n0.endswith(".weight") and n1.endswith(".bias"):
                    iw, ib = i0, i0 + 1
                elif n1.endswith(".weight") and n0.endswith(".bias"):
                    iw, ib = i0 + 1, i0
                else:
                    continue
                w, b = tensors[iw], tensors[ib]
                if (w.trainable and b.trainable and len(w.shape) == 2 and len(b.shape) == 1
                        and b.shape[0] == w.shape[0]):
                    out[iw] = ib
            return out
        names = module_names(inv)
        count = Counter(names)  # tensors per module (C speed)
        tensors = inv.tensors
        tnames = [t.name for t in tensors]
        weights = {names[i]: i for i, n in enumerate(tnames) if n.endswith(".weight")}
        biases = {names[i]: i for i, n in enumerate(tnames) if n.endswith(".bias")}
        out: dict[int, int] = {}
        for m, ib in biases.items():
            iw = weights.get(m)
            if iw is None or count[m] != 2:
                continue
            w, b = tensors[iw], tensors[ib]
            if (w.trainable and b.trainable and len(w.shape) == 2 and len(b.shape) == 1
                    and b.shape[0] == w.shape[0]):
                out[iw] = ib
        return out
    return inv.memo(("zero3_linear_pairs",), compute)


def autograd_siblings(inv: Inventory) -> list[int]:
    """Per tensor of ``inv.tensors``: elements of another parameter's gradient that the same
    autograd node makes with this one's and that is still whole, not yet accumulated, when this
    one's post-accumulate hook fires; 0 for most tensors.

    The pair is a module's ``weight`` and ``bias`` (both trainable, the bias 1-D with
    weight.shape[0] or weight.shape[-1] elements: nn.Linear, GPT-2's Conv1D, LayerNorm, convs):
    one backward node makes both gradients (torch ``tools/autograd/derivatives.yaml``: addmm's
    self and mat2, native_layer_norm_backward's weight and bias outputs). torch's engine
    (``torch/csrc/autograd/engine.cpp`` CompareNodeTaskTime) runs AccumulateGrad nodes first, and
    for nn.Linear the bias's gradient reaches its AccumulateGrad directly while the weight's
    passes TBackward0 first, so the bias's hook fires while the weight's gradient is whole
    (measured: torch 2.13, F.linear on bf16, the bias's post-accumulate hook sees weight.grad
    None; the ZeRO-2 engine cell z2_bf16_linear_smallbucket_w2). The later-registered of the pair
    (the bias) arrives first, as in ZeRO-2's reverse model order, so the later one gets the
    earlier one's elements. At ZeRO-3 F.linear is DeepSpeed's LinearFunctionForZeroStage3 (see
    :func:`zero3_reduce_flush_bytes`); the other pairs are :func:`zero3_autograd_siblings`. Bytes are elements x the
    gradient's dtype. Memoised per tensor list, O(tensors)."""
    def compute() -> list[int]:
        tensors = inv.tensors
        out = [0] * len(tensors)
        for iw, ib in autograd_pairs(inv).items():
            if ib > iw:
                out[ib] = tensors[iw].numel
            else:
                out[iw] = tensors[ib].numel
        return out
    return inv.memo(("autograd_siblings",), compute)


def autograd_pairs(inv: Inventory) -> dict[int, int]:
    """{weight index: bias index} of the pairs :func:`autograd_siblings` takes as made by one
    autograd node at ZeRO-1/2: a ``X.weight`` and ``X.bias`` (same ``X``), both trainable, the bias
    1-D with weight.shape[0] or weight.shape[-1] elements (the sources are
    :func:`autograd_siblings`'). Memoised per tensor list, O(tensors)."""
    def compute() -> dict[int, int]:
        tensors = inv.tensors
        # biases first, weights only where a bias names their module: no head string per tensor
        # (9e5 of them at 1e5 layers, ~0.15 GB at once, for a model without biases, where no weight is
        # looked at; issue 21). A name ending ".bias" is what rpartition(".") splits into a non-empty
        # head and "bias"; the last tensor of a name wins, as before
        # the candidates by C-level maps, each name read once (a repeated layer's is joined when read:
        # inventory.LayerTensorSpec), the Python test only for names with the ending
        def ending(end: str) -> "Iterator[int]":
            return itertools.compress(itertools.count(), map(operator.methodcaller("endswith", end),
                                                              map(operator.attrgetter("name"), tensors)))
        biases: dict[str, int] = {}
        for i in ending(".bias"):
            t = tensors[i]
            if t.trainable and len(t.name) > 5:
                biases[t.name[:-5]] = i
        weights: dict[str, int] = {}
        if biases:
            for i in ending(".weight"):
                t = tensors[i]
                if t.trainable and len(t.name) > 7 and t.name[:-7] in biases:
                    weights[t.name[:-7]] = i
        out: dict[int, int] = {}
        for head, ib in biases.items():
            iw = weights.get(head)
            if iw is None:
                continue
            w, b = tensors[iw], tensors[ib]
            if len(b.shape) != 1 or not w.shape or b.shape[0] not in (w.shape[0], w.shape[-1]):
                continue
            out[iw] = ib
        return out
    return inv.memo(("autograd_pairs",), compute)


def zero3_autograd_siblings(inv: Inventory, linear: bool = True) -> "list[int] | None":
    """:func:`autograd_siblings` at ZeRO-3 (None where there is none): the pairs one torch autograd node makes at
    ZeRO-3 too, i.e. all but the nn.Linear's that ``memory_efficient_linear`` (``linear``) routes through
    ``zero/linear.py`` LinearFunctionForZeroStage3 (:func:`zero3_linear_pairs`, weight first): a GPT-2
    Conv1D's torch.addmm (AddmmBackward0) and a LayerNorm's native_layer_norm_backward. The bias's hook fires
    first (:func:`zero3_backward_grad_order`: a module's parameters in reverse) while the weight's gradient,
    made by the same node, is still whole. Measured (2026-12-06, ZeRO-3 bf16, W = 2, reduce_bucket_size
    10,000, real addmm / layer_norm nodes in measure's proxy): a GPT-2 MLP's c_fc.bias arrival flushes
    c_proj.weight's bucket with c_fc.weight's 19,264-element gradient whole beside it, +38,711 B in the
    steady backward and +38,703 B in the first (7.1% / 11.9%) without it. A square Conv1D has an nn.Linear's
    shapes and is taken as one (weight first, no sibling). Once per tensor list and flag."""
    def compute() -> "list[int] | None":
        skip = zero3_linear_pairs(inv) if linear else {}
        pairs = [(iw, ib) for iw, ib in autograd_pairs(inv).items() if iw not in skip]
        if not pairs:
            return None
        sib = autograd_siblings(inv)
        out = [0] * len(inv.tensors)
        for iw, ib in pairs:
            j = max(iw, ib)
            out[j] = sib[j]
        return out
    return inv.memo(("zero3_autograd_siblings", bool(linear)), compute)


def linear_pairs(inv: Inventory, stage: int) -> dict[int, int]:
    """{weight index: bias index} of the tensors the ledger takes as an nn.Linear's weight and bias
    (one ``F.linear`` autograd node) at ZeRO stage ``stage``: at 3 :func:`zero3_linear_pairs`
    (a module of exactly the two, its gradient order under ``memory_efficient_linear``); at 0-2
    the pairs of :func:`autograd_siblings` whose weight is 2-D (out, in) with a bias of out
    elements (torch ``nn/modules/linear.py`` Linear.__init__). ``ds-advisor measure`` builds its
    proxy's real ``F.linear`` nodes exactly here (engine/measure.py ``run_measure_many``), so the
    engine's gradients come as the ledger assumes. Other sibling pairs (a LayerNorm's 1-D weight, a
    GPT-2 Conv1D's (in, out) weight) stay one node per parameter in the proxy."""
    if stage == 3:
        return zero3_linear_pairs(inv)
    tensors = inv.tensors
    return {iw: ib for iw, ib in autograd_pairs(inv).items()
            if len(tensors[iw].shape) == 2 and tensors[ib].shape[0] == tensors[iw].shape[0]}


def autograd_node_pairs(inv: Inventory, stage: int) -> dict[int, tuple[int, str]]:
    """{weight index: (bias index, kind)} of every weight and bias the ledger takes as made by one autograd
    node at ZeRO stage ``stage``, for ``ds-advisor measure``'s proxy to build that node (engine/measure.py
    ``run_measure_many``, worker ``_build_model``): kind ``linear`` where :func:`linear_pairs` says (F.linear);
    of the other :func:`autograd_pairs`, ``conv1d`` a 2-D weight (in, out) with a bias of out elements (HF
    ``pytorch_utils.py`` Conv1D.forward: torch.addmm(bias, x, weight)) and ``layer_norm`` a 1-D weight with a
    bias of as many (torch ``nn/modules/normalization.py`` LayerNorm: F.layer_norm, one
    native_layer_norm_backward node makes both gradients). Other pairs (a conv's 4-D weight) stay one node
    per parameter in the proxy."""
    tensors = inv.tensors
    out = {iw: (ib, "linear") for iw, ib in linear_pairs(inv, stage).items()}
    for iw, ib in autograd_pairs(inv).items():
        if iw in out:
            continue
        w, b = tensors[iw].shape, tensors[ib].shape
        if len(w) == 2 and b[0] == w[1]:
            out[iw] = (ib, "conv1d")
        elif len(w) == 1 and b[0] == w[0]:
            out[iw] = (ib, "layer_norm")
    return out


def zero3_reduce_flush_bytes(ec: EffectiveConfig, inv: Inventory, W: int) -> "tuple[int, str, tuple[int, int, int]] | None":
    """(bytes, which instant, (start, body, end) bytes) of the most ZeRO-3's gradient reduce holds beside its persistent
    buffers at one instant of backward, or None where it is not modelled (ZeRO++ qgZ:
    :func:`zero3_reduce_flush_modeled`). W = 1 takes the same path (measured: a flush of several gradients is
    a ``torch.cat`` of them, unpadded). Whole gradients are D bytes an element (the model's dtype), the bucket
    and the flat buffer C (``communication_data_type``); a flush's casts to C and to ``grad_accum_dtype`` are
    :func:`_zero3_flush_copies`.

    DeepSpeed 0.19.8 ``stage3.py``; gradients arrive in :func:`zero3_backward_grad_order`.
    reduce_independent_p_g_buckets_and_remove_grads (l. 1583-1585): when the bucket holds elements
    and the arriving parameter's n would take it past ``reduce_bucket_size``, the bucket is
    flushed first, while the arriving gradient is still whole (n x D bytes, made by autograd in
    engine.backward, l. 3428); only then __add_grad_to_ipg_bucket (l. 1626) copies it into the
    contiguous bucket buffer (counted as ``ipg_bucket``), and only when bucket elements + n <=
    ``reduce_bucket_size``: a gradient larger than the bucket (or every gradient without
    ``contiguous_gradients``) stays its own whole tensor in the bucket until its flush. A flush
    (__reduce_and_partition_ipg_grads) with ``contiguous_gradients``, no ``reduce_scatter`` and
    elements <= ``reduce_bucket_size`` all-reduces the buffer in place; any other runs
    __avg_scatter_grads -> ``coalesced_collectives.py`` reduce_scatter_coalesced, which
    ``torch.cat``'s every gradient's W chunks, each padded to ceil(n_i/W), into one buffer of
    sum ceil(n_i/W) x W x C bytes (none for one tensor with n % W == 0: a view). The end of
    backward flushes what is left (independent_gradient_partition_epilogue), with no gradient
    arriving. Live at a flush: that flat buffer + the bucket's own whole gradients + the arriving
    one; at an arrival without a flush, the bucket's own whole gradients + the arriving one (before
    its copy). Under CPU/NVMe optimizer offload a flush also holds, one at a time, an fp64 copy of
    each of its gradients' partitions (partition_grads -> _offload_grad_partition_at_boundary ->
    _constant_buffered_norm2: ``part.data.to(get_norm_dtype())``, split at 250,000,000 elements),
    while the reduce-scatter's outputs, views of its flat buffer, are alive: + the bucket's largest
    min(ceil(n_i/W), 250,000,000) x 8 at that flush only (it is freed inside the flush; the
    ledger counted it at every backward instant before). Not counted: gloo's second buffer inside reduce_scatter_tensor on CPU (the NCCL
    path is modelled); the bias gradient an nn.Linear's node made with the arriving weight's
    (ZeRO-3's default ``memory_efficient_linear`` routes F.linear through ``zero/linear.py``
    LinearFunctionForZeroStage3, whose backward returns the weight's gradient before the bias's:
    measured, the weight's hook fires with the bias's out x D bytes whole, 154 B for TINY's l2;
    :func:`autograd_siblings` is the ZeRO-1/2 side, plain F.linear). Counted: the whole gradient the
    arriving one's autograd node made with it where that node is torch's (:func:`zero3_autograd_siblings`:
    a GPT-2 Conv1D's addmm, a LayerNorm's, and with ``memory_efficient_linear`` off F.linear too: the
    bias's hook first, the weight's gradient whole beside it). Bytes are the maximum over these
    instants, and the third item the maximum over those in each region of backward: ``start``
    (arrivals of modules outside the layers before any layer's: those after the last layer in
    forward, e.g. lm_head, the final norm), ``body`` (arrivals of a layer's gradient, module names
    ``layers.i`` / ``h.i`` / ``blocks.i``), ``end`` (other modules after them, e.g. the embedding,
    and the epilogue's flush); memoised per (tensor list, W, dtype bytes, bucket size,
    contiguous_gradients, reduce_scatter), one O(tensors) pass."""
    z = ec.zero
    if not zero3_reduce_flush_modeled(ec) or W < 1:
        return None
    C, D, G = _zero3_flush_dtypes(ec)
    pf = zero3_predivide_factor(ec)
    rbs = int(z.reduce_bucket_size)
    contiguous, rs = bool(z.contiguous_gradients), bool(z.reduce_scatter)
    norm = ec.offload_optimizer_effective != "none"
    linear = bool(z.memory_efficient_linear)
    tails = zero3_flush_grad_tails(ec, inv, W)
    tkey = (z.sub_group_size, swap_threshold_bytes(ec), aio_alignment_elems(ec, 4)) if tails else None
    # once per (tensor list, W, C, bucket size, flags): generate asks per plan (Inventory.memo)
    return inv.memo(("zero3_reduce_flush_bytes", W, C, D, G, pf, rbs, contiguous, rs, norm, linear, tkey),
                    lambda: _zero3_reduce_flush_bytes(inv, W, C, rbs, contiguous, rs, norm, linear=linear,
                                                      tails=tails, D=D, G=G, predivide=pf))


def zero3_predivide_factor(ec: EffectiveConfig) -> "float | None":
    """``gradient_predivide_factor`` where ZeRO-3 applies it (``postscale_gradients``, i.e. not
    ``prescale_gradients``: ``engine.py`` l. 1736-1737, passed to ``stage3.py`` l. 381-382), else None."""
    return None if ec.prescale_gradients else float(ec.gradient_predivide_factor)


def ranks_per_node(plan: Plan, hardware: Any = None) -> int:
    """Ranks on one node (DeepSpeed's ``get_accelerator().device_count()``): ``--gpus-per-node``, else the
    hardware's accelerators per node (not an accelerator preset alone, which says nothing about the node:
    :attr:`advisor.cluster.hardware.Hardware.node_accelerators`), else min(world size, 8); never more than
    the world size."""
    cl = plan.cluster
    if cl.gpus_per_node:
        return max(1, min(cl.gpus_per_node, cl.world_size))
    if hardware is not None and getattr(hardware, "node_accelerators", None):
        return max(1, min(hardware.node_accelerators, cl.world_size))
    return max(1, min(cl.world_size, 8))


def ledger_config(plan: Plan) -> EffectiveConfig:
    """``plan.config`` as the ledger's code paths read it. ZeRO++ qgZ (``zero_quantized_gradients``) changes
    ZeRO-3's gradient reduce only when the job spans nodes: ``stage3.py`` __avg_scatter_grads takes
    all_to_all_quant_reduce only where ``num_nodes = world // device_count() > 1`` (l. 1925-1929), else
    reduce_scatter_coalesced as without qgZ (l. 1930; qgZ asserts reduce_scatter on, l. 389-390), and
    __avg_scatter_contiguous_grads never reads it: on one node the flush is modelled as without qgZ
    (:func:`zero3_reduce_flush_modeled`). The same config otherwise (memoised in ``plan.derived``)."""
    ec = plan.config
    z = ec.zero
    if not (z.stage == 3 and z.zero_quantized_gradients):
        return ec
    if plan.cluster.world_size // ranks_per_node(plan) > 1:
        return ec
    got = plan.derived.get("ledger_config")
    if got is None:
        got = plan.derived["ledger_config"] = replace(ec, zero=replace(z, zero_quantized_gradients=False))
    return got


def zero3_reduce_flush_modeled(ec: EffectiveConfig) -> bool:
    """Whether :func:`zero3_reduce_flush_bytes` models this ZeRO-3 plan's gradient reduce: not under ZeRO++ qgZ
    across nodes (its quantized all-to-all buffers; on one node :func:`ledger_config` turns qgZ off, as DeepSpeed
    takes reduce_scatter_coalesced there). Any ``communication_data_type`` and ``grad_accum_dtype``: their casts are
    :func:`_zero3_flush_copies`, as are gradient_predivide_factor's (without reduce_scatter). Measured on the engine
    (TINY, real Linears, W = 2, reduce_bucket_size 10,000, 2026-12-06): a bf16 model with communication_data_type
    fp32 (with and without CPU optimizer offload, and with reduce_scatter off), grad_accum_dtype fp32, and both:
    every backward and step phase within 0.01% on both ranks, where the ledger had left the flush out
    (backward:1 +68% without offload, backward:2 +25% with it); without reduce_scatter, gradient_predivide_factor 2
    and 4: within 0.01%, where the ledger had backward:1 +46,399 B (+14.0%) and +69,575 B (+20.9%). The engine
    cells are z3_bf16_oo_cpu_linear_commfp32_smallbucket_w2 and z3_bf16_linear_nors_pre4_smallbucket_w2."""
    return not ec.zero.zero_quantized_gradients


def zero3_flush_paths(ec: EffectiveConfig, inv: Inventory) -> tuple[int, int]:
    """(all-reduce, reduce-scatter): how many of ``inv``'s trainable gradients each ZeRO-3 flush path takes.
    DeepSpeed 0.19.8 ``stage3.py`` __reduce_and_partition_ipg_grads (l. 1674-1678) takes
    __avg_scatter_contiguous_grads (an in-place all_reduce of the bucket's contiguous buffer) when
    ``contiguous_gradients``, no ``reduce_scatter`` and the bucket's elements <= ``reduce_bucket_size``; every other
    flush takes __avg_scatter_grads -> ``coalesced_collectives.py`` reduce_scatter_coalesced. A gradient of n <=
    ``reduce_bucket_size`` elements is always in such a bucket (l. 1583: the bucket is flushed before it would pass
    the size); one larger is alone in its bucket (l. 1583 flushes it as the next arrives), over the size."""
    z = ec.zero
    rbs = int(z.reduce_bucket_size)
    ns = _zero3_grad_columns(inv, bool(z.memory_efficient_linear))[1]
    if not z.contiguous_gradients or z.reduce_scatter:
        return 0, len(ns)
    small = sum(1 for n in ns if n <= rbs)
    return small, len(ns) - small


def zero3_short_shares(ec: EffectiveConfig, inv: Inventory, W: int) -> int:
    """How many of ``inv``'s trainable gradients reach __avg_scatter_contiguous_grads (:func:`zero3_flush_paths`)
    with a share short on some rank: partition_numel is ceil(n/W) (``partition_parameters.py`` _padding_size
    l. 1693-1696, _aligned_size // W l. 1909-1910) while the rank's slice of the reduced buffer is
    min((r + 1) ceil(n/W), n) - min(r ceil(n/W), n) (``stage3.py`` l. 1890-1893), shorter on the last ranks exactly
    when n % W != 0 (W > 1); such a rank gets a zero-padded copy (l. 1898-1902)."""
    z = ec.zero
    if W <= 1 or not z.contiguous_gradients or z.reduce_scatter:
        return 0
    rbs = int(z.reduce_bucket_size)
    ns = _zero3_grad_columns(inv, bool(z.memory_efficient_linear))[1]
    return inv.memo(("zero3_short_shares", bool(z.memory_efficient_linear), rbs, W),
                    lambda: sum(1 for n in ns if n <= rbs and n % W))


def zero3_backward_copies_excluded(ec: EffectiveConfig, walks: "Sequence[tuple[Inventory, int]]") -> str:
    """The words of a ZeRO-3 plan's ``excluded`` line for its backward copies ("" where none is left out): what
    of the gradient reduce this plan has and the ledger leaves out. ``walks``: the (tensor list, partition group
    size W) each rank role walks (the plan's inventory and zero world size; under tensor / pipeline / expert
    parallelism each shard's). The whole flush where :func:`zero3_reduce_flush_modeled` says no (qgZ across
    nodes: ``stage3.py`` l. 1927-1929 all_to_all_quant_reduce); the zero-padded partitions
    __avg_scatter_contiguous_grads makes for a rank whose share of a gradient is short, only where some gradient
    takes that path with n % W != 0 (:func:`zero3_short_shares`; measured, TINY W = 2, reduce_bucket_size 50,000:
    rank 1 +23,950 B, the ledger's walk being rank 0's); an nn.Linear's bias gradient, whole as its weight's hook
    fires, where ``memory_efficient_linear`` (on by default) routes the model's nn.Linear modules
    (:func:`zero3_linear_pairs`) through ``zero/linear.py`` LinearFunctionForZeroStage3 (l. 134, 141: both made
    at once; out x D bytes). A communication_data_type or grad_accum_dtype unlike the model's and
    gradient_predivide_factor's copies are counted (:func:`_zero3_flush_copies`), and with
    ``memory_efficient_linear`` off the weight whole at its bias's arrival (:func:`zero3_autograd_siblings`)."""
    z = ec.zero
    parts = []
    modeled = zero3_reduce_flush_modeled(ec)
    if not modeled:
        parts.append("the whole gradient flush under qgZ across nodes (stage3.py __avg_scatter_grads l. 1927-1929: "
                     "all_to_all_quant_reduce; the gradients held whole, their casts and the quantized buffers: no "
                     "flush is on the timeline)")
    short = sum(zero3_short_shares(ec, inv, W) for inv, W in walks) if modeled else 0
    if short:
        parts.append(f"without reduce_scatter, the zero-padded gradient partitions an in-bucket all-reduce flush "
                     f"makes on a rank whose share of a gradient is short ({short:,} gradients of n % W != 0 within "
                     "reduce_bucket_size; stage3.py __avg_scatter_contiguous_grads l. 1898-1902: ceil(n_i/W) x "
                     "grad_accum_dtype bytes each, on the last ranks; rank 0's figure is counted)")
    if z.memory_efficient_linear and any(zero3_linear_pairs(inv) for inv, _ in walks):
        parts.append("an nn.Linear's bias gradient, whole as its weight's arrives (LinearFunctionForZeroStage3 "
                     "returns both at once; out x D bytes)")
    if not parts:
        return ""
    line = "ZeRO-3 backward copies: " + ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
    if modeled:
        line += ("; otherwise the flush's buffers, its casts to communication_data_type and back, its "
                 "gradient_predivide_factor copies, the gradients held whole and the in-step flatten/cast are on "
                 "the timeline")
    return line


def _zero3_flush_dtypes(ec: EffectiveConfig) -> tuple[int, int, int]:
    """(C, D, G) bytes of ZeRO-3's communication_data_type, model dtype and gradient_accumulation_dtype
    (``engine.py`` get_data_types l. 1799-1810: grad_accum_dtype, else the model's)."""
    return DTYPE_BYTES[ec.comm_dtype], DTYPE_BYTES[ec.model_dtype], DTYPE_BYTES[ec.grad_dtype]


def zero3_flush_grad_tails(ec: EffectiveConfig, inv: Inventory, W: int) -> "tuple[int, ...] | None":
    """Per tensor (model order), the bytes of its fp32 gradient copy that ZeRO-3 keeps in memory
    after its reduce under ``offload_optimizer: nvme`` (:func:`zero3_grad_swap_bytes`' kept bytes for a
    parameter of a swappable sub-group, else 0), or None without optimizer swap (or none kept).

    DeepSpeed 0.19.8 ``stage3.py`` partition_grads (l. 2041-2053): at the accumulation boundary each
    gradient partition of a swappable sub-group is copied to fp32 (_offload_grad_partition_at_boundary,
    l. 1453, after its fp64 norm copy, l. 1446) and, once the whole flush is partitioned,
    handed to the swapper (_swap_out_offload_fp32_gradients, l. 2053 -> ``optimizer_utils.py``
    _swap_out_gradients, l. 256-287): a piece below the aio size, or the unaligned remainder (a view
    of the whole copy, l. 474), stays in ``unswapped_gradients`` until the sub-group's step
    (``partitioned_optimizer_swapper.py`` swap_out_optimizer_state, l. 146). So these bytes appear
    flush by flush through backward, not at its start (measured, z3_bf16_oo_nvme_w2: counted at every
    backward instant the first flush read 2,123,864 B over the engine). Rank 0's figure (p_i =
    ceil(n_i/W) real elements, :func:`zero3_grad_swap_by_rank`): the flush walk is one for all ranks;
    the rank holding a remainder of a tensor keeps at most that partition's bytes less."""
    if ec.zero.stage != 3 or ec.offload_optimizer_effective != "nvme" or W < 1:
        return None
    smin = swap_threshold_bytes(ec)
    al = aio_alignment_elems(ec, 4)
    sgs = ec.zero.sub_group_size

    def walk() -> "tuple[int, ...] | None":
        out = [0] * len(inv.tensors)
        for sg in zero3_sub_groups(inv, W, sgs):
            if sg.numel * 4 < smin:  # stage3.py _swappable_optimizer_subgroup: kept in host memory
                continue
            for i in sg.tensors:
                out[i] = zero3_grad_swap_bytes(_ceil_div(inv.tensors[i].numel, W), smin, al)[1]
        return tuple(out) if any(out) else None
    return inv.memo(("zero3_flush_grad_tails", W, sgs, smin, al), walk)


#: stage3.py _constant_buffered_norm2(input, buffer_size=250000000): the fp64 copy is of at most
#: this many elements at once
NORM_SPLIT_ELEMENTS = 250_000_000


def _zero3_grad_columns(inv: Inventory, linear: bool) -> tuple:
    """(order, numel, in-a-layer flag) of the trainable parameters in :func:`zero3_backward_grad_order`,
    and the prefix sums of their numels: the columns both reduce-flush passes read, once per tensor list
    and flag (the pure pass and the two gathered ones walked ``inv.tensors`` again each, issue 21)."""
    def compute() -> tuple:
        from advisor.model.parallel import in_layer_flags
        in_layer = in_layer_flags(inv)
        order = zero3_backward_grad_order(inv, linear)
        tensors = inv.tensors
        ns = [tensors[i].numel for i in order]
        return order, ns, bytes(in_layer[i] for i in order), _packed(itertools.accumulate(ns, initial=0))
    return inv.memo(("zero3_grad_columns", bool(linear)), compute)


#: issue 21: the column pass's flush_extra computes a bucket's flat buffer once per distinct value of what it reads
#: (False: once per flush, the reference; tests/test_flush_by_values22.py compares them)
ZERO3_FLUSH_BY_VALUES = True


def _zero3_reduce_flush_bytes(inv: Inventory, W: int, C: int, rbs: int, contiguous: bool,
                              reduce_scatter: bool, norm: bool = False,
                              gathered: "tuple | None" = None,
                              linear: bool = True,
                              tails: "tuple[int, ...] | None" = None,
                              D: int = 0, G: int = 0,
                              predivide: "float | None" = 1.0) -> "tuple[int, str, tuple[int, int, int]] | None":
    """The walk of :func:`zero3_reduce_flush_bytes` (``gathered``, ``tails``: see :func:`_zero3_reduce_flush_walk`;
    the tails a flush keeps are added to every later instant, a constant between two flushes).
    With ``contiguous_gradients`` and no gradient larger than the bucket, no gradient ever stays its own
    tensor in the bucket (__add_grad_to_ipg_bucket copies each), so every instant's bytes are the arriving
    gradient's (+ what is gathered, + a flush's buffers at the few flushes): computed column-wise, the
    flushes found by bisection over the numel prefix sums (issue 21: the walk was ~1 s per pass at 1e5
    layers, three passes per plan). The same figures and words as the walk
    (tests/test_reduce_flush_identity.py compares them on random inventories). ``D``, ``G``: the model's and the
    gradient partitions' dtype bytes (0: C's), for the casts of :func:`_zero3_flush_copies`; whole gradients are
    D bytes a element, the flat buffer C. ``predivide``: gradient_predivide_factor under postscale_gradients (None: with
    prescale_gradients), for the flush's predivide copies (:func:`_zero3_flush_copies`)."""
    order, ns, inl, P = _zero3_grad_columns(inv, linear)
    L = len(ns)
    # a gradient larger than the bucket stays its own tensor in it (__add_grad_to_ipg_bucket, l. 1626): it
    # always starts a bucket (a bucket holding anything flushes as it arrives, l. 1583) and is flushed alone as
    # the next gradient arrives, whole beside that gradient and the next module's fetch (own_of) -- but after
    # empty gradients (held 0: no flush) it joins their bucket: walked then. Without fp32 gradient tails the
    # walk skips identical layers (_flush_period) and is the faster; with them it walked every gradient
    # (Kimi-K2 per-expert, whose embeddings exceed the bucket: 12 walks, ~1.5 s of its generate, issue 21)
    big = bool(L) and max(ns) > rbs
    if not L or not contiguous or rbs < 1 or (big and (min(ns) == 0 or not tails)):
        return _zero3_reduce_flush_walk(inv, W, C, rbs, contiguous, reduce_scatter, norm, gathered, linear, tails,
                                        D=D, G=G, predivide=predivide)
    D = D or C
    tensors = inv.tensors
    # prefix sums of sum ceil(n_i/W) x W (the reduce-scatter's flat buffer), once per tensor list, flag and W
    F = inv.memo(("zero3_grad_padded_prefix", bool(linear), W),
                 lambda: _packed(itertools.accumulate((-(-n // W) * W for n in ns), initial=0)))
    # the flushes: a bucket started at position a is flushed as the gradient at p arrives, p the first with
    # P[p + 1] - P[a] > rbs (stage3.py l. 1583); that gradient starts the next bucket
    # (once per tensor list, flag and bucket size: the pure pass and the gathered ones of every W and plan share them)
    # (packed columns, not a list of (start, trigger) tuples: kept, ~7 MB a list at 1e5 tensors)
    def find_flushes() -> tuple:
        los, ps = array.array("q"), array.array("q")
        a = 0
        while True:
            # from a + 2: the bucket's first gradient never triggers its flush (a + 1 gives the same where it
            # fits the bucket, P[a + 1] <= P[a] + rbs; one larger than the bucket is flushed by the next arrival)
            j = bisect.bisect_right(P, P[a] + rbs, a + 2)
            if j > L:
                break
            los.append(a)
            ps.append(j - 1)
            a = j - 1
        return _FlushPairs(los, ps), a
    flushes, a = inv.memo(("zero3_grad_flushes", bool(linear), rbs), find_flushes)

    def own_of(lo: int) -> int:
        # elements held whole in the bucket starting at position lo: its first gradient where larger than the
        # bucket (then alone in it, the walk's ``own``), else none (each gradient copied into the bucket)
        return ns[lo] if big and ns[lo] > rbs else 0

    def flat_of(lo: int, hi: int) -> tuple[int, int]:
        # (flat-buffer bytes with the flush's casts, fp64 norm-copy elements) of the bucket holding positions
        # lo .. hi - 1; flat + norm elements x 8 (+ own_of x D) is the flush's largest moment (_zero3_flush_copies)
        held = P[hi] - P[lo]
        count = hi - lo
        q = (F[hi] - F[lo]) // W  # the rank's reduce-scatter outputs, sum ceil(n_i/W) (rank 0's)
        ar = held <= rbs and not reduce_scatter
        if ar:
            fb, q = 0, held  # an in-place all_reduce of the contiguous buffer (cast whole to G, if at all)
        elif count == 1 and held % W == 0:
            fb = 0  # one unpadded tensor: a view
        else:
            fb = (F[hi] - F[lo]) * C
        # max over the bucket of min(ceil(n/W), split): non-decreasing in n, so that of its largest n (C-level max)
        pm = min(-(-max(ns[lo:hi]) // W), NORM_SPLIT_ELEMENTS) if norm else 0
        return (_zero3_flush_copies(fb, own_of(lo), q, pm, C, D, G, held, *_zero3_predivide_copies(predivide, W, ar))
                - pm * 8, pm)

    def bucket(lo: int, hi: int) -> str:
        count = hi - lo
        first, last = tensors[order[lo]].name, tensors[order[hi - 1]].name
        return first if count == 1 else f"{count} gradients, {first} .. {last}"

    def words(best: int, pa: int, pf: int, g_at: Any, mods_at: Any, kept_at: Any, kept_end: int, held_end: int,
              at_end: int, extra: dict, at_fetch: Any) -> str:
        # the words for the largest instant: the module fetch at position pf, the arrival (or flush) at pa, or
        # the epilogue (L: none); g_at / mods_at: gathered bytes and module index of a position
        if pf < L and pf <= pa:
            i = order[pf]
            where = f"fetch of {tensors[i].name}'s module: gathered {at_fetch[mods_at(pf)]:,} B"
        elif pa < L:
            i, n = order[pa], ns[pa]
            gp = g_at(pa)
            sb = sibs[i] * D if sibs is not None else 0
            if pa in extra:
                lo, fb, pm = extra[pa]
                where = (f"flush of {bucket(lo, pa)} ({P[pa] - P[lo]:,} elements) as {tensors[i].name}'s "
                         f"gradient arrives whole: flat {fb:,} + whole in bucket {own_of(lo) * D:,} + "
                         f"arriving {n * D:,} B" + (f" + its autograd sibling's whole gradient {sb:,} B" if sb else "")
                         + (f" + fp64 norm copy {pm * 8:,} B" if pm else "")
                         + (f" + gathered {gp:,} B" if gp else "")
                         + (f" + earlier flushes' kept fp32 gradient tails {kept_at[pa]:,} B"
                            if kept_at is not None and kept_at[pa] else ""))
            else:
                where = (f"{tensors[i].name}'s gradient arriving whole ({n:,} elements)"
                         + (f" + its autograd sibling's whole gradient {sb:,} B" if sb else "")
                         + (f" + gathered {gp:,} B" if gp else ""))
        elif held_end:
            fb, pm = flat_of(a, L)
            where = (f"end-of-backward flush of {bucket(a, L)} ({held_end:,} elements): "
                     f"flat {fb:,} + whole in bucket {own_of(a) * D:,} B"
                     + (f" + fp64 norm copy {pm * 8:,} B" if pm else "")
                     + (f" + gathered {at_end:,} B" if at_end else "")
                     + (f" + earlier flushes' kept fp32 gradient tails {kept_end:,} B" if kept_end else ""))
        else:
            where = f"end of backward: gathered {at_end:,} B"
        return where

    # the arriving gradient's autograd sibling, still whole (zero3_autograd_siblings); per tensor or None
    sibs = zero3_autograd_siblings(inv, linear)
    per = None if tails else _flush_period(inv, order, inl, gathered)
    if per is not None:
        return _flush_periodic(per, L, ns, D, order, inl, flushes, flat_of, gathered, a, P, words, sibs)

    # the columns packed (_packed, 8 bytes a value): as lists of int objects they were ~0.4 GB at once for
    # 1e5 layers, generate's peak (issue 21)
    def whole_bytes() -> "Sequence[int]":
        # each position's arriving gradient and its autograd sibling (zero3_autograd_siblings), still whole, bytes:
        # from the tensor list, linear and D alone, once per (tensor list, linear, D) (issue 21: 27 passes a generate)
        nC = map(operator.mul, ns, itertools.repeat(D))
        if sibs is not None:
            nC = map(operator.add, nC, map(operator.mul, map(sibs.__getitem__, order), itertools.repeat(D)))
        return _packed(nC)
    nC = inv.memo(("zero3_flush_whole_bytes", bool(linear), D), whole_bytes)

    def flush_extra() -> tuple:
        # each flush's (bucket start, flat buffer bytes, fp64 norm-copy elements) by trigger position, and the bytes
        # the flush adds there as a column (0 elsewhere): once per (flushes, W, C, reduce_scatter, norm), read only
        fbs, pms = [], []
        add = [0] * L
        if ZERO3_FLUSH_BY_VALUES:
            # flat_of(lo, p) reads held = P[p] - P[lo], the count p - lo, F[p] - F[lo], max(ns[lo:p]) (with norm
            # only) and own_of(lo) (of ns[lo]) -- the rest is fixed in this call -- so it is computed once per
            # distinct 5-tuple of them, the tuples made and looked up through C-level maps, no Python step a flush
            # (issue 21: at the 1e5-tensor limit every bucket holds one or two 4096-element gradients, ~58k
            # flat_of calls a pass, 6 passes)
            los, ps = flushes.los, flushes.ps

            def keys() -> "Iterator[tuple]":
                return zip(map(operator.sub, map(P.__getitem__, ps), map(P.__getitem__, los)),
                           map(operator.sub, ps, los),
                           map(operator.sub, map(F.__getitem__, ps), map(F.__getitem__, los)),
                           map(max, map(ns.__getitem__, map(slice, los, ps))) if norm else itertools.repeat(0),
                           map(ns.__getitem__, los))
            one: dict = {}
            for key, (lo, p) in dict(zip(keys(), zip(los, ps))).items():
                fb, pm = flat_of(lo, p)
                one[key] = (fb, pm, fb + pm * 8 + own_of(lo) * D)
            got = list(map(one.__getitem__, keys()))  # references to the few shared tuples, 8 B a flush
            collections.deque(map(add.__setitem__, ps, map(operator.itemgetter(2), got)), maxlen=0)
            return (_FlushExtra(flushes, _packed(map(operator.itemgetter(0), got)),
                                _packed(map(operator.itemgetter(1), got))), _packed(add))
        for lo, p in flushes:
            fb, pm = flat_of(lo, p)
            fbs.append(fb)
            pms.append(pm)
            add[p] = fb + pm * 8 + own_of(lo) * D
        return _FlushExtra(flushes, _packed(fbs), _packed(pms)), _packed(add)
    extra, add = inv.memo(("zero3_grad_flush_extra", bool(linear), rbs, W, C, D, G, predivide, bool(reduce_scatter),
                           bool(norm), ZERO3_FLUSH_BY_VALUES),
                          flush_extra)
    if gathered is not None:
        mod_of, at_fetch, during, at_end = gathered

        def module_cols() -> tuple:
            # each position's module and whether it starts a module's run: from mod_of and the order alone, kept
            # with the mod_of they were made from (module_index's, the tensor list's: compared by identity below)
            mods = _packed(map(mod_of.__getitem__, order))
            return mod_of, mods, bytes(map(operator.ne, mods, itertools.chain((-1,), mods)))
        got = inv.memo(("zero3_flush_module_cols", bool(linear)), module_cols)
        _, mods, is_fetch = got if got[0] is mod_of else module_cols()
        # whole gradients + what is gathered during the position's module; at_fetch[m] where the position starts a
        # module's run, else 0 (times the 0/1 flag): C-level, from nC (per tensor list, linear, D), the module
        # columns and the gathered bytes alone, so kept for the last two gathered tables (a first-iteration and a
        # steady one; compared by identity, the objects held) -- the norm and fp32-tail passes of a plan share
        # them (issue 21: three passes per gathered table at the 1e5-tensor limit). Read only.
        recent = inv.memo(("zero3_flush_gathered_cols", bool(linear), D), list)
        for g in recent:
            if g[0] is mods and g[1] is at_fetch and g[2] is during and g[3] is nC:
                base, fetch = g[4], g[5]
                break
        else:
            base = _packed(map(operator.add, nC, map(during.__getitem__, mods)))
            fetch = _packed(map(operator.mul, map(at_fetch.__getitem__, mods), is_fetch))
            recent.insert(0, (mods, at_fetch, during, nC, base, fetch))
            del recent[2:]
        # + the flush's buffers
        arrive = _packed(map(operator.add, base, add))
    else:
        at_end = 0
        mods = None
        arrive = _packed(map(operator.add, nC, add))
        fetch = None
    kept_at = None  # the tails kept by the flushes before each position (events at a flush see the earlier ones)
    kept_end = 0
    if tails:
        # from the tails, the order and the flushes alone: kept for the last two (tails, flushes) objects, compared by
        # identity (held), read only -- the plain and the two gathered passes of a plan share them; C-level (issue
        # 21: at the 1e5-tensor limit every gradient fills the bucket, 1e5 flushes, a Python pass over them per call)
        recent = inv.memo(("zero3_flush_kept_at", bool(linear)), list)
        for k in recent:
            if k[0] is tails and k[1] is flushes:
                kept_at, kept_end = k[2], k[3]
                break
        else:
            TP = _packed(itertools.accumulate(map(tails.__getitem__, order), initial=0))
            fl = [p for _, p in flushes]
            vals = [0, *map(TP.__getitem__, fl)]  # kept after 0, 1, ... flushes
            bnds = [-1, *fl, L - 1]               # positions (bnds[j], bnds[j + 1]] see vals[j]
            kept_at = _packed(itertools.chain.from_iterable(
                map(itertools.repeat, vals, map(operator.sub, itertools.islice(bnds, 1, None), bnds))))
            kept_end = vals[-1]
            recent.insert(0, (tails, flushes, kept_at, kept_end))
            del recent[2:]
        arrive = _packed(map(operator.add, arrive, kept_at))
        if fetch is not None:
            fetch = _packed(map(operator.mul, map(operator.add, fetch, kept_at), is_fetch))  # (v + k) x flag
    if big and fetch is not None:
        # a module's fetch right after a gradient larger than the bucket: that gradient still whole in it (own_of)
        fetch = fetch[:]  # (a copy: the kept one is read only)
        for p in range(1, L):
            if ns[p - 1] > rbs and is_fetch[p]:
                fetch[p] += ns[p - 1] * D
    # regions: before the first layer gradient 0, then a layer's 1, another module's 2
    f = inl.find(1)
    if f < 0:
        f = L
    reg = [0, 0, 0]
    for col in (arrive, fetch):
        if col is None:
            continue
        reg[0] = max(reg[0], max(col[:f], default=0))
        if f < L:
            reg[1] = max(reg[1], max(itertools.compress(col[f:], inl[f:]), default=0))
            reg[2] = max(reg[2], max(itertools.compress(col[f:], inl[f:].translate(_FLIP)), default=0))
    held_end = P[L] - P[a]
    epi = None
    if held_end:
        fb, pm = flat_of(a, L)
        epi = fb + pm * 8 + own_of(a) * D + at_end + kept_end
        reg[2] = max(reg[2], epi)
    elif gathered is not None and at_end:
        reg[2] = max(reg[2], at_end)
    best = max(max(arrive), max(fetch) if fetch is not None else 0, epi or 0,
               at_end if gathered is not None else 0)
    if not best:
        return None
    # the first instant, in walk order, with the largest bytes: at a position, the module's fetch first
    pa = arrive.index(best) if best in arrive else L
    pf = fetch.index(best) if fetch is not None and best in fetch else L
    where = words(best, pa, pf, ((lambda p: during[mods[p]]) if gathered is not None else lambda p: 0),
                  (mods.__getitem__ if gathered is not None else None), kept_at, kept_end, held_end, at_end, extra,
                  gathered[1] if gathered is not None else None)
    return best, where, tuple(reg)


class _FlushPairs:
    """ZeRO-3 reduce flushes as two packed columns (:func:`_packed`-like arrays): iterating gives (bucket start,
    trigger position) pairs in order, as the list of tuples it replaces (kept in the inventory's memo)."""

    __slots__ = ("los", "ps")

    def __init__(self, los: "Sequence[int]", ps: "Sequence[int]"):
        self.los, self.ps = los, ps

    def __iter__(self) -> "Iterator[tuple[int, int]]":
        return zip(self.los, self.ps)

    def __len__(self) -> int:
        return len(self.ps)


class _FlushExtra:
    """A flush's (bucket start, flat buffer bytes, fp64 norm-copy elements) by its trigger position, as the dict
    it replaces answers ``p in extra`` and ``extra[p]`` (triggers rise: bisection), from packed columns."""

    __slots__ = ("pairs", "fbs", "pms")

    def __init__(self, pairs: _FlushPairs, fbs: "Sequence[int]", pms: "Sequence[int]"):
        self.pairs, self.fbs, self.pms = pairs, fbs, pms

    def _at(self, p: int) -> int:
        ps = self.pairs.ps
        j = bisect.bisect_left(ps, p)
        return j if j < len(ps) and ps[j] == p else -1

    def __contains__(self, p: int) -> bool:
        return self._at(p) >= 0

    def __getitem__(self, p: int) -> tuple[int, int, int]:
        j = self._at(p)
        if j < 0:
            raise KeyError(p)
        return self.pairs.los[j], self.fbs[j], self.pms[j]


def _flush_period(inv: Inventory, order: list[int], inl: bytes, gathered: "tuple | None") -> "tuple[int, int, int] | None":
    """(p0, v, R): positions ``[p0, p0 + R x v)`` of the backward gradient order are R identical layers of v
    gradients each (``model.parallel.layer_repeat``, at least 4 layers), position p0 + r v + j's gradient
    the same size as p0 + j's and (with ``gathered``) its module's gathered bytes the same, so every value
    the reduce-flush pass makes there but a flush's is p0 + j's; None otherwise (no identical layers, or
    gathered bytes that differ in all but 2 layers).

    The order runs the layers last to first (:func:`zero3_backward_grad_order`: reversed, with each
    nn.Linear's weight before its bias, a rule of names and shapes, the same in every layer), so position
    ``f0 + r v + j`` is tensor ``order[f0 + j] - r u`` (u tensors a layer) and its module ``mod_of[order[f0 +
    j]] - r mu`` (mu modules a layer): checked on the last layer's block; with ``gathered``, the layers whose
    per-module bytes equal the middle layer's are found by bisection over C-level block comparisons."""
    from advisor.model.parallel import layer_repeat
    lr = layer_repeat(inv)
    rep = _module_repeat(inv)
    if lr is None or rep is None:
        return None
    h, mu, c = rep
    f0 = inl.find(1)
    f1 = inl.rfind(1) + 1
    if f0 < 0 or inl.find(0, f0, f1) >= 0:
        return None
    if lr.lead:  # leading layers unlike the others (an MoE's dense ones): in backward order after the repeating ones
        ts = inv.tensors
        f1 -= sum(1 for t in ts[lr.head - lr.lead:lr.head] if t.trainable)
    v, rest = divmod(f1 - f0, c)
    if rest or not v:
        return None
    u = lr.unit
    last = order[f0 + (c - 1) * v:f1]
    if list(last) != [o - (c - 1) * u for o in order[f0:f0 + v]]:
        return None
    if gathered is None:
        return f0, v, c
    _, at_fetch, during, _ = gathered
    cols = [col[h:h + c * mu] for col in (at_fetch, during)]
    mid = c // 2
    refs = [col[mid * mu:(mid + 1) * mu] for col in cols]

    def same(t0: int, t1: int) -> bool:  # layers t0 .. t1 - 1 all the middle layer's
        return all(col[t0 * mu:t1 * mu] == ref * (t1 - t0) for col, ref in zip(cols, refs))
    lo, hi = 0, mid  # the first layer t with layers t .. mid all equal: bisection (same(t, mid + 1) is monotone in t)
    while lo < hi:
        m = (lo + hi) // 2
        if same(m, mid + 1):
            hi = m
        else:
            lo = m + 1
    t_lo = lo
    lo, hi = mid + 1, c - 1  # the last layer t with layers mid .. t all equal
    while lo < hi:
        m = (lo + hi + 1) // 2
        if same(mid, m + 1):
            lo = m
        else:
            hi = m - 1
    t_hi = lo if same(mid, lo + 1) else mid
    R = t_hi - t_lo + 1
    if R < 3 or len(order) - (R - 1) * v > max(len(order) // 4, 4096):
        return None  # most positions would be made one by one in Python: the C-level columns are faster
    # inventory layer t is the order's layer c - 1 - t
    return f0 + (c - 1 - t_hi) * v, v, R


def _flush_periodic(per: tuple[int, int, int], L: int, ns: list[int], D: int, order: list[int], inl: bytes,
                    flushes: list[tuple[int, int]], flat_of: Any, gathered: "tuple | None", a: int,
                    P: "Sequence[int]", words: Any,
                    sibs: "Sequence[int] | None" = None) -> "tuple[int, str, tuple[int, int, int]] | None":
    """:func:`_zero3_reduce_flush_bytes`'s column pass (no fp32 gradient tails) where :func:`_flush_period`
    found R identical layers at ``[p0, p0 + R v)``: the values of every other position and of the first of
    those layers are made one by one, the other layers' are the first's (a flush's plus its buffers, the
    flushes listed), so maxima and first positions come from one layer, the flushes and the rest (issue 21:
    three passes over 9e5 gradients per plan at 1e5 layers). The same figures and words
    (tests/test_layer_repeat_identity.py compares with the whole columns). ``D``: a whole gradient's bytes per
    element (the model dtype's)."""
    p0, v, R = per
    p1 = p0 + R * v
    if gathered is not None:
        mod_of, at_fetch, during, at_end = gathered
    else:
        mod_of = at_fetch = during = None
        at_end = 0

    def mods_at(p: int) -> int:
        return mod_of[order[p]]

    def g_at(p: int) -> int:
        return during[mod_of[order[p]]] if gathered is not None else 0

    def fetch_at(p: int) -> int:
        return at_fetch[mods_at(p)] if p == 0 or mods_at(p) != mods_at(p - 1) else 0

    extra = {}
    for lo, p in flushes:
        fb, pm = flat_of(lo, p)
        extra[p] = (lo, fb, pm)
    before = range(0, p0 + v)  # positions made one by one: up to the first identical layer's end, and after them
    after = range(p1, L)

    def arrive_at(p: int) -> int:
        e = extra.get(p)
        # + the arriving gradient's autograd sibling (zero3_autograd_siblings: the same in every identical layer)
        return ns[p] * D + g_at(p) + (e[1] + e[2] * 8 if e else 0) + (sibs[order[p]] * D if sibs is not None else 0)
    arr_b, arr_a = [arrive_at(p) for p in before], [arrive_at(p) for p in after]
    fet_b = [fetch_at(p) for p in before] if gathered is not None else []
    fet_a = [fetch_at(p) for p in after] if gathered is not None else []
    # the other identical layers: a position without a flush there holds the first layer's value without one,
    # at most that layer's (in arr_b, at a smaller position), so only their flushes can matter
    inner = sorted(p for p in extra if p0 + v <= p < p1)
    f = inl.find(1)
    if f < 0:
        f = L
    reg = [0, 0, 0]

    def region(p: int) -> int:
        return 0 if p < f else (1 if inl[p] else 2)
    for ps, vals in ((before, arr_b), (after, arr_a), (before, fet_b), (after, fet_a)):
        for p, x in zip(ps, vals):
            r = region(p)
            if x > reg[r]:
                reg[r] = x
    # the identical layers are a layer's gradients (region 1); their fetches are the first layer's
    inner_vals = [arrive_at(p) for p in inner]
    reg[1] = max(reg[1], max(inner_vals, default=0))
    held_end = P[L] - P[a]
    epi = None
    if held_end:
        fb, pm = flat_of(a, L)
        epi = fb + pm * 8 + at_end
        reg[2] = max(reg[2], epi)
    elif gathered is not None and at_end:
        reg[2] = max(reg[2], at_end)
    best = max(max(arr_b, default=0), max(arr_a, default=0), max(inner_vals, default=0),
               max(fet_b, default=0), max(fet_a, default=0), epi or 0, at_end if gathered is not None else 0)
    if not best:
        return None
    # the first position with the largest bytes, among arrivals and among fetches
    if best in arr_b:
        pa = arr_b.index(best)
    elif best in inner_vals:
        pa = inner[inner_vals.index(best)]
    else:
        pa = p1 + arr_a.index(best) if best in arr_a else L
    if best in fet_b:  # (an identical layer's fetches are the first one's, in fet_b)
        pf = fet_b.index(best)
    elif best in fet_a:
        pf = p1 + fet_a.index(best)
    else:
        pf = L
    return best, words(best, pa, pf, g_at, mods_at if gathered is not None else None, None, 0, held_end, at_end,
                       extra, at_fetch), tuple(reg)


def _zero3_predivide_copies(pf: "float | None", W: int, all_reduce: bool) -> tuple[bool, bool]:
    """(divide, multiply): whether a ZeRO-3 flush divides its gradients by ``gradient_predivide_factor`` ``pf``
    into copies and multiplies the reduced outputs back into copies. DeepSpeed 0.19.8 ``stage3.py``, under
    ``postscale_gradients`` (not prescale_gradients; ``pf`` None otherwise): __avg_scatter_grads divides each
    gradient into a copy when pf != 1 (l. 1922-1923) and multiplies the outputs when pf is also not the world
    size (l. 1933-1935); __avg_scatter_contiguous_grads (``all_reduce``: no reduce_scatter, the bucket within
    reduce_bucket_size) divides the bucket in place (l. 1872-1873) and multiplies it into a copy when pf is not
    the world size (l. 1882-1883), at the default 1 too. With reduce_scatter, l. 395-396 assert pf == 1 and
    postscale: no copy. The world size is the partition group's W (_gradient_averaging_world_size l. 689-692:
    the same without expert parallelism)."""
    if pf is None:
        return False, False
    if all_reduce:
        return False, pf != W
    return pf != 1, pf != 1 and pf != W


def _zero3_flush_copies(fb: int, own: int, q: int, pm: int, C: int, D: int, G: int, held: int = 0,
                        div: bool = False, mul: bool = False) -> int:
    """Bytes of one ZeRO-3 reduce flush's buffers at their largest moment: its flat buffer ``fb`` (bytes), the
    ``communication_data_type`` copies of the ``own`` elements held whole in the bucket, the copies of the
    ``held`` elements of the bucket divided by gradient_predivide_factor (``div``), the ``q`` elements this rank
    gets back multiplied by it (``mul``) and cast to the gradient partitions' dtype, and the fp64 norm copy of
    ``pm`` elements. C, D, G: communication, model and gradient-accumulation dtype bytes (G 0: C's); ``div`` /
    ``mul``: :func:`_zero3_predivide_copies`. The whole gradients themselves (arriving, held in the bucket) are
    the caller's.

    DeepSpeed 0.19.8 ``stage3.py``: the ipg bucket's buffer is of ``communication_data_type`` (l. 478, 782-784;
    each gradient the bucket takes is cast into it by ``copy_``, l. 1637, and param.grad is then that view, l. 1640), so
    __avg_scatter_grads' ``g.to(communication_data_type)`` (l. 1919-1920) copies only the gradients held whole
    (``own`` x C, where C differs from D), then each gradient is divided into a copy (l. 1922-1923: ``held`` x C,
    the cast list freed as it is replaced), all before reduce_scatter_coalesced's flat buffer; its outputs, views
    of that buffer, are multiplied into copies (l. 1933-1935: q x C, the flat buffer then freed) and cast to
    ``gradient_accumulation_dtype`` (l. 1943-1944: q x G where G differs from C; q = sum ceil(n_i/W), rank 0's).
    __avg_scatter_contiguous_grads (no reduce_scatter, fb 0, q = the bucket's elements) multiplies and casts its
    whole buffer (l. 1882-1886). partition_grads (l. 2006) then runs on those partitions: the flat buffer and
    the copies made before it are freed with __avg_scatter_grads' locals where the outputs were copied (else
    they keep the flat buffer), and each partition's fp64 norm copy (``pm`` x 8, under optimizer offload,
    _constant_buffered_norm2 l. 1446) is made there. With C = D = G and no copies: ``fb + pm x 8``."""
    cx = C if C != D else 0
    gx = G if G and G != C else 0
    a = own * cx                      # the .to(C) copies of the gradients held whole
    d = held * C if div else 0        # the divided copies (replace the list of a)
    x = d if div else a               # what that list holds through the collective
    out = q * C if mul else fb        # what holds the outputs after the multiply (the flat buffer's views)
    pre = max(a + d, x + fb + (q * C if mul else 0), x + out + q * gx)
    return max(pre, (q * gx if gx else out) + pm * 8)


#: bytes.translate table: 0 <-> 1 (the complement of a 0/1 flag column)
_FLIP = bytes([1, 0]) + bytes(range(2, 256))


def _zero3_reduce_flush_walk(inv: Inventory, W: int, C: int, rbs: int, contiguous: bool,
                             reduce_scatter: bool, norm: bool = False,
                             gathered: "tuple | None" = None,
                             linear: bool = True,
                             tails: "tuple[int, ...] | None" = None,
                             D: int = 0, G: int = 0,
                             predivide: "float | None" = 1.0) -> "tuple[int, str, tuple[int, int, int]] | None":
    # gathered: (module index per tensor, bytes at each module's fetch, bytes while its backward
    # runs, bytes at the epilogue): the parameters gathered beside each moment (zero3_backward_fetch)
    # tails: per tensor, the fp32 gradient bytes kept after its flush (zero3_flush_grad_tails):
    # live at every later moment of backward
    # D, G: the model's and the gradient partitions' dtype bytes (0: C's), predivide the factor; see
    # _zero3_flush_copies
    from advisor.model.parallel import in_layer_flags
    D = D or C
    # which tensors are a layer's, once per tensor list (the flush pass runs per W, bucket size ...)
    in_layer = in_layer_flags(inv)
    best, where = 0, ""
    reg = [0, 0, 0]  # the maximum at the start, in the layers, at the end of backward
    tensors = inv.tensors
    seen_layer = False

    def bucket(count: int, lo: int, hi: int) -> str:
        # names only for a new maximum (not per gradient)
        return tensors[lo].name if count == 1 else f"{count} gradients, {tensors[lo].name} .. {tensors[hi].name}"

    def flat_bytes(held: int, count: int, flat: int, own: int = 0, pm: int = 0) -> int:
        # the flush's flat buffer, its copies (_zero3_flush_copies) and fp64 norm copy at their largest moment
        ar = contiguous and held <= rbs and not reduce_scatter
        if ar:
            fb, q = 0, held  # an in-place all_reduce of the contiguous buffer
        else:
            fb = 0 if (count == 1 and held % W == 0) else flat * C  # one unpadded tensor: a view
            q = flat // W if W else 0
        return _zero3_flush_copies(fb, own, q, pm, C, D, G, held, *_zero3_predivide_copies(predivide, W, ar))

    # the bucket as running totals (no re-walk per gradient): elements, count, flat-buffer elements
    # sum ceil(n_i/W) x W, elements of its own whole gradients, its first and last tensor indices
    held = count = flat = own = 0
    pmax = 0  # the bucket's largest gradient partition (elements) cast to fp64 at its flush (norm)
    lo = hi = -1
    mod_of, at_fetch, during, at_end = gathered if gathered is not None else ((), (), (), 0)
    prev_mod = -1
    g = 0  # parameters gathered at this moment (gathered given)
    kept = btail = 0  # tails kept by the flushes done; those of the bucket's gradients (kept at its flush)
    sibs = zero3_autograd_siblings(inv, linear)
    order = zero3_backward_grad_order(inv, linear)
    # identical layers (_flush_period, no tails): the bucket's state at a layer's first gradient (elements,
    # count, flat elements, own whole elements, fp64 partition) decides the rest of the walk; once it repeats
    # an earlier layer's, whole periods of layers are skipped: their moments equal those seen, and the state
    # after them is the same (issue 21; tests/test_layer_repeat_identity.py compares with the whole walk)
    per = None if tails else _flush_period(inv, order, _zero3_grad_columns(inv, linear)[2], gathered)
    p0, v, R = per if per is not None else (-1, 1, 0)
    mark, r_at, states = p0, 0, {}
    skip_to = -1
    for pos, i in enumerate(order):
        if pos < skip_to:
            continue
        if pos == mark:
            st = (held, count, flat, own, pmax)
            r0 = states.get(st)
            states[st] = r_at
            mark = pos + v if r_at + 1 < R else -1
            if r0 is not None and (R - r_at) // (r_at - r0):
                skip_to = pos + (R - r_at) // (r_at - r0) * (r_at - r0) * v
                mark = -1
                if count:
                    lo, hi = order[skip_to - count], order[skip_to - 1]
                if gathered is not None:
                    prev_mod = mod_of[order[skip_to - 1]]
                continue
            r_at += 1
        n = tensors[i].numel
        sb = sibs[i] * D if sibs is not None else 0  # its autograd sibling's gradient, whole beside it
        # where in backward this arrival (and the flush it triggers) happens: a layer's gradient in
        # the layers' backward; another module's before any layer's (after the last layer in
        # forward: final norm, lm_head) at the start, after them (embeddings) at the end
        if in_layer[i]:
            seen_layer, ri = True, 1
        else:
            ri = 2 if seen_layer else 0
        if gathered is not None and mod_of[i] != prev_mod:
            # the module's fetch, before its gradients: its all-gather buffers beside the bucket's whole gradients
            prev_mod = mod_of[i]
            g = during[prev_mod]
            nb = at_fetch[prev_mod] + own * D + kept
            reg[ri] = max(reg[ri], nb)
            if nb > best:
                best, where = nb, f"fetch of {tensors[i].name}'s module: gathered {at_fetch[prev_mod]:,} B"
        if held and held + n > rbs:  # stage3.py l. 1583: flush before the arriving gradient joins
            fb = flat_bytes(held, count, flat, own, pmax)
            nb = fb + (own + n) * D + sb + g + kept
            reg[ri] = max(reg[ri], nb)
            if nb > best:
                best, where = nb, (f"flush of {bucket(count, lo, hi)} ({held:,} elements) as {tensors[i].name}'s "
                                   f"gradient arrives whole: flat {fb - pmax * 8:,} + whole in bucket {own * D:,} + "
                                   f"arriving {n * D:,} B"
                                   + (f" + its autograd sibling's whole gradient {sb:,} B" if sb else "")
                                   + (f" + fp64 norm copy {pmax * 8:,} B" if pmax else "")
                                   + (f" + gathered {g:,} B" if g else "")
                                   + (f" + earlier flushes' kept fp32 gradient tails {kept:,} B" if kept else ""))
            held = count = flat = own = pmax = 0
            kept, btail = kept + btail, 0
        else:
            nb = (own + n) * D + sb + g + kept
            reg[ri] = max(reg[ri], nb)
            if nb > best:  # arrives, no flush: whole until copied into the bucket
                best, where = nb, (f"{tensors[i].name}'s gradient arriving whole ({n:,} elements)"
                                   + (f" + its autograd sibling's whole gradient {sb:,} B" if sb else "")
                                   + (f" + gathered {g:,} B" if g else ""))
        if not contiguous or held + n > rbs:
            own += n  # stays its own tensor in the bucket (__add_grad_to_ipg_bucket, l. 1626)
        if not count:
            lo = i
        hi = i
        held += n
        count += 1
        flat += -(-n // W) * W
        if norm:
            pmax = max(pmax, min(-(-n // W), NORM_SPLIT_ELEMENTS))
        if tails:
            btail += tails[i]
    if held:  # the backward epilogue's flush, nothing arriving
        fb = flat_bytes(held, count, flat, own, pmax)
        nb = fb + own * D + at_end + kept
        reg[2] = max(reg[2], nb)
        if nb > best:
            best, where = nb, (f"end-of-backward flush of {bucket(count, lo, hi)} ({held:,} elements): "
                               f"flat {fb - pmax * 8:,} + whole in bucket {own * D:,} B"
                               + (f" + fp64 norm copy {pmax * 8:,} B" if pmax else "")
                               + (f" + gathered {at_end:,} B" if at_end else "")
                               + (f" + earlier flushes' kept fp32 gradient tails {kept:,} B" if kept else ""))
    elif gathered is not None and at_end:
        reg[2] = max(reg[2], at_end)
        if at_end > best:
            best, where = at_end, f"end of backward: gathered {at_end:,} B"
    return (best, where, tuple(reg)) if best else None


def zero3_first_fetch_bytes(inventory: Inventory, zero, W: int, D: int) -> "tuple[int, str] | None":
    """(bytes, the module) of the first forward's largest ZeRO-3 fetch of persistent parameters,
    or None where this model does not apply (W = 1, quantized weights, hpZ, all-reduce fetch).

    DeepSpeed 0.19.8: in the first forward the coordinator has no complete trace, so
    ``partitioned_param_coordinator.py`` release_sub_module releases every parameter of a module
    after its forward, the persistent ones too; they stay gathered only from the second trace on.
    A module's fetch of >= 2 parameters is one coalesced all-gather into a flat buffer of
    sum ceil(n_i/W) x W x D (``partition_parameters.py`` _all_gather_dtype, l. 1343), and
    AllGatherCoalescedHandle.wait (l. 795) ``torch.cat``'s each parameter (n_i x D) out of it while
    the buffer is alive; one parameter is gathered into its own buffer (_all_gather_sequential,
    ``param.data`` a view of it). Peak of module m = its persistent copies + its flat buffer
    (the earlier modules released). Modules are :func:`module_of` of the names (bytes)."""
    if (W <= 1 or zero.zero_quantized_weights or (zero.zero_hpz_partition_size or 1) > 1
            or getattr(zero, "use_all_reduce_for_fetch_params", False)):
        return None
    # once per (tensor list, W, D, persistence thresholds): generate asks per plan (Inventory.memo)
    return inventory.memo(("zero3_first_fetch_bytes", W, D, zero.param_persistence_threshold,
                           zero.model_persistence_threshold),
                          lambda: _zero3_first_fetch_bytes(inventory, zero, W, D))


def _zero3_first_fetch_bytes(inventory: Inventory, zero, W: int, D: int) -> "tuple[int, str] | None":
    # per module, in order of first appearance: [sum of its persistent n_i, sum of ceil(n_i/W) x W,
    # parameter count] (elements); one pass, no per-parameter tuples (issue 21)
    mods: dict[str, list] = {}
    for t, keep, m in zip(inventory.tensors, zero3_persistent(inventory, zero), module_names(inventory)):
        acc = mods.get(m)
        if acc is None:
            acc = mods[m] = [0, 0, 0, False]
        n = t.numel
        if keep:
            acc[0] += n
            acc[3] = True
        acc[1] += -(-n // W) * W
        acc[2] += 1
    best, where = 0, ""
    for m, (pers, padded, count, any_keep) in mods.items():
        if not any_keep:
            continue
        nb = (pers + padded) * D if count >= 2 else padded * D
        if nb > best:
            best, where = nb, f"module {m}"
    return best, where


def zero3_refetch_prefetch_bytes(inventory: Inventory, zero, W: int, D: int) -> tuple[int, str]:
    """(bytes, words): the flat all-gather buffer of the prefetch that the forward of micro-step 2
    runs under ZeRO-3 with gradient accumulation (GA > 1), for a plan with persistent parameters
    (where :func:`zero3_first_fetch_bytes` applies).

    DeepSpeed 0.19.8: the first backward runs without a complete trace, so
    ``partitioned_param_coordinator.py`` release_sub_module releases every module's parameters
    after its backward, the persistent ones too, except the module run last (the first in forward,
    entry ``zero3_first_backward_gathered``). With GA = 1 the optimizer step's ``_post_step``
    gathers the persistent ones again before the next forward; with GA > 1 no step runs, so
    micro-step 2's forward fetches them: the trace is complete now, and the first module's
    fetch_sub_module prefetches (l. 450-484) the parameters after it in trace order that are not
    available, while numel_prefetching < min(stage3_max_live_parameters - available,
    stage3_prefetch_bucket_size), in one ``__all_gather_params`` call: for >= 2 parameters one
    coalesced all-gather into a flat buffer of sum ceil(n_i/W) x W x D
    (``partition_parameters.py`` _all_gather_dtype l. 1343), alive while
    AllGatherCoalescedHandle.wait (l. 795) ``torch.cat``s each parameter out of it; one parameter
    is gathered into its own buffer (_all_gather_sequential), which it then views (0 extra).
    Trace order is taken as inventory order, as :func:`zero3_first_fetch_bytes` does. Later
    micro-steps' forwards keep the parameters gathered (complete trace: persistent parameters are
    never released), so only micro-step 2's forward has it (the timeline's ``forward:2``, an instant
    of its own at GA > 2)."""
    def compute() -> tuple[int, str]:
        names = module_names(inventory)
        if not names or zero.prefetch_bucket_size <= 0:
            return 0, "no prefetch (stage3_prefetch_bucket_size 0)"
        first = names[0]
        avail = sum(t.numel for t, m in zip(inventory.tensors, names) if m == first)
        limit = min(zero.max_live_parameters - avail, zero.prefetch_bucket_size)
        numel = count = flat = 0
        for t, m in zip(inventory.tensors, names):
            if m == first:
                continue
            if numel >= limit:
                break
            numel += t.numel
            count += 1
            flat += -(-t.numel // W) * W
        nb = flat * D if count >= 2 else 0
        return nb, (f"{count} parameter(s) after module {first} prefetched ({numel:,} elements): "
                    f"flat buffer sum ceil(n_i/W) x W x D = {flat:,} x {D}" if count >= 2 else
                    f"{count} parameter(s) prefetched after module {first}: no flat buffer")
    return inventory.memo(("zero3_refetch_prefetch_bytes", W, D, zero.prefetch_bucket_size,
                           zero.max_live_parameters), compute)


def zero3_nvme_refetch_bytes(inventory: Inventory, zero, W: int, D: int) -> tuple[int, str]:
    """(bytes, words): what the forward of micro-step 2 holds over a later forward when parameters are on
    NVMe and GA > 1 (the reference's rule, :func:`zero3_gathered_params_numel`, stands for the later ones):
    the largest flat all-gather buffer of a module's own re-fetch, sum over its params of ceil(n_i/W) x W x D
    (``partition_parameters.py`` _all_gather_dtype l. 1343), over the modules after the first that have >= 2
    parameters and a persistent one; memoised per tensor list.

    The first backward runs with an incomplete trace, so release_sub_module releases every parameter of a
    module, the persistent ones too (``partitioned_param_coordinator.py`` l. 498-499), except the first
    module's, whose post-backward hook does not fire (release_backward_leftovers keeps ds_persist); no
    optimizer step (stage3.py _post_step's gather) comes before micro-step 2. Its forward, on the complete
    trace, prefetches nothing: the queue's next parameter is a partition still on NVMe, where prefetch
    stops (fetch_sub_module's _is_currently_on_nvme, l. 444-448, 459-462). So each such module fetches its
    non-persistent parameters with its persistent ones in one coalesced all-gather (all_gather_coalesced
    l. 1598: one parameter, or ``allgather_sequential``, is gathered alone, a view of its own buffer),
    whose flat buffer is live while AllGatherCoalescedHandle.wait torch.cat's every one of its parameters
    (l. 795), beside what is still gathered. A later forward finds the persistent parameters gathered (the
    step's _post_step), so the same module gathers its non-persistent one alone, with no flat buffer.
    Measured: tests/engine/test_peak_parity.py z3_bf16_op_nvme_tbsga2_w2, forward:2 +2,123,881 B (8.2%)
    over the ledger without it, l2's buffer (530,450 + 515) x 2 x 2 = 2,123,860 B."""
    def compute() -> tuple[int, str]:
        if bool(getattr(zero, "allgather_sequential", False)) or W <= 1:
            return 0, "no coalesced all-gather (allgather_sequential or W = 1)"
        keep = zero3_persistent(inventory, zero)
        pad = padded_numels(inventory, W)
        members, _, names, _ = module_index(inventory)
        best, where = 0, ""
        for k in range(1, len(members)):
            idx = members[k]
            if len(idx) >= 2 and any(keep[i] for i in idx):
                flat = sum(pad[i] for i in idx) * D
                if flat > best:
                    best, where = flat, names[k]
        if not best:
            return 0, "no module after the first has >= 2 parameters with a persistent one"
        return best, (f"module {where}'s re-fetch of its persistent parameters with the others, one coalesced "
                      f"all-gather: flat buffer sum ceil(n_i/W) x W x D = {best}")
    return inventory.memo(("zero3_nvme_refetch_bytes", W, D, zero.param_persistence_threshold,
                           zero.model_persistence_threshold, bool(getattr(zero, "allgather_sequential", False))),
                          compute)


def zero3_gathered_params_numel(inventory: Inventory, zero, W: int,
                                persistent: "list[bool] | None" = None) -> tuple[int, str]:
    """(elements, rule in words): ZeRO-3 non-persistent parameters gathered at once during
    forward/backward, per rank, on top of the persistent ones (§4.5 advisor rule; each fetch
    all-gathers a module's parameters into one buffer of sum p_i x W elements,
    ``partition_parameters.py`` all_gather_coalesced; what stays alive is decided by
    ``partitioned_param_coordinator.py``):

    1. ``stage3_max_reuse_distance`` >= 2 x non-persistent numel -> the whole padded model,
       sum p_i x W (max_live_parameters does not bound it; measured G1, G6, G7);
    2. else with ``stage3_prefetch_bucket_size`` > 0 -> min(sum p_i x W, max(largest fetch,
       ``stage3_max_live_parameters``)) (G3, G4);
    3. else the largest module fetch (G2, G8).

    A fetch is one module's directly owned parameters (:func:`module_of`), sum p_i x W. The sums
    are computed once per (tensor list, W, persistence thresholds) when ``persistent`` is not given
    (generate asks for them per plan)."""
    def sums(persistent: list[bool]) -> tuple[int, int, int]:
        whole = 0
        non_persist = 0
        mods: dict[str, int] = {}
        for t, p, m in zip(inventory.tensors, persistent, module_names(inventory)):
            if p:
                continue
            n = t.numel
            padded = zero3_partition_numel(n, W) * W
            non_persist += n
            whole += padded
            mods[m] = mods.get(m, 0) + padded
        return whole, non_persist, max(mods.values(), default=-1)

    if persistent is None:
        whole, non_persist, largest = inventory.memo(
            ("zero3_gathered_sums", W, zero.param_persistence_threshold, zero.model_persistence_threshold),
            lambda: sums(zero3_persistent(inventory, zero)))
    else:
        whole, non_persist, largest = sums(persistent)
    if largest < 0:
        return 0, "every parameter is persistent: nothing is gathered beyond lp_params_gathered"
    if zero.max_reuse_distance >= 2 * non_persist:
        return whole, (f"stage3_max_reuse_distance {zero.max_reuse_distance:,} >= 2 x non-persistent numel "
                       f"{non_persist:,}: the whole padded model stays gathered, sum p_i x W = {whole:,}")
    if zero.prefetch_bucket_size > 0:
        v = min(whole, max(largest, zero.max_live_parameters))
        return v, (f"prefetch on: min(sum p_i x W, max(largest module fetch, stage3_max_live_parameters)) = "
                   f"min({whole:,}, max({largest:,}, {zero.max_live_parameters:,})) = {v:,}")
    return largest, f"no prefetch, short reuse distance: the largest module fetch sum p_i x W = {largest:,}"


@dataclass(frozen=True)
class Zero3Fetch:
    """ZeRO-3's gathered non-persistent (and, in the first iteration, persistent) parameters over
    one rank's iteration, replayed from DeepSpeed's coordinator (:func:`zero3_fetch_replay`), bytes.

    ``mod_of``: per tensor, the index of its module (:func:`module_of`, in order of first
    appearance). First iteration (trace incomplete): ``first_forward`` (bytes, module) the largest
    forward moment; per module m, ``first_fetch[m]`` its fetch's largest moment in backward and
    ``first_during[m]`` what is gathered while its backward runs; ``first_end`` at the backward
    epilogue. Later iterations (trace complete): ``forward`` (bytes, where), ``fetch[m]``,
    ``during[m]``, ``end``; ``start`` the backward's first moment (the root's prefetch). ``refetch``
    (bytes, where): micro-step 2's forward at GA > 1 (no optimizer step since the first backward, so
    the persistent parameters it released are fetched again, all but the first module's: their
    all-gather buffers count, their copies are ``lp_params_gathered``). The per-tensor and per-module
    columns are :func:`module_index`'s list and packed arrays (:func:`_packed`), not tuples of int
    objects (~100 MB of them at 1e5 layers, issue 21); not hashable."""

    mod_of: "Sequence[int]"
    first_forward: tuple
    first_fetch: "Sequence[int]"
    first_during: "Sequence[int]"
    first_end: int
    forward: tuple
    fetch: "Sequence[int]"
    during: "Sequence[int]"
    end: int
    start: int
    refetch: tuple = (0, "")


def zero3_container_steps(inv: Inventory) -> "tuple[Sequence[int], Sequence[int], int]":
    """(before_forward, before_backward, forward_tail): per owning module (:func:`module_index` order),
    how many hooks of modules owning no parameter run right before its fetch in forward / in backward,
    and how many run after the last one's in forward; once per tensor list and ``inv.modules``.

    Such a module is a container or a parameterless leaf. A container is every proper prefix of an
    owning module's name (:func:`module_of`; ``model.layers.0`` of ``model.layers.0.mlp.up_proj``: a
    LlamaDecoderLayer) that is not an owning module itself and is called: its next name component is
    not a number, or the inventory declares it an ``nn.Sequential`` (``Inventory.modules``,
    :class:`advisor.model.inventory.ModuleSpec`); any other numbered one (``model.layers``) is taken as an
    ``nn.ModuleList``, whose forward never runs. A parameterless leaf (``rotary_emb``, ``act_fn``, a
    dropout) owns no parameter at all, so the names cannot show it: the inventory declares it, with the
    owning module it is called before. DeepSpeed hooks every submodule (``parameter_offload.py``
    _register_deepspeed_module l. 337-528), so the pre-forward hook of either runs fetch_sub_module
    (``partitioned_param_coordinator.py`` l. 310-490): nothing of its own to fetch (l. 364, iter_params
    with recurse=False), but with a complete trace it prefetches from the parameter queue like any
    module (l. 452-485: up to min(max live - available numel, prefetch bucket)), and its release
    (l. 494) finds nothing. Its step (l. 490) and trace entry (record_module l. 222) carry no numel,
    and no parameter of another module's is last used at it, so release (__params_to_release) and
    the reuse distance are unchanged: the replay gives it no step of its own. A container runs right
    before its first descendant in forward (pre-forward hooks, outer first) and in backward right
    before its last one (its PreBackwardFunction is applied to its output, after that descendant's,
    ``parameter_offload.py`` l. 456-487); a leaf runs where it is declared in forward and, backward
    being forward reversed (autograd runs the most recently made ready node first), in backward right
    after the module it precedes in forward, unless its output needs no gradient (``backward``
    false: PreBackwardFunctionForModule's backward never runs). In backward the hooks after the first
    module's are not counted: the parameter queue is empty by then (its last entries are that
    module's own), so they prefetch nothing."""
    names = module_index(inv)[2]
    seq = {m.name for m in inv.modules if m.sequential}
    leaves = [m for m in inv.modules if not m.sequential]

    def scan(order, backward: bool) -> "tuple[Sequence[int], int]":
        # per module in ``order``, the hooks it is the first owning module after; walking a name's prefixes
        # up from the longest stops at one already seen (all of its own prefixes were seen with it), so each
        # prefix is split off once, not once per module under it (a per-module split: ~4 s at 1e5 layers)
        seen: set = set()
        out = array.array("i", [0]) * len(names)  # hooks per module: small counts, 4 bytes each (issue 21)
        pending = 0
        for k in order:
            if k < 0:  # a declared leaf: -1 - its index in ``leaves``
                m = leaves[-1 - k]
                head, dot, tail = m.name.rpartition(".")
                pending += 1 if m.backward or not backward else 0
            else:
                head, dot, tail = names[k].rpartition(".")
            c = 0
            while dot and head not in seen:
                seen.add(head)
                # a numbered head is a ModuleList (never called) unless declared an nn.Sequential
                if (not tail.isdigit() or head in seq) and head not in owning:
                    c += 1
                head, dot, tail = head.rpartition(".")
            if k < 0:
                pending += c
            else:
                out[k], pending = c + pending, 0
        return out, pending

    def compute():
        nonlocal owning
        owning = names.membership() if isinstance(names, JoinedNames) else set(names)
        # declared modules (leaves between a layer's modules, a Sequential) go through the whole scan; the
        # repeat below is taken from the names alone
        rep = None if inv.modules else _module_repeat(inv)
        if rep is None:
            if leaves:
                # forward order: each module after the leaves declared before it; those before none last
                at: dict = {}
                for j, m in enumerate(leaves):
                    at.setdefault(m.before, []).append(-1 - j)
                order = [x for k, n in enumerate(names) for x in (*at.get(n, ()), k)] + at.get(None, [])
            else:
                order = range(len(names))
            f, tail = scan(order, False)
            return f, scan(reversed(order), True)[0], tail
        # identical layers (model.parallel.layer_repeat): a layer's containers are the prefixes with its own
        # number (new in every layer: a name outside the layers never starts with "layers.i.") and the shared
        # ones ("model", "model.layers", seen in the first layer walked); so the first two layers walked in
        # each direction give every layer's counts, the others repeat the second's
        # (tests/test_layer_repeat_identity.py compares with the whole scan)
        h, mu, c = rep
        M = len(names)
        fwd = scan(itertools.chain(range(h + 2 * mu), range(h + c * mu, M)), False)[0]
        fwd[h + 2 * mu:h + c * mu] = fwd[h + mu:h + 2 * mu] * (c - 2)
        bwd = scan(itertools.chain(range(M - 1, h + (c - 2) * mu - 1, -1), range(h - 1, -1, -1)), True)[0]
        bwd[h:h + (c - 2) * mu] = bwd[h + (c - 2) * mu:h + (c - 1) * mu] * (c - 2)
        return fwd, bwd, 0
    owning: set = set()
    return inv.memo(("zero3_container_steps",), compute)


#: True: :func:`_zero3_fetch_replay` takes the longest run of one-tensor modules of equal numel
#: (:func:`_zero3_equal_run`) as identical layers where the inventory has none; False: walked (tests compare the two
#: with the reference walk)
ZERO3_EQUAL_RUN = True


def _zero3_equal_run(inv: Inventory, numel: "Sequence[int]", M: int) -> "Any | None":
    """Where every module owns one tensor (module k is tensor k: a nameless inventory's t0, t1, ...) and no module is
    declared (``Inventory.modules``), the first longest run of at least :data:`ZERO12_EQUAL_RUN` tensors of equal
    numel as a ``model.parallel.LayerRepeat`` of one-tensor layers (head, unit 1, count), else None. The fetch
    replay's rules read a module's tensors only through their numel, padded numel (of the numel) and persistence
    (compared by the replay itself), so such a run is identical layers to it."""
    if M != len(inv.tensors) or inv.modules:
        return None
    got = _equal_sizes_run(numel, M)
    if got is None:
        return None
    from advisor.model.parallel import LayerRepeat
    return LayerRepeat(got[0], 1, got[1] - got[0], "", 0)


def _module_repeat(inv: Inventory) -> "tuple[int, int, int] | None":
    """(modules before the first layer, modules per layer, layers) in :func:`module_index` order when
    the inventory's layers are identical (``model.parallel.layer_repeat``, at least 4 of them) and its
    modules consecutive, else None: the layers' modules are ``[h, h + layers x per layer)``, a layer's
    modules never spanning two layers (their names carry the layer number)."""
    from advisor.model.parallel import layer_repeat
    rep = layer_repeat(inv)
    if rep is None or rep.count < 4:
        return None
    mod_of, bounds = module_index(inv)[1], module_index(inv)[3]
    if bounds is None:
        return None
    h = mod_of[rep.head]
    mu = mod_of[rep.head + rep.unit] - h
    return h, mu, rep.count


def zero3_fetch_replay_applies(zero, W: int, offload_param: str = "none") -> bool:
    """Whether :func:`zero3_fetch_replay` models this plan's fetches: W > 1 (at W = 1 nothing is
    gathered, ``all_gather_coalesced`` returns a NoGatherHandle), no quantized weights, no all-reduce
    fetch, parameters not swapped to NVMe (the prefetch queue stops at a partition still on NVMe,
    ``partitioned_param_coordinator.py`` _is_currently_on_nvme). hpZ (zero_hpz_partition_size h > 1)
    too: a fetch from the secondary partition gathers over the hpZ group into a buffer of the same
    size, the secondary's ceil(n_i / W) x W / h elements x h ranks (``partition_parameters.py``
    _all_gather_sequential l.1378; _all_gather_dtype l.1341 partition_sz = ds_numel x W / h, x h), and
    the coordinator's fetch, prefetch and release order is the same; the secondary partitions' own
    lifetimes are timeline.hpz_secondary_live. Engine: z3_bf16_hpz2_w2 (TINY, W = h = 2, 2026-12-06,
    2 runs) forward:1 / backward:1 / forward:2 / backward:2 within 0.03% of the replay plus those
    lifetimes on both ranks (the reference's rule before: backward:1 -9.7%, forward:2 -7.5%)."""
    return not (W <= 1 or zero.zero_quantized_weights
                or getattr(zero, "use_all_reduce_for_fetch_params", False) or offload_param == "nvme")


def zero3_fetch_replay(inventory: Inventory, zero, W: int, D: int) -> Zero3Fetch:
    """Replay DeepSpeed 0.19.8's ZeRO-3 parameter fetch and release over one iteration, bytes of
    gathered parameter data (+ all-gather buffers) per rank at each moment; memoised per (tensor list,
    W, D, persistence thresholds, prefetch bucket, max live, reuse distance, allgather_sequential).

    Modules are :func:`module_of` of the names, in order of first appearance (taken as the forward
    order); the root module runs first in forward and in backward (no parameters of its own: it
    only prefetches); backward runs the modules in reverse. Rules (``runtime/zero/``):

    * a fetch of >= 2 parameters is one coalesced all-gather into a flat buffer of
      sum ceil(n_i/W) x W x D (``partition_parameters.py`` _all_gather_dtype l. 1343); the first
      wait on it (AllGatherCoalescedHandle.wait l. 795) ``torch.cat``'s every one of its
      parameters (n_i x D each) while the buffer is alive; the buffer lives until the coordinator
      has popped each of its parameters from the inflight registry (``partitioned_param_coordinator.py``
      fetch_sub_module l. 404, i.e. until the last module it holds is fetched). One parameter (or
      ``allgather_sequential``) is gathered into its own padded buffer ceil(n/W) x W x D, the
      parameter a view of it (_all_gather_sequential l. 1379-1398);
    * first iteration: the trace is not complete (reset_step: INVALID -> RECORD), so there is no
      prefetch and release_sub_module releases every parameter of a module after its forward and
      its backward, the persistent ones too: one module at a time; each is fetched again in backward;
    * later iterations (trace COMPLETE): fetch_sub_module, after waiting on the module's own
      parameters, prefetches from the trace's parameter queue while the numel taken is below
      min(``stage3_max_live_parameters`` - available numel, ``stage3_prefetch_bucket_size``)
      (available numel: += ds_numel per all-gather, -= at release, 0 at each forward's reset_step),
      skipping parameters already available or in flight, in one all-gather; release_sub_module
      keeps a parameter whose later use the prefetch already passed (__params_to_release:
      most recent step fetched for > the step) or that the trace uses again before
      ``stage3_max_reuse_distance`` numel of modules have been traversed;
    * a container module (:func:`zero3_container_steps`: a named module owning no parameter, not
      a ModuleList) only prefetches, as the root does, right before its first descendant's fetch
      in forward and its last one's in backward, and so does a declared parameterless leaf
      (``Inventory.modules``) where it is called (after the last module: at the forward's end, before
      the backward's root); with a prefetch bucket smaller than what is left
      to gather, that all-gather takes the next module's own parameters with later ones in one
      flat buffer, live until the last of them is fetched;
    * the first module's post-backward hook does not fire (its inputs need no gradient: input ids,
      the proxy's input), so it is still gathered at the backward epilogue and released after it
      (release_backward_leftovers).

    Persistent parameters (:func:`zero3_persistent`) are gathered for good from the second
    iteration (``lp_params_gathered``): not counted there."""
    # inv.modules are not in the key: assigning them clears the inventory's memo (Inventory.__setattr__)
    key = ("zero3_fetch_replay", W, D, zero.param_persistence_threshold, zero.model_persistence_threshold,
           int(zero.prefetch_bucket_size), int(zero.max_live_parameters), int(zero.max_reuse_distance),
           bool(getattr(zero, "allgather_sequential", False)))
    return inventory.memo(key, lambda: _zero3_fetch_replay(inventory, zero, W, D))


#: where the forward's largest moment is when hooks after the last module's prefetch it (zero3_container_steps)
_TAIL_WHERE = "the prefetch of a module called after the last one owning parameters"


def _spread(col: "Sequence[int]", lo: int, w: int, count: int) -> "Sequence[int]":
    """The whole column of a sequence of identical layers from ``col``, its values before the layers
    (``col[:lo]``), for one layer (``col[lo:lo + w]``) and after them: that layer's part ``count`` times
    (slices, repetition and concatenation of the packed array or list, C-level copies)."""
    return col[:lo + w] + col[lo:lo + w] * (count - 1) + col[lo + w:]


#: the longest period (layers) :func:`_replay_jump_plan` looks for, and where: from layers 2, 4, 8, ...
_JUMP_PERIOD = 8
#: the most parameters between a layer's first and the queue's front whose state :class:`_ReplayJump` takes
_JUMP_WINDOW = 1 << 14


def _window_handles(hs: list) -> tuple:
    """The distinct all-gather handles among a window's in-flight entries ``hs`` (None where none),
    by identity in first-seen order, and each entry's handle slot (-1 for none): the part of a
    :class:`_ReplayJump` signature that says which window positions share a handle."""
    ids: dict = {}
    for hh in hs:
        if hh is not None and id(hh) not in ids:
            ids[id(hh)] = hh
    order = {k: j for j, k in enumerate(ids)}
    return ids, tuple(order[id(hh)] if hh is not None else -1 for hh in hs)


def _handles_desc(ids: dict, origin: int) -> tuple:
    """Each handle's (numel, coalesced flag, parameter positions, per-parameter bytes) relative to
    ``origin`` (a window's or layer's first queue position), so equal states a period apart compare equal."""
    return tuple((hh[0], hh[3], tuple(sorted(x - origin for x in hh[2])),
                  None if hh[3] else tuple(sorted((x - origin, b) for x, b in hh[1].items())))
                 for hh in ids.values())


def _replay_jump_plan(inv: Inventory, rep: "tuple[int, int, int] | None", lr: Any, M: int,
                      prefix: "Sequence[int]", reuse: int) -> "_ReplayJump | None":
    """The :class:`_ReplayJump` of :func:`_zero3_fetch_replay`'s forward over identical layers (module repeat
    ``rep``, parameter repeat ``lr`` with the same persistence in every layer), or None (no identical
    layers, declared modules, fewer than 8 layers)."""
    if rep is None or lr is None or inv.modules:
        return None
    h, mu, c = rep
    if c < 8:
        return None
    # release at module k's forward step is skipped when its backward use is nearer than the reuse distance:
    # prefix[2 M + 1 - k] - prefix[k + 2] < reuse, 2 x the numel after module k: non-increasing in k, so the
    # flag is False up to some module, True from there (bisection)
    def flag(k: int) -> bool:
        return prefix[2 * M + 1 - k] - prefix[k + 2] < reuse
    lo, hi = h, h + c * mu
    while lo < hi:
        m = (lo + hi) // 2
        if flag(m):
            hi = m
        else:
            lo = m + 1
    t_flip = (lo - h) // mu  # the first layer with a module whose release is skipped (c: none)
    t_true = t_flip if (lo - h) % mu == 0 else t_flip + 1  # the first layer all of whose modules skip it
    checks = sorted({t0 + d for t0 in (1 << i for i in range(1, c.bit_length())) for d in range(_JUMP_PERIOD + 1)
                     if 2 <= t0 + d < c})
    a, u = lr.head, lr.unit
    bounds = module_index(inv)[3]
    # the backward's checks: layer c - 1 - r's first backward step (its last module's, 2 M + 1 - k), r as the
    # forward's t; only where the layers start at module boundaries (bounds[h + t mu] = a + t u)
    back = []
    if bounds is not None and bounds[h] == a and bounds[h + mu] == a + u:
        back = [2 * M + 2 - h - (c - r) * mu for r in checks if c - 1 - r >= 1]
    return _ReplayJump(h, mu, c, a, u, t_flip, t_true, [1 + h + t * mu for t in checks], back,
                       len(inv.tensors) + len(inv.tensors) - a, M)


def _copy_avail_blocks(avail: dict, src: range, src_av: list, pu: int, m: int) -> None:
    """The fetch replay's period jump, on ``avail`` (position -> the step it is available at, or
    absent): the ``m`` skipped blocks of ``pu`` positions right before ``src`` take the source
    block's values (``src_av``: ``avail.get`` over ``src``), block i (1..m) at ``src.start - i pu``;
    a source position without a value removes the copies'. At C level (map / chain), no Python
    loop over the m x pu positions."""
    starts = range(src.start - pu, src.start - m * pu - 1, -pu)
    offs = [j for j, v in enumerate(src_av) if v is not None]
    vals = [v for v in src_av if v is not None]
    gone = [j for j, v in enumerate(src_av) if v is None]

    def placed(rel: list) -> Iterator[int]:
        return map(operator.add, itertools.chain.from_iterable(itertools.repeat(rel, m)),
                   itertools.chain.from_iterable(map(itertools.repeat, starts, itertools.repeat(len(rel), m))))
    avail.update(zip(placed(offs), itertools.chain.from_iterable(itertools.repeat(vals, m))))
    collections.deque(map(avail.pop, placed(gone), itertools.repeat(None)), 0)


@dataclass
class _ReplayJump:
    """Periodic forward of :func:`_zero3_fetch_replay`'s run over identical layers (issue 21: 9e5 module steps
    at 1e5 layers, walked one by one). At the first step of some layers (``checks``, layers 2 and up) the
    run's state is taken relative to that layer: the queue position, and for every parameter from the
    layer's first to the queue's front, whether it is available (its counted bytes), its all-gather handle
    (flat bytes, waited, the parameters left; the data bytes of one not waited on) and its last popped step;
    beyond the queue's front every parameter is as the run started (nothing has reached it). The modules
    before the layer never run again in the forward, and a parameter's own module is the only one to release
    it, so nothing else decides the rest of the forward but the rules, which are the same in every layer
    here but the release decision of each module (by its reuse distance: ``t_flip``/``t_true``) and the
    prefetch limit min(max live - n, bucket).

    When the state at layer t equals the state at an earlier checked layer t - p (the same available numel n
    and gathered bytes too), the run from t repeats the run from t - p shifted by p layers, and m further
    periods are skipped: those layers' parameters end as layer t - p's (available or not, with its bytes;
    their popped steps are never compared again in forward or backward, which compare them with later steps
    only) and the state is moved m p layers on. Only where every skipped module has the source's release
    decision and the queue's front stays inside the layers; the peaks of the skipped layers equal those
    already seen, so the forward's largest moment and its words are unchanged (tests/test_layer_repeat_identity.py
    compares with the reference walk)."""

    h: int
    mu: int
    c: int
    a: int
    u: int
    t_flip: int
    t_true: int
    checks: list
    back_checks: list = field(default_factory=list)
    bq0: int = 0  # the queue position just past the layers' backward entries (B_{-1}: half + N - a)
    M: int = 0
    # set by _zero3_fetch_replay for the plain-window and frozen skips (:meth:`plain_step`): each parameter's
    # bytes gathered alone (own_b), each queue position's step (q_step), the persistence flags (keep)
    own_b: Any = None
    q_step: Any = None
    keep: Any = None

    def rearm(self, t: int) -> "list[int]":
        """The forward's check steps after a skip that landed at layer ``t``: layers t + 2, t + 3, ... as the
        first checks were placed from layer 0 (powers of two, each with the :data:`_JUMP_PERIOD` layers after it),
        so a later regime of the run (the prefetch reaching max live, the front leaving the layers) is found too."""
        c, h, mu = self.c, self.h, self.mu
        return sorted({1 + h + (t + t0 + d) * mu for t0 in (1 << i for i in range(1, c.bit_length()))
                       for d in range(_JUMP_PERIOD + 1) if t + t0 + d < c})

    def plain_step(self, s: int, qpos: int, n: int, cur: int, recent: Any, avail: dict, inflight: dict,
                   have: set, seen: dict, bucket: int, max_live: int, numel: "Sequence[int]",
                   fwd: list) -> "tuple[int, int, int, int] | None":
        """The forward's skips where the window (a layer's first parameter to the queue's front) is too long or
        grows each layer, so :meth:`step`'s signature never repeats (issue 21: generate's ZeRO-3 candidate, whose
        one-parameter prefetches run the front ahead by ~5 layers every 7). Two states are taken, both exact:

        * frozen: no prefetch can take anything (no bucket, or n at max live), nothing is in flight, and every
          parameter of layers t .. c - 1 is available, popped at or after its own step (no module pops its
          entries) and either persistent or kept by its release rule (its later use already passed by the
          prefetch: ``recent`` > its step + 1, or every module of its layer within the reuse distance, layers
          from ``t_true``). Then no step of those layers gathers, pops, prefetches or releases anything: each
          moment is cur; the run goes on after the layers with the state unchanged.
        * plain window: every position from layer t's first to the front is available with the bytes of a
          parameter gathered alone (``own_b``: 0 if persistent), not in flight, and popped at its own step
          (``q_step``: the prefetch passed it, no module has run it). A layer's module then finds its parameters
          gathered (nothing fetched, nothing popped), and the front's prefetches depend only on the front's
          position within a layer (the phase, (qpos - a) mod u), the limit min(max live - n, bucket) and the
          parameters past the front (as the run started: the same in every layer). When layer t's state and an
          earlier checked layer tj's have the same phase (and, first tried, the same n), the window at tj held
          the whole period's modules (L_j >= p u), and every prefetch's limit stays the bucket (or n repeats),
          the run from t repeats the run from tj with the window longer by e = L - L_j each period, n by g and
          cur by gc: m periods are skipped while the front stays in the layers and the window holds a period's
          modules (e < 0). The skipped layers end as the source period's; the new window is plain.

        Returns (the step to go on from, queue position, n, cur) with the run's state changed in place, else None
        and nothing changed (tests/test_layer_repeat_identity.py compares with the reference walk)."""
        h, mu, a, u, c = self.h, self.mu, self.a, self.u, self.c
        t = (s - 1 - h) // mu
        base = a + t * u
        lim = a + c * u
        q_step, own_b, keep = self.q_step, self.own_b, self.keep
        # ---- frozen: nothing of layers t .. c - 1 changes (wherever the front is: no prefetch takes anything)
        if (bucket <= 0 or max_live - n <= 0) and not inflight:
            flip = a + max(t, min(self.t_true, c)) * u  # params below: their release must be skipped by recent
            if (all(map(avail.__contains__, range(base, lim)))
                    and all(map(operator.ge, recent[base:lim], q_step[base:lim]))
                    and all(map(operator.or_, keep[base:flip],
                                map(operator.gt, recent[base:flip], map((1).__add__, q_step[base:flip]))))):
                if cur > fwd[0]:
                    fwd[0], fwd[1] = cur, h + t * mu
                PASSES["forward_frozen"] += 1
                return 1 + h + c * mu, qpos, n, cur
        if not base <= qpos <= lim:
            return None
        # ---- plain window: [base, qpos), checked once per position (positions already found plain stay so until
        # the front or a release reaches them: the module at the window's start releases only its own, before it)
        pc = seen.setdefault(("plain_cache",), [0, 0])
        lo = max(base, pc[1]) if pc[0] <= base else base
        if lo < qpos:
            bad = next(itertools.compress(itertools.count(lo), map(operator.not_, map(
                operator.and_, map(operator.eq, map(avail.get, range(lo, qpos)), own_b[lo:qpos]),
                map(operator.eq, recent[lo:qpos], q_step[lo:qpos])))), None)
            if bad is None and inflight:
                bad = next(itertools.compress(itertools.count(lo), map(inflight.__contains__, range(lo, qpos))), None)
            pc[0], pc[1] = (base, qpos) if bad is None else (base, bad)
            if bad is not None:
                return None
        else:
            pc[0] = base
        L = qpos - base
        rec = (t, n, qpos, cur, fwd[0], fwd[1], L)
        k1, k2 = ("plain", L % u, n), ("plain", L % u)
        prev = seen.get(k1) or seen.get(k2)
        seen[k1] = seen[k2] = rec
        if prev is None:
            return None
        tj, nj, qj, cj, bj, _, Lj = prev
        p = t - tj
        e, g, gc = L - Lj, n - nj, cur - cj
        pu = p * u
        if p <= 0 or Lj < pu or L < pu:
            return None
        if gc > 0 and not (fwd[0] > bj and h + tj * mu <= fwd[1] < h + t * mu):
            return None  # (as step's: the largest moment moves to the last period's copy of the source's)
        if t <= self.t_flip:
            end = self.t_flip
        elif tj >= self.t_true:
            end = c
        else:
            return None
        m = (end - t) // p
        if pu + e > 0:
            m = min(m, (lim - qpos) // (pu + e))  # the front stays in the layers
        if e < 0:
            m = min(m, (L - pu) // -e + 1)  # every skipped period's window holds its modules
        if g and bucket > 0:
            # n within the source period stayed below nj + what it gathered: the parameters the front passed
            # (qj .. qpos) and the modules' own (none here, a layer's numel each bounds it)
            room = max_live - bucket - nj - p * sum(numel[a:a + u]) - sum(numel[qj:qpos])
            # (n falling: the limit stayed the bucket in the source period, so it does in every copy)
            m = 0 if room < 0 else min(m, room // g) if g > 0 else m
        if m < 1:
            return None
        src = range(a + tj * u, base)
        if any(map(inflight.__contains__, src)):
            return None
        src_av = list(map(avail.get, src))
        if any(v is None and i in have for i, v in zip(src, src_av)):
            return None
        nbase, nq = base + m * pu, qpos + m * (pu + e)
        # the skipped layers [base, nbase) end as the source's (m blocks at C level), the new window is plain
        offs = [j for j, v in enumerate(src_av) if v is not None]
        vals = [v for v in src_av if v is not None]
        gone = [j for j, v in enumerate(src_av) if v is None]
        starts = range(base, nbase, pu)

        def placed(rel: list) -> Iterator[int]:
            return map(operator.add, itertools.chain.from_iterable(itertools.repeat(rel, m)),
                       itertools.chain.from_iterable(map(itertools.repeat, starts, itertools.repeat(len(rel), m))))
        avail.update(zip(placed(offs), itertools.chain.from_iterable(itertools.repeat(vals, m))))
        collections.deque(map(avail.pop, placed(gone), itertools.repeat(None)), 0)
        avail.update(zip(range(max(nbase, qpos), nq), own_b[max(nbase, qpos):nq]))
        recent[qpos:nq] = array.array(recent.typecode, q_step[qpos:nq])  # q_step: _narrow's typecode
        pc[0], pc[1] = nbase, nq
        ds = m * p * mu
        PASSES["forward_plain_periods"] += 1
        if gc > 0:
            fwd[0], fwd[1] = fwd[0] + m * gc, fwd[1] + ds
        return s + ds, nq, n + m * g, cur + m * gc

    def step(self, s: int, qpos: int, n: int, cur: int, recent: Any, avail: dict, inflight: dict, have: set,
             seen: dict, bucket: int, max_live: int, numel: "Sequence[int]",
             fwd: list) -> "tuple[int, int, int, int] | None":
        """At forward step ``s`` (a checked layer's first): record its state, or skip periods when it repeats
        an earlier one: then (the step to go on from, queue position, n) with ``recent``, ``avail`` and
        ``inflight`` changed in place; else None and nothing changed."""
        h, mu, a, u = self.h, self.mu, self.a, self.u
        t = (s - 1 - h) // mu
        base = a + t * u
        lim = a + self.c * u
        if not base <= qpos <= lim or qpos - base > _JUMP_WINDOW:
            return None  # (a window past _JUMP_WINDOW parameters: not taken, its cost would approach the walk's)
        win = range(base, qpos)
        ids, slots = _window_handles(list(map(inflight.get, win)))
        if any(x < base or x >= qpos for hh in ids.values() for x in hh[2]):
            return None
        hdesc = _handles_desc(ids, base)
        sig = (qpos - base, tuple(map(avail.get, win)), slots, hdesc,
               tuple(r - s if r != _NEVER else _NEVER for r in recent[base:qpos]))
        prev = seen.get(sig)
        # n and cur are compared only when the rest repeats: kept, with the forward's largest moment so far
        seen[sig] = (t, n, qpos, cur, fwd[0], fwd[1])  # a later repeat is compared with the latest
        if prev is None:
            return None
        tj, nj, _, cj, bj, _ = prev
        p = t - tj
        g = n - nj  # the numel gathered and kept per period (the GA-2 refetch keeps the persistent ones)
        gc = cur - cj  # the bytes kept per period (a reuse distance over the model keeps every layer)
        if p <= 0 or g < 0:
            return None
        if gc > 0 and not (fwd[0] > bj and h + tj * mu <= fwd[1] < h + t * mu):
            # each skipped period's moments are the source period's + gc more than the one before: the largest is
            # the last period's copy of the source's largest, known only where the source set the forward's best
            return None
        if t <= self.t_flip:
            end = self.t_flip
        elif tj >= self.t_true:
            end = self.c
        else:
            return None
        m = min((end - t) // p, (lim - qpos) // (p * u))
        if g and bucket > 0:
            # n grows by g a period: the run repeats only while every prefetch's limit min(max live - n, bucket)
            # is the bucket. Within the source period n never passed nj + 2 p x (a layer's numel): it grows
            # only by gathering, at most the parameters the queue passed (p u positions, p layers) and the
            # modules run (p layers); so m periods more keep it when nj + 2 p layer + m g <= max live - bucket
            room = max_live - bucket - nj - 2 * p * sum(numel[a:a + u])
            m = min(m, room // g) if room >= 0 else 0
        # (bucket <= 0: no prefetch, n decides nothing)
        if m < 1:
            return None
        # the skipped layers' parameters end as the source period's: checked first, nothing changed before
        src = range(a + tj * u, base)
        src_av = list(map(avail.get, src))
        if any(map(inflight.__contains__, src)) or any(v is None and i in have for i, v in zip(src, src_av)):
            return None
        shift = m * p * u
        snap_av = sig[1]
        snap_rec = sig[4]
        # the old window back to the run's starting state, then the skipped layers, then the window moved on
        for i in win:
            if i in have:
                avail[i] = 0
            else:
                avail.pop(i, None)
            inflight.pop(i, None)
            recent[i] = _NEVER
        # (a parameter the source has not available is not one the run started with, checked above, so it is
        # not available here either: only the available ones are written, m blocks of p layers at C level)
        blk = p * u
        offs = [i - src.start for i, v in zip(src, src_av) if v is not None]
        vals = [v for v in src_av if v is not None]
        avail.update(zip(map(operator.add, itertools.chain.from_iterable(itertools.repeat(offs, m)),
                             itertools.chain.from_iterable(map(itertools.repeat, range(base, base + m * blk, blk),
                                                               itertools.repeat(len(offs), m)))),
                         itertools.chain.from_iterable(itertools.repeat(vals, m))))
        nbase = base + shift
        ds = m * p * mu
        for j, v in enumerate(snap_av):
            if v is None:
                avail.pop(nbase + j, None)
            else:
                avail[nbase + j] = v
            r = snap_rec[j]
            recent[nbase + j] = r if r == _NEVER else r + s + ds
        made = [[flat, ({} if waited else {x + nbase: bb for x, bb in data}), {x + nbase for x in left}, waited]
                for flat, waited, left, data in hdesc]
        for j, hid in enumerate(sig[2]):
            if hid >= 0:
                inflight[nbase + j] = made[hid]
        PASSES["forward_periods_n_growing" if g else "forward_periods"] += 1
        if gc:
            PASSES["forward_periods_cur_shifted" if gc < 0 else "forward_periods_cur_growing"] += 1
        if gc > 0:
            fwd[0], fwd[1] = fwd[0] + m * gc, fwd[1] + ds
        return s + ds, qpos + shift, n + m * g, cur + m * gc

    def rearm_back(self, t: int) -> "list[int]":
        """The backward's check steps after a skip that landed at layer ``t`` (its first backward step next):
        layers t - 2, t - 3, ... placed as :meth:`rearm`'s, downwards."""
        c, h, mu, M = self.c, self.h, self.mu, self.M
        return sorted({2 * M + 2 - h - (t - t0 - d + 1) * mu for t0 in (1 << i for i in range(1, c.bit_length()))
                       for d in range(_JUMP_PERIOD + 1) if t - t0 - d >= 1})

    def plain_back(self, s: int, qpos: int, n: int, cur: int, recent: Any, avail: dict, inflight: dict, seen: dict,
                   bucket: int, max_live: int, numel: "Sequence[int]", q_param: "Sequence[int]", fetch_b: list,
                   during_b: list, cb: "Sequence[int]") -> "tuple[int, int, int, int] | None":
        """The backward's plain-window skip (:meth:`plain_step`'s, in the backward half of the queue; issue 21:
        generate's ZeRO-3 candidate keeps ~24,000 layers gathered ahead, too long a window for :meth:`back`).
        At layer t's first backward step the window is the queue positions B_t (layer t's first backward entry)
        .. qpos; plain: each position's parameter available with its bytes gathered alone, not in flight, popped
        at that position's step. A backward module then finds its parameters gathered, pops nothing, prefetches
        and releases them all (no module is used again). The parameters past the front decide the prefetch by
        whether they are available alone (nothing reads their popped step: a backward step is above it, or equal
        where the forward's front passed the same position); those of layers the forward released are as the run
        started (persistent ones available, 0 bytes), and a backward module visiting one past the front leaves it
        so (it releases all but the persistent): so from the first position X0 past the front at the first check
        from which every position is so, they stay so until the front passes them. The skip is taken where the
        source period's front started past X0 and the copies' front stays in the layers; then, as
        :meth:`plain_step`, m periods move the window on (longer by e each), n by g and cur by gc; the skipped
        modules' fetch and during bytes are the source's + i gc in the i-th copy, the skipped layers end released
        as the source's. Returns (step, queue position, n, cur), else None and nothing changed."""
        h, mu, a, u, c = self.h, self.mu, self.a, self.u, self.c
        t = (2 * self.M + 2 - h - s) // mu - 1
        B = self.bq0 - (t + 1) * u
        lo_q, hi_q = self.bq0 - c * u, self.bq0
        if not (B <= qpos <= hi_q or qpos == len(q_param)):  # (the queue done: the front reads nothing more)
            return None
        q_step, own_b, keep = self.q_step, self.own_b, self.keep
        x0 = seen.get(("bplain_x0",))
        if x0 is None:
            # the first position from which every one to the layers' end is as the run started (scanned from the end)
            qf = min(qpos, hi_q)
            seen[("bplain_x0",)] = x0 = hi_q - next(itertools.compress(itertools.count(), map(operator.ne, map(
                avail.get, reversed(q_param[qf:hi_q])), map(lambda i: 0 if keep[i] else None,
                                                              reversed(q_param[qf:hi_q])))), hi_q - qf)
            if any(map(inflight.__contains__, q_param[x0:hi_q])):
                seen[("bplain_x0",)] = x0 = hi_q + 1  # (never the case: nothing past the front is in flight)
        pc = seen.setdefault(("bplain_cache",), [0, 0])
        lo = max(B, pc[1]) if pc[0] <= B else B
        if lo < qpos:
            ps = q_param[lo:qpos]
            bad = next(itertools.compress(itertools.count(lo), map(operator.not_, map(
                operator.and_, map(operator.eq, map(avail.get, ps), map(own_b.__getitem__, ps)),
                map(operator.eq, map(recent.__getitem__, ps), q_step[lo:qpos])))), None)
            if bad is None and inflight:
                bad = next(itertools.compress(itertools.count(lo), map(inflight.__contains__, ps)), None)
            pc[0], pc[1] = (B, qpos) if bad is None else (B, bad)
            if bad is not None:
                return None
        else:
            pc[0] = B
        L = qpos - B
        rec = (t, n, qpos, cur, L)
        k1, k2 = ("bplain", L % u, n), ("bplain", L % u)
        prev = seen.get(k1) or seen.get(k2)
        seen[k1] = seen[k2] = rec
        if prev is None:
            return None
        tj, nj, qj, cj, Lj = prev
        p = tj - t
        e, g, gc = L - Lj, n - nj, cur - cj
        pu = p * u
        if p <= 0 or Lj < pu or L < pu or qj < x0:
            return None
        m = t // p  # layers t - m p + 1 >= 1: module 0's (no release) is not in the layers
        if pu + e > 0:
            m = min(m, (hi_q - qpos) // (pu + e))
        if e < 0:
            m = min(m, (L - pu) // -e + 1)
        if g and bucket > 0:
            room = max_live - bucket - nj - p * sum(numel[a:a + u]) - sum(map(numel.__getitem__, q_param[qj:qpos]))
            m = 0 if room < 0 else min(m, room // g) if g > 0 else m
        if m < 1:
            return None
        k_src, k_lo = h + (t + 1) * mu, h + (t + 1 - m * p) * mu
        if cb[k_lo:k_src] != cb[k_src:k_src + p * mu] * m:
            return None
        src = range(a + (t + 1) * u, a + (t + 1 + p) * u)
        if any(map(inflight.__contains__, src)):
            return None
        src_av = list(map(avail.get, src))
        nB, nq = B + m * pu, qpos + m * (pu + e)
        # the skipped layers t - m p + 1 .. t end as the source layers t + 1 .. t + p (m blocks at C level)
        _copy_avail_blocks(avail, src, src_av, pu, m)
        # their modules' moments: the source's, + i gc in the i-th copy (every moment of a copy shifted alike)
        w = p * mu
        src_f, src_d = fetch_b[k_src:k_src + w], during_b[k_src:k_src + w]
        for i in range(1, m + 1):
            lo_k = k_src - i * w
            fetch_b[lo_k:lo_k + w] = [v + i * gc for v in src_f] if gc else src_f
            during_b[lo_k:lo_k + w] = [v + i * gc for v in src_d] if gc else src_d
        # the window moved on: plain from the old front to the new
        newp = q_param[max(nB, qpos):nq]
        avail.update(zip(newp, map(own_b.__getitem__, newp)))
        collections.deque(map(recent.__setitem__, q_param[qpos:nq], q_step[qpos:nq]), 0)
        pc[0], pc[1] = nB, nq
        PASSES["backward_plain_periods"] += 1
        return s + m * p * mu, nq, n + m * g, cur + m * gc

    def back(self, s: int, qpos: int, n: int, cur: int, recent: Any, avail: dict, inflight: dict, seen: dict,
             snap: list, q_param: "Sequence[int]", fetch_b: list, during_b: list, cb: "Sequence[int]",
             periods: "Any" = None) -> "tuple[int, int] | None":
        """The backward's periods (issue 21: the other 9e5 module steps at 1e5 layers). At layer t's first
        backward step ``s`` (layers run from the last to the first) the state is taken relative to layer t as
        the forward's: the queue position past B_t (layer t's first backward entry, bq0 - (t + 1) u), and for
        every parameter at queue positions B_t .. qpos its availability (counted bytes), its all-gather handle
        and its last popped step (relative to s), with n and cur. Nothing else decides the rest of the
        backward: a backward step never skips its release (nxt_use is -1 there, no module is used again) but
        module 0's, which is not in the layers, and the parameters past the queue's front are as the forward
        left them (the forward's popped steps are below every backward step: as never popped).

        Unlike the forward's, those parameters need not be as the run started (the forward keeps the last
        layers, by the reuse distance): ``snap`` holds their state once, at the first check (positions from
        ``snap[0]``, values ``snap[1]``: counted bytes or None), and m periods of p layers are skipped only where
        that state repeats with period p u over every position the skipped periods and their source reach
        (checked by comparing the snapshot with itself shifted by p u). The skipped layers end as the source
        layers t + 1 .. t + p did (each parameter's availability and bytes), their fetch and during bytes are
        the source modules' (``fetch_b``, ``during_b``: the same state gives the same moments), and the state
        moves m p layers down. Returns (the step to go on from, queue position) with the run's state changed
        in place, else None and nothing changed (tests/test_layer_repeat_identity.py compares with the
        reference walk). ``periods`` (tests only): m -> how many skipped periods are written."""
        h, mu, a, u, c = self.h, self.mu, self.a, self.u, self.c
        t = (2 * self.M + 2 - h - s) // mu - 1
        B = self.bq0 - (t + 1) * u
        if not B <= qpos <= self.bq0 or qpos - B > _JUMP_WINDOW or not snap:
            return None
        if snap[0] is None:
            # the first check: the state the forward left past the queue's front (nothing in flight there)
            ahead = q_param[qpos:self.bq0]
            if any(map(inflight.__contains__, ahead)):
                snap.clear()  # (never the case: a handle is waited at its module's forward step; walked)
                return None
            snap[0], snap[1] = qpos, list(map(avail.get, ahead))
        wp = q_param[B:qpos]
        pb = a + t * u  # layer t's first parameter
        ids, slots = _window_handles(list(map(inflight.get, wp)))
        if ids:
            wset = set(wp)
            if any(x not in wset for hh in ids.values() for x in hh[2]):
                return None
        hdesc = _handles_desc(ids, pb)
        sig = ("back", qpos - B, tuple(map(avail.get, wp)), slots, hdesc,
               tuple(recent[i] - s if recent[i] != _NEVER else _NEVER for i in wp), cur, n)
        prev = seen.get(sig)
        seen[sig] = (t, qpos)
        if prev is None:
            return None
        tj, qj = prev
        p = tj - t
        pu = p * u
        q0, fe = snap
        if p <= 0 or qj < q0 or qpos - qj != pu:
            return None
        m = min(t // p, (self.bq0 - qpos) // pu)
        if m < 1:
            return None
        # the state past the front repeats with period p u from the source's front on: the first position x
        # where it does not bounds the periods, qpos + (m - 1) p u <= x
        lo = qj - q0
        hi = qpos + (m - 1) * pu - q0
        # (lazily: stops at the first difference, no copy of the range)
        bad = next(itertools.compress(itertools.count(lo), map(operator.ne, itertools.islice(fe, lo, hi),
                                                                itertools.islice(fe, lo + pu, hi + pu))), None)
        if bad is not None:
            m = (bad + q0 - qpos) // pu + 1
            if m < 1:
                return None
        # the skipped layers' container hooks are the source layers' (zero3_container_steps)
        k_src, k_lo = h + (t + 1) * mu, h + (t + 1 - m * p) * mu
        if cb[k_lo:k_src] != cb[k_src:k_src + p * mu] * m:
            return None
        src = range(a + (t + 1) * u, a + (t + 1 + p) * u)
        if any(map(inflight.__contains__, src)):
            return None
        src_av = list(map(avail.get, src))
        shift = m * pu
        for i in wp:
            inflight.pop(i, None)
        # the skipped layers t - m p + 1 .. t end as the source layers t + 1 .. t + p (m blocks at C level);
        # ``periods`` (tests only) writes another count of them, which the identity tests must catch
        mf = m if periods is None else max(0, min(periods(m), (t + 1) // p))
        _copy_avail_blocks(avail, src, src_av, pu, mf)
        k_fill = k_src - mf * p * mu
        fetch_b[k_fill:k_src] = fetch_b[k_src:k_src + p * mu] * mf
        during_b[k_fill:k_src] = during_b[k_src:k_src + p * mu] * mf
        # the window moved m p layers down (parameters - m p u, steps + m p mu)
        ds = m * p * mu
        ns = s + ds
        for i, v, r in zip(wp, sig[2], sig[5]):
            j = i - shift
            if v is None:
                avail.pop(j, None)
            else:
                avail[j] = v
            recent[j] = r if r == _NEVER else r + ns
        made = [[flat, ({} if waited else {x + pb - shift: bb for x, bb in data}), {x + pb - shift for x in left}, waited]
                for flat, waited, left, data in hdesc]
        for i, hid in zip(wp, sig[3]):
            if hid >= 0:
                inflight[i - shift] = made[hid]
        PASSES["backward_periods"] += 1
        return ns, qpos + shift


#: :func:`_zero3_fetch_replay`'s "never popped" step (below every step of the trace)
_NEVER = -10**18
#: True: :func:`_zero3_fetch_replay`'s backward skips whole periods of identical layers (:meth:`_ReplayJump.back`);
#: False: it walks every step (tests compare the two with the reference walk)
BACKWARD_PERIODS = True
#: True: :func:`_zero3_fetch_replay`'s forward and backward also skip a window too long for :meth:`_ReplayJump.step` /
#: :meth:`_ReplayJump.back` or growing each layer, and the forward's layers where nothing changes
#: (:meth:`_ReplayJump.plain_step`, :meth:`_ReplayJump.plain_back`), checking again after each skip; False: only
#: step and back, once each (tests compare the two with the reference walk)
FORWARD_PLAIN = True
#: True: the GA-2 refetch's forward, once its prefetch has stopped with parameters still in flight, ends in one
#: pass (run's held_rest); False: walked (tests compare the two with the reference walk)
REFETCH_HELD_PASS = True
#: True: :func:`_zero3_fetch_replay`'s GA-2 refetch takes the run's forward where both start alike (every persistent
#: parameter the first module's); False: walked again (tests compare the two with the reference walk)
REFETCH_SAME_START = True
#: how many times each shortcut above was taken in this process (tests check they are exercised)
PASSES: collections.Counter = collections.Counter()
#: tests only: m -> the number of skipped periods whose layers and columns :meth:`_ReplayJump.back` writes (None: m,
#: every one; another count is a wrong repeat the identity tests must catch)
_BACK_PERIODS_HOOK = None


def padded_numels(inv: Inventory, W: int) -> "Sequence[int]":
    """ceil(n_i / W) x W of every tensor (elements, inventory order; the numel a ZeRO-3 partition of W
    ranks pads to, ``partition_parameters.py`` _partition_param), packed, once per (tensor list, W);
    computed by C-level maps (a Python expression per tensor before, issue 21)."""
    def compute() -> "Sequence[int]":
        nums = map(operator.attrgetter("numel"), inv.tensors)
        neg_ceil = map(operator.floordiv, map(operator.neg, nums), itertools.repeat(W))  # -ceil(n / W)
        return _packed(map(operator.mul, neg_ceil, itertools.repeat(-W)))
    return inv.memo(("padded_numels", W), compute)


def _zero3_replay_inputs(inv: Inventory, zero, W: int):
    """What both fetch replays start from: (tensors, persistent flags, sequential all-gather, the
    tensor indices of each owning module in first-use order, each tensor's module index, the module
    names, numels, numels padded to W)."""
    tensors = inv.tensors
    keep = zero3_persistent(inv, zero)
    seq = bool(getattr(zero, "allgather_sequential", False))
    members, mod_of, names, _ = module_index(inv)
    numel = list(map(operator.attrgetter("numel"), tensors))
    return tensors, keep, seq, members, mod_of, names, numel, padded_numels(inv, W)


def _zero3_fetch_replay(inv: Inventory, zero, W: int, D: int) -> Zero3Fetch:
    tensors, keep, seq, members, mod_of, names, numel, pad = _zero3_replay_inputs(inv, zero, W)
    M = len(members)
    bounds = module_index(inv)[3]

    # ---- first iteration: one module at a time, every parameter, no prefetch: a coalesced all-gather's
    # flat buffer sum pad_i x D beside its cats sum n_i x D; one parameter (or sequential) its own pad_i x D
    rep = _module_repeat(inv) if bounds is not None else None
    # no identical layers: the longest run of one-tensor modules of equal numel stands in for them (a layer of one
    # module of one tensor), for the columns below and the period skips (_replay_jump_plan); issue 21: the
    # 100,000 nameless tensors of generate's limit, 2e5 module steps per run walked one by one before
    eq = _zero3_equal_run(inv, numel, M) if rep is None and bounds is not None and ZERO3_EQUAL_RUN else None
    if eq is not None:
        rep = (eq.head, 1, eq.count)
    if rep is not None:
        # identical layers (model.parallel.layer_repeat): every per-module column below is the same in each
        # layer, so it is made for the modules before the layers, one layer and those after them, and the
        # layer's part repeated (_spread: C-level copies; ~0.1 s a column at 1e5 layers before, issue 21)
        h, mu, c = rep
        rmods = list(itertools.chain(range(h + mu), range(h + c * mu, M)))
        r_numel = _narrow(sum(map(numel.__getitem__, members[k])) for k in rmods)
        r_pad = _narrow(sum(map(pad.__getitem__, members[k])) for k in rmods)
        r_co = [len(members[k]) >= 2 and not seq for k in rmods]
        r_during = _narrow((dn if cc else pp) * D for dn, pp, cc in zip(r_numel, r_pad, r_co))
        r_fetch = _narrow(dd + (pp * D if cc else 0) for dd, pp, cc in zip(r_during, r_pad, r_co))
        mod_numel, mod_pad, f_during, f_fetch = (_spread(col, h, mu, c) for col in (r_numel, r_pad, r_during, r_fetch))
    elif bounds is not None:
        # consecutive modules: per-module sums as differences of prefix sums (C-level passes)
        def per_module(col: "Sequence[int]") -> "Sequence[int]":
            acc = _packed(itertools.accumulate(col, initial=0))
            at = _packed(map(acc.__getitem__, bounds))
            return _packed(map(operator.sub, itertools.islice(at, 1, None), at))
        mod_numel, mod_pad = per_module(numel), per_module(pad)
        f_during = _packed(dn * D if c >= 2 and not seq else pp * D
                           for dn, pp, c in zip(mod_numel, mod_pad, map(len, members)))
        # a coalesced module's fetch is its flat buffer + its copies; a single (or sequential) one its buffer
        f_fetch = _packed(pp * D + dd if c >= 2 and not seq else dd
                          for dd, pp, c in zip(f_during, mod_pad, map(len, members)))
    else:
        f_fetch, f_during = [0] * M, [0] * M
        for k, idx in enumerate(members):
            if len(idx) >= 2 and not seq:
                data = sum(numel[i] for i in idx) * D
                f_fetch[k], f_during[k] = sum(pad[i] for i in idx) * D + data, data
            else:
                f_fetch[k] = f_during[k] = sum(pad[i] for i in idx) * D
        mod_numel = [sum(numel[i] for i in idx) for idx in members]
        mod_pad = [sum(pad[i] for i in idx) for idx in members]
    kbest = f_fetch.index(max(f_fetch)) if M else 0  # the first module with the largest fetch
    first_forward = (f_fetch[kbest], f"module {names[kbest]}") if M else (0, "")
    first_end = f_during[0] if M else 0

    # ---- a later iteration: the coordinator over the complete trace
    # trace steps: root (forward), modules, root (backward), modules reversed; numel of each step
    # packed int64 columns (_packed), not lists of int objects: 1.8M steps at 1e5 layers (issue 21)
    trace = _narrow(itertools.chain((-1,), range(M), (-1,), range(M - 1, -1, -1)))
    prefix = _packed(itertools.accumulate(itertools.chain((0,), mod_numel, (0,), reversed(mod_numel)), initial=0))
    # step s -> the next step of its module trace[s] in the trace (-1: none): module k runs at forward
    # step k + 1 and backward step 2 M + 1 - k, nowhere else
    nxt_use = _narrow(itertools.chain((-1,), range(2 * M + 1, M + 1, -1), (-1,), itertools.repeat(-1, M)))
    # the coordinator's queue of (parameter, step) in trace order, consumed front to back only: two
    # packed columns read through a cursor, shared by both runs (a deque of tuples per run before)
    # module k runs at forward step k + 1 and backward step 2 M + 1 - k (C-level passes, issue 21)
    q_param = _narrow(itertools.chain(itertools.chain.from_iterable(members),
                                      itertools.chain.from_iterable(reversed(members))))
    half = len(q_param) // 2
    if bounds is not None:
        # consecutive modules: q_param's first half is every parameter in order, so its modules are mod_of, and its
        # second half lists the modules' parameters from the last module to the first: mod_of reversed
        q_step = _narrow(itertools.chain(map((1).__add__, mod_of), map((2 * M + 1).__sub__, reversed(mod_of))))
    else:
        q_step = _narrow(itertools.chain(
            map((1).__add__, map(mod_of.__getitem__, itertools.islice(q_param, half))),
            map((2 * M + 1).__sub__, map(mod_of.__getitem__, itertools.islice(q_param, half, None)))))
    q_len = len(q_param)
    bucket, max_live, reuse = int(zero.prefetch_bucket_size), int(zero.max_live_parameters), int(zero.max_reuse_distance)
    coalesce = not seq
    # packed (8 bytes a value, not an int object each: issue 21's memory at 1e5 layers)
    def param_cols(numel: "Sequence[int]", pad: "Sequence[int]", keep: "Sequence[bool]") -> tuple:
        return (_narrow(0 if k else n * D for k, n in zip(keep, numel)),  # a waited coalesced param's bytes
                _narrow(0 if k else p * D for k, p in zip(keep, pad)),    # a param in its own buffer
                _narrow(p * D for p in pad))
    lr = None
    if rep is not None:
        from advisor.model.parallel import layer_repeat
        lr = eq if eq is not None else layer_repeat(inv)
        if keep[lr.head:lr.end] != keep[lr.head:lr.head + lr.unit] * lr.count:
            lr = None  # persistence differs between layers (stage3_model_persistence_threshold reached in them)
    if lr is not None:
        # identical layers, the same persistence in each: the columns of one layer repeated (_spread)
        rp = list(itertools.chain(range(lr.head + lr.unit), range(lr.end, len(tensors))))
        data_b, own_b, pad_b = (_spread(col, lr.head, lr.unit, lr.count) for col in param_cols(
            list(map(numel.__getitem__, rp)), list(map(pad.__getitem__, rp)), list(map(keep.__getitem__, rp))))
    else:
        data_b, own_b, pad_b = param_cols(numel, pad, keep)
    # for run's forward-only tail: each module's first queue position, the last module with a
    # non-persistent parameter (-1: none)
    mod_start = _narrow(itertools.accumulate(map(len, members), initial=0))
    last_lent = max(itertools.compress(mod_of, map(operator.not_, keep)), default=-1)

    cf, cb, ftail = zero3_container_steps(inv)
    has_containers = any(cf) or any(cb)
    # an equal-size run's modules are periodic, container hooks between them need not be: no period skips then
    jump = None if eq is not None and has_containers else _replay_jump_plan(inv, rep, lr, M, prefix, reuse)
    if jump is not None:
        jump.own_b, jump.q_step, jump.keep = own_b, q_step, keep

    if isinstance(members, ModuleRanges):
        # consecutive modules: module k's tensors as ModuleRanges.__getitem__ gives them for 0 <= k < M, without its
        # checks (a Python call per module step, 1.2M at the 1e5-tensor limit, issue 21)
        mb_ = members.bounds
        member = (lambda k: range(mb_[k], mb_[k + 1]))
    else:
        member = members.__getitem__

    def run(have: set, forward_only: bool) -> tuple:
        # _zero3_fetch_replay_reference's run with fetch / all_gather / release inlined into one loop
        # (the same operations in the same order; tests/test_fetch_replay_identity.py compares them)
        qpos = 0
        recent = array.array("q", [_NEVER]) * len(tensors)
        avail: dict[int, int] = dict.fromkeys(have, 0)
        inflight: dict[int, list] = {}
        n = cur = 0

        def all_gather(ids: list, cur: int) -> int:
            # one all-gather of ids (zero3_fetch_replay's first rule, partition_parameters.py l. 1343 /
            # l. 1379-1398): >= 2 coalesced into one flat buffer, each in flight until its first wait; one
            # parameter (or allgather_sequential) its own padded buffer. The bytes live after it
            if len(ids) >= 2 and coalesce:
                h = [sum(pad_b[i] for i in ids), {i: data_b[i] for i in ids}, set(ids), False]
                for i in ids:
                    inflight[i] = h
                return cur + h[0]
            for i in ids:
                nb = own_b[i]
                cur += nb
                avail[i] = nb
            return cur

        def queue_prefetch(qpos: int, n: int, cur: int) -> tuple:
            # the prefetch under the bucket and max_live, from queue position qpos; a container's
            # hook (zero3_container_steps) runs only this, a module's fetch runs it after its own
            limit = min(max_live - n, bucket)
            if not (bucket > 0 and limit > 0 and qpos < q_len):
                return qpos, n, cur
            take, taken, got = [], 0, set()
            while qpos < q_len and taken < limit:
                i, at = q_param[qpos], q_step[qpos]
                qpos += 1
                if at > recent[i]:
                    recent[i] = at
                if i not in avail and i not in inflight and i not in got:
                    got.add(i)
                    take.append(i)
                    taken += numel[i]
            if take:
                n += sum(numel[i] for i in take)
                cur = all_gather(take, cur)
            return qpos, n, cur
        def held_rest(k: int, cur: int) -> "tuple[list, int] | None":
            # the rest of a forward-only run (the GA-2 refetch) from module k in one pass, where the prefetch has
            # stopped for good (no bucket, or n at max live: n only grows, the modules left are persistent and
            # never released) with parameters gathered ahead of their modules (issue 21: at 1e5 layers, n reaches
            # max live with ~2e5 parameters in flight and the walk waited them module by module). The queue's
            # front qpos is in module B (positions are parameters in the forward half, consecutive modules); each
            # parameter of modules k .. B before it is in flight or available, one past it was never gathered.
            # Every byte a wait adds is 0 (persistent), so a module's moment is cur before it plus the flat buffer
            # of what it gathers itself (its parameters past the front, >= 2 coalesced; freed by its own wait), and
            # cur falls only by a prefetched handle's flat buffer, at the module of its last parameter. Modules
            # k + 1 .. B - 1 gather nothing and never pass module k's moment. Returns ([(moment, where), ...] in
            # order, cur after the forward), or None (then walked; tests/test_fetch_replay_identity.py)
            lo = mod_start[k]
            if any(i not in avail and i not in inflight for i in range(lo, qpos)):
                return None
            hs = {id(hh): hh for hh in inflight.values()}.values()
            if any(not hh[3] and any(hh[1].values()) for hh in hs):
                return None
            B = mod_of[qpos] if qpos < half else M
            last = [mod_of[max(hh[2])] for hh in hs]
            if min(last, default=B) < k:
                return None
            before = sum(hh[0] for hh, lm in zip(hs, last) if lm < B)
            at = sum(hh[0] for hh, lm in zip(hs, last) if lm == B)
            out = []
            if k < B:
                out.append((cur, f"module {names[k]}'s fetch"))
            if B == M:
                return out, cur - before
            cb_ = cur - before
            hi = mod_start[B + 1]
            need = hi - qpos
            out.append((cb_ + (sum(pad_b[qpos:hi]) if need >= 2 and coalesce else 0), f"module {names[B]}'s fetch"))
            ca = cb_ - at
            if B + 1 < M:
                tail = [ca + (mp * D if c >= 2 and coalesce else 0)
                        for mp, c in zip(itertools.islice(mod_pad, B + 1, None),
                                         map(len, itertools.islice(members, B + 1, None)))]
                tb = max(tail)
                out.append((tb, f"module {names[B + 1 + tail.index(tb)]}'s fetch"))
            return out, ca

        fwd_best, fwd_where, fwd_k = 0, "", -1  # fwd_k: the module of the forward's best when a module's fetch
        # per-module moments of the backward (written at s > M only): none in a forward-only run (the GA-2 refetch,
        # whose forward moment alone is read), which kept two unread M-entry lists and their packed copies at the
        # replay's peak (issue 21)
        fetch_b, during_b = ([0] * M, [0] * M) if not forward_only else (None, None)
        start = 0
        held_tried = False
        # identical layers (_replay_jump_plan): the forward's state at some layers' first step, to find a period
        # and the backward's (_ReplayJump.back, BACKWARD_PERIODS), after the forward's
        checks = list(jump.checks) if jump is not None else []
        if jump is not None and not forward_only and BACKWARD_PERIODS:
            checks += jump.back_checks
        next_check = checks.pop(0) if checks else -1
        seen: dict = {}
        snap: list = [None, None]
        skip_to = -1
        for s in range(M + 1 if forward_only else len(trace)):
            if s < skip_to:
                continue
            if s == next_check:
                next_check = checks.pop(0) if checks else -1
                if s <= M:
                    fwd = [fwd_best, fwd_k]
                    got = jump.step(s, qpos, n, cur, recent, avail, inflight, have, seen, bucket, max_live, numel, fwd)
                    if got is not None:
                        seen.pop(("plain_cache",), None)  # the window was rewritten: plain_step checks it again
                    elif FORWARD_PLAIN:
                        got = jump.plain_step(s, qpos, n, cur, recent, avail, inflight, have, seen, bucket, max_live,
                                              numel, fwd)
                    if got is not None:
                        skip_to, qpos, n, cur = got
                        if fwd[0] != fwd_best:
                            fwd_best, fwd_k = fwd
                            fwd_where = f"module {names[fwd_k]}'s fetch"
                        # the forward's other checks: none before the landing; with FORWARD_PLAIN, placed again
                        # from the landing layer as from layer 0 (a later regime: max live reached, the front
                        # out of the layers)
                        back = [x for x in itertools.chain((next_check,), checks) if x > M]
                        fore = jump.rearm((skip_to - 1 - jump.h) // jump.mu) if FORWARD_PLAIN and skip_to <= M else []
                        checks = [x for x in fore if x >= skip_to] + back
                        next_check = checks.pop(0) if checks else -1
                        continue
                else:
                    got = jump.back(s, qpos, n, cur, recent, avail, inflight, seen, snap, q_param, fetch_b,
                                    during_b, cb, _BACK_PERIODS_HOOK)
                    if got is not None:
                        skip_to, qpos = got
                        next_check = -1
                        continue
                    if FORWARD_PLAIN:
                        got = jump.plain_back(s, qpos, n, cur, recent, avail, inflight, seen, bucket, max_live, numel,
                                              q_param, fetch_b, during_b, cb)
                        if got is not None:
                            skip_to, qpos, n, cur = got
                            checks = [x for x in jump.rearm_back((2 * M + 2 - jump.h - skip_to) // jump.mu - 1)
                                      if x >= skip_to]
                            next_check = checks.pop(0) if checks else -1
                            continue
            k = trace[s]
            if s == M + 1 and ftail:
                # hooks after the last module's in forward (zero3_container_steps), before the backward's root
                for _ in range(ftail):
                    qpos, n, cur = queue_prefetch(qpos, n, cur)
                if cur > fwd_best:
                    fwd_best, fwd_where = cur, _TAIL_WHERE
            if (forward_only and k > last_lent and k > 0 and (inflight or qpos > mod_start[k])
                    and (bucket <= 0 or max_live - n <= 0) and bounds is not None and qpos <= half
                    and REFETCH_HELD_PASS and not held_tried):
                held_tried = True  # once: a refusal is O(parameters in flight), not to be paid at every step
                got = held_rest(k, cur)
                if got is not None:
                    for pk, where in got[0]:
                        if pk > fwd_best:
                            fwd_best, fwd_where = pk, where
                    cur = got[1]
                    PASSES["refetch_held"] += 1
                    break
            if (forward_only and k > last_lent and k > 0 and not inflight and qpos <= mod_start[k]
                    and (bucket <= 0 or max_live - n <= 0)):
                # the rest of this forward, in one pass (issue 21: ~3/4 of the 9e5 steps of the GA-2 refetch at
                # 1e5 layers): nothing in flight, no prefetch from here on (n only grows: the modules left are
                # persistent, never released), none of their parameters popped or gathered yet (module 0, whose
                # persistent ones the run starts with, excluded), so each is
                # fetched at its own step, all at once: a coalesced all-gather's flat buffer beside its copies
                # (0 bytes: persistent), freed by the wait; one parameter its own buffer (0 bytes), kept.
                # The walk's figures (tests/test_fetch_replay_identity.py)
                tail = [cur + (mp * D if c >= 2 and coalesce else 0)
                        for mp, c in zip(itertools.islice(mod_pad, k, None),
                                         map(len, itertools.islice(members, k, None)))]
                tb = max(tail)
                if tb > fwd_best:
                    fwd_best, fwd_where = tb, f"module {names[k + tail.index(tb)]}'s fetch"
                break
            if has_containers and k >= 0:
                for _ in range(cb[k] if s > M else cf[k]):
                    qpos, n, cur = queue_prefetch(qpos, n, cur)
            peak = cur
            if k >= 0:
                own = member(k)
                need = [i for i in own if i not in avail and i not in inflight]
                if need:
                    n += sum(numel[i] for i in need)
                    cur = all_gather(need, cur)
                    if cur > peak:
                        peak = cur
                if inflight:
                    for i in own:
                        h = inflight.pop(i, None)
                        if h is None:
                            continue
                        if not h[3]:
                            h[3] = True
                            for j, nb in h[1].items():
                                avail[j] = nb
                                cur += nb
                            if cur > peak:
                                peak = cur
                        h[2].discard(i)
                        if not h[2]:
                            cur -= h[0]
                want = 0
                for i in own:
                    if recent[i] < s:
                        want += 1
                end = min(qpos + want, q_len)
                for j in range(qpos, end):
                    recent[q_param[j]] = q_step[j]
                qpos = end
            # the module's own prefetch: the same rule a container's hook runs
            qpos, n, cur = queue_prefetch(qpos, n, cur)
            if cur > peak:
                peak = cur
            if s <= M:  # forward
                if peak > fwd_best:
                    fwd_best, fwd_where = peak, ("the root module's prefetch" if k < 0 else f"module {names[k]}'s fetch")
                    fwd_k = k
                if k < 0:
                    continue
            elif k < 0:
                start = peak
                continue
            else:
                fetch_b[k], during_b[k] = peak, cur
                if k == 0:  # the first module stays gathered through the epilogue
                    continue
            # release (__params_to_release at step_id s + 1; ds_persist kept)
            nx = nxt_use[s]
            if nx >= 0 and prefix[nx] - prefix[s + 1] < reuse:
                continue
            for i in members[k]:
                if keep[i] or i not in avail or recent[i] > s + 1:
                    continue
                cur -= avail.pop(i)
                n -= numel[i]
        if forward_only and ftail:
            for _ in range(ftail):
                qpos, n, cur = queue_prefetch(qpos, n, cur)
            if cur > fwd_best:
                fwd_best, fwd_where = cur, _TAIL_WHERE
        if forward_only:
            return (fwd_best, fwd_where), None, None, cur if M else 0, start
        return (fwd_best, fwd_where), _packed(fetch_b), _packed(during_b), cur if M else 0, start

    if all(keep):
        # every parameter persistent and available from the start: nothing is ever gathered (no fetch, no
        # prefetch takes one), the run's every moment is 0 bytes (its walk, 1.8M steps at 1e5 layers, skipped)
        fwd, fetch_b, during_b, end, start = (0, ""), array.array("q", [0]) * M, array.array("q", [0]) * M, 0, 0
    else:
        fwd, fetch_b, during_b, end, start = run(set(itertools.compress(range(len(tensors)), keep)), False)
    # GA > 1, micro-step 2: the first backward released every persistent parameter but the first module's
    if REFETCH_SAME_START and M and not all(keep) and not any(itertools.compress(mod_of, keep)):
        # every persistent parameter is the first module's (or none is): the refetch starts from the run's state,
        # and its forward is the run's (both walks take the same steps up to the backward, where the refetch stops;
        # the reference walk's run too): its figures, not a second walk (issue 21: the larger half of the replay at
        # generate's 100,000-tensor limit, none persistent)
        refetch = fwd
    else:
        refetch = run({i for i in members[0] if keep[i]}, True)[0] if M else (0, "")
    return Zero3Fetch(mod_of, first_forward, _packed(f_fetch), _packed(f_during), first_end,
                      fwd, fetch_b, during_b, end, start, refetch)


def _zero3_fetch_replay_reference(inv: Inventory, zero, W: int, D: int) -> Zero3Fetch:
    """The straightforward walk :func:`_zero3_fetch_replay` was made fast from (issue 21): kept only so
    a test compares the two on random inventories; the rules are :func:`zero3_fetch_replay`'s."""
    tensors, keep, seq, members, mod_of, names, numel, pad = _zero3_replay_inputs(inv, zero, W)
    M = len(members)

    def gather(idx: list[int]) -> tuple[int, dict[int, int]]:
        # (flat buffer bytes, {param: its data bytes once waited}) of one all-gather of idx
        if len(idx) >= 2 and not seq:
            return sum(pad[i] for i in idx) * D, {i: numel[i] * D for i in idx}
        return 0, {i: pad[i] * D for i in idx}

    # ---- first iteration: one module at a time, every parameter, no prefetch
    f_fetch, f_during = [0] * M, [0] * M
    for k, idx in enumerate(members):
        flat, data = gather(idx)
        f_fetch[k] = flat + sum(data.values())
        f_during[k] = sum(data.values())
    kbest = max(range(M), key=lambda k: (f_fetch[k], -k)) if M else 0
    first_forward = (f_fetch[kbest], f"module {names[kbest]}") if M else (0, "")
    first_end = f_during[0] if M else 0

    # ---- a later iteration: the coordinator over the complete trace
    # trace steps: root (forward), modules, root (backward), modules reversed; numel of each step
    # packed int64 columns (_packed), not lists of int objects: 1.8M steps at 1e5 layers (issue 21)
    trace = _packed(itertools.chain((-1,), range(M), (-1,), range(M - 1, -1, -1)))
    prefix = _packed(itertools.accumulate((0 if k < 0 else sum(numel[i] for i in members[k]) for k in trace),
                                          initial=0))
    # step s -> the next step of its module trace[s] in the trace (-1: none); a list by step, not a
    # dict keyed by (module, step): ~2M tuple keys at 1e5 layers (issue 21)
    nxt_use = array.array("q", [-1]) * len(trace)
    last: dict[int, int] = {}
    for s in range(len(trace) - 1, -1, -1):
        k = trace[s]
        if k >= 0:
            nxt_use[s] = last.get(k, -1)
            last[k] = s
    # the coordinator's queue of (parameter, step) in trace order, consumed front to back only: two
    # packed columns read through a cursor, shared by both runs (a deque of tuples per run before)
    q_param = _packed(i for k in trace if k >= 0 for i in members[k])
    q_step = _packed(s for s, k in enumerate(trace) if k >= 0 for _ in members[k])
    q_len = len(q_param)
    bucket, max_live, reuse = int(zero.prefetch_bucket_size), int(zero.max_live_parameters), int(zero.max_reuse_distance)
    cf, cb, ftail = zero3_container_steps(inv)

    def run(have: set, forward_only: bool) -> tuple:
        # one iteration over the complete trace; ``have``: the parameters available at its start. A
        # persistent parameter's copy is lp_params_gathered (not counted), its all-gather buffer is.
        qpos = 0  # the queue's front: q_param[qpos], q_step[qpos]
        recent = array.array("q", [_NEVER]) * len(tensors)  # param -> the last step it was popped at
        avail: dict[int, int] = {}       # available parameter -> its counted data bytes
        for i in have:
            avail[i] = 0
        inflight: dict[int, list] = {}   # param -> its handle [flat bytes, {param: data bytes}, params left, waited]
        st = {"n": 0, "cur": 0}

        def all_gather(idx: list[int]) -> None:
            if not idx:
                return
            st["n"] += sum(numel[i] for i in idx)
            if len(idx) >= 2 and not seq:
                flat, data = gather(idx)
                h = [flat, {i: (0 if keep[i] else b) for i, b in data.items()}, set(idx), False]
                st["cur"] += flat
                for i in idx:
                    inflight[i] = h
            else:
                for i in idx:  # its own padded buffer, the parameter a view of it
                    nb = 0 if keep[i] else pad[i] * D
                    st["cur"] += nb
                    avail[i] = nb

        def prefetch() -> None:
            # fetch_sub_module l. 453-485: from the queue's front, up to the bucket, in one all-gather
            nonlocal qpos
            limit = min(max_live - st["n"], bucket)
            if bucket > 0 and limit > 0:
                take, taken, got = [], 0, set()
                while qpos < q_len and taken < limit:
                    i, at = q_param[qpos], q_step[qpos]
                    qpos += 1
                    recent[i] = max(recent[i], at)
                    if i not in avail and i not in inflight and i not in got:
                        got.add(i)
                        take.append(i)
                        taken += numel[i]
                all_gather(take)

        def fetch(s: int, k: int, containers: int = 0) -> int:
            nonlocal qpos
            for _ in range(containers):
                prefetch()  # each container's pre-forward / pre-backward hook: only cur grows, so
                # the module's own fetch that follows starts at the largest of these moments
            peak = st["cur"]
            own = members[k] if k >= 0 else []
            all_gather([i for i in own if i not in avail and i not in inflight])
            peak = max(peak, st["cur"])
            for i in own:
                h = inflight.pop(i, None)
                if h is None:
                    continue
                if not h[3]:  # the first wait cats every parameter of the handle out of its flat buffer
                    h[3] = True
                    for j, nb in h[1].items():
                        avail[j] = nb
                        st["cur"] += nb
                    peak = max(peak, st["cur"])
                h[2].discard(i)
                if not h[2]:
                    st["cur"] -= h[0]
            # pop the module's own entries off the queue (fetch_sub_module l. 426-433)
            want = sum(1 for i in own if recent[i] < s)
            popped = 0
            while qpos < q_len and popped < want:
                i, at = q_param[qpos], q_step[qpos]
                qpos += 1
                recent[i] = at
                popped += 1
            prefetch()
            return max(peak, st["cur"])

        def release(s: int, k: int) -> None:
            # __params_to_release at step_id s + 1 (fetch_sub_module incremented it); ds_persist kept
            nx = nxt_use[s]  # k = trace[s]
            if nx >= 0 and prefix[nx] - prefix[s + 1] < reuse:
                return  # used again within the reuse distance: kept
            for i in members[k]:
                if keep[i] or i not in avail or recent[i] > s + 1:
                    continue
                st["cur"] -= avail.pop(i)
                st["n"] -= numel[i]

        fwd_best, fwd_where = 0, ""
        fetch_b, during_b = [0] * M, [0] * M
        start = 0
        for s, k in enumerate(trace):
            if s == M + 1 and ftail:
                for _ in range(ftail):  # hooks after the last module's in forward
                    prefetch()
                if st["cur"] > fwd_best:
                    fwd_best, fwd_where = st["cur"], _TAIL_WHERE
            backward = s > M
            if backward and forward_only:
                break
            p = fetch(s, k, 0 if k < 0 else (cb[k] if backward else cf[k]))
            if not backward:
                if p > fwd_best:
                    fwd_best, fwd_where = p, ("the root module's prefetch" if k < 0 else f"module {names[k]}'s fetch")
                if k >= 0:
                    release(s, k)
            elif k < 0:
                start = p
            else:
                fetch_b[k], during_b[k] = p, st["cur"]
                if k > 0:  # the first module stays gathered through the epilogue
                    release(s, k)
        return (fwd_best, fwd_where), _packed(fetch_b), _packed(during_b), st["cur"] if M else 0, start

    persistent = {i for i in range(len(tensors)) if keep[i]}
    fwd, fetch_b, during_b, end, start = run(persistent, False)
    # GA > 1, micro-step 2: the first backward released every persistent parameter but the first module's
    refetch = run({i for i in persistent if mod_of[i] == 0}, True)[0] if M else (0, "")
    return Zero3Fetch(mod_of, first_forward, _packed(f_fetch), _packed(f_during), first_end,
                      fwd, fetch_b, during_b, end, start, refetch)


def _frozen_modules(inv: Inventory) -> list[int]:
    """Indices (:func:`module_index`) of the modules without a trainable parameter; once per tensor list."""
    def compute() -> list[int]:
        mod_of = module_index(inv)[1]
        trainable = set(itertools.compress(mod_of, map(operator.attrgetter("trainable"), inv.tensors)))
        return [k for k in range(len(module_index(inv)[0])) if k not in trainable]
    return inv.memo(("frozen_modules",), compute)


def hpz_secondary_parts(inv: Inventory, zero, W: int, D: int) -> "list[tuple[bool, bool, int, int, int]]":
    """Per tensor (model order): (persistent, trainable, 16-bit elements, int8 elements, scale bytes) of its ZeRO++
    hpZ secondary partition, h = min(zero_hpz_partition_size, W): A_W(n_i) / h elements (``partition_parameters.py``
    _partition_param_sec l.1912-1915: _aligned_size(param) // num_ranks_in_param_group), int8 with fp32 scales for
    a frozen parameter under zero_quantized_nontrainable_weights (l.1922-1924); empty without hpZ."""
    h = min(zero.zero_hpz_partition_size or 1, W)
    if h <= 1:
        return []
    qnt = bool(zero.zero_quantized_nontrainable_weights)
    out = []
    for t, keep in zip(inv.tensors, zero3_persistent(inv, zero)):
        s_i = _ceil_div(t.numel, W) * W // h
        g = quant_groups(s_i) if qnt and not t.trainable else None
        tr = bool(t.trainable)
        out.append((bool(keep), tr, s_i, 0, 0) if g is None else (bool(keep), tr, 0, s_i, g * QUANT_SCALE_BYTES))
    return out


def hpz_forward_releases(inv: Inventory, zero) -> bool:
    """Whether a later forward may release a non-persistent parameter under hpZ (making its secondary partition
    again then): only where the reuse window, stage3_max_reuse_distance elements of the trace ahead, can end
    before the parameter's backward use, at most 2 N elements ahead (``partitioned_param_coordinator.py``
    __params_to_release l.653-662); else each is released after its backward."""
    return 2 * inv.numel > int(zero.max_reuse_distance)


def zero3_backward_fetch(ec: EffectiveConfig, inv: Inventory, W: int, fetch: Zero3Fetch,
                         first: bool) -> "tuple[int, str, tuple[int, int, int]]":
    """(bytes, where, (start, body, end) bytes) that ZeRO-3's gathered parameters add to a backward
    instant beyond :func:`zero3_reduce_flush_bytes`: backward's worst moment of (gathered
    parameters + the reduce's flush or arriving gradients) less the reduce's own worst moment, per
    region (start, layers, end) as that entry's regions, so the two entries together are the
    largest sum at one moment, not the sum of two maxima at different moments.

    The moments, in :func:`zero3_backward_grad_order`: each module's fetch (its all-gather buffers
    and the parameters it makes available, :class:`Zero3Fetch` ``fetch``, beside the bucket's
    gradients held whole), each gradient's arrival or flush with what is gathered while its
    module's backward runs (``during``), the epilogue's flush with the first module still gathered
    (``end``); also the backward root's prefetch (``start``) and the fetches of modules without a
    trainable parameter (no arrival of theirs). ``first``: the first iteration's figures (every
    parameter of one module at a time), else a later iteration's. Where the flush is not modelled
    (:func:`zero3_reduce_flush_bytes` is None), the largest gathered moment, without regions.

    hpZ where no forward releases a parameter (:func:`hpz_forward_releases` false), a later backward: the
    non-persistent parameters' secondary partitions (freed by the step, ``stage3.py`` l.2846) are made again as
    each module is released after its backward (``partition_parameters.py`` _partition l.1768-1769), so each
    moment of module m holds those of the modules after it in forward, the epilogue all but the first's."""
    mod_of = fetch.mod_of
    at_fetch, during, end = ((fetch.first_fetch, fetch.first_during, fetch.first_end) if first
                             else (fetch.fetch, fetch.during, fetch.end))
    start = 0 if first else fetch.start
    z = ec.zero
    D0 = DTYPE_BYTES[ec.model_dtype]
    hpz_key: tuple = ()
    if not first and not hpz_forward_releases(inv, z):
        parts = hpz_secondary_parts(inv, z, W, D0)
        if parts and not all(p[0] or not p[1] for p in parts):
            M = len(at_fetch)
            per_mod = [0] * M
            for m, (keep, tr, n16, n8, sc) in zip(mod_of, parts):
                if tr and not keep:  # a frozen parameter's is never freed (lp_param_secondary_frozen)
                    per_mod[m] += n16 * D0 + n8 + sc
            after = list(itertools.accumulate(reversed(per_mod), initial=0))[::-1][1:]  # modules k > m
            at_fetch = [a + x for a, x in zip(at_fetch, after)]
            during = [a + x for a, x in zip(during, after)]
            end = end + (after[0] if M else 0)
            hpz_key = ("hpz", min(z.zero_hpz_partition_size, W))
    pure = zero3_reduce_flush_bytes(ec, inv, W)
    frozen = max(map(at_fetch.__getitem__, _frozen_modules(inv)), default=0)
    if pure is None:
        v = max(max(at_fetch, default=0), start, end, frozen)
        return v, f"the largest gathered moment of backward, {v:,} B", ()
    C, D, G = _zero3_flush_dtypes(ec)
    pf = zero3_predivide_factor(ec)
    norm = ec.offload_optimizer_effective != "none"
    key = ("zero3_backward_fetch", first, W, C, D, G, pf, int(z.reduce_bucket_size), bool(z.contiguous_gradients),
           bool(z.reduce_scatter), norm, z.param_persistence_threshold, z.model_persistence_threshold,
           int(z.prefetch_bucket_size), int(z.max_live_parameters), int(z.max_reuse_distance),
           bool(getattr(z, "allgather_sequential", False)), bool(z.memory_efficient_linear)) + hpz_key
    tails = zero3_flush_grad_tails(ec, inv, W)
    if tails:
        key += (z.sub_group_size, swap_threshold_bytes(ec), aio_alignment_elems(ec, 4))
    joint = inv.memo(key, lambda: _zero3_reduce_flush_bytes(
        inv, W, C, int(z.reduce_bucket_size), bool(z.contiguous_gradients), bool(z.reduce_scatter), norm,
        (mod_of, at_fetch, during, end), linear=bool(z.memory_efficient_linear), tails=tails, D=D, G=G,
        predivide=pf))
    jb, jwhere, jreg = joint if joint is not None else (0, "", (0, 0, 0))
    jreg = list(jreg)
    # moments the gradient walk does not pass: the root's prefetch, modules without a trainable parameter
    jreg[0] = max(jreg[0], start)
    if frozen:
        jreg[1] = max(jreg[1], frozen)
    reg = tuple(max(0, j - f) for j, f in zip(jreg, pure[2]))
    excess = max(0, max(jreg) - pure[0])
    return excess, jwhere, reg


#: Sources and words of the ZeRO-3 gathered-parameter entries (the replayed fetch's and the first iteration's)
_Z3_COORD = "runtime/zero/partitioned_param_coordinator.py"
_Z3_GATHER = ("runtime/zero/partition_parameters.py:_all_gather_dtype (flat buffer, l. 1343) / "
              "AllGatherCoalescedHandle.wait (torch.cat of each parameter, l. 795) / _all_gather_sequential "
              "(one parameter: its padded buffer, l. 1379)")
_Z3_PER = ("module m's all-gather: >= 2 params: flat sum ceil(n_i/W) x W x D beside the torch.cat copies sum n_i x D; "
           "1 param: ceil(n/W) x W x D")


def _zero3_fetch_entries(b, ec: EffectiveConfig, inv: Inventory, W: int, D: int, fetch: Zero3Fetch,
                         ga: int = 1) -> None:
    """The ZeRO-3 gathered-parameter entries of a replayed fetch (:func:`zero3_fetch_replay`): the
    first iteration's forward and backward, a later iteration's forward and backward."""
    _zero3_first_iteration_entries(b, ec, inv, W, fetch)
    _zero3_steady_fetch_entries(b, ec, inv, W, D, fetch, ga)


def _zero3_first_iteration_entries(b, ec: EffectiveConfig, inv: Inventory, W: int, fetch: Zero3Fetch) -> None:
    """The first iteration's ZeRO-3 gathered-parameter entries of a replay (:func:`zero3_fetch_replay`):
    one module at a time, every parameter, no prefetch (incomplete trace)."""
    coord, gather, per = _Z3_COORD, _Z3_GATHER, _Z3_PER
    b.add("accelerator", "workspace", "zero3_first_fetch", fetch.first_forward[0], "first_forward",
          f"max over modules m of {per} (first forward: one module at a time, every parameter) = "
          f"{fetch.first_forward[0]} ({fetch.first_forward[1]}); stands for lp_params_gathered at forward:1",
          f"{gather}; {coord}:release_sub_module (incomplete trace: every param of the module released after its "
          "forward, persistent ones too; no prefetch)")
    fb = zero3_backward_fetch(ec, inv, W, fetch, first=True)
    b.add("accelerator", "parameters", "zero3_first_backward_gathered", fb[0], "first_backward",
          f"first backward, each module fetched again ({per}) and released after its backward, the first in "
          f"forward only after the epilogue: max over backward's moments of (gathered + the reduce's flush or "
          f"arriving gradients) - zero3_reduce_flush = {fb[0]} ({fb[1]}); stands for lp_params_gathered there",
          f"{gather}; {coord}:release_sub_module (incomplete trace) / release_backward_leftovers",
          regions=fb[2])


def _zero3_steady_fetch_entries(b, ec: EffectiveConfig, inv: Inventory, W: int, D: int, fetch: Zero3Fetch,
                                ga: int) -> None:
    """A replay's entries after the first iteration (the coordinator over the complete trace)."""
    coord, gather = _Z3_COORD, _Z3_GATHER
    b.add("accelerator", "workspace", "zero3_gathered_params", fetch.forward[0], "steady_forward",
          f"later forwards, the coordinator replayed over the complete trace (prefetch while the numel taken < "
          f"min(stage3_max_live_parameters - available, stage3_prefetch_bucket_size), release unless used again "
          f"within stage3_max_reuse_distance): max over forward's moments of the gathered non-persistent params "
          f"(torch.cat copies n_i x D or one param's padded buffer) + the all-gather flat buffers not yet consumed "
          f"= {fetch.forward[0]} (at {fetch.forward[1]})",
          f"{gather}; {coord}:fetch_sub_module (prefetch l. 436-470) / __params_to_release / __release_param")
    if ga > 1 and fetch.refetch[0] > fetch.forward[0]:
        # tests/engine/test_peak_parity.py z3_bf16_tbsga2_w2 / tbsga3: the persistent parameters' prefetch buffer
        rb = fetch.refetch[0] - fetch.forward[0]
        b.add("accelerator", "workspace", "zero3_refetch_prefetch", rb, "refetch_forward",
              f"GA > 1, micro-step 2's forward (no optimizer step, no _post_step, since the first backward, which "
              f"released every persistent parameter but the first module's): the same replay with those fetched "
              f"again, their all-gather buffers counted (their copies are lp_params_gathered) = {fetch.refetch[0]} "
              f"(at {fetch.refetch[1]}) - zero3_gathered_params {fetch.forward[0]} = {rb}",
              f"{gather}; {coord}:fetch_sub_module (prefetch l. 436-470) / release_backward_leftovers "
              "(persistent parameters kept)")
    bg = zero3_backward_fetch(ec, inv, W, fetch, first=False)
    b.add("accelerator", "workspace", "zero3_gathered_params_backward", bg[0], "steady_backward",
          f"later backwards, the same replay (each module released after its backward, the first in forward after "
          f"the epilogue): max over backward's moments of (gathered + the reduce's flush or arriving gradients) - "
          f"zero3_reduce_flush = {bg[0]} ({bg[1]})",
          f"{gather}; {coord}:fetch_sub_module / release_sub_module / release_backward_leftovers",
          regions=bg[2])


def swap_threshold_bytes(ec: EffectiveConfig) -> int:
    """A tensor is swapped to NVMe iff its bytes >= max(1 MiB, ``aio.block_size``) (§5.1;
    ``swap_tensor/utils.py`` swappable_tensor, MIN_AIO_BYTES; ``stage3.py``
    _swappable_optimizer_subgroup for sub-groups, ``optimizer_utils.py`` is_swappable_tensor)."""
    return max(MIN_AIO_BYTES, ec.aio.block_size)


def aio_alignment_elems(ec: EffectiveConfig, elem_bytes: int) -> int:
    """Swap alignment k in elements: 1024 B x ``aio.intra_op_parallelism`` / element bytes (§5.1;
    ``optimizer_utils.py`` _io_aligned_numel, ``partitioned_param_swapper.py`` numel_alignment:
    AIO_ALIGNED_BYTES x intra_op_parallelism). Swap files and swap buffers are padded to A_k."""
    return AIO_ALIGNED_BYTES * max(1, ec.aio.intra_op_parallelism) // elem_bytes


def zero3_grad_swap_bytes(r_i: int, min_bytes: int, k: int) -> tuple[int, int]:
    """(bytes written to NVMe, bytes kept on the accelerator) for one parameter's fp32 gradient
    piece of r_i real elements in a swappable sub-group (§5.4; ``optimizer_utils.py``
    _swap_out_gradients, _adjust_for_misaligned_lengths): a piece below ``min_bytes`` stays whole;
    otherwise its aligned part floor(r_i / k) x k is written if that is itself >= ``min_bytes``
    and the unaligned tail (a view that keeps the whole r_i x 4 copy alive until the step)
    stays."""
    b = r_i * 4
    if b < min_bytes:
        return 0, b
    whole = r_i // k * k
    if whole * 4 < min_bytes:
        return 0, b
    return whole * 4, (b if whole != r_i else 0)


def ipg_bucket_bytes(ec: EffectiveConfig) -> tuple[int, str, str] | None:
    """(bytes, formula in words, lifetime) of the gradient reduce (ipg) bucket(s), or None when
    DeepSpeed allocates none.

    ZeRO-1/2 (§4.2; ``stage_1_and_2.py`` DeepSpeedZeroOptimizer.setup_buckets): RBS x B x
    (1 + overlap_comm), allocated at full size on every backward when ``contiguous_gradients``
    or the optimizer is offloaded and released at the end of it (``_release_ipg_buffers`` from
    ``independent_gradient_partition_epilogue``: lifetime ``in_backward``, not in the step); B = model dtype bytes,
    at stage 1 with a grad_accum_dtype unlike the model's that dtype's (4 for fp32, 2 for a 16-bit one);
    none under BF16_Optimizer (:func:`select_optimizer`). ZeRO-3 (§4.4; ``stage3.py``
    DeepSpeedZeroOptimizer_Stage3.__init__, ipg_buckets[dtype].buffer): RBS x C (comm dtype) when
    ``contiguous_gradients``, allocated at initialize and kept. RBS is elements."""
    z = ec.zero
    if z.stage in (1, 2):
        wrapper, _ = select_optimizer(ec)
        if wrapper == "BF16_Optimizer":
            return None
        if not ec.contiguous_gradients_effective:  # forced on under optimizer offload (l.299-300)
            return None
        # at stage 1 with a grad_accum_dtype unlike the model's the buckets take that dtype
        # (use_grad_accum_attribute l.397-404 -> _gradient_reduction_buffer_dtype l.1253-1254): 4 for fp32, 2 for
        # a 16-bit one on an fp32 model (engine probe, TINY W 2 GA 2, fp32 + bf16 under CPU offload: setup_buckets
        # l.3266 allocated 20,000 B at reduce_bucket_size 10,000, not 40,000)
        B = (DTYPE_BYTES[ec.grad_dtype] if (z.stage == 1 and ec.grad_dtype != ec.model_dtype)
             else DTYPE_BYTES[ec.model_dtype])
        mult = 2 if z.overlap_comm else 1
        return (z.reduce_bucket_size * B * mult,
                f"reduce_bucket_size x B x (1 + overlap_comm) = {z.reduce_bucket_size:,} elements x {B} bytes x "
                f"{mult} (allocated at full size each backward, released by the backward epilogue "
                "_release_ipg_buffers)", "in_backward")
    if z.stage == 3 and z.contiguous_gradients:
        C = DTYPE_BYTES[ec.comm_dtype]
        return (z.reduce_bucket_size * C,
                f"reduce_bucket_size x C = {z.reduce_bucket_size:,} elements x {C} bytes (allocated at initialize, "
                "kept)",
                "persistent")
    return None


def bf16_optimizer_epilogue_terms(ec: EffectiveConfig, layouts: list[Zero12Layout],
                                   inv: Inventory | None = None) -> tuple[int, int]:
    """(H, F) in bytes: the two moments of BF16_Optimizer's gradient epilogue (``runtime/bf16_optimizer.py``,
    the wrapper :func:`select_optimizer` picks for ZeRO-1 + bf16 + ``grad_accum_dtype`` fp32), each beside
    every 16-bit param.grad (``lp_grads``, N x D), nothing else transient.

    H: every micro-step's ``backward_epilogue`` (l.503-505, called by ``engine.py`` _backward_epilogue
    l.3159-3161 before any all-reduce) runs ``update_hp_grads`` (l.532-538), which adds each gradient into
    the fp32 flat buffer through ``lp.grad.data.to(hp_grad.dtype)`` (l.523): one copy of n_i x G at a time,
    so H = max_i n_i x G (G = the grad_accum_dtype's bytes), 0 when G = D (``.to`` returns the tensor).

    F: at the accumulation boundary ``allreduce_gradients`` (stage 1 without ``reduce_gradients``:
    ``engine.py`` l.3088-3095) calls ``buffered_allreduce_fallback`` (l.3921), which takes
    ``get_grads_for_reduction`` = one fp32 flat buffer of N_pad,g elements per param group (l.191, l.541-545)
    and ``allreduce_no_retain`` (l.3828-3839) puts them in buckets, flushing as soon as a bucket's numel exceeds
    MEMORY_OPT_ALLREDUCE_SIZE (5e8 elements; ``allreduce_gradients(bucket_size=...)`` l.3073). A flush's
    ``allreduce_bucket`` (l.3795-3821) flattens it (a copy, sum x G, for more than one buffer; a view of a single
    one: torch ``flatten_dense_tensors``) and casts that to ``communication_data_type`` when it differs
    (l.3800-3801: sum x C; bf16 by default with bf16 on, ``engine.py`` communication_data_type l.1719-1730),
    both live through the all-reduce. F = the largest flush's bytes.

    With ``bf16.immediate_grad_update`` (``inv`` given) the add runs in each parameter's post-accumulate hook,
    which then frees param.grad (accumulate_hp_grads_and_remove_lp l.707-715; hooks l.717-727,
    ``utils/torch.py`` register_grad_hook): H = max_p ((n_p + s_p) x D + n_p x G), the parameter's gradient, the
    one its autograd node made with it and not yet accumulated (s_p, :func:`autograd_siblings`) and its copy, with
    no other 16-bit gradient alive; the epilogue adds nothing (update_hp_grads l.532-534, returning at l.533).

    Measured on the engine (tests/engine/test_peak_parity.py z1_bf16_gaccfp32_tbsga2_w2, TINY at W = 2:
    H = 23,177 x 4 = 92,708 B was every backward's +92,736 B residual with the coarse lifetimes; with
    immediate_grad_update, probe runs at GA 2 and with real Linears, 2026-12-06: backward 484,794 B, the persistent
    345,696 B + l2.weight's 46,354 + 92,708 B + 36 B of scalars; the cell z1_bf16_gaccfp32_igu_tbsga2_w2)."""
    D = DTYPE_BYTES[ec.model_dtype]
    G = DTYPE_BYTES[ec.grad_dtype]
    # casts are decided by dtype, as DeepSpeed decides them (``.to`` of another dtype copies; bf16 and fp16 are both
    # 2 B): the hp add's ``lp.grad.data.to(hp_grad.dtype)`` (l.523) and allreduce_bucket's ``if
    # self.communication_data_type != tensor.dtype`` (``engine.py`` l.3800-3801, on the G-dtype flat buffer).
    # select_optimizer takes this wrapper only with grad_accum_dtype fp32 (engine.py l.2305-2310), the one 4-byte
    # dtype, so the byte comparison this replaced gave the same figures on every plan the ledger builds
    cp = G if ec.grad_dtype != ec.model_dtype else 0
    C = zero12_comm_cast_bytes(ec, ec.grad_dtype)
    if inv is not None and ec.bf16_immediate_grad_update:
        H = max((((t.numel + s) * D + t.numel * cp) for t, s in zip(inv.tensors, autograd_siblings(inv))
                 if t.trainable), default=0)
    else:
        H = max((lay.largest for lay in layouts), default=0) * cp
    F = cur = count = 0

    def flush(total: int, k: int) -> int:
        return (total * G if k > 1 else 0) + total * C
    for lay in layouts:
        cur += lay.n_pad
        count += 1
        if cur > MEMORY_OPT_ALLREDUCE_SIZE:
            F, cur, count = max(F, flush(cur, count)), 0, 0
    if count:
        F = max(F, flush(cur, count))
    return H, F


def select_optimizer(ec: EffectiveConfig, pipeline_parallel: int = 1) -> tuple[str, str]:
    """(wrapper, basic optimizer) DeepSpeed 0.19.8 builds for ``ec`` (§2) on a model of
    ``pipeline_parallel`` stages (the plan's ``Cluster.pipeline_parallel``; :func:`plan_optimizer` passes it).

    No optimizer section: the client optimizer ``ec.optimizer.client`` where the plan knows it (the HF Trainer's
    torch.optim.AdamW, :func:`advisor.config.hf.trainer_optimizer`; DeepSpeed keeps a client optimizer as the basic
    one, ``engine.py`` _configure_optimizer l.2334-2337), else a client Adam assumed -> FusedAdam (with neither a
    section nor a client optimizer DeepSpeed builds no optimizer at all, ``engine.py`` l.653-689: not a training
    plan, so the script is taken to pass one).
    Basic (``engine.py`` ``_configure_basic_optimizer``): ``torch_adam`` -> torch.optim.AdamW
    (Adam when ``adam_w_mode: false``); else ``offload_optimizer.device`` cpu or nvme as written,
    at any stage (``engine.zero_use_cpu_optimizer``) -> DeepSpeedCPUAdam; else FusedAdam.
    Adagrad -> DeepSpeedCPUAdagrad with that offload, else torch.optim.Adagrad; Lion ->
    DeepSpeedCPULion, else FusedLion.
    Wrapper (``engine._configure_optimizer`` / ``_do_optimizer_sanity_check``): stage 3 ->
    DeepSpeedZeroOptimizer_Stage3; stage 1 + bf16 + fp32 grad accumulation without
    ``device: cpu`` -> BF16_Optimizer; stages 1/2 -> DeepSpeedZeroOptimizer; stage 0 16-bit ->
    FP16_Optimizer (FusedAdam) or FP16_UnfusedOptimizer (any other basic optimizer, a client's too:
    ``_configure_fp16_optimizer`` l.2560-2564 ``use_fused_optimizer = isinstance(optimizer, FusedAdam)``);
    stage 0 fp32 -> none.

    Pipeline parallelism (``engine.py`` l.582: ``self.pipeline_parallelism = isinstance(model, PipelineModule)``)
    changes one branch: at stage 0 a bf16 model accumulating in bf16 (grad_accum_dtype unset or bf16,
    ``get_data_types`` l.1806-1809) takes BF16_Optimizer with ``grad_acc_dtype`` bf16 (l.2316-2320 ->
    ``_configure_bf16_optimizer`` l.2363-2364, l.2611-2629), not FP16_Optimizer on bf16 (DDP_BFLOAT16, l.2321 ->
    ``_configure_fp16_optimizer`` l.2360-2362). At ZeRO-1/2 the choice (l.2305-2311) does not read it; an fp32 model
    and fp16 take the same wrappers with or without it; a stage-0 dtype mix raises either way (l.2322-2323);
    ZeRO-2/3 under a PipelineModule are refused (``pipe/engine.py`` l.76-77, rule G001).
    DeepSpeed asks for a PipelineModule, not for more than one stage: the plan says one by ``pipeline_parallel``
    > 1 (a PipelineModule of one stage is not a plan ds-advisor builds).
    """
    o = ec.optimizer
    written = ec.zero.offload_optimizer.device
    fam = o.family
    if fam == "none" and o.client:
        basic = o.client  # the client's torch optimizer (the HF Trainer's AdamW: EffectiveConfig.optimizer.client)
    elif fam in ("adam", "adamw", "none"):
        if o.torch_adam:
            basic = "AdamW" if (fam != "adam" or o.adam_w_mode) else "Adam"
        elif written in ("cpu", "nvme"):
            basic = "DeepSpeedCPUAdam"
        else:
            basic = "FusedAdam"
    elif fam == "adagrad":
        basic = "DeepSpeedCPUAdagrad" if written in ("cpu", "nvme") else "Adagrad"
    elif fam == "lion":
        basic = "DeepSpeedCPULion" if written in ("cpu", "nvme") else "FusedLion"
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
    elif ec.bf16_enabled and ec.grad_dtype == "bf16" and pipeline_parallel > 1:
        wrapper = "BF16_Optimizer"
    else:
        wrapper = "FP16_Optimizer" if basic == "FusedAdam" else "FP16_UnfusedOptimizer"
    return wrapper, basic


def plan_optimizer(plan: Plan) -> tuple[str, str]:
    """:func:`select_optimizer` of ``plan``: its config on its pipeline degree (the one place a plan's
    wrapper is chosen; the ledger, placement and checkpoint files read it)."""
    return select_optimizer(plan.config, plan.cluster.pipeline_parallel)


def unsupported_reason(ec: EffectiveConfig, dp_world_size: int | None = None) -> str | None:
    """Why DeepSpeed 0.19.8 refuses this combination at ``initialize()``, or None.

    Found by running the engine (tests/engine) and reading the source; each reason names it.
    """
    if ec.fp16_enabled and ec.bf16_enabled:
        return "fp16 and bf16 cannot both be enabled (runtime/config.py: DeepSpeedConfig._do_error_check)"
    if ec.zero.stage == 0 and ec.bf16_enabled and ec.grad_dtype == "fp32":
        return ("bf16 with grad_accum_dtype fp32 at stage 0: NotImplementedError 'unsupported mix' "
                "(engine.py: _do_optimizer_sanity_check l.2322-2323, with or without pipeline parallelism; "
                "BF16_Optimizer with fp32 accumulation needs ZeRO-1)")
    if ec.zero.stage == 3:
        r = ec.zero.offload_optimizer.ratio
        if ec.offload_optimizer_effective != "none" and r is not None and r != 1.0 \
                and select_optimizer(ec)[1] != "DeepSpeedCPUAdam":
            return (f"offload_optimizer.ratio {r:g} (partial offload) with {select_optimizer(ec)[1]}: "
                    "'Hybrid Optimizer Only Supports DeepSpeedCPUAdam' (runtime/zero/stage3.py l.316)")
        for what, off in (("offload_optimizer", ec.zero.offload_optimizer), ("offload_param", ec.zero.offload_param)):
            if off.device == "nvme" and not off.nvme_path:
                return f"{what}.device nvme without nvme_path: the swapper fails (swap_tensor: os.path.join(None, ...))"
    return None


class _Builder:
    def __init__(self, rank: int):
        self.rank = rank
        self.entries: list[Entry] = []

    def add(self, tier: str, cls: str, item: str, nbytes: int, life: str, formula: str, source: str,
            alias_of: str = "", regions: tuple = ()) -> None:
        self.entries.append(Entry(self.rank, tier, cls, item, int(nbytes), life, formula, source, alias_of,
                                  regions))


def _host(pin: bool) -> str:
    return "host_pinned" if pin else "host_pageable"


def _opt_src(basic: str) -> str:
    """Where the basic optimizer creates its state (file:function)."""
    fact = _OPTIMIZER_STATES.get(basic)
    return fact[2] if fact else "engine.py:DeepSpeedEngine._configure_basic_optimizer"


@dataclass(frozen=True)
class OptimizerStates:
    """What the basic optimizer keeps per optimized tensor (the one place this fact lives; the
    ledger, the checkpoint files, the NVMe movements and rule O006 read it).

    ``items``: the fp32 state tensors, each as large as the optimized (fp32 master) tensor,
    named by the optimizer's own state keys (also the NVMe swap-file prefixes,
    ``swap_tensor/optimizer_utils.py`` ``{key}-{ids}.tensor.swp``); ``step_bytes``: bytes of the
    ``step`` entry per optimized tensor (0 for a python int); ``known``: False when the
    optimizer is not one DeepSpeed builds itself and the state is assumed Adam-like."""

    basic: str
    items: tuple[str, ...]
    step_bytes: int
    source: str
    known: bool = True


#: basic optimizer -> (state keys, step bytes, source). Measured by tests/engine (parity cells
#: *-adagrad, *-torch_adam) against the installed 0.19.8 / torch 2.13.
_OPTIMIZER_STATES: dict[str, tuple[tuple[str, ...], int, str]] = {
    "FusedAdam": (("exp_avg", "exp_avg_sq"), 0, "ops/adam/fused_adam.py:FusedAdam.step"),
    "DeepSpeedCPUAdam": (("exp_avg", "exp_avg_sq"), 0, "ops/adam/cpu_adam.py:DeepSpeedCPUAdam.step"),
    "AdamW": (("exp_avg", "exp_avg_sq"), 4, "torch/optim/adamw.py:AdamW._init_group (0-dim fp32 step tensor)"),
    "Adam": (("exp_avg", "exp_avg_sq"), 4, "torch/optim/adam.py:Adam._init_group (0-dim fp32 step tensor)"),
    "Adagrad": (("sum",), 4, "torch/optim/adagrad.py:Adagrad.__init__ (state 'sum' full_like(param), "
                "0-dim fp32 step tensor, made at construction)"),
    "DeepSpeedCPUAdagrad": (("exp_avg_sq",), 0, "ops/adagrad/cpu_adagrad.py:DeepSpeedCPUAdagrad.step "
                            "(state 'exp_avg_sq' zeros_like(param) on cpu)"),
    "FusedLion": (("exp_avg",), 0, "ops/lion/fused_lion.py:FusedLion.step"),
    "DeepSpeedCPULion": (("exp_avg",), 0, "ops/lion/cpu_lion.py:DeepSpeedCPULion.step"),
}


def optimizer_states(ec: EffectiveConfig) -> OptimizerStates:
    """The :class:`OptimizerStates` of the basic optimizer DeepSpeed 0.19.8 builds for ``ec``
    (:func:`select_optimizer`). Adam/AdamW: exp_avg and exp_avg_sq; Adagrad: ONE tensor
    (torch's 'sum', DeepSpeedCPUAdagrad's 'exp_avg_sq'); Lion: exp_avg. Any other optimizer:
    assumed Adam-like (``known`` False)."""
    basic = select_optimizer(ec)[1]
    fact = _OPTIMIZER_STATES.get(basic)
    if fact is None:
        return OptimizerStates(basic, ("exp_avg", "exp_avg_sq"), 0,
                               "engine.py:DeepSpeedEngine._configure_basic_optimizer (assumed Adam-like)", False)
    return OptimizerStates(basic, *fact)


def _moment_items(ec: EffectiveConfig) -> tuple[str, ...]:
    return optimizer_states(ec).items


def accumulate_grad_new_elements(inv: Inventory) -> int:
    """Elements of the largest new gradient a later micro-step's backward makes beside the param.grad kept from
    the earlier ones: max over trainable tensors p of n_p + s_p (s_p: the gradient its autograd node made with it,
    still whole, :func:`autograd_siblings`). Multiply by the gradient's bytes per element.

    Source: torch ``torch/csrc/autograd/functions/accumulate_grad.h`` accumulateGrad: when ``variable.grad`` is
    defined and cannot be stolen, ``variable_grad += new_grad`` in place, ``new_grad`` made first by the node; the
    kept gradient's existence is the wrapper's (ZeRO-1: ``engine.py`` allreduce_gradients l.3088-3092; stage 0:
    zero_grad only at the boundary, ``engine.py`` _take_model_step l.3522-3532; BF16_Optimizer: clear_lp_grads
    zeroes in place, ``bf16_optimizer.py`` l.612-623). Memoised per tensor list (issue 21)."""
    return inv.memo(("zero1_new_grad_max",), lambda: max(
        (t.numel + s for t, s in zip(inv.tensors, autograd_siblings(inv)) if t.trainable), default=0))


def _add_accumulate_grad_new(b: _Builder, inv: Inventory, D: int, kept_src: str) -> None:
    """The ``accumulate_grad_new`` entry (:func:`accumulate_grad_new_elements` x ``D`` bytes, each backward of a
    micro-step after an iteration's first); ``kept_src`` cites why param.grad still exists there."""
    new_max = accumulate_grad_new_elements(inv)
    b.add("accelerator", "gradients", "accumulate_grad_new", new_max * D, "accumulated_backward",
          f"max_p (n_p + s_p) x D = {new_max} x {D}: a micro-step's new gradient (and the one its "
          "autograd node made with it, state.autograd_siblings) whole while torch adds it into the "
          "param.grad kept from the earlier micro-steps",
          "torch/csrc/autograd/functions/accumulate_grad.h accumulateGrad (variable_grad += new_grad); " + kept_src)


def _stage0(b: _Builder, ec: EffectiveConfig, inv: Inventory, wrapper: str, basic: str, ga: int = 1) -> None:
    D = DTYPE_BYTES[ec.model_dtype]

    def sums() -> tuple[int, int, int]:
        # (N, trainable tensors, largest all-reduce bucket): once per tensor list, not per plan (issue 21).
        # The boundary all-reduce flattens the grads bucket by bucket: a bucket takes tensors (module
        # order) until its numel exceeds MEMORY_OPT_ALLREDUCE_SIZE = 5e8 elements (found by the peak
        # tracker: the census never sees this copy, it is freed before backward returns). A bucket of
        # one tensor makes no copy: allreduce_bucket's self.flatten (engine.py l.3796, torch
        # _flatten_dense_tensors) returns a single tensor's own storage viewed flat (torch/csrc/utils/
        # tensor_flatten.h flatten_dense_tensors: tensors.size() == 1 -> t.contiguous().view(-1)); measured
        # (issue 15, --params 1,000,000: one 1e6-element tensor, z0 fp32 W = 2): the ledger's backward was
        # N x 4 over the engine's (-33.3%), and its peak in backward where the engine's is in the step
        groups = inv.groups()
        big = cur = count = 0
        for g in groups:
            for t in g:
                cur += t.numel
                count += 1
                if cur > MEMORY_OPT_ALLREDUCE_SIZE:
                    big, cur, count = max(big, cur if count > 1 else 0), 0, 0
        big = max(big, cur if count > 1 else 0)
        return sum(t.numel for g in groups for t in g), sum(len(g) for g in groups), big
    N, ntensors, big = inv.memo(("stage0_sums",), sums)
    src_s = "runtime/fp16/fused_optimizer.py:FP16_Optimizer.__init__" if wrapper == "FP16_Optimizer" else \
        "runtime/fp16/unfused_optimizer.py:FP16_UnfusedOptimizer.__init__"
    b.add("accelerator", "parameters", "lp_params_flat", N * D, "persistent",
          f"N x D = {N} x {D}" + (" (one flat tensor per group, no padding)" if wrapper == "FP16_Optimizer" else ""),
          "engine.py:DeepSpeedEngine._configure_distributed_model" if ec.model_dtype == "fp32" else src_s)
    if ec.model_dtype != "fp32":
        b.add("accelerator", "master_weights", "fp32_master", N * 4, "persistent", f"N x 4 = {N} x 4", src_s)
    for m in _moment_items(ec):
        b.add("accelerator", "optimizer_states", m, N * 4, "persistent",
              f"N x 4 = {N} x 4 (fp32 moments; created at init by the wrapper's dummy step for 16-bit)",
              _opt_src(basic) + " (state zeros_like(param))")
    if wrapper == "FP16_UnfusedOptimizer" and basic == "Adagrad":
        # torch.optim.Adagrad makes its state at construction, for the 16-bit params it is given;
        # the wrapper then rebinds param_groups to fp32 copies, whose state the dummy step adds:
        # the 16-bit params' state stays in optimizer.state (measured, parity cell z0-bf16-adagrad)
        b.add("accelerator", "optimizer_states", "sum", N * D, "persistent",
              f"N x D = {N} x {D} (state of the 16-bit params, kept after the wrapper swaps in fp32 copies)",
              "runtime/fp16/unfused_optimizer.py:FP16_UnfusedOptimizer.__init__; torch/optim/adagrad.py:Adagrad.__init__")
        b.add("host_pageable", "optimizer_states", "step", 4 * ntensors, "persistent",
              f"4 B x {ntensors} step tensors of the 16-bit params (kept, as above)",
              "torch/optim/adagrad.py:Adagrad.__init__")
    step_b = optimizer_states(ec).step_bytes * ntensors if optimizer_states(ec).step_bytes else 0
    b.add(step_tier(ec, basic), "optimizer_states", "step", step_b, "persistent",
          f"4 B x {ntensors} param tensors (torch Adam keeps a 0-dim fp32 step: step_tier)" if step_b else
          "0 (step is a python int)", _opt_src(basic))
    gD = 4 if ec.model_dtype == "fp32" else D
    b.add("accelerator", "gradients", "lp_grads", N * gD, "backward", f"N x D = {N} x {gD} (param.grad)",
          "engine.py:DeepSpeedEngine.backward (param.grad from autograd)")
    if ga > 1:
        # no zero_grad before the accumulation boundary: the engine zeroes only in _take_model_step (engine.py
        # l.3529-3530, optimizer.zero_grad -> fused_optimizer.py zero_grad l.137 / unfused_optimizer.py zero_grad
        # l.110, set_to_none; without a wrapper, plain fp32 with the basic optimizer itself (engine.py
        # _do_optimizer_sanity_check l.2313-2315 returns no wrapper, _configure_optimizer l.2366), its own zero_grad,
        # l.3531-3532 -> l.3495-3500, param.grad = None: engine z0_fp32_tbsga2_w2, forward:2 / forward:4 +172,836 B =
        # N x 4 at engine.py backward:3428 without this, 2026-12-07), so micro-step 1's param.grad lives into the
        # later micro-steps' forwards (measured on a
        # 2-stage PipelineModule, fp16 GA 2: the last stage's forward of micro-batch 2 held them, engine.py backward
        # l.3428, +26,816 B without this; FP16_UnfusedOptimizer: cell z0_fp16_torchadam_groups_tbsga2_w1, forward:2 /
        # forward:4 +39,910 B = N_t x 2 at engine.py backward:3428 without it)
        b.add("accelerator", "gradients", "lp_grads_accumulated", N * gD, "accumulated_forward",
              f"N x D = {N} x {gD} (every param.grad of the earlier micro-steps, kept to the boundary)",
              "runtime/engine.py:DeepSpeedEngine._take_model_step (optimizer.zero_grad only at the boundary, "
              "l.3529-3530)")
        # the kept param.grad is the target of torch's in-place add: each new gradient is made whole beside it first
        # (engine, PipelineModule 2 stages fp16 GA 2, stage 0's BackwardPass:2: +6,416 B without this)
        _add_accumulate_grad_new(b, inv, gD, "runtime/engine.py:DeepSpeedEngine._take_model_step "
                                 "(optimizer.zero_grad only at the boundary, l.3529-3530)")
    # big: the largest all-reduce bucket of more than one tensor (see sums above)
    b.add("accelerator", "workspace", "allreduce_bucket_flat", big * gD, "in_backward",
          f"largest all-reduce bucket x D = {big} x {gD} (tensors until numel > {MEMORY_OPT_ALLREDUCE_SIZE:,}; "
          "a bucket of one tensor is flattened as a view: 0)",
          "engine.py:DeepSpeedEngine.allreduce_no_retain / allreduce_bucket (self.flatten(bucket))")
    if ec.model_dtype != "fp32":
        b.add("accelerator", "gradients", "fp32_grad", N * 4, "step", f"N x 4 = {N} x 4 (fp32 copy of the grads)",
              src_s.replace("__init__", "step"))
        if wrapper == "FP16_Optimizer":
            # FP16_Optimizer.step flattens a list of per-parameter fp32 copies (fused_optimizer.py l.286-289:
            # _flatten_dense_tensors([p.grad.to(data_type) for p in group])): both live until the flat is made
            # (measured by the peak tracker, parity cell z0_bf16_w2: step +172,860 B without it)
            b.add("accelerator", "gradients", "fp32_grad_copies", N * 4, "step_prep",
                  f"N x 4 = {N} x 4 (each p.grad.to(fp32), beside the flat they are cat into)",
                  "runtime/fp16/fused_optimizer.py:FP16_Optimizer.step (p.grad.to(data_type), l.287)")


def zero12_layouts(ec: EffectiveConfig, inv: Inventory, W: int, wrapper: str | None = None) -> list[Zero12Layout]:
    """One :class:`Zero12Layout` per trainable param group (index order) for ZeRO-1/2, with the
    per-parameter alignment the wrapper uses (``parameter_alignment``, never under
    BF16_Optimizer; ``wrapper`` defaults to :func:`select_optimizer`'s)."""
    D = DTYPE_BYTES[ec.model_dtype]
    wrapper = wrapper or select_optimizer(ec)[0]
    align = ec.zero.parameter_alignment and wrapper != "BF16_Optimizer"
    # once per (tensor list, W, D, alignment): generate's plans share the layouts (frozen values), and
    # their memos of per-rank figures with them; a layout per group per plan was O(tensors) each (issue 21)
    return list(inv.memo(("zero12_layouts", W, D, align),
                         lambda: tuple(zero12_group_layout(tuple(t.numel for t in g), W, D, align)
                                       for g in inv.groups())))


def zero12_rank_terms(ec: EffectiveConfig, layouts: list[Zero12Layout], W: int) -> Runs:
    """Runs of (I_r, Cov_r, P_max,r) summed over groups, every rank in O(tensors log tensors).

    P_max,r is the in-step fp32 gradient of the largest group: P, except for an fp32 model whose
    slice lies inside one tensor (Cov = P, K = 1): flatten and .to() then return views of the kept
    grads, I_r + P - Cov_r elements (``stage_1_and_2.py`` step)."""
    D = DTYPE_BYTES[ec.model_dtype]
    if not layouts:
        return Runs.const(W, (0, 0, 0))

    def one(lay: Zero12Layout) -> Runs:
        P = lay.P
        return zero12_all_ranks(lay, W).map(
            lambda t: (t[0], t[1], (t[0] + P - t[1]) if (D == 4 and t[2] == 1 and t[1] == P) else P))

    return Runs.zip(*(one(lay) for lay in layouts)).map(
        lambda row: (sum(x[0] for x in row), sum(x[1] for x in row), max(x[2] for x in row)))


def zero12_flat_copy(layouts: list[Zero12Layout], W: int) -> Runs:
    """Runs of (F_r, single_r): F_r = elements of the largest flat gradient copy the ZeRO-1/2 step
    makes (``stage_1_and_2.py`` DeepSpeedZeroOptimizer.step: ``flatten(averaged_gradients[i])``,
    a new tensor of P elements unless the rank's slice is one tensor's view: torch
    ``_flatten_dense_tensors`` returns the single tensor itself); single_r = every group's slice
    lies inside one tensor (K_r = 1 and Cov_r = P), so the flattened grad is a view of the kept
    ``averaged_gradients`` storage. Every rank in O(tensors log tensors)."""
    if not layouts:
        return Runs.const(W, (0, True))

    def one(lay: Zero12Layout) -> Runs:
        return zero12_all_ranks(lay, W).map(lambda t: (t[2] == 1 and t[1] == lay.P, lay.P))

    return Runs.zip(*(one(lay) for lay in layouts)).map(
        lambda row: (max([P for o, P in row if not o], default=0), all(o for o, _ in row)))


def zero12_largest_slices(layouts: list[Zero12Layout], W: int) -> Runs:
    """Runs of, per rank, elements of its largest gradient slice: max over parameters p meeting the rank's
    slice [r P, (r+1) P) of a group of the part of p inside it, min(end_p, (r+1) P) - max(start_p, r P)
    (``stage_1_and_2.py`` grad_position ``num_elements``). Every rank in O(tensors log tensors)
    whatever W is (a parameter's owners are one range: the first and last hold part of it, the
    ranks between a whole P), or O(W log tensors + tensors) for W <= 4 x tensors (each rank's
    meeting run by bisection, the parameters inside it whole); once per layout and W."""
    runs = [_largest_slices_one(lay, W) for lay in layouts if lay.P]
    if not runs:
        return Runs.const(W, 0)
    if len(runs) == 1:
        return runs[0]
    return Runs.zip(*runs).map(max)


def _largest_slices_one(lay: Zero12Layout, W: int) -> Runs:
    """:func:`zero12_largest_slices` of one group (P > 0), memoised on the layout."""
    key = ("largest_slices", W)
    got = lay._memo.get(key)
    if got is not None:
        return got
    P, starts, numels, ends = lay.P, lay.starts, lay.numels, lay.ends
    T = len(numels)
    if W <= 4 * T and W <= MAX_ZERO12_CHANGE_RANKS:
        br, bl = bisect.bisect_right, bisect.bisect_left
        vals = []
        for r in range(W):
            lo = r * P
            hi = lo + P
            jl, jh = br(ends, lo), bl(starts, hi)
            if jh <= jl:
                vals.append(0)
                continue
            # a zero-numel parameter's part is 0, the default: counting it changes nothing
            best = min(ends[jl], hi) - max(starts[jl], lo)
            if jh - 1 > jl:
                last = min(ends[jh - 1], hi) - max(starts[jh - 1], lo)
                if last > best:
                    best = last
                if jh - 2 > jl:
                    inner = max(numels[jl + 1:jh - 1])
                    if inner > best:
                        best = inner
            vals.append(best if best > 0 else 0)
        got = Runs(range(W + 1), vals)
    else:
        ups = []
        for a, n in zip(starts, numels):
            if n <= 0:
                continue
            r0, r1 = a // P, min((a + n - 1) // P, W - 1)
            if r0 == r1:
                ups.append((r0, r0 + 1, min(a + n, (r0 + 1) * P) - max(a, r0 * P)))
            elif r0 < r1:
                ups.append((r0, r0 + 1, (r0 + 1) * P - a))
                if r1 > r0 + 1:
                    ups.append((r0 + 1, r1, P))
                ups.append((r1, r1 + 1, min(a + n, (r1 + 1) * P) - r1 * P))
        got = Runs.from_updates(W, ups, 0, "max")
    lay._memo[key] = got
    return got


def zero12_offload_norm_modeled(ec: EffectiveConfig, wrapper: str) -> bool:
    """Whether a ZeRO-1/2 plan casts each gradient slice to fp64 inside backward: with CPU
    optimizer offload, copy_grads_in_partition -> set_norm_for_param_grad_in_gpu
    (``stage_1_and_2.py``: ``accumulated_grad.data.to(get_norm_dtype()).norm(2)``, fp64 where the
    accelerator has it; the compact-buffer path does the same on its slice), one slice at a time."""
    return (ec.zero.stage in (1, 2) and wrapper == "DeepSpeedZeroOptimizer"
            and ec.offload_optimizer_effective == "cpu")


def zero12_offload_xl_clone_modeled(ec: EffectiveConfig, wrapper: str, ga: int = 1) -> bool:
    """Whether a ZeRO-2 plan under CPU optimizer offload clones each gradient larger than the
    reduce bucket in its backward hook: ``stage_1_and_2.py`` l.232 ``_offload_gradient_safety_enabled
    = self.cpu_offload and not self.zenflow``; l.1443-1446, with ``contiguous_gradients``, ``if
    param.numel() > self.reduce_bucket_size: if self._offload_gradient_safety_enabled:
    grad_reduc.data = grad_reduc.detach().clone(...)``. ZeRO-1 reaches the same hook code in its
    boundary reduce (reduce_gradients' epilogue loop), beside every later 16-bit gradient (the u term of
    :func:`zero12_offload_reduce_terms`), with the flushes replayed (:func:`zero12_offload_flush_modeled`;
    with ``overlap_comm``, GA 1 only: in the hooks, in autograd's order): there a rank that owns no part of
    the gradient keeps its clone (:func:`_zero12_kept_xl`), which the per-rank terms carry for every param
    group (:func:`_zero12_offload_reduce_runs`). ``ga``: the plan's gradient accumulation steps."""
    z = ec.zero
    return (zero12_offload_norm_modeled(ec, wrapper) and ec.contiguous_gradients_effective
            and (z.stage == 2 or zero12_offload_flush_modeled(ec, wrapper, ga)))


#: Packing of (bytes at a flush, clone bytes, slice elements) into one int, so that
#: Runs.from_updates' max (which negates its values) keeps the three together.
_XL_M = 1 << 64


def zero12_offload_reduce_terms(ec: EffectiveConfig, layouts: list[Zero12Layout], W: int,
                                wrapper: str = "DeepSpeedZeroOptimizer", inv: "Inventory | None" = None,
                                ga: int = 1) -> Runs:
    """Runs of, per rank, (s_r, c_r, h): the gradient flush at which a ZeRO-1/2 reduce under CPU
    optimizer offload holds the most (:func:`zero12_offload_norm_modeled`), s_r in elements, c_r
    and h in bytes.

    At a flush, copy_grads_in_partition -> set_norm_for_param_grad_in_gpu casts the rank's slice
    of each flushed gradient to fp64, one at a time (``stage_1_and_2.py`` l.2172, l.1886:
    ``accumulated_grad.data.to(get_norm_dtype()).norm(2)``): s_{p,r} x 8 B for the part s_{p,r}
    of parameter p in rank r's slice (``grad_position`` num_elements). A gradient of more than
    RBS = reduce_bucket_size elements is not copied into the ipg bucket: under CPU offload its
    hook clones it (l.1443-1446, :func:`zero12_offload_xl_clone_modeled`) and the clone is the
    gradient DeepSpeed reduces, alone (``extra_large_param_to_reduce``, flushed by the next
    gradient's hook or the epilogue, reduce_ipg_grads l.2213-2227), live through its flush until
    async_inplace_copy_grad_to_fp32_buffer_from_gpu drops it (``clear_grad_attribute`` l.1912).
    So a flush of p holds s_{p,r} x 8 + [n_p > RBS] n_p x D on rank r (a rank owning none of p
    still holds p's clone, s = 0), beside the ipg bucket; (s_r, c_r) are the terms of the
    largest: max over p of s_{p,r} x 8 + c_p, c_p = n_p x D when p is extra-large, else 0.
    Without an extra-large gradient this is :func:`zero12_largest_slices` (c_r = 0).
    h = max over extra-large p of 2 x n_p x D: the clone is made while the autograd gradient it
    replaces is still alive (``clone`` first, then ``grad_reduc.data =`` drops the old storage),
    the backward instant of the hook. D = model dtype bytes. Every rank in O(tensors log
    tensors) whatever W is (a parameter's owners are one range of ranks).
    With ``inv`` (the plan's tensors, whose order gives the flushes: :func:`_zero12_flush_replay`),
    a fourth term u, bytes: the norm copies run inside the flush, while the gradients not yet in
    the bucket are still whole (ZeRO-2: the triggering gradient and its autograd sibling, in their
    hook; ZeRO-1: the trigger and every later one), so p's moment is s_{p,r} x 8 + c_p + u_p with
    u_p those of p's flush, and (s_r, c_r, h, u_r) are the largest's. Engine,
    tests/engine/test_peak_parity.py z2_bf16_oo_cpu_bigtensor_w4 (real Linears): l1.bias's hook
    flushes l2.weight's clone with l1.weight's gradient whole, ranks 2 and 3 +39,170 B without u.
    Without ``inv``, u = 0. At ZeRO-1 (one param group, flushes replayed) c_r also holds the clones of
    earlier extra-large gradients rank r owns no part of (:func:`_zero12_offload_reduce_runs`): engine,
    z1_bf16_oo_cpu_smallbucket_w4, ranks 2 / 3 +84,918 / +82,074 B and ranks 0 / 1 +38,564 B without
    the ZeRO-1 clones."""
    if not layouts:
        return Runs.const(W, (0, 0, 0, 0))
    rbs = int(ec.zero.reduce_bucket_size)
    # the gradients moved, unmoved and cloned: fp32 grad_accum under zero12_offload_fp32_accum, else 16-bit
    D = zero12_offload_grad_bytes(ec, wrapper, ga, len(layouts))
    unmoved: dict = {}
    upos = None  # ZERO12_KEPT_COLS: u per flush position (ZeRO-1, one group), in place of ``unmoved``
    held = False
    seq = None  # ZeRO-1 with overlap_comm: the flushes in hook order (the replay's), not the flat buffer's
    flushes_ = Dm_ = st_ = None  # the replay u comes from (None: no u), for the memo below
    if inv is not None and zero12_offload_flush_modeled(ec, wrapper, ga):
        _, _, st, order, _, hooked, T, csum, flushes, _, _, _ = _zero12_flush_replay(ec, inv, layouts, W)
        flushes_, st_, Dm_ = flushes, st, DTYPE_BYTES[ec.model_dtype]
        D_ = D  # the replay's counts are elements
        # the trigger's autograd sibling (held) is a 16-bit param.grad not yet hooked, also under fp32 grad_accum
        # (ZeRO-1 overlap_comm: its hook, which casts it, l.1237, has not run). Engine
        # z1_bf16_noncontig_oo_cpu_gaccfp32_overlap_tbsga2_w2 rank 1 backward:2 -38,464 B (l1.weight at 4 B) before
        Dm = DTYPE_BYTES[ec.model_dtype]
        held = zero12_boundary_holds_all(ec, ga)  # every unmoved gradient whole, in hook order too
        if ec.zero.stage == 1 and st == 2:
            seq = order
        F = len(flushes)
        if ZERO12_COLUMNS and F > 1:
            # the loop below by C-level maps: u per flush with a trigger (all but the epilogue's, the last),
            # repeated over its bucket's positions, keyed by (group, flat start) in position order (a later
            # position's value replaces an earlier one of the same key, as the loop's assignments do)
            # ub: u per flush in bytes. It follows from the replay (its triggers, hook order, csum, hooked and st) and
            # (D_, Dm, held) alone: kept on the replay's _Flushes.memo under those three, as zero12_backward_transients'
            # columns are (generate's 88 plans at the 1e5-tensor limit share 27 replays, issue 21)
            dm = flushes.memo if isinstance(flushes, _Flushes) and ZERO12_OFFLOAD_U_MEMO else {}
            ukey = ("offload_u", D_, Dm, held)
            ub = dm.get(ukey)
            if ub is None:
                trig = flushes.trig[:F - 1]
                if st == 2 and not held:  # the trigger (D_: fp32 grad_accum under ZeRO-1 GA 1) and its sibling (Dm)
                    ub = map(D_.__mul__, map(hooked.__getitem__, trig))
                    if Dm != D_:
                        ub = map(operator.add, map(D_.__mul__, map(order.numels.__getitem__, trig)),
                                 map(Dm.__mul__, map(operator.sub, map(hooked.__getitem__, trig),
                                                     map(order.numels.__getitem__, trig))))
                else:
                    ub = map(D_.__mul__, map(csum[T].__sub__, map(csum.__getitem__, trig)))
                    if held:  # the sibling's 16-bit gradient, Dm bytes (beside fp32 grad_accum too)
                        ub = map(operator.add, ub, map(Dm.__mul__, map(operator.sub, map(hooked.__getitem__, trig),
                                                                        map(order.numels.__getitem__, trig))))
                ub = dm[ukey] = _packed(ub)  # read by index, iteration and list() only
            fs = flushes.starts
            if ZERO12_OFFLOAD_PERIOD:
                got = _zero12_offload_periodic_runs(ec, inv, layouts, W, rbs, wrapper, ga, st, fs, ub, D)
                if got is not None:
                    return got
            end = fs[F - 1]
            us = itertools.chain.from_iterable(map(itertools.repeat, ub,
                                                   map(operator.sub, fs[1:F], fs[:F - 1])))
            lay0 = layouts[0]
            if (ZERO12_KEPT_COLS and ec.zero.stage == 1 and order.groups is None and len(layouts) == 1
                    and lay0.P > 0 and len(order.numels) and min(order.numels) > 0
                    and (seq is not None or _replay_in_flat_order(dm, order, lay0))):
                # u per flush position as one column, not a dict keyed by flat start (9e5 entries a plan at
                # 1e5 layers, issue 21): every tensor has elements, so the starts are distinct and position k's
                # key is its own; positions of the epilogue's flush (k >= end) have none, u 0, as um.get's default.
                # From ub and the replay alone: kept beside it under the same key
                upos = dm.get(("offload_upos",) + ukey[1:])
                if upos is None:
                    upos = dm[("offload_upos",) + ukey[1:]] = _packed(
                        itertools.chain(us, itertools.repeat(0, len(order.numels) - end)))
            elif (ZERO12_OFFLOAD_NO_XL2 and ec.zero.stage == 2 and st == 2 and order.groups is None
                  and len(layouts) == 1 and lay0.P > 0 and len(order.numels) and min(order.numels) > 0
                  and lay0.largest <= (rbs if zero12_offload_xl_clone_modeled(ec, wrapper, ga) else lay0.largest)
                  and _replay_in_hook_order(dm, order, lay0)):
                # ZeRO-2, one group, no clone counted, hook order the flat order reversed (every tensor has elements:
                # distinct starts, position k is tensor T - 1 - k): u per flush position as ZeRO-1's column, not the
                # dict, for _zero12_offload_kept_no_xl (the walk's per-rank maximum of (8 s + u, u, s) with c = 0,
                # h = 0; issue 21: 3 walks over 1e5 tensors at generate's limit, ~0.15 s each with the dict)
                upos = dm.get(("offload_upos",) + ukey[1:])
                if upos is None:
                    upos = dm[("offload_upos",) + ukey[1:]] = _packed(
                        itertools.chain(us, itertools.repeat(0, len(order.numels) - end)))
            else:
                gs = itertools.repeat(0) if order.groups is None else itertools.islice(order.groups, end)
                unmoved = dict(zip(zip(gs, itertools.islice(order.starts, end)), us))
        for ks, trig in (() if ZERO12_COLUMNS and F > 1 else flushes):
            if trig is None:
                continue
            # held (ZeRO-1 overlap_comm, GA > 1): the trigger's autograd sibling is made whole beside the
            # sibling's own micro-step-1 param.grad (engine z1_bf16_overlap_oo_cpu_tbsga2_bigtensor_w2: rank 1's
            # l2.weight flush held l1.bias, l1.weight and l1.weight's new gradient, 77,662 B, engine.py l.3428)
            u = (order.numels[trig] * D_ + (hooked[trig] - order.numels[trig]) * Dm if st == 2 and not held else
                 (csum[T] - csum[trig]) * D_ + ((hooked[trig] - order.numels[trig]) * Dm if held else 0))
            for k in ks:
                g, a0, _ = order[k]
                unmoved[(g, a0)] = u
    clones = zero12_offload_xl_clone_modeled(ec, wrapper, ga)
    xl = clones and any(lay.largest > rbs for lay in layouts)  # each layout's largest numel, kept (issue 21)
    if not xl and not unmoved and upos is None:
        return zero12_largest_slices(layouts, W).map(lambda s: (s, 0, 0, 0))
    if not clones:
        rbs = max(rbs, max((n for lay in layouts for n in lay.numels), default=0))  # no clone counted
    if unmoved or upos is not None or (xl and ec.zero.stage == 1):
        # kept per layouts and flush replay (compared by identity: u and the hook order are made from the replay's
        # columns, D, Dm, held and st alone) and the other inputs: generate's plans at other micro-batch sizes
        # and GA repeat them (issue 21: the 1e5-tensor inventory without layers asked 88 times for 14 distinct
        # walks, ~45 ms each). Not keyed by u's bytes: ~2 MB a key, +150 MB at that limit
        key = ("offload_reduce_runs", W, rbs, D, ec.zero.stage == 1, not held, ZERO12_COLUMNS, ZERO12_KEPT_COLS,
               Dm_, st_, seq is None, upos is None, ZERO12_KEPT_NO_XL, ZERO12_OFFLOAD_NO_XL2)
        got = layouts[0]._memo.get(key)
        if (got is not None and got[1] is flushes_ and len(got[0]) == len(layouts)
                and all(a is b for a, b in zip(got[0], layouts))):
            return got[2]
        # by content too: a pipeline plan's stages of equal tensors (nameless or repeated layers) are other
        # inventories with other layouts and replays, but the same columns (issue 21: 30 walks, 14 distinct)
        ckey = None if unmoved else _offload_runs_content_key(layouts, W, rbs, D, ec.zero.stage == 1, not held,
                                                              seq, upos)
        runs = _OFFLOAD_RUNS_BY_CONTENT.get(ckey) if ckey is not None else None
        if runs is None:
            runs = _zero12_offload_reduce_runs(layouts, W, rbs, D, unmoved, zero1=ec.zero.stage == 1, seq=seq,
                                               hook_clone=not held, upos=upos)
            if ckey is not None:
                _OFFLOAD_RUNS_BY_CONTENT[ckey] = runs
                while len(_OFFLOAD_RUNS_BY_CONTENT) > _OFFLOAD_RUNS_KEPT:
                    del _OFFLOAD_RUNS_BY_CONTENT[next(iter(_OFFLOAD_RUNS_BY_CONTENT))]  # the oldest
        layouts[0]._memo[key] = (tuple(layouts), flushes_, runs)
        return runs
    # once per (layouts, W, RBS, D): generate's plans share the layouts (zero12_layouts' memo) and
    # this pass is O(tensors) (issue 21); the layouts are kept with the figure and compared by identity
    key = ("offload_reduce_terms", W, rbs, D)
    got = layouts[0]._memo.get(key)
    if got is not None and len(got[0]) == len(layouts) and all(a is b for a, b in zip(got[0], layouts)):
        return got[1]
    runs = _zero12_offload_reduce_runs(layouts, W, rbs, D)
    layouts[0]._memo[key] = (tuple(layouts), runs)
    return runs


#: True: :func:`zero12_offload_reduce_terms` also keeps :func:`_zero12_offload_reduce_runs`' runs by the content of
#: every input they read (:func:`_offload_runs_content_key`), across layouts and replays; False: only by identity
#: (tests/test_offload_u_memo19.py compares the two)
ZERO12_OFFLOAD_CONTENT_MEMO = True
#: :data:`ZERO12_OFFLOAD_CONTENT_MEMO`'s store: content key -> Runs (read only), the oldest dropped past
#: :data:`_OFFLOAD_RUNS_KEPT` entries (a Runs is O(change ranks), at most MAX_ZERO12_CHANGE_RANKS pieces)
_OFFLOAD_RUNS_BY_CONTENT: dict = {}
_OFFLOAD_RUNS_KEPT = 64


def _offload_runs_content_key(layouts: list[Zero12Layout], W: int, rbs: int, D: int, zero1: bool, hook_clone: bool,
                              seq: "_FlushOrder | None", upos: "Sequence[int] | None") -> "tuple | None":
    """The key :func:`zero12_offload_reduce_terms` keeps :func:`_zero12_offload_reduce_runs`' runs under by content
    (no ``unmoved`` dict: u as ``upos`` or none): W, RBS, D, ``zero1``, ``hook_clone``, and a BLAKE2b digest (20
    bytes) of every column the walk reads: each layout's (P, n, n_pad, flat starts, numels), the hook order ``seq``
    (param groups, flat starts, numels) and u per position ``upos``, each with its length; and the switches that pick
    the walk's forms (:data:`ZERO12_COLUMNS`, :data:`ZERO12_KEPT_COLS`, :data:`ZERO12_KEPT_NO_XL`: a reference walk
    never reads the fast one's
    runs). None (not kept) when
    :data:`ZERO12_OFFLOAD_CONTENT_MEMO` is off or a value does not fit int64."""
    if not ZERO12_OFFLOAD_CONTENT_MEMO:
        return None
    h = hashlib.blake2b(digest_size=20)

    def col(c: "Sequence[int] | None") -> None:
        if c is None:
            h.update(b"-")
            return
        a = c if isinstance(c, array.array) and c.typecode == "q" else array.array("q", c)
        h.update(b"|" + len(a).to_bytes(8, "little"))
        h.update(memoryview(a).cast("B"))
    try:
        for lay in layouts:
            col((lay.P, lay.n, lay.n_pad))
            col(lay.starts)
            col(lay.numels)
        col(None if seq is None else seq.groups)
        col(None if seq is None else seq.starts)
        col(None if seq is None else seq.numels)
        col(upos)
    except OverflowError:
        return None
    return ("offload_reduce_runs", len(layouts), W, rbs, D, bool(zero1), bool(hook_clone), seq is None,
            upos is None, ZERO12_COLUMNS, ZERO12_KEPT_COLS, ZERO12_KEPT_NO_XL, ZERO12_OFFLOAD_NO_XL2, h.digest())


def _replay_in_hook_order(dm: dict, order: "_FlushOrder", lay: Zero12Layout) -> bool:
    """Whether a one-group flush replay's hook order is the layout's flat order reversed (the flat starts backwards),
    kept on the replay's ``_Flushes.memo`` ``dm`` as :func:`_replay_in_flat_order`'s answer is."""
    got = dm.get("hook_order")
    if got is None:
        got = dm["hook_order"] = list(order.starts) == list(reversed(lay.starts))
    return got


def _replay_in_flat_order(dm: dict, order: "_FlushOrder", lay: Zero12Layout) -> bool:
    """Whether a one-group flush replay's hook order is the layout's flat order (the same flat starts), kept on the
    replay's ``_Flushes.memo`` ``dm``: a replay is made from one layout list and kept with it (compared by identity,
    :func:`_zero12_flush_replay`), so the answer is the replay's; an O(tensors) comparison per plan otherwise."""
    got = dm.get("flat_order")
    if got is None:
        got = dm["flat_order"] = list(order.starts) == list(lay.starts)
    return got


def _zero12_offload_periodic_runs(ec: EffectiveConfig, inv: Inventory, layouts: list[Zero12Layout], W: int,
                                  rbs: int, wrapper: str, ga: int, st: int, fs: "Sequence[int]",
                                  uf: list[int], D: int = 0) -> "Runs | None":
    """:func:`zero12_offload_reduce_terms` with flushes replayed (``fs``: the flush starts in hook order, len
    F + 1; ``uf``: u bytes of each flush but the epilogue's, whose u is 0) from the repeating unit of
    identical layers (``model.parallel.layer_repeat``), or None where that does not apply and the walk
    runs: one param group with P > 0, no tensor of 0 elements (equal flat starts would share a u), no
    extra-large gradient counted (c_p = 0: neither :func:`_zero12_kept_xl`'s clones nor K, O of
    :func:`_zero12_offload_kept_runs`, h = 0; or, at ZeRO-2 with :data:`ZERO12_OFFLOAD_XL_PERIOD`, extra-large
    gradients: their c_p, h and every rank's clone moment as the walk's),
    W <= :data:`_PERIOD_MAX_W` and identical layers covering all but
    max(T / 4, 4096) of the T tensors. Then both walks (:func:`_zero12_offload_reduce_runs`, ZeRO-1's kept
    runs and ZeRO-2's updates) give each rank r the largest over the tensors p it owns part of of the packed
    (s_{p,r} x 8 + u_p, u_p, 0, s_{p,r}), lexicographic; u_p is its flush's (constant over a bucket, a
    range of flat indices: hook order is the flat order (ZeRO-1's epilogue loop, l.971-976) or its reverse
    (:func:`_zero12_flush_replay`)), and s_{p,r} = n_p for every p but the first and last meeting r's slice.
    So per rank and bucket the largest is that of the largest numel in the range, and a range of at least
    one whole layer inside the identical layers holds one layer's largest: O(buckets + layer size) per rank,
    not O(tensors) (issue 21: 9e5 tensors at 1e5 layers, ~2 s per candidate fix). Byte-identical to the
    walks (tests/test_offload_period_identity.py)."""
    from advisor.model.parallel import layer_repeat
    if len(layouts) != 1 or W > _PERIOD_MAX_W:
        return None
    lay = layouts[0]
    P = lay.P
    N = lay.numels
    T = len(N)
    if P <= 0 or not T or fs[-1] != T or fs[-2] <= 0 or min(N) <= 0:
        return None  # fs[-2] 0: no gradient before the epilogue's flush, no u (the walks' largest slices)
    xl = zero12_offload_xl_clone_modeled(ec, wrapper, ga) and lay.largest > rbs
    if xl and (ec.zero.stage != 2 or not ZERO12_OFFLOAD_XL_PERIOD):
        # ZeRO-1's extra-large gradients (st is the replay's order: 2 for ZeRO-1 with overlap_comm too): the kept
        # clones, K and O of the walks
        return None
    lr = layer_repeat(inv)
    if lr is None:
        return None
    B0, U = lr.head, lr.unit
    if len(inv.tensors) != T:
        # frozen tensors (a per-expert MoE's e_score_correction_bias buffers): the layout lists the trainable ones
        # in order, so the layers' are its [B0, B0 + U x count) with these B0, U; only the numels' period checked
        # below is relied on
        ts = inv.tensors
        B0 = sum(1 for t in ts[:lr.head] if t.trainable)
        U = sum(1 for t in ts[lr.head:lr.head + lr.unit] if t.trainable)
        if not U:
            return None
    B1 = B0 + U * lr.count
    if B1 > T or T - (B1 - B0) > max(T // 4, 4096):
        return None
    key = ("offload_period", B0, U, B1)
    lmax = lay._memo.get(key)
    if lmax is None:
        # the layout's tensors are the inventory's (all trainable, one group) when its numels repeat there too
        unit = N[B0:B0 + U]
        if N[B0:B1] != unit * lr.count:
            return None
        lmax = lay._memo[key] = max(unit)
    # the buckets as flat index ranges [lo_i, lo_{i+1}) with u of each, ascending
    F = len(fs) - 1
    us = list(uf) + [0]
    if st == 2:  # hook order is the flat order reversed: position k is flat index T - 1 - k
        lows = [T - fs[j + 1] for j in reversed(range(F))]
        us.reverse()
    else:
        lows = list(fs[:F])
    M = _XL_M
    A = lay.starts

    def rmax(x: int, y: int) -> int:  # the largest numel of flat indices [x, y), x < y
        m = 0
        if x < B0:
            m = max(N[x:min(y, B0)])
        if y > B1:
            m = max(m, max(N[max(x, B1):y]))
        a, b = max(x, B0), min(y, B1)
        if b - a >= U:
            m = max(m, lmax)
        elif b > a:
            m = max(m, max(N[a:b]))
        return m

    def u_of(j: int) -> int:
        return us[bisect.bisect_right(lows, j) - 1]

    def pack(s: int, u: int, n: int = 0) -> int:  # n: the tensor's numel, its clone c_p = n x D when extra-large
        c = n * D if xl and n > rbs else 0
        return (((s * 8 + c + u) * M + u) * M + c) * M + s

    # ZeRO-2's extra-large gradients: every rank holds each one's clone at its flush (pack(0, c_p, u_p), the
    # walk's ``whole``; one pass over those over the bucket only, C-level compress), and h is the largest clone's
    # moment 2 c_p; a whole tensor's (s x 8 + c + u, u, c, s) grows with its numel (c = n x D past the bucket),
    # so a range's largest is still its largest numel's (rmax), inside the repeating layers too
    whole, h = 0, 0
    if xl:
        for j in itertools.compress(range(T), map(rbs.__lt__, N)):
            whole = max(whole, pack(0, u_of(j), N[j]))
            h = max(h, 2 * N[j] * D)

    def value_at(rs: Iterable[int]):
        for r in rs:
            jl, jh = lay.meeting(r)
            best = whole
            if jh > jl:
                lo, hi = r * P, (r + 1) * P
                for j in {jl, jh - 1}:  # the two that may be cut by the slice's ends
                    a, n = A[j], N[j]
                    best = max(best, pack(min(a + n, hi) - max(a, lo), u_of(j), n))
                x, y = jl + 1, jh - 1  # the rest lie whole in the slice
                if y > x:
                    i = bisect.bisect_right(lows, x) - 1
                    while i < len(lows) and lows[i] < y:
                        sx = max(x, lows[i])
                        sy = min(y, lows[i + 1] if i + 1 < len(lows) else T)
                        if sy > sx:
                            m = rmax(sx, sy)
                            best = max(best, pack(m, us[i], m))
                        i += 1
            yield (best % M, (best // M) % M, h, (best // M // M) % M)

    return Runs.at_points(W, range(W), value_at)


def _zero12_offload_reduce_runs(layouts: list[Zero12Layout], W: int, rbs: int, D: int,
                                unmoved: "dict | None" = None, zero1: bool = False,
                                seq: "_FlushOrder | None" = None, hook_clone: bool = True,
                                upos: "Sequence[int] | None" = None) -> Runs:
    """:func:`zero12_offload_reduce_terms` with an extra-large gradient or gradients not yet in the
    bucket at a flush (``unmoved``: (group, flat start) -> u_p bytes), computed. ``zero1``: c_r also holds
    the clones of earlier extra-large gradients rank r owns no part of, kept to the end of the epilogue
    (``stage_1_and_2.py`` l.2272-2274: only owners copy_grads_in_partition, which drops the clone;
    :func:`_zero12_kept_xl`), in flush order: groups and params in order (reduce_gradients' epilogue loop,
    l.971-976), or with ``overlap_comm`` ``seq``, the hooks' order (:func:`_zero12_flush_replay`; they
    reduce at the boundary, l.2290): :func:`_zero12_offload_kept_runs`. h = 0 in the epilogue loop: the
    clone's own moment there (the gradients not yet moved, the autograd gradient and its clone) is not
    modelled; the engine's cells peak at the norm copies (z1_bf16_oo_cpu_smallbucket_w4). With
    ``overlap_comm`` the clone is made in its hook, where only its autograd gradient and the clone are the
    reduce's (h = 2 x n_p x D, as ZeRO-2's), unless ``hook_clone`` is False: at GA > 1 the boundary's hooks
    clone beside every unmoved gradient (:func:`zero12_boundary_holds_all`), a moment under the flush's norm
    copies with the same gradients (u), so h = 0 as in the epilogue, and micro-step 1 clones nothing. Engine: z1_bf16_oo_cpu_xgroups_w2 (two groups, a kept clone
    of the other group's gradient), z1_bf16_overlap_oo_cpu_bigtensor_w2."""
    if not zero1 and upos is not None:
        # ZeRO-2 with u per position in hook order, the flat order reversed, and no clone counted: set only then
        # (zero12_offload_reduce_terms, ZERO12_OFFLOAD_NO_XL2), one group with P > 0, every tensor with elements
        return _zero12_offload_kept_no_xl(layouts[0], W, True, upos)
    M = _XL_M
    um = unmoved or {}
    hook_order = zero1 and seq is not None
    if hook_order:
        items = ((g, layouts[g].P, a, n) for g, a, n in
                 zip(itertools.repeat(0) if seq.groups is None else seq.groups, seq.starts, seq.numels))
    else:
        items = ((g, lay.P, a, n) for g, lay in enumerate(layouts) for a, n in zip(lay.starts, lay.numels))
    if zero1:
        return _zero12_offload_kept_runs(layouts, W, rbs, D, um, items, hook_order, hook_clone, seq, upos)

    def pack(s: int, c: int, u: int = 0) -> int:
        return (((s * 8 + c + u) * M + u) * M + c) * M + s

    # Updates of one rank are kept as that rank's maximum, and those of every rank (the clones) as
    # their maximum: Runs.from_updates takes the max per rank and its pieces from the updates' ends,
    # which this leaves as they were, so the runs are the same as from one update per tensor and
    # rank range; a 1e5-layer model gave it ~1.2M updates to sort (issue 21).
    ups: list[tuple[int, int, int]] = []
    single: dict[int, int] = {}
    get = single.get
    h = 0
    whole = -1
    for g, P, a, n in items:
        if n <= 0:
            continue
        c = n * D if n > rbs else 0
        u = um.get((g, a), 0) if um else 0
        if c:
            h = max(h, 2 * c)
            whole = max(whole, pack(0, c, u))  # every rank holds the clone at its flush
        if not P:
            continue
        r0, r1 = a // P, min((a + n - 1) // P, W - 1)
        if r0 == r1:
            v = pack(min(a + n, (r0 + 1) * P) - max(a, r0 * P), c, u)
            if v > get(r0, -1):
                single[r0] = v
        elif r0 < r1:
            v = pack((r0 + 1) * P - a, c, u)
            if v > get(r0, -1):
                single[r0] = v
            if r1 > r0 + 1:
                ups.append((r0 + 1, r1, pack(P, c, u)))
            v = pack(min(a + n, (r1 + 1) * P) - r1 * P, c, u)
            if v > get(r1, -1):
                single[r1] = v
    if whole >= 0:
        ups.append((0, W, whole))
    ups.extend((r, r + 1, v) for r, v in single.items())
    return Runs.from_updates(W, ups, 0, "max").map(lambda x: (x % M, (x // M) % M, h, (x // M // M) % M))


#: True: :func:`_zero12_offload_kept_runs` of one group without an extra-large gradient takes
#: :func:`_zero12_offload_kept_no_xl`'s shortcut; False: the walk (tests/test_offload_no_xl21.py compares the two)
ZERO12_KEPT_NO_XL = True
#: True: :func:`zero12_offload_reduce_terms` at ZeRO-2 (one group, no clone counted, hook order the flat order
#: reversed) gives u per position and takes :func:`_zero12_offload_kept_no_xl`; False: the dict and the walk
#: (tests/test_offload_no_xl21.py compares the two)
ZERO12_OFFLOAD_NO_XL2 = True


def _zero12_offload_kept_no_xl(lay: Zero12Layout, W: int, hook_order: bool,
                               upos: "Sequence[int] | None") -> Runs:
    """:func:`_zero12_offload_kept_runs` of one group (P > 0) whose tensors all have elements and none is over the
    bucket (n_p <= RBS: no clone, so c_p = K = O_r = 0, no non-owner moment, h = 0), u per flush position ``upos``
    (None: u = 0). Then a rank's moment is the largest over the tensors p meeting its slice of (s_{p,r} x 8 + u_p,
    u_p, 0, s_{p,r}), lexicographic (the walk's packed value), taken field by field over the ties: the slice
    elements s are the numels but for the first and last tensor, u the flush position's (flat order: position j,
    hook order: T - 1 - j). Two C-level passes over a rank's tensors, not the walk's ~20 over every column
    (issue 21: generate at its 1e5-tensor limit, 64 x 64 tensors under a 4096-element bucket, 11 walks, ~0.9 s)."""
    P, T = lay.P, len(lay.numels)
    starts = sorted({0, *(x for x in _change_points(lay, W) if 0 <= x < W)})
    vals = []
    for r in starts:
        jl, jh = lay.meeting(r)
        if jh <= jl:
            vals.append((0, 0, 0, 0))
            continue
        lo, hi = r * P, (r + 1) * P
        sz = list(lay.numels[jl:jh])
        sz[0] = min(lay.starts[jl] + sz[0], hi) - max(lay.starts[jl], lo)
        if jh - 1 > jl:
            sz[-1] = min(lay.starts[jh - 1] + sz[-1], hi) - max(lay.starts[jh - 1], lo)
        if upos is None:
            s = max(sz)
            vals.append((s, 0, 0, 0))
            continue
        uz = upos[T - jh:T - jl][::-1] if hook_order else upos[jl:jh]
        k1 = list(map(operator.add, map((8).__mul__, sz), uz))
        b1 = max(k1)
        u = max(itertools.compress(uz, map(b1.__eq__, k1)))
        vals.append(((b1 - u) // 8, 0, 0, u))
    return Runs(starts + [W], vals)


def _zero12_offload_kept_runs(layouts: list[Zero12Layout], W: int, rbs: int, D: int, um: dict,
                              items: "Iterable[tuple[int, int, int, int]]", hook_order: bool,
                              hook_clone: bool = True, seq: "_FlushOrder | None" = None,
                              upos: "Sequence[int] | None" = None) -> Runs:
    """:func:`_zero12_offload_reduce_runs` for ZeRO-1 with several param groups or in hook order
    (``items``: (group, P, flat start, numel) in flush order): per rank r the largest of, over the
    tensors p it owns part of, s_{p,r} x 8 + c_p + u_p + kept_r(p), and over the extra-large p it owns
    none of, c_p + u_p + kept_r(p), with kept_r(p) = the clones of extra-large gradients before p that
    r owns no part of (never dropped in the reduce, ``stage_1_and_2.py`` l.2272-2274) = K(p) - O_r(p):
    all earlier clones less those r owns. O_r is constant between the extra-large gradients r owns, so
    the non-owner moments are range maxima over flush positions, answered offline (a monotonic stack,
    queries sorted by their right end): O((T + Q) log T) for T tensors and Q = the pieces' owned
    tensors, not the O(T x X) of a sweep per tensor over X extra-large ones (at 2,000 layers of
    generate's h = 64 llama, whose MLP weights are all over the RBS = h^2 bucket, that sweep took
    generate from 4.3 s to 116 s). With one param group (:data:`ZERO12_KEPT_COLS`) a rank's owned tensors are
    one run [pl, ph) of flush positions, so O_r is 0 before it and all of r's clones after it, and the queries
    are a prefix and a suffix maximum of the non-owner moments, C-level: no Python step per extra-large
    gradient (tests/test_offload_kept_cols_identity.py). Evaluated at the ranks where some group's ownership changes
    (:func:`_change_points`); h = 2 x the largest clone in hook order (``overlap_comm``: made in its
    hook), else 0."""
    M = _XL_M
    M3M = M * M * M + M  # a clone bytes' weight in a packed value: in the total and in the clone field
    # columns over flush positions, packed (issue 21: 1e5 layers are 9e5 tensors; a dict or a tuple per tensor
    # was ~100 MB more at once): the clone bytes, u, the clones before each, and each tensor's flush position
    # by (group, index in the group) for the owner look-ups. Flat order visits a group's tensors by index,
    # hook order (the reverse of model order) backwards
    G = len(layouts)
    # (``seq``: the hook order ``items`` walks, when ``hook_order``)
    cols = ZERO12_COLUMNS and G == 1 and layouts[0].P > 0 and (seq is not None or not hook_order)
    if (cols and ZERO12_KEPT_NO_XL and layouts[0].largest <= rbs and (upos is not None or not um)
            and min(layouts[0].numels, default=0) > 0):
        return _zero12_offload_kept_no_xl(layouts[0], W, hook_order, upos)
    if cols:
        # one param group: the loop below by C-level maps over the group's columns in flush order (hook
        # order: the replay's ``seq``, whose j-th tensor is the layout's len - 1 - j), tensors of no elements dropped
        lay = layouts[0]
        A, N = (seq.starts, seq.numels) if hook_order else (lay.starts, lay.numels)
        keep = list(map((0).__lt__, N))
        Nk = _packed(itertools.compress(N, keep))
        cs = _packed(map(operator.mul, map(rbs.__lt__, Nk), map(D.__mul__, Nk)))
        if upos is not None:  # u per position (zero12_offload_reduce_terms, every tensor with elements: keep all)
            us = _packed(itertools.compress(upos, keep))
        else:
            us = (_packed(map(um.get, zip(itertools.repeat(0), itertools.compress(A, keep)), itertools.repeat(0)))
                  if um else array.array("q", itertools.repeat(0, len(cs))))
        # a kept tensor's position among the kept ones, -1 for the others: (count so far) x kept - 1
        at = _packed(map(operator.sub, map(operator.mul, itertools.accumulate(keep), keep), itertools.repeat(1)))
        pos = [_packed(reversed(at)) if hook_order else at]
        del keep, Nk, at
    else:
        pos = [array.array("q", itertools.repeat(-1, len(lay.numels))) for lay in layouts]
        seen = [0] * G
        cs = array.array("q")
        us = array.array("q")
        for g, P, a, n in items:
            j = seen[g]
            seen[g] = j + 1
            if n <= 0 or not P:
                continue
            pos[g][len(pos[g]) - 1 - j if hook_order else j] = len(cs)
            cs.append(n * D if n > rbs else 0)
            us.append(um.get((g, a), 0) if um else 0)
    kall = array.array("q", itertools.accumulate(cs, initial=0))
    h = 2 * max(cs, default=0) if hook_order and hook_clone else 0
    T = len(cs)
    points: set[int] = set()
    for lay in layouts:
        if lay.P > 0:
            points |= _change_points(lay, W)
    starts = sorted({0, *(x for x in points if 0 <= x < W)})
    # per piece start r: its owned tensors (flush position, slice elements), in flush order
    owned_of: list[list[tuple[int, int]]] = []
    queries: list[tuple[int, int, int, int]] = []  # (right end, left end, O_r, piece)
    spans: list[tuple[int, int, int, int]] = []  # ZERO12_KEPT_COLS: (piece, pl, ph, O_r after the run)
    for i, r in enumerate(starts):
        if cols:
            # the loop below by C-level maps: the kept tensors meeting rank r's slice, (flush position, slice
            # elements) in flush order, and the queries at the extra-large ones
            lay = layouts[0]
            P = lay.P
            jl, jh = lay.meeting(r)
            lo, hi = r * P, (r + 1) * P
            ks = pos[0][jl:jh]
            A, N = lay.starts[jl:jh], lay.numels[jl:jh]
            sl = map(operator.sub, map(min, map(operator.add, A, N), itertools.repeat(hi)),
                     map(max, A, itertools.repeat(lo)))
            kk = list(map((-1).__lt__, ks))
            if ZERO12_KEPT_COLS:
                # already in flush order: positions rise with the flat index (flat order) or fall (hook order); two
                # columns (positions, slice elements), not a tuple per owned tensor (issue 21)
                kz, sz = list(itertools.compress(ks, kk)), list(itertools.compress(sl, kk))
                if hook_order:
                    kz.reverse()
                    sz.reverse()
            else:
                own = sorted(zip(itertools.compress(ks, kk), itertools.compress(sl, kk)))
                kz, sz = list(map(operator.itemgetter(0), own)), list(map(operator.itemgetter(1), own))
            owned_of.append((kz, sz))
            if ZERO12_KEPT_COLS and (not kz or kz[-1] - kz[0] + 1 == len(kz)):
                # the owned positions are one run [pl, ph) (the slice's tensors, kept ones, in flat order or its
                # reverse): no non-owned extra-large gradient lies inside it, so the non-owner moments are those
                # before pl (O_r = 0) and from ph on (O_r = every owned clone): a prefix and a suffix maximum below,
                # the queries' answers (a query's own owned position is a non-owner value under its owner one)
                pl, ph = (kz[0], kz[-1] + 1) if kz else (T, T)
                spans.append((i, pl, ph, sum(cs[pl:ph])))
                continue
            left, O = 0, 0
            for k in itertools.compress(kz, map(cs.__getitem__, kz)):
                queries.append((k, left, O, i))
                left, O = k + 1, O + cs[k]
            if left < T:
                queries.append((T - 1, left, O, i))
            continue
        own = []
        for g, lay in enumerate(layouts):
            P = lay.P
            if not P:
                continue
            jl, jh = lay.meeting(r)
            lo, hi = r * P, (r + 1) * P
            pg = pos[g]
            for j in range(jl, jh):
                k = pg[j]
                if k >= 0:
                    a, n = lay.starts[j], lay.numels[j]
                    own.append((k, min(a + n, hi) - max(a, lo)))
        own.sort()
        owned_of.append(own)
        left, O = 0, 0
        for k, _ in own:
            if cs[k]:
                queries.append((k, left, O, i))
                left, O = k + 1, O + cs[k]
        if left < T:
            queries.append((T - 1, left, O, i))
    best = [0] * len(starts)
    if spans:
        # the non-owner moment of each extra-large position k with O_r = 0 (the stack's v below), its prefix
        # maxima and suffix maxima over the extra-large positions, C-level
        xk = list(itertools.compress(range(T), cs))
        cz = list(itertools.compress(cs, cs))
        ck = list(map(operator.add, cz, itertools.compress(kall, cs)))
        uz = list(itertools.compress(us, cs))
        Mm = M.__mul__
        v = list(map(Mm, map(operator.add, map(Mm, map(operator.add, map(Mm, map(operator.add, ck, uz)), uz)), ck)))
        pre = list(itertools.accumulate(v, max))
        suf = list(itertools.accumulate(reversed(v), max))  # suf[X - 1 - n]: the largest of v[n:]
        X = len(v)
        del cz, ck, uz, v
        for i, pl, ph, O in spans:
            n = bisect.bisect_left(xk, pl)
            if n:
                best[i] = max(best[i], pre[n - 1])
            n = bisect.bisect_left(xk, ph)
            if n < X:
                best[i] = max(best[i], suf[X - 1 - n] - O * M3M)
    queries.sort()
    stack_k: list[int] = []
    stack_v: list[int] = []
    q = 0
    nq = len(queries)
    for k in itertools.compress(range(T) if queries else (), cs):  # only the extra-large positions have one
        while q < nq and queries[q][0] < k:
            _, left, O, i = queries[q]
            q += 1
            x = bisect.bisect_left(stack_k, left)
            if x < len(stack_k):
                best[i] = max(best[i], stack_v[x] - O * M3M)
        c, u, K = cs[k], us[k], kall[k]
        v = (((c + K + u) * M + u) * M + c + K) * M  # the non-owner moment of position k with O_r = 0
        while stack_v and stack_v[-1] <= v:
            stack_k.pop()
            stack_v.pop()
        stack_k.append(k)
        stack_v.append(v)
    for _, left, O, i in queries[q:]:
        x = bisect.bisect_left(stack_k, left)
        if x < len(stack_k):
            best[i] = max(best[i], stack_v[x] - O * M3M)
    for i, own in enumerate(owned_of):
        if isinstance(own, tuple) or (ZERO12_COLUMNS and own):
            # the loop below by C-level maps: O = the clones owned before each (exclusive prefix sums),
            # tot = c + K - O, the packed value (((s 8 + tot + u) M + u) M + tot) M + s. The one-group columns'
            # (positions, slice elements), the others' (position, slice elements) pairs
            if isinstance(own, tuple):
                kz, sz = own
                if not kz:
                    continue
            else:
                kz = list(map(operator.itemgetter(0), own))
                sz = list(map(operator.itemgetter(1), own))
            if kz[-1] - kz[0] + 1 == len(kz):  # consecutive positions: slices of the columns
                cz, uz, kalz = cs[kz[0]:kz[-1] + 1], us[kz[0]:kz[-1] + 1], kall[kz[0]:kz[-1] + 1]
            else:
                cz, uz, kalz = list(map(cs.__getitem__, kz)), list(map(us.__getitem__, kz)), map(kall.__getitem__, kz)
            tot = list(map(operator.sub, map(operator.add, cz, kalz),
                           itertools.accumulate(cz, initial=0)))
            Mm = M.__mul__
            v = map(operator.add, map(Mm, map(operator.add, map(Mm, map(operator.add, map(Mm, map(
                operator.add, map(operator.add, map((8).__mul__, sz), tot), uz)), uz)), tot)), sz)
            best[i] = max(best[i], max(v))
            continue
        O = 0
        for k, sl in own:
            c, u = cs[k], us[k]
            tot = c + kall[k] - O
            best[i] = max(best[i], (((sl * 8 + tot + u) * M + u) * M + tot) * M + sl)
            O += c

    def value_at(rs: Iterable[int]):
        for i, _ in enumerate(rs):
            x = best[i]
            yield (x % M, (x // M) % M, h, (x // M // M) % M)

    return Runs.at_points(W, starts, value_at)


def zero12_offload_flush_modeled(ec: EffectiveConfig, wrapper: str, ga: int = 1) -> bool:
    """Whether the ledger replays a ZeRO-1/2 offload reduce's flushes (:func:`zero12_offload_flush_bytes`,
    the u term of :func:`zero12_offload_reduce_terms`): CPU optimizer offload with
    ``contiguous_gradients`` on, the flushes of :func:`zero12_backward_transients`; ``overlap_comm`` off, or
    on at ZeRO-2. There ``overlap_comm`` only swaps the two ipg buffers after each flush
    (``stage_1_and_2.py`` l.1425-1427, the second one counted by :func:`ipg_bucket_bytes`) and runs
    average_tensor and the copy loop on ``reduction_stream`` (l.1593, l.2237-2238; None on a synchronized
    device, l.599): the flat copy (allreduce_bucket l.2367), the clone of a gradient over the bucket
    (l.1443-1446) and the fp64 norm copies (l.1886) are the same storages. Engine
    (tests/engine/test_peak_parity.py z2_bf16_oo_cpu_overlap_bigtensor_w2, 2026-12-05): rank 1's backward
    was +39,194 B (6.0%) without the replay, l1.bias's flush with l1.weight's gradient whole (u);
    z2_bf16_oo_cpu_overlap_w2 (one flush) matched either way. ZeRO-1 with ``overlap_comm`` under offload at
    GA 1: its hooks reduce in autograd's order as ZeRO-2's (process_gradients l.2290) and only owners drop a
    clone (l.2272-2274; the kept ones in hook order, :func:`_zero12_offload_reduce_runs`'s ``seq``). Engine
    z1_bf16_overlap_oo_cpu_bigtensor_w2 (2026-12-06): backward:1 rank 0 +38,580 B (l1.weight's clone, l.1446),
    rank 1 +85,548 B (l2.weight's clone and l1's gradients whole at l1.bias's flush) without the replay. At
    GA > 1 the boundary's hooks meet every param.grad micro-step 1 left (:func:`zero12_boundary_holds_all`):
    the same hook order, with the trigger and every later gradient whole at a flush, as ZeRO-1's epilogue.
    Engine z1_bf16_overlap_oo_cpu_tbsga2_bigtensor_w2 (2026-12-06), before: backward:2/4 rank 0 +38,578 B
    (l1.weight's clone, l.1446), rank 1 +124,076 B (l2.weight's clone 46,354 B and 77,662 B of param.grad made
    in micro-step 1's backward, engine.py l.3428). ``ga``: the plan's gradient accumulation steps."""
    z = ec.zero
    return z.stage in (1, 2) and zero12_offload_norm_modeled(ec, wrapper) and ec.contiguous_gradients_effective


def zero12_offload_flush_bytes(ec: EffectiveConfig, inv: Inventory, layouts: list[Zero12Layout], W: int,
                               wrapper: str = "DeepSpeedZeroOptimizer", ga: int = 1) -> int:
    """Bytes a ZeRO-1/2 reduce under CPU optimizer offload holds beside its persistent state before
    its fp64 norm copies, the same on every rank: max over bucket flushes j of the flat copy
    (allreduce_bucket's ``tensor = self.flatten(bucket)``, ``stage_1_and_2.py`` l.2367, reached from
    reduce_ipg_grads -> average_tensor -> allreduce_and_scatter, l.2228 / l.1708) + the gradients
    not yet in the bucket + an extra-large gradient reduced alone in its own storage (the flushes
    and terms of :func:`zero12_backward_transients`, :func:`_zero12_flush_replay`): at ZeRO-2 the
    triggering gradient and its autograd sibling, whole in their hook; at ZeRO-1, which moves every
    gradient in its boundary epilogue (reduce_gradients), the trigger and all after it, and before
    the first is moved all N x D of them (made by autograd in loss.backward, engine.py l.3428; its
    offload ledger has no lp_grads entry). The fp64 norm copies of
    :func:`zero12_offload_reduce_terms` come after the flat copy is freed, in the loop that follows
    the flush (copy_grads_in_partition -> set_norm_for_param_grad_in_gpu, l.2270-2274 / l.1886): the
    reduce holds the larger of the two moments, not their sum.
    Measured (tests/engine/test_peak_parity.py, TINY at W = 4, one flush of all 43,209 elements):
    z2_bf16_oo_cpu_w4 ranks 1 and 3, whose largest slices are 8,460 and 10,330 elements (fp64 67,680
    and 82,640 B), peak at the flat copy, 86,418 B = N x 2; z1_fp16_oo_cpu_w4 rank 1 at the N x 2 B
    of autograd gradients. 0 without contiguous_gradients. ZeRO-1 with ``overlap_comm`` at GA > 1 flushes in hook order
    with every unmoved gradient whole (:func:`zero12_boundary_holds_all`): the ZeRO-1 formula over that order.
    Bytes."""
    if not (layouts and zero12_offload_flush_modeled(ec, wrapper, ga)):
        return 0
    D, _, st, _, sizes, hooked, T, csum, flushes, _, copies, xl = _zero12_flush_replay(ec, inv, layouts, W)
    G = zero12_offload_grad_bytes(ec, wrapper, ga, len(layouts))
    # grad_accum (zero12_offload_fp32_accum), decided by dtype: a 16-bit accumulation dtype unlike the model's has
    # G = D bytes but is its own path (param.grad_accum, l.1237), which a byte compare would miss
    if zero12_offload_fp32_accum(ec, wrapper, ga, len(layouts)):
        # the flush's gradients, copies and clones in the accumulation dtype (G bytes):
        # the replay's copies[j] = E_j x D (+ E_j x C for a communication_data_type unlike the model's): E_j elements
        # flattened, in G here (allreduce_bucket l.2367), and cast to C unless C is that dtype (l.2376-2377)
        per = D + zero12_comm_cast_bytes(ec)
        flat = G + zero12_comm_cast_bytes(ec, ec.grad_dtype)
        # ZeRO-1 overlap_comm (st 2): the trigger's autograd sibling, a 16-bit param.grad not yet hooked; at GA > 1
        # every later grad_accum too (micro-step 1's, zero12_boundary_holds_all), at GA 1 only the trigger's own
        sib = (lambda k: (hooked[k] - sizes[k]) * D) if st == 2 else (lambda k: 0)
        if zero12_boundary_holds_all(ec, ga):
            unmoved = lambda k: (csum[T] - csum[k]) * G  # noqa: E731
        else:
            unmoved = lambda k: sizes[k] * G  # noqa: E731
        return max([csum[T] * G if zero12_boundary_holds_all(ec, ga) else 0]
                   + [copies[j] // per * flat + xl[j] // D * G + (0 if trig is None else unmoved(trig) + sib(trig))
                      for j, (_, trig) in enumerate(flushes)])
    if ZERO12_COLUMNS and len(flushes):
        # the two walks below by C-level maps: only the last flush is the epilogue's (no trigger, _Flushes)
        tr = flushes.trig[:-1]
        if st == 2 and not zero12_boundary_holds_all(ec, ga):
            un = map(hooked.__getitem__, tr)
            floor = 0
        else:
            un = map(csum[T].__sub__, map(csum.__getitem__, tr))
            if st == 2:
                un = map(operator.add, un, map(operator.sub, map(hooked.__getitem__, tr), map(sizes.__getitem__, tr)))
            floor = csum[T] * D
        return max(floor, max(map(operator.add, map(operator.add, copies, itertools.chain(map(D.__mul__, un), (0,))),
                                  xl)))
    if st == 2 and not zero12_boundary_holds_all(ec, ga):
        return max((copies[j] + (0 if trig is None else hooked[trig] * D) + xl[j]
                    for j, (_, trig) in enumerate(flushes)), default=0)
    # ZeRO-1 overlap_comm at GA > 1 (st 2, hook order): the trigger's autograd sibling is whole too
    sib = (lambda k: hooked[k] - sizes[k]) if st == 2 else (lambda k: 0)
    return max([csum[T] * D] + [copies[j] + (0 if trig is None else (csum[T] - csum[trig] + sib(trig)) * D) + xl[j]
                                for j, (_, trig) in enumerate(flushes)])


def zero12_offload_fp32_accum(ec: EffectiveConfig, wrapper: str, ga: int = 1, groups: int = 1) -> bool:
    """Whether the ledger models ZeRO-1 under CPU optimizer offload with ``grad_accum_dtype`` fp32 on a bf16 or fp16
    model: DeepSpeedZeroOptimizer (select_optimizer takes BF16_Optimizer only for bf16 without offload, engine.py
    l.2305-2310). An fp16 model takes the same code (use_grad_accum_attribute, ``stage_1_and_2.py`` l.397-404, asks only
    for an accumulation dtype unlike ``self.dtype``); what fp16 adds, the loss scaler and the overflow check
    (update_offload_overflow_tracker l.1791-1793 -> ``runtime/utils.py`` has_inf_or_nan l.228, amax / amin), holds
    scalars only. Engine (TINY W 2, GA 2, RBS 10,000, real Linears, 2026-12-06, 2 runs: z1_fp16_noncontig_oo_cpu_
    gaccfp32_tbsga2_w2): with the reduce counted in fp16 the bf16 cell's residuals to the byte (backward:1 +124,978 B,
    backward:2 +172,878 / +172,276 B, step:2 +126,476 / +203,540 B on ranks 0 / 1), now every phase within 0.16%. Any
    param groups
    (``groups``, kept for the callers: the hooks run in autograd's order across groups, the compact partitions are all
    made in the boundary reduce, :func:`zero12_offload_fp32_accum_kept` meets each group's slice; engine
    z1_bf16_noncontig_oo_cpu_gaccfp32_groups_tbsga2_w2, TINY_FROZEN_GROUPS, 2026-12-06, 2 runs: only step:2 / step:4
    rank 0 +38,476 / +40,070 B before, the fp32 ipg bucket kept by l1.bias's and l3.bias's grad_accum; now every phase
    within 0.4%, as its overlap_comm and GA-1 twins in probes, 1 run each), ``overlap_comm`` on or off (``contiguous_gradients`` is forced on, ``stage_1_and_2.py`` l.299-300), any GA
    (measured: tests/engine/test_peak_parity.py z1_bf16_noncontig_oo_cpu_gaccfp32_tbsga2_w2 at GA 2, every phase within
    0.16%; its GA-1 twin in a probe run, 2026-12-06, before: backward:1/2 +172,878 / +172,276 B, step:1/2 +126,476 /
    +203,540 B on ranks 0 / 1, the same storages). With ``overlap_comm`` the boundary's hooks reduce in autograd's
    order (process_gradients l.2290 -> reduce_ready_partitions_and_remove_grads l.2294; reduce_gradients skips its
    loop, l.971): a flush's fp32 flat copy (allreduce_bucket l.2367) and its cast to ``communication_data_type``
    (l.2376-2377) sit beside the grad_accum not yet moved and the trigger's autograd sibling, a 16-bit param.grad not
    yet hooked (:func:`zero12_offload_flush_bytes`, :func:`zero12_offload_reduce_terms`); at GA > 1 every later
    grad_accum (micro-step 1's, :func:`zero12_boundary_holds_all`), at GA 1 the trigger's only, and there the hooks
    hold one fp32 copy at a time (A1o of :func:`zero12_offload_fp32_accum_hooks`). Engine
    z1_bf16_noncontig_oo_cpu_gaccfp32_overlap_tbsga2_w2 (2026-12-06, 2 runs) was backward:2/4 +242,374 B (rank 0,
    36.3%) / +171,972 B (rank 1) over the ledger before any fp32 term, +84,238 / -38,464 B with the overlap-off terms
    (the cast 46,354 B and l1.weight's 16-bit gradient 38,528 B missing at rank 0's l2.weight flush; the sibling
    counted at 4 B on rank 1), now every phase within 0.16%; its GA-1 twin (probe, 1 run) -77,024 / -46,966 B at
    backward with GA 2's unmoved terms, now within 0.16%. The gradients are then fp32
    ``param.grad_accum`` storages (use_grad_accum_attribute, l.397-404: dtype != gradient_accumulation_dtype and
    stage 1), not the 16-bit param.grad, from the first hook to the boundary reduce:

    - each hook (process_gradients l.2288-2289 -> _fill_param_grad_accum_attribute l.1234-1240) makes
      ``param.grad.to(fp32)`` (l.1237; at a later micro-step that copy is added into the kept one, l.1239) and then
      drops param.grad: micro-step 1's moment is the fp32 copies so far beside the hook's 16-bit gradient and its
      autograd sibling's, a later micro-step's all N x 4 beside a new gradient, its fp32 copy and the sibling
      (:func:`zero12_offload_fp32_accum_hooks`); the N x 4 live into the next forward (no epilogue before the
      boundary at stage 1, engine.py allreduce_gradients l.3088-3092);
    - the boundary's reduce (reduce_gradients' loop, l.971-976) moves grad_accum into the fp32 ipg bucket (setup_buckets
      l.3266, _gradient_reduction_buffer_dtype l.1253-1254) or clones it in fp32 when over the bucket (l.1446): the
      flush terms of :func:`zero12_offload_reduce_terms` / :func:`zero12_offload_flush_bytes` with 4-byte gradients;
    - _use_compact_grad_partition_buffer (l.1259-1266) holds: average_tensor writes the rank's slices into the compact
      fp32 partition (_get_compact_grad_partition_slice l.1312-1321, built l.1268-1270, P x 4), live through the step
      until ``self.averaged_gradients[i] = None`` after the group's _optimizer_step (l.3084, l.3098); the fp64 norm copy
      of each slice is copy_grads_in_partition's (l.2152), s x 8 as set_norm_for_param_grad_in_gpu's;
    - copy_grads_in_partition clears grad_accum of the rank's own gradients only (clear_grad_attribute l.2159); the
      others stay (reduce_ipg_grads l.2272-2274 at stage 1), as views of the ipg bucket or their fp32 clones, past
      the epilogue (_clear_param_grad_only l.2630-2640 keeps grad_accum) into the step, until zero_grad
      (l.2613-2624, from engine.py _take_model_step l.3525-3526): :func:`zero12_offload_fp32_accum_kept`.
    A 16-bit ``grad_accum_dtype`` unlike the model's (bf16 model with fp16, fp16 with bf16) takes the same
    param.grad_accum path (l.397-404 ask only for a dtype unlike ``self.dtype``) in G = 2 bytes, with no compact
    partition (_use_compact_grad_partition_buffer l.1260-1262: fp32 only), so the reduced slices go to the host as the
    model dtype's do: every term here in G bytes (:func:`zero12_offload_grad_bytes`), no compact partition. Engine
    (TINY W 2, GA 2, RBS 10,000, real Linears, 2026-12-06, bf16 with fp16 accumulation): with the model-dtype terms
    backward:1 +38,560 B on both ranks (the hook's grad_accum copy beside its gradient, A1), step:2 / step:4
    +20,052 / +58,588 B on ranks 0 / 1 (the 16-bit ipg bucket and rank 1's clone of l1.weight, kept by grad_accum to
    the step: :func:`zero12_offload_fp32_accum_kept`). An fp32 model with a 16-bit accumulation dtype takes the same
    path (l.397-404) with D = 4 and G = 2, the ipg bucket in G (l.1253-1254, :func:`ipg_bucket_bytes`). Engine (TINY W
    2, GA 2, RBS 10,000, real Linears, 2026-12-06, fp32 with bf16, 2 probe runs, the same bytes) with the model-dtype
    terms: every phase from backward:1 on 18,744-105,166 B (12.7%) over the engine (N x 4 of gradients counted where
    grad_accum holds N x 2, l.1237), step:2 / step:4 +20,068 / +58,604 B under (the bf16 bucket and rank 1's bf16 clone
    of l1.weight kept to the step, l.3266 / l.1446); with these terms and an fp32 bucket -18,748 B at forward:2 (the
    bucket RBS x 2, not x 4); now every phase within 0.20% (the forward's proxy inputs), as with fp16 accumulation,
    overlap_comm and at GA 1 (probes, one run each; tests/engine/test_peak_parity.py z1_fp32_oo_cpu_gaccbf16_tbsga2_w2)."""
    z = ec.zero
    return (z.stage == 1 and wrapper == "DeepSpeedZeroOptimizer" and ec.offload_optimizer_effective == "cpu"
            and ((ec.model_dtype in ("bf16", "fp16") and ec.grad_dtype in ("fp32", "fp16", "bf16"))
                 or (ec.model_dtype == "fp32" and ec.grad_dtype in ("fp16", "bf16")))
            and ec.grad_dtype != ec.model_dtype)


def zero12_offload_grad_bytes(ec: EffectiveConfig, wrapper: str, ga: int = 1, groups: int = 1) -> int:
    """Bytes per element of the gradients a ZeRO-1/2 offload reduce moves: the ``grad_accum_dtype``'s under
    :func:`zero12_offload_fp32_accum` (param.grad_accum, ``stage_1_and_2.py`` l.1237), else the model dtype's."""
    return (DTYPE_BYTES[ec.grad_dtype] if zero12_offload_fp32_accum(ec, wrapper, ga, groups)
            else DTYPE_BYTES[ec.model_dtype])


def zero12_offload_fp32_accum_hooks(ec: EffectiveConfig, inv: Inventory) -> tuple[int, int, int]:
    """(A1, A2, A1o), bytes, of the backward hooks under :func:`zero12_offload_fp32_accum`, hooks in autograd's order
    (the reverse of the model's; an nn.Linear's bias first, its weight whole: :func:`autograd_siblings`).
    A1 = max_k (4 x c_k + D x (n_k + s_k)): micro-step 1's hook k, with c_k the elements hooked up to and including
    k (each made ``param.grad.to(fp32)``, ``stage_1_and_2.py`` l.1237, before param.grad is dropped, l.1240), n_k its
    16-bit gradient and s_k its autograd sibling's (4: G, the grad_accum dtype's bytes, 2 for a 16-bit one).
    A2 = 4 x N + max_k ((4 + D) x n_k + D x s_k): a later
    micro-step's hook, every grad_accum kept, its new gradient, the fp32 copy added into grad_accum (l.1239) and the
    sibling. A1o = max_k (4 x n_k + D x (n_k + s_k) + [n_{k-1} > RBS] 4 x n_{k-1}): the hooks of a boundary that is
    also micro-step 1 with ``overlap_comm`` (GA 1), where each hook moves its grad_accum into the fp32 ipg bucket at
    once (process_gradients l.2288-2291 -> reduce_independent_p_g_buckets_and_remove_grads, ``grad_reduc.data =
    new_grad_tensor.data`` l.1461 frees the copy) or clones it when over the bucket (l.1446), that clone reduced
    by the next hook's flush (extra_large_param_to_reduce, l.2213-2227), so at hook k only the previous hook's
    clone is beside it. D = model dtype bytes, N the trainable elements, RBS = reduce_bucket_size. Engine probe
    (TINY W 2, GA 1, overlap_comm, 2026-12-06): backward:1 -77,024 / -46,966 B on ranks 0 / 1 with A1 in its place."""
    D = DTYPE_BYTES[ec.model_dtype]
    G = DTYPE_BYTES[ec.grad_dtype]  # 4 for fp32 as written above; a 16-bit accumulation dtype's copies are G = 2
    rbs = int(ec.zero.reduce_bucket_size)
    sib = autograd_siblings(inv)
    a1 = a2 = a1o = c = prev = 0
    N = sum(t.numel for t in inv.tensors if t.trainable)
    for i in range(len(inv.tensors) - 1, -1, -1):
        t = inv.tensors[i]
        if not t.trainable:
            continue
        c += t.numel
        a1 = max(a1, G * c + D * (t.numel + sib[i]))
        a2 = max(a2, (G + D) * t.numel + D * sib[i])
        a1o = max(a1o, G * t.numel + D * (t.numel + sib[i]) + (G * prev if prev > rbs else 0))
        prev = t.numel
    return a1, G * N + a2, a1o


def zero12_offload_fp32_accum_kept(ec: EffectiveConfig, layouts: list[Zero12Layout], W: int,
                                   buffer_of: "list[list[int]] | None" = None) -> Runs:
    """Runs of, per rank r, the bytes of grad_accum storages the boundary reduce leaves to the step under
    :func:`zero12_offload_fp32_accum` (any param groups): the fp32 clone (``stage_1_and_2.py`` l.1446) of every
    gradient over ``reduce_bucket_size`` whose tensor does not meet r's slice, n_p x 4, plus the fp32 ipg bucket
    (RBS x 4, setup_buckets l.3266), which _release_ipg_buffers (l.924-930) only un-references, when a gradient moved
    into it does not meet r's slice (its grad_accum is a view of it, reduce_independent_p_g_buckets_and_remove_grads l.1456-1461, and
    is not cleared: only is_param_in_current_partition ones are copied and cleared, l.2272-2274 / l.2159). Freed by
    zero_grad after the step (l.2613-2624). Several param groups: a tensor meets r's slice of its own group's
    partition (each group its own flat buffer, get_data_parallel_partitions l.2559), the clones summed over the groups
    and the one ipg bucket (every group's hooks fill it) kept where any group's bucketed gradient misses the slice;
    engine (TINY_FROZEN_GROUPS, W 2, GA 2, 2 runs, 2026-12-06): step:2 / step:4 rank 0 +38,476 / +40,070 B without the
    bucket (l1.bias and l3.bias miss rank 0's slices), now within 0.4%. O(tensors + points x groups x log tensors).
    ``buffer_of``: with ``overlap_comm`` (:func:`zero1_compact_grad_accum`) the bucket has two buffers and a gradient
    sits in the one its flush used (per group, per tensor: 0 or 1, :func:`_zero1_overlap_buffers`); each buffer a
    missing gradient sits in is kept (RBS x 4 each)."""
    rbs = int(ec.zero.reduce_bucket_size)
    G = DTYPE_BYTES[ec.grad_dtype]  # the grad_accum dtype's bytes: 4 above, 2 for a 16-bit one (clones and bucket)
    cols = []
    for gi, lay in enumerate(layouts):
        N = lay.numels
        par = buffer_of[gi] if buffer_of else None
        cols.append((lay, list(itertools.accumulate((n * G if n > rbs else 0 for n in N), initial=0)),
                     [list(itertools.accumulate((1 if 0 < n <= rbs and (par[i] if par else 0) == b else 0
                                                 for i, n in enumerate(N)), initial=0)) for b in (0, 1)], len(N)))

    def value_at(rs: Iterable[int]):
        for r in rs:
            kept = 0
            small = [0, 0]
            for lay, xcum, scums, T in cols:
                jl, jh = lay.meeting(r) if lay.P > 0 else (0, 0)
                jh = max(jh, jl)
                kept += xcum[T] - (xcum[jh] - xcum[jl])
                for b, scum in enumerate(scums):
                    small[b] += scum[T] - (scum[jh] - scum[jl])
            yield kept + rbs * G * sum(1 for v in small if v > 0)

    if W <= sum(c[3] for c in cols):
        pts = set(range(W))
    else:
        pts = {0}
        for lay in layouts:
            if lay.P > 0:
                pts |= _change_points(lay, W)
    return Runs.at_points(W, pts, value_at)


def _zero1_overlap_buffers(ec: EffectiveConfig, inv: Inventory, layouts: list[Zero12Layout], W: int) -> list[list[int]]:
    """Per param group, per tensor: which of the two ipg buffers (0 / 1) its gradient is copied into at the
    accumulation boundary under :func:`zero1_compact_grad_accum` with ``overlap_comm``: setup_buckets resets the index
    to 0 (``stage_1_and_2.py`` l.3270) and every flush a hook triggers swaps it (l.1427-1429, extra-large and empty
    flushes included), so the gradients of the replay's flush j sit in buffer j mod 2 (:func:`_zero12_flush_replay`,
    hook order). Engine (TINY W 2, 2026-12-06): l3.*, l2.bias (flush 0) and l1.bias (flush 2, after l2.weight's
    extra-large flush 1) all in buffer 0, setup_buckets l.3266."""
    _, _, _, order, *_rest = _zero12_flush_replay(ec, inv, layouts, W)
    flushes = _rest[4]
    out = [[0] * len(lay.numels) for lay in layouts]
    grp = order.groups
    for j, (ks, _) in enumerate(flushes):
        for k in ks:
            g = 0 if grp is None else grp[k]
            i = bisect.bisect_left(layouts[g].starts, order.starts[k])
            while i + 1 < len(layouts[g].numels) and layouts[g].numels[i] == 0:
                i += 1  # a zero-size tensor shares its start
            out[g][i] = j % 2
    return out


def zero12_offload_compact(ec: EffectiveConfig, wrapper: str, groups: int = 1) -> bool:
    """Whether the ledger models ZeRO-2 under CPU optimizer offload with ``grad_accum_dtype`` fp32 on a bf16 or fp16
    model: DeepSpeedZeroOptimizer, any number of param groups, ``overlap_comm`` on or off, any
    ``communication_data_type``, any GA. fp16: the same path (_use_compact_grad_partition_buffer l.1259-1266 asks
    only for fp32 accumulation unlike ``self.dtype``; the overflow check holds scalars, ``runtime/utils.py`` l.228);
    engine probe (TINY W 2, GA 2, 2026-12-06, 2 runs) had the bf16 cell's coarse residuals to the byte (backward:1
    +78,024 / +132,140 B), now within 0.16%. A ``communication_data_type`` unlike the model's: allreduce_bucket
    casts each run to it (l.2376-2377, :func:`zero12_comm_cast_bytes`) and returns the cast, the flat copy freed
    (l.2391-2393) before _add_to_grad_partition_buffer casts the rank's slice to fp32 (l.1326), which copies nothing
    when the communication is fp32 (:func:`_compact_microstep_value`). Engine probes (TINY W 2, GA 2, bf16, 2026-12-06,
    2 runs): fp32 communication backward:1 +86,456 / +85,522 B coarse, -14,416 / -84,512 B with the slice cast
    counted (it is fp32 already), fp16 communication +116,552 / +132,140 B coarse, +38,556 B on rank 0 with the cast
    compared by bytes (bf16 to fp16 is a copy of the same size); now every phase within 0.16%.
    Several param groups (``groups``, kept for the callers): one compact buffer per group, made at the
    rank's first flush holding a slice of that group (l.1303-1310; :func:`_compact_groups_microstep_value`); engine
    z2_bf16_noncontig_oo_cpu_gaccfp32_groups_tbsga2_w2 (TINY_FROZEN_GROUPS, 2026-12-06, 2 runs, the same bytes):
    backward:1 +78,314 / +76,486 B (21.7%) on ranks 0 / 1 before (one group's buffer 39,920 B, l.1270, and the fp32
    cast of the rank's slice 39,136 / 37,920 B, l.1326, at the epilogue's flush), the later phases already within
    0.4%; now every phase within 0.4% (step:2 -0.40%, the one step instant for both groups). ``overlap_comm`` only adds the second ipg buffer (``stage_1_and_2.py`` l.3272-3278, counted by
    :func:`ipg_bucket_bytes`) and runs the reduce on reduction_stream: engine z2_bf16_noncontig_oo_cpu_gaccfp32_overlap_tbsga2_w2
    (2026-12-06, 2 runs) had the overlap-off cell's residuals to the byte before (backward:1 +78,024 / +132,140 B,
    rank 1 +39,2xx B later), now every phase within 0.16%, as its GA-1 twin (probe).
    The gradients stay 16-bit param.grad (use_grad_accum_attribute is stage 1 only, ``stage_1_and_2.py`` l.401-404),
    reduced in the hooks as without fp32 accumulation, but _use_compact_grad_partition_buffer (l.1259-1266) holds, so
    average_tensor adds the rank's reduced slices, each cast to fp32 (_add_to_grad_partition_buffer
    ``source.to(output.dtype)`` l.1324-1326), into the compact fp32 partition P x 4 (built at the rank's first slice,
    _get_compact_grad_partition_slice l.1312-1321 / l.1268-1270), and copy_grads_in_partition's offload branch
    (l.2145-2161) only records the parameter before the boundary: no accumulated_grads_in_cpu host buffer
    (async_accumulate_grad_in_cpu_via_gpu is the other branch, l.2162-2169), the compact partition accumulates on the
    accelerator across micro-steps, and at the boundary its slices' fp64 norm copies (l.2152) and the copy to the
    host fp32 gradient replace the 16-bit ones; step frees it (l.3098). Engine probes (TINY W 2, RBS 10,000, real
    Linears, 2026-12-06): GA 1 every phase from backward on +86,476-86,504 B (the compact partition) on both ranks;
    GA 2 backward:1 +78,024 / +132,140 B on ranks 0 / 1 (the compact partition and the cast of the rank's slice,
    l.1326, beside the flush), later phases the compact partition less the host buffers counted
    (rank 1 +39,2xx B)."""
    z = ec.zero
    return (z.stage == 2 and wrapper == "DeepSpeedZeroOptimizer" and ec.offload_optimizer_effective == "cpu"
            and ec.model_dtype in ("bf16", "fp16") and ec.grad_dtype == "fp32")


def zero12_offload_microstep_modeled(ec: EffectiveConfig, wrapper: str, ga: int, groups: int) -> bool:
    """Whether the ledger replays the reduce inside a ZeRO-2 micro-step before the accumulation boundary
    under CPU optimizer offload (:func:`zero12_offload_microstep_terms`): the flushes replayed
    (:func:`zero12_offload_flush_modeled`), GA > 1, any param groups (``groups``, kept for the callers). Other
    plans keep the boundary's reduce terms at micro-step 1 and ``offload_accumulated_grads_cpu`` from
    initialize."""
    return ec.zero.stage == 2 and ga > 1 and zero12_offload_flush_modeled(ec, wrapper)


def zero12_offload_microstep_terms(ec: EffectiveConfig, inv: Inventory, layouts: list[Zero12Layout], W: int,
                                   wrapper: str = "DeepSpeedZeroOptimizer") -> Runs:
    """Runs of, per rank, (a_r, h_r), bytes: the reduce inside the first micro-step of a ZeRO-2 iteration
    at GA > 1 under CPU optimizer offload (:func:`zero12_offload_microstep_modeled`), before the
    accumulation boundary. a_r = the most accelerator bytes live at one moment of it beside the persistent
    state and the ipg buckets; a_r + h_r = the most bytes of any moment counting the host buffers the
    reduce allocates (h_r: host bytes, at most I_r x D).

    The hooks and flushes are those of :func:`_zero12_flush_replay`; what differs from the boundary
    (``stage_1_and_2.py`` copy_grads_in_partition l.2161-2174): a gradient meeting the rank's slice goes to
    async_accumulate_grad_in_cpu_via_gpu (l.1809), which allocates its host buffer
    ``accumulated_grads_in_cpu[param_id]`` (torch.zeros(n_p), model dtype, l.1822-1824) at the
    iteration's first micro-step and copies the gradient into it; no fp64 norm copy
    (set_norm_for_param_grad_in_gpu only at the boundary) and no clear_grad_attribute (only
    async_inplace_copy_grad_to_fp32_buffer_from_gpu clears, l.1912), so the clone of a gradient over the
    bucket (l.1443-1446) that the rank owns part of stays in param.grad to the epilogue's
    _clear_param_grad_only (l.1063); one it owns none of is dropped after its flush (l.2267). Moments, in
    hook order (the buffers made and clones kept so far beside each): a flush before its copy loop (its
    flat copy, the triggering gradient and its autograd sibling, a clone reduced alone: the terms of
    :func:`zero12_offload_flush_bytes`), the same flush after its flat copy is freed with its buffers
    made, and each hook after the flush it triggers (its gradient and sibling whole; a gradient over the
    bucket twice, the clone beside it). The epilogue frees the clones; the buffers are kept for good
    (``offload_accumulated_grads_cpu``, from this reduce on). Engine (tests/engine/test_peak_parity.py
    z2_bf16_oo_cpu_overlap_bigtensor_tbsga2_w2, real Linears, reduce_bucket_size 10,000): rank 0 peaks after
    the epilogue's flush of l1.weight's clone, holding it (38,528 B), l2.weight's clone (46,354 B) and the
    buffers of l1.weight, l1.bias and l2.weight (85,484 B); rank 1, which owns no part of l1, as l1.weight
    is cloned (2 x 38,528 B) beside l2.weight's clone and its own buffers (47,288 B); TINY at 50,000 (one
    flush) at the flush's flat copy, 86,418 B, before any buffer. Only the iteration's first micro-step has
    a timeline instant (``reduce:1``): the later ones before the boundary hold the buffers from the start,
    measured below the boundary's backward in every cell (backward:3 vs backward:4 at GA 2).
    Several param groups: the hooks fill one bucket across groups and a rank owns the tensors meeting its slice
    of their own group's buffer, one run of each group's (:class:`_GroupRuns`); engine
    z2_bf16_oo_cpu_overlap_groups_tbsga2_w2 (TINY_FROZEN_GROUPS): initialize / forward:1 were 13.0% over on
    both ranks, backward:1 17.0% over, before. O(tensors + flushes) per piece of ranks with one param group
    (the tensors meeting a slice are one run of the hook order); with several, the moments between a rank's
    first and last owned tensor times the groups."""
    if not layouts:
        return Runs.const(W, (0, 0))
    D, rbs, st, order, sizes, hooked, T, csum, flushes, _, copies, xl = _zero12_flush_replay(ec, inv, layouts, W)
    lay = layouts[0]
    G = len(layouts)
    compact = zero12_offload_compact(ec, wrapper, G)
    clones = zero12_offload_xl_clone_modeled(ec, wrapper) and max(sizes, default=0) > rbs
    if clones:
        big = [n if n > rbs else 0 for n in sizes]
        xcum = list(itertools.accumulate(big, initial=0))  # elements of clones before a hook position
        seen = list(map(operator.add, hooked, big))        # a hook's gradients: its own, its sibling, a clone
    else:  # no gradient over the bucket (generate's large buckets): nothing cloned, O(tensors) at C level
        xcum = None
        seen = hooked
    # moments (x, y, R): value = R + D (meet(x) + keep(y)), its host part D meet(x); emitted in (x, y) order
    # (flush j at s_j, its bucket's hooks at s_j, its end at (s_{j+1}, s_j), then flush j + 1 at s_{j+1})
    mom: list[tuple[int, int, int]] = []
    # zero12_offload_compact: per moment, the hook position from which the rank's compact partition exists (it is
    # built at the flush holding the rank's first slice) and, for a flush, its positions (the cast of the rank's
    # largest slice in it, l.1326, is live there)
    cpos: list[int] = []
    span: list = []
    # zero12_offload_compact with a communication_data_type unlike the model's: allreduce_bucket returns the cast
    # (l.2393), so the flush's flat copy (copies[j] less the cast of its E_j elements) is freed before
    # _add_to_grad_partition_buffer casts a slice to fp32 (l.1326; no copy there when the cast is already fp32)
    cast = zero12_comm_cast_bytes(ec)
    for j, (ks, trig) in enumerate(flushes):
        u = (hooked[trig] * D) if trig is not None else 0
        xj = xl[j] if clones else 0
        s0, s1 = ks.start, ks.stop
        mom.append((s0, s0, copies[j] + u + xj))          # the flush, before its copy loop
        cpos.append(s1)
        span.append((s0, s1, copies[j] - (csum[s1] - csum[s0]) * cast if cast else 0))
        if s1 > s0:                                        # the hooks of its bucket's gradients (before it)
            mom.append((s0, s0, max(seen[s0:s1]) * D))
            cpos.append(s0)
            span.append(None)
        mom.append((s1, s0, u + xj))                      # after it: its buffers made, the flat copy freed
        cpos.append(s1)
        span.append(None)
    # bytes per element of _add_to_grad_partition_buffer's fp32 cast of a reduced slice (l.1326): none when the
    # communication_data_type is fp32 (allreduce_bucket returned an fp32 tensor, ``source.to(fp32)`` is itself)
    S4 = 0 if ec.comm_dtype == "fp32" else 4
    xs = [m[0] for m in mom]
    ys = [m[1] for m in mom]
    Rs = [m[2] for m in mom]
    n_m = len(mom)
    pre = list(itertools.accumulate(Rs, max))
    suf = list(itertools.accumulate(reversed(Rs), max))[::-1] + [None]
    if G > 1:  # a rank meets one run of each group's tensors in hook order
        gruns = _GroupRuns(order, G, order.numels)
        gclone = _GroupRuns(order, G, big).cum if xcum is not None else None

    def value_at(rs: Iterable[int]):
        for r in rs:
            if G == 1:
                jl, jh = lay.meeting(r) if lay.P > 0 else (0, 0)
                a, b = (T - jh, T - jl) if jh > jl else (0, 0)  # hook order is the reverse of model order

                def meet(x: int, a: int = a, b: int = b) -> int:
                    return csum[min(max(x, a), b)] - csum[a]

                def keep(x: int, a: int = a, b: int = b) -> int:
                    return xcum[min(max(x, a), b)] - xcum[a] if xcum is not None else 0
            else:
                a, b, runs = gruns.runs(layouts, r)

                def meet(x: int, runs: list = runs) -> int:
                    return gruns.before(runs, x)

                def keep(x: int, runs: list = runs) -> int:
                    return gruns.before(runs, x, gclone) if gclone is not None else 0
            if compact and G == 1:
                yield _compact_microstep_value(lay, r, a, b, T, mom, cpos, span, pre, suf,
                                               lambda x, keep=keep: keep(x) * D, S4)
                continue
            if compact:
                yield _compact_groups_microstep_value(layouts, order, gruns, runs, r, a, b, mom, cpos, span, pre, suf,
                                                      lambda x, keep=keep: keep(x) * D, T, S4)
                continue
            i1 = bisect.bisect_right(xs, a)  # moments 0..i1-1: nothing made or kept yet
            acc_best = comb_best = pre[i1 - 1] if i1 else 0
            i = i1
            while i < n_m and ys[i] < b:
                x, y, R = mom[i]
                k = keep(y) * D
                acc_best = max(acc_best, R + k)
                comb_best = max(comb_best, R + k + meet(x) * D)
                i += 1
            if i < n_m:
                full_k, full_m = keep(T) * D, meet(T) * D
                acc_best = max(acc_best, suf[i] + full_k)
                comb_best = max(comb_best, suf[i] + full_k + full_m)
            yield acc_best, comb_best - acc_best

    # every rank where there are fewer ranks than tensors (the change points cost O(tensors) to find), else
    # the ranks where a figure may change
    if W <= T:
        pts = set(range(W))
    else:
        pts = set()
        for lg in layouts:
            if lg.P > 0:
                pts |= _change_points(lg, W)
    return Runs.at_points(W, pts, value_at)


def _compact_microstep_value(lay: Zero12Layout, r: int, a: int, b: int, T: int, mom: list, cpos: list, span: list,
                             pre: list, suf: list, keep, S4: int = 4) -> tuple[int, int]:
    """(a_r, 0) of :func:`zero12_offload_microstep_terms` under :func:`zero12_offload_compact` for rank r of one
    param group, whose tensors are hook positions [a, b): each moment's bytes R + the clones kept (keep, x D) + the
    compact partition P x 4 once the flush holding the rank's first slice has run (cpos) + at a flush the fp32 cast of
    the rank's largest slice in it (``stage_1_and_2.py`` _add_to_grad_partition_buffer l.1326, s x S4); no host buffer
    (copy_grads_in_partition l.2145-2161 returns before the boundary). Moments before the rank's range hold none of
    these (the prefix maximum), those after it all the clones and the partition (the suffix maximum). ``keep``:
    bytes of the clones kept before a hook position. ``S4``: 4, or 0 with fp32 communication (the reduced slice is
    fp32 already, l.1326 copies nothing). With a ``communication_data_type`` unlike the model's the flush's flat copy
    (span[i][2] bytes) is freed when allreduce_bucket returns its cast (l.2391-2393), before the slices are cast: the
    flush holds R, then R - flat + s x S4, so the larger of the two (engine, TINY W 2 GA 2, bf16 with fp16
    communication: rank 1's l2.weight flush 718,030 B, the flat copy 46,354 B freed beside the 84,544 B slice cast;
    with fp32 communication rank 1 was 84,512 B over with the cast counted)."""
    P4 = lay.P * 4 if b > a else 0
    n_m = len(mom)
    best = 0
    i = 0
    # moments wholly before the rank's first tensor: neither partition nor clones nor casts
    while i < n_m and cpos[i] <= a and (span[i] is None or span[i][1] <= a):
        i += 1
    if i:
        best = pre[i - 1]
    A, Nn = lay.starts, lay.numels
    lo_r, hi_r = r * lay.P, (r + 1) * lay.P
    while i < n_m and mom[i][1] < b:
        x, y, R = mom[i]
        v = R + keep(y) + (P4 if cpos[i] > a else 0)
        sp = span[i]
        if sp is not None and b > a:
            s_best = 0
            for k in range(max(sp[0], a), min(sp[1], b)):
                m = T - 1 - k  # hook order is the reverse of model order
                s_best = max(s_best, min(A[m] + Nn[m], hi_r) - max(A[m], lo_r))
            v += max(0, s_best * S4 - sp[2])
        best = max(best, v)
        i += 1
    if i < n_m:
        best = max(best, suf[i] + keep(T) + P4)
    return best, 0


def _compact_groups_microstep_value(layouts: list[Zero12Layout], order: "_FlushOrder", gruns: "_GroupRuns",
                                    runs: list, r: int, a: int, b: int, mom: list, cpos: list, span: list, pre: list,
                                    suf: list, keep, T: int, S4: int = 4) -> tuple[int, int]:
    """:func:`_compact_microstep_value` with several param groups: (a_r, 0), bytes, for rank r whose tensors of group
    g are the hook positions of ``runs`` (:meth:`_GroupRuns.runs`; [a, b) from the first to the last). Each group has
    its own compact fp32 buffer P_g x 4 (``stage_1_and_2.py`` _get_compact_grad_partition_buffer(group_idx)
    l.1303-1310), made by average_tensor at the flush holding the rank's first slice of THAT group
    (_get_compact_grad_partition_slice l.1312-1321, per slice at l.1674): a moment holds R + the clones kept + the
    buffers of the groups whose first hook position the moment has passed (cpos) + at a flush the fp32 cast of the
    rank's largest slice in it (_add_to_grad_partition_buffer l.1326, s x 4; the slice of tensor k within its own
    group's partition r x P_g .. (r + 1) x P_g). Moments before a hold none of these (the prefix maximum), those
    from b on every buffer and clone (the suffix maximum); ``S4`` and the flat copy freed before the slice casts
    (span[i][2]) as there. O(moments in [a, b) x (groups + bucket tensors))."""
    bufs = [(gruns.pos[g][x0], layouts[g].P * 4) for g, x0, _ in runs]
    allb = sum(p4 for _, p4 in bufs)
    grp = order.groups

    def slice_of(k: int) -> int:
        g = 0 if grp is None else grp[k]
        P = layouts[g].P
        st, n = order.starts[k], order.numels[k]
        return max(0, min(st + n, (r + 1) * P) - max(st, r * P))

    n_m = len(mom)
    best = 0
    i = 0
    while i < n_m and cpos[i] <= a and (span[i] is None or span[i][1] <= a):
        i += 1
    if i:
        best = pre[i - 1]
    while i < n_m and mom[i][1] < b:
        x, y, R = mom[i]
        v = R + keep(y) + sum(p4 for f, p4 in bufs if cpos[i] > f)
        sp = span[i]
        if sp is not None and b > a:
            v += max(0, max((slice_of(k) for k in range(max(sp[0], a), min(sp[1], b))), default=0) * S4 - sp[2])
        best = max(best, v)
        i += 1
    if i < n_m:
        best = max(best, suf[i] + keep(T) + allb)
    return best, 0


def zero12_groups_stepped_apart(ec: EffectiveConfig, wrapper: str, ngroups: int) -> bool:
    """Whether the timeline steps a ZeRO-1/2 plan one param group at a time
    (:func:`zero12_step_groups`): DeepSpeedZeroOptimizer without optimizer offload, a 16-bit or fp32
    model whose gradients accumulate in the model dtype (no compact fp32 partition buffer,
    ``stage_1_and_2.py`` _use_compact_grad_partition_buffer), more than one trainable param group.
    Checked against the engine's allocation tracker (tests/engine/test_peak_parity.py, two
    groups: z2_bf16_groups_w2, z1_bf16_groups_w2, z2_fp32_groups_w2, z1_fp32_groups_w2; the fp32
    cells' step:1 was 11.3% under on rank 1 with one step instant); other plans keep one step
    instant for every group."""
    return (ec.zero.stage in (1, 2) and wrapper == "DeepSpeedZeroOptimizer" and ngroups > 1
            and ec.offload_optimizer_effective == "none" and ec.model_dtype in ("fp16", "bf16", "fp32")
            and ec.grad_dtype == ec.model_dtype)


def zero12_step_groups(layouts: list[Zero12Layout], W: int) -> Runs:
    """Runs of, per rank, per param group g (index order): (P_g, I_g, pad_g, flat_g) in elements, the terms
    of a ZeRO-1/2 step that updates one group at a time (``stage_1_and_2.py``
    DeepSpeedZeroOptimizer.step, the ``for i, group in enumerate(self.bit16_groups)`` loop).

    P_g = the group's slice (its fp32 gradient ``single_grad_partition`` and, at its first update,
    its moments: ``_optimizer_step`` sets ``self.optimizer.param_groups = [group i]``, so torch
    creates state for that group only); I_g = full numel of the group's parameters meeting the
    rank's slice: their gradients are views of ``grads_in_partition``, ONE buffer of sum_g I_g
    elements for every group (``copy_grads_in_partition``: ``total_size`` over all
    ``params_in_partition``), so it stays live until the last group with I_g > 0 drops its views
    (``free_grad_in_param_list`` and ``averaged_gradients[i] = None`` before ``_optimizer_step(i)``);
    pad_g = P_g - Cov_g, get_flat_partition's zero pads (a new tensor per group); flat_g = P_g when
    ``flatten(averaged_gradients[i])`` is a new tensor, 0 when the slice is one tensor's view
    (K_g = 1, Cov_g = P_g). Every rank in O(tensors log tensors x groups)."""
    if not layouts:
        return Runs.const(W, ())

    def one(lay: Zero12Layout) -> Runs:
        P = lay.P
        return zero12_all_ranks(lay, W).map(lambda t: (P, t[0], P - t[1], 0 if (t[2] == 1 and t[1] == P) else P))

    return Runs.zip(*(one(lay) for lay in layouts))


def zero12_compact_grad_buffer(ec: EffectiveConfig, wrapper: str, noncontig: bool = False) -> bool:
    """Whether this plan is the ZeRO-2 compact fp32 gradient partition regime :func:`zero12_backward_transients`
    models: DeepSpeedZeroOptimizer at stage 2 on a bf16 or fp16 model with ``data_types.grad_accum_dtype`` fp32, no
    optimizer offload, ``contiguous_gradients`` on, ``overlap_comm`` on or off, any ``communication_data_type``, any
    param groups.
    ``stage_1_and_2.py`` _use_compact_grad_partition_buffer (l.1259-1266: fp32 accumulation unlike the model's, no
    Muon group) then keeps no grads_in_partition (copy_grads_in_partition returns at l.2179-2182): average_tensor asks
    each of the rank's own gradient slices for its piece of one fp32 buffer of P elements per group
    (_get_compact_grad_partition_slice l.1312-1321, built by _build_compact_grad_partition_buffer l.1268-1274 at the
    rank's first flush, before its all-reduce), and allreduce_and_copy(_with_multiple_ranks) adds each reduced slice
    into it through ``source.to(fp32)`` (_add_to_grad_partition_buffer l.1324-1326) while the flush's flat copy
    (allreduce_bucket l.2367) is live. The buffer is the step's fp32 gradient (_get_preflattened_grad_partition
    l.2904-2909) and lives across micro-steps until the step frees it (``averaged_gradients[i] = None``, l.3131).
    Engine (TINY, W 2, GA 2: z2_bf16_gaccfp32_tbsga2_w2). ``overlap_comm`` changes no storage of this regime: the
    second ipg buffer (setup_buckets l.3272-3278, :func:`ipg_bucket_bytes`) aside, the flush is the same code
    (reduce_ipg_grads l.2226-2228 -> average_tensor on ``reduction_stream``, None on CPU, l.599) and the bucket index swap
    (l.1425-1427) moves no buffer; allreduce_and_copy_with_multiple_ranks' ``record_stream`` (l.1530-1531, l.1542-1543) only
    delays a GPU's reuse of the flat copy until the side stream's reduce completes (GPU-only, not modelled, as for
    the model-dtype regime). Engine, 2026-12-06: z2_bf16_gaccfp32_overlap_tbsga2_w2 (TINY, W 2, GA 2) with the
    coarse lifetimes was backward:1/2 +163,506 / +170,994 B on ranks 0 / 1, forward:2 +86,480 B, step:4 +154,148 /
    +169,124 B, the figures of the cell without overlap_comm before it was modelled; with this regime every phase
    within 0.03%, the engine's backward exactly the no-overlap cell's + 100,000 B (50,000 x 2, the second ipg buffer).
    Several param groups: one buffer per group, each made at the rank's first flush holding a slice of that group
    (:func:`_zero12_compact_groups_transients`; z2_bf16_gaccfp32_groups_tbsga2_w2). An fp16 model: the same path
    (l.1259-1266 asks only for fp32 accumulation unlike ``self.dtype``); probes (TINY, W 2, GA 2, 2026-12-06, 2 runs,
    and one at reduce_bucket_size 10,000 with real Linears) had the bf16 cell's coarse residuals to the byte and now
    every phase within 0.03% (the forward's proxy scalars aside). A ``communication_data_type`` unlike the model's:
    each run is cast to it beside its flat copy (allreduce_bucket l.2376-2377, :func:`_zero12_flush_replay`'s
    copies) and, fp32, the reduced slices reach _add_to_grad_partition_buffer already fp32, so ``source.to(fp32)``
    copies nothing (l.1326); probes at fp32 (TINY one flush, and reduce_bucket_size 10,000 with real Linears, 2 runs,
    and TINY_FROZEN_GROUPS) were backward +80% over the coarse ledger (the run's fp32 cast, 92,708 B for l2.weight, at
    l.2377) and now every phase within 0.01% (the proxy scalars aside). ``noncontig``: the same buffer with
    ``contiguous_gradients`` off (_buffered_reduce_fallback_preserving_fp32, l.2231-2235: whole gradients, all-reduced,
    not reduce-scattered; :func:`_zero12_noncontig_compact_transients`); probes
    (TINY at 50,000 and at 10,000 with real Linears x2, with overlap_comm, TINY_FROZEN_GROUPS; 2026-12-06): backward
    +63-66% coarse, now every phase within 0.01% (the proxy scalars aside); with fp32 communication too (TINY at
    50,000, at 10,000 with real Linears, TINY_FROZEN_GROUPS with overlap_comm: within 0.01%; at 50,000 micro-step 1's
    flush holds the flat copy or the buffer, not both, allreduce_bucket returning the cast, l.2391-2393). CPU offload
    has its own terms (:func:`zero12_offload_compact`). With ``contiguous_gradients`` on and a
    ``communication_data_type`` neither the model's nor fp32 (fp16 on a bf16 model: a cast of the same bytes,
    :func:`zero12_comm_cast_bytes`) a flush holds its flat copy and cast through the all-reduce, then the cast and the
    slice's fp32 copy (l.1326), the flat copy freed (l.2391-2393). Engine probe (TINY at reduce_bucket_size 10,000,
    real Linears, W 2, GA 2, 2026-12-06, 2 runs): rank 0 backward +38,560 B (8.7%) with the cast compared by bytes
    (l1.weight's fp16 cast missing), rank 1 46,318 B over with the flat copy beside the slice cast; now every phase
    within 0.37% (the forward's proxy scalars), as the same model without fp32 accumulation (+7,260 B, 2.0%, before)."""
    z = ec.zero
    if not (z.stage == 2 and wrapper == "DeepSpeedZeroOptimizer" and ec.offload_optimizer_effective == "none"
            and ec.model_dtype in ("bf16", "fp16") and ec.grad_dtype == "fp32"):
        return False
    if noncontig:
        # contiguous_gradients off (:func:`_zero12_noncontig_compact_transients`)
        return not ec.contiguous_gradients_effective
    return ec.contiguous_gradients_effective


def zero1_compact_grad_accum(ec: EffectiveConfig, wrapper: str, groups: int = 1) -> bool:
    """Whether this plan is the ZeRO-1 fp32 gradient accumulation regime without offload that
    :func:`zero12_backward_transients` models: DeepSpeedZeroOptimizer at stage 1 on an fp16 model with
    ``data_types.grad_accum_dtype`` fp32 (bf16 with fp32 takes BF16_Optimizer, ``engine.py`` l.2305-2310), no optimizer
    offload, any ``communication_data_type``, ``contiguous_gradients`` and ``overlap_comm`` on or off, any
    param groups (``groups``, the plan's trainable param groups, kept for the callers: the walk is
    :func:`_zero12_compact_groups_transients` for several; without contiguous_gradients
    :func:`_zero12_noncontig_compact_transients` with ``keep_all``). What was measured; other ZeRO-1 plans with an accumulation
    dtype unlike the model's stay lower bounds (:func:`zero12_transients_unmodeled`).

    ``stage_1_and_2.py``: each backward hook makes ``param.grad_accum = param.grad.to(fp32)`` (l.1237, added into at a
    later micro-step, l.1239) and drops param.grad (l.1240): the hooks' moments are
    :func:`zero12_offload_fp32_accum_hooks`' A1 / A2 (the same hooks as under offload), and the N x 4 live into the
    next forward beside the fp32 ipg bucket (setup_buckets l.3266, :func:`ipg_bucket_bytes`); nothing is reduced before
    the boundary (engine.py allreduce_gradients l.3088-3092). The boundary's epilogue loop (reduce_gradients
    l.971-976, params in model order) then flushes 4-byte gradients: each run's flat copy (allreduce_bucket l.2367,
    elements x 4 for several slices) and its cast to the fp16 communication dtype (l.2376-2377, elements x 2, also of a
    one-slice run: the tensor is fp32), the rank's slice cast back, ``source.to(fp32)`` (_add_to_grad_partition_buffer
    l.1324-1326) into the compact fp32 partition P x 4 (_use_compact_grad_partition_buffer l.1259-1266, built at the
    rank's first flush, l.1268-1270), the gradients not yet moved whole in fp32: :func:`_zero12_compact_transients`
    with its keep flag for ZeRO-1. After a flush copy_grads_in_partition clears grad_accum of the rank's own gradients
    (l.2270-2272 -> l.2179-2182, clear_grad_attribute l.1348-1350); the others keep theirs (l.2272-2274: stage 1 copies
    only ``is_param_in_current_partition``), a view of the ipg bucket or, over reduce_bucket_size, the whole fp32
    storage (l.1441-1449: no clone without offload), through the epilogue (_clear_param_grad_only keeps grad_accum,
    l.2630-2640) to the step's norm (get_grad_norm_direct l.2684), until step frees them before the update loop
    (free_grad_in_param_list(params_not_in_partition), l.2898-2901, called at the top of the group's update):
    :func:`zero12_offload_fp32_accum_kept`'s bytes, at the norm instant. Engine (TINY W 2, GA 2, reduce_bucket_size
    10,000, real Linears, 2026-12-06; tests/engine/test_peak_parity.py z1_fp16_gaccfp32_tbsga2_w2), coarse before on
    ranks 0 / 1: forward:2 +213,472 B (123.5%), backward:2 +202,974 / +263,438 B, step:2 +21,296 / +113,328 B, step:4
    +65,452 / +195,674 B; with this regime every phase of both ranks within 0.17% (the forward's proxy inputs).
    Several param groups (the HF Trainer's decay / no-decay pair): the epilogue walks group 0 then group 1 through the
    one fp32 bucket, each group's compact partition made at the rank's first flush of that group (l.1303-1310), and
    step's loop frees a group's unowned grad_accum only at that group's turn (l.3075, l.3103), so those of the later
    groups live through group 0's update (entry kept_grad_accum_later_groups). Engine (TINY as decay / no-decay groups,
    tests/engine/test_peak_parity.py z1_fp16_gaccfp32_groups_tbsga2_w2, 2 runs, and TINY_FROZEN_GROUPS, GA 1 too,
    probes, 2026-12-06): coarse forward:2 +213,472 B (123.5%), backward:2 +202,206 / +263,272 B; with the groups' walk
    but the kept grad_accum to the norm only, step:2 rank 0 +17,232 B (the bucket l2.bias / l3.bias keep at group 0's
    update); now every phase within 0.37%.
    ``overlap_comm``: two fp32 ipg buffers (setup_buckets l.3266, l.3275; :func:`ipg_bucket_bytes`); micro-step 1's
    hooks still reduce nothing (reduce_ready_partitions_and_remove_grads l.2293-2295), and the boundary's hooks move
    each fp32 grad_accum in autograd's order (process_gradients l.2285-2291), every grad_accum already live at GA > 1
    (:func:`zero12_boundary_holds_all`): the same walk in hook order (:func:`_zero12_replay_stage`), a flush's trigger
    beside its autograd sibling's new gradient in the model dtype (:func:`zero12_backward_transients`' Ds). At GA 1 the
    hooks' moments lie under the flushes' (no entry of their own; the kept grad_accum entry as at GA > 1). Engine
    (tests/engine/test_peak_parity.py z1_fp16_gaccfp32_overlap_groups_tbsga2_w2, 2 runs; TINY one group and GA 1
    probes, 2026-12-06): coarse forward:2 +253,472 B (146.6%), backward:2 +262,348 / +300,704 B; with the sibling in
    4 bytes backward:2 -38,492 B (-5.3%); now every phase within 0.37%. The kept bucket: the index swaps at each hook's
    flush (l.1427-1429), so a rank keeps each buffer its missing gradients sit in (:func:`_zero1_overlap_buffers`;
    TINY's sit in buffer 0; eight 6,000-element tensors, probe: both, 40,060 B under with one, now +60 B).
    ``contiguous_gradients`` off (the newcomer's tests/data/lb15 buckets): no ipg buffer (setup_buckets l.3260); the
    bucket holds the grad_accum by reference and reduce_ipg_grads -> _buffered_reduce_fallback_preserving_fp32
    (l.2231-2235 -> l.2484-2511) flattens each run (l.2367, a view for one gradient), casts it to fp16 (l.2377) and the
    rank's slices back into the compact partition (l.1326); stage 1 clears no gradient without contiguous_gradients
    (l.2272), so all N x 4 stay whole through the boundary and to the step (kept_grad_accum = N x 4, the later
    groups' through group 0's update). Engine probes (TINY and its decay / no-decay groups, GA 1 and 2, overlap_comm on
    and off, W 2, 2 runs of the TINY GA-2 pair, 2026-12-06): coarse forward:2 +173,472 B (100.4%), backward:2 +202,974 /
    +256,478 B (+295,010 on rank 1 with overlap_comm), step:4 +198,288 / +251,454 B; now every phase within 0.37%.
    ``communication_data_type`` fp32: the 4-byte runs are reduced as they are (no cast, l.2376) and the reduced slices
    reach the fp32 partition without ``source.to(fp32)``'s copy (l.1326; the walks' ``fp32_slices``); without
    contiguous_gradients and with overlap_comm the boundary's peak is then a hook's accumulation beside the partitions
    made before it (:func:`_zero12_noncontig_compact_transients`' hook moments). Engine probes (TINY and its decay /
    no-decay groups, GA 1 and 2, overlap_comm, contiguous_gradients off, 8 cells, TINY GA 2 in 2 runs, 2026-12-06):
    coarse forward:2 +213,472 B (123.5%), backward:2 +140,038 / +217,084 B; +62,982 B (13%) at rank 1's backward:2
    without the hook moments (buckets off, overlap on, two groups); now every phase within 0.37%. bf16 communication:
    the runs' cast is 2 bytes as fp16's and the slices are cast back, so the plan is the fp16-communication one (probes,
    TINY GA 1 and 2 in 2 runs and the newcomer's buckets with two groups: coarse backward:2 +76% / +96%, now within
    0.37%)."""
    z = ec.zero
    return (z.stage == 1 and wrapper == "DeepSpeedZeroOptimizer" and ec.offload_optimizer_effective == "none"
            and ec.model_dtype == "fp16" and ec.grad_dtype == "fp32")


def zero12_offload_grad_accum_unused(ec: EffectiveConfig, wrapper: str) -> bool:
    """Whether a ``grad_accum_dtype`` unlike the model's changes nothing DeepSpeedZeroOptimizer holds under CPU
    optimizer offload: ZeRO-2 with a 16-bit accumulation dtype (bf16 model with fp16, fp16 with bf16). DeepSpeed 0.19.8,
    ``runtime/zero/stage_1_and_2.py``: the dtype is read at l.395-404, where param.grad_accum
    (``use_grad_accum_attribute``) needs ``not self.partition_gradients`` (ZeRO-1 only); the compact partition needs
    fp32 (_use_compact_grad_partition_buffer l.1260-1262); the ipg buffers take ``self.dtype`` without grad_accum
    (_gradient_reduction_buffer_dtype l.1253-1254, setup_buckets l.3267 / l.3276); its other readers, l.1038-1053,
    run only ``if self.cpu_offload is False``. So the plan runs the model-dtype offload path and the ledger's terms for
    it apply. Engine (TINY W 2, GA 2, reduce_bucket_size 10,000, real Linears, 2026-12-06): ZeRO-2 bf16 with
    grad_accum_dtype fp16 under CPU offload, every phase of both ranks within 0.16% with the model-dtype terms (the
    forward's proxy scalars), as the GA-1 twin, fp32 communication and an fp16 model with bf16 accumulation (probes).
    An fp32 model with a 16-bit one reads the same lines the same way (engine, fp32 + bf16, GA 2, 2 probe runs,
    2026-12-06: every phase within 0.20% with the model-dtype terms, the forward's proxy inputs; fp16 accumulation is
    the same test of the same lines, not measured).
    ZeRO-1 keeps param.grad_accum (l.1237) in that dtype: not this path (:func:`zero12_offload_fp32_accum`)."""
    return (ec.zero.stage == 2 and wrapper == "DeepSpeedZeroOptimizer" and ec.offload_optimizer_effective == "cpu"
            and ec.grad_dtype != "fp32" and ec.model_dtype in ("bf16", "fp16", "fp32")
            and ec.grad_dtype != ec.model_dtype)


def zero12_transients_unmodeled(ec: EffectiveConfig, wrapper: str, ga: int, groups: int = 1) -> str:
    """Why a ZeRO-1/2 plan's backward and step-norm transients are left off the ledger (so its accelerator
    peak is a lower bound), or "" where :func:`zero12_transients_modeled` models them or the plan is not
    DeepSpeedZeroOptimizer (other wrappers have their own terms). What is left off: each flush's flat copy (``stage_1_and_2.py`` allreduce_bucket l.2367), its cast to
    ``communication_data_type`` (l.2376-2377), the cast of the reduced slices into an fp32 accumulation buffer
    (_add_to_grad_partition_buffer l.1324-1326), the previous micro-step's partition (l.1038-1040) and the fp64
    norm copy (get_grad_norm_direct l.2684): on TINY the coarse lifetimes were backward +45-48% under the engine
    for ZeRO-2 bf16 with fp32 accumulation (z2_bf16_gaccfp32_tbsga2_w2 before it was modelled) and +48-66% for
    fp32 communication (z2_bf16_commfp32_w2 before).
    Under optimizer offload the reduce has its own terms (:func:`zero12_offload_reduce_terms`,
    :func:`zero12_offload_flush_bytes`, with ``contiguous_gradients`` forced on, ``EffectiveConfig.
    contiguous_gradients_effective``), which know gradients in the model dtype only: with a ``grad_accum_dtype``
    unlike the model's the fp32 regime of _use_compact_grad_partition_buffer (l.1259-1266) is left off, so this
    says the peak is a lower bound there too, except where :func:`zero12_offload_fp32_accum` (ZeRO-1) or :func:`zero12_offload_compact` (ZeRO-2) models
    it (fp32 accumulation on a bf16 or fp16 model, ``overlap_comm`` on or off, any param groups, at ZeRO-2 any
    ``communication_data_type``: the cells below now within 0.16%, the two-group ones 0.4%; a 16-bit accumulation
    dtype unlike a 16-bit model's too, at ZeRO-1 in G = 2 bytes, cell z1_bf16_oo_cpu_gaccfp16_tbsga2_w2) or where
    ZeRO-2 never reads a 16-bit one (:func:`zero12_offload_grad_accum_unused`), an fp32 model's 16-bit one too (ZeRO-1 in
    G = 2 bytes, D = 4; probes 2026-12-06 within 0.20%), which leaves no measured dtype combination under offload
    here. Engine (TINY at W 2, GA 2, reduce_bucket_size 10,000, real Linears,
    2026-12-06): ZeRO-1 bf16 (tests/engine/test_peak_parity.py z1_bf16_noncontig_oo_cpu_gaccfp32_tbsga2_w2, in
    UNMATCHED_ISSUE15) +12-36% on every phase from backward:1 on (param.grad_accum, ``param.grad.to(fp32)`` at
    _fill_param_grad_accum_attribute l.1237, N x 4 = 172,836 B kept across micro-steps; the compact buffer l.1270,
    86,424 B; the fp64 norm copy of each slice, copy_grads_in_partition l.2152); ZeRO-2 bf16 at CPU offload (one
    probe run) backward:1 +13% / +23% on ranks 0 / 1 (the compact buffer, the extra-large clones l.1446, the fp32
    cast l.1326), forward:2 to step:4 +4-9% on rank 1.
    Without offload, ZeRO-1 on an fp16 model with ``grad_accum_dtype`` fp32 (bf16 takes BF16_Optimizer) with
    any communication dtype is modelled since, any buckets and param groups (:func:`zero1_compact_grad_accum`, cells
    z1_fp16_gaccfp32_tbsga2_w2, z1_fp16_gaccfp32_groups_tbsga2_w2 and z1_fp16_gaccfp32_overlap_groups_tbsga2_w2,
    ``contiguous_gradients`` off, the newcomer's tests/data/lb15 buckets, and fp32 / bf16 communication in probes: every
    phase within 0.37%, the decomposition below); left off: a 16-bit accumulation dtype unlike the model's at ZeRO-1
    without offload (engine probe 2026-12-06, fp16 with bf16 accumulation, the newcomer's buckets, two groups, W 2 GA 2:
    forward:2 +87,054 B (50%), step:4 +78,296 B (15%) on rank 1, backward:1 -13.6% on rank 0; the ledger's peak under
    the engine's on both ranks). The regime: the hooks keep param.grad_accum (l.1237, N x 4) across micro-steps beside an fp32 ipg bucket (l.3266, RBS x 4), the
    boundary reduces into the compact fp32 partition (l.1268-1270) through the run's cast to fp16 (l.2377) and the
    slice's cast back (l.1326), and the step's fp64 norm copies (l.2684). Engine (TINY W 2, GA 2, reduce_bucket_size
    10,000, real Linears, 2026-12-06, one probe run each, coarse lifetimes): contiguous_gradients on, ranks 0 / 1,
    backward:1 +39,498 / +77,688 B, forward:2 +213,472 B (123.5%: grad_accum 172,836 + the bucket 40,000),
    backward:2 +202,974 / +263,438 B (the compact partition 86,424, the slice cast 77,056, the run's cast 38,528; on
    rank 1 the fp32 flat copy l.2367, 92,708), step:2 +21,296 / +113,328 B, step:4 +65,452 / +195,674 B; off (the
    newcomer's tests/data/lb15 plan), forward:2 +173,472 B (100.4%), backward:2 +202,974 / +256,478 B (+295,010 on
    rank 1 with overlap_comm), step:4 +198,288 / +251,454 B. The offload terms
    (:func:`zero12_offload_fp32_accum`) hold the same hooks and partition but reduce into host buffers.
    Remeasured with contiguous_gradients on (2026-12-06, the same bytes as above) and taken apart by allocation
    site over the 172,848 B persistent (what a model needs): backward:1 = the fp32 bucket 40,000 + A1 of
    :func:`zero12_offload_fp32_accum_hooks` (4 N + 2 x 19,264 at l1.weight's hook) + 36 B of scalars; forward:2 =
    40,000 + 4 N; backward:2, the boundary's reduce, rank 0 at l1.weight's flush = 40,000 + 4 N (no grad_accum moved
    yet) + P x 4 + 19,264 x (2 + 4) (its fp16 cast, l.2377, and its slice's fp32 copy, l.1326; one slice: no flat copy),
    rank 1 at l2.weight's = 40,000 + 4 (N - 301) (l1.bias moved into the bucket, l1.weight kept: not the rank's,
    l.2272-2274) + P x 4 + 23,177 x (4 + 2) (the two ranks' slices flattened, l.2367, and cast); step:2 = the bucket
    (kept by unowned grad_accum views, :func:`zero12_offload_fp32_accum_kept`, with rank 1's 19,264 x 4 of l1.weight)
    + P x 4 + the largest slice x 8 (l.2684). So the pieces are the offload terms' hooks and kept storages with the
    no-offload ZeRO-1 flush walk in 4-byte gradients and the compact partition of :func:`_zero12_compact_transients`
    (ZeRO-2's, which drops unowned gradients after their flush where ZeRO-1 keeps them: its ``keep_unowned`` flag),
    which :func:`zero1_compact_grad_accum` now joins; the kept storages are freed before the update
    (free_grad_in_param_list l.2898-2901), so they sit at the norm instant only."""
    z = ec.zero
    # under optimizer offload (always CPU at ZeRO-1/2, EffectiveConfig.offload_optimizer_effective) every pair of the
    # three training dtypes is modelled: ZeRO-1 by zero12_offload_fp32_accum (a bf16 / fp16 model with any other
    # accumulation dtype, an fp32 one with a 16-bit one), ZeRO-2 by zero12_offload_compact (fp32 accumulation on a
    # 16-bit model) or zero12_offload_grad_accum_unused (a 16-bit accumulation dtype, never read), or the model dtype's
    # terms (engine probes and cells, 2026-12-06: every phase within 0.4%)
    if z.stage not in (1, 2) or wrapper != "DeepSpeedZeroOptimizer" or ec.offload_optimizer_effective != "none" \
            or zero12_transients_modeled(ec, wrapper, ga, groups):
        return ""
    what = []
    # (ZeRO-2 with contiguous_gradients off and another communication_data_type is modelled since:
    # _zero12_noncontig_transients holds each flush's cast)
    if ec.grad_dtype != ec.model_dtype:
        # (ZeRO-2's compact fp32 gradient buffer, bf16 / fp16 with fp32 accumulation, is modelled in every bucket
        # option without offload: zero12_compact_grad_buffer)
        what.append(f"{ec.model_dtype} model with grad_accum_dtype {ec.grad_dtype}")
    if ec.model_dtype not in ("fp16", "bf16", "fp32"):
        what.append(f"model dtype {ec.model_dtype}")
    # the ZeRO-1 floor left (zero1_compact_grad_accum models fp32 accumulation on fp16): a 16-bit accumulation dtype
    # unlike the model's; engine probe 2026-12-06 (fp16 with bf16 accumulation, TINY as decay / no-decay groups,
    # contiguous_gradients off, overlap_comm, W 2 GA 2): forward:2 +87,054 B (50.4%), step:4 +15% on rank 1
    measured = ("up to +50% by phase on the engine's small model, at the next forward: param.grad_accum, l.1237, kept "
                "across micro-steps" if z.stage == 1 and ec.grad_dtype != ec.model_dtype else
                "+45-66% in backward on the engine's small model where such regimes were measured coarse")
    return (f"ZeRO-{z.stage} backward and gradient-norm transients for this plan ({'; '.join(what) or 'this combination'}): "
            "the flushes' flat copies and casts, the fp32 accumulation of the reduced slices, the previous "
            "micro-step's partition and the fp64 norm copy are not modelled (stage_1_and_2.py l.2367, l.2376-2377, "
            f"l.1324-1326, l.2684), so the accelerator peak is a lower bound ({measured})")


def zero12_transients_modeled(ec: EffectiveConfig, wrapper: str, ga: int, groups: int = 1) -> bool:
    """Whether :func:`zero12_backward_transients` models the ZeRO-1/2 backward and step-norm
    transients of this plan: DeepSpeedZeroOptimizer without optimizer offload, a 16-bit or fp32 model
    whose gradients are reduced in the model dtype, ``contiguous_gradients`` on (off: below), ``overlap_comm``
    on or off, at any GA: at ZeRO-2 every micro-step reduces in its backward as at GA = 1 and the previous
    micro-step's grads_in_partition is its own entry (``prev_grads_in_partition``); at ZeRO-1 only
    the boundary's backward reduces, as at GA = 1, and what the earlier micro-steps leave is its own
    entries (``lp_grads_accumulated``, ``ipg_bucket_accumulated``, ``accumulate_grad_new``)
    (each checked against the engine's allocation tracker, tests/engine/test_peak_parity.py, GA 2:
    z2_bf16_tbsga2_w2, z1_bf16_tbsga2_w2, z1_fp16_tbsga2_w2). An fp32 model takes the same code with
    ``self.dtype`` fp32 (``stage_1_and_2.py`` allreduce_bucket l.2367 ``self.flatten(bucket)``,
    copy_grads_in_partition l.2192, get_grad_norm_direct l.2684 ``g.data.to(get_norm_dtype())``:
    fp64 wherever the accelerator has it, ``zero/utils.py`` l.59-63, so a copy of fp32 gradients
    too): D = 4 in every term (z2_fp32_w2, z1_fp32_w2 match in every phase; without these transients
    the first step was 12.7% under on rank 0, the norm copy beside averaged_gradients missing, rank
    1's backward 14.1% under, the bucket's flat copy missing, and ZeRO-1's backward 21.3% over, its
    averaged_gradients counted before the reduce allocates it). ``overlap_comm`` changes no storage
    these transients hold: setup_buckets allocates a second RBS-element ipg buffer (l.3272-3278,
    counted by :func:`ipg_bucket_bytes`), reduce_independent_p_g_buckets_and_remove_grads swaps
    ``bucket.index`` after each flush (l.1425-1427), and the flush runs on ``reduction_stream``
    (l.2239-2240, l.1600-1612) with the same flat copy (allreduce_bucket l.2367). Measured on CPU
    (z2_bf16_overlap_w2): the backward exactly z2_bf16_w2's + 100,000 B (the second buffer, 50,000 x
    2 B), the step the same bytes; without the transients its step was 4.2% under on rank 0 (the
    norm copy missing) and rank 1's backward 8.5% under (the flat copy missing). On CPU there is no
    reduction stream (l.599: None on a synchronized device), so this does not prove a GPU's lifetimes: there
    ``allreduced.record_stream(reduction_stream)`` (l.2432) keeps a flush's flat copy from the
    caching allocator until the side stream's reduce completes, which may overlap the next
    bucket's fill (GPU-only, not modelled). At ZeRO-1 ``overlap_comm`` moves the gradients in their
    hooks at the accumulation boundary (process_gradients l.2290: ``partition_gradients or
    overlap_comm``), in autograd's order as ZeRO-2 does (:func:`_zero12_replay_stage`), not in the
    epilogue: modelled at GA 1 (z1_bf16_overlap_w2: every phase within 0.03% on both ranks; before, the
    ledger kept N x D of whole gradients in backward, +85,452 B on rank 0, and the step had no norm
    instant, -24,512 B); with GA > 1 the boundary's hooks meet every param.grad micro-step 1 left
    (:func:`zero12_boundary_holds_all`; z1_bf16_overlap_tbsga2_bigtensor_w2). ZeRO-2 with
    ``contiguous_gradients`` off, any param groups, ``overlap_comm`` on or off, at any GA (a micro-step's
    gradients meeting the slice kept whole into the next, ``prev_grads_in_partition``; z2_bf16_noncontig_groups_tbsga2_w2):
    :func:`_zero12_noncontig_transients` (z2_bf16_noncontig_w2, z2_bf16_noncontig_smallbucket_w2; without
    it the first backward was 25.3% under on rank 0, the whole gradients and their flat copy missing;
    z2_bf16_noncontig_overlap_normlife_w2: a gradient outside the slice kept to the next flush;
    z2_bf16_noncontig_groups_tbsga2_w2: several groups, each stepped apart with its own gradients);
    ``groups`` = the plan's trainable param groups. ZeRO-1 with ``contiguous_gradients`` off: every gradient whole
    to the step beside each flush's flat copy (:func:`zero12_backward_transients`; z1_bf16_noncontig_smallbucket_w2:
    backward:1/2 were -84,518 / -46,328 B on ranks 0 / 1 and step:2 +24,512 / +39,488 B with the coarse lifetimes;
    z1_bf16_noncontig_w2, one flush, matched too), without ``overlap_comm`` at any GA and any param groups: before
    the boundary nothing is reduced (engine.py allreduce_gradients l.3088-3092: stage 1 calls reduce_gradients only
    at the accumulation boundary; process_gradients l.2290 moves nothing without ``overlap_comm``), so micro-step
    1's N x D param.grad live into the next forward (``lp_grads_accumulated``) and each later backward adds its new
    gradient into them (``accumulate_grad_new``), as with contiguous_gradients, but with no ipg buffer to keep
    (setup_buckets l.3260: contiguous_gradients only); the boundary's epilogue then walks the accumulated param.grad
    as GA 1's walks the fresh ones (reduce_gradients l.971-976), group by group in one bucket. Engine, 2 runs each,
    every phase of both ranks within 0.51% (the forward's proxy scalars): z1_bf16_noncontig_tbsga2_w2 (coarse before,
    2026-12-06: forward:2 +86,474 B, micro-step 1's gradients; backward:1 -85,446 / -47,256 B; backward:2 rank 1
    +39,156 B; step:4 +24,512 / +39,488 B) and z1_bf16_noncontig_groups_tbsga2_w2 (TINY_FROZEN_GROUPS, two groups,
    real Linears; coarse: forward:2 +39,966 B, backward:1 -39,260 B, step:4 +39,172 / +17,172 B); one probe run each
    within 0.02% of fp16 at GA 2 and of the groups at GA 1. With ``overlap_comm`` at GA > 1 the boundary's hooks
    flush in autograd's order (l.2290 -> l.2294 -> l.1422) beside the accumulated param.grad, which no flush moves
    (l.2272): the new gradients are added in place and freed before each post-accumulate hook, so a flush holds its
    flat copy beside N x D, and the backward peaks at an autograd node's new gradients beside N x D, as without
    overlap_comm (:func:`zero12_backward_transients`). Taking it as GA 1's (the epilogue's flat copy only) left
    backward:2 +45,772 B (17.6%) under the engine: l2.weight's new 46,354 B at engine.py l.3428. Engine, TINY at
    reduce_bucket_size 10,000, real Linears, 2026-12-06, every phase of both ranks within 0.51% (the forward's proxy
    inputs): z1_bf16_noncontig_overlap_tbsga2_w2 (coarse before: forward:2 +87,054 B, backward:1 -84,844 / -46,654 B,
    backward:2 rank 0 -38,778 B, step:4 +24,512 / +39,488 B) and z1_bf16_noncontig_overlap_groups_tbsga2_w2
    (TINY_FROZEN_GROUPS; coarse: forward:2 +40,546 B, backward:1 -38,658 / -39,280 B, step:4 +39,172 / +17,172 B),
    2 runs each; one or two probe runs each within 0.51% at GA 3, in fp16 and fp32 at GA 2, and with two groups at
    GA 1. So ``ga`` and ``groups`` no longer restrict which plans are modelled (kept for the callers). Other plans
    keep the lifetimes of the module docstring.
    A ``communication_data_type`` unlike the model's (``contiguous_gradients`` on): each flush's run is cast to it
    beside its flat copy (allreduce_bucket l.2376-2377; :func:`_zero12_flush_replay`'s copies). Measured on TINY at
    W = 2 (2026-12-06, bf16 with fp32 communication, one probe run each): ZeRO-2 with the coarse lifetimes was
    backward:1 +173,802 / +211,992 B on ranks 0 / 1 (the flat copy, l.2367, 86,418 B, and its fp32 cast, l.2377,
    172,836 B), step:2 +24,512 / +39,488 B (the fp64 norm copy, get_grad_norm_direct l.2684); now every phase within
    0.03% on both ranks, as are ZeRO-1, ZeRO-1 / ZeRO-2 at reduce_bucket_size 10,000 (real Linears: several flushes)
    and ZeRO-2 under CPU optimizer offload there (its flush term without the cast was backward:1 +31,938 B, 5.3%, on
    rank 0), within 0.37% (the forward's proxy scalars); ZeRO-2 at 10,000 is the cell z2_bf16_commfp32_w2. ZeRO-2 bf16
    with ``grad_accum_dtype`` fp32, any param groups, ``overlap_comm`` on or off (:func:`zero12_compact_grad_buffer`,
    :func:`_zero12_compact_transients`; cell z2_bf16_gaccfp32_tbsga2_w2: every phase within 0.03% on both ranks, 4
    runs) was coarse, measured the same way (2 runs, the same bytes) at GA 2 (_use_compact_grad_partition_buffer
    l.1259-1266: no
    grads_in_partition; the rank's fp32 partition ``flat_partition``, P x 4, made at its first reduce, l.1268-1274 via
    _get_compact_grad_partition_slice l.1313-1322): backward:1 +163,506 / +170,994 B, exactly a flush moment of
    persistent 172,848 + ipg 100,000 + that buffer 86,424 + the flat copy (l.2367, 86,418) + the fp32 cast of the
    rank's largest slice in the flush as _add_to_grad_partition_buffer adds it (l.1324-1326: 19,264 x 4 = 77,056 on
    rank 0, l1.weight; 21,136 x 4 = 84,544 on rank 1, its part of l2.weight) + 32 B of scalars; forward:2 +86,480 B
    (the buffer kept across micro-steps), step:4 +154,148 / +169,124 B (the fp64 norm copy of the largest slice,
    get_grad_norm_direct l.2684: 19,264 / 21,136 x 8 B among its site's storages at the peak). BF16_Optimizer (ZeRO-1 with
    ``grad_accum_dtype`` fp32) is modelled apart: :func:`bf16_optimizer_epilogue_terms`.
    ZeRO-1 with ``contiguous_gradients`` off and a ``communication_data_type`` unlike the model's: the same flushes,
    each also holding its run's cast (allreduce_bucket l.2376-2377, :func:`zero12_backward_transients`). Engine (TINY W 2,
    reduce_bucket_size 10,000, real Linears, 2026-12-06; before, the plan was a lower bound): bf16 with fp32
    communication at GA 2 had the coarse residuals of z1_bf16_noncontig_tbsga2_w2 (forward:2 +87,054 B, backward:1
    -84,844 / -46,654 B, step:4 +24,512 / +39,488 B) and, with the flush's flat copy alone, backward:2 +46,232 B
    (+84,764 B with overlap_comm: l2.weight's fp32 cast, 92,708 B at l.2377); now every phase of both ranks within
    0.37% (the forward's proxy scalars): fp32 and fp16 communication, overlap_comm on and off, GA 1 and 2, an fp16
    model with fp32 communication (probes, one run each; the cell z1_bf16_noncontig_commfp32_tbsga2_w2). ZeRO-2 there:
    :func:`_zero12_noncontig_transients` holds each flush's cast beside its flat copy (l.2376-2377), after the previous
    flush's dropped gradients are cleared with overlap_comm (l.2411-2415). Engine (TINY W 2, GA 2, reduce_bucket_size
    10,000, real Linears, 2026-12-06; a lower bound before): bf16 with fp32 communication, coarse, backward:1 / 2 / 4
    +92,744 B on rank 0 and +131,868 B on rank 1 (l2.weight's fp32 cast 92,708 B at l.2377 missing; rank 1 also the
    whole gradients its slice keeps), step:4 +24,512 / +39,488 B (the fp64 norm copy); now every phase of both ranks
    within 0.37% (the forward's proxy inputs; 0.50% with two param groups), 2 runs, as fp16 communication, an fp16
    model, overlap_comm, GA 1 and TINY_FROZEN_GROUPS with and without overlap_comm (probes, one run each; the cell
    z2_bf16_noncontig_commfp32_tbsga2_w2). ZeRO-1 on an fp16 model with fp32 accumulation without offload
    (any communication dtype, buckets and param groups): :func:`zero1_compact_grad_accum`."""
    z = ec.zero
    if zero12_compact_grad_buffer(ec, wrapper) or zero12_compact_grad_buffer(ec, wrapper, noncontig=True):
        return True
    if zero1_compact_grad_accum(ec, wrapper, groups):
        return True
    return (z.stage in (1, 2) and wrapper == "DeepSpeedZeroOptimizer" and ec.offload_optimizer_effective == "none"
            and ec.model_dtype in ("fp16", "bf16", "fp32") and ec.grad_dtype == ec.model_dtype)


#: The ZeRO-1/2 flush-replay passes' column-wise forms (issue 21: generate at 1e5 layers runs them for every
#: ZeRO-1/2 plan of every layout, each a Python loop per flush or per tensor): a bucket whose slices all lie
#: in one rank's partition is found by the min/max of its flat span (copy 0: one slice, a view), and the per-flush
#: maxima of :func:`zero12_backward_transients` and :func:`_zero12_kept_xl` are taken by C-level maps and
#: accumulations. False: the per-flush walks they replace, kept as the reference
#: (tests/test_generate_cache_identity.py compares the two on random inventories and configs).
ZERO12_COLUMNS = True

#: :func:`zero12_offload_reduce_terms` from identical layers' repeating unit where it applies
#: (:func:`_zero12_offload_periodic_runs`); False: always the per-tensor walks (tests compare the two).
ZERO12_OFFLOAD_PERIOD = True

#: Whether :func:`_zero12_offload_periodic_runs` also takes ZeRO-2 plans with extra-large gradients (over
#: reduce_bucket_size, cloned in their hooks: issue 21's per-expert Kimi-K2 at generate's bucket h^2 =
#: 51,380,224 has its embedding, lm_head and every layer's o_proj, 7,168 x 16,384, over it); False: the walk
#: there. tests/test_moe_leading_layers_identity.py compares both.
ZERO12_OFFLOAD_XL_PERIOD = True
#: ZeRO-1's CPU-offload kept-clone runs (:func:`_zero12_offload_kept_runs`, one param group) by C-level columns:
#: u per flush position as an array (no dict keyed by flat start), and each rank's non-owner moments as a prefix
#: and a suffix maximum (its owned tensors are one run of flush positions), not a monotonic stack and a query per
#: owned extra-large gradient (issue 21: 3e5 of them at 1e5 layers, RBS h^2, every plan generate tries).
#: False: the dict and the stack, kept as the reference (tests/test_offload_kept_cols_identity.py compares).
ZERO12_KEPT_COLS = True
#: True: :func:`zero12_offload_reduce_terms` keeps u per flush (and per flush position) on the flush replay's
#: ``_Flushes.memo``, keyed by (gradient bytes D, model dtype bytes Dm, whether the boundary holds every gradient),
#: what u reads beside the replay; False: made again per plan (tests/test_offload_u_memo19.py compares the two)
ZERO12_OFFLOAD_U_MEMO = True
#: The most ranks :func:`_zero12_offload_periodic_runs` evaluates one by one (O(buckets) each); more take the walks.
_PERIOD_MAX_W = 4096

#: :func:`_zero12_flush_replay_compute` skips whole periods of its flush walk where the hook order repeats
#: (identical layers, :func:`_zero12_flush_period`): the flush starts, triggers, extra-large gradients, flat copies
#: and touched rank ranges of a skipped period are the previous period's, shifted; and
#: :func:`zero12_backward_transients` gives :meth:`Runs.from_updates` each rank range's first flush only.
#: False: the plain per-flush walk (tests/test_zero12_period_identity.py compares the two).
ZERO12_FLUSH_PERIOD = True


class _FlushOrder:
    """The tensors of a ZeRO-1/2 flush replay in hook order, as packed columns: ``order[k]`` is
    (param group index, flat start, numel) in elements, as the list of tuples it replaces
    (8 bytes a value instead of a tuple and int objects per tensor; issue 21)."""

    __slots__ = ("groups", "starts", "numels")

    def __init__(self, groups: "Sequence[int] | None", starts: "Sequence[int]", numels: "Sequence[int]"):
        self.groups, self.starts, self.numels = groups, starts, numels  # groups None: all group 0

    def __len__(self) -> int:
        return len(self.numels)

    def __getitem__(self, k: int) -> tuple[int, int, int]:
        return (0 if self.groups is None else self.groups[k]), self.starts[k], self.numels[k]


class _Flushes:
    """A flush replay's bucket flushes as packed columns: ``flushes[j]`` is (range of positions in
    hook order of the bucket's tensors, position of the triggering tensor or None for the
    epilogue's), as the list of tuples it replaces (issue 21)."""

    __slots__ = ("starts", "trig", "memo")

    def __init__(self, starts: "Sequence[int]", trig: "Sequence[int]"):
        self.starts, self.trig = starts, trig  # len(starts) = flushes + 1; trig -1: the epilogue's
        #: figures of the replay alone that its readers derive (zero12_backward_transients): a replay is kept
        #: across the plans that share it, so they are made once per replay, not per plan (issue 21)
        self.memo: dict = {}

    def __len__(self) -> int:
        return len(self.trig)

    def __getitem__(self, j: int) -> "tuple[range, int | None]":
        if j < 0:
            j += len(self.trig)
        t = self.trig[j]
        return range(self.starts[j], self.starts[j + 1]), (None if t < 0 else t)

    def __iter__(self):
        # only the last flush is the epilogue's (trigger -1): the others zipped at C level
        st, tr = self.starts, self.trig
        return itertools.chain(zip(map(range, st[:-2], st[1:-1]), tr[:-1]), ((range(st[-2], st[-1]), None),))


class _RankRanges:
    """Per flush, the merged rank ranges [ra, rb) its slices belong to, packed: ``touched[j]`` is
    the list of (ra, rb) pairs of flush j (issue 21: a list of lists of tuples per flush before).
    Filled flush by flush: :meth:`open` starts flush j's, whose ranges are then ``append``-ed;
    :meth:`triples` gives every (ra, rb, j) in order."""

    __slots__ = ("fj", "ra", "rb", "_j")

    def __init__(self) -> None:
        self.fj, self.ra, self.rb = array.array("q"), array.array("q"), array.array("q")
        self._j = -1

    def open(self) -> "_RankRanges":
        self._j += 1
        return self

    def append(self, pair: tuple[int, int]) -> None:
        self.ra.append(pair[0])
        self.rb.append(pair[1])
        self.fj.append(self._j)

    def triples(self) -> "Iterable[tuple[int, int, int]]":
        return zip(self.ra, self.rb, self.fj)

    def __len__(self) -> int:
        return self._j + 1

    def __getitem__(self, j: int) -> "list[tuple[int, int]]":
        lo, hi = bisect.bisect_left(self.fj, j), bisect.bisect_right(self.fj, j)
        return list(zip(self.ra[lo:hi], self.rb[lo:hi]))


def zero12_comm_cast_bytes(ec: EffectiveConfig, src: str | None = None) -> int:
    """Bytes per element of allreduce_bucket's cast of a flat bucket in dtype ``src`` (the model dtype by default) to
    ``communication_data_type``: C = its bytes where the two dtypes differ, else 0 (``stage_1_and_2.py`` l.2376-2377,
    ``if communication_data_type != tensor.dtype: tensor_to_allreduce = tensor.to(communication_data_type)``; the
    engine's own allreduce_bucket, BF16_Optimizer's flush, the same test, ``engine.py`` l.3800-3801). By
    dtype, not by size: fp16 communication on a bf16 model is a copy of the same bytes. Engine (TINY W 2, ZeRO-2 bf16,
    grad_accum_dtype fp32, CPU optimizer offload, communication_data_type fp16, GA 2, 2026-12-06): backward:1 rank 0
    +38,556 B under the ledger, l1.weight's fp16 cast (19,264 x 2 = 38,528 B, l.2377) missing while it compared bytes."""
    return DTYPE_BYTES[ec.comm_dtype] if ec.comm_dtype != (src or ec.model_dtype) else 0


def _zero12_flush_replay(ec: EffectiveConfig, inv: Inventory, layouts: list[Zero12Layout], W: int) -> tuple:
    """The ZeRO-1/2 reduce's bucket flushes, replayed in DeepSpeed's order, as
    :func:`zero12_backward_transients` describes them: (D, RBS, stage, order, sizes, hooked, T, csum,
    flushes, touched, copies, xl), with ``copies[j]`` the bytes of flush j's flat copy
    (allreduce_bucket's ``self.flatten(bucket)``, ``stage_1_and_2.py`` l.2367; 0 when its runs are one
    slice each), with a ``communication_data_type`` unlike the model's also the run's cast to it (l.2376-2377,
    run x C, live with the flat copy through the all-reduce), and ``xl[j]`` those of an extra-large gradient reduced
    alone in its own storage.
    Shared by :func:`zero12_backward_transients` and :func:`zero12_offload_flush_bytes` (the
    same flushes run under CPU optimizer offload: reduce_ipg_grads -> average_tensor, l.2205-2228).
    Kept once per (layouts, tensor list, W, RBS, stage, D, C), compared by identity: a plan asks for it
    from its transients, its offload flush and its offload norm terms."""
    key = ("flush_replay", W, int(ec.zero.reduce_bucket_size), _zero12_replay_stage(ec)) + _zero12_replay_bytes(ec, layouts)
    memo = layouts[0]._memo if layouts else {}
    got = memo.get(key)
    if (got is not None and got[1] is inv and len(got[0]) == len(layouts)
            and all(a is b for a, b in zip(got[0], layouts))):
        return got[2]
    out = _zero12_flush_replay_compute(ec, inv, layouts, W)
    if layouts:
        memo[key] = (tuple(layouts), inv, out)
    return out


def _one_rank_runs_folded(lay: Zero12Layout, order: "_FlushOrder", k0: int, k1: int, backwards: bool,
                          Wl: int) -> "Iterable[tuple[int, int, int]]":
    """The (group 0, flat start, numel) of hook positions k0..k1-1 of one param group's flush replay (hook
    order: the layout's flat order, or with ``backwards`` its reverse), each maximal run of consecutive
    tensors lying whole in one rank r <= ``Wl``'s slice given as one tensor: the run's lowest flat start and
    its summed numels. The block walk of the replay's copy_bytes merges such a run into one slice of r
    (each later one extends the open block of r by its elements, a tensor of 0 elements is skipped), so it
    gives the same blocks and rank ranges: a bucket crossing a partition boundary at W = 2 walks its ~1e5
    tensors at 1e5 layers otherwise (issue 21). O(runs x log tensors)."""
    P = lay.P
    A, N = order.starts, order.numels
    T = len(N)
    k = k0
    while k < k1:
        a0, n0 = A[k], N[k]
        r = a0 // P
        if n0 <= 0 or r > Wl or (a0 + n0 - 1) // P != r:
            yield 0, a0, n0
            k += 1
            continue
        if backwards:  # positions k.. are flat indices T-1-k down: those starting at or past r P lie whole in r
            ke = min(k1, T - bisect.bisect_left(lay.starts, r * P))
            lo = A[ke - 1]
        else:  # flat indices k..: those ending at or before (r + 1) P
            ke = bisect.bisect_right(lay.ends, (r + 1) * P, k, k1)
            lo = a0
        yield 0, lo, sum(N[k:ke])
        k = ke


def _zero12_replay_bytes(ec: EffectiveConfig, layouts: list[Zero12Layout]) -> tuple[int, int]:
    """(D, C) of a ZeRO-1/2 flush replay, bytes per element: D of the gradients the flushes move, C of a run's cast
    to ``communication_data_type`` (0: none). The model dtype's and :func:`zero12_comm_cast_bytes`, except under
    :func:`zero1_compact_grad_accum`, whose epilogue moves the fp32 param.grad_accum (``stage_1_and_2.py`` l.1237,
    get_gradient_for_reduction) and casts every run, fp32, to the fp16 communication dtype (l.2376-2377)."""
    if zero1_compact_grad_accum(ec, "DeepSpeedZeroOptimizer", len(layouts)):
        return DTYPE_BYTES[ec.grad_dtype], zero12_comm_cast_bytes(ec, ec.grad_dtype)
    return DTYPE_BYTES[ec.model_dtype], zero12_comm_cast_bytes(ec)


def _zero12_replay_stage(ec: EffectiveConfig) -> int:
    """2 when a ZeRO-1/2 reduce moves each gradient in its backward hook, in autograd's order (ZeRO-2;
    ZeRO-1 with ``overlap_comm``: ``stage_1_and_2.py`` process_gradients l.2290 ``if self.partition_gradients
    or self.overlap_comm`` -> reduce_ready_partitions_and_remove_grads l.2294, at the accumulation boundary,
    and reduce_gradients l.971 then skips its epilogue loop, ``if not self.overlap_comm``), 1 when ZeRO-1
    moves every gradient in the boundary's epilogue loop (reduce_gradients l.971-976, params in order)."""
    return 2 if ec.zero.stage == 2 or ec.zero.overlap_comm else 1


def _zero12_flush_replay_compute(ec: EffectiveConfig, inv: Inventory, layouts: list[Zero12Layout], W: int) -> tuple:
    """:func:`_zero12_flush_replay`, computed."""
    D, cast = _zero12_replay_bytes(ec, layouts)
    rbs = int(ec.zero.reduce_bucket_size)
    st = _zero12_replay_stage(ec)
    # every trainable tensor as three packed columns (group, flat start, numel), groups in index
    # order (ZeRO-1's loop). Packed, not a list of (g, start, numel) tuples: the replay is kept in
    # the layout's memo for the rest of generate (5a4ec71 made ZeRO-2 overlap_comm plans replay; issue 21)
    if len(layouts) <= 1:
        lay0 = layouts[0] if layouts else None
        m_g = None  # one group: every tensor's group is 0
        m_a = lay0.starts if lay0 else _packed(())
        m_n = _packed(lay0.numels) if lay0 else _packed(())
        p_cols = (None, m_a, m_n)
    else:
        p_g = _packed(g for g, lay in enumerate(layouts) for _ in lay.numels)
        p_a = _packed(a for lay in layouts for a in lay.starts)
        p_n = _packed(n for lay in layouts for n in lay.numels)
        p_cols = (p_g, p_a, p_n)
        # model order across groups (autograd's reverse order is ZeRO-2's hook order): the
        # index into the group-ordered columns of each trainable tensor in model order
        gid = {k: g for g, k in enumerate(sorted({t.group for t in inv.tensors if t.trainable}))}
        pos = [0] * len(layouts)
        base = [0] * (len(layouts) + 1)
        for g, lay in enumerate(layouts):
            base[g + 1] = base[g] + len(lay.numels)
        idx = []
        for t in inv.tensors:
            if t.trainable:
                g = gid[t.group]
                idx.append(base[g] + pos[g])
                pos[g] += 1
        m_g = _packed(map(p_g.__getitem__, idx))
        m_a = _packed(map(p_a.__getitem__, idx))
        m_n = _packed(map(p_n.__getitem__, idx))
        del idx
    if st == 2:
        order = _FlushOrder(None if m_g is None else _packed(reversed(m_g)), _packed(reversed(m_a)),
                            _packed(reversed(m_n)))
    else:
        order = _FlushOrder(*p_cols)
    sizes = order.numels
    # ZeRO-2: the gradient its autograd node made with each one, whole while its hook runs
    # (autograd_siblings: the weight as an nn.Linear's bias arrives); ZeRO-1 holds all of them anyway
    trainable = [t.trainable for t in inv.tensors]
    T = len(order)
    tn = itertools.compress((t.numel for t in inv.tensors), trainable)  # trainable numels, model order
    if st != 2 or not (len(m_n) == sum(trainable) and all(map(operator.eq, tn, m_n))):
        hooked = sizes  # autograd bytes / D live at each hook: no sibling counted
    else:
        sib_model = _packed(itertools.compress(autograd_siblings(inv), trainable))
        hooked = _packed(map(operator.add, sizes, reversed(sib_model)))
        del sib_model
    del trainable
    csum = _packed(itertools.accumulate(sizes, initial=0))
    # flushes: (bucket params as a range of indices in order, index in order of the triggering
    # param or None for the epilogue). A gradient triggers a flush when the bucket's elements plus
    # its own exceed RBS, and then starts the next bucket: from a bucket starting at s, the first
    # k > s with csum[k+1] - csum[s] > RBS (k >= 0 for the first, empty, bucket)
    # Packed (_Flushes): a small reduce_bucket_size makes one flush per few tensors (160,003 flushes of
    # 180,003 tensors at 2e4 layers and RBS 4,096, as generate tries), and a list of (range, trigger)
    # tuples with the per-flush lists below was ~60 MB there, kept in the memo (issue 21)
    f_start, f_trig = array.array("q"), array.array("q")  # flush j: [f_start[j], f_start[j+1]), trigger or -1
    one_group = ZERO12_COLUMNS and order.groups is None and len(layouts) == 1 and layouts[0].P > 0
    per = _zero12_flush_period(inv, sizes, T, st) if ZERO12_FLUSH_PERIOD and one_group else None
    skips: list[tuple[int, int, int]] = []  # (j1, q, m): flushes j1 + q .. j1 + q + m q - 1 are j1 .. j1 + q - 1 shifted
    seen: dict[int, int] = {}  # phase of a flush start in the period -> that flush's index
    s0 = 0
    while True:
        if per is not None and f_start and per[0] <= s0 < per[1]:
            # the walk's own state at a flush start s0 is s0 alone (the bucket is empty): where the sizes repeat
            # with period v over [p0, pend), a flush from s0 + d (d a multiple of v) reads sizes s0 + d .. k + d,
            # which equal s0 .. k's while k + d < pend, so its end and trigger are s0's shifted by d. A phase seen
            # at flush j1 again at flush j: flushes j1 .. j - 1 repeat, shifted by d = s0 - f_start[j1], as long
            # as their largest trigger (s0, the start of j) shifted stays below pend; flush 0 (the only one with
            # an empty f_start, ``if f_start and k <= s0``) is never a period's
            p0, pend, v = per
            j = len(f_start)
            j1 = seen.setdefault((s0 - p0) % v, j)
            if j1 < j:
                d, q = s0 - f_start[j1], j - j1
                m = (pend - 1 - s0) // d
                if m > 0:
                    f_start.extend(_shifted_periods(f_start[j1:j], d, m))
                    f_trig.extend(_shifted_periods(f_trig[j1:j], d, m))
                    skips.append((j1, q, m))
                    s0 += m * d
                seen = {(s0 - p0) % v: len(f_start)}
        k = bisect.bisect_right(csum, csum[s0] + rbs) - 1
        if f_start and k <= s0:
            k = s0 + 1
        f_start.append(s0)
        if k >= T:
            f_trig.append(-1)
            break
        f_trig.append(k)
        s0 = k
    f_start.append(T)
    flushes = _Flushes(f_start, f_trig)
    Ps = [lay.P for lay in layouts]
    Wl = W - 1
    # a communication_data_type unlike the model's: allreduce_bucket casts the flat run to it (l.2376-2377,
    # ``tensor.to(communication_data_type)``), both live through the all-reduce; a run of one slice is cast
    # from its view. Engine (TINY, W 2, bf16 with fp32 communication, one flush): the flat copy 86,418 B
    # (l.2367) beside its fp32 cast 172,836 B (l.2377) at backward's peak (cast: _zero12_replay_bytes, above)

    def run_bytes(cnt: int, num: int) -> int:
        return (num * D if cnt > 1 else 0) + (num * cast if cnt else 0)
    lay0 = layouts[0] if one_group else None

    def copy_bytes(ks: range, ranges: list[tuple[int, int]]) -> int:
        # the bucket's slices in order, one per (parameter, owning rank), neighbours owned by the
        # same rank merged: blocks of m consecutive slices of n elements each (distinct owners).
        # The owners of p are (first rank, end rank, slice elements per rank): the first and last
        # owner hold part of their slice, the ranks between a whole P. ``ranges`` gets the ranks
        # the bucket's slices belong to, overlapping or touching ranges merged.
        k0, k1 = ks.start, ks.stop
        if one_group and k1 > k0:
            # every slice in one rank r's partition (the span's min start and max end, zero-size tensors
            # only widening it): the walk below merges them into one block of one slice, whose run is a
            # view (no flat copy; its cast only), and gives ranges the one pair (r, r + 1)
            # (hook order is the layout's flat order or its reverse: flat indices [j0, j1), whose starts and ends
            # never decrease, so the span and the elements in O(1) from the layout's columns, issue 21)
            P = Ps[0]
            j0, j1 = (T - k1, T - k0) if st == 2 else (k0, k1)
            lo = lay0.starts[j0]
            r = lo // P
            num = lay0.prefix[j1] - lay0.prefix[j0]
            if num > 0 and (lay0.ends[j1 - 1] - 1) // P == r <= Wl:
                ranges.append((r, r + 1))
                return run_bytes(1, num)
        blocks: list[list[int]] = []  # [n, m, owner of the last slice]
        ca = cb = -1
        if one_group:
            items = _one_rank_runs_folded(lay0, order, k0, k1, st == 2, Wl)
        else:
            og = itertools.repeat(0) if order.groups is None else order.groups[k0:k1]
            items = zip(og, order.starts[k0:k1], order.numels[k0:k1])
        for g, a0, n0 in items:
            P = Ps[g]
            if not P or n0 <= 0:
                continue
            r0 = a0 // P
            r1 = (a0 + n0 - 1) // P
            if r1 > Wl:
                r1 = Wl
            if r0 > r1:
                continue
            if r0 == r1:
                own = ((r0, r0 + 1, min(a0 + n0, (r0 + 1) * P) - max(a0, r0 * P)),)
            elif r1 > r0 + 1:
                own = ((r0, r0 + 1, (r0 + 1) * P - a0), (r0 + 1, r1, P), (r1, r1 + 1, min(a0 + n0, (r1 + 1) * P) - r1 * P))
            else:
                own = ((r0, r0 + 1, (r0 + 1) * P - a0), (r1, r1 + 1, min(a0 + n0, (r1 + 1) * P) - r1 * P))
            if r0 <= cb and r1 + 1 >= ca:
                if r0 < ca:
                    ca = r0
                if r1 + 1 > cb:
                    cb = r1 + 1
            else:
                if cb > ca:
                    ranges.append((ca, cb))
                ca, cb = r0, r1 + 1
            for ra, rb, n in own:
                if blocks and blocks[-1][2] == ra:
                    last = blocks[-1]
                    if last[1] > 1:
                        last[1] -= 1
                        blocks.append([last[0] + n, 1, ra])
                    else:
                        last[0] += n
                    if rb - ra > 1:
                        blocks.append([n, rb - ra - 1, rb - 1])
                else:
                    blocks.append([n, rb - ra, rb - 1])
        if cb > ca:
            ranges.append((ca, cb))
        # runs of slices up to RBS elements are flattened (a run of one slice is a view):
        # for each slice cnt += 1, num += n; past RBS the run is flushed. A block of m equal
        # slices is stepped in O(1): what completes the open run, the full runs, the rest.
        best = cnt = num = 0
        for n, m, _ in blocks:
            while m > 0:
                t = (rbs - num) // n + 1 if n > 0 else m + 1  # slices until num > RBS
                if t <= m:
                    cnt += t
                    num += t * n
                    best = max(best, run_bytes(cnt, num))
                    cnt = num = 0
                    m -= t
                    c = rbs // n + 1  # a full run from empty
                    q = m // c
                    if q:
                        best = max(best, run_bytes(c, c * n))
                        m -= q * c
                else:
                    cnt += m
                    num += m * n
                    m = 0
        return max(best, run_bytes(cnt, num))

    touched = _RankRanges()
    if not skips:
        copies = _packed(copy_bytes(ks, touched.open()) for ks, _ in flushes)
        # a gradient over RBS elements is reduced in its own autograd storage, never moved into the
        # bucket (extra_large_param_to_reduce): it is live through its flush
        xl = _packed(sizes[ks[0]] * D if len(ks) == 1 and sizes[ks[0]] > rbs else 0 for ks, _ in flushes)
        return D, rbs, st, order, sizes, hooked, T, csum, flushes, touched, copies, xl
    # the walk's skipped periods: a flush's extra-large gradient depends on its sizes only (the shifted flushes'
    # are the period's); its flat copy and rank ranges also on where its flat span lies, so a skipped period
    # takes the previous one's while the base period and the skipped ones lie in one rank r's partition
    # [r P, (r + 1) P), r < W: every flush there with elements takes copy_bytes' one-rank branch (run_bytes(1,
    # elements), ranges (r, r + 1)), one without none (copy 0, no range); past it the flushes are walked
    P = Ps[0]
    F = len(flushes)
    cl: list[int] = []
    xll: list[int] = []
    j = 0

    def walk(upto: int) -> None:
        nonlocal j
        for jj in range(j, upto):
            ks, _ = flushes[jj]
            cl.append(copy_bytes(ks, touched.open()))
            xll.append(sizes[ks[0]] * D if len(ks) == 1 and sizes[ks[0]] > rbs else 0)
        j = max(j, upto)

    def walk_copies(upto: int) -> None:  # the flushes' copies and ranges only (their xl already the period's)
        nonlocal j
        for jj in range(j, upto):
            cl.append(copy_bytes(flushes[jj][0], touched.open()))
        j = max(j, upto)

    for j1, q, m in skips:
        walk(j1 + q)  # a skip's base period starts at or after the previous skip's end
        end = j1 + q + m * q
        xll.extend(xll[j1:j1 + q] * m)
        while j < end:
            b0 = j - q  # the period before j, walked or taken: the base of the next ones
            a = f_start[b0]
            d = f_start[j] - a
            if st == 2:  # hook position k is flat index T - 1 - k: the base period is flat [T - a - d, T - a)
                r = lay0.starts[T - a - 1] // P
                ok = lay0.ends[T - a - 1] <= (r + 1) * P
                room = T - bisect.bisect_left(lay0.starts, r * P) - a  # positions from a on with start >= r P
            else:
                r = lay0.starts[a] // P
                ok = True
                room = bisect.bisect_right(lay0.ends, (r + 1) * P) - a  # positions from a on ending by (r + 1) P
            m2 = max(0, min((end - j) // q, room // d - 1)) if ok and r <= Wl else 0
            if m2:
                cl.extend(cl[b0:j] * m2)
                lo, hi = bisect.bisect_left(touched.fj, b0), bisect.bisect_left(touched.fj, j)
                touched.ra.extend(touched.ra[lo:hi] * m2)
                touched.rb.extend(touched.rb[lo:hi] * m2)
                touched.fj.extend(_shifted_periods(touched.fj[lo:hi], q, m2))
                touched._j += m2 * q
                j += m2 * q
            # the period across rank r's end walked; the next one (in one rank again) is the next base
            walk_copies(min(j + q, end))
    walk(F)
    copies = _packed(cl)
    xl = _packed(xll)
    del cl, xll
    return D, rbs, st, order, sizes, hooked, T, csum, flushes, touched, copies, xl


def _shifted_periods(base: "Sequence[int]", d: int, m: int) -> "array.array":
    """``base`` repeated m times, the i-th copy (1-based) each value + i x d: the columns of m skipped periods
    of a walk whose positions advance d a period, built a column at a time (q C-level ranges, not m x q values
    one by one)."""
    q = len(base)
    out = array.array("q", bytes(8 * q * m))
    for c in range(q):
        b = base[c]
        out[c::q] = array.array("q", range(b + d, b + d * m + 1, d))
    return out


def _zero12_flush_period(inv: Inventory, sizes: "Sequence[int]", T: int, st: int) -> "tuple[int, int, int] | None":
    """(p0, pend, v): hook positions [p0, pend) of a one-group ZeRO-1/2 flush replay whose sizes repeat with
    period v (``sizes[k + v] == sizes[k]`` for p0 <= k < pend - v, checked here by one C-level comparison), from
    ``model.parallel.layer_repeat``'s identical layers (at least 4): the trainable tensors of a layer, in model
    order (ZeRO-1's epilogue loop) or its reverse (autograd's hook order); where there are none, the longest run
    of at least :data:`ZERO12_EQUAL_RUN` equal sizes, period 1 (issue 21: an inventory of 1e5 nameless tensors of
    one shape has no layers; the walk's state at a flush start is that start alone, so a period of the sizes is all
    the skip needs, whatever made it); None where neither is found."""
    from advisor.model.parallel import layer_repeat
    lr = layer_repeat(inv)
    if lr is None or lr.count < 4:
        return _equal_sizes_run(sizes, T)
    ts = inv.tensors
    h = sum(1 for t in ts[:lr.head] if t.trainable)  # trainable tensors before the layers
    v = sum(1 for t in ts[lr.head:lr.head + lr.unit] if t.trainable)
    if not v:
        return _equal_sizes_run(sizes, T)
    a, b = h, h + v * lr.count
    if st == 2:
        a, b = T - b, T - a
    if a < 0 or b > T or sizes[a:b - v] != sizes[a + v:b]:
        return _equal_sizes_run(sizes, T)
    return a, b, v


#: True: :func:`zero12_backward_transients` keeps what it derives from a flush replay alone on the replay's
#: ``_Flushes.memo``; False: derived again per plan (tests compare the two)
ZERO12_TRANSIENT_MEMO = True


#: the shortest run of equal consecutive sizes :func:`_zero12_flush_period` takes as a period-1 repeat
ZERO12_EQUAL_RUN = 64


def _equal_sizes_run(sizes: "Sequence[int]", T: int) -> "tuple[int, int, int] | None":
    """(a, b, 1): the first longest run ``sizes[a:b]`` of equal values, at least :data:`ZERO12_EQUAL_RUN` long,
    else None; the change points found by C-level maps (no Python step per size)."""
    if T < ZERO12_EQUAL_RUN:
        return None
    cuts = [0, *itertools.compress(range(1, T), map(operator.ne, itertools.islice(sizes, 1, T), sizes)), T]
    lens = list(map(operator.sub, itertools.islice(cuts, 1, None), cuts))
    n = max(lens)
    if n < ZERO12_EQUAL_RUN:
        return None
    a = cuts[lens.index(n)]
    return a, a + n, 1


def zero12_boundary_holds_all(ec: EffectiveConfig, ga: int) -> bool:
    """Whether a ZeRO-1 reduce at the accumulation boundary finds every 16-bit gradient already made
    before it moves the first one: without ``overlap_comm`` (the epilogue loop, reduce_gradients
    ``stage_1_and_2.py`` l.971-976, runs after loss.backward), and with ``overlap_comm`` at GA > 1,
    where micro-step 1's hooks move nothing (reduce_ready_partitions_and_remove_grads l.2293-2295:
    only ``partition_gradients or is_gradient_accumulation_boundary()``), so every param.grad of the
    earlier micro-steps is live when the boundary's hooks start moving them, in autograd's order."""
    z = ec.zero
    return z.stage == 1 and (not z.overlap_comm or ga > 1)


#: True: :func:`zero12_backward_transients` keeps the prefix and suffix maxima of its flush moments at the flushes it
#: reads (:class:`_RangeMaxAt`); False: as whole columns (tests/test_range_max_at21.py compares the two)
ZERO12_RANGE_MAX_AT = True


class _RangeMaxAt(dict):
    """max(A[:i + 1]) (``suffix`` False) or max(A[i:]) (True) at the indices i read, as a dict: ``points`` filled at
    once by one C-level pass over A (slices between consecutive points, a running maximum), any other index on its
    first read (:meth:`__missing__`). For :func:`zero12_backward_transients`, which reads them at a rank range's first
    flush and the one after it: a few of ~1e5 flushes at generate's 1e5-tensor limit, where the two whole columns
    (``itertools.accumulate``) cost ~35 ms a replay (issue 21). Values are A's ints, as the columns'."""

    def __init__(self, A: "Sequence[int]", suffix: bool, points: "Iterable[int]") -> None:
        super().__init__()
        self._A, self._suffix = A, suffix
        best = None
        if suffix:
            prev = len(A)
            for i in sorted(points, reverse=True):
                if i < prev:
                    m = max(A[i:prev])
                    best = m if best is None or m > best else best
                    prev = i
                self[i] = best
        else:
            prev = 0
            for i in sorted(points):
                if i + 1 > prev:
                    m = max(A[prev:i + 1])
                    best = m if best is None or m > best else best
                    prev = i + 1
                self[i] = best

    def __missing__(self, i: int) -> int:
        v = self[i] = max(self._A[i:]) if self._suffix else max(self._A[:i + 1])
        return v


def zero12_backward_transients(ec: EffectiveConfig, inv: Inventory, layouts: list[Zero12Layout],
                               W: int, ga: int = 1) -> Runs:
    """Runs of (A_r, R_r, G_r) per rank, in bytes: the transients of a ZeRO-1/2 backward and step on top of
    the persistent state and the ipg bucket, for a plan :func:`zero12_transients_modeled` accepts.

    The reduce, replayed in DeepSpeed's order (``stage_1_and_2.py`` DeepSpeedZeroOptimizer): a
    gradient is copied into the ipg bucket and its autograd storage freed
    (reduce_independent_p_g_buckets_and_remove_grads: ``grad_reduc.data = bucket view``); the
    bucket is reduced (a *flush*) when the next gradient would not fit (elements + n_i > RBS) and
    at the end of backward (independent_gradient_partition_epilogue -> reduce_ipg_grads). ZeRO-2
    moves each gradient in its backward hook, in the reverse of model order (autograd finishes the
    last-used parameter first); ZeRO-1 moves every gradient in the epilogue, groups and params in
    order (reduce_gradients), so all N x D autograd gradients are live with the bucket first.
    A flush's average_tensor cuts the bucket into one slice per (parameter, owning rank), merging
    neighbours owned by the same rank, and allreduce_and_scatter -> allreduce_bucket flattens each
    run of slices up to RBS elements (``tensor = self.flatten(bucket)``): a new tensor of the run's
    elements x D unless the run is one slice (torch returns a view). After the flush,
    copy_grads_in_partition copies the rank's own gradients into ``grads_in_partition``
    (I_r x D, allocated at the rank's first such flush, the averaged_gradients storage).

    A_r (ZeRO-2, autograd): max over parameters p of (n_p + s_p) x D (p's autograd gradient, before
    its hook moves it, and s_p = :func:`autograd_siblings`, the gradient its node made with it, not
    yet accumulated: an nn.Linear's weight as its bias's hook runs) + I_r x D if an earlier flush
    allocated grads_in_partition; 0 at ZeRO-1 (the lp_grads entry is that instant).
    R_r (the reduce): max over flushes j of copy_j + unmoved_j + (I_r x D if allocated before j),
    and, at the flush that allocates grads_in_partition, unmoved_j + xl_j + I_r x D (its flat copy
    freed, an extra-large gradient xl_j not yet dropped: tracked on the engine at ZeRO-1, two groups),
    with unmoved_j = the triggering gradient and its sibling (ZeRO-2) or it and every later one in the epilogue
    loop (ZeRO-1), plus a gradient over RBS elements, which is reduced in its own storage
    (``extra_large_param_to_reduce``, not copied into the bucket); and the end of the epilogue, (I_r + P - Cov_r) x D, when get_flat_partition's
    zero pads complete averaged_gradients before _release_ipg_buffers.
    G_r (the step's norm): max over the rank's gradient slices of numel x 8: get_grad_norm_direct
    casts each to fp64 (``g.data.to(get_norm_dtype())``, ``zero/utils.py`` get_norm_dtype: fp64
    where the accelerator has it) one at a time before the flat fp32 copy exists.
    ZeRO-1 with ``overlap_comm`` at GA > 1 (:func:`zero12_boundary_holds_all`): the boundary's hooks move
    the gradients in autograd's order, but every param.grad already exists (micro-step 1 moved none), so
    unmoved_j = every gradient from the trigger on in hook order + the trigger's autograd sibling's new
    gradient (made with it, not yet accumulated), and A_r is the boundary's accumulation over the N x D
    of 16-bit gradients (the ``lp_grads`` entry): max over hook positions k of (s_k + n_k - moved_k) x D,
    the new gradient n_k beside the accumulated ones not yet moved (``accumulateGrad`` adds it into
    param.grad before the post-accumulate hook moves it), + an extra-large gradient whose flush k's hook
    triggers, + the kept ones (:func:`_zero12_kept_xl`) and I_r x D once a flush allocated
    grads_in_partition. Engine, tests/engine/test_peak_parity.py z1_bf16_overlap_tbsga2_w2 (TINY, one
    flush): the boundary's backward peaks at l2.weight's accumulation, (42,742 + 23,177) x 2 B of gradients.
    Elements: RBS = reduce_bucket_size; D = model dtype bytes. O(tensors x flushes + tensors log
    tensors), whatever W is: a parameter's owners are one range of ranks (:class:`Runs`)."""
    D, rbs, st, order, sizes, hooked, T, csum, flushes, touched, copies, xl = _zero12_flush_replay(ec, inv, layouts, W)
    held = zero12_boundary_holds_all(ec, ga)
    if not ec.contiguous_gradients_effective and zero1_compact_grad_accum(ec, "DeepSpeedZeroOptimizer", len(layouts)):
        # ZeRO-1 fp16 with fp32 accumulation without contiguous_gradients: _buffered_reduce_fallback_preserving_fp32's
        # walk (l.2231-2235) into the compact partitions, every grad_accum whole (keep_all); the hooks' fp32 copies are
        # their own entries (A_r 0), no partition before the boundary (A'_r = R'_r = 0)
        return _zero12_noncontig_compact_transients(ec, layouts, W, D, order, hooked, csum, flushes, keep_all=True,
                                                    held=held, C=_zero12_replay_bytes(ec, layouts)[1]).map(
            lambda t: (0, t[1], t[2], 0, 0))
    if not ec.contiguous_gradients_effective and ec.zero.stage == 1:
        # ZeRO-1 without contiguous_gradients (:func:`zero12_transients_modeled`: any GA and param groups,
        # overlap_comm on or off). At GA > 1 without overlap_comm the boundary's epilogue walks the param.grad micro-step
        # 1 left, accumulated in place (accumulateGrad), the same N x D storages: R is GA 1's, and what lives before
        # the boundary is _zero12_entries' lp_grads_accumulated / accumulate_grad_new (no ipg buffer, l.3260). The
        # epilogue puts each
        # gradient in the bucket by reference (a gradient over RBS too: the extra-large path is the contiguous
        # branch's, l.1441-1449) and a flush copies nothing into a partition (l.2272: ``if
        # self.contiguous_gradients and ...``), so all N x D stay whole beside each flush's flat copy: reduce_ipg_grads
        # -> _buffered_reduce_fallback_preserving_fp32 (l.2232) -> allreduce_bucket's ``self.flatten(bucket)``
        # (l.2367), the bucket's elements x D, a view for a bucket of one tensor (as _zero12_noncontig_transients).
        # The step's fp64 norm copy (get_grad_norm_direct l.2684) as the contiguous plans'. Engine (TINY, W 2):
        # z1_bf16_noncontig_smallbucket_w2 backward 934 B of flat copy (l2.bias, l3.weight, l3.bias) beside the
        # 86,418 B of gradients; z1_bf16_noncontig_w2 (one flush) the whole N x D flat copy
        whole = csum[T] * D
        # a communication_data_type unlike the model's: allreduce_bucket casts the flat copy (or the one gradient's
        # view) to it, ``tensor.to(communication_data_type)`` (l.2376-2377), both live through the all-reduce and the
        # copy back (l.2391-2393): E x C more at each flush (zero12_comm_cast_bytes: by dtype, fp16 on bf16 too).
        # Engine (TINY W 2, bf16, reduce_bucket_size 10,000, GA 2, 2026-12-06): fp32 communication backward:2
        # +46,232 B (+84,764 B with overlap_comm) under the engine with the flat copy alone, l2.weight's fp32 cast
        # 23,177 x 4 = 92,708 B at l.2377; fp16 communication's 46,354 B cast tied with the new-gradient moment
        cast = zero12_comm_cast_bytes(ec)
        if held and st == 2:
            # with overlap_comm at GA > 1 the boundary's hooks flush in autograd's order
            # (process_gradients l.2290 -> reduce_ready_partitions_and_remove_grads l.2294 -> l.1422) beside the
            # N x D of accumulated param.grad, which no flush moves either (l.2272). accumulateGrad adds each new
            # gradient into param.grad in place and it is freed before the post-accumulate hook flushes (engine
            # trace, TINY at RBS 10,000, GA 2: l2.weight's new 46,354 B freed, then the 934 B flat copy of l3.bias,
            # l3.weight, l2.bias at allreduce_bucket l.2367), so a flush holds its flat copy and the new gradient
            # of its trigger's autograd sibling (not yet accumulated) beside N x D, and the backward's own moment
            # is a node's new gradients, max_k (n_k + s_k) x D, beside N x D (the accumulate_grad_new entry, as
            # without overlap_comm): the autograd node's outputs before their AccumulateGrad runs
            R = whole + max((((csum[ks.stop] - csum[ks.start]) * D if len(ks) > 1 else 0)
                             + (csum[ks.stop] - csum[ks.start]) * cast
                             + (0 if trig is None else (hooked[trig] - sizes[trig]) * D)
                             for ks, trig in flushes), default=0)
            A = max(hooked, default=0) * D
            return zero12_largest_slices(layouts, W).map(lambda sl: (A, R, sl * 8))
        R = max((((csum[ks.stop] - csum[ks.start]) * D if len(ks) > 1 else 0) + (csum[ks.stop] - csum[ks.start]) * cast
                 for ks, _ in flushes), default=0) + whole
        return zero12_largest_slices(layouts, W).map(lambda sl: (0, R, sl * 8))
    if not ec.contiguous_gradients_effective:
        if zero12_compact_grad_buffer(ec, "DeepSpeedZeroOptimizer", noncontig=True):
            return _zero12_noncontig_compact_transients(ec, layouts, W, D, order, hooked, csum, flushes)
        return _zero12_noncontig_transients(ec, layouts, W, D, hooked, csum, flushes, inv)
    F = len(flushes)
    # what follows from the replay alone (its flushes, W, D, stage) and the few inputs in each key is kept on its
    # _Flushes (read only): generate's plans share replays (88 plans, 27 replays at the 1e5-tensor limit, issue 21)
    dm = flushes.memo if isinstance(flushes, _Flushes) and ZERO12_TRANSIENT_MEMO else {}
    # the flush that allocates each rank's grads_in_partition (the first flush holding a slice
    # of the rank); each rank's largest gradient slice (the fp64 norm copy)
    first = dm.get(("first", ZERO12_FLUSH_PERIOD))
    if first is None and ZERO12_FLUSH_PERIOD:
        # each rank range's first flush only (touched is in flush order, so a range's later flushes never give
        # the min): the same bounds (every range's ends) and values, from ~2 rank ranges instead of one a flush
        once = dict(zip(zip(reversed(touched.ra), reversed(touched.rb)), reversed(touched.fj)))
        first = dm[("first", True)] = Runs.from_updates(W, ((a, b, j) for (a, b), j in once.items()), F, "min")
    elif first is None:
        first = dm[("first", False)] = Runs.from_updates(W, touched.triples(), F, "min")
    gmax = zero12_largest_slices(layouts, W)  # max over the parameters' owner slices, once per layout

    def sufmax() -> list:
        # sufmax()[k] = the largest gradient at or after position k of order (0 past the end); ZeRO-2's figures
        # alone read it
        got = dm.get("sufmax")
        if got is None:
            got = dm["sufmax"] = list(itertools.accumulate(reversed(hooked), max, initial=0))[::-1]
        return got
    suffix_at = (lambda k: csum[T] - csum[k])  # elements at or after position k
    p_t = sum(lay.P for lay in layouts)
    # flush j's bytes without the rank's grads_in_partition, which counts only for j > first_r:
    # red_r = max(base_r, max_{j <= first_r} A_j, max_{j > first_r} A_j + I_r D)
    # the bytes of a new autograd gradient not yet accumulated (the trigger's sibling in hook order): the model dtype's,
    # D but under zero1_compact_grad_accum, whose gradients moved are the 4-byte grad_accum (_zero12_replay_bytes).
    # Engine (TINY W 2 GA 2, fp16 with fp32 accumulation, overlap_comm, 2026-12-06): the boundary's peak at l1.bias's
    # hook flushing l2.weight holds l1.weight's new fp16 gradient, 19,264 x 2 B (77,056 counted in 4 bytes: -5.3%)
    Ds = DTYPE_BYTES[ec.model_dtype]

    def unmoved_bytes(trig: int) -> int:
        if not held:  # the trigger's gradient in D, its sibling's new one in the model dtype
            return sizes[trig] * D + (hooked[trig] - sizes[trig]) * Ds
        # every gradient from the trigger on; in hook order (overlap_comm) also the sibling's new one
        return suffix_at(trig) * D + ((hooked[trig] - sizes[trig]) * Ds if st == 2 else 0)

    got = dm.get(("columns", held, Ds, ZERO12_RANGE_MAX_AT)) if ZERO12_COLUMNS and F else None
    if got is not None:
        B, A, pre_max, suf_max = got
    elif ZERO12_COLUMNS and F:
        # the same columns by C-level maps: only the last flush is the epilogue's (no trigger, _Flushes)
        trig = flushes.trig[:-1]
        if not held:
            un = map(operator.add, map(D.__mul__, map(sizes.__getitem__, trig)),
                     map(Ds.__mul__, map(operator.sub, map(hooked.__getitem__, trig), map(sizes.__getitem__, trig))))
        else:  # unmoved_bytes(trig): every gradient from the trigger on (+ in hook order its sibling's new one)
            un = map(D.__mul__, map(csum[T].__sub__, map(csum.__getitem__, trig)))
            if st == 2:
                un = map(operator.add, un, map(Ds.__mul__, map(operator.sub, map(hooked.__getitem__, trig),
                                                               map(sizes.__getitem__, trig))))
        # packed (_packed: 8 bytes a value, not an int object each), as they are kept with the replay; suf_max
        # without the list's closing None, never read (suf_max[f + 1] for f + 1 < F only)
        B = _packed(itertools.chain(map(operator.add, un, xl[:-1]), (xl[F - 1],)))
        A = _packed(map(operator.add, copies, B))
        if ZERO12_RANGE_MAX_AT:
            # read at min(f, F - 1) and f + 1 only, f a rank range's first flush: those, not two whole columns
            pre_max = _RangeMaxAt(A, False, {min(f, F - 1) for f in first.values})
            suf_max = _RangeMaxAt(A, True, {f + 1 for f in first.values if f + 1 < F})
        else:
            pre_max = _packed(itertools.accumulate(A, max))
            suf_max = _packed(itertools.accumulate(reversed(A), max))[::-1]
        dm[("columns", held, Ds, ZERO12_RANGE_MAX_AT)] = B, A, pre_max, suf_max
    else:
        B = [(0 if trig is None else unmoved_bytes(trig)) + xl[j]
             for j, (_, trig) in enumerate(flushes)]  # unmoved + extra-large gradient of flush j
        A = [copies[j] + B[j] for j in range(len(flushes))]
        pre_max = list(A)
        for j in range(1, F):
            pre_max[j] = max(pre_max[j - 1], A[j])
        suf_max = [None] * (F + 1)
        for j in range(F - 1, -1, -1):
            suf_max[j] = A[j] if suf_max[j + 1] is None else max(A[j], suf_max[j + 1])

    kept = _zero12_kept_xl(ec, layouts, W, order, flushes, xl)
    # ZeRO-1 overlap_comm at GA > 1: the boundary's accumulation moments by flushes done before them,
    # E[c] (elements): a hook position k in flush c's bucket after its first (c flushes done) or the
    # trigger of flush c (c done, flush c's extra-large gradient still pending), N - moved_k + hooked_k
    got = dm.get(("acc", held and st == 2, ZERO12_COLUMNS))
    if got is not None:
        acc, acc_pre, acc_suf, acc_ok, acc_okD, acc_okn = got
    else:
        acc: list[int] = []
        if held and st == 2 and ZERO12_COLUMNS:
            # the loop below with each bucket's maximum a C-level max over a slice of the column
            # e[k] = N - moved_k + hooked_k (elements), position k's accumulation moment
            e = _packed(map(operator.add, map(csum[T].__sub__, itertools.islice(csum, T)), hooked))
            fs, ft = flushes.starts, flushes.trig
            for c in range(F):
                best = max(e[fs[c] + (c > 0):fs[c + 1]], default=-1)
                t = ft[c]
                if t >= 0:
                    best = max(best, e[t] + xl[c] // D)
                acc.append(best)
            del e
        elif held and st == 2:
            for c, (ks, trig) in enumerate(flushes):
                best = max((csum[T] - csum[k] + hooked[k] for k in ks if k > ks.start or c == 0), default=-1)
                if trig is not None:
                    best = max(best, csum[T] - csum[trig] + hooked[trig] + xl[c] // D)
                acc.append(best)

        acc_pre = list(itertools.accumulate(acc, max)) if acc else []  # max of acc[0..c]
        acc_suf = (list(itertools.accumulate(reversed(acc), max))[::-1] + [-1]) if acc else []  # max of acc[c..]

        # the held regime's flushes with a moment (acc >= 0), their bytes and how many lie at or before each flush
        acc_ok = [e >= 0 for e in acc] if ZERO12_COLUMNS else None
        acc_okD = [e * D for e in itertools.compress(acc, acc_ok)] if ZERO12_COLUMNS else None
        acc_okn = list(itertools.accumulate(acc_ok)) if ZERO12_COLUMNS else None
        if ZERO12_COLUMNS:  # kept with the replay: packed (8 bytes a value), read by index, slice and map only
            acc, acc_pre, acc_suf, acc_okD, acc_okn = map(_packed, (acc, acc_pre, acc_suf, acc_okD, acc_okn))
        dm[("acc", held and st == 2, ZERO12_COLUMNS)] = acc, acc_pre, acc_suf, acc_ok, acc_okD, acc_okn

    def boundary(f: int, inter: int, K: tuple) -> int:
        # A_r of the held overlap_comm regime over the N x D of lp_grads, bytes: O(1) per piece of ranks
        # without kept extra-large gradients (prefix / suffix maxima around the flush f that allocates
        # grads_in_partition), O(flushes) with them
        if K and acc_ok is not None:
            # the loop below by C-level maps: flushes c <= f without, c > f with the rank's I_r x D
            v = list(map(operator.add, acc_okD, itertools.compress(K, acc_ok)))
            cut = acc_okn[min(f, len(acc_okn) - 1)] if acc_okn else 0
            best = max(0, max(v[:cut], default=0), max(v[cut:], default=-inter * D) + inter * D)
        elif K:
            best = 0
            for c, e in enumerate(acc):
                if e >= 0:
                    best = max(best, e * D + K[c] + (inter * D if c > f else 0))
        else:
            lo = acc_pre[min(f, len(acc) - 1)]
            hi = acc_suf[f + 1] if f + 1 < len(acc) else -1
            best = max(0, lo * D if lo >= 0 else 0, (hi * D + inter * D) if hi >= 0 else 0)
        return max(0, best - csum[T] * D)

    def figure(row: tuple) -> tuple[int, int, int]:
        (inter, cov, _), f, g, K = row
        if acc:
            return (boundary(f, inter, K),) + _reduce_figure(inter, cov, f, K)[1:] + (g * 8,)
        return _reduce_figure(inter, cov, f, K) + (g * 8,)

    def _reduce_figure(inter: int, cov: int, f: int, K: tuple) -> tuple[int, int]:
        red = (inter + p_t - cov) * D
        if K:
            # ZeRO-1 non-owners keep the extra-large gradients of earlier flushes (_zero12_kept_xl):
            # every moment from the flush after each one on, to the end of the epilogue
            red += K[F]
            if ZERO12_COLUMNS:  # the loop below, C-level: flushes j <= f without, j > f with I_r x D
                AK = list(map(operator.add, A, K))  # K has F + 1 terms: F sums
                red = max(red, max(AK[:f + 1], default=red))
                if f + 1 < F:
                    red = max(red, max(AK[f + 1:]) + inter * D)
            else:
                for j in range(F):
                    red = max(red, A[j] + K[j] + (inter * D if j > f else 0))
            if f < F:
                red = max(red, B[f] + K[f] + inter * D)
            return (0, red) if st != 2 else (_zero12_auto(st, sufmax(), flushes, f, inter, D), red)
        if F:
            red = max(red, pre_max[min(f, F - 1)])
        if f + 1 < F and suf_max[f + 1] is not None:
            red = max(red, suf_max[f + 1] + inter * D)
        if f < F:
            # the flush that allocates grads_in_partition: the flat copy is freed, but an
            # extra-large gradient is still in its own storage while copy_grads_in_partition
            # copies it (grad_reduc.data = the new view frees it after)
            red = max(red, B[f] + inter * D)
        return _zero12_auto(st, sufmax(), flushes, f, inter, D), red

    if zero1_compact_grad_accum(ec, "DeepSpeedZeroOptimizer", len(layouts)):
        # ZeRO-1's epilogue walk in 4-byte gradients (D, copies, xl, A from the replay, _zero12_replay_bytes) into the
        # compact partition, keeping the gradients the rank does not own: R_r and G_r. No hook moves a gradient (A_r
        # 0: the hooks' fp32 copies are their own entries, zero12_offload_fp32_accum_hooks) and no partition exists
        # before the boundary (A'_r = R'_r = 0)
        C = _zero12_replay_bytes(ec, layouts)[1]
        # fp32 communication: the 4-byte runs are reduced as they are (no cast, l.2376) and the rank's slices reach the
        # fp32 partition without ``source.to(fp32)``'s copy (l.1326)
        f32 = ec.comm_dtype == "fp32"
        if len(layouts) > 1:  # one compact partition per group, made at the rank's first flush of that group
            return _zero12_compact_groups_transients(layouts, W, D, rbs, order, flushes, copies, list(A), xl, hooked,
                                                     gmax,
                                                     C=C, keep_unowned=True, fp32_slices=f32).map(
                lambda t: (0, t[1], t[2], 0, 0))
        return _zero12_compact_transients(layouts, W, D, rbs, order, flushes, copies, list(A), xl, hooked, first, gmax,
                                          C=C, keep_unowned=True, fp32_slices=f32).map(lambda t: (0, t[1], t[2], 0, 0))
    if zero12_compact_grad_buffer(ec, "DeepSpeedZeroOptimizer"):
        if len(layouts) > 1:
            return _zero12_compact_groups_transients(layouts, W, D, rbs, order, flushes, copies, list(A), xl, hooked,
                                                     gmax,
                                                     C=zero12_comm_cast_bytes(ec))
        return _zero12_compact_transients(layouts, W, D, rbs, order, flushes, copies, list(A), xl, hooked, first, gmax,
                                          C=zero12_comm_cast_bytes(ec))
    return Runs.zip(zero12_rank_terms(ec, layouts, W), first, gmax, kept).map(figure)


def _xl_runs(own: list[tuple[int, int, int]], P: int, rbs: int) -> Iterator[tuple[int, int, int, int, list]]:
    """The runs allreduce_and_scatter (``stage_1_and_2.py`` l.1558-1575) makes of one gradient's slices, one per owner
    rank in ascending order (``own``: (first rank, end rank, slice elements) as ranges, the ranks between the ends a
    whole P each): slices are added to a run until its elements exceed ``rbs``, which closes it. Yields (first rank,
    end rank, elements, slices, [(first rank, end rank, slice elements)]) per run; the whole runs between the ends,
    all alike, as one item covering their ranks (elements and slices of one of them). O(ends), not O(ranks)."""
    start = own[0][0] if own else 0
    cum = cnt = 0
    members: list[tuple[int, int, int]] = []
    for a, b, n in own:
        m = b - a
        r = a
        while m > 0:
            if cnt == 0 and m > 1 and n == P and P > 0:
                c = rbs // P + 1  # a run from empty: the slices it takes to exceed rbs
                q = (m // c) if c > 0 else 0
                if q:
                    yield r, r + q * c, c * P, c, [(r, r + q * c, P)]
                    r += q * c
                    m -= q * c
                    start = r
                    continue
            # one slice at a time (few: ends, or the rest of a block)
            if cnt == 0:
                start = r
            take = 1
            if n > 0 and cnt and m > 1:
                # P-slices until the run exceeds rbs
                take = min(m, max(1, (rbs - cum) // n + 1))
            cum += take * n
            cnt += take
            members.append((r, r + take, n))
            r += take
            m -= take
            if cum > rbs:
                yield start, r, cum, cnt, members
                cum = cnt = 0
                members = []
    if cnt:
        yield start, members[-1][1], cum, cnt, members


def _zero12_compact_transients(layouts: list[Zero12Layout], W: int, D: int, rbs: int, order: "_FlushOrder",
                               flushes: "_Flushes", copies: "Sequence[int]", A: list[int], xl: "Sequence[int]",
                               hooked: "Sequence[int]", first: Runs, gmax: Runs, C: int = 0,
                               keep_unowned: bool = False, fp32_slices: bool = False) -> Runs:
    """Runs of (A_r, R_r, G_r, A'_r, R'_r) per rank, bytes, for :func:`zero12_compact_grad_buffer`'s regime (ZeRO-2,
    bf16 with ``grad_accum_dtype`` fp32, one param group): :func:`zero12_backward_transients`' terms with the compact
    fp32 buffer (P x 4) in place of grads_in_partition, and A'_r / R'_r what a micro-step after the first adds
    (the buffer kept from micro-step 1, GA > 1).

    ``stage_1_and_2.py``: average_tensor asks each of the rank's own slices for its piece of the buffer
    (_get_compact_grad_partition_slice, l.1674), which makes it at the rank's first flush f_r, before the
    all-reduce (l.1268-1274), and keeps the rank's slices apart (no merging where an output exists, l.1677-1683);
    allreduce_and_copy(_with_multiple_ranks) adds each reduced slice of the rank into it through
    ``source.to(fp32)`` (l.1324-1326), one at a time, while the flush's flat copy (allreduce_bucket l.2367) is live.
    A gradient over reduce_bucket_size is reduced in its own autograd storage (l.1444-1449) and, where the rank
    owns part of it, copy_grads_in_partition returns without replacing it (l.2179-2182, l.2269-2270), so it stays
    whole to the end of the epilogue (_clear_param_grad_only l.1063); the other ranks clear it (l.2262-2268).
    With A_j = flush j's flat copy + the gradients not yet in the bucket (+ its extra-large one), as
    :func:`zero12_backward_transients`, K_r,j = the extra-large gradients of flushes before j the rank owns part
    of, and c_r,j the rank's largest slice in flush j:
    R_r = max(max_{j < f_r} A_j, max_{j > f_r} (A_j + K_r,j) + P x 4,
    max_{j: c_r,j > 0} (A_j + K_r,j + x_r,j + c_r,j x 4) + P x 4, K_r,F + P x 4 at the end of the epilogue),
    x_r,j = the flush's elements x D where every slice lies in the rank's partition and there are several
    (flattened on the rank that keeps them apart, a view on the others, where A_j has no copy); at an extra-large
    gradient's flush, whose slices allreduce_and_scatter cuts into runs of up to RBS elements (:func:`_xl_runs`), the
    rank's cast is beside its own run's flat copy, not the largest run's (W 4 probe: rank 3's cast of its 10,333
    elements of l2.weight came after the 12,844-element run of ranks 1-2 was freed); R'_r = the same with
    P x 4 at every flush, less R_r. A_r = max over hooks of the hooked gradient(s) x D, + K_r and P x 4 from f_r's
    trigger on; A'_r = the same with P x 4 at every hook, less A_r. G_r = the rank's largest slice x 8
    (get_grad_norm_direct l.2684 over the buffer's fp32 views). A rank between the ends of a tensor holds no other,
    so K_r,j = 0 at its whole-partition slices. Engine: tests/engine/test_peak_parity.py z2_bf16_gaccfp32_tbsga2_w2
    (one flush); probes at reduce_bucket_size 10,000 (four flushes, two extra-large gradients, real Linears; W 2 at
    GA 2 and W 4 at GA 1, one run each, 2026-12-06): every phase of every rank within 0.01%, the forward's proxy
    scalars aside. O(tensors + flushes log flushes + U log U) for U slice updates (<= 3 per tensor, and per
    extra-large gradient <= 3 per run of :func:`_xl_runs`, its whole runs between the ends as one).
    ``keep_unowned``: ZeRO-1's walk (:func:`zero1_compact_grad_accum`, the epilogue's order and 4-byte gradients in
    ``A``, ``copies`` and ``xl``): K_r,j = the extra-large gradients of flushes before j the rank owns NO part of,
    whose fp32 grad_accum stage 1 never clears (reduce_ipg_grads l.2272-2274 copies, and so clears, only the rank's
    own, l.2179-2182), where ZeRO-2 clears those and keeps its own (l.2262-2270); a rank between the ends of a
    tensor owns no other, so it keeps every other one, as its neighbours do. Engine (TINY W 2, GA 2, 2026-12-06):
    rank 1's boundary peak at l2.weight's flush holds l1.weight's 19,264 x 4 B (l.1237) that rank 0 owns."""
    # communication_data_type bytes C (0: the model's dtype, zero12_comm_cast_bytes: bf16 to fp16 is a cast too):
    # allreduce_bucket casts each run to it (l.2376-2377), so a run
    # costs its flat copy (several slices) + its cast (:func:`_zero12_flush_replay`'s run_bytes), and the reduced
    # slice reaches _add_to_grad_partition_buffer in C: ``source.to(fp32)`` copies it (n x 4) unless C is fp32 (l.1326)
    cast = C
    S4 = 0 if C == 4 or fp32_slices else 4

    def run(cnt: int, num: int) -> int:
        return (num * D if cnt > 1 else 0) + (num * cast if cnt else 0)

    P = layouts[0].P if layouts else 0
    pbuf = sum(lay.P for lay in layouts) * 4
    F = len(flushes)
    Wl = W - 1

    def owners(a0: int, n0: int) -> list[tuple[int, int, int]]:
        # (first rank, end rank, slice elements) of a tensor at flat start a0 of n0 elements
        if n0 <= 0 or not P:
            return []
        r0, r1 = a0 // P, min((a0 + n0 - 1) // P, Wl)
        if r0 > r1:
            return []
        out = [(r0, r0 + 1, min(a0 + n0, (r0 + 1) * P) - a0)]
        if r1 > r0 + 1:
            out.append((r0 + 1, r1, P))
        if r1 > r0:
            out.append((r1, r1 + 1, min(a0 + n0, (r1 + 1) * P) - r1 * P))
        return out

    # the extra-large gradients: (flush, first owner, end owner, bytes); per rank piece the (flush, bytes) it keeps
    xls = []
    for j in range(F):
        if xl[j]:
            ks, _ = flushes[j]
            o = owners(order.starts[ks.start], order.numels[ks.start])
            if o:
                xls.append((j, o[0][0], o[-1][1], order.numels[ks.start] * D))
    pts = sorted({0, W, *(a for _, a, _, _ in xls), *(b for _, _, b, _ in xls)})
    # per piece of ranks: (flushes of its kept gradients, ascending; their bytes accumulated), by a sweep over the
    # owner ranges (each gradient listed on the pieces it covers only)
    kept_lists: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    by_start = sorted(xls, key=lambda x: x[1])
    active: list[tuple[int, int, int, int]] = []
    nxt = 0
    for lo in pts[:-1]:
        while nxt < len(by_start) and by_start[nxt][1] <= lo:
            active.append(by_start[nxt])
            nxt += 1
        active = [x for x in active if x[2] > lo]
        if keep_unowned:  # ZeRO-1: the gradients whose owner range misses this piece of ranks
            held = set(map(id, active))
            mine_xl = sorted((x[0], x[3]) for x in xls if id(x) not in held)
        else:
            mine_xl = sorted((x[0], x[3]) for x in active)
        kept_lists.append((tuple(j for j, _ in mine_xl),
                           tuple(itertools.accumulate((by for _, by in mine_xl), initial=0))))
    kept = Runs(pts, kept_lists) if xls else Runs.const(W, ((), (0,)))

    def K(lst: tuple, j: int) -> int:  # bytes kept at flush j (or at the hooks of its bucket): flushes before j
        return lst[1][bisect.bisect_left(lst[0], j)]

    def at_rank(r: int) -> tuple:
        return kept_lists[bisect.bisect_right(pts, r) - 1] if xls else ((), (0,))

    ups: list[tuple[int, int, int]] = []
    for j in range(F):
        ks, _ = flushes[j]
        if xl[j]:
            # an extra-large gradient, alone: one slice per owner rank, ascending, never merged; allreduce_and_scatter
            # cuts them into runs, each closed by the slice that takes it over RBS elements (l.1558-1575), and
            # flattens each run of several (l.2367): a rank's cast lives beside its own run's copy only
            base = A[j] - copies[j]
            a0, n0 = order.starts[ks.start], order.numels[ks.start]
            o = owners(a0, n0)
            for ra, rb, elems, cnt, sizes_of in _xl_runs(o, P, rbs):
                cp = run(cnt, elems)
                fl = cp - elems * cast if cast else 0  # freed before the slice casts (allreduce_bucket l.2391-2393)
                for x0, x1, n in sizes_of:
                    ups.append((x0, x1, base + cp + max(0, n * S4 - fl)
                                + (K(at_rank(x0), j) if x1 == x0 + 1 or keep_unowned else 0)))
            continue
        sl = [x for k in ks for x in owners(order.starts[k], order.numels[k])]
        # every slice in one rank's partition, several: merged into one (a view) on the other ranks, flattened there
        # (a flush under RBS elements is one run); an extra-large gradient's slices are of distinct ranks
        own = (sum(order.numels[k] for k in ks) * D
               if (copies[j] == sum(order.numels[k] for k in ks) * cast and len(sl) > 1
                   and all(x[:2] == sl[0][:2] for x in sl)) else 0)
        # with a cast (a communication_data_type unlike the model's) allreduce_bucket returns it and the flat copy is
        # freed (l.2391-2393) before _add_to_grad_partition_buffer's ``source.to(fp32)`` (l.1326): the flush holds
        # the larger of its all-reduce moment and the slice cast's, not both. Engine (TINY W 2, RBS 10,000, bf16 with
        # fp16 communication, 2026-12-06): rank 1 46,318 B over with the flat copy of l2.weight counted beside it
        fl = own + copies[j] - sum(order.numels[k] for k in ks) * cast if cast else 0
        for a, b, n in sl:
            ups.append((a, b, A[j] + own + max(0, n * S4 - fl)
                        + (K(at_rank(a), j) if b == a + 1 or keep_unowned else 0)))
    at_slice = Runs.from_updates(W, ups, -1, "max")

    H = [max(hooked[ks.start:ks.stop], default=0) for ks, _ in flushes]  # the largest hook of each bucket

    def table(v: list[int]) -> list[list[int]]:  # sparse table: range maxima in O(1)
        t = [list(v)]
        w = 1
        while 2 * w <= len(v):
            prev = t[-1]
            t.append(list(map(max, prev[:len(prev) - w], prev[w:])))
            w *= 2
        return t

    tA, tH = table(A), table(H)

    def rmax(t: list[list[int]], a: int, b: int) -> int:  # max of v[a:b], -1 if empty
        if b <= a:
            return -1
        e = (b - a).bit_length() - 1
        return max(t[e][a], t[e][b - (1 << e)])

    sufmax0 = max(hooked, default=0)

    def one(row: tuple) -> tuple[int, int, int, int, int]:
        f, g, m, lst = row
        before = rmax(tA, 0, min(f, F))
        # K constant between cuts (f = F: a rank holding only padding, no flush slice of it: no segment after)
        cuts = sorted({min(max(jj + 1, f + 1), F) for jj in lst[0]} | {min(f + 1, F), F})
        after = max((rmax(tA, a, b) + K(lst, a) for a, b in zip(cuts, cuts[1:]) if b > a), default=-1)
        after = after + pbuf if after >= 0 else 0
        end = K(lst, F) + pbuf
        mine = m + pbuf if m >= 0 else 0
        # flush f_r's own largest run copy beside the buffer it made: average_tensor makes the buffer while it lists
        # the slices (l.1674), before allreduce_and_scatter flattens any run (l.1708), so at an extra-large
        # gradient's flush a run of other ranks' slices is flattened beside it (under ``mine`` elsewhere)
        at_f = A[f] + K(lst, f) + pbuf if f < F else 0
        red1 = max(before, after, mine, end, at_f)
        redn = max(before + pbuf if before >= 0 else 0, after, mine, end, at_f)
        # hooks: before f_r's bucket no buffer; f_r's trigger and every later bucket with it and K_r
        t = flushes[f][1] if f < F else None
        hooks_after = max((rmax(tH, a, b) * D + K(lst, a) for a, b in zip(cuts, cuts[1:]) if b > a), default=-1)
        auto1 = max(rmax(tH, 0, min(f + 1, F)) * D, (hooked[t] * D + pbuf) if t is not None else 0,
                    hooks_after + pbuf if hooks_after >= 0 else 0)
        auton = max(sufmax0 * D + pbuf, hooks_after + pbuf if hooks_after >= 0 else 0)
        return auto1, red1, g * 8, auton - auto1, redn - red1

    return Runs.zip(first, gmax, at_slice, kept).map(one)


def partition_owners(P: int, W: int, a0: int, n0: int) -> list[tuple[int, int, int]]:
    """The ranks whose ZeRO-1/2 partition (``P`` elements each, ``W`` ranks; the last rank's
    partition holds the padding) a flat slice of ``n0`` elements starting at element ``a0`` touches,
    as (first rank, end rank, elements of the slice each of those ranks holds): at most three
    runs (the first rank's part, the whole partitions between, the last rank's part), so a slice
    over many ranks costs O(1). [] for an empty slice or an empty partition. Source of the layout:
    ``stage_1_and_2.py`` get_data_parallel_partitions l.2559 (equal partitions of the padded flat group)."""
    if n0 <= 0 or not P:
        return []
    r0, r1 = a0 // P, min((a0 + n0 - 1) // P, W - 1)
    if r0 > r1:
        return []
    out = [(r0, r0 + 1, min(a0 + n0, (r0 + 1) * P) - a0)]
    if r1 > r0 + 1:
        out.append((r0 + 1, r1, P))
    if r1 > r0:
        out.append((r1, r1 + 1, min(a0 + n0, (r1 + 1) * P) - r1 * P))
    return out


def _zero12_compact_groups_transients(layouts: list[Zero12Layout], W: int, D: int, rbs: int, order: "_FlushOrder",
                                      flushes: "_Flushes", copies: "Sequence[int]", A: list[int], xl: "Sequence[int]",
                                      hooked: "Sequence[int]", gmax: Runs, C: int = 0,
                                      keep_unowned: bool = False, fp32_slices: bool = False) -> Runs:
    """:func:`_zero12_compact_transients` with several param groups: runs of (A_r, R_r, G_r, A'_r, R'_r) per rank,
    bytes. Each group g has its own compact fp32 buffer of P_g x 4 bytes (``stage_1_and_2.py``
    _get_compact_grad_partition_buffer(group_idx), l.1303-1310), made by average_tensor at the rank's first flush
    holding a slice of ITS partition of that group (_get_compact_grad_partition_slice l.1312-1321, called per slice at
    l.1674), so at flush j the rank holds buf_r(j) = sum of P_g x 4 over the groups whose first flush f_r,g <= j (the
    one made inside j included: it exists before the all-reduce). The terms are the one-group terms with that step
    function in place of P x 4 from f_r on: R_r = max over flushes j of A_j + K_r,j + buf_r(j) and, at each slice of
    the rank in j, + x_r,j + c x 4 (its fp32 cast, l.1324-1326; x_r,j the flattened run where the rank keeps several
    slices of a one-rank flush apart), an extra-large gradient's slices by their :func:`_xl_runs`; K_r,F + every
    buffer at the end of the epilogue. A_r: the hooks of flush j's bucket run with buf_r(j - 1) (j's trigger with
    buf_r(j)). A'_r / R'_r: a later micro-step, every buffer live from its start (kept to the step, l.3131), less
    A_r / R_r. G_r = the rank's largest slice x 8 (get_grad_norm_direct l.2684, over every group's fp32 views).
    Engine, TINY_FROZEN_GROUPS (two groups, l2 frozen) at reduce_bucket_size 10,000, W 2, GA 2: with the coarse
    lifetimes backward:1/2/4 +116,224 / +115,008 B on ranks 0 / 1 (the epilogue's flush of l1.weight: its autograd
    storage 38,528 B, its flat copy l.2367 38,528 B, the cast of the rank's 9,783- / 9,481-element slice, and the two
    buffers), forward:2 +39,976 B (both buffers kept), step:4 +78,308 / +75,876 B (the fp64 norm copy). W 4 probe
    (real Linears, one run, 2026-12-06): every phase of the four ranks within 0.6% (the forward's proxy scalars; the
    first step -0.22%, the one step instant for both groups).
    ``keep_unowned``: ZeRO-1's walk (:func:`zero1_compact_grad_accum`), as in :func:`_zero12_compact_transients`: the
    extra-large gradients kept whole are those of groups' flushes the rank owns NO slice of (their fp32 grad_accum,
    never cleared at stage 1: l.2272-2274), not its own. Engine (TINY as decay / no-decay groups, W 2, GA 2,
    2026-12-06): rank 1's boundary peak at l2.weight's flush holds l1.weight's 19,264 x 4 B, which rank 0 owns.
    Evaluated rank by rank at the points where a slice starts or ends (every rank when W <= tensors):
    O(points x (tensors + flushes))."""
    # communication_data_type bytes C (0: the model's dtype, zero12_comm_cast_bytes: bf16 to fp16 is a cast too):
    # allreduce_bucket casts each run to it (l.2376-2377), so a run
    # costs its flat copy (several slices) + its cast (:func:`_zero12_flush_replay`'s run_bytes), and the reduced
    # slice reaches _add_to_grad_partition_buffer in C: ``source.to(fp32)`` copies it (n x 4) unless C is fp32 (l.1326)
    cast = C
    S4 = 0 if C == 4 or fp32_slices else 4

    def run(cnt: int, num: int) -> int:
        return (num * D if cnt > 1 else 0) + (num * cast if cnt else 0)

    F = len(flushes)
    Ps = [lay.P for lay in layouts]
    G = len(layouts)
    pb = [P_g * 4 for P_g in Ps]
    bufend = sum(pb)
    grp = order.groups

    def gi(k: int) -> int:
        return 0 if grp is None else grp[k]

    def owners(g: int, a0: int, n0: int) -> list[tuple[int, int, int]]:
        return partition_owners(Ps[g], W, a0, n0)

    # every slice update as (first rank, end rank, flush, group, bytes at the slice's moment less K_r,j and the
    # buffers): a flush's slice of n elements A_j + x_j + n x 4; an extra-large gradient's run member its run's copy
    # + n x 4 beside the gradient (:func:`_xl_runs`)
    ent: list[tuple[int, int, int, int, int]] = []
    for j in range(F):
        ks, _ = flushes[j]
        if xl[j]:
            g = gi(ks.start)
            base = A[j] - copies[j]
            for _, _, elems, cnt, sizes_of in _xl_runs(owners(g, order.starts[ks.start], order.numels[ks.start]),
                                                       Ps[g], rbs):
                cp = run(cnt, elems)
                fl = cp - elems * cast if cast else 0  # freed before the slice casts, as in _zero12_compact_transients
                ent.extend((x0, x1, j, g, base + cp + max(0, n * S4 - fl)) for x0, x1, n in sizes_of)
            continue
        sl = [(gi(k), a, b, n) for k in ks for a, b, n in owners(gi(k), order.starts[k], order.numels[k])]
        own = (sum(order.numels[k] for k in ks) * D
               if (copies[j] == sum(order.numels[k] for k in ks) * cast and len(sl) > 1
                   and all(x[1:3] == sl[0][1:3] for x in sl)) else 0)
        fl = own + copies[j] - sum(order.numels[k] for k in ks) * cast if cast else 0
        ent.extend((a, b, j, g, A[j] + own + max(0, n * S4 - fl)) for g, a, b, n in sl)
    ent.sort()
    xlb = [order.numels[flushes[j][0].start] * D if xl[j] else 0 for j in range(F)]
    xall = [j for j in range(F) if xlb[j]]
    H = [max(hooked[ks.start:ks.stop], default=0) * D for ks, _ in flushes]  # the largest hook of each bucket
    TR = [(hooked[t] * D if t is not None else -1) for t in (flushes[j][1] for j in range(F))]  # each trigger

    def table(v: list[int]) -> list[list[int]]:  # sparse table: range maxima in O(1)
        t = [list(v)]
        w = 1
        while 2 * w <= len(v):
            prev = t[-1]
            t.append(list(map(max, prev[:len(prev) - w], prev[w:])))
            w *= 2
        return t

    tA, tH, tT = table(A), table(H), table(TR)

    def rmax(t: list[list[int]], a: int, b: int) -> int:  # max of v[a:b], -1 if empty
        if b <= a:
            return -1
        e = (b - a).bit_length() - 1
        return max(t[e][a], t[e][b - (1 << e)])

    def segs(cuts: "Iterable[int]") -> list[tuple[int, int]]:
        c = sorted({0, F, *(x for x in cuts if 0 <= x <= F)})
        return [(x, y) for x, y in zip(c, c[1:]) if y > x]

    def value_at(starts: "Iterable[int]") -> "Iterator[tuple[int, int, int, int]]":
        active: list[tuple[int, int, int, int, int]] = []
        k = 0
        for r in starts:
            while k < len(ent) and ent[k][0] <= r:
                active.append(ent[k])
                k += 1
            active = [x for x in active if x[1] > r]
            f = [F] * G  # the rank's first flush per group
            xj = set()
            for _, _, j, g, _ in active:
                if j < f[g]:
                    f[g] = j
                if xlb[j]:
                    xj.add(j)
            if keep_unowned:  # ZeRO-1: the extra-large gradients the rank owns no slice of (see the docstring)
                xj = set(xall) - xj
            made = sorted((f[g], pb[g]) for g in range(G) if f[g] < F)
            mf = [m for m, _ in made]
            mb = list(itertools.accumulate((b for _, b in made), initial=0))
            kx = sorted(xj)
            kb = list(itertools.accumulate((xlb[j] for j in kx), initial=0))

            def buf(j: int) -> int:  # the rank's buffers live at flush j (made at or before it)
                return mb[bisect.bisect_right(mf, j)] if j >= 0 else 0

            def K(j: int) -> int:  # the rank's extra-large gradients of flushes before j, kept whole
                return kb[bisect.bisect_left(kx, j)]

            red1 = redn = K(F) + bufend
            for a, b in segs([*mf, *(j + 1 for j in kx)]):
                m = rmax(tA, a, b)
                red1 = max(red1, m + K(a) + buf(a))
                redn = max(redn, m + K(a) + bufend)
            for _, _, j, _, v in active:
                red1 = max(red1, v + K(j) + buf(j))
                redn = max(redn, v + K(j) + bufend)
            auto1 = auton = 0
            # the hooks of bucket j run with the buffers of flushes before j; a trigger with flush j's
            for a, b in segs([*(m + 1 for m in mf), *(j + 1 for j in kx)]):
                m = rmax(tH, a, b)
                auto1 = max(auto1, m + K(a) + buf(a - 1))
                auton = max(auton, m + K(a) + bufend)
            for a, b in segs([*mf, *(j + 1 for j in kx)]):
                m = rmax(tT, a, b)
                if m >= 0:
                    auto1 = max(auto1, m + K(a) + buf(a))
                    auton = max(auton, m + K(a) + bufend)
            yield auto1, red1, auton, redn

    vals = Runs.at_points(W, {p for e in ent for p in e[:2]} if W > len(order) else range(W), value_at)
    return Runs.zip(vals, gmax).map(lambda t: (t[0][0], t[0][1], t[1] * 8, t[0][2] - t[0][0], t[0][3] - t[0][1]))


def _zero12_auto(st: int, sufmax: list[int], flushes: list, f: int, inter: int, D: int) -> int:
    """A_r of :func:`zero12_backward_transients`, bytes: 0 when ZeRO-1 moves its gradients in the epilogue."""
    if st != 2:
        return 0
    auto = sufmax[0] * D
    # from the flush that allocated grads_in_partition on: it ran inside the hook of its
    # triggering parameter, whose gradient is live until that hook moves it
    if f < len(flushes) and flushes[f][1] is not None:
        auto = max(auto, (sufmax[flushes[f][1]] + inter) * D)
    return auto


def _zero12_kept_xl(ec: EffectiveConfig, layouts: list[Zero12Layout], W: int, order: list, flushes: list,
                    xl: list[int]) -> Runs:
    """Runs of, per rank, () or the tuple K_0..K_F, bytes: K_j = the extra-large gradients (n_p >
    reduce_bucket_size) of flushes before j whose parameter the rank does not own, still alive at
    flush j (K_F: at the end of the epilogue). ZeRO-1 only: such a gradient is reduced in its own
    autograd storage (``stage_1_and_2.py`` l.1444-1449, ``extra_large_param_to_reduce``, cloned first
    under CPU offload), and after the flush reduce_ipg_grads drops it only where the rank owns part of
    it (l.2272-2274: ``if self.contiguous_gradients and self.is_param_in_current_partition[param_id]:
    self.copy_grads_in_partition``, whose ``grad_reduc.data =`` view frees it); ZeRO-2's non-owners
    clear it (l.2262-2268). It lives until the epilogue's _clear_param_grad_only (l.1063, l.2638-2640:
    ``p.grad = None``). Engine: tests/engine/test_peak_parity.py z1_bf16_bigtensor_w2, rank 1 +38,560 B
    (l1.weight's 19,264 x 2 B, engine.py l.3428) without it. () on every rank without such a gradient.
    O(X x (X + F)) for X extra-large gradients and F flushes."""
    if ZERO12_COLUMNS:  # the flushes with an extra-large gradient, found at C level (every flush walked below)
        if ec.zero.stage != 1 or not layouts:
            return Runs.const(W, ())
        js = list(itertools.compress(range(len(xl)), xl))
        ks = list(map(flushes.starts.__getitem__, js))
        a0s = list(map(order.starts.__getitem__, ks))
        n0s = list(map(order.numels.__getitem__, ks))
        big = js
    else:
        big = [(j, order[ks[0]]) for j, (ks, _) in enumerate(flushes) if xl[j]]
    if ec.zero.stage != 1 or not big or not layouts:
        return Runs.const(W, ())
    F = len(flushes)
    if ZERO12_COLUMNS and order.groups is None and len(layouts) == 1 and layouts[0].P:
        # the loop below by C-level maps (one group, P > 0): r0 = a0 // P, r1 = min((a0 + n0 - 1) // P, W - 1)
        P = layouts[0].P
        owners = list(zip(js, map(operator.floordiv, a0s, itertools.repeat(P)),
                          map(min, map(operator.floordiv, map(operator.sub, map(operator.add, a0s, n0s),
                                                              itertools.repeat(1)), itertools.repeat(P)),
                              itertools.repeat(W - 1))))
    else:
        if ZERO12_COLUMNS:
            gs = itertools.repeat(0) if order.groups is None else map(order.groups.__getitem__, ks)
            big = list(zip(js, zip(gs, a0s, n0s)))
        owners = []
        for j, (g, a0, n0) in big:
            P = layouts[g].P
            r0, r1 = (a0 // P, min((a0 + n0 - 1) // P, W - 1)) if P else (W, -1)
            owners.append((j, r0, r1))
    pts = {0}
    if ZERO12_COLUMNS:  # each owner range's r0 and r1 + 1, C-level
        pts.update(map(operator.itemgetter(1), owners))
        pts.update(map((1).__add__, map(operator.itemgetter(2), owners)))
    else:
        for _, r0, r1 in owners:
            pts.update((r0, r1 + 1))

    def values(starts):
        for r in starts:
            add = [0] * (F + 1)
            for j, r0, r1 in owners:
                if not (r0 <= r <= r1):
                    add[j + 1] += xl[j]
            yield tuple(itertools.accumulate(add))

    if ZERO12_COLUMNS:
        # every extra-large gradient (one per flush: a flush of one tensor) less those rank r owns part of,
        # set to 0 by one C-level pass over the owners' ranges
        oj = array.array("q", (j + 1 for j, _, _ in owners))
        o0 = array.array("q", (r0 for _, r0, _ in owners))
        o1 = array.array("q", (r1 for _, _, r1 in owners))
        every = [0, *xl]

        def values(starts):  # noqa: F811  (the column-wise form of the loop above)
            for r in starts:
                add = list(every)
                for k in itertools.compress(oj, map(operator.and_, map(r.__ge__, o0), map(r.__le__, o1))):
                    add[k] = 0
                yield tuple(itertools.accumulate(add))

    return Runs.at_points(W, pts, values)


class _GroupRuns:
    """Where a rank's kept gradients lie in the hook order of a ZeRO-1/2 flush replay with several param
    groups: each group's tensors in hook order, their hook positions and running sums of ``values`` (per
    hook position, e.g. elements). A rank meets one run of each group's tensors (its slice of that group's
    flat buffer, :meth:`Zero12Layout.meeting`; the hooks run in the reverse of model order)."""

    __slots__ = ("pos", "cum")

    def __init__(self, order: "_FlushOrder", G: int, values: "Sequence[int]"):
        self.pos: list[list[int]] = [[] for _ in range(G)]
        self.cum: list[list[int]] = [[0] for _ in range(G)]
        for k, g in enumerate(order.groups):
            self.pos[g].append(k)
            self.cum[g].append(self.cum[g][-1] + values[k])

    def runs(self, layouts: list[Zero12Layout], r: int) -> tuple[int, int, list[tuple[int, int, int]]]:
        """(a, b, runs): runs = (group, first, end) of each group's tensors meeting rank r's slice, as indices
        into that group's hook order; [a, b) the hook positions from the first of them to the last (outside
        it nothing the rank keeps changes)."""
        runs = []
        for g, lg in enumerate(layouts):
            jl, jh = lg.meeting(r) if lg.P > 0 else (0, 0)
            n_g = len(self.pos[g])
            if jh > jl:
                runs.append((g, n_g - jh, n_g - jl))
        a = min((self.pos[g][x] for g, x, _ in runs), default=0)
        b = max((self.pos[g][y - 1] + 1 for g, _, y in runs), default=0)
        return a, b, runs

    def before(self, runs: list[tuple[int, int, int]], x: int, cum: "list[list[int]] | None" = None) -> int:
        """The sum of the values (``cum``: other running sums over the same positions) of the run tensors at
        hook positions before x."""
        cum = self.cum if cum is None else cum
        tot = 0
        for g, x0, y0 in runs:
            c = bisect.bisect_left(self.pos[g], x)
            tot += cum[g][min(max(c, x0), y0)] - cum[g][x0]
        return tot


def _zero12_noncontig_transients(ec: EffectiveConfig, layouts: list[Zero12Layout], W: int, D: int,
                                 hooked: list[int], csum: list[int], flushes: list,
                                 inv: "Inventory | None" = None) -> Runs:
    """Runs of (A_r, R_r, G_r) per rank, bytes, as :func:`zero12_backward_transients`, for ZeRO-2 with
    ``contiguous_gradients`` off (any param groups, any GA, ``overlap_comm`` on or off:
    :func:`zero12_transients_modeled`). No ipg buffer exists (setup_buckets l.3260 allocates it only
    with contiguous_gradients): each hook appends the gradient whole to ``bucket.grads``
    (reduce_independent_p_g_buckets_and_remove_grads l.1441 skipped, l.1466), the same flushes as
    :func:`_zero12_flush_replay` (elements + n_i > RBS, l.1422; the epilogue's, l.1018). A flush is
    reduce_ipg_grads -> buffered_reduce_fallback (l.2229-2231) -> allreduce_no_retain with
    numel_per_bucket = the bucket's elements, so one allreduce_and_copy of the whole bucket whose
    allreduce_bucket flattens it (``self.flatten(bucket)``, l.2367: a new tensor of the bucket's
    elements x D, a view for a one-gradient bucket). After it a gradient wholly outside the rank's
    slice is dropped (clear_grad_attribute, l.2267) and one meeting the slice is kept whole in
    param.grad (no grads_in_partition copy: l.2270 needs contiguous_gradients) until the epilogue's
    get_flat_partition views it (averaged_gradients, l.1047, with zero pads).

    R_r = max((I_r + P - Cov_r) x D, max over flushes j of (bucket_j + unmoved_j) x D + copy_j +
    kept_r(j)), with bucket_j its gradients' elements, unmoved_j the triggering gradient and its
    autograd sibling (0 for the epilogue's), copy_j the flat copy and kept_r(j) x D the gradients
    meeting rank r's slice among those flushed before j (they are a run of the hook order: the
    tensors meeting a slice are consecutive in model order, :meth:`Zero12Layout.meeting`, and the
    hooks run in its reverse). A_r = the largest (n_p + s_p) x D (a hook's moment is never above its
    bucket's flush). G_r = the rank's largest gradient slice x 8 (get_grad_norm_direct l.2684).
    Measured: z2_bf16_noncontig_w2 (TINY, one flush of all 43,209 elements), backward N x 2 B of
    gradients beside their N x 2 B flat copy on both ranks.

    With ``overlap_comm`` a gradient wholly outside the rank's slice is not dropped after its flush but
    put in ``previous_reduced_grads`` (reduce_ipg_grads l.2265-2267), cleared only by the next flush's
    allreduce_and_copy before it flattens (l.2411-2415, _clear_previous_reduced_grads l.2395) or by the
    epilogue after its last flush (l.1026-1030): flush j first holds flush j-1's such gradients, whole,
    beside its bucket, then its flat copy instead of them, so its term is (bucket_j + unmoved_j) x D +
    max(copy_j, (bucket_{j-1} - meet_r(j-1)) x D) + kept_r(j), meet_r(j-1) the elements of flush j-1
    meeting the rank's slice. Engine: z2_bf16_noncontig_overlap_smallbucket_w2 (reduce_bucket_size 10,000,
    real Linears), rank 1 backward:1 +39,764 B (18.1%) under the coarse lifetimes.
    With several param groups each has its own flat buffer and partition (``__init__``: one per group) and
    the hooks fill one bucket across groups (l.1422 counts every gradient's elements): a rank keeps the
    gradients meeting its slice of their own group's buffer, one run of each group's tensors in hook order,
    so kept_r(j) sums over the groups (a bisection per group); between the first and the last of those
    tensors every flush is walked. Engine: z2_bf16_noncontig_groups_w2 (TINY_FROZEN_GROUPS at 10,000): every
    phase within 0.02% on both ranks; backward:1 was +2,030 B (1.2%) on rank 0 under the coarse lifetimes.
    O(tensors + flushes) per piece of ranks with one param group; with several, the flushes between a
    rank's first and last kept tensor times the groups."""
    lay = layouts[0]
    T = len(hooked)
    G = len(layouts)
    ov = bool(ec.zero.overlap_comm)
    starts = [ks.start for ks, _ in flushes]
    if G > 1:
        # several param groups: a rank meets one run of each group's tensors in hook order
        order = _zero12_flush_replay(ec, inv, layouts, W)[3]
        gruns = _GroupRuns(order, G, order.numels)
    bucket = [csum[ks.stop] - csum[ks.start] for ks, _ in flushes]
    # without the flat copy or the previous flush's gradients (overlap_comm), which A adds
    base = [(bucket[j] + (0 if trig is None else hooked[trig])) * D for j, (_, trig) in enumerate(flushes)]
    # a communication_data_type unlike the model's: allreduce_bucket casts the flat copy (or the one gradient's view)
    # to it, ``tensor.to(communication_data_type)`` (l.2376-2377), both live through the all-reduce; it returns the
    # cast (l.2393), freeing the flat copy, and allreduce_and_copy copies the cast back into the gradients
    # (l.2431-2438), so the flush's moment is copy + cast, after _clear_previous_reduced_grads (l.2415) with
    # overlap_comm (zero12_comm_cast_bytes: by dtype). Engine (TINY W 2, bf16, fp32 communication, reduce_bucket_size
    # 10,000, GA 2, 2026-12-06): backward:1 / 2 / 4 +92,744 B on rank 0, +131,868 B on rank 1 under the coarse
    # lifetimes, l2.weight's fp32 cast 23,177 x 4 = 92,708 B at l.2377 among the unattributed storages
    cast = zero12_comm_cast_bytes(ec)
    copy = [(bucket[j] * D if len(ks) > 1 else 0) + bucket[j] * cast for j, (ks, _) in enumerate(flushes)]
    # A_j for a rank none of whose slice is in flush j - 1 (overlap_comm: all of it kept until flush j)
    A = [base[j] + max(copy[j], bucket[j - 1] * D if ov and j else 0) for j in range(len(flushes))]
    F = len(A)
    pre = list(itertools.accumulate(A, max))
    suf = list(itertools.accumulate(reversed(A), max))[::-1] + [None]
    terms = zero12_rank_terms(ec, layouts, W)
    gmax = zero12_largest_slices(layouts, W)
    auto = max(hooked, default=0) * D

    def value_at(rs: Iterable[int]):
        for r in rs:
            if G == 1:
                jl, jh = lay.meeting(r) if lay.P > 0 else (0, 0)
                # hook order is the reverse of model order: tensor i sits at position T - 1 - i
                a, b = (T - jh, T - jl) if jh > jl else (0, 0)

                def met(x: int, a: int = a, b: int = b) -> int:  # elements meeting the slice before position x
                    return csum[min(max(x, a), b)] - csum[a]
            else:
                a, b, runs = gruns.runs(layouts, r)

                def met(x: int, runs: list = runs) -> int:
                    return gruns.before(runs, x)
            best = 0
            j1 = bisect.bisect_right(starts, a)  # flushes 0..j1-1 start at or before a: nothing kept yet
            if j1:
                best = pre[j1 - 1]
            j3 = bisect.bisect_left(starts, b)  # flushes j3.. start at or after b: all kept
            # with overlap_comm flush j3 may still hold flush j3 - 1's gradients outside the slice
            hi = min(j3 + 1, F) if ov else j3
            if hi < F:
                best = max(best, suf[hi] + met(T) * D)
            for j in range(j1, hi):
                v = base[j] + met(starts[j]) * D
                if ov and j:
                    v += max(copy[j], (bucket[j - 1] - (met(starts[j]) - met(starts[j - 1]))) * D)
                else:
                    v += copy[j]
                best = max(best, v)
            yield best

    pts: set[int] = set()
    for lg in layouts:
        if lg.P > 0:
            pts |= _change_points(lg, W)
    kept = Runs.at_points(W, pts, value_at)
    p_t = sum(lg.P for lg in layouts)

    def figure(row: tuple) -> tuple[int, int, int]:
        (inter, cov, _), red, g = row
        return auto, max((inter + p_t - cov) * D, red), g * 8

    return Runs.zip(terms, kept, gmax).map(figure)


def _zero12_noncontig_compact_transients(ec: EffectiveConfig, layouts: list[Zero12Layout], W: int, D: int,
                                         order: "_FlushOrder", hooked: "Sequence[int]", csum: "Sequence[int]",
                                         flushes: "_Flushes", keep_all: bool = False, held: bool = True,
                                         C: "int | None" = None) -> Runs:
    """Runs of (A_r, R_r, G_r, A'_r, R'_r) per rank, bytes, as :func:`_zero12_compact_transients`, for the compact fp32
    buffer regime with ``contiguous_gradients`` off (:func:`zero12_compact_grad_buffer` ``noncontig``): the flushes of
    :func:`_zero12_noncontig_transients` (whole gradients in ``bucket.grads``, no ipg buffer) go through
    reduce_ipg_grads -> _buffered_reduce_fallback_preserving_fp32 (``stage_1_and_2.py`` l.2231-2235), one run of the
    whole bucket -> _allreduce_noncontiguous_bucket_preserving_fp32 (l.2484-2511): allreduce_bucket flattens it
    (l.2367, a view for one gradient) and, per gradient the rank owns part of, the rank's buffer slice
    (_get_compact_grad_partition_slice l.2506, the group's buffer made there at the rank's first such gradient) gets
    the reduced slice through ``source.to(fp32)`` (n x 4, l.1326) beside that flat copy. After the flush a gradient
    wholly outside the rank's slice is dropped (l.2267) and one meeting it stays whole in param.grad (l.2270 needs
    contiguous_gradients) until the epilogue's _clear_param_grad_only (l.1067): no averaged_gradients are built from
    them (l.1034-1037), and at GA > 1 none survives into the next micro-step, only the buffers (kept to the step).
    R_r = max over flushes j of (bucket_j + unmoved_j) x D + kept_r(j) x D + copy_j + buf_r(j) + c_r,j x 4, and
    kept_r(F) x D + every buffer at the end of the epilogue; kept_r(j) the gradients meeting the rank's slices flushed
    before j (whole), c_r,j its largest slice in flush j, buf_r(j) its buffers made at or before j. With
    ``overlap_comm`` flush j first holds flush j - 1's gradients outside the slice (previous_reduced_grads, cleared at
    l.2488 before the flatten), beside buf_r(j - 1). A_r = max (n_p + s_p) x D (never above its bucket's flush);
    R'_r: a later micro-step, every buffer from its start, less R_r; A'_r = 0. G_r = the rank's largest slice x 8.
    Engine probes (TINY at reduce_bucket_size 10,000, real Linears, W 2, GA 2, 2026-12-06): coarse backward:1
    +162,572 / +170,998 B on ranks 0 / 1 (all 16-bit gradients whole, 86,422 B at engine.py l.3428, the cast of the
    rank's slice of l2.weight / l1.weight at l.1326 and the buffer), forward:2 +87,060 B, step:4 +154,148 / +169,124 B.
    At W 4 (one run, with and without fp32 communication): every phase of the four ranks within 0.6% (the proxy
    scalars).
    ``keep_all``: ZeRO-1's walk (:func:`zero1_compact_grad_accum` with ``contiguous_gradients`` off: ``D`` the 4-byte
    grad_accum, ``C`` the cast of a run to the communication dtype, :func:`_zero12_replay_bytes`): stage 1 clears no
    gradient after a flush (l.2272-2274 copy, and so clear, only with contiguous_gradients), so every grad_accum made
    so far stays whole through the boundary: all N at each flush when they exist before it (``held``: the epilogue, or
    overlap_comm at GA > 1), else those hooked up to the trigger (overlap_comm at GA 1), beside the trigger's autograd
    sibling's new gradient in the model dtype (hook order); no previous_reduced_grads (ZeRO-2's, l.2262-2266). Engine
    (TINY W 2 GA 2 at reduce_bucket_size 10,000, fp16 with fp32 accumulation, 2026-12-06): rank 0's boundary peak at
    l1.weight's flush, 4 N + P x 4 + its fp16 cast 19,264 x 2 + its slice cast back 19,264 x 4; rank 1's at
    l2.weight's (+ l1.weight's new fp16 gradient beside l1.bias's hook with overlap_comm).
    Evaluated rank by rank at the points where a slice starts or ends: O(points x (flushes + tensors))."""
    F = len(flushes)
    Ps = [lay.P for lay in layouts]
    G = len(layouts)
    pb = [P_g * 4 for P_g in Ps]
    bufend = sum(pb)
    ov = bool(ec.zero.overlap_comm)
    grp = order.groups

    def gi(k: int) -> int:
        return 0 if grp is None else grp[k]

    def owners(g: int, a0: int, n0: int) -> list[tuple[int, int, int]]:
        return partition_owners(Ps[g], W, a0, n0)

    bucket = [csum[ks.stop] - csum[ks.start] for ks, _ in flushes]
    base = [(bucket[j] + (0 if trig is None else hooked[trig])) * D for j, (_, trig) in enumerate(flushes)]
    if keep_all:  # ZeRO-1: every grad_accum made so far whole (not the bucket's alone), the sibling in the model dtype
        Ds = DTYPE_BYTES[ec.model_dtype]
        T = len(order)
        base = [(csum[T] if held or trig is None else csum[trig + 1]) * D
                + (0 if trig is None or not ov else (hooked[trig] - order.numels[trig]) * Ds)
                for _, trig in flushes]
    # a communication_data_type of C bytes unlike the model's: allreduce_bucket casts the flat bucket (a view for one
    # gradient) to it (l.2376-2377) and returns the cast, so the reduced slices reach _add_to_grad_partition_buffer in
    # C: ``source.to(fp32)`` copies them (n x 4, l.1326) unless C is fp32
    cb = zero12_comm_cast_bytes(ec) if C is None else C
    S4 = 0 if ec.comm_dtype == "fp32" else 4
    copy = [bucket[j] * D if len(ks) > 1 else 0 for j, (ks, _) in enumerate(flushes)]
    # every slice: (first rank, end rank, flush, group, slice elements, tensor elements)
    ent: list[tuple[int, int, int, int, int, int]] = []
    for j in range(F):
        for k in flushes[j][0]:
            g = gi(k)
            ent.extend((a, b, j, g, n, order.numels[k]) for a, b, n in owners(g, order.starts[k], order.numels[k]))
    ent.sort()

    def value_at(starts: "Iterable[int]") -> "Iterator[tuple[int, int, int, int, int]]":
        active: list[tuple[int, int, int, int, int, int]] = []
        i = 0
        for r in starts:
            while i < len(ent) and ent[i][0] <= r:
                active.append(ent[i])
                i += 1
            active = [x for x in active if x[1] > r]
            f = [F] * G
            cast = [0] * F
            meet = [0] * F  # elements of the flush's gradients meeting the rank's slice (kept whole after it)
            for _, _, j, g, n, whole in active:
                f[g] = min(f[g], j)
                cast[j] = max(cast[j], n * S4)
                meet[j] += whole
            buf = [0] * F
            for g in range(G):
                if f[g] < F:
                    buf[f[g]] += pb[g]
            buf = list(itertools.accumulate(buf))
            red1 = redn = 0
            kept = 0
            for j in range(F):
                if cb:
                    # the flat copy and its cast through the all-reduce; allreduce_bucket returns the cast and the
                    # copy is freed (l.2391-2393) before the loop makes the buffer and adds the slices (l.2498-2508)
                    at = base[j] + kept * D + copy[j] + bucket[j] * cb
                    red1 = max(red1, at + (buf[j - 1] if j else 0))
                    redn = max(redn, at + bufend)
                    at = base[j] + kept * D + bucket[j] * cb + cast[j]
                else:
                    at = base[j] + kept * D + copy[j] + cast[j]
                red1 = max(red1, at + buf[j])
                redn = max(redn, at + bufend)
                if ov and j and not keep_all:
                    prev = base[j] + kept * D + (bucket[j - 1] - meet[j - 1]) * D
                    red1 = max(red1, prev + buf[j - 1])
                    redn = max(redn, prev + bufend)
                kept += 0 if keep_all else meet[j]
            end = (csum[len(order)] if keep_all else kept) * D + bufend
            red1 = max(red1, end)
            redn = max(redn, end)
            if hook_at:
                # ZeRO-1 with overlap_comm: the boundary's hooks are its reduce; hook k accumulates beside the buffers
                # the flushes before it made (a flush runs in its trigger's hook, after that hook's accumulation)
                for done, v in hook_at:
                    red1 = max(red1, v + (buf[done - 1] if done else 0))
                    redn = max(redn, v + bufend)
            yield red1, redn

    # keep_all with overlap_comm: each hook position k's accumulation moment (bytes over the persistent state) with the
    # number of flushes done before it: the grad_accum live then (all N when ``held``, else those hooked before k), the
    # new 16-bit gradient and its sibling's (model dtype) and the fp32 copy being added (l.1237-1239). Engine (TINY as
    # decay / no-decay groups, W 2 GA 2, fp32 communication, contiguous_gradients off, overlap_comm, 2026-12-06): the
    # boundary's peak is l1.weight's hook, 4 N + 19,264 x (2 + 4) beside both ranks' partitions, +62,982 B (13%) over
    # the flushes' moments, which fp32 communication leaves without casts
    hook_at: list[tuple[int, int]] = []
    if keep_all and ov:
        Ds = DTYPE_BYTES[ec.model_dtype]
        trigs = [t for _, t in flushes if t is not None]
        T = len(order)
        for k in range(T):
            done = bisect.bisect_left(trigs, k)
            live = csum[T] if held else csum[k]
            hook_at.append((done, live * D + order.numels[k] * 4 + hooked[k] * Ds))
    pts = {p for e in ent for p in e[:2]} if W > len(order) else range(W)
    vals = Runs.at_points(W, pts, value_at)
    auto = max(hooked, default=0) * D
    return Runs.zip(vals, zero12_largest_slices(layouts, W)).map(
        lambda t: (auto, t[0][0], t[1] * 8, 0, t[0][1] - t[0][0]))


#: Where a gradient autograd makes is allocated, as an allocation-level tracker sees it: inside
#: ``loss.backward()`` of DeepSpeedEngine.backward (runtime/engine.py l.3428 in 0.19.8), before any
#: ZeRO hook moves it. An entry counting such gradients cites it beside the hook that consumes them
#: (measure.split_unclaimed matches a tracked site by this file and function).
_AUTOGRAD_GRADS = "runtime/engine.py:DeepSpeedEngine.backward (loss.backward, l.3428)"


def _zero12(b: _Builder, ec: EffectiveConfig, inv: Inventory, W: int, wrapper: str, basic: str,
            ga: int, layouts: list[Zero12Layout], terms: tuple, offload_norm: int = 0,
            offload_xl: tuple[int, int] = (0, 0), offload_flush: int = 0, offload_unmoved: int = 0,
            offload_microstep: tuple = (), offload_kept: "int | None" = None, kept_later: int = 0) -> None:
    """ZeRO-1/2 and BF16_Optimizer entries of one rank whose (I_r, Cov_r, P_max,r, F_r, single_r)
    are ``terms`` (:func:`zero12_rank_terms`, :func:`zero12_flat_copy`); ``offload_norm`` = bytes
    of the in-backward fp64 copy of a gradient slice under CPU offload, at the rank's largest
    flush (:func:`zero12_offload_norm_modeled`, :func:`zero12_offload_reduce_terms`: s_r x 8);
    ``offload_xl`` = (c_r, h) of that function: bytes of the extra-large gradient's clone live at
    that flush, and of the largest one beside the autograd gradient it replaces, in its hook;
    ``offload_flush`` = :func:`zero12_offload_flush_bytes`, the flush's flat-copy moment;
    ``offload_unmoved`` = u_r of :func:`zero12_offload_reduce_terms`, the gradients not yet in the
    bucket beside that norm copy; ``offload_microstep`` = (a_r, h_r) of :func:`zero12_offload_microstep_terms`
    (ZeRO-2 at GA > 1, one param group) or (): the reduce of a micro-step before the boundary, whose
    entries then replace the boundary's at ``reduce:1``; ``offload_kept`` = bytes of
    :func:`zero12_offload_fp32_accum_kept` where :func:`zero12_offload_fp32_accum` holds (None elsewhere): the
    fp32 gradient regime's entries (the compact partition, grad_accum across micro-steps and into the step);
    ``kept_later`` = the part of ``offload_kept`` in param groups after the first under :func:`zero1_compact_grad_accum`
    (kept into the update: the step frees a group's at that group's turn)."""
    z = ec.zero
    D = DTYPE_BYTES[ec.model_dtype]
    M = 4
    off = ec.offload_optimizer_effective != "none" and wrapper != "BF16_Optimizer"
    pin = z.offload_optimizer.pin_memory
    S = "runtime/zero/stage_1_and_2.py:DeepSpeedZeroOptimizer"
    if wrapper == "BF16_Optimizer":
        S = "runtime/bf16_optimizer.py:BF16_Optimizer"
    npad_t = sum(lay.n_pad for lay in layouts)
    p_t = sum(lay.P for lay in layouts)
    n_t = sum(lay.n for lay in layouts)
    largest = max((lay.largest for lay in layouts), default=0)
    inter_t, cov_t, p_max = terms[:3]
    flat_max, single = terms[3:5] if len(terms) > 3 else (p_t, False)
    ng = len(layouts)
    b.add("accelerator", "parameters", "lp_params_flat", npad_t * D, "persistent",
          f"N_pad x D = {npad_t} x {D}; N_pad = A_2W(N) per group (full 16-bit copy on every rank)",
          f"{S}.__init__ (flatten_dense_tensors_aligned)")
    m_tier = _host(pin) if off else "accelerator"
    b.add(m_tier, "master_weights", "fp32_master", p_t * M, "persistent",
          f"P x 4 = {p_t} x 4 (P = N_pad / W)", f"{S}.__init__ (single_partition_of_fp32_groups)")
    mom_tier = "host_pageable" if off else "accelerator"
    for m in _moment_items(ec):
        b.add(mom_tier, "optimizer_states", m, p_t * 4, "persistent",
              f"P x 4 = {p_t} x 4" + (" (DeepSpeedCPUAdam zeros_like: never pinned)" if off else ""),
              _opt_src(basic))
    step_b = optimizer_states(ec).step_bytes * ng if optimizer_states(ec).step_bytes else 0
    b.add(step_tier(ec, basic), "optimizer_states", "step", step_b, "persistent",
          f"4 B x {ng} flat fp32 partitions" if step_b else "0 (python int)", _opt_src(basic))
    if adagrad_rebuilt(ec, wrapper, basic):
        _adagrad_first_state(b, ec, inv, f"{S}.initialize_optimizer_states (l.943-946)", "")
    if wrapper == "BF16_Optimizer":
        # the gradient buffer is in grad_acc_dtype (zeros_like(bf16_groups_flat[i], dtype=self.grad_acc_dtype),
        # bf16_optimizer.py l.191): fp32 at ZeRO-1 (engine.py l.2305-2310), bf16 at stage 0 under pipeline
        # parallelism (l.2316-2320; select_optimizer). The item keeps DeepSpeed's name (fp32_groups_gradients_flat)
        G = DTYPE_BYTES[ec.grad_dtype]
        b.add("accelerator", "gradients", "fp32_grad_accum", npad_t * G, "persistent",
              f"N_pad x G = {npad_t} x {G} (full model, NOT partitioned; G = grad_accum_dtype {ec.grad_dtype})",
              f"{S}._setup_for_real_optimizer (fp32_groups_gradients_flat, l.191)")
        if G != M:
            # step(): param_partition.grad = grad_partition.to(param_partition.dtype) when the dtypes differ
            # (l.417-419), freed after optimizer.step (l.424-426): P x 4 through the update
            b.add("accelerator", "gradients", "fp32_grad", p_t * M, "step",
                  f"P x 4 = {p_t} x 4 (the gradient partition cast from {ec.grad_dtype} for the basic optimizer's "
                  "step, freed after it)", f"{S}.step (l.414-426)")
        if ec.bf16_immediate_grad_update:
            # each gradient is added in its post-accumulate hook and param.grad freed there (bf16_optimizer.py
            # accumulate_hp_grads_and_remove_lp l.707-715, create_grad_acc_hooks l.717-727): no N x D of 16-bit
            # gradients at the epilogue, before the boundary or in the step (engine probe, TINY W 2, GA 2: with them
            # counted every step and forward:2 were 86,3xx B, 14-20%, over)
            hook, comm = bf16_optimizer_epilogue_terms(ec, layouts, inv)
            if hook:
                b.add("accelerator", "workspace", "bf16_hp_grad_cast", hook, "autograd",
                      "max_p ((n_p + s_p) x D + n_p x G): a parameter's 16-bit gradient, the one its autograd node "
                      "made with it (s_p, autograd_siblings) and its grad_accum_dtype copy, in its hook "
                      "(bf16_optimizer_epilogue_terms)",
                      f"{S}.accumulate_hp_grads_and_remove_lp (_update_hp_grad l.523, then lp_param.grad = None)")
            if comm:
                b.add("accelerator", "workspace", "bf16_allreduce_flat", comm, "boundary_reduce",
                      "F: the boundary all-reduce's largest flush (the flat copy of several groups' fp32 buffers and "
                      "its cast to communication_data_type; bf16_optimizer_epilogue_terms)",
                      "runtime/engine.py:DeepSpeedEngine.allreduce_bucket (self.flatten(bucket) l.3796, "
                      "tensor.to(self.communication_data_type) l.3800-3801), from buffered_allreduce_fallback "
                      "(optimizer.get_grads_for_reduction, l.3921-3931)")
            return
        b.add("accelerator", "gradients", "lp_grads", n_t * D, "backward", f"N x 2 = {n_t} x 2 (param.grad)",
              "engine.py:DeepSpeedEngine.backward")
        cast, comm = bf16_optimizer_epilogue_terms(ec, layouts)
        if cast:
            b.add("accelerator", "workspace", "bf16_hp_grad_cast", cast, "reduce",
                  f"max_i n_i x G = {largest} x {DTYPE_BYTES[ec.grad_dtype]} (lp.grad.to(grad_accum_dtype) of one "
                  "gradient at a time, added into the fp32 buffer; every param.grad alive: "
                  "bf16_optimizer_epilogue_terms)",
                  f"{S}._update_hp_grad (bf16_optimizer.py l.523, from backward_epilogue l.503-505 at every "
                  "micro-step, engine.py _backward_epilogue l.3159-3161)")
        if comm > cast:
            b.add("accelerator", "workspace", "bf16_allreduce_flat", comm - cast, "boundary_reduce",
                  f"max(0, F - H) = {comm} - {cast}: the boundary all-reduce's largest flush (the flat copy of "
                  "several groups' fp32 buffers and its cast to communication_data_type) over the cast moment "
                  "above (bf16_optimizer_epilogue_terms)",
                  "runtime/engine.py:DeepSpeedEngine.allreduce_bucket (self.flatten(bucket) l.3796, "
                  "tensor.to(self.communication_data_type) l.3800-3801), from buffered_allreduce_fallback "
                  "(optimizer.get_grads_for_reduction, l.3921-3931)")
        if ga > 1:
            # no zero_grad before the boundary (engine.py _take_model_step l.3522-3527 runs only there);
            # backward_prologue zeroes param.grad in place (bf16_optimizer.py clear_lp_grads l.612-623), so
            # the 16-bit gradients live through every later micro-step's forward (engine, this file's
            # z1_bf16_gaccfp32_tbsga2_w2: forward:2 +86,474 B on both ranks without it)
            b.add("accelerator", "gradients", "lp_grads_accumulated", n_t * D, "accumulated_forward",
                  f"N x D = {n_t} x {D} (every param.grad of the earlier micro-steps: zeroed, not freed, by "
                  "backward_prologue)",
                  f"{S}.clear_lp_grads (torch._foreach_zero_, l.612-623); freed by zero_grad(set_to_none) after "
                  "the step (engine.py _take_model_step l.3522-3527)")
            if ec.zero.stage == 0:
                # the zeroed param.grad is the target of torch's in-place add (engine, PipelineModule 2 stages bf16
                # GA 2, stage 0's BackwardPass:2: +6,416 B without this; the pipe engine's stage before the last
                # clears in place, pipe/engine.py l.838-840)
                _add_accumulate_grad_new(b, inv, D, f"{S}.clear_lp_grads (torch._foreach_zero_, l.612-623)")
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
        # ZeRO-2 at GA > 1 (zero12_offload_microstep_modeled): the fp64 norm copies, the clones' flush and
        # the flat copy's moment are the boundary's (set_norm_for_param_grad_in_gpu only at the boundary,
        # l.2170-2171); micro-step 1's reduce has its own entries (zero12_offload_microstep_terms)
        rlife = "boundary_reduce" if offload_microstep else "reduce"
        if offload_microstep:
            a_r, h_r = offload_microstep
            b.add("accelerator", "workspace", "offload_microstep_reduce", a_r, "first_microstep_reduce",
                  "a_r: the most accelerator bytes of one moment of micro-step 1's reduce (a flush's flat copy, "
                  "the gradients not yet in the bucket, a clone reduced alone, the clones of gradients over the bucket "
                  "the rank owns part of, kept to the epilogue: zero12_offload_microstep_terms)",
                  f"{S}.reduce_ipg_grads / copy_grads_in_partition (no clear before the boundary, l.2161-2174); "
                  f"allreduce_bucket (self.flatten(bucket)); the gradients made by autograd in {_AUTOGRAD_GRADS}")
            if h_r:
                b.add(_host(pin), "gradients", "offload_microstep_accumulated", h_r, "first_microstep_reduce",
                      "h_r: the host buffers of accumulated_grads_in_cpu made by then at the moment holding the most "
                      "(zero12_offload_microstep_terms); all of them, I_r x D, from the next instant on "
                      "(offload_accumulated_grads_cpu)",
                      f"{S}.async_accumulate_grad_in_cpu_via_gpu (torch.zeros(param.numel()), l.1822-1824)")
        if offload_norm:
            b.add("accelerator", "workspace", "offload_grad_norm_fp64", offload_norm, rlife,
                  "largest gradient slice of the rank x 8 (fp64 copy for its norm, one slice at a time)",
                  f"{S}.set_norm_for_param_grad_in_gpu (accumulated_grad.data.to(get_norm_dtype()))")
        clone_at_flush, clone_in_hook = offload_xl
        # the reduce holds the larger of the flush's flat copy and the norm copies after it
        # (zero12_offload_flush_bytes): what the flat copy's moment adds over the norm's. Engine,
        # z2_bf16_oo_cpu_w4 backward:1: rank 1 +18,766 B, rank 3 +3,806 B without it
        # (allreduce_bucket l.2367's 86,418 B live at their peak, unattributed); z1_fp16_oo_cpu_w4
        # rank 1 +18,772 B (engine.py backward l.3428's 86,424 B of autograd gradients)
        if offload_unmoved:
            b.add("accelerator", "gradients", "offload_norm_unmoved_grads", offload_unmoved, rlife,
                  "u_r: the gradients not yet in the bucket at the flush whose fp64 norm copy holds the most "
                  "(ZeRO-2: its trigger and the trigger's autograd sibling; ZeRO-1: the trigger and every later "
                  "one; zero12_offload_reduce_terms)",
                  f"{S}.reduce_independent_p_g_buckets_and_remove_grads (reduce_ipg_grads before the trigger "
                  f"moves); made by autograd in {_AUTOGRAD_GRADS}")
        flat_over = max(0, offload_flush - offload_norm - clone_at_flush - offload_unmoved)
        if flat_over:
            b.add("accelerator", "workspace", "offload_reduce_flush", flat_over, rlife,
                  f"max(0, F - (s_r x 8 + c_r)) = max(0, {offload_flush} - {offload_norm + clone_at_flush}): the "
                  "largest flush's flat copy with the gradients not yet in the bucket and an extra-large one (ZeRO-1: "
                  "also all N x D gradients before the first is moved; zero12_offload_flush_bytes) over the rank's "
                  "fp64 norm moment, which comes after the copy is freed",
                  f"{S}.allreduce_bucket (self.flatten(bucket)) / reduce_ipg_grads (average_tensor); the gradients "
                  f"not yet in the bucket made by autograd in {_AUTOGRAD_GRADS}")
        if clone_at_flush:
            # tests/engine/test_peak_parity.py z2_bf16_oo_cpu_bigtensor_w2: backward +6.8% (rank 0,
            # l1.weight's clone, 38,528 B) and +8.1% (rank 1, l2.weight's, 46,354 B) without it
            b.add("accelerator", "gradients", "offload_xl_grad_clone", clone_at_flush, rlife,
                  "n_p x D of the extra-large gradient (n_p > reduce_bucket_size) whose flush holds the most "
                  "with its slice's fp64 norm copy (zero12_offload_reduce_terms): its clone, reduced alone in "
                  "its own storage until copy_grads_in_partition drops it; at ZeRO-1 (one param group) also the "
                  "clones of earlier ones the rank owns no part of, never dropped in the reduce (l.2272-2274)",
                  f"{S}.reduce_independent_p_g_buckets_and_remove_grads (grad_reduc.detach().clone(), "
                  "_offload_gradient_safety_enabled) / reduce_ipg_grads (extra_large_param_to_reduce)")
        if clone_in_hook:
            b.add("accelerator", "gradients", "offload_xl_grad_cloning", clone_in_hook, "autograd",
                  "2 x max_p n_p x D over gradients of more than reduce_bucket_size elements: the clone made "
                  "while the autograd gradient it replaces is alive (clone, then grad_reduc.data = clone)",
                  f"{S}.reduce_independent_p_g_buckets_and_remove_grads (_offload_gradient_safety_enabled)")
        if offload_kept is not None:
            Gb = DTYPE_BYTES[ec.grad_dtype]  # the grad_accum dtype's bytes (zero12_offload_fp32_accum)
            # zero12_offload_fp32_accum: the compact fp32 partition average_tensor writes the rank's slices into,
            # from the boundary reduce through the group's update; and the grad_accum storages of gradients the
            # rank does not own, left by the reduce to the step. Engine z1_bf16_noncontig_oo_cpu_gaccfp32_tbsga2_w2
            # step:2 / step:4 rank 0 +126,476 B (86,424 + the bucket's 40,000), rank 1 +203,540 B (also l1.weight's
            # fp32 clone, 77,056 B) without them
            if ec.grad_dtype == "fp32":  # a 16-bit accumulation dtype has none (l.1260-1262 ask for fp32)
                b.add("accelerator", "gradients", "offload_compact_grad_partition", p_t * 4, "reduce_step",
                      f"P x 4 = {p_t} x 4 (the compact fp32 gradient partition: average_tensor's destination for "
                      "the rank's slices under grad_accum_dtype fp32; zero12_offload_fp32_accum)",
                      f"{S}._build_compact_grad_partition_buffer (l.1268-1270, from _get_compact_grad_partition_slice "
                      "l.1312-1321); freed by step (averaged_gradients[i] = None, l.3098)")
            if ga == 1 and z.overlap_comm:
                # the hooks reduce as they go (the boundary is micro-step 1): one fp32 copy at a time. A hook's
                # moments are its copy's (A1o) or, for a gradient over the bucket, its clone's beside that copy
                # (offload_xl_grad_cloning, same lifetime): the entry is what A1o adds over the latter, so the
                # backward instant holds the larger, not both
                a1 = max(zero12_offload_fp32_accum_hooks(ec, inv)[2] - clone_in_hook, 0)
                if a1:
                    b.add("accelerator", "gradients", "offload_grad_accum_hooks", a1, "autograd",
                          f"A1o - h = {a1}, A1o = max_k (G n_k + D (n_k + s_k) + [n_(k-1) > RBS] G n_(k-1)), "
                          f"G = {Gb}: a "
                          "hook's fp32 grad_accum copy beside its 16-bit gradient, its autograd sibling's and the "
                          "previous hook's fp32 clone (overlap_comm: each copy moved into the ipg bucket in its hook; "
                          "zero12_offload_fp32_accum_hooks), over the clone's moment h (offload_xl_grad_cloning)",
                          f"{S}._fill_param_grad_accum_attribute (param.grad.to(fp32), l.1237) -> "
                          "reduce_independent_p_g_buckets_and_remove_grads (l.1446, l.1461)")
            elif ga == 1:
                # every backward is a first micro-step: the hooks' fp32 copies beside a 16-bit gradient (at GA > 1
                # micro-step 1's are lp_grads_first_microstep, the later ones accumulate_grad_new)
                a1 = zero12_offload_fp32_accum_hooks(ec, inv)[0]
                b.add("accelerator", "gradients", "offload_grad_accum_hooks", a1, "autograd",
                      f"A1 = max_k (G c_k + D (n_k + s_k)) = {a1}, G = {Gb}: the grad_accum copies made so far "
                      "beside a "
                      "hook's 16-bit gradient and its autograd sibling's (zero12_offload_fp32_accum_hooks)",
                      f"{S}._fill_param_grad_accum_attribute (param.grad.to(fp32), l.1237)")
            if offload_kept:
                b.add("accelerator", "gradients", "offload_kept_grad_accum", offload_kept, "step",
                      f"the {ec.grad_dtype} clones of gradients over reduce_bucket_size meeting no part of the "
                      f"rank's slice (n_p x {Gb}) + the {ec.grad_dtype} ipg bucket (RBS x {Gb}) while a gradient "
                      "moved into it does not meet the "
                      "slice: their grad_accum is never cleared by the reduce (zero12_offload_fp32_accum_kept)",
                      f"{S}.reduce_ipg_grads (stage 1: copy_grads_in_partition only for "
                      "is_param_in_current_partition, l.2272-2274) / _clear_param_grad_only (keeps grad_accum, "
                      "l.2630-2640); freed by zero_grad (l.2613-2624)")
        if zero12_offload_compact(ec, wrapper, ng):
            # the compact fp32 partition: made inside the reduce (at GA > 1 micro-step 1's, whose moments
            # zero12_offload_microstep_terms counts it in), accumulated on the accelerator to the step. Engine probes
            # (TINY W 2, RBS 10,000): GA 1 +86,476-86,504 B from backward on without it; GA 2 rank 1 +39,2xx B (it, less
            # the host buffers below, which this regime does not make)
            b.add("accelerator", "gradients", "offload_compact_grad_partition", p_t * 4,
                  "reduce_step" if ga == 1 else "compact_accumulated",
                  f"P x 4 = {p_t} x 4 (the compact fp32 gradient partition the reduce adds the rank's slices into, "
                  "across micro-steps; zero12_offload_compact)",
                  f"{S}._build_compact_grad_partition_buffer (l.1268-1270, from _get_compact_grad_partition_slice "
                  "l.1312-1321); freed by step (averaged_gradients[i] = None, l.3098)")
        elif ga > 1 and z.stage == 2:
            # ZeRO-2 only: copy_grads_in_partition accumulates through the host buffer when
            # micro_step_id > 0 or before the boundary (l.2166). ZeRO-1 reduces only at the boundary
            # (l.2294), and micro_step_id, bumped by setup_buckets only while not ready_for_gradients
            # (l.3257-3258), is still 0 there: the buffer is never made (measured, z1_bf16_oo_cpu_tbsga2_w2:
            # counted, every phase from initialize on read I_r x D = 85,484 B over the engine on rank 0)
            b.add(_host(pin), "gradients", "offload_accumulated_grads_cpu", inter_t * D,
                  "from_first_reduce" if offload_microstep else "persistent",
                  f"I_r x D = {inter_t} x {D} (full numel of every param touching the partition)",
                  f"{S}.async_accumulate_grad_in_cpu_via_gpu")
    else:
        # stage-2 16-bit model with fp32 accumulation: averaged_gradients is one compact fp32
        # buffer per group and the step's flat fp32 grad is a view of it (_get_preflattened_grad_partition)
        # (ZeRO-1 on fp16 with fp32 accumulation without offload too: zero1_compact_grad_accum)
        compact = ((z.stage == 2 and ec.grad_dtype == "fp32" and ec.model_dtype != "fp32")
                   or zero1_compact_grad_accum(ec, wrapper, ng))
        b.add("accelerator", "gradients", "fp32_grad", p_max * 4, "step",
              f"P x 4 = {p_max} x 4 (one param group at a time; for an fp32 model whose slice lies in one "
              "tensor it is a view of the kept grads: (I_r + P - Cov_r) x 4, the averaged_gradients storage, "
              "not an extra allocation)", f"{S}.step",
              alias_of="averaged_gradients" if ((D == 4 and single) or compact) else "")
        if D != 4 and flat_max and not compact:
            b.add("accelerator", "gradients", "flat_grad_partition", flat_max * D, "step_prep",
                  f"P x D = {flat_max} x {D} (flatten(averaged_gradients) of one group, cast to fp32 and "
                  "deleted before the update; none when the slice is one tensor's view)", f"{S}.step")
        if compact:
            b.add("accelerator", "gradients", "averaged_gradients", p_t * 4, "backward",
                  f"P x 4 = {p_t} x 4 (compact fp32 partition)", f"{S}._build_compact_grad_partition_buffer")
        else:
            kept = inter_t + (p_t - cov_t)
            b.add("accelerator", "gradients", "averaged_gradients", kept * D, "backward",
                  f"(I_r + P - Cov_r) x D = ({inter_t} + {p_t} - {cov_t}) x {D} (grads_in_partition + pads)",
                  f"{S}.copy_grads_in_partition / get_flat_partition")
            if z.stage == 2 and ga > 1 and wrapper == "DeepSpeedZeroOptimizer" and inter_t:
                # the epilogue drops its handle on grads_in_partition (_release_ipg_buffers l.930,
                # called l.1061) but all_grad_tensors[i] (l.1038-1040) keeps the params' gradient
                # views, so the storage lives into the next micro-step, whose first
                # copy_grads_in_partition allocates a new one (l.2184-2194); freed at the boundary
                # (all_grad_tensors[i] = None, l.1059). Engine: z2_bf16_tbsga2_w2 forward:2 +85,540 B
                # = 42,742 x 2 on rank 0 without this entry. Without contiguous_gradients there is no
                # grads_in_partition: all_grad_tensors holds the gradients meeting the slice themselves,
                # whole (kept by reduce_ipg_grads, l.2262-2270), the same I_r x D, after
                # _clear_param_grad_only (l.1063) drops param.grad, so the next micro-step's autograd
                # makes new ones beside them; at the boundary get_flat_partition views the old ones, into
                # which the epilogue added the new (l.1041-1045). Engine, TINY at GA 2 (one group; the note
                # of z2_bf16_noncontig_groups_tbsga2_w2): forward:2 +85,540 B on rank 0 and backward:2
                # +172,868 B (this and the transients) without it
                b.add("accelerator", "gradients", "prev_grads_in_partition", inter_t * D, "accumulated",
                      f"I_r x D = {inter_t} x {D} (the previous micro-step's "
                      + ("grads_in_partition" if ec.contiguous_gradients_effective else "gradients meeting the slice, whole")
                      + ", held by all_grad_tensors until the accumulation boundary)",
                      f"{S}.independent_gradient_partition_epilogue (all_grad_tensors) / "
                      + ("copy_grads_in_partition" if ec.contiguous_gradients_effective else "reduce_ipg_grads"))
    # ZeRO-1 with overlap_comm at GA > 1 with its transients: the boundary's hooks move gradients micro-step 1
    # left whole (zero12_boundary_holds_all); its A_r is the boundary's accumulation over lp_grads
    held_overlap = z.stage == 1 and z.overlap_comm and ga > 1 and len(terms) > 5
    if z.stage == 1 and not off and not (z.overlap_comm and len(terms) > 5 and not held_overlap):
        # (ZeRO-1 with overlap_comm at GA 1 moves each gradient in its hook at the boundary, _zero12_replay_stage:
        # its backward_transient counts them, not N x D at once.)
        # ZeRO-1 reduces at the accumulation boundary (reduce_gradients), so every 16-bit
        # param.grad is alive until then (reference section 4.5 / 10.12, measured snapshot
        # "pre_reduce"). Not in the parity snapshots (bwd is taken after the reduce).
        if zero1_compact_grad_accum(ec, wrapper, ng):
            # each hook turns param.grad into an fp32 grad_accum (l.1237) and drops it (l.1240): the backward holds
            # the copies made so far beside a hook's 16-bit gradient, not N x D (micro-step 1's; a later one's are
            # accumulate_grad_new). Engine z1_fp16_gaccfp32_tbsga2_w2 backward:1: 4 N + 19,264 x 2 at l1.weight's hook
            a1 = zero12_offload_fp32_accum_hooks(ec, inv)[0]
            b.add("accelerator", "gradients", "grad_accum_hooks", a1,
                  "autograd" if ga == 1 else "first_microstep_backward",
                  f"A1 = max_k (4 c_k + D (n_k + s_k)) = {a1}: the fp32 grad_accum copies made so far beside a hook's "
                  "16-bit gradient and its autograd sibling's (zero12_offload_fp32_accum_hooks; zero1_compact_grad_accum)",
                  f"{S}._fill_param_grad_accum_attribute (param.grad.to(fp32), l.1237; param.grad = None, l.1240)")
        else:
            b.add("accelerator", "gradients", "lp_grads", n_t * D, "in_backward",
                  f"N x D = {n_t} x {D} (every param.grad until the boundary reduce)",
                  f"{S}.reduce_gradients (stage 1: no reduction in the backward hooks); made by autograd in "
                  f"{_AUTOGRAD_GRADS}")
    if zero1_compact_grad_accum(ec, wrapper, ng) and offload_kept:
        # (also with overlap_comm at GA 1, whose hooks the backward_transient counts, not the entries above)
        # the grad_accum the boundary reduce leaves on the rank (not its own: l.2272-2274), to the step's norm;
        # step frees them before the group's update (free_grad_in_param_list, l.2898-2901). Engine
        # z1_fp16_gaccfp32_tbsga2_w2 step:2 rank 0 the fp32 ipg bucket 40,000 B (l.3266) and rank 1 also l1.weight's
        # 19,264 x 4 B (l.1237) at get_grad_norm_direct's peak
        b.add("accelerator", "gradients", "kept_grad_accum", offload_kept, "step_norm",
              f"the fp32 grad_accum of gradients over reduce_bucket_size meeting no part of the rank's slice "
              f"(n_p x 4) + the fp32 ipg bucket (RBS x 4) while a gradient moved into it does not meet the slice "
              "(zero12_offload_fp32_accum_kept; zero1_compact_grad_accum)",
              f"{S}.reduce_ipg_grads (stage 1: copy_grads_in_partition only for is_param_in_current_partition, "
              "l.2272-2274); freed by step's free_grad_in_param_list (l.2898-2901) before the update")
    if zero1_compact_grad_accum(ec, wrapper, ng) and kept_later:
        # several param groups: step's loop frees group i's unowned grad_accum at group i's turn (l.3075, l.3103),
        # so those of the later groups (and the ipg bucket while a later group's gradient in it misses the slice)
        # live through group 0's update, which makes that group's fp32 gradient and, at the first step, its Adam
        # moments. Engine (TINY as decay / no-decay groups, W 2, GA 2, 2026-12-06): rank 0's first step peaks there
        # with the fp32 ipg bucket (l.3266, 40,000 B) that l2.bias / l3.bias keep (group 1, not rank 0's slice)
        b.add("accelerator", "gradients", "kept_grad_accum_later_groups", kept_later, "step",
              "the kept_grad_accum of param groups after the first (zero12_offload_fp32_accum_kept over them): "
              "freed at their own group's turn of the update loop (zero1_compact_grad_accum)",
              f"{S}.step (free_grad_in_param_list(params_not_in_partition[i]) per group, l.3075, l.3103)")
    ipg = ipg_bucket_bytes(ec)
    if ipg is not None:
        b.add("accelerator", "workspace", "ipg_bucket", ipg[0], ipg[2], ipg[1], f"{S}.setup_buckets")
    if z.stage == 1 and ga > 1 and (off or len(terms) > 5):
        # ZeRO-1 with gradient accumulation (tests/engine/test_peak_parity.py z1_bf16_tbsga2_w2 /
        # z1_fp16_tbsga2_w2, rank 0: forward:2 +186,474 B, backward:2 +46,396 B over the GA-1 terms
        # without these; under CPU offload the same, z1_bf16_oo_cpu_tbsga2_w2 forward:2 +100,986 B
        # without them): a micro-step before the boundary reduces nothing (engine.py
        # allreduce_gradients l.3088-3092: stage 1 reduces only at the boundary; the backward hook's
        # process_gradients l.2285-2291 only sets up the bucket), so its param.grad and the ipg
        # bucket it allocated stay into the next micro-step's forward
        gacc = offload_kept is not None  # zero12_offload_fp32_accum: param.grad_accum in fp32, not param.grad
        GD = DTYPE_BYTES[ec.grad_dtype] if gacc else D
        b.add("accelerator", "gradients", "lp_grads_accumulated", n_t * GD, "accumulated_forward",
              (f"N x 4 = {n_t} x 4 (every param.grad_accum, fp32, of the earlier micro-steps: stage_1_and_2.py "
               "_fill_param_grad_accum_attribute l.1237; reduced at the boundary)" if gacc else
               f"N x D = {n_t} x {D} (every param.grad of the earlier micro-steps, reduced at the boundary)"),
              "runtime/engine.py:DeepSpeedEngine.allreduce_gradients (l.3088-3092, stage 1: reduce_gradients "
              "only at the accumulation boundary)")
        ipg_acc = ipg_bucket_bytes(ec)
        if ipg_acc is not None:
            b.add("accelerator", "workspace", "ipg_bucket_accumulated", ipg_acc[0], "accumulated_forward",
                  f"{ipg_acc[1]} (allocated by micro-step 1's hooks, ready_for_gradients stays True; released "
                  "by the boundary's epilogue)",
                  f"{S}.setup_buckets (l.3256-3269) / _release_ipg_buffers (l.924-927, from "
                  "independent_gradient_partition_epilogue l.1061)")
        if off:
            # without offload lp_grads (in_backward) counts them; under offload the boundary's flush term
            # does (zero12_offload_flush_bytes), and micro-step 1's backward, which reduces nothing, had none
            # (tests/engine/test_peak_parity.py z1_bf16_oo_cpu_tbsga2_w2: backward:1 +86,452 B on both ranks)
            a1 = zero12_offload_fp32_accum_hooks(ec, inv)[0] if gacc else n_t * D
            b.add("accelerator", "gradients", "lp_grads_first_microstep", a1, "first_microstep_backward",
                  (f"A1 = max_k (G c_k + D (n_k + s_k)) = {a1}, G = {DTYPE_BYTES[ec.grad_dtype]}: micro-step 1's "
                   "grad_accum copies so far beside a "
                   "hook's 16-bit gradient and its autograd sibling's (zero12_offload_fp32_accum_hooks)" if gacc else
                   f"N x D = {n_t} x {D} (every param.grad of micro-step 1: no reduce before the boundary)"),
                  "runtime/engine.py:DeepSpeedEngine.allreduce_gradients (l.3088-3092, stage 1: reduce_gradients "
                  f"only at the accumulation boundary); made by autograd in {_AUTOGRAD_GRADS}")
        # (zero1_compact_grad_accum: its hooks' moments are the accumulate_grad_new entry below, in fp32 grad_accum)
        if held_overlap and zero1_compact_grad_accum(ec, wrapper, ng):
            pass
        elif held_overlap and not ec.contiguous_gradients_effective:
            # without contiguous_gradients no hook moves a gradient out of param.grad (l.2272): the moment is a
            # node's new gradients beside all N x D, as without overlap_comm (zero12_backward_transients)
            b.add("accelerator", "gradients", "accumulate_grad_new", terms[5], "accumulated_backward",
                  f"max_k (n_k + s_k) x D = {terms[5] // D} x {D}: a micro-step's new gradient (and the one its "
                  "autograd node made with it, state.autograd_siblings) whole while torch adds it into the "
                  "param.grad kept from the earlier micro-steps; the boundary's hooks move none of them "
                  "(contiguous_gradients off; zero12_backward_transients)",
                  "torch/csrc/autograd/functions/accumulate_grad.h accumulateGrad (variable_grad += new_grad); "
                  f"{S}.reduce_ipg_grads (l.2272: no copy into a partition without contiguous_gradients)")
        elif held_overlap:
            # the hooks move each accumulated gradient right after torch adds its new one: the moment
            # is the new gradient beside those not yet moved, not beside all N (zero12_backward_transients)
            b.add("accelerator", "gradients", "accumulate_grad_new", terms[5], "accumulated_backward",
                  "max over hook positions k of (n_k + s_k - moved_k) x D + a pending extra-large gradient, the kept "
                  "ones and I_r x D once grads_in_partition exists: a micro-step's new gradient (and its autograd "
                  "sibling's) whole while torch adds it into param.grad, the earlier gradients in hook order already "
                  "moved into the ipg bucket (overlap_comm; zero12_backward_transients)",
                  "torch/csrc/autograd/functions/accumulate_grad.h accumulateGrad (variable_grad += new_grad); "
                  f"{S}.process_gradients (l.2284-2291, overlap_comm) -> reduce_independent_p_g_buckets_and_remove_grads")
    if offload_kept is not None and ga > 1:
        a2 = zero12_offload_fp32_accum_hooks(ec, inv)[1]
        b.add("accelerator", "gradients", "accumulate_grad_new", a2, "accumulated_backward",
              f"A2 = G N + max_k ((G + D) n_k + D s_k) = {a2}, G = {DTYPE_BYTES[ec.grad_dtype]}: every grad_accum "
              "kept, a later micro-step's "
              "new 16-bit gradient, its fp32 copy being added and its autograd sibling (zero12_offload_fp32_accum_hooks)",
              f"{S}._fill_param_grad_accum_attribute (param.grad_accum.add_(param.grad.to(fp32)), l.1239)")
    elif z.stage == 1 and ga > 1 and (off or len(terms) > 5) and not held_overlap:
        _add_accumulate_grad_new(b, inv, D, "runtime/engine.py:DeepSpeedEngine.allreduce_gradients (l.3088-3092)")
    if len(terms) > 5:  # zero12_transients_modeled: the backward and step-norm transients
        auto, red, norm = terms[5:8]
        if auto and not held_overlap:
            b.add("accelerator", "gradients", "backward_transient", auto, "autograd",
                  "max_p (n_p + s_p) x D (+ I_r x D once grads_in_partition exists): the gradient a backward hook "
                  "is moving into the ipg bucket and s_p, the one its autograd node made with it, not yet "
                  "accumulated (an nn.Linear's weight as its bias's hook runs; state.autograd_siblings)",
                  f"{S}.reduce_independent_p_g_buckets_and_remove_grads; made by autograd in "
                  f"{_AUTOGRAD_GRADS}")
        if len(terms) > 8:
            b.add("accelerator", "workspace", "reduce_transient", red, "reduce",
                  "max over bucket flushes of the flat copy (run of > 1 slices x D) + gradients not yet in the "
                  "bucket + the fp32 cast of the rank's largest gradient slice (g x 4, at every flush from the "
                  "rank's first on) + the compact fp32 buffer P x 4 from that flush on (made inside it), or P x 4 "
                  "at the end of the epilogue (zero12_backward_transients, zero12_compact_grad_buffer)",
                  f"{S}.allreduce_bucket (self.flatten(bucket), l.2367) / _add_to_grad_partition_buffer "
                  "(output.add_(source.to(output.dtype)), l.1324-1326) / _build_compact_grad_partition_buffer "
                  f"(l.1268-1274); the gradients not yet in the bucket made by autograd in {_AUTOGRAD_GRADS}")
        elif ec.contiguous_gradients_effective:
            b.add("accelerator", "workspace", "reduce_transient", red, "reduce",
                  "max over bucket flushes of the flat copy (run of > 1 slices x D) + gradients not yet in the "
                  "bucket + grads_in_partition (I_r x D) once allocated, or averaged_gradients "
                  "(I_r + P - Cov_r) x D at the end of the epilogue (zero12_backward_transients)",
                  f"{S}.allreduce_bucket (self.flatten(bucket)) / copy_grads_in_partition / "
                  f"independent_gradient_partition_epilogue; the gradients not yet in the bucket made by autograd "
                  f"in {_AUTOGRAD_GRADS}")
        else:
            b.add("accelerator", "workspace", "reduce_transient", red, "reduce",
                  "max over bucket flushes of the bucket's whole gradients + their flat copy (> 1 gradient) + the "
                  "triggering gradient + the earlier flushes' gradients meeting the rank's slice, kept whole; or "
                  "averaged_gradients (I_r + P - Cov_r) x D at the end of the epilogue "
                  "(_zero12_noncontig_transients: contiguous_gradients off)",
                  f"{S}.buffered_reduce_fallback -> allreduce_bucket (self.flatten(bucket)) / reduce_ipg_grads "
                  f"(clear_grad_attribute of gradients outside the slice); the gradients made by autograd in "
                  f"{_AUTOGRAD_GRADS}")
        b.add("accelerator", "workspace", "grad_norm_fp64", norm, "step_norm",
              "largest gradient slice of the rank x 8 (fp64 copy, one slice at a time)",
              f"{S}.get_grad_norm_direct (g.data.to(get_norm_dtype()))")
        if len(terms) > 8:  # zero12_compact_grad_buffer: bf16 with grad_accum_dtype fp32 at ZeRO-2
            auto_n, red_n = terms[8:10]
            if ga > 1 and z.stage == 2:  # ZeRO-1 (zero1_compact_grad_accum) makes the partition at the boundary
                pbuf = p_t * 4
                b.add("accelerator", "gradients", "compact_grad_partition_kept", pbuf, "accumulated_forward",
                      f"P x 4 = {p_t} x 4 (the compact fp32 partition buffer micro-step 1's reduce made, kept into "
                      "the next micro-steps until the step frees it)",
                      f"{S}._get_compact_grad_partition_buffer (averaged_gradients[i] kept, l.1303-1310) / step "
                      "(averaged_gradients[i] = None, l.3131)")
                if auto_n:
                    b.add("accelerator", "gradients", "compact_grad_partition_kept_backward", auto_n,
                          "accumulated_backward",
                          "P x 4 less what backward_transient counts of it: a later micro-step's hooks run with the "
                          "buffer made in micro-step 1", f"{S}._get_compact_grad_partition_buffer (l.1303-1310)")
                if red_n:
                    b.add("accelerator", "gradients", "compact_grad_partition_kept_reduce", red_n,
                          "accumulated_reduce",
                          "the worst flush of a later micro-step (the buffer live from its start) less "
                          "reduce_transient's", f"{S}._get_compact_grad_partition_buffer (l.1303-1310)")


def _stage3(b: _Builder, ec: EffectiveConfig, inv: Inventory, W: int, basic: str, pl: Placement,
            grad_terms: tuple[int, int] = (0, 0), ga: int = 1) -> dict:
    """ZeRO-3 entries of one rank; ``pl`` the group's :class:`Placement` (sub-groups, which are
    swapped, which sit in the max_in_cpu buffer); ``grad_terms`` = that rank's (NVMe gradient file
    bytes, kept gradient tail bytes) from :func:`zero3_grad_swap_by_rank` (the only rank-dependent
    figures); ``ga`` = gradient accumulation steps (> 1: :func:`zero3_refetch_prefetch_bytes`)."""
    z = ec.zero
    D = DTYPE_BYTES[ec.model_dtype]
    G = DTYPE_BYTES[ec.grad_dtype]
    M = 4
    S = "runtime/zero/stage3.py:DeepSpeedZeroOptimizer_Stage3"
    oo = ec.offload_optimizer_effective
    op = ec.offload_param_effective
    oo_pin = z.offload_optimizer.pin_memory
    # per-param partitions p_i (§3.2, partition_parameters.py:_partition_param) and the
    # sub-groups of the trainable ones (stage3.py:_create_fp16_sub_groups)
    sgs = pl.sub_groups

    def tables() -> tuple:
        # per sub-group {n_i: how many} and {p_i: how many}, the sub-groups of each group, P3, S_k,
        # {p_i: how many} and P3_g per group: once per (tensor list, W, sub-groups), not once per rank
        # role and plan, and as counts of distinct sizes, not a pair per tensor (issue 21)
        sub_n: list[collections.Counter] = []
        sub_p: list[dict[int, int]] = []
        for sg in sgs:
            cn = collections.Counter(inv.tensors[i].numel for i in sg.tensors)
            cp: dict[int, int] = {}
            for n, c in cn.items():
                p = _ceil_div(n, W)
                cp[p] = cp.get(p, 0) + c
            sub_n.append(cn)
            sub_p.append(cp)
        gids = sorted({sg.group for sg in sgs})
        sub_group_of_group = [[k for k, sg in enumerate(sgs) if sg.group == g] for g in gids]
        Sk = [sum(p * c for p, c in cp.items()) for cp in sub_p]
        counts: list[collections.Counter] = []  # {p_i: how many} per group
        for idx in sub_group_of_group:
            cg: collections.Counter = collections.Counter()
            for k in idx:
                cg.update(sub_p[k])
            counts.append(cg)
        PG = [sum(Sk[k] for k in idx) for idx in sub_group_of_group]  # P3_g per group
        return sub_n, sub_p, sub_group_of_group, sum(PG), Sk, counts, PG
    # keyed by the sub-groups' shape (group, first index, count, S_k each): a handful of sub-groups
    sig = tuple((sg.group, sg.tensors[0] if sg.tensors else -1, len(sg.tensors), sg.numel) for sg in sgs)
    sub_n, sub_p, sub_group_of_group, P3, Sk, part_counts, PG = inv.memo(("zero3_stage3_tables", W, sig), tables)

    # ---- 16-bit parameter partitions
    flat_of_sub: list[bool] = [True] * len(sgs)
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
        pmin = swap_threshold_bytes(ec)
        kp = aio_alignment_elems(ec, D)
        nvme_bytes = 0
        resident_small = 0
        unused_flat = 0
        for gi in range(len(sub_group_of_group)):
            pg = PG[gi]
            size = pg
            if nvme and agg + pg > z.offload_param.max_in_cpu:
                size = max(0, z.offload_param.max_in_cpu - agg)
            agg += pg
            used = False
            for si in sub_group_of_group[gi]:
                if pl.in_flat[si]:
                    used = True
                else:
                    flat_of_sub[si] = False
                    for p, c in sub_p[si].items():
                        if p * D < pmin:
                            resident_small += p * D * c
            used_any.append(used)
            if nvme:  # every swappable partition is written to NVMe at init, even if kept in RAM
                nvme_bytes += zero3_param_swap_bytes_counted(ec, part_counts[gi])
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
                  "sum over partitions with p_i x D >= max(1 MiB, aio.block_size) of "
                  + ("A_{1024/D}" if kp == AIO_ALIGNED_BYTES // D else f"A_{kp}") + "(p_i) x D "
                  "({ds_id}_param.tensor.swp; written at init even when max_in_cpu keeps them in RAM)",
                  "runtime/swap_tensor/partitioned_param_swapper.py:AsyncPartitionedParameterSwapper.swap_out")
        if nvme:
            ob = z.offload_param
            al = aio_alignment_elems(ec, D)
            b.add("host_pinned", "workspace", "param_swap_buffers", ob.buffer_count * _align(ob.buffer_size, al) * D,
                  "persistent", f"buffer_count x A_{al}(buffer_size) x D = {ob.buffer_count} x "
                  f"{_align(ob.buffer_size, al)} x {D} (aio-locked)",
                  "runtime/swap_tensor/partitioned_param_swapper.py:AsyncPartitionedParameterSwapper._configure_aio")
            if not all(flat_of_sub):
                big = max(range(len(sgs)), key=lambda i: (Sk[i], -i))
                full = sum(_align(n, al) * c for n, c in sub_n[big].items())
                b.add("host_pinned", "workspace", "param_partitioned_swap_buffer", full * D, "persistent",
                      f"sum over the largest sub-group of A_{al}(n_i) x D = {full} x {D} (FULL numel n_i, not p_i)",
                      "runtime/swap_tensor/partitioned_param_swapper.py:reserve_partitioned_swap_space")

    # ---- persistent (always gathered) parameters
    def persistent_sums() -> tuple[int, int]:
        # sums of ceil(n_i/W) x W over the persistent trainable / frozen parameters, by C-level passes
        keep = zero3_persistent(inv, z)
        padded = padded_numels(inv, W)
        trainable = list(map(operator.attrgetter("trainable"), inv.tensors))
        persist = sum(itertools.compress(padded, map(operator.and_, keep, trainable)))
        persist_frozen = sum(itertools.compress(padded, map(operator.and_, keep, map(operator.not_, trainable))))
        return persist, persist_frozen
    persist, persist_frozen = inv.memo(("zero3_persistent_sums", W, z.param_persistence_threshold,
                                        z.model_persistence_threshold), persistent_sums)
    aliased = W == 1  # the gathered tensor is the partition itself (any offload_param)
    b.add("accelerator", "parameters", "lp_params_gathered", 0 if aliased else persist * D, "persistent",
          "0 (W = 1: the gathered tensor is the partition)" if aliased else
          f"sum over params with n_i <= stage3_param_persistence_threshold of ceil(n_i/W) x W x D = {persist} x {D}",
          "runtime/zero/parameter_offload.py:mark_persistent_parameters; stage3.py:_post_step")
    replay = (zero3_fetch_replay(inv, z, W, D) if inv.tensors and zero3_fetch_replay_applies(z, W, op)
              else None)
    if replay is not None:
        _zero3_fetch_entries(b, ec, inv, W, D, replay, ga)
    else:
        # the fetch is not replayed (W = 1, quantized weights, NVMe parameters): the reference's rule.
        # NVMe parameters only stop the coordinator's prefetch (a partition still on NVMe ends the queue,
        # partitioned_param_coordinator.py _is_currently_on_nvme); the first iteration has no prefetch
        # (incomplete trace), so its figures are the replay's (measured, z3_bf16_op_nvme_w2: the reference's
        # rule beside the first fetch put forward:1 2,109,401 B and backward:1 2,111,449 B over the engine;
        # forward:1 holds l2's flat all-gather buffer, l. 1343, beside its torch.cat copies), later
        # iterations the reference's rule
        first_only = (zero3_fetch_replay(inv, z, W, D) if inv.tensors and op == "nvme"
                      and zero3_fetch_replay_applies(z, W) else None)
        if first_only is not None:
            _zero3_first_iteration_entries(b, ec, inv, W, first_only)
            if ga > 1:
                nb, nwords = zero3_nvme_refetch_bytes(inv, z, W, D)
                if nb:
                    b.add("accelerator", "workspace", "zero3_nvme_refetch", nb, "refetch_forward",
                          f"{nwords}; GA > 1, parameters on NVMe: micro-step 2's forward gathers again the persistent "
                          "parameters the first backward released (no optimizer step in between), no prefetch",
                          "runtime/zero/partitioned_param_coordinator.py:release_sub_module (incomplete trace) / "
                          "fetch_sub_module (_is_currently_on_nvme stops the prefetch); "
                          "partition_parameters.py:_all_gather_dtype (flat_tensor, l. 1343) / "
                          "AllGatherCoalescedHandle.wait (torch.cat, l. 795)")
        fetch = (zero3_first_fetch_bytes(inv, z, W, D) if not aliased and persist and first_only is None
                 else None)
        if fetch is not None:
            b.add("accelerator", "workspace", "zero3_first_fetch", fetch[0], "first_forward",
                  f"max over modules m (first forward) of [sum over m's persistent params n_i x D (torch.cat copies) + "
                  f"sum over m's params ceil(n_i/W) x W x D (flat all-gather buffer, modules with >= 2 params)] = "
                  f"{fetch[0]} ({fetch[1]}); stands for lp_params_gathered at forward:1",
                  "runtime/zero/partition_parameters.py:_all_gather_dtype (flat_tensor, l. 1343) / "
                  "AllGatherCoalescedHandle.wait (torch.cat, l. 795); partitioned_param_coordinator.py:release_sub_module "
                  "(incomplete trace: every param of the module released, persistent ones too)")
        if fetch is not None:
            first = module_of(inv.tensors[0].name) if inv.tensors else ""
            fb = D * inv.memo(("zero3_first_module_persistent", z.param_persistence_threshold,
                               z.model_persistence_threshold),
                              lambda: sum(t.numel for t, keep, m in zip(inv.tensors, zero3_persistent(inv, z),
                                                                         module_names(inv))
                                          if keep and m == first))
            b.add("accelerator", "parameters", "zero3_first_backward_gathered", fb, "first_backward",
                  f"sum over the persistent params of module {first} (the first in forward, the last in backward) "
                  f"of n_i x D = {fb}; stands for lp_params_gathered in the first iteration's backward",
                  "runtime/zero/partitioned_param_coordinator.py:release_sub_module (incomplete trace: every param of "
                  "a module released after its backward); AllGatherCoalescedHandle.wait (torch.cat copies, n_i x D)")
        if fetch is not None and ga > 1:
            # tests/engine/test_peak_parity.py z3_bf16_tbsga2_w2: forward:2 +47,323 B without it
            # (l2's and l3's prefetch buffer, (11,589 + 39 + 193 + 3) x 2 x 2 = 47,296 B)
            rb, rwords = zero3_refetch_prefetch_bytes(inv, z, W, D)
            if rb:
                b.add("accelerator", "workspace", "zero3_refetch_prefetch", rb, "refetch_forward",
                      f"{rwords} = {rb}; GA > 1: micro-step 2's forward gathers again what the first backward "
                      "released (no optimizer step, no _post_step, in between)",
                      "runtime/zero/partitioned_param_coordinator.py:fetch_sub_module (prefetch, l. 450-484) / "
                      "release_sub_module; partition_parameters.py:_all_gather_dtype (flat_tensor, l. 1343) / "
                      "AllGatherCoalescedHandle.wait (torch.cat, l. 795)")
        g_numel, g_words = zero3_gathered_params_numel(inv, z, W)
        g_alias = W == 1 and op == "none"
        b.add("accelerator", "workspace", "zero3_gathered_params", 0 if g_alias else g_numel * D,
              "forward_backward" if first_only is None else "steady_forward_backward",
              "0 (W = 1, parameters on the accelerator: the gathered tensor is the partition itself)" if g_alias else
              f"{g_words}; x D = {g_numel} x {D} (non-persistent parameters gathered during forward/backward; "
              "reference section 4.5 advisor rule)",
              "runtime/zero/partition_parameters.py:all_gather_coalesced (NoGatherHandle at W = 1); "
              "runtime/zero/partitioned_param_coordinator.py:PartitionedParameterCoordinator.fetch_sub_module / "
              "__params_to_release")
    hpz = z.zero_hpz_partition_size or 1
    if hpz > 1 and W > 1:
        # ZeRO++ hpZ: a secondary 16-bit partition of every parameter over the hpZ group (within the node),
        # in two entries by when it is live (timeline.hpz_secondary_live): the persistent parameters' (remade only by the
        # step's _partition_all_parameters) and the others' (remade at each release after use)
        h = min(hpz, W)
        # persistent (True), the other trainable ones (False), frozen ("frozen") -> [16-bit, int8, scale bytes]
        sums: dict = {True: [0, 0, 0], False: [0, 0, 0], "frozen": [0, 0, 0]}
        for keep, tr, n16, n8, sc in hpz_secondary_parts(inv, z, W, D):
            acc = sums[keep if tr else "frozen"]
            acc[0] += n16
            acc[1] += n8
            acc[2] += sc
        sec_tier = "accelerator" if op == "none" else _host(z.offload_param.pin_memory)
        # a later forward releases a non-persistent parameter only where the reuse window
        # (stage3_max_reuse_distance, elements of the trace ahead: partitioned_param_coordinator.py
        # __params_to_release l.653-662) can end before its backward use, at most 2 N elements ahead
        # where the replay's later backward holds them (zero3_backward_fetch), the entry is not live there
        fwd_release = hpz_forward_releases(inv, z) or not zero3_fetch_replay_applies(z, W, op)
        for keep, item, life, words in (
                (False, "lp_param_secondary", "hpz_secondary" if fwd_release else "hpz_secondary_backward",
                 "params above stage3_param_persistence_threshold: made at Init(module=...) / zero.Init, freed by "
                 "every step's _post_step (stage3.py l.2846 invalidate_secondary_tensor), made again as each is "
                 "released after its " + ("forward" if fwd_release else
                                          "backward (2 N <= stage3_max_reuse_distance: no forward releases it; "
                                          "in the later backwards inside zero3_gathered_params_backward's moments)")
                 + " (partitioned_param_coordinator.py __release_param l.629 -> partition_parameters.py _partition "
                 "l.1768-1769)"),
                (True, "lp_param_secondary_persist", "hpz_secondary_persistent",
                 "persistent params: made at Init(module=...) / zero.Init, freed by the first step's _post_step "
                 "(stage3.py l.2846); never released in a later forward (__params_to_release skips ds_persist), so "
                 "made again only by each step's _partition_all_parameters (stage3.py l.2878) and "
                 "save_checkpoint's prologue (l.3845)"),
                ("frozen", "lp_param_secondary_frozen", "persistent",
                 "frozen params: never freed, since invalidate_secondary_tensor walks only the optimizer's "
                 "fp16_groups, its trainable parameters (stage3.py l.755-759, _get_trainable_parameter_groups "
                 "l.726-735; partitioned_param_coordinator.py l.594: 'not trainable so their secondary tensor "
                 "never expire')")):
            sec, qsec, qscales = sums[keep]
            if not (sec or qsec):
                continue
            b.add(sec_tier, "parameters", item, sec * D + qsec + qscales, life,
                  f"sum_i A_W(n_i) / h x D = {sec} x {D} (hpZ secondary partition, h = zero_hpz_partition_size "
                  f"{h}: the backward all-gather reads it within the node; {words})"
                  + (f" + frozen int8 {qsec} x 1 + fp32 scales {qscales} (zero_quantized_nontrainable_weights)"
                     if qsec else ""),
                  "runtime/zero/partition_parameters.py:Init._partition_param_sec (secondary_partition_size = "
                  "_aligned_size(param) // num_ranks_in_param_group, l.1912-1915)"
                  + ("; l. 1922-1924 quantizer_module.quantize" if qsec else ""))

    # ---- gradient partition buffer and ipg bucket
    g_tier = _host(oo_pin) if oo != "none" else "accelerator"
    b.add(g_tier, "gradients", "grad_partitions_flat_buffer", P3 * G, "persistent",
          f"P3 x G = {P3} x {G} (grad_accum_dtype, default the model dtype)", f"{S}.__init__ (grad_partitions_flat_buffer)")
    ipg = ipg_bucket_bytes(ec)
    if ipg is not None:
        b.add("accelerator", "workspace", "ipg_bucket", ipg[0], ipg[2], ipg[1], f"{S}.__init__ (ipg_buckets[dtype].buffer)")

    rs = zero3_reduce_flush_bytes(ec, inv, W)
    if rs is not None:
        # the words and sources of the flush paths this plan's gradients take (stage3.py l. 1674-1678)
        n_ar, n_rs = zero3_flush_paths(ec, inv)
        ar_words = ("in-bucket all-reduce (no reduce_scatter: the bucket's contiguous buffer reduced in place, "
                    "multiplied back into a copy unless gradient_predivide_factor is W, cast to grad_accum_dtype "
                    "where it differs)")
        rs_words = "flat buffer sum over the flush's params ceil(n_i/W) x W x C"
        flush_words = " or ".join(([rs_words] if n_rs else []) + ([ar_words] if n_ar else [])) or rs_words
        flush_src = "; ".join(
            (["runtime/comm/coalesced_collectives.py:reduce_scatter_coalesced (torch.cat of the interleaved, padded "
              "partitions)"] if n_rs or not n_ar else [])
            + ([f"{S}.__avg_scatter_contiguous_grads (all_reduce in place, l. 1880; buffer_to_reduce.mul, "
                "l. 1882-1883)"] if n_ar else []))
        b.add("accelerator", "workspace", "zero3_reduce_flush", rs[0], "in_backward",
              f"max over backward's gradient arrivals and bucket flushes of ({flush_words} + the bucket's "
              f"gradients held whole + the arriving gradient, whole"
              + (" + at a flush, the casts to communication_data_type of the gradients held whole and of the "
                 "rank's outputs to grad_accum_dtype (_zero3_flush_copies)"
                 if len(set(_zero3_flush_dtypes(ec))) > 1 else "")
              + (" + at a flush, under CPU/NVMe optimizer offload, the fp64 norm copy of the bucket's largest "
                 "gradient partition, max_i min(ceil(n_i/W), 250,000,000) x 8" if oo != "none" else "")
              + f") = {rs[0]} ({rs[1]})",
              f"{flush_src}; {S}.reduce_independent_p_g_buckets_and_remove_grads (flush before the "
              "arriving gradient joins) / __add_grad_to_ipg_bucket / __reduce_and_partition_ipg_grads"
              + (" -> partition_grads -> _offload_grad_partition_at_boundary -> _constant_buffered_norm2 "
                 "(part.to(get_norm_dtype()), one partition at a time while the flush's reduce-scatter output "
                 "views keep its flat buffer)" if oo != "none" else "")
              # the gradients held whole are autograd's, allocated in loss.backward: cited, so measure
              # lists them in_ledger (issue 15: unattributed on a real --params run)
              + f"; the gradients held whole made by autograd in {_AUTOGRAD_GRADS}", regions=rs[2])

    if rs is None and oo != "none" and W >= 1 and any(t.trainable for t in inv.tensors):
        # the flush is not replayed here (qgZ, another communication dtype): the norm copy, at any
        # backward instant (inside a flush when it is: zero3_reduce_flush_bytes counts it there)
        # the boundary's gradient norm, one parameter partition at a time, in fp64
        big = inv.memo(("zero3_offload_norm_partition", W),  # once per (tensor list, W): generate asks per plan
                       lambda: max(min(_ceil_div(t.numel, W), NORM_SPLIT_ELEMENTS) for t in inv.tensors if t.trainable))
        b.add("accelerator", "workspace", "zero3_offload_norm_fp64", big * 8, "in_backward",
              f"max_i min(ceil(n_i/W), 250,000,000) x 8 = {big} x 8 (one gradient partition cast to fp64 "
              "for its norm, freed before the next)",
              f"{S}._offload_grad_partition_at_boundary -> _constant_buffered_norm2 (part.to(get_norm_dtype()), "
              "zero/utils.py get_norm_dtype: fp64 where the accelerator has it)")

    # ---- master, moments, fp32 grads per sub-group
    smin = swap_threshold_bytes(ec)
    al = aio_alignment_elems(ec, M)
    swappable = pl.opt_swapped
    moments = _moment_items(ec)
    # partial optimizer offload (Twin-Flow): the first int((1 - ratio) x n) sub-groups stay on the accelerator
    on_acc = pl.opt_on_accelerator or [False] * len(sgs)
    acc_k = [s for s, sw, a in zip(Sk, swappable, on_acc) if a and not sw]
    acc = sum(acc_k)
    # partial offload to NVMe: the swapped sub-groups the backup AdamW steps (twin_flow_backup_swapped)
    bk_sw = pl.opt_backup_swapped or [False] * len(sgs)
    bsw = [s for s, bk in zip(Sk, bk_sw) if bk]
    ram = sum(s for s, sw in zip(Sk, swappable) if not sw) - acc
    files = pl.opt_swap_numel(ec)
    tier = "accelerator" if oo == "none" else "host_pageable"
    twin = (f" over the {sum(1 for sw in swappable if not sw) - len(acc_k)} host sub-groups (offload_optimizer.ratio "
            f"{z.offload_optimizer.ratio:g}: sub-groups i >= int((1 - ratio) x {len(sgs)}) = {len(acc_k)})"
            if acc_k else "")
    b.add(tier, "master_weights", "fp32_master", ram * M, "persistent",
          f"sum_k S_k x 4 = {ram} x 4" + twin
          + (" (separate copy even for fp32 models)" if ec.model_dtype == "fp32" else ""),
          f"{S}._create_fp32_partitions")
    for m in moments:
        b.add(tier, "optimizer_states", m, ram * 4, "persistent", f"sum_k S_k x 4 = {ram} x 4" + twin,
              _opt_src(basic) + " (state zeros_like(fp32 partition))")
    if adagrad_rebuilt(ec, "DeepSpeedZeroOptimizer_Stage3", basic):
        _adagrad_first_state(b, ec, inv, f"{S}.initialize_optimizer_states (l.1357-1358)",
                             "; under zero.Init an upper bound")
    if acc_k:
        # stage3.py l.1100-1108 (subgroup_to_device), l.1157-1160: fp16_partitioned_groups_flat[i].to(
        # subgroup_to_device[i], fp32).clone() on the accelerator; the backup torch.optim.AdamW (l.313-325, built
        # only with DeepSpeedCPUAdam) steps them (_optimizer_step l.1249-1258), its state made lazily at the first
        # step on the parameter's device (torch/optim/adam.py Adam._init_group: zeros_like(p), 'step' a 0-dim
        # CPU float32 tensor unless capturable / fused)
        words = (f"sum over the {len(acc_k)} accelerator sub-groups (i < int((1 - ratio) x {len(sgs)}), "
                 f"offload_optimizer.ratio {z.offload_optimizer.ratio:g}) of S_k x 4 = {acc} x 4")
        b.add("accelerator", "master_weights", "fp32_master", acc * M, "persistent", words,
              f"{S}._create_fp32_partitions (l.1100-1108 subgroup_to_device, l.1157-1160 .to(device).clone())")
        for m in moments:
            b.add("accelerator", "optimizer_states", m, acc * 4, "persistent", words + " (backup AdamW's state, "
                  "created at the first step)",
                  f"{S}.__init__ backup_optimizer (l.313-325), _optimizer_step (l.1255-1258); "
                  "torch/optim/adam.py Adam._init_group (zeros_like(p))")
    if acc_k or bsw:
        nb = len(acc_k) + len(bsw)
        b.add("host_pageable", "optimizer_states", "backup_adamw_step", 4 * nb, "persistent",
              f"4 B x {nb} sub-groups the backup AdamW steps (the backup AdamW's 0-dim fp32 'step', on the CPU; "
              "not made on a CPU accelerator)",
              "torch/optim/adam.py Adam._init_group (torch.tensor(0.0) unless capturable / fused); "
              f"{S}._optimizer_step (l.1255-1258)")
    if acc_k:
        # torch AdamW on CUDA defaults to foreach (torch/optim/optimizer.py _default_to_fused_or_foreach;
        # torch/utils/_foreach_utils.py: cuda, not cpu); _multi_tensor_adam (adam.py l.790) makes
        # exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs), one S_k x 4 copy of the sub-group's moment,
        # the rest in place; one sub-group per step call (l.1256 params = [fp32_param])
        b.add("accelerator", "workspace", "backup_adamw_sqrt", max(acc_k) * 4, "step",
              f"max over the accelerator sub-groups of S_k x 4 = {max(acc_k)} x 4 (foreach AdamW's "
              "exp_avg_sq_sqrt, one sub-group at a time; not made on a CPU accelerator)",
              "torch/optim/adam.py _multi_tensor_adam (torch._foreach_sqrt(device_exp_avg_sqs)); "
              f"{S}._optimizer_step (l.1255-1258)")
    if oo != "none" and (z.offload_optimizer.ratio if z.offload_optimizer.ratio is not None else 1.0) < 1.0:
        # stage3.py l.313-317 (any optimizer offload with ratio != 1, whether or not a sub-group stays on the
        # accelerator): torch.randn(1, device=accelerator).to(self.dtype) wrapped as the backup AdamW's first
        # parameter; on a GPU dropped when the first accelerator sub-group replaces group 0's params (l.1256),
        # kept here (D bytes, an upper bound)
        b.add("accelerator", "workspace", "backup_optimizer_param", D, "persistent",
              f"1 element x D = {D} B (the backup AdamW's placeholder parameter)",
              f"{S}.__init__ (l.313-317 backup_gpu_param)")
    mfiles = pl.opt_swap_numel(ec, moments=True)
    if files:
        b.add("nvme", "master_weights", "fp32_master", files * M, "persistent",
              f"sum over swappable sub-groups of A_{al}(S_k) x 4", "runtime/swap_tensor/partitioned_optimizer_swapper.py:PartitionedOptimizerSwapper.swap_out_optimizer_state")
    if mfiles:
        bwords = (f", not the {len(bsw)} the backup AdamW steps (offload_optimizer.ratio {z.offload_optimizer.ratio:g}: "
                  f"i < int((1 - ratio) x {len(sgs)}))" if bsw else "")
        for m in moments:
            b.add("nvme", "optimizer_states", m, mfiles * 4, "persistent",
                  f"sum over swappable sub-groups of A_{al}(S_k) x 4 ({m}-*.tensor.swp){bwords}",
                  "runtime/swap_tensor/partitioned_optimizer_swapper.py:PartitionedOptimizerSwapper.swap_out_optimizer_state"
                  + ("; swap_tensor/optimizer_utils.py _get_state_tensors l.492-502 (DeepSpeedCPUAdam's state only)"
                     if bsw else ""))
    if bsw:
        # partial offload to NVMe (twin_flow_backup_swapped): the swapped sub-groups i < int((1 - ratio) x n) are
        # stepped by the backup torch AdamW on their swapped-in host fp32 master (_prepare_sub_group l.2702-2705,
        # _optimizer_step l.1255-1258). Its state is zeros_like of that host parameter, made at its first step
        # (torch/optim/adam.py Adam._init_group l.178) and kept in backup_optimizer.state, never swapped
        # (optimizer_utils.py _get_state_tensors l.492-502 reads DeepSpeedCPUAdam's state only)
        words = (f"2 moments x sum over the {len(bsw)} swapped sub-groups the backup AdamW steps (i < int((1 - ratio) x "
                 f"{len(sgs)}), offload_optimizer.ratio {z.offload_optimizer.ratio:g}) of S_k x 4 = 2 x {sum(bsw)} x 4")
        b.add("host_pageable", "optimizer_states", "backup_adamw_host_moments", 2 * sum(bsw) * 4, "persistent",
              words + " (created at the first step; not made on a CPU accelerator, where DeepSpeedCPUAdam steps them)",
              f"{S}._optimizer_step (l.1255-1258 backup_optimizer); torch/optim/adam.py Adam._init_group l.178 "
              "(zeros_like(p) of the swapped-in host parameter); swap_tensor/optimizer_utils.py _get_state_tensors")
        # a host parameter: torch picks the single-tensor AdamW (optimizer.py _default_to_fused_or_foreach: foreach
        # only on cuda / xpu / mtia / privateuse1), whose denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        # (adam.py l.544) holds the sqrt and the quotient at once: 2 x S_k x 4, one sub-group per step call
        b.add("host_pageable", "workspace", "backup_adamw_host_denom", 2 * max(bsw) * 4, "step",
              f"2 x max over the backup-stepped swapped sub-groups of S_k x 4 = 2 x {max(bsw)} x 4 (single-tensor AdamW "
              "on a host parameter: exp_avg_sq.sqrt() and its quotient; not made on a CPU accelerator)",
              "torch/optim/adam.py _single_tensor_adam l.544; torch/optim/optimizer.py _default_to_fused_or_foreach; "
              f"{S}._optimizer_step (l.1255-1258)")
    swapped = [s for s, sw, bk in zip(Sk, swappable, bk_sw) if sw and not bk]
    if swapped:
        # first step: the moments of a swapped sub-group do not exist yet, so the basic optimizer
        # creates them as ordinary host tensors (zeros_like of the fp32 partition in the swap
        # buffer) before the sub-group is swapped out; later steps swap them into the pool.
        # Under partial offload to NVMe only the swapped sub-groups DeepSpeedCPUAdam steps (i >= int((1 - ratio) x n));
        # on DeepSpeed's CPU accelerator it steps them all, so a CPU run's figure is the max over every swapped one
        # (tests/engine/test_peak_parity.py z3_bf16_oo_nvme_ratio_w2: the largest swapped sub-group is a host one)
        big_sw = max(swapped)
        b.add("host_pageable", "optimizer_states", "first_step_moments", len(moments) * big_sw * 4, "first_step",
              f"{len(moments)} x max over swappable sub-groups S_k x 4 = {len(moments)} x {big_sw} x 4 "
              "(created in step 1, swapped out to NVMe and freed)"
              + (" (DeepSpeedCPUAdam's sub-groups: not the backup AdamW's)" if bsw else ""),
              _opt_src(basic) + " (state zeros_like on the host at the first step); "
              f"{S}._optimizer_states_and_gradient_swap_out")
    nsub = len(sgs)
    step_b = optimizer_states(ec).step_bytes * nsub if optimizer_states(ec).step_bytes else 0
    b.add(step_tier(ec, basic), "optimizer_states", "step", step_b, "persistent",
          f"4 B x {nsub} sub-groups" if step_b else "0 (python int)", _opt_src(basic))
    if oo == "none":
        # _prepare_fp32_grad_for_sub_group (stage3.py l.2686): self.flatten(averaged_gradients[k]).to(fp32).
        # A sub-group of one tensor is flattened as a view of its gradient partition (torch
        # _flatten_dense_tensors: tensors.size() == 1 -> t.contiguous().view(-1), torch/csrc/utils/
        # tensor_flatten.h), and .to(fp32) of fp32 gradients (G = 4) is that tensor itself: no copy.
        # Measured (issue 15, ds-advisor measure --params 1000000, ZeRO-3 fp32 W = 1): the in_step census
        # found no fp32_grad storage where the ledger had 4,000,000 B
        one = [len(sg.tensors) == 1 for sg in sgs]
        fp32k = max((0 if (o and G == 4) else s for s, o in zip(Sk, one)), default=0)
        b.add("accelerator", "gradients", "fp32_grad", fp32k * 4, "step",
              f"max_k S_k x 4 = {fp32k} x 4 (current sub-group only; a one-tensor sub-group of fp32 gradients "
              "is flattened and cast as views: 0)", f"{S}._prepare_fp32_grad_for_sub_group")
        flatk = max((0 if o else s for s, o in zip(Sk, one)), default=0)
        if G != 4 and flatk:
            # flatten(averaged_gradients[k]) is a G-byte copy (of more than one tensor), cast .to(fp32) while it is alive
            b.add("accelerator", "gradients", "zero3_grad_flat_copy", flatk * G, "step_prep",
                  f"max_k S_k x G = {flatk} x {G} (the flattened 16-bit gradients beside their fp32 cast; "
                  "sub-groups of more than one tensor)",
                  f"{S}._prepare_fp32_grad_for_sub_group (self.flatten(self.averaged_gradients[k]).to(fp32))")
        if any(t.trainable for t in inv.tensors):
            # step -> _get_norm_groups (stage3.py l.2579) -> get_grad_norm_direct casts each gradient
            # partition to fp64 for its norm (l.2457: g.to(device).to(get_norm_dtype()).norm(2); zero/utils.py
            # l.59-63 get_norm_dtype: fp64 where the accelerator has it), one at a time, after
            # _partition_all_parameters and before the sub-group loop's fp32 gradient (the timeline's :norm
            # instant). Measured (issue 15, z3_fp32_tbsga2_w1 step:4): l2.weight's 23,177 x 8 B beside the
            # moments, +12,653 B (1.02%) over the prep instant without it; at a 16-bit model the prep's
            # fp32 gradient and flat copy are larger, so it shows only in fp32
            big = inv.memo(("zero3_norm_partition", W),  # once per (tensor list, W): generate asks per plan
                           lambda: max(_ceil_div(t.numel, W) for t in inv.tensors if t.trainable))
            b.add("accelerator", "workspace", "grad_norm_fp64", big * 8, "step_norm",
                  f"max_i ceil(n_i/W) x 8 = {big} x 8 (the largest gradient partition cast to fp64 for its norm, "
                  "one at a time)",
                  f"{S}.get_grad_norm_direct (g.to(get_norm_dtype()), l.2457)")
    else:
        b.add(_host(oo_pin), "gradients", "fp32_grad", ram * 4, "persistent",
              f"sum over RAM sub-groups S_k x 4 = {ram} x 4 (one buffer per sub-group)" + twin,
              f"{S}.initialize_optimizer_states")
        if acc_k:
            # initialize_optimizer_states l.1338-1342: the host buffer .to(subgroup_to_device[i]): an
            # accelerator copy per accelerator sub-group (the host buffer is dropped)
            b.add("accelerator", "gradients", "fp32_grad", acc * 4, "persistent",
                  f"sum over the {len(acc_k)} accelerator sub-groups of S_k x 4 = {acc} x 4 (offload_optimizer.ratio "
                  f"{z.offload_optimizer.ratio:g})",
                  f"{S}.initialize_optimizer_states (l.1338-1342 subgroup_gradient_buffer.to(subgroup_to_device[i]))")
    if oo == "nvme":
        bc = z.offload_optimizer.buffer_count
        big = _align(max(Sk), al)
        b.add("host_pinned", "workspace", "opt_swap_buffers", bc * big * M, "persistent",
              f"buffer_count x A_{al}(max_k S_k) x 4 = {bc} x {big} x 4 (aio-locked)",
              "runtime/swap_tensor/optimizer_utils.py:OptimizerSwapper.__init__ (SwapBufferManager)")
        # gradient swap files and unswapped tails (optimizer_utils.py:_swap_out_gradients)
        gfiles, tails = grad_terms
        if gfiles:
            b.add("nvme", "gradients", "fp32_grad", gfiles, "persistent",
                  f"per param partition with r_i x 4 >= {smin}: floor(r_i / {al}) x {al} x 4",
                  "runtime/swap_tensor/optimizer_utils.py:OptimizerSwapper._swap_out_gradients")
        # made flush by flush in backward: there zero3_reduce_flush counts those of the flushes done
        # (zero3_flush_grad_tails); whole from the step on. Where the flush is not walked, at every
        # backward instant (an upper bound)
        walked = rs is not None and zero3_flush_grad_tails(ec, inv, W) is not None
        b.add("accelerator", "gradients", "opt_unswapped_grad_tails", tails, "step" if walked else "backward",
              "r_i x 4 for every partition of a swappable sub-group smaller than the aio size or not aligned "
              "(the fp32 copy stays alive until the step)"
              + ("; in backward inside zero3_reduce_flush, after each one's flush" if walked else ""),
              "runtime/swap_tensor/optimizer_utils.py:OptimizerSwapper._swap_out_gradients; "
              f"{S}.partition_grads -> _swap_out_offload_fp32_gradients")
    if persist_frozen and not aliased:
        # its own item so the timeline gives it lp_params_gathered's lifetime (timeline.PERSIST_GATHERED):
        # engine, TINY_FROZEN_GROUPS at W 2 (z3_bf16_groups_w2): as one "persistent from initialize"
        # frozen_params entry it put the gathered l2 (46,512 B) at initialize, the first iteration and
        # the step, where DeepSpeed holds only its partition (-46.5 kB, -22% at initialize)
        b.add("accelerator", "parameters", "frozen_params_gathered", persist_frozen * D, "persistent",
              f"persistent frozen params gathered: sum ceil(n_i/W) x W x D = {persist_frozen} x {D}",
              "runtime/zero/parameter_offload.py:mark_persistent_parameters l.317-329 (ds_numel only, "
              "frozen ones too); stage3.py:_post_step l.2840-2841")
    return {"P3": P3, "S": Sk}


#: ZeRO++ int8 quantizer (DeepSpeed 0.19.8 runtime/zero/partition_parameters.py CUDAQuantizer l. 855-894):
#: target elements per quantization group, and bytes per group of its scales (ops/csrc/quantization/
#: pt_binding.cpp quantize_kernel l. 17-24: a {groups, 1} float tensor for the Symmetric type).
QUANT_TARGET_GROUP = 8000
QUANT_SCALE_BYTES = 4


@functools.lru_cache(maxsize=4096)
def quant_groups(numel: int) -> int | None:
    """How many quantization groups DeepSpeed 0.19.8's CUDAQuantizer.quantize picks for a tensor of
    ``numel`` elements (``partition_parameters.py`` l. 867-891), or None where its asserts fail
    (numel not a multiple of 8 x groups, more than 16,000 per group, or numel <= groups): start at
    ceil(numel / 8000), step up to the first g with numel % (8 g) == 0, then double while
    numel % (16 g) == 0 and numel / g > 8000. One fp32 scale per group (Symmetric)."""
    if numel <= 0:
        return None
    g = -(-numel // QUANT_TARGET_GROUP)
    while g < numel:
        if numel % (8 * g) == 0:
            break
        g += 1
    while numel % (16 * g) == 0 and numel / g > QUANT_TARGET_GROUP:
        g *= 2
    if numel % (8 * g) or numel / g >= 16000 or numel <= g:
        return None
    return g


def _frozen(b: _Builder, ec: EffectiveConfig, frozen: list[int], W: int) -> None:
    """Frozen (trainable=False) parameters; ``frozen`` = their numels.

    ZeRO-3 partitions them like every parameter (``partition_parameters.py`` _partition_param)
    but never moves them into the trainable flat buffers: with ``offload_param`` none the
    partition stays on the accelerator; cpu -> host (page-locked when ``offload_param.pin_memory``);
    nvme -> a partition of p_i x D >= max(1 MiB, aio.block_size) (``swappable_tensor``) is swapped
    out to its own ``{ds_id}_param.tensor.swp`` of A_k(p_i) x D bytes and released (its tensor then
    points to the swapper's 2-byte invalid_buffer), a smaller one stays in host memory as with cpu
    (measured: parity cell big-z3-bf16-op_nvme-frozen)."""
    D = DTYPE_BYTES[ec.model_dtype]
    if not frozen:
        return
    if ec.zero.stage == 3:
        op = ec.offload_param_effective
        src = "runtime/zero/partition_parameters.py:_partition_param"
        if op == "none" and ec.zero.zero_quantized_nontrainable_weights:
            # partition_parameters.py _partition_param l. 1836-1840: a parameter that is frozen when it
            # is partitioned gets an int8 partition of p_i bytes plus CUDAQuantizer's fp32 scales
            q = bad = scales = 0
            for x in frozen:
                p = _ceil_div(x, W)
                g = quant_groups(p)
                if g is None:
                    bad += p
                else:
                    q += p
                    scales += g * QUANT_SCALE_BYTES
            b.add("accelerator", "parameters", "frozen_params", q + scales + bad * D, "persistent",
                  f"zero_quantized_nontrainable_weights: sum_frozen ceil(n_i / W) x 1 (int8) + 4 x groups(p_i) "
                  f"(fp32 scales) = {q} + {scales}"
                  + (f" + {bad} x {D} (partitions CUDAQuantizer.quantize cannot group: it asserts)" if bad else "")
                  + "; parameters frozen when ZeRO-3 partitions them (later freezing needs "
                  "stage3.py quantize_nontrainable_params)",
                  src + " l. 1836-1840 (quantizer_module.quantize); CUDAQuantizer.quantize l. 867-894; "
                  "ops/csrc/quantization/pt_binding.cpp quantize_kernel l. 17-24")
            return
        if op == "none":
            n = sum(_ceil_div(x, W) for x in frozen)
            b.add("accelerator", "parameters", "frozen_params", n * D, "persistent",
                  f"sum_frozen ceil(n_i / W) x D = {n} x {D} (partitioned, no grads or optimizer state)", src)
            return
        host = _host(ec.zero.offload_param.pin_memory)
        parts = [_ceil_div(x, W) for x in frozen]
        pmin = swap_threshold_bytes(ec) if op == "nvme" else None
        kp = aio_alignment_elems(ec, D)
        swapped = [p for p in parts if pmin is not None and p * D >= pmin]
        kept = sum(parts) - sum(swapped)
        files_bytes = zero3_param_swap_bytes(ec, swapped) if swapped else 0
        b.add(host, "parameters", "frozen_params", kept * D, "persistent",
              f"sum_frozen ceil(n_i / W) x D = {kept} x {D} (host partitions"
              + (f", those below the {pmin:,} B aio swap size)" if pmin is not None else ")"),
              src + (" (pin_memory: page-locked)" if host == "host_pinned" else ""))
        if swapped:
            files = files_bytes // D
            b.add("nvme", "parameters", "frozen_params", files_bytes, "persistent",
                  f"sum over frozen partitions with p_i x D >= {pmin:,} B of A_{kp}(p_i) x D = {files} x {D} "
                  "({ds_id}_param.tensor.swp, read on every fetch, never written after init)",
                  src + "; runtime/swap_tensor/partitioned_param_swapper.py:swap_out_and_release")
            if not any(e.item == "lp_param_partitions" and e.bytes == 2 for e in b.entries):
                b.add("host_pageable", "parameters", "frozen_params", 2, "persistent",
                      "2 B: the shared one-element invalid_buffer the swapped-out frozen partitions point to",
                      "runtime/swap_tensor/partitioned_param_swapper.py:AsyncPartitionedParameterSwapper.__init__")
    else:
        n = sum(frozen)
        b.add("accelerator", "parameters", "frozen_params", n * D, "persistent",
              f"sum_frozen n_i x D = {n} x {D} (no grads or optimizer state)",
              "engine.py:DeepSpeedEngine._configure_distributed_model")


def zero3_grad_swap_by_rank(ec: EffectiveConfig, inv: Inventory, W: int,
                            sub_groups: "list[SubGroup] | None" = None) -> Runs | None:
    """Runs of (NVMe fp32 gradient file bytes, kept gradient tail bytes) with
    ``offload_optimizer: nvme`` at ZeRO-3 (:func:`zero3_grad_swap_bytes` over every parameter of a
    swappable sub-group), every rank in O(tensors log tensors); None when there is no optimizer swap.

    r_i depends on the rank only through q_i = floor(n_i / p_i): ranks below q_i hold p_i real
    elements, rank q_i (if < W) holds n_i mod p_i, later ranks none (§3.2). So each parameter adds
    its p_i figure on [0, q_i) and its remainder figure at q_i: a sparse difference array over ranks."""
    if ec.zero.stage != 3 or ec.offload_optimizer_effective != "nvme":
        return None
    smin = swap_threshold_bytes(ec)
    al = aio_alignment_elems(ec, 4)
    if sub_groups is None:
        # the inventory's own sub-groups: once per (tensor list, W, sub_group_size, threshold,
        # alignment), as generate asks per plan (Inventory.memo); callers must not mutate it
        sgs = ec.zero.sub_group_size
        return inv.memo(("zero3_grad_swap_by_rank", W, sgs, smin, al),
                        lambda: _zero3_grad_swap_by_rank(inv, W, zero3_sub_groups(inv, W, sgs), smin, al))
    return _zero3_grad_swap_by_rank(inv, W, sub_groups, smin, al)


def zero3_grad_swap_files_by_rank(ec: EffectiveConfig, inv: Inventory, W: int) -> Runs | None:
    """Runs of how many NVMe fp32 gradient files a rank writes (and reads back) per step with
    ``offload_optimizer: nvme`` at ZeRO-3: one per piece :func:`zero3_grad_swap_bytes` writes (its
    aligned part >= the swap threshold; ``optimizer_utils.py`` l.256-287 ``_swap_out_gradients``:
    ``get_or_create_gradient_paths`` names a file per offset and ``swap_out_tensors`` writes each),
    over the same parameters as :func:`zero3_grad_swap_by_rank`; None when there is no optimizer swap."""
    if ec.zero.stage != 3 or ec.offload_optimizer_effective != "nvme":
        return None
    smin = swap_threshold_bytes(ec)
    al = aio_alignment_elems(ec, 4)
    sgs = ec.zero.sub_group_size
    return inv.memo(("zero3_grad_swap_files_by_rank", W, sgs, smin, al),
                    lambda: _zero3_grad_swap_by_rank(inv, W, zero3_sub_groups(inv, W, sgs), smin, al,
                                                     files=True).map(lambda v: v[0]))


def _zero3_grad_swap_by_rank(inv: Inventory, W: int, sub_groups: "list[SubGroup]", smin: int, al: int,
                             files: bool = False) -> Runs:
    """The walk of :func:`zero3_grad_swap_by_rank`; ``files``: each written piece counts 1 (the file
    count of :func:`zero3_grad_swap_files_by_rank`) and no kept bytes."""
    dg: dict[int, int] = {}  # a difference array over ranks, kept sparse: rank -> change
    dt: dict[int, int] = {}

    def add(a: int, b: int, f: int, t: int) -> None:
        dg[a] = dg.get(a, 0) + f
        dg[b] = dg.get(b, 0) - f
        dt[a] = dt.get(a, 0) + t
        dt[b] = dt.get(b, 0) - t

    tensors = inv.tensors
    for sg in sub_groups:
        if sg.numel * 4 < smin:
            continue
        # a parameter's terms depend on its numel only, and the difference array only adds them up:
        # each distinct numel once, times how many parameters of the sub-group have it (identical
        # layers repeat a handful of numels; issue 21)
        for n, c in collections.Counter(tensors[i].numel for i in sg.tensors).items():
            p = _ceil_div(n, W)
            q = min(n // p, W) if p else W
            f, t = zero3_grad_swap_bytes(p, smin, al)
            if files:
                f, t = (1 if f else 0), 0
            add(0, q, f * c, t * c)
            if q < W:
                f, t = zero3_grad_swap_bytes(n - q * p, smin, al)
                if files:
                    f, t = (1 if f else 0), 0
                add(q, q + 1, f * c, t * c)
    pts = sorted(r for r in set(dg) | set(dt) if 0 < r < W)
    starts = [0] + pts
    vals = []
    g = t = 0
    for r in starts:
        g += dg.get(r, 0)
        t += dt.get(r, 0)
        vals.append((g, t))
    return Runs(starts + [W], vals)


@dataclass
class Placement:
    """How DeepSpeed lays out and places one ZeRO group's partitions: the facts the ledger's
    entries are built from, which movement and checkpoint files read instead of deriving them
    again. Computed once per plan by :func:`placement_of` (for a model-parallel shard, by
    :func:`placement` inside the ledger). Sizes are elements.

    * ``zero12``: ZeRO-1/2 (and BF16_Optimizer) per trainable param group, its
      :class:`Zero12Layout` (padding, partition P); empty at other stages.
    * ``terms``: per data-parallel rank (a :class:`Runs`: pieces of ranks with equal figures),
      the only figures its entries depend on: ZeRO-1/2
      (I_r, Cov_r, P_max,r, F_r, single_r) (:func:`zero12_rank_terms`, :func:`zero12_flat_copy`),
      ZeRO-3 (NVMe fp32 gradient file bytes, kept tail bytes) (:func:`zero3_grad_swap_by_rank`;
      (0, 0) without optimizer swap), else None. O(tensors log tensors), computed once.
    * ``sub_groups``: ZeRO-3 sub-groups (:func:`zero3_sub_groups`); empty at other stages.
    * ``opt_swapped``: per sub-group, its fp32 master and moments live in NVMe swap files
      (``offload_optimizer: nvme`` and S_k x 4 >= max(1 MiB, aio.block_size):
      ``stage3.py:_swappable_optimizer_subgroup``).
    * ``in_flat``: per sub-group, its 16-bit partitions live in the pinned per-group flat buffer
      (``offload_param: nvme`` caps the buffers at ``max_in_cpu`` elements over the groups in
      order: ``stage3.py:_create_param_groups_fp16_flat_cpu_memory``, ``_move_to_flat_buffer``);
      all True unless parameters go to NVMe.
    * ``opt_on_accelerator``: per sub-group, partial optimizer offload keeps its fp32 master,
      fp32 gradient and moments on the accelerator (:func:`twin_flow_on_accelerator`; never a
      swapped one); all False (or empty) otherwise.
    * ``opt_backup_swapped``: per sub-group, partial optimizer offload to NVMe steps it, swapped, with
      the backup AdamW, whose moments stay in host memory (:func:`twin_flow_backup_swapped`).
    """

    W: int
    zero12: list[Zero12Layout]
    terms: Runs
    sub_groups: list[SubGroup]
    opt_swapped: list[bool]
    in_flat: list[bool]
    opt_on_accelerator: list[bool] = field(default_factory=list)
    opt_backup_swapped: list[bool] = field(default_factory=list)

    def opt_swap_numel(self, ec: EffectiveConfig, moments: bool = False) -> int:
        """Elements of each NVMe swap file set: the sum over swapped sub-groups of A_k(S_k),
        k = :func:`aio_alignment_elems` for 4-byte elements (``swap_tensor/optimizer_utils.py:_io_aligned_numel``),
        for the fp32 master; ``moments``: for each moment, whose files only DeepSpeedCPUAdam's sub-groups have
        (not those of :attr:`opt_backup_swapped`, whose moments the backup AdamW keeps in host memory)."""
        al = aio_alignment_elems(ec, 4)
        bk = self.opt_backup_swapped if moments and self.opt_backup_swapped else [False] * len(self.sub_groups)
        return sum(_align(sg.numel, al) for sg, sw, b in zip(self.sub_groups, self.opt_swapped, bk) if sw and not b)

    def opt_swap_files(self, moments: bool = False) -> int:
        """Files of one NVMe swap file set (one per swapped sub-group: the swapper opens one file per
        sub-group and state, ``optimizer_utils.py`` l.46-75 ``OptimizerStateSwapInfo`` swap paths, each
        its own ``async_pread`` / ``async_pwrite``, ``swap_tensor/utils.py`` l.19-26), the same sub-groups
        as :meth:`opt_swap_numel`: the fp32 master's, or with ``moments`` each moment's."""
        bk = self.opt_backup_swapped if moments and self.opt_backup_swapped else [False] * len(self.sub_groups)
        return sum(1 for sw, b in zip(self.opt_swapped, bk) if sw and not b)


def zero3_param_swap_bytes(ec: EffectiveConfig, partitions: "Iterable[int]") -> int:
    """NVMe bytes of 16-bit parameter partitions ``partitions`` (elements p_i) swapped out by
    ``offload_param: nvme``: the sum over p_i x D >= max(1 MiB, aio.block_size) of A_k(p_i) x D,
    k = 1024 x intra_op_parallelism / D (``partitioned_param_swapper.py:swappable_tensor``,
    ``_io_aligned_numel``)."""
    # each distinct partition size once, times its count (the same sum; identical layers repeat a few sizes)
    return zero3_param_swap_bytes_counted(ec, collections.Counter(partitions))


def zero3_partition_counts(inventory: Inventory, W: int, which: str = "all") -> "dict[int, int]":
    """{p_i = ceil(n_i / W) (elements): how many parameters have it}, over ``which`` parameters
    (``all``, ``trainable`` or ``frozen``). Once per (tensor list, W, which): the sums over
    partitions the ledger, timeline and movement take depend on the sizes only, and a model of
    identical layers has a handful of distinct sizes (issue 21). Callers must not mutate it."""
    def counts() -> "dict[int, int]":
        numels = inventory.memo(("numel_counts", which), lambda: collections.Counter(
            t.numel for t in inventory.tensors
            if which == "all" or (t.trainable if which == "trainable" else not t.trainable)))
        out: dict[int, int] = {}
        for n, c in numels.items():
            p = -(-n // W)
            out[p] = out.get(p, 0) + c
        return out
    return inventory.memo(("zero3_partition_counts", W, which), counts)


def zero3_param_swap_bytes_counted(ec: EffectiveConfig, counts: "dict[int, int]") -> int:
    """:func:`zero3_param_swap_bytes` of partitions given as {p_i (elements): how many}, bytes."""
    D = DTYPE_BYTES[ec.model_dtype]
    pmin = swap_threshold_bytes(ec)
    kp = aio_alignment_elems(ec, D)
    return sum(_align(p, kp) * D * c for p, c in counts.items() if p * D >= pmin)


def zero3_param_swap_files(ec: EffectiveConfig, counts: "dict[int, int]") -> int:
    """How many files the partitions {p_i (elements): how many} of :func:`zero3_param_swap_bytes_counted`
    are: one per swapped partition, p_i x D >= max(1 MiB, aio.block_size) (``partitioned_param_swapper.py``
    l.148-161 ``_get_swap_paths``: ``{ds_id}_param.tensor.swp``; ``swap_in`` / ``_swap_out`` l.259-318,
    one ``async_pread`` / ``async_pwrite`` each, ``swap_tensor/utils.py`` l.19-26)."""
    D = DTYPE_BYTES[ec.model_dtype]
    pmin = swap_threshold_bytes(ec)
    return sum(c for p, c in counts.items() if p * D >= pmin)


def _zero3_in_flat(ec: EffectiveConfig, sgs: list[SubGroup]) -> list[bool]:
    """Per sub-group: its partitions are in the max_in_cpu flat buffer (see :class:`Placement`)."""
    out = [True] * len(sgs)
    if ec.offload_param_effective != "nvme":
        return out
    cap = ec.zero.offload_param.max_in_cpu
    agg = 0
    for g in sorted({sg.group for sg in sgs}):
        idx = [k for k, sg in enumerate(sgs) if sg.group == g]
        pg = sum(sgs[k].numel for k in idx)
        size = pg if agg + pg <= cap else max(0, cap - agg)
        agg += pg
        off = 0
        for k in idx:
            out[k] = off + sgs[k].numel <= size
            off += sgs[k].numel
    return out


def zero3_max_in_cpu_needed(sgs: list[SubGroup], which: list[bool]) -> int:
    """The least ``offload_param.max_in_cpu`` (elements) that puts every sub-group k with ``which[k]``
    (and a nonzero size) in the host flat buffer, the inverse of :func:`_zero3_in_flat`. DeepSpeed 0.19.8
    ``stage3.py``: param group j's buffer is its partitions' sum, cut to max(0, max_in_cpu - the groups
    before) when that total passes max_in_cpu (_create_param_groups_fp16_flat_cpu_memory l.888-900), and
    sub-group k gets a slice where flat_offset + its elements <= that buffer (l.984-987); so k needs
    max_in_cpu >= (groups before) + (its offset in the group) + its elements. 0 when none is asked."""
    need = 0
    agg = 0
    for g in sorted({sg.group for sg in sgs}):
        idx = [k for k, sg in enumerate(sgs) if sg.group == g]
        off = 0
        for k in idx:
            if which[k] and sgs[k].numel > 0:
                need = max(need, agg + off + sgs[k].numel)
            off += sgs[k].numel
        agg += off
    return need


def placement(ec: EffectiveConfig, inv: Inventory, W: int, wrapper: str | None = None) -> Placement:
    """The :class:`Placement` of ``inv`` over a ZeRO group of ``W`` ranks (``wrapper`` defaults
    to :func:`select_optimizer`'s). O(tensors log tensors), whatever W is."""
    st = ec.zero.stage
    wrapper = wrapper or select_optimizer(ec)[0]
    has_groups = inv.has_trainable()
    zero12: list[Zero12Layout] = []
    sgs: list[SubGroup] = []
    if not has_groups:
        terms = Runs.const(W, None)
    elif st in (1, 2) or wrapper == "BF16_Optimizer":
        # BF16_Optimizer (stage 1, or stage 0 under pipeline parallelism: select_optimizer) lays its groups out
        # as ZeRO-1 does, over its data-parallel group at any stage (bf16_optimizer.py l.152-211)
        zero12 = zero12_layouts(ec, inv, W, wrapper)
        check_zero12_work(zero12, W, st)
        terms = Runs.zip(zero12_rank_terms(ec, zero12, W), zero12_flat_copy(zero12, W)).map(lambda ab: ab[0] + ab[1])
    elif st == 3:
        sgs = zero3_sub_groups(inv, W, ec.zero.sub_group_size)
        terms = zero3_grad_swap_by_rank(ec, inv, W) or Runs.const(W, (0, 0))
    else:
        terms = Runs.const(W, None)
    smin = swap_threshold_bytes(ec)
    swapped = [ec.offload_optimizer_effective == "nvme" and sg.numel * 4 >= smin for sg in sgs]
    return Placement(W, zero12, terms, sgs, swapped, _zero3_in_flat(ec, sgs),
                     twin_flow_on_accelerator(ec, len(sgs), swapped), twin_flow_backup_swapped(ec, swapped))


def placement_of(plan: Plan) -> Placement:
    """:func:`placement` of the plan's whole inventory over its ZeRO group, once per plan (kept
    in ``plan.derived``): what the ledger (without model parallelism), movement and checkpoint
    files all read. Never raises for a config DeepSpeed refuses (the ledger does)."""
    pl = plan.derived.get("placement")
    if pl is None:
        pl = plan.derived["placement"] = placement(plan.config, plan.inventory, plan.cluster.zero_world_size,
                                                   plan_optimizer(plan)[0])
    return pl


def _roles(ec: EffectiveConfig, inv: Inventory, W: int, wrapper: str, basic: str, ga: int,
           pl: Placement | None = None) -> list[RankLedger]:
    """One :class:`RankLedger` per distinct set of entries, with the ranks it stands for.

    Ranks differ only through a few per-rank figures: ZeRO-1/2 (I_r, Cov_r, P_max,r), ZeRO-3 with
    NVMe optimizer swap the gradient files and tails; stage 0 and every other ZeRO-3 entry are the
    same on every rank. Those figures come for every rank in O(tensors log tensors)
    as :class:`Runs` (:func:`zero12_all_ranks`, :func:`zero3_grad_swap_by_rank`); the entries are then built once per
    distinct figure and ranks whose entries coincide are merged. Ranks are :class:`RankSet` ranges,
    so the work is O(tensors x roles) whatever W is. ``pl``: the :class:`Placement`
    of ``inv`` over ``W`` (computed when None)."""
    st = ec.zero.stage
    # BF16_Optimizer takes the ZeRO-1/2 layout and entries at stage 0 too (under pipeline parallelism:
    # select_optimizer); the ZeRO-1/2 transient gates below all ask for DeepSpeedZeroOptimizer
    z12 = st in (1, 2) or wrapper == "BF16_Optimizer"
    has_groups = inv.has_trainable()
    frozen = list(inv.memo(("frozen_numels",), lambda: tuple(t.numel for t in inv.tensors if not t.trainable)))
    pl = pl or placement(ec, inv, W, wrapper)
    terms = pl.terms
    if z12 and has_groups and zero12_transients_modeled(ec, wrapper, ga, len(pl.zero12)):
        terms = Runs.zip(terms, zero12_backward_transients(ec, inv, pl.zero12, W, ga)).map(lambda ab: ab[0] + ab[1])
    # ranks with the same totals may still split them differently over the groups a step updates
    # one at a time (the timeline's per-group step instants): keep those ranks apart
    split = Runs.const(W, ())
    if z12 and has_groups and zero12_groups_stepped_apart(ec, wrapper, len(pl.zero12)):
        split = zero12_step_groups(pl.zero12, W)
    elif z12 and has_groups and zero12_offload_norm_modeled(ec, wrapper):
        split = zero12_offload_reduce_terms(ec, pl.zero12, W, wrapper, inv, ga)
        if zero12_offload_microstep_modeled(ec, wrapper, ga, len(pl.zero12)):
            split = Runs.zip(split, zero12_offload_microstep_terms(ec, inv, pl.zero12, W, wrapper)).map(
                lambda t: t[0] + t[1])
        elif zero12_offload_fp32_accum(ec, wrapper, ga, len(pl.zero12)):
            # the grad_accum storages the boundary reduce leaves to the step (a fifth figure, offload_kept)
            split = Runs.zip(split, zero12_offload_fp32_accum_kept(ec, pl.zero12, W)).map(
                lambda t: t[0] + (t[1],))
    elif z12 and has_groups and zero1_compact_grad_accum(ec, wrapper, len(pl.zero12)):
        # the grad_accum the boundary reduce leaves to the step's norm, per rank (offload_kept), and the part of it
        # of the groups after the first, which the step frees only at their own update (kept_later)
        if ec.contiguous_gradients_effective:
            # with overlap_comm each of the two buffers a missing gradient sits in (_zero1_overlap_buffers)
            bo = _zero1_overlap_buffers(ec, inv, pl.zero12, W) if ec.zero.overlap_comm else None
            split = Runs.zip(zero12_offload_fp32_accum_kept(ec, pl.zero12, W, bo),
                             zero12_offload_fp32_accum_kept(ec, pl.zero12[1:], W, bo[1:] if bo else None)
                             if len(pl.zero12) > 1 else Runs.const(W, 0))
        else:
            # without contiguous_gradients stage 1 clears no grad_accum in the reduce (l.2272): all N x 4 to the step,
            # freed at their group's turn (free_grad_in_param_list of params_not_in_partition l.3103 and
            # params_in_partition l.3128), the later groups' through group 0's update
            n4 = [sum(lay.n for lay in pl.zero12) * 4, sum(lay.n for lay in pl.zero12[1:]) * 4]
            split = Runs.const(W, tuple(n4))
    figures = Runs.zip(terms, split).groups()
    oflush = zero12_offload_flush_bytes(ec, inv, pl.zero12, W, wrapper, ga) if z12 and has_groups else 0
    if len(figures) > MAX_RANK_ROLES:
        raise WorkLimitError(
            f"ZeRO-{st} over {W:,} data-parallel ranks: {len(figures):,} distinct per-rank states (rank roles), more "
            f"than the {MAX_RANK_ROLES:,} ds-advisor accounts (documented limit; tensors of many distinct sizes "
            "make each rank's partition differ); use fewer ranks or fewer distinct tensor sizes")
    roles: dict[tuple, RankLedger] = {}
    for (k, gk), rs in figures.items():
        b = _Builder(rs[0])
        if not has_groups:
            pass
        elif z12:
            _zero12(b, ec, inv, W, wrapper, basic, ga, pl.zero12, k,
                    offload_norm=gk[0] * 8 if zero12_offload_norm_modeled(ec, wrapper) and gk else 0,
                    offload_xl=gk[1:3] if zero12_offload_norm_modeled(ec, wrapper) and gk else (0, 0),
                    offload_flush=oflush,
                    offload_unmoved=gk[3] if zero12_offload_norm_modeled(ec, wrapper) and gk else 0,
                    offload_microstep=(tuple(gk[4:6]) if zero12_offload_norm_modeled(ec, wrapper) and gk
                                       and zero12_offload_microstep_modeled(ec, wrapper, ga, len(pl.zero12)) else ()),
                    offload_kept=(gk[4] if zero12_offload_fp32_accum(ec, wrapper, ga, len(pl.zero12)) and gk
                                  else gk[0] if zero1_compact_grad_accum(ec, wrapper, len(pl.zero12)) and gk
                                  else None),
                    kept_later=gk[1] if zero1_compact_grad_accum(ec, wrapper, len(pl.zero12)) and gk else 0)
        elif st == 0:
            _stage0(b, ec, inv, wrapper, basic, ga)
        else:
            _stage3(b, ec, inv, W, basic, pl, k, ga=ga)
        if has_groups:
            _torch_step(b, ec, inv, W, wrapper, basic, pl)
        _frozen(b, ec, frozen, W)
        key = (gk, tuple((e.tier, e.cls, e.item, e.bytes, e.life, e.formula, e.source, e.alias_of) for e in b.entries))
        if key in roles:
            roles[key].ranks = roles[key].ranks | rs
        else:
            roles[key] = RankLedger(rs[0], b.entries, rs)
    return list(roles.values())


#: DeepSpeed's PipelineEngine (``runtime/pipe/engine.py``): the source of :func:`pipeline_stage_entries`.
PIPE_SRC = "runtime/pipe/engine.py:PipelineEngine"


def pipe_buffers_used(pp: int, stage: int, ga: int) -> int:
    """The pipe buffers a stage's train_batch fills: ``TrainSchedule.num_pipe_buffers`` =
    max(2, min(stages - stage_id, micro_batches)) (``runtime/pipe/schedule.py`` l.247-256), of which the
    schedule's buffer ids (micro-batch id mod that count) reach at most ``ga`` (the micro-batches)."""
    return min(max(2, min(pp - stage, ga)), max(1, ga))


def pipeline_stage_entries(ec: EffectiveConfig, meta: dict[str, Any], workload: Any, stage: int, pp: int,
                           ga: int, wrapper: str, dp: int = 1) -> list[Entry]:
    """What DeepSpeed's PipelineEngine holds on a rank of pipeline ``stage`` (of ``pp`` > 1) beside the
    ZeRO entries, in bytes (rank 0's entry fields; :func:`_model_parallel_roles` rewrites the rank):

    * ZeRO-1 with ``contiguous_gradients`` (forced on under optimizer offload): the boundary's
      ``reduce_gradients(pipeline_parallel=True)`` appends a second ipg buffer of reduce_bucket_size x C
      (C = the communication dtype's bytes) beside the one the backward hooks' setup_buckets made, and the
      epilogue releases both (``stage_1_and_2.py`` l.962-968, l.978 -> l.1061); lifetime ``boundary_reduce``.
      Measured on a 2-stage PipelineModule (tests/engine/test_pipeline_engine.py, the peak cells): both
      100,000 B buffers live at the reduce, the stage's step peak.
    * Needing the sequence length (``workload.seq_len``, else the model's ``max_seq_len``; none when neither is
      known: :func:`compute_ledger` then lists them as excluded), with S = b x s x h x D
      (micro-batch b: ``workload.micro_batch``, else the config's for ``dp`` data-parallel ranks; hidden size
      h; D the model dtype's bytes, the activations' dtype):

      - a stage after the first: the activation receive buffer ``pipe_recv_buf``, S, allocated at the first
        receive and kept (``_exec_recv_activations`` l.1123-1124, ``_recv_tensor_meta`` ->
        ``_allocate_or_extend_buffers`` l.1284-1294);
      - a stage before the last: the gradient receive buffer ``grad_layer``, S (``_exec_recv_grads`` l.1178-1180);
      - the first stage: each used pipe buffer's input ids, b x s x 8 (int64; ``_exec_load_micro_batch`` l.898
        clones them to the device; the first stage sends no gradient, so ``_exec_send_grads`` l.1111 never
        frees them);
      - the last stage: each used pipe buffer's output, b x s x V x D (``pipe_outputs_kept``; V = vocab_size:
        the head's logits), kept through the step, since ``_exec_backward_pass`` returns for the last stage
        (l.796-799) before freeing ``pipe_buffers['outputs']`` (l.865-866); its autograd graph keeps the
        received input (``recvd``, l.1128-1129, a leaf that requires grad) and that input's gradient alive:
        2 x S more per buffer (``pipe_inputs_grads_kept``). In a backward the micro-batch being run back is one
        of those buffers, whose logits the activation estimate's saved tensors already hold
        (``advisor.model.activations``: the 16-bit logits), so the timeline counts the kept outputs of the
        other buffers only there (``timeline.role_timeline``); in a forward the buffer's old output is
        still kept while the new one is made (l.751 replaces it after the forward).

      Used pipe buffers: :func:`pipe_buffers_used`. Lifetime ``persistent`` (they are made in the first
      train_batch and kept; not at the ``initialize`` instant: ``timeline.PIPE_TRAIN_BATCH_ITEMS``). On the first
      stage the labels are not loaded; on the last stage ``batch[1].to(device)`` is a copy on a GPU only
      (b x s x 8 per buffer, not counted: on a CPU run it is the script's own tensor).

    The activations of the micro-batches in flight (1F1B: min(stages - stage, micro-batches),
    ``advisor.model.activations``) are not here: they are the activation estimate's."""
    out: list[Entry] = []
    z = ec.zero
    if z.stage == 1 and wrapper == "DeepSpeedZeroOptimizer" and ec.contiguous_gradients_effective:
        C = DTYPE_BYTES[ec.comm_dtype]
        out.append(Entry(0, "accelerator", "workspace", "ipg_bucket_pipeline", z.reduce_bucket_size * C,
                         "boundary_reduce",
                         f"reduce_bucket_size x C = {z.reduce_bucket_size:,} elements x {C} bytes (the second ipg buffer "
                         "reduce_gradients(pipeline_parallel=True) appends at the accumulation boundary, beside "
                         "setup_buckets'; both released by the epilogue)",
                         "runtime/zero/stage_1_and_2.py:DeepSpeedZeroOptimizer.reduce_gradients l.962-968"))
    # the estimate's sequence length: the one given, else the model's max_seq_len (views/estimate.py's default)
    s_len = (getattr(workload, "seq_len", None) if workload is not None else None) or (meta or {}).get("max_seq_len")
    h = (meta or {}).get("hidden_size")
    if not s_len or not h:
        return out
    from advisor.config.effective import micro_batch_for
    b = micro_batch_for(ec, dp, getattr(workload, "micro_batch", None))[0]
    D = DTYPE_BYTES[ec.model_dtype]
    S = b * s_len * h * D
    nb = pipe_buffers_used(pp, stage, ga)
    words = f"b x s x h x D = {b} x {s_len:,} x {h:,} x {D}"
    if stage > 0:
        out.append(Entry(0, "accelerator", "activations", "pipe_recv_buf", S, "persistent",
                         words + " (the activation receive buffer, kept)",
                         f"{PIPE_SRC}._exec_recv_activations l.1123-1124 (_allocate_or_extend_buffers)"))
    if stage < pp - 1:
        out.append(Entry(0, "accelerator", "activations", "pipe_grad_buf", S, "persistent",
                         words + " (the gradient receive buffer grad_layer, kept)",
                         f"{PIPE_SRC}._exec_recv_grads l.1178-1180"))
    if stage == 0:
        out.append(Entry(0, "accelerator", "activations", "pipe_inputs_kept", nb * b * s_len * 8, "persistent",
                         f"buffers x b x s x 8 = {nb} x {b} x {s_len:,} x 8 (each used pipe buffer's input ids, "
                         "int64, never freed on the first stage)",
                         f"{PIPE_SRC}._exec_load_micro_batch l.898"))
    V = (meta or {}).get("vocab_size")
    if stage == pp - 1 and V:
        out.append(Entry(0, "accelerator", "activations", "pipe_outputs_kept", nb * b * s_len * V * D, "persistent",
                         f"buffers x b x s x V x D = {nb} x {b} x {s_len:,} x {V:,} x {D} (each used pipe buffer's "
                         "output, the logits, kept by the last stage through the step)",
                         f"{PIPE_SRC}._exec_backward_pass l.796-799 (returns before l.865-866 frees the outputs)"))
    if stage == pp - 1 and stage > 0:
        out.append(Entry(0, "accelerator", "activations", "pipe_inputs_grads_kept", nb * 2 * S, "persistent",
                         f"buffers x 2 x S = {nb} x 2 x {S:,} (the received input, a leaf that requires grad, and its "
                         "gradient, which the kept outputs' autograd graph holds)",
                         f"{PIPE_SRC}._exec_recv_activations l.1128-1129; _exec_backward_pass l.796-799"))
    return out


#: Entries a rank's optimizer wrapper holds once whatever its param groups: under expert parallelism the routed
#: experts' param groups are accounted apart (:func:`_model_parallel_roles`) and must not add them a second time.
#: ``ipg_bucket``: DeepSpeedZeroOptimizer's ``ipg_buckets``, one per communication dtype (``stage_1_and_2.py``
#: l.616), which a moe param's gradient joins like any other (l.1421, l.1476-1477 ``bucket.has_moe_params``).
SHARED_ACROSS_PARAM_GROUPS = frozenset({"ipg_bucket"})

#: Entries a rank's optimizer wrapper holds once, sized by its largest parameter over every param group: ZeRO-1/2
#: CPU offload's ``temp_grad_buffer_for_cpu_offload`` / ``temp_grad_buffer_for_gpu_offload`` of
#: ``largest_param_numel`` elements, the largest ``param.numel()`` over all of ``bit16_groups`` (``stage_1_and_2.py``
#: l.626-635, l.653-661): under expert parallelism one pair of the larger of the dense and the expert groups' sizes,
#: not one per group (engine: ``tests/engine/test_moe_offload_engine.py``, 16,384 B each where the two groups' sum
#: was 24,576 B).
LARGEST_OVER_PARAM_GROUPS = frozenset({"offload_temp_grad_cpu", "offload_temp_grad_accel"})

#: The entries that together make one param group's largest moment of the ZeRO-1/2 CPU-offload reduce (the flush's
#: flat copy, or a slice's fp64 norm copy with what is live beside it: ``offload_grad_norm_fp64`` s_r x 8,
#: ``offload_reduce_flush`` max(0, F - ...), ``offload_norm_unmoved_grads``, ``offload_xl_grad_clone``; see
#: ``zero12_offload_flush_bytes``). The engine makes these moments one after another whatever the param group:
#: average_tensor flattens one (destination, process group) bucket at a time (``stage_1_and_2.py`` l.1706-1723,
#: allreduce_bucket's ``self.flatten(bucket)`` l.2367), and reduce_ipg_grads then runs copy_grads_in_partition one
#: parameter after another (l.2253-2274), whose set_norm_for_param_grad_in_gpu makes the fp64 copy as a temporary of
#: ``accumulated_grad.data.to(get_norm_dtype()).norm(2)`` (l.1886, from l.2171-2176), freed before the next
#: parameter's. Under expert parallelism a rank therefore holds the larger of its dense and its expert groups'
#: moments, not their sum (engine: ``tests/engine/test_moe_offload_engine.py``, ep 2 on 4 ranks: the reduce's
#: high-water mark 447,864 B on every rank, the two groups' copies summed 455,968 B; one 65,536 B copy live at it).
REDUCE_MOMENT_ITEMS = frozenset({"offload_grad_norm_fp64", "offload_reduce_flush", "offload_norm_unmoved_grads",
                                 "offload_xl_grad_clone"})

#: The same for the reduce inside the first micro-step of a ZeRO-2 CPU-offload iteration at GA > 1
#: (:func:`zero12_offload_microstep_terms`: ``offload_microstep_reduce`` a_r, the accelerator bytes of the moment
#: holding the most, and ``offload_microstep_accumulated`` h_r, the host buffers made by then). That reduce runs the
#: same average_tensor, one (destination, process group) bucket's flat copy at a time (``stage_1_and_2.py``
#: l.1706-1723, allreduce_and_copy_with_multiple_ranks l.1525 / allreduce_and_copy l.2420 return before the next
#: key's flatten, l.2367), then the copy loop (l.2253-2274), whose copy_grads_in_partition calls
#: async_accumulate_grad_in_cpu_via_gpu (l.2166-2167; its ``torch.zeros(param.numel())`` host buffer l.1822-1824)
#: and makes no fp64 norm copy (set_norm_for_param_grad_in_gpu only at the boundary, l.2171-2172). Under expert
#: parallelism a rank holds the larger of its dense and expert groups' (a_r, h_r), not their sum (engine:
#: ``tests/engine/test_moe_offload_engine.py`` at GA 2 and 3, ep 2 on 4 ranks: micro-step 1's backward peaks at
#: 447,848 B on every rank with the expert flush's 65,536 B flat copy alone at allreduce_bucket; the two groups'
#: a_r summed, 8,704 + 65,536 B, gave 455,968, +1.81%). Not modelled: with several flushes, the other group's host
#: buffers made by an earlier flush and its gradients held by autograd at the larger group's moment.
MICROSTEP_REDUCE_MOMENT_ITEMS = frozenset({"offload_microstep_reduce", "offload_microstep_accumulated"})


def _model_parallel_roles(ec: EffectiveConfig, inv: Inventory, cl: Cluster, wrapper: str, basic: str,
                          ga: int, workload: Any = None) -> list[RankLedger]:
    """Roles under tensor / pipeline / expert parallelism: for each pipeline stage, the tensors
    one tensor-parallel rank holds (:func:`advisor.model.parallel.shard`, from the model's
    structure), accounted by :func:`_roles` over the ZeRO group (DP x SP ranks: ZeRO never
    partitions over the tensor- or pipeline-parallel ranks; ``runtime/pipe/engine.py`` and
    ``stage_1_and_2.py`` take ``dp_process_group`` = the data-parallel group of the grid).
    With ``expert_parallel`` e > 1 the routed-expert tensors (num_experts / e per rank, whole on every
    tensor-parallel rank) form their own param groups
    (``moe/utils.py:split_params_into_different_moe_groups_for_optimizer``) partitioned over the
    expert-data-parallel group of :attr:`Cluster.expert_data_parallel_size` = W x t / e ranks, the
    tensor-parallel ranks among them: the stage's local rank l = z x t + m is its member l // e; their
    entries are added to the dense ones with the same item names.

    Every tensor-parallel rank of a stage holds the same shapes; without expert parallelism it shares
    its ZeRO rank's role, with it its role is its ZeRO rank's dense role and its expert-data-parallel
    rank's expert role. Stages whose entries coincide (equal layer counts in the middle) share a role
    too. Ranks are global (:meth:`Cluster.coords`)."""
    from advisor.model.parallel import layer_period, shard, split_experts
    tp, pp, ep = cl.tensor_parallel, cl.pipeline_parallel, cl.expert_parallel
    Wz = cl.zero_world_size
    We = cl.expert_data_parallel_size
    if ep > 1 and not We:
        raise ValueError(f"ep_size {ep} does not divide the {Wz * tp} ranks of a pipeline stage (DP x SP {Wz} x TP {tp})")
    roles: dict[tuple, RankLedger] = {}
    # The stages between the first and the last hold only layers; when the model's layers are the same
    # up to their index (layer_period), two such stages of as many layers hold the same tensors up to the
    # layer numbers in their names, which the ledger reads only for structure (module prefixes, the
    # layers.i pattern, weight/bias pairs): their roles are the same, so each such stage after the first
    # takes the first one's (issue 21: generate's PP8 at 1e5 layers ran six equal ZeRO-1 passes). Its entries
    # then merge into that stage's role below, as its own equal ones would.
    middle: dict[int, list[RankLedger]] = {}
    same_middles = ep == 1 and pp > 2 and layer_period(inv, rules=tp > 1) is not None
    for sh in shard(inv, tp, pp, ep):
        s = sh.stage
        if ep > 1:
            dense, experts = split_experts(sh.inventory)
        else:
            dense, experts = sh.inventory, None
        n_layers = sh.layers[1] - sh.layers[0]
        if same_middles and 0 < s < pp - 1 and n_layers in middle:
            d_roles = middle[n_layers]
        else:
            d_roles = _roles(ec, dense, Wz, wrapper, basic, ga)
            if same_middles and 0 < s < pp - 1:
                middle[n_layers] = d_roles
        e_roles: list[RankLedger] = []
        if experts is not None and experts.tensors:
            e_roles = _roles(ec, experts, We, wrapper, basic, ga)
        # the stage's local rank l = z tp + m has dense role d when its ZeRO rank l // tp is in d's ranks and
        # expert role e when its expert-data-parallel rank l // ep is in e's (Cluster.expert_data_parallel_size)
        combos: dict[tuple[int, int], RankSet] = {}
        for di, d in enumerate(d_roles):
            dl = d.ranks.scaled(tp)
            if not e_roles:
                combos[(di, -1)] = dl
            for ei, e in enumerate(e_roles):
                ls = dl & e.ranks.scaled(ep)
                if len(ls):
                    combos[(di, ei)] = ls
        for (di, ei), ls in combos.items():
            entries = list(d_roles[di].entries)
            if pp > 1:
                entries += pipeline_stage_entries(ec, inv.meta, workload, s, pp, ga, wrapper, cl.dp_world_size)
            if ei >= 0:
                # one ipg bucket per communication dtype, shared by every param group, the moe ones included
                # (stage_1_and_2.py l.616 ipg_buckets; l.1476-1477 a moe param's gradient joins the same bucket):
                # the expert groups' own accounting of it is the dense role's buffer again
                shared = {x.item for x in d_roles[di].entries if x.item in SHARED_ACROSS_PARAM_GROUPS}
                # the offload temp gradient buffers: one pair, of the largest parameter over both groups
                larger = {x.item: x for x in e_roles[ei].entries if x.item in LARGEST_OVER_PARAM_GROUPS}
                in_dense = {x.item for x in entries if x.item in larger}
                entries = [replace(x, bytes=larger[x.item].bytes,
                                   formula=f"routed experts' largest parameter (one buffer for every param group, "
                                           f"stage_1_and_2.py l.626-635): {larger[x.item].formula}")
                           if x.item in larger and larger[x.item].bytes > x.bytes else x for x in entries]
                shared |= in_dense
                # the offload reduces' moments (the boundary's, micro-step 1's at GA > 1): one group's at a time
                # (REDUCE_MOMENT_ITEMS, MICROSTEP_REDUCE_MOMENT_ITEMS), the larger group's kept
                for items in (REDUCE_MOMENT_ITEMS, MICROSTEP_REDUCE_MOMENT_ITEMS):
                    moment_d = sum(x.bytes for x in entries if x.item in items)
                    moment_e = sum(x.bytes for x in e_roles[ei].entries if x.item in items)
                    if moment_e > moment_d:
                        entries = [x for x in entries if x.item not in items]
                    else:
                        shared |= items
                entries += [replace(e, formula=f"routed experts ({len(experts.tensors)} tensors, 1/{ep} of the experts, "
                                    f"whole on each tensor-parallel rank) over the expert-data-parallel group of "
                                    f"{We} (DP x SP x TP / ep): {e.formula}",
                                    source=e.source + "; moe/utils.py:split_params_into_different_moe_groups_for_optimizer")
                            for e in e_roles[ei].entries if e.item not in shared]
            if pp > 1 or tp > 1:
                what = (f"1/{tp} tensor-parallel shard" if tp > 1 else "") + (
                    (" of " if tp > 1 else "") + f"a pipeline stage of {sh.layers[1] - sh.layers[0]} layers" if pp > 1 else "")
                entries = [replace(e, formula=e.formula + f" [{what}: {sh.inventory.numel:,} parameters]")
                           for e in entries]
            granks = ls.scaled(1, s * Wz * tp)  # global ranks s Wz tp + l
            key = tuple((e.tier, e.cls, e.item, e.bytes, e.life) for e in entries)
            if key in roles:
                roles[key].ranks = roles[key].ranks | granks
                if s not in roles[key].stages:
                    roles[key].stages.append(s)
            else:
                roles[key] = RankLedger(granks[0], entries, granks, [s] if pp > 1 else [])
    out = sorted(roles.values(), key=lambda rl: rl.ranks[0])
    for rl in out:
        rl.rank = rl.ranks[0]
        rl.entries = [replace(e, rank=rl.rank) for e in rl.entries]
    return out


def _zero_walks(inv: Inventory, cl: Cluster) -> list[tuple[Inventory, int]]:
    """The (tensor list, ZeRO partition group size) each rank role of the plan accounts: the model over the
    zero world size, or under tensor / pipeline / expert parallelism each stage's shard (its routed experts over
    the expert-data-parallel group, :attr:`Cluster.expert_data_parallel_size`), as :func:`_model_parallel_roles`
    takes them."""
    Wz = cl.zero_world_size
    if not cl.model_parallel:
        return [(inv, Wz)]
    from advisor.model.parallel import shard, split_experts
    out: list[tuple[Inventory, int]] = []
    for sh in shard(inv, cl.tensor_parallel, cl.pipeline_parallel, cl.expert_parallel):
        if cl.expert_parallel > 1:
            dense, experts = split_experts(sh.inventory)
            out += [(dense, Wz), (experts, max(1, cl.expert_data_parallel_size))]
        else:
            out.append((sh.inventory, Wz))
    return out


def compute_ledger(plan: Plan) -> Ledger:
    """Per-rank bytes by tier x class x item for ``plan`` (bytes; config sizes are elements).

    Follows the DeepSpeed 0.19.8 code path ``plan.config`` selects (:func:`select_optimizer`):
    stage 0 wrappers, ZeRO-1/2 (``DeepSpeedZeroOptimizer``), ``BF16_Optimizer``, ZeRO-3 with
    offload_optimizer / offload_param none, cpu or nvme. Each :class:`Entry` carries its formula
    and the DeepSpeed file:function it comes from. Raises ValueError when
    :func:`unsupported_reason` says DeepSpeed refuses the combination.
    """
    ec = ledger_config(plan)  # qgZ on one node: the reduce as without it
    inv = plan.inventory
    cl = plan.cluster
    why = unsupported_reason(ec, cl.dp_world_size)
    if why:
        raise ValueError(f"DeepSpeed 0.19.8 rejects this configuration: {why}")
    wrapper, basic = plan_optimizer(plan)
    from advisor.config.effective import derive_batch
    ga = derive_batch(ec, batch_world_size(ec, cl))[2] or 1
    if cl.model_parallel:
        ranks = _model_parallel_roles(ec, inv, cl, wrapper, basic, ga, plan.workload)
    else:
        ranks = _roles(ec, inv, cl.zero_world_size, wrapper, basic, ga, placement_of(plan))
    z3_copies = zero3_backward_copies_excluded(ec, _zero_walks(inv, cl)) if ec.zero.stage == 3 else None
    excluded = [
        *(["pipeline-parallel pipe buffers (the p2p receive buffers, the last stage's kept outputs: they need the "
           "sequence length and the hidden size)"]
          if cl.pipeline_parallel > 1 and not ((plan.workload.seq_len or (inv.meta or {}).get("max_seq_len"))
                                                and (inv.meta or {}).get("hidden_size")) else []),
        "activations (depend on the model's forward, not on the config)",
        *optimizer_kernel_excluded(ec, basic),
        # ZeRO-3: only what of its gradient reduce this plan leaves out (none: no line)
        *([z3_copies] if z3_copies else []),
        # only DeepSpeedZeroOptimizer reduce-scatters inside backward (stage_1_and_2.py average_tensor); stage 0's
        # wrappers and BF16_Optimizer all-reduce at the boundary (engine.py allreduce_bucket, their flat copy is the
        # ledger's allreduce_bucket_flat / bf16_epilogue terms)
        *(["transient copies inside backward (reduce-scatter staging; ZeRO-1/2's flattened and fp32 grads are on the "
           "timeline)"] if wrapper == "DeepSpeedZeroOptimizer" else []),
        # only where DeepSpeedZeroOptimizer may build a param group's flat copy in host memory (stage_1_and_2.py
        # l.449-460): the accelerator flatten is the timeline's initialize:flatten (timeline.zero12_init_transients;
        # init_transients_excluded names it where it is not modelled); BF16_Optimizer flattens on the accelerator
        # (bf16_optimizer.py l.166-171) and timeline.zero12_flat_fallback is 0 for it
        *(["ZeRO-1/2's flat copy of a param group built in host memory at initialize when the accelerator's free "
           "memory cannot hold it (stage_1_and_2.py __init__ l.449-460: the group's parameters copied to the CPU "
           "beside the flat buffer): counted on the fit's host row only when an accelerator capacity is given and "
           "without tensor / pipeline / expert parallelism"] if wrapper == "DeepSpeedZeroOptimizer" else []),
    ]
    z = ec.zero
    if z.stage == 3 and (z.zero_quantized_weights or z.zero_quantized_gradients):
        excluded.append("ZeRO++ qwZ/qgZ: the int8/int4 quantized all-gather and all-to-all buffers (transient, "
                        "inside each collective; runtime/comm/coalesced_collectives.py all_to_all_quant_reduce, "
                        "partition_parameters.py CUDAQuantizer) are not modelled here; the bytes they communicate "
                        "are in the movement ledger (advisor/ledger/movement.py qgz_rank_bytes, QWZ_BYTES, qwz_scale_groups)")
    ng1 = len(inv.memo(("trainable_groups",), lambda: tuple(sorted({t.group for t in inv.tensors if t.trainable}))))
    if ec.zero.stage == 1 and ec.grad_dtype == "fp32" and wrapper == "DeepSpeedZeroOptimizer" and not (
            inv.has_trainable() and (zero12_offload_fp32_accum(ec, wrapper, ga, ng1)
                                     or zero1_compact_grad_accum(ec, wrapper, ng1))):
        # modelled under zero12_offload_fp32_accum (ZeRO-1 CPU offload, any groups, overlap_comm on or off) and
        # zero1_compact_grad_accum (fp16 without offload, any communication dtype, buckets and groups)
        excluded.append("ZeRO-1 grad_accum_dtype fp32 param.grad_accum buffers (reference section 4.2)")
    if not optimizer_states(ec).known:
        excluded.append(f"optimizer {ec.optimizer.type!r}: state assumed Adam-like (two fp32 moments)")
    lower = ""
    if z.stage in (1, 2) and inv.has_trainable():
        groups = len(inv.memo(("trainable_groups",), lambda: tuple(sorted({t.group for t in inv.tensors if t.trainable}))))
        lower = zero12_transients_unmodeled(ec, wrapper, ga, groups)
        if lower:
            excluded.append(lower)
    return Ledger(plan=plan, ranks=ranks, wrapper=wrapper, basic_optimizer=basic, excluded=excluded,
                  peak_lower_bound=lower)


def ledger_of(plan: Plan) -> Ledger:
    """:func:`compute_ledger` of ``plan``, computed once per plan and shared by every view of
    the command (kept in ``plan.derived``). Raises ValueError like :func:`compute_ledger`."""
    led = plan.derived.get("ledger")
    if led is None:
        led = plan.derived["ledger"] = compute_ledger(plan)
    return led


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
