"""The workload sidecar: what ``generate`` assumed, written next to the config it writes, so that
``check`` (and ``estimate``) judge the same job.

A DeepSpeed config has no key for the sequence length, activation checkpointing of the model,
the attention kernel or the model-parallel sizes (a key of our own in the config would be
flagged by lint as unknown and DeepSpeed ignores it), so they go to ``<config>.workload.json``
(``ds_config.json`` -> ``ds_config.workload.json``)::

    {"written_by": "ds-advisor generate", "seq_len": 4096, "micro_batch": 2,
     "checkpointing": "full", "attention": "flash", "tensor_parallel": 1,
     "pipeline_parallel": 1, "sequence_parallel": 1, "expert_parallel": 1, "megatron_sp": false}

Precedence everywhere: a command-line flag, then the sidecar, then the default (and every value
taken from a default is listed in the assumptions, so a check never silently differs from the
generate that wrote the config).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from advisor.errors import ConfigLoadError

#: Fields, their types and defaults (the defaults estimate uses without a flag).
FIELDS: dict[str, tuple[type, Any]] = {
    "seq_len": (int, None), "micro_batch": (int, None), "checkpointing": (str, "none"), "attention": (str, "flash"),
    "tensor_parallel": (int, 1), "pipeline_parallel": (int, 1), "sequence_parallel": (int, None),
    "expert_parallel": (int, 1), "megatron_sp": (bool, False), "moe_capacity_factor": (float, None),
}
_CHOICES = {"checkpointing": ("none", "full", "selective"), "attention": ("flash", "eager")}


def sidecar_path(config_path: str) -> str:
    """``dir/name.json`` -> ``dir/name.workload.json`` (any extension is replaced)."""
    root, _ = os.path.splitext(config_path)
    return root + ".workload.json"


@dataclass
class ResolvedWorkload:
    """Workload values with where each came from (``flag``, ``sidecar PATH`` or ``default``)."""

    values: dict[str, Any]
    origin: dict[str, str] = field(default_factory=dict)
    sidecar: str | None = None

    def assumed(self) -> list[str]:
        """One line per value not given on the command line (for the check/estimate notes)."""
        out = []
        for k, v in self.values.items():
            o = self.origin.get(k, "default")
            if o == "flag" or (k == "moe_capacity_factor" and v is None):  # dropless: nothing assumed for a dense model
                continue
            shown = "the model's maximum context" if (k == "seq_len" and v is None) else (
                "train_micro_batch_size_per_gpu" if (k == "micro_batch" and v is None) else (
                    "the config's sequence_parallel_size, else 1" if (k == "sequence_parallel" and v is None) else v))
            out.append(f"{k} = {shown} ({o})")
        return out


def read_sidecar(path: str) -> dict[str, Any]:
    """The sidecar's fields (only the known ones). Raises ConfigLoadError naming the file and key
    for unreadable JSON or a wrongly typed value."""
    try:
        with open(path, "rb") as fh:
            d = json.loads(fh.read(1 << 20).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigLoadError(path, f"cannot read the workload sidecar: {e}")
    if not isinstance(d, dict):
        raise ConfigLoadError(path, "the workload sidecar must be a JSON object")
    out: dict[str, Any] = {}
    for k, (typ, _) in FIELDS.items():
        if k not in d or d[k] is None:
            continue
        v = d[k]
        if typ is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        ok = isinstance(v, typ) and (typ is bool or not isinstance(v, bool))
        if typ is float and ok and not (0 < v < float("inf")):
            ok = False
        if k == "checkpointing" and ok and v.isdigit() and int(v) > 0:
            out[k] = str(int(v))  # k of L layers checkpointed (advisor.model.activations.parse_checkpointing)
            continue
        if not ok or (typ is int and v < 1) or (k in _CHOICES and v not in _CHOICES[k]):
            raise ConfigLoadError(path, f"/{k}: invalid value {v!r}"
                                  + (f" (one of {', '.join(_CHOICES[k])}"
                                     + (" or a number of layers" if k == "checkpointing" else "") + ")"
                                     if k in _CHOICES else ""))
        out[k] = v
    return out


def write_sidecar(config_path: str, values: dict[str, Any], written_by: str = "ds-advisor generate",
                  force: bool = False) -> str:
    """Write ``values`` (FIELDS keys) next to ``config_path``; returns the sidecar's path.
    Written by :func:`advisor.files.write_atomic` (never partial, never over an existing file
    without ``force``). Raises FileExistsError, or OSError when it cannot be written."""
    from advisor.files import write_atomic
    path = sidecar_path(config_path)
    d = {"written_by": written_by, **{k: values[k] for k in FIELDS if k in values}}
    write_atomic(path, json.dumps(d, indent=2) + "\n", force=force)
    return path


def resolve(config_path: str | None, flags: dict[str, Any]) -> ResolvedWorkload:
    """Flag > sidecar next to ``config_path`` > default, per field. ``flags``: FIELDS keys with
    None (or, for megatron_sp, False) meaning "not given". Raises ConfigLoadError for a bad sidecar."""
    side: dict[str, Any] = {}
    sp = None
    if config_path and config_path != "-" and os.path.isfile(sidecar_path(config_path)):
        sp = sidecar_path(config_path)
        side = read_sidecar(sp)
    vals: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for k, (_, default) in FIELDS.items():
        f = flags.get(k)
        if f is not None and not (k == "megatron_sp" and f is False):
            vals[k], origin[k] = f, "flag"
        elif k in side:
            vals[k], origin[k] = side[k], f"from {os.path.basename(sp or '')}"
        else:
            vals[k], origin[k] = default, "default"
    return ResolvedWorkload(vals, origin, sp)
