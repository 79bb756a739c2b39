"""Issue 23 leftover: ``check`` counted the swap files a killed run left under ``nvme_path`` as
used space (statvfs does), so a rerun that fits was no-go (K104). DeepSpeed 0.19.8 frees that
space itself: the parameter swapper empties ``zero_stage_3/{dtype}params/rank{r}`` when it starts
(partitioned_param_swapper.py l.85-88) and the optimizer swapper rewrites
``zero_stage_3/optimizer/rank{r}/*.tensor.swp`` by name (stage3.py l.840, optimizer_utils.py l.33,
l.174). Now check adds those files' bytes to the free space and says so (K106, naming the folder
and the bytes); files of other ranks, of another dtype's parameter folder, or not named
``*.tensor.swp`` are not counted."""

from __future__ import annotations

import json
import os

from tests.robustness.robust_helpers import clean_env, run_cli

MiB = 1 << 20


def _config(nvme):
    return {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
            "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": str(nvme)},
                                  "offload_param": {"device": "nvme", "nvme_path": str(nvme)}}}


def _check(tmp_path, nvme, free):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(_config(nvme)))
    env = clean_env(DS_ADVISOR_TEST_LIBAIO="1", DS_ADVISOR_TEST_DISK_FREE=json.dumps({str(nvme): free}))
    r = run_cli(["check", "--params", "1000000", "--world-size", "1", "--allow-tight", "--gpu-memory", "80GB", "--host-memory", "1TB",
                 "--format", "json", str(cfg)], env=env)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


def _write(path, n):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(n))  # random: nothing a filesystem could store sparse or deduplicated


def test_an_earlier_runs_swap_files_count_as_free(tmp_path):
    nvme = tmp_path / "nvme"
    nvme.mkdir()
    _, d = _check(tmp_path, nvme, 1 << 40)
    need = d["resources"]["nvme"][0]["need"]
    assert need > 8 * MiB
    free = need - 4 * MiB  # 4 MiB short
    rc, d = _check(tmp_path, nvme, free)
    assert rc == 1 and "K104" in {f["code"] for f in d["findings"]}

    base = nvme / "zero_stage_3"
    _write(base / "optimizer" / "rank0" / "7.tensor.swp", 5 * MiB)               # the optimizer's, rank 0
    _write(base / "bfloat16params" / "rank0" / "3_param.tensor.swp", 1 * MiB)     # bf16 parameters, rank 0
    _write(base / "optimizer" / "rank1" / "7.tensor.swp", 2 * MiB)                # another rank: not this node's
    _write(base / "float16params" / "rank0" / "3_param.tensor.swp", 2 * MiB)      # a dtype this run does not use
    _write(base / "optimizer" / "rank0" / "notes.txt", 2 * MiB)                   # not a swap file
    stale = sum(os.stat(base / p).st_blocks * 512 for p in ("optimizer/rank0/7.tensor.swp",
                                                             "bfloat16params/rank0/3_param.tensor.swp"))
    assert stale >= 6 * MiB  # allocated bytes: what deleting or overwriting them gives back

    rc, d = _check(tmp_path, nvme, free)
    codes = {f["code"] for f in d["findings"]}
    assert "K104" not in codes and rc == 0, d["findings"]
    (k,) = [f for f in d["findings"] if f["code"] == "K106"]
    assert k["severity"] == "info" and k["data"] == {"folder": str(base), "reusable": stale, "files": 2}
    assert str(base) in k["message"] and "2 swap files" in k["message"]
    (row,) = [t for t in d["tiers"] if t["tier"].startswith("nvme")]
    assert row["capacity"] == free + stale and "earlier run's swap files" in row["capacity_source"]
    assert d["resources"]["nvme"][0]["reusable"] == stale


def test_no_swap_files_no_finding(tmp_path):
    nvme = tmp_path / "nvme"
    (nvme / "zero_stage_3" / "optimizer" / "rank0").mkdir(parents=True)
    _, d = _check(tmp_path, nvme, 1 << 40)
    assert "K106" not in {f["code"] for f in d["findings"]} and d["resources"]["nvme"][0]["reusable"] == 0
