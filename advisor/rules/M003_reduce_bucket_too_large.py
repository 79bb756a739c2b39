"""M003 reduce-bucket-too-large: reduce_bucket_size larger than the whole model's gradients.

What DeepSpeed does: with ``contiguous_gradients`` (default true) the gradient reduce ("ipg")
bucket is ``torch.empty(reduce_bucket_size)``, allocated at its full size whatever the model size
(``reduce_bucket_size`` counts *elements*):

* ZeRO-1/2 with ``contiguous_gradients`` (forced on with optimizer offload): at the start of
  every backward, RBS x B bytes, B = the model dtype's bytes (4 at stage 1 with
  ``grad_accum_dtype: fp32``), and a second bucket with ``overlap_comm: true``
  (``stage_1_and_2.py`` ``setup_buckets``);
* ZeRO-3 with ``contiguous_gradients``: RBS x (communication dtype bytes), allocated at
  initialize and kept for the whole run (``stage3.py`` ``DeepSpeedZeroOptimizer_Stage3.__init__``:
  ``if self.contiguous_gradients:`` ... ``bucket.buffer = torch.empty(self.reduce_bucket_size,
  ...)``, l.780 in 0.19.8).

With ``contiguous_gradients: false`` no bucket buffer is allocated (ZeRO-1/2 without offload,
ZeRO-3) and this rule says nothing.

With the default 5e8 that is 1 GB (2 GB with overlap_comm) of GPU memory. A bucket holding more
elements than the model has gradients never fills: the excess is pure waste, and is why users
see ZeRO-2 use more memory than ZeRO-1 on a BERT-sized model.

Anti-pattern (340M parameters, fp16)::

    "zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8, "overlap_comm": true}

costs 500,000,000 x 2 B x 2 = 2,000,000,000 bytes for 680,000,000 bytes of gradients. Fix: a
bucket no larger than the model (smaller buckets mean more, smaller reductions; 5e7-2e8 is
common)::

    "zero_optimization": {"stage": 2, "reduce_bucket_size": 2e8, "overlap_comm": true}
"""

from __future__ import annotations

from advisor.config.effective import DTYPE_BYTES
from advisor.rules import LintContext, Rule, register
from advisor.findings import literal
from advisor.rules._util import zptr


@register
class ReduceBucketTooLarge(Rule):
    code = "M003"
    reads_stage = True
    name = "reduce-bucket-too-large"
    severity = "warning"
    needs_model = True

    def check(self, ctx: LintContext):
        # imported here, not at module import: lint without a model never loads the ledger
        from advisor.rules._bytes import ipg_bucket_bytes, two_sig_floor
        ec = ctx.effective
        if ctx.inventory is None:
            return
        n = ctx.inventory.trainable_numel
        rbs = ec.zero.reduce_bucket_size
        if n <= 0 or rbs <= n:
            return
        b = ipg_bucket_bytes(ec)
        if b is None:
            return
        cost, words, _life = b
        per = cost // rbs
        grads = n * DTYPE_BYTES[ec.grad_dtype]
        suggest = two_sig_floor(n)
        yield self.finding(
            zptr("reduce_bucket_size"),
            f"reduce_bucket_size {rbs:,} elements exceeds the model's {n:,} gradient elements: the bucket costs "
            f"{{bucket_bytes:bytes}} of GPU memory ({literal(words)}), more than all the model's gradients "
            f"({{gradient_bytes:bytes}})",
            f"set zero_optimization.reduce_bucket_size to at most {suggest} ({suggest:,} elements), saving "
            f"{{saved_bytes:bytes}}",
            sizes=dict(bucket_bytes=cost, gradient_bytes=grads, saved_bytes=cost - suggest * per), bucket_bytes=cost, gradient_elements=n, set=[f"zero_optimization.reduce_bucket_size={suggest}"])
