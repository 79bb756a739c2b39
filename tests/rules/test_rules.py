"""Generic fixture-driven runner for the lint rules (tests/rules/fixtures/<CODE>.json).

Each fixture file: {"code": "B001", "cases": [{"name", "config", "world_size"?, "hf"?,
"params"?, "inventory"?, "expect": [{"pointer", "severity"?, "mentions"?}], "absent"?: [pointer...]}]}.
``expect: []`` is a pass case: the rule reports nothing. Only the file's rule is run (``select``),
so other rules cannot make a case pass (schema findings are filtered out). Expected numbers in "mentions" are worked
out by hand in each case's "why".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.model.inventory import Inventory, TensorSpec, from_param_count
from advisor.views.lint import lint_config
from advisor.config.loading import parse_text
from advisor.config.versions import target_release
from advisor.rules import all_rules

FIX = Path(__file__).resolve().parent / "fixtures"
FILES = sorted(FIX.glob("*.json"))
#: Rule families with fixtures here (S: schema, tested in test_schema.py; others own their checks).
MINE = set("BPODAZMLV")


def _cases():
    for f in FILES:
        d = json.loads(f.read_text())
        for c in d["cases"]:
            yield pytest.param(d["code"], c, id=f"{d['code']}-{c['name']}")


def _inventory(c):
    if "params" in c:
        return from_param_count(c["params"])
    if "inventory" in c:
        return Inventory(name="fixture", tensors=[TensorSpec(t["name"], tuple(t["shape"]), t.get("trainable", True),
                                                             t.get("group", 0)) for t in c["inventory"]])
    return None


@pytest.mark.parametrize("code,case", list(_cases()))
def test_rule_fixture(code, case):
    loaded = parse_text(json.dumps(case["config"]), "fixture.json")
    ws = case.get("world_size")
    got = lint_config(loaded, world_size=ws, world_size_source="--world-size" if ws else None,
                      inventory=_inventory(case), hf=case.get("hf", False), select={code},
                      release=target_release(case["release"]) if "release" in case else None)
    got = [f for f in got if f.code == code]  # schema findings are not subject to select
    if not case["expect"]:
        assert got == [], [f.to_dict() for f in got]
    for e in case["expect"]:
        hits = [f for f in got if f.pointer == e["pointer"]]
        assert hits, f"no {code} finding at {e['pointer']}; got {[f.to_dict() for f in got]}"
        f = hits[0]
        if "severity" in e:
            assert f.severity == e["severity"], f.to_dict()
        for m in e.get("mentions", []):
            assert m in f.message or m in f.fix, (m, f.to_dict())
        assert f.message and "\n" not in f.message and f.fix, f.to_dict()
    assert len(got) == len(case["expect"]) or case.get("at_least"), [f.to_dict() for f in got]


def test_every_rule_has_fixtures_and_explanation():
    codes = {json.loads(f.read_text())["code"] for f in FILES}
    mine = {c for c, r in all_rules().items() if c[0] in MINE and r.produced_by is None}
    assert mine <= codes, f"rules without fixtures: {sorted(mine - codes)}"
    for code, cls in all_rules().items():
        if code[0] not in MINE:
            continue
        text = cls.explanation()
        assert text.startswith(code), code
        assert "Anti-pattern" in text and "Fix" in text, code
        assert cls.severity in ("error", "warning", "info") and cls.name


def test_fixtures_have_pass_and_fail_cases():
    for f in FILES:
        d = json.loads(f.read_text())
        assert any(c["expect"] for c in d["cases"]), f.name
        assert any(not c["expect"] for c in d["cases"]), f.name
