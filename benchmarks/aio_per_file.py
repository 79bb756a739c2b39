"""The per-file cost of DeepSpeed's aio swap on this machine (issue 23): the same bytes as many
small files against one large one, through DeepSpeed's own ``aio_handle``.

Why: DeepSpeed swaps one file per tensor. ZeRO-3 ``offload_param: nvme`` writes and reads one
file per parameter partition (``partitioned_param_swapper.py`` l.148-161 ``_get_swap_paths``:
``{ds_id}_param.tensor.swp``; ``swap_in`` / ``_swap_out`` l.259-318 submit one ``async_pread`` /
``async_pwrite`` per parameter through ``swap_tensor/utils.py`` l.19-26), the optimizer swapper one
per sub-group and state (``optimizer_utils.py`` l.46-75, l.492-508). Each such op pays, besides
its bytes: a ``stat`` of the file for a read (``deepspeed_py_io_handle.cpp`` l.296
``is_valid_bytes_to_read``), an ``open`` with O_DIRECT (l.300 / l.332, ``deepspeed_aio_common.cpp``
l.267-283), the hand-off to the handle's thread(s) and back (l.281 ``_schedule_aio_work_locked``,
``deepspeed_aio_thread.cpp``), and a ``close`` in ``wait`` (l.232); its requests start anew at
depth 1 (``deepspeed_aio_utils.cpp`` l.77-100 ``prep_iocbs``: min(queue depth, the op's remaining
blocks)), so a file of one block (1 MiB at the default ``block_size``) runs alone in flight.

Method (the calibration benchmark's, ``steptime_calibration.py`` aio_rounds): one ``aio_handle`` at
DeepSpeed's aio defaults (block_size 1 MiB, queue_depth 8, intra_op_parallelism 1, single_submit
false, overlap_events true: ``runtime/swap_tensor/constants.py``); ONE page-locked buffer of
``--total-mib`` (a read's rate on this VM follows its destination allocation,
``benchmarks/aio_read_buffers.py``, so every file size reads into and writes from the same memory);
for each file size s in ``--sizes-mib`` the buffer is cut into total / s slices, each its own file,
all submitted, then one ``wait`` (as ``swap_in_tensors`` + ``synchronize_reads`` do). Per round the
sizes run in a rotated order (a drift of the shared disk moves every size alike over the rounds);
per round and direction the fit t(s) = total / R + n(s) x c by least squares over the sizes (n(s) =
total / s files) gives the per-file cost c and the rate R; the report gives c's median and spread,
and each size's time over the one-large-file time in the same round.

DS_ACCELERATOR=cpu is set (no accelerator is used); the async_io op loads from a torch-extensions
folder of this run's own (``advisor.engine.extcache.new_run_dir``, seeded from the cache of finished
builds; a stale build lock in it is refused, ``extcache.orphan_locks``), unless TORCH_EXTENSIONS_DIR
is set.

Writes benchmarks/results/aio_per_file-<host><tag>.json and prints a table. No assertion (the
timings are the machine's).

Usage: python benchmarks/aio_per_file.py [--dir /tmp] [--rounds 9] [--total-mib 64]
[--sizes-mib 1,2,4,8,16,64] [--tag=-NAME] [--host NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MIB = 2 ** 20
#: DeepSpeed 0.19.8's aio defaults (runtime/swap_tensor/constants.py AIO_*_DEFAULT)
AIO = {"block_size": 1 << 20, "queue_depth": 8, "intra_op_parallelism": 1, "single_submit": False,
       "overlap_events": True}


def _summary(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def _loadavg() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def fit_per_file(points: list[tuple[int, float]], total: int) -> tuple[float, float]:
    """(c seconds per file, R bytes/s) of the least-squares line t = total / R + n x c through
    ``points`` [(files n, seconds t)]."""
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    c = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx
    a = my - c * mx
    return c, (total / a if a > 0 else float("inf"))


def _ext_dir() -> str:
    """This run's torch-extensions folder (made and seeded here unless TORCH_EXTENSIONS_DIR is set);
    exits with a message when a build lock with no build running is held in it."""
    from advisor.engine import extcache
    d = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not d:
        d = tempfile.mkdtemp(prefix="aio-per-file-ext-")
        extcache.new_run_dir(d)
        os.environ["TORCH_EXTENSIONS_DIR"] = d
    stale = extcache.orphan_locks(d)
    if stale:
        raise SystemExit(extcache.held_lock_message(stale))
    return d


def run(folder: str, total: int, sizes: list[int], rounds: int) -> dict:
    import torch
    from deepspeed.ops.op_builder import AsyncIOBuilder
    lib = AsyncIOBuilder().load(verbose=False)
    h = lib.aio_handle(AIO["block_size"], AIO["queue_depth"], AIO["single_submit"], AIO["overlap_events"],
                       AIO["intra_op_parallelism"])
    buf = h.new_cpu_locked_tensor(total, torch.empty(0, dtype=torch.uint8)).zero_()
    tag = f"{os.getpid()}"
    files = {s: [(buf.narrow(0, k * s, s), os.path.join(folder, f"aio_per_file_{tag}_{s >> 20}m_{k}.bin"))
                 for k in range(total // s)] for s in sizes}

    def op(s: int, write: bool) -> float:
        t = time.perf_counter()
        for b, p in files[s]:
            assert (h.async_pwrite(b, p, 0) if write else h.async_pread(b, p, 0)) == 0
        assert h.wait() == len(files[s])
        return time.perf_counter() - t

    rows = []
    try:
        for s in sizes:
            op(s, True)  # every file exists at full size before any read, as the swapper rewrites by name
        for r in range(rounds):
            order = sizes[r % len(sizes):] + sizes[:r % len(sizes)]
            for write in (True, False):
                load = _loadavg()
                t = {s: op(s, write) for s in order}
                c, rate = fit_per_file([(total // s, t[s]) for s in sizes], total)
                big = max(sizes)
                rows.append({"round": r, "direction": "write" if write else "read", "load1": load,
                             "order_mib": [s >> 20 for s in order], "seconds": {str(s >> 20): t[s] for s in sizes},
                             "per_file_s": c, "fit_rate_bytes_per_s": rate,
                             "time_over_one_large": {str(s >> 20): t[s] / t[big] for s in sizes}})
    finally:
        for fl in files.values():
            for _, p in fl:
                if os.path.exists(p):
                    os.unlink(p)
        h.free_cpu_locked_tensor(buf)
    out = {"path": folder, "total_bytes": total, "sizes_bytes": sizes, "aio": AIO, "rounds": rounds, "rows": rows}
    for d in ("write", "read"):
        mine = [x for x in rows if x["direction"] == d]
        out[d] = {"per_file_s": _summary([x["per_file_s"] for x in mine]),
                  "fit_rate_bytes_per_s": _summary([x["fit_rate_bytes_per_s"] for x in mine]),
                  "load1": _summary([x["load1"] for x in mine]),
                  "time_over_one_large": {str(s >> 20): _summary([x["time_over_one_large"][str(s >> 20)] for x in mine])
                                          for s in sizes}}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp", help="folder on the disk to test (its files are removed after)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--total-mib", type=int, default=64)
    ap.add_argument("--sizes-mib", default="1,2,4,8,16,64", help="file sizes, MiB, each dividing --total-mib")
    ap.add_argument("--tag", default="")
    ap.add_argument("--host", default=None, help="the machine's name in the results file (default: the hostname)")
    a = ap.parse_args()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    ext = _ext_dir()
    total = a.total_mib * MIB
    sizes = sorted(int(x) * MIB for x in a.sizes_mib.split(","))
    if any(total % s for s in sizes) or len(sizes) < 2:
        raise SystemExit("--sizes-mib: at least two sizes, each dividing --total-mib")
    res = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"host": a.host or socket.gethostname(), "cpu": platform.processor() or platform.machine(),
                       "cpus": os.cpu_count(), "load_before": os.getloadavg()},
           "torch_extensions_dir": ext}
    try:
        with open("/proc/cpuinfo") as f:
            res["machine"]["cpu"] = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    res["aio_per_file"] = run(a.dir, total, sizes, a.rounds)
    res["machine"]["load_after"] = os.getloadavg()
    out = Path(__file__).parent / "results" / f"aio_per_file-{a.host or socket.gethostname()}{a.tag}.json"
    out.write_text(json.dumps(res, indent=1) + "\n")
    m, ap_ = res["machine"], res["aio_per_file"]
    print(f"machine: {m['cpu']}, {m['cpus']} CPUs, load {m['load_before'][0]:.1f} -> {m['load_after'][0]:.1f}; "
          f"{a.total_mib} MiB as files of {a.sizes_mib} MiB, {a.rounds} rounds, aio defaults")
    for d in ("write", "read"):
        s = ap_[d]
        c, r = s["per_file_s"], s["fit_rate_bytes_per_s"]
        print(f"  {d}: per file {c['median'] * 1e6:.0f} us ({c['min'] * 1e6:.0f}-{c['max'] * 1e6:.0f}), "
              f"rate {r['median'] / 1e9:.2f} GB/s; time over one {max(sizes) >> 20} MiB file: "
              + ", ".join(f"{k} MiB {v['median']:.2f}" for k, v in s["time_over_one_large"].items()))
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
