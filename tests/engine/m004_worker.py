"""Single-rank worker for the M004 engine cells (tests/engine/test_nvme_param_buffer.py).

argv: job JSON path, output JSON path. The job: {"config": DeepSpeed config, "steps": K,
"frozen": bool, "chain": N (optional)}. Builds one module that holds two 1031 x 1024 weights
directly (both swapped to NVMe: 1,055,744 x 2 B >= 1 MiB) and a small trainable head; with
``chain`` N instead a trainable 1024-element scale ``pre`` (so the gradient flows back through
everything after it, as LoRA adapters make it), N modules ``layers.i`` each holding one frozen
1024 x 1024 weight (2 MiB: swapped), and the head; with ``mixed`` the scale, one such layer, then
the two-weight module ``m`` (frozen) and its head. Initialises the real DeepSpeed engine (CPU
accelerator, gloo, libaio) and trains K steps. Writes {"steps": K} or {"error", "steps_done",
"traceback"}.
Test code: imports torch and deepspeed.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import traceback


def main(job_path: str, out_path: str) -> int:
    with open(job_path) as fh:
        job = json.load(fh)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    os.environ.update(DS_ACCELERATOR=os.environ.get("DS_ACCELERATOR", "cpu"), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    rec: dict = {}
    try:
        import deepspeed
        import torch

        class Two(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = torch.nn.Parameter(torch.randn(1031, 1024) * 0.01, requires_grad=not job["frozen"])
                self.b = torch.nn.Parameter(torch.randn(1031, 1024) * 0.01, requires_grad=not job["frozen"])

            def forward(self, x):
                return x @ self.a.t() + x @ self.b.t()

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = Two()
                self.head = torch.nn.Linear(1031, 8)

            def forward(self, x):
                return self.head(self.m(x))

        class One(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.randn(1024, 1024) * 0.01, requires_grad=False)

            def forward(self, x):
                return torch.relu(x @ self.w.t()) + x

        class Pre(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = torch.nn.Parameter(torch.ones(1024))

            def forward(self, x):
                return x * self.weight

        class Chain(torch.nn.Module):
            def __init__(self, n):
                super().__init__()
                self.pre = Pre()
                self.layers = torch.nn.ModuleList([One() for _ in range(n)])
                self.head = torch.nn.Linear(1024, 8)

            def forward(self, x):
                x = self.pre(x)
                for layer in self.layers:
                    x = layer(x)
                return self.head(x)

        class Mixed(torch.nn.Module):
            """pre (trainable), one frozen layer held for reuse, then module m's two frozen weights."""

            def __init__(self):
                super().__init__()
                self.pre = Pre()
                self.layers = torch.nn.ModuleList([One()])
                self.m = Two()
                self.head = torch.nn.Linear(1031, 8)

            def forward(self, x):
                return self.head(self.m(self.layers[0](self.pre(x))))

        torch.manual_seed(0)
        deepspeed.init_distributed(dist_backend="gloo")
        net = Mixed() if job.get("mixed") else Chain(int(job["chain"])) if job.get("chain") else Net()
        engine, *_ = deepspeed.initialize(model=net, model_parameters=[p for p in net.parameters() if p.requires_grad],
                                          config=job["config"])
        rec["steps_done"] = 0
        for _ in range(int(job.get("steps", 1))):
            x = torch.randn(2, 1024).to(torch.bfloat16)
            loss = engine(x).float().pow(2).mean()
            engine.backward(loss)
            engine.step()
            rec["steps_done"] += 1
        rec["steps"] = int(job.get("steps", 1))
    except Exception as e:  # reported to the test
        rec["error"] = f"{type(e).__name__}: {e}"
        rec["traceback"] = traceback.format_exc()[-3000:]
    with open(out_path, "w") as fh:
        json.dump(rec, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
