"""Byte and partition formulas the model-dependent rules need (no rule here).

Interim home: ``advisor.ledger.compute_ledger`` (being written) will own these allocations; the
rules should switch to it once it lands. Each formula cites
../shared/reference/deepspeed-0.19.8-state-accounting.md and the DeepSpeed 0.19.8 source.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from advisor.effective import DTYPE_BYTES

if TYPE_CHECKING:
    from advisor.effective import EffectiveConfig
    from advisor.inventory import Inventory

#: ``swap_tensor/utils.py``: MIN_AIO_BYTES (1 MiB) and AIO_ALIGNED_BYTES (1024).
MIN_AIO_BYTES = 1024 ** 2
AIO_ALIGNED_BYTES = 1024


def align_up(v: int, k: int) -> int:
    return -(-v // k) * k


def zero3_partition(numel: int, w: int) -> int:
    """ZeRO-3 per-parameter partition p_i = ceil(n_i / W) (reference 3.2;
    ``partition_parameters.py`` ``_aligned_size`` // world)."""
    return -(-numel // w)


def swap_threshold_bytes(ec: "EffectiveConfig") -> int:
    """A tensor is swapped to NVMe iff its bytes >= max(1 MiB, aio.block_size) (reference 5.1)."""
    return max(MIN_AIO_BYTES, ec.aio.block_size)


def io_alignment_elems(ec: "EffectiveConfig", elem_bytes: int) -> int:
    """Swap buffers are padded to (1024 B x aio.intra_op_parallelism) / element size elements."""
    return AIO_ALIGNED_BYTES * max(1, ec.aio.intra_op_parallelism) // elem_bytes


def largest_nvme_param_partition(ec: "EffectiveConfig", inv: "Inventory", w: int) -> tuple[int, str] | None:
    """(p, tensor name) of the largest ZeRO-3 partition that goes to NVMe (p * D >= threshold), or None.

    Every parameter, trainable or frozen, is partitioned (``partition_parameters.py:1816-1858``)."""
    d = DTYPE_BYTES[ec.model_dtype]
    thr = swap_threshold_bytes(ec)
    best: tuple[int, str] | None = None
    for t in inv.tensors:
        p = zero3_partition(t.numel, w)
        if p * d >= thr and (best is None or p > best[0]):
            best = (p, t.name)
    return best


def zero3_sub_groups(inv: "Inventory", w: int, sub_group_size: int) -> list[int]:
    """Sub-group sizes S_k (elements) per rank: per optimizer param group (trainable tensors), partitions are
    appended in order until the running sum reaches sub_group_size (reference 3.2, ``stage3.py:1210-1233``)."""
    out: list[int] = []
    for group in inv.groups(trainable_only=True):
        cur = 0
        for t in group:
            cur += zero3_partition(t.numel, w)
            if cur >= sub_group_size:
                out.append(cur)
                cur = 0
        if cur:
            out.append(cur)
    return out


def ipg_bucket_bytes(ec: "EffectiveConfig") -> tuple[int, str] | None:
    """Bytes of the gradient (ipg) reduce bucket(s) and the formula in words, or None when there is none.

    ZeRO-1/2 (reference 4.2, ``stage_1_and_2.py`` ``setup_buckets``): RBS x B x (1 + overlap_comm), allocated
    on every backward when contiguous_gradients (forced on with offload); B = model dtype bytes, 4 at stage 1
    with grad_accum_dtype fp32; none under BF16_Optimizer (stage 1 + bf16 + fp32 accumulation, no cpu offload).
    ZeRO-3 (reference 4.4, ``stage3.py:779-784``): RBS x C (comm dtype), allocated at initialize, kept.
    """
    z = ec.zero
    rbs = z.reduce_bucket_size
    if z.stage in (1, 2):
        if z.stage == 1 and ec.model_dtype == "bf16" and ec.grad_dtype == "fp32" and ec.offload_optimizer_effective != "cpu":
            return None
        contiguous = z.contiguous_gradients or ec.offload_optimizer_effective != "none"
        if not contiguous:
            return None
        b = 4 if (z.stage == 1 and ec.grad_dtype == "fp32") else DTYPE_BYTES[ec.model_dtype]
        n = 2 if z.overlap_comm else 1
        words = f"{rbs} x {b} B" + (" x 2 buffers (overlap_comm)" if n == 2 else " x 1 buffer")
        return rbs * b * n, words
    if z.stage == 3:
        c = DTYPE_BYTES[ec.comm_dtype]
        return rbs * c, f"{rbs} x {c} B (comm dtype), allocated at initialize and kept"
    return None


def two_sig_floor(v: int) -> int:
    """Round down to two significant digits (a readable suggestion that does not exceed v)."""
    if v < 100:
        return max(1, v)
    e = 10 ** (int(math.log10(v)) - 1)
    return v // e * e
