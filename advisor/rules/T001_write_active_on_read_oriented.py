"""T001 write-active-on-read-oriented: state rewritten every step placed on a read-oriented tier.

What DeepSpeed does: with ZeRO-3 ``offload_optimizer.device: nvme`` every optimizer step swaps
the fp32 master weights and both Adam moments of each sub-group in from ``nvme_path`` and back
out, and writes the fp32 gradient pieces once: about 16 bytes written (and 16 read) per
partition element per step (reference section 5.4, measured byte-exactly). With
``offload_param.device: nvme`` the trained 16-bit partitions that do not fit ``max_in_cpu`` are
written back after every step. A tier marked ``read-oriented`` in the hardware spec (QLC
flash, read-optimised arrays, high-bandwidth flash meant for weights) has neither the write
bandwidth nor the write endurance for that: a 6.7B-parameter model writes ~107 GB per step, and
at 30 s per step a 1,200 TBW drive is worn out in about 4 days.

The finding gives the bytes written per step (summed over the node's ranks), per day at the
step time (``--step-time``), and the projected days until the drive's rated endurance (TBW,
or DWPD x capacity x 365 x warranty years) is used.

Frozen parameters (PEFT base weights, inference) on such a tier are fine: DeepSpeed only reads
them (they are never placed in the ``max_in_cpu`` buffer and never swapped out, since no
optimizer updates them), so the rule reports them as ``info``. Trainable parameters that all fit
``max_in_cpu`` are also only written once at initialisation (``info``).

Needs ``--hardware`` (a spec whose storage tier holds the ``nvme_path``) and a model.

Anti-pattern (hardware spec marks ``/mnt/qlc`` read-oriented)::

    "offload_optimizer": {"device": "nvme", "nvme_path": "/mnt/qlc/ds"}

Fix: point ``nvme_path`` at a read-write tier with enough endurance, or offload the optimizer
to host memory (``device: cpu``); keep read-oriented flash for frozen weights.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.findings import literal
from advisor.rules._util import movements_and_endurance, per_day_text, zero_raw, zptr

_WRITE_ACTIVE = {"gradients": "gradients", "optimizer_states": "optimizer moments",
                 "master_weights": "fp32 master weights", "parameters": "trained parameters"}
#: The state classes each offload section swaps to its own nvme_path (advisor.ledger.movement).
_OWN = {"offload_optimizer": {"master_weights", "optimizer_states", "gradients"}, "offload_param": {"parameters"}}


@register
class WriteActiveOnReadOriented(Rule):
    code = "T001"
    reads_stage = True
    name = "write-active-on-read-oriented"
    severity = "error"
    needs_model = True

    def check(self, ctx: LintContext):
        hw = ctx.hardware
        if hw is None or ctx.inventory is None or not getattr(hw, "storage", None):
            return
        ec = ctx.effective
        if ec.zero.stage != 3:
            return  # NVMe swapping exists only in ZeRO-3 (stage 1/2 "nvme" is CPU offload)
        step_time_s = ctx.step_time_s
        moves, lines = movements_and_endurance(ctx)
        zr = zero_raw(ctx.raw)
        sections = []
        if ec.offload_optimizer_effective == "nvme":
            sections.append("offload_optimizer")
        if ec.offload_param_effective == "nvme":
            sections.append("offload_param")
        # one finding per read-oriented tier (the fault is the tier), whichever sections and
        # nvme_paths put state on it; each section counts only the classes it swaps itself
        by_tier: dict[str, tuple] = {}
        for sec in sections:
            tier = hw.tier_for_path(getattr(ec.zero, sec).nvme_path)
            if tier is not None and tier.read_oriented:
                by_tier.setdefault(tier.name, (tier, []))[1].append(sec)

        def ptr_of(sec: str) -> str:
            raw_sec = zr.get(sec) if isinstance(zr.get(sec), dict) else {}
            return zptr(sec, "nvme_path") if "nvme_path" in raw_sec else zptr(sec, "device")

        for tier, secs in by_tier.values():
            paths = {getattr(ec.zero, s).nvme_path for s in secs}
            mine = [m for m in moves if m.link == "nvme" and m.path in paths and m.rank == 0]
            written = {m.cls for m in mine if m.direction == "write" and m.bytes > 0}
            active = [s for s in secs if written & _OWN[s]]
            writes = written & set().union(*(_OWN[s] for s in active)) if active else set()
            line = next((ln for ln in lines if ln.tier == tier.name), None)
            where = literal(f"read-oriented tier '{tier.name}' ({', '.join(tier.mounts)})")
            path = getattr(ec.zero, (active or secs)[0]).nvme_path
            if active:
                per_step = line.write_bytes_per_step if line else sum(m.bytes for m in mine if m.direction == "write")
                what = ", ".join(_WRITE_ACTIVE[c] for c in ("master_weights", "optimizer_states", "gradients",
                                                            "parameters") if c in writes)
                who = " and ".join(active) + (" place" if len(active) > 1 else " places")
                msg = (f"{who} write-active state ({what}) on {where}: {{bytes_written_per_step:bytes}} written per "
                       f"optimizer step on each node")
                data = {"tier": tier.name, "path": path, "bytes_written_per_step": per_step,
                        "classes": sorted(writes), "sections": active, "rated_write_bytes": tier.rated_write_bytes}
                sizes = {"bytes_written_per_step": per_step}
                if step_time_s and line is not None:
                    msg += "; " + per_day_text(line, step_time_s, tier, data, sizes)
                else:
                    msg += " (give --step-time for bytes per day and the drive's projected life)"
                yield self.finding(
                    ptr_of(active[0]), msg,
                    "point nvme_path at a read-write tier with the endurance for it, or offload to host memory "
                    "(device: cpu); keep read-oriented flash for frozen weights",
                    sizes=sizes, **data)
            elif "offload_param" in secs:
                frozen = any(m.item == "frozen_params" and m.bytes > 0 for m in mine)
                why = ("only frozen parameters are swapped from it: DeepSpeed reads them on each fetch and never "
                       "writes them back (no optimizer updates them)" if frozen else
                       "every trained parameter partition fits offload_param.max_in_cpu, so DeepSpeed writes the "
                       "files once at initialisation and keeps the partitions in host memory")
                yield self.finding(ptr_of("offload_param"), f"offload_param uses {where}: fine, {why}",
                                   "nothing to change; train these parameters and they become write-active (an error)",
                                   severity="info",
                                   tier=tier.name, path=path, bytes_written_per_step=0)
