"""Newcomer report 22, finding 7: a hardware spec's ``accelerator_memory_bytes`` was answered "did you mean
'host_memory_bytes'?" although the key is ``memory_bytes`` inside ``accelerator``; and ``--hardware FILE:2``
was "unknown hardware" although ``ds-advisor hardware`` says "NAME:N for N nodes" and the file exists."""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "hardware.schema.json").read_text())


def _spec(cli, tmp_path: Path) -> Path:
    p = cli(["hardware", "dgx-h100", "--format", "json"])
    assert p.returncode == 0, p.stderr
    f = tmp_path / "hw2.json"
    f.write_text(p.stdout)
    assert json.loads(p.stdout)["nodes"] == 1
    return f


def test_did_you_mean_searches_nested_key_paths(cli, tmp_path):
    # the right key, by the schema: memory_bytes is a property of the accelerator object
    assert "memory_bytes" in SCHEMA["$defs"]["accelerator"]["properties"]
    f = tmp_path / "bad.json"
    f.write_text(json.dumps({"name": "x", "accelerators_per_node": 8, "accelerator_memory_bytes": 80_000_000_000}))
    p = cli(["hardware", str(f)])
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    msg = p.stderr.strip()
    assert len(msg.splitlines()) == 1 and "bad.json" in msg and "/accelerator_memory_bytes" in msg, msg
    assert "did you mean 'accelerator.memory_bytes'" in msg and "host_memory_bytes" not in msg, msg


def test_a_storage_tier_key_misspelt_gets_its_nested_path(cli, tmp_path):
    """A reviewer's case: a tier's ``dwpdd`` (list item /storage/0) was answered with the allowed keys only; the
    schema puts dwpd inside the tier's endurance object."""
    tier = SCHEMA["$defs"].get("storage_tier") or next(d for d in SCHEMA["$defs"].values()
                                                       if "endurance" in d.get("properties", {}))
    assert "endurance" in tier["properties"]
    spec = json.loads(_spec(cli, tmp_path).read_text())
    spec["storage"][0]["dwpdd"] = 1
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(spec))
    p = cli(["hardware", str(f)])
    assert p.returncode == 2 and "/storage/0/dwpdd" in p.stderr, p.stderr
    assert "did you mean 'endurance.dwpd'" in p.stderr, p.stderr


def test_a_top_level_typo_still_gets_the_top_level_key(cli, tmp_path):
    assert "host_memory_bytes" in SCHEMA["properties"]
    f = tmp_path / "bad.json"
    f.write_text(json.dumps({"name": "x", "accelerators_per_node": 8, "host_memory_byte": 1}))
    p = cli(["hardware", str(f)])
    assert p.returncode == 2 and "did you mean 'host_memory_bytes'?" in p.stderr, p.stderr


def test_file_colon_n_is_n_nodes(cli, tmp_path):
    f = _spec(cli, tmp_path)
    p = cli(["hardware", f"{f}:2", "--format", "json"])
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["nodes"] == 2
    # 2 nodes x 8 accelerators of the DGX H100 spec file: 16 ranks
    e = cli(["estimate", "sample_configs/zero3.json", "--model", "llama-3-8b", "--hardware", f"{f}:2",
             "--seq-len", "2048", "--format", "json"])
    assert e.returncode in (0, 1, 4), e.stderr
    assert json.loads(e.stdout)["cluster"]["world_size"] == 16


def test_a_path_with_a_colon_that_exists_wins(cli, tmp_path):
    f = _spec(cli, tmp_path)
    odd = tmp_path / "a:2"  # a file whose own name ends in ':2': read as the file, one node
    odd.write_text(f.read_text())
    p = cli(["hardware", str(odd), "--format", "json"])
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["nodes"] == 1
    p = cli(["hardware", f"{odd}:3", "--format", "json"])
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["nodes"] == 3


def test_file_colon_bad_count_is_one_line(cli, tmp_path):
    f = _spec(cli, tmp_path)
    p = cli(["hardware", f"{f}:x"])
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "node count" in p.stderr, p.stderr
    p = cli(["hardware", str(tmp_path / "missing.json") + ":2"])
    assert p.returncode == 2 and "unknown hardware" in p.stderr and "Traceback" not in p.stderr, p.stderr
