"""V004 optimizer-refuses-zero-in-release: a 1-bit optimizer with ZeRO, in a release that has it.

What DeepSpeed does: up to 0.19.6 (the last release with the 1-bit family),
``DeepSpeedEngine._configure_basic_optimizer`` (deepspeed/runtime/engine.py) asserts
``not self.zero_optimization()`` before building ``OneBitAdam`` ("1bit-Adam is not compatible
with ZeRO"), ``ZeroOneAdam`` ("0/1 Adam is not compatible with ZeRO") and ``OneBitLamb``
("1bit-Lamb is not compatible with ZeRO"). ``zero_optimization()`` is ``zero_enabled``, which is
``zero_optimization_stage > 0`` (deepspeed/runtime/config.py), so every ZeRO stage from 1 up
fails ``deepspeed.initialize`` with an AssertionError; only stage 0 works. Which release refuses
which optimizer is in ``advisor/data/deepspeed_versions.json`` (``zero_refused_optimizers``, read
from each release's engine.py). The rule runs when the target release is not 0.19.8 (0.19.8 has
no 1-bit optimizers at all: D003).

Anti-pattern (with ``--deepspeed-version 0.14.5``)::

    "optimizer": {"type": "OneBitAdam", "params": {"lr": 1e-4}},
    "zero_optimization": {"stage": 3}

Fix: ZeRO stage 0 with the 1-bit optimizer, or keep ZeRO and use Adam/AdamW.
"""

from __future__ import annotations

from advisor.config.versions import DEFAULT_RELEASE, name_in
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import is_auto, section


@register
class OptimizerRefusesZeroInRelease(Rule):
    code = "V004"
    reads_stage = True
    name = "optimizer-refuses-zero-in-release"
    severity = "error"

    def check(self, ctx: LintContext):
        rel = ctx.release
        if rel is None or rel.checked == DEFAULT_RELEASE:
            return
        t = section(ctx.raw, "optimizer").get("type")
        if not isinstance(t, str) or is_auto(t) or not name_in("zero_refused_optimizers", t, rel.checked):
            return
        stage = ctx.effective.zero.stage
        if not isinstance(stage, int) or stage < 1:
            return
        yield self.finding("/optimizer/type",
                           f"optimizer {t!r} with ZeRO stage {stage}: DeepSpeed {rel.checked}'s engine asserts "
                           "'not self.zero_optimization()' before building it (true for every stage >= 1), so "
                           "deepspeed.initialize raises AssertionError '... is not compatible with ZeRO'",
                           fix="set zero_optimization.stage to 0 for the 1-bit optimizer, or use Adam/AdamW with ZeRO",
                           release=rel.checked, type=t, stage=stage)
