"""The command-line surface: shared options mean the same in every command, and every command
offers each output format that makes sense for its result (the reporter registry).

The findings-bearing commands (lint, check, estimate, checkpoint) must all speak SARIF (code
scanning) and GitHub annotations; the SARIF is validated against the official OASIS 2.1.0
schema in tests/fixtures/sarif, and the no-fit finding of a config whose model states alone
exceed the accelerator (16 bytes per parameter under ZeRO-0 with mixed-precision Adam: ZeRO
paper, Rajbhandari et al. 2020, section 3.1) must appear in each format.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import jsonschema
import pytest

from advisor.cli import main
from tests.conftest import ROOT, run_cli

SARIF_SCHEMA = ROOT / "tests" / "fixtures" / "sarif" / "sarif-schema-2.1.0.json"
FINDINGS_FORMATS = {"text", "json", "sarif", "github"}


def _param(command: str, name: str) -> click.Option | None:
    cmd = main.commands[command]
    return next((p for p in cmd.params if p.name == name), None)


@pytest.mark.parametrize("command", ["lint", "check", "estimate", "checkpoint"])
def test_findings_commands_offer_every_findings_format(command):
    fmt = _param(command, "fmt")
    assert fmt is not None and set(fmt.type.choices) == FINDINGS_FORMATS


@pytest.mark.parametrize("command", ["generate", "models", "hardware", "measure"])
def test_other_commands_offer_text_and_json(command):
    assert list(_param(command, "fmt").type.choices) == ["text", "json"]


def test_world_size_has_one_meaning():
    """--world-size is total ranks everywhere; one bound, except measure, which launches every
    rank as a process on this machine."""
    bounds = {}
    for name, cmd in main.commands.items():
        p = _param(name, "world_size")
        if p is not None:
            bounds[name] = (p.type.min, p.type.max)
    assert set(bounds) >= {"lint", "estimate", "check", "checkpoint", "resolve", "report", "measure"}
    measure = bounds.pop("measure")
    assert len(set(bounds.values())) == 1, bounds
    assert measure[1] < next(iter(bounds.values()))[1]


def test_model_option_is_the_same_option_everywhere():
    """--model takes a preset, an HF config.json or an inventory JSON in every command."""
    for name in main.commands:
        p = _param(name, "model")
        if p is not None:
            assert "inventory JSON" in (p.help or "") and "HF config.json" in (p.help or ""), name


def _no_fit_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                               "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
                               "zero_optimization": {"stage": 0}}))
    return cfg


#: 1e9 parameters x 16 bytes (ZeRO-0, bf16 + fp32 master + two Adam moments) = 16 GB > 8 GB.
NO_FIT = ["--params", "1000000000", "--world-size", "1", "--gpu-memory", "8GB", "--host-memory", "512GB"]


@pytest.mark.parametrize("command", ["estimate", "check"])
def test_no_fit_as_sarif_validates_and_names_m100(command, tmp_path):
    cfg = _no_fit_config(tmp_path)
    p = run_cli([command, str(cfg), *NO_FIT, "--format", "sarif"], env={"PATH": "/nonexistent"})
    assert p.returncode == 1, p.stderr
    log = json.loads(p.stdout)
    jsonschema.Draft4Validator(json.loads(SARIF_SCHEMA.read_text())).validate(log)
    results = log["runs"][0]["results"]
    m100 = [r for r in results if r["ruleId"] == "M100"]
    assert m100 and m100[0]["level"] == "error"
    assert m100[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("ds_config.json")


@pytest.mark.parametrize("command", ["estimate", "check"])
def test_no_fit_as_github_annotations(command, tmp_path):
    cfg = _no_fit_config(tmp_path)
    p = run_cli([command, str(cfg), *NO_FIT, "--format", "github"], env={"PATH": "/nonexistent"})
    assert p.returncode == 1, p.stderr
    lines = p.stdout.splitlines()
    assert any(line.startswith("::error file=") and "title=M100" in line for line in lines), p.stdout
    assert lines[-1].startswith("ds-advisor: 1 file(s): ") and "0 error(s)" not in lines[-1]


def test_checkpoint_sarif_names_the_config(tmp_path):
    """checkpoint's result has no findings here (no --save-dir): a valid, empty SARIF run whose
    rules still list T003, the checkpoint rule."""
    cfg = _no_fit_config(tmp_path)
    p = run_cli(["checkpoint", str(cfg), "--params", "1000000", "--world-size", "1", "--format", "sarif"])
    assert p.returncode == 0, p.stderr
    log = json.loads(p.stdout)
    jsonschema.Draft4Validator(json.loads(SARIF_SCHEMA.read_text())).validate(log)
    assert log["runs"][0]["results"] == []
    assert "T003" in {r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]}


def test_step_time_has_one_spelling_and_the_rule_context_no_untyped_bag():
    """Seconds per optimizer step is ``step_time_s`` in every module (parameters, fields, JSON
    keys); the rule context carries typed fields and a typed cache, not a free-form dict."""
    import re
    from dataclasses import fields

    from advisor.rules import LintCache, LintContext

    other = re.compile(r"\b(step_seconds|seconds_per_step|step_s|step_secs)\b")
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "advisor").rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if other.search(line)]
    assert not hits, hits
    names = {f.name for f in fields(LintContext)}
    assert "extra" not in names and {"hardware", "step_time_s", "cluster", "trainer_args", "cache"} <= names
    assert all(f.type != "dict" for f in fields(LintCache))


def test_lint_imports_only_what_lint_needs():
    """lint of one config without --hf or a model never loads the HF replay, the ledger, the
    estimate/check renderers, torch or deepspeed."""
    import subprocess
    import sys

    code = ("import sys\nfrom advisor.cli import main\n"
            f"try:\n    main(['lint', {str(ROOT / 'sample_configs' / 'zero3.json')!r}])\nexcept SystemExit:\n    pass\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith(('advisor', 'torch', 'deepspeed')))))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    loaded = set(p.stdout.split()[-1000:])
    for m in ("advisor.config.hf", "advisor.ledger.state", "advisor.render.text", "advisor.views.estimate",
              "torch", "deepspeed"):
        assert m not in loaded, m
    assert "advisor.render.lint" in loaded and "advisor.views.lint" in loaded
