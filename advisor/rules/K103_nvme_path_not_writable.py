"""K103 nvme-path-not-writable: The ``nvme_path`` is not writable by this user (pre-launch check: a real temporary file is
created and removed).

Fix: choose a folder the job's user owns (e.g. a per-job folder on the local drive), or fix its
permissions or a read-only mount.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class NvmePathNotWritable(Rule):
    """Explanation and registry entry for K103; the findings come from check."""

    code = "K103"
    name = "nvme-path-not-writable"
    produced_by = "check"
    severity = "error"

    def check(self, ctx: LintContext):
        return ()
