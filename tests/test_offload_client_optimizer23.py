"""ZeRO-Offload with no optimizer section (plain DeepSpeed, rule O011's case): the estimate's optimizer line says the
client optimizer must be DeepSpeedCPUAdam / DeepSpeedCPULion, the one class pair DeepSpeed 0.19.8 accepts there
(``engine.py`` l.2342-2346: ``isinstance(basic_optimizer, DeepSpeedCPUAdam)`` / ``DeepSpeedCPULion``, else
ZeRORuntimeException while ``zero_force_ds_cpu_optimizer`` is true, its default ``runtime/constants.py`` l.41-42;
``zero_use_cpu_optimizer`` l.1562-1565 counts devices cpu and nvme). The fixture cases of the rule itself are
tests/rules/fixtures/O011.json."""

from __future__ import annotations

import json

from click.testing import CliRunner

from advisor.cli import main


def _cfg(**top):
    return {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "bf16": {"enabled": True}, **top}


def _estimate(tmp_path, cfg, *extra):
    p = tmp_path / "ds.json"
    p.write_text(json.dumps(cfg))
    r = CliRunner().invoke(main, ["estimate", str(p), "--params", "1000000", "--world-size", "2", "--seq-len", "64",
                                  "--format", "json", *extra])
    assert r.exception is None, r.output
    d = json.loads(r.output)
    return d["assumptions"]["optimizer"], {f["code"] for f in d["findings"]}


def test_offload_without_section_names_the_optimizer_deepspeed_accepts(tmp_path):
    for dev in ({"device": "cpu"}, {"device": "nvme", "nvme_path": str(tmp_path)}):
        opt, codes = _estimate(tmp_path, _cfg(zero_optimization={"stage": 3, "offload_optimizer": dev}))
        assert "must be DeepSpeedCPUAdam or DeepSpeedCPULion" in opt["type"], opt
        assert opt["basic"] == "DeepSpeedCPUAdam"
        assert "O011" in codes


def test_no_offload_or_flag_off_keeps_the_adam_assumption(tmp_path):
    # no offload: any client optimizer passes (l.2342 is not reached); the flag false: l.2344 lets it through
    for cfg in (_cfg(zero_optimization={"stage": 2}),
                _cfg(zero_optimization={"stage": 2, "offload_optimizer": {"device": "cpu"}},
                     zero_force_ds_cpu_optimizer=False)):
        opt, codes = _estimate(tmp_path, cfg)
        assert opt["type"] == "none given (client optimizer; Adam assumed)", opt
        assert "O011" not in codes


def test_optimizer_section_is_built_by_deepspeed(tmp_path):
    opt, codes = _estimate(tmp_path, _cfg(optimizer={"type": "AdamW", "params": {"lr": 1e-4}},
                                          zero_optimization={"stage": 2, "offload_optimizer": {"device": "cpu"}}))
    assert opt["type"] == "AdamW" and opt["basic"] == "DeepSpeedCPUAdam"
    assert "O011" not in codes
