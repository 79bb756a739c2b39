"""V002 default-differs-in-release: a key left at its default, where the target release's default
is not 0.19.8's.

What DeepSpeed does: each release's pydantic config models carry their own defaults, e.g.
``offload_optimizer.pin_memory`` / ``offload_param.pin_memory`` default to false up to 0.19.4 and
to true from 0.19.5 (deepspeed/runtime/zero/offload_config.py), which changes where the offloaded
state lives (pinned or pageable host memory). The advisor's accounting is 0.19.8's; for the
defaults the ledger reads (offload ``pin_memory``) the estimate applies the target release's
default; for the others a job on another release that relies on such a default differs from
the estimate. Keys read from a plain dict count too: ``gradient_clipping`` defaults to 0.0 (no
clipping) up to 0.19.2 and 1.0 from 0.19.3 (runtime/config.py get_gradient_clipping, default
runtime/constants.py GRADIENT_CLIPPING_DEFAULT; the estimate applies the release's),
``bf16.immediate_grad_update`` to false in 0.13.3-0.16.4, true in 0.16.5-0.17.0 (the constant
BFLOAT16_IMMEDIATE_GRAD_UPDATE_DEFAULT) and false from 0.17.1 (precision_config.py's pydantic
field). The defaults per release are in ``advisor/data/deepspeed_versions.json`` (generated from
the sdists).

Anti-pattern (with ``--deepspeed-version 0.17.6``)::

    "offload_optimizer": {"device": "cpu"}

Fix: set the key explicitly, so every release does the same.
"""

from __future__ import annotations

import json

from advisor.config.versions import DEFAULT_RELEASE, LEDGER_DEFAULTS, TOP_DEFAULTS, default_in, table
from advisor.findings import split_pointer
from advisor.rules import LintContext, Rule, register
from advisor.rules.V001_key_not_in_release import strict_keys


@register
class DefaultDiffersInRelease(Rule):
    code = "V002"
    name = "default-differs-in-release"
    severity = "info"

    def check(self, ctx: LintContext):
        rel = ctx.release
        if rel is None or rel.checked == DEFAULT_RELEASE:
            return
        keys = table()["keys"]
        written = {ptr for ptr, _ in strict_keys(ctx.raw, rel.checked)}
        for path, row in keys.items():
            if "field" in row or len(row.get("defaults", [])) < 2:
                continue  # an alias row (its field's row decides), or a default that never changed
            parent, key = path.rsplit("/", 1)
            spellings = {path} | {p for p, r in keys.items() if r.get("field") == key and p.rsplit("/", 1)[0] == parent}
            if spellings & written or any(_has(ctx.raw, sp) for sp in spellings) or not _wrote(ctx.raw, parent):
                continue  # set in the config (a plain-dict key such as gradient_clipping is not in `written`)
            old, new = default_in(path, rel.checked), default_in(path, DEFAULT_RELEASE)
            if old is None or old == new:
                continue
            shown = json.dumps(old) if not isinstance(old, str) or not old.startswith("=") else old[1:]
            applied = path in {p for *_, p in LEDGER_DEFAULTS} | {p for _, p in TOP_DEFAULTS}
            yield self.finding(parent, f"{key} is not set: DeepSpeed {rel.checked} defaults it to {shown}, 0.19.8 "
                                       f"to {json.dumps(new)}" + (f" (the estimate applies {rel.checked}'s)" if applied
                                                                 else " (whose accounting the estimate uses)"),
                               fix=f"set \"{key}\" explicitly, so every release does the same" if applied else
                               f"set \"{key}\" explicitly, so the job and the estimate agree",
                               key=key, release=rel.checked, default=old, default_0198=new)


def _wrote(raw: dict, ptr: str) -> bool:
    """True when the section at ``ptr`` is in the config as an object."""
    cur = raw
    for part in split_pointer(ptr):
        if not isinstance(cur, dict) or part not in cur:
            return False
        cur = cur[part]
    return isinstance(cur, dict)


def _has(raw: dict, ptr: str) -> bool:
    """True when the key at ``ptr`` is written in the config."""
    *parent, key = split_pointer(ptr)
    cur = raw
    for part in parent:
        cur = cur.get(part) if isinstance(cur, dict) else None
    return isinstance(cur, dict) and key in cur
