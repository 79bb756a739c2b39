"""M102 fit-is-tight: The accelerator fits only inside the uncertainty of the runtime overhead.

The accelerator need is the tracked peak plus the runtime overhead rows (CUDA context, NCCL
buffers, the caching allocator's reserve, DeepSpeed extras; advisor/cluster/overhead.py). Each
row has a default from a cited source and a band (how far real runs are reported to stray).
When the headroom left after the defaults is smaller than the band's upper excess, the verdict
is "tight": the job may fit, or may run out of memory, depending on the terms named in the
message. ``check`` exits 4 on a tight verdict (``--allow-tight`` makes it a warning, exit 0).

Anti-pattern: a 7B model with ZeRO-3 on 8 x 24 GB cards, sequence 2048, checkpointing on: the
tracked state leaves a few GB, which the CUDA context, NCCL buffers and the allocator's reserve
can take.

Fix: measure the overhead on the node (torch.cuda.memory_reserved vs max_memory_allocated, the
driver's used memory after init) and give it with ``--runtime-overhead TERM=SIZE``, which
collapses that term's band; or make room: a smaller micro-batch, activation checkpointing,
offload, more ranks, ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (a smaller allocator
reserve).
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class FitIsTight(Rule):
    """Explanation and registry entry for M102; the findings come from estimate / check."""

    code = "M102"
    name = "fit-is-tight"
    produced_by = "estimate"
    severity = "warning"

    def check(self, ctx: LintContext):
        return ()
