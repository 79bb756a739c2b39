"""The optimizer wrapper under pipeline parallelism (issue 15), against DeepSpeed 0.19.8's source.

``engine.py`` ``_do_optimizer_sanity_check`` (l.2295-2326) picks the wrapper; its only branch that reads
``self.pipeline_parallelism`` (``isinstance(model, PipelineModule)``, l.582) is stage 0 with a bf16 model
accumulating in bf16 (l.2316-2320): BF16_Optimizer, where the same config without a PipelineModule builds
FP16_Optimizer on bf16 (DDP_BFLOAT16, l.2321 -> ``_configure_fp16_optimizer`` l.2360-2362). BF16_Optimizer
then keeps its gradient buffer in grad_acc_dtype (``bf16_optimizer.py`` l.191: ``zeros_like(bf16_groups_flat[i],
dtype=self.grad_acc_dtype)``) and partitions its fp32 master over the data-parallel group at any stage
(l.163-185, aligned to 2 x W elements, ``nccl_start_alignment_factor`` l.101).

The hand figures below are also what the real PipelineEngine holds: tests/engine/test_pipeline_engine.py
``test_bf16_zero0_pipeline_takes_bf16_optimizer`` (2 stages, W = 2, gloo, the census of the engine's tensors).
"""

from __future__ import annotations

import pytest

from advisor.config.effective import effective_config
from advisor.ledger.state import (Cluster, Plan, compute_ledger, plan_optimizer, select_optimizer,
                                  unsupported_reason)
from advisor.model.inventory import Inventory

from tests.pipe_proxy import F, H, V, pipe_inventory


def _inventory() -> Inventory:
    """tests/engine/pipe_worker.py's model in Hugging Face names (embedding, 4 blocks, norm + head)."""
    return pipe_inventory()


def _cfg(stage: int, dtype: str = "bf16", accum: str | None = None, oo: str = "none") -> dict:
    c = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
         "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": stage}}
    if dtype != "fp32":
        c[dtype] = {"enabled": True}
    if accum:
        c["data_types"] = {"grad_accum_dtype": accum}
    if oo != "none":
        c["zero_optimization"]["offload_optimizer"] = {"device": oo}
    return c


# (stage, model dtype, grad_accum_dtype, offload) -> (wrapper without a PipelineModule, wrapper with one)
@pytest.mark.parametrize("stage,dtype,accum,oo,flat,piped", [
    # stage 0: l.2313-2321; only bf16 with bf16 accumulation reads pipeline_parallelism (l.2316)
    (0, "bf16", None, "none", "FP16_Optimizer", "BF16_Optimizer"),
    (0, "bf16", "bf16", "none", "FP16_Optimizer", "BF16_Optimizer"),
    (0, "fp16", None, "none", "FP16_Optimizer", "FP16_Optimizer"),
    (0, "fp32", None, "none", "FusedAdam", "FusedAdam"),  # l.2314-2315: no wrapper
    # stage 1: l.2305-2311 never reads it
    (1, "bf16", "fp32", "none", "BF16_Optimizer", "BF16_Optimizer"),
    (1, "bf16", None, "none", "DeepSpeedZeroOptimizer", "DeepSpeedZeroOptimizer"),
    (1, "bf16", "fp32", "cpu", "DeepSpeedZeroOptimizer", "DeepSpeedZeroOptimizer"),  # zero_cpu_offload, l.2306
    (1, "fp16", None, "none", "DeepSpeedZeroOptimizer", "DeepSpeedZeroOptimizer"),
])
def test_wrapper_with_and_without_a_pipeline_module(stage, dtype, accum, oo, flat, piped):
    ec = effective_config(_cfg(stage, dtype, accum, oo))
    assert select_optimizer(ec)[0] == flat
    assert select_optimizer(ec, pipeline_parallel=2)[0] == piped
    inv = _inventory()
    assert plan_optimizer(Plan(ec, inv, Cluster(world_size=4, pipeline_parallel=2)))[0] == piped
    assert plan_optimizer(Plan(ec, inv, Cluster(world_size=4)))[0] == flat


def test_stage0_dtype_mix_is_refused_under_pipeline_parallelism_too():
    """bf16 + grad_accum_dtype fp32 at stage 0 reaches the ``else: raise NotImplementedError`` of l.2322-2323
    whether or not the model is a PipelineModule (the PP branch l.2316 sits under ``model_dtype ==
    grad_accum_dtype``)."""
    ec = effective_config(_cfg(0, "bf16", "fp32"))
    why = unsupported_reason(ec)
    assert "NotImplementedError" in why and "with or without pipeline parallelism" in why
    with pytest.raises(ValueError):
        compute_ledger(Plan(ec, _inventory(), Cluster(world_size=2, pipeline_parallel=2)))


# Stage sizes (elements): DeepSpeed's partition_method "type:Block" puts the embedding and 2 blocks on stage 0,
# 2 blocks, the norm and the head on stage 1 (the engine run's parts [0, 3, 6]).
BLOCK = H + 2 * F * H
N0 = V * H + 2 * BLOCK          # 13,376
N1 = 2 * BLOCK + H + V * H      # 13,408


@pytest.mark.parametrize("world,dp", [(2, 1), (4, 2)])
def test_bf16_zero0_pipeline_ledger_is_bf16_optimizer_with_a_bf16_buffer(world, dp):
    """Per stage, N_pad = A_{2 dp}(N) (both N are multiples of 4 here): 16-bit flat N x 2; fp32 master and each
    Adam moment P x 4 with P = N / dp (partitioned over the stage's data-parallel group, bf16_optimizer.py
    l.180-185); the gradient buffer N x 2 in bf16 (l.191), whole; in the step the partition's fp32 cast
    P x 4 (l.417-419, freed after the step l.424-426). FP16_Optimizer kept the master and moments whole
    (N x 4 each) and its gradient copies N x 4."""
    led = compute_ledger(Plan(effective_config(_cfg(0)), _inventory(),
                              Cluster(world_size=world, pipeline_parallel=2)))
    assert led.wrapper == "BF16_Optimizer"
    for r in range(world):
        n = N0 if r < dp else N1
        p = n // dp
        got = {(e.item, e.life): e.bytes for e in led.rank(r).entries if e.bytes}
        assert got[("lp_params_flat", "persistent")] == n * 2
        assert got[("fp32_master", "persistent")] == p * 4
        assert got[("exp_avg", "persistent")] == got[("exp_avg_sq", "persistent")] == p * 4
        assert got[("fp32_grad_accum", "persistent")] == n * 2
        assert got[("fp32_grad", "step")] == p * 4
        # one group, communication_data_type bf16 = the buffer's: the reduce flattens a single buffer as a view
        # and casts nothing (engine.py allreduce_bucket l.3796-3801), the hp add's .to(bf16) returns the tensor
        assert not any(e.item in ("bf16_hp_grad_cast", "bf16_allreduce_flat", "allreduce_bucket_flat")
                       for e in led.rank(r).entries if e.bytes)


def test_bf16_zero1_fp32_accum_keeps_its_fp32_buffer_under_pipeline_parallelism():
    """Stage 1 bf16 + fp32 accumulation: the same BF16_Optimizer with or without PP; its buffer N x 4 and no
    step cast (grad_partition is fp32 already, l.417-419)."""
    led = compute_ledger(Plan(effective_config(_cfg(1, "bf16", "fp32")), _inventory(),
                              Cluster(world_size=2, pipeline_parallel=2)))
    assert led.wrapper == "BF16_Optimizer"
    got = {(e.item, e.life): e.bytes for e in led.rank(0).entries if e.bytes}
    assert got[("fp32_grad_accum", "persistent")] == N0 * 4
    assert ("fp32_grad", "step") not in got


def test_bf16_zero0_pipeline_checkpoint_files_at_dp2():
    """W = 4, 2 stages, dp 2: the model-states file of each stage (dp rank 0) holds BF16_Optimizer's state dict
    (engine.py ``_common_checkpoint_state`` l.5020, not a ZeRO engine; bf16_optimizer.py state_dict l.629-645: the
    rank's fp32 partition P x 4 and Adam's 2 x P x 4, FusedAdam's step a python int), and every dp rank writes
    ``bf16_zero_pp_rank_{r}_mp_rank_{stage}_optim_states.pt`` with its own (``_configure_checkpointing``
    l.1916-1921: the wrapper has a dp_process_group; ``_get_zero_ckpt_prefix`` bf16_), plus the recovery scripts
    (``_save_zero_checkpoint`` l.5565-5566). The module is in the layer files (PipelineEngine). The same 2-stage
    files at W = 2 are the real engine's (tests/engine/test_pipeline_engine.py)."""
    from advisor.ledger.checkpoint import checkpoint_files
    res = checkpoint_files(Plan(effective_config(_cfg(0)), _inventory(), Cluster(world_size=4, pipeline_parallel=2)),
                           tag="t")
    assert res.wrapper == "BF16_Optimizer"
    by = {f.path: f for f in res.files}
    for stage, n in ((0, N0), (1, N1)):
        p = n // 2
        ms = by[f"t/mp_rank_{stage:02d}_model_states.pt"]
        assert ms.bytes == 3 * p * 4 and ms.parts["module"] == 0
        for r in (0, 1):
            f = by[f"t/bf16_zero_pp_rank_{r}_mp_rank_{stage:02d}_optim_states.pt"]
            assert f.bytes == 3 * p * 4
            assert f.rank == stage * 2 + r  # global rank (stage x W_z + z)
    assert "zero_to_fp32.py" in by and "zero_to_torch.py" in by


def test_bf16_zero0_pipeline_movement_all_gathers_the_updated_partitions():
    """BF16_Optimizer's step ends with update_lp_params (bf16_optimizer.py l.431 -> l.593-603): each rank copies its
    fp32 partition into its 16-bit one and all_gather_dp_groups gathers the flat 16-bit group over the data-parallel
    group: (W-1)/W x N_pad x 2 bytes sent per rank after the step, which FP16_Optimizer (whole master) never
    sends. W = 4, 2 stages: dp 2, so 1/2 x N x 2 per rank of each stage; at dp 1 nothing."""
    from advisor.ledger.movement import movement_for
    for world, dp in ((4, 2), (2, 1)):
        plan = Plan(effective_config(_cfg(0)), _inventory(), Cluster(world_size=world, pipeline_parallel=2))
        got = {m.rank: m.bytes for m in movement_for(plan) if m.item == "param_allgather"}
        if dp == 1:
            assert not got
            continue
        assert got == {0: N0 // 2 * 2, 1: N0 // 2 * 2, 2: N1 // 2 * 2, 3: N1 // 2 * 2}
    # without a PipelineModule the same config is FP16_Optimizer on bf16: no all-gather
    flat = Plan(effective_config(_cfg(0)), _inventory(), Cluster(world_size=4))
    assert not [m for m in movement_for(flat) if m.item == "param_allgather"]


# ---- overlap_comm under a PipelineModule (issue 15) ------------------------------------------------------------
# engine.py _configure_zero_optimizer l.2663-2666: "if isinstance(self.module, PipelineModule): if overlap_comm:
# logger.warning('Pipeline parallelism does not support overlapped communication, will be disabled.');
# overlap_comm = False", before DeepSpeedZeroOptimizer is built (l.2670). stage_1_and_2.py l.3272-3278 appends the
# second ipg buffer only "if self.overlap_comm"; l.2239-2245 reduces on the default stream without it.
RBS = 1_000  # reduce_bucket_size, elements


def _z1_overlap(overlap: bool, dtype: str = "bf16") -> dict:
    c = _cfg(1, dtype)
    c["zero_optimization"].update(overlap_comm=overlap, contiguous_gradients=True, reduce_bucket_size=RBS)
    return c


def test_overlap_comm_is_off_in_the_plan_under_pipeline_parallelism():
    from advisor.config.effective import pipeline_effective
    ec = effective_config(_z1_overlap(True))
    assert ec.zero.overlap_comm is True
    assert pipeline_effective(ec, 2).zero.overlap_comm is False
    assert pipeline_effective(ec, 1) is ec
    piped = Plan(ec, _inventory(), Cluster(world_size=4, pipeline_parallel=2))
    assert piped.config.zero.overlap_comm is False
    assert piped.as_written.zero.overlap_comm is True  # lint judges the file as written
    assert ec.zero.overlap_comm is True                # the file's config is not changed in place
    assert Plan(ec, _inventory(), Cluster(world_size=4)).config.zero.overlap_comm is True
    # ZeRO-3 keeps it (no PipelineModule runs it: G001), ZeRO-0 does not read it either way
    z3 = effective_config({"zero_optimization": {"stage": 3, "overlap_comm": True}})
    assert pipeline_effective(z3, 2) is z3


@pytest.mark.parametrize("dtype,B", [("bf16", 2), ("fp16", 2), ("fp32", 4)])
def test_zero1_pipeline_plan_with_overlap_comm_has_one_ipg_bucket(dtype, B):
    """ZeRO-1 (DeepSpeedZeroOptimizer), 2 stages, W 4 (dp 2): with overlap_comm true the ledger is the one of
    overlap_comm false, entry by entry, and its ipg bucket is one buffer, RBS x B (stage_1_and_2.py l.3266-3270,
    B the model dtype's bytes), not RBS x B x 2; without a PipelineModule overlap_comm true does add the second."""
    inv = _inventory()
    pp = Cluster(world_size=4, pipeline_parallel=2)
    on = compute_ledger(Plan(effective_config(_z1_overlap(True, dtype)), inv, pp))
    off = compute_ledger(Plan(effective_config(_z1_overlap(False, dtype)), inv, pp))
    assert on.wrapper == off.wrapper == "DeepSpeedZeroOptimizer"
    for r in range(4):
        assert on.rank(r).entries == off.rank(r).entries
        ipg = [e.bytes for e in on.rank(r).entries if e.item == "ipg_bucket"]
        assert ipg == [RBS * B]
    flat = compute_ledger(Plan(effective_config(_z1_overlap(True, dtype)), inv, Cluster(world_size=2)))
    assert [e.bytes for e in flat.rank(0).entries if e.item == "ipg_bucket"] == [RBS * B * 2]


def test_zero1_pipeline_step_time_has_no_overlapped_gradient_reduce():
    """The gradient reduce-scatter of a ZeRO-1 PP plan written with overlap_comm true runs on the compute stream
    (stage_1_and_2.py l.2239-2245 with overlap_comm False), so its movement is not overlapped and the step time's
    term is exposed in full; the same plan without pipeline parallelism overlaps it with the backward."""
    from advisor.cluster.hardware import resolve_hardware
    from advisor.ledger import steptime as stm
    from advisor.ledger.movement import movement_for
    from advisor.plan import Workload
    hw = resolve_hardware("dgx-h100:8")
    inv = _inventory()
    for world, pp, overlapped in ((4, 2, False), (2, 1, True)):
        plan = Plan(effective_config(_z1_overlap(True)), inv, Cluster(world_size=world, pipeline_parallel=pp),
                    Workload(16, 1))
        rs = [m for m in movement_for(plan) if m.item == "grad_reduce_scatter"]
        assert rs and all(m.overlap is overlapped for m in rs)
        st = stm.step_time(plan, hw, seq_len=16)
        t = [x for x in st.terms if x.name.startswith("network:grad_reduce_scatter")]
        assert t and all(x.overlapped is overlapped for x in t)
        if not overlapped:
            assert all(x.exposed == pytest.approx(x.seconds) for x in t)


# the texts that describe the plan: estimate's assumptions.sharding and checkpoint's restart note. Under
# BF16_Optimizer at ZeRO-0 the fp32 master and moments are partitioned over the stage's data-parallel ranks
# (bf16_optimizer.py l.163-185, dp_process_group engine.py l.2626), and a load of the optimizer state raises
# KeyError in BF16_Optimizer._load_legacy_checkpoint (bf16_optimizer.py l.669-670: state_dict_list[dp_rank] on the
# model-states file's one state dict, engine.py l.4693-4696; the real engine: test_pipeline_engine.py). The old
# stage-0 words ("holds its full model states", "no conversion needed") are the FP16_Optimizer's and stay there.
FULL_SHARDING = "no ZeRO (every data-parallel rank holds its full model states)"
FULL_RESTART = ("stage 0: every rank holds the full state, so a restart at another world size loads the same file "
                "(no conversion needed)")


def _texts(cfg: dict, world: int, pp: int) -> tuple[str, list[str]]:
    from advisor.ledger.checkpoint import checkpoint_plan
    from advisor.views.estimate import estimate
    plan = Plan(effective_config(cfg), _inventory(), Cluster(world_size=world, pipeline_parallel=pp))
    return estimate(plan).assumptions()["sharding"], checkpoint_plan(plan).to_dict()["notes"]


def test_bf16_zero0_pipeline_texts_say_partitioned_and_not_resumable():
    """World 8, 2 stages: 4 data-parallel ranks per stage hold a quarter of the fp32 master and moments each."""
    sharding, notes = _texts(_cfg(0), 8, 2)
    assert sharding.startswith("2 pipeline stages") and FULL_SHARDING not in sharding
    assert "BF16_Optimizer" in sharding and "partitions the fp32 master and optimizer moments" in sharding
    assert "data-parallel group of 4 ranks" in sharding
    assert FULL_RESTART not in notes and not any("no conversion needed" in n for n in notes)
    restart = [n for n in notes if n.startswith("stage 0 with BF16_Optimizer")]
    assert len(restart) == 1
    assert "partitioned over 4 data-parallel rank(s)" in restart[0]
    assert "KeyError" in restart[0] and "_load_legacy_checkpoint" in restart[0] and "l.670" in restart[0]
    assert "load_module_only=True" in restart[0]


@pytest.mark.parametrize("cfg,world,pp", [
    (_cfg(0, "fp16"), 8, 2),  # FP16_Optimizer under a PipelineModule: whole master on every rank
    (_cfg(0, "fp16"), 8, 1),
    (_cfg(0), 8, 1),          # bf16 without a PipelineModule: FP16_Optimizer on bf16 (engine.py l.2321)
])
def test_fp16_optimizer_zero0_texts_unchanged(cfg, world, pp):
    plan = Plan(effective_config(cfg), _inventory(), Cluster(world_size=world, pipeline_parallel=pp))
    assert plan_optimizer(plan)[0] == "FP16_Optimizer"
    sharding, notes = _texts(cfg, world, pp)
    assert sharding == ("2 pipeline stages (layers by partition_uniform; embeddings on the first, the head on the "
                        "last); " + FULL_SHARDING if pp == 2 else "none (every rank holds full model states)")
    assert FULL_RESTART in notes and not any("BF16_Optimizer" in n for n in notes)


def _bf16_zero0_pp2_ga2():
    """(ledger, load assumption) of the 2-stage bf16 stage-0 plan at GA 2, b = 1, s = 8 the instant tests take."""
    from advisor.ledger.timeline import resolve_load
    from advisor.plan import Workload

    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2, "bf16": {"enabled": True},
           "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 0}}
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, _inventory(), Cluster(world_size=2, pipeline_parallel=2), Workload(seq_len=8)))
    return led, resolve_load(ec, zero_init=False)


def test_last_stage_kept_outputs_counted_once_in_backward():
    """The last stage keeps each used pipe buffer's output (runtime/pipe/engine.py _exec_backward_pass l.796-799
    returns before l.865-866 frees it); in a backward one of them is the micro-batch being run back, whose 16-bit
    logits the activation estimate's saved tensors hold, so a backward instant counts the kept outputs of the other
    buffers only; a forward instant all of them (l.751 replaces a buffer's output after the forward). By hand on a
    2-stage plan, GA 2 (2 pipe buffers: max(2, min(stages - stage, micro-batches)), schedule.py l.255-256),
    b = 1, s = 8, V = 96, bf16: one buffer's logits 1 x 8 x 96 x 2 = 1,536 B. The loss gradients (1,000,000 B here)
    make backward's start its worst moment (timeline._backward_activations), where no parameter gradient is made yet:
    the 16-bit gradients where this backward makes them (micro-step 1's: stage 0 V H + 2 (H + 2 F H) = 13,376, stage 1
    2 (H + 2 F H) + H + V H = 13,408 elements x 2 B) or, beside the kept ones, the new gradient torch adds into them
    (accumulate_grad_new, the largest n_p + s_p: V H = 3,072 x 2 B on both stages) are not live there."""
    from types import SimpleNamespace

    from advisor.ledger.timeline import role_timeline

    led, load = _bf16_zero0_pp2_ga2()
    acts = SimpleNamespace(saved_accelerator=10_000, loss_spike=0, loss_backward_spike=1_000_000, recompute_layer=0,
                           saved_host=0)
    tiers = ("accelerator",)
    block = H + 2 * F * H
    made = {0: (V * H + 2 * block) * 2, 1: (2 * block + H + V * H) * 2}
    assert made == {0: 26752, 1: 26816}
    for r, logits in ((0, 0), (1, 1536)):
        bare = role_timeline(led, led.rank(r), load, ga=2, rank=r)
        with_acts = role_timeline(led, led.rank(r), load, activations=acts, ga=2, rank=r)
        for i, x in enumerate(bare.instants):
            extra = with_acts.series(tiers)[i] - bare.series(tiers)[i]
            if x.phase == "forward":
                assert extra == 10_000, (r, x.key, extra)
            elif x.phase == "backward":
                grads = made[r] if x.key in ("backward:1", "steady:backward:1") else V * H * 2
                assert extra == 1_010_000 - logits - grads, (r, x.key, extra)


def test_activations_per_instant_follow_the_micro_batches_in_flight():
    """Under pipeline parallelism the estimate's saved activations are the most a stage holds (in_flight =
    min(stages - stage, GA) micro-batches); a timeline instant holds those in flight there (timeline.pipe_in_flight),
    by hand from the 1F1B order (runtime/pipe/schedule.py TrainSchedule: 2 stages, GA 2, stage 0 runs F1 F2 B1 B2,
    stage 1 F1 B1 F2 B2): stage 0 one after F1, two after F2 and at B1's start, one at B2's (B1 done), the steady
    iteration alike (its B1 an instant of its own, timeline.STEADY_FIRST_BACKWARD); stage 1 one throughout. The pipe buffers the first train_batch makes lazily
    (timeline.pipe_first_batch_share): stage 0's gradient buffer from the first backward on, its second input ids
    from F2 on."""
    from advisor.ledger.timeline import pipe_first_batch_share, pipe_in_flight, pipe_schedule, role_timeline
    from advisor.model.activations import ActivationEstimate

    assert pipe_schedule(2, 0, 2) == [("F", 1), ("F", 2), ("B", 1), ("B", 2)]
    assert pipe_schedule(2, 1, 2) == [("F", 1), ("B", 1), ("F", 2), ("B", 2)]
    keys = ("forward:1", "forward:2", "backward:1", "backward:2", "steady:forward", "steady:backward")
    assert [pipe_in_flight(2, 0, 2, k) for k in keys] == [1, 2, 2, 1, 2, 1]
    assert [pipe_in_flight(2, 1, 2, k) for k in keys] == [1] * 6
    assert [pipe_first_batch_share("pipe_grad_buf", 2, 0, 2, k) for k in keys] == [(0, 1), (0, 1), (1, 1), (1, 1),
                                                                                  None, None]
    assert [pipe_first_batch_share("pipe_inputs_kept", 2, 0, 2, k) for k in keys[:4]] == [(1, 2)] + [(2, 2)] * 3
    led, load = _bf16_zero0_pp2_ga2()
    # 2 micro-batches of 3,000 B each (stage 0 has no loss head)
    acts = {0: ActivationEstimate(per_layer=1_500, layers_on_rank=2, saved_accelerator=6_000, saved_host=0,
                                  recompute_layer=0, loss_head=0, loss_spike=0, in_flight=2)}
    bare = role_timeline(led, led.rank(0), load, ga=2, rank=0)
    with_acts = role_timeline(led, led.rank(0), load, activations=acts[0], ga=2, rank=0)
    extra = {x.key: with_acts.series(("accelerator",))[i] - bare.series(("accelerator",))[i]
             for i, x in enumerate(bare.instants) if x.phase in ("forward", "backward")}
    # a backward instant is its worst moment (timeline._backward_activations; s = 3,000 / 2 layers = 1,500 B):
    # B1 makes the stage's 26,752 B of 16-bit gradients (embedding 3,072 + 2 x 5,152 elements x 2 B): start 6,000;
    # layer 1 6,000 + 10,304; layer 0 4,500 + 20,608; end 3,000 (micro-batch 2's) + 26,752 = the worst -> 3,000 over
    # the bare instant's gradients. B2 adds into the kept ones (accumulate_grad_new, bare 3,072 x 2 = 6,144 B): start
    # 3,000; layer 1 3,000 + up_proj's 2,560 x 2 = 8,120, the worst; layer 0 1,500 + 5,120; end 0 + 6,144 -> 1,976
    assert extra == {"forward:1": 3000, "forward:2": 6000, "backward:1": 3000, "backward:2": 1976,
                     "steady:backward:1": 3000, "steady:forward": 6000, "steady:backward": 1976}, extra


def test_steady_iteration_peak_not_under_its_first_backward(tmp_path):
    """Under pipeline parallelism the steady iteration's backward of micro-step 1 (the most micro-batches in flight,
    1F1B, timeline.STEADY_FIRST_BACKWARD) holds at least what the first iteration's backward 1 holds, and the peak
    is at least that: every byte live at the first iteration's backward 1 is live again at the same schedule point
    of the steady iteration, beside what the first step made. Regression (review 2026-12-06): stage 0 of
    Llama-2-13B, ZeRO-1 bf16, 4 stages x 2, GA 4, micro-batch 2, seq 4,096 read its peak at the steady forward of
    micro-step 4, 96.55 GiB, under the first iteration's backward 1 (91.26 GiB) plus the step's state; the steady
    iteration had no instant at its first backward."""
    import json

    from tests.conftest import run_cli

    cfg = tmp_path / "p.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
                               "bf16": {"enabled": True}, "zero_optimization": {"stage": 1},
                               "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}))
    p = run_cli(["estimate", str(cfg), "--model", "llama-2-13b", "--world-size", "8", "--pipeline-parallel", "4",
                 "--seq-len", "4096", "--gpu-memory", "80GB", "--format", "json"])
    assert p.returncode in (0, 1), p.stderr
    roles = json.loads(p.stdout)["ranks"]
    assert len({tuple(r["stages"]) for r in roles}) == 4
    for role in roles:
        acc = {x["instant"]: x["accelerator"] for x in role["timeline"]}
        stage = role["stages"][0]
        if stage < 3:  # a stage before the last: more than one micro-batch in flight at its first backward
            assert acc["steady:backward:1"] > acc["steady:backward"], (stage, acc)
        assert acc["steady:backward:1"] >= acc["backward:1"], (stage, acc)
        assert role["peak"]["accelerator"]["bytes"] >= acc["steady:backward:1"], stage
    stage0 = next(r for r in roles if r["stages"][0] == 0)
    assert stage0["peak"]["accelerator"]["instant"] == "steady:backward:1"
