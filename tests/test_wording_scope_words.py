"""Issue 22, "wording that cannot be misread": the fit's scope on its peak-live line, the HTML
report in the text's words (not the JSON's keys), grouped step counts and singular nodes.

Expected words come from the command's own JSON (its scope, labels, interval_steps) or are the
plain English of a key written here by hand; nothing pins today's output as a whole.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import CASES, run_cli

ROOT = Path(__file__).resolve().parent.parent
V = ("--deepspeed-version", "0.19.8")
EST = ["estimate", str(ROOT / "sample_configs" / "zero3_cpu_offload.json"), "--model", "llama-3-8b",
       "--world-size", "8", "--gpu-memory", "80GB", "--seq-len", "4096", *V]


def test_fit_names_each_tiers_scope_on_its_peak_live_line_and_row():
    """The host row's peak is the node's sum (8 ranks), the state table above it per rank: the
    scope was only on the "= need" line below ("host: peak live (first step) 149.58 GiB" read as
    a second per-rank figure). Line form (narrow): "host, per node (8 ranks): peak live ...";
    table form: the scope in the tier column right under the tier's name, not after its parts."""
    fit = json.loads(run_cli([*EST, "--format", "json"]).stdout)["fit"]
    assert {f["tier"] for f in fit} >= {"accelerator", "host"}
    narrow = run_cli(EST, env={"COLUMNS": "80"}).stdout.splitlines()
    for f in fit:
        line = next(x for x in narrow if x.startswith(f"{f['tier']}, "))
        assert line.startswith(f"{f['tier']}, {f['scope']}: peak live"), line
    host = next(f for f in fit if f["tier"] == "host")
    assert host["phase"] == "first_step" and host["scope"] == "per node (8 ranks)"
    assert any(x.startswith("host, per node (8 ranks): peak live (first step) ") for x in narrow), narrow
    wide = run_cli(EST, env={"COLUMNS": "220"}).stdout.splitlines()
    for f in fit:
        i = next(i for i, x in enumerate(wide) if x.startswith(f"│ {f['tier']} ") and "peak live" in x)
        assert wide[i + 1].split("│")[1].strip() == f["scope"], wide[i:i + 3]


def _visible(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", re.sub(r"<style>.*?</style>", "", html, flags=re.S))


def test_html_report_uses_the_texts_words_not_the_jsons_keys(tmp_path):
    """The fit's phase ("first step"), the timeline's instants (the JSON's own ``label``, as the
    text's timeline table) and the assumptions' names ("gradient accumulation") in words; the
    keys (first_step, first_step:g0:update, grad_accum, zero_stage) are gone from the page."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.html"
    p = run_cli(["report", *EST[1:], "-o", str(out)])
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    text = _visible(page)
    d = json.loads(run_cli([*EST, "--format", "json"]).stdout)
    keys = {row["instant"] for r in d["ranks"] for row in r["timeline"]}
    assert any(":" in k for k in keys)  # e.g. "first_step:g0:update": what the chart showed
    for k in (k for k in keys if ":" in k or "_" in k):  # "load" is also the assumptions' word
        assert f">{k}<" not in page, k
    for row in d["ranks"][0]["timeline"]:
        assert row["label"] in text, row["label"]
    for key in ("first_step", "steady_step", "grad_accum", "zero_stage", "master_weights", "seq_len"):
        assert key not in text, key
    for words in ("first step", "gradient accumulation", "ZeRO stage", "master weights", "micro-batch"):
        assert words in text, words


def test_checkpoint_groups_the_step_count_and_generate_says_1_node():
    """"~142254 steps" -> "~142,254 steps" (the JSON's interval_steps, grouped); "1 node(s)" ->
    "1 node", "2 nodes"."""
    args = ["checkpoint", "config.json", "--params", "8030261248", "--world-size", "8", "--write-bandwidth",
            "2GB/s", "--step-time", "1", "--node-mtbf-hours", "50000", *V]
    c09 = CASES / "C09-checkpoint-size-8b"
    n = json.loads(run_cli([*args, "--format", "json"], cwd=c09).stdout)["resilience"]["interval_steps"]
    assert n >= 1000
    text = run_cli(args, cwd=c09).stdout
    assert f"(~{n:,} steps)" in text and f"~{n} " not in text, text
    base = ["generate", "--model", "llama-3.2-1b", "--hardware", "dgx-h100", "--gpus-per-node", "8",
            "--seq-len", "2048", "--global-batch", "64", *V]
    one = run_cli([*base, "--nodes", "1"]).stderr  # the plan table (stdout: the chosen config)
    assert one.startswith("llama-3.2-1b on 1 node x 8 ") and "node(s)" not in one, one[:200]
    two = run_cli([*base, "--nodes", "2"]).stderr
    assert two.startswith("llama-3.2-1b on 2 nodes x 8 ") and "node(s)" not in two, two[:200]
