"""V005 section-not-validated-in-release: 0.19.8's schema verdict on a section the target release
does not validate.

What DeepSpeed does: the schema (S001 unknown key, S003 wrong type, S004 out of range, S006
misplaced key) is DeepSpeed 0.19.8's, where ``fp16``, ``bf16``, ``compile``, ``comms_logger``, ...
are pydantic models with ``extra="forbid"``. Older releases validate fewer sections (first
release with the model, each read in the sdists): ``fp16`` and ``bf16`` from 0.17.1 (before,
runtime/config.py reads them as plain dicts with ``get_scalar_param``), ``comet`` and
``timers.throughput`` from 0.14.3, ``tensor_parallel`` from 0.16.4, ``compile`` from 0.13.2 but
not from 0.14.4 to 0.16.5. ``comms_logger`` is validated in every release checked (0.9.0 on:
before 0.15.0 comm/config.py's ``CommsConfig`` is a plain pydantic ``BaseModel`` whose own
``Config`` has ``extra = 'forbid'``), as are ``zero_optimization``, ``tensorboard``, ``wandb``,
``csv_monitor`` and ``hybrid_engine``. Which release has which section as a model is in
``advisor/data/deepspeed_versions.json`` (generated from each release's sdist). In a release that
does not validate the section, ``deepspeed.initialize`` does not refuse the key: it is ignored (or
the section is not read at all), so the setting may silently not take effect. So at such a
release the S finding becomes this warning, naming the release, instead of an error.

Anti-pattern (with ``--deepspeed-version 0.16.9``)::

    "fp16": {"enabled": true, "foo": 1}

Fix: remove the key (0.17.1 and later refuse it), or write it where that release reads it.
"""

from __future__ import annotations

from advisor.config.versions import DEFAULT_RELEASE, section_is_strict, table
from advisor.findings import Finding, split_pointer
from advisor.rules import LintContext, Rule, register

#: The schema codes whose verdict depends on the section being a strict pydantic model.
SCHEMA_CODES = ("S001", "S003", "S004", "S006")

#: Old spellings DeepSpeed reads as the same section (runtime/constants.py BFLOAT16_OLD).
_ALIASES = {"bfloat16": "bf16"}


def section_root(ptr: str) -> str | None:
    """The table's section (e.g. ``"fp16"``, ``"timers/throughput"``) holding the key at ``ptr``,
    or None when the key is not inside one."""
    parts = split_pointer(ptr)
    if parts:
        parts = [_ALIASES.get(parts[0], parts[0])] + list(parts[1:])
    for root in sorted(table()["roots"], key=len, reverse=True):
        r = root.split("/")
        if len(parts) > len(r) and parts[:len(r)] == r:
            return root
    return None


def history(root: str) -> str:
    """Which checked releases have ``root`` as a model, e.g. ``"0.17.1 to 0.19.8"``."""
    row = table()["keys"]["/" + root]
    absent = row.get("absent_in")
    return f"{row['first']} to {row['last']}" + (f", except {', '.join(absent)}" if absent else "")


@register
class SectionNotValidatedInRelease(Rule):
    """Explanation and registry entry for V005; :meth:`downgrade` makes its findings from the schema's
    (lint_config calls it through the registry, so importing this module alone never fills it)."""

    code = "V005"
    name = "section-not-validated-in-release"
    severity = "warning"

    def check(self, ctx: LintContext):
        """Yield nothing: lint_config passes the schema findings through :meth:`downgrade`."""
        return iter(())

    def downgrade(self, f: Finding, release: str) -> Finding:
        """``f`` itself, or, for a schema finding (:data:`SCHEMA_CODES`) inside a section ``release``
        does not validate strictly, the V005 warning that replaces it."""
        if release == DEFAULT_RELEASE or f.code not in SCHEMA_CODES:
            return f
        root = section_root(f.pointer)
        if root is None or section_is_strict(root, release):
            return f
        where = root.replace("/", ".")
        return self.finding(
            f.pointer, f"DeepSpeed {release} does not validate {where} (a pydantic model only in {history(root)}, among "
                       f"the releases checked): {release} does not refuse this, it ignores it (or the whole section). "
                       f"0.19.8's verdict ({f.code}): {f.message}",
            fix=f.fix, release=release, section=where, schema_code=f.code)
