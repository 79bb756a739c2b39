"""Newcomer report (2026-12-06): ``check`` of a ZeRO-2 20B job on 4 ranks with 256 GB of host memory
listed ``--set zero_optimization.stage=3`` as a fix that leaves the host "still short", yet running
that fix gives host GO: at ZeRO-3 the model is assumed built under deepspeed.zero.Init (as the HF
Trainer and accelerate do; ``timeline.resolve_load``), so no rank materialises the whole model at load,
while the fix was judged with the ZeRO-2 plan's load (no zero.Init: 4 ranks x 4 B x 20e9 = 320 GB).
A fix's per-tier verdicts must be what running the fix reports; with ``--no-zero-init`` both say short."""

from __future__ import annotations

import json

import pytest

BASE = ["sample_configs/zero2.json", "--params", "20000000000", "--world-size", "4", "--gpus-per-node", "4",
        "--host-memory", "256GB", "--gpu-memory", "141GB", "--seq-len", "2048",
        "--set", "train_batch_size=32", "--set", "train_micro_batch_size_per_gpu=1",
        "--set", "gradient_accumulation_steps=8"]


def _json(cli, args):
    p = cli(["check", *args, "--format", "json"])
    assert p.returncode in (0, 1, 4), p.stderr  # 4: TIGHT, --params leaves the activations out (M104)
    return json.loads(p.stdout)


@pytest.mark.parametrize("load_flags", [[], ["--no-zero-init"]])
def test_the_stage3_fix_is_judged_as_running_it_judges_it(cli, load_flags):
    d = _json(cli, BASE + load_flags)
    cands = [c for f in d["findings"] for c in (f.get("data") or {}).get("candidates", [])
             if c["set"] == ["zero_optimization.stage=3"] and not c["flags"]]
    assert cands, "no ZeRO-3 fix listed"
    ran = _json(cli, BASE + load_flags + ["--set", "zero_optimization.stage=3"])
    got = {t["tier"]: t for t in ran["tiers"]} if isinstance(ran["tiers"], list) else ran["tiers"]
    for tier, verdict in cands[0]["verdicts"].items():
        row = got[tier] if not isinstance(got[tier], list) else got[tier][0]
        assert (row.get("verdict") in ("go", "tight", "fits")) == (verdict in ("fits", "tight")), (tier, verdict, row)
    # 320 GB at load without zero.Init (4 ranks x 4 B x 20e9) is over 256 GB; with it the host fits
    assert cands[0]["verdicts"]["host"] == ("does not fit" if load_flags else "fits")
