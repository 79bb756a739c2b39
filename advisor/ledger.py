"""The state ledger: bytes DeepSpeed 0.19.8 allocates on each rank, by class, item and tier.

INTERFACE (stable; views depend on it):

* :class:`Plan` — the effective config x the model inventory x the cluster shape.
* :func:`compute_ledger(plan) -> Ledger` — one :class:`RankLedger` per data-parallel rank.
* Each :class:`Entry` is one allocation DeepSpeed makes: which rank, tier, state class, the
  fine-grained item name (the vocabulary below, shared with ``advisor.measure``), bytes,
  lifetime, the formula in words and the DeepSpeed source it comes from.

Tiers: ``accelerator``, ``host_pinned``, ``host_pageable``, ``nvme``.
Classes: ``parameters``, ``gradients``, ``master_weights``, ``optimizer_states``,
``activations``, ``workspace``.
Lifetimes: ``persistent`` (from init or the first step, kept), ``backward`` (from backward
until the optimizer step consumes it), ``step`` (transient inside ``optimizer.step``),
``init`` (initialisation only).

Items (the census names used by the engine harness; see the reference section 8):
  parameters:        lp_params_flat, lp_param_partitions, lp_params_gathered,
                     offload_bit16_param_buffer, max_in_cpu_buffer
  gradients:         lp_grads, averaged_gradients, grad_partitions_flat_buffer, fp32_grad,
                     fp32_grad_accum, offload_accumulated_grads_cpu, opt_unswapped_grad_tails
  master_weights:    fp32_master
  optimizer_states:  exp_avg, exp_avg_sq, step
  workspace:         ipg_bucket, offload_temp_grad_cpu, offload_temp_grad_accel,
                     opt_swap_buffers, param_swap_buffers, param_partitioned_swap_buffer

Formulas follow ../shared/reference/deepspeed-0.19.8-state-accounting.md sections 2-5, each
verified by tests/engine parity runs against the real engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from advisor.effective import EffectiveConfig
from advisor.inventory import Inventory

Tier = Literal["accelerator", "host_pinned", "host_pageable", "nvme"]
StateClass = Literal["parameters", "gradients", "master_weights", "optimizer_states", "activations", "workspace"]
Life = Literal["persistent", "backward", "step", "init"]

TIERS: tuple[str, ...] = ("accelerator", "host_pinned", "host_pageable", "nvme")
CLASSES: tuple[str, ...] = ("parameters", "gradients", "master_weights", "optimizer_states", "activations", "workspace")


@dataclass(frozen=True)
class Cluster:
    """The launch shape. ``world_size`` is the total number of ranks; the data-parallel
    world size (which ZeRO partitions over) is world_size / (tp x pp x sp)."""

    world_size: int = 1
    gpus_per_node: int | None = None
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    sequence_parallel: int = 1

    @property
    def dp_world_size(self) -> int:
        return max(1, self.world_size // (self.tensor_parallel * self.pipeline_parallel * self.sequence_parallel))


@dataclass(frozen=True)
class Plan:
    config: EffectiveConfig
    inventory: Inventory
    cluster: Cluster


@dataclass(frozen=True)
class Entry:
    rank: int
    tier: str
    cls: str
    item: str
    bytes: int
    life: str = "persistent"
    formula: str = ""
    source: str = ""


@dataclass
class RankLedger:
    rank: int
    entries: list[Entry] = field(default_factory=list)

    def total(self, tier: str | None = None, cls: str | None = None, lives: tuple[str, ...] | None = None) -> int:
        """Sum of entry bytes filtered by tier, class and lifetime (None = all)."""
        return sum(e.bytes for e in self.entries
                   if (tier is None or e.tier == tier) and (cls is None or e.cls == cls)
                   and (lives is None or e.life in lives))

    def by_item(self, item: str) -> list[Entry]:
        return [e for e in self.entries if e.item == item]


@dataclass
class Ledger:
    plan: Plan
    ranks: list[RankLedger]
    #: Which DeepSpeed objects this plan gets (wrapper, basic optimizer), for the assumptions.
    wrapper: str = ""
    basic_optimizer: str = ""
    #: What the ledger leaves out, in words.
    excluded: list[str] = field(default_factory=list)
    #: Per-step data movement (filled by the tiers/traffic work).
    movement: list = field(default_factory=list)


def compute_ledger(plan: Plan) -> Ledger:
    """Per-rank bytes by tier x class x item for ``plan``. Implemented in this module."""
    raise NotImplementedError
