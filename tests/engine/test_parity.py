"""Parity: the ledger's per-rank bytes equal the real DeepSpeed engine's, to the byte.

For every cell of stages 0-3 x fp16/bf16/fp32 x offload_optimizer none/cpu/nvme x
offload_param none/cpu/nvme (stage 3; ignored below) x world size 1/2/4 on the odd-sized tiny
MLP, plus NVMe cells on a 2.1M-parameter MLP and other code paths (parity.matrix_cells), each
rank's census of live engine tensors (advisor.engine.measure) must equal the ledger per item and tier
(accelerator and pageable host fold together on a CPU accelerator). Combinations DeepSpeed
rejects must be the ones advisor.ledger.state.unsupported_reason predicts.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity  # noqa: E402

CELLS = parity.matrix_cells()
_ONLY = os.environ.get("DS_ADVISOR_PARITY_ONLY")
if _ONLY:
    CELLS = [c for c in CELLS if _ONLY in c["id"]]


@pytest.mark.engine
@pytest.mark.parametrize("cell", CELLS, ids=[c["id"] for c in CELLS])
def test_parity(cell, matrix_run):
    if cell["id"] in matrix_run["skipped"]:
        pytest.skip(matrix_run["skipped"][cell["id"]])
    measured = matrix_run["results"].get(cell["id"])
    if measured is None:
        pytest.fail("no measurement: " + " | ".join(e[:1500] for e in matrix_run["launch_errors"]))
    problems = parity.compare(cell, measured)
    assert not problems, "\n".join(problems)


@pytest.mark.engine
def test_matrix_covers_the_issue_grid():
    """Every stage x dtype x offload_optimizer x world size cell, and every offload_param at stage 3."""
    ids = {c["id"] for c in parity.matrix_cells()}
    for st in range(4):
        for dt in parity.DTYPES:
            for oo in parity.DEVICES:
                for op in (parity.DEVICES if st == 3 else ("none",)):
                    for w in parity.WORLD_SIZES:
                        assert f"z{st}-{dt}-oo_{oo}-op_{op}-w{w}" in ids
