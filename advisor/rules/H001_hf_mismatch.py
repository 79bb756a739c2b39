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

Runs with ``--hf`` and the Trainer arguments (``--per-device-train-batch-size`` ...); the values
come from ``advisor.config.hf`` (a replay of the Trainer's code). Fix: set the key to ``"auto"``, or
make the value equal to the Trainer argument.
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
