"""Project settings for ``ds-advisor lint``: a ``[tool.ds-advisor]`` table in ``pyproject.toml``
or a ``.ds-advisor.toml`` file, found by walking up from the linted file like ruff does.

The closest directory holding either file wins (``.ds-advisor.toml`` before ``pyproject.toml``
in the same directory; a ``pyproject.toml`` without the table is passed over). Keys::

    [tool.ds-advisor]          # or the top level of .ds-advisor.toml
    select = ["B001", "auto-top-level"]   # rule codes or names (a comma-separated string too)
    ignore = ["S001"]
    world-size = 8             # ranks, for the batch-size check
    model = "llama-3-8b"       # preset, HF config.json (relative to the settings file) or inventory JSON
    params = 8030261248        # instead of model
    fail-on = "warning"

Flags override every key (``--select``, ``--ignore``, ``--world-size``, ``--model``/``--params``,
``--fail-on``); the environment's WORLD_SIZE / SLURM_NTASKS beats the file's world-size (the
launcher's shape is the job's). Read with :mod:`tomllib` (standard library from Python 3.11).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.config.validation import MAX_PARAMS, MAX_WORLD_SIZE, shown
from advisor.errors import AdvisorError, cut

SETTINGS_FILE = ".ds-advisor.toml"
#: A settings file (or a pyproject.toml holding the table) larger than this is refused; both are
#: a few KiB in practice.
MAX_SETTINGS_BYTES = 1024 * 1024
KEYS = ("select", "ignore", "world-size", "model", "params", "fail-on")


class SettingsError(AdvisorError):
    """A settings file that cannot be read or has a bad key or value (exit 2)."""


@dataclass
class Settings:
    """The settings that apply to one linted file; ``source`` is the file they come from."""

    source: str
    select: set[str] | None = None
    ignore: set[str] = field(default_factory=set)
    world_size: int | None = None
    model: str | None = None
    params: int | None = None
    fail_on: str | None = None


def _table(path: Path) -> dict[str, Any] | None:
    """The ds-advisor table of ``path`` (None when a pyproject.toml has none)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: the same parser as the tomli package
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            raise SettingsError(f"{path}: reading it needs Python 3.11 (tomllib) or the tomli package") from None

    from advisor.config.readers import MAX_DEPTH, decode_text, depth_ok, error_as, read_bytes

    err = error_as(SettingsError)
    # the one guarded reader: a regular file only (a FIFO or device is refused, never skipped or
    # blocked on), at most MAX_SETTINGS_BYTES, nesting bounded before tomllib recurses into it
    raw = read_bytes(str(path), limit=MAX_SETTINGS_BYTES, what="settings file", error=err, stdin_ok=False)
    text = decode_text(raw, str(path), what="settings file (TOML)", error=err)
    if not depth_ok(text):
        raise err(str(path), f"nesting deeper than {MAX_DEPTH} levels; not a settings file", None, None)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{path}: not valid TOML: {e}")
    except RecursionError:
        raise SettingsError(f"{path}: nesting too deep to parse")
    except ValueError as e:  # tomllib's int() of a literal past Python's digit limit (issue 21)
        from advisor.config.readers import long_number_at
        from advisor.errors import int_limit_problem
        too_long = int_limit_problem(e)
        if not too_long:
            raise
        line, col = long_number_at(text)
        raise err(str(path), too_long, line, col) from None
    if path.name == "pyproject.toml":
        tool = data.get("tool")
        t = tool.get("ds-advisor") if isinstance(tool, dict) else None
        if t is None:
            return None
        if not isinstance(t, dict):
            raise SettingsError(f"{path}: [tool.ds-advisor] must be a table")
        return t
    return data


def find_settings_file(start: str | os.PathLike) -> tuple[Path, dict[str, Any]] | None:
    """(file, table) of the closest settings above ``start`` (a file or a directory), or None."""
    p = Path(os.path.abspath(start))
    try:
        d = p if p.is_dir() else p.parent
    except OSError:  # not a usable path (a name too long: a base64 config given inline)
        d = p.parent
    for folder in (d, *d.parents):
        for name in (SETTINGS_FILE, "pyproject.toml"):
            f = folder / name
            # anything at the name is read through the guarded reader: a FIFO, device or directory
            # there is an error naming it, not settings silently lost (lexists is False for an
            # unreadable folder on the way up: no settings there)
            if os.path.lexists(f):
                t = _table(f)
                if t is not None:
                    return f, t
    return None


def _codes(value: Any, where: str) -> set[str]:
    from advisor.rules import rule_codes

    if isinstance(value, str):
        text = value
    elif isinstance(value, list) and all(isinstance(x, str) for x in value):
        text = ",".join(value)
    else:
        raise SettingsError(f"{where}: a list of rule codes or names, e.g. [\"B001\", \"auto-top-level\"]")
    try:
        return rule_codes(text, where)
    except ValueError as e:
        raise SettingsError(str(e))


def load_settings(start: str | os.PathLike) -> Settings | None:
    """The settings for a file at ``start`` (walking up), or None when there is no settings file.

    Raises SettingsError naming the file and key for an unknown key or a bad value."""
    found = find_settings_file(start)
    if found is None:
        return None
    path, t = found
    unknown = sorted(set(t) - set(KEYS))
    if unknown:
        import difflib
        # every echo of the file's text is cut (errors.cut / validation.shown): a key or value may be
        # any length (issue 21, fuzz round c: a 500-character fail-on was echoed whole)
        hints = [f"{cut(k)} (did you mean {m[0]}?)" if (m := difflib.get_close_matches(k.replace("_", "-"), KEYS, n=1))
                 else cut(k) for k in unknown[:10]] + ([f"and {len(unknown) - 10} more"] if len(unknown) > 10 else [])
        raise SettingsError(f"{path}: unknown key(s) {', '.join(hints)} (known: {', '.join(KEYS)})")
    s = Settings(source=str(path))
    if "select" in t:
        s.select = _codes(t["select"], f"{path}: select")
    if "ignore" in t:
        s.ignore = _codes(t["ignore"], f"{path}: ignore")
    for key, attr in (("world-size", "world_size"), ("params", "params")):
        if key in t:
            v = t[key]
            hi = MAX_WORLD_SIZE if key == "world-size" else MAX_PARAMS
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
                raise SettingsError(f"{path}: {key} must be an integer from 1 to {hi:,}, not {shown(v)}")
            setattr(s, attr, v)
    if "model" in t:
        if not isinstance(t["model"], str) or not t["model"]:
            raise SettingsError(f"{path}: model must be a preset name or a path")
        m = t["model"]
        rel = path.parent / m
        # os.path.exists, not Path.exists: the latter raises for a name past NAME_MAX (a 300-character
        # model value ended in a traceback, issue 21 fuzz round c); no file can have such a name
        s.model = str(rel) if not os.path.isabs(m) and os.path.exists(rel) else m  # relative to the file
    if s.model and s.params:
        raise SettingsError(f"{path}: give model or params, not both")
    if "fail-on" in t:
        if t["fail-on"] not in ("error", "warning", "info", "never"):
            raise SettingsError(f"{path}: fail-on must be error, warning, info or never, not {shown(t['fail-on'])}")
        s.fail_on = t["fail-on"]
    return s
