"""accelerate config files, told by their content, through every command (case C14 and friends).

Expected values: accelerate's own reading of the file (``DeepSpeedPlugin`` fields from
``num_processes``, ``deepspeed_config.zero_stage`` ...) and the hand formulas of case C14:
ZeRO-2 with the optimizer on the CPU at world size 8 holds the fp32 master partition
4 B x 7e9 / 8 = 3.5e9 bytes and the Adam moments 8 B x 7e9 / 8 = 7e9 bytes on the host per rank.
"""

from __future__ import annotations

import json
import shutil

from tests.conftest import CASES, run_json

C14 = CASES / "C14-accelerate-json"


def _findings(out):
    return [f for file in out["files"] for f in file["findings"]]


def test_c14_lint_reads_accelerate_json_without_deepspeed_noise():
    expect = json.loads((C14 / "expect.json").read_text())
    rc, out = run_json(expect["command"], cwd=C14)
    assert rc == expect["exit_code"], out
    assert out["files"][0]["kind"] == "accelerate"
    got = _findings(out)
    assert got == expect["findings"], got
    for p in expect["absent"]:
        assert not [f for f in got if f["pointer"] == p]


def test_c14_estimate_takes_stage_precision_offload_world_size_from_the_file():
    rc, out = run_json(["estimate", "accelerate.json", "--params", "7000000000", "--format", "json"], cwd=C14)
    assert out["cluster"]["world_size"] == 8, out["cluster"]
    host = out["ranks"][0]["tiers"]["host"]
    assert host["master_weights"] == 4 * 7_000_000_000 // 8
    assert host["optimizer_states"] == 8 * 7_000_000_000 // 8
    acc = out["ranks"][0]["tiers"]["accelerator"]
    assert acc["parameters"] == 2 * 7_000_000_000  # bf16 (mixed_precision), ZeRO-2 keeps the full 16-bit copy
    rc2, eq = run_json(["estimate", "equivalent_deepspeed.json", "--params", "7000000000", "--world-size", "8",
                        "--format", "json"], cwd=C14)
    assert [r["tiers"] for r in out["ranks"]] == [r["tiers"] for r in eq["ranks"]]


def test_accelerate_yaml_form_same_as_json(tmp_path):
    d = json.loads((C14 / "accelerate.json").read_text())
    import yaml
    (tmp_path / "accelerate.yaml").write_text(yaml.safe_dump(d))
    _, y = run_json(["estimate", "accelerate.yaml", "--params", "7000000000", "--format", "json"], cwd=tmp_path)
    _, j = run_json(["estimate", "accelerate.json", "--params", "7000000000", "--format", "json"], cwd=C14)
    assert [r["tiers"] for r in y["ranks"]] == [r["tiers"] for r in j["ranks"]]


def test_accelerate_launch_error_and_named_config_file(tmp_path):
    """accelerate refuses zero_stage next to deepspeed_config_file (DeepSpeedPlugin.__post_init__);
    the named file is linted as the Trainer/accelerate reads it (--hf: "auto" is not an error)."""
    (tmp_path / "acc.yaml").write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: "
                                       "ds.json\n  zero_stage: 3\nnum_processes: 8\n")
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 3}}')
    rc, out = run_json(["lint", "acc.yaml", "--format", "json"], cwd=tmp_path)
    assert rc == 1
    acc = next(f for f in out["files"] if f["file"].endswith("acc.yaml"))
    assert [f["code"] for f in acc["findings"]] == ["H004"]
    ds = next(f for f in out["files"] if f["file"].endswith("ds.json"))
    assert not [f for f in ds["findings"] if f["code"].startswith("A")], ds


def test_folder_lint_skips_files_that_are_not_configs(tmp_path):
    shutil.copy(C14 / "accelerate.json", tmp_path)
    shutil.copy(C14 / "equivalent_deepspeed.json", tmp_path)
    (tmp_path / "package.json").write_text('{"name": "x", "version": "1.0.0"}')
    (tmp_path / "ci.yml").write_text("name: ci\non: push\n")
    (tmp_path / "multi_gpu.yaml").write_text("distributed_type: MULTI_GPU\nnum_processes: 8\n")
    rc, out = run_json(["lint", str(tmp_path), "--format", "json"])
    by = {f["file"].rsplit("/", 1)[-1]: f for f in out["files"]}
    assert rc == 0, out
    assert {n for n, f in by.items() if f.get("skipped")} == {"package.json", "ci.yml", "multi_gpu.yaml"}
    assert "DeepSpeed" in by["multi_gpu.yaml"]["skipped"]
    assert by["accelerate.json"]["kind"] == "accelerate" and not by["accelerate.json"].get("skipped")
    assert out["summary"]["skipped"] == 3
    # named explicitly, ci.yml is read as DeepSpeed reads any file (HJSON: {"name": "ci", "on": "push"}),
    # so its keys are unknown-key errors (exit 1); a non-DeepSpeed accelerate config is bad input (exit 2)
    rc2, out2 = run_json(["lint", str(tmp_path / "ci.yml"), "--format", "json"])
    assert rc2 == 1 and {"/name", "/on"} <= {f["pointer"] for f in _findings(out2)}, out2
    rc3, _ = run_json(["lint", str(tmp_path / "multi_gpu.yaml"), "--format", "json"])
    assert rc3 == 2


def test_check_takes_world_size_from_num_processes_and_says_so():
    """check on an accelerate file: world size 8 is the file's num_processes (accelerate launch
    starts that many ranks), labelled as the file's, not as a --world-size flag; the flag wins.
    (run_cli drops WORLD_SIZE / SLURM_NTASKS from the environment.)"""
    _, out = run_json(["check", "accelerate.json", "--params", "7000000000", "--host-memory", "1TB",
                       "--gpu-memory", "80GB", "--format", "json"], cwd=C14)
    ws = out["launch"]["world_size"]
    assert ws["value"] == 8 and "num_processes" in ws["source"] and "accelerate.json" in ws["source"], ws
    assert "--world-size" not in ws["source"]
    assert not [f for f in out["findings"] if f["pointer"] in ("/compute_environment", "/deepspeed_config")]
    _, out4 = run_json(["check", "accelerate.json", "--params", "7000000000", "--world-size", "4", "--host-memory",
                        "1TB", "--gpu-memory", "80GB", "--format", "json"], cwd=C14)
    assert out4["launch"]["world_size"] == {"value": 4, "source": "--world-size"}


def test_folder_lint_output_matches_the_published_schema(tmp_path):
    import jsonschema
    from pathlib import Path
    shutil.copy(C14 / "accelerate.json", tmp_path)
    (tmp_path / "package.json").write_text('{"name": "x"}')
    _, out = run_json(["lint", str(tmp_path), "--format", "json"])
    schema = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "lint-output.schema.json").read_text())
    jsonschema.validate(out, schema)
