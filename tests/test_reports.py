"""Reports tools consume: SARIF 2.1.0 (validated against the official OASIS schema), GitHub
Actions annotations (escaping), and the JSON outputs against schemas/*-output.schema.json."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import jsonschema
import pytest

from advisor.findings import Finding
from advisor.render.github import annotation, command, escape_data, escape_property, github_annotations
from advisor.render.text import FileResult
from advisor.rules import all_rules
from advisor.render.sarif import artifact_uri, to_sarif
from tests.conftest import CASES, ROOT, SAMPLES, run_cli

SARIF_SCHEMA = ROOT / "tests" / "fixtures" / "sarif" / "sarif-schema-2.1.0.json"
SARIF_SCHEMA_SHA256 = "c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e"


@pytest.fixture(scope="module")
def sarif_validator() -> jsonschema.Draft4Validator:
    schema = json.loads(SARIF_SCHEMA.read_text())
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def _errors(validator, doc) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]


# --- SARIF --------------------------------------------------------------------------------------

def test_sarif_fixture_is_the_official_file():
    data = SARIF_SCHEMA.read_bytes()
    assert hashlib.sha256(data).hexdigest() == SARIF_SCHEMA_SHA256
    s = json.loads(data)
    assert s["id"] == "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
    assert s["properties"]["version"]["enum"] == ["2.1.0"]


def test_sarif_schema_rejects_a_broken_log(sarif_validator):
    """The validator is not vacuous: a result without a message, and a bad level, are refused."""
    bad = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}},
                                         "results": [{"ruleId": "B001", "level": "fatal"}]}]}
    errs = _errors(sarif_validator, bad)
    assert any("message" in e for e in errs) and any("fatal" in e for e in errs)


def test_lint_sarif_cli_validates_and_locates(sarif_validator, tmp_path):
    cfgs = sorted(str(p.relative_to(ROOT)) for p in SAMPLES.glob("*.json"))
    # The cases lie inside the working directory (relative URIs); one copy lies outside it
    # (an absolute file URI).
    outside = tmp_path / "outside.json"
    outside.write_text((CASES / "C01-misplaced-offload" / "config.json").read_text())
    case_cfgs = sorted(str(p.relative_to(ROOT)) for p in CASES.glob("*/config.json")) + [str(outside)]
    p = run_cli(["lint", *cfgs, *case_cfgs, "--format", "sarif"], cwd=ROOT)
    assert p.returncode == 1, p.stderr  # the samples include an "auto" config: A001 errors
    log = json.loads(p.stdout)
    assert _errors(sarif_validator, log) == []
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    ids = [r["id"] for r in rules]
    assert set(all_rules()) <= set(ids) and "M100" in ids and ids == sorted(ids)
    by_id = {r["id"]: r for r in rules}
    b001 = all_rules()["B001"]
    assert by_id["B001"]["name"] == "batch-triple"
    # help.text / fullDescription: the plain text `explain B001` prints (after its header line),
    # no RST markup; help.markdown: the same words with code spans
    explained = run_cli(["explain", "B001"]).stdout.rstrip("\n").rsplit("\n", 1)[0].split("\n", 1)[1].rstrip("\n")  # less the release line
    assert by_id["B001"]["fullDescription"]["text"] == by_id["B001"]["help"]["text"] == explained
    assert all("``" not in r["help"]["text"] and ":func:`" not in r["help"]["text"] for r in rules)
    assert "`train_batch_size: 7, train_micro_batch_size_per_gpu: 2`" in by_id["B001"]["help"]["markdown"]
    assert by_id["B001"]["defaultConfiguration"]["level"] == "error"
    assert by_id["B001"]["shortDescription"]["text"].startswith("train_batch_size = micro-batch")
    levels = {c: ("note" if r.severity == "info" else r.severity) for c, r in all_rules().items()}
    assert all(by_id[c]["defaultConfiguration"]["level"] == lv for c, lv in levels.items())

    # Same findings as --format json, one result each, with positions and pointers.
    pj = run_cli(["lint", *cfgs, *case_cfgs, "--format", "json"], cwd=ROOT)
    findings = [f for fr in json.loads(pj.stdout)["files"] for f in fr["findings"]]
    assert len(run["results"]) == len(findings) > 5
    for res, f in zip(run["results"], findings):
        assert res["ruleId"] == f["code"]
        assert rules[res["ruleIndex"]]["id"] == f["code"]
        assert res["level"] == {"info": "note"}.get(f["severity"], f["severity"])
        assert res["message"]["text"].startswith(f["message"])
        assert res["properties"]["pointer"] == f["pointer"]
        phys = res["locations"][0]["physicalLocation"]
        if f["file"] == str(outside):  # outside the working directory: absolute file URI
            assert phys["artifactLocation"] == {"uri": outside.resolve().as_uri()}
        else:
            assert f["file"].startswith(("sample_configs/", "tests/data/cases/")), f["file"]
            assert phys["artifactLocation"] == {"uri": f["file"], "uriBaseId": "%SRCROOT%"}
        assert phys["region"] == {"startLine": f["line"], "startColumn": f["column"]}
    a001 = next(r for r in run["results"] if r["ruleId"] == "A001")
    assert a001["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == \
        "sample_configs/hf_trainer_zero3_auto.json"
    assert a001["locations"][0]["physicalLocation"]["region"] == {"startLine": 2, "startColumn": 4}
    assert [i["executionSuccessful"] for i in run["invocations"]] == [True]
    assert set(run["invocations"][0]["properties"]["deepspeedRelease"]) == {"requested", "checked", "origin"}


def test_sarif_unreadable_file_is_a_notification(sarif_validator, tmp_path):
    bad = tmp_path / "ds_config.json"
    bad.write_text('{"train_batch_size": ')
    p = run_cli(["lint", str(bad), "--format", "sarif"], cwd=tmp_path)
    assert p.returncode == 2
    log = json.loads(p.stdout)
    assert _errors(sarif_validator, log) == []
    inv = log["runs"][0]["invocations"][0]
    assert inv["executionSuccessful"] is False
    (n,) = inv["toolExecutionNotifications"]
    assert n["level"] == "error" and "ds_config.json" in n["message"]["text"]
    assert n["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "ds_config.json",
                                                                          "uriBaseId": "%SRCROOT%"}
    assert log["runs"][0]["results"] == []


def test_sarif_odd_paths_and_no_position(sarif_validator, tmp_path):
    fs = [Finding("M100", "error", "/zero_optimization", "accelerator per rank: over by 3 GB", file="a b/c%d.json",
                  data={"over": 3_000_000_000}),
          Finding("Z001", "info", "", "note without a file", file="-")]
    log = to_sarif([FileResult(file="a b/c%d.json", findings=fs[:1]), FileResult(file="-", findings=fs[1:])],
                   cwd=str(tmp_path))
    assert _errors(sarif_validator, log) == []
    r0, r1 = log["runs"][0]["results"]
    assert r0["locations"][0]["physicalLocation"] == {"artifactLocation": {"uri": "a%20b/c%25d.json",
                                                                           "uriBaseId": "%SRCROOT%"}}
    assert r0["properties"]["data"] == {"over": 3_000_000_000}
    assert "physicalLocation" not in r1["locations"][0] and r1["level"] == "note"
    assert r1["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == "/"
    assert artifact_uri("/etc/x.json", cwd=str(tmp_path)) == ("file:///etc/x.json", None)
    assert log["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.as_uri() + "/"


def test_sarif_fingerprint_survives_a_moved_line():
    f = Finding("B001", "error", "/train_batch_size", "m", line=2, column=4, file="x.json")
    g = Finding("B001", "error", "/train_batch_size", "m", line=9, column=4, file="x.json")
    h = Finding("B001", "error", "/gradient_accumulation_steps", "m", line=2, column=4, file="x.json")
    fp = [to_sarif([FileResult("x.json", [x])])["runs"][0]["results"][0]["partialFingerprints"] for x in (f, g, h)]
    assert fp[0] == fp[1] != fp[2]


# --- GitHub workflow commands ------------------------------------------------------------------

def test_github_escaping():
    assert escape_data("50% done\r\nnext, a:b") == "50%25 done%0D%0Anext, a:b"
    assert escape_property("dir,a/b:c%d\n") == "dir%2Ca/b%3Ac%25d%0A"
    assert command("warning", "x", file="a,b.json", line=3, col=None, title="T") == \
        "::warning file=a%2Cb.json,line=3,title=T::x"
    assert command("notice", "bare") == "::notice::bare"


def test_github_annotation_of_a_finding():
    f = Finding("P002", "info", "/fp16/loss_scale", "loss_scale is 100% ignored, with bf16: fp16 is off",
                fix="remove it\nor enable fp16", line=7, column=5, file="cfg, v2:final.json")
    assert annotation(f) == ("::notice file=cfg%2C v2%3Afinal.json,line=7,col=5,title=P002::/fp16/loss_scale: "
                             "loss_scale is 100%25 ignored, with bf16: fp16 is off%0Afix: remove it%0Aor enable fp16")
    nofile = Finding("K110", "error", "", "8 ranks per node but 4 GPUs")
    assert annotation(nofile, "-") == "::error title=K110::/: 8 ranks per node but 4 GPUs"


def test_lint_github_cli(tmp_path):
    cfg = tmp_path / "ds_config.json"
    cfg.write_text('{\n  "train_batch_size": "auto",\n  "gradient_accumulation_steps": 1\n}\n')
    bad = tmp_path / "broken.json"
    bad.write_text("{")
    p = run_cli(["lint", "ds_config.json", "broken.json", "--format", "github"], cwd=tmp_path)
    assert p.returncode == 2  # one unreadable file
    lines = p.stdout.splitlines()
    a001 = [ln for ln in lines if "title=A001" in ln]
    assert len(a001) == 1
    assert a001[0].startswith("::error file=ds_config.json,line=2,col=")
    assert "::/train_batch_size: train_batch_size is \"auto\"" in a001[0] and "%0Afix: " in a001[0]
    assert any(ln.startswith("::error file=broken.json,title=unreadable config::") for ln in lines)
    assert all("\r" not in ln for ln in lines)
    assert lines[-1].startswith("ds-advisor: 2 file(s): ") and ", 1 unreadable (checked against DeepSpeed " in lines[-1]


def test_github_annotations_counts():
    rs = [FileResult("a.json", [Finding("B001", "error", "/x", "m1", line=1, column=1),
                                Finding("Z001", "warning", "/y", "m2")])]
    out = github_annotations(rs).splitlines()
    assert out[0] == "::error file=a.json,line=1,col=1,title=B001 batch-triple::/x: m1"
    assert out[1].startswith("::warning file=a.json,title=Z001 ") and out[1].endswith("::/y: m2")
    assert out[2].startswith("ds-advisor: 1 file(s): 1 error(s), 1 warning(s), 0 info (checked against DeepSpeed ")


# --- JSON outputs against schemas/*-output.schema.json ------------------------------------------

def _output_validator(name: str) -> jsonschema.Draft202012Validator:
    from referencing import Registry, Resource

    schemas = {n: json.loads((ROOT / "schemas" / f"{n}-output.schema.json").read_text()) for n in ("lint", "estimate")}
    for s in schemas.values():
        jsonschema.Draft202012Validator.check_schema(s)
    reg = Registry().with_resources([(s["$id"], Resource.from_contents(s)) for s in schemas.values()])
    return jsonschema.Draft202012Validator(schemas[name], registry=reg)


def _case_configs() -> list[str]:
    return sorted(str(p) for p in CASES.glob("*/config.json"))


def test_lint_json_validates_against_its_schema(tmp_path):
    v = _output_validator("lint")
    (tmp_path / "broken.json").write_text('{"a": 1,')
    cfgs = [str(p) for p in sorted(SAMPLES.glob("*.json"))] + _case_configs() + [str(tmp_path / "broken.json")]
    p = run_cli(["lint", *cfgs, "--format", "json", "--world-size", "8", "--model", "llama-3.2-1b"])
    out = json.loads(p.stdout)
    assert _errors(v, out) == []
    assert out["summary"]["files"] == len(cfgs) and out["summary"]["unreadable"] == 1
    assert sum(len(f["findings"]) for f in out["files"]) == sum(out["summary"][s] for s in ("error", "warning", "info"))
    # Not vacuous: a wrong severity, a missing field and an unknown version are each refused.
    bad = json.loads(p.stdout)
    f0 = next(f for fr in bad["files"] for f in fr["findings"])
    f0["severity"] = "fatal"
    del bad["summary"]["info"]
    bad["schema_version"] = 2
    msgs = " ".join(_errors(v, bad))
    assert "'fatal'" in msgs and "'info' is a required property" in msgs and "['schema_version']: 1 was expected" in msgs


@pytest.mark.parametrize("config", [*sorted(p.name for p in SAMPLES.glob("*.json")), "C06", "C08"])
def test_estimate_json_validates_against_its_schema(config):
    v = _output_validator("estimate")
    path = str(SAMPLES / config) if config.endswith(".json") else str(next(CASES.glob(f"{config}-*")) / "config.json")
    args = ["estimate", path, "--model", "llama-3.2-1b", "--world-size", "8", "--gpus-per-node", "8",
            "--gpu-memory", "80GB", "--host-memory", "512GB", "--format", "json"]
    if "hf_trainer" in config:
        args.append("--hf")
    p = run_cli(args)
    assert p.returncode in (0, 1), p.stderr
    out = json.loads(p.stdout)
    assert _errors(v, out) == []
    assert out["model"]["parameters"] == 1_235_814_400  # the llama-3.2-1b preset's published count
    assert out["cluster"]["world_size"] == 8
    acc = next(f for f in out["fit"] if f["tier"] == "accelerator")
    assert acc["capacity"] == 80_000_000_000 and acc["headroom"] == acc["capacity"] - acc["need"]
    assert p.returncode == (0 if all(f["fits"] is not False for f in out["fit"]) else 1)
    for role in out["ranks"]:
        for tier, classes in role["tiers"].items():
            assert classes["total"] == sum(b for c, b in classes.items() if c != "total")



def test_a_refused_configs_estimate_json_validates(tmp_path):
    # an NVMe parameter swap whose aio buffers (buffer_size 1e6 elements) cannot hold llama-3-8b's
    # largest partition (embed_tokens, 128,256 x 4,096 / 8 = 65,667,072) is refused (M001): no ranks
    cfg = tmp_path / "z3nvme.json"
    cfg.write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2, "bf16": {"enabled": True},
        "optimizer": {"type": "Adam", "params": {"lr": 1e-4}},
        "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": str(tmp_path),
                                                            "buffer_count": 5, "buffer_size": 1000000},
                              "offload_optimizer": {"device": "nvme", "nvme_path": str(tmp_path)}}}))
    p = run_cli(["estimate", str(cfg), "--model", "llama-3-8b", "--world-size", "8", "--format", "json"])
    out = json.loads(p.stdout)
    assert out["ranks"] == [] and "M001" in {f["code"] for f in out["findings"]}
    assert _errors(_output_validator("estimate"), out) == []

# --- pre-commit hook and progress helper --------------------------------------------------------

def test_pre_commit_hook_definition():
    import re

    import yaml

    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "ds-advisor-lint" and hook["entry"] == "ds-advisor lint" and hook["language"] == "python"
    rx = re.compile(hook["files"])
    for name in ("ds_config.json", "train/ds_config_zero3.json", "deepspeed.hjson", "configs/zero2.json",
                 "zero_infinity_nvme.json"):
        assert rx.search(name), name
    for name in ("package.json", "my_ds_config.json", "ds_config.yaml", "zero/README.md", "tsconfig.json"):
        assert not rx.search(name), name


class _FakeTTY:
    def __init__(self, tty: bool):
        import io
        self._tty, self.buf = tty, io.StringIO()

    def isatty(self) -> bool:
        return self._tty

    def write(self, s: str) -> int:
        return self.buf.write(s)

    def flush(self) -> None:
        pass


def test_progress_silent_off_a_terminal(monkeypatch):
    from advisor.progress import enabled, progress, track

    monkeypatch.delenv("DS_ADVISOR_NO_PROGRESS", raising=False)
    s = _FakeTTY(False)
    with progress("work", total=3, stream=s) as bar:
        bar.advance()
        bar.update(completed=3)
    assert s.buf.getvalue() == "" and not enabled(s)
    assert list(track([1, 2, 3], "t", stream=s)) == [1, 2, 3] and s.buf.getvalue() == ""
    t = _FakeTTY(True)
    assert enabled(t)
    monkeypatch.setenv("DS_ADVISOR_NO_PROGRESS", "1")
    assert not enabled(t)


def test_progress_draws_on_a_terminal(monkeypatch):
    from advisor.progress import track

    monkeypatch.delenv("DS_ADVISOR_NO_PROGRESS", raising=False)
    t = _FakeTTY(True)
    assert sum(track(range(5), "summing", stream=t)) == 10
    assert "summing" in t.buf.getvalue()


# --- HTML report: content, atomic writes, real headless Chromium --------------------------------

NVME_SAMPLE = SAMPLES / "zero_infinity_nvme.json"
REPORT_ARGS = ["--model", "llama-3.2-1b", "--world-size", "8", "--gpus-per-node", "8", "--gpu-memory", "80GB",
               "--host-memory", "512GB"]


def _report(out: Path, *extra: str, cfg: Path = NVME_SAMPLE):
    p = run_cli(["report", str(cfg), *REPORT_ARGS, "-o", str(out), *extra])
    return p


def _estimate_nvme():
    from advisor.cluster.hardware import Capacity
    from advisor.views.estimate import estimate
    from advisor.plan import Cluster
    from advisor.planning import build_plan
    from advisor.config.loading import load_config
    from advisor.model.specs import resolve_model

    return estimate(build_plan(load_config(str(NVME_SAMPLE)), resolve_model("llama-3.2-1b"), Cluster(8, 8)),
                    Capacity(80 * 10**9, 512 * 10**9, None))


def test_tier_bars_match_the_estimate():
    pytest.importorskip("matplotlib")
    from advisor.render.html import tier_bars

    r = _estimate_nvme()
    bars = tier_bars(r)
    assert [b.tier for b in bars] == ["accelerator", "host", "nvme"]
    acc, host, nvme = bars
    (role,) = r.roles  # ZeRO-3 with 8 equal ranks: one role
    assert role.ranks == list(range(8))
    # each bar is what is live at its tier's peak instant: the worst rank's timeline there, by class
    fit = {f.tier: f for f in r.fit}
    tl = role.timeline
    i = [x.key for x in tl.instants].index(fit["accelerator"].instant)
    for c in acc.classes:
        assert acc.classes[c] == sum(n for _, t, k, n in tl.entries[i] if t == "accelerator" and k == c), c
    assert acc.total == fit["accelerator"].tracked
    # host and NVMe are one node's 8 ranks, as the fit rows count them
    j = [x.key for x in tl.instants].index(fit["host"].instant)
    assert host.classes["gradients"] == 8 * sum(n for _, t, k, n in tl.entries[j]
                                                 if t in ("host_pinned", "host_pageable") and k == "gradients")
    assert host.total == fit["host"].need
    assert nvme.total == 8 * role.tiers()["nvme"]["total"] == fit["nvme"].need
    # offload_param nvme writes a swap file at init for every partition >= 1 MiB even when the
    # default max_in_cpu keeps them all in RAM (measured: tests/engine parity cell
    # big-z3-fp16-op_nvme-default-maxincpu-w1), so the NVMe bar has a parameters segment too.
    assert nvme.classes["parameters"] > 0 and nvme.classes["optimizer_states"] > 0
    assert acc.capacity == 80 * 10**9 and host.capacity == 512 * 10**9 and nvme.capacity is None


def test_report_html_is_self_contained(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "report.html"
    p = _report(out)
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    # No network: no scripts, and every src/href is a fragment or a data: URI.
    assert "<script" not in text.lower()
    refs = re.findall(r"""(?:src|href|xlink:href)\s*=\s*["']?([^"' >]+)""", text, re.I)
    assert all(x.startswith(("#", "data:")) for x in refs), [x for x in refs if not x.startswith(("#", "data:"))]
    assert "@import" not in text and "url(http" not in text and "@font-face" not in text
    assert len(re.findall(r'id="tier-bar-(accelerator|host|nvme)"', text)) == 3
    assert 'id="capacity-accelerator"' in text and 'id="capacity-host"' in text and 'id="capacity-nvme"' not in text
    assert 'id="movement-chart"' in text or "id=movement-chart" in text
    assert "M100" in text and "DOES NOT FIT" in text  # 418 GB needed per rank against 80 GB
    assert "DeepSpeedZeroOptimizer_Stage3" in text  # assumptions section
    assert "id=checkpoint" in text


def test_report_refuses_to_overwrite_without_force(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "report.html"
    out.write_text("keep me")
    p = _report(out)
    assert p.returncode == 2 and "exists (use --force" in p.stderr
    assert out.read_text() == "keep me"
    p = _report(out, "--force")
    assert p.returncode == 0, p.stderr
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert [x.name for x in tmp_path.iterdir()] == ["report.html"]  # no temporary file left behind


def test_write_atomic(tmp_path, monkeypatch):
    from advisor.render import html as html_report
    from advisor.render.html import write_atomic

    target = tmp_path / "r.html"
    write_atomic(str(target), "one")
    assert target.read_text() == "one"
    with pytest.raises(FileExistsError):
        write_atomic(str(target), "two")
    assert target.read_text() == "one"
    write_atomic(str(target), "three", force=True)
    assert target.read_text() == "three"

    # A failure while writing leaves the old file whole and no temporary file.
    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(html_report.os, "fsync", boom)
    with pytest.raises(OSError):
        write_atomic(str(target), "four" * 1000, force=True)
    assert target.read_text() == "three"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["r.html"]


def test_report_cli_needs_a_model(tmp_path):
    p = run_cli(["report", str(NVME_SAMPLE), "-o", str(tmp_path / "x.html")])
    assert p.returncode == 2 and "--model" in p.stderr
    assert not (tmp_path / "x.html").exists()


def test_lint_and_estimate_do_not_import_matplotlib():
    code = ("import sys, runpy; sys.argv=['ds-advisor','lint',%r,'--format','sarif'];"
            "from advisor.cli import main\ntry: main()\nexcept SystemExit: pass\n"
            "bad=[m for m in ('matplotlib','torch','deepspeed') if m in sys.modules]; print('IMPORTED', bad)")
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", code % str(NVME_SAMPLE)], capture_output=True, text=True, cwd=ROOT)
    assert "IMPORTED []" in p.stdout, p.stdout[-500:] + p.stderr[-2000:]


CHROMIUM = next((c for c in ("chromium", "chromium-browser") if shutil.which(c)), None)


def _chromium(args: list[str], timeout: float = 120):
    import subprocess

    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--hide-scrollbars", "--enable-logging=stderr", "--v=0", "--user-data-dir=" + tempfile.mkdtemp()]
    return subprocess.run(base + args, capture_output=True, text=True, timeout=timeout)


def _console_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ":CONSOLE" in ln]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian package chromium)")
def test_report_in_headless_chromium(tmp_path, tmp_path_factory, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "report.html"
    p = _report(out)
    assert p.returncode == 0, p.stderr
    url = out.as_uri()

    # Control: the log scan sees a console error when a page has one.
    ctl = tmp_path / "control.html"
    ctl.write_text("<!DOCTYPE html><link rel=icon href='data:,'><script>console.error('ds-advisor-control')"
                   "</script><p>x")
    c = _chromium(["--dump-dom", ctl.as_uri()])
    assert any("ds-advisor-control" in ln for ln in _console_lines(c.stderr)), c.stderr[-3000:]

    d = _chromium(["--dump-dom", url])
    assert d.returncode == 0, d.stderr[-3000:]
    assert _console_lines(d.stderr) == []
    dom = d.stdout
    bars = re.findall(r'<g id="tier-bar-([a-z]+)"', dom)
    assert sorted(bars) == ["accelerator", "host", "nvme"]  # one bar per tier, in the rendered DOM
    segs = set(re.findall(r'<g id="seg-(nvme-[a-z_]+)"', dom))
    # parameters too: offload_param nvme writes its swap files at init (see test_tier_bars_match_the_estimate)
    assert segs == {"nvme-gradients", "nvme-master_weights", "nvme-optimizer_states", "nvme-parameters"}
    assert re.search(r'<g id="capacity-accelerator"', dom) and not re.search(r'<g id="capacity-nvme"', dom)
    # One unit system on the rendered page (issue 22): every size in GiB, in the tables and in the
    # charts' own text (SVG text kept as text), none in GB (a vendor's "80GB" in a name is no size).
    shown = re.sub(r"<[^>]+>", " ", re.sub(r"<style.*?</style>", " ", dom, flags=re.S))
    assert re.search(r"[0-9] GiB\b", shown) and re.search(r"\bGiB per optimizer step\b", shown)
    assert not re.findall(r"[0-9] (?:GB|TB|MB)\b(?!/s)", shown), re.findall(r".{40}[0-9] (?:GB|TB|MB)\b.{20}", shown)
    assert not re.findall(r"[0-9] GB/s", shown)

    art = Path(os.environ.get("DS_ADVISOR_ARTIFACTS") or tmp_path_factory.mktemp("artifacts"))
    art.mkdir(parents=True, exist_ok=True)
    shot = art / "report.png"
    s = _chromium(["--window-size=1280,2400", f"--screenshot={shot}", url])
    assert s.returncode == 0, s.stderr[-3000:]
    assert _console_lines(s.stderr) == []
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (w, h) == (1280, 2400) and len(png) > 50_000  # a rendered page, not a blank one
    with capsys.disabled():
        print(f"\n[ci-artifact] HTML report screenshot: {shot}\n[ci-artifact] HTML report: {out}")


def test_check_sarif_validates_against_the_official_schema(tmp_path):
    """check --format sarif: a no-go check (32B ZeRO-2 on 80 GB GPUs) gives an M100 result that
    validates against the official SARIF 2.1.0 schema."""
    import jsonschema

    from tests.conftest import CASES, run_cli

    schema = json.loads((Path(__file__).parent / "fixtures" / "sarif" / "sarif-schema-2.1.0.json").read_text())
    p = run_cli(["check", str(CASES / "C06-zero2-32b-8gpu" / "config.json"), "--params", "32763876352",
                 "--world-size", "8", "--gpus-per-node", "8", "--gpu-memory", "80GB", "--host-memory", "2TB",
                 "--format", "sarif"], env={"PATH": "/nonexistent"})
    assert p.returncode == 1, p.stderr
    log = json.loads(p.stdout)
    jsonschema.validate(log, schema)
    assert any(r["ruleId"] == "M100" and r["level"] == "error" for r in log["runs"][0]["results"])


# --- HTML report: same options and numbers as estimate; checkpoint as tables -------------------

def _section_html(page: str, section_id: str) -> str:
    """The HTML of one report section: from its <h2 id=...> to the next <h2 or </body>."""
    start = page.index(f"<h2 id={section_id}>")
    end = min(i for i in (page.find("<h2", start + 4), page.find("</body>", start)) if i != -1)
    return page[start:end]


def _visible_text(fragment: str) -> str:
    """What a reader sees: tags (with their attributes) dropped, entities decoded."""
    import html as _html

    inline = re.sub(r"</?(?:var|code|span|b)\b[^>]*>", "", fragment)
    return _html.unescape(re.sub(r"<[^>]*>", " ", inline))


def _peak_bytes(page: str) -> int:
    m = re.search(r"<span id=peak-accelerator data-bytes=(\d+)>([\d,]+) bytes", page)
    assert m, "no accelerator peak element in the report"
    assert int(m.group(2).replace(",", "")) == int(m.group(1))  # the shown number is the attribute's
    return int(m.group(1))


def _need_bytes(page: str) -> int:
    m = re.search(r"id=fit-need-accelerator data-bytes=(\d+)>", page)
    assert m, "no accelerator need cell in the report's fit table"
    return int(m.group(1))


def test_report_takes_estimate_options_and_shows_its_peak(tmp_path):
    """report with --seq-len/--checkpointing full/--micro-batch draws exactly what estimate
    computes for the same arguments; the options change the numbers (they are not ignored)."""
    pytest.importorskip("matplotlib")
    cfg = SAMPLES / "zero2.json"
    shared = ["--model", "llama-3.2-1b", "--world-size", "8", "--gpus-per-node", "8", "--gpu-memory", "80GB"]
    opts = ["--seq-len", "2048", "--checkpointing", "full", "--micro-batch", "2",
            "--runtime-overhead", "cuda_context=500MiB,nccl=300MiB,allocator=1GiB,deepspeed=0"]
    pe = run_cli(["estimate", str(cfg), *shared, *opts, "--format", "json"])
    assert pe.returncode in (0, 1), pe.stderr
    est = json.loads(pe.stdout)
    assert est["assumptions"]["workload"] == {"seq_len": 2048, "micro_batch": 2, "checkpointing": "full",
                                              "attention": "flash"}
    peak = max(r["peak"]["accelerator"]["bytes"] for r in est["ranks"])
    need = next(f["need"] for f in est["fit"] if f["tier"] == "accelerator")
    assert need == peak + (500 << 20) + (300 << 20) + (1 << 30)  # every term given

    out = tmp_path / "report.html"
    p = run_cli(["report", str(cfg), *shared, *opts, "-o", str(out)])
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    assert _peak_bytes(page) == peak and _need_bytes(page) == need
    assert "sequence 2,048" in re.sub(r"\s+", " ", _visible_text(_section_html(page, "assumptions")))

    # Without the workload options both commands fall back to the model's 131,072 tokens, and
    # the page follows: a larger peak than with 2,048 tokens and full checkpointing.
    default = tmp_path / "default.html"
    p = run_cli(["report", str(cfg), *shared, "-o", str(default)])
    assert p.returncode == 0, p.stderr
    pd = run_cli(["estimate", str(cfg), *shared, "--format", "json"])
    est_d = json.loads(pd.stdout)
    assert _peak_bytes(default.read_text()) == max(r["peak"]["accelerator"]["bytes"] for r in est_d["ranks"]) > peak


def test_report_takes_hardware_and_trainer_options(tmp_path):
    """--hardware supplies capacities and --hf with Trainer arguments resolves "auto", in the
    report as in estimate."""
    pytest.importorskip("matplotlib")
    cfg = SAMPLES / "hf_trainer_zero3_auto.json"
    args = ["--model", "llama-3.2-1b", "--hardware", "dgx-h100", "--hf", "--per-device-train-batch-size", "2",
            "--seq-len", "1024"]
    pe = run_cli(["estimate", str(cfg), *args, "--format", "json"])
    est = json.loads(pe.stdout)
    assert est["assumptions"]["workload"]["micro_batch"] == 2  # from --per-device-train-batch-size
    acc = next(f for f in est["fit"] if f["tier"] == "accelerator")
    assert acc["capacity"] == 81559 * 2**20 and est["cluster"]["world_size"] == 8  # dgx-h100: nvidia-smi 81559MiB
    out = tmp_path / "r.html"
    p = run_cli(["report", str(cfg), *args, "-o", str(out)])
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    assert _need_bytes(page) == acc["need"]
    assert _peak_bytes(page) == max(r["peak"]["accelerator"]["bytes"] for r in est["ranks"])
    assert 'id="capacity-accelerator"' in page and "world size 8 " in page


@pytest.mark.parametrize("config", ["zero2.json", "zero_infinity_nvme.json"])
def test_report_checkpoint_section_is_tables_not_dicts(tmp_path, config):
    pytest.importorskip("matplotlib")
    out = tmp_path / "report.html"
    p = _report(out, cfg=SAMPLES / config)
    assert p.returncode == 0, p.stderr
    sec = _section_html(out.read_text(), "checkpoint")
    assert "<table id=checkpoint-files>" in sec and "<table id=checkpoint-summary-table>" in sec
    text = _visible_text(sec)
    # No Python reprs and no raw dicts: the only braces are JSON quoted from a note, set as code
    # (and that JSON parses); outside <code> there are none at all.
    assert "None" not in text and "'" not in text and "True" not in text
    for code in re.findall(r"<code>(.*?)</code>", sec, re.S):
        c = _visible_text(code)
        if "{" in c:
            json.loads(c)
    outside = _visible_text(re.sub(r"<code>.*?</code>", " ", sec, flags=re.S))
    assert "{" not in outside and "}" not in outside

    ck = _estimate_checkpoint(config)
    flat = re.sub(r"\s+", " ", text)
    per_save = ck["per_save_bytes"]
    assert f"per save {per_save:,} bytes" in flat
    optim = [f for f in ck["files"] if f["kind"] == "optim_states"]
    assert len(optim) == 8 and len({f["bytes"] for f in optim}) == 1
    # The 8 identical per-rank optimizer files are one row: rank span, count, bytes each.
    rows = re.findall(r"<tr[^>]*><td><code>(?:(?!</td>).)*zero_pp_rank_<var>0\.\.7</var>_mp_rank_00_optim_states\.pt</code></td>"
                      r"(.*?)</tr>", sec)
    assert len(rows) == 1, sec[:2000]
    row = re.sub(r"\s+", " ", _visible_text(rows[0]))
    assert f"× 8 {optim[0]['bytes']:,} bytes" in row and "each" in row
    assert f"{optim[0]['bytes'] * 8:,} bytes" in row
    # The 16-bit export line, with the real figures.
    s16 = ck["save_16bit_model"]
    if s16["writes"]:
        assert f"pytorch_model.bin, {s16['bytes']:,} bytes" in flat
    else:
        assert "16-bit export (save_16bit_model) writes nothing" in flat
    assert "ds_to_universal" in flat  # the notes
    # Assumptions: no reprs either (None and the list of note dicts were printed raw before).
    assm = _visible_text(_section_html(out.read_text(), "assumptions"))
    assert "None" not in assm and "{" not in assm and "'" not in assm


def _estimate_checkpoint(config: str) -> dict:
    from advisor.views.estimate import estimate
    from advisor.plan import Cluster
    from advisor.planning import build_plan
    from advisor.config.loading import load_config
    from advisor.model.specs import resolve_model

    r = estimate(build_plan(load_config(str(SAMPLES / config)), resolve_model("llama-3.2-1b"), Cluster(8, 8)))
    return r.sections["checkpoint"]


def test_checkpoint_html_groups_by_rank_and_shows_timing():
    """The renderer alone: files differing only in the rank fold into one row per size, zero-padded
    rank folders keep their width, a rank whose file differs stays alone; seconds and the interval
    appear when the plan has them; absent values are left out, not printed as None."""
    from advisor.render.html import checkpoint_html, group_checkpoint_files

    files = [{"path": f"global_step{{N}}/zero_pp_rank_{r}_mp_rank_00_optim_states.pt", "rank": r,
              "bytes": 12_045_391_872, "kind": "optim_states", "parts": {"a": 1, "b": 2}} for r in range(8)]
    files += [{"path": f"global_step{{N}}/offloaded_tensors/rank{r:02d}/0_3.tensor.swp", "rank": r,
               "bytes": 100 if r < 4 else 200, "kind": "offloaded_tensors", "parts": {}} for r in range(8)]
    files += [{"path": "latest", "rank": 0, "bytes": 16, "kind": "latest", "parts": {}}]
    rows = group_checkpoint_files(files)
    assert [(r["ranks"], r["bytes"]) for r in rows] == [
        (list(range(8)), 12_045_391_872), ([0, 1, 2, 3], 100), ([4, 5, 6, 7], 200), ([0], 16)]
    assert rows[1]["rank_width"] == 2 and rows[0]["rank_width"] == 0

    ck = {"zero_stage": 2, "wrapper": "DeepSpeedZeroOptimizer", "basic_optimizer": "FusedAdam", "world_size": 8,
          "dp_world_size": 8, "unsupported": None, "files": files, "per_save_bytes": 96_363_136_000,
          "keep": 2, "kept_bytes": 192_726_272_000, "read_bytes": 96_363_136_000,
          "largest_writer": {"rank": 0, "bytes": 12_045_392_000, "share": 0.125},
          "save_16bit_model": {"file": "pytorch_model.bin", "writes": True, "bytes": 2_471_628_800, "rank": 0,
                               "gather_accelerator_bytes": 0, "host_bytes_rank0": 0, "note": "module state_dict"},
          "write_bandwidth": 2e9, "read_bandwidth": 4e9, "save_s": 48.18, "load_s": 24.09, "nodes": 2,
          "resilience": {"cluster_mtbf_s": 1_800_000.0, "interval_s": 13_170.0, "interval_steps": 6585,
                         "interval_formula": "sqrt(2 x save_s x cluster_mtbf_s) (Young/Daly, first order)",
                         "lost_fraction": {"total": 0.0073}, "recovery_s": {"expected_total": 7000.0}},
          "storage": None, "findings": [], "notes": ["a note"]}
    h = checkpoint_html(ck)
    text = re.sub(r"\s+", " ", _visible_text(h))
    assert "zero_pp_rank_0..7_mp_rank_00_optim_states.pt optim_states ranks 0..7 × 8 12,045,391,872 bytes" in text
    assert "offloaded_tensors/rank00..03/0_3.tensor.swp" in text and "rank04..07/0_3.tensor.swp" in text
    # 2e9 B/s / 2^30 = 1.86 GiB/s, 4e9 / 2^30 = 3.73 GiB/s: the page's one unit system (GiB by default)
    assert "save time 48.2 s at 1.86 GiB/s" in text and "load time 24.1 s at 3.73 GiB/s" in text
    assert "save interval 3.66 h (about 6,585 steps)" in text
    assert "on disk, 2 kept 192,726,272,000 bytes" in text
    assert "None" not in text and "{" not in text and "'" not in text
    # Without bandwidth: no seconds, a pointer to the option instead.
    bare = {k: v for k, v in ck.items() if k not in ("save_s", "load_s", "resilience")}
    t2 = re.sub(r"\s+", " ", _visible_text(checkpoint_html(bare)))
    assert "save time give the storage bandwidth" in t2 and "3.66 h" not in t2 and "48.2 s" not in t2


def test_report_of_a_config_deepspeed_refuses(tmp_path):
    """fp16 and bf16 together: no ranks to draw (P001); the page says why instead of failing."""
    pytest.importorskip("matplotlib")
    cfg = tmp_path / "ds_config.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": true}, "bf16": {"enabled": true},'
                   ' "zero_optimization": {"stage": 2}}')
    out = tmp_path / "r.html"
    p = run_cli(["report", str(cfg), "--model", "llama-3.2-1b", "-o", str(out)])
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    note = _visible_text(re.search(r"<p class=note id=unsupported>.*?</p>", page).group(0))
    assert "fp16 and bf16 cannot both be enabled" in note
    # one finding for the fault: lint's P001 (M090 stands in only when no lint rule reports it)
    shown = _visible_text(_section_html(page, "findings"))
    assert "P001" in shown and "M090" not in shown and "tier-bar-" not in page
    assert "None" not in _visible_text(_section_html(page, "assumptions"))
    # issue 22: a refused config has no estimate, so the page draws no figures either
    assert "No estimate" in page
    for figure in ("id=fit-table", "id=movement-chart", "id=timeline", "<svg"):
        assert figure not in page, figure


@pytest.mark.parametrize("units", ["GiB", "GB"])
def test_every_pane_of_the_tier_chart_names_its_unit(units):
    """Each pane (accelerator, host, nvme) has its own y scale, so each names the unit on its y
    axis (the host and nvme panes had none): one rotated axis label per bar, in --units."""
    pytest.importorskip("matplotlib")
    import re

    from advisor.render.html import tier_bars, tier_chart_svg

    bars = tier_bars(_estimate_nvme())
    svg = tier_chart_svg(bars, units)
    labels = re.findall(r'<text [^>]*rotate\(-90[^>]*>([^<]*)</text>', svg)
    assert labels == [units] * len(bars) == [units] * 3, labels


def test_the_schemas_lifetimes_are_the_ledgers():
    # a lifetime added to the ledger (state.Life) without the schema fails estimate's JSON only when a
    # sample config happens to hold it (steady_forward, refetch_forward slipped through that way)
    from advisor.ledger.state import LIVES
    schema = json.loads((Path(__file__).parents[1] / "schemas" / "estimate-output.schema.json").read_text())
    lives = []

    def walk(node):
        if isinstance(node, dict):
            if "life" in node and isinstance(node["life"], dict) and "enum" in node["life"]:
                lives.append(node["life"]["enum"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(schema)
    assert lives and all(sorted(e) == sorted(LIVES) for e in lives), (lives, LIVES)
