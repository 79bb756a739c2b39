"""A rule's reStructuredText docstring as terminal text (``ds-advisor explain``) or Markdown
(SARIF ``help.markdown``).

The docstrings are written in a small subset of RST: ``inline literals``, *emphasis*,
**strong**, roles
(``:func:`name```), ``*`` bullets and literal blocks introduced by ``::``. :func:`rst_text`
renders that subset with no markup characters left on the page: literals plain (bold cyan on a
colour terminal), emphasis plain (italic), a paragraph's closing ``::`` as ``:``, and a lone
``::`` line dropped; everything else, indentation included, is kept as written.
:func:`rst_markdown` reads the same subset (one reader, :func:`_parts`) and writes Markdown:
literals and roles as code spans, emphasis as ``*emphasis*``, literal blocks fenced.
"""

from __future__ import annotations

import re

_LITERAL = re.compile(r"``(.+?)``", re.S)
_EMPHASIS = re.compile(r"(?<![\w*])\*(?!\s)([^*\n]+?)(?<!\s)\*(?![\w*])")
_ROLE = re.compile(r":[a-z]+:`([^`]+)`")
_STRONG = re.compile(r"(?<![\w*])\*\*(?!\s)([^*\n]+?)(?<!\s)\*\*(?![\w*])")


def _role_target(m: re.Match) -> str:
    t = m.group(1)
    return t.lstrip("~").rsplit(".", 1)[-1] if t.startswith("~") else t


def _parts(doc: str) -> list[tuple[str, list[str]]]:
    """``doc`` as runs of ("text", lines) and ("literal", lines): a literal block is the indented
    lines after a line ending in ``::`` (RST), up to the first line indented no deeper than that
    line's text (a bullet's text starts 2 columns in). The ``::`` itself is already rewritten: a paragraph's closing ``::`` as ``:``, a lone
    ``::`` line dropped."""
    parts: list[tuple[str, list[str]]] = []

    def add(kind: str, line: str) -> None:
        if parts and parts[-1][0] == kind:
            parts[-1][1].append(line)
        else:
            parts.append((kind, [line]))

    block_at: int | None = None  # indent of the line that opened a literal block
    in_block = False
    for line in doc.splitlines():
        indent = len(line) - len(line.lstrip())
        if block_at is not None and line.strip():
            if indent > block_at:
                in_block = True
            else:
                block_at, in_block = None, False
        if in_block or (block_at is not None and not line.strip() and parts and parts[-1][0] == "literal"):
            add("literal", line)
            continue
        if line.strip() == "::":
            block_at = indent
            continue
        if line.rstrip().endswith("::"):
            line = line.rstrip()[:-1]
            block_at = indent + (2 if line.lstrip().startswith("* ") else 0)  # a bullet's text is 2 in
        add("text", line)
    return parts


_BULLETS = ("* ", "- ")


def _paragraphs(lines: list[str]) -> list[str]:
    """The prose ``lines`` as one line per paragraph or bullet item (blank lines kept): a source
    hard-wrapped at 100 columns refills to any width, instead of each of its lines folding alone
    (at 60 columns every second line came out a ragged stub). An item starts at a blank line's
    end, at a bullet, or where the indentation changes outside a bullet's continuation."""
    out: list[str] = []
    bullet_at: int | None = None  # the indent of the current bullet's text
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if not line.strip():
            out.append("")
            bullet_at = None
            continue
        if line.lstrip().startswith(_BULLETS):
            out.append(line.rstrip())
            bullet_at = indent + 2
            continue
        prev = out[-1] if out else ""
        prev_indent = len(prev) - len(prev.lstrip())
        joins = prev.strip() and (indent == bullet_at if bullet_at is not None else indent == prev_indent)
        if joins:
            out[-1] = prev.rstrip() + " " + line.strip()
        else:
            out.append(line.rstrip())
            bullet_at = None
    return out


def rst_text(doc: str, color: bool = False, cols: int | None = None) -> str:
    """``doc`` (the RST subset above) as plain text; with ``color``, literals bold cyan, strong
    bold and emphasis italic (ANSI). With ``cols``, prose is folded to that width (continuation
    lines 2 columns in, under a bullet's text; :func:`advisor.render.style.wrap`); literal blocks
    (quoted code and config) are always kept verbatim."""
    from advisor.render.style import wrap

    lit = (lambda m: f"\033[1;36m{m.group(1)}\033[0m") if color else (lambda m: m.group(1))
    emph = (lambda m: f"\033[3m{m.group(1)}\033[0m") if color else (lambda m: m.group(1))
    strong = (lambda m: f"\033[1m{m.group(1)}\033[0m") if color else (lambda m: m.group(1))
    out: list[str] = []
    for kind, lines in _parts(doc):
        text = "\n".join(lines)
        if kind == "text":
            text = _ROLE.sub(_role_target, text)
            if cols:  # refill each paragraph and bullet to cols, then drop the markup: no line grows past cols
                text = "\n".join(wrap(x, cols, hang=2 if x.lstrip().startswith(_BULLETS) else 0)
                                  for x in _paragraphs(lines))
            text = _LITERAL.sub(lit, _EMPHASIS.sub(emph, _STRONG.sub(strong, text)))
        out.append(text)
    return "\n".join(out)


def _code_span(s: str) -> str:
    s = " ".join(s.split())
    return f"`` {s} ``" if "`" in s else f"`{s}`"


def rst_markdown(doc: str) -> str:
    """``doc`` (the RST subset above) as Markdown (CommonMark): inline literals and roles as code
    spans, ``*emphasis*`` kept, each literal block fenced (````` ``` `````, dedented)."""
    import textwrap

    out: list[str] = []
    for kind, lines in _parts(doc):
        if kind == "literal":
            while lines and not lines[-1].strip():
                lines = lines[:-1]
            out += ["```", textwrap.dedent("\n".join(lines)).strip("\n"), "```", ""]
            continue
        text = "\n".join(line.strip() if not line.lstrip().startswith("* ") else line for line in lines)
        text = _ROLE.sub(lambda m: _code_span(_role_target(m)), text)
        out.append(_LITERAL.sub(lambda m: _code_span(m.group(1)), text))
    return "\n".join(out).strip("\n") + "\n"
