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


@pytest.mark.parametrize("release", ["0.9.5", "0.10.3", "0.14.5", "0.17.6", "0.19.3"])
@pytest.mark.parametrize("key,value", CASES)
def test_v001_matches_the_release_source(release, key, value):
    codes = _lint({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, key: value}}, release)
    ptr = f"/zero_optimization/{key}"
    defined = _zero_source_defines(release, key)
    assert ((("V001", ptr) in codes) == (not defined)), (release, key, codes)
    assert ("S001", ptr) not in codes and ("S005", ptr) not in codes  # 0.19.8's verdicts are not this release's


def test_cli_names_the_release_in_json_and_text(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "zenflow": {}}}))
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
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1,
                               "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}))
    out = json.loads(run_cli(["lint", str(cfg), "--deepspeed-version", "0.17.6", "--format", "json"]).stdout)
    v2 = [f for f in out["files"][0]["findings"] if f["code"] == "V002"]
    assert [f["pointer"] for f in v2] == ["/zero_optimization/offload_optimizer"] and "false" in v2[0]["message"]
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
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
    assert versions.target_release("0.14.5").checked == "0.14.5"
    r = versions.target_release("0.19.5")  # between two checked patches: the one at or below it
    assert (r.requested, r.checked) == ("0.19.5", "0.19.3") and "0.19.3" in r.note
    assert r.warning and "0.19.3" in r.warning  # said on stderr, not silent
    assert versions.target_release("v0.12.6+cu121").checked == "0.12.6"
    for bad in ("0.8.3", "1.0.0", "x", "", " ", "0.19", "0.19.8rc1", "0.19.8abc", "0.19.8.dev0"):
        with pytest.raises(versions.UnsupportedRelease):
            versions.target_release(bad)
    from importlib.metadata import version
    assert versions.target_release(None).requested == version("deepspeed")  # installed, from metadata


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


@pytest.mark.engine  # slow (parses 15 releases); runs in the full suite with the engine tests
def test_drift_the_table_is_what_the_sdists_give():
    """Regenerate the table from the sdists and compare it with the checked-in one."""
    for r in gen.RELEASES:
        _fetch(r)
    fresh = json.dumps(gen.build(SDISTS), indent=1, sort_keys=True) + "\n"
    assert gen.TABLE_PATH.read_text(encoding="utf-8") == fresh, "run: python -m advisor.config._versiongen"


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


def _old_accepts(target: Path, zero: dict) -> tuple[bool, str]:
    code = ("import json, sys\nsys.path.insert(0, %r)\nfrom deepspeed.runtime.zero.config import DeepSpeedZeroConfig\n"
            "import deepspeed\nassert deepspeed.__version__.startswith(%r), deepspeed.__version__\n"
            "try:\n    DeepSpeedZeroConfig(**json.loads(%r))\n    print('ACCEPTED')\n"
            "except Exception as e:\n    print('REFUSED', type(e).__name__)\n") % (str(target), OLD, json.dumps(zero))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "DS_ACCELERATOR": "cpu", "PYTHONPATH": ""}, cwd="/")
    assert "ACCEPTED" in p.stdout or "REFUSED" in p.stdout, p.stderr[-3000:]
    return "ACCEPTED" in p.stdout, p.stdout


@pytest.mark.engine  # imports a real (older) DeepSpeed
@pytest.mark.parametrize("key,value", [("zenflow", {}), ("module_granularity_threshold", 0), ("mics_shard_size", 8),
                                       ("zero_hpz_partition_size", 8), ("leaf_module", {})])
def test_an_older_engine_refuses_what_lint_says_it_refuses(tmp_path, old_deepspeed, key, value):
    zero = {"stage": 3, key: value}
    accepted, why = _old_accepts(old_deepspeed, zero)
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": zero}))
    out = json.loads(run_cli(["lint", str(cfg), "--deepspeed-version", OLD, "--format", "json"]).stdout)
    flagged = any(f["code"] == "V001" and f["pointer"] == f"/zero_optimization/{key}"
                  for f in out["files"][0]["findings"])
    assert flagged == (not accepted), (key, why, out["files"][0]["findings"])


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
                                 ["resolve", "{cfg}", "--hf"], ["generate", "--model", "llama-3.2-1b", "--hardware", "dgx-h100", "--global-batch", "64", "--seq-len", "1024", "--nodes", "1", "--gpus-per-node", "8"]])
def test_every_command_takes_the_release_and_refuses_an_unknown_one(tmp_path, cmd):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}))
    args = [a.replace("{cfg}", str(cfg)) for a in cmd]
    bad = run_cli(args + ["--deepspeed-version", "0.8.3"])
    assert bad.returncode == 2 and "0.8.3" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    ok = run_cli(args + ["--deepspeed-version", "0.17.6"])
    assert ok.returncode in (0, 1, 3), ok.stderr
    assert "Traceback" not in ok.stderr


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


def test_patch_below_every_checked_patch_of_its_minor_is_refused_not_mapped_upward():
    """Issue 20 item 4: 0.10.0 is not checked as 0.10.3, nor 0.17.0 as 0.17.1. The reason, from the
    sources: a later patch of the same minor has files (keys) the earlier one need not have;
    0.17.1 ships runtime/precision_config.py (fp16/bf16 models), 0.16.9 does not."""
    assert (_fetch("0.17.1") / "deepspeed/runtime/precision_config.py").is_file()
    assert not (_fetch("0.16.9") / "deepspeed/runtime/precision_config.py").is_file()
    for req, near in (("0.10.0", ("0.9.5", "0.10.3")), ("0.17.0", ("0.16.9", "0.17.1"))):
        with pytest.raises(versions.UnsupportedRelease) as e:
            versions.target_release(req)
        assert req in str(e.value) and all(n in str(e.value) for n in near)
    p = run_cli(["lint", "-", "--deepspeed-version", "0.17.0"], stdin="{}")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "0.17.1" in p.stderr


@pytest.mark.parametrize("flag,why", [("", "empty"), ("0.19", "incomplete"), ("0.19.8rc1", "pre-release"),
                                      ("0.19.8abc", "not a release number")])
def test_bad_version_strings_are_refused(flag, why):
    """Issue 20 item 7: an empty, incomplete or pre-release --deepspeed-version is exit 2 naming it."""
    p = run_cli(["lint", "-", "--deepspeed-version", flag], stdin="{}")
    assert p.returncode == 2 and why in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_an_installed_release_outside_the_table_falls_back_with_one_warning(tmp_path):
    """Issue 20 item 5: a dist-info of 0.20.0 first on sys.path (what importlib.metadata reports)
    is not an error nobody caused: the newest table release is used, one warning names 0.20.0."""
    import importlib.metadata as md
    d = tmp_path / "site" / "deepspeed-0.20.0.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: deepspeed\nVersion: 0.20.0\n\n")
    assert [x.version for x in md.distributions(name="deepspeed", path=[str(tmp_path / "site")])] == ["0.20.0"]
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)])}
    p = run_cli(["lint", "-", "--format", "json"], stdin='{"train_micro_batch_size_per_gpu": 1}', env=env)
    assert p.returncode == 0, p.stderr
    warn = [x for x in p.stderr.splitlines() if "warning" in x]
    assert len(warn) == 1 and "0.20.0" in warn[0] and "--deepspeed-version:" not in p.stderr
    newest = gen.RELEASES[-1]
    assert json.loads(p.stdout)["deepspeed_release"] == {"requested": "0.20.0", "checked": newest, "origin": "installed"}


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
