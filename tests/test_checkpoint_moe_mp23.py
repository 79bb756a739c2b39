"""fixh23: the files a native-MoE ZeRO-1/2 save writes under tensor / pipeline parallelism, by hand and by
DeepSpeed 0.19.8's own name functions and group builder.

``runtime/engine.py``: with MoE layers ``save_checkpoint`` calls ``_save_moe_checkpoint`` (l.4914-4919), never
``_save_checkpoint``, so under the PipelineEngine no ``layer_XX`` files (``_save_moe_checkpoint`` takes
``DeepSpeedEngine.module_state_dict``, bypassing the PipelineEngine's override, l.5295-5298); then every
data-parallel rank writes its optimizer-states file (``_save_zero_checkpoint``, l.4930-4932), named by
``_get_zero_ckpt_name`` (l.4331-4334: its rank in the optimizer's data-parallel group, ``checkpoint_mp_rank``).
``checkpoint_mp_rank`` (l.2167-2169) is ``mpu.get_model_parallel_rank()``: the TP rank with a Megatron mpu, the
rank's index in its data-parallel replica under the PipelineEngine (``pipe/topology.py`` l.303-313, l.446-447).
Expert files: per MoE layer of the rank's module (``moe_layer_id`` from 0, l.5080-5083) the ranks of
expert-data-parallel rank 0 (l.5093-5095) write ``_get_expert_ckpt_name(save_dir, layer, gid, tag,
checkpoint_mp_rank=self.checkpoint_mp_rank)`` (l.5128-5132), gid = expp_rank x num_local_experts + local
(l.5117-5118), cloned (l.5122). ``mp_rank_XX_model_states.pt``: data-parallel rank 0 (l.5292), the non-expert
module (l.5297-5298).

Each rank's ZeRO-1/2 fp32 partition + Adam's two moments: dense / DP + experts / (DP x TP / ep) elements, 12 B
each (``stage_1_and_2.py`` l.880-881: a ``moe`` group over the expert-data-parallel group; sizes from the toy's
shapes, tests/test_moe_expert_groups22.py, none padded)."""

from __future__ import annotations

import types

import pytest

from advisor.config.effective import effective_config
from advisor.ledger.checkpoint import checkpoint_files
from advisor.ledger.state import Cluster, Plan, compute_ledger
from tests.deepspeed_groups import expert_groups
from tests.test_moe_expert_groups22 import E, H, L, M, _cfg, _dense_stage, _experts_on_rank, _toy

TAG = "global_step7"


def _ds():
    engine = pytest.importorskip("deepspeed.runtime.engine")
    topology = pytest.importorskip("deepspeed.runtime.pipe.topology")
    return engine.DeepSpeedEngine, topology.PipeModelDataParallelTopology


def _files(stage, world, tp, pp, ep):
    plan = Plan(effective_config(_cfg(stage)), _toy(),
                Cluster(world_size=world, tensor_parallel=tp, pipeline_parallel=pp, expert_parallel=ep))
    return plan, checkpoint_files(plan, tag=TAG)


CASES = [(2, 16, 2, 1, 4), (1, 16, 2, 1, 4), (1, 16, 1, 2, 4), (2, 16, 2, 2, 4), (1, 8, 2, 1, 2)]


@pytest.mark.parametrize("stage, world, tp, pp, ep", CASES)
def test_optim_payload_is_the_expert_data_partition_by_hand(stage, world, tp, pp, ep):
    """Every rank's optimizer-states file: (1 + 2) x 4 B x (dense / DP + experts / (DP x TP / ep)); summed over
    the ranks it equals the ledger's fp32 master + moments summed over the ranks (estimate's figures). Main
    partitioned the experts over DP (TP 2, ep 4, 16 ranks: / 8, not / 4) and wrote no expert file."""
    plan, res = _files(stage, world, tp, pp, ep)
    dp, we = world // (tp * pp), world // pp // ep
    opt = [f for f in res.files if f.kind == "optim_states"]
    assert sorted(f.rank for f in opt) == list(range(world))
    total = 0
    for f in opt:
        s = f.rank // (dp * tp)
        dense, experts = _dense_stage(tp, pp, s), _experts_on_rank(ep, L // pp)
        assert dense % (2 * dp) == 0 and experts % (2 * we) == 0
        part = dense // dp + experts // we
        payload = f.parts["fp32_partition"] + f.parts["expert_fp32_partition"] + f.parts["optimizer_state"]
        assert payload == 12 * part, f.name
        total += payload
    led = compute_ledger(plan)
    assert total == sum(len(rl.ranks) * (rl.total("accelerator", "master_weights")
                                         + rl.total("accelerator", "optimizer_states")) for rl in led.ranks)


@pytest.mark.parametrize("stage, world, tp, pp, ep", CASES)
def test_names_and_writers_are_deepspeeds(monkeypatch, stage, world, tp, pp, ep):
    """Every model-states, expert and optimizer file: the name DeepSpeed's own name functions give for the rank
    that writes it, the writers from DeepSpeed's topology and expert-group builder; no layer_XX files."""
    Engine, Topo = _ds()
    _, res = _files(stage, world, tp, pp, ep)
    dp, n_local = world // (tp * pp), E // ep
    topo = Topo(num_pp=pp, num_mp=tp, num_dp=dp)

    def mp_rank(r):  # checkpoint_mp_rank (engine.py l.2167-2169)
        c = topo.get_coord(r)
        if pp == 1:
            return c.model  # Megatron mpu: the TP rank
        return sorted(topo.get_axis_list(axis="data", idx=c.data)).index(r)  # PipelineParallelGrid.ds_model_rank

    def me(r):
        return types.SimpleNamespace(checkpoint_mp_rank=mp_rank(r), zero_optimization_partition_weights=lambda: False,
                                     _get_zero_ckpt_prefix=lambda z, bf16_mode: Engine._get_zero_ckpt_prefix(None, z,
                                                                                                            bf16_mode))
    want: set[tuple[str, int]] = set()
    for r in range(world):
        c = topo.get_coord(r)
        want.add((Engine._get_rank_zero_ckpt_name(me(r), "", TAG, mp_rank(r), c.data, True), r))
        if c.data == 0:
            want.add((Engine._get_ckpt_name(me(r), "", TAG), r))
    edp, epg = expert_groups(monkeypatch, world, pp, ep)
    for g in edp:
        w = g[0]  # expert-data-parallel rank 0
        e = next(x for x in epg if w in x).index(w)  # its expert-parallel rank
        for layer in range(L // pp):  # moe_layer_id counts the stage module's MoE layers from 0
            for j in range(n_local):
                want.add((Engine._get_expert_ckpt_name("", layer, e * n_local + j, TAG,
                                                       checkpoint_mp_rank=mp_rank(w)), w))
    got = {(f.path, f.rank) for f in res.files if f.kind in ("model_states", "optim_states")}
    assert got == want
    assert not [f for f in res.files if f.name.startswith("layer_") and "_expert_" not in f.name]


@pytest.mark.parametrize("stage, world, tp, pp, ep", CASES)
def test_module_and_expert_bytes_by_hand(stage, world, tp, pp, ep):
    """mp_rank_XX: the stage's non-expert TP shard, 2 B each; each expert file one expert's gate_up (2m, h) +
    down (h, m), 2 B each; each stage writes every expert of each of its layers once."""
    _, res = _files(stage, world, tp, pp, ep)
    dp = world // (tp * pp)
    for f in res.files:
        if f.kind == "model_states" and "_expert_" in f.name:
            assert f.bytes == 2 * (2 * M * H + H * M), f.name
        elif f.kind == "model_states":
            assert f.parts == {"module": 2 * _dense_stage(tp, pp, f.rank // (dp * tp))}, f.name
    assert sum(1 for f in res.files if "_expert_" in f.name) == L * E


def test_pipeline_save16_note_names_files_the_save_writes():
    """Under PP + MoE the save_16bit_model note pointed at layer_XX-model_states.pt files, which
    _save_moe_checkpoint never writes; every file name pattern it gives now is one checkpoint_files lists."""
    import re

    from advisor.ledger.checkpoint import save_16bit_model_plan
    plan, res = _files(1, 16, 1, 2, 4)
    note = save_16bit_model_plan(plan).note
    named = re.findall(r"[\w-]+model_states\.pt", note)
    assert named
    for pat in named:
        rx = re.compile(re.sub(r"(?<=_)[A-Z](?=_|$)|XX", r"\\d+", pat.replace(".", r"\.")) + "$")
        assert any(rx.match(f.name) for f in res.files), pat
