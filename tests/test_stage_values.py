"""zero_optimization.stage written as something other than an int, against DeepSpeed 0.19.8's own
``DeepSpeedZeroConfig`` and accelerate's ``HfDeepSpeedConfig`` (no model, no engine)."""

from __future__ import annotations

import json

import pytest

from advisor.config.effective import effective_config
from advisor.config.loading import parse_text
from advisor.views.lint import lint_config


def _lint(stage, **zero):
    cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": stage, **zero}}
    return lint_config(parse_text(json.dumps(cfg), "c.json"))


@pytest.mark.parametrize("stage", ["3", "3.0", "2", "three", 4, "3.5"])
def test_stage_message_says_what_deepspeed_does(stage):
    zc = pytest.importorskip("deepspeed.runtime.zero.config")
    try:
        accepted = int(zc.DeepSpeedZeroConfig(stage=stage).stage)
    except Exception:
        accepted = None
    got = [f for f in _lint(stage) if f.pointer == "/zero_optimization/stage"]
    if accepted is None:
        assert [f.severity for f in got] == ["error"], got
        assert "rejects" in got[0].message
    else:
        assert [f.severity for f in got] == ["warning"], got
        assert "accepts" in got[0].message and "rejects" not in got[0].message
        assert effective_config({"zero_optimization": {"stage": stage}}).zero.stage == accepted


def test_string_stage_3_is_not_zero3_for_accelerate():
    """The warning's claim: accelerate/transformers test the stage as written."""
    hf = pytest.importorskip("accelerate.utils.deepspeed")
    assert hf.HfDeepSpeedConfig({"zero_optimization": {"stage": "3"}}).is_zero3() is False
    assert hf.HfDeepSpeedConfig({"zero_optimization": {"stage": 3}}).is_zero3() is True
    f = next(f for f in _lint("3") if f.pointer == "/zero_optimization/stage")
    assert "is_zero3" in f.message


def test_invalid_stage_does_not_also_report_stage_0_rules():
    """"three" is refused (S004); O002 ("offload_optimizer at stage 0") would judge the stand-in 0."""
    got = _lint("three", offload_optimizer={"device": "cpu"})
    assert [f.code for f in got] == ["S004"], [f.to_dict() for f in got]
    assert [f.code for f in _lint(0, offload_optimizer={"device": "cpu"})] == ["O002"]
