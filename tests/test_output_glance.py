"""Output a newcomer reads at a glance (issue 22, the defects a newcomer found after it landed):
piped width for every command, the folded "auto" tally, a silent ``-q``, numeric option help,
``hardware --format json`` read back by ``--hardware``, S002's name and message, SARIF rule
help as plain text and Markdown, GitHub annotations in ``--units`` and per-key suppression.

Every expectation is computed here from its own source: the JSON output's bytes by hand, the
preset file through the spec reader, the text body's own finding lines, click's help text.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest

from tests.conftest import CASES, SAMPLES, run_cli

PIPE = 100  # advisor.render.style.PIPE_WIDTH: the width of piped output without COLUMNS
TALLY = re.compile(r"^\d+ file\(s\): \d+ error\(s\), ")
C06 = CASES / "C06-zero2-32b-8gpu"


def _overlong(text: str, width: int = PIPE) -> list[str]:
    """The lines of ``text`` longer than ``width`` that could have been folded. The rule: a line
    may be longer only when it is one word after its indent (a path, a URL, a source reference:
    nothing to break it at) or lint's tally line (kept whole: scripts grep for it)."""
    return [x for x in text.splitlines() if len(x) > width and len(x.split()) > 1 and not TALLY.match(x)]


def _every_command(tmp_path) -> dict[str, list[list[str]]]:
    """command -> invocations that print its text report (and its stderr messages), piped."""
    refused = tmp_path / "refused.json"  # B001 at 2 ranks: measure stops before the engine
    refused.write_text('{"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3}')
    m100 = tmp_path / "m100.json"
    m100.write_text('{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 0}}')
    zero3 = str(SAMPLES / "zero3.json")
    return {
        "hardware": [["hardware"], ["hardware", "dgx-h100"]],
        "models": [["models"], ["models", "--types"]],
        "explain": [["explain"], ["explain", "H003"], ["explain", "G001"]],  # long prose; quoted code
        "lint": [["lint", str(SAMPLES / "hf_trainer_zero3_auto.json"), str(SAMPLES / "zero2.json"),
                  str(CASES / "C01-misplaced-offload" / "config.json")]],
        "resolve": [["resolve", "--hf", str(SAMPLES / "hf_trainer_zero3_auto.json")]],
        "estimate": [["estimate", "config.json", "--params", "32763876352", "--world-size", "8", "--gpu-memory",
                      "141GB", "--explain"],
                     ["estimate", str(m100), "--model", "llama-3-8b", "--world-size", "8", "--gpu-memory", "24GB"]],
        "checkpoint": [["checkpoint", zero3, "--params", "8030261248", "--world-size", "8"]],
        "generate": [["generate", "--model", "llama-3-8b", "--hardware", "dgx-h100", "--nodes", "1",
                      "--gpus-per-node", "8", "--global-batch", "64", "--seq-len", "2048"]],
        "check": [["check", zero3, "--params", "8030261248"]],
        "report": [["report", zero3, "--params", "8030261248", "--world-size", "8", "-o",
                    str(tmp_path / "r.html")]],
        "measure": [["measure", str(refused), "--params", "1000000", "--world-size", "2"]],
    }


def test_every_command_piped_has_no_line_longer_than_the_pipe_width(tmp_path):
    """Every command's text report and stderr messages, piped with no COLUMNS: no line over 100
    columns but a single word or lint's tally. The table names every command click registers,
    so a new command without a case here fails."""
    from advisor.cli import main

    cases = _every_command(tmp_path)
    assert set(cases) == set(main.commands), set(main.commands) ^ set(cases)
    for cmd, invocations in cases.items():
        for args in invocations:
            p = run_cli(args, cwd=C06, env={"COLUMNS": ""})
            # a report (measure: a refused config is exit 2, with its findings), not a usage error
            assert p.returncode in (0, 1, 3, 4) or cmd == "measure", (args, p.stderr[-800:])
            assert "Usage:" not in p.stderr, (args, p.stderr)
            assert p.stdout.strip() or p.stderr.strip(), args
            assert "Traceback" not in p.stderr, p.stderr
            for stream, text in (("stdout", p.stdout), ("stderr", p.stderr)):
                if stream == "stdout" and cmd == "resolve":  # the resolved config: JSON, never folded
                    json.loads(text)
                    continue
                assert not _overlong(text), (args, stream, _overlong(text))


def test_every_rules_explanation_fits_the_pipe_width():
    """explain folds prose to the width and keeps literal blocks (quoted DeepSpeed code and config)
    verbatim: every rule's text, as explain prints it piped, fits 100 columns, words intact."""
    from advisor.render.explain import rst_text
    from advisor.rules import all_rules

    for code, rule in all_rules().items():
        text = rst_text(rule.explanation(), cols=PIPE)
        assert max(len(x) for x in text.splitlines()) <= PIPE, (code, max(text.splitlines(), key=len))
        assert text.split() == rst_text(rule.explanation()).split(), code  # folding moves no word


def test_column_tables_fold_their_last_cell_under_itself():
    from advisor.render.style import columns

    rows = [("name", "n", "note"), ("a", "1", "word " * 30), ("bb", "22", "short")]
    out = columns(rows, (False, True), 40)
    assert all(len(x) <= 40 for x in out), out
    assert out[0] == "name   n  note" and out[-1] == "bb    22  short"
    # the continuation lines start under the note column (column 10)
    cont = out[2:-1]
    assert cont and all(x.startswith(" " * 10 + "word") for x in cont), out
    assert " ".join(" ".join(out[1:-1]).split()[2:]) == " ".join(["word"] * 30)


def test_folded_auto_tally_counts_the_lines_shown(tmp_path):
    """An HF Trainer config with one more (non-"auto") problem: the text shows one hint line for
    the 17 "auto" findings plus the S002 line, and the tally counts those two lines by severity
    (counted here from the body), while JSON keeps and counts all 18 findings."""
    cfg = json.loads((SAMPLES / "hf_trainer_zero3_auto.json").read_text())
    cfg["cuda_visible_devices"] = "0,1"  # S002 warning, not folded
    f = tmp_path / "hf.json"
    f.write_text(json.dumps(cfg))
    d = json.loads(run_cli(["lint", str(f), "--format", "json"]).stdout)
    found = d["files"][0]["findings"]
    autos = [x for x in found if x["code"] in ("A001", "A002", "A003")]
    assert len(autos) == json.dumps(cfg).count('"auto"') == 17 and len(found) == 18
    assert d["summary"]["error"] + d["summary"]["warning"] + d["summary"]["info"] == 18
    text = run_cli(["lint", str(f)], env={"COLUMNS": "400"}).stdout
    body = text.splitlines()
    shown = {s: sum(bool(re.match(rf"^\S.*?: {s} [A-Z]\d{{3}} ", x)) for x in body) for s in ("error", "warning", "info")}
    assert shown == {"error": 1, "warning": 1, "info": 0}, body  # the hint, and S002
    assert "17 A001/A002/A003 findings folded here" in text
    assert f"1 file(s): {shown['error']} error(s), {shown['warning']} warning(s), {shown['info']} info" in text


def test_quiet_with_no_findings_prints_nothing():
    p = run_cli(["lint", "-q", str(SAMPLES / "zero2.json"), "--world-size", "8"])
    assert json.loads(run_cli(["lint", str(SAMPLES / "zero2.json"), "--world-size", "8", "--format", "json"])
                      .stdout)["summary"] == {"files": 1, "unreadable": 0, "skipped": 0, "error": 0, "warning": 0,
                                               "info": 0}
    assert p.returncode == 0 and p.stdout == "" and p.stderr == "", (p.stdout, p.stderr)


def _helps():
    import click

    from advisor.cli import main

    ctx = click.Context(main, info_name="ds-advisor")
    for name in main.list_commands(ctx):
        cmd = main.get_command(ctx, name)
        with click.Context(cmd, info_name=name, parent=ctx) as c:
            yield name, cmd, cmd.get_help(c)


def test_no_numeric_option_help_shows_a_missing_bound():
    """click prints a number range as "[x<=None]" when both bounds are None: no command's help
    may show None, inf or nan inside brackets; every bracketed range has a real number."""
    import click

    seen_ranges = 0
    for name, cmd, text in _helps():
        flat = " ".join(text.split())
        bad = re.findall(r"\[[^\]]*\b(?:None|inf|nan)\b[^\]]*\]", flat)
        assert not bad, (name, bad)
        for p in cmd.params:
            if isinstance(p.type, click.types._NumberRangeBase) and (p.type.min is not None or p.type.max is not None):
                seen_ranges += 1
                assert re.search(r"\[[^\]]*x[^\]]*\]", flat), (name, p.name)
    assert seen_ranges > 10
    lint = next(t for n, _, t in _helps() if n == "lint")
    opt = " ".join(lint.split("--max-grad-norm", 1)[1].split("--", 1)[0].split())
    assert opt.startswith("NUMBER Trainer max_grad_norm (default 1.0).") and "[" not in opt, opt


def test_hardware_json_reads_back_as_the_same_hardware_for_every_preset(tmp_path):
    """``hardware --format json`` (the list, and one preset) saved to a file is a valid
    ``--hardware FILE``: the spec reader builds the same hardware as the preset name, every field
    but its origin; it validates against schemas/hardware.schema.json."""
    import jsonschema

    from advisor.cluster.hardware import list_hardware, resolve_hardware
    from tests.conftest import ROOT

    schema = json.loads((ROOT / "schemas" / "hardware.schema.json").read_text())
    listed = json.loads(run_cli(["hardware", "--format", "json"]).stdout)
    names = [h.name for h in list_hardware()]
    assert [h["name"] for h in listed] == names and len(names) >= 10
    for spec in listed:
        jsonschema.Draft202012Validator(schema).validate(spec)
        f = tmp_path / f"{spec['name']}.json"
        f.write_text(json.dumps(spec))
        back, preset = resolve_hardware(str(f)), resolve_hardware(spec["name"])
        assert replace(back, origin=preset.origin) == preset, spec["name"]
    one = json.loads(run_cli(["hardware", "dgx-h100:2", "--format", "json"]).stdout)
    assert one["nodes"] == 2 and one == next(h for h in listed if h["name"] == "dgx-h100") | {"nodes": 2,
                                                                                            "name": "dgx-h100:2"}
    # and the CLI takes it: the same fit as with the preset name
    f = tmp_path / "h.json"
    f.write_text(json.dumps(one))
    m100 = tmp_path / "c.json"
    m100.write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}')
    a = [json.loads(run_cli(["estimate", str(m100), "--params", "7000000000", "--hardware", hw, "--format",
                             "json"]).stdout) for hw in (str(f), "dgx-h100:2")]
    assert a[0]["fit"] == a[1]["fit"] and a[0]["cluster"]["world_size"] == 16


def test_s002_name_and_message_agree_and_explain_finds_it_both_ways(tmp_path):
    from advisor.rules import all_rules

    assert all_rules()["S002"].name == "ignored-key"
    f = tmp_path / "c.json"
    f.write_text('{"train_micro_batch_size_per_gpu": 1, "cuda_visible_devices": "0", "aio": {"block_sizee": 1}}')
    found = [x for x in json.loads(run_cli(["lint", str(f), "--format", "json"]).stdout)["files"][0]["findings"]
             if x["code"] == "S002"]
    assert {x["pointer"] for x in found} == {"/cuda_visible_devices", "/aio/block_sizee"}
    for x in found:
        assert x["message"].startswith("ignored key '") and "silently ignores it" in x["message"], x
        assert "unknown key" not in x["message"]
    for arg in ("S002", "ignored-key"):
        assert run_cli(["explain", arg]).stdout.startswith("[S002 | ignored-key | severity: warning; error for a misspelt top-level key")


def test_sarif_rule_help_is_plain_text_and_markdown():
    """help.text is what `explain` prints (no RST markup left); help.markdown turns the RST inline
    literals into code spans and literal blocks into fenced blocks."""
    from advisor.rules import all_rules

    rules = {r["id"]: r for r in json.loads(run_cli(["lint", str(SAMPLES / "zero2.json"), "--format",
                                                     "sarif"]).stdout)["runs"][0]["tool"]["driver"]["rules"]}
    for code, rule in all_rules().items():
        h = rules[code]["help"]
        assert "``" not in h["text"] and not re.search(r":[a-z]+:`", h["text"]), code
        assert h["markdown"].count("\n```\n") % 2 == 0, code  # fences open and close
        prose = re.sub(r"```.*?```", "", h["markdown"], flags=re.S)
        prose = re.sub(r"`` .+? ``", "", prose, flags=re.S)  # Markdown's spaced span around a backtick
        assert "``" not in prose and not re.search(r":[a-z]+:`", prose), code
    s002 = rules["S002"]["help"]
    # the docstring's anti-pattern literal block and an inline literal, by hand from its source
    assert '```\n"cuda_visible_devices": "0,1,2,3",\n"log": {"steps_per_print": 50}\n```' in s002["markdown"]
    assert "`train_micro_batch_size_per_gpus`" in s002["markdown"]
    assert "A typo such as train_micro_batch_size_per_gpus or" in " ".join(s002["text"].split())
    body, release = run_cli(["explain", "S002"]).stdout.rstrip("\n").rsplit("\n", 1)  # explain's last line: the release
    assert release.startswith("release: DeepSpeed ") and s002["text"] == body.split("\n", 1)[1].rstrip("\n")


@pytest.mark.parametrize("units,base", [("GiB", 2**30), ("GB", 1e9)])
def test_github_annotations_follow_units(tmp_path, units, base):
    """M100 of a 7B model at ZeRO-0 on 24 GB: the annotation names need and capacity in --units,
    each equal to the JSON's bytes / 2^30 or / 1e9, and no size of the other unit system."""
    f = tmp_path / "c.json"
    f.write_text('{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 0}}')
    args = ["estimate", str(f), "--params", "7000000000", "--world-size", "8", "--gpu-memory", "24GB"]
    m100 = next(x for x in json.loads(run_cli(args + ["--format", "json"]).stdout)["findings"] if x["code"] == "M100")
    need, cap = m100["data"]["need"], m100["data"]["capacity"]
    assert cap == 24 * 10**9
    out = run_cli(args + ["--format", "github", "--units", units]).stdout
    line = next(x for x in out.splitlines() if "title=M100" in x)
    # --params: the activations are not estimated, so the need is a floor (M104, 2a12009): "needs >= X"
    needs = "needs >= " if m100["data"].get("lower_bound") else "needs "
    assert m100["data"].get("lower_bound") is True  # --params has no architecture: no activations
    assert f"{needs}{need / base:,.2f} {units} at its peak" in line and f"only {cap / base:,.2f} {units}" in line, line
    other = r"(?:GB|MB|TB)" if units == "GiB" else r"(?:GiB|MiB|TiB)"
    assert not re.search(rf"[0-9] {other}\b", line), line


PER_KEY = {"train_micro_batch_size_per_gpu": 1, "cuda_visible_devices": "0", "log": {"steps_per_print": 5},
           "aio": {"block_sizee": 1}}


@pytest.mark.parametrize("entries,left", [
    ([], {"/cuda_visible_devices", "/log", "/aio/block_sizee"}),
    (["S002:cuda_visible_devices"], {"/log", "/aio/block_sizee"}),
    (["ignored-key:aio.block_sizee"], {"/cuda_visible_devices", "/log"}),
    (["S002:/aio/block_sizee", "s002:log"], {"/cuda_visible_devices"}),
    (["S002:aio"], {"/cuda_visible_devices", "/log"}),  # a key and what lies inside it
    (["S001:cuda_visible_devices"], {"/cuda_visible_devices", "/log", "/aio/block_sizee"}),  # another rule's key
])
def test_per_key_suppression_drops_only_that_rules_finding_at_that_key(tmp_path, entries, left):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({**PER_KEY, **({"ds_advisor": {"ignore": entries}} if entries else {})}))
    found = json.loads(run_cli(["lint", str(f), "--format", "json"]).stdout)["files"][0]["findings"]
    assert {x["pointer"] for x in found if x["code"] == "S002"} == left, found
    assert not [x for x in found if x["code"] == "S007"], found


@pytest.mark.parametrize("entry", ["S002:", "S002:.", "S002:a..b", "S02:log"])
def test_per_key_entry_naming_no_key_or_rule_is_s007(tmp_path, entry):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({**PER_KEY, "ds_advisor": {"ignore": [entry]}}))
    found = json.loads(run_cli(["lint", str(f), "--format", "json"]).stdout)["files"][0]["findings"]
    assert [x["pointer"] for x in found if x["code"] == "S007"] == ["/ds_advisor/ignore/0"], found
    assert len([x for x in found if x["code"] == "S002"]) == 3  # suppresses nothing


@pytest.mark.engine
def test_deepspeed_accepts_a_config_with_per_key_entries():
    """DeepSpeed 0.19.8's own DeepSpeedConfig (no GPU, world size 1) builds the config with a
    per-key ds_advisor section exactly as without it, and keeps the section as given."""
    pytest.importorskip("deepspeed")
    code = textwrap.dedent("""
        import copy
        from deepspeed.runtime import config as dsc
        from deepspeed.runtime.config import DeepSpeedConfig
        dsc.dist.get_rank = lambda *a, **k: 0
        base = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
                "zero_optimization": {"stage": 2}, "cuda_visible_devices": "0"}
        sup = {**base, "ds_advisor": {"ignore": ["S002:cuda_visible_devices", "ignored-key:/a.b/c", "B001"]}}
        a, b = DeepSpeedConfig(copy.deepcopy(base)), DeepSpeedConfig(copy.deepcopy(sup))
        keys = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                "zero_optimization_stage")
        print("SAME", all(getattr(a, k) == getattr(b, k) for k in keys) and a.zero_config == b.zero_config)
        print("KEPT", b._param_dict.get("ds_advisor"))
    """)
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert "SAME True" in p.stdout, (p.stdout, p.stderr[-2000:])
    assert "KEPT {'ignore': ['S002:cuda_visible_devices', 'ignored-key:/a.b/c', 'B001']}" in p.stdout, p.stdout


def test_an_error_on_stderr_folds_on_a_terminal_and_is_one_line_piped(tmp_path, monkeypatch):
    """An exit-2 error is folded on a terminal like every other text (advisor.render.style.width,
    COLUMNS honoured): continuation lines hang 4, a long path is one word, no word is lost.
    Piped it stays one line (the bad-input contract: scripts read it whole)."""
    from click.testing import CliRunner

    import advisor.cli as cli

    missing = tmp_path / ("x" * 70) / "config.json"
    whole = f"ds-advisor: {missing}: no such file (and not a base64-encoded config either)"
    p = run_cli(["estimate", str(missing), "--params", "1000000"], env={"COLUMNS": "60"})
    assert p.returncode == 2 and p.stderr.splitlines() == [whole], p.stderr
    monkeypatch.setattr(cli, "_stderr_is_terminal", lambda: True)
    r = CliRunner().invoke(cli.main, ["estimate", str(missing), "--params", "1000000"], env={"COLUMNS": "60"})
    lines = r.output.splitlines()
    assert r.exit_code == 2 and len(lines) > 1 and not _overlong(r.output, 60), r.output
    assert all(x.startswith("    ") for x in lines[1:]) and f"{missing}:" in r.output.split(), r.output
    assert " ".join(r.output.split()) == whole


@pytest.mark.parametrize("cols", [60, 80])
def test_narrow_generate_table_keeps_each_label_with_its_value(cols, tmp_path):
    """At 60 or 80 columns (a terminal; the plan table needs ~88) each plan is a record of
    "label: value" pairs, none split across lines, and the values are generate's JSON: the
    accelerator bytes per rank / 2^30 at one decimal, the stage and micro-batch."""
    args = ["generate", "--model", "llama-3-8b", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
            "--global-batch", "64", "--seq-len", "2048"]
    plans = json.loads(run_cli(args + ["--format", "json"]).stdout)["plans"]
    text = run_cli(args + ["--top", "3", "-o", str(tmp_path / "ds.json")], env={"COLUMNS": str(cols)}).stdout
    assert not _overlong(text, cols), text
    lines = text.splitlines()
    for i, plan in enumerate(plans[:3], 1):
        start = next(k for k, x in enumerate(lines) if x.startswith(f"#{i}  "))
        record = lines[start:next((k for k, x in enumerate(lines) if k > start and not x.startswith("    ")),
                                  len(lines))]
        joined = " ".join(record)
        for label, value in (("stage", plan["stage"]), ("micro", plan["micro_batch"]),
                             ("GA", plan["gradient_accumulation"]),
                             ("accel GiB", f"{plan['accelerator_bytes_per_rank'] / 2**30:.1f}")):
            assert f"{label}: {value}" in joined, (label, value, record)
        for x in record:  # no line ends on a label whose value went to the next line
            assert not re.search(r"(stage|offload|micro|GA|ckpt|GiB|step s|exposed s|why):$", x), record


def test_a_click_usage_error_folds_on_a_terminal_too(monkeypatch):
    """click's own usage error (a bad --checkpointing) is one bad-input line naming the command,
    the option and the problem, exit 2, no "Usage:" block; on a terminal it folds like our
    messages: at COLUMNS=60 no line is longer than 60, continuation lines hang 4, no word lost."""
    from click.testing import CliRunner

    import advisor.cli as cli

    whole = ("ds-advisor: estimate: invalid value for '--checkpointing': 'bogus' is not none, full, selective, a "
             "number of layers (e.g. 16), sac[:BUDGET] (a fraction of a layer) or sac:SIZE (e.g. sac:24GiB) "
             "(see ds-advisor estimate --help)")
    args = ["estimate", "x.json", "--params", "5", "--checkpointing", "bogus"]
    p = run_cli(args, env={"COLUMNS": "60"})
    assert p.returncode == 2 and p.stderr.splitlines() == [whole], p.stderr
    monkeypatch.setattr(cli, "_stderr_is_terminal", lambda: True)
    r = CliRunner().invoke(cli.main, args, env={"COLUMNS": "60"})
    err = r.output
    assert r.exit_code == 2 and not _overlong(err, 60) and "Usage:" not in err, r.output
    assert len(err.splitlines()) > 1 and all(x.startswith("    ") for x in err.splitlines()[1:]), err
    assert " ".join(err.split()) == whole
