"""A003 auto-passed-raw: "auto" in sections DeepSpeed passes on without validation.

What DeepSpeed does: ``optimizer.params`` and ``scheduler.params`` are handed as keyword
arguments to the optimizer / LR-scheduler constructors (``engine.py``
``_configure_basic_optimizer``, ``_scheduler_from_config``). DeepSpeed does not resolve "auto"
(only the HF Trainer does), so ``lr="auto"`` reaches ``torch.optim.AdamW`` (``TypeError`` in its
range check), ``DeepSpeedCPUAdam`` or ``FusedAdam`` (``TypeError`` when the kernel gets a
string), or ``WarmupLR`` (fails computing the first learning rate). The same holds for
``optimizer.type``/``scheduler.type`` "auto" ("auto is not a supported DeepSpeed Optimizer") and
for the plain-dict sections read with ``dict.get`` (``aio``, ``activation_checkpointing``,
``flops_profiler``, ``checkpoint``, ``data_types``): the string becomes the value.
``data_types.keep_in_fp32_modules: "auto"`` and ``pipeline.stages: "auto"`` are DeepSpeed's own
defaults and are not reported.

Not reported with ``--hf`` (the HF Trainer fills optimizer and scheduler values from its
``TrainingArguments``).

Anti-pattern::

    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}}

Fix::

    "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "weight_decay": 0.0}}
"""

from __future__ import annotations

from advisor.findings import pointer
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import is_auto

#: HF TrainingArguments defaults, offered as a starting value in the fix.
SUGGEST = {"lr": "2e-5 (or your learning rate)", "weight_decay": "0.0", "betas": "[0.9, 0.999]", "eps": "1e-8",
           "warmup_min_lr": "0", "warmup_max_lr": "your peak learning rate", "warmup_num_steps": "an integer",
           "total_num_steps": "the number of optimizer steps"}
RAW_SECTIONS = ("aio", "activation_checkpointing", "flops_profiler", "checkpoint", "data_types")
LEGIT = {("data_types", "keep_in_fp32_modules")}


@register
class AutoPassedRaw(Rule):
    code = "A003"
    name = "auto-passed-raw"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        if ctx.hf:
            return
        raw = ctx.raw
        for sec in ("optimizer", "scheduler"):
            s = raw.get(sec)
            if not isinstance(s, dict):
                continue
            if is_auto(s.get("type")):
                yield self.finding(pointer(sec, "type"), f'{sec}.type "auto" is not resolved outside the HF Trainer: '
                                                         f"deepspeed.initialize fails looking up a {sec} named auto",
                                   f"set {sec}.type (e.g. " + ('"AdamW"' if sec == "optimizer" else '"WarmupDecayLR"') + ")")
            params = s.get("params")
            if not isinstance(params, dict):
                continue
            for k, v in params.items():
                if is_auto(v):
                    yield self.finding(pointer(sec, "params", k),
                                       f'{sec}.params.{k} "auto" is passed to the {sec} constructor as the string '
                                       f'"auto" outside the HF Trainer: initialize or the first step fails (TypeError)',
                                       f"set {sec}.params.{k} to {SUGGEST.get(k, 'a number')}, or lint with --hf if the "
                                       "HF Trainer launches this config")
        for sec in RAW_SECTIONS:
            s = raw.get(sec)
            if not isinstance(s, dict):
                continue
            for k, v in s.items():
                if is_auto(v) and (sec, k) not in LEGIT:
                    yield self.finding(pointer(sec, k), f'{sec}.{k} "auto" is read as the string "auto" (DeepSpeed does '
                                                        "not resolve it)", f"set {sec}.{k} to a real value or remove it",
                                       severity="warning")
