"""The harness the ZeRO-1/2 CPU-offload identity tests share (test_offload_period_identity,
test_offload_kept_cols_identity, test_offload_no_xl21): one plan's offload reduce terms and whole ledger, computed
with advisor.ledger.state's module switches set as given (a shortcut on against the walk it replaces), so two
calls with the switches flipped must give the same answer. Each test file keeps its own random models and
configs."""

from __future__ import annotations

from typing import Any

from advisor.config.effective import effective_config
from advisor.ledger import state
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.model.inventory import Inventory


def terms_and_ledger(monkeypatch, inv: Inventory, W: int, cfg: dict, **switches: Any) -> tuple:
    """((bounds, values) of state.zero12_offload_reduce_terms, repr of every rank role's entries) for config
    ``cfg`` on ``inv`` at ``W`` ranks, with each ``state.NAME = value`` of ``switches`` set for the call (names
    are state's module attributes: switches such as ZERO12_OFFLOAD_PERIOD, or a spied function)."""
    with monkeypatch.context() as m:
        for name, value in switches.items():
            m.setattr(state, name, value)
        ec = effective_config(cfg)
        led = compute_ledger(Plan(ec, inv, Cluster(world_size=W)))
        wrapper = state.select_optimizer(ec)[0]
        ga = cfg["gradient_accumulation_steps"]
        terms = state.zero12_offload_reduce_terms(ec, state.zero12_layouts(ec, inv, W, wrapper), W, wrapper, inv, ga)
    return ((terms.bounds, terms.values),
            repr([(rl.rank, list(rl.ranks.ranges), rl.entries) for rl in led.ranks]))
