"""Issue 21 leftover: a dtype name that is no dtype ("float1024") was accepted without a word in
an inventory (a tensor's ``dtype``) and in a Hugging Face config.json (``torch_dtype`` / ``dtype``:
read as "no dtype", so the load phase assumed fp32). Now each is refused, exit 2, with one line
naming the file, the key and the accepted names (advisor.config.dtypes, the one table, whose names
are torch's: test_dtypes.py); ``--load-dtype`` takes DeepSpeed's training dtypes from the same table.
A name torch has (int8, float8_e4m3fn, ``torch.bfloat16``) is still read."""

from __future__ import annotations

import json

import pytest

from tests.robustness.robust_helpers import run_cli

CONFIG = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}
GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 128, "n_positions": 128}


def _cfg(tmp_path):
    c = tmp_path / "ds.json"
    c.write_text(json.dumps(CONFIG))
    return c


def _refused(r, file, key, value):
    assert r.returncode == 2, (r.stdout, r.stderr)
    line = r.stderr.strip().splitlines()
    assert len(line) == 1 and "Traceback" not in r.stderr, r.stderr
    assert line[0].startswith(f"ds-advisor: {file}: {key}: unknown dtype {value!r} (one of torch's: float32, "), line
    assert "bfloat16" in line[0] and "float8_e4m3fn" in line[0]


@pytest.mark.parametrize("command", [["estimate"], ["check", "--world-size", "1", "--gpu-memory", "80GB",
                                                    "--host-memory", "1TB"], ["lint"]])
def test_unknown_tensor_dtype_in_an_inventory(tmp_path, command):
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"tensors": [{"name": "a", "shape": [4, 4], "dtype": "float32"},
                                           {"name": "b", "shape": [4], "dtype": "float1024"}]}))
    _refused(run_cli([*command, "--model", str(inv), str(_cfg(tmp_path))]), inv, "/tensors/1/dtype", "float1024")


@pytest.mark.parametrize("key", ["torch_dtype", "dtype"])
def test_unknown_dtype_in_an_hf_config(tmp_path, key):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**GPT2, key: "float1024"}))
    for args in (["--model", str(folder)], ["--model", str(folder / "config.json"), "--hf"]):
        _refused(run_cli(["estimate", *args, str(_cfg(tmp_path))]), folder / "config.json", f"/{key}", "float1024")


def test_unknown_load_dtype_flag(tmp_path):
    r = run_cli(["estimate", "--model", "gpt2", "--load-dtype", "float1024", str(_cfg(tmp_path))])
    assert r.returncode == 2 and "'float1024' is not one of 'fp32', 'fp16', 'bf16'" in r.stderr, r.stderr


def test_torch_names_are_still_read(tmp_path):
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"tensors": [{"name": "a", "shape": [4, 4], "dtype": "int8"},
                                           {"name": "b", "shape": [4], "dtype": "torch.float8_e4m3fn"},
                                           {"name": "c", "shape": [4]}]}))
    assert run_cli(["estimate", "--model", str(inv), str(_cfg(tmp_path))]).returncode == 0
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps({**GPT2, "torch_dtype": "torch.bfloat16"}))
    r = run_cli(["estimate", "--model", str(hf), "--hf", "--format", "json", str(_cfg(tmp_path))])
    assert r.returncode in (0, 1) and json.loads(r.stdout)["model"], r.stderr  # 1: findings at --fail-on, no refusal
