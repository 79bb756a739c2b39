"""A real DeepSpeed PipelineModule on CPU (gloo, torch.distributed.run, 2 stages): the census of
each stage's model states against the ledger's role for that stage.

The model (tests/engine/pipe_worker.py) is Llama-shaped: embedding, 4 blocks (norm weight, MLP
up/down), final norm and head, split by DeepSpeed's own ``partition_method="type:Block"``. The
inventory the ledger gets is written here by hand, in Hugging Face names, for the whole model;
the ledger must split it into the same stages (embedding on the first, head on the last) and
account ZeRO-1 over each stage's data-parallel group (1 rank here).
"""

from __future__ import annotations

import json
import os
import socket
import sys

import pytest

from tests.conftest import run_group
from tests.pipe_proxy import F, H, L, V, pipe_inventory

from advisor.config.effective import effective_config
from advisor.engine.measure import package_path
from advisor.ledger.state import Cluster, Plan, compute_ledger, fold_for_cpu, model_state_bytes
from advisor.model.inventory import Inventory

pytestmark = pytest.mark.engine

CFG = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
       "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1}}


def _inventory() -> Inventory:
    return pipe_inventory()


def _run_pipe(tmp_path, cfg: dict | None = None, track: bool = False, world: int = 2, build: str = "stage") -> dict:
    """One 2-stage run of pipe_worker.py in ``tmp_path`` on ``world`` ranks (``cfg``: a DeepSpeed config other
    than ``CFG``, then no checkpoint is saved; ``track``: the allocation tracker over two train_batch calls;
    ``build``: "whole" gives PipelineModule the modules of a model built whole instead of LayerSpecs):
    {rank: its JSON} (``track``: the worker's track{r}.json)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": package_path(), "PIPE_BUILD": build}
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pipe_worker.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(world),
           "--master_addr", "127.0.0.1", "--master_port", str(port), worker, str(tmp_path),
           str(V), str(H), str(F), str(L), "2"] + ([json.dumps(cfg or CFG)] if cfg or track else []) + (["1"] if track else [])
    p = run_group(cmd, 600, env=env)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    name = "track" if track else "rank"
    return {r: json.loads((tmp_path / f"{name}{r}.json").read_text()) for r in range(world)}


@pytest.fixture(scope="module")
def pipe_run(tmp_path_factory):
    """One 2-stage run of pipe_worker.py: (its output folder, {rank: its JSON})."""
    tmp_path = tmp_path_factory.mktemp("pipe")
    return tmp_path, _run_pipe(tmp_path)


def test_two_stage_pipeline_census_matches_the_ledger(pipe_run):
    _, got = pipe_run
    assert [got[r]["stage"] for r in (0, 1)] == [0, 1]
    assert got[0]["parts"] == [0, 3, 6]  # embedding + 2 blocks | 2 blocks + head

    led = compute_ledger(Plan(effective_config(CFG), _inventory(), Cluster(world_size=2, pipeline_parallel=2)))
    assert led.world_size == 2 and led.role_of(0) is not led.role_of(1)
    for r in (0, 1):
        want = fold_for_cpu(model_state_bytes(led.rank(r), ("persistent",)))
        census = got[r]["census"]
        for item in ("lp_params_flat", "fp32_master", "exp_avg", "exp_avg_sq"):
            assert census[item] == want[item], (r, item, census[item], want[item])
    # by hand: stage 0 = embedding + 2 x (norm + up + down); stage 1 = 2 blocks + norm + head
    block = H + 2 * F * H
    assert got[0]["census"]["lp_params_flat"]["unpinned"] == 4 * (V * H + 2 * block)
    assert got[1]["census"]["lp_params_flat"]["unpinned"] == 4 * (2 * block + H + V * H)


def test_pipeline_checkpoint_files_match_the_engine(pipe_run):
    """The files the real PipelineEngine wrote (names, and tensor bytes read back with torch.load)
    against advisor.ledger.checkpoint.checkpoint_files for the same plan: mp_rank_{stage}
    (PipelineParallelGrid.ds_model_rank), layer_XX per PipelineModule layer, ZeRO-1 optimizer
    partitions per stage."""
    import torch

    from advisor.ledger.checkpoint import checkpoint_files
    from tests.engine.test_checkpoint_engine import _tensor_bytes

    out, _ = pipe_run
    real = {os.path.relpath(os.path.join(d, f), out / "ckpt"): os.path.join(d, f)
            for d, _, fs in os.walk(out / "ckpt") for f in fs}
    want = checkpoint_files(Plan(effective_config(CFG), _inventory(), Cluster(world_size=2, pipeline_parallel=2)),
                            tag="t")
    listed = {f.path: f for f in want.files}
    assert set(real) == set(listed), (sorted(real), sorted(listed))
    # by hand (fp32, D = 4): layer_00 = embedding V x H, layer_01..04 = one block each, layer_05 = norm + head
    block = H + 2 * F * H
    hand = {"t/layer_00-model_states.pt": 4 * V * H, "t/layer_05-model_states.pt": 4 * (H + V * H),
            **{f"t/layer_0{i}-model_states.pt": 4 * block for i in range(1, 5)}}
    for path, f in listed.items():
        if not path.endswith(".pt"):
            continue
        storage, _ = _tensor_bytes(torch.load(real[path], map_location="cpu", weights_only=False))
        assert storage == f.bytes, (path, storage, f.bytes)
        if path in hand:
            assert f.bytes == hand[path]


BF16_Z0 = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2, "bf16": {"enabled": True},
           "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 0}}


def test_bf16_zero0_pipeline_takes_bf16_optimizer(tmp_path):
    """bf16 at ZeRO-0 on a PipelineModule: the real engine builds BF16_Optimizer with a bf16 gradient buffer
    (engine.py _do_optimizer_sanity_check l.2316-2320, _configure_bf16_optimizer grad_acc_dtype l.2626), not the
    FP16_Optimizer the same config builds without a PipelineModule; the census of its buffers (one train_batch,
    GA 2) equals the ledger's persistent entries on both stages, and the hand figures of
    tests/test_pipeline_wrapper.py (W = 2: dp 1 per stage, N_pad = N); the checkpoint files equal
    advisor.ledger.checkpoint's."""
    got = _run_pipe(tmp_path, BF16_Z0)
    led = compute_ledger(Plan(effective_config(BF16_Z0), _inventory(), Cluster(world_size=2, pipeline_parallel=2)))
    assert led.wrapper == "BF16_Optimizer"
    block = H + 2 * F * H
    for r, n in ((0, V * H + 2 * block), (1, 2 * block + H + V * H)):
        assert got[r]["wrapper"] == "BF16_Optimizer" and got[r]["grad_acc_dtype"] == "torch.bfloat16"
        census = got[r]["census"]
        want = fold_for_cpu(model_state_bytes(led.rank(r), ("persistent",)))
        for item in ("lp_params_flat", "fp32_master", "exp_avg", "exp_avg_sq", "fp32_grad_accum"):
            assert census[item] == want[item], (r, item, census[item], want[item])
        assert census["fp32_grad_accum"]["unpinned"] == n * 2 and census["fp32_master"]["unpinned"] == n * 4
    # the checkpoint: the model-states file holds BF16_Optimizer's state dict (not a ZeRO engine, engine.py
    # l.5020) and, the wrapper having a dp_process_group (l.1916-1921), each stage's dp rank writes a
    # bf16_zero_pp_rank_0_mp_rank_XX optim file with the same state dict, and rank 0 the recovery scripts
    import torch

    from advisor.ledger.checkpoint import checkpoint_files
    from tests.engine.test_checkpoint_engine import _tensor_bytes

    out = tmp_path / "ckpt"
    real = {os.path.relpath(os.path.join(d, f), out): os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs}
    want = checkpoint_files(Plan(effective_config(BF16_Z0), _inventory(), Cluster(world_size=2, pipeline_parallel=2)),
                            tag="t")
    listed = {f.path: f for f in want.files}
    assert set(real) == set(listed), (sorted(real), sorted(listed))
    for path, f in listed.items():
        if path.endswith(".pt"):
            storage, _ = _tensor_bytes(torch.load(real[path], map_location="cpu", weights_only=False))
            assert storage == f.bytes, (path, storage, f.bytes)
    # by hand, stage 0: fp32 partition N x 4 + Adam's 2 x N x 4 (FusedAdam's step is a python int)
    n0 = V * H + 2 * block
    assert listed["t/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"].bytes == 3 * n0 * 4
    # loading it back into the same engine (same world size) raises KeyError in BF16_Optimizer's legacy loader on
    # both stages (engine.py l.4693-4696 hands it the model-states file's one state dict, bf16_optimizer.py l.670
    # indexes it by dp rank), which the checkpoint plan's restart note says instead of "no conversion needed";
    # load_module_only=True (the note's way out: weights only, engine.py l.4670-4673) loads
    for r in (0, 1):
        loaded = json.loads((tmp_path / f"load{r}.json").read_text())
        assert loaded["full"] == {"error": "KeyError", "file": "bf16_optimizer.py",
                                  "function": "_load_legacy_checkpoint"}, (r, loaded)
        assert loaded["module_only"]["error"] is None, (r, loaded)
    from advisor.ledger.checkpoint import checkpoint_plan
    notes = checkpoint_plan(Plan(effective_config(BF16_Z0), _inventory(),
                                 Cluster(world_size=2, pipeline_parallel=2))).to_dict()["notes"]
    assert any("KeyError" in n and "_load_legacy_checkpoint" in n for n in notes)
    assert not any("no conversion needed" in n for n in notes)


Z1_BF16_OVERLAP = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2, "bf16": {"enabled": True},
                   "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
                   "zero_optimization": {"stage": 1, "overlap_comm": True, "contiguous_gradients": True,
                                         "reduce_bucket_size": 1000}}


def test_zero1_pipeline_runs_without_overlap_comm(tmp_path):
    """ZeRO-1 bf16 written with overlap_comm true on a PipelineModule: the real engine builds DeepSpeedZeroOptimizer
    with overlap_comm False (engine.py _configure_zero_optimizer l.2663-2666), which the plan says too
    (advisor.config.effective.pipeline_effective); the census of its model states equals the ledger's and the one
    of the same run written with overlap_comm false."""
    got = _run_pipe(tmp_path, Z1_BF16_OVERLAP)
    off = {**Z1_BF16_OVERLAP, "zero_optimization": {**Z1_BF16_OVERLAP["zero_optimization"], "overlap_comm": False}}
    (tmp_path / "off").mkdir()
    got_off = _run_pipe(tmp_path / "off", off)
    plan = Plan(effective_config(Z1_BF16_OVERLAP), _inventory(), Cluster(world_size=2, pipeline_parallel=2))
    assert plan.config.zero.overlap_comm is False and plan.as_written.zero.overlap_comm is True
    led = compute_ledger(plan)
    assert led.wrapper == "DeepSpeedZeroOptimizer"
    for r in (0, 1):
        assert got[r]["wrapper"] == "DeepSpeedZeroOptimizer" and got[r]["overlap_comm"] is False, got[r]
        assert got_off[r]["overlap_comm"] is False and got_off[r]["census"] == got[r]["census"]
        census = got[r]["census"]
        want = fold_for_cpu(model_state_bytes(led.rank(r), ("persistent",)))
        for item in ("lp_params_flat", "fp32_master", "exp_avg", "exp_avg_sq"):
            assert census[item] == want[item], (r, item, census[item], want[item])


def test_save_16bit_model_under_the_pipeline_engine_writes_no_model(tmp_path):
    """bf16 ZeRO-0, 2 stages, W = 2: the real PipelineEngine's ``save_16bit_model`` (engine.py l.5742 calls the
    overridden module_state_dict, runtime/pipe/engine.py l.1308-1325) raises AttributeError before any
    save_checkpoint (``_curr_ckpt_path`` is only ever set by save/load_checkpoint), AssertionError after one
    (save_checkpoint resets it to None, engine.py l.5391), and after a load_checkpoint writes a
    pytorch_model.bin on rank 0 that holds None; so the checkpoint plan lists no 16-bit model file (writes
    False, 0 bytes) and names the layer files, which hold the weights: by hand N x 2 bytes of bf16 over the six
    layer files (embedding, 4 blocks, norm + head) -- the file bytes read back with torch.load."""
    import torch

    from advisor.ledger.checkpoint import checkpoint_plan
    from tests.engine.test_checkpoint_engine import _tensor_bytes

    _run_pipe(tmp_path, BF16_Z0)
    for r in (0, 1):
        got = json.loads((tmp_path / f"s16_{r}.json").read_text())
        assert got["before_save"]["error"] == "AttributeError" and "_curr_ckpt_path" in got["before_save"]["message"]
        assert got["after_save"]["error"] == "AssertionError" and got["after_save"]["function"] == "module_state_dict"
        assert got["before_save"]["files"] == got["after_save"]["files"] == []
        assert got["after_load"]["error"] is None and got["after_load"]["returned"] is True
        assert got["after_load"]["files"] == ["pytorch_model.bin"]  # rank 0's (engine.py l.5749-5751)
    assert json.loads((tmp_path / "s16_0.json").read_text())["after_load"]["file_holds"] == "NoneType"

    cp = checkpoint_plan(Plan(effective_config(BF16_Z0), _inventory(), Cluster(world_size=2, pipeline_parallel=2)))
    assert cp.save16.writes is False and cp.save16.bytes == 0
    assert "layer_XX-model_states.pt" in cp.save16.note and "pipe/engine.py l.1308-1325" in cp.save16.note
    layers = [f for f in cp.files.files if "layer_" in f.path]
    n = V * H + L * (H + 2 * F * H) + H + V * H
    assert sum(f.bytes for f in layers) == n * 2
    real = sum(_tensor_bytes(torch.load(tmp_path / "ckpt" / "t" / os.path.basename(f.path), map_location="cpu",
                                        weights_only=False))[0] for f in layers)
    assert real == n * 2


#: The pipe worker's sequence length (pipe_worker.py PIPE_SEQ, default 8): the Workload the ledger is given.
SEQ = 8
#: Peak cells under pipeline parallelism (issue 15): 2 stages x 1 data-parallel rank, bf16, GA 2 (two micro-batches
#: through the 1F1B schedule), the allocation tracker over two train_batch calls. Measured before the pipe entries
#: (2026-12-06, ledger without state.pipeline_stage_entries): ZeRO-0 (BF16_Optimizer) stage 0 +660 B (+0.22%),
#: stage 1 +5,782 B (+1.96%: the last stage's kept outputs, module.py exec_func l.368, 3,072 B; their received
#: inputs and gradients, _exec_recv_activations l.1128 and engine.py backward l.3428, 2 x 1,024 B; pipe_recv_buf
#: 512 B); ZeRO-1 stage 0 +100,664 B (+32%) and stage 1 +105,910 B (+34%) at the boundary's reduce: the second
#: ipg buffer reduce_gradients(pipeline_parallel=True) appends (stage_1_and_2.py l.962-968, tracker site
#: reduce_gradients:966, 100,000 B) beside setup_buckets' (l.3266). With them: every stage and step within 0.1% (2 runs).
#: Probes at W = 4 (2 stages x DP 2, the same configs, 1 run each, not cells): ZeRO-1 ranks 0/1 +0.007%, ranks 2/3
#: +0.08% (339,990 vs 339,712 B at steady:reduce); ZeRO-0 ranks 0/1 +0.015%, ranks 2/3 +0.15% (193,626 vs 193,344 B);
#: what remains is the loss scalars and fwd_outputs (engine.py _exec_forward_pass l.757, add_to_total_loss l.772).
#: The same runs' save phase (engine.save_checkpoint after train_batch:2; 2026-12-06, 2 runs each): before
#: timeline.save_layer_clone the ledger counted the layer clone as a GPU-only host copy, so the CPU figure lacked it:
#: engine 198,232 / 203,926 B (ZeRO-1 stages 0 / 1) vs ledger 187,904 / 193,344 B (+5.5%, the site
#: checkpoint/utils.py:clone_tensors_for_torch_save:57, 10,304 B); with it ZeRO-1 +0.012% / +0.14%, ZeRO-0
#: +0.011% / +0.12% (save), and what is live after the save +0.013% / +0.14% (the step's residue above).
PIPE_PEAK_CELLS = [
    ("pp2_z0_bf16_ga2_w2", {**BF16_Z0}),
    ("pp2_z1_bf16_ga2_w2", {**BF16_Z0, "zero_optimization": {"stage": 1, "reduce_bucket_size": 50000,
                                                              "overlap_comm": False, "contiguous_gradients": True}}),
]

#: The instruction phases of each train_batch (pipe_worker.py splits the tracker's train_batch by the schedule's
#: instructions) that have timeline instants (measure.pipe_instruction_instants), by hand from TrainSchedule.steps
#: (runtime/pipe/schedule.py l.197-245) for 2 stages and 2 micro-batches: stage 0 runs F1 F2 B1 B2, stage 1 F1 B1
#: F2 B2, both then ReduceTiedGrads, ReduceGrads, OptimizerStep; the steady call's micro-batch 1 has no instant.
PIPE_INSTRUCTION_ROWS = ("train_batch:1/ForwardPass:1", "train_batch:1/ForwardPass:2", "train_batch:1/BackwardPass:1",
                         "train_batch:1/BackwardPass:2", "train_batch:1/ReduceGrads:1", "train_batch:1/OptimizerStep:1",
                         "train_batch:2/ForwardPass:2", "train_batch:2/BackwardPass:2", "train_batch:2/ReduceGrads:1",
                         "train_batch:2/OptimizerStep:1")
#: Instruction phases off by more than 1% (issue 15): cell -> {(rank, phase): engine - ledger bytes}, measured
#: 2026-12-06 (2 runs, the same bytes), the compared timeline WITH each stage's activations
#: (measure.pipeline_peak_parity: advisor.views.estimate.activations_for, the formulas of advisor.model.activations on
#: the proxy's meta, tests/pipe_proxy.py; the per-layer figure checked by hand and by torch's saved-tensor hooks in
#: tests/test_activations.py test_pipe_proxy_block_activations_by_hand). Before, the timeline had none, and every
#: forward and backward row was off (2026-12-06: stage 0 +5,392 B after micro-batch 1's forward, +10,640 B after
#: micro-batch 2's; stage 1 +4,180 / +6,804 B; backward +6,288 to +13,594 B) for three causes read from the tracker:
#: (a) the activations of the micro-batches in flight (site runtime/pipe/module.py exec_func l.368), now the estimate's,
#: counted per instant (timeline.pipe_in_flight: forwards run minus backwards done in DeepSpeed's TrainSchedule order,
#: timeline.pipe_schedule; the estimate's in_flight, min(stages - stage, GA), only where that many are in flight), with
#: what the PipelineEngine keeps of each (activations.py pipe_kept: a non-last stage's output, engine.py l.751-866;
#: the first stage's clone of the input ids, l.705); (b) stage 0's 1F1B warm-up, timeline.pipe_warmup_forwards;
#: (c) the pipe buffers counted from the first train_batch on (timeline.PIPE_TRAIN_BATCH_ITEMS), made during it micro-
#: batch by micro-batch: now timeline.pipe_first_batch_share (stage 0's gradient buffer at the first RecvGrad,
#: engine.py _allocate_zeros l.1274, 512 B, absent at its forwards 1 and 2; its second input ids at LoadMicroBatch
#: l.898; stage 1's kept logits, received inputs and their gradients). With them every forward row is within 1%:
#: stage 0 +784 B (+0.40% to +0.92%: the last block's ReLU input, D sbf = 1,280 B, live beside what its forward has
#: made before its output, 512 B, exists; no formula counts a forward's in-layer transient), stage 1 +32 / +36 B and
#: in the steady call +44 B (it was -2,004 B, -0.60% to -0.86%, until pipe_first_batch_share took the forward
#: instant of the last stage as its loss, where l.751 has already dropped the reused buffer's old logits, 1,536 B,
#: and its old input's gradient, 512 B); so is stage 1's backward of micro-batch 2 at ZeRO-0 (-32 B) and stage 0's
#: at ZeRO-1 (+272 / +280 B).
#: (d) and (e) were the timeline's backward instant itself, with or without pipeline parallelism: it held every
#: saved tensor of the micro-batch run back (and on the last stage the loss's backward spike, 8 sbV) beside every
#: gradient that backward makes, an upper bound of a backward that frees the one as it makes the other:
#: (d) backward 1, -4,080 B on stage 0 (its peak is the backward's end: the stage's 26,752 B of bf16 gradients made,
#: micro-batch 1's saved tensors freed, micro-batch 2's 5,184 B and micro-batch 1's kept output, 512 B until l.866,
#: held) and -11,616 / -11,620 B on stage 1; (e) stage 1's backward of micro-batch 2, -6,172 / -6,176 B (steady
#: -6,676 to -6,684 B): accumulate_grad_new and the loss spike at one instant, at two in the engine.
#: Now modeled (timeline._backward_activations, MADE_GRAD_ITEMS, backward_grad_layout): the backward instant is the
#: worst of its start (saved + loss spike, no parameter gradient made yet), each layer's backward (layer L-1 with the
#: head's gradients and the loss head's saved tensors; below it those freed, the run-back micro-batch's layers above
#: freed, the gradients of the head and the layers run back made) and its end (every gradient, the run-back
#: micro-batch's saved tensors freed but its kept output); accumulate_grad_new the largest new gradient of the
#: moment's nodes. Measured 2026-12-07 (2 runs, the same bytes; engine - ledger, backward 1 / micro-batch 2 /
#: steady micro-batch 2):
#: fp16 stage 0 +528 / +1,296 / +1,300 B, stage 1 +988 / -32 / -540 B; bf16 stage 0 +528 / +1,296 / +1,304 B
#: (+0.38% / +0.90% / +0.52%), stage 1 +988 / -32 / -536 B; ZeRO-1 stage 0 +528 / +1,296 / +1,304 B, stage 1 +992 /
#: -28 / -532 B. Stage 1's backward 1 peaks at layer 0's backward (the head's saved tensors freed); what the engine
#: holds above the ledger in a layer moment is the layer's own backward transients (the gradient of its ReLU input,
#: D sbF = 1,280 B: no formula counts a backward's in-layer transient), which the sum had hidden.
UNMATCHED_PIPE_ISSUE15: dict[str, dict] = {
    "pp2_z0_bf16_ga2_w2": {},
    # FP16_Optimizer (stage 0 fp16), 2026-12-06, 2 runs, the same bytes: the bf16 cell's causes. Two ledger causes
    # were found on this cell before and are modeled: its all-reduce bucket's flat copy (state allreduce_bucket_flat,
    # life in_backward) was counted at the backward instants, but the PipelineEngine all-reduces in ReduceGrads
    # (timeline.PIPE_REDUCE_ONLY_ITEMS): backward:1 was -20,464 B (stage 0), -26,540 B (stage 1), backward:2
    # -15,152 B; micro-step 1's fp16 param.grad lives into micro-step 2's forward (no zero_grad before the
    # boundary; state._stage0 lp_grads_accumulated): stage 1's forward:2 was +33,620 B, steady:forward +34,704 B
    "pp2_z0_fp16_ga2_w2": {},
    "pp2_z1_bf16_ga2_w2": {},
}
#: The instruction phase where each stage's step peaks on the engine (the whole train_batch's high-water mark):
#: ZeRO-1 at the boundary's reduce (ReduceGrads: reduce_gradients' second ipg buffer beside setup_buckets', l.962-968),
#: ZeRO-0 (BF16_Optimizer) in the optimizer step (the fp32 master's update beside the bf16 gradients); the ledger's
#: largest instant of the iteration must be one that instruction spans.
PIPE_PEAK_INSTRUCTION = {"pp2_z0_bf16_ga2_w2": "OptimizerStep:1", "pp2_z0_fp16_ga2_w2": "OptimizerStep:1",
                         "pp2_z1_bf16_ga2_w2": "ReduceGrads:1"}


def _assert_parity_per_instruction(cid: str, cfg: dict, got: dict) -> list:
    """pipeline_peak_parity's rows of a 2-stage DP-1 run (with the build rows): every phase of both ranks within
    1% but the instruction phases UNMATCHED_PIPE_ISSUE15 lists for ``cid``, which must stay off by what was
    measured (within a quarter of the 1% band); each train_batch's engine peak in PIPE_PEAK_INSTRUCTION[cid] and
    the ledger's largest instant of that iteration one of the instants it spans."""
    from advisor.engine.measure import pipeline_peak_parity

    rows = pipeline_peak_parity(cfg, _inventory(), 2, 2, SEQ, got, build_rows=True)
    assert {(r["rank"], r["phase"]) for r in rows} == {
        (r, ph) for r in (0, 1)
        for ph in ("load", "initialize", "train_batch:1", "train_batch:2", "save", "save:after") + PIPE_INSTRUCTION_ROWS}
    report = "\n".join(f"r{r['rank']} {r['phase']}: engine {r['measured']} ledger {r['ledger']} ({r['ledger_instant']}) "
                       f"{r['measured'] - r['ledger']:+} B {r['rel_diff']:+.3%}; unattributed {r['unattributed'][:6]}"
                       for r in rows)
    print(report)
    off = UNMATCHED_PIPE_ISSUE15[cid]
    fixed = [k for k in off if all(abs(r["rel_diff"]) <= 0.01 for r in rows if (r["rank"], r["phase"]) == k)]
    assert not fixed, f"now within 1%, take off UNMATCHED_PIPE_ISSUE15[{cid!r}]: {fixed}"
    # a listed phase still off by what was measured (within a quarter of the 1% band), so a change shows
    moved = [(k, r["measured"] - r["ledger"]) for r in rows for k in [(r["rank"], r["phase"])]
             if k in off and abs(r["measured"] - r["ledger"] - off[k]) > 0.0025 * r["ledger"]]
    assert not moved, (moved, report)
    bad = [r for r in rows if (r["rank"], r["phase"]) not in off and abs(r["rel_diff"]) > 0.01]
    assert not bad, report
    # the instant of each step's peak: the engine's peak instruction, and the ledger's largest instant of that
    # iteration is one of the instants it spans
    for r in rows:
        if r["phase"] in ("train_batch:1", "train_batch:2"):
            assert r["engine_peak_phase"] == PIPE_PEAK_INSTRUCTION[cid] and r["same_instant"], r
    return rows


def _assert_initialize_peak(rows: list, got: dict, zeros_made: bool) -> None:
    """The initialize rows of a 2-stage DP-1 run (issue 15): with ``zeros_made`` the high-water mark is the end + a
    zeroed fp32 buffer of the stage's parameters (by hand: stage 0 = embedding + 2 blocks, stage 1 = 2 blocks + norm
    + head, x 4 B), compared with the timeline's initialize:optimizer_states; else the end, compared with initialize."""
    for r in (0, 1):
        ini = next(x for x in rows if x["rank"] == r and x["phase"] == "initialize")
        end = next(p for p in got[r]["phases"] if p["phase"] == "initialize")["end"]
        if zeros_made:
            zeros = {0: (V * H + 2 * (H + 2 * F * H)) * 4, 1: (2 * (H + 2 * F * H) + H + V * H) * 4}[got[r]["stage"]]
            assert ini["ledger_instant"] == "initialize:optimizer_states", ini
            assert abs(ini["measured"] - end - zeros) <= 64, (ini, end, zeros)
        else:
            assert ini["ledger_instant"] == "initialize" and abs(ini["measured"] - end) <= 64, (ini, end)


#: Stage 0 fp16 under a PipelineModule (issue 15): FP16_Optimizer (engine.py l.2321 -> _configure_fp16_optimizer;
#: only bf16 accumulating in bf16 switches to BF16_Optimizer there). Measured 2026-12-06 (2 runs): load, initialize
#: (its high-water mark, the end + the stage's zeroed fp32 flat gradient of the warm-up step, fused_optimizer.py
#: l.127), both train_batch calls and the save within 0.15% on both stages. Per instruction (2 runs, the same bytes):
#: the reduce and the step within 0.12%, the forward passes within 1% with the activations, the backward passes off by
#: the bf16 cell's residuals (UNMATCHED_PIPE_ISSUE15, where the two ledger causes found on this cell, now modeled, are
#: described).
FP16_Z0_CELL = ("pp2_z0_fp16_ga2_w2", {**{k: v for k, v in BF16_Z0.items() if k != "bf16"}, "fp16": {"enabled": True}})


def test_pipeline_fp16_optimizer_initialize_peak(tmp_path):
    """Stage 0's FP16_Optimizer under pipeline parallelism: initialize's high-water mark is its end + the stage's
    zeroed fp32 gradient (timeline.fp16_optimizer_init_transients over the rank's stage), and the whole steps, the
    load and the save match the ledger within 1% on both stages; per instruction as the peak cells
    (_assert_parity_per_instruction: the step's peak in OptimizerStep, the ledger's there too)."""
    cid, cfg = FP16_Z0_CELL
    got = _run_pipe(tmp_path, cfg, track=True)
    assert [got[r]["stage"] for r in (0, 1)] == [0, 1]
    rows = _assert_parity_per_instruction(cid, cfg, got)
    _assert_initialize_peak(rows, got, True)


#: Stage 0 fp16 with torch's AdamW (torch_adam) under a PipelineModule: FP16_UnfusedOptimizer over each stage's
#: parameters (engine.py _configure_fp16_optimizer: not FusedAdam). Measured 2026-12-06 (2 runs + 1 probe): initialize's
#: high-water mark 298,268 / 298,912 B = the ledger's initialize:optimizer_states on stage 0 / 1 (the end + the stage's
#: warm-up zeros and step, timeline.unfused_optimizer_init_transients over the rank's stage), load, both train_batch
#: calls and the save within 0.14%. Not per instruction: the forward / backward residuals of the other cells' lists
#: (UNMATCHED_PIPE_ISSUE15) are not measured for this one.
UNFUSED_Z0_CFG = {**FP16_Z0_CELL[1], "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}


def test_pipeline_unfused_optimizer_initialize_peak(tmp_path):
    """Stage 0's FP16_UnfusedOptimizer under pipeline parallelism: initialize's high-water mark is its end + the
    stage's warm-up step (unfused_optimizer.py initialize_optimizer_states l.412-433), by hand: the stage's n
    trainable elements x (2 B zeroed fp16 gradient + 4 B zeroed fp32 gradient) + torch's single-tensor AdamW
    temporaries on this CPU, max_i (n_(i-1) + 2 n_i) x 4 B (torch/optim/adam.py l.544), a down_proj (H x F) after an
    up_proj (F x H) on both stages; and the whole phases match the ledger within 1% on both stages."""
    from advisor.engine.measure import pipeline_peak_parity

    got = _run_pipe(tmp_path, UNFUSED_Z0_CFG, track=True)
    assert [got[r]["stage"] for r in (0, 1)] == [0, 1]
    rows = pipeline_peak_parity(UNFUSED_Z0_CFG, _inventory(), 2, 2, SEQ, got, build_rows=True)
    whole = [r for r in rows if r["phase"] in ("load", "initialize", "train_batch:1", "train_batch:2", "save",
                                               "save:after")]
    assert len(whole) == 12 and all(abs(r["rel_diff"]) <= 0.01 for r in whole), whole
    block = H + 2 * F * H
    n = {0: V * H + 2 * block, 1: 2 * block + H + V * H}
    temps = (F * H + 2 * F * H) * 4
    for r in (0, 1):
        ini = next(x for x in rows if x["rank"] == r and x["phase"] == "initialize")
        end = next(p for p in got[r]["phases"] if p["phase"] == "initialize")["end"]
        assert ini["ledger_instant"] == "initialize:optimizer_states", ini
        assert abs(ini["measured"] - end - (n[got[r]["stage"]] * (2 + 4) + temps)) <= 64, (ini, end, n, temps)


@pytest.mark.parametrize("cell", PIPE_PEAK_CELLS, ids=[c[0] for c in PIPE_PEAK_CELLS])
def test_pipeline_step_peak_matches_the_ledger(tmp_path, cell):
    """The step's peak per stage on the real PipelineEngine (the worker's StorageTracker over each of two
    train_batch calls, every storage created and freed) against the ledger timeline's largest instant of the
    same iteration (advisor.engine.measure.pipeline_peak_parity), within 1% on both stages, and the instant of
    that peak: the worker splits each train_batch by the pipe schedule's instructions, the engine's peak is in
    the instruction PIPE_PEAK_INSTRUCTION names and the ledger's largest instant is one that instruction spans.
    Per instruction (the timeline's instants of each forward, backward, the boundary's reduce and the optimizer
    step: measure.pipe_instruction_instants, the timeline with each stage's activations of the micro-batches in
    flight at the instant) the reduce, the step and the forward passes match within 1%; the backward passes listed
    in UNMATCHED_PIPE_ISSUE15 with their measured residuals and causes (the timeline's backward instant holds the
    run-back micro-batch's saved tensors beside all the gradients it makes), and the test fails when one of them
    moves by more than a quarter of the 1% band or comes within 1%. Stage 0's 1F1B warm-up (micro-batch 2's forward before
    micro-batch 1's backward, timeline.pipe_warmup_forwards) is modeled: by hand its forward:2 and steady:forward
    hold what its forward:1 and the save's rest hold, no gradient of micro-step 1. On this tiny model the step's peak is the boundary's reduce
    (ZeRO-1) or the optimizer step (ZeRO-0), so the step's row proves the ZeRO entries under a PipelineModule and
    the pipe buffers kept through the step; the activations of the micro-batches in flight are proven by the
    forward rows."""
    from advisor.engine.measure import pipeline_peak_parity
    from advisor.ledger.state import pipeline_stage_entries

    cid, cfg = cell
    got = _run_pipe(tmp_path, cfg, track=True)
    assert [got[r]["stage"] for r in (0, 1)] == [0, 1]
    # TrainSchedule.num_pipe_buffers = max(2, min(stages - stage_id, micro_batches)) (schedule.py l.255-256)
    assert [got[r]["num_pipe_buffers"] for r in (0, 1)] == [2, 2]
    rows = _assert_parity_per_instruction(cid, cfg, got)
    # the pipe entries by hand: S = b x s x h x D = 1 x 8 x 32 x 2 = 512 B; 2 pipe buffers used (GA 2)
    S = 1 * SEQ * H * 2
    from advisor.config.effective import effective_config as _ec
    from advisor.plan import Workload
    ec = _ec(cfg)
    want = {0: {"pipe_grad_buf": S, "pipe_inputs_kept": 2 * SEQ * 8},
            1: {"pipe_recv_buf": S, "pipe_outputs_kept": 2 * SEQ * V * 2, "pipe_inputs_grads_kept": 2 * 2 * S}}
    wrapper = "DeepSpeedZeroOptimizer" if ec.zero.stage == 1 else "BF16_Optimizer"
    for s in (0, 1):
        ents = {e.item: e.bytes for e in pipeline_stage_entries(ec, _inventory().meta, Workload(seq_len=SEQ), s, 2, 2,
                                                                wrapper)}
        if ec.zero.stage == 1:
            want[s]["ipg_bucket_pipeline"] = 50000 * 2  # reduce_bucket_size x bf16 (stage_1_and_2.py l.964-967)
        assert ents == want[s], (s, ents)
    # initialize at its high-water mark (issue 15): ZeRO-1's initialize_optimizer_states makes the stage's zeroed
    # fp32 gradient partition (stage_1_and_2.py l.937) beside what initialize leaves, by hand the stage's
    # parameters x 4 B at DP 1 (P = n_pad, 2-element aligned: 13,376 / 13,408 elements); BF16_Optimizer (stage 0)
    # keeps every buffer it makes, so the end is the peak (timeline.init_end_is_peak)
    _assert_initialize_peak(rows, got, ec.zero.stage == 1)
    if ec.zero.stage == 1:
        # the engine's own record of that second buffer, live at the step's peak on both stages
        for r in rows:
            if r["phase"] in ("train_batch:1", "train_batch:2", "train_batch:1/ReduceGrads:1",
                              "train_batch:2/ReduceGrads:1"):
                sites = {u["site"].rsplit(":", 1)[0]: u["bytes"] for u in r["unattributed"]}
                assert sites.get("deepspeed/runtime/zero/stage_1_and_2.py:reduce_gradients") == 100000, r
    # the save (engine.save_checkpoint after the second train_batch): each stage's dp rank 0 clones one layer's
    # state dict at a time (runtime/pipe/module.py save_state_dict l.607-642), on the CPU too (checkpoint/utils.py
    # l.53-55: same device -> clone()), so the save's peak is what is live after it + the largest layer file,
    # by hand a Block's (H + 2 x F x H) x 2 B = 10,304 B on both stages (stage 1's norm + head: (H + V x H) x 2 =
    # 6,208 B), the tracker's clone site's bytes; the ledger's timeline.save_layer_clone entry says the same
    clone = (H + 2 * F * H) * 2
    for r in (0, 1):
        peak, after = (next(x for x in rows if x["rank"] == r and x["phase"] == ph) for ph in ("save", "save:after"))
        sites = {u["site"].rsplit(":", 1)[0]: u["bytes"] for u in peak["unattributed"]}
        assert sites.get("deepspeed/checkpoint/utils.py:clone_tensors_for_torch_save") == clone, peak
        assert peak["ledger_instant"] == "save:model" and peak["ledger"] - after["ledger"] == clone, (peak, after)
        # torch.save's host copies of accelerator storages (save_optim_file_staging) are not made on the CPU
        assert peak["gpu_only"] == 0 and after["gpu_only"] == 0


#: Load cells under pipeline parallelism (issue 15): the same tracker's ``load`` phase, opened before
#: ``PipelineModule(layers, ...)`` and closed before ``deepspeed.initialize`` (pipe_worker.py), i.e. the model's
#: construction from LayerSpecs. The worker builds in torch's default dtype (fp32) under either config (bf16 is
#: applied by initialize's cast), so both cells' load is the stage's parameters x 4 B.
#: Measured 2026-12-06 (both cells): stage 0 53,504 B, stage 1 53,632 B, engine = ledger to the byte; the whole
#: model the ledger charged every rank before is 107,136 B (+100% / +99.8%).
PIPE_LOAD_CELLS = [("pp2_load_z1_fp32_w2", CFG), ("pp2_load_z0_bf16_w2", {**BF16_Z0})]


@pytest.mark.parametrize("cell", PIPE_LOAD_CELLS, ids=[c[0] for c in PIPE_LOAD_CELLS])
def test_pipeline_load_builds_only_the_stage(tmp_path, cell):
    """PipelineModule._build calls LayerSpec.build only for the stage's layers (runtime/pipe/module.py
    l.235-276, specs[_local_start:_local_stop]): the engine's high-water mark of live bytes while the
    PipelineModule is built is the stage's parameters, and the ledger's load instant (timeline.load_entries,
    advisor.ledger.timeline.PIPELINE_STAGE_LOAD) says the same within 1%, each stage below the whole model
    (which the ledger charged every rank before)."""
    from advisor.engine.measure import CPU_ONLY_SITES
    from advisor.ledger.timeline import resolve_load, role_timeline

    cid, cfg = cell
    got = _run_pipe(tmp_path, cfg, track=True)
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, _inventory(), Cluster(world_size=2, pipeline_parallel=2)))
    whole = _inventory().numel * 4
    # by hand: stage 0 = embedding + 2 blocks, stage 1 = 2 blocks + norm + head (type:Block splits 4 blocks 2/2)
    blk = H + 2 * F * H
    by_hand = {0: (V * H + 2 * blk) * 4, 1: (2 * blk + H + V * H) * 4}
    for r in (0, 1):
        ph = next(p for p in got[r]["phases"] if p["phase"] == "load")
        measured = ph.get("peak_excl_cpu_only", ph["peak"])
        tl = role_timeline(led, led.rank(r), resolve_load(ec, zero_init=False), ga=2, rank=r)
        i = next(k for k, x in enumerate(tl.instants) if x.key == "load")
        ledger = tl.series(("accelerator", "host_pinned", "host_pageable"))[i]
        stage = got[r]["stage"]
        assert ledger == by_hand[stage] < whole, (r, ledger, by_hand, whole)
        assert abs(measured - ledger) <= 0.01 * ledger, (
            f"r{r} stage {stage}: engine {measured} B, ledger {ledger} B, whole model {whole} B; unattributed "
            f"{[u for u in ph['unattributed'] if not u['site'].startswith(CPU_ONLY_SITES)][:6]}")


#: checkpoint.parallel_write.pipeline_stage on the ZeRO-1 peak cell's config, 2 stages x 2 data-parallel ranks (W 4).
PW_CFG = {**dict(PIPE_PEAK_CELLS)["pp2_z1_bf16_ga2_w2"], "checkpoint": {"parallel_write": {"pipeline_stage": True}}}


def test_pipeline_parallel_write_spreads_the_layer_files(tmp_path):
    """Cell pp2_z1_bf16_pw_w4: with ``checkpoint.parallel_write.pipeline_stage`` the real PipelineModule's
    save_state_dict spreads each stage's layers over its data-parallel ranks (runtime/pipe/module.py l.618-621:
    ``ds_utils.partition_uniform(num_layers, dp_size)``; the PipelineEngine sets the flag from the config,
    runtime/pipe/engine.py l.222), so every rank clones the layers it writes, not only data-parallel rank 0.

    By hand: each stage holds 3 layers (stage 0: embedding + 2 blocks, stage 1: 2 blocks + head);
    partition_uniform(3, 2) = [0, 2, 3] (runtime/utils.py l.606-624: the first 3 mod 2 ranks get one more), so
    dp rank 0 writes local layers 0-1 and dp rank 1 local layer 2: layer_00, 01 by rank 0, layer_02 by rank 1,
    layer_03, 04 by rank 2, layer_05 by rank 3 (global rank = stage x 2 + dp rank). The save's peak on each rank
    is what is live after it + the largest layer it clones (bf16): a Block's (H + 2 F H) x 2 = 10,304 B on ranks
    0-2, the norm + head's (H + V H) x 2 = 6,208 B on rank 3 (with the flag off ranks 1 and 3 clone nothing:
    the ledger without it was 9.6% / 5.7% under them). Every phase of every rank within 1%.
    Measured 2026-12-06 (2 runs): save +0.020% (ranks 0, 1), +0.23% (ranks 2, 3), after the save +0.022% / +0.25%,
    train_batch within 0.09% (the step's loss scalars and fwd_outputs, as in the W 2 cells)."""
    from advisor.engine.measure import pipeline_peak_parity
    from advisor.ledger.checkpoint import checkpoint_files

    got = _run_pipe(tmp_path, PW_CFG, track=True, world=4)
    assert [got[r]["stage"] for r in range(4)] == [0, 0, 1, 1]
    # the whole steps and the save (the instruction phases' residuals are the W 2 cells', UNMATCHED_PIPE_ISSUE15)
    rows = [r for r in pipeline_peak_parity(PW_CFG, _inventory(), 4, 2, SEQ, got) if "/" not in r["phase"]]
    assert {(r["rank"], r["phase"]) for r in rows} == {(r, ph) for r in range(4)
                                                       for ph in ("train_batch:1", "train_batch:2", "save", "save:after")}
    bad = [r for r in rows if abs(r["rel_diff"]) > 0.01]
    assert not bad, "\n".join(f"r{r['rank']} {r['phase']}: engine {r['measured']} ledger {r['ledger']} "
                               f"({r['ledger_instant']}); unattributed {r['unattributed'][:6]}" for r in bad)
    block, head = (H + 2 * F * H) * 2, (H + V * H) * 2
    clone = {0: block, 1: block, 2: block, 3: head}
    for r in range(4):
        peak, after = (next(x for x in rows if x["rank"] == r and x["phase"] == ph) for ph in ("save", "save:after"))
        sites = {u["site"].rsplit(":", 1)[0]: u["bytes"] for u in peak["unattributed"]}
        assert sites.get("deepspeed/checkpoint/utils.py:clone_tensors_for_torch_save") == clone[r], (r, peak)
        assert peak["ledger"] - after["ledger"] == clone[r], (r, peak, after)
    # advisor checkpoint's writers of the layer files, by hand, and the files the engine wrote
    listed = checkpoint_files(Plan(effective_config(PW_CFG), _inventory(), Cluster(world_size=4, pipeline_parallel=2)),
                              tag="t")
    writers = {f.name: f.rank for f in listed.files if f.name.startswith("layer_")}
    assert writers == {"layer_00-model_states.pt": 0, "layer_01-model_states.pt": 0, "layer_02-model_states.pt": 1,
                       "layer_03-model_states.pt": 2, "layer_04-model_states.pt": 2, "layer_05-model_states.pt": 3}
    assert set(writers) == {f for f in os.listdir(tmp_path / "save" / "t") if f.startswith("layer_")}


#: Cell pp2_whole_z1_bf16_w2 (issue 15, --pipeline-build whole): the ZeRO-1 peak cell's config with the worker's
#: PIPE_BUILD=whole, the model built whole on every rank (fp32, torch's default dtype) and its modules given to
#: PipelineModule. Measured 2026-12-06 (2 runs, identical): load 107,136 B on both ranks = the ledger to the byte
#: (LayerSpecs' 53,504 / 53,632 B would be -50%); after initialize +16 B (+0.012%); train_batch:1/2 +0.004-0.06%;
#: save / after the save +0.01% (rank 0), +0.11% (rank 1: the step's loss scalars and fwd_outputs, as in the
#: LayerSpecs cells). The kept fp32 layers are the tracker's unclaimed sites pipe_worker.py __init__ (the
#: modules' parameters). Before timeline.PIPE_TRAIN_BATCH_ITEMS the ledger counted the pipe buffers at the
#: initialize instant, which the PipelineEngine makes in the first train_batch: -4.0% (rank 1) / -0.46% there.
WHOLE_CELL = ("pp2_whole_z1_bf16_w2", dict(PIPE_PEAK_CELLS)["pp2_z1_bf16_ga2_w2"])


def test_pipeline_whole_build_keeps_the_other_stages(tmp_path):
    """A model built whole and then given to PipelineModule as modules (``--pipeline-build whole``): PipelineModule
    keeps every layer in ``self._layer_specs = list(layers)`` (runtime/pipe/module.py l.188) and registers only
    the stage's (_build l.235-276, nn.Module layers added as they are l.251-255), so the load is the whole model
    on every rank and the other stages' layers stay referenced, in fp32, beside the stage's bf16 module, ZeRO-1's
    states and the pipe buffers, through initialize, both train_batch calls and the save.

    By hand (fp32 build, 4 B): the load is the whole model, (V H + L (H + 2 F H) + H + V H) x 4 = 107,136 B on
    both ranks (LayerSpecs: 53,504 / 53,632 B); the other stage's layers kept after it are stage 1's
    (2 (H + 2 F H) + H + V H) x 4 = 53,632 B on rank 0 and stage 0's (V H + 2 (H + 2 F H)) x 4 = 53,504 B on
    rank 1: the ledger's ``pipe_offstage_layers`` (life ``after_load``). Every compared phase of both ranks
    (load's peak, what is live after initialize, train_batch:1/2, save, after the save) within 1% of the ledger
    with the assumption; with the default assumption (LayerSpecs) every phase after the load is short by the
    kept layers."""
    from advisor.engine.measure import pipeline_peak_parity
    from advisor.ledger.timeline import resolve_load

    cid, cfg = WHOLE_CELL
    got = _run_pipe(tmp_path, cfg, track=True, build="whole")
    assert [got[r]["stage"] for r in (0, 1)] == [0, 1]
    blk = H + 2 * F * H
    whole = (V * H + L * blk + H + V * H) * 4
    off = {0: (2 * blk + H + V * H) * 4, 1: (V * H + 2 * blk) * 4}
    assert whole == 107_136 and off == {0: 53_632, 1: 53_504}
    ec = effective_config(cfg)
    load = resolve_load(ec, zero_init=False, pipeline_build="whole")
    led = compute_ledger(Plan(ec, _inventory(), Cluster(world_size=2, pipeline_parallel=2)))
    from advisor.ledger.timeline import load_entries
    for r in (0, 1):
        ents = {e.item: e for e in load_entries(ec, led, load, r)}
        assert ents["load_model_copy"].bytes == whole and ents["pipe_offstage_layers"].bytes == off[r], ents
    # the whole steps, the build and the save (the instruction phases' residuals: the W 2 cells', UNMATCHED_PIPE_ISSUE15)
    rows = [r for r in pipeline_peak_parity(cfg, _inventory(), 2, 2, SEQ, got, load=load, build_rows=True)
            if "/" not in r["phase"]]
    assert {(r["rank"], r["phase"]) for r in rows} == {
        (r, ph) for r in (0, 1) for ph in ("load", "initialize", "train_batch:1", "train_batch:2", "save", "save:after")}
    report = "\n".join(f"r{r['rank']} {r['phase']}: engine {r['measured']} ledger {r['ledger']} ({r['ledger_instant']}) "
                       f"{r['rel_diff']:+.4%}; unattributed {r['unattributed'][:6]}" for r in rows)
    print(report)
    bad = [r for r in rows if abs(r["rel_diff"]) > 0.01]
    assert not bad, report
    for r in (0, 1):
        ld = next(x for x in rows if x["rank"] == r and x["phase"] == "load")
        assert ld["ledger"] == whole, ld
        # the same run without the kept layers would be short by them after the load: the assumption is what matches
        stage_only = pipeline_peak_parity(cfg, _inventory(), 2, 2, SEQ, {r: got[r]})
        tb = next(x for x in stage_only if x["phase"] == "train_batch:2")
        assert tb["measured"] - tb["ledger"] > 0.9 * off[r], tb


def test_pipe_warmup_forwards_follow_deepspeeds_train_schedule():
    """timeline.pipe_warmup_forwards against DeepSpeed's own TrainSchedule (runtime/pipe/schedule.py): for 2-4 stages,
    every stage and GA 1-5, the forward instants it names are exactly those of micro-step GA when the schedule runs
    micro-batch GA's ForwardPass before its first BackwardPass (in every iteration alike: the schedule is the same
    per train_batch), and at such an instant the role's timeline holds what its forward:1 holds (first iteration)."""
    from deepspeed.runtime.pipe.schedule import BackwardPass, ForwardPass, TrainSchedule

    from advisor.ledger.timeline import pipe_warmup_forwards, resolve_load, role_timeline

    for pp in (2, 3, 4):
        for stage in range(pp):
            for ga in range(1, 6):
                order = [type(c) for step in TrainSchedule(micro_batches=ga, stages=pp, stage_id=stage).steps()
                         for c in step if type(c) in (ForwardPass, BackwardPass)]
                fwd_ga = [i for i, c in enumerate(order) if c is ForwardPass][ga - 1]
                first = ga > 1 and fwd_ga < order.index(BackwardPass)
                got = pipe_warmup_forwards(pp, stage, ga)
                assert (f"forward:{ga}" in got and "steady:forward" in got) == first and (bool(got) == first), \
                    (pp, stage, ga, got)
    cfg = dict(PIPE_PEAK_CELLS)["pp2_z1_bf16_ga2_w2"]
    ec = effective_config(cfg)
    from advisor.plan import Workload
    led = compute_ledger(Plan(ec, _inventory(), Cluster(world_size=2, pipeline_parallel=2), Workload(seq_len=SEQ)))
    for r, warm in ((0, True), (1, False)):
        tl = role_timeline(led, led.rank(r), resolve_load(ec, zero_init=False), ga=2, rank=r)
        ser = dict(zip((x.key for x in tl.instants), tl.series(("accelerator", "host_pinned", "host_pageable"))))
        # stage 1 (the last) runs F1 B1 F2 B2: its forward:2 holds micro-step 1's gradients (N_stage x 2 B bf16)
        # and ZeRO-1's ipg bucket (reduce_bucket_size x 2 B); stage 0 (F1 F2 B1 B2) none of them. The pipe buffers
        # the first train_batch fills one micro-batch at a time (timeline.pipe_first_batch_share): stage 0's second
        # input ids (b x s x 8); stage 1's kept logits of micro-batch 1 (s x V x 2), micro-batch 2's received
        # input and micro-batch 1's input gradient (2 x S, S = s x h x 2)
        n1 = (2 * (H + 2 * F * H) + H + V * H) * 2 + 50000 * 2
        pipe = 8 * SEQ if warm else SEQ * V * 2 + 2 * SEQ * H * 2
        assert ser["forward:2"] - ser["forward:1"] == (0 if warm else n1) + pipe, (r, ser)


def test_pipe_schedule_and_in_flight_follow_deepspeeds_train_schedule():
    """timeline.pipe_schedule against DeepSpeed's own TrainSchedule (runtime/pipe/schedule.py) for 2-4 stages, every
    stage and GA 1-5: the same forwards and backwards in the same order; pipe_in_flight at each micro-batch's forward
    (it done) and backward (begun) is the forwards run minus the backwards done in that order, never above the 1F1B
    bound min(stages - stage, GA) the activation estimate counts (advisor.model.activations in_flight), and reaching
    it at the first backward."""
    from deepspeed.runtime.pipe.schedule import BackwardPass, ForwardPass, TrainSchedule

    from advisor.ledger.timeline import pipe_in_flight, pipe_schedule

    for pp in (2, 3, 4):
        for stage in range(pp):
            for ga in range(1, 6):
                ts = TrainSchedule(micro_batches=ga, stages=pp, stage_id=stage)
                order = [("F" if type(c) is ForwardPass else "B", c.buffer_id)
                         for step in ts.steps() for c in step if type(c) in (ForwardPass, BackwardPass)]
                got = pipe_schedule(pp, stage, ga)
                assert [c for c, _ in got] == [c for c, _ in order], (pp, stage, ga)
                # the buffer of each pass is its micro-batch's (micro-batch id mod num_pipe_buffers, _buffer_idx l.111-120)
                assert [b for _, b in order] == [(mb - 1) % ts.num_pipe_buffers() for _, mb in got], (pp, stage, ga)
                # micro-batches run in order, forward and backward alike
                for kind in ("F", "B"):
                    assert [mb for c, mb in got if c == kind] == list(range(1, ga + 1))
                bound = min(pp - stage, ga)
                seen = []
                for k in range(1, ga + 1):
                    at_f = got.index(("F", k))
                    at_b = got.index(("B", k))
                    f = pipe_in_flight(pp, stage, ga, f"forward:{k}")
                    bk = pipe_in_flight(pp, stage, ga, f"backward:{k}")
                    assert f == sum(c == "F" for c, _ in got[:at_f + 1]) - sum(c == "B" for c, _ in got[:at_f])
                    assert bk == sum(c == "F" for c, _ in got[:at_b]) - (k - 1)
                    seen += [f, bk]
                assert max(seen) == bound == pipe_in_flight(pp, stage, ga, "backward:1"), (pp, stage, ga, seen)
                assert pipe_in_flight(pp, stage, ga, "steady:backward") == pipe_in_flight(pp, stage, ga, f"backward:{ga}")
