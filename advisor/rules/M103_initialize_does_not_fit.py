"""M103 initialize-does-not-fit: The accelerator runs out inside deepspeed.initialize: the whole model is moved there before ZeRO-3 partitions it.

A model built without ``deepspeed.zero.Init`` reaches ``deepspeed.initialize`` whole. DeepSpeed
0.19.8's ``DeepSpeedEngine._configure_distributed_model`` (``runtime/engine.py`` l. 2080-2094)
casts its parameters to the fp16/bf16 dtype and runs ``self.module.to(self.device)`` before the
ZeRO-3 optimizer partitions them (``parameter_offload.py`` _convert_to_zero_parameters ->
``partition_parameters.py`` Init(module=...)), so every accelerator holds N x 2 B at once: 131 GiB
for a 70B model, whatever the stage and the world size promise for the training step. estimate's
timeline carries this as its ``initialize:module`` instant (``--zero-init`` / ``--no-zero-init``
choose; at ZeRO-3 zero.Init is assumed unless told otherwise); the finding is raised when that
instant, not the training step, is what does not fit the accelerator.

The HF Trainer is not affected at ZeRO-3: ``TrainingArguments(deepspeed=...)`` makes an
``HfDeepSpeedConfig`` (``training_args.py`` __post_init__) and ``from_pretrained`` then builds
the model under ``deepspeed.zero.Init`` (``modeling_utils.py`` get_init_context, when
``is_deepspeed_zero3_enabled()``), unless the model is built before the arguments exist.

Anti-pattern: a 70B model, ZeRO-3, bf16, 8 x 80 GB, built with ``model = MyModel()`` and then
passed to ``deepspeed.initialize``: the step needs about 20 GiB per rank, initialize 131 GiB.

Fix: ``with deepspeed.zero.Init(config_dict_or_path=ds_config): model = MyModel()`` (each rank
only ever holds its partition), or create the HF ``TrainingArguments(deepspeed=...)`` before
``from_pretrained``.
"""

from __future__ import annotations

from advisor.rules import Rule, register


@register
class InitializeDoesNotFit(Rule):
    """Explanation and registry entry for M103; the findings come from estimate / check."""

    code = "M103"
    name = "initialize-does-not-fit"
    produced_by = "estimate"
    severity = "error"

    def check(self, ctx):
        return ()
