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
finds it; deepspeed is never imported), else 0.19.8. A release that is not in the table is checked against the checked
release of the same minor (the table has the last patch of each minor); a minor outside the
table is refused (:class:`UnsupportedRelease`).
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
    version); ``checked``: the table's release used for it; ``origin``: where it came from."""

    requested: str
    checked: str
    origin: str

    @property
    def note(self) -> str:
        """One line for every output: which release the findings and figures are about."""
        same = self.requested == self.checked
        return (f"DeepSpeed {self.requested} ({self.origin})" if same else
                f"DeepSpeed {self.requested} ({self.origin}), checked against {self.checked}, the table's release "
                f"of the same minor")


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


def table() -> dict[str, Any]:
    """The generated table (read once per process)."""
    if "t" not in _state:
        text = resources.files("advisor").joinpath("data", "deepspeed_versions.json").read_text(encoding="utf-8")
        _state["t"] = json.loads(text)
    return _state["t"]


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def parse_release(text: str) -> str:
    """``X.Y.Z`` (a leading ``v`` and a local/pre-release suffix such as ``+cu121`` are dropped).
    Raises :class:`UnsupportedRelease` on anything else."""
    m = re.fullmatch(r"v?(\d{1,3})\.(\d{1,3})(?:\.(\d{1,3}))?(?:[.+\-]?[A-Za-z0-9.+\-]*)?", str(text).strip())
    if not m:
        raise UnsupportedRelease(f"--deepspeed-version: {text!r} is not a release number like 0.19.8")
    return f"{int(m[1])}.{int(m[2])}.{int(m[3] or 0)}"


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


def target_release(flag: str | None = None) -> Release:
    """The release to check against (see the module docstring). Raises :class:`UnsupportedRelease`."""
    if flag:
        requested, origin = parse_release(flag), "--deepspeed-version"
    else:
        inst = installed_release()
        if inst:
            try:
                requested, origin = parse_release(inst), "installed"
            except UnsupportedRelease:
                requested, origin = DEFAULT_RELEASE, "default"
        else:
            requested, origin = DEFAULT_RELEASE, "default"
    rels = table()["releases"]
    if requested in rels:
        return Release(requested, requested, origin)
    minor = _key(requested)[:2]
    same = [r for r in rels if _key(r)[:2] == minor]
    if not same:
        raise UnsupportedRelease(f"--deepspeed-version: DeepSpeed {requested} is outside the releases this advisor knows "
                                 f"({rels[0]} to {rels[-1]}); give a release of one of their minors")
    below = [r for r in same if _key(r) <= _key(requested)]
    return Release(requested, below[-1] if below else same[0], origin)


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
    return (f"accounting: DeepSpeed {DEFAULT_RELEASE}'s, not verified for {release.checked} (the job's release: "
            f"{release.note}); where {release.checked}'s defaults differ (lint's V002), the job places state "
            "differently from these figures")


def release_lines() -> list[str]:
    """For text reports: one line naming the DeepSpeed release the command checked against and
    what the figures claim for it, when that release is not 0.19.8 (at 0.19.8 the reports'
    "DeepSpeed 0.19.8" says it); [] otherwise."""
    r = current_release()
    if r is None or r.checked == DEFAULT_RELEASE:
        return []
    return [f"release: {r.note}; {accounting_note(r)}"]
