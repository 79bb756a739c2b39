"""The one guarded reader for every file the tool reads.

The DeepSpeed CONFIG, the settings file (``.ds-advisor.toml`` / ``pyproject.toml``), a checkpoint's
``latest``, ``--model`` (HF ``config.json``, inventory or model-spec JSON),
``--hardware`` JSON, an accelerate config YAML and its ``deepspeed_config_file`` all come
through :func:`read_bytes` / :func:`read_text` and then :func:`parse_json` or
:func:`parse_yaml`. The guards, the same for every file:

* only a regular file (or ``-``, standard input) is read: a FIFO, a character or block device
  (``/dev/zero``), a socket or a directory is refused from ``stat`` before it is opened, and
  the file is opened with ``O_NONBLOCK`` and checked again with ``fstat`` (so a file swapped
  for a FIFO in between cannot block the run);
* at most ``limit + 1`` bytes are read: a larger input is refused with its size, never cut
  short silently (a cut YAML or JSON would lose its later keys);
* nesting deeper than :data:`MAX_DEPTH` is refused before parsing;
* JSON numbers must be finite: ``NaN``, ``Infinity`` and literals that overflow a float
  (``1e999``) are refused at input, so no JSON or SARIF output can ever carry them;
* YAML is loaded with PyYAML's safe loader, and alias expansion is bounded: the document's
  node graph is composed first (linear in the text), the size it would have once every alias is
  expanded is counted (memoised, so linear in the graph), and a document over
  :data:`MAX_YAML_NODES` nodes, or one whose aliases form a cycle, is refused before any
  Python object is built;
* every parser error is one line, ``file:line:column: problem`` (:class:`ConfigLoadError`).

Callers choose the exception class their layer documents (``ModelSpecError`` for a model file,
``HardwareSpecError`` for a hardware spec) with ``error=``; the message is the same.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import itertools
import json
import math
import os
import stat
import sys
from typing import Any, Callable, Iterator

from advisor.errors import AdvisorError, ConfigLoadError, int_limit_problem

#: Files larger than this are refused before parsing (a DeepSpeed config is a few KiB).
MAX_CONFIG_BYTES = 8 * 1024 * 1024
#: Model files (HF config.json, inventory JSON with one entry per tensor) may be larger.
MAX_MODEL_BYTES = 64 * 1024 * 1024
#: A hardware spec (a few KiB in practice).
MAX_HARDWARE_BYTES = 16 * 1024 * 1024
#: An accelerate config YAML (a few hundred bytes in practice).
MAX_YAML_BYTES = 8 * 1024 * 1024
#: Deeper nesting than this is refused (DeepSpeed configs nest 3-4 levels).
MAX_DEPTH = 64
#: Nodes a YAML document may have once every alias is expanded (an accelerate config has ~30).
MAX_YAML_NODES = 100_000

#: Builds the exception a caller raises: (source, problem, line, column) -> exception.
ErrorFactory = Callable[[str, str, "int | None", "int | None"], Exception]


def config_error(source: str, problem: str, line: int | None = None, column: int | None = None) -> Exception:
    """The default :data:`ErrorFactory`: a :class:`ConfigLoadError`."""
    return ConfigLoadError(source, problem, line, column)


def error_as(cls: type[AdvisorError]) -> ErrorFactory:
    """An :data:`ErrorFactory` raising ``cls`` (one-argument AdvisorError subclasses) with the
    same one-line ``file:line:column: problem`` message as :class:`ConfigLoadError`."""
    def make(source: str, problem: str, line: int | None = None, column: int | None = None) -> Exception:
        return cls(str(ConfigLoadError(source, problem, line, column)))
    return make


def _kind(mode: int) -> str | None:
    """A's/an's name for a file that is not regular (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def regular_file_at(path: str, *, what: str = "file", error: ErrorFactory = config_error) -> bool:
    """Whether a regular file is at ``path`` (symlinks followed), told from ``stat`` alone: nothing
    is opened, so a FIFO never blocks. True for a regular file; False when nothing is there (no such
    path, or a symlink to nothing); raises through ``error`` (one line naming ``path``, as
    :func:`read_bytes` words it) when something else is: a directory, a FIFO, a device such as
    ``/dev/zero`` (or a symlink to one), a socket, or a path that cannot be examined.

    The guarded replacement for ``os.path.isfile`` wherever an optional file is looked for (a
    workload sidecar, a ``--model`` folder's config.json, an accelerate YAML's
    ``deepspeed_config_file``): ``isfile``'s False skipped such a file silently (issue 21). A name
    longer than the file system allows (ENAMETOOLONG) is False too: nothing can be there."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:  # no file can have this name: none is there (a config named
            return False                   # with 250 characters has a sidecar name past NAME_MAX)
        raise error(path, f"cannot read {what}: {e.strerror or e}", None, None) from None
    kind = _kind(st.st_mode)
    if kind is not None:
        raise error(path, f"is {kind}, expected a {what} (a regular file)", None, None)
    return True


def read_bytes(path: str, *, limit: int, what: str = "file", error: ErrorFactory = config_error,
               stdin_ok: bool = True) -> bytes:
    """The bytes of ``path`` (``-``: standard input when ``stdin_ok``), at most ``limit`` of them.

    Raises (through ``error``) with one line naming ``path`` when it does not exist, is not a
    regular file (directory, FIFO, device, socket: refused from ``stat`` without opening it),
    cannot be read, or holds more than ``limit`` bytes (refused, never truncated). ``what``
    names the file in messages ("config", "hardware spec", ...).
    """
    if path == "-" and stdin_ok:
        raw = sys.stdin.buffer.read(limit + 1)
        if len(raw) > limit:
            raise error("<stdin>", f"over the {limit}-byte limit for a {what}", None, None)
        return raw
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(path, f"cannot read {what}: no such file", None, None) from None
    except OSError as e:
        raise error(path, f"cannot read {what}: {e.strerror or e}", None, None) from None
    kind = _kind(st.st_mode)
    if kind is not None:
        raise error(path, f"is {kind}, expected a {what} (a regular file)", None, None)
    if st.st_size > limit:
        raise error(path, f"{what} is {st.st_size} bytes, over the {limit}-byte limit", None, None)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise error(path, f"cannot read {what}: {e.strerror or e}", None, None) from None
    try:
        kind = _kind(os.fstat(fd).st_mode)
        if kind is not None:  # replaced between stat and open
            raise error(path, f"is {kind}, expected a {what} (a regular file)", None, None)
        chunks: list[bytes] = []
        n = 0
        while n <= limit:
            try:
                b = os.read(fd, min(1 << 20, limit + 1 - n))
            except BlockingIOError:
                raise error(path, f"would block; expected a {what} (a regular file)", None, None) from None
            except OSError as e:
                raise error(path, f"cannot read {what}: {e.strerror or e}", None, None) from None
            if not b:
                break
            chunks.append(b)
            n += len(b)
    finally:
        os.close(fd)
    if n > limit:
        raise error(path, f"{what} grew over the {limit}-byte limit while being read", None, None)
    return b"".join(chunks)


def decode_text(raw: bytes, source: str, *, what: str = "file", error: ErrorFactory = config_error,
                nul_ok: bool = False) -> str:
    """UTF-8 text of ``raw`` (a leading BOM is kept: the parsers decide). Raises through
    ``error`` on a NUL byte (a binary file) unless ``nul_ok``, and on invalid UTF-8, naming the
    offset."""
    if not nul_ok and b"\x00" in raw:
        raise error(source, f"binary file (contains NUL bytes), not a {what}", None, None)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(source, f"not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})", None, None) from None


def read_text(path: str, *, limit: int, what: str = "file", error: ErrorFactory = config_error,
              stdin_ok: bool = True) -> str:
    """:func:`read_bytes` then :func:`decode_text`."""
    raw = read_bytes(path, limit=limit, what=what, error=error, stdin_ok=stdin_ok)
    return decode_text(raw, "<stdin>" if path == "-" and stdin_ok else path, what=what, error=error)


#: Elements of a config array the schema sees one by one (``config.schema.reduce_arrays``); past them, each
#: distinct later element once.
ARRAY_HEAD = 64
#: Most distinct elements a config array may have past its first :data:`ARRAY_HEAD`: each is validated on its own
#: (a schema error and a finding apiece before they are folded), ~50 us and ~5 KB each -- 100,000 distinct
#: ``{"x": i}`` took 5.2 s CPU / 480 MB in lint, 300,000 16 s / 1.4 GB, and the 8 MiB config limit holds ~660,000
#: (issue 21 audit: "time and memory must not grow with config width"). No DeepSpeed 0.19.8 key takes an array of
#: more than a few elements (betas, the curriculum / compression lists name a few modules or steps), so 10,000 is
#: far past any real config: ~0.5 s there. Equal elements are one (a 2M-element ``[{}, ...]`` is 1 distinct).
MAX_ARRAY_DISTINCT = 10_000
#: ``json.dumps(v, sort_keys=True, default=str)``, with the encoder built once, not per element:
#: building it per call was most of the ~6 s reduce_arrays spent on a 2M-element array (issue 21).
_canonical = json.JSONEncoder(sort_keys=True, default=str).encode
_EMPTY_KEY = {dict: ("json", "{}"), list: ("json", "[]")}


def element_key(v: Any) -> tuple:
    """The key two equal array elements share (equal JSON: ``1`` and ``1.0`` differ, as their types do): the
    one grouping of ``config.schema.reduce_arrays`` and :func:`wide_array`."""
    t = type(v)
    if v is None or isinstance(v, (str, int, float, bool)):
        return (t.__name__, v)
    if not v and (t is dict or t is list):
        return _EMPTY_KEY[t]  # what the encoder would write, without calling it
    return ("json", _canonical(v))


def wide_array(data: Any, cap: int = MAX_ARRAY_DISTINCT) -> tuple[str, int] | None:
    """(JSON pointer, length) of the array in ``data`` where the distinct elements past each array's first
    :data:`ARRAY_HEAD` pass ``cap`` in all (one array of them, or many: 62 nested arrays of 10,000 each were
    validated in 7.5 s / 559 MB when the count was per array, review of 7ac57cc), else None. Walks what the
    schema would see (the head and one element of each distinct value, nested arrays likewise) and stops where
    the count passes ``cap``, so it costs one key per element of the arrays it reads and no more than the
    validation it guards."""
    stack: list[tuple[Any, str]] = [(data, "")]
    total = 0
    while stack:
        node, ptr = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, f"{ptr}/{str(k).replace('~', '~0').replace('/', '~1')}") for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{ptr}/{i}") for i, v in enumerate(node[:ARRAY_HEAD]))
            seen: set[tuple] = set()
            for i in range(ARRAY_HEAD, len(node)):
                key = element_key(node[i])
                if key not in seen:
                    seen.add(key)
                    total += 1
                    if total > cap:
                        return ptr or "/", len(node)
                    stack.append((node[i], f"{ptr}/{i}"))
    return None


def wide_array_problem(data: Any) -> tuple[str, str] | None:
    """(JSON pointer, one-line problem) for :func:`wide_array`'s array in a config ``data``, else None: the
    refusal every config reader raises (``loading.parse_text``, an accelerate ``deepspeed_config_file``)."""
    hit = wide_array(data)
    if hit is None:
        return None
    from advisor.errors import cut
    ptr, n = hit
    return ptr, (f"{cut(ptr)}: an array of {n:,} elements where the config's arrays pass {MAX_ARRAY_DISTINCT:,} "
                 f"distinct values in all (past each one's first {ARRAY_HEAD}): over the limit (each distinct value "
                 "is validated on its own; no DeepSpeed key takes such arrays)")


def depth_ok(text: str, max_depth: int = MAX_DEPTH) -> bool:
    """True when ``text`` never opens more than ``max_depth`` brackets (``{`` / ``[``) at once
    (brackets inside strings count too: a cheap, conservative pre-parse bound).

    The running depth is summed at C speed: the text's bytes less every byte but a bracket
    (``bytes.translate``), then ``itertools.accumulate`` over +1 / -1. A character loop in
    Python took ~1 s on a 48 MB inventory (issue 21)."""
    if text.count("{") + text.count("[") <= max_depth:
        return True  # cannot open more than there are
    brackets = text.encode("utf-8", "surrogatepass").translate(None, _NOT_BRACKETS)
    # Fast path: each pass deletes every innermost "[]" and then every "{}" (bytes.replace, C speed),
    # so it removes at least one level and at most two; brackets gone within max_depth // 2 passes
    # nest at most max_depth deep (a 1.9M-tensor inventory: 4 passes, not the 0.3 s sum below).
    b = brackets
    for _ in range(max_depth // 2):
        if not b:
            return True
        shorter = b.replace(b"[]", b"").replace(b"{}", b"")
        if len(shorter) == len(b):
            break  # unbalanced (brackets inside strings): the running depth decides
        b = shorter
    if not b:
        return True
    return max(itertools.accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0) <= max_depth


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"{}[]")
_BRACKET_STEP = {ord("{"): 1, ord("["): 1, ord("}"): -1, ord("]"): -1}


class LineIndex:
    """Offset -> (line, column), 1-based, in O(log lines) per lookup (a bisect over the
    offsets where lines start): mapping every key of a wide config stays linear."""

    def __init__(self, text: str):
        starts = [0]
        i = text.find("\n")
        while i >= 0:
            starts.append(i + 1)
            i = text.find("\n", i + 1)
        self._starts = starts

    def line_col(self, offset: int) -> tuple[int, int]:
        import bisect
        i = bisect.bisect_right(self._starts, offset) - 1
        return i + 1, offset - self._starts[i] + 1


def _finite_float(s: str) -> float:
    v = float(s)
    if not math.isfinite(v):
        raise _NonFinite(s)
    return v


class _NonFinite(ValueError):
    def __init__(self, literal: str):
        self.literal = literal
        super().__init__(literal)


def _refuse_constant(s: str) -> float:
    raise _NonFinite(s)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the block (then restore it as it was).

    Parsing a large JSON file, or building a million TensorSpecs from one, allocates millions of
    container objects, none in a cycle (refcounting frees them); each allocation burst otherwise
    triggers collections that walk every object built so far: 1.2 of the 1.55 s ``json.loads``
    of a 48 MB inventory took, and ~40% of building the inventory from it (issue 21)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class DuplicateKey(ValueError):
    """A key written twice in one JSON object: ``key``, the object's index in the order a parse closes
    objects (``closed``, 0 = the first object to close) and the repeat's index among its members (``member``)."""

    def __init__(self, key: str, closed: int = -1, member: int = -1):
        self.key, self.closed, self.member = key, closed, member
        super().__init__(key)


def repeated_member(pairs: "list[tuple[str, Any]]") -> int | None:
    """The index of the first member of an object's ``pairs`` whose key an earlier member already has,
    else None. The one duplicate-key test: DeepSpeed 0.19.8 reads its config with
    ``object_pairs_hook=dict_raise_error_on_duplicate_keys`` (deepspeed/runtime/config.py l.430, l.444;
    the hook, deepspeed/runtime/config_utils.py l.205-212, refuses any object whose dict is shorter than
    its pairs), and ``json.loads`` would otherwise keep the last value silently: an inventory
    ``{"tensors": [1.5M entries], "tensors": [1 entry]}`` was read as its one tensor."""
    seen: set[str] = set()
    for i, (k, _) in enumerate(pairs):
        if k in seen:
            return i
        seen.add(k)
    return None


def duplicate_key_problem(key: str) -> str:
    """The one-line words for a key written twice in one object (every reader of JSON or HJSON says it so)."""
    from advisor.errors import cut
    return f"duplicate key {cut(repr(key))}"


def unique_object_hook(then: "Callable[[dict], Any] | None" = None) -> "Callable[[list], Any]":
    """An ``object_pairs_hook`` for ``json.loads`` that raises :class:`DuplicateKey` on an object with a key
    written twice and otherwise returns its dict (or ``then(dict)``); it counts the objects it closes, so the
    error can be placed in the text (:func:`duplicate_key_position`)."""
    count = itertools.count()

    def hook(pairs: list) -> Any:
        k = next(count)
        d = dict(pairs)
        if len(d) != len(pairs):
            j = repeated_member(pairs)
            raise DuplicateKey(pairs[j][0], k, j)
        return d if then is None else then(d)
    return hook


#: A JSON string (a key where a colon follows it), or a brace: the tokens :func:`duplicate_key_position` reads.
_KEY_OR_BRACE = r'"(?:[^"\\]|\\.)*+"(?:[ \t\n\r]*+(:))?|[{}]'


def duplicate_key_position(text: str, dup: DuplicateKey) -> tuple[int | None, int | None]:
    """(line, column) of the repeated key ``dup`` names in ``text`` (the text its parse read), or (None, None).

    A repeat in the top-level object is found by :func:`_top_level_keys` (its lists of objects skipped at C
    speed: the 1.5M-entry list before a second ``"tensors"`` costs ~0.3 s); one inside a nested object by
    counting objects as they close up to the ``dup.closed``-th, one regex token at a time (cost up to that
    object only)."""
    import re
    top = _top_level_keys(text)
    if top is not None:
        seen: set[str] = set()
        for k, off in top:
            if k in seen and k == dup.key:
                return LineIndex(text).line_col(off)
            seen.add(k)
    stack: list[list[int]] = []
    closed = 0
    for m in re.compile(_KEY_OR_BRACE).finditer(text):
        c = text[m.start()]
        if c == "{":
            stack.append([])
        elif c == "}":
            if not stack:
                return None, None
            keys = stack.pop()
            if closed == dup.closed:
                return LineIndex(text).line_col(keys[dup.member]) if 0 <= dup.member < len(keys) else (None, None)
            closed += 1
        elif m.group(1) and stack:
            stack[-1].append(m.start())
    return None, None


def _top_level_members(text: str, skip_object_lists: bool = False):
    """Walk the members of the top-level JSON object ``text``: yield (key, key offset, value offset) for each, in
    order, then skip its value (by ``json``'s decoder; with ``skip_object_lists``, a list value of objects nested at
    most ``_REGEX_DEPTH`` deep by the regex of :func:`object_list_scan`, at C speed). The key is read by ``json``'s
    string scanner. Raises ValueError (or RecursionError) when ``text`` is not such an object, is empty (``{}``) or is
    malformed, whether at once or once walked that far; a caller that stops at a key reads no further. The one
    walk of :func:`_top_level_keys` and :func:`list_start_at`."""
    import re
    from json.decoder import scanstring
    ws = re.compile(r"[ \t\n\r]*")
    run = re.compile("(?:" + _OBJECT_ENTRY + ",)*+" + _OBJECT_ENTRY + r"\]") if skip_object_lists else None
    decoder = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)
    i = ws.match(text, 0).end()
    if text[i:i + 1] != "{":
        raise ValueError("not an object")
    i = ws.match(text, i + 1).end()
    while text[i:i + 1] == '"':
        at = i
        k, i = scanstring(text, i + 1)
        i = ws.match(text, i).end()
        if text[i:i + 1] != ":":
            raise ValueError("no colon")
        i = ws.match(text, i + 1).end()
        yield k, at, i
        m = run.match(text, i + 1) if run is not None and text[i:i + 1] == "[" else None
        i = m.end() if m is not None else decoder.raw_decode(text, i)[1]
        i = ws.match(text, i).end()
        if text[i:i + 1] == "}":
            return
        if text[i:i + 1] != ",":
            raise ValueError("no comma")
        i = ws.match(text, i + 1).end()
    raise ValueError("not a member")


def _top_level_keys(text: str) -> "list[tuple[str, int]] | None":
    """Every member key of the top-level JSON object ``text`` with its offset, in order; a list value of
    objects (nested at most ``_REGEX_DEPTH`` deep) is skipped by the regex of :func:`object_list_scan`,
    any other value by ``json``'s decoder (:func:`_top_level_members`). None when ``text`` is not such an object
    or is malformed."""
    try:
        return [(k, at) for k, at, _ in _top_level_members(text, skip_object_lists=True)]
    except (ValueError, RecursionError):
        return None


def list_length_at(text: str, key: str) -> int | None:
    """The length of the list at ``key`` of the JSON object ``text`` (its top level), counted
    by a parse that keeps no object: each object, as it closes, is replaced by one int (the
    length of its own ``key`` list, or -1), so memory stays the text and one list of ints.
    None when ``text`` is not an object with a list at ``key``, or is anything
    :func:`parse_json` would refuse (nesting, a non-finite number, invalid JSON): the full
    parse then says what is wrong.

    Lets a caller refuse a list over its limit before building its millions of objects: a
    64 MiB inventory of 4.8M ``{"shape": [1]}`` took 1.5 GB to parse before its tensor count
    was checked (issue 21). Raises :class:`DuplicateKey` when some object writes a key twice (``{"tensors":
    [1.5M entries], "tensors": [1]}`` counted 1, the last list, and was read: issue D6)."""
    if not text.lstrip().startswith("{") or not depth_ok(text):
        return None  # not an object: the parse's result would be the document's own value

    def closed(obj: dict) -> int:
        v = obj.get(key)
        return len(v) if type(v) is list else -1

    try:
        with gc_paused():
            n = json.loads(text, object_pairs_hook=unique_object_hook(closed), parse_constant=_refuse_constant,
                           parse_float=_finite_float)
    except DuplicateKey:
        raise  # a key written twice: the caller refuses it (which list json.loads would keep is no count)
    except (ValueError, RecursionError):  # JSONDecodeError, _NonFinite, digit limit
        return None
    return n if type(n) is int and n >= 0 else None


def list_start_at(text: str, key: str) -> int | None:
    """The offset of the ``[`` opening the list at ``key`` of the JSON object ``text`` (its top
    level), found without parsing that list: the top level's other values are skipped by ``json``'s
    own decoder, the key read by its string scanner (:func:`_top_level_members`). None when ``text`` is not an
    object with a list at ``key``, names ``key`` twice (``json.loads`` keeps the last, which this scan does not
    reach), or is malformed before the list: the full parse then says what is wrong."""
    try:
        for k, _, i in _top_level_members(text):
            if k == key:
                return None if text[i:i + 1] != "[" or text.find(json.dumps(key), i) >= 0 else i
    except (ValueError, RecursionError):  # malformed, non-finite, digit limit, deep: the full parse's to say
        return None
    return None


#: A JSON string (its quotes, escapes and content), and the whitespace JSON allows between tokens.
_JSON_STRING = r'"(?:[^"\\]++|\\.)*+"'
_JSON_WS = r"[ \t\n\r]"
#: How deep the regex of :func:`first_non_object_at` reads objects and arrays inside an entry.
_REGEX_DEPTH = 5


def _nested_object_pattern(depth: int) -> str:
    """A regex for a JSON object whose objects and arrays nest at most ``depth`` levels (itself
    the first): a tensor entry as written (``{"name": "w", "shape": [4096, 4096], "meta": {"tp":
    [0, 1]}}``), strings read whole (brackets in a name are text). Each level's pattern holds the
    one below; possessive repeats, so the match is linear in the text."""
    text_run = r'[^{}\[\]"]++'
    array = r'\[(?:' + text_run + "|" + _JSON_STRING + r')*+\]'
    obj = r'\{(?:' + text_run + "|" + _JSON_STRING + "|" + array + r')*+\}'
    for _ in range(depth - 1):
        array, obj = (r'\[(?:' + text_run + "|" + _JSON_STRING + "|" + array + "|" + obj + r')*+\]',
                      r'\{(?:' + text_run + "|" + _JSON_STRING + "|" + array + "|" + obj + r')*+\}')
    return obj


_OBJECT_ENTRY = _JSON_WS + "*+" + _nested_object_pattern(_REGEX_DEPTH) + _JSON_WS + "*+"
#: An object / array holding no bracket (strings already replaced by ``S``): the innermost groups.
_INNER_OBJECT = r"\{[^{}\[\]]*\}"
_INNER_ARRAY = r"\[[^{}\[\]]*\]"
#: How a JSON value that is not an object begins (then, in :func:`_streamed_object_scan`,
#: strings are ``S`` and inner arrays ``A``); anything else is malformed JSON, the parser's to say.
_VALUE_START = frozenset('["-0123456789tfn')


#: What a JSON value is, in the words of ``validation.json_kind``, told by the
#: character it begins with (in :func:`_streamed_object_scan`'s collapsed text, ``S`` a string, ``A`` an array).
_KIND_OF_START = {'"': "a string", "S": "a string", "[": "an array", "A": "an array", "t": "true", "f": "false",
                  "n": "null", **{c: "a number" for c in "-0123456789"}}


def first_non_object_at(text: str, key: str) -> int | None:
    """The index of the first entry of the list at ``key`` of the JSON object ``text`` (its top
    level) that is not an object; None when every entry is an object, or when the scan cannot be
    sure (no list at ``key``, the key written twice, JSON malformed where the scan looks): the full
    parse then says what is wrong. :func:`object_list_scan`'s first value."""
    return object_list_scan(text, key)[0]


def object_list_scan(text: str, key: str) -> tuple[int | None, int | None]:
    """:func:`object_list_scan_kind` without the kind: (I, N)."""
    return object_list_scan_kind(text, key)[:2]


def object_list_scan_kind(text: str, key: str) -> tuple[int | None, int | None, str | None]:
    """(the index of the first entry of the list at ``key`` of the JSON object ``text`` (its top
    level) that is not an object, the number of entries where every one is an object and the scan
    counted them): (I, None), (None, N), or (None, None) when every entry is an object but the scan
    did not count them, or when it cannot be sure (no list at ``key``, the key written twice, JSON
    malformed where the scan looks): the full parse then says what is wrong. The third value is what
    entry I is (``validation.json_kind``'s words: "a number", "an array", ...), read from its first character;
    None with no I.

    Read without building any entry, at C speed (``re``): one match over the run of objects the
    list begins with (:func:`_nested_object_pattern`, nested at most :data:`_REGEX_DEPTH` deep,
    strings read whole; ~0.4 s for 1.9M tensors, 34 MB; ~1 s for 2M with an object inside each,
    53 MB), and what follows it: ``]``
    (every entry an object), the start of another value (that entry is the first non-object; the
    objects before it are counted), or an object nested deeper, for which
    :func:`_streamed_object_scan` reads the list instead, window by window, and counts its entries.

    Lets a caller refuse a list whose entries cannot be what it needs (an inventory's tensors are
    objects) before parsing millions of them: ``{"tensors": [{"shape": [1]}, [], [], ...]}`` (22M
    ``[]`` after one object in 64 MiB) was parsed whole, 1.6 GB, before it was refused (issue 21;
    the scan before this one read the first entry only)."""
    import re
    i = list_start_at(text, key)
    if i is None:
        return None, None, None
    if re.compile(_JSON_WS + r"*+\]").match(text, i + 1):
        return None, 0, None  # an empty list
    run = re.compile("(?:" + _OBJECT_ENTRY + ",)*+").match(text, i + 1)
    p = run.end()
    if re.compile(_OBJECT_ENTRY + r"\]").match(text, p):
        return None, None, None  # the last entry, an object, and the list's end (not counted: one more pass)
    q = re.compile(_JSON_WS + "*+").match(text, p).end()
    c = text[q:q + 1]
    if c == "{":  # an object nested deeper than the regex reads (or malformed): read the list the slower way
        return _streamed_object_scan(text, i) if depth_ok(text) else (None, None, None)
    if c and c in _VALUE_START:
        return sum(1 for _ in re.compile(_OBJECT_ENTRY + ",").finditer(text, i + 1, p)), None, _KIND_OF_START[c]
    return None, None, None


#: Characters :func:`_streamed_object_scan` reads at a time (1 MiB; more where a string crosses its end).
_COLLAPSE_WINDOW = 1 << 20
#: The whitespace JSON allows between tokens, as a ``str.translate`` table deleting it.
_DELETE_WS = {ord(c): None for c in " \t\n\r"}


def _streamed_object_scan(text: str, i: int) -> tuple[int | None, int | None, str | None]:
    """:func:`object_list_scan_kind` for the list whose ``[`` is at offset ``i``, for any nesting
    (``text`` passed :func:`depth_ok`), read window by window (:data:`_COLLAPSE_WINDOW` characters,
    extended to the end of a string the window cuts), so memory is a window's, not the text's: in
    each window strings become ``S`` (a split at the quotes where it holds no backslash, else
    ``re.sub``) and whitespace goes (``str.translate``), then each pass replaces every innermost
    object by ``O`` and every innermost array by ``A`` until none is left; the entries before the
    first one that is not ``O`` are counted and dropped, and what an unfinished entry holds so far
    is carried into the next window, every run between its brackets squashed to ``x`` (at most
    2 x :data:`MAX_DEPTH` + 1 characters in valid JSON). A non-object entry in the first window
    costs that window; a list of 2,000,001 objects six deep (66 MB) ~3 s and ~0.2 GB, where collapsing
    the whole text at once took ~5.7 s and ~1 GB (re.sub's piece lists, ~15x the text; issue 21)."""
    import re
    scan = re.compile(r'(?:[^"]++|' + _JSON_STRING + r")*+")  # stops at a string the window cuts
    string = re.compile(_JSON_STRING)
    inner_object, inner_array = re.compile(_INNER_OBJECT), re.compile(_INNER_ARRAY)
    objects, squash = re.compile(r"(?:O,)*+"), re.compile(r"[^{}\[\]]++")
    n, pos, carry, count = len(text), i + 1, "", 0
    while pos < n:
        end = min(n, pos + max(1, _COLLAPSE_WINDOW))
        e = scan.match(text, pos, end).end()
        if e < end:  # a string crosses the window's end: read on to its end
            m = string.match(text, e)
            if m is None:
                return None, None, None  # an unterminated string: malformed
            e = m.end()
        chunk = text[pos:e]
        pos = e
        chunk = "S".join(chunk.split('"')[0::2]) if "\\" not in chunk else string.sub("S", chunk)
        s = carry + chunk.translate(_DELETE_WS)
        for _ in range(MAX_DEPTH + 2):
            t = inner_array.sub("A", inner_object.sub("O", s))
            if len(t) == len(s):
                break
            s = t
        p = objects.match(s).end()
        count += p // 2
        c = s[p:p + 1]
        if c == "O":
            if s[p + 1:p + 2] == "]":
                return None, count + 1, None  # the last entry, an object, and the list's end
            if p + 1 != len(s):
                return None, None, None  # malformed ("O{", "O}")
            carry = "O"  # a whole object whose comma (or the list's end) is in the next window
        elif c == "{":
            carry = squash.sub("x", s[p:])  # an unfinished entry: only its open brackets matter
            if len(carry) > 2 * MAX_DEPTH + 1:
                return None, None, None  # closers without openers: malformed
        elif c and (c in "AS" or c in _VALUE_START):
            return count, None, _KIND_OF_START[c]
        elif c:
            return None, None, None  # malformed here (",,", "]" after a comma)
        else:
            carry = ""
    return None, None, None  # the list never ends: malformed


def long_number_at(text: str) -> tuple[int | None, int | None]:
    """(line, column) of the first run of digits in ``text`` longer than Python converts
    (:func:`advisor.errors.digits_problem`), or (None, None): where a parser's digit-limit error is."""
    import re
    from advisor.errors import _max_int_digits
    m = re.search(r"\d{%d,}" % (_max_int_digits() + 1), text)
    return LineIndex(text).line_col(m.start()) if m else (None, None)


def parse_json(text: str, source: str, *, what: str = "JSON file", error: ErrorFactory = config_error) -> Any:
    """Strict JSON (``json.loads``) with the guards of this module: nesting bounded, numbers
    finite (``NaN``, ``Infinity``, ``1e999`` refused), a key written twice in one object refused
    (:func:`repeated_member`, as DeepSpeed refuses it in its config), every error one line with its position."""
    if not depth_ok(text):
        raise error(source, f"nesting deeper than {MAX_DEPTH} levels; not a {what}", None, None)
    try:
        with gc_paused():
            return json.loads(text, object_pairs_hook=unique_object_hook(), parse_constant=_refuse_constant,
                              parse_float=_finite_float)
    except DuplicateKey as e:
        raise error(source, duplicate_key_problem(e.key), *duplicate_key_position(text, e)) from None
    except _NonFinite as e:
        at = text.find(e.literal)
        line, col = LineIndex(text).line_col(at) if at >= 0 else (None, None)
        raise error(source, f"non-finite number {e.literal} (NaN and Infinity are refused)", line, col) from None
    except json.JSONDecodeError as e:
        raise error(source, f"not valid JSON: {e.msg}", e.lineno, e.colno) from None
    except RecursionError:
        raise error(source, "nesting too deep to parse", None, None) from None
    except ValueError as e:  # int literals over Python's digit limit
        too_long = int_limit_problem(e)
        if too_long:
            line, col = long_number_at(text)
            raise error(source, too_long, line, col) from None
        raise error(source, f"not valid JSON: {e}", None, None) from None


def non_finite_path(obj: Any, path: str = "") -> str | None:
    """JSON pointer of the first float in ``obj`` that is NaN or infinite, else None.

    A first pass (:func:`has_non_finite`) only looks; the pointers are built
    (:func:`_non_finite_pointer`) only when it finds such a value: building one pointer per
    element took ~5 s on a 2M-element array of ``{}`` (issue 21)."""
    if not has_non_finite(obj):
        return None
    return _non_finite_pointer(obj, path)


def has_non_finite(obj: Any) -> bool:
    """True when some float inside ``obj`` (dicts and lists, any depth) is NaN or infinite.
    Linear in the values, no strings built."""
    isfinite = math.isfinite
    stack = [obj]
    pop, push = stack.pop, stack.append
    while stack:
        o = pop()
        if isinstance(o, float):
            if not isfinite(o):
                return True
            continue
        if isinstance(o, dict):
            o = o.values()
        elif not isinstance(o, list):
            continue
        for v in o:
            t = type(v)
            if t is str or t is int or t is bool or v is None:
                continue  # the common scalars, skipped without a push
            if t is float:
                if not isfinite(v):
                    return True
            elif (t is dict or t is list) and not v:
                continue  # empty containers hold nothing
            else:
                push(v)
    return False


def _non_finite_pointer(obj: Any, path: str = "") -> str | None:
    """The pointer pass of :func:`non_finite_path` (the depth-first order it reports the first
    hit in)."""
    from advisor.findings import escape_token
    stack = [(obj, path)]
    while stack:
        o, p = stack.pop()
        if isinstance(o, float):
            if not math.isfinite(o):
                return p or "/"
        elif isinstance(o, dict):
            stack.extend((v, f"{p}/{escape_token(str(k))}") for k, v in o.items())
        elif isinstance(o, list):
            stack.extend((v, f"{p}/{i}") for i, v in enumerate(o))
    return None


def parse_yaml(text: str, source: str, *, what: str = "YAML file", error: ErrorFactory = config_error,
               max_nodes: int = MAX_YAML_NODES, positions: dict[str, tuple[int, int]] | None = None) -> Any:
    """One YAML document, loaded with PyYAML's ``SafeLoader`` (plain data only: no Python
    objects), with alias expansion bounded by ``max_nodes`` (see the module docstring).
    Raises through ``error``: one line with the problem's line and column. ``positions``, when
    given, is filled with JSON pointer -> (line, column), 1-based, of each mapping key (of each
    element for a sequence), from the nodes' start marks, as a JSON file's positions are."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - dependency
        raise error(source, f"reading a {what} needs PyYAML (pip install pyyaml)", None, None) from None
    if not depth_ok(text):
        raise error(source, f"nesting deeper than {MAX_DEPTH} levels; not a {what}", None, None)
    Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader = Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _bound_yaml(node, source, max_nodes, error)
        if positions is not None:
            _yaml_positions(node, positions)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = " ".join(x for x in (e.context, e.problem) if x) or "invalid YAML"
        raise error(source, f"not valid YAML: {problem}", mark.line + 1 if mark else None,
                    mark.column + 1 if mark else None) from None
    except yaml.YAMLError as e:
        raise error(source, f"not valid YAML: {' '.join(str(e).split())}", None, None) from None
    except RecursionError:
        raise error(source, "nesting too deep to parse", None, None) from None
    except (ValueError, TypeError, OverflowError) as e:  # a constructor's conversion (timestamps, ints)
        too_long = int_limit_problem(e)
        if too_long:  # valid YAML: an int past Python's digit limit gets the project's words, located
            line, col = long_number_at(text)
            raise error(source, too_long, line, col) from None
        raise error(source, f"not valid YAML: {e}", None, None) from None
    finally:
        loader.dispose()


def _yaml_positions(root: Any, out: dict[str, tuple[int, int]]) -> None:
    """JSON pointer -> (line, column) of every key of a composed (bounded) YAML node graph; an
    alias is visited once (its first path), so the walk is linear in the nodes."""
    import yaml

    seen: set[int] = set()
    stack = [(root, "")]
    while stack:
        node, ptr = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if not isinstance(k, yaml.ScalarNode):
                    continue
                p = ptr + "/" + str(k.value).replace("~", "~0").replace("/", "~1")
                out.setdefault(p, (k.start_mark.line + 1, k.start_mark.column + 1))
                stack.append((v, p))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                p = f"{ptr}/{i}"
                out.setdefault(p, (v.start_mark.line + 1, v.start_mark.column + 1))
                stack.append((v, p))


def _bound_yaml(root: Any, source: str, max_nodes: int, error: ErrorFactory) -> None:
    """Refuse a node graph whose alias-expanded size exceeds ``max_nodes`` or that has a cycle.
    Iterative post-order walk, each node's expanded size memoised by identity."""
    import yaml

    size: dict[int, int] = {}
    aliased = False
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            on_path.discard(nid)
            if isinstance(node, yaml.MappingNode):
                kids = [n for kv in node.value for n in kv]
            else:
                kids = node.value
            total = 1 + sum(size[id(k)] for k in kids)
            if total > max_nodes:
                m = node.start_mark
                how = "once its aliases are expanded" if aliased else "(its keys, values and items)"
                raise error(source, f"YAML document has more than {max_nodes:,} nodes {how}: over the node limit",
                            m.line + 1, m.column + 1)
            size[nid] = total
            continue
        if nid in size:
            aliased = True  # a node met twice: an alias
            continue
        if nid in on_path:
            m = node.start_mark
            raise error(source, "recursive YAML alias (a node contains itself)", m.line + 1, m.column + 1)
        if isinstance(node, yaml.ScalarNode):
            size[nid] = 1
            continue
        on_path.add(nid)
        stack.append((node, True))
        kids = [n for kv in node.value for n in kv] if isinstance(node, yaml.MappingNode) else node.value
        for k in kids:
            if id(k) in size:
                aliased = True
            else:
                if id(k) in on_path:
                    m = k.start_mark
                    raise error(source, "recursive YAML alias (a node contains itself)", m.line + 1, m.column + 1)
                stack.append((k, False))


def read_json_file(path: str, *, limit: int, what: str, error: ErrorFactory = config_error) -> Any:
    """:func:`read_text` then :func:`parse_json`: the guarded way to load any JSON file."""
    text = read_text(path, limit=limit, what=what, error=error)
    return parse_json(text, "<stdin>" if path == "-" else path, what=what, error=error)


__all__ = ["MAX_CONFIG_BYTES", "MAX_MODEL_BYTES", "MAX_HARDWARE_BYTES", "MAX_YAML_BYTES", "MAX_DEPTH",
           "MAX_YAML_NODES", "read_bytes", "read_text", "decode_text", "parse_json", "parse_yaml",
           "read_json_file", "list_length_at", "DuplicateKey", "repeated_member", "duplicate_key_problem",
           "unique_object_hook", "duplicate_key_position", "first_non_object_at", "object_list_scan_kind", "regular_file_at", "non_finite_path", "gc_paused", "LineIndex", "depth_ok", "error_as", "config_error"]
