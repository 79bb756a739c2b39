"""generate's pipeline-parallel plans carry their own micro-batch's pipe buffers (perf17).

The search computes a ledger once per (stage/offload combo, GA > 1) of a layout and gives it to that combo's
other plans (``generate.search``'s ``led_cache``). Under pipeline parallelism the ledger holds the pipe
buffers, b x s x h x D each, max(2, min(stages - stage, GA)) of them (DeepSpeed 0.19.8
``runtime/pipe/engine.py`` ``_exec_recv_activations`` l.1123-1124, ``_exec_backward_pass`` l.796-799;
``advisor.ledger.state.pipeline_stage_entries``), so a PP plan at GA 2 and micro-batch 8 took micro-batch 1's
buffers: 853 MB short on gpt2 over 2 ranks. Each candidate's figures must be estimate's own fit of the config
generate wrote (``advisor.views.estimate.plan_fit`` on a fresh plan): the tool's promise that a plan generate
writes is one estimate says fits.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from advisor.cluster.hardware import from_dict
from advisor.cluster.overhead import OverheadSettings
from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan
from advisor.ledger.timeline import resolve_load
from advisor.model.specs import resolve_model
from advisor.plan import Workload
from advisor.views import generate as gen
from advisor.views.estimate import plan_fit


@pytest.mark.parametrize("pp, gb", [(2, 16), (4, 16)])
def test_each_pipeline_plan_has_the_figures_estimate_gives_its_config(pp, gb):
    g = 4
    hw = replace(from_dict({"base": "dgx-h100"}, "<test>"), nodes=1, accelerators_per_node=g)
    inv = resolve_model("gpt2")
    req = gen.Request(global_batch=gb, seq_len=1024, nodes=1, gpus_per_node=g, pipeline_parallel=pp)
    res = gen.search(inv, hw, req, top=50)
    cap = gen._capacity(hw, gen.choose_nvme_tier(hw))
    plans = [c for c in res.ranked + res.rejected if c.config is not None]
    assert len({c.micro for c in plans if c.ga > 1}) >= 2  # several micro-batches at GA > 1: the case at issue
    for c in plans:
        cl = Cluster(world_size=g, gpus_per_node=g, pipeline_parallel=c.pp)
        plan = Plan(effective_config(c.config), inv, cl, Workload(1024, c.micro, c.checkpointing, req.attention))
        load = resolve_load(plan.config, req.zero_init, req.load_dtype, req.low_cpu_mem_usage, hf=False)
        rows = {r.tier: r.need for r in plan_fit(plan, cap, OverheadSettings(), load=load).rows}
        assert (c.accelerator, c.host) == (rows["accelerator"], rows.get("host", 0)), (c.combo, c.micro, c.ga)
