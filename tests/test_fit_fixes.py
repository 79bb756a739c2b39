"""M100's computed fix (advisor.views.fixes): each single change it offers is re-estimated, and
applied the way a user applies it -- the --set strings on the command line, the flags -- the
real CLI must give the verdict and the need the fix claimed (the need byte for byte: the same
ledger, reached through the config file, advisor.config.overrides and build_plan instead of the
in-process candidate). Never a higher stage for a stage-3 config, never pinned-memory settings
for a host shortfall.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_json

SAMPLES = Path(__file__).resolve().parents[1] / "sample_configs"


def _m100(d: dict, tier: str) -> dict:
    (f,) = [f for f in d["findings"] if f["code"] == "M100" and f["data"]["tier"] == tier]
    return f


def _row(d: dict, tier: str) -> dict:
    (r,) = [r for r in d["fit"] if r["tier"] == tier]
    return r


def _applied(args: list[str], cand: dict) -> dict:
    """``cand`` applied the way a user applies it: its --set strings and flags on the command line,
    and for an accelerate file its launch fields (num_processes, num_machines) written into a copy
    of the YAML."""
    if cand.get("launch"):
        import tempfile

        import yaml

        data = yaml.safe_load(Path(args[1]).read_text())
        for e in cand["launch"]:
            k, _, v = e.partition(": ")
            data[k] = yaml.safe_load(v)
        alt = Path(tempfile.mkdtemp()) / Path(args[1]).name
        alt.write_text(yaml.safe_dump(data))
        args = [args[0], str(alt)] + args[2:]
    extra = [a for s in cand["set"] for a in ("--set", s)] + [a for fl in cand["flags"] for a in fl.split()]
    flags = {a for a in cand["flags"] for a in [a.split()[0]]}
    base = []
    skip = False
    for a in args:  # a flag the candidate changes replaces the one given
        if skip:
            skip = False
            continue
        if a in flags:
            skip = True
            continue
        base.append(a)
    _, d = run_json(base + extra)
    return d


def _check_each_candidate(args: list[str], tier: str) -> dict:
    rc, d = run_json(args)
    f = _m100(d, tier)
    assert rc == 1 and f["data"]["candidates"], f
    tried = [c for c in f["data"]["candidates"] if c["verdicts"][tier] in ("fits", "tight")]
    assert tried, f["fix"]
    for c in tried:
        again = _applied(args, c)
        row = _row(again, tier)
        assert (row["verdict"], row["need"]) == (c["verdicts"][tier], c["need"][tier]), (c, row)
        assert not [g for g in again["findings"] if g["code"] == "M100" and g["data"]["tier"] == tier], c
        how = " ".join([f"--set {x}" for x in c["set"]] + c["flags"])
        if c["verdict"] in ("fits", "tight"):  # offered only when the whole plan then fits
            assert how in f["fix"], (how, f["fix"])  # what the user reads is what was re-estimated
    return f


def test_accelerator_shortfall_candidates_fit_when_applied():
    # Llama-3-8B at ZeRO-2 on 8 x 80 GB, micro-batch 4, seq 2048: the activations (55 GiB) are
    # most of the 102 GiB peak; full checkpointing fits, half the micro-batch fits only inside the
    # runtime overhead's band, offload / ZeRO-3 / more ranks leave the activations as they are.
    args = ["estimate", str(SAMPLES / "zero2.json"), "--model", "llama-3-8b", "--world-size", "8",
            "--gpu-memory", "80GB", "--seq-len", "2048", "--format", "json"]
    f = _check_each_candidate(args, "accelerator")
    assert "activations" in f["fix"] and "% of the peak" in f["fix"]
    assert "--checkpointing full" in f["fix"]
    assert "shard more" not in f["fix"]


def test_set_of_the_fix_is_a_fitting_config_change():
    # Llama-3.2-3B (3,212,749,824 parameters) at ZeRO-1 on 16 ranks of 17 GB: bf16 parameters and
    # gradients 2 x 6.43 GB plus the 1/16 share of fp32 master weights and Adam moments
    # (12 B x 3.21e9 / 16 = 2.41 GB) is 15.26 GB before activations (256 tokens) and the runtime
    # overhead: over 17 GB. ZeRO-3 shards all of it, (2 + 2 + 12) B x 3.21e9 / 16 = 3.21 GB, plus its
    # gathered parameters and reduce buffer: it fits outright. data.set is a config change that fits
    # when applied. A model with an architecture: with --params the activations are not estimated and
    # no change "fits" (the need is a lower bound, M104: test_lower_bound_activations.py).
    args = ["estimate", "-", "--model", "llama-3.2-3b", "--seq-len", "256", "--world-size", "16",
            "--gpu-memory", "17GB", "--format", "json"]
    stdin = '{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 1}}'
    rc, d = run_json(args, stdin=stdin)
    assert _row(d, "accelerator")["verdict"] == "does not fit"
    f = _m100(d, "accelerator")
    assert f["data"]["set"], f["fix"]
    rc, again = run_json([*args, *[a for s in f["data"]["set"] for a in ("--set", s)]], stdin=stdin)
    assert _row(again, "accelerator")["verdict"] == "fits"


def test_stage3_is_never_told_to_raise_the_stage():
    rc, d = run_json(["estimate", str(SAMPLES / "zero3.json"), "--model", "llama-3-8b", "--world-size", "8",
                      "--gpu-memory", "12GB", "--seq-len", "4096", "--format", "json"])
    f = _m100(d, "accelerator")
    assert not [c for c in f["data"]["candidates"] if any(s.startswith("zero_optimization.stage=") for s in c["set"])]
    assert "stage 3" not in f["fix"].lower().replace("zero-3", "") or "ZeRO stage" not in f["fix"]


def test_host_shortfall_candidates_fit_and_never_touch_pinning():
    # ZeRO-3 with CPU offload of Llama-3-8B, 8 ranks on one node with 100 GB of host memory: the
    # optimizer state and the offloaded parameters of 8 ranks do not fit; 4 ranks per node do.
    args = ["estimate", str(SAMPLES / "zero3_cpu_offload.json"), "--model", "llama-3-8b", "--world-size", "8",
            "--gpus-per-node", "8", "--host-memory", "100GB", "--seq-len", "2048", "--format", "json"]
    f = _check_each_candidate(args, "host")
    assert "pin_memory" not in f["fix"] and not [c for c in f["data"]["candidates"]
                                                 if any("pin_memory" in s for s in c["set"])]


def _offered(fix: str) -> str:
    """The part of an M100 fix that offers changes (before the overflow clause)."""
    return fix.split(". Fit the ")[0]


def test_a_change_that_overflows_another_tier_is_not_offered(tmp_path):
    """Whole-plan fit (issue 19): ZeRO-2 llama-3-8b on 8 ranks of 40 GB with 140 GB of host per node.
    Offloading the optimizer fits the accelerator but puts 8 ranks' fp32 master weights and Adam
    moments (12 B x 8.03e9 / 8 per rank) on the host; applied with the real CLI, the host row
    does not fit, so it is named as overflowing, not offered. Every change offered, applied,
    leaves no tier short."""
    cfg = tmp_path / "z2.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}, "bf16": {"enabled": true}}')
    args = ["estimate", str(cfg), "--model", "llama-3-8b", "--world-size", "8", "--gpus-per-node", "8",
            "--gpu-memory", "40GB", "--host-memory", "140GB", "--seq-len", "1024", "--load-dtype", "bf16",
            "--format", "json"]
    rc, d = run_json(args)
    f = _m100(d, "accelerator")
    by = {c["change"]: c for c in f["data"]["candidates"]}
    off = by["offload the optimizer to host"]
    applied = _applied(args, off)
    assert _row(applied, "accelerator")["verdict"] == "fits" and _row(applied, "host")["verdict"] == "does not fit"
    assert "--set zero_optimization.offload_optimizer.device=cpu" not in _offered(f["fix"]), f["fix"]
    assert "offload the optimizer to host (host then short)" in f["fix"]
    # offered: the changes that fit, and those that fit only inside the overhead's band (tight: at
    # ZeRO-3 the allocator band reaches 50%, so the stage-3 change is offered as tight)
    offered = [c for c in f["data"]["candidates"] if c["verdict"] in ("fits", "tight")]
    assert offered, f["fix"]
    for c in offered:
        again = _applied(args, c)
        assert all(r["verdict"] in ("fits", "tight", "unknown") for r in again["fit"]), (c["change"], again["fit"])
        assert _row(again, "accelerator")["verdict"] == c["verdict"], (c["change"], again["fit"])
        assert " ".join([f"--set {x}" for x in c["set"]] + c["flags"]) in _offered(f["fix"])


def test_trainer_candidates_are_trainer_arguments_and_fit_when_applied(tmp_path):
    """Under the HF Trainer (batch keys "auto") the micro-batch candidate is its
    --per-device-train-batch-size / --gradient-accumulation-steps arguments and more ranks need no
    --set (the Trainer fills train_batch_size again): both are still candidates (they went
    missing under --hf), and applied with the real CLI each gives the need it claimed."""
    cfg = tmp_path / "hf.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", '
                   '"train_batch_size": "auto", "zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}}')
    args = ["estimate", str(cfg), "--hf", "--bf16", "--model", "llama-3-8b", "--world-size", "8", "--gpu-memory",
            "40GB", "--seq-len", "2048", "--per-device-train-batch-size", "8", "--format", "json"]
    rc, d = run_json(args)
    f = _m100(d, "accelerator")
    flags = {tuple(c["flags"]): c for c in f["data"]["candidates"]}
    mb = flags[("--per-device-train-batch-size 4", "--gradient-accumulation-steps 2")]
    ws = flags[("--world-size 16",)]
    assert mb["set"] == [] and ws["set"] == [], f["data"]["candidates"]
    for c in (mb, ws):
        again = _applied(args, c)
        assert not [g for g in again["findings"] if g["code"] == "H001"], again["findings"]
        row = _row(again, "accelerator")
        assert (row["verdict"], row["need"]) == (c["verdicts"]["accelerator"], c["need"]["accelerator"]), (c, row)


def _batch_of(cand: dict, base: dict) -> int:
    """micro-batch x accumulation x data-parallel ranks after the candidate (DeepSpeed
    runtime/config.py _batch_assertion: train_batch_size = micro x GA x world size)."""
    d = dict(base)
    for s in cand["set"]:
        k, _, v = s.partition("=")
        d[k] = int(v) if v.isdigit() else v
    for fl in cand["flags"]:
        k, _, v = fl.partition(" ")
        d[{"--micro-batch": "train_micro_batch_size_per_gpu", "--world-size": "world"}.get(k, k)] = int(v) \
            if v.isdigit() else v
    return d["train_micro_batch_size_per_gpu"] * d["gradient_accumulation_steps"] * d["world"]


def test_micro_batch_candidate_halves_the_micro_batch_given_on_the_command_line():
    """--micro-batch 8 over a config written for 4 (zero2.json: 64 = 4 x 2 x 8): the estimate runs
    micro-batch 8, so the candidate halves 8 (not the config's 4) with twice the accumulation,
    keeping 8 x 2 x 8 = 128 = 4 x 4 x 8 sequences per step; applied with the real CLI it gives the
    need it claimed. Every candidate keeps the global batch or says it changes."""
    args = ["estimate", str(SAMPLES / "zero2.json"), "--model", "llama-3-8b", "--world-size", "8",
            "--gpu-memory", "80GB", "--seq-len", "2048", "--micro-batch", "8", "--format", "json"]
    rc, d = run_json(args)
    f = _m100(d, "accelerator")
    (mb,) = [c for c in f["data"]["candidates"] if c["change"].startswith("micro-batch")]
    assert "train_micro_batch_size_per_gpu=4" in mb["set"] and "gradient_accumulation_steps=4" in mb["set"], mb
    assert "--micro-batch 4" in mb["flags"], mb
    again = _applied(args, mb)
    row = _row(again, "accelerator")
    assert (row["verdict"], row["need"]) == (mb["verdicts"]["accelerator"], mb["need"]["accelerator"])
    assert not [g for g in again["findings"] if g["code"] == "B001"], again["findings"]
    base = json.loads((SAMPLES / "zero2.json").read_text())
    base = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": base["gradient_accumulation_steps"],
            "world": 8}
    assert _batch_of(mb, base) == 8 * 2 * 8


def test_more_ranks_keep_the_global_batch_or_say_it_changes(tmp_path):
    """Another node's ranks: zero2.json's 64 = 4 x 2 x 8 becomes 4 x 1 x 16 (the accumulation
    halved, DeepSpeed's batch triple holds, no B001 when applied); a config at accumulation 1
    cannot keep it and the candidate says the global batch grows (4 x 1 x 8 = 32 -> 64)."""
    args = ["estimate", str(SAMPLES / "zero2.json"), "--model", "llama-3-8b", "--world-size", "8",
            "--gpu-memory", "80GB", "--seq-len", "2048", "--format", "json"]
    rc, d = run_json(args)
    (ws,) = [c for c in _m100(d, "accelerator")["data"]["candidates"] if "--world-size 16" in c["flags"]]
    assert ws["set"] == ["gradient_accumulation_steps=1"] and "the same global batch, 64" in ws["change"], ws
    assert _batch_of(ws, {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "world": 8}) == 64
    again = _applied(args, ws)
    assert not [g for g in again["findings"] if g["code"] == "B001"], again["findings"]
    cfg = tmp_path / "ga1.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, '
                   '"zero_optimization": {"stage": 2}, "bf16": {"enabled": true}}')
    rc, d = run_json(["estimate", str(cfg)] + args[2:])
    (ws,) = [c for c in _m100(d, "accelerator")["data"]["candidates"] if "--world-size 16" in c["flags"]]
    assert ws["set"] == [] and "global batch grows from 32 to 64" in ws["change"], ws


def test_smaller_micro_batch_keeps_the_global_batch_when_an_integer_accumulation_does(tmp_path):
    """Micro-batch 3 x accumulation 1 x 8 ranks = 24 sequences per step (DeepSpeed
    _batch_assertion). Halving to micro-batch 1 at the same accumulation dropped it to 8; micro 1 x
    accumulation 3 keeps 24. Applied with the real CLI the candidate gives the need it claimed, no
    B001, and 1 x 3 x 8 = 24."""
    cfg = tmp_path / "m3.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 1, '
                   '"zero_optimization": {"stage": 2}, "bf16": {"enabled": true}}')
    args = ["estimate", str(cfg), "--model", "llama-3-8b", "--world-size", "8", "--gpu-memory", "60GB",
            "--seq-len", "2048", "--format", "json"]
    rc, d = run_json(args)
    (mb,) = [c for c in _m100(d, "accelerator")["data"]["candidates"] if c["change"].startswith("micro-batch")]
    assert mb["set"] == ["train_micro_batch_size_per_gpu=1", "gradient_accumulation_steps=3"], mb
    assert "the same global batch, 24 sequences" in mb["change"], mb
    assert _batch_of(mb, {"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 1, "world": 8}) == 24
    again = _applied(args, mb)
    row = _row(again, "accelerator")
    assert (row["verdict"], row["need"]) == (mb["verdicts"]["accelerator"], mb["need"]["accelerator"])
    assert not [g for g in again["findings"] if g["code"] == "B001"], again["findings"]


def _trainer_candidates_applied(args: list[str]) -> list[dict]:
    """Every M100 candidate of ``args`` applied with the real CLI: no H001 (the Trainer accepts the
    change), the verdict and need it claimed; returns the candidates."""
    rc, d = run_json(args)
    cands = _m100(d, "accelerator")["data"]["candidates"]
    assert rc == 1 and cands, d
    for c in cands:
        again = _applied(args, c)
        assert not [g for g in again["findings"] if g["code"] == "H001"], (c, again["findings"])
        row = _row(again, "accelerator")
        assert (row["verdict"], row["need"]) == (c["verdicts"]["accelerator"], c["need"]["accelerator"]), (c, row)
        if c["verdict"] == "fits":
            assert not [g for g in again["findings"] if g["code"] == "M100"], (c, again["findings"])
    return cands


def test_trainer_fixes_for_explicit_batch_keys_name_the_trainer_arguments_too(tmp_path):
    """Under --hf a config with explicit micro-batch 8 and accumulation 2 (the Trainer's
    --gradient-accumulation-steps 2 and default per-device 8 agree with them). The micro-batch
    candidate was `--set train_micro_batch_size_per_gpu=4 --set gradient_accumulation_steps=4`
    alone, which the Trainer then refuses (H001: ds 4 vs hf 8, transformers trainer_config_process
    fill_match). Now the --set and the Trainer arguments with the same values; more ranks, the
    accumulation as both. Applied, every candidate raises no H001, and a fitting one clears M100."""
    cfg = tmp_path / "hfx.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2, '
                   '"zero_optimization": {"stage": 2}, "bf16": {"enabled": true}}')
    args = ["estimate", str(cfg), "--hf", "--bf16", "--gradient-accumulation-steps", "2", "--model", "llama-3-8b",
            "--world-size", "8", "--gpu-memory", "100GB", "--seq-len", "1024", "--format", "json"]
    by = {c["change"].split(" (")[0]: c for c in _trainer_candidates_applied(args)}
    mb = by["micro-batch 4 with gradient accumulation 4"]
    assert mb["set"] == ["train_micro_batch_size_per_gpu=4", "gradient_accumulation_steps=4"], mb
    assert mb["flags"] == ["--per-device-train-batch-size 4", "--gradient-accumulation-steps 4"], mb
    assert mb["verdict"] == "fits", mb
    (ws,) = [c for c in by.values() if "--world-size 16" in c["flags"]]
    assert ws["set"] == ["gradient_accumulation_steps=1"] and "--gradient-accumulation-steps 1" in ws["flags"], ws


def _acc_yaml_estimate(tmp_path):
    """(yaml path, estimate args) of the accelerate case the tests below share: a YAML built from
    its fields (ZeRO-2, gradient_accumulation_steps 4, bf16, 8 processes), llama-3-8b on 100 GB."""
    src = tmp_path / "acc.yaml"
    src.write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n"
                   "  gradient_accumulation_steps: 4\nmixed_precision: bf16\nnum_processes: 8\n")
    return src, ["estimate", str(src), "--bf16", "--gradient-accumulation-steps", "4", "--model", "llama-3-8b",
                 "--gpu-memory", "100GB", "--seq-len", "1024", "--format", "json"]


def test_accelerate_file_fixes_name_trainer_arguments_not_a_refused_set(tmp_path):
    """An accelerate YAML built from its fields (ZeRO-2, gradient_accumulation_steps 4, bf16, 8
    processes): accelerate's config leaves the micro-batch "auto" (DeepSpeedPlugin) for the Trainer
    to fill. The micro-batch candidate was `--set train_micro_batch_size_per_gpu=4 ...`, an explicit
    4 the Trainer then refuses against its per-device 8 (H001); now it is
    --per-device-train-batch-size 4 with the accumulation as --set (the YAML's value) and as the
    Trainer's argument. Applied, every candidate raises no H001, and a fitting one clears M100."""
    _, args = _acc_yaml_estimate(tmp_path)
    cands = _trainer_candidates_applied(args)
    (mb,) = [c for c in cands if c["change"].startswith("micro-batch")]
    assert mb["set"] == ["gradient_accumulation_steps=8"], mb
    assert mb["flags"] == ["--per-device-train-batch-size 4", "--gradient-accumulation-steps 8"], mb
    assert mb["verdict"] == "fits" and "the same global batch, 256 sequences" in mb["change"], mb


def test_accelerate_fixes_as_yaml_edits_fit_when_the_yaml_is_edited(tmp_path):
    """For a config accelerate builds from the YAML's fields, a fix's config changes are named as
    the YAML fields the user edits (deepspeed_config.gradient_accumulation_steps: 8, ...: the
    fields accelerate's DeepSpeedPlugin writes those keys from). Written into a copy of the YAML
    and run with the candidate's flags (no --set), each gives the need it claimed and no H001."""
    import yaml

    src, args = _acc_yaml_estimate(tmp_path)
    rc, d = run_json(args)
    f = _m100(d, "accelerator")
    edited = [c for c in f["data"]["candidates"] if c["yaml"]]
    assert {tuple(c["yaml"]) for c in edited} >= {("deepspeed_config.gradient_accumulation_steps: 8",),
                                                 ("deepspeed_config.zero_stage: 3",),
                                                 ("deepspeed_config.offload_optimizer_device: cpu",)}, edited
    for i, c in enumerate(edited):
        data = yaml.safe_load(src.read_text())
        for e in c["yaml"]:
            k, _, v = e.partition(": ")
            data["deepspeed_config"][k.split(".", 1)[1]] = yaml.safe_load(v)
        alt = tmp_path / f"alt{i}.yaml"
        alt.write_text(yaml.safe_dump(data))
        again = _applied([args[0], str(alt)] + args[2:], dict(c, set=[]))
        assert not [g for g in again["findings"] if g["code"] == "H001"], (c, again["findings"])
        row = _row(again, "accelerator")
        assert (row["verdict"], row["need"]) == (c["verdicts"]["accelerator"], c["need"]["accelerator"]), (c, row)
        if c["verdict"] in ("fits", "tight"):
            assert " ".join(c["yaml"]) in f["fix"] or ", ".join(c["yaml"]) in f["fix"], (c["yaml"], f["fix"])


def test_fits_on_its_own_only_when_the_candidate_fits_every_tier():
    """Issue #19 (newcomer 5): llama-3-70b, zero3_cpu_offload, 8 x 80GB, 512GB host: the accelerator
    M100 said '--checkpointing full ... fits on its own' while that candidate's own re-estimate
    (data.candidates[].verdicts) leaves the host short. The fix may say 'fits on its own' only for a
    candidate whose every tier fits; otherwise it names the tier it fixes and the one still short."""
    rc, d = run_json(["estimate", str(SAMPLES / "zero3_cpu_offload.json"), "--model", "llama-3-70b", "--world-size",
                      "8", "--gpus-per-node", "8", "--gpu-memory", "80GB", "--host-memory", "512GB", "--format", "json"])
    m = _m100(d, "accelerator")
    offered = [c for c in m["data"]["candidates"] if c["verdicts"]["accelerator"] == "fits"]
    assert offered and any(c["verdicts"].get("host") == "does not fit" for c in offered), m["data"]["candidates"]
    assert "fits on its own (" not in m["fix"] and "fits the accelerator on its own" in m["fix"], m["fix"]
    assert "host still short" in m["fix"]


def test_host_shortfall_offers_the_optimizer_to_the_hardware_nvme_and_a_pair_that_fits(tmp_path):
    # Issue 19 newcomer: ZeRO-3 with the optimizer and parameters on host, Llama-3-70B on a DGX H100
    # (8 x 80 GB, NVMe at /raid) with 512 GB of host memory. The config names no nvme_path, yet the
    # spec's NVMe tier is one: the optimizer to /raid is a candidate (host fits, the accelerator
    # stays short: activations), and no single change fits every tier, so the pairs are tried;
    # the NVMe optimizer with full checkpointing fits. Each, applied through the CLI (--set with
    # the path, the flags), gives the verdicts and needs claimed, byte for byte, on every tier.
    args = ["estimate", str(SAMPLES / "zero3_cpu_offload.json"), "--model", "llama-3-70b", "--hardware", "dgx-h100",
            "--host-memory", "512GB", "--world-size", "8", "--seq-len", "4096", "--format", "json"]
    rc, d = run_json(args)
    host = _m100(d, "host")
    (nv,) = [c for c in host["data"]["candidates"] if "zero_optimization.offload_optimizer.device=nvme" in c["set"]]
    assert "zero_optimization.offload_optimizer.nvme_path=/raid" in nv["set"]
    assert nv["verdicts"]["host"] == "fits" and nv["verdicts"]["accelerator"] == "does not fit"
    assert not any(c["verdict"] == "fits" for c in host["data"]["candidates"])  # no single change fits all
    pairs = host["data"]["pairs"]
    assert pairs and all(p["verdict"] == "fits" and p["combined"] for p in pairs)
    best = pairs[0]
    assert set(best["set"]) == set(nv["set"]) and best["flags"] == ["--checkpointing full"]
    steps = [p["step_time_s"] for p in pairs]
    assert steps == sorted(steps)
    for c in (nv, best):
        again = _applied(args, c)
        assert {r["tier"]: (r["verdict"], r["need"]) for r in again["fit"]} == \
            {t: (c["verdicts"][t], c["need"][t]) for t in c["verdicts"]}, c
    how = " ".join([f"--set {x}" for x in best["set"]] + best["flags"])
    assert how in host["fix"] and how in _m100(d, "accelerator")["fix"]
    assert "no single change fits" not in host["fix"]


def test_no_nvme_candidate_without_a_path_from_the_config_or_the_hardware():
    # the same shortfall on 80 GB / 512 GB given as sizes: no NVMe tier is known, so no NVMe
    # candidate (DeepSpeed needs an nvme_path: O003), and the pairs tried fit nothing or fit
    args = ["estimate", str(SAMPLES / "zero3_cpu_offload.json"), "--model", "llama-3-70b", "--gpu-memory", "80GB",
            "--host-memory", "512GB", "--world-size", "8", "--gpus-per-node", "8", "--seq-len", "4096",
            "--format", "json"]
    rc, d = run_json(args)
    host = _m100(d, "host")
    assert not [c for c in host["data"]["candidates"] + host["data"].get("pairs", [])
                if any("nvme" in s for s in c["set"])]
    for c in host["data"].get("pairs", []):
        again = _applied(args, c)
        assert {r["tier"]: (r["verdict"], r["need"]) for r in again["fit"]} == \
            {t: (c["verdicts"][t], c["need"][t]) for t in c["verdicts"]}, c


def test_trainer_checkpointing_names_gradient_checkpointing_and_accelerate_names_its_processes(tmp_path):
    """Under the HF Trainer the checkpointing candidate names what the Trainer takes,
    --gradient_checkpointing (TrainingArguments.gradient_checkpointing; the Trainer never reads the
    config's activation_checkpointing), and --checkpointing full, how this tool re-estimates it; on
    an accelerate file another node is its num_processes / num_machines (the world size the launch
    reads), not --world-size. Each, applied (flag; YAML fields edited), gives the need claimed."""
    cfg = tmp_path / "hf.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", '
                   '"train_batch_size": "auto", "zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}}')
    args = ["estimate", str(cfg), "--hf", "--bf16", "--model", "llama-3-8b", "--world-size", "8", "--gpu-memory",
            "40GB", "--seq-len", "2048", "--per-device-train-batch-size", "8", "--format", "json"]
    rc, d = run_json(args)
    (ck,) = [c for c in _m100(d, "accelerator")["data"]["candidates"] if c["flags"] == ["--checkpointing full"]]
    assert "--gradient_checkpointing" in ck["change"], ck
    row = _row(_applied(args, ck), "accelerator")
    assert (row["verdict"], row["need"]) == (ck["verdicts"]["accelerator"], ck["need"]["accelerator"])

    src, args = _acc_yaml_estimate(tmp_path)
    rc, d = run_json(args)
    f = _m100(d, "accelerator")
    (node,) = [c for c in f["data"]["candidates"] if c["launch"]]
    assert node["launch"] == ["num_processes: 16", "num_machines: 2"], node
    assert not any(x.startswith("--world-size") for x in node["flags"]), node
    again = _applied(args, node)
    row = _row(again, "accelerator")
    assert (row["verdict"], row["need"]) == (node["verdicts"]["accelerator"], node["need"]["accelerator"])
    ck = [c for c in f["data"]["candidates"] if c["flags"] == ["--checkpointing full"]]
    assert all("--gradient_checkpointing" in c["change"] for c in ck), ck


def test_accelerate_pair_as_yaml_edits_fits_every_tier_when_applied(tmp_path):
    """The newcomer's shortfall as an accelerate YAML (ZeRO-3, optimizer and parameters on host, 8
    processes) on dgx-h100 with 512 GB host: with 8 single candidates the pairs start from those
    that fit a short tier, so the optimizer to /raid with checkpointing is found; written into a
    copy of the YAML and run with its flag, every tier gives the verdict and need claimed."""
    import yaml

    src = tmp_path / "acc.yaml"
    src.write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n  offload_optimizer_device: cpu\n"
                   "  offload_param_device: cpu\n  gradient_accumulation_steps: 8\nmixed_precision: bf16\n"
                   "num_processes: 8\n")
    args = ["estimate", str(src), "--model", "llama-3-70b", "--hardware", "dgx-h100", "--host-memory", "512GB",
            "--seq-len", "4096", "--bf16", "--gradient-accumulation-steps", "8", "--per-device-train-batch-size", "1",
            "--format", "json"]
    rc, d = run_json(args)
    f = _m100(d, "host")
    (half,) = [c for c in f["data"]["candidates"] if c["change"].startswith("4 ranks per node")]
    assert half["launch"] == ["num_machines: 2"] and not half["flags"], half  # 8 processes on 2 machines
    again = _applied(args, half)
    assert {r["tier"]: (r["verdict"], r["need"]) for r in again["fit"]} == \
        {t: (half["verdicts"][t], half["need"][t]) for t in half["verdicts"]}, half
    best = f["data"]["pairs"][0]
    assert "deepspeed_config.offload_optimizer_nvme_path: /raid" in best["yaml"] and \
        best["flags"] == ["--checkpointing full"], best
    data = yaml.safe_load(src.read_text())
    for e in best["yaml"]:
        k, _, v = e.partition(": ")
        data["deepspeed_config"][k.split(".", 1)[1]] = yaml.safe_load(v)
    alt = tmp_path / "alt.yaml"
    alt.write_text(yaml.safe_dump(data))
    again = _applied([args[0], str(alt)] + args[2:], dict(best, set=[]))
    assert {r["tier"]: (r["verdict"], r["need"]) for r in again["fit"]} == \
        {t: (best["verdicts"][t], best["need"][t]) for t in best["verdicts"]}, best
