"""H004 accelerate-launch-error: accelerate refuses the DeepSpeed setup at start-up.

accelerate 1.15.0 (``utils/dataclasses.py`` ``DeepSpeedPlugin``) raises when:

* the DeepSpeed config has no ``zero_optimization`` section ("Please specify the ZeRO
  optimization config in the DeepSpeed config.");
* an accelerate YAML names a ``deepspeed_config_file`` *and* sets any of gradient_accumulation_steps,
  gradient_clipping, zero_stage, offload_*_device, offload_*_nvme_path, zero3_save_16bit_model or
  mixed_precision (they "will be ignored"; accelerate makes it an error);
* the launch's mixed precision (``--bf16``/``--fp16`` or the YAML's ``mixed_precision``) is one
  dtype while the config enables the other (``set_mixed_precision``);
* a field of the accelerate file has a value accelerate launch or DeepSpeed refuses, reported at
  the key with the allowed values: ``mixed_precision`` not one of ``PrecisionType``'s no, fp8,
  fp16, bf16 (``utils/launch.py``: ``PrecisionType(args.mixed_precision.lower())``; an unquoted
  ``no`` is YAML's false, which has no ``.lower()``), ``deepspeed_config.zero_stage`` not 0-3
  (``DeepSpeedPlugin``: ``int()`` of the exported ``ACCELERATE_DEEPSPEED_ZERO_STAGE``, then
  DeepSpeed's ZeroStageEnum), an offload device other than none/cpu/nvme, a non-positive
  ``gradient_accumulation_steps``, ``num_processes`` below ``num_machines``.

Anti-pattern (launched with ``--bf16``)::

    {"fp16": {"enabled": true}, "zero_optimization": {"stage": 2}}

Fix: add the ``zero_optimization`` section; move the YAML's DeepSpeed fields into the config
file; use ``"enabled": "auto"`` for both fp16 and bf16 so the launch decides.
"""

from __future__ import annotations

from advisor.rules._util import hf_findings
from advisor.rules import LintContext, Rule, register


@register
class AccelerateLaunchError(Rule):
    code = "H004"
    name = "accelerate-launch-error"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        return [f for f in hf_findings(ctx) if f.code == self.code]
