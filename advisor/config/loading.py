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
import sys
from dataclasses import dataclass, field
from typing import Any

import hjson
from hjson.decoder import HjsonDecodeError, HjsonDecoder, JSONObject, make_scanner

from advisor.errors import ConfigLoadError
from advisor.findings import escape_token

#: Files larger than this are refused before parsing (a DeepSpeed config is a few KiB).
MAX_CONFIG_BYTES = 8 * 1024 * 1024
#: Deeper nesting than this is refused (DeepSpeed configs nest 3-4 levels).
MAX_DEPTH = 64


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
                for i, (k, v) in enumerate(pairs):
                    off = starts[i] if i < len(starts) else None
                    if k in result:
                        raise _DuplicateKey(k, off)
                    result[k] = v
                    if off is not None:
                        offs[k] = off
                self.offsets[id(result)] = offs
                self._keep.append(result)
                return result

            return JSONObject(state, encoding, strict, scan_recording, object_hook, pairs_hook, memo,
                              objectWithoutBraces)

        self.parse_object = parse_object
        self.scan_once, self.scan_object_once = make_scanner(self)


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col


def _depth_ok(text: str) -> bool:
    depth = 0
    for ch in text:
        if ch in "{[":
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif ch in "}]":
            depth -= 1
    return True


def parse_text(text: str, source: str) -> LoadedConfig:
    """Parse JSON/HJSON ``text`` as DeepSpeed would; ``source`` names it in errors.

    Raises ConfigLoadError for: invalid JSON/HJSON, duplicate keys, a top level that is not
    an object, nesting deeper than MAX_DEPTH, an empty document.
    """
    if text.strip() == "":
        raise ConfigLoadError(source, "empty file: DeepSpeed needs a JSON object with at least a batch size")
    if not _depth_ok(text):
        raise ConfigLoadError(source, f"nesting deeper than {MAX_DEPTH} levels; not a DeepSpeed config")
    dec = _PositionDecoder()
    try:
        data = dec.decode(text)
    except _DuplicateKey as e:
        line, col = _line_col(text, e.offset) if e.offset is not None else (None, None)
        raise ConfigLoadError(source, f"duplicate key {e.key!r} (DeepSpeed refuses duplicate keys)", line, col)
    except HjsonDecodeError as e:
        raise ConfigLoadError(source, f"not valid JSON/HJSON: {e.msg}", e.lineno, e.colno)
    except RecursionError:
        raise ConfigLoadError(source, "nesting too deep to parse")
    except (ValueError, TypeError, OverflowError) as e:  # hjson number conversion edge cases
        raise ConfigLoadError(source, f"not valid JSON/HJSON: {e}")
    if not isinstance(data, dict):
        raise ConfigLoadError(source, f"top level is a {type(data).__name__}, expected a JSON object")

    positions: dict[str, tuple[int, int]] = {"": (1, 1)}

    def walk(obj: Any, ptr: str) -> None:
        if isinstance(obj, dict):
            offs = dec.offsets.get(id(obj), {})
            for k, v in obj.items():
                p = ptr + "/" + escape_token(k)
                if k in offs:
                    # Point at the key itself: the last occurrence of its text before the value.
                    at = text.rfind(k, 0, offs[k]) if k else -1
                    positions[p] = _line_col(text, at if at >= 0 else offs[k])
                walk(v, p)
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                walk(v, f"{ptr}/{i}")

    walk(data, "")
    return LoadedConfig(source=source, data=data, positions=positions, text=text)


def _decode_bytes(raw: bytes, source: str) -> str:
    if b"\x00" in raw:
        raise ConfigLoadError(source, "binary file (contains NUL bytes), not a JSON/HJSON config")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigLoadError(source, f"not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})")


def load_config(source: str) -> LoadedConfig:
    """Load a DeepSpeed config from a path, ``-`` (stdin) or a URL-safe base64 string.

    Raises ConfigLoadError (one line: source, place, problem) for anything DeepSpeed would
    refuse to load, and for directories, unreadable files and files over MAX_CONFIG_BYTES.
    """
    if source == "-":
        raw = sys.stdin.buffer.read(MAX_CONFIG_BYTES + 1)
        name = "<stdin>"
    elif os.path.isdir(source):
        raise ConfigLoadError(source, "is a directory, expected a config file")
    elif os.path.exists(source):
        name = source
        try:
            size = os.path.getsize(source)
            if size > MAX_CONFIG_BYTES:
                raise ConfigLoadError(source, f"file is {size} bytes, over the {MAX_CONFIG_BYTES}-byte limit for a config")
            with open(source, "rb") as fh:
                raw = fh.read(MAX_CONFIG_BYTES + 1)
        except OSError as e:
            raise ConfigLoadError(source, f"cannot read: {e.strerror or e}")
    else:
        # DeepSpeed tries any non-path string as base64 of a JSON/HJSON document.
        try:
            raw = base64.urlsafe_b64decode(source.encode("ascii"))
            text = raw.decode("utf-8")
        except (binascii.Error, UnicodeError, ValueError):
            raise ConfigLoadError(source, "no such file (and not a base64-encoded config either)")
        if not text.lstrip().startswith("{"):
            raise ConfigLoadError(source, "no such file (and not a base64-encoded config either)")
        return parse_text(text, "<base64>")
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigLoadError(name, f"over the {MAX_CONFIG_BYTES}-byte limit for a config")
    return parse_text(_decode_bytes(raw, name), name)
