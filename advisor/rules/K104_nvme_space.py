"""K104 nvme-space: Not enough free space under ``nvme_path`` for the swap files this node's ranks will write.

The need is the ledger's NVMe bytes for the ranks on this node (optimizer master weights and
moments of every swappable sub-group, fp32 gradient pieces, parameter partitions not held by
``max_in_cpu``), summed per filesystem.

Fix: free space, use a larger drive, or spread the swap over several paths/drives.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class NvmeSpace(Rule):
    """Explanation and registry entry for K104; the findings come from check."""

    code = "K104"
    name = "nvme-space"
    produced_by = "check"
    severity = "error"

    def check(self, ctx: LintContext):
        return ()
