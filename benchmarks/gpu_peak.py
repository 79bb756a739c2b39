"""GPU validation of estimate's accelerator peak and the runtime-overhead terms (issue 18).

Runs a small Llama-style model (transformers' LlamaForCausalLM from a config built here: no
download) under DeepSpeed on ONE CUDA GPU, one fresh process per cell, and compares:

* estimate's accelerator need and tracked peak (``python -m advisor estimate --format json`` on
  the same config, the model's config.json and the same workload), with
* ``torch.cuda.max_memory_allocated`` (what the ledger + activations should equal),
  ``max_memory_reserved`` (adds the allocator's reserve: the ``allocator`` overhead term), and the
  driver's used memory from ``torch.cuda.mem_get_info`` (adds the CUDA context and loaded
  kernels: the ``cuda_context`` term; at world size 1 NCCL builds no ring buffers).

Cells: ZeRO stage 0-3 x offload_optimizer none/cpu (cpu only at stage >= 1) x activation
checkpointing off/on x sequence length 512/2048, micro-batch 2, bf16, AdamW (DeepSpeed's
FusedAdam, or DeepSpeedCPUAdam when offloaded), 3 steps each: 28 cells, ordered so the first
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
fraction of the allocated peak.

Without a CUDA device it says so and exits 2: it never writes figures it did not measure.

On the device tool's H200 (no network there; deepspeed, pydantic, hjson and jsonschema are not in
its image), prepare the wheels here once, then run one command:

  sh benchmarks/gpu_peak_wheels.sh          # here: downloads them into .whl (ignored by git)
  run(carry=[".whl"], timeout_s=420, command=
      "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site
       .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 &&
       timeout 360 python3 benchmarks/gpu_peak.py")

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
MODEL = dict(model_type="llama", hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
             num_attention_heads=16, num_key_value_heads=8, vocab_size=32000, max_position_embeddings=4096,
             rms_norm_eps=1e-5, tie_word_embeddings=False, torch_dtype="bfloat16")
MICRO = 2
T0 = time.monotonic()

CELL = r'''
import json, os, sys, time, torch, deepspeed
from transformers import LlamaConfig, LlamaForCausalLM
cell = json.loads(sys.argv[1])
torch.cuda.set_device(0)
free0, total = torch.cuda.mem_get_info()
cfg = LlamaConfig(**{k: v for k, v in cell["model"].items() if k not in ("model_type", "torch_dtype")})
cfg._attn_implementation = "sdpa"
model = LlamaForCausalLM(cfg)
if cell["checkpointing"]:
    model.gradient_checkpointing_enable()
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cell["ds_config"])
torch.cuda.reset_peak_memory_stats()
ids = torch.randint(0, cfg.vocab_size, (cell["micro"], cell["seq"]), device="cuda")
used_max = 0
t = time.perf_counter()
for step in range(3):
    loss = engine(input_ids=ids, labels=ids).loss
    engine.backward(loss)
    engine.step()
    torch.cuda.synchronize()
    free, _ = torch.cuda.mem_get_info()
    used_max = max(used_max, total - free)
print("RESULT " + json.dumps({"max_allocated": torch.cuda.max_memory_allocated(),
                              "max_reserved": torch.cuda.max_memory_reserved(),
                              "driver_used_max": used_max, "driver_used_before_init": total - free0,
                              "total": total, "device": torch.cuda.get_device_name(0),
                              "seconds_3_steps": time.perf_counter() - t}))
'''

BUILD = r'''
import sys
from deepspeed.ops.op_builder import CPUAdamBuilder, FusedAdamBuilder
{"cpu_adam": CPUAdamBuilder, "fused_adam": FusedAdamBuilder}[sys.argv[1]]().load(verbose=False)
print("built", sys.argv[1])
'''


def ds_config(stage: int, offload: str) -> dict:
    zero: dict = {"stage": stage}
    if offload == "cpu":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    return {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "zero_optimization": zero,
            "steps_per_print": 1000}


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


def estimate(cell: dict, workdir: Path) -> dict:
    """estimate's JSON for ``cell`` (world size 1, the cell's workload); {"error": ...} when it fails."""
    cfg = workdir / f"ds-{cell['stage']}-{cell['offload']}.json"
    cfg.write_text(json.dumps(ds_config(cell["stage"], cell["offload"])))
    p = subprocess.run([sys.executable, "-m", "advisor", "estimate", str(cfg), "--model", str(workdir / "config.json"),
                        "--world-size", "1", "--seq-len", str(cell["seq"]), "--micro-batch", str(MICRO),
                        "--checkpointing", "full" if cell["checkpointing"] else "none", "--attention", "flash",
                        "--format", "json"], capture_output=True, text=True, cwd=ROOT, timeout=240)
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"error": (p.stderr or p.stdout)[-1500:]}


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
    with tempfile.TemporaryDirectory() as d, cf.ThreadPoolExecutor(8) as pool:
        work = Path(d)
        (work / "config.json").write_text(json.dumps(MODEL))
        # the ops' JIT builds (one each, in parallel) and every estimate, on the CPU cores
        builds = {op: pool.submit(subprocess.run, [sys.executable, "-c", BUILD, op], capture_output=True, text=True,
                                  env=env, timeout=300) for op in ("fused_adam", "cpu_adam")}
        ests = [pool.submit(estimate, c, work) for c in todo]
        build_log = {}
        for op, f in builds.items():
            p = f.result()
            build_log[op] = {"rc": p.returncode, "tail": (p.stdout + p.stderr)[-600:]}
            print(f"build {op}: rc {p.returncode} at {time.monotonic() - T0:.0f} s", flush=True)
        last = 0.0
        for cell, ef in zip(todo, ests):
            if time.monotonic() - T0 + max(last, 10.0) > a.budget_s:
                not_run.append(cell)
                continue
            t = time.monotonic()
            run = dict(cell, model=MODEL, micro=MICRO, ds_config=ds_config(cell["stage"], cell["offload"]))
            p = subprocess.run([sys.executable, "-c", CELL, json.dumps(run)], capture_output=True, text=True,
                               env=env, timeout=240)
            last = time.monotonic() - t
            line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
            measured = json.loads(line[7:]) if line else {"error": (p.stderr or p.stdout)[-1500:]}
            est = ef.result()
            acc = next((f for f in est.get("fit", []) if f.get("tier") == "accelerator"), {})
            row = {**cell, "seconds": last, "measured": measured, "estimate_accelerator_need": acc.get("need"),
                   "estimate_tracked_peak": acc.get("tracked"),
                   "estimate_overhead": {o["key"]: o["bytes"] for o in acc.get("overhead", [])},
                   "estimate_error": est.get("error")}
            if line and acc.get("tracked"):
                row["tracked_over_max_allocated"] = acc["tracked"] / max(1, measured["max_allocated"])
                row["need_over_driver_used"] = acc["need"] / max(1, measured["driver_used_max"])
                row["reserved_minus_allocated"] = measured["max_reserved"] - measured["max_allocated"]
                row["driver_minus_reserved"] = measured["driver_used_max"] - measured["max_reserved"]
            rows.append(row)
            print(json.dumps({k: row.get(k) for k in ("stage", "offload", "checkpointing", "seq", "seconds",
                                                      "tracked_over_max_allocated", "need_over_driver_used",
                                                      "reserved_minus_allocated", "driver_minus_reserved")}),
                  flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = next((r["measured"]["device"] for r in rows if "device" in r["measured"]), smi.get("name", "gpu"))
    name = f"gpu_peak-{datetime.date.today()}-{gpu.replace(' ', '_')}.json"
    doc = {"gpu": gpu, "nvidia_smi": smi, "torch": torch.__version__, "cuda": torch.version.cuda,
           "seconds_total": time.monotonic() - T0, "builds": build_log, "rows": rows, "not_run": not_run,
           "runtime_overhead": overhead_block(rows, gpu, smi, torch.__version__)}
    (out / name).write_text(json.dumps(doc, indent=1))
    print(f"wrote {out / name}: {len(rows)} cells run, {len(not_run)} not run (budget), "
          f"{doc['seconds_total']:.0f} s; runtime_overhead: {json.dumps(doc['runtime_overhead'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
