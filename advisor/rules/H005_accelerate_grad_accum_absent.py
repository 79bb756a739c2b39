"""H005 accelerate-grad-accum-absent: no gradient_accumulation_steps, so accelerate sets 1.

``DeepSpeedPlugin.__post_init__`` (accelerate 1.15.0) adds ``gradient_accumulation_steps: 1`` when
the key is absent, *after* the Trainer has filled the config. With a Trainer
``gradient_accumulation_steps`` above 1, a ``train_batch_size: "auto"`` was computed with the
Trainer's value and DeepSpeed's batch assertion fails (B001 on the resolved config); without
``train_batch_size`` DeepSpeed quietly accumulates over 1 step. Anti-pattern (Trainer ``--gradient_accumulation_steps 4``)::

    {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"}

Fix: ``"gradient_accumulation_steps": "auto"``.
"""

from __future__ import annotations

from advisor.rules._util import hf_findings
from advisor.rules import LintContext, Rule, register


@register
class AccelerateGradAccumAbsent(Rule):
    code = "H005"
    name = "accelerate-grad-accum-absent"
    severity = "warning"

    def check(self, ctx: LintContext):
        return [f for f in hf_findings(ctx) if f.code == self.code]
