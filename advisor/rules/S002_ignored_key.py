"""S002 ignored-key: a key DeepSpeed silently ignores.

What DeepSpeed does: the top level of the config, and the sections it reads as plain dicts
(``optimizer``, ``scheduler``, ``aio``, ``activation_checkpointing``, ``flops_profiler``,
``checkpoint``, ``data_types``, ``pipeline``, ``autotuning``, ``data_efficiency``,
``expert_parallel``, ``torch_autocast``, ``timers``), are read with ``dict.get`` for the keys
DeepSpeed knows. Anything else is never looked at: no error, no warning, and the setting the
user meant does not happen. A typo such as ``train_micro_batch_size_per_gpus`` or an invented
block such as ``"log": {"steps_per_print": 10}`` or ``"monitor_config": {...}`` silently leaves
the default in place.

The message suggests the closest known key when there is one, and says when an unknown block
contains keys DeepSpeed reads only at the top level. Keys that look like comments
(``_comment``, ``comment...``) are reported at info level.

A misspelt top-level key whose suggestion is a top-level key DeepSpeed reads, with that key
absent from the config, is an **error**: ``"zero_optimisation": {"stage": 3}`` leaves
``zero_optimization`` absent, ``get_zero_config`` builds ``DeepSpeedZeroConfig()`` from ``{}``
(``runtime/zero/config.py`` l.71-78) and its ``stage`` default is 0 (l.95): ZeRO is off, every
rank holds the whole model. DeepSpeed starts without a word (so this is not a refusal: estimate
and check go on, judging the default). The message names what DeepSpeed runs with instead
(``config/defaults.py`` ``ABSENT_TOP_LEVEL``). Where the intended key is written too -- under
its own name or a legacy name of the same section (``bfloat16`` stands for ``bf16``:
``runtime/precision_config.py`` l.34-38) -- the typo is a stray beside it and stays a warning.
It stays a warning, too, when its value read under the intended name changes nothing:
``"fp_16": {"enabled": false}`` or ``"zero_optimisation": {"stage": 0}`` give the effective config
DeepSpeed builds without them (``config/effective.py``), ``"wall_clock_breakdowns": false`` is
DeepSpeed's default (``runtime/config.py`` l.351-352); the message then says "(it sets what
DeepSpeed's default already is)". These errors are named wherever the key stands among the first 1,050 unknown top-level keys:
past the first 50, only the warnings are folded into one; keys past 1,050 are not searched for a
misspelt section (bounded work), and the folded line says so.

Anti-pattern::

    "cuda_visible_devices": "0,1,2,3",
    "log": {"steps_per_print": 50}

Fix: remove what DeepSpeed does not read (set devices with the launcher's ``--include`` or
``CUDA_VISIBLE_DEVICES``), and lift known keys to where DeepSpeed reads them::

    "steps_per_print": 50

A known key at the wrong level is S006 (an error: it was meant to do something).
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class IgnoredKey(Rule):
    """Explanation and registry entry for S002; the findings come from ``advisor.config.schema``."""

    code = "S002"
    name = "ignored-key"
    severity = "warning"
    severity_also = ("error for a misspelt top-level key whose intended key (or its legacy name) is absent, "
                     "when its value would change what DeepSpeed runs; info for a comment key")

    def check(self, ctx: LintContext):
        """Yield nothing: schema validation (``advisor.config.schema.validate_config``) reports S002."""
        return iter(())
