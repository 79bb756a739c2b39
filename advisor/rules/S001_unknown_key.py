"""S001 unknown-key: a key DeepSpeed 0.19.8 does not know, in a section it validates strictly.

What DeepSpeed does: ``zero_optimization`` (with ``offload_param``, ``offload_optimizer``,
``zenflow``, ``leaf_module``), ``fp16``, ``bf16``/``bfloat16``, ``comms_logger``, the monitors
(``tensorboard``, ``wandb``, ``csv_monitor``, ``comet``), ``hybrid_engine``, ``compile``,
``timers.throughput``, ``tensor_parallel`` and ``weight_quantization`` are pydantic models with
``extra="forbid"``. Any key they do not define raises a ValidationError ("Extra inputs are not
permitted") inside ``deepspeed.initialize`` -- after the job has waited in the queue and loaded
the model. Older releases ignored such keys, so configs that "worked" for years now fail.

The message suggests the closest known key of the same section (did-you-mean), e.g. the common
misspelling ``stage3_param_persitance_threshold`` -> ``stage3_param_persistence_threshold``, or
the pre-2022 plural ``cpu_offload_params`` -> ``cpu_offload_param``.

Also reported as S001: a field written under both its name and its ``stage3_`` alias
(``prefetch_bucket_size`` and ``stage3_prefetch_bucket_size``): pydantic accepts either spelling,
and rejects the second one as an extra input.

Anti-pattern::

    "zero_optimization": {"stage": 3, "stage3_param_persitance_threshold": 100000}

Fix::

    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 100000}

A known key placed in the wrong section is S006, a removed key S005.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class UnknownKey(Rule):
    """Explanation and registry entry for S001; the findings come from ``advisor.config.schema``."""

    code = "S001"
    name = "unknown-key"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        """Yield nothing: schema validation (``advisor.config.schema.validate_config``) reports S001."""
        return iter(())
