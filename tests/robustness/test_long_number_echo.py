"""Issue 21 leftover: a config value of thousands of digits (a JSON integer may have 4,300, the
most Python's ``int()`` reads) was echoed whole by findings' messages and fixes (Z004's
allgather_bucket_size, M003's reduce_bucket_size), by ``estimate --explain``'s formulas, by the
estimate/check text, GitHub annotations, SARIF and the HTML report. Every output now passes
through ``errors.cut_numbers`` once (``render.render``, ``cli._fail`` / ``_say``, the report's
HTML): a number printed longer than ``errors.MAX_ECHO_CHARS`` is its first 60 characters and how
many it had (``errors.cut``). JSON numbers (data) keep every digit."""

from __future__ import annotations

import json
import re

import pytest

from advisor.errors import MAX_ECHO_CHARS, cut, cut_numbers, cut_numbers_in_json
from tests.robustness.robust_helpers import run_cli

#: 4,000 nines: under Python's 4,300-digit limit, so the config parses and rules echo it.
BIG = int("9" * 4000)
#: Any run of more than MAX_ECHO_CHARS digits (with or without thousands separators) in an output.
LONG_RUN = re.compile(r"\d(?:,?\d){%d,}" % MAX_ECHO_CHARS)


def test_cut_numbers_by_hand():
    # plain digits, thousands-grouped digits; short numbers and words untouched
    plain = "7" * 100
    grouped = f"{10**90:,}"  # 91 digits + 30 commas = 121 characters
    text = f"a {plain} b {grouped} c 123,456,789 d 12345"
    out = cut_numbers(text)
    assert out == f"a {'7' * 60}... (100 characters) b {grouped[:60]}... (121 characters) c 123,456,789 d 12345"
    assert out == f"a {cut(plain)} b {cut(grouped)} c 123,456,789 d 12345"
    # exactly MAX_ECHO_CHARS digits is echoed whole (cut's own limit)
    assert cut_numbers("5" * MAX_ECHO_CHARS) == "5" * MAX_ECHO_CHARS
    assert cut_numbers("5" * (MAX_ECHO_CHARS + 1)) == "5" * 60 + f"... ({MAX_ECHO_CHARS + 1} characters)"


def test_cut_numbers_in_json_keeps_numbers_and_parses():
    doc = json.dumps({"message": "size " + "8" * 100, "bytes": int("8" * 100), "quote": 'a "q" ' + "9" * 70})
    out = json.loads(cut_numbers_in_json(doc))
    assert out["bytes"] == int("8" * 100)  # data keeps every digit
    assert out["message"] == "size " + "8" * 60 + "... (100 characters)"
    assert out["quote"] == 'a "q" ' + "9" * 60 + "... (70 characters)"


@pytest.fixture(scope="module")
def big_configs(tmp_path_factory):
    d = tmp_path_factory.mktemp("bignum")
    z2 = d / "z2.json"  # Z004 (odd allgather bucket) and M003 (reduce bucket too large) echo the values
    z2.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1,
                              "zero_optimization": {"stage": 2, "reduce_bucket_size": BIG,
                                                    "allgather_bucket_size": BIG}}))
    mb = d / "mb.json"  # B002's batch figures
    mb.write_text(json.dumps({"train_micro_batch_size_per_gpu": BIG, "gradient_accumulation_steps": BIG}))
    return d


CASES = [
    ("z2", ["lint", "{f}"]),
    ("z2", ["lint", "{f}", "--format", "sarif"]),
    ("z2", ["lint", "{f}", "--format", "github"]),
    ("z2", ["estimate", "{f}", "--model", "gpt2", "--seq-len", "128", "--explain"]),
    ("z2", ["estimate", "{f}", "--model", "gpt2", "--seq-len", "128", "--format", "json"]),
    ("z2", ["check", "{f}", "--model", "gpt2", "--seq-len", "128", "--gpu-memory", "80GB", "--host-memory", "1TB"]),
    ("z2", ["checkpoint", "{f}", "--model", "gpt2"]),
    ("mb", ["check", "{f}", "--model", "gpt2", "--seq-len", "128", "--gpu-memory", "80GB", "--host-memory", "1TB"]),
    ("mb", ["estimate", "{f}", "--model", "gpt2", "--seq-len", "128", "--format", "json"]),
]


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


@pytest.mark.parametrize("name,args", CASES, ids=[" ".join(a[:1] + a[2:]) + f" [{n}]" for n, a in CASES])
def test_no_output_echoes_a_long_number(big_configs, name, args):
    f = str(big_configs / f"{name}.json")
    p = run_cli([a.replace("{f}", f) for a in args])
    assert p.returncode in (0, 1, 4), p.stderr[-2000:]
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr
    assert "characters)" in p.stdout + p.stderr  # the value is there, cut
    if "json" in args or "sarif" in args:
        doc = json.loads(p.stdout)  # still JSON
        assert not any(LONG_RUN.search(s) for s in _strings(doc))
    else:
        assert not LONG_RUN.search(p.stdout + p.stderr), LONG_RUN.search(p.stdout + p.stderr).group(0)[:80]


def test_report_html_cuts_long_numbers(big_configs, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.html"
    p = run_cli(["report", str(big_configs / "z2.json"), "--model", "gpt2", "--seq-len", "128", "-o", str(out)])
    assert p.returncode == 0, p.stderr[-2000:]
    html = out.read_text()
    assert "characters)" in html
    assert not LONG_RUN.search(html)


# ---- long words: a tensor name of 100,000 characters from an inventory --------------------------

def test_cut_echoes_cuts_long_words_by_hand():
    from advisor.errors import MAX_WORD_ECHO_CHARS, cut_echoes
    name = "x" * 100_000
    assert cut_echoes(f"a {name} b") == f"a {'x' * MAX_WORD_ECHO_CHARS}... (100000 characters) b"
    assert cut_echoes("p" * MAX_WORD_ECHO_CHARS) == "p" * MAX_WORD_ECHO_CHARS  # at the limit: whole
    doc = json.dumps({"formula": f"= 8 ({name}'s gradient)", "esc": 'q"' + "y" * 700})
    out = json.loads(cut_numbers_in_json(doc))
    assert out["formula"] == f"= 8 {cut('(' + name + chr(39) + 's', MAX_WORD_ECHO_CHARS)} gradient)"
    assert out["formula"] == f"= 8 ({'x' * (MAX_WORD_ECHO_CHARS - 1)}... (100003 characters) gradient)"
    assert out["esc"] == cut('q"' + "y" * 700, MAX_WORD_ECHO_CHARS)  # decoded, cut, encoded: the escape intact


@pytest.mark.parametrize("fmt", ["json", "text", "sarif"])
def test_long_tensor_name_is_echoed_cut(tmp_path, fmt):
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"tensors": [{"name": "x" * 100_000, "shape": [64, 64]}, {"name": "b", "shape": [64]}]}))
    cfg = tmp_path / "z3.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}))
    p = run_cli(["estimate", str(cfg), "--model", str(inv), "--format", fmt])
    assert p.returncode in (0, 1), p.stderr[-2000:]
    if fmt != "text":
        json.loads(p.stdout)
    assert "x" * 1000 not in p.stdout + p.stderr
    if fmt == "json":  # the ZeRO-3 reduce formula names the tensor: cut, not dropped
        assert "x" * 600 + "... (" in p.stdout
