"""K111 odd-launch-shape: The launch shape looks inconsistent (pre-launch check): e.g. a world size that is not a
multiple of the ranks per node, or launcher variables that disagree with each other.

Fix: check the job's ``--nodes`` / ``--ntasks-per-node`` / ``--nproc-per-node`` against the
world size the config's batch sizes assume.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class OddLaunchShape(Rule):
    """Explanation and registry entry for K111; the findings come from check."""

    code = "K111"
    name = "odd-launch-shape"
    produced_by = "check"
    severity = "warning"

    def check(self, ctx: LintContext):
        return ()
