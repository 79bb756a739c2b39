"""Issue D6: ``{"tensors": [1,500,000 objects], "tensors": [1 object]}`` was read as its one tensor (json.loads
keeps a repeated key's last value) after all 1.5M objects were built; the over-limit count
(``readers.list_length_at``) counted the last list too. DeepSpeed refuses a key written twice in its config
(deepspeed/runtime/config_utils.py l.205-212, ``dict_raise_error_on_duplicate_keys``); every JSON file the
tool reads now refuses it, naming the file, the key and its line:column.

Expected values are by hand from the texts written here (the line and column of the repeated key), and
json.loads's own pairs for which key repeats."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from advisor.config import readers
from advisor.errors import HardwareSpecError, ModelSpecError
from advisor.model import inventory, specs
from tests.robustness.robust_helpers import ROOT, clean_env

ENTRY = '{"name": "w%d", "shape": [4, 4]}'


def _entries(n: int) -> str:
    return ", ".join(ENTRY % i for i in range(n))


def _write(tmp_path, text: str, name: str = "inv.json") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("reader", [inventory.load_inventory, specs._read_json])
@pytest.mark.parametrize("big_first", [True, False])
def test_repeated_tensors_refused_in_either_order_over_the_limit(tmp_path, monkeypatch, reader, big_first) -> None:
    monkeypatch.setattr(inventory, "MAX_TENSORS", 5)
    big, small = "[" + _entries(9) + "]", "[" + ENTRY % 99 + "]"
    first, second = (big, small) if big_first else (small, big)
    text = '{"tensors": ' + first + ',\n  "tensors": ' + second + "}"
    path = _write(tmp_path, text)
    built = []
    monkeypatch.setattr(inventory, "from_dict", lambda *a, **k: built.append(1))  # no entries may be built
    with pytest.raises(ModelSpecError) as e:
        reader(path)
    assert str(e.value) == f"{path}:2:3: duplicate key 'tensors'"
    assert built == []


@pytest.mark.parametrize("big_first", [True, False])
def test_repeated_tensors_refused_under_the_limit(tmp_path, big_first) -> None:
    lists = ["[" + _entries(3) + "]", "[" + ENTRY % 7 + "]"]
    if not big_first:
        lists.reverse()
    path = _write(tmp_path, '{"name": "m", "tensors": ' + lists[0] + ', "tensors": ' + lists[1] + "}")
    col = 1 + len('{"name": "m", "tensors": ' + lists[0] + ", ")
    for reader in (inventory.load_inventory, specs._read_json):
        with pytest.raises(ModelSpecError, match=rf"^{path}:1:{col}: duplicate key 'tensors'$"):
            reader(path)


def test_nested_repeat_refused(tmp_path, monkeypatch) -> None:
    text = '{"tensors": [\n' + _entries(3) + ',\n{"name": "x", "shape": [2], "shape": [3]}]}'
    path = _write(tmp_path, text)
    with pytest.raises(ModelSpecError, match=rf"^{path}:3:29: duplicate key 'shape'$"):
        inventory.load_inventory(path)
    monkeypatch.setattr(inventory, "MAX_TENSORS", 2)  # the counting pass refuses it too
    with pytest.raises(ModelSpecError, match=rf"^{path}:3:29: duplicate key 'shape'$"):
        inventory.load_inventory(path)
    path = _write(tmp_path, '{"meta": {"a": 1,\n "a": 2}, "tensors": [' + ENTRY % 0 + "]}", "m.json")
    with pytest.raises(ModelSpecError, match=rf"^{path}:2:2: duplicate key 'a'$"):
        specs._read_json(path)


def test_hardware_spec_repeat_refused(tmp_path) -> None:
    from advisor.cluster.hardware import load_hardware
    path = _write(tmp_path, '{"name": "a",\n"name": "b"}', "hw.json")
    with pytest.raises(HardwareSpecError, match=rf"^{path}:2:1: duplicate key 'name'$"):
        load_hardware(path)


def test_valid_inventory_still_read(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(inventory, "MAX_TENSORS", 5)
    path = _write(tmp_path, '{"name": "ok", "meta": {"tensors": 1}, "tensors": [' + _entries(5) + "]}")
    inv = inventory.load_inventory(path)
    assert [t.name for t in inv.tensors] == [f"w{i}" for i in range(5)]
    assert inv.numel == 5 * 16 and inv.name == "ok"


def test_one_repeat_found_as_json_pairs_show_it() -> None:
    for text in ['{"a": 1, "b": {"c": 1, "c": 2}}', '[{"x": 1}, {"y": [1, {"z": 0, "z": 0}]}]', '{"k": 1, "k": 1}']:
        pairs = []
        json.loads(text, object_pairs_hook=lambda p: pairs.append(p) or dict(p))
        want = next(p[j][0] for p in pairs for j in range(len(p)) if p[j][0] in [q[0] for q in p[:j]])
        with pytest.raises(readers.DuplicateKey) as e:
            json.loads(text, object_pairs_hook=readers.unique_object_hook())
        assert e.value.key == want
        line, col = readers.duplicate_key_position(text, e.value)
        assert line == 1 and text[col - 1:].startswith(json.dumps(want)) and text.find(json.dumps(want)) < col - 1


def test_cli_exit_2_one_line(tmp_path) -> None:
    path = _write(tmp_path, '{"tensors": [' + ENTRY % 0 + '], "tensors": [' + ENTRY % 1 + "]}")
    r = subprocess.run([sys.executable, "-m", "advisor", "estimate", str(ROOT / "sample_configs" / "zero2.json"),
                        "--model", path, "--world-size", "8", "--seq-len", "128"],
                       capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=120)
    assert r.returncode == 2, r.stderr
    col = len('{"tensors": [' + ENTRY % 0 + "], ") + 1  # the second "tensors", 1-based
    assert r.stderr.strip().splitlines() == [f"ds-advisor: {path}:1:{col}: duplicate key 'tensors'"]


def test_real_limit_repeat_refused_without_building(tmp_path, monkeypatch) -> None:
    """At the real MAX_TENSORS: MAX_TENSORS + 1 small objects then a one-entry list under the same key (the
    newcomer's file, smaller) is refused by the counting pass; nothing reaches from_dict or the chunked build."""
    n = inventory.MAX_TENSORS + 1
    path = _write(tmp_path, '{"tensors": [' + ", ".join(['{"shape": [1]}'] * n) + '],\n"tensors": [{"shape": [1]}]}')
    monkeypatch.setattr(inventory, "from_dict", lambda *a, **k: pytest.fail("entries built"))
    monkeypatch.setattr(inventory, "chunked_text", lambda *a, **k: pytest.fail("entries built"))
    with pytest.raises(ModelSpecError, match=rf"^{path}:2:1: duplicate key 'tensors'$"):
        inventory.load_inventory(path)
