"""G002 world-not-divisible: the world size is not a multiple of TP x PP x SP.

What DeepSpeed does (``utils/groups.py``): every process-group constructor checks
``_ensure_divisibility(numerator, denominator)``, which asserts
``'{} is not divisible by {}'``: the tensor-parallel groups (``_init_tp_groups_with_new_group``:
world_size by tensor_model_parallel_size), the expert groups (``_create_expert_and_data_parallel``:
world_size / pp_size by ep_size) and DeepSpeed-Ulysses (``runtime/config.py``: the data-parallel
world size is world_size / ``sequence_parallel_size``, which must be whole for the batch
assertion ``train_batch_size == micro_batch * grad_acc * world_size``). A world size that the
model-parallel degrees do not divide leaves ranks without a group.

Anti-pattern: ``"sequence_parallel_size": 3`` on 8 ranks.

Fix: choose tensor x pipeline x sequence-parallel sizes whose product divides the world size.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class WorldNotDivisible(Rule):
    code = "G002"
    name = "world-not-divisible"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        ws = ctx.world_size
        if not ws:
            return
        cl = ctx.cluster
        tp = getattr(cl, "tensor_parallel", 1) or 1
        pp = getattr(cl, "pipeline_parallel", 1) or 1
        sp = getattr(cl, "sequence_parallel", None)
        ptr = ""
        if sp is None or cl is None:
            from advisor.config.effective import config_sequence_parallel
            sp = config_sequence_parallel(ctx.raw)
            ptr = "/sequence_parallel_size" if sp > 1 else ""
        if not ptr and sp > 1:
            from advisor.config.effective import config_sequence_parallel
            ptr = "/sequence_parallel_size" if sp == config_sequence_parallel(ctx.raw) else ""
        n = tp * pp * sp
        if n > 1 and ws % n:
            yield self.finding(ptr, f"world size {ws} ({ctx.world_size_source or 'given'}) is not divisible by "
                                    f"tensor x pipeline x sequence parallel = {tp} x {pp} x {sp} = {n}: DeepSpeed "
                                    f"asserts \"{ws} is not divisible by {n}\" (utils/groups.py:_ensure_divisibility)",
                               f"use a world size that is a multiple of {n}, or change the parallel sizes",
                               world_size=ws, model_parallel=n)
