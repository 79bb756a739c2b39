"""The effective config: what DeepSpeed 0.19.8 will actually use, from the raw dict.

This is the one place that knows DeepSpeed's defaults and how it reads each section:

* pydantic sections (``zero_optimization`` with its offload blocks, ``fp16``, ``bf16``, ...)
  silently drop any value equal to the string ``"auto"`` so the default applies
  (``runtime/config_utils.py`` ``DeepSpeedConfigModel.__init__``); ``bf16.enabled: "auto"``
  therefore means bf16 *off*;
* deprecated aliases map to their replacement (``cpu_offload`` -> ``offload_optimizer.device:
  cpu``, ``cpu_offload_param`` -> ``offload_param.device: cpu``, ``bfloat16`` -> ``bf16``,
  ``stage3_gather_fp16_weights_on_model_save`` -> ``gather_16bit_weights_on_model_save``,
  legacy ``zero_optimization: true`` -> stage 1);
* ``stage3_*`` aliases and their unprefixed field names are both accepted
  (``populate_by_name=True``);
* settings DeepSpeed parses and then ignores are recorded as notes (``offload_param`` below
  stage 3, ``offload_optimizer`` at stage 0, ``offload_optimizer.device: nvme`` at stages 1/2).

Defaults, aliases and deprecated spellings are those of 0.19.8, read from the one table
:mod:`advisor.config.defaults` (each section with its DeepSpeed source; checked against the
installed DeepSpeed's pydantic models by tests/test_defaults.py); see
../shared/reference/deepspeed-0.19.8-state-accounting.md section 7. Values of the wrong type are left to schema validation: here they fall back to the
default and a note says so, so that estimate never crashes on a bad config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from advisor.config.dtypes import TRAINING_DTYPE_BYTES, training_dtype
from advisor.config.defaults import (AIO, BF16, CHECKPOINT_PARALLEL_WRITE, FP16, LEGACY_SECTIONS, OFFLOAD_OPTIMIZER,
                                     OFFLOAD_PARAM, TOP, ZERO, Default, SectionDefaults, ds_true_false)

Dtype = Literal["fp16", "bf16", "fp32"]
Device = Literal["none", "cpu", "nvme"]

#: Bytes per element of each training dtype: the one table, advisor.config.dtypes.
DTYPE_BYTES: dict[str, int] = TRAINING_DTYPE_BYTES


@dataclass(frozen=True)
class Note:
    """Something about how DeepSpeed reads the config that a user would not expect."""

    pointer: str
    message: str
    kind: Literal["auto-dropped", "ignored", "deprecated-alias", "bad-value", "derived"] = "ignored"


@dataclass
class OffloadParam:
    """``zero_optimization.offload_param`` (``offload_config.py`` DeepSpeedZeroOffloadParamConfig)."""

    device: Device = OFFLOAD_PARAM.value("device")
    nvme_path: str | None = OFFLOAD_PARAM.value("nvme_path")
    buffer_count: int = OFFLOAD_PARAM.value("buffer_count")
    buffer_size: int = OFFLOAD_PARAM.value("buffer_size")  # elements
    max_in_cpu: int = OFFLOAD_PARAM.value("max_in_cpu")  # elements
    pin_memory: bool = OFFLOAD_PARAM.value("pin_memory")  # 0.19.8 default (older releases: false)


@dataclass
class OffloadOptimizer:
    """``zero_optimization.offload_optimizer`` (DeepSpeedZeroOffloadOptimizerConfig)."""

    device: Device = OFFLOAD_OPTIMIZER.value("device")
    nvme_path: str | None = OFFLOAD_OPTIMIZER.value("nvme_path")
    buffer_count: int = OFFLOAD_OPTIMIZER.value("buffer_count")
    pin_memory: bool = OFFLOAD_OPTIMIZER.value("pin_memory")
    pipeline_read: bool = OFFLOAD_OPTIMIZER.value("pipeline_read")
    pipeline_write: bool = OFFLOAD_OPTIMIZER.value("pipeline_write")
    fast_init: bool = OFFLOAD_OPTIMIZER.value("fast_init")
    ratio: float = OFFLOAD_OPTIMIZER.value("ratio")
    super_offload: bool = OFFLOAD_OPTIMIZER.value("super_offload")
    #: the share of a rank's cores SuperOffload pins its DeepSpeedCPUAdam worker process to
    #: (``superoffload/superoffload_utils.py`` _set_cpu_affinity l.219-228); read only with ``super_offload``
    cpuadam_cores_perc: float = OFFLOAD_OPTIMIZER.value("cpuadam_cores_perc")


@dataclass
class Aio:
    """``aio`` (``runtime/swap_tensor/constants.py``)."""

    block_size: int = AIO.value("block_size")  # bytes
    queue_depth: int = AIO.value("queue_depth")
    intra_op_parallelism: int = AIO.value("intra_op_parallelism")
    single_submit: bool = AIO.value("single_submit")
    overlap_events: bool = AIO.value("overlap_events")
    use_gds: bool = AIO.value("use_gds")


@dataclass
class Zero:
    """``zero_optimization`` (``runtime/zero/config.py`` DeepSpeedZeroConfig). Sizes in elements."""

    stage: int = ZERO.value("stage")
    contiguous_gradients: bool = ZERO.value("contiguous_gradients")
    reduce_scatter: bool = ZERO.value("reduce_scatter")
    reduce_bucket_size: int = ZERO.value("reduce_bucket_size")
    allgather_partitions: bool = ZERO.value("allgather_partitions")
    allgather_bucket_size: int = ZERO.value("allgather_bucket_size")
    overlap_comm: bool = False  # None in DeepSpeed -> True for stage 3, else False
    sub_group_size: int = ZERO.value("sub_group_size")
    prefetch_bucket_size: int = ZERO.value("prefetch_bucket_size")
    param_persistence_threshold: int = ZERO.value("param_persistence_threshold")
    model_persistence_threshold: int = ZERO.value("model_persistence_threshold")  # sys.maxsize
    max_live_parameters: int = ZERO.value("max_live_parameters")
    max_reuse_distance: int = ZERO.value("max_reuse_distance")
    gather_16bit_weights_on_model_save: bool = ZERO.value("gather_16bit_weights_on_model_save")
    round_robin_gradients: bool = ZERO.value("round_robin_gradients")
    parameter_alignment: bool = ZERO.value("parameter_alignment")
    zero_hpz_partition_size: int = ZERO.value("zero_hpz_partition_size")
    #: ZeRO++ qwZ / qgZ (runtime/zero/config.py zero_quantized_weights / zero_quantized_gradients).
    zero_quantized_weights: bool = ZERO.value("zero_quantized_weights")
    zero_quantized_gradients: bool = ZERO.value("zero_quantized_gradients")
    #: ZeRO++ int8 frozen partitions (runtime/zero/config.py zero_quantized_nontrainable_weights;
    #: partition_parameters.py _partition_param l. 1836-1840).
    zero_quantized_nontrainable_weights: bool = ZERO.value("zero_quantized_nontrainable_weights")
    allgather_sequential: bool = ZERO.value("allgather_sequential")
    #: runtime/zero/config.py memory_efficient_linear: ZeRO-3 replaces F.linear with zero/linear.py's
    #: LinearFunctionForZeroStage3 (partition_parameters.py Init._enable_mem_efficient_linear)
    memory_efficient_linear: bool = ZERO.value("memory_efficient_linear")
    offload_param: OffloadParam = field(default_factory=OffloadParam)
    offload_optimizer: OffloadOptimizer = field(default_factory=OffloadOptimizer)


#: The client optimizers ``deepspeed.initialize`` accepts under ZeRO-Offload while ``zero_force_ds_cpu_optimizer``
#: is true (``engine.py`` l.2342-2343 isinstance checks; :attr:`EffectiveConfig.client_optimizer_must_be_ds_cpu`).
DS_CPU_OPTIMIZERS = ("DeepSpeedCPUAdam", "DeepSpeedCPULion")


@dataclass
class Optimizer:
    """``optimizer`` section (plain dict in DeepSpeed; params go to the constructor)."""

    type: str | None = None  # as written; None when the section is absent (client optimizer)
    torch_adam: bool = False
    adam_w_mode: bool = True
    params: dict[str, Any] = field(default_factory=dict)
    #: with no section: the torch.optim class the client passes to ``deepspeed.initialize`` when the plan knows
    #: it (the HF Trainer's own AdamW: :func:`advisor.planning.build_plan`), else None (a client optimizer,
    #: Adam assumed -> FusedAdam); ``params`` then holds its ``fused`` / ``foreach`` / ``weight_decay``.
    client: str | None = None
    #: why ``client`` is what it is and how to change it (the estimate's optimizer line)
    client_note: str = ""

    @property
    def family(self) -> str:
        """Lower-cased type, or "none" when no optimizer section is given."""
        return (self.type or "none").lower()

    @property
    def is_adam(self) -> bool:
        return self.family in ("adam", "adamw", "fusedadam", "cpuadam", "deepspeedcpuadam")


@dataclass
class EffectiveConfig:
    """What DeepSpeed 0.19.8 will use. Batch sizes stay None when not given."""

    train_batch_size: int | None = None
    train_micro_batch_size_per_gpu: int | None = None
    gradient_accumulation_steps: int | None = None
    gradient_clipping: float = TOP.value("gradient_clipping")  # 0.19.8 default (older releases: 0.0)
    #: gradient_predivide_factor / prescale_gradients (``runtime/config.py``; ZeRO-3 stage3.py takes the factor,
    #: and ``postscale_gradients`` = not prescale_gradients, engine.py l. 1736-1737)
    gradient_predivide_factor: float = TOP.value("gradient_predivide_factor")
    prescale_gradients: bool = TOP.value("prescale_gradients")
    #: zero_force_ds_cpu_optimizer as DeepSpeed tests it: the written value's truthiness (``runtime/config.py``
    #: l.321-322 get_scalar_param, no conversion; ``engine.py`` l.2344 ``if self.zero_force_ds_cpu_optimizer()``).
    zero_force_ds_cpu_optimizer: bool = TOP.value("zero_force_ds_cpu_optimizer")
    fp16_enabled: bool = FP16.value("enabled")
    #: fp16.loss_scale: 0 = dynamic loss scaling, else the static scale (``engine.py``
    #: ``dynamic_loss_scale`` / ``loss_scale``; the ZeRO optimizers' ``CreateLossScaler``).
    fp16_loss_scale: float = FP16.value("loss_scale")
    bf16_enabled: bool = BF16.value("enabled")
    #: bf16.immediate_grad_update (``runtime/precision_config.py``): BF16_Optimizer adds each gradient into its fp32
    #: buffer in the parameter's post-accumulate hook and frees param.grad (``bf16_optimizer.py``
    #: accumulate_hp_grads_and_remove_lp), instead of in the backward epilogue.
    bf16_immediate_grad_update: bool = BF16.value("immediate_grad_update")
    #: checkpoint.parallel_write.pipeline_stage: under the PipelineEngine each stage's layer files are spread over
    #: its data-parallel ranks (``runtime/pipe/module.py`` save_state_dict l.618-621) instead of all written by
    #: data-parallel rank 0 (:func:`advisor.ledger.checkpoint.pipeline_layer_files`).
    checkpoint_parallel_write_pipeline: bool = CHECKPOINT_PARALLEL_WRITE.value("pipeline_stage")
    #: data_types.grad_accum_dtype; None = the model dtype.
    grad_accum_dtype: Dtype | None = None
    #: communication_data_type; None = the model dtype.
    communication_data_type: Dtype | None = None
    zero: Zero = field(default_factory=Zero)
    optimizer: Optimizer = field(default_factory=Optimizer)
    aio: Aio = field(default_factory=Aio)
    activation_checkpointing: dict[str, Any] = field(default_factory=dict)
    #: tensor_parallel.autotp_size (``runtime/tensor_parallel/config.py`` TPTrainingConfig.autotp_size l.45,
    #: default 0 = off): DeepSpeed's own AutoTP. ``deepspeed.initialize`` shards the model only inside the engine
    #: (``runtime/engine.py`` l.595-596 ``if self.autotp_size() > 1: _configure_tensor_parallel`` ->
    #: ``_apply_autotp_partitioning`` l.1009), so the model it is given was built whole on every rank.
    autotp_size: int = 0
    #: expert_parallel.enabled / autoep_size / expert_tensor_parallel_size (``module_inject/auto_ep_config.py``
    #: parse_autoep_config l.48-50, defaults False / 1 / 1; read by ``runtime/config.py``
    #: get_expert_parallel_config l.171-174): DeepSpeed's AutoEP, which swaps transformers' MoE blocks for
    #: ``AutoEPMoELayer`` inside the engine (``engine.py`` l.587-588 -> ``_configure_expert_parallel``
    #: l.816-821), so every rank built all the experts before ``deepspeed.initialize``.
    autoep_enabled: bool = False
    autoep_size: int = 1
    expert_tensor_parallel_size: int = 1
    notes: list[Note] = field(default_factory=list)

    @property
    def autotp(self) -> bool:
        """The config turns on DeepSpeed's AutoTP (``engine.py`` l.595: ``autotp_size() > 1``)."""
        return self.autotp_size > 1

    @property
    def builds_whole_model(self) -> bool:
        """Every rank builds the whole model (all experts, unsharded) before ``deepspeed.initialize``
        because DeepSpeed itself shards it there: AutoTP (:attr:`autotp`) or AutoEP
        (:attr:`autoep_enabled`), the fields' sources. The one place this fact lives."""
        return self.autotp or self.autoep_enabled

    @property
    def model_dtype(self) -> Dtype:
        """fp16 if fp16.enabled, else bf16 if bf16.enabled, else fp32 (``engine.py``)."""
        if self.fp16_enabled:
            return "fp16"
        if self.bf16_enabled:
            return "bf16"
        return "fp32"

    @property
    def grad_dtype(self) -> Dtype:
        """Gradient-accumulation dtype: data_types.grad_accum_dtype or the model dtype."""
        return self.grad_accum_dtype or self.model_dtype

    @property
    def comm_dtype(self) -> Dtype:
        return self.communication_data_type or self.model_dtype

    @property
    def client_optimizer_must_be_ds_cpu(self) -> bool:
        """True when ``deepspeed.initialize`` refuses a client optimizer (no ``optimizer`` section) that is not
        one of :data:`DS_CPU_OPTIMIZERS`: ``engine.py`` _configure_optimizer l.2342-2346 raises ZeRORuntimeException
        where ``zero_use_cpu_optimizer()`` -- ``offload_optimizer.device`` cpu or nvme as written, at any stage
        (l.1562-1565) -- and ``zero_force_ds_cpu_optimizer`` (default true, ``runtime/constants.py`` l.41-42).
        Turning the flag off lets any client optimizer through; it then steps the offloaded fp32 partitions on the
        CPU with its own (non-DeepSpeed) kernels, which the engine's message warns "in most cases will yield poor
        performance". The one place this fact lives (rule O011, the estimate's optimizer line, and the HF path's
        accelerate swap, :func:`advisor.config.hf.trainer_optimizer`, read it)."""
        return self.zero.offload_optimizer.device in ("cpu", "nvme") and bool(self.zero_force_ds_cpu_optimizer)

    @property
    def offload_optimizer_effective(self) -> Device:
        """Where optimizer state really lives, after DeepSpeed's stage rules.

        Stage 0: ignored ("none"). Stages 1/2: any device other than none is CPU offload
        (``stage_1_and_2.py``: no NVMe swapping below stage 3), except stage 1 + bf16 + fp32
        grad accumulation with nvme, where BF16_Optimizer is chosen and the block is ignored.
        Stage 3: as written.
        """
        dev = self.zero.offload_optimizer.device
        st = self.zero.stage
        if st == 0 or dev == "none":
            return "none"
        if st in (1, 2):
            if st == 1 and self.bf16_enabled and self.grad_dtype == "fp32" and dev == "nvme":
                return "none"
            return "cpu"
        return dev

    @property
    def contiguous_gradients_effective(self) -> bool:
        """``contiguous_gradients`` as the optimizer runs it. ZeRO-1/2 (DeepSpeedZeroOptimizer) forces it on
        under optimizer offload: ``stage_1_and_2.py`` l.299-300 ("CPU-Offload requires contiguous gradients")
        ``self.contiguous_gradients = contiguous_gradients or self.cpu_offload``, ``cpu_offload`` True for any
        ``offload_optimizer.device`` other than none (l.220-222), so a written ``false`` still gets the ipg bucket,
        grads_in_partition and the extra-large clone (l.1441-1446). Other stages as written (ZeRO-3: ``stage3.py``
        l.428 ``self.contiguous_gradients = contiguous_gradients``). ``zero.contiguous_gradients`` keeps the
        written value (DeepSpeedZeroConfig's)."""
        z = self.zero
        return bool(z.contiguous_gradients) or (z.stage in (1, 2) and self.offload_optimizer_effective != "none")

    @property
    def offload_param_effective(self) -> Device:
        """offload_param is honoured only by ZeRO-3."""
        return self.zero.offload_param.device if self.zero.stage == 3 else "none"


def pipeline_effective(ec: EffectiveConfig, pipeline_parallel: int) -> EffectiveConfig:
    """``ec`` as DeepSpeed 0.19.8 runs it on a model of ``pipeline_parallel`` stages (a PipelineModule when
    > 1): the one place the pipeline degree changes a config value, called once per plan
    (:class:`advisor.plan.Plan`), so every reader of ``zero.overlap_comm`` (the ledger's ZeRO-1/2 ipg buckets
    and flush orders, the movements' overlap flags, the step time) sees what the engine runs.

    ``overlap_comm`` is off at ZeRO-1/2 under pipeline parallelism: ``engine.py`` _configure_zero_optimizer
    l.2663-2666 ``if isinstance(self.module, PipelineModule): if overlap_comm: logger.warning("Pipeline
    parallelism does not support overlapped communication, will be disabled."); overlap_comm = False`` before
    it builds DeepSpeedZeroOptimizer (l.2670); BF16_Optimizer (ZeRO-1 with bf16 and fp32 accumulation,
    ``_configure_bf16_optimizer`` l.2363-2364) never reads the key (``bf16_optimizer.py`` has no
    overlap_comm), so false is what either wrapper runs. ZeRO-2/3 under a PipelineModule are refused
    (``pipe/engine.py`` l.76-77, rule G001); ZeRO-0 does not read it (rule Z002). Returns ``ec`` itself when
    nothing changes, else a copy (``ec`` is the file's effective config, which lint judges)."""
    if pipeline_parallel > 1 and ec.zero.stage in (1, 2) and ec.zero.overlap_comm:
        return replace(ec, zero=replace(ec.zero, overlap_comm=False), notes=list(ec.notes))
    return ec


# --------------------------------------------------------------------------------------------

def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _as_int(v: Any) -> int | None:
    """pydantic lax int: ints, and floats with no fractional part (hjson reads 5e8 as float)."""
    if _is_int(v):
        return v
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return int(v)
    return None


def _as_stage(v: Any) -> int | None:
    """``DeepSpeedZeroConfig.stage`` (a ZeroStageEnum, pydantic lax): ints, integral floats and
    strings such as "3" or "3.0" become the member (checked against DeepSpeedZeroConfig itself in
    tests/test_stage_values.py)."""
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return None
        return int(f) if math.isfinite(f) and f.is_integer() else None
    return _as_int(v)


def _as_bool(v: Any) -> bool | None:
    """pydantic lax bool: true/false, 0/1, and the strings it accepts."""
    if isinstance(v, bool):
        return v
    if _is_int(v) and v in (0, 1):
        return bool(v)
    if isinstance(v, str):
        s = v.strip().lower()
        if s in ("true", "yes", "on", "1", "t", "y"):
            return True
        if s in ("false", "no", "off", "0", "f", "n"):
            return False
    return None


def _as_float(v: Any) -> float | None:
    """A JSON number as a float (:func:`advisor.config.validation.float_of`: an int past the float
    range is the largest float of its sign), else None."""
    from advisor.config.validation import float_of
    return float_of(v)


class _Reader:
    """Reads one section with DeepSpeed's rules, recording notes."""

    def __init__(self, notes: list[Note], section: dict[str, Any], ptr: str, pydantic: bool):
        self.notes = notes
        self.section = section
        self.ptr = ptr
        self.pydantic = pydantic

    def _raw(self, *names: str) -> tuple[str | None, Any]:
        for n in names:
            if n in self.section:
                return n, self.section[n]
        return None, None

    def setting(self, conv, table: SectionDefaults, key: str, *also: str):
        """The value of ``table``'s setting ``key``, read under any of its spellings (then ``also``,
        deprecated spellings), with its DeepSpeed default (advisor.config.defaults)."""
        d: Default = table[key]
        return self.get(conv, d.value, *d.spellings, *also)

    def get(self, conv, default, *names: str):
        key, v = self._raw(*names)
        if key is None:
            return default
        p = f"{self.ptr}/{key}"
        if v == "auto" and self.pydantic:
            self.notes.append(Note(p, f'"auto" is dropped by DeepSpeed outside the HF Trainer; the default {default!r} applies', "auto-dropped"))
            return default
        if v is None and default is None:
            return None  # null where DeepSpeed's default is None (an Optional field): the default, no note
        out = conv(v)
        if out is None:
            self.notes.append(Note(p, f"value {v!r} is not usable here; estimate assumes the default {default!r}", "bad-value"))
            return default
        return out


def _section(raw: dict[str, Any], key: str) -> dict[str, Any]:
    v = raw.get(key)
    return v if isinstance(v, dict) else {}


def _dtype(v: Any) -> Dtype | None:
    return training_dtype(v)


def _path(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def bf16_section_key(raw: Any) -> str | None:
    """The top-level key DeepSpeed reads bf16 settings from: ``bf16``, else the legacy
    ``bfloat16`` (``runtime/precision_config.py:get_bfloat16_config``), else None."""
    if not isinstance(raw, dict):
        return None
    if "bf16" in raw:
        return "bf16"
    return next((old for old, new in LEGACY_SECTIONS.items() if new == "bf16" and old in raw), None)


def _device(v: Any) -> Device | None:
    if isinstance(v, str) and v.lower() in ("none", "cpu", "nvme"):
        return v.lower()  # type: ignore[return-value]
    if v is None:
        return "none"
    return None


#: (field, converter) of each section read by name from the defaults table, in reading order.
_OFFLOAD_PARAM_READ = (("device", _device), ("nvme_path", _path), ("buffer_count", _as_int),
                       ("buffer_size", _as_int), ("max_in_cpu", _as_int), ("pin_memory", _as_bool))
_OFFLOAD_OPTIMIZER_READ = (("device", _device), ("nvme_path", _path), ("buffer_count", _as_int),
                           ("pin_memory", _as_bool), ("pipeline_read", _as_bool), ("pipeline_write", _as_bool),
                           ("fast_init", _as_bool), ("ratio", _as_float), ("super_offload", _as_bool),
                           ("cpuadam_cores_perc", _as_float))
_AIO_READ = (("block_size", _as_int), ("queue_depth", _as_int), ("intra_op_parallelism", _as_int),
             ("single_submit", _as_bool), ("overlap_events", _as_bool), ("use_gds", _as_bool))


#: The top-level keys :func:`effective_config` reads (every part of EffectiveConfig comes from one of them; the
#: ``checkpoint`` and ``data_types`` sections, read for one setting each, are left out: equal effective configs do
#: not show their other settings unchanged). schema._typo_changes compares effective configs only for these.
TOP_LEVEL_READ: frozenset[str] = frozenset({
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
    "gradient_predivide_factor", "prescale_gradients", "fp16", "bf16", *LEGACY_SECTIONS, "communication_data_type",
    "zero_optimization", "optimizer", "aio", "activation_checkpointing", "zero_force_ds_cpu_optimizer"})


def effective_config(raw: dict[str, Any]) -> EffectiveConfig:
    """Build the EffectiveConfig DeepSpeed 0.19.8 would use for the raw config dict.

    Never raises on bad values: they fall back to the default with a ``bad-value`` note
    (schema validation and lint rules report them).
    """
    notes: list[Note] = []
    ec = EffectiveConfig(notes=notes)

    for name in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        v = raw.get(name)
        if v is not None and v != "auto":
            iv = _as_int(v)
            setattr(ec, name, iv)
            if iv is None:
                notes.append(Note(f"/{name}", f"{v!r} is not an integer", "bad-value"))
    gc = raw.get("gradient_clipping")
    if gc is not None and gc != "auto":  # TOP["gradient_clipping"] otherwise
        f = _as_float(gc)
        if f is not None:
            ec.gradient_clipping = f
    pf = _as_float(raw.get("gradient_predivide_factor"))  # read silently: rule Z005 / the schema report a bad value
    if pf is not None:
        ec.gradient_predivide_factor = pf
    ps = _as_bool(raw.get("prescale_gradients"))
    if ps is not None:
        ec.prescale_gradients = ps

    if "zero_force_ds_cpu_optimizer" in raw:  # truthiness, as DeepSpeed tests it (the field's comment)
        ec.zero_force_ds_cpu_optimizer = bool(raw["zero_force_ds_cpu_optimizer"])

    # AutoTP / AutoEP (the fields' sources); read silently: the schema reports a bad value
    tp = _section(raw, "tensor_parallel")
    ec.autotp_size = _as_int(tp.get("autotp_size")) or 0
    ep = _section(raw, "expert_parallel")
    ec.autoep_enabled = bool(ep.get("enabled"))  # truthiness: engine.py l.821 `not autoep_config.enabled`
    ec.autoep_size = _as_int(ep.get("autoep_size")) or 1
    ec.expert_tensor_parallel_size = _as_int(ep.get("expert_tensor_parallel_size")) or 1

    # precision -------------------------------------------------------------------------
    fp16 = _section(raw, "fp16")
    ec.fp16_enabled = bool(_Reader(notes, fp16, "/fp16", True).setting(_as_bool, FP16, "enabled"))
    ls = _as_float(fp16.get("loss_scale"))  # read silently: schema rules report a bad value
    if ls is not None:
        ec.fp16_loss_scale = ls
    bf16_key = bf16_section_key(raw)
    if bf16_key:
        if bf16_key != "bf16":
            notes.append(Note(f"/{bf16_key}", "legacy alias of bf16", "deprecated-alias"))
        ec.bf16_enabled = bool(_Reader(notes, _section(raw, bf16_key), f"/{bf16_key}", True).setting(
            _as_bool, BF16, "enabled"))
        ec.bf16_immediate_grad_update = bool(_Reader(notes, _section(raw, bf16_key), f"/{bf16_key}", True).setting(
            _as_bool, BF16, "immediate_grad_update"))
    # checkpoint.parallel_write.pipeline_stage: read as DeepSpeed does (defaults.ds_true_false, TRUE_FALSE_KEYS: 1 and
    # 1.0 are true); anything else DeepSpeed refuses: noted, the default assumed
    ec.checkpoint_parallel_write_pipeline = bool(_Reader(
        notes, _section(_section(raw, "checkpoint"), "parallel_write"), "/checkpoint/parallel_write", False).setting(
        ds_true_false, CHECKPOINT_PARALLEL_WRITE, "pipeline_stage"))
    dt = _section(raw, "data_types")
    ec.grad_accum_dtype = _dtype(dt.get("grad_accum_dtype"))
    ec.communication_data_type = _dtype(raw.get("communication_data_type"))

    # zero ------------------------------------------------------------------------------
    z = ec.zero
    zraw = raw.get("zero_optimization")
    if isinstance(zraw, bool):
        notes.append(Note("/zero_optimization", "legacy boolean form: true means stage 1", "deprecated-alias"))
        zraw = {"stage": 1 if zraw else 0}
    elif not isinstance(zraw, dict):
        zraw = {}
    zr = _Reader(notes, zraw, "/zero_optimization", True)
    stage = zr.setting(_as_stage, ZERO, "stage")
    z.stage = stage if stage in (0, 1, 2, 3) else ZERO.value("stage")
    # read in this order (the notes follow it); the defaults and spellings are the table's
    for name, conv in (("contiguous_gradients", _as_bool), ("reduce_scatter", _as_bool),
                       ("reduce_bucket_size", _as_int), ("allgather_partitions", _as_bool),
                       ("allgather_bucket_size", _as_int), ("overlap_comm", _as_bool), ("sub_group_size", _as_int),
                       ("prefetch_bucket_size", _as_int), ("param_persistence_threshold", _as_int),
                       ("model_persistence_threshold", _as_int), ("max_live_parameters", _as_int),
                       ("max_reuse_distance", _as_int), ("gather_16bit_weights_on_model_save", _as_bool),
                       ("round_robin_gradients", _as_bool), ("parameter_alignment", _as_bool),
                       ("zero_hpz_partition_size", _as_int), ("zero_quantized_weights", _as_bool),
                       ("zero_quantized_gradients", _as_bool), ("zero_quantized_nontrainable_weights", _as_bool),
                       ("allgather_sequential", _as_bool), ("memory_efficient_linear", _as_bool)):
        # a deprecated field translated to this one is read after its spellings
        old = tuple(d.field for d in ZERO.deprecated() if d.replaced_by == name)
        setattr(z, name, zr.setting(conv, ZERO, name, *old))
    if z.overlap_comm is None:  # DeepSpeedZeroConfig.overlap_comm_valid: True at stage 3, else False
        z.overlap_comm = z.stage == 3
    if z.allgather_sequential:
        z.prefetch_bucket_size = 1

    # offload blocks, else their deprecated boolean spellings (cpu_offload_param, cpu_offload: the
    # table's deprecated fields replaced by them)
    for key, cls, table, convs in (("offload_param", OffloadParam, OFFLOAD_PARAM, _OFFLOAD_PARAM_READ),
                                   ("offload_optimizer", OffloadOptimizer, OFFLOAD_OPTIMIZER, _OFFLOAD_OPTIMIZER_READ)):
        sec = zraw.get(key)
        old = next(d.field for d in ZERO.deprecated() if d.replaced_by == key)
        if isinstance(sec, dict):
            r = _Reader(notes, sec, f"/zero_optimization/{key}", True)
            setattr(z, key, cls(**{name: r.setting(conv, table, name) for name, conv in convs}))
        elif _as_bool(zraw.get(old)):
            setattr(z, key, cls(device="cpu"))
            notes.append(Note(f"/zero_optimization/{old}", f"deprecated: means {key}.device cpu", "deprecated-alias"))

    if z.stage < 3 and z.offload_param.device != "none":
        notes.append(Note("/zero_optimization/offload_param", f"ignored at stage {z.stage}: only ZeRO-3 offloads parameters"))
    if z.stage == 0 and z.offload_optimizer.device != "none":
        notes.append(Note("/zero_optimization/offload_optimizer", "ignored at stage 0 (it only switches Adam to DeepSpeedCPUAdam)"))
    if z.stage in (1, 2) and z.offload_optimizer.device == "nvme":
        if ec.offload_optimizer_effective == "none":
            notes.append(Note("/zero_optimization/offload_optimizer/device",
                              "ignored: stage 1 + bf16 + fp32 grad accumulation uses BF16_Optimizer, all state on the accelerator"))
        else:
            notes.append(Note("/zero_optimization/offload_optimizer/device",
                              f"nvme at stage {z.stage} is plain CPU offload: NVMe swapping exists only in ZeRO-3"))

    # optimizer -------------------------------------------------------------------------
    opt = raw.get("optimizer")
    if isinstance(opt, dict):
        params = opt.get("params") if isinstance(opt.get("params"), dict) else {}
        t = opt.get("type")
        ec.optimizer = Optimizer(
            type=t if isinstance(t, str) else None,
            torch_adam=bool(_as_bool(params.get("torch_adam")) or False),
            adam_w_mode=_as_bool(params.get("adam_w_mode")) if _as_bool(params.get("adam_w_mode")) is not None else True,
            params=dict(params),
        )

    # aio -------------------------------------------------------------------------------
    a = _section(raw, "aio")
    ar = _Reader(notes, a, "/aio", False)
    ec.aio = Aio(**{name: ar.setting(conv, AIO, name) for name, conv in _AIO_READ})
    ec.activation_checkpointing = dict(_section(raw, "activation_checkpointing"))
    return ec


def derive_batch(ec: EffectiveConfig, dp_world_size: int) -> tuple[int | None, int | None, int | None, str | None]:
    """DeepSpeed's batch-size rule (``runtime/config.py`` ``_set_batch_related_parameters``).

    Returns (train_batch_size, micro_batch, grad_accum, error) for a data-parallel world size;
    ``error`` is DeepSpeed's complaint, or None when the triple is consistent.
    """
    tb, mb, ga = ec.train_batch_size, ec.train_micro_batch_size_per_gpu, ec.gradient_accumulation_steps
    w = dp_world_size
    given = {"train_batch_size": tb, "train_micro_batch_size_per_gpu": mb, "gradient_accumulation_steps": ga}
    bad = [f"{k}={v}" for k, v in given.items() if v is not None and v <= 0]
    if bad or w <= 0:
        # DeepSpeed asserts all > 0 (runtime/config.py _batch_assertion); derive nothing from them
        return tb, mb, ga, "batch sizes must be positive: " + ", ".join(bad or [f"world size {w}"])
    if tb is not None and mb is not None and ga is not None:
        pass
    elif tb is not None and mb is not None:
        ga = tb // mb // w
    elif tb is not None and ga is not None:
        mb = tb // w // ga
    elif mb is not None and ga is not None:
        tb = mb * ga * w
    elif tb is not None:
        ga = 1
        mb = tb // w
    elif mb is not None:
        tb = mb * w
        ga = 1
    else:
        return None, None, None, "either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"
    if tb is None or mb is None or ga is None or tb <= 0 or mb <= 0 or ga <= 0:
        return tb, mb, ga, (f"batch sizes must be positive (train_batch_size={tb}, micro={mb}, "
                            f"gradient_accumulation_steps={ga} at world size {w})")
    if tb != mb * ga * w:
        return tb, mb, ga, (f"train_batch_size {tb} != {mb} (micro-batch) x {ga} (gradient accumulation) x {w} "
                            f"(data-parallel world size) = {mb * ga * w}")
    return tb, mb, ga, None


#: Where :func:`micro_batch_for`'s micro-batch came from.
MICRO_BATCH_ORIGINS = ("given", "config", "derived", "default")


def batch_world_size(ec: EffectiveConfig, cluster: Any) -> int:
    """The ``world_size`` (ranks) ``DeepSpeedConfig`` runs its batch rule over (:func:`derive_batch`) for ``ec``
    on ``cluster`` (an :class:`advisor.plan.Cluster`): ``__init__`` l.456-474 takes
    ``mpu.get_data_parallel_world_size()`` with an mpu (Megatron's; a PipelineModule's grid, ``__init__.py``
    l.582-584), else ``dist.get_world_size()`` / the config's ``sequence_parallel_size`` (l.468-471). The
    config's AutoTP (:attr:`EffectiveConfig.autotp`) comes with no mpu: ``deepspeed.initialize`` builds
    ``DeepSpeedConfig(config, mpu)`` (``__init__.py`` l.554) before the engine makes the TP groups
    (``engine.py`` _configure_tensor_parallel_states l.956-957 sets ``self.mpu = groups``), and
    ``merge_tp_model_init_into_config`` (``runtime/tensor_parallel/init_utils.py`` l.89-91) only creates the groups,
    passing no mpu. So under AutoTP (no pipeline) the batch rule divides by W / SP, not W / (TP x SP): with
    ``train_batch_size`` 4, micro-batch 1, GA 1 on 8 ranks at AutoTP 2 DeepSpeed asserts 4 != 1 x 1 x 8.
    Otherwise :attr:`advisor.plan.Cluster.dp_world_size` (W / (TP x PP x SP))."""
    if ec.autotp and cluster.pipeline_parallel <= 1:
        return max(1, cluster.world_size // max(1, cluster.sequence_parallel))
    return cluster.dp_world_size


def micro_batch_for(ec: EffectiveConfig, dp_world_size: int, given: int | None = None) -> tuple[int, str]:
    """The micro-batch (sequences per rank per micro-step) a plan is estimated at, and its origin: the
    one resolution every reader (activations, pipe buffers, movements, step time, reported workload)
    calls.

    * ``given`` (``--micro-batch``: ``Workload.micro_batch``), origin "given": a what-if the user asked
      for, even where the config's batch keys make DeepSpeed run another (:func:`implied_micro_batch`
      says which, for the note);
    * else the micro-batch DeepSpeed runs: ``train_micro_batch_size_per_gpu`` when written (origin
      "config"), else the one ``runtime/config.py`` ``DeepSpeedConfig._set_batch_related_parameters``
      (l.607-649) derives over the data-parallel world size -- train_batch_size // world_size //
      gradient_accumulation_steps (l.625-629), train_batch_size // world_size with GA 1 (l.637-640) --
      (:func:`derive_batch`; origin "derived"). ``dp_world_size`` is the ``world_size`` of
      ``DeepSpeedConfig.__init__`` (l.456-474): ``mpu.get_data_parallel_world_size()`` with an mpu (the
      PipelineModule's grid, ``__init__.py`` l.583-584; Megatron's), dist world / Ulysses degree
      without one (l.461, l.468-469): :attr:`advisor.plan.Cluster.dp_world_size`;
    * else 1 (origin "default"), only when DeepSpeed refuses the batch keys (``_batch_assertion``
      l.590-605: rule B001) or has none to derive from."""
    if given:
        return int(given), "given"
    _, mb, _, err = derive_batch(ec, max(1, int(dp_world_size)))
    if err is None and mb:
        return int(mb), ("config" if ec.train_micro_batch_size_per_gpu else "derived")
    return 1, "default"


def implied_micro_batch(ec: EffectiveConfig, dp_world_size: int) -> int | None:
    """The micro-batch DeepSpeed runs for ``ec``'s batch keys at ``dp_world_size`` data-parallel ranks
    (:func:`micro_batch_for` without a given one), None when DeepSpeed refuses them (rule B001)."""
    mb, origin = micro_batch_for(ec, dp_world_size)
    return None if origin == "default" else mb


def largest_divisor_at_most(n: int, top: int) -> int | None:
    """The largest divisor of ``n`` (a positive integer) that is at most ``top`` (1 when ``top``
    < 2); None when ``n`` is over 10^12, too large to factor here (a trial division to sqrt(n)).
    Plain arithmetic, no DeepSpeed fact: the micro-batch a rank's sequences per step split into
    whole micro-steps (``keep_train_batch``; views/fixes' smaller micro-batch)."""
    import math

    if n > 10 ** 12:
        return None
    best = 1
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            for m in (d, n // d):
                if best < m <= top:
                    best = m
    return best


def keep_train_batch(tb: int, dp_world_size: int, micro: int | None = None,
                     grad_accum: int | None = None) -> tuple[int, int] | None:
    """(micro-batch, gradient accumulation) that keep ``train_batch_size`` ``tb`` (sequences per
    optimizer step) at ``dp_world_size`` data-parallel ranks: DeepSpeed 0.19.8 asserts
    ``train_batch == micro_batch * grad_acc * self.world_size`` (``runtime/config.py``
    ``_batch_assertion``, l.590-605; ``self.world_size`` is the data-parallel size). In order of
    preference: the micro-batch kept and the accumulation tb / (micro x W), when integral; else
    the accumulation kept and the micro-batch tb / (accumulation x W) when that is no larger than
    the given micro-batch (a larger one multiplies the activations: never offered as the keeping
    fix); else the largest micro-batch at most the given one (or tb / (accumulation x W) rounded
    down, or tb / W) that divides tb / W, with the accumulation that makes up the rest. None when
    tb is not a multiple of W (no micro x accumulation keeps it), or tb / W is too large to factor
    (over 10^12)."""
    w = dp_world_size
    if tb <= 0 or w <= 0 or tb % w:
        return None
    per_rank = tb // w
    if micro and per_rank % micro == 0:
        return micro, per_rank // micro
    if grad_accum and per_rank % grad_accum == 0 and (not micro or per_rank // grad_accum <= micro):
        return per_rank // grad_accum, grad_accum
    top = micro if micro else (max(1, per_rank // grad_accum) if grad_accum else per_rank)
    m = largest_divisor_at_most(per_rank, top)
    return None if m is None else (m, per_rank // m)


def config_sequence_parallel(raw: Any) -> int:
    """The config's DeepSpeed-Ulysses ``sequence_parallel_size`` as a rank count (DeepSpeed
    0.19.8 ``runtime/config.py`` ``DeepSpeedConfig._initialize_params``:
    ``get_scalar_param(param_dict, SEQUENCE_PARALLEL_SIZE, 1)``; default 1).

    An int >= 1 (not a bool) is returned as written, however large: whether it divides the
    world size is rule G002's finding, never an input error (the config was readable). Any
    other value (missing, a bool, a string, a float, zero, negative) is 1 here; the schema
    rules (S003 wrong type, S004 out of range) report it. Never raises."""
    v = raw.get("sequence_parallel_size") if isinstance(raw, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else 1
