"""P002 loss-scale-unused: fp16 loss-scaling settings that have no effect.

What DeepSpeed does: loss scaling (``loss_scale``, ``initial_scale_power``, ``loss_scale_window``,
``hysteresis``, ``consecutive_hysteresis``, ``min_loss_scale`` in the ``fp16`` section) is used
only by the fp16 optimizer wrappers. With bf16 training (or fp32) the ``fp16`` section is parsed
and validated, then ignored: bf16 has the range of fp32 and needs no loss scaling.
(The same keys written *inside* the ``bf16`` section are rejected outright; that is S006.)

Why it matters: the settings suggest a tuned fp16 setup that is not running. A user switching
from fp16 to bf16 often keeps them and believes a static ``loss_scale`` or a raised
``initial_scale_power`` still applies.

Anti-pattern::

    "fp16": {"enabled": false, "loss_scale": 0, "initial_scale_power": 32},
    "bf16": {"enabled": true}

Fix: delete the loss-scaling keys (or the whole ``fp16`` section)::

    "bf16": {"enabled": true}

Not reported when ``fp16.enabled`` is "auto" (HF templates carry both sections and the Trainer
picks one; outside the HF Trainer A002 reports the "auto" itself).
"""

from __future__ import annotations

from advisor.config.effective import _as_bool
from advisor.findings import pointer
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import is_auto, section

LOSS_SCALE_KEYS = ("loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "consecutive_hysteresis",
                   "min_loss_scale")


@register
class LossScaleUnused(Rule):
    code = "P002"
    name = "loss-scale-unused"
    severity = "warning"

    def check(self, ctx: LintContext):
        fp16 = section(ctx.raw, "fp16")
        ec = ctx.effective
        if ec.fp16_enabled or not fp16 or is_auto(fp16.get("enabled")):
            return
        keys = [k for k in LOSS_SCALE_KEYS if k in fp16]
        if not keys:
            return
        explicitly_off = "enabled" in fp16 and _as_bool(fp16.get("enabled")) is False
        if ec.bf16_enabled:
            why = "bf16 is enabled and needs no loss scaling"
            sev = "warning"
        elif explicitly_off:
            why = "fp16 is disabled (fp32 training)"
            sev = "info"
        else:
            why = "fp16.enabled is not set, so fp16 is off (fp32 training)"
            sev = "warning"
        for k in keys:
            yield self.finding(pointer("fp16", k), f"fp16.{k} has no effect: {why}",
                               f"remove fp16.{k}" + (" (or enable fp16 if you meant fp16 training)" if not ec.bf16_enabled else ""),
                               severity=sev)
