"""The batch rule's world size under the config's AutoTP (session 23, fixf23, review item 4).

deepspeed.initialize builds DeepSpeedConfig(config, mpu) (deepspeed/__init__.py l.554) before the engine makes
AutoTP's groups, and with no mpu DeepSpeedConfig.__init__ takes dist.get_world_size() (runtime/config.py
l.466-471): the batch rule then runs over all W ranks, not W / TP. The advisor's derived micro-batch and its
B001 verdict are checked against DeepSpeedConfig itself, on a faked 8-rank world (the comm calls it makes)."""

from __future__ import annotations

import pytest

from advisor.config.effective import batch_world_size, derive_batch, effective_config, micro_batch_for
from advisor.plan import Cluster

W, TP = 8, 2


def _ds_config(cfg: dict, monkeypatch):
    from deepspeed.runtime import config as dsc
    monkeypatch.setattr(dsc.dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(dsc.dist, "get_world_size", lambda *a, **k: W)
    return dsc.DeepSpeedConfig(dict(cfg))  # no mpu: as deepspeed.initialize under AutoTP alone


def _cfg(**batch) -> dict:
    return {**batch, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2},
            "tensor_parallel": {"autotp_size": TP}}


def test_autotp_derived_micro_batch_is_over_the_whole_world(monkeypatch):
    cfg = _cfg(train_batch_size=16, gradient_accumulation_steps=1)
    ds = _ds_config(cfg, monkeypatch)
    ec = effective_config(cfg)
    cl = Cluster(world_size=W, tensor_parallel=TP)
    assert ds.world_size == W and ds.train_micro_batch_size_per_gpu == 2
    assert batch_world_size(ec, cl) == W
    assert micro_batch_for(ec, batch_world_size(ec, cl)) == (ds.train_micro_batch_size_per_gpu, "derived")


def test_autotp_batch_triple_refused_as_deepspeed_refuses_it(monkeypatch):
    # /tmp/rv23/cfg/z2_autotp_b.json's batch keys: 4 == 1 x 1 x 4 over W / TP, but DeepSpeed asserts 4 != 1 x 1 x 8
    cfg = _cfg(train_batch_size=4, train_micro_batch_size_per_gpu=1, gradient_accumulation_steps=1)
    with pytest.raises(AssertionError, match="4 != 1 \\* 1 \\* 8"):
        _ds_config(cfg, monkeypatch)
    ec = effective_config(cfg)
    assert derive_batch(ec, batch_world_size(ec, Cluster(world_size=W, tensor_parallel=TP)))[3] is not None


def test_megatron_tp_keeps_the_data_parallel_world():
    # no AutoTP: --tensor-parallel is Megatron's, whose mpu gives DeepSpeedConfig W / TP (runtime/config.py l.463)
    ec = effective_config({"train_batch_size": 16, "gradient_accumulation_steps": 1})
    assert batch_world_size(ec, Cluster(world_size=W, tensor_parallel=TP)) == W // TP


def test_estimate_says_b001_at_tensor_parallel_2(cli, tmp_path):
    import json
    p = tmp_path / "c.json"
    p.write_text(json.dumps(_cfg(train_batch_size=4, train_micro_batch_size_per_gpu=1, gradient_accumulation_steps=1)))
    r = cli(["estimate", str(p), "--model", "llama-3-8b", "--tensor-parallel", "2", "--seq-len", "1024",
             "--hardware", "dgx-h100", "--format", "json"])
    codes = [f["code"] for f in json.loads(r.stdout)["findings"]]
    assert "B001" in codes, (codes, r.stderr)
