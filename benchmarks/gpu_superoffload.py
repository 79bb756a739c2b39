"""SuperOffload's overlap on a GPU (issue 23): does DeepSpeed 0.19.8 hide the CPU optimizer step of
finished sub-groups behind the rest of the boundary's backward as the step-time model says
(``advisor.ledger.steptime.super_offload_tail``)?

One rank, ZeRO-3, bf16, ``offload_optimizer: cpu, super_offload: true``, a stack of L bias-free
H x H nn.Linear layers with ``sub_group_size`` = ``reduce_bucket_size`` = H^2, so each weight is its
own sub-group, handed to the worker when the next layer's gradient arrives (the last one in the
epilogue). Runs the same model with ``gradient_clipping`` 0 (the async path) and 1.0
(``_step_with_clipping``: every sub-group after backward, nothing hidden) and writes per step the
forward, backward and step seconds, plus c = the worker's seconds for one sub-group (timed with
``_sync_cpu_optimizer_step``, the clipping path's own call, after training). The comparison with the
model (measured backward B and c in, hidden seconds out) is made by
``benchmarks/gpu_superoffload_compare.py`` on the JSON.

Usage: python3 benchmarks/gpu_superoffload.py CLIP OUT.json   (one process per CLIP: each
``deepspeed.initialize`` spawns its own worker). Needs CUDA and deepspeed (JIT-builds cpu_adam).
"""

from __future__ import annotations

import json
import os
import sys
import time

L, H, T, STEPS = 8, 4096, 262144, 4


def main(clip: float, out: str) -> None:
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(29600 + int(clip * 10)))
    import deepspeed
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(H, H, bias=False) for _ in range(L)])
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
           "gradient_clipping": clip, "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
           "zero_optimization": {"stage": 3, "sub_group_size": H * H, "reduce_bucket_size": H * H,
                                 "stage3_param_persistence_threshold": 0,
                                 "offload_optimizer": {"device": "cpu", "super_offload": True}}}
    engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16) * 0.01
    zo = engine.optimizer
    spent: dict[str, float] = {}

    def timed(name):
        orig = getattr(zo, name)

        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return orig(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t
        setattr(zo, name, wrapper)

    for name in ("_wait_for_async_operations", "unscale_and_clip_grads", "_sync_cpu_optimizer_step",
                 "_reassign_or_swap_out_partitioned_parameters", "_optimizer_step", "partition_grads",
                 "_get_norm_groups", "_overflow_check_and_loss_scale_update", "_pre_step", "_partition_all_parameters",
                 "_post_step", "_prepare_sub_group", "_release_sub_group"):
        if hasattr(zo, name):
            timed(name)
    rows = []
    for _ in range(STEPS):
        spent.clear()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = engine(x).float().pow(2).mean()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        engine.backward(loss)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        engine.step()
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        rows.append({"forward_s": t1 - t0, "backward_s": t2 - t1, "step_s": t3 - t2, "total_s": t3 - t0,
                     "inside_s": dict(spent)})
    cs = []
    for i, _ in enumerate(zo.fp16_groups):
        if zo.subgroup_to_device[i] != "cpu":
            continue
        fp32 = zo.fp32_partitioned_groups_flat[i]
        pg = zo.sub_group_to_group_id[i]
        t0 = time.perf_counter()
        zo._sync_cpu_optimizer_step(pg, i, fp32.data, fp32.grad.data, lr=zo.optimizer.param_groups[pg]["lr"])
        cs.append(time.perf_counter() - t0)
    res = {"clip": clip, "L": L, "H": H, "tokens": T, "steps": rows, "worker_sub_group_s": cs,
           "sub_groups": len(zo.fp16_groups), "type": type(zo).__name__, "torch": torch.__version__,
           "deepspeed": deepspeed.__version__, "device": torch.cuda.get_device_name(0),
           "cpus": os.cpu_count(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    print(json.dumps(res, indent=1))
    with open(out, "w") as f:
        f.write(json.dumps(res, indent=1) + "\n")
    zo.superoffload_cpu_optimizer.close()


if __name__ == "__main__":
    main(float(sys.argv[1]), sys.argv[2])
