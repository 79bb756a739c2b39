"""ZeRO-3 container modules in the fetch replay (state.zero3_container_steps): hooks of modules that own no
parameter prefetch (partitioned_param_coordinator.py fetch_sub_module l. 452-485), so with a prefetch
bucket below a layer the all-gathers group differently. Values by hand from the coordinator's rules and
partition_parameters.py's buffers (a coalesced all-gather's flat buffer sum ceil(n_i/W) x W x D,
_all_gather_dtype l. 1343, beside the torch.cat copies n_i x D once waited; a single parameter its own
padded buffer, _all_gather_sequential l. 1379-1398); the engine shows the same in tests/engine/
test_peak_parity.py's z3_bf16_nonpersist_containers_pb1000_w2."""
import types

from advisor.ledger import state
from advisor.model.inventory import Inventory, TensorSpec

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
    before_f, before_b = state.zero3_container_steps(inv)
    # modules: embed, (q, o, up, down, ln) x 2, norm, lm_head
    assert list(before_f) == [1, 2, 0, 1, 0, 0, 2, 0, 1, 0, 0, 0, 0]
    # backward: a container right before its last descendant (forward order): self_attn before o_proj,
    # mlp before down_proj, the layer before input_layernorm, model before norm
    assert list(before_b) == [0, 0, 1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 0]


def test_flat_names_have_no_containers():
    assert list(map(sum, state.zero3_container_steps(_inv(False)))) == [0, 0]


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
