"""D003 unsupported-optimizer: an optimizer type DeepSpeed 0.19.8 cannot build.

What DeepSpeed does: ``optimizer.type`` is looked up case-insensitively among DeepSpeed's own
optimizers (adam, adamw, lamb, adagrad, lion, muon, muadam, muadamw, musgd), else *exactly* as a
``torch.optim`` class name (``engine.py`` ``_is_supported_optimizer``). Anything else fails
``deepspeed.initialize`` with ``AssertionError: <type> is not a supported DeepSpeed Optimizer``.

The 1-bit family (``OneBitAdam``, ``ZeroOneAdam`` (0/1 Adam), ``OneBitLamb``) was removed from
0.19.8 (no ``runtime/fp16/onebit`` module); in the releases that had it (up to 0.19.3), it was
also incompatible with ZeRO: the engine asserts ``not self.zero_optimization()`` ("0/1 Adam is not
compatible with ZeRO"), true for every stage >= 1 (V004 flags it at those releases). A
lower-case torch name (``"sgd"``) is not found either: torch classes are matched exactly.

Anti-pattern::

    "optimizer": {"type": "ZeroOneAdam", "params": {"lr": 1e-4}},
    "zero_optimization": {"stage": 3}

Fix: a supported optimizer (communication compression is not available in 0.19.8)::

    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}
"""

from __future__ import annotations

from advisor.config.versions import DEFAULT_RELEASE
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import DEEPSPEED_OPTIMIZERS, TORCH_OPTIMIZERS, is_auto, section

ONEBIT = {"onebitadam": "OneBitAdam", "zerooneadam": "ZeroOneAdam (0/1 Adam)", "onebitlamb": "OneBitLamb"}


@register
class UnsupportedOptimizer(Rule):
    code = "D003"
    reads_stage = True
    name = "unsupported-optimizer"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        t = section(ctx.raw, "optimizer").get("type")
        if not isinstance(t, str) or is_auto(t):
            return
        if t.lower() in DEEPSPEED_OPTIMIZERS or t in TORCH_OPTIMIZERS:
            return
        if ctx.release is not None and ctx.release.checked != DEFAULT_RELEASE:
            return  # another release's optimizer names: V003 judges them from that release's table
        stage = ctx.effective.zero.stage
        if t.lower() in ONEBIT:
            msg = (f"{ONEBIT[t.lower()]} was removed from DeepSpeed 0.19.8: deepspeed.initialize asserts "
                   f"'{t} is not a supported DeepSpeed Optimizer'")
            if stage >= 1:
                msg += f" (and 1-bit optimizers never supported ZeRO stage {stage})"
            fix = 'set optimizer.type to "AdamW" (or "Lamb" for LAMB)'
        else:
            case = [n for n in TORCH_OPTIMIZERS if n.lower() == t.lower()]
            msg = f"optimizer type {t!r} is neither a DeepSpeed optimizer nor a torch.optim class: deepspeed.initialize asserts"
            fix = f'set optimizer.type to "{case[0]}" (torch names are case-sensitive)' if case else \
                'use one of AdamW, Adam, Lamb, Adagrad, Lion, Muon or an exact torch.optim class name'
        yield self.finding("/optimizer/type", msg, fix)
