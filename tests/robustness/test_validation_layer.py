"""Issue #21, "one validation layer": values of the wrong type or out of bounds reach a finding or a
one-line refusal naming their source, never an internal error."""
from __future__ import annotations

import copy
import json

import pytest

from tests.robustness.robust_helpers import run_cli

ZERO3 = {
    "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
    "bf16": {"enabled": True},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
    "zero_optimization": {"stage": 3},
}


def _no_internal(p) -> None:
    assert "internal error" not in p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert "X001" not in p.stdout


@pytest.mark.parametrize("section,bad", [("offload_param", [1]), ("offload_optimizer", {"a": 1})])
def test_unhashable_offload_device_is_refused_like_accelerate(tmp_path, section, bad):
    # What accelerate does with it, independently: HfDeepSpeedConfig raises TypeError (unhashable type).
    from accelerate.utils.deepspeed import HfDeepSpeedConfig
    cfg = copy.deepcopy(ZERO3)
    cfg["zero_optimization"][section] = {"device": bad}
    with pytest.raises(TypeError, match="unhashable"):
        HfDeepSpeedConfig(copy.deepcopy(cfg))
    f = tmp_path / "c.json"
    f.write_text(json.dumps(cfg))
    key = f"zero_optimization.{section}.device"
    lint = run_cli(["lint", "--hf", str(f), "--format", "json"])
    _no_internal(lint)
    assert lint.returncode == 1
    found = {(x["code"], x["pointer"]): x for x in json.loads(lint.stdout)["files"][0]["findings"]}
    h004 = found[("H004", f"/zero_optimization/{section}/device")]
    assert h004["severity"] == "error" and key in h004["message"]
    assert ("S004", f"/zero_optimization/{section}/device") in found  # the schema finding is no longer hidden
    for cmd in (["estimate", str(f), "--model", "llama-3-8b", "--seq-len", "512", "--hf"],
                ["resolve", str(f), "--hf"]):
        p = run_cli(cmd)
        _no_internal(p)
        assert p.returncode == 1, (cmd, p.stdout, p.stderr)
        assert "H004" in p.stdout + p.stderr
