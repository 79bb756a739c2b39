"""moe22 (issue 15): the routed experts' ZeRO partition under tensor parallelism, against the real engine.

DeepSpeed 0.19.8's ZeRO-1 with a native MoE layer on 4 CPU ranks (gloo) under a TP-2 grid as the mpu
(moe_groups_worker.py): DeepSpeed's own partition count and fp32 partition of the ``moe`` param group, and
the groups it built, against the ledger's routed-expert entries for the same tensors (an inventory of the
worker's model by hand: a replicated dense linear and router, E per-expert two-linear MLPs). TP 2, ep 2: the
expert-data group is {0, 2} / {1, 3} (DP x TP / ep = 2 ranks; the ledger used DP / ep = 1); TP 2, ep 4 on
DP 2: DeepSpeed runs it with groups of one rank (the ledger refused it)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.conftest import free_port, run_group
from tests.engine.moe_toy_inventory import moe_toy_inventory

pytestmark = pytest.mark.engine

HERE = os.path.dirname(os.path.abspath(__file__))
H, F, E, WORLD = 64, 128, 4, 4
CFG = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
       "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 1}}


def _inventory():
    return moe_toy_inventory(H, F, E)


@pytest.mark.parametrize("tp, ep", [(2, 2), (2, 4)])
def test_expert_partition_matches_deepspeed(tp, ep):
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    ds = {k: v for k, v in CFG.items() if k != "optimizer"}  # the worker passes its own AdamW (moe param groups)
    p = run_group([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(WORLD), "--master_port",
                   str(free_port()), os.path.join(HERE, "moe_groups_worker.py"), str(tp), str(ep), json.dumps(ds),
                   str(H), str(F), str(E)], 600, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    dec = json.JSONDecoder()
    got = {d["rank"]: d for d in (dec.raw_decode(chunk)[0] for chunk in p.stdout.split("MOEG ")[1:])}
    assert sorted(got) == list(range(WORLD))
    we = WORLD // ep  # DP x TP / ep (pp 1)
    for r, d in got.items():
        assert d["edp"] == list(range(r % ep, WORLD, ep)) and d["ep"] == list(range(r // ep * ep, r // ep * ep + ep))
        (moe,) = [g for g in d["groups"] if g["moe"]]
        assert moe["partition_count"] == we and moe["numel"] == E // ep * 2 * H * F  # whole experts, not / TP
        assert d["ipg_buckets"] == 1  # dense and moe groups share it

    from advisor.config.effective import effective_config
    from advisor.ledger.state import Cluster, Plan, compute_ledger
    led = compute_ledger(Plan(effective_config(CFG), _inventory(),
                              Cluster(world_size=WORLD, tensor_parallel=tp, expert_parallel=ep)))
    assert led.ranks
    for rl in led.ranks:
        for r in rl.ranks:
            dense, moe = (next(g for g in got[r]["groups"] if g["moe"] is x) for x in (False, True))
            routed = [e for e in rl.by_item("fp32_master") if e.formula.startswith("routed experts")]
            plain = [e for e in rl.by_item("fp32_master") if not e.formula.startswith("routed experts")]
            assert [e.bytes for e in routed] == [4 * moe["fp32_part"]], (r, routed, moe)
            assert [e.bytes for e in plain] == [4 * dense["fp32_part"]], (r, plain, dense)
            lp = [e.bytes for e in rl.by_item("lp_params_flat") if e.formula.startswith("routed experts")]
            assert lp == [2 * moe["numel"]]
            assert len(rl.by_item("ipg_bucket")) == got[r]["ipg_buckets"]
