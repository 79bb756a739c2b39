"""Count options (--params, --world-size, ...: ``cli.Count``) take a whole number written in
scientific or decimal notation (``20e9``, ``1.5e9``), read exactly, and refuse a fraction, NaN or
infinity in one line naming the option, exit 2. Before, click's IntRange refused ``--params 20e9``."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

CFG = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}


@pytest.fixture()
def cfg(tmp_path):
    p = tmp_path / "ds.json"
    p.write_text(json.dumps(CFG))
    return str(p)


@pytest.mark.parametrize("written, count", [("20e9", 20_000_000_000), ("1.5e9", 1_500_000_000),
                                            ("6.7E9", 6_700_000_000), ("1500000000.0", 1_500_000_000)])
def test_params_in_scientific_notation_is_the_whole_number(cfg, written, count):
    p = run_cli(["estimate", cfg, "--params", written, "--world-size", "8", "--format", "json"])
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["model"]["parameters"] == count


def test_world_size_shares_the_count_type(cfg):
    p = run_cli(["estimate", cfg, "--params", "1e9", "--world-size", "1.6e1", "--format", "json"])
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["cluster"]["world_size"] == 16


@pytest.mark.parametrize("written, why", [("1.5", "is not a whole number"), ("nan", "is not a finite whole number"),
                                          ("inf", "is not a finite whole number"), ("1e-3", "is not a whole number"),
                                          ("7 billion", "is not a whole number"), ("1e400", "is not in the range")])
def test_params_that_are_not_a_whole_count_are_one_line_exit_2(cfg, written, why):
    p = run_cli(["estimate", cfg, "--params", written, "--world-size", "8"])
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "'--params'" in lines[0] and why in lines[0] and "Traceback" not in p.stderr, p.stderr
