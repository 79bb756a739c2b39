"""Issue 21: checkpoint.pipeline_layer_indices is memoised per tensor list and meta["num_layers"] (all it reads).
Values by the rule in its docstring (PipelineModule's [embedding] + blocks + [head] layer list, by hand), asked
in turn with each key part changed and back: a stale value would show in every step."""
from advisor.ledger.checkpoint import pipeline_layer_indices
from advisor.model.inventory import Inventory, TensorSpec

NAMES = ["model.embed_tokens.weight", "model.layers.0.mlp.weight", "model.layers.1.mlp.weight", "model.norm.weight",
         "lm_head.weight"]


def _inv(names, meta):
    return Inventory("m", [TensorSpec(n, (4, 4)) for n in names], "test", meta)


def test_layer_indices_by_hand_with_each_key_changed():
    inv = _inv(NAMES, {"num_layers": 2})
    # embedding 0, layer i -> i + 1, after the last layer num_layers + 1
    two = [0, 1, 2, 3, 3]
    assert [pipeline_layer_indices(inv)[n] for n in NAMES] == two
    # num_layers 1 (the meta's, not the names'): layer 1 and what follows are past it -> 2
    inv.meta["num_layers"] = 1
    assert [pipeline_layer_indices(inv)[n] for n in NAMES] == [0, 1, 2, 2, 2]
    # no num_layers: the largest layer index + 1 = 2 again
    del inv.meta["num_layers"]
    assert [pipeline_layer_indices(inv)[n] for n in NAMES] == two
    inv.meta["num_layers"] = 2
    assert [pipeline_layer_indices(inv)[n] for n in NAMES] == two
    # the tensor list changed (a third layer; num_layers 3): the new list's indices
    names3 = NAMES[:3] + ["model.layers.2.mlp.weight"] + NAMES[3:]
    inv.meta["num_layers"] = 3
    inv.tensors = [TensorSpec(n, (4, 4)) for n in names3]
    assert [pipeline_layer_indices(inv)[n] for n in names3] == [0, 1, 2, 3, 4, 4]
    # one tensor replaced in place (TensorList version): its name's index, the old name gone
    inv.tensors[3] = TensorSpec("model.final_ln.weight", (4, 4))
    got = pipeline_layer_indices(inv)
    assert got["model.final_ln.weight"] == 4 and "model.layers.2.mlp.weight" not in got
