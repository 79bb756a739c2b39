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


def test_pipeline_build_whole_loads_the_whole_model_and_keeps_the_other_stages(tmp_path):
    """--pipeline-build whole: the model built whole on every rank and its modules given to PipelineModule, which
    keeps every layer in ``self._layer_specs = list(layers)`` (runtime/pipe/module.py l.188) and registers only the
    stage's (_build l.235-276): by hand each rank loads N x 4 B (fp32) and, from initialize on, holds the other
    stages' layers in host memory, (N - its stage) x 4 B, beside the bf16 ZeRO-1 step's host bytes (none here:
    no offload)."""
    d = _estimate(tmp_path, "--pipeline-parallel", "8", "--pipeline-build", "whole")
    ld = d["load"]
    assert ld["pipeline_build"] == "whole" and ld["pipeline_build_source"] == "--pipeline-build whole"
    assert "_layer_specs" in ld["per_stage"]
    assert ld["host_per_rank"] == N * 4 == 282_214_825_984
    assert ld["host_per_node"] == 8 * N * 4  # ranks per node x the whole model, as without pipeline parallelism
    for r in d["ranks"]:
        (stage,) = r["stages"]
        host = r["phases"]["host"]
        assert host["load"] == N * 4, (stage, host)
        for ph in ("forward", "backward", "steady_step"):
            assert host[ph] == (N - STAGES[stage]) * 4, (stage, ph, host)
    # the load section validates against the output schema (pipeline_build), whose lifetimes hold the kept layers'
    import jsonschema
    from tests.conftest import ROOT
    schema = json.loads((ROOT / "schemas" / "estimate-output.schema.json").read_text())
    jsonschema.validate(ld, schema["properties"]["load"])
    assert "whole" in schema["properties"]["load"]["properties"]["pipeline_build"]["enum"]
    assert '"after_load"' in (ROOT / "schemas" / "estimate-output.schema.json").read_text()


def test_pipeline_build_stage_is_the_default_and_says_so(tmp_path):
    d = _estimate(tmp_path, "--pipeline-parallel", "8", "--pipeline-build", "stage")
    ld = d["load"]
    assert ld["pipeline_build"] == "stage" and ld["pipeline_build_source"] == "--pipeline-build stage"
    default = _estimate(tmp_path, "--pipeline-parallel", "8")["load"]
    assert default["pipeline_build"] == "stage" and default["pipeline_build_source"].startswith("assumed")
    assert ld["host_per_rank"] == default["host_per_rank"] == max(STAGES) * 4
    for r in d["ranks"]:
        assert r["phases"]["host"]["forward"] == 0, r["phases"]["host"]


def test_pipeline_build_whole_in_text_and_check(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1,
                               "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}))
    common = ["--model", "llama-3.1-70b", "--world-size", "8", "--gpus-per-node", "8", "--seq-len", "4096",
              "--pipeline-parallel", "8"]
    p = run_cli(["estimate", str(cfg), *common, "--hardware", "dgx-h100", "--pipeline-build", "whole"])
    assert p.returncode in (0, 1), p.stderr
    assert "pipeline build whole (--pipeline-build whole)" in p.stdout and "_layer_specs" in p.stdout
    # check: 8 x N x 4 = 2.26e12 B at load does not fit 2.0e12 B of host; built per stage (N x 4 per node) it does
    args = ["check", str(cfg), *common, "--gpu-memory", "80GB", "--host-memory", "2000GB", "--format", "json"]
    whole = run_cli(args + ["--pipeline-build", "whole"])
    stage = run_cli(args)
    w, s = json.loads(whole.stdout), json.loads(stage.stdout)
    assert w["load"]["host_per_node"] == 8 * N * 4 > 2_000_000_000_000 >= s["load"]["host_per_node"] == N * 4
    host_w = next(t for t in w["tiers"] if t["tier"] == "host")
    host_s = next(t for t in s["tiers"] if t["tier"] == "host")
    assert host_w["verdict"] == "no-go" and host_s["verdict"] != "no-go", (host_w, host_s)
    assert whole.returncode == 1
    # M101 names the LayerSpecs way out, and not zero.Init: ZeRO-2/3 are refused under a PipelineModule
    # (runtime/pipe/engine.py l.76-77)
    (m101,) = [f for f in w["findings"] if f["code"] == "M101"]
    assert "LayerSpec" in m101["fix"] and "--pipeline-build stage" in m101["fix"], m101["fix"]
    assert "zero.Init" not in m101["fix"], m101["fix"]


def test_pipeline_build_refused_value_is_one_line(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_batch_size": 8}))
    p = run_cli(["estimate", str(cfg), "--model", "gpt2", "--pipeline-build", "layers"])
    assert p.returncode == 2 and "Traceback" not in p.stderr and "--pipeline-build" in p.stderr


def test_m101_under_pipeline_stage_build_says_each_rank_builds_its_stage(tmp_path):
    """Under the default build (LayerSpecs) each rank builds only its stage's layers (pipe/module.py _build
    l.235-276), so M101 must not say that every rank builds the whole model: llama-3.1-70b PP 8 on one node of
    8 ranks holds N x 4 B per node at load (the stages together), over a 100 GB host."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1,
                               "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}))
    args = ["check", str(cfg), "--model", "llama-3.1-70b", "--world-size", "8", "--gpus-per-node", "8",
            "--seq-len", "4096", "--pipeline-parallel", "8", "--gpu-memory", "80GB", "--host-memory", "100GB",
            "--format", "json"]
    d = json.loads(run_cli(args).stdout)
    assert d["load"]["host_per_node"] == N * 4 > 100_000_000_000, d["load"]
    (m101,) = [f for f in d["findings"] if f["code"] == "M101"]
    assert "pipeline stage's layers" in m101["message"] and "whole model" not in m101["message"], m101["message"]
    assert "zero.Init" not in m101["message"] + m101["fix"], m101
    # built whole (--pipeline-build whole) it does say so, and that the other stages' layers are kept
    w = json.loads(run_cli(args + ["--pipeline-build", "whole"]).stdout)
    (m101w,) = [f for f in w["findings"] if f["code"] == "M101"]
    assert "whole model" in m101w["message"] and "other stages' layers" in m101w["message"], m101w["message"]


def test_pipeline_build_without_pipeline_parallelism_is_ignored_and_said(tmp_path):
    """nits17: ``--pipeline-build whole`` at pipeline degree 1 was accepted silently and the JSON said
    pipeline_build "whole" from "--pipeline-build whole" (and "stage", a LayerSpecs assumption, without the flag),
    though there is no PipelineModule (the schema: "read only under pipeline parallelism"). Like ``--zero-init``
    below ZeRO-3 it is now ignored with a warning, and the load section claims no PipelineModule build."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1}))
    base = ["estimate", str(cfg), "--model", "gpt2", "--world-size", "2", "--seq-len", "128", "--format", "json"]
    plain, flagged = run_cli(base), run_cli(base + ["--pipeline-build", "whole"])
    assert plain.returncode in (0, 1) and flagged.returncode in (0, 1), flagged.stderr
    a, b = json.loads(plain.stdout), json.loads(flagged.stdout)
    for d in (a, b):
        assert d["load"]["pipeline_build"] is None
        assert "PipelineModule" not in d["load"]["pipeline_build_source"].replace("no PipelineModule", "")
    assert "--pipeline-build ignored" in flagged.stderr and "--pipeline-build" not in plain.stderr
    assert b["load"]["pipeline_build_source"].startswith("--pipeline-build ignored")
    # the figures do not move: nothing reads the option without pipeline parallelism
    assert a["ranks"] == b["ranks"] and a["load"]["host_per_rank"] == b["load"]["host_per_rank"]
    pp = json.loads(run_cli(base[:5] + ["4", "--pipeline-parallel", "2", "--pipeline-build", "whole"]
                            + base[6:]).stdout)
    assert pp["load"]["pipeline_build"] == "whole"
