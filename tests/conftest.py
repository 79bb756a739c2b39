"""Shared test fixtures: paths to the repo, the corpus and the cases, and a CLI runner.

The test data lives in the repository, so a plain clone runs the whole suite:

- ``tests/data/corpus/``: real DeepSpeed configs from public repositories, one file each, with
  ``MANIFEST.tsv`` giving the repository, path, commit and license of every file and a note on
  the mistakes it holds;
- ``tests/data/cases/``: the user-report cases (``CNN-name/`` with ``case.md`` and
  ``expect.json``; ``tests/data/cases/README.md`` describes the format).

Both were copied from the project's shared folder (``../shared/corpus/real_configs`` and
``../shared/cases``); the in-repo copy is the one the tests read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
CASES = DATA / "cases"
CORPUS = DATA / "corpus"
SAMPLES = ROOT / "sample_configs"


#: Environment variables that change a runtime-overhead term: the CLI tests run without them.
OVERHEAD_ENV = ("NCCL_BUFFSIZE", "NCCL_MAX_NCHANNELS", "CUDA_MODULE_LOADING", "PYTORCH_CUDA_ALLOC_CONF")


def run_cli(args: list[str], cwd: str | Path | None = None, env: dict | None = None,
            stdin: str | bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``ds-advisor ARGS`` as a real process (python -m advisor), capturing text output."""
    e = dict(os.environ)
    e.pop("WORLD_SIZE", None)
    e.pop("SLURM_NTASKS", None)
    e.pop("OMP_NUM_THREADS", None)  # the CPU optimizer step reads it (advisor.cluster.launch.omp_threads)
    for v in OVERHEAD_ENV:  # the runtime-overhead terms read these (advisor.cluster.overhead)
        e.pop(v, None)
    if env:
        e.update(env)
    inp = stdin.encode() if isinstance(stdin, str) else stdin
    p = subprocess.run([sys.executable, "-m", "advisor", *args], cwd=cwd, env=e, input=inp,
                       capture_output=True, timeout=timeout)
    p.stdout = p.stdout.decode("utf-8", "replace")  # type: ignore[assignment]
    p.stderr = p.stderr.decode("utf-8", "replace")  # type: ignore[assignment]
    return p


def run_group(cmd: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    """Run ``cmd`` like ``subprocess.run(capture_output=True, text=True)``, but in its own process
    group through :func:`advisor.engine.measure.run_process_group`: on timeout (``timeout``
    seconds) the whole launch (launcher, torchrun ranks in their own sessions, op builds) is ended,
    not only the direct child as ``subprocess.run(timeout=...)`` does, and the test fails with the
    tail of the output."""
    import tempfile

    from advisor.engine.measure import run_process_group

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        rc = run_process_group(cmd, timeout, stdout=out, stderr=err, **kw)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if rc is None:
        pytest.fail(f"timed out after {timeout:g} s, process group ended: {cmd[:4]}\n"
                    f"{(stdout + stderr)[-3000:]}")
    return subprocess.CompletedProcess(cmd, rc, stdout, stderr)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed), for torchrun's
    --master_port in the engine tests."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_json(args: list[str], **kw) -> tuple[int, dict]:
    p = run_cli(args, **kw)
    try:
        return p.returncode, json.loads(p.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (rc={p.returncode}): {p.stdout[:500]} {p.stderr[:500]}")


@pytest.fixture(autouse=True)
def _content_memos_empty():
    """The process-wide memos keyed by content (``state._OFFLOAD_RUNS_BY_CONTENT``, ``timeline._LIVE_MASKS``) start
    empty in every test: a test's reference path never reads what an earlier test kept."""
    from advisor.ledger import state, timeline
    state._OFFLOAD_RUNS_BY_CONTENT.clear()
    timeline._LIVE_MASKS.clear()
    yield


@pytest.fixture
def cli():
    return run_cli
