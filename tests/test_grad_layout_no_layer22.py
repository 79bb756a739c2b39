"""Issue 21: timeline.backward_grad_layout of a tensor list in which no name holds a layer (model.parallel._LAYER_RE)
by C-level sums (``timeline.GRAD_LAYOUT_NO_LAYER``, default on), not the per-tensor walk (False: the reference).
Compared on seeded random lists of names with and without layers -- near misses ("xlayers.1.", "layers.x.", "h1."),
names whose join could look like a layer ("a.layers" then "3.b"), frozen tensors, weight / bias pairs (autograd
siblings), zero-size tensors -- equal both ways; the fast path must have run on some and not on others."""
import random

import pytest

from advisor.ledger import timeline
from advisor.model.inventory import Inventory, TensorSpec

PIECES = ["model", "layers", "h", "blocks", "xlayers", "hh", "block", "1", "23", "x", "a", "weight", "bias", "3.b",
          "layers.7", "h.0", "mlp"]


def _inventory(rng: random.Random) -> Inventory:
    out = []
    for k in range(rng.randint(0, 40)):
        name = ".".join(rng.choice(PIECES) for _ in range(rng.randint(1, 4)))
        shape = rng.choice([(rng.randint(0, 30),), (rng.randint(1, 9), rng.randint(1, 9))])
        out.append(TensorSpec(f"{name}.{k}" if rng.random() < 0.5 else name, shape, trainable=rng.random() < 0.8))
        if rng.random() < 0.3:  # an nn.Linear's weight and bias: autograd siblings (state.autograd_siblings)
            o = rng.randint(1, 9)
            out.append(TensorSpec(f"{name}.m{k}.weight", (o, rng.randint(1, 9)), trainable=rng.random() < 0.9))
            out.append(TensorSpec(f"{name}.m{k}.bias", (o,), trainable=rng.random() < 0.9))
    return Inventory("rand", out)


def _layout(inv_args, on, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(timeline, "GRAD_LAYOUT_NO_LAYER", on)
        return timeline.backward_grad_layout(Inventory("rand", list(inv_args)))


@pytest.mark.parametrize("block", range(4))
def test_no_layer_sums_equal_the_walk(monkeypatch, block):
    rng = random.Random(22_100 + block)
    fast = 0
    for _ in range(150):
        inv = _inventory(rng)
        on, off = _layout(inv.tensors, True, monkeypatch), _layout(inv.tensors, False, monkeypatch)
        assert on == off, [(t.name, t.shape, t.trainable) for t in inv.tensors]
        fast += not on[2]
    assert 10 < fast < 140


def test_a_layer_in_the_join_only_is_walked(monkeypatch):
    # "a.layers" then "3.b.w": joined "a.layers.3.b.w" looks like layer 3, neither name holds one: walked, no layer
    inv = [TensorSpec("a.layers", (4,)), TensorSpec("3.b.w", (2, 3))]
    assert _layout(inv, True, monkeypatch) == _layout(inv, False, monkeypatch) == (0, 10, (), 0, 6, (), 10)
