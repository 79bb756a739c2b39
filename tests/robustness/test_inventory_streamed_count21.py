"""Issue 21: an inventory of MAX_TENSORS + 1 objects nested six deep (2,000,001 then; past the regex of
``readers.object_list_scan``) took 8.2 s and 1 GB to be refused: the whole text collapsed at once
(re.sub's piece lists), then parsed again to count it. ``readers._streamed_object_scan`` reads it
window by window and counts the entries in the same pass.

Checked against ``json.loads`` itself: on random lists of deep objects (and now and then a
non-object entry), cut into windows of every size, the scan's first non-object index and its count
are the parsed list's; an over-limit list of deep objects is refused with from_dict's message
without the second, counting parse."""

from __future__ import annotations

import json
import random

import pytest

from advisor.config import readers
from advisor.errors import ModelSpecError
from advisor.model import inventory, specs


def _deep(rng: random.Random, depth: int):
    """An object nesting ``depth`` levels, with strings that hold brackets, quotes and escapes."""
    v: object = rng.choice([{}, [], 1, "}]", 'a"{', "x\\", None, [1, {"k": "]"}]])
    for _ in range(depth):
        v = {rng.choice(["a", "{", "]", 'q"', "\u00e9"]): v, **({"s": "[,"} if rng.random() < 0.3 else {})}
    return v


@pytest.mark.parametrize("seed", range(200))
def test_streamed_scan_counts_as_the_parse(seed: int, monkeypatch) -> None:
    rng = random.Random(seed)
    ts = [_deep(rng, rng.randrange(6, 9)) if rng.random() < 0.7 else {"shape": [rng.randint(1, 9)]}
          for _ in range(rng.randrange(1, 12))]
    ts[0] = _deep(rng, 6)  # the regex's run stops at once: the windowed scan reads the list
    if seed % 3 == 0:
        ts.insert(rng.randrange(1, len(ts) + 1), rng.choice([[], "s{", 5, None, [{"a": 1}], 0.5, True]))
    doc = {"tensors": ts}
    if seed % 4 == 0:
        doc["after"] = _deep(rng, 2)
    text = json.dumps(doc, indent=rng.choice([None, 1, "\t"]), ensure_ascii=rng.random() < 0.5)
    parsed = json.loads(text)["tensors"]
    bad = [i for i, t in enumerate(parsed) if not isinstance(t, dict)]
    want = (bad[0], None) if bad else (None, len(parsed))
    for w in sorted({1, 2, 3, 7, 64, len(text) // 3 + 1, len(text)}):
        monkeypatch.setattr(readers, "_COLLAPSE_WINDOW", w)
        assert readers.object_list_scan(text, "tensors") == want, (w, text)


@pytest.mark.parametrize("text", ['{"tensors": [{"a": {"b": {"c": {"d": {"e": {}}}}}}',  # never ends
                                  '{"tensors": [{"a": {"b": {"c": {"d": {"e": {}}}}}},, 1]}',
                                  '{"tensors": [{"a": {"b": {"c": {"d": {"e": {}}}}}}, ]}',
                                  '{"tensors": [{"a": {"b": {"c": {"d": {"e": {]}}}}}}]}',
                                  '{"tensors": [{"a": {"b": {"c": {"d": {"e": {}}}}}} {}]}',
                                  '{"tensors": [{"a": {"b": {"c": {"d": {"e": "}}}}}}]}'])
def test_streamed_scan_leaves_malformed_lists_to_the_parse(text: str, monkeypatch) -> None:
    for w in (1, 5, 1 << 20):
        monkeypatch.setattr(readers, "_COLLAPSE_WINDOW", w)
        assert readers.object_list_scan(text, "tensors") == (None, None), w


def test_deep_objects_over_the_limit_refused_in_one_pass(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(inventory, "MAX_TENSORS", 10)
    entry = '{"shape": [1], "m": {"a": {"b": {"c": {"d": {}}}}}}'
    f = tmp_path / "inv.json"
    f.write_text('{"name": "x", "tensors": [' + ", ".join([entry] * 11) + "]}")

    def no_parse(*a, **k):
        raise AssertionError("parsed before the entries were counted")

    monkeypatch.setattr(readers, "parse_json", no_parse)
    monkeypatch.setattr(readers, "list_length_at", no_parse)
    for load in (specs.resolve_model, inventory.load_inventory):
        with pytest.raises(ModelSpecError) as early:
            load(str(f))
        assert str(early.value) == f"{f}: /tensors: 11 entries, over the limit of 10 tensors"
    # at the limit: read as before (the entries' extra keys are ignored by from_dict)
    monkeypatch.undo()
    monkeypatch.setattr(inventory, "MAX_TENSORS", 11)
    assert len(specs.resolve_model(str(f)).tensors) == 11


def test_at_the_limit_not_counted_by_a_second_parse(tmp_path, monkeypatch) -> None:
    """MAX_TENSORS objects: MAX_TENSORS + 1 ``{`` with the document's own (and more with a meta before
    the list); only those from the list's ``[`` on can be tensors, so the list is not parsed to count it."""
    monkeypatch.setattr(inventory, "MAX_TENSORS", 10)
    f = tmp_path / "inv.json"
    f.write_text(json.dumps({"meta": {"a": {}}, "tensors": [{"name": f"w{i}", "shape": [2, 3]} for i in range(10)]}))

    def no_count(*a, **k):
        raise AssertionError("counted by a parse")

    monkeypatch.setattr(readers, "list_length_at", no_count)
    assert len(specs.resolve_model(str(f)).tensors) == 10
    g = tmp_path / "over.json"
    g.write_text(json.dumps({"meta": {"a": {}}, "tensors": [{"name": f"w{i}", "shape": [2, 3]} for i in range(11)]}))
    monkeypatch.undo()
    monkeypatch.setattr(inventory, "MAX_TENSORS", 10)
    with pytest.raises(ModelSpecError, match=r"/tensors: 11 entries, over the limit of 10 tensors$"):
        specs.resolve_model(str(g))
