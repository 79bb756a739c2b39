"""Newcomer report (2026-12-06): ``estimate`` with ``--params`` (no architecture, so no activation
estimate resolves the workload) printed ``workload: sequence 2048, micro-batch None`` although the
config sets ``train_micro_batch_size_per_gpu``; ``check`` names the config's value. The micro-batch
an estimate assumes is ``--micro-batch`` if given, else the config's train_micro_batch_size_per_gpu
(the per-rank micro-batch DeepSpeed runs, runtime/config.py), in text and JSON alike."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("flags, want", [([], 3), (["--micro-batch", "5"], 5)])
def test_the_assumed_micro_batch_is_the_configs_or_the_flags(cli, tmp_path, flags, want):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 3, "zero_optimization": {"stage": 2}}))
    args = ["estimate", str(cfg), "--params", "1000000", "--world-size", "2", "--seq-len", "2048", *flags]
    text = cli(args)
    assert text.returncode in (0, 1), text.stderr
    assert f"micro-batch {want}," in text.stdout and "micro-batch None" not in text.stdout
    js = cli(args + ["--format", "json"])
    assert json.loads(js.stdout)["assumptions"]["workload"]["micro_batch"] == want
