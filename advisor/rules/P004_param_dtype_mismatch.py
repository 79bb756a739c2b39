"""P004 param-dtype-mismatch: data_types.param_dtype disagrees with fp16/bf16.enabled.

What DeepSpeed does: the engine derives the model dtype from the ``fp16``/``bf16`` flags (fp16,
else bf16, else fp32). ``engine._assert_valid_mixed_precision_config`` asserts that
``data_types.param_dtype``, when given, is that same dtype: ``AssertionError:
data_types.param_dtype='bf16' conflicts with the enabled precision mode`` at initialize.

Anti-pattern::

    "data_types": {"param_dtype": "bf16"}        # no bf16 section: the model dtype is fp32

Fix: enable the matching precision section, or drop ``param_dtype``::

    "bf16": {"enabled": true}, "data_types": {"param_dtype": "bf16"}
"""

from __future__ import annotations

from advisor.config.effective import _dtype
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import section


@register
class ParamDtypeMismatch(Rule):
    code = "P004"
    name = "param-dtype-mismatch"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        v = section(ctx.raw, "data_types").get("param_dtype")
        want = _dtype(v)
        have = ctx.effective.model_dtype
        if want is None or want == have:
            return
        fix = {"fp16": "set fp16.enabled to true", "bf16": "set bf16.enabled to true",
               "fp32": "disable fp16 and bf16"}[want]
        yield self.finding("/data_types/param_dtype",
                           f"data_types.param_dtype {v!r} conflicts with the enabled precision ({have}): "
                           "deepspeed.initialize asserts they match",
                           f"{fix}, or remove data_types.param_dtype")
