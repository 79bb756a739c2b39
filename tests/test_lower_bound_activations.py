"""Session 21 newcomer defect: a GO that leaves out the activations.

``check sample_configs/zero3_cpu_offload.json --params 8e9 --world-size 8 --gpus-per-node 1 --seq-len 4096
--gpu-memory 80GiB`` said ``GO accelerator [per rank]: need 2.95 GiB of 80.00 GiB`` (exit 0), the only hint a later
``not counted: activations: not estimated`` line; ``estimate ... --hardware dgx-h100`` said "fits". The activations
left out are the need's largest term: with ``--model llama-3-8b`` the same plan's activations are 31.49 GiB per rank
(62.98 GiB at 8192 tokens), fifteen times its 2.10 GiB of tracked model states. Wherever the
activations are not estimated (no architecture: ``--params``, an inventory JSON without ``meta``; no sequence length)
the accelerator need is a lower bound (rule M104): check is at best TIGHT (exit 4, errors.EXIT_TIGHT; 0 with
``--allow-tight``), estimate never "fits", and M104 names what is missing and the flag that gives it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.errors import EXIT_OK, EXIT_TIGHT

ROOT = Path(__file__).resolve().parents[1]
CFG = ROOT / "sample_configs" / "zero3_cpu_offload.json"
INV = ROOT / "tests" / "data" / "lb15" / "inv1g.json"  # a 168M llama inventory with its architecture (meta)
SHAPE = ["--world-size", "8", "--gpus-per-node", "1", "--seq-len", "4096", "--gpu-memory", "80GiB",
         "--host-memory", "2000GB"]


def run(cmd: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor", cmd, *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                                                      "LANG": "C.UTF-8", "HOME": "/root", "COLUMNS": "200"})


def m104(d: dict) -> list[dict]:
    return [f for f in d["findings"] if f["code"] == "M104"]


def test_check_with_params_is_tight_never_go():
    p = run("check", str(CFG), "--params", "8000000000", *SHAPE, "--format", "json")
    assert p.returncode == EXIT_TIGHT, p.stdout + p.stderr
    d = json.loads(p.stdout)
    assert d["verdict"] == "tight"
    acc = next(t for t in d["tiers"] if t["tier"] == "accelerator")
    # 2.95 GiB of 80 GiB: the headroom is far outside the overhead band; tight only because of the floor
    assert acc["verdict"] == "tight" and acc["lower_bound"] is True
    [f] = m104(d)
    assert "activations: not estimated" in f["message"] and "--model" in f["fix"]
    assert f["data"]["activations_missing"] is True and f["data"]["transients_unmodeled"] is False
    text = run("check", str(CFG), "--params", "8000000000", *SHAPE)
    assert "GO      accelerator" not in text.stdout and "need >= " in text.stdout
    assert text.stdout.rstrip().splitlines()[-1].startswith("TIGHT")


def test_allow_tight_keeps_its_meaning():
    p = run("check", str(CFG), "--params", "8000000000", *SHAPE, "--allow-tight", "--format", "json")
    assert p.returncode == EXIT_OK, p.stdout + p.stderr
    assert json.loads(p.stdout)["verdict"] == "tight"


def test_estimate_with_params_never_fits():
    p = run("estimate", str(CFG), "--params", "8000000000", "--world-size", "8", "--seq-len", "4096",
            "--hardware", "dgx-h100", "--format", "json")
    d = json.loads(p.stdout)
    acc = next(r for r in d["fit"] if r["tier"] == "accelerator")
    assert acc["verdict"] == "tight" and acc["lower_bound"] is True
    assert d["assumptions"]["peak_lower_bound"].startswith("activations: not estimated")
    assert all(r["peak"]["accelerator"]["lower_bound"] for r in d["ranks"])
    assert len(m104(d)) == 1


def test_inventory_without_architecture_is_a_floor(tmp_path):
    inv = json.loads(INV.read_text())
    del inv["meta"]  # the tensors alone: no hidden size, layers or heads
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(inv))
    p = run("check", str(CFG), "--model", str(path), *SHAPE, "--format", "json")
    assert p.returncode == EXIT_TIGHT, p.stdout + p.stderr
    [f] = m104(json.loads(p.stdout))
    assert "--model with an architecture" in f["fix"]


def test_no_sequence_length_is_a_floor(tmp_path):
    inv = json.loads(INV.read_text())
    del inv["meta"]["max_seq_len"]  # an architecture, but no context length and no --seq-len
    path = tmp_path / "noseq.json"
    path.write_text(json.dumps(inv))
    shape = [a for a in SHAPE if a not in ("--seq-len", "4096")]
    p = run("check", str(CFG), "--model", str(path), *shape, "--format", "json")
    assert p.returncode == EXIT_TIGHT, p.stdout + p.stderr
    [f] = m104(json.loads(p.stdout))
    assert "--seq-len" in f["fix"]


@pytest.mark.parametrize("model", [str(INV)])
def test_with_an_architecture_the_activations_count_and_go_stays(model):
    # the same plan with the architecture: activations estimated, no floor, GO (the 168M model's states and
    # its 4096-token activations are a few GiB of 80)
    p = run("check", str(CFG), "--model", model, *SHAPE, "--format", "json")
    assert p.returncode == EXIT_OK, p.stdout + p.stderr
    d = json.loads(p.stdout)
    assert d["verdict"] == "go" and not m104(d)
