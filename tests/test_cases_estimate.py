"""Shared cases whose expectations are estimate figures (C05, C06, C08, C09, C10, C11, C12, C14).

``FIGURES`` maps each figure name an expect.json uses to its place in estimate's JSON;
tests/test_cases.py runs every case's command by name and reads the figures through it (a
figure name this table does not know fails that case, so a new case cannot pass silently).
The tests below check what a case.md says beyond its expect.json.
"""

from __future__ import annotations

import json

from tests.conftest import CASES, run_cli


def _items(d, tier_prefix, item):
    return sum(it["bytes"] for it in d["ranks"][0]["items"] if it["tier"].startswith(tier_prefix) and it["item"] == item)


def _file(d, name):
    return next(f["bytes"] for f in d["checkpoint"]["files"] if f["name"] == name)


FIGURES = {
    "accelerator workspace: ipg bucket pair": lambda d: _items(d, "accelerator", "ipg_bucket"),
    "accelerator parameters": lambda d: d["ranks"][0]["tiers"]["accelerator"]["parameters"],
    "accelerator master_weights": lambda d: d["ranks"][0]["tiers"]["accelerator"]["master_weights"],
    "accelerator optimizer_states": lambda d: d["ranks"][0]["tiers"]["accelerator"]["optimizer_states"],
    "host total at least": lambda d: d["ranks"][0]["tiers"]["host"]["total"],
    "optimizer-states file bytes": lambda d: _file(d, "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"),
    "model-states file bytes": lambda d: _file(d, "mp_rank_00_model_states.pt"),
    "nvme bytes written per step": lambda d: d["movement"]["ranks"][0]["nvme"]["write_bytes"],
    # C12: rank 0's role (stage 0, tensor-parallel rank 0), accelerator tier
    "16-bit parameters per rank (TP shard, ZeRO-1 keeps it whole)":
        lambda d: d["ranks"][0]["tiers"]["accelerator"]["parameters"],
    "fp32 master weights per rank (over TP x DP)": lambda d: d["ranks"][0]["tiers"]["accelerator"]["master_weights"],
    "Adam moments per rank": lambda d: d["ranks"][0]["tiers"]["accelerator"]["optimizer_states"],
    # C14 (the estimate of an accelerate file: ZeRO-2, offload_optimizer cpu)
    "fp32 master partition on the host per rank": lambda d: d["ranks"][0]["tiers"]["host"]["master_weights"],
    "Adam moments on the host per rank": lambda d: d["ranks"][0]["tiers"]["host"]["optimizer_states"],
    "load-time host peak per node (4 ranks x 4 B x 20e9, fp32 build)": lambda d: d["load"]["host_per_node"],
}

def test_C05_zero2_bucket_pair_without_overlap(tmp_path):
    """C05-zero2-bucket-pair: the same config with overlap_comm false costs one bucket,
    500,000,000 elements x 2 B = 1,000,000,000 bytes."""
    cfg = json.loads((CASES / "C05-zero2-bucket-pair" / "config.json").read_text())
    cfg["zero_optimization"]["overlap_comm"] = False
    f = tmp_path / "c.json"
    f.write_text(json.dumps(cfg))
    p = run_cli(["estimate", str(f), "--params", "340000000", "--world-size", "8", "--format", "json"])
    assert _items(json.loads(p.stdout), "accelerator", "ipg_bucket") == 1_000_000_000


def test_C06_zero2_32b_8gpu_does_not_fit_141GB():
    """C06-zero2-32b-8gpu: with 141 GB per GPU the estimate says it does not fit, and by how much."""
    folder = CASES / "C06-zero2-32b-8gpu"
    p = run_cli(["estimate", "config.json", "--model", "qwen2.5-32b", "--world-size", "8", "--gpu-memory", "141GB",
                 "--format", "json", "--seq-len", "4096"], cwd=folder)
    d = json.loads(p.stdout)
    acc = next(f for f in d["fit"] if f["tier"] == "accelerator")
    assert p.returncode == 1 and acc["fits"] is False and acc["headroom"] < 0
    # model states alone at the step: 65.5 + 16.4 + 32.8 + 8.2 + 16.4 GB (case.md) ~ 139.2 GB
    states = sum(d["ranks"][0]["tiers"]["accelerator"][c] for c in ("parameters", "master_weights", "optimizer_states"))
    assert states == 65_527_752_704 + 16_381_938_176 + 32_763_876_352
    assert any(f["code"] == "M100" and "over by" in f["message"] for f in d["findings"])


def test_C08_pinned_buffers_exceed_host_31GB():
    """C08-pinned-buffers-exceed-host: with the host's 31 GB the host tier does not fit."""
    folder = CASES / "C08-pinned-buffers-exceed-host"
    p = run_cli(["estimate", "config.json", "--params", "6700000000", "--world-size", "1", "--host-memory", "31GB",
                 "--format", "json"], cwd=folder)
    d = json.loads(p.stdout)
    host = next(f for f in d["fit"] if f["tier"] == "host")
    assert p.returncode == 1 and host["fits"] is False and host["need"] > 31e9


def test_every_code_an_output_can_carry_is_explained():
    """Codes produced by estimate and check (M090, M100, K1xx) have an `explain` text too."""
    for code in ("M090", "M100", "K102", "K103", "K104", "K105", "K106", "K110", "K111"):
        p = run_cli(["explain", code])
        assert p.returncode == 0 and p.stdout.splitlines()[1].startswith(code), (code, p.stdout[:200])
