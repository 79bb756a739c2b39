"""H011 hf-config-not-json: the HF Trainer cannot read a config file that is HJSON, not JSON.

DeepSpeed reads its config with hjson (deepspeed/runtime/config.py ``DeepSpeedConfig.__init__``
l.444 ``hjson.load``, l.448 ``hjson.loads`` for base64), so comments, a trailing comma before ``}`` or ``]`` and unquoted keys load. The
HF Trainer does not hand DeepSpeed the file: ``TrainingArguments.__post_init__`` builds
``HfTrainerDeepSpeedConfig(self.deepspeed)`` (transformers 5.25.0 training_args.py l.1710), whose
base ``HfDeepSpeedConfig`` (transformers/integrations/deepspeed.py l.62-84) is accelerate's
``HfDeepSpeedConfig`` (accelerate 1.16.0 accelerate/utils/deepspeed.py l.136-143): for a path
that exists it runs ``json.load(f)``, Python's strict JSON, and a base64 string or inline text
goes through ``json.loads`` (l.146-152). Anything past strict JSON raises ``JSONDecodeError``
(or "Expected a string path to an existing deepspeed config" for base64/inline text) when
``TrainingArguments`` is built, before a model loads. Reported under ``--hf`` only (plain lint:
DeepSpeed's own reading, HJSON, holds), at the line and column json.load names, with its words.
An accelerate ``deepspeed_config_file`` goes through the same ``json.load``: that file is read
strictly where the accelerate YAML is read, and a failure is a load error there.

Anti-pattern (``--deepspeed ds.json``)::

    {
      "zero_optimization": {"stage": 2,},
    }

Fix: write strict JSON: no trailing commas, no comments, every key and string in double quotes.
"""

from __future__ import annotations

import json
from dataclasses import replace

from advisor.rules import LintContext, Rule, emit, register

#: What to change for json.load's messages (json/decoder.py, json/scanner): the HJSON-only forms.
_HINTS = (("Illegal trailing comma", "remove the comma before the closing bracket"),
          ("Expecting property name enclosed in double quotes", "put the key in double quotes (a trailing comma "
                                                                 "before '}' or a comment also stops here)"),
          ("Expecting value", "write a JSON value there: strings in double quotes, no comments, no trailing comma"))


@register
class HfConfigNotJson(Rule):
    code = "H011"
    name = "hf-config-not-json"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        """One error when ``ctx.hf`` and the config's text (``ctx.loaded.text``: the file, stdin
        or decoded base64 DeepSpeed's reader parsed; empty for a config built from an accelerate
        YAML) is not what ``json.loads`` reads, at json's own line and column."""
        text = ctx.loaded.text
        if not ctx.hf or not text:
            return []
        try:
            json.loads(text)
        except json.JSONDecodeError as e:
            fix = next((h for m, h in _HINTS if e.msg.startswith(m)), "write strict JSON")
            f = emit("H011", "error", "",
                     f"the HF Trainer reads the config with json.load, which stops at line {e.lineno} column "
                     f"{e.colno}: {e.msg} (accelerate/utils/deepspeed.py HfDeepSpeedConfig.__init__ raises "
                     "JSONDecodeError; DeepSpeed alone reads HJSON, so plain lint accepts it)",
                     f"{fix}: the file must be strict JSON for TrainingArguments(deepspeed=...)",
                     data={"json_error": e.msg, "line": e.lineno, "column": e.colno})
            return [replace(f, line=e.lineno, column=e.colno)]
        except ValueError:  # an int past Python's digit limit: DeepSpeed's own reading refused it already
            return []
        return []
