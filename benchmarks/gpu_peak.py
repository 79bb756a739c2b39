"""GPU validation of estimate's accelerator peak and the runtime-overhead terms (issue 18).

Runs a small Llama-style model (transformers' LlamaForCausalLM from a config built here: no
download) under DeepSpeed on ONE CUDA GPU, one fresh process per cell, and compares:

* estimate's tracked accelerator peak and its per-class figures (``ds-advisor estimate --format
  json`` on the same config, the model's config.json and the same workload), with
* ``torch.cuda.max_memory_allocated`` (what the ledger + activations should equal),
  ``max_memory_reserved`` (adds the allocator's reserve: the ``allocator`` overhead term), and the
  driver's used memory from ``torch.cuda.mem_get_info`` (adds the CUDA context and NCCL: the
  ``cuda_context`` / ``nccl`` terms).

Cells: ZeRO stage 0-3 x offload_optimizer none/cpu (cpu only at stage >= 1) x activation
checkpointing off/on x sequence length 512/2048, micro-batch 2, bf16, AdamW, 3 steps each.
About 10 s a cell, a few minutes in all. Results go to
``benchmarks/results/gpu_peak-<date>-<gpu>.json`` with the GPU's name, driver and torch versions.

usage: python benchmarks/gpu_peak.py [--quick] [--out DIR]
  --quick  stage 0 and 3 only, checkpointing on, seq 512 (a smoke run, under a minute)

Without a CUDA device it says so and exits 2: it never writes figures it did not measure.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = dict(model_type="llama", hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
             num_attention_heads=16, num_key_value_heads=8, vocab_size=32000, max_position_embeddings=4096,
             rms_norm_eps=1e-5, tie_word_embeddings=False, torch_dtype="bfloat16")
MICRO = 2

CELL = r'''
import json, os, sys, torch, deepspeed
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
for step in range(3):
    loss = engine(input_ids=ids, labels=ids).loss
    engine.backward(loss)
    engine.step()
    free, _ = torch.cuda.mem_get_info()
    used_max = max(used_max, total - free)
print("RESULT " + json.dumps({"max_allocated": torch.cuda.max_memory_allocated(),
                              "max_reserved": torch.cuda.max_memory_reserved(),
                              "driver_used_max": used_max, "driver_used_before_init": total - free0,
                              "total": total, "device": torch.cuda.get_device_name(0)}))
'''


def ds_config(stage: int, offload: str) -> dict:
    zero: dict = {"stage": stage}
    if offload == "cpu":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    return {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "zero_optimization": zero,
            "steps_per_print": 1000}


def cells(quick: bool):
    for stage in ((0, 3) if quick else (0, 1, 2, 3)):
        for offload in (("none",) if quick or stage == 0 else ("none", "cpu")):
            for ckpt in ((True,) if quick else (False, True)):
                for seq in ((512,) if quick else (512, 2048)):
                    yield {"stage": stage, "offload": offload, "checkpointing": ckpt, "seq": seq}


def estimate(cell: dict, workdir: Path) -> dict:
    cfg = workdir / f"ds-{cell['stage']}-{cell['offload']}.json"
    cfg.write_text(json.dumps(ds_config(cell["stage"], cell["offload"])))
    p = subprocess.run([sys.executable, "-m", "advisor", "estimate", str(cfg), "--model", str(workdir / "config.json"),
                        "--world-size", "1", "--seq-len", str(cell["seq"]), "--micro-batch", str(MICRO),
                        "--checkpointing", "full" if cell["checkpointing"] else "none", "--attention", "flash",
                        "--format", "json"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    return json.loads(p.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
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
    rows = []
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        (work / "config.json").write_text(json.dumps(MODEL))
        for cell in cells(a.quick):
            run = dict(cell, model=MODEL, micro=MICRO, ds_config=ds_config(cell["stage"], cell["offload"]))
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT="29517", RANK="0", WORLD_SIZE="1",
                       LOCAL_RANK="0")
            p = subprocess.run([sys.executable, "-c", CELL, json.dumps(run)], capture_output=True, text=True,
                               env=env, timeout=600)
            line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
            measured = json.loads(line[7:]) if line else {"error": (p.stderr or p.stdout)[-1500:]}
            est = estimate(cell, work)
            acc = next((f for f in est.get("fit", []) if f.get("tier") == "accelerator"), {})
            row = {**cell, "measured": measured, "estimate_accelerator_need": acc.get("need"),
                   "estimate_peak": est.get("peak"), "estimate_ranks": est.get("ranks")}
            if line:
                row["need_over_max_allocated"] = (acc.get("need") or 0) / max(1, measured["max_allocated"])
                row["reserved_minus_allocated"] = measured["max_reserved"] - measured["max_allocated"]
                row["driver_minus_reserved"] = measured["driver_used_max"] - measured["max_reserved"]
            rows.append(row)
            print(json.dumps({k: row.get(k) for k in ("stage", "offload", "checkpointing", "seq",
                                                      "need_over_max_allocated", "reserved_minus_allocated",
                                                      "driver_minus_reserved")}), flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = rows[0]["measured"].get("device", "gpu") if rows else "gpu"
    name = f"gpu_peak-{datetime.date.today()}-{gpu.replace(' ', '_')}.json"
    (out / name).write_text(json.dumps({"gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda,
                                        "rows": rows}, indent=1))
    print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
