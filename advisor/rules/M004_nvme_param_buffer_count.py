"""M004 nvme-param-buffer-count: a module's NVMe-resident parameters outnumber offload_param.buffer_count.

What DeepSpeed does: with ZeRO-3 and ``offload_param.device: "nvme"``, a parameter partition that
is large enough to swap (p_i x D >= max(1 MiB, aio.block_size)) and is not held in host memory
lives in a file under ``nvme_path``. Before a module runs, the parameter coordinator gathers all
of the module's own parameters at once (``partitioned_param_coordinator.py`` ``fetch_sub_module``
-> ``partition_parameters.py`` ``_ensure_availability_of_partitioned_params``), which swaps every
NVMe-resident one of them in together: ``AsyncPartitionedParameterSwapper.swap_in``
(``swap_tensor/partitioned_param_swapper.py:311``) asserts ``Not enough buffers {available} for
swapping {n}`` when the module has more such partitions than the ``buffer_count`` pinned swap
buffers. It fails in the first forward, after the model is loaded and initialised.

Which partitions stay on NVMe: frozen ones always (the ``max_in_cpu`` host buffer is built from
the trainable groups only, ``stage3.py`` ``_create_param_groups_fp16_flat_cpu_memory``); trainable
ones only beyond ``max_in_cpu`` elements (default 1e9), so for them the rule says "may" (warning)
unless all of a module's swappable partitions are frozen (error). Fused expert weights
(``gate_up_proj`` and ``down_proj`` of one experts module), several projection weights held
directly by one attention module, or a frozen base model under LoRA with ``buffer_count`` lowered
to save pinned memory hit it. Proven on the engine (CPU, libaio): tests/engine/test_nvme_param_buffer.py.

Anti-pattern (a module with 2 frozen 1031 x 1024 bf16 weights)::

    "offload_param": {"device": "nvme", "nvme_path": "/nvme", "buffer_count": 1}

Fix: ``buffer_count`` at least the largest number of NVMe-resident partitions one module holds
(each buffer costs buffer_size x D pinned bytes)::

    "offload_param": {"device": "nvme", "nvme_path": "/nvme", "buffer_count": 2}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import fmt_bytes, zptr


def _module(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


@register
class NvmeParamBufferCount(Rule):
    code = "M004"
    reads_stage = True
    name = "nvme-param-buffer-count"
    severity = "error"
    refuses = True
    needs_model = True

    def check(self, ctx: LintContext):
        from advisor.config.effective import DTYPE_BYTES
        from advisor.rules._bytes import align_up, io_alignment_elems, swap_threshold_bytes, zero3_partition_numel

        ec = ctx.effective
        if ec.offload_param_effective != "nvme" or ctx.inventory is None:
            return
        op = ec.zero.offload_param
        w = ctx.dp_world_size or 1
        d = DTYPE_BYTES[ec.model_dtype]
        thr = swap_threshold_bytes(ec)
        inv = ctx.inventory
        trainable_total = sum(zero3_partition_numel(t.numel, w) for t in inv.tensors if t.trainable)
        trainable_may = trainable_total > op.max_in_cpu  # some trainable partitions stay on NVMe
        mods: dict[str, list] = {}
        for t in inv.tensors:
            if zero3_partition_numel(t.numel, w) * d >= thr and (not t.trainable or trainable_may):
                mods.setdefault(_module(t.name), []).append(t)
        if not mods:
            return
        frozen = {m: sum(1 for t in ts if not t.trainable) for m, ts in mods.items()}
        worst_sure = max(mods, key=lambda m: (frozen[m], len(mods[m])))
        worst_may = max(mods, key=lambda m: len(mods[m]))
        sure, may = frozen[worst_sure], len(mods[worst_may])
        bc = op.buffer_count
        if may <= bc:
            return
        certain = sure > bc
        mod = worst_sure if certain else worst_may
        n = sure if certain else may
        ptr = zptr("offload_param", "buffer_count")
        names = ", ".join(t.name.rsplit(".", 1)[-1] for t in mods[mod][:4]) + (" ..." if len(mods[mod]) > 4 else "")
        per = align_up(op.buffer_size, io_alignment_elems(ec, d)) * d
        why = ("frozen, so never in the max_in_cpu host buffer" if certain else
               f"trainable; the {trainable_total:,} trainable partition elements per rank exceed max_in_cpu "
               f"{op.max_in_cpu:,}, so some stay on NVMe")
        yield self.finding(
            ptr,
            f"module '{mod or '(root)'}' holds {n} NVMe-resident parameter partitions ({names}; {why}) but "
            f"offload_param.buffer_count is {bc}: fetching the module swaps them in together and DeepSpeed "
            f"{'asserts' if certain else 'may assert'} 'Not enough buffers {bc} for swapping {n}' in the first forward",
            f"set offload_param.buffer_count to {n} (pinned swap buffers: {n} x {per:,} B = {fmt_bytes(n * per)})",
            severity="error" if certain else "warning", module=mod, partitions=n, buffer_count=bc,
            pinned_bytes=n * per, set=[f"zero_optimization.offload_param.buffer_count={n}"])
