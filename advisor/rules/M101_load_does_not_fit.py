"""M101 load-does-not-fit: The host runs out while the model loads: every rank builds the whole model before deepspeed.initialize.

Without ``deepspeed.zero.Init``, each rank materialises the complete model (under pipeline
parallelism from LayerSpecs: its stage's layers, pipe/module.py ``_build``) in host memory
before ``deepspeed.initialize`` moves it to the accelerator and partitions it: N x the load dtype
per rank (fp32 = 4 B for a model built in torch's default dtype), times the ranks of a node. The
HF Trainer builds the model under zero.Init only at ZeRO-3. estimate's timeline carries this as
its ``load`` instant (``--zero-init``, ``--load-dtype``, ``--low-cpu-mem-usage`` change the
assumption; the JSON's ``load`` section states it); the finding is raised when that instant, not
the training step, is what does not fit the node's host memory. It also names the largest need once
the model is loaded and partitioned: the training step's, or the checkpoint save's when that is
larger (``engine.save_checkpoint``'s host copy of the file it writes, or ``save_16bit_model``
gathering the 16-bit weights on rank 0 under ``stage3_gather_16bit_weights_on_model_save``), which
is no part of the step and is said as the save's.

With the HF Trainer at ZeRO-3 the model is built under zero.Init, but ``from_pretrained`` then
reads the whole checkpoint on rank 0 (transformers 5 ``modeling_utils.py``
``_load_pretrained_model``: ``map_location="cpu"`` on rank 0, ``"meta"`` elsewhere) and copies it
into one gathered module at a time: N x the checkpoint's dtype in rank 0's host memory, the
instant ``load:state_dict``. When that is what does not fit, M101 names it: more host memory on
rank 0's node, a 16-bit checkpoint, or the weights loaded after ``deepspeed.initialize``.

Anti-pattern: a 20B model at ZeRO-2 on a 4-GPU node with 256 GB of RAM: 4 ranks x 4 B x 20e9 =
320 GB at load, while the steady state keeps nothing on the host.

Fix: ZeRO-3 with the model built under ``deepspeed.zero.Init`` (``with
deepspeed.zero.Init(config_dict_or_path=ds_config): model = MyModel()``; with the HF Trainer,
create ``TrainingArguments(deepspeed=...)`` before ``from_pretrained`` and it does so itself), or
load in 16-bit (``torch_dtype=torch.bfloat16`` halves it), fewer ranks per node or more host
memory. ``low_cpu_mem_usage=True`` (one copy of the weights while loading) is already assumed
(transformers >= 5 always loads so); the fix names it only when the estimate was told it is off
(``--no-low-cpu-mem-usage``: a random-init model plus the loaded state dict, two copies). Under
pipeline parallelism (ZeRO 0-1 only, so zero.Init is no way out there) a model built whole and given
to ``PipelineModule`` as modules (``--pipeline-build whole``) is loaded whole on every rank, and the
other stages' layers stay referenced by the PipelineModule after it; the fix then names the layers
as ``LayerSpec`` objects, which each rank builds for its own stage only.
"""

from __future__ import annotations

from advisor.rules import Rule, register


@register
class LoadDoesNotFit(Rule):
    """Explanation and registry entry for M101; the findings come from estimate / check."""

    code = "M101"
    name = "load-does-not-fit"
    produced_by = "estimate"
    severity = "error"

    def check(self, ctx):
        return ()
