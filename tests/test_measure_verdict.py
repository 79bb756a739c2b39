"""``ds-advisor measure``'s top-level verdict is the conjunction of its two parts, the resting
census (every row to the byte) and the phase parity (every phase within 1%): a run whose census
matches but whose phases do not says ``"matches": false`` and exits 1. Constructed results, no
engine: the engine's side is stubbed, so only the verdict's logic and its rendering are tested."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from advisor.engine import measure as M
from advisor.model.inventory import from_dict
from advisor.render.text import measure_text

INV = {"name": "t", "tensors": [{"name": "a.weight", "shape": [64, 64]}]}
CFG = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
       "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 2}}
#: a census row equal to the byte (the census part matches)
CENSUS_OK = [{"rank": 0, "snapshot": "steady", "item": "fp32_master", "tier": "unpinned",
              "measured": 16384, "ledger": 16384, "diff": 0}]
SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "measure-output.schema.json"


def _ranks(peak: int) -> dict:
    # one rank whose tracker saw a forward high-water mark of ``peak`` bytes: 1 B is ~100% under
    # any ledger forward instant of this model (8 KiB of bf16 parameters alone)
    return {0: {"accelerator": "cpu", "snapshots": {},
                "tracker": [{"phase": "forward:1", "peak": peak, "end": peak, "unattributed": []}]}}


def test_a_failing_phase_makes_the_verdict_false_though_the_census_matches():
    inv = from_dict(INV, "t")
    ph = M.measure_phases(CFG, inv, 1, _ranks(1))
    assert ph["compared"] and not ph["matches"] and not ph["rows"][0]["ok"]
    v = M.measure_verdict(CENSUS_OK, ph)
    assert v == {"matches": False, "census_matches": True, "phases_match": False}
    # and the other way round: phases within 1%, one census row off by a byte
    ok_phases = {**ph, "matches": True}
    off = [{**CENSUS_OK[0], "measured": 16385, "diff": 1}]
    assert M.measure_verdict(off, ok_phases) == {"matches": False, "census_matches": False, "phases_match": True}
    assert M.measure_verdict(CENSUS_OK, ok_phases)["matches"] is True
    # a failed rank is not a match; no rows at all prove nothing
    assert M.measure_verdict([{"rank": 0, "error": "boom"}], ok_phases)["census_matches"] is False
    assert M.measure_verdict([], ok_phases)["matches"] is False


def test_no_tracker_record_is_not_a_phase_match():
    ph = M.measure_phases(CFG, from_dict(INV, "t"), 1, {0: {"snapshots": {}}})
    assert not ph["compared"] and ph["matches"] is False


def test_measure_cli_top_level_json_and_text_say_no_match_and_exit_1(tmp_path, monkeypatch):
    from advisor.cli import main

    monkeypatch.setattr(M, "run_measure", lambda *a, **k: _ranks(1))
    monkeypatch.setattr(M, "measure_vs_ledger", lambda *a, **k: [dict(r) for r in CENSUS_OK])
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(CFG))
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps(INV))
    r = CliRunner().invoke(main, ["measure", str(cfg), "--model", str(inv), "--format", "json"])
    assert r.exit_code == 1, r.output
    d = json.loads(r.stdout)
    assert (d["matches"], d["census_matches"], d["phases_match"]) == (False, True, False)
    from jsonschema import Draft202012Validator
    Draft202012Validator(json.loads(SCHEMA.read_text())).validate(d)
    t = CliRunner().invoke(main, ["measure", str(cfg), "--model", str(inv)])
    assert t.exit_code == 1
    assert "verdict: does not match (phases)" in t.stdout and "OVER 1%" in t.stdout, t.stdout
    # the renderer alone, on a matching verdict
    assert "verdict: matches" in measure_text({"rows": CENSUS_OK, "matches": True, "census_matches": True,
                                               "phases_match": True})
