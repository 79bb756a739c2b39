"""G006 pipeline-stages-exceed-layers: more pipeline stages than the model has layers.

What DeepSpeed does: ``PipelineModule`` splits its layer list over the stages
(``runtime/pipe/module.py`` ``_partition_layers``, l. 406-408, ``partition_method="uniform"``:
``ds_utils.partition_uniform(num_items=num_layers, num_parts=num_stages)``; Megatron-DeepSpeed's
``type:transformer`` balances the transformer layers the same way, ``partition_balanced``, which
falls back to ``partition_uniform`` when there are no more items than parts). With fewer items
than parts, ``runtime/utils.py`` ``partition_uniform`` l. 609-613 returns
``parts[p] = min(p, num_items)``: the stages past the last layer get none. A stage with no
layer holds no parameters, and ``deepspeed.initialize`` fails on it when it builds the optimizer:
torch.optim raises ``ValueError: optimizer got an empty parameter list`` (seen with a one-layer
``PipelineModule`` on two gloo ranks: stage 1's ``parts`` [0, 1, 1], 0 parameters). The other
stages hang on the collectives the failed rank never joins.

Anti-pattern: ``--pipeline-parallel 64`` for Llama-3-8B's 32 layers.

Fix: at most as many stages as transformer layers (generate uses a divisor of the layer count).
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


@register
class PipelineStagesExceedLayers(Rule):
    code = "G006"
    name = "pipeline-stages-exceed-layers"
    severity = "error"
    refuses = True
    needs_model = True

    def check(self, ctx: LintContext):
        pp = getattr(ctx.cluster, "pipeline_parallel", 1) or 1
        layers = int((ctx.inventory.meta or {}).get("num_layers") or 0) if ctx.inventory is not None else 0
        if pp <= 1 or not layers or pp <= layers:
            return
        yield self.finding("", f"pipeline parallel size {pp} is more than the model's {layers} layers: DeepSpeed's "
                               f"PipelineModule gives {pp - layers} stage(s) no transformer layer (runtime/utils.py:partition_uniform "
                               "with fewer items than parts: parts[p] = min(p, num_items)), and a stage without "
                               "parameters fails deepspeed.initialize: torch.optim raises \"optimizer got an empty "
                               "parameter list\"",
                           f"use at most {layers} pipeline stages (a divisor of {layers} balances them)",
                           pipeline_parallel=pp, layers=layers)
