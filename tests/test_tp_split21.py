"""Issue 21: ``parallel.shard`` splits each tensor for tensor / expert parallelism once per (tensor list, tp, ep),
shared by every pipeline degree (``parallel._tp_split``); generate drops that split once no layout left to search
has its tp (``forget_shard(split=True)``).

Each expected shape is written here by hand from the rule the module docstring states (a nameless tensor sharded
along dim 0 by tp, ceil; Mixtral's fused (E, ., .) expert tensors hold E / ep experts, its attention projections
q / k / v column-parallel: out features / tp), never read from ``advisor.model.parallel``. Two splits of the same
tensor list differing only in tp (or ep) are asked for in turn, so a split keyed by less than (tp, ep) answers the
second wrongly.
"""

from __future__ import annotations

from advisor.model import parallel
from advisor.model.inventory import Inventory, TensorSpec
from advisor.model.parallel import forget_shard, shard
from advisor.model.specs import resolve_model

SHAPES = [(5, 3), (8, 8), (7,), (64, 2), (1, 4), (9, 9, 2)]


def _nameless() -> Inventory:
    return Inventory("nameless", [TensorSpec(f"t{i}", s) for i, s in enumerate(SHAPES)])


def _by_hand(tp: int) -> list[tuple[int, ...]]:
    return [(-(-s[0] // tp), *s[1:]) for s in SHAPES]


def test_nameless_split_per_tp_shared_across_pipeline_degrees():
    inv = _nameless()
    for tp, pp in ((2, 2), (4, 2), (2, 3), (4, 1), (2, 1), (1, 2)):
        stages = shard(inv, tp, pp)
        assert len(stages) == pp
        got = [t.shape for sh in stages for t in sh.inventory.tensors]
        assert got == (_by_hand(tp) if tp > 1 else SHAPES), (tp, pp)
        # partition_uniform over 6 tensors: pp 2 -> 3 + 3, pp 3 -> 2 + 2 + 2
        assert [len(sh.inventory.tensors) for sh in stages] == [6 // pp] * pp
        assert [t.name for sh in stages for t in sh.inventory.tensors] == [f"t{i}" for i in range(6)]


def test_forget_shard_drops_the_split_only_when_asked():
    inv = _nameless()
    shard(inv, 2, 2)
    forget_shard(inv, 2, 2)
    assert any(k[:2] == ("tp_split", 2) for k in inv._memo if isinstance(k, tuple))
    forget_shard(inv, 2, 2, split=True)
    assert not any(k[:1] == ("tp_split",) for k in inv._memo if isinstance(k, tuple))
    # and made again, the same by hand
    assert [t.shape for sh in shard(inv, 2, 2) for t in sh.inventory.tensors] == _by_hand(2)


def test_mixtral_expert_and_tensor_parallel_splits_keyed_by_both():
    """Mixtral-8x7B: 8 experts (fused (8, ., .) tensors), hidden 4096, 32 heads of 128, 8 KV heads."""
    inv = resolve_model("mixtral-8x7b")
    for tp, ep, pp in ((1, 2, 2), (1, 4, 2), (2, 2, 1), (2, 1, 2), (1, 8, 1), (1, 2, 1)):
        ts = [t for sh in shard(inv, tp, pp, ep) for t in sh.inventory.tensors]
        experts = [t for t in ts if ".experts." in t.name]
        assert experts and all(t.shape[0] == 8 // ep for t in experts), (tp, ep, pp)
        q = [t for t in ts if t.name.endswith("self_attn.q_proj.weight")]
        k = [t for t in ts if t.name.endswith("self_attn.k_proj.weight")]
        assert len(q) == 32 and all(t.shape == (4096 // tp, 4096) for t in q), (tp, ep, pp)
        assert len(k) == 32 and all(t.shape == (8 * 128 // tp, 4096) for t in k), (tp, ep, pp)


def test_split_matches_the_per_pipeline_degree_path(monkeypatch):
    """The shared split against _shard without it (each (tp, pp) splitting every tensor itself: the memo made
    a no-op), on llama-3-8b at tp 2 / 4 and pp 1 / 2 / 4: the same tensors in every stage, the same replicated
    counts."""
    inv = resolve_model("llama-3-8b")
    got = {(tp, pp): [(sh.layers, list(sh.inventory.tensors), sh.replicated) for sh in shard(inv, tp, pp)]
           for tp in (2, 4) for pp in (1, 2, 4)}
    plain = resolve_model("llama-3-8b")
    real_memo = Inventory.memo
    monkeypatch.setattr(Inventory, "memo", lambda self, key, compute: compute() if key[0] == "tp_split"
                        else real_memo(self, key, compute))
    for (tp, pp), want in got.items():
        assert [(sh.layers, list(sh.inventory.tensors), sh.replicated) for sh in parallel._shard(plain, tp, pp, 1)] \
            == want, (tp, pp)
