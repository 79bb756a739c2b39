"""generate's "nothing fits" suggestion names the load option when the load phase is what does not fit,
and only then.

Llama-3.1-70B (70,553,706,496 parameters, published) at pipeline parallel 8 on one DGX H100 node
(8 x H100 80 GB, host 2,000,000,000,000 B: the dgx-h100 preset). Without a load flag every rank builds
the model in fp32, torch's default dtype, before deepspeed.initialize (advisor.ledger.timeline.resolve_load):
8 ranks x N x 4 B = 2,257,718,607,872 B > 2e12 host bytes per node, so no plan fits. Loaded in bf16
(``from_pretrained(torch_dtype=torch.bfloat16)``) the same copies are 8 x N x 2 = 1,128,859,303,936 B;
the steady state of an optimizer offloaded to the CPU holds, per node, fp32 master + Adam moments +
fp32 gradients of the whole model (the 8 stages together): 16 N = 1,128,859,303,936 B, below 2e12, and on the
accelerator one stage's bf16 weights and gradients, 2 x 2 x N / 8 = 35.3 GB, below 80 GB: a plan fits.
With 1e12 B of host the steady state alone (>= 16 N = 1.13e12) does not fit: no load option can help,
and none is suggested.
"""

from __future__ import annotations

import json
from dataclasses import replace

from advisor.cluster.hardware import from_dict
from advisor.model.specs import resolve_model
from advisor.views import generate as gen
from tests.conftest import run_cli

N_70B = 70_553_706_496
G = 8
ARGS = ["--model", "llama-3.1-70b", "--nodes", "1", "--gpus-per-node", str(G), "--global-batch", "8",
        "--seq-len", "4096", "--pipeline-parallel", "8"]


def _hw(host: int):
    return replace(from_dict({"base": "dgx-h100", "host_memory_bytes": host}, "<test>"), nodes=1,
                   accelerators_per_node=G)


def _request(**kw) -> gen.Request:
    return gen.Request(global_batch=8, seq_len=4096, nodes=1, gpus_per_node=G, pipeline_parallel=8, **kw)


def test_load_phase_binds_so_the_suggestion_names_load_dtype():
    hw, inv = _hw(2 * 10**12), resolve_model("llama-3.1-70b")
    assert inv.numel == N_70B
    res = gen.search(inv, hw, _request())
    assert res.best is None
    assert G * N_70B * 4 > 2 * 10**12 >= G * N_70B * 2  # by hand: fp32 load over, bf16 within
    host = [c.rejection for c in res.rejected if c.rejection.tier == "host"]
    assert host and all(r.need >= G * N_70B * 4 and r.load_binds for r in host)
    text, sizes = gen.suggest(inv, hw, _request(), res.rejected)[0]
    assert "--load-dtype bf16" in text and "the load phase is what does not fit" in text
    assert sizes["load"] >= G * N_70B * 4 > 2 * 10**12 >= sizes["steady"] >= 16 * N_70B


def test_following_the_suggestion_writes_a_config_estimate_says_fits(tmp_path):
    spec = tmp_path / "hw.json"
    spec.write_text(json.dumps({"base": "dgx-h100", "host_memory_bytes": 2 * 10**12}))
    p = run_cli(["generate", *ARGS, "--hardware", str(spec), "--format", "json"])
    assert p.returncode == 1, p.stderr
    d = json.loads(p.stdout)
    assert d["best"] is None and any("--load-dtype bf16" in s for s in d["suggestions"]), d["suggestions"]
    out = tmp_path / "ds.json"
    g = run_cli(["generate", *ARGS, "--hardware", str(spec), "--load-dtype", "bf16", "-o", str(out),
                 "--format", "json"])
    assert g.returncode == 0, g.stderr
    best = json.loads(g.stdout)["plans"][0]
    assert best["pipeline_parallel"] == 8
    e = run_cli(["estimate", str(out), "--model", "llama-3.1-70b", "--hardware", str(spec), "--world-size", str(G),
                 "--gpus-per-node", str(G), "--pipeline-parallel", "8", "--load-dtype", "bf16", "--format", "json"])
    assert e.returncode == 0, e.stderr
    fit = {f["tier"]: f for f in json.loads(e.stdout)["fit"]}
    assert fit["accelerator"]["verdict"] == "fits" and fit["host"]["verdict"] == "fits", fit
    # the load phase on the host: 8 bf16 copies of the model, by hand 8 x N x 2 B, within the 2e12 B of host
    assert G * N_70B * 2 <= fit["host"]["need"] <= 2 * 10**12


def test_steady_state_binds_so_no_load_option_is_suggested():
    hw, inv = _hw(10**12), resolve_model("llama-3.1-70b")
    res = gen.search(inv, hw, _request())
    assert res.best is None
    assert 16 * N_70B > 10**12  # by hand: the CPU-offloaded optimizer's steady state alone is over
    assert not any(c.rejection.load_binds for c in res.rejected)
    assert gen.load_suggestion(inv, hw, _request(), res.rejected) is None
    assert gen.search(inv, hw, _request(load_dtype="bf16")).best is None  # and indeed it would not fit
