"""Issue #21, "one validation layer": values of the wrong type or out of bounds reach a finding or a
one-line refusal naming their source, never an internal error."""
from __future__ import annotations

import copy
import json

import pytest

from tests.robustness.robust_helpers import run_cli

ZERO3 = {
    "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
    "bf16": {"enabled": True},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
    "zero_optimization": {"stage": 3},
}


def _no_internal(p) -> None:
    assert "internal error" not in p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert "X001" not in p.stdout


@pytest.mark.parametrize("section,bad", [("offload_param", [1]), ("offload_optimizer", {"a": 1})])
def test_unhashable_offload_device_is_refused_like_accelerate(tmp_path, section, bad):
    # What accelerate does with it, independently: HfDeepSpeedConfig raises TypeError (unhashable type).
    from accelerate.utils.deepspeed import HfDeepSpeedConfig
    cfg = copy.deepcopy(ZERO3)
    cfg["zero_optimization"][section] = {"device": bad}
    with pytest.raises(TypeError, match="unhashable"):
        HfDeepSpeedConfig(copy.deepcopy(cfg))
    f = tmp_path / "c.json"
    f.write_text(json.dumps(cfg))
    key = f"zero_optimization.{section}.device"
    lint = run_cli(["lint", "--hf", str(f), "--format", "json"])
    _no_internal(lint)
    assert lint.returncode == 1
    found = {(x["code"], x["pointer"]): x for x in json.loads(lint.stdout)["files"][0]["findings"]}
    h004 = found[("H004", f"/zero_optimization/{section}/device")]
    assert h004["severity"] == "error" and key in h004["message"]
    assert ("S004", f"/zero_optimization/{section}/device") in found  # the schema finding is no longer hidden
    for cmd in (["estimate", str(f), "--model", "llama-3-8b", "--seq-len", "512", "--hf"],
                ["resolve", str(f), "--hf"]):
        p = run_cli(cmd)
        _no_internal(p)
        assert p.returncode == 1, (cmd, p.stdout, p.stderr)
        assert "H004" in p.stdout + p.stderr


# -- --set: the config file's depth limit (advisor.config.readers.MAX_DEPTH = 64 brackets) ----------

def _z2(tmp_path):
    f = tmp_path / "z2.json"
    f.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}))
    return f


@pytest.mark.parametrize("cmd", [["lint"], ["estimate", "--model", "gpt2", "--seq-len", "128"]])
@pytest.mark.parametrize("arg", [
    "a=" + "[" * 20000 + "]" * 20000,        # RecursionError before
    ".".join(["a"] * 5000) + ".b=1",          # X001 RecursionError before
    ".".join(["a"] * 70) + ".b=1",            # 71 levels: accepted before, a file is limited to 64
    "a=" + "[" * 64 + "]" * 64,               # 1 + 64 = 65 levels
])
def test_set_deeper_than_a_file_may_be_is_one_line_refusal(tmp_path, cmd, arg):
    f = _z2(tmp_path)
    p = run_cli([cmd[0], str(f), *cmd[1:], "--set", arg])
    _no_internal(p)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ds-advisor: --set ") and "64 levels" in lines[0]
    assert len(lines[0]) < 300  # the argument is cut, not echoed whole


def test_set_at_the_file_depth_limit_is_accepted(tmp_path):
    # The same nesting in a file is accepted (64 levels): a file written with it, and --set. Under
    # optimizer.params (handed to the optimizer as written): a key DeepSpeed ignores ("a" at the top level)
    # is S002 and, through --set, exit 2 since fixa22, whatever its depth.
    f = tmp_path / "z2.json"
    f.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2},
                             "optimizer": {"type": "AdamW", "params": {}}}))
    deep = tmp_path / "deep.json"
    deep.write_text(json.dumps({"optimizer": {"type": "AdamW", "params": {"a": json.loads("[" * 61 + "]" * 61)}}}))
    assert run_cli(["lint", str(deep)]).returncode != 2
    for arg in ("optimizer.params.a=" + "[" * 61 + "]" * 61, "optimizer.params." + ".".join(["a"] * 61) + ".b=1"):
        p = run_cli(["lint", str(f), "--set", arg])
        _no_internal(p)
        assert p.returncode != 2, p.stderr


# -- checkpoint goes through estimate's refusal gate ------------------------------------------------

@pytest.mark.parametrize("stage", [7, "abc", [3], -1, 3.5, None])
def test_checkpoint_refuses_a_stage_deepspeed_refuses(tmp_path, stage):
    # DeepSpeed's own model raises for each (deepspeed/runtime/zero/config.py: stage: ZeroStageEnum).
    from pydantic import ValidationError
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    with pytest.raises(ValidationError):
        DeepSpeedZeroConfig(stage=stage)
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": stage}}))
    args = ["checkpoint", str(f), "--model", "gpt2", "--world-size", "8"]
    est = run_cli(["estimate", str(f), "--model", "gpt2", "--world-size", "8", "--seq-len", "128", "--format", "json"])
    p = run_cli(args + ["--format", "json"])
    _no_internal(p)
    assert p.returncode == est.returncode == 1
    d = json.loads(p.stdout)
    assert d["files"] == [] and d["unsupported"].startswith("S004")
    assert [x["code"] for x in d["findings"]] == ["S004"]
    text = run_cli(args)
    assert text.returncode == 1 and "ZeRO-0" not in text.stdout.split("\n", 2)[2] and "S004" in text.stdout


@pytest.mark.parametrize("cfg,code", [
    ({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "bogus_key": 1}}, "S001"),
    # 10 is not a multiple of 3 x 8: DeepSpeed's _batch_assertion fails (runtime/config.py)
    ({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3, "zero_optimization": {"stage": 2}}, "B001"),
])
def test_checkpoint_refuses_unknown_key_and_batch_triple(tmp_path, cfg, code):
    f = tmp_path / "c.json"
    f.write_text(json.dumps(cfg))
    p = run_cli(["checkpoint", str(f), "--model", "gpt2", "--world-size", "8", "--format", "json"])
    _no_internal(p)
    assert p.returncode == 1
    d = json.loads(p.stdout)
    assert d["files"] == [] and code in [x["code"] for x in d["findings"]]


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_checkpoint_refused_config_with_save_flags_has_no_interval(tmp_path, fmt):
    """A config DeepSpeed refuses (B001: 10 != 3 x GA x 8) saves nothing, so there is no save time
    and no Young/Daly interval: with --write-bandwidth and --node-mtbf-hours this was
    "internal error: ValueError: interval must be positive" in --format json (newcomer nc21b)."""
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3,
                             "zero_optimization": {"stage": 2}}))
    p = run_cli(["checkpoint", str(f), "--model", "gpt2", "--world-size", "8", "--write-bandwidth", "10GB/s",
                 "--node-mtbf-hours", "1000", "--format", fmt])
    _no_internal(p)
    assert p.returncode == 1
    if fmt == "json":
        d = json.loads(p.stdout)
        assert d["files"] == [] and "B001" in [x["code"] for x in d["findings"]]


def test_checkpoint_of_a_valid_config_still_lists_files(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}))
    p = run_cli(["checkpoint", str(f), "--model", "gpt2", "--world-size", "8", "--format", "json"])
    assert p.returncode == 0 and json.loads(p.stdout)["files"]


# -- numeric workload flags: the config path's bounds, defined once in advisor.config.validation ----

BIG = "99999999999999999999"


@pytest.mark.parametrize("flags,name", [
    (["--micro-batch", BIG], "--micro-batch"),
    (["--micro-batch", str((1 << 40) + 1)], "--micro-batch"),
    (["--seq-len", BIG], "--seq-len"),
    (["--sequence-parallel", BIG], "--sequence-parallel"),
    (["--expert-parallel", BIG], "--expert-parallel"),
    (["--tensor-parallel", BIG], "--tensor-parallel"),
    (["--pipeline-parallel", BIG], "--pipeline-parallel"),
    (["--world-size", BIG], "--world-size"),
    (["--gpus-per-node", BIG], "--gpus-per-node"),
    (["--moe-capacity-factor", "1e300"], "--moe-capacity-factor"),
    (["--hf", "--gradient-accumulation-steps", BIG], "--gradient-accumulation-steps"),
    (["--hf", "--per-device-train-batch-size", BIG], "--per-device-train-batch-size"),
])
def test_huge_workload_flag_is_one_line_refusal(tmp_path, flags, name):
    f = _z2(tmp_path)
    p = run_cli(["estimate", str(f), "--model", "gpt2", *flags])
    _no_internal(p)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and f"'{name}'" in lines[0]


def test_micro_batch_flag_and_set_share_the_bound(tmp_path):
    # --set's bound is advisor.config.validation.MAX_GLOBAL_BATCH (batch_limit_problem); the flag's too.
    from advisor.config.validation import MAX_GLOBAL_BATCH
    f = _z2(tmp_path)
    over = str(MAX_GLOBAL_BATCH + 1)
    via_set = run_cli(["estimate", str(f), "--model", "gpt2", "--seq-len", "8",
                       "--set", f"train_micro_batch_size_per_gpu={over}"])
    via_flag = run_cli(["estimate", str(f), "--model", "gpt2", "--seq-len", "8", "--micro-batch", over])
    assert via_set.returncode == via_flag.returncode == 2
    ok = run_cli(["generate", "--help"])  # cheap sanity that the CLI builds with the bounds
    assert ok.returncode == 0
    at = run_cli(["estimate", str(f), "--model", "gpt2", "--seq-len", "8", "--micro-batch", str(MAX_GLOBAL_BATCH)])
    _no_internal(at)
    assert at.returncode != 2, at.stderr


# -- the --hf replay with a wrong type at every key it reads ----------------------------------------

_HF_KEYS = [("train_micro_batch_size_per_gpu",), ("gradient_accumulation_steps",), ("train_batch_size",),
            ("gradient_clipping",), ("optimizer",), ("optimizer", "type"), ("optimizer", "params"),
            ("optimizer", "params", "lr"), ("optimizer", "params", "betas"), ("scheduler",), ("scheduler", "params"),
            ("scheduler", "params", "warmup_max_lr"), ("fp16",), ("fp16", "enabled"), ("bf16",), ("bf16", "enabled"),
            ("checkpoint",), ("zero_optimization",), ("zero_optimization", "stage"),
            ("zero_optimization", "offload_param"), ("zero_optimization", "offload_param", "device"),
            ("zero_optimization", "offload_optimizer", "device"), ("zero_optimization", "reduce_bucket_size"),
            ("zero_optimization", "stage3_prefetch_bucket_size"),
            ("zero_optimization", "stage3_param_persistence_threshold")]
_WRONG = [None, True, 0, -1, 2**63, 10**300, 1e308, "", "auto", [], [1], {}, {"a": 1}, 3.5]


def test_hf_replay_survives_wrong_types_at_every_key_it_reads():
    from advisor.config.hf import resolve_for_estimate
    base = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "train_batch_size": "auto", "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
            "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto"}},
            "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": "auto"}},
            "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}, "reduce_bucket_size": "auto"}}
    for path in _HF_KEYS:
        for v in _WRONG:
            c = copy.deepcopy(base)
            node = c
            for k in path[:-1]:
                if not isinstance(node.get(k), dict):
                    node[k] = {}
                node = node[k]
            node[path[-1]] = v
            for targs in (None, {"bf16": True, "max_steps": 10}):
                resolve_for_estimate(c, targs, None, 8, hidden_size=4096)  # raises -> the test fails


@pytest.mark.parametrize("text, words", [
    ("9" * 33, "999999999999999999999999999999999 is over the limit 1024"),
    ("-" + "9" * 40, "is below the minimum 1"),
    ("9" * 5000, "(5000 characters) is over the limit 1024"),
    (" 8 ", None),
])
def test_a_long_digit_string_is_over_the_limit_not_a_string(text, words):
    """Issue 21 audit: the shared ``as_int`` parsed at most 30 digits, so LOCAL_WORLD_SIZE of 33 nines was
    'expected an integer, got a string': an integer past the bound is named as such (its digits cut)."""
    from advisor.config.validation import InputValueError, env_int
    if words is None:
        assert env_int({"LOCAL_WORLD_SIZE": text}, "LOCAL_WORLD_SIZE", hi=1024) == 8
        return
    with pytest.raises(InputValueError) as e:
        env_int({"LOCAL_WORLD_SIZE": text}, "LOCAL_WORLD_SIZE", hi=1024)
    msg = str(e.value)
    assert "LOCAL_WORLD_SIZE" in msg and words in msg and "string" not in msg.split(":", 1)[1] and len(msg) < 400, msg


@pytest.mark.parametrize("side, words", [
    ('{"seq_len": "4096"}', "/seq_len: invalid value '4096' (a positive integer)"),
    ('{"megatron_sp": 1}', "/megatron_sp: invalid value 1 (true or false)"),
    ('{"moe_capacity_factor": "1.5"}', "/moe_capacity_factor: invalid value '1.5' (a positive finite number)"),
])
def test_a_wrong_sidecar_value_says_what_the_field_takes(tmp_path, side, words):
    """Issue 21 audit: a wrongly typed workload-sidecar field said 'invalid value' without what is valid
    (its trainer record and its choice fields did)."""
    from advisor.errors import ConfigLoadError
    from advisor.views.workload import read_sidecar
    p = tmp_path / "c.workload.json"
    p.write_text(side)
    with pytest.raises(ConfigLoadError) as e:
        read_sidecar(str(p))
    assert words in str(e.value), str(e.value)
