"""Byte and partition figures the model-dependent M rules need (no rule here).

The formulas themselves live once, in :mod:`advisor.ledger.state` (each with its DeepSpeed 0.19.8
source and its section of ../shared/reference/deepspeed-0.19.8-state-accounting.md); this module
re-exports the ones the rules use and adds two rule-side helpers: which partition is the largest
one swapped to NVMe, and a readable rounding for suggestions.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from advisor.config.effective import DTYPE_BYTES
from advisor.ledger.state import (AIO_ALIGNED_BYTES, MIN_AIO_BYTES, aio_alignment_elems, align_up,  # noqa: F401
                            ipg_bucket_bytes, swap_threshold_bytes, zero3_partition_numel, zero3_sub_groups)

if TYPE_CHECKING:
    from advisor.config.effective import EffectiveConfig
    from advisor.model.inventory import Inventory

#: The rules' historical name for :func:`advisor.ledger.state.aio_alignment_elems`.
io_alignment_elems = aio_alignment_elems


def largest_nvme_param_partition(ec: "EffectiveConfig", inv: "Inventory", w: int) -> tuple[int, str] | None:
    """(p_i, tensor name) of the largest ZeRO-3 partition that goes to NVMe (p_i x D >=
    :func:`advisor.ledger.state.swap_threshold_bytes`), or None; p_i = :func:`advisor.ledger.state.zero3_partition_numel`.

    Every parameter, trainable or frozen, is partitioned (``partition_parameters.py:1816-1858``)."""
    d = DTYPE_BYTES[ec.model_dtype]
    thr = swap_threshold_bytes(ec)
    best: tuple[int, str] | None = None
    for t in inv.tensors:
        p = zero3_partition_numel(t.numel, w)
        if p * d >= thr and (best is None or p > best[0]):
            best = (p, t.name)
    return best


def first_nvme_param_partition_over(ec: "EffectiveConfig", inv: "Inventory", w: int,
                                    limit: int) -> tuple[int, str] | None:
    """(p_i, tensor name) of the first NVMe-swapped ZeRO-3 partition (in parameter order, the order
    ``_partition_param`` takes them) with more than ``limit`` elements, or None: the one
    ``AsyncPartitionedParameterSwapper.get_buffer``'s assertion names."""
    d = DTYPE_BYTES[ec.model_dtype]
    thr = swap_threshold_bytes(ec)
    for t in inv.tensors:
        p = zero3_partition_numel(t.numel, w)
        if p * d >= thr and p > limit:
            return p, t.name
    return None


def two_sig_floor(v: int) -> int:
    """Round down to two significant digits (a readable suggestion that does not exceed v)."""
    if v < 100:
        return max(1, v)
    e = 10 ** (int(math.log10(v)) - 1)
    return v // e * e
