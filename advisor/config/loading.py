"""Config loading, exactly as DeepSpeed 0.19.8 loads a config.

DeepSpeed (``deepspeed/runtime/config.py``, ``DeepSpeedConfig.__init__``) does::

    if isinstance(config, dict): use it
    elif os.path.exists(config): hjson.load(open(config), object_pairs_hook=dict_raise_error_on_duplicate_keys)
    else: hjson.loads(base64.urlsafe_b64decode(config).decode('utf-8'))

So a config file may be strict JSON or HJSON (comments, unquoted keys and strings, trailing
commas); duplicate keys in a file are an error; a non-path string is tried as URL-safe base64
of a JSON/HJSON document. We do the same, plus ``-`` for standard input, and additionally
record where each value sits in the text (JSON pointer -> 1-based line and column) by wrapping
hjson's own object parser, so findings can point at a line.

Note on HJSON: DeepSpeed's loader turns an unquoted ``True`` into the *string* "True" and
``1e9`` into the float 1e9; we keep those values as they are, and the rules judge them.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass, field
import json
import math
import re
from typing import Any

import hjson
from hjson.decoder import HjsonDecodeError, HjsonDecoder, JSONObject, make_scanner

from advisor.errors import ConfigLoadError, NotAnObjectError, int_limit_problem
from advisor.findings import escape_token

from advisor.config.validation import type_name
from advisor.config.readers import (MAX_CONFIG_BYTES, MAX_DEPTH, LineIndex, decode_text, depth_ok, wide_array_problem,
                                    duplicate_key_problem, gc_paused, non_finite_path, read_bytes, repeated_member)

from advisor.errors import MAX_ECHO_CHARS, cut  # noqa: F401  (the one echo-cutting helper)


@dataclass
class LoadedConfig:
    """A config as DeepSpeed would receive it, with positions for reporting."""

    #: What the user named: a path, ``-`` (stdin) or ``<base64>``.
    source: str
    #: The parsed top-level mapping.
    data: dict[str, Any]
    #: JSON pointer -> (line, column), 1-based, for every object member in the text.
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)
    text: str = ""
    #: JSON pointer of each key a ``--set`` wrote -> the argument (``--set 'a.b=2'``):
    #: :func:`advisor.config.overrides.written_pointers`; a finding there is located at the argument.
    overrides: dict[str, str] = field(default_factory=dict)


class _DuplicateKey(ValueError):
    def __init__(self, key: str, offset: int | None):
        self.key = key
        self.offset = offset
        super().__init__(key)


class _PositionDecoder(HjsonDecoder):
    """hjson's decoder with its object parser wrapped to record value offsets.

    The wrapper hands hjson's own ``JSONObject`` a ``scan_once`` that notes the offset where
    each member's value starts, and an ``object_pairs_hook`` that pairs those offsets with the
    keys (and, like DeepSpeed's ``dict_raise_error_on_duplicate_keys``, refuses duplicates).
    """

    def __init__(self) -> None:
        super().__init__()
        #: id(dict) -> {key: offset of its value}
        self.offsets: dict[int, dict[str, int]] = {}
        self._keep: list[dict[str, Any]] = []

        def parse_object(state, encoding, strict, scan_once, object_hook, object_pairs_hook, memo=None,
                         objectWithoutBraces=False):
            starts: list[int] = []

            def scan_recording(s, idx):
                starts.append(idx)
                return scan_once(s, idx)

            def pairs_hook(pairs):
                result: dict[str, Any] = {}
                offs: dict[str, int] = {}
                j = repeated_member(pairs)
                if j is not None:
                    raise _DuplicateKey(pairs[j][0], starts[j] if j < len(starts) else None)
                for i, (k, v) in enumerate(pairs):
                    off = starts[i] if i < len(starts) else None
                    result[k] = v
                    if off is not None:
                        offs[k] = off
                if offs:  # an empty object has no keys to place: nothing kept for it
                    self.offsets[id(result)] = offs
                    self._keep.append(result)
                return result

            return JSONObject(state, encoding, strict, scan_recording, object_hook, pairs_hook, memo,
                              objectWithoutBraces)

        self.parse_object = parse_object
        self.scan_once, self.scan_object_once = make_scanner(self)



#: A quoted string (skipped), or a NaN/Infinity word or a whole number token. Every branch
#: consumes what it matched and none can backtrack over a long run of digits (the exponent is
#: optional, so a digit run always matches at its first digit): linear in the text. A pattern
#: with a required exponent made a 1 MB run of digits quadratic (minutes).
_NUMBER_OR_CONSTANT = re.compile(r'"(?:[^"\\]|\\.)*"|(-?\b(?:NaN|Infinity)\b|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)')


def non_finite_literal(text: str) -> tuple[str, int] | None:
    """The first ``NaN``/``Infinity`` or number too large for a float (``1e400``) outside strings
    in ``text``, with its offset; None when there is none. JSON has no such numbers and DeepSpeed's
    hjson loader fails on them with its own words ("Bad key name (eof)", "cannot convert float
    infinity to integer"), so the advisor names the literal instead."""
    import math

    for m in _NUMBER_OR_CONSTANT.finditer(text):
        lit = m.group(1)
        if lit is None:
            continue  # a quoted string
        if "NaN" in lit or "Infinity" in lit:
            return lit, m.start(1)
        # an integer stays an int in hjson (no overflow); a decimal or exponent becomes a float
        if ("e" in lit or "E" in lit or "." in lit) and not math.isfinite(float(lit)):
            return lit, m.start(1)
    return None


def _non_finite_error(text: str, source: str) -> ConfigLoadError | None:
    hit = non_finite_literal(text)
    if hit is None:
        return None
    line, col = LineIndex(text).line_col(hit[1])
    return ConfigLoadError(source, f"non-finite number {cut(hit[0], 40)}: JSON has no NaN or infinity and DeepSpeed "
                                   "cannot load it; write a finite number", line, col)


def parse_text(text: str, source: str) -> LoadedConfig:
    """Parse JSON/HJSON ``text`` as DeepSpeed would; ``source`` names it in errors.

    Raises ConfigLoadError for: invalid JSON/HJSON, duplicate keys, a top level that is not
    an object, nesting deeper than MAX_DEPTH, an empty document.
    """
    if text.strip() == "":
        raise ConfigLoadError(source, "empty file: DeepSpeed needs a JSON object with at least a batch size")
    if not depth_ok(text):
        raise ConfigLoadError(source, f"nesting deeper than {MAX_DEPTH} levels; not a DeepSpeed config")
    fast = _parse_plain_json(text)
    if fast is not None:
        data, positions = fast
    else:
        data, positions = _parse_hjson(text, source)
    bad = non_finite_path(data)
    if bad is not None:  # NaN / Infinity / 1e999: no JSON or SARIF output could carry it
        at = bad
        while at not in positions and at:
            at = at.rsplit("/", 1)[0]
        line, col = positions.get(at, (None, None))
        raise ConfigLoadError(source, f"{bad}: non-finite number (NaN or Infinity); give a finite value", line, col)
    wide = wide_array_problem(data)
    if wide is not None:  # bounded validation work (issue 21 audit): one line, as a too-deep file
        line, col = positions.get(wide[0], (None, None))
        raise ConfigLoadError(source, wide[1], line, col)
    return LoadedConfig(source=source, data=data, positions=positions, text=text)


#: A JSON string (skipped whole) and, when it is a key, the colon after it (group 1 set; the
#: match ends where the member's value starts).
_STRING_OR_KEY = re.compile(r'"(?:[^"\\]|\\.)*"([ \t\n\r]*:[ \t\n\r]*)?')


class _NotPlain(ValueError):
    """A number hjson would read differently or refuse: leave the text to hjson."""


def _hjson_float(lit: str) -> float | int:
    """A JSON number with a fraction or exponent as hjson 3's decoder reads it
    (``hjson/decoder.py`` scantfnns: ``res = parse_float(...)``, then ``int(res)`` when ``res`` is
    integral and under 1e10 in magnitude: ``1.0`` is the int 1, ``1e9`` the int 10^9). A
    non-finite one (``1e400``) raises, for hjson's own error."""
    res = float(lit)
    if not math.isfinite(res):
        raise _NotPlain(lit)
    if int(res) == res and abs(res) < 1e10:
        return int(res)
    return res


def _no_constant(lit: str) -> Any:
    raise _NotPlain(lit)


def _parse_plain_json(text: str) -> tuple[dict[str, Any], dict[str, tuple[int, int]]] | None:
    """(data, positions) of ``text`` when it is plain JSON (no comments, no HJSON syntax), read at
    C speed by ``json.loads``; None for anything else (HJSON, an error, duplicate keys, a
    top level that is not an object, NaN / Infinity or a number hjson would refuse), which
    :func:`_parse_hjson` then reads and judges as before.

    For plain JSON the two agree: hjson's grammar contains JSON's, and its one different
    reading, of numbers with a fraction or exponent, is repeated by :func:`_hjson_float`.
    The positions are hjson's: each member's value starts where :data:`_STRING_OR_KEY`'s key
    match ends, and the keys' matches come in the text's order, which is the order a pre-order
    walk of the parsed objects meets their keys. hjson's pure-Python decoder took ~3 s on an
    8 MB array of 2M ``{}`` (issue 21); json.loads takes ~0.1 s."""
    try:
        with gc_paused():
            data = json.loads(text, parse_float=_hjson_float, parse_constant=_no_constant)
    except (ValueError, RecursionError):  # JSONDecodeError, _NotPlain, an int over the digit limit
        return None
    if not isinstance(data, dict):
        return None
    starts = [m.end() for m in _STRING_OR_KEY.finditer(text) if m.group(1) is not None]
    it = iter(starts)
    used = 0
    lines = LineIndex(text)
    positions: dict[str, tuple[int, int]] = {"": (1, 1)}

    def walk(obj: Any, ptr: str) -> None:
        nonlocal used
        if isinstance(obj, dict):
            for k, v in obj.items():
                p = ptr + "/" + escape_token(k)
                off = next(it, None)
                if off is None:
                    return
                used += 1
                at = text.rfind(k, max(0, off - 6 * len(k) - 256), off) if k else -1
                positions[p] = lines.line_col(at if at >= 0 else off)
                if v and isinstance(v, (dict, list)):
                    walk(v, p)
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                if v and isinstance(v, (dict, list)):
                    walk(v, f"{ptr}/{i}")

    walk(data, "")
    if used != len(starts):  # a duplicate key (json.loads kept the last): hjson's error names it
        return None
    return data, positions


def _parse_hjson(text: str, source: str) -> tuple[dict[str, Any], dict[str, tuple[int, int]]]:
    """(data, positions) of ``text`` by hjson's own decoder, DeepSpeed's parser: any HJSON, and
    the errors of any text :func:`_parse_plain_json` does not take."""
    dec = _PositionDecoder()
    try:
        data = dec.decode(text)
    except _DuplicateKey as e:
        line, col = LineIndex(text).line_col(e.offset) if e.offset is not None else (None, None)
        raise ConfigLoadError(source, duplicate_key_problem(e.key) + " (DeepSpeed refuses duplicate keys)", line, col)
    except HjsonDecodeError as e:
        raise _non_finite_error(text, source) or ConfigLoadError(source, f"not valid JSON/HJSON: {e.msg}", e.lineno,
                                                                 e.colno)
    except RecursionError:
        raise ConfigLoadError(source, "nesting too deep to parse")
    except IndexError:  # hjson on an unterminated /* comment (and other truncated input)
        at = _unterminated_comment(text)
        if at is not None:  # the comment's start, as file:line:column (README: every parser error has one)
            line, col = LineIndex(text).line_col(at)
            raise ConfigLoadError(source, "not valid JSON/HJSON: unterminated /* comment (no closing */)", line, col)
        line, col = LineIndex(text).line_col(len(text))
        raise ConfigLoadError(source, "not valid JSON/HJSON: unexpected end of input (unterminated value)", line, col)
    except (ValueError, TypeError, OverflowError) as e:  # hjson number conversion edge cases
        too_long = int_limit_problem(e)
        if too_long:  # Python's "Exceeds the limit (4300 digits)" advice, in the project's words
            from advisor.config.readers import long_number_at
            raise ConfigLoadError(source, too_long, *long_number_at(text)) from None
        raise _non_finite_error(text, source) or ConfigLoadError(source, f"not valid JSON/HJSON: {e}")
    if not isinstance(data, dict):
        raise NotAnObjectError(source, f"top level is {type_name(data)}, expected a JSON object")
    lines = LineIndex(text)
    positions: dict[str, tuple[int, int]] = {"": (1, 1)}

    def walk(obj: Any, ptr: str) -> None:
        if isinstance(obj, dict):
            offs = dec.offsets.get(id(obj), {})
            for k, v in obj.items():
                p = ptr + "/" + escape_token(k)
                if k in offs:
                    # Point at the key itself: the last occurrence of its text before the value
                    # (searched in a window before it, so a wide config maps in linear time).
                    off = offs[k]
                    at = text.rfind(k, max(0, off - 6 * len(k) - 256), off) if k else -1
                    positions[p] = lines.line_col(at if at >= 0 else off)
                walk(v, p)
        elif isinstance(obj, list):
            # Only a non-empty object inside has keys to place: no pointer is built for a
            # scalar or an empty element (2M of them in an 8 MB array, issue 21).
            for i, v in enumerate(obj):
                if v and isinstance(v, (dict, list)):
                    walk(v, f"{ptr}/{i}")

    walk(data, "")
    return data, positions


def _unterminated_comment(text: str) -> int | None:
    """Offset of the first ``/*`` outside quoted strings and line comments that has no closing
    ``*/``, or None. One linear scan (hjson's own decoder fails on it with an IndexError)."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif c == "#" or text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                return i
            i = j + 2
        else:
            i += 1
    return None


def load_config(source: str) -> LoadedConfig:
    """Load a DeepSpeed config from a path, ``-`` (stdin) or a URL-safe base64 string.

    Raises ConfigLoadError (one line: source, place, problem) for anything DeepSpeed would
    refuse to load, and for directories, unreadable files and files over MAX_CONFIG_BYTES.
    """
    if source == "-" or os.path.lexists(source):
        name = "<stdin>" if source == "-" else source
        raw = read_bytes(source, limit=MAX_CONFIG_BYTES, what="config")
        return parse_text(decode_text(raw, name, what="JSON/HJSON config"), name)
    # DeepSpeed tries any non-path string as base64 of a JSON/HJSON document.
    # A path is named whole (up to PATH_MAX); anything else may be megabytes of base64: cut.
    shown = source if ("/" in source or "." in source) and len(source) <= 4096 else cut(source)
    try:
        raw = base64.urlsafe_b64decode(source.encode("ascii"))
        text = raw.decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError):
        raise ConfigLoadError(shown, "no such file (and not a base64-encoded config either)")
    if not text.lstrip().startswith("{"):
        raise ConfigLoadError(shown, "no such file (and not a base64-encoded config either)")
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigLoadError("<base64>", f"over the {MAX_CONFIG_BYTES}-byte limit for a config")
    return parse_text(text, "<base64>")
