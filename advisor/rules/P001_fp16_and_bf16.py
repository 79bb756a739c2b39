"""P001 fp16-and-bf16: fp16 and bf16 both enabled.

What DeepSpeed does: ``DeepSpeedConfig._initialize_params`` (``runtime/config.py``) asserts
``not (fp16.enabled and bf16.enabled)`` -> ``AssertionError: bfloat16 and fp16 modes cannot be
simultaneously enabled`` inside ``deepspeed.initialize``. The legacy ``bfloat16`` section counts
as bf16 when there is no ``bf16`` section.

A latent form is common in HF templates: one of the two ``true`` and the other ``"auto"``.
Under the HF Trainer (``--hf``) "auto" follows the Trainer's ``--fp16``/``--bf16`` flags, so
running with the wrong flag turns on both (reported as info).

Anti-pattern::

    "fp16": {"enabled": true}, "bf16": {"enabled": true}

Before 0.17.1 (``--deepspeed-version``) ``"enabled": "auto"`` outside the HF Trainer counts as
enabled (the plain-dict reading returns the truthy string; see A002), so ``"auto"`` in both
sections is refused there.

Fix: keep the one your hardware and model want (bf16 on Ampere or newer GPUs, no loss scaling
needed) and set the other's ``enabled`` to false or remove its section::

    "bf16": {"enabled": true}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import is_auto, section


@register
class Fp16AndBf16(Rule):
    code = "P001"
    name = "fp16-and-bf16"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        raw = ctx.raw
        ec = ctx.effective
        bkey = "bf16" if "bf16" in raw else ("bfloat16" if "bfloat16" in raw else None)
        if ec.fp16_enabled and ec.bf16_enabled:
            autos = [s for s in ("fp16", bkey) if s and is_auto(section(raw, s).get("enabled"))]
            why = (f' (DeepSpeed {ctx.release.checked} reads fp16/bf16 as plain dicts: "enabled": "auto" is the '
                   "truthy string)" if autos and ctx.release is not None else "")
            yield self.finding("/fp16/enabled", f"fp16 and bf16 are both enabled{why}: deepspeed.initialize asserts "
                                                "'bfloat16 and fp16 modes cannot be simultaneously enabled'",
                               f"set fp16.enabled to false for bf16 training (or {bkey}.enabled to false for fp16)")
            return
        if not ctx.hf or bkey is None:
            return
        fe, be = section(raw, "fp16").get("enabled"), section(raw, bkey).get("enabled")
        if ec.bf16_enabled and is_auto(fe):
            yield self.finding("/fp16/enabled", 'bf16 is enabled and fp16.enabled is "auto": if the Trainer runs with '
                                                "--fp16, both are on and DeepSpeed refuses to start",
                               "set fp16.enabled to false", severity="info")
        elif ec.fp16_enabled and is_auto(be):
            yield self.finding(f"/{bkey}/enabled", f'fp16 is enabled and {bkey}.enabled is "auto": if the Trainer runs '
                                                   "with --bf16, both are on and DeepSpeed refuses to start",
                               f"set {bkey}.enabled to false", severity="info")
