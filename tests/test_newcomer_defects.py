"""Issue 22, a newcomer's defects: transformers' errors as one short line naming the file;
--select/--ignore repeatable and comma-separated (their union); the settings file applies to
estimate, check and report like it does to lint, with --ignore extending the file's ignore
(ruff's layering); settings errors name the settings file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli

ZERO2 = str(Path(__file__).resolve().parents[1] / "sample_configs" / "zero2.json")

#: 4 x 4 x 8 = 128 != 64: a B001 error at world size 8; without --world-size B001 cannot check.
BAD_TRIPLE = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4,
              "cuda_visible_devices": "0"}  # an unknown key: S002


def _codes(p) -> set[str]:
    return {f["code"] for f in json.loads(p.stdout)["files"][0]["findings"]}


def _one_short_line(p, *words):
    err = p.stderr.strip()
    assert p.returncode == 2, p.stderr
    assert "\n" not in err and len(err) <= 400, err
    assert "internal error" not in err and "Traceback" not in err
    for w in words:
        assert w in err, (w, err)


@pytest.mark.parametrize("hf, words", [
    # a model_type transformers does not know: its ValueError lists every known type (~12,000 chars)
    ({"model_type": "fancy", "hidden_size": 64, "num_hidden_layers": 2}, ["'fancy'", "--params"]),
    # a value transformers' config class refuses (RoPE needs an even head_dim: 64 / 3 heads = 21)
    ({"model_type": "falcon", "hidden_size": 64, "num_attention_heads": 3, "num_hidden_layers": 2,
      "vocab_size": 100}, ["falcon", "--params"]),
])
def test_transformers_errors_are_one_short_line_naming_the_file(tmp_path, hf, words):
    pytest.importorskip("transformers")
    cfg = tmp_path / "m" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps(hf))
    p = run_cli(["estimate", ZERO2, "--model", str(cfg), "--activations", "trace"])
    _one_short_line(p, str(cfg), *words)


def test_select_and_ignore_are_repeatable_and_comma_separated(tmp_path):
    cfg = tmp_path / "bad.json"
    cfg.write_text(json.dumps(BAD_TRIPLE))
    base = ["lint", str(cfg), "--world-size", "8", "--format", "json"]
    full = _codes(run_cli(base))
    assert {"B001", "S002"} <= full
    for extra in (["--ignore", "S002", "--ignore", "B001"], ["--ignore", "S002,B001"],
                  ["--ignore", "S002", "--ignore", "batch-triple"]):
        assert _codes(run_cli(base + extra)) == full - {"B001", "S002"}, extra
    assert _codes(run_cli(base + ["--select", "B001", "--select", "S002"])) == {"B001", "S002"}


def _tree(tmp_path, settings: str):
    (tmp_path / "pyproject.toml").write_text("[tool.ds-advisor]\n" + settings)
    c = tmp_path / "c"
    c.mkdir()
    shutil.copy(ZERO2, c / "ok.json")
    return c / "ok.json"


def test_settings_apply_to_estimate_check_and_report(tmp_path):
    cfg = _tree(tmp_path, 'model = "llama-3-8b"\nworld-size = 8\n')
    e = run_cli(["estimate", "ok.json", "--format", "json"], cwd=cfg.parent)
    assert e.returncode in (0, 1), e.stderr
    out = json.loads(e.stdout)
    text = json.dumps(out)
    assert "llama-3-8b" in text and '"world_size": 8' in text, text[:400]
    # the flag wins over the file
    e4 = run_cli(["estimate", "ok.json", "--world-size", "4", "--format", "json"], cwd=cfg.parent)
    assert '"world_size": 4' in e4.stdout
    c = run_cli(["check", "ok.json", "--gpu-memory", "80GiB", "--host-memory", "500GiB"], cwd=cfg.parent)
    assert c.returncode != 2, c.stderr
    assert "pyproject.toml" in c.stdout  # where the world size came from
    r = run_cli(["report", "ok.json", "-o", str(tmp_path / "r.html")], cwd=cfg.parent)
    assert r.returncode == 0, r.stderr


def test_flag_ignore_extends_the_settings_files_ignore(tmp_path):
    cfg = tmp_path / "c" / "bad.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps(BAD_TRIPLE))
    (tmp_path / "pyproject.toml").write_text('[tool.ds-advisor]\nworld-size = 8\nignore = ["S002"]\n')
    p = run_cli(["lint", str(cfg), "--format", "json", "--ignore", "B001"])
    assert not {"S002", "B001"} & _codes(p)  # the file's S002 and the flag's B001 both dropped
    # a rule --select names explicitly runs even though the file ignores it (flags win)
    assert "S002" in _codes(run_cli(["lint", str(cfg), "--format", "json", "--select", "S002"]))


@pytest.mark.parametrize("settings, words", [
    ('model = "nosuch-model"\n', ["pyproject.toml", "nosuch-model"]),
    ("world_size = 8\n", ["pyproject.toml", "world_size", "world-size?"]),
])
@pytest.mark.parametrize("command", ["lint", "estimate", "check"])
def test_settings_value_errors_name_the_settings_file(tmp_path, settings, words, command):
    cfg = _tree(tmp_path, settings)
    p = run_cli([command, str(cfg)])
    _one_short_line(p, *words)


@pytest.mark.parametrize("section, where", [
    ({"ignore": ["S002:nonexistent"]}, "/ds_advisor/ignore/0"),  # a key path the config does not have
    ({"ignore": "S002"}, "/ds_advisor/ignore"),                  # a string where a list is documented
])
def test_suppression_section_mistakes_are_s007(tmp_path, section, where):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"train_batch_size": 8, "ds_advisor": section}))
    p = run_cli(["lint", str(cfg), "--format", "json"])
    found = json.loads(p.stdout)["files"][0]["findings"]
    assert any(f["code"] == "S007" and f["pointer"] == where for f in found), found


def _tight_fit():
    # 79 GiB needed of 80 GiB, inside a 2 GiB overhead band: tight (rule M102)
    g = 2 ** 30
    return [{"tier": "accelerator", "scope": "per rank", "need": 79 * g, "peak": 70 * g, "capacity": 80 * g,
             "headroom": 1 * g, "fits": True, "verdict": "tight", "uncertainty": 2 * g,
             "uncertain_terms": ["cuda_context"], "parts": []}]


def test_tight_verdict_is_coloured_like_a_warning():
    import io

    from rich.console import Console

    from advisor.render.text import fit_table

    buf = io.StringIO()
    Console(file=buf, force_terminal=True, color_system="standard", width=200).print(fit_table(_tight_fit()))
    out = buf.getvalue()
    yellow = "\x1b[33m"  # ANSI SGR 33, the colour findings' "warning" is painted in
    assert yellow + "TIGHT" in out, repr(out)


def test_term_dumb_means_no_colour_in_auto_mode(monkeypatch):
    from advisor.render.style import use_color

    class Tty:
        def isatty(self):
            return True
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert use_color(Tty(), "auto")
    monkeypatch.setenv("TERM", "dumb")
    assert not use_color(Tty(), "auto")
    assert use_color(Tty(), "always")  # an explicit --color always still wins


def test_parameter_count_said_once_and_one_rank_is_rank_0():
    p = run_cli(["estimate", ZERO2, "--params", "7000000000"])
    head = p.stdout.split("\n")[0] + p.stdout.split("\n")[1]
    assert head.count("7,000,000,000") == 1, head
    c = run_cli(["check", ZERO2, "--params", "7000000000", "--world-size", "1", "--gpu-memory", "80GiB",
                 "--host-memory", "100GiB"])
    node = next(ln for ln in c.stdout.splitlines() if "this node" in ln)
    assert node.rstrip().endswith("rank 0") and "0-0" not in node, node


def test_one_auto_value_is_singular(tmp_path):
    cfg = tmp_path / "a.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "train_batch_size": 8}))
    out = " ".join(run_cli(["lint", str(cfg)]).stdout.split())
    assert '1 value is "auto"' in out and "1 A001 finding folded" in out, out


def test_generate_tight_numbers_compare_as_stated():
    import re

    from advisor.views.generate import Rejection

    g = 2 ** 30
    # headroom 10.21 GiB < band 10.24 GiB: one decimal would print "10.2 GiB < 10.2 GiB"
    r = Rejection(tier="accelerator", need=int(69.79 * g), usable=80 * g, scope="per rank", verdict="tight",
                  uncertainty=int(10.24 * g), terms=("cuda_context",))
    m = re.search(r"headroom ([\d.]+) GiB < ([\d.]+) GiB", r.describe("GiB"))
    assert m and float(m.group(1)) < float(m.group(2)), r.describe("GiB")
    n = re.search(r"needs ([\d.]+) GiB of ([\d.]+) GiB", r.describe("GiB"))
    assert n and float(n.group(1)) < float(n.group(2))


def test_models_has_a_header_row():
    first = run_cli(["models"]).stdout.splitlines()[0].split()
    assert first[:2] == ["preset", "parameters"], first




def test_b001_first_fix_keeps_the_written_global_batch():
    """ncb21: the sample zero2 triple (64 = 4 x 2 x 8) checked at WORLD_SIZE=16 was told to set
    train_batch_size to 128 (or remove it): both double the global batch. DeepSpeed asserts
    train_batch == micro x accumulation x data-parallel size (runtime/config.py _batch_assertion):
    64 / (4 x 16) = 1, so accumulation 1 keeps 64, and it is the first fix and the --set offered;
    applied, DeepSpeed's equality holds (4 x 1 x 16 = 64: no B001)."""
    p = run_cli(["check", ZERO2, "--model", "llama-3-8b", "--format", "json"], env={"WORLD_SIZE": "16"})
    (b,) = [f for f in json.loads(p.stdout)["findings"] if f["code"] == "B001"]
    assert b["fix"].startswith("set gradient_accumulation_steps to 1 to keep train_batch_size 64"), b
    assert b["data"]["set"] == ["gradient_accumulation_steps=1"], b
    lint = ["lint", ZERO2, "--world-size", "16", "--format", "json"]
    again = json.loads(run_cli(lint + ["--set", b["data"]["set"][0]]).stdout)["files"][0]["findings"]
    assert not [f for f in again if f["code"] == "B001"], again
