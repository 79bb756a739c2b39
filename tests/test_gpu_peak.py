"""benchmarks/gpu_peak.py's CPU-side parts (issue 18): the cell order, the estimate call it makes,
the overhead block it derives, and its refusal to write anything without a CUDA device. The GPU
figures themselves need a lent GPU (none so far): nothing here stands in for them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20


def _mod():
    spec = importlib.util.spec_from_file_location("gpu_peak", ROOT / "benchmarks" / "gpu_peak.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_cells_cover_the_matrix_and_the_first_dozen_cover_every_factor():
    m = _mod()
    cells = m.cells(False)
    keys = [(c["stage"], c["offload"], c["checkpointing"], c["seq"]) for c in cells]
    # stage 0: none only (2 x 2); stages 1-3: none/cpu (3 x 2 x 2 x 2)
    assert len(keys) == len(set(keys)) == 4 + 24
    first = cells[:12]
    for field, values in (("stage", {0, 1, 2, 3}), ("offload", {"none", "cpu"}), ("checkpointing", {True, False}),
                          ("seq", {512, 2048})):
        assert {c[field] for c in first} == values, field
    # every offloaded stage with each checkpointing setting appears early too
    assert {(c["stage"], c["offload"]) for c in first} >= {(s, "cpu") for s in (1, 2, 3)}
    assert len(m.cells(True)) == 2


def test_overhead_block_by_hand():
    m = _mod()
    rows = [{"measured": {"max_allocated": 1000 * MIB, "max_reserved": 1100 * MIB, "driver_used_max": 1600 * MIB}},
            {"measured": {"max_allocated": 2000 * MIB, "max_reserved": 2300 * MIB, "driver_used_max": 2820 * MIB}},
            {"measured": {"max_allocated": 4000 * MIB, "max_reserved": 4200 * MIB, "driver_used_max": 4710 * MIB}},
            {"measured": {"error": "OOM"}}]
    b = m.overhead_block(rows, "NVIDIA H200", {"driver_version": "580"}, "2.11.0")
    # driver - reserved: 500, 520, 510 MiB -> median 510; (reserved - allocated) / allocated: 0.1, 0.15, 0.05
    assert b["cuda_context_mib"] == [510, 500, 520]
    assert b["allocator_fraction"] == [0.1, 0.05, 0.15]
    assert "3 cells" in b["source"] and "NVIDIA H200" in b["source"]
    assert m.overhead_block(rows[3:], "x", {}, "t") is None
    # the block parses as a hardware spec's accelerator runtime_overhead
    from advisor.cluster.hardware import from_dict
    hw = from_dict({"nodes": 1, "accelerators_per_node": 1,
                    "accelerator": {"name": "x", "memory_bytes": 1e11, "runtime_overhead": b}})
    assert hw.accelerator.runtime_overhead.cuda_context == (510 * MIB, 500 * MIB, 520 * MIB)


def test_the_estimate_it_runs_answers_on_cpu(tmp_path):
    """The exact estimate command the script runs per cell works here and gives the fit it reads."""
    m = _mod()
    (tmp_path / "config.json").write_text(json.dumps(m.MODEL))
    est = m.estimate({"stage": 3, "offload": "cpu", "checkpointing": True, "seq": 512}, tmp_path)
    acc = next(f for f in est["fit"] if f["tier"] == "accelerator")
    assert acc["tracked"] > 0 and {o["key"] for o in acc["overhead"]} == {"cuda_context", "nccl", "allocator",
                                                                         "deepspeed"}


def test_without_cuda_it_writes_nothing(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the refusal path is not reachable")
    m = _mod()
    assert m.main(["--out", str(tmp_path)]) == 2
    assert not list(tmp_path.iterdir())
