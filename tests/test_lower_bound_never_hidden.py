"""Issue #15 (newcomer defect D1): a lower-bound accelerator peak must never be hidden.

The newcomer's files (tests/data/lb15: ZeRO-1, bf16, ``grad_accum_dtype`` fp32, ``offload_optimizer`` cpu,
``contiguous_gradients`` false, a 168M-parameter inventory with 2 param groups) fell in a regime
``advisor/ledger/state.py`` zero12_transients_unmodeled left coarse: at --seq-len 1024 on 8 ranks its accelerator
need was 5.46 GiB of --gpu-memory 5.9GB (5.49 GiB) and check said GO. That regime is modelled since
(``zero12_offload_fp32_accum`` with any param groups, engine cell z1_bf16_noncontig_oo_cpu_gaccfp32_groups_tbsga2_w2):
its two-group need is the one-group figure, over 5.9 GB. So is the same plan at ZeRO-2 with ``communication_data_type``
fp32 (MODELLED; ``zero12_offload_compact`` with any communication dtype since issue 15's last regimes). The lower-bound
checks below use the newcomer's plan on an fp16 model without optimizer offload with ``grad_accum_dtype`` bf16 (CFG),
a regime still left coarse (``zero12_transients_modeled`` does not cover ZeRO-1's param.grad_accum copies in a 16-bit
dtype unlike the model's, stage_1_and_2.py l.397-404, l.1237; engine probe 2026-12-06, these buckets, two groups, W 2
GA 2: forward:2 +50%, step:4 +15% on rank 1); with fp32 accumulation it is modelled in every bucket setting and
communication dtype (NOOFF, the newcomer's own buckets: ``contiguous_gradients`` off, ``overlap_comm`` on; CONTIG;
``zero1_compact_grad_accum``, engine cells z1_fp16_gaccfp32_tbsga2_w2 and, with two param groups as in inv2g.json,
z1_fp16_gaccfp32_groups_tbsga2_w2 and z1_fp16_gaccfp32_overlap_groups_tbsga2_w2; contiguous_gradients off and fp32 / bf16
communication in probes). What must hold:
rule M104 fires exactly when estimate's JSON has assumptions.peak_lower_bound; check is TIGHT (exit 4,
errors.EXIT_TIGHT), never GO, with the reason in its verdict line; -q prints it; SARIF and GitHub
annotations carry M104; every accelerator need is printed ">=".
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.errors import EXIT_TIGHT

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "lb15"
NEWCOMER = DATA / "z1_nc_oo_gacc.json"
NOOFF = DATA / "z1_nc_fp16_gacc_nooff.json"  # NEWCOMER on fp16 without optimizer offload: modelled since
CFG = DATA / "z1_nc_fp16_gaccbf16_nooff.json"  # NOOFF with grad_accum_dtype bf16: still a floor
MODELLED = DATA / "z2_nc_oo_gacc_commfp32.json"  # NEWCOMER at ZeRO-2 with communication_data_type fp32: modelled
CONTIG = DATA / "z1_fp16_gacc_nooff_contig.json"  # NOOFF with contiguous_gradients on, overlap_comm off
SHAPE = ["--world-size", "8", "--seq-len", "1024", "--host-memory", "500GB"]
GPU = ["--gpu-memory", "5.9GB", "--runtime-overhead", "0.1GiB"]


def run(cmd: str, *args: str) -> subprocess.CompletedProcess:
    pp = str(ROOT)
    return subprocess.run([sys.executable, "-m", "advisor", cmd, *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pp, "LANG": "C.UTF-8",
                                                      "HOME": "/root", "COLUMNS": "200"})


@pytest.mark.parametrize("cfg, inv, floor", [(CFG, "inv2g.json", True), (CFG, "inv1g.json", True),
                                             (NEWCOMER, "inv2g.json", False), (NEWCOMER, "inv1g.json", False),
                                             (MODELLED, "inv2g.json", False), (CONTIG, "inv1g.json", False),
                                             (CONTIG, "inv2g.json", False), (NOOFF, "inv2g.json", False),
                                             (NOOFF, "inv1g.json", False)])
def test_m104_fires_exactly_when_the_peak_is_a_lower_bound(cfg, inv, floor):
    p = run("estimate", str(cfg), "--model", str(DATA / inv), *SHAPE, *GPU, "--format", "json")
    d = json.loads(p.stdout)  # exit 1 when a tier does not fit (the newcomer's modelled peak is over 5.9 GB)
    lb = d["assumptions"].get("peak_lower_bound")
    m104 = [f for f in d["findings"] if f["code"] == "M104"]
    # ZeRO-1 fp16 with bf16 accumulation without offload: not modelled; with fp32 accumulation, the newcomer's ZeRO-1
    # and its ZeRO-2 fp32-communication twin: modelled
    assert bool(lb) is floor
    assert len(m104) == (1 if lb else 0) and all(f["severity"] == "warning" for f in m104)
    acc = [r for r in d["fit"] if r["tier"] == "accelerator"][0]
    host = [r for r in d["fit"] if r["tier"] == "host"][0]
    assert acc["lower_bound"] is bool(lb) and host["lower_bound"] is False
    if lb:
        # the fit itself has room (need < 5.9e9 bytes), yet the verdict is not "fits"
        assert acc["need"] < 5_900_000_000 == acc["capacity"] and acc["verdict"] == "tight"


def test_check_is_tight_not_go_at_the_newcomers_5_9gb():
    p = run("check", str(CFG), "--model", str(DATA / "inv2g.json"), *SHAPE, *GPU, "--format", "json")
    d = json.loads(p.stdout)
    acc = [t for t in d["tiers"] if t["tier"] == "accelerator"][0]
    assert 0 < acc["headroom"] and acc["need"] < acc["capacity"] == 5_900_000_000
    assert acc["lower_bound"] is True and acc["verdict"] == "tight"
    assert d["verdict"] == "tight" and p.returncode == EXIT_TIGHT == 4
    assert any(f["code"] == "M104" for f in d["findings"])
    t = run("check", str(CFG), "--model", str(DATA / "inv2g.json"), *SHAPE, *GPU)
    last = t.stdout.rstrip().splitlines()[-1]
    assert last.startswith("TIGHT") and "lower bound" in last and "(exit 4)" in last, last
    row = [x for x in t.stdout.splitlines() if "accelerator [per rank]" in x][0]
    assert row.split()[0] == "TIGHT" and "need >= " in row, row


def test_check_quiet_still_says_it():
    p = run("check", str(CFG), "--model", str(DATA / "inv2g.json"), *SHAPE, *GPU, "-q")
    assert p.returncode == 4 and "M104" in p.stdout and "lower bound" in p.stdout.splitlines()[-1]


@pytest.mark.parametrize("cmd", ["estimate", "check"])
def test_sarif_and_github_carry_m104(cmd):
    p = run(cmd, str(CFG), "--model", str(DATA / "inv2g.json"), *SHAPE, *GPU, "--format", "sarif")
    s = json.loads(p.stdout)
    run0 = s["runs"][0]
    assert any(r["ruleId"] == "M104" for r in run0["results"])
    assert any(r["id"] == "M104" for r in run0["tool"]["driver"]["rules"])
    g = run(cmd, str(CFG), "--model", str(DATA / "inv2g.json"), *SHAPE, *GPU, "--format", "github")
    assert "M104" in g.stdout and g.stdout.count("::warning") >= 1


def test_estimate_text_marks_every_accelerator_need():
    p = run("estimate", str(CFG), "--model", str(DATA / "inv2g.json"), *SHAPE, *GPU)
    fit = p.stdout[p.stdout.index("Fit:"):].splitlines()[1:]
    acc = fit[:[i for i, x in enumerate(fit) if "host" in x][0]]  # the accelerator rows, table or lines
    marked = [x for x in acc if "peak live (" in x or "= need" in x]
    assert len(marked) == 2 and all(">=" in x for x in marked), acc
    assert "TIGHT" in "\n".join(acc) and "lower bound" in p.stdout[p.stdout.index("peak live at once"):]


def test_generate_rejects_a_lower_bound_plan_and_says_why():
    """generate ranks only "fits" plans: the newcomer's plan, with room by its (floor) need, is rejected as
    tight because of the lower bound, and its rejection says so rather than citing the overhead band."""
    from advisor.cluster.hardware import Capacity
    from advisor.config.loading import parse_text
    from advisor.ledger.state import Cluster
    from advisor.model.inventory import load_inventory
    from advisor.plan import Workload
    from advisor.planning import build_plan
    from advisor.views.estimate import plan_fit
    from advisor.views.generate import _rejection
    plan = build_plan(parse_text(CFG.read_text(), str(CFG)), load_inventory(str(DATA / "inv2g.json")),
                      Cluster(world_size=8), workload=Workload(seq_len=1024))
    pf = plan_fit(plan, Capacity(accelerator=80 * 10**9, host=None, nvme=None))
    acc = [r for r in pf.rows if r.tier == "accelerator"][0]
    assert acc.need < 40 * 10**9 and acc.verdict == "tight" and not acc.overhead_tight  # room: not the band
    rej = _rejection(pf)
    assert rej is not None and rej.lower_bound and "lower bound" in rej.describe() and ">=" in rej.describe()


def test_timeline_and_html_report_mark_the_floor(tmp_path):
    p = run("estimate", str(CFG), "--model", str(DATA / "inv2g.json"), *SHAPE, *GPU)
    # the timeline's accelerator peak marker ("*") carries ">=", the legend says why
    starred = [x for x in p.stdout[p.stdout.index("Step timeline"):].splitlines() if "*" in x and ">=" in x]
    assert starred and "lower bound" in p.stdout[p.stdout.index("(* = the tier's peak instant"):].splitlines()[0]
    out = tmp_path / "r.html"
    h = run("report", str(CFG), "--model", str(DATA / "inv2g.json"), *SHAPE, *GPU, "--output", str(out))
    assert h.returncode in (0, 4), h.stderr
    page = out.read_text()
    need = re.search(r"id=fit-need-accelerator data-bytes=(\d+)><b>([^<]*)</b>", page)
    assert need and need.group(2).startswith("&ge; "), need
    assert re.search(r"id=fit-peak-accelerator>.*?data-bytes=\d+>&ge; ", page)
    assert "TIGHT (peak is a lower bound: M104)" in page and "M104" in page


def test_estimate_json_and_sarif_validate_and_the_schema_requires_the_flag():
    import copy

    import jsonschema
    d = json.loads(run("estimate", str(CFG), "--model", str(DATA / "inv2g.json"), *SHAPE, *GPU,
                       "--format", "json").stdout)
    from referencing import Registry, Resource
    schemas = [json.loads((ROOT / "schemas" / f"{n}-output.schema.json").read_text()) for n in ("lint", "estimate")]
    v = jsonschema.Draft202012Validator(schemas[1], registry=Registry().with_resources(
        [(s["$id"], Resource.from_contents(s)) for s in schemas]))  # estimate's findings refer to lint's
    v.validate(d)
    bad = copy.deepcopy(d)
    del bad["fit"][0]["lower_bound"]  # a fit row without the flag is not estimate's output
    with pytest.raises(jsonschema.ValidationError):
        v.validate(bad)
    bad["fit"][0]["lower_bound"] = "yes"
    with pytest.raises(jsonschema.ValidationError):
        v.validate(bad)
    log = json.loads(run("check", str(CFG), "--model", str(DATA / "inv2g.json"), *SHAPE, *GPU,
                         "--format", "sarif").stdout)
    jsonschema.Draft4Validator(json.loads((ROOT / "tests" / "fixtures" / "sarif" / "sarif-schema-2.1.0.json")
                                          .read_text())).validate(log)


def test_m100_fix_candidates_in_the_same_regime_carry_the_floor():
    """At the model's 2,048 positions the plan does not fit 5.9 GB (M100); its re-estimated candidates that keep
    a 16-bit accumulation dtype unlike the model's (bf16 on fp16) without optimizer offload at ZeRO-1/2 have floors for
    accelerator needs too (ZeRO-2 with it is not measured either); those that leave the regime do not: CPU optimizer
    offload (state.zero12_offload_fp32_accum, every dtype pair) and ZeRO-3 (not DeepSpeedZeroOptimizer)."""
    p = run("check", str(CFG), "--model", str(DATA / "inv2g.json"), "--world-size", "8", *GPU, "--format", "json")
    d = json.loads(p.stdout)
    m100 = [f for f in d["findings"] if f["code"] == "M100"]
    assert p.returncode == 1 and m100, d["findings"]
    cands = m100[0]["data"]["candidates"]
    leave = {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu"}
    assert cands and all(c["lower_bound"] == (not set(c["set"]) & leave) for c in cands), cands
    assert any(c["lower_bound"] for c in cands) and any(set(c["set"]) & leave for c in cands), cands
    assert "accelerator >= " in m100[0]["fix"] and "lower-bound peak (M104)" in m100[0]["fix"]


def test_m104_fix_names_only_the_accumulation_dtype_and_offload():
    """CFG is a floor through its bf16 accumulation alone: M104's fix names the model's grad_accum_dtype and CPU
    optimizer offload, not its buckets or communication dtype (modelled with fp32 accumulation: the NOOFF cases above),
    on one param group and on two (the HF Trainer's decay / no-decay pair)."""
    for inv in ("inv1g.json", "inv2g.json"):
        d = json.loads(run("estimate", str(CFG), "--model", str(DATA / inv), *SHAPE, *GPU, "--format", "json").stdout)
        fix = " ".join(f["fix"] for f in d["findings"] if f["code"] == "M104")
        assert "data_types.grad_accum_dtype fp16" in fix and "offload_optimizer cpu" in fix, (inv, fix)
        assert "contiguous_gradients" not in fix and "communication_data_type" not in fix, (inv, fix)
