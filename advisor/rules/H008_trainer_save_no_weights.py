"""H008 trainer-save-no-weights: at ZeRO-3 the HF Trainer's save_model writes no model weights.

What happens (transformers 5.24.0 ``Trainer.save_model``, accelerate 1.15.0
``Accelerator.get_state_dict``, DeepSpeed 0.19.8 ``engine.save_16bit_model``): at ZeRO stage 3
the weights exist only as per-rank partitions. Unless
``zero_optimization.stage3_gather_16bit_weights_on_model_save`` is true,
``get_state_dict`` raises ValueError ("Cannot get 16bit model weights because
`stage3_gather_16bit_weights_on_model_save` in DeepSpeed config is False"); the Trainer catches
it, logs a warning, writes the model config with an empty state dict, deletes the
``model.safetensors`` / ``pytorch_model.bin`` it just wrote (``remove_dummy_checkpoint``) and
saves a full DeepSpeed checkpoint (``global_stepN/`` + ``zero_to_fp32.py``) instead. The job
ends "successfully", ``from_pretrained(output_dir)`` finds no weights, and ``push_to_hub``
uploads none. The same holds for ``trainer.save_model()`` at the end of training and for
``accelerate``'s ``zero3_save_16bit_model: false``.

A stage written as the string ``"3"`` is worse: DeepSpeed coerces it (ZeroStageEnum) and
partitions the weights, but accelerate's ``get_state_dict`` and the Trainer's ``save_model``
compare the stage as written (``config["zero_optimization"]["stage"] == 3``, false for ``"3"``),
skip the 16-bit gather whatever ``stage3_gather_16bit_weights_on_model_save`` says, and save the
module's ``state_dict()``, whose ZeRO-3 parameters are empty partitions (DeepSpeed's
``free_param``: ``param.data = torch.empty(0)``): a weights file of empty tensors, with no
error. Fix: write ``"stage": 3``.

Anti-pattern (with ``--deepspeed ds.json`` in the Trainer)::

    "zero_optimization": {"stage": 3}

Fix: gather the 16-bit weights on save (rank 0 then holds the whole 16-bit model in host memory
while it writes: N x D bytes, given with --model), or keep it off and run
``zero_to_fp32.py output_dir output_dir/pytorch_model.bin`` after training::

    "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true}
"""

from __future__ import annotations

import json

from advisor.rules import LintContext, Rule, register
from advisor.rules._util import zptr


@register
class TrainerSaveNoWeights(Rule):
    code = "H008"
    name = "trainer-save-no-weights"
    severity = "warning"
    reads_stage = True

    def check(self, ctx: LintContext):
        if not ctx.hf:
            return
        from advisor.ledger.checkpoint import saves_16bit_weights  # the fact, stated once there

        ec = ctx.effective
        zr = ctx.raw.get("zero_optimization") if isinstance(ctx.raw, dict) else None
        written = zr.get("stage") if isinstance(zr, dict) else None
        if isinstance(written, str) and ec.zero.stage == 3:
            # accelerate/accelerator.py Accelerator.get_state_dict and transformers trainer.py
            # Trainer.save_model: zero3_sharding = config["zero_optimization"]["stage"] == 3, as written
            yield self.finding(
                zptr("stage"), f"zero_optimization.stage is the string {json.dumps(written)}: DeepSpeed coerces it "
                "to ZeRO-3 and partitions the weights, but accelerate's get_state_dict and the Trainer's save_model "
                f"compare the stage as written ({json.dumps(written)} == 3 is false), skip the 16-bit gather and save "
                "the module's state_dict, whose partitioned parameters are empty tensors: the saved weights file "
                "holds no weights, with no error", 'write "stage": 3 (a number)'
                + ("" if ec.zero.gather_16bit_weights_on_model_save
                   else ' and set "stage3_gather_16bit_weights_on_model_save": true'), written=written)
            return
        if saves_16bit_weights(ec):
            return
        cost = ""
        data = {}
        if ctx.inventory is not None:
            from advisor.config.effective import DTYPE_BYTES
            n = ctx.inventory.numel * DTYPE_BYTES[ec.model_dtype]
            cost = " (rank 0 then holds the whole 16-bit model in host memory while saving: {rank0_host_bytes:bytes})"
            data["rank0_host_bytes"] = n
        ptr = zptr("stage3_gather_16bit_weights_on_model_save") \
            if any(k in (ctx.raw.get("zero_optimization") or {}) for k in (
                "stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
                "stage3_gather_fp16_weights_on_model_save")) else zptr("stage")
        yield self.finding(
            ptr, "ZeRO stage 3 without stage3_gather_16bit_weights_on_model_save: the Trainer's save_model writes "
                 "no model weights (accelerate's get_state_dict raises ValueError, the Trainer deletes the weights "
                 "file and saves a DeepSpeed checkpoint instead); from_pretrained(output_dir) will find none",
            'set "stage3_gather_16bit_weights_on_model_save": true' + cost
            + ", or recover the weights after training with zero_to_fp32.py", sizes=dict(data), **data)
