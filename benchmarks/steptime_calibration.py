"""Calibration of the step-time model (advisor.ledger.steptime) on this machine (issue 23).

The machine is shared (other processes compete for its cores and its disk), so every figure is
taken in interleaved rounds: in each round the bandwidth the model divides by is measured right
before the DeepSpeed operation it predicts, the round's model / measured ratio is formed, and
the report gives the median over rounds, its spread (min-max of the per-round ratios) and the
load average of every round.

1. **CPU Adam.** Host memory bandwidth measured with an in-place add (``a.add_(b)``: reads a and
   b, writes a; 12 B per element counted as STREAM counts, read + write bytes), the access class
   of DeepSpeedCPUAdam, which writes only the lines it has just read (``cpu_adam.h``
   ``Step_AVX``: loads grad, exp_avg, exp_avg_sq, param; stores param, exp_avg, exp_avg_sq).
   A plain copy (``b.copy_(a)``) is also recorded: its destination lines are written without
   being read, so the core reads them first (write-allocate) unless it uses non-temporal stores,
   traffic that STREAM's count leaves out; it is reported, not used. DeepSpeedCPUAdam
   (``deepspeed.ops.adam.DeepSpeedCPUAdam``, the compiled AVX op, at torch's thread count as in
   training) on fp32 parameters of three sizes, each at least 4x the L3 cache: model =
   elements x ``CPU_ADAM_KERNEL_BYTES`` (28 B) / the round's bandwidth. (No 16-bit copy: the
   parameters are fp32; the model adds 4 + D B only when ZeRO keeps a 16-bit copy.)
   Two series. The proof figure: one thread, timed by the CPU seconds of that thread
   (``time.thread_time``; with one OpenMP thread the kernel runs in the calling thread), for the
   bandwidth probe and the step alike: the time the kernel streams memory, without the time it
   waits for a core. The second series runs at torch's thread count on the wall clock, as in
   training, and records the process's CPU share (CPU seconds / (wall x threads)): below 1 the
   step waited for a core, which a bandwidth model cannot predict. (A run of the previous
   version at load 6-7 on 2 cores, wall clock, 2 threads, one bandwidth figure for all sizes,
   gave 1.00 / 1.51 / 1.02 for 4M / 16M / 33M elements: on that machine such runs get 15-30 % of
   the cores, and the smallest size's 64 MiB of state is partly cache-resident when the step
   runs alone, up to 112 GB/s effective against ~15 GB/s from memory.)
2. **aio swap** (:func:`aio_rounds`). DeepSpeed's aio (``AsyncIOBuilder``, ``aio_handle`` at the
   DeepSpeed config's aio defaults: block_size 1 MiB, queue_depth 8, intra_op_parallelism 1,
   single_submit false, overlap_events true, ``runtime/swap_tensor/constants.py``) swapping one
   sub-group as the optimizer swapper does: its three files (fp32 partition, exp_avg, exp_avg_sq)
   into three separately allocated page-locked buffers, submitted together, then ``wait``. Per
   round and direction the model's inputs (A) and the swap (B) run back to back, A B in even
   rounds and B A in odd ones, so a drift of the shared disk inside the pair cancels over many
   short rounds; the report gives each ratio's median, min-max and how many rounds are within
   25 %, with the load and the runnable-task count of every round. The inputs are measured into
   the swap's own buffers and files (one synchronous op each, as DeepSpeed's ds_io sweep measures a
   drive, O_DIRECT as ``deepspeed_aio_common.cpp`` opens the files): on this VM a read's rate
   follows its destination buffer, per allocation (``benchmarks/aio_read_buffers.py``), which
   made the earlier runs' separate-buffer ratios 0.73-1.77 -- a method error (model input and
   swap in different memory, seconds apart in the round's order), recorded here as
   ``own_buffer``. Two models: the tier stated at the aio settings (``nvme_rate`` returns it), and
   the aio model (``nvme_rate`` of a tier stating its rate at 1 MiB x 32 x 2 threads and its
   latency at 64 KiB x depth 1, at the defaults).

3. **aio settings** (``--aio-sweep``). The model limits the tier's rate by the config's aio
   settings (``advisor.ledger.movement.aio_bandwidth``: Little's law, bytes in flight over one
   request's latency plus its transfer, capped by the rate). Each round calibrates its two inputs
   on this disk -- the rate from 1 MiB x depth 32 x 2 threads, the latency from 64 KiB requests
   at depth 1 (time per request less its transfer at that rate) -- beside each of seven other
   settings (128 KiB, 256 KiB and 1 MiB at depth 1; 1 MiB at depth 2; 256 KiB at depth 4;
   DeepSpeed's defaults 1 MiB x 8; 1 MiB x 1 x 4 threads), before or after it in turn, and forms
   model / measured per pair.

Writes benchmarks/results/steptime_calibration-<host><tag>.json and prints a table. No assertion (the
timings are the machine's): the proof target is |model / measured - 1| <= 25 %.

4. **CPU Adam threads** (``--adam-threads``). The step-time model's CPU optimizer rate per rank
   is min(host bandwidth / ranks per node, OpenMP threads x one core's bandwidth)
   (``advisor.ledger.steptime.cpu_optimizer_rate``). DeepSpeedCPUAdam is timed at 1 thread and
   at all the machine's cores, each series in its own process started with OMP_NUM_THREADS set
   as a launcher sets it; every round measures the one-thread and all-thread bandwidth (in-place
   add, wall clock) right before the steps, and the model divides 28 B per element by that
   function of them.

Usage: python benchmarks/steptime_calibration.py [--dir /tmp] [--rounds 7] [--swap-file-mib 64] [--swap-mib 256]
[--aio-sweep] [--adam-threads] [--skip adam] [--skip aio] [--tag=-NAME]
(the cpu_adam and async_io ops are built on first use in TORCH_EXTENSIONS_DIR).
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

SIZES = (8_388_608, 33_554_432, 67_108_864)  # elements: 128 MiB, 512 MiB, 1 GiB of Adam state (>= 4x L3)
BW_ELEMS = 32 * 2 ** 20  # 128 MiB fp32 per bandwidth buffer (4x a 32 MiB L3)
STEPS_PER_ROUND = 3
AIO = {"block_size": 1 << 20, "queue_depth": 8, "intra_op_parallelism": 1, "single_submit": False,
       "overlap_events": True}
MIB = 2 ** 20
SWAP_FILES = 3  # files per sub-group swap: the fp32 partition, exp_avg, exp_avg_sq (optimizer_utils.py l.46-75, l.492-508)


def _timed(fn, clock) -> tuple[float, float]:
    """(seconds on ``clock``, process CPU seconds) of one call."""
    w, c = clock(), time.process_time()
    fn()
    return clock() - w, time.process_time() - c


def _median_run(fn, n: int, clock) -> tuple[float, float]:
    """The median of n calls: (seconds on ``clock``, process CPU seconds of that call)."""
    runs = sorted(_timed(fn, clock) for _ in range(n))
    return runs[len(runs) // 2]


def _summary(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


# ---------------------------------------------------------------------------------------------
# CPU Adam


def cpu_adam_rounds(torch, rounds: int, threads: int, clock_name: str) -> dict:
    """Interleaved rounds at ``threads`` threads, timed on ``clock_name`` (``thread_time``: the
    CPU seconds of the calling thread, which with one thread runs the whole kernel; or
    ``perf_counter``: wall): bandwidth (in-place add; copy for reference), then a series of
    DeepSpeedCPUAdam steps per size; per-round model / measured. Per size also the unscale pass
    DeepSpeed runs on the CPU fp32 gradient before the step (``unscale_and_clip_grads``:
    ``grad.mul_(1. / combined_scale)``, stage3.py l.2988; combined_scale 1.0 here, as with bf16
    and an unclipped norm), against elements x ``UNSCALE_BYTES`` (8 B) / the round's bandwidth."""
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    from advisor.ledger.steptime import CPU_ADAM_KERNEL_BYTES, UNSCALE_BYTES

    clock = getattr(time, clock_name)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)  # torch's OpenMP runtime, which the cpu_adam op links through libtorch_cpu
    a = torch.ones(BW_ELEMS, dtype=torch.float32)
    b = torch.full_like(a, 1e-7)
    a.add_(b)
    b.copy_(a)
    opts = []
    for n in SIZES:
        p = torch.nn.Parameter(torch.randn(n, dtype=torch.float32))
        p.grad = torch.randn(n, dtype=torch.float32)
        o = DeepSpeedCPUAdam([p], lr=1e-3, adamw_mode=True)
        o.step()  # creates exp_avg / exp_avg_sq
        opts.append((n, o, p))
    rows: list[dict] = []
    try:
        for r in range(rounds):
            load = os.getloadavg()[0]
            t_add, _ = _median_run(lambda: a.add_(b), STEPS_PER_ROUND, clock)
            t_copy, _ = _median_run(lambda: b.copy_(a), STEPS_PER_ROUND, clock)
            bw_add = 3 * BW_ELEMS * 4 / t_add
            bw_copy = 2 * BW_ELEMS * 4 / t_copy
            for n, o, p in opts:
                t, cpu = _median_run(o.step, STEPS_PER_ROUND, clock)
                wall = t if clock_name == "perf_counter" else None
                model = n * CPU_ADAM_KERNEL_BYTES / bw_add
                tu, _ = _median_run(lambda: p.grad.mul_(1.0), STEPS_PER_ROUND, clock)
                rows.append({"round": r, "load1": load, "elements": n, "measured_s": t, "cpu_s": cpu,
                             "cpu_share": cpu / (wall * threads) if wall else None,
                             "bandwidth_inplace_add": bw_add, "bandwidth_copy": bw_copy, "model_s": model,
                             "model_over_measured": model / t,
                             "model_over_measured_copy_bandwidth": n * CPU_ADAM_KERNEL_BYTES / bw_copy / t,
                             "unscale_measured_s": tu, "unscale_model_over_measured": n * UNSCALE_BYTES / bw_add / tu})
    finally:
        torch.set_num_threads(before)
    out = {"threads": threads, "clock": clock_name, "rounds": rounds, "steps_per_round": STEPS_PER_ROUND,
           "load1": _summary([x["load1"] for x in rows]),
           "bandwidth_bytes_per_s_inplace_add": _summary([x["bandwidth_inplace_add"] for x in rows[::len(SIZES)]]),
           "bandwidth_bytes_per_s_copy": _summary([x["bandwidth_copy"] for x in rows[::len(SIZES)]]),
           "sizes": [], "rows": rows}
    for n in SIZES:
        mine = [x for x in rows if x["elements"] == n]
        share = [x["cpu_share"] for x in mine if x["cpu_share"] is not None]
        out["sizes"].append({"elements": n, "kernel_bytes": n * CPU_ADAM_KERNEL_BYTES,
                             "measured_s": _summary([x["measured_s"] for x in mine]),
                             "model_over_measured": _summary([x["model_over_measured"] for x in mine]),
                             "model_over_measured_copy_bandwidth":
                                 _summary([x["model_over_measured_copy_bandwidth"] for x in mine]),
                             "cpu_share": _summary(share) if share else None,
                             "effective_bytes_per_s": _summary([n * CPU_ADAM_KERNEL_BYTES / x["measured_s"]
                                                                for x in mine]),
                             "unscale_measured_s": _summary([x["unscale_measured_s"] for x in mine]),
                             "unscale_model_over_measured": _summary([x["unscale_model_over_measured"] for x in mine])})
    return out


def cpu_adam_threads_child(torch, rounds: int, threads: int, cores: int) -> dict:
    """One thread count's series, in a process started with OMP_NUM_THREADS=``threads`` (as a
    launcher sets it for a rank; :func:`cpu_adam_threads`). Per round, on the wall clock as in
    training: the single-thread bandwidth (in-place add at torch.set_num_threads(1)), the
    all-thread bandwidth (at ``cores`` threads), then DeepSpeedCPUAdam at ``threads`` threads for
    each size; model = elements x CPU_ADAM_KERNEL_BYTES / the step-time model's own rate
    (``advisor.ledger.steptime.cpu_optimizer_rate``: min(all-thread bandwidth / 1 rank, threads x
    single-thread bandwidth), the node figure max(all-thread, single-thread): on a shared machine
    an all-thread probe below one thread's waited for a core). The process's CPU share (CPU seconds / (wall x threads)) is
    recorded: below 1 the step waited for a core, which no bandwidth model predicts."""
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    from advisor.ledger.steptime import CPU_ADAM_KERNEL_BYTES, cpu_optimizer_rate

    clock = time.perf_counter
    a = torch.ones(BW_ELEMS, dtype=torch.float32)
    b = torch.full_like(a, 1e-7)
    a.add_(b)
    torch.set_num_threads(threads)
    opts = []
    for n in SIZES:
        p = torch.nn.Parameter(torch.randn(n, dtype=torch.float32))
        p.grad = torch.randn(n, dtype=torch.float32)
        o = DeepSpeedCPUAdam([p], lr=1e-3, adamw_mode=True)
        o.step()  # creates exp_avg / exp_avg_sq
        opts.append((n, o, p))
    rows: list[dict] = []
    for r in range(rounds):
        load = os.getloadavg()[0]
        torch.set_num_threads(1)
        t1, c1 = _median_run(lambda: a.add_(b), STEPS_PER_ROUND, clock)
        torch.set_num_threads(cores)
        tc, cc = _median_run(lambda: a.add_(b), STEPS_PER_ROUND, clock)
        bw1, bwc = 3 * BW_ELEMS * 4 / t1, 3 * BW_ELEMS * 4 / tc
        # the CPU-time view: each thread's seconds on a core (process CPU / threads), the time the
        # kernel streamed, without the time it waited for a core (OMP_WAIT_POLICY=PASSIVE: idle
        # OpenMP workers sleep instead of spinning, so CPU time is work)
        bw1_cpu, bwc_cpu = 3 * BW_ELEMS * 4 / c1, 3 * BW_ELEMS * 4 * cores / cc
        rate_cpu, _ = cpu_optimizer_rate(max(bw1_cpu, bwc_cpu), 1, threads, bw1_cpu)
        # all cores stream at least what one does: a lower all-thread figure means its probe waited
        # for a core another process held (the machine is shared), so the node figure is the larger
        node = max(bw1, bwc)
        rate, limit = cpu_optimizer_rate(node, 1, threads, bw1)
        torch.set_num_threads(threads)
        for n, o, _ in opts:
            t, cpu = _median_run(o.step, STEPS_PER_ROUND, clock)
            model = n * CPU_ADAM_KERNEL_BYTES / rate
            per_thread = cpu / threads
            rows.append({"round": r, "load1": load, "elements": n, "measured_s": t, "cpu_s": cpu,
                         "model_over_measured_cpu_time": n * CPU_ADAM_KERNEL_BYTES / rate_cpu / per_thread,
                         "bandwidth_1_thread_cpu_time": bw1_cpu, "bandwidth_all_threads_cpu_time": bwc_cpu,
                         "cpu_share": cpu / (t * threads), "bandwidth_1_thread": bw1,
                         f"bandwidth_{cores}_threads": bwc, "node_bandwidth": node, "model_rate": rate,
                         "limited_by": limit,
                         "model_s": model, "model_over_measured": model / t})
    out = {"threads": threads, "cores": cores, "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
           "torch_threads_at_start": None, "clock": "perf_counter", "rounds": rounds,
           "steps_per_round": STEPS_PER_ROUND, "load1": _summary([x["load1"] for x in rows]),
           "bandwidth_1_thread": _summary([x["bandwidth_1_thread"] for x in rows[::len(SIZES)]]),
           f"bandwidth_{cores}_threads": _summary([x[f"bandwidth_{cores}_threads"] for x in rows[::len(SIZES)]]),
           "limited_by": sorted({x["limited_by"] for x in rows}), "sizes": [], "rows": rows}
    for n in SIZES:
        mine = [x for x in rows if x["elements"] == n]
        out["sizes"].append({"elements": n, "kernel_bytes": n * CPU_ADAM_KERNEL_BYTES,
                             "measured_s": _summary([x["measured_s"] for x in mine]),
                             "model_s": _summary([x["model_s"] for x in mine]),
                             "model_over_measured": _summary([x["model_over_measured"] for x in mine]),
                             "model_over_measured_cpu_time": _summary([x["model_over_measured_cpu_time"]
                                                                       for x in mine]),
                             "cpu_share": _summary([x["cpu_share"] for x in mine])})
    return out


def cpu_adam_threads(rounds: int, cores: int) -> dict:
    """DeepSpeedCPUAdam at 1 thread and at the machine's ``cores`` threads, each in its own
    process started with OMP_NUM_THREADS set (how torchrun / DeepSpeed's launcher hand a rank its
    threads), against the model's min(node bandwidth, threads x one core's bandwidth) with both
    bandwidths measured in the same round (:func:`cpu_adam_threads_child`)."""
    out = {}
    for t in sorted({1, cores}):
        env = {**os.environ, "OMP_NUM_THREADS": str(t), "OMP_WAIT_POLICY": "PASSIVE"}
        p = subprocess.run([sys.executable, __file__, "--adam-child", str(t), "--rounds", str(rounds)],
                           env=env, capture_output=True, text=True, timeout=1800)
        if p.returncode:
            out[str(t)] = {"error": (p.stderr or p.stdout)[-2000:]}
            continue
        out[str(t)] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


# ---------------------------------------------------------------------------------------------
# aio


def _pfn_runs(addr: int, nbytes: int) -> int | None:
    """Physically contiguous runs of the pages under [addr, addr + nbytes) (``/proc/self/pagemap``,
    bits 0-54 the page frame number; needs CAP_SYS_ADMIN, else the PFNs read 0: None). A virtio
    disk gets one scatter-gather segment per run, so this says how scattered a buffer is."""
    import struct
    page = os.sysconf("SC_PAGE_SIZE")
    first, n = addr // page, -(-nbytes // page)
    try:
        with open("/proc/self/pagemap", "rb") as f:
            f.seek(first * 8)
            raw = f.read(n * 8)
    except OSError:
        return None
    pfns = [e & ((1 << 55) - 1) for e in struct.unpack(f"{n}Q", raw)]
    if not any(pfns):
        return None
    return 1 + sum(1 for a, b in zip(pfns, pfns[1:]) if b != a + 1)


def _loadavg() -> tuple[float, int]:
    """(1-minute load, runnable tasks now) from /proc/loadavg: the second is the instant's count,
    the first a minute's average."""
    with open("/proc/loadavg") as f:
        parts = f.read().split()
    return float(parts[0]), int(parts[3].split("/")[0])


def aio_rounds(torch, folder: str, file_bytes: int, rounds: int) -> dict:
    """The optimizer swap against the model, interleaved: per round and direction the model's
    inputs (A) and the swap (B) in alternating order (A B, then B A next round: a drift of the
    disk within a pair cancels over the rounds), many short rounds, the per-round ratio's median
    and spread, the load of each round.

    **B, the swap, as DeepSpeed's optimizer swapper submits it.** One ``aio_handle`` at the
    config's aio settings (``partitioned_optimizer_swapper.py`` l.30-34); a sub-group's
    ``num_tensors()`` files -- the fp32 partition and each swappable optimizer state, for Adam
    exp_avg and exp_avg_sq (``optimizer_utils.py`` l.46-75, l.492-508): SWAP_FILES = 3 -- each
    into its own page-locked buffer of the ``SwapBufferManager`` (``utils.py`` l.192: ``count``
    separate ``new_cpu_locked_tensor`` allocations; ``partitioned_optimizer_swapper.py`` l.79-85
    takes ``num_tensors()`` of them), submitted together and then waited on
    (``swap_in_tensors`` / ``swap_out_tensors``, ``utils.py`` l.19-26; ``aio_handle.wait()``,
    ``partitioned_optimizer_swapper.py`` l.105-106 and l.177-183). The handle's threads take its
    ops one at a time (``deepspeed_aio_thread.cpp`` l.24-35; each op split over all of them,
    ``deepspeed_py_io_handle.cpp`` l.175-181), so the three files go one after another, each at
    up to ``queue_depth`` requests (``deepspeed_aio_utils.cpp`` l.77-100): the model's
    bytes / rate (its per-file term, ``movement.AIO_PER_FILE_S``, 3 files x ~80 us beside ~65 ms of
    transfer, is left out here; ``benchmarks/aio_per_file.py`` measures it).

    **A, the model's inputs, into the same buffers and files.** On this VM a read's rate follows
    its destination buffer, per page-locked allocation (benchmarks/aio_read_buffers.py), so the
    inputs are measured into the swap's own buffers, one synchronous op per buffer and file, as
    DeepSpeed's ds_io sweep measures a drive (``sync_pwrite`` / ``sync_pread``):

    * ``stated``: the tier's figure at the config's aio settings (a spec that states its ``aio``):
      the model is that figure, ``nvme_rate`` returns it unchanged;
    * ``aio``: the drive's rate at DEEP (1 MiB x 32 x 2 threads) and one request's latency at
      SMALL_QD1 (64 KiB at depth 1, less its transfer at that rate): the model is
      ``nvme_rate`` of a ``StorageTier`` stating that rate at DEEP and that latency, at the
      config's settings -- the aio term (``advisor.ledger.movement.aio_bandwidth``) as estimate
      computes it.

    Recorded beside them, not model inputs: ``own_buffer``, the swap's bytes as one file into a
    page-locked buffer of its own (how a tuning tool run apart from training would state the
    tier: the method of the earlier runs whose separate-buffer ratios were 0.73-1.77), and each
    buffer's physically contiguous page runs (:func:`_pfn_runs`)."""
    from types import SimpleNamespace
    from deepspeed.ops.op_builder import AsyncIOBuilder
    from advisor.cluster.hardware import StorageTier
    from advisor.ledger.movement import nvme_rate
    lib = AsyncIOBuilder().load(verbose=False)

    def handle(a: dict):
        return lib.aio_handle(a["block_size"], a["queue_depth"], AIO["single_submit"], AIO["overlap_events"],
                              a["intra_op_parallelism"])
    h, h_deep, h_small = handle(AIO), handle(DEEP), handle(SMALL_QD1)
    ex = torch.empty(0, dtype=torch.uint8)
    bufs = [h.new_cpu_locked_tensor(file_bytes, ex).zero_() for _ in range(SWAP_FILES)]  # utils.py l.192
    total = file_bytes * SWAP_FILES
    own = h.new_cpu_locked_tensor(total, ex).zero_()
    small_bytes = min(file_bytes, 16 * 2 ** 20)
    small = bufs[0].narrow(0, 0, small_bytes)
    tag = f"{os.getpid()}"
    paths = [os.path.join(folder, f"steptime_swap_{tag}_{i}.bin") for i in range(SWAP_FILES)]
    own_path = os.path.join(folder, f"steptime_own_{tag}.bin")
    # the same bytes as files of MIN_SWAPPABLE_BYTES (1 MiB, swap_tensor/utils.py l.14-16: the
    # smallest tensor DeepSpeed swaps), into slices of the same buffers: one request per file, so
    # each op runs at depth 1 (io_prep_generator::prep_iocbs submits min(queue depth, the op's
    # remaining blocks), deepspeed_aio_utils.cpp l.77-100) and pays its own open / submit / reap
    small_files = [(b.narrow(0, k * MIB, MIB), os.path.join(folder, f"steptime_1m_{tag}_{i}_{k}.bin"))
                   for i, b in enumerate(bufs) for k in range(file_bytes // MIB)]
    small_path = os.path.join(folder, f"steptime_small_{tag}.bin")
    aio_cfg = SimpleNamespace(**{k: AIO[k] for k in StorageTier.AIO_KEYS})

    def per_file(hd, write: bool) -> float:
        t = time.perf_counter()
        for b, p in zip(bufs, paths):
            (hd.sync_pwrite if write else hd.sync_pread)(b, p)
        return time.perf_counter() - t

    def one(hd, buf, path: str, write: bool) -> float:
        t = time.perf_counter()
        (hd.sync_pwrite if write else hd.sync_pread)(buf, path)
        return time.perf_counter() - t

    def swap(write: bool) -> float:
        t = time.perf_counter()
        for b, p in zip(bufs, paths):
            assert (h.async_pwrite(b, p, 0) if write else h.async_pread(b, p, 0)) == 0
        assert h.wait() == len(bufs)
        return time.perf_counter() - t

    def swap_small(write: bool) -> float:
        t = time.perf_counter()
        for b, p in small_files:
            assert (h.async_pwrite(b, p, 0) if write else h.async_pread(b, p, 0)) == 0
        assert h.wait() == len(small_files)
        return time.perf_counter() - t

    def inputs(write: bool) -> dict:
        deep = total / per_file(h_deep, write)
        per_req = one(h_small, small, small_path, write) / (small_bytes / SMALL_QD1["block_size"])
        lat = max(1e-7, per_req - SMALL_QD1["block_size"] / deep)
        stated = total / per_file(h, write)
        own_rate = total / one(h, own, own_path, write)
        return {"deep": deep, "latency_s": lat, "stated": stated, "own_buffer": own_rate}

    def model_rate(x: dict, d: str) -> float:
        tier = StorageTier(name="probe", mounts=(folder,), capacity_bytes=1, read_bytes_per_s=x["deep"],
                           write_bytes_per_s=x["deep"], aio=tuple(sorted(DEEP.items())),
                           read_latency_s=x["latency_s"], write_latency_s=x["latency_s"])
        return nvme_rate(tier, d, aio_cfg)

    rows = []
    try:
        per_file(h, True)  # every file exists at full size before any read
        swap_small(True)  # and is overwritten, as the swapper rewrites its files by name
        one(h, own, own_path, True)
        one(h_small, small, small_path, True)
        buffer_runs = [_pfn_runs(b.data_ptr(), file_bytes) for b in bufs]
        own_runs = _pfn_runs(own.data_ptr(), total)
        for r in range(rounds):
            for write in (True, False):
                d = "write" if write else "read"
                load1, running = _loadavg()
                if r % 2 == 0:
                    x = inputs(write)
                    t = swap(write)
                    t1 = swap_small(write)
                else:
                    t1 = swap_small(write)
                    t = swap(write)
                    x = inputs(write)
                meas = total / t
                mod = model_rate(x, d)
                rows.append({"round": r, "direction": d, "order": "AB" if r % 2 == 0 else "BA", "load1": load1,
                             "runnable": running, "swap": meas, "tier_deep": x["deep"], "latency_s": x["latency_s"],
                             "tier_stated": x["stated"], "own_buffer": x["own_buffer"], "model_aio": mod,
                             # model / measured of the time: measured rate / model rate
                             "stated_model_over_measured": meas / x["stated"],
                             "aio_model_over_measured": meas / mod,
                             "own_buffer_model_over_measured": meas / x["own_buffer"],
                             "swap_1mib_files": total / t1,
                             "stated_model_over_measured_1mib_files": total / t1 / x["stated"]})
    finally:
        for p in paths + [own_path, small_path] + [q for _, q in small_files]:
            if os.path.exists(p):
                os.unlink(p)
        for b in bufs + [own]:
            h.free_cpu_locked_tensor(b)
    out = {"path": folder, "file_bytes": file_bytes, "files_per_swap": SWAP_FILES, "bytes_per_swap": total,
           "aio": AIO, "deep": DEEP, "small_qd1": SMALL_QD1, "small_bytes": small_bytes, "rounds": rounds,
           "order": "per round and direction: A (model inputs) then B (swap) in even rounds, B then A in odd",
           "buffer_pfn_runs": buffer_runs, "own_buffer_pfn_runs": own_runs, "rows": rows}
    for d in ("write", "read"):
        mine = [x for x in rows if x["direction"] == d]
        s = {k: _summary([x[k] for x in mine]) for k in
             ("swap", "tier_deep", "latency_s", "tier_stated", "own_buffer", "model_aio", "load1", "runnable",
              "stated_model_over_measured", "aio_model_over_measured", "own_buffer_model_over_measured",
              "swap_1mib_files", "stated_model_over_measured_1mib_files")}
        for k in ("stated_model_over_measured", "aio_model_over_measured", "own_buffer_model_over_measured",
                  "stated_model_over_measured_1mib_files"):
            xs = [x[k] for x in mine]
            s[k]["within_25pct_rounds"] = sum(1 for v in xs if abs(v - 1) <= 0.25)
        out[d] = s
    return out


#: The aio settings sweep (--aio-sweep): DEEP calibrates the tier's rate, SMALL_QD1 its request
#: latency; the model (advisor.ledger.movement.aio_bandwidth) predicts the others from those two.
DEEP = {"block_size": 1 << 20, "queue_depth": 32, "intra_op_parallelism": 2}
SMALL_QD1 = {"block_size": 64 << 10, "queue_depth": 1, "intra_op_parallelism": 1}
PREDICTED = (
    {"block_size": 128 << 10, "queue_depth": 1, "intra_op_parallelism": 1},
    {"block_size": 256 << 10, "queue_depth": 1, "intra_op_parallelism": 1},
    {"block_size": 1 << 20, "queue_depth": 1, "intra_op_parallelism": 1},
    {"block_size": 1 << 20, "queue_depth": 2, "intra_op_parallelism": 1},
    {"block_size": 256 << 10, "queue_depth": 4, "intra_op_parallelism": 1},
    {"block_size": 1 << 20, "queue_depth": 8, "intra_op_parallelism": 1},  # DeepSpeed's defaults
    {"block_size": 1 << 20, "queue_depth": 1, "intra_op_parallelism": 4},
)


def _key(a: dict) -> str:
    return f"bs{a['block_size'] >> 10}K_qd{a['queue_depth']}_t{a['intra_op_parallelism']}"


def aio_settings_rounds(torch, folder: str, nbytes: int, small_bytes: int, rounds: int) -> dict:
    """Interleaved rounds over aio settings, each one file by one synchronous DeepSpeed aio op
    (``sync_pwrite`` / ``sync_pread`` of an ``aio_handle`` built at the setting, overlap_events
    on, as ds_io measures a drive). Per round and direction: the tier's rate B from DEEP, the
    request latency L = t_request - block / B from SMALL_QD1 (``small_bytes`` at 64 KiB, depth 1),
    measured beside each PREDICTED setting (before it or after it in turn), which is modelled as
    aio_bandwidth(B, L, setting): the pair's model / measured."""
    from types import SimpleNamespace
    from deepspeed.ops.op_builder import AsyncIOBuilder
    from advisor.ledger.movement import aio_bandwidth
    lib = AsyncIOBuilder().load(verbose=False)
    ex = torch.empty(0, dtype=torch.uint8)
    handles = {}
    for a in (DEEP, SMALL_QD1) + PREDICTED:
        handles[_key(a)] = lib.aio_handle(a["block_size"], a["queue_depth"], False, True, a["intra_op_parallelism"])
    h0 = handles[_key(DEEP)]
    buf = h0.new_cpu_locked_tensor(nbytes, ex)
    buf.fill_(7)
    small = buf.narrow(0, 0, small_bytes)
    path = os.path.join(folder, f"steptime_aio_settings_{os.getpid()}.bin")

    def op(a: dict, write: bool, t) -> float:
        h = handles[_key(a)]
        w = time.perf_counter()
        (h.sync_pwrite if write else h.sync_pread)(t, path)
        return time.perf_counter() - w

    def inputs(write: bool) -> tuple[float, float]:
        rate = nbytes / op(DEEP, write, buf)
        if write:
            op(DEEP, True, buf)  # the small write truncates nothing, but keep the file whole
        t_small = op(SMALL_QD1, write, small)
        if write:
            op(DEEP, True, buf)
        per_req = t_small / (small_bytes / SMALL_QD1["block_size"])
        return rate, max(1e-7, per_req - SMALL_QD1["block_size"] / rate)

    rows = []
    try:
        op(DEEP, True, buf)  # the file exists at full size before any read
        for r in range(rounds):
            for write in (True, False):
                d = "write" if write else "read"
                for i, a in enumerate(PREDICTED):
                    # each setting beside its own inputs, A B or B A in turn (a drift of the disk
                    # within the pair cancels over the rounds); the earlier version calibrated once
                    # per round and then ran all seven settings, the last ~2 s after its inputs
                    load1, running = _loadavg()
                    ab = (r + i) % 2 == 0
                    if ab:
                        rate, lat = inputs(write)
                    meas = nbytes / op(a, write, buf)
                    if not ab:
                        rate, lat = inputs(write)
                    model = aio_bandwidth(rate, lat, SimpleNamespace(**a, overlap_events=True))
                    rows.append({"round": r, "load1": load1, "runnable": running, "order": "AB" if ab else "BA",
                                 "direction": d, "setting": _key(a), **a,
                                 "tier_rate": rate, "latency_s": lat, "measured": meas, "model": model,
                                 "model_over_measured": model / meas})
    finally:
        if os.path.exists(path):
            os.unlink(path)
        h0.free_cpu_locked_tensor(buf)
    out = {"path": folder, "bytes_per_op": nbytes, "small_bytes": small_bytes, "rounds": rounds,
           "deep": DEEP, "small_qd1": SMALL_QD1,
           "method": "one file per synchronous aio op (sync_pwrite / sync_pread, overlap_events on); beside each "
                     "setting (AB / BA in turn) the tier rate from the deep setting, the latency from 64 KiB at "
                     "depth 1, the model "
                     "advisor.ledger.movement.aio_bandwidth(rate, latency, setting)",
           "settings": [], "rows": rows}
    for d in ("write", "read"):
        mine = [x for x in rows if x["direction"] == d]
        out[f"{d}_tier_rate"] = _summary([x["tier_rate"] for x in mine])
        out[f"{d}_latency_s"] = _summary([x["latency_s"] for x in mine])
        out[f"{d}_load1"] = _summary([x["load1"] for x in mine])
        for a in PREDICTED:
            xs = [x for x in mine if x["setting"] == _key(a)]
            out["settings"].append({"direction": d, "setting": _key(a), **a,
                                    "measured": _summary([x["measured"] for x in xs]),
                                    "model": _summary([x["model"] for x in xs]),
                                    "model_over_measured": {**_summary([x["model_over_measured"] for x in xs]),
                                                            "within_25pct_rounds": sum(
                                                                1 for x in xs if abs(x["model_over_measured"] - 1) <= 0.25)}})
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp", help="folder on the disk to test (swap files are written there)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--swap-mib", type=int, default=256, help="bytes per op of --aio-sweep, MiB")
    ap.add_argument("--swap-file-mib", type=int, default=64,
                    help="one swap file (a sub-group's fp32 partition or one moment) of the swap check, MiB")
    ap.add_argument("--skip", choices=("adam", "aio"), action="append", default=[])
    ap.add_argument("--aio-sweep", action="store_true",
                    help="also time DeepSpeed aio at several block sizes / queue depths / threads against the model")
    ap.add_argument("--tag", default="", help="suffix of the results file name")
    ap.add_argument("--adam-threads", action="store_true",
                    help="also time DeepSpeedCPUAdam at 1 thread and at all cores, each in a process with "
                         "OMP_NUM_THREADS set, against min(all-core bandwidth, threads x one-core bandwidth)")
    ap.add_argument("--host", default=None, help="the machine's name in the results file (default: the hostname)")
    ap.add_argument("--adam-child", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    import torch
    if a.adam_child is not None:  # one series of --adam-threads, in its own process: JSON on stdout
        d = cpu_adam_threads_child(torch, a.rounds, a.adam_child, os.cpu_count() or 1)
        print(json.dumps(d))
        return 0

    res: dict = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "machine": {"host": socket.gethostname(), "cpu": platform.processor() or platform.machine(),
                             "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                             "load_before": os.getloadavg(), "torch": torch.__version__}}
    try:
        with open("/proc/cpuinfo") as f:
            res["machine"]["cpu"] = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    if "adam" not in a.skip:
        # the proof figure: one thread, its CPU seconds (a memory-bound kernel's time while it runs;
        # on a shared machine the wall clock also counts the time it waits for a core)
        res["cpu_adam"] = cpu_adam_rounds(torch, a.rounds, 1, "thread_time")
        # as in training: torch's thread count, wall clock (reported with the CPU share it got)
        res["cpu_adam_wall"] = cpu_adam_rounds(torch, a.rounds, res["machine"]["torch_threads"], "perf_counter")
    if a.adam_threads:
        res["cpu_adam_threads"] = cpu_adam_threads(a.rounds, os.cpu_count() or 1)
    if "aio" not in a.skip:
        try:
            res["aio"] = aio_rounds(torch, a.dir, a.swap_file_mib * 2 ** 20, a.rounds)
        except Exception as e:  # noqa: BLE001  (report, do not hide: the JSON says why)
            res["aio"] = {"error": f"{type(e).__name__}: {e}"}
    if a.aio_sweep:
        try:
            res["aio_settings"] = aio_settings_rounds(torch, a.dir, a.swap_mib * 2 ** 20, 16 * 2 ** 20, a.rounds)
        except Exception as e:  # noqa: BLE001  (report, do not hide: the JSON says why)
            res["aio_settings"] = {"error": f"{type(e).__name__}: {e}"}
    res["machine"]["load_after"] = os.getloadavg()
    out = Path(__file__).parent / "results" / f"steptime_calibration-{a.host or socket.gethostname()}{a.tag}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    m = res["machine"]
    print(f"machine: {m['cpu']}, {m['cpus']} CPUs, torch threads {m['torch_threads']}, "
          f"load {m['load_before'][0]:.1f} -> {m['load_after'][0]:.1f}")
    for key in ("cpu_adam", "cpu_adam_wall"):
        if key not in res:
            continue
        ca = res[key]
        bw, bc = ca["bandwidth_bytes_per_s_inplace_add"], ca["bandwidth_bytes_per_s_copy"]
        print(f"[{ca['threads']} thread(s), {ca['clock']}, {ca['rounds']} rounds, load {ca['load1']['min']:.1f}-"
              f"{ca['load1']['max']:.1f}] bandwidth, in-place add: {bw['median'] / 1e9:.2f} GB/s "
              f"({bw['min'] / 1e9:.2f}-{bw['max'] / 1e9:.2f}); copy {bc['median'] / 1e9:.2f} GB/s")
        for s in ca["sizes"]:
            r, c = s["model_over_measured"], s["cpu_share"]
            print(f"  DeepSpeedCPUAdam {s['elements']:>11,} elements: measured {s['measured_s']['median'] * 1e3:7.1f} ms,"
                  f" model/measured {r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f}), with copy bandwidth "
                  f"{s['model_over_measured_copy_bandwidth']['median']:.2f}"
                  + (f"; CPU share {c['median']:.2f}" if c else ""))
            u = s["unscale_model_over_measured"]
            print(f"    unscale pass (grad.mul_): measured {s['unscale_measured_s']['median'] * 1e3:7.1f} ms, "
                  f"model/measured {u['median']:.2f} ({u['min']:.2f}-{u['max']:.2f})")
    for t, ca in (res.get("cpu_adam_threads") or {}).items():
        if "error" in ca:
            print(f"[OMP_NUM_THREADS={t}] error: {ca['error'][-300:]}")
            continue
        b1, bc = ca["bandwidth_1_thread"], ca[f"bandwidth_{ca['cores']}_threads"]
        print(f"[OMP_NUM_THREADS={t}, wall, {ca['rounds']} rounds, load {ca['load1']['min']:.1f}-{ca['load1']['max']:.1f}]"
              f" bandwidth 1 thread {b1['median'] / 1e9:.2f} GB/s ({b1['min'] / 1e9:.2f}-{b1['max'] / 1e9:.2f}), "
              f"{ca['cores']} threads {bc['median'] / 1e9:.2f} GB/s ({bc['min'] / 1e9:.2f}-{bc['max'] / 1e9:.2f}); "
              f"model limited by {', '.join(ca['limited_by'])}")
        for s in ca["sizes"]:
            r, c = s["model_over_measured"], s["cpu_share"]
            print(f"  DeepSpeedCPUAdam {s['elements']:>11,} elements: measured {s['measured_s']['median'] * 1e3:7.1f} ms "
                  f"({s['measured_s']['min'] * 1e3:.1f}-{s['measured_s']['max'] * 1e3:.1f}), model "
                  f"{s['model_s']['median'] * 1e3:7.1f} ms, model/measured {r['median']:.2f} ({r['min']:.2f}-"
                  f"{r['max']:.2f}); CPU share {c['median']:.2f}; by CPU time "
                  f"{s['model_over_measured_cpu_time']['median']:.2f} ({s['model_over_measured_cpu_time']['min']:.2f}-"
                  f"{s['model_over_measured_cpu_time']['max']:.2f})")
    ai = res.get("aio")
    if ai and "error" in ai:
        print(f"aio: {ai['error']}")
    elif ai:
        print(f"aio swap: {ai['files_per_swap']} files x {ai['file_bytes'] >> 20} MiB into separate page-locked "
              f"buffers, {ai['rounds']} rounds, inputs and swap alternating (AB / BA)")
        for d in ("write", "read"):
            x = ai[d]
            ld, rn = x["load1"], x["runnable"]
            print(f"  {d}: swap {x['swap']['median'] / 1e9:.2f} GB/s ({x['swap']['min'] / 1e9:.2f}-"
                  f"{x['swap']['max'] / 1e9:.2f}), load {ld['min']:.1f}-{ld['max']:.1f}, runnable "
                  f"{rn['min']:.0f}-{rn['max']:.0f}")
            for k, what in (("stated", "tier stated at the aio settings"),
                            ("aio", "aio model from rate at 1 MiB x 32 x 2 + latency"),
                            ("own_buffer", "tier probed into its own buffer (not the model's method)"),
                            ("stated", "the same bytes as 1 MiB files, against the stated tier")):
                r = x[f"{k}_model_over_measured" + ("_1mib_files" if what.startswith("the same") else "")]
                print(f"    {what:<58} model/measured {r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f}), "
                      f"{r['within_25pct_rounds']}/{r['n']} rounds within 25 %")
    sw = res.get("aio_settings")
    if sw and "error" in sw:
        print(f"aio settings: {sw['error']}")
    elif sw:
        for d in ("write", "read"):
            tr, lt = sw[f"{d}_tier_rate"], sw[f"{d}_latency_s"]
            print(f"aio {d}s: tier rate at {_key(DEEP)} {tr['median'] / 1e9:.2f} GB/s ({tr['min'] / 1e9:.2f}-"
                  f"{tr['max'] / 1e9:.2f}), latency at {_key(SMALL_QD1)} {lt['median'] * 1e6:,.0f} us "
                  f"({lt['min'] * 1e6:,.0f}-{lt['max'] * 1e6:,.0f})")
            for x in sw["settings"]:
                if x["direction"] != d:
                    continue
                r = x["model_over_measured"]
                print(f"  {x['setting']:<16} measured {x['measured']['median'] / 1e9:5.2f} GB/s, model "
                      f"{x['model']['median'] / 1e9:5.2f} GB/s -> model/measured {r['median']:.2f} "
                      f"({r['min']:.2f}-{r['max']:.2f})")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
