"""T002 drive-wear: the NVMe swap wears out a drive's rated endurance within a year.

What DeepSpeed does: ZeRO-3 NVMe offload rewrites the optimizer state (fp32 master weights and
Adam moments) and the fp32 gradients on every optimizer step, about 16 bytes per partition
element written (and as many read; reference section 5.4). That is fine for a drive rated for
it and ruinous for a consumer SSD: 6.7B parameters write ~107 GB per step, which at 30 s per step
is ~309 TB a day, and a 2 TB drive rated for 1,200 TBW is worn out in about 4 days. DeepSpeed
0.19.8 itself only logs a generic warning about heavy write traffic.

This rule needs ``--hardware`` (with the drive's endurance: TBW, or DWPD with warranty years)
and ``--step-time``; it reports a read-write tier whose rated endurance would be used up in
under a year at that step rate, with bytes written per step and per day and the projected
life. (A read-oriented tier is T001's business.) Writes of all the node's ranks to the tier
are summed. A step time shorter than the drive needs to move one step's NVMe traffic (its writes
at the rated write bandwidth plus its reads at the read bandwidth) would give writes per day the
drive cannot physically do: the finding then says so and gives the figures at the step time
that traffic implies (``data.implied_step_time_seconds``), as T001 does.

Checkpoints saved to the same tier (``estimate --save-dir`` on it, with ``--save-interval``)
wear the same drive: the per-day writes and the projected life then count the swap's writes and
the saves' (the tier's bytes per save x saves per day), the same total estimate's endurance line
shows (``advisor.ledger.movement.saves_on_tier``), and the finding names both parts
(``data.swap_bytes_per_day``, ``data.checkpoint_bytes_per_day``). A swap that alone would last a
year may not with the saves beside it.

Anti-pattern (a 2 TB consumer drive rated 1,200 TBW, 30 s per step, 6.7B parameters)::

    "offload_optimizer": {"device": "nvme", "nvme_path": "/scratch/nvme"}

Fix: a drive with more endurance (enterprise, 1-3 DWPD), several drives in RAID 0 (each takes
a share of the writes), ``offload_optimizer.device: cpu`` when host memory allows, or more
ranks (ZeRO-3 divides the state, so each drive takes less).
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.findings import literal
from advisor.rules._util import movements_and_endurance, per_day_text, zero_raw, zptr

WEAR_DAYS = 365


@register
class DriveWear(Rule):
    code = "T002"
    reads_stage = True
    name = "drive-wear"
    severity = "warning"
    needs_model = True

    def check(self, ctx: LintContext):
        hw = ctx.hardware
        step_time_s = ctx.step_time_s
        if hw is None or not step_time_s or ctx.inventory is None or ctx.effective.zero.stage != 3:
            return
        for ln in movements_and_endurance(ctx)[1]:
            if ln.tier is None or ln.access != "read-write" or not ln.write_bytes_per_step:
                continue
            tier = next(t for t in hw.storage if t.name == ln.tier)
            data = {"tier": ln.tier, "bytes_written_per_step": ln.write_bytes_per_step,
                    "rated_write_bytes": ln.rated_write_bytes}
            sizes = {"bytes_written_per_step": ln.write_bytes_per_step}
            when = per_day_text(ln, step_time_s, tier, data, sizes)  # at the step time the traffic allows
            if data["days_of_life"] is None or data["days_of_life"] >= WEAR_DAYS:
                continue
            zr = zero_raw(ctx.raw)
            sec = next((s for s in ("offload_optimizer", "offload_param")
                        if getattr(ctx.effective.zero, s).nvme_path in ln.paths), "offload_optimizer")
            raw_sec = zr.get(sec) if isinstance(zr.get(sec), dict) else {}
            ptr = zptr(sec, "nvme_path") if "nvme_path" in raw_sec else zptr(sec)
            yield self.finding(
                ptr,
                literal(f"NVMe swap on tier '{ln.tier}' ({', '.join(tier.mounts)})") + " writes {bytes_written_per_step:bytes} "
                f"per optimizer step per node: {when}",
                "a drive rated for the writes (enterprise 1-3 DWPD) or several in RAID 0, more ranks, or "
                "offload_optimizer.device cpu when host memory allows", sizes=sizes, **data)
