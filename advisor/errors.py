"""Exceptions and the documented exit codes.

Exit codes (all commands):
    0  OK: no finding at or above --fail-on (check: go)
    1  findings at or above --fail-on (check: no-go, will not fit)
    2  bad usage or unreadable input (file missing, not JSON/HJSON, duplicate keys, ...)
    3  check --strict only: the environment could not be probed
    4  check only: tight (a tier fits only inside the runtime overhead's uncertainty; rule M102);
       ``check --allow-tight`` makes it a warning with exit 0
    5  measure only: the engine run did not finish within ``--timeout`` (its processes were ended;
       one line on stderr)
  130  interrupted (Ctrl-C, SIGINT): one line on stderr, 128 + SIGINT as a shell reports a process
       the signal ended; a file being written is not left behind (advisor.files.write_atomic)
"""

from __future__ import annotations

#: User input (a key, an argument, a file's content) is echoed in messages at most this long.
MAX_ECHO_CHARS = 60
#: A path naming the file a message is about is echoed whole up to this length (every real path
#: is shorter; the file's name is at its end, which a cut at 60 would lose), then cut.
MAX_PATH_ECHO_CHARS = 400


def cut(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """``text`` as echoed in a message: at most ``limit`` characters (default
    :data:`MAX_ECHO_CHARS`), then how many there were. The one helper for every echo of user
    input (an argument, a base64 config, a file's content, a probe's output), which can be
    megabytes. Here, at the bottom layer, so compute packages use it without importing render."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


#: A number as printed (plain digits, or digits grouped in threes by commas as ``f"{n:,}"`` writes
#: them) longer than :data:`MAX_ECHO_CHARS`: no figure the tool computes is (bytes up to 10^21 are
#: 29 characters with separators), so it echoes a user's value (a 4,000-digit bucket size).
_LONG_NUMBER = None


def _long_number():
    import re
    global _LONG_NUMBER
    if _LONG_NUMBER is None:
        n = MAX_ECHO_CHARS + 1
        _LONG_NUMBER = re.compile(r"(?<![\d,])(?:\d{1,3}(?:,\d{3}){%d,}|\d{%d,})(?![\d])" % (n // 4, n))
    return _LONG_NUMBER


def cut_numbers(text: str) -> str:
    """``text`` with every number printed longer than :data:`MAX_ECHO_CHARS` characters cut by
    :func:`cut` (its first 60 characters, then how many it had). A config value of thousands of
    digits (a JSON integer may have 4,300) is echoed by findings' messages and fixes, ``--explain``'s
    formulas and the estimate/check text; every output passes through here once
    (:func:`advisor.render.render` for reports, ``cli._fail`` / ``cli._say`` for stderr), so no
    message prints one whole. Text without such a number is returned as is (one regex search)."""
    rx = _long_number()
    if rx.search(text) is None:
        return text

    def one(m) -> str:
        s = m.group(0)
        return cut(s) if len(s) > MAX_ECHO_CHARS else s
    return rx.sub(one, text)


#: A word (a run without white space) is echoed at most this long: a tensor name of 100,000
#: characters from an inventory, echoed in a formula. Above :data:`MAX_PATH_ECHO_CHARS`, so a
#: ``path:line:column:`` a message starts with is never cut here.
MAX_WORD_ECHO_CHARS = 600
_LONG_WORD = None


def _long_word():
    import re
    global _LONG_WORD
    if _LONG_WORD is None:
        _LONG_WORD = re.compile(r"\S{%d,}" % (MAX_WORD_ECHO_CHARS + 1))
    return _LONG_WORD


def cut_echoes(text: str) -> str:
    """:func:`cut_numbers`, and every word (a run without white space) longer than
    :data:`MAX_WORD_ECHO_CHARS` cut by :func:`cut` at that length: a user's name (an inventory's
    tensor name of 100,000 characters, echoed in the ZeRO-3 reduce formula) in text and (through
    :func:`cut_numbers_in_json`) JSON/SARIF output. Not for HTML, whose markup may hold long words
    of its own, nor GitHub workflow commands, whose ``::error file=...,title=...::`` is one word."""
    text = cut_numbers(text)
    rx = _long_word()
    if rx.search(text) is None:
        return text
    return rx.sub(lambda m: cut(m.group(0), MAX_WORD_ECHO_CHARS), text)


def cut_numbers_in_json(text: str) -> str:
    """:func:`cut_echoes` for a JSON document: only inside its strings (messages, fixes,
    formulas), each decoded, cut and encoded again (an escape is never split); a JSON number keeps
    every digit (it is data, and a cut one would not parse)."""
    if _long_number().search(text) is None and _long_word().search(text) is None:
        return text
    import json
    import re

    def one(m) -> str:
        lit = m.group(0)
        s = json.loads(lit)
        c = cut_echoes(s)
        return lit if c == s else json.dumps(c)
    return re.sub(r'"(?:[^"\\]|\\.)*"', one, text)


def _max_int_digits() -> int:
    """The most digits Python's ``int()`` converts from text (``sys.get_int_max_str_digits()``,
    4,300 by default since 3.11; 0 means no limit, then this module uses the default)."""
    import sys
    return getattr(sys, "get_int_max_str_digits", lambda: 4300)() or 4300


def digits_problem(text: str) -> str | None:
    """The project's words for a whole number written with more digits than Python converts
    (``int("1" * 5000)`` raises "Exceeds the limit (4300 digits) for integer string conversion
    ...; use sys.set_int_max_str_digits()", advice meant for programmers), or None when ``text``
    is not such a number: "a whole number of 5,000 digits, more than the 4,300 digits any count
    is read with". No count ds-advisor takes comes near that many digits, so such a value is out
    of every range. One phrase for every reader: command-line options (``cli``), ``--set``
    values (config.overrides), config files (config.readers / config.loading) and
    ``--checkpointing`` layer counts (model.activations)."""
    t = text.strip() if isinstance(text, str) else ""
    digits = t[1:] if t[:1] in "+-" else t
    if not digits.isdigit() or len(digits) <= _max_int_digits():
        return None
    return f"a whole number of {len(digits):,} digits, more than the {_max_int_digits():,} digits any count is read with"


def int_limit_problem(error: BaseException) -> str | None:
    """:func:`digits_problem`'s words for Python's own digit-limit ValueError ``error`` (raised by
    ``int()`` inside a parser, e.g. ``json.loads`` of a 5,000-digit literal), or None for any other
    error."""
    import re
    m = re.search(r"Exceeds the limit \((\d+) digits\) for integer string conversion(?:: value has (\d+) digits)?",
                  str(error))
    if not m:
        return None
    n = f"{int(m.group(2)):,} digits" if m.group(2) else f"more than {int(m.group(1)):,} digits"
    return f"a whole number of {n}, more than the {int(m.group(1)):,} digits any count is read with"


EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_PROBE = 3
EXIT_TIGHT = 4
#: measure: the engine launch ran past ``--timeout`` and was ended (advisor.engine.measure.MeasureTimeout).
EXIT_TIMEOUT = 5
#: Ctrl-C (KeyboardInterrupt): 128 + SIGINT (2), the shell's code for a process SIGINT ended.
EXIT_INTERRUPTED = 130


class AdvisorError(Exception):
    """Base class: an input problem reported as one clear line, exit code 2."""

    exit_code = EXIT_USAGE


class ConfigLoadError(AdvisorError):
    """A config (or model / hardware spec) file cannot be read or parsed.

    ``str(err)`` is one line naming the file, the place and the problem.
    """

    def __init__(self, source: str, problem: str, line: int | None = None, column: int | None = None):
        self.source = source
        self.problem = problem
        self.line = line
        self.column = column
        where = cut(source, MAX_PATH_ECHO_CHARS) if isinstance(source, str) else source
        if line is not None:
            where += f":{line}"
            if column is not None:
                where += f":{column}"
        super().__init__(f"{where}: {problem}")



class NotAnObjectError(ConfigLoadError):
    """The file parses, but its top level is not a JSON object (an array, a string, a number):
    it cannot be a DeepSpeed config. A folder lint skips such a file; named alone it is bad input."""

class ModelSpecError(AdvisorError):
    """An unknown model preset, or an unreadable model spec / inventory file."""


class HardwareSpecError(AdvisorError):
    """An unknown hardware preset, or an unreadable hardware spec."""


class WorkLimitError(AdvisorError):
    """An input inside each separate limit whose combination passes a documented work limit
    (README "Inputs, limits and outputs"), refused before the work starts instead of running for
    minutes: exit 2, one line naming the limit and the figures that pass it."""


class NonFiniteOutputError(AdvisorError):
    """A JSON or SARIF output would hold a non-finite number (``NaN``, ``Infinity``), which JSON does
    not allow (RFC 8259 section 6) and strict parsers refuse: a figure derived from the inputs
    overflowed. Refused (exit 2, one line naming the field's JSON pointer) rather than printed as
    invalid JSON (``advisor.render.render``). The inputs' bounds (``validation.MIN_SECONDS`` ..
    ``MAX_SECONDS``, the hardware spec's ``HW_NUMBER_MIN .. MAX``) keep every figure finite; this
    is the backstop for one that is not."""


class PreflightError(AdvisorError):
    """``advisor.preflight`` found that the model and config will not fit on this device (or the
    config / an overhead value cannot be read). ``str(err)`` names each tier that does not fit,
    with need, free memory and headroom; ``err.result`` is the
    :class:`advisor.engine.preflight.PreflightResult` (None when the input could not be read)."""

    exit_code = EXIT_FINDINGS

    def __init__(self, message: str, result: object = None):
        super().__init__(message)
        self.result = result
