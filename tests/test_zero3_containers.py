"""ZeRO-3 container modules in the fetch replay (state.zero3_container_steps): hooks of modules that own no
parameter prefetch (partitioned_param_coordinator.py fetch_sub_module l. 452-485), so with a prefetch
bucket below a layer the all-gathers group differently. Values by hand from the coordinator's rules and
partition_parameters.py's buffers (a coalesced all-gather's flat buffer sum ceil(n_i/W) x W x D,
_all_gather_dtype l. 1343, beside the torch.cat copies n_i x D once waited; a single parameter its own
padded buffer, _all_gather_sequential l. 1379-1398); the engine shows the same in tests/engine/
test_peak_parity.py's z3_bf16_nonpersist_containers_pb1000_w2."""
import types

import pytest

from advisor.errors import ModelSpecError
from advisor.ledger import state
from advisor.model.inventory import Inventory, ModuleSpec, TensorSpec, from_dict

#: tests/engine/parity.py's TINY, flat and with each layer in a container (stack.i, in the ModuleList stack)
SHAPES = [("l1.weight", (301, 64)), ("l1.bias", (301,)), ("l2.weight", (77, 301)), ("l2.bias", (77,)),
          ("l3.weight", (5, 77)), ("l3.bias", (5,))]


def _inv(nested: bool) -> Inventory:
    return Inventory("tiny", [TensorSpec(f"stack.{int(n[1]) - 1}.{n}" if nested else n, s) for n, s in SHAPES])


def _zero(bucket: int):
    # stage3_param_persistence_threshold 100: l2.bias (77) and l3.bias (5) persistent
    return types.SimpleNamespace(param_persistence_threshold=100, model_persistence_threshold=10**18,
                                 prefetch_bucket_size=bucket, max_live_parameters=int(1e9),
                                 max_reuse_distance=int(1e9), allgather_sequential=False)


def test_container_steps_of_llama_names():
    # HF Llama's tree: model (LlamaModel: its first descendant embed_tokens, its last norm; lm_head is
    # outside it), model.layers (numbered: a ModuleList, never called), model.layers.i (decoder layer),
    # .self_attn and .mlp are containers
    names = ["model.embed_tokens.weight"]
    for i in range(2):
        names += [f"model.layers.{i}.self_attn.q_proj.weight", f"model.layers.{i}.self_attn.o_proj.weight",
                  f"model.layers.{i}.mlp.up_proj.weight", f"model.layers.{i}.mlp.down_proj.weight",
                  f"model.layers.{i}.input_layernorm.weight"]
    names += ["model.norm.weight", "lm_head.weight"]
    inv = Inventory("llama-like", [TensorSpec(n, (4,)) for n in names])
    before_f, before_b, tail = state.zero3_container_steps(inv)
    assert tail == 0
    # modules: embed, (q, o, up, down, ln) x 2, norm, lm_head
    assert list(before_f) == [1, 2, 0, 1, 0, 0, 2, 0, 1, 0, 0, 0, 0]
    # backward: a container right before its last descendant (forward order): self_attn before o_proj,
    # mlp before down_proj, the layer before input_layernorm, model before norm
    assert list(before_b) == [0, 0, 1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 0]


def test_flat_names_have_no_containers():
    f, b, tail = state.zero3_container_steps(_inv(False))
    assert (sum(f), sum(b), tail) == (0, 0, 0)


def test_small_prefetch_bucket_groups_differently():
    W, D = 2, 2
    flat = state.zero3_fetch_replay(_inv(False), _zero(1000), W, D)
    nested = state.zero3_fetch_replay(_inv(True), _zero(1000), W, D)
    # flat: root prefetches l1.weight alone (19,264 x 2 B), l1's fetch l1.bias (302 x 2), its prefetch l2.weight
    # alone (23,178 x 2), l2's prefetch l3.weight (386 x 2): nothing is released in forward (reuse 1e9)
    assert flat.forward[0] == 19264 * 2 + 302 * 2 + 23178 * 2 + 386 * 2 == 86260
    # nested: stack.0's prefetch takes l1.bias and l2.weight in one coalesced all-gather (flat buffer
    # (302 + 23,178) x 2 B), l1's wait cats both (301 + 23,177) x 2 B with the buffer alive (l2.weight not
    # yet popped), then l1's prefetch l3.weight alone
    assert nested.forward[0] == 19264 * 2 + (302 + 23178) * 2 + (301 + 23177) * 2 + 386 * 2 == 133216
    # at the default bucket the root's prefetch takes every parameter: containers change nothing
    assert (state.zero3_fetch_replay(_inv(True), _zero(int(5e7)), W, D).forward[0]
            == state.zero3_fetch_replay(_inv(False), _zero(int(5e7)), W, D).forward[0])


# ---- modules the names cannot spell (issue 15: Inventory.modules, advisor.model.inventory.ModuleSpec)

def _llama_like(rope_backward: bool) -> Inventory:
    # HF LlamaModel.forward: embed_tokens, rotary_emb (cos/sin from a buffer: no gradient), the layers, norm;
    # LlamaMLP.forward: down_proj(act_fn(gate_proj(x)) * up_proj(x)), so act_fn runs between gate_proj and up_proj
    names = ["model.embed_tokens.weight"]
    for i in range(2):
        names += [f"model.layers.{i}.input_layernorm.weight", f"model.layers.{i}.self_attn.q_proj.weight",
                  f"model.layers.{i}.self_attn.o_proj.weight", f"model.layers.{i}.mlp.gate_proj.weight",
                  f"model.layers.{i}.mlp.up_proj.weight", f"model.layers.{i}.mlp.down_proj.weight"]
    names += ["model.norm.weight", "lm_head.weight"]
    mods = ([ModuleSpec("model.rotary_emb", before="model.layers.0.input_layernorm", backward=rope_backward)]
            + [ModuleSpec(f"model.layers.{i}.mlp.act_fn", before=f"model.layers.{i}.mlp.up_proj") for i in range(2)])
    return Inventory("llama-like", [TensorSpec(n, (4,)) for n in names], modules=tuple(mods))


def test_declared_leaves_hook_where_called():
    # modules: embed, (ln, q, o, gate, up, down) x 2, norm, lm_head. Forward: model's hook before embed; rotary_emb
    # and layers.0's before layers.0.input_layernorm; self_attn before q; mlp before gate; act_fn before up
    f, b, tail = state.zero3_container_steps(_llama_like(False))
    assert list(f) == [1, 2, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0] and tail == 0
    # backward is forward reversed: model before norm; mlp and the layer before down; act_fn after up, so before
    # gate; self_attn before o; rotary_emb's output needs no gradient: no hook
    assert list(b) == [0, 0, 0, 1, 1, 0, 2, 0, 0, 1, 1, 0, 2, 1, 0]
    # the same with a rotary embedding whose output needed a gradient: its hook right before embed's in backward
    assert list(state.zero3_container_steps(_llama_like(True))[1]) == [1, 0, 0, 1, 1, 0, 2, 0, 0, 1, 1, 0, 2, 1, 0]


def test_leaf_after_the_last_module_is_a_forward_tail():
    inv = Inventory("t", [TensorSpec(n, s) for n, s in SHAPES], modules=(ModuleSpec("drop", before=None),))
    f, b, tail = state.zero3_container_steps(inv)
    # forward: after l3; backward: right after the root's hook, before l3's
    assert (list(f), list(b), tail) == ([0, 0, 0], [0, 0, 1], 1)


def test_declared_sequential_is_called():
    # nn.Sequential(Linear, Linear) + a head: items numbered like a ModuleList's, but the Sequential's hooks run
    # before seq.0 in forward and before seq.1 (its last item) in backward
    ts = [TensorSpec(n, (4,)) for n in ("seq.0.weight", "seq.0.bias", "seq.1.weight", "seq.1.bias", "head.weight")]
    f, b, tail = state.zero3_container_steps(Inventory("s", ts))
    assert (list(f), list(b), tail) == ([0, 0, 0], [0, 0, 0], 0)  # undeclared: a ModuleList, never called
    f, b, tail = state.zero3_container_steps(Inventory("s", ts, modules=(ModuleSpec("seq", sequential=True),)))
    assert (list(f), list(b), tail) == ([1, 0, 0], [0, 1, 0], 0)


def test_sequential_and_leaf_prefetch_as_a_container():
    # TINY as nn.Sequential items (seq.0..2), or flat TINY with a leaf called before l1: either hook, after the
    # root's prefetch (l1.weight alone), takes l1.bias with l2.weight in one coalesced all-gather, as stack.0's does
    # in test_small_prefetch_bucket_groups_differently: 19,264 x 2 + (302 + 23,178) x 2 flat + (301 + 23,177) x 2
    # cats + l3.weight's 386 x 2 (tests/engine/test_peak_parity.py z3_bf16_nonpersist_seq_pb1000_w2: the engine's
    # forward:2 579,141 B vs the ledger's 579,096 B; 532,140 B taking seq as a ModuleList)
    W, D = 2, 2
    seq = Inventory("seq", [TensorSpec(n.replace(f"l{n[1]}.", f"seq.{int(n[1]) - 1}."), s) for n, s in SHAPES],
                    modules=(ModuleSpec("seq", sequential=True),))
    leaf = Inventory("leaf", [TensorSpec(n, s) for n, s in SHAPES],
                     modules=(ModuleSpec("rope", before="l1", backward=False),))
    want = 19264 * 2 + (302 + 23178) * 2 + (301 + 23177) * 2 + 386 * 2
    assert state.zero3_fetch_replay(seq, _zero(1000), W, D).forward[0] == want == 133216
    assert state.zero3_fetch_replay(leaf, _zero(1000), W, D).forward[0] == want
    assert state.zero3_fetch_replay(_inv(False), _zero(1000), W, D).forward[0] == 86260  # without the hook


def test_modules_change_the_memo():
    # the memo is keyed by the tensor list: a new modules tuple must not reuse the replay of the old one
    inv = _inv(False)
    before = state.zero3_fetch_replay(inv, _zero(1000), 2, 2).forward[0]
    inv.modules = (ModuleSpec("rope", before="l1"),)
    assert (before, state.zero3_fetch_replay(inv, _zero(1000), 2, 2).forward[0]) == (86260, 133216)


@pytest.mark.parametrize("modules, where", [
    ({"name": "x"}, "/modules: expected a list"),
    (["x"], "/modules/0: expected an object"),
    ([{"name": "x", "after": "l1"}], "/modules/0: unknown key"),
    ([{"name": ""}], "/modules/0/name: expected a non-empty string"),
    ([{"name": "a", "before": "l9"}], "/modules/0/before: expected the name of a module owning parameters"),
    ([{"name": "l1"}], '/modules/0/name: "l1" owns parameters'),
    ([{"name": "stack"}], '/modules/0/name: "stack" contains modules owning parameters'),
    ([{"name": "stack.0.l1.x", "sequential": True}], '/modules/0/name: "stack.0.l1.x" contains no module'),
    ([{"name": "stack", "sequential": True, "before": None}], "/modules/0: a sequential container takes no"),
    ([{"name": "a"}, {"name": "a"}], '/modules/1/name: "a" is declared twice'),
    ([{"name": "a", "backward": "no"}], "/modules/0/backward: expected true or false"),
])
def test_bad_modules_named_in_one_line(modules, where):
    d = {"name": "n", "tensors": [{"name": "stack.0.l1.weight", "shape": [3]}, {"name": "l1.weight", "shape": [2]}],
         "modules": modules}
    with pytest.raises(ModelSpecError) as e:
        from_dict(d, "inv.json")
    assert str(e.value).startswith("inv.json: " + where) and "\n" not in str(e.value), str(e.value)


def test_modules_round_trip():
    d = {"name": "n", "tensors": [{"name": "seq.0.w", "shape": [3]}, {"name": "l1.weight", "shape": [2]}],
         "modules": [{"name": "rope", "before": "l1", "backward": False}, {"name": "drop", "before": None},
                     {"name": "seq", "sequential": True}]}
    inv = from_dict(d, "inv.json")
    assert inv.modules == (ModuleSpec("rope", before="l1", backward=False), ModuleSpec("drop"),
                           ModuleSpec("seq", sequential=True))
    assert inv.to_dict()["modules"] == d["modules"]
    import json
    import os

    import jsonschema
    with open(os.path.join(os.path.dirname(__file__), "..", "schemas", "inventory.schema.json")) as fh:
        schema = jsonschema.Draft202012Validator(json.load(fh))
    schema.validate(inv.to_dict())
    assert not schema.is_valid({**d, "modules": [{"name": "x", "after": "l1"}]})
