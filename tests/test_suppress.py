"""In-config suppression (issue 22): a top-level ``"ds_advisor": {"ignore": [...]}`` section.

The lint half checks what is reported with and without the section (the same file without it
reports the finding, so the suppression is what removes it). The engine half proves the form
is one DeepSpeed 0.19.8 tolerates: its own ``DeepSpeedConfig`` builds the config with the
section exactly as without it (and refuses the same section inside ``zero_optimization``, a
strict pydantic section, which is why the advisor reads it only at the top level), and the HF
Trainer's ``HfDeepSpeedConfig`` / ``HfTrainerDeepSpeedConfig`` pass it through.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import run_cli

# train_batch_size 10 is not a multiple of micro-batch 3 x 2 ranks: B001 (batch-triple) at world size 2
BAD = {"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3, "zero_optimization": {"stage": 2}}


def _lint(tmp_path, cfg, *args):
    f = tmp_path / "c.json"
    f.write_text(json.dumps(cfg))
    p = run_cli(["lint", str(f), "--world-size", "2", "--format", "json", *args])
    return p.returncode, [x for r in json.loads(p.stdout)["files"] for x in r["findings"]]


def test_without_the_section_the_finding_is_reported(tmp_path):
    rc, found = _lint(tmp_path, BAD)
    assert rc == 1 and [f["code"] for f in found] == ["B001"]


@pytest.mark.parametrize("entry", ["B001", "batch-triple", "b001"])
def test_section_suppresses_by_code_or_name(tmp_path, entry):
    rc, found = _lint(tmp_path, {**BAD, "ds_advisor": {"ignore": [entry]}})
    # no B001, and the section itself is no unknown key (S001/S002) to lint's schema
    assert rc == 0 and found == [], found


def test_suppression_naming_no_rule_is_a_finding(tmp_path):
    rc, found = _lint(tmp_path, {**BAD, "ds_advisor": {"ignore": ["B01", "batch-triple"], "select": ["B001"]}})
    got = {(f["code"], f["pointer"]) for f in found}
    assert got == {("S007", "/ds_advisor/ignore/0"), ("S007", "/ds_advisor/select")}, found
    assert "did you mean B001" in next(f for f in found if f["pointer"] == "/ds_advisor/ignore/0")["message"]
    rc, found = _lint(tmp_path, {**BAD, "ds_advisor": ["B001"]})  # not an object: suppresses nothing
    assert {f["code"] for f in found} == {"B001", "S007"}


def test_section_inside_a_strict_section_is_refused_like_deepspeed_does(tmp_path):
    """Inside zero_optimization the key is an unknown key of a pydantic section (S001), not a suppression."""
    cfg = {**BAD, "zero_optimization": {"stage": 2, "ds_advisor": {"ignore": ["B001"]}}}
    rc, found = _lint(tmp_path, cfg)
    assert {(f["code"], f["pointer"]) for f in found} == {("B001", "/train_batch_size"),
                                                           ("S001", "/zero_optimization/ds_advisor")}


def test_section_covers_estimates_fit_findings(tmp_path):
    f = tmp_path / "c.json"
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 0}}
    args = ["estimate", str(f), "--params", "7000000000", "--world-size", "8", "--gpu-memory", "24GB",
            "--format", "json"]
    f.write_text(json.dumps(cfg))
    codes = {x["code"] for x in json.loads(run_cli(args).stdout)["findings"]}
    assert "M100" in codes  # 7B at ZeRO-0: 16 B/param = 112 GB per rank > 24 GB
    f.write_text(json.dumps({**cfg, "ds_advisor": {"ignore": ["M100"]}}))
    assert "M100" not in {x["code"] for x in json.loads(run_cli(args).stdout)["findings"]}


def test_lint_help_documents_the_section():
    out = " ".join(run_cli(["lint", "--help"]).stdout.split())
    assert '"ds_advisor": {"ignore": [' in out


@pytest.mark.engine
def test_deepspeed_and_hf_tolerate_the_top_level_section():
    pytest.importorskip("deepspeed")
    code = textwrap.dedent("""
        import copy, json, types
        from deepspeed.runtime import config as dsc
        from deepspeed.runtime.config import DeepSpeedConfig
        dsc.dist.get_rank = lambda *a, **k: 0   # no process group: world size 1
        base = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
                "zero_optimization": {"stage": 2, "reduce_bucket_size": 1000}}
        sup = {**base, "ds_advisor": {"ignore": ["B001", "batch-triple"]}}
        a, b = DeepSpeedConfig(copy.deepcopy(base)), DeepSpeedConfig(copy.deepcopy(sup))
        keys = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                "zero_optimization_stage")
        print("SAME", all(getattr(a, k) == getattr(b, k) for k in keys) and a.zero_config == b.zero_config
              and a.bfloat16_config == b.bfloat16_config)
        print("KEPT", b._param_dict.get("ds_advisor"))
        try:
            DeepSpeedConfig({**base, "zero_optimization": {"stage": 2, "ds_advisor": {"ignore": ["B001"]}}})
            print("NESTED accepted")
        except Exception as e:
            print("NESTED refused", type(e).__name__, "extra_forbidden" in str(e))
        from transformers.integrations.deepspeed import HfDeepSpeedConfig, HfTrainerDeepSpeedConfig
        print("HF", HfDeepSpeedConfig(copy.deepcopy(sup)).config.get("ds_advisor"))
        t = HfTrainerDeepSpeedConfig(copy.deepcopy(sup))
        print("TRAINER", t.config.get("ds_advisor"), DeepSpeedConfig(t.config).train_batch_size)
    """)
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    out = p.stdout
    kept = "{'ignore': ['B001', 'batch-triple']}"
    assert "SAME True" in out and f"KEPT {kept}" in out, (out, p.stderr[-2000:])
    assert "NESTED refused ValidationError True" in out, out
    assert f"HF {kept}" in out and f"TRAINER {kept} 8" in out, out


def test_suppressing_a_refusing_rule_does_not_open_the_refusal_gate(tmp_path):
    # Issue 22 (newcomer's report): "ignore": ["B001"] hid the finding and so turned off the gate
    # estimate/check stop on -- a fit table and GO for a config DeepSpeed itself refuses. DeepSpeed
    # 0.19.8's DeepSpeedConfig (runtime/config.py _batch_assertion, world size 1 without dist)
    # asserts "10 != 3 * 1 * 1" with the section and without it: suppression changes nothing there.
    cfg = {"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 1,
           "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}, "ds_advisor": {"ignore": ["B001"]}}
    rc_mod = pytest.importorskip("deepspeed.runtime.config")
    with pytest.raises(AssertionError, match="10 != 3 \\* 1 \\* 1"):
        rc_mod.DeepSpeedConfig(dict(cfg))
    f = tmp_path / "sup.json"
    f.write_text(json.dumps(cfg))
    common = ["--params", "1000000", "--world-size", "1", "--seq-len", "128", "--gpu-memory", "80GiB",
              "--host-memory", "1TiB"]
    p = run_cli(["estimate", str(f), *common, "--format", "json"])
    d = json.loads(p.stdout)
    assert p.returncode == 1 and d["ranks"] == [] and not d.get("fit") and "B001" in d["unsupported"], p.stdout
    b = [x for x in d["findings"] if x["code"] == "B001"]
    assert len(b) == 1 and b[0]["severity"] == "error" and "suppressed by ds_advisor.ignore" in b[0]["message"]
    p = run_cli(["check", str(f), *common])
    assert p.returncode == 1 and p.stdout.strip().splitlines()[-1] == "NO-GO (exit 1)", p.stdout
    assert "B001" in p.stdout and "suppressed by ds_advisor.ignore" in p.stdout
    # lint, which gates nothing, still honours the suppression
    rc, found = _lint(tmp_path, cfg)
    assert rc == 0 and "B001" not in {x["code"] for x in found}


def test_hides_matches_a_key_and_what_lies_inside_it_among_many_entries():
    """Issue 21: hides() looks a finding's pointer and its ancestors up in a set. The semantics
    stay those of the docstring: the suppressed key itself or a pointer inside it, of that rule
    only, and not a sibling whose name merely starts the same (/ab is not inside /a)."""
    from advisor.config.suppress import Suppressions
    from advisor.findings import Finding
    keys = frozenset({("S002", f"/x{i}") for i in range(20000)} | {("S002", "/a")})
    sup = Suppressions(frozenset(), keys)

    def f(code, ptr):
        return Finding(code=code, severity="warning", pointer=ptr, message="m")
    assert sup.hides(f("S002", "/a")) and sup.hides(f("S002", "/a/b/c")) and sup.hides(f("S002", "/x19999"))
    assert not sup.hides(f("S002", "/ab")) and not sup.hides(f("B001", "/a/b")) and not sup.hides(f("S002", "/x20000"))


def test_unknown_entries_past_the_suggestion_cap_still_report_no_rule(tmp_path):
    """Entries past MAX_NEAR_SUGGESTIONS get no did-you-mean (difflib per entry cost 32 s for
    200k, issue 21) but are still findings that say they suppress nothing."""
    from advisor.config.suppress import MAX_NEAR_SUGGESTIONS, config_suppressions
    n = MAX_NEAR_SUGGESTIONS + 5
    _, found = config_suppressions({"ds_advisor": {"ignore": ["B0001"] * n}})
    assert len(found) == n and all("names no rule" in x.message for x in found)
    assert "did you mean B001" in found[0].message and "did you mean" not in found[-1].message
