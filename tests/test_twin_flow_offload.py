"""Partial optimizer offload at ZeRO-3 (Twin-Flow, ``offload_optimizer: {device: cpu, ratio: r}``): the
ledger's tier split per sub-group, computed here by hand from DeepSpeed 0.19.8's rule.

``runtime/zero/stage3.py`` l.1100-1108 (_create_fp32_partitions): sub-group i goes to 'cpu' when
i >= int((1 - ratio) x n_sub_groups), else to the accelerator; its fp32 master is
``.to(subgroup_to_device[i], fp32).clone()`` (l.1157-1160), its fp32 gradient buffer
``.to(subgroup_to_device[i])`` (initialize_optimizer_states l.1337-1342), and the accelerator ones are
stepped by the backup torch AdamW (l.313-325, _optimizer_step l.1249-1258), whose state
(exp_avg, exp_avg_sq: zeros_like(p), a 0-dim CPU 'step') is made at the first step
(torch/optim/adam.py Adam._init_group) and whose foreach step makes one exp_avg_sq_sqrt copy
(adam.py _multi_tensor_adam l.790). The sub-groups (stage3.py _create_fp16_sub_groups): partitions
p_i = ceil(n_i / W) appended in model order until their sum reaches sub_group_size.

TINY (tests/engine/parity.py) at W = 2: p = 9,632 (l1.weight 19,264), 151 (l1.bias 301), 11,589
(l2.weight 23,177), 39 (l2.bias 77), 193 (l3.weight 385), 3 (l3.bias 5); sum 21,607.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine"))
import parity  # noqa: E402

from advisor.config.effective import effective_config  # noqa: E402
from advisor.ledger.state import (Cluster, Plan, compute_ledger, placement_of,  # noqa: E402
                                  twin_flow_on_accelerator, unsupported_reason)
from advisor.ledger.steptime import cpu_optimizer_elements  # noqa: E402
from advisor.ledger.timeline import resolve_load, role_timeline  # noqa: E402
from advisor.model.inventory import from_dict  # noqa: E402

P = [9632, 151, 11589, 39, 193, 3]
#: sub_group_size 5,000: [9,632] reaches it, then 151 + 11,589, then the rest (the last parameter closes it)
S_5000 = [9632, 151 + 11589, 39 + 193 + 3]
#: sub_group_size 200: [9,632], [151 + 11,589], [39 + 193] (232 >= 200), [3]
S_200 = [9632, 151 + 11589, 39 + 193, 3]


def _cfg(ratio, sgs, dtype="bf16", device="cpu", **opt):
    c = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, **opt}},
         "zero_optimization": {"stage": 3, "reduce_bucket_size": 50000, "sub_group_size": sgs,
                               "offload_optimizer": {"device": device, "ratio": ratio}}}
    if dtype != "fp32":
        c[dtype] = {"enabled": True}
    return c


def _ledger(cfg, W=2):
    return compute_ledger(Plan(effective_config(cfg), from_dict(parity.TINY, "tiny"), Cluster(world_size=W)))


def _by(led, r=0):
    out: dict[tuple[str, str], int] = {}
    for e in led.rank(r).entries:
        out[(e.item, e.tier)] = out.get((e.item, e.tier), 0) + e.bytes
    return out


def test_sub_groups_are_the_hand_computed_ones():
    assert sum(P) == 21607 and sum(S_5000) == sum(P) == sum(S_200)
    assert [sg.numel for sg in placement_of(_ledger(_cfg(0.5, 5000)).plan).sub_groups] == S_5000
    assert [sg.numel for sg in placement_of(_ledger(_cfg(0.25, 200)).plan).sub_groups] == S_200
    assert placement_of(_ledger(_cfg(0.5, 5000)).plan).opt_on_accelerator == [True, False, False]


def test_cut_is_deepspeeds_int_of_a_float():
    ec = effective_config(_cfg(0.5, 5000))
    assert twin_flow_on_accelerator(ec, 3) == [True, False, False]       # int(0.5 x 3) = 1
    assert twin_flow_on_accelerator(ec, 4) == [True, True, False, False]  # int(0.5 x 4) = 2
    ec = effective_config(_cfg(0.25, 200))
    assert twin_flow_on_accelerator(ec, 4) == [True, True, True, False]   # int(0.75 x 4) = 3
    # (1 - 0.7) x 3 = 0.9000000000000001 in floating point: int() is 0, every sub-group on the host
    assert twin_flow_on_accelerator(effective_config(_cfg(0.7, 5000)), 3) == [False] * 3
    assert twin_flow_on_accelerator(effective_config(_cfg(0.0, 5000)), 3) == [True] * 3
    # ratio 1 and no offload: no split
    assert twin_flow_on_accelerator(effective_config(_cfg(1.0, 5000)), 3) == [False] * 3
    # NVMe: the same cut for the sub-groups not swapped; a swapped one stays an NVMe file (stage3.py l.1117;
    # tests/test_twin_flow_nvme.py)
    ec = effective_config(_cfg(0.5, 5000, device="nvme"))
    assert twin_flow_on_accelerator(ec, 3) == [True, False, False]
    assert twin_flow_on_accelerator(ec, 3, [True, False, False]) == [False] * 3


def test_tier_split_bf16_ratio_half():
    by = _by(_ledger(_cfg(0.5, 5000)))
    acc = 9632 * 4                 # sub-group 0
    host = (11740 + 235) * 4       # sub-groups 1, 2
    for item in ("fp32_master", "exp_avg", "exp_avg_sq"):
        assert by[(item, "accelerator")] == acc, item
        assert by[(item, "host_pageable")] == host, item
    host_tier = next(t for (i, t) in by if i == "fp32_grad" and t.startswith("host"))
    assert by[("fp32_grad", "accelerator")] == acc
    assert by[("fp32_grad", host_tier)] == host
    assert by[("backup_adamw_sqrt", "accelerator")] == 9632 * 4   # the largest accelerator sub-group
    assert by[("backup_adamw_step", "host_pageable")] == 4 * 1
    assert by[("backup_optimizer_param", "accelerator")] == 2     # randn(1).to(bf16)


def test_tier_split_fp32_four_sub_groups():
    by = _by(_ledger(_cfg(0.25, 200, dtype="fp32")))
    acc = (9632 + 11740 + 232) * 4
    for item in ("fp32_master", "exp_avg", "exp_avg_sq", "fp32_grad"):
        assert by[(item, "accelerator")] == acc, item
    assert by[("fp32_master", "host_pageable")] == 3 * 4
    assert by[("backup_adamw_sqrt", "accelerator")] == 11740 * 4
    assert by[("backup_adamw_step", "host_pageable")] == 4 * 3
    assert by[("backup_optimizer_param", "accelerator")] == 4


def test_full_offload_and_totals():
    full = _by(_ledger(_cfg(1.0, 5000)))
    part = _by(_ledger(_cfg(0.5, 5000)))
    for item in ("fp32_master", "exp_avg", "exp_avg_sq"):
        assert full.get((item, "accelerator"), 0) == 0
        assert full[(item, "host_pageable")] == 21607 * 4
        assert sum(v for (i, _), v in part.items() if i == item) == 21607 * 4
    assert not any(i.startswith("backup_") for i, _ in full)
    # int((1 - 0.7) x 3) = 0 accelerator sub-groups: the placeholder parameter is still made (l.313: ratio != 1)
    none_acc = _by(_ledger(_cfg(0.7, 5000)))
    assert none_acc[("backup_optimizer_param", "accelerator")] == 2
    assert ("backup_adamw_sqrt", "accelerator") not in none_acc


def test_timeline_accelerator_moments_from_the_first_step():
    """The accelerator tier of ratio 0.5 over ratio 1, instant by instant: master, fp32 gradient and the
    placeholder from initialize; the moments (lazily made by the backup AdamW) from the first update; the
    foreach sqrt copy inside the step."""
    led_p, led_f = _ledger(_cfg(0.5, 5000)), _ledger(_cfg(1.0, 5000))

    def acc(led):
        tl = role_timeline(led, led.rank(0), resolve_load(led.plan.config), ga=1, rank=0)
        return dict(zip([x.key for x in tl.instants], tl.series(("accelerator",))))
    a, f = acc(led_p), acc(led_f)
    S0 = 9632 * 4
    assert a["forward:1"] - f["forward:1"] == 2 * S0 + 2
    assert a["first_step:update"] - f["first_step:update"] == 2 * S0 + 2 * S0 + S0 + 2
    assert a["steady:forward"] - f["steady:forward"] == 4 * S0 + 2


def test_cpu_optimizer_term_counts_host_sub_groups_only():
    assert cpu_optimizer_elements(_ledger(_cfg(1.0, 5000)).plan) == 21607
    assert cpu_optimizer_elements(_ledger(_cfg(0.5, 5000)).plan) == 11740 + 235
    assert cpu_optimizer_elements(_ledger(_cfg(0.25, 200)).plan) == 3


def test_partial_offload_needs_deepspeed_cpu_adam():
    # stage3.py l.316: assert type(init_optimizer) == DeepSpeedCPUAdam, 'Hybrid Optimizer Only Supports DeepSpeedCPUAdam'
    why = unsupported_reason(effective_config(_cfg(0.5, 5000, torch_adam=True)))
    assert why and "DeepSpeedCPUAdam" in why
    assert unsupported_reason(effective_config(_cfg(0.5, 5000))) is None
    assert unsupported_reason(effective_config(_cfg(1.0, 5000, torch_adam=True))) is None


def test_save_copies_the_largest_accelerator_sub_group():
    """torch.save copies each accelerator storage to host memory (torch/serialization.py), one at a time: under
    partial offload the optimizer file's fp32 flat groups (stage3.py _rigid_state_dict l.3444) include the
    accelerator sub-groups', the largest 11,740 x 4 B at ratio 0.25 over [9,632, 11,740, 232, 3]."""
    from advisor.ledger.timeline import _largest_optim_file_storage
    led = _ledger(_cfg(0.25, 200))
    assert _largest_optim_file_storage(led.plan.config, led)[0] == 11740 * 4
    led = _ledger(_cfg(1.0, 200))
    assert _largest_optim_file_storage(led.plan.config, led)[0] == 0


def _estimate_json(tmp_path, cfg):
    import json
    import subprocess
    (tmp_path / "tiny.json").write_text(json.dumps(parity.TINY))
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    p = subprocess.run([sys.executable, "-m", "advisor", "estimate", str(tmp_path / "cfg.json"), "--model",
                        str(tmp_path / "tiny.json"), "--world-size", "2", "--format", "json"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode in (0, 1), p.stderr
    return json.loads(p.stdout)


def test_estimate_assumptions_name_the_split(tmp_path):
    """estimate's assumptions say how many sub-groups the ratio keeps on the accelerator (newcomer D3:
    "effective: cpu" at ratio 0 while nothing was on the host). S_5000 has 3 sub-groups: ratio 0.5 ->
    int(0.5 x 3) = 1 on the accelerator, 2 on the host; sub_group_size 1e9 >= 21,607 is one sub-group:
    ratio 0 -> int(1 x 1) = 1 on the accelerator, 0 on the host (stage3.py l.1105)."""
    oo = _estimate_json(tmp_path, _cfg(0.5, 5000))["assumptions"]["offload_optimizer"]
    assert (oo["effective"], oo["sub_groups_on_accelerator"], oo["sub_groups_on_host"]) == ("cpu", 1, 2)
    oo = _estimate_json(tmp_path, _cfg(0.0, 10**9))["assumptions"]["offload_optimizer"]
    assert (oo["sub_groups_on_accelerator"], oo["sub_groups_on_host"]) == (1, 0)
    oo = _estimate_json(tmp_path, _cfg(1.0, 5000))["assumptions"]["offload_optimizer"]
    assert "sub_groups_on_host" not in oo  # full offload: no split to name
