"""A002 auto-in-validated-section: "auto" inside a section DeepSpeed validates.

What DeepSpeed does: the pydantic-validated sections (``zero_optimization`` with its
``offload_param``/``offload_optimizer`` blocks, ``fp16``, ``bf16``, the monitors,
``comms_logger``, ``compile``, ...) derive from ``DeepSpeedConfigModel``, whose ``__init__``
(``runtime/config_utils.py``) silently *drops* every value equal to "auto", so the field's
default applies. Nothing is logged. Examples in 0.19.8:

* ``"bf16": {"enabled": "auto"}`` -> false: bf16 is **off**, training runs in fp32 (twice the
  memory of what the user planned) or in fp16 if that is on;
* ``"reduce_bucket_size": "auto"`` -> 500000000 elements: a 1 GB fp16/bf16 gradient bucket, two
  with ``overlap_comm``, whatever the model size;
* ``"stage": "auto"`` -> 0: ZeRO is off;
* ``"stage3_prefetch_bucket_size": "auto"`` -> 50000000, ``"stage3_param_persistence_threshold":
  "auto"`` -> 100000 (the HF Trainer would size both from the model's hidden size).

Not reported with ``--hf``: the HF Trainer fills the values in before DeepSpeed sees them.

Before 0.17.1 (``--deepspeed-version``) ``fp16`` and ``bf16`` are plain dicts
(``runtime/config.py`` ``get_fp16_enabled``/``get_bfloat16_enabled`` return
``get_scalar_param(...)``, the value as written): ``"enabled": "auto"`` is the truthy string, so
the precision is **on**, and the finding says so for that release.

Anti-pattern (plain ``deepspeed.initialize`` loop)::

    "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}

Fix: write the values you want::

    "bf16": {"enabled": true}, "zero_optimization": {"stage": 2, "reduce_bucket_size": 200000000}
"""

from __future__ import annotations

from advisor.config.defaults import OTHER_VALIDATED, VALIDATED
from advisor.config.versions import precision_auto_is_on
from advisor.findings import pointer
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import is_auto


def _show(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, str):
        return f'"{v}"'
    return str(v)


@register
class AutoInValidatedSection(Rule):
    code = "A002"
    name = "auto-in-validated-section"
    severity = "warning"

    def check(self, ctx: LintContext):
        if ctx.hf:
            return
        raw = ctx.raw
        stage = ctx.effective.zero.stage
        rel = ctx.release.checked if ctx.release is not None else None
        for table in VALIDATED:
            path = table.path
            sec = raw
            for p in path:
                sec = sec.get(p) if isinstance(sec, dict) else None
            if not isinstance(sec, dict):
                continue
            dotted = ".".join(path)
            for k, v in sec.items():
                if not is_auto(v):
                    continue
                setting = table.lookup(k)
                if setting is None:
                    continue  # unknown key: the schema's finding
                d = setting.value
                if path[0] in ("fp16", "bf16", "bfloat16") and rel is not None and precision_auto_is_on(rel):
                    yield self._plain_dict(dotted, k, rel)
                    continue
                if setting.field == "overlap_comm":
                    d, note = stage == 3, f"the default at stage {stage}"
                else:
                    note = setting.means or "the default"
                yield self.finding(pointer(*path, k),
                                   f'{dotted}.{k} "auto" is silently dropped outside the HF Trainer: DeepSpeed uses '
                                   f"{_show(d)} ({note})",
                                   f"set {dotted}.{k} to the value you want (e.g. {_show(d)} to keep DeepSpeed's choice), "
                                   "or lint with --hf if the HF Trainer launches this config", default=d)
        for s in OTHER_VALIDATED:
            sec = raw.get(s)
            if isinstance(sec, dict):
                for k, v in sec.items():
                    if is_auto(v):
                        yield self.finding(pointer(s, k), f'{s}.{k} "auto" is silently dropped outside the HF Trainer: '
                                                          "DeepSpeed uses the field's default",
                                           f"set {s}.{k} to a real value or remove it")

    def _plain_dict(self, dotted: str, k: str, rel: str):
        """Before 0.17.1 ``fp16``/``bf16`` are plain dicts (:data:`advisor.config.versions.BEHAVIOUR`
        ``precision-sections-validated``): the string "auto" is the value itself."""
        if k == "enabled":
            return self.finding(f"/{dotted}/enabled",
                                f'{dotted}.enabled "auto" is not dropped by DeepSpeed {rel}: it reads {dotted} as a plain '
                                f"dict (runtime/config.py get_scalar_param), so enabled is the string \"auto\", which "
                                f"is truthy: {dotted} is ON (0.17.1 and later drop it: off)",
                                f"set {dotted}.enabled to true or false, or lint with --hf if the HF Trainer launches "
                                "this config", default=True, release=rel)
        return self.finding(f"/{dotted}/{k}",
                            f'{dotted}.{k} "auto" is not dropped by DeepSpeed {rel}: it reads {dotted} as a plain dict '
                            f'(runtime/config.py get_scalar_param) and uses the string "auto" as the value',
                            f"set {dotted}.{k} to the value you want, or lint with --hf if the HF Trainer launches this "
                            "config", release=rel)
