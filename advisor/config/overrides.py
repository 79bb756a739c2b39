"""What-if overrides: ``--set key.path=value`` applied to a loaded config before anything reads it.

``lint``, ``estimate`` and ``report`` take ``--set zero_optimization.stage=3`` (repeatable) to try
a change, e.g. a finding's computed fix, without editing the file. The value is read as JSON
(``3``, ``true``, ``5e8``, ``"auto"``, ``{"device": "cpu"}``); a value that is not JSON is the
string itself (``--set optimizer.type=AdamW``). Missing objects on the path are created. The
result goes through the same effective-config reading and validation as a written config.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Iterable

from advisor.config.validation import InputValueError


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b=3"`` -> (["a", "b"], 3). Raises InputValueError (one line) on a malformed one."""
    key, sep, raw = text.partition("=")
    path = key.strip().split(".")
    if not sep or not key.strip() or any(not p for p in path):
        raise InputValueError(f"--set {text!r}", "expected KEY.PATH=VALUE, e.g. zero_optimization.stage=3")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
        raise InputValueError(f"--set {text!r}", f"{raw} is not a finite number")
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
                raise InputValueError(f"--set {text!r}", f"{'.'.join(path[:i + 1])} is {json.dumps(nxt)}, not an object")
            cur = nxt
        cur[path[-1]] = value
    return out
