"""Start-up benchmark: `ds-advisor lint` as a whole process, against two baselines measured in
the same run: `python -c "import deepspeed"` (what lint must beat by 10x) and a bare
`python -c pass` (the floor). Also times linting the whole shared corpus in one call.

Run: python benchmarks/lint_startup.py [--repeat 5]
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
SHARED = ROOT / ".." / "shared"


def timed(cmd: list[str], repeat: int) -> float:
    """Median wall seconds of ``repeat`` runs of ``cmd`` (output discarded)."""
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    exe = shutil.which("ds-advisor")
    lint = [exe] if exe else [sys.executable, "-m", "advisor"]
    config = str(ROOT / "sample_configs" / "zero3_cpu_offload.json")

    bare = timed([sys.executable, "-c", "pass"], args.repeat)
    lint_one = timed(lint + ["lint", config], args.repeat)
    try:
        import importlib.util
        has_ds = importlib.util.find_spec("deepspeed") is not None
    except Exception:
        has_ds = False
    ds = timed([sys.executable, "-c", "import deepspeed"], max(1, args.repeat // 2)) if has_ds else None
    corpus = SHARED / "corpus" / "real_configs"
    corpus_t = timed(lint + ["lint", "--fail-on", "never", str(corpus)], args.repeat) if corpus.is_dir() else None

    print(f"bare interpreter (python -c pass):   {bare * 1000:8.1f} ms")
    print(f"ds-advisor lint, one config:         {lint_one * 1000:8.1f} ms   = {lint_one / bare:5.2f} x bare start")
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
