"""What-if overrides: ``--set key.path=value`` applied to a loaded config before anything reads it.

``lint``, ``estimate`` and ``report`` take ``--set zero_optimization.stage=3`` (repeatable) to try
a change, e.g. a finding's computed fix, without editing the file. The value is read by one
JSON-like rule (:func:`parse_value`): numbers, ``true``/``false``/``null``, quoted strings,
objects and arrays as JSON; anything else is the string itself (``--set optimizer.type=AdamW``);
non-finite numbers (``nan``, ``inf`` in any case, ``1e999``) are refused. Missing objects on the
path are created. Each value set then goes through the config file's own validation
(:func:`check_overrides`: the schema's types and ranges, the input limits): a value a file
would be reported for is refused as bad usage, one line naming the ``--set`` argument.
"""

from __future__ import annotations

import copy
import json
import math
import re
from typing import Any, Iterable

from advisor.config.readers import MAX_CONFIG_BYTES, MAX_DEPTH, depth_ok
from advisor.config.validation import InputValueError, shown
from advisor.errors import cut, digits_problem, int_limit_problem


#: A number as --set reads it (JSON's grammar, plus a leading "+" or "." and leading zeros).
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
#: Words for a non-finite number, any case (JSON has none; DeepSpeed cannot load them).

_NON_FINITE = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}


def _non_finite(constant: str):
    raise ValueError(constant)


def parse_value(raw: str) -> Any:
    """``--set``'s VALUE, by one rule (JSON-like): a number (``3``, ``5e8``, ``0.5``, ``+2``) is a
    number -- an int when written without a fraction or exponent; ``true``/``false``/``null`` are
    JSON's; ``"..."``, ``{...}`` and ``[...]`` are JSON; anything else is the string as written
    (``AdamW``, ``cpu``). A non-finite number -- ``nan``, ``inf``, ``Infinity`` in any case, or one
    that overflows a float (``1e999``), also inside an object or array -- raises ValueError."""
    text = raw.strip()
    if text.lower() in _NON_FINITE:
        raise ValueError(f"{cut(raw)} is not a finite number")
    if _NUMBER.fullmatch(text):
        if re.fullmatch(r"[+-]?\d+", text):
            too_long = digits_problem(text)
            if too_long:  # int() would raise Python's "Exceeds the limit (4300 digits)" advice
                raise ValueError(f"{cut(raw)} is {too_long}")
            return int(text)
        f = float(text)
        if not math.isfinite(f):
            raise ValueError(f"{cut(raw)} is not a finite number (it overflows a float)")
        return f
    if text[:1] in ('"', "{", "[") or text in ("true", "false", "null"):
        try:
            value = json.loads(text, parse_constant=_non_finite)
        except ValueError as e:
            if str(e) in ("NaN", "Infinity", "-Infinity"):
                raise ValueError(f"{cut(raw)} holds {e}, not a finite number") from None
            too_long = int_limit_problem(e)
            if too_long:
                raise ValueError(f"{cut(raw)} holds {too_long}") from None
            raise ValueError(f"{cut(raw)} is not valid JSON ({cut(str(e))})") from None
        if not _finite(value):
            raise ValueError(f"{cut(raw)} holds a number that overflows a float, not a finite number")
        return value
    return raw


def _finite(v: Any) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, dict):
        return all(_finite(x) for x in v.values())
    if isinstance(v, list):
        return all(_finite(x) for x in v)
    return True


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b=3"`` -> (["a", "b"], 3), the value read by :func:`parse_value`. Raises
    InputValueError (one line naming the --set argument) on a malformed one."""
    key, sep, raw = text.partition("=")
    path = key.strip().split(".")
    if not sep or not key.strip() or any(not p for p in path):
        raise InputValueError(f"--set {shown(text)}", "expected KEY.PATH=VALUE, e.g. zero_optimization.stage=3")
    # The config file's own limits (advisor.config.readers): at most MAX_CONFIG_BYTES, nested at
    # most MAX_DEPTH levels. A KEY.PATH of n parts nests the value n objects deep (the top-level
    # object included), so the value may add MAX_DEPTH - n more.
    if len(text.encode("utf-8", "surrogatepass")) > MAX_CONFIG_BYTES:
        raise InputValueError(f"--set {shown(text)}", f"longer than {MAX_CONFIG_BYTES:,} bytes, the config file limit")
    if len(path) > MAX_DEPTH:
        raise InputValueError(f"--set {shown(text)}", f"KEY.PATH has {len(path):,} parts; nesting deeper than "
                                                     f"{MAX_DEPTH} levels, the config file limit")
    if raw.strip()[:1] in ("{", "[") and not depth_ok(raw, MAX_DEPTH - len(path)):
        raise InputValueError(f"--set {shown(text)}", f"nesting deeper than {MAX_DEPTH} levels (the KEY.PATH's "
                                                     f"{len(path)} plus the value's), the config file limit")
    try:
        value = parse_value(raw)
    except ValueError as e:
        raise InputValueError(f"--set {shown(text)}", str(e)) from None
    return path, value


def apply_overrides(data: dict, overrides: Iterable[str]) -> dict:
    """A copy of the config ``data`` with each ``--set`` applied in order (``data`` is not changed).
    Raises InputValueError when a path runs through a value that is not an object."""
    if not isinstance(data, dict):
        raise InputValueError("--set", "the config is not a JSON object")
    out = copy.deepcopy(data)
    for text in overrides:
        path, value = parse_override(text)
        cur = out
        for i, p in enumerate(path[:-1]):
            nxt = cur.get(p)
            if nxt is None:
                nxt = cur[p] = {}
            if not isinstance(nxt, dict):
                raise InputValueError(f"--set {shown(text)}", f"{'.'.join(path[:i + 1])} is {cut(json.dumps(nxt))}, not an object")
            cur = nxt
        cur[path[-1]] = value
    return out


def set_words(text: str) -> str:
    """How a message names one ``--set`` argument: ``--set 'a.b=2'`` (quoted, cut)."""
    return f"--set {shown(text)}"


def written_pointers(data: Any, overrides: Iterable[str]) -> dict[str, str]:
    """JSON pointer -> :func:`set_words` of the argument, for what each ``--set`` of ``data`` (the config
    before them) writes: the first key of its path that did not exist yet (the object it created,
    everything under it the argument's: ``zero_optimzation.stage=2`` on a file without
    ``zero_optimzation`` writes ``/zero_optimzation``), else its own key (the value it replaced).
    Each argument is walked on the config the ones before it made, so a later one names its own key."""
    from advisor.findings import pointer

    out: dict[str, str] = {}
    cur_data = data
    for text in overrides:
        path, _ = parse_override(text)
        cur, ptr = cur_data, None
        for i, part in enumerate(path):
            if not isinstance(cur, dict) or part not in cur:
                ptr = pointer(*path[:i + 1])
                break
            cur = cur[part]
        out[ptr or pointer(*path)] = set_words(text)
        cur_data = apply_overrides(cur_data, [text])
    return out


def check_overrides(original: Any, overrides: Iterable[str]) -> None:
    """Each ``--set`` of ``original`` (a LoadedConfig, before the overrides) through the config
    file's own validation: the input limits (:func:`advisor.config.validation.batch_limit_problem`)
    and the schema (:func:`advisor.config.schema.validate_config`: types, ranges, unknown keys in
    strict sections). An error the overridden config has and the file alone has not, at the
    override's path (or at the key it created, or under the object it set), is the override's:
    InputValueError naming the --set argument, e.g. ``--set 'zero_optimization.stage=7':
    zero_optimization.stage is 7, expected one of 0, 1, 2, 3``. Applies them to check; returns None."""
    import dataclasses

    from advisor.config.schema import validate_config
    from advisor.config.validation import batch_limit_problem
    from advisor.findings import pointer

    overrides = list(overrides)
    data = apply_overrides(original.data, overrides)
    # every severity: a warning the file would get (S002 for a misspelt section, S003 for true where an
    # integer goes) is as much the argument's as an error, and its exit 2 keeps a typo from running the
    # estimate of the file unchanged (newcomer 22: zero_optimzation.stage=2 printed ZeRO 3, exit 0)
    before = {(f.code, f.pointer) for f in validate_config(original)}
    after = [f for f in validate_config(dataclasses.replace(original, data=data))
             if (f.code, f.pointer) not in before]
    over = batch_limit_problem(data)
    for text in overrides:
        path, _ = parse_override(text)
        ptr = pointer(*path)
        if over is not None and ptr == "/" + over[0]:
            raise InputValueError(set_words(text), over[1])
        for f in after:
            if f.pointer == ptr or f.pointer.startswith(ptr + "/") or ptr.startswith(f.pointer + "/"):
                raise InputValueError(set_words(text), f.message)
