"""In-config suppression: a top-level ``"ds_advisor": {"ignore": [...]}`` section.

The section lives in the DeepSpeed config itself, so the suppression travels with the file
(as ``# noqa`` travels with a Python file). Why this form is safe: DeepSpeed 0.19.8 reads the
top level of its config as a plain dict and looks up only the keys it knows
(``deepspeed/runtime/config.py``: ``DeepSpeedConfig._initialize_params`` calls
``get_*(param_dict)`` helpers, each a ``param_dict.get(KEY, default)``), so an extra top-level
key is ignored without a warning; the strict (pydantic, ``extra="forbid"``) sections such as
``zero_optimization`` would refuse it, which is why the key is top-level only. The HF Trainer's
``HfDeepSpeedConfig`` / ``HfTrainerDeepSpeedConfig`` (transformers/integrations/deepspeed.py)
keep the dict as given and pass it on. ``tests/test_suppress.py`` constructs both objects with
the section to prove it.

Entries are rule codes or rule names (``"B001"``, ``"batch-triple"``), as ``--ignore`` takes
them, which suppress every finding of that rule; or ``"RULE:KEY"`` (``"S002:log"``,
``"ignored-key:zero_optimization.foo"``, ``"S002:/a.b/c"``), which suppresses that rule's
findings about one key: KEY is a dotted path of keys (DeepSpeed's own way of naming one, as
the messages print it) or, for a key with a dot in its name, a JSON pointer starting with ``/``;
the finding's pointer is that key or lies inside it. The entry is still a string in a list, so
DeepSpeed tolerates it exactly as it tolerates the whole-rule form. A section that is not an
object, a key other than ``ignore``, an entry that is not a string, names no rule or no key is
itself an S007 finding (and suppresses nothing); so is a string in place of the list (read as
one entry) and a ``"RULE:KEY"`` whose KEY is not in the config (a typo suppresses nothing).
"""

from __future__ import annotations

import difflib
import functools
import json
from dataclasses import dataclass, field
from typing import Any, Iterable

from advisor.findings import Finding, pointer, resolves
from advisor.rules import all_rules, emit, find_rule

#: The top-level key of the suppression section (DeepSpeed ignores unknown top-level keys).
SUPPRESS_KEY = "ds_advisor"
#: The keys the section may hold.
SECTION_KEYS = ("ignore",)
#: Unknown entries per section that get a did-you-mean suggestion (difflib over every rule's
#: code and name, ~0.5 ms each: 200k unknown entries took 32 s, issue 21); later ones get the
#: plain "names no rule" message. The output groups repeated S007 findings anyway.
MAX_NEAR_SUGGESTIONS = 64


@functools.lru_cache(maxsize=256)
def _near(name: str) -> str:
    """"; did you mean X?" for an unknown rule name, or "" (difflib over every rule's code and
    name: the costly part of an unknown entry, so cached for repeated names)."""
    rules = all_rules()
    cands = list(rules) + [r.name for r in rules.values()]
    near = difflib.get_close_matches(name.upper() if name[:1].isalpha() and name[1:].isdigit() else name.lower(),
                                     cands, n=2)
    return f"; did you mean {' or '.join(near)}?" if near else ""


@dataclass(frozen=True)
class Suppressions:
    """What a config's ``ds_advisor.ignore`` suppresses: whole rules (``codes``) and single keys
    (``keys``: (rule code, JSON pointer of the key))."""

    codes: frozenset[str] = frozenset()
    keys: frozenset[tuple[str, str]] = field(default_factory=frozenset)

    def hides(self, f: Finding) -> bool:
        """Whether finding ``f`` is suppressed: its rule is, or its pointer is a suppressed key
        of its rule or lies inside one. Looks up the pointer and each of its ancestors in a set,
        so the cost is O(depth of the pointer), not O(entries) (issue 21: 20k "S002:xN" entries
        took 30 s as a scan per finding)."""
        if f.code in self.codes:
            return True
        if not self.keys:
            return False
        p = f.pointer
        while p:
            if (f.code, p) in self.keys:
                return True
            p = p[:p.rfind("/")] if "/" in p else ""
        return False


def _key_pointer(key: str) -> str | None:
    """KEY of a ``"RULE:KEY"`` entry as a JSON pointer: a pointer as given (``/a.b/c``), else
    the dotted path's keys (``zero_optimization.foo`` -> ``/zero_optimization/foo``). None when
    it names no key."""
    key = key.strip()
    if key.startswith("/"):
        return key if len(key) > 1 else None
    parts = key.split(".")
    return pointer(*parts) if key and all(parts) else None


def config_suppressions(raw: Any) -> tuple[Suppressions, list[Finding]]:
    """(what the config's ``ds_advisor.ignore`` suppresses, S007 findings about the section
    itself) for a loaded config's top-level object ``raw``; nothing without a section."""
    none = Suppressions()
    if not isinstance(raw, dict) or SUPPRESS_KEY not in raw:
        return none, []
    sec = raw[SUPPRESS_KEY]
    base = pointer(SUPPRESS_KEY)
    if not isinstance(sec, dict):
        return none, [emit("S007", "warning", base,
                            f"{SUPPRESS_KEY} must be an object like {{\"ignore\": [\"B001\"]}}, not "
                            f"{type(sec).__name__ if sec is not None else 'null'}: it suppresses nothing",
                            f'write "{SUPPRESS_KEY}": {{"ignore": ["CODE", ...]}}')]
    out: list[Finding] = []
    for k in sec:
        if k not in SECTION_KEYS:
            out.append(emit("S007", "warning", pointer(SUPPRESS_KEY, k),
                            f"unknown key '{k}' in {SUPPRESS_KEY}: only 'ignore' (a list of rule codes or names) "
                            "is read", f"remove '{k}'"))
    entries = sec.get("ignore", [])
    if isinstance(entries, str):  # "ignore": "B001" -- read as one entry, but not the documented form
        out.append(emit("S007", "warning", pointer(SUPPRESS_KEY, "ignore"),
                        f"{SUPPRESS_KEY}.ignore is a string, not a list: read as [{entries!r}]",
                        f'write "ignore": [{json.dumps(entries)}]'))
        entries = [entries]
    if not isinstance(entries, list):
        return none, out + [emit("S007", "warning", pointer(SUPPRESS_KEY, "ignore"),
                                  f"{SUPPRESS_KEY}.ignore must be a list of rule codes or names: it suppresses nothing",
                                  'write "ignore": ["B001", "batch-triple"]')]
    codes: set[str] = set()
    keys: set[tuple[str, str]] = set()
    unknown = 0
    for i, e in enumerate(entries):
        ptr = pointer(SUPPRESS_KEY, "ignore", i)
        key = None
        if isinstance(e, str) and ":" in e:  # "RULE:KEY": one key's findings of one rule
            e, _, key_text = e.partition(":")
            key = _key_pointer(key_text)
            if key is None:
                out.append(emit("S007", "warning", ptr,
                                f"{SUPPRESS_KEY}.ignore entry '{e}:{key_text}' names no key: it suppresses nothing",
                                f'write "{e}:section.key" (a dotted path) or "{e}:/section/key" (a JSON pointer)'))
                continue
        r = find_rule(e) if isinstance(e, str) else None
        if r is None:
            what = repr(e) if not isinstance(e, str) else f"'{e}'"
            unknown += 1
            near = isinstance(e, str) and e.strip() and unknown <= MAX_NEAR_SUGGESTIONS
            out.append(emit("S007", "warning", ptr,
                            f"{SUPPRESS_KEY}.ignore names no rule: {what} suppresses nothing"
                            + (_near(e.strip()) if near else ""),
                            "use a rule code or name from `ds-advisor explain`"))
        elif key is not None:
            keys.add((r.code, key))
            if not resolves(raw, key):
                out.append(emit("S007", "warning", ptr,
                                f"{SUPPRESS_KEY}.ignore entry '{e}:{key_text}': this config has no key "
                                f"{key_text.strip()} (a typo?), so it suppresses nothing about a key written here",
                                "name a key of this config, as the finding's message prints it"))
        else:
            codes.add(r.code)
    return Suppressions(frozenset(codes), frozenset(keys)), out


def apply_suppressions(findings: Iterable[Finding], raw: Any) -> list[Finding]:
    """``findings`` without those the config's ``ds_advisor.ignore`` suppresses (whole rules,
    or one rule's findings about one key), plus the S007 findings about the section (unless
    S007 itself is suppressed)."""
    sup, problems = config_suppressions(raw)
    return [f for f in list(findings) + problems if not sup.hides(f)]
