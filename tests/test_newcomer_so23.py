"""Issue 23, a newcomer's defects D5/D6: SuperOffload's CPU optimizer line names both of its terms
(the worker's during the boundary's backward and the training process's after it) with bytes,
rate and seconds that agree; counts printed with their plural; JSON type names in the --hardware /
--model type errors; generate's sidecar through a symlink; --zero-init below ZeRO-3 warned."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import run_cli

#: A ZeRO-3 SuperOffload config with gradient_clipping 0 (the worker overlaps the boundary's backward).
SO_NOCLIP = {
    "train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
    "gradient_clipping": 0.0, "bf16": {"enabled": True},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.0}},
    "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                          "reduce_bucket_size": 50000000, "stage3_param_persistence_threshold": 100000,
                          "offload_optimizer": {"device": "cpu", "super_offload": True, "cpuadam_cores_perc": 0.8,
                                                "pin_memory": True},
                          "sub_group_size": 100000000},
}

#: llama-3-8b's parameters (its HF config: the models list), over 8 ranks (ZeRO-3 partition).
LLAMA3_8B = 8_030_261_248
UNIT = {"GiB": 2 ** 30, "GB": 1e9}

_NUM = r"([\d,]+\.\d+)"
_LINE = re.compile(rf"CPU optimizer: worker {_NUM} (GiB|GB) at {_NUM} (GiB|GB)/s = {_NUM} s \({_NUM} s hidden in "
                   rf"the boundary's backward, {_NUM} s exposed\) \+ after backward {_NUM} (GiB|GB) at {_NUM} "
                   rf"(GiB|GB)/s = {_NUM} s, per rank per step")


def _f(x: str) -> float:
    return float(x.replace(",", ""))


@pytest.mark.parametrize("units", ["GiB", "GB"])
def test_superoffload_cpu_line_bytes_over_rate_are_its_seconds(tmp_path, units):
    cfg = tmp_path / "so_noclip.json"
    cfg.write_text(json.dumps(SO_NOCLIP))
    p = run_cli(["estimate", str(cfg), "--hardware", "dgx-h100", "--model", "llama-3-8b", "--seq-len", "2048",
                 "--units", units],
                env={"COLUMNS": "400"})
    assert p.returncode == 0, p.stderr
    text = re.sub(r"\s*\n\s+", " ", p.stdout)  # unfold the folded lines
    m = _LINE.search(text)
    assert m, text[text.find("CPU optimizer"):][:600]
    wb, wu, wr, wru, ws, wh, we, mb, mu, mr, mru, ms = m.groups()
    assert wu == wru == mu == mru == units
    # each term: printed bytes / printed rate == printed seconds (within the 1-digit rounding of bytes and rate)
    assert _f(wb) / _f(wr) == pytest.approx(_f(ws), rel=0.01)
    assert _f(mb) / _f(mr) == pytest.approx(_f(ms), rel=0.01)
    assert _f(wh) + _f(we) == pytest.approx(_f(ws), abs=0.0015)
    # the breakdown's "CPU optimizer step busy" is the two terms' sum, its exposed part the worker's
    # exposed seconds plus the after-backward term
    b = re.search(rf"CPU optimizer step\s+busy\s+{_NUM} s\s+exposed\s+{_NUM} s", text)
    assert b, text
    assert _f(b.group(1)) == pytest.approx(_f(ws) + _f(ms), abs=0.0015)
    assert _f(b.group(2)) == pytest.approx(_f(we) + _f(ms), abs=0.0015)
    # the worker's bytes by hand: each rank's 1/8 partition of the elements x (8 B gradient copy into the
    # worker's buffer + 28 B DeepSpeedCPUAdam kernel) = 36,136,175,616 B (the figure)
    n = LLAMA3_8B // 8
    assert n * 36 == 36_136_175_616
    assert _f(wb) == pytest.approx(round(n * 36 / UNIT[units], 1), abs=0.051)
    # counts with their plural: no "1 threads"
    assert not re.search(r"\b1 (threads|cores)\b", text), re.search(r".{60}\b1 (threads|cores)\b.{20}", text)
    assert re.search(r"\b1 thread on \d+ cores\b", text), text[text.find("SuperOffload CPU step"):][:400]


@pytest.mark.parametrize("value, words", [
    (None, "got null"), (True, "got true"), (False, "got false"), ("80e9", 'got a string "80e9"'),
    ({}, "got an object {}"), ([1, None], "got an array [1, null]"),
])
def test_hardware_json_type_errors_name_json_types(tmp_path, value, words):
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({"base": "dgx-h100", "accelerator": {"name": "h", "memory_bytes": value}}))
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}))
    p = run_cli(["estimate", str(cfg), "--params", "1000000", "--hardware", str(hw)])
    err = p.stderr.strip()
    assert p.returncode == 2, (p.returncode, err)
    assert f"/accelerator/memory_bytes: expected a number, {words}" in err, err
    assert "None" not in err and "True" not in err and "False" not in err and "Traceback" not in err


@pytest.mark.parametrize("spec, words", [
    ({"name": "m", "family": "llama", "num_layers": 2, "hidden_size": None, "num_heads": 4,
      "intermediate_size": 256, "vocab_size": 1000, "max_seq_len": 128}, "hidden_size must be a positive integer, got null"),
    ({"name": "t", "tensors": [{"name": "w", "shape": [4, None]}]}, "got an array [4, null]"),
    ({"name": "m", "family": "llama", "num_layers": True, "hidden_size": 64, "num_heads": 4,
      "intermediate_size": 256, "vocab_size": 1000, "max_seq_len": 128}, "got true"),
])
def test_model_json_type_errors_name_json_types(tmp_path, spec, words):
    m = tmp_path / "m.json"
    m.write_text(json.dumps(spec))
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}))
    p = run_cli(["estimate", str(cfg), "--model", str(m), "--hardware", "dgx-h100"])
    err = p.stderr.strip()
    assert p.returncode == 2, (p.returncode, err)
    assert words in err, err
    assert "None" not in err and "True" not in err and "Traceback" not in err


def _zero_cfg(tmp_path, stage: int):
    cfg = tmp_path / f"z{stage}.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                               "zero_optimization": {"stage": stage}}))
    return str(cfg)


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_zero_init_below_zero3_is_a_warning(tmp_path, stage):
    cfg = _zero_cfg(tmp_path, stage)
    p = run_cli(["estimate", cfg, "--params", "1000000", "--seq-len", "512", "--zero-init"])
    assert p.returncode in (0, 1), p.stderr
    err = " ".join(p.stderr.split())
    assert f"ds-advisor: warning: --zero-init ignored: deepspeed.zero.Init partitions for ZeRO-3 only (stage {stage})" \
        in err, err
    assert "only applicable to ZeRO-3" in err
    c = run_cli(["check", cfg, "--params", "1000000", "--seq-len", "512", "--zero-init", "--gpu-memory", "80GB",
                 "--world-size", "2"])
    assert "--zero-init ignored" in " ".join((c.stdout + c.stderr).split()), c.stdout + c.stderr


def test_zero_init_warning_only_where_ignored(tmp_path):
    for args in ([_zero_cfg(tmp_path, 3), "--zero-init"], [_zero_cfg(tmp_path, 2), "--no-zero-init"],
                 [_zero_cfg(tmp_path, 2)]):
        p = run_cli(["estimate", *args, "--params", "1000000", "--seq-len", "512"])
        assert "--zero-init ignored" not in p.stderr, (args, p.stderr)


def test_zero_init_is_zero3_only_in_deepspeed_source():
    """The warning's reason, read from the installed DeepSpeed's zero.Init docstring (not imported)."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.find_spec("deepspeed")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("deepspeed not installed: the reason's source cannot be read here")
    src = (Path(list(spec.submodule_search_locations)[0]) / "runtime" / "zero" / "partition_parameters.py").read_text()
    init = src[src.index("class Init("):]
    assert "Only applicable to training with ZeRO-3." in init[:init.index("def __init__") + 8000]


def test_generate_through_a_symlink_names_the_sidecar_after_the_target(tmp_path):
    """issue #21's rule: write through a symlink or refuse it, never replace it. generate writes the
    config through ``link.json``; its sidecar goes beside the file written (``existing.workload.json``),
    where estimate of either name finds it (no "no workload sidecar" warning)."""
    import os
    target = tmp_path / "existing.json"
    target.write_text('{"train_micro_batch_size_per_gpu": 1}\n')
    link = tmp_path / "link.json"
    link.symlink_to("existing.json")
    g = run_cli(["generate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
                 "--global-batch", "64", "--seq-len", "1024", "-o", str(link), "--force"])
    assert g.returncode == 0, g.stderr
    assert os.path.islink(link) and os.readlink(link) == "existing.json"  # not replaced
    assert json.loads(target.read_text()).get("zero_optimization") is not None  # written through
    assert (tmp_path / "existing.workload.json").is_file()
    assert not (tmp_path / "link.workload.json").exists()
    assert json.loads((tmp_path / "existing.workload.json").read_text())["seq_len"] == 1024
    for name in (target, link):
        p = run_cli(["estimate", str(name), "--hardware", "dgx-h100", "--model", "gpt2"])
        assert p.returncode in (0, 1), p.stderr
        assert "no workload sidecar" not in p.stderr and "no --seq-len" not in p.stderr, p.stderr
        assert "1,024" in p.stdout or "1024" in p.stdout
