"""Renderers, and the reporter registry every command's ``--format`` reads.

:data:`REPORTERS` maps a view (the command whose result is rendered: ``lint``, ``check``,
``estimate``, ``checkpoint``, ``generate``, ``models``, ``hardware``, ``measure``) to its
formats, each a ``"module:function"`` reference imported only when that format is printed
(so ``lint --format text`` never imports the SARIF writer or rich's tables for estimate).
The keys of a view's table are exactly its ``--format`` choices (``advisor.cli`` builds the
option from :func:`formats`), so one format name means one thing in every command:

- ``text``: the human report (``advisor.render.text``);
- ``json``: the result's stable JSON shape (``to_dict`` / ``schemas/*-output.schema.json``);
- ``sarif``: SARIF 2.1.0 of the result's findings (``advisor.render.sarif``), for code scanning;
- ``github``: GitHub Actions annotations of the result's findings (``advisor.render.github``).

``sarif`` and ``github`` exist for every view whose result carries findings about a config
(lint, check, estimate, checkpoint). A reporter takes the view's result (lint: the list of
:class:`advisor.render.text.FileResult`) plus the keyword options it names, and returns the
text to print.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

#: view -> format -> "module:function". Order = the order ``--format`` lists the choices.
REPORTERS: dict[str, dict[str, str]] = {
    "lint": {
        "text": "advisor.render.lint:lint_text",
        "json": "advisor.render.lint:lint_json",
        "sarif": "advisor.render.sarif:sarif_json",
        "github": "advisor.render.github:github_annotations",
    },
    "check": {
        "text": "advisor.render.text:check_text",
        "json": "advisor.render.text:check_json",
        "sarif": "advisor.render.sarif:result_sarif_json",
        "github": "advisor.render.github:result_annotations",
    },
    "estimate": {
        "text": "advisor.render.text:estimate_text",
        "json": "advisor.render.text:estimate_json",
        "sarif": "advisor.render.sarif:result_sarif_json",
        "github": "advisor.render.github:result_annotations",
    },
    "checkpoint": {
        "text": "advisor.render.text:checkpoint_text",
        "json": "advisor.render.text:checkpoint_json",
        "sarif": "advisor.render.sarif:result_sarif_json",
        "github": "advisor.render.github:result_annotations",
    },
    "generate": {
        "text": "advisor.render.text:generate_text",
        "json": "advisor.render.text:generate_json",
    },
    "models": {
        "text": "advisor.render.text:models_text",
        "json": "advisor.render.text:models_json",
    },
    "model_types": {
        "text": "advisor.render.text:model_types_text",
        "json": "advisor.render.text:model_types_json",
    },
    "hardware": {
        "text": "advisor.render.text:hardware_text",
        "json": "advisor.render.text:hardware_json",
    },
    "measure": {
        "text": "advisor.render.text:measure_text",
        "json": "advisor.render.text:measure_json",
    },
}

#: One line per format for ``--format``'s help (the same words in every command).
FORMAT_HELP: dict[str, str] = {
    "text": "human report",
    "json": "stable JSON",
    "sarif": "SARIF 2.1.0 for code scanning",
    "github": "GitHub Actions annotations",
}


def formats(view: str) -> list[str]:
    """The ``--format`` choices of ``view``, in display order. Raises KeyError for an unknown view."""
    return list(REPORTERS[view])


def reporter(view: str, fmt: str) -> Callable[..., str]:
    """The function rendering ``view``'s result as ``fmt`` (imported now).

    Raises KeyError when ``view`` has no such format (the CLI's Choice prevents that)."""
    module, func = REPORTERS[view][fmt].split(":")
    return getattr(importlib.import_module(module), func)


def render(view: str, fmt: str, result: Any, **options: Any) -> str:
    """``reporter(view, fmt)(result, **options)``: the text to print.

    A command passes every option any of its formats uses (estimate: ``explain``; generate:
    ``top``; checkpoint: ``source``; every text report: ``units`` "GiB"/"GB" and ``color``
    "auto"/"always"/"never", resolved here to a bool for the stream ``stream``, default stdout);
    each reporter receives those its signature names.

    A ``text`` report is folded to the width of ``stream`` (:func:`advisor.render.style.width`:
    the terminal's, else 100 columns, or ``COLUMNS``) by :func:`advisor.render.style.wrap`, here,
    for every view: no piped line is longer than that unless it is one word (a path, a URL) or a
    table row. A reporter may name lines to keep whole when piped with a ``keep_lines(result)``
    attribute (lint: the tally, which scripts grep for); on a terminal they fold too. ``json``, ``sarif``
    and ``github`` are machine formats and never folded (a GitHub workflow command is one line).
    In every format a number printed longer than 60 characters (a config value echoed in a message
    or formula) is cut, and in text, JSON and SARIF a word longer than 600 (a tensor name) too
    (:func:`advisor.errors.cut_echoes`; JSON and SARIF: inside strings only)."""
    import inspect

    import sys

    fn = reporter(view, fmt)
    params = inspect.signature(fn).parameters
    stream = options.get("stream") or sys.stdout
    if "units" in options:
        from advisor.units import check_units
        options["units"] = check_units(options["units"])
    if "color" in options and not isinstance(options["color"], bool):
        from advisor.render.style import use_color
        options.pop("stream", None)
        options["color"] = use_color(stream, options["color"])
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        options = {k: v for k, v in options.items() if k in params}
    from advisor.errors import cut_echoes, cut_numbers, cut_numbers_in_json
    from advisor.render.escape import escape_surrogates
    out = escape_surrogates(fn(result, **options))  # a key's lone surrogate never fails to print
    if fmt == "text" and not options.get("color"):
        # without colour a text report writes no control character of its own, so any left is a
        # key's (BEL, an ANSI escape): shown as \xNN here, for every view at once. With colour the
        # reporters escape what they echo (Finding.text, Finding.shown_pointer, safe_text).
        from advisor.render.escape import safe_text
        out = safe_text(out)
    # a config value of thousands of digits, a tensor name of 100k characters: echoed cut, in every
    # view and format (JSON: in its strings)
    out = cut_numbers_in_json(out) if fmt in ("json", "sarif") else cut_numbers(out) if fmt == "github" \
        else cut_echoes(out)
    if fmt in ("json", "sarif"):  # JSON has no NaN/Infinity: refuse rather than print invalid JSON
        _refuse_non_finite(out, view, fmt)
    if fmt == "text":  # the one place every text report is folded to the stream's width
        from advisor.render.style import width, wrap
        keep = getattr(fn, "keep_lines", None)
        tty = getattr(stream, "isatty", None)
        if tty and tty():  # lines kept whole are for scripts reading a pipe; a person's terminal folds them too
            keep = None
        out = wrap(out, width(stream), keep=keep(result) if keep else frozenset())
    return out


def _refuse_non_finite(text: str, view: str, fmt: str) -> None:
    """Raise :class:`advisor.errors.NonFiniteOutputError` naming the first field (a JSON pointer)
    of the JSON document ``text`` whose value is NaN or +-Infinity (``json.dumps`` writes them by
    default; JSON does not allow them). The full parse runs only when the words occur at all."""
    import re
    if re.search(r"\b(?:NaN|Infinity)\b", text) is None:
        return
    import json
    import math

    def walk(v, ptr):
        if isinstance(v, float) and not math.isfinite(v):
            return ptr, v
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, x in items:
            hit = walk(x, f"{ptr}/{str(k).replace('~', '~0').replace('/', '~1')}")
            if hit:
                return hit
        return None
    try:
        hit = walk(json.loads(text), "")
    except ValueError:  # not one JSON document: nothing to point at
        return
    if hit:
        from advisor.errors import NonFiniteOutputError, cut
        raise NonFiniteOutputError(
            f"{view} --format {fmt}: {cut(hit[0] or '/')} would be {json.dumps(hit[1])}, which JSON does not allow "
            "(a figure derived from the inputs overflowed); refused rather than printed as invalid JSON")
