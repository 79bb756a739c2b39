"""The one escaping helper for everything the tool prints or writes.

Config keys come from the user's file, and hjson (like DeepSpeed) accepts lone surrogates
(``"\\ud800"``) and control characters in them. Python cannot encode a lone surrogate as
UTF-8, so any output carrying such a key would crash while being printed or written.

* :func:`escape_surrogates` turns each lone surrogate into the six characters ``\\udXXXX``
  (Python's ``backslashreplace``); every other character is kept. Every reporter's output
  passes through it (:func:`advisor.render.render`), as does every file written
  (:func:`advisor.files.write_atomic`), so text, JSON, SARIF, GitHub and HTML outputs never fail to
  encode. In JSON the six characters read as the escape of the same code point.
* :func:`safe_text` also shows control characters (ANSI escape sequences a key could carry)
  as ``\\xNN``: for text meant for a terminal. :func:`advisor.render.render` applies it to every
  uncoloured text report (which writes no control character of its own); with colour on, the
  reporters get escaped text from :meth:`advisor.findings.Finding.text` / ``shown_pointer`` and
  escape the notes they echo; GitHub annotations and HTML (``html._e``) apply it too. JSON and
  SARIF keep the key exact (the JSON encoder writes ``\\u00NN``).
"""

from __future__ import annotations

_UNSAFE = {c: f"\\x{c:02x}" for c in list(range(0, 32)) + [127] if c not in (9, 10)}


def escape_surrogates(text: str) -> str:
    """``text`` with every lone surrogate written as ``\\udXXXX`` (encodable as UTF-8)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def safe_text(text: str) -> str:
    """Text safe to print on any terminal: control characters (except tab and newline) as
    ``\\xNN`` and lone surrogates as ``\\udXXXX``."""
    return escape_surrogates(text.translate(_UNSAFE))

