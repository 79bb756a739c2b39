"""The advisor's inventory of tests/engine/moe_toy.py's Net, for the native-MoE engine cells (torch-free: the
test process builds the ledger from it; the workers build the model itself from moe_toy)."""

from __future__ import annotations


def moe_toy_inventory(H: int, F: int, E: int):
    """One layer of moe_toy.Net: a module name no tensor-parallel rule knows (replicated, as the worker's plain
    nn.Linear(H, H)), the router's wg (E, H), and E experts of Linear(H, F) -> Linear(F, H) (advisor.model.parallel:
    kept whole, E / ep of them per rank)."""
    from advisor.model.inventory import Inventory, TensorSpec
    p = "model.layers.0"
    ts = [TensorSpec(f"{p}.mixer.weight", (H, H)), TensorSpec(f"{p}.mlp.gate.weight", (E, H))]
    for i in range(E):
        ts += [TensorSpec(f"{p}.mlp.experts.{i}.w1.weight", (F, H)), TensorSpec(f"{p}.mlp.experts.{i}.w2.weight", (H, F))]
    return Inventory("moe-worker", ts, meta={"hidden_size": H, "num_experts": E, "num_layers": 1})
