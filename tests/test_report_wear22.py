"""Newcomer report 22, finding 3: ``report`` (HTML) left out the drive-wear result ``estimate`` prints for the
same flags (ZeRO-Infinity NVMe swap of Llama-3-70B on a DGX H100: ~1.17 TiB written per step per node, a
drive's rated writes used in under three weeks). The report must show the figures of estimate's own movement
section (``movement.endurance``): here they are read from estimate's JSON and looked for in the HTML."""

from __future__ import annotations

import html
import json

ARGS = ["sample_configs/zero_infinity_nvme.json", "--model", "llama-3-70b", "--world-size", "8",
        "--hardware", "dgx-h100", "--seq-len", "1024", "--checkpointing", "full"]


def test_report_shows_estimates_drive_wear(cli, tmp_path):
    p = cli(["estimate", *ARGS, "--format", "json"])
    assert p.returncode in (0, 1, 4), p.stderr
    wear = [e for e in json.loads(p.stdout)["movement"]["endurance"] if e["write_bytes_per_step"]]
    assert len(wear) == 1, wear
    e = wear[0]
    # the figures hang together: per day = per step x steps per day; life = rated writes / per day
    assert abs(e["write_bytes_per_day"] - e["write_bytes_per_step"] * 86400 / e["step_time_s"]) < 1e-6 * e["write_bytes_per_day"]
    assert abs(e["days_of_life"] - e["rated_write_bytes"] / e["write_bytes_per_day"]) < 1e-9 * e["days_of_life"]
    out = tmp_path / "r.html"
    r = cli(["report", *ARGS, "-o", str(out)])
    assert r.returncode in (0, 1, 4), r.stderr
    page = html.unescape(out.read_text())
    start = page.index("id=storage-wear")
    block = page[start:page.index("</ul>", start)]
    for figure in (f"Storage {e['tier']} [{e['access']}]",
                   f"{e['write_bytes_per_step'] / 2**30:,.2f} GiB written per step per node",
                   f"{e['write_bytes_per_day'] / 2**40:,.2f} TiB/day",
                   f"{100 * e['endurance_used_per_day']:.3g}% of the drive's whole rated write endurance per day",
                   f"projected life {e['days_of_life']:,.1f} days"):
        assert figure in block, (figure, block)
    # the newcomer's figures, for this preset and these flags
    assert "1,168.03 GiB" in block and "170.23 TiB/day" in block and "18.7 days" in block
