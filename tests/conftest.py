"""Shared test fixtures: paths to the repo, the shared corpus and cases, and a CLI runner.

The shared corpus and cases live in ``../shared`` beside the checkout (where CI puts them), or
wherever ``DS_ADVISOR_SHARED`` points. Without them, every test module that reads them is
skipped with that reason (the others still run), instead of failing at collection.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DS_ADVISOR_SHARED") or (ROOT / ".." / "shared")).resolve()
HAVE_SHARED = (SHARED / "cases").is_dir() and (SHARED / "corpus" / "real_configs").is_dir()
if not HAVE_SHARED:  # empty stand-ins, so modules that list the corpus at import still load
    # A fixed path: pytest loads this file as ``conftest`` and tests import it as
    # ``tests.conftest``; both must name the same stand-in for the skip below to match.
    import tempfile
    SHARED = Path(tempfile.gettempdir()) / "ds-advisor-no-shared"
    (SHARED / "cases").mkdir(parents=True, exist_ok=True)
    (SHARED / "corpus" / "real_configs").mkdir(parents=True, exist_ok=True)
CASES = SHARED / "cases"
CORPUS = SHARED / "corpus" / "real_configs"
SAMPLES = ROOT / "sample_configs"


def _uses_shared(module) -> bool:
    return any(isinstance(v, (str, Path)) and str(v).startswith(str(SHARED)) for v in vars(module).values())


def pytest_collection_modifyitems(config, items):
    if HAVE_SHARED:
        return
    skip = pytest.mark.skip(reason="../shared (corpus and cases) not found beside the checkout; "
                                   "set DS_ADVISOR_SHARED to its folder")
    for item in items:
        mod = getattr(item, "module", None)
        if mod is not None and _uses_shared(mod):
            item.add_marker(skip)


def run_cli(args: list[str], cwd: str | Path | None = None, env: dict | None = None,
            stdin: str | bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``ds-advisor ARGS`` as a real process (python -m advisor), capturing text output."""
    e = dict(os.environ)
    e.pop("WORLD_SIZE", None)
    e.pop("SLURM_NTASKS", None)
    if env:
        e.update(env)
    inp = stdin.encode() if isinstance(stdin, str) else stdin
    p = subprocess.run([sys.executable, "-m", "advisor", *args], cwd=cwd, env=e, input=inp,
                       capture_output=True, timeout=timeout)
    p.stdout = p.stdout.decode("utf-8", "replace")  # type: ignore[assignment]
    p.stderr = p.stderr.decode("utf-8", "replace")  # type: ignore[assignment]
    return p


def run_json(args: list[str], **kw) -> tuple[int, dict]:
    p = run_cli(args, **kw)
    try:
        return p.returncode, json.loads(p.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (rc={p.returncode}): {p.stdout[:500]} {p.stderr[:500]}")


@pytest.fixture
def cli():
    return run_cli
