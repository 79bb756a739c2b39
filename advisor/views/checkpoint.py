"""The checkpoint view: the durable-checkpoint plan (advisor.ledger.checkpoint, compute) plus the
findings about where it is saved (rule T003), for the ``checkpoint`` command and ``estimate``.

Compute never runs rules; this view does.
"""

from __future__ import annotations

from typing import Any

from advisor.ledger.checkpoint import CheckpointPlan, checkpoint_plan
from advisor.plan import Plan


def checkpoint_view(plan: Plan, findings: list | None = None, **options: Any) -> CheckpointPlan:
    """:func:`advisor.ledger.checkpoint.checkpoint_plan` of the command's ``plan``
    (:func:`advisor.planning.build_plan`; same keyword ``options``: keep, bandwidths in bytes/s,
    nodes, node_mtbf_hours, step_time_s, restart_s, hardware, save_dir, save_interval_s), with
    ``findings`` set: T003 when the save dir lies on a read-oriented storage tier of the hardware
    spec. Raises ValueError as checkpoint_plan does. (The ``checkpoint`` command goes through
    :func:`advisor.views.estimate.checkpoint_with_step_time`, which adds the model's step time.)

    ``findings``: the config's lint findings (``lint_config(..., keep_refusals=True)``). When one
    refuses (:func:`advisor.rules.refusals`, estimate's gate: DeepSpeed raises before training,
    e.g. ``zero_optimization.stage`` 7), nothing is saved: no files, ``files.unsupported`` names
    the first such finding and ``findings`` holds the refusing ones (exit 1, as estimate)."""
    from advisor.rules import refusals
    from advisor.rules.T003_checkpoint_on_read_oriented import CheckpointOnReadOriented

    cp = checkpoint_plan(plan, **options)
    refused = refusals(findings or [])
    if refused:
        cp.files.files = []
        cp.files.unsupported = f"{refused[0].code}: {refused[0].message}"
        cp.findings = list(refused)
        return cp
    if cp.tier is not None and not cp.files.unsupported:
        cp.findings = list(CheckpointOnReadOriented.from_plan(cp))
    return cp

