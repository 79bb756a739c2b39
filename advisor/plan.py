"""The plan: every fact one command needs about one training job, computed once.

Flow: load (:mod:`advisor.config.loading`) -> effective config (:mod:`advisor.config.effective`;
with ``--hf`` first the HF Trainer / accelerate resolution of ``"auto"``,
:func:`advisor.config.hf.resolve_for_estimate`) -> :class:`Plan` -> ledger
(:func:`advisor.ledger.state.compute_ledger`) -> views (lint, estimate, check, checkpoint,
report, generate).

:func:`advisor.planning.build_plan` is called once per command; every view reads the same :class:`Plan` and
never re-derives the effective config, the HF resolution or the cluster shape. The plan is
pure data: this module imports neither the ledger nor the views (nor torch, deepspeed, click).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from advisor.config.effective import EffectiveConfig, effective_config, pipeline_effective
from advisor.config.versions import DEFAULT_RELEASE, current_release
from advisor.model.inventory import Inventory

if TYPE_CHECKING:
    from advisor.config.loading import LoadedConfig
    from advisor.findings import Finding


#: How a PipelineModule gets its layers (the load option ``--pipeline-build``, read by
#: :func:`advisor.ledger.timeline.load_entries`): ``stage``, LayerSpecs each rank builds for its stage only
#: (``timeline.PIPELINE_STAGE_LOAD``); ``whole``, the modules of a model built whole on every rank
#: (``timeline.PIPELINE_WHOLE_LOAD``). Here, not in the ledger, so the CLI's option list imports no ledger.
PIPELINE_BUILDS = ("stage", "whole")


@dataclass(frozen=True)
class Cluster:
    """The launch shape. ``world_size`` is the total number of ranks; the data-parallel
    world size (the batch's replicas) is world_size / (tp x pp x sp).

    ``tensor_parallel``: Megatron-style tensor parallelism (weights split, see
    ``advisor.model.parallel``); ``pipeline_parallel``: pipeline stages; ``sequence_parallel``:
    DeepSpeed-Ulysses ``sequence_parallel_size`` (its own ranks; ZeRO partitions over DP x SP,
    ``engine.py`` seq_data_parallel_group); ``megatron_sequence_parallel``: Megatron sequence
    parallelism, which reuses the tensor-parallel group (activations only); ``expert_parallel``:
    DeepSpeed MoE ``ep_size`` (experts split over it, whole on every tensor-parallel rank; their
    ZeRO over the expert-data-parallel group, :attr:`expert_data_parallel_size`).

    Global rank order (DeepSpeed ``runtime/pipe/topology.py:PipeModelDataParallelTopology``,
    axes pipe, data, model; the Ulysses axis inside data): rank = ((stage x DP + d) x SP + q) x TP + m."""

    world_size: int = 1
    gpus_per_node: int | None = None
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    sequence_parallel: int = 1
    expert_parallel: int = 1
    megatron_sequence_parallel: bool = False
    #: OpenMP threads per rank (DeepSpeedCPUAdam's loop, ``csrc/adam/cpu_adam_impl.cpp``) as the
    #: job sets them (``--omp-threads`` or OMP_NUM_THREADS, :func:`advisor.cluster.launch.omp_threads`);
    #: None: the launcher's default (:func:`advisor.ledger.steptime.cpu_threads_per_rank`).
    omp_threads: int | None = None
    #: Where ``omp_threads`` came from (the flag or the variable), for the step time's note.
    omp_threads_source: str = ""
    #: Where ``tensor_parallel`` / ``expert_parallel`` came from when the config, not a flag, states them
    #: (``"tensor_parallel.autotp_size"``, ``"expert_parallel.autoep_size"``;
    #: :func:`advisor.planning.config_parallel`); empty: a flag, the sidecar or the default.
    tensor_parallel_source: str = ""
    expert_parallel_source: str = ""

    def __post_init__(self) -> None:
        # a node holds at most the job's ranks: 2 ranks on an 8-GPU node are 2 ranks per node
        # (host memory, the per-node load and the CPU optimizer's share are per node)
        if self.gpus_per_node is not None and self.world_size >= 1 and self.gpus_per_node > self.world_size:
            object.__setattr__(self, "gpus_per_node", self.world_size)

    @property
    def dp_world_size(self) -> int:
        return max(1, self.world_size // (self.tensor_parallel * self.pipeline_parallel * self.sequence_parallel))

    @property
    def zero_world_size(self) -> int:
        """Ranks ZeRO partitions dense parameters over: DP x SP (Ulysses ranks join the ZeRO group)."""
        return self.dp_world_size * max(1, self.sequence_parallel)

    @property
    def expert_data_parallel_size(self) -> int:
        """Ranks ZeRO partitions a routed expert's parameters, gradients and optimizer state over
        (DeepSpeed MoE, ``expert_parallel`` = ep > 1): zero_world_size x tensor_parallel / ep, the
        pipeline stage's DP x SP x TP ranks split into ep expert-data-parallel groups, tensor-parallel
        ranks included. DeepSpeed 0.19.8: ``moe/layer.py`` l.93-97 builds the groups with
        ``utils/groups.py`` _create_expert_and_data_parallel unless expert tensor parallelism is on
        (off by default, and without an mpu); its legacy path (l.426-445, mp_size None) makes, per
        stage of pp_stride = world / pp ranks (l.416), the ep groups ``range(stage_start + i,
        stage_start + pp_stride, ep)`` of pp_stride / ep ranks each -- local rank l = z x TP + m of the
        stage (ZeRO rank z, tensor-parallel rank m) is member l // ep of group l mod ep, and holds
        expert-parallel shard l mod ep (the expert-parallel groups are ep consecutive ranks, l.462-463).
        ZeRO-1/2 takes that group's size as the partition count of a ``moe`` param group
        (``runtime/zero/stage_1_and_2.py`` _configure_moe_settings l.880-881), BF16_Optimizer likewise
        (``runtime/bf16_optimizer.py`` _configure_moe_settings l.142-146, _setup_for_real_optimizer
        l.153). DeepSpeed requires only that ep divide pp_stride (``_ensure_divisibility``, l.417), not
        the data-parallel size. 0 when ep does not divide it (DeepSpeed refuses: rule G004)."""
        ep = max(1, self.expert_parallel)
        width = self.zero_world_size * max(1, self.tensor_parallel)
        return 0 if width % ep else width // ep

    @property
    def model_parallel(self) -> bool:
        """True when the ledger needs per-stage / per-TP-shard roles."""
        return self.tensor_parallel > 1 or self.pipeline_parallel > 1 or self.expert_parallel > 1

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(pipeline stage, ZeRO rank in DP x SP, tensor-parallel rank) of global ``rank``."""
        tp, wz = self.tensor_parallel, self.zero_world_size
        return rank // (wz * tp), (rank // tp) % wz, rank % tp


@dataclass
class Workload:
    """What one step processes on a rank: sequence length (tokens), micro-batch (sequences),
    activation checkpointing (``none``/``full``/``selective``/k layers), attention kernel (``flash``/``eager``).
    None = not given: the activations are estimated at the model's maximum length and the micro-batch
    DeepSpeed runs for the config's batch keys (advisor.config.effective.micro_batch_for, the one resolution
    every reader calls; advisor.views.estimate.sequence_and_micro_batch), and estimate's sections after the fit
    read a resolved copy (advisor.views.estimate.resolved_plan); no view changes a Workload it is given."""

    seq_len: int | None = None
    micro_batch: int | None = None
    checkpointing: str = "none"
    attention: str = "flash"
    #: ``formula`` (advisor.model.activations, no torch) or ``trace`` (advisor.engine.trace:
    #: transformers' own model on fake tensors; needs torch and transformers).
    activations: str = "formula"
    #: DeepSpeed MoE capacity factor (``deepspeed.moe.layer.MoE``; None: dropless routing, as
    #: transformers does it): advisor.model.activations.moe_capacity.
    moe_capacity_factor: float | None = None


@dataclass(frozen=True)
class HFResolution:
    """What the HF Trainer / accelerate hand DeepSpeed: ``config`` (the raw dict with "auto"
    filled in) and the Trainer's own findings (H codes). ``trainer_args_given``: False when
    the Trainer's arguments are TrainingArguments' defaults (lint then keeps only the findings
    that hold whatever the arguments are)."""

    config: dict[str, Any]
    findings: list["Finding"]
    trainer_args_given: bool
    #: the Trainer arguments given (:class:`advisor.config.hf.TrainerArgs` fields), for a config derived from
    #: ``config`` again (a fix candidate: :func:`advisor.config.hf.trainer_effective_config`)
    trainer_args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """One job: the effective config DeepSpeed will use x the model inventory x the cluster.

    ``config`` is what DeepSpeed runs (after the HF resolution when ``hf`` is set, and with what the
    pipeline degree turns off: :func:`advisor.config.effective.pipeline_effective`);
    ``written`` the effective config of the file as written (what lint judges; None when it is
    ``config`` itself: without ``--hf`` and nothing the pipeline degree changes). ``loaded`` is the config file (source and line positions),
    None for a plan built from a dict (generate's candidates, tests)."""

    config: EffectiveConfig
    inventory: Inventory
    cluster: Cluster = field(default_factory=Cluster)
    workload: Workload = field(default_factory=Workload)
    written: EffectiveConfig | None = None
    hf: HFResolution | None = None
    loaded: "LoadedConfig | None" = None
    #: The DeepSpeed config before the HF Trainer fills "auto", when the Trainer runs and it is not
    #: ``loaded.data``: for an accelerate file, the dict accelerate starts from
    #: (:attr:`advisor.config.hf.Resolution.base`). M100's fixes read it to tell a Trainer argument
    #: from a config key (:mod:`advisor.views.fixes`).
    trainer_written: "dict[str, Any] | None" = None
    #: True when the config is the one accelerate builds from an accelerate YAML's deepspeed_config
    #: fields (no deepspeed_config_file): M100's fixes then say which YAML fields to edit.
    accelerate_fields: bool = False
    #: Facts derived from this plan, computed once and shared by every view (the ledger, the
    #: movements per hardware): filled by :func:`advisor.ledger.state.ledger_of` and
    #: :func:`advisor.ledger.movement.movement_roles`. Not part of the plan's identity.
    derived: dict = field(default_factory=dict, compare=False, repr=False, hash=False)

    def __post_init__(self) -> None:
        # the config as the engine runs it on this cluster's pipeline degree (overlap_comm off under a
        # PipelineModule, engine.py l.2663-2666: advisor.config.effective.pipeline_effective); the file's
        # own effective config stays ``written`` for lint. Every construction (dataclasses.replace too)
        # passes here; a pipeline stage's sub-plan (one stage's cluster) takes the already-run config.
        ec = pipeline_effective(self.config, self.cluster.pipeline_parallel)
        if ec is not self.config:
            if self.written is None:
                object.__setattr__(self, "written", self.config)
            object.__setattr__(self, "config", ec)

    @property
    def deepspeed_version(self) -> str:
        """The DeepSpeed release the job runs, as the command selected it
        (:func:`advisor.config.versions.current_release`: ``--deepspeed-version``, else the
        installed deepspeed), 0.19.8 when none is set."""
        r = current_release()
        return r.requested if r is not None else DEFAULT_RELEASE

    @property
    def as_written(self) -> EffectiveConfig:
        """The effective config of the file as written (lint's view)."""
        return self.written if self.written is not None else self.config

    @property
    def source(self) -> str:
        return self.loaded.source if self.loaded is not None else ""


def plan_of(config: "dict[str, Any] | EffectiveConfig", inventory: Inventory, cluster: Cluster | None = None,
            workload: Workload | None = None) -> Plan:
    """A plan for a config given as a dict or an :class:`EffectiveConfig` (no file: generate's
    candidates, the engine harness, tests). A dict's effective config is computed here, once."""
    ec = config if isinstance(config, EffectiveConfig) else effective_config(config)
    return Plan(config=ec, inventory=inventory, cluster=cluster or Cluster(), workload=workload or Workload())
