"""Issue 21: ``inventory.from_dict`` builds its TensorSpecs FROM_DICT_CHUNK entries at a time
(``consume`` drops each pass's parsed dicts, so a 1.9M-tensor file's dicts and specs are not all
alive at once), column by column. The result must be the frozen dataclass's own construction,
tensor by tensor (``TensorSpec(...)``, whose ``__post_init__`` computes numel), whatever the
chunking, and a bad entry is named at its index in the whole list."""

from __future__ import annotations

import json
import random

import pytest

from advisor.errors import ModelSpecError
from advisor.model import inventory
from advisor.model.inventory import TensorSpec, from_dict


def _rows(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for _ in range(n):
        r: dict = {"shape": [rng.choice([1, 2, 3, 64]) for _ in range(rng.randrange(4))]}
        if rng.random() < 0.7:
            r["name"] = rng.choice([f"m{rng.randrange(9)}.w", f"m{rng.randrange(9)}.b", "x"])
        if rng.random() < 0.3:
            r["trainable"] = rng.random() < 0.5
        if rng.random() < 0.3:
            r["group"] = rng.randrange(3)
        if rng.random() < 0.2:
            r["dtype"] = rng.choice(["bf16", "float32"])
        rows.append(r)
    return rows


def _by_hand(rows: list[dict]) -> list[TensorSpec]:
    return [TensorSpec(str(r.get("name", f"t{i}")), tuple(r["shape"]), r.get("trainable", True), r.get("group", 0),
                       r.get("dtype")) for i, r in enumerate(rows)]


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 16])
def test_chunked_build_equals_the_dataclass(monkeypatch, seed: int, chunk: int) -> None:
    monkeypatch.setattr(inventory, "FROM_DICT_CHUNK", chunk)
    rng = random.Random(seed)
    rows = _rows(rng, rng.randrange(1, 30))
    want = _by_hand(rows)
    d = {"name": "n", "tensors": json.loads(json.dumps(rows))}
    inv = from_dict(d, "inv.json", consume=seed % 2 == 0)
    assert list(inv.tensors) == want
    assert [t.numel for t in inv.tensors] == [t.numel for t in want]
    assert [repr(t) for t in inv.tensors] == [repr(t) for t in want]
    assert type(inv.tensors) is inventory.TensorList
    assert d["tensors"] == ([] if seed % 2 == 0 else rows)  # consumed only when asked


@pytest.mark.parametrize("chunk", [1, 4, 1 << 16])
@pytest.mark.parametrize("bad_at", [0, 5, 9])
def test_bad_entry_named_at_its_index_in_the_whole_list(monkeypatch, chunk: int, bad_at: int) -> None:
    monkeypatch.setattr(inventory, "FROM_DICT_CHUNK", chunk)
    rows = [{"shape": [4, 4]} for _ in range(10)]
    rows[bad_at] = {"shape": [4], "group": -1}
    with pytest.raises(ModelSpecError, match=rf"^inv.json: /tensors/{bad_at}/group: "):
        from_dict({"tensors": rows}, "inv.json", consume=True)
