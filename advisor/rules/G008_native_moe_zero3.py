"""G008 native-moe-zero3: DeepSpeed's own MoE layer (``deepspeed.moe.layer.MoE``) at ZeRO stage 3.

What DeepSpeed 0.19.8 does: ``deepspeed.initialize`` marks the engine ``has_moe_layers`` when the model
holds a ``deepspeed.moe.layer.MoE`` (or an AutoEP ``AutoEPMoELayer``) module (``runtime/engine.py``
l.2101-2107), whatever its ``ep_size`` -- ep 1 included. At ZeRO-3 ``_configure_zero_optimizer``
calls ``_validate_zero3_moe_compatibility`` (l.2709-2710), which raises ``AssertionError("Native
DeepSpeed MoE is not supported with ZeRO Stage 3. Use AutoEP or choose ZeRO stage 1/2.")`` for any
native ``MoE`` module (l.2197-2216): the job stops inside ``deepspeed.initialize``.

When the advisor models DeepSpeed's MoE layer: ``--expert-parallel`` > 1 (DeepSpeed's ``ep_size``
exists only on ``deepspeed.moe.layer.MoE``) or ``--moe-capacity-factor`` (its fixed-capacity
dispatch, even at ep 1). transformers' own MoE blocks (e.g. ``MixtralSparseMoeBlock``, the advisor's
default: dropless routing, ep 1) are not ``MoE`` instances, so ``has_moe_layers`` stays False and ZeRO-3
runs them as dense modules: no finding.

AutoEP (``"expert_parallel": {"enabled": true, "autoep_size": N}``, ``module_inject/auto_ep_config.py``
parse_autoep_config l.48-49; ``EffectiveConfig.autoep_enabled`` in advisor/config/effective.py) replaces
transformers' MoE blocks by ``AutoEPMoELayer`` in ``_configure_expert_parallel`` (engine.py l.816-821,
presets for Mixtral, DeepSeek-V2/V3, Qwen3-MoE, ...); ZeRO-3 accepts those, except that the same
``_validate_zero3_moe_compatibility`` raises (l.2219-2232) with sequence parallelism
(``sequence_parallel_size != 1``, l.2219-2221), qgZ (``zero_quantized_gradients``, l.2222-2223), hpZ
(``zero_hpz_partition_size > 1``, l.2224-2227) or expert tensor parallelism
(``expert_parallel.expert_tensor_parallel_size != 1``, l.2229-2232): one finding per condition.

Anti-pattern: ``--expert-parallel 8`` (or ``--moe-capacity-factor 1.25``) on Mixtral with
``"zero_optimization": {"stage": 3}``.

Fix: ZeRO stage 1 or 2 with expert parallelism (the experts' ZeRO state partitions over the
expert-data-parallel group), or keep ZeRO-3 with AutoEP: transformers' MoE blocks and
``"expert_parallel": {"enabled": true, "autoep_size": N}`` instead of ``deepspeed.moe.layer.MoE``.
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


def _capacity_factor(ctx: LintContext):
    """DeepSpeed MoE's capacity factor the command models (plan's workload, else the resolved one), or None."""
    if ctx.plan is not None:
        return ctx.plan.workload.moe_capacity_factor
    values = getattr(ctx.workload, "values", None) or {}
    return values.get("moe_capacity_factor")


@register
class NativeMoeZero3(Rule):
    code = "G008"
    name = "native-moe-zero3"
    severity = "error"
    reads_stage = True
    needs_model = True
    refuses = True

    def check(self, ctx: LintContext):
        if ctx.effective.zero.stage != 3 or ctx.inventory is None:
            return
        experts = (ctx.inventory.meta or {}).get("num_experts") or 0
        if not experts:
            return
        if ctx.effective.autoep_enabled:
            yield from self._autoep(ctx, experts)
            return
        ep = getattr(ctx.cluster, "expert_parallel", 1) or 1
        cf = _capacity_factor(ctx)
        if ep <= 1 and cf is None:
            return  # transformers' own MoE blocks: not deepspeed.moe.layer.MoE, ZeRO-3 runs them
        why = f"--expert-parallel {ep}" if ep > 1 else f"--moe-capacity-factor {cf:g}"
        yield self.finding("/zero_optimization/stage",
                           f"ZeRO stage 3 with DeepSpeed's MoE layer ({why}, {experts} experts): deepspeed.initialize "
                           "raises \"Native DeepSpeed MoE is not supported with ZeRO Stage 3\" for any "
                           "deepspeed.moe.layer.MoE module, at every ep_size (runtime/engine.py "
                           "_validate_zero3_moe_compatibility l.2197-2216, called at l.2710)",
                           "set zero_optimization.stage to 1 or 2 (expert parallelism partitions the experts' ZeRO "
                           "state over the expert-data-parallel group), or keep stage 3 with AutoEP: transformers' "
                           "MoE blocks and \"expert_parallel\": {\"enabled\": true, \"autoep_size\": "
                           f"{ep if ep > 1 else 'N'}}} instead of deepspeed.moe.layer.MoE",
                           expert_parallel=ep, moe_capacity_factor=cf, num_experts=experts)

    def _autoep(self, ctx: LintContext, experts: int):
        """AutoEP at ZeRO-3: what ``_validate_zero3_moe_compatibility`` still refuses (engine.py l.2219-2232)."""
        ec = ctx.effective
        sp = getattr(ctx.cluster, "sequence_parallel", 1) or 1
        hpz = ec.zero.zero_hpz_partition_size or 1
        etp = ec.expert_tensor_parallel_size
        cases = (
            (sp != 1, "/zero_optimization/stage", f"sequence parallelism (sequence_parallel_size {sp})",
             "AutoEP with ZeRO Stage 3 does not support sequence parallelism yet", "l.2219-2221",
             "drop sequence parallelism (sequence_parallel_size 1) or use ZeRO stage 1/2"),
            (bool(ec.zero.zero_quantized_gradients), "/zero_optimization/zero_quantized_gradients",
             "qgZ (zero_quantized_gradients true)",
             "AutoEP with ZeRO Stage 3 does not support zero_quantized_gradients yet", "l.2222-2223",
             "set zero_optimization.zero_quantized_gradients to false"),
            (hpz > 1, "/zero_optimization/zero_hpz_partition_size", f"hpZ (zero_hpz_partition_size {hpz})",
             "AutoEP with ZeRO Stage 3 does not support hpZeRO secondary tensor groups yet", "l.2224-2227",
             "set zero_optimization.zero_hpz_partition_size to 1"),
            (etp != 1, "/expert_parallel/expert_tensor_parallel_size",
             f"expert tensor parallelism (expert_tensor_parallel_size {etp})",
             "AutoEP with ZeRO Stage 3 only supports expert_parallel.expert_tensor_parallel_size=1", "l.2229-2232",
             "set expert_parallel.expert_tensor_parallel_size to 1 or use ZeRO stage 1/2"),
        )
        for hit, pointer, what, msg, lines, fix in cases:
            if hit:
                yield self.finding(pointer,
                                   f"ZeRO stage 3 with AutoEP ({experts} experts) and {what}: deepspeed.initialize "
                                   f"raises \"{msg}\" (runtime/engine.py _validate_zero3_moe_compatibility {lines}, "
                                   "called at l.2710)", fix, autoep=True, num_experts=experts)
