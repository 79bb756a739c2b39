"""Settings file for lint (issue 22): [tool.ds-advisor] in pyproject.toml or .ds-advisor.toml,
found by walking up from the linted file like ruff, flags overriding; rule names as well as
codes in --select/--ignore/explain; -q."""

from __future__ import annotations

import json

import pytest

from advisor.config.settings import SettingsError, load_settings
from advisor.rules import find_rule, rule_codes

from tests.conftest import run_cli

#: Valid at 8 ranks only if micro x GA x 8 == 64 -> 4 x 4 x 8 = 128 != 64: B001 error at 8 ranks.
BAD_TRIPLE = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4}


def _tree(tmp_path, settings: str, where: str = "pyproject.toml"):
    """tmp/<where> with ``settings``; the config two folders below it."""
    (tmp_path / where).write_text(settings)
    cfg = tmp_path / "jobs" / "llama" / "ds.json"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(json.dumps(BAD_TRIPLE))
    return cfg


def _codes(p) -> list[str]:
    return [f["code"] for f in json.loads(p.stdout)["files"][0]["findings"]]


def test_settings_found_by_walking_up_and_flags_override(tmp_path):
    cfg = _tree(tmp_path, '[project]\nname = "x"\n\n[tool.ds-advisor]\nworld-size = 8\nignore = ["S001"]\n')
    # world-size 8 from the pyproject two folders up: B001 is an error (4 x 4 x 8 = 128, not 64)
    p = run_cli(["lint", str(cfg), "--format", "json"], cwd=tmp_path / "jobs")
    assert p.returncode == 1 and "B001" in _codes(p)
    b = next(f for f in json.loads(p.stdout)["files"][0]["findings"] if f["code"] == "B001")
    assert b["severity"] == "error"
    # the flag wins: at 2 ranks 4 x 4 x 2 = 32, still not 64; at world size 4: 4 x 4 x 4 = 64 holds
    p = run_cli(["lint", str(cfg), "--world-size", "4", "--format", "json"], cwd=tmp_path)
    assert p.returncode == 0 and "B001" not in _codes(p)
    # --ignore by name beats the file's ignore list
    p = run_cli(["lint", str(cfg), "--ignore", "batch-triple", "--format", "json"], cwd=tmp_path)
    assert p.returncode == 0 and "B001" not in _codes(p)


def test_closest_settings_file_wins_and_pyproject_without_table_is_passed_over(tmp_path):
    cfg = _tree(tmp_path, "world-size = 8\n", where=".ds-advisor.toml")
    (cfg.parent / "pyproject.toml").write_text('[project]\nname = "no table here"\n')
    s = load_settings(cfg)
    assert s is not None and s.world_size == 8 and s.source == str(tmp_path / ".ds-advisor.toml")
    (cfg.parent / ".ds-advisor.toml").write_text('select = ["B001"]\nfail-on = "never"\n')
    s = load_settings(cfg)
    assert s.source == str(cfg.parent / ".ds-advisor.toml") and s.select == {"B001"} and s.world_size is None
    p = run_cli(["lint", str(cfg), "--world-size", "8"])
    assert p.returncode == 0 and "error B001" in p.stdout  # fail-on never from the closest file


def test_bad_settings_are_one_line_exit_2(tmp_path):
    cfg = _tree(tmp_path, "[tool.ds-advisor]\nselect = [\"no-such-rule\"]\n")
    p = run_cli(["lint", str(cfg)])
    assert p.returncode == 2 and "pyproject.toml: select" in p.stderr and "no-such-rule" in p.stderr
    assert "Traceback" not in p.stderr
    (tmp_path / "pyproject.toml").write_text("[tool.ds-advisor]\nworld_size = 8\n")
    with pytest.raises(SettingsError, match="unknown key.*world_size"):
        load_settings(cfg)


def test_rule_names_and_codes_resolve_alike():
    assert find_rule("batch-triple").code == "B001" == find_rule("b001").code
    assert rule_codes("B001, auto-top-level") == {"B001", "A001"}
    with pytest.raises(ValueError, match="did you mean batch-triple"):
        rule_codes("batch-tripel", "--select")
    p = run_cli(["explain", "batch-triple"])
    assert p.returncode == 0 and p.stdout.startswith("[B001 | batch-triple | severity: error]")
    assert "``" not in p.stdout and "::\n" not in p.stdout  # RST rendered, no raw markup
    assert "runtime/config.py _set_batch_related_parameters" in p.stdout


def test_quiet_prints_findings_only(tmp_path):
    cfg = _tree(tmp_path, "[tool.ds-advisor]\nworld-size = 8\n")
    loud = run_cli(["lint", str(cfg)]).stdout
    quiet = run_cli(["lint", str(cfg), "-q"]).stdout
    assert "file(s):" in loud and "file(s):" not in quiet and "error B001" in quiet


@pytest.mark.parametrize("content, words", [
    (b"\xff\xfe", "not UTF-8"),
    (b"world-size = 99999999999999999999\n", "world-size must be an integer from 1 to 1,048,576"),
    (b"params = 0\n", "params must be an integer from 1"),
])
def test_settings_files_outside_the_limits_are_one_line_exit_2(tmp_path, content, words):
    """The file's values get the flags' bounds (--world-size: 2^20 ranks) and bytes that are
    not UTF-8 are a clear error, not an internal one."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "ds.json").write_text(json.dumps({"train_batch_size": 8}))
    (tmp_path / ".ds-advisor.toml").write_bytes(content)
    r = run_cli(["lint", str(tmp_path / "a" / "ds.json")])
    assert r.returncode == 2, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert words in out and "internal error" not in out and len(out.strip().splitlines()) == 1


GEN = ["generate", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "64",
       "--seq-len", "2048", "--format", "json"]


def test_generate_reads_the_settings_file_above_its_output_and_flags_override(tmp_path):
    """generate takes the model from the settings file found walking up from --output (as
    estimate/check/report walk up from CONFIG), so the search is the one --model gives; --model
    beats the file; without either it is a usage error naming both (exit 2)."""
    (tmp_path / "pyproject.toml").write_text('[tool.ds-advisor]\nmodel = "llama-3.2-1b"\n')
    out = tmp_path / "jobs" / "ds.json"
    out.parent.mkdir()
    p = run_cli(GEN + ["-o", str(out)], cwd=tmp_path.parent)  # cwd outside the tree: found from --output
    want = run_cli(GEN + ["--model", "llama-3.2-1b"], cwd=tmp_path.parent)
    assert p.returncode == 0 == want.returncode, p.stderr
    got, exp = json.loads(p.stdout), json.loads(want.stdout)
    assert got["model"] == exp["model"] and got["plans"] == exp["plans"] and json.loads(out.read_text()) \
        == exp["best"]
    # the flag wins over the file
    p = run_cli(GEN + ["--model", "llama-3-8b", "-o", str(out), "--force"], cwd=tmp_path.parent)
    assert json.loads(p.stdout)["model"] == json.loads(run_cli(GEN + ["--model", "llama-3-8b"]).stdout)["model"] \
        != exp["model"]
    # no --output: the current folder's settings
    p = run_cli(GEN, cwd=out.parent)
    assert p.returncode == 0 and json.loads(p.stdout)["plans"] == exp["plans"]
    # neither a flag nor a settings file
    (tmp_path / "pyproject.toml").unlink()
    p = run_cli(GEN, cwd=out.parent)
    assert p.returncode == 2 and "--model" in p.stderr and "Traceback" not in p.stderr
