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

A key a release reads from a plain dict (the top level, or ``bf16`` before 0.17.1) that the
target release does not read yet, e.g. ``torch_autocast`` before 0.17.2 (runtime/config.py
``get_torch_autocast_enabled`` first appears in 0.17.2), is reported as a warning: nothing refuses
it there, it is silently ignored.

Fix: remove the key, or run a DeepSpeed release that has it.
"""

from __future__ import annotations

from advisor.config.versions import DEFAULT_RELEASE, before, behaviour, key_status, name_in, section_is_strict, table
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


def _refused_as_removed(ptr: str, release: str) -> bool:
    """True when ``release`` refuses the key at ``ptr`` as a removed feature before any section is
    parsed (deepspeed/runtime/config.py: _reject_removed_config_keys, from 0.19.7; the release's own
    _REMOVED_ZERO_CONFIG_KEYS): S005 reports it, naming that release, so V001 does not repeat it."""
    parts = split_pointer(ptr)
    if len(parts) != 2 or parts[0] != "zero_optimization" or not behaviour("removed-features-refused", release):
        return False
    return bool(name_in("removed_zero_keys", parts[1], release))


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
            if st.state != "absent" or _refused_as_removed(ptr, rel.checked):
                continue
            repl = st.row.get("new_param") if st.row.get("new_param") != key else None  # 0.19.6's mics_shard_size names itself
            section = "/".join(split_pointer(ptr)[:-1]) or "the top level"
            added = st.row and ctx.release and st.history().startswith("it appears")
            yield self.finding(
                ptr, f"{key!r} is not a key of {section} in DeepSpeed {rel.checked}: {st.history()}. "
                     f"{rel.checked}'s {st.row['source'].split(':')[-1]} forbids unknown keys, so "
                     "deepspeed.initialize raises a ValidationError",
                fix=(f"remove it, or run DeepSpeed {st.row['first']} or later" if added else
                     f"remove it{'; its replacement is ' + repr(repl) if repl else ''}"),
                release=rel.checked, first=st.row["first"], last=st.row["last"])
        yield from self._plain_dict_keys(ctx, rel.checked)

    def _plain_dict_keys(self, ctx: LintContext, release: str):
        """A key some release reads from a plain dict (the table's ``plain_dict_in``, e.g.
        ``torch_autocast``, read from 0.17.2 by runtime/config.py get_torch_autocast_enabled),
        written in the config, that ``release`` does not read: nothing refuses it there (the top
        level and the pre-0.17.1 bf16 section are read with dict.get), it is silently ignored."""
        keys = table()["keys"]
        for path, row in keys.items():
            if "plain_dict_in" not in row or _present(row, release):
                continue
            parent = path.rsplit("/", 1)[0]
            if parent in keys and "plain_dict_in" in keys[parent]:
                continue  # the parent's finding covers it (torch_autocast/enabled)
            if parent and section_is_strict(parent.strip("/"), release):
                continue  # a model reads the section there: the loop above judged the key
            if not _written(ctx.raw, path):
                continue
            dotted = path.strip("/").replace("/", ".")
            when = (f"it appears in {row['first']}" if before(release, row["first"]) else
                    f"{row['last']} is the last release that reads it")
            yield self.finding(path, f"{dotted} is not read by DeepSpeed {release} ({when}): that release reads "
                                     f"{'the top level' if not parent else parent.strip('/')} with dict.get, so "
                                     f"it is silently ignored there and the setting does not take effect",
                               fix=f"run DeepSpeed {row['first']} or later for {dotted}, or remove it"
                               if before(release, row["first"]) else f"remove {dotted}",
                               severity="warning", release=release, first=row["first"], last=row["last"])


def _present(row: dict, release: str) -> bool:
    return (not before(release, row["first"]) and not before(row["last"], release)
            and release not in row.get("absent_in", []))


def _written(raw: dict, ptr: str) -> bool:
    cur = raw
    for part in split_pointer(ptr):
        if not isinstance(cur, dict) or part not in cur:
            return False
        cur = cur[part]
    return True
