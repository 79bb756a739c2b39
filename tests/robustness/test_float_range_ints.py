"""Issue 21, fuzz round of robust21: JSON allows integers of up to 4,300 digits, and Python's
``float()`` (and ``math.isfinite``) of one past the float range (about 1.8e308) raises
OverflowError. A config's 400-digit ``gradient_clipping`` (effective config), optimizer ``lr``
(rule L001), a scheduler count (``scheduler._is_num``) or bucket sizes that make the tracked peak
such an integer (the allocator term, ``overhead.runtime_overhead``) were an internal error in
lint (X001), estimate, check and checkpoint. Now ``validation.float_of`` reads such an integer as
the largest float of its sign, ``validation.finite_number`` calls any int finite, and the
allocator term multiplies exactly; check's headroom of -10^400 bytes is written from its
logarithm with its sign (``units._fixed``) and the report's charts draw such figures capped
(``html._gib``, ``units.quotient``)."""

from __future__ import annotations

import json
import sys

import pytest

from advisor.cluster.overhead import _ceil_times
from advisor.config.validation import finite_number, float_of
from tests.robustness.robust_helpers import run_cli

HUGE = int("9" * 400)


def test_float_of_by_hand():
    assert float_of(HUGE) == sys.float_info.max and float_of(-HUGE) == -sys.float_info.max
    assert float_of(3) == 3.0 and float_of(0.5) == 0.5
    assert float_of(True) is None and float_of("1") is None and float_of(None) is None
    assert finite_number(HUGE) and finite_number(-HUGE) and finite_number(1.5)
    assert not finite_number(float("inf")) and not finite_number(float("nan")) and not finite_number(True)


def test_ceil_times_exact_past_the_float_range():
    # 0.1 is 3602879701896397 / 2^55 exactly: the product of a 400-digit integer, rounded up
    num, den = (0.1).as_integer_ratio()
    assert (num, den) == (3602879701896397, 1 << 55)
    assert _ceil_times(HUGE, 0.1) == -(-HUGE * 3602879701896397 // (1 << 55))
    assert _ceil_times(10**400, 0.25) == 25 * 10**398  # exact quarter
    assert _ceil_times(1000, 0.1) == 100  # in range: math.ceil(1000 * 0.1) as before


CONFIGS = {
    "gradient_clipping": {"train_micro_batch_size_per_gpu": 1, "gradient_clipping": HUGE,
                          "zero_optimization": {"stage": 2}},
    "lr": {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2},
           "optimizer": {"type": "AdamW", "params": {"lr": HUGE}},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 1e-4}}},
    "total_num_steps": {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2},
                        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
                        "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": HUGE}}},
    "z3_buckets": {"train_micro_batch_size_per_gpu": 1,
                   "zero_optimization": {"stage": 3, "reduce_bucket_size": HUGE, "stage3_prefetch_bucket_size": HUGE,
                                         "stage3_param_persistence_threshold": HUGE,
                                         "stage3_max_live_parameters": HUGE, "stage3_max_reuse_distance": HUGE,
                                         "sub_group_size": HUGE}},
}
COMMANDS = [["lint"], ["estimate", "--model", "gpt2", "--seq-len", "128"],
            ["check", "--model", "gpt2", "--seq-len", "128", "--gpu-memory", "80GB", "--host-memory", "1TB"],
            ["checkpoint", "--model", "gpt2"],
            ["report", "--model", "gpt2", "--seq-len", "128", "-o", "{tmp}/r.html"]]


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("cmd", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_no_internal_error_on_integers_past_the_float_range(tmp_path, name, cmd):
    f = tmp_path / f"{name}.json"
    f.write_text(json.dumps(CONFIGS[name]))
    if cmd[0] == "report":
        pytest.importorskip("matplotlib")
    p = run_cli([cmd[0], str(f), *(a.replace("{tmp}", str(tmp_path)) for a in cmd[1:])])
    out = p.stdout + p.stderr
    assert p.returncode in (0, 1, 4), out[-2000:]
    assert "internal error" not in out and "Traceback" not in out and "X001" not in out, out[-2000:]


@pytest.mark.parametrize("family,key", [("llama", "attention_dropout"), ("gpt2", "attn_pdrop"), ("gpt2", "resid_pdrop")])
def test_hf_config_dropout_past_the_float_range_is_refused_by_name(tmp_path, family, key):
    """An HF config.json's dropout of 400 digits was ``float()``'s OverflowError (specs.spec_from_hf_config):
    now the spec's probability check refuses it, naming the key the file writes."""
    hf = {"model_type": family, "vocab_size": 1000, key: HUGE}
    hf.update({"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128} if family == "gpt2" else
              {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
               "num_hidden_layers": 2, "max_position_embeddings": 128})
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(hf))
    cfg = tmp_path / "z3.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}))
    p = run_cli(["estimate", str(cfg), "--model", str(d), "--seq-len", "128"])
    assert p.returncode == 2, p.stdout + p.stderr
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr
    assert f"{key} must be a probability in [0, 1)" in p.stderr and len(p.stderr.splitlines()) == 1
