"""ckpt22: the files a native-MoE ZeRO-1/2 save writes, against the real engine.

DeepSpeed 0.19.8 on 4 CPU ranks (gloo), a replicated dense linear, the router and E = 4 two-linear experts at
ep 2 (moe_ckpt_worker.py), one step, ``save_checkpoint``: the file list under the tag must be exactly
advisor.ledger.checkpoint's (``mp_rank_00_model_states.pt``, ``layer_0_expert_{g}_mp_rank_00_model_states.pt``,
each rank's ``bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt``), and each file's tensor payload (the unique
storages torch.load gives back, as test_checkpoint_engine.py measures) the predicted bytes, exactly."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.conftest import free_port, run_group
from tests.engine.test_checkpoint_engine import _tensor_bytes
from tests.engine.test_moe_groups_engine import E, F, H, WORLD, _inventory

pytestmark = pytest.mark.engine

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("stage, ep", [(1, 2), (2, 4)])
def test_moe_checkpoint_files_match_deepspeed(tmp_path, stage, ep):
    import torch

    from advisor.config.effective import effective_config
    from advisor.ledger.checkpoint import checkpoint_files
    from advisor.ledger.state import Cluster, Plan
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": stage}}
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    p = run_group([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(WORLD), "--master_port",
                   str(free_port()), os.path.join(HERE, "moe_ckpt_worker.py"), str(ep), json.dumps(cfg),
                   str(H), str(F), str(E), str(tmp_path)], 600, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    real = {n: os.path.join(tmp_path, "t", n) for n in os.listdir(tmp_path / "t")}
    # the worker hands DeepSpeed a torch.optim.AdamW (its moe param groups): torch's Adam, a 4 B step per group
    res = checkpoint_files(Plan(effective_config({**cfg, "optimizer": {"type": "AdamW", "params": {"torch_adam": True}}}),
                                _inventory(),
                                Cluster(world_size=WORLD, expert_parallel=ep)), tag="t")
    pred = {f.name: f for f in res.files if f.path.startswith("t/")}
    assert sorted(pred) == sorted(real)
    for n, f in pred.items():
        storage, _ = _tensor_bytes(torch.load(real[n], map_location="cpu", weights_only=False))
        assert f.bytes == storage, f"{n}: predicted {f.bytes} tensor bytes, loaded {storage}"
