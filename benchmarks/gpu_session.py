"""One device call for a lent GPU (issues 15, 18, 23): runs ``benchmarks/gpu_compute.py`` (the step-time
model's compute term against timed forward/backward passes, NCCL at world size 1) and then
``benchmarks/gpu_peak.py`` (estimate's accelerator peak, overhead terms, compute term and host tier
against DeepSpeed 0.19.8 runs) under one time budget, and writes everything to ``--out`` ($OUT):
``gpu_compute-*.json``, ``gpu_peak-*.json``, ``gpu_session.log`` (both scripts' output) and
``gpu_session.json`` (what ran, each step's exit status and seconds, the wheel install, and a summary:
measured / model compute ratios and implied MFU, the host tier's census / estimate, the
runtime-overhead block). Four files: inside the device tool's 8-file limit.

Order (priority): check CUDA (none: say so, exit 2, write nothing); install the wheels in ``--wheels``
(default ``.whl``, made by ``benchmarks/gpu_peak_wheels.sh``) into /tmp/site when ``import deepspeed``
fails; set ``TORCH_CUDA_ARCH_LIST`` to the card's capability when unset or unparsable by DeepSpeed
(:func:`arch_list`: the image's '9.0a' breaks 0.19.8's ``op_builder/builder.py`` l.710 / l.744 ``int()``
parse of the arch list); start gpu_peak.py's
JIT builds of fused_adam and cpu_adam at ``nice 19`` (unless ``--no-prebuild``) so they use the cores
gpu_compute.py leaves idle (gpu_peak.py's own build then finds them in TORCH_EXTENSIONS_DIR or waits on
torch's build lock; gpu_session.json says the compute cells ran beside them); gpu_compute.py with
:func:`plan_budget`'s first share; gpu_peak.py with the rest (without deepspeed it is skipped and said so).

usage: python3 benchmarks/gpu_session.py [--budget-s 420] [--out DIR] [--wheels DIR] [--quick] [--no-prebuild]
                                         [--dry-run]
  --budget-s  seconds for the whole session, install included (60-570; default 420: the device
              tool's 10-minute call with the machine's start and the transfers beside it)
  --dry-run   print the plan (steps, budgets) as JSON and exit 0; needs no GPU, writes nothing
Exit codes: 0 ran (each step's own status is in gpu_session.json), 2 bad arguments / no CUDA device /
no --out and no $OUT.

Stdlib only: it runs before the wheels are installed.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
T0 = time.monotonic()
SITE = "/tmp/site"
#: seconds kept back from gpu_peak.py's cell budget: its last cell may run past the budget (one cell of
#: the small model takes about 20-40 s with DeepSpeed's start-up) and the JSON must still be written
PEAK_OVERRUN_S = 60.0
#: gpu_compute.py's share of the time left after the install, at most COMPUTE_MAX_S (its six cells,
#: one process, take well under a minute on an H100-class card; the rest is DeepSpeed's cells)
COMPUTE_SHARE, COMPUTE_MAX_S, COMPUTE_MIN_S = 0.25, 90.0, 20.0
BUDGET_RANGE = (60.0, 570.0)


def plan_budget(total_s: float, elapsed_s: float, compute_done: bool = False) -> dict:
    """Seconds for each step given the session's ``total_s`` and the ``elapsed_s`` already spent:
    ``compute`` (gpu_compute.py's --budget-s; 0 once ``compute_done``), ``peak`` (gpu_peak.py's
    --budget-s: the time left after compute, less PEAK_OVERRUN_S for its last cell and its write; 0
    when under 30 s, and it is skipped)."""
    left = max(0.0, total_s - elapsed_s)
    compute = 0.0 if compute_done else min(COMPUTE_MAX_S, max(COMPUTE_MIN_S, COMPUTE_SHARE * left), left)
    peak = left - compute - PEAK_OVERRUN_S
    return {"left": left, "compute": compute, "peak": peak if peak >= 30.0 else 0.0}


def arch_list(value: str | None, capability: str) -> str:
    """The ``TORCH_CUDA_ARCH_LIST`` DeepSpeed 0.19.8's JIT builder can parse: ``value`` when every entry
    (';' or space separated) is MAJOR.MINOR with an optional '+PTX', as ``op_builder/builder.py`` l.710
    and l.744 ``int()`` each part; else ``capability`` (the card's, 'MAJOR.MINOR')."""
    entries = (value or "").replace(" ", ";").split(";")
    entries = [e.strip() for e in entries if e.strip()]

    def ok(e: str) -> bool:
        parts = e.split(".")
        return len(parts) == 2 and all(x.split("+")[0].isdigit() for x in parts) and e.count("+") <= 1 and (
            "+" not in e or e.endswith("+PTX"))

    return value.strip() if entries and all(ok(e) for e in entries) else capability  # type: ignore[union-attr]


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The arguments; a bad one ends with argparse's one-line message and exit 2."""
    ap = argparse.ArgumentParser(prog="gpu_session.py", description="one device call: gpu_compute.py then gpu_peak.py")
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--out", default=os.environ.get("OUT"))
    ap.add_argument("--wheels", default=str(ROOT / ".whl"))
    ap.add_argument("--quick", action="store_true", help="each script's --quick smoke set")
    ap.add_argument("--no-prebuild", action="store_true", help="no op builds beside gpu_compute.py")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    lo, hi = BUDGET_RANGE
    if not lo <= a.budget_s <= hi:  # NaN fails both comparisons too
        ap.error(f"--budget-s {a.budget_s:g}: must be {lo:g}-{hi:g} seconds (the device tool runs a command 600 s at most)")
    if not a.out and not a.dry_run:
        ap.error("--out not given and $OUT unset: nowhere to write the results")
    return a


def _py(code: str, env: dict, timeout: float = 120.0) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None


def cuda_capability(env: dict) -> str | None:
    """'MAJOR.MINOR' of device 0 when torch sees a CUDA device, else None (no torch, no device)."""
    p = _py("import torch,sys\nif not torch.cuda.is_available(): sys.exit(3)\n"
            "print('%d.%d' % torch.cuda.get_device_capability(0))", env)
    return p.stdout.strip() if p is not None and p.returncode == 0 and p.stdout.strip() else None


def summarize(out: Path) -> dict:
    """What the session's JSON files say, in brief: per gpu_compute / gpu_peak row the measured / model
    compute ratio and implied MFU, gpu_peak's tracked / max_allocated and host census / estimate
    ratios, and each file's MFU summary and runtime_overhead block."""
    s: dict = {}
    for kind in ("gpu_compute", "gpu_peak"):
        files = sorted(glob.glob(str(out / f"{kind}-*.json")))
        if not files:
            continue
        doc = json.loads(Path(files[-1]).read_text())
        rows = []
        for r in doc.get("rows", []):
            c = (r.get("compute") or {}).get("total") or {}
            h = r.get("host_tier") or {}
            rows.append({k: r.get(k) for k in ("model_name", "stage", "offload", "checkpointing", "seq") if k in r}
                        | {"compute_measured_over_model": c.get("measured_over_model"),
                           "implied_mfu": c.get("implied_mfu"),
                           "tracked_over_max_allocated": r.get("tracked_over_max_allocated"),
                           "host_pinned_census_over_estimate": h.get("census_over_estimate_pinned"),
                           "host_pageable_census_over_estimate": h.get("census_over_estimate_pageable")})
        s[kind] = {"file": Path(files[-1]).name, "gpu": doc.get("gpu"), "mfu": doc.get("mfu"),
                   "runtime_overhead": doc.get("runtime_overhead"), "not_run": len(doc.get("not_run", [])),
                   "rows": rows}
    return s


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    steps = [("gpu_compute", "benchmarks/gpu_compute.py"), ("gpu_peak", "benchmarks/gpu_peak.py")]
    if a.dry_run:
        print(json.dumps({"budget_s": a.budget_s, "out": a.out, "wheels": a.wheels, "steps": [s for s, _ in steps],
                          "budget_at_start": plan_budget(a.budget_s, 0.0)}))
        return 0
    cap = cuda_capability(env)
    if cap is None:
        print("gpu_session: no CUDA device here (or no torch); nothing measured, nothing written "
              "(run it through the device tool on a lent GPU)", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "gpu_session.log", "a", buffering=1)
    record: dict = {"budget_s": a.budget_s, "capability": cap, "steps": []}

    def say(msg: str) -> None:
        line = f"[{time.monotonic() - T0:6.1f} s] {msg}"
        print(line, flush=True)
        log.write(line + "\n")

    # deepspeed and what ds-advisor imports (pydantic, hjson, jsonschema): the image lacks them
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT), env.get("PYTHONPATH", "")) if x)
    have = _py("import deepspeed, pydantic, hjson, jsonschema", env)
    if have is None or have.returncode != 0:
        wheels = sorted(glob.glob(os.path.join(a.wheels, "*.whl")))
        say(f"deepspeed / ds-advisor's imports missing; installing {len(wheels)} wheels from {a.wheels}")
        if wheels:
            p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                                "--no-cache-dir", "--upgrade", "--target", SITE, *wheels],
                               capture_output=True, text=True)
            record["install"] = {"rc": p.returncode, "wheels": [os.path.basename(w) for w in wheels],
                                 "tail": (p.stdout + p.stderr)[-1500:]}
            env["PYTHONPATH"] = os.pathsep.join((SITE, env["PYTHONPATH"]))
        have = _py("import deepspeed, pydantic, hjson, jsonschema", env)
    record["deepspeed_importable"] = have is not None and have.returncode == 0
    if not record["deepspeed_importable"]:
        say("deepspeed still not importable: " + ((have.stderr if have else "") or "")[-400:])
    was = env.get("TORCH_CUDA_ARCH_LIST")
    env["TORCH_CUDA_ARCH_LIST"] = arch_list(was, cap)  # builder.py l.710 int()-parses it; the image may say '9.0a'
    record["torch_cuda_arch_list"] = {"was": was, "set": env["TORCH_CUDA_ARCH_LIST"]}
    say(f"capability {cap}, TORCH_CUDA_ARCH_LIST {was!r} -> {env['TORCH_CUDA_ARCH_LIST']!r}")

    builds: dict = {}
    if record["deepspeed_importable"] and not a.no_prebuild:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import gpu_peak  # stdlib-only at import: its BUILD snippet, the one statement of the ops it needs

        nice = ["nice", "-n", "19"] if shutil.which("nice") else []
        for op in ("fused_adam", "cpu_adam"):
            builds[op] = subprocess.Popen([*nice, sys.executable, "-c", gpu_peak.BUILD, op], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        say("op builds started at nice 19 beside gpu_compute.py: " + ", ".join(builds))
    record["builds_beside_compute"] = sorted(builds)

    for name, script in steps:
        b = plan_budget(a.budget_s, time.monotonic() - T0, compute_done=name != "gpu_compute")
        budget = b["compute"] if name == "gpu_compute" else b["peak"]
        if name == "gpu_peak":
            record["prebuild"] = {}
            for op, bp in builds.items():
                try:
                    text = bp.communicate(timeout=max(1.0, min(300.0, b["left"] - PEAK_OVERRUN_S)))[0]
                    record["prebuild"][op] = {"rc": bp.returncode, "tail": text[-600:]}
                except subprocess.TimeoutExpired:
                    bp.kill()
                    record["prebuild"][op] = {"rc": None, "tail": "killed: past the budget"}
                say(f"prebuild {op}: rc {record['prebuild'][op]['rc']}")
            b = plan_budget(a.budget_s, time.monotonic() - T0, compute_done=True)
            budget = b["peak"]
        if name == "gpu_peak" and not record["deepspeed_importable"]:
            record["steps"].append({"step": name, "skipped": "deepspeed not importable"})
            continue
        if budget <= 0:
            record["steps"].append({"step": name, "skipped": f"budget ({b['left']:.0f} s left)"})
            say(f"{name}: skipped, {b['left']:.0f} s left")
            continue
        cmd = [sys.executable, script, "--budget-s", f"{budget:.0f}", "--out", str(out)] + (["--quick"] if a.quick else [])
        say(f"{name}: --budget-s {budget:.0f}")
        t = time.monotonic()
        try:
            p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                               timeout=budget + PEAK_OVERRUN_S + 30)
            rc: int | None = p.returncode
        except subprocess.TimeoutExpired:
            rc = None
        record["steps"].append({"step": name, "rc": rc, "budget_s": budget, "seconds": time.monotonic() - t})
        say(f"{name}: rc {rc} after {time.monotonic() - t:.0f} s")
    record["seconds_total"] = time.monotonic() - T0
    record["summary"] = summarize(out)
    (out / "gpu_session.json").write_text(json.dumps(record, indent=1))
    say(f"wrote {out / 'gpu_session.json'}")
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
