"""G004 ep-size-divides-dp: MoE ``ep_size`` that does not divide the data-parallel size.

What DeepSpeed does (``utils/groups.py:_create_expert_and_data_parallel``, from
``moe/layer.py:MoE`` l.93-97): expert-parallel groups of ep_size consecutive ranks are carved out
of each pipeline stage's ranks, asserting ``_ensure_divisibility(world_size // pp_size, ep_size)``
(l.416-417): "{n} is not divisible by {ep_size}". A stage's ranks are DP x SP x TP, so under tensor
parallelism ep_size need not divide the data-parallel size (TP 2, ep 4 on 2 data-parallel ranks
runs); the expert-data-parallel group (over which ZeRO partitions the expert parameters) has
DP x SP x TP / ep_size ranks (``advisor.plan.Cluster.expert_data_parallel_size``). ``MoE`` also
asserts ``num_experts % ep_size == 0`` ("Number of experts ({num_experts}) should be divisible by
expert parallel size ({ep_size})", ``moe/layer.py:MoE.__init__``).

Anti-pattern: ``--expert-parallel 3`` with 8 data-parallel ranks and no tensor parallelism.

Fix: an ep_size that divides both a pipeline stage's ranks (DP x SP x TP) and the number of experts.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class EpSizeDividesDp(Rule):
    code = "G004"
    name = "ep-size-divides-dp"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        cl = ctx.cluster
        ep = getattr(cl, "expert_parallel", 1) or 1
        if ep <= 1:
            return
        w = cl.zero_world_size
        tp = max(1, cl.tensor_parallel)
        if not cl.expert_data_parallel_size:
            where = f"the data-parallel size {w}" if tp == 1 else f"a pipeline stage's {w * tp} ranks (DP x SP {w} x TP {tp})"
            yield self.finding("", f"ep_size {ep} does not divide {where}: DeepSpeed asserts "
                                   f"\"{w * tp} is not divisible by {ep}\" (utils/groups.py:_create_expert_and_data_parallel)",
                               "choose --expert-parallel (MoE ep_size) dividing a pipeline stage's ranks (DP x SP x TP)",
                               ep_size=ep, dp=w, tp=tp)
        e = (ctx.inventory.meta or {}).get("num_experts") if ctx.inventory is not None else None
        if e and e % ep:
            yield self.finding("", f"ep_size {ep} does not divide the {e} experts: DeepSpeed asserts \"Number of experts "
                                   f"({e}) should be divisible by expert parallel size ({ep})\" (moe/layer.py:MoE.__init__)",
                               "choose an ep_size that divides the number of experts", ep_size=ep, experts=e)
