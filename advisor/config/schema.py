"""Schema validation of a DeepSpeed config against schemas/deepspeed-config.schema.json.

The schema is generated from DeepSpeed 0.19.8's own config models by ``advisor/config/_schemagen.py``
(see there for its custom ``x-`` annotations). ``validate_config`` runs jsonschema's
Draft 2020-12 validator and maps each error to a Finding in the S family:

=====  ========  =================================================================================
S001   error     unknown key in a section DeepSpeed validates strictly (pydantic, extra="forbid"),
                 or a field given under both its name and its stage3_* alias
S002   warning   ignored key: a key DeepSpeed does not know where it reads a plain dict and
                 silently ignores the rest (the top level, aio, activation_checkpointing, ...);
                 info for comment-style keys ("_comment"); error for a misspelt top-level key
                 whose did-you-mean is a top-level key the config lacks, under any of its names
                 (DeepSpeed runs on that key's default: defaults.ABSENT_TOP_LEVEL), when its value
                 would change what DeepSpeed runs (_typo_changes); not folded among the first 1,050 keys
S003   error     wrong type (warning where DeepSpeed's pydantic parsing coerces it, e.g. "True")
S004   error     out of range, or not one of the allowed values
S005   error     a key DeepSpeed 0.19.8 refuses outright (amp, mics_shard_size, ...)
S006   error     a known key at the wrong level (offload_optimizer at the top level, loss_scale in
                 bf16, aio inside zero_optimization, ...)
=====  ========  =================================================================================

"auto": the schema allows it where the HF Trainer / accelerate fill it in. Elsewhere inside a
pydantic section DeepSpeed drops "auto" and uses its default; that is not a schema error here
(the "auto" lint rule explains it). In a plain-dict section an "auto" nobody fills is a type error.

Nothing here imports torch or deepspeed; jsonschema is imported on the first validation.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor.rules import emit
from advisor.findings import Finding, pointer
from advisor.config.suppress import SUPPRESS_KEY
# ARRAY_HEAD: elements of an array the schema sees one by one; past them, each distinct later element once (the
# loaders refuse an array of more than readers.MAX_ARRAY_DISTINCT distinct later elements)
from advisor.config.readers import ARRAY_HEAD, element_key

if TYPE_CHECKING:
    from advisor.config.keys import KeyTable
    from advisor.config.loading import LoadedConfig

SCHEMA_NAME = "deepspeed-config.schema.json"

_state: dict[str, Any] = {}

_BOOL_STRINGS = {"0": False, "off": False, "f": False, "false": False, "n": False, "no": False,
                 "1": True, "on": True, "t": True, "true": True, "y": True, "yes": True}
_INT_RE = re.compile(r"^\s*[+-]?\d+\s*$")


def schema_path() -> Path:
    """Where the schema file is: ``schemas/`` next to the package (repo checkout / editable
    install), else ``advisor/schemas/`` (a wheel that ships it as package data)."""
    here = Path(__file__).resolve().parent.parent  # the advisor package
    for cand in (here.parent / "schemas" / SCHEMA_NAME, here / "schemas" / SCHEMA_NAME):
        if cand.is_file():
            return cand
    raise FileNotFoundError(f"{SCHEMA_NAME} not found next to {here}")


def load_schema() -> dict[str, Any]:
    """The schema as a dict (read once per process)."""
    if "schema" not in _state:
        _state["schema"] = json.loads(schema_path().read_text(encoding="utf-8"))
    return _state["schema"]


def _validator():
    if "validator" not in _state:
        from jsonschema import Draft202012Validator  # deferred: ~50 ms of imports

        _state["validator"] = Draft202012Validator(load_schema())
    return _state["validator"]


def key_table() -> "KeyTable":
    """The key -> section table built from the schema (built on first use)."""
    if "table" not in _state:
        from advisor.config.keys import KeyTable

        _state["table"] = KeyTable(load_schema())
    return _state["table"]


# ------------------------------------------------------------------------------------------

def validate_config(loaded: "LoadedConfig", hf: bool = False) -> list[Finding]:
    """Schema findings for ``loaded`` (unknown keys, types, ranges, removed and misplaced keys).

    ``hf``: the config goes through the HF Trainer / accelerate. "auto" is allowed by the schema
    exactly where they fill it, whatever ``hf`` is (the "auto" lint rule judges it), so ``hf``
    only changes wording. Findings are not located (lint_config adds line/column).
    """
    data = loaded.data
    red, amap = reduce_arrays(data)
    out: list[Finding] = []
    for err in _validator().iter_errors(red):
        if amap:
            _restore_instances(err, red, amap, data)
            out.extend(_to_original(f, red, amap) for f in _map_error(err, hf))
        else:
            out.extend(_map_error(err, hf))
    if loaded.text:
        out = [_as_written(f, loaded) for f in out]
    seen: set[tuple[str, str]] = set()
    uniq = []
    for f in out:
        if (f.code, f.pointer) not in seen:
            seen.add((f.code, f.pointer))
            uniq.append(f)
    return uniq


#: A member from its key (``LoadedConfig.positions`` points at the key) to a number value: the number's text.
_MEMBER_NUMBER = re.compile(r'(?:"(?:[^"\\]|\\.)*"|[^\s:]+)[ \t]*:[ \t]*(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)')


def _as_written(f: Finding, loaded: "LoadedConfig") -> Finding:
    """``f`` with a true/false key's number echoed as the file writes it: DeepSpeed's reader (hjson,
    ``runtime/config.py`` l.444; the advisor's ``loading._hjson_float``) turns ``1.0`` into the int 1, so the
    parsed value alone would echo ``1.0`` as ``1``."""
    v = (f.data or {}).get("true_false") if isinstance(f.data, dict) else None
    pos = loaded.positions.get(f.pointer)
    if v is None or pos is None:
        return f
    lines = loaded.text.splitlines()
    line, col = pos
    m = _MEMBER_NUMBER.match(lines[line - 1], col - 1) if 0 < line <= len(lines) else None
    shown = json.dumps(v)
    if m is None or m.group(1) == shown:
        return f
    return dataclasses.replace(f, message=f.message.replace(
        f"is {shown}, not true or false", f"is {m.group(1)} (DeepSpeed's hjson reader makes it {shown}), "
        f"not true or false", 1))




def reduce_arrays(data: Any) -> tuple[Any, dict[tuple, list[list[int]]]]:
    """(copy of ``data`` for schema validation, index map). Every array longer than
    :data:`ARRAY_HEAD` keeps its first ARRAY_HEAD elements and then one representative of each
    distinct later element (equal JSON), so a 100,000-element array of one wrong value is
    validated as 65 elements, not 100,000 (that took 12 s, issue 21), and the array stays longer
    than any DeepSpeed bound on its length. The map takes the reduced path of each cut array to,
    per reduced index, the original indices it stands for. Arrays within the head are copied as
    they are (map empty: nothing changes)."""
    amap: dict[tuple, list[list[int]]] = {}

    def long(node: Any) -> bool:
        if isinstance(node, dict):
            return any(long(v) for v in node.values())
        if isinstance(node, list):
            return len(node) > ARRAY_HEAD or any(long(v) for v in node)
        return False

    if not long(data):  # the common case: nothing to cut, no copy
        return data, amap

    def walk(node: Any, rpath: tuple) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, rpath + (k,)) for k, v in node.items()}
        if isinstance(node, list):
            if len(node) <= ARRAY_HEAD:
                return [walk(v, rpath + (i,)) for i, v in enumerate(node)]
            reps: dict[tuple, list[int]] = {}
            for i in range(ARRAY_HEAD, len(node)):
                reps.setdefault(element_key(node[i]), []).append(i)
            idx = [[i] for i in range(ARRAY_HEAD)] + list(reps.values())
            amap[rpath] = idx
            return [walk(node[ix[0]], rpath + (k,)) for k, ix in enumerate(idx)]
        return node

    red = walk(data, ())
    return red, amap




def _original_path(rpath: "list[Any] | tuple", amap: dict[tuple, list[list[int]]]) -> tuple[list[Any], int]:
    """(the original path of reduced path ``rpath``, how many original elements it stands for)."""
    out: list[Any] = []
    times = 1
    for i, c in enumerate(rpath):
        idx = amap.get(tuple(rpath[:i])) if isinstance(c, int) else None
        if idx is not None and 0 <= c < len(idx):
            out.append(idx[c][0])
            times *= len(idx[c])
        else:
            out.append(c)
    return out, times


def _restore_instances(err, red: Any, amap: dict, data: Any) -> None:
    """Point the error (and its sub-errors) at the original values: an array's own error must
    show the whole array, not the reduced copy."""
    path, _ = _original_path(list(err.absolute_path), amap)
    node = data
    try:
        for c in path:
            node = node[c]
        err.instance = node
    except (KeyError, IndexError, TypeError):
        pass
    for sub in err.context or []:
        _restore_instances(sub, red, amap, data)


def _pointer_parts(ptr: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in ptr.split("/")[1:]] if ptr else []


def _to_original(f: Finding, red: Any, amap: dict) -> Finding:
    """``f`` (from the reduced copy) with the original element index in its pointer and message;
    a finding about a representative element carries ``data["elements"]``, how many elements it
    stands for (:func:`advisor.views.lint.fold_array_findings` counts them)."""
    rpath: list[Any] = []
    node = red
    for part in _pointer_parts(f.pointer):
        if isinstance(node, list) and part.isdigit():
            rpath.append(int(part))
            node = node[int(part)] if int(part) < len(node) else None
        else:
            rpath.append(part)
            node = node.get(part) if isinstance(node, dict) else None
    opath, times = _original_path(rpath, amap)
    if opath == rpath and times == 1:
        return f
    msg = f.message.replace(_where(rpath), _where(opath))
    data = {**(f.data or {}), "elements": times} if times > 1 else f.data
    return dataclasses.replace(f, pointer=pointer(*opath), message=msg, data=data)


def _section_of(path: list[Any]) -> tuple[str, ...] | None:
    """The section tuple for a path of object keys (None if it goes through an array)."""
    if any(not isinstance(p, str) for p in path):
        return None
    return tuple(path)


def _context(path: list[Any]) -> str:
    """How DeepSpeed reads the object holding the value at ``path``: pydantic | dict | open | ""."""
    from advisor.config.keys import object_schema

    sec = _section_of(path[:-1])
    if sec is None:
        return ""
    node = object_schema(load_schema(), sec)
    return (node or {}).get("x-ds-read", "")


def _where(path: list[Any]) -> str:
    return ".".join(str(p) for p in path) if path else "the top level"


def _shown(value) -> str:
    """A config value for a message: its JSON, cut to 60 characters (an array of a million
    elements is not echoed whole)."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else f"{text[:60]}... ({len(text)} characters)"


def _describe(s: dict[str, Any]) -> str:
    """Short description of what a (sub)schema accepts."""
    if "const" in s:
        return json.dumps(s["const"])
    if "enum" in s:
        return "one of " + ", ".join(json.dumps(v) for v in s["enum"])
    if "anyOf" in s:
        return " or ".join(_describe(x) for x in s["anyOf"])
    t = s.get("type")
    words = dict(_TYPE_WORDS)
    values = _ci_values(s.get("pattern"))
    if values:  # a case-insensitive enum (e.g. communication_data_type): the values, not "a string"
        words["string"] = "one of " + ", ".join(json.dumps(v) for v in values) + " (any case)"
    if isinstance(t, list):
        desc = " or ".join(words.get(x, x) for x in t)
    elif t == "array" and ("minItems" in s or "maxItems" in s):
        # the length is what a too-short list breaks ("betas is [0.9], expected a list" named the wrong problem)
        lo, hi = s.get("minItems"), s.get("maxItems")
        n = (f"{lo}" if lo == hi else f"{lo} to {hi}" if lo is not None and hi is not None
             else f"at least {lo}" if lo is not None else f"at most {hi}")
        it = (s.get("items") or {}).get("type") if isinstance(s.get("items"), dict) else None
        desc = f"a list of {n} " + ({"number": "numbers", "integer": "integers", "string": "strings"}.get(it, "items")
                                   if isinstance(it, str) else "items")
    elif t:
        desc = words.get(t, t)
    elif "$ref" in s:
        desc = "an object"
    else:
        desc = "a value"
    bounds = []
    if "minimum" in s:
        bounds.append(f">= {s['minimum']}")
    if "exclusiveMinimum" in s:
        bounds.append(f"> {s['exclusiveMinimum']}")
    if "maximum" in s:
        bounds.append(f"<= {s['maximum']}")
    if "exclusiveMaximum" in s:
        bounds.append(f"< {s['exclusiveMaximum']}")
    return desc + (" " + " and ".join(bounds) if bounds else "")


def _ci_values(pattern: Any) -> list[str] | None:
    """The values of a case-insensitive enum pattern as ``_schemagen._ci_enum`` writes it
    (``^([Ff][Pp]32|[Bb][Ff]16)$`` -> ``["fp32", "bf16"]``: DeepSpeed lower-/upper-cases these
    strings before comparing, e.g. runtime/config.py:get_communication_data_type, whose
    ValueError lists fp16, bf16, fp32); None for any other pattern."""
    if not isinstance(pattern, str):
        return None
    m = re.fullmatch(r"\^\((.*)\)\$", pattern)
    if not m:
        return None
    out = []
    for alt in m.group(1).split("|"):
        parts = re.findall(r"\[([A-Z])([a-z])\]|([0-9_\-])", alt)
        if not alt or "".join(f"[{u}{l}]" if u else d for u, l, d in parts) != alt \
                or any(u and u.lower() != l for u, l, _ in parts):
            return None
        out.append("".join(l or d for _, l, d in parts))
    return out


_TYPE_WORDS = {"integer": "an integer", "number": "a number", "boolean": "true/false", "string": "a string",
               "object": "an object", "array": "a list", "null": "null"}


def _lax(value: Any, expected: Any) -> tuple[bool, Any]:
    """Would pydantic (lax mode) coerce ``value`` to the JSON type(s) ``expected``? -> (ok, result)."""
    types = expected if isinstance(expected, list) else [expected]
    for t in types:
        if t == "boolean":
            if isinstance(value, str) and value.strip().lower() in _BOOL_STRINGS:
                return True, _BOOL_STRINGS[value.strip().lower()]
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value in (0, 1):
                return True, bool(value)
        elif t == "integer":
            if isinstance(value, bool):
                return True, int(value)
            if isinstance(value, str) and _INT_RE.match(value):
                return True, int(value)
        elif t == "number":
            if isinstance(value, bool):
                return True, float(value)
            if isinstance(value, str):
                try:
                    f = float(value)
                except ValueError:
                    continue
                if math.isfinite(f):
                    return True, f
    return False, None


#: Unknown keys of one object reported one by one (each with a did-you-mean); the rest are folded.
MAX_UNKNOWN_KEYS = 50
#: Unknown top-level keys past MAX_UNKNOWN_KEYS still searched for a misspelt section (S002's error): each costs
#: one did-you-mean search (~0.15 ms: 100,000 keys took 15 s against 0.7 s without it); beyond them the fold says
#: they were not searched (bounded work, issue 21). No real config has a thousand unknown top-level keys.
MAX_TYPO_SCAN = 1000


def _map_error(err, hf: bool) -> list[Finding]:
    path = list(err.absolute_path)
    ptr = pointer(*path)
    v = err.validator
    sch = err.schema if isinstance(err.schema, dict) else {}
    inst = err.instance

    if v == "additionalProperties":
        sec = _section_of(path)
        if sec is None or not isinstance(inst, dict):
            return [emit("S002", "warning", ptr, f"ignored keys at {_where(path)}: not keys DeepSpeed knows", "")]
        props = sch.get("properties") or {}
        # the advisor's own top-level suppression section (advisor.config.suppress) is not a stray key
        unknown = [k for k in inst if k not in props and (sec or k != SUPPRESS_KEY)]
        if not unknown:
            return []
        read = sch.get("x-ds-read", "dict")
        out = [_unknown_key(sec, k, inst[k], read, inst) for k in unknown[:MAX_UNKNOWN_KEYS]]
        if len(unknown) > MAX_UNKNOWN_KEYS:  # bounded work: the folded keys get no finding of their own
            first = out[0]
            word = "ignored" if first.code == "S002" else "unknown"  # each rule's own word (S002 ignored-key)
            # ... except S002's errors: a misspelt top-level key that changes what DeepSpeed runs is named wherever
            # it stands (the order of the keys must not decide the exit code); only the top level has them, and a
            # folded key costs one did-you-mean search (keys.KeyTable.suggest), the effect test only a typo's
            scan = unknown[MAX_UNKNOWN_KEYS:MAX_UNKNOWN_KEYS + MAX_TYPO_SCAN] if not sec and read == "dict" else []
            extra = [f for f in (_unknown_key(sec, k, inst[k], read, inst) for k in scan) if f.severity == "error"]
            rest = len(unknown) - MAX_UNKNOWN_KEYS - len(extra)
            listed = f"the first {MAX_UNKNOWN_KEYS}" + (" and each misspelt key that changes a setting" if extra else "")
            unsearched = (f"; keys past the first {MAX_UNKNOWN_KEYS + MAX_TYPO_SCAN:,} were not searched for a "
                          "misspelt section" if scan and len(unknown) > MAX_UNKNOWN_KEYS + MAX_TYPO_SCAN else "")
            severity = "warning" if first.code == "S002" and first.severity == "error" else first.severity
            out += extra
            if rest:
                out.append(dataclasses.replace(first, pointer=ptr, severity=severity, message=f"{rest} more {word} "
                                               f"key(s) at {_where(path)} ({listed} are listed{unsearched})",
                                               fix="remove the keys DeepSpeed does not read", data={"folded": rest}))
        return out

    if v == "not":
        removed = sch.get("x-ds-removed")
        if removed:
            key = str(path[-1]) if path else ""
            repl = removed.get("replacement")
            msg = (f"'{key}' was removed: DeepSpeed 0.19.8 refuses the config (DeepSpeedConfigError: "
                   f"{removed['message'].split(' See ')[0]})")
            fix = f"remove '{key}'" + (f"; use {repl} instead" if repl else " (nothing replaces it)")
            return [emit("S005", "error", ptr, msg, fix, data={"replacement": repl})]
        conflict = sch.get("x-ds-alias-conflict")
        if conflict:
            alias, name = conflict
            return [emit("S001", "error", pointer(*path, name),
                            f"'{name}' and its alias '{alias}' are both given in {_where(path)}: DeepSpeed accepts "
                            f"one spelling and rejects the other as an extra input",
                            f"keep only one of '{alias}' and '{name}'")]
        return [emit("S004", "error", ptr, f"{_where(path)}: value not allowed", "")]

    key = str(path[-1]) if path else "config"
    where = _where(path)
    ctx = _context(path)

    if inst == "auto":
        if ctx == "pydantic":
            return []  # DeepSpeed drops "auto" here and uses its default: the "auto" rule reports it
        return [emit("S003", "error", ptr,
                        f'{where} is "auto", which neither the HF Trainer nor accelerate fill in for this key; '
                        f"DeepSpeed reads the string as is",
                        f"set {key} to {_describe(_value_schema(sch, v))}")]

    if v == "anyOf":
        # HF-"auto" wrapper or a small union: report the first branch's failure when it is specific
        first = [e for e in (err.context or []) if e.relative_schema_path and e.relative_schema_path[0] == 0]
        if sch.get("x-hf-auto") and first:
            out: list[Finding] = []
            for e in first:
                out.extend(_map_error(e, hf))
            if out:
                return out
        return [emit("S003", "error", ptr, f"{where} is {_shown(inst)}; expected {_describe(sch)}",
                        f"set {key} to {_describe(sch)}")]

    if v == "type" and sch.get("x-ds-true-false"):
        # DeepSpeed's own ``value in [True, False]`` test (defaults.TRUE_FALSE_KEYS, source in the schema)
        from advisor.config.defaults import ds_true_false
        src = sch["x-ds-true-false"]
        as_bool = ds_true_false(inst)
        if as_bool is not None:
            return [emit("S003", "warning", ptr,
                         f"{where} is {_shown(inst)}, not true or false; DeepSpeed 0.19.8 accepts it ({src}: "
                         f"{_shown(inst)} in [True, False] holds) and reads it as {json.dumps(as_bool)}",
                         f"write {json.dumps(as_bool)}", data={"true_false": inst})]
        return [emit("S003", "error", ptr,
                     f"{where} is {_shown(inst)}, expected true or false: DeepSpeed 0.19.8 refuses it while parsing "
                     f"the config (DeepSpeedConfigError \"value of '{inst}' is invalid, expecting: true or false\", "
                     f"{src})", f"set {key} to true or false")]

    if v == "type":
        expected = err.validator_value
        if ctx == "pydantic":
            ok, coerced = _lax(inst, expected)
            if ok:
                return [emit("S003", "warning", ptr,
                                f"{where} is {_shown(inst)}, not {_describe({'type': expected})}; DeepSpeed's "
                                f"config parser coerces it to {json.dumps(coerced)}",
                                f"write {json.dumps(coerced)}")]
            consequence = "DeepSpeed 0.19.8 rejects it at deepspeed.initialize (pydantic ValidationError)"
        elif tuple(path) in SECTION_UNPACKED:
            # a section DeepSpeed unpacks into its pydantic model: anything but a mapping (or the documented
            # bool form) raises TypeError where the config is built (fixa22: it said a string "counts as true")
            consequence = SECTION_UNPACKED[tuple(path)].format(kind=type(inst).__name__ if inst is not None else "NoneType")
        elif ctx in ("dict", ""):
            consequence = "DeepSpeed uses the value as is and fails or misbehaves later"
            if isinstance(inst, str) and "boolean" in (expected if isinstance(expected, list) else [expected]):
                consequence = "DeepSpeed uses the string as is, and any non-empty string counts as true"
        else:
            consequence = ""
        if isinstance(inst, str) and inst.rstrip().endswith(",") and len(inst) > 1:
            consequence += " (an unquoted HJSON value runs to the end of the line, trailing comma included)"
        return [emit("S003", "error", ptr,
                        f"{where} is {_shown(inst)}, expected {_describe({'type': expected})}"
                        + (f": {consequence}" if consequence else ""),
                        f"set {key} to {_describe(sch)}")]

    if v == "enum" and ctx == "pydantic" and not isinstance(inst, bool):
        # pydantic (lax mode) coerces "3", 3.0 and "3.0" to the int member 3 (DeepSpeedZeroConfig
        # stage is a ZeroStageEnum): DeepSpeed accepts them. Say what happens instead of "rejects".
        coerced = None
        if isinstance(inst, float) and inst.is_integer():
            coerced = int(inst)
        elif isinstance(inst, str):
            try:
                f = float(inst)
                coerced = int(f) if math.isfinite(f) and f.is_integer() else None
            except ValueError:
                coerced = None
        if coerced is not None and coerced in (err.validator_value or []):
            extra = ""
            if path == ["zero_optimization", "stage"]:
                extra = ("; but the HF Trainer and accelerate read the stage as written (HfDeepSpeedConfig."
                         f"is_zero3: {json.dumps(inst)} == 3 is false), so they treat the config as not ZeRO-"
                         f"{coerced}: from_pretrained skips zero.Init (the stage3 \"auto\" sizes are still filled, by "
                         "accelerate's _prepare_deepspeed, whatever the stage)" if coerced == 3 else
                         f"; but the HF Trainer and accelerate read the stage as written ({json.dumps(inst)} is not "
                         f"{coerced}) when they test for ZeRO-2/3")
            return [emit("S003", "warning", ptr,
                         f"{where} is {json.dumps(inst)}, not an integer; DeepSpeed 0.19.8's config parser coerces it "
                         f"to {coerced} and accepts it{extra}", f"write {coerced}")]
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "enum", "const", "pattern",
             "minItems", "maxItems", "minLength"):
        # a bound DeepSpeed never checks carries what a value outside it does (x-ds-unchecked, _schemagen)
        consequence = sch.get("x-ds-unchecked") or (
            "DeepSpeed 0.19.8 rejects it at deepspeed.initialize" if ctx == "pydantic"
            else "DeepSpeed does not accept it")
        return [emit("S004", "error", ptr,
                        f"{where} is {_shown(inst)}, expected {_describe(sch)}: {consequence}",
                        f"set {key} to {_describe(sch)}")]

    return [emit("S003", "error", ptr, f"{where}: {err.message}", "")]


#: Sections DeepSpeed 0.19.8 unpacks with ``Model(**value)``: a value that is not a mapping (nor the bool a
#: section takes in its deprecated form) raises TypeError while DeepSpeedConfig is built in deepspeed.initialize.
#: zero_optimization: runtime/zero/config.py ``get_zero_config`` l.71-78 (a bool is the deprecated form, l.74-75;
#: else ``DeepSpeedZeroConfig(**zero_config_dict)``, l.78), called from runtime/config.py l.499.
SECTION_UNPACKED: dict[tuple[str, ...], str] = {
    ("zero_optimization",): ("DeepSpeed 0.19.8 raises TypeError when deepspeed.initialize builds the config "
                             "(runtime/zero/config.py l.78 get_zero_config: DeepSpeedZeroConfig(**value): \"argument "
                             "after ** must be a mapping, not {kind}\")"),
}


def _value_schema(sch: dict[str, Any], validator: str) -> dict[str, Any]:
    """The schema without its "auto" branch, for fix hints."""
    if "anyOf" in sch:
        subs = [s for s in sch["anyOf"] if s.get("const") != "auto"]
        if len(subs) == 1:
            return subs[0]
    return sch


def _unknown_key(sec: tuple[str, ...], key: str, value: Any, read: str, siblings: dict | None = None) -> Finding:
    """The finding of ``key``, unknown in section ``sec`` (read by DeepSpeed as ``read``: "pydantic" or "dict"),
    beside ``siblings`` (the keys of that section as written): S006 misplaced, S001 unknown, S002 ignored."""
    from advisor.config.keys import note_for, section_name

    table = key_table()
    ptr = pointer(*sec, key)
    here = section_name(sec)
    homes = table.home_of(key, sec)
    if homes and sec and key == sec[-1]:
        return emit("S006", "error", ptr,
                       f"'{key}' inside {here} is nested one level too deep: {here} has no key '{key}'; "
                       f"DeepSpeed {'0.19.8 rejects it' if read == 'pydantic' else 'silently ignores it'}",
                       f"remove the inner '{key}' and put its settings directly in {here}"
                       + (" ('enabled' switches it on)" if "enabled" in table.keys_of.get(sec, []) else ""),
                       data={"belongs_in": [""]})
    if homes:
        names = " or ".join(section_name(h) for h in homes)
        place = "is a top-level key" if homes == [()] else f"belongs under {names}"
        effect = ("DeepSpeed 0.19.8 rejects it here" if read == "pydantic"
                  else "DeepSpeed silently ignores it here")
        note = note_for(sec, key)
        msg = f"'{key}' is not a key of {here}: it {place}; {effect}" + (f" ({note})" if note else "")
        if note and "loss scaling exists only for fp16" in note:
            fix = f"remove '{key}' from {here} (bf16 needs no loss scaling), or set it in fp16 if you train in fp16"
        else:
            target = "the top level" if homes == [()] else section_name(homes[0])
            fix = f"move '{key}' into {target}"
        return emit("S006", "error", ptr, msg, fix, data={"belongs_in": [".".join(h) for h in homes]})

    suggestion = table.suggest(key, sec)
    dym = f"; did you mean '{suggestion}'?" if suggestion else ""
    fix = f"rename it to '{suggestion}'" if suggestion else f"remove '{key}'"
    data = {"suggestion": suggestion} if suggestion else {}
    if read == "pydantic":
        return emit("S001", "error", ptr,
                       f"unknown key '{key}' in {here}: DeepSpeed 0.19.8 rejects it at deepspeed.initialize "
                       f"(pydantic: extra inputs are not permitted){dym}", fix, data=data)
    if key.startswith(("_", "#", "//")) or key.lower().startswith("comment"):
        return emit("S002", "info", ptr, f"'{key}' looks like a comment key; DeepSpeed ignores it", "", data=data)
    msg = f"ignored key '{key}' in {here}: DeepSpeed does not know it and silently ignores it"
    severity = "warning"
    if not sec and suggestion and not _top_level_present(suggestion, siblings or {}):
        # a misspelt top-level key DeepSpeed reads, that key itself absent: DeepSpeed runs on its default for it
        # (it reads the key with dict.get / `in`, e.g. runtime/zero/config.py l.71-78), so what the user meant
        # does not happen, silently -- an error (not `refuses`: DeepSpeed starts, and estimate judges the default),
        # unless the value, read under the intended name, is what DeepSpeed runs with anyway
        from advisor.config.defaults import ABSENT_TOP_LEVEL

        effect = ABSENT_TOP_LEVEL.get(suggestion)
        msg += (f", and '{suggestion}' is absent, so DeepSpeed runs with its default: "
                + (effect[0] if effect else f"as if '{suggestion}' were not written"))
        data = {**data, "absent": suggestion}
        if _typo_changes(key, suggestion, value, siblings or {}):
            severity = "error"
        else:
            msg += " (it sets what DeepSpeed's default already is)"
    msg += dym
    inner = table.known_top_level_inside(value) if not sec else []
    if inner:
        msg += f" (it contains {', '.join(inner)}, which DeepSpeed reads only at the top level)"
        fix = f"move {', '.join(inner)} to the top level and remove '{key}'"
    return emit("S002", severity, ptr, msg, fix, data=data)


def _top_level_present(name: str, raw: dict) -> bool:
    """Whether DeepSpeed finds top-level section ``name`` in ``raw``: under its own name or a legacy name of the
    same section (defaults.LEGACY_SECTIONS: ``bfloat16`` is read when ``bf16`` is absent,
    ``runtime/precision_config.py`` l.34-38), so a misspelling of either leaves the section written."""
    from advisor.config.defaults import LEGACY_SECTIONS

    canon = LEGACY_SECTIONS.get(name, name)
    return any(k in raw for k in {canon, *(old for old, new in LEGACY_SECTIONS.items() if new == canon)})


def _typo_changes(key: str, suggestion: str, value: Any, raw: dict) -> bool:
    """Whether misspelt top-level ``key`` (DeepSpeed ignores it) loses a setting: its ``value``, read under the
    intended name ``suggestion``, gives DeepSpeed 0.19.8 something other than what it runs with without it.

    A key :func:`advisor.config.effective.effective_config` reads (effective.TOP_LEVEL_READ): the two effective
    configs, ``raw`` without ``key`` and with ``key`` renamed to ``suggestion``, compared (their notes aside).
    Another key: its value against the schema's ``default`` (DeepSpeed's ``*_DEFAULT``, e.g. ``runtime/config.py``
    l.351-352 get_wall_clock_breakdown, WALL_CLOCK_BREAKDOWN_DEFAULT False); no default known: True."""
    from advisor.config.effective import TOP_LEVEL_READ, effective_config

    if suggestion in TOP_LEVEL_READ:
        without = {k: v for k, v in raw.items() if k != key}
        a = dataclasses.replace(effective_config(without), notes=[])
        b = dataclasses.replace(effective_config({**without, suggestion: value}), notes=[])
        return a != b
    prop = (load_schema().get("properties") or {}).get(suggestion)
    if not isinstance(prop, dict) or "default" not in prop:
        return True
    default = prop["default"]
    return not (value == default and type(value) is type(default))  # False is not 0 here: DeepSpeed may type-check
