"""P005 master-weights-need-zero: 16-bit master-weight flags without ZeRO.

What DeepSpeed does (``runtime/config.py`` ``_do_error_check``, at config construction):

* ``fp16.fp16_master_weights_and_grads`` and ``bf16.bf16_master_weights_and_grads`` are only
  supported with ZeRO stage 1, 2 or 3 (``AssertionError`` at stage 0);
* ``bf16.bf16_optimizer_states`` likewise, and it also requires
  ``bf16.bf16_master_weights_and_grads: true``.

The ``bf16`` flags exist from the release the version table names (0.18.9's
``DeepSpeedBF16Config``); at an earlier ``--deepspeed-version`` they are not flags of that release
(V001 reports them where ``bf16`` is strict, and a release that reads ``bf16`` as a plain dict
ignores them), so this rule is silent about them there.

These flags keep master weights (and optionally Adam moments) in 16 bits to save host memory
with ZeRO-Offload; without ZeRO they have no implementation.

Anti-pattern::

    "bf16": {"enabled": true, "bf16_optimizer_states": true},
    "zero_optimization": {"stage": 0}

Fix: use ZeRO (with CPU offload, where these flags are meant) and set both flags::

    "bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}
"""

from __future__ import annotations

from advisor.config.effective import _as_bool
from advisor.config.versions import before, table
from advisor.findings import pointer
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import section


@register
class MasterWeightsNeedZero(Rule):
    code = "P005"
    reads_stage = True
    name = "master-weights-need-zero"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        raw = ctx.raw
        stage = ctx.effective.zero.stage
        bkey = "bf16" if "bf16" in raw else "bfloat16"
        flags = [("fp16", "fp16_master_weights_and_grads"), (bkey, "bf16_master_weights_and_grads"),
                 (bkey, "bf16_optimizer_states")]
        rel = ctx.release.checked if ctx.release else None

        def in_release(sec: str, key: str) -> bool:
            row = table()["keys"].get(f"/bf16/{key}") if sec == bkey else None
            return rel is None or row is None or not before(rel, row["first"])

        for sec, key in flags:
            if _as_bool(section(raw, sec).get(key)) and stage == 0 and in_release(sec, key):
                yield self.finding(pointer(sec, key), f"{sec}.{key} is only supported with ZeRO stage 1, 2 or 3: "
                                                      "deepspeed.initialize asserts at stage 0",
                                   "set zero_optimization.stage to 1, 2 or 3 (with offload_optimizer cpu), "
                                   f"or remove {sec}.{key}")
        b = section(raw, bkey)
        if _as_bool(b.get("bf16_optimizer_states")) and not _as_bool(b.get("bf16_master_weights_and_grads")) \
                and in_release(bkey, "bf16_optimizer_states"):
            yield self.finding(pointer(bkey, "bf16_optimizer_states"),
                               "bf16_optimizer_states requires bf16_master_weights_and_grads: deepspeed.initialize asserts",
                               f"set {bkey}.bf16_master_weights_and_grads to true, or remove bf16_optimizer_states")
