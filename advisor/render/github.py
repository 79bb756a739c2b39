"""``--format github``: GitHub Actions workflow commands, so findings show as annotations on the PR.

One line per finding::

    ::error file=configs/ds.json,line=7,col=5,title=B001 batch-triple::/train_batch_size: ... %0Afix: ...

Severity -> command: ``error`` -> ``::error``, ``warning`` -> ``::warning``, ``info`` -> ``::notice``.
Escaping follows GitHub's runner (actions/toolkit ``command.ts``): in the message, ``%`` ->
``%25``, CR -> ``%0D``, LF -> ``%0A``; in property values (file, title) additionally ``:`` ->
``%3A`` and ``,`` -> ``%2C``. A file that could not be read becomes one ``::error`` naming it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from advisor.findings import Finding

if TYPE_CHECKING:
    from advisor.render.lint import FileResult

COMMANDS = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(s: str) -> str:
    """Escape a workflow command's message: ``%``, CR and LF."""
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(s: str) -> str:
    """Escape a workflow command's property value: as :func:`escape_data`, plus ``:`` and ``,``."""
    return escape_data(s).replace(":", "%3A").replace(",", "%2C")


def command(kind: str, message: str, **props: str | int | None) -> str:
    """``::kind k=v,...::message`` with both parts escaped; None-valued properties are left out."""
    from advisor.render.escape import safe_text  # control characters as \xNN, as the text report shows them
    p = ",".join(f"{k}={escape_property(safe_text(str(v)))}" for k, v in props.items() if v is not None)
    return f"::{kind}{' ' + p if p else ''}::{escape_data(safe_text(message))}"


def annotation(f: Finding, default_file: str | None = None, rule_names: dict[str, str] | None = None,
               units: str | None = None) -> str:
    """The workflow command for one finding, its sizes in ``units`` ("GiB" / "GB"; None: the
    default, GiB) as the text report prints them (:meth:`Finding.text`): an annotation is read
    by a person, like the text report."""
    file = f.file or default_file
    if file in ("-", "") or (file or "").startswith("<"):
        file = None
    title = f.code + (f" {rule_names[f.code]}" if rule_names and f.code in rule_names else "")
    message, fix = f.text(units)
    msg = (f"{f.set_arg}: " if f.set_arg is not None else "") + f"{f.pointer or '/'}: {message}" \
        + (f"\nfix: {fix}" if fix else "")
    line = f.line if file and f.set_arg is None else None  # a key a --set wrote: no line of the file
    return command(COMMANDS[f.severity], msg, file=file, line=line, col=f.column if line else None, title=title)


def github_annotations(results: "Iterable[FileResult]", units: str | None = None) -> str:
    """All lint results as workflow commands (sizes in ``units``, :func:`annotation`), then a
    plain summary line."""
    from advisor.rules import all_rules

    names = {c: r.name for c, r in all_rules().items()}
    lines: list[str] = []
    n = {"error": 0, "warning": 0, "info": 0}
    results = list(results)
    for r in results:
        if r.error:
            lines.append(command("error", r.error, file=None if r.file in ("-", "") else r.file,
                                 title="unreadable config"))
            continue
        for f in r.findings:
            n[f.severity] += 1
            lines.append(annotation(f, r.file, names, units))
    unreadable = sum(1 for r in results if r.error)
    from advisor.config.versions import release_note
    lines.append(f"ds-advisor: {len(results)} file(s): {n['error']} error(s), {n['warning']} warning(s), "
                 f"{n['info']} info" + (f", {unreadable} unreadable" if unreadable else "")
                 + f" (checked against {release_note()})")
    return "\n".join(lines)


def result_annotations(result: Any, source: str | None = None, units: str | None = None) -> str:
    """GitHub annotations for one view result carrying ``findings`` about one config (check,
    estimate, checkpoint), with the result's ``source`` (or ``source``) as the default file."""
    from advisor.render.lint import FileResult

    return github_annotations([FileResult(file=getattr(result, "source", None) or source or "",
                                          findings=list(result.findings))], units)
