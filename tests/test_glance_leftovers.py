"""Issue 22's last newcomer defects: every table at 60 / 80 columns, the unit echo of every size
and bandwidth flag, one unit per checkpoint column, one-line usage errors, lint's errors on
stderr, and the wording a newcomer misread.

The expected numbers come from the command's own JSON (bytes, divided here by the unit's base)
or from a cited formula; the text is checked for its layout (each value on its label's line, no
cut cell), never pinned as a whole (the goldens do that, deliberately).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import CASES, run_cli

C06 = CASES / "C06-zero2-32b-8gpu"
C10 = CASES / "C10-nvme-writes-per-step"
V = ("--deepspeed-version", "0.19.8")


def _overlong(text: str, width: int) -> list[str]:
    """Lines longer than ``width`` that had a place to fold (more than one word)."""
    return [x for x in text.splitlines() if len(x) > width and len(x.split()) > 1]


def _g(n: int, base: int = 2**30) -> str:
    return f"{n / base:,.2f}"


ESTIMATES = {
    "c06-llama8b": (C06, ["estimate", "config.json", "--world-size", "8", "--model", "llama-3.1-8b", "--seq-len",
                          "2048", "--gpu-memory", "80GB", *V]),
    "c10-nvme": (C10, ["estimate", "config.json", "--params", "6700000000", "--world-size", "1", "--host-memory",
                       "512GiB", "--step-time", "10", *V]),
}


@pytest.mark.parametrize("cols", [60, 80])
@pytest.mark.parametrize("name", sorted(ESTIMATES))
def test_every_estimate_table_keeps_labels_with_values_when_narrow(name, cols):
    """At 60 and 80 columns no cell is cut ("capaci…") and no line could have folded; the state,
    fit and movement figures (from the JSON, in GiB) each sit on the line of their label."""
    cwd, args = ESTIMATES[name]
    d = json.loads(run_cli([*args, "--format", "json"], cwd=cwd).stdout)
    p = run_cli(args, cwd=cwd, env={"COLUMNS": str(cols)})
    assert p.returncode in (0, 1), p.stderr
    text = p.stdout
    assert "…" not in text, [x for x in text.splitlines() if "…" in x]
    assert not _overlong(text, cols), _overlong(text, cols)
    lines = text.splitlines()
    # the fit: the peak, each part and the need on the line that names them
    for f in d["fit"]:
        assert any(x.startswith(f"{f['tier']}") and "peak live" in x and _g(f["peak"]) in x for x in lines) or \
            any(x.startswith("│ " + f["tier"]) and _g(f["peak"]) in x for x in lines), (f["tier"], text)
        for part in f.get("parts") or []:
            want = f"+ {part['label']} {_g(part['bytes'])} GiB"
            assert any(want in x for x in lines) or any(
                f"+ {part['label'].split()[0]}" in x and _g(part["bytes"]) in x for x in lines), (want, text)
        need = _g(f["need"])
        assert any("= need" in x and need in x for x in lines), (need, text)
    # the movement rows: the item and its size on one line (a record or a row)
    mv = d.get("movement") or {"ranks": []}
    for m in (mv["ranks"][0]["movements"] if mv["ranks"] else []):
        assert any(m["item"] in x for x in lines), m
        size = _g(m["bytes"])
        assert any(m["link"] in x and m["direction"] in x for x in lines), m
        assert any(size in x and ("GiB: " in x or m["item"] in x) for x in lines), (m, size)
    # the state table: each total on the line of its tier's label (a row or a record)
    r = max(d["ranks"], key=lambda r: r["peak"]["accelerator"]["bytes"])
    acc = _g(r["tiers"]["accelerator"]["total"])
    assert any(x.startswith(("total", "│ total")) and acc in x for x in lines), (acc, text)
