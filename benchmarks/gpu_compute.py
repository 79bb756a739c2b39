"""GPU check of the step-time model's compute term (issue 23) and the pieces of the host-tier check
(issue 15) that ``benchmarks/gpu_peak.py``'s DeepSpeed cells record.

The compute term (``advisor/ledger/steptime.py`` ``step_time``: forward = (2 N + attention / 3) x T,
backward = (4 N + 2 attention / 3) x T + recompute, each over peak x MFU, MFU the preset's
``assumed_mfu`` else ``steptime.MFU`` = 0.4) is read from ``python -m advisor estimate --format json
--hardware PRESET``'s ``step_time.terms`` (the terms whose ``resource`` is ``compute``) for the same
model, sequence length, micro-batch and checkpointing, and set against a forward and a backward timed
with ``torch.cuda.Event`` (median of the timed steps after warm-up steps). Recorded per cell:
measured / model seconds for forward, backward and both, the FLOP/s the run achieved on the model's
own FLOP count (the terms' ``amount``, recompute included) and the MFU that implies (achieved / the
preset's dense peak): measured / model = assumed MFU / implied MFU, so a ratio above 1 says the preset's
MFU is optimistic for this workload.

This script's own cells run plain torch (transformers' LlamaForCausalLM in bf16, no DeepSpeed, no
optimizer step: the compute term alone), in ONE process: gpu_peak.py's small model (hidden 1024,
8 layers) at sequence 512 and 2048 with and without full checkpointing, and a wider one (hidden 4096,
4 layers) whose matrix products are the size of a 7B model's, where MFU should be near a real run's.
It also times an NCCL all-reduce and all-gather at world size 1 (the ring model's (W-1)/W gives 0
seconds there: what is measured is the fixed per-call cost the model leaves out).

Without a CUDA device it says so and exits 2 writing nothing. ``benchmarks/gpu_session.py`` runs it
first, then gpu_peak.py, in one device call.

usage: python benchmarks/gpu_compute.py [--quick] [--budget-s 90] [--out DIR]
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
T0 = time.monotonic()

#: The small model, also gpu_peak.py's MODEL (about 160 M parameters)
SMALL = dict(model_type="llama", hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
             num_attention_heads=16, num_key_value_heads=8, vocab_size=32000, max_position_embeddings=4096,
             rms_norm_eps=1e-5, tie_word_embeddings=False, torch_dtype="bfloat16")
#: Llama-2-7B's layer shapes (hidden 4096, MLP 11008, 32 heads), 4 layers: matrix products of a real run's size
WIDE = dict(SMALL, hidden_size=4096, intermediate_size=11008, num_hidden_layers=4, num_attention_heads=32,
            num_key_value_heads=32)
MICRO = 2
WARMUP, TIMED = 3, 10

#: nvidia-smi / torch device name -> accelerator preset in advisor/data/hardware_presets.json (first match wins)
PRESETS = (("H200", "h200"), ("H100", "h100-sxm-80gb"), ("A100-SXM4-40GB", "a100-40gb"), ("A100 40GB", "a100-40gb"),
           ("A100", "a100-80gb"), ("B200", "b200"), ("L40S", "l40s"), ("4090", "rtx-4090"), ("MI300X", "mi300x"))


def preset_for(gpu_name: str) -> str | None:
    """The accelerator preset whose card ``gpu_name`` (as torch / nvidia-smi report it) is, or None."""
    up = gpu_name.upper()
    return next((p for key, p in PRESETS if key.upper() in up), None)


def torch_cells(quick: bool) -> list[dict]:
    """This script's cells in run order: the wide model first (the MFU that matters), then the small one."""
    order = [("wide", 2048, False), ("small", 2048, False), ("wide", 2048, True), ("small", 512, False),
             ("small", 2048, True), ("small", 512, True)]
    if quick:
        order = order[:2]
    return [{"model_name": m, "seq": s, "checkpointing": c, "micro": MICRO} for m, s, c in order]


def model_compute(est: dict) -> dict | None:
    """The step-time model's compute term from estimate's JSON: FLOPs and seconds of the forward and
    backward windows (backward includes recompute), the total, and the peak / MFU it used. None when
    the estimate has no step time or no compute rate (a preset without a FLOP/s peak)."""
    st = est.get("step_time") or {}
    terms = [t for t in st.get("terms", []) if t.get("resource") == "compute"]
    if not terms or any(t.get("seconds") is None for t in terms):
        return None
    out: dict = {}
    for ph in ("forward", "backward"):
        sel = [t for t in terms if t["phase"] == ph]
        out[ph] = {"flops": sum(t["amount"] for t in sel), "seconds": sum(t["seconds"] for t in sel),
                   "terms": [t["name"] for t in sel]}
    out["total"] = {"flops": out["forward"]["flops"] + out["backward"]["flops"],
                    "seconds": out["forward"]["seconds"] + out["backward"]["seconds"]}
    a = st.get("assumptions") or {}
    out.update(peak_flops=a.get("peak_flops"), mfu=a.get("mfu"), mfu_source=a.get("mfu_source"),
               precision=a.get("precision"), step_time_s=st.get("step_time_s"))
    return out


def compare(measured: dict, model: dict | None) -> dict | None:
    """Measured / model ratios for ``measured`` = {"forward_s", "backward_s"} (medians, seconds) against
    :func:`model_compute`'s ``model``; achieved FLOP/s = the model's FLOPs / the measured seconds;
    implied MFU = achieved / the peak the model used (so measured / model = model MFU / implied MFU)."""
    if not model or not measured.get("forward_s") or not measured.get("backward_s"):
        return None
    m = {"forward": measured["forward_s"], "backward": measured["backward_s"]}
    m["total"] = m["forward"] + m["backward"]
    out: dict = {}
    for ph, sec in m.items():
        achieved = model[ph]["flops"] / sec
        out[ph] = {"measured_s": sec, "model_s": model[ph]["seconds"], "measured_over_model": sec / model[ph]["seconds"],
                   "achieved_tflops": achieved / 1e12,
                   "implied_mfu": achieved / model["peak_flops"] if model.get("peak_flops") else None}
    out["model_mfu"] = model.get("mfu")
    if measured.get("step_s") and model.get("step_time_s"):
        out["step"] = {"measured_s": measured["step_s"], "model_s": model["step_time_s"],
                       "measured_over_model": measured["step_s"] / model["step_time_s"]}
    return out


def mfu_summary(rows: list[dict]) -> dict | None:
    """Median / min / max of the implied MFU (forward + backward) over rows holding a ``compute``
    comparison, beside the MFU the model assumed: what a person compares before setting a preset's
    ``assumed_mfu`` (never written into the preset by this script)."""
    got = [r["compute"]["total"]["implied_mfu"] for r in rows
           if (r.get("compute") or {}).get("total", {}).get("implied_mfu") is not None]
    if not got:
        return None
    assumed = {r["compute"]["model_mfu"] for r in rows if r.get("compute")}
    return {"implied_mfu": [round(statistics.median(got), 3), round(min(got), 3), round(max(got), 3)],
            "assumed_mfu": sorted(assumed), "cells": len(got)}


def ds_config(stage: int = 0, offload: str = "none") -> dict:
    """The DeepSpeed config estimate reads for a cell (the compute term does not depend on it at world size 1)."""
    zero: dict = {"stage": stage}
    if offload == "cpu":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    return {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "zero_optimization": zero,
            "steps_per_print": 1000}


def estimate_cmd(cfg: Path, model_json: Path, seq: int, micro: int, checkpointing: bool, preset: str | None) -> list[str]:
    """The estimate command line both GPU scripts run per cell (world size 1, flash attention)."""
    cmd = [sys.executable, "-m", "advisor", "estimate", str(cfg), "--model", str(model_json), "--world-size", "1",
           "--seq-len", str(seq), "--micro-batch", str(micro), "--checkpointing", "full" if checkpointing else "none",
           "--attention", "flash", "--format", "json"]
    return cmd + (["--hardware", preset] if preset else [])


def run_estimate(cmd: list[str]) -> dict:
    """estimate's JSON; {"error": ...} when it fails."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=240)
    except subprocess.SubprocessError as e:
        return {"error": str(e)}
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"error": (p.stderr or p.stdout)[-1500:]}


#: One process for every torch cell: times forward and backward with CUDA events (median of TIMED after
#: WARMUP), then NCCL collectives at world size 1. Prints one "RESULT {json}" line per cell.
CELLS = r'''
import json, os, statistics, sys, time, torch
from transformers import LlamaConfig, LlamaForCausalLM
cells = json.loads(sys.argv[1]); warm, timed = int(sys.argv[2]), int(sys.argv[3]); deadline = float(sys.argv[4])
torch.cuda.set_device(0)
def ev(): return torch.cuda.Event(enable_timing=True)
for cell in cells:
    if time.time() > deadline:
        print("RESULT " + json.dumps({"cell": cell, "skipped": "budget"}), flush=True); continue
    try:
        cfg = LlamaConfig(**{k: v for k, v in cell["model"].items() if k not in ("model_type", "torch_dtype")})
        cfg._attn_implementation = "sdpa"
        with torch.device("cuda"):  # initialised on the GPU: the wide model's 1 B parameters take seconds on a CPU
            model = LlamaForCausalLM(cfg).to(dtype=torch.bfloat16).train()
        if cell["checkpointing"]:
            model.gradient_checkpointing_enable()
        ids = torch.randint(0, cfg.vocab_size, (cell["micro"], cell["seq"]), device="cuda")
        fw, bw = [], []
        for i in range(warm + timed):
            a, b, c = ev(), ev(), ev()
            a.record(); loss = model(input_ids=ids, labels=ids).loss; b.record()
            loss.backward(); c.record(); torch.cuda.synchronize()
            model.zero_grad(set_to_none=True)
            if i >= warm:
                fw.append(a.elapsed_time(b) / 1e3); bw.append(b.elapsed_time(c) / 1e3)
        res = {"cell": cell, "forward_s": statistics.median(fw), "backward_s": statistics.median(bw),
               "forward_all_s": fw, "backward_all_s": bw, "max_allocated": torch.cuda.max_memory_allocated()}
        del model, loss; torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    except Exception as e:  # one cell's failure (an OOM, an API change) is recorded, the others still run
        res = {"cell": cell, "error": repr(e)[-1500:]}
        torch.cuda.empty_cache()
    print("RESULT " + json.dumps(res), flush=True)
coll = {}
try:
    import torch.distributed as dist
    dist.init_process_group("nccl", rank=0, world_size=1)
    for mib in (1, 256):
        x = torch.ones(mib << 19, dtype=torch.bfloat16, device="cuda"); y = torch.empty_like(x)
        for name, fn in (("all_reduce", lambda: dist.all_reduce(x)), ("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(y, x))):
            t = []
            for i in range(13):
                a, b = ev(), ev(); a.record(); fn(); b.record(); torch.cuda.synchronize()
                if i >= 3: t.append(a.elapsed_time(b) / 1e3)
            coll[f"{name}_{mib}MiB_s"] = statistics.median(t)
    dist.destroy_process_group()
except Exception as e:
    coll["error"] = repr(e)[-800:]
print("COLLECTIVES " + json.dumps(coll), flush=True)
print("DEVICE " + json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                              "cuda": torch.version.cuda, "capability": list(torch.cuda.get_device_capability(0))}), flush=True)
'''


def parse_lines(stdout: str) -> tuple[list[dict], dict, dict]:
    """(cell results, collectives, device) from the CELLS process's output lines."""
    res, coll, dev = [], {}, {}
    for ln in stdout.splitlines():
        if ln.startswith("RESULT "):
            res.append(json.loads(ln[7:]))
        elif ln.startswith("COLLECTIVES "):
            coll = json.loads(ln[12:])
        elif ln.startswith("DEVICE "):
            dev = json.loads(ln[7:])
    return res, coll, dev


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="time forward/backward against the step-time model's compute term")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--budget-s", type=float, default=90.0, help="start no cell after this many seconds")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "results"))
    a = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu_compute: torch is not installed; nothing measured", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gpu_compute: no CUDA device here; nothing measured (run it through the device tool on a lent GPU)",
              file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name(0)
    preset = preset_for(gpu)
    todo = torch_cells(a.quick)
    models = {"small": SMALL, "wide": WIDE}
    with tempfile.TemporaryDirectory() as d, cf.ThreadPoolExecutor(6) as pool:
        work = Path(d)
        for n, m in models.items():
            (work / f"{n}.json").write_text(json.dumps(m))
        (work / "ds.json").write_text(json.dumps(ds_config()))
        ests = [pool.submit(run_estimate, estimate_cmd(work / "ds.json", work / f"{c['model_name']}.json", c["seq"],
                                                       c["micro"], c["checkpointing"], preset)) for c in todo]
        run = [dict(c, model=models[c["model_name"]]) for c in todo]
        deadline = time.time() + max(0.0, a.budget_s - (time.monotonic() - T0))
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT="29519", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        try:
            p = subprocess.run([sys.executable, "-c", CELLS, json.dumps(run), str(WARMUP), str(TIMED), str(deadline)],
                               capture_output=True, text=True, env=env,
                               timeout=max(30.0, a.budget_s + 45 - (time.monotonic() - T0)))
            out, err = p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            out, err = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout"
        results, coll, dev = parse_lines(out)
        rows = []
        for cell, ef, res in zip(todo, ests, results + [{}] * (len(todo) - len(results))):
            est = ef.result()
            model = model_compute(est)
            rows.append({**cell, "measured": {k: v for k, v in res.items() if k != "cell"} or {"error": "no result"},
                         "model": model, "compute": compare(res, model), "estimate_error": est.get("error")})
            print(json.dumps({k: rows[-1].get(k) for k in ("model_name", "seq", "checkpointing")}
                             | {"ratio": (rows[-1]["compute"] or {}).get("total", {}).get("measured_over_model"),
                                "implied_mfu": (rows[-1]["compute"] or {}).get("total", {}).get("implied_mfu")}),
                  flush=True)
    outdir = Path(a.out)
    outdir.mkdir(parents=True, exist_ok=True)
    doc = {"what": "benchmarks/gpu_compute.py: forward/backward (CUDA events, median of %d after %d warm-up) against "
                   "estimate's compute term; NCCL at world size 1" % (TIMED, WARMUP),
           "gpu": gpu, "preset": preset, "device": dev, "date": str(datetime.date.today()),
           "seconds_total": time.monotonic() - T0, "rows": rows, "collectives_world1": coll,
           "collectives_model": "ring (W-1)/W x S / B: 0 s at world size 1 (advisor/ledger/steptime.py ring_seconds)",
           "mfu": mfu_summary(rows), "stderr_tail": (err or "")[-2000:]}
    name = f"gpu_compute-{datetime.date.today()}-{gpu.replace(' ', '_')}.json"
    (outdir / name).write_text(json.dumps(doc, indent=1))
    print(f"wrote {outdir / name}: {sum(1 for r in rows if r['compute'])} of {len(rows)} cells compared; "
          f"mfu {json.dumps(doc['mfu'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
