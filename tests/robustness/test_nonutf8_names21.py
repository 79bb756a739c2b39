"""Issue 21 audit (output encoding): a file name that is not UTF-8 (``bad\\xff.json``, a Latin-1 name; Python
reads it from argv as the lone surrogate ``\\udcff`` by surrogateescape) made every SARIF output an internal error
(``UnicodeEncodeError`` in ``render/sarif.artifact_uri``'s ``quote``). SARIF's ``artifactLocation.uri`` is now the
name's own bytes percent-encoded (``bad%FF.json``), as ``Path.as_uri`` encodes an absolute one; every other format
already escaped it. The working directory ``/`` gave the base URI ``file:/``; it is ``file:///``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.robustness.robust_helpers import ROOT, run_cli

NAME = os.fsdecode(b"bad\xff.json")  # '\udcff' in the str; the file on disk has the byte 0xff

COMMANDS = {"lint": [], "estimate": ["--params", "1000000", "--world-size", "8"],
            "check": ["--params", "1000000", "--gpu-memory", "80GB", "--host-memory", "512GB"],
            "checkpoint": ["--params", "1000000", "--world-size", "8"]}


def _no_nonfinite(x: str) -> None:
    raise AssertionError(f"non-finite {x} in a JSON output")


@pytest.mark.parametrize("cmd, fmt", [(c, "sarif") for c in COMMANDS] + [("lint", f) for f in ("text", "json", "github")])
def test_a_non_utf8_file_name_in_every_output(tmp_path, cmd, fmt):
    shutil.copy(ROOT / "sample_configs" / "zero2.json", os.fsencode(tmp_path) + b"/bad\xff.json")
    p = run_cli([cmd, NAME, *COMMANDS[cmd], "--format", fmt], cwd=tmp_path)
    assert p.returncode in (0, 1), (p.returncode, p.stderr)
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr, p.stderr
    if fmt == "sarif":
        sarif = json.loads(p.stdout, parse_constant=_no_nonfinite)
        run = sarif["runs"][0]
        uris = {loc["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"] for loc in r["locations"]}
        assert uris == {"bad%FF.json"} or (cmd == "checkpoint" and not uris), uris  # zero2's checkpoint: no finding
        assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == Path(tmp_path).as_uri() + "/"


def test_the_root_folder_base_uri_is_whole(tmp_path):
    cfg = tmp_path / "ds.json"
    shutil.copy(ROOT / "sample_configs" / "zero2.json", cfg)
    p = run_cli(["lint", str(cfg), "--format", "sarif"], cwd="/")
    run = json.loads(p.stdout)["runs"][0]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == "file:///"
    assert {loc["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"] for loc in r["locations"]} \
        == {str(cfg).lstrip("/")}
