"""DeepSpeed 0.19.8's LR schedulers as ``deepspeed.initialize`` builds them from the config.

``engine.py`` ``DeepSpeedEngine._scheduler_from_config``: ``scheduler.type`` names a class of
``deepspeed/runtime/lr_schedules.py`` (else of ``torch.optim.lr_scheduler``, else
``AssertionError: DeepSpeed does not recognize LR scheduler X``) and the class is called as
``cls(optimizer, **scheduler.params)``. So every key of ``params`` is a keyword argument: an
unknown one, or a missing required one, is a ``TypeError`` at start-up; a ``scheduler`` with a
type and no ``params`` is ``cls(optimizer, **None)``, also a ``TypeError``
(``config.py`` ``get_scheduler_params`` returns None). No scheduler is built when the client
passes its own ``lr_scheduler`` to ``initialize`` (``_configure_lr_scheduler``).

:data:`SCHEDULERS` holds each constructor's keyword arguments and defaults (the signatures of
``LRRangeTest``, ``OneCycle``, ``WarmupLR``, ``WarmupDecayLR``, ``WarmupCosineLR``);
:func:`check_params` replays the checks the constructors make. Pure data and functions: no
torch, no deepspeed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

#: A required keyword argument (no default in the signature).
REQUIRED = object()

#: ``WarmupLR`` reads a missing ``warmup_max_lr`` (None) as each param group's optimizer lr.
OPTIMIZER_LR = object()

#: Keyword arguments and defaults of each DeepSpeed 0.19.8 scheduler constructor (after the
#: positional ``optimizer``), from ``deepspeed/runtime/lr_schedules.py``.
SCHEDULERS: dict[str, dict[str, Any]] = {
    "LRRangeTest": {"lr_range_test_min_lr": 1e-3, "lr_range_test_step_size": 2000, "lr_range_test_step_rate": 1.0,
                    "lr_range_test_staircase": False, "last_batch_iteration": -1},
    "OneCycle": {"cycle_min_lr": REQUIRED, "cycle_max_lr": REQUIRED, "decay_lr_rate": 0.0,
                 "cycle_first_step_size": 2000, "cycle_second_step_size": None, "cycle_first_stair_count": 0,
                 "cycle_second_stair_count": None, "decay_step_size": 0, "cycle_momentum": True,
                 "cycle_min_mom": 0.8, "cycle_max_mom": 0.9, "decay_mom_rate": 0.0, "last_batch_iteration": -1},
    "WarmupLR": {"warmup_min_lr": 0.0, "warmup_max_lr": OPTIMIZER_LR, "warmup_num_steps": 1000,
                 "warmup_type": "log", "last_batch_iteration": -1},
    "WarmupDecayLR": {"total_num_steps": REQUIRED, "warmup_min_lr": 0.0, "warmup_max_lr": 0.001,
                      "warmup_num_steps": 1000, "warmup_type": "log", "last_batch_iteration": -1},
    "WarmupCosineLR": {"total_num_steps": REQUIRED, "warmup_min_ratio": 0.0, "warmup_num_steps": 1000,
                       "cos_min_ratio": 0.0001, "warmup_type": "log", "last_batch_iteration": -1},
}

#: ``lr_schedules.py`` WARMUP_LOG_RATE / WARMUP_LINEAR_RATE: any other warmup_type logs a
#: warning and falls back to "log".
WARMUP_TYPES = ("log", "linear")

#: Classes of ``torch.optim.lr_scheduler`` (torch 2.13) the engine falls back to.
TORCH_SCHEDULERS = ("ChainedScheduler", "ConstantLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts",
                    "CyclicLR", "ExponentialLR", "LRScheduler", "LambdaLR", "LinearLR", "MultiStepLR",
                    "MultiplicativeLR", "OneCycleLR", "PolynomialLR", "ReduceLROnPlateau", "SequentialLR",
                    "StepLR")

#: Arguments the constructor requires to be an ``int`` > 0 (``isinstance(v, int) and v > 0``;
#: a JSON float such as 1e3 fails): WarmupLR/WarmupCosineLR ``__init__`` (WarmupDecayLR through
#: WarmupLR) since DeepSpeed 0.19.3, LRRangeTest ``__init__``.
POSITIVE_INT = {"WarmupLR": ("warmup_num_steps",), "WarmupDecayLR": ("warmup_num_steps",),
                "WarmupCosineLR": ("warmup_num_steps",), "LRRangeTest": ("lr_range_test_step_size",)}

#: Learning-rate arguments: a number, or one per param group (``_format_param``).
LR_ARGS = {"WarmupLR": ("warmup_min_lr", "warmup_max_lr"), "WarmupDecayLR": ("warmup_min_lr", "warmup_max_lr"),
           "OneCycle": ("cycle_min_lr", "cycle_max_lr"), "LRRangeTest": ("lr_range_test_min_lr",)}

#: Learning-rate arguments that go through ``_format_param`` (lr_schedules.py): a list must have
#: one value per optimizer param group, else ``ValueError: expected N value for min_lr, got M``.
PER_GROUP = {"WarmupLR": ("warmup_min_lr", "warmup_max_lr"), "WarmupDecayLR": ("warmup_min_lr", "warmup_max_lr")}

#: WarmupCosineLR's ratios of the optimizer's lr: plain numbers used in arithmetic
#: (``get_lr_ratio``: ``1. - self.warmup_min_ratio``; ``self.cos_min_ratio + ...``), meaningful in [0, 1].
RATIOS = {"WarmupCosineLR": ("warmup_min_ratio", "cos_min_ratio")}


@dataclass
class Problem:
    """One thing the constructor does with a param: ``key`` (None: the block), ``error``
    (True: it raises at ``deepspeed.initialize``; False: accepted, with a surprise), the
    exception text DeepSpeed gives, and a fix."""

    key: str | None
    error: bool
    message: str
    fix: str
    data: dict = field(default_factory=dict)


def _is_num(v: Any) -> bool:
    from advisor.config.validation import finite_number
    return finite_number(v)  # math.isfinite of a 400-digit int raises OverflowError


def _num_or_list(v: Any) -> bool:
    if isinstance(v, (list, tuple)):
        return bool(v) and all(_is_num(x) for x in v)
    return _is_num(v)


def _floatable(v: Any) -> float | None:
    """``float(v)`` as OneCycle calls it, or None when that raises."""
    if isinstance(v, (dict, list)) or v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None
    except OverflowError:  # an int past the float range (OneCycle's float() raises it too)
        return None


def check_params(stype: Any, params: Any, *, skip: frozenset[str] = frozenset(),
                 optimizer_lr: float | None = None, float_literals: frozenset[str] = frozenset(),
                 json_loaded: bool = False, positive_int_check: bool = True,
                 warmuplr_max_lr_from_optimizer: bool = True, param_groups: int | None = None) -> list[Problem]:
    """What ``cls(optimizer, **params)`` does for ``scheduler.type`` ``stype`` (DeepSpeed 0.19.8).

    ``skip``: param names not to judge (e.g. "auto" values the HF Trainer fills). ``optimizer_lr``:
    the optimizer's learning rate when known (WarmupDecayLR's default peak is 0.001 whatever it is).
    ``float_literals``: params written as a JSON float (``1e3``, ``100.0``) that the parser gave as an
    int. DeepSpeed reads a config *path* with hjson, which makes them ints (accepted); the HF Trainer
    and accelerate read the file with ``json.load`` (``HfDeepSpeedConfig``), which makes them floats
    (refused): ``json_loaded`` says which one happens.
    ``positive_int_check``: whether the release raises on a warmup_num_steps that is not a positive
    int (True from 0.19.3: :func:`advisor.config.versions.behaviour` ``"warmup-positive-int"``).
    ``warmuplr_max_lr_from_optimizer``: whether WarmupLR's missing ``warmup_max_lr`` is the
    optimizer's lr (True from 0.17.2, ``"warmuplr-max-lr-from-optimizer"``); before, its signature
    default is 0.001 (0.17.1 lr_schedules.py ``WarmupLR.__init__``), like WarmupDecayLR's.
    ``param_groups``: the optimizer's number of param groups when known (1 for a DeepSpeed
    ``optimizer`` block under the HF Trainer, which hands ``initialize`` a flat parameter list):
    a per-group list of another length raises in ``_format_param``; unknown, only an empty list
    and min/max lists of different lengths (never both right) are errors.
    Returns the problems, errors first; [] for torch schedulers (their arguments are torch's).
    """
    if not isinstance(stype, str):
        return []
    if stype not in SCHEDULERS:
        if stype in TORCH_SCHEDULERS or stype == "auto":
            return []
        near = [n for n in (*SCHEDULERS, *TORCH_SCHEDULERS) if n.lower() == stype.lower()]
        return [Problem("type", True, f"scheduler.type {stype!r} is neither a DeepSpeed scheduler nor a "
                        f"torch.optim.lr_scheduler class: initialize raises 'DeepSpeed does not recognize LR "
                        f"scheduler {stype}'",
                        f"use {near[0]!r} (names are case-sensitive)" if near else
                        f"use one of {', '.join(SCHEDULERS)}", data={"type": stype})]
    sig = SCHEDULERS[stype]
    if params is None:
        return [Problem(None, True, f"scheduler {stype} has no params: initialize calls {stype}(optimizer, **None) "
                        "and raises TypeError ('argument after ** must be a mapping')",
                        'add "params": {} (or the params you need)'
                        + (f"; {stype} requires {', '.join(k for k, v in sig.items() if v is REQUIRED)}"
                           if any(v is REQUIRED for v in sig.values()) else ""))]
    if not isinstance(params, dict):
        return []  # the schema reports the type (S003)
    out: list[Problem] = []
    for k in params:
        if k not in sig:
            near = [n for n in sig if n.replace("_", "") == k.replace("_", "").lower()]
            other = [n for n, s in SCHEDULERS.items() if k in s and n != stype]
            why = f" ({k} belongs to {', '.join(other)})" if other else ""
            out.append(Problem(k, True, f"{stype} has no argument {k!r}{why}: initialize raises TypeError "
                               f"('__init__() got an unexpected keyword argument {k!r}')",
                               f"rename it to {near[0]!r}" if near else
                               f"remove it; {stype} takes {', '.join(n for n in sig if n != 'last_batch_iteration')}",
                               data={"unknown": k}))
    missing = [k for k, d in sig.items() if d is REQUIRED and k not in params]
    if missing:
        n = len(missing)
        names = " and ".join(repr(k) for k in missing)
        out.append(Problem(None, True, f"{stype} requires {', '.join(missing)}: initialize raises TypeError "
                           f"('__init__() missing {n} required positional argument{'s' if n > 1 else ''}: {names}')",
                           "add " + ", ".join(f'"{k}"' for k in missing) + " to scheduler.params"
                           + (" (the number of optimizer steps in the run)" if "total_num_steps" in missing else ""),
                           data={"missing": missing}))
    present = {k: v for k, v in params.items() if k in sig and k not in skip}
    for k in POSITIVE_INT.get(stype, ()) if positive_int_check else ():
        if k in present:
            v = present[k]
            if not isinstance(v, int) or v <= 0:  # bool is an int in Python, as in DeepSpeed's check
                hint = (f"; {v!r} is a JSON float, write it as {int(v)}" if isinstance(v, float) and v.is_integer()
                        and v > 0 else "")
                out.append(Problem(k, True, f"{stype} {k} must be a positive integer, got {v!r}: initialize raises "
                                   f"'ValueError: {k} must be a positive integer, got {v}' (DeepSpeed 0.19.3 and "
                                   f"later){hint}",
                                   f"set {k} to an integer >= 1"
                                   + (" (1 means no warmup in effect)" if k == "warmup_num_steps" else "")
                                   + ", or remove the scheduler block", data={"value": v}))
    for k in POSITIVE_INT.get(stype, ()) if positive_int_check else ():
        v = present.get(k)
        if k in float_literals and isinstance(v, int) and v > 0:
            if json_loaded:
                out.append(Problem(k, True, f"{stype} {k} is written as a JSON float: the HF Trainer/accelerate read the "
                                   f"file with json.load, so DeepSpeed gets {float(v)!r} and raises 'ValueError: {k} "
                                   f"must be a positive integer, got {float(v)}' (DeepSpeed 0.19.3 and later)",
                                   f"write {k} as the integer {v}", data={"value": float(v)}))
            else:
                out.append(Problem(k, False, f"{stype} {k} is written as a JSON float: deepspeed.initialize(config=path) "
                                   f"reads it with hjson as the int {v} (accepted), but a config loaded with json.load "
                                   f"(the HF Trainer, accelerate, most scripts) gives {float(v)!r}, which raises "
                                   f"'{k} must be a positive integer'", f"write {k} as the integer {v}",
                                   data={"value": v}))
    if stype == "OneCycle":
        f1 = present.get("cycle_first_step_size", 2000)
        x = _floatable(f1)
        if "cycle_first_step_size" in present and (x is None or not x > 0):
            out.append(Problem("cycle_first_step_size", True, f"OneCycle cycle_first_step_size must be positive, got "
                               f"{f1!r}: initialize raises ValueError", "set cycle_first_step_size to a number > 0"))
        f2 = present.get("cycle_second_step_size")
        if f2 is not None:
            y = _floatable(f2)
            if y is None or y < 0:
                out.append(Problem("cycle_second_step_size", True, f"OneCycle cycle_second_step_size must be "
                                   f"non-negative, got {f2!r}: initialize raises ValueError",
                                   "set cycle_second_step_size to a number >= 0, or remove it (then it equals "
                                   "cycle_first_step_size)"))
        for k in ("decay_lr_rate", "decay_step_size", "decay_mom_rate"):
            if k in present and not _is_num(present[k]):
                out.append(Problem(k, True, f"OneCycle {k} must be a number, got {present[k]!r}: initialize calls "
                                   f"math.isclose({k}, 0) and raises TypeError", f"set {k} to a number"))
    for k in LR_ARGS.get(stype, ()):
        if k in present and not _num_or_list(present[k]):
            out.append(Problem(k, True, f"{stype} {k} must be a number (or one per param group), got "
                               f"{present[k]!r}: the scheduler computes learning rates from it and raises TypeError",
                               f"set {k} to a number"))
    lists = {k: present[k] for k in PER_GROUP.get(stype, ()) if isinstance(present.get(k), (list, tuple))}
    for k, v in lists.items():
        want = param_groups if param_groups is not None else (None if v else 1)
        if want is not None and len(v) != want:
            name = "min_lr" if k.endswith("min_lr") else "max_lr"
            out.append(Problem(k, True, f"{stype} {k} is a list of {len(v)}: DeepSpeed wants one value per optimizer "
                               f"param group ({want}{' under the HF Trainer with a DeepSpeed optimizer' if param_groups else ''})"
                               f" and raises 'ValueError: expected {want} value for {name}, got {len(v)}' "
                               "(lr_schedules.py _format_param)",
                               f"give {k} as a number (every group), or a list of {want}", data={"length": len(v)}))
    if len(lists) == 2 and len({len(v) for v in lists.values()}) == 2 and param_groups is None \
            and all(lists.values()):
        a, b = lists
        out.append(Problem(b, True, f"{stype} {a} has {len(lists[a])} values and {b} {len(lists[b])}: each must have "
                           "one per optimizer param group, so one of them makes _format_param raise 'ValueError: "
                           "expected N value for ...' (lr_schedules.py)", f"give {a} and {b} the same length",
                           data={"lengths": [len(lists[a]), len(lists[b])]}))
    for k in RATIOS.get(stype, ()):
        if k not in present:
            continue
        v = present[k]
        if not _is_num(v):
            out.append(Problem(k, True, f"{stype} {k} must be a number, got {v!r}: get_lr_ratio computes with it "
                               "(1. - warmup_min_ratio, cos_min_ratio + ...) and raises TypeError at the first step",
                               f"set {k} to a number in [0, 1]"))
        elif not 0 <= v <= 1:
            then = ({True: "the warmup starts at a negative learning rate (lr x ratio): the first steps go uphill",
                     False: "the warmup starts above the optimizer's lr and falls to it"}[v < 0]
                    if k == "warmup_min_ratio" else
                    {True: "get_lr_ratio clamps the cosine at max(0, ...): the learning rate reaches 0 before "
                           "total_num_steps and stays there",
                     False: "the \"decay\" ends above the optimizer's lr (lr x cos_min_ratio)"}[v < 0])
            out.append(Problem(k, False, f"{stype} {k} {v!r} is outside [0, 1] (a ratio of the optimizer's lr): "
                               f"DeepSpeed accepts it and {then}", f"set {k} to a ratio in [0, 1]",
                               data={"value": v}))
    wt = present.get("warmup_type")
    if "warmup_type" in sig and wt is not None and wt not in WARMUP_TYPES:
        out.append(Problem("warmup_type", False, f"{stype} warmup_type {wt!r} is not 'log' or 'linear': DeepSpeed "
                           "logs 'Using unknown warmup_type' and warms up with 'log'",
                           "set warmup_type to \"log\" or \"linear\""))
    if "total_num_steps" in sig:
        t = present.get("total_num_steps")
        w = present.get("warmup_num_steps", sig["warmup_num_steps"])
        if t is not None and not _is_num(t):
            out.append(Problem("total_num_steps", True, f"{stype} total_num_steps must be a number, got {t!r}: "
                               "initialize compares it with warmup_num_steps and raises TypeError",
                               "set total_num_steps to the number of optimizer steps"))
        elif _is_num(t) and isinstance(w, int) and w > 0 and t < max(2, w):
            dflt = "" if "warmup_num_steps" in present else " (the default)"
            then = "stays at cos_min_ratio" if stype == "WarmupCosineLR" else "drops to 0 right after warmup"
            out.append(Problem("total_num_steps", False, f"{stype} total_num_steps {t} is less than warmup_num_steps "
                               f"{w}{dflt}: DeepSpeed logs a warning; the run ends inside the warmup and the learning "
                               f"rate never reaches its peak, or {then}",
                               "set warmup_num_steps below total_num_steps", data={"total": t, "warmup": w}))
    fixed_peak = stype == "WarmupDecayLR" or (stype == "WarmupLR" and not warmuplr_max_lr_from_optimizer)
    if fixed_peak and "warmup_max_lr" not in params and "warmup_max_lr" not in skip:
        lr = f" (the optimizer's lr is {optimizer_lr:g})" if optimizer_lr is not None else ""
        when = "" if stype == "WarmupDecayLR" else " in DeepSpeed releases before 0.17.2 (from 0.17.2 on: to the optimizer's lr)"
        if optimizer_lr is None or not math.isclose(optimizer_lr, 0.001):
            out.append(Problem(None, False, f"{stype} without warmup_max_lr warms up to 0.001 whatever the "
                               f"optimizer's lr{lr}{when}: the schedule overwrites the optimizer's learning rate "
                               "every step",
                               'set "warmup_max_lr" to your peak learning rate (with the HF Trainer: "auto")',
                               data={"default": 0.001}))
    out.sort(key=lambda p: not p.error)
    return out
