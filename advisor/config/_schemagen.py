"""Generate ``schemas/deepspeed-config.schema.json`` from DeepSpeed's own config models.

Run (needs the ``engine`` extra, i.e. torch and deepspeed installed)::

    python -m advisor.config._schemagen            # rewrite the committed schema
    python -m advisor.config._schemagen --check    # exit 1 if the committed schema is stale

Two sources:

* the pydantic sections (``DeepSpeedConfigModel`` subclasses, ``extra="forbid"``): walked
  field by field — names *and* aliases (``populate_by_name=True`` accepts both), types, enums,
  ``ge``/``gt``/``le``/``lt`` constraints, defaults, deprecated fields and their replacement.
  These objects get ``additionalProperties: false`` and ``x-ds-read: "pydantic"``;
* the plain-dict sections DeepSpeed reads with ``dict.get`` (top level, ``optimizer``, ``aio``,
  ``checkpoint``, ...): hand-written below from ``runtime/config.py`` and the section
  constants. They also list their keys with ``additionalProperties: false`` so a generic
  editor flags typos, but carry ``x-ds-read: "dict"``: DeepSpeed silently ignores unknown keys
  there, and ``advisor.config.schema`` reports those as warnings, not errors.

Custom annotations (ignored by JSON Schema validators, read by ``advisor.config.schema``):
``x-ds-read`` ("pydantic" | "dict" | "open"), ``x-ds-removed`` (a key 0.19.8 refuses, with
DeepSpeed's message and the replacement), ``x-hf-auto`` (the HF Trainer / accelerate fill
this key's ``"auto"``), ``x-ds-replacement`` (a deprecated key's replacement),
``x-ds-model`` (the pydantic class a section comes from), ``x-ds-true-false`` (a key DeepSpeed checks with
``value in [True, False]``, its source: ``defaults.TRUE_FALSE_KEYS``), ``x-ds-unchecked`` (a bound DeepSpeed never
checks: what a value outside it does, with the source; rule S004 gives it as the reason).

Only this module imports deepspeed; nothing imported by ``ds-advisor lint`` imports it.
"""

from __future__ import annotations

import ast
import copy
import enum
import inspect
import json
import pathlib
import sys
import textwrap
import types
import typing
from typing import Any

from advisor.config.dtypes import TRAINING_DTYPE_ALIASES

SCHEMA_PATH = pathlib.Path(__file__).resolve().parents[2] / "schemas" / "deepspeed-config.schema.json"
SCHEMA_ID = "https://deepspeed-advisor.invalid/schemas/deepspeed-config.schema.json"

#: Dotted paths whose "auto" the HF Trainer (transformers ``integrations/deepspeed.py``
#: ``trainer_config_process``/``trainer_config_finalize``) or accelerate (``DeepSpeedPlugin``,
#: ``Accelerator._prepare_deepspeed``) fill in. Only the alias spelling of the stage3_* keys
#: is filled (``stage3_prefetch_bucket_size``, not ``prefetch_bucket_size``).
HF_AUTO_PATHS = frozenset({
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
    "optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps", "optimizer.params.weight_decay",
    "scheduler.params.warmup_min_lr", "scheduler.params.warmup_max_lr", "scheduler.params.warmup_num_steps",
    "scheduler.params.total_num_steps",
    "fp16.enabled", "bf16.enabled",
    "zero_optimization.stage",
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save",
    "zero_optimization.offload_optimizer.device", "zero_optimization.offload_param.device",
    "zero_optimization.offload_optimizer.nvme_path", "zero_optimization.offload_param.nvme_path",
})

#: What replaced each key DeepSpeed 0.19.8 refuses (``runtime/config.py``
#: ``_REMOVED_TOP_LEVEL_CONFIG_KEYS`` / ``_REMOVED_ZERO_CONFIG_KEYS``); None: nothing did.
REMOVED_REPLACEMENTS: dict[str, str | None] = {
    "nebula": None,
    "compression_training": None,
    "amp": "fp16, bf16 or torch_autocast",
    "quantize_training": None,
    "sparse_gradients": None,
    "eigenvalue": None,
    "sparse_attention": None,
    "elasticity": "fixed train_batch_size / train_micro_batch_size_per_gpu / gradient_accumulation_steps",
    "graph_harvesting": None,
    "curriculum_learning": "data_efficiency.data_sampling.curriculum_learning",
    "progressive_layer_drop": None,
    "mics_shard_size": "plain ZeRO-3 (or ZeRO++ zero_hpz_partition_size for hierarchical partitioning)",
    "mics_hierarchical_params_gather": None,
    "zeropp_loco_param": "zero_quantized_gradients without LoCo",
}

DTYPE_STRINGS = list(TRAINING_DTYPE_ALIASES)  # DeepSpeed's DtypeEnum spellings (advisor.config.dtypes)

# Overrides for pydantic fields whose real constraint lives in a validator, not in the type.
FIELD_OVERRIDES: dict[tuple[str, str], dict[str, Any]] = {
    ("ZenFlowConfig", "select_strategy"): {"enum": ["auto", "step", "epoch"]},
    ("ZenFlowConfig", "select_interval"): {"anyOf": [{"const": "auto"}, {"type": "integer"}]},
    ("ZenFlowConfig", "update_interval"): {"anyOf": [{"const": "auto"}, {"type": "integer", "minimum": 1}]},
    # validator: finite, >= 0, bool rejected
    ("DeepSpeedFP16Config", "loss_scale"): {"type": "number", "minimum": 0},
    # a torch.dtype object in Python; a JSON config can only give a dtype name
    ("TPTrainingConfig", "dtype"): {"enum": DTYPE_STRINGS},
    # Python objects, cannot come from a JSON file
    ("TPConfig", "mpu"): {"type": "null"},
    ("TPConfig", "tp_group"): {"type": "null"},
    # the before-validator wraps a single string into a list
    ("DeepSpeedZeroLeafModuleConfig", "classes"): {"type": ["array", "string"], "items": {"type": "string"}},
    ("DeepSpeedZeroLeafModuleConfig", "names"): {"type": ["array", "string"], "items": {"type": "string"}},
    ("DeepSpeedZeroLeafModuleConfig", "name_suffixes"): {"type": ["array", "string"], "items": {"type": "string"}},
}


# ------------------------------------------------------------------------------------------
# pydantic -> JSON Schema

def _attribute_docs(cls: type) -> dict[str, str]:
    """Field docstrings (the string literal after each annotated attribute) of ``cls``."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith(("pydantic", "builtins")):
            continue
        try:
            src = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(src).body[0].body  # type: ignore[attr-defined]
        for prev, node in zip(body, body[1:]):
            if (isinstance(prev, ast.AnnAssign) and isinstance(prev.target, ast.Name)
                    and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)):
                text = " ".join(inspect.cleandoc(node.value.value).split())
                out[prev.target.id] = text
    return out


def _jsonable(v: Any) -> Any:
    if isinstance(v, enum.Enum):
        v = v.value
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return v
    if isinstance(v, pathlib.PurePath):
        return str(v)
    if isinstance(v, (list, tuple)):
        items = [_jsonable(x) for x in v]
        return items if all(x is not _NOJSON for x in items) else _NOJSON
    if isinstance(v, dict):
        items = {str(k): _jsonable(x) for k, x in v.items()}
        return items if all(x is not _NOJSON for x in items.values()) else _NOJSON
    return _NOJSON


_NOJSON = object()


class _Gen:
    """Walks pydantic models into ``$defs``."""

    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}
        self.models: dict[str, type] = {}

    def type_schema(self, tp: Any) -> dict[str, Any]:
        """JSON Schema for a Python/pydantic type annotation."""
        import pydantic

        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if tp is typing.Any or tp is object:
            return {}
        if origin in (typing.Union, types.UnionType):
            non_null = [a for a in args if a is not type(None)]
            subs = [self.type_schema(a) for a in non_null]
            nullable = len(non_null) < len(args)
            if all(set(s) == {"type"} for s in subs):
                ts: list[str] = []
                for s in subs:
                    t = s["type"]
                    ts.extend(t if isinstance(t, list) else [t])
                if nullable:
                    ts.append("null")
                return {"type": ts[0] if len(ts) == 1 else ts}
            if nullable and len(subs) == 1 and isinstance(subs[0].get("type"), str):
                return dict(subs[0], type=[subs[0]["type"], "null"])
            if nullable:
                subs.append({"type": "null"})
            return subs[0] if len(subs) == 1 else {"anyOf": subs}
        if origin is typing.Literal:
            return {"enum": list(args)}
        if origin in (list, typing.List, tuple, set):
            s: dict[str, Any] = {"type": "array"}
            if args and origin is not tuple:
                s["items"] = self.type_schema(args[0])
            return s
        if origin in (dict, typing.Dict):
            return {"type": "object"}
        if isinstance(tp, type):
            if issubclass(tp, enum.Enum):
                vals = []
                for m in tp:
                    if m.name == "max_stage":  # ZeroStageEnum alias of 3
                        continue
                    if m.value not in vals:
                        vals.append(m.value)
                return {"enum": vals}
            if issubclass(tp, pydantic.BaseModel):
                return {"type": "object", "$ref": f"#/$defs/{self.model(tp)}"}
            if tp is bool:
                return {"type": "boolean"}
            if issubclass(tp, int):
                return {"type": "integer"}
            if tp is float:
                return {"type": "number"}
            if tp is str or issubclass(tp, pathlib.PurePath):
                return {"type": "string"}
            if tp in (list, tuple, set):
                return {"type": "array"}
            if tp is dict:
                return {"type": "object"}
        return {}

    def model(self, cls: type) -> str:
        """Add ``cls`` to ``$defs`` (once) and return its name there."""
        import annotated_types as at
        from pydantic_core import PydanticUndefined

        name = cls.__name__
        if name in self.defs:
            return name
        self.defs[name] = {}  # placeholder against recursion
        self.models[name] = cls
        docs = _attribute_docs(cls)
        props: dict[str, Any] = {}
        for fname, field in cls.model_fields.items():
            s = dict(FIELD_OVERRIDES.get((name, fname)) or self.type_schema(field.annotation))
            for m in field.metadata:
                if isinstance(m, at.Ge):
                    s["minimum"] = m.ge
                elif isinstance(m, at.Gt):
                    s["exclusiveMinimum"] = m.gt
                elif isinstance(m, at.Le):
                    s["maximum"] = m.le
                elif isinstance(m, at.Lt):
                    s["exclusiveMaximum"] = m.lt
            default = field.default
            if default is PydanticUndefined and field.default_factory is not None:
                try:
                    default = field.default_factory()
                except TypeError:
                    default = PydanticUndefined
            if default is not PydanticUndefined:
                if isinstance(default, dict) and "$ref" in s:
                    default = _NOJSON  # e.g. TensorBoardConfig = {}: fine as is, no need to repeat
                jd = _jsonable(default)
                if jd is not _NOJSON:
                    s["default"] = jd
            doc = field.description or docs.get(fname)
            if doc:
                s["description"] = doc
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            if extra.get("deprecated"):
                s["deprecated"] = True
                if extra.get("new_param"):
                    s["x-ds-replacement"] = extra["new_param"]
            if field.exclude:
                s["x-ds-internal"] = True
            props[fname] = s
            if field.alias and field.alias != fname:
                alias_s = dict(s)
                alias_s["x-ds-field"] = fname
                props[field.alias] = alias_s
                props[fname] = dict(s, **{"x-ds-alias": field.alias})
        conflicts = [
            {"not": {"type": "object", "required": [s["x-ds-alias"], fname]}, "x-ds-alias-conflict": [s["x-ds-alias"], fname]}
            for fname, s in props.items() if "x-ds-alias" in s
        ]
        self.defs[name] = {  # no "type" here: the referring site says object (or object|boolean|null)
            "x-ds-read": "pydantic",
            "x-ds-model": f"{cls.__module__}.{cls.__qualname__}",
            "description": " ".join(inspect.cleandoc(cls.__doc__ or name).split()),
            "properties": props,
            "additionalProperties": False,
        }
        if conflicts:
            # populate_by_name accepts either spelling, not both: the second is an extra input
            self.defs[name]["allOf"] = conflicts
        return name


# ------------------------------------------------------------------------------------------
# plain-dict sections (hand-written from the 0.19.8 sources)

#: ``x-ds-unchecked`` of gradient_predivide_factor: why a factor <= 0 is refused though DeepSpeed 0.19.8 accepts it.
PREDIVIDE_UNCHECKED = (
    "DeepSpeed 0.19.8 never checks it (runtime/config.py get_gradient_predivide_factor l.237-238 reads it as is), "
    "and 0 divides by zero where the gradients are pre-divided: a ZeroDivisionError at stage 0 (engine.py "
    "allreduce_bucket l.3808-3809) and at ZeRO-1/2 without reduce_scatter (stage_1_and_2.py gradient_reduction_w_predivide l.1499-1500), inf/NaN "
    "gradients at ZeRO-3 without reduce_scatter (stage3.py __avg_scatter_contiguous_grads l.1872-1873, __avg_scatter_grads l.1922-1923); a negative factor only flips "
    "the gradients' sign before the reduce and back after it (engine.py l.3809, l.3813)")


def _b(default: bool, doc: str = "") -> dict[str, Any]:
    s: dict[str, Any] = {"type": "boolean", "default": default}
    if doc:
        s["description"] = doc
    return s


def _true_false(path: tuple[str, ...], default: bool) -> dict[str, Any]:
    """A key DeepSpeed checks with ``value in [True, False]`` (``defaults.TRUE_FALSE_KEYS``, with its source): the
    schema still asks for a boolean; ``x-ds-true-false`` tells the lint that 0/1 pass DeepSpeed's test (a style
    warning) and that anything else is refused while DeepSpeed parses the config."""
    from advisor.config.defaults import TRUE_FALSE_KEYS
    return dict(_b(default), **{"x-ds-true-false": TRUE_FALSE_KEYS[path]})


def _i(default: Any = None, minimum: int | None = None, nullable: bool = False, doc: str = "") -> dict[str, Any]:
    s: dict[str, Any] = {"type": ["integer", "null"] if nullable else "integer"}
    if minimum is not None:
        s["minimum"] = minimum
    if default is not None or nullable:
        s["default"] = default
    if doc:
        s["description"] = doc
    return s


def _dict_section(props: dict[str, Any], doc: str, nullable: bool = False) -> dict[str, Any]:
    return {"type": ["object", "null"] if nullable else "object", "x-ds-read": "dict", "description": doc,
            "properties": props, "additionalProperties": False}


def _ci_enum(values: list[str]) -> str:
    """A case-insensitive regex for DeepSpeed's ``.upper()``-ed enums."""
    alts = ["".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in v) for v in values]
    return "^(" + "|".join(alts) + ")$"


def dict_sections() -> dict[str, Any]:
    """The plain-dict top-level keys and sections (``runtime/config.py`` ``_initialize_params``)."""
    from deepspeed.runtime import constants as C
    from deepspeed.runtime.swap_tensor import constants as A
    from deepspeed.profiling import constants as P
    from deepspeed.runtime.activation_checkpointing import config as AC
    from deepspeed.runtime.model_checkpointing import constants as K
    from deepspeed.autotuning import constants as T
    from deepspeed.runtime.data_pipeline import constants as D
    from deepspeed.runtime.lr_schedules import VALID_LR_SCHEDULES

    batch_doc = "DeepSpeed requires train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x data-parallel world size."
    dtype = {"enum": DTYPE_STRINGS + [None]}
    top: dict[str, Any] = {
        C.TRAIN_BATCH_SIZE: _i(None, 1, True, "Global batch size. " + batch_doc),
        C.TRAIN_MICRO_BATCH_SIZE_PER_GPU: _i(None, 1, True, "Micro-batch per rank and step. " + batch_doc),
        C.GRADIENT_ACCUMULATION_STEPS: _i(None, 1, True, "Micro-steps per optimizer step. " + batch_doc),
        C.MANAGED_GRADIENT_ACCUMULATION: _b(C.MANAGED_GRADIENT_ACCUMULATION_DEFAULT),
        C.STEPS_PER_PRINT: _i(C.STEPS_PER_PRINT_DEFAULT, 1, True),
        C.GRADIENT_CLIPPING: {"type": "number", "minimum": 0, "default": C.GRADIENT_CLIPPING_DEFAULT,
                              "description": "Global gradient-norm clipping; 0 disables. Default 1.0 in 0.19."},
        C.PRESCALE_GRADIENTS: _b(C.PRESCALE_GRADIENTS_DEFAULT),
        C.GRADIENT_PREDIVIDE_FACTOR: {"type": "number", "exclusiveMinimum": 0,
                                      "default": C.GRADIENT_PREDIVIDE_FACTOR_DEFAULT,
                                      "x-ds-unchecked": PREDIVIDE_UNCHECKED},
        C.GRADIENT_ALLREDUCE_OP: {"type": "string", "pattern": _ci_enum(list(C.GRADIENT_ALLREDUCE_OP_SUPPORTED)),
                                  "default": C.GRADIENT_ALLREDUCE_OP_DEFAULT},
        C.COMMUNICATION_DATA_TYPE: {"type": ["string", "null"], "pattern": _ci_enum(["fp32", "fp16", "bf16"]),
                                    "default": None},
        C.SEQ_PARALLEL_COMMUNICATION_DATA_TYPE: {"type": "string", "pattern": _ci_enum(["fp32", "fp16", "bf16"]),
                                                 "default": C.SEQ_PARALLEL_COMMUNICATION_DATA_TYPE_DEFAULT},
        C.DISABLE_ALLGATHER: _b(C.DISABLE_ALLGATHER_DEFAULT),
        C.DUMP_STATE: _b(C.DUMP_STATE_DEFAULT),
        C.DISABLE_PYTHON_GC: _b(C.DISABLE_PYTHON_GC_DEFAULT),
        C.WALL_CLOCK_BREAKDOWN: _b(C.WALL_CLOCK_BREAKDOWN_DEFAULT),
        C.MEMORY_BREAKDOWN: _b(C.MEMORY_BREAKDOWN_DEFAULT),
        C.DATALOADER_DROP_LAST: _b(C.DATALOADER_DROP_LAST_DEFAULT),
        C.ZERO_ALLOW_UNTESTED_OPTIMIZER: _b(C.ZERO_ALLOW_UNTESTED_OPTIMIZER_DEFAULT),
        C.ZERO_FORCE_DS_CPU_OPTIMIZER: _b(C.ZERO_FORCE_DS_CPU_OPTIMIZER_DEFAULT),
        C.USE_DATA_BEFORE_EXPERT_PARALLEL: _b(C.USE_DATA_BEFORE_EXPERT_PARALLEL_DEFAULT),
        C.LOG_LEVEL: {"type": ["string", "null"], "default": None},
        C.VOCABULARY_SIZE: _i(None, 1, True, "Only checked for a multiple of 8 (warning)."),
        "sequence_parallel_size": _i(None, 1, False, "Read only to derive the data-parallel world size when no mpu is given."),
        "allgather_size": {"type": "number", "minimum": 0, "default": 5e8,
                           "description": "Only read with the legacy boolean form zero_optimization: true."},
    }
    top[C.OPTIMIZER] = _dict_section({
        C.TYPE: {"type": "string", "description": "adam, adamw, lamb, adagrad, lion, muon, muadam, muadamw, musgd "
                                                  "(case-insensitive), onebitadam, zerooneadam, onebitlamb, or a torch.optim class name."},
        C.OPTIMIZER_PARAMS: {"type": ["object", "null"], "x-ds-read": "open",
                             "description": "Passed as keyword arguments to the optimizer constructor.",
                             "properties": {
                                 "lr": {"type": "number", "minimum": 0},
                                 "betas": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2},
                                 "eps": {"type": "number", "minimum": 0},
                                 "weight_decay": {"type": "number", "minimum": 0},
                                 "torch_adam": {"type": "boolean", "default": False},
                                 "adam_w_mode": {"type": "boolean", "default": True},
                             }},
        C.LEGACY_FUSION: _b(C.LEGACY_FUSION_DEFAULT),
    }, "Optimizer built by DeepSpeed (plain dict; unknown keys are ignored, unknown params fail in the constructor).",
        nullable=True)
    top[C.SCHEDULER] = _dict_section({
        C.TYPE: {"type": "string", "description": f"One of {', '.join(VALID_LR_SCHEDULES)} or a torch.optim.lr_scheduler class name."},
        # Keyword arguments of the scheduler's constructor, which depend on the type: judged per
        # type by advisor.config.scheduler (rules L001/L002), not here.
        C.SCHEDULER_PARAMS: {"type": ["object", "null"], "x-ds-read": "open",
                             "description": "Keyword arguments of the scheduler constructor (per type).",
                             "properties": {k: {"description": "Judged per scheduler type (L001)."} for k in (
                                 "warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps")}},
    }, "LR scheduler built by DeepSpeed (plain dict).", nullable=True)
    top[A.AIO] = _dict_section({
        A.AIO_BLOCK_SIZE: _i(A.AIO_BLOCK_SIZE_DEFAULT, 1, doc="Bytes per I/O request."),
        A.AIO_QUEUE_DEPTH: _i(A.AIO_QUEUE_DEPTH_DEFAULT, 1),
        A.AIO_INTRA_OP_PARALLELISM: _i(A.AIO_INTRA_OP_PARALLELISM_DEFAULT, 1),
        A.AIO_SINGLE_SUBMIT: _b(A.AIO_SINGLE_SUBMIT_DEFAULT),
        A.AIO_OVERLAP_EVENTS: _b(A.AIO_OVERLAP_EVENTS_DEFAULT),
        A.AIO_USE_GDS: _b(A.AIO_USE_GDS_DEFAULT, "GPUDirect Storage (CUDA only)."),
    }, "Async I/O for NVMe offload (top-level section, not inside zero_optimization).", nullable=True)
    top[AC.ACT_CHKPT] = _dict_section({
        AC.ACT_CHKPT_PARTITION_ACTIVATIONS: _b(False),
        AC.ACT_CHKPT_NUMBER_CHECKPOINTS: _i(None, 0, True),
        AC.ACT_CHKPT_CONTIGUOUS_MEMORY_OPTIMIZATION: _b(False),
        AC.ACT_CHKPT_CPU_CHECKPOINTING: _b(False),
        AC.ACT_CHKPT_PROFILE: _b(False),
        AC.ACT_CHKPT_SYNCHRONIZE_CHECKPOINT_BOUNDARY: _b(False),
    }, "deepspeed.checkpointing settings (no effect unless the model calls it).")
    top[P.FLOPS_PROFILER] = _dict_section({
        P.FLOPS_PROFILER_ENABLED: _b(P.FLOPS_PROFILER_ENABLED_DEFAULT),
        P.FLOPS_PROFILER_RECOMPUTE_FWD_FACTOR: {"type": "number", "minimum": 0,
                                                "default": P.FLOPS_PROFILER_RECOMPUTE_FWD_FACTOR_DEFAULT},
        P.FLOPS_PROFILER_PROFILE_STEP: _i(P.FLOPS_PROFILER_PROFILE_STEP_DEFAULT, 0),
        P.FLOPS_PROFILER_MODULE_DEPTH: _i(P.FLOPS_PROFILER_MODULE_DEPTH_DEFAULT, -1),
        P.FLOPS_PROFILER_TOP_MODULES: _i(P.FLOPS_PROFILER_TOP_MODULES_DEFAULT, 0),
        P.FLOPS_PROFILER_DETAILED: _b(P.FLOPS_PROFILER_DETAILED_DEFAULT),
        P.FLOPS_PROFILER_OUTPUT_FILE: {"type": ["string", "null"], "default": None},
    }, "Flops profiler (enabling it forces wall_clock_breakdown).")
    top[K.CHECKPOINT] = _dict_section({
        K.CHECKPOINT_TAG_VALIDATION: {"type": "string", "pattern": _ci_enum(K.CHECKPOINT_TAG_VALIDATION_MODES),
                                      "default": K.CHECKPOINT_TAG_VALIDATION_DEFAULT},
        C.LOAD_UNIVERSAL_CHECKPOINT: _b(C.LOAD_UNIVERSAL_CHECKPOINT_DEFAULT),
        C.USE_NODE_LOCAL_STORAGE_CHECKPOINT: _b(C.USE_NODE_LOCAL_STORAGE_CHECKPOINT_DEFAULT),
        C.CHECKPOINT_PARALLEL_WRITE: _dict_section({C.CHECKPOINT_PARALLEL_WRITE_PIPELINE_STAGE: _true_false(
            (K.CHECKPOINT, C.CHECKPOINT_PARALLEL_WRITE, C.CHECKPOINT_PARALLEL_WRITE_PIPELINE_STAGE), False)},
                                                   "Parallel checkpoint writing."),
        K.CHECKPOINT_SERIALIZATION: _b(K.CHECKPOINT_SERIALIZATION_DEFAULT),
        K.CHECKPOINT_WRITER: _dict_section({
            K.CHECKPOINT_WRITER_TYPE: {"type": "string", "pattern": _ci_enum(K.CHECKPOINT_WRITER_TYPES),
                                       "default": K.CHECKPOINT_WRITER_TYPE_DEFAULT},
            K.CHECKPOINT_IO_BUFFER_SIZE: _i(K.CHECKPOINT_IO_BUFFER_SIZE_DEFAULT, 1, doc="Bytes."),
            K.CHECKPOINT_IO_BUFFER_DOUBLE: _b(K.CHECKPOINT_IO_BUFFER_DOUBLE_DEFAULT),
            K.CHECKPOINT_IO_MULTIPLIER: _i(K.CHECKPOINT_IO_MULTIPLIER_DEFAULT, 1),
            K.CHECKPOINT_IO_STATISTICS: _b(K.CHECKPOINT_IO_STATISTICS_DEFAULT),
            K.CHECKPOINT_DATA_PARALLEL: {"type": ["string", "null"],
                                         "pattern": _ci_enum(K.CHECKPOINT_DATA_PARALLEL_UNITS), "default": None},
            K.CHECKPOINT_WRITER_DECOUPLED: _b(K.CHECKPOINT_WRITER_DECOUPLED_DEFAULT),
        }, "Checkpoint writer.", nullable=True),
    }, "Checkpoint settings.", nullable=True)
    top[C.DATA_TYPES] = _dict_section({
        C.GRAD_ACCUM_DTYPE: dict(dtype, default=None, description="Gradient accumulation dtype; null = model dtype."),
        C.PARAM_DTYPE: dict(dtype, default=None, description="Must match the enabled fp16/bf16 flag."),
        C.BUFFER_DTYPE: dict(dtype, default=None),
        "keep_in_fp32_modules": {"anyOf": [{"const": "auto"}, {"type": "array", "items": {"type": "string"}}],
                                 "default": "auto"},
    }, "Data types.")
    top["pipeline"] = _dict_section({
        "stages": {"anyOf": [{"const": "auto"}, {"type": "integer", "minimum": 1}], "default": "auto"},
        "partition": {"type": "string", "default": "best"},
        "seed_layers": _b(False),
        "activation_checkpoint_interval": _i(0, 0),
        "pipe_partitioned": _b(True),
        "grad_partitioned": _b(True),
        "use_reentrant": _b(True),
    }, "Pipeline engine (merged over defaults).")
    top[C.TORCH_AUTOCAST] = _dict_section({
        C.TORCH_AUTOCAST_ENABLED: _b(C.TORCH_AUTOCAST_ENABLED_DEFAULT),
        C.TORCH_AUTOCAST_DTYPE: {"enum": DTYPE_STRINGS},
        C.TORCH_AUTOCAST_LOWER_PRECISION_SAFE_MODULES: {"type": "array", "items": {"type": "string"}},
    }, "torch.autocast mixed precision.")
    top[T.AUTOTUNING] = _dict_section({
        T.AUTOTUNING_ENABLED: _b(T.AUTOTUNING_ENABLED_DEFAULT),
        T.AUTOTUNING_FAST: _b(T.AUTOTUNING_FAST_DEFAULT),
        T.AUTOTUNING_RESULTS_DIR: {"type": "string", "minLength": 1, "default": T.AUTOTUNING_RESULTS_DIR_DEFAULT},
        T.AUTOTUNING_EXPS_DIR: {"type": "string", "minLength": 1, "default": T.AUTOTUNING_EXPS_DIR_DEFAULT},
        T.AUTOTUNING_OVERWRITE: _b(T.AUTOTUNING_OVERWRITE_DEFAULT),
        T.AUTOTUNING_START_PROFILE_STEP: _i(T.AUTOTUNING_START_PROFILE_STEP_DEFAULT, 0),
        T.AUTOTUNING_END_PROFILE_STEP: _i(T.AUTOTUNING_END_PROFILE_STEP_DEFAULT, 0),
        T.AUTOTUNING_METRIC: {"type": "string", "default": T.AUTOTUNING_METRIC_DEFAULT},
        T.AUTOTUNING_METRIC_PATH: {"type": ["string", "null"], "default": None},
        T.AUTOTUNING_TUNER_TYPE: {"enum": [T.AUTOTUNING_TUNER_GRIDSEARCH, T.AUTOTUNING_TUNER_RANDOM,
                                           T.AUTOTUNING_TUNER_MODELBASED], "default": T.AUTOTUNING_TUNER_TYPE_DEFAULT},
        T.AUTOTUNING_TUNER_EARLY_STOPPING: _i(T.AUTOTUNING_TUNER_EARLY_STOPPING_DEFAULT, 0),
        T.AUTOTUNING_TUNER_NUM_TRIALS: _i(T.AUTOTUNING_TUNER_NUM_TRIALS_DEFAULT, 1),
        T.AUTOTUNING_ARG_MAPPINGS: {"type": ["object", "null"]},
        T.MODEL_INFO: {"type": ["object", "null"]},
        T.AUTOTUNING_MODEL_INFO_PATH: {"type": ["string", "null"]},
        T.AUTOTUNING_MP_SIZE: _i(T.AUTOTUNING_MP_SIZE_DEFAULT, 1),
        T.AUTOTUNING_MAX_TRAIN_BATCH_SIZE: _i(None, 1, True),
        T.AUTOTUNING_MIN_TRAIN_BATCH_SIZE: _i(T.AUTOTUNING_MIN_TRAIN_BATCH_SIZE_DEFAULT, 1),
        T.AUTOTUNING_MAX_TRAIN_MICRO_BATCH_SIZE_PER_GPU: _i(T.AUTOTUNING_MAX_TRAIN_MICRO_BATCH_SIZE_PER_GPU_DEFAULT, 1),
        T.AUTOTUNING_MIN_TRAIN_MICRO_BATCH_SIZE_PER_GPU: _i(T.AUTOTUNING_MIN_TRAIN_MICRO_BATCH_SIZE_PER_GPU_DEFAULT, 1),
        T.AUTOTUNING_NUM_TUNING_MICRO_BATCH_SIZES: _i(T.AUTOTUNING_NUM_TUNING_MICRO_BATCH_SIZES_DEFAULT, 1),
    }, "Autotuner (used by the deepspeed --autotuning launcher).")
    open_obj = {"type": "object", "x-ds-read": "open"}
    top[D.DATA_EFFICIENCY] = _dict_section({
        D.DATA_EFFICIENCY_ENABLED: _b(D.DATA_EFFICIENCY_ENABLED_DEFAULT),
        D.DATA_EFFICIENCY_SEED: _i(D.DATA_EFFICIENCY_SEED_DEFAULT),
        D.DATA_SAMPLING: _dict_section({
            D.DATA_SAMPLING_ENABLED: _b(D.DATA_SAMPLING_ENABLED_DEFAULT),
            D.DATA_SAMPLING_NUM_EPOCHS: _i(D.DATA_SAMPLING_NUM_EPOCHS_DEFAULT, 1),
            D.DATA_SAMPLING_NUM_WORKERS: _i(D.DATA_SAMPLING_NUM_WORKERS_DEFAULT, 0),
            D.DATA_SAMPLING_PIN_MEMORY: _b(D.DATA_SAMPLING_PIN_MEMORY_DEFAULT),
            D.CURRICULUM_LEARNING: dict(open_obj, description="Curriculum learning (the replacement of the removed top-level curriculum_learning)."),
            D.DYNAMIC_BATCHING: dict(open_obj),
        }, "Data sampling (curriculum learning, dynamic batching)."),
        D.DATA_ROUTING: _dict_section({
            D.DATA_ROUTING_ENABLED: _b(D.DATA_ROUTING_ENABLED_DEFAULT),
            D.RANDOM_LTD: dict(open_obj),
        }, "Data routing (random-LTD)."),
    }, "Data efficiency library.")
    ep_keys = ["enabled", "autoep_size", "expert_tensor_parallel_size", "validate_folding_routing", "async_split_plan",
               "preset_model", "moe_layer_pattern", "expert_pattern", "router_pattern", "use_grouped_mm",
               "disable_triton_grouped_mm", "route_norm", "route_scale", "score_apply", "combine_impl",
               "row_weighting_impl", "gate_up_impl", "comm_backend", "comm_num_sm", "comm_qp_margin",
               "comm_max_tokens_per_rank", "num_expert_groups", "num_limited_groups", "score_func", "top_k",
               "load_balance_coeff", "routed_scaling_factor", "expert_activation", "has_shared_experts",
               "num_experts_attr", "shared_experts_gate_pattern", "shared_experts_pattern", "top_k_attr"]
    top["expert_parallel"] = _dict_section({k: {} for k in ep_keys}, "AutoEP expert parallelism.")
    top["datastates_ckpt"] = {"description": "DataStates checkpointing: ANY value other than false (even {}) enables it."}
    return top


def build_schema() -> dict[str, Any]:
    """Build the whole schema dict from the installed DeepSpeed (0.19.x)."""
    import deepspeed
    from deepspeed.runtime import config as ds_config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config, DeepSpeedBF16Config
    from deepspeed.comm.config import CommsLoggerConfig
    from deepspeed.monitor.config import TensorBoardConfig, WandbConfig, CSVConfig, CometConfig
    from deepspeed.compile.config import CompileConfig
    from deepspeed.runtime.tensor_parallel.config import TPTrainingConfig
    from deepspeed.utils.config import DeepSpeedThroughputTimerConfig
    from deepspeed.inference.config import WeightQuantConfig

    g = _Gen()
    props = dict_sections()

    def ref(cls: type, **extra: Any) -> dict[str, Any]:
        return {"type": "object", "$ref": f"#/$defs/{g.model(cls)}", **extra}

    zero = g.model(DeepSpeedZeroConfig)
    props["zero_optimization"] = {
        "type": ["object", "boolean"],
        "description": "ZeRO settings (legacy boolean form: true means stage 1).",
        "$ref": f"#/$defs/{zero}",
    }
    props["fp16"] = ref(DeepSpeedFP16Config)
    props["bf16"] = ref(DeepSpeedBF16Config)
    # bfloat16 gets its own copy of the bf16 model: the HF Trainer fills "auto" in bf16 only
    g.defs["DeepSpeedBF16ConfigLegacyKey"] = copy.deepcopy(g.defs[g.model(DeepSpeedBF16Config)])
    props["bfloat16"] = {"type": "object", "$ref": "#/$defs/DeepSpeedBF16ConfigLegacyKey", "deprecated": True,
                         "x-ds-replacement": "bf16",
                         "description": "Legacy alias of bf16 (read only when bf16 is absent)."}
    props["comms_logger"] = ref(CommsLoggerConfig)
    props["tensorboard"] = ref(TensorBoardConfig)
    props["wandb"] = ref(WandbConfig)
    props["csv_monitor"] = ref(CSVConfig)
    props["comet"] = ref(CometConfig)
    props["hybrid_engine"] = ref(ds_config.HybridEngineConfig)
    props["compile"] = ref(CompileConfig)
    props["tensor_parallel"] = ref(TPTrainingConfig)
    props["weight_quantization"] = ref(WeightQuantConfig)
    props["timers"] = _dict_section({"throughput": ref(DeepSpeedThroughputTimerConfig)}, "Timers.")

    # keys 0.19.8 refuses outright
    removed_top = ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS
    removed_zero = ds_config._REMOVED_ZERO_CONFIG_KEYS
    for key, msg in removed_top.items():
        props[key] = {"not": {}, "x-ds-removed": {"message": msg, "replacement": REMOVED_REPLACEMENTS.get(key)},
                      "description": f"Removed: DeepSpeed {deepspeed.__version__} raises DeepSpeedConfigError."}
    zprops = g.defs[zero]["properties"]
    for key, msg in removed_zero.items():
        zprops[key] = {"not": {}, "x-ds-removed": {"message": msg, "replacement": REMOVED_REPLACEMENTS.get(key)},
                       "description": f"Removed: DeepSpeed {deepspeed.__version__} raises DeepSpeedConfigError."}

    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": f"DeepSpeed {deepspeed.__version__} config",
        "description": ("Generated by advisor/config/_schemagen.py from DeepSpeed's pydantic config models plus the "
                        "plain-dict sections of runtime/config.py. Do not edit by hand."),
        "x-deepspeed-version": deepspeed.__version__,
        "type": "object",
        "x-ds-read": "dict",
        "properties": props,
        "additionalProperties": False,
        "$defs": g.defs,
    }
    _mark_hf_auto(schema)
    return schema


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref:
        return schema["$defs"][ref.rsplit("/", 1)[1]]
    return node


def _mark_hf_auto(schema: dict[str, Any]) -> None:
    """Allow "auto" exactly at HF_AUTO_PATHS (wrapping the value schema in anyOf)."""
    for path in sorted(HF_AUTO_PATHS):
        *parents, leaf = path.split(".")
        node: dict[str, Any] = schema
        for p in parents:
            node = _resolve(schema, node["properties"][p])
        if leaf not in node["properties"]:
            raise KeyError(f"HF auto path {path} is not in the schema")
        sub = node["properties"][leaf]
        meta = {k: sub.pop(k) for k in list(sub) if k in ("description", "default", "deprecated")
                or k.startswith("x-")}
        node["properties"][leaf] = {"anyOf": [sub, {"const": "auto"}], **meta, "x-hf-auto": True}


def render(schema: dict[str, Any]) -> str:
    """Serialise the schema deterministically (sorted $defs, 1-space indent)."""
    return json.dumps(schema, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """CLI: write the schema, or with ``--check`` compare it with the committed file."""
    argv = sys.argv[1:] if argv is None else argv
    text = render(build_schema())
    if "--check" in argv:
        current = SCHEMA_PATH.read_text(encoding="utf-8") if SCHEMA_PATH.exists() else ""
        if current != text:
            print(f"{SCHEMA_PATH} is stale: run python -m advisor.config._schemagen", file=sys.stderr)
            return 1
        print(f"{SCHEMA_PATH} is up to date")
        return 0
    SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
    SCHEMA_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {SCHEMA_PATH} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
