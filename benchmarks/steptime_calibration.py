"""Calibration of the step-time model (advisor.ledger.steptime) on this machine (issue 23).

1. Host memory bandwidth, measured: a large fp32 ``torch`` copy (``dst.copy_(src)``) at the
   thread count DeepSpeedCPUAdam uses, counted as STREAM counts a copy (read + write bytes /
   seconds), the same count as the model's ``host_memory_bandwidth_bytes_per_s``.
2. DeepSpeedCPUAdam (``deepspeed.ops.adam.DeepSpeedCPUAdam``, the compiled AVX op) on fp32
   parameters of three sizes, median step seconds, against the model's
   elements x ``CPU_ADAM_KERNEL_BYTES`` (28 B) / the bandwidth measured in step 1. No 16-bit
   copy here: the parameters are fp32 (the model adds 4 + D B only when ZeRO keeps a 16-bit copy).
3. DeepSpeed aio (``AsyncIOBuilder``, ``aio_handle`` with the DeepSpeed config defaults:
   block_size 1 MiB, queue_depth 8, intra_op_parallelism 1, single_submit false,
   overlap_events true) writing and reading a swap file on this disk, against the model's
   bytes / tier bandwidth with the tier bandwidth measured by ``dd`` with O_DIRECT (1 MiB
   blocks), as a user would fill in a hardware spec for this drive.

Writes benchmarks/results/steptime_calibration-<host>.json and prints a table. The CPU is
shared: the load average before and after is recorded. No assertion (timings are the
machine's): the proof target is |model / measured - 1| <= 25 %.

Usage: TORCH_EXTENSIONS_DIR=/tmp/x python benchmarks/steptime_calibration.py [--dir /tmp] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZES = (4_194_304, 16_777_216, 33_554_432)  # elements: 16, 64, 128 MiB of fp32 each, > L3


def _median(fn, n: int) -> float:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def copy_bandwidth(torch, repeat: int) -> float:
    n = 64 * 2 ** 20  # 256 MiB fp32 per buffer
    a = torch.ones(n, dtype=torch.float32)
    b = torch.empty_like(a)
    b.copy_(a)
    t = _median(lambda: b.copy_(a), repeat)
    return 2 * n * 4 / t


def cpu_adam(torch, n: int, repeat: int) -> float:
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    p = torch.nn.Parameter(torch.randn(n, dtype=torch.float32))
    p.grad = torch.randn(n, dtype=torch.float32)
    opt = DeepSpeedCPUAdam([p], lr=1e-3, adamw_mode=True)
    opt.step()  # creates exp_avg / exp_avg_sq
    t = _median(opt.step, repeat)
    del opt, p
    return t


def dd_bandwidth(path: str, nbytes: int) -> tuple[float, float]:
    mb = nbytes // 2 ** 20
    t = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mb}", "oflag=direct", "conv=fsync"],
                   check=True, capture_output=True)
    w = nbytes / (time.perf_counter() - t)
    t = time.perf_counter()
    subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=1M", "iflag=direct"], check=True, capture_output=True)
    r = nbytes / (time.perf_counter() - t)
    return w, r


def aio(torch, path: str, nbytes: int, repeat: int) -> tuple[float, float]:
    from deepspeed.ops.op_builder import AsyncIOBuilder
    lib = AsyncIOBuilder().load(verbose=False)
    h = lib.aio_handle(1024 * 1024, 8, False, True, 1)  # block_size, queue_depth, single_submit, overlap, threads
    buf = torch.ones(nbytes, dtype=torch.uint8)
    buf = h.new_cpu_locked_tensor(nbytes, buf) if hasattr(h, "new_cpu_locked_tensor") else buf
    out = torch.empty_like(buf)
    h.sync_pwrite(buf, path)
    w = _median(lambda: h.sync_pwrite(buf, path), repeat)
    r = _median(lambda: h.sync_pread(out, path), repeat)
    return nbytes / w, nbytes / r


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp", help="folder on the disk to test (a swap file is written there)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--swap-mib", type=int, default=256)
    a = ap.parse_args()
    import torch
    from advisor.ledger.steptime import CPU_ADAM_KERNEL_BYTES

    load0 = os.getloadavg()
    threads = torch.get_num_threads()
    res: dict = {"machine": {"host": socket.gethostname(), "cpu": platform.processor() or platform.machine(),
                             "cpus": os.cpu_count(), "torch_threads": threads, "load_before": load0,
                             "torch": torch.__version__}, "cpu_adam": [], "aio": None}
    try:
        with open("/proc/cpuinfo") as f:
            res["machine"]["cpu"] = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    bw = copy_bandwidth(torch, a.repeat)
    res["host_memory_bandwidth_bytes_per_s"] = bw
    for n in SIZES:
        t = cpu_adam(torch, n, a.repeat)
        model = n * CPU_ADAM_KERNEL_BYTES / bw
        res["cpu_adam"].append({"elements": n, "measured_s": t, "model_s": model, "model_over_measured": model / t})
    path = os.path.join(a.dir, f"steptime_swap_{os.getpid()}.bin")
    nbytes = a.swap_mib * 2 ** 20
    try:
        dw, dr = dd_bandwidth(path, nbytes)
        aw, ar = aio(torch, path, nbytes, a.repeat)
        res["aio"] = {"path": a.dir, "bytes": nbytes, "aio": {"block_size": 1048576, "queue_depth": 8,
                                                               "intra_op_parallelism": 1},
                      "tier_write_bytes_per_s_dd": dw, "tier_read_bytes_per_s_dd": dr,
                      "aio_write_bytes_per_s": aw, "aio_read_bytes_per_s": ar,
                      "write_model_over_measured": aw / dw, "read_model_over_measured": ar / dr}
    except Exception as e:  # noqa: BLE001  (report, do not hide: the JSON says why)
        res["aio"] = {"error": f"{type(e).__name__}: {e}"}
    finally:
        if os.path.exists(path):
            os.unlink(path)
    res["machine"]["load_after"] = os.getloadavg()
    out = Path(__file__).parent / "results" / f"steptime_calibration-{socket.gethostname()}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"machine: {res['machine']['cpu']}, {res['machine']['cpus']} CPUs, torch threads {threads}, "
          f"load {load0[0]:.1f} -> {res['machine']['load_after'][0]:.1f}")
    print(f"host memory bandwidth (copy, read + write): {bw / 1e9:,.2f} GB/s")
    for r in res["cpu_adam"]:
        print(f"DeepSpeedCPUAdam {r['elements']:>11,} elements: measured {r['measured_s'] * 1e3:8.1f} ms, "
              f"model {r['model_s'] * 1e3:8.1f} ms, model/measured {r['model_over_measured']:.2f}")
    ai = res["aio"]
    if "error" in ai:
        print(f"aio: {ai['error']}")
    else:
        print(f"aio write {ai['aio_write_bytes_per_s'] / 1e9:.2f} GB/s vs dd {ai['tier_write_bytes_per_s_dd'] / 1e9:.2f}"
              f" (model/measured {ai['write_model_over_measured']:.2f}); read {ai['aio_read_bytes_per_s'] / 1e9:.2f}"
              f" GB/s vs dd {ai['tier_read_bytes_per_s_dd'] / 1e9:.2f} (model/measured "
              f"{ai['read_model_over_measured']:.2f})")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
