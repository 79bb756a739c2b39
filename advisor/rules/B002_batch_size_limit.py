"""B002 batch-size-limit: a batch size over 2^40 sequences (train_batch_size, the micro-batch or
gradient accumulation).

What DeepSpeed does: 0.19.8 reads the three batch keys raw (``runtime/config.py``
``get_train_batch_size`` and friends, ``dict.get``) and its ``_batch_assertion`` only checks
them for being positive and consistent, so ``"train_micro_batch_size_per_gpu": 1e30`` passes
config parsing (verified on 0.19.8: ``DeepSpeedConfig`` keeps 1e+30). The job then fails later:
``deepspeed_io`` hands the micro-batch to torch's ``DataLoader``, whose ``BatchSampler`` raises
``ValueError: batch_size should be a positive integer value`` for a float, and an integral one
that large allocates activations no accelerator holds.

ds-advisor refuses to estimate such a config (an estimate of 10^30 sequences per rank is noise,
and with ``--params`` no activations are counted at all, so it would say "fits"). The limit,
2^40 (``advisor.config.validation.MAX_GLOBAL_BATCH``, also ``generate --global-batch``'s), is
ds-advisor's documented bound, not DeepSpeed's. Through ``--set`` the same value is a usage
error (exit 2) naming the argument.

Anti-pattern::

    "train_micro_batch_size_per_gpu": 1e30

Fix: the per-GPU micro-batch you train with, e.g. ``"train_micro_batch_size_per_gpu": 4``.
"""

from __future__ import annotations

from advisor.config.validation import batch_limit_problem
from advisor.rules import LintContext, Rule, register


@register
class BatchSizeLimit(Rule):
    code = "B002"
    name = "batch-size-limit"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        over = batch_limit_problem(ctx.raw)
        if over is not None:
            key, problem = over
            yield self.finding(f"/{key}", f"{problem}: DeepSpeed's data loader fails on it (or no accelerator "
                                          "holds its activations); no estimate is possible",
                               f"set {key} to the batch size you train with (e.g. 4)")
