"""Newcomer check lint21: what a user typed and DeepSpeed 0.19.8 silently did otherwise.

Item 1: a misspelt top-level key whose did-you-mean is a top-level key DeepSpeed reads, that key itself absent,
is an S002 *error*: DeepSpeed reads the intended key with ``in`` / ``dict.get`` and runs on its default
(``runtime/zero/config.py`` l.71-78 ``get_zero_config``: ``{}`` when ``zero_optimization`` is absent, l.95
``stage: ZeroStageEnum = 0``; ``runtime/precision_config.py`` l.34-38 ``get_bfloat16_config``, l.46
``enabled: bool = False``; ``runtime/config.py`` l.288-292 ``get_optimizer_name`` -> ``OPTIMIZER_TYPE_DEFAULT =
None``, ``runtime/constants.py`` l.26). Where the intended key is written too, or no key is near, it stays a warning.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

#: the newcomer's config: ZeRO-3 meant, DeepSpeed 0.19.8 runs ZeRO stage 0 (the whole model on every rank)
TYPO_ZERO = {"train_micro_batch_size_per_gpu": 2, "zero_optimisation": {"stage": 3}, "bf16": {"enabled": True}}


def _lint(tmp_path, cfg, *extra):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(cfg))
    return run_cli(["lint", str(p), "--format", "json", *extra], cwd=tmp_path)


def _s002(proc):
    return [f for f in json.loads(proc.stdout)["files"][0]["findings"] if f["code"] == "S002"]


def test_misspelt_zero_section_fails_lint_and_names_stage_0(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(TYPO_ZERO))
    text = run_cli(["lint", "c.json"], cwd=tmp_path)
    assert text.returncode == 1, text.stdout + text.stderr  # default --fail-on error
    assert "c.json:1:40: error S002 /zero_optimisation" in text.stdout
    (f,) = _s002(_lint(tmp_path, TYPO_ZERO))
    assert f["severity"] == "error"
    # DeepSpeedZeroConfig.stage = 0 (runtime/zero/config.py l.95) when the section is absent (l.71-78)
    assert "ZeRO is off (stage 0" in f["message"]
    assert "did you mean 'zero_optimization'?" in f["message"]


@pytest.mark.parametrize("typo, meant, words", [
    # get_bfloat16_config reads "bf16", then "bfloat16", else {}: enabled False (precision_config.py l.34-38, l.46)
    ("bf_16", "bf16", "bf16 is off"),
    # get_optimizer_name: no "optimizer" -> OPTIMIZER_TYPE_DEFAULT None (config.py l.288-292, constants.py l.26)
    ("optimiser", "optimizer", "no optimizer comes from the config"),
])
def test_misspelt_section_is_an_error_with_the_default_named(tmp_path, typo, meant, words):
    cfg = {"train_micro_batch_size_per_gpu": 2, typo: {"enabled": True} if meant == "bf16" else
           {"type": "AdamW", "params": {"lr": 1e-4}}}
    proc = _lint(tmp_path, cfg)
    (f,) = _s002(proc)
    assert (f["severity"], f["pointer"]) == ("error", f"/{typo}")
    assert words in f["message"] and f"did you mean '{meant}'?" in f["message"]
    assert proc.returncode == 1


def test_typo_beside_the_intended_key_stays_a_warning(tmp_path):
    # the intended section is written: DeepSpeed reads it; the typo is a stray, not a lost setting
    cfg = {**TYPO_ZERO, "zero_optimization": {"stage": 3}}
    proc = _lint(tmp_path, cfg)
    (f,) = _s002(proc)
    assert f["severity"] == "warning" and "absent" not in f["message"]
    assert proc.returncode == 0


def test_key_with_no_suggestion_stays_a_warning(tmp_path):
    proc = _lint(tmp_path, {"train_micro_batch_size_per_gpu": 2, "cuda_visible_devices": "0,1"})
    (f,) = _s002(proc)
    assert f["severity"] == "warning"
    assert proc.returncode == 0


def test_nested_typo_keeps_its_own_rule(tmp_path):
    # inside a plain-dict section (aio is read with .get, swap_tensor/aio_config.py) a typo is only ignored:
    # the section exists and its other keys are read -- a warning, as before
    proc = _lint(tmp_path, {"train_micro_batch_size_per_gpu": 2, "aio": {"block_sise": 1048576}})
    (f,) = _s002(proc)
    assert f["severity"] == "warning"


# --- item 2: a finding about a key the config does not contain says so ---------------------------------------

#: 7e9 parameters at ZeRO stage 0 (zero_optimization absent) on 40 GB cards: bf16 weights alone are 14e9 B
#: = 13.04 GiB, with fp32 master weights and Adam's two moments (12 B / param, stage 0 keeps all on every rank)
#: 84e9 B = 78.23 GiB more: far over 37.25 GiB (40e9 B), so M100 (accelerator) is certain
FIT_ARGS = ["--params", "7e9", "--world-size", "8", "--gpu-memory", "40GB"]


@pytest.mark.parametrize("command", ["estimate", "check"])
def test_m100_on_an_absent_section_is_marked_absent_at_the_top_level(tmp_path, command):
    (tmp_path / "c.json").write_text(json.dumps(TYPO_ZERO))
    p = run_cli([command, "c.json", *FIT_ARGS, "--format", "json"], cwd=tmp_path)
    m100 = [f for f in json.loads(p.stdout)["findings"] if f["code"] == "M100" and f["data"]["tier"] == "accelerator"]
    assert m100, p.stdout[:2000]
    f = m100[0]
    # zero_optimization is not in the file: the nearest written enclosing key is the document (line 1, column 1)
    assert (f["pointer"], f["line"], f["column"], f.get("absent")) == ("/zero_optimization", 1, 1, True)
    text = run_cli([command, "c.json", *FIT_ARGS], cwd=tmp_path, env={"COLUMNS": "400"}).stdout
    assert "error M100 /zero_optimization (absent: DeepSpeed's default): accelerator" in text


def test_m100_on_a_written_section_points_at_it(tmp_path):
    # the same job with ZeRO stage 0 written: the key is on line 3, its name from column 4 (after '  "')
    (tmp_path / "c.json").write_text('{\n  "train_micro_batch_size_per_gpu": 2,\n  "zero_optimization": {"stage": 0},\n'
                                     '  "bf16": {"enabled": true}\n}\n')
    p = run_cli(["check", "c.json", *FIT_ARGS, "--format", "json"], cwd=tmp_path)
    f = [f for f in json.loads(p.stdout)["findings"] if f["code"] == "M100"][0]
    assert (f["pointer"], f["line"], f["column"], f.get("absent")) == ("/zero_optimization", 3, 4, None)
    assert "(absent" not in run_cli(["check", "c.json", *FIT_ARGS], cwd=tmp_path).stdout


def test_estimate_json_with_an_absent_finding_validates(tmp_path):
    # estimate's findings are lint-output.schema.json's findings (additionalProperties false): "absent" is declared
    jsonschema = pytest.importorskip("jsonschema")
    from tests.test_estimate_required_fields import _validator
    (tmp_path / "c.json").write_text(json.dumps(TYPO_ZERO))
    doc = json.loads(run_cli(["estimate", "c.json", *FIT_ARGS, "--format", "json"], cwd=tmp_path).stdout)
    assert any(f.get("absent") for f in doc["findings"])
    _validator().validate(doc)
    doc["findings"][-1]["absent"] = False  # only ever written as true
    with pytest.raises(jsonschema.ValidationError):
        _validator().validate(doc)


# --- item 3: estimate's text findings carry check's / lint's file:line:column --------------------------------

def test_estimate_text_findings_carry_the_location(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps(TYPO_ZERO))
    env = {"COLUMNS": "400"}
    lint = run_cli(["lint", "c.json"], cwd=tmp_path, env=env).stdout
    est = run_cli(["estimate", "c.json", *FIT_ARGS], cwd=tmp_path, env=env).stdout
    chk = run_cli(["check", "c.json", *FIT_ARGS], cwd=tmp_path, env=env).stdout
    # the key "zero_optimisation" starts at column 40 of line 1: '{"train_micro_batch_size_per_gpu": 2, "' is 39
    assert len('{"train_micro_batch_size_per_gpu": 2, "') == 39
    line = "c.json:1:40: error S002 /zero_optimisation: ignored key 'zero_optimisation'"
    assert line in lint and f"  {line}" in est and f"  {line}" in chk
    # a finding about the absent section: the document's place, said absent (item 2)
    assert "  c.json:1:1: error M100 /zero_optimization (absent: DeepSpeed's default): accelerator" in est


# --- item 4: T002's node is the ranks of one node, not the hardware's accelerators per node -------------------

def test_t002_counts_the_ranks_one_node_runs(tmp_path):
    """dgx-h100 (8 accelerators per node) with a local NVMe drive, run as 2 nodes x 4 ranks (--gpus-per-node 4).
    By hand: the ZeRO-3 optimizer swap of 1e9 parameters over 8 ranks writes the fp32 master, exp_avg, exp_avg_sq
    and fp32 gradient, 16 B x 1e9 / 8 = 2e9 B per rank per step (as test_storage_tiers' T002 case); one node's
    4 ranks write 8e9 B per step, x 8,640 steps/day at 10 s = 6.912e13 B/day on its drive; 1e16 B (10,000 TBW)
    lasts 144.7 days -- T002 counted the preset's 8 accelerators: 1.3824e14 B/day, 72.3 days."""
    (tmp_path / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "optimizer": {"type": "AdamW"},
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/scratch/swap"}}}))
    (tmp_path / "hw.json").write_text(json.dumps({"base": "dgx-h100", "storage": [{
        "name": "nvme0", "mounts": ["/scratch"], "capacity_bytes": 1e14, "read_bytes_per_s": 7e9,
        "write_bytes_per_s": 7e9, "access": "read-write", "endurance": {"tbw": 10_000}}]}))
    base = ["estimate", "ds.json", "--params", "1e9", "--hardware", "hw.json", "--world-size", "8", "--seq-len",
            "1024", "--step-time", "10", "--format", "json"]
    for extra, rpn in (([], 8), (["--gpus-per-node", "4"], 4)):
        d = json.loads(run_cli([*base, *extra], cwd=tmp_path).stdout)
        (f,) = [f for f in d["findings"] if f["code"] == "T002"]
        per_day = 16 * 1e9 / 8 * rpn * 8640
        assert f["data"]["bytes_written_per_day"] == pytest.approx(per_day, rel=1e-4)
        assert f["data"]["days_of_life"] == pytest.approx(1e16 / per_day, rel=1e-4)
        (ln,) = [x for x in d["movement"]["endurance"] if x["tier"] == "nvme0"]
        assert ln["ranks_per_node"] == rpn  # estimate's own line: the same node


# --- item 5: the HTML report says why movement times are unknown, as the text table does ----------------------

@pytest.mark.parametrize("hardware, why", [
    ([], "no --hardware, so no link bandwidths"),
    # the accelerator preset has no storage tier: the NVMe swap's copies have no bandwidth
    (["--hardware", "h100-sxm-80gb"], "the --hardware spec gives no bandwidth for nvme"),
])
def test_report_html_says_why_movement_times_are_unknown(tmp_path, hardware, why):
    (tmp_path / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "optimizer": {"type": "AdamW"},
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/scratch/swap"}}}))
    args = ["ds.json", "--params", "1e9", "--world-size", "8", "--seq-len", "1024", *hardware]
    text = run_cli(["estimate", *args], cwd=tmp_path, env={"COLUMNS": "400"}).stdout
    assert f"(time ?: {why}" in text
    p = run_cli(["report", *args, "-o", "r.html"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    html = (tmp_path / "r.html").read_text()
    assert "id=movement-time-note" in html and why in html


def test_report_html_has_no_time_note_when_every_movement_is_timed(tmp_path):
    # dgx-h100 gives PCIe and network bandwidths; ZeRO-3 with the optimizer on the CPU moves over PCIe only
    (tmp_path / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "optimizer": {"type": "AdamW"},
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}))
    args = ["ds.json", "--params", "1e9", "--world-size", "8", "--seq-len", "1024", "--hardware", "dgx-h100"]
    assert "time ?" not in run_cli(["estimate", *args], cwd=tmp_path, env={"COLUMNS": "400"}).stdout
    assert run_cli(["report", *args, "-o", "r.html"], cwd=tmp_path).returncode == 0
    html = (tmp_path / "r.html").read_text()
    assert "id=movement-chart" in html and "movement-time-note" not in html


# --- s002b: the error is for a lost setting only ------------------------------------------------------------------

@pytest.mark.parametrize("cfg, typo", [
    # get_bfloat16_config reads "bf16", else the legacy "bfloat16" (runtime/precision_config.py l.34-38): with
    # "bfloat16" written, bf16 is on as the user wrote it, whichever of the two names the typo misses
    ({"train_micro_batch_size_per_gpu": 1, "bfloat16": {"enabled": True}, "bf_16": {"enabled": True}}, "bf_16"),
    ({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "bfloat_16": {}}, "bfloat_16"),
])
def test_typo_of_a_section_written_under_its_legacy_name_is_a_warning(tmp_path, cfg, typo):
    proc = _lint(tmp_path, cfg)
    (f,) = _s002(proc)
    assert (f["severity"], f["pointer"]) == ("warning", f"/{typo}")
    assert "absent" not in f["message"] and "bf16 is off" not in f["message"]
    assert proc.returncode == 0


@pytest.mark.parametrize("first", [True, False])
def test_misspelt_section_is_an_error_wherever_it_stands(tmp_path, first):
    # 60 application keys DeepSpeed ignores, and the ZeRO typo before or after them: ZeRO is off either way
    # (runtime/zero/config.py l.71-78, l.95), so lint fails either way and names the typo
    apps = {f"app_{i}": i for i in range(60)}
    typo = {"zero_optimisation": {"stage": 3}}
    cfg = {"train_micro_batch_size_per_gpu": 1, **(typo if first else apps), **(apps if first else typo)}
    proc = _lint(tmp_path, cfg)
    found = _s002(proc)
    errors = [f for f in found if f["severity"] == "error"]
    assert [f["pointer"] for f in errors] == ["/zero_optimisation"]
    assert proc.returncode == 1
    # 61 ignored keys: 50 listed one by one, the error, and one fold of the remaining warnings
    folded = [f for f in found if f.get("data", {}).get("folded")]
    assert len(folded) == 1 and folded[0]["severity"] == "warning"
    assert folded[0]["data"]["folded"] + len(found) - 1 == 61


@pytest.mark.parametrize("cfg", [
    # WALL_CLOCK_BREAKDOWN_DEFAULT False (runtime/config.py l.351-352, runtime/constants.py)
    {"wall_clock_breakdowns": False},
    # get_float16_config: {} when fp16 absent, DeepSpeedFP16Config.enabled False (precision_config.py l.95-97, l.105)
    {"fp_16": {"enabled": False}},
    # DeepSpeedZeroConfig() from {}: stage 0 (runtime/zero/config.py l.71-78, l.95)
    {"zero_optimisation": {"stage": 0}},
])
def test_typo_that_sets_the_default_is_a_warning(tmp_path, cfg):
    proc = _lint(tmp_path, {"train_micro_batch_size_per_gpu": 1, **cfg})
    (f,) = _s002(proc)
    assert f["severity"] == "warning", f
    assert "(it sets what DeepSpeed's default already is)" in f["message"]
    assert proc.returncode == 0


@pytest.mark.parametrize("cfg", [
    {"wall_clock_breakdowns": True},  # the default is False (runtime/config.py l.351-352)
    {"fp_16": {"enabled": True}},  # the default is off (precision_config.py l.105)
    {"zero_optimisation": {"stage": 1}},  # the default is stage 0 (runtime/zero/config.py l.95)
])
def test_typo_that_differs_from_the_default_is_an_error(tmp_path, cfg):
    proc = _lint(tmp_path, {"train_micro_batch_size_per_gpu": 1, **cfg})
    (f,) = _s002(proc)
    assert f["severity"] == "error" and "already is" not in f["message"], f
    assert proc.returncode == 1


def test_explain_s002_says_when_it_is_an_error():
    head = run_cli(["explain", "S002"]).stdout.splitlines()[0]
    assert "severity: warning" in head and "error for a misspelt top-level key" in head


def test_misspelt_section_search_is_bounded_past_1050_keys():
    """The search for a misspelt section among unknown top-level keys past the first 50 costs one did-you-mean
    each: 100,000 keys took 15 s of CPU (0.7 s before f241a1d). It now covers keys 51-1,050 (a typo there is
    still an error, wherever it stands) and the fold line says the later ones were not searched (bounded work,
    issue 21). Positions by hand: the typo is key 1,001 or key 1,101 of the config's unknown keys."""
    from advisor.config.loading import parse_text
    from advisor.config.schema import MAX_TYPO_SCAN, MAX_UNKNOWN_KEYS, validate_config

    assert MAX_UNKNOWN_KEYS + MAX_TYPO_SCAN == 1050

    def _lint(n_before):
        d = {"train_micro_batch_size_per_gpu": 1, **{f"app_key_{i}": i for i in range(n_before)},
             "zero_optimisation": {"stage": 3}}
        return validate_config(parse_text(json.dumps(d), "c.json"))

    inside = _lint(1000)  # the typo is unknown key 1,001: searched
    assert any(f.code == "S002" and f.severity == "error" and f.pointer == "/zero_optimisation" for f in inside)
    past = _lint(1100)  # key 1,101: past the search, folded, and the fold says so
    assert not any(f.severity == "error" for f in past)
    fold = [f for f in past if (f.data or {}).get("folded")]
    assert fold and "keys past the first 1,050 were not searched for a misspelt section" in fold[0].message
    assert fold[0].data["folded"] == 1101 - 50
