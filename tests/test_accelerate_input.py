"""accelerate config files, told by their content, through every command (case C14 and friends).

Expected values: accelerate's own reading of the file (``DeepSpeedPlugin`` fields from
``num_processes``, ``deepspeed_config.zero_stage`` ...) and the hand formulas of case C14:
ZeRO-2 with the optimizer on the CPU at world size 8 holds the fp32 master partition
4 B x 7e9 / 8 = 3.5e9 bytes and the Adam moments 8 B x 7e9 / 8 = 7e9 bytes on the host per rank.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from tests.conftest import CASES, run_cli, run_json

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


# -- issue 19 follow-ups: the launch shape, accelerate's own allowed values -----------------------

def _accelerate_reads(path):
    """(num_processes, num_machines, mixed_precision, deepspeed_config) as accelerate's own
    config loader reads the file (accelerate/commands/config/config_args.py)."""
    from accelerate.commands.config.config_args import load_config_from_file
    c = load_config_from_file(str(path))
    return c.num_processes, c.num_machines, c.mixed_precision, c.deepspeed_config


def test_lint_batch_triple_of_the_named_file_uses_the_launch_world_size(tmp_path):
    """accelerate launch starts num_processes // num_machines per machine (accelerate/utils/launch.py
    prepare_deepspeed_cmd_env: --num_gpus / nproc_per_node), so the named DeepSpeed file's batch triple
    is checked at that world size: 16 = 4 x 1 x W needs W = 4, the file launches 8 (or 4 x 2)."""
    (tmp_path / "ds.json").write_text('{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, '
                                      '"gradient_accumulation_steps": 1, "zero_optimization": {"stage": 2}}')
    for name, body in (("one.yaml", "num_processes: 8\n"), ("two.yaml", "num_processes: 8\nnum_machines: 2\n")):
        (tmp_path / name).write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n"
                                     + body)
        nproc, nmach, _, _ = _accelerate_reads(tmp_path / name)
        world = (nproc // nmach) * nmach
        rc, out = run_json(["lint", name, "--format", "json"], cwd=tmp_path)
        ds = next(f for f in out["files"] if f["file"].endswith("ds.json"))
        b001 = [f for f in ds["findings"] if f["code"] == "B001"]
        assert rc == 1 and b001 and b001[0]["severity"] == "error", out
        assert f"{4 * 1 * world}" in b001[0]["message"] and name in b001[0]["message"], b001
    # --world-size wins: at 4 the triple holds
    rc, out = run_json(["lint", "one.yaml", "--world-size", "4", "--format", "json"], cwd=tmp_path)
    assert not [f for f in _findings(out) if f["code"] == "B001"], out


def test_mixed_precision_is_checked_against_accelerates_precision_types(tmp_path):
    """accelerate launch: PrecisionType(args.mixed_precision.lower()) (utils/launch.py); a value it
    refuses is an H004 error at /mixed_precision in lint and exit 2 (naming file, key, allowed values)
    in estimate -- never a silent fp32 estimate."""
    from accelerate.utils import PrecisionType
    allowed = PrecisionType.list()
    for value, ok in [(v, True) for v in allowed] + [("BF16", True), ("bf17", False), ("fp32", False)]:
        try:
            PrecisionType(value.lower())
            accel_ok = True
        except ValueError:
            accel_ok = False
        assert accel_ok == ok
        (tmp_path / "acc.yaml").write_text(f"distributed_type: DEEPSPEED\nmixed_precision: '{value}'\nnum_processes: 2\n"
                                           "deepspeed_config:\n  zero_stage: 2\n")
        assert _accelerate_reads(tmp_path / "acc.yaml")[2] == value
        rc, out = run_json(["lint", "acc.yaml", "--format", "json"], cwd=tmp_path)
        bad = [f for f in _findings(out) if f["pointer"] == "/mixed_precision"]
        assert (rc, bool(bad)) == ((0, False) if accel_ok else (1, True)), (value, out)
        if not accel_ok:
            assert bad[0]["code"] == "H004" and all(v in bad[0]["message"] for v in allowed)
            r = run_cli(["estimate", "acc.yaml", "--params", "1000000"], cwd=tmp_path)
            rc2, err = r.returncode, r.stderr
            assert rc2 == 2 and "acc.yaml: mixed_precision" in err and value in err and "bf16" in err, err
    # estimate takes bf16 from the file: 2 B per parameter on the accelerator at ZeRO-2
    (tmp_path / "acc.yaml").write_text("distributed_type: DEEPSPEED\nmixed_precision: BF16\nnum_processes: 2\n"
                                       "deepspeed_config:\n  zero_stage: 2\n")
    _, est = run_json(["estimate", "acc.yaml", "--params", "1000000", "--format", "json"], cwd=tmp_path)
    assert est["ranks"][0]["tiers"]["accelerator"]["parameters"] == 2 * 1_000_000


def test_unquoted_no_is_refused_as_accelerate_refuses_it(tmp_path):
    """YAML reads `mixed_precision: no` as false; accelerate then calls False.lower() and fails."""
    (tmp_path / "acc.yaml").write_text("distributed_type: DEEPSPEED\nmixed_precision: no\nnum_processes: 2\n")
    assert _accelerate_reads(tmp_path / "acc.yaml")[2] is False
    rc, out = run_json(["lint", "acc.yaml", "--format", "json"], cwd=tmp_path)
    (f,) = [f for f in _findings(out) if f["pointer"] == "/mixed_precision"]
    assert rc == 1 and "'no'" in f["fix"], f


def test_bad_zero_stage_names_file_key_and_allowed_values(tmp_path):
    """DeepSpeedPlugin: zero_stage = int(os.environ["ACCELERATE_DEEPSPEED_ZERO_STAGE"]) of str(value),
    then DeepSpeed's ZeroStageEnum (0-3). Lint: an H004 finding at the key, not "unreadable";
    estimate: exit 2 with the file, the key, the problem and the allowed values."""
    import os
    from deepspeed.runtime.zero.config import ZeroStageEnum
    allowed = sorted(int(s) for s in ZeroStageEnum)
    for z in ("5", "three", "2.0", "-1"):
        try:
            stage = int(str(z))  # what DeepSpeedPlugin.__post_init__ does with the exported variable
            refused = stage not in allowed
        except ValueError:
            refused = True
        (tmp_path / "acc.yaml").write_text(f"distributed_type: DEEPSPEED\nnum_processes: 2\n"
                                           f"deepspeed_config:\n  zero_stage: {z}\n")
        rc, out = run_json(["lint", "acc.yaml", "--format", "json"], cwd=tmp_path)
        assert out["summary"].get("unreadable", 0) == 0 and not out["files"][0].get("error"), out
        hits = [f for f in _findings(out) if f["pointer"] == "/deepspeed_config/zero_stage"]
        assert refused and rc == 1 and hits[0]["code"] == "H004", (z, out)
        assert "0, 1, 2, 3" in hits[0]["message"]
        r = run_cli(["estimate", "acc.yaml", "--params", "1000000"], cwd=tmp_path)
        rc2, err = r.returncode, r.stderr
        assert rc2 == 2 and "acc.yaml: deepspeed_config.zero_stage" in err and "0, 1, 2, 3" in err, err
    assert os.path.exists(tmp_path / "acc.yaml")


def test_broken_accelerate_yaml_is_a_yaml_parse_error_with_file_line_and_column(tmp_path):
    """An accelerate config YAML that does not parse (an unclosed flow list) was reported as "not
    valid JSON/HJSON" (the fallback to DeepSpeed's own reading answered instead): every command
    now names the file and the YAML error at PyYAML's own problem mark (line and column, 1-based),
    exit 2, one line."""
    import yaml
    text = ("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
            "  zero_stage: 2\n  offload_optimizer_device: [cpu, none\nmixed_precision: bf16\nnum_processes: 2\n")
    (tmp_path / "acc.yaml").write_text(text)
    try:
        yaml.safe_load(text)
        raise AssertionError("PyYAML read the broken file")
    except yaml.MarkedYAMLError as e:
        where = f"acc.yaml:{e.problem_mark.line + 1}:{e.problem_mark.column + 1}: "
    for cmd in (["lint", "acc.yaml"], ["estimate", "acc.yaml", "--params", "1000000"], ["resolve", "acc.yaml"],
                ["check", "acc.yaml", "--params", "1000000"]):
        r = run_cli(cmd, cwd=tmp_path)
        err = (r.stdout + r.stderr).strip()
        assert r.returncode == 2, (cmd, err)
        line = [x for x in err.splitlines() if where in x]
        assert line and "YAML" in line[0] and "JSON" not in err, (cmd, where, err)
        assert "Traceback" not in err


def test_every_command_takes_the_job_shape_from_one_place(tmp_path):
    """One accelerate file, num_processes 8 on num_machines 2: estimate, check and checkpoint all model
    world size 8 on 2 nodes of 4 ranks (accelerate's nproc_per_node = 8 // 2), and checkpoint's
    cluster MTBF is the node MTBF / those 2 nodes -- with or without a --hardware spec that names no node
    count or names those 2 nodes. A spec that names other nodes (dgx-h100:8: 8 nodes) contradicts
    num_machines: exit 2 in every command (fixb23; it had been read as 2 of the spec's 8 nodes)."""
    (tmp_path / "acc.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 8\nnum_machines: 2\n"
                                       "mixed_precision: bf16\ndeepspeed_config:\n  zero_stage: 3\n")
    nproc, nmach, _, _ = _accelerate_reads(tmp_path / "acc.yaml")
    per, nodes = nproc // nmach, nmach
    base = ["--params", "1000000", "--format", "json"]
    _, est = run_json(["estimate", "acc.yaml", *base], cwd=tmp_path)
    assert est["cluster"]["world_size"] == per * nodes
    _, chk = run_json(["check", "acc.yaml", *base, "--host-memory", "1TB", "--gpu-memory", "80GB"], cwd=tmp_path)
    assert (chk["launch"]["world_size"]["value"], chk["launch"]["gpus_per_node"]["value"],
            chk["launch"]["num_nodes"]["value"]) == (per * nodes, per, nodes), chk["launch"]
    for hw in ([], ["--hardware", "dgx-h100"], ["--hardware", f"dgx-h100:{nodes}"]):
        _, cp = run_json(["checkpoint", "acc.yaml", *base, "--node-mtbf-hours", "1000", "--write-bandwidth", "1GB/s",
                          *hw], cwd=tmp_path)
        assert cp["world_size"] == per * nodes and cp["nodes"] == nodes, cp
        assert abs(cp["resilience"]["cluster_mtbf_s"] - 1000 * 3600 / nodes) < 1e-6, cp
    for cmd in ("estimate", "check", "checkpoint"):
        p = run_cli([cmd, "acc.yaml", *base, "--hardware", "dgx-h100:8"], cwd=tmp_path)
        line, = p.stderr.strip().splitlines()
        assert p.returncode == 2 and "dgx-h100:8" in line and "num_machines" in line and not p.stdout, (cmd, p.stderr)
    # a DeepSpeed file with the spec alone: the spec's 8 nodes x 8 GPUs are the job, MTBF / 8
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}')
    _, cp = run_json(["checkpoint", "ds.json", *base, "--node-mtbf-hours", "1000", "--write-bandwidth", "1GB/s",
                      "--hardware", "dgx-h100:8"], cwd=tmp_path)
    assert (cp["world_size"], cp["nodes"]) == (64, 8), cp
    # ... with --world-size 16 on a spec that names no node count, the job's ranks occupy 2 of its nodes;
    # on its 8 named nodes that is 2 ranks per node (--gpus-per-node 2), and without it a contradiction
    _, cp = run_json(["checkpoint", "ds.json", *base, "--node-mtbf-hours", "1000", "--write-bandwidth", "1GB/s",
                      "--hardware", "dgx-h100", "--world-size", "16"], cwd=tmp_path)
    assert (cp["world_size"], cp["nodes"]) == (16, 2), cp
    _, cp = run_json(["checkpoint", "ds.json", *base, "--node-mtbf-hours", "1000", "--write-bandwidth", "1GB/s",
                      "--hardware", "dgx-h100:8", "--world-size", "16", "--gpus-per-node", "2"], cwd=tmp_path)
    assert (cp["world_size"], cp["nodes"]) == (16, 8), cp
    p = run_cli(["checkpoint", "ds.json", *base, "--hardware", "dgx-h100:8", "--world-size", "16"], cwd=tmp_path)
    assert p.returncode == 2 and "--gpus-per-node 2" in p.stderr, p.stderr


def test_set_on_an_accelerate_file_sets_keys_of_the_deepspeed_config_it_builds(tmp_path):
    """--set on an accelerate file names keys of the DeepSpeed config accelerate starts from (the
    deepspeed_config_file's dict, else the one built from the YAML fields), set before "auto" is
    filled: the same estimate as the equivalent DeepSpeed file with that --set. A key of the
    accelerate file itself (accelerate's ClusterConfig fields) is refused, exit 2, one line."""
    from accelerate.commands.config.config_args import ClusterConfig
    (tmp_path / "acc.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 8\nmixed_precision: bf16\n"
                                       "deepspeed_config:\n  zero_stage: 2\n")
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}, '
                                      '"bf16": {"enabled": true}}')
    s = ["--set", "zero_optimization.stage=3", "--set", "zero_optimization.offload_optimizer.device=cpu"]
    base = ["--params", "100000000", "--format", "json"]
    _, acc = run_json(["estimate", "acc.yaml", *base, *s], cwd=tmp_path)
    _, ds = run_json(["estimate", "ds.json", *base, "--world-size", "8", *s], cwd=tmp_path)
    assert acc["assumptions"]["zero_stage"] == 3 and acc["assumptions"]["offload_optimizer"]["effective"] == "cpu"
    # the same class tables; accelerate's launch is the HF path, where rank 0 alone reads the checkpoint
    # at load under ZeRO-3 (timeline.hf_state_dict_entries), so it is a role of its own there
    assert [r["tiers"] for r in acc["ranks"]] == [ds["ranks"][0]["tiers"]] * 2
    assert [r["rank_ranges"] for r in acc["ranks"]] == [[[0, 0]], [[1, 7]]]
    for key in ("mixed_precision", "num_processes", "deepspeed_config.zero_stage"):
        assert key.split(".")[0] in ClusterConfig.__dataclass_fields__
        for cmd in (["estimate", "acc.yaml", "--params", "1000000"], ["lint", "acc.yaml"]):
            r = run_cli([*cmd, "--set", f"{key}=1"], cwd=tmp_path)
            assert r.returncode == 2 and r.stderr.startswith("ds-advisor: --set") and "accelerate" in r.stderr, r.stderr
            assert r.stderr.count("\n") == 1


def test_lint_set_error_is_one_usage_line(tmp_path):
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 1}')
    r = run_cli(["lint", "ds.json", "--set", "zero_optimization.stage=9"], cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("ds-advisor: --set 'zero_optimization.stage=9'"), r
    assert "unreadable" not in r.stdout


def test_null_nvme_path_accelerate_writes_is_no_note(tmp_path):
    """accelerate's DeepSpeedPlugin builds offload_*.nvme_path None for a device other than nvme;
    DeepSpeed's nvme_path is Optional (default None): nothing to note, once or twice."""
    from deepspeed.runtime.zero.offload_config import DeepSpeedZeroOffloadOptimizerConfig
    assert DeepSpeedZeroOffloadOptimizerConfig(device="cpu", nvme_path=None).nvme_path is None
    (tmp_path / "acc.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n"
                                       "  zero_stage: 3\n  offload_optimizer_device: cpu\n")
    _, out = run_json(["estimate", "acc.yaml", "--params", "1000000", "--format", "json"], cwd=tmp_path)
    assert not [n for n in out["assumptions"]["notes"] if "nvme_path" in n["pointer"]], out["assumptions"]["notes"]


def test_folder_lint_skips_json_that_is_not_an_object(tmp_path):
    """A JSON array or string in a folder cannot be a DeepSpeed config (DeepSpeedConfig needs a
    dict): skipped and said so, like package.json; named alone it stays bad input (exit 2)."""
    shutil.copy(C14 / "equivalent_deepspeed.json", tmp_path)
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "str.json").write_text('"x"')
    rc, out = run_json(["lint", str(tmp_path), "--format", "json"])
    by = {f["file"].rsplit("/", 1)[-1]: f for f in out["files"]}
    assert rc == 0 and by["list.json"]["skipped"] and by["str.json"]["skipped"], out
    assert run_cli(["lint", str(tmp_path / "list.json")]).returncode == 2


def test_storage_line_never_writes_more_per_day_than_the_drive_can(tmp_path):
    """A step time shorter than the tier needs to move one step's NVMe traffic (case C10: ~1.07e11 B
    written per step) would print writes per day above the drive's bandwidth x 86,400 s. The Storage
    figures are then at the step time the traffic implies (writes at the preset's write bandwidth +
    reads at its read bandwidth) and the line says why; a long step is computed as given."""
    presets = json.loads((Path(__file__).resolve().parents[1] / "advisor" / "data" / "hardware_presets.json").read_text())
    c10 = CASES / "C10-nvme-writes-per-step"
    for st in (1e-3,):  # the smallest --step-time accepted (validation.MIN_SECONDS)
        rc, out = run_json(["estimate", "config.json", "--params", "6700000000", "--world-size", "1", "--step-time",
                            str(st), "--hardware", "dgx-h100", "--format", "json"], cwd=c10)
        (ln,) = [x for x in out["movement"]["endurance"] if x["write_bytes_per_step"]]
        tier = next(t for t in presets["systems"]["dgx-h100"]["storage"] if t["name"] == ln["tier"])
        implied = ln["write_bytes_per_step"] / tier["write_bytes_per_s"] + ln["read_bytes_per_step"] / tier["read_bytes_per_s"]
        assert ln["requested_step_time_s"] == st and abs(ln["step_time_s"] - implied) < 1e-9 * implied, ln
        assert ln["write_bytes_per_day"] <= tier["write_bytes_per_s"] * 86400, ln
        assert abs(ln["write_bytes_per_day"] - ln["write_bytes_per_step"] * 86400 / implied) < 1e-6 * ln["write_bytes_per_day"]
    text = run_cli(["estimate", "config.json", "--params", "6700000000", "--world-size", "1", "--step-time", "1e-3",
                    "--hardware", "dgx-h100"], cwd=c10).stdout
    line = " ".join(text.split("\nStorage", 1)[1].split("\n")[:5]).replace("  ", " ")
    assert "step time its NVMe traffic implies" in " ".join(line.split()) and "0.001 s" in line, line
    _, out = run_json(["estimate", "config.json", "--params", "6700000000", "--world-size", "1", "--step-time", "1e6",
                       "--hardware", "dgx-h100", "--format", "json"], cwd=c10)
    (ln,) = [x for x in out["movement"]["endurance"] if x["write_bytes_per_step"]]
    assert ln["requested_step_time_s"] is None and ln["step_time_s"] == 1e6


def test_yaml_in_a_json_accelerate_file_is_an_error_naming_the_file(tmp_path):
    """accelerate's load_config_from_file reads a path ending in ".json" with json.load
    (accelerate/commands/config/config_args.py), so YAML content there fails at launch: every
    command refuses it (exit 2) naming the file; the same text named .yaml is read."""
    import pytest
    text = "distributed_type: DEEPSPEED\nnum_processes: 8\ndeepspeed_config:\n  zero_stage: 3\n"
    (tmp_path / "acc.json").write_text(text)
    (tmp_path / "acc.yaml").write_text(text)
    with pytest.raises(ValueError):  # json.JSONDecodeError, accelerate's own reading
        _accelerate_reads(tmp_path / "acc.json")
    assert _accelerate_reads(tmp_path / "acc.yaml")[0] == 8
    for cmd in (["lint", "acc.json"], ["resolve", "acc.json"], ["estimate", "acc.json", "--params", "1000000"]):
        p = run_cli(cmd, cwd=tmp_path)
        assert p.returncode == 2, (cmd, p.stdout, p.stderr)
        assert "acc.json" in p.stdout + p.stderr and "json.load" in p.stdout + p.stderr, (cmd, p.stdout, p.stderr)
    rc, out = run_json(["estimate", "acc.yaml", "--params", "1000000", "--format", "json"], cwd=tmp_path)
    assert rc in (0, 1) and out["cluster"]["world_size"] == 8


def test_deepspeed_config_file_is_found_relative_to_the_cwd_as_accelerate_does(tmp_path, monkeypatch):
    """accelerate exports deepspeed_config_file as ACCELERATE_DEEPSPEED_CONFIG_FILE and
    HfDeepSpeedConfig (accelerate/utils/deepspeed.py) opens it with os.path.exists / open: relative
    to the launch's working directory, not the YAML's folder. Run from elsewhere, accelerate
    raises and so do we (exit 2), saying where we looked; run from the YAML's folder, both read it."""
    import pytest
    from accelerate.utils.deepspeed import HfDeepSpeedConfig

    sub = tmp_path / "conf"
    sub.mkdir()
    (sub / "ds.json").write_text('{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}')
    (sub / "acc.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 2\n"
                                  "deepspeed_config:\n  deepspeed_config_file: ds.json\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="Expected a string path to an existing deepspeed config"):
        HfDeepSpeedConfig("ds.json")
    for cmd in (["lint", "conf/acc.yaml"], ["resolve", "conf/acc.yaml"],
                ["estimate", "conf/acc.yaml", "--params", "1000000"]):
        p = run_cli(cmd, cwd=tmp_path)
        said = p.stdout + p.stderr
        assert p.returncode == 2, (cmd, said)
        assert str(tmp_path / "ds.json") in said and "relative to" in said and "acc.yaml" in said, (cmd, said)
    monkeypatch.chdir(sub)
    assert HfDeepSpeedConfig("ds.json").config["zero_optimization"]["stage"] == 2
    rc, out = run_json(["estimate", "acc.yaml", "--params", "1000000", "--format", "json"], cwd=sub)
    assert rc in (0, 1) and out["cluster"]["world_size"] == 2


def test_empty_deepspeed_config_file_is_refused_and_none_means_no_file(tmp_path):
    """accelerate launch exports deepspeed_config_file whenever it is not None
    (accelerate/utils/launch.py prepare_deepspeed_cmd_env), so "" reaches HfDeepSpeedConfig, which
    raises; DeepSpeedPlugin.__post_init__ reads the string "none" as no file and builds the config
    from the accelerate fields. lint says H004 for "", estimate exits 2; "none" estimates the fields."""
    import pytest
    from accelerate.utils import DeepSpeedPlugin
    from accelerate.utils.deepspeed import HfDeepSpeedConfig

    with pytest.raises(ValueError, match="Expected a string path to an existing deepspeed config"):
        HfDeepSpeedConfig("")
    built = DeepSpeedPlugin(hf_ds_config="none", zero_stage=1).deepspeed_config
    assert built["zero_optimization"]["stage"] == 1
    head = "distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n"
    (tmp_path / "e.yaml").write_text(head + '  deepspeed_config_file: ""\n')
    (tmp_path / "n.yaml").write_text(head + "  deepspeed_config_file: none\n  zero_stage: 1\n")
    p = run_cli(["lint", "--hf", "e.yaml", "--format", "json"], cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    found = {(f["code"], f["pointer"]) for f in json.loads(p.stdout)["files"][0]["findings"]}
    assert ("H004", "/deepspeed_config/deepspeed_config_file") in found, found
    p = run_cli(["estimate", "e.yaml", "--params", "1000000"], cwd=tmp_path)
    assert p.returncode == 2 and "deepspeed_config_file" in p.stderr and "empty" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = run_cli(["lint", "--hf", "n.yaml"], cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    rc, out = run_json(["estimate", "n.yaml", "--params", "1000000", "--format", "json"], cwd=tmp_path)
    assert rc in (0, 1) and out["assumptions"]["zero_stage"] == built["zero_optimization"]["stage"], out["assumptions"]


def test_nvme_offload_without_a_path_in_an_accelerate_file_is_one_o003_in_lint_and_check(tmp_path, monkeypatch):
    """accelerate's DeepSpeedPlugin writes nvme_path "none" (its placeholder) when an offload
    device is nvme and no *_nvme_path is given (accelerate/utils/dataclasses.py __post_init__):
    DeepSpeed would swap into ./none. lint reports it (O003, once per block), and check reports the
    same O003 and no K102 for the same path: one rule, one finding."""
    from accelerate.utils import DeepSpeedPlugin

    for k, v in (("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3"), ("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "nvme"),
                 ("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "cpu")):
        monkeypatch.setenv(k, v)
    for k in ("ACCELERATE_DEEPSPEED_CONFIG_FILE", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH"):
        monkeypatch.delenv(k, raising=False)
    ds = DeepSpeedPlugin().deepspeed_config["zero_optimization"]
    assert ds["offload_optimizer"]["nvme_path"] == "none"
    (tmp_path / "acc.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 1\ndeepspeed_config:\n"
                                       "  zero_stage: 3\n  offload_optimizer_device: nvme\n"
                                       "  offload_param_device: cpu\n  zero3_save_16bit_model: true\n")
    # DeepSpeed accepts the placeholder (issue #19, newcomer 4): its config reads Path("none") and the
    # swapper joins and makedirs under it, so it is a warning and estimate/check still judge the job
    from deepspeed.runtime.zero.offload_config import DeepSpeedZeroOffloadOptimizerConfig
    assert str(DeepSpeedZeroOffloadOptimizerConfig(**ds["offload_optimizer"]).nvme_path) == "none"
    rc, out = run_json(["lint", "acc.yaml", "--format", "json"], cwd=tmp_path)
    o3 = [f for f in _findings(out) if f["code"] == "O003"]
    assert len(o3) == 1 and o3[0]["pointer"] == "/deepspeed_config/offload_optimizer_device", out
    assert o3[0]["severity"] == "warning" and "DeepSpeed accepts it" in o3[0]["message"]
    assert "offload_optimizer_nvme_path" in o3[0]["fix"]
    _, chk = run_json(["check", "acc.yaml", "--params", "1000000", "--format", "json"], cwd=tmp_path)
    codes = [f["code"] for f in chk["findings"]]
    assert codes.count("O003") == 1 and "K102" not in codes, codes
    assert chk["tiers"], chk  # not refused: a verdict per tier


def test_lint_hf_and_resolve_give_the_same_findings_for_an_accelerate_file(tmp_path):
    """`lint --hf` and `resolve` read an accelerate file by one path (read_input, lint_accelerate):
    the same H findings, once each -- for a YAML whose deepspeed_config_file disagrees with the
    Trainer (the mismatch transformers' own HfTrainerDeepSpeedConfig raises on) and for one
    built from the YAML's fields at ZeRO-3 without zero3_save_16bit_model (accelerate's
    get_state_dict raises ValueError there: H008)."""
    import copy
    import types

    from transformers import TrainingArguments
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    ds = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
          "zero_optimization": {"stage": 3}}
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    (tmp_path / "file.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 8\ndeepspeed_config:\n"
                                        "  deepspeed_config_file: ds.json\n")
    (tmp_path / "fields.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 8\ndeepspeed_config:\n"
                                          "  zero_stage: 3\n  zero3_save_16bit_model: false\n")
    ns = types.SimpleNamespace(world_size=8, per_device_train_batch_size=8, gradient_accumulation_steps=1,
                               auto_find_batch_size=False, max_grad_norm=1.0, learning_rate=5e-5, adam_beta1=0.9,
                               adam_beta2=0.999, adam_epsilon=1e-8, weight_decay=0.0, save_on_each_node=False,
                               fp16=False, fp16_full_eval=False, bf16=False, bf16_full_eval=False)
    c = HfTrainerDeepSpeedConfig(copy.deepcopy(ds))
    c.trainer_config_process(ns)
    assert c.mismatches == ["- ds train_micro_batch_size_per_gpu=4 vs hf per_device_train_batch_size=8"]
    want = {"file.yaml": {("H001", "/train_micro_batch_size_per_gpu"), ("H008", "/zero_optimization/stage")},
            "fields.yaml": {("H008", "/deepspeed_config/zero3_save_16bit_model")}}
    for name, expect in want.items():
        rc, out = run_json(["lint", name, "--hf", "--per-device-train-batch-size", "8", "--format", "json"],
                           cwd=tmp_path)
        linted = [(f["code"], f["pointer"]) for f in _findings(out) if f["code"].startswith("H")]
        assert sorted(linted) == sorted(expect), (name, linted)  # once each, over the YAML and its named file
        p = run_cli(["resolve", name, "--per-device-train-batch-size", "8"], cwd=tmp_path)
        # resolve prints findings in lint's form: "file[:line:col]: severity CODE /pointer: message"
        said = [m.groups() for ln in p.stderr.splitlines()
                if (m := re.match(r"^\S+: (?:error|warning|info) (H\d{3}) (/\S*): ", ln))]
        assert sorted(said) == sorted(linted), (name, p.stderr)


def _said(stderr: str) -> list[tuple[str, str, str]]:
    """resolve's findings on stderr, in lint's form: (code, pointer, line:col or '')."""
    out = []
    for ln in stderr.splitlines():
        m = re.match(r"^[^:\s]+(?::(\d+):(\d+))?: (?:error|warning|info) ([A-Z]\d{3}) (/\S*): ", ln)
        if m:
            out.append((m.group(3), m.group(4), f"{m.group(1)}:{m.group(2)}" if m.group(1) else ""))
    return sorted(out)


def _linted(out: dict) -> list[tuple[str, str, str]]:
    return sorted((f["code"], f["pointer"], f"{f['line']}:{f['column']}" if f.get("line") else "")
                  for f in _findings(out))


def test_lint_hf_and_resolve_agree_without_trainer_arguments(tmp_path):
    """`resolve` replays the Trainer with TrainingArguments' defaults for every argument not given
    (it must fill each "auto"), and `lint --hf` now does the same, through one path (lint's rules
    plus the replay): the same findings, located alike, for a DeepSpeed file and for an accelerate
    YAML built from its fields. Before, lint --hf without Trainer arguments kept only H002/H004/H006
    (no H001 for the YAML's mixed_precision bf16 against the Trainer's default bf16=False, nor for
    its gradient_accumulation_steps 4 against the default 1), and resolve missed lint's S001 for
    the DeepSpeed file's overlap_com. The bf16 mismatch is transformers' own: TrainingArguments
    with ACCELERATE_MIXED_PRECISION=bf16 and no --bf16 keeps bf16=False, and trainer_config_process
    compares it with the bf16 section accelerate's set_mixed_precision added."""
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 3,\n'
                                      ' "zero_optimization": {"stage": 2, "overlap_com": true},\n'
                                      ' "bf16": {"enabled": true}}\n')
    (tmp_path / "acc.yaml").write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n"
                                       "  gradient_accumulation_steps: 4\nmixed_precision: bf16\nnum_processes: 8\n")
    want = {"ds.json": {("S001", "/zero_optimization/overlap_com"), ("H001", "/gradient_accumulation_steps"),
                        ("H001", "/bf16/enabled")},
            "acc.yaml": {("H001", "/deepspeed_config/gradient_accumulation_steps"), ("H001", "/mixed_precision")}}
    for name, expect in want.items():
        rc, out = run_json(["lint", "--hf", name, "--format", "json"], cwd=tmp_path)
        p = run_cli(["resolve", "--hf", name], cwd=tmp_path)
        assert rc == 1 and p.returncode == 1, (name, p.stderr)
        assert _said(p.stderr) == _linted(out), (name, p.stderr, _linted(out))
        assert {(c, ptr) for c, ptr, _ in _linted(out)} == expect, (name, _linted(out))
        assert all(at for _, _, at in _linted(out)), (name, _linted(out))  # every one at the key's line:col
    # the Trainer arguments the fixes name clear the H001s, in both commands
    rc, out = run_json(["lint", "--hf", "acc.yaml", "--bf16", "--gradient-accumulation-steps", "4", "--format",
                        "json"], cwd=tmp_path)
    assert rc == 0 and not _findings(out), out
    rc, out = run_json(["lint", "--hf", "ds.json", "--bf16", "--gradient-accumulation-steps", "3", "--format", "json"],
                       cwd=tmp_path)
    assert [f["code"] for f in _findings(out)] == ["S001"], out


def test_estimate_names_accelerate_as_the_source_of_its_zero_init_choice(tmp_path, monkeypatch):
    """An accelerate YAML at ZeRO-3 without zero3_init_flag: accelerate's DeepSpeedPlugin turns
    zero.Init on (zero3_init_flag follows is_zero3() when ACCELERATE_DEEPSPEED_ZERO3_INIT is unset);
    estimate used it but labelled it "--zero-init", a flag nobody gave."""
    from accelerate.utils import DeepSpeedPlugin

    for k in ("ACCELERATE_DEEPSPEED_ZERO3_INIT", "ACCELERATE_DEEPSPEED_CONFIG_FILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    assert DeepSpeedPlugin().zero3_init_flag is True
    (tmp_path / "a.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n"
                                     "  zero_stage: 3\n  zero3_save_16bit_model: true\n")
    rc, out = run_json(["estimate", "a.yaml", "--params", "1000000", "--format", "json"], cwd=tmp_path)
    load = out["assumptions"]["load"]
    assert load["zero_init"] is True and load["zero_init_source"].startswith("accelerate: zero3_init_flag"), load


def test_h001_value_fixes_name_the_trainer_argument_and_applied_clear_it(tmp_path):
    """A YAML gradient_clipping 0.5 against the Trainer's max_grad_norm 1.0, and a DeepSpeed file's
    optimizer lr 3e-4 / weight_decay 0.1 against learning_rate 5e-5 / weight_decay 0.0: transformers'
    HfTrainerDeepSpeedConfig reports each (trainer_config_process fill_match). Each H001 points at
    the key the user edits (the YAML field, at its line) and its fix names the Trainer argument with
    the config's value; passed to lint --hf, that argument clears it."""
    import copy
    import types

    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    ds = {"zero_optimization": {"stage": 1}, "optimizer": {"type": "AdamW", "params": {"lr": 3e-4,
                                                                                       "weight_decay": 0.1}}}
    ns = types.SimpleNamespace(world_size=1, per_device_train_batch_size=8, gradient_accumulation_steps=1,
                               auto_find_batch_size=False, max_grad_norm=1.0, learning_rate=5e-5, adam_beta1=0.9,
                               adam_beta2=0.999, adam_epsilon=1e-8, weight_decay=0.0, save_on_each_node=False,
                               fp16=False, fp16_full_eval=False, bf16=False, bf16_full_eval=False)
    c = HfTrainerDeepSpeedConfig(copy.deepcopy(ds))
    c.trainer_config_process(ns)
    assert len(c.mismatches) == 2, c.mismatches
    (tmp_path / "lr.json").write_text(json.dumps(ds))
    (tmp_path / "gc.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n"
                                      "  zero_stage: 2\n  gradient_clipping: 0.5\n")
    for name, want in (("lr.json", {"/optimizer/params/lr": "--learning-rate 0.0003",
                                    "/optimizer/params/weight_decay": "--weight-decay 0.1"}),
                       ("gc.yaml", {"/deepspeed_config/gradient_clipping": "--max-grad-norm 0.5"})):
        rc, out = run_json(["lint", "--hf", name, "--format", "json"], cwd=tmp_path)
        h1 = {f["pointer"]: f for f in _findings(out) if f["code"] == "H001"}
        assert set(h1) == set(want), (name, h1)
        for ptr, flag in want.items():
            assert h1[ptr]["fix"].startswith(f"pass {flag} to the Trainer") and h1[ptr].get("line"), h1[ptr]
        flags = [a for fl in want.values() for a in fl.split()]
        rc, out = run_json(["lint", "--hf", name, *flags, "--format", "json"], cwd=tmp_path)
        assert not [f for f in _findings(out) if f["code"] == "H001"], (name, out)


def test_resolve_lints_the_named_deepspeed_config_file_as_lint_does(tmp_path):
    """An accelerate YAML naming a deepspeed_config_file with a typo (overlap_com) and an explicit
    micro-batch 4 (the Trainer's default per-device batch is 8: transformers' mismatch). `lint --hf`
    lints the named file as the Trainer reads it (S001, H001 there); `resolve` printed neither S001
    nor a line for it. Both now give the same findings, each once, located in the named file."""
    (tmp_path / "named.json").write_text('{"train_micro_batch_size_per_gpu": 4,\n "gradient_accumulation_steps": '
                                         '"auto",\n "zero_optimization": {"stage": 2, "overlap_com": true}}\n')
    (tmp_path / "f.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n"
                                     "  deepspeed_config_file: named.json\n")
    rc, out = run_json(["lint", "--hf", "f.yaml", "--format", "json"], cwd=tmp_path)
    p = run_cli(["resolve", "f.yaml"], cwd=tmp_path)
    linted = _linted(out)
    assert {(c, ptr) for c, ptr, _ in linted} == {("S001", "/zero_optimization/overlap_com"),
                                                  ("H001", "/train_micro_batch_size_per_gpu")}, linted
    assert _said(p.stderr) == linted and p.returncode == rc == 1, (p.stderr, linted)
    assert all(ln.startswith("named.json:") for ln in p.stderr.splitlines() if re.match(r"^\S+: (error|warning)", ln))


def _ds_checkpoint(root: Path, stage3_ranks: int | None) -> Path:
    """A Trainer checkpoint folder named as DeepSpeed 0.19.8 writes it (engine._get_ckpt_name /
    _get_zero_ckpt_name): ZeRO-3 one zero_pp_rank_{r}_mp_rank_00_model_states.pt per rank, stages
    0-2 one mp_rank_00_model_states.pt, and ``latest`` naming the tag."""
    d = root / "global_step10"
    d.mkdir(parents=True)
    if stage3_ranks is None:
        (d / "mp_rank_00_model_states.pt").write_text("")
        ranks = 4
    else:
        ranks = stage3_ranks
        for r in range(ranks):
            (d / f"zero_pp_rank_{r}_mp_rank_00_model_states.pt").write_text("")
    for r in range(ranks):
        (d / f"bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt").write_text("")
    (root / "latest").write_text("global_step10\n")
    return root


def test_h009_judges_an_accelerate_file_built_from_fields_as_the_config_it_builds(tmp_path):
    """Issue #19 (newcomer 2): H009 ran only on JSON configs. accelerate hands DeepSpeed
    zero_optimization.stage = deepspeed_config.zero_stage at world size num_processes x
    num_machines, so the YAML must get exactly the H009 the equivalent JSON config gets at that
    world size (the JSON path is pinned to DeepSpeed's file names in tests/rules/fixtures/H009.json)."""
    ck2 = _ds_checkpoint(tmp_path / "ck2", None)  # stage 0-2, 4 ranks
    ck3 = _ds_checkpoint(tmp_path / "ck3", 8)  # stage 3, 8 ranks
    y = tmp_path / "acc.yaml"
    y.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nmixed_precision: bf16\n"
                 "num_machines: 2\nnum_processes: 16\ndeepspeed_config:\n  gradient_accumulation_steps: 2\n"
                 "  zero_stage: 3\n  zero3_save_16bit_model: true\n")
    j = tmp_path / "same.json"
    j.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 2,
                             "bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}))
    for ck, ptr in ((ck2, "/deepspeed_config/zero_stage"), (ck3, "/num_processes")):
        flags = ["--hf", "--bf16", "--gradient-accumulation-steps", "2", "--resume-from-checkpoint", str(ck),
                 "--format", "json"]
        rc, out = run_json(["lint", str(y), *flags])
        got = [f for f in _findings(out) if f["code"] == "H009"]
        _, ref = run_json(["lint", str(j), "--world-size", "16", *flags])
        want = [f for f in _findings(ref) if f["code"] == "H009"]
        assert len(want) == 1 and rc == 1, (ref, out)
        assert [(f["severity"], f["message"]) for f in got] == [(f["severity"], f["message"]) for f in want]
        assert got[0]["pointer"] == ptr


def test_estimate_of_an_accelerate_file_takes_its_capacities_from_hardware(tmp_path):
    """estimate on an accelerate YAML under --hardware dgx-h100 had no accelerator capacity
    (verdict "unknown": the spec was read only for DeepSpeed JSON). Now each tier's capacity is the
    spec's, the same the DeepSpeed JSON path reads (an H100 SXM's memory; the host the flag's)."""
    from tests.conftest import run_json

    src = tmp_path / "acc.yaml"
    src.write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n  gradient_accumulation_steps: 1\n"
                   "mixed_precision: bf16\nnum_processes: 8\n")
    ds = tmp_path / "ds.json"
    ds.write_text('{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, '
                  '"bf16": {"enabled": true}, "zero_optimization": {"stage": 3}}')
    common = ["--model", "llama-3-8b", "--hardware", "dgx-h100", "--host-memory", "512GB", "--format", "json"]
    _, a = run_json(["estimate", str(src), "--bf16", "--per-device-train-batch-size", "1"] + common)
    _, b = run_json(["estimate", str(ds), "--world-size", "8"] + common)
    cap = {r["tier"]: r["capacity"] for r in a["fit"]}
    assert cap["accelerator"] is not None and cap == {r["tier"]: r["capacity"] for r in b["fit"]}
    assert cap["host"] == 512_000_000_000


# A DeepSpeed accelerate config as `accelerate config` writes it (accelerate docs, usage_guides/deepspeed).
_ACC_WRITTEN = """compute_environment: LOCAL_MACHINE
debug: false
deepspeed_config:
  gradient_accumulation_steps: 1
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: false
  zero_stage: 2
distributed_type: DEEPSPEED
downcast_bf16: 'no'
machine_rank: 0
main_training_function: main
mixed_precision: fp16
num_machines: 1
num_processes: 8
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
"""


def test_accelerate_known_keys_are_accelerates_fields():
    """The known top-level keys are the dataclass fields accelerate's unknown-key check compares with
    (accelerate/commands/config/config_args.py from_yaml_file), plus the two legacy keys its
    process_config removes before that check."""
    args = __import__("pytest").importorskip("accelerate.commands.config.config_args")
    from advisor.config.hf import ACCELERATE_CLUSTER_KEYS, ACCELERATE_SAGEMAKER_KEYS

    legacy = {"fp16", "dynamo_backend"}
    assert ACCELERATE_CLUSTER_KEYS == set(args.ClusterConfig.__dataclass_fields__) | legacy
    assert ACCELERATE_SAGEMAKER_KEYS == set(args.SageMakerConfig.__dataclass_fields__) | legacy


def test_accelerate_unknown_top_level_key(tmp_path):
    """H010 exactly where accelerate's own reader (load_config_from_file) refuses the file with
    'had unknown keys ([...])', naming the same keys; a typo gets its close match as the fix."""
    import yaml
    args = __import__("pytest").importorskip("accelerate.commands.config.config_args")

    base = yaml.safe_load(_ACC_WRITTEN)
    cases = {
        "written.yaml": (_ACC_WRITTEN, []),
        "legacy_fp16.yaml": (_ACC_WRITTEN.replace("mixed_precision: fp16", "fp16: true"), []),
        "zzk.yaml": (_ACC_WRITTEN + "zzk: 1\n", ["zzk"]),
        "typo.yaml": (_ACC_WRITTEN.replace("num_processes: 8", "num_proceses: 8"), ["num_proceses"]),
        "sagemaker_field.yaml": (_ACC_WRITTEN + "region: us-east-1\n", ["region"]),
        "zzk.json": (json.dumps({**base, "zzk": 1}), ["zzk"]),
    }
    for name, (text, unknown) in cases.items():
        (tmp_path / name).write_text(text)
        try:
            args.load_config_from_file(str(tmp_path / name))
            refused = []
        except ValueError as e:
            refused = re.search(r"unknown keys \((\[.*?\])\)", str(e)).group(1)
            refused = __import__("ast").literal_eval(refused)
        assert refused == unknown, (name, refused)
        rc, out = run_json(["lint", name, "--format", "json"], cwd=tmp_path)
        found = [f for f in out["files"][0]["findings"] if f["code"] == "H010"]
        assert sorted(f["data"]["key"] for f in found) == unknown, (name, found)
        assert (rc == 1) == bool(unknown), (name, rc)
        for f in found:
            assert f["pointer"] == "/" + f["data"]["key"] and f["severity"] == "error"
    rc, out = run_json(["lint", "typo.yaml", "--format", "json"], cwd=tmp_path)
    typo = next(f for f in out["files"][0]["findings"] if f["code"] == "H010")
    assert typo["data"]["suggestion"] == "num_processes" and "num_processes" in typo["fix"]
    rc, out = run_json(["lint", "sagemaker_field.yaml", "--format", "json"], cwd=tmp_path)
    sm = next(f for f in out["files"][0]["findings"] if f["code"] == "H010")
    assert "SageMakerConfig" in sm["message"]
