"""lint's renderers: text (one line per finding) and JSON (``schemas/lint-output.schema.json``).

Kept apart from :mod:`advisor.render.text` (estimate, check, checkpoint tables) so that
``ds-advisor lint`` imports only what it prints.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from advisor.findings import Finding

if TYPE_CHECKING:
    from advisor.config.versions import Release

LINT_SCHEMA_VERSION = 1


@dataclass
class FileResult:
    """Lint outcome for one input: findings, or an error line when it could not be read."""

    file: str
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    #: "deepspeed" or "accelerate" (what the file is, by its content).
    kind: str = "deepspeed"
    #: Set when a folder lint skipped the file: why it is not a config of either kind.
    skipped: str | None = None


def lint_json(results: list[FileResult], release: "Release | None" = None) -> str:
    """The lint report as JSON (schemas/lint-output.schema.json); ``release`` names the DeepSpeed
    release the findings are about."""
    counts = {"error": 0, "warning": 0, "info": 0}
    for r in results:
        for f in r.findings:
            counts[f.severity] += 1
    return json.dumps({
        "schema_version": LINT_SCHEMA_VERSION,
        "files": [{"file": r.file, "findings": [f.to_dict() for f in r.findings],
                   **({"error": r.error} if r.error else {}),
                   **({"kind": r.kind} if r.kind != "deepspeed" else {}),
                   **({"skipped": r.skipped} if r.skipped else {})} for r in results],
        "summary": {"files": len(results), "unreadable": sum(1 for r in results if r.error),
                    "skipped": sum(1 for r in results if r.skipped), **counts},
        **({"deepspeed_release": {"requested": release.requested, "checked": release.checked,
                                  "origin": release.origin}} if release else {}),
    }, indent=2)


from advisor.render.escape import safe_text  # noqa: E402,F401  (the one escaping helper)


def _use_color(stream: IO[str]) -> bool:
    from advisor.render.style import use_color
    return use_color(stream)


def lint_text(results: list[FileResult], stream: IO[str] | None = None, release: "Release | None" = None,
              color: bool | None = None, quiet: bool = False) -> str:
    """One line per finding, ``file:line:col: severity CODE message``, then an indented fix; the
    summary line names the DeepSpeed release checked against when ``release`` is given.
    ``color``: colour the severities (None: on a terminal without NO_COLOR)."""
    stream = stream or sys.stdout
    color = _use_color(stream) if color is None else color
    lines: list[str] = []
    n = {"error": 0, "warning": 0, "info": 0}
    for r in results:
        if r.error:
            lines.append(safe_text(r.error))
            continue
        if r.skipped:
            lines.append(safe_text(f"{r.file}: skipped: {r.skipped}"))
            continue
        if r.kind == "accelerate":
            lines.append(safe_text(f"{r.file}: accelerate config (read as accelerate launch reads it)"))
        for f in r.findings:
            n[f.severity] += 1
            loc = f.file or r.file
            if f.line is not None:
                loc += f":{f.line}:{f.column or 1}"
            sev = f.severity
            if color:
                from advisor.render.style import paint
                sev = paint(sev, color)
            lines.append(safe_text(f"{loc}: ") + sev + safe_text(f" {f.code} {f.pointer or '/'}: {f.message}"))
            if f.fix:
                lines.append(safe_text(f"    fix: {f.fix}"))
    unreadable = sum(1 for r in results if r.error)
    skipped = sum(1 for r in results if r.skipped)
    if quiet:  # -q: the findings (and unreadable files) only
        lines = [x for x in lines if ": skipped: " not in x]
    else:
        lines.append(f"{len(results)} file(s): {n['error']} error(s), {n['warning']} warning(s), {n['info']} info"
                 + (f", {unreadable} unreadable" if unreadable else "")
                 + (f", {skipped} skipped (not DeepSpeed or accelerate configs)" if skipped else "")
                 + (f" (checked against {release.note})" if release else ""))
    from advisor.render.style import width, wrap
    return wrap("\n".join(lines), width(stream))
