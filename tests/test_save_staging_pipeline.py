"""Save-time host staging is what each rank writes (issue 15): the timeline's ``save:model`` /
``save:optim`` host bytes come from the same per-rank file entries ``advisor checkpoint`` lists.

DeepSpeed 0.19.8 under a PipelineEngine: module_state_dict (runtime/pipe/engine.py l.1308-1325) has
PipelineModule.save_state_dict (runtime/pipe/module.py l.607-642) write one layer_XX-model_states.pt
per layer on data-parallel rank 0 of the stage, each layer's state dict cloned to the CPU
(checkpoint/utils.py clone_tensors_for_torch_save l.41-59; the torch checkpoint engine preserves
storage sharing, checkpoint_engine.py l.62-63) one layer at a time; mp_rank_XX_model_states.pt holds
no module. The optimizer file is torch.save'd one accelerator storage at a time
(torch/serialization.py l.1290-1310): the largest is the stage's fp32 partition P x 4.

By hand, Llama-3-8B (hidden 4096, intermediate 14336, 32 heads / 8 KV heads of 128, vocabulary
128,256, 32 layers, untied): one layer q, o 4096 x 4096 + k, v 4096 x 1024 + 3 x 4096 x 14336 +
2 x 4096 = 218,112,000; embed_tokens = lm_head = 128,256 x 4096 = 525,336,576; final norm 4096.
PP 2 on 8 ranks: ZeRO group W = 4, 16 layers a stage (partition_uniform), the embedding on stage 0
(layer_00), the final norm + lm_head on stage 1 (layer_33).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

LAYER = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
EMB = 128_256 * 4096
STAGES = [EMB + 16 * LAYER, 16 * LAYER + 4096 + EMB]


def _run(tmp_path, cfg: dict, *extra):
    p = tmp_path / "ds.json"
    p.write_text(json.dumps(cfg))
    out = run_cli(["estimate", str(p), "--model", "llama-3-8b", "--seq-len", "2048", "--format", "json", *extra])
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def _save_hosts(rank: dict) -> dict[str, int]:
    return {e["instant"]: e["host"] for e in rank["timeline"] if e["phase"] == "save"}


def _largest_file_by_rank(d: dict) -> dict[tuple[int, str], int]:
    """(rank, kind) -> bytes of the largest file of that kind the rank writes (checkpoint's entries)."""
    by: dict[tuple[int, str], int] = {}
    for f in d["checkpoint"]["files"]:
        if f["kind"] not in ("model_states", "optim_states"):
            continue
        for k in range(f.get("count", 1)):
            key = (f["rank"] + k * f.get("rank_stride", 1), f["kind"])
            by[key] = max(by.get(key, 0), f["bytes"])
    return by


def test_llama3_8b_pp2_zero1_bf16_each_rank_stages_its_own_files(tmp_path):
    assert sum(STAGES) == 8_030_261_248  # Llama-3-8B's published parameter count
    d = _run(tmp_path, {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4,
                        "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}},
             "--world-size", "8", "--pipeline-parallel", "2")
    for r in d["ranks"]:
        (rank,) = [a for a, _ in r["rank_ranges"]] if len(r["rank_ranges"]) == 1 else [None]
        (stage,) = r["stages"]
        h = _save_hosts(r)
        # the optimizer file: its largest storage, the stage's fp32 partition P = N_stage / 4 (no padding:
        # both stages' N are multiples of 2 x W), P x 4 = N_stage bytes
        assert h["save:optim"] == STAGES[stage] // 4 * 4, (rank, h)
        # the layer files: only data-parallel rank 0 of the stage (global ranks 0 and 4) writes them; the
        # largest is the embedding (stage 0) / final norm + lm_head (stage 1), in bf16
        want = {0: EMB * 2, 4: (EMB + 4096) * 2}.get(rank, 0)
        assert h["save:model"] == want, (rank, h)
    # the old figures: rank 0 staged the whole model in bf16 (N x 2 = 16,060,522,496) and N / W x 4
    assert max(max(_save_hosts(r).values()) for r in d["ranks"]) == max(STAGES)


PLANS = [
    ({"bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}, ("--pipeline-parallel", "2")),
    ({"bf16": {"enabled": True}, "zero_optimization": {"stage": 0}}, ("--pipeline-parallel", "2")),
    ({"bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}, ("--pipeline-parallel", "2",
                                                                      "--tensor-parallel", "2")),
    ({"bf16": {"enabled": True}, "zero_optimization": {"stage": 0}}, ()),
    ({"bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}, ()),
    ({"bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}, ()),
    ({"bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}, ()),
    ({"bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}, ("--tensor-parallel", "2")),
    ({"bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}, ("--tensor-parallel", "2")),
    ({"fp16": {"enabled": True}, "zero_optimization": {"stage": 1}}, ("--pipeline-parallel", "4")),
]


@pytest.mark.parametrize("cfg,extra", PLANS, ids=[f"z{c['zero_optimization']['stage']}{''.join(e)}" for c, e in PLANS])
def test_save_staging_never_exceeds_the_files_the_rank_writes(tmp_path, cfg, extra):
    """torch.save stages at most what it writes (one storage, or one layer's clone, at a time), so per
    rank the host staging at save:model / save:optim is at most the bytes of the file of that kind it
    writes (DeepSpeed writes the model-states / layer files, then the optimizer-states file)."""
    cfg = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, **cfg}
    d = _run(tmp_path, cfg, "--world-size", "8", *extra)
    files = _largest_file_by_rank(d)
    for r in d["ranks"]:
        h = _save_hosts(r)
        after = h["save"]  # what the host holds once the save has returned (not staging)
        for a, b in r["rank_ranges"]:
            for rank in range(a, b + 1):
                # save:model stages (part of) the model-states / layer file being written, save:optim the
                # optimizer-states file: never more than the largest such file this rank writes
                assert h["save:model"] - after <= files.get((rank, "model_states"), 0), (rank, h, files)
                assert h["save:optim"] - after <= files.get((rank, "optim_states"), 0), (rank, h, files)


def test_llama3_8b_pp2_parallel_write_spreads_the_layer_files_over_each_stage(tmp_path):
    """``checkpoint.parallel_write.pipeline_stage``: PipelineModule.save_state_dict spreads a stage's layers over
    its data-parallel ranks (runtime/pipe/module.py l.618-621, ``ds_utils.partition_uniform(num_layers,
    dp_size)``), so each rank writes (and clones, one layer at a time) its share. By hand, PP 2 on 8 ranks (DP 4):
    each stage has 17 layers (stage 0: embedding + layers 1-16; stage 1: layers 17-32 + norm/head 33);
    partition_uniform(17, 4) = [0, 5, 9, 13, 17] (runtime/utils.py l.606-624: 17 = 4 x 4 + 1, the first rank one
    more), so dp rank 0 writes local layers 0-4, ranks 1-3 four each; the global writer is stage x 4 + dp rank."""
    d = _run(tmp_path, {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4,
                        "bf16": {"enabled": True}, "zero_optimization": {"stage": 1},
                        "checkpoint": {"parallel_write": {"pipeline_stage": True}}},
             "--world-size", "8", "--pipeline-parallel", "2")
    bounds = [0, 5, 9, 13, 17]
    want_writer = {s * 17 + j: s * 4 + k for s in (0, 1) for k in range(4) for j in range(bounds[k], bounds[k + 1])}
    got_writer = {int(f["name"][6:8]): f["rank"] for f in d["checkpoint"]["files"] if f["name"].startswith("layer_")}
    assert got_writer == want_writer
    # save:model per rank: the largest layer it clones, bf16 (rank 0 the embedding, rank 7 the norm + lm_head,
    # every other rank a transformer layer); before, ranks other than 0 and 4 staged no layer
    want = {0: EMB * 2, 7: (EMB + 4096) * 2, **{r: LAYER * 2 for r in (1, 2, 3, 4, 5, 6)}}
    seen = set()
    for r in d["ranks"]:
        h = _save_hosts(r)
        (stage,) = r["stages"]
        for a, b in r["rank_ranges"]:
            for rank in range(a, b + 1):
                seen.add(rank)
                assert h["save:model"] == want[rank], (rank, h)
                # the optimizer file's largest storage is the stage's fp32 partition, whoever writes layers
                assert h["save:optim"] == STAGES[stage] // 4 * 4, (rank, h)
    assert seen == set(range(8))


@pytest.mark.parametrize("value,want,noted", [(True, True, False), (1, True, False), (False, False, False),
                                              (0, False, False), ("true", False, True), (None, False, True)])
def test_parallel_write_is_read_as_deepspeed_reads_it(value, want, noted):
    """runtime/config.py get_checkpoint_parallel_write_pipeline (l.398-406): a value ``in [True, False]`` (so 1 and
    0 too) is taken, anything else raises DeepSpeedConfigError (the effective config notes it and assumes the
    default, false: runtime/constants.py CHECKPOINT_PARALLEL_WRITE_PIPELINE_STAGE_DEFAULT)."""
    from advisor.config.effective import effective_config
    ec = effective_config({"train_batch_size": 8, "checkpoint": {"parallel_write": {"pipeline_stage": value}}})
    assert ec.checkpoint_parallel_write_pipeline is want
    assert any(n.pointer == "/checkpoint/parallel_write/pipeline_stage" for n in ec.notes) is noted
    assert effective_config({"train_batch_size": 8}).checkpoint_parallel_write_pipeline is False


def test_partition_uniform_is_deepspeeds():
    """The layer-file writers (and the stage split) use advisor.model.parallel.partition_uniform, a copy of
    DeepSpeed's runtime/utils.py partition_uniform (l.606-624): equal on every (items, parts) up to 40 x 12,
    fewer items than parts included."""
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.utils import partition_uniform as ds_partition_uniform

    from advisor.model.parallel import partition_uniform
    for n in range(0, 41):
        for p in range(1, 13):
            assert partition_uniform(n, p) == [int(x) for x in ds_partition_uniform(n, p)], (n, p)
