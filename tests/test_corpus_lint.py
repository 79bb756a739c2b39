"""Lint rules over every real config in tests/data/corpus (MANIFEST.tsv gives provenance).

Every file loads and is linted, and no rule may raise; every finding is well formed (registered
code, severity, pointer, one-line message); the CLI lints the whole folder with exit 1 and no
traceback; the mistakes MANIFEST.tsv notes in the
lint-rule families (B, P, O, D, A, Z) must be found at the pointer the user has to change.
(Misplaced / unknown / removed keys are the schema's S family, tested in test_cases_schema.py.)
"""

from __future__ import annotations

import pytest

import json
from pathlib import Path

from advisor.config.loading import load_config
from advisor.rules import all_rules
from advisor.views.lint import lint_config
from tests.conftest import CORPUS, run_cli, run_json

RULES = all_rules()

FILES = sorted(p for p in CORPUS.iterdir() if p.name != "MANIFEST.tsv")

#: file -> (code, pointer) the MANIFEST's notes call for; (file, hf) when the note is about HF use.
NOTED = {
    "EleutherAI__gpt-neox__configs__13B-ZeRO3.yml": [
        ("D001", "/zero_optimization/cpu_offload"), ("D001", "/zero_optimization/cpu_offload_params")],
    "NVlabs__VILA__scripts__zero2.json": [("Z003", "/zero_optimization/sub_group_size")],
    "OpenGVLab__InternVL__segmentation__zero_configs__adam_zero3_fp16.json": [("D003", "/optimizer/type")],
    "OpenRLHF__OpenRLHF__openrlhf__configs__ddpo_ds_config.json": [("O005", "/aio")],
    "QwenLM__Qwen__finetune__ds_config_zero2.json": [("O005", "/zero_optimization/offload_optimizer/pin_memory")],
    "axolotl-ai-cloud__axolotl__ds_config.json": [
        ("O001", "/zero_optimization/offload_param"), ("Z001", "/zero_optimization/stage3_max_live_parameters"),
        ("Z001", "/zero_optimization/stage3_max_reuse_distance")],
    "bigscience-workshop__bigscience__jz__configs__deepspeed__ds_zero2.json": [("D001", "/zero_optimization/cpu_offload")],
    "bigscience-workshop__bigscience__jz__configs__deepspeed__ds_zero3.json": [
        ("D001", "/zero_optimization/stage3_gather_fp16_weights_on_model_save")],
    "deepspeedai__DeepSpeedExamples__benchmarks__autosp__configs__autosp_config.json": [("A001", "/gradient_clipping")],
    "deepspeedai__DeepSpeedExamples__inference__sglang__ds_offload_cpu.json": [
        ("A002", "/zero_optimization/offload_param/buffer_size")],
    "deepspeedai__DeepSpeed__tests__hybrid_engine__hybrid_engine_config.json": [
        ("O001", "/zero_optimization/offload_param"), ("Z001", "/zero_optimization/stage3_param_persistence_threshold")],
    "deepspeedai__DeepSpeed__tests__model__Megatron_GPT2__ds_config_func_bs8_zero0_gas3.json": [
        ("Z002", "/zero_optimization/reduce_bucket_size")],
    "deepspeedai__DeepSpeed__tests__model__Megatron_GPT2__ds_config_func_bs8_zero2_offload.json": [
        ("D001", "/zero_optimization/cpu_offload")],
    "hiyouga__LLaMA-Factory__examples__deepspeed__ds_z0_config.json": [("Z002", "/zero_optimization/reduce_bucket_size")],
    "huggingface__transformers__tests__deepspeed__ds_config_zero3.json": [
        ("D001", "/zero_optimization/stage3_gather_fp16_weights_on_model_save")],
    "huggingface__transformers__tests__deepspeed__ds_config_zero3_bf16.json": [
        ("D001", "/bfloat16"), ("D001", "/zero_optimization/stage3_gather_fp16_weights_on_model_save")],
    "microsoft__DeepSpeedExamples__megatron__Megatron-LM-v1.1.5-ZeRO3__examples__ds_zero_stage_3_config_release.json": [
        ("D001", "/zero_optimization/cpu_offload"), ("D001", "/zero_optimization/cpu_offload_params"),
        ("D001", "/zero_optimization/cpu_offload_use_pin_memory")],
    "microsoft__DeepSpeedExamples__megatron__Megatron-LM__scripts__ds_zero-offload_10B_config.json": [
        ("D001", "/zero_optimization/cpu_offload")],
    # (its nvme_path with device cpu is moot: at stage 0 neither offload section does anything)
    "microsoft__Megatron-DeepSpeed__ds_config-gpt.json": [
        ("O001", "/zero_optimization/offload_param"), ("O002", "/zero_optimization/offload_optimizer")],
    "microsoft__Megatron-DeepSpeed__examples__ds_config.json": [("O001", "/zero_optimization/offload_param")],
}
NOTED_HF = {
    # bf16 true AND fp16 "auto": latent conflict when the Trainer enables fp16
    "OpenAccess-AI-Collective__axolotl__deepspeed_configs__zero3_bf16.json": [("P001", "/fp16/enabled")],
}


def _well_formed(f, name: str) -> None:
    """One finding as a user sees it: a registered code, a severity, a JSON pointer into the file,
    a one-line message, and a position when the pointer names a key."""
    d = f.to_dict()
    assert f.code in RULES, (name, d)  # `ds-advisor explain CODE` works for it
    assert f.severity in ("error", "warning", "info"), (name, d)
    assert f.pointer == "" or f.pointer.startswith("/"), (name, d)
    assert f.message.strip() and "\n" not in f.message, (name, d)
    assert "Traceback" not in f.message + f.fix, (name, d)
    if f.line is not None:
        assert f.line >= 1 and (f.column is None or f.column >= 1), (name, d)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("hf", [False, True])
def test_every_file_lints(path, hf):
    """Every corpus file loads (none is unreadable: the loader reads HJSON, YAML-ish JSON and
    Python literals) and lints at every world size without an exception; every finding is well formed."""
    loaded = load_config(str(path))
    for ws in (None, 1, 8):
        for f in lint_config(loaded, world_size=ws, hf=hf):
            _well_formed(f, path.name)


def test_cli_lints_the_corpus():
    """The whole corpus through the CLI: no traceback, exit 1 (it holds real mistakes, not bad
    input: 2 would mean a file could not be read), one entry per file, and the same findings the
    function gives for each file."""
    p = run_cli(["lint", str(CORPUS), "--format", "json"])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    assert p.returncode == 1, (p.returncode, p.stderr[-1000:])
    out = json.loads(p.stdout)
    by_name = {Path(f["file"]).name: f for f in out["files"]}
    assert set(by_name) == {f.name for f in FILES}
    # GPT-NeoX's .yml configs are read as DeepSpeed reads every config (HJSON: DeepSpeedConfig.__init__)
    assert out["summary"]["skipped"] == 0 and not [n for n, f in by_name.items() if f.get("skipped")], out["summary"]
    for f in FILES:
        want = sorted((x.code, x.pointer) for x in lint_config(load_config(str(f))))
        assert sorted((x["code"], x["pointer"]) for x in by_name[f.name]["findings"]) == want, f.name


def test_manifest_notes_are_all_checked():
    """Every MANIFEST.tsv row whose note names a MISTAKE, a DEPRECATED or a LEGACY key has its
    expected findings here (NOTED, lint rules) or in test_cases_schema.CORPUS_EXPECT (schema)."""
    from tests.test_cases_schema import CORPUS_EXPECT

    rows = [line.split("\t") for line in (CORPUS / "MANIFEST.tsv").read_text().splitlines()[1:] if line.strip()]
    flagged = {r[0] for r in rows if any(w in r[5] for w in ("MISTAKE", "DEPRECATED", "LEGACY"))}
    assert len(flagged) >= 15, flagged
    unchecked = flagged - set(NOTED) - set(NOTED_HF) - set(CORPUS_EXPECT)
    assert not unchecked, f"MANIFEST notes a mistake no test checks: {sorted(unchecked)}"


@pytest.mark.parametrize("name", sorted(NOTED))
def test_manifest_mistakes_found(name):
    got = {(f.code, f.pointer) for f in lint_config(load_config(str(CORPUS / name)))}
    missing = [w for w in NOTED[name] if w not in got]
    assert not missing, f"{name}: missing {missing}; got {sorted(got)}"


@pytest.mark.parametrize("name", sorted(NOTED_HF))
def test_manifest_mistakes_found_hf(name):
    got = {(f.code, f.pointer) for f in lint_config(load_config(str(CORPUS / name)), hf=True)}
    assert all(w in got for w in NOTED_HF[name]), sorted(got)


def test_noted_files_exist_in_manifest():
    names = {line.split("\t")[0] for line in (CORPUS / "MANIFEST.tsv").read_text().splitlines()[1:] if line}
    assert set(NOTED) | set(NOTED_HF) <= names


def test_hf_silences_auto_rules_on_the_corpus():
    rc, out = run_json(["lint", str(CORPUS), "--hf", "--format", "json"])
    codes = {f["code"] for file in out["files"] for f in file["findings"]}
    assert not codes & {"A001", "A002", "A003"}, codes
