"""Worker for test_moe_offload_engine.py: real DeepSpeed ZeRO-2 with ``offload_optimizer: {device: cpu}`` and a
native MoE layer (moe_toy.py) under expert parallelism, CPU / gloo. Prints per rank, after one "MOEO " marker:

* ``census``: the engine's tensors by ledger item and tier (``advisor.engine.worker``'s Census walk, pinned
  storages told by DeepSpeed's own ``pin_memory`` calls) after ``deepspeed.initialize`` and after the first
  ``engine.step``;
* ``live``: every storage allocated since before the model was built and alive at those two instants (the
  worker's ``StorageTracker``: open world), in bytes, without gloo's own buffers (``CPU_ONLY_SITES``), and the
  storages no census item claims there, by allocation site;
* ``groups``: per optimizer param group whether it is the moe one, DeepSpeed's partition count and the sizes
  of the engine's own offload tensors: the fp32 partition (``single_partition_of_fp32_groups``), its host
  gradient, the 16-bit host buffer and the 16-bit partition the step copies back into;
* ``d2h``: the bytes the backward's ``async_inplace_copy_grad_to_fp32_buffer_from_gpu`` calls copied into the
  host fp32 gradients (each call's destination slice, counted from the engine's ``grad_position``), and
  ``h2d``: the 16-bit partitions the step wrote from the host buffer (counted on the tensors it copied);
* ``backward``: the tracker's phase ``backward:1`` (``engine.backward`` with its boundary reduce): its high-water
  mark with and without gloo's buffers and the storages live there by allocation site (``StorageTracker.report``).

* ``phases``: every ``backward:k`` phase of the run, k = 1 .. 2 x GA (two optimizer steps of
  ``gradient_accumulation_steps`` micro-steps: the first iteration's micro-steps and the steady one's), the same
  record as ``backward``; ``init`` / ``step`` / ``d2h`` / ``h2d`` are taken at the first optimizer step.

argv: EP, the DeepSpeed config (JSON, its gradient_accumulation_steps the micro-steps per step), H, F, E."""

import gc
import json
import sys

import torch

import deepspeed
from deepspeed.accelerator import get_accelerator

from advisor.engine import worker as W
from advisor.engine.measure import CPU_ONLY_SITES
from moe_toy import net_and_param_groups


def _live(tracker) -> dict:
    gc.collect()
    live = {k: e for k, e in tracker.live.items() if not e[2].startswith(CPU_ONLY_SITES)}
    return live


def _instant(engine, tracker, cpu_accel: bool) -> dict:
    c = W.Census(cpu_accel)
    W._walk(engine, c)
    live = _live(tracker)
    claimed = set(c.claimed)
    unclaimed: dict[str, int] = {}
    for nb, ptr, site in live.values():
        if ptr not in claimed:
            unclaimed[site] = unclaimed.get(site, 0) + nb
    return {"census": c.result(), "live": sum(e[0] for e in live.values()),
            "unclaimed": sorted(unclaimed.items(), key=lambda kv: -kv[1])}


def main() -> None:
    ep, cfg, h, f, e = int(sys.argv[1]), json.loads(sys.argv[2]), *map(int, sys.argv[3:6])
    ga = int(cfg.get("gradient_accumulation_steps", 1))
    deepspeed.init_distributed(dist_backend="gloo")
    W._install_patches()
    cpu_accel = get_accelerator().device_name() == "cpu"
    tracker = W.StorageTracker()
    W._TRACKER[:] = [tracker]
    # gloo's worker thread may hold a finished all_reduce's flat copy past the settle's default 0.2 s on a loaded
    # machine: one GA 2 run's rank 3 held the expert flush's 65,536 B flat copy into the dense one's (74,240 B at
    # allreduce_bucket, backward:1 +1.9%), its rerun 65,536 B as every other rank. Waiting longer only waits.
    restore = W._settle_collectives(timeout_s=5.0)
    moved = {"d2h": 0, "h2d": 0}
    with tracker.mode:
        m, pg = net_and_param_groups(h, f, e, ep)
        engine, o, _, _ = deepspeed.initialize(model=m, model_parameters=pg, config=cfg)
        del m, pg
        at_init = _instant(engine, tracker, cpu_accel)

        cls = type(o)
        orig_copy = cls.async_inplace_copy_grad_to_fp32_buffer_from_gpu

        def copy(self, param):
            i, _, dest_offset, n = self.grad_position[self.get_param_id(param)]
            moved["d2h"] += n * self.single_partition_of_fp32_groups[i].grad.element_size()
            return orig_copy(self, param)

        cls.async_inplace_copy_grad_to_fp32_buffer_from_gpu = copy
        # the step's H2D: bit16_partitions[partition_id].data.copy_(bit16_partition_buffer.data) (stage_1_and_2.py
        # l.3096), counted by the 16-bit partition each copy_ from the host buffer writes
        bufs = {b.data_ptr() for b in o.param_buffer_of_bit16_for_cpu_offload_groups}
        orig_tensor_copy = torch.Tensor.copy_

        def tcopy(self, src, *a, **k):
            if isinstance(src, torch.Tensor) and src.data_ptr() in bufs:
                moved["h2d"] += self.numel() * self.element_size()
            return orig_tensor_copy(self, src, *a, **k)

        # 2 optimizer steps of ga micro-steps each (the steady iteration's backward too), the tracker's phases named
        # by micro-step k as the peak-parity worker's (advisor.engine.worker._phase; measure.phase_instants maps
        # them onto the timeline's instants at any GA): forward:k, backward:k (engine.backward with the reduce
        # inside it: at a non-boundary micro-step copy_grads_in_partition's async_accumulate_grad_in_cpu_via_gpu,
        # at the boundary the fp64 norm copies and host copies, stage_1_and_2.py l.2161-2176, l.2253-2274), step:k
        at_step, moved_1 = None, None
        for k in range(1, 2 * ga + 1):
            x = torch.ones(4, h, dtype=torch.bfloat16)
            W._phase(tracker, f"forward:{k}")
            loss = engine(x).float().pow(2).mean()
            W._phase(tracker, f"backward:{k}")
            engine.backward(loss)
            W._phase(tracker, f"step:{k}")
            torch.Tensor.copy_ = tcopy
            try:
                engine.step()
            finally:
                torch.Tensor.copy_ = orig_tensor_copy
            del loss, x
            W._phase(tracker, None)
            if k == ga:  # the first optimizer step (the accumulation boundary)
                at_step, moved_1 = _instant(engine, tracker, cpu_accel), dict(moved)
        after_step = at_step
        moved = moved_1
    restore()
    pid = [torch.distributed.get_rank(group=g) for g in o.real_dp_process_group]
    rec = dict(rank=torch.distributed.get_rank(), wrapper=type(o).__name__, basic=type(o.optimizer).__name__,
               init=at_init, step=after_step, backward=next(p for p in tracker.report({}) if p["phase"] == "backward:1"),
               phases={p["phase"]: p for p in tracker.report({}) if p["phase"].startswith("backward:")},
               d2h=moved["d2h"], h2d=moved["h2d"],
               groups=[dict(moe=bool(g.get("moe")), partition_count=o.partition_count[i],
                            fp32=o.single_partition_of_fp32_groups[i].numel() * 4,
                            fp32_grad=o.single_partition_of_fp32_groups[i].grad.numel() * 4,
                            bit16_buffer=o.param_buffer_of_bit16_for_cpu_offload_groups[i].numel()
                            * o.param_buffer_of_bit16_for_cpu_offload_groups[i].element_size(),
                            bit16_partition=o.parallel_partitioned_bit16_groups[i][pid[i]].numel()
                            * o.parallel_partitioned_bit16_groups[i][pid[i]].element_size())
                       for i, g in enumerate(o.optimizer.param_groups)])
    print("MOEO " + json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
