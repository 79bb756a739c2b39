"""S004 out-of-range: a value outside the range or set DeepSpeed allows.

What DeepSpeed does: pydantic constraints reject, at ``deepspeed.initialize``, values such as
``zero_optimization.stage: 4`` (stages are 0-3), ``reduce_bucket_size: 0`` (must be > 0),
negative bucket sizes or thresholds, ``offload_optimizer.ratio`` outside 0..1, an offload
``device`` other than "none", "cpu" or "nvme" (case matters: "CPU" is rejected). Plain-dict
settings with a fixed set of values (``checkpoint.tag_validation``: Warn/Ignore/Fail,
``communication_data_type``: fp32/fp16/bf16, ``gradient_allreduce_op``: mean/sum) raise when the
config is parsed; batch sizes must be positive.

Anti-pattern::

    "zero_optimization": {"stage": 3, "offload_param": {"device": "CPU"}}

Fix::

    "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class OutOfRange(Rule):
    """Explanation and registry entry for S004; the findings come from ``advisor.config.schema``."""

    code = "S004"
    name = "out-of-range"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        """Yield nothing: schema validation (``advisor.config.schema.validate_config``) reports S004."""
        return iter(())
