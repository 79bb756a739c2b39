"""``ds-advisor explain``: a rule's reStructuredText docstring as terminal text.

The docstrings are written in a small subset of RST: ``inline literals``, *emphasis*, ``*``
bullets and literal blocks introduced by ``::``. This renders that subset (no markup characters
left on the page): literals plain (bold cyan on a colour terminal), emphasis plain (italic), a
paragraph's closing ``::`` as ``:``, and a lone ``::`` line dropped; everything else, indentation
included, is kept as written.
"""

from __future__ import annotations

import re

_LITERAL = re.compile(r"``(.+?)``", re.S)
_EMPHASIS = re.compile(r"(?<![\w*])\*(?!\s)([^*\n]+?)(?<!\s)\*(?![\w*])")
_ROLE = re.compile(r":[a-z]+:`([^`]+)`")


def rst_text(doc: str, color: bool = False) -> str:
    """``doc`` (the RST subset above) as plain text; with ``color``, literals bold cyan and
    emphasis italic (ANSI)."""
    lit = (lambda m: f"\033[1;36m{m.group(1)}\033[0m") if color else (lambda m: m.group(1))
    emph = (lambda m: f"\033[3m{m.group(1)}\033[0m") if color else (lambda m: m.group(1))
    out: list[str] = []
    for line in doc.splitlines():
        if line.strip() == "::":
            continue
        if line.rstrip().endswith("::"):
            line = line.rstrip()[:-1]
        line = _ROLE.sub(lambda m: m.group(1).lstrip("~").rsplit(".", 1)[-1] if m.group(1).startswith("~")
                         else m.group(1), line)
        out.append(_EMPHASIS.sub(emph, line))
    return _LITERAL.sub(lit, "\n".join(out))
