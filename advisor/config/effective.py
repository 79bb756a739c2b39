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

Defaults are those of 0.19.8 (``runtime/constants.py``, ``runtime/zero/config.py``,
``runtime/zero/offload_config.py``, ``runtime/precision_config.py``,
``runtime/swap_tensor/constants.py``); see ../shared/reference/deepspeed-0.19.8-state-accounting.md
section 7. Values of the wrong type are left to schema validation: here they fall back to the
default and a note says so, so that estimate never crashes on a bad config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

Dtype = Literal["fp16", "bf16", "fp32"]
Device = Literal["none", "cpu", "nvme"]

DTYPE_BYTES: dict[str, int] = {"fp16": 2, "bf16": 2, "fp32": 4}

_DTYPE_ALIASES = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "torch.float32": "fp32",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16",
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
}


@dataclass(frozen=True)
class Note:
    """Something about how DeepSpeed reads the config that a user would not expect."""

    pointer: str
    message: str
    kind: Literal["auto-dropped", "ignored", "deprecated-alias", "bad-value", "derived"] = "ignored"


@dataclass
class OffloadParam:
    """``zero_optimization.offload_param`` (``offload_config.py`` DeepSpeedZeroOffloadParamConfig)."""

    device: Device = "none"
    nvme_path: str | None = None
    buffer_count: int = 5
    buffer_size: int = 100_000_000  # elements
    max_in_cpu: int = 1_000_000_000  # elements
    pin_memory: bool = True  # 0.19.8 default (older releases: false)


@dataclass
class OffloadOptimizer:
    """``zero_optimization.offload_optimizer`` (DeepSpeedZeroOffloadOptimizerConfig)."""

    device: Device = "none"
    nvme_path: str | None = None
    buffer_count: int = 4
    pin_memory: bool = True
    pipeline_read: bool = False
    pipeline_write: bool = False
    fast_init: bool = False
    ratio: float = 1.0
    super_offload: bool = False


@dataclass
class Aio:
    """``aio`` (``runtime/swap_tensor/constants.py``)."""

    block_size: int = 1_048_576  # bytes
    queue_depth: int = 8
    intra_op_parallelism: int = 1
    single_submit: bool = False
    overlap_events: bool = True
    use_gds: bool = False


@dataclass
class Zero:
    """``zero_optimization`` (``runtime/zero/config.py`` DeepSpeedZeroConfig). Sizes in elements."""

    stage: int = 0
    contiguous_gradients: bool = True
    reduce_scatter: bool = True
    reduce_bucket_size: int = 500_000_000
    allgather_partitions: bool = True
    allgather_bucket_size: int = 500_000_000
    overlap_comm: bool = False  # None in DeepSpeed -> True for stage 3, else False
    sub_group_size: int = 1_000_000_000
    prefetch_bucket_size: int = 50_000_000
    param_persistence_threshold: int = 100_000
    model_persistence_threshold: int = 9_223_372_036_854_775_807  # sys.maxsize
    max_live_parameters: int = 1_000_000_000
    max_reuse_distance: int = 1_000_000_000
    gather_16bit_weights_on_model_save: bool = False
    round_robin_gradients: bool = False
    parameter_alignment: bool = False
    zero_hpz_partition_size: int = 1
    #: ZeRO++ qwZ / qgZ (runtime/zero/config.py zero_quantized_weights / zero_quantized_gradients).
    zero_quantized_weights: bool = False
    zero_quantized_gradients: bool = False
    allgather_sequential: bool = False
    offload_param: OffloadParam = field(default_factory=OffloadParam)
    offload_optimizer: OffloadOptimizer = field(default_factory=OffloadOptimizer)


@dataclass
class Optimizer:
    """``optimizer`` section (plain dict in DeepSpeed; params go to the constructor)."""

    type: str | None = None  # as written; None when the section is absent (client optimizer)
    torch_adam: bool = False
    adam_w_mode: bool = True
    params: dict[str, Any] = field(default_factory=dict)

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
    gradient_clipping: float = 1.0  # 0.19.8 default (older releases: 0.0)
    fp16_enabled: bool = False
    bf16_enabled: bool = False
    #: data_types.grad_accum_dtype; None = the model dtype.
    grad_accum_dtype: Dtype | None = None
    #: communication_data_type; None = the model dtype.
    communication_data_type: Dtype | None = None
    zero: Zero = field(default_factory=Zero)
    optimizer: Optimizer = field(default_factory=Optimizer)
    aio: Aio = field(default_factory=Aio)
    activation_checkpointing: dict[str, Any] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)

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
    def offload_param_effective(self) -> Device:
        """offload_param is honoured only by ZeRO-3."""
        return self.zero.offload_param.device if self.zero.stage == 3 else "none"


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
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    return None


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

    def get(self, conv, default, *names: str):
        key, v = self._raw(*names)
        if key is None:
            return default
        p = f"{self.ptr}/{key}"
        if v == "auto" and self.pydantic:
            self.notes.append(Note(p, f'"auto" is dropped by DeepSpeed outside the HF Trainer; the default {default!r} applies', "auto-dropped"))
            return default
        out = conv(v)
        if out is None:
            self.notes.append(Note(p, f"value {v!r} is not usable here; estimate assumes the default {default!r}", "bad-value"))
            return default
        return out


def _section(raw: dict[str, Any], key: str) -> dict[str, Any]:
    v = raw.get(key)
    return v if isinstance(v, dict) else {}


def _dtype(v: Any) -> Dtype | None:
    if isinstance(v, str):
        return _DTYPE_ALIASES.get(v.strip().lower())  # type: ignore[return-value]
    return None


def _device(v: Any) -> Device | None:
    if isinstance(v, str) and v.lower() in ("none", "cpu", "nvme"):
        return v.lower()  # type: ignore[return-value]
    if v is None:
        return "none"
    return None


def effective_config(raw: dict[str, Any]) -> EffectiveConfig:
    """Build the EffectiveConfig DeepSpeed 0.19.8 would use for the raw config dict.

    Never raises on bad values: they fall back to the default with a ``bad-value`` note
    (schema validation and lint rules report them).
    """
    notes: list[Note] = []
    ec = EffectiveConfig(notes=notes)
    top = _Reader(notes, raw, "", pydantic=False)

    for name in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        v = raw.get(name)
        if v is not None and v != "auto":
            iv = _as_int(v)
            setattr(ec, name, iv)
            if iv is None:
                notes.append(Note(f"/{name}", f"{v!r} is not an integer", "bad-value"))
    gc = raw.get("gradient_clipping")
    if gc is not None and gc != "auto":
        f = _as_float(gc)
        if f is not None:
            ec.gradient_clipping = f

    # precision -------------------------------------------------------------------------
    fp16 = _section(raw, "fp16")
    ec.fp16_enabled = bool(_Reader(notes, fp16, "/fp16", True).get(_as_bool, False, "enabled"))
    bf16_key = "bf16" if "bf16" in raw else ("bfloat16" if "bfloat16" in raw else None)
    if bf16_key:
        if bf16_key == "bfloat16":
            notes.append(Note("/bfloat16", "legacy alias of bf16", "deprecated-alias"))
        ec.bf16_enabled = bool(_Reader(notes, _section(raw, bf16_key), f"/{bf16_key}", True).get(_as_bool, False, "enabled"))
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
    stage = zr.get(_as_stage, 0, "stage")
    z.stage = stage if stage in (0, 1, 2, 3) else 0
    z.contiguous_gradients = zr.get(_as_bool, True, "contiguous_gradients")
    z.reduce_scatter = zr.get(_as_bool, True, "reduce_scatter")
    z.reduce_bucket_size = zr.get(_as_int, z.reduce_bucket_size, "reduce_bucket_size")
    z.allgather_partitions = zr.get(_as_bool, True, "allgather_partitions")
    z.allgather_bucket_size = zr.get(_as_int, z.allgather_bucket_size, "allgather_bucket_size")
    oc = zr.get(_as_bool, None, "overlap_comm")
    z.overlap_comm = (z.stage == 3) if oc is None else oc
    z.sub_group_size = zr.get(_as_int, z.sub_group_size, "sub_group_size")
    z.prefetch_bucket_size = zr.get(_as_int, z.prefetch_bucket_size, "stage3_prefetch_bucket_size", "prefetch_bucket_size")
    z.param_persistence_threshold = zr.get(_as_int, z.param_persistence_threshold,
                                           "stage3_param_persistence_threshold", "param_persistence_threshold")
    z.model_persistence_threshold = zr.get(_as_int, z.model_persistence_threshold,
                                           "stage3_model_persistence_threshold", "model_persistence_threshold")
    z.max_live_parameters = zr.get(_as_int, z.max_live_parameters, "stage3_max_live_parameters", "max_live_parameters")
    z.max_reuse_distance = zr.get(_as_int, z.max_reuse_distance, "stage3_max_reuse_distance", "max_reuse_distance")
    z.gather_16bit_weights_on_model_save = zr.get(
        _as_bool, False, "stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
        "stage3_gather_fp16_weights_on_model_save")
    z.round_robin_gradients = zr.get(_as_bool, False, "round_robin_gradients")
    z.parameter_alignment = zr.get(_as_bool, False, "parameter_alignment")
    z.zero_hpz_partition_size = zr.get(_as_int, 1, "zero_hpz_partition_size")
    z.zero_quantized_weights = zr.get(_as_bool, False, "zero_quantized_weights")
    z.zero_quantized_gradients = zr.get(_as_bool, False, "zero_quantized_gradients")
    z.allgather_sequential = zr.get(_as_bool, False, "stage3_allgather_sequential", "allgather_sequential")
    if z.allgather_sequential:
        z.prefetch_bucket_size = 1

    op = zraw.get("offload_param")
    if isinstance(op, dict):
        r = _Reader(notes, op, "/zero_optimization/offload_param", True)
        z.offload_param = OffloadParam(
            device=r.get(_device, "none", "device"),
            nvme_path=r.get(lambda v: v if isinstance(v, str) else None, None, "nvme_path"),
            buffer_count=r.get(_as_int, 5, "buffer_count"),
            buffer_size=r.get(_as_int, 100_000_000, "buffer_size"),
            max_in_cpu=r.get(_as_int, 1_000_000_000, "max_in_cpu"),
            pin_memory=r.get(_as_bool, True, "pin_memory"),
        )
    elif _as_bool(zraw.get("cpu_offload_param")):
        z.offload_param = OffloadParam(device="cpu")
        notes.append(Note("/zero_optimization/cpu_offload_param", "deprecated: means offload_param.device cpu", "deprecated-alias"))
    oo = zraw.get("offload_optimizer")
    if isinstance(oo, dict):
        r = _Reader(notes, oo, "/zero_optimization/offload_optimizer", True)
        z.offload_optimizer = OffloadOptimizer(
            device=r.get(_device, "none", "device"),
            nvme_path=r.get(lambda v: v if isinstance(v, str) else None, None, "nvme_path"),
            buffer_count=r.get(_as_int, 4, "buffer_count"),
            pin_memory=r.get(_as_bool, True, "pin_memory"),
            pipeline_read=r.get(_as_bool, False, "pipeline_read"),
            pipeline_write=r.get(_as_bool, False, "pipeline_write"),
            fast_init=r.get(_as_bool, False, "fast_init"),
            ratio=r.get(_as_float, 1.0, "ratio"),
            super_offload=r.get(_as_bool, False, "super_offload"),
        )
    elif _as_bool(zraw.get("cpu_offload")):
        z.offload_optimizer = OffloadOptimizer(device="cpu")
        notes.append(Note("/zero_optimization/cpu_offload", "deprecated: means offload_optimizer.device cpu", "deprecated-alias"))

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
    ec.aio = Aio(
        block_size=ar.get(_as_int, 1_048_576, "block_size"),
        queue_depth=ar.get(_as_int, 8, "queue_depth"),
        intra_op_parallelism=ar.get(_as_int, 1, "intra_op_parallelism"),
        single_submit=ar.get(_as_bool, False, "single_submit"),
        overlap_events=ar.get(_as_bool, True, "overlap_events"),
        use_gds=ar.get(_as_bool, False, "use_gds"),
    )
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
