"""Second newcomer's defect 7 (/tmp/s14/nc2_report.md): a --hardware / --model JSON type error names the value
it got as JSON writes it (advisor.config.validation.json_shown): "got true", 'got a string "str"', "got an
array []", never only its type and never Python's quoting ('str'). The expected text is the value through
the standard library's json.dumps, not the helper."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "lb15"


def cli(tmp_path: Path, *args: str) -> str:
    p = subprocess.run([sys.executable, "-m", "advisor", "estimate", str(DATA / "z1_nc_oo_gacc.json"),
                        "--world-size", "8", *args], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": "/root", "LANG": "C.UTF-8"})
    assert p.returncode == 2 and "Traceback" not in p.stderr, (p.returncode, p.stderr[-2000:])
    return p.stderr.strip()


def json_words(v) -> str:
    """What the message must say: JSON's literal for null/true/false, else the kind and the value's JSON text."""
    if not isinstance(v, (str, list, dict)):  # null, true/false, a number: as written
        return json.dumps(v)
    kind = {str: "a string", list: "an array", dict: "an object"}[type(v)]
    return f"{kind} {json.dumps(v)}"


@pytest.mark.parametrize("value", [True, [], 5, None])
def test_hardware_accelerator_names_the_value(tmp_path, value):
    (tmp_path / "h.json").write_text(json.dumps({"base": "dgx-h100", "accelerator": value}))
    err = cli(tmp_path, "--model", str(DATA / "inv2g.json"), "--hardware", "h.json")
    assert err.endswith(f"/accelerator: expected an object, got {json_words(value)}"), err


@pytest.mark.parametrize("value", ["str", 7, True])
def test_hardware_storage_names_the_value(tmp_path, value):
    (tmp_path / "h.json").write_text(json.dumps({"base": "dgx-h100", "storage": value}))
    err = cli(tmp_path, "--model", str(DATA / "inv2g.json"), "--hardware", "h.json")
    assert err.endswith(f"/storage: expected a list of storage tiers, got {json_words(value)}"), err


def test_unknown_presets_quoted_as_json(tmp_path):
    (tmp_path / "h.json").write_text(json.dumps({"base": "dgx-h100", "accelerator": "it's"}))
    err = cli(tmp_path, "--model", str(DATA / "inv2g.json"), "--hardware", "h.json")
    assert f"unknown accelerator preset {json.dumps(chr(105) + 't' + chr(39) + 's')} (known" in err, err
    (tmp_path / "h.json").write_text(json.dumps({"base": "x"}))
    assert f"/base: unknown preset {json.dumps('x')} (known" in cli(
        tmp_path, "--model", str(DATA / "inv2g.json"), "--hardware", "h.json")


@pytest.mark.parametrize("value", [True, "str", None, [], {}, -1])
def test_inventory_group_names_the_value(tmp_path, value):
    inv = json.loads((DATA / "inv2g.json").read_text())
    inv["tensors"][1]["group"] = value
    (tmp_path / "i.json").write_text(json.dumps(inv))
    err = cli(tmp_path, "--model", "i.json")
    assert err.endswith(f"/tensors/1/group: expected a non-negative integer, got {json_words(value)}"), err
    assert "'" not in err.split("got ", 1)[1]


@pytest.mark.parametrize("value", ["str", True, []])
def test_storage_endurance_names_the_value(tmp_path, value):
    tier = {"name": "n", "mounts": ["/x"], "scope": "node-local", "access": "read-write",
            "capacity_bytes": 10**12, "read_bytes_per_s": 10**9, "write_bytes_per_s": 10**9, "endurance": value}
    (tmp_path / "h.json").write_text(json.dumps({"base": "dgx-h100", "storage": [tier]}))
    err = cli(tmp_path, "--model", str(DATA / "inv2g.json"), "--hardware", "h.json")
    assert err.endswith(f"/storage/0/endurance: expected an object, got {json_words(value)}"), err
