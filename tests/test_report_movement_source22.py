"""The HTML report's movement chart draws estimate's own movement section (the rows the text and JSON
outputs print), not a second movement_for call on the ledger without the estimate's activations."""

from __future__ import annotations

import json
import re
import types

from advisor.render.html import movement_chart_svg, movement_section
from tests.conftest import run_cli

GIB = 2 ** 30


def test_the_chart_is_rank_0s_rows_of_the_estimates_section():
    rows0 = [{"link": "pcie", "direction": "to_host", "cls": "gradients", "bytes": 3 * GIB},
             {"link": "network", "crosses": "across_nodes", "direction": "send", "cls": "parameters", "bytes": GIB // 2}]
    other = [{"link": "nvme", "direction": "write", "cls": "optimizer", "bytes": 7 * GIB}]
    result = types.SimpleNamespace(sections={"movement": {"ranks": [{"ranks": [1, 2], "movements": other},
                                                                    {"ranks": [0, 3], "movements": rows0}]}})
    ms, note = movement_section(result)
    assert note is None and [(m.link, m.bytes, m.rank) for m in ms] == [("pcie", 3 * GIB, 0), ("network", GIB // 2, 0)]
    svg = movement_chart_svg(ms)
    assert 'id="move-pcie-to_host-gradients"' in svg and "nvme" not in svg
    assert re.findall(r"> ([0-9,]+\.[0-9]{2})<", svg) and " 3.00<" in svg and " 0.50<" in svg


def test_the_report_chart_totals_are_the_estimates_json(tmp_path):
    args = ["sample_configs/zero2.json", "--model", "llama-3-8b", "--world-size", "16", "--tensor-parallel", "2",
            "--seq-len", "2048", "--hardware", "dgx-h100:2"]
    d = json.loads(run_cli(["estimate", *args, "--format", "json"]).stdout)
    role = next(r for r in d["movement"]["ranks"] if any(lo <= 0 <= hi for lo, hi in r["rank_ranges"]))
    want: dict[str, int] = {}
    for m in role["movements"]:
        if m["bytes"] > 0:
            key = {"within_node": "peer link"}.get(m.get("crosses") or "", m["link"]) + "/" + m["direction"]
            want[key] = want.get(key, 0) + m["bytes"]
    out = tmp_path / "r.html"
    p = run_cli(["report", *args, "-o", str(out)])
    assert p.returncode == 0, p.stderr
    html = out.read_text()
    svg = html[html.index("id=movement-chart"):]
    svg = svg[:svg.index("</div>")]
    got = sorted(float(x.replace(",", "")) for x in re.findall(r"> ([0-9,]+\.[0-9]{2})<", svg))
    assert got == sorted(round(v / GIB, 2) for v in want.values()), (got, want)
