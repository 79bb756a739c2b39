"""S007 bad-suppression: the config's ``ds_advisor`` suppression section is malformed or names
no rule.

What it is: ds-advisor reads a top-level ``"ds_advisor": {"ignore": ["B001", "batch-triple"]}``
section in the DeepSpeed config and does not report the findings of the rules it names (codes
or names, as ``--ignore`` takes them). DeepSpeed 0.19.8 ignores unknown *top-level* keys
(``DeepSpeedConfig`` reads the top level with ``dict.get``), and the HF Trainer passes the dict
on unchanged, so the section is safe to keep in the file you launch with. Inside a strict
section (``zero_optimization``, ``bf16``, ...) it would be refused, so it is read only at the top
level.

An entry ``"RULE:KEY"`` suppresses one rule's findings about one key only, e.g.
``"S002:cuda_visible_devices"`` or ``"ignored-key:aio.block_sizee"``: KEY is the key's dotted
path (as the messages name it) or a JSON pointer (``"S002:/a.b/c"``, for a key with a dot in its
name); a finding at that key or inside it is not reported, the rule's other findings are. The
entry is a string in the same list, so DeepSpeed tolerates it as it does the whole-rule form.

This rule reports what would otherwise fail silently: a section that is not an object, a key
other than ``ignore``, an entry naming no rule (a typo such as ``"B01"`` would suppress
nothing while looking as if it did) or, in the ``RULE:KEY`` form, no key. Such an entry
suppresses nothing.

Anti-pattern::

    "ds_advisor": {"ignore": ["B01"]}

Fix::

    "ds_advisor": {"ignore": ["B001", "S002:cuda_visible_devices"]}
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
