"""fixa22 (newcomer 22, finding 6): a DeepSpeed config written as YAML. DeepSpeed reads a config
file with hjson (deepspeed/runtime/config.py l.443-444), so ``zero_optimization:`` over ``  stage: 2``
is the string "stage: 2"; S003 said "DeepSpeed uses the string as is, and any non-empty string counts
as true", but DeepSpeed 0.19.8's get_zero_config raises TypeError on it (checked here by calling it).
S003 now says DeepSpeed raises, and S008 says once that the file is read as HJSON, not YAML."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

YAML = "train_batch_size: 8\nzero_optimization:\n  stage: 2\n"


def test_deepspeed_raises_on_the_string_and_s003_says_so(tmp_path):
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.config import get_zero_config

    from advisor.config.loading import load_config
    from advisor.views.lint import lint_config

    p = tmp_path / "ds.yaml"
    p.write_text(YAML)
    loaded = load_config(str(p))  # read as DeepSpeed reads it
    assert loaded.data["zero_optimization"] == "stage: 2"
    with pytest.raises(TypeError, match="must be a mapping"):
        get_zero_config(loaded.data)  # what DeepSpeedConfig does with it (runtime/config.py l.499)
    s003, = [f for f in lint_config(loaded) if f.code == "S003"]
    assert s003.pointer == "/zero_optimization" and s003.severity == "error"
    assert "raises TypeError" in s003.message and "counts as true" not in s003.message


def test_yaml_is_said_once_per_file(tmp_path):
    p = tmp_path / "ds.yaml"
    p.write_text(YAML + "bf16:\n  enabled: true\n")
    d = json.loads(run_cli(["lint", str(p), "--format", "json"], cwd=tmp_path).stdout)
    s008 = [f for f in d["files"][0]["findings"] if f["code"] == "S008"]
    assert len(s008) == 1 and s008[0]["data"]["keys"] == ["zero_optimization", "bf16"], s008
    # the same config as JSON: nothing to say
    p.write_text(json.dumps({"train_batch_size": 8, "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}))
    d = json.loads(run_cli(["lint", str(p), "--format", "json"], cwd=tmp_path).stdout)
    assert not [f for f in d["files"][0]["findings"] if f["code"] in ("S008", "S003")]


def test_a_yaml_boolean_word_is_not_called_a_mapping(tmp_path):
    """A reviewer's case: ``wall_clock_breakdown: on`` is True to YAML 1.1 (pyyaml's safe_load) and the string
    'on' to hjson (quoteless); nothing is a mapping there, so S008 must not say so."""
    import hjson
    import yaml
    text = "train_batch_size: 8\nwall_clock_breakdown: on\n"
    assert yaml.safe_load(text)["wall_clock_breakdown"] is True and hjson.loads(text)["wall_clock_breakdown"] == "on"
    p = tmp_path / "ds.yaml"
    p.write_text(text)
    d = json.loads(run_cli(["lint", str(p), "--format", "json"], cwd=tmp_path).stdout)
    s008, = [f for f in d["files"][0]["findings"] if f["code"] == "S008"]
    assert s008["data"]["keys"] == ["wall_clock_breakdown"]
    assert "mapping" not in s008["message"] and "booleans" in s008["message"], s008["message"]
