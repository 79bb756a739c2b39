"""K110 more-ranks-than-gpus: More ranks per node than visible accelerators (pre-launch check).

The launch shape (``LOCAL_WORLD_SIZE``, ``SLURM_GPUS_ON_NODE``, ``--gpus-per-node``) asks for
more ranks on this node than ``nvidia-smi``/``rocm-smi`` show under ``CUDA_VISIBLE_DEVICES`` /
``ROCR_VISIBLE_DEVICES``: ranks would share a GPU or fail to find one.

Fix: match ``--nproc-per-node`` / ``--ntasks-per-node`` to the GPUs of the node.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class MoreRanksThanGpus(Rule):
    """Explanation and registry entry for K110; the findings come from check."""

    code = "K110"
    name = "more-ranks-than-gpus"
    produced_by = "check"
    severity = "error"

    def check(self, ctx: LintContext):
        return ()
