"""GPU validation of estimate's accelerator peak and the runtime-overhead terms (issue 18).

Runs a small Llama-style model (transformers' LlamaForCausalLM from a config built here: no
download) under DeepSpeed on ONE CUDA GPU, one fresh process per cell, and compares:

* estimate's accelerator need and tracked peak (``python -m advisor estimate --format json`` on
  the same config, the model's config.json and the same workload), with
* ``torch.cuda.max_memory_allocated`` (what the ledger + activations should equal),
  ``max_memory_reserved`` (adds the allocator's reserve: the ``allocator`` overhead term), and the
  driver's used memory from ``torch.cuda.mem_get_info`` (adds the CUDA context and loaded
  kernels: the ``cuda_context`` term; at world size 1 NCCL builds no ring buffers);
* the step-time model's compute term (estimate runs with ``--hardware PRESET``, the preset of the card
  the run found: ``gpu_compute.preset_for``) with the forward and backward DeepSpeed ran, timed with
  ``torch.cuda.Event`` (median of the timed steps after the warm-up steps; ``gpu_compute.compare``:
  measured / model, achieved TFLOP/s, implied MFU), and the whole step with the model's step time;
* the host tier (issue 15): estimate's ``host_split`` (pinned / pageable bytes the ledger puts on the
  host, ``ranks[0].host_split``) with what the process held after the timed steps: the pinned bytes of
  live CPU tensors and the pageable ones (a census of the tensors Python's garbage collector sees,
  storages counted once), torch's pinned-host allocator statistics (``torch.cuda.host_memory_stats``:
  its blocks are rounded up to powers of two, so its bytes exceed the tensors'), and /proc/self/status
  VmRSS / VmHWM at four points. What cannot be measured this way: pageable bytes held from C++ only
  (DeepSpeedCPUAdam's own buffers, glibc's cached free memory), which RSS counts beside torch's and
  CUDA's libraries and the model built on the CPU before ``deepspeed.initialize``; the ledger's host
  *peak* instant (the census is taken once, in the steady state after the steps).

Cells: ZeRO stage 0-3 x offload_optimizer none/cpu (cpu only at stage >= 1) x activation
checkpointing off/on x sequence length 512/2048, micro-batch 2, bf16, AdamW (DeepSpeed's
FusedAdam, or DeepSpeedCPUAdam when offloaded), 2 warm-up + 3 timed steps each: 28 cells, ordered so the first
dozen cover every stage, offload, checkpointing and length. Cells start while ``--budget-s``
(default 270 s from the script's start) has time left for one more; the rest are listed as not
run. Before the first cell it builds DeepSpeed's fused_adam and cpu_adam ops in parallel (JIT,
cached in TORCH_EXTENSIONS_DIR) and runs every cell's estimate on the CPU cores meanwhile.

It writes ``gpu_peak-<date>-<gpu>.json`` to ``--out`` (default ``$OUT`` when set, else
benchmarks/results/) with the GPU's name, the driver's memory.total in MiB and driver version
(nvidia-smi), torch and CUDA versions, each cell's figures, and ``runtime_overhead``: the
accelerator-preset block (``advisor/data/hardware_presets.json``) the run measured, for a person
to review and copy in: the CUDA context as the driver's used memory beyond the allocator's reserve
(median, min, max over the cells, MiB) and the allocator's reserve beyond the allocated peak as a
fraction of the allocated peak; and ``mfu``, the implied MFU over the cells (``gpu_compute.mfu_summary``).

Without a CUDA device it says so and exits 2: it never writes figures it did not measure.

On the device tool's GPUs (no network there; deepspeed, pydantic, hjson and jsonschema are not in
the image) it runs from ``benchmarks/gpu_session.py``, which installs the wheels of
``benchmarks/gpu_peak_wheels.sh`` (``.whl``, carried) and runs gpu_compute.py first: the one command
is in README.md, "GPU validation, one device call".

usage: python benchmarks/gpu_peak.py [--quick] [--budget-s 270] [--out DIR]
  --quick  stage 0 and 3 only, checkpointing on, seq 512 (a smoke run, under a minute)
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_compute  # noqa: E402  (benchmarks/gpu_compute.py: the model, the config, the compute comparison)

MODEL = gpu_compute.SMALL
MICRO = gpu_compute.MICRO
WARMUP, TIMED = 2, 3
T0 = time.monotonic()

CELL = r'''
import gc, json, os, statistics, sys, time, torch, deepspeed
from transformers import LlamaConfig, LlamaForCausalLM
cell = json.loads(sys.argv[1])
torch.cuda.set_device(0)
def proc_status():
    # VmRSS / VmHWM (resident now / its high-water mark) and VmLck / VmPin, bytes (proc(5))
    out = {}
    try:
        for ln in open("/proc/self/status"):
            k, _, v = ln.partition(":")
            if k in ("VmRSS", "VmHWM", "VmLck", "VmPin"):
                out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out
def host_stats():
    try:
        return {k: v for k, v in torch.cuda.host_memory_stats().items() if "bytes" in k}
    except Exception as e:
        return {"error": repr(e)}
def cpu_tensor_census():
    # live CPU tensors the garbage collector sees (Python-held: optimizer state, DeepSpeed's flat buffers),
    # storages counted once by data pointer; tensors held only from C++ are not seen
    seen, pinned, pageable = set(), 0, 0
    for o in gc.get_objects():
        try:
            if not isinstance(o, torch.Tensor) or o.device.type != "cpu" or o.is_meta:
                continue
            st = o.untyped_storage()
            ptr = st.data_ptr()
        except Exception:
            continue
        if ptr in seen or not ptr:
            continue
        seen.add(ptr)
        if o.is_pinned():
            pinned += st.nbytes()
        else:
            pageable += st.nbytes()
    return {"pinned": pinned, "pageable": pageable, "storages": len(seen)}
free0, total = torch.cuda.mem_get_info()
host = {"before_model": proc_status()}
cfg = LlamaConfig(**{k: v for k, v in cell["model"].items() if k not in ("model_type", "torch_dtype")})
cfg._attn_implementation = "sdpa"
model = LlamaForCausalLM(cfg)
if cell["checkpointing"]:
    model.gradient_checkpointing_enable()
host["before_initialize"] = proc_status()
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cell["ds_config"])
del model
gc.collect()
host["after_initialize"] = proc_status()
torch.cuda.reset_peak_memory_stats()
ids = torch.randint(0, cfg.vocab_size, (cell["micro"], cell["seq"]), device="cuda")
used_max = 0
fw, bw, sp = [], [], []
t = time.perf_counter()
for step in range(cell["warmup"] + cell["timed"]):
    a, b, c, d = (torch.cuda.Event(enable_timing=True) for _ in range(4))
    a.record()
    loss = engine(input_ids=ids, labels=ids).loss
    b.record()
    engine.backward(loss)
    c.record()
    engine.step()
    d.record()
    torch.cuda.synchronize()
    if step >= cell["warmup"]:
        fw.append(a.elapsed_time(b) / 1e3); bw.append(b.elapsed_time(c) / 1e3); sp.append(c.elapsed_time(d) / 1e3)
    free, _ = torch.cuda.mem_get_info()
    used_max = max(used_max, total - free)
seconds = time.perf_counter() - t
del loss
gc.collect()
host.update(after_steps=proc_status(), pinned_allocator=host_stats(), census=cpu_tensor_census())
print("RESULT " + json.dumps({"max_allocated": torch.cuda.max_memory_allocated(),
                              "max_reserved": torch.cuda.max_memory_reserved(),
                              "driver_used_max": used_max, "driver_used_before_init": total - free0,
                              "total": total, "device": torch.cuda.get_device_name(0),
                              "seconds_all_steps": seconds, "forward_s": statistics.median(fw),
                              "backward_s": statistics.median(bw), "step_s": statistics.median(sp),
                              "forward_all_s": fw, "backward_all_s": bw, "step_all_s": sp, "host": host}))
'''

BUILD = r'''
import sys
from deepspeed.ops.op_builder import CPUAdamBuilder, FusedAdamBuilder
{"cpu_adam": CPUAdamBuilder, "fused_adam": FusedAdamBuilder}[sys.argv[1]]().load(verbose=False)
print("built", sys.argv[1])
'''


ds_config = gpu_compute.ds_config


#: The first cells, chosen to cover every stage, offload, checkpointing setting and length early
#: (a run cut short by its budget still has each factor measured).
FIRST = [(3, "none", True, 2048), (0, "none", False, 512), (2, "none", True, 512), (1, "none", False, 2048),
         (3, "cpu", True, 512), (2, "cpu", False, 2048), (3, "none", False, 512), (0, "none", True, 2048),
         (1, "cpu", True, 2048), (2, "none", False, 2048), (3, "cpu", False, 2048), (1, "none", True, 512)]


def cells(quick: bool) -> list[dict]:
    """The cells in run order: FIRST, then the rest of the matrix (or the quick smoke set)."""
    if quick:
        order = [(0, "none", True, 512), (3, "none", True, 512)]
    else:
        full = [(s, o, c, q) for s in (0, 1, 2, 3) for o in (("none",) if s == 0 else ("none", "cpu"))
                for c in (False, True) for q in (512, 2048)]
        order = FIRST + [x for x in full if x not in FIRST]
    return [{"stage": s, "offload": o, "checkpointing": c, "seq": q} for s, o, c, q in order]


def estimate(cell: dict, workdir: Path, preset: str | None = None) -> dict:
    """estimate's JSON for ``cell`` (world size 1, the cell's workload; ``--hardware preset`` when given,
    which adds the step time the compute comparison reads); {"error": ...} when it fails."""
    cfg = workdir / f"ds-{cell['stage']}-{cell['offload']}.json"
    cfg.write_text(json.dumps(ds_config(cell["stage"], cell["offload"])))
    return gpu_compute.run_estimate(gpu_compute.estimate_cmd(cfg, workdir / "config.json", cell["seq"], MICRO,
                                                             cell["checkpointing"], preset))


def host_compare(est: dict, measured: dict) -> dict | None:
    """estimate's host tier (``ranks[0].host_split`` pinned / pageable, bytes) beside the cell's host
    measurements (the live-CPU-tensor census after the steps, the pinned allocator's bytes, VmRSS growth
    from before the model was built); None without both sides."""
    ranks = est.get("ranks") or []
    split = ranks[0].get("host_split") if ranks else None
    host = measured.get("host") or {}
    census = host.get("census")
    if not split or not census:
        return None
    alloc = host.get("pinned_allocator") or {}
    pinned_alloc = alloc.get("allocated_bytes.current", alloc.get("reserved_bytes.current"))
    rss0 = (host.get("before_model") or {}).get("VmRSS")
    rss1 = (host.get("after_steps") or {}).get("VmRSS")
    out = {"estimate_pinned": split.get("pinned", 0), "estimate_pageable": split.get("pageable", 0),
           "census_pinned": census["pinned"], "census_pageable": census["pageable"],
           "pinned_allocator_current": pinned_alloc,
           "rss_growth": (rss1 - rss0) if rss0 is not None and rss1 is not None else None}
    for k in ("pinned", "pageable"):
        e = out[f"estimate_{k}"]
        out[f"census_over_estimate_{k}"] = out[f"census_{k}"] / e if e else None
    return out


def nvidia_smi() -> dict:
    """The driver's view: name, memory.total (MiB), driver version; {} when nvidia-smi fails."""
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=30)
        name, mib, drv = [x.strip() for x in p.stdout.splitlines()[0].split(",")]
        return {"name": name, "memory_total_mib": int(mib), "driver_version": drv}
    except (OSError, IndexError, ValueError, subprocess.SubprocessError):
        return {}


def overhead_block(rows: list[dict], gpu: str, smi: dict, torch_v: str) -> dict | None:
    """The ``runtime_overhead`` preset block these rows measured (None without a measured row)."""
    ok = [r for r in rows if "max_allocated" in r.get("measured", {})]
    if not ok:
        return None
    ctx = [r["measured"]["driver_used_max"] - r["measured"]["max_reserved"] for r in ok]
    frac = [(r["measured"]["max_reserved"] - r["measured"]["max_allocated"]) / r["measured"]["max_allocated"] for r in ok]
    mib = 1 << 20
    return {"cuda_context_mib": [round(statistics.median(ctx) / mib), round(min(ctx) / mib), round(max(ctx) / mib)],
            "allocator_fraction": [round(statistics.median(frac), 3), round(min(frac), 3), round(max(frac), 3)],
            "source": f"benchmarks/gpu_peak.py on {gpu} ({datetime.date.today()}, driver "
                      f"{smi.get('driver_version', '?')}, torch {torch_v}), {len(ok)} cells at world size 1: CUDA context "
                      "= driver used - max_memory_reserved; allocator = (max_memory_reserved - max_memory_allocated) / "
                      "max_memory_allocated; median, min, max"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--budget-s", type=float, default=270.0, help="start no cell after this many seconds")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "results"))
    a = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu_peak: torch is not installed; nothing measured", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gpu_peak: no CUDA device here; nothing measured (run it through the device tool on a lent GPU)",
              file=sys.stderr)
        return 2
    smi = nvidia_smi()
    todo = cells(a.quick)
    rows: list[dict] = []
    not_run: list[dict] = []
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT="29517", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    preset = gpu_compute.preset_for(torch.cuda.get_device_name(0))
    with tempfile.TemporaryDirectory() as d, cf.ThreadPoolExecutor(8) as pool:
        work = Path(d)
        (work / "config.json").write_text(json.dumps(MODEL))
        # the ops' JIT builds (one each, in parallel) and every estimate, on the CPU cores
        builds = {op: pool.submit(subprocess.run, [sys.executable, "-c", BUILD, op], capture_output=True, text=True,
                                  env=env, timeout=300) for op in ("fused_adam", "cpu_adam")}
        ests = [pool.submit(estimate, c, work, preset) for c in todo]
        build_log = {}
        for op, f in builds.items():
            try:
                p = f.result()
                build_log[op] = {"rc": p.returncode, "tail": (p.stdout + p.stderr)[-600:]}
            except subprocess.SubprocessError as e:  # a build past its 300 s: the cells record their own errors
                build_log[op] = {"rc": None, "tail": str(e)[-600:]}
            print(f"build {op}: rc {build_log[op]['rc']} at {time.monotonic() - T0:.0f} s", flush=True)
        last = 0.0
        for cell, ef in zip(todo, ests):
            if time.monotonic() - T0 + max(last, 10.0) > a.budget_s:
                not_run.append(cell)
                continue
            t = time.monotonic()
            run = dict(cell, model=MODEL, micro=MICRO, warmup=WARMUP, timed=TIMED,
                       ds_config=ds_config(cell["stage"], cell["offload"]))
            # a hung cell may not eat the session: it ends a minute past the budget at the latest
            limit = max(30.0, min(240.0, a.budget_s + 60 - (time.monotonic() - T0)))
            try:
                p = subprocess.run([sys.executable, "-c", CELL, json.dumps(run)], capture_output=True, text=True,
                                   env=env, timeout=limit)
                stdout, stderr = p.stdout, p.stderr
            except subprocess.TimeoutExpired:
                stdout, stderr = "", f"cell timed out after {limit:.0f} s"
            last = time.monotonic() - t
            line = next((ln for ln in stdout.splitlines() if ln.startswith("RESULT ")), None)
            measured = json.loads(line[7:]) if line else {"error": (stderr or stdout)[-1500:]}
            est = ef.result()
            acc = next((f for f in est.get("fit", []) if f.get("tier") == "accelerator"), {})
            row = {**cell, "seconds": last, "measured": measured, "estimate_accelerator_need": acc.get("need"),
                   "estimate_tracked_peak": acc.get("tracked"),
                   "estimate_overhead": {o["key"]: o["bytes"] for o in acc.get("overhead", [])},
                   "estimate_error": est.get("error"),
                   "estimate_host_split": (est.get("ranks") or [{}])[0].get("host_split"),
                   "compute": gpu_compute.compare(measured, gpu_compute.model_compute(est)),
                   "host_tier": host_compare(est, measured)}
            if line and acc.get("tracked"):
                row["tracked_over_max_allocated"] = acc["tracked"] / max(1, measured["max_allocated"])
                row["need_over_driver_used"] = acc["need"] / max(1, measured["driver_used_max"])
                row["reserved_minus_allocated"] = measured["max_reserved"] - measured["max_allocated"]
                row["driver_minus_reserved"] = measured["driver_used_max"] - measured["max_reserved"]
            rows.append(row)
            print(json.dumps({k: row.get(k) for k in ("stage", "offload", "checkpointing", "seq", "seconds",
                                                      "tracked_over_max_allocated", "need_over_driver_used",
                                                      "reserved_minus_allocated", "driver_minus_reserved")}
                             | {"compute_ratio": (row["compute"] or {}).get("total", {}).get("measured_over_model"),
                                "implied_mfu": (row["compute"] or {}).get("total", {}).get("implied_mfu")}),
                  flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = next((r["measured"]["device"] for r in rows if "device" in r["measured"]), smi.get("name", "gpu"))
    name = f"gpu_peak-{datetime.date.today()}-{gpu.replace(' ', '_')}.json"
    doc = {"gpu": gpu, "preset": preset, "nvidia_smi": smi, "torch": torch.__version__, "cuda": torch.version.cuda,
           "seconds_total": time.monotonic() - T0, "builds": build_log, "rows": rows, "not_run": not_run,
           "runtime_overhead": overhead_block(rows, gpu, smi, torch.__version__),
           "mfu": gpu_compute.mfu_summary(rows)}
    (out / name).write_text(json.dumps(doc, indent=1))
    print(f"wrote {out / name}: {len(rows)} cells run, {len(not_run)} not run (budget), "
          f"{doc['seconds_total']:.0f} s; runtime_overhead: {json.dumps(doc['runtime_overhead'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
