"""Which DeepSpeed release a job runs, and what that release accepts and defaults to.

The accounting and most rules are written for DeepSpeed 0.19.8 (:data:`advisor.DEEPSPEED_VERSION`);
this module says where other releases differ. Its facts come from one table,
``advisor/data/deepspeed_versions.json``, generated from each release's own sdist by
:mod:`advisor.config._versiongen` (keys, aliases and defaults of the pydantic config sections,
scheduler and optimizer names), plus :data:`BEHAVIOUR`, changes in code paths that a key table
cannot show, each with the source text that marks it (the drift test finds that text in the
release named and not in the checked release before it).

Release selection (:func:`target_release`): ``--deepspeed-version X.Y.Z`` if given, else the
installed deepspeed's version read from its distribution metadata (as ``importlib.metadata``
finds it; deepspeed is never imported), else 0.19.8. Versions are read per PEP 440
(``packaging.version``). The table holds every final release from 0.9.0 to 0.19.8 but 0.11.0
(whose sdist pip cannot fetch: ``_versiongen.UNREADABLE``, checked as 0.11.1 with a warning and
the mapping in every output), so a release of that span is checked against its own facts. A post-release (``.post1``)
or local build (``+cu121``) of a release is checked against that release, and every output's
release phrase says so. The flag refuses (:class:`UnsupportedRelease`, exit 2) an empty value,
an incomplete one (``0.19``), pre-releases and dev builds (``0.19.8rc1``, ``0.19.8.dev0``: code
from before that release), a number that is no DeepSpeed release (``0.10.4``) and releases
outside the table. An *installed* version the table does not hold is not an error (nobody gave
the flag): the command checks against the nearest table release (the newest at or below it;
the oldest for one older than the table) and says so in one warning line and in every output.
"""

from __future__ import annotations

import json
import os
import re
import sys
from contextvars import ContextVar
from dataclasses import dataclass
from importlib import resources
from typing import Any

from advisor.errors import AdvisorError, cut

from advisor import DEEPSPEED_VERSION as DEFAULT_RELEASE  # noqa: E402  (the one constant)

#: Code-path changes between releases, each with the source that shows it. ``marker`` is text
#: that the file ``file`` contains from release ``since`` on (and not in the checked release
#: before it); tests/test_versions.py checks that against the sdists.
BEHAVIOUR: tuple[dict[str, str], ...] = (
    {"id": "warmup-positive-int", "since": "0.19.3", "file": "deepspeed/runtime/lr_schedules.py",
     "marker": "warmup_num_steps must be a positive integer",
     "what": "WarmupLR and WarmupCosineLR raise ValueError unless warmup_num_steps is a positive int "
             "(0 and JSON floats such as 1e3 are refused at startup)",
     "source": "deepspeed/runtime/lr_schedules.py: WarmupLR.__init__, WarmupCosineLR.__init__"},
    {"id": "warmuplr-max-lr-from-optimizer", "since": "0.17.2", "file": "deepspeed/runtime/lr_schedules.py",
     "marker": "warmup_max_lr = [group['lr'] for group in self.optimizer.param_groups][0]",
     "what": "WarmupLR's warmup_max_lr defaults to the optimizer's lr (before 0.17.2: 0.001)",
     "source": "deepspeed/runtime/lr_schedules.py: WarmupLR.__init__"},
    {"id": "precision-sections-validated", "since": "0.17.1", "file": "deepspeed/runtime/config.py",
     "marker": "from .precision_config import get_bfloat16_config, get_float16_config",
     "what": "fp16 and bf16 are DeepSpeedConfigModel sections, whose __init__ drops a value equal to \"auto\" "
             "(the field default applies: enabled false). Before 0.17.1 get_fp16_enabled/get_bfloat16_enabled "
             "return get_scalar_param(param_dict[...], 'enabled', False), the string \"auto\" itself, which is "
             "truthy: the precision is ON (both \"auto\": the 'cannot be simultaneously enabled' assertion)",
     "source": "deepspeed/runtime/config.py: get_fp16_enabled, get_bfloat16_enabled (0.9.0-0.17.0); "
               "deepspeed/runtime/precision_config.py + config_utils.py DeepSpeedConfigModel.__init__ (0.17.1 on)"},
    {"id": "pydantic-v2", "since": "0.15.0", "file": "deepspeed/runtime/config_utils.py",
     "marker": "from pydantic import BaseModel, ConfigDict",
     "what": "the config models use pydantic's v2 API (lax int: a float with a fractional part is refused); "
             "0.9.0-0.14.5 use the v1 API (pydantic 1 itself, deepspeed.pydantic_v1 from 0.11.2), whose int validator is int(v): "
             "1.5 is truncated to 1 and accepted",
     "source": "deepspeed/runtime/config_utils.py: DeepSpeedConfigModel (its BaseModel import)"},
    {"id": "removed-features-refused", "since": "0.19.7", "file": "deepspeed/runtime/config.py",
     "marker": "def _reject_removed_config_keys",
     "what": "removed features (amp, curriculum_learning, elasticity, MiCS, LoCo, ...) raise DeepSpeedConfigError "
             "at startup (from 0.19.7; absent in 0.19.6)",
     "source": "deepspeed/runtime/config.py: _reject_removed_config_keys"},
)


class UnsupportedRelease(AdvisorError):
    """A --deepspeed-version the table cannot speak for (exit 2)."""


@dataclass(frozen=True)
class Release:
    """The release a command checks against. ``requested``: what the user gave (or the installed
    version), as PEP 440 normalises it; ``checked``: the table's release used for it; ``origin``:
    where it came from (``--deepspeed-version``, ``installed``, ``default``); ``mapping``: why
    ``checked`` is not ``requested`` (None when they are the same); ``warning``: one line for
    stderr when the mapping is a different release's code (None otherwise)."""

    requested: str
    checked: str
    origin: str
    warning: str | None = None
    mapping: str | None = None

    @property
    def note(self) -> str:
        """One phrase for every output: which release the findings and figures are about, e.g.
        ``DeepSpeed 0.19.8 (installed)``, ``DeepSpeed 0.19.8 (0.19.8+cu121 is a local build of
        0.19.8; from --deepspeed-version)``."""
        if self.requested == self.checked or not self.mapping:
            return f"DeepSpeed {self.checked} ({self.origin})"
        return f"DeepSpeed {self.checked} ({self.mapping}; {self.origin})"


_state: dict[str, Any] = {}

#: The release the running command checks against (set once by the CLI's --deepspeed-version
#: handling; None = 0.19.8). Views read it through :func:`current_release`.
_CURRENT: ContextVar["Release | None"] = ContextVar("ds_advisor_release", default=None)


def use_release(release: "Release | None") -> None:
    """Make ``release`` the one every view of this command checks against."""
    _CURRENT.set(release)


def current_release() -> "Release | None":
    """The release set by :func:`use_release` (None: 0.19.8)."""
    return _CURRENT.get()


def release_dict(release: "Release | None") -> dict[str, str]:
    """``{"requested", "checked", "origin"}`` for JSON outputs (0.19.8 by default), plus
    ``"mapping"`` (why ``checked`` is not ``requested``) when they differ."""
    r = release or Release(DEFAULT_RELEASE, DEFAULT_RELEASE, "default")
    return {"requested": r.requested, "checked": r.checked, "origin": r.origin,
            **({"mapping": r.mapping} if r.mapping and r.requested != r.checked else {})}


def release_note(release: "Release | None" = None) -> str:
    """:attr:`Release.note` of ``release``, else of the command's (:func:`current_release`), else
    of the default 0.19.8."""
    r = release or current_release() or Release(DEFAULT_RELEASE, DEFAULT_RELEASE, "default")
    return r.note


def table() -> dict[str, Any]:
    """The generated table (read once per process)."""
    if "t" not in _state:
        text = resources.files("advisor").joinpath("data", "deepspeed_versions.json").read_text(encoding="utf-8")
        _state["t"] = json.loads(text)
    return _state["t"]


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


@dataclass(frozen=True)
class ParsedVersion:
    """A version string read per PEP 440: ``base`` ``X.Y.Z`` (the final release it belongs to),
    ``text`` (normalised, e.g. ``0.19.8+cu121``), ``pre`` (a pre-release or dev build: code from
    before ``base``), ``post`` / ``local`` (the post-release number, the local label, or None)."""

    base: str
    text: str
    pre: bool = False
    post: int | None = None
    local: str | None = None

    @property
    def mapping(self) -> str | None:
        """Why this version is checked as ``base`` (None for a plain final release)."""
        if self.pre:
            return None
        what = (f"a post-release of {self.base}" if self.post is not None else "") + \
               (" and " if self.post is not None and self.local else "") + \
               (f"a local build of {self.base}" if self.local else "")
        return f"{self.text} is {what}, checked as {self.base}" if what else None


def parse_version(text: str, what: str = "--deepspeed-version") -> ParsedVersion:
    """``text`` read as a PEP 440 version (``packaging.version.Version``; a leading ``v`` is
    allowed). Raises :class:`UnsupportedRelease` naming ``what`` for an empty value, an invalid
    one, one without exactly three release numbers (``0.19``; DeepSpeed numbers every release
    major.minor.patch) or with an epoch."""
    from packaging.version import InvalidVersion, Version

    t = str(text).strip()
    if not t:
        raise UnsupportedRelease(f"{what}: empty; give a release like {DEFAULT_RELEASE} (leave the flag out to use the "
                                 "installed deepspeed)")
    try:
        v = Version(t)
    except InvalidVersion:
        raise UnsupportedRelease(f"{what}: {cut(repr(t))} is not a release number like {DEFAULT_RELEASE}") from None
    if len(v.release) < 3:
        raise UnsupportedRelease(f"{what}: {cut(repr(t))} is incomplete; give major.minor.patch, like {DEFAULT_RELEASE}")
    # PEP 440 pads a release with zeros (0.19.8.0 == 0.19.8), so trailing zero components name the
    # same release; any other fourth number is not a DeepSpeed release
    release = v.release[:3] if all(x == 0 for x in v.release[3:]) else v.release
    if len(release) > 3 or v.epoch:
        raise UnsupportedRelease(f"{what}: {cut(repr(t))} is not a DeepSpeed release number (major.minor.patch, like "
                                 f"{DEFAULT_RELEASE})")
    base = ".".join(str(x) for x in release)
    return ParsedVersion(base, str(v), pre=v.is_prerelease, post=v.post, local=v.local)


def parse_release(text: str, what: str = "--deepspeed-version") -> str:
    """``X.Y.Z`` of a final release, or of a post-release or local build of one (see
    :func:`parse_version`). Raises :class:`UnsupportedRelease` as :func:`parse_version` does, and
    for a pre-release or dev build (``0.19.8rc1``, ``0.19.8.dev0``: code from before that release,
    which the table does not have)."""
    p = parse_version(text, what)
    if p.pre:
        raise UnsupportedRelease(f"{what}: {cut(repr(str(text).strip()))} is a pre-release or development build, which the "
                                 f"table does not have; give a final release ({p.base}, or the one before it)")
    return p.base


_DIST_INFO = re.compile(r"deepspeed(?:-[^-]+)?\.(?:dist|egg)-info", re.IGNORECASE)


def installed_release() -> str | None:
    """The installed deepspeed's version from its distribution metadata (deepspeed is not
    imported): the first ``deepspeed-*.dist-info`` (or ``.egg-info``) on ``sys.path``, its
    ``METADATA`` (``PKG-INFO``) ``Version:`` field, found in the order ``importlib.metadata``
    searches (checked against it in tests/test_versions.py). Read directly because importing
    ``importlib.metadata`` costs about a tenth of lint's start-up. None when not installed or
    unreadable."""
    try:
        for entry in sys.path:
            try:
                names = sorted(os.listdir(entry or "."))
            except OSError:
                continue
            for name in names:
                if not _DIST_INFO.fullmatch(name):
                    continue
                path = os.path.join(entry or ".", name)
                meta = path if os.path.isfile(path) else next(
                    (os.path.join(path, m) for m in ("METADATA", "PKG-INFO") if os.path.isfile(os.path.join(path, m))),
                    None)
                if meta is None:
                    continue
                with open(meta, encoding="utf-8", errors="replace") as fh:
                    for line in fh:
                        if line.startswith("Version:"):
                            return line.split(":", 1)[1].strip() or None
                        if not line.strip():
                            break  # end of the headers
    except Exception:  # metadata unreadable: treat as not installed
        return None
    return None


def _in_table(p: ParsedVersion, origin: str) -> Release:
    """The table's release for ``p`` (its base release), or :class:`UnsupportedRelease` naming why
    there is none: outside the table, or not a DeepSpeed release (the minor's releases listed)."""
    rels = table()["releases"]
    if p.base in rels:
        return Release(p.text, p.base, origin, mapping=p.mapping)
    gap = table().get("unreadable", {}).get(p.base)
    if gap:  # a release the table has no facts of: said, never silent
        why = f"DeepSpeed {p.base}: {gap['why']}; checking against {gap['checked']}, the nearest release it has"
        return Release(p.text, gap["checked"], origin, warning=why + " (its keys may differ)",
                       mapping=f"{p.base} is not in the table; nearest: {gap['checked']}")
    if before(p.base, rels[0]) or before(rels[-1], p.base):
        raise UnsupportedRelease(f"{origin}: DeepSpeed {p.text} is outside the releases this advisor knows "
                                 f"({rels[0]} to {rels[-1]}, every release between them)")
    same = [r for r in rels if _key(r)[:2] == _key(p.base)[:2]]
    have = f"{same[0]} to {same[-1]}" if same else "no release"
    raise UnsupportedRelease(f"{origin}: {p.text} is not a DeepSpeed release ({'.'.join(p.base.split('.')[:2])} "
                             f"has {have}); give the release the job runs")


def _installed_fallback(inst: str) -> Release:
    """The table release for an installed version the table does not hold: the newest at or below
    it (strictly below for a pre-release or dev build), else the oldest; with a warning."""
    rels = table()["releases"]
    try:
        p = parse_version(inst, "installed deepspeed")
    except UnsupportedRelease:
        p = None
    if p is None:
        use, why = rels[-1], f"the installed deepspeed version {inst!r} is not a PEP 440 release number"
    else:
        below = [r for r in rels if (before(r, p.base) if p.pre else not before(p.base, r))]
        use = below[-1] if below else rels[0]
        kind = ("a pre-release or development build" if p.pre else
                "older than every release in the table" if not below else
                "newer than every release in the table" if before(rels[-1], p.base) else "not a DeepSpeed release")
        why = f"the installed deepspeed {p.text} is {kind} ({rels[0]} to {rels[-1]})"
    return Release(inst if p is None else p.text, use, "installed",
                   warning=f"{why}; checking against {use}, the nearest release the table has "
                           f"(--deepspeed-version chooses another)",
                   mapping=f"the installed {inst if p is None else p.text} is not in the table; nearest: {use}")


def target_release(flag: str | None = None) -> Release:
    """The release to check against (see the module docstring). ``flag``: the
    ``--deepspeed-version`` value (None: not given). Raises :class:`UnsupportedRelease` for a flag
    the table cannot speak for; never for the installed release (a warning instead)."""
    if flag is not None:
        p = parse_version(flag)
        if p.pre:
            parse_release(flag)  # raises the pre-release message
        return _in_table(p, "--deepspeed-version")
    inst = installed_release()
    if not inst:
        return Release(DEFAULT_RELEASE, DEFAULT_RELEASE, "default")
    try:
        p = parse_version(inst, "installed deepspeed")
        if not p.pre:
            return _in_table(p, "installed")
    except UnsupportedRelease:
        pass
    return _installed_fallback(inst)


def before(a: str, b: str) -> bool:
    """True when release ``a`` is older than ``b``."""
    return _key(a) < _key(b)


def behaviour(bid: str, release: str) -> bool:
    """True when the code-path change ``bid`` (an id in :data:`BEHAVIOUR`) holds in ``release``."""
    for b in BEHAVIOUR:
        if b["id"] == bid:
            return not before(release, b["since"])
    raise KeyError(bid)


@dataclass(frozen=True)
class KeyStatus:
    """How one config key stands in a release: ``state`` is ``"absent"`` (the release's pydantic
    section does not define it, so it is refused), ``"present"``, or ``"unchecked"`` (the section is
    not a pydantic model in that release, or the key is in no release checked)."""

    state: str
    row: dict[str, Any] | None = None
    release: str = DEFAULT_RELEASE

    def history(self) -> str:
        """e.g. ``"it appears in 0.10.0"`` / ``"0.19.6 is the last release that has it"`` /
        ``"it is absent in 0.16.4"`` (the table holds every release, so these are exact)."""
        if not self.row:
            return ""
        r, first, last = self.release, self.row["first"], self.row["last"]
        if before(r, first):
            return f"it appears in {first}"
        if before(last, r):
            return f"{last} is the last release that has it"
        return "it is absent in " + ", ".join(self.row.get("absent_in", [])) if self.row.get("absent_in") else ""


def _present(row: dict[str, Any], release: str) -> bool:
    return (not before(release, row["first"]) and not before(row["last"], release)
            and release not in row.get("absent_in", []))


def section_is_strict(section: str, release: str) -> bool:
    """True when ``/section`` is a pydantic model (unknown keys refused) in ``release``."""
    row = table()["keys"].get("/" + section)
    return bool(row) and _present(row, release)


def key_status(path: str, release: str) -> KeyStatus:
    """Status of the JSON pointer ``path`` (e.g. ``/zero_optimization/zero_hpz_partition_size``)
    in ``release`` (a release of the table)."""
    keys = table()["keys"]
    parts = path.strip("/").split("/")
    root = next((r for r in sorted(table()["roots"], key=len, reverse=True)
                 if parts[:len(r.split("/"))] == r.split("/")), None)
    if root is None or not section_is_strict(root, release) or len(parts) <= len(root.split("/")):
        return KeyStatus("unchecked", release=release)
    row = keys.get(path)
    if row is None:
        return KeyStatus("unchecked", release=release)
    return KeyStatus("present" if _present(row, release) else "absent", row, release)


def default_in(path: str, release: str) -> Any:
    """The default of ``path`` in ``release`` (the last change at or before it), or None."""
    row = table()["keys"].get(path)
    if not row or not _present(row, release):
        return None
    d = None
    for rel, val in row.get("defaults", []):
        if not before(release, rel):
            d = val
    return d


def bounds_in(path: str, release: str) -> "dict[str, Any] | None":
    """The pydantic ``Field`` bounds (``{"ge"|"gt"|"le"|"lt": n}``, {} for none) of ``path`` in
    ``release`` (the last change at or before it), or None when the table records no bounds for
    the key or the release does not have it. From each release's config model source
    (``_versiongen``), e.g. ``reduce_bucket_size``: ``ge=0`` up to 0.19.5, ``gt=0`` from 0.19.6."""
    row = table()["keys"].get(path)
    if not row or "bounds" not in row or not _present(row, release):
        return None
    b: dict[str, Any] = {}
    for rel, val in row["bounds"]:
        if not before(release, rel):
            b = val
    return b


def name_row(kind: str, name: str) -> dict[str, Any] | None:
    """The table's ``{first, last, absent_in?}`` for a scheduler (``kind="scheduler_types"``),
    DeepSpeed-built optimizer (``"optimizer_types"``) or ZeRO-refused optimizer
    (``"zero_refused_optimizers"``) name; None when no release has it."""
    return table()["names"][kind].get(name if kind == "scheduler_types" else name.lower())


def name_in(kind: str, name: str, release: str) -> bool | None:
    """Whether a scheduler (``kind="scheduler_types"``) or DeepSpeed-built optimizer
    (``"optimizer_types"``) name exists in ``release``; None when no release checked has it."""
    row = name_row(kind, name)
    return None if row is None else _present(row, release)


def is_verified(release: "Release | None") -> bool:
    """True when ``release`` is the accounting's own release, 0.19.8 (a post-release or local build of
    it counts): the one the parity tests prove byte for byte. False for every other release, and
    for an installed release the table does not hold that falls back to 0.19.8's facts (0.20.x)."""
    if release is None:
        return True
    if release.checked != DEFAULT_RELEASE:
        return False
    try:
        return parse_version(release.requested).base == DEFAULT_RELEASE
    except UnsupportedRelease:
        return False


def accounting_note(release: Release | None) -> str:
    """What an estimate may claim for ``release``: the byte accounting is 0.19.8's, proven against
    that engine on CPU (tests/engine); for any other release it is not verified, and a release
    outside the table (an installed 0.20.x checked against 0.19.8) is said to be outside it."""
    if is_verified(release):
        return (f"accounting: DeepSpeed {DEFAULT_RELEASE} (byte-exact against that engine on CPU in the parity tests; "
                "the accelerator/host split is not proven on CPU)")
    assert release is not None
    if release.checked == DEFAULT_RELEASE:  # a fallback: the installed release is not in the table
        rels = table()["releases"]
        return (f"accounting: DeepSpeed {DEFAULT_RELEASE}'s, not verified for {release.requested}, which is outside "
                f"the releases checked ({rels[0]} to {rels[-1]}); the figures and findings fall back to "
                f"{DEFAULT_RELEASE}'s code paths and defaults")
    return (f"accounting: DeepSpeed {DEFAULT_RELEASE}'s, not verified for {release.checked}; {release.checked}'s "
            "offload pin_memory and gradient_clipping defaults and its reading of fp16/bf16 \"enabled\": \"auto\" "
            "are applied, its other defaults that differ (lint's V002) are not")


def release_lines() -> list[str]:
    """For text reports: one line naming the DeepSpeed release the command checked against
    (:func:`current_release`, else the default 0.19.8) and what the figures claim for it."""
    r = current_release()
    return [f"release: {release_note(r)}; {accounting_note(r)}"]


#: Defaults the ledger reads that a release may set differently from 0.19.8: (EffectiveConfig
#: ``zero`` attribute, field, JSON pointer of the key in the table). offload ``pin_memory``
#: decides pinned or pageable host memory (deepspeed/runtime/zero/offload_config.py: false up to
#: 0.19.4, true from 0.19.5).
LEDGER_DEFAULTS = (("offload_optimizer", "pin_memory", "/zero_optimization/offload_optimizer/pin_memory"),
                   ("offload_param", "pin_memory", "/zero_optimization/offload_param/pin_memory"))

#: Top-level defaults read from a plain dict that the effective config holds and a release may set
#: differently (EffectiveConfig attribute, table path): gradient_clipping is 0.0 (no clipping) up to
#: 0.19.2 and 1.0 from 0.19.3 (deepspeed/runtime/config.py get_gradient_clipping, default
#: runtime/constants.py GRADIENT_CLIPPING_DEFAULT; the table's /gradient_clipping row).
TOP_DEFAULTS = (("gradient_clipping", "/gradient_clipping"),)


def precision_auto_is_on(release: str) -> bool:
    """True when ``release`` reads ``fp16``/``bf16`` ``"enabled": "auto"`` as the truthy string
    (precision ON): before 0.17.1 (:data:`BEHAVIOUR` ``precision-sections-validated``)."""
    return not behaviour("precision-sections-validated", release)


def apply_release_defaults(ec: Any, raw: Any, release: "Release | None" = None) -> list[str]:
    """Set, in the EffectiveConfig ``ec`` (0.19.8's reading of ``raw``), what the target release
    (``release``, else :func:`current_release`) reads differently, when it differs from 0.19.8:
    the :data:`LEDGER_DEFAULTS` and :data:`TOP_DEFAULTS` the config leaves unset, and, before
    0.17.1, ``fp16``/``bf16`` ``"enabled": "auto"`` as ON (:func:`precision_auto_is_on`). Returns
    one phrase per change (e.g. ``"offload_optimizer.pin_memory false (0.19.8: true)"``), also added
    to ``ec.notes``; [] at 0.19.8."""
    from advisor.config.effective import Note, bf16_section_key

    r = release or current_release()
    if r is None or r.checked == DEFAULT_RELEASE or not isinstance(raw, dict):
        return []
    out = []
    for attr, key, path in LEDGER_DEFAULTS:
        sec = raw.get("zero_optimization")
        sec = sec.get(attr) if isinstance(sec, dict) else None
        if not isinstance(sec, dict) or key in sec:
            continue  # not written as a section (its device is "none"), or the key is set
        old, new = default_in(path, r.checked), default_in(path, DEFAULT_RELEASE)
        if not isinstance(old, bool) or old == new:
            continue
        setattr(getattr(ec.zero, attr), key, old)
        phrase = f"{attr}.{key} {str(old).lower()} (0.19.8: {str(new).lower()})"
        ec.notes.append(Note(path, f"DeepSpeed {r.checked}'s default {attr}.{key}={str(old).lower()} applied "
                                   f"(0.19.8's is {str(new).lower()})", "derived"))
        out.append(phrase)
    for attr, path in TOP_DEFAULTS:
        key = path.strip("/")
        old, new = default_in(path, r.checked), default_in(path, DEFAULT_RELEASE)
        if key in raw or not isinstance(old, (int, float)) or old == new:
            continue
        setattr(ec, attr, float(old))
        ec.notes.append(Note(path, f"DeepSpeed {r.checked}'s default {key}={old} applied (0.19.8's is {new})",
                             "derived"))
        out.append(f"{key} {old} (0.19.8: {new})")
    if precision_auto_is_on(r.checked):
        for sec, attr in (("fp16", "fp16_enabled"), (bf16_section_key(raw), "bf16_enabled")):
            body = raw.get(sec) if sec else None
            if not isinstance(body, dict) or body.get("enabled") != "auto" or getattr(ec, attr):
                continue
            setattr(ec, attr, True)
            ec.notes[:] = [n for n in ec.notes if n.pointer != f"/{sec}/enabled"]
            ec.notes.append(Note(f"/{sec}/enabled", f'DeepSpeed {r.checked} reads {sec} as a plain dict: "auto" is '
                                                    f"the truthy string, so {sec} is ON (0.19.8: dropped, off)",
                                 "derived"))
            out.append(f'{sec}.enabled "auto" on (0.19.8: off)')
    return out
