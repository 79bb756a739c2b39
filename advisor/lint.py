"""Lint: schema validation plus the rule registry, over one loaded config.

``lint_config`` is the library entry point the CLI (and check, generate's self-test) call.
"""

from __future__ import annotations

from advisor.effective import effective_config
from advisor.findings import Finding, sort_findings
from advisor.inventory import Inventory
from advisor.loading import LoadedConfig
from advisor.rules import LintContext, all_rules
from advisor.schema import validate_config


def lint_config(loaded: LoadedConfig, *, world_size: int | None = None, world_size_source: str | None = None,
                dp_world_size: int | None = None, inventory: Inventory | None = None, hf: bool = False,
                select: set[str] | None = None) -> list[Finding]:
    """All findings for one config, located (line/column) and sorted.

    ``world_size``: total ranks, when known; ``dp_world_size`` defaults to it.
    ``inventory``: the model, enabling rules that need one. ``hf``: the config goes through
    the HF Trainer/accelerate, which fills in "auto". ``select``: only these rule codes.
    """
    ctx = LintContext(loaded=loaded, effective=effective_config(loaded.data), world_size=world_size,
                      world_size_source=world_size_source,
                      dp_world_size=dp_world_size if dp_world_size is not None else world_size,
                      inventory=inventory, hf=hf)
    findings: list[Finding] = list(validate_config(loaded, hf=hf))
    for code, rule_cls in all_rules().items():
        if select is not None and code not in select:
            continue
        if rule_cls.needs_model and inventory is None:
            continue
        findings.extend(rule_cls().check(ctx))
    # One finding per (code, pointer): rules and schema may both see a fault.
    seen: set[tuple[str, str]] = set()
    out: list[Finding] = []
    for f in findings:
        k = (f.code, f.pointer)
        if k in seen:
            continue
        seen.add(k)
        out.append(f.located(loaded.positions, loaded.source))
    return sort_findings(out)
