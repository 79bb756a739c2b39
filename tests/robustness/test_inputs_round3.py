"""Robustness, round 3 (issue 21, a newcomer's clean-clone report): the settings file and a
checkpoint's ``latest`` go through the one guarded reader; messages name what was exceeded;
every echo of user input is cut by one helper; documented limits are "at most".

Expected outcomes are the documented contract (README "Exit codes", "Documented limits"): exit 2
with one line naming the file for bad input, never a traceback or "internal error".
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from advisor.errors import ModelSpecError
from advisor.model.specs import MAX_LAYER_EXPERTS, ModelSpec, validate_spec
from advisor.errors import MAX_ECHO_CHARS, cut
from robust_helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_configs" / "zero3_cpu_offload.json"


def _one_error_line(p, name: str) -> str:
    err = p.stderr.strip()
    assert p.returncode == 2, (p.returncode, p.stdout[-500:], err[-500:])
    assert "\n" not in err and "internal error" not in err and "Traceback" not in err, err[-2000:]
    assert name in err, err
    return err


def _settings_dir(tmp_path: Path) -> tuple[Path, Path]:
    d = tmp_path / "proj"
    d.mkdir()
    c = d / "c.json"
    c.write_text(SAMPLE.read_text())
    return d, c


# --- 1. the settings file ---------------------------------------------------------------------

def test_deep_settings_file_is_one_line_not_recursion_error(tmp_path):
    d, c = _settings_dir(tmp_path)
    (d / ".ds-advisor.toml").write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    err = _one_error_line(run_cli(["lint", str(c)], timeout=60), ".ds-advisor.toml")
    assert "nesting deeper" in err


def test_large_settings_file_is_refused_before_reading(tmp_path):
    d, c = _settings_dir(tmp_path)
    with open(d / ".ds-advisor.toml", "wb") as f:  # sparse: 200 MB of size, nothing written
        f.truncate(200 * 1024 * 1024)
    err = _one_error_line(run_cli(["lint", str(c)], timeout=60), ".ds-advisor.toml")
    assert "over the 1048576-byte limit" in err


@pytest.mark.parametrize("name", [".ds-advisor.toml", "pyproject.toml"])
def test_fifo_settings_file_is_an_error_not_silently_skipped(tmp_path, name):
    d, c = _settings_dir(tmp_path)
    os.mkfifo(d / name)
    err = _one_error_line(run_cli(["lint", str(c)], timeout=60), name)
    assert "FIFO" in err


# --- 2. a checkpoint's latest -----------------------------------------------------------------

def _h009(tmp_path: Path, make_latest) -> list[dict]:
    ck = tmp_path / "checkpoint-5"
    (ck / "global_step5").mkdir(parents=True)
    make_latest(ck / "latest")
    p = run_cli(["lint", str(SAMPLE), "--hf", "--resume-from-checkpoint", str(ck), "--format", "json"], timeout=60)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    return [f for file in json.loads(p.stdout)["files"] for f in file["findings"] if f["code"] == "H009"]


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "big"])
def test_unreadable_latest_is_named_not_called_missing(tmp_path, kind):
    def make(path: Path):
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "dev_zero":
            os.symlink("/dev/zero", path)
        else:
            path.write_text("global_step5" + "x" * 20_000_000)
    got = _h009(tmp_path, make)
    assert len(got) == 1, got
    msg = got[0]["message"]
    assert "no 'latest' file" not in msg and "latest:" in msg, msg
    assert len(msg) < 400, len(msg)
    assert {"fifo": "FIFO", "dev_zero": "character device", "big": "4096-byte limit"}[kind] in msg


def test_long_tag_in_latest_is_echoed_cut(tmp_path):
    got = _h009(tmp_path, lambda p: p.write_text("g" * 3000 + "\n"))
    assert len(got) == 1 and "(3000 characters)" in got[0]["message"] and len(got[0]["message"]) < 400, got


# --- 3. the YAML node bound names what was exceeded -------------------------------------------

def test_yaml_with_many_plain_keys_does_not_blame_aliases(tmp_path):
    y = tmp_path / "keys.yaml"
    y.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
                 + "".join(f"  k{i}: {i}\n" for i in range(99_000)))
    err = _one_error_line(run_cli(["resolve", str(y)], timeout=60), "keys.yaml")
    assert "more than 100,000 nodes" in err and "alias" not in err, err


# --- 7. a YAML-only value is named in words ---------------------------------------------------

def test_yaml_date_is_named_not_a_python_repr(tmp_path):
    y = tmp_path / "acc.yml"
    y.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_machines: 1\n"
                 "num_processes: 2001-01-01\ndeepspeed_config:\n  zero_stage: 2\n")
    p = run_cli(["resolve", str(y)], timeout=60)
    out = p.stdout + p.stderr
    assert "datetime" not in out and "a YAML date 2001-01-01" in out, out[-2000:]


# --- 8. echoes of user input are cut ----------------------------------------------------------

def test_cut_keeps_short_text_and_names_the_length_of_long_text():
    assert cut("abc") == "abc"
    long = "x" * 1000
    assert cut(long) == "x" * MAX_ECHO_CHARS + "... (1000 characters)"


def test_explain_echoes_a_long_argument_cut():
    p = run_cli(["explain", "x" * 100_000], timeout=60)
    assert p.returncode == 2 and len(p.stderr) + len(p.stdout) < 1000, len(p.stderr)  # was 100,053 bytes


def test_set_echoes_a_long_value_cut():
    arg = "optimizer=" + json.dumps(list(range(20_000)))
    p = run_cli(["lint", str(SAMPLE), "--set", arg], timeout=60)
    assert p.returncode == 2 and len(p.stderr) + len(p.stdout) < 2000, len(p.stderr)  # was 129 KB
    assert f"({len(repr(arg))} characters)" in p.stderr  # the quoted argument, cut


# --- 9. the layer x expert limit is "at most" (README "Documented limits") --------------------

def _moe(layers: int, experts: int) -> ModelSpec:
    return ModelSpec(name="m", family="mixtral", num_layers=layers, hidden_size=64, num_heads=4,
                     intermediate_size=128, vocab_size=1000, max_seq_len=128, num_experts=experts,
                     experts_per_token=2)


def test_layer_expert_product_equal_to_the_limit_is_accepted():
    assert 256 * 4096 == MAX_LAYER_EXPERTS == 2 ** 20  # README: "2^20 layers x experts", at most
    validate_spec(_moe(256, 4096))
    with pytest.raises(ModelSpecError, match=r"num_layers x num_experts = 1,052,672 is over the limit"):
        validate_spec(_moe(257, 4096))


# --- 4. an unterminated /* comment has a position (README: file:line:column) -------------------

def test_unterminated_hjson_comment_names_its_start(tmp_path):
    h = tmp_path / "hjc.hjson"
    h.write_text('{\n train_micro_batch_size_per_gpu: 1\n "a": "/* in a string", /* unterminated\n')
    err = _one_error_line(run_cli(["lint", str(h)], timeout=60), "hjc.hjson")
    # line 3, column 25: the /* after the quoted string (the one inside the string is not a comment)
    assert f"{h}:3:25: not valid JSON/HJSON: unterminated /* comment" in err, err


# --- 5. a deepspeed_config_file that cannot be read names the YAML too ------------------------

def test_fifo_deepspeed_config_file_names_the_yaml(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    y = tmp_path / "acc.yml"
    y.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
                 "  deepspeed_config_file: fifo\nnum_machines: 1\nnum_processes: 8\n")
    p = run_cli(["resolve", "acc.yml"], cwd=tmp_path, timeout=60)
    err = _one_error_line(p, "acc.yml")
    assert err.startswith("ds-advisor: acc.yml: deepspeed_config_file fifo: is a FIFO"), err


# --- 10. control characters escaped the same way in every output -------------------------------

@pytest.mark.parametrize("args", [["lint", "{c}", "--format", "text"], ["lint", "{c}", "--format", "github"],
                                  ["report", "{c}", "--model", "gpt2", "--world-size", "2", "--output", "-"]])
def test_control_characters_in_a_key_are_shown_as_the_text_report_shows_them(tmp_path, args):
    c = tmp_path / "c.json"
    c.write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "bad\\u001b[31m": 1}}')
    p = run_cli([a.format(c=c) for a in args], timeout=120)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    assert "\x1b" not in p.stdout  # a raw ESC would recolour a terminal or sit inside the HTML
    assert "bad\\x1b[31m" in p.stdout  # safe_text's \xNN, the same in text, GitHub and HTML


# --- 6. probe output read bounded, decoded with the tool named, echoes cut ---------------------

def _smi(tmp_path: Path, body: str) -> Path:
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    s = bin_ / "nvidia-smi"
    s.write_text("#!/bin/sh\n" + body)
    s.chmod(0o755)
    return bin_


def test_binary_probe_output_names_the_tool(tmp_path):
    from advisor.views.check import probe_accelerators
    bin_ = _smi(tmp_path, "printf '0, GPU\\377, 81559, 0\\n'\n")
    p = probe_accelerators(env={"PATH": str(bin_)}, timeout=10)
    assert not p.devices and p.error, p
    assert "nvidia-smi: its stdout is not UTF-8 text (byte 0xff at offset 6)" in p.error, p.error  # "0, GPU" is 6 bytes; was "'utf-8' codec..."


def test_a_probe_printing_a_huge_line_is_stopped_at_the_byte_cap(tmp_path):
    import time
    from advisor.views.check import MAX_PROBE_BYTES, _run_tool
    bin_ = _smi(tmp_path, "head -c 300000000 /dev/zero | tr '\\0' x\n")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as e:
        _run_tool(str(bin_ / "nvidia-smi"), [], timeout=60)
    assert time.monotonic() - t0 < 4  # was 29 s and 2.6 GB; 5 s when only the shell, not its pipeline, was killed
    assert f"more than {MAX_PROBE_BYTES:,} bytes to stdout" in str(e.value) and len(str(e.value)) < 300


def test_a_failing_probe_echoes_its_message_cut(tmp_path):
    from advisor.views.check import _run_tool
    bin_ = _smi(tmp_path, "head -c 100000 /dev/zero | tr '\\0' y >&2; exit 9\n")
    with pytest.raises(RuntimeError) as e:
        _run_tool(str(bin_ / "nvidia-smi"), [], timeout=60)
    assert "exited 9: yyy" in str(e.value) and "(100000 characters)" in str(e.value) and len(str(e.value)) < 400
