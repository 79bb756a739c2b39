"""Helpers shared by the rule modules (no rule here; imported by the registry like any module).

Reading the *raw* config: rules point at the key the user wrote, so they look at ``ctx.raw``
for presence and spelling and at ``ctx.effective`` for what DeepSpeed 0.19.8 will do.
"""

from __future__ import annotations

from typing import Any

from advisor.findings import literal, pointer
from advisor.units import days_text

AUTO = "auto"


def is_auto(v: Any) -> bool:
    return isinstance(v, str) and v == AUTO


def section(raw: dict, *path: str) -> dict:
    """The dict at ``path`` in ``raw`` ({} when absent or not a dict)."""
    cur: Any = raw
    for p in path:
        if not isinstance(cur, dict):
            return {}
        cur = cur.get(p)
    return cur if isinstance(cur, dict) else {}


#: Per offload block, the keys only NVMe swapping reads (``offload_config.py``; ``stage3.py``
#: _configure_tensor_swapping): under ``device: cpu`` they have no effect (O005).
NVME_ONLY = {
    "offload_param": ("nvme_path", "buffer_count", "buffer_size", "max_in_cpu"),
    "offload_optimizer": ("nvme_path", "buffer_count", "pipeline_read", "pipeline_write", "pipeline", "fast_init"),
}


def zero_raw(raw: dict) -> dict:
    """The raw ``zero_optimization`` dict ({} for absent, or for the legacy boolean form)."""
    return section(raw, "zero_optimization")


def zptr(*tokens: str) -> str:
    return pointer("zero_optimization", *tokens)


def zero3_partial_offload_ratio(ctx: Any, devices: tuple[str, ...] = ("cpu",)) -> float | None:
    """The ``offload_optimizer.ratio`` (< 1) of a ZeRO-3 config whose partial optimizer offload DeepSpeed
    runs, else None: the key written, stage 3, the optimizer offloaded to one of ``devices`` (the CPU unless
    the rule judges NVMe too, whose swapped sub-groups stay NVMe files: stage3.py l.1117), a release that knows
    the key (0.12.3 on; before, V001 reports it unknown) and DeepSpeedCPUAdam as the optimizer
    (stage3.py l.316 refuses any other: 'Hybrid Optimizer Only Supports DeepSpeedCPUAdam', M090).
    The gate of O008 and O009."""
    from advisor.config.versions import key_status
    ec = ctx.effective
    r = ec.zero.offload_optimizer.ratio
    b = zero_raw(ctx.raw).get("offload_optimizer")
    # offload_config.py l.99 bounds ratio to [0, 1] (Field(1.0, ge=0.0, le=1.0)): a ratio below 0 is refused at
    # deepspeed.initialize (S004 reports it) and no sub-group split is computed from it
    if ec.zero.stage != 3 or ec.offload_optimizer_effective not in devices or r is None or r >= 1.0 or r < 0.0 \
            or not isinstance(b, dict) or "ratio" not in b:
        return None
    if ctx.release is not None and key_status("/zero_optimization/offload_optimizer/ratio",
                                              ctx.release.checked).state == "absent":
        return None
    # lazily: lint of other configs never loads the ledger
    from advisor.ledger.state import select_optimizer
    return r if select_optimizer(ec)[1] == "DeepSpeedCPUAdam" else None


def offload_switch_set(ctx: Any, devices: dict[str, str]) -> list[str]:
    """``--set`` strings (:mod:`advisor.config.overrides`) that move ZeRO-3 offload blocks to other devices
    and leave no key O005 reports: ``devices`` maps ``offload_optimizer`` / ``offload_param`` to ``"cpu"``
    or ``"none"``. Each block is written whole from the config's own, with its new device and without the
    keys that device does not read (:data:`NVME_ONLY` for cpu, O005's; every other key for none, where
    ``offload_config.py`` reads nothing else); an ``aio`` section, read only by the NVMe swappers, is
    emptied when no block is left on NVMe. A block that is not an object gets ``<block>.device=<device>``."""
    import json

    zr = zero_raw(ctx.raw)
    out: list[str] = []
    for block, dev in devices.items():
        b = zr.get(block)
        if not isinstance(b, dict):
            out.append(f"zero_optimization.{block}.device={dev}")
            continue
        if dev == "none":
            kept: dict = {"device": "none"}
        else:
            kept = {k: v for k, v in b.items() if k not in NVME_ONLY[block]}
            kept["device"] = dev
        try:
            out.append(f"zero_optimization.{block}={json.dumps(kept)}")
        except (TypeError, ValueError):  # a value JSON cannot write: only the device
            out.append(f"zero_optimization.{block}.device={dev}")
    ec = ctx.effective
    after = {"offload_optimizer": ec.offload_optimizer_effective, "offload_param": ec.offload_param_effective}
    after.update(devices)
    if "nvme" not in after.values() and isinstance(ctx.raw.get("aio"), dict) and ctx.raw["aio"]:
        out.append("aio={}")
    return out


def first_key(d: dict, *names: str) -> str | None:
    """The first of ``names`` present in ``d``."""
    for n in names:
        if n in d:
            return n
    return None


def fmt_int(n: int) -> str:
    """12345678 -> '12,345,678'."""
    return f"{n:,}"


#: DeepSpeed's own optimizer names (``runtime/config.py`` DEEPSPEED_OPTIMIZERS), compared lower-cased.
DEEPSPEED_OPTIMIZERS = ("adagrad", "adam", "adamw", "lamb", "muadam", "muadamw", "musgd", "lion", "muon")
#: ``torch.optim`` optimizer classes (torch 2.13), matched exactly (``getattr(torch.optim, name)``).
TORCH_OPTIMIZERS = ("ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "LBFGS", "Muon", "NAdam",
                    "RAdam", "RMSprop", "Rprop", "SGD", "SparseAdam")


def movements_and_endurance(ctx: Any) -> tuple[list, list]:
    """(per-rank movements per step, per-storage-tier endurance lines) for the context's plan
    and hardware (``advisor.ledger.movement.movement_for`` / ``endurance_report``), computed once per
    lint run and shared by the T rules through ``ctx.cache.movements``. Needs ``ctx.hardware``
    and an inventory. With ``ctx.save_dir`` on a tier the swap writes to (estimate
    ``--save-dir``, a step time and a save interval), that tier's line counts the saves' bytes
    per day too (:meth:`advisor.ledger.movement.EnduranceLine.add_saves`, the figure estimate's
    endurance line shows: the checkpoint plan's ``checkpoint_bytes_per_day``)."""
    key = (id(ctx.hardware), ctx.step_time_s, ctx.save_dir, ctx.save_interval_s)
    cached = ctx.cache.movements
    if cached is None or cached[0] != key:
        from advisor.ledger.movement import endurance_report, movement_for
        from advisor.plan import Cluster, Plan

        hw = ctx.hardware
        plan = ctx.plan  # the command's plan: its movements are computed once, shared with estimate
        if plan is None:
            ws = ctx.dp_world_size or ctx.world_size or 1
            plan = Plan(config=ctx.effective, inventory=ctx.inventory, cluster=Cluster(world_size=ws))
        # Only the first node's ranks: endurance_report counts one node's drives, T001 reads rank
        # 0, so listing every rank (O(W x rows)) would buy nothing at 2^20 ranks. The ranks of one node are the
        # ledger's one rule (state.ranks_per_node, as estimate's endurance line: movement_summary), not the
        # hardware's accelerators per node -- a launch shape or sidecar can run fewer ranks on a node
        from advisor.ledger.movement import _ranks_per_node, nodes_of
        rpn = _ranks_per_node(plan, hw)
        moves = movement_for(plan, hw, ranks=range(rpn))
        lines = endurance_report(moves, hw, ctx.step_time_s, ranks_per_node=rpn,
                                 nodes=nodes_of(plan.cluster.world_size, rpn))
        if ctx.save_dir and ctx.step_time_s and hw is not None and ctx.plan is not None:
            _add_checkpoint_saves(ctx, lines)
        cached = (key, moves, lines)
        ctx.cache.movements = cached
    return cached[1], cached[2]


def _add_checkpoint_saves(ctx: Any, lines: list) -> None:
    """Checkpoint saves to ``ctx.save_dir`` on a tier one of ``lines`` (EnduranceLines) writes
    swap to: that line counts their bytes per day (the checkpoint plan of the plan estimate's
    checkpoint section lists, ``advisor.ledger.movement.movement_plan``, at ``ctx.save_interval_s``;
    None without an interval, and then nothing is added)."""
    from advisor.ledger.checkpoint import checkpoint_plan
    from advisor.ledger.movement import movement_plan

    tier = ctx.hardware.tier_for_path(ctx.save_dir)
    ln = next((x for x in lines if tier is not None and x.tier == tier.name and x.write_bytes_per_step
               and x.write_bytes_per_day is not None), None)
    if ln is None:
        return
    cp = checkpoint_plan(movement_plan(ctx.plan), hardware=ctx.hardware, save_dir=ctx.save_dir,
                         save_interval_s=ctx.save_interval_s, step_time_s=ctx.step_time_s)
    if cp.files.unsupported:
        return
    per_day = (cp.storage() or {}).get("checkpoint_bytes_per_day")
    if per_day is not None:
        ln.add_saves(per_day, ctx.save_dir)


def hf_findings(ctx: Any) -> list:
    """The H findings of the HF Trainer / accelerate replay for this lint run
    (:func:`advisor.config.hf.findings_for_context`, cached in ``ctx.cache``); [] without ``--hf``,
    and then the replay is not even imported (lint's start-up)."""
    if not ctx.hf:
        return []
    from advisor.config.hf import findings_for_context

    return findings_for_context(ctx)


def implied_step_time(line: Any) -> float | None:
    """:func:`advisor.ledger.movement.implied_step_time` (one definition; imported lazily: lint
    without a model loads no ledger)."""
    from advisor.ledger.movement import implied_step_time as implied
    return implied(line)


def per_day_text(line: Any, step_time_s: float, tier: Any, data: dict, sizes: dict) -> str:
    """The per-day clause of an NVMe wear finding (T001, T002) for an EnduranceLine at
    ``step_time_s``, adding its figures to ``data``. When the drive cannot move a step's traffic
    in ``step_time_s`` (write + read seconds at its bandwidths exceed it), the per-day figures at
    that step time are physically impossible: the clause says so and gives them at the step time
    the traffic implies instead (``data["implied_step_time_seconds"]``). The clause is a sized
    template (:func:`advisor.findings.render_sized`): its byte figures are added to ``sizes``."""
    t = step_time_s
    io = implied_step_time(line)
    out = ""
    if io is not None and io > step_time_s:
        t = io
        out = (f"at {step_time_s:g} s per step the drive would have to write "
               "{write_bytes_per_s:/s}, but moving one step's NVMe traffic "
               f"takes it at least {io:,.1f} s ({line.write_seconds_per_step or 0:,.1f} s writing + "
               f"{line.read_seconds_per_step or 0:,.1f} s reading at its rated bandwidths), so steps take at least "
               f"that long; ")
        data["implied_step_time_seconds"] = io
        sizes["write_bytes_per_s"] = line.write_bytes_per_step / step_time_s
    spd = 86400 / t
    # the line's figures (advisor.ledger.movement.endurance_report, at this step time or the one the
    # traffic implies; a shared tier: every node's writes), checkpoint saves to the tier included
    per_day = line.write_bytes_per_day
    if per_day is None:  # a line made without a step time
        per_day = line.write_bytes_per_step * getattr(line, "writing_nodes", 1) * spd
    out += f"at {t:,.1f} s per step ({spd:,.0f} steps/day) that is {{bytes_written_per_day:T1}} written per day" \
        if t != step_time_s else \
        f"at {t:g} s per step ({spd:,.0f} steps/day) that is {{bytes_written_per_day:T1}} written per day"
    sizes["bytes_written_per_day"] = per_day
    ck = getattr(line, "checkpoint_bytes_per_day", None)
    if ck is not None:
        out += (" ({swap_bytes_per_day:T1} of NVMe swap + {checkpoint_bytes_per_day:T1} of checkpoint saves to "
                + literal(str(line.checkpoint_save_dir)) + ", on the same tier)")
        sizes.update(swap_bytes_per_day=line.swap_bytes_per_day, checkpoint_bytes_per_day=ck)
        data.update(swap_bytes_per_day=line.swap_bytes_per_day, checkpoint_bytes_per_day=ck,
                    checkpoint_save_dir=line.checkpoint_save_dir)
    days = tier.rated_write_bytes / per_day if tier.rated_write_bytes and per_day else None
    data.update(step_time_seconds=step_time_s, steps_per_day=spd, bytes_written_per_day=per_day,
                days_of_life=days if days is not None else line.days_of_life)
    if tier.rated_write_bytes:
        out += f", and the drive's rated endurance ({tier.endurance.describe()}) is used up in {days_text(days)}"
    return out
