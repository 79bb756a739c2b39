"""G008: DeepSpeed 0.19.8 refuses its own MoE layer (deepspeed.moe.layer.MoE) at ZeRO-3.

DeepSpeed's check is called directly: ``DeepSpeedEngine._validate_zero3_moe_compatibility``
(runtime/engine.py l.2197-2216) reads only ``self.has_moe_layers`` and ``self.module``, so it runs on a
stand-in engine without a process group; ``has_moe_layers`` is set by l.2101-2107 (isinstance MoE /
AutoEPMoELayer). The advisor's commands are run as processes (lint/estimate/check import no torch).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tests.conftest import run_cli

CFG = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8, "bf16": {"enabled": True},
       "optimizer": {"type": "AdamW"}}


def _deepspeed_refusal(module) -> str | None:
    """DeepSpeed's own ZeRO-3 MoE check on ``module`` (has_moe_layers as engine.py l.2101-2107 sets it):
    its AssertionError message, or None when it accepts the model."""
    pytest.importorskip("deepspeed")
    from deepspeed.moe.layer import MoE
    from deepspeed.runtime.engine import DeepSpeedEngine
    has = any(isinstance(m, MoE) for m in module.modules())
    try:
        DeepSpeedEngine._validate_zero3_moe_compatibility(SimpleNamespace(has_moe_layers=has, module=module))
    except AssertionError as e:
        return str(e)
    return None


def test_deepspeed_refuses_native_moe_at_every_ep_and_not_transformers_blocks():
    """ep_size 1 is refused too (the check has no ep condition); transformers' Mixtral block is accepted."""
    torch = pytest.importorskip("torch")
    from deepspeed.moe.layer import MoE
    native = torch.nn.Sequential(MoE(hidden_size=8, expert=torch.nn.Linear(8, 8), num_experts=2, ep_size=1, k=1))
    msg = _deepspeed_refusal(native)
    assert msg and msg.startswith("Native DeepSpeed MoE is not supported with ZeRO Stage 3"), msg
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralForCausalLM
    hf = MixtralForCausalLM(MixtralConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                          num_attention_heads=2, num_key_value_heads=1, num_local_experts=2,
                                          vocab_size=32))
    assert _deepspeed_refusal(hf) is None


def _run(tmp_path, cmd, stage, *extra, config_extra=None):
    cfg = tmp_path / f"z{stage}.json"
    cfg.write_text(json.dumps({**CFG, "zero_optimization": {"stage": stage}, **(config_extra or {})}))
    return run_cli([cmd, str(cfg), "--model", "mixtral-8x7b", "--world-size", "16", "--seq-len", "4096",
                    "--format", "json", *extra])


@pytest.mark.parametrize("cmd", ["estimate", "check"])
def test_native_moe_zero3_refused_with_deepspeed_message(tmp_path, cmd):
    """ep 8 at ZeRO-3: G008 at /zero_optimization/stage naming DeepSpeed's own message, exit 1 (check: NO-GO);
    ZeRO-2 with ep 8, ZeRO-3 with transformers' blocks (ep 1, dropless) and ZeRO-3 under AutoEP: no G008."""
    torch = pytest.importorskip("torch")
    from deepspeed.moe.layer import MoE
    ds_msg = _deepspeed_refusal(torch.nn.Sequential(MoE(hidden_size=8, expert=torch.nn.Linear(8, 8),
                                                        num_experts=8, ep_size=1, k=2)))
    p = _run(tmp_path, cmd, 3, "--expert-parallel", "8")
    assert p.returncode == 1, p.stderr
    d = json.loads(p.stdout)
    g = [f for f in d["findings"] if f["code"] == "G008"]
    assert len(g) == 1 and g[0]["pointer"] == "/zero_optimization/stage" and g[0]["severity"] == "error", g
    assert ds_msg.split(".")[0] in g[0]["message"] and "stage to 1 or 2" in g[0]["fix"], g
    if cmd == "check":
        assert d["verdict"] == "no-go", d["verdict"]
    for stage, extra, ce in ((2, ["--expert-parallel", "8"], None), (3, [], None),
                             (3, ["--expert-parallel", "8"], {"expert_parallel": {"enabled": True, "autoep_size": 8}})):
        q = _run(tmp_path, cmd, stage, *extra, config_extra=ce)
        assert q.returncode in (0, 1), q.stderr
        assert not [f for f in json.loads(q.stdout)["findings"] if f["code"] == "G008"], (stage, extra, ce)


def test_capacity_factor_is_native_moe_at_ep1(tmp_path):
    p = _run(tmp_path, "estimate", 3, "--moe-capacity-factor", "1.25")
    assert p.returncode == 1, p.stderr
    assert [f for f in json.loads(p.stdout)["findings"] if f["code"] == "G008"]


def test_generate_offers_no_zero3_for_deepspeeds_moe_layer(tmp_path):
    """generate's MoE is DeepSpeed's layer exactly when --moe-capacity-factor is given (it plans ep 1): then
    no plan, fitting or rejected, is ZeRO-3 (G008); dropless (transformers' blocks) keeps ZeRO-3 plans."""
    args = ["generate", "--model", "mixtral-8x7b", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
            "--global-batch", "64", "--seq-len", "4096", "--format", "json"]
    moe = json.loads(run_cli(args + ["--moe-capacity-factor", "1.0"]).stdout)
    plans = moe["plans"] + moe.get("rejected", [])
    assert plans and all(p["stage"] != 3 for p in plans), [p["stage"] for p in plans]
    assert any("G008" in n for n in moe["notes"])
    dropless = json.loads(run_cli(args).stdout)
    assert any(p["stage"] == 3 for p in dropless["plans"] + dropless.get("rejected", []))
