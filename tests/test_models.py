"""Model specs: presets, HF config.json reading, expansion into the tensor inventory.

Parameter counts are checked three independent ways:

1. PUBLISHED: the exact counts the model authors / Hugging Face publish (model pages show the
   safetensors "total" parameters; the figures below are those exact totals, cited per model).
2. A closed-form formula written here from the architecture papers, evaluated on the official
   config.json values copied into OFFICIAL_CONFIG below (not on advisor's presets), so a typo in
   a preset or a wrong tensor in expand() both fail.
3. Where transformers is installed (test extra), transformers' own model built on the meta
   device: same names, shapes and order as expand().
"""

from __future__ import annotations

import importlib.util
import json
import os

import jsonschema
import pytest

from advisor.errors import ModelSpecError
from advisor.model.inventory import Inventory, load_inventory
from advisor.model.specs import (
    FAMILIES, ModelSpec, active_param_count, expand, get_preset, list_presets, preset_names, resolve_model,
    spec_from_hf_config,
)

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(HERE)
FIX = os.path.join(HERE, "fixtures", "hf")

# Exact published totals (elements). Sources: the Hugging Face model page of each repo
# ("Model size", from the safetensors metadata) and the authors' model cards; each equals the
# count that follows from the repo's config.json (see test_closed_form_formula).
PUBLISHED = {
    "llama-2-7b": 6_738_415_616,       # meta-llama/Llama-2-7b-hf ("7B"; 6.74B on the HF page)
    "llama-2-13b": 13_015_864_320,     # meta-llama/Llama-2-13b-hf (13.0B)
    "llama-2-70b": 68_976_648_192,     # meta-llama/Llama-2-70b-hf (69.0B; Meta says "70B")
    "llama-3-8b": 8_030_261_248,       # meta-llama/Meta-Llama-3-8B (8.03B)
    "llama-3-70b": 70_553_706_496,     # meta-llama/Meta-Llama-3-70B (70.6B)
    "llama-3.1-8b": 8_030_261_248,     # meta-llama/Llama-3.1-8B (same shapes as 3-8B; longer RoPE)
    "llama-3.1-70b": 70_553_706_496,   # meta-llama/Llama-3.1-70B
    "llama-3.1-405b": 405_853_388_800,  # meta-llama/Llama-3.1-405B (406B)
    "llama-3.2-1b": 1_235_814_400,     # meta-llama/Llama-3.2-1B (1.24B; tied embeddings)
    "llama-3.2-3b": 3_212_749_824,     # meta-llama/Llama-3.2-3B (3.21B; tied embeddings)
    "gemma-7b": 8_537_680_896,         # google/gemma-7b (8.54B: "7B" excludes the 256k embedding)
    "mistral-7b": 7_241_732_096,       # mistralai/Mistral-7B-v0.1 (7.24B)
    "mixtral-8x7b": 46_702_792_704,    # mistralai/Mixtral-8x7B-v0.1 (46.7B; Mistral: "46.7B total")
    "qwen2.5-7b": 7_615_616_512,       # Qwen/Qwen2.5-7B (card: 7.61B, 6.53B non-embedding)
    "qwen2.5-32b": 32_763_876_352,     # Qwen/Qwen2.5-32B (32.8B on HF; the card's "32.5B" is rounded low)
    "qwen2.5-72b": 72_706_203_648,     # Qwen/Qwen2.5-72B (card: 72.7B)
    "gemma-2-9b": 9_241_705_984,       # google/gemma-2-9b (9.24B)
    "gpt2": 124_439_808,               # openai-community/gpt2: the 124M model (the HF page's "137M"
                                       # also counts 12 causal-mask buffers of 1024x1024 stored in the file)
    "bloom-176b": 176_247_271_424,     # bigscience/bloom (176B)
    "deepseek-v3": 671_026_419_200,    # deepseek-ai/DeepSeek-V3 main model ("671B total"); see MTP test
}

# The shape-relevant values of each repo's official config.json
# (https://huggingface.co/<repo>/blob/main/config.json), written out again here, independently of
# advisor/model/specs.py: h hidden_size, L num_hidden_layers, q num_attention_heads, kv
# num_key_value_heads, d head_dim, I intermediate_size, V vocab_size.
OFFICIAL_CONFIG = {
    "llama-2-7b": dict(h=4096, L=32, q=32, kv=32, I=11008, V=32000, tied=False),
    "llama-2-13b": dict(h=5120, L=40, q=40, kv=40, I=13824, V=32000, tied=False),
    "llama-2-70b": dict(h=8192, L=80, q=64, kv=8, I=28672, V=32000, tied=False),
    "llama-3-8b": dict(h=4096, L=32, q=32, kv=8, I=14336, V=128256, tied=False),
    "llama-3-70b": dict(h=8192, L=80, q=64, kv=8, I=28672, V=128256, tied=False),
    "llama-3.1-8b": dict(h=4096, L=32, q=32, kv=8, I=14336, V=128256, tied=False),
    "llama-3.1-70b": dict(h=8192, L=80, q=64, kv=8, I=28672, V=128256, tied=False),
    "llama-3.1-405b": dict(h=16384, L=126, q=128, kv=8, I=53248, V=128256, tied=False),
    "llama-3.2-1b": dict(h=2048, L=16, q=32, kv=8, d=64, I=8192, V=128256, tied=True),
    "llama-3.2-3b": dict(h=3072, L=28, q=24, kv=8, d=128, I=8192, V=128256, tied=True),
    "gemma-7b": dict(h=3072, L=28, q=16, kv=16, d=256, I=24576, V=256000, tied=True),
    "mistral-7b": dict(h=4096, L=32, q=32, kv=8, I=14336, V=32000, tied=False),
    "mixtral-8x7b": dict(h=4096, L=32, q=32, kv=8, I=14336, V=32000, tied=False, E=8),
    "qwen2.5-7b": dict(h=3584, L=28, q=28, kv=4, I=18944, V=152064, tied=False, qkv_bias=True),
    "qwen2.5-32b": dict(h=5120, L=64, q=40, kv=8, I=27648, V=152064, tied=False, qkv_bias=True),
    "qwen2.5-72b": dict(h=8192, L=80, q=64, kv=8, I=29568, V=152064, tied=False, qkv_bias=True),
    "qwen3-8b": dict(h=4096, L=36, q=32, kv=8, d=128, I=12288, V=151936, tied=False, qk_norm=True),
    "gemma-2-9b": dict(h=3584, L=42, q=16, kv=8, d=256, I=14336, V=256000, tied=True, norms=4),
    "phi-3-mini": dict(h=3072, L=32, q=32, kv=32, I=8192, V=32064, tied=False),
}
MAX_SEQ = {"llama-2-7b": 4096, "llama-3-8b": 8192, "llama-3.1-8b": 131072, "llama-3.1-405b": 131072,
           "mistral-7b": 32768, "qwen2.5-32b": 131072, "gemma-2-9b": 8192, "gpt2": 1024,
           "deepseek-v3": 163840, "qwen3-8b": 40960}


def _llama_like_count(h, L, q, kv, I, V, tied, d=None, qkv_bias=False, qk_norm=False, norms=2, E=0):
    """Decoder with GQA attention and a SwiGLU MLP (Touvron et al. 2023), RMSNorm weights only."""
    d = d or h // q
    attn = h * q * d + 2 * h * kv * d + q * d * h          # Wq, Wk, Wv, Wo
    attn += (q * d + 2 * kv * d) if qkv_bias else 0         # Qwen2 q/k/v biases
    attn += 2 * d if qk_norm else 0                         # Qwen3 per-head q/k RMSNorm
    mlp = 3 * h * I if not E else E * 3 * h * I + E * h     # MoE: E SwiGLU experts + router
    return V * h * (1 if tied else 2) + L * (attn + mlp + norms * h) + h


def _gpt_count(h, L, V, P=0, emb_ln=False):
    """GPT-2 / BLOOM block: qkv (3h^2+3h), out (h^2+h), 4h MLP (8h^2+5h), 2 LayerNorms (4h)."""
    return V * h + P * h + (2 * h if emb_ln else 0) + L * (12 * h * h + 13 * h) + 2 * h


def _deepseek_v3_count(mtp: int = 0) -> int:
    # deepseek-ai/DeepSeek-V3 config.json: hidden 7168, 61 layers (first 3 dense, MLP 18432),
    # 256 routed + 1 shared expert of 2048, 128 heads, q_lora 1536, kv_lora 512, nope 128,
    # rope 64, v 128, vocab 129280, topk_method noaux_tc (per-layer e_score_correction_bias).
    h, V, H = 7168, 129280, 128
    attn = (1536 * h + 1536 + H * 192 * 1536            # q_a_proj, q_a_layernorm, q_b_proj
            + (512 + 64) * h + 512 + H * (128 + 128) * 512  # kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj
            + h * H * 128)                              # o_proj
    expert = 3 * h * 2048
    dense = attn + 3 * h * 18432 + 2 * h
    moe = attn + 256 * expert + 256 * h + 256 + expert + 2 * h  # experts, router, bias, shared, norms
    total = 3 * dense + 58 * moe + 2 * V * h + h
    return total + mtp * (moe + 2 * h * h + 3 * h)            # MTP: layer, eh_proj, enorm/hnorm/head norm


def test_published_counts_exact():
    for name, n in PUBLISHED.items():
        assert expand(get_preset(name)).numel == n, name


@pytest.mark.parametrize("name", sorted(OFFICIAL_CONFIG))
def test_closed_form_formula(name):
    c = OFFICIAL_CONFIG[name]
    inv = expand(get_preset(name))
    assert inv.numel == _llama_like_count(**c)
    # The preset carries the official values.
    m = inv.meta
    assert (m["hidden_size"], m["num_layers"], m["num_heads"], m["num_kv_heads"], m["intermediate_size"],
            m["vocab_size"], m["tie_word_embeddings"]) == (c["h"], c["L"], c["q"], c["kv"], c["I"], c["V"], c["tied"])
    assert m["head_dim"] == c.get("d", c["h"] // c["q"])


def test_closed_form_gpt2_bloom_deepseek():
    assert expand(get_preset("gpt2")).numel == _gpt_count(768, 12, 50257, P=1024) == 124_439_808
    assert expand(get_preset("bloom-176b")).numel == _gpt_count(14336, 70, 250880, emb_ln=True)
    assert expand(get_preset("deepseek-v3")).numel == _deepseek_v3_count() == PUBLISHED["deepseek-v3"]


def test_max_seq_len_from_config():
    for name, s in MAX_SEQ.items():
        assert expand(get_preset(name)).meta["max_seq_len"] == s, name


def test_non_embedding_counts_match_qwen_cards():
    # Qwen model cards give "Number of Parameters (Non-Embedding)": 6.53B (7B), 70.2B (72B).
    for name, non_emb_billions, digits in (("qwen2.5-7b", 6.53, 2), ("qwen2.5-72b", 70.2, 1)):
        inv = expand(get_preset(name))
        emb = sum(t.numel for t in inv.tensors if t.name in ("model.embed_tokens.weight", "lm_head.weight"))
        assert round((inv.numel - emb) / 1e9, digits) == non_emb_billions


def test_gemma_7b_non_embedding_matches_tech_report():
    # Gemma technical report (2024), Table 2: Gemma 7B has 7,751,248,896 non-embedding parameters
    # (its embedding row count there, 786,825,216 = 256,128 x 3072, uses the padded tokenizer size).
    inv = expand(get_preset("gemma-7b"))
    assert inv.numel - 256000 * 3072 == 7_751_248_896


def test_moe_active_parameters():
    # Mistral: Mixtral "uses only 12.9B active parameters per token"; DeepSeek: "37B activated".
    mix = get_preset("mixtral-8x7b")
    assert active_param_count(mix) == 46_702_792_704 - 32 * 6 * 3 * 4096 * 14336 == 12_879_925_248
    assert round(active_param_count(mix) / 1e9, 1) == 12.9
    ds = get_preset("deepseek-v3")
    assert active_param_count(ds) == PUBLISHED["deepseek-v3"] - 58 * (256 - 8) * 3 * 7168 * 2048
    assert active_param_count(ds) == 37_552_297_472  # 37.55B, published as "37B activated"
    assert expand(ds).meta["active_params"] == active_param_count(ds)
    assert active_param_count(get_preset("llama-3-8b")) == PUBLISHED["llama-3-8b"]


def test_deepseek_v3_mtp_module():
    """DeepSeek-V3's HF checkpoint is 671B main + MTP ("685B"). transformers does not build the
    MTP layer, so the preset counts the main model; mtp_layers=1 adds it (embedding and head are
    shared with the main model, so not listed twice)."""
    spec = get_preset("deepseek-v3")
    from dataclasses import replace
    inv = expand(replace(spec, mtp_layers=1))
    assert inv.numel == _deepseek_v3_count(mtp=1) == 682_636_487_424
    names = [t.name for t in inv.tensors]
    assert "model.layers.61.eh_proj.weight" in names and "model.layers.61.mlp.experts.gate_up_proj" in names
    # The checkpoint stores the MTP's own copies of embedding and head, plus one fp32 scale per
    # 128x128 block of every FP8 weight: that is the "685B" on the model page.
    h, V = 7168, 129280
    checkpoint = inv.numel + 2 * V * h
    fp8_blocks_attn = 12 * 56 + 192 * 12 + 5 * 56 + 256 * 4 + 56 * 128
    fp8_blocks_moe = fp8_blocks_attn + 257 * 3 * 16 * 56
    fp8_blocks = 3 * (fp8_blocks_attn + 3 * 144 * 56) + 58 * fp8_blocks_moe + fp8_blocks_moe + 56 * 112
    assert round((checkpoint + fp8_blocks) / 1e9) == 685


def test_mla_shapes():
    inv = expand(get_preset("deepseek-v3"))
    shapes = {t.name: t.shape for t in inv.tensors}
    p = "model.layers.0.self_attn."
    assert shapes[p + "q_a_proj.weight"] == (1536, 7168)
    assert shapes[p + "q_b_proj.weight"] == (128 * (128 + 64), 1536)
    assert shapes[p + "kv_a_proj_with_mqa.weight"] == (512 + 64, 7168)
    assert shapes[p + "kv_b_proj.weight"] == (128 * (128 + 128), 512)
    assert shapes[p + "o_proj.weight"] == (7168, 128 * 128)
    assert shapes["model.layers.0.mlp.gate_proj.weight"] == (18432, 7168)          # dense layer
    assert shapes["model.layers.3.mlp.experts.gate_up_proj"] == (256, 2 * 2048, 7168)
    assert shapes["model.layers.3.mlp.shared_experts.up_proj.weight"] == (2048, 7168)
    bias = [t for t in inv.tensors if t.name.endswith("e_score_correction_bias")]
    assert len(bias) == 58 and not any(t.trainable for t in bias)


def test_llama_tensor_order_and_names():
    inv = expand(get_preset("llama-3-8b"))
    names = [t.name for t in inv.tensors]
    assert names[:10] == [
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
        "model.layers.0.mlp.down_proj.weight",
        "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight"]
    assert names[-2:] == ["model.norm.weight", "lm_head.weight"]
    assert len(names) == 1 + 32 * 9 + 2
    assert inv.tensors[2].shape == (8 * 128, 4096)
    # Tied embeddings appear once (named_parameters deduplicates): Gemma 2 has no lm_head.
    assert not any(t.name == "lm_head.weight" for t in expand(get_preset("gemma-2-9b")).tensors)


def test_per_expert_layout_same_count():
    from dataclasses import replace
    fused = get_preset("mixtral-8x7b")
    per = expand(replace(fused, expert_layout="per_expert"))
    assert per.numel == expand(fused).numel
    names = [t.name for t in per.tensors]
    assert "model.layers.0.block_sparse_moe.experts.7.w2.weight" in names
    assert names.index("model.layers.0.block_sparse_moe.gate.weight") < names.index(
        "model.layers.0.block_sparse_moe.experts.0.w1.weight")


# ---------------------------------------------------------------------------------- config.json

@pytest.mark.parametrize("folder,preset", [("Meta-Llama-3-8B", "llama-3-8b"), ("Qwen2.5-32B", "qwen2.5-32b"),
                                           ("gpt2", "gpt2"), ("Mixtral-8x7B-v0.1", "mixtral-8x7b")])
def test_hf_config_matches_preset(folder, preset):
    path = os.path.join(FIX, folder, "config.json")
    got = resolve_model(path)
    want = expand(get_preset(preset))
    assert [(t.name, t.shape) for t in got.tensors] == [(t.name, t.shape) for t in want.tensors]
    assert got.numel == PUBLISHED[preset]
    assert got.meta["params"] == want.meta["params"]
    assert got.source == path
    # A checkpoint folder works as well as its config.json.
    assert resolve_model(os.path.join(FIX, folder)).numel == got.numel


def test_unsupported_model_type(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "t5", "d_model": 512}))
    with pytest.raises(ModelSpecError) as e:
        resolve_model(str(p))
    msg = str(e.value)
    assert str(p) in msg and "'t5'" in msg and "llama" in msg and "deepseek_v3" in msg and "\n" not in msg


def test_missing_config_key(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    with pytest.raises(ModelSpecError, match="num_attention_heads"):
        resolve_model(str(p))


def test_hf_defaults_follow_transformers():
    # Llama's config defaults: untied, KV heads = heads; Gemma's: tied, head_dim 256.
    llama = spec_from_hf_config({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                                 "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
                                 "max_position_embeddings": 256})
    assert llama.kv_heads() == 4 and not llama.tie_word_embeddings and llama.dim_per_head() == 16
    gemma = spec_from_hf_config({"model_type": "gemma", "hidden_size": 64, "intermediate_size": 128,
                                 "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
                                 "max_position_embeddings": 256})
    assert gemma.tie_word_embeddings and gemma.dim_per_head() == 256


# ---------------------------------------------------------------------------------- resolve, errors

def test_preset_names_case_and_repo_id():
    n = PUBLISHED["llama-3.1-8b"]
    for s in ("llama-3.1-8b", "LLaMA-3.1-8B", " llama-3.1-8b ", "meta-llama/Llama-3.1-8B", "Llama-3.1-8B"):
        assert resolve_model(s).numel == n
    assert resolve_model("Qwen/Qwen2.5-72B").name == "qwen2.5-72b"


def test_unknown_preset_did_you_mean():
    with pytest.raises(ModelSpecError) as e:
        resolve_model("llama-3-7b")
    assert "did you mean" in str(e.value) and "llama-3-8b" in str(e.value)
    with pytest.raises(ModelSpecError, match="unknown model preset 'zzzz'"):
        resolve_model("zzzz")


def test_missing_and_bad_files(tmp_path):
    with pytest.raises(ModelSpecError, match="no such file"):
        resolve_model(str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ModelSpecError, match=r"bad\.json:1:2: not valid JSON"):  # one line, with the position
        resolve_model(str(bad))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ModelSpecError, match="no model_type"):
        resolve_model(str(other))
    with pytest.raises(ModelSpecError, match="config.json"):
        resolve_model(str(tmp_path))  # a folder without config.json
    # A folder named like a preset but holding no config.json does not hide the preset.
    (tmp_path / "gpt2").mkdir()
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert resolve_model("gpt2").numel == PUBLISHED["gpt2"]
    finally:
        os.chdir(cwd)


def test_invalid_spec_rejected():
    base = dict(name="x", family="llama", num_layers=2, hidden_size=64, num_heads=4, intermediate_size=128,
                vocab_size=100, max_seq_len=128)
    with pytest.raises(ModelSpecError, match="num_kv_heads"):
        expand(ModelSpec(**base, num_kv_heads=3))
    with pytest.raises(ModelSpecError, match="dense"):
        expand(ModelSpec(**base, num_experts=4, experts_per_token=2))
    with pytest.raises(ModelSpecError, match="hidden_size"):
        expand(ModelSpec(**{**base, "hidden_size": 0}))
    with pytest.raises(ModelSpecError, match="unknown model spec field"):
        ModelSpec.from_dict({**base, "layers": 3})


def test_list_presets():
    rows = list_presets()
    names = [r[0] for r in rows]
    required = ["llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "llama-3.1-8b",
                "llama-3.1-70b", "llama-3.1-405b", "mistral-7b", "mixtral-8x7b", "qwen2.5-7b", "qwen2.5-32b",
                "qwen2.5-72b", "gemma-2-9b", "gpt2", "bloom-176b", "deepseek-v3"]
    assert set(required) <= set(names) and names == preset_names()
    by = {r[0]: r for r in rows}
    for name, n in PUBLISHED.items():
        assert by[name][1] == n
    assert by["mixtral-8x7b"][2] == "mixtral" and by["deepseek-v3"][3]


def test_models_cli_json():
    from click.testing import CliRunner

    from advisor.cli import main
    r = CliRunner().invoke(main, ["models", "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = {d["name"]: d["parameters"] for d in json.loads(r.stdout)}
    assert rows["llama-3-8b"] == PUBLISHED["llama-3-8b"] and rows["gpt2"] == PUBLISHED["gpt2"]


def test_models_module_is_light():
    import subprocess
    import sys
    code = ("import sys, advisor.model.specs as m; m.resolve_model('deepseek-v3'); "
            "print(any(k in sys.modules for k in ('torch', 'deepspeed', 'transformers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------------- JSON forms

def _schema(name):
    with open(os.path.join(ROOT, "schemas", name)) as fh:
        s = json.load(fh)
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


def test_schemas_validate_presets_and_inventories():
    ms, inv_s = _schema("model.schema.json"), _schema("inventory.schema.json")
    for name in preset_names():
        spec = get_preset(name)
        ms.validate(spec.to_dict())
        inv_s.validate(json.loads(json.dumps(expand(spec).to_dict())))
    # The schema rejects what validate_spec rejects.
    bad = {**get_preset("gpt2").to_dict(), "norm": "rmsnorm"}
    assert not ms.is_valid(bad)
    assert not ms.is_valid({**get_preset("llama-3-8b").to_dict(), "num_experts": 8})
    assert not ms.is_valid({**get_preset("mixtral-8x7b").to_dict(), "num_experts": 0})
    assert not inv_s.is_valid({"tensors": [{"shape": [0]}]})


def test_inventory_json_round_trip(tmp_path):
    inv = expand(get_preset("qwen2.5-7b"))
    inv.tensors[0] = type(inv.tensors[0])(inv.tensors[0].name, inv.tensors[0].shape, trainable=False, group=1,
                                          dtype="bfloat16")
    p = tmp_path / "inv.json"
    p.write_text(json.dumps(inv.to_dict()))
    _schema("inventory.schema.json").validate(json.loads(p.read_text()))
    back = resolve_model(str(p))
    assert isinstance(back, Inventory)
    assert back.tensors == inv.tensors and back.meta == inv.meta and back.name == inv.name
    assert back.numel == PUBLISHED["qwen2.5-7b"] and back.trainable_numel == inv.numel - 152064 * 3584
    assert load_inventory(str(p)).tensors == inv.tensors


def test_spec_json_file(tmp_path):
    spec = get_preset("mixtral-8x7b")
    p = tmp_path / "spec.json"
    p.write_text(json.dumps(spec.to_dict()))
    assert resolve_model(str(p)).tensors == expand(spec).tensors
    assert ModelSpec.from_dict(spec.to_dict()) == spec


# ---------------------------------------------------------------------------------- torch

TINY = ModelSpec(name="tiny-llama", family="llama", num_layers=3, hidden_size=48, num_heads=6, num_kv_heads=2,
                 intermediate_size=80, vocab_size=101, max_seq_len=64)


def test_tiny_llama_torch_module_matches_expand():
    """A Llama-style decoder written in plain torch (no transformers) has the inventory expand()
    predicts, read through advisor.model.inventory.from_module."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from advisor.model.inventory import from_module

    class RMSNorm(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n))

    class Attn(nn.Module):
        def __init__(self, h, q, kv, d):
            super().__init__()
            self.q_proj = nn.Linear(h, q * d, bias=False)
            self.k_proj = nn.Linear(h, kv * d, bias=False)
            self.v_proj = nn.Linear(h, kv * d, bias=False)
            self.o_proj = nn.Linear(q * d, h, bias=False)

    class MLP(nn.Module):
        def __init__(self, h, i):
            super().__init__()
            self.gate_proj = nn.Linear(h, i, bias=False)
            self.up_proj = nn.Linear(h, i, bias=False)
            self.down_proj = nn.Linear(i, h, bias=False)

    class Layer(nn.Module):
        def __init__(self, s):
            super().__init__()
            self.self_attn = Attn(s.hidden_size, s.num_heads, s.kv_heads(), s.dim_per_head())
            self.mlp = MLP(s.hidden_size, s.intermediate_size)
            self.input_layernorm = RMSNorm(s.hidden_size)
            self.post_attention_layernorm = RMSNorm(s.hidden_size)

    class Model(nn.Module):
        def __init__(self, s):
            super().__init__()
            self.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size)
            self.layers = nn.ModuleList(Layer(s) for _ in range(s.num_layers))
            self.norm = RMSNorm(s.hidden_size)

    class CausalLM(nn.Module):
        def __init__(self, s):
            super().__init__()
            self.model = Model(s)
            self.lm_head = nn.Linear(s.hidden_size, s.vocab_size, bias=False)
            if s.tie_word_embeddings:
                self.lm_head.weight = self.model.embed_tokens.weight

    from dataclasses import replace
    for spec in (TINY, replace(TINY, tie_word_embeddings=True)):
        m = CausalLM(spec)
        got = from_module(m)
        want = expand(spec)
        assert [(t.name, t.shape) for t in got.tensors] == [(t.name, t.shape) for t in want.tensors]
        assert got.numel == sum(p.numel() for p in m.parameters()) == want.numel


# ---------------------------------------------------------------------------------- transformers

HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None and importlib.util.find_spec("torch") is not None


def _hf_inventory(model_type: str, cfg: dict):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.for_model(model_type, **cfg)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    out = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    # DeepSeek-V3's router score bias: a buffer in transformers, a parameter in DeepSeek's code.
    out += [(n, tuple(b.shape)) for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")]
    return out


def _ours(inv):
    return [(t.name, t.shape) for t in inv.tensors]


@pytest.mark.skipif(not HAVE_TRANSFORMERS, reason="transformers not installed (test extra)")
@pytest.mark.parametrize("name", preset_names())
def test_presets_match_transformers(name):
    from advisor.model.specs import _PRESETS
    p = next(x for x in _PRESETS if x.name == name)
    cfg = {k: v for k, v in p.config.items() if k != "model_type"}
    hf = _hf_inventory(p.config["model_type"], cfg)
    ours = _ours(expand(get_preset(name)))
    key = lambda xs: [x for x in xs if not x[0].endswith("e_score_correction_bias")]  # noqa: E731
    assert key(hf) == key(ours)          # same order for every named parameter
    assert sorted(hf) == sorted(ours)


TINY_HF = {
    "llama": dict(attention_bias=True, mlp_bias=True),
    "mistral": {},
    "qwen2": {},
    "qwen3": dict(head_dim=24),
    "gemma": dict(head_dim=24),
    "gemma2": dict(head_dim=24),
    "phi3": {},
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=40,
                      shared_expert_intermediate_size=56),
    "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=40, head_dim=24),
    "deepseek_v3": dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=40, first_k_dense_replace=1,
                        q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
                        n_group=1, topk_group=1, n_shared_experts=2),
    "gpt2": dict(n_embd=48, n_layer=2, n_head=6, n_positions=64, vocab_size=1000),
    "bloom": dict(hidden_size=48, n_layer=2, n_head=6, vocab_size=1000),
}


@pytest.mark.skipif(not HAVE_TRANSFORMERS, reason="transformers not installed (test extra)")
@pytest.mark.parametrize("model_type", sorted(TINY_HF))
def test_tiny_configs_match_transformers(model_type, tmp_path):
    """Every supported model_type, through the config.json reader, against transformers."""
    assert model_type in FAMILIES
    if model_type in ("gpt2", "bloom"):
        cfg = dict(TINY_HF[model_type])
    else:
        cfg = dict(hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=6,
                   num_key_value_heads=2, vocab_size=1000, max_position_embeddings=64, pad_token_id=0,
                   bos_token_id=1, eos_token_id=2, **TINY_HF[model_type])
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": model_type, **cfg}))
    ours = _ours(resolve_model(str(p)))
    hf = _hf_inventory(model_type, cfg)
    assert sorted(hf) == sorted(ours)
    key = lambda xs: [x for x in xs if not x[0].endswith("e_score_correction_bias")]  # noqa: E731
    assert key(hf) == key(ours)


def test_models_types_lists_formula_coverage():
    """Every built-in model type is listed; those marked with a formula get an estimate from the
    formulas (no gap), the one without (DeepSeek-V3's latent attention) is the one formula_gap
    refuses; the text points every other type to --activations trace or --params."""
    import json

    from click.testing import CliRunner

    from advisor.cli import main
    from advisor.model.activations import formula_gap
    from advisor.model.specs import FAMILIES, expand, list_presets, get_preset

    rows = json.loads(CliRunner().invoke(main, ["models", "--types", "--format", "json"]).stdout)
    assert [r["model_type"] for r in rows] == list(FAMILIES)
    by_type = {r["model_type"]: r for r in rows}
    for name, _, fam, _ in list_presets():
        assert by_type[fam]["activation_formula"] == (formula_gap(expand(get_preset(name)).meta) is None), name
    text = CliRunner().invoke(main, ["models", "--types"]).output
    assert "--activations trace" in text and "--params N" in text
