"""Findings: what lint (and estimate, check) report about a config.

A finding names a rule ``code``, a ``severity`` (``error``, ``warning`` or ``info``), a JSON
pointer into the config (RFC 6901), the line and column where the file has one, a one-line
``message`` and a ``fix``. The JSON shape (``Finding.to_dict``) is the contract that
``../shared/cases/*/expect.json`` and ``--format json`` consumers rely on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Literal

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
        if self.data:
            d["data"] = self.data
        return d

    def located(self, positions: dict[str, tuple[int, int]], file: str | None) -> "Finding":
        """Return a copy with line/column filled from ``positions`` (pointer -> (line, col)),
        using the nearest enclosing pointer that has a position."""
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
        return replace(self, line=line, column=col, file=file if self.file is None else self.file)


def worst(findings: Iterable[Finding]) -> int:
    """The highest severity rank among ``findings`` (-1 when there are none)."""
    return max((SEVERITY_RANK[f.severity] for f in findings), default=-1)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Stable order for reports: by file, line, pointer, code."""
    return sorted(findings, key=lambda f: (f.file or "", f.line or 0, f.column or 0, f.pointer, f.code))
