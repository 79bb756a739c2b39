"""generate's "nothing fits" suggestion names the load option when the load phase is what does not fit,
and only then.

The case: Llama-3-8B (8,030,261,248 parameters, published) on one DGX H100 node (8 x H100 80 GB) with
200,000,000,000 B of host memory, data parallel only (``--no-model-parallel``) and the model built without
zero.Init (``--no-zero-init``). Every rank builds the whole model in fp32, torch's default dtype, before
deepspeed.initialize (advisor.ledger.timeline.resolve_load): 8 ranks x N x 4 B = 256,968,359,936 B > 2e11
host bytes per node, so no plan fits. Loaded in bf16 (``from_pretrained(torch_dtype=torch.bfloat16)``) the
copies are 8 x N x 2 = 128,484,179,968 B < 2e11, and a plan without optimizer offload keeps nothing of that
size in host memory in the steady state: a plan fits.

This test used Llama-3.1-70B at --pipeline-parallel 8 (9bc4b53) until the load phase under pipeline
parallelism became per stage (a PipelineModule from LayerSpecs builds only its stage's layers,
deepspeed/runtime/pipe/module.py PipelineModule._build l.235-276): there the fp32 load is the stages'
shards, about N x 4 = 2.8e11 B per node, and that case fits without any load flag
(tests/test_load_pipeline_stage.py). The steady-state case below still uses it: with 1e12 B of host
the CPU-offloaded optimizer's steady state alone (>= 16 N = 1.13e12) does not fit, so no load option
can help and none is suggested.
"""

from __future__ import annotations

import json
from dataclasses import replace

from advisor.cluster.hardware import from_dict
from advisor.model.specs import resolve_model
from advisor.views import generate as gen
from tests.conftest import run_cli

N_8B = 8_030_261_248
N_70B = 70_553_706_496
G = 8
HOST = 2 * 10**11
ARGS = ["--model", "llama-3-8b", "--nodes", "1", "--gpus-per-node", str(G), "--global-batch", "8",
        "--seq-len", "4096", "--no-model-parallel", "--no-zero-init"]


def _hw(host: int):
    return replace(from_dict({"base": "dgx-h100", "host_memory_bytes": host}, "<test>"), nodes=1,
                   accelerators_per_node=G)


def _request(**kw) -> gen.Request:
    return gen.Request(global_batch=8, seq_len=4096, nodes=1, gpus_per_node=G, pipeline_parallel=8, **kw)


def _request_dp(**kw) -> gen.Request:
    return gen.Request(global_batch=8, seq_len=4096, nodes=1, gpus_per_node=G, model_parallel=False,
                       zero_init=False, **kw)


def test_load_phase_binds_so_the_suggestion_names_load_dtype():
    hw, inv = _hw(HOST), resolve_model("llama-3-8b")
    assert inv.numel == N_8B
    res = gen.search(inv, hw, _request_dp())
    assert res.best is None
    assert G * N_8B * 4 > HOST >= G * N_8B * 2  # by hand: fp32 load over, bf16 within
    host = [c.rejection for c in res.rejected if c.rejection.tier == "host"]
    assert host and all(r.need >= G * N_8B * 4 for r in host)
    # the load binds wherever the steady state alone fits (ZeRO-3 with both optimizer and parameters
    # offloaded to host and NVMe is over in its steady state too)
    assert all(r.load_binds == (r.steady_need <= HOST) for r in host) and any(r.load_binds for r in host)
    text, sizes = gen.suggest(inv, hw, _request_dp(), res.rejected)[0]
    assert "--load-dtype bf16" in text and "the load phase is what does not fit" in text
    assert sizes["load"] >= G * N_8B * 4 > HOST > sizes["steady"]


def test_following_the_suggestion_writes_a_config_estimate_says_fits(tmp_path):
    spec = tmp_path / "hw.json"
    spec.write_text(json.dumps({"base": "dgx-h100", "host_memory_bytes": HOST}))
    p = run_cli(["generate", *ARGS, "--hardware", str(spec), "--format", "json"])
    assert p.returncode == 1, p.stderr
    d = json.loads(p.stdout)
    assert d["best"] is None and any("--load-dtype bf16" in s for s in d["suggestions"]), d["suggestions"]
    out = tmp_path / "ds.json"
    g = run_cli(["generate", *ARGS, "--hardware", str(spec), "--load-dtype", "bf16", "-o", str(out),
                 "--format", "json"])
    assert g.returncode == 0, g.stderr
    e = run_cli(["estimate", str(out), "--model", "llama-3-8b", "--hardware", str(spec), "--world-size", str(G),
                 "--gpus-per-node", str(G), "--no-zero-init", "--load-dtype", "bf16", "--format", "json"])
    assert e.returncode == 0, e.stderr
    fit = {f["tier"]: f for f in json.loads(e.stdout)["fit"]}
    assert fit["accelerator"]["verdict"] == "fits" and fit["host"]["verdict"] == "fits", fit
    # the load phase on the host: 8 bf16 copies of the model, by hand 8 x N x 2 B, within the host
    assert G * N_8B * 2 <= fit["host"]["need"] <= HOST


def test_steady_state_binds_so_no_load_option_is_suggested():
    hw, inv = _hw(10**12), resolve_model("llama-3.1-70b")
    res = gen.search(inv, hw, _request())
    assert res.best is None
    assert 16 * N_70B > 10**12  # by hand: the CPU-offloaded optimizer's steady state alone is over
    assert not any(c.rejection.load_binds for c in res.rejected)
    assert gen.load_suggestion(inv, hw, _request(), res.rejected) is None
    assert gen.search(inv, hw, _request(load_dtype="bf16")).best is None  # and indeed it would not fit



def test_whole_pipeline_build_suggests_layer_specs():
    """--pipeline-build whole (the model built whole on every rank, its modules given to PipelineModule): Llama-3-8B
    at --pipeline-parallel 8 on one node, loaded in bf16, with 1.2e11 B of host. By hand every rank loads the whole
    model, 8 ranks x N x 2 = 128,484,179,968 B per node > 1.2e11, and keeps the other stages' layers after it,
    7 x N x 2 = 112,423,657,472 B per node (N - its stage, per rank), beside the save's host staging: no plan's
    host fits. Built from LayerSpecs each rank loads and keeps its stage only (N x 2 per node at load, nothing
    kept) and a plan fits: the suggestion is --pipeline-build stage, proven by the re-search (no other load
    option applies: bf16 is the load dtype, zero.Init and low_cpu_mem_usage not refused)."""
    host = 12 * 10**10
    hw, inv = _hw(host), resolve_model("llama-3-8b")
    assert G * N_8B * 2 > host > 7 * N_8B * 2
    req = _request(load_dtype="bf16", pipeline_build="whole")
    res = gen.search(inv, hw, req)
    assert res.best is None
    host_rej = [c.rejection for c in res.rejected if c.rejection.tier == "host"]
    assert host_rej and all(r.need >= 7 * N_8B * 2 for r in host_rej), host_rej
    text, sizes = gen.suggest(inv, hw, req, res.rejected)[0]
    assert "--pipeline-build stage" in text and "LayerSpec" in text and "the model built whole" in text, text
    assert sizes["load"] > host
    assert gen.search(inv, hw, replace(req, pipeline_build="stage")).best is not None
    # with LayerSpecs (the default) the same request fits, so no suggestion is needed
    assert gen.search(inv, hw, replace(req, pipeline_build=None)).best is not None
