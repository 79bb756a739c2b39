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
    assert str(parsed.value) == f"{over}: /tensors: 11 entries, over the limit of 10 tensors"

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
    with pytest.raises(ModelSpecError, match=r"/tensors/0: expected an object \(one tensor.*\), got a number$"):
        specs.resolve_model(str(bare))


def _list_file(path, n: int, entry: str) -> None:
    with path.open("w") as out:  # joined per piece: no n-element list of entries held at once
        out.write('{"tensors": [' + entry)
        for _ in range((n - 1) // 100_000):
            out.write(("," + entry) * 100_000)
        out.write(("," + entry) * ((n - 1) % 100_000) + "]}")


def test_the_real_limit_takes_max_tensors_and_refuses_one_more(tmp_path) -> None:
    """At the limit itself (500,000 since issue 21's maxt21, not a patched 10): MAX_TENSORS nameless
    tensors are read; MAX_TENSORS + 1 are refused, as objects (counted before the parse), as objects
    nested six deep (past the scan's regex: read window by window) and as lists (at the first entry)."""
    n = inventory.MAX_TENSORS
    at = tmp_path / "at.json"
    _list_file(at, n, '{"shape": [1]}')
    assert len(specs.resolve_model(str(at)).tensors) == n
    for entry in ('{"shape": [1]}', '{"a":{"a":{"a":{"a":{"a":{}}}}}}'):
        over = tmp_path / "over.json"
        _list_file(over, n + 1, entry)
        with pytest.raises(ModelSpecError) as e:
            specs.resolve_model(str(over))
        assert str(e.value) == f"{over}: /tensors: {n + 1:,} entries, over the limit of {n:,} tensors"
    lists = tmp_path / "lists.json"
    _list_file(lists, n + 1, "[1]")
    with pytest.raises(ModelSpecError, match=r"/tensors/0: expected an object \(one tensor.*\), got an array$"):
        specs.resolve_model(str(lists))


def test_the_limit_takes_the_largest_real_model() -> None:
    """The limit must not refuse a released model's inventory: the most tensors of one the families here
    cover is a Kimi-K2 with one module per expert (DeepSeek-V3's layout, 61 layers, 384 routed experts, the
    first layer dense): per layer 9 attention + norm tensors, the dense MLP 3, an MoE layer 384 x 3 expert
    tensors + the shared expert's 3 + the router's weight and bias; plus embedding, final norm, lm_head:
    9 x 61 + 3 + 60 x (384 x 3 + 5) + 3 = 69,975 (the count tests/test_generate_limit21.py checks)."""
    assert 9 * 61 + 3 + 60 * (384 * 3 + 5) + 3 == 69_975 <= inventory.MAX_TENSORS
