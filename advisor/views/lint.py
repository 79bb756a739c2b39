"""Lint: schema validation plus the rule registry, over one loaded config.

``lint_config`` is the library entry point the CLI (and check, generate's self-test) call.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from advisor.config.effective import effective_config
from advisor.errors import AdvisorError
from advisor.findings import Finding, sort_findings, split_pointer
from advisor.model.inventory import Inventory
from advisor.config.loading import LoadedConfig
from advisor.rules import LintContext, all_rules
from advisor.config.schema import validate_config
from advisor.config.suppress import apply_suppressions
from advisor.config.versions import (DEFAULT_RELEASE, Release, apply_release_defaults, behaviour, bounds_in,
                                     current_release, key_status, name_in, name_row)

if TYPE_CHECKING:
    from advisor.cluster.hardware import Hardware
    from advisor.plan import Cluster, Plan


def _defined_in_release(f: Finding, release: str) -> bool:
    """True for a 0.19.8 schema finding that does not hold in ``release``: an unknown or removed
    key that release defines, or a removed feature that release does not refuse yet."""
    if release == DEFAULT_RELEASE or f.code not in ("S001", "S005"):
        return False
    if f.code == "S005":  # refused only where that release's removed-keys list has it
        parts = f.pointer.strip("/").split("/")
        kind = {1: "removed_top_level_keys"}.get(len(parts)) or (
            "removed_zero_keys" if len(parts) == 2 and parts[0] == "zero_optimization" else None)
        if not behaviour("removed-features-refused", release):
            return True
        if kind and name_row(kind, parts[-1]) is not None:
            return not name_in(kind, parts[-1], release)
    return key_status(f.pointer, release).state == "present"


def _at(data: Any, ptr: str) -> tuple[bool, Any]:
    """(found, value) of the JSON pointer ``ptr`` in ``data``."""
    cur = data
    for part in split_pointer(ptr):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return False, None
    return True, cur


def _bounds_hold(value: Any, bounds: dict[str, Any]) -> bool:
    """True when the number ``value`` meets pydantic ``Field`` bounds ``{"ge"|"gt"|"le"|"lt": n}``."""
    ops = {"ge": lambda a, b: a >= b, "gt": lambda a, b: a > b, "le": lambda a, b: a <= b, "lt": lambda a, b: a < b}
    return all(ops[k](value, b) for k, b in bounds.items() if k in ops)


def _value_in_release(f: Finding, release: str, data: Any) -> "Finding | None":
    """A 0.19.8 value finding (S003 wrong type, S004 out of range) judged by ``release``'s own model
    (the table, from each release's sdist): None where that release accepts the value, else ``f``.

    * a key ``release`` does not define: None (V001 reports the key itself);
    * S004 on a number under a bound of 0.19.8's ``Field`` that ``release``'s bounds accept: None
      (``reduce_bucket_size`` 0: ``gt=0`` from 0.19.6, ``ge=0`` before; runtime/zero/config.py
      DeepSpeedZeroConfig);
    * S003 on a non-integral float for an ``int`` field at a pydantic-v1 release (0.9.0-0.14.5,
      :data:`advisor.config.versions.BEHAVIOUR` ``pydantic-v2``): pydantic v1's int validator is
      ``int(v)``, which truncates, so the release accepts it: a warning saying what it reads."""
    if release == DEFAULT_RELEASE or f.code not in ("S003", "S004") or f.severity != "error":
        return f
    st = key_status(f.pointer, release)
    if st.state == "absent":
        return None
    if st.state != "present" or st.row is None:
        return f
    found, value = _at(data, f.pointer)
    if not found or isinstance(value, bool) or not isinstance(value, (int, float)):
        return f
    if f.code == "S004":
        mine = bounds_in(f.pointer, release)
        if mine is not None and mine != bounds_in(f.pointer, DEFAULT_RELEASE) and _bounds_hold(value, mine):
            return None
        return f
    if (st.row.get("type") == "int" and isinstance(value, float) and math.isfinite(value)
            and not value.is_integer() and not behaviour("pydantic-v2", release)):
        key = f.pointer.rsplit("/", 1)[-1]
        mine = bounds_in(f.pointer, release) or {}
        if not _bounds_hold(int(value), mine):
            return f
        return replace(f, severity="warning",
                       message=f"{f.pointer.strip('/').replace('/', '.')} is {value!r}, not an integer: DeepSpeed "
                               f"{release}'s config models use pydantic's v1 API, whose int validator truncates "
                               f"(int({value!r}) = {int(value)}), so it accepts it and uses {int(value)} (0.15.0 and "
                               "later refuse it)",
                       fix=f"write {int(value)} (or the integer you mean) for {key}")
    return f


def _name_release(f: Finding, release: str) -> Finding:
    """A 0.19.8 schema finding kept at ``release`` (one that also holds there: the filters above
    dropped the others, V005 took the sections ``release`` does not validate) says so of
    ``release``: "DeepSpeed 0.19.8 rejects it" becomes "DeepSpeed 0.19.7 rejects it"."""
    if release == DEFAULT_RELEASE or not f.code.startswith("S") or f"DeepSpeed {DEFAULT_RELEASE}" not in f.message:
        return f
    return replace(f, message=f.message.replace(f"DeepSpeed {DEFAULT_RELEASE}", f"DeepSpeed {release}"))


def lint_config(loaded: LoadedConfig, *, world_size: int | None = None, world_size_source: str | None = None,
                dp_world_size: int | None = None, inventory: Inventory | None = None, hf: bool = False,
                select: set[str] | None = None, trainer_args: dict | None = None,
                hardware: "Hardware | None" = None, step_time_s: float | None = None,
                cluster: "Cluster | None" = None, release: "Release | None" = None,
                plan: "Plan | None" = None, keep_refusals: bool = False,
                workload: Any = None, save_dir: str | None = None,
                save_interval_s: float | None = None) -> list[Finding]:
    """All findings for one config, located (line/column) and sorted.

    ``world_size``: total ranks, when known; ``dp_world_size`` defaults to it, divided by the
    config's ``sequence_parallel_size`` when that divides it (DeepSpeed's batch check without an mpu).
    ``inventory``: the model, enabling rules that need one. ``hf``: the config goes through
    the HF Trainer/accelerate, which fills in "auto". ``select``: only these rule codes.
    ``trainer_args``: the HF Trainer arguments (advisor.config.hf.TrainerArgs fields, plus optional
    hidden_size), enabling the Trainer's own checks (its "mismatch" error and friends).
    ``hardware`` (advisor.cluster.hardware.Hardware) and ``step_time_s`` (seconds per optimizer
    step): the storage tiers and step time the T rules need. ``cluster``: the parallel layout
    the G rules check (advisor.plan.Cluster). ``release``: the DeepSpeed release the job runs
    (:func:`advisor.config.versions.target_release`); None means 0.19.8. The schema is 0.19.8's:
    for another release, its unknown-key (S001) and removed-key (S005) findings on keys that
    release defines are dropped, its verdicts on sections that release does not validate become
    V005 warnings, and the V rules say what that release refuses instead.
    ``plan``: the command's :class:`advisor.plan.Plan` when it has one (estimate, check,
    report): its effective config (as written), HF resolution, model (``plan.inventory`` in place of
    ``inventory``: the HF Trainer's param groups) and derived facts (movements) are used instead of
    being computed again.
    The config's top-level ``"ds_advisor": {"ignore": [...]}`` drops the findings of the rules it
    names (:mod:`advisor.config.suppress`; a malformed entry is an S007 finding).
    ``workload``: the command's :class:`advisor.views.workload.ResolvedWorkload` (estimate, check,
    report): rule W002 compares the sidecar it read with the config.
    ``save_dir`` / ``save_interval_s`` (estimate's ``--save-dir`` / ``--save-interval``, seconds):
    checkpoint saves on the NVMe swap's tier count in T001/T002's writes per day, as in
    estimate's endurance line.
    ``keep_refusals``: for the commands that gate on :func:`advisor.rules.refusals` (estimate,
    check, report, preflight, measure): a suppressed finding whose rule refuses is kept, its
    message saying it was suppressed -- suppression hides a finding, it does not make DeepSpeed
    accept the config (e.g. B001: runtime/config.py ``_batch_assertion`` asserts regardless).
    """
    release = release if release is not None else current_release()
    if plan is not None:
        effective = plan.as_written  # planning applied the release's readings already
        if inventory is not None:
            # the plan's model: under --hf without an optimizer block the Trainer's two param groups
            # (planning.build_plan), by which ZeRO-3 makes its sub-groups (M002, O008, O009 size them)
            inventory = plan.inventory
    else:
        effective = effective_config(loaded.data)
        if release is not None:
            apply_release_defaults(effective, loaded.data, release)  # e.g. bf16 "auto" on before 0.17.1
    if dp_world_size is None and world_size is not None:
        # without an mpu DeepSpeed checks the batch over world / sequence_parallel_size ranks
        # (runtime/config.py DeepSpeedConfig.__init__ :468-469, the HF/Ulysses case)
        from advisor.config.effective import config_sequence_parallel
        usp = config_sequence_parallel(loaded.data)
        dp_world_size = world_size // usp if usp > 1 and world_size % usp == 0 else world_size
    ctx = LintContext(loaded=loaded, effective=effective, world_size=world_size,
                      world_size_source=world_size_source,
                      dp_world_size=dp_world_size,
                      inventory=inventory, hf=hf, release=release,
                      trainer_args=dict(trainer_args) if hf and trainer_args is not None else None,
                      hardware=hardware, step_time_s=step_time_s, cluster=cluster, plan=plan, workload=workload,
                      save_dir=save_dir, save_interval_s=save_interval_s)
    schema = validate_config(loaded, hf=hf)
    findings: list[Finding] = list(schema)
    if release is not None:
        downgrade = all_rules()["V005"]().downgrade
        findings = [_name_release(downgrade(f, release.checked), release.checked) for f in
                    (_value_in_release(f, release.checked, loaded.data) for f in findings
                     if not _defined_in_release(f, release.checked)) if f is not None]
    findings = [f for f in findings if select is None or f.code in select]
    # An invalid zero_optimization.stage ("three", 4) is refused by DeepSpeed (S004): the rules
    # that judge by the stage would judge the stage-0 stand-in, so they do not run.
    bad_stage = any(f.pointer == "/zero_optimization/stage" and f.severity == "error" for f in schema)
    for code, rule_cls in all_rules().items():
        if select is not None and code not in select:
            continue
        if rule_cls.needs_model and inventory is None:
            continue
        if bad_stage and rule_cls.reads_stage:
            continue
        findings.extend(rule_cls().check(ctx))
    # The config's own "ds_advisor": {"ignore": [...]} (advisor.config.suppress), after the flags'
    # selection: its S007 findings about the section obey --select/--ignore like any other.
    kept = _suppressed_refusals(findings, loaded.data) if keep_refusals else []
    findings = [f for f in apply_suppressions(findings, loaded.data) + kept if select is None or f.code in select]
    # One finding per (code, pointer). A generic unknown-key finding (S001/S002) gives way to a
    # rule that says more about the same key (e.g. D001 naming a deprecated key's replacement).
    specific = {f.pointer for f in findings if not f.code.startswith("S")}
    seen: set[tuple[str, str]] = set()
    out: list[Finding] = []
    for f in findings:
        k = (f.code, f.pointer)
        if k in seen or (f.code in ("S001", "S002") and f.pointer in specific):
            continue
        seen.add(k)
        out.append(f)
    return sort_findings(f.located(loaded.positions, loaded.source, loaded.data, loaded.overrides)
                         for f in fold_array_findings(out))


def _suppressed_refusals(findings: list[Finding], raw) -> list[Finding]:
    """The findings among ``findings`` that the config's ``ds_advisor.ignore`` suppresses but
    whose rule refuses (:func:`advisor.rules.refusals`: DeepSpeed refuses the config whatever
    the advisor reports), each saying it was suppressed; ``data["suppressed"]`` is True."""
    from advisor.config.suppress import SUPPRESS_KEY, config_suppressions
    from advisor.rules import refusals
    sup = config_suppressions(raw)[0]
    return [replace(f, message=f"{f.message} (suppressed by {SUPPRESS_KEY}.ignore, but DeepSpeed refuses "
                               "the config regardless)",
                    data={**(f.data or {}), "suppressed": True})
            for f in refusals(findings) if sup.hides(f)]


#: Findings of one rule about elements of one array, kept one by one; the rest are folded.
MAX_PER_ARRAY = 5
_ELEMENT = re.compile(r"^(?P<parent>.*)/(?P<index>\d+)(?P<rest>(/.*)?)$")


def fold_array_findings(findings: list[Finding], keep: int = MAX_PER_ARRAY) -> list[Finding]:
    """At most ``keep`` findings per (rule, array, path inside the element): a large array with
    the same problem in every element gives ``keep`` findings and one more saying how many
    elements were left out (pointing at the array), not one finding per element."""
    groups: dict[tuple[str, str, str], list[Finding]] = {}
    out: list[Finding] = []
    for f in findings:
        m = _ELEMENT.match(f.pointer)
        if m is None:
            out.append(f)
            continue
        groups.setdefault((f.code, m.group("parent"), m.group("rest")), []).append(f)
    for (code, parent, rest), fs in groups.items():
        # a schema finding about a representative of equal elements stands for data["elements"]
        total = sum((f.data or {}).get("elements", 1) for f in fs)
        out.extend(replace(f, data={k: v for k, v in f.data.items() if k != "elements"})
                   if "elements" in (f.data or {}) else f for f in fs[:keep])
        shown = min(len(fs), keep)
        if total > shown:
            first = fs[0]
            which = (f"the first {shown} are listed" if total == len(fs) else
                     f"{shown} are listed, each the first element of its value")
            out.append(replace(first, pointer=parent, line=None, column=None,
                               message=f"{total - shown} more element(s) of {parent or '/'} have the same problem "
                                       f"(at .../{'N' + rest}); {which}",
                               data={"folded": total - shown}))
    return out


def lint_path(path: str, **kwargs) -> tuple[str, list[Finding], str | None]:
    """Load and lint one input of a batch: (source, findings, error).

    ``error`` is the one-line load error (the file is unreadable: no findings). An exception
    inside a rule does not end the batch: it becomes an X001 error finding for this file
    (:func:`lint_guarded`). ``kwargs`` go to :func:`lint_config`."""
    from advisor.config.loading import load_config
    from advisor.errors import AdvisorError

    try:
        loaded = load_config(path)
    except AdvisorError as e:
        return path, [], str(e)
    return loaded.source, lint_guarded(loaded, **kwargs), None


def lint_guarded(loaded: LoadedConfig, **kwargs) -> list[Finding]:
    """:func:`lint_config` for one file of a batch: an exception inside a rule becomes one X001
    error finding for this file instead of ending the batch (with DS_ADVISOR_DEBUG set it is
    raised instead)."""
    try:
        return lint_config(loaded, **kwargs)
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - one bad file must not lose the batch
        if os.environ.get("DS_ADVISOR_DEBUG"):
            raise
        return [internal_error(e).located(loaded.positions, loaded.source)]


def internal_error(e: BaseException) -> Finding:
    """The X001 finding for an exception raised while reading or linting one file of a batch."""
    from advisor.config.validation import shown
    from advisor.rules import emit

    msg = f"internal error while linting this file: {type(e).__name__}: {shown(str(e))[1:-1]}"
    return emit("X001", "error", "", msg, "report this file to ds-advisor (DS_ADVISOR_DEBUG=1 shows the traceback)")


#: H findings that hold whatever the Trainer's arguments are (reported without them).
_ARGLESS_H = ("H002", "H004", "H006", "H010")


#: Rules run on the DeepSpeed config accelerate builds and hands DeepSpeed (what its launch does
#: with that config, whatever the Trainer's arguments): O003 NVMe without a path (accelerate's
#: "none" placeholder), H008 ZeRO-3 save without the 16-bit gather. The other DeepSpeed rules
#: judge what a user wrote, which for an accelerate file are accelerate's own fields.
ON_BUILT_CONFIG = ("O003", "H008")

#: Where a finding about the built config points in the accelerate file (its deepspeed_config
#: field that produced the key), for a config built from the YAML's fields.
_BUILT_FIELD = {"/zero_optimization/offload_optimizer": "offload_optimizer_device",
                "/zero_optimization/offload_param": "offload_param_device",
                "/zero_optimization/stage3_gather_16bit_weights_on_model_save": "zero3_save_16bit_model",
                "/zero_optimization/stage": "zero_stage"}


def built_config_findings(inp, inventory: Inventory | None = None,
                          trainer_args: dict | None = None) -> list[Finding]:
    """The :data:`ON_BUILT_CONFIG` rules' findings on the config accelerate builds for ``inp``
    (an accelerate :class:`advisor.config.inputs.ConfigInput`). Built from a
    ``deepspeed_config_file``, they point into that file (its own pointers); built from the
    YAML's fields, at the ``deepspeed_config`` field that set the key. With ``trainer_args``
    naming a ``resume_from_checkpoint`` and a config built from fields, H009 also runs on the
    built config at the launch's world size (a named file gets H009 from its own lint,
    :func:`lint_named_config`)."""
    import dataclasses

    res = inp.resolution
    built = LoadedConfig(source=inp.loaded.source, data=res.config, positions={}, text="")
    codes = set(ON_BUILT_CONFIG)
    if (trainer_args or {}).get("resume_from_checkpoint") and not inp.launch.deepspeed_config_file:
        codes.add("H009")
    found = lint_config(built, hf=True, select=codes, inventory=inventory, world_size=res.world_size,
                        trainer_args=trainer_args if "H009" in codes else None)
    if inp.launch.deepspeed_config_file:
        return found
    fields = set(inp.launch.plugin.ds_fields)
    out = []
    for f in found:
        ptr = next((("/deepspeed_config/" + fld) for pre, fld in _BUILT_FIELD.items()
                    if f.pointer.startswith(pre) and fld in fields), f.pointer)
        if f.code == "H008" and "zero3_save_16bit_model" in fields:
            ptr = "/deepspeed_config/zero3_save_16bit_model"
        if f.code == "H009" and not f.pointer and inp.launch.num_processes is not None:
            ptr = "/num_processes"  # the world size the checkpoint's rank count is compared with
        # the fix names the accelerate field, not the DeepSpeed key accelerate writes from it
        swaps = [('set "stage3_gather_16bit_weights_on_model_save": true', "set deepspeed_config.zero3_save_16bit_model: "
                  "true")] + [(f'add "nvme_path": "/local_nvme" (a local NVMe mount) to zero_optimization.{b}',
                               f"set deepspeed_config.{b}_nvme_path: /local_nvme (a local NVMe mount)")
                              for b in ("offload_optimizer", "offload_param")]
        fix, tpl = f.fix, f.template
        for a, b in swaps:
            fix = fix.replace(a, b)
            tpl = (tpl[0], tpl[1].replace(a, b)) if tpl is not None else None
        out.append(dataclasses.replace(f, pointer=ptr, fix=fix, template=tpl, file=None, line=None, column=None))
    return out


def lint_accelerate(inp, *, trainer_args_given: bool, select: set[str] | None = None,
                    world_size: int | None = None, inventory: Inventory | None = None,
                    trainer_args: dict | None = None) -> list[Finding]:
    """Findings for an accelerate config file (``advisor.config.inputs.ConfigInput`` with a
    launch): what ``accelerate launch`` and the DeepSpeed plugin say about it (H004 launch errors,
    H006 assumptions, H010 keys accelerate refuses, H002 "auto" nobody fills; with Trainer arguments every H finding of the
    Trainer's replay). The file's own keys are accelerate's, so no DeepSpeed schema rule runs on
    it; the DeepSpeed config accelerate builds from its fields is accelerate's work. A
    ``deepspeed_config_file`` it names is linted on its own (the caller lints it with hf=True).
    ``trainer_args``: the Trainer arguments given (their ``resume_from_checkpoint`` enables H009
    on the built config)."""
    res = inp.resolution
    found = [f for f in res.findings if trainer_args_given or f.code in _ARGLESS_H
             or f.data.get("kind") == "no-zero-section"]
    found += built_config_findings(inp, inventory, trainer_args)
    seen: set[tuple[str, str, str]] = set()
    out = []
    for f in found:
        if (select is None or f.code in select) and (f.code, f.pointer, f.message) not in seen:
            seen.add((f.code, f.pointer, f.message))
            out.append(f.located(inp.file_positions, inp.loaded.source) if inp.file_positions else f)
    return sort_findings(out)


def drop_named_duplicates(accelerate_findings: list[Finding], named_findings: list[Finding]) -> list[Finding]:
    """An accelerate file's findings less those its ``deepspeed_config_file``'s own lint also
    reports (same code, pointer and message: H001, H008 ... about the DeepSpeed config that file
    holds), so each is reported once, on the named file, where it has a line."""
    there = {(f.code, f.pointer, f.message) for f in named_findings}
    return [f for f in accelerate_findings if (f.code, f.pointer, f.message) not in there]


def lint_named_config(inp, *, trainer_args: dict | None, inventory: Inventory | None = None,
                      world_size: int | None = None, world_size_source: str | None = None,
                      release: "Release | None" = None) -> list[Finding]:
    """The lint of the ``deepspeed_config_file`` an accelerate file names, as the Trainer reads it
    (``hf=True``; ``trainer_args`` as for any --hf lint), at the launch's world size unless
    ``world_size`` is given; [] when the file names none. Raises AdvisorError when it cannot be
    read (:func:`advisor.config.hf.accelerate_base_config` already refused a missing one)."""
    from advisor.config.loading import load_config

    name = inp.launch.deepspeed_config_file if inp.launch is not None else None
    if not name or not os.path.isfile(name):
        return []
    if world_size is None and inp.launch.world_size:
        world_size, world_size_source = inp.launch.world_size, inp.launch.world_size_source
    return lint_guarded(load_config(name), world_size=world_size, world_size_source=world_size_source,
                        inventory=inventory, hf=True, trainer_args=trainer_args, release=release)


@dataclass
class LintOptions:
    """What applies to one linted file: the flags, else its settings file
    (:mod:`advisor.config.settings`), else the defaults."""

    #: Rule codes to run (None: all).
    codes: set[str] | None
    inventory: Any
    world_size: int | None
    world_size_source: str | None
    fail_on: str
    #: The settings file used, or None.
    settings: str | None = None


def lint_options(path: str, *, select: set[str] | None, ignore: set[str] | None, model: str | None,
                 params: int | None, world_size: int | None, env_world: tuple[int | None, str | None],
                 fail_on: str | None, inventories: dict | None = None) -> LintOptions:
    """Resolve the options of one file: each flag given (``select``/``ignore`` codes, ``model`` /
    ``params``, ``world_size``, ``fail_on``; None = not given) beats the environment's world size
    (``env_world``: (ranks, source)) which beats the settings file found by walking up from
    ``path`` (the working directory for stdin), which beats the defaults.
    ``inventories`` caches resolved models between files. Raises AdvisorError (exit 2) for a bad
    settings file or model."""
    import os

    from advisor.config.settings import load_settings
    from advisor.rules import all_rules

    s = load_settings(os.getcwd() if path == "-" else path)
    # Like ruff's rule selection: --select replaces the file's select; --ignore adds to the file's
    # ignore; a rule --select names explicitly is run even when the file ignores it (flags win).
    sel = select if select is not None else (s.select if s else None)
    ign = set(s.ignore if s else set()) - set(select or ()) | set(ignore or ())
    codes = sel
    if ign:
        codes = (set(all_rules()) if sel is None else set(sel)) - set(ign)
    if model is None and params is None and s is not None:
        model, params = s.model, s.params
    cache = inventories if inventories is not None else {}
    key = (model, params)
    if key not in cache:
        if params is not None:
            from advisor.model.inventory import from_param_count
            cache[key] = from_param_count(params)
        elif model:
            from advisor.model.specs import resolve_model
            try:
                cache[key] = resolve_model(model, flag=None if s is not None and model == s.model else "--model")
            except AdvisorError as e:
                if s is not None and model == s.model:  # the settings file's value: name the file
                    raise AdvisorError(f"{s.source}: model: {e}") from None
                raise
        else:
            cache[key] = None
    ws, src = (world_size, "--world-size") if world_size is not None else env_world
    if ws is None and s is not None and s.world_size is not None:
        ws, src = s.world_size, f"world-size in {s.source}"
    return LintOptions(codes=codes, inventory=cache[key], world_size=ws, world_size_source=src,
                       fail_on=fail_on or (s.fail_on if s and s.fail_on else "error"),
                       settings=s.source if s else None)
