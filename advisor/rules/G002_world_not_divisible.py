"""G002 world-not-divisible: the world size is not a multiple of TP x PP x SP.

What DeepSpeed does (``utils/groups.py``): every process-group constructor checks
``_ensure_divisibility(numerator, denominator)``, which asserts
``'{} is not divisible by {}'``: the tensor-parallel groups (``_init_tp_groups_with_new_group``:
world_size by tensor_model_parallel_size), the expert groups (``_create_expert_and_data_parallel``:
world_size / pp_size by ep_size) and DeepSpeed-Ulysses (``runtime/config.py``: the data-parallel
world size is world_size / ``sequence_parallel_size``, which must be whole for the batch
assertion ``train_batch_size == micro_batch * grad_acc * world_size``). A world size that the
model-parallel degrees do not divide leaves ranks without a group. With no tensor-parallel size given, the
config's own AutoTP size (``tensor_parallel.autotp_size`` > 1,
``EffectiveConfig.autotp_size`` in advisor/config/effective.py) is the TP: the engine builds a (world / autotp_size,
autotp_size) DeviceMesh (``runtime/engine.py`` l.958 -> ``utils/groups.py`` _init_tp_mesh_device l.212-220), or
under TORCH_DISTRIBUTED_DEBUG=DETAIL asserts ``_ensure_divisibility(world_size, tensor_model_parallel_size)``
(``_init_tp_groups_with_new_group`` l.166); the finding is then at ``/tensor_parallel/autotp_size``.

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
        autotp = ctx.effective.autotp_size if ctx.effective is not None and ctx.effective.autotp else 0
        if tp <= 1 and autotp:
            tp = autotp
            if ws % autotp or not ptr:
                ptr = "/tensor_parallel/autotp_size"
        n = tp * pp * sp
        if n > 1 and ws % n:
            yield self.finding(ptr, f"world size {ws} ({ctx.world_size_source or 'given'}) is not divisible by "
                                    f"tensor x pipeline x sequence parallel = {tp} x {pp} x {sp} = {n}: DeepSpeed "
                                    f"asserts \"{ws} is not divisible by {n}\" (utils/groups.py:_ensure_divisibility)",
                               f"use a world size that is a multiple of {n}, or change the parallel sizes",
                               world_size=ws, model_parallel=n)
