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
finds it; deepspeed is never imported), else 0.19.8. The flag takes a complete final release
(``X.Y.Z``, an optional leading ``v`` and ``+local`` build suffix); an empty value, ``X.Y``, and
pre-releases (``0.19.8rc1``, ``0.19.8.dev0``) are refused. A release that is not in the table is
checked against the nearest checked release of the same minor *at or below* it, with a warning
(later patches of a minor add keys, so mapping upward would accept keys the release refuses);
when the minor has none at or below it, or the minor is outside the table, the flag is refused
(:class:`UnsupportedRelease`, exit 2). An *installed* release the table cannot speak for is not
an error (nobody gave the flag): the command falls back to the newest release in the table and
says so in one warning line.
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

from advisor.errors import AdvisorError

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
    {"id": "removed-features-refused", "since": "0.19.8", "file": "deepspeed/runtime/config.py",
     "marker": "def _reject_removed_config_keys",
     "what": "removed features (amp, curriculum_learning, elasticity, MiCS, LoCo, ...) raise DeepSpeedConfigError "
             "at startup (checked releases: absent in 0.19.3, present in 0.19.8)",
     "source": "deepspeed/runtime/config.py: _reject_removed_config_keys"},
)


class UnsupportedRelease(AdvisorError):
    """A --deepspeed-version the table cannot speak for (exit 2)."""


@dataclass(frozen=True)
class Release:
    """The release a command checks against. ``requested``: what the user gave (or the installed
    version); ``checked``: the table's release used for it; ``origin``: where it came from;
    ``warning``: one line for stderr when ``checked`` is not ``requested`` (None otherwise)."""

    requested: str
    checked: str
    origin: str
    warning: str | None = None

    @property
    def note(self) -> str:
        """One phrase for every output: which release the findings and figures are about, e.g.
        ``DeepSpeed 0.19.8 (installed)`` or ``DeepSpeed 0.19.3 (the table's nearest release at or
        below 0.19.5, from --deepspeed-version)``."""
        if self.requested == self.checked:
            return f"DeepSpeed {self.checked} ({self.origin})"
        if self.origin == "installed":
            return f"DeepSpeed {self.checked} (the table's newest release; the installed {self.requested} is not in it)"
        return f"DeepSpeed {self.checked} (the table's nearest release at or below {self.requested}, from {self.origin})"


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
    """``{"requested", "checked", "origin"}`` for JSON outputs (0.19.8 by default)."""
    r = release or Release(DEFAULT_RELEASE, DEFAULT_RELEASE, "default")
    return {"requested": r.requested, "checked": r.checked, "origin": r.origin}


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


_RELEASE = re.compile(r"v?(\d{1,3})\.(\d{1,3})\.(\d{1,3})(\+[A-Za-z0-9.]+)?")


def parse_release(text: str, what: str = "--deepspeed-version") -> str:
    """``X.Y.Z`` from a complete final release number (a leading ``v`` and a local build suffix
    such as ``+cu121`` are dropped: the same release's code). Raises :class:`UnsupportedRelease`
    naming ``what`` on an empty value, an incomplete one (``0.19``) or a pre-release
    (``0.19.8rc1``, ``0.19.8.dev0``: code from before that release, which the table does not have)."""
    t = str(text).strip()
    if not t:
        raise UnsupportedRelease(f"{what}: empty; give a release like {DEFAULT_RELEASE} (leave the flag out to use the "
                                 "installed deepspeed)")
    m = _RELEASE.fullmatch(t)
    if m:
        return f"{int(m[1])}.{int(m[2])}.{int(m[3])}"
    if re.fullmatch(r"v?\d{1,3}(\.\d{1,3})?", t):
        raise UnsupportedRelease(f"{what}: {t!r} is incomplete; give major.minor.patch, like {DEFAULT_RELEASE}")
    pre = re.fullmatch(r"v?(\d{1,3}\.\d{1,3}\.\d{1,3})[.\-]?(a|b|rc|alpha|beta|pre|dev|post)[.\-]?\d*", t, re.I)
    if pre:
        raise UnsupportedRelease(f"{what}: {t!r} is a pre-release or development build, which the table does not "
                                 f"have; give a final release ({pre[1]}, or the one before it)")
    raise UnsupportedRelease(f"{what}: {t!r} is not a release number like {DEFAULT_RELEASE}")


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


def _in_table(requested: str, origin: str) -> Release:
    """The table's release for ``requested`` (see the module docstring); raises UnsupportedRelease."""
    rels = table()["releases"]
    if requested in rels:
        return Release(requested, requested, origin)
    minor = _key(requested)[:2]
    same = [r for r in rels if _key(r)[:2] == minor]
    below = [r for r in same if _key(r) <= _key(requested)]
    if not below:
        near = [r for r in rels if _key(r) < _key(requested)][-1:] + [r for r in rels if _key(r) > _key(requested)][:1]
        where = (f"the nearest checked releases are {' and '.join(near)}" if same or near else "")
        if not same:
            raise UnsupportedRelease(f"{origin}: DeepSpeed {requested} is outside the releases this advisor knows "
                                     f"({rels[0]} to {rels[-1]}); give a release of one of their minors")
        raise UnsupportedRelease(f"{origin}: DeepSpeed {requested} is not in the table and no checked release of "
                                 f"{minor[0]}.{minor[1]} is at or below it ({where}; a later patch accepts keys "
                                 f"{requested} may refuse): give one of them with --deepspeed-version")
    return Release(requested, below[-1], origin,
                   warning=f"DeepSpeed {requested} is not in the table; checking against {below[-1]}, the nearest "
                           f"checked release at or below it (patches in between may differ)")


def target_release(flag: str | None = None) -> Release:
    """The release to check against (see the module docstring). ``flag``: the
    ``--deepspeed-version`` value (None: not given). Raises :class:`UnsupportedRelease` for a flag
    the table cannot speak for; never for the installed release."""
    if flag is not None:
        return _in_table(parse_release(flag), "--deepspeed-version")
    inst = installed_release()
    if not inst:
        return Release(DEFAULT_RELEASE, DEFAULT_RELEASE, "default")
    try:
        return _in_table(parse_release(inst, "installed deepspeed"), "installed")
    except UnsupportedRelease:
        newest = table()["releases"][-1]
        return Release(inst, newest, "installed",
                       warning=f"the installed deepspeed {inst} is not a release in the table ({table()['releases'][0]} "
                               f"to {newest}); checking against {newest}, the newest (--deepspeed-version chooses)")


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
        """e.g. ``"first in 0.10.3"`` / ``"last in 0.19.3"`` among the releases checked."""
        if not self.row:
            return ""
        r, first, last = self.release, self.row["first"], self.row["last"]
        if before(r, first):
            return f"it appears in {first}"
        if before(last, r):
            return f"the last release checked that has it is {last}"
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


def name_in(kind: str, name: str, release: str) -> bool | None:
    """Whether a scheduler (``kind="scheduler_types"``) or DeepSpeed-built optimizer
    (``"optimizer_types"``) name exists in ``release``; None when no checked release has it."""
    rows = table()["names"][kind]
    key = name if kind == "scheduler_types" else name.lower()
    if key not in rows:
        return None
    return release in rows[key]


def accounting_note(release: Release | None) -> str:
    """What an estimate may claim for ``release``: the byte accounting is 0.19.8's, proven against
    that engine on CPU (tests/engine); for any other release it is not verified."""
    if release is None or release.checked == DEFAULT_RELEASE:
        return (f"accounting: DeepSpeed {DEFAULT_RELEASE} (byte-exact against that engine on CPU in the parity tests; "
                "the accelerator/host split is not proven on CPU)")
    return (f"accounting: DeepSpeed {DEFAULT_RELEASE}'s, not verified for {release.checked}; {release.checked}'s "
            "offload pin_memory default is applied, its other defaults that differ (lint's V002) are not")


def release_lines() -> list[str]:
    """For text reports: one line naming the DeepSpeed release the command checked against
    (:func:`current_release`, else the default 0.19.8) and what the figures claim for it."""
    r = current_release()
    return [f"release: {release_note(r)}; {accounting_note(r)}"]


#: Defaults the ledger reads that a release may set differently from 0.19.8: (EffectiveConfig
#: ``zero`` attribute, field, JSON pointer of the key in the table). offload ``pin_memory``
#: decides pinned or pageable host memory (deepspeed/runtime/zero/offload_config.py: false up to
#: 0.19.3, true in 0.19.8).
LEDGER_DEFAULTS = (("offload_optimizer", "pin_memory", "/zero_optimization/offload_optimizer/pin_memory"),
                   ("offload_param", "pin_memory", "/zero_optimization/offload_param/pin_memory"))


def apply_release_defaults(ec: Any, raw: Any, release: "Release | None" = None) -> list[str]:
    """Set, in the EffectiveConfig ``ec`` (0.19.8's reading of ``raw``), the :data:`LEDGER_DEFAULTS`
    the config leaves unset to the target release's default (``release``, else
    :func:`current_release`), when that differs from 0.19.8's. Returns one phrase per default
    applied (e.g. ``"offload_optimizer.pin_memory false (0.19.8: true)"``), also added to
    ``ec.notes``; [] at 0.19.8."""
    from advisor.config.effective import Note

    r = release or current_release()
    if r is None or r.checked == DEFAULT_RELEASE:
        return []
    out = []
    for attr, key, path in LEDGER_DEFAULTS:
        sec = raw.get("zero_optimization") if isinstance(raw, dict) else None
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
    return out
