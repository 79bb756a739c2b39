"""H007 scheduler-replaces-trainer: the DeepSpeed config's scheduler runs, not the Trainer's.

What transformers 5.24.0 does (``integrations/deepspeed.py`` ``deepspeed_optim_sched``): when the
DeepSpeed config has a ``scheduler`` block, the Trainer hands DeepSpeed a ``DummyScheduler`` and
DeepSpeed builds the config's scheduler; the Trainer's ``lr_scheduler_type`` (``--lr_scheduler_type
cosine``) is not used. Only "auto" values in the block are filled from the Trainer
(``warmup_max_lr`` from ``learning_rate``, ``warmup_num_steps`` from ``warmup_steps`` as
``max(1, get_warmup_steps(n))``, ``total_num_steps`` from the step count); a warmup key the block
leaves out keeps DeepSpeed's default (1000 steps for the Warmup* schedulers) whatever
``--warmup_steps`` says.

Anti-pattern (``--lr_scheduler_type cosine --warmup_steps 100``)::

    "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto"}}

Fix: drop the ``scheduler`` block to get the Trainer's scheduler, or keep it and set its values
to "auto" (``"warmup_num_steps": "auto"``) so the Trainer's arguments reach it.
"""

from __future__ import annotations

from advisor.errors import cut
from advisor.findings import pointer
from advisor.rules import LintContext, Rule, register


def _trainer_args(ctx: LintContext) -> dict:
    t = ctx.trainer_args
    if t is None and isinstance(ctx.hf, dict):
        t = ctx.hf
    return dict(t or {})


@register
class SchedulerReplacesTrainer(Rule):
    code = "H007"
    name = "scheduler-replaces-trainer"
    severity = "warning"

    def check(self, ctx: LintContext):
        if not ctx.hf:
            return
        s = ctx.raw.get("scheduler")
        if not isinstance(s, dict) or "type" not in s:
            return
        from advisor.config.scheduler import SCHEDULERS

        t = _trainer_args(ctx)
        stype = s.get("type")
        if t.get("lr_scheduler_type"):
            yield self.finding(pointer("scheduler"),
                               f"the config's scheduler {cut(str(stype))} is what runs: with a scheduler block the "
                               f"Trainer hands DeepSpeed a DummyScheduler, so --lr-scheduler-type "
                               f"{cut(str(t['lr_scheduler_type']))} "
                               "is not used", "drop the scheduler block to use the Trainer's scheduler, or drop "
                               "--lr-scheduler-type", trainer=t["lr_scheduler_type"], config=stype)
        params = s.get("params") if isinstance(s.get("params"), dict) else {}
        sig = SCHEDULERS.get(stype) if isinstance(stype, str) else None
        w = t.get("warmup_steps") or t.get("warmup_ratio")
        if w and sig and "warmup_num_steps" in sig and "warmup_num_steps" not in params:
            yield self.finding(pointer("scheduler", "params") if "params" in s else pointer("scheduler"),
                               f"--warmup-steps {w:g} does not reach the config's {stype}: its params have no "
                               f"warmup_num_steps, so DeepSpeed warms up over its default "
                               f"{sig['warmup_num_steps']} steps", 'add "warmup_num_steps": "auto" to '
                               "scheduler.params", default=sig["warmup_num_steps"])
