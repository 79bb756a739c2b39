"""H002 hf-auto-unfillable: an "auto" value that neither the Trainer nor accelerate fills.

The Trainer fills a fixed list of keys (see H001). accelerate's ``Accelerator._prepare_deepspeed``
(accelerate 1.15.0) then walks the whole config and, for any ``"auto"`` left that it has no value
for, raises ``ValueError: `zero_optimization.stage3_max_live_parameters` not found in kwargs``.
The same happens to the deprecated ``bfloat16`` section (``bfloat16.enabled: "auto"``: the Trainer
fills only ``bf16.enabled``), and to the bucket sizes when the model's config has neither
``hidden_size`` nor ``hidden_sizes``.

Anti-pattern: ``"stage3_max_live_parameters": "auto"``. Fix: an integer (DeepSpeed's default is
1e9), or remove the key.
"""

from __future__ import annotations

from advisor.rules._util import hf_findings
from advisor.rules import LintContext, Rule, register


@register
class HfAutoUnfillable(Rule):
    code = "H002"
    name = "hf-auto-unfillable"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        return [f for f in hf_findings(ctx) if f.code == self.code]
