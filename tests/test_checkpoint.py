"""Durable checkpoints (advisor.ledger.checkpoint): file names, tensor bytes, timing and interval arithmetic.

Expected values are worked out by hand from the cited formulas (reference
../shared/reference/deepspeed-0.19.8-state-accounting.md section 3 and 6, the Young/Daly first-order
interval), or are engine measurements quoted from section 6; the engine itself is exercised in
tests/engine/test_checkpoint_engine.py.
"""

from __future__ import annotations

import json
import math
import os

import pytest
from click.testing import CliRunner

from advisor.ledger.checkpoint import (RECOVERY_SCRIPTS, checkpoint_files, checkpoint_plan, cluster_mtbf, lost_fraction,
                                recovery_cost, save_16bit_model_plan, transfer_time, young_daly_interval)
from advisor.cli import main
from advisor.config.effective import effective_config
from advisor.model.inventory import Inventory, TensorSpec, from_param_count
from advisor.ledger.state import Cluster, Plan, zero3_sub_groups, zero12_group_layout

from tests.conftest import CASES as _CASES  # noqa: E402  (tests/data/cases)
CASES = str(_CASES)
C09 = os.path.join(CASES, "C09-checkpoint-size-8b")


def mlp(widths=(64, 301, 77, 5)) -> Inventory:
    """The reference's odd-sized MLP (n = [19264, 301, 23177, 77, 385, 5], N = 43 209)."""
    ts = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        ts += [TensorSpec(f"{2 * i}.weight", (b, a)), TensorSpec(f"{2 * i}.bias", (b,))]
    return Inventory("mlp", ts)


def files_of(cfg, inv, world_size, tag="ckpt"):
    return {f.path: f.bytes for f in checkpoint_files(Plan(effective_config(cfg), inv, Cluster(world_size=world_size)), tag=tag).files}


# ------------------------------------------------------------------------------------------------
# interval arithmetic, by hand

def test_cluster_mtbf_is_node_mtbf_over_nodes():
    # 10,000 h per node, 16 nodes -> 625 h = 2,250,000 s
    assert cluster_mtbf(10_000 * 3600, 16) == pytest.approx(2_250_000.0)


def test_young_daly_interval_by_hand():
    # save 100 s, MTBF 2,250,000 s: sqrt(2 * 100 * 2.25e6) = sqrt(4.5e8) = 21,213.203 s
    assert young_daly_interval(100.0, 2_250_000.0) == pytest.approx(21_213.2034, abs=1e-4)


def test_lost_fraction_by_hand_and_balanced_at_the_optimum():
    tau = 21_213.2034356
    lf = lost_fraction(tau, 100.0, 2_250_000.0, 600.0)
    assert lf["saving"] == pytest.approx(100 / 21_213.2034356)        # 0.4714 %
    assert lf["rework"] == pytest.approx(21_213.2034356 / 4_500_000)  # 0.4714 %
    assert lf["restart"] == pytest.approx(600 / 2_250_000)            # 0.0267 %
    assert lf["total"] == pytest.approx(0.0047140 + 0.0047140 + 0.00026667, rel=1e-4)
    # at the Young/Daly optimum the saving and rework terms are equal (d/dtau of their sum = 0)
    assert lf["saving"] == pytest.approx(lf["rework"])
    # any other interval loses more
    assert lost_fraction(tau / 2, 100.0, 2_250_000.0, 600.0)["total"] > lf["total"]
    assert lost_fraction(tau * 2, 100.0, 2_250_000.0, 600.0)["total"] > lf["total"]


def test_recovery_cost_by_hand():
    rc = recovery_cost(restart_s=300.0, load_s=56.0, interval_s=3600.0)
    assert rc["expected_total"] == 300 + 56 + 1800
    assert rc["worst_total"] == 300 + 56 + 3600


def test_transfer_time():
    assert transfer_time(112_423_657_472, 2e9) == pytest.approx(56.211828736)
    with pytest.raises(ValueError):
        transfer_time(1, 0)


def test_plan_resilience_chain_by_hand():
    # stage 0 fp32, 1e6 params -> one 12 MB model file
    ec = effective_config({"train_micro_batch_size_per_gpu": 1})
    plan = checkpoint_plan(Plan(ec, from_param_count(1_000_000), Cluster(world_size=16, gpus_per_node=8)),
                           write_bandwidth=1e6, node_mtbf_hours=1000, restart_s=60, step_time_s=2.0, keep=2)
    # file: module 4 MB + 2 moments 8 MB = 12,000,000 B (+ latest 16 B) -> 12.000016 s at 1 MB/s
    assert plan.per_save_bytes == 12_000_000 + 16
    assert plan.nodes == 2
    res = plan.resilience()
    mtbf = 1000 * 3600 / 2
    assert res["cluster_mtbf_s"] == mtbf
    tau = math.sqrt(2 * 12.000016 * mtbf)
    assert res["interval_s"] == pytest.approx(tau)
    assert res["interval_steps"] == round(tau / 2.0)
    # reload: stage 0 model file is read by all 16 ranks (engine._load_checkpoint on every rank)
    assert plan.load_s == pytest.approx((12_000_000 * 16 + 16) / 1e6)
    assert res["lost_fraction"]["restart"] == pytest.approx((60 + plan.load_s) / mtbf)
    # kept: the tag folder twice, `latest` once
    assert plan.kept_bytes == 2 * 12_000_000 + 16


# ------------------------------------------------------------------------------------------------
# partition helpers (§3)

def test_zero12_layout_reference_example():
    # §3.1: N = 43 209, W = 2 -> N_pad = 43 212, P = 21 606
    g = mlp().groups()[0]
    lay = zero12_group_layout([t.numel for t in g], 2, 2, False)
    assert (lay.n, lay.n_pad, lay.P) == (43_209, 43_212, 21_606)


def test_zero3_sub_groups_reference_example():
    # §3.2: sub_group_size = 10 000, W = 2 -> S = [21 372, 235]
    inv = mlp()
    subs = zero3_sub_groups(inv, 2, 10_000)
    sizes = [sum(-(-inv.tensors[i].numel // 2) for i in s.tensors) for s in subs]
    assert sizes == [21_372, 235] == [s.numel for s in subs]


# ------------------------------------------------------------------------------------------------
# files per stage (by hand from §6; the W = 2 figures are engine measurements of §6 / tests/engine)

ADAM = {"type": "AdamW", "params": {"lr": 1e-3}}


def test_stage0_fp32_single_file():
    # module 43 209 x 4 + exp_avg/exp_avg_sq 2 x 43 209 x 4 = 518 508; FusedAdam step is a python int
    assert files_of({"optimizer": ADAM}, mlp(), 2) == {"ckpt/mp_rank_00_model_states.pt": 518_508, "latest": 4}


def test_stage0_bf16_unfused_torch_adam_step_tensors():
    # 14 x 43 209 = 604 926 + 6 param tensors x 4 B step = 604 950
    cfg = {"bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"torch_adam": True}}}
    assert files_of(cfg, mlp(), 1)["ckpt/mp_rank_00_model_states.pt"] == 604_950


def test_stage2_bf16_names_and_bytes():
    f = files_of({"bf16": {"enabled": True}, "zero_optimization": {"stage": 2}, "optimizer": ADAM}, mlp(), 2)
    assert f == {
        "ckpt/mp_rank_00_model_states.pt": 43_212 * 2,  # the padded flat buffer: 86 424
        "ckpt/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt": 12 * 21_606,  # 259 272
        "ckpt/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt": 12 * 21_606,
        "zero_to_fp32.py": RECOVERY_SCRIPTS["zero_to_fp32.py"], "zero_to_torch.py": RECOVERY_SCRIPTS["zero_to_torch.py"],
        "latest": 4,
    }


def test_stage1_fp16_torch_adam_has_step_and_no_bf16_prefix():
    f = files_of({"fp16": {"enabled": True}, "zero_optimization": {"stage": 1},
                  "optimizer": {"type": "AdamW", "params": {"torch_adam": True}}}, mlp(), 2)
    assert f["ckpt/zero_pp_rank_1_mp_rank_00_optim_states.pt"] == 12 * 21_606 + 4


def test_stage3_names_bytes_and_writers():
    ec = effective_config({"bf16": {"enabled": True}, "zero_optimization": {"stage": 3}, "optimizer": ADAM})
    res = checkpoint_files(Plan(ec, mlp(), Cluster(world_size=2)), tag="ckpt")
    by = {f.path: f for f in res.files}
    # P3 = sum ceil(n_i / 2) = 21 607; 12 x P3 = 259 284
    for r in (0, 1):
        assert by[f"ckpt/zero_pp_rank_{r}_mp_rank_00_model_states.pt"].bytes == 0
        assert by[f"ckpt/zero_pp_rank_{r}_mp_rank_00_model_states.pt"].rank == r
        assert by[f"ckpt/bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt"].bytes == 259_284


def test_stage3_nvme_offloaded_tensors():
    inv = mlp((1024, 1031, 1029))
    cfg = {"bf16": {"enabled": True}, "optimizer": ADAM,
           "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}}}
    f = files_of(cfg, inv, 2)
    # S = 527 872 + 516 + 530 450 + 515 = 1 059 353 -> A_256 = 1 059 584 -> x 4 = 4 238 336 (§6 measured)
    for r in ("00", "01"):
        for nm in ("0_3", "exp_avg-0_3", "exp_avg_sq-0_3"):
            assert f[f"ckpt/offloaded_tensors/rank{r}/{nm}.tensor.swp"] == 4_238_336
    assert f["ckpt/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"] == 0


def test_unsupported_config_saves_nothing():
    ec = effective_config({"bf16": {"enabled": True}, "data_types": {"grad_accum_dtype": "fp32"}})
    res = checkpoint_files(Plan(ec, mlp(), Cluster(world_size=1)))
    assert res.files == [] and res.unsupported


def test_save_16bit_model_stage3():
    cl = Cluster(world_size=2)
    off = save_16bit_model_plan(Plan(effective_config({"bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}),
                                     mlp(), cl))
    assert off.writes is False and off.bytes == 0
    on = save_16bit_model_plan(Plan(effective_config({"bf16": {"enabled": True}, "zero_optimization": {
        "stage": 3, "stage3_gather_16bit_weights_on_model_save": True}}), mlp(), cl))
    assert on.writes and on.bytes == 43_209 * 2
    # largest module gathered: layer "2" = 77 x 301 + 77 -> (11 589 + 39) x 2 ranks x 2 B = 46 512
    assert on.gather_accelerator_bytes == (11_589 + 39) * 2 * 2
    assert on.host_bytes_rank0 == 43_209 * 2


def test_world_size_change_note():
    z2 = checkpoint_plan(Plan(effective_config({"zero_optimization": {"stage": 2}}), mlp(), Cluster(world_size=4)))
    assert any("universal" in n for n in z2.to_dict()["notes"])
    z0 = checkpoint_plan(Plan(effective_config({}), mlp(), Cluster(world_size=4)))
    assert not any("ds_to_universal" in n for n in z0.to_dict()["notes"])


# ------------------------------------------------------------------------------------------------
# C09-checkpoint-size-8b

def _c09_figures():
    with open(os.path.join(C09, "expect.json")) as fh:
        return {f["name"]: f for f in json.load(fh)["figures"]}


def test_case_C09_checkpoint_size_8b():
    """8,030,261,248 params, W = 1, ZeRO-2 bf16 CPU offload: 2 B/param model file, 12 B/param optim file."""
    fig = _c09_figures()
    r = CliRunner().invoke(main, ["checkpoint", os.path.join(C09, "config.json"), "--params", "8030261248",
                                  "--world-size", "1", "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    files = {f["name"]: f["bytes"] for f in d["files"]}
    model = files["mp_rank_00_model_states.pt"]
    optim = files["bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"]
    assert model == pytest.approx(16_060_522_496, rel=0.02)
    assert optim == pytest.approx(96_363_134_976, rel=0.02)
    assert model == pytest.approx(fig["model-states file bytes"]["value"], rel=fig["model-states file bytes"]["rel_tol"])
    assert optim == pytest.approx(fig["optimizer-states file bytes"]["value"],
                                  rel=fig["optimizer-states file bytes"]["rel_tol"])
    # total per save about 112.4 GB (104.7 GiB)
    assert d["per_save_bytes"] == pytest.approx(112.4e9, rel=0.001)
    assert sorted(files) == sorted(["mp_rank_00_model_states.pt", "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt",
                                    "zero_to_fp32.py", "zero_to_torch.py", "latest"])


def test_checkpoint_cli_text_and_bad_bandwidth():
    cfg = os.path.join(C09, "config.json")
    r = CliRunner().invoke(main, ["checkpoint", cfg, "--params", "1000000", "--write-bandwidth", "2GB/s",
                                  "--node-mtbf-hours", "20000", "--world-size", "8"])
    assert r.exit_code == 0, r.output
    assert "Young/Daly" in r.output and "bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt" in r.output
    r = CliRunner().invoke(main, ["checkpoint", cfg, "--params", "10", "--write-bandwidth", "fast"])
    assert r.exit_code == 2


def test_largest_writer_and_plan_entry_point_by_hand():
    from advisor.ledger.checkpoint import checkpoint_for
    from advisor.ledger.state import Plan

    ec = effective_config({"bf16": {"enabled": True}, "zero_optimization": {"stage": 2}, "optimizer": ADAM})
    d = checkpoint_for(Plan(ec, mlp(), Cluster(world_size=4))).to_dict()
    # W = 4: N_pad = A_8(43 209) = 43 216, P = 10 804. Rank 0: model 43 216 x 2 = 86 432, its optim file
    # 12 x 10 804 = 129 648, the two scripts 38 580 + 2 490 and `latest` (len("global_step") + 5 = 16).
    assert d["largest_writer"]["rank"] == 0
    assert d["largest_writer"]["bytes"] == 86_432 + 129_648 + 38_580 + 2_490 + 16
    assert d["per_rank_bytes"]["3"] == 129_648
    assert d["per_save_bytes"] == 86_432 + 4 * 129_648 + 38_580 + 2_490 + 16


# ------------------------------------------------------------------------------------------------
# the save dir's storage tier (--hardware --save-dir): bandwidth defaults, wear per day, T003

#: Bytes per save of C09 (8,030,261,248 params, ZeRO-2 bf16, W = 1): model-states 16,060,522,496 +
#: optim-states 96,363,134,976 + zero_to_fp32.py 38,580 + zero_to_torch.py 2,490 + latest 16.
C09_PER_SAVE = 16_060_522_496 + 96_363_134_976 + 38_580 + 2_490 + 16


def _ckpt_hw(tmp_path, nodes=1):
    """One read-oriented tier (30.72 TB, 0.5 DWPD x 5 years, write 3 GB/s, read 7 GB/s) and one
    read-write tier (3.84 TB, 7,008 TBW over 5 years, write 6 GB/s, read 12 GB/s)."""
    spec = {"name": "ckpt-test", "nodes": nodes, "accelerators_per_node": 8, "accelerator": "h100-sxm-80gb",
            "storage": [
                {"name": "qlc", "mounts": ["/mnt/qlc"], "capacity_bytes": 30.72e12, "read_bytes_per_s": 7e9,
                 "write_bytes_per_s": 3e9, "access": "read-oriented",
                 "endurance": {"dwpd": 0.5, "warranty_years": 5}},
                {"name": "raid", "mounts": ["/raid"], "capacity_bytes": 3.84e12, "read_bytes_per_s": 12e9,
                 "write_bytes_per_s": 6e9, "access": "read-write", "endurance": {"tbw": 7008, "warranty_years": 5}}]}
    p = tmp_path / "hw.json"
    p.write_text(json.dumps(spec))
    return str(p)


def _c09_ckpt(*extra):
    r = CliRunner().invoke(main, ["checkpoint", os.path.join(C09, "config.json"), "--params", "8030261248",
                                  "--world-size", "1", "--format", "json", *extra])
    return r.exit_code, (json.loads(r.output) if r.output.startswith("{") else r.output)


def test_c09_save_dir_on_read_oriented_tier_is_T003_error_within_warranty(tmp_path):
    hw = _ckpt_hw(tmp_path)
    rc, d = _c09_ckpt("--hardware", hw, "--save-dir", "/mnt/qlc/ckpt", "--save-interval", "600")
    assert d["per_save_bytes"] == C09_PER_SAVE == 112_423_698_558
    # bandwidths from the tier: 112,423,698,558 / 3e9 = 37.4745661860 s; read 1 reader x the same / 7e9
    assert d["write_bandwidth"] == 3e9 and d["read_bandwidth"] == 7e9
    assert d["save_s"] == pytest.approx(37.474566186, rel=1e-9)
    assert d["load_s"] == pytest.approx(16.060528365, rel=1e-9)
    # 600 s interval: 86,400 / 600 = 144 saves/day x 112,423,698,558 = 16,189,012,592,352 B/day;
    # rated 0.5 DWPD x 30.72e12 x 365 x 5 = 2.8032e16 B -> 2.8032e16 / 16,189,012,592,352 = 1,731.54 days,
    # under the 5 x 365 = 1,825-day warranty: an error, exit 1.
    st = d["storage"]
    assert st["tier"] == "qlc" and st["access"] == "read-oriented"
    assert st["bytes_written_per_save"] == 112_423_698_558
    assert st["saves_per_day"] == 144
    assert st["bytes_written_per_day"] == pytest.approx(16_189_012_592_352, rel=1e-12)
    assert st["rated_write_bytes"] == pytest.approx(2.8032e16)
    assert st["days_of_life"] == pytest.approx(1731.54, abs=0.01)
    assert st["endurance_used_per_day"] == pytest.approx(16_189_012_592_352 / 2.8032e16)  # 0.0578 % a day
    assert st["warranty_days"] == 1825
    t3 = [f for f in d["findings"] if f["code"] == "T003"]
    assert len(t3) == 1 and t3[0]["severity"] == "error"
    assert set(t3[0]) >= {"code", "severity", "pointer", "line", "column", "message", "fix"}
    assert t3[0]["data"]["bytes_written_per_save"] == 112_423_698_558
    assert "112,423,698,558 bytes" in t3[0]["message"] and "1,731.5 days" in t3[0]["message"]
    assert "read-write tier" in t3[0]["fix"] and "weights and datasets" in t3[0]["fix"]
    assert rc == 1


def test_c09_read_oriented_at_young_daly_interval_is_a_warning(tmp_path):
    hw = _ckpt_hw(tmp_path)
    rc, d = _c09_ckpt("--hardware", hw, "--save-dir", "/mnt/qlc/ckpt", "--node-mtbf-hours", "1000")
    # save 37.4745661860 s at 3 GB/s; 1 node x 1,000 h -> MTBF 3.6e6 s;
    # interval sqrt(2 x 37.4745661860 x 3.6e6) = sqrt(269,816,876.5) = 16,426.1 s -> 86,400 / 16,426.1 =
    # 5.2599 saves/day -> 5.9134e11 B/day; 2.8032e16 / 5.9134e11 = 47,404 days, beyond the 1,825-day
    # warranty: a warning, exit 0.
    tau = math.sqrt(2 * (112_423_698_558 / 3e9) * 3.6e6)
    assert tau == pytest.approx(16_426.1, abs=0.1)
    st = d["storage"]
    assert st["interval_source"] == "Young/Daly" and st["save_interval_s"] == pytest.approx(tau)
    assert st["bytes_written_per_day"] == pytest.approx(112_423_698_558 * 86_400 / tau)
    assert st["days_of_life"] == pytest.approx(2.8032e16 / (112_423_698_558 * 86_400 / tau))
    assert st["days_of_life"] == pytest.approx(47_404.2, abs=0.5)
    t3 = [f for f in d["findings"] if f["code"] == "T003"]
    assert len(t3) == 1 and t3[0]["severity"] == "warning"
    assert rc == 0


def test_c09_save_dir_on_read_write_tier_takes_its_bandwidth_and_has_no_T003(tmp_path):
    hw = _ckpt_hw(tmp_path)
    rc, d = _c09_ckpt("--hardware", hw, "--save-dir", "/raid/ckpt", "--save-interval", "600")
    assert rc == 0 and d["findings"] == []
    # 112,423,698,558 / 6e9 = 18.737283093 s; restart reads the same bytes at 12e9: 9.3686415465 s
    assert d["write_bandwidth"] == 6e9 and d["read_bandwidth"] == 12e9
    assert d["save_s"] == pytest.approx(18.737283093, rel=1e-9)
    assert d["load_s"] == pytest.approx(9.3686415465, rel=1e-9)
    # wear is still reported: 16,189,012,592,352 B/day against 7,008 TBW = 7.008e15 B -> 432.886 days,
    # 0.231 % of the rating a day, 16,189,012,592,352 / 3.84e12 = 4.216 drive writes a day
    st = d["storage"]
    assert st["tier"] == "raid" and st["access"] == "read-write"
    assert st["days_of_life"] == pytest.approx(432.886, abs=0.001)
    assert st["endurance_used_per_day"] == pytest.approx(0.0023101, abs=1e-7)
    assert st["drive_writes_per_day"] == pytest.approx(4.2159, abs=1e-4)
    r = CliRunner().invoke(main, ["checkpoint", os.path.join(C09, "config.json"), "--params", "8030261248",
                                  "--world-size", "1", "--hardware", hw, "--save-dir", "/raid/ckpt",
                                  "--save-interval", "600", "--units", "GB"], env={"COLUMNS": "400"})
    assert r.exit_code == 0 and "T003" not in r.output
    assert "tier 'raid' [read-write]" in r.output and "16.189 TB written per day" in r.output
    # the default unit system: 16,189,012,592,352 B / 2^40 = 14.724 TiB
    r = CliRunner().invoke(main, ["checkpoint", os.path.join(C09, "config.json"), "--params", "8030261248",
                                  "--world-size", "1", "--hardware", hw, "--save-dir", "/raid/ckpt",
                                  "--save-interval", "600"], env={"COLUMNS": "400"})
    assert "14.724 TiB written per day" in r.output and " TB " not in r.output
    assert "0.231% of the drive's rated endurance per day" in r.output


def test_write_bandwidth_flag_beats_the_tier(tmp_path):
    hw = _ckpt_hw(tmp_path)
    rc, d = _c09_ckpt("--hardware", hw, "--save-dir", "/mnt/qlc/ckpt", "--write-bandwidth", "2GB/s")
    # 112,423,698,558 / 2e9 = 56.211849279 s, not the tier's 3 GB/s; read still from the tier (7e9)
    assert d["write_bandwidth"] == 2e9 and d["read_bandwidth"] == 7e9
    assert d["save_s"] == pytest.approx(56.211849279, rel=1e-9)
    # no interval (no --save-interval, no MTBF): T003 still fires, without per-day figures, as a warning
    t3 = [f for f in d["findings"] if f["code"] == "T003"]
    assert len(t3) == 1 and t3[0]["severity"] == "warning" and "--save-interval" in t3[0]["message"]
    assert d["storage"]["bytes_written_per_day"] is None and rc == 0
    rc, d = _c09_ckpt("--hardware", hw, "--save-dir", "/raid/ckpt", "--read-bandwidth", "1GB/s")
    assert d["write_bandwidth"] == 6e9 and d["read_bandwidth"] == 1e9


def test_hardware_node_count_is_the_nodes_default(tmp_path):
    hw = _ckpt_hw(tmp_path, nodes=2)
    r = CliRunner().invoke(main, ["checkpoint", os.path.join(C09, "config.json"), "--params", "8030261248",
                                  "--world-size", "16", "--format", "json", "--hardware", hw,
                                  "--save-dir", "/raid/ckpt", "--node-mtbf-hours", "1000"])
    d = json.loads(r.output)
    assert d["nodes"] == 2 and d["resilience"]["cluster_mtbf_s"] == 1.8e6  # 3.6e6 s / 2 nodes
    assert d["storage"]["ranks_per_node"] == 8
    r = CliRunner().invoke(main, ["checkpoint", os.path.join(C09, "config.json"), "--params", "8030261248",
                                  "--world-size", "16", "--format", "json", "--hardware", hw, "--nodes", "4",
                                  "--save-dir", "/raid/ckpt", "--node-mtbf-hours", "1000"])
    assert json.loads(r.output)["resilience"]["cluster_mtbf_s"] == 9e5  # --nodes wins: 3.6e6 / 4


def test_busiest_node_bytes_by_hand():
    ec = effective_config({"bf16": {"enabled": True}, "zero_optimization": {"stage": 2}, "optimizer": ADAM})
    from advisor.cluster.hardware import from_dict
    hw = from_dict({"nodes": 2, "accelerators_per_node": 2, "accelerator": "h100-sxm-80gb",
                    "storage": [{"name": "nv", "mounts": ["/nv"], "capacity_bytes": 1e12, "read_bytes_per_s": 2e9,
                                 "write_bytes_per_s": 1e9, "access": "read-write"}]})
    plan = checkpoint_plan(Plan(ec, mlp(), Cluster(world_size=4)), hardware=hw, save_dir="/nv/ck")
    # W = 4 (see test_largest_writer...): node 0 = ranks 0, 1: model 86 432 + 2 x 129 648 + scripts
    # 38 580 + 2 490 + latest 16; node 1 = ranks 2, 3: 2 x 129 648.
    assert plan.node_bytes_per_save() == 86_432 + 2 * 129_648 + 38_580 + 2_490 + 16
    assert plan.storage()["endurance_used_per_day"] is None and plan.findings == []
    assert any("2 nodes write their own ranks' files in parallel" in n for n in plan.notes)
    # the save takes the busiest node's bytes over its own 1 GB/s tier, not the whole save over one
    assert plan.save_s == pytest.approx((86_432 + 2 * 129_648 + 38_580 + 2_490 + 16) / 1e9, rel=1e-9)


def test_save_dir_on_no_tier_is_a_note_not_a_finding(tmp_path):
    from advisor.cluster.hardware import load_hardware
    plan = checkpoint_plan(Plan(effective_config({"zero_optimization": {"stage": 1}, "optimizer": ADAM}), mlp(),
                                Cluster(world_size=1)), hardware=load_hardware(_ckpt_hw(tmp_path)), save_dir="/home/ck")
    assert plan.findings == [] and plan.write_bandwidth is None
    assert any("no storage tier" in n for n in plan.notes)


def test_explain_T003():
    r = CliRunner().invoke(main, ["explain", "T003"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("[T003 | checkpoint-on-read-oriented | severity: error]")
    assert "Anti-pattern" in r.output and "Fix" in r.output and "read-oriented" in r.output


def _agg_hw(scope: str, **kw):
    from advisor.cluster.hardware import from_dict as _fd
    tier = {"name": "t", "mounts": ["/ck"], "capacity_bytes": 1e13, "read_bytes_per_s": 20e9,
            "write_bytes_per_s": 10e9, "access": "read-write", "scope": scope, **kw}
    return _fd({"nodes": 2, "accelerators_per_node": 8, "accelerator": "h100-sxm-80gb", "storage": [tier]})


def test_save_time_node_local_tier_stripes_over_nodes_shared_tier_caps_per_client():
    # ZeRO-3 on 2 nodes x 8 ranks: each node writes its 8 ranks' files to its own tier in parallel.
    # The busiest node's bytes / 10 GB/s is the save time, i.e. the save runs at 10 GB/s x total /
    # busiest node (about 2x: the shares are equal up to rank 0's extra small files).
    from advisor.config.effective import effective_config as _ec
    from advisor.model.inventory import from_param_count as _fpc
    from advisor.ledger.state import Cluster as _Cl
    ec = _ec({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 3}})
    inv, cl = _fpc(1_000_000_000), _Cl(world_size=16, gpus_per_node=8)
    p = checkpoint_plan(Plan(ec, inv, cl), hardware=_agg_hw("node-local"), save_dir="/ck/run")
    per_node = {}
    for r, b in p.files.per_rank_bytes().items():
        per_node[r // 8] = per_node.get(r // 8, 0) + b
    assert p.save_s == pytest.approx(max(per_node.values()) / 10e9, rel=1e-9)
    assert 1.9 < p.write_bandwidth / 10e9 <= 2.0
    # shared: 10 GB/s aggregate, 2 GB/s per client: 2 clients -> min(10, 2 x 2) = 4 GB/s
    p = checkpoint_plan(Plan(ec, inv, cl), hardware=_agg_hw("shared", per_client_write_bytes_per_s=2e9), save_dir="/ck/r")
    assert p.write_bandwidth == 4e9 and p.read_bandwidth == 20e9
    assert p.save_s == pytest.approx(p.per_save_bytes / 4e9)


@pytest.mark.parametrize("units,base,name", [("GiB", 2**30, "GiB"), ("GB", 1e9, "GB")])
def test_checkpoint_files_column_is_one_unit_named_in_its_header(units, base, name):
    """The files table's size column is in one unit, --units', named in its header (it mixed B
    and GiB rows): C09's 8B model at 8 ranks, model states 8,030,261,248 x 2 B (bf16 module),
    each optim file P x 4 + 2 x P x 4 with P = 8,030,261,248 / 8 = 1,003,782,656; the scripts
    and ``latest`` are a few KB or bytes, shown as "<0.01", not as bytes in another unit."""
    r = CliRunner().invoke(main, ["checkpoint", os.path.join(C09, "config.json"), "--params", "8030261248",
                                  "--world-size", "8", "--units", units], env={"COLUMNS": "400"})
    lines = r.output.splitlines()
    k = next(i for i, x in enumerate(lines) if x.lstrip().startswith("file (under save_dir)"))
    assert lines[k].split()[-2:] == ["tensor", name], lines[k]
    rows = {x.split()[0]: x.split()[-1:] for x in lines[k + 1:k + 6]}
    p = 8_030_261_248 // 8
    assert rows["global_step{N}/mp_rank_00_model_states.pt"] == [f"{8_030_261_248 * 2 / base:.2f}"]
    assert rows["global_step{N}/bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt"] == [f"{p * 12 / base:.2f}"]
    assert "8 ranks, each" in next(x for x in lines[k + 1:k + 6] if "optim_states" in x)
    assert rows["zero_to_fp32.py"] == rows["latest"] == ["<0.01"]
    assert not any(u in " ".join(lines[k + 1:k + 6]) for u in (" B", "KB", "MB", "GiB", "GB", "MiB")), lines[k:k + 6]


def test_checkpoint_files_column_of_a_small_model_is_in_gib_as_the_state_table():
    """No file reaches 1 GiB: the column stays in GiB, two decimals, as the state table's (one
    rule for every column; it switched to MiB). 100,000,000 bf16 parameters, ZeRO-2 on 1 rank:
    the model states file holds the 16-bit module, 1e8 x 2 B = 0.19 GiB; a 1,000,000-parameter
    model's 2e6 B shows as "<0.01", not "0.00"."""
    for n, shown in ((100_000_000, f"{2e8 / 2**30:.2f}"), (1_000_000, "<0.01")):
        r = CliRunner().invoke(main, ["checkpoint", os.path.join(C09, "config.json"), "--params", str(n),
                                      "--world-size", "1"], env={"COLUMNS": "400"})
        lines = r.output.splitlines()
        k = next(i for i, x in enumerate(lines) if x.lstrip().startswith("file (under save_dir)"))
        assert lines[k].split()[-2:] == ["tensor", "GiB"], lines[k]
        row = next(x for x in lines[k + 1:] if "mp_rank_00_model_states.pt" in x)
        assert row.split()[-1] == shown, row


def test_checkpoint_interval_steps_use_the_step_time_model_with_a_hardware_spec():
    """Issue 23: with --hardware and no --step-time the Young/Daly interval is also given in steps
    at the step-time model's seconds (advisor.ledger.steptime.step_time at the model's
    max_seq_len, no recompute: the config checkpoints nothing), as estimate's per-day figures use
    it; --step-time (a measured run) wins and is named as the source."""
    from advisor.cluster.hardware import resolve_hardware
    from advisor.ledger.steptime import step_time
    from advisor.model.specs import resolve_model
    from advisor.views.estimate import checkpoint_with_step_time as checkpoint_view
    inv = resolve_model("llama-3.2-1b")
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                           "zero_optimization": {"stage": 2}})
    hw = resolve_hardware("dgx-h100")
    plan = Plan(ec, inv, Cluster(world_size=8, gpus_per_node=8))
    cp = checkpoint_view(plan, hardware=hw, save_dir="/raid/ck", node_mtbf_hours=1000)
    want = step_time(Plan(ec, inv, Cluster(world_size=8, gpus_per_node=8)), hw, seq_len=inv.meta["max_seq_len"]).total
    assert cp.step_time_source == "model" and cp.step_time_s == pytest.approx(want, rel=1e-9)
    res = cp.resilience()
    assert res["interval_steps"] == max(1, round(res["interval_s"] / want))
    given = checkpoint_view(plan, hardware=hw, save_dir="/raid/ck", node_mtbf_hours=1000, step_time_s=2.0)
    assert given.step_time_source == "--step-time" and given.step_time_s == 2.0
    # no architecture (--params): no sequence length, no model step time
    bare = checkpoint_view(Plan(ec, from_param_count(1_000_000), Cluster(world_size=8, gpus_per_node=8)),
                           hardware=hw, save_dir="/raid/ck", node_mtbf_hours=1000)
    assert bare.step_time_s is None and bare.step_time_source is None


def test_readme_row_says_the_interval_needs_node_mtbf_hours():
    """ncb21: README's checkpoint row promised a Young/Daly save interval (with --hardware also in steps),
    but checkpoint gives none without --node-mtbf-hours: the interval is sqrt(2 x save time x MTBF),
    and the MTBF is that flag's. The row names the flag; the command gives the interval with it only."""
    from pathlib import Path
    row = next(ln for ln in (Path(__file__).resolve().parents[1] / "README.md").read_text().splitlines()
               if ln.startswith("| `ds-advisor checkpoint "))
    assert "Young/Daly" in row and row.index("--node-mtbf-hours") < row.index("Young/Daly"), row
    cfg = os.path.join(C09, "config.json")
    base = ["checkpoint", cfg, "--params", "1000000", "--write-bandwidth", "2GB/s", "--world-size", "8"]
    without = CliRunner().invoke(main, base)
    assert without.exit_code == 0 and "Young/Daly" not in without.output, without.output
    assert "Young/Daly" in CliRunner().invoke(main, base + ["--node-mtbf-hours", "20000"]).output
