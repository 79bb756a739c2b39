"""Partial optimizer offload (ZeRO-3, ``offload_optimizer: {device: cpu, ratio: 0.5}``): the optimizer-states
file the real DeepSpeed 0.19.8 engine writes on the CPU accelerator, against advisor.ledger.checkpoint.

advisor.ledger.checkpoint counts a GPU run's file: the moments of the host sub-groups only, since the first
int((1 - ratio) x n) sub-groups are stepped by the backup torch AdamW (stage3.py l.1249-1258), whose state
``_rigid_state_dict`` (l.3442-3444) does not save. No GPU was lent, so that figure is not measured here. On the
CPU accelerator ``subgroup_to_device[i]`` is 'cpu' for every sub-group (l.1108: the accelerator's name), so
DeepSpeedCPUAdam steps them all and the file holds every moment: this test checks that reading of the engine
and the rest of the file's composition. The MLP 64 -> 301 -> 77 -> 5 (tests/engine/ckpt_worker.py) at W = 2 has
the partitions p = 9,632, 151, 11,589, 39, 193, 3 (ceil(n / 2)); sub_group_size 5,000 closes a sub-group when
the running sum reaches it: S = [9,632, 11,740, 235], and int((1 - 0.5) x 3) = 1 sub-group (9,632 elements) is
the GPU's. So the real file = the prediction + that sub-group's 2 Adam moments, 2 x 9,632 x 4 B, and holds
DeepSpeedCPUAdam state for all 3 sub-groups and all 3 fp32 flat partitions.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_checkpoint_engine import ADAM, MB, _launch, _real_files, _tensor_bytes, mlp  # noqa: E402

from advisor.config.effective import effective_config  # noqa: E402
from advisor.ledger.checkpoint import checkpoint_files  # noqa: E402
from advisor.ledger.state import Cluster, Plan  # noqa: E402

pytestmark = pytest.mark.engine

S = [9632, 11740, 235]
CELL = {"id": "z3_bf16_optcpu_ratio", "config": {
    **MB, "bf16": {"enabled": True}, "optimizer": ADAM,
    "zero_optimization": {"stage": 3, "sub_group_size": 5000, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}}


def test_cpu_run_saves_every_moment_and_every_fp32_partition(tmp_path):
    import torch

    run = _launch(2, [CELL], str(tmp_path))[CELL["id"]]
    assert run["error"] is None, f"engine run failed:\n{run['error']}"
    pred = {f.path: f for f in checkpoint_files(Plan(effective_config(CELL["config"]), mlp([64, 301, 77, 5]),
                                                     Cluster(world_size=2)), tag="ckpt").files}
    real = _real_files(run["cell"]["save_dir"])
    assert sorted(pred) == sorted(real)
    for r in (0, 1):
        path = f"ckpt/bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt"
        sd = torch.load(real[path], map_location="cpu", weights_only=False)
        osd = sd["optimizer_state_dict"]
        flat = osd["fp32_flat_groups"]
        assert [t.numel() for t in flat] == S
        state = osd["optimizer_state_dict"]["state"]
        assert sorted(state) == [0, 1, 2]  # DeepSpeedCPUAdam stepped every sub-group on the CPU accelerator
        assert sorted(state[k]["exp_avg"].numel() for k in state) == sorted(S)
        storage, _ = _tensor_bytes(sd)
        assert storage == pred[path].bytes + 2 * S[0] * 4, (storage, pred[path].bytes)
