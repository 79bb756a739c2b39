"""Tensor- and pipeline-parallel traffic in the movement ledger and the step-time model.

Expected bytes are written out by hand from the cited formulas (Narayanan et al., SC'21 s.2.3:
two all-reduces of b x s x h forward and two backward per layer; a ring all-reduce sends
2 (t-1)/t of the buffer per rank; DeepSpeed's PipelineEngine sends b x s x h per micro-batch,
1/t of it with ``pipe_partitioned``; the 1F1B bubble (p-1)/(m+p-1), s.2.2.1), from Llama-3-70B's
published dimensions (h 8192, 80 layers, vocabulary 128,256, 64 heads, 8 KV heads, MLP 28,672).
"""

from __future__ import annotations

import pytest

from advisor.cluster.hardware import resolve_hardware
from advisor.config.effective import effective_config
from advisor.ledger import steptime as stm
from advisor.ledger.movement import movement_roles
from advisor.ledger.state import Cluster, Plan
from advisor.model.specs import resolve_model
from advisor.plan import Workload

H, SEQ, D = 8192, 4096, 2
S = 1 * SEQ * H * D                     # one activation b s h D: 67,108,864 B
Z1 = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
      "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 1}}


def _plan(tp=8, pp=2, ckpt="none", msp=False, cfg=Z1):
    return Plan(effective_config(cfg), resolve_model("llama-3-70b"),
                Cluster(world_size=64, gpus_per_node=8, tensor_parallel=tp, pipeline_parallel=pp,
                        megatron_sequence_parallel=msp), Workload(SEQ, 1, ckpt))


def _items(ms):
    return {m.item: m for m in ms}


def test_tp_allreduces_and_pipeline_sends_by_hand():
    roles = movement_roles(_plan())
    assert [(r[0], len(r)) for r, _ in roles] == [(0, 32), (32, 32)]  # two stages of 4 DP x 8 TP ranks
    ga = 64 // (1 * 4)                                 # DP = 64 / (8 x 2) = 4: GA 16
    first, last = _items(roles[0][1]), _items(roles[1][1])
    ring = 2 * 7 / 8                                   # ring all-reduce over t = 8
    assert first["tp_allreduce_fwd"].bytes == int(ga * 40 * 2 * ring * S) == 150_323_855_360
    assert first["tp_allreduce_bwd"].bytes == 150_323_855_360
    assert first["tp_allreduce_fwd"].group == "tensor_parallel" and first["tp_allreduce_fwd"].intra_node
    assert first["pp_send_activations"].bytes == ga * S // 8 == 134_217_728  # pipe_partitioned: 1/t
    assert "pp_send_grads" not in first and "pp_send_activations" not in last
    assert last["pp_send_grads"].bytes == 134_217_728
    # one received partition per micro-batch all-gathered over t: (t-1)/t x S
    assert first["pp_partition_allgather"].bytes == int(ga * 7 / 8 * S)
    # ZeRO-1 over the 4 DP ranks of the stage's TP shard: stage 0 = 40 layers + embedding, by hand
    per_layer = 8192 * 8192 // 8 * 2 + 2 * (8 * 128 // 8) * 8192 + 3 * (28672 // 8) * 8192 + 2 * 8192
    n0 = 40 * per_layer + 128256 // 8 * 8192
    assert n0 == 4_410_179_584
    assert first["grad_reduce_scatter"].bytes == int(3 / 4 * n0 * D)


def test_sequence_parallel_moves_the_same_bytes_and_recompute_adds_a_forward():
    sp = _items(movement_roles(_plan(msp=True))[0][1])
    assert sp["tp_allgather_reducescatter_fwd"].bytes == 150_323_855_360  # Korthikanti s.4.2.2: same volume
    full = _items(movement_roles(_plan(ckpt="full"))[0][1])
    assert full["tp_allreduce_bwd"].bytes == int(16 * (40 + 40) * 2 * (2 * 7 / 8) * S)
    assert full["tp_allreduce_fwd"].bytes == 150_323_855_360


def test_step_time_divides_compute_and_charges_the_bubble():
    hw = resolve_hardware("dgx-h100:8")
    plan = _plan()
    st = stm.step_time(plan, hw, seq_len=SEQ)
    t = {x.name: x for x in st.terms}
    n = plan.inventory.numel
    tokens = 64 * SEQ / 4                               # per data-parallel replica
    assert t["compute_forward"].amount == pytest.approx(2 * n * tokens / 16)
    # 1F1B, p = 2, m = GA = 16: bubble = (p-1)/m of the ideal, (p-1)/(m+p-1) of the pipelined compute
    # the ideal compute: 6 N T plus the attention scores (advisor.ledger.steptime.attention_flops_per_token)
    ideal = sum(t[k].seconds for k in ("compute_forward", "compute_backward", "attention_forward", "attention_backward"))
    assert t["pipeline_bubble"].seconds == pytest.approx(ideal / 16)
    assert t["pipeline_bubble"].seconds / (ideal + t["pipeline_bubble"].seconds) == pytest.approx(1 / 17)
    assert stm.bubble_fraction(2, 16) == pytest.approx(1 / 17) and stm.bubble_fraction(1, 4) == 0
    # the tensor-parallel all-reduce runs on the NVLink peer link and is on the critical path
    ar = t["network:tp_allreduce_fwd:send"]
    assert ar.seconds == pytest.approx(150_323_855_360 / hw.peer_bytes_per_s)
    assert ar.exposed == pytest.approx(ar.seconds)


def test_without_model_parallelism_nothing_changes():
    plan = Plan(effective_config({**Z1, "train_batch_size": 64}), resolve_model("llama-3-70b"),
                Cluster(world_size=64, gpus_per_node=8), Workload(SEQ, 1))
    items = {m.item for _, ms in movement_roles(plan) for m in ms}
    assert not any(i.startswith(("tp_", "pp_")) for i in items)
    st = stm.step_time(plan, resolve_hardware("dgx-h100:8"), seq_len=SEQ)
    assert not any(x.name == "pipeline_bubble" for x in st.terms)


def test_vocab_parallel_embedding_head_and_loss_all_reduces_by_hand():
    """Megatron's vocab-parallel embedding all-reduces its b s h output in forward (stage 0,
    layers.py VocabParallelEmbedding: reduce_from_tensor_model_parallel_region); the output layer
    all-reduces its input gradient in backward (copy_to_tensor_model_parallel_region) and the loss
    all-reduces three (s, b) fp32 tensors (cross_entropy.py: logits_max, predicted_logits,
    sum_exp_logits), all on the last stage. GA 16, t 8, ring all-reduce 2 (t-1)/t."""
    roles = movement_roles(_plan())
    first, last = _items(roles[0][1]), _items(roles[1][1])
    ga, ring = 16, 2 * 7 / 8
    assert first["tp_embedding_allreduce"].bytes == int(ga * ring * S) == 1_879_048_192
    assert first["tp_embedding_allreduce"].phase == "forward"
    assert last["tp_head_allreduce"].bytes == 1_879_048_192 and last["tp_head_allreduce"].phase == "backward"
    assert last["tp_cross_entropy_allreduce"].bytes == int(ga * 3 * ring * SEQ * 4) == 1_376_256
    assert "tp_head_allreduce" not in first and "tp_embedding_allreduce" not in last
    # without pipeline parallelism the one stage has all three
    one = _items(movement_roles(_plan(pp=1))[0][1])
    ga1 = 64 // 8
    assert one["tp_embedding_allreduce"].bytes == int(ga1 * ring * S)
    assert one["tp_head_allreduce"].bytes == int(ga1 * ring * S)
    # Megatron sequence parallelism: reduce-scatter + all-gather, (t-1)/t each: the same total
    sp = movement_roles(_plan(msp=True))
    f0, f1 = _items(sp[0][1]), _items(sp[1][1])
    assert f0["tp_embedding_reducescatter"].bytes == f0["tp_embedding_allgather"].bytes == int(ga * 7 / 8 * S)
    assert f1["tp_head_allgather"].bytes == f1["tp_head_reducescatter"].bytes == int(ga * 7 / 8 * S)
    # every row is synchronous tensor-parallel traffic on the node's peer link
    assert all(m.group == "tensor_parallel" and m.intra_node and not m.overlap
               for m in (first["tp_embedding_allreduce"], last["tp_head_allreduce"]))


MIXTRAL_H, MIXTRAL_L, MIXTRAL_E, MIXTRAL_K = 4096, 32, 8, 2   # Mixtral 8x7B config.json


def _moe_plan(ep=4, cf=None, ckpt="none", tp=1, seq=4096, micro=1):
    cfg = {"train_batch_size": micro * (16 // tp), "train_micro_batch_size_per_gpu": micro,  # GA 1
           "bf16": {"enabled": True}, "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 1}}
    return Plan(effective_config(cfg), resolve_model("mixtral-8x7b"),
                Cluster(world_size=16, gpus_per_node=8, tensor_parallel=tp, expert_parallel=ep),
                Workload(seq, micro, ckpt, moe_capacity_factor=cf))


def test_moe_all_to_alls_by_hand():
    """sharded_moe.py MOELayer.forward: the (E, C, h) dispatch buffer goes through _AllToAll over
    the expert-parallel group (dispatch, combine), and _AllToAll.backward is another all-to-all:
    4 per MoE layer and micro-batch, each rank sending (ep-1)/ep of E x C x h x D. Capacity
    factor 1.25, top-2, 8 experts, 4096 tokens: C = ceil(4096 / 8 x 1.25 x 2) = 1280
    (_capacity); 32 MoE layers."""
    items = _items(next(ms for _, ms in movement_roles(_moe_plan(cf=1.25))))
    C = 1280
    one = MIXTRAL_E * C * MIXTRAL_H * 2 * 3 // 4      # (ep-1)/ep = 3/4 of E x C x h x D
    assert one == 62_914_560
    assert items["moe_alltoall_fwd"].bytes == 32 * 2 * one
    assert items["moe_alltoall_bwd"].bytes == 32 * 2 * one
    assert items["moe_alltoall_fwd"].group == "expert_parallel" and items["moe_alltoall_fwd"].intra_node
    # dropless (no capacity factor): balanced routing, C = 4096 x 2 / 8 = 1024 slots: a lower bound
    dl = _items(next(ms for _, ms in movement_roles(_moe_plan())))
    assert dl["moe_alltoall_fwd"].bytes == 32 * 2 * (8 * 1024 * 4096 * 2 * 3 // 4)
    # full recompute runs every MoE layer's forward again in backward: 2 more all-to-alls each
    fr = _items(next(ms for _, ms in movement_roles(_moe_plan(cf=1.25, ckpt="full"))))
    assert fr["moe_alltoall_bwd"].bytes == (32 + 32) * 2 * one
    # with tensor parallelism drop_tokens keeps 1/t of the capacity dimension
    tp2 = _items(movement_roles(_moe_plan(cf=1.25, tp=2, ep=2))[0][1])
    assert tp2["moe_alltoall_fwd"].bytes == 32 * 2 * (8 * 1280 * 4096 * 2 // 2 * 1 // 2)
    # no expert parallelism: no all-to-all (the dispatch stays local)
    assert not any(m.item.startswith("moe_") for _, ms in movement_roles(_moe_plan(ep=1, cf=1.25)) for m in ms)


def test_ulysses_all_to_alls_by_hand():
    """DeepSpeed-Ulysses (sequence/layer.py DistributedAttention.forward): q, k, v and the output
    go through an all-to-all over the u sequence-parallel ranks each, forward and backward, each
    rank sending (u-1)/u of its (b, s/u, heads, d) tensor. Llama-3-8B (32 heads, 8 KV heads of
    128, 32 layers) at 32,768 tokens, u = 4 on 8 ranks (DP 2, GA 1), bf16:
    per layer 3/4 x 8,192 x (2 x 32 x 128 + 2 x 8 x 128) x 2 = 125,829,120 B."""
    cfg = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 1}}

    def items(ckpt="none", sp=4):
        plan = Plan(effective_config(cfg), resolve_model("llama-3-8b"),
                    Cluster(world_size=8, gpus_per_node=8, sequence_parallel=sp), Workload(32768, 1, ckpt))
        return _items(next(ms for _, ms in movement_roles(plan)))

    one = 3 * 8192 * (2 * 32 * 128 + 2 * 8 * 128) * 2 // 4
    assert one == 125_829_120
    it = items()
    assert it["ulysses_alltoall_fwd"].bytes == it["ulysses_alltoall_bwd"].bytes == 32 * one
    assert it["ulysses_alltoall_fwd"].group == "sequence_parallel" and it["ulysses_alltoall_fwd"].intra_node
    assert items("full")["ulysses_alltoall_bwd"].bytes == 64 * one  # the recomputed forward's four again
    assert "ulysses_alltoall_fwd" not in items(sp=1)
