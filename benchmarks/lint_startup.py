"""Start-up benchmark: `ds-advisor lint` as a whole process, against baselines measured in the
same run: importing lint's dependencies alone (`python -c "import click, jsonschema, hjson"`:
the cost lint cannot avoid; target lint <= 1.5x it), `python -c "import deepspeed"` (what lint
must beat by 10x) and a bare `python -c pass` (the floor). Also times linting the whole corpus
in one call.

The lint and dependency runs alternate, one of each per round, so a busy machine slows both
alike; the medians and their ratio are printed.

Run: python benchmarks/lint_startup.py [--repeat 9]
Prints medians and the ratios; asserts nothing (timings are reported, not tested).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], repeat: int) -> float:
    """Median wall seconds of ``repeat`` runs of ``cmd`` (output discarded)."""
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


#: The third-party packages ``lint`` needs (click: the CLI; jsonschema: the schema; hjson:
#: DeepSpeed's own config reader). Their import is the floor of lint's start-up.
LINT_DEPENDENCIES = ("click", "jsonschema", "hjson")


def alternating(cmds: list[list[str]], repeat: int) -> list[float]:
    """Median wall seconds of each command, running them in turn ``repeat`` times."""
    runs: list[list[float]] = [[] for _ in cmds]
    for _ in range(repeat):
        for i, cmd in enumerate(cmds):
            t0 = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            runs[i].append(time.perf_counter() - t0)
    return [statistics.median(r) for r in runs]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    # The console script next to this interpreter, run by it: a pyenv/asdf shim on PATH adds a
    # shell wrapper's start-up that the dependency baseline (sys.executable -c) does not pay.
    script = Path(sys.executable).with_name("ds-advisor")
    exe = str(script) if script.is_file() else shutil.which("ds-advisor")
    lint = [sys.executable, exe] if exe and script.is_file() else ([exe] if exe else [sys.executable, "-m", "advisor"])
    # Byte-compile the package first, as installing a wheel does: with PYTHONDONTWRITEBYTECODE
    # (or a read-only checkout) every run would otherwise compile the advisor's sources again,
    # while the dependencies were compiled when pip installed them.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "advisor")], stdout=subprocess.DEVNULL,
                   check=False)
    config = str(ROOT / "sample_configs" / "zero3_cpu_offload.json")

    deps_cmd = [sys.executable, "-c", "import " + ", ".join(LINT_DEPENDENCIES)]
    bare, deps, lint_one = alternating([[sys.executable, "-c", "pass"], deps_cmd, lint + ["lint", config]],
                                       args.repeat)
    try:
        import importlib.util
        has_ds = importlib.util.find_spec("deepspeed") is not None
    except Exception:
        has_ds = False
    ds = timed([sys.executable, "-c", "import deepspeed"], max(1, args.repeat // 2)) if has_ds else None
    corpus = ROOT / "tests" / "data" / "corpus"
    corpus_t = timed(lint + ["lint", "--fail-on", "never", str(corpus)], args.repeat) if corpus.is_dir() else None

    print(f"bare interpreter (python -c pass):   {bare * 1000:8.1f} ms")
    print(f"import {', '.join(LINT_DEPENDENCIES)} alone:  {deps * 1000:8.1f} ms")
    print(f"ds-advisor lint, one config:         {lint_one * 1000:8.1f} ms   = {lint_one / bare:5.2f} x bare start")
    print(f"lint / its dependencies alone:       {lint_one / deps:8.2f} x   (target <= 1.5)")
    if ds is not None:
        print(f"python -c 'import deepspeed':        {ds * 1000:8.1f} ms   lint/deepspeed = {lint_one / ds:5.3f}"
              f" (target < 0.1)")
    else:
        print("deepspeed not installed: install the [engine] extra for the deepspeed baseline")
    if corpus_t is not None:
        n = sum(1 for p in corpus.iterdir() if p.suffix != ".tsv")
        print(f"ds-advisor lint, whole corpus ({n} files, one call): {corpus_t * 1000:8.1f} ms (target < 1000 ms)")


if __name__ == "__main__":
    main()
