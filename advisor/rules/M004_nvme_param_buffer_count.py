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
unless all of a module's swappable partitions are frozen, or ``max_in_cpu`` is 0 (no host buffer
at all: every partition on NVMe; error). Fused expert weights
(``gate_up_proj`` and ``down_proj`` of one experts module), several projection weights held
directly by one attention module, or a frozen base model under LoRA with ``buffer_count`` lowered
to save pinned memory hit it. Proven on the engine (CPU, libaio): tests/engine/test_nvme_param_buffer.py.

Partitions held across modules (``stage3_max_reuse_distance``): a swapped-in partition keeps its
buffer until the parameter is released (``partition_parameters.py`` ``_partition_param`` ->
``remove_partition_and_release_buffers``). From the second step on (the first with a complete
module trace), ``release_sub_module`` keeps a parameter gathered when it is used again within
``stage3_max_reuse_distance`` elements of the trace ahead (``partitioned_param_coordinator.py``
``__params_to_release``, the scan over ``__submodule_order[step_id:]``): a module on the gradient
path is used again in backward after 2 x S elements, S = the parameters of the modules after it,
so every module with 2 x S < max_reuse_distance (default 1e9: all of a model under 5e8
parameters) keeps its NVMe partitions in swap buffers through the rest of the forward. When those
plus the next module's outnumber ``buffer_count``, its fetch asserts ``Not enough buffers 0 for
swapping 1`` in the second step. The prefetches do not: the all-gather prefetch stops at the first
partition still on NVMe (``fetch_sub_module``, "nvme prefetch is handled elsewhere"), and
``__prefetch_nvme_param_partitions`` swaps in at most ``available_swap_in_buffers()`` partitions;
``stage3_prefetch_bucket_size`` and ``stage3_max_live_parameters`` bound only the all-gathers.
The gradient path is read from parameter order (a module after the first trainable tensor, as
LoRA adapters in every layer make it). Measured on the engine (tests/engine/test_nvme_param_buffer.py):
6 modules of one frozen 1024 x 1024 weight after a trainable scale, ``buffer_count`` 2: step 2
asserts; the computed 6 trains; ``stage3_max_reuse_distance`` 0 with 2 trains too.

Anti-pattern (a module with 2 frozen 1031 x 1024 bf16 weights)::

    "offload_param": {"device": "nvme", "nvme_path": "/nvme", "buffer_count": 1}

Fix: ``buffer_count`` at least the largest number of NVMe-resident partitions one module holds
(each buffer costs buffer_size x D pinned bytes)::

    "offload_param": {"device": "nvme", "nvme_path": "/nvme", "buffer_count": 2}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.findings import literal
from advisor.rules._util import zptr


def _module(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


def held_fetches(inv, z, swapped: dict[str, list], reuse_distance: int) -> list[tuple[str, int, int]]:
    """Per module fetched in forward, in order: (module, NVMe partitions earlier modules still
    hold in swap buffers, its own NVMe partitions), when modules on the gradient path keep theirs for reuse
    (see the module docstring). ``swapped``: module -> its NVMe-resident tensors; modules in
    first-parameter order; a module is on the gradient path from the first trainable tensor on;
    it keeps its partitions when 2 x (elements of the parameters after it) < ``reuse_distance``;
    persistent parameters (``zero3_persistent``) are never released nor swapped per fetch."""
    from advisor.ledger.state import zero3_persistent

    persist = zero3_persistent(inv, z)
    order: list[str] = []
    numel: dict[str, int] = {}
    first_trainable = None
    for t, keep in zip(inv.tensors, persist):
        m = _module(t.name)
        if m not in numel:
            order.append(m)
            numel[m] = 0
        numel[m] += t.numel
        if t.trainable and first_trainable is None:
            first_trainable = order.index(m)
    if first_trainable is None:
        return []
    pers = {t.name for t, keep in zip(inv.tensors, persist) if keep}
    after = 0
    held_by: dict[str, bool] = {}
    for i in range(len(order) - 1, -1, -1):
        held_by[order[i]] = i >= first_trainable and 2 * after < reuse_distance
        after += numel[order[i]]
    out, held = [], 0
    for m in order:
        own = sum(1 for t in swapped.get(m, []) if t.name not in pers)
        if own:
            out.append((m, held, own))
        if held_by[m]:
            held += own
    return out


def held_peak(inv, z, swapped: dict[str, list], reuse_distance: int) -> int:
    """The most NVMe partitions in swap buffers at once in forward (:func:`held_fetches`)."""
    return max((h + o for _, h, o in held_fetches(inv, z, swapped, reuse_distance)), default=0)


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
        # max_in_cpu 0: stage3.py _create_param_groups_fp16_flat_cpu_memory builds no host buffer
        # (flat_buffer_size max(0, 0 - aggregate) = 0), so every trainable partition is on NVMe too
        none_in_cpu = op.max_in_cpu <= 0
        frozen = {m: sum(1 for t in ts if not t.trainable or none_in_cpu) for m, ts in mods.items()}
        worst_sure = max(mods, key=lambda m: (frozen[m], len(mods[m])))
        worst_may = max(mods, key=lambda m: len(mods[m]))
        sure, may = frozen[worst_sure], len(mods[worst_may])
        bc = op.buffer_count
        if may <= bc:
            yield from self._held_by_reuse(ctx, mods, trainable_may, d, op)
            return
        certain = sure > bc
        mod = worst_sure if certain else worst_may
        n = sure if certain else may
        ptr = zptr("offload_param", "buffer_count")
        names = ", ".join(t.name.rsplit(".", 1)[-1] for t in mods[mod][:4]) + (" ..." if len(mods[mod]) > 4 else "")
        per = align_up(op.buffer_size, io_alignment_elems(ec, d)) * d
        # the fix must also cover the partitions earlier modules hold for reuse (the check below
        # would ask for them once this one passes): every module's own, and the held peak
        need = max(may, held_peak(inv, ec.zero, mods, ec.zero.max_reuse_distance))
        why = ("max_in_cpu is 0, so none is kept in a host buffer" if certain and none_in_cpu else
               "frozen, so never in the max_in_cpu host buffer" if certain else
               f"trainable; the {trainable_total:,} trainable partition elements per rank exceed max_in_cpu "
               f"{op.max_in_cpu:,}, so some stay on NVMe")
        yield self.finding(
            ptr,
            f"module '{literal(mod or '(root)')}' holds {n} NVMe-resident parameter partitions ({literal(names)}; {why}) but "
            f"offload_param.buffer_count is {bc}: fetching the module swaps them in together and DeepSpeed "
            f"{'asserts' if certain else 'may assert'} 'Not enough buffers {bc} for swapping {n}' in the first forward",
            f"set offload_param.buffer_count to {need} (pinned swap buffers: {need} x {per:,} B = {{pinned_bytes:bytes}})"
            + (f"; {need} rather than {n}: earlier modules' NVMe partitions stay in swap buffers for their reuse in "
               f"backward (stage3_max_reuse_distance {ec.zero.max_reuse_distance:,})" if need > n else ""),
            sizes=dict(pinned_bytes=need * per), severity="error" if certain else "warning", module=mod, partitions=n,
            buffer_count=bc, pinned_bytes=need * per, set=[f"zero_optimization.offload_param.buffer_count={need}"])

    def _held_by_reuse(self, ctx: LintContext, mods: dict[str, list], trainable_may: bool, d: int, op):
        """The finding for partitions held across modules by stage3_max_reuse_distance."""
        from advisor.rules._bytes import align_up, io_alignment_elems

        z = ctx.effective.zero
        fetches = held_fetches(ctx.inventory, z, mods, z.max_reuse_distance)
        bc = op.buffer_count
        over = [(m, h, o) for m, h, o in fetches if h + o > bc and h]
        if not over:
            return
        at, earlier, own = over[0]  # the first fetch that finds too few buffers
        peak = max(h + o for _, h, o in fetches)
        frozen_only = all(not t.trainable for ts in mods.values() for t in ts)
        per = align_up(op.buffer_size, io_alignment_elems(ctx.effective, d)) * d
        lo = 0  # the largest reuse distance at which the peak fits the buffers
        hi = z.max_reuse_distance
        zero_fits = held_peak(ctx.inventory, z, mods, 0) <= bc
        if zero_fits:
            while lo < hi - 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if held_peak(ctx.inventory, z, mods, mid) <= bc else (lo, mid)
        alt = (f", or stage3_max_reuse_distance {lo:,} (modules then release their partitions after forward and "
               "fetch them again in backward: more NVMe reads)" if zero_fits else "")
        yield self.finding(
            zptr("offload_param", "buffer_count"),
            f"{earlier} NVMe-resident parameter partitions of earlier modules stay in swap buffers for their reuse "
            f"in backward (stage3_max_reuse_distance {z.max_reuse_distance:,}) when module '{literal(at or '(root)')}' is "
            f"fetched, {earlier + own} of them with its own, up to {peak} later, but offload_param.buffer_count is {bc}: "
            f"from the second step (the first with a complete trace) DeepSpeed "
            f"{'asserts' if frozen_only else 'may assert'} 'Not enough buffers {max(0, bc - earlier)} for swapping "
            f"{own}' in forward",
            f"set offload_param.buffer_count to {peak} (pinned swap buffers: {peak} x {per:,} B = "
            "{pinned_bytes:bytes})" + alt,
            sizes=dict(pinned_bytes=peak * per), severity="error" if frozen_only else "warning", module=at, partitions=peak, held=earlier,
            buffer_count=bc, pinned_bytes=peak * per, reuse_distance_fit=lo,
            set=[f"zero_optimization.offload_param.buffer_count={peak}"])
