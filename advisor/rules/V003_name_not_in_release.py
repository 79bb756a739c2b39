"""V003 name-not-in-release: a scheduler or optimizer type the target DeepSpeed release does not
have.

What DeepSpeed does: ``scheduler.type`` must be one of ``VALID_LR_SCHEDULES``
(deepspeed/runtime/lr_schedules.py) or a torch.optim.lr_scheduler class, and ``optimizer.type``
one of ``DEEPSPEED_OPTIMIZERS`` (deepspeed/runtime/config.py, case-insensitive) or an exact
torch.optim class; anything else fails ``deepspeed.initialize``. The lists change between
releases: WarmupCosineLR arrived in 0.12.3, Muon in
0.17.6, the 1-bit optimizers (OneBitAdam, ZeroOneAdam, OneBitLamb) left after 0.19.6. The names per
release are in ``advisor/data/deepspeed_versions.json``, read from each release's sdist. The rule
runs when the target release is not 0.19.8 (there D003 and L001 judge the names).

Anti-pattern (with ``--deepspeed-version 0.11.2``)::

    "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 1000}}

Fix: a type that release has (WarmupDecayLR here), or a newer DeepSpeed.
"""

from __future__ import annotations

from advisor.config.versions import DEFAULT_RELEASE, before, name_in, name_row
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import TORCH_OPTIMIZERS, is_auto, section


@register
class NameNotInRelease(Rule):
    code = "V003"
    name = "name-not-in-release"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        rel = ctx.release
        if rel is None or rel.checked == DEFAULT_RELEASE:
            return
        for sec, kind, what in (("scheduler", "scheduler_types", "scheduler"), ("optimizer", "optimizer_types",
                                                                                  "optimizer")):
            t = section(ctx.raw, sec).get("type")
            if not isinstance(t, str) or is_auto(t) or (kind == "optimizer_types" and t in TORCH_OPTIMIZERS):
                continue
            if name_in(kind, t, rel.checked) is not False:
                continue  # present in that release, or in no release checked (D003 / L001 say so)
            row = name_row(kind, t) or {}
            rels = [row["first"], row["last"]] if row else []
            when = (f"it is in {rels[0]} to {rels[-1]}" + (f" (not in {', '.join(row['absent_in'])})"
                                                          if row.get("absent_in") else "") if rels else "")
            a = "an" if what[0] in "aeiou" else "a"
            yield self.finding(f"/{sec}/type", f"{what} type {t!r} is not in DeepSpeed {rel.checked}: {when}; "
                                               "deepspeed.initialize refuses it there",
                               fix=f"use {a} {what} that DeepSpeed {rel.checked} has, or run {rels[0]} or later"
                               if rels and before(rel.checked, rels[0]) else f"use {a} {what} that DeepSpeed {rel.checked} has",
                               release=rel.checked, type=t)
