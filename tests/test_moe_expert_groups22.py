"""moe22 (issue 15): routed experts' ZeRO state under tensor (and pipeline) parallelism, by hand.

DeepSpeed 0.19.8, native MoE without expert tensor parallelism (``moe/layer.py`` l.93-97: the default
``enable_expert_tensor_parallelism=False``, or no mpu):

* each rank holds num_experts / ep whole experts (``moe/layer.py`` l.63 ``num_local_experts``,
  ``moe/experts.py`` l.18 deep copies of the expert module: nothing is split by TP);
* ``utils/groups.py`` _create_expert_and_data_parallel, legacy path (l.426-445): per pipeline stage of
  pp_stride = world / pp ranks (l.416, asserting ep | pp_stride at l.417) the ep expert-data-parallel
  groups ``range(stage_start + i, stage_start + pp_stride, ep)``, pp_stride / ep = DP x TP / ep ranks
  each -- the tensor-parallel ranks among them, not the data-parallel group / ep;
* ZeRO-1/2 partitions a ``moe`` param group over that group (``runtime/zero/stage_1_and_2.py``
  _configure_moe_settings l.880-881: ``partition_count[i] = dist.get_world_size(expert_dp_process_group
  [name])``), the dense groups over the data-parallel group (``engine.py`` l.2683 ``dp_process_group``).

The expected bytes are built here from the toy model's shapes (Megatron's per-TP-rank shapes for the dense
tensors, the experts whole) and those group sizes; every size divides 2 x group, so ZeRO's alignment
(``stage_1_and_2.py`` l.441-446) pads nothing. The group sizes are checked against DeepSpeed's own builder
(a recording stand-in for ``deepspeed.comm``, as tests/test_group_crossing.py does)."""

from __future__ import annotations

import itertools
import types

import pytest

from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.model.inventory import Inventory, TensorSpec
from tests.deepspeed_groups import expert_groups

# a Mixtral-like toy: fused experts (E, 2m, h) and (E, h, m), GQA attention, untied head
H, M, E, L, V, HEADS, KV = 256, 512, 8, 2, 1024, 8, 4
D_HEAD = H // HEADS


def _toy() -> Inventory:
    ts = [TensorSpec("model.embed_tokens.weight", (V, H))]
    for i in range(L):
        p = f"model.layers.{i}"
        ts += [TensorSpec(f"{p}.input_layernorm.weight", (H,)),
               TensorSpec(f"{p}.self_attn.q_proj.weight", (H, H)),
               TensorSpec(f"{p}.self_attn.k_proj.weight", (KV * D_HEAD, H)),
               TensorSpec(f"{p}.self_attn.v_proj.weight", (KV * D_HEAD, H)),
               TensorSpec(f"{p}.self_attn.o_proj.weight", (H, H)),
               TensorSpec(f"{p}.post_attention_layernorm.weight", (H,)),
               TensorSpec(f"{p}.mlp.gate.weight", (E, H)),
               TensorSpec(f"{p}.mlp.experts.gate_up_proj", (E, 2 * M, H)),
               TensorSpec(f"{p}.mlp.experts.down_proj", (E, H, M))]
    ts += [TensorSpec("model.norm.weight", (H,)), TensorSpec("lm_head.weight", (V, H))]
    meta = dict(hidden_size=H, num_layers=L, num_heads=HEADS, num_kv_heads=KV, vocab_size=V, num_experts=E,
                intermediate_size=M)
    return Inventory("toy-mixtral", ts, meta=meta)


def _dense_layer(t: int) -> int:
    """One layer's dense parameters on a TP rank (Megatron): q, k, v column-parallel, o row-parallel,
    the two norms and the router replicated."""
    return H // t * H + 2 * (KV * D_HEAD // t) * H + H * (H // t) + 2 * H + E * H


def _dense_stage(t: int, pp: int, s: int) -> int:
    """The dense parameters of stage ``s`` of ``pp`` (one layer per stage at pp 2): the vocab-parallel
    embedding on the first, the final norm and vocab-parallel head on the last."""
    layers = L // pp
    n = layers * _dense_layer(t)
    if s == 0:
        n += V // t * H
    if s == pp - 1:
        n += H + V // t * H
    return n


def _experts_on_rank(ep: int, layers: int) -> int:
    """num_experts / ep whole experts per layer (gate_up (2m, h) + down (h, m) each)."""
    return layers * (E // ep) * (2 * M * H + H * M)


def _expert_data_size(world: int, pp: int, ep: int) -> int:
    """groups.py l.416 / l.438: pp_stride = world / pp ranks per stage, ep groups of pp_stride / ep."""
    return world // pp // ep


def _cfg(stage: int) -> dict:
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
            "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": stage}}


CASES = [(stage, tp, ep, world, 1) for stage, tp, ep, world in itertools.product((1, 2), (1, 2), (2, 4), (8, 16))]
CASES += [(1, 2, 2, 16, 2), (2, 2, 4, 16, 2),  # pipeline: the groups are per stage
          (1, 2, 4, 4, 1)]  # ep 4 > DP 2: DeepSpeed runs it (ep | DP x TP = 4); the ledger refused it


@pytest.mark.parametrize("stage, tp, ep, world, pp", CASES)
def test_expert_state_per_rank_by_hand(stage, tp, ep, world, pp):
    """Per class, every rank: 16-bit parameters whole (dense TP shard + E / ep whole experts), fp32 master and
    the gradient partition (P x 4) and the Adam moments (2 x P x 4) with P = dense / (DP) + experts / (DP x TP /
    ep). Under TP 2, ep 2 on 16 ranks the experts' group is 8 ranks, not the 4 the ledger used (overstating
    the experts' master and moments 2x); the 16-bit experts are not split by TP."""
    dp = world // (tp * pp)
    we = _expert_data_size(world, pp, ep)
    assert we == dp * tp // ep
    led = compute_ledger(Plan(effective_config(_cfg(stage)), _toy(),
                              Cluster(world_size=world, tensor_parallel=tp, pipeline_parallel=pp, expert_parallel=ep)))
    seen: list[int] = []
    for rl in led.ranks:
        seen += list(rl.ranks)
        for r in rl.ranks:
            s = r // (dp * tp)
            dense, experts = _dense_stage(tp, pp, s), _experts_on_rank(ep, L // pp)
            assert dense % (2 * dp) == 0 and experts % (2 * we) == 0  # no alignment padding (l.441-446)
            part = dense // dp + experts // we
            got = {c: rl.total("accelerator", c) for c in ("parameters", "master_weights", "optimizer_states")}
            assert got == {"parameters": 2 * (dense + experts), "master_weights": 4 * part,
                           "optimizer_states": 2 * 4 * part}, (r, got)
            assert sum(e.bytes for e in rl.by_item("fp32_grad")) == 4 * part, r
    assert sorted(seen) == list(range(world))


def test_tp2_ep2_world16_experts_over_eight_ranks_by_hand():
    """The brief's case in numbers: TP 2, ep 2, 16 ranks, ZeRO-1. A rank holds 2 layers x 4 experts x 393,216 =
    3,145,728 expert parameters, whole (6,291,456 B in bf16); DeepSpeed's expert-data group has 16 / 2 = 8 ranks,
    so the experts' fp32 master is 3,145,728 / 8 x 4 = 1,572,864 B (the ledger said / 4: 3,145,728 B)."""
    led = compute_ledger(Plan(effective_config(_cfg(1)), _toy(),
                              Cluster(world_size=16, tensor_parallel=2, expert_parallel=2)))
    rl = led.ranks[0]
    routed = [e for e in rl.by_item("fp32_master") if e.formula.startswith("routed experts")]
    assert [e.bytes for e in routed] == [3_145_728 // 8 * 4]
    assert [e.bytes for e in rl.by_item("lp_params_flat") if e.formula.startswith("routed experts")] == [6_291_456]


def _ds_expert_data_groups(monkeypatch, world, pp, ep):
    return expert_groups(monkeypatch, world, pp, ep)[0]  # l.433-439: the expert-data-parallel groups come first


@pytest.mark.parametrize("tp, ep, world, pp", sorted({(tp, ep, w, pp) for _, tp, ep, w, pp in CASES}))
def test_expert_data_groups_are_deepspeeds(monkeypatch, tp, ep, world, pp):
    """DeepSpeed's builder, called with a recording comm: pp x ep expert-data-parallel groups of world / (pp x ep)
    ranks, group i of stage s being the stage's local ranks i, i + ep, ... (l.438), so local rank l is member
    l // ep of group l mod ep, as the ledger assigns expert roles -- the size the tests above and
    Cluster.expert_data_parallel_size use."""
    gs = _ds_expert_data_groups(monkeypatch, world, pp, ep)
    assert {len(g) for g in gs} == {_expert_data_size(world, pp, ep)}
    assert sorted(r for g in gs for r in g) == list(range(world))
    width = world // pp
    assert all(len({r // width for r in g}) == 1 for g in gs)  # within a stage
    cl = Cluster(world_size=world, tensor_parallel=tp, pipeline_parallel=pp, expert_parallel=ep)
    assert cl.expert_data_parallel_size == len(gs[0])
    assert gs == [list(range(s * width + i, (s + 1) * width, ep)) for s in range(pp) for i in range(ep)]


def test_ds_refuses_what_g004_refuses(monkeypatch):
    """_ensure_divisibility(world / pp, ep) (l.417) is DeepSpeed's whole requirement: ep 4 with TP 2 on 4 ranks
    (DP 2) builds; ep 3 on 8 ranks (TP 1) raises. G004 and the ledger follow it."""
    _ds_expert_data_groups(monkeypatch, 4, 1, 4)
    with pytest.raises(AssertionError):
        _ds_expert_data_groups(monkeypatch, 8, 1, 3)
    from advisor.rules.G004_ep_size_divides_dp import EpSizeDividesDp
    inv = _toy()

    def codes(**cl):
        ctx = types.SimpleNamespace(cluster=Cluster(**cl), inventory=inv)
        return [f.message for f in EpSizeDividesDp().check(ctx)]
    assert codes(world_size=4, tensor_parallel=2, expert_parallel=4) == []
    msgs = codes(world_size=8, expert_parallel=3)
    assert len(msgs) == 2 and "does not divide the data-parallel size 8" in msgs[0]
    msgs = codes(world_size=12, tensor_parallel=2, expert_parallel=8)  # DP 6 x TP 2 = 12, 8 experts
    assert len(msgs) == 1 and "12 ranks (DP x SP 6 x TP 2)" in msgs[0]
    with pytest.raises(ValueError, match="does not divide the 12 ranks"):
        compute_ledger(Plan(effective_config(_cfg(1)), inv, Cluster(world_size=12, tensor_parallel=2, expert_parallel=8)))


@pytest.mark.parametrize("stage, overlap", [(1, False), (2, True)])
def test_one_ipg_bucket_for_dense_and_expert_groups(stage, overlap):
    """DeepSpeedZeroOptimizer keeps one ipg bucket per communication dtype (stage_1_and_2.py l.616), shared by
    the dense and the moe param groups (l.1421, l.1476-1477): reduce_bucket_size x 2 B (bf16) x (1 +
    overlap_comm, l.3269-3278) once per rank. The ledger had added the experts' own copy (1 GB more at the
    default 5e8 elements)."""
    cfg = _cfg(stage)
    cfg["zero_optimization"].update(reduce_bucket_size=1_000_000, overlap_comm=overlap)
    led = compute_ledger(Plan(effective_config(cfg), _toy(), Cluster(world_size=16, tensor_parallel=2, expert_parallel=2)))
    for rl in led.ranks:
        assert sum(e.bytes for e in rl.by_item("ipg_bucket")) == 1_000_000 * 2 * (2 if overlap else 1)
