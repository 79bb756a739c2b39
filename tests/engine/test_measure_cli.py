"""``ds-advisor measure`` end to end: the real engine on 2 CPU ranks, its bytes beside the
ledger's, every row equal (the CLI's own verdict is checked against the rows it prints)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.conftest import run_group

TINY = {"name": "tiny-odd", "tensors": [
    {"name": "a.weight", "shape": [301, 64]}, {"name": "a.bias", "shape": [301]},
    {"name": "b.weight", "shape": [77, 301]}, {"name": "b.bias", "shape": [77]},
    {"name": "c.weight", "shape": [5, 77]}, {"name": "c.bias", "shape": [5]}]}


@pytest.mark.engine
@pytest.mark.parametrize("stage", [2, 3])
def test_measure_cli_matches_ledger(tmp_path, stage):
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps(TINY))
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                               "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                               "zero_optimization": {"stage": stage, "reduce_bucket_size": 50000,
                                                     "stage3_param_persistence_threshold": 100}}))
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    p = run_group([sys.executable, "-m", "advisor", "measure", str(cfg), "--model", str(inv), "--world-size", "2",
                        "--format", "json"], 600, env=env)
    assert "Traceback" not in p.stderr[-2000:] or p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)
    rows = d["rows"]
    assert {r["rank"] for r in rows} == {0, 1}
    assert all("error" not in r for r in rows)
    # the engine really allocated the Adam state and master weights the ledger predicts
    steady = {(r["rank"], r["item"]) for r in rows if r["snapshot"] == "steady" and r["measured"] > 0}
    assert {(0, "fp32_master"), (0, "exp_avg"), (1, "exp_avg_sq")} <= steady
    assert d["matches"] == all(r["diff"] == 0 for r in rows) and d["matches"], [r for r in rows if r["diff"]]
    assert p.returncode == 0
