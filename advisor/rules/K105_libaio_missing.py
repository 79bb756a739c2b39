"""K105 libaio-missing: NVMe offload needs libaio, and it cannot be loaded on this node.

DeepSpeed's async I/O op (``async_io``) is built against libaio; without it the swapper
cannot be created.

Fix: install the distribution's package (Debian/Ubuntu: ``libaio-dev``; RHEL:
``libaio-devel``) on every node, or use CPU offload instead.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class LibaioMissing(Rule):
    """Explanation and registry entry for K105; the findings come from check."""

    code = "K105"
    name = "libaio-missing"
    produced_by = "check"
    severity = "error"

    def check(self, ctx: LintContext):
        return ()
