"""inventory.chunked_text (issue 21, mem21): an inventory file's tensors list read FROM_DICT_CHUNK entries at a
time must give what the whole parse gives (``json.loads`` then ``from_dict``), and every error the whole parse gave:
the reference here is ``json.loads`` + ``from_dict`` on the same text, with runs as small as one entry."""

from __future__ import annotations

import json
import random

import pytest

from advisor.errors import ModelSpecError
from advisor.model import inventory, specs


def _entries(rng: random.Random, n: int) -> list:
    out = []
    for i in range(n):
        e: dict = {"shape": [rng.randint(1, 9) for _ in range(rng.randint(0, 3))]}
        if rng.random() < 0.7:
            e["name"] = rng.choice([f"layers.{i}.w", f"m{i // 3}.{rng.choice(['weight', 'bias'])}{i}", f'q"[{i}]{{'])
        if rng.random() < 0.2:
            e["trainable"] = rng.random() < 0.5
        if rng.random() < 0.2:
            e["group"] = rng.randint(0, 2)
        if rng.random() < 0.2:
            e["dtype"] = rng.choice(["float16", "torch.bfloat16", "bf16", None])
        if rng.random() < 0.1:
            e["meta"] = {"tp": [0, {"x": [1]}]}
        out.append(e)
    return out


def _reference(text: str, path: str):
    try:
        return inventory.from_dict(json.loads(text), path)
    except (ModelSpecError, ValueError) as e:
        return type(e)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1 << 16])
@pytest.mark.parametrize("seed", range(6))
def test_chunked_equals_whole_parse(tmp_path, monkeypatch, chunk, seed):
    monkeypatch.setattr(inventory, "FROM_DICT_CHUNK", chunk)
    rng = random.Random(seed)
    d = {"name": "n", "meta": {"hidden_size": 8}, "tensors": _entries(rng, rng.randint(1, 40))}
    if seed % 2:
        d = {"tensors": d["tensors"], "name": "after", "meta": {"a": [1, 2]}}
    text = json.dumps(d, indent=seed % 3 or None)
    p = tmp_path / "inv.json"
    p.write_text(text)
    ref = _reference(text, str(p))
    assert inventory.chunked_text(text) is not None  # the chunked read is taken, not the fallback
    for load in (inventory.load_inventory, specs.resolve_model):
        got = load(str(p))
        assert got.tensors == ref.tensors and got.name == ref.name and got.modules == ref.modules
        assert [t.numel for t in got.tensors] == [t.numel for t in ref.tensors]


@pytest.mark.parametrize("chunk", [1, 2, 5, 1 << 16])
@pytest.mark.parametrize("bad, expect", [
    ('{"shape": [0]}', "/tensors/3/shape"),          # an entry from_dict refuses
    ('{"shape": [1], "trainable": 1}', "/tensors/3/trainable"),
    ('{"shape": [1e999]}', "non-finite"),              # a number json refuses
    ('{"shape": [1], }', "not valid JSON"),             # a syntax error inside an entry
    ('[1]', "/tensors/3: expected an object (one tensor, e.g. {\"name\": \"w\", \"shape\": [64, 64]}), got an array"),         # not an object
])
def test_errors_are_the_whole_parse(tmp_path, monkeypatch, chunk, bad, expect):
    monkeypatch.setattr(inventory, "FROM_DICT_CHUNK", chunk)
    good = '{"shape": [2, 2], "name": "a.w"}'
    text = '{"tensors": [' + ",".join([good] * 3 + [bad] + [good] * 4) + ']}'
    p = tmp_path / "inv.json"
    p.write_text(text)
    msgs = set()
    for load in (inventory.load_inventory, specs.resolve_model):
        with pytest.raises(ModelSpecError) as e:
            load(str(p))
        msgs.add(str(e.value).replace("model file", "inventory"))
        assert expect in str(e.value)
    assert len(msgs) == 1


def test_syntax_error_after_a_bad_entry_is_reported_first(tmp_path, monkeypatch):
    # the whole parse fails on the later syntax error before from_dict sees the bad entry: so must the chunked read
    monkeypatch.setattr(inventory, "FROM_DICT_CHUNK", 2)
    text = '{"tensors": [{"shape": [0]}, {"shape": [1]}, {"shape": [1]}, {"shape": [1] "x": 1}]}'
    p = tmp_path / "inv.json"
    p.write_text(text)
    with pytest.raises(ModelSpecError, match="not valid JSON"):
        inventory.load_inventory(str(p))


def test_modules_checked_after_the_tensors(tmp_path, monkeypatch):
    monkeypatch.setattr(inventory, "FROM_DICT_CHUNK", 1)
    d = {"tensors": [{"name": "a.w", "shape": [2]}, {"name": "b.w", "shape": [2]}],
         "modules": [{"name": "act", "before": "b"}, {"name": "seq", "sequential": True}]}
    p = tmp_path / "inv.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ModelSpecError, match="/modules/1/name"):
        inventory.load_inventory(str(p))
    d["modules"] = d["modules"][:1]
    p.write_text(json.dumps(d))
    assert inventory.load_inventory(str(p)).modules == inventory.from_dict(d, str(p)).modules
