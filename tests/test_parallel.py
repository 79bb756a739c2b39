"""Tensor, pipeline, sequence and expert parallelism in the ledger and the activations.

Every expected figure is built here by hand from the model's published dimensions (the
Megatron per-rank parameter shapes: column-parallel output features / t, row-parallel input
features / t, vocabulary / t, norms whole), never from advisor.model.parallel itself.
"""

from __future__ import annotations

import json

import pytest

from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.model.activations import ActivationInputs, estimate_activations
from advisor.model.parallel import ParallelismError, partition_uniform, shard
from advisor.model.specs import resolve_model
from tests.conftest import run_cli

Z1 = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8, "bf16": {"enabled": True},
      "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 1}}


def _llama_rank_params(h, f, L, V, heads, kv, t, layers=None, embed=True, head=True):
    """Megatron per-TP-rank parameters of a Llama (RMSNorm, SwiGLU, untied) by hand."""
    d = h // heads
    per_layer = (h // t * h            # q: column-parallel (heads / t)
                 + 2 * (kv * d // t) * h  # k, v: column-parallel (kv heads / t)
                 + h * (h // t)           # o: row-parallel (input / t)
                 + 2 * (f // t) * h       # gate, up: column-parallel
                 + h * (f // t)           # down: row-parallel
                 + 2 * h)                 # two RMSNorms, replicated
    n = per_layer * (L if layers is None else layers)
    if embed:
        n += V // t * h                # vocab-parallel embedding
    if head:
        n += V // t * h + h            # vocab-parallel head + final norm
    return n


def _ledger(cfg, model, **cl):
    return compute_ledger(Plan(effective_config(cfg), resolve_model(model), Cluster(**cl)))


def _acc(rl, cls):
    return rl.total("accelerator", cls)


def test_tp4_llama2_13b_per_rank_shapes_match_megatron_by_hand():
    """C12's arithmetic: 3,254,277,120 parameters per TP rank; ZeRO-1 keeps the whole shard in
    16 bits and partitions fp32 master and moments over the 8 data-parallel ranks only."""
    n = _llama_rank_params(5120, 13824, 40, 32000, 40, 40, 4)
    assert n == 3_254_277_120
    (sh,) = shard(resolve_model("llama-2-13b"), tp=4)
    assert sh.inventory.numel == n
    led = _ledger(Z1, "llama-2-13b", world_size=32, tensor_parallel=4)
    assert led.world_size == 32
    for rl in led.ranks:
        assert _acc(rl, "parameters") == 2 * n
        assert 0 <= _acc(rl, "master_weights") - 4 * n // 8 < 4 * 2 * 8 * 8  # ZeRO's 2W-alignment padding
        assert _acc(rl, "optimizer_states") == 2 * _acc(rl, "master_weights")


def test_tp8_gqa_llama3_70b_splits_kv_heads():
    """8 KV heads over TP 8: one KV head (128 features) per rank in k_proj and v_proj."""
    (sh,) = shard(resolve_model("llama-3-70b"), tp=8)
    k = next(t for t in sh.inventory.tensors if t.name == "model.layers.0.self_attn.k_proj.weight")
    o = next(t for t in sh.inventory.tensors if t.name == "model.layers.0.self_attn.o_proj.weight")
    norm = next(t for t in sh.inventory.tensors if t.name == "model.layers.0.input_layernorm.weight")
    assert k.shape == (128, 8192) and o.shape == (8192, 1024) and norm.shape == (8192,)
    assert sh.inventory.numel == _llama_rank_params(8192, 28672, 80, 128256, 64, 8, 8)


def test_tp_refuses_heads_that_do_not_divide():
    with pytest.raises(ParallelismError, match="num_key_value_heads 8 is not divisible by 16"):
        shard(resolve_model("llama-3-70b"), tp=16)


def test_gpt2_conv1d_splits_the_other_dimension_and_keeps_row_bias():
    """GPT-2 Conv1D weights are (in, out): c_attn (768, 2304) splits to (768, 1152), its bias to
    1152; c_proj (768, 768) splits its input rows to (384, 768), its bias stays 768."""
    (sh,) = shard(resolve_model("gpt2"), tp=2)
    by = {t.name: t.shape for t in sh.inventory.tensors}
    assert by["transformer.h.0.attn.c_attn.weight"] == (768, 1152)
    assert by["transformer.h.0.attn.c_attn.bias"] == (1152,)
    assert by["transformer.h.0.attn.c_proj.weight"] == (384, 768)
    assert by["transformer.h.0.attn.c_proj.bias"] == (768,)
    assert by["transformer.h.0.mlp.c_fc.weight"] == (768, 1536)
    assert by["transformer.wpe.weight"] == (1024, 768)        # position table replicated
    assert by["transformer.wte.weight"] == (25129, 768)       # ceil(50257 / 2)


def test_pipeline_stages_first_holds_embedding_last_the_head():
    """Llama-2-13B over 4 stages: 10 layers each (40 / 4); stage 0 adds the embedding, stage 3
    the final norm and the head; ZeRO-1 per stage over its own data-parallel group."""
    h, f, V = 5120, 13824, 32000
    stages = shard(resolve_model("llama-2-13b"), tp=1, pp=4)
    want = [_llama_rank_params(h, f, 40, V, 40, 40, 1, layers=10, embed=s == 0, head=s == 3) for s in range(4)]
    assert [s.inventory.numel for s in stages] == want
    led = _ledger(Z1, "llama-2-13b", world_size=32, pipeline_parallel=4)
    assert led.world_size == 32
    # global rank = stage x DP + d (no TP): ranks 0-7 stage 0, 24-31 stage 3
    for r, s in ((0, 0), (9, 1), (20, 2), (31, 3)):
        assert _acc(led.role_of(r), "parameters") == 2 * want[s], r
    # the two middle stages hold the same tensors and share a role
    assert led.role_of(8) is led.role_of(16) or _acc(led.role_of(8), "parameters") == _acc(led.role_of(16), "parameters")


def test_tied_embedding_copied_to_the_last_stage():
    """GPT-2 (tied): PipelineModule's TiedLayerSpec gives the first and the last stage a copy."""
    stages = shard(resolve_model("gpt2"), pp=2)
    wte = 50257 * 768
    assert "transformer.wte.weight" in [t.name for t in stages[1].inventory.tensors]
    assert stages[0].inventory.numel + stages[1].inventory.numel == resolve_model("gpt2").numel + wte


def test_partition_uniform_matches_deepspeed():
    ds = pytest.importorskip("deepspeed.runtime.utils")
    for n, p in ((40, 4), (126, 16), (61, 8), (3, 4), (80, 3)):
        assert partition_uniform(n, p) == list(ds.partition_uniform(n, p)), (n, p)


def test_ulysses_zero_over_dp_times_sp():
    """Ulysses SP 2 on 8 ranks: DP 4, but ZeRO partitions over DP x SP = 8 ranks."""
    led = _ledger(Z1, "llama-2-7b", world_size=8, sequence_parallel=2)
    n = resolve_model("llama-2-7b").numel
    assert led.world_size == 8
    m = _acc(led.ranks[0], "master_weights")
    assert 0 <= m - 4 * n // 8 < 4 * 16 * 8


def test_expert_parallel_zero_over_expert_data_parallel_group():
    """Mixtral 8x7B, EP 4 on 8 data-parallel ranks: each rank keeps 2 of 8 experts per layer;
    their fp32 master over the expert-data-parallel group of 2, the dense rest over 8."""
    inv = resolve_model("mixtral-8x7b")
    h, m, L = 4096, 14336, 32
    expert_all = L * 8 * 3 * h * m
    dense = inv.numel - expert_all
    led = _ledger(Z1, "mixtral-8x7b", world_size=8, expert_parallel=4)
    want = 4 * dense / 8 + 4 * (expert_all / 4) / 2
    got = _acc(led.ranks[0], "master_weights")
    assert abs(got - want) / want < 1e-6
    assert _acc(led.ranks[0], "parameters") == 2 * (dense + expert_all // 4)


def test_pipeline_activations_in_flight_per_stage():
    """1F1B: stage s keeps min(p - s, micro-batches) micro-batches (schedule.py
    TrainSchedule.num_pipe_buffers); only the last stage has the loss head. Each micro-batch in flight also holds
    what the PipelineEngine keeps of it: a stage before the last its output, 16-bit s x h (engine.py l.751, freed
    at l.866), the first stage the clone of its input ids, int64 s (l.705)."""
    meta = resolve_model("llama-2-7b").meta
    base = dict(seq_len=1024, micro_batch=1, checkpointing="full", pipeline_parallel=4, micro_batches=8)
    kept_per_layer = 2 * 1024 * 4096  # full checkpointing keeps each layer's 16-bit input
    for s in range(4):
        a = estimate_activations(meta, ActivationInputs(**base, stage=s))
        assert a.layers_on_rank == 8
        pipe = (2 * 1024 * 4096 if s < 3 else 0) + (8 * 1024 if s == 0 else 0)
        assert (a.in_flight, a.pipe_kept) == (4 - s, pipe)
        assert a.saved_accelerator - a.loss_head == (kept_per_layer * 8 + pipe) * (4 - s)
        assert (a.loss_head > 0) == (s == 3)
    few = estimate_activations(meta, ActivationInputs(**{**base, "micro_batches": 2}, stage=0))
    assert few.saved_accelerator == (kept_per_layer * 8 + 2 * 1024 * 4096 + 8 * 1024) * 2


def test_ulysses_activations_are_the_local_sequence():
    meta = resolve_model("llama-2-7b").meta
    full = estimate_activations(meta, ActivationInputs(seq_len=4096, micro_batch=1))
    sp = estimate_activations(meta, ActivationInputs(seq_len=4096, micro_batch=1, ulysses=4))
    local = estimate_activations(meta, ActivationInputs(seq_len=1024, micro_batch=1))
    assert sp.saved_accelerator == local.saved_accelerator < full.saved_accelerator


def test_estimate_cli_shows_every_stage_and_the_worst(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps(Z1))
    p = run_cli(["estimate", str(f), "--model", "llama-2-13b", "--world-size", "32", "--tensor-parallel", "4",
                 "--pipeline-parallel", "2", "--seq-len", "4096", "--checkpointing", "full"])
    assert p.returncode == 0, p.stderr
    assert "pipeline stage 0" in p.stdout and "pipeline stage 1" in p.stdout and "(the worst)" in p.stdout
    j = run_cli(["estimate", str(f), "--model", "llama-2-13b", "--world-size", "32", "--tensor-parallel", "4",
                 "--pipeline-parallel", "2", "--seq-len", "4096", "--format", "json"])
    d = json.loads(j.stdout)
    assert sorted({s for r in d["ranks"] for s in r["stages"]}) == [0, 1]
    assert sum(r["rank_count"] for r in d["ranks"]) == 32
    assert sorted(x for r in d["ranks"] for a, b in r["rank_ranges"] for x in range(a, b + 1)) == list(range(32))


def test_hpz_secondary_partition_by_hand():
    """ZeRO++ hpZ h = 8 on 32 ranks: every parameter also keeps a 16-bit secondary partition of
    A_W(n_i) / h elements (partition_parameters.py _partition_param_sec)."""
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "optimizer": {"type": "Adam"},
           "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}}
    inv = resolve_model("llama-2-7b")
    led = compute_ledger(Plan(effective_config(cfg), inv, Cluster(world_size=32)))
    W, h = 32, 8
    want = 2 * sum(-(-t.numel // W) * W // h for t in inv.tensors)
    # two entries by lifetime (timeline.hpz_secondary_live): the persistent parameters' (n <= the default
    # stage3_param_persistence_threshold 1e5: the norms) and the others'
    (e,) = led.ranks[0].by_item("lp_param_secondary")
    (p,) = led.ranks[0].by_item("lp_param_secondary_persist")
    assert p.bytes == 2 * sum(-(-t.numel // W) * W // h for t in inv.tensors if t.numel <= 100_000) > 0
    assert e.bytes + p.bytes == want and e.tier == p.tier == "accelerator"
    assert (e.life, p.life) == ("hpz_secondary", "hpz_secondary_persistent")
    cfg["zero_optimization"]["zero_hpz_partition_size"] = 1
    plain = compute_ledger(Plan(effective_config(cfg), inv, Cluster(world_size=32)))
    assert plain.ranks[0].by_item("lp_param_secondary") == plain.ranks[0].by_item("lp_param_secondary_persist") == []
    cfg["zero_optimization"].update(zero_hpz_partition_size=1, zero_quantized_weights=True)
    q = compute_ledger(Plan(effective_config(cfg), inv, Cluster(world_size=32)))
    assert any("qwZ" in x for x in q.excluded)


def test_a_node_holds_at_most_the_jobs_ranks():
    """2 ranks on an 8-GPU node are 2 ranks per node: host memory and the load phase are per node."""
    from advisor.plan import Cluster
    assert Cluster(world_size=2, gpus_per_node=8).gpus_per_node == 2
    assert Cluster(world_size=16, gpus_per_node=8).gpus_per_node == 8


def test_quantized_nontrainable_weights_int8_partitions_by_hand():
    """zero_quantized_nontrainable_weights at ZeRO-3 (DeepSpeed 0.19.8 partition_parameters.py
    l. 1836-1840): a frozen parameter's partition is int8, with CUDAQuantizer.quantize's fp32
    scales, one per group (l. 867-891; pt_binding.cpp quantize_kernel: {groups, 1} float).
    W = 16: the frozen 4096 x 4096 weight has p = 2^20; groups start at ceil(2^20 / 8000) = 132 and
    step to the first g with 2^20 % 8g == 0, g = 256 (4096 per group, <= 8000: no doubling). The
    frozen 24000 x 16 weight has p = 24000: ceil(24000/8000) = 3, 24000 % 24 == 0, 8000 per group
    is not > 8000: 3 groups. The trainable bias stays bf16 in the trainable buffers."""
    from advisor.ledger.state import quant_groups
    from advisor.model.inventory import Inventory, TensorSpec
    inv = Inventory("t", [TensorSpec("w", (4096, 4096), trainable=False), TensorSpec("e", (24000, 16), trainable=False),
                          TensorSpec("b", (4096,), trainable=True)])
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "optimizer": {"type": "Adam"},
           "zero_optimization": {"stage": 3, "zero_quantized_nontrainable_weights": True}}
    led = compute_ledger(Plan(effective_config(cfg), inv, Cluster(world_size=16)))
    (e,) = led.ranks[0].by_item("frozen_params")
    assert quant_groups(2 ** 20) == 256 and quant_groups(24000) == 3
    assert e.bytes == 2 ** 20 + 24000 + 4 * (256 + 3) and e.tier == "accelerator"
    cfg["zero_optimization"]["zero_quantized_nontrainable_weights"] = False
    plain = compute_ledger(Plan(effective_config(cfg), inv, Cluster(world_size=16)))
    (p,) = plain.ranks[0].by_item("frozen_params")
    assert p.bytes == (2 ** 20 + 24000) * 2
    # a partition that is not a multiple of 8 cannot be grouped: DeepSpeed's assert (l. 885-887)
    assert quant_groups(10) is None and quant_groups(8) == 1
    # hpZ h = 8: the frozen secondary partitions (A_W(n)/h = 2^21 and 48,000 elements) are int8 too
    # (_partition_param_sec l. 1922-1924): 2^21 -> ceil(2^21/8000) = 263 -> 512 groups; 48,000 ->
    # 6 groups (48,000 % 48 == 0, 8,000 per group); the trainable bias keeps 512 x 2 bytes
    cfg["zero_optimization"].update(zero_quantized_nontrainable_weights=True, zero_hpz_partition_size=8)
    # (the frozen ones in their own entry, never freed: stage3.py invalidate_secondary_tensor walks the trainable
    # fp16_groups only, l.755-759; the trainable bias, 4,096 <= the persistence threshold 1e5, in the persistent one)
    hl = compute_ledger(Plan(effective_config(cfg), inv, Cluster(world_size=16))).ranks[0]
    assert [(x.bytes, x.life) for x in hl.by_item("lp_param_secondary_frozen")] == [
        (2 ** 21 + 48000 + 4 * (512 + 6), "persistent")]
    assert hl.by_item("lp_param_secondary") == []
    assert [x.bytes for x in hl.by_item("lp_param_secondary_persist")] == [512 * 2]


def test_expert_parallel_8_mixtral_each_rank_holds_one_expert_per_layer():
    """Mixtral-8x7B (8 experts, hidden 4096, ffn 14336, 32 layers), EP 8: each expert-parallel
    rank holds 8 / 8 = 1 expert per layer (deepspeed/moe/layer.py: num_local_experts =
    num_experts // ep_size): 32 x 1 x 3 x 4096 x 14336 expert parameters, the dense rest whole."""
    inv = resolve_model("mixtral-8x7b")
    h, m, L = 4096, 14336, 32
    expert_all = L * 8 * 3 * h * m
    dense = inv.numel - expert_all
    (sh,) = shard(inv, ep=8)
    assert sh.inventory.numel == dense + L * 1 * 3 * h * m
    fused = [t for t in sh.inventory.tensors if ".experts." in t.name]
    assert fused and all(t.shape[0] == 1 for t in fused)  # one expert of the fused (E, ., .) tensors


def test_expert_parallel_8_offloaded_step_time_by_hand(tmp_path):
    """The step time of an EP-8 Mixtral with the optimizer on the CPU once failed with
    "1 experts are not divisible by ep_size 8": it split the rank's experts (already 8 / 8 = 1 per
    layer) by 8 again. ZeRO-3, 16 ranks: the CPU optimizer updates the dense tensors over the 16
    ZeRO ranks plus the rank's one expert per layer over the expert-data-parallel group of
    16 / 8 = 2 (moe/utils.py split_params_into_different_moe_groups_for_optimizer), 42 B each
    (28 B Adam kernel + 8 B unscale + 6 B 16-bit copy, as test_steptime)."""
    cfg = tmp_path / "ds.json"
    base = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8, "gradient_clipping": 1.0,
            "bf16": {"enabled": True}, "optimizer": {"type": "AdamW"}}
    cfg.write_text(json.dumps({**base, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                                             "offload_param": {"device": "cpu"}}}))
    args = [str(cfg), "--model", "mixtral-8x7b", "--world-size", "16", "--expert-parallel", "8",
            "--hardware", "dgx-h100:2", "--seq-len", "4096"]
    # ZeRO-3 with DeepSpeed's MoE layer (ep 8): deepspeed.initialize raises "Native DeepSpeed MoE is not
    # supported with ZeRO Stage 3" (runtime/engine.py l.2197-2216): G008, no estimate
    p = run_cli(["estimate", *args, "--format", "json"])
    assert p.returncode == 1, p.stderr
    assert "not divisible" not in p.stderr
    assert [f for f in json.loads(p.stdout)["findings"] if f["code"] == "G008"]
    # ZeRO-2 (what DeepSpeed runs native MoE at) with the optimizer on the CPU: the same partitions, dense over
    # the 16 ZeRO ranks, the rank's expert per layer over the expert-data-parallel group of 2
    cfg.write_text(json.dumps({**base, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}))
    inv = resolve_model("mixtral-8x7b")
    h, m, L = 4096, 14336, 32
    dense = inv.numel - L * 8 * 3 * h * m
    rank_experts = L * 1 * 3 * h * m
    want = (dense // 16 + rank_experts // 2) * 42  # every tensor here divides by 16 and 2: no padding
    p = run_cli(["estimate", *args, "--format", "json"])
    assert p.returncode in (0, 1), p.stderr
    assert "not divisible" not in p.stderr
    terms = {t["name"]: t for t in json.loads(p.stdout)["step_time"]["terms"]}
    assert terms["cpu_optimizer"]["amount"] == want
    c = run_cli(["checkpoint", *args])
    assert c.returncode in (0, 1) and "not divisible" not in c.stderr, c.stderr
