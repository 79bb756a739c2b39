"""M100 tier-does-not-fit: A memory tier does not fit: the step's peak is larger than the capacity given.

The accelerator need is the worst rank's peak over the phases of a step (forward, backward,
optimizer step: what is live at once, not the sum of each class's maximum) plus the per-rank
runtime overhead rows (CUDA context, NCCL buffers, the caching allocator's reserve, DeepSpeed
extras: advisor/cluster/overhead.py, each with its source; ``--runtime-overhead`` overrides
them), against ``--gpu-memory`` or the ``--hardware`` spec. Host memory and NVMe are summed over one node's ranks against the per-node
capacity (pinned buffers count: DeepSpeed page-locks offload and swap buffers).

Anti-pattern: ZeRO-2 for a 32B model on 8 x 141 GB GPUs: every rank keeps a full bf16 copy of
the parameters (65.5 GB) plus its share of master weights, moments and gradients (~74 GB).

Fix: computed, not generic (``advisor/views/fixes.py``). Each single change that could help the
short tier is re-estimated with the same fit (ledger, activations, timeline, runtime overhead):
for the accelerator, offloading only the optimizer, the optimizer to NVMe (ZeRO-3 with an
``nvme_path``), each higher stage (never from stage 3), the parameters to host, half the
micro-batch with the accumulation that keeps the global batch, activation checkpointing, another
node's ranks (under the HF Trainer or an accelerate file, batch changes are the Trainer's
``--per-device-train-batch-size`` / ``--gradient-accumulation-steps``, so the Trainer accepts them); for
host memory, the optimizer to NVMe, the parameters back on the accelerator or to NVMe, fewer ranks
per node (never ``pin_memory``: pinned or not, it is host memory). The fix lists the changes that
then fit, with their need, bytes moved per step and (with ``--hardware``) step time, says when
activations are most of the peak, and ``data.set`` holds the first fitting config change as
``--set`` strings; ``data.candidates`` has every one tried. ``ds-advisor generate`` searches
combinations when no single change fits.
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
