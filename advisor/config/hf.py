"""Hugging Face Trainer and accelerate: the DeepSpeed config they actually hand to DeepSpeed.

Most DeepSpeed users reach it through ``transformers.Trainer`` or ``accelerate launch``, whose
configs say ``"auto"`` wherever the Trainer (or accelerate) should fill a value in. This module
replays, step by step and without importing transformers, accelerate, torch or deepspeed, what
those libraries do to the config dict before ``deepspeed.initialize`` sees it. Sources
(transformers 5.24.0, accelerate 1.15.0):

1. ``transformers/integrations/deepspeed.py`` ``HfTrainerDeepSpeedConfig.trainer_config_process``
   (run in ``TrainingArguments.__post_init__``): ``fill_match`` / ``fill_only`` of the batch
   triple, clipping, optimizer and scheduler params and fp16/bf16 from the Trainer arguments;
   an explicit value that disagrees is collected as a *mismatch*;
2. ``accelerate/utils/dataclasses.py`` ``DeepSpeedPlugin.__post_init__``: a missing
   ``gradient_accumulation_steps`` becomes 1, ``zero_optimization`` is required, remaining
   "auto" in the plugin keys (``zero_optimization.stage`` -> 2, offload devices -> "none", ...)
   are filled from the plugin (i.e. from the ``ACCELERATE_*`` launch environment), and
   ``steps_per_print`` is set to infinity;
3. ``DeepSpeedPlugin.set_mixed_precision`` (from ``AcceleratorState``): missing fp16/bf16
   sections are added, a precision conflicting with the config is an error;
4. ``HfTrainerDeepSpeedConfig.trainer_config_finalize`` (in ``deepspeed_init``): the
   hidden-size-derived bucket sizes, scheduler steps, and the mismatch ``ValueError``;
5. ``deepspeed_optim_sched``: no ``optimizer`` section -> ``zero_allow_untested_optimizer: true``;
6. ``accelerate/accelerator.py`` ``Accelerator._prepare_deepspeed``: the last fills
   (``deepspeed_config_process(must_match=False, ...)``), which raise for any "auto" left.

The accelerate launcher path (an accelerate config YAML with ``distributed_type: DEEPSPEED``)
starts at step 2 with the plugin built from the YAML (``accelerate/commands/launch.py``
``_validate_launch_command`` and ``accelerate/utils/launch.py`` ``prepare_deepspeed_cmd_env``),
then the Trainer runs step 1 on it (``propagate_args_to_deepspeed``) and steps 4-6.

Everything a step would raise at launch becomes a Finding (code family H) instead of stopping.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Mapping

from advisor.config.validation import (MAX_NODES, InputValueError, as_float, as_int, as_str, shown, type_name,
                                       world_size)
from advisor.errors import AdvisorError, ConfigLoadError
from advisor.config.defaults import HIDDEN_SIZE_KEYS, hidden_size_values
from advisor.rules import emit
from advisor.findings import Finding, pointer

AUTO = "auto"
#: ``accelerate.utils.PrecisionType`` values (accelerate 1.15.0 ``utils/dataclasses.py``): what
#: ``accelerate launch`` accepts as ``mixed_precision`` (case-insensitive).
ACCELERATE_PRECISIONS = ("no", "fp8", "fp16", "bf16")
#: ``deepspeed_config.zero_stage`` values: DeepSpeed's ZeroStageEnum (``runtime/zero/config.py``),
#: which receives it as ``zero_optimization.stage``.
ACCELERATE_ZERO_STAGES = (0, 1, 2, 3)



def _ptr(key: str) -> str:
    return pointer(*key.split("."))


def _is_auto(v: Any) -> bool:
    return isinstance(v, str) and v == AUTO


@dataclass
class TrainerArgs:
    """The ``transformers.TrainingArguments`` fields that feed DeepSpeed "auto" values.

    Defaults are TrainingArguments' own (transformers 5.24.0 ``training_args.py``).
    ``warmup_steps``: an int number of steps, or a float in [0, 1) read as a ratio of the
    training steps (``TrainingArguments.get_warmup_steps``). ``max_steps``: the number of
    optimizer steps (``num_training_steps`` in ``trainer_config_finalize``); None = unknown (a
    negative value given to :meth:`from_mapping`, TrainingArguments' -1 "use num_train_epochs",
    is unknown too: the Trainer derives it from the dataset's length). 0 is a count, not
    "unknown": only a negative max_steps is epoch-based (transformers trainer.py
    ``Trainer.set_initial_training_values``: ``epoch_based = max_steps < 0``), so with a sized
    dataset the Trainer keeps 0 and hands ``deepspeed_init(num_training_steps=0)`` (without a
    length it raises "args.max_steps must be set to a positive value").
    ``world_size``: ``TrainingArguments.world_size`` (number of processes).
    """

    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    learning_rate: float = 5e-5
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0
    warmup_steps: float = 0
    max_steps: int | None = None
    #: ``lr_scheduler_type`` (default "linear"); unused when the DeepSpeed config has a
    #: ``scheduler`` block (``deepspeed_optim_sched`` then hands DeepSpeed a DummyScheduler).
    lr_scheduler_type: str = "linear"
    bf16: bool = False
    fp16: bool = False
    bf16_full_eval: bool = False
    fp16_full_eval: bool = False
    save_on_each_node: bool = False
    auto_find_batch_size: bool = False
    world_size: int = 1
    #: ``TrainingArguments.optim``: "adamw_torch_fused" with torch >= 2.8, else "adamw_torch" (transformers
    #: 5.25.0 ``training_args.py`` l.806-811, ``pytorch_utils.py`` l.37); the ledger models torch 2.13, so the
    #: fused default. Read only when the DeepSpeed config has no optimizer block (:func:`trainer_optimizer`).
    optim: str = "adamw_torch_fused"
    #: ``ACCELERATE_MIXED_PRECISION`` (what ``accelerate launch`` exports); TrainingArguments
    #: starts from it and overrides it with fp16/bf16.
    env_mixed_precision: str = "no"

    def get_warmup_steps(self, num_training_steps: int) -> int:
        """``TrainingArguments.get_warmup_steps``: int steps, or ceil(ratio x steps) below 1."""
        w = self.warmup_steps
        return int(w) if w >= 1 else math.ceil(num_training_steps * w)

    @property
    def mixed_precision(self) -> str:
        """``TrainingArguments.__post_init__`` section 5: env, then fp16, then bf16."""
        if self.fp16:
            return "fp16"
        if self.bf16:
            return "bf16"
        return self.env_mixed_precision

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any]) -> "TrainerArgs":
        """Build from a dict (unknown keys ignored; ``num_training_steps``/``num_train_steps`` and
        ``warmup_ratio`` accepted as aliases of ``max_steps`` and a fractional ``warmup_steps``)."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names and v is not None}
        for alias in ("num_training_steps", "num_train_steps"):
            if d.get(alias) is not None and "max_steps" not in kw:
                kw["max_steps"] = d[alias]
        if kw.get("max_steps") is not None and kw["max_steps"] < 0:
            # TrainingArguments' default max_steps=-1 means "train for num_train_epochs": the Trainer
            # then derives the step count from the dataloader's length (transformers trainer.py
            # Trainer.set_initial_training_values: epoch_based = max_steps < 0) -- unknown here
            kw.pop("max_steps")
        if d.get("warmup_ratio") is not None and not kw.get("warmup_steps"):
            kw["warmup_steps"] = float(d["warmup_ratio"])
        return cls(**kw)


@dataclass
class PluginSettings:
    """``accelerate.utils.DeepSpeedPlugin`` fields as ``__post_init__`` reads them from the
    ``ACCELERATE_*`` environment that ``accelerate launch`` exports (defaults: no launcher)."""

    zero_stage: int = 2
    gradient_accumulation_steps: int | str = AUTO
    gradient_clipping: float | str = AUTO
    offload_optimizer_device: str = "none"
    offload_param_device: str = "none"
    offload_optimizer_nvme_path: str = "none"
    offload_param_nvme_path: str = "none"
    zero3_save_16bit_model: bool = False
    #: None: ACCELERATE_DEEPSPEED_ZERO3_INIT unset (then it follows is_zero3()).
    zero3_init_flag: bool | None = None
    #: ``ACCELERATE_CONFIG_DS_FIELDS``: the deepspeed_config keys the YAML set (+ mixed_precision).
    ds_fields: tuple[str, ...] = ()
    #: The top-level YAML key ``mixed_precision`` in ``ds_fields`` was read from: itself, or the
    #: legacy ``fp16`` (``BaseConfig.process_config`` converts it), so a finding points at that key.
    mixed_precision_key: str = "mixed_precision"

    def yaml_pointer(self, field_name: str) -> str:
        """The JSON pointer of the accelerate file's key that set ``field_name`` of ``ds_fields``:
        the top-level mixed-precision key, else ``/deepspeed_config/<field>``."""
        if field_name == "mixed_precision":
            return pointer(self.mixed_precision_key)
        return pointer("deepspeed_config", field_name)

    def mapping(self) -> dict[str, Any]:
        """``plugin_to_config_mapping`` as config key -> plugin value."""
        return {
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "gradient_clipping": self.gradient_clipping,
            "zero_optimization.stage": self.zero_stage,
            "zero_optimization.offload_optimizer.device": self.offload_optimizer_device,
            "zero_optimization.offload_param.device": self.offload_param_device,
            "zero_optimization.offload_param.nvme_path": self.offload_param_nvme_path,
            "zero_optimization.offload_optimizer.nvme_path": self.offload_optimizer_nvme_path,
            "zero_optimization.stage3_gather_16bit_weights_on_model_save": self.zero3_save_16bit_model,
        }


@dataclass
class AccelerateLaunch:
    """An accelerate config YAML with ``distributed_type: DEEPSPEED``, as the launcher reads it."""

    source: str
    data: dict[str, Any]
    plugin: PluginSettings
    mixed_precision: str
    #: Total processes (``num_processes``; all machines), None when the YAML leaves it to the CLI.
    num_processes: int | None
    num_machines: int
    #: ``deepspeed_config.deepspeed_config_file`` as written (accelerate opens it relative to the launch's
    #: working directory); None when absent, "none" (accelerate's no-file value) or refused as empty.
    deepspeed_config_file: str | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def ranks_per_node(self) -> int | None:
        """Processes per machine: ``num_processes // num_machines`` (``accelerate/utils/launch.py``
        ``prepare_multi_gpu_env`` / ``prepare_deepspeed_cmd_env``: nproc_per_node, --num_gpus);
        all of them on one machine when num_machines is 1. None without num_processes."""
        if self.num_processes is None:
            return None
        return self.num_processes // self.num_machines if self.num_machines > 1 else self.num_processes

    @property
    def world_size(self) -> int | None:
        """Ranks the launch starts: ranks per machine x machines (= num_processes when it divides)."""
        rpn = self.ranks_per_node
        return None if not rpn else rpn * self.num_machines

    @property
    def world_size_source(self) -> str:
        """Where :attr:`world_size` comes from, for a message or a launch-shape line."""
        src = f"num_processes in {self.source}"
        if self.num_machines > 1:
            src += f" ({self.ranks_per_node} per machine x num_machines {self.num_machines})"
        return src

    @property
    def ranks_per_node_source(self) -> str:
        """Where :attr:`ranks_per_node` comes from."""
        if self.num_machines > 1:
            return f"num_processes // num_machines in {self.source}"
        return f"num_processes in {self.source}, all on one machine (num_machines 1)"

    @property
    def refusals(self) -> list[Finding]:
        """The H004 findings for fields accelerate launch (or DeepSpeed) refuses."""
        return [f for f in self.findings if f.data.get("kind") == "bad-field"]


@dataclass
class Resolution:
    """What DeepSpeed receives, and what the Trainer/accelerate would say on the way."""

    #: The resolved config dict (``deepspeed.initialize(config_params=...)``).
    config: dict[str, Any]
    findings: list[Finding]
    world_size: int | None
    hidden_size: int | None
    #: key (dotted) -> (written value, value DeepSpeed receives, who filled it).
    filled: dict[str, tuple[Any, Any, str]] = field(default_factory=dict)
    zero3_init: bool | None = None
    #: The config the replay started from ("auto" unfilled; for an accelerate file the dict
    #: accelerate builds from its fields or reads from its deepspeed_config_file, --set applied).
    base: dict[str, Any] | None = None

    @property
    def unresolved(self) -> list[str]:
        """Dotted keys still "auto" (the launch would fail on them, or an input was missing)."""
        return [k for k, _ in _walk_autos(self.config)]


def _walk_autos(d: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """Every (dotted key, value) equal to "auto" in nested dicts (like accelerate's
    ``deepspeed_config_process``, which recurses into dicts only)."""
    if isinstance(d, dict):
        for k, v in d.items():
            if isinstance(v, dict):
                yield from _walk_autos(v, f"{prefix}{k}.")
            elif _is_auto(v):
                yield f"{prefix}{k}", v


def hidden_size_of(model_config: Mapping[str, Any] | None, *, text_config: bool = True) -> int | None:
    """The hidden size the Trainer uses (``trainer_config_finalize``): ``hidden_size``, else
    ``max(hidden_sizes)``, else the same in ``text_config``. accelerate's ``_prepare_deepspeed``
    looks only at the first two (``text_config=False``)."""
    if not isinstance(model_config, Mapping):
        return None
    if isinstance(model_config.get("hidden_size"), int):
        return model_config["hidden_size"]
    if isinstance(model_config.get("hidden_sizes"), list) and model_config["hidden_sizes"]:
        return max(model_config["hidden_sizes"])
    if text_config and isinstance(model_config.get("text_config"), Mapping):
        return hidden_size_of(model_config["text_config"], text_config=False)
    return None


class _Config:
    """``accelerate.utils.deepspeed.HfDeepSpeedConfig`` over a dict: find_config_node, get_value,
    is_true, set_stage_and_offload, is_zero3, is_offload (same semantics)."""

    def __init__(self, config: dict):
        self.config = config
        self.set_stage_and_offload()

    def find_config_node(self, key: str) -> tuple[dict | None, str]:
        cfg: Any = self.config
        *nodes, last = key.split(".")
        for n in nodes:
            cfg = cfg.get(n) if isinstance(cfg, dict) else None
            if cfg is None:
                return None, last
        return (cfg if isinstance(cfg, dict) else None), last

    def get_value(self, key: str, default: Any = None) -> Any:
        node, k = self.find_config_node(key)
        return default if node is None else node.get(k, default)

    def is_true(self, key: str) -> bool:
        v = self.get_value(key)
        return False if v is None else bool(v)

    def set_stage_and_offload(self) -> None:
        """``HfDeepSpeedConfig.set_stage_and_offload`` (accelerate 1.15.0 ``utils/deepspeed.py``,
        which transformers' HfDeepSpeedConfig subclasses). At stage 2/3 it builds the set
        ``{offload_optimizer.device, offload_param.device}``, which raises ``TypeError: unhashable
        type`` for a list or object device; those keys are kept in ``unhashable`` (the resolver
        reports them as H004) and count as no offload here."""
        self._stage = self.get_value("zero_optimization.stage", -1)
        self._offload = False
        self.unhashable: list[str] = []
        if self._stage in (2, 3):
            keys = ("zero_optimization.offload_optimizer.device", "zero_optimization.offload_param.device")
            vals = {k: self.get_value(k) for k in keys}
            self.unhashable = [k for k, v in vals.items() if isinstance(v, (list, dict))]
            self._offload = any(isinstance(v, str) and v in ("cpu", "nvme") for v in vals.values())

    def is_zero3(self) -> bool:
        return self._stage == 3

    def is_offload(self) -> bool:
        return self._offload


class _Resolver:
    """One launch replayed: the config, the mismatches and the findings collected on the way."""

    def __init__(self, raw: dict, args: TrainerArgs):
        self.cfg = _Config(copy.deepcopy(raw))
        self.original = raw
        self.args = args
        self.mismatches: list[tuple[str, Any, str, Any]] = []
        self.findings: list[Finding] = []
        self.filled: dict[str, tuple[Any, Any, str]] = {}
        #: "auto" keys left for want of an input (hidden size, step count): reported once (H002/H003).
        self.skipped: set[str] = set()
        #: config key (dotted) -> the accelerate YAML key that wrote it, for a config accelerate builds
        #: from the YAML's fields (a finding about the key points at, and its fix names, the YAML key)
        self.yaml_keys: dict[str, str] = {}
        self.yaml_source = ""

    # -- transformers HfTrainerDeepSpeedConfig.fill_match / fill_only ------------------------
    def fill_match(self, key: str, hf_val: Any, hf_key: str | None = None, must_match: bool = True,
                   who: str = "Trainer") -> None:
        node, k = self.cfg.find_config_node(key)
        if node is None:
            return
        if _is_auto(node.get(k)):
            node[k] = hf_val
            self.filled[key] = (AUTO, hf_val, f"{who} {hf_key}" if hf_key else who)
            return
        if not must_match:
            return
        ds_val = node.get(k)
        if ds_val is not None and ds_val != hf_val:
            self.mismatches.append((key, ds_val, hf_key or key, hf_val))

    def fill_only(self, key: str, hf_val: Any, who: str = "Trainer") -> None:
        self.fill_match(key, hf_val, must_match=False, who=who)

    # -- step 1 -------------------------------------------------------------------------------
    def trainer_config_process(self) -> None:
        """``HfTrainerDeepSpeedConfig.trainer_config_process`` (transformers 5.24.0)."""
        a = self.args
        afb = a.auto_find_batch_size
        tbs = a.world_size * a.per_device_train_batch_size * a.gradient_accumulation_steps
        self.fill_match("train_micro_batch_size_per_gpu", a.per_device_train_batch_size,
                        "per_device_train_batch_size", not afb)
        self.fill_match("gradient_accumulation_steps", a.gradient_accumulation_steps, "gradient_accumulation_steps")
        self.fill_match("train_batch_size", tbs, "train_batch_size (calculated)", not afb)
        self.fill_match("gradient_clipping", a.max_grad_norm, "max_grad_norm")
        self.fill_match("optimizer.params.lr", a.learning_rate, "learning_rate")
        self.fill_match("optimizer.params.betas", [a.adam_beta1, a.adam_beta2], "adam_beta1+adam_beta2")
        self.fill_match("optimizer.params.eps", a.adam_epsilon, "adam_epsilon")
        self.fill_match("optimizer.params.weight_decay", a.weight_decay, "weight_decay")
        self.fill_only("scheduler.params.warmup_min_lr", 0)
        self.fill_match("scheduler.params.warmup_max_lr", a.learning_rate, "learning_rate")
        if a.save_on_each_node:
            ck = self.cfg.config.get("checkpoint", {})
            if isinstance(ck, dict):  # transformers itself fails (TypeError) on a non-object checkpoint
                self.cfg.config["checkpoint"] = ck
                ck["use_node_local_storage"] = a.save_on_each_node
        self.fill_match("fp16.enabled", a.fp16 or a.fp16_full_eval, "fp16|fp16_full_eval")
        self.fill_match("bf16.enabled", a.bf16 or a.bf16_full_eval, "bf16|bf16_full_eval")

    # -- step 2 -------------------------------------------------------------------------------
    def plugin_post_init(self, plugin: PluginSettings, from_file: bool) -> None:
        """``DeepSpeedPlugin.__post_init__`` with ``hf_ds_config`` given (accelerate 1.15.0). Where
        it raises (no ``zero_optimization``; YAML keys next to a config file) an H004 error is
        recorded and the replay goes on, so the rest of the config is still resolved."""
        c = self.cfg.config
        if "gradient_accumulation_steps" not in c:
            c["gradient_accumulation_steps"] = 1
            self.filled["gradient_accumulation_steps"] = (None, 1, "accelerate DeepSpeedPlugin (absent -> 1)")
            if self.args.gradient_accumulation_steps != 1:
                self.findings.append(emit(
                    "H005", "warning", "",
                    f"gradient_accumulation_steps is absent: accelerate's DeepSpeedPlugin sets it to 1 although "
                    f"the Trainer's gradient_accumulation_steps is {self.args.gradient_accumulation_steps}",
                    'add "gradient_accumulation_steps": "auto"',
                    data={"trainer": self.args.gradient_accumulation_steps}))
        if "zero_optimization" not in c:
            self.findings.append(emit(
                "H004", "error", "",
                "no zero_optimization section: accelerate's DeepSpeedPlugin raises 'Please specify the ZeRO "
                "optimization config in the DeepSpeed config.'",
                'add "zero_optimization": {"stage": 0} (or the stage you want)', data={"kind": "no-zero-section"}))
        if from_file:
            ignored = ["gradient_accumulation_steps", "gradient_clipping", "zero_stage", "offload_optimizer_device",
                       "offload_param_device", "offload_param_nvme_path", "offload_optimizer_nvme_path",
                       "zero3_save_16bit_model", "mixed_precision"]
            clash = [n for n in plugin.ds_fields if n in ignored]
            if clash:  # at the first of those keys in the accelerate file (its line:column)
                self.findings.append(emit(
                    "H004", "error", plugin.yaml_pointer(clash[0]),
                    f"the accelerate config sets {', '.join(clash)} next to deepspeed_config_file: accelerate's "
                    "DeepSpeedPlugin raises 'When using `deepspeed_config_file`, the following accelerate config "
                    "variables will be ignored'",
                    "remove those keys from the accelerate YAML and set them in the DeepSpeed config file",
                    data={"kind": "config-file-with-fields", "fields": clash,
                          "pointers": [plugin.yaml_pointer(n) for n in clash]}))
        for key, val in plugin.mapping().items():
            if val is not None:
                self.fill_only(key, val, who="accelerate DeepSpeedPlugin")
        self.cfg.set_stage_and_offload()
        for key in self.cfg.unhashable:
            bad = self.cfg.get_value(key)
            self.findings.append(emit(
                "H004", "error", _ptr(key),
                f"{key} is a {type(bad).__name__}: accelerate's HfDeepSpeedConfig.set_stage_and_offload "
                f"raises 'TypeError: unhashable type: {type(bad).__name__!r}'",
                f'set {key} to one of "none", "cpu", "nvme"', data={"kind": "unhashable-device", "key": key}))
        c["steps_per_print"] = float("inf")

    # -- step 3 -------------------------------------------------------------------------------
    def set_mixed_precision(self, mp: str) -> None:
        """``DeepSpeedPlugin.set_mixed_precision`` (accelerate 1.15.0; the MS-AMP and ROCm branches
        are not replayed)."""
        c = self.cfg.config
        kwargs = {"fp16.enabled": mp == "fp16", "bf16.enabled": mp in ("bf16", "fp8")}
        if mp == "fp16":
            if "fp16" not in c:
                c["fp16"] = {"enabled": True, "auto_cast": True}
        elif mp in ("bf16", "fp8"):
            if "bf16" not in c:
                c["bf16"] = {"enabled": True}
        if mp != "no":
            diff = "bf16" if mp == "fp16" else "fp16"
            sec = c.get(diff, {})
            if isinstance(sec, dict) and str(sec.get("enabled", "False")).lower() == "true":
                self.findings.append(emit(
                    "H004", "error", _ptr(f"{diff}.enabled"),
                    f"mixed precision is {mp} but the config enables {diff}: accelerate raises '`--mixed_precision` "
                    f"arg cannot be set to `{mp}` when `{diff}` is set in the DeepSpeed config file.'",
                    f'set "{diff}": {{"enabled": "auto"}}, or launch with mixed precision {diff}',
                    data={"kind": "mixed-precision-conflict", "mixed_precision": mp}))
        for dt in ("fp16", "bf16"):
            if dt not in c:
                c[dt] = {"enabled": False}
        for key in ("fp16.enabled", "bf16.enabled"):
            self.fill_only(key, kwargs[key], who=f"accelerate mixed_precision={mp}")

    # -- step 4 -------------------------------------------------------------------------------
    def trainer_config_finalize(self, model_config: Mapping[str, Any] | None, hidden_size: int | None,
                                num_training_steps: int | None) -> None:
        """``HfTrainerDeepSpeedConfig.trainer_config_finalize`` (transformers 5.24.0), minus the
        raise: mismatches become H001 findings. An unknown hidden size or step count (no
        --model / --max-steps given to us) leaves those values "auto" with an H003 note."""
        auto_keys = [k for k in HIDDEN_SIZE_KEYS if _is_auto(self.cfg.get_value(k))]
        if auto_keys:
            h = hidden_size if hidden_size is not None else hidden_size_of(model_config)
            if h is None and model_config is not None:
                self.skipped.update(auto_keys)
                self.findings.append(emit(
                    "H002", "error", _ptr(auto_keys[0]),
                    "the model's config has neither hidden_size nor hidden_sizes: the Trainer raises 'it's not "
                    f"possible to automatically fill out the following `auto` entries ...: {auto_keys}'",
                    "replace these \"auto\" values with integers", data={"keys": auto_keys}))
            elif h is None:
                self.skipped.update(auto_keys)
                self.findings.append(emit(
                    "H003", "info", _ptr(auto_keys[0]),
                    f"{', '.join(auto_keys)} are \"auto\" and derive from the model's hidden size: not resolved",
                    "pass --model (a preset or the model's config.json) or --hidden-size", data={"keys": auto_keys}))
            else:
                # the Trainer fills the two stage-3 keys only at stage 3
                for key in HIDDEN_SIZE_KEYS if self.cfg.is_zero3() else HIDDEN_SIZE_KEYS[:1]:
                    self.fill_only(key, hidden_size_values(h)[key], who=f"Trainer hidden_size {h}")
        n = num_training_steps
        if n is not None:
            self.fill_match("scheduler.params.total_num_steps", n, "num_training_steps (calculated)")
        elif _is_auto(self.cfg.get_value("scheduler.params.total_num_steps")):
            self.skipped.add("scheduler.params.total_num_steps")
        w = self.args.warmup_steps
        if n is not None or w >= 1 or w == 0:  # a ratio alone needs the step count
            self.fill_match("scheduler.params.warmup_num_steps", max(1, self.args.get_warmup_steps(n or 0)),
                            "warmup_steps")
        elif self.cfg.get_value("scheduler.params.warmup_num_steps") is not None:
            self.skipped.add("scheduler.params.warmup_num_steps")
        if n is None and any(_is_auto(self.cfg.get_value(k)) for k in self.skipped if k.startswith("scheduler")):
            k = next(k for k in sorted(self.skipped) if k.startswith("scheduler"))
            self.findings.append(emit(
                "H003", "info", _ptr(k),
                "the scheduler's step counts come from the number of training steps, which depends on the "
                "dataset (with a negative max_steps, TrainingArguments' default -1, the Trainer derives it from "
                "num_train_epochs and the dataloader's length): not resolved", "pass --max-steps N"))
        for key, ds_val, hf_key, hf_val in self.mismatches:
            ptr, fix = self._mismatch_fix(key, ds_val, hf_key, hf_val)
            self.findings.append(emit(
                "H001", "error", ptr,
                f"ds {key}={ds_val} vs hf {hf_key}={hf_val}: the HF Trainer raises 'Please correct the following "
                "DeepSpeed config values that mismatch TrainingArguments values' at launch", fix,
                data={"key": key, "config": ds_val, "trainer_arg": hf_key, "trainer": hf_val,
                      **({"yaml_key": self.yaml_keys[key]} if key in self.yaml_keys else {})}))
        self.mismatches = []

    #: Batch keys and the Trainer argument (our CLI flag, the Trainer's own --flag) each must equal.
    _BATCH_FLAGS = {"train_micro_batch_size_per_gpu": "--per-device-train-batch-size",
                    "gradient_accumulation_steps": "--gradient-accumulation-steps"}
    #: Precision keys and the Trainer flag that turns them on.
    _PRECISION_FLAGS = {"bf16.enabled": "--bf16", "fp16.enabled": "--fp16"}
    #: Scalar keys and the Trainer argument (our CLI flag, the Trainer's own --flag) filling them.
    _VALUE_FLAGS = {"gradient_clipping": "--max-grad-norm", "optimizer.params.lr": "--learning-rate",
                    "optimizer.params.eps": "--adam-epsilon", "optimizer.params.weight_decay": "--weight-decay",
                    "scheduler.params.warmup_max_lr": "--learning-rate"}

    def _mismatch_fix(self, key: str, ds_val: Any, hf_key: str, hf_val: Any) -> tuple[str, str]:
        """(pointer, fix) of one H001. A batch key names the Trainer arguments that keep the
        config's global batch, micro x accumulation x world size with every number from the same
        side (DeepSpeed runtime/config.py _batch_assertion; the Trainer's train_batch_size in
        trainer_config_process): the config's (its explicit values, "auto" ones as the Trainer fills
        them) against the Trainer's (its per-device batch x its accumulation). A key accelerate
        wrote from a YAML field points at that field, and the fix edits it there."""
        a = self.args
        yk = self.yaml_keys.get(key)
        ptr = pointer(*yk.split(".")) if yk else _ptr(key)
        where = yk if yk else f'"{key.rsplit(".", 1)[-1]}"'
        fix = (f'set {where} to "auto"' + (f" in {self.yaml_source}" if yk else "")
               + f" (or to {json.dumps(hf_val)}), or change the Trainer argument {hf_key.split(' ')[0]}")
        if key == "train_batch_size":  # not a Trainer argument: trainer_config_process computes it
            fix = (f'set {where} to "auto"' + (f" in {self.yaml_source}" if yk else "")
                   + f" (or to {json.dumps(hf_val)}), or change the Trainer arguments it is computed from: "
                   "world size x --per-device-train-batch-size x --gradient-accumulation-steps")
        if key in self._VALUE_FLAGS and isinstance(ds_val, (int, float)) and not isinstance(ds_val, bool):
            fix = (f"pass {self._VALUE_FLAGS[key]} {ds_val} to the Trainer, or set {where} to \"auto\""
                   + (f" in {self.yaml_source}" if yk else "") + f" for the Trainer's {json.dumps(hf_val)}")
        if key in self._PRECISION_FLAGS and ds_val is True and hf_val is False:
            mp = key.split(".")[0]
            fix = (f"pass {self._PRECISION_FLAGS[key]} to the Trainer"
                   + (f" (the YAML's {yk}: {mp} enables {mp} in the DeepSpeed config accelerate builds, and "
                      f"TrainingArguments without {self._PRECISION_FLAGS[key]} says false)" if yk else
                      f', or set "{mp}": {{"enabled": "auto"}}'))
        mb, ga = (self.cfg.get_value(k) for k in self._BATCH_FLAGS)

        def count(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and v > 0

        if key in self._BATCH_FLAGS and count(mb) and count(ga):
            # the config's batch keys as they stand after the Trainer's fill: explicit values kept
            # (fill_match leaves a mismatched one as written), "auto" ones the Trainer's
            mine, theirs = mb * ga * a.world_size, a.per_device_train_batch_size * a.gradient_accumulation_steps * \
                a.world_size
            flags = " ".join(f"{flag} {v}" for k, flag in self._BATCH_FLAGS.items()
                             for v in [self.cfg.get_value(k)]
                             if v != {"train_micro_batch_size_per_gpu": a.per_device_train_batch_size,
                                      "gradient_accumulation_steps": a.gradient_accumulation_steps}[k])
            keys = " and ".join(self.yaml_keys.get(k, f'"{k}"') for k in self._BATCH_FLAGS
                                if any(m[0] == k for m in self.mismatches))
            ranks = f"{a.world_size} rank" + ("s" if a.world_size != 1 else "")
            fix = (f"pass {flags} to the Trainer to keep the config's global batch of {mine} sequences (micro-batch "
                   f"{mb} x accumulation {ga} x {ranks}); or set {keys} to \"auto\""
                   + (f" in {self.yaml_source}" if yk else "")
                   + f" for the Trainer's {theirs} ({a.per_device_train_batch_size} x "
                   f"{a.gradient_accumulation_steps} x {a.world_size})")
        return ptr, fix

    # -- step 5 -------------------------------------------------------------------------------
    def optim_sched(self) -> None:
        """``deepspeed_optim_sched``: the Trainer's own optimizer when the config has none."""
        if "optimizer" not in self.cfg.config:
            self.cfg.config["zero_allow_untested_optimizer"] = True

    # -- step 6 -------------------------------------------------------------------------------
    def prepare_deepspeed(self, model_config: Mapping[str, Any] | None, hidden_size: int | None,
                          num_processes: int) -> None:
        """``Accelerator._prepare_deepspeed`` as the Trainer calls it (model and optimizer, no
        dataloader; a DummyScheduler when the config has a scheduler): the final
        ``deepspeed_config_process(must_match=False, **config_kwargs)``; any "auto" it has no value
        for raises ``ValueError: `key` not found in kwargs`` (H002)."""
        c = self.cfg.config
        kw: dict[str, Any] = {"gradient_clipping": 1.0,
                              "zero_optimization.stage3_gather_16bit_weights_on_model_save": False}
        mb = self.cfg.get_value("train_micro_batch_size_per_gpu")
        if _is_auto(mb):  # only with no Trainer pass before (not reached in the Trainer flows)
            mb = self.args.per_device_train_batch_size
        if mb is not None:
            kw["train_micro_batch_size_per_gpu"] = mb
            gas = self.cfg.get_value("gradient_accumulation_steps")
            if isinstance(mb, int) and isinstance(gas, int):
                kw["train_batch_size"] = mb * gas * num_processes
        auto_hidden = [k for k in HIDDEN_SIZE_KEYS if _is_auto(self.cfg.get_value(k))]
        if auto_hidden:
            h = hidden_size if hidden_size is not None else hidden_size_of(model_config, text_config=False)
            if h is not None:
                kw.update(hidden_size_values(h))
        if "optimizer" in c:  # DummyOptim(params) defaults: lr=0.001, weight_decay=0
            kw.update({"optimizer.params.lr": 0.001, "optimizer.params.weight_decay": 0})
        if "scheduler" in c:  # DummyScheduler(optimizer) without a callable
            max_lr = 0.001 if "optimizer" in c else self.args.learning_rate
            kw.update({"scheduler.params.warmup_min_lr": 0, "scheduler.params.warmup_max_lr": max_lr,
                       "scheduler.params.warmup_num_steps": 1})
        for key, _ in list(_walk_autos(c)):
            if key in self.skipped:
                continue  # already reported as needing --model / --max-steps (H003) or as H002
            if key in kw:
                self.fill_only(key, kw[key], who="accelerate _prepare_deepspeed")
            else:
                self.findings.append(emit(
                    "H002", "error", _ptr(key),
                    f"{key} is \"auto\" but neither the Trainer nor accelerate fills it: accelerate raises "
                    f"'`{key}` not found in kwargs' in _prepare_deepspeed",
                    f"replace \"auto\" at {key} by a value", data={"key": key}))


def _hidden_from_inventory(inventory: Any) -> tuple[int | None, Mapping[str, Any] | None]:
    meta = getattr(inventory, "meta", None)
    if not isinstance(meta, Mapping):
        return None, None
    return hidden_size_of(meta), meta


def resolve_trainer(raw: dict, args: TrainerArgs, *, hidden_size: int | None = None,
                    model_config: Mapping[str, Any] | None = None, plugin: PluginSettings | None = None
                    ) -> Resolution:
    """The config the HF Trainer hands DeepSpeed for ``TrainingArguments(deepspeed=raw, ...)``.

    Replays, in order: ``HfTrainerDeepSpeedConfig.trainer_config_process``,
    ``DeepSpeedPlugin.__post_init__`` (``plugin``: the ACCELERATE_* environment; default none),
    ``DeepSpeedPlugin.set_mixed_precision``, ``trainer_config_finalize`` (num_training_steps =
    ``args.max_steps``), ``deepspeed_optim_sched`` and ``Accelerator._prepare_deepspeed``
    (transformers 5.24.0 ``integrations/deepspeed.py``, ``training_args.py``; accelerate 1.15.0
    ``utils/dataclasses.py``, ``accelerator.py``). ``hidden_size`` overrides ``model_config``
    (a HF config.json dict). ``raw`` is not modified.
    """
    r = _Resolver(raw, args)
    r.trainer_config_process()
    return _finish(r, args, plugin or PluginSettings(), hidden_size, model_config, from_file=True,
                   world_size=args.world_size)


def _finish(r: _Resolver, args: TrainerArgs, plugin: PluginSettings, hidden_size, model_config, *, from_file: bool,
            world_size: int | None, after_plugin=None) -> Resolution:
    r.plugin_post_init(plugin, from_file)
    r.set_mixed_precision(args.mixed_precision)
    if after_plugin:
        after_plugin(r)
    r.trainer_config_finalize(model_config, hidden_size, args.max_steps)
    r.optim_sched()
    r.prepare_deepspeed(model_config, hidden_size, args.world_size)
    h = hidden_size if hidden_size is not None else hidden_size_of(model_config)
    z3 = plugin.zero3_init_flag if plugin.zero3_init_flag is not None else r.cfg.is_zero3()
    return Resolution(config=r.cfg.config, findings=r.findings, world_size=world_size, hidden_size=h,
                      filled=r.filled, zero3_init=bool(z3 and r.cfg.is_zero3()))


def trainer_fill(raw: dict, args: TrainerArgs, *, hidden_size: int | None = None,
                 model_config: Mapping[str, Any] | None = None) -> tuple[dict, list[Finding]]:
    """Only ``HfTrainerDeepSpeedConfig.trainer_config_process`` then ``trainer_config_finalize``
    (what transformers' class does on its own, without accelerate's plugin around it).
    Returns (config, findings); H001 findings stand for the ValueError finalize raises."""
    r = _Resolver(raw, args)
    r.trainer_config_process()
    r.trainer_config_finalize(model_config, hidden_size, args.max_steps)
    return r.cfg.config, r.findings


# -- accelerate config YAML ----------------------------------------------------------------------

def is_accelerate_config(text: str) -> bool:
    """True when ``text`` looks like an accelerate config (a top-level ``distributed_type`` key),
    in YAML or in JSON form (``accelerate launch --config_file`` reads both)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past Python's limit (the readers refuse it)
        data = None
    if isinstance(data, dict):
        return "distributed_type" in data
    for line in text.splitlines():
        s = line.split("#", 1)[0].rstrip()
        if s.startswith("distributed_type:") or s.startswith('"distributed_type"') or s.startswith("'distributed_type'"):
            return True
    return False


def _bool_env(v: Any) -> bool:
    # accelerate writes str(value).lower() into the environment and reads it back with str_to_bool
    return str(v).lower() in ("y", "yes", "t", "true", "on", "1")


def read_accelerate_config(source: str, text: str | None = None) -> AccelerateLaunch:
    """Read an accelerate config YAML (or JSON) file as ``accelerate launch`` does.

    Follows ``accelerate/commands/config/config_args.py`` (``BaseConfig.process_config``) and
    ``accelerate/commands/launch.py`` ``_validate_launch_command`` (deepspeed_config keys copied
    onto the launch arguments for ``compute_environment: LOCAL_MACHINE``) and
    ``accelerate/utils/launch.py`` ``prepare_deepspeed_cmd_env`` (the ACCELERATE_* variables the
    plugin reads). Raises AdvisorError when the file is not a DeepSpeed accelerate config.
    """
    from advisor.config.readers import MAX_YAML_BYTES, parse_yaml, read_text

    if text is None:
        text = read_text(source, limit=MAX_YAML_BYTES, what="accelerate config")
    if source.endswith(".json"):
        # accelerate/commands/config/config_args.py load_config_from_file: a path ending in ".json"
        # (case-sensitive) is read with json.load, every other with yaml.safe_load
        from advisor.config.readers import MAX_DEPTH, depth_ok
        if not depth_ok(text):
            raise AdvisorError(f"{source}: nesting deeper than {MAX_DEPTH} levels; not an accelerate config")
        try:
            data = json.loads(text)  # json.load's reading, not YAML's (a "\ud800" escape is valid JSON)
        except RecursionError:
            raise AdvisorError(f"{source}: nesting too deep to parse") from None
        except ValueError as e:
            where = f"line {e.lineno} column {e.colno}: " if isinstance(e, json.JSONDecodeError) else ""
            raise AdvisorError(
                f"{source}: {where}not JSON ({getattr(e, 'msg', e)}): accelerate launch reads a config file named "
                "*.json with json.load (accelerate/commands/config/config_args.py load_config_from_file) and fails "
                "on YAML; write the file as JSON or rename it to .yaml")
    else:
        data = parse_yaml(text, source, what="accelerate config")
    if not isinstance(data, dict) or "distributed_type" not in data:
        raise AdvisorError(f"{source}: not an accelerate config (no distributed_type)")
    dt = str(data["distributed_type"]).upper().replace("DISTRIBUTEDTYPE.", "")
    if dt != "DEEPSPEED":
        raise AdvisorError(f"{source}: accelerate config with distributed_type {shown(data['distributed_type'])}, "
                           "not DEEPSPEED: DeepSpeed is not used")
    findings: list[Finding] = accelerate_unknown_keys(data)
    ds = data.get("deepspeed_config") or {}
    if not isinstance(ds, dict):
        raise AdvisorError(f"{source}: deepspeed_config must be a mapping")
    env = str(data.get("compute_environment", "LOCAL_MACHINE")).upper().replace("COMPUTEENVIRONMENT.", "")
    local = env == "LOCAL_MACHINE"
    if not local:
        findings.append(emit("H006", "info", "/compute_environment",
                                f"compute_environment {env}: accelerate copies deepspeed_config onto the launch only "
                                "for LOCAL_MACHINE; the values below are read as if it were", ""))
        ds_eff: dict = {}
    else:
        ds_eff = ds
    p = PluginSettings()

    def bad(key: str, problem: str, fix: str) -> None:
        """A value accelerate launch (or DeepSpeed, which gets it from accelerate) refuses: an H004
        error at the YAML key; the field keeps accelerate's default so the rest is still read."""
        findings.append(emit("H004", "error", pointer(*key.split(".")), f"{key}: {problem}", fix,
                             data={"kind": "bad-field", "key": key}))

    def read(key: str, value: Any, conv, fix: str):
        try:
            return conv(value)
        except InputValueError as e:
            bad(key, e.problem, fix)
            return None

    if ds_eff.get("zero_stage") is not None:
        # DeepSpeedPlugin: int(os.environ["ACCELERATE_DEEPSPEED_ZERO_STAGE"]) of str(value), handed to
        # DeepSpeed as zero_optimization.stage (ZeroStageEnum: 0-3)
        z = ds_eff["zero_stage"]
        try:
            stage = int(str(z))
        except ValueError:
            bad("deepspeed_config.zero_stage", f"{shown(z)} is not an integer: accelerate's DeepSpeedPlugin raises "
                f"ValueError on int({str(z)!r}); allowed: {', '.join(map(str, ACCELERATE_ZERO_STAGES))}",
                "set deepspeed_config.zero_stage to 0, 1, 2 or 3")
        else:
            if stage in ACCELERATE_ZERO_STAGES:
                p.zero_stage = stage
            else:
                bad("deepspeed_config.zero_stage", f"{stage} is not a ZeRO stage: accelerate hands it to DeepSpeed as "
                    f"zero_optimization.stage, which refuses it; allowed: "
                    f"{', '.join(map(str, ACCELERATE_ZERO_STAGES))}", "set deepspeed_config.zero_stage to 0, 1, 2 or 3")
    if ds_eff.get("gradient_accumulation_steps") is not None:
        g = ds_eff["gradient_accumulation_steps"]
        v = (AUTO if isinstance(g, str) and g.strip().lower() == AUTO else
             read("deepspeed_config.gradient_accumulation_steps", g, lambda x: as_int(x, "", lo=1, hi=1 << 31),
                  "set deepspeed_config.gradient_accumulation_steps to a positive integer or auto"))
        if v is not None:
            p.gradient_accumulation_steps = v
    if ds_eff.get("gradient_clipping") is not None:
        g = ds_eff["gradient_clipping"]
        v = (AUTO if isinstance(g, str) and g.strip().lower() == AUTO else
             read("deepspeed_config.gradient_clipping", g, lambda x: as_float(x, "", lo=0),
                  "set deepspeed_config.gradient_clipping to a number >= 0 or auto"))
        if v is not None:
            p.gradient_clipping = v
    for k in ("offload_optimizer_device", "offload_param_device"):
        if ds_eff.get(k) is not None:
            v = read(f"deepspeed_config.{k}", ds_eff[k],
                     lambda x: as_str(x, "", lower=True, choices=("none", "cpu", "nvme")),
                     f"set deepspeed_config.{k} to none, cpu or nvme")
            if v is not None:
                setattr(p, k, v)
    for k in ("offload_optimizer_nvme_path", "offload_param_nvme_path"):
        if ds_eff.get(k) is not None:
            v = read(f"deepspeed_config.{k}", ds_eff[k], lambda x: as_str(x, ""), f"set deepspeed_config.{k} to a path")
            if v is not None:
                setattr(p, k, v)
    if ds_eff.get("zero3_save_16bit_model") is not None:
        p.zero3_save_16bit_model = _bool_env(ds_eff["zero3_save_16bit_model"])
    if ds_eff.get("zero3_init_flag") is not None:
        p.zero3_init_flag = _bool_env(ds_eff["zero3_init_flag"])
    mp_raw = data.get("mixed_precision")
    if mp_raw is None and data.get("fp16"):
        mp_raw = "fp16"  # process_config: legacy fp16: true
    mp = "no"
    if mp_raw is not None:
        # accelerate/utils/launch.py prepare_deepspeed_cmd_env: PrecisionType(args.mixed_precision.lower())
        if not isinstance(mp_raw, str):
            bad("mixed_precision", f"{shown(mp_raw)} is not a string: accelerate launch calls .lower() on it and "
                "raises" + (" (YAML reads an unquoted no as false)" if mp_raw is False else "")
                + f"; allowed: {', '.join(ACCELERATE_PRECISIONS)}",
                "write mixed_precision: 'no' (quoted), fp16 or bf16")
        elif mp_raw.lower() not in ACCELERATE_PRECISIONS:
            bad("mixed_precision", f"{shown(mp_raw)} is not a precision accelerate knows: accelerate launch raises "
                f"'Unknown mixed_precision mode: {mp_raw.lower()}. Choose between {list(ACCELERATE_PRECISIONS)}.'",
                f"set mixed_precision to one of {', '.join(ACCELERATE_PRECISIONS)}")
        else:
            mp = mp_raw.lower()
    p.ds_fields = tuple(ds_eff.keys()) + (("mixed_precision",) if mp_raw is not None else ())
    if data.get("mixed_precision") is None and mp_raw is not None:
        p.mixed_precision_key = "fp16"
    cfg_file = ds_eff.get("deepspeed_config_file")
    if cfg_file is not None:
        # kept as written: accelerate launch exports it (ACCELERATE_DEEPSPEED_CONFIG_FILE) and
        # HfDeepSpeedConfig opens it with os.path.exists/open, relative to the working directory
        # of the launch, not to the YAML's folder (accelerate_base_config says where it looked)
        cfg_file = as_str(cfg_file, f"{source}: deepspeed_config.deepspeed_config_file")
        if cfg_file == "none":
            # DeepSpeedPlugin.__post_init__ reads the string "none" as no file (hf_ds_config != "none")
            # and builds the config from the accelerate fields
            cfg_file = None
        elif not cfg_file.strip():
            # accelerate launch exports any value that is not None (utils/launch.py: if
            # args.deepspeed_config_file is not None), so "" reaches HfDeepSpeedConfig, which finds no
            # such path, no JSON and no base64 in it and raises
            bad("deepspeed_config.deepspeed_config_file", f"{shown(cfg_file)} is empty: accelerate launch still "
                "exports it and HfDeepSpeedConfig raises 'Expected a string path to an existing deepspeed config, "
                "or a dictionary, or a base64 encoded string'",
                "give the DeepSpeed config's path, or remove deepspeed_config_file to build it from the "
                "accelerate fields")
            cfg_file = None
    nproc = data.get("num_processes")
    if nproc is not None:
        nproc = read("num_processes", nproc, lambda x: world_size(x, ""),
                     "set num_processes to the total number of processes (all machines)")
    nmach = data.get("num_machines", 1)
    nmach = 1 if nmach is None else read("num_machines", nmach, lambda x: as_int(x, "", lo=1, hi=MAX_NODES),
                                          "set num_machines to the number of nodes") or 1
    if nproc is not None and nmach > 1 and nproc % nmach:
        per = nproc // nmach
        if per == 0:
            bad("num_processes", f"{nproc} processes on {nmach} machines: accelerate launch starts num_processes // "
                f"num_machines = 0 per machine", "set num_processes to a multiple of num_machines")
        else:
            findings.append(emit("H006", "warning", "/num_processes",
                                 f"num_processes {nproc} is not a multiple of num_machines {nmach}: accelerate launch "
                                 f"starts num_processes // num_machines = {per} per machine, {per * nmach} in all; "
                                 f"world size {per * nmach} is used", "set num_processes to a multiple of num_machines",
                                 data={"kind": "uneven-machines"}))
    return AccelerateLaunch(source=source, data=data, plugin=p, mixed_precision=mp, num_processes=nproc,
                            num_machines=nmach, deepspeed_config_file=cfg_file,
                            findings=findings)


def deepspeed_config_file_at(launch: AccelerateLaunch) -> str | None:
    """The ``deepspeed_config_file`` the accelerate YAML names when a regular file is there, else
    None (none named, or nothing at that path). Raises AdvisorError naming the YAML and the file
    (``acc.yaml: deepspeed_config_file ds.json: is a FIFO (named pipe), ...``, as
    :func:`accelerate_base_config` words a read error) when a FIFO, a device or a directory is
    there: told from ``stat`` (:func:`advisor.config.readers.regular_file_at`), never opened."""
    from advisor.config.readers import regular_file_at
    name = launch.deepspeed_config_file
    if not name:
        return None
    try:
        return name if regular_file_at(name, what="deepspeed_config_file") else None
    except ConfigLoadError as e:
        raise AdvisorError(f"{launch.source}: deepspeed_config_file {e}") from None


def accelerate_base_config(launch: AccelerateLaunch) -> tuple[dict, bool]:
    """The config ``DeepSpeedPlugin.__post_init__`` starts from: the deepspeed_config_file's dict
    (read with ``json.load``, as ``HfDeepSpeedConfig`` does), or, without a file, the dict it
    builds from the plugin fields. Returns (config, from_file). Raises AdvisorError when the file
    is not found where accelerate looks (relative to the working directory), naming that path."""
    p = launch.plugin
    if launch.deepspeed_config_file:
        from advisor.config.readers import MAX_CONFIG_BYTES, read_json_file
        name = launch.deepspeed_config_file
        if not os.path.lexists(name):
            # accelerate/utils/deepspeed.py HfDeepSpeedConfig.__init__: os.path.exists(path) relative to
            # the process's working directory, else it raises "Expected a string path to an existing
            # deepspeed config ..."
            near = os.path.join(os.path.dirname(os.path.abspath(launch.source)), name)
            hint = (f"; there is one next to the YAML ({near}): run from that folder or give its path relative "
                    "to where you launch, or an absolute path") if not os.path.isabs(name) and os.path.isfile(near) \
                else ""
            raise AdvisorError(
                f"{launch.source}: deepspeed_config.deepspeed_config_file {name!r}: no such file at "
                f"{os.path.abspath(name)} (accelerate opens it relative to the directory accelerate launch runs in, "
                "not the YAML's folder: accelerate/utils/deepspeed.py HfDeepSpeedConfig, which then raises 'Expected "
                f"a string path to an existing deepspeed config'){hint}")
        try:
            d = read_json_file(launch.deepspeed_config_file, limit=MAX_CONFIG_BYTES,
                               what="deepspeed_config_file")  # strict JSON, as json.load reads it
        except ConfigLoadError as e:  # name the YAML that points at it too, then the file's own line
            raise AdvisorError(f"{launch.source}: deepspeed_config_file {e}") from None
        if not isinstance(d, dict):
            raise AdvisorError(f"{launch.source}: deepspeed_config_file {launch.deepspeed_config_file}: top level is "
                               f"{type_name(d)}, expected a JSON object")
        from advisor.config.readers import wide_array_problem
        wide = wide_array_problem(d)
        if wide is not None:
            raise AdvisorError(f"{launch.source}: deepspeed_config_file {launch.deepspeed_config_file}: {wide[1]}")
        return d, True
    cfg: dict[str, Any] = {
        "train_batch_size": AUTO,
        "train_micro_batch_size_per_gpu": AUTO,
        "gradient_accumulation_steps": p.gradient_accumulation_steps,
        "zero_optimization": {
            "stage": p.zero_stage,
            "offload_optimizer": {"device": p.offload_optimizer_device,
                                  "nvme_path": p.offload_optimizer_nvme_path if p.offload_optimizer_device == "nvme"
                                  else None},
            "offload_param": {"device": p.offload_param_device,
                              "nvme_path": p.offload_param_nvme_path if p.offload_param_device == "nvme" else None},
            "stage3_gather_16bit_weights_on_model_save": p.zero3_save_16bit_model,
        },
    }
    if p.gradient_clipping:
        cfg["gradient_clipping"] = p.gradient_clipping
    return cfg, False


#: The fields of accelerate's ``BaseConfig`` (accelerate 1.15.0, checked against the installed 1.16.0:
#: accelerate/commands/config/config_args.py ``class BaseConfig``), plus the two legacy keys
#: ``BaseConfig.process_config`` converts and removes before its unknown-key check (``fp16`` ->
#: ``mixed_precision``, ``dynamo_backend`` -> ``dynamo_config``), so a file may hold them.
_ACCELERATE_BASE_KEYS = frozenset({"compute_environment", "distributed_type", "mixed_precision", "use_cpu", "debug",
                                   "fp16", "dynamo_backend"})
#: Top-level keys ``ClusterConfig.from_yaml_file`` / ``from_json_file`` accept: the dataclass fields of
#: ``ClusterConfig`` (accelerate/commands/config/config_args.py ``class ClusterConfig``), read for a file
#: whose ``compute_environment`` is LOCAL_MACHINE or absent (``load_config_from_file``).
ACCELERATE_CLUSTER_KEYS = _ACCELERATE_BASE_KEYS | {
    "num_processes", "machine_rank", "num_machines", "gpu_ids", "main_process_ip", "main_process_port",
    "rdzv_backend", "same_network", "main_training_function", "enable_cpu_affinity", "fp8_config",
    "deepspeed_config", "fsdp_config", "parallelism_config", "megatron_lm_config", "mpirun_config",
    "downcast_bf16", "tpu_name", "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "command_file", "commands",
    "tpu_vm", "tpu_env", "dynamo_config"}
#: Top-level keys ``SageMakerConfig`` accepts (same file, ``class SageMakerConfig``), read for any other
#: ``compute_environment``.
ACCELERATE_SAGEMAKER_KEYS = _ACCELERATE_BASE_KEYS | {
    "ec2_instance_type", "iam_role_name", "image_uri", "profile", "region", "num_machines", "gpu_ids",
    "base_job_name", "pytorch_version", "transformers_version", "py_version", "sagemaker_inputs_file",
    "sagemaker_metrics_file", "additional_args", "dynamo_config", "enable_cpu_affinity"}
#: Top-level keys of an accelerate config file of either class: a ``--set`` naming one is refused (see
#: :func:`accelerate_overrides`); a DeepSpeed config has none of them at the top level.
ACCELERATE_FILE_KEYS = ACCELERATE_CLUSTER_KEYS | ACCELERATE_SAGEMAKER_KEYS


def accelerate_unknown_keys(data: Mapping[str, Any]) -> list[Finding]:
    """H010 errors for the top-level keys of an accelerate config file that accelerate refuses:
    ``from_yaml_file`` / ``from_json_file`` (accelerate/commands/config/config_args.py, ~l.134 and
    ~l.150) raise ValueError "The config file at ... had unknown keys" for any key that is not a field
    of the class ``load_config_from_file`` picks (``ClusterConfig`` for compute_environment
    LOCAL_MACHINE or absent, else ``SageMakerConfig``). Each finding names the key, a close known
    key (difflib, cutoff 0.8, as the DeepSpeed unknown-key suggestion) or the other class that
    knows it, with the fix: rename or remove it."""
    import difflib

    from advisor.errors import cut

    env = data.get("compute_environment", "LOCAL_MACHINE")
    cluster = str(env) == "LOCAL_MACHINE"
    known = ACCELERATE_CLUSTER_KEYS if cluster else ACCELERATE_SAGEMAKER_KEYS
    cls = "ClusterConfig" if cluster else "SageMakerConfig"
    out: list[Finding] = []
    for key in data:
        name = str(key)
        if name in known:
            continue
        shown_key = cut(name)
        near = difflib.get_close_matches(name.lower(), sorted(known), n=1, cutoff=0.8) if len(name) < 200 else []
        if near:
            hint, fix = f"; did you mean {near[0]}?", f"rename {shown_key} to {near[0]}"
        elif name in ACCELERATE_FILE_KEYS:
            other = "SageMakerConfig (compute_environment AMAZON_SAGEMAKER)" if cluster else \
                "ClusterConfig (compute_environment LOCAL_MACHINE)"
            hint, fix = f"; it is a field of {other}", f"remove {shown_key}, or set the compute_environment that has it"
        else:
            hint, fix = "", f"remove {shown_key}"
        out.append(emit("H010", "error", pointer(name),
                        f"{shown_key}: not a key accelerate knows here: accelerate launch reads this file as {cls} "
                        f"and raises ValueError 'The config file at ... had unknown keys' "
                        f"(accelerate/commands/config/config_args.py from_yaml_file/from_json_file){hint}",
                        fix, data={"kind": "unknown-key", "key": shown_key, "suggestion": near[0] if near else None}))
    return out


def accelerate_overrides(launch: AccelerateLaunch, base: dict, overrides: Iterable[str]) -> dict:
    """What ``--set KEY.PATH=VALUE`` means for an accelerate file: KEY.PATH is a key of the
    DeepSpeed config accelerate starts from (:func:`accelerate_base_config`: its
    ``deepspeed_config_file``'s dict, else the one it builds from the YAML's deepspeed_config
    fields), set before accelerate and the HF Trainer fill "auto" -- the same keys as for a
    DeepSpeed file, so a computed fix (``--set zero_optimization.offload_optimizer.device=cpu``)
    applies to either. Returns the overridden ``base``. Raises InputValueError (exit 2) for a key
    of the accelerate file itself (``mixed_precision``, ``num_processes``, ``deepspeed_config.*``):
    accelerate's own fields are edited in the file (``--world-size`` overrides num_processes),
    or for a value the DeepSpeed config's validation refuses
    (:func:`advisor.config.overrides.check_overrides`)."""
    from advisor.config.loading import LoadedConfig
    from advisor.config.overrides import apply_overrides, check_overrides, parse_override

    overrides = list(overrides)
    for text in overrides:
        path, _ = parse_override(text)
        if path[0] in ACCELERATE_FILE_KEYS:
            raise InputValueError(
                f"--set {text!r}", f"{path[0]} is a key of the accelerate config {launch.source}, not of the DeepSpeed "
                "config it launches: --set on an accelerate file sets keys of the DeepSpeed config accelerate builds "
                "(e.g. zero_optimization.stage=3); edit the accelerate file for its own fields"
                + (" (or pass --world-size)" if path[0] in ("num_processes", "num_machines") else ""))
    check_overrides(LoadedConfig(source=launch.deepspeed_config_file or launch.source, data=base, positions={},
                                 text=""), overrides)
    return apply_overrides(base, overrides)


def resolve_accelerate(launch: AccelerateLaunch, args: TrainerArgs | None = None, *, hidden_size: int | None = None,
                       model_config: Mapping[str, Any] | None = None, world_size: int | None = None,
                       overrides: Iterable[str] = ()) -> Resolution:
    """The config DeepSpeed receives when a Trainer script runs under ``accelerate launch`` with
    this YAML: ``DeepSpeedPlugin.__post_init__`` from the launch environment, ``set_mixed_precision``,
    then ``propagate_args_to_deepspeed`` (``trainer_config_process``), ``trainer_config_finalize``,
    ``deepspeed_optim_sched``, ``_prepare_deepspeed``. World size: ``world_size`` if given, else
    the YAML's ``num_processes`` (``accelerate launch`` runs that many processes in total).
    ``args.world_size`` and ``env_mixed_precision`` are overridden from the launch.
    ``overrides``: ``--set`` strings, applied to the config accelerate starts from
    (:func:`accelerate_overrides`; raises InputValueError as it does)."""
    args = copy.copy(args) if args is not None else TrainerArgs()
    ws = world_size or launch.world_size
    args.world_size = ws or 1
    args.env_mixed_precision = launch.mixed_precision
    base, from_file = accelerate_base_config(launch)
    if overrides:
        base = accelerate_overrides(launch, base, overrides)
    r = _Resolver(base, args)
    if not from_file:  # built from the YAML's fields: findings about them point back at the YAML
        written = set(launch.plugin.ds_fields)
        r.yaml_keys = {k: f"deepspeed_config.{k}" for k in ("gradient_accumulation_steps", "gradient_clipping")
                       if k in written}
        mp_key = "mixed_precision" if launch.data.get("mixed_precision") is not None else \
            "fp16" if launch.data.get("fp16") else None
        if mp_key:
            r.yaml_keys.update({"bf16.enabled": mp_key, "fp16.enabled": mp_key})
        r.yaml_source = os.path.basename(launch.source)
    r.findings.extend(launch.findings)
    if ws is None:
        # a num_processes that is written but unusable already has its H004 error: say that, not "missing"
        unusable = launch.data.get("num_processes") is not None
        r.findings.append(emit("H006", "info", "/num_processes",
                                  ("num_processes is not a usable number (see the error above)" if unusable else
                                   "num_processes is not in the accelerate config")
                                  + " (accelerate launch then needs --num_processes): world size 1 assumed",
                                  "pass --world-size N"))

    def pre_finalize(res: _Resolver) -> None:
        res.trainer_config_process()

    res = _finish(r, args, launch.plugin, hidden_size, model_config, from_file=from_file, world_size=ws,
                  after_plugin=pre_finalize)
    res.base = base  # the replay worked on a deep copy
    return res


def resolve_for_estimate(raw: dict, trainer_args: TrainerArgs | Mapping[str, Any] | None, inventory: Any = None,
                         world_size: int | None = None, *, hidden_size: int | None = None
                         ) -> tuple[dict, list[Finding]]:
    """Integration entry for lint/estimate ``--hf``: the resolved raw config and the H findings.

    ``trainer_args``: a TrainerArgs, a dict of its fields (e.g. the click options of
    the CLI's Trainer options), or None for TrainingArguments' defaults. ``inventory``: its
    ``meta`` supplies hidden_size (or hidden_sizes / text_config) for the bucket sizes.
    ``world_size``: total ranks (the Trainer's ``args.world_size``), default 1.
    """
    args = trainer_args if isinstance(trainer_args, TrainerArgs) else TrainerArgs.from_mapping(trainer_args or {})
    if world_size is not None:
        args = copy.copy(args)
        args.world_size = world_size
    h, meta = _hidden_from_inventory(inventory)
    res = resolve_trainer(raw, args, hidden_size=hidden_size if hidden_size is not None else h,
                          model_config=meta if h is not None else None)
    return res.config, res.findings


#: The Trainer's ``optim`` values ds-advisor models as the client optimizer (both torch.optim.AdamW:
#: transformers 5.25.0 ``trainer_optimizer.py`` _get_adamw_torch l.201-208 adds ``fused=True`` for the second).
TRAINER_ADAMW_OPTIMS = ("adamw_torch", "adamw_torch_fused")


#: The Trainer's param groups in the optimizer line of estimate's assumptions (:func:`trainer_param_groups`).
TRAINER_GROUPS_WORDS = "two param groups (decay / no-decay)"


def trainer_optimizer(raw: Mapping[str, Any], trainer_args: "TrainerArgs | Mapping[str, Any] | None"
                      ) -> tuple[str | None, dict[str, Any], str]:
    """(torch class, its params, the assumption in words) of the optimizer the HF Trainer hands
    ``deepspeed.initialize`` for the resolved config ``raw``; (None, {}, "") when ``raw`` has an optimizer
    block (the Trainer then passes a DummyOptim and DeepSpeed builds the block's optimizer).

    transformers 5.25.0: ``integrations/deepspeed.py`` deepspeed_optim_sched l.577-590 -- no "optimizer" in the
    config -> ``trainer.create_optimizer()`` (``trainer.py`` l.1274-1341: two param groups, the decay group at
    ``args.weight_decay`` and the no-decay group at 0.0) and ``zero_allow_untested_optimizer`` true;
    ``TrainingArguments.optim`` defaults to "adamw_torch_fused" on torch >= 2.8, else "adamw_torch"
    (``training_args.py`` l.806-811) -> torch.optim.AdamW, ``fused=True`` for the fused one
    (``trainer_optimizer.py`` _get_adamw_torch l.201-208; without it torch 2.13 takes foreach on a GPU). Another
    ``optim`` is not modelled: (None, {}, words) and the caller keeps its Adam assumption.

    Where DeepSpeed would refuse a client optimizer other than DeepSpeedCPUAdam / DeepSpeedCPULion (optimizer
    offload to cpu or nvme with ``zero_force_ds_cpu_optimizer`` true:
    :attr:`advisor.config.effective.EffectiveConfig.client_optimizer_must_be_ds_cpu`, with its sources) accelerate
    1.16.0 swaps the Trainer's optimizer for DeepSpeedCPUAdam before ``deepspeed.initialize`` (``accelerator.py``
    l.2336-2345, ``utils/deepspeed.py`` map_pytorch_optim_to_deepspeed l.29: AdamW -> ``adamw_mode`` true), so
    (None, {}, words): the caller's DeepSpeedCPUAdam for a written offload is that optimizer (without the
    swap DeepSpeed would refuse the client optimizer; plain DeepSpeed gets rule O011 instead)."""
    if isinstance(raw.get("optimizer"), dict):
        return None, {}, ""
    args = trainer_args if isinstance(trainer_args, TrainerArgs) else TrainerArgs.from_mapping(trainer_args or {})
    how = "write an optimizer block in the DeepSpeed config, or set the Trainer's optim, to change it"
    optim = args.optim if isinstance(args.optim, str) else str(args.optim)
    from advisor.config.effective import effective_config
    z = raw.get("zero_optimization")
    oo = z.get("offload_optimizer") if isinstance(z, dict) else None
    # accelerate reads the offload_optimizer block itself (not the deprecated cpu_offload alias DeepSpeed maps)
    swaps = isinstance(oo, dict) and oo.get("device", "none") != "none"
    if swaps and effective_config(dict(raw)).client_optimizer_must_be_ds_cpu:
        return None, {}, (f"none given (the HF Trainer builds its optim {optim!r} over {TRAINER_GROUPS_WORDS}; under "
                          "offload_optimizer accelerate swaps it for DeepSpeedCPUAdam over the same groups before "
                          "deepspeed.initialize; write an optimizer block in the DeepSpeed config to change it)")
    if optim not in TRAINER_ADAMW_OPTIMS:
        return None, {}, (f"none given (the HF Trainer builds its optim {optim!r} over {TRAINER_GROUPS_WORDS}, "
                          "not modelled: Adam assumed; write an optimizer block in the DeepSpeed config to model "
                          "DeepSpeed's)")
    fused = optim == "adamw_torch_fused"
    params: dict[str, Any] = {"weight_decay": args.weight_decay, "lr": args.learning_rate,
                              "betas": [args.adam_beta1, args.adam_beta2], "eps": args.adam_epsilon}
    if fused:
        params["fused"] = True
    words = (f"none given (the HF Trainer builds torch.optim.AdamW{'(fused=True)' if fused else ''} over "
             f"{TRAINER_GROUPS_WORDS}: "
             f"TrainingArguments.optim {optim!r}" + (", the default on torch >= 2.8" if fused else "")
             + f"; {how})")
    return "AdamW", params, words


#: transformers 5.25.0 ``trainer.py`` Trainer.get_decay_parameter_names l.1423-1433: a parameter whose lower-cased
#: name matches one of these goes to the Trainer's no-decay param group (``trainer_pt_utils.py`` get_parameter_names
#: l.1348-1366 searches them in each ancestor's relative name, ``f"{name}.{n}".lower()``; a match there is a match in
#: the full name, whose ``(?:^|\.)`` reads the relative name's start as the dot before it, so one search of the whole
#: lower-cased name gives the same set).
TRAINER_NO_DECAY_PATTERNS = (r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)")
_NO_DECAY_SEARCH = re.compile("|".join(TRAINER_NO_DECAY_PATTERNS)).search


def trainer_no_decay(tensors: "list[Any]", repeat: Any = None,
                     layernorm: "frozenset[str] | None" = None) -> "list[bool] | bytes":
    """For each tensor of ``tensors`` (objects with ``name`` and ``shape``, in ``model.parameters()`` order): True
    where the HF Trainer puts it in its no-decay param group (transformers 5.25.0 ``trainer.py`` create_optimizer
    l.1285-1300: group 0 the names Trainer.get_decay_parameter_names l.1423-1433 gives, at ``args.weight_decay``;
    group 1 every other trainable parameter, at 0.0).

    get_decay_parameter_names leaves out (a) every parameter whose lower-cased name matches
    :data:`TRAINER_NO_DECAY_PATTERNS` -- applied here exactly -- and (b) every parameter inside an ``nn.LayerNorm``
    (``get_parameter_names(model, [nn.LayerNorm], ...)``, l.1432: by the module's class, ``isinstance``,
    ``trainer_pt_utils.py`` l.1361).

    ``layernorm``: for (b), the names of the parameters inside an ``nn.LayerNorm``, where the inventory was exported
    from the real modules (:func:`advisor.model.inventory.from_module` records them by class:
    :func:`advisor.model.inventory.layernorm_names`; the ``--hf`` path of a model type transformers builds,
    :func:`advisor.engine.trace.inventory_from_hf_config`, and ``advisor.preflight``): then (b) is exact, and
    ``repeat`` is not used. Without it (a preset, a ``config.json`` spec of a built-in architecture, an inventory file
    without that record) a tensor list has no classes, so for (b) ds-advisor guesses: a module whose parameters are
    exactly a 1-D ``weight`` followed by a 1-D ``bias`` of the same length (``nn.LayerNorm``'s
    ``elementwise_affine`` pair, registered in that order) is an nn.LayerNorm. That is exact for every model type
    ds-advisor builds (GPT-2's ``ln_1`` / ``ln_2`` / ``ln_f`` and BLOOM's ``ln_f`` are the only LayerNorm weights
    no pattern names; tests/test_trainer_groups.py checks every family against transformers' own function on the
    real module). Where the guess cannot know: an ``nn.LayerNorm(bias=False)`` (MPT, OLMo, some Llama-likes) whose
    name matches no pattern is taken as decay (the Trainer: no-decay), and another module of exactly a 1-D weight
    and bias (``nn.BatchNorm1d``, ``nn.GroupNorm``) whose name matches no pattern as no-decay (the Trainer: decay).
    Names are searched as a :class:`advisor.model.inventory.LayerTensorSpec` holds them (its layer prefix and
    suffix apart, each searched once: the suffix starts with the dot, so no pattern spans the two except through
    that dot, which ``prefix + "."`` keeps).

    ``repeat`` (the tensors' :class:`advisor.model.parallel.LayerRepeat`, or None) makes it O(layer + tensors outside
    the layers) in Python (issue 21: 9e5 tensors at 1e5 layers cost ~1.2 s and +41 MB kept, most of it here and in
    :meth:`Inventory.regrouped`): layer ``t``'s tensor ``j`` is named ``{prefix}{first + t}.{suffix_j}`` with layer
    0's fields, and every layer between the first and the last has the same answers as layer 1, because (a) no
    pattern holds a digit, so a match lies wholly before the layer number or wholly after it (the same in every
    layer), and (b) a layer's neighbours' names differ from its own ``{prefix}{n}.`` at the number (no name of layer
    ``n +- 1`` equals or starts with a module name of layer ``n``), so the pair rule sees a layer boundary alike in
    each middle layer. The first and last layer (beside the tensors outside) are searched as any tensor.
    Returns bytes (1 = no-decay) with ``repeat``, else a list of bools; the same truth values either way."""
    n = len(tensors)
    if layernorm is not None:
        search = _NO_DECAY_SEARCH
        return [t.name in layernorm or search(t.name.lower()) is not None for t in tensors]
    if repeat is None or repeat.count < 3 or repeat.end > n:
        return _no_decay_span(tensors, 0, n)
    h, u, e = repeat.head, repeat.unit, repeat.end
    mid = bytes(_no_decay_span(tensors, h + u, h + 2 * u))  # layer 1: between layer 0 and layer 2
    return (bytes(_no_decay_span(tensors, 0, h + u)) + mid * (repeat.count - 2)
            + bytes(_no_decay_span(tensors, e - u, n)))


def _no_decay_span(tensors: "list[Any]", lo: int, hi: int) -> list[bool]:
    """:func:`trainer_no_decay` of ``tensors[lo:hi]``, their neighbours read in the whole list ``tensors``."""
    search = _NO_DECAY_SEARCH
    seen: dict[str, bool] = {}  # a layer prefix (searched with the dot after it) or a suffix -> its match

    def hit(text: str, dot: str = "") -> bool:
        v = seen.get(text)
        if v is None:
            v = seen[text] = search((text + dot).lower()) is not None
        return v

    span = tensors[lo:hi]
    out = [hit(t.prefix, ".") or hit(sfx) if (sfx := getattr(t, "suffix", None)) and sfx[0] == "."
           else search(t.name.lower()) is not None for t in span]
    n = len(tensors)
    for k in [k for k, t in enumerate(span) if len(t.shape) == 1]:
        i = lo + k
        t = tensors[i]
        if out[k] or i + 1 >= n:
            continue
        name = t.name
        if not name.endswith(".weight"):
            continue
        mod = name[:-len("weight")]  # "M." of the module M
        nxt = tensors[i + 1]
        if (nxt.name == mod + "bias" and tuple(nxt.shape) == tuple(t.shape)
                and not (i > 0 and tensors[i - 1].name.startswith(mod))
                and not (i + 2 < n and tensors[i + 2].name.startswith(mod))):
            out[k] = True
    return out


def trainer_param_groups(raw: Mapping[str, Any], tensors: "list[Any]", repeat: Any = None,
                         layernorm: "frozenset[str] | None" = None) -> list[int] | None:
    """The param group index of each tensor of ``tensors`` (an inventory's, in model order) as the HF Trainer
    hands the model to ``deepspeed.initialize`` for the resolved config ``raw``: 0 the decay group, 1 the no-decay
    group (:func:`trainer_no_decay`); a frozen tensor keeps its own (the Trainer puts it in neither,
    ``p.requires_grad`` in create_optimizer l.1290-1298). None where the groups are not the Trainer's to make, or
    already given:

    * ``raw`` has an optimizer block: the Trainer passes DummyOptim(params=model_parameters), the flat list of
      trainable parameters (transformers 5.25.0 ``integrations/deepspeed.py`` l.578-579, l.671), and DeepSpeed builds
      the block's optimizer over that list (``runtime/engine.py`` _configure_basic_optimizer l.2476-2493:
      ``adam_optimizer(model_parameters, ...)``), one group, as torch.optim.Optimizer makes of a list of tensors;
    * the inventory already holds groups (a trainable tensor in a group other than 0: an inventory exported from
      a live optimizer's param groups, ``inventory.from_module(param_groups=...)``): kept as given.

    Without a block the groups hold whatever the Trainer's ``optim`` (create_optimizer builds them before choosing
    the class, l.1284-1299), and under optimizer offload accelerate 1.16.0's DeepSpeedCPUAdam is built from the
    same groups (``utils/deepspeed.py`` map_pytorch_optim_to_deepspeed l.96: ``optimizer_class(optimizer.param_groups,
    ...)``). An empty group (a model without biases or norms; or all of it no-decay) is dropped by DeepSpeed 0.19.8
    before any ZeRO stage sees it (``runtime/engine.py`` _configure_optimizer l.2348:
    ``param_groups[:] = [pg for pg in ... if len(pg["params"]) != 0]``), as :meth:`Inventory.groups` lists only the
    groups that hold a tensor.

    ``repeat``: the tensors' :class:`advisor.model.parallel.LayerRepeat` or a function giving it (called only where
    the groups are made), for :func:`trainer_no_decay`; the columns are read at C level (issue 21: 9e5 tensors).
    ``layernorm``: the parameters inside an ``nn.LayerNorm`` where known (:func:`trainer_no_decay`)."""
    if isinstance(raw.get("optimizer"), dict):
        return None
    from itertools import compress
    from operator import attrgetter
    old = list(map(attrgetter("group"), tensors))
    trainable = bytes(map(bool, map(attrgetter("trainable"), tensors)))
    if any(compress(old, trainable)):
        return None
    nd = trainer_no_decay(tensors, None if layernorm is not None else repeat() if callable(repeat) else repeat,
                          layernorm)
    if trainable.count(0) == 0:
        return list(nd) if isinstance(nd, bytes) else list(map(int, nd))
    return [int(x) if tr else g for g, tr, x in zip(old, trainable, nd)]


def trainer_effective_config(raw: Mapping[str, Any], trainer_args: "TrainerArgs | Mapping[str, Any] | None") -> Any:
    """:func:`advisor.config.effective.effective_config` of the resolved ``raw`` as the HF Trainer runs it: with no
    optimizer block its ``optimizer.client`` / ``params`` / ``client_note`` are the Trainer's own optimizer
    (:func:`trainer_optimizer`). The one place a Trainer plan's config is made (``planning.build_plan`` and the
    fix candidates' re-derived configs)."""
    from advisor.config.effective import effective_config
    ec = effective_config(dict(raw))
    cls, params, words = trainer_optimizer(raw, trainer_args)
    if words:
        ec.optimizer.client, ec.optimizer.params, ec.optimizer.client_note = cls, params, words
    return ec


# -- lint integration -------------------------------------------------------------------------------

def findings_for_context(ctx: Any) -> list[Finding]:
    """The H findings for a lint context, computed once per context (cached in ``ctx.cache``).

    ``ctx.hf`` may be ``True`` (the config goes through the HF Trainer; its arguments are
    unknown) or a mapping of Trainer arguments (fields of :class:`TrainerArgs`, plus optional
    ``world_size`` and ``hidden_size``); ``ctx.trainer_args`` is read the same way.
    With arguments: every H finding of the replay. Without: only those that hold whatever
    the arguments are (H002 "auto" nobody fills, H004 no zero_optimization section).
    """
    hf = getattr(ctx, "hf", False)
    if not hf:
        return []
    if ctx.cache.hf_findings is not None:
        return ctx.cache.hf_findings
    targs = ctx.trainer_args
    if targs is None and isinstance(hf, Mapping):
        targs = hf
    given = targs is not None
    targs = dict(targs or {})
    ws = targs.pop("world_size", None) or ctx.world_size
    hidden = targs.pop("hidden_size", None)
    res = ctx.plan.hf if ctx.plan is not None else None  # the command's plan resolved it already (advisor.planning.build_plan)
    if res is not None:
        found, resolved = list(res.findings), res.config
    else:
        resolved, found = resolve_for_estimate(ctx.raw, targs, ctx.inventory, ws, hidden_size=hidden)
    if given:
        ctx.cache.hf_config = resolved
    if not given:
        found = [f for f in found if f.code == "H002" or f.data.get("kind") == "no-zero-section"]
    ctx.cache.hf_findings = found
    return found
