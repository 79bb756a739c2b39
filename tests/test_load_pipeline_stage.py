"""The load phase under pipeline parallelism is per stage: a PipelineModule built from LayerSpecs
builds only its own stage's layers (DeepSpeed 0.19.8 deepspeed/runtime/pipe/module.py
PipelineModule._build l.235-276 iterates ``specs[self._local_start:self._local_stop]``, the bounds
_partition_layers sets with _set_bounds l.543-553), so without zero.Init each rank holds its stage's
parameters in the load dtype, not the whole model.

By hand, Llama-3.1-70B (hidden 8192, intermediate 28672, 64 heads / 8 KV heads of 128, vocabulary
128,256, 80 layers, embeddings untied: the published config.json): one layer is
q, o 8192 x 8192 + k, v 8192 x 1024 + gate, up, down 3 x 8192 x 28672 + 2 norms x 8192 = 855,654,400;
embed_tokens = lm_head = 128,256 x 8192 = 1,050,673,152; the final norm 8192. Pipeline parallel 8 on
one 8-GPU node: partition_uniform(80, 8) gives 10 layers a stage (deepspeed/runtime/utils.py
partition_uniform), the embedding on stage 0, the final norm and lm_head on stage 7.
"""

from __future__ import annotations

import json

from tests.conftest import run_cli

LAYER = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
EMB = 128_256 * 8192
N = 80 * LAYER + 2 * EMB + 8192
STAGES = [EMB + 10 * LAYER] + [10 * LAYER] * 6 + [10 * LAYER + 8192 + EMB]


def _estimate(tmp_path, *extra):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1,
                               "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}))
    p = run_cli(["estimate", str(cfg), "--model", "llama-3.1-70b", "--hardware", "dgx-h100", "--world-size", "8",
                 "--gpus-per-node", "8", "--seq-len", "4096", "--format", "json", *extra])
    assert p.returncode in (0, 1), p.stderr
    return json.loads(p.stdout)


def test_llama70b_pp8_loads_one_stage_per_rank(tmp_path):
    assert N == 70_553_706_496 and sum(STAGES) == N  # the published parameter count
    d = _estimate(tmp_path, "--pipeline-parallel", "8")
    ld = d["load"]
    assert not ld["zero_init"] and ld["dtype"] == "fp32" and "PipelineModule" in ld["per_stage"]
    # per rank: the largest stage (stage 7: 10 layers + final norm + lm_head) x 4 B; per node: all 8 stages
    assert ld["host_per_rank"] == max(STAGES) * 4 == 38_428_901_376
    assert ld["host_per_node"] == N * 4 == 282_214_825_984  # the old whole-model load was 8 x N x 4 = 2.26e12
    for r in d["ranks"]:
        (stage,) = r["stages"]
        assert r["phases"]["host"]["load"] == STAGES[stage] * 4, (stage, r["phases"]["host"])


def test_without_pipeline_parallelism_every_rank_loads_the_whole_model(tmp_path):
    d = _estimate(tmp_path)
    ld = d["load"]
    assert ld["per_stage"] is None
    assert ld["host_per_rank"] == N * 4 and ld["host_per_node"] == 8 * N * 4
