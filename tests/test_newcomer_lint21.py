"""Newcomer check lint21: what a user typed and DeepSpeed 0.19.8 silently did otherwise.

Item 1: a misspelt top-level key whose did-you-mean is a top-level key DeepSpeed reads, that key itself absent,
is an S002 *error*: DeepSpeed reads the intended key with ``in`` / ``dict.get`` and runs on its default
(``runtime/zero/config.py`` l.71-78 ``get_zero_config``: ``{}`` when ``zero_optimization`` is absent, l.95
``stage: ZeroStageEnum = 0``; ``runtime/precision_config.py`` l.34-38 ``get_bfloat16_config``, l.46
``enabled: bool = False``; ``runtime/config.py`` l.288-292 ``get_optimizer_name`` -> ``OPTIMIZER_TYPE_DEFAULT =
None``, ``runtime/constants.py`` l.26). Where the intended key is written too, or no key is near, it stays a warning.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

#: the newcomer's config: ZeRO-3 meant, DeepSpeed 0.19.8 runs ZeRO stage 0 (the whole model on every rank)
TYPO_ZERO = {"train_micro_batch_size_per_gpu": 2, "zero_optimisation": {"stage": 3}, "bf16": {"enabled": True}}


def _lint(tmp_path, cfg, *extra):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(cfg))
    return run_cli(["lint", str(p), "--format", "json", *extra], cwd=tmp_path)


def _s002(proc):
    return [f for f in json.loads(proc.stdout)["files"][0]["findings"] if f["code"] == "S002"]


def test_misspelt_zero_section_fails_lint_and_names_stage_0(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(TYPO_ZERO))
    text = run_cli(["lint", "c.json"], cwd=tmp_path)
    assert text.returncode == 1, text.stdout + text.stderr  # default --fail-on error
    assert "c.json:1:40: error S002 /zero_optimisation" in text.stdout
    (f,) = _s002(_lint(tmp_path, TYPO_ZERO))
    assert f["severity"] == "error"
    # DeepSpeedZeroConfig.stage = 0 (runtime/zero/config.py l.95) when the section is absent (l.71-78)
    assert "ZeRO is off (stage 0" in f["message"]
    assert "did you mean 'zero_optimization'?" in f["message"]


@pytest.mark.parametrize("typo, meant, words", [
    # get_bfloat16_config reads "bf16", then "bfloat16", else {}: enabled False (precision_config.py l.34-38, l.46)
    ("bf_16", "bf16", "bf16 is off"),
    # get_optimizer_name: no "optimizer" -> OPTIMIZER_TYPE_DEFAULT None (config.py l.288-292, constants.py l.26)
    ("optimiser", "optimizer", "no optimizer comes from the config"),
])
def test_misspelt_section_is_an_error_with_the_default_named(tmp_path, typo, meant, words):
    cfg = {"train_micro_batch_size_per_gpu": 2, typo: {"enabled": True} if meant == "bf16" else
           {"type": "AdamW", "params": {"lr": 1e-4}}}
    proc = _lint(tmp_path, cfg)
    (f,) = _s002(proc)
    assert (f["severity"], f["pointer"]) == ("error", f"/{typo}")
    assert words in f["message"] and f"did you mean '{meant}'?" in f["message"]
    assert proc.returncode == 1


def test_typo_beside_the_intended_key_stays_a_warning(tmp_path):
    # the intended section is written: DeepSpeed reads it; the typo is a stray, not a lost setting
    cfg = {**TYPO_ZERO, "zero_optimization": {"stage": 3}}
    proc = _lint(tmp_path, cfg)
    (f,) = _s002(proc)
    assert f["severity"] == "warning" and "absent" not in f["message"]
    assert proc.returncode == 0


def test_key_with_no_suggestion_stays_a_warning(tmp_path):
    proc = _lint(tmp_path, {"train_micro_batch_size_per_gpu": 2, "cuda_visible_devices": "0,1"})
    (f,) = _s002(proc)
    assert f["severity"] == "warning"
    assert proc.returncode == 0


def test_nested_typo_keeps_its_own_rule(tmp_path):
    # inside a plain-dict section (aio is read with .get, swap_tensor/aio_config.py) a typo is only ignored:
    # the section exists and its other keys are read -- a warning, as before
    proc = _lint(tmp_path, {"train_micro_batch_size_per_gpu": 2, "aio": {"block_sise": 1048576}})
    (f,) = _s002(proc)
    assert f["severity"] == "warning"
