"""An inventory's refusals say what a bad ``tensors`` entry is, not "tensors" (#21 follow-up): a list of
numbers, strings, nulls or arrays is named by its first bad entry -- the file, the index, what the entry is
in JSON's words and what an entry must be -- and a too-long list is counted in "entries". The kind is said
the same whether the counting scan (``readers.object_list_scan_kind``, from the entry's first character) or
the parse (``from_dict``, from the value) finds it."""

from __future__ import annotations

import json
import random

import pytest

from advisor.config import readers
from advisor.config.validation import json_kind
from advisor.errors import ModelSpecError
from advisor.model import inventory, specs

MUST = 'expected an object (one tensor, e.g. {"name": "w", "shape": [64, 64]}), got '
#: JSON text of an entry -> what it is, written by hand.
CASES = [("1", "a number"), ("-0.5e3", "a number"), ('"w.weight"', "a string"), ("null", "null"),
         ("true", "true"), ("false", "false"), ("[64, 64]", "an array"), ("[]", "an array"), ('"{}"', "a string")]


@pytest.mark.parametrize("entry, kind", CASES)
@pytest.mark.parametrize("limit", [10, None])  # None: the real limit, so the file is parsed, not scanned
def test_a_bad_entry_is_named_by_file_index_kind_and_what_it_must_be(tmp_path, monkeypatch, entry, kind, limit):
    if limit:
        monkeypatch.setattr(inventory, "MAX_TENSORS", limit)
    f = tmp_path / "inv.json"
    entries = ['{"shape": [2]}'] * 4 + [entry] * 11
    f.write_text('{"tensors": [' + ", ".join(entries) + "]}")
    for load in (inventory.load_inventory, specs.resolve_model):
        with pytest.raises(ModelSpecError) as e:
            load(str(f))
        msg = str(e.value)
        assert msg == f"{f}: /tensors/4: {MUST}{kind}"
        assert "\n" not in msg and " tensors" not in msg.split(": ", 2)[2]


def test_the_cli_says_it_in_one_line_exit_2(tmp_path):
    from tests.conftest import run_cli
    f = tmp_path / "inv.json"
    f.write_text('{"tensors": [{"shape": [2]}, 7, 8]}')
    cfg = tmp_path / "ds.json"
    cfg.write_text('{"train_batch_size": 8, "zero_optimization": {"stage": 2}}')
    p = run_cli(["estimate", str(cfg), "--model", str(f)])
    assert p.returncode == 2, p.stderr[-500:]
    assert p.stderr.strip() == f"ds-advisor: {f}: /tensors/1: {MUST}a number" and p.stdout == ""


def test_a_list_over_the_limit_is_counted_in_entries_not_tensors(tmp_path, monkeypatch):
    monkeypatch.setattr(inventory, "MAX_TENSORS", 3)
    with pytest.raises(ModelSpecError) as e:
        inventory.from_dict({"tensors": [1, 2, 3, 4, 5]}, "f.json")
    assert str(e.value) == "f.json: /tensors: 5 entries, over the limit of 3 tensors"


@pytest.mark.parametrize("doc, words", [
    ([1], "f.json: expected an object with a non-empty 'tensors' list (an inventory), got an array"),
    ({"name": "x"}, "f.json: an inventory needs a non-empty 'tensors' list; there is no 'tensors' key"),
    ({"tensors": 3}, "f.json: /tensors: expected a non-empty array of tensor objects, got a number"),
    ({"tensors": "w"}, "f.json: /tensors: expected a non-empty array of tensor objects, got a string"),
    ({"tensors": None}, "f.json: /tensors: expected a non-empty array of tensor objects, got null"),
    ({"tensors": []}, "f.json: /tensors: expected a non-empty array of tensor objects, got an empty array"),
    ({"tensors": {"shape": [1]}}, "f.json: /tensors: expected a non-empty array of tensor objects, got an object"),
])
def test_the_document_and_list_refusals_say_what_was_found(doc, words):
    with pytest.raises(ModelSpecError) as e:
        inventory.from_dict(doc, "f.json")
    assert str(e.value) == words


def _value(rng: random.Random, depth: int = 0):
    k = rng.randrange(8 if depth < 2 else 6)
    return [lambda: None, lambda: True, lambda: False, lambda: rng.randint(-10**6, 10**6),
            lambda: rng.uniform(-1e3, 1e3), lambda: "".join(rng.choice('ab"\\{[') for _ in range(rng.randrange(4))),
            lambda: [_value(rng, depth + 1) for _ in range(rng.randrange(3))],
            lambda: {"k": _value(rng, depth + 1)}][k]()


@pytest.mark.parametrize("seed", range(40))
def test_the_scans_kind_is_the_parsed_values(seed):
    """object_list_scan_kind reads the first bad entry's kind from text; json_kind from json.loads' value of the
    same text: equal on random lists (objects nested past the regex too, so the windowed scan is read)."""
    rng = random.Random(seed)
    deep = '{"a":{"a":{"a":{"a":{"a":{"a":{}}}}}}}'
    objs = [rng.choice(['{"shape": [1]}', deep]) for _ in range(rng.randrange(5))]
    bad = _value(rng)
    while isinstance(bad, dict):
        bad = _value(rng)
    text = '{"tensors": [' + ", ".join(objs + [json.dumps(bad), '{"shape": [1]}']) + "]}"
    i, n, kind = readers.object_list_scan_kind(text, "tensors")
    parsed = json.loads(text)["tensors"]
    assert (i, n) == (len(objs), None)
    assert kind == json_kind(parsed[i]), (text, kind)


def test_generates_limit_does_not_call_numbers_parameter_tensors(tmp_path, monkeypatch):
    """generate's own limit counts the list before its entries are built; a list over it whose entries are not
    all objects is refused at its first bad entry, not as "N parameter tensors"."""
    from advisor.config import validation
    monkeypatch.setattr(validation, "MAX_GENERATE_TENSORS", 3)
    arch = {"family": "llama", "hidden_size": 64, "num_layers": 1, "num_heads": 4, "num_kv_heads": 4,
            "intermediate_size": 128, "vocab_size": 100, "max_seq_len": 128}
    f = tmp_path / "inv.json"
    f.write_text(json.dumps({"meta": arch, "tensors": [{"shape": [2]}, None, 1, 2]}))
    with pytest.raises(ModelSpecError) as e:
        specs.resolve_model(str(f), architecture=True)
    assert str(e.value) == f"{f}: /tensors/1: {MUST}null"
    f.write_text(json.dumps({"meta": arch, "tensors": [{"shape": [2]}] * 4}))  # all objects: the limit's words
    with pytest.raises(ModelSpecError, match=r"4 parameter tensors, over generate's limit of 3 "):
        specs.resolve_model(str(f), architecture=True)
