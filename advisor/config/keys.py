"""Which section each known DeepSpeed key belongs to.

The table is derived from the generated schema (``schemas/deepspeed-config.schema.json``), so
it follows the DeepSpeed release the schema was generated from: for every key name, the
sections (as tuples of keys from the top level; ``()`` is the top level) where DeepSpeed reads
it. ``advisor.config.schema`` uses it for two things:

* S006: a key unknown where it is written but known elsewhere is *misplaced*
  (``offload_optimizer`` at the top level belongs under ``zero_optimization``; ``loss_scale``
  in ``bf16`` is an fp16 setting; ``aio`` inside ``zero_optimization`` is a top-level section);
* did-you-mean suggestions for unknown keys, from the keys known in the same section.

No torch, no deepspeed: this module only reads the JSON schema it is given.
"""

from __future__ import annotations

import difflib
from typing import Any, Iterator

Section = tuple[str, ...]

#: Key names too generic to say where they belong ("enabled" is in a dozen sections).
GENERIC_KEYS = frozenset({"enabled", "type", "params", "output_path", "job_name", "project", "debug", "verbose",
                          "profile", "dtype", "seed", "pin_memory", "device", "nvme_path", "buffer_count",
                          "metric", "overwrite"})

#: fp16-only loss-scaling keys (``precision_config.py`` DeepSpeedFP16Config); bf16 has no loss scaler.
FP16_LOSS_SCALE_KEYS = frozenset({"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                                  "min_loss_scale", "consecutive_hysteresis"})

#: Extra words for particular (section, key) misplacements.
NOTES: dict[tuple[Section, str], str] = {
    **{(("bf16",), k): "loss scaling exists only for fp16; bf16 training has no loss scaler"
       for k in FP16_LOSS_SCALE_KEYS},
    **{(("bfloat16",), k): "loss scaling exists only for fp16; bf16 training has no loss scaler"
       for k in FP16_LOSS_SCALE_KEYS},
    ((), "offload_optimizer"): "DeepSpeed never reads it at the top level, so optimizer state stays on the accelerator",
    ((), "offload_param"): "DeepSpeed never reads it at the top level, so parameters stay on the accelerator",
    (("zero_optimization",), "aio"): "aio is a top-level section (it configures the NVMe swapper for every offload)",
}


def section_name(section: Section) -> str:
    """Human name of a section: ``"zero_optimization.offload_param"``, or ``"the top level"``."""
    return ".".join(section) if section else "the top level"


def _resolve(schema: dict[str, Any], node: Any) -> dict[str, Any]:
    """Follow a local ``$ref`` and unwrap an HF-"auto" ``anyOf`` to the object schema."""
    if not isinstance(node, dict):
        return {}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return schema["$defs"][ref[len("#/$defs/"):]]
    for sub in node.get("anyOf", ()):
        r = _resolve(schema, sub)
        if "properties" in r:
            return r
    return node


def object_schema(schema: dict[str, Any], section: Section) -> dict[str, Any] | None:
    """The object schema of ``section`` (None when the schema does not describe it)."""
    node: dict[str, Any] = schema
    for key in section:
        props = node.get("properties") or {}
        if key not in props:
            return None
        node = _resolve(schema, props[key])
    return node


def walk_sections(schema: dict[str, Any]) -> Iterator[tuple[Section, dict[str, Any]]]:
    """Every (section, object schema) the schema lists keys for, top level first."""
    stack: list[tuple[Section, dict[str, Any]]] = [((), schema)]
    seen: set[tuple[Section, int]] = set()
    while stack:
        sec, node = stack.pop(0)
        if (sec, id(node)) in seen or len(sec) > 6:
            continue
        seen.add((sec, id(node)))
        yield sec, node
        for key, sub in (node.get("properties") or {}).items():
            r = _resolve(schema, sub)
            if r.get("properties"):
                stack.append((sec + (key,), r))


class KeyTable:
    """key name -> sections where DeepSpeed reads it (removed keys excluded)."""

    def __init__(self, schema: dict[str, Any]):
        self.schema = schema
        self.homes: dict[str, list[Section]] = {}
        self.keys_of: dict[Section, list[str]] = {}
        for sec, node in walk_sections(schema):
            keys = []
            for key, sub in (node.get("properties") or {}).items():
                if isinstance(sub, dict) and "x-ds-removed" in sub:
                    continue
                keys.append(key)
                self.homes.setdefault(key, []).append(sec)
            self.keys_of[sec] = keys

    def home_of(self, key: str, written_in: Section) -> list[Section]:
        """Sections where ``key`` belongs, when it is unknown in ``written_in`` (empty: unknown everywhere,
        or too generic to say)."""
        if key in GENERIC_KEYS:
            return []
        homes = [h for h in self.homes.get(key, []) if h != written_in]
        if len(homes) > 2:
            return []
        # bfloat16 is the legacy alias of bf16: name bf16 only.
        return [h for h in homes if h[:1] != ("bfloat16",)] or homes

    def suggest(self, key: str, section: Section) -> str | None:
        """The closest known key of ``section`` to a misspelt ``key`` (did-you-mean), or None."""
        known = self.keys_of.get(section, [])
        if not known:
            return None
        norm = key.strip().replace("-", "_")
        lowered = {k.lower(): k for k in known}
        if norm.lower() in lowered and lowered[norm.lower()] != key:
            return lowered[norm.lower()]
        m = difflib.get_close_matches(norm, known, n=1, cutoff=0.8)
        if m:
            return m[0]
        m = difflib.get_close_matches(norm.lower(), list(lowered), n=1, cutoff=0.8)
        return lowered[m[0]] if m else None

    def known_top_level_inside(self, value: Any) -> list[str]:
        """Top-level keys found one level down in an unknown top-level block (``"log": {"steps_per_print": 10}``)."""
        if not isinstance(value, dict):
            return []
        top = set(self.keys_of.get((), []))
        return [k for k in value if k in top]


def note_for(section: Section, key: str) -> str | None:
    """Extra explanation for a particular misplacement, if any."""
    return NOTES.get((section, key))
