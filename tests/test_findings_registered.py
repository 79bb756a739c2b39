"""Every finding comes from a registered rule, so ``ds-advisor explain CODE`` works for every
code the advisor can print.

The source is read, not run: every ``Finding(...)`` construction outside advisor/findings.py and
the registry itself is refused (findings are made by ``advisor.rules.emit`` or a rule's
``finding``), every ``emit`` names its code as a literal, and every string in the package that
looks like a rule code (a letter and three digits) must be a registered rule. Then ``explain``
is run for each registered code.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.rules import all_rules, emit

PKG = Path(__file__).resolve().parents[1] / "advisor"
CODE = re.compile(r"^[A-Z]\d{3}$")
FACTORIES = {PKG / "findings.py", PKG / "rules" / "__init__.py"}


def _sources():
    for p in sorted(PKG.rglob("*.py")):
        yield p, ast.parse(p.read_text(), filename=str(p))


def _name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def test_findings_are_made_only_through_the_registry():
    bad = [f"{p.relative_to(PKG.parent)}:{n.lineno}" for p, tree in _sources() if p not in FACTORIES
           for n in ast.walk(tree) if isinstance(n, ast.Call) and _name(n) == "Finding"]
    assert not bad, f"Finding(...) built outside advisor.rules.emit: {bad}"


def test_every_emit_names_a_registered_code():
    rules = all_rules()
    seen, bad = set(), []
    for p, tree in _sources():
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and _name(n) == "emit" and p not in FACTORIES:
                arg = n.args[0] if n.args else next((k.value for k in n.keywords if k.arg == "code"), None)
                where = f"{p.relative_to(PKG.parent)}:{n.lineno}"
                if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                    bad.append(f"{where}: code is not a literal")
                elif arg.value not in rules:
                    bad.append(f"{where}: {arg.value} is not registered")
                else:
                    seen.add(arg.value)
    assert not bad, bad
    # the producers outside the rule modules: schema (S), check (K), estimate (M), HF (H)
    assert {"S001", "S003", "K102", "K110", "M090", "M100", "H004", "H006"} <= seen


def test_every_code_literal_in_the_package_is_registered():
    rules = all_rules()
    bad = set()
    for p, tree in _sources():
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and CODE.match(n.value) \
                    and n.value not in rules:
                bad.add(f"{p.relative_to(PKG.parent)}:{n.lineno}: {n.value}")
    assert not bad, sorted(bad)


def test_emit_refuses_an_unregistered_code():
    with pytest.raises(KeyError, match="Q999"):
        emit("Q999", "error", "", "no such rule")


@pytest.mark.parametrize("code", sorted(all_rules()))
def test_explain_works_for_every_registered_code(code):
    r = CliRunner().invoke(main, ["explain", code])
    assert r.exit_code == 0, r.output
    head, _, body = r.output.partition("\n")
    rule = all_rules()[code]
    also = f"; {rule.severity_also}" if rule.severity_also else ""  # where some findings take another severity
    assert head == f"[{code} | {rule.name} | severity: {rule.severity}{also}]"
    assert body.startswith(f"{code} ") and len(body) > 80
