"""A view never changes the Workload it is given (session 23, fixa23).

``activations_for`` used to write the sequence length and micro-batch it resolved back into the caller's
Workload (``workload.seq_len, workload.micro_batch = int(seq), int(mb)``): a second call, another stage or
another command on the same Workload saw values it never passed, and "was --seq-len given?" could no longer be
told from it. The defaults themselves are checked against independent values: Llama 3 8B's
``max_position_embeddings`` is 8192 (meta-llama/Meta-Llama-3-8B config.json), and the micro-batch is the
config's ``train_micro_batch_size_per_gpu`` written below (2).
"""
from dataclasses import replace

from advisor.config.effective import effective_config
from advisor.model.specs import preset_inventory
from advisor.plan import Cluster, Workload, plan_of
from advisor.views.estimate import activations_for, estimate

CFG = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
       "zero_optimization": {"stage": 2}}
LLAMA3_MAX_POSITIONS = 8192  # meta-llama/Meta-Llama-3-8B config.json max_position_embeddings


def test_activations_for_twice_on_one_workload():
    ec, inv, cl = effective_config(CFG), preset_inventory("llama-3-8b"), Cluster(world_size=8)
    wl = Workload()
    before = replace(wl)
    first = activations_for(ec, inv, cl, wl)
    assert wl == before, "activations_for changed the Workload it was given"
    assert wl.seq_len is None and wl.micro_batch is None  # "was --seq-len given?" still answerable
    second = activations_for(ec, inv, cl, wl)
    assert wl == before
    assert second == first
    # the defaults it estimated at: the model's maximum context and the config's micro-batch
    explicit = activations_for(ec, inv, cl, Workload(seq_len=LLAMA3_MAX_POSITIONS, micro_batch=2))
    assert first == explicit
    assert first[0].saved_accelerator != activations_for(ec, inv, cl, Workload(seq_len=4096, micro_batch=2))[0].saved_accelerator


def test_pipeline_stages_share_a_workload_unchanged():
    ec, inv = effective_config({**CFG, "zero_optimization": {"stage": 1}}), preset_inventory("llama-3-8b")
    cl = Cluster(world_size=8, pipeline_parallel=2)
    wl = Workload(micro_batch=None, seq_len=None)
    stage1_alone = activations_for(ec, inv, cl, Workload(), stage=1)
    activations_for(ec, inv, cl, wl, stage=0)
    assert wl == Workload()
    assert activations_for(ec, inv, cl, wl, stage=1) == stage1_alone


def test_estimate_keeps_the_plans_workload_and_reports_the_resolved_one():
    plan = plan_of(CFG, preset_inventory("llama-3-8b"), Cluster(world_size=8))
    first = estimate(plan)
    assert plan.workload == Workload(), "estimate changed the plan's Workload"
    # what the report says it estimated at: the model's maximum context, the config's micro-batch
    assert (first.workload.seq_len, first.workload.micro_batch) == (LLAMA3_MAX_POSITIONS, 2)
    second = estimate(plan)
    assert plan.workload == Workload()
    assert second.to_dict() == first.to_dict()
