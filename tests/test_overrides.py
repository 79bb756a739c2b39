"""--set KEY.PATH=VALUE (advisor.config.overrides) and the computed fixes it lets a user try.

A finding whose fix names a value carries it as ``data["set"]`` (the --set strings). Each such
fix, applied to its rule fixture's config, must make that finding go away: the fix is the value
the rule itself computed, not a generic hint. (The M001 fix is also proven on the real engine:
tests/engine/test_nvme_param_buffer.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.config.overrides import apply_overrides, parse_override
from advisor.config.validation import InputValueError
from tests.conftest import run_cli, run_json
from tests.rules.test_rules import FIX, _produce

FIXED_CODES = ("B001", "C001", "M001", "M002", "M003", "M004", "O006", "O008")


def test_parse_reads_json_else_string():
    assert parse_override("zero_optimization.stage=3") == (["zero_optimization", "stage"], 3)
    assert parse_override("a=5e8") == (["a"], 5e8)
    assert parse_override("a.b=true") == (["a", "b"], True)
    assert parse_override('a={"device": "cpu"}') == (["a"], {"device": "cpu"})
    assert parse_override("optimizer.type=AdamW") == (["optimizer", "type"], "AdamW")
    assert parse_override("a=") == (["a"], "")


@pytest.mark.parametrize("bad", ["noequals", "=3", "a..b=1", "a.=1", "a=NaN", "a=Infinity"])
def test_malformed_is_one_line(bad):
    with pytest.raises(InputValueError) as e:
        parse_override(bad)
    assert "\n" not in str(e.value) and "--set" in str(e.value)


def test_apply_creates_objects_and_leaves_the_input_alone():
    d = {"zero_optimization": {"stage": 2}}
    out = apply_overrides(d, ["zero_optimization.stage=3", "zero_optimization.offload_param.device=cpu"])
    assert out == {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}
    assert d == {"zero_optimization": {"stage": 2}}
    with pytest.raises(InputValueError, match="zero_optimization.stage is 2, not an object"):
        apply_overrides(d, ["zero_optimization.stage.x=1"])


def _fail_cases():
    for code in FIXED_CODES:
        for c in json.loads((FIX / f"{code}.json").read_text())["cases"]:
            if c["expect"]:
                yield pytest.param(code, c, id=f"{code}-{c['name']}")


@pytest.mark.parametrize("code,case", list(_fail_cases()))
def test_each_computed_fix_applied_clears_its_finding(code, case, tmp_path):
    got = [f for f in _produce(code, case, tmp_path) if f.code == code and f.data.get("set")]
    for f in got:
        fixed = dict(case, config=apply_overrides(case["config"], f.data["set"]))
        again = [g for g in _produce(code, fixed, tmp_path) if g.code == code and g.pointer == f.pointer]
        assert again == [], (f.data["set"], [g.to_dict() for g in again])


def test_every_fixed_code_has_a_case_with_a_computed_fix(tmp_path):
    seen = {code for code, c in ((p.values[0], p.values[1]) for p in _fail_cases())
            if any(f.code == code and f.data.get("set") for f in _produce(code, c, tmp_path))}
    assert seen == set(FIXED_CODES)


def test_lint_set_tries_the_fix_without_editing(tmp_path):
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": str(tmp_path),
                                                               "buffer_size": 1000000}}}
    p = tmp_path / "ds.json"
    p.write_text(json.dumps(cfg))
    base = ["lint", str(p), "--model", "gpt2", "--world-size", "1", "--select", "M001", "--format", "json"]
    rc, out = run_json(base)
    (m001,) = out["files"][0]["findings"]
    assert rc == 1
    # gpt2's embedding 50257 x 768 = 38,597,376 elements, one partition at world size 1
    assert m001["data"]["largest_partition"] == 50257 * 768
    rc, out = run_json(base + [a for s in m001["data"]["set"] for a in ("--set", s)])
    assert rc == 0 and out["files"][0]["findings"] == []
    assert json.loads(p.read_text()) == cfg


def test_estimate_set_equals_the_edited_file(tmp_path):
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(cfg))
    b.write_text(json.dumps({**cfg, "zero_optimization": {"stage": 3}}))
    common = ["--params", "1000000000", "--world-size", "8", "--seq-len", "512", "--format", "json"]
    _, via_set = run_json(["estimate", str(a), "--set", "zero_optimization.stage=3", *common])
    _, edited = run_json(["estimate", str(b), *common])
    strip = lambda d: json.loads(json.dumps(d).replace(str(a), "X").replace(str(b), "X"))  # noqa: E731
    assert strip(via_set) == strip(edited)


def test_bad_set_is_exit_2():
    p = run_cli(["lint", "-", "--set", "zero_optimization"], stdin="{}")
    assert p.returncode == 2 and "--set" in p.stderr and "Traceback" not in p.stderr


def _corpus_and_case_configs():
    from tests.conftest import CASES
    corpus = Path(__file__).resolve().parent / "data" / "corpus"
    for p in sorted(corpus.iterdir()) + sorted(CASES.glob("*/*.json")):
        if p.name not in ("MANIFEST.tsv", "expect.json") and p.is_file():
            yield p


def test_every_computed_fix_on_the_corpus_and_cases_clears_its_finding():
    """Property (issue 19): each computed fix (a finding's data["set"]) found on the public-corpus
    configs and the user-report cases, applied with advisor.config.overrides, makes that rule's
    finding at that key go away (one model with a 128,256-token embedding, world sizes 1 and 8).
    A fix that is one short (M004 asked for 2 buffers, then 3) fails here."""
    import dataclasses

    from advisor.config.loading import load_config
    from advisor.errors import AdvisorError
    from advisor.model.specs import resolve_model
    from advisor.views.lint import lint_config

    inv = resolve_model("llama-3-8b")
    tried: set[str] = set()
    for p in _corpus_and_case_configs():
        try:
            loaded = load_config(str(p))
        except AdvisorError:
            continue  # an unreadable corpus file has no findings to fix
        hf = '"auto"' in loaded.text
        for ws in (1, 8):
            for f in lint_config(loaded, world_size=ws, inventory=inv, hf=hf):
                if not f.data.get("set"):
                    continue
                tried.add(f.code)
                fixed = dataclasses.replace(loaded, data=apply_overrides(loaded.data, f.data["set"]))
                again = [g for g in lint_config(fixed, world_size=ws, inventory=inv, hf=hf)
                         if g.code == f.code and g.pointer == f.pointer]
                assert again == [], (p.name, ws, f.data["set"], [g.message for g in again])
    assert {"B001", "C001", "M001", "M002"} <= tried, tried


def test_set_echo_escapes_an_undecodable_byte_once():
    # newcomer D10: --set with a byte that is not UTF-8 (argv: surrogate \udcff) echoed '\\udcff'
    # (escaped twice) beside '\x1b[2J' (escaped once). Both must read as one escape, no raw ESC.
    import os
    from tests.conftest import SAMPLES, run_cli

    arg = os.fsdecode(b"zero_optimization.\xff\x1b[2J=1")
    p = run_cli(["lint", str(SAMPLES / "zero2.json"), "--set", arg])
    assert p.returncode == 2 and "\x1b" not in p.stderr
    assert "--set 'zero_optimization.\\udcff\\x1b[2J=1'" in p.stderr, p.stderr
    assert "\\\\udcff" not in p.stderr
