"""Per-rank worker for tests/engine/test_nvme_traffic.py (run by ``python -m torch.distributed.run``).

For each cell of a job file (``{"cells": [{"id", "config", "widths", "steps"}]}``) it builds an
MLP with the given widths (default 1024 -> 1031 -> 1029, 2,118,703 parameters: the reference's
NVMe model, big enough for the 1 MiB swap threshold), initialises the real DeepSpeed engine and
runs K training steps, recording for every step and phase (forward, backward, step) the bytes
DeepSpeed asks its aio handles to read and write (every handle returned by
``AsyncIOBuilder().load().aio_handle(...)`` is wrapped; DeepSpeed's swappers do all their file
I/O through ``async_pread`` / ``async_pwrite`` on them), and, as a second, kernel-side count,
the deltas of ``read_bytes`` / ``write_bytes`` in ``/proc/self/io`` (O_DIRECT I/O is accounted
to the process there). It also records the files under the nvme path.

Writes ``<out>/<cell id>.rank<r>.json``; on failure the JSON has ``error`` and ``traceback``.
This file imports torch and deepspeed; it is test code, not part of ``advisor``.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

COUNTS = {"read": 0, "write": 0}


def _proc_io() -> dict[str, int]:
    out = {}
    try:
        with open("/proc/self/io") as fh:
            for line in fh:
                k, _, v = line.partition(":")
                out[k.strip()] = int(v)
    except OSError:
        pass
    return out


def _nbytes(t) -> int:
    try:
        return int(t.numel() * t.element_size())
    except Exception:
        return 0


def _install_aio_counter() -> None:
    from deepspeed.ops.op_builder import AsyncIOBuilder

    orig_load = AsyncIOBuilder.load

    class Handle:
        def __init__(self, h):
            object.__setattr__(self, "_h", h)

        def __getattr__(self, name):
            return getattr(self._h, name)

        def async_pread(self, buffer, path, *a, **k):
            COUNTS["read"] += _nbytes(buffer)
            return self._h.async_pread(buffer, path, *a, **k)

        def async_pwrite(self, buffer, path, *a, **k):
            COUNTS["write"] += _nbytes(buffer)
            return self._h.async_pwrite(buffer, path, *a, **k)

        def sync_pread(self, buffer, path, *a, **k):
            COUNTS["read"] += _nbytes(buffer)
            return self._h.sync_pread(buffer, path, *a, **k)

        def sync_pwrite(self, buffer, path, *a, **k):
            COUNTS["write"] += _nbytes(buffer)
            return self._h.sync_pwrite(buffer, path, *a, **k)

    class Mod:
        def __init__(self, mod):
            self._mod = mod

        def __getattr__(self, name):
            attr = getattr(self._mod, name)
            if name == "aio_handle":
                return lambda *a, **k: Handle(attr(*a, **k))
            return attr

    def load(self, *a, **k):
        return Mod(orig_load(self, *a, **k))

    AsyncIOBuilder.load = load


def _snap() -> dict[str, int]:
    io = _proc_io()
    return {"aio_read": COUNTS["read"], "aio_write": COUNTS["write"],
            "proc_read": io.get("read_bytes", 0), "proc_write": io.get("write_bytes", 0)}


def _delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a[k] for k in a}


def run_cell(cell: dict, rank: int) -> dict:
    import deepspeed
    import torch

    torch.manual_seed(1234)
    widths = cell.get("widths", [1024, 1031, 1029])
    layers = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    for i in cell.get("frozen", []):
        for p in model[2 * i].parameters():
            p.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=params, config=cell["config"])
    dtype = torch.bfloat16 if engine.bfloat16_enabled() else (torch.float16 if engine.fp16_enabled() else torch.float32)
    gen = torch.Generator().manual_seed(7 + rank)
    steps = []
    for _ in range(int(cell.get("steps", 3))):
        x = torch.randn(2, widths[0], generator=gen).to(engine.device, dtype)
        s0 = _snap()
        loss = engine(x).float().pow(2).mean()
        s1 = _snap()
        engine.backward(loss)
        s2 = _snap()
        engine.step()
        s3 = _snap()
        steps.append({"forward": _delta(s0, s1), "backward": _delta(s1, s2), "step": _delta(s2, s3),
                      "total": _delta(s0, s3)})
    files = {}
    base = cell["nvme_path"]
    for root, _, names in os.walk(base):
        for n in names:
            if f"{os.sep}rank{rank}" in root:
                p = os.path.join(root, n)
                files[os.path.relpath(p, base)] = os.path.getsize(p)
    return {"steps": steps, "files": files, "numels": [p.numel() for p in model.parameters()]}


def main(argv: list[str]) -> int:
    job_path, out_dir = argv[0], argv[1]
    with open(job_path) as fh:
        job = json.load(fh)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    import torch.distributed as dist

    _install_aio_counter()
    try:  # DeepSpeedCPUAdam asks py-cpuinfo in every __init__ (a 2 s subprocess): once per process
        from advisor.engine.worker import memoize_cpu_info
        memoize_cpu_info()
    except ImportError:  # advisor not importable here: only slower
        pass
    deepspeed.init_distributed(dist_backend="gloo")
    rank = dist.get_rank()
    for cell in job["cells"]:
        rec: dict = {"id": cell["id"], "rank": rank}
        try:
            rec.update(run_cell(cell, rank))
        except Exception as e:  # reported to the test, which fails with it
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["traceback"] = traceback.format_exc()[-3000:]
        with open(os.path.join(out_dir, f"{cell['id']}.rank{rank}.json"), "w") as fh:
            json.dump(rec, fh)
        dist.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
