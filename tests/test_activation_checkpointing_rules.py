"""C001's computed number_checkpoints: the layers one pipeline stage checkpoints.

DeepSpeed's contiguous buffers are ``num_layers`` (= number_checkpoints) partitions per input on
each rank (checkpointing.py:404-417), and a pipeline stage runs the layers DeepSpeed's
``runtime/utils.py:partition_uniform`` gives it. GPT-2 has 12 layers (config.json n_layer): one
stage holds 12; over 5 stages partition_uniform gives 3, 3, 2, 2, 2 (12 = 5 x 2 + 2, the first
two stages one more), so 3 buffers cover the largest stage.
"""

from __future__ import annotations

import json

import pytest

from advisor.config.loading import parse_text
from advisor.config.overrides import apply_overrides
from advisor.ledger.state import Cluster
from advisor.model.specs import preset_inventory
from advisor.views.lint import lint_config


def _c001(cfg: dict, cluster: Cluster) -> list:
    loaded = parse_text(json.dumps(cfg), "ds.json")
    return [f for f in lint_config(loaded, world_size=cluster.world_size, world_size_source="--world-size",
                                   inventory=preset_inventory("gpt2"), select={"C001"}, cluster=cluster)
            if f.code == "C001"]


@pytest.mark.parametrize("pp,layers", [(1, 12), (5, 3)])
def test_number_checkpoints_is_the_largest_stage(pp, layers):
    cfg = {"train_micro_batch_size_per_gpu": 1, "activation_checkpointing": {"contiguous_memory_optimization": True}}
    (f,) = _c001(cfg, Cluster(world_size=pp, pipeline_parallel=pp))
    assert f.data["set"] == ["activation_checkpointing.partition_activations=true",
                             f"activation_checkpointing.number_checkpoints={layers}"]
    assert f"number_checkpoints to {layers}" in f.fix
    assert _c001(apply_overrides(cfg, f.data["set"]), Cluster(world_size=pp, pipeline_parallel=pp)) == []


def test_partitioned_without_number_gets_the_count():
    cfg = {"train_micro_batch_size_per_gpu": 1,
           "activation_checkpointing": {"contiguous_memory_optimization": True, "partition_activations": True}}
    (f,) = _c001(cfg, Cluster(world_size=1))
    assert f.data["set"] == ["activation_checkpointing.number_checkpoints=12"] and "1231" in f.message
