"""Colour and width for terminal output: one table of styles for the words a reader acts on
(finding severities, fit verdicts, check's GO/NO-GO), and the colour decision.

Colour is on when ``--color always``, or ``--color auto`` (the default) and the stream is a
terminal and ``NO_COLOR`` is not set (https://no-color.org); ``--color never`` turns it off.
Renderers built on rich use the style names; plain-text renderers wrap a word with :func:`paint`.
"""

from __future__ import annotations

import os
import shutil
from typing import IO

#: Colour choices of ``--color``.
COLOR_CHOICES = ("auto", "always", "never")

#: rich style of each word a reader acts on: severities and verdicts coloured alike.
STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan",
         "DOES NOT FIT": "bold red", "fits": "green", "give a capacity": "dim",
         "NO-GO": "bold red", "GO": "bold green", "FAIL": "bold red", "PASS": "green", "WARN": "yellow",
         "UNKNOWN": "dim"}
_ANSI = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}

#: Width of piped (non-terminal) output: lines longer than this are wrapped.
PIPE_WIDTH = 100


def use_color(stream: IO[str], mode: str | bool | None = "auto") -> bool:
    """Whether to colour ``stream``: ``mode`` "always"/True, "never"/False, or "auto"/None (a
    terminal and no ``NO_COLOR``)."""
    if mode is True or mode == "always":
        return True
    if mode is False or mode == "never":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and not os.environ.get("NO_COLOR")  # no-color.org: set and non-empty


def width(stream: IO[str]) -> int:
    """Columns to lay out for: the terminal's width on a terminal, else :data:`PIPE_WIDTH`."""
    isatty = getattr(stream, "isatty", None)
    if isatty and isatty():
        return shutil.get_terminal_size((PIPE_WIDTH, 40)).columns
    cols = os.environ.get("COLUMNS", "")
    return int(cols) if cols.isdigit() and 40 <= int(cols) <= 400 else PIPE_WIDTH


def wrap(text: str, columns: int, hang: int = 4, keep: frozenset[str] | set[str] = frozenset()) -> str:
    """``text`` folded at word boundaries to ``columns``, continuation lines indented by its own
    leading spaces plus ``hang`` (so a wrapped finding or assumption still reads as one item).
    Lines already short enough, table rows (box-drawing characters) and the lines in ``keep``
    (an unreadable file's one-line error, which scripts grep for) are left alone."""
    import textwrap

    out = []
    for line in text.split("\n"):
        if len(line) <= columns or line in keep or any(c in line for c in "│┃┏┗└┡"):
            out.append(line)
            continue
        lead = len(line) - len(line.lstrip(" "))
        out.append(textwrap.fill(line, columns, subsequent_indent=" " * (lead + hang), break_on_hyphens=False,
                                 break_long_words=False))
    return "\n".join(out)


def paint(word: str, color: bool, style: str | None = None) -> str:
    """``word`` wrapped in the ANSI codes of ``style`` (default: :data:`STYLE` of ``word``) when
    ``color``; else ``word`` unchanged."""
    style = STYLE.get(word, "") if style is None else style
    if not color or not style:
        return word
    codes = ";".join(_ANSI[s] for s in style.split() if s in _ANSI)
    return f"\033[{codes}m{word}\033[0m" if codes else word
