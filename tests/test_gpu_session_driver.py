"""benchmarks/gpu_session.py (the one device call for a lent GPU) and the CPU-side parts of
benchmarks/gpu_compute.py / gpu_peak.py it runs (issues 15, 23): argument handling, the budget split,
the compute-term and host-tier comparisons from hand-made records, and the refusal to write anything
without a CUDA device. The GPU figures themselves need a lent GPU: nothing here stands in for them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "gpu_session"


def _load(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def _cuda_here() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


# ---- argument handling ------------------------------------------------------------------------

@pytest.mark.parametrize("argv,words", [(["--budget-s", "5", "--out", "x"], "--budget-s 5: must be 60-570"),
                                        (["--budget-s", "nan", "--out", "x"], "--budget-s nan"),
                                        (["--budget-s", "600", "--out", "x"], "must be 60-570"),
                                        (["--budget-s", "ten", "--out", "x"], "invalid float value"),
                                        (["--bogus"], "unrecognized arguments")])
def test_bad_arguments_exit_2_with_one_message(argv, words, capsys, tmp_path, monkeypatch):
    m = _load("gpu_session")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        m.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_no_out_and_no_OUT_is_refused(capsys, monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    m = _load("gpu_session")
    with pytest.raises(SystemExit) as e:
        m.main([])
    assert e.value.code == 2 and "$OUT unset" in capsys.readouterr().err


def test_OUT_is_the_default_and_dry_run_writes_nothing(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path / "o"))
    m = _load("gpu_session")
    assert m.main(["--dry-run", "--budget-s", "300"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["out"] == str(tmp_path / "o") and plan["steps"] == ["gpu_compute", "gpu_peak"]
    assert not (tmp_path / "o").exists()


# ---- the budget -----------------------------------------------------------------------------

def test_budget_split_by_hand():
    m = _load("gpu_session")
    # 420 s at the start: compute min(90, max(20, 0.25 x 420 = 105)) = 90; peak 420 - 90 - 60 (overrun) = 270
    assert m.plan_budget(420, 0) == {"left": 420, "compute": 90, "peak": 270}
    # 120 s left: compute max(20, 30) = 30; peak 120 - 30 - 60 = 30 (the least it is started with)
    assert m.plan_budget(420, 300) == {"left": 120, "compute": 30, "peak": 30}
    # 70 s left: compute max(20, 17.5) = 20; peak 70 - 20 - 60 < 30: skipped (0)
    assert m.plan_budget(420, 350) == {"left": 70, "compute": 20, "peak": 0}
    # past the budget: nothing is started
    assert m.plan_budget(420, 500) == {"left": 0, "compute": 0, "peak": 0}
    # after gpu_compute.py: gpu_peak.py gets all that is left but the overrun, 420 - 100 - 60 = 260
    assert m.plan_budget(420, 100, compute_done=True) == {"left": 320, "compute": 0, "peak": 260}
    assert m.plan_budget(420, 340, compute_done=True) == {"left": 80, "compute": 0, "peak": 0}


# ---- the comparisons, from hand-made records -----------------------------------------------

def test_compute_ratios_from_a_recorded_estimate_by_hand():
    g = _load("gpu_compute")
    est = json.loads((FIX / "estimate_step_time.json").read_text())
    measured = json.loads((FIX / "measured.json").read_text())
    model = g.model_compute(est)
    # the compute terms only (the pcie term is not compute): forward 1e12 + 2.5e11 FLOPs over 5e14 FLOP/s;
    # backward 2e12 + 5e11 + 1.25e12 (recompute runs in backward)
    assert model["forward"]["flops"] == pytest.approx(1.25e12) and model["forward"]["seconds"] == pytest.approx(0.0025)
    assert model["backward"]["flops"] == pytest.approx(3.75e12) and model["backward"]["seconds"] == pytest.approx(0.0075)
    c = g.compare(measured, model)
    # forward 0.005 s measured: 2.0 x the model; 1.25e12 / 0.005 = 250 TFLOP/s = 0.25 of the 1e15 peak
    assert c["forward"]["measured_over_model"] == pytest.approx(2.0)
    assert c["forward"]["achieved_tflops"] == pytest.approx(250.0)
    assert c["forward"]["implied_mfu"] == pytest.approx(0.25)
    # backward 0.01 s: 4/3; 375 TFLOP/s; 0.375
    assert c["backward"]["measured_over_model"] == pytest.approx(4 / 3)
    assert c["backward"]["implied_mfu"] == pytest.approx(0.375)
    # both: 0.015 s against 0.01 s = 1.5 = assumed MFU 0.5 / implied MFU 1/3
    assert c["total"]["measured_over_model"] == pytest.approx(1.5)
    assert c["total"]["implied_mfu"] == pytest.approx(1 / 3)
    assert c["model_mfu"] / c["total"]["implied_mfu"] == pytest.approx(c["total"]["measured_over_model"])
    assert c["step"]["measured_over_model"] == pytest.approx(0.03 / 0.02)
    s = g.mfu_summary([{"compute": c}, {"compute": None}, {"measured": {"error": "OOM"}}])
    assert s == {"implied_mfu": [0.333, 0.333, 0.333], "assumed_mfu": [0.5], "cells": 1}
    # no model (a preset without a peak), or a failed cell: no comparison
    assert g.compare(measured, None) is None and g.compare({"error": "x"}, model) is None
    assert g.model_compute({"step_time": {"terms": [dict(est["step_time"]["terms"][0], seconds=None)]}}) is None


def test_host_tier_comparison_by_hand():
    p = _load("gpu_peak")
    est = json.loads((FIX / "estimate_step_time.json").read_text())
    measured = json.loads((FIX / "measured.json").read_text())
    h = p.host_compare(est, measured)
    assert h["census_over_estimate_pinned"] == pytest.approx(1.0)        # 1e9 / 1e9
    assert h["census_over_estimate_pageable"] == pytest.approx(1.1)      # 2.2e9 / 2e9
    assert h["rss_growth"] == 3_200_000_000 and h["pinned_allocator_current"] == 1 << 30
    assert p.host_compare(est, {"error": "x"}) is None


def test_summary_reads_the_recorded_files(tmp_path):
    g, s = _load("gpu_compute"), _load("gpu_session")
    est = json.loads((FIX / "estimate_step_time.json").read_text())
    measured = json.loads((FIX / "measured.json").read_text())
    c = g.compare(measured, g.model_compute(est))
    doc = {"gpu": "NVIDIA H100 80GB HBM3", "rows": [{"model_name": "wide", "seq": 2048, "checkpointing": False,
                                                     "compute": c}], "mfu": g.mfu_summary([{"compute": c}])}
    (tmp_path / "gpu_compute-2026-12-06-NVIDIA_H100.json").write_text(json.dumps(doc))
    out = s.summarize(tmp_path)
    assert set(out) == {"gpu_compute"}
    row = out["gpu_compute"]["rows"][0]
    assert row["compute_measured_over_model"] == pytest.approx(1.5) and row["implied_mfu"] == pytest.approx(1 / 3)
    assert out["gpu_compute"]["mfu"]["cells"] == 1


def test_the_compute_term_estimate_gives_is_6N_plus_attention_by_hand(tmp_path):
    """The real estimate command gpu_compute.py runs (small model, seq 512, micro-batch 2, no recompute,
    --hardware h100-sxm-80gb) gives the FLOPs counted by hand from the model's shapes: N = 2 x 32,000 x 1,024
    (embedding, head) + 8 x (2 x 1024^2 + 2 x 1024 x 512 (q, o, k, v; 8 KV heads of 64) + 3 x 1024 x 2,816
    (MLP) + 2 x 1,024 (norms)) + 1,024 = 159,925,248; forward 2 N T + 2 L s a (d_qk + d_v) T (Kaplan s.2.1,
    PaLM App. B), T = 1,024 tokens; the H100 SXM's dense bf16 peak 989.5 TFLOP/s (NVIDIA's data sheet)."""
    g = _load("gpu_compute")
    (tmp_path / "m.json").write_text(json.dumps(g.SMALL))
    (tmp_path / "ds.json").write_text(json.dumps(g.ds_config()))
    est = g.run_estimate(g.estimate_cmd(tmp_path / "ds.json", tmp_path / "m.json", 512, 2, False, "h100-sxm-80gb"))
    model = g.model_compute(est)
    n, t = 2 * 32000 * 1024 + 8 * (2 * 1024 ** 2 + 2 * 1024 * 512 + 3 * 1024 * 2816 + 2 * 1024) + 1024, 1024
    attn_fwd = 2 * 8 * 512 * 16 * (64 + 64) * t
    assert n == 159_925_248
    assert model["forward"]["flops"] == pytest.approx(2 * n * t + attn_fwd)
    assert model["backward"]["flops"] == pytest.approx(4 * n * t + 2 * attn_fwd)
    assert model["peak_flops"] == 989.5e12
    assert model["total"]["seconds"] == pytest.approx((6 * n * t + 3 * attn_fwd) / (989.5e12 * model["mfu"]))
    assert g.preset_for("NVIDIA H100 80GB HBM3") == "h100-sxm-80gb" and g.preset_for("NVIDIA H200") == "h200"
    assert g.preset_for("NVIDIA A100-SXM4-40GB") == "a100-40gb" and g.preset_for("Tesla T4") is None


# ---- no CUDA: exit 2, nothing written ---------------------------------------------------------

def test_without_cuda_the_driver_and_gpu_compute_write_nothing(tmp_path, capsys):
    if _cuda_here():
        pytest.skip("a CUDA device is present: the refusal path is not reachable")
    s, g = _load("gpu_session"), _load("gpu_compute")
    out = tmp_path / "out"
    assert s.main(["--out", str(out), "--budget-s", "120"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not out.exists()
    assert g.main(["--out", str(out)]) == 2
    assert not out.exists()


def test_arch_list_keeps_what_deepspeed_parses_and_replaces_the_rest():
    """DeepSpeed 0.19.8's op_builder/builder.py l.710 and l.744 int() each MAJOR / MINOR part (after '+'):
    '9.0a' raises there, so the card's capability replaces it."""
    m = _load("gpu_session")
    assert m.arch_list("9.0a", "9.0") == "9.0"
    assert m.arch_list(None, "9.0") == "9.0" and m.arch_list("  ", "9.0") == "9.0"
    assert m.arch_list("8.0;9.0+PTX", "9.0") == "8.0;9.0+PTX"
    assert m.arch_list("8.0 9.0", "9.0") == "8.0 9.0"
    assert m.arch_list("9.0;10.0a", "9.0") == "9.0" and m.arch_list("9", "9.0") == "9.0"
