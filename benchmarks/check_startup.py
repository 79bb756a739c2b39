"""Start-up benchmark for the pre-launch gate: `ds-advisor check` as a whole process, against a
bare `python -c pass` measured in the same run.

Target: check answers in under half a second on a node (it runs first in every job script, on
every node). Two runs are timed:

* with a stand-in `nvidia-smi` first on PATH (a shell script printing 8 x H100 in the real CSV
  format; a real nvidia-smi adds its own ~50-300 ms, which this machine may not have), under a
  torchrun-like environment (WORLD_SIZE, LOCAL_WORLD_SIZE, RANK);
* with no accelerator tool at all and --gpu-memory (the warning path).

Run: python benchmarks/check_startup.py [--repeat 5] [--config PATH] [--params N]
Prints medians, the ratio to a bare interpreter start, and the exit codes; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMI = "#!/bin/sh\nfor i in 0 1 2 3 4 5 6 7; do echo \"$i, NVIDIA H100 80GB HBM3, 81559, 0\"; done\n"


def timed(cmd: list[str], repeat: int, env: dict[str, str] | None = None) -> tuple[float, int]:
    """Median wall seconds of ``repeat`` runs of ``cmd`` (output discarded), and the last exit code."""
    runs, rc = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False).returncode
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), rc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--config", default=str(ROOT / "sample_configs" / "zero2.json"))
    ap.add_argument("--params", default="7000000000")
    args = ap.parse_args()
    # The console script next to this interpreter (a pyenv/asdf shim on PATH adds its own start-up).
    script = Path(sys.executable).parent / "ds-advisor"
    exe = str(script) if script.exists() else shutil.which("ds-advisor")
    cli = [exe] if exe else [sys.executable, "-m", "advisor"]
    check = cli + ["check", args.config, "--params", args.params]

    with tempfile.TemporaryDirectory() as tmp:
        smi = Path(tmp) / "nvidia-smi"
        smi.write_text(SMI)
        smi.chmod(0o755)
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("SLURM_", "CUDA_VISIBLE", "ROCR_VISIBLE")) and k not in ("WORLD_SIZE", "RANK")}
        env_smi = {**base, "PATH": f"{tmp}:{base.get('PATH', '/usr/bin:/bin')}",
                   "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8", "RANK": "0"}
        env_none = {**base, "PATH": "/usr/bin:/bin", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8", "RANK": "0"}
        bare, _ = timed([sys.executable, "-c", "pass"], args.repeat)
        with_smi, rc1 = timed(check, args.repeat, env_smi)
        no_tool, rc2 = timed(check + ["--gpu-memory", "80GB"], args.repeat,
                             {**env_none, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})

    print(f"bare interpreter (python -c pass):        {bare * 1000:8.1f} ms")
    print(f"ds-advisor check, stand-in nvidia-smi:    {with_smi * 1000:8.1f} ms  = {with_smi / bare:5.2f} x bare start"
          f"  (exit {rc1}; target < 500 ms: {'met' if with_smi < 0.5 else 'NOT met'})")
    print(f"ds-advisor check, no probe, --gpu-memory: {no_tool * 1000:8.1f} ms  = {no_tool / bare:5.2f} x bare start"
          f"  (exit {rc2})")
    if 2 in (rc1, rc2):
        print("note: exit 2 means check could not run to the end (e.g. the ledger is not implemented yet)")


if __name__ == "__main__":
    main()
