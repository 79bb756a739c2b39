"""O009 / O010 fixes applied, then linted again with every rule (newcomer report, issue o9fix).

A computed fix (a finding's ``data["set"]``, the ``--set`` strings of advisor.config.overrides) must lead
somewhere valid: the fixed config has no O009, O010 or O005 finding. Before, O009's nvme fix (device cpu) at
ratio 0 gave O009 again (ratio 0 under cpu), and the nvme -> cpu switches (O009, O010) left ``nvme_path``,
which O005 reports under device cpu (offload_config.py reads it only for NVMe swapping).
"""

from __future__ import annotations

import json

import pytest

from advisor.config.loading import parse_text
from advisor.config.overrides import apply_overrides
from advisor.views.lint import lint_config
from tests.rules.test_rules import FIX, _inventory

CODES = ("O009", "O010")
#: what a fix must not leave behind
AFTER = {"O005", "O009", "O010"}


def _lint(config: dict, case: dict) -> list:
    loaded = parse_text(json.dumps(config), "fixture.json")
    ws = case.get("world_size")
    return lint_config(loaded, world_size=ws, world_size_source="--world-size" if ws else None,
                       inventory=_inventory(case))


def _fail_cases():
    for code in CODES:
        for c in json.loads((FIX / f"{code}.json").read_text())["cases"]:
            if c["expect"]:
                yield pytest.param(code, c, id=f"{code}-{c['name']}")


@pytest.mark.parametrize("code,case", list(_fail_cases()))
def test_fix_applied_lints_clean(code, case):
    got = [f for f in _lint(case["config"], case) if f.code == code and f.data.get("set")]
    for f in got:
        fixed = apply_overrides(case["config"], f.data["set"])
        again = [g for g in _lint(fixed, case) if g.code in AFTER]
        assert again == [], (f.data["set"], [g.to_dict() for g in again])


def test_every_o009_o010_fail_case_with_a_model_has_a_computed_fix():
    # a fix that is only prose cannot be checked above: each case with the model and W carries one
    # (except O009's no-size-splits / O010's no-model cases, which compute none)
    seen = {code: 0 for code in CODES}
    for p in _fail_cases():
        code, case = p.values
        if any(f.code == code and f.data.get("set") for f in _lint(case["config"], case)):
            seen[code] += 1
    assert seen["O009"] >= 3 and seen["O010"] >= 4, seen


def test_nvme_ratio_0_fix_is_not_device_cpu():
    # newcomer (a): at ratio 0 under cpu int((1 - 0) x n) = n keeps every sub-group on the accelerator
    # (stage3.py l.1105), O009's ratio-0 finding: device cpu is no way out of the nvme ratio-0 finding
    case = {"model": "llama-3-8b", "world_size": 8}
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/nv", "ratio": 0}}}
    (f,) = [f for f in _lint(cfg, case) if f.code == "O009"]
    assert not any("device" in s for s in f.data["set"]), f.data["set"]
    via_cpu = apply_overrides(cfg, ["zero_optimization.offload_optimizer.device=cpu"])
    assert [g.code for g in _lint(via_cpu, case) if g.code == "O009"] == ["O009"]


def test_switch_to_cpu_drops_nvme_only_keys_and_empties_aio():
    # three 2^20-element tensors at W 1, sub_group_size 2^20: n = 3, ratio 0.5 maps sub-group 0 to the
    # accelerator, but each is 4 MiB >= 1 MiB, swapped (stage3.py l.1117): O009 under nvme; the fix moves
    # the block to cpu without nvme_path / buffer_count and empties aio (read only by NVMe swapping)
    case = {"inventory": [{"name": f"l{i}.weight", "shape": [1 << 20]} for i in range(3)], "world_size": 1}
    cfg = {"train_micro_batch_size_per_gpu": 1, "aio": {"block_size": 1048576},
           "zero_optimization": {"stage": 3, "sub_group_size": 1 << 20,
                                 "offload_optimizer": {"device": "nvme", "nvme_path": "/nv", "buffer_count": 5,
                                                       "pin_memory": True, "ratio": 0.5}}}
    (f,) = [f for f in _lint(cfg, case) if f.code == "O009"]
    fixed = apply_overrides(cfg, f.data["set"])
    assert fixed["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True, "ratio": 0.5}
    assert fixed["aio"] == {}
    assert [g.to_dict() for g in _lint(fixed, case) if g.code in AFTER] == []


def test_max_in_cpu_number_is_the_cutoff():
    # newcomer (d): llama-3-8b at W 8, one param group, one sub-group of 8,030,261,248 / 8 elements per rank;
    # the fix's number is the least max_in_cpu the rule is silent at (stage3.py l.897-900, l.984-987)
    case = {"model": "llama-3-8b", "world_size": 8}

    def cfg(cap):
        return {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "super_offload": True},
                                      "offload_param": {"device": "nvme", "nvme_path": "/nv", "max_in_cpu": cap}}}
    (f,) = [f for f in _lint(cfg(0), case) if f.code == "O010"]
    need = f.data["max_in_cpu_needed"]
    assert need == 8_030_261_248 // 8
    assert f"at least {need:,} elements" in f.fix
    assert [g.code for g in _lint(cfg(need - 1), case) if g.code == "O010"] == ["O010"]
    assert [g.code for g in _lint(cfg(need), case) if g.code == "O010"] == []
