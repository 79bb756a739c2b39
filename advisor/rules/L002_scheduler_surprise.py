"""L002 scheduler-surprise: DeepSpeed builds the LR scheduler, but not the schedule you meant.

What DeepSpeed 0.19.8 does (``deepspeed/runtime/lr_schedules.py``):

* WarmupDecayLR's ``warmup_max_lr`` defaults to 0.001 whatever the optimizer's lr (WarmupLR's
  default is the optimizer's lr; WarmupDecayLR passes its own 0.001 to WarmupLR). The scheduler
  writes its value into every param group at each step, so ``optimizer.params.lr`` (or the
  Trainer's ``--learning-rate``) is not the peak: a fine-tune meant for 2e-5 runs at 1e-3.
  Before DeepSpeed 0.17.2 WarmupLR did the same (its signature default was 0.001: 0.17.1
  lr_schedules.py ``WarmupLR.__init__``), so with ``--deepspeed-version`` below 0.17.2 a WarmupLR
  without ``warmup_max_lr`` is flagged too.
* ``total_num_steps`` below ``warmup_num_steps`` (default 1000): DeepSpeed only logs a warning;
  the run ends before the warmup does.
* a ``warmup_type`` other than "log" or "linear": a logged warning, then "log".
* WarmupCosineLR ``warmup_min_ratio`` or ``cos_min_ratio`` outside [0, 1] (ratios of the
  optimizer's lr, not checked by DeepSpeed, ``get_lr_ratio``): a negative warmup start steps
  uphill, a start above 1 warms *down*; a negative ``cos_min_ratio`` is clamped to 0 by
  ``max(0.0, ...)`` before the end, one above 1 ends above the optimizer's lr.

Anti-pattern (optimizer lr 2e-5)::

    "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 5000}}

Fix: ``"warmup_max_lr": 2e-5`` (with the HF Trainer, ``"auto"``, filled from --learning-rate);
``warmup_num_steps`` below ``total_num_steps``; ``warmup_type`` "log" or "linear".
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules.L001_scheduler_params_refused import problem_pointer, scheduler_problems


@register
class SchedulerSurprise(Rule):
    code = "L002"
    name = "scheduler-surprise"
    severity = "warning"

    def check(self, ctx: LintContext):
        s, probs = scheduler_problems(ctx)
        for p in probs:
            if not p.error:
                yield self.finding(problem_pointer(s, p.key), p.message, p.fix, **p.data)
