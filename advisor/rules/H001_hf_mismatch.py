"""H001 hf-mismatch: an explicit DeepSpeed value disagrees with the HF Trainer's argument.

What the Trainer does (transformers 5.24.0, ``integrations/deepspeed.py``,
``HfTrainerDeepSpeedConfig.fill_match``): for each config key it knows, an ``"auto"`` value is
replaced by the TrainingArguments value; a value that is *set* and differs is collected as a
mismatch, and ``trainer_config_finalize`` then raises::

    ValueError: Please correct the following DeepSpeed config values that mismatch
    TrainingArguments values:
    - ds gradient_accumulation_steps=1 vs hf gradient_accumulation_steps=2
    The easiest method is to set these DeepSpeed config values to 'auto'.

Keys compared: train_micro_batch_size_per_gpu (per_device_train_batch_size),
gradient_accumulation_steps, train_batch_size (world_size x per-device batch x accumulation),
gradient_clipping (max_grad_norm), optimizer.params lr / betas / eps / weight_decay,
scheduler.params warmup_max_lr (learning_rate), total_num_steps, warmup_num_steps, fp16.enabled
(--fp16), bf16.enabled (--bf16).

Why it matters: the error comes after the job has been scheduled and the model loaded.

Anti-pattern (Trainer run with ``--per_device_train_batch_size 8``)::

    {"train_micro_batch_size_per_gpu": 4}

Runs with ``--hf`` (the Trainer arguments given, ``--per-device-train-batch-size`` ..., and
TrainingArguments' defaults for the rest, as ``resolve`` replays them), on DeepSpeed and accelerate files; the
values come from ``advisor.config.hf`` (a replay of the Trainer's code). For a value accelerate
wrote from a field of an accelerate YAML (``deepspeed_config.gradient_accumulation_steps``,
``deepspeed_config.gradient_clipping``, ``mixed_precision``), the finding points at that field.

Fix: pass the Trainer argument with the config's value (``--gradient-accumulation-steps 4``,
``--bf16``, ``--max-grad-norm 0.5``; for the batch keys every argument that keeps the config's
global batch, micro-batch x accumulation x world size, with the Trainer's own figure beside it),
or set the key to ``"auto"``.
"""

from __future__ import annotations

from advisor.rules._util import hf_findings
from advisor.rules import LintContext, Rule, register


@register
class HfMismatch(Rule):
    code = "H001"
    name = "hf-mismatch"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        return [f for f in hf_findings(ctx) if f.code == self.code]
