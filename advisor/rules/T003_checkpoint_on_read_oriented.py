"""T003 checkpoint-on-read-oriented: durable checkpoints saved to a read-oriented storage tier.

What DeepSpeed does: every ``engine.save_checkpoint(save_dir)`` writes the whole training state
under ``save_dir``: the model-states file(s), every rank's ZeRO optimizer-state shard (fp32
master weights and both Adam moments: about 12 bytes per parameter, plus the 16-bit model), the
recovery scripts and ``latest``. A new tag folder is written on every save, so the drive absorbs
that volume again and again for the whole run. A tier marked ``read-oriented`` in the hardware
spec (QLC flash, read-optimised arrays, high-bandwidth flash meant for weights and datasets) is
rated for a fraction of a drive write per day: checkpoints are write-active state, the same
contract as T001 for the NVMe optimizer swap, only at the save interval instead of every step.
An 8B-parameter model at ZeRO-2 writes ~112 GB per save; saved every 10 minutes that is
~16 TB a day, and a 30.72 TB drive rated 0.5 DWPD for 5 years is used up in under its warranty.

The finding comes from ``ds-advisor checkpoint CONFIG --hardware HW --save-dir PATH`` (the tier
whose mount point holds ``PATH``). It gives the bytes the busiest node writes per save (on a
shared tier, ``scope`` "shared", every node's: one filesystem takes them all), the bytes
per day at the save interval (``--save-interval``, else the Young/Daly interval from
``--node-mtbf-hours``), and the projected days until the drive's rated endurance (TBW, or DWPD x
capacity x 365 x warranty years) is used: bytes per day = bytes per save x 86,400 / interval;
days = rated bytes / bytes per day. It is an **error** when that life is shorter than the
drive's warranty period, else a **warning** (the tier's write bandwidth still slows every save,
and the endurance is better spent on nothing).

Anti-pattern (hardware spec marks ``/mnt/qlc`` read-oriented)::

    ds-advisor checkpoint ds_config.json --model llama-3-8b --hardware spec.json \\
        --save-dir /mnt/qlc/checkpoints --save-interval 600

Fix: save checkpoints to a read-write tier (an enterprise 1-3 DWPD drive, a parallel file
system, object storage); keep read-oriented flash for weights and datasets, which training only
reads.
"""

from __future__ import annotations

from typing import Any, Iterable

from advisor.findings import Finding, literal
from advisor.rules import LintContext, Rule, register
from advisor.units import days_text


@register
class CheckpointOnReadOriented(Rule):
    """Explanation and registry entry for T003; the findings come from the checkpoint view
    (:meth:`from_plan`, called by ``advisor.views.checkpoint.checkpoint_view``)."""

    code = "T003"
    name = "checkpoint-on-read-oriented"
    produced_by = "checkpoint"
    severity = "error"

    def check(self, ctx: LintContext):
        return ()

    @classmethod
    def from_plan(cls, plan: Any) -> Iterable[Finding]:
        """T003 for an ``advisor.ledger.checkpoint.CheckpointPlan`` whose save dir is on a read-oriented
        tier: error when the projected life at the save interval is under the warranty period,
        else a warning."""
        tier = plan.tier
        if tier is None or not tier.read_oriented:
            return
        st = plan.storage()
        per_save = st["bytes_written_per_save"]
        where = f"read-oriented tier '{tier.name}' ({', '.join(tier.mounts)})"
        msg = (literal(f"checkpoint save_dir {plan.save_dir} is on {where}") + ": every save writes {bytes_written_per_save:bytes} "
               f"{'on the busiest node' if st.get('written_by', 'the busiest node') == 'the busiest node' else 'by ' + st['written_by']}")
        data = {"tier": tier.name, "save_dir": plan.save_dir, "bytes_written_per_save": per_save,
                "rated_write_bytes": st["rated_write_bytes"], "warranty_days": st["warranty_days"],
                "save_interval_s": st["save_interval_s"], "interval_source": st["interval_source"],
                "saves_per_day": st["saves_per_day"], "bytes_written_per_day": st["bytes_written_per_day"],
                "endurance_used_per_day": st["endurance_used_per_day"], "days_of_life": st["days_of_life"]}
        severity = "warning"
        if st["bytes_written_per_day"] is None:
            msg += " (give --save-interval, or --node-mtbf-hours for the Young/Daly interval, for bytes per day " \
                   "and the drive's projected life)"
        else:
            msg += (f"; at one save every {st['save_interval_s']:,.0f} s ({st['interval_source']}, "
                    f"{st['saves_per_day']:,.2f} saves/day) that is {{bytes_written_per_day:T3}} written per day")
            if st["rated_write_bytes"]:
                days = st["days_of_life"]
                msg += (f", {100 * st['endurance_used_per_day']:.3g}% of the drive's rated endurance "
                        f"({tier.endurance.describe()}) per day, used up in {days_text(days, 'unlimited')}")
                wd = st["warranty_days"]
                if wd is not None and days is not None and days < wd:
                    severity = "error"
                    msg += f", within its {wd:,.0f}-day warranty"
                elif wd is not None:
                    msg += f", beyond its {wd:,.0f}-day warranty"
                else:
                    msg += " (warranty period unknown)"
            else:
                msg += " (the drive's endurance is not in the hardware spec)"
        yield cls().finding(
            "", msg,
            "save checkpoints to a read-write tier (--save-dir on an enterprise 1-3 DWPD drive or a parallel file "
            "system); keep read-oriented flash for weights and datasets",
            severity=severity, sizes={k: data[k] for k in ("bytes_written_per_save", "bytes_written_per_day")
                                      if data[k] is not None}, **data)
