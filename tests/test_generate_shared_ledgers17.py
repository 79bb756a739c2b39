"""Issue 21 (perf17): generate's searches share the ledgers of plans that have the same one.

(1) The Ulysses layouts (1, 1, u) partition over the same DP x SP ranks as data parallelism, so their plans
take the data-parallel plans' ledgers (``generate._dp_ledger_key``: the config but for batch sizes and the
Ulysses degree, GA > 1). (2) The re-searches of the "nothing fits" suggestions share their plans' ledgers.

``advisor.views.generate.suggest`` re-runs the search for more nodes, an NVMe tier and, by bisection, a
shorter sequence; each re-search fits the same (config, cluster) plans again. Within :func:`suggest` the
ledgers' roles are kept (``generate._SHARED_LEDGERS``, keyed by ``generate._ledger_key``: the config written,
the cluster, the workload but for the sequence length without pipeline parallelism).
``generate.SHARE_LEDGERS = False`` computes every ledger again (``advisor.ledger.state.compute_ledger``):
the reference. The tests compare the two on a request whose suggestion is a shorter sequence, with data
parallelism and with a fixed pipeline degree (where the last stage's kept logits, b x s x V x D, and the
receive buffers depend on the sequence length, so a key without it names another length: 5,376 instead
of 5,760 here), and check that sharing does skip ledgers.
"""

from __future__ import annotations

import json

import pytest

from advisor.cluster.hardware import from_dict
from advisor.ledger import state
from advisor.model.specs import resolve_model
from advisor.views import estimate, generate as gen

HF = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
      "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 8192, "num_hidden_layers": 4}


def _hw(mem: float):
    return from_dict({"nodes": 1, "accelerators_per_node": 2, "host_memory_bytes": 1e12,
                      "host_memory_bandwidth_bytes_per_s": 1e10,
                      "accelerator": {"name": "toy", "memory_bytes": mem, "peak_bf16_flops": 1e14,
                                      "host_link": {"bytes_per_s": 1e10}}})


def _run(monkeypatch, tmp_path, mem: float, pp: int | None, share: bool) -> tuple[str, int]:
    (tmp_path / "config.json").write_text(json.dumps(HF))
    inv = resolve_model(str(tmp_path / "config.json"))  # a fresh tensor list each run: no memo shared
    calls = []
    real = state.compute_ledger
    with monkeypatch.context() as m:
        m.setattr(gen, "SHARE_LEDGERS", share)
        m.setattr(state, "compute_ledger", lambda plan: calls.append(1) or real(plan))
        req = gen.Request(global_batch=8, seq_len=8192, nodes=1, gpus_per_node=2, pipeline_parallel=pp)
        with pytest.raises(gen.NothingFits) as e:
            gen.run(inv, _hw(mem), req, top=3)
    res = e.value.result
    return json.dumps([gen.result_json(res, top=3), res.suggestions], sort_keys=True), len(calls)


@pytest.mark.parametrize("mem, pp, length", [(4e9, None, 3968), (6e9, 2, 5760)])
def test_suggestions_equal_those_of_searches_that_compute_every_ledger(monkeypatch, tmp_path, mem, pp, length):
    shared, n_shared = _run(monkeypatch, tmp_path, mem, pp, True)
    alone, n_alone = _run(monkeypatch, tmp_path, mem, pp, False)
    assert shared == alone
    assert f"shorter sequence: --seq-len {length} (from 8192) fits" in alone
    # the re-searches fit the first search's plans again (under PP only those of its sequence length: each
    # length has its own pipe buffers): sharing computes fewer ledgers
    assert n_shared < n_alone, (n_shared, n_alone)


def _search(monkeypatch, tmp_path, share: bool, **kw) -> tuple[str, list, list]:
    (tmp_path / "config.json").write_text(json.dumps(HF))
    inv = resolve_model(str(tmp_path / "config.json"))
    calls, ledgers = [], []
    real, real_fit = state.compute_ledger, estimate.plan_fit

    def fit(plan, *a, **k):  # each plan's ledger as the fit read it: every role's ranks and entries
        pf = real_fit(plan, *a, **k)
        ledgers.append(repr([(list(rl.ranks.ranges), rl.entries) for rl in pf.ledger.ranks]))
        return pf
    with monkeypatch.context() as m:
        m.setattr(gen, "SHARE_LEDGERS", share)
        m.setattr(state, "compute_ledger", lambda plan: calls.append(plan.cluster.sequence_parallel) or real(plan))
        m.setattr(estimate, "plan_fit", fit)
        res = gen.search(inv, _hw(kw.pop("mem")), gen.Request(nodes=1, gpus_per_node=2, **kw), top=50)
    return json.dumps(gen.result_json(res, top=50), sort_keys=True), calls, ledgers


@pytest.mark.parametrize("kw", [dict(mem=3e9, global_batch=2, seq_len=8192), dict(mem=4e9, global_batch=2, seq_len=8192)])
def test_ulysses_layouts_share_the_data_parallel_ledgers(monkeypatch, tmp_path, kw):
    """The Ulysses layouts (1, 1, u) partition over the same DP x SP ranks as data parallelism: their ledgers
    are the data-parallel plans' (generate._dp_ledger_key), the search's result (every rejected plan's figures
    included: nothing fits, so the Ulysses layout is searched) the same as with each computed."""
    shared, n_shared, led_shared = _search(monkeypatch, tmp_path, True, **dict(kw))
    alone, n_alone, led_alone = _search(monkeypatch, tmp_path, False, **dict(kw))
    assert shared == alone
    # plan by plan, the ledger a shared one stands for is the one computed for that plan (but for entries'
    # words the per-combo led_cache already shares: none here differ)
    assert led_shared == led_alone
    assert 2 in n_alone and n_shared.count(2) < n_alone.count(2), (n_shared, n_alone)
