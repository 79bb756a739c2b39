"""M100's fix candidates under pipeline parallelism (newcomer session 19, findings 2 and 3).

2. DeepSpeed's PipelineEngine refuses ZeRO-2 and ZeRO-3 (runtime/pipe/engine.py
   ``PipelineEngine.__init__``: ``assert self.zero_optimization_stage() < ZeroStageEnum.gradients,
   "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"``), which the tool's own lint says
   (G001). A candidate whose config lint refuses is never offered, single or paired.
3. A candidate's bytes moved per step (and, with a hardware spec, its step time) are what
   ``estimate`` reports for the candidate's config run directly: the direct run is the independent
   side (its movement is engine-proven elsewhere); under pipeline parallelism the candidate had 0 B.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_json
from tests.test_fit_fixes import _applied

SAMPLES = Path(__file__).resolve().parents[1] / "sample_configs"
PP_ARGS = ["estimate", str(SAMPLES / "zero2.json"), "--model", "llama-2-7b", "--world-size", "8",
           "--pipeline-parallel", "2", "--seq-len", "512", "--checkpointing", "full",
           "--set", "zero_optimization.stage=1", "--set", "train_batch_size=32", "--format", "json"]


def _candidates(d: dict) -> list[dict]:
    (f,) = [f for f in d["findings"] if f["code"] == "M100" and f["data"]["tier"] == "accelerator"]
    return f["data"]["candidates"]


def _stage(c: dict) -> int:
    return max([int(s.partition("=")[2]) for s in c["set"] if s.startswith("zero_optimization.stage=")] or [1])


@pytest.mark.parametrize("gpu", ["24GB", "28GB", "18GB"])
def test_no_zero23_candidate_under_pipeline_parallelism(gpu):
    # 18GB: no single change fits, so pairs are tried as well
    rc, d = run_json(PP_ARGS + ["--gpu-memory", gpu])
    cands = _candidates(d)
    assert rc == 1 and cands
    # DeepSpeed's PipelineEngine: stage < 2 (ZeroStageEnum.gradients) under pipeline parallelism
    assert [c["change"] for c in cands if _stage(c) >= 2] == []
    for c in cands:
        if c["verdict"] in ("fits", "tight"):  # offered: applied, lint refuses nothing new
            again = _applied(PP_ARGS + ["--gpu-memory", gpu], c)
            assert not [g for g in again["findings"] if g["code"] == "G001"], (c["change"], again["findings"])


def _rank0_moved(d: dict) -> int:
    (role,) = [r for r in d["movement"]["ranks"] if any(a <= 0 <= b for a, b in r["rank_ranges"])]
    return sum(m["bytes"] for m in role["movements"])


def test_pipeline_candidate_moves_what_its_direct_run_moves():
    args = PP_ARGS + ["--gpu-memory", "24GB", "--hardware", "dgx-h100"]
    rc, d = run_json(args)
    cands = _candidates(d)
    assert cands
    for c in cands:
        again = _applied(args, c)
        direct = _rank0_moved(again)
        assert direct > 0 and c["moved_bytes"] == direct, (c["change"], c["moved_bytes"], direct)
        assert c["step_time_s"] == pytest.approx(again["step_time"]["step_time_s"], rel=1e-12), c["change"]
