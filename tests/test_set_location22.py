"""fixa22 (newcomer 22, finding 2): a finding caused by a ``--set`` is the argument's, not the file's.

A misspelt section (``--set zero_optimzation.stage=2``) ran the file's ZeRO-3 estimate with exit 0 and
an S002 warning at zero3.json:1:1, a key that file does not have; ``--set
zero_optimization.zero_hpz_partition_size=true`` was S003 at the file's line holding 8. README: a value
a file would be reported for is exit 2, one line naming the argument -- warnings too now. A rule's finding
about a key a --set wrote (G003) is located at the argument in every format."""

from __future__ import annotations

import json

from advisor.config.overrides import written_pointers
from tests.conftest import SAMPLES, run_cli

#: zero_hpz_partition_size on its own line (8) under zero_optimization (line 5).
ZPP = '{\n "train_batch_size": 8,\n "train_micro_batch_size_per_gpu": 1,\n "bf16": {"enabled": true},\n' \
      ' "zero_optimization": {\n  "stage": 3,\n  "zero_hpz_partition_size":\n   8\n }\n}\n'


def test_a_misspelt_set_key_is_exit_2_naming_the_argument(tmp_path):
    p = run_cli(["estimate", str(SAMPLES / "zero3.json"), "--model", "llama-3-8b", "--world-size", "8",
                 "--seq-len", "2048", "--set", "zero_optimzation.stage=2"], cwd=tmp_path)
    assert p.returncode == 2 and not p.stdout, (p.stdout, p.stderr)
    line, = p.stderr.strip().splitlines()
    assert line.startswith("ds-advisor: --set 'zero_optimzation.stage=2': ") and "'zero_optimization'" in line
    assert "zero3.json" not in line


def test_a_warning_value_through_set_is_exit_2(tmp_path):
    cfg = tmp_path / "zpp.json"
    cfg.write_text(ZPP)
    p = run_cli(["lint", str(cfg), "--set", "zero_optimization.zero_hpz_partition_size=true"], cwd=tmp_path)
    assert p.returncode == 2, (p.stdout, p.stderr)
    line, = p.stderr.strip().splitlines()
    assert "--set 'zero_optimization.zero_hpz_partition_size=true'" in line and ":8:" not in line
    # the same true written in the file is the file's S003 warning (exit 0), at its line
    cfg.write_text(ZPP.replace("   8\n", "   true\n"))
    p = run_cli(["lint", str(cfg)], cwd=tmp_path)
    assert p.returncode == 0 and f"{cfg}:7:" in p.stdout and "S003" in p.stdout, p.stdout


def test_a_rule_finding_on_a_set_key_is_located_at_the_argument_in_every_format(tmp_path):
    """G003: zero_hpz_partition_size 3 does not divide the world size 8 (8 % 3 = 2). Written in the
    file it is at line 7 (the key); set by --set it is at the argument, in text, JSON, SARIF, GitHub."""
    cfg = tmp_path / "zpp.json"
    arg = "zero_optimization.zero_hpz_partition_size=3"
    cfg.write_text(ZPP)
    args = ["lint", str(cfg), "--world-size", "8", "--set", arg]
    p = run_cli(args, cwd=tmp_path)
    assert p.returncode == 1
    assert f"--set '{arg}' (on {cfg}): error G003" in " ".join(p.stdout.split()), p.stdout  # folded to the width
    assert f"{cfg}:" not in p.stdout
    d = json.loads(run_cli(args + ["--format", "json"], cwd=tmp_path).stdout)
    f, = [f for r in d["files"] for f in r["findings"] if f["code"] == "G003"]
    assert f["set"] == f"--set '{arg}'" and f["line"] is None and f["column"] is None
    s = json.loads(run_cli(args + ["--format", "sarif"], cwd=tmp_path).stdout)
    r, = [r for r in s["runs"][0]["results"] if r["ruleId"] == "G003"]
    assert "region" not in r["locations"][0]["physicalLocation"] and r["properties"]["set"] == f"--set '{arg}'"
    assert r["message"]["text"].startswith(f"--set '{arg}': ")
    gh, = [ln for ln in run_cli(args + ["--format", "github"], cwd=tmp_path).stdout.splitlines() if "G003" in ln]
    assert "line=" not in gh and f"::--set '{arg}': " in gh
    # the same 3 written in the file: located at its line, no "set"
    cfg.write_text(ZPP.replace("   8\n", "   3\n"))
    d = json.loads(run_cli(["lint", str(cfg), "--world-size", "8", "--format", "json"], cwd=tmp_path).stdout)
    f, = [f for r in d["files"] for f in r["findings"] if f["code"] == "G003"]
    assert f["line"] == 7 and "set" not in f


def test_written_pointers_name_the_key_each_argument_wrote():
    """By hand: on {"a": {}} "a.b=1" writes /a/b (a exists); "c.d=2" creates /c; "c.e=3", after it,
    writes /c/e (c exists by then); a later argument on the same key names itself."""
    got = written_pointers({"a": {}}, ["a.b=1", "c.d=2", "c.e=3", "a.b=4"])
    assert got == {"/a/b": "--set 'a.b=4'", "/c": "--set 'c.d=2'", "/c/e": "--set 'c.e=3'"}
