"""V001 key-not-in-release: a key the target DeepSpeed release does not define, in a section it
validates strictly.

What DeepSpeed does: the sections built on ``DeepSpeedConfigModel``
(deepspeed/runtime/config_utils.py; ``zero_optimization``, ``fp16``/``bf16`` since 0.17.1,
``tensorboard``, ``wandb``, ``csv_monitor``, ``comet``, ``comms_logger``, ``compile``,
``hybrid_engine``, ``tensor_parallel``, ``timers.throughput``) forbid extra keys, so
``deepspeed.initialize`` raises a pydantic ValidationError on a key that release does not know,
added later or removed since. Which release defines which key is in
``advisor/data/deepspeed_versions.json``, generated from each release's sdist
(``python -m advisor.config._versiongen``). The rule runs when ``--deepspeed-version`` (or the
installed deepspeed) is not 0.19.8; at 0.19.8 the schema's S001/S005 say the same.

Anti-pattern (with ``--deepspeed-version 0.9.5``; ZeRO++ arrived in 0.10.0)::

    "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}

Fix: remove the key, or run a DeepSpeed release that has it.
"""

from __future__ import annotations

from advisor.config.versions import DEFAULT_RELEASE, key_status, section_is_strict, table
from advisor.findings import pointer, split_pointer
from advisor.rules import LintContext, Rule, register


def strict_keys(raw: dict, release: str):
    """(pointer, key) for every key the user wrote under a section ``release`` validates strictly,
    descending into nested models the table knows."""
    keys = table()["keys"]
    for root in table()["roots"]:
        cur = raw
        for part in root.split("/"):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if not isinstance(cur, dict) or not section_is_strict(root, release):
            continue
        stack = [(pointer(*root.split("/")), cur)]
        while stack:
            base, d = stack.pop()
            for k, v in d.items():
                ptr = base + "/" + str(k).replace("~", "~0").replace("/", "~1")
                yield ptr, k
                if isinstance(v, dict) and any(p.startswith(ptr + "/") for p in keys):
                    stack.append((ptr, v))


@register
class KeyNotInRelease(Rule):
    code = "V001"
    name = "key-not-in-release"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        rel = ctx.release
        if rel is None or rel.checked == DEFAULT_RELEASE:
            return
        for ptr, key in strict_keys(ctx.raw, rel.checked):
            st = key_status(ptr, rel.checked)
            if st.state != "absent":
                continue
            section = "/".join(split_pointer(ptr)[:-1]) or "the top level"
            added = st.row and ctx.release and st.history().startswith("it appears")
            yield self.finding(
                ptr, f"{key!r} is not a key of {section} in DeepSpeed {rel.checked}: {st.history()}. "
                     f"{rel.checked}'s {st.row['source'].split(':')[-1]} forbids unknown keys, so "
                     "deepspeed.initialize raises a ValidationError",
                fix=(f"remove it, or run DeepSpeed {st.row['first']} or later" if added else
                     f"remove it{'; its replacement is ' + repr(st.row['new_param']) if st.row.get('new_param') else ''}"),
                release=rel.checked, first=st.row["first"], last=st.row["last"])
