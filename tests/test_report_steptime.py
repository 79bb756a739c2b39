"""The HTML report shows the step time estimate computes (issue 23): with --hardware it has the
step seconds, each resource's busy and exposed seconds and the breakdown's lines (CPU optimizer
step, unknown terms), the same figures as estimate's JSON on the same inputs."""

from __future__ import annotations

import html
import json
import os
import re

from tests.conftest import run_cli

CFG = os.path.join(os.path.dirname(__file__), "..", "sample_configs", "zero3_cpu_offload.json")
ARGS = ["--model", "llama-3-8b", "--hardware", "dgx-h100", "--seq-len", "4096"]


def test_report_step_time_section_is_estimates(tmp_path):
    out = tmp_path / "r.html"
    p = run_cli(["report", CFG, *ARGS, "-o", str(out)])
    assert p.returncode == 0, p.stderr
    est = run_cli(["estimate", CFG, *ARGS, "--format", "json"])
    st = json.loads(est.stdout)["step_time"]
    page = out.read_text()
    assert "<h2 id=step-time>" in page
    m = re.search(r"<b id=step-time-s data-seconds=([0-9.e+-]+)>", page)
    assert m and float(m.group(1)) == st["step_time_s"]
    for k, v in st["busy_seconds_by_resource"].items():
        row = re.search(rf"<tr id=step-time-{k}><td>[^<]+</td><td class=num>([0-9.,]+)</td>"
                        rf"<td class=num>([0-9.,]+)</td></tr>", page)
        assert row, k
        assert row.group(1) == f"{v:,.3f}" and row.group(2) == f"{st['exposed_seconds_by_resource'].get(k, 0):,.3f}"
    # the CPU optimizer line (the offloaded optimizer's step), as the text report prints it
    cpu = next(t for t in st["terms"] if t["name"] == "cpu_optimizer")
    assert cpu["seconds"] and "host_memory" in st["busy_seconds_by_resource"]
    items = [html.unescape(x) for x in re.findall(r"<li[^>]*>(.*?)</li>", page.split("<ul id=step-time-lines>")[1]
                                                  .split("</ul>")[0])]
    assert any(x.startswith("CPU optimizer: ") and " per rank per step at " in x for x in items), items


def test_report_step_time_lists_unknown_terms(tmp_path):
    spec = json.load(open(os.path.join(os.path.dirname(__file__), "..", "advisor", "data",
                                       "hardware_presets.json")))["systems"]["dgx-h100"]
    del spec["host_memory_bandwidth_bytes_per_s"], spec["host_core_bandwidth_bytes_per_s"]
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps(spec))
    out = tmp_path / "r.html"
    p = run_cli(["report", CFG, "--model", "llama-3-8b", "--hardware", str(hw), "--seq-len", "4096", "-o", str(out)])
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    assert "<li class=bad>unknown: cpu_optimizer (no host_memory_bandwidth_bytes_per_s in the hardware spec)</li>" \
        in page
