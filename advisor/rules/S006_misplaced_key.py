"""S006 misplaced-key: a known DeepSpeed key written at the wrong level.

What DeepSpeed does: it reads each key only where it belongs. A key written elsewhere is either
silently ignored (at the top level and in plain-dict sections) or rejected (inside a strict,
pydantic section). Either way the setting the user wrote does not take effect. Typical cases:

* ``offload_optimizer`` / ``offload_param`` at the top level instead of inside
  ``zero_optimization``: ignored, so optimizer state (or parameters) stay on the accelerator and
  the job uses as much memory as without offload;
* ``stage3_*`` keys, ``round_robin_gradients``, ``overlap_comm`` ... at the top level: ignored;
* ``aio`` inside ``zero_optimization``: rejected (``aio`` is a top-level section);
* fp16 loss-scaling keys (``loss_scale``, ``initial_scale_power``, ``loss_scale_window``,
  ``hysteresis``, ``min_loss_scale``, ``consecutive_hysteresis``) inside ``bf16``: rejected --
  loss scaling exists only for fp16, bf16 needs none;
* a section nested inside itself (``"fp16": {"fp16": true}``).

The table of where each key belongs is built from the schema (``advisor/config/keys.py``); keys too
generic to place (``enabled``, ``type``, ...) are reported as S001/S002 instead.

Anti-pattern::

    "zero_optimization": {"stage": 2},
    "offload_optimizer": {"device": "cpu"}

Fix::

    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class MisplacedKey(Rule):
    """Explanation and registry entry for S006; the findings come from ``advisor.config.schema``."""

    code = "S006"
    name = "misplaced-key"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        """Yield nothing: schema validation (``advisor.config.schema.validate_config``) reports S006."""
        return iter(())
