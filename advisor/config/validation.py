"""One validation layer for values that come from outside the DeepSpeed config.

Environment variables (``WORLD_SIZE``, ``SLURM_NTASKS``, ...), the output of probe tools
(``nvidia-smi``, ``rocm-smi``), fields of an accelerate config YAML and numeric command-line
flags are parsed here into typed, bounded values. Every refusal is an
:class:`InputValueError`: one line naming the source (the variable, the flag, the file and
key) and the value, cut to a readable length. It is both an :class:`AdvisorError` (exit 2,
one line) and a ``ValueError`` (so a probe parser's ``except ValueError`` records it as a
probe failure instead of crashing).

The bounds on the launch shape are the documented limits of every command: at most
:data:`MAX_WORLD_SIZE` ranks, :data:`MAX_NODES` nodes and :data:`MAX_GPUS_PER_NODE` ranks per
node, wherever the number comes from (a flag, the environment, a ``--hardware`` spec).
"""

from __future__ import annotations

import math
import re
from typing import Any

from advisor.errors import AdvisorError

#: Most ranks any command accepts (``--world-size``, WORLD_SIZE, SLURM_NTASKS, --hardware nodes x GPUs).
MAX_WORLD_SIZE = 1 << 20
#: Most ZeRO-1/2 "change ranks" one plan may have: data-parallel ranks whose slice of a param
#: group's flat partition holds a tensor boundary, where the per-rank figures (I_r, Cov_r, ...) can
#: differ from the neighbouring ranks' (``advisor.ledger.state.zero12_change_ranks``). The
#: per-rank accounting is O(change ranks); between them ranks are ranges. About min(world size,
#: 2-4 x tensors): 1e5 layers at 2^18 ranks has ~2.6e5, llama-3-8b at 2^20 ranks ~1,200.
MAX_ZERO12_CHANGE_RANKS = 1 << 16
#: Most distinct rank roles (sets of per-rank figures) one ledger builds: each role gets its own
#: entries (formulas included) and timeline, ~0.4 ms and ~30 KB apiece (an inventory of 65,536
#: tensors of distinct sizes at 65,536 ranks had 65,536 roles: 25 s CPU, 2.2 GB). Presets and
#: config.json models repeat their layers and stay far below it (1e5 layers at 2^16 ranks: 25).
MAX_RANK_ROLES = 1 << 13
#: Most tensors an inventory may list, for every command (bounded work, issue 21's "seconds and a few
#: hundred MB"); ``advisor.model.inventory`` enforces it (and re-exports the name). At 2,000,000
#: (benchmarks/results/bounds.txt, mem21) estimate took ~10 s CPU / 504 MB and check of ZeRO-3 on 8 ranks
#: ~17 s / 874 MB, every pass walking each tensor where no layer repeats; real models list far fewer: the
#: largest preset 1,137 tensors, a per-expert Kimi-K2 69,975 (README). 500,000 is ~7x Kimi-K2 per expert
#: and ~1/4 of the 2M work (measured: bounds.txt, maxt21). Every message and README figure naming it is
#: written from this name (``{MAX_TENSORS:,}``).
MAX_TENSORS = 500_000
#: Most layers a model spec may have (a preset, a config.json; ``advisor.model.specs`` enforces it and
#: re-exports the name): bounded work, the inventory has one entry per tensor, several per layer.
MAX_LAYERS = 100_000
#: Most parameter tensors a model may have for ``generate`` (its own work limit; ``estimate``,
#: ``check`` and the other commands take up to :data:`MAX_TENSORS`).
#: generate is a search: every stage/offload combination over every tensor x pipeline layout it
#: tries builds its own ledger (``advisor.views.generate.search``: about 30 distinct ledgers on one
#: 8-GPU node), and each ledger's passes walk every tensor, so its cost is tensors x ledgers, and
#: the tensor count is the part known before any plan is built. Measured (benchmarks/results/
#: bounds.txt, genlim21, a shared 2-core machine; CPU seconds / peak MB of the whole command on
#: one 8-GPU node, global batch 8, sequence 128): nameless [64, 64] tensors, each its own module
#: (no layer repeat) 2.1 s / 50 MB at 1e4, 8.3 s / 132 MB at 5e4, 16.5 s / 250 MB at 1e5; the
#: llama layers of bounds.py's deep.json (9 tensors a layer, repeated) 4.9 s / 148 MB at 1e4
#: layers, 9.0 s / 235 MB at 2e4, 22 s / 548 MB at 5e4, ~44 s / 1.1 GB at 1e5 (9e5 tensors). Real
#: models stay far below it: the presets have 146-1,137 tensors (fused experts); a per-expert
#: (transformers 4) DeepSeek-V3 has 45,395, a Kimi-K2-shaped one (384 experts) ~68,000-70,000, the
#: most of any released model the families here cover -- the limit must not refuse them, which
#: is why it is not lower than that although a no-repeat inventory at it takes ~16 s, not ~10.
MAX_GENERATE_TENSORS = 100_000


def generate_tensors_problem(tensors: int, name: str) -> str | None:
    """The one-line refusal of a model of ``tensors`` parameter tensors for ``generate``
    (:data:`MAX_GENERATE_TENSORS`), naming the model ``name`` (its file or preset), the count,
    the limit and what to run instead; None within the limit."""
    if tensors <= MAX_GENERATE_TENSORS:
        return None
    return (f"model {name}: {tensors:,} parameter tensors, over generate's limit of {MAX_GENERATE_TENSORS:,} "
            "(its search builds a ledger per ZeRO stage/offload and layout, each walking every tensor): "
            f"write the config yourself and run estimate or check on it, which take up to {MAX_TENSORS:,} tensors "
            f"and {MAX_LAYERS:,} layers")


#: Most parameters a model may have (``--params``, settings files): 10^16, far past any model.
MAX_PARAMS = 10**16
#: Most nodes (``--nodes``, ``--hardware NAME:N``, a spec's ``nodes``).
MAX_NODES = 1 << 16
#: Most ranks per node (``--gpus-per-node``, LOCAL_WORLD_SIZE, SLURM_GPUS_ON_NODE, a spec).
MAX_GPUS_PER_NODE = 1 << 10
#: Largest --global-batch (sequences per step; generate factors it, in O(sqrt) time).
MAX_GLOBAL_BATCH = 1 << 40
#: Most tokens per sequence, the one bound for every source of it: ``--seq-len``, a workload
#: sidecar's ``seq_len`` and a model's positions (``max_position_embeddings`` / ``n_positions`` /
#: ``seq_length``, advisor.model.specs, which had its own 2^26 until issue 21). 2^40 is the bound
#: kept: it is the documented one (README "Inputs, limits and outputs"), a sanity bound like
#: :data:`MAX_GLOBAL_BATCH`, not a work bound -- nothing iterates over positions (activations,
#: attention scores and a learned position table are closed-form byte counts in Python ints,
#: so 2^40 tokens costs what 2^10 does) -- and a tighter figure would be a guess about future
#: context lengths (2^26 = 67M tokens is already within sight of published 10M-token models)
#: that would refuse a real config.json; no model has 2^40 positions, and past it the byte
#: counts mean nothing.
MAX_SEQ_LEN = 1 << 40
#: Widest hidden size (``--hidden-size``; a model spec's widths, ``advisor.model.specs``): 2^24,
#: far past any model. The HF Trainer's bucket values square it (h^2, 0.9 h^2: hidden_size_values).
MAX_DIM = 1 << 24
#: Most checkpoints kept on disk (``--keep``): 2^20, far past any retention policy; the disk bytes
#: are ``keep`` x one checkpoint.
MAX_KEEP = 1 << 20
#: Largest MoE capacity factor (``--moe-capacity-factor``, a workload sidecar's).
MAX_MOE_CAPACITY_FACTOR = 1e6
#: The range of every time option, in seconds (``--step-time``, ``--save-interval``,
#: ``--restart-seconds``, measure's ``--timeout``; ``--node-mtbf-hours`` in hours, the same
#: figures): a millisecond to about 31.7 years. A shorter step or save interval is no training job,
#: and dividing a day by 1e-300 s made checkpoint/estimate JSON write ``Infinity`` bytes per day
#: (invalid JSON) and the HTML report crash (issue 21). The per-day and per-step figures derived
#: from times in this range and hardware numbers in ``cluster.hardware.HW_NUMBER_MIN .. MAX``
#: stay finite.
MIN_SECONDS, MAX_SECONDS = 1e-3, 1e9
#: The batch-size keys of a DeepSpeed config; each is at most :data:`MAX_GLOBAL_BATCH` (ds-advisor's
#: documented bound, not DeepSpeed's: 0.19.8 takes 1e30 as a micro-batch at config time and fails
#: in its data loader; rule B002 reports it in a file, ``--set`` refuses it as exit 2).
BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
#: Longest echo of a bad value in a message.
MAX_ECHO = 60


class InputValueError(AdvisorError, ValueError):
    """A value from outside the config (environment, probe, YAML field, flag) is malformed or
    out of bounds. ``str(err)`` is one line: ``source: problem``."""

    def __init__(self, source: str, problem: str):
        self.source = source
        self.problem = problem
        super().__init__(f"{source}: {problem}")


def float_of(value: Any) -> float | None:
    """``float(value)`` for a JSON number (an int or a float, not a bool), None for anything else.

    JSON allows an integer of up to 4,300 digits (Python's ``int()`` limit), and ``float()`` of
    one past the float range (about 1.8e308) raises OverflowError: a config's 400-digit
    ``gradient_clipping`` or ``lr`` was an internal error in every command (issue 21). Such an
    integer is read as the largest finite float of its sign: every comparison ds-advisor makes
    with it (a threshold, zero, another setting) comes out as with the integer itself, and no
    output gains an ``Infinity`` (JSON refuses non-finite values)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return _FLOAT_MAX if value > 0 else -_FLOAT_MAX


_FLOAT_MAX = 1.7976931348623157e308  # sys.float_info.max


def finite_number(value: Any) -> bool:
    """True for an int (not a bool; any int is finite, however many digits) or a finite float:
    ``math.isfinite`` of an int past the float range raises OverflowError."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def number_in(value: Any, source: str, *, lo: float, hi: float, allow_zero: bool = False,
              what: str = "") -> int | float:
    """A JSON number of a spec file (bytes, bytes/s, FLOP/s, seconds, a fraction) checked to be
    positive (or zero with ``allow_zero``) and, when not zero, within ``lo`` .. ``hi`` inclusive;
    returned as given (an int stays an exact int). The one check every ``--hardware`` spec number
    goes through (``advisor.cluster.hardware``).

    An int is compared exactly, never through ``float()``: a 400-digit integer (JSON allows up to
    4,300 digits) is "too large", not an OverflowError from ``float()`` or from formatting it with
    ``:g`` (issue 21). The value is echoed by :func:`shown` (cut to :data:`MAX_ECHO` characters).
    Raises :class:`InputValueError` naming ``source``; ``what`` ends the out-of-range message (the
    range's meaning)."""
    if not finite_number(value):
        raise InputValueError(source, f"expected a number, got {json_shown(value)}")
    if value < 0 or (value == 0 and not allow_zero):
        raise InputValueError(source, f"expected a {'non-negative' if allow_zero else 'positive'} number, "
                                      f"got {json_shown(value)}")
    if value != 0 and not lo <= value <= hi:
        size = "too large" if value > hi else "too small"
        raise InputValueError(source, f"{shown(value)} is {size}: outside {lo:g} to {hi:g}" + (f", {what}" if what else ""))
    return value


def shown(value: Any, limit: int = MAX_ECHO) -> str:
    """``value`` for a message, cut to ``limit`` characters (:func:`advisor.errors.cut`,
    surrogates escaped): ``repr`` of a JSON value; a value only YAML has (a date, a timestamp,
    binary data, a set) is named in words with its text ("a YAML date 2001-01-01"), never as a
    Python repr like ``datetime.date(2001, 1, 1)``."""
    from advisor.errors import cut
    import datetime
    if isinstance(value, (datetime.date, datetime.datetime)):
        kind = "timestamp" if isinstance(value, datetime.datetime) else "date"
        return cut(f"a YAML {kind} {value.isoformat()}", limit)
    if isinstance(value, (bytes, bytearray)):
        return f"YAML binary data ({len(value)} bytes)"
    if isinstance(value, (set, frozenset)):
        return f"a YAML set of {len(value)} items"
    # repr escapes every non-printable character, lone surrogates included ('\udcff', encodable
    # as UTF-8); escaping them first would print the backslash twice (newcomer D10: '\\udcff')
    r = repr(value)
    return cut(r, limit)


#: The JSON name of a Python value's type, for messages ("got an array").
JSON_TYPE = {"dict": "object", "list": "array", "tuple": "array", "str": "string", "int": "integer",
             "float": "number", "bool": "boolean", "NoneType": "null",
             # types only YAML has (PyYAML's safe loader builds them from plain scalars)
             "date": "YAML date", "datetime": "YAML timestamp", "bytes": "YAML binary value", "set": "YAML set"}


def article(noun: str) -> str:
    """``noun`` with "a" or "an" before it: ``article("integer")`` -> "an integer"."""
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def type_name(value: Any) -> str:
    """What ``value`` is, in JSON's words with its article: "an object", "a string", "null"."""
    t = JSON_TYPE.get(type(value).__name__, type(value).__name__)
    return t if t == "null" else article(t)


def json_kind(value: Any) -> str:
    """What a parsed JSON ``value`` is, without the value: "an object", "an array", "a string", "a number"
    (integer or not), "true", "false", "null" -- the words ``readers.object_list_scan_kind`` reads from a
    value's first character, so a refusal says the same whether a scan or the parse found the value."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else ("true" if value else "false")
    if isinstance(value, (int, float)):
        return "a number"
    return {dict: "an object", list: "an array", tuple: "an array", str: "a string"}.get(type(value), type_name(value))


def json_quoted(text: str, limit: int = MAX_ECHO) -> str:
    """A string from a JSON file as JSON writes it (``"x"``, escapes included, non-ASCII as ``\\u``), cut to
    ``limit``: the quoting of :func:`json_shown`, for a message naming a string value (an unknown preset)."""
    import json
    from advisor.errors import cut
    return cut(json.dumps(text, ensure_ascii=True), limit)


def json_shown(value: Any, limit: int = MAX_ECHO) -> str:
    """A wrong value for a type error's "got ...", in JSON's words (the --hardware / --model JSON, a
    DeepSpeed config): ``null``, ``true`` / ``false``, 'a string "8"', "an object {...}", "an array
    [...]" (:func:`type_name`, then the value as JSON, cut to ``limit``); a number as written (:func:`shown`), as a YAML-only value likewise. One
    helper, so that no message says Python's ``None`` / ``True`` of a JSON file (newcomer D6)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    import json
    from advisor.errors import cut
    if isinstance(value, str):  # JSON's quoting ("8"), not Python's ('8'): the file's own spelling
        return f"a string {json_quoted(value, limit)}"
    if isinstance(value, (dict, list, tuple)):
        try:
            text = json.dumps(value, default=str, ensure_ascii=True)
        except (TypeError, ValueError, RecursionError):
            return type_name(value)
        return f"{type_name(value)} {cut(text, limit)}"
    return shown(value, limit)


_INT_RE = re.compile(r"^[+-]?\d{1,30}$")
_LONG_INT_RE = re.compile(r"^[+-]?\d{31,}$")


def as_int(value: Any, source: str, *, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an int: an int (not a bool), an integral finite float, or a decimal string
    (``"8"``, ``" 8 "``). Raises InputValueError naming ``source`` when it is anything else or
    outside ``lo`` .. ``hi`` (inclusive)."""
    n: int | None = None
    if isinstance(value, bool):
        n = None
    elif isinstance(value, int):
        n = value
    elif isinstance(value, float):
        n = int(value) if math.isfinite(value) and value.is_integer() else None
    elif isinstance(value, str) and _INT_RE.match(value.strip()):
        n = int(value.strip())
    elif isinstance(value, str) and _LONG_INT_RE.match(value.strip()):
        # an integer, only past the 30 digits parsed (a 33-digit LOCAL_WORLD_SIZE read "expected an integer,
        # got a string" -- issue 21 audit): its sign says which bound it breaks, never int() of 5,000 digits
        from advisor.errors import cut
        digits, neg = value.strip(), value.strip().startswith("-")
        if neg and lo is not None:
            raise InputValueError(source, f"{cut(digits)} is below the minimum {lo}")
        if not neg and hi is not None:
            raise InputValueError(source, f"{cut(digits)} is over the limit {hi}")
    if n is None:
        raise InputValueError(source, f"expected an integer, got {json_shown(value)}")
    if lo is not None and n < lo:
        raise InputValueError(source, f"{n} is below the minimum {lo}")
    if hi is not None and n > hi:
        raise InputValueError(source, f"{n} is over the limit {hi}")
    return n


def as_float(value: Any, source: str, *, lo: float | None = None, hi: float | None = None,
             lo_open: bool = False) -> float:
    """``value`` as a finite float (an int, a float or a numeric string). NaN, infinities,
    booleans, other types and values outside ``lo`` .. ``hi`` (``lo`` excluded when
    ``lo_open``) raise InputValueError naming ``source``."""
    f: float | None = None
    if isinstance(value, bool):
        f = None
    elif isinstance(value, (int, float)):
        try:
            f = float(value)
        except OverflowError:
            f = math.inf
    elif isinstance(value, str):
        try:
            f = float(value.strip())
        except ValueError:
            f = None
    if f is None:
        raise InputValueError(source, f"expected a number, got {json_shown(value)}")
    if not math.isfinite(f):
        if _finite_decimal(value):  # 400 nines, 1e999: a number, just past the float range (about 1.8e308)
            raise InputValueError(source, f"{shown(value)} is too large" + (f" (at most {hi:g})" if hi is not None
                                                                              else " (past the float range)"))
        raise InputValueError(source, f"{shown(value)} is not a finite number")
    if lo is not None and (f < lo or (lo_open and f == lo)):
        raise InputValueError(source, f"{f:g} is {'at or ' if lo_open else ''}below the minimum {lo:g}")
    if hi is not None and f > hi:
        raise InputValueError(source, f"{f:g} is over the limit {hi:g}")
    return f


def _finite_decimal(value: Any) -> bool:
    """True when ``value`` is an int or a decimal string naming a finite number (``"9" * 400``,
    ``"1e999"``), however far past the float range; False for NaN, infinities and non-numbers."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if not isinstance(value, str):
        return False
    import decimal
    try:
        return decimal.Decimal(value.strip()).is_finite()
    except (decimal.InvalidOperation, ValueError):
        return False


def as_bool(value: Any, source: str) -> bool:
    """A boolean: true/false, or the strings accelerate's ``str_to_bool`` accepts
    (y/yes/t/true/on/1 and n/no/f/false/off/0). Anything else raises InputValueError."""
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower() if isinstance(value, (str, int)) else None
    if s in ("y", "yes", "t", "true", "on", "1"):
        return True
    if s in ("n", "no", "f", "false", "off", "0"):
        return False
    raise InputValueError(source, f"expected true or false, got {json_shown(value)}")


def as_str(value: Any, source: str, *, choices: tuple[str, ...] | None = None, lower: bool = False) -> str:
    """A string (ints allowed and written as text); with ``choices`` one of them. Containers,
    None and floats raise InputValueError."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputValueError(source, f"expected a string, got {json_shown(value)}")
    s = str(value)
    if lower:
        s = s.lower()
    if choices is not None and s not in choices:
        raise InputValueError(source, f"expected one of {', '.join(choices)}, got {json_shown(value)}")
    return s


def world_size(value: Any, source: str) -> int:
    """A world size from any source, bounded by :data:`MAX_WORLD_SIZE`."""
    return as_int(value, source, lo=1, hi=MAX_WORLD_SIZE)


def env_int(env: Any, name: str, *, lo: int = 1, hi: int = MAX_WORLD_SIZE) -> int | None:
    """The integer in environment variable ``name`` (None when unset or empty). Slurm's
    ``8(x2)`` repetition suffix is read as 8. Raises InputValueError naming the variable when
    it is set but not an integer in ``lo`` .. ``hi``."""
    v = env.get(name)
    if v is None or not str(v).strip():
        return None
    return as_int(str(v).split("(")[0].strip(), f"environment variable {name}={shown(v)}", lo=lo, hi=hi)


def batch_limit_problem(data: Any) -> tuple[str, str] | None:
    """(key, problem) for the first of :data:`BATCH_KEYS` in the config ``data`` whose number is
    over :data:`MAX_GLOBAL_BATCH`, else None (other types and "auto" are the schema's to judge)."""
    if not isinstance(data, dict):
        return None
    for k in BATCH_KEYS:
        v = data.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > MAX_GLOBAL_BATCH:
            return k, f"{k} is {shown(v)}, over the limit {MAX_GLOBAL_BATCH:,} (2^40) sequences"
    return None
