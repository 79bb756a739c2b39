"""Every user-report case in tests/data/cases, run by name from its expect.json.

One test per case folder (``test_case[C01-misplaced-offload]`` ...): it runs the folder's
``command`` through the real CLI (cwd = the folder), then its ``also`` command if any, and checks
what expect.json says (format: tests/data/cases/README.md):

- ``exit_code`` (when not null);
- every expected finding: one with that pointer and severity, whose message or fix contains each
  word of ``mentions``;
- ``absent``: no error or warning at those pointers;
- ``figures``: each number, read from estimate's JSON by the extractor of that name in
  ``tests.test_cases_estimate.FIGURES``, within ``rel_tol``. A figure without an extractor fails
  (a new case cannot pass silently).

The expectations were worked out by hand in each case.md; they are not the tool's output.
A folder without a test fails :func:`test_every_case_folder_is_run`.

Cases whose feature is not built yet are marked ``xfail(strict=True)`` in :data:`PENDING`, with
the issue that builds it: once the feature lands the case passes, the strict xfail fails, and
the entry must be deleted.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import CASES, run_cli
from tests.test_cases_estimate import FIGURES

CASE_DIRS = sorted(p.name for p in CASES.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))

#: case folder -> why it cannot pass yet (the issue that builds the feature)
PENDING = {
}


def _findings(cmd: str, out: dict) -> list[dict]:
    if cmd == "lint":
        return [f for file in out["files"] for f in file["findings"]]
    return out["findings"]


def _run(case: str, exp: dict) -> None:
    folder = CASES / case
    p = run_cli(exp["command"], cwd=folder)
    where = f"{case}: ds-advisor {' '.join(exp['command'])}"
    assert "Traceback" not in p.stderr, f"{where}\n{p.stderr[-2000:]}"
    if exp.get("exit_code") is not None:
        assert p.returncode == exp["exit_code"], f"{where}: exit {p.returncode}\n{p.stderr[-1000:]}"
    try:
        out = json.loads(p.stdout)
    except ValueError:
        raise AssertionError(f"{where}: not JSON (exit {p.returncode}): {p.stdout[:300]} {p.stderr[-500:]}")
    got = _findings(exp["command"][0], out)
    brief = [(f["code"], f["pointer"], f["severity"]) for f in got]
    for want in exp.get("findings", []):
        hits = [f for f in got if f["pointer"] == want["pointer"] and f["severity"] == want["severity"]]
        assert hits, f"{where}: no {want['severity']} at {want['pointer']}; got {brief}"
        for word in want.get("mentions", []):
            assert any(word in f["message"] + " " + f["fix"] for f in hits), \
                f"{where}: {word!r} not in {[f['message'] + ' | ' + f['fix'] for f in hits]}"
    for ptr in exp.get("absent", []):
        bad = [b for b in brief if b[1] == ptr and b[2] in ("error", "warning")]
        assert not bad, f"{where}: expected nothing at {ptr}, got {bad}"
    for fig in exp.get("figures", []):
        assert fig["name"] in FIGURES, f"{where}: no extractor for figure {fig['name']!r} in test_cases_estimate.FIGURES"
        value = FIGURES[fig["name"]](out)
        tol = fig.get("rel_tol", 0.0)
        assert abs(value - fig["value"]) <= tol * fig["value"], f"{where}: {fig['name']} = {value}, expected {fig}"
    if "also" in exp:
        _run(case, exp["also"])


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=PENDING[c])) if c in PENDING else c
    for c in CASE_DIRS])
def test_case(case):
    _run(case, json.loads((CASES / case / "expect.json").read_text()))


def test_every_case_folder_is_run():
    """Every folder holds case.md and expect.json, and a test runs it (by name, above); PENDING names
    only folders that exist."""
    assert len(CASE_DIRS) >= 14, CASE_DIRS
    # the user-report cases handed over so far, by name: none may go missing from tests/data/cases
    assert {"C01-misplaced-offload", "C02-typo-nested-key", "C03-bf16-lossscale-keys", "C04-auto-outside-hf",
            "C05-zero2-bucket-pair", "C06-zero2-32b-8gpu", "C07-nvme-param-buffer-too-small",
            "C08-pinned-buffers-exceed-host", "C09-checkpoint-size-8b", "C10-nvme-writes-per-step",
            "C11-load-time-host-zero2", "C12-tensor-parallel-zero1", "C13-scheduler-zero-warmup",
            "C14-accelerate-json", "C15-trainer-zero3-resume-fewer-gpus"} <= set(CASE_DIRS)
    for c in CASE_DIRS:
        assert (CASES / c / "case.md").is_file() and (CASES / c / "expect.json").is_file(), c
        assert json.loads((CASES / c / "expect.json").read_text())["command"][0] in ("lint", "estimate"), c
    assert set(PENDING) <= set(CASE_DIRS)
