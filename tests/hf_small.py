"""Small Hugging Face config.json dicts, one per model type advisor.model.specs supports (2-3
layers, hidden 64, vocab 512): built in code, no downloads. The model types are transformers'
own; the sizes are chosen small so a trace or a real CPU forward takes well under a second."""

BASE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=512, max_position_embeddings=256, tie_word_embeddings=False,
            pad_token_id=None, bos_token_id=None, eos_token_id=None)

SMALL = {
    "llama": dict(model_type="llama", **BASE),
    "mistral": dict(model_type="mistral", **BASE),
    "mixtral": dict(model_type="mixtral", num_local_experts=4, num_experts_per_tok=2, **BASE),
    "qwen2": dict(model_type="qwen2", **BASE),
    "qwen2_moe": dict(model_type="qwen2_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                      shared_expert_intermediate_size=64, **BASE),
    "qwen3": dict(model_type="qwen3", head_dim=16, **BASE),
    "qwen3_moe": dict(model_type="qwen3_moe", head_dim=16, num_experts=4, num_experts_per_tok=2,
                      moe_intermediate_size=32, **BASE),
    "gemma": dict(model_type="gemma", head_dim=16, hidden_activation="gelu_pytorch_tanh", **BASE),
    "gemma2": dict(model_type="gemma2", head_dim=16, hidden_activation="gelu_pytorch_tanh", **BASE),
    "phi3": dict(model_type="phi3", **BASE),
    "gpt2": dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4, n_positions=256, vocab_size=512,
                 bos_token_id=None, eos_token_id=None),
    "bloom": dict(model_type="bloom", hidden_size=64, n_layer=2, n_head=4, vocab_size=512,
                  pad_token_id=None, bos_token_id=None, eos_token_id=None),
    "deepseek_v3": dict(model_type="deepseek_v3", hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                        num_hidden_layers=3, first_k_dense_replace=1, n_routed_experts=4, n_shared_experts=1,
                        num_experts_per_tok=2, n_group=1, topk_group=1, num_attention_heads=4, num_key_value_heads=4,
                        q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                        vocab_size=512, max_position_embeddings=256, tie_word_embeddings=False,
                        pad_token_id=None, bos_token_id=None, eos_token_id=None),
}


def with_layers(cfg: dict, n: int) -> dict:
    """``cfg`` with n decoder layers (GPT-2 and BLOOM spell the key n_layer)."""
    d = dict(cfg)
    d["n_layer" if "n_layer" in d else "num_hidden_layers"] = n
    return d
