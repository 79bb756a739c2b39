"""A001 auto-top-level: "auto" at the top level of a config not run through the HF Trainer.

What DeepSpeed does: the string "auto" is a Hugging Face convention. The HF Trainer (and
accelerate) replace it with real values before calling ``deepspeed.initialize``; DeepSpeed
itself never resolves it. Top-level keys are read raw with ``dict.get``
(``runtime/config.py``), so the string flows into the engine:

* ``train_batch_size`` / ``train_micro_batch_size_per_gpu`` / ``gradient_accumulation_steps``:
  ``TypeError: '>' not supported between instances of 'str' and 'int'`` while the config is
  built (verified on 0.19.8);
* ``gradient_clipping``: accepted, then the first ``engine.step()`` fails comparing the string
  with a float, after the job has loaded the model and data;
* ``communication_data_type``, ``gradient_allreduce_op``: ``ValueError`` at initialize;
* a whole section given as "auto" (``"fp16": "auto"``): ``TypeError`` building it.

Not reported with ``--hf`` (the config goes through the HF Trainer, which fills these in).

Anti-pattern (plain ``deepspeed.initialize`` training loop)::

    "train_micro_batch_size_per_gpu": 4, "gradient_clipping": "auto"

Fix: write the value, or remove the key to get DeepSpeed's default (gradient_clipping 1.0 in
0.19.8)::

    "train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0
"""

from __future__ import annotations

from advisor.findings import pointer
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import is_auto

BATCH = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
#: Top-level keys DeepSpeed 0.19.8 reads (reference section 7.2); "auto" elsewhere is an unknown key's problem.
KNOWN_TOP = BATCH + (
    "managed_gradient_accumulation", "steps_per_print", "gradient_clipping", "prescale_gradients",
    "gradient_predivide_factor", "gradient_allreduce_op", "communication_data_type",
    "seq_parallel_communication_data_type", "disable_allgather", "dump_state", "disable_python_gc",
    "wall_clock_breakdown", "memory_breakdown", "dataloader_drop_last", "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer", "use_data_before_expert_parallelism", "log_level", "vocabulary_size",
    "sequence_parallel_size", "fp16", "bf16", "bfloat16", "torch_autocast", "data_types", "zero_optimization",
    "optimizer", "scheduler", "activation_checkpointing", "aio", "flops_profiler", "comms_logger", "tensorboard",
    "wandb", "csv_monitor", "comet", "checkpoint", "pipeline", "hybrid_engine", "compile", "timers",
    "tensor_parallel", "expert_parallel", "autotuning", "data_efficiency", "datastates_ckpt", "weight_quantization",
)

FIX = {
    "train_batch_size": "remove train_batch_size (DeepSpeed derives it from the micro-batch, accumulation and world size)",
    "train_micro_batch_size_per_gpu": "set train_micro_batch_size_per_gpu to the per-GPU batch size (an integer)",
    "gradient_accumulation_steps": "set gradient_accumulation_steps to an integer (1 for none)",
    "gradient_clipping": "set gradient_clipping to 1.0 (the 0.19.8 default; 0.0 disables clipping)",
    "communication_data_type": "remove communication_data_type (default: the model dtype)",
    "gradient_allreduce_op": 'set gradient_allreduce_op to "mean" or remove it',
}


@register
class AutoTopLevel(Rule):
    code = "A001"
    name = "auto-top-level"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        if ctx.hf:
            return
        for k, v in ctx.raw.items():
            if not is_auto(v) or k not in KNOWN_TOP:
                continue
            if k in BATCH:
                how = "deepspeed.initialize fails with TypeError ('>' between 'str' and 'int') building the config"
            elif k == "gradient_clipping":
                how = "DeepSpeed keeps the string and the first optimizer step crashes comparing it with a float"
            elif k in ("communication_data_type", "gradient_allreduce_op"):
                how = "deepspeed.initialize raises ValueError"
            elif k in ("fp16", "bf16", "bfloat16", "zero_optimization", "optimizer", "scheduler"):
                how = "DeepSpeed expects a section here and fails building it"
            else:
                how = "DeepSpeed reads the string \"auto\" as the value"
            yield self.finding(pointer(k), f'{k} is "auto" but only the HF Trainer resolves "auto": {how}',
                               FIX.get(k, f"set {k} to a real value or remove it (DeepSpeed's default), "
                                          "or lint with --hf if the HF Trainer launches this config"))
