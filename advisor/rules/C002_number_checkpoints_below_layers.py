"""C002 number-checkpoints-below-layers: contiguous checkpointing with fewer buffers than checkpointed layers.

What DeepSpeed does (0.19.8, ``runtime/activation_checkpointing/checkpointing.py``): with
``contiguous_memory_optimization`` and ``partition_activations``, ``configure`` copies
``number_checkpoints`` into ``num_layers`` (:1130), and the first checkpoint of a forward
allocates ``num_layers`` contiguous buffers per checkpointed input (:404-417); every later
checkpoint fills the next one (``data_offsets[i] + 1``, :433), and only a checkpoint's backward
resets them (:678-690). So a forward that checkpoints more layers than ``number_checkpoints``
indexes past the list: ``IndexError: list index out of range`` at :428. Measured here on CPU
(gloo, one rank): ``configure(None, partition_activations=True, contiguous_checkpointing=True,
num_checkpoints=1)`` and two ``checkpoint`` calls in one forward raise it at :428; with
``num_checkpoints=2`` the forward runs.

The layers one rank checkpoints are those of its pipeline stage (DeepSpeed
``runtime/utils.py:partition_uniform``), so the rule needs ``--model`` (the layer count); it
assumes one checkpoint per layer, as transformers' and Megatron's per-layer checkpointing do
(a script that checkpoints groups of layers makes fewer calls). Through the HF Trainer nothing
reads the section (C001 says so): no finding. Without partitioning C001's assertion fires first.

Anti-pattern (a 12-layer GPT-2, one stage)::

    "activation_checkpointing": {"partition_activations": true,
                                 "contiguous_memory_optimization": true, "number_checkpoints": 4}

Fix: number_checkpoints = the layers one pipeline stage checkpoints (12 here).
"""

from __future__ import annotations

from advisor.findings import pointer
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import section
from advisor.rules.C001_contiguous_checkpointing_needs_partition import SECTION, _layers_per_stage


@register
class NumberCheckpointsBelowLayers(Rule):
    code = "C002"
    name = "number-checkpoints-below-layers"
    severity = "error"

    def check(self, ctx: LintContext):
        ac = section(ctx.raw, SECTION)
        if ctx.hf or ac.get("contiguous_memory_optimization") is not True or ac.get("partition_activations") is not True:
            return
        n = ac.get("number_checkpoints")
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            return  # C001: missing number_checkpoints
        layers = _layers_per_stage(ctx)
        if layers is None or layers <= n:
            return
        yield self.finding(
            pointer(SECTION, "number_checkpoints"),
            f"activation_checkpointing.number_checkpoints is {n} but one rank checkpoints {layers} layers (its pipeline "
            f"stage): with contiguous_memory_optimization DeepSpeed allocates {n} contiguous buffers per input and "
            f"checkpoint {n + 1} of a forward fails with IndexError: list index out of range (checkpointing.py:428)",
            f"set activation_checkpointing.number_checkpoints to {layers}",
            set=[f"{SECTION}.number_checkpoints={layers}"])
