"""X001 internal-error: ds-advisor failed while checking this file (a bug in ds-advisor, not in the config).

In a batch (``ds-advisor lint configs/``), one file that makes a rule fail must not throw away
what the other files found: the failure becomes this error finding for that file, naming the
exception, and the other files' results are reported as usual. The command exits 1 (an
error finding). Set ``DS_ADVISOR_DEBUG=1`` to get the traceback instead.

Fix: report it with the file (or a minimal copy of it) so the rule can be fixed.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class InternalError(Rule):
    """Explanation and registry entry for X001; the findings come from the batch runner."""

    code = "X001"
    name = "internal-error"
    produced_by = "lint"
    severity = "error"

    def check(self, ctx: LintContext):
        return ()
