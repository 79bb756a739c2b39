"""estimate and check fold an HF Trainer config's "auto" findings into the one A001 line lint
prints, whose fix reruns that command with --hf (a newcomer's `estimate` without --hf got four A001
errors whose fixes said "remove train_batch_size" / "set ... to an integer"). JSON keeps each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CFG = "sample_configs/hf_trainer_zero3_auto.json"


def _autos(o) -> int:
    """The "auto" values in the file, counted by hand from its JSON."""
    if isinstance(o, dict):
        return sum(_autos(v) for v in o.values())
    if isinstance(o, list):
        return sum(_autos(v) for v in o)
    return o == "auto"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True, text=True, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "400", "NO_COLOR": "1"})


@pytest.mark.parametrize("command", ["estimate", "check"])
def test_folded_like_lint(command):
    n = _autos(json.loads((ROOT / CFG).read_text()))
    r = _run(command, CFG, "--model", "llama-3-8b", "--world-size", "8", "--seq-len", "2048")
    out = r.stdout
    a001 = [x for x in out.splitlines() if " A001 " in x]
    assert len(a001) == 1, out
    assert f'{n} values are "auto"' in a001[0], out
    assert f"ds-advisor {command} {CFG} --hf" in out, out
    assert "remove train_batch_size" not in out and "to an integer" not in out, out
    lint = _run("lint", CFG).stdout  # the same folded line lint prints
    assert [x for x in lint.splitlines() if " A001 " in x][0].split(" A001 ", 1)[1] == a001[0].split(" A001 ", 1)[1]
    # JSON keeps every finding
    j = json.loads(_run(command, CFG, "--model", "llama-3-8b", "--world-size", "8", "--seq-len", "2048",
                        "--format", "json").stdout)
    assert sum(1 for f in j["findings"] if f["code"] in ("A001", "A002", "A003")) == n
