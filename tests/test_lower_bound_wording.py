"""Second newcomer's defects 1-4 (tests/data/lb15, /tmp/s14/nc2_report.md): a lower-bound accelerator need
(rule M104, ``FitRow.lower_bound``) keeps its ">=" in every finding that states it, M104 names the figures, the
estimate text's TIGHT reason names both M104 and M102 when both hold, and the JSON flags the peak itself.

Every expected figure comes from the JSON's own fit row (bytes) printed in GiB (2^30 bytes, units.py), not
from the code's strings: need, capacity, over = need - capacity, uncertainty. The plan: the newcomer's ZeRO-1 file on
an fp16 model without optimizer offload with grad_accum_dtype bf16 (z1_nc_fp16_gaccbf16_nooff.json, still
unmodelled; z1_nc_fp16_gacc_nooff.json and its ZeRO-2 fp32-communication twin, used here before, are modelled since
issue 15's last regimes); the capacities are set from its need: TIGHT = need + half the overhead band (M102 and
M104 both hold), OVER = need - 1 GiB (M100)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "lb15"
ARGS = [str(DATA / "z1_nc_fp16_gaccbf16_nooff.json"), "--model", str(DATA / "inv2g.json"), "--world-size", "8",
        "--host-memory", "512GB"]


def run(cmd: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor", cmd, *ARGS, *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                                                      "LANG": "C.UTF-8", "HOME": "/root", "COLUMNS": "200"})


def gib(b: int) -> str:
    return f"{b / 2**30:.2f} GiB"


def acc_row(gpu: str) -> tuple[dict, dict]:
    d = json.loads(run("estimate", "--gpu-memory", gpu, "--format", "json").stdout)
    return d, [r for r in d["fit"] if r["tier"] == "accelerator"][0]


_, _ROOMY = acc_row("100GiB")  # the need and overhead band do not depend on the capacity
assert _ROOMY["lower_bound"] is True, "the plan must still be a lower bound (rule M104) for these tests to mean anything"
TIGHT = f"{_ROOMY['need'] + _ROOMY['uncertainty'] // 2}B"  # bytes
OVER = f"{_ROOMY['need'] - 2**30}B"


@pytest.mark.parametrize("fmt", ["text", "github", "sarif", "json"])
def test_m100_keeps_the_floor(fmt):
    d, acc = acc_row(OVER)
    assert acc["lower_bound"] is True and acc["need"] > acc["capacity"]
    out = run("check", "--gpu-memory", OVER, "--format", fmt).stdout
    want = (f"needs >= {gib(acc['need'])} at its peak", f"over by at least {gib(acc['need'] - acc['capacity'])}")
    for w in want:
        assert w in " ".join(out.split()), (w, out)
    m100 = [f for f in d["findings"] if f["code"] == "M100"][0]
    assert m100["data"]["lower_bound"] is True and m100["data"]["need"] == acc["need"]


@pytest.mark.parametrize("fmt", ["text", "github", "sarif"])
def test_m102_keeps_the_floor(fmt):
    d, acc = acc_row(TIGHT)
    assert 0 <= acc["headroom"] < acc["uncertainty"] and acc["lower_bound"] is True
    out = " ".join(run("check", "--gpu-memory", TIGHT, "--format", fmt).stdout.split())
    assert f"tight: >= {gib(acc['need'])} needed of {gib(acc['capacity'])}" in out, out


@pytest.mark.parametrize("gpu", [TIGHT, OVER])
def test_m104_names_the_need_and_capacity(gpu):
    d, acc = acc_row(gpu)
    m104 = [f for f in d["findings"] if f["code"] == "M104"][0]
    assert (m104["data"]["need"], m104["data"]["capacity"], m104["data"]["peak"]) == (
        acc["need"], acc["capacity"], acc["peak"])
    for fmt in ("github", "sarif"):
        out = " ".join(run("check", "--gpu-memory", gpu, "--format", fmt).stdout.split())
        line = out[out.index("accelerator peak is a lower bound ("):]  # SARIF: the result, not the rule text
        assert line.startswith(f"accelerator peak is a lower bound (peak >= {gib(acc['peak'])}, need >= "
                               f"{gib(acc['need'])} of {gib(acc['capacity'])} per rank)"), line[:200]
        assert "the figure shown" not in out


def test_estimate_text_tight_names_both_reasons():
    d, acc = acc_row(TIGHT)
    assert 0 <= acc["headroom"] < acc["uncertainty"]  # inside the overhead band (M102) and a floor (M104)
    out = " ".join(run("estimate", "--gpu-memory", TIGHT).stdout.split())
    i = out.index(f"= need per rank >= {gib(acc['need'])}")
    verdict = out[i:out.index(")", out.index("TIGHT (", i)) + 1]
    assert "M104" in verdict and f"inside the runtime-overhead band: up to {gib(acc['uncertainty'])} more" in verdict, \
        verdict


def test_json_peak_and_timeline_carry_the_flag():
    import jsonschema
    from referencing import Registry, Resource

    d, acc = acc_row(TIGHT)
    for role in d["ranks"]:
        assert role["peak"]["accelerator"]["lower_bound"] is True
        assert "lower_bound" not in role["peak"]["host"]
        assert role["timeline"] and all(x["accelerator_lower_bound"] is True for x in role["timeline"])
    assert max(r["peak"]["accelerator"]["bytes"] for r in d["ranks"]) == acc["peak"]
    one = json.loads(subprocess.run(
        [sys.executable, "-m", "advisor", "estimate", str(DATA / "z1_nc_oo_gacc.json"), "--model",
         str(DATA / "inv1g.json"), "--world-size", "8", "--format", "json"], capture_output=True, text=True,
        cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": "/root"}).stdout)
    assert not one["assumptions"]["peak_lower_bound"]  # one param group: modelled
    assert all(r["peak"]["accelerator"]["lower_bound"] is False and not any(
        "accelerator_lower_bound" in x for x in r["timeline"]) for r in one["ranks"])
    schemas = [json.loads((ROOT / "schemas" / f"{n}-output.schema.json").read_text()) for n in ("lint", "estimate")]
    v = jsonschema.Draft202012Validator(schemas[1], registry=Registry().with_resources(
        [(s["$id"], Resource.from_contents(s)) for s in schemas]))
    v.validate(d)
    v.validate(one)
    bad = json.loads(json.dumps(d))
    del bad["ranks"][0]["peak"]["accelerator"]["lower_bound"]
    with pytest.raises(jsonschema.ValidationError):
        v.validate(bad)
    bad["ranks"][0]["peak"]["accelerator"]["lower_bound"] = "yes"
    with pytest.raises(jsonschema.ValidationError):
        v.validate(bad)


def test_the_reason_is_printed_once_beside_the_peak_only_when_m104_is_suppressed(tmp_path):
    """The lower bound's reason (the JSON's assumptions.peak_lower_bound) is the M104 finding's message; the estimate
    text's peak line points to M104 instead of repeating it, and states it itself when the config suppresses M104
    (README "Per-file suppression": a suppressed finding is hidden), so the reason is never lost."""
    d, _ = acc_row("100GiB")
    reason = d["assumptions"]["peak_lower_bound"]
    frag = " ".join(reason.split(":", 1)[1].split()[:12])  # words after its first clause, wrapped anywhere
    peak_line = lambda out: " ".join(out.split("peak live at once:")[1].split("Step timeline")[0].split())
    out = run("estimate", "--gpu-memory", "100GiB").stdout
    assert frag in " ".join(out.split("Findings")[1].split())  # in M104's message
    assert frag not in peak_line(out) and "M104" in peak_line(out)
    # said once in all (the M104 finding), estimate's exclusions and check's "not counted" lines point to it
    assert " ".join(out.split()).count(frag) == 1
    chk = run("check", "--gpu-memory", "100GiB").stdout
    assert " ".join(chk.split()).count(frag) == 1 and "finding M104 says what" in " ".join(chk.split())
    cfg = json.loads(Path(ARGS[0]).read_text())  # the plan above (still a lower bound)
    cfg["ds_advisor"] = {"ignore": ["M104"]}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    out = subprocess.run([sys.executable, "-m", "advisor", "estimate", str(tmp_path / "c.json"), *ARGS[1:],
                          "--gpu-memory", "100GiB"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8", "HOME": "/root",
                              "COLUMNS": "200"}).stdout
    assert "warning M104" not in out and frag in peak_line(out)
    assert " ".join(out.split()).count(frag) == 2  # beside the peak and in the exclusions: no finding holds it
