"""M090 refused-config: DeepSpeed 0.19.8 would refuse this config at ``deepspeed.initialize()``.

Some combinations pass config parsing but fail when the engine is built: fp16 and bf16 both
enabled (``runtime/config.py`` ``_do_error_check``), bf16 with ``data_types.grad_accum_dtype:
fp32`` at stage 0 (``engine.py`` ``_do_optimizer_sanity_check`` raises NotImplementedError),
NVMe offload without ``nvme_path`` at stage 3 (the swapper fails). There is nothing to account
for, so ``estimate`` and ``check`` report this instead of tables and exit 1
(``advisor.ledger.state.unsupported_reason`` lists the cases, each found by running the engine).

Anti-pattern::

    "fp16": {"enabled": true}, "bf16": {"enabled": true}

Fix: enable one precision, e.g. ``"bf16": {"enabled": true}`` and no fp16 block.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class RefusedConfig(Rule):
    """Explanation and registry entry for M090; the findings come from estimate / check."""

    code = "M090"
    name = "refused-config"
    produced_by = "estimate"
    severity = "error"

    def check(self, ctx: LintContext):
        return ()
