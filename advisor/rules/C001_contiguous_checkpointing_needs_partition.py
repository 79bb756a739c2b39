"""C001 contiguous-checkpointing-needs-partition: contiguous_memory_optimization without partition_activations (or number_checkpoints).

What DeepSpeed does: the ``activation_checkpointing`` section acts only where the training script
calls ``deepspeed.checkpointing.configure``, either with ``deepspeed_config=...`` (the
Megatron-style ``configure(mpu, deepspeed_config=args.deepspeed_config,
num_checkpoints=args.num_layers)``) or with the section's values as keyword arguments
(``contiguous_checkpointing=ac["contiguous_memory_optimization"]``, as pipeline and accelerate
scripts do). ``deepspeed.initialize`` never calls it, and the HF Trainer's gradient
checkpointing (``torch.utils.checkpoint``) never reads the section. In DeepSpeed 0.19.8,
``runtime/activation_checkpointing/checkpointing.py``:

* ``_configure_using_config_file`` (:1121-1133) copies ``contiguous_memory_optimization`` into
  ``CONTIGUOUS_CHECKPOINTING`` (:1129) and ``number_checkpoints`` into ``num_layers`` (:1130);
* ``configure`` (:1152) then asserts, before the first step::

      if CONTIGUOUS_CHECKPOINTING:                                       # :1228-1229
          assert PARTITION_ACTIVATIONS, "Contiguous Checkpointing is only available with
              partitioned activations. Set partitioned activations to true in deepspeed config"
      if CONTIGUOUS_CHECKPOINTING:                                       # :1230-1231
          assert num_layers is not None, "Must specify the number of layers with contiguous
              memory checkpointing"

  (``partition_activations`` / ``num_checkpoints`` keyword arguments to ``configure`` override
  the file, :1210-1217.) The contiguous buffers exist only on the partitioned path:
  ``CheckpointFunction.forward`` passes ``CONTIGUOUS_CHECKPOINTING`` to
  ``partition_activations`` (:611-612), which allocates ``num_layers`` buffers of one partition
  each per checkpointed input at the first checkpoint (:404-417); without partitioning the flag
  has no code path at all.

So contiguous memory without partitioning stops the job with an ``AssertionError`` at
``configure`` (an error). Without ``number_checkpoints`` the second assertion fires unless the
script passes ``num_checkpoints=`` itself (the Megatron-style call does): a warning. Through the
HF Trainer (``--hf``) nothing reads the section and the option does nothing (a warning: the
optimisation the user asked for does not happen).

Anti-pattern::

    "activation_checkpointing": {"contiguous_memory_optimization": true}

Fix: partition the checkpointed activations and give the number of checkpointed layers per rank
(with ``--model``, the layers of one pipeline stage are computed), or drop the option::

    "activation_checkpointing": {"partition_activations": true,
                                 "contiguous_memory_optimization": true,
                                 "number_checkpoints": 32}
"""

from __future__ import annotations

from advisor.findings import pointer
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import section

SECTION = "activation_checkpointing"


def _layers_per_stage(ctx: LintContext) -> int | None:
    """The most transformer layers one pipeline stage checkpoints (DeepSpeed
    ``runtime/utils.py:partition_uniform`` over the pipeline degree), None without a model."""
    from advisor.model.parallel import partition_uniform

    meta = (ctx.inventory.meta or {}) if ctx.inventory is not None else {}
    layers = meta.get("num_layers")
    if not isinstance(layers, int) or layers <= 0:
        return None
    pp = ctx.cluster.pipeline_parallel if ctx.cluster is not None else 1
    parts = partition_uniform(layers, max(1, pp))
    return max(b - a for a, b in zip(parts, parts[1:]))


@register
class ContiguousCheckpointingNeedsPartition(Rule):
    code = "C001"
    name = "contiguous-checkpointing-needs-partition"
    severity = "error"

    def check(self, ctx: LintContext):
        ac = section(ctx.raw, SECTION)
        if ac.get("contiguous_memory_optimization") is not True:
            return
        sev = "warning" if ctx.hf else "error"
        hf_note = ("; through the HF Trainer nothing reads activation_checkpointing (torch.utils.checkpoint), "
                   "so the option does nothing" if ctx.hf else "")
        n = ac.get("number_checkpoints")
        has_n = isinstance(n, int) and not isinstance(n, bool) and n > 0
        layers = _layers_per_stage(ctx)
        n_fix = [f"{SECTION}.number_checkpoints={layers}"] if not has_n and layers else []
        n_text = (f" and number_checkpoints to {layers} (the layers one pipeline stage checkpoints)" if n_fix else
                  "" if has_n else " and number_checkpoints to the number of layers checkpointed per rank")
        if ac.get("partition_activations") is not True:
            fixes = [f"{SECTION}.partition_activations=true"] + n_fix
            yield self.finding(
                pointer(SECTION, "contiguous_memory_optimization"),
                "activation_checkpointing.contiguous_memory_optimization is true but partition_activations is not: "
                "deepspeed.checkpointing.configure asserts 'Contiguous Checkpointing is only available with "
                "partitioned activations' (checkpointing.py:1229) before the first step" + hf_note,
                f"set activation_checkpointing.partition_activations to true{n_text}, or remove "
                "contiguous_memory_optimization",
                severity=sev, **({"set": fixes} if has_n or n_fix else {}))
        elif not has_n:
            yield self.finding(
                pointer(SECTION, "contiguous_memory_optimization"),
                "activation_checkpointing.contiguous_memory_optimization is true without number_checkpoints: "
                "deepspeed.checkpointing.configure asserts 'Must specify the number of layers with contiguous "
                "memory checkpointing' (checkpointing.py:1231) before the first step unless the script passes "
                "num_checkpoints= to configure" + hf_note,
                f"set activation_checkpointing.number_checkpoints to {layers} (the layers one pipeline stage checkpoints)"
                if n_fix else
                "set activation_checkpointing.number_checkpoints to the number of layers checkpointed per rank",
                severity="warning", **({"set": n_fix} if n_fix else {}))
