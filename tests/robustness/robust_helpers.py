"""Helpers shared by the robustness tests (profiles are registered in conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
from tests.conftest import CORPUS  # noqa: E402  (tests/data/corpus, in the repo)

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
#: Random variants of each mutation per corpus config (the fuzzer's own knob, by profile).
FUZZ_ROUNDS = {"ci": 1, "long": 12}.get(PROFILE, 1)


def corpus_configs() -> list[Path]:
    """Every config in the corpus, tests/data/corpus (not the MANIFEST)."""
    files = sorted(p for p in CORPUS.iterdir() if p.is_file() and p.name != "MANIFEST.tsv")
    assert files, f"no corpus configs in {CORPUS}"
    return files


def default_sigint() -> None:
    """``preexec_fn`` for a child a test sends SIGINT: SIGINT back to its default, whatever the test runner
    inherited. A runner started as a shell's background job has SIGINT ignored (POSIX: asynchronous lists in a
    non-interactive shell), its children inherit that, and Python then installs no KeyboardInterrupt handler:
    the Ctrl-C tests saw the signal vanish (a clean-clone .ci/run started with `&`, 2026-12-07: 3 failures)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without launcher variables or test hooks that would change what the CLI sees."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "DS_ADVISOR_", "OMPI_", "PMI_"))
           and k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
                         "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")}
    env.update(extra)
    return env


def run_cli(args: list[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None,
            stdin: bytes | None = None, timeout: float = 300, preexec_fn=None) -> subprocess.CompletedProcess:
    """``python -m advisor ARGS`` as a real process (the console script's guard included)."""
    p = subprocess.run([sys.executable, "-m", "advisor", *args], env=env if env is not None else clean_env(),
                       cwd=cwd, input=stdin, capture_output=True, timeout=timeout, preexec_fn=preexec_fn)
    p.stdout = p.stdout.decode("utf-8", "replace")  # type: ignore[assignment]
    p.stderr = p.stderr.decode("utf-8", "replace")  # type: ignore[assignment]
    return p


