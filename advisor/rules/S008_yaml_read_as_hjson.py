"""S008 yaml-read-as-hjson: the config is YAML, but DeepSpeed reads a config file as JSON/HJSON.

What DeepSpeed does (0.19.8): ``DeepSpeedConfig.__init__`` reads a config path with
``hjson.load`` (deepspeed/runtime/config.py l.443-444; a base64 string with ``hjson.loads``,
l.448), whatever the file's suffix; it has no YAML reader. HJSON takes a top-level object without
braces and unquoted keys and values, so a YAML file often loads without an error -- but not as
YAML means: an indented mapping under a key is not an object to HJSON, it is the key's quoteless
string value, running to the end of the line. ``zero_optimization:`` followed by ``  stage: 2``
is ``"zero_optimization": "stage: 2"``, and DeepSpeed then raises TypeError building the ZeRO
config (runtime/zero/config.py l.78, rule S003 names it).

ds-advisor reads a DeepSpeed config as DeepSpeed does (HJSON), so the other findings are about
what DeepSpeed would get. This rule says so once per file, when reading the same text as YAML
gives another value (a JSON file, or an HJSON file YAML cannot read, gets nothing), and names the
first top-level keys that differ.

Anti-pattern (``ds.yaml``)::

    train_batch_size: 8
    zero_optimization:
      stage: 2

Fix: write the DeepSpeed config as JSON (``{"train_batch_size": 8, "zero_optimization": {"stage": 2}}``),
or load the YAML yourself and pass the dict: ``deepspeed.initialize(config=yaml.safe_load(f))``.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, emit, register

#: How many differing top-level keys the message names.
NAMED_KEYS = 3


@register
class YamlReadAsHjson(Rule):
    code = "S008"
    name = "yaml-read-as-hjson"
    severity = "warning"

    def check(self, ctx: LintContext):
        text = ctx.loaded.text
        if not text or text.lstrip().startswith("{"):
            return  # braces: JSON / HJSON as written, which YAML reads the same or not at all
        from advisor.config.readers import parse_yaml
        from advisor.errors import AdvisorError
        try:
            as_yaml = parse_yaml(text, ctx.loaded.source)
        except AdvisorError:
            return  # not YAML: HJSON only
        data = ctx.loaded.data
        if not isinstance(as_yaml, dict) or as_yaml == data:
            return
        from advisor.config.validation import shown
        keys = [k for k in data if k not in as_yaml or as_yaml[k] != data[k]]
        keys += [k for k in as_yaml if k not in data]
        said = "; ".join(_differs(k, data, as_yaml, shown) for k in keys[:NAMED_KEYS])
        more = f" (and {len(keys) - NAMED_KEYS} more)" if len(keys) > NAMED_KEYS else ""
        yield emit("S008", "warning", "",
                   "this file is YAML, but DeepSpeed 0.19.8 reads a config file as JSON/HJSON, not YAML "
                   f"(deepspeed/runtime/config.py l.443-444: hjson.load), and it reads differently: {said}{more}; "
                   "the findings here are about "
                   "what DeepSpeed gets",
                   "write the config as JSON, or pass deepspeed.initialize the dict: config=yaml.safe_load(f)",
                   data={"keys": keys})


def _differs(key, data: dict, as_yaml: dict, shown) -> str:
    """How one top-level key reads to DeepSpeed (HJSON) and as YAML, with the reason where it is one of the two
    known ones: an indented mapping under a key (HJSON: the rest of the line as a string) or YAML 1.1's words for
    booleans (on/off/yes/no: strings to HJSON)."""
    if key not in data:
        return f"{key} is absent to DeepSpeed"
    if key not in as_yaml:
        return f"{key} is {shown(data[key])} to DeepSpeed and absent as YAML"
    y = as_yaml[key]
    why = (" (an indented mapping under a key is one string to HJSON)" if isinstance(y, dict) and isinstance(data[key], str)
           else " (YAML reads on/off/yes/no as booleans; HJSON as strings)" if isinstance(y, bool) and isinstance(data[key], str)
           else "")
    return f"{key} is {shown(data[key])} to DeepSpeed, {shown(y)} as YAML{why}"
