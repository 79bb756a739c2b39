"""moe22 (issue 15): G007, ZeRO++ hpZ under tensor parallelism.

DeepSpeed 0.19.8 builds the hpZ groups with ``utils/groups.py`` _create_zero_param_parallel_group (l.944-949):
consecutive global ranks. The ranks' tensor-parallel coordinates come from DeepSpeed's own
``PipeModelDataParallelTopology`` (``runtime/pipe/topology.py`` l.244-248, the model axis fastest). Both are
called here (the builder with a recording stand-in for ``deepspeed.comm``, tests/deepspeed_groups.py, as tests/test_group_crossing.py
does): every hpZ group of h > 1 ranks holds more than one tensor-parallel shard whenever TP > 1, which is
what G007 says; at TP 1 none does, and G007 is silent."""

from __future__ import annotations

import itertools
import json

import pytest

from tests.conftest import run_cli
from tests.deepspeed_groups import hpz_groups

Z3 = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
      "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 3}}


@pytest.mark.parametrize("tp, pp", list(itertools.product((1, 2, 4), (1, 2))))
def test_hpz_groups_mix_tensor_parallel_shards_exactly_when_tp_above_1(monkeypatch, tp, pp):
    topology = pytest.importorskip("deepspeed.runtime.pipe.topology")
    for dp, h in itertools.product((2, 4, 8), (2, 4, 8)):
        world = pp * dp * tp
        if world % min(h, world):
            continue
        made = hpz_groups(monkeypatch, world, h)
        topo = topology.PipeModelDataParallelTopology(num_pp=pp, num_mp=tp, num_dp=dp)
        shards = [{topo.get_coord(r).model for r in g} for g in made]
        assert all(len(s) == min(tp, min(h, world)) for s in shards), (tp, pp, dp, h, made)
        assert all(len(s) > 1 for s in shards) == (tp > 1)


def _est(tmp_path, cfg, *args):
    f = tmp_path / "c.json"
    f.write_text(json.dumps(cfg))
    p = run_cli(["estimate", str(f), "--model", "llama-3-8b", "--seq-len", "1024", "--format", "json", *args])
    assert "Traceback" not in p.stderr
    return p, json.loads(p.stdout)


def test_G007_flags_hpz_under_tensor_parallelism(tmp_path):
    cfg = {**Z3, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}}
    p, d = _est(tmp_path, cfg, "--world-size", "16", "--gpus-per-node", "8", "--tensor-parallel", "2")
    (f,) = [f for f in d["findings"] if f["code"] == "G007"]
    assert f["severity"] == "error" and f["pointer"] == "/zero_optimization/zero_hpz_partition_size"
    assert "{0, 1, 2, 3, ..}" in f["message"] and "wrong weights" in f["message"]
    assert "zero_hpz_partition_size to 1" in f["fix"] and "does not help" in f["fix"]
    assert d["ranks"], "DeepSpeed runs it (no refusal): the estimate stands"
    # no tensor parallelism, or no hpZ: nothing to say
    p, d = _est(tmp_path, cfg, "--world-size", "16", "--gpus-per-node", "8")
    assert not any(f["code"] == "G007" for f in d["findings"])
    p, d = _est(tmp_path, Z3, "--world-size", "16", "--gpus-per-node", "8", "--tensor-parallel", "2")
    assert not any(f["code"] == "G007" for f in d["findings"])


def test_G007_explain(tmp_path):
    p = run_cli(["explain", "G007"])
    assert p.returncode == 0 and "_create_zero_param_parallel_group" in p.stdout, p.stderr


def test_a_group_given_to_zero_init_does_not_set_hpz_size_or_rank(monkeypatch):
    """Why G007's fix is only h = 1: ``partition_parameters.py`` l.1126-1129 (Init.__init__) read the hpZ group's
    size and this rank's place from ``groups._get_zero_param_intra_parallel_group_world_size`` /
    ``_rank_in_mygroup``, which ask ``dist`` about groups' module global -- None unless
    _create_zero_param_parallel_group ran -- not about the ``zero_param_parallel_group`` the script passed. With
    the global unset they answer for the whole world (group=None)."""
    import inspect

    groups = pytest.importorskip("deepspeed.utils.groups")
    pp = pytest.importorskip("deepspeed.runtime.zero.partition_parameters")
    src = inspect.getsource(pp.Init.__init__)
    assert "self.num_ranks_in_param_group = groups._get_zero_param_intra_parallel_group_world_size()" in src
    assert "self.rank_in_group = groups._get_zero_param_intra_parallel_rank_in_mygroup()" in src

    class _Dist:
        def get_world_size(self, group=None):
            return 16 if group is None else 2  # 2: the script's own group of one TP index

        def get_rank(self, group=None):
            return 9 if group is None else 1

    monkeypatch.setattr(groups, "dist", _Dist())
    monkeypatch.setattr(groups, "_ZERO_PARAM_INTRA_PARALLEL_GROUP", None)
    assert groups._get_zero_param_intra_parallel_group_world_size() == 16
    assert groups._get_zero_param_intra_parallel_rank_in_mygroup() == 9
