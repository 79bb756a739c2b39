"""Checkpoint files under tensor and pipeline parallelism: the names DeepSpeed 0.19.8 builds
(``engine.py`` ``_get_ckpt_name`` / ``_get_rank_zero_ckpt_name`` with ``checkpoint_mp_rank`` =
the mpu's model-parallel rank; ``pipe/module.py`` ``ckpt_layer_path``), written out here by hand,
and the bytes from Llama-3-70B's Megatron shard shapes (h 8192, MLP 28,672, 8 KV heads of 128,
vocabulary 128,256). The PipelineEngine's own files are checked in tests/engine/test_pipeline_engine.py.
"""

from __future__ import annotations

from advisor.config.effective import effective_config
from advisor.ledger.checkpoint import checkpoint_files
from advisor.ledger.state import Cluster, Plan
from advisor.model.specs import resolve_model

Z1 = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
      "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 1}}
PER_LAYER = 8192 * 8192 // 8 * 2 + 2 * (8 * 128 // 8) * 8192 + 3 * (28672 // 8) * 8192 + 2 * 8192  # TP8 shard
VOCAB = 128256 // 8 * 8192


def test_tensor_parallel_ranks_write_their_own_files():
    plan = Plan(effective_config(Z1), resolve_model("llama-3-70b"), Cluster(world_size=64, tensor_parallel=8))
    files = {f.path: f for f in checkpoint_files(plan, tag="t").files}
    n = 80 * PER_LAYER + 2 * VOCAB + 8192          # one TP rank's shard: every layer, embedding, head, norm
    for m in range(8):
        ms = files[f"t/mp_rank_{m:02d}_model_states.pt"]
        assert ms.rank == m                         # data-parallel rank 0 of tensor-parallel rank m
        assert ms.bytes >= n * 2 and ms.bytes - n * 2 < 8 * 2 * 64  # N_pad x D, padded to the 8 DP ranks
        for r in range(8):                          # ZeRO-1 over the 8 data-parallel ranks
            f = files[f"t/bf16_zero_pp_rank_{r}_mp_rank_{m:02d}_optim_states.pt"]
            assert f.rank == r * 8 + m              # rank = d x t + m (pipe, data, model axes)
    assert not any("layer_" in p for p in files)


def test_pipeline_stages_write_layer_files():
    plan = Plan(effective_config(Z1), resolve_model("llama-3-70b"),
                Cluster(world_size=64, tensor_parallel=8, pipeline_parallel=2))
    files = {f.path: f for f in checkpoint_files(plan, tag="t").files}
    # mp rank = stage x t + m (PipelineParallelGrid.ds_model_rank); the module is in the layer files
    for stage in (0, 1):
        for m in range(8):
            mp = stage * 8 + m
            assert files[f"t/mp_rank_{mp:02d}_model_states.pt"].parts["module"] == 0
            assert f"t/bf16_zero_pp_rank_3_mp_rank_{mp:02d}_optim_states.pt" in files
    # layer 0 = embedding, layer i+1 = transformer layer i, layer 81 = final norm + head; -model_XX
    assert files["t/layer_00-model_03-model_states.pt"].bytes == VOCAB * 2
    assert files["t/layer_01-model_00-model_states.pt"].bytes == PER_LAYER * 2
    assert files["t/layer_41-model_07-model_states.pt"].rank == (1 * 4 + 0) * 8 + 7  # (stage x DP + d) x t + m
    assert files["t/layer_81-model_00-model_states.pt"].bytes == (VOCAB + 8192) * 2
    assert sum(1 for p in files if p.startswith("t/layer_")) == 82 * 8


def _ulysses_plan(stage: int, world: int, sp: int) -> Plan:
    cfg = dict(Z1, train_batch_size=world // sp, zero_optimization={"stage": stage})
    return Plan(effective_config(cfg), resolve_model("gpt2"), Cluster(world_size=world, sequence_parallel=sp))


def test_ulysses_zero_files_are_written_by_consecutive_ranks():
    """Under Ulysses (sequence_parallel_size sp) ZeRO's group is DP x SP consecutive ranks
    (runtime/sequence_parallel/parallel_state_sp.py initialize_sequence_parallel :58-66), and
    ``zero_pp_rank_{i}`` is the rank's index in it (engine.py _get_zero_ckpt_name :4331-4334,
    dp_process_group = seq_data_parallel_group :2683 / :2768): on 8 ranks with sp 2 the eight
    files are written by global ranks 0..7 (the old stride t x p x sp = 2 named ranks 0..14,
    half of them outside the job)."""
    for stage, name in ((1, "t/bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt"),
                        (3, "t/zero_pp_rank_{r}_mp_rank_00_model_states.pt")):
        files = {f.path: f for f in checkpoint_files(_ulysses_plan(stage, 8, 2), tag="t").files}
        writers = [files[name.format(r=r)].rank for r in range(8)]
        assert writers == list(range(8)), (stage, writers)


def test_ulysses_grouped_files_stride_one():
    """Above LIST_RANKS_UP_TO ranks the files are one record with a count and a stride: 1024
    ranks at sp 4 are 1024 ZeRO ranks, consecutive (stride 1), the last written by rank 1023."""
    files = checkpoint_files(_ulysses_plan(3, 1024, 4), tag="t").files
    opt = next(f for f in files if f.kind == "optim_states")
    assert (opt.rank, opt.count, opt.stride) == (0, 1024, 1)
    assert opt.rank + (opt.count - 1) * opt.stride == 1023


def test_pipeline_plan_lists_no_16bit_model_file():
    """save_16bit_model under the PipelineEngine writes no model (runtime/pipe/engine.py module_state_dict
    l.1308-1325 writes layer files into save_checkpoint's tag and returns None; measured in
    tests/engine/test_pipeline_engine.py): at pipeline 2 the plan says writes False, 0 bytes, and rank 0's
    timeline holds no save_16bit_staging; the same bf16 ZeRO-0 config without pipeline parallelism writes
    N x 2 bytes (engine.py l.5742-5751: rank 0 saves module.state_dict())."""
    from advisor.ledger.checkpoint import checkpoint_plan
    from advisor.ledger.state import compute_ledger
    from advisor.ledger.timeline import save_rank0_entries

    z0 = {**Z1, "zero_optimization": {"stage": 0}}
    inv = resolve_model("llama-3-8b")
    for pp in (1, 2):
        plan = Plan(effective_config(z0), inv, Cluster(world_size=2, pipeline_parallel=pp))
        s16 = checkpoint_plan(plan).save16
        led = compute_ledger(plan)
        staged = [e for e in save_rank0_entries(plan.config, led, 0) if e.item == "save_16bit_staging"]
        if pp == 1:
            assert s16.writes and s16.bytes == inv.numel * 2 and staged
        else:
            assert not s16.writes and s16.bytes == 0 and not staged
            assert "layer_XX-model_states.pt" in s16.note
