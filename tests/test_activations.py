"""Activation estimates: hand arithmetic from the cited per-op terms, and the formulas against
the trace of transformers' own models for every family they cover (attention implementations,
checkpointing, dropout)."""

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


# --- the formulas against the trace of transformers' own models -----------------------------
# advisor.engine.trace runs the real modeling code on fake tensors (its own test checks it byte
# for byte against autograd's saved tensors on the real CPU models). The trace runs CPU
# kernels, which keep dropout masks and LayerNorm mean/rstd in the model dtype; the formula is
# told so (dropout_mask_bytes / norm_stat_bytes = D) to compare like with like.

from hf_small import SMALL  # noqa: E402

FORMULA_FAMILIES = sorted(f for f in SMALL if f != "deepseek_v3")
DROPOUT_KEYS = ("attn_pdrop", "resid_pdrop", "embd_pdrop", "attention_dropout", "hidden_dropout")
S, B = 128, 2


def _compare(family: str, attention: str, checkpointing: str, dropout: float):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from advisor.engine.trace import trace_activations
    from advisor.model.specs import expand, spec_from_hf_config

    cfg = dict(SMALL[family], **{k: dropout for k in DROPOUT_KEYS})
    meta = expand(spec_from_hf_config(cfg, source=family)).meta
    tr = trace_activations(cfg, S, B, attention=attention, checkpointing=checkpointing)
    att = "flash" if tr.attention == "sdpa" else "eager"  # BLOOM and Gemma 2 have eager only
    est = estimate_activations(meta, ActivationInputs(S, B, 2, checkpointing, att,  # type: ignore[arg-type]
                                                      dropout_mask_bytes=2, norm_stat_bytes=2))
    return tr, est, meta


def _close(a: int, b: int, rel: float) -> bool:
    return abs(a - b) <= rel * b


@pytest.mark.parametrize("family", FORMULA_FAMILIES)
@pytest.mark.parametrize("attention,dropout", [("sdpa", 0.0), ("eager", 0.1)])
def test_formula_matches_trace(family, attention, dropout):
    tr, est, meta = _compare(family, attention, "none", dropout)
    cpu_copy = 0
    if family == "phi3" and tr.attention == "sdpa":
        # CPU flash attention lays its output out like q (contiguous after Phi-3's RoPE cat),
        # so transpose+reshape before o_proj copies it (D sbh); CUDA's kernel writes (b, s, a, d)
        # and the reshape is a view, as the formula assumes
        cpu_copy = 2 * S * B * int(meta["hidden_size"])
    layer, saved = est.per_layer + cpu_copy, est.saved_accelerator + tr.layers_total * cpu_copy
    # dense layers to the byte; MoE routers keep one index tensor more or less by family (0.5%)
    assert _close(layer, tr.per_layer[-1], 0.006 if meta.get("num_experts") else 0), (layer, tr.per_layer)
    assert _close(saved, tr.end_of_forward, 0.015), (saved, tr.end_of_forward)
    assert _close(est.loss_spike, tr.loss_spike, 0.01)
    assert _close(est.peak_accelerator + tr.layers_total * cpu_copy, tr.peak, 0.02), (est.peak_accelerator, tr.peak)


@pytest.mark.parametrize("family", ["llama", "gpt2", "mixtral", "qwen3"])
def test_formula_matches_trace_with_full_checkpointing(family):
    tr, est, _ = _compare(family, "sdpa", "full", 0.0)
    assert tr.per_layer[-1] == 2 * S * B * 64  # the kept layer input
    assert _close(est.saved_accelerator, tr.end_of_forward, 0.015), (est.saved_accelerator, tr.end_of_forward)
    assert _close(est.peak_accelerator, tr.peak, 0.02), (est.peak_accelerator, tr.peak)


def test_gpt2_counts_gelu_new_and_its_dropouts():
    """GPT-2 by hand (modeling_gpt2.py): gelu_new saves four tensors of s b f, the eager softmax
    stays in the model dtype, and resid_pdrop keeps two masks per layer (1 byte each on CUDA)."""
    meta = dict(hidden_size=64, num_heads=4, intermediate_size=256, vocab_size=512, num_layers=2, family="gpt2",
                norm="layernorm", mlp="plain", activation="gelu_new", residual_dropout=0.1, attention_dropout=0.1)
    s, b, h, a, f, D = 128, 2, 64, 4, 256, 2
    t = layer_terms(meta, s, b, D, "eager")
    assert t["mlp"] == (4 + 1) * D * s * b * f
    assert t["dropout"] == 2 * s * b * h
    assert t["attention"] == 4 * D * s * b * h + D * b * a * s * s + (1 + D) * b * a * s * s


def test_mla_has_no_formula():
    from advisor.model.activations import formula_gap
    from advisor.model.specs import expand, get_preset

    assert "trace" in formula_gap(expand(get_preset("deepseek-v3")).meta)
