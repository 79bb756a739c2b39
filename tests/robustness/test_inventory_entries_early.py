"""Issue 21 leftover: an inventory whose ``tensors`` list has millions of entries that are not
objects (``[[64, 64], ...]``, ``[1, ...]``, 22M ``[]`` in 64 MiB) has few ``{``, so the count
before the parse (``inventory.refuse_over_limit``) never ran: the whole list was parsed (16 s and
1.7 GB for the 22M ``[]``) before it was refused. Now such a list, with as many commas as the
limit, is refused at its first entry with the message ``from_dict`` gives it
(``/tensors/0: expected an object (one tensor ...), got an array``), found by ``readers.first_non_object_at`` without parsing the list.

``first_non_object_at`` is checked against ``json.loads`` itself on random documents; the refusal's
memory is measured in a child process (its peak RSS against the text it reads)."""

from __future__ import annotations

import json
import random
import resource
import subprocess
import sys

import pytest

from advisor.config import readers
from advisor.errors import ModelSpecError
from advisor.model import inventory, specs
from tests.robustness.robust_helpers import ROOT, clean_env


def _value(rng: random.Random, depth: int):
    kind = rng.randrange(8 if depth < 3 else 4)
    if kind == 0:
        return rng.randint(-5, 5)
    if kind == 1:
        return rng.choice(["tensors", '"tensors":[', "x\\\"}", "", "\u00e9"])
    if kind == 2:
        return rng.choice([True, None, 1.5, False])
    if kind == 3:
        return []
    if kind in (4, 5):
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(["tensors", "shape", "a", "{", "tensor"]): _value(rng, depth + 1) for _ in range(rng.randrange(4))}


@pytest.mark.parametrize("seed", range(400))
def test_first_non_object_at_equals_the_parsed_list(seed: int) -> None:
    rng = random.Random(seed)
    doc = {k: _value(rng, 1) for k in rng.sample(["name", "meta", "a", "b"], rng.randrange(3))}
    if seed % 4:
        # mostly objects (flat, or with objects inside), now and then something else, anywhere
        doc["tensors"] = [_value(rng, 2) if rng.random() < 0.3 else
                          {rng.choice(["shape", "name", "{", "]"]): _value(rng, 2 + rng.randrange(2))
                           for _ in range(rng.randrange(3))} for _ in range(rng.randrange(6))]
        if seed % 5 == 0:
            doc["z"] = _value(rng, 1)  # a key after the list
    text = json.dumps(doc, indent=rng.choice([None, 1, "\t"]), ensure_ascii=rng.random() < 0.5)
    got = readers.first_non_object_at(text, "tensors")
    ts = json.loads(text).get("tensors")
    bad = [i for i, t in enumerate(ts) if not isinstance(t, dict)] if isinstance(ts, list) else []
    if got is None:
        # every entry an object, or where the scan cannot be sure: no list at the key, its name written again
        assert not bad or text.count('"tensors"') > 1
    else:
        assert got == bad[0]


@pytest.mark.parametrize("seed", range(300))
def test_the_windowed_reading_equals_the_parsed_list(seed: int, monkeypatch) -> None:
    """Objects nested deeper than the regex reads (7 levels here) are read from a first window of the text (1 MiB), cut anywhere:
    inside a string, an escape, a number, an object. Cut at every size here, the answer is the
    parsed list's (or None: every entry an object)."""
    rng = random.Random(seed)
    ts = [{"name": rng.choice(['a"b', "x\\", "{[", "]}", "e\u00e9", ",", "}, 7, [", 'q"}, "s']), "shape": [rng.randint(1, 9)],
           "m": {"k": _value(rng, 3), "deep": {"a": {"b": {"c": {"d": [{"e": "}, 1"}]}}}}}} for _ in range(rng.randrange(1, 6))]
    if seed % 3:
        ts.insert(rng.randrange(len(ts) + 1), _value(rng, 3) if rng.random() < 0.5 else rng.choice([[], "s{", 5, None]))
    text = json.dumps({"tensors": ts}, indent=rng.choice([None, 1]), ensure_ascii=rng.random() < 0.5)
    bad = [i for i, t in enumerate(json.loads(text)["tensors"]) if not isinstance(t, dict)]
    if text.count('"tensors"') > 1:
        bad = []  # the key's name written again (here as a value): the scan leaves it to the parse
    for w in range(1, len(text) + 1, max(1, len(text) // 40)):
        monkeypatch.setattr(readers, "_COLLAPSE_WINDOW", w)
        assert readers.first_non_object_at(text, "tensors") == (bad[0] if bad else None), (w, text)


@pytest.mark.parametrize("text", ['{"tensors": {}}', '[{"tensors": [1]}]', '{"a": [1, "tensors": [1]}',
                                  '{"a": NaN, "tensors": [1]}', '{"tensors": [1], "tensors": [{}]}',
                                  '{"a": ' + "[" * 5000 + "]" * 5000 + ', "tensors": [1]}', '{"tensors": [',
                                  '{"tensors": [{"a": {}}, {"b": {}}', '{"tensors": [{"a": {}},, 1]}'])
def test_first_non_object_at_leaves_what_it_cannot_be_sure_of(text: str) -> None:
    assert readers.first_non_object_at(text, "tensors") is None


#: What each refusal says an entry is (JSON's words, by hand) and what it must be.
KIND = {"[64, 64]": "an array", "1": "a number", "null": "null", '"w"': "a string", "[]": "an array", "0.5": "a number",
        "true": "true", "false": "false", "-2": "a number", '"[1]"': "a string"}
MUST = 'expected an object (one tensor, e.g. {"name": "w", "shape": [64, 64]}), got '


@pytest.mark.parametrize("entry", ["[64, 64]", "1", "null", '"w"', "[]", "0.5", "true", "false", "-2", '"[1]"'])
def test_non_object_entries_refused_before_the_parse(tmp_path, monkeypatch, entry) -> None:
    monkeypatch.setattr(inventory, "MAX_TENSORS", 10)
    f = tmp_path / "inv.json"
    f.write_text('{"name": "x", "meta": {"a": [1, 2]}, "tensors": [' + ", ".join([entry] * 11) + "]}")
    # the message the parsed inventory gets from from_dict's entry check (at the limit it counts first)
    with pytest.raises(ModelSpecError) as parsed:
        inventory.from_dict({"tensors": json.loads(f.read_text())["tensors"][:10]}, str(f))
    assert str(parsed.value) == f"{f}: /tensors/0: {MUST}{KIND[entry]}"

    def no_parse(*a, **k):
        raise AssertionError("parsed before its entries were checked")

    monkeypatch.setattr(readers, "parse_json", no_parse)
    for load in (specs.resolve_model, inventory.load_inventory):
        with pytest.raises(ModelSpecError) as early:
            load(str(f))
        assert str(early.value) == str(parsed.value)


def test_object_entries_and_short_lists_read_as_before(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(inventory, "MAX_TENSORS", 10)
    f = tmp_path / "inv.json"
    f.write_text(json.dumps({"tensors": [{"name": f"w{i}", "shape": [2, 3]} for i in range(10)]}))
    assert [t.shape for t in specs.resolve_model(str(f)).tensors] == [(2, 3)] * 10
    # fewer commas than the limit: not scanned; a later non-object entry: from_dict after the parse names it
    g = tmp_path / "mixed.json"
    g.write_text(json.dumps({"tensors": [{"shape": [2]}, 1]}))
    with pytest.raises(ModelSpecError, match=r"/tensors/1: expected an object \(one tensor.*\), got a number$"):
        specs.resolve_model(str(g))


def test_22m_empty_lists_refused_in_bounded_memory(tmp_path) -> None:
    """The most a 64 MiB inventory can list (``[]`` and a comma: 3 bytes each, 22M entries): refused
    at its first entry, the Python heap's peak (tracemalloc, in a child process) a small multiple of
    the text; the parse it replaced built 22M lists (1.7 GB)."""
    f = tmp_path / "inv.json"
    n = (readers.MAX_MODEL_BYTES - 40) // 3
    with f.open("w") as out:  # piece by piece: no 22M-element list in this process
        out.write('{"tensors": [[]')
        chunk = ",[]" * 100_000
        for _ in range((n - 1) // 100_000):
            out.write(chunk)
        out.write(",[]" * ((n - 1) % 100_000) + "]}")
    assert f.stat().st_size <= readers.MAX_MODEL_BYTES
    code = ("import sys, tracemalloc\n"
            "from advisor.model import specs\n"
            "from advisor.errors import ModelSpecError\n"
            "tracemalloc.start()\n"
            "try:\n    specs.resolve_model(sys.argv[1])\n"
            "except ModelSpecError as e:\n    print(e)\n"
            "print(tracemalloc.get_traced_memory()[1])\n")
    p = subprocess.run([sys.executable, "-c", code, str(f)], capture_output=True, text=True, cwd=ROOT,
                       env=clean_env(PYTHONPATH=str(ROOT)), timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    msg, peak = p.stdout.splitlines()
    assert msg == f"{f}: /tensors/0: {MUST}an array"
    # the text as bytes and as str (64 MiB each), little more
    assert int(peak) < 3 * readers.MAX_MODEL_BYTES, peak
