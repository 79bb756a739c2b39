"""DeepSpeed MoE's fixed-capacity dispatch in the activation estimate.

The capacity is checked against DeepSpeed's own gate (``deepspeed.moe.sharded_moe.TopKGate``
run on CPU returns the capacity it dispatched with); the expert activations against the slot
count written out by hand from ``sharded_moe.py`` (E x C slots through the experts, each
route's gathered output, the gate's fp32 input and softmax, see advisor.model.activations).
"""

from __future__ import annotations

import math

import pytest

from advisor.model.activations import ActivationInputs, estimate_activations, layer_terms, moe_capacity
from advisor.model.specs import preset_inventory


@pytest.mark.parametrize("tokens,experts,k,factor,min_cap", [
    (100, 8, 1, 1.25, 4), (100, 8, 2, 1.25, 4), (100, 8, 3, 1.0, 4), (16, 8, 1, 1.0, 4), (4096, 64, 6, 1.5, 8),
])
def test_capacity_is_deepspeeds(tokens, experts, k, factor, min_cap):
    torch = pytest.importorskip("torch")
    from deepspeed.moe.sharded_moe import TopKGate

    torch.manual_seed(0)
    gate = TopKGate(16, experts, k=k, capacity_factor=factor, min_capacity=min_cap)
    gate.train()
    out = gate(torch.randn(tokens, 16), None, True)  # sparse routes: (l_aux, capacity, E, ...)
    assert moe_capacity(tokens, experts, k, factor, min_cap) == int(out[1])


def test_capacity_by_hand():
    assert moe_capacity(100, 8, 1, 1.25) == 16          # ceil(12.5 x 1.25) = ceil(15.625)
    assert moe_capacity(100, 8, 2, 1.25) == 32          # top-2: factor x 2 -> ceil(31.25)
    assert moe_capacity(16, 8, 1, 1.0) == 4             # ceil(2) = 2 < min_capacity 4
    with pytest.raises(ValueError):
        moe_capacity(16, 0, 1, 1.0)


def test_expert_activations_use_the_capacity():
    meta = preset_inventory("mixtral-8x7b").meta
    h, E, k, fe = 4096, 8, 2, 14336
    assert (meta["hidden_size"], meta["num_experts"], meta["experts_per_token"]) == (h, E, k)
    s, b, D = 4096, 1, 2
    C = math.ceil(s * b / E * 1.25 * k)                 # 1280 slots per expert
    slots = E * C                                        # 10,240 slots (of 8,192 routes: 25 % padding)
    per_f = 4                                            # SwiGLU: gate, up, product, SiLU's saved input
    want = (D * slots * (h + per_f * fe)                 # the experts' linears over every slot
            + (D * h + 4 + 8) * s * b * k                # each route's gathered output, fp32 gate, int64 slot
            + 4 * s * b * h + 4 * s * b * E)             # the gate's fp32 input and softmax
    got = layer_terms(meta, s, b, D, "flash", capacity_factor=1.25)["mlp"]
    # 2 x 10,240 x 61,440 + 8,204 x 8,192 + 67,108,864 + 131,072
    assert got == want == 1_392_738_304
    # tensor parallelism 2: drop_tokens splits the slots along C; the routes stay whole
    got2 = layer_terms(meta, s, b, D, "flash", t=2, capacity_factor=1.25)["mlp"]
    assert got2 == D * slots * (h + per_f * fe) // 2 + (D * h + 12) * s * b * k + 4 * s * b * h + 4 * s * b * E
    # the capacity reaches the estimate: a larger factor holds more
    lo = estimate_activations(meta, ActivationInputs(s, b, moe_capacity_factor=1.0))
    hi = estimate_activations(meta, ActivationInputs(s, b, moe_capacity_factor=2.0))
    assert hi.saved_accelerator - lo.saved_accelerator == 32 * D * E * (2048 - 1024) * (h + per_f * fe)


def test_capacity_not_divisible_by_tp_is_noted():
    meta = preset_inventory("mixtral-8x7b").meta
    # 100 tokens, top-2 over 8 experts, factor 1.0: C = 25, odd, and tensor parallel 2
    est = estimate_activations(meta, ActivationInputs(100, 1, tensor_parallel=2, moe_capacity_factor=1.0))
    assert any("not divisible by tensor parallel 2" in n for n in est.notes)
