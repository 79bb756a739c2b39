"""lint's renderers: text (one line per finding) and JSON (``schemas/lint-output.schema.json``).

Kept apart from :mod:`advisor.render.text` (estimate, check, checkpoint tables) so that
``ds-advisor lint`` imports only what it prints.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from advisor.findings import Finding
from advisor.render.style import paint

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
        **({"deepspeed_release": release_dict(release)} if release else {}),
    }, indent=2)


from advisor.render.escape import safe_text  # noqa: E402,F401  (the one escaping helper)
from advisor.config.versions import release_dict  # noqa: E402


def _use_color(stream: IO[str]) -> bool:
    from advisor.render.style import use_color
    return use_color(stream)


#: The "auto" rules (advisor/rules/A00x) and the batch keys only the HF Trainer can fill in:
#: DeepSpeed alone cannot even derive the batch triple when one of them is "auto".
AUTO_CODES = ("A001", "A002", "A003")
HF_BATCH_POINTERS = ("/train_batch_size", "/train_micro_batch_size_per_gpu", "/gradient_accumulation_steps")


def hf_trainer_hint(findings: list[Finding]) -> tuple[str, list[Finding]] | None:
    """(one hint line, the "auto" findings it stands for) when the findings say the file is an HF
    Trainer config linted without --hf: a batch key is "auto" (A001). None otherwise.
    The text report prints the hint instead of one finding per "auto" value; JSON, SARIF and
    GitHub annotations keep every finding."""
    autos = [f for f in findings if f.code in AUTO_CODES]
    if not any(f.code == "A001" and f.pointer in HF_BATCH_POINTERS for f in autos):
        return None
    keys = [f.pointer.lstrip("/") for f in autos]
    shown = ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")
    return (f'this looks like an HF Trainer config: {len(autos)} {"value is" if len(autos) == 1 else "values are"} "auto" ({shown}), which only the HF '
            f'Trainer or accelerate fills in ({len(autos)} {"/".join(sorted({f.code for f in autos}))} finding{"" if len(autos) == 1 else "s"} '
            "folded here; --format json lists each)", autos)


def hf_hint_fix(command: str, file: str) -> str:
    """The fix of :func:`hf_trainer_hint`'s line: run ``command`` (lint, estimate, check) on ``file``
    again with ``--hf``, as the Trainer runs it, or replace each "auto" for DeepSpeed alone."""
    more = "" if command == "lint" else "this run's other options and "
    return (f"{command} it as the Trainer runs it: ds-advisor {command} {file} --hf (with {more}the Trainer's arguments "
            "for the values it derives), or replace each \"auto\" to launch it with DeepSpeed alone")


def hf_hint_lines(findings: list[Finding], command: str, file: str) -> tuple[list[tuple[str, str]], set[int]]:
    """For estimate's and check's text reports: ([(message, fix)] of the one A001 line that stands
    for an HF Trainer config's "auto" findings (:func:`hf_trainer_hint`, with :func:`hf_hint_fix`
    for ``command``), the ids of the findings it folds); ([], set()) when there is no hint."""
    hint = hf_trainer_hint(findings)
    if hint is None:
        return [], set()
    return [(hint[0], hf_hint_fix(command, file))], {id(f) for f in hint[1]}


def finding_location(f: Finding, file: str = "") -> str:
    """Where a finding is, as every text report prints it: ``file:line:column`` (the finding's own file, else
    ``file``; column 1 when only the line is known), ``file`` alone when it has no line; for a key a
    ``--set`` wrote (:attr:`Finding.set_arg`), the argument (``--set 'a.b=2' (on FILE)``), not a line of the file.
    Escaped (:func:`safe_text`): a path's control characters are shown, not sent."""
    if f.set_arg is not None:
        return safe_text(f.set_arg + (f" (on {f.file or file})" if f.file or file else ""))
    loc = f.file or file
    if f.line is not None:
        loc += f":{f.line}:{f.column or 1}"
    return safe_text(loc)


def location_prefix(f: Finding) -> str:
    """``file:line:column: `` before a finding in estimate's and check's text reports (:func:`finding_location`,
    as lint prints it), empty for a finding with no line (one about no place in a file)."""
    return f"{finding_location(f)}: " if (f.line is not None and f.file) or f.set_arg is not None else ""


def finding_lines(f: Finding, file: str, color: bool = False, units: str | None = None) -> list[str]:
    """One finding as lint prints it: ``file:line:col: severity CODE /pointer: message`` (the
    location from the finding, else ``file`` alone: :func:`finding_location`), then an indented ``fix:`` line
    when it has one. Sizes in ``units`` (None: GiB). ``resolve`` prints its findings with this too."""
    loc = finding_location(f, file)
    sev = paint(f.severity, color) if color else f.severity
    msg, fix = f.text(units)
    out = [f"{loc}: " + sev + f" {f.code} {f.shown_pointer}: {msg}"]
    if fix:
        out.append(safe_text(f"    fix: {fix}"))
    return out


def lint_text(results: list[FileResult], stream: IO[str] | None = None, release: "Release | None" = None,
              color: bool | None = None, quiet: bool = False, units: str | None = None) -> str:
    """One line per finding, ``file:line:col: severity CODE message``, then an indented fix; the
    summary line names the DeepSpeed release checked against when ``release`` is given. ``quiet``
    (-q): no summary line; the findings, then (when there are any) one line naming that release.
    ``color``: colour the severities (None: on a terminal without NO_COLOR). ``units``: "GiB" /
    "GB" for the sizes findings name (None: the default, GiB).

    An HF Trainer config linted without --hf shows one hint line for its "auto" findings
    (:func:`hf_trainer_hint`); the tally counts the lines shown, so that hint is one error (it
    says how many findings it folds; JSON, SARIF and GitHub keep and count each). An unreadable
    file is not a line here: its error goes to stderr (``ds-advisor lint`` prints it there, one
    line); the tally names how many. Lines are folded to the stream's width by
    :func:`advisor.render.render`, not here."""
    stream = stream or sys.stdout
    color = _use_color(stream) if color is None else color
    lines: list[str] = []
    n = {"error": 0, "warning": 0, "info": 0}
    for r in results:
        if r.error:  # an error, not a finding: the CLI prints it on stderr (cli.lint); the tally counts it
            continue
        if r.skipped:
            lines.append(safe_text(f"{r.file}: skipped: {r.skipped}"))
            continue
        if r.kind == "accelerate":
            lines.append(safe_text(f"{r.file}: accelerate config (read as accelerate launch reads it)"))
        hint = hf_trainer_hint(r.findings)
        folded = {id(f) for f in hint[1]} if hint else set()
        if hint:
            sev = paint("error", color) if color else "error"
            n["error"] += 1  # the tally counts the lines shown: the hint is one (it names how many it folds)
            lines.append(safe_text(f"{hint[1][0].file or r.file}: ") + sev + safe_text(f" A001 /: {hint[0]}"))
            lines.append(safe_text(f"    fix: {hf_hint_fix('lint', r.file)}"))
        for f in r.findings:
            if id(f) in folded:
                continue
            n[f.severity] += 1
            lines.extend(finding_lines(f, r.file, color, units))
    unreadable = sum(1 for r in results if r.error)
    skipped = sum(1 for r in results if r.skipped)
    if quiet:  # -q: the findings (and unreadable files) only, and the release they hold for
        lines = [x for x in lines if ": skipped: " not in x]
        if release and any(n.values()):
            lines.append(f"checked against {release.note}")
    else:
        lines.append(f"{len(results)} file(s): {n['error']} error(s), {n['warning']} warning(s), {n['info']} info"
                 + (f", {unreadable} unreadable" if unreadable else "")
                 + (f", {skipped} skipped (not DeepSpeed or accelerate configs)" if skipped else "")
                 + (f" (checked against {release.note})" if release else ""))
    return "\n".join(lines)


_TALLY = re.compile(r"^\d+ file\(s\): \d+ error\(s\), ")


def _lint_keep_lines(results: list[FileResult]):
    """The lines :func:`advisor.render.render` keeps whole when it folds :func:`lint_text`: the
    tally (scripts grep for it)."""
    return lambda line: bool(_TALLY.match(line))


lint_text.keep_lines = _lint_keep_lines  # type: ignore[attr-defined]
