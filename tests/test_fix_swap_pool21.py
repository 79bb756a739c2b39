"""Session 21 newcomer defect: the M100 fix contradicted M002 in the same output.

``check nvme2.json --model llama-3-8b --world-size 8`` (sample_configs/zero_infinity_nvme.json with the default
``sub_group_size`` 1e9: ZeRO-3, optimizer and parameters swapped to NVMe) printed for the host shortfall "no single
change fits when re-estimated (tried: no other single change applies)" while M002 proposed a smaller
``sub_group_size`` for its 14.96 GiB pinned swap pool. The fix search now tries M002's change (one computation:
rules.M002_optimizer_swap_pool.swap_pool_shrink), and an empty search never says "no other single change applies".

By hand: Llama-3-8B has 8,030,261,248 parameters; ZeRO-3 over 8 ranks gives each ceil(N / 8) = 1,003,782,656
partition elements (plus a few of padding), one sub-group at sub_group_size 1e9 (the largest, 1,003,782,656, is
what M002's message names); M002's size is 3/4 of the partition over buffer_count 4 -- 3 x 1,003,782,656 / 16 =
188,209,248 -- floored to two significant digits: 180,000,000.

And one change in two parts reads as one: "8 more data-parallel ranks (another node) with gradient accumulation
8 -> 4" (C06: micro 1 x GA 8 x 8 ranks = 64; on 16 ranks GA 64 / 16 = 4), never a comma inside the comma-separated
"tried:" list.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8",
                                         "HOME": "/root", "COLUMNS": "200"})


def test_host_fix_tries_m002s_sub_group_size(tmp_path):
    cfg = json.loads((ROOT / "sample_configs" / "zero_infinity_nvme.json").read_text())
    cfg["zero_optimization"]["sub_group_size"] = 1_000_000_000
    path = tmp_path / "nvme2.json"
    path.write_text(json.dumps(cfg))
    p = run("estimate", str(path), "--model", "llama-3-8b", "--world-size", "8", "--seq-len", "4096",
            "--host-memory", "100GB", "--gpu-memory", "80GB", "--format", "json")
    d = json.loads(p.stdout)
    [m002] = [f for f in d["findings"] if f["code"] == "M002"]
    assert m002["data"]["set"] == ["zero_optimization.sub_group_size=180000000"]
    assert "1003782656 elements" in m002["message"]
    [m100] = [f for f in d["findings"] if f["code"] == "M100" and f["data"]["tier"] == "host"]
    sets = [c["set"] for c in m100["data"]["candidates"]]
    assert ["zero_optimization.sub_group_size=180000000"] in sets, m100["fix"]
    assert "sub_group_size 180000000" in m100["fix"]
    assert "no other single change applies" not in m100["fix"]


def test_a_two_part_change_reads_as_one():
    case = ROOT / "tests" / "data" / "cases" / "C06-zero2-32b-8gpu"
    p = run("estimate", str(case / "config.json"), "--params", "32763876352", "--world-size", "8",
            "--gpu-memory", "141GB", "--format", "json")
    d = json.loads(p.stdout)
    [m100] = [f for f in d["findings"] if f["code"] == "M100"]
    words = [c["change"] for c in m100["data"]["candidates"] if "--world-size 16" in c.get("flags", [])]
    assert words == ["8 more data-parallel ranks (another node) with gradient accumulation 8 -> 4 "
                     "(the same global batch, 64 sequences)"], [c["change"] for c in m100["data"]["candidates"]]
    assert ", gradient accumulation" not in m100["fix"]
