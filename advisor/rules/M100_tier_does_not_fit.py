"""M100 tier-does-not-fit: A memory tier does not fit: the step's peak is larger than the capacity given.

The accelerator need is the worst rank's peak over the phases of a step (forward, backward,
optimizer step: what is live at once, not the sum of each class's maximum) plus the per-rank
runtime overhead rows (CUDA context, NCCL buffers, the caching allocator's reserve, DeepSpeed
extras: advisor/cluster/overhead.py, each with its source; ``--runtime-overhead`` overrides
them), against ``--gpu-memory`` or the ``--hardware`` spec. Host memory and NVMe are summed over one node's ranks against the per-node
capacity (pinned buffers count: DeepSpeed page-locks offload and swap buffers).

Anti-pattern: ZeRO-2 for a 32B model on 8 x 141 GB GPUs: every rank keeps a full bf16 copy of
the parameters (65.5 GB) plus its share of master weights, moments and gradients (~74 GB).

Fix: shard more (ZeRO-3, or more ranks), offload optimizer state or parameters to host or NVMe,
use activation checkpointing or a smaller micro-batch, or shrink buffers (reduce_bucket_size,
offload buffer_size/buffer_count, sub_group_size). ``ds-advisor generate`` searches these.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class TierDoesNotFit(Rule):
    """Explanation and registry entry for M100; the findings come from estimate / check."""

    code = "M100"
    name = "tier-does-not-fit"
    produced_by = "estimate"
    severity = "error"

    def check(self, ctx: LintContext):
        return ()
