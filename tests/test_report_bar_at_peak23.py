"""The HTML report's tier bar is what is live at the tier's peak instant (session 23 newcomer check: the
accelerator bar drew 21.78 GiB, the sum of each class's largest figure over the step, above its own 21.23 GiB
need line and the 18.72 GiB peak of the fit table). Checked against ``estimate --format json`` of the same
command, a separate run: the bar's figure (SVG ``tier-total-<tier>``) is the JSON fit row's ``peak`` for every
tier, its segments (the tier table's cells) are the row's ``classes``, and no bar stands above its need line."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import run_cli

GIB = 2 ** 30
ARGS = ["sample_configs/zero3_cpu_offload.json", "--model", "llama-3-8b", "--world-size", "8", "--hardware",
        "dgx-h100", "--seq-len", "2048"]


def test_bar_total_is_the_estimates_peak_for_each_tier(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.html"
    p = run_cli(["report", *ARGS, "-o", str(out)])
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    e = run_cli(["estimate", *ARGS, "--format", "json"])
    fit = {f["tier"]: f for f in json.loads(e.stdout)["fit"]}
    totals = {m[1]: float(re.findall(r">([\d,.]+)</text>", m[2])[0].replace(",", ""))
              for m in re.finditer(r'<g id="tier-total-(\w+)">(.*?)</g>', page, re.S)}
    assert set(totals) == {"accelerator", "host", "nvme"}
    for tier, shown in totals.items():
        f = fit.get(tier)
        peak = f["peak"] if f else 0
        assert shown == round(peak / GIB, 2), (tier, shown, peak)
        if f:
            assert sum(f["classes"].values()) == peak
            assert peak <= f["need"]
    # the accelerator's: 18.72 GiB, below the 21.23 GiB need (the peak + CUDA context, NCCL, allocator reserve)
    assert totals["accelerator"] < round(fit["accelerator"]["need"] / GIB, 2)
    # the tier table's cells are the JSON row's classes
    row = re.search(r"<tr><td>accelerator</td><td>[^<]*</td>(.*?)</tr>", page).group(1)
    cells = [float(x.replace(",", "")) for x in re.findall(r"<td class=num>(?:<b>)?([\d,.]+)", row)]
    order = ["parameters", "gradients", "master_weights", "optimizer_states", "activations", "workspace"]
    assert cells[:-1] == [round(fit["accelerator"]["classes"][c] / GIB, 2) for c in order]


def test_tier_bars_sum_to_the_json_peak():
    """The same by value, without the SVG: :func:`advisor.render.html.tier_bars` of the report's estimate against
    the CLI's JSON (fails where a bar sums each class's largest figure: 21.78 GiB on the accelerator)."""
    pytest.importorskip("matplotlib")
    from advisor.cluster.hardware import resolve_hardware
    from advisor.config.loading import load_config
    from advisor.model.specs import resolve_model
    from advisor.plan import Cluster, Workload
    from advisor.planning import build_plan
    from advisor.render.html import tier_bars
    from advisor.views.estimate import estimate

    hw = resolve_hardware("dgx-h100")
    plan = build_plan(load_config(ARGS[0]), resolve_model("llama-3-8b"), Cluster(8, 8),
                      workload=Workload(seq_len=2048))
    r = estimate(plan, hw.capacity(), hardware=hw)
    e = run_cli(["estimate", *ARGS, "--format", "json"])
    fit = {f["tier"]: f for f in json.loads(e.stdout)["fit"]}
    for b in tier_bars(r):
        assert b.total == (fit[b.tier]["peak"] if b.tier in fit else 0), b.tier
