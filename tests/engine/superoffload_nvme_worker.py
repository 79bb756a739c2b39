"""Single-rank worker for tests/engine/test_superoffload_nvme_engine.py (rule O010).

argv: job JSON path, output JSON path. The job: {"config": DeepSpeed config, "steps": K}. Builds
nn.Sequential(Linear(1024, 1024), Linear(1024, 1024)), initialises the real DeepSpeed 0.19.8 engine
(CPU accelerator, gloo) with ``offload_optimizer.super_offload`` and trains K steps. SuperOffload
refuses any accelerator but CUDA (``superoffload_stage3.py`` l.20-24, ``_validate_superoffload_accelerator``),
and its ``partition_grads`` synchronizes the current stream (l.168), which DeepSpeed's CPU accelerator
does not have (``current_stream()`` is None); both are patched in that module only: the check made a
no-op, the stream one whose ``synchronize`` does nothing (on CUDA it waits for the copies just queued,
which the CPU made synchronously). Nothing else is changed. Writes {"steps": K, "optimizer"} or
{"error", "where", "steps_done", "phase", "traceback"} ("where": file:line of the raising frame).
Test code: imports torch and deepspeed.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import traceback
import types


class _Acc:
    """DeepSpeed's accelerator, with a stream whose synchronize is a no-op where it has none."""

    def __init__(self, acc):
        self._acc = acc

    def __getattr__(self, k):
        return getattr(self._acc, k)

    def current_stream(self, *a, **k):
        return self._acc.current_stream(*a, **k) or types.SimpleNamespace(synchronize=lambda: None)


def main(job_path: str, out_path: str) -> int:
    with open(job_path) as fh:
        job = json.load(fh)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    os.environ.update(DS_ACCELERATOR=os.environ.get("DS_ACCELERATOR", "cpu"), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    rec: dict = {"steps_done": 0}
    eng = None
    try:
        import deepspeed
        import deepspeed.runtime.superoffload.superoffload_stage3 as so
        import torch
        from deepspeed.accelerator import get_accelerator

        so._validate_superoffload_accelerator = lambda: None
        acc = _Acc(get_accelerator())
        so.get_accelerator = lambda: acc
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 1024))
        rec["phase"] = "initialize"
        eng, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=job["config"])
        rec["optimizer"] = type(eng.optimizer).__name__
        for _ in range(job.get("steps", 2)):
            x = torch.randn(4, 1024)
            rec["phase"] = "backward"
            eng.backward(eng(x).float().pow(2).mean())
            rec["phase"] = "step"
            eng.step()
            rec["steps_done"] += 1
        rec["steps"] = rec["steps_done"]
    except Exception as e:  # noqa: BLE001  (the record says what DeepSpeed raised, and where)
        tb = traceback.extract_tb(e.__traceback__)[-1]
        rec.update(error=f"{type(e).__name__}: {e}", where=f"{os.path.basename(tb.filename)}:{tb.lineno}",
                   traceback=traceback.format_exc()[-4000:])
    with open(out_path, "w") as fh:
        json.dump(rec, fh)
    try:
        eng.optimizer.superoffload_cpu_optimizer.close()  # its worker process
    except Exception:  # noqa: BLE001
        pass
    sys.stdout.flush()
    os._exit(0)  # the CPU-Adam worker process and gloo would otherwise hold the exit


if __name__ == "__main__":  # SuperOffload's worker process is spawned: it re-imports this module
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
