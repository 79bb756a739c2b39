"""Version-aware lint, checked against the DeepSpeed releases' own sources.

The truth here is each release's sdist (fetched with pip into ``DS_ADVISOR_SDISTS``, default
``~/.cache/ds-advisor-sdists``), read as text, never the advisor's table compared with itself:
a key is in a release when its config model's source file names it as a field or alias. One
older release (0.14.5) is installed in a test and its own DeepSpeedZeroConfig refuses what lint
says it refuses.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.config import _versiongen as gen
from advisor.config import versions
from tests.conftest import ROOT, run_cli

SDISTS = Path(os.environ.get("DS_ADVISOR_SDISTS") or Path.home() / ".cache" / "ds-advisor-sdists")


def _fetch(release: str) -> Path:
    try:
        return gen.fetch(release, SDISTS)
    except (subprocess.SubprocessError, OSError) as e:  # no registry: a missing package, not a pass
        pytest.skip(f"cannot fetch the deepspeed {release} sdist with pip ({e}); set DS_ADVISOR_SDISTS")


ZERO_FILE = "deepspeed/runtime/zero/config.py"


def _zero_source_defines(release: str, key: str) -> bool:
    """Independent reading: the release's DeepSpeedZeroConfig source has ``key:`` as a field or
    ``alias="key"``."""
    text = (_fetch(release) / ZERO_FILE).read_text(encoding="utf-8")
    body = text[text.index("class DeepSpeedZeroConfig"):]
    return bool(re.search(rf"^\s+{re.escape(key)}\s*:", body, re.M) or re.search(rf"alias=[\"']{re.escape(key)}[\"']", body))


CASES = [("zero_hpz_partition_size", 8), ("zero_quantized_weights", True), ("zenflow", {}),
         ("module_granularity_threshold", 0), ("leaf_module", {}), ("mics_shard_size", 8),
         ("stage3_use_all_reduce_for_fetch_params", False)]


def _lint(cfg: dict, release: str) -> set[tuple[str, str]]:
    """(code, pointer) of lint's findings for ``cfg`` at ``release`` (in-process: the CLI path is
    covered by the JSON tests below)."""
    from advisor.config.loading import parse_text
    from advisor.views.lint import lint_config
    return {(f.code, f.pointer) for f in lint_config(parse_text(json.dumps(cfg), "ds.json"),
                                                      release=versions.target_release(release))}


@pytest.mark.parametrize("release", ["0.9.0", "0.9.5", "0.10.0", "0.10.3", "0.14.4", "0.14.5", "0.16.0", "0.17.6",
                                     "0.18.0", "0.19.3"])
@pytest.mark.parametrize("key,value", CASES)
def test_v001_matches_the_release_source(release, key, value):
    codes = _lint({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, key: value}}, release)
    ptr = f"/zero_optimization/{key}"
    defined = _zero_source_defines(release, key)
    assert ((("V001", ptr) in codes) == (not defined)), (release, key, codes)
    assert ("S001", ptr) not in codes and ("S005", ptr) not in codes  # 0.19.8's verdicts are not this release's


def test_cli_names_the_release_in_json_and_text(tmp_path):
    cfg = tmp_path / "ds.json"
    # gradient_clipping written: 0.14.5's default (0.0) differs from 0.19.8's, a V002 of its own
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 1.0,
                               "zero_optimization": {"stage": 3, "zenflow": {}}}))
    p = run_cli(["lint", str(cfg), "--deepspeed-version", "0.14.5", "--format", "json"])
    out = json.loads(p.stdout)
    assert out["deepspeed_release"] == {"requested": "0.14.5", "checked": "0.14.5", "origin": "--deepspeed-version"}
    assert [f["code"] for f in out["files"][0]["findings"]] == ["V001"] and p.returncode == 1
    p = run_cli(["lint", str(cfg), "--deepspeed-version", "0.14.5"])
    assert "DeepSpeed 0.14.5" in p.stdout.splitlines()[-1]


def test_at_0198_the_schema_speaks_and_v_rules_are_silent(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "mics_shard_size": 8}}))
    out = json.loads(run_cli(["lint", str(cfg), "--deepspeed-version", "0.19.8", "--format", "json"]).stdout)
    codes = {f["code"] for f in out["files"][0]["findings"]}
    assert "S005" in codes and not any(c.startswith("V") for c in codes)
    assert not _zero_source_defines("0.19.8", "mics_shard_size")


def test_v002_pin_memory_default_from_the_release_source(tmp_path):
    """0.17.6's offload config defaults pin_memory to False, 0.19.8's to True (read from the sources)."""
    src = {r: (_fetch(r) / "deepspeed/runtime/zero/offload_config.py").read_text() for r in ("0.17.6", "0.19.8")}
    pin = {r: re.findall(r"pin_memory: bool = (\w+)", t) for r, t in src.items()}
    assert pin["0.17.6"] and set(pin["0.17.6"]) == {"False"} and set(pin["0.19.8"]) == {"True"}
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 1.0,
                               "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}))
    out = json.loads(run_cli(["lint", str(cfg), "--deepspeed-version", "0.17.6", "--format", "json"]).stdout)
    v2 = [f for f in out["files"][0]["findings"] if f["code"] == "V002"]
    assert [f["pointer"] for f in v2] == ["/zero_optimization/offload_optimizer"] and "false" in v2[0]["message"]
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 1.0, "zero_optimization": {
        "stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}}))
    out = json.loads(run_cli(["lint", str(cfg), "--deepspeed-version", "0.17.6", "--format", "json"]).stdout)
    assert not [f for f in out["files"][0]["findings"] if f["code"] == "V002"]


@pytest.mark.parametrize("b", versions.BEHAVIOUR, ids=lambda b: b["id"])
def test_behaviour_markers_are_in_the_release_named_and_not_before(b):
    rels = list(gen.RELEASES)
    i = rels.index(b["since"])
    assert b["marker"] in (_fetch(b["since"]) / b["file"]).read_text(encoding="utf-8")
    assert i > 0 and b["marker"] not in (_fetch(rels[i - 1]) / b["file"]).read_text(encoding="utf-8")


def test_release_selection():
    """Every release of the span is its own (no neighbour's facts); post-releases and local builds
    are their base release, said in the note; PEP 440 decides what a version string is."""
    for rel in ("0.9.0", "0.10.0", "0.14.4", "0.16.0", "0.18.0", "0.19.5"):
        r = versions.target_release(rel)
        assert (r.requested, r.checked, r.warning, r.mapping) == (rel, rel, None, None)
    r = versions.target_release("v0.12.6+cu121")
    assert (r.requested, r.checked, r.warning) == ("0.12.6+cu121", "0.12.6", None)
    assert "local build of 0.12.6" in r.note
    r = versions.target_release("0.14.5.post1")
    assert (r.requested, r.checked) == ("0.14.5.post1", "0.14.5") and "post-release of 0.14.5" in r.note
    assert "post-release" not in str(pytest.raises(versions.UnsupportedRelease, versions.target_release, "0.19.8rc1").value)
    for bad in ("0.8.3", "1.0.0", "0.19.9", "0.10.4", "0.9.5.1", "1!0.19.8", "x", "", " ", "0.19", "0.19.8rc1",
                "0.19.8abc", "0.19.8.dev0", "0.19.8.post1.dev0"):
        with pytest.raises(versions.UnsupportedRelease):
            versions.target_release(bad)
    from importlib.metadata import version
    assert versions.target_release(None).requested == version("deepspeed")  # installed, from metadata
    # PEP 440 pads with zeros: a string packaging calls equal to a release is that release
    from packaging.version import Version
    for same in ("0.19.8.0", "0.19.8.0.0", "00.19.08"):
        assert Version(same) == Version("0.19.8")
        assert versions.target_release(same).checked == "0.19.8", same
    assert Version("0.9.5.1") != Version("0.9.5")  # a real fourth number is no release (refused above)


def test_unsupported_release_is_a_one_line_usage_error(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text("{}")
    p = run_cli(["lint", str(cfg), "--deepspeed-version", "0.8.3"])
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "0.8.3" in p.stderr
    assert "Traceback" not in p.stderr


def test_lint_does_not_import_deepspeed_to_find_the_version(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text("{}")
    code = ("import sys; from advisor.cli import run; sys.argv=['ds-advisor','lint',%r]\n"
            "try:\n    run()\nexcept SystemExit:\n    pass\n"
            "print('LEAK' if 'deepspeed' in sys.modules or 'torch' in sys.modules else 'CLEAN')") % str(cfg)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT).stdout
    assert out.strip().endswith("CLEAN")


def _fetch_all() -> None:
    try:
        gen.fetch_all(SDISTS, jobs=int(os.environ.get("DS_ADVISOR_FETCH_JOBS", "4")))
    except (subprocess.SubprocessError, OSError) as e:  # no registry: a missing package, not a pass
        pytest.skip(f"cannot fetch the deepspeed sdists with pip ({e}); set DS_ADVISOR_SDISTS")


@pytest.mark.engine  # slow (fetches and parses every release); runs in the full suite with the engine tests
def test_drift_the_table_is_what_the_sdists_give():
    """Regenerate the table from the sdists and compare it with the checked-in one."""
    _fetch_all()
    fresh = json.dumps(gen.build(SDISTS), indent=1, sort_keys=True) + "\n"
    assert gen.TABLE_PATH.read_text(encoding="utf-8") == fresh, "run: python -m advisor.config._versiongen"


@pytest.mark.engine  # asks the package index
def test_the_table_holds_every_final_release_of_its_span():
    """The releases the index has from 0.9.0 to 0.19.8 (``pip index versions``), final ones only,
    are exactly the table's: none is left to a neighbour's facts."""
    from packaging.version import Version
    p = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "deepspeed"], capture_output=True,
                       text=True, timeout=300)
    line = next((x for x in p.stdout.splitlines() if x.startswith("Available versions:")), None)
    if p.returncode != 0 or line is None:
        pytest.skip(f"no package index ({p.stderr.strip()[-200:]})")
    have = [Version(v.strip()) for v in line.split(":", 1)[1].split(",")]
    lo, hi = Version(gen.RELEASES[0]), Version(gen.RELEASES[-1])
    span = sorted(str(v) for v in have if lo <= v <= hi and not v.is_prerelease)
    assert sorted(gen.RELEASES, key=Version) == list(gen.RELEASES)
    assert sorted([*gen.RELEASES, *gen.UNREADABLE]) == span  # 0.11.0: unreadable, mapped out loud
    assert versions.table()["releases"] == list(gen.RELEASES)


OLD = "0.14.5"


@pytest.fixture(scope="module")
def old_deepspeed(tmp_path_factory):
    """DeepSpeed 0.14.5 installed into its own folder (no ops built), importable beside torch 2.13."""
    target = Path(os.environ.get("DS_ADVISOR_OLD_DS") or SDISTS / f"installed-{OLD}")  # kept: installs once
    if not (target / "deepspeed").is_dir():
        tgz = _fetch(OLD).parent / f"deepspeed-{OLD}.tar.gz"
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                            "--target", str(target), str(tgz)], capture_output=True, text=True, timeout=900,
                           env={**os.environ, "DS_BUILD_OPS": "0"})
        assert r.returncode == 0, r.stderr[-2000:]
    return target


OLD_CASES = [{"zero_optimization": {"stage": 3, k: v}} for k, v in (
    ("zenflow", {}), ("module_granularity_threshold", 0), ("mics_shard_size", 8), ("zero_hpz_partition_size", 8),
    ("leaf_module", {}), ("stage3_use_all_reduce_for_fetch_params", False))] + [
    {"fp16": {"enabled": True, "no_such_key": 1}},  # 0.14.5 reads fp16 as a plain dict: V005, a warning
    {"bf16": {"enabled": True, "bf16_master_weights_and_grads": True}},
    {"compile": {"enabled": False, "no_such_key": 1}},
    {"comms_logger": {"enabled": False, "no_such_key": 1}},
    {"tensorboard": {"enabled": False, "no_such_key": 1}},
    # session 5: 0.14.5's own models and plain-dict readings (pydantic v1 API, ge=0 bounds, "auto" truthy)
    {"zero_optimization": {"stage": 2, "reduce_bucket_size": 0}},  # ge=0 there (gt=0 from 0.19.6)
    {"zero_optimization": {"stage": 2, "reduce_bucket_size": 1.5}},  # pydantic v1 int(): 1
    {"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}},  # both truthy: the assertion
    {"bf16": {"enabled": "auto"}}]  # truthy: bf16 on, accepted


@pytest.fixture(scope="module")
def old_verdicts(old_deepspeed):
    """Whether DeepSpeed ``OLD`` (installed in its own folder) accepts each of :data:`OLD_CASES`:
    ``deepspeed.initialize`` builds ``DeepSpeedConfig(config, mpu)`` before any engine
    (deepspeed/__init__.py: initialize), so a config refused there is refused by initialize; the
    same call is made here (world size 1, no process group), all cases in one process."""
    cfgs = [{"train_micro_batch_size_per_gpu": 1, **c} for c in OLD_CASES]
    code = ("import json, sys\nsys.path.insert(0, %r)\nimport deepspeed\n"
            "from deepspeed.runtime.config import DeepSpeedConfig\n"
            "assert deepspeed.__version__.startswith(%r), deepspeed.__version__\n"
            "assert deepspeed.__file__.startswith(%r), deepspeed.__file__\n"
            "out = []\n"
            "for cfg in json.loads(%r):\n"
            "    try:\n        DeepSpeedConfig(cfg)\n        out.append([True, ''])\n"
            "    except Exception as e:\n        out.append([False, type(e).__name__ + ': ' + str(e)[:300]])\n"
            "print('VERDICTS' + json.dumps(out))\n") % (str(old_deepspeed), OLD, str(old_deepspeed), json.dumps(cfgs))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "DS_ACCELERATOR": "cpu", "PYTHONPATH": ""}, cwd="/")
    line = next((x for x in p.stdout.splitlines() if x.startswith("VERDICTS")), None)
    assert line, p.stderr[-3000:]
    return json.loads(line[len("VERDICTS"):])


@pytest.mark.engine  # imports a real (older) DeepSpeed
@pytest.mark.parametrize("i", range(len(OLD_CASES)), ids=["-".join(
    f"{s}.{k}" + ("" if isinstance(v, dict) or k not in ("reduce_bucket_size", "enabled") else f"={v}")
    for s, d in c.items() for k, v in d.items() if k != "stage" and (k != "enabled" or v == "auto")) for c in OLD_CASES])
def test_an_older_engine_refuses_what_lint_says_it_refuses(tmp_path, old_verdicts, i):
    """Lint at 0.14.5 gives an error finding exactly when 0.14.5's own config parse refuses, and
    then only version findings naming 0.14.5 or S001 (a key unknown to every release)."""
    cfg = {"train_micro_batch_size_per_gpu": 1, **OLD_CASES[i]}
    accepted, why = old_verdicts[i]
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    out = json.loads(run_cli(["lint", str(path), "--deepspeed-version", OLD, "--format", "json"]).stdout)
    errors = [f for f in out["files"][0]["findings"] if f["severity"] == "error"]
    assert bool(errors) == (not accepted), (cfg, why, out["files"][0]["findings"])
    # an error is a version finding naming 0.14.5 (or P001 saying why 0.14.5 turns both on), or S001:
    # a key no release knows (0.19.8 too)
    assert all((f["code"][0] in "VP" and OLD in f["message"]) or f["code"] == "S001" for f in errors), errors


def test_v003_and_gated_rules_follow_the_release_sources():
    """Scheduler/optimizer names and the 0.19.3 warmup check, against the sdists' own text."""
    src = {r: (_fetch(r) / "deepspeed/runtime/lr_schedules.py").read_text() for r in ("0.11.2", "0.12.6", "0.19.2")}
    assert "WarmupCosineLR" not in src["0.11.2"] and "WarmupCosineLR" in src["0.12.6"]
    cfg = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
           "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 100, "warmup_num_steps": 0}}}
    assert ("V003", "/scheduler/type") in _lint(cfg, "0.11.2")
    assert ("V003", "/scheduler/type") not in _lint(cfg, "0.12.6")
    # warmup_num_steps 0 is refused from 0.19.3 on (L001), accepted by 0.19.2's constructor
    assert "must be a positive integer" not in src["0.19.2"]
    assert ("L001", "/scheduler/params/warmup_num_steps") in _lint(cfg, "0.19.3")
    assert ("L001", "/scheduler/params/warmup_num_steps") not in _lint(cfg, "0.19.2")
    onebit = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "OneBitAdam", "params": {"lr": 1e-4}}}
    cfg_src = {r: (_fetch(r) / "deepspeed/runtime/config.py").read_text() for r in ("0.19.3", "0.19.8")}
    assert "ONEBIT_ADAM_OPTIMIZER" in cfg_src["0.19.3"].split("DEEPSPEED_OPTIMIZERS = [")[1].split("]")[0]
    assert "ONEBIT_ADAM_OPTIMIZER" not in cfg_src["0.19.8"].split("DEEPSPEED_OPTIMIZERS = [")[1].split("]")[0]
    assert not {c for c, _ in _lint(onebit, "0.19.3")} & {"D003", "V003"}
    assert ("D003", "/optimizer/type") in _lint(onebit, "0.19.8")


@pytest.mark.parametrize("cmd", [["estimate", "{cfg}", "--params", "1000000"], ["checkpoint", "{cfg}", "--params", "1000000"],
                                 ["check", "{cfg}", "--params", "1000000", "--world-size", "1"],
                                 ["resolve", "{cfg}", "--hf"], ["generate", "--model", "llama-3.2-1b", "--hardware", "dgx-h100", "--global-batch", "64", "--seq-len", "1024", "--nodes", "1", "--gpus-per-node", "8"],
                                 ["explain", "V001"], ["explain"], ["models"], ["models", "--types"], ["hardware"],
                                 ["hardware", "dgx-h100"], ["report", "{cfg}", "--params", "1000000", "--output", "{out}"]])
def test_every_command_takes_the_release_and_refuses_an_unknown_one(tmp_path, cmd):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}))
    args = [a.replace("{cfg}", str(cfg)).replace("{out}", str(tmp_path / "r.html")) for a in cmd]
    bad = run_cli(args + ["--deepspeed-version", "0.8.3"])
    assert bad.returncode == 2 and "0.8.3" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    ok = run_cli(args + ["--deepspeed-version", "0.17.6"])
    assert ok.returncode in (0, 1, 3), ok.stderr
    assert "Traceback" not in ok.stderr


def test_every_command_has_the_one_release_option():
    """Issue 20: --deepspeed-version on every command, the same option (one definition)."""
    from advisor.cli import main
    opts = {name: [p for p in cmd.params if "--deepspeed-version" in p.opts] for name, cmd in main.commands.items()}
    assert opts and all(len(o) == 1 for o in opts.values()), {n: len(o) for n, o in opts.items()}
    assert len({(o[0].help, o[0].metavar) for o in opts.values()}) == 1


@pytest.mark.parametrize("cmd,json_out", [(["explain", "V001"], False), (["explain"], False), (["models"], False),
                                          (["models", "--format", "json"], True), (["models", "--types"], False),
                                          (["hardware"], False), (["hardware", "--format", "json"], True),
                                          (["hardware", "dgx-h100", "--format", "json"], True)])
def test_release_independent_commands_name_the_release(cmd, json_out):
    """explain, models and hardware do not depend on the release but say which one they ran for:
    a last stdout line in text, a stderr line beside JSON (whose shape is unchanged)."""
    p = run_cli(cmd + ["--deepspeed-version", "0.16.0"])
    assert p.returncode == 0, p.stderr
    want = "release: DeepSpeed 0.16.0 (--deepspeed-version)"
    if json_out:
        json.loads(p.stdout)
        assert want in p.stderr and "DeepSpeed" not in p.stdout.split("\n")[0]
    else:
        lines = p.stdout.strip().splitlines()  # the last item, folded to the pipe width like the report
        k = max(i for i, x in enumerate(lines) if x.startswith("release: "))
        assert all(x.startswith("    ") for x in lines[k + 1:]) and lines[k].startswith(want), lines[k - 1:]
    local = run_cli(cmd + ["--deepspeed-version", "0.16.0+cu121"])
    assert "local build of 0.16.0" in local.stdout + local.stderr


def test_measure_takes_the_release_but_runs_the_installed_engine(tmp_path):
    """measure runs the installed deepspeed: a different --deepspeed-version is a usage error
    (exit 2) naming both, before anything is launched."""
    from importlib.metadata import version
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1}))
    other = "0.14.5" if version("deepspeed") != "0.14.5" else "0.19.8"
    p = run_cli(["measure", str(cfg), "--params", "1000", "--deepspeed-version", other])
    assert p.returncode == 2 and other in p.stderr and version("deepspeed") in p.stderr, p.stderr
    p = run_cli(["measure", str(cfg), "--params", "1000", "--deepspeed-version", "0.8.3"])
    assert p.returncode == 2 and "0.8.3" in p.stderr and "Traceback" not in p.stderr


def test_estimate_names_its_accounting_and_the_jobs_release(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
        "stage": 2, "offload_optimizer": {"device": "cpu"}}}))
    d = json.loads(run_cli(["estimate", str(cfg), "--params", "1000000", "--deepspeed-version", "0.17.6",
                            "--format", "json"]).stdout)
    assert d["deepspeed_release"]["checked"] == "0.17.6" and "not verified for 0.17.6" in d["accounting"]
    assert any(f["code"] == "V002" for f in d["findings"])  # pin_memory's default differs there
    d = json.loads(run_cli(["estimate", str(cfg), "--params", "1000000", "--deepspeed-version", "0.19.8",
                            "--format", "json"]).stdout)
    assert "byte-exact" in d["accounting"] and not any(f["code"].startswith("V") for f in d["findings"])
    text = run_cli(["estimate", str(cfg), "--params", "1000000", "--deepspeed-version", "0.17.6"]).stdout
    assert "not verified for 0.17.6" in " ".join(text.split())  # wherever the line wraps


@pytest.mark.parametrize("cmd", [["checkpoint", "{cfg}", "--params", "1000000"],
                                 ["check", "{cfg}", "--params", "1000000", "--world-size", "1"]])
def test_text_reports_name_the_release(tmp_path, cmd):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}))
    args = [a.replace("{cfg}", str(cfg)) for a in cmd]
    assert "release: DeepSpeed 0.17.6" in run_cli(args + ["--deepspeed-version", "0.17.6"]).stdout
    assert "release: DeepSpeed 0.19.8 (--deepspeed-version)" in run_cli(args + ["--deepspeed-version", "0.19.8"]).stdout


def test_installed_release_reads_what_importlib_metadata_reads():
    """The direct dist-info read (lint does not import importlib.metadata) against the standard
    library's own lookup of the installed deepspeed."""
    import importlib.metadata as md

    from advisor.config.versions import installed_release
    try:
        expected = md.version("deepspeed")
    except md.PackageNotFoundError:
        expected = None
    assert installed_release() == expected


def test_installed_release_first_dist_info_on_sys_path(tmp_path, monkeypatch):
    import importlib.metadata as md

    from advisor.config.versions import installed_release
    for sub, ver in (("a", "0.14.5"), ("b", "0.19.8")):
        d = tmp_path / sub / f"deepspeed-{ver}.dist-info"
        d.mkdir(parents=True)
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: deepspeed\nVersion: {ver}\n\nbody Version: 9\n")
    (tmp_path / "a" / "deepspeed_advisor-0.1.0.dist-info").mkdir()
    monkeypatch.setattr("sys.path", [str(tmp_path / "none"), str(tmp_path / "a"), str(tmp_path / "b")])
    assert installed_release() == "0.14.5" == md.version("deepspeed")
    monkeypatch.setattr("sys.path", [str(tmp_path / "none")])
    assert installed_release() is None


def _onebit_zero_asserts(release: str) -> dict[str, str]:
    """Independent reading of engine.py/config.py as text: optimizer name -> the assertion message of
    the ``optimizer_name() == CONST:`` branch that asserts ``not self.zero_optimization()``, and
    that ``zero_optimization()`` is true for every stage > 0 in that release."""
    root = _fetch(release) / "deepspeed/runtime"
    eng, cfg = (root / "engine.py").read_text(encoding="utf-8"), (root / "config.py").read_text(encoding="utf-8")
    assert "self.zero_enabled = self.zero_optimization_stage > 0" in cfg
    assert re.search(r"def zero_optimization\(self\):\s*\n\s*return self\._config\.zero_enabled", eng)
    consts = dict(re.findall(r"^(\w+_OPTIMIZER) = '(\w+)'", cfg, re.M))
    return {consts[c]: msg for c, msg in re.findall(
        r"optimizer_name\(\) == (\w+):\s*\n\s*assert not self\.zero_optimization\(\), \"([^\"]+)\"", eng)}


@pytest.mark.parametrize("release", ["0.9.5", "0.14.5", "0.19.3", "0.19.8"])
@pytest.mark.parametrize("opt", ["OneBitAdam", "ZeroOneAdam", "OneBitLamb"])
def test_onebit_optimizers_with_zero_follow_the_release_engine(release, opt):
    """Issue 20 item 1: lint flags a 1-bit optimizer with ZeRO exactly at the stages and releases
    whose engine asserts against it (every stage >= 1, up to 0.19.3; 0.19.8 has none: D003)."""
    refused = _onebit_zero_asserts(release)
    if release == "0.14.5":
        assert refused.get("zerooneadam") == "0/1 Adam is not compatible with ZeRO"
    for stage in (0, 1, 2, 3):
        cfg = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": opt, "params": {"lr": 1e-4}},
               "zero_optimization": {"stage": stage}}
        codes = _lint(cfg, release)
        assert (("V004", "/optimizer/type") in codes) == (opt.lower() in refused and stage > 0), (release, stage, codes)
    if release == "0.19.8":
        assert not refused and ("D003", "/optimizer/type") in codes


@pytest.mark.parametrize("release", ["0.16.9", "0.17.1", "0.17.2", "0.19.8"])
def test_warmuplr_peak_default_follows_the_release_signature(release):
    """Issue 20 item 2: L002 flags a WarmupLR without warmup_max_lr exactly where the release's
    WarmupLR.__init__ signature defaults it to 0.001 (not to the optimizer's lr)."""
    text = (_fetch(release) / "deepspeed/runtime/lr_schedules.py").read_text(encoding="utf-8")
    init = text[text.index("class WarmupLR"):]
    init = init[init.index("def __init__"):init.index("):", init.index("def __init__"))]
    default = re.search(r"warmup_max_lr: float = ([\w.]+)", init).group(1)
    assert default in ("0.001", "None")
    cfg = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 3e-5}},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100}}}
    assert (("L002", "/scheduler/params") in _lint(cfg, release)) == (default == "0.001"), (release, default)
    cfg["scheduler"]["params"]["warmup_max_lr"] = 3e-5
    assert ("L002", "/scheduler/params") not in _lint(cfg, release)


def _strict_in_source(release: str, cls: str) -> bool:
    """Independent reading: some module of the release defines ``class cls(DeepSpeedConfigModel)``."""
    pat = re.compile(rf"^class {cls}\(DeepSpeedConfigModel\)", re.M)
    return any(pat.search(p.read_text(encoding="utf-8", errors="replace"))
               for p in (_fetch(release) / "deepspeed").rglob("*.py") if "inference" not in p.parts)


@pytest.mark.parametrize("release", ["0.14.5", "0.16.9", "0.17.1"])
@pytest.mark.parametrize("section,cls,body,code", [
    ("fp16", "DeepSpeedFP16Config", {"enabled": True, "foo": 1}, "S001"),
    ("bf16", "DeepSpeedBF16Config", {"enabled": True, "loss_scale": 0}, "S006"),
    ("compile", "CompileConfig", {"deepcompile": False, "foo": True}, "S001")])
def test_schema_verdicts_only_where_the_release_validates_the_section(release, section, cls, body, code):
    """Issue 20 item 3: 0.19.8's schema error on a section stands only in a release whose source
    makes that section a DeepSpeedConfigModel; elsewhere it is a V005 warning naming the release."""
    bad = next(k for k in body if k in ("foo", "loss_scale"))
    ptr = f"/{section}/{bad}"
    cfg = {"train_micro_batch_size_per_gpu": 1, section: body}
    from advisor.config.loading import parse_text
    from advisor.views.lint import lint_config
    found = {(f.code, f.pointer): f for f in lint_config(parse_text(json.dumps(cfg), "ds.json"),
                                                          release=versions.target_release(release))}
    if _strict_in_source(release, cls):
        assert (code, ptr) in found and ("V005", ptr) not in found
    else:
        assert (code, ptr) not in found and found[("V005", ptr)].severity == "warning"
        assert f"DeepSpeed {release} does not validate {section}" in found[("V005", ptr)].message
    assert (code, ptr) in _lint(cfg, "0.19.8") and _strict_in_source("0.19.8", cls)


def test_a_release_the_table_cannot_read_is_mapped_out_loud(tmp_path):
    """0.11.0's sdist cannot be fetched (its metadata step fails): it is checked as 0.11.1 with a
    warning on stderr and the mapping in the JSON, never silently."""
    assert "0.11.0" not in gen.RELEASES and gen.UNREADABLE["0.11.0"][0] == "0.11.1"
    p = run_cli(["lint", "-", "--deepspeed-version", "0.11.0", "--format", "json"],
                stdin='{"train_micro_batch_size_per_gpu": 1}')
    rel = json.loads(p.stdout)["deepspeed_release"]
    assert (rel["requested"], rel["checked"]) == ("0.11.0", "0.11.1") and "0.11.0" in rel["mapping"]
    warn = [x for x in p.stderr.splitlines() if "warning" in x]
    assert len(warn) == 1 and "0.11.1" in " ".join(p.stderr.split())  # one warning (its text may wrap)


def test_x_y_0_releases_are_checked_as_themselves_not_a_later_patch():
    """A later patch of a minor can add whole config models: 0.17.1 ships runtime/precision_config.py
    (fp16/bf16 refuse unknown keys), 0.17.0 does not (its sdist). So 0.17.0 is checked as 0.17.0:
    an unknown fp16 key is V005 (not validated there), an error at 0.17.1."""
    assert (_fetch("0.17.1") / "deepspeed/runtime/precision_config.py").is_file()
    assert not (_fetch("0.17.0") / "deepspeed/runtime/precision_config.py").is_file()
    cfg = {"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True, "no_such_key": 1}}
    codes = {r: {c for c, p in _lint(cfg, r) if p.startswith("/fp16")} for r in ("0.17.0", "0.17.1")}
    assert "V005" in codes["0.17.0"] and "V005" not in codes["0.17.1"], codes
    p = run_cli(["lint", "-", "--deepspeed-version", "0.17.0", "--format", "json"],
                stdin='{"train_micro_batch_size_per_gpu": 1}')
    assert p.returncode == 0 and json.loads(p.stdout)["deepspeed_release"]["checked"] == "0.17.0", p.stderr
    assert "warning" not in p.stderr


@pytest.mark.parametrize("flag,why", [("", "empty"), ("0.19", "incomplete"), ("0.19.8rc1", "pre-release"),
                                      ("0.19.8abc", "not a release number"), ("0.10.4", "not a DeepSpeed release"),
                                      ("0.20.0", "outside")])
def test_bad_version_strings_are_refused(flag, why):
    """Issue 20 item 7: an empty, incomplete or pre-release --deepspeed-version is exit 2 naming it."""
    p = run_cli(["lint", "-", "--deepspeed-version", flag], stdin="{}")
    assert p.returncode == 2 and why in p.stderr and "Traceback" not in p.stderr, p.stderr


def _lint_with_installed(tmp_path, ver: str):
    """lint's JSON and stderr with a deepspeed ``ver`` dist-info first on sys.path (what
    importlib.metadata reports, checked here)."""
    import importlib.metadata as md
    site = tmp_path / f"site-{ver}"
    d = site / f"deepspeed-{ver}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: deepspeed\nVersion: {ver}\n\n")
    assert [x.version for x in md.distributions(name="deepspeed", path=[str(site)])] == [ver]
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    p = run_cli(["lint", "-", "--format", "json"], stdin='{"train_micro_batch_size_per_gpu": 1}', env=env)
    assert p.returncode == 0, p.stderr
    warn = [x for x in p.stderr.splitlines() if "warning" in x]
    return json.loads(p.stdout)["deepspeed_release"], warn + ([" ".join(p.stderr.split())] if warn else [])


@pytest.mark.parametrize("ver,checked,why", [("0.20.0", "0.19.8", "newer than every release"),
                                             ("0.8.3", "0.9.0", "older than every release"),
                                             ("0.19.8rc1", "0.19.7", "pre-release")])
def test_an_installed_release_outside_the_table_falls_back_with_one_warning(tmp_path, ver, checked, why):
    """Issue 20 item 5: an installed release the table does not hold is not an error nobody
    caused: the nearest table release is used (at or below it; the oldest below the table; the
    release before a pre-release), one warning and the JSON's mapping name it."""
    rel, warn = _lint_with_installed(tmp_path, ver)
    # warn: the one warning line, then the whole of stderr unwrapped (the text may fold)
    assert len(warn) == 2 and ver in warn[1] and why in warn[1] and checked in warn[1], warn
    assert (rel["requested"], rel["checked"], rel["origin"]) == (ver, checked, "installed")
    assert ver in rel["mapping"]


@pytest.mark.parametrize("ver,checked", [("0.18.0", "0.18.0"), ("0.10.0", "0.10.0"), ("0.19.8+cu121", "0.19.8")])
def test_an_installed_release_of_the_span_is_checked_as_itself(tmp_path, ver, checked):
    """An installed 0.18.0 is checked as 0.18.0 (not 0.19.8), a local build as its release (the
    mapping says so), without a warning."""
    rel, warn = _lint_with_installed(tmp_path, ver)
    assert not warn and (rel["requested"], rel["checked"], rel["origin"]) == (ver, checked, "installed")
    assert ("mapping" in rel) == (ver != checked)


def test_every_output_names_the_release(tmp_path):
    """Issue 20 item 6: JSON, SARIF, GitHub, HTML, resolve and text outputs say which release."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}))
    v = ["--deepspeed-version", "0.14.5"]
    want = {"requested": "0.14.5", "checked": "0.14.5", "origin": "--deepspeed-version"}
    gen_args = ["generate", "--model", "llama-3.2-1b", "--hardware", "dgx-h100", "--global-batch", "64",
                "--seq-len", "1024", "--nodes", "1", "--gpus-per-node", "8", *v]
    assert json.loads(run_cli(gen_args + ["--format", "json"]).stdout)["deepspeed_release"] == want
    assert "release: DeepSpeed 0.14.5" in run_cli(gen_args).stderr  # generate's table goes to stderr
    ck = json.loads(run_cli(["checkpoint", str(cfg), "--params", "1000000", "--format", "json", *v]).stdout)
    assert ck["deepspeed_release"] == want
    sarif = json.loads(run_cli(["lint", str(cfg), "--format", "sarif", *v]).stdout)
    assert sarif["runs"][0]["invocations"][0]["properties"]["deepspeedRelease"] == want
    gh = run_cli(["lint", str(cfg), "--format", "github", *v]).stdout.splitlines()[-1]
    assert "DeepSpeed 0.14.5" in gh
    assert "resolved for DeepSpeed 0.14.5" in run_cli(["resolve", str(cfg), "--hf", *v]).stderr
    out = tmp_path / "r.html"
    run_cli(["report", str(cfg), "--params", "1000000", "--output", str(out), *v])
    assert re.search(r"id=deepspeed-release>release: DeepSpeed 0\.14\.5", out.read_text())
    est = run_cli(["estimate", str(cfg), "--params", "1000000", "--format", "json", *v]).stdout
    assert json.loads(est)["assumptions"]["deepspeed_release"]["release"].startswith("DeepSpeed 0.14.5")


def test_estimate_applies_the_releases_pin_memory_default(tmp_path):
    """Issue 20 item 8: 0.17.6's offload configs default pin_memory to False (its source); the
    estimate at 0.17.6 places offloaded state as with pin_memory false written, at 0.19.8 as true."""
    src = (_fetch("0.17.6") / "deepspeed/runtime/zero/offload_config.py").read_text()
    assert set(re.findall(r"pin_memory: bool = (\w+)", src)) == {"False"}
    zero = {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}

    def host(zero_cfg, rel):
        cfg = tmp_path / "ds.json"
        cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                   "zero_optimization": zero_cfg}))
        d = json.loads(run_cli(["estimate", str(cfg), "--params", "1000000", "--format", "json",
                                "--deepspeed-version", rel]).stdout)
        return d["ranks"][0]["host_split"], d["assumptions"]["deepspeed_release"]

    unpinned = {**zero, "offload_optimizer": {"device": "cpu", "pin_memory": False},
                "offload_param": {"device": "cpu", "pin_memory": False}}
    pinned = {**zero, "offload_optimizer": {"device": "cpu", "pin_memory": True},
              "offload_param": {"device": "cpu", "pin_memory": True}}
    split, ra = host(zero, "0.17.6")
    assert split == host(unpinned, "0.19.8")[0] != host(pinned, "0.19.8")[0]
    assert len(ra["defaults_applied"]) == 2 and "not verified for 0.17.6" in ra["accounting"]
    assert host(zero, "0.19.8")[0] == host(pinned, "0.19.8")[0]


# --- newcomer round (session 5): release-aware readings, each fact read from the release's sdist ---

def _plain_precision(release: str) -> bool:
    """Independent reading: the release's runtime/config.py returns fp16/bf16 "enabled" with
    get_scalar_param (config_utils.py: ``param_dict.get(name, default)``, the value as written),
    not through precision_config.py's DeepSpeedConfigModel (whose __init__ drops "auto")."""
    root = _fetch(release) / "deepspeed/runtime"
    cfg = (root / "config.py").read_text(encoding="utf-8")
    plain = "return get_scalar_param(param_dict[key], BFLOAT16_ENABLED, BFLOAT16_ENABLED_DEFAULT)" in cfg
    if plain:
        assert "return param_dict.get(param_name, param_default_value)" in (root / "config_utils.py").read_text()
    else:
        prec = (root / "precision_config.py").read_text(encoding="utf-8")
        assert "enabled: bool = False" in prec and "class DeepSpeedBF16Config(DeepSpeedConfigModel)" in prec
        assert 'if (v != "auto" or k == "replace_method")' in (root / "config_utils.py").read_text()
    return plain


@pytest.mark.parametrize("release", ["0.9.0", "0.16.9", "0.17.0", "0.17.1", "0.19.8"])
def test_precision_auto_is_on_where_the_release_reads_a_plain_dict(release, tmp_path):
    """Item 1: "enabled": "auto" is the truthy string up to 0.17.0 (bf16 ON; both "auto": the
    'cannot be simultaneously enabled' assertion), dropped (off) from 0.17.1."""
    plain = _plain_precision(release)
    assert plain == versions.before(release, "0.17.1")
    from advisor.config.loading import parse_text
    from advisor.views.lint import lint_config
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": "auto"}}
    a002 = [f for f in lint_config(parse_text(json.dumps(cfg), "ds.json"), release=versions.target_release(release))
            if f.code == "A002"]
    assert len(a002) == 1 and (("bf16 is ON" in a002[0].message) == plain)
    assert ("bf16 OFF" in a002[0].message) == (not plain)
    both = {"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}}
    assert (("P001", "/fp16/enabled") in _lint(both, release)) == plain
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    est = json.loads(run_cli(["estimate", str(path), "--params", "1000000", "--format", "json",
                              "--deepspeed-version", release]).stdout)
    assert est["assumptions"]["precision"]["model"] == ("bf16" if plain else "fp32")


def _constant(release: str, name: str):
    """The literal of ``name = ...`` in the release's runtime/constants.py (None when absent)."""
    m = re.search(rf"^{name} = (.+)$", (_fetch(release) / "deepspeed/runtime/constants.py").read_text(), re.M)
    return None if m is None else eval(m.group(1), {})  # a literal: 0., 1.0, True, False


@pytest.mark.parametrize("release", ["0.13.2", "0.13.3", "0.16.4", "0.16.5", "0.17.0", "0.17.1", "0.19.2", "0.19.3"])
def test_plain_dict_defaults_follow_the_release_constants(release, tmp_path):
    """Item 2: gradient_clipping (get_gradient_clipping, GRADIENT_CLIPPING_DEFAULT) and
    bf16.immediate_grad_update (get_bfloat16_immediate_grad_update before 0.17.1, precision_config's
    field after) are read from each release's own source; lint and estimate follow them."""
    cfg_py = (_fetch(release) / "deepspeed/runtime/config.py").read_text()
    assert "return get_scalar_param(param_dict, GRADIENT_CLIPPING, GRADIENT_CLIPPING_DEFAULT)" in cfg_py
    clip = float(_constant(release, "GRADIENT_CLIPPING_DEFAULT"))
    assert versions.default_in("/gradient_clipping", release) == clip
    if "def get_bfloat16_immediate_grad_update" in cfg_py:
        igu = _constant(release, "BFLOAT16_IMMEDIATE_GRAD_UPDATE_DEFAULT")
    else:
        prec = _fetch(release) / "deepspeed/runtime/precision_config.py"
        m = re.search(r"immediate_grad_update: bool = (\w+)", prec.read_text()) if prec.is_file() else None
        igu = None if m is None else m.group(1) == "True"
    assert versions.default_in("/bf16/immediate_grad_update", release) == igu
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}}
    codes = _lint(cfg, release)
    assert (("V002", "") in codes) == (clip != 1.0)  # 0.19.8's default is 1.0 (its source)
    assert _constant("0.19.8", "GRADIENT_CLIPPING_DEFAULT") == 1.0
    assert ("V002", "") not in _lint({**cfg, "gradient_clipping": 1.0}, release)
    from advisor.config.loading import parse_text
    from advisor.views.lint import lint_config
    v2 = {f.data.get("key") for f in lint_config(parse_text(json.dumps(cfg), "ds.json"),
                                                  release=versions.target_release(release)) if f.code == "V002"}
    assert ("immediate_grad_update" in v2) == (igu is True)  # 0.19.8: false (precision_config.py)
    from advisor.config.effective import effective_config
    ec = effective_config(cfg)
    versions.apply_release_defaults(ec, cfg, versions.target_release(release))
    assert ec.gradient_clipping == clip


@pytest.mark.parametrize("release", ["0.17.1", "0.17.2"])
def test_torch_autocast_before_it_is_read_is_a_warning(release):
    """Item 2: runtime/config.py get_torch_autocast_enabled first appears in 0.17.2: before, the
    top-level torch_autocast block is ignored (dict.get), so lint warns there, not after."""
    read = "def get_torch_autocast_enabled" in (_fetch(release) / "deepspeed/runtime/config.py").read_text()
    assert read == (release == "0.17.2")
    from advisor.config.loading import parse_text
    from advisor.views.lint import lint_config
    cfg = {"train_micro_batch_size_per_gpu": 1, "torch_autocast": {"enabled": True}}
    found = [f for f in lint_config(parse_text(json.dumps(cfg), "ds.json"), release=versions.target_release(release))
             if f.pointer.startswith("/torch_autocast")]
    assert [(f.code, f.severity) for f in found] == ([] if read else [("V001", "warning")])
    if found:
        assert "DeepSpeed 0.17.1" in found[0].message and "0.17.2" in found[0].message


def _zero_field(release: str, name: str) -> str:
    m = re.search(rf"^\s+{name}: int = Field\((.*)\)$", (_fetch(release) / ZERO_FILE).read_text(), re.M)
    return m.group(1)


@pytest.mark.parametrize("release", ["0.14.5", "0.19.5", "0.19.6", "0.19.8"])
def test_bounds_are_the_releases_own(release):
    """Item 3: reduce_bucket_size 0 is refused only where the release's Field says gt=0 (0.19.6 on;
    ge=0 before), and the message names the release checked."""
    field = _zero_field(release, "reduce_bucket_size")
    refuses = "gt=0" in field
    assert refuses or "ge=0" in field
    from advisor.config.loading import parse_text
    from advisor.views.lint import lint_config
    cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "reduce_bucket_size": 0}}
    s004 = [f for f in lint_config(parse_text(json.dumps(cfg), "ds.json"), release=versions.target_release(release))
            if f.code == "S004"]
    assert bool(s004) == refuses
    if s004:
        assert f"DeepSpeed {release} rejects" in s004[0].message
        assert release == "0.19.8" or "0.19.8" not in s004[0].message


@pytest.mark.parametrize("release", ["0.14.5", "0.15.0"])
def test_a_fractional_int_follows_the_releases_pydantic_api(release):
    """Item 3: the config models of 0.9.0-0.14.5 use pydantic's v1 API (int(v): 1.5 -> 1, accepted),
    those from 0.15.0 the v2 API (refused): read from config_utils.py's import."""
    src = (_fetch(release) / "deepspeed/runtime/config_utils.py").read_text()
    v1 = "from deepspeed.pydantic_v1 import BaseModel" in src
    assert v1 != ("from pydantic import BaseModel, ConfigDict" in src)
    from advisor.config.loading import parse_text
    from advisor.views.lint import lint_config
    cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "reduce_bucket_size": 1.5}}
    found = [f for f in lint_config(parse_text(json.dumps(cfg), "ds.json"), release=versions.target_release(release))
             if f.pointer == "/zero_optimization/reduce_bucket_size"]
    assert [(f.code, f.severity) for f in found] == [("S003", "warning" if v1 else "error")]
    assert f"DeepSpeed {release}" in found[0].message and "0.19.8" not in found[0].message


def test_s005_names_the_release_checked_and_v001_does_not_repeat_it():
    """Item 4: at 0.19.7 mics_shard_size is in the release's _REMOVED_ZERO_CONFIG_KEYS (refused
    before the models are built) and not a DeepSpeedZeroConfig field: one S005 naming 0.19.7."""
    cfg7 = (_fetch("0.19.7") / "deepspeed/runtime/config.py").read_text()
    assert re.search(r'_REMOVED_ZERO_CONFIG_KEYS = \{[^}]*"mics_shard_size"', cfg7, re.S)
    assert not _zero_source_defines("0.19.7", "mics_shard_size") and _zero_source_defines("0.19.6", "mics_shard_size")
    from advisor.config.loading import parse_text
    from advisor.views.lint import lint_config
    cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "mics_shard_size": 8}}
    found = [f for f in lint_config(parse_text(json.dumps(cfg), "ds.json"), release=versions.target_release("0.19.7"))
             if f.pointer == "/zero_optimization/mics_shard_size"]
    assert [f.code for f in found] == ["S005"] and "DeepSpeed 0.19.7 refuses" in found[0].message
    assert "0.19.8" not in found[0].message
    assert "replacement is 'mics_shard_size'" not in " ".join(f.fix for f in found)


def test_an_installed_release_newer_than_the_table_claims_no_byte_exactness(tmp_path):
    """Item 5: an installed 0.20.0 is checked with 0.19.8's facts; the estimate says it is outside
    the releases checked, never "byte-exact"."""
    site = tmp_path / "site"
    d = site / "deepspeed-0.20.0.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: deepspeed\nVersion: 0.20.0\n\n")
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1}))
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    est = json.loads(run_cli(["estimate", str(cfg), "--params", "1000000", "--format", "json"], env=env).stdout)
    assert est["deepspeed_release"]["requested"] == "0.20.0" and "byte-exact" not in est["accounting"]
    assert "outside the releases checked" in est["accounting"] and "0.20.0" in est["accounting"]
    text = " ".join(run_cli(["estimate", str(cfg), "--params", "1000000"], env=env).stdout.split())
    assert "byte-exact" not in text and "outside the releases checked" in text


def test_json_and_sarif_name_the_checked_release_once(tmp_path):
    """Item 6: no field says 0.19.8 as "the" DeepSpeed when 0.14.5 was checked; the accounting's
    release has its own name."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1}))
    v = ["--deepspeed-version", "0.14.5"]
    for cmd in (["estimate", str(cfg), "--params", "1000000"], ["check", str(cfg), "--params", "1000000",
                                                                 "--world-size", "1"]):
        d = json.loads(run_cli(cmd + ["--format", "json", *v]).stdout)
        assert "deepspeed" not in d and d["deepspeed_release"]["checked"] == "0.14.5"
        assert d["accounting_release"] == "0.19.8"
    sarif = json.loads(run_cli(["lint", str(cfg), "--format", "sarif", *v]).stdout)["runs"][0]
    assert "deepspeed" not in sarif["tool"]["driver"]["properties"]
    assert sarif["invocations"][0]["properties"]["deepspeedRelease"]["checked"] == "0.14.5"


def test_explain_v005_says_what_the_sources_say_about_comms_logger():
    """Item 7: comms_logger refuses unknown keys from 0.9.0 (CommsConfig's own extra='forbid'
    before 0.15.0), so V005's explanation does not call it unvalidated there."""
    src = (_fetch("0.9.0") / "deepspeed/comm/config.py").read_text()
    assert re.search(r"class CommsConfig\(BaseModel\):\s*\n\s*class Config:.*?extra = 'forbid'", src, re.S)
    assert "class CommsLoggerConfig(CommsConfig)" in src
    text = " ".join(run_cli(["explain", "V005"]).stdout.split())
    assert "none before 0.15.0" not in text and "comms_logger is validated in every release checked" in text


def test_quiet_lint_names_the_release_and_o007_needs_the_key(tmp_path):
    """Item 8: -q ends with the release its findings hold for; O007 (offload ratio below stage 3)
    does not fire at 0.11.2, which has neither the ratio key nor its validator (V001 reports the
    key); V003's fix is grammatical."""
    for rel, has in (("0.11.2", False), ("0.12.3", True)):
        src = _fetch(rel) / "deepspeed/runtime/zero"
        assert ("ratio:" in (src / "offload_config.py").read_text()) == has
        assert ("Partial offloading only supported" in (src / "config.py").read_text()) == has
    cfg = {"train_micro_batch_size_per_gpu": 1,
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3, "pin_memory": True}}}
    ptr = "/zero_optimization/offload_optimizer/ratio"
    assert {c for c, p in _lint(cfg, "0.11.2") if p == ptr} == {"V001"}
    assert {c for c, p in _lint(cfg, "0.12.3") if p == ptr} == {"O007"}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    q = run_cli(["lint", str(path), "-q", "--deepspeed-version", "0.11.2"]).stdout.strip().splitlines()
    assert q[-1] == "checked against DeepSpeed 0.11.2 (--deepspeed-version)" and "file(s):" not in " ".join(q)
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "muon"}}))  # not torch.optim.Muon
    out = json.loads(run_cli(["lint", str(path), "--format", "json", "--deepspeed-version", "0.17.5"]).stdout)
    v3 = [f for f in out["files"][0]["findings"] if f["code"] == "V003"]
    assert v3 and v3[0]["fix"].startswith("use an optimizer that DeepSpeed 0.17.5 has")
    opts = {r: (_fetch(r) / "deepspeed/runtime/config.py").read_text().split("DEEPSPEED_OPTIMIZERS = [")[1].split("]")[0]
            for r in ("0.17.5", "0.17.6")}
    assert "MUON" not in opts["0.17.5"] and "MUON" in opts["0.17.6"]


@pytest.mark.parametrize("release", ["0.19.6", "0.19.7"])
def test_z006_only_where_the_release_has_compute_grad_norm(release):
    """compute_grad_norm and its 'supported only with ZeRO Stage 1 or 2' validator arrive in 0.19.7
    (runtime/zero/config.py): at 0.19.6 the key is V001's, not a Z006 verdict of 0.19.8's checks."""
    src = (_fetch(release) / ZERO_FILE).read_text()
    has = "compute_grad_norm=false is supported only with ZeRO Stage 1 or 2" in src
    assert has == _zero_source_defines(release, "compute_grad_norm") == (release == "0.19.7")
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 1.0,
           "zero_optimization": {"stage": 3, "compute_grad_norm": False}}
    codes = {c for c, p in _lint(cfg, release) if p == "/zero_optimization/compute_grad_norm"}
    assert codes == ({"Z006"} if has else {"V001"})
