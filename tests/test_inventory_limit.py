"""Issue 21: an inventory listing more than MAX_TENSORS tensors is refused before its JSON is
parsed into objects (a 64 MiB file of 4.8M ``{"shape": [1]}`` took 1.5 GB to parse before
the count was checked), with the same one-line message the parsed inventory gets.

``readers.list_length_at`` is checked against ``json.loads`` itself on random documents."""

from __future__ import annotations

import json
import random

import pytest

from advisor.config import readers
from advisor.errors import ModelSpecError
from advisor.model import inventory, specs


def _value(rng: random.Random, depth: int):
    kind = rng.randrange(8 if depth < 4 else 4)
    if kind == 0:
        return rng.randint(-5, 5)
    if kind == 1:
        return rng.choice(["tensors", "{[", "x\"}", ""])
    if kind == 2:
        return rng.choice([True, None, 1.5])
    if kind == 3:
        return []
    if kind in (4, 5):
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    d = {rng.choice(["tensors", "shape", "a", "{"]): _value(rng, depth + 1) for _ in range(rng.randrange(4))}
    return d


@pytest.mark.parametrize("seed", range(300))
def test_list_length_at_equals_the_parsed_length(seed: int) -> None:
    rng = random.Random(seed)
    doc = _value(rng, 0) if seed % 3 else {"tensors": [_value(rng, 1) for _ in range(rng.randrange(6))],
                                          "meta": _value(rng, 1)}
    text = json.dumps(doc, indent=rng.choice([None, 1]))
    want = len(doc["tensors"]) if isinstance(doc, dict) and isinstance(doc.get("tensors"), list) else None
    assert readers.list_length_at(text, "tensors") == want


@pytest.mark.parametrize("text", ['{"tensors": [{}, {}', '{"tensors": [NaN]}', '{"tensors": [1e999]}',
                                  "[" * 300 + "]" * 300, '{"tensors": {}}', '[{"tensors": [1]}]'])
def test_list_length_at_leaves_what_parse_json_refuses_or_no_list_to_it(text: str) -> None:
    assert readers.list_length_at(text, "tensors") is None


def _inventory_text(n: int) -> str:
    return json.dumps({"name": "x", "tensors": [{"name": f"w{i}", "shape": [2, 3]} for i in range(n)]})


def test_over_the_limit_is_refused_before_the_parse(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(inventory, "MAX_TENSORS", 10)
    over = tmp_path / "over.json"
    over.write_text(_inventory_text(11))
    # the message a parsed inventory gets from from_dict
    with pytest.raises(ModelSpecError) as parsed:
        inventory.from_dict(json.loads(over.read_text()), str(over))
    assert str(parsed.value) == f"{over}: /tensors: 11 tensors, over the limit 10"

    def no_parse(*a, **k):
        raise AssertionError("parsed into objects before the tensor count was checked")

    monkeypatch.setattr(readers, "parse_json", no_parse)
    for load in (specs.resolve_model, inventory.load_inventory):
        with pytest.raises(ModelSpecError) as early:
            load(str(over))
        assert str(early.value) == str(parsed.value)


def test_at_the_limit_is_read_as_before(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(inventory, "MAX_TENSORS", 10)
    at = tmp_path / "at.json"
    at.write_text(_inventory_text(10))
    inv = specs.resolve_model(str(at))
    assert [(t.name, t.shape) for t in inv.tensors] == [(f"w{i}", (2, 3)) for i in range(10)]
    # not objects: refused at the first entry, before the parse (tests/robustness/test_inventory_entries_early.py)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"tensors": [1] * 11}))
    with pytest.raises(ModelSpecError, match=r"/tensors/0: expected an object$"):
        specs.resolve_model(str(bare))
