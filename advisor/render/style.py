"""Colour and width for terminal output: one table of styles for the words a reader acts on
(finding severities, fit verdicts, check's GO/NO-GO), and the colour decision.

Colour is on when ``--color always``, or ``--color auto`` (the default) and the stream is a
terminal, ``NO_COLOR`` is not set (https://no-color.org) and ``TERM`` is not ``dumb``;
``--color never`` turns it off.
Renderers built on rich use the style names; plain-text renderers wrap a word with :func:`paint`.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import IO, Callable

#: Colour choices of ``--color``.
COLOR_CHOICES = ("auto", "always", "never")

#: rich style of each word a reader acts on: severities and verdicts coloured alike.
STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan",
         "DOES NOT FIT": "bold red", "fits": "green", "give a capacity": "dim",
         "NO-GO": "bold red", "GO": "bold green", "FAIL": "bold red", "PASS": "green", "WARN": "yellow",
         "UNKNOWN": "dim", "TIGHT": "yellow"}  # tight: fits only inside the overhead's band, a warning
_ANSI = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}

#: Width of piped (non-terminal) output: lines longer than this are wrapped.
PIPE_WIDTH = 100


def use_color(stream: IO[str], mode: str | bool | None = "auto") -> bool:
    """Whether to colour ``stream``: ``mode`` "always"/True, "never"/False, or "auto"/None (a
    terminal, no ``NO_COLOR``, and ``TERM`` is not ``dumb``)."""
    if mode is True or mode == "always":
        return True
    if mode is False or mode == "never":
        return False
    isatty = getattr(stream, "isatty", None)
    if os.environ.get("TERM") == "dumb":  # a terminal that declares it has no escape codes
        return False
    return bool(isatty and isatty()) and not os.environ.get("NO_COLOR")  # no-color.org: set and non-empty


def width(stream: IO[str]) -> int:
    """Columns to lay out for: the terminal's width on a terminal, else :data:`PIPE_WIDTH`."""
    isatty = getattr(stream, "isatty", None)
    if isatty and isatty():
        return shutil.get_terminal_size((PIPE_WIDTH, 40)).columns
    cols = os.environ.get("COLUMNS", "")
    # ASCII digits, at most 3 of them, before int(): str.isdigit() is True for "²" (int() raises)
    # and for 5,000 digits (past int()'s limit): both ended in a traceback (issue 21, fuzz round c)
    return int(cols) if len(cols) <= 3 and cols.isascii() and cols.isdigit() and 40 <= int(cols) <= 400 \
        else PIPE_WIDTH


#: An ANSI SGR colour code (what :func:`paint` and rich write).
_ANSI_CODE = re.compile(r"\033\[[0-9;]*m")
#: A no-break space: textwrap breaks at ASCII whitespace only, so words joined by it fold as one.
NB = "\u00a0"
#: The space between a number and its unit ("0.03 GB", "12.3 s"), which folding never breaks.
UNIT_GAP = re.compile(r"(?<=\d) (?=(?:[KMGTP]i?B|[kMGT]B|B|s|h|min|ms|days|%)(?!\w))")


def wrap(text: str, columns: int, hang: int = 4,
         keep: "frozenset[str] | set[str] | Callable[[str], bool]" = frozenset()) -> str:
    """``text`` folded at word boundaries to ``columns``, continuation lines indented by its own
    leading spaces plus ``hang`` (so a wrapped finding or assumption still reads as one item).
    A number is never split from its unit ("0.03 GB", "12.3 s"). Lines already short enough,
    table rows (box-drawing characters) and the lines in ``keep``
    (an unreadable file's one-line error, which scripts grep for; a set of lines or a predicate)
    are left alone."""
    import textwrap

    kept = keep if callable(keep) else keep.__contains__
    nb, glue = NB, UNIT_GAP  # textwrap breaks at ASCII whitespace only: a number and its unit stay on one line
    out = []
    for line in text.split("\n"):
        # colour codes take no columns: measure and fold the visible text, then put them back
        plain = _ANSI_CODE.sub("", line) if "\033[" in line else line
        if len(plain) <= columns or kept(line) or any(c in line for c in "│┃┏┗└┡"):
            out.append(line)
            continue
        lead = len(plain) - len(plain.lstrip(" "))

        def _fold(x: str) -> str:
            return textwrap.fill(glue.sub(nb, x[lead:]), columns, initial_indent=" " * lead,
                                 subsequent_indent=" " * (lead + hang), break_on_hyphens=False,
                                 break_long_words=False)  # the indent kept

        folded = _fold(plain)
        if plain is not line:
            painted = [w for w in glue.sub(nb, line[lead:]).split(" ") if w]
            if len(painted) == len(re.findall(r"[^ \n]+", folded)):  # (str.split would split at NB too)
                words = iter(painted)
                folded = re.sub(r"[^ \n]+", lambda m: next(words), folded)
            else:  # the codes could not be matched to words: fold the line as written, codes and all
                folded = _fold(line)
        out.append(folded.replace(nb, " "))
    return "\n".join(out)


def columns(rows: list[tuple[str, ...]], right: tuple[bool, ...] = (), cols: int | None = None,
            gap: int = 2) -> list[str]:
    """``rows`` (the first is the header) laid out in aligned columns, each as wide as its widest
    cell (``right[i]``: right-aligned). A row longer than ``cols`` has its last cell folded at word
    boundaries, the continuation lines starting under that cell (or hanging 4 columns when the
    cell starts past the middle); when fewer than 24 columns are left for it, the whole last cell
    goes on the lines below the row, hanging 4. When even the cells before the last do not fit
    in ``cols``, each row becomes a record (:func:`records`): its first cell, then each other
    cell as "header: value", never split between a header and its value. No line is longer than
    ``cols`` unless one word is."""
    import textwrap

    n = max(len(r) for r in rows)
    w = [max(len(r[i]) for r in rows if i < len(r)) for i in range(n)]
    out: list[str] = []
    head_w = sum(w[:-1]) + gap * (n - 1)
    if cols is not None and head_w > cols:
        return records(rows, cols)
    # the last cells go below their rows (the header's too, so it stays over them) when a row is
    # too long and fewer than 24 columns are left beside the others
    below = cols is not None and cols - head_w < 24 and any(head_w + len(r[-1]) > cols for r in rows if len(r) == n)
    for r in rows:
        head = "".join((c.rjust(w[i]) if i < len(right) and right[i] else c.ljust(w[i])) + " " * gap
                       for i, c in enumerate(r[:-1]))
        last = r[-1] if len(r) == n else ""
        if len(right) >= n and right[n - 1]:
            last = last.rjust(w[n - 1])
        line = (head + last).rstrip()
        if cols is None or (len(line) <= cols and not below) or not last:
            out.append(line)
            continue
        indent = len(head) if len(head) <= cols // 2 else 4
        if below:
            first, rest = "", [last.strip()]
        else:
            first, *rest = textwrap.wrap(last, cols - len(head), break_on_hyphens=False,
                                         break_long_words=False) or [""]
        out.append((head + first).rstrip())
        out.extend(textwrap.wrap(" ".join(rest), cols, initial_indent=" " * indent, subsequent_indent=" " * indent,
                                 break_on_hyphens=False, break_long_words=False))
    return out


def boxed_width(rows: list[tuple[str, ...]], wrap: int | None = None) -> int:
    """Columns a rich box table of ``rows`` (header first; a cell may hold several lines, split at
    "\\n") takes when every column is as wide as its widest line, except column ``wrap``, which
    rich may fold at word boundaries down to its longest word: each column plus 2 of padding and
    1 of border, and the closing border (rich's default ``Table``: padding (0, 1), edges shown)."""
    n = max(len(r) for r in rows)
    w = []
    for i in range(n):
        lines = [x for r in rows if i < len(r) for x in r[i].split("\n")]
        w.append(max((len(t) for x in lines for t in (x.split() or [""])), default=0) if i == wrap
                 else max((len(x) for x in lines), default=0))
    return sum(w) + 3 * n + 1


def table_fits(rows: list[tuple[str, ...]], cols: int | None, wrap: int | None = 0) -> bool:
    """Whether a box table of ``rows`` fits ``cols`` (None: no limit) with no cell cut: every
    column whole but ``wrap`` (default the first, the row's label), folded at its words
    (:func:`boxed_width`). When it does not, the renderer prints :func:`records` instead: a
    narrower box table would cut a header or a value ("capaci…") or split a label from its value."""
    return cols is None or boxed_width(rows, wrap) <= cols


def records(rows: list[tuple[str, ...]], cols: int) -> list[str]:
    """``rows`` (the first is the header) for a screen too narrow for their columns: per row its
    first cell, then "header: value" for each other non-empty cell, folded to ``cols`` between
    those pairs only (a header never ends a line without its value; the last cell's value, often
    prose, folds inside itself too). Continuation lines hang 4 columns."""
    import textwrap

    nb = "\u00a0"  # textwrap breaks at ASCII whitespace only: a no-break space glues a pair
    head, out = rows[0], []
    for r in rows[1:]:
        key = ("#" if head and head[0] == "#" else "") + r[0] if r else ""  # "#1": plan 1
        parts = [key] if key else []  # the row's own label may fold inside itself
        for i in range(1, len(r)):
            if not r[i].strip():
                continue
            label = " ".join((head[i] if i < len(head) else "").split())  # a two-line header: one label
            value = r[i].strip()
            glued = value.replace(" ", nb) if i < len(r) - 1 else UNIT_GAP.sub(nb, value)  # prose may fold
            parts.append((label.replace(" ", nb) + ":" + nb if label else "") + glued)
        text = "  ".join(parts)
        out.extend(x.replace(nb, " ") for x in textwrap.wrap(text, cols, subsequent_indent=" " * 4,
                                                              break_on_hyphens=False, break_long_words=False))
    return out


def paint(word: str, color: bool, style: str | None = None) -> str:
    """``word`` wrapped in the ANSI codes of ``style`` (default: :data:`STYLE` of ``word``) when
    ``color``; else ``word`` unchanged."""
    style = STYLE.get(word, "") if style is None else style
    if not color or not style:
        return word
    codes = ";".join(_ANSI[s] for s in style.split() if s in _ANSI)
    return f"\033[{codes}m{word}\033[0m" if codes else word
