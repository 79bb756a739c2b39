"""The workload sidecar: what ``generate`` assumed, written next to the config it writes, so that
``check`` (and ``estimate``) judge the same job.

A DeepSpeed config has no key for the sequence length, activation checkpointing of the model,
the attention kernel or the model-parallel sizes (a key of our own in the config would be
flagged by lint as unknown and DeepSpeed ignores it), so they go to ``<config>.workload.json``
(``ds_config.json`` -> ``ds_config.workload.json``)::

    {"written_by": "ds-advisor generate", "seq_len": 4096, "micro_batch": 2,
     "checkpointing": "full", "attention": "flash", "tensor_parallel": 1,
     "pipeline_parallel": 1, "sequence_parallel": 1, "expert_parallel": 1, "megatron_sp": false,
     "config_sha256": "...", "batch": {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
     "gradient_accumulation_steps": 8}, "world": {"world_size": 8, "nodes": 1, "gpus_per_node": 8,
     "tensor_parallel": 1, "pipeline_parallel": 1}}

Precedence everywhere: a command-line flag, then the sidecar, then the default (and every value
taken from a default is listed in the assumptions, so a check never silently differs from the
generate that wrote the config). What the DeepSpeed config holds itself is never taken from the
sidecar (:data:`CONFIG_HELD`): the micro-batch is the config's ``train_micro_batch_size_per_gpu``,
the Ulysses degree its ``sequence_parallel_size`` when written (issue #17: an edited config with
micro-batch 4 was judged at the sidecar's 2). The sidecar records the config it was written for
(``config_sha256`` of :func:`config_digest`, and the ``batch`` keys); a sidecar that disagrees
with the config is rule W002 (:attr:`ResolvedWorkload.conflicts`, :attr:`ResolvedWorkload.stale`). It records
the world shape too (``world``: :data:`WORLD_KEYS`); a check or estimate run with another is rule W003.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from advisor.config.validation import (MAX_GLOBAL_BATCH, MAX_MOE_CAPACITY_FACTOR, MAX_SEQ_LEN, MAX_WORLD_SIZE,
                                       float_of, shown)
from advisor.errors import ConfigLoadError
from advisor.model.inventory import MAX_TENSORS

#: Fields, their types and defaults (the defaults estimate uses without a flag).
FIELDS: dict[str, tuple[type, Any]] = {
    "seq_len": (int, None), "micro_batch": (int, None), "checkpointing": (str, "none"), "attention": (str, "flash"),
    "tensor_parallel": (int, 1), "pipeline_parallel": (int, 1), "sequence_parallel": (int, None),
    "expert_parallel": (int, 1), "megatron_sp": (bool, False), "moe_capacity_factor": (float, None),
}
_CHOICES = {"checkpointing": ("none", "full", "selective"), "attention": ("flash", "eager")}
#: What a field of each type takes, for the one-line refusal of a wrong value (as the trainer record's say).
_EXPECTED = {int: "a positive integer", bool: "true or false", float: "a positive finite number", str: "a string"}
#: Largest workload sidecar read (bytes): generate writes a few hundred.
MAX_SIDECAR_BYTES = 1 << 20
#: Upper bounds of the numeric fields, with the flag that has the same bound (``cli.OPTIONS``):
#: a sidecar's value is bounded as the flag's is (issue 21, bounded work).
LIMITS: dict[str, tuple[int | float, str]] = {
    "seq_len": (MAX_SEQ_LEN, "--seq-len"), "micro_batch": (MAX_GLOBAL_BATCH, "--micro-batch"),
    "tensor_parallel": (MAX_WORLD_SIZE, "--tensor-parallel"), "pipeline_parallel": (MAX_WORLD_SIZE, "--pipeline-parallel"),
    "sequence_parallel": (MAX_WORLD_SIZE, "--sequence-parallel"), "expert_parallel": (MAX_WORLD_SIZE, "--expert-parallel"),
    "moe_capacity_factor": (MAX_MOE_CAPACITY_FACTOR, "--moe-capacity-factor"),
}

#: Workload fields a DeepSpeed config holds itself (field -> config key): the config's value wins
#: over the sidecar's (the sidecar's is only compared with it, rule W002).
CONFIG_HELD = {"micro_batch": "train_micro_batch_size_per_gpu", "sequence_parallel": "sequence_parallel_size"}
#: The config's batch keys a sidecar records (``batch``), checked against the config (W002).
BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
#: The HF Trainer arguments a sidecar records (``trainer``, written by ``generate --hf``) -> the config key
#: the Trainer fills from each where the config says "auto" (transformers 5.25.0 integrations/deepspeed.py
#: ``HfTrainerDeepSpeedConfig.trainer_config_process``: ``fill_match("train_micro_batch_size_per_gpu",
#: args.per_device_train_batch_size)``, ``fill_match("gradient_accumulation_steps",
#: args.gradient_accumulation_steps)``, ``fill_match("bf16.enabled", ...)`` / ``fp16.enabled`` from
#: ``args.bf16`` / ``args.fp16``). Under ``--hf`` such a key is "auto" in the config the sidecar is
#: written for, so the sidecar's value plays the part the config's own value plays without --hf
#: (:func:`trainer_args_for`).
TRAINER_AUTO: dict[str, tuple[str, ...]] = {
    "per_device_train_batch_size": ("train_micro_batch_size_per_gpu",),
    "gradient_accumulation_steps": ("gradient_accumulation_steps",),
    "bf16": ("bf16.enabled", "bfloat16.enabled"), "fp16": ("fp16.enabled",),
}
#: The world shape a sidecar records (``world``, written by ``generate``: its ``--nodes`` x ``--gpus-per-node`` and the
#: plan's tensor- / pipeline-parallel sizes), each a positive integer up to ``MAX_WORLD_SIZE``. ``check`` /
#: ``estimate`` run with another shape (rule W003) are judging the sidecar's workload for a job it was not chosen
#: for. A sidecar without it (written before it was recorded, or by hand) says nothing about the shape.
WORLD_KEYS = ("world_size", "nodes", "gpus_per_node", "tensor_parallel", "pipeline_parallel")
#: Top-level keys left out of :func:`config_digest`: our own suppression section (editing it
#: changes nothing DeepSpeed does).
_DIGEST_SKIP = ("ds_advisor",)


def config_digest(data: Any) -> str:
    """SHA-256 (hex) of the DeepSpeed config dict ``data`` as JSON with sorted keys and no
    whitespace, integral floats as ints, less :data:`_DIGEST_SKIP`: the same for a config re-indented
or re-ordered, different
    for any changed value. Recorded by generate in the sidecar (``config_sha256``)."""
    import hashlib

    def norm(v: Any) -> Any:  # 1.0 and 1 are one value (the loader reads `1.0` as DeepSpeed's hjson does)
        if isinstance(v, dict):
            return {str(k): norm(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [norm(x) for x in v]
        if isinstance(v, float) and v.is_integer():
            return int(v)
        return v
    d = {k: v for k, v in data.items() if k not in _DIGEST_SKIP} if isinstance(data, dict) else data
    return hashlib.sha256(json.dumps(norm(d), sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def config_record(data: dict) -> dict[str, Any]:
    """What a sidecar records about the config it is written for: ``config_sha256``
    (:func:`config_digest`) and ``batch`` (its :data:`BATCH_KEYS` that are set)."""
    return {"config_sha256": config_digest(data), "batch": {k: data[k] for k in BATCH_KEYS if k in data}}


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def sidecar_path(config_path: str) -> str:
    """``dir/name.json`` -> ``dir/name.workload.json`` (any extension is replaced). A symlink's
    sidecar is named after its final target: ``generate -o link.json`` writes the config through the
    link (:func:`advisor.files.write_atomic`, issue #21's rule: write through a symlink or refuse it,
    never replace it), so the sidecar goes beside the file written, where ``estimate target.json`` and
    ``estimate link.json`` both find it (newcomer D6c: it was ``link.workload.json``). A symlink loop
    keeps the name given (the config's own read reports the loop)."""
    path = config_path
    if os.path.islink(path):
        real = os.path.realpath(path)
        if not os.path.islink(real):
            path = real
    root, _ = os.path.splitext(path)
    return root + ".workload.json"


def find_sidecar(config_path: str | None) -> str | None:
    """The sidecar next to ``config_path`` (:func:`sidecar_path`) when one is there, else None
    (no config path, stdin, a base64 config, or no file of that name). Looked for through the guarded reader's
    :func:`advisor.config.readers.regular_file_at`: a FIFO, a device (``/dev/zero``, or a symlink
    to it) or a directory of that name raises ConfigLoadError naming the sidecar, from ``stat``
    alone (never opened, so never blocking), instead of being skipped as no sidecar. The one
    look-up of estimate, check, checkpoint (:func:`resolve`) and lint (``cli._sidecar_dp``)."""
    from advisor.config.readers import regular_file_at
    # only a config read from a file has a sidecar: a base64 config (what load_config reads when
    # nothing is at the argument, the same os.path.lexists test) has no folder, and its sidecar
    # name was looked for in the current folder, past NAME_MAX when long (issue 21, fuzz round c)
    if not config_path or config_path == "-" or not os.path.lexists(config_path):
        return None
    sp = sidecar_path(config_path)
    if regular_file_at(sp, what="workload sidecar"):
        return sp
    # a sidecar named after the link itself (written before D6c, or by hand) is still read
    by_name = os.path.splitext(config_path)[0] + ".workload.json"
    return by_name if by_name != sp and regular_file_at(by_name, what="workload sidecar") else None


@dataclass
class ResolvedWorkload:
    """Workload values with where each came from (``flag``, ``sidecar PATH`` or ``default``)."""

    values: dict[str, Any]
    origin: dict[str, str] = field(default_factory=dict)
    sidecar: str | None = None
    #: (config key, the config's value, the sidecar's value) where the sidecar was written for other
    #: values than the config holds (its ``batch`` keys, ``micro_batch``, ``sequence_parallel``).
    conflicts: list[tuple[str, Any, Any]] = field(default_factory=list)
    #: True when the sidecar's ``config_sha256`` is not this config's digest (:func:`config_digest`).
    stale: bool = False
    #: The sidecar's fields (:func:`read_sidecar`), for the W002 message.
    recorded: dict[str, Any] = field(default_factory=dict)
    #: The config's own values of :data:`CONFIG_HELD` fields, for the assumptions.
    config_values: dict[str, Any] = field(default_factory=dict)
    #: The HF Trainer arguments taken from the sidecar by :func:`trainer_args_for` (name -> value), for the
    #: assumptions.
    trainer_assumed: dict[str, Any] = field(default_factory=dict)
    #: The HF Trainer arguments of :data:`TRAINER_AUTO` a flag gave (name -> value), set by :func:`trainer_args_for`:
    #: a config "auto" they fill is not assumed.
    trainer_flags: dict[str, Any] = field(default_factory=dict)

    def assumed(self) -> list[str]:
        """One line per value not given on the command line (for the check/estimate notes)."""
        out = []
        for k, v in self.values.items():
            o = self.origin.get(k, "default")
            if o == "flag" or (k == "moe_capacity_factor" and v is None):  # dropless: nothing assumed for a dense model
                continue
            if o == "config":
                cv = self.config_values.get(k)
                if k == "micro_batch" and cv == "auto" and ("per_device_train_batch_size" in self.trainer_assumed
                                                             or "per_device_train_batch_size" in self.trainer_flags):
                    continue  # the Trainer fills it: from a flag, or its per_device_train_batch_size line below
                out.append(f"{k} = {cv if cv is not None else CONFIG_HELD[k]} (the config's {CONFIG_HELD[k]})")
                continue
            shown = "the model's maximum context" if (k == "seq_len" and v is None) else (
                "DeepSpeed's, from the config's batch keys (train_batch_size / (gradient_accumulation_steps x "
                "data-parallel ranks) when train_micro_batch_size_per_gpu is not written)"
                if (k == "micro_batch" and v is None) else (
                    "the config's sequence_parallel_size, else 1" if (k == "sequence_parallel" and v is None) else v))
            out.append(f"{k} = {shown} ({o})")
        side = os.path.basename(self.sidecar or "")
        for k, v in self.trainer_assumed.items():
            out.append(f"HF Trainer {k} = {v} (from {side}, for the config's \"auto\" {TRAINER_AUTO[k][0]})")
        return out


def _refuse_unknown_keys(path: str, where: str, d: dict, known: Any, what: str) -> None:
    """Raise ConfigLoadError naming the keys of ``d`` (the sidecar record at JSON pointer ``where``, "" for its
    top level) not in ``known`` (e.g. the :data:`TRAINER_AUTO` names), each with a did-you-mean (difflib, as the other unknown-key
    messages: ``config.hf`` H010, ``config.settings``) where one is close; at most 3 are named, each cut
    (:func:`advisor.errors.cut`): a hand-edited record is never taken with a misspelt argument silently
    dropped (``per_device_batch_size`` read as absent fell back to the Trainer's default 8)."""
    import difflib

    from advisor.errors import cut
    unknown = [str(k) for k in d if k not in known]
    if not unknown:
        return
    hinted = []
    for k in unknown:
        near = difflib.get_close_matches(k, sorted(known), n=1, cutoff=0.6) if len(k) < 200 else []
        hinted.append((not near, f"'{cut(k)}'" + (f" (did you mean {near[0]}?)" if near else "")))
    names = [n for _, n in sorted(hinted, key=lambda h: h[0])[:3]]  # a misspelling first (stable otherwise)
    more = f" and {len(unknown) - 3:,} more" if len(unknown) > 3 else ""
    raise ConfigLoadError(path, f"{where or '/'}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(names)}{more} "
                                f"({what}: {', '.join(known)})")


#: The sidecar's records beside its :data:`FIELDS` (:func:`write_sidecar`).
SIDECAR_RECORDS = ("written_by", "config_sha256", "batch", "world", "trainer")


def _check_world(path: str, w: dict[str, int], fields: dict[str, Any]) -> None:
    """Raise ConfigLoadError when the sidecar's ``world`` record ``w`` cannot be one job's shape (what
    ``generate`` writes always is: its ``--nodes`` x ``--gpus-per-node`` ranks, the plan's TP / PP sizes, the
    same as the sidecar's own ``tensor_parallel`` / ``pipeline_parallel`` in ``fields``): more ranks per node
    than ranks, nodes that do not hold the ranks (each node runs one at least, ``advisor.cluster.launch``), a
    world size TP x PP does not divide, or TP / PP other than the sidecar's own. A hand edit that breaks
    it is one line naming the keys (estimate and checkpoint would otherwise take the shape, and W003 warn
    about the world they had just read, review 2026-12-07)."""
    ws, g, n = w.get("world_size"), w.get("gpus_per_node"), w.get("nodes")
    if ws and g and g > ws:
        raise ConfigLoadError(path, f"/world/gpus_per_node: {g} ranks per node > world_size {ws}")
    if ws and g and n and not (n * g >= ws > (n - 1) * g):
        raise ConfigLoadError(path, f"/world/nodes: {n} node(s) x {g} ranks per node do not hold world_size {ws} "
                                    "(each node runs at least one rank)")
    for k in ("tensor_parallel", "pipeline_parallel"):
        if k in w and k in fields and w[k] != fields[k]:
            raise ConfigLoadError(path, f"/world/{k}: {w[k]} != the sidecar's {k} {fields[k]}")
    mp = w.get("tensor_parallel", 1) * w.get("pipeline_parallel", 1)
    if ws and ws % mp:
        raise ConfigLoadError(path, f"/world/world_size: {ws} is not a multiple of tensor x pipeline parallel {mp}")


def read_sidecar(path: str) -> dict[str, Any]:
    """The sidecar's fields. Raises ConfigLoadError naming the file and key for unreadable JSON, a
    wrongly typed value, or a key no sidecar holds (at its top level and in its ``batch``, ``world`` and
    ``trainer`` records: a hand-edited misspelling is refused with a did-you-mean, not dropped)."""
    from advisor.config.readers import read_json_file
    # the guarded reader: regular file, size refused past the limit (it read the first MiB and
    # failed on the cut JSON before), depth bounded, finite numbers; one line with line:column
    d = read_json_file(path, limit=MAX_SIDECAR_BYTES, what="workload sidecar")
    if not isinstance(d, dict):
        raise ConfigLoadError(path, "the workload sidecar must be a JSON object")
    # every key a sidecar was ever written with (FIELDS only grew): a misspelt one is refused, never dropped
    _refuse_unknown_keys(path, "", d, tuple(FIELDS) + SIDECAR_RECORDS, "the keys a workload sidecar holds")
    out: dict[str, Any] = {}
    for k, (typ, _) in FIELDS.items():
        if k not in d or d[k] is None:
            continue
        v = d[k]
        if typ is float and isinstance(v, int) and not isinstance(v, bool):
            v = float_of(v)  # a 400-digit integer is the largest float, not an OverflowError (issue 21)
        ok = isinstance(v, typ) and (typ is bool or not isinstance(v, bool))
        if typ is float and ok and not (0 < v < float("inf")):
            ok = False
        if k == "checkpointing" and ok and v.isdigit():
            # k of L layers checkpointed (advisor.model.activations.parse_checkpointing); a model has
            # at most MAX_TENSORS layers (a tensor apiece), so a longer number is refused before int()
            # (past 4,300 digits int() itself raises)
            if len(v.lstrip("0")) > len(str(MAX_TENSORS)) or int(v) > MAX_TENSORS:
                raise ConfigLoadError(path, f"/{k}: a layer count of {shown(v)} is over the limit {MAX_TENSORS:,} "
                                            "(a model has at most that many tensors, one per layer at least)")
            if int(v) > 0:
                out[k] = str(int(v))
                continue
        if not ok or (typ is int and v < 1) or (k in _CHOICES and v not in _CHOICES[k]):
            raise ConfigLoadError(path, f"/{k}: invalid value {shown(v)}"
                                  + (f" (one of {', '.join(_CHOICES[k])}"
                                     + (" or a number of layers" if k == "checkpointing" else "") + ")"
                                     if k in _CHOICES else f" ({_EXPECTED[typ]})"))
        if k in LIMITS and v > LIMITS[k][0]:
            hi, flag = LIMITS[k]
            raise ConfigLoadError(path, f"/{k}: {shown(d[k])} is over the limit {hi:,g} (the bound {flag} has)" if typ is float
                                  else f"/{k}: {v} is over the limit {hi:,} (the bound {flag} has)")
        out[k] = v
    digest = d.get("config_sha256")
    if isinstance(digest, str):
        out["config_sha256"] = digest
    batch = d.get("batch")
    if isinstance(batch, dict):
        _refuse_unknown_keys(path, "/batch", batch, BATCH_KEYS, "the config's batch keys a sidecar records")
        out["batch"] = {k: batch[k] for k in BATCH_KEYS if _int(batch.get(k))}
    world = d.get("world")
    if world is not None:
        if not isinstance(world, dict):
            raise ConfigLoadError(path, f"/world: invalid value {shown(world)} (an object of the world shape: "
                                        f"{', '.join(WORLD_KEYS)})")
        _refuse_unknown_keys(path, "/world", world, WORLD_KEYS, "the world shape a sidecar records")
        shape: dict[str, int] = {}
        for k in WORLD_KEYS:
            v = world.get(k)
            if v is None:
                continue
            if not _int(v) or v < 1:
                raise ConfigLoadError(path, f"/world/{k}: invalid value {shown(v)} (a positive integer)")
            if v > MAX_WORLD_SIZE:
                raise ConfigLoadError(path, f"/world/{k}: {v} is over the limit {MAX_WORLD_SIZE:,} (the bound "
                                            "--world-size has)")
            shape[k] = v
        _check_world(path, shape, out)
        out["world"] = shape
    trainer = d.get("trainer")
    if trainer is not None:
        if not isinstance(trainer, dict):
            raise ConfigLoadError(path, f"/trainer: invalid value {shown(trainer)} (an object of HF Trainer arguments)")
        _refuse_unknown_keys(path, "/trainer", trainer, TRAINER_AUTO, "HF Trainer arguments a sidecar records")
        rec: dict[str, Any] = {}
        for k in TRAINER_AUTO:
            if k not in trainer:
                continue
            v = trainer[k]
            if v is None:
                # generate never writes null here; a hand-edited null is not "false" nor "not recorded" on
                # its face, so it is refused, saying what each reading is written as (audit of issue 21)
                raise ConfigLoadError(path, f"/trainer/{k}: null is not a value here ("
                                      + ("true or false; " if k in ("bf16", "fp16") else "a positive integer; ")
                                      + "remove the key to leave it to the flag or the HF Trainer's default)")
            if k in ("bf16", "fp16"):
                if not isinstance(v, bool):
                    raise ConfigLoadError(path, f"/trainer/{k}: invalid value {shown(v)} (true or false)")
            elif not _int(v) or v < 1:
                raise ConfigLoadError(path, f"/trainer/{k}: invalid value {shown(v)} (a positive integer)")
            elif v > MAX_GLOBAL_BATCH:  # the bound --per-device-train-batch-size / --gradient-accumulation-steps have
                raise ConfigLoadError(path, f"/trainer/{k}: {v} is over the limit {MAX_GLOBAL_BATCH:,} (the bound "
                                            f"--{k.replace('_', '-')} has)")
            rec[k] = v
        if rec.get("bf16") and rec.get("fp16"):  # TrainingArguments.__post_init__ refuses both
            raise ConfigLoadError(path, "/trainer: bf16 and fp16 both true (the HF Trainer takes at most one)")
        out["trainer"] = rec
    return out


def write_sidecar(config_path: str, values: dict[str, Any], written_by: str = "ds-advisor generate",
                  force: bool = False) -> str:
    """Write ``values`` (FIELDS keys, plus :func:`config_record`'s ``config_sha256`` and ``batch``, ``world``: the
    :data:`WORLD_KEYS` shape generate planned for, and under ``generate --hf`` ``trainer``: the :data:`TRAINER_AUTO`
    arguments the plan assumed) next to ``config_path``; returns the sidecar's path.
    Written by :func:`advisor.files.write_atomic` (never partial, never over an existing file
    without ``force``). Raises FileExistsError, or OSError when it cannot be written."""
    from advisor.files import write_atomic
    path = sidecar_path(config_path)
    d = {"written_by": written_by, **{k: values[k] for k in FIELDS if k in values},
         **{k: values[k] for k in SIDECAR_RECORDS[1:] if k in values}}
    write_atomic(path, json.dumps(d, indent=2) + "\n", force=force)
    return path


def resolve(config_path: str | None, flags: dict[str, Any], config_data: Any = None) -> ResolvedWorkload:
    """Flag > sidecar next to ``config_path`` > default, per field. ``flags``: FIELDS keys with
    None (or, for megatron_sp, False) meaning "not given". ``config_data``: the DeepSpeed config
    dict (as DeepSpeed gets it): a :data:`CONFIG_HELD` field is never taken from the sidecar
    (micro_batch stays None, so the plan reads ``train_micro_batch_size_per_gpu``;
    sequence_parallel when the config writes ``sequence_parallel_size``), and the sidecar is
    compared with the config (``conflicts``, ``stale``; rule W002). Raises ConfigLoadError for a
    bad sidecar."""
    side: dict[str, Any] = {}
    sp = find_sidecar(config_path)
    if sp:
        side = read_sidecar(sp)
    data = config_data if isinstance(config_data, dict) else {}
    vals: dict[str, Any] = {}
    origin: dict[str, str] = {}
    held: dict[str, Any] = {}
    for k, (_, default) in FIELDS.items():
        f = flags.get(k)
        key = CONFIG_HELD.get(k)
        if key and key in data:
            held[k] = data[key]
        if f is not None and not (k == "megatron_sp" and f is False):
            vals[k], origin[k] = f, "flag"
        elif key and key in data:
            # the config holds it: the plan reads the config's key (None here), never the sidecar's
            vals[k], origin[k] = None, "config"
        elif k in side and k != "micro_batch":  # DeepSpeed derives a missing micro-batch from the batch keys
            vals[k], origin[k] = side[k], f"from {os.path.basename(sp or '')}"
        else:
            vals[k], origin[k] = default, "default"
    conflicts: list[tuple[str, Any, Any]] = []
    stale = False
    if sp and data:
        recorded_batch = dict(side.get("batch") or {})
        if "micro_batch" in side and "train_micro_batch_size_per_gpu" not in recorded_batch:
            recorded_batch["train_micro_batch_size_per_gpu"] = side["micro_batch"]  # a sidecar without "batch"
        for key, was in recorded_batch.items():
            now = data.get(key)
            if _int(now) and now != was:
                conflicts.append((key, now, was))
        usp = data.get("sequence_parallel_size")
        if "sequence_parallel" in side and _int(usp) and usp != side["sequence_parallel"]:
            conflicts.append(("sequence_parallel_size", usp, side["sequence_parallel"]))
        stale = "config_sha256" in side and side["config_sha256"] != config_digest(data)
    return ResolvedWorkload(vals, origin, sp, conflicts, stale, side, held)


def _config_value(data: Any, dotted: str) -> Any:
    """``data``'s value at the dotted key (``bf16.enabled``), None when absent."""
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def trainer_args_for(wl: ResolvedWorkload, given: dict | None, config_data: Any) -> dict:
    """The HF Trainer arguments of an ``--hf`` run of the config whose workload is ``wl``: ``given``
    (the Trainer-argument flags, :class:`advisor.config.hf.TrainerArgs` fields; None = none given), and
    for each :data:`TRAINER_AUTO` argument not given whose config key (``config_data``, as DeepSpeed
    gets it) says "auto", the sidecar's: its ``trainer`` record (``generate --hf``), else, for the
    micro-batch, its ``micro_batch``. So ``generate --hf`` -> ``check --hf`` / ``estimate --hf`` judge the
    batch and precision generate chose, as the config's own values are judged without ``--hf``
    (flag > sidecar > default, the precedence of every workload field; the Trainer's
    TrainingArguments defaults, per-device batch 8, GA 1, no bf16, only where neither says).
    A precision flag (``--bf16`` / ``--fp16``) replaces the sidecar's precision. The arguments taken
    from the sidecar are set on ``wl.trainer_assumed`` (listed with the assumptions)."""
    out = dict(given or {})
    wl.trainer_flags = {k: out[k] for k in TRAINER_AUTO if k in out}
    rec = dict((wl.recorded or {}).get("trainer") or {})
    if "per_device_train_batch_size" not in rec and _int((wl.recorded or {}).get("micro_batch")):
        rec["per_device_train_batch_size"] = wl.recorded["micro_batch"]
    if out.get("bf16") or out.get("fp16"):
        rec.pop("bf16", None)
        rec.pop("fp16", None)
    data = config_data if isinstance(config_data, dict) else {}
    taken: dict[str, Any] = {}
    for k, keys in TRAINER_AUTO.items():
        if k in out or k not in rec:
            continue
        if any(_config_value(data, key) == "auto" for key in keys):
            out[k] = taken[k] = rec[k]
    wl.trainer_assumed = taken
    return out
