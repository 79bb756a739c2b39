"""M001 nvme-param-buffer-too-small: offload_param.buffer_size smaller than a parameter partition.

What DeepSpeed does: with ZeRO-3 and ``offload_param.device: "nvme"`` every parameter partition
large enough to be swapped (p_i x D >= max(1 MiB, aio.block_size)) is staged through one of
``buffer_count`` pinned buffers of ``buffer_size`` *elements* when it is first partitioned and on
every swap. ``AsyncPartitionedParameterSwapper.get_buffer``
(``swap_tensor/partitioned_param_swapper.py:357``) asserts ``More elements {numel} than buffer
size {buffer_size}`` on the first partition that does not fit, in parameter order (called from
``partition_parameters.py`` ``_partition_param``), during ``deepspeed.initialize`` (or
``zero.Init``), whatever ``max_in_cpu`` says; the fix must cover the largest one. Proven on the
real engine (CPU, libaio): tests/engine/test_nvme_param_buffer.py. At ZeRO-3 a parameter's partition is
p_i = ceil(n_i / W) elements (W = data-parallel world size), so at W = 1 it is the whole tensor:
a Llama-3-8B embedding is 128,256 x 4,096 = 525,336,576 elements against the default 1e8.

The buffers are pinned host memory: buffer_count x A(buffer_size) x D bytes, A = rounded up to
1024 B x aio.intra_op_parallelism.

Anti-pattern (Llama-3-8B, one GPU)::

    "offload_param": {"device": "nvme", "nvme_path": "/nvme",
                      "buffer_count": 5, "buffer_size": 1e8}

Fix: raise buffer_size to the largest partition (and lower buffer_count if the pinned memory is
too much)::

    "offload_param": {"device": "nvme", "nvme_path": "/nvme",
                      "buffer_count": 5, "buffer_size": 525336576}
"""

from __future__ import annotations

from advisor.config.effective import DTYPE_BYTES
from advisor.rules import LintContext, Rule, register
from advisor.findings import literal
from advisor.rules._util import zptr


@register
class NvmeParamBufferTooSmall(Rule):
    code = "M001"
    reads_stage = True
    name = "nvme-param-buffer-too-small"
    severity = "error"
    refuses = True
    needs_model = True

    def check(self, ctx: LintContext):
        # imported here, not at module import: lint without a model never loads the ledger
        from advisor.rules._bytes import (align_up, first_nvme_param_partition_over, io_alignment_elems,
                                          largest_nvme_param_partition)
        ec = ctx.effective
        if ec.offload_param_effective != "nvme" or ctx.inventory is None:
            return
        op = ec.zero.offload_param
        ptr = zptr("offload_param", "buffer_size")
        w = ctx.dp_world_size
        if w is None:
            big = largest_nvme_param_partition(ec, ctx.inventory, 1)
            if big and big[0] > op.buffer_size:
                yield self.finding(ptr, f"offload_param.buffer_size {op.buffer_size} not checked: world size unknown; "
                                        f"at world size 1 the largest partition ({big[1]}) is {big[0]} elements",
                                   "pass --world-size N (ZeRO-3 partitions are ceil(numel / N) elements)",
                                   severity="info")
            return
        big = largest_nvme_param_partition(ec, ctx.inventory, w)
        if big is None or big[0] <= op.buffer_size:
            return
        p, name = big
        first, first_name = first_nvme_param_partition_over(ec, ctx.inventory, w, op.buffer_size)
        d = DTYPE_BYTES[ec.model_dtype]
        a = align_up(p, io_alignment_elems(ec, d))
        cost = op.buffer_count * a * d
        exact = op.buffer_count * p * d
        yield self.finding(
            ptr,
            f"offload_param.buffer_size {op.buffer_size} elements is smaller than the largest NVMe-resident parameter "
            f"partition, {p} elements ({literal(name)} at data-parallel world size {w}): deepspeed.initialize asserts "
            f"'More elements {first} than buffer size {op.buffer_size}'"
            + (f" on the first one that does not fit ({literal(first_name)})" if first_name != name else ""),
            f"set offload_param.buffer_size to {a}; pinned host memory for the buffers: {op.buffer_count} x {p} x {d} B "
            "= {exact_bytes:bytes}" + (", {pinned_bytes:bytes} with aio alignment" if a != p else ""),
            sizes=dict(exact_bytes=exact, pinned_bytes=cost), largest_partition=p, tensor=name, first_refused=first, suggested_buffer_size=a, pinned_bytes=cost,
            set=[f"zero_optimization.offload_param.buffer_size={a}"])
