"""Activation estimates: hand arithmetic from the cited per-op terms, and the engine-side
proof against the bytes autograd really saves on a plain-torch Llama proxy (within 5%)."""

from __future__ import annotations

import pytest

from advisor.model.activations import ActivationInputs, estimate_activations, layer_terms

META = dict(hidden_size=256, num_heads=8, num_kv_heads=2, intermediate_size=688, vocab_size=2000, num_layers=3)


def test_layer_terms_by_hand_flash():
    s, b, h, a, kv, d, f, D = 128, 2, 256, 8, 2, 32, 688, 2
    t = layer_terms(META, s, b, D, "flash")
    # RMSNorm: fp32 input 4sbh + fp32 rsqrt 4sb + normalised D*sbh, twice
    assert t["norms"] == 2 * (4 * s * b * h + 4 * s * b + 2 * s * b * h)
    assert t["linear_inputs"] == 2 * 2 * s * b * h
    # q (a heads), k and v (kv heads), output (a heads) in bf16 + fp32 logsumexp
    assert t["attention"] == 2 * s * b * (a * d + 2 * kv * d + a * d) + 4 * b * a * s
    assert t["mlp"] == 4 * 2 * s * b * f


def test_eager_attention_adds_the_s_squared_scores():
    flash = layer_terms(META, 128, 2, 2, "flash")["attention"]
    eager = layer_terms(META, 128, 2, 2, "eager")["attention"]
    # repeat_kv copies k and v to all 8 heads; fp32 softmax (4) + bf16 copy (2) per score
    assert eager - flash == (2 * 128 * 2 * 32 * (8 - 2) * 2 + 6 * 2 * 8 * 128 * 128 - 4 * 2 * 8 * 128)


def test_full_checkpointing_keeps_layer_inputs_only():
    none = estimate_activations(META, ActivationInputs(128, 2))
    full = estimate_activations(META, ActivationInputs(128, 2, checkpointing="full"))
    assert full.saved_accelerator == 3 * 2 * 128 * 2 * 256 + none.loss_head
    assert full.recompute_layer == none.per_layer
    assert 0.2 < full.recompute_flops_fraction < 1 / 3


def test_tensor_and_sequence_parallel_shard_as_korthikanti():
    base = layer_terms(META, 128, 2, 2, "flash")
    tp = layer_terms(META, 128, 2, 2, "flash", t=2)
    sp = layer_terms(META, 128, 2, 2, "flash", t=2, sp=True)
    assert tp["mlp"] == base["mlp"] // 2 and tp["norms"] == base["norms"]
    assert sp["norms"] == base["norms"] // 2


def test_cpu_checkpointing_moves_kept_inputs_to_host():
    e = estimate_activations(META, ActivationInputs(128, 2, checkpointing="full", cpu_checkpointing=True))
    assert e.saved_host == 3 * 2 * 128 * 2 * 256
    assert e.saved_accelerator == e.loss_head


@pytest.mark.parametrize("attention", ["flash", "eager"])
@pytest.mark.parametrize("checkpointing", ["none", "full"])
def test_estimate_within_5_percent_of_autograd_saved_bytes(attention, checkpointing):
    pytest.importorskip("torch")
    from advisor.engine.proxy_activations import measure_saved_bytes

    m = measure_saved_bytes(META, 128, 2, attention, checkpointing)
    e = estimate_activations(META, ActivationInputs(128, 2, 2, checkpointing, attention))
    assert abs(e.saved_accelerator - m["total"]) / m["total"] < 0.05, (e.saved_accelerator, m)
    assert abs(e.per_layer - m["per_layer"]) / m["per_layer"] < 0.05, (e.per_layer, m)
