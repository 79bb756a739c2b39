"""S007 bad-suppression: the config's ``ds_advisor`` suppression section is malformed or names
no rule.

What it is: ds-advisor reads a top-level ``"ds_advisor": {"ignore": ["B001", "batch-triple"]}``
section in the DeepSpeed config and does not report the findings of the rules it names (codes
or names, as ``--ignore`` takes them). DeepSpeed 0.19.8 ignores unknown *top-level* keys
(``DeepSpeedConfig`` reads the top level with ``dict.get``), and the HF Trainer passes the dict
on unchanged, so the section is safe to keep in the file you launch with. Inside a strict
section (``zero_optimization``, ``bf16``, ...) it would be refused, so it is read only at the top
level.

This rule reports what would otherwise fail silently: a section that is not an object, a key
other than ``ignore``, or an entry naming no rule (a typo such as ``"B01"`` would suppress
nothing while looking as if it did). Such an entry suppresses nothing.

Anti-pattern::

    "ds_advisor": {"ignore": ["B01"]}

Fix::

    "ds_advisor": {"ignore": ["B001"]}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class BadSuppression(Rule):
    """Explanation and registry entry for S007; the findings come from ``advisor.config.suppress``."""

    code = "S007"
    name = "bad-suppression"
    severity = "warning"
    produced_by = "advisor.config.suppress"

    def check(self, ctx: LintContext):
        """Yield nothing: :func:`advisor.config.suppress.apply_suppressions` reports S007."""
        return iter(())
