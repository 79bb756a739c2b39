"""Architecture rules, read from the source with ``ast`` (nothing is imported):

* no import cycles inside ``advisor/`` (imports inside functions count: a lazy import that
  closes a circle still couples the modules);
* ``click`` is imported only by the command line (``advisor/cli.py``); compute modules and
  views take plain values.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "advisor"


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = p
    return out


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module -> advisor modules it imports, module -> top-level packages it imports)."""
    mods = _modules()

    def target(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    tops: dict[str, set[str]] = {}
    for m, p in mods.items():
        base = m if p.name == "__init__.py" else m.rpartition(".")[0]
        deps: set[str] = set()
        top: set[str] = set()
        for n in ast.walk(ast.parse(p.read_text(), str(p))):
            names: list[str] = []
            if isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                if n.level:
                    b = base
                    for _ in range(n.level - 1):
                        b = b.rpartition(".")[0]
                    name = f"{b}.{n.module}" if n.module else b
                else:
                    name = n.module or ""
                names = [name] + [f"{name}.{a.name}" for a in n.names]
            for name in names:
                top.add(name.split(".")[0])
                t = target(name)
                if t and t != m and not m.startswith(t + "."):  # a package's own __init__ is not a cycle
                    deps.add(t)
        graph[m], tops[m] = deps, top
    return graph, tops


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = counter
                counter += 1
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(graph.get(w, ())))))
            elif w in on:
                low[v] = min(low[v], index[w])
    return out


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    graph, _ = _graph()
    assert "advisor.plan" in graph and "advisor.ledger.state" in graph
    assert _cycles(graph) == []


def test_click_only_in_the_cli():
    _, tops = _graph()
    users = sorted(m for m, t in tops.items() if "click" in t)
    assert users == ["advisor.cli"], users
