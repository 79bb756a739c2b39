"""SARIF 2.1.0 rendering of lint (and check) findings, for GitHub code scanning and other CI viewers.

One run per invocation. ``tool.driver.rules`` carries the metadata of every registered lint rule
(:func:`advisor.rules.all_rules`): ``id`` (the code), ``name``, ``shortDescription`` (the first
line of the rule's explanation), ``fullDescription`` and ``help.text`` (the whole explanation
as plain text, as ``ds-advisor explain CODE`` prints it: :func:`advisor.render.explain.rst_text`),
``help.markdown`` (the same explanation as Markdown: :func:`advisor.render.explain.rst_markdown`) and ``defaultConfiguration.level`` from the rule's
severity, plus descriptors for the codes that estimate and check add outside the registry
(``M100``, ``K1xx``). Each result has ``ruleId``/``ruleIndex``, ``level``, ``message`` (the
message, then the fix), a location (``artifactLocation.uri`` relative to the working directory
when the file lies under it, with ``uriBaseId`` ``%SRCROOT%``; ``region.startLine`` and
``startColumn`` when the finding has a position), the JSON pointer as a logical location and
in ``properties.pointer``, and a ``partialFingerprints`` entry that does not depend on the line.
Files that could not be read become ``toolExecutionNotifications``.

Severity -> SARIF level: ``error`` -> ``error``, ``warning`` -> ``warning``, ``info`` -> ``note``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Iterable
from urllib.parse import quote

from advisor import DEEPSPEED_VERSION, __version__
from advisor.findings import Finding
from advisor.render.escape import escape_surrogates

if TYPE_CHECKING:
    from advisor.render.lint import FileResult

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "%SRCROOT%"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}

def _short(code: str, name: str, explanation: str) -> str:
    first = explanation.strip().splitlines()[0].strip() if explanation.strip() else name
    for prefix in (f"{code} {name}:", f"{code}:"):
        if first.startswith(prefix):
            first = first[len(prefix):].strip()
    return first or name


def rule_descriptors() -> list[dict[str, Any]]:
    """SARIF ``reportingDescriptor`` objects for every registered rule (lint, estimate and check codes), by id."""
    from advisor.rules import all_rules

    from advisor.render.explain import rst_markdown, rst_text
    from advisor.render.style import PIPE_WIDTH

    out: list[dict[str, Any]] = []
    for code, rule in all_rules().items():
        doc = rule.explanation() or rule.name
        text = rst_text(doc, cols=PIPE_WIDTH)  # plain text, as `ds-advisor explain CODE` prints it piped
        out.append({
            "id": code,
            "name": rule.name,
            "shortDescription": {"text": _short(code, rule.name, text)},
            "fullDescription": {"text": text},
            "help": {"text": text, "markdown": rst_markdown(doc)},
            "defaultConfiguration": {"level": LEVELS[rule.severity]},
            "properties": {"tags": ["deepspeed", "config"], "needsModel": bool(rule.needs_model)},
        })
    return sorted(out, key=lambda d: d["id"])


def artifact_uri(path: str, cwd: str | None = None) -> tuple[str, str | None] | None:
    """(uri, uriBaseId) for a config path (relative paths taken against ``cwd``, default the
    working directory): relative to ``cwd`` (percent-encoded, ``/`` separators,
    base ``%SRCROOT%``) when the file lies under it, else an absolute ``file://`` URI (no base).
    None for stdin (``-``) and inline base64 sources, which have no file."""
    if not path or path == "-" or path.startswith("<"):
        return None
    cwd = os.path.abspath(cwd or os.getcwd())
    absolute = os.path.normpath(os.path.join(cwd, path))  # relative paths are relative to cwd
    try:
        rel = os.path.relpath(absolute, cwd)
    except ValueError:  # another drive (Windows)
        rel = None
    if rel is not None and not rel.startswith(os.pardir):
        # the name's own bytes percent-encoded (os.fsencode undoes the surrogateescape a non-UTF-8 file name was
        # read with: bad\xff.json -> bad%FF.json, as Path.as_uri below does), never str -> UTF-8, which raised
        # UnicodeEncodeError on such a name, an internal error (issue 21 audit)
        return quote(os.fsencode(PurePosixPath(*Path(rel).parts).as_posix())), SRCROOT
    return Path(absolute).as_uri(), None


def _fingerprint(f: Finding, uri: str | None) -> str:
    key = "\0".join((f.code, uri or "", f.pointer))
    return hashlib.sha256(escape_surrogates(key).encode("utf-8")).hexdigest()[:32]


def sarif_result(f: Finding, rule_index: dict[str, int], default_file: str | None = None,
                 cwd: str | None = None) -> dict[str, Any]:
    """One SARIF ``result`` for a finding."""
    # a key a --set wrote: the argument, not a line of the file (Finding.set_arg)
    text = (f"{f.set_arg}: " if f.set_arg is not None else "") + f.message + (f" Fix: {f.fix}" if f.fix else "")
    res: dict[str, Any] = {"ruleId": f.code, "level": LEVELS[f.severity], "message": {"text": text}}
    if f.code in rule_index:
        res["ruleIndex"] = rule_index[f.code]
    loc: dict[str, Any] = {}
    art = artifact_uri(f.file or default_file or "", cwd)
    if art is not None:
        al: dict[str, Any] = {"uri": art[0]}
        if art[1]:
            al["uriBaseId"] = art[1]
        phys: dict[str, Any] = {"artifactLocation": al}
        if f.line is not None and f.line >= 1 and f.set_arg is None:
            region: dict[str, Any] = {"startLine": f.line}
            if f.column is not None and f.column >= 1:
                region["startColumn"] = f.column
            phys["region"] = region
        loc["physicalLocation"] = phys
    loc["logicalLocations"] = [{"fullyQualifiedName": f.pointer or "/", "kind": "member"}]
    res["locations"] = [loc]
    res["partialFingerprints"] = {"dsAdvisorFinding/v1": _fingerprint(f, art[0] if art else f.file)}
    props: dict[str, Any] = {"pointer": f.pointer, "severity": f.severity}
    if f.set_arg is not None:
        props["set"] = f.set_arg
    if f.fix:
        props["fix"] = f.fix
    if f.data:
        props["data"] = f.data
    res["properties"] = props
    return res


def to_sarif(results: "Iterable[FileResult]", cwd: str | None = None) -> dict[str, Any]:
    """The SARIF log (a dict) for lint results: one run, rule metadata, one result per finding,
    one error notification per unreadable file."""
    results = list(results)
    rules = rule_descriptors()
    index = {r["id"]: i for i, r in enumerate(rules)}
    out_results: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for r in results:
        if r.error:
            n: dict[str, Any] = {"level": "error", "message": {"text": r.error}}
            art = artifact_uri(r.file, cwd)
            if art is not None:
                al = {"uri": art[0], **({"uriBaseId": art[1]} if art[1] else {})}
                n["locations"] = [{"physicalLocation": {"artifactLocation": al}}]
            notes.append(n)
            continue
        for f in r.findings:
            out_results.append(sarif_result(f, index, r.file, cwd))
    base = Path(os.path.abspath(cwd or os.getcwd())).as_uri()
    base = base if base.endswith("/") else base + "/"  # the root's file:/// stays whole (rstrip made it file:/)
    from advisor.config.versions import current_release, release_dict
    invocation: dict[str, Any] = {"executionSuccessful": not notes,
                                  # the DeepSpeed release these findings were checked against
                                  "properties": {"deepspeedRelease": release_dict(current_release())}}
    if notes:
        invocation["toolExecutionNotifications"] = notes
    run = {
        "tool": {"driver": {
            "name": "ds-advisor",
            "version": __version__,
            "semanticVersion": __version__,
            "informationUri": "https://pypi.org/project/deepspeed-advisor/",
            "rules": rules,
            "properties": {"accountingRelease": DEEPSPEED_VERSION},  # the checked one: invocations[0]
        }},
        "originalUriBaseIds": {SRCROOT: {"uri": base}},
        "invocations": [invocation],
        "results": out_results,
        "columnKind": "unicodeCodePoints",
    }
    return {"$schema": SARIF_SCHEMA_URI, "version": SARIF_VERSION, "runs": [run]}


def findings_sarif(findings: Iterable[Finding], file: str | None = None, cwd: str | None = None) -> dict[str, Any]:
    """SARIF for one config's findings (e.g. ``check``'s), with ``file`` as their default artifact."""
    from advisor.render.lint import FileResult

    return to_sarif([FileResult(file=file or "", findings=list(findings))], cwd=cwd)


def sarif_json(results: "Iterable[FileResult]", cwd: str | None = None) -> str:
    """:func:`to_sarif` as indented JSON text."""
    return json.dumps(to_sarif(results, cwd=cwd), indent=2)


def result_sarif_json(result: Any, source: str | None = None, cwd: str | None = None) -> str:
    """SARIF for one view result carrying ``findings`` about one config (check, estimate,
    checkpoint): :func:`findings_sarif` with the result's ``source`` (or ``source``) as artifact."""
    return json.dumps(findings_sarif(result.findings, file=getattr(result, "source", None) or source, cwd=cwd),
                      indent=2)
