"""G007 hpz-under-tensor-parallel: ZeRO++ hpZ (``zero_hpz_partition_size`` > 1) with tensor parallelism.

What DeepSpeed does: ZeRO-3 with ``zero_hpz_partition_size`` h > 1 and no hpZ group of the script's own
(``deepspeed.zero.Init(zero_param_parallel_group=...)``; ``runtime/zero/partition_parameters.py`` l.1117-1120;
``runtime/zero/stage3.py`` l.267-273) builds its hpZ groups with ``utils/groups.py``
_create_zero_param_parallel_group, l.944-949: min(h, world) *consecutive global ranks*,
``range(i * h, (i + 1) * h)`` over ``dist.get_world_size()``, whatever the tensor-parallel group. In
DeepSpeed's (and Megatron's) rank order the tensor-parallel axis varies fastest
(``runtime/pipe/topology.py`` PipeModelDataParallelTopology l.244-248: axes pipe, data, model), so
every group of h > 1 consecutive ranks holds ranks of different tensor-parallel index: ranks 0 and 1
hold different TP shards of the same weight (q_proj's first and second half of the heads).

Each rank cuts its secondary partition out of its *own* gathered parameter at its rank in the hpZ group
(``partition_parameters.py`` _partition_param_sec l.1912-1936: ``secondary_start = secondary_partition_size
x rank_in_group`` of ``param.view(-1)``), and later all-gathers the secondary partitions over that group
(l.1572-1575: ``ds_process_group = self.zero_param_process_group``). Under tensor parallelism the gathered
weight is then pieced together from different ranks' shards -- neither rank's weight -- in every forward
after the first micro-step and in every backward (where hpZ gathers from the secondary copy). DeepSpeed
asserts nothing about it: training runs, on wrong weights, with no error.

Anti-pattern: ``--tensor-parallel 2`` with ``"zero_hpz_partition_size": 8`` at ZeRO-3.

Fix: drop ``zero_hpz_partition_size`` (1) under tensor parallelism. DeepSpeed 0.19.8 has no working way to
give hpZ a group of one tensor-parallel index: ``deepspeed.zero.Init(zero_param_parallel_group=...)`` is used
for the all-gather, but the group's size and this rank's place in it are read from ``utils/groups.py``'s
module global (``partition_parameters.py`` l.1126-1129, ``_get_zero_param_intra_parallel_group_world_size``
/ ``_rank_in_mygroup``), which only _create_zero_param_parallel_group sets (to the consecutive groups above),
and ``stage3.py`` l.267-273 builds those groups itself when that global is unset.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class HpzUnderTensorParallel(Rule):
    code = "G007"
    reads_stage = True
    name = "hpz-under-tensor-parallel"
    severity = "error"

    def check(self, ctx: LintContext):
        z = ctx.effective.zero
        h = z.zero_hpz_partition_size
        tp = getattr(ctx.cluster, "tensor_parallel", 1) or 1
        if z.stage != 3 or not h or h <= 1 or tp <= 1:
            return
        ws = ctx.world_size
        he = min(h, ws) if ws else h
        if he <= 1:
            return
        first = ", ".join(str(r) for r in range(min(he, 4))) + (", .." if he > 4 else "")
        yield self.finding("/zero_optimization/zero_hpz_partition_size",
                           f"zero_hpz_partition_size {h} under tensor parallelism {tp}: DeepSpeed builds the hpZ "
                           f"groups of {he} consecutive global ranks (utils/groups.py:_create_zero_param_parallel_group "
                           f"l.944-949), and the tensor-parallel rank varies fastest, so the group {{{first}}} holds "
                           f"different tensor-parallel shards; each rank's secondary partition is a slice of its own "
                           "shard (partition_parameters.py _partition_param_sec l.1930-1936) and the hpZ all-gather "
                           "(l.1572-1575) pieces a weight together from different shards: every forward after the first "
                           "micro-step and every backward computes with wrong weights, silently",
                           "set zero_hpz_partition_size to 1 under tensor parallelism (a zero_param_parallel_group given to "
                           "deepspeed.zero.Init does not help in DeepSpeed 0.19.8: the group's size and rank are read "
                           "from utils/groups.py's own hpZ group, partition_parameters.py l.1126-1129)",
                           hpz=h, tensor_parallel=tp)
