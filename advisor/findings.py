"""Findings: what lint (and estimate, check) report about a config.

A finding names a rule ``code``, a ``severity`` (``error``, ``warning`` or ``info``), a JSON
pointer into the config (RFC 6901), the line and column where the file has one, a one-line
``message`` and a ``fix``. The JSON shape (``Finding.to_dict``) is the contract that
``../shared/cases/*/expect.json`` and ``--format json`` consumers rely on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Literal, Mapping

Severity = Literal["error", "warning", "info"]

#: Severity order, lowest first; ``--fail-on`` compares against it.
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "error": 2}


def escape_token(token: str) -> str:
    """Escape one reference token for a JSON pointer (RFC 6901 section 3)."""
    return token.replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str | int) -> str:
    """Build a JSON pointer from path tokens: ``pointer("zero_optimization", "stage")``
    -> ``"/zero_optimization/stage"``; ``pointer()`` -> ``""`` (the whole document)."""
    return "".join("/" + escape_token(str(t)) for t in tokens)


def split_pointer(ptr: str) -> list[str]:
    """Inverse of :func:`pointer`. Raises ValueError for a pointer not starting with '/'."""
    if ptr == "":
        return []
    if not ptr.startswith("/"):
        raise ValueError(f"not a JSON pointer: {ptr!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in ptr[1:].split("/")]


#: What a text report prints after the pointer of an :attr:`Finding.absent` key.
ABSENT_WORDS = "(absent: DeepSpeed's default)"

_NO_DATA = object()


def resolves(data: Any, ptr: str) -> bool:
    """True when the JSON pointer ``ptr`` names a value in ``data`` ("" always: the document)."""
    try:
        tokens = split_pointer(ptr)
    except ValueError:
        return False
    cur = data
    for t in tokens:
        if isinstance(cur, dict) and t in cur:
            cur = cur[t]
        elif isinstance(cur, list) and t.isdigit() and int(t) < len(cur):
            cur = cur[int(t)]
        else:
            return False
    return True


@dataclass(frozen=True)
class Finding:
    """One problem (or note) about one place in a config."""

    code: str
    severity: Severity
    pointer: str
    message: str
    fix: str = ""
    line: int | None = None
    column: int | None = None
    file: str | None = None
    #: Extra machine-readable numbers (bytes, elements) behind the message.
    data: dict[str, Any] = field(default_factory=dict, compare=False)
    #: Byte counts the message and fix name, by placeholder (:func:`render_sized`): a text report
    #: prints them in its ``--units``; ``message``/``fix`` hold them in the default units (GiB).
    sizes: dict[str, int | float] = field(default_factory=dict, compare=False)
    #: (message, fix) templates with ``{name}`` placeholders for ``sizes``; None for plain text.
    template: tuple[str, str] | None = field(default=None, compare=False)
    #: True when :attr:`pointer` names a key the config does not contain (DeepSpeed's default applies there):
    #: set by :meth:`located` given the config's data; line/column are then the nearest enclosing written key's.
    absent: bool = field(default=False, compare=False)
    #: The ``--set`` argument the finding's key came from (``--set 'zero_optimzation.stage=2'``), set by
    #: :meth:`located` for a pointer at or under a key a ``--set`` wrote (``LoadedConfig.overrides``): the file's
    #: line:column would name what the argument replaced, or a key the file does not have. Every output
    #: locates the finding there (text: :func:`advisor.render.lint.finding_location`; JSON ``"set"``;
    #: SARIF and GitHub: no line, the argument in the message).
    set_arg: str | None = field(default=None, compare=False)

    def text(self, units: str | None = None) -> tuple[str, str]:
        """(message, fix) with every size in ``units`` ("GiB" / "GB"; None: as stored, the default
        GiB): what a text report prints, with a key's control characters as ``\\xNN`` and lone
        surrogates as ``\\udXXXX`` (:func:`advisor.render.escape.safe_text`: a key's BEL or ANSI
        escape is shown, never sent to the terminal nor dropped by rich). JSON and SARIF keep
        :attr:`message` (stable; the JSON encoder escapes control characters as ``\\u00NN``) and
        the bytes in ``data``."""
        from advisor.render.escape import safe_text
        if self.template is None or units is None:
            return safe_text(self.message), safe_text(self.fix)
        from advisor.units import DEFAULT_UNITS

        msg, fix = self.template
        if render_sized(msg, self.sizes, DEFAULT_UNITS) != self.message:  # a copy with a new message
            msg = self.message.replace("{", "{{").replace("}", "}}")
        if render_sized(fix, self.sizes, DEFAULT_UNITS) != self.fix:
            fix = self.fix.replace("{", "{{").replace("}", "}}")
        return safe_text(render_sized(msg, self.sizes, units)), safe_text(render_sized(fix, self.sizes, units))

    @property
    def shown_pointer(self) -> str:
        """The JSON pointer as a text report prints it: "/" for the document, control characters as
        ``\\xNN`` (:func:`advisor.render.escape.safe_text`), as in :meth:`text`."""
        from advisor.render.escape import safe_text
        return safe_text(self.pointer or "/") + (f" {ABSENT_WORDS}" if self.absent else "")

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of a finding (stable field names)."""
        d: dict[str, Any] = {
            "code": self.code,
            "severity": self.severity,
            "pointer": self.pointer,
            "line": self.line,
            "column": self.column,
            "message": self.message,
            "fix": self.fix,
        }
        if self.file is not None:
            d["file"] = self.file
        if self.absent:
            d["absent"] = True
        if self.set_arg is not None:
            d["set"] = self.set_arg
        data = {**self.sizes, **self.data} if self.sizes else self.data  # the sizes' bytes, by name
        if data:
            d["data"] = data
        return d

    def located(self, positions: dict[str, tuple[int, int]], file: str | None, data: Any = _NO_DATA,
                overrides: "Mapping[str, str] | None" = None) -> "Finding":
        """Return a copy with line/column filled from ``positions`` (pointer -> (line, col)),
        using the nearest enclosing pointer that has a position. Given the config's ``data`` (the dict
        DeepSpeed gets), a pointer that names no key of it is marked :attr:`absent` (its line/column are
        then the nearest enclosing written key's: the top level, 1:1, for a missing section).
        ``overrides`` (``LoadedConfig.overrides``: pointer of a key a ``--set`` wrote -> the argument): a
        finding at or under one is the argument's (:attr:`set_arg`), with no line of the file."""
        if overrides and self.line is None and self.file in (None, file):
            arg = set_argument(self.pointer, overrides)
            if arg is not None:
                return replace(self, file=file if self.file is None else self.file, set_arg=arg, absent=False)
        absent = self.absent or (data is not _NO_DATA and self.file in (None, file) and not resolves(data, self.pointer))
        line, col = self.line, self.column
        if line is None:
            ptr = self.pointer
            while True:
                if ptr in positions:
                    line, col = positions[ptr]
                    break
                if ptr == "":
                    break
                ptr = ptr.rsplit("/", 1)[0]
        return replace(self, line=line, column=col, file=file if self.file is None else self.file, absent=absent)


def set_argument(ptr: str, overrides: "Mapping[str, str]") -> str | None:
    """The ``--set`` argument that wrote the key at JSON pointer ``ptr`` or an object above it
    (``overrides``: pointer -> argument, ``LoadedConfig.overrides``; the longest such pointer wins), else None."""
    best = None
    for p, arg in overrides.items():
        if (ptr == p or ptr.startswith(p + "/")) and (best is None or len(p) > len(best[0])):
            best = (p, arg)
    return best[1] if best else None


def worst(findings: Iterable[Finding]) -> int:
    """The highest severity rank among ``findings`` (-1 when there are none)."""
    return max((SEVERITY_RANK[f.severity] for f in findings), default=-1)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Stable order for reports: by file, line, pointer, code."""
    return sorted(findings, key=lambda f: (f.file or "", f.line or 0, f.column or 0, f.pointer, f.code))


class _SizedFormatter:
    """``{name[:spec]}`` -> :func:`advisor.units.size` of ``sizes[name]`` bytes in ``units``.

    spec: "" -> "1.86 GiB"; a digit count ("1") -> "1.9 GiB"; a prefix letter ("T", "M", with
    optional digits: "T1") -> TiB/TB, MiB/MB; "/s" suffix -> a rate ("1.86 GiB/s"); "bytes" ->
    the exact count first, then the readable size ("2,000,000,000 bytes (1.86 GiB)", MiB below a
    GiB, the bare count below a MiB)."""

    def __init__(self, sizes: dict, units: str):
        self.sizes, self.units = sizes, units

    def field(self, name: str, spec: str) -> str:
        from advisor.units import size

        n = self.sizes[name]
        if spec == "bytes":
            g, m = (2**30, 2**20) if self.units == "GiB" else (10**9, 10**6)
            if n >= g:
                return f"{int(n):,} bytes ({size(n, self.units)})"
            if n >= m:
                return f"{int(n):,} bytes ({size(n, self.units, prefix='M')})"
            return f"{int(n):,} bytes"
        per_s = spec.endswith("/s")
        spec = spec[:-2] if per_s else spec
        prefix = "G"
        if spec[:1] in ("M", "G", "T"):
            prefix, spec = spec[0], spec[1:]
        digits = int(spec) if spec else 2
        return size(n, self.units, prefix=prefix, digits=digits) + ("/s" if per_s else "")


def literal(text: object) -> str:
    """``text`` for a sized template (:func:`render_sized`): its braces doubled, so a path or a
    name holding ``{`` is printed as written, not read as a placeholder."""
    return str(text).replace("{", "{{").replace("}", "}}")


def render_sized(template: str, sizes: dict[str, int | float], units: str) -> str:
    """``template`` with each ``{name[:spec]}`` replaced by ``sizes[name]`` bytes in ``units``
    ("GiB" = 2^30 or "GB" = 1e9 bytes; spec as :class:`_SizedFormatter`); ``{{``/``}}`` are
    literal braces. Raises KeyError for a placeholder with no size (a programming error)."""
    import string

    from advisor.units import check_units

    f = _SizedFormatter(sizes, check_units(units))
    out = []
    for lit, name, spec, _conv in string.Formatter().parse(template):
        out.append(lit)
        if name is not None:
            out.append(f.field(name, spec or ""))
    return "".join(out)
