"""module_names of an inventory of repeated layers is a JoinedNames (issue 21, memory at 1e5 layers): each
tensor's module name joined from its layer's prefix and a per-position tail when read. It must read as
:func:`module_of` of every tensor's name (the rule: the name without its last dotted component, a numeric
last component its own module), and the membership zero3_container_steps takes from it must answer as a
set of those strings, also where a plain tensor's module spells the same string as a layer's."""

from __future__ import annotations

from advisor.ledger.state import JoinedNames, module_index, module_names, zero3_container_steps
from advisor.model.inventory import Inventory, LayerTensorSpec, TensorSpec
from advisor.model.specs import expand, spec_from_hf_config


def _by_hand(name: str) -> str:
    head, _, last = name.rpartition(".")
    return name if not head or last.isdigit() else head


def _llama(layers: int) -> Inventory:
    return expand(spec_from_hf_config({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                                       "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000,
                                       "max_position_embeddings": 128, "num_hidden_layers": layers}))


def _layer(prefix: str, suffix: str, shape: tuple) -> TensorSpec:
    t = object.__new__(LayerTensorSpec)
    for f, v in (("shape", shape), ("trainable", True), ("group", 0), ("dtype", None), ("numel", shape[0])):
        getattr(TensorSpec, f).__set__(t, v)
    LayerTensorSpec.prefix.__set__(t, prefix)
    LayerTensorSpec.suffix.__set__(t, suffix)
    return t


def test_module_names_read_as_module_of_each_name() -> None:
    inv = _llama(12)
    names = module_names(inv)
    assert isinstance(names, JoinedNames)
    want = [_by_hand(t.name) for t in inv.tensors]
    assert list(names) == want and [names[i] for i in range(-len(want), len(want))] == want + want
    assert list(reversed(names)) == want[::-1] and names[3:20:2] == want[3:20:2] and len(names) == len(want)
    assert list(module_index(inv)[2]) == list(dict.fromkeys(want))


def test_mixed_rows_and_membership() -> None:
    """Plain rows, numbered last components, a renamed copy, and a plain module spelling a layer's name."""
    ts = [TensorSpec("embed.weight", (4,)), _layer("layers.1", ".mlp.weight", (4,)), _layer("layers.1", ".experts.3", (2,)),
          _layer("layers.2", ".mlp.weight", (4,)), TensorSpec("layers.2.mlp.bias", (4,)), _layer("layers.2", ".x", (2,)),
          TensorSpec("params.7", (3,))]
    object.__setattr__(ts[5], "name", "renamed.whole.w")  # the setter dataclasses.replace goes through
    inv = Inventory("mixed", ts)
    names = module_names(inv)
    want = ["embed", "layers.1.mlp", "layers.1.experts.3", "layers.2.mlp", "layers.2.mlp", "renamed.whole", "params.7"]
    assert list(names) == want
    owning = names.membership()
    for q in want + ["layers.1", "layers.2.mlp.weight", "layers", "embed.weight", "renamed", "params", "", "x", 7]:
        assert (q in owning) == (q in set(want)), q


def test_container_steps_as_with_plain_names() -> None:
    """zero3_container_steps on the joined names against the same inventory of whole-named TensorSpecs."""
    inv = _llama(9)
    plain = Inventory("plain", [TensorSpec(t.name, t.shape, t.trainable, t.group, t.dtype) for t in inv.tensors])
    assert not isinstance(module_names(plain), JoinedNames)
    got, ref = zero3_container_steps(inv), zero3_container_steps(plain)
    assert [list(x) if not isinstance(x, int) else x for x in got] == [list(x) if not isinstance(x, int) else x for x in ref]
