"""Estimate: the ledger summarised per rank role, with activations, peak per tier, fit
against capacities and findings.

This is a view over :func:`advisor.ledger.state.compute_ledger` (model states and buffers) and
:func:`advisor.model.activations.estimate_activations` (live activations); it holds no formulas
of its own beyond adding up what is live in the same phase of the step.

Ranks whose bytes are identical in every (tier, class, item) are grouped into one *role* so
that a 1024-rank job prints a few rows, not 1024.

The peak (what decides an OOM) comes from the step timeline of
:mod:`advisor.ledger.timeline`: every ledger entry (and the activations, the load-phase model
copy and the save-time gather) is placed on the instants of the step, and the peak of a tier is
the maximum over the instants of the bytes live together, naming the instant and its largest
contributors. ``phases`` reports the largest instant of each event (load, initialize, forward,
backward, reduce, first_step, steady_step, save).
"""

from __future__ import annotations

from advisor.config.versions import accounting_note, current_release, release_dict

from dataclasses import dataclass, field, replace as _replace
from typing import Any

from advisor import DEEPSPEED_VERSION, __version__
from advisor.model.activations import ActivationEstimate, ActivationInputs, estimate_activations
from advisor.config.effective import DTYPE_BYTES, EffectiveConfig, batch_world_size
from advisor.cluster.hardware import Capacity
from advisor.cluster.overhead import OverheadSettings, OverheadTerm, deepspeed_extras, uncertain_terms
from advisor.rules import emit
from advisor.findings import Finding, literal
from advisor.model.inventory import Inventory
from advisor.ledger.state import CLASSES, Ledger, RankLedger, ledger_of, plan_optimizer, unsupported_reason
from advisor.ledger.ranks import RankSet, rank_fields
from advisor.ledger.movement import movement_plan  # noqa: F401  (re-exported: estimate's callers name it here)
from advisor.plan import Cluster, Plan, Workload  # noqa: F401  (Workload re-exported for callers)
from advisor.ledger.timeline import (BEFORE_PARTITION, HF_NOT_ZERO3, INIT_TRANSIENTS, LoadAssumption, Timeline,
                                     checkpoint_load_dtype, hf_zero3, rank_only_entries, rank_only_ranks, resolve_load, role_timeline, zero12_flat_fallback,
                                     zero12_flatten_terms)

#: Report tiers: host merges pinned and pageable (both are split out under host_split).
#: ``estimate --format json`` schema (advisor/schemas/estimate-output.schema.json). 2: ranks are
#: ``rank_count`` + ``rank_ranges`` only (1 listed every rank of every role in ``ranks``).
ESTIMATE_SCHEMA_VERSION = 3  # 3: "deepspeed" (always 0.19.8) -> accounting_release; 2: rank_ranges

REPORT_TIERS = ("accelerator", "host", "nvme")
_TIER_OF = {"accelerator": "accelerator", "host_pinned": "host", "host_pageable": "host", "nvme": "nvme"}
PHASES = ("load", "initialize", "forward", "backward", "reduce", "first_step", "steady_step", "save")
#: Ledger tiers behind each report tier.
TIER_SET = {"accelerator": ("accelerator",), "host": ("host_pinned", "host_pageable"), "nvme": ("nvme",)}
#: One-off lifetimes (the load-phase copy, the save-time gather, first-step-only transients): left
#: out of the class table (``tiers``, what every step allocates), on the timeline and in the peak.
OUTSIDE_STEP = ("load", "load_state_dict", "save", "save_16bit", "save_16bit_end", "save_gather", "save_model",
                "save_optim", "first_step", "autograd", "reduce", "step_norm", "init_cast", "init_module",
                "init_flatten", "init_optimizer_states", "init_grad_hooks",
                "init_fp32_partitions", "first_forward", "first_backward")
#: What the fit's "steady" need leaves out: the load phase and deepspeed.initialize before the
#: optimizer partitions the model (timeline.BEFORE_PARTITION).
ONE_OFF = ("load",) + BEFORE_PARTITION + INIT_TRANSIENTS
#: Left out of the accelerator fit's need (fit_rows): the flatten instant, which DeepSpeed only reaches
#: when the accelerator has room for it.
FLATTEN_ONLY = ("initialize:flatten",)

#: Topology rules (advisor/rules/G00x) whose error means DeepSpeed refuses the launch shape (they
#: are among the rules that ``refuses``: :func:`advisor.rules.refusals`).
TOPOLOGY_CODES = ("G001", "G002", "G003", "G004")

#: The accelerator row's runtime overhead (CUDA context, NCCL buffers, the caching allocator's
#: reserve, DeepSpeed extras) comes from advisor.cluster.overhead, each term its own row with its
#: source; it replaced the flat 5% fragmentation margin of earlier versions.
DEFAULT_OVERHEAD = OverheadSettings()


def _partial_offload_split(plan: Plan) -> dict[str, Any]:
    """Under ZeRO-3 partial optimizer offload (``offload_optimizer`` ``device: cpu`` or ``nvme``, ``ratio`` < 1), how
    many of a rank's sub-groups keep their fp32 master, fp32 gradient and moments on the accelerator and
    how many are offloaded (``stage3.py`` l.1100-1108: i < int((1 - ratio) x n) stays on the accelerator;
    :func:`advisor.ledger.state.twin_flow_on_accelerator`), so "effective: cpu" is not read as every
    sub-group on the host (ratio 0: none is; rule O009). Empty without partial offload."""
    from advisor.ledger.state import placement_of, twin_flow_splits
    ec = plan.config
    if not twin_flow_splits(ec) or plan.inventory is None:
        return {}
    pl = placement_of(plan)
    acc = pl.opt_on_accelerator
    k = sum(1 for a in acc if a)
    if ec.offload_optimizer_effective != "nvme":
        return {"ratio": ec.zero.offload_optimizer.ratio, "sub_groups_on_accelerator": k, "sub_groups_on_host": len(acc) - k}
    # device nvme: a swapped sub-group stays an NVMe file whatever its index (stage3.py l.1117); those with
    # i < int((1 - ratio) x n) a GPU run steps with the backup AdamW, their moments in host memory
    # (advisor.ledger.state.twin_flow_backup_swapped)
    nv = sum(1 for sw in pl.opt_swapped if sw)
    return {"ratio": ec.zero.offload_optimizer.ratio, "sub_groups_on_accelerator": k, "sub_groups_on_host": len(acc) - k - nv,
            "sub_groups_on_nvme": nv, "sub_groups_on_nvme_backup_stepped": sum(1 for b in pl.opt_backup_swapped if b)}


@dataclass
class Role:
    """A set of ranks with identical ledgers (and the same activations), with its timeline
    (:func:`advisor.ledger.timeline.role_timeline`, for the role's first rank)."""

    ranks: RankSet
    ledger: RankLedger
    activations: ActivationEstimate | None = None
    timeline: Timeline | None = None
    load: LoadAssumption | None = None

    def tiers(self) -> dict[str, dict[str, int]]:
        """tier -> class -> bytes (every allocation of a training step, transients included; the
        one-off load-phase copy, save-time gather and first-step transients are on the timeline
        only), with "total"."""
        out: dict[str, dict[str, int]] = {t: {c: 0 for c in CLASSES} for t in REPORT_TIERS}
        for e in self.step_entries():
            out[_TIER_OF[e.tier]][e.cls] += e.bytes
        if self.activations is not None:
            out["accelerator"]["activations"] += self.activations.peak_accelerator
            out["host"]["activations"] += self.activations.saved_host
        for t in out:
            out[t]["total"] = sum(v for k, v in out[t].items() if k != "total")
        return out

    def step_entries(self, tier: str | None = None, cls: str | None = None) -> list:
        """The ledger entries :meth:`tiers` counts (every life of the training step, not
        :data:`OUTSIDE_STEP`), of report tier ``tier`` and class ``cls`` when given: with the activation
        estimate's :attr:`~advisor.model.activations.ActivationEstimate.peak_accelerator`, the accelerator
        activations row is these (the PipelineEngine's kept buffers, ``state.pipeline_stage_entries``)."""
        return [e for e in self.ledger.entries if e.life not in OUTSIDE_STEP
                and (tier is None or _TIER_OF[e.tier] == tier) and (cls is None or e.cls == cls)]

    def host_split(self) -> dict[str, int]:
        return {"pinned": self.ledger.total("host_pinned"), "pageable": self.ledger.total("host_pageable")}

    def phases(self) -> dict[str, dict[str, int]]:
        """tier -> event -> the largest live bytes over that event's instants."""
        tl = self.timeline
        out: dict[str, dict[str, int]] = {}
        for t in REPORT_TIERS:
            s = tl.series(TIER_SET[t]) if tl else []
            d = {p: 0 for p in PHASES}
            for x, v in zip(tl.instants if tl else [], s):
                d[x.phase] = max(d[x.phase], v)
            out[t] = d
        return out

    def peak(self, exclude_phases: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
        """tier -> {"bytes", "phase" (event), "instant" (key), "label" (words), "top" (the
        largest live entries there)} at the tier's peak over the timeline."""
        res = {}
        tl = self.timeline
        for t in REPORT_TIERS:
            if tl is None:
                res[t] = {"bytes": 0, "phase": "", "instant": "", "label": "", "top": []}
                continue
            b, i = tl.peak(TIER_SET[t], exclude_phases)
            x = tl.instants[i]
            res[t] = ({"bytes": b, "phase": x.phase, "instant": x.key, "label": x.label,
                       "top": tl.contributors(i, TIER_SET[t])} if b else
                      {"bytes": 0, "phase": "", "instant": "", "label": "", "top": []})
        return res

    def timeline_dict(self) -> list[dict[str, Any]]:
        """The timeline as JSON rows: instant key, phase, label and live bytes per report tier. A middle
        micro-step's instant (``Instant.middle``: one row standing for micro-steps 2 .. GA - 1,
        :func:`advisor.ledger.timeline.middle_microstep`) is listed only where it is a tier's peak (the text's
        table and the HTML chart read these rows: they do not grow with GA)."""
        tl = self.timeline
        if tl is None:
            return []
        ser = {t: tl.series(TIER_SET[t]) for t in REPORT_TIERS}
        peaks = {pk["instant"] for pk in self.peak().values() if pk["bytes"]}
        return [{"instant": x.key, "phase": x.phase, "label": x.label, **{t: ser[t][i] for t in REPORT_TIERS}}
                for i, x in enumerate(tl.instants) if not x.middle or x.key in peaks]


def _flag_lower_bound(peak: dict[str, dict[str, Any]], lower_bound: bool) -> dict[str, dict[str, Any]]:
    """``peak`` (:meth:`Role.peak`) with ``lower_bound`` on its accelerator entry: true when the
    ledger's ``peak_lower_bound`` says the accelerator's tracked bytes are a floor (rule M104)."""
    peak["accelerator"] = {**peak["accelerator"], "lower_bound": lower_bound}
    return peak


@dataclass
class FitRow:
    tier: str
    need: int
    capacity: int | None
    scope: str  # "per rank" or "per node"
    phase: str = ""
    #: The peak instant (timeline key) and its words.
    instant: str = ""
    label: str = ""
    #: The peak without the load phase (the training step and save), and its instant label.
    steady_need: int | None = None
    steady_label: str = ""
    #: Ranks summed for a per-node row.
    ranks: int = 1
    #: Accelerator row: the tracked peak (the timeline's, before overhead) and the runtime
    #: overhead terms (advisor.cluster.overhead) that ``need`` adds to it.
    tracked: int | None = None
    overhead: list[OverheadTerm] = field(default_factory=list)
    #: Host row: the node's largest sum over the load phase's instants (the load section's per-node figure).
    load_need: int | None = None
    #: The timeline key of the peak without the load phase (``steady_need``'s instant): a save instant
    #: (:func:`is_save_instant`) when the checkpoint save, not the training step, holds the most.
    steady_instant: str = ""
    #: Accelerator row: the ledger's ``peak_lower_bound`` (why the tracked peak is a floor, rule M104),
    #: "" when the peak is modelled. A lower-bound row is never "fits": at best "tight".
    lower_bound: str = ""
    #: What is live at the row's peak instant, by state class (bytes, over the row's scope: the worst rank on the
    #: accelerator, the node's -- or a shared tier's -- ranks on host and NVMe); they sum to the tracked peak
    #: (``tracked``, else ``need``). The HTML report's tier bars draw these (JSON ``fit[].classes``).
    classes: dict[str, int] = field(default_factory=dict)

    @property
    def fits(self) -> bool | None:
        """need <= capacity (a "tight" row fits); None without a capacity."""
        return None if self.capacity is None else self.need <= self.capacity

    @property
    def headroom(self) -> int | None:
        return None if self.capacity is None else self.capacity - self.need

    @property
    def uncertainty(self) -> int:
        """Bytes the overhead terms may exceed their defaults by (sum of high - default)."""
        return sum(t.high - t.bytes for t in self.overhead)

    @property
    def verdict(self) -> str:
        """"fits", "tight" (0 <= headroom < the overhead's uncertainty: the terms'
        :func:`advisor.cluster.overhead.verdict` rule; or any headroom when the peak is a lower bound,
        :attr:`lower_bound`, rule M104), "does not fit", or "unknown" (no capacity)."""
        if self.capacity is None:
            return "unknown"
        h = self.capacity - self.need
        return "does not fit" if h < 0 else "tight" if h < self.uncertainty or self.lower_bound else "fits"

    @property
    def overhead_tight(self) -> bool:
        """Tight by the runtime overhead's band alone (0 <= headroom < uncertainty: rule M102)."""
        return self.capacity is not None and 0 <= self.capacity - self.need < self.uncertainty

    @property
    def uncertain(self) -> list[str]:
        """Names of the overhead terms whose band reaches above their default, largest first."""
        return [t.name for t in uncertain_terms(self.overhead)]

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of one fit row (estimate's ``fit`` array)."""
        return {"tier": self.tier, "scope": self.scope, "need": self.need, "capacity": self.capacity,
                "headroom": self.headroom, "fits": self.fits, "verdict": self.verdict, "phase": self.phase,
                "instant": self.instant, "label": self.label, "steady_need": self.steady_need,
                "tracked": self.tracked, "overhead": [t.to_dict() for t in self.overhead],
                "peak": self.need if self.tracked is None else self.tracked,
                "parts": [{"label": t.name, "bytes": t.bytes} for t in self.overhead],
                "uncertainty": self.uncertainty, "uncertain_terms": self.uncertain,
                "lower_bound": bool(self.lower_bound), "classes": dict(self.classes)}


def _client_optimizer_words(ec: EffectiveConfig) -> str:
    """The estimate's optimizer line where the config has no optimizer section and the plan does not know the
    client's: under optimizer offload DeepSpeed accepts only DeepSpeedCPUAdam / DeepSpeedCPULion from the client
    (:attr:`EffectiveConfig.client_optimizer_must_be_ds_cpu`, rule O011), so the ledger's DeepSpeedCPUAdam is what
    the script must pass; else a client Adam is assumed."""
    if ec.client_optimizer_must_be_ds_cpu:
        from advisor.config.effective import DS_CPU_OPTIMIZERS
        return (f"none given (under offload_optimizer the client optimizer must be {' or '.join(DS_CPU_OPTIMIZERS)}, "
                "rule O011: DeepSpeedCPUAdam assumed)")
    return "none given (client optimizer; Adam assumed)"


@dataclass
class EstimateResult:
    source: str
    plan: Plan
    ledger: Ledger
    roles: list[Role]
    fit: list[FitRow]
    findings: list[Finding] = field(default_factory=list)
    workload: Workload = field(default_factory=Workload)
    activations_note: str = ""
    overhead: OverheadSettings = DEFAULT_OVERHEAD
    #: Extra JSON sections contributed by other views (checkpoint, movement, ...).
    sections: dict[str, Any] = field(default_factory=dict)
    #: How the model is materialised before deepspeed.initialize (the timeline's load phase).
    load: LoadAssumption | None = None
    #: Where the world size came from (``advisor.cluster.launch.job_shape``'s source: a flag, a launcher
    #: variable, --hardware, the workload sidecar's recorded world, "default 1"); None where not known.
    world_size_source: str | None = None

    def assumptions(self) -> dict[str, Any]:
        ec = self.plan.config
        z = ec.zero
        w = self.workload
        have_acts = any(r.activations is not None for r in self.roles)
        excluded = [x for x in self.ledger.excluded if not (have_acts and x.startswith("activations"))]
        if self.activations_note:
            excluded = [x for x in excluded if not x.startswith("activations")] + [self.activations_note]
        from advisor.config.effective import micro_batch_for
        from advisor.ledger.timeline import init_transients_excluded
        init_excl = init_transients_excluded(ec, self.ledger, self.load)
        if init_excl:
            excluded = excluded + [init_excl]
        return {
            "zero_stage": z.stage,
            "precision": {"model": ec.model_dtype, "grad_accum": ec.grad_dtype, "communication": ec.comm_dtype,
                          "master_weights": "fp32"},
            "optimizer": {"type": ec.optimizer.type or ec.optimizer.client_note or _client_optimizer_words(ec),
                          "basic": self.ledger.basic_optimizer, "wrapper": self.ledger.wrapper},
            "offload_optimizer": {"written": z.offload_optimizer.device, "effective": ec.offload_optimizer_effective,
                                  **_partial_offload_split(self.plan)},
            "offload_param": {"written": z.offload_param.device, "effective": ec.offload_param_effective},
            "sharding": _sharding_words(self.plan.cluster, z.stage, plan_optimizer(self.plan)[0]),
            "workload": {"seq_len": w.seq_len, "micro_batch": micro_batch_for(ec, batch_world_size(ec, self.plan.cluster),
                                                                         w.micro_batch)[0],
                         "checkpointing": w.checkpointing,
                         "attention": w.attention},
            "runtime_overhead": ("the accelerator fit row adds per-rank runtime overhead terms (fit[].overhead: "
                                 "CUDA context, NCCL buffers, allocator reserve, DeepSpeed extras), each with its "
                                 "source and band; \"tight\" when the headroom is inside their band"),
            "load": self.load.to_dict() if self.load else None,
            "deepspeed_release": self._release_assumption(),
            "excluded": excluded,
            "peak_lower_bound": self.peak_lower_bound or None,
            "notes": [{"pointer": n.pointer, "message": n.message} for n in ec.notes]
                     + micro_batch_what_if(ec, batch_world_size(ec, self.plan.cluster), w.micro_batch),
        }

    @property
    def peak_lower_bound(self) -> str:
        """Why the accelerator peak is a floor (rule M104), "" when it is not: the accelerator fit row's
        :attr:`FitRow.lower_bound` (the ledger's unmodelled ZeRO-1/2 transients, activations not
        estimated: :func:`plan_fit`), else the ledger's ``peak_lower_bound``."""
        row = next((r for r in self.fit if r.tier == "accelerator"), None)
        return (row.lower_bound if row is not None else "") or self.ledger.peak_lower_bound

    def _release_assumption(self) -> dict[str, Any]:
        """Which release the figures are for, what is verified for it (``accounting``), and the
        release's own defaults applied to the ledger (:func:`advisor.config.versions.apply_release_defaults`)."""
        from advisor.config.versions import LEDGER_DEFAULTS, release_note
        paths = {p for *_, p in LEDGER_DEFAULTS}
        return {"release": release_note(), "accounting": accounting_note(current_release()),
                "defaults_applied": [n.message for n in self.plan.config.notes
                                     if n.kind == "derived" and n.pointer in paths]}

    def to_dict(self, rank_sets: bool = False) -> dict[str, Any]:
        """The estimate, JSON-ready (schema_version 3). Each role (and each movement group) names
        its ranks as ``rank_count`` and inclusive ``rank_ranges`` ``[[first, last], ...]``, never a
        list of every rank, so the output is O(roles) whatever the world size (a 2^20-rank job
        listed every rank in schema 1: 38 MB, 8 s). ``rank_sets``: each role (and movement
        group) also carries ``ranks``, the :class:`advisor.ledger.ranks.RankSet` itself, for the
        text and HTML renderers (not JSON-serialisable)."""
        inv = self.plan.inventory
        cl = self.plan.cluster
        lower_bound = bool(self.peak_lower_bound)  # every role's accelerator bytes are a floor (M104)
        d: dict[str, Any] = {
            "schema_version": ESTIMATE_SCHEMA_VERSION,
            "tool": f"ds-advisor {__version__}",
            "accounting_release": DEEPSPEED_VERSION,  # the checked release is deepspeed_release.checked
            "deepspeed_release": release_dict(current_release()),
            "accounting": accounting_note(current_release()),
            "config": self.source,
            "model": {"name": inv.name, "source": inv.source, "parameters": inv.numel,
                      "trainable_parameters": inv.trainable_numel, "tensors": len(inv.tensors)},
            "cluster": {"world_size": cl.world_size, "dp_world_size": cl.dp_world_size,
                        "gpus_per_node": cl.gpus_per_node, "tensor_parallel": cl.tensor_parallel,
                        "pipeline_parallel": cl.pipeline_parallel, "sequence_parallel": cl.sequence_parallel,
                        "expert_parallel": cl.expert_parallel,
                        "megatron_sequence_parallel": cl.megatron_sequence_parallel,
                        "zero_world_size": cl.zero_world_size,
                        **({"tensor_parallel_source": cl.tensor_parallel_source} if cl.tensor_parallel_source else {}),
                        **({"expert_parallel_source": cl.expert_parallel_source} if cl.expert_parallel_source else {}),
                        **({"world_size_source": self.world_size_source} if self.world_size_source else {})},
            "assumptions": self.assumptions(),
            "ranks": [
                {
                    **({"ranks": r.ranks} if rank_sets else {}),
                    **rank_fields(r.ranks),
                    **({"stages": stages_of(cl, r.ranks)} if cl.pipeline_parallel > 1 else {}),
                    "tiers": r.tiers(),
                    "host_split": r.host_split(),
                    "phases": r.phases(),
                    "peak": _flag_lower_bound(r.peak(), lower_bound),
                    "timeline": [{**x, "accelerator_lower_bound": True} for x in r.timeline_dict()] if lower_bound
                    else r.timeline_dict(),
                    "activations": None if r.activations is None else {
                        "per_layer": r.activations.per_layer,
                        "layers_on_rank": r.activations.layers_on_rank,
                        "saved_accelerator": r.activations.saved_accelerator,
                        "saved_host": r.activations.saved_host,
                        "recompute_layer": r.activations.recompute_layer,
                        "recompute_layer_peak": r.activations.recompute_layer_peak,
                        "recompute_freed": r.activations.recompute_freed,
                        "loss_head": r.activations.loss_head,
                        "loss_spike": r.activations.loss_spike,
                        "loss_backward_spike": r.activations.loss_backward_spike,
                        "recompute_flops_fraction": r.activations.recompute_flops_fraction,
                        "recompute": r.activations.recompute,
                        "checkpointed_layers": r.activations.checkpointed_layers,
                        "peak_without_recompute": r.activations.peak_without_recompute or None,
                        # micro-batches whose layers' activations are held at once (1F1B under pipeline parallelism)
                        "in_flight": r.activations.in_flight,
                        # of each in-flight micro-batch: what the PipelineEngine keeps (a stage's output, input ids)
                        "pipe_kept": r.activations.pipe_kept,
                        # of the saved bytes, what every layer shares (RoPE's cos and sin; the eager mask), bytes
                        "layers_shared": r.activations.layers_shared,
                        # backward's moments (start, the head's where own_backward, layer L-1's and under k of L the
                        # first checkpointed layer's, end), bytes: the accelerator row's activations are the largest
                        # of these and forward's saved + loss_spike (peak_accelerator)
                        "backward_moments": r.activations.backward_moments(),
                        "own_backward": r.activations.own_backward,
                        "peak_accelerator": r.activations.peak_accelerator,
                        # the ledger's own activation entries the accelerator row adds to these figures
                        "row_items": [{"item": e.item, "bytes": e.bytes}
                                      for e in r.step_entries("accelerator", "activations")],
                        **({"sac_policy": r.activations.sac_policy} if r.activations.sac_policy else {}),
                    },
                    "items": [
                        {"tier": e.tier, "class": e.cls, "item": e.item, "bytes": e.bytes, "life": e.life,
                         "formula": e.formula, "source": e.source, "alias_of": e.alias_of}
                        for e in r.ledger.entries
                    ],
                }
                for r in self.roles
            ],
            "fit": [f.to_dict() for f in self.fit],
            "findings": [f.to_dict() for f in self.findings],
        }
        if self.load is not None and self.roles:
            d["load"] = self.load_section()
        d.update(self.sections)
        mv = d.get("movement")
        if mv and mv.get("ranks"):
            d["movement"] = {**mv, "ranks": [{**({"ranks": g["ranks"]} if rank_sets else {}), **rank_fields(g["ranks"]),
                                              **{k: v for k, v in g.items() if k != "ranks"}} for g in mv["ranks"]]}
        return d


    def load_section(self) -> dict[str, Any]:
        """The load phase: the assumption, host bytes per rank (the worst rank, over the load's
        instants) and per node: the node's ranks summed at the load instant where they peak
        together, as :func:`fit_rows` sums them (ranks per node x per rank when every rank loads
        alike; rank 0's HF state dict under ZeRO-3 is counted once)."""
        per_rank = max((r.phases()["host"]["load"] for r in self.roles), default=0)
        host = next((f for f in self.fit if f.tier == "host"), None)
        cl = self.plan.cluster
        per_node = cl.gpus_per_node or min(cl.world_size, 8)
        node = host.load_need if host is not None and host.load_need is not None else per_rank * per_node
        from advisor.ledger.timeline import (PIPELINE_STAGE_LOAD, PIPELINE_WHOLE_LOAD, TENSOR_PARALLEL_LOAD,
                                             builds_shard, whole_load_words)
        staged = cl.pipeline_parallel > 1 and not (self.load and self.load.zero_init)
        tp_ep = (cl.tensor_parallel > 1 or cl.expert_parallel > 1) and not (self.load and self.load.zero_init)
        sharded = tp_ep and self.load is not None and builds_shard(cl, self.load, self.plan.config)
        whole = staged and self.load is not None and self.load.pipeline_build == "whole"
        return {**(self.load.to_dict() if self.load else {}), "host_per_rank": per_rank,
                "ranks_per_node": per_node, "host_per_node": node,
                # under pipeline parallelism each rank builds its stage only, or the whole model with
                # --pipeline-build whole (ledger.timeline.load_entries)
                "per_stage": (PIPELINE_WHOLE_LOAD if whole else PIPELINE_STAGE_LOAD) if staged else None,
                # under tensor / expert parallelism each rank builds its shard, or with --hf the whole model
                # (ledger.timeline.load_entries)
                "per_shard": (TENSOR_PARALLEL_LOAD if sharded else whole_load_words(self.plan.config, self.load)
                              if tp_ep else None),
                "capacity": host.capacity if host else None,
                "fits": None if host is None or host.capacity is None else node <= host.capacity}


def _sharding_words(cl: Cluster, stage: int, wrapper: str = "") -> str:
    """The assumptions' one-line description of how model states are split; ``wrapper``: the plan's
    (:func:`advisor.ledger.state.plan_optimizer`). At stage 0 BF16_Optimizer (bf16 under pipeline
    parallelism) still partitions the fp32 master and moments over the data-parallel group
    (``bf16_optimizer.py`` l.90, ``engine.py`` ``_configure_bf16_optimizer`` l.2626), so that is said."""
    parts = []
    if cl.tensor_parallel > 1:
        src = f" from {cl.tensor_parallel_source}" if cl.tensor_parallel_source else ""
        parts.append(f"tensor parallelism {cl.tensor_parallel}{src} (Megatron column/row-parallel linears and "
                     "vocab-parallel embedding/head split, norms and row-parallel biases replicated)")
    if cl.pipeline_parallel > 1:
        parts.append(f"{cl.pipeline_parallel} pipeline stages (layers by partition_uniform; embeddings on the "
                     "first, the head on the last)")
    if cl.expert_parallel > 1:
        esrc = f" from {cl.expert_parallel_source}" if cl.expert_parallel_source else ""
        parts.append(f"expert parallelism {cl.expert_parallel}{esrc} (experts over the EP group, whole on each "
                     f"tensor-parallel rank; their ZeRO over {cl.expert_data_parallel_size} expert-data-parallel "
                     "ranks)")
    zero = (f"ZeRO-{stage} over a data-parallel group of {cl.zero_world_size} rank{'' if cl.zero_world_size == 1 else 's'}"
            + (f" (DP {cl.dp_world_size} x Ulysses SP {cl.sequence_parallel})" if cl.sequence_parallel > 1 else "")
            if stage else
            f"no ZeRO stage, but BF16_Optimizer (bf16 under pipeline parallelism) partitions the fp32 master and "
            f"optimizer moments over a data-parallel group of {cl.zero_world_size} "
            f"rank{'' if cl.zero_world_size == 1 else 's'}; the 16-bit weights and gradients are whole on every rank"
            if wrapper == "BF16_Optimizer" else "no ZeRO (every data-parallel rank holds its full model states)")
    return "; ".join(parts + [zero]) if parts else (zero if stage else "none (every rank holds full model states)")


def load_assumption(plan: Plan, zero_init: bool | None = None, dtype: str | None = None,
                    low_cpu_mem_usage: bool | None = None, config_input: Any = None,
                    pipeline_build: str | None = None) -> LoadAssumption:
    """The load phase's :class:`LoadAssumption` for ``plan`` and the load options (the CLI's
    ``--zero-init/--no-zero-init``, ``--load-dtype``, ``--low-cpu-mem-usage/--no-low-cpu-mem-usage``,
    ``--pipeline-build``; None: not given). The one place estimate, report and check turn the options into an
    assumption (:func:`advisor.ledger.timeline.resolve_load`), so each option means the same in
    all of them. ``config_input``: the :class:`advisor.config.inputs.ConfigInput` of an accelerate
    file (its ``launch`` set): the HF path, zero.Init as accelerate resolves it
    (``deepspeed_config.zero3_init_flag``, else ``is_zero3()``: accelerate DeepSpeedPlugin) unless
    ``zero_init`` is given. Raises ValueError for an unknown ``dtype``."""
    ckpt = checkpoint_load_dtype(plan.inventory.hf_config)
    launch = getattr(config_input, "launch", None)
    if launch is None:
        return resolve_load(plan.config, zero_init, dtype, low_cpu_mem_usage, hf=plan.hf is not None,
                            hf_is_zero3=hf_zero3(plan), checkpoint_dtype=ckpt, pipeline_build=pipeline_build,
                            pipeline_parallel=plan.cluster.pipeline_parallel)
    z3i = getattr(config_input.resolution, "zero3_init", None)  # accelerate's zero3_init_flag, as resolved
    load = resolve_load(plan.config, zero_init if zero_init is not None else z3i, dtype, low_cpu_mem_usage,
                        hf=True, checkpoint_dtype=ckpt, pipeline_build=pipeline_build,
                        pipeline_parallel=plan.cluster.pipeline_parallel)
    if zero_init is None and z3i is not None:  # the file's choice, not a flag: say so
        from dataclasses import replace
        flag = launch.plugin.zero3_init_flag
        load = replace(load, options=replace(load.options, accelerate=True), zero_init_source=(
            f"accelerate: deepspeed_config.zero3_init_flag {str(flag).lower()}" if flag is not None else
            "accelerate: zero3_init_flag not set, so zero.Init follows ZeRO-3 (DeepSpeedPlugin: is_zero3())")
            + (f" (no zero.Init below ZeRO-3: stage {plan.config.zero.stage})" if flag and not z3i else ""))
    return load


def _minus(a: RankSet, b: RankSet) -> RankSet:
    """The ranks of ``a`` not in ``b`` (``b`` a few ranks), O(ranges of a + |b|)."""
    out = a
    for r in b:
        if r in out:
            out = out & (RankSet.span(0, r) | RankSet.span(r + 1, out[-1] + 1))
    return out


def group_roles(ledger: Ledger, activations: ActivationEstimate | None = None,
                load: LoadAssumption | None = None, timelines: bool = True) -> list[Role]:
    """Group ranks whose (tier, class, item, life) -> bytes maps are identical, rank 0 (and under
    pipeline parallelism each layer-file writer) apart when it carries entries no other rank has
    (:func:`advisor.ledger.timeline.rank_only_entries`: the ZeRO-3 save-time 16-bit gather, the
    layer files' staging; :func:`advisor.ledger.timeline.rank_only_ranks`), each role with its timeline (true for every rank of it;
    ``timelines`` False: none, for a caller that splits the roles and computes their own).

    The ledger already comes as one :class:`RankLedger` per role (ranks with identical entries,
    formulas included); roles that differ only in formula text are merged here. O(roles x ranges)."""
    roles: dict[tuple, Role] = {}
    for rl in ledger.ranks:
        key = tuple(sorted((e.tier, e.cls, e.item, e.life, e.bytes) for e in rl.entries))
        if key in roles:
            roles[key].ranks = roles[key].ranks | rl.ranks
        else:
            roles[key] = Role(ranks=rl.ranks, ledger=rl, activations=activations)
    out = list(roles.values())
    load = load or resolve_load(ledger.plan.config)
    # a rank with entries of its own (rank 0's save-time gather: timeline.rank_only_entries) is its
    # own role, so no role's timeline shows them on ranks that do not hold them
    # (rank 0's; under pipeline parallelism also each stage's layer-file writer: timeline.rank_only_ranks)
    # (ranks of one role whose own entries are equal, e.g. a stage's tensor-parallel layer writers, stay together)
    ec = ledger.plan.config
    own = {r: tuple(sorted((e.tier, e.cls, e.item, e.life, e.bytes) for e in rank_only_entries(ec, ledger, load, r)))
           for r in rank_only_ranks(ec, ledger, load)}
    for role in list(out):
        mine = [r for r in own if r in role.ranks]
        if not mine:
            continue
        by: dict[tuple, list[int]] = {}
        for r in mine:
            by.setdefault(own[r], []).append(r)
        rest = role.ranks
        parts = []
        for rs in by.values():
            part = RankSet.of(rs)
            rest = _minus(rest, part)
            parts.append(part)
        role.ranks = parts[0]
        for part in parts[1:] + ([rest] if len(rest) else []):
            out.append(Role(ranks=part, ledger=role.ledger, activations=activations))
    for role in out:
        role.load = load
        if timelines:
            role.timeline = role_timeline(ledger, role.ledger, load, activations, rank=role.ranks[0])
    out.sort(key=lambda role: role.ranks[0] if role.ranks else 0)
    return out


#: Lint rules that report the refusals :func:`advisor.ledger.state.unsupported_reason` knows
#: (fp16 + bf16: P001; bf16 with fp32 accumulation at stage 0: P003; NVMe without nvme_path:
#: O003): when one of them is among estimate's findings, it is the finding, and M090 is not added.
REFUSAL_RULES = ("P001", "P003", "O003")


#: The timeline item and the words of ``initialize:module`` when ZeRO-1/2 flattens a param group in
#: host memory there (:func:`advisor.ledger.timeline.zero12_flat_fallback`, which the capacity decides).
FLAT_FALLBACK_ITEM = "zero12_flat_fallback"
FLAT_FALLBACK_LABEL = ("initialize: ZeRO-1/2 flattens a param group in host memory (no room for its flat copy "
                       "on the accelerator beside the whole model)")


def shared_tier_sums(roles: list[Role], tiers: tuple[str, ...], timeline_of: Any, world_size: int) -> list[int]:
    """Bytes live on ``tiers`` over all ranks of the job at each timeline instant: the sum over
    roles of the role's series x its rank count (a role's timeline is true for each of its ranks,
    :func:`group_roles`), scaled up to ``world_size`` when the roles list fewer ranks (tensor /
    pipeline ranks beyond those listed, as ``fit_rows``' per-node scale). For a shared NVMe tier
    (``StorageTier.shared``), whose one filesystem every node's ranks swap to."""
    counted = sum(len(r.ranks) for r in roles)
    scale = max(1, world_size // max(1, counted))
    out: list[int] = []
    for role in roles:
        n = len(role.ranks) * scale
        series = timeline_of(role).series(tiers)
        if not out:
            out = [0] * len(series)
        for j, v in enumerate(series):
            out[j] += v * n
    return out


def fit_rows(ledger: Ledger, roles: list[Role], capacity: Capacity,
             overhead: OverheadSettings = DEFAULT_OVERHEAD) -> list[FitRow]:
    """Accelerator: the worst rank's timeline peak plus the runtime overhead terms
    (:meth:`advisor.cluster.overhead.OverheadSettings.terms`: CUDA context, NCCL buffers for the
    rank's process groups, the allocator's reserve as a fraction of that peak, DeepSpeed extras)
    against per-rank capacity; the row's ``verdict`` is fits / tight / does not fit. Raises
    :class:`advisor.cluster.overhead.OverheadError` for an unreadable overhead variable. Host and NVMe: the maximum over the instants of the bytes live on one
    node's ranks together (gpus_per_node, default min(world size, 8)) against the per-node
    capacity; NVMe on a shared tier (``capacity.nvme_shared``) the bytes live on all ranks
    together (:func:`shared_tier_sums`) against the filesystem's capacity. Each row names its
    peak instant, and carries the peak without the load phase."""
    cl = ledger.plan.cluster
    per_node = cl.gpus_per_node or min(cl.world_size, 8)
    rows: list[FitRow] = []
    if not roles:
        return [FitRow("accelerator", 0, capacity.accelerator, "per rank"),
                FitRow("host", 0, capacity.host, f"per node ({per_node} rank{'s' if per_node != 1 else ''})")]
    ec = ledger.plan.config
    trainable = ledger.plan.inventory.trainable_numel  # whole model: an upper bound under TP/PP (capped at 5e8)
    shape = dict(world_size=cl.world_size, tensor_parallel=cl.tensor_parallel, pipeline_parallel=cl.pipeline_parallel,
                 deepspeed=deepspeed_extras(ec.zero.stage, trainable, DTYPE_BYTES[ec.grad_dtype]),
                 zero_stage=ec.zero.stage)
    # the node's ranks: the per_node lowest ranks, each with its role (roles' rank lists are sorted)
    first = sorted((r, i) for i, role in enumerate(roles) for r in role.ranks[:per_node])[:per_node]
    node = [roles[i] for _, i in first]
    scale = max(1, per_node // max(1, len(node)))  # tp/pp ranks on a node beyond the dp ranks listed
    # a role's timeline is true for each of its ranks (group_roles puts a rank with entries of its
    # own, rank 0's save-time gather, in a role of its own)
    def tl_of(role: Role) -> Timeline:
        if role.timeline is None:
            role.timeline = role_timeline(ledger, role.ledger, role.load or resolve_load(ledger.plan.config),
                                          role.activations, rank=role.ranks[0])
        return role.timeline

    tls = [tl_of(roles[i]) for _, i in first]
    inst = tls[0].instants
    # ZeRO-1/2 flattens a param group in host memory when the accelerator, holding the whole model
    # at initialize:module, has no room for its flat copy (timeline.zero12_flat_fallback)
    keys = [x.key for x in inst]
    fallback, j_mod = 0, -1
    if "initialize:module" in keys and capacity.accelerator is not None:
        j_mod = keys.index("initialize:module")
        at_mod = max(tl.series(TIER_SET["accelerator"])[j_mod] for tl in tls)
        # DeepSpeed calls empty_cache() just before it asks for the free memory: the allocator's
        # reserve is not counted there, the CUDA context and the NCCL buffers are
        free = capacity.accelerator - at_mod - sum(t.bytes for t in overhead.terms(at_mod, **shape)
                                                   if t.key != "allocator")
        fallback = zero12_flat_fallback(ledger, free)
        if fallback:
            # on every role's timeline (the same on each rank), so the timeline table, the HTML
            # chart and the roles' peaks show the instant that decides the host row
            for role in roles:
                tl_of(role).put(j_mod, FLAT_FALLBACK_ITEM, "host_pageable", "parameters", fallback, FLAT_FALLBACK_LABEL)
            if "initialize:flatten" in keys:
                # the group flattened in host memory is not beside its parameters on the accelerator
                # per role: under pipeline parallelism each rank flattens its stage's groups
                for role in roles:
                    _, (acc_b, _m) = zero12_flatten_terms(ledger, free, role.ranks[0])
                    tl_of(role).put(keys.index("initialize:flatten"), "init_flatten_params", "accelerator",
                                    "parameters", acc_b)
    # after the fallback's terms are on the timelines: the flatten instant's accelerator bytes depend on it
    # initialize:flatten is not a need: DeepSpeed flattens a group on the accelerator only when its free memory
    # holds the flat buffer (stage_1_and_2.py l.449-453), else in host memory (the fallback above)
    worst = max(roles, key=lambda r: r.peak(FLATTEN_ONLY)["accelerator"]["bytes"])
    pk = worst.peak(FLATTEN_ONLY)["accelerator"]
    st = worst.peak(ONE_OFF)["accelerator"]
    terms = overhead.terms(pk["bytes"], **shape)
    st_terms = overhead.terms(st["bytes"], **shape)
    wtl = tl_of(worst)
    i_pk = next((k for k, x in enumerate(wtl.instants) if x.key == pk["instant"]), None) if pk["bytes"] else None
    acc_classes = wtl.by_class(i_pk, TIER_SET["accelerator"]) if i_pk is not None else {}
    rows.append(FitRow("accelerator", pk["bytes"] + sum(t.bytes for t in terms), capacity.accelerator, "per rank",
                       pk["phase"], pk["instant"], pk["label"], st["bytes"] + sum(t.bytes for t in st_terms),
                       st["label"], tracked=pk["bytes"], overhead=terms, steady_instant=st["instant"],
                       lower_bound=ledger.peak_lower_bound, classes=acc_classes))
    for tier, ts in (("host", TIER_SET["host"]), ("nvme", TIER_SET["nvme"])):
        sums = [0] * len(inst)
        for tl in tls:
            for j, v in enumerate(tl.series(ts)):
                sums[j] += v * scale
        scope, ranks = f"per node ({per_node} rank{'s' if per_node != 1 else ''})", per_node
        # (timeline, ranks it stands for) behind each instant's sum: the node's ranks, or every rank on a shared tier
        weights = [(tl, scale) for tl in tls]
        if tier == "nvme" and capacity.nvme_shared and any(sums):
            counted = sum(len(r.ranks) for r in roles)
            weights = [(tl_of(r), len(r.ranks) * max(1, cl.world_size // max(1, counted))) for r in roles]
            # one shared filesystem for the cluster: every node's ranks swap to it, so its space
            # holds the sum over all ranks (each role's series x its ranks) at each instant
            sums, ranks = shared_tier_sums(roles, ts, tl_of, cl.world_size), cl.world_size
            nodes = -(-cl.world_size // per_node)
            scope = f"all {nodes} node{'s' if nodes != 1 else ''} together ({cl.world_size} ranks, shared tier)"
        # on a tie a middle micro-step's instant yields (Timeline.peak)
        j = max(range(len(inst)), key=lambda k: (sums[k], not inst[k].middle, -k))
        js = [k for k in range(len(inst)) if inst[k].phase != "load" and inst[k].key not in ONE_OFF]
        jst = max(js, key=lambda k: (sums[k], not inst[k].middle, -k))
        if tier == "nvme" and not (sums[j] or capacity.nvme):
            continue
        label = inst[j].label
        jl = [k for k in range(len(inst)) if inst[k].phase == "load"]
        classes: dict[str, int] = {}
        for tl, n in weights if sums[j] else ():
            for c, b in tl.by_class(j, ts).items():
                classes[c] = classes.get(c, 0) + b * n
        rows.append(FitRow(tier, sums[j], capacity.host if tier == "host" else capacity.nvme, scope,
                           inst[j].phase if tier == "host" else "files", inst[j].key, label, sums[jst],
                           inst[jst].label, ranks,
                           load_need=max((sums[k] for k in jl), default=0) if tier == "host" else None,
                           steady_instant=inst[jst].key, classes=classes))
    return rows


def _load_ways_out(ld: LoadAssumption, pipeline: bool = False) -> list[str]:
    """M101's load-side remedies the estimate did not already assume: under pipeline parallelism
    (``pipeline``) with ``--pipeline-build whole``, the layers as LayerSpecs (each rank builds only its
    stage, :data:`advisor.ledger.timeline.PIPELINE_STAGE_LOAD`); 16-bit loading when the
    model loads in fp32, ``low_cpu_mem_usage=True`` only when it was assumed off
    (``--no-low-cpu-mem-usage``: two copies; it is on by default, transformers >= 5 always)."""
    out = []
    if pipeline and ld.pipeline_build == "whole":
        out.append("PipelineModule layers given as LayerSpecs, not built modules (each rank then builds only its "
                   "pipeline stage and keeps no other stage's layers; --pipeline-build stage)")
    if ld.dtype == "fp32":
        out.append("load in 16-bit (torch_dtype=torch.bfloat16 halves it; --load-dtype bf16)")
    if not ld.low_cpu_mem_usage:
        out.append("low_cpu_mem_usage=True (one copy of the weights instead of two)")
    return out


def is_save_instant(key: str) -> bool:
    """Whether timeline instant ``key`` is one of the checkpoint save's (phase ``save``:
    ``engine.save_checkpoint``'s ``save``, ``save:model``, ``save:optim``; ``save_16bit_model``'s
    ``save:16bit`` / ``save:16bit:end``, :mod:`advisor.ledger.timeline`), not the training step's."""
    return key == "save" or key.startswith("save:")


def _after_load(r: FitRow, label: bool = True) -> str:
    """M101 / M103's words (a ``{steady_need}`` template) for ``r``'s largest need once the model is
    loaded and partitioned, with its instant's label (``label``): the training step's, or, when a
    save instant holds more, the checkpoint save's (``engine.save_checkpoint``'s files, or
    ``save_16bit_model`` gathering the 16-bit weights on rank 0 under
    ``stage3_gather_16bit_weights_on_model_save``), which is no part of the step."""
    said = literal(f" ({r.steady_label})") if label and r.steady_label else ""
    if is_save_instant(r.steady_instant):
        return "the checkpoint save then needs {steady_need} at its peak" + said + ", more than the training step"
    return "the training step itself needs {steady_need}" + said


def fit_findings(rows: list[FitRow], load: LoadAssumption | None = None, hf: bool = False,
                 pipeline: bool = False, tensor_parallel: int = 1) -> list[Finding]:
    """One error per tier that does not fit: M101 when it is the load phase that does not fit
    (the whole model on every rank before deepspeed.initialize, and its cast to the 16-bit dtype in
    host memory), M103 when it is deepspeed.initialize with the whole model on the accelerator
    before ZeRO partitions it (no zero.Init; ``hf``: say that the HF Trainer itself uses zero.Init
    at ZeRO-3), M100 when the training step does (too); one warning (M102) per tier whose verdict
    is "tight", naming the uncertain overhead terms. ``pipeline``: the plan has pipeline stages (M101 then
    names LayerSpecs under ``--pipeline-build whole``). ``tensor_parallel`` > 1: a Megatron(-DeepSpeed) plan
    whose ranks build their shard (:data:`advisor.ledger.timeline.TENSOR_PARALLEL_LOAD`): M101 then names
    Megatron's own per-shard build and its zero.Init at ZeRO-3, not the HF Trainer's."""
    out = []
    for r in rows:
        # a lower-bound peak (rule M104: FitRow.lower_bound, the accelerator row) makes its need a floor and
        # its excess over the capacity a floor too: ">= X", "over by at least Y"
        ge = ">= " if r.lower_bound else ""
        if r.overhead_tight:
            out.append(emit(
                code="M102", severity="warning", pointer="/zero_optimization",
                message=(literal(f"{r.tier} {r.scope}") + ": tight: " + ge + "{need} needed of {capacity} leaves "
                         "{headroom}, less than the {uncertainty} the runtime overhead may exceed "
                         f"its defaults by ({literal(', '.join(r.uncertain))})"),
                sizes={"need": r.need, "capacity": r.capacity or 0, "headroom": r.headroom or 0,
                       "uncertainty": r.uncertainty},
                fix=("measure the overhead on the node and give it (--runtime-overhead TERM=SIZE), or make room: "
                     "smaller micro-batch, activation checkpointing, offload, more ranks, "
                     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
                data={"tier": r.tier, "need": r.need, "capacity": r.capacity, "headroom": r.headroom,
                      "uncertainty": r.uncertainty, "terms": r.uncertain, "lower_bound": bool(ge)}))
        if r.fits is not False:
            continue
        cap = r.capacity or 0
        load_over = r.phase == "load" or r.instant == "initialize:cast"
        init_over = r.instant == "initialize:module"
        steady = r.steady_need if r.steady_need is not None else r.need
        if init_over and r.tier != "accelerator":
            over = r.need - cap
            out.append(emit(
                code="M103", severity="error", pointer="/zero_optimization/stage",
                message=(literal(f"{r.tier} {r.scope}") + ": deepspeed.initialize needs {need}: with the whole model "
                         "on the accelerator there is no room for a param group's flat copy, so ZeRO-1/2 builds it in "
                         "host memory (the group's parameters copied there and the flat buffer, on every rank) but "
                         "only {capacity} is available: over by {over}; " + _after_load(r, label=False)),
                sizes={"need": r.need, "capacity": cap, "over": over, "steady_need": steady},
                fix=("ZeRO-3 under deepspeed.zero.Init (each rank only ever holds its partition: no whole model, no "
                     "flat copy), more host memory, fewer ranks per node (each builds its own copy), or an "
                     "accelerator with room for the whole model and its flat copy at once"),
                data={"tier": r.tier, "need": r.need, "capacity": r.capacity, "over": over, "steady_need": steady}))
        elif init_over:
            over = r.need - cap
            string_stage = load is not None and load.zero_init_source == HF_NOT_ZERO3
            hf_note = ("Write zero_optimization.stage as the number 3: the HF Trainer's HfDeepSpeedConfig.is_zero3() "
                       "compares it with 3, so a string stage builds the model without zero.Init. " if string_stage else
                       "The HF Trainer builds the model under deepspeed.zero.Init by itself at ZeRO-3 "
                       "(TrainingArguments(deepspeed=...) makes an HfDeepSpeedConfig, and from_pretrained then runs "
                       "under zero.Init: transformers modeling_utils.get_init_context), so this happens only to a "
                       "model built before TrainingArguments exists. " if hf else "")
            out.append(emit(
                code="M103", severity="error", pointer="/zero_optimization/stage",
                message=(literal(f"{r.tier} {r.scope}") + ": deepspeed.initialize needs {need} (the whole model, "
                         "moved to the accelerator by module.to(device) before ZeRO partitions it, since it was "
                         "not built under deepspeed.zero.Init) but only {capacity} is available: over by {over}; "
                         + _after_load(r)),
                sizes={"need": r.need, "capacity": cap, "over": over, "steady_need": steady},
                fix=(hf_note + "Build the model under deepspeed.zero.Init so that each rank only ever holds its "
                     "partition: `with deepspeed.zero.Init(config_dict_or_path=ds_config): model = ...` at ZeRO-3 "
                     "(estimate assumes it there unless --no-zero-init). More ranks do not help: each "
                     "accelerator holds the whole model at this instant"),
                data={"tier": r.tier, "need": r.need, "capacity": r.capacity, "over": over, "steady_need": steady}))
        if load_over and r.instant == "load:state_dict":
            ld = load or LoadAssumption()
            out.append(emit(
                code="M101", severity="error", pointer="/zero_optimization/stage",
                message=(literal(f"{r.tier} {r.scope}") + ": loading the checkpoint needs {need}: under ZeRO-3 "
                         "the HF Trainer's from_pretrained reads the whole state dict on rank 0 "
                         + literal(f"({ld.state_dict_dtype}, every checkpoint file at once)")
                         + " beside what the node's ranks hold in host memory then (their zero.Init partitions "
                         "with offload_param), but only {capacity} is available: over by {over}; "
                         + _after_load(r)),
                sizes={"need": r.need, "capacity": cap, "over": r.need - cap, "steady_need": steady},
                fix=("more host memory on rank 0's node, "
                     + ("the checkpoint saved in 16-bit (half its fp32 bytes), " if ld.state_dict_dtype == "fp32"
                        else "")
                     + "fewer ranks per node when offload_param keeps their partitions in host memory, or load "
                     "the weights after deepspeed.initialize (e.g. engine.load_checkpoint) instead of "
                     "from_pretrained"),
                data={"tier": r.tier, "need": r.need, "capacity": r.capacity, "over": r.need - cap,
                      "instant": r.instant, "ranks": r.ranks, "steady_need": steady}))
        elif load_over:
            ld = load or LoadAssumption()
            per_rank = r.need // max(1, r.ranks)
            cast = ("; deepspeed.initialize then casts it to the 16-bit dtype one tensor at a time"
                    if r.instant == "initialize:cast" else "")
            # what each rank builds: under pipeline parallelism its stage's layers (LayerSpecs, the default) or
            # the whole model with the other stages' layers kept (--pipeline-build whole); zero.Init is no
            # option there (ZeRO-3 is refused under a PipelineModule, runtime/pipe/engine.py l.75-77)
            if pipeline and ld.pipeline_build != "whole":
                builds = (f"{r.ranks} ranks, {{per_rank}} per rank on average: every rank builds its pipeline stage's "
                          f"layers from LayerSpecs in {literal(ld.dtype)} in host memory before "
                          f"deepspeed.initialize{cast}")
            elif pipeline:
                builds = (f"{r.ranks} ranks x {{per_rank}}: every rank builds the whole model in {literal(ld.dtype)} "
                          f"in host memory and PipelineModule keeps the other stages' layers it was given{cast}")
            elif tensor_parallel > 1:
                builds = (f"{r.ranks} ranks x {{per_rank}}: every rank builds its tensor-parallel shard (1/"
                          f"{tensor_parallel} of each split matrix) in {literal(ld.dtype)} in host memory before "
                          f"deepspeed.initialize, as Megatron's --use-cpu-initialization does, without "
                          f"deepspeed.zero.Init{cast}")
            else:
                builds = (f"{r.ranks} ranks x {{per_rank}}: every rank builds the whole model in "
                          f"{literal(ld.dtype)} in host memory before deepspeed.initialize, without "
                          f"deepspeed.zero.Init{cast}")
            out.append(emit(
                code="M101", severity="error", pointer="/zero_optimization/stage",
                # which instant the figure is: the load (the load row's figure) or initialize's cast (the timeline's
                # instant initialize:cast: the load's model plus the 16-bit copy of the tensor being cast), so the
                # figure and the load row's visibly agree
                message=(literal(f"{r.tier} {r.scope}") + f": loading the model needs {{need}} "
                         + (f"at deepspeed.initialize's {literal(ld.dtype)} -> 16-bit cast (instant initialize:cast: "
                            f"the load's figure plus the 16-bit copy of the tensor being cast) "
                            if r.instant == "initialize:cast" else "at the load (instant load) ")
                         + f"({builds}) but only {{capacity}} is available: over by {{over}}; " + _after_load(r)),
                sizes={"need": r.need, "per_rank": per_rank, "capacity": cap, "over": r.need - cap,
                       "steady_need": steady},
                # under pipeline parallelism ZeRO-3 (and so zero.Init) is refused (runtime/pipe/engine.py l.75-77)
                fix=(("Ways out: " if pipeline else
                      # the plan is Megatron(-DeepSpeed)'s (TENSOR_PARALLEL_LOAD), not the HF Trainer's
                      "let Megatron build each rank's shard on the accelerator (its default: no "
                      "--use-cpu-initialization; ColumnParallelLinear / RowParallelLinear / VocabParallelEmbedding "
                      "allocate their shard on the current device in params_dtype, so the host holds none of it), "
                      "or at ZeRO-3 (--zero-stage 3) Megatron-DeepSpeed's model_provider builds the model under "
                      "deepspeed.zero.Init (pretrain_gpt.py: zero.Init(..., enabled=args.zero_stage == 3)), each "
                      "rank then materialising only its partition of its shard. Other ways out: "
                      if tensor_parallel > 1 else
                      "build the model under deepspeed.zero.Init so each rank only materialises its partition: "
                      "ZeRO-3 (zero_optimization.stage 3) and `with deepspeed.zero.Init(config_dict_or_path="
                      "ds_config): model = ...`; the HF Trainer does this by itself at ZeRO-3 when "
                      "TrainingArguments(deepspeed=...) exists before from_pretrained. Other ways out: ")
                     + "".join(w + ", " for w in _load_ways_out(ld, pipeline))
                     + "fewer ranks per node, or more host memory"),
                data={"tier": r.tier, "need": r.need, "capacity": r.capacity, "over": r.need - cap,
                      "per_rank": per_rank, "ranks": r.ranks, "steady_need": steady}))
        if not (load_over or init_over) or steady > cap:
            need = steady if load_over or init_over else r.need
            label = r.steady_label if load_over or init_over else r.label
            saving = is_save_instant(r.steady_instant if load_over or init_over else r.instant)
            over = need - cap
            out.append(emit(
                code="M100", severity="error", pointer="/zero_optimization",
                message=(literal(f"{r.tier} {r.scope}") + (": the checkpoint save needs " + ge + "{need} at its peak"
                                                           if saving else ": the step needs " + ge + "{need} at its peak")
                         + literal(f"{' (' + label + ')' if label else ''}") + " but only {capacity} is available: "
                         + ("over by at least {over}" if ge else "over by {over}")),
                sizes={"need": need, "capacity": cap, "over": over},
                fix=("shard more (higher ZeRO stage or more ranks), offload to host/NVMe, activation "
                     "checkpointing or a smaller micro-batch, or shrink buffers"
                     if r.tier == "accelerator" else
                     "smaller offload buffers (buffer_size, buffer_count, sub_group_size), pin_memory false, "
                     "or more host memory" if r.tier == "host" else
                     "more space on the shared filesystem, or a node-local drive for nvme_path (each node's "
                     "ranks then swap to their own)" if "shared tier" in r.scope else "more NVMe space per node"),
                data={"tier": r.tier, "need": need, "capacity": r.capacity, "over": over, "lower_bound": bool(ge)}))
    return out


def assumed_seq_len(given: int | None, plan: Plan, acts: ActivationEstimate | None) -> int | None:
    """The sequence length (tokens) the activations were estimated at when none was given (``given``,
    the plan's ``Workload.seq_len`` as given, not :func:`resolved_plan`'s: None without ``--seq-len`` or a
    workload sidecar): the model's ``max_seq_len`` (max_position_embeddings), as :func:`activations_for`
    takes it. None when one was given, or the activations are not estimated."""
    if given is not None or acts is None:
        return None
    return (plan.inventory.meta or {}).get("max_seq_len") or None


def with_assumed_seq_len(f: Finding, seq: int) -> Finding:
    """M100 / M104 finding ``f`` saying its figures hold at the assumed sequence length ``seq``
    (:func:`assumed_seq_len`) and giving ``--seq-len`` first in its fix, before the re-estimated changes
    ("no single change fits" is said of that length too): llama-3.1-8b's 131,072-token default made
    activations of ~2 TiB and an M100 "over by 2,157.77 GiB" that never named the length (newcomer 22)."""
    words = f" (at {seq:,} tokens per sequence: the model's maximum context, assumed because no --seq-len was given)"
    first = (f"give --seq-len for the sequence you train on: this estimate assumed {seq:,} tokens, the model's "
             f"maximum context, and activations grow with it. Then: ")
    from advisor.findings import render_sized
    from advisor.units import DEFAULT_UNITS
    data = dict(f.data, assumed_seq_len=seq)
    if f.template is not None:  # a sized template: both texts again in the default units, as emit renders them
        msg, fix = f.template[0] + literal(words), literal(first) + f.template[1]
        return _replace(f, message=render_sized(msg, f.sizes, DEFAULT_UNITS), fix=render_sized(fix, f.sizes, DEFAULT_UNITS),
                        template=(msg, fix), data=data)
    return _replace(f, message=f.message + words, fix=first + f.fix, data=data)


def computed_fix(f: Finding, candidates: list, acts: ActivationEstimate | None = None,
                 before: dict[str, str] | None = None, seq_assumed: int | None = None) -> Finding:
    """M100 finding ``f`` with its fix computed (:func:`advisor.views.fixes.fit_candidates`): the
    single changes that make ``f``'s tier fit without overflowing another tier that fit before
    (``before``: tier -> the plan's verdict; a tier already short has its own finding), judged on
    the whole re-estimated plan: a change that fits ``f``'s tier by overflowing another is named
    as such, not offered; fastest first (with a hardware spec;
    else the fewest bytes moved), each with its need, step time and bytes moved per step; the
    first config change's ``--set`` strings in ``data["set"]``, every candidate in
    ``data["candidates"]``. Says when activations are most of an accelerator peak. Two changes
    together (``combined`` candidates, tried only when no single change fits every tier) follow,
    cheapest first, in ``data["pairs"]``. ``seq_assumed``: the sequence length the plan assumed
    (:func:`assumed_seq_len`), named where the changes are said to be re-estimated (at that length)."""
    tier, need = f.data.get("tier"), f.data.get("need") or 0
    re_est = "re-estimated" + (f" at the assumed {seq_assumed:,} tokens per sequence" if seq_assumed else "")
    pairs = [c for c in candidates if c.combined and tier in c.verdicts]
    mine = [c for c in candidates if not c.combined and tier in c.verdicts]
    # "fits on its own" is the whole plan's verdict: a change that fits this tier by overflowing
    # another (the optimizer offloaded onto a host that cannot hold it) is not a way out
    before = before or {}

    def breaks(c) -> bool:  # another tier that was not short before is short after the change
        return any(t != tier and v == "does not fit" and before.get(t, "unknown") != "does not fit"
                   for t, v in c.verdicts.items())

    fits = [c for c in mine if c.verdicts[tier] == "fits" and not breaks(c)]
    elsewhere = [c for c in mine if c.verdicts[tier] in ("fits", "tight") and breaks(c)]
    why = ""
    sizes = dict(f.sizes)  # the fix is a sized template too: its bytes print in the report's --units

    def sized(n: int | float) -> str:
        key = f"fix_{len(sizes)}"
        sizes[key] = n
        return "{" + key + "}"

    from advisor.config.validation import float_of  # need: an int past the float range from a 400-digit bucket
    if tier == "accelerator" and acts is not None and need and acts.saved_accelerator >= 0.3 * float_of(need):
        flight = f", {acts.in_flight} micro-batches in flight" if acts.in_flight > 1 else ""
        why = (f"activations ({sized(acts.saved_accelerator)} saved for backward{flight}) are "
               f"{100 * acts.saved_accelerator / need:.0f}% of the peak. ")

    def still_short(c) -> list[str]:  # tiers short before and after: this change does not fix them
        return [t for t, v in c.verdicts.items() if t != tier and v == "does not fit"]

    def cost(c) -> str:
        ge = ">= " if c.lower_bound and tier == "accelerator" else ""  # a floor (rule M104)
        parts = [f"{literal(tier)} {ge}{sized(c.need[tier])}"]
        if c.step_time_s is not None:
            parts.append(f"step {c.step_time_s:.2f} s")
        parts.append(f"{sized(c.moved_bytes)} moved per step")
        parts += [f"{literal(t)} still short" for t in still_short(c)]
        return f"{literal(c.how)} ({literal(c.change)}: {', '.join(parts)})"

    if fits:
        order = "fastest modelled step first" if any(c.step_time_s is not None for c in fits) else \
            "fewest bytes moved first; give --hardware for step times"
        tight = [c for c in mine if c.verdicts[tier] == "tight" and c not in elsewhere]
        whole = "fits on its own" if not any(still_short(c) for c in fits) else \
            f"fits the {literal(tier)} on its own (another tier's shortfall has its own finding)"
        fix = (why + f"{re_est}, each of these {whole} ({order}): "
               + "; ".join(cost(c) for c in fits[:4]) + ("" if len(fits) <= 4 else f"; {len(fits) - 4} more in data")
               + ("" if not tight else ". Only inside the runtime overhead's uncertainty (M102)"
                  + (" or with a lower-bound peak (M104)" if any(c.lower_bound for c in tight) else "") + ": "
                  + "; ".join(cost(c) for c in tight[:2])))
    else:
        tight = [c for c in mine if c.verdicts[tier] == "tight" and c not in elsewhere]
        others = [c.change for c in mine if c not in tight]
        tried = literal(", ".join(others))
        # an empty search says so, never "no other single change applies": another finding (M002's
        # sub_group_size) may propose one this search does not know
        lbw = " or with a lower-bound peak (M104)" if any(c.lower_bound for c in tight) else ""
        fix = why + (f"{re_est}, these fit only inside the runtime overhead's uncertainty (M102; measure it "
                     f"with --runtime-overhead){lbw}: " + "; ".join(cost(c) for c in tight[:4])
                     + (f". No other single change fits (tried: {tried})" if others else
                        ". The fix search has no other single change for this tier")
                     if tight else
                     f"no single change fits when {re_est} (tried: {tried})" if others else
                     "the fix search has no single change for this tier's shortfall")
        fix += ("; `ds-advisor generate` searches combinations of stage, offload, micro-batch and checkpointing"
                + ("" if tier != "host" else ", or add host memory"))
    if elsewhere:
        fix += ". Fit the " + literal(tier) + " but overflow another tier: " + "; ".join(
            literal(f"{c.change} (" + ", ".join(t for t, v in c.verdicts.items() if v == "does not fit") + " then short)")
            for c in elsewhere[:3])
    if pairs:
        fix += (f". Every tier fits with two changes together ({re_est}, fastest modelled step first): "
                + "; ".join(cost(c) for c in pairs[:2]))
    data = dict(f.data, candidates=[c.to_dict() for c in mine])
    if pairs:
        data["pairs"] = [c.to_dict() for c in pairs]
    first_set = next((c.set for c in fits if c.set), None)
    if first_set:
        data["set"] = first_set
    return emit(code="M100", severity=f.severity, pointer=f.pointer,
                message=f.template[0] if f.template else literal(f.message), fix=fix, data=data, sizes=sizes)


def activations_gap(meta: dict[str, Any], activations: str = "formula") -> str:
    """Why no plan of this model has its activations estimated, whatever its config and workload
    ("" when they can be): an architecture without the fields the formulas read (``--params``, an
    inventory without meta), or a family the formulas do not cover
    (:func:`advisor.model.activations.formula_gap`) with ``activations`` "formula" (``--activations
    trace`` measures it). The note :func:`activations_for` returns for them, and what generate keys its
    lower-bound plans on (:func:`advisor.views.generate.search`, rule M104)."""
    needed = ("hidden_size", "num_layers", "num_heads", "intermediate_size", "vocab_size")
    if meta.get("attention_free"):  # a block without attention has no heads (activations.layer_terms)
        needed = tuple(k for k in needed if k != "num_heads")
    if not all(k in meta for k in needed):
        return "activations: not estimated (give --model with an architecture: a preset or config.json)"
    from advisor.model.activations import formula_gap

    gap = formula_gap(meta) if activations == "formula" else None
    return f"activations: not estimated ({gap})" if gap else ""


def micro_batch_what_if(ec: EffectiveConfig, dp_world_size: int, given: int | None) -> list[dict[str, str]]:
    """The assumptions' note (one {pointer, message}, or none) when ``given`` (--micro-batch, sequences per
    rank) is not the micro-batch DeepSpeed runs for ``ec``'s batch keys at ``dp_world_size`` data-parallel
    ranks (:func:`advisor.config.effective.implied_micro_batch`): the estimate counts the flag's (a what-if the
    user asked for), DeepSpeed would run the config's. None to say when the config's keys are refused (B001
    says it) or agree."""
    from advisor.config.effective import derive_batch, implied_micro_batch
    runs = implied_micro_batch(ec, dp_world_size)
    if not given or runs is None or runs == given:
        return []
    if ec.train_micro_batch_size_per_gpu:
        pointer, how = "/train_micro_batch_size_per_gpu", f"its train_micro_batch_size_per_gpu {runs}"
    else:
        tb, _, ga, _ = derive_batch(ec, dp_world_size)
        pointer = "/train_batch_size"
        how = (f"micro-batch {runs}, derived from train_batch_size {tb} / (gradient_accumulation_steps {ga} x "
               f"{dp_world_size} data-parallel ranks) (runtime/config.py _set_batch_related_parameters)")
    return [{"pointer": pointer,
             "message": f"--micro-batch {given} is a what-if: DeepSpeed runs this config at {how}; the estimate "
                        f"counts micro-batch {given} (drop --micro-batch to estimate the job the config runs)"}]


def sequence_and_micro_batch(ec: EffectiveConfig, inventory: Inventory, cluster: Cluster,
                             workload: Workload) -> tuple[int | None, int, str]:
    """(sequence length in tokens, micro-batch in sequences per rank, source of the length) that
    :func:`activations_for` estimates ``workload`` at; ``workload`` is not changed. The length is
    ``Workload.seq_len`` (source "given": --seq-len or the workload sidecar), else the model's
    ``max_seq_len`` (max_position_embeddings; source "model maximum"), else None (source "none"). The
    micro-batch is :func:`advisor.config.effective.micro_batch_for`'s: ``Workload.micro_batch``
    (--micro-batch), else the one DeepSpeed runs for the config's batch keys over ``cluster``'s
    data-parallel ranks (written or derived), else 1."""
    from advisor.config.effective import micro_batch_for
    meta = inventory.meta or {}
    seq = workload.seq_len or meta.get("max_seq_len")
    mb = micro_batch_for(ec, batch_world_size(ec, cluster), workload.micro_batch)[0]
    source = "given" if workload.seq_len else "model maximum" if seq else "none"
    return (int(seq) if seq else None), int(mb), source


def resolved_plan(plan: Plan) -> Plan:
    """``plan`` with its workload's sequence length and micro-batch as :func:`activations_for` estimated
    them (:func:`sequence_and_micro_batch`), when the activations are estimated (the model has an
    architecture the formulas cover, and a length is known); ``plan`` itself otherwise. A new Plan and a new
    Workload (``plan`` and its Workload are not changed), sharing ``plan.derived`` (the ledger and movements
    computed once per command). What estimate's movement, step time, checkpoint and M100-fix sections and its
    reported workload read once the fit is made: the activations' length and micro-batch, so those sections
    count the same sequence. "Was --seq-len given?" stays ``plan.workload.seq_len is not None`` on ``plan``."""
    wl = plan.workload
    if activations_gap(plan.inventory.meta or {}, wl.activations):
        return plan
    seq, mb, _ = sequence_and_micro_batch(plan.config, plan.inventory, plan.cluster, wl)
    if not seq or (wl.seq_len, wl.micro_batch) == (seq, mb):
        return plan
    return _replace(plan, workload=_replace(wl, seq_len=seq, micro_batch=mb))


def activations_for(ec: EffectiveConfig, inventory: Inventory, cluster: Cluster,
                    workload: Workload, stage: int | None = None,
                    hf: bool = False) -> tuple[ActivationEstimate | None, str]:
    """Activations for the plan, or (None, why not) when the model has no architecture
    (``--params``) or no sequence length is known. The config's ``activation_checkpointing``
    section counts unless ``hf`` (the HF Trainer checkpoints with torch.utils.checkpoint, which
    never reads it; see advisor.model.activations)."""
    meta = inventory.meta or {}
    missing = activations_gap(meta, workload.activations)
    if missing:
        return None, missing
    from advisor.model.flops import active_params, outside_layer_params

    seq, mb, _ = sequence_and_micro_batch(ec, inventory, cluster, workload)
    if not seq:
        return None, "activations: not estimated (give --seq-len)"
    ac = ec.activation_checkpointing
    x = ActivationInputs(
        seq_len=int(seq), micro_batch=int(mb), dtype_bytes=DTYPE_BYTES[ec.model_dtype],
        checkpointing=workload.checkpointing, attention=workload.attention,  # type: ignore[arg-type]
        tensor_parallel=cluster.tensor_parallel, sequence_parallel=cluster.megatron_sequence_parallel,
        pipeline_parallel=cluster.pipeline_parallel, ulysses=cluster.sequence_parallel,
        stage=stage, micro_batches=_micro_batches(ec, cluster),
        partition_activations=bool(ac.get("partition_activations")), cpu_checkpointing=bool(ac.get("cpu_checkpointing")),
        contiguous_memory_optimization=bool(ac.get("contiguous_memory_optimization")),
        number_checkpoints=_int_or_none(ac.get("number_checkpoints")), deepspeed_checkpointing=not hf,
        moe_capacity_factor=workload.moe_capacity_factor,
        params_active=active_params(inventory), params_outside_layers=outside_layer_params(inventory))
    notes = []
    if workload.checkpointing != "none" and ac and hf:
        notes.append("activation_checkpointing section not applied: HF gradient checkpointing (torch.utils.checkpoint) "
                     "ignores it; it acts only through deepspeed.checkpointing")
    if workload.activations == "trace":
        from advisor.engine.traced import traced_estimate  # torch + transformers: only when asked

        est, tnote = traced_estimate(inventory, x, meta)
        return est, "; ".join([tnote] + notes)
    est = estimate_activations(meta, x)
    notes += est.notes
    return est, "; ".join(notes)


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _micro_batches(ec: EffectiveConfig, cluster: Cluster) -> int | None:
    """Gradient accumulation steps (the pipeline's micro-batches per step), None when unknown."""
    from advisor.config.effective import derive_batch
    return derive_batch(ec, batch_world_size(ec, cluster))[2]


def stage_of(cluster: Cluster, rank: int) -> int:
    """Pipeline stage of global ``rank`` (0 without pipeline parallelism)."""
    return cluster.coords(rank)[0] if cluster.model_parallel else 0


def ranks_by_stage(cluster: Cluster, ranks: RankSet) -> list[tuple[int, RankSet]]:
    """(pipeline stage, its ranks among ``ranks``) for every stage holding some, ascending; a stage's
    global ranks are one block of tp x zero_world_size (:meth:`Cluster.coords`). O(stages x ranges)."""
    if not cluster.model_parallel or cluster.pipeline_parallel <= 1:
        return [(0, ranks)] if len(ranks) else []
    block = cluster.tensor_parallel * cluster.zero_world_size
    lo, hi = ranks[0] // block, ranks[-1] // block
    out = []
    for s in range(lo, hi + 1):
        rs = ranks & RankSet.span(s * block, (s + 1) * block)
        if len(rs):
            out.append((s, rs))
    return out


def stages_of(cluster: Cluster, ranks: RankSet) -> list[int]:
    """The pipeline stages ``ranks`` cover, ascending."""
    return [s for s, _ in ranks_by_stage(cluster, ranks)]


def split_by_stage(roles: list[Role], cluster: Cluster, acts: dict[int, ActivationEstimate | None]) -> list[Role]:
    """Roles whose ranks span pipeline stages with different activations, split per stage (the
    ledger merges stages with equal model states; 1F1B keeps a different number of micro-batches
    in flight on each)."""
    out: list[Role] = []
    for r in roles:
        groups: dict[Any, Role] = {}
        for st, rs in ranks_by_stage(cluster, r.ranks):
            a = acts.get(st)
            key = None if a is None else repr(a)  # every field: the timeline and the report read several
            if key in groups:
                groups[key].ranks = groups[key].ranks | rs
            else:
                groups[key] = Role(ranks=rs, ledger=r.ledger, activations=a)
        out.extend(groups.values())
    out.sort(key=lambda role: role.ranks[0] if role.ranks else 0)
    return out


def peak_role_activations(pf: "PlanFit") -> ActivationEstimate | None:
    """The activations of the role whose timeline holds the accelerator row's peak (:func:`fit_rows`'
    worst role), for M100's words: under pipeline parallelism each stage has its own
    (:func:`split_by_stage`), and ``pf.activations`` is the stage-less worst case (the first stage's
    in-flight micro-batches with the last stage's loss head), which no rank holds."""
    row = next((r for r in pf.rows if r.tier == "accelerator"), None)
    if row is None or not pf.roles:
        return pf.activations
    for role in pf.roles:
        if role.timeline is not None and role.peak(FLATTEN_ONLY)["accelerator"]["bytes"] == row.tracked:
            return role.activations
    return pf.activations


@dataclass
class PlanFit:
    """The fit of one plan (:func:`plan_fit`): the ledger, activations, roles with their
    timelines, the fit rows (with the runtime overhead terms) and the fit findings."""

    ledger: Ledger
    activations: ActivationEstimate | None
    activations_note: str
    load: LoadAssumption
    roles: list[Role]
    rows: list[FitRow]
    findings: list[Finding]
    #: the plan fitted, with the sequence length and micro-batch its activations were estimated at
    #: (:func:`resolved_plan`): what the sections read after the fit (movement, step time, checkpoint files)
    plan: Plan | None = None

    @property
    def verdict(self) -> str:
        """The plan's worst row: "does not fit" (a row over capacity, or the load phase, M101),
        "tight", "fits", or "unknown" when no row has a capacity."""
        vs = [r.verdict for r in self.rows]
        if "does not fit" in vs or any(f.code == "M101" for f in self.findings):
            return "does not fit"
        if "tight" in vs:
            return "tight"
        return "fits" if "fits" in vs else "unknown"


def plan_fit(plan: Plan, capacity: Capacity | None = None, overhead: OverheadSettings = DEFAULT_OVERHEAD,
             load: LoadAssumption | None = None, hf: bool = False, activations_floor: bool = True,
             api: bool = False) -> PlanFit:
    """The fit of ``plan`` against ``capacity`` (bytes): the ledger (advisor.ledger.state),
    activations, the step timeline per role, :func:`fit_rows` with the runtime overhead terms,
    and :func:`fit_findings` (M100, M101, M102, M103, M104; not yet located in the config file). The one fit
    of estimate, check and generate. ``plan`` must be one DeepSpeed accepts (estimate checks
    :func:`advisor.ledger.state.unsupported_reason` first). Raises
    :class:`advisor.cluster.overhead.OverheadError` for an unreadable overhead variable.

    A plan whose activations are not estimated (:func:`activations_for` gives None: no architecture,
    ``--params``; a family the formulas do not cover; no sequence length) has an accelerator need that
    leaves out what is usually its largest term: with ``activations_floor`` (estimate, check) that row is
    a lower bound (:attr:`FitRow.lower_bound`, at best "tight") and M104 says what is missing and how to
    give it. generate passes False so that such plans stay rankable, and marks them itself
    (:func:`advisor.views.generate.search`: ``Candidate.accelerator_lower_bound``, ">=", micro-batch 1 and
    full recompute where not fixed, one warning). preflight passes True, and ``api``: M104's activations
    reason and fix in its words, not flags (a module with a Hugging Face model.config, ``seq_len=``;
    :func:`advisor.rules.M104_peak_is_lower_bound.activations_fix`)."""
    ec, inventory, cluster, workload = plan.config, plan.inventory, plan.cluster, plan.workload
    ledger = ledger_of(plan)
    via_hf = hf or plan.hf is not None
    acts, note = activations_for(ec, inventory, cluster, workload, hf=via_hf)
    load = load or resolve_load(ec, hf=via_hf, hf_is_zero3=hf_zero3(plan),
                                checkpoint_dtype=checkpoint_load_dtype(inventory.hf_config),
                                pipeline_parallel=cluster.pipeline_parallel)
    staged = cluster.pipeline_parallel > 1 and acts is not None
    # staged: the roles are split per stage below, each part with its own timeline (group_roles' would
    # be computed for nothing: half of generate's ~50k role timelines at 2^20 ranks, issue 21)
    roles = group_roles(ledger, acts, load, timelines=not staged)
    if staged:
        per_stage = {s: activations_for(ec, inventory, cluster, workload, stage=s, hf=via_hf)[0]
                     for s in range(cluster.pipeline_parallel)}
        roles = split_by_stage(roles, cluster, per_stage)
        for role in roles:  # each stage's own activations on its timeline
            role.load = load
            role.timeline = role_timeline(ledger, role.ledger, load, role.activations, rank=role.ranks[0])
    rows = fit_rows(ledger, roles, capacity or Capacity(), overhead)
    # activations not estimated: the accelerator need is a floor (M104), never "fits"
    missing = note if activations_floor and acts is None and roles else ""
    if missing:
        for r in rows:
            if r.tier == "accelerator":
                r.lower_bound = "; ".join(x for x in (r.lower_bound, missing) if x)
    found = fit_findings(rows, load, hf=via_hf, pipeline=cluster.pipeline_parallel > 1,
                         # with --hf every rank builds the whole model (timeline.HF_WHOLE_LOAD), and so with the
                         # config's AutoTP / AutoEP (timeline.AUTO_SHARD_WHOLE_LOAD): not M101's Megatron words
                         tensor_parallel=1 if load.options.hf or ec.builds_whole_model else cluster.tensor_parallel)
    if (ledger.peak_lower_bound or missing) and roles:  # M104: every output says the accelerator peak is a floor
        from advisor.rules.M104_peak_is_lower_bound import lower_bound_finding
        groups = len({t.group for t in inventory.tensors if t.trainable})
        acc = next((r for r in rows if r.tier == "accelerator" and r.lower_bound), None)
        found.append(lower_bound_finding(ledger.peak_lower_bound, ec, groups, acc, activations=missing, api=api))
    return PlanFit(ledger, acts, note, load, roles, rows, found, resolved_plan(plan))


def estimate(plan: Plan, capacity: Capacity | None = None, findings: list[Finding] | None = None,
             overhead: OverheadSettings = DEFAULT_OVERHEAD, hardware: Any = None,
             step_time_s: float | None = None, load: LoadAssumption | None = None,
             hf: bool = False, save_dir: str | None = None, save_interval_s: float | None = None) -> EstimateResult:
    """Run the ledger (and activations) for ``plan`` (:func:`advisor.planning.build_plan`) and
    summarise it: roles, fit against ``capacity`` (bytes), movement and checkpoint sections.

    ``hardware`` (advisor.cluster.hardware.Hardware) and ``step_time_s`` give the movement section
    its times, storage tiers and drive endurance (advisor.ledger.movement). ``save_dir`` (and
    ``save_interval_s``, seconds between saves): where checkpoints go; with ``hardware`` the
    checkpoint section reports that tier's wear, and when the NVMe swap writes to the same tier
    both count each other's writes (:func:`share_save_tier`).

    ``findings``: lint findings to carry along (estimate's JSON includes them). Fit findings
    (M100) are appended when a capacity is given and a tier does not fit; a config DeepSpeed
    refuses gives M090 and no ledger, and so does an error finding among ``findings`` whose rule
    :attr:`advisor.rules.Rule.refuses` (:func:`advisor.rules.refusals`): no roles, no fit rows,
    ``sections["unsupported"]`` names the first such finding.
    ``overhead``: how the accelerator row's runtime overhead terms are made
    (:class:`advisor.cluster.overhead.OverheadSettings`: environment, ``--runtime-overhead``
    overrides); raises :class:`advisor.cluster.overhead.OverheadError` when one does not parse.
    ``load``: how the model is materialised before initialize (default
    :func:`advisor.ledger.timeline.resolve_load` with ``hf``: the HF Trainer's zero.Init choice);
    M101 when the load phase does not fit.
    """
    ec = plan.config
    cluster = plan.cluster
    inventory = plan.inventory
    workload = plan.workload
    positions = plan.loaded.positions if plan.loaded is not None else {}
    data = plan.loaded.data if plan.loaded is not None else {}  # the config as written: absent keys are marked
    set_by = plan.loaded.overrides if plan.loaded is not None else {}  # keys a --set wrote: located at it
    source = plan.source
    why = unsupported_reason(ec, cluster.dp_world_size)
    if why is not None:
        # DeepSpeed refuses this combination at initialize(): there is nothing to account for.
        # One finding per fault: a lint rule that already reports this refusal stands for it.
        said = any(f.code in REFUSAL_RULES and f.severity == "error" for f in (findings or []))
        refused = [] if said else [emit(code="M090", severity="error", pointer="",
                                        message=f"DeepSpeed 0.19.8 will refuse this config at initialize(): {why}",
                                        fix="fix the configuration first; no memory estimate is possible for it"
                                        ).located(positions, source, data, set_by)]
        return EstimateResult(source=source, plan=plan, ledger=Ledger(plan=plan, ranks=[]), roles=[],
                              fit=[], findings=list(findings or []) + refused,
                              workload=workload, activations_note="", overhead=overhead,
                              sections={"unsupported": why})
    from advisor.rules import refusals
    refused = refusals(findings or [])
    if refused:
        # DeepSpeed refuses this config or launch shape before training starts (an invalid stage,
        # a batch triple it asserts on, an unknown key in a strict section, the G rules' launch
        # shapes, ...): an estimate would be of a config that never runs (stage 7 read as 0).
        return EstimateResult(source=source, plan=plan, ledger=Ledger(plan=plan, ranks=[]), roles=[],
                              fit=[], findings=list(findings or []), workload=workload, activations_note="",
                              overhead=overhead, sections={"unsupported": f"{refused[0].code}: {refused[0].message}"})
    pf = plan_fit(plan, capacity, overhead, load=load, hf=hf)
    seq = assumed_seq_len(workload.seq_len, plan, pf.activations)
    # from here on the sections (M100's fixes, movement, step time, checkpoint files) and the reported workload
    # read the length and micro-batch the activations were estimated at; ``plan`` as given is unchanged
    plan = pf.plan or plan
    workload = plan.workload
    short = {f.data.get("tier") for f in pf.findings if f.code == "M100"} & {"accelerator", "host"}
    if short:  # the M100 fix: candidate changes re-estimated (advisor.views.fixes)
        from advisor.views.fixes import fit_candidates
        cands = fit_candidates(plan, capacity or Capacity(), overhead, pf.load, short, fit=plan_fit,
                               has_activations=pf.activations is not None, hardware=hardware, hf=hf,
                               activations=activations_for)
        before = {r.tier: r.verdict for r in pf.rows}
        pf.findings = [computed_fix(f, cands, peak_role_activations(pf), before,
                                    seq_assumed=seq if f.data.get("tier") == "accelerator" else None)
                       if f.code == "M100" and f.data.get("tier") in short
                       else f for f in pf.findings]
    ledger, acts, note, load, roles, rows = pf.ledger, pf.activations, pf.activations_note, pf.load, pf.roles, pf.rows
    if seq:  # the shortfall (and M104's floor) at a sequence length nobody gave: say so where it is read; a tier
        # the activations do not reach (the host without cpu_checkpointing, NVMe) does not depend on it
        tiers = {"accelerator"} | ({"host"} if acts is not None and acts.saved_host else set())
        pf.findings = [with_assumed_seq_len(f, seq) if f.code == "M104" or (f.code == "M100" and f.data.get("tier")
                                                                              in tiers) else f
                       for f in pf.findings]
    fit_found = [f.located(positions, source, data, set_by) for f in pf.findings]
    from advisor.rules.W001_seq_len_beyond_positions import positions_finding
    pos = positions_finding(inventory.meta, workload.seq_len)  # W001: past the model's positions
    if pos is not None:
        fit_found.append(pos)
    if plan.loaded is not None:  # the config's "ds_advisor" ignore list covers these findings too
        from advisor.config.suppress import config_suppressions
        sup = config_suppressions(plan.loaded.data)[0]
        fit_found = [f for f in fit_found if not sup.hides(f)]
    all_findings = list(findings or []) + fit_found
    from advisor.views.checkpoint import checkpoint_view
    from advisor.ledger.movement import movement_section
    # Movement, step time and checkpoint files shard the model themselves under tensor/pipeline
    # parallelism (advisor.ledger.movement, advisor.ledger.checkpoint: per stage, the
    # tensor-parallel shard over its ZeRO group).
    mv_plan = ck_plan = movement_plan(plan)
    st_section = None
    if hardware is not None:
        st_section = step_time_section(mv_plan, hardware, workload, acts)
        st_section["per_day_figures_use"] = "--step-time" if step_time_s is not None else (
            "model" if st_section.get("step_time_s") else None)
        if step_time_s is None and st_section.get("step_time_s"):
            step_time_s = st_section["step_time_s"]  # the model's; --step-time (a measured run) wins
    sections = {"movement": movement_section(mv_plan, hardware, step_time_s, activations=acts, rank_sets=True)}
    if save_dir:  # where checkpoints go: the tier's wear, shared with the swap when it writes there too
        cp = checkpoint_view(ck_plan, hardware=hardware, save_dir=save_dir, save_interval_s=save_interval_s,
                             step_time_s=step_time_s)
        share_save_tier(sections["movement"]["endurance"], cp)
    else:
        cp = checkpoint_view(ck_plan)
    sections["checkpoint"] = cp.to_dict()
    # where the per-day figures' step time comes from: the text labels the Storage line with it
    sections["movement"]["step_time_source"] = (
        "--step-time" if st_section is not None and st_section.get("per_day_figures_use") == "--step-time"
        else "model" if st_section is not None and st_section.get("per_day_figures_use") == "model"
        else "--step-time" if step_time_s is not None else None)
    if st_section is not None:
        sections["step_time"] = st_section
    return EstimateResult(source=source, plan=plan, ledger=ledger, roles=roles, fit=rows,
                          findings=all_findings, workload=workload, activations_note=note,
                          overhead=overhead, sections=sections, load=load)


def step_time_section(plan: Plan, hardware: Any, workload: Workload, acts: Any) -> dict[str, Any]:
    """The step-time model's figures for estimate (:func:`advisor.ledger.steptime.step_time`),
    JSON-ready: step seconds, the breakdown by resource (busy and exposed), every term, and the
    text lines. ``{"step_time_s": None, "why": ...}`` when the sequence length is unknown."""
    from advisor.ledger import steptime as stm
    seq = workload.seq_len or (plan.inventory.meta or {}).get("max_seq_len")
    if not seq:
        return {"step_time_s": None, "source": None, "why": "no sequence length (give --seq-len)"}
    from advisor.ledger.movement import movement_roles
    roles = movement_roles(plan, hardware, activations=acts)  # cpu_checkpointing's PCIe rows included
    st = stm.step_time(plan, hardware, seq_len=int(seq),
                       recompute_fraction=acts.recompute_flops_fraction if acts is not None else 0.0,
                       movements=stm.step_movements(roles, plan.cluster.pipeline_parallel))
    d = st.to_dict()
    d.update(source="model", seq_len=int(seq), lines=stm.breakdown_lines(st))
    cl = plan.cluster
    if cl.tensor_parallel > 1 or cl.pipeline_parallel > 1:
        d["note"] = ("tensor/pipeline parallelism: compute / (t x p x u), the tensor-parallel all-reduces and stage "
                     "sends as synchronous movements, the 1F1B bubble (p-1)/(m+p-1); the slowest stage's movements")
    elif cl.expert_parallel > 1:
        d["note"] = ("expert parallelism: the MoE all-to-alls (dispatch and combine, forward and backward) as "
                     "synchronous movements over the expert-parallel group")
    return d


def model_step_time(plan: Plan, hardware: Any) -> float | None:
    """Seconds per optimizer step of ``plan`` on ``hardware`` by the step-time model, as estimate
    computes it (:func:`advisor.views.estimate.step_time_section`: the plan's workload, the
    model's ``max_seq_len`` when no sequence length is given, the config's activation
    checkpointing); None when the model has no architecture or sequence length, or the spec lacks
    the accelerator's FLOP rate."""
    try:
        acts, _ = activations_for(plan.config, plan.inventory, plan.cluster, plan.workload)
        plan = resolved_plan(plan)  # the movements at the activations' sequence length, as estimate's
        st = step_time_section(movement_plan(plan), hardware, plan.workload, acts)  # estimate's plan for it
    except (ValueError, KeyError):
        return None
    if not st.get("step_time_s") or any(u.startswith("compute") for u in st.get("unknown") or []):
        return None
    return float(st["step_time_s"])


def share_save_tier(endurance: list[dict[str, Any]], cp: Any) -> None:
    """When the checkpoint save dir (``cp``, a CheckpointPlan with its storage tier) and the NVMe
    swap (``endurance``: estimate's movement section's endurance lines, JSON form) write to the
    same storage tier of the hardware spec, make each count the other's writes: ``cp.swap_writes``
    gets the swap's bytes per day (its write bytes per step x writing nodes x steps per day, the
    movement ledger's), so :meth:`CheckpointPlan.storage` adds them; the swap's endurance line
    gets the saves' bytes per day (the tier's bytes per save x saves per day) added to its
    ``write_bytes_per_day`` and its wear recomputed (:func:`advisor.ledger.movement.shared_tier_wear`),
    with ``checkpoint_bytes_per_day``, ``swap_bytes_per_day`` and ``checkpoint_save_dir`` naming
    the parts. Nothing changes when the tiers differ or the swap writes nothing there."""
    from advisor.ledger.movement import saves_on_tier
    if cp is None or cp.tier is None:
        return
    ln = next((x for x in endurance if x.get("tier") == cp.tier.name and x.get("write_bytes_per_step")), None)
    if ln is None:
        return
    swap_per_day = ln.get("write_bytes_per_day")
    if swap_per_day is not None:
        cp.swap_writes = {"paths": list(ln.get("paths") or []), "bytes_per_day": swap_per_day,
                          "step_time_s": ln.get("step_time_s"), "writing_nodes": ln.get("writing_nodes") or 1}
    ck_per_day = (cp.storage() or {}).get("checkpoint_bytes_per_day")
    if swap_per_day is None or ck_per_day is None:
        return
    ln.update(saves_on_tier(swap_per_day, ck_per_day, ln.get("rated_write_bytes"), ln.get("capacity_bytes"),
                            cp.save_dir))


def _offloads_to_nvme(plan: Plan) -> bool:
    """Whether DeepSpeed swaps optimizer state or parameters to NVMe under ``plan``'s config."""
    ec = plan.config
    return "nvme" in (ec.offload_optimizer_effective, ec.offload_param_effective)


def checkpoint_with_step_time(plan: Plan, **options: Any) -> Any:
    """:func:`advisor.views.checkpoint.checkpoint_view` for the ``checkpoint`` command: without
    ``step_time_s`` and with a ``hardware`` spec the save interval's steps use
    :func:`model_step_time` (``step_time_source`` "model"), as estimate's per-day figures do;
    ``step_time_s`` given (a measured run) wins."""
    from advisor.views.checkpoint import checkpoint_view
    resolved = options.pop("workload", None)
    cp = checkpoint_view(movement_plan(plan), **options)  # the files estimate's checkpoint section lists
    hardware = options.get("hardware")
    if cp.step_time_s is None and hardware is not None and not cp.files.unsupported:
        st = model_step_time(plan, hardware)
        plan = resolved_plan(plan)  # the swap's movements below at the step time's sequence length
        if st:
            cp.step_time_s, cp.step_time_source = st, "model"
            cp.step_time_workload = step_time_workload(plan, resolved)
    if cp.tier is not None and cp.step_time_s and not cp.files.unsupported and _offloads_to_nvme(plan):
        # the NVMe swap on the save dir's tier: its writes wear the same drive (estimate's figures)
        from advisor.ledger.movement import movement_section
        mv = movement_section(movement_plan(plan), hardware, cp.step_time_s)
        share_save_tier(mv["endurance"], cp)
    return cp


#: The origin :func:`step_time_workload` states for a micro-batch nobody gave
#: (:func:`advisor.config.effective.micro_batch_for`'s origin).
MICRO_BATCH_WORDS = {"config": "train_micro_batch_size_per_gpu",
                     "derived": "DeepSpeed's derived train_batch_size / (gradient_accumulation_steps x data-parallel ranks)",
                     "default": "1 (the config's batch keys are refused: B001)"}


def step_time_workload(plan: Plan, resolved: Any = None) -> dict[str, dict[str, Any]]:
    """The workload a model step time of ``plan`` was computed on, as the checkpoint report states
    it: {field: {"value", "origin"}} for seq_len (tokens), micro_batch (sequences per rank),
    checkpointing, attention and each parallel size above 1; ``origin`` is where
    :func:`advisor.views.workload.resolve` took it (``flag``, ``sidecar PATH``, ``default``,
    ``config``) from ``resolved`` (a ResolvedWorkload), "the model's maximum context" for a
    sequence length nobody gave, :data:`MICRO_BATCH_WORDS` for a micro-batch nobody gave (the config's
    written one, DeepSpeed's derived one, or 1: :func:`advisor.config.effective.micro_batch_for`)."""
    wl, cl = plan.workload, plan.cluster
    origin = dict(getattr(resolved, "origin", {}) or {})
    given = dict(getattr(resolved, "values", {}) or {})
    out: dict[str, dict[str, Any]] = {}
    seq = wl.seq_len or (plan.inventory.meta or {}).get("max_seq_len")
    out["seq_len"] = {"value": seq, "origin": origin.get("seq_len", "default") if given.get("seq_len") is not None
                      else "the model's maximum context"}
    from advisor.config.effective import micro_batch_for
    mb = micro_batch_for(plan.config, batch_world_size(plan.config, cl), wl.micro_batch)[0]  # wl: resolved_plan's, or the given one
    how = micro_batch_for(plan.config, batch_world_size(plan.config, cl), given.get("micro_batch"))[1]
    out["micro_batch"] = {"value": mb, "origin": origin.get("micro_batch", "default")
                          if given.get("micro_batch") is not None else MICRO_BATCH_WORDS.get(how, how)}
    out["checkpointing"] = {"value": wl.checkpointing, "origin": origin.get("checkpointing", "default")}
    out["attention"] = {"value": wl.attention, "origin": origin.get("attention", "default")}
    for k, v in (("tensor_parallel", cl.tensor_parallel), ("pipeline_parallel", cl.pipeline_parallel),
                 ("sequence_parallel", cl.sequence_parallel), ("expert_parallel", cl.expert_parallel)):
        if v and v > 1:
            out[k] = {"value": v, "origin": origin.get(k, "default")}
    return out
