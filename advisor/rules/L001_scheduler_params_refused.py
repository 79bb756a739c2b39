"""L001 scheduler-params-refused: DeepSpeed's LR scheduler constructor raises at start-up.

What DeepSpeed 0.19.8 does (``engine.py`` ``_scheduler_from_config``): it calls
``lr_schedules.<type>(optimizer, **scheduler.params)``, after the model is built and the job holds
its allocation. The constructors (``deepspeed/runtime/lr_schedules.py``) raise on:

* ``warmup_num_steps`` that is not a positive ``int`` (WarmupLR, WarmupDecayLR, WarmupCosineLR,
  since 0.19.3): 0 to "turn warmup off", or a JSON float such as ``1e3`` or ``100.0``
  (``ValueError: warmup_num_steps must be a positive integer``); the same for LRRangeTest's
  ``lr_range_test_step_size``;
* a missing required argument: ``total_num_steps`` for WarmupDecayLR and WarmupCosineLR,
  ``cycle_min_lr`` and ``cycle_max_lr`` for OneCycle (``TypeError: missing 1 required positional
  argument``);
* an argument the class does not take, e.g. ``warmup_max_lr`` on WarmupCosineLR, whose
  warmup is a ratio of the optimizer's lr (``TypeError: unexpected keyword argument``);
* a ``scheduler`` with a ``type`` and no ``params`` (``cls(optimizer, **None)``);
* OneCycle ``cycle_first_step_size`` <= 0 or ``cycle_second_step_size`` < 0; non-numeric learning
  rates or step counts;
* WarmupLR / WarmupDecayLR ``warmup_min_lr`` / ``warmup_max_lr`` lists whose length is not the
  optimizer's number of param groups (``_format_param``: ``ValueError: expected N value for
  min_lr``): an empty list, min and max lists of different lengths, or under the HF Trainer with a
  DeepSpeed optimizer (one group) any other length than 1; WarmupCosineLR ratios that are not
  numbers (a TypeError at the first step);
* a ``type`` that is neither one of the five nor a ``torch.optim.lr_scheduler`` class.

"auto" values are not judged here (A003 outside the HF Trainer; the Trainer fills them with --hf).

Anti-pattern::

    "scheduler": {"type": "WarmupCosineLR",
                  "params": {"total_num_steps": 20000, "warmup_num_steps": 0}}

Fix: ``"warmup_num_steps": 1`` (or more), or drop the scheduler block; write step counts as
integers (``1000``, not ``1e3``).
"""

from __future__ import annotations

import re

from advisor.findings import pointer
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import is_auto


def scheduler_problems(ctx: LintContext):
    """(scheduler dict, problems) for the context's raw config, computed once per lint run."""
    cached = ctx.cache.scheduler_problems
    if cached is not None:
        return cached
    from advisor.config.scheduler import check_params

    s = ctx.raw.get("scheduler")
    probs = []
    if isinstance(s, dict) and "type" in s and not is_auto(s.get("type")):
        params = s.get("params")
        if ctx.hf and isinstance(params, dict) and any(is_auto(v) for v in params.values()):
            # under --hf with the Trainer's arguments known, an "auto" is checked as the value the
            # Trainer fills (warmup_num_steps, total_num_steps ...: what DeepSpeed receives)
            from advisor.config.hf import findings_for_context
            findings_for_context(ctx)
            filled = ((ctx.cache.hf_config or {}).get("scheduler") or {}).get("params")
            if isinstance(filled, dict):
                params = {k: (filled.get(k, v) if is_auto(v) else v) for k, v in params.items()}
        skip = frozenset(k for k, v in params.items() if is_auto(v)) if isinstance(params, dict) else frozenset()
        floats = frozenset(k for k, v in params.items() if isinstance(v, int) and not isinstance(v, bool)
                           and _float_literal(ctx, pointer("scheduler", "params", k))) \
            if isinstance(params, dict) else frozenset()
        from advisor.config.versions import behaviour
        probs = check_params(s["type"], params, skip=skip, optimizer_lr=_optimizer_lr(ctx), float_literals=floats,
                             json_loaded=bool(ctx.hf),
                             positive_int_check=ctx.release is None or behaviour("warmup-positive-int",
                                                                                 ctx.release.checked),
                             warmuplr_max_lr_from_optimizer=ctx.release is None or behaviour(
                                 "warmuplr-max-lr-from-optimizer", ctx.release.checked),
                             param_groups=_param_groups(ctx))
    ctx.cache.scheduler_problems = (s, probs)
    return s, probs


def _float_literal(ctx: LintContext, ptr: str) -> bool:
    """True when the value at ``ptr`` is written as a JSON float (``1e3``, ``100.0``): the loader
    (hjson, as DeepSpeed reads a path) returns such a number as an int."""
    loaded = ctx.loaded
    pos = loaded.positions.get(ptr)
    text = getattr(loaded, "text", "")
    if pos is None or not text:
        return False
    lines = text.splitlines(keepends=True)
    off = sum(len(x) for x in lines[:pos[0] - 1]) + pos[1] - 1
    colon = text.find(":", off)
    if colon < 0:
        return False
    m = re.match(r"\s*(-?[0-9][0-9.eE+-]*)", text[colon + 1:])
    return bool(m) and any(c in m.group(1) for c in ".eE")


def _param_groups(ctx: LintContext) -> int | None:
    """The optimizer's param groups when known: 1 under the HF Trainer with a DeepSpeed
    ``optimizer`` block (transformers integrations/deepspeed.py deepspeed_init hands
    ``DummyOptim(params=model_parameters)``, a flat list of the trainable parameters, so DeepSpeed
    builds one group); else None (the client's optimizer or parameter groups decide)."""
    o = ctx.raw.get("optimizer")
    return 1 if ctx.hf and isinstance(o, dict) and o.get("type") else None


def _optimizer_lr(ctx: LintContext) -> float | None:
    o = ctx.raw.get("optimizer")
    lr = o.get("params", {}).get("lr") if isinstance(o, dict) and isinstance(o.get("params"), dict) else None
    if is_auto(lr):
        targs = ctx.trainer_args or (ctx.hf if isinstance(ctx.hf, dict) else None)
        lr = (targs or {}).get("learning_rate", 5e-5) if ctx.hf else None  # TrainingArguments default 5e-5
    from advisor.config.validation import float_of
    return float_of(lr)  # a 400-digit int is no OverflowError


def problem_pointer(s: dict, key: str | None) -> str:
    if key == "type":
        return pointer("scheduler", "type")
    if key is None:
        return pointer("scheduler", "params") if isinstance(s.get("params"), dict) else pointer("scheduler")
    return pointer("scheduler", "params", key)


@register
class SchedulerParamsRefused(Rule):
    code = "L001"
    name = "scheduler-params-refused"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        s, probs = scheduler_problems(ctx)
        for p in probs:
            if p.error:
                yield self.finding(problem_pointer(s, p.key), p.message, p.fix, **p.data)
