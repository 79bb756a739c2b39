"""Per-rank worker for tests/engine/test_checkpoint_engine.py (run by ``python -m torch.distributed.run``).

Reads a job file (JSON ``{"cells": [...]}``); for each cell it builds a small MLP with the
cell's layer widths (default 64 -> 301 -> 77 -> 5, deliberately odd sizes), initialises the real
DeepSpeed engine with the cell's config, runs two training steps, then calls
``engine.save_checkpoint(save_dir, tag="ckpt")`` and, when the cell asks, ``engine.save_16bit_model``.
Rank 0 writes ``<out>/<cell id>.done`` when the cell finished on all ranks; any failure writes
``<out>/<cell id>.rank<r>.err`` with the traceback.

The test process (not this worker) lists and loads the files that were written.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def _patch_fp16_on_cpu():
    from deepspeed.accelerator import get_accelerator

    acc = get_accelerator()
    if acc.device_name() == "cpu":
        # DeepSpeed's CPU accelerator reports fp16 unsupported when mkldnn lacks fp16; torch runs fp16
        # math on CPU anyway. Affects this process only.
        type(acc).is_fp16_supported = lambda self: True


def _model(widths):
    import torch

    layers = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers.append(torch.nn.Linear(a, b))
        layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers[:-1])


def run_cell(cell, rank):
    import deepspeed
    import torch
    import torch.distributed as dist

    torch.manual_seed(1234)
    widths = cell.get("widths", [64, 301, 77, 5])
    model = _model(widths)
    cfg = dict(cell["config"])
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    dtype = torch.float32
    if engine.fp16_enabled():
        dtype = torch.float16
    elif engine.bfloat16_enabled():
        dtype = torch.bfloat16
    gen = torch.Generator().manual_seed(99 + rank)
    for _ in range(int(cell.get("steps", 2))):
        x = torch.randn(cfg.get("train_micro_batch_size_per_gpu", 2), widths[0], generator=gen).to(engine.device, dtype)
        loss = engine(x).float().pow(2).mean()
        engine.backward(loss)
        engine.step()
    engine.save_checkpoint(cell["save_dir"], tag="ckpt")
    if cell.get("save_16bit_dir"):
        engine.save_16bit_model(cell["save_16bit_dir"])
    dist.barrier()
    engine.destroy() if hasattr(engine, "destroy") else None
    del engine
    import gc

    gc.collect()


def main(argv):
    job_path, out_dir = argv[1], argv[2]
    with open(job_path) as fh:
        cells = json.load(fh)["cells"]
    import deepspeed
    import torch.distributed as dist

    _patch_fp16_on_cpu()
    try:  # DeepSpeedCPUAdam asks py-cpuinfo in every __init__ (a 2 s subprocess): once per process
        from advisor.engine.worker import memoize_cpu_info
        memoize_cpu_info()
    except ImportError:  # advisor not importable here: only slower
        pass
    deepspeed.init_distributed(dist_backend="gloo")
    rank = dist.get_rank()
    for cell in cells:
        try:
            run_cell(cell, rank)
            if rank == 0:
                open(os.path.join(out_dir, f"{cell['id']}.done"), "w").close()
        except Exception:  # noqa: BLE001 - reported to the test through the .err file
            with open(os.path.join(out_dir, f"{cell['id']}.rank{rank}.err"), "w") as fh:
                fh.write(traceback.format_exc())
            raise
    dist.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
