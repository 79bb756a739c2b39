"""D001 deprecated-keys: deprecated spellings and their replacements.

What DeepSpeed 0.19.8 does with each (``runtime/zero/config.py`` fields marked deprecated,
``runtime/config_utils.py`` ``_process_deprecated_field``, ``runtime/precision_config.py``):

* ``zero_optimization.cpu_offload: true`` -> ``offload_optimizer: {"device": "cpu"}``
  (translated, warns);
* ``zero_optimization.cpu_offload_param: true`` -> ``offload_param: {"device": "cpu"}``
  (translated, warns);
* ``zero_optimization.cpu_offload_use_pin_memory`` -> no effect; ``pin_memory`` inside
  ``offload_*`` (default true);
* ``zero_optimization.stage3_gather_fp16_weights_on_model_save`` ->
  ``stage3_gather_16bit_weights_on_model_save``;
* top-level ``bfloat16`` -> ``bf16`` (read only when there is no ``bf16`` section);
* ``"zero_optimization": true`` (boolean) -> ``{"stage": 1}`` (``allgather_size`` ->
  ``allgather_bucket_size``);
* ``zero_optimization.cpu_offload_params`` (plural) -> pre-2022 spelling: now an unknown key,
  **rejected** (error).

Why it matters: deprecated forms still work today but hide what the config does (the boolean
``cpu_offload`` is easy to miss next to an ``offload_optimizer`` block; giving both is an error,
see D002) and will break when DeepSpeed removes them. A ``bfloat16`` section next to a ``bf16``
one is ignored entirely.

Anti-pattern::

    "zero_optimization": {"stage": 2, "cpu_offload": true}

Fix::

    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true}}
"""

from __future__ import annotations

from advisor.config.effective import _as_bool
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import zero_raw, zptr


@register
class DeprecatedKeys(Rule):
    code = "D001"
    name = "deprecated-keys"
    severity = "warning"

    def check(self, ctx: LintContext):
        raw = ctx.raw
        zr = zero_raw(raw)
        if "cpu_offload" in zr:
            on = _as_bool(zr["cpu_offload"])
            yield self.finding(zptr("cpu_offload"), "cpu_offload is deprecated" + (
                ": it means offload_optimizer.device cpu" if on else " (and false here: it does nothing)"),
                'replace it with "offload_optimizer": {"device": "cpu"}' if on else "remove cpu_offload")
        if "cpu_offload_param" in zr:
            on = _as_bool(zr["cpu_offload_param"])
            yield self.finding(zptr("cpu_offload_param"), "cpu_offload_param is deprecated" + (
                ": it means offload_param.device cpu" if on else " (and false here: it does nothing)"),
                'replace it with "offload_param": {"device": "cpu"}' if on else "remove cpu_offload_param")
        if "cpu_offload_params" in zr:
            yield self.finding(zptr("cpu_offload_params"), "cpu_offload_params is a removed pre-2022 spelling: "
                                                           "DeepSpeed 0.19.8 rejects it as an unknown key",
                               'replace it with "offload_param": {"device": "cpu"}' if _as_bool(zr["cpu_offload_params"])
                               else "remove cpu_offload_params", severity="error")
        if "cpu_offload_use_pin_memory" in zr:
            yield self.finding(zptr("cpu_offload_use_pin_memory"), "cpu_offload_use_pin_memory is deprecated and has "
                                                                   "no effect",
                               "remove it; set pin_memory inside offload_optimizer/offload_param instead (default true)")
        if "stage3_gather_fp16_weights_on_model_save" in zr:
            yield self.finding(zptr("stage3_gather_fp16_weights_on_model_save"),
                               "stage3_gather_fp16_weights_on_model_save is deprecated",
                               "rename it to stage3_gather_16bit_weights_on_model_save")
        if "bfloat16" in raw:
            if "bf16" in raw:
                yield self.finding("/bfloat16", "the legacy bfloat16 section is ignored: a bf16 section is present and "
                                                "takes precedence", "remove the bfloat16 section (merge its settings into bf16)")
            else:
                yield self.finding("/bfloat16", "bfloat16 is the legacy name of the bf16 section",
                                   'rename "bfloat16" to "bf16"')
        if isinstance(raw.get("zero_optimization"), bool):
            on = raw["zero_optimization"]
            yield self.finding("/zero_optimization", f"boolean zero_optimization is deprecated: {str(on).lower()} means "
                                                     f"stage {1 if on else 0}",
                               f'use "zero_optimization": {{"stage": {1 if on else 0}}}')
            if "allgather_size" in raw:
                yield self.finding("/allgather_size", "allgather_size is read only with the deprecated boolean "
                                                      "zero_optimization",
                                   "move it to zero_optimization.allgather_bucket_size")
