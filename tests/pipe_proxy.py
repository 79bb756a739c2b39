"""The pipeline proxy model of tests/engine/pipe_worker.py (an embedding, L blocks of norm + up/down
projections, a final norm and the LM head) as an inventory in Hugging Face names: the one copy the
pipeline tests (tests/test_pipeline_wrapper.py, tests/engine/test_pipeline_engine.py) build their
ledgers from. V, H, F, L must stay equal to pipe_worker.py's sizes."""
from __future__ import annotations

from advisor.model.inventory import Inventory, TensorSpec

V, H, F, L = 96, 32, 80, 4


def pipe_inventory() -> Inventory:
    """pipe_worker.py's model: parameters by name and shape (elements; no bytes)."""
    ts = [TensorSpec("model.embed_tokens.weight", (V, H))]
    for i in range(L):
        ts += [TensorSpec(f"model.layers.{i}.input_layernorm.weight", (H,)),
               TensorSpec(f"model.layers.{i}.mlp.up_proj.weight", (F, H)),
               TensorSpec(f"model.layers.{i}.mlp.down_proj.weight", (H, F))]
    ts += [TensorSpec("model.norm.weight", (H,)), TensorSpec("lm_head.weight", (V, H))]
    # the block's architecture for the activation formula (advisor.model.activations.layer_terms): no attention,
    # one learned scale without normalisation (x * weight), a plain MLP with ReLU (pipe_worker.py Block); the head
    # a scale and lm_head, the loss transformers' ForCausalLMLoss (pipe_worker.py loss_fn)
    return Inventory("pipe-proxy", ts, "hand", {"num_layers": L, "hidden_size": H, "vocab_size": V,
                                               "intermediate_size": F, "attention_free": True, "norm": "scale",
                                               "mlp": "plain", "activation": "relu"})
