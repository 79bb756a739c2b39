"""Estimate: the ledger summarised per rank role, with fit against capacities and findings.

This is a view over :func:`advisor.ledger.compute_ledger`; it holds no formulas of its own.
Ranks whose bytes are identical in every (tier, class) are grouped into one *role* so that
a 1024-rank job prints a few rows, not 1024.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from advisor import DEEPSPEED_VERSION, __version__
from advisor.effective import EffectiveConfig, effective_config
from advisor.findings import Finding
from advisor.inventory import Inventory
from advisor.ledger import CLASSES, Cluster, Ledger, Plan, RankLedger, compute_ledger
from advisor.loading import LoadedConfig
from advisor.units import gb, gib

#: Report tiers: host merges pinned and pageable (both are split out under host_split).
REPORT_TIERS = ("accelerator", "host", "nvme")
_TIER_OF = {"accelerator": "accelerator", "host_pinned": "host", "host_pageable": "host", "nvme": "nvme"}


@dataclass
class Capacity:
    """Per-rank accelerator memory, per-node host memory, per-node NVMe space (bytes; None = unknown)."""

    accelerator: int | None = None
    host: int | None = None
    nvme: int | None = None


@dataclass
class Role:
    """A set of ranks with identical ledgers."""

    ranks: list[int]
    ledger: RankLedger

    def tiers(self) -> dict[str, dict[str, int]]:
        """tier -> class -> bytes (all lifetimes: persistent plus backward/step transients), with "total"."""
        out: dict[str, dict[str, int]] = {t: {c: 0 for c in CLASSES} for t in REPORT_TIERS}
        for e in self.ledger.entries:
            out[_TIER_OF[e.tier]][e.cls] += e.bytes
        for t in out:
            out[t]["total"] = sum(v for k, v in out[t].items() if k != "total")
        return out

    def host_split(self) -> dict[str, int]:
        return {"pinned": self.ledger.total("host_pinned"), "pageable": self.ledger.total("host_pageable")}


@dataclass
class FitRow:
    tier: str
    need: int
    capacity: int | None
    scope: str  # "per rank" or "per node"

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.need <= self.capacity

    @property
    def headroom(self) -> int | None:
        return None if self.capacity is None else self.capacity - self.need


@dataclass
class EstimateResult:
    source: str
    plan: Plan
    ledger: Ledger
    roles: list[Role]
    fit: list[FitRow]
    findings: list[Finding] = field(default_factory=list)

    def assumptions(self) -> dict[str, Any]:
        ec = self.plan.config
        z = ec.zero
        return {
            "zero_stage": z.stage,
            "precision": {"model": ec.model_dtype, "grad_accum": ec.grad_dtype, "communication": ec.comm_dtype,
                          "master_weights": "fp32"},
            "optimizer": {"type": ec.optimizer.type or "none given (client optimizer; Adam assumed)",
                          "basic": self.ledger.basic_optimizer, "wrapper": self.ledger.wrapper},
            "offload_optimizer": {"written": z.offload_optimizer.device, "effective": ec.offload_optimizer_effective},
            "offload_param": {"written": z.offload_param.device, "effective": ec.offload_param_effective},
            "sharding": (f"ZeRO-{z.stage} over a data-parallel group of {self.plan.cluster.dp_world_size} ranks"
                         if z.stage else "none (every rank holds full model states)"),
            "excluded": list(self.ledger.excluded),
            "notes": [{"pointer": n.pointer, "message": n.message} for n in ec.notes],
        }

    def to_dict(self) -> dict[str, Any]:
        inv = self.plan.inventory
        cl = self.plan.cluster
        return {
            "schema_version": 1,
            "tool": f"ds-advisor {__version__}",
            "deepspeed": DEEPSPEED_VERSION,
            "config": self.source,
            "model": {"name": inv.name, "source": inv.source, "parameters": inv.numel,
                      "trainable_parameters": inv.trainable_numel, "tensors": len(inv.tensors)},
            "cluster": {"world_size": cl.world_size, "dp_world_size": cl.dp_world_size,
                        "gpus_per_node": cl.gpus_per_node},
            "assumptions": self.assumptions(),
            "ranks": [
                {
                    "ranks": r.ranks,
                    "tiers": r.tiers(),
                    "host_split": r.host_split(),
                    "items": [
                        {"tier": e.tier, "class": e.cls, "item": e.item, "bytes": e.bytes, "life": e.life,
                         "formula": e.formula, "source": e.source}
                        for e in r.ledger.entries
                    ],
                }
                for r in self.roles
            ],
            "fit": [{"tier": f.tier, "scope": f.scope, "need": f.need, "capacity": f.capacity,
                     "headroom": f.headroom, "fits": f.fits} for f in self.fit],
            "findings": [f.to_dict() for f in self.findings],
        }


def group_roles(ledger: Ledger) -> list[Role]:
    """Group ranks whose (tier, class, item, life) -> bytes maps are identical."""
    roles: dict[tuple, Role] = {}
    for rl in ledger.ranks:
        key = tuple(sorted((e.tier, e.cls, e.item, e.life, e.bytes) for e in rl.entries))
        if key in roles:
            roles[key].ranks.append(rl.rank)
        else:
            roles[key] = Role(ranks=[rl.rank], ledger=rl)
    return list(roles.values())


def fit_rows(ledger: Ledger, roles: list[Role], capacity: Capacity) -> list[FitRow]:
    """Accelerator: worst rank against per-rank capacity. Host and NVMe: summed over the ranks
    of the fullest node (ranks 0..gpus_per_node-1) against the per-node capacity."""
    cl = ledger.plan.cluster
    per_node = cl.gpus_per_node or min(cl.world_size, 8)
    worst_acc = max(r.ledger.total("accelerator") for r in roles) if roles else 0
    node_ranks = [rl for rl in ledger.ranks if rl.rank < per_node]
    # Ranks are data-parallel ranks here; with tp/pp > 1 a node holds several of each.
    scale = max(1, per_node // max(1, len(node_ranks))) if node_ranks else 1
    host = sum(rl.total("host_pinned") + rl.total("host_pageable") for rl in node_ranks) * scale
    nvme = sum(rl.total("nvme") for rl in node_ranks) * scale
    rows = [FitRow("accelerator", worst_acc, capacity.accelerator, "per rank"),
            FitRow("host", host, capacity.host, f"per node ({per_node} ranks)")]
    if nvme or capacity.nvme:
        rows.append(FitRow("nvme", nvme, capacity.nvme, f"per node ({per_node} ranks)"))
    return rows


def fit_findings(rows: list[FitRow]) -> list[Finding]:
    """One error per tier that does not fit (code M100)."""
    out = []
    for r in rows:
        if r.fits is False:
            over = r.need - (r.capacity or 0)
            out.append(Finding(
                code="M100", severity="error", pointer="/zero_optimization",
                message=(f"{r.tier} {r.scope}: model states need {gb(r.need)} ({gib(r.need)}) but only "
                         f"{gb(r.capacity or 0)} is available: over by {gb(over)}"),
                fix=("shard more (higher ZeRO stage or more ranks), offload to host/NVMe, or shrink buffers"
                     if r.tier == "accelerator" else
                     "smaller offload buffers (buffer_size, buffer_count, sub_group_size), pin_memory false, "
                     "or more host memory"),
                data={"tier": r.tier, "need": r.need, "capacity": r.capacity, "over": over}))
    return out


def estimate(loaded: LoadedConfig, inventory: Inventory, cluster: Cluster, capacity: Capacity | None = None,
             findings: list[Finding] | None = None, effective: EffectiveConfig | None = None) -> EstimateResult:
    """Run the ledger for one config and summarise it.

    ``findings``: lint findings to carry along (estimate's JSON includes them). Fit findings
    (M100) are appended when a capacity is given and a tier does not fit.
    """
    ec = effective or effective_config(loaded.data)
    plan = Plan(config=ec, inventory=inventory, cluster=cluster)
    ledger = compute_ledger(plan)
    roles = group_roles(ledger)
    rows = fit_rows(ledger, roles, capacity or Capacity())
    all_findings = list(findings or []) + [f.located(loaded.positions, loaded.source) for f in fit_findings(rows)]
    return EstimateResult(source=loaded.source, plan=plan, ledger=ledger, roles=roles, fit=rows, findings=all_findings)
