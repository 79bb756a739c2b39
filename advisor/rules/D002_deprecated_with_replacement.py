"""D002 deprecated-with-replacement: a deprecated key given together with its replacement.

What DeepSpeed does: ``DeepSpeedConfigModel._process_deprecated_field``
(``runtime/config_utils.py``) translates a deprecated field into its replacement, and asserts
that the replacement was not also given: ``AssertionError: Cannot provide deprecated parameter
'cpu_offload' and replacing parameter 'offload_optimizer' together``. The value does not matter:
``"cpu_offload": false`` next to an ``offload_optimizer`` block fails too (verified on 0.19.8).
Pairs: ``cpu_offload`` / ``offload_optimizer``, ``cpu_offload_param`` / ``offload_param``,
``stage3_gather_fp16_weights_on_model_save`` / ``stage3_gather_16bit_weights_on_model_save``
(or its unprefixed name ``gather_16bit_weights_on_model_save``).

Anti-pattern::

    "zero_optimization": {"stage": 2, "cpu_offload": false, "offload_optimizer": {"device": "cpu"}}

Fix: delete the deprecated key::

    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}
"""

from __future__ import annotations

from advisor.config.defaults import ZERO, replacement_spellings
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import first_key, is_auto, zero_raw, zptr

#: (deprecated key, the keys of the field it is translated to): DeepSpeedZeroConfig's deprecated
#: fields with a one-field ``new_param`` (advisor.config.defaults.ZERO).
PAIRS = tuple((d.field, replacement_spellings(ZERO, d)) for d in ZERO.deprecated() if replacement_spellings(ZERO, d))


@register
class DeprecatedWithReplacement(Rule):
    code = "D002"
    name = "deprecated-with-replacement"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        zr = zero_raw(ctx.raw)
        for old, new in PAIRS:
            if old not in zr or is_auto(zr[old]):
                continue  # "auto" is dropped before the check
            nk = first_key(zr, *new)
            if nk is None or is_auto(zr[nk]):
                continue
            yield self.finding(zptr(old), f"deprecated {old} and its replacement {nk} are both given: "
                                          "deepspeed.initialize asserts 'Cannot provide deprecated parameter and "
                                          "replacing parameter together'",
                               f"remove zero_optimization.{old} (keep {nk})")
