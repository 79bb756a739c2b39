"""Schema validation: the S-family findings, the "auto" policy, laziness, and drift against DeepSpeed."""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys

import pytest

from advisor.config.loading import LoadedConfig, load_config
from advisor.config.schema import load_schema, schema_path, validate_config
from tests.conftest import CASES, ROOT, SAMPLES

HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
needs_deepspeed = pytest.mark.skipif(not HAS_DEEPSPEED, reason="deepspeed not installed")


def findings_for(data: dict, hf: bool = False):
    return validate_config(LoadedConfig(source="<test>", data=data), hf=hf)


BASE = {"train_micro_batch_size_per_gpu": 1}


def test_schema_file_is_valid_draft_2020_12():
    from jsonschema import Draft202012Validator

    schema = json.loads(schema_path().read_text())
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["x-deepspeed-version"] == "0.19.8"
    assert schema_path() == ROOT / "schemas" / "deepspeed-config.schema.json"


def test_schema_encodes_deepspeed_defaults_and_constraints():
    s = load_schema()
    z = s["$defs"]["DeepSpeedZeroConfig"]["properties"]
    assert z["stage"]["anyOf"][0]["enum"] == [0, 1, 2, 3]
    assert z["reduce_bucket_size"]["anyOf"][0] == {"type": "integer", "exclusiveMinimum": 0}
    assert z["reduce_bucket_size"]["default"] == 500_000_000
    assert z["max_live_parameters"]["x-ds-alias"] == "stage3_max_live_parameters"
    op = s["$defs"]["DeepSpeedZeroOffloadParamConfig"]["properties"]
    assert op["buffer_count"]["default"] == 5 and op["max_in_cpu"]["default"] == 1_000_000_000
    assert op["pin_memory"]["default"] is True  # 0.19.8 (older: false)
    oo = s["$defs"]["DeepSpeedZeroOffloadOptimizerConfig"]["properties"]
    assert (oo["ratio"]["minimum"], oo["ratio"]["maximum"]) == (0.0, 1.0)
    assert s["properties"]["gradient_clipping"]["default"] == 1.0
    assert s["properties"]["aio"]["properties"]["block_size"]["default"] == 1048576
    assert s["$defs"]["DeepSpeedBF16Config"]["properties"]["check_grad_overflow"]["default"] is True


# ------------------------------------------------------------------------------------------
# the family of findings

CASES_TABLE = [
    # (config, pointer, code, severity, words in message+fix)
    ({"offload_param": {"device": "cpu"}}, "/offload_param", "S006", "error", ["zero_optimization"]),
    ({"zero_optimization": {"stage": 3, "aio": {"block_size": 1048576}}}, "/zero_optimization/aio", "S006", "error",
     ["top-level"]),
    ({"stage3_max_live_parameters": 1000000000}, "/stage3_max_live_parameters", "S006", "error", ["zero_optimization"]),
    ({"round_robin_gradients": True}, "/round_robin_gradients", "S006", "error", ["zero_optimization", "ignores"]),
    ({"bf16": {"enabled": True, "consecutive_hysteresis": True}}, "/bf16/consecutive_hysteresis", "S006", "error",
     ["fp16"]),
    ({"bfloat16": {"enabled": True, "loss_scale": 0}}, "/bfloat16/loss_scale", "S006", "error", ["fp16"]),
    ({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "max_in_cpu": 1}}},
     "/zero_optimization/offload_optimizer/max_in_cpu", "S006", "error", ["zero_optimization.offload_param"]),
    ({"fp16": {"fp16": True}}, "/fp16/fp16", "S006", "error", ["enabled"]),
    ({"zero_optimization": {"offload_param": {"device": "cpu", "pin_memmory": True}}},
     "/zero_optimization/offload_param/pin_memmory", "S001", "error", ["pin_memory", "rejects"]),
    ({"bf16": {"enabled": True, "check_overflow": True}}, "/bf16/check_overflow", "S001", "error", ["check_grad_overflow"]),
    ({"zero_optimization": {"stage3_prefetch_bucket_size": 5, "prefetch_bucket_size": 7}},
     "/zero_optimization/prefetch_bucket_size", "S001", "error", ["stage3_prefetch_bucket_size"]),
    ({"train_micro_batch_size_per_gpus": 4}, "/train_micro_batch_size_per_gpus", "S002", "warning",
     ["train_micro_batch_size_per_gpu", "silently ignores"]),
    ({"activation_checkpointing": {"partitioned_activations": True}}, "/activation_checkpointing/partitioned_activations",
     "S002", "warning", ["partition_activations"]),
    ({"_comment": "hello"}, "/_comment", "S002", "info", ["comment"]),
    ({"amp": {"enabled": False}}, "/amp", "S005", "error", ["fp16", "removed"]),
    ({"curriculum_learning": {"enabled": True}}, "/curriculum_learning", "S005", "error",
     ["data_efficiency.data_sampling.curriculum_learning"]),
    ({"zero_optimization": {"stage": 3, "zeropp_loco_param": {}}}, "/zero_optimization/zeropp_loco_param", "S005",
     "error", ["LoCo"]),
    ({"fp16": {"enabled": "True,"}}, "/fp16/enabled", "S003", "error", ["trailing comma"]),
    ({"zero_optimization": {"contiguous_gradients": "yes"}}, "/zero_optimization/contiguous_gradients", "S003",
     "warning", ["coerces", "true"]),
    ({"wall_clock_breakdown": "False"}, "/wall_clock_breakdown", "S003", "error", ["non-empty string"]),
    ({"fp16": {"min_loss_scale": 0.5}}, "/fp16/min_loss_scale", "S003", "error", ["integer"]),
    ({"fp16": True}, "/fp16", "S003", "error", ["an object"]),
    ({"zero_optimization": {"stage": 4}}, "/zero_optimization/stage", "S004", "error", ["0, 1, 2, 3"]),
    ({"zero_optimization": {"offload_param": {"device": "CPU"}}}, "/zero_optimization/offload_param/device", "S004",
     "error", ['"cpu"']),
    ({"zero_optimization": {"reduce_bucket_size": 0}}, "/zero_optimization/reduce_bucket_size", "S004", "error",
     ["> 0"]),
    ({"zero_optimization": {"offload_optimizer": {"ratio": 1.5}}}, "/zero_optimization/offload_optimizer/ratio", "S004",
     "error", ["<= 1.0"]),
    ({"checkpoint": {"tag_validation": "sometimes"}}, "/checkpoint/tag_validation", "S004", "error", []),
    ({"communication_data_type": "fp8"}, "/communication_data_type", "S004", "error", []),
    ({"train_batch_size": 0}, "/train_batch_size", "S004", "error", [">= 1"]),
    ({"aio": {"block_size": "auto"}}, "/aio/block_size", "S003", "error", ["HF Trainer"]),
]


@pytest.mark.parametrize("cfg,ptr,code,sev,words", CASES_TABLE, ids=[c[1] + ":" + c[2] for c in CASES_TABLE])
def test_finding(cfg, ptr, code, sev, words):
    fs = findings_for({**BASE, **cfg})
    hits = [f for f in fs if f.pointer == ptr and f.code == code]
    assert len(hits) == 1, [(f.code, f.pointer, f.message) for f in fs]
    f = hits[0]
    assert f.severity == sev, f.message
    for w in words:
        assert w in f.message + " " + f.fix, (w, f.message, f.fix)
    # one finding per faulty key: nothing else reported for these single-fault configs
    assert len(fs) == 1, [(x.code, x.pointer) for x in fs]


def test_valid_variants_pass():
    """Things DeepSpeed 0.19.8 accepts produce no findings."""
    ok = {
        **BASE,
        "zero_optimization": {"stage": 3, "prefetch_bucket_size": 5e7, "max_live_parameters": 1e9,
                              "stage3_max_reuse_distance": 0, "cpu_offload": False,
                              "stage3_gather_fp16_weights_on_model_save": True,
                              "offload_param": None, "leaf_module": {"classes": "x.Y"},
                              "zenflow": {"topk_ratio": 0.1, "select_interval": "auto"}},
        "zero_allow_untested_optimizer": True,
        "checkpoint": {"tag_validation": "Warn", "writer": {"type": "fast"}},
        "gradient_allreduce_op": "MEAN",
        "data_types": {"grad_accum_dtype": "fp32", "keep_in_fp32_modules": "auto"},
        "aio": None,
        "tensorboard": {"enabled": True, "output_path": "/tmp/tb"},
        "comms_logger": {"enabled": True, "prof_ops": ["all_reduce"]},
        "compile": {"deepcompile": True, "passes": ["z3"]},
        "timers": {"throughput": {"enabled": False}},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "foo": 1}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10, "anything": "goes"}},
        "datastates_ckpt": {},
    }
    assert findings_for(ok) == []
    assert findings_for({**BASE, "zero_optimization": True}) == []  # legacy boolean form


# ------------------------------------------------------------------------------------------
# "auto"

#: Every key the HF Trainer (transformers integrations/deepspeed.py) or accelerate fill when "auto".
HF_AUTO_CONFIG = {
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                      "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": "auto", "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto",
                          "stage3_gather_16bit_weights_on_model_save": "auto",
                          "offload_optimizer": {"device": "auto", "nvme_path": "auto"},
                          "offload_param": {"device": "auto", "nvme_path": "auto"}},
}


@pytest.mark.parametrize("hf", [False, True])
def test_auto_where_hf_fills_it_is_not_a_schema_error(hf):
    assert findings_for(HF_AUTO_CONFIG, hf=hf) == []


def test_auto_inside_pydantic_sections_is_left_to_the_auto_rule():
    # DeepSpeed drops "auto" in pydantic sections (default applies): not a schema finding
    cfg = {**BASE, "zero_optimization": {"stage": 3, "stage3_max_live_parameters": "auto",
                                         "offload_param": {"device": "cpu", "buffer_size": "auto"}}}
    assert findings_for(cfg) == []


def test_auto_case_c04_has_no_schema_findings():
    loaded = load_config(str(CASES / "C04-auto-outside-hf" / "config.json"))
    assert validate_config(loaded, hf=False) == [] and validate_config(loaded, hf=True) == []


def test_schema_marks_exactly_the_hf_auto_places():
    s = load_schema()
    marked = []

    def walk(node, path):
        if not isinstance(node, dict):
            return
        if node.get("x-hf-auto"):
            marked.append(".".join(path))
        for k, sub in (node.get("properties") or {}).items():
            ref = sub.get("$ref") if isinstance(sub, dict) else None
            walk(s["$defs"][ref.rsplit("/", 1)[1]] if ref else sub, path + [k])
            if ref and sub.get("x-hf-auto"):
                marked.append(".".join(path + [k]))

    walk(s, [])

    def leaves(d, path=()):
        for k, v in d.items():
            if isinstance(v, dict):
                yield from leaves(v, path + (k,))
            elif v == "auto":
                yield ".".join(path + (k,))

    assert sorted(set(marked)) == sorted(leaves(HF_AUTO_CONFIG))


# ------------------------------------------------------------------------------------------
# starters and speed contract

def test_sample_configs_have_no_schema_findings():
    samples = sorted(SAMPLES.glob("*.json"))
    assert samples
    for p in samples:
        fs = [f for f in validate_config(load_config(str(p)), hf=True) if f.severity != "info"]
        assert fs == [], (p.name, [(f.code, f.pointer, f.message) for f in fs])


def test_lint_path_imports_neither_torch_nor_deepspeed_and_jsonschema_lazily():
    code = (
        "import sys, advisor.views.lint, advisor.config.schema\n"
        "print('jsonschema' in sys.modules)\n"
        "from advisor.config.loading import LoadedConfig\n"
        "fs = advisor.config.schema.validate_config(LoadedConfig('x', {'offload_optimizer': {}}))\n"
        "print([f.code for f in fs], 'torch' in sys.modules, 'deepspeed' in sys.modules, 'pydantic' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.split("\n")[:2] == ["False", "['S006'] False False False"]


def test_validation_is_fast_once_loaded():
    import time

    loaded = load_config(str(CASES / "C02-typo-nested-key" / "config.json"))
    validate_config(loaded)  # warm: schema read, validator built
    t = time.perf_counter()
    for _ in range(50):
        validate_config(loaded)
    per = (time.perf_counter() - t) / 50
    assert per < 0.02, f"{per * 1e3:.1f} ms per validation"


# ------------------------------------------------------------------------------------------
# drift against the installed DeepSpeed

def _pydantic_sections():
    """(section path in the config, pydantic model) for every strict section, from DeepSpeed itself."""
    from deepspeed.runtime import config as ds_config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config, DeepSpeedBF16Config
    from deepspeed.comm.config import CommsLoggerConfig
    from deepspeed.monitor.config import DeepSpeedMonitorConfig
    from deepspeed.compile.config import CompileConfig
    from deepspeed.runtime.tensor_parallel.config import TPTrainingConfig
    from deepspeed.utils.config import DeepSpeedThroughputTimerConfig
    from deepspeed.inference.config import WeightQuantConfig

    roots = [(("zero_optimization",), DeepSpeedZeroConfig), (("fp16",), DeepSpeedFP16Config),
             (("bf16",), DeepSpeedBF16Config), (("bfloat16",), DeepSpeedBF16Config),
             (("comms_logger",), CommsLoggerConfig), (("hybrid_engine",), ds_config.HybridEngineConfig),
             (("compile",), CompileConfig), (("tensor_parallel",), TPTrainingConfig),
             (("timers", "throughput"), DeepSpeedThroughputTimerConfig), (("weight_quantization",), WeightQuantConfig)]
    # the monitors are the fields of DeepSpeedMonitorConfig, read from the top level
    for name, field in DeepSpeedMonitorConfig.model_fields.items():
        roots.append(((name,), field.annotation))
    return roots


def _walk_model(path, model):
    """Yield (path, {accepted key names}) for a pydantic model and its nested models."""
    import typing

    import pydantic

    names = set()
    nested = []
    for fname, field in model.model_fields.items():
        names.add(fname)
        if field.alias:
            names.add(field.alias)
        tps = [field.annotation, *typing.get_args(field.annotation)]
        for tp in tps:
            if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
                nested.append((path + (fname,), tp))
                if field.alias and field.alias != fname:
                    nested.append((path + (field.alias,), tp))
    yield path, names
    for p, m in nested:
        yield from _walk_model(p, m)


@needs_deepspeed
def test_drift_pydantic_sections_match_the_schema():
    from advisor.config.keys import object_schema

    s = load_schema()
    problems = []
    for root, model in _pydantic_sections():
        for path, ds_keys in _walk_model(root, model):
            node = object_schema(s, path)
            assert node is not None, f"schema has no section {'.'.join(path)}"
            props = node.get("properties", {})
            ours = {k for k, v in props.items() if "x-ds-removed" not in v}
            if ds_keys - ours:
                problems.append(f"{'.'.join(path)}: DeepSpeed has keys the schema lacks: {sorted(ds_keys - ours)}")
            if ours - ds_keys:
                problems.append(f"{'.'.join(path)}: schema keys DeepSpeed dropped: {sorted(ours - ds_keys)}")
            assert node.get("additionalProperties") is False and node.get("x-ds-read") == "pydantic", path
    assert not problems, "\n".join(problems) + "\nregenerate: python -m advisor.config._schemagen"


@needs_deepspeed
def test_drift_removed_keys_match_deepspeed():
    from deepspeed.runtime import config as ds_config

    s = load_schema()
    top = {k for k, v in s["properties"].items() if "x-ds-removed" in v}
    zero = {k for k, v in s["$defs"]["DeepSpeedZeroConfig"]["properties"].items() if "x-ds-removed" in v}
    assert top == set(ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS)
    assert zero == set(ds_config._REMOVED_ZERO_CONFIG_KEYS)


class _Recording(dict):
    """A dict that records every key DeepSpeed looks up in it (get, [], in, keys())."""

    log: list = []

    def __init__(self, *a, path=(), **k):
        super().__init__(*a, **k)
        self.path = path

    def _seen(self, key):
        _Recording.log.append(self.path + (key,))

    def get(self, key, default=None):
        self._seen(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self._seen(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self._seen(key)
        return super().__contains__(key)

    def keys(self):
        outer = self

        class _Keys:
            def __contains__(self, key):
                outer._seen(key)
                return dict.__contains__(outer, key)

            def __iter__(self):
                return iter(dict.keys(outer))

        return _Keys()

    def __copy__(self):
        return _Recording(dict(self), path=self.path)


#: dict sections DeepSpeedConfig reads on construction (each given empty so that it reads its keys)
PROBED_SECTIONS = ["aio", "activation_checkpointing", "flops_profiler", "checkpoint", "data_types", "autotuning",
                   "torch_autocast", "timers", "data_efficiency"]
#: schema keys the probe cannot see, and why
NOT_PROBED = {
    (): {"sequence_parallel_size": "read only when torch.distributed is initialised (config.py world-size branch)",
         "allgather_size": "read only with the legacy zero_optimization: true (probed separately below)"},
}


@needs_deepspeed
def test_drift_plain_dict_sections_match_what_deepspeed_reads():
    from deepspeed.runtime.config import DeepSpeedConfig

    from advisor.config.keys import object_schema

    _Recording.log = []
    cfg = _Recording({"train_batch_size": 1, **{k: _Recording({}, path=(k,)) for k in PROBED_SECTIONS},
                      "optimizer": _Recording({"type": "Adam"}, path=("optimizer",)),
                      "scheduler": _Recording({"type": "WarmupLR"}, path=("scheduler",))})
    DeepSpeedConfig(cfg)
    legacy = _Recording({"train_batch_size": 1, "zero_optimization": True})
    DeepSpeedConfig(legacy)
    read: dict[tuple, set] = {}
    for p in _Recording.log:
        read.setdefault(p[:-1], set()).add(p[-1])
    s = load_schema()
    problems = []
    for sec in [(), *[(k,) for k in PROBED_SECTIONS], ("optimizer",), ("scheduler",)]:
        node = object_schema(s, sec)
        ours = set(node.get("properties", {}))
        ds = read.get(sec, set())
        if ds - ours:
            problems.append(f"{'.'.join(sec) or 'top level'}: DeepSpeed reads keys the schema lacks: {sorted(ds - ours)}")
        if sec in ((), *[(k,) for k in PROBED_SECTIONS]):
            extra = ours - ds - set(NOT_PROBED.get(sec, {}))
            if extra:
                problems.append(f"{'.'.join(sec) or 'top level'}: schema keys DeepSpeed no longer reads: {sorted(extra)}")
    assert not problems, "\n".join(problems)


@needs_deepspeed
def test_committed_schema_is_what_the_generator_produces():
    from advisor.config._schemagen import build_schema, render

    assert render(build_schema()) == schema_path().read_text(encoding="utf-8"), \
        "schemas/deepspeed-config.schema.json is stale: run python -m advisor.config._schemagen"


@needs_deepspeed
def test_enum_string_message_lists_deepspeeds_accepted_values():
    # newcomer D7: "bfp16" was told "expected a string or null". The accepted values are taken from
    # DeepSpeed's own refusal (runtime/config.py get_communication_data_type: "Supported data types:
    # ['fp16', 'bf16', 'fp32']"), and each is checked to be accepted there, in any case.
    import ast
    import re
    from deepspeed.runtime.config import get_communication_data_type

    with pytest.raises(ValueError) as e:
        get_communication_data_type({"communication_data_type": "bfp16"})
    accepted = ast.literal_eval(re.search(r"Supported data types: (\[[^\]]*\])", str(e.value)).group(1))
    assert sorted(accepted) == ["bf16", "fp16", "fp32"]
    for v in accepted:
        assert get_communication_data_type({"communication_data_type": v.upper()}) is not None
    (f,) = [f for f in findings_for({**BASE, "communication_data_type": "bfp16"}) if f.code == "S004"]
    for text in (f.message, f.fix):
        assert "a string" not in text
        listed = re.findall(r'"(\w+)"', text.split("expected ")[-1])
        assert sorted(listed) == sorted(accepted), text
    assert not [f for f in findings_for({**BASE, "communication_data_type": "BF16"}) if f.code in ("S003", "S004")]
