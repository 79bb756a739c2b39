"""LayerTensorSpec (issue 21, memory at 1e5 layers): the copies ``specs._repeat_layers`` makes of a layer's
tensors join their name from the layer's prefix and the tensor's suffix when read. They must stay the
TensorSpecs Hugging Face's parameter layout gives (names, shapes), equal to and hashed as TensorSpecs built
whole, and ``dataclasses.replace`` (TP/PP sharding) must still work on them."""

from __future__ import annotations

import dataclasses

from advisor.model.inventory import LayerTensorSpec, TensorSpec
from advisor.model.specs import expand, spec_from_hf_config

H, I, V, L = 64, 128, 1000, 6
#: LlamaDecoderLayer's parameters in named_parameters() order (transformers' modeling_llama.py:
#: self_attn q/k/v/o, mlp gate/up/down, input_layernorm, post_attention_layernorm)
LAYER = [("self_attn.q_proj.weight", (H, H)), ("self_attn.k_proj.weight", (H, H)), ("self_attn.v_proj.weight", (H, H)),
         ("self_attn.o_proj.weight", (H, H)), ("mlp.gate_proj.weight", (I, H)), ("mlp.up_proj.weight", (I, H)),
         ("mlp.down_proj.weight", (H, I)), ("input_layernorm.weight", (H,)), ("post_attention_layernorm.weight", (H,))]


def _inventory():
    return expand(spec_from_hf_config({"model_type": "llama", "hidden_size": H, "intermediate_size": I,
                                       "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": V,
                                       "max_position_embeddings": 128, "num_hidden_layers": L}))


def test_copies_are_the_whole_name_tensor_specs() -> None:
    inv = _inventory()
    layers = inv.tensors[1:1 + 9 * L]
    whole = [TensorSpec(f"model.layers.{k}.{n}", s) for k in range(L) for n, s in LAYER]
    assert layers == whole and whole == layers  # == both ways (the subclass's __eq__ is the reflected one)
    assert [hash(t) for t in layers] == [hash(t) for t in whole]
    assert set(layers) == set(whole) and len(set(layers) | set(whole)) == 9 * L
    assert [t.name for t in layers] == [w.name for w in whole]
    assert repr(layers[-1]) == repr(whole[-1])
    assert all(isinstance(t, LayerTensorSpec) for t in layers[9:])  # layers 1.. are copies of layer 0
    assert layers[-1] != TensorSpec(f"model.layers.{L - 1}.post_attention_layernorm.weight", (H + 1,))


def test_copies_share_their_strings() -> None:
    """The point of the class: a layer's tensors share one prefix string, a tensor position's copies one suffix."""
    copies = _inventory().tensors[1 + 9:1 + 9 * L]
    assert len({id(t.prefix) for t in copies}) == L - 1
    assert len({id(t.suffix) for t in copies}) == 9


def test_replace_gives_a_plain_named_tensor() -> None:
    t = _inventory().tensors[1 + 9 * (L - 1)]
    r = dataclasses.replace(t, shape=(H // 2, H))
    assert r.name == f"model.layers.{L - 1}.self_attn.q_proj.weight" and r.shape == (H // 2, H) and r.numel == H * H // 2
    assert r == TensorSpec(r.name, (H // 2, H))
    n = dataclasses.replace(t, name="other.weight")
    assert n.name == "other.weight" and n.numel == H * H
