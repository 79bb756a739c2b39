"""Does a DeepSpeed aio read's rate follow the file layout, the submit mode or the destination
buffer? (issue 23: the swap-path read check's 0.72 model/measured in
results/steptime_calibration-vm-swap-run2.json, where the tier was probed into one 256 MiB
page-locked buffer and the swap read four 64 MiB files into four other page-locked buffers.)

One aio_handle at DeepSpeed's defaults (1 MiB blocks, queue depth 8, 1 thread, overlap_events),
O_DIRECT as deepspeed_aio_common.cpp opens files. Per round, after rewriting the files: one 256 MiB
file read synchronously twice (page cache: O_DIRECT, so a second read should not be faster) and
asynchronously; the four 64 MiB files read asynchronously (DeepSpeed's swap_in_tensors + wait) twice
and synchronously, into the four small buffers; the four files into slices of the big buffer; the
big file into a second big buffer allocated after the small ones, into a plain (not page-locked)
tensor, and by offsets into the four small buffers. GB/s = 1e9 bytes/s, median (min-max) of the
rounds.

Usage: python benchmarks/aio_read_buffers.py FOLDER ROUNDS
"""
import os, sys, time, json, statistics
import torch
from deepspeed.ops.op_builder import AsyncIOBuilder
lib = AsyncIOBuilder().load(verbose=False)
h = lib.aio_handle(1 << 20, 8, False, True, 1)
N = 256 << 20; F = 4; per = N // F
ex = torch.empty(0, dtype=torch.uint8)
whole = h.new_cpu_locked_tensor(N, ex); whole.fill_(7)
bufs = [h.new_cpu_locked_tensor(per, ex) for _ in range(F)]
for b in bufs: b.fill_(7)
whole2 = h.new_cpu_locked_tensor(N, ex); whole2.fill_(7)  # allocated after the small ones
plain = torch.empty(N, dtype=torch.uint8); plain.fill_(7)  # not page-locked (aio bounce? no: CPU tensor read in place)
def one_into(buf): (h.sync_pread)(buf, one)
d = sys.argv[1]
one = os.path.join(d, "rp_one.bin"); many = [os.path.join(d, f"rp_{i}.bin") for i in range(F)]
def t(fn):
    s = time.perf_counter(); fn(); return N / (time.perf_counter() - s) / 1e9
def one_sync(write): (h.sync_pwrite if write else h.sync_pread)(whole, one)
def one_async(write):
    assert (h.async_pwrite if write else h.async_pread)(whole, one, 0) == 0; h.wait()
def many_async(write):
    for b, p in zip(bufs, many): assert (h.async_pwrite(b, p, 0) if write else h.async_pread(b, p, 0)) == 0
    h.wait()
def many_sync(write):
    for b, p in zip(bufs, many): (h.sync_pwrite if write else h.sync_pread)(b, p)
def many_as_one_buffer(write):  # the 4 files read into one contiguous buffer's slices
    for i, p in enumerate(many):
        assert (h.async_pread(whole.narrow(0, i * per, per), p, 0)) == 0
    h.wait()
one_sync(True); many_async(True)
rows = {k: [] for k in ("one_sync_cold", "one_sync_again", "one_async", "many_async_cold", "many_async_again", "many_sync", "many_into_one_buffer", "one_sync_after_write_many_async_after_write")}
for r in range(int(sys.argv[2])):
    one_sync(True); many_async(True)          # both freshly written, as in the benchmark round
    rows["one_sync_cold"].append(t(lambda: one_sync(False)))
    rows["one_sync_again"].append(t(lambda: one_sync(False)))
    rows["one_async"].append(t(lambda: one_async(False)))
    rows["many_async_cold"].append(t(lambda: many_async(False)))
    rows["many_async_again"].append(t(lambda: many_async(False)))
    rows["many_sync"].append(t(lambda: many_sync(False)))
    rows["many_into_one_buffer"].append(t(lambda: many_as_one_buffer(False)))
    rows.setdefault("one_into_second_big_buffer", []).append(t(lambda: one_into(whole2)))
    rows.setdefault("one_into_plain_tensor", []).append(t(lambda: one_into(plain)))
    rows.setdefault("one_into_4_small_by_offset", []).append(t(lambda: [h.async_pread(b, one, i * per) for i, b in enumerate(bufs)] and h.wait()))
for k, v in rows.items():
    if v: print(f"{k:<22} median {statistics.median(v):.2f} GB/s  ({min(v):.2f}-{max(v):.2f}) n={len(v)}")
for p in [one] + many: os.unlink(p)
