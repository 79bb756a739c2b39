"""Cases C01-C03 (tests/data/cases) and the real-config corpus, through the CLI and schema validation.

Each case test names its folder, runs the command from its expect.json in that folder, and checks
the exit code and every expected finding (pointer, severity, words in message or fix), plus the
S-family code that must carry it.
"""

from __future__ import annotations

import json

import pytest

from advisor.config.loading import load_config
from advisor.config.schema import validate_config
from tests.conftest import CASES, CORPUS, run_cli, run_json

#: case folder -> the S code every expected finding must carry
SCHEMA_CASES = {
    "C01-misplaced-offload": "S006",
    "C02-typo-nested-key": "S001",
    "C03-bf16-lossscale-keys": "S006",
}


@pytest.mark.parametrize("case", sorted(SCHEMA_CASES))
def test_case_expectations(case):
    folder = CASES / case
    expect = json.loads((folder / "expect.json").read_text())
    rc, out = run_json(expect["command"], cwd=folder)
    assert rc == expect["exit_code"], out
    findings = [f for file in out["files"] for f in file["findings"]]
    for want in expect["findings"]:
        hits = [f for f in findings if f["pointer"] == want["pointer"] and f["severity"] == want["severity"]]
        assert hits, f"{case}: no {want['severity']} at {want['pointer']} in {findings}"
        f = next((h for h in hits if h["code"] == SCHEMA_CASES[case]), None)
        assert f is not None, f"{case}: {want['pointer']} not reported as {SCHEMA_CASES[case]}: {hits}"
        text = f["message"] + " " + f["fix"]
        for word in want.get("mentions", []):
            assert word in text, f"{case}: {word!r} not in {text!r}"
        assert f["line"] is not None and f["line"] >= 1


def test_c02_no_other_schema_finding():
    """C02 holds one typo; every other key is valid in 0.19.8 (no false positives nearby)."""
    rc, out = run_json(["lint", "config.json", "--world-size", "8", "--format", "json"], cwd=CASES / "C02-typo-nested-key")
    s = [(f["code"], f["pointer"]) for f in out["files"][0]["findings"] if f["code"].startswith("S")]
    assert s == [("S001", "/zero_optimization/stage3_param_persitance_threshold")]


def test_c03_exactly_the_five_loss_scale_keys():
    loaded = load_config(str(CASES / "C03-bf16-lossscale-keys" / "config.json"))
    got = sorted(f.pointer for f in validate_config(loaded))
    assert got == ["/bf16/hysteresis", "/bf16/initial_scale_power", "/bf16/loss_scale", "/bf16/loss_scale_window",
                   "/bf16/min_loss_scale"]


# ------------------------------------------------------------------------------------------
# corpus

CORPUS_FILES = sorted(p.name for p in CORPUS.iterdir() if p.name != "MANIFEST.tsv")

#: Mistakes in the S family that MANIFEST.tsv notes (plus ones it implies), by file:
#: (pointer, code, severity, word the message or fix must contain)
CORPUS_EXPECT = {
    "EleutherAI__gpt-neox__configs__13B-ZeRO3.yml": [
        ("/zero_optimization/stage3_param_persitance_threshold", "S001", "error", "stage3_param_persistence_threshold"),
        ("/zero_optimization/cpu_offload_params", "S001", "error", "cpu_offload_param"),
        ("/fp16/fp16", "S006", "error", "enabled"),
    ],
    "EleutherAI__gpt-neox__configs__125M.yml": [
        # Python True in HJSON is the string "True," (to the end of the line): pydantic rejects it
        ("/zero_optimization/contiguous_gradients", "S003", "error", "trailing comma"),
    ],
    "NVlabs__VILA__scripts__zero3_mics_mini_fixed.json": [
        ("/zero_optimization/mics_shard_size", "S005", "error", "MiCS"),
        ("/zero_optimization/mics_hierarchical_params_gather", "S005", "error", "MiCS"),
    ],
    "OpenGVLab__InternVL__segmentation__zero_configs__adam_zero2_bf16.json": [
        ("/log", "S002", "warning", "steps_per_print"),
    ],
    "deepspeedai__DeepSpeedExamples__training__imagenet__config__ds_fp16_z1_config.json": [
        ("/cuda_visible_devices", "S002", "warning", "silently ignores"),
    ],
    "hiyouga__LLaMA-Factory__examples__deepspeed__ds_z3_fp8_config.json": [
        ("/comms_config", "S002", "warning", "silently ignores"),
        ("/monitor_config", "S002", "warning", "csv_monitor"),
    ],
    "hiyouga__LLaMA-Factory__examples__deepspeed__ds_z2_autotp_config.json": [
        ("/_comment", "S002", "info", "comment"),
    ],
    "axolotl-ai-cloud__axolotl__ds_config.json": [
        ("/round_robin_gradients", "S006", "error", "zero_optimization"),
    ],
    "microsoft__DeepSpeedExamples__megatron__Megatron-LM-v1.1.5-ZeRO3__examples__ds_zero_stage_3_config_release.json": [
        ("/zero_optimization/cpu_offload_params", "S001", "error", "cpu_offload_param"),
    ],
    "microsoft__DeepSpeedExamples__megatron__Megatron-LM-v1.1.5-ZeRO3__examples__ds_zero_stage_infinity_config.json": [
        ("/zero_optimization/stage3_param_persitence_threshold", "S001", "error", "stage3_param_persistence_threshold"),
        ("/aio/thread_count", "S002", "warning", "silently ignores"),
    ],
    "OpenRLHF__OpenRLHF__openrlhf__configs__ddpo_ds_config.json": [
        ("/aio/thread_count", "S002", "warning", "silently ignores"),
    ],
    "microsoft__Megatron-DeepSpeed__ds_config.json": [
        ("/fp16/enabled", "S003", "error", "true/false"),
        ("/train_batch_size", "S003", "error", "integer"),
        # "True" without a comma: pydantic coerces it, so only a warning
        ("/zero_optimization/offload_optimizer/pin_memory", "S003", "warning", "coerces"),
    ],
    "microsoft__Megatron-DeepSpeed__examples_deepspeed__offload_pp__ds_config_gpt_TEMPLATE.json": [
        ("/train_batch_size", "S003", "error", "CONFIG_BATCH_SIZE"),
    ],
    "ymcui__Chinese-LLaMA-Alpaca__scripts__training__ds_zero2_no_offload.json": [
        # pydantic int field: 1e-10 has a fractional part -> ValidationError in 0.19.8
        ("/fp16/min_loss_scale", "S003", "error", "integer"),
    ],
}

#: Files with at least one S-family error. Every other corpus file must have none: they run on
#: DeepSpeed 0.19.8 as far as the key surface goes (false positives here are bugs).
FILES_WITH_SCHEMA_ERRORS = {
    "EleutherAI__gpt-neox__configs__13B-ZeRO3.yml",
    "EleutherAI__gpt-neox__configs__125M.yml",
    "NVlabs__VILA__scripts__zero3_mics_mini_fixed.json",
    "axolotl-ai-cloud__axolotl__ds_config.json",
    "microsoft__DeepSpeedExamples__megatron__Megatron-LM-v1.1.5-ZeRO3__examples__ds_zero_stage_3_config_release.json",
    "microsoft__DeepSpeedExamples__megatron__Megatron-LM-v1.1.5-ZeRO3__examples__ds_zero_stage_infinity_config.json",
    "microsoft__Megatron-DeepSpeed__ds_config.json",
    "microsoft__Megatron-DeepSpeed__examples_deepspeed__offload_pp__ds_config_gpt_TEMPLATE.json",
    "ymcui__Chinese-LLaMA-Alpaca__scripts__training__ds_zero2_no_offload.json",
}


def test_manifest_lists_the_corpus():
    listed = {line.split("\t")[0] for line in (CORPUS / "MANIFEST.tsv").read_text().splitlines()[1:] if line.strip()}
    assert set(CORPUS_FILES) == listed
    assert set(CORPUS_EXPECT) <= listed and FILES_WITH_SCHEMA_ERRORS <= listed


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_corpus_config_validates(name):
    """Every corpus config loads and validates without an exception; S errors only where expected."""
    loaded = load_config(str(CORPUS / name))
    findings = validate_config(loaded)
    for f in findings:
        assert f.code in {"S001", "S002", "S003", "S004", "S005", "S006"}
        assert f.severity in {"error", "warning", "info"} and f.message
        assert f.pointer.startswith("/")
    errors = [f for f in findings if f.severity == "error"]
    if name in FILES_WITH_SCHEMA_ERRORS:
        assert errors, f"{name}: expected S-family errors"
    else:
        assert not errors, f"{name}: unexpected {[(f.code, f.pointer, f.message) for f in errors]}"
    by_ptr = {(f.pointer, f.code): f for f in findings}
    for ptr, code, sev, word in CORPUS_EXPECT.get(name, []):
        f = by_ptr.get((ptr, code))
        assert f is not None, f"{name}: no {code} at {ptr}: {[(x.code, x.pointer) for x in findings]}"
        assert f.severity == sev, (name, ptr, f.severity)
        assert word in f.message + " " + f.fix, (name, ptr, f.message, f.fix)


def test_cli_lints_whole_corpus_without_traceback():
    p = run_cli(["lint", str(CORPUS), "--format", "json"])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    assert p.returncode == 1  # the corpus holds real mistakes
    out = json.loads(p.stdout)
    files = {f["file"].rsplit("/", 1)[-1]: f for f in out["files"]}
    assert set(CORPUS_FILES) <= set(files)
    got = {(f["pointer"], f["code"]) for f in files["axolotl-ai-cloud__axolotl__ds_config.json"]["findings"]}
    assert ("/round_robin_gradients", "S006") in got
