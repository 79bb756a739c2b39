"""Issue 21 (newcomer round nc21w): numbers that reached ``float()`` or a division unbounded.

1. A ``--hardware`` spec whose ``host_memory_bytes`` / ``network_bytes_per_s`` is an integer of 400
   nines (JSON allows up to 4,300 digits) was "internal error: OverflowError" in estimate, check,
   checkpoint, report and generate: the out-of-range message formatted it with ``:g``. Every spec
   number now goes through ``validation.number_in``, which compares ints exactly and echoes the
   value cut (``errors.cut``): exit 2, one line naming the file, the key and "too large".
2. ``--save-interval 1e-300`` (the option only required x > 0) made checkpoint/estimate JSON write
   ``Infinity`` bytes per day (invalid JSON), text "inf TiB", and report crash. Every time option
   is bounded to ``validation.MIN_SECONDS .. MAX_SECONDS`` (1e-3 .. 1e9 s) where it is declared,
   and ``render.render`` refuses a JSON/SARIF document holding NaN/Infinity (naming the field)
   rather than print it. ``--step-time`` of 400 digits is "too large", not "not a finite number".
"""

from __future__ import annotations

import json

import pytest

from tests.robustness.robust_helpers import ROOT, run_cli

CFG = str(ROOT / "sample_configs" / "zero3_cpu_offload.json")
NINES = "9" * 400


def _strict(text: str):
    """json.loads that refuses NaN/Infinity, as RFC 8259 parsers do."""
    def no(c):
        raise AssertionError(f"non-finite JSON constant {c}")
    return json.loads(text, parse_constant=no)


@pytest.fixture(scope="module")
def huge_specs(tmp_path_factory):
    """dgx-h100's spec as `ds-advisor hardware` writes it, with one number replaced by 400 nines
    (spliced into the text: json.dumps of such an int writes exactly its digits)."""
    p = run_cli(["hardware", "dgx-h100", "--format", "json"])
    assert p.returncode == 0, p.stderr
    spec = json.loads(p.stdout)
    d = tmp_path_factory.mktemp("hw21")
    out = {}
    for key in ("host_memory_bytes", "network_bytes_per_s"):
        s = dict(spec)
        s[key] = int(NINES)
        f = d / f"{key}.json"
        f.write_text(json.dumps(s))
        assert NINES in f.read_text()
        out[key] = f
    return out


def _one_line_refusal(p, *needles):
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr, p.stderr[-2000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert NINES not in lines[0]  # the echo is cut (errors.cut: 60 characters, then the count)
    assert "(400 characters)" in lines[0]
    return lines[0]


@pytest.mark.parametrize("key", ["host_memory_bytes", "network_bytes_per_s"])
@pytest.mark.parametrize("cmd", [
    ["estimate", CFG, "--model", "llama-3-8b"],
    ["check", CFG, "--model", "llama-3-8b"],
    ["checkpoint", CFG, "--model", "llama-3-8b", "--save-dir", "/ckpt"],
    ["generate", "--model", "llama-3-8b", "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "64", "--seq-len", "2048"],
], ids=["estimate", "check", "checkpoint", "generate"])
def test_hardware_number_past_float_range_is_too_large(huge_specs, key, cmd, tmp_path):
    spec = huge_specs[key]
    extra = ["--output", str(tmp_path / "g.json")] if cmd[0] == "generate" else []
    p = run_cli([*cmd, "--hardware", str(spec), *extra])
    _one_line_refusal(p, str(spec), f"/{key}", "too large")


@pytest.mark.parametrize("cmd", [
    ["checkpoint", CFG, "--model", "llama-3-8b", "--world-size", "8"],
    ["estimate", CFG, "--model", "llama-3-8b", "--world-size", "8", "--hardware", "dgx-h100"],
    ["report", CFG, "--model", "llama-3-8b", "--world-size", "8", "--hardware", "dgx-h100"],
], ids=["checkpoint", "estimate", "report"])
def test_tiny_save_interval_refused(cmd, tmp_path):
    extra = ["--output", str(tmp_path / "r.html")] if cmd[0] == "report" else ["--format", "json"]
    p = run_cli([*cmd, "--save-dir", "/ckpt", "--save-interval", "1e-300", *extra])
    assert p.returncode == 2, (p.returncode, p.stdout[-500:], p.stderr[-2000:])
    assert "--save-interval" in p.stderr and "0.001" in p.stderr, p.stderr
    assert "Infinity" not in p.stdout and "internal error" not in p.stderr
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("opt,value", [("--step-time", "1e-300"), ("--node-mtbf-hours", "1e-300"),
                                       ("--restart-seconds", "1e300"), ("--step-time", "1e10")])
def test_time_options_bounded(opt, value):
    p = run_cli(["checkpoint", CFG, "--model", "llama-3-8b", "--world-size", "8", opt, value])
    assert p.returncode == 2 and opt in p.stderr and "internal error" not in p.stderr, p.stderr


@pytest.mark.parametrize("value", [NINES, "1e999"])
def test_huge_step_time_is_too_large_not_non_finite(value):
    p = run_cli(["checkpoint", CFG, "--model", "llama-3-8b", "--world-size", "8", "--step-time", value])
    assert p.returncode == 2, p.stderr
    assert "--step-time" in p.stderr and "too large" in p.stderr and "not a finite" not in p.stderr, p.stderr
    assert NINES not in p.stderr
    p = run_cli(["checkpoint", CFG, "--model", "llama-3-8b", "--world-size", "8", "--step-time", "nan"])
    assert p.returncode == 2 and "not a finite number" in p.stderr, p.stderr


def test_save_interval_at_the_bound_is_finite_json():
    """At the smallest interval accepted (1e-3 s) the per-day figures are finite and follow by hand:
    saves per day = 86,400 s / interval; bytes per day = bytes per save x saves per day."""
    p = run_cli(["checkpoint", CFG, "--model", "llama-3-8b", "--world-size", "8", "--hardware", "dgx-h100",
                 "--save-dir", "/ckpt", "--save-interval", "1e-3", "--seq-len", "2048", "--format", "json"])
    assert p.returncode == 0, p.stderr[-2000:]
    st = _strict(p.stdout)["storage"]
    assert st["save_interval_s"] == 1e-3
    assert st["saves_per_day"] == pytest.approx(86400 / 1e-3)
    assert st["bytes_written_per_day"] == pytest.approx(st["bytes_written_per_save"] * 86400 / 1e-3)


def test_render_refuses_non_finite_json():
    """The backstop in render.render: json.dumps writes Infinity/NaN by default; RFC 8259 has none."""
    from advisor.errors import NonFiniteOutputError
    from advisor.render import _refuse_non_finite
    with pytest.raises(NonFiniteOutputError, match=r"/a/b~1c/1 would be Infinity"):
        _refuse_non_finite(json.dumps({"a": {"b/c": [1, float("inf")]}}), "checkpoint", "json")
    with pytest.raises(NonFiniteOutputError, match=r"/x would be NaN"):
        _refuse_non_finite(json.dumps({"x": float("nan")}), "estimate", "sarif")
    _refuse_non_finite(json.dumps({"s": "NaN and Infinity in a message", "n": 1e308}), "estimate", "json")


def test_workload_sidecar_float_field_past_float_range(tmp_path):
    """A workload sidecar's moe_capacity_factor of 400 nines went through float() (OverflowError,
    "internal error"); now validation.float_of reads it and the limit message echoes it cut."""
    cfg = tmp_path / "a.json"
    cfg.write_text((ROOT / "sample_configs" / "zero2.json").read_text())
    (tmp_path / "a.workload.json").write_text('{"moe_capacity_factor": ' + NINES + "}")
    p = run_cli(["estimate", str(cfg), "--model", "gpt2"])
    line = _one_line_refusal(p, "a.workload.json", "/moe_capacity_factor", "over the limit")
    assert "1e+06" in line
