"""K102 nvme-path-missing: The ``nvme_path`` does not exist on this node, or is not a directory (pre-launch check).

DeepSpeed creates its swap folders under ``nvme_path`` at initialize, the missing folders above
them included (``os.makedirs(self.swap_folder, exist_ok=True)``: DeepSpeed 0.19.8
runtime/swap_tensor/partitioned_param_swapper.py l.89, optimizer_utils.py l.175). A missing mount
(the job landed on a node without the drive, or the path is mistyped) then puts the swap files on
whatever filesystem holds the nearest existing folder above it -- the root filesystem, usually --
or fails the job after it waited in the queue.

A missing folder whose nearest existing ancestor is on the filesystem of a drive the ``--hardware``
spec names (what ``generate`` writes: a folder under the drive's mount) is an info: DeepSpeed creates
it there. It is an error where that ancestor is on another filesystem than the spec's drives, or
where no drive is named (no ``--hardware`` storage tier whose mount exists on the node).

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
    severity_also = "info where the missing folder's nearest existing ancestor is on a --hardware drive's filesystem"

    def check(self, ctx: LintContext):
        return ()
