"""S003 wrong-type: a value of the wrong type.

What DeepSpeed does: in the pydantic sections (zero_optimization, fp16, bf16, ...) a value
that cannot be converted raises a ValidationError at ``deepspeed.initialize``. Values pydantic
does convert in its lax mode -- the strings "true"/"True"/"yes", 0 and 1 for booleans, "8" for
an integer -- are accepted; that is reported as a warning, because the file then means
something only through DeepSpeed's coercion. Fractional numbers where an integer is required
(``"min_loss_scale": 1e-10``) are rejected.

In the plain-dict sections and at the top level DeepSpeed uses the value as is and fails later
(``"train_batch_size": "32"`` breaks the batch arithmetic) or misbehaves silently: the string
"False" is a non-empty string, so wherever DeepSpeed tests such a flag with ``if`` it counts as
*true*.

HJSON trap: DeepSpeed reads configs with hjson, where an unquoted value is a string that runs to
the end of the line. ``"enabled": True,`` (Python spelling) is the string ``"True,"`` --
trailing comma included -- which nothing accepts as a boolean.

"auto" outside the places the HF Trainer / accelerate fill it is reported here only in the
plain-dict sections; inside pydantic sections DeepSpeed drops "auto" and uses its default
(that is the "auto" rule's finding).

Anti-pattern::

    "fp16": {"enabled": True, "min_loss_scale": 1e-10}

Fix::

    "fp16": {"enabled": true, "min_loss_scale": 1}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class WrongType(Rule):
    """Explanation and registry entry for S003; the findings come from ``advisor.config.schema``."""

    code = "S003"
    name = "wrong-type"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        """Yield nothing: schema validation (``advisor.config.schema.validate_config``) reports S003."""
        return iter(())
