"""O006 optimizer-swap-buffer-count: too few optimizer swap buffers for NVMe offload.

What DeepSpeed does: with ZeRO-3 and ``offload_optimizer.device: "nvme"`` every optimizer step
swaps each sub-group in through a pool of ``offload_optimizer.buffer_count`` pinned buffers
(``swap_tensor/partitioned_optimizer_swapper.py`` ``swap_in_optimizer_state``). It asks for one
buffer per swapped tensor, the fp32 master plus each optimizer state tensor, plus one for the
gradients: ``required = 1 + #states + 1``. Adam/AdamW has two states (exp_avg, exp_avg_sq) and
needs 4 (the default); Adagrad and Lion need 3. With fewer buffers the pool returns None and the
step fails with a bare ``AssertionError`` (``assert pinned_buffers is not None``).

Each buffer holds the largest sub-group (``sub_group_size``-bound, fp32), so lowering
``buffer_count`` to save pinned memory does not work: lower ``sub_group_size`` instead.

Anti-pattern::

    "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme", "buffer_count": 2}

Fix::

    "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme", "buffer_count": 4},
    "sub_group_size": 100000000
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import zero_raw, zptr


@register
class OptimizerSwapBufferCount(Rule):
    code = "O006"
    reads_stage = True
    name = "optimizer-swap-buffer-count"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        ec = ctx.effective
        z = ec.zero
        if z.stage != 3 or z.offload_optimizer.device != "nvme":
            return
        from advisor.ledger.state import optimizer_states  # lazily: lint of other configs never loads the ledger

        opt = optimizer_states(ec)  # the ledger's fact (advisor.ledger.state.optimizer_states)
        if not opt.known:
            return  # client optimizer or other: number of states unknown
        n = len(opt.items)
        need = 2 + n
        b = zero_raw(ctx.raw).get("offload_optimizer")
        if z.offload_optimizer.buffer_count >= need or not isinstance(b, dict) or "buffer_count" not in b:
            return
        yield self.finding(zptr("offload_optimizer", "buffer_count"),
                           f"offload_optimizer.buffer_count {z.offload_optimizer.buffer_count} is too small for "
                           f"{ec.optimizer.type}: each swap needs {need} buffers (fp32 master + {n} state tensor(s) + "
                           "gradients); the first optimizer step fails an assertion",
                           f"set offload_optimizer.buffer_count to {need} (lower sub_group_size to save pinned memory)",
                           set=[f"zero_optimization.offload_optimizer.buffer_count={need}"])
