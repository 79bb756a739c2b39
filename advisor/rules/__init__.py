"""Lint rule registry.

One rule per module in this package; the module's docstring is the rule's long explanation
(shown by ``ds-advisor explain CODE``). Each module defines a subclass of :class:`Rule` and
decorates it with :func:`register`. Rules read a :class:`LintContext` and yield Findings; they
never import torch or deepspeed.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterable

from advisor.findings import Finding, Severity

if TYPE_CHECKING:
    from advisor.config.effective import EffectiveConfig
    from advisor.model.inventory import Inventory
    from advisor.config.loading import LoadedConfig
    from advisor.config.versions import Release
    from advisor.cluster.hardware import Hardware
    from advisor.plan import Cluster, Plan


@dataclass
class LintCache:
    """What rules compute once per lint run and share (typed, so no rule reads another's guess).

    ``hf_findings``: the H findings of the HF Trainer / accelerate replay
    (:func:`advisor.config.hf.findings_for_context`). ``movements``: (key, per-rank movements per
    step, per-storage-tier endurance lines) for the T rules (:func:`advisor.rules._util.movements_and_endurance`),
    key = (id(hardware), step_time_s). ``scheduler_problems``: (scheduler section, problems) for
    the L rules."""

    hf_findings: "list[Finding] | None" = None
    movements: tuple[Any, list, list] | None = None
    scheduler_problems: tuple[Any, list] | None = None
    #: The config the HF Trainer hands DeepSpeed ("auto" filled), set by findings_for_context when
    #: the Trainer's arguments are known (given, or TrainingArguments' defaults under lint --hf).
    hf_config: "dict | None" = None


@dataclass
class LintContext:
    """Everything a rule may look at."""

    loaded: "LoadedConfig"
    effective: "EffectiveConfig"
    #: Total ranks (None when neither --world-size nor the launcher's environment gives it).
    world_size: int | None = None
    #: Where world_size came from ("--world-size", "WORLD_SIZE", ...), for messages.
    world_size_source: str | None = None
    #: Data-parallel world size (world_size / (tp x pp x sp)), None when unknown.
    dp_world_size: int | None = None
    inventory: "Inventory | None" = None
    #: True when the config is used through the HF Trainer / accelerate ("auto" is filled in).
    hf: bool = False
    #: The DeepSpeed release the job runs (advisor.config.versions.Release); None = 0.19.8.
    release: "Release | None" = None
    #: The HF Trainer arguments given (advisor.config.hf.TrainerArgs field names, plus optional
    #: ``hidden_size`` and ``world_size``); None when none were (``hf`` alone).
    trainer_args: "dict[str, Any] | None" = None
    #: The hardware spec (--hardware): storage tiers for the T rules. None when not given.
    hardware: "Hardware | None" = None
    #: Seconds per optimizer step (--step-time), for bytes written per day. None when unknown.
    step_time_s: float | None = None
    #: The parallel layout (tensor/pipeline/sequence/expert degrees) for the G rules; None = pure
    #: data parallelism over world_size.
    cluster: "Cluster | None" = None
    #: The command's plan (:func:`advisor.planning.build_plan`) when it has one (estimate, check,
    #: report): its HF resolution and derived facts (movements) are read, not computed again.
    plan: "Plan | None" = None
    #: The command's resolved workload (advisor.views.workload.ResolvedWorkload: values, their
    #: origins, the sidecar read and how it disagrees with the config) for rule W002; None in lint.
    workload: Any = None
    #: Where checkpoints are saved (``estimate --save-dir``) and the seconds between saves
    #: (``--save-interval``): when the save dir lies on a tier the NVMe swap writes to, the T
    #: rules count the saves' writes per day too (``rules/_util.movements_and_endurance``).
    save_dir: str | None = None
    save_interval_s: float | None = None
    cache: LintCache = field(default_factory=LintCache)

    @property
    def raw(self) -> dict:
        return self.loaded.data


class Rule:
    """Base class. Subclasses set ``code``, ``name``, ``severity`` and implement ``check``."""

    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[Severity] = "warning"
    #: Where some findings of the rule take another severity: when (``explain`` prints it beside ``severity``).
    severity_also: ClassVar[str | None] = None
    #: True when the rule needs a model inventory (run only with --model/--params).
    needs_model: ClassVar[bool] = False
    #: True when the rule judges by the ZeRO stage: not run when the stage itself is invalid
    #: (DeepSpeed refuses the config; the effective stage 0 would be a guess).
    reads_stage: ClassVar[bool] = False
    #: Set when another view produces the findings (schema validation, estimate, check) and the
    #: class only registers the code and its explanation for ``explain`` and SARIF.
    produced_by: ClassVar[str | None] = None
    #: True when an error finding of this rule means DeepSpeed (or the HF Trainer / accelerate in
    #: front of it) refuses the config before its first training step completes -- at config
    #: parsing, inside ``deepspeed.initialize``, or in the first forward/step -- or, for a value of
    #: the wrong type, that the effective value would be a guess. estimate, check, report and preflight then give no estimate or fit verdict, only
    #: the finding (:func:`refusals`); each such rule's docstring cites where DeepSpeed raises.
    refuses: ClassVar[bool] = False

    def check(self, ctx: LintContext) -> Iterable[Finding]:  # pragma: no cover - interface
        raise NotImplementedError

    def finding(self, ptr: str, message: str, fix: str = "", severity: Severity | None = None,
                sizes: dict | None = None, **data) -> Finding:
        """A finding of this rule (``severity`` defaults to the rule's); ``data``: its numbers;
        ``sizes``: bytes named by ``{name}`` placeholders in ``message``/``fix`` (:func:`emit`)."""
        return emit(self.code, severity or self.severity, ptr, message, fix, data=data, sizes=sizes)

    @classmethod
    def explanation(cls) -> str:
        import sys
        return (sys.modules[cls.__module__].__doc__ or cls.__doc__ or "").strip()


_REGISTRY: dict[str, type[Rule]] = {}
#: Non-empty once every rule module is imported (:func:`all_rules`).
_LOADED: list[bool] = []


def refusals(findings: Iterable[Finding]) -> list[Finding]:
    """The error findings among ``findings`` whose rule :attr:`Rule.refuses` (DeepSpeed would
    refuse the config before training starts): what estimate, check, report and preflight stop on."""
    def refuses(code: str) -> bool:
        r = all_rules().get(code)
        return bool(r is not None and r.refuses)
    return [f for f in findings if f.severity == "error" and refuses(f.code)]


def register(cls: type[Rule]) -> type[Rule]:
    if cls.code in _REGISTRY:
        raise RuntimeError(f"duplicate rule code {cls.code}")
    _REGISTRY[cls.code] = cls
    return cls


def emit(code: str, severity: Severity, pointer: str, message: str, fix: str = "", *,
         data: dict | None = None, sizes: dict | None = None) -> Finding:
    """The one way a finding is made, by every part of the advisor (rules, schema validation,
    HF resolution, estimate's fit, check's probes): a :class:`Finding` of a *registered* rule
    code, so ``ds-advisor explain CODE`` and SARIF's rule metadata exist for everything printed.

    ``sizes``: byte counts the text names, as ``{name}`` / ``{name:spec}`` placeholders in
    ``message`` and ``fix`` (:func:`advisor.findings.render_sized`; ``{{`` for a literal brace):
    the finding's ``message``/``fix`` are then rendered in the default units (GiB) for JSON and
    SARIF, and a text report renders them again in its ``--units`` (:meth:`Finding.text`); the
    bytes go into the JSON ``data`` under the same names.

    Raises KeyError when ``code`` has no rule module in this package (a programming error;
    tests/test_findings_registered.py finds every call site), or a placeholder has no size."""
    if code not in _loaded_registry():
        raise KeyError(f"finding code {code} is not a registered rule (add advisor/rules/{code}_*.py)")
    if sizes is not None:
        from advisor.findings import render_sized
        from advisor.units import DEFAULT_UNITS

        return Finding(code=code, severity=severity, pointer=pointer, message=render_sized(message, sizes, DEFAULT_UNITS),
                       fix=render_sized(fix, sizes, DEFAULT_UNITS), data=data or {}, sizes=dict(sizes),
                       template=(message, fix))
    return Finding(code=code, severity=severity, pointer=pointer, message=message, fix=fix, data=data or {})


def all_rules() -> dict[str, type[Rule]]:
    """Import every rule module once and return code -> rule class. (A rule module imported on
    its own, e.g. T003 by the checkpoint view, registers only itself: the registry is loaded
    whole on the first call here all the same.)"""
    if not _LOADED:
        for m in pkgutil.iter_modules(__path__):
            if not m.name.startswith("_"):  # helpers (_util, _bytes) load with the rules that use them
                importlib.import_module(f"{__name__}.{m.name}")
        _LOADED.append(True)
    return dict(sorted(_REGISTRY.items()))


def _loaded_registry() -> dict[str, type[Rule]]:
    """The registry itself, every rule module imported (callers must not change it): what
    :func:`all_rules` copies and sorts, for look-ups made once per finding or per entry."""
    if not _LOADED:
        all_rules()
    return _REGISTRY


#: (registry size, rule name lower-cased -> rule, the first in code order): rules are only ever
#: added (register refuses a duplicate code), so the size tells a stale index.
_BY_NAME: list[tuple[int, dict[str, type[Rule]]]] = []


def find_rule(code_or_name: str) -> type[Rule] | None:
    """The rule a user named, by code (``B001``, any case) or by name (``batch-triple``);
    None when neither matches. O(1): a suppression list of 200,000 entries called it per entry,
    and a copy of the registry and a scan of every name per call took ~6 s (issue 21)."""
    rules = _loaded_registry()
    key = code_or_name.strip()
    if key.upper() in rules:
        return rules[key.upper()]
    if not _BY_NAME or _BY_NAME[0][0] != len(rules):
        by: dict[str, type[Rule]] = {}
        for _, r in sorted(rules.items()):
            by.setdefault(r.name.lower(), r)
        _BY_NAME[:] = [(len(rules), by)]
    return _BY_NAME[0][1].get(key.lower())


def rule_codes(text: str, option: str = "--select") -> set[str]:
    """The codes of a comma-separated list of rule codes and names (``B001,auto-top-level``),
    as ``--select`` / ``--ignore`` and the settings file take them. Raises ValueError naming the
    option, the entries that are no rule, and the closest codes or names."""
    import difflib

    out, unknown = set(), []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        r = find_rule(item)
        if r is None:
            unknown.append(item)
        else:
            out.add(r.code)
    if unknown:
        rules = all_rules()
        # best match first (difflib's order), each once: a new rule name must not push the
        # closest one out of first place
        near = list(dict.fromkeys(m for u in unknown[:20] for m in difflib.get_close_matches(
            u.upper() if u[:1].isalpha() and u[1:].isdigit() else u.lower(),
            list(rules) + [r.name for r in rules.values()], n=2)))
        from advisor.errors import cut  # an argument can be megabytes: echo it cut
        raise ValueError(f"{option}: unknown rule code(s) or name(s) {cut(', '.join(unknown))}"
                         + (f"; did you mean {', '.join(near)}?" if near else "") + " (see `ds-advisor explain`)")
    return out
