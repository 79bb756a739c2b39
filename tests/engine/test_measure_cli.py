"""``ds-advisor measure`` end to end: the real engine on 2 CPU ranks, its bytes beside the
ledger's, every row equal (the CLI's own verdict is checked against the rows it prints)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import run_group

TINY = {"name": "tiny-odd", "tensors": [
    {"name": "a.weight", "shape": [301, 64]}, {"name": "a.bias", "shape": [301]},
    {"name": "b.weight", "shape": [77, 301]}, {"name": "b.bias", "shape": [77]},
    {"name": "c.weight", "shape": [5, 77]}, {"name": "c.bias", "shape": [5]}]}


@pytest.mark.engine
@pytest.mark.parametrize("stage", [2, 3])
def test_measure_cli_matches_ledger(tmp_path, stage):
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps(TINY))
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                               "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                               "zero_optimization": {"stage": stage, "reduce_bucket_size": 50000,
                                                     "stage3_param_persistence_threshold": 100}}))
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    p = run_group([sys.executable, "-m", "advisor", "measure", str(cfg), "--model", str(inv), "--world-size", "2",
                        "--format", "json"], 600, env=env)
    assert "Traceback" not in p.stderr[-2000:] or p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)
    rows = d["rows"]
    assert {r["rank"] for r in rows} == {0, 1}
    assert all("error" not in r for r in rows)
    # the engine really allocated the Adam state and master weights the ledger predicts
    steady = {(r["rank"], r["item"]) for r in rows if r["snapshot"] == "steady" and r["measured"] > 0}
    assert {(0, "fp32_master"), (0, "exp_avg"), (1, "exp_avg_sq")} <= steady
    assert d["census_matches"] == all(r["diff"] == 0 for r in rows) and d["census_matches"], \
        [r for r in rows if r["diff"]]
    # the census matches; the exit code also carries the phase parity (a phase over 1% exits 1).
    # ZeRO-2: every phase within 1% (tests/engine/test_peak_parity.py z2_bf16_w2 has these shapes).
    # ZeRO-3 with stage3_param_persistence_threshold 100 (non-persistent parameters): every phase
    # within 1% since the ledger replays DeepSpeed's fetch/prefetch/release (state.zero3_fetch_replay);
    # test_peak_parity.UNMATCHED["z3_bf16_nonpersist_w2"] (the same shapes and config but the
    # micro-batch, which the proxy's input ignores) lists what is still off, none now. Strict: a
    # phase off there must be off here, and no other.
    import test_peak_parity
    known = set(test_peak_parity.UNMATCHED.get("z3_bf16_nonpersist_w2", {})) if stage == 3 else set()
    over = {(r["rank"], r["phase"]) for r in d["phases"]["rows"] if not r.get("ok")}
    # gloo's thread may hold a released module's all-gather buffer past its release in a forward/backward
    # (test_peak_parity.RACY, seen here on either rank at backward:1, +13,859 B): over,
    # never under, by at most that buffer; the CLI still exits 1 on it
    race = test_peak_parity.RACY.get("z3_bf16_nonpersist_w2", {}) if stage == 3 else {}
    raced = {(r["rank"], r["phase"]) for r in d["phases"]["rows"] if not r.get("ok")
             and 0 < test_peak_parity.race_bound(race, r["phase"])
             and r["ledger"] <= r["measured"] <= r["ledger"] * 1.01 + test_peak_parity.race_bound(race, r["phase"])}
    assert over - raced == {(k, ph) for k in (0, 1) for ph in known}, over
    assert p.returncode == (1 if over else 0), (p.returncode, over)
    # the top-level verdict is both parts: false while a phase is over 1%
    assert d["matches"] == (not over) and d["phases_match"] == (not over), (d["matches"], over)


# ZeRO-2 bf16 on 2 ranks with the peak-parity cells' buckets (tests/engine/test_peak_parity.py
# z2_bf16_w2, whose every phase is within 1% there): GA 1, so the phases are compared
Z2 = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
      "zero_optimization": {"stage": 2, "reduce_bucket_size": 50000, "overlap_comm": False,
                            "contiguous_gradients": True}}
PHASES = {"load", "initialize", "forward:1", "backward:1", "step:1", "forward:2", "backward:2", "step:2"}


@pytest.mark.engine
def test_measure_cli_phase_rows_match_the_ledger_timeline_and_validate(tmp_path):
    import parity
    from jsonschema import Draft202012Validator

    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps(parity.TINY))
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(Z2))
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    p = run_group([sys.executable, "-m", "advisor", "measure", str(cfg), "--model", str(inv), "--world-size", "2",
                   "--format", "json"], 600, env=env)
    d = json.loads(p.stdout)
    schema = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "measure-output.schema.json").read_text())
    Draft202012Validator(schema).validate(d)
    ph = d["phases"]
    assert ph["compared"] and "tier split is not proven" in ph["tier_note"]
    rows = ph["rows"]
    assert {(r["rank"], r["phase"]) for r in rows} >= {(k, x) for k in (0, 1) for x in PHASES}
    # each row recomputed: measured within 1% of the ledger timeline's instant
    bad = [r for r in rows if not r["ledger"] * 0.99 <= r["measured"] <= r["ledger"] * 1.01]
    assert not bad, bad
    assert all(r["ok"] for r in rows) and ph["matches"] and d["matches"] and p.returncode == 0, p.stderr[-2000:]
    # the peak instant is the phase of the largest row on each side
    for k in (0, 1):
        rr = [r for r in rows if r["rank"] == k and r["phase"] != "load" and not r["phase"].startswith("initialize")]
        want = (max(rr, key=lambda r: r["measured"])["phase"], max(rr, key=lambda r: r["ledger"])["phase"])
        got = next(x for x in ph["peak_instant"] if x["rank"] == k)
        assert (got["engine"], got["ledger"]) == want
    # the text form carries the same rows and the CPU note. It is a second engine run, so its match is not
    # asserted again (the JSON run above proves it): in the engine pre-check of 2026-12-06 this second run
    # printed "17 of 18 phases within 1%" after the first had matched every phase. Its exit code must agree
    # with the verdict it prints (0 = matches, 1 = does not match).
    t = run_group([sys.executable, "-m", "advisor", "measure", str(cfg), "--model", str(inv), "--world-size", "2"],
                  600, env=env)
    assert "backward:2" in t.stdout and "tier split is not proven" in t.stdout, t.stdout[-2000:]
    verdict = "verdict: matches" in t.stdout
    assert verdict != ("verdict: does not match" in t.stdout), t.stdout[-2000:]
    assert t.returncode == (0 if verdict else 1), (t.returncode, t.stdout[-2000:])


@pytest.mark.engine
def test_an_unknown_buffer_in_forward_is_unattributed_and_fails_the_phase(tmp_path):
    """A buffer neither side knows (the worker's cell option inject_forward_bytes, 1 MiB here,
    against a ledger forward instant of about 0.5 MB) must show up as unattributed at its site,
    with its size, and put forward over 1%, so measure exits 1."""
    import parity

    from advisor.engine.measure import measure_phases, run_measure
    from advisor.model.inventory import from_dict
    from advisor.render.text import measure_text

    n = 1 << 20
    inv = from_dict(parity.TINY, parity.TINY["name"])
    ranks = run_measure(Z2, inv, 2, workdir=str(tmp_path), timeout_s=600, inject_forward_bytes=n)
    ph = measure_phases(Z2, inv, 2, ranks)
    for k in (0, 1):
        fwd = next(r for r in ph["rows"] if r["rank"] == k and r["phase"] == "forward:1")
        assert not fwd["ok"] and fwd["rel_diff"] > 0.01 and fwd["measured"] - fwd["ledger"] >= n * 0.99, fwd
        site = [u for u in fwd["unattributed"] if "_injected_buffer" in u["site"]]
        assert site and site[0]["bytes"] == n, fwd["unattributed"]
    assert not ph["matches"]
    text = measure_text({"rows": [], "phases": ph})
    assert f"{n:,} B at" in text and "_injected_buffer" in text and "OVER 1%" in text


@pytest.mark.engine
def test_measure_cli_compares_the_phases_at_gradient_accumulation_2(tmp_path):
    """train_batch_size 4 at micro-batch 1 on 2 ranks: DeepSpeed derives GA 2. Before, measure
    left the phases out (``compared`` false) and its verdict was true on the census alone; now
    the micro-steps map to the GA timeline (the optimizer steps at micro-steps 2 and 4, engine.py
    l.3463) and each row is within 1% of that instant (ZeRO-1: the peak-parity cell
    z1_bf16_tbsga2_w2 has this config)."""
    import parity
    from jsonschema import Draft202012Validator

    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps(parity.TINY))
    cfg = tmp_path / "ds.json"
    z1 = {**Z2, "zero_optimization": {**Z2["zero_optimization"], "stage": 1}, "train_batch_size": 4}
    del z1["gradient_accumulation_steps"]
    cfg.write_text(json.dumps(z1))
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    p = run_group([sys.executable, "-m", "advisor", "measure", str(cfg), "--model", str(inv), "--world-size", "2",
                   "--steps", "4", "--format", "json"], 600, env=env)
    d = json.loads(p.stdout)
    schema = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "measure-output.schema.json").read_text())
    Draft202012Validator(schema).validate(d)
    ph = d["phases"]
    assert ph["compared"] and ph["ga"] == 2 and ph["ga_note"] == "", ph
    inst = {(r["rank"], r["phase"]): r["ledger_instant"] for r in ph["rows"]}
    for k in (0, 1):
        assert inst[(k, "forward:2")] == "forward:2" and inst[(k, "forward:4")] == "steady:forward"
        assert inst[(k, "step:2")].startswith("first_step:") and (k, "step:1") not in inst
    bad = [r for r in ph["rows"] if not r["ledger"] * 0.99 <= r["measured"] <= r["ledger"] * 1.01]
    assert not bad, bad
    assert ph["matches"] and d["matches"] and p.returncode == 0, p.stderr[-2000:]


@pytest.mark.engine
def test_measure_names_each_large_storage_by_its_ledger_entry_on_a_real_run(tmp_path):
    """``ds-advisor measure --params 200000`` (one tensor of 200,000 elements) at ZeRO-3 fp32 on 1 rank:
    the storages no census claims at each phase's peak are listed by allocation site, split into
    ``in_ledger`` (a live ledger entry cites the site) and ``unattributed`` (issue 15: 0288455, 99098db,
    c3f8d85 were only tested with an injected buffer). Here the engine's own transients must be
    in_ledger, named: at the steady step's peak, stage3.py get_grad_norm_direct l.2457's fp64 copy of the
    one gradient partition, 200,000 x 8 B (its 8 B norm aside) -> grad_norm_fp64; what
    stays unattributed is scalars (the worker's input, the loss, Adam's step counter: under 1 KiB each).
    The one tensor's step makes no fp32 gradient copy (flatten of one tensor is a view, .to(fp32) of
    fp32 a no-op: the census's fp32_grad is 0 on both sides)."""
    n = 200_000
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                               "zero_optimization": {"stage": 3, "reduce_bucket_size": 50000}}))
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    p = run_group([sys.executable, "-m", "advisor", "measure", str(cfg), "--params", str(n), "--world-size", "1",
                   "--format", "json"], 600, env=env)
    d = json.loads(p.stdout)
    ph = d["phases"]
    assert d["census_matches"], [r for r in d["rows"] if r.get("diff")]
    bad = [r for r in ph["rows"] if not r["ledger"] * 0.99 <= r["measured"] <= r["ledger"] * 1.01]
    assert not bad, bad
    for r in ph["rows"]:
        big = [u for u in r["unattributed"] if u["bytes"] >= 1024]
        assert not big, (r["phase"], big)
        assert all(u["items"] for u in r["in_ledger"]), r["in_ledger"]
    step = next(r for r in ph["rows"] if r["phase"] == "step:2")
    norm = [u for u in step["in_ledger"] if "stage3.py:get_grad_norm_direct:" in u["site"]]
    assert norm and norm[0]["items"] == ["grad_norm_fp64"] and n * 8 <= norm[0]["bytes"] <= n * 8 + 64, \
        step["in_ledger"]
    assert step["ledger_instant"] == "steady_step:norm"
    assert p.returncode == 0 and d["matches"], p.stderr[-2000:]


def _cmdlines_naming(text: str) -> list[str]:
    """Command lines of live processes that contain ``text`` (from /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open(f"/proc/{d}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmd and state != "Z":
            out.append(f"{d}: {cmd[:200]}")
    return out


@pytest.mark.engine
def test_measure_timeout_has_its_own_exit_code_one_line_and_no_process_left(tmp_path):
    # issue 15: a run past --timeout exited 2 (bad input) and printed the launcher's SignalException
    # traceback. Now: exit 5 (advisor.errors.EXIT_TIMEOUT), one line, and no process of the launch
    # (its job file lies under TMPDIR, so each of its processes names tmp_path) left afterwards.
    import time

    from advisor.errors import EXIT_TIMEOUT, EXIT_USAGE
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps(TINY))
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                               "zero_optimization": {"stage": 2}}))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env["TMPDIR"] = str(tmp)
    p = run_group([sys.executable, "-m", "advisor", "measure", str(cfg), "--model", str(inv), "--world-size", "2",
                   "--timeout", "2"], 120, env=env)
    assert EXIT_TIMEOUT not in (0, 1, EXIT_USAGE, 3, 4, 130)
    assert p.returncode == EXIT_TIMEOUT, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr and "SignalException" not in p.stderr, p.stderr[-2000:]
    last = [ln for ln in p.stderr.splitlines() if not ln.startswith(("ds-advisor: measure: building",
                                                                    "ds-advisor: measure: launching", "    "))]
    assert len(last) == 1 and "timed out after 2 s" in last[0], p.stderr
    deadline = time.time() + 15
    while _cmdlines_naming(str(tmp)) and time.time() < deadline:
        time.sleep(0.2)
    assert not _cmdlines_naming(str(tmp)), _cmdlines_naming(str(tmp))


@pytest.mark.engine
def test_measure_builds_the_linears_the_ledger_assumes_at_zero2(tmp_path):
    # issue 15: at ZeRO-1/2 measure built one autograd node per parameter while the ledger keeps an
    # nn.Linear's weight gradient whole beside its bias's hook (state.autograd_siblings); with a
    # tensor over the bucket (b.weight: 23,177 > 20,000 elements) the backward phase was off by
    # that gradient (the newcomer's W = 3 run: -2.5% to -11.7%). The proxy now runs F.linear where
    # state.linear_pairs says, so every phase of the real engine is within 1% of the timeline.
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps(TINY))
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                               "zero_optimization": {"stage": 2, "reduce_bucket_size": 20000}}))
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    p = run_group([sys.executable, "-m", "advisor", "measure", str(cfg), "--model", str(inv), "--world-size", "2",
                   "--format", "json"], 600, env=env)
    d = json.loads(p.stdout)
    rows = d["phases"]["rows"]
    bwd = [r for r in rows if r["phase"].startswith("backward")]
    assert bwd and all(r["ledger"] > 0 for r in bwd)
    off = [(r["rank"], r["phase"], r["measured"], r["ledger"]) for r in rows
           if abs(r["measured"] - r["ledger"]) > 0.01 * r["ledger"]]
    assert not off, off
    assert d["census_matches"] and p.returncode == 0, p.stderr[-2000:]
