"""K102 nvme-path-missing: The ``nvme_path`` does not exist on this node, or is not a directory (pre-launch check).

DeepSpeed creates its swap folders under ``nvme_path`` at initialize; a missing mount (the
job landed on a node without the drive, or the path is mistyped) fails the job after it waited
in the queue.

Fix: point ``nvme_path`` at a mounted local drive present on every node, or create it in the
job script before launch.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class NvmePathMissing(Rule):
    """Explanation and registry entry for K102; the findings come from check."""

    code = "K102"
    name = "nvme-path-missing"
    produced_by = "check"
    severity = "error"

    def check(self, ctx: LintContext):
        return ()
