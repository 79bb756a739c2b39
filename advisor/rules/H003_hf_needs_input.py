"""H003 hf-needs-input: an "auto" value ds-advisor cannot resolve without one more input.

The bucket sizes (``reduce_bucket_size`` = hidden_size^2, ``stage3_prefetch_bucket_size`` =
int(0.9 x hidden_size^2), ``stage3_param_persistence_threshold`` = 10 x hidden_size) need the
model's hidden size (``--model`` or ``--hidden-size``); the scheduler's ``total_num_steps`` (and a
warmup given as a ratio) need the number of optimizer steps (``--max-steps``), which the Trainer
derives from the dataset. Anti-pattern (no ``--model``)::

    {"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}}

Fix: pass ``--model`` / ``--hidden-size`` and ``--max-steps``. The value stays "auto" in the resolved config; DeepSpeed's effective
default is then used by estimate.
"""

from __future__ import annotations

from advisor.rules._util import hf_findings
from advisor.rules import LintContext, Rule, register


@register
class HfNeedsInput(Rule):
    code = "H003"
    name = "hf-needs-input"
    severity = "info"

    def check(self, ctx: LintContext):
        return [f for f in hf_findings(ctx) if f.code == self.code]
