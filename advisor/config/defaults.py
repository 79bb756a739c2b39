"""DeepSpeed 0.19.8's config defaults, aliases and deprecated spellings: the one table.

Every reader of a DeepSpeed default takes it from here: the effective config
(:mod:`advisor.config.effective`), rule A002 ("auto" dropped -> the default applies), rules
D001/D002 (deprecated spellings), generate (the values it writes explicitly), and the HF
resolution (:mod:`advisor.config.hf`) for the hidden-size based "auto" values.

Sources (file:symbol relative to the installed ``deepspeed`` 0.19.8 package):

* ``zero_optimization``: ``runtime/zero/config.py:DeepSpeedZeroConfig`` (its pydantic fields;
  a field with an ``alias`` accepts both spellings, ``populate_by_name=True``; fields marked
  ``deprecated`` with a ``new_param`` are translated by
  ``runtime/config_utils.py:DeepSpeedConfigModel._process_deprecated_field``);
* ``offload_param`` / ``offload_optimizer``: ``runtime/zero/offload_config.py:
  DeepSpeedZeroOffloadParamConfig`` / ``DeepSpeedZeroOffloadOptimizerConfig``;
* ``fp16`` / ``bf16``: ``runtime/precision_config.py:DeepSpeedFP16Config`` /
  ``DeepSpeedBF16Config`` (the legacy top-level ``bfloat16`` section is read as ``bf16`` when
  there is no ``bf16`` section: ``runtime/precision_config.py:get_bfloat16_config``);
* ``aio``: ``runtime/swap_tensor/constants.py`` (``AIO_*_DEFAULT``; a plain dict, not pydantic);
* ``checkpoint.parallel_write``: ``runtime/constants.py`` (``CHECKPOINT_PARALLEL_WRITE_PIPELINE_STAGE_DEFAULT``; a
  plain dict);
* top level: ``runtime/constants.py`` (``GRADIENT_CLIPPING_DEFAULT``).

``tests/test_defaults.py`` checks every value, alias and deprecation here against the installed
DeepSpeed's own models and constants (and that no pydantic field is missing from the table).

Sizes are elements unless a name says bytes. No torch, no deepspeed import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

Section = tuple[str, ...]

#: ``sys.maxsize`` on 64-bit CPython: the default of ``stage3_model_persistence_threshold``.
MAXSIZE = 9_223_372_036_854_775_807


@dataclass(frozen=True)
class Default:
    """One DeepSpeed setting: its field name, default, the other accepted spelling, and what a
    deprecated field is replaced by."""

    field: str
    value: Any
    #: The pydantic ``alias`` (``stage3_prefetch_bucket_size`` for ``prefetch_bucket_size``).
    alias: str | None = None
    #: Words for what the default means, where the bare value does not say it ("ZeRO off").
    means: str | None = None
    #: For a deprecated field: DeepSpeed's ``new_param`` (the field it is translated to).
    replaced_by: str | None = None

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every key that sets this field, the alias (the documented spelling) first."""
        return (self.alias, self.field) if self.alias else (self.field,)


@dataclass(frozen=True)
class SectionDefaults:
    """The defaults of one config section, looked up by any spelling of a key."""

    path: Section
    source: str
    fields: tuple[Default, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_key", {s: d for d in self.fields for s in d.spellings})

    def lookup(self, key: str) -> Default | None:
        """The setting ``key`` (any spelling) sets, or None when the section has no such key."""
        return self._by_key.get(key)  # type: ignore[attr-defined]

    def __getitem__(self, key: str) -> Default:
        d = self.lookup(key)
        if d is None:
            raise KeyError(f"{'.'.join(self.path) or 'top level'} has no DeepSpeed setting {key!r}")
        return d

    def value(self, key: str) -> Any:
        """The default value of ``key`` (any spelling); KeyError for an unknown key."""
        return self[key].value

    def deprecated(self) -> Iterator[Default]:
        """The deprecated fields, in table order."""
        return (d for d in self.fields if d.replaced_by)


_Z = "runtime/zero/config.py:DeepSpeedZeroConfig"

ZERO = SectionDefaults(("zero_optimization",), _Z, (
    Default("stage", 0, means="ZeRO off"),
    Default("contiguous_gradients", True),
    Default("reduce_scatter", True),
    Default("reduce_bucket_size", 500_000_000),
    Default("use_multi_rank_bucket_allreduce", True),
    Default("allgather_partitions", True),
    Default("allgather_bucket_size", 500_000_000),
    #: None: ``DeepSpeedZeroConfig.overlap_comm_valid`` makes it True at stage 3, else False.
    Default("overlap_comm", None, means="True at stage 3, else False"),
    Default("compute_grad_norm", True),
    Default("load_from_fp32_weights", True),
    Default("elastic_checkpoint", False),
    Default("offload_param", None, means="no parameter offload"),
    Default("offload_optimizer", None, means="no optimizer offload"),
    Default("zenflow", None),
    Default("sub_group_size", 1_000_000_000),
    Default("cpu_offload_param", None, replaced_by="offload_param"),
    Default("cpu_offload_use_pin_memory", None, replaced_by="offload_param or offload_optimizer"),
    Default("cpu_offload", None, replaced_by="offload_optimizer"),
    Default("prefetch_bucket_size", 50_000_000, alias="stage3_prefetch_bucket_size"),
    Default("param_persistence_threshold", 100_000, alias="stage3_param_persistence_threshold"),
    Default("model_persistence_threshold", MAXSIZE, alias="stage3_model_persistence_threshold"),
    Default("max_live_parameters", 1_000_000_000, alias="stage3_max_live_parameters"),
    Default("max_reuse_distance", 1_000_000_000, alias="stage3_max_reuse_distance"),
    Default("gather_16bit_weights_on_model_save", False, alias="stage3_gather_16bit_weights_on_model_save"),
    Default("module_granularity_threshold", 0, alias="stage3_module_granularity_threshold"),
    Default("use_all_reduce_for_fetch_params", False, alias="stage3_use_all_reduce_for_fetch_params"),
    Default("allgather_sequential", False, alias="stage3_allgather_sequential"),
    Default("stage3_gather_fp16_weights_on_model_save", False, replaced_by="gather_16bit_weights_on_model_save"),
    Default("ignore_unused_parameters", True),
    Default("legacy_stage1", False),
    Default("round_robin_gradients", False),
    Default("parameter_alignment", False),
    Default("zero_hpz_partition_size", 1),
    Default("zero_quantized_weights", False),
    Default("zero_quantized_nontrainable_weights", False),
    Default("zero_quantized_gradients", False),
    Default("memory_efficient_linear", True),
    Default("pipeline_loading_checkpoint", False),
    Default("override_module_apply", True),
    Default("log_trace_cache_warnings", False),
    Default("enable_sanity_checks", False),
    Default("save_muon_momentum_buffer_in_memory", False),
))

OFFLOAD_PARAM = SectionDefaults(("zero_optimization", "offload_param"),
                                "runtime/zero/offload_config.py:DeepSpeedZeroOffloadParamConfig", (
    Default("device", "none", means="nothing offloaded"),
    Default("nvme_path", None),
    Default("buffer_count", 5),
    Default("buffer_size", 100_000_000),
    Default("max_in_cpu", 1_000_000_000),
    Default("pin_memory", True),
))

OFFLOAD_OPTIMIZER = SectionDefaults(("zero_optimization", "offload_optimizer"),
                                    "runtime/zero/offload_config.py:DeepSpeedZeroOffloadOptimizerConfig", (
    Default("device", "none", means="nothing offloaded"),
    Default("nvme_path", None),
    Default("buffer_count", 4),
    Default("pin_memory", True),
    Default("pipeline_read", False),
    Default("pipeline_write", False),
    Default("fast_init", False),
    Default("ratio", 1.0),
    Default("super_offload", False),
    Default("cpuadam_cores_perc", 0.8),
))

FP16 = SectionDefaults(("fp16",), "runtime/precision_config.py:DeepSpeedFP16Config", (
    Default("enabled", False, means="fp16 OFF"),
    Default("auto_cast", False),
    Default("loss_scale", 0, means="dynamic loss scaling"),
    Default("initial_scale_power", 16),
    Default("loss_scale_window", 1000),
    Default("hysteresis", 2),
    Default("consecutive_hysteresis", False),
    Default("min_loss_scale", 1),
    Default("fp16_master_weights_and_grads", False),
))

BF16 = SectionDefaults(("bf16",), "runtime/precision_config.py:DeepSpeedBF16Config", (
    Default("enabled", False, means="bf16 OFF"),
    Default("immediate_grad_update", False),
    Default("check_grad_overflow", True),
    Default("bf16_master_weights_and_grads", False),
    Default("bf16_optimizer_states", False),
))

AIO = SectionDefaults(("aio",), "runtime/swap_tensor/constants.py:AIO_*_DEFAULT", (
    Default("block_size", 1_048_576),  # bytes
    Default("queue_depth", 8),
    Default("intra_op_parallelism", 1),
    Default("single_submit", False),
    Default("overlap_events", True),
    Default("use_gds", False),
))

#: ``checkpoint.parallel_write``: a plain dict read by ``runtime/config.py:get_checkpoint_parallel_write_pipeline``
#: (l.398-406: true or false, anything else raises DeepSpeedConfigError), default
#: ``CHECKPOINT_PARALLEL_WRITE_PIPELINE_STAGE_DEFAULT`` (``runtime/constants.py`` l.362-364).
#: Keys DeepSpeed 0.19.8 validates with ``value in [True, False]`` and otherwise raises ``DeepSpeedConfigError
#: ("... value of '<v>' is invalid, expecting: true or false")`` while parsing the config, by key path -> source.
#: ``in [True, False]`` compares with ``==``, so 1, 0, 1.0 and 0.0 pass (1 == True) and are later used for their
#: truth (``pipe/module.py`` l.618 ``if self.checkpoint_parallel_write_pipeline``). Found by grepping the 0.19.8
#: tree for ``in [True, False]`` / ``expecting: true or false``: this is the only such key (the other checkpoint
#: checks, ``model_checkpointing/config.py`` l.22-28 and ``runtime/config.py`` l.388-395, are string enums).
TRUE_FALSE_KEYS: dict[tuple[str, ...], str] = {
    ("checkpoint", "parallel_write", "pipeline_stage"):
        "runtime/config.py:get_checkpoint_parallel_write_pipeline l.398-406",
}


def ds_true_false(v: Any) -> bool | None:
    """A value DeepSpeed's ``v in [True, False]`` test accepts (a bool, or a number equal to 0 or 1), as a bool;
    None for any other, which DeepSpeed refuses while parsing the config (the keys of ``TRUE_FALSE_KEYS``)."""
    if isinstance(v, (bool, int, float)) and v in (True, False):
        return bool(v)
    return None


CHECKPOINT_PARALLEL_WRITE = SectionDefaults(
    ("checkpoint", "parallel_write"),
    "runtime/constants.py:CHECKPOINT_PARALLEL_WRITE_PIPELINE_STAGE_DEFAULT", (
        Default("pipeline_stage", False, means="data-parallel rank 0 of each pipeline stage writes its layer files"),
    ))

TOP = SectionDefaults((), "runtime/constants.py:*_DEFAULT", (
    Default("gradient_clipping", 1.0),  # GRADIENT_CLIPPING_DEFAULT (older releases: 0.0)
    Default("gradient_predivide_factor", 1.0),  # GRADIENT_PREDIVIDE_FACTOR_DEFAULT
    Default("prescale_gradients", False),  # PRESCALE_GRADIENTS_DEFAULT
    Default("zero_force_ds_cpu_optimizer", True),  # ZERO_FORCE_DS_CPU_OPTIMIZER_DEFAULT (l.41-42)
))

#: What DeepSpeed 0.19.8 runs with when a top-level key is absent (the words S002 prints for a misspelt top-level
#: key that leaves it absent), by key -> (words, source). A key not listed: its default applies, unnamed.
ABSENT_TOP_LEVEL: dict[str, tuple[str, str]] = {
    "zero_optimization": (f"ZeRO is off (stage {ZERO.value('stage')}: every rank holds the whole model, "
                          "its gradients and optimizer state)",
                          "runtime/zero/config.py l.71-78 get_zero_config ({} when absent), l.95 stage = 0"),
    "bf16": ("bf16 is off (enabled false)",
             "runtime/precision_config.py l.34-38 get_bfloat16_config ({} when absent), l.46 enabled = False"),
    "bfloat16": ("bf16 is off (enabled false)",
                 "runtime/precision_config.py l.34-38 get_bfloat16_config ({} when absent), l.46 enabled = False"),
    "fp16": ("fp16 is off (enabled false)",
             "runtime/precision_config.py l.95-97 get_float16_config ({} when absent), l.105 enabled = False"),
    "optimizer": ("no optimizer comes from the config (only one the script passes to deepspeed.initialize)",
                  "runtime/config.py l.288-292 get_optimizer_name: OPTIMIZER_TYPE_DEFAULT = None "
                  "(runtime/constants.py l.26)"),
    "scheduler": ("no learning-rate scheduler comes from the config (only one the script passes to "
                  "deepspeed.initialize)",
                  "runtime/config.py l.325-329 get_scheduler_name: SCHEDULER_TYPE_DEFAULT = None "
                  "(runtime/constants.py l.32)"),
}


#: The legacy top-level section name -> the section it stands for (read only when the new name
#: is absent: ``runtime/precision_config.py:get_bfloat16_config``, ``BFLOAT16_OLD``).
LEGACY_SECTIONS: dict[str, str] = {"bfloat16": "bf16"}

#: Every pydantic section whose defaults the table lists, by the path where it is written (the
#: legacy ``bfloat16`` section reads the bf16 model). Rule A002 walks these.
VALIDATED: tuple[SectionDefaults, ...] = (ZERO, OFFLOAD_PARAM, OFFLOAD_OPTIMIZER, FP16, BF16,
                                          SectionDefaults(("bfloat16",), BF16.source, BF16.fields))

#: Other pydantic (``extra="forbid"``) sections, derived from ``DeepSpeedConfigModel``: "auto" is
#: dropped there too (``runtime/config_utils.py:DeepSpeedConfigModel.__init__``); their defaults
#: are not tabulated.
OTHER_VALIDATED: tuple[str, ...] = ("comms_logger", "tensorboard", "wandb", "csv_monitor", "comet", "hybrid_engine",
                                    "compile", "tensor_parallel", "weight_quantization")


def replacement_spellings(section: SectionDefaults, d: Default) -> tuple[str, ...]:
    """Every key of ``section`` that sets the field a deprecated ``d`` is replaced by (empty when
    the replacement is not one field, e.g. ``cpu_offload_use_pin_memory``)."""
    new = section.lookup(d.replaced_by or "")
    return new.spellings if new else ()


# ---------------------------------------------------------------------------------------------
# The HF Trainer's / accelerate's hidden-size based "auto" values


#: ``zero_optimization`` keys the HF Trainer and accelerate derive from the model's hidden size.
HIDDEN_SIZE_KEYS: tuple[str, str, str] = (
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
)


def hidden_size_values(h: int) -> dict[str, int]:
    """The values (elements) the HF integration fills in for the ``HIDDEN_SIZE_KEYS`` from the
    hidden size ``h``: ``reduce_bucket_size = h^2``, ``stage3_prefetch_bucket_size =
    int(0.9 h^2)``, ``stage3_param_persistence_threshold = 10 h``.

    Source: transformers 5.24.0 ``integrations/deepspeed.py:HfTrainerDeepSpeedConfig.
    trainer_config_finalize`` (the Trainer fills the two stage-3 keys only at stage 3) and
    accelerate 1.15.0 ``accelerator.py:Accelerator._prepare_deepspeed`` (all three). Keys are the
    dotted ``HIDDEN_SIZE_KEYS``."""
    return {HIDDEN_SIZE_KEYS[0]: h * h, HIDDEN_SIZE_KEYS[1]: int(0.9 * h * h), HIDDEN_SIZE_KEYS[2]: 10 * h}
