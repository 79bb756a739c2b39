"""S005 removed-key: a key DeepSpeed 0.19.8 refuses outright.

What DeepSpeed does: ``runtime/config.py`` ``_reject_removed_config_keys`` raises
DeepSpeedConfigError, before anything else is parsed, when the config contains a feature that
has been removed (https://github.com/deepspeedai/DeepSpeed/issues/8489):

* top level: ``amp`` (use ``fp16``, ``bf16`` or ``torch_autocast``), ``curriculum_learning``
  (moved to ``data_efficiency.data_sampling.curriculum_learning``), ``elasticity`` (set the batch
  keys directly), ``nebula``, ``compression_training``, ``quantize_training``,
  ``sparse_gradients``, ``eigenvalue``, ``sparse_attention``, ``graph_harvesting``,
  ``progressive_layer_drop`` (no replacement);
* in ``zero_optimization``: ``mics_shard_size`` and ``mics_hierarchical_params_gather`` (MiCS is
  gone: use plain ZeRO-3, or ZeRO++ ``zero_hpz_partition_size`` for hierarchical partitioning),
  ``zeropp_loco_param`` (LoCo is gone; ``zero_quantized_gradients`` still works without it).

Even a disabled block (``"amp": {"enabled": false}``) is refused: the check looks at the key.

Anti-pattern::

    "zero_optimization": {"stage": 3, "mics_shard_size": 8}

Fix::

    "zero_optimization": {"stage": 3}
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class RemovedKey(Rule):
    """Explanation and registry entry for S005; the findings come from ``advisor.config.schema``."""

    code = "S005"
    name = "removed-key"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        """Yield nothing: schema validation (``advisor.config.schema.validate_config``) reports S005."""
        return iter(())
