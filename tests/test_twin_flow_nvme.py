"""Partial optimizer offload to NVMe at ZeRO-3 (``offload_optimizer: {device: nvme, ratio: r < 1}``): the
ledger's tier split per sub-group, computed here by hand from DeepSpeed 0.19.8's rules. This is a GPU run's
split; on DeepSpeed's CPU accelerator (the engine cell z3_bf16_oo_nvme_ratio_w2) every sub-group maps to 'cpu'
and DeepSpeedCPUAdam steps them all, so the CPU run does not prove it.

* ``stage3.py`` l.1100-1108: sub-group i maps to 'cpu' when i >= int((1 - ratio) x n), else to the accelerator.
* l.1117-1121: a sub-group with S_k x 4 >= max(MIN_AIO_BYTES, aio block_size) = 1 MiB
  (``swap_tensor/utils.py`` l.14; ``optimizer_utils.py`` is_swappable_tensor l.225-232) is swapped to NVMe
  whatever its device: its fp32 master is a swap file of A(S_k) x 4 B, A rounding up to
  AIO_ALIGNED_BYTES / 4 = 256 elements (utils.py l.15, optimizer_utils.py l.181-182, _io_aligned_numel l.545-547).
* l.1157-1160: an unswapped sub-group's fp32 master is ``.to(subgroup_to_device[i])``: the accelerator for i < cut.
* _optimizer_step l.1249-1258: i < cut is stepped by the backup torch AdamW, whose state (exp_avg, exp_avg_sq,
  zeros_like(p): torch/optim/adam.py l.178) of a swapped sub-group lies beside its swapped-in host parameter and
  is never swapped: the swapper swaps ``self.optimizer.state[parameter]`` only (DeepSpeedCPUAdam's;
  optimizer_utils.py _get_state_tensors l.492-502), so such a sub-group has no moment swap files. On a host
  parameter torch runs the single-tensor AdamW (optimizer.py _default_to_fused_or_foreach: no foreach on
  cpu), whose ``(exp_avg_sq.sqrt() / bias_correction2_sqrt)`` holds two S_k x 4 temporaries (adam.py l.544).

BIG (tests/engine/parity.py) at W = 2: partitions l1.weight 1,055,744 / 2 = 527,872, l1.bias 1,031 -> 516,
l2.weight 1,060,899 -> 530,450, l2.bias 1,029 -> 515. sub_group_size 300,000 (stage3.py _create_fp16_sub_groups,
a sub-group closes once its sum reaches the size): [527,872], [516 + 530,450 = 530,966], [515]; the first two
swapped (over 1 MiB), the last (2,060 B) not.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine"))
import parity  # noqa: E402

from advisor.config.effective import effective_config  # noqa: E402
from advisor.ledger.state import Cluster, Plan, compute_ledger, placement_of  # noqa: E402
from advisor.model.inventory import from_dict  # noqa: E402

S = [527872, 530966, 515]


def A(n):
    return -(-n // 256) * 256


def _cfg(ratio, dtype="bf16"):
    c = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
         "zero_optimization": {"stage": 3, "reduce_bucket_size": 50000, "sub_group_size": 300000,
                               "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp", "buffer_count": 4,
                                                     "ratio": ratio}}}
    if dtype != "fp32":
        c[dtype] = {"enabled": True}
    return c


def _ledger(cfg):
    return compute_ledger(Plan(effective_config(cfg), from_dict(parity.BIG, "big"), Cluster(world_size=2)))


def _by(led, r=0):
    out: dict[tuple[str, str], int] = {}
    for e in led.rank(r).entries:
        out[(e.item, e.tier)] = out.get((e.item, e.tier), 0) + e.bytes
    return out


def test_sub_groups_and_split():
    pl = placement_of(_ledger(_cfg(0.5)).plan)
    assert [sg.numel for sg in pl.sub_groups] == S
    assert pl.opt_swapped == [True, True, False]
    # int((1 - 0.5) x 3) = 1: sub-group 0 is the backup AdamW's, swapped; none on the accelerator
    assert pl.opt_backup_swapped == [True, False, False]
    assert pl.opt_on_accelerator == [False, False, False]
    # ratio 0: int(1 x 3) = 3: the two swapped ones are the backup AdamW's, the unswapped one on the accelerator
    pl = placement_of(_ledger(_cfg(0.0)).plan)
    assert pl.opt_backup_swapped == [True, True, False]
    assert pl.opt_on_accelerator == [False, False, True]
    pl = placement_of(_ledger(_cfg(1.0)).plan)
    assert pl.opt_backup_swapped == [False] * 3 and pl.opt_on_accelerator == [False] * 3


def test_tier_split_ratio_half():
    by = _by(_ledger(_cfg(0.5)))
    # master files: every swapped sub-group; moment files: sub-group 1 only (DeepSpeedCPUAdam's)
    assert by[("fp32_master", "nvme")] == (A(S[0]) + A(S[1])) * 4
    for m in ("exp_avg", "exp_avg_sq"):
        assert by[(m, "nvme")] == A(S[1]) * 4 == 531200 * 4
        assert by[(m, "host_pageable")] == S[2] * 4      # the unswapped host sub-group
        assert (m, "accelerator") not in by
    assert by[("fp32_master", "host_pageable")] == S[2] * 4
    # the backup AdamW's moments of sub-group 0, in host memory
    assert by[("backup_adamw_host_moments", "host_pageable")] == 2 * S[0] * 4
    assert by[("backup_adamw_host_denom", "host_pageable")] == 2 * S[0] * 4
    assert by[("backup_adamw_step", "host_pageable")] == 4
    assert ("backup_adamw_sqrt", "accelerator") not in by   # no accelerator sub-group: no foreach step
    # step 1's DeepSpeedCPUAdam moments of its swapped sub-groups (sub-group 1), made before its swap-out
    assert by[("first_step_moments", "host_pageable")] == 2 * S[1] * 4
    # the pinned swap pool: buffer_count x A(max S_k) x 4, as at ratio 1
    assert by[("opt_swap_buffers", "host_pinned")] == 4 * A(max(S)) * 4


def test_tier_split_ratio_zero():
    by = _by(_ledger(_cfg(0.0)))
    assert by[("fp32_master", "nvme")] == (A(S[0]) + A(S[1])) * 4
    assert not any(t == "nvme" and i in ("exp_avg", "exp_avg_sq") and v for (i, t), v in by.items())
    for item in ("fp32_master", "exp_avg", "exp_avg_sq", "fp32_grad"):
        assert by[(item, "accelerator")] == S[2] * 4, item
    assert by[("backup_adamw_host_moments", "host_pageable")] == 2 * (S[0] + S[1]) * 4
    assert by[("backup_adamw_host_denom", "host_pageable")] == 2 * S[1] * 4
    assert by[("backup_adamw_sqrt", "accelerator")] == S[2] * 4
    assert by[("backup_adamw_step", "host_pageable")] == 4 * 3
    assert ("first_step_moments", "host_pageable") not in by   # DeepSpeedCPUAdam steps no swapped sub-group


def test_ratio_one_unchanged_and_no_exclusion():
    led = _ledger(_cfg(1.0))
    by = _by(led)
    for m in ("exp_avg", "exp_avg_sq"):
        assert by[(m, "nvme")] == (A(S[0]) + A(S[1])) * 4
    assert not any(i.startswith("backup_") for i, _ in by)
    assert not any("ratio" in x for x in _ledger(_cfg(0.5)).excluded)


def test_host_optimizer_term_counts_swapped_sub_groups():
    """The step time's host optimizer elements: DeepSpeedCPUAdam's sub-groups (i >= cut) and the swapped ones the
    backup AdamW steps on their host master; not the unswapped accelerator one (ratio 0: sub-group 2)."""
    from advisor.ledger.steptime import cpu_optimizer_elements
    assert cpu_optimizer_elements(_ledger(_cfg(1.0)).plan) == sum(S)
    assert cpu_optimizer_elements(_ledger(_cfg(0.5)).plan) == sum(S)
    assert cpu_optimizer_elements(_ledger(_cfg(0.0)).plan) == S[0] + S[1]


def test_checkpoint_swap_files():
    """save_checkpoint copies each rank's swap files (offloaded_tensors/rank{r}/{first}_{last}.tensor.swp and a
    {moment}- one per DeepSpeedCPUAdam state tensor): at ratio 0.5 sub-group 0 (parameter 0) has its master's file
    only, sub-group 1 (parameters 1-2) its master's and both moments', each A(S_k) x 4 B."""
    from advisor.ledger.checkpoint import checkpoint_files
    led = _ledger(_cfg(0.5))
    f = {x.path: x.bytes for x in checkpoint_files(led.plan, tag="ckpt").files}
    for r in ("00", "01"):
        d = f"ckpt/offloaded_tensors/rank{r}/"
        assert f[d + "0_0.tensor.swp"] == A(S[0]) * 4
        assert d + "exp_avg-0_0.tensor.swp" not in f and d + "exp_avg_sq-0_0.tensor.swp" not in f
        for nm in ("1_2", "exp_avg-1_2", "exp_avg_sq-1_2"):
            assert f[d + nm + ".tensor.swp"] == A(S[1]) * 4
    f1 = {x.path for x in checkpoint_files(_ledger(_cfg(1.0)).plan, tag="ckpt").files}
    assert "ckpt/offloaded_tensors/rank00/exp_avg-0_0.tensor.swp" in f1


def test_movement_nvme_bytes():
    """The movement ledger's NVMe bytes per step: the fp32 master of every swapped sub-group read and written
    (A(S_0) + A(S_1)) x 4; each moment only sub-group 1's, DeepSpeedCPUAdam's, A(S_1) x 4 (ratio 1: both)."""
    from advisor.ledger.movement import rank_movements

    def nv(ratio):
        out = {}
        for m in rank_movements(_ledger(_cfg(ratio)).plan, 0):
            if m.link == "nvme" and m.cls in ("master_weights", "optimizer_states"):
                out[(m.item, m.direction)] = m.bytes
        return out
    half, full = nv(0.5), nv(1.0)
    for d in ("read", "write"):
        assert half[("fp32_master", d)] == full[("fp32_master", d)] == (A(S[0]) + A(S[1])) * 4
        for m in ("exp_avg", "exp_avg_sq"):
            assert half[(m, d)] == A(S[1]) * 4
            assert full[(m, d)] == (A(S[0]) + A(S[1])) * 4


def test_estimate_names_the_nvme_split(tmp_path):
    """estimate's assumptions: at ratio 0.5 over [swapped, swapped, unswapped] no sub-group is on the accelerator,
    one is in host memory (sub-group 2), two are NVMe files, one of them (sub-group 0) the backup AdamW's; the
    text says so, and the ledger no longer lists the ratio as not modelled."""
    import json
    import subprocess
    (tmp_path / "big.json").write_text(json.dumps(parity.BIG))
    (tmp_path / "cfg.json").write_text(json.dumps(_cfg(0.5)))
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}

    def run(fmt):
        return subprocess.run([sys.executable, "-m", "advisor", "estimate", str(tmp_path / "cfg.json"), "--model",
                               str(tmp_path / "big.json"), "--world-size", "2", "--format", fmt],
                              capture_output=True, text=True, env=env, timeout=300)
    p = run("json")
    assert p.returncode in (0, 1), p.stderr
    oo = json.loads(p.stdout)["assumptions"]["offload_optimizer"]
    assert (oo["sub_groups_on_accelerator"], oo["sub_groups_on_host"], oo["sub_groups_on_nvme"],
            oo["sub_groups_on_nvme_backup_stepped"]) == (0, 1, 2, 1)
    t = run("text")
    assert "2 swapped to NVMe (1 of them stepped by the backup AdamW" in t.stdout, t.stdout


def _gpu_runs():
    import json
    p = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "results",
                     "gpu_twin_flow_nvme-h100.json")
    return json.load(open(p))["runs"]


def test_ledger_matches_the_h100_run():
    """The real engine on an H100 (benchmarks/gpu_twin_flow_nvme.py, DeepSpeed 0.19.8, world size 1, ratios 0.5 and 0,
    recorded in benchmarks/results/gpu_twin_flow_nvme-h100.json) against the ledger at W = 1, sub-group by sub-group:
    the swapped ones (fp32 master of 0 elements between steps), the backup AdamW's (its state non-empty) with their
    moments on the host for a swapped sub-group and on the accelerator otherwise, DeepSpeedCPUAdam's state empty for
    them, and each swap file's bytes: the master's of every swapped sub-group, the moments' of DeepSpeedCPUAdam's only."""
    runs = _gpu_runs()
    assert {r["ratio"] for r in runs} == {0.5, 0.0}
    for run in runs:
        led = compute_ledger(Plan(effective_config(_cfg(run["ratio"])), from_dict(parity.BIG, "big"),
                                  Cluster(world_size=1)))
        pl = placement_of(led.plan)
        by = _by(led)
        assert [sg.numel for sg in pl.sub_groups] == run["sub_groups"]
        assert pl.opt_swapped == run["swappable"]
        backup = [bool(s) for s in run["backup_state"]]
        assert [a or b for a, b in zip(pl.opt_on_accelerator, pl.opt_backup_swapped)] == backup
        assert all(not c for c, b in zip(run["cpuadam_state"], backup) if b)
        host_moments = acc_moments = 0
        for i, st in enumerate(run["backup_state"]):
            if not st:
                continue
            dev = {st[m]["device"].split(":")[0] for m in ("exp_avg", "exp_avg_sq")}
            assert dev == ({"cpu"} if pl.opt_backup_swapped[i] else {"cuda"}), (run["ratio"], i, dev)
            n = sum(st[m]["numel"] for m in ("exp_avg", "exp_avg_sq")) * 4
            if pl.opt_backup_swapped[i]:
                host_moments += n
            else:
                acc_moments += n
            assert run["fp32_master"][i]["device"].startswith("cuda") == pl.opt_on_accelerator[i]
        assert by.get(("backup_adamw_host_moments", "host_pageable"), 0) == host_moments
        assert by.get(("exp_avg", "accelerator"), 0) + by.get(("exp_avg_sq", "accelerator"), 0) == acc_moments
        files = {name.rsplit("/", 1)[1]: size for name, size in run["swap_files"] if "_gradient_" not in name}
        master = sum(v for k, v in files.items() if not k.startswith("exp_avg"))
        assert by[("fp32_master", "nvme")] == master
        for m in ("exp_avg", "exp_avg_sq"):
            assert by.get((m, "nvme"), 0) == sum(v for k, v in files.items() if k.startswith(m + "-"))
