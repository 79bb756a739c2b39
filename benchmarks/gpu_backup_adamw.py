"""Partial optimizer offload's GPU step (issue 23): time torch's foreach AdamW, the backup optimizer
DeepSpeed 0.19.8's ZeRO-3 steps the accelerator sub-groups with (``stage3.py`` l.313-325,
``_optimizer_step`` l.1249-1258), and compare it with the step-time model's bytes
(``advisor.ledger.steptime.BACKUP_ADAMW_BYTES`` 72 B per element, + 8 B weight decay) over the
bandwidth this GPU reaches on a plain copy measured in the same run (a ratio, not a timed
assertion), and over the preset's data-sheet figure.

Also checks the overlap rule the model uses: ``optimizer.step()`` returns to the host before the
GPU kernels finish (so the CPU step of the host sub-groups runs beside it), and a blocking
host-to-GPU ``copy_`` (the first host sub-group's 16-bit copy back, ``stage3.py`` l.2857) waits
for them.

Usage: python3 benchmarks/gpu_backup_adamw.py [OUT.json]   (needs CUDA; on CPU it runs tiny sizes
to check itself and says so).
"""

from __future__ import annotations

import ast
import json
import pathlib
import platform
import sys
import time

import torch


def _model_constants() -> dict[str, int]:
    """The step-time model's byte counts, read from advisor/ledger/steptime.py's source (the device
    image lacks the packages advisor's config layer imports)."""
    src = (pathlib.Path(__file__).resolve().parents[1] / "advisor" / "ledger" / "steptime.py").read_text()
    out = {}
    for node in ast.parse(src).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id in ("BACKUP_ADAMW_BYTES", "BACKUP_ADAMW_DECAY_BYTES"):
                    out[t.id] = node.value.value
    return out


_C = _model_constants()
BACKUP_ADAMW_BYTES, BACKUP_ADAMW_DECAY_BYTES = _C["BACKUP_ADAMW_BYTES"], _C["BACKUP_ADAMW_DECAY_BYTES"]


def _sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def _timed(fn, dev: str, reps: int) -> float:
    fn()
    _sync(dev)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        _sync(dev)
        best = min(best, time.perf_counter() - t0)
    return best


def main(out: str | None) -> dict:
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    sizes = [2 ** 24, 2 ** 26, 2 ** 28] if dev == "cuda" else [2 ** 16, 2 ** 18]
    reps = 10 if dev == "cuda" else 2
    res: dict = {"device": torch.cuda.get_device_name(0) if dev == "cuda" else platform.processor() or "cpu",
                 "torch": torch.__version__, "rows": []}
    for n in sizes:
        a = torch.empty(n, dtype=torch.float32, device=dev).uniform_()
        b = torch.empty_like(a)
        copy_s = _timed(lambda: b.copy_(a), dev, reps)
        bw = 8 * n / copy_s  # read 4 + write 4
        del a, b
        for wd in (0.0, 0.01):
            p = torch.nn.Parameter(torch.randn(n, device=dev))
            p.grad = torch.randn(n, device=dev)
            opt = torch.optim.AdamW([p], lr=1e-4, weight_decay=wd, foreach=True)
            s = _timed(opt.step, dev, reps)
            model_b = BACKUP_ADAMW_BYTES + (BACKUP_ADAMW_DECAY_BYTES if wd else 0)
            res["rows"].append({"elements": n, "weight_decay": wd, "measured_s": s, "copy_bytes_per_s": bw,
                                "model_bytes_per_element": model_b, "model_s_at_copy_bw": model_b * n / bw,
                                "model_over_measured": model_b * n / bw / s,
                                "implied_bytes_per_element": s * bw / n})
            del opt, p
        if dev == "cuda":
            torch.cuda.empty_cache()
    if dev == "cuda":
        # overlap rule: step() returns before its kernels end; a blocking H2D copy_ waits for them
        n = 2 ** 28
        p = torch.nn.Parameter(torch.randn(n, device=dev))
        p.grad = torch.randn(n, device=dev)
        opt = torch.optim.AdamW([p], lr=1e-4, foreach=True)
        opt.step()
        _sync(dev)
        gpu_s = _timed(opt.step, dev, 3)
        host_src = torch.randn(2 ** 10)
        dst = torch.empty(2 ** 10, dtype=torch.bfloat16, device=dev)
        t0 = time.perf_counter()
        opt.step()
        t1 = time.perf_counter()
        dst.copy_(host_src)  # fp32 host -> bf16 GPU, not non_blocking (stage3.py l.2857)
        t2 = time.perf_counter()
        _sync(dev)
        res["overlap"] = {"gpu_step_s": gpu_s, "step_call_returns_after_s": t1 - t0,
                          "blocking_copy_returns_after_s": t2 - t0,
                          "step_returns_before_kernels_end": (t1 - t0) < 0.5 * gpu_s,
                          "blocking_copy_waits_for_them": (t2 - t0) >= 0.9 * gpu_s}
    text = json.dumps(res, indent=1)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    return res


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
