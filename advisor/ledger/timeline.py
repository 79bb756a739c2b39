"""The step timeline: when each ledger entry is live, and the peak per tier with its instant.

A rank's memory decides an OOM at its *peak*: the largest sum of what is live together, not the
sum of each lifetime's total. This module puts every :class:`advisor.ledger.state.Entry` on a
timeline of instants and takes, per tier, the maximum over the instants of the live bytes.

Instants (in order; ``phase`` is the event, ``label`` names the instant for a reader):

1. ``load``          the model is materialised before ``deepspeed.initialize`` (see below);
2. without ``zero.Init`` (:func:`init_entries`), phase ``initialize``: ``initialize:cast`` (the
   parameters cast to the 16-bit dtype in host memory, when the load dtype differs) and
   ``initialize:module`` (the whole model moved to the accelerator, before the optimizer
   partitions or flattens it); at ZeRO-1/2 (DeepSpeedZeroOptimizer) ``initialize:flatten`` (a param group's
   flat copy beside the module's parameters) and, without optimizer offload, ``initialize:optimizer_states``
   (initialize_optimizer_states' zeroed fp32 gradient partitions: :func:`zero12_init_transients`; stage 0's
   FP16_Optimizer has the latter too, FP16_UnfusedOptimizer its warm-up step there), at ZeRO-3
   ``initialize:grad_hooks`` (each parameter gathered whole in turn as its gradient hook is registered:
   :func:`zero3_init_transients`, with zero.Init too); then ``initialize``, after ``deepspeed.initialize``;
3. ``forward:k`` / ``backward:k`` of micro-step k (k = 1, and k = GA, the accumulation
   boundary, when GA > 1) of the first iteration; at GA > 2 without pipeline parallelism also
   ``forward:2`` / ``backward:2``, a middle micro-step (1 < m < GA: :func:`middle_microstep`; ZeRO-3's
   ``forward:2`` is micro-step 2's alone, which fetches again what the first backward released);
4. ``reduce``        the reduction at the accumulation boundary (end of the boundary backward);
   at ZeRO-2 and BF16_Optimizer with GA > 1 also ``reduce:1``, the reduce inside micro-step 1's backward
   (ZeRO-2 reduces in every backward, BF16_Optimizer adds each into its fp32 buffer: :func:`reduces_in_backward`),
   and with a middle ``backward:2`` its own ``reduce:2`` (:data:`MICROSTEP_REDUCES`);
5. ``first_step:prep`` / ``first_step:update``  the first optimizer step: gradients flattened and
   cast, then the update of the largest (sub-)group (named); ZeRO-1/2 plans with modeled
   transients have ``first_step:norm`` (the gradient norm) before ``prep``, likewise ``steady_step:norm``;
   ZeRO-1/2 plans with several param groups (:func:`stepped_groups`) have a ``prep`` and an
   ``update`` instant per group g, ``first_step:g<g>:prep`` ... (see "Per-group step" below);
6. ``steady:forward``, ``steady:backward``, ``steady:reduce``, ``steady_step:prep`` /
   ``steady_step:update``: the boundary micro-step and step of every later iteration; under pipeline
   parallelism at GA > 1 first ``steady:backward:1`` (:data:`STEADY_FIRST_BACKWARD`), the backward of
   micro-step 1, where a stage holds the most micro-batches in flight;
7. phase ``save``, after the steady iteration: ``save:16bit`` (``save_16bit_model``, what the HF
   Trainer's save_model runs; at ZeRO-3 with the 16-bit gather also ``save:16bit:end``), then
   ``engine.save_checkpoint``: ``save:model`` (the model-states file), ``save:optim`` (the
   optimizer-states files) and ``save`` (it has returned). See "Save" below.

Which lifetime is live where (``Entry.life``; DeepSpeed source in brackets):

* ``persistent``: from ``initialize`` on (ZeRO-3's ``lp_params_gathered``, the persistent
  parameters, from the first forward: they are gathered at their first fetch). Optimizer state (``optimizer_states`` items) is created
  lazily by torch, FusedAdam and DeepSpeedCPUAdam at the first update (``torch/optim/adamw.py``
  _init_group, ``ops/adam/cpu_adam.py`` step: ``zeros_like`` when the state is empty), so it is
  live from ``first_step:update`` on; the stage-0 16-bit wrappers run a dummy step in their
  constructor (``fp16/fused_optimizer.py``, ``fp16/unfused_optimizer.py`` __init__), so there it is
  live from ``initialize``.
* ``backward``: from backward to the step; ZeRO-1/2 ``averaged_gradients`` is released before the
  update of its group (``stage_1_and_2.py`` step: ``self.averaged_gradients[i] = None`` before
  ``_optimizer_step(i)``), so it is live at ``prep`` but not at ``update``.
* ``in_backward``: backward and reduce only (ipg buckets: ``_release_ipg_buffers``).
* ``forward_backward``: forward and backward (ZeRO-3 gathered parameters where the fetch is not
  replayed).
* ``first_forward`` / ``first_backward``: the first micro-step's forward, its backward (and the
  reduce when GA = 1); ``steady_forward`` / ``steady_backward``: every other forward, backward and
  reduce; ``steady_forward_backward``: both (the reference's gathered parameters beside a replayed
  first iteration: NVMe parameters). ZeRO-3's coordinator records its trace in the first forward and backward (no prefetch,
  every parameter released after its module) and runs it complete from the second forward on
  (``state.zero3_fetch_replay``).
* ``accumulated``: forward, backward and reduce of the micro-steps after an iteration's first
  (GA > 1; ZeRO-2's previous micro-step's grads_in_partition); ``accumulated_forward``: their
  forward only (``forward:GA``, ``steady:forward``; ZeRO-1's accumulated 16-bit gradients and ipg
  bucket); ``first_microstep_backward``: micro-step 1's backward only (ZeRO-1 under offload at GA > 1:
  every param.grad, before any reduce); ``first_microstep_reduce`` / ``boundary_reduce``: micro-step 1's
  ``reduce:1`` only / the boundary's reduces only, not ``reduce:2`` (ZeRO-2 under offload at GA > 1: no fp64 norm copy before the
  boundary, ``state.zero12_offload_microstep_terms``); ``from_first_reduce``: as ``persistent`` from after
  ``reduce:1`` on (the host buffers it makes); ``accumulated_backward``: their backward only (ZeRO-1's and stage 0's new gradient being
  accumulated); ``accumulated_reduce``: their reduce only (ZeRO-2's compact fp32 gradient buffer kept from micro-step 1,
  ``state._zero12_compact_transients``); ``refetch_forward``: the first iteration's ``forward:2`` only (ZeRO-3's prefetch of the
  parameters the first backward released, ``state.zero3_refetch_prefetch_bytes``; with parameters on NVMe
  a module's coalesced re-fetch, ``state.zero3_nvme_refetch_bytes``).
* ``step``: prep and update; ``step_prep``: prep only; ``first_step``: ``first_step:update`` only; ``step_update``:
  every update instant (torch's optimizer step temporaries, ``state.torch_step_temporaries``; at a per-group update
  the group's own figure).
* ``init``: ``initialize`` only; ``init_cast`` / ``init_module``: only at ``initialize:cast`` /
  ``initialize:module``, where nothing else of the ledger exists yet (the optimizer is built later);
  ``init_flatten``: only at ``initialize:flatten`` (its entries are all that is live there);
  ``init_optimizer_states`` / ``init_grad_hooks``: only at ``initialize:optimizer_states`` /
  ``initialize:grad_hooks``, beside everything live at ``initialize``.
* ``after_load``: every instant after the load's, ``initialize:cast`` / ``initialize:module`` included
  (``pipe_offstage_layers``: under ``--pipeline-build whole`` the other stages' modules a PipelineModule
  keeps referenced, :data:`PIPELINE_WHOLE_LOAD`).
* An entry with ``alias_of`` is a view of that item: it costs 0 while that item is live.
* ZeRO-1/2 transients (plans ``state.zero12_transients_modeled`` accepts; computed by
  ``state.zero12_backward_transients``): ``autograd`` at the backward instants (a gradient being
  moved into the ipg bucket), ``reduce`` at the reduce instants (the worst bucket flush: its flat
  copy in ``allreduce_bucket``, the gradients not yet in the bucket, grads_in_partition), and
  ``step_norm`` at ``first_step:norm`` / ``steady_step:norm``, an instant before ``prep`` that only
  these plans have (get_grad_norm_direct's fp64 copy of one gradient slice, with
  averaged_gradients live and no fp32 copy yet). There ``averaged_gradients`` is not live in
  backward or reduce (it is allocated by the reduce, inside the ``reduce`` transient) and
  ZeRO-1's ``lp_grads`` only in backward (the reduce moves them into the bucket).

Per-group step (ZeRO-1/2, 16-bit or fp32 model, no optimizer offload, several param groups;
``state.zero12_step_groups``; ``stage_1_and_2.py`` DeepSpeedZeroOptimizer.step loops over the
groups, ``_optimizer_step`` hands torch one group at a time): at group g's update only groups
0..g have moments at the first step; the group's own fp32 gradient (P_g x 4) and flat copy
(P_g x D) are the step's (an fp32 model's slice inside one tensor: its fp32 gradient is a view
that keeps ``grads_in_partition`` whole through the group's update); ``grads_in_partition`` is one buffer for every group
(``copy_grads_in_partition``), so it stays live, whole, until the last group holding views of it
is updated, with the later groups' zero pads (without ``contiguous_gradients`` there is none: each group's
whole gradients go with its own ``averaged_gradients[g]``). On a two-group model the first step's peak is
group 0's update (15% over the one-instant step on the engine's tracker).

Activations (when estimated) are live in forward (saved + loss spike) and backward (saved +
the larger of one recomputed layer and the loss gradients); host-offloaded checkpoints in both.
Where a backward transient is split by region (``Entry.regions``: ZeRO-3's ``zero3_reduce_flush``)
or is a gradient backward makes whole (:data:`MADE_GRAD_ITEMS`, ZeRO 0-2), a backward instant is the
worst of backward's start, each layer's backward and its end, each with the activations live then
(:func:`_backward_activations`), not the sum of the maxima.

Load phase (:class:`LoadAssumption`, per rank, host pageable memory): without
``deepspeed.zero.Init`` every rank builds the whole model in host memory before
``deepspeed.initialize`` moves and partitions it: N x load-dtype bytes (torch's default dtype
fp32 for a plain ``nn.Module``; the checkpoint's dtype / HF ``torch_dtype`` when given), twice
that with ``low_cpu_mem_usage`` false (a randomly initialised model plus the loaded state dict;
transformers 5 always initialises on the meta device). Under ``zero.Init`` (only possible at
ZeRO-3; ``runtime/zero/partition_parameters.py`` Init) each parameter is partitioned as it is
created: no full copy. The HF Trainer builds the model under zero.Init exactly when ZeRO-3 is
enabled (``transformers.integrations.deepspeed.is_deepspeed_zero3_enabled`` in
``from_pretrained``). A reading checkpoint shard is not counted. Under pipeline parallelism each
rank builds only its stage (:data:`PIPELINE_STAGE_LOAD`): N is the stage's shard
(:func:`advisor.model.parallel.shard`), as in :func:`init_entries`. With ``--pipeline-build whole``
(a model built whole whose modules are given to PipelineModule, :data:`PIPELINE_WHOLE_LOAD`) N is
the whole model (its tensor-parallel shard) and the other stages' layers stay in host memory in the
load dtype for the rest of the run (entry ``pipe_offstage_layers``, life ``after_load``).

Initialize without zero.Init (:func:`init_entries`; DeepSpeed 0.19.8 ``runtime/engine.py``
DeepSpeedEngine._configure_distributed_model, l. 2080-2094): with fp16/bf16 on, the parameters are
cast one at a time (``_cast_module_mixed_precision``: ``p.data = p.data.to(param_dtype)``, so one
tensor is in both dtypes at once, in host memory where the model was built), then
``self.module.to(self.device)`` moves the whole model to the accelerator (``nn.Module._apply``
replaces each ``param.data``: the host copy goes as the accelerator copy comes; no second copy on
the accelerator). At ZeRO-3 the optimizer then partitions it (``parameter_offload.py``
_convert_to_zero_parameters -> ``partition_parameters.py`` Init(module=...) ->
_convert_to_zero_parameters: each parameter's partition allocated before the whole tensor is
freed), so every accelerator holds the whole model at once: N x 2 B, 131 GiB for a 70B model.
The HF Trainer never takes this path at ZeRO-3 (``transformers/modeling_utils.py``
get_init_context: ``deepspeed.zero.Init`` whenever ``is_deepspeed_zero3_enabled()``, which
TrainingArguments' HfTrainerDeepSpeedConfig turns on, ``training_args.py`` __post_init__). At
ZeRO-0/1/2 the whole model is on the accelerator in the steady state too; the flat copy
``stage_1_and_2.py`` __init__ makes of each param group is built on the accelerator only when its
free memory holds it (``flatten_on_accelerator``), else in host memory, so it is not counted
on the accelerator; the host fallback (the group's n x D copied to the CPU plus its flat
n_pad x D) depends on the capacity, so the fit adds it (:func:`zero12_flat_fallback`).

Save (:func:`save_entries`, every rank; :func:`save_rank0_entries`, rank 0): DeepSpeed 0.19.8
``engine.save_checkpoint`` (``runtime/engine.py`` l.4869-4966) writes the model-states file
(module_state_dict: at ZeRO-3 empty placeholders; below it, on dp rank 0 only, the views of the
flat 16-bit buffers) and the optimizer-states files; it never gathers the 16-bit weights (only
``save_16bit_model``, l.5707, does: :data:`SAVE_16BIT_SOURCE`) and clones nothing outside the MoE
path (``clone_tensors_for_torch_save``, l.5137-5353). What it costs in memory is torch.save's host
copy of each accelerator storage, one at a time (``torch/serialization.py`` l.1290-1310): the
largest storage of the file being written, host memory, every rank at once for its optimizer
file; at ZeRO-2/3 also the ``.cpu()`` copies of the frozen parameters. At ZeRO-3 both calls start
with checkpoint_event_prologue (``stage3.py`` l.3844: the persistent parameters partitioned) and
end with the epilogue (gathered again). ``save_16bit_model`` with the gather: every rank holds one
gathered module at a time, rank 0 the CPU copies made so far (N x D at the end, beside the
persistent parameters gathered again). Under tensor / pipeline parallelism each rank's storages
are its own shard's (:func:`_rank_shard`); under pipeline parallelism the module goes to the layer
files (runtime/pipe/engine.py module_state_dict l.1308-1325) that data-parallel rank 0 of each stage
(with ``checkpoint.parallel_write.pipeline_stage``, each data-parallel rank its share of the stage's layers)
clones to the CPU one layer at a time (:func:`_pipeline_layer_staging`, from the same per-rank file
entries ``advisor checkpoint`` lists). On a CPU accelerator there are no host copies
(:data:`SAVE_GPU_ONLY`), except the layer clones, which ``clone_tensors_for_torch_save`` makes on any
device; the engine's save parity is ``tests/engine/test_save_parity.py``, under pipeline parallelism
``tests/engine/test_pipeline_engine.py`` (each stage's save peak and what is live after it).

No torch or deepspeed import.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field, replace
from typing import Any

from advisor.config.dtypes import TORCH_TO_TRAINING, TRAINING_DTYPE_BYTES, torch_dtype_name
from advisor.config.effective import DTYPE_BYTES, EffectiveConfig, batch_world_size
from advisor.model.activations import backward_moments, layer_moment_breaks
from advisor.model.activations import head_held as _head_held
from advisor.model.inventory import Inventory
from advisor.ledger.state import (TIERS, TORCH_STEP_GPU_ONLY, TWIN_FLOW_GPU_ONLY, Entry, Ledger, RankLedger, module_names, placement_of,
                                  swap_threshold_bytes,
                                  zero3_param_swap_bytes_counted, zero3_partition_counts,
                                  zero3_param_swap_bytes, zero3_partition_numel, zero3_sub_groups,
                                  adagrad_rebuilt, zero12_groups_stepped_apart, zero12_step_groups)

#: Lazy-state optimizers create their state at the first update; these wrappers already hold it.
_EAGER_STATE_WRAPPERS = ("FP16_Optimizer", "FP16_UnfusedOptimizer")
#: Items a ZeRO-1/2 step releases before the update of their group.
_CONSUMED_BEFORE_UPDATE = ("averaged_gradients",)
#: Items whose backward/reduce bytes the ZeRO-1/2 transients account for (state.zero12_backward_transients).
_IN_REDUCE_TRANSIENT = ("averaged_gradients", "lp_grads")

LOAD_DTYPES = tuple(TRAINING_DTYPE_BYTES)  # fp32, fp16, bf16 (advisor.config.dtypes)
from advisor.plan import PIPELINE_BUILDS  # noqa: E402  (--pipeline-build's values: stage, whole)
#: The load assumption's source when the HF Trainer does not see the ZeRO-3 DeepSpeed runs (:func:`hf_zero3`).
HF_NOT_ZERO3 = ("HF Trainer: zero_optimization.stage is not the number 3 in the file, so HfDeepSpeedConfig.is_zero3() "
                "is false and from_pretrained does not use deepspeed.zero.Init (DeepSpeed still runs ZeRO-3)")
#: The instants of deepspeed.initialize before the optimizer partitions the model (no zero.Init):
#: one-off, like the load; the fit reports the step's peak without them too.
BEFORE_PARTITION = ("initialize:cast", "initialize:module")
#: The instants inside ZeRO-1/2's optimizer construction (DeepSpeedZeroOptimizer.__init__, no zero.Init):
#: ``initialize:flatten``, a param group's flat 16-bit copy made beside the module's parameters, and
#: ``initialize:optimizer_states``, initialize_optimizer_states' zeroed fp32 gradient partitions
#: (:func:`zero12_init_transients`; stage 0's FP16_Optimizer has the latter: :func:`fp16_optimizer_init_transients`;
#: stage 0's FP16_UnfusedOptimizer its warm-up step there: :func:`unfused_optimizer_init_transients`). One-off, like
#: :data:`BEFORE_PARTITION`: the fit's steady need leaves them out.
#: At ZeRO-3, ``initialize:grad_hooks``: each parameter gathered whole in turn as its gradient hook is
#: registered (:func:`zero3_init_transients`).
#: and, without offload in 16-bit, ``initialize:fp32_partitions`` (each sub-group's fp32 master made by a cast and a clone).
INIT_TRANSIENTS = ("initialize:flatten", "initialize:optimizer_states", "initialize:fp32_partitions",
                   "initialize:grad_hooks")
#: Lifetime of each :data:`INIT_TRANSIENTS` instant's entries (live there only).
INIT_TRANSIENT_LIVES = {"init_flatten": "initialize:flatten", "init_optimizer_states": "initialize:optimizer_states",
                        "init_grad_hooks": "initialize:grad_hooks", "init_fp32_partitions": "initialize:fp32_partitions"}


@dataclass(frozen=True)
class Instant:
    """One point of the timeline: ``key`` (stable id), ``phase`` (event) and ``label`` (words)."""

    key: str
    phase: str
    label: str
    #: The param group a per-group step instant updates (:func:`stepped_groups`), else -1.
    group: int = -1
    #: A middle micro-step's instant (``forward:2`` / ``backward:2`` at GA > 2: :func:`middle_microstep`), one
    #: of GA - 2 alike: the report's timeline lists it only where it is a tier's peak (``Role.timeline_dict``).
    middle: bool = False


@dataclass(frozen=True)
class LoadOptions:
    """The inputs a :class:`LoadAssumption` was resolved from (:func:`resolve_load`'s arguments but the
    config), so a caller that changes the ZeRO stage (a fix, :func:`advisor.views.fixes._load_for`)
    resolves the load again from them rather than from the assumption's words.

    ``zero_init``, ``dtype``, ``low_cpu_mem_usage``, ``pipeline_build``: what the user gave (``--zero-init`` /
    ``--no-zero-init``, ``--load-dtype``, ``--low-cpu-mem-usage`` / ``--no-low-cpu-mem-usage``,
    ``--pipeline-build``), None
    where nothing was given and the value was assumed; ``hf``: the HF Trainer loads the model
    (``--hf`` or an accelerate file); ``hf_is_zero3``: the Trainer's ``is_zero3()`` of the config as
    written (:func:`hf_zero3`); ``checkpoint_dtype``: the model config.json's dtype
    (:func:`checkpoint_load_dtype`); ``accelerate``: ``zero_init`` is accelerate's
    ``zero3_init_flag`` as resolved for the written stage, not a flag
    (:func:`advisor.views.estimate.load_assumption`)."""

    zero_init: bool | None = None
    dtype: str | None = None
    low_cpu_mem_usage: bool | None = None
    hf: bool = False
    hf_is_zero3: bool | None = None
    checkpoint_dtype: str | None = None
    accelerate: bool = False
    #: ``--pipeline-build stage|whole`` as given (None: not given, ``stage`` assumed).
    pipeline_build: str | None = None


@dataclass(frozen=True)
class LoadAssumption:
    """How the model is materialised before ``deepspeed.initialize`` (see the module docstring).

    ``zero_init``: built under ``deepspeed.zero.Init``; ``dtype``: the dtype the weights are
    built/loaded in (fp32, fp16, bf16); ``low_cpu_mem_usage``: no second full copy while
    loading; ``pipeline_build`` (only read under pipeline parallelism; None where the plan has none): ``stage``, a PipelineModule
    from LayerSpecs builds only its stage (:data:`PIPELINE_STAGE_LOAD`), or ``whole``, the model built
    whole on every rank and its modules given to PipelineModule (:data:`PIPELINE_WHOLE_LOAD`);
    ``*_source``: why (a flag, the HF Trainer's behaviour, or the default assumed)."""

    zero_init: bool = False
    zero_init_source: str = "assumed: the model is built before deepspeed.initialize without deepspeed.zero.Init"
    dtype: str = "fp32"
    dtype_source: str = "assumed: torch's default dtype (fp32) for a model built without torch_dtype"
    low_cpu_mem_usage: bool = True
    low_cpu_mem_usage_source: str = "assumed: one copy of the weights while loading (transformers >= 5 always)"
    #: HF from_pretrained under ZeRO-3 (zero.Init): the dtype of the checkpoint's state dict rank 0
    #: loads whole after the model is built (:func:`hf_state_dict_entries`); None: no such step.
    state_dict_dtype: str | None = None
    #: What it was resolved from (:class:`LoadOptions`; by default nothing given, no HF Trainer).
    #: Not part of the assumption's value (equality) nor of its JSON.
    options: LoadOptions = field(default=LoadOptions(), compare=False)
    pipeline_build: str | None = "stage"
    pipeline_build_source: str = ("assumed: a PipelineModule from LayerSpecs, each rank building its stage's layers "
                                  "(pass --pipeline-build whole for a model built whole and then given as modules)")

    def to_dict(self) -> dict[str, Any]:
        return {"zero_init": self.zero_init, "zero_init_source": self.zero_init_source, "dtype": self.dtype,
                "dtype_source": self.dtype_source, "low_cpu_mem_usage": self.low_cpu_mem_usage,
                "low_cpu_mem_usage_source": self.low_cpu_mem_usage_source, "state_dict_dtype": self.state_dict_dtype,
                "pipeline_build": self.pipeline_build, "pipeline_build_source": self.pipeline_build_source}


def hf_zero3(plan: Any) -> bool | None:
    """Whether the HF Trainer builds ``plan``'s model under zero.Init: its
    ``HfDeepSpeedConfig.is_zero3()`` is ``zero_optimization.stage == 3`` on the config as written
    (``transformers/integrations/deepspeed.py``; accelerate's ``HfDeepSpeedConfig`` the same), so a
    stage written as the string "3", which DeepSpeed coerces to 3, is not ZeRO-3 to the Trainer.
    None without an HF resolution."""
    res = getattr(plan, "hf", None)
    if res is None:
        return None
    z = (res.config or {}).get("zero_optimization")
    return isinstance(z, dict) and z.get("stage") == 3 and not isinstance(z.get("stage"), bool)


#: How ``LoadAssumption.zero_init_source`` begins when ``--zero-init`` is given below ZeRO-3
#: (:func:`zero_init_ignored_warning` turns it into a stderr warning).
ZERO_INIT_IGNORED = "--zero-init ignored"


#: How ``LoadAssumption.pipeline_build_source`` begins when ``--pipeline-build`` is given without pipeline
#: parallelism (:func:`load_ignored_warnings` turns it into a stderr warning).
PIPELINE_BUILD_IGNORED = "--pipeline-build ignored"
#: Why ``LoadAssumption.pipeline_build`` is None at pipeline degree 1: there is no PipelineModule to build.
PIPELINE_BUILD_NOT_READ = ("not read without pipeline parallelism (--pipeline-parallel 1): no PipelineModule, "
                           "the model is built as one module")


def load_ignored_warnings(load: "LoadAssumption | None") -> list[str]:
    """The warnings (without the "ds-advisor: warning: " prefix) for load options given where they do nothing:
    ``--zero-init`` below ZeRO-3 (:func:`zero_init_ignored_warning`) and ``--pipeline-build`` without pipeline
    parallelism (no PipelineModule: the option only chooses how a PipelineModule gets its layers,
    ``pipe/module.py`` PipelineModule.__init__ / _build, LayerSpec.build)."""
    if load is None:
        return []
    out = [w for w in (zero_init_ignored_warning(load.zero_init_source),) if w]
    if load.pipeline_build_source.startswith(PIPELINE_BUILD_IGNORED):
        out.append(load.pipeline_build_source)
    return out


def zero_init_ignored_warning(zero_init_source: str | None) -> str | None:
    """The warning (without the "ds-advisor: warning: " prefix) when ``--zero-init`` was given at
    ZeRO-0/1/2 (``zero_init_source`` from :func:`resolve_load`), else None. Why it does nothing
    there: deepspeed.zero.Init is "Only applicable to training with ZeRO-3" (DeepSpeed 0.19.8
    ``runtime/zero/partition_parameters.py`` class Init, docstring l.977-1046), and transformers
    enters it only when the DeepSpeed config is ZeRO-3 (transformers 5.25.0 ``modeling_utils.py``
    l.1435 ``needs_zero3_init = is_deepspeed_zero3_enabled() and ...``; ``integrations/deepspeed.py``
    l.286-288 ``is_zero3()``), so the model is built whole before deepspeed.initialize."""
    if not zero_init_source or not zero_init_source.startswith(ZERO_INIT_IGNORED):
        return None
    return (zero_init_source + ": DeepSpeed's zero.Init is only applicable to ZeRO-3 (partition_parameters.py Init) "
            "and transformers enters it only when is_deepspeed_zero3_enabled(); the load phase assumes the model "
            "built whole before deepspeed.initialize")


def resolve_load(ec: EffectiveConfig, zero_init: bool | None = None, dtype: str | None = None,
                 low_cpu_mem_usage: bool | None = None, hf: bool = False,
                 hf_is_zero3: bool | None = None, checkpoint_dtype: str | None = None,
                 pipeline_build: str | None = None, pipeline_parallel: int | None = None) -> LoadAssumption:
    """The :class:`LoadAssumption` for a plan: flags win; with ``hf`` the HF Trainer's behaviour
    (zero.Init exactly at ZeRO-3); otherwise the same choice, stated as assumed (a plain script
    may build the model before initialize at ZeRO-3: ``--no-zero-init``); fp32, one copy.
    zero.Init below ZeRO-3 is not possible (``zero.Init`` partitions for stage 3 only), so it is
    ignored there with the reason. ``hf_is_zero3`` (:func:`hf_zero3`): False when the Trainer does
    not see ZeRO-3 although DeepSpeed does (a string stage), so it builds without zero.Init.
    ``checkpoint_dtype`` (fp32/fp16/bf16, from the model's config.json ``dtype``/``torch_dtype``,
    :func:`checkpoint_load_dtype`): the dtype of the state dict rank 0 loads with ``hf`` under
    zero.Init (``state_dict_dtype``, :func:`hf_state_dict_entries`; the load dtype when unknown);
    with ``hf`` and no ``dtype`` the load dtype is the checkpoint's,
    as transformers >= 5 loads it (``modeling_utils.py`` PreTrainedModel.from_pretrained:
    ``if dtype is None: dtype = "auto"``, transformers 5.25.0 l.4236-4237); without one, fp32.
    ``pipeline_build`` (``stage`` / ``whole``, :data:`PIPELINE_BUILDS`; None: ``stage`` assumed): how a
    PipelineModule gets its layers, read only under pipeline parallelism (:func:`load_entries`);
    ``pipeline_parallel`` (the plan's pipeline degree; None: unknown): at 1 there is no PipelineModule, so
    ``pipeline_build`` is None with why, and a given ``--pipeline-build`` is ignored
    (:data:`PIPELINE_BUILD_IGNORED`, :func:`load_ignored_warnings`), as ``--zero-init`` is below ZeRO-3.
    Raises ValueError for an unknown ``dtype`` or ``pipeline_build``."""
    st = ec.zero.stage
    if zero_init is not None:
        if zero_init and st != 3:
            zi, zs = False, f"{ZERO_INIT_IGNORED}: deepspeed.zero.Init partitions for ZeRO-3 only (stage {st})"
        else:
            zi, zs = bool(zero_init), "--zero-init" if zero_init else "--no-zero-init"
    elif hf and st == 3 and hf_is_zero3 is False:
        zi, zs = False, HF_NOT_ZERO3
    elif hf:
        zi = st == 3
        zs = ("HF Trainer: from_pretrained runs under deepspeed.zero.Init at ZeRO-3" if zi else
              f"HF Trainer: no deepspeed.zero.Init below ZeRO-3 (stage {st}): every rank loads the whole model")
    elif st == 3:
        zi, zs = True, ("assumed: the model is built under deepspeed.zero.Init at ZeRO-3, as the HF Trainer and "
                        "accelerate do (pass --no-zero-init if it is built before deepspeed.initialize)")
    else:
        zi, zs = False, (f"assumed: the model is built before deepspeed.initialize (deepspeed.zero.Init "
                         f"partitions for ZeRO-3 only; stage {st})")
    if dtype is not None:
        if dtype not in LOAD_DTYPES:
            raise ValueError(f"load dtype {dtype!r}: expected one of {', '.join(LOAD_DTYPES)}")
        dt, ds = dtype, f"--load-dtype {dtype}"
    elif hf and checkpoint_dtype in LOAD_DTYPES:
        dt, ds = checkpoint_dtype, (f"HF from_pretrained: the checkpoint's dtype ({checkpoint_dtype}, config.json "
                                    f"torch_dtype), as transformers >= 5 loads by default (dtype=\"auto\"); "
                                    f"pass --load-dtype to override")
    elif hf:
        dt, ds = "fp32", ("assumed fp32: the model's config has no torch_dtype, so from_pretrained's dtype=\"auto\" "
                          "falls back to torch's default dtype (pass --load-dtype bf16 for a bf16 checkpoint)")
    else:
        dt, ds = "fp32", LoadAssumption.dtype_source + " (pass --load-dtype bf16 for torch_dtype=bfloat16)"
    if low_cpu_mem_usage is not None:
        lc, ls = bool(low_cpu_mem_usage), ("--low-cpu-mem-usage" if low_cpu_mem_usage else "--no-low-cpu-mem-usage")
    else:
        lc, ls = True, LoadAssumption.low_cpu_mem_usage_source
    # HF under ZeRO-3: rank 0 reads the checkpoint's tensors as stored (no cast): its dtype, else
    # the load dtype assumed for it (transformers modeling_utils.py _load_pretrained_model)
    sd = (checkpoint_dtype if checkpoint_dtype in LOAD_DTYPES else dt) if hf and zi else None
    if pipeline_build is not None and pipeline_build not in PIPELINE_BUILDS:
        raise ValueError(f"pipeline build {pipeline_build!r}: expected one of {', '.join(PIPELINE_BUILDS)}")
    if pipeline_parallel == 1:
        pb, pbs = None, (f"{PIPELINE_BUILD_IGNORED} ({pipeline_build}): " if pipeline_build is not None else "") + \
            PIPELINE_BUILD_NOT_READ
    else:
        pb, pbs = ((pipeline_build, f"--pipeline-build {pipeline_build}") if pipeline_build is not None else
                   ("stage", LoadAssumption.pipeline_build_source))
    return LoadAssumption(zi, zs, dt, ds, lc, ls, sd, LoadOptions(zero_init, dtype, low_cpu_mem_usage, hf,
                                                                  hf_is_zero3, checkpoint_dtype,
                                                                  pipeline_build=pipeline_build),
                          pipeline_build=pb, pipeline_build_source=pbs)


def checkpoint_load_dtype(hf_config: dict[str, Any] | None) -> str | None:
    """The load dtype (fp32/fp16/bf16) a Hugging Face config.json names: its ``dtype`` (transformers
    >= 5 writes that) else ``torch_dtype``, with an optional ``torch.`` prefix; None when the config
    is absent, has neither key or names another dtype (from_pretrained then loads in torch's
    default dtype, fp32). A name that is no torch dtype was refused when the config was read
    (:func:`advisor.model.specs.checked_hf_dtype`)."""
    if not hf_config:
        return None
    v = hf_config.get("dtype") or hf_config.get("torch_dtype")
    return TORCH_TO_TRAINING.get(torch_dtype_name(v) or "") if v else None


def zero_init_load_peak(sizes: list[tuple[str, int]], W: int, D: int, Dl: int,
                        cast: bool | None = None, swap_min: int | None = None,
                        skip: "tuple[int, int, int] | None" = None, pf: int = 1) -> tuple[int, int, str]:
    """The high-water mark of building a model under ``deepspeed.zero.Init`` on one rank:
    (bytes of partitions live then, bytes of full tensors live then, the module and moment).

    ``sizes``: (owning module, elements) of every parameter in construction order; ``W``: the
    partition world size; ``D``: zero.Init's dtype (the config's 16-bit dtype, else fp32:
    ``partition_parameters.py`` InsertPostInitMethodToModuleSubClasses._set_dtype); ``Dl``: the
    dtype the module's code creates its tensors in (torch's default dtype, or HF ``torch_dtype``);
    ``cast``: whether the two dtypes differ (default ``Dl != D``; give it, since fp16 and bf16 are
    both 2 B: a bf16 checkpoint under an fp16 config is cast too, both copies alive); ``swap_min``
    (offload_param nvme): partitions of at least that many bytes are written to NVMe through the
    swapper's pinned buffers and released at once (``_partition_param``: get_buffer, then
    swap_out_and_release), so they are not counted here; smaller ones stay in host memory.

    DeepSpeed 0.19.8, ``runtime/zero/partition_parameters.py``:

    * a tensor constructor (``torch.empty`` ...) is wrapped by zero_wrapper_for_fp_tensor_constructor:
      the tensor is created in ``Dl`` and then ``tensor.data = tensor.data.to(D)``, so while it is
      cast both copies exist (n x (Dl + D) bytes; just n x D when Dl == D, ``.to`` is a no-op);
    * a module's parameters stay whole until its ``__init__`` returns (partition_after runs
      _post_init_method then), beside the partitions of the modules built before;
    * _post_init_method partitions them one by one (_zero_init_param -> _partition_param): the
      partition ``ceil(n / W)`` x D is allocated (torch.empty) and filled while the whole tensor
      is alive, then free_param drops the whole tensor.

    Every rank holds ``ceil(n / W)`` elements of each parameter (padding included), so the
    figure is the same on every rank.

    ``skip`` = (at, unit, layers): ``sizes`` stands for a model whose identical layers
    (``model.parallel.layer_repeat``) are all but two left out: ``sizes[at - unit:at]`` is the first
    layer, ``sizes[at:at + unit]`` the last, and ``layers`` identical layers between them are not
    listed. Each layer adds the same partitions d >= 0 (bytes) to what is built, so a left-out layer's
    instants are those of the first plus a multiple of d: all equal to the first's (d = 0), or all
    below the last layer's same instant (d > 0); either way none is the first strictly largest, and
    the walk adds layers x d before the last layer instead (:func:`zero_init_load_peak_of`).

    ``pf``: each parameter's partitions in units of its primary one: 1, or with hpZ (h = zero_hpz_partition_size
    dividing W) 1 + W / h, its secondary partition of ceil(n / W) x W / h elements made just before the primary
    one (_partition l.1768-1769 -> _partition_param_sec l.1912-1915) and kept beside it. Engine probe
    z3_bf16_hpz2_zinit_w2 (TINY, W = h = 2, 2026-12-06): load 178,194 B on both ranks, 158,628 B without the
    secondaries (-19,566 B: l1's 19,566 B of them beside l2.weight being built)."""
    if cast is None:
        cast = Dl != D
    # the same walk as written above, with the running maximum kept as a number: a candidate
    # replaces the best only when its total is strictly larger (the first of equal totals wins),
    # and its description is built only then (a tuple and a key call per tensor made this the
    # largest single pass of generate at 1e5 layers, issue 21)
    build = Dl + (D if cast else 0)
    mods = list(map(operator.itemgetter(0), sizes))
    if skip is None and len(mods) > 1 and not any(map(operator.eq, mods, itertools.islice(mods, 1, None))):
        if SIZE_RUNS:
            return _single_param_load_peak_runs(mods, list(map(operator.itemgetter(1), sizes)), W, D, build, swap_min,
                                                pf)
        return _single_param_load_peak(sizes, mods, W, D, build, swap_min, pf)
    best = (0, 0, "")
    top = 0
    done = 0  # partitions of the modules already built, bytes
    i = 0
    total = len(sizes)
    at, first_at, done_first = (skip[0], skip[0] - skip[1], 0) if skip is not None else (-1, -1, 0)
    while i < total:
        if i == first_at:
            done_first = done
        elif i == at:
            done += (done - done_first) * skip[2]  # the left-out layers' partitions
        mod, n = sizes[i]
        j = i + 1
        while j < total and sizes[j][0] == mod:
            j += 1
        if j == i + 1:
            # a module of one parameter (the loops below with one tensor, unrolled: a 1M-tensor
            # inventory of such modules spent ~1 s in the general form, issue 21)
            c = n * build
            if done + c > top:
                top, best = done + c, (done, c, f"{mod}: building a parameter")
            pb = zero3_partition_numel(n, W) * D * pf
            if swap_min is not None and pb >= swap_min:
                pb = 0
            if done + pb + n * D > top:
                top, best = done + pb + n * D, (done + pb, n * D, f"{mod}: partitioning")
            done += pb
            i = j
            continue
        full = 0
        for k in range(i, j):  # construction: the earlier tensors of the module whole, this one being cast
            n = sizes[k][1]
            c = full + n * build
            if done + c > top:
                top, best = done + c, (done, c, f"{mod}: building a parameter")
            full += n * D
        parts = 0
        for k in range(i, j):  # partitioning: this tensor's partition allocated before its whole copy is freed
            n = sizes[k][1]
            pb = zero3_partition_numel(n, W) * D * pf
            parts += 0 if swap_min is not None and pb >= swap_min else pb
            if done + parts + full > top:
                top, best = done + parts + full, (done + parts, full, f"{mod}: partitioning")
            full -= n * D
        done += parts
        i = j
    return best


def _single_param_load_peak(sizes: list[tuple[str, int]], mods: list[str], W: int, D: int, build: int,
                            swap_min: int | None, pf: int = 1) -> tuple[int, int, str]:
    """:func:`zero_init_load_peak` where every module has one parameter (no two neighbours share a
    module: Llama-like layers without biases): the same instants, as columns (issue 21: the walk was
    ~0.5 s at 1e5 layers). Module k's building instant is done_k + n_k x build, its partitioning
    instant done_k + pb_k + n_k x D, done_k the partitions before it; the first strictly largest wins,
    building before partitioning within a module."""
    # Streamed, not listed: the columns of a 1.9M-tensor inventory as lists of ints held ~400 MB at
    # once (the command's peak); each instant's value is made, compared and dropped (C-level maps),
    # and equal sizes share one partition int.
    ns = list(map(operator.itemgetter(1), sizes))
    pb_of = {n: -(-n // W) * D * pf for n in set(ns)}
    if swap_min is not None:
        pb_of = {n: 0 if pb >= swap_min else pb for n, pb in pb_of.items()}
    kept = list(map(pb_of.__getitem__, ns))

    def building():
        return map(operator.add, itertools.accumulate(kept, initial=0), map(operator.mul, ns, itertools.repeat(build)))

    def parting():
        return map(operator.add, map(operator.add, itertools.accumulate(kept, initial=0), kept),
                   map(operator.mul, ns, itertools.repeat(D)))

    top = max(max(building()), max(parting()))
    if top <= 0:
        return (0, 0, "")
    L = len(ns)
    ib = next(itertools.compress(itertools.count(), map(operator.eq, building(), itertools.repeat(top))), L)
    ip = next(itertools.compress(itertools.count(), map(operator.eq, parting(), itertools.repeat(top))), L)
    if ib <= ip:
        return (sum(itertools.islice(kept, ib)), ns[ib] * build, f"{mods[ib]}: building a parameter")
    return (sum(itertools.islice(kept, ip)) + kept[ip], ns[ip] * D, f"{mods[ip]}: partitioning")


#: True: :func:`_single_param_load_peak_runs` (runs of equal sizes, one candidate instant a run); False: the
#: column per tensor of :func:`_single_param_load_peak`, the reference of tests/test_inventory_columns_identity.py.
SIZE_RUNS = True


def _single_param_load_peak_runs(mods: list[str], ns: list[int], W: int, D: int, build: int,
                                 swap_min: int | None, pf: int = 1) -> tuple[int, int, str]:
    """:func:`_single_param_load_peak` over runs of consecutive tensors of equal size (an inventory of N
    identical tensors is one run): in a run of k tensors of n elements each adds the same partition
    pb >= 0 to what is built, so its building instants done_j + n x build and its partitioning instants
    done_j + pb + n x D rise by pb a tensor: the first strictly largest of the run is its last (pb > 0)
    or its first (pb = 0, all equal), and only that one is compared. O(runs) after one C-level pass
    that finds them (the per-tensor columns took ~2.5 s of a 2M-tensor inventory, issue 21)."""
    L = len(ns)
    starts = [0, *itertools.compress(range(1, L), map(operator.ne, ns, itertools.islice(ns, 1, None)))]
    rn = list(map(ns.__getitem__, starts))
    lens = list(map(operator.sub, itertools.chain(itertools.islice(starts, 1, None), (L,)), starts))
    pb_of = {n: -(-n // W) * D * pf for n in set(rn)}
    if swap_min is not None:
        pb_of = {n: 0 if pb >= swap_min else pb for n, pb in pb_of.items()}
    kept = list(map(pb_of.__getitem__, rn))
    before = list(itertools.accumulate(map(operator.mul, kept, lens), initial=0))  # done at each run's start
    off = [k - 1 if pb > 0 else 0 for k, pb in zip(lens, kept)]  # the run's candidate, from its start
    done = list(map(operator.add, before, map(operator.mul, off, kept)))
    building = list(map(operator.add, done, map(operator.mul, rn, itertools.repeat(build))))
    parting = list(map(operator.add, map(operator.add, done, kept), map(operator.mul, rn, itertools.repeat(D))))
    top = max(max(building), max(parting))
    if top <= 0:
        return (0, 0, "")
    R = len(rn)
    rb = next(itertools.compress(itertools.count(), map(operator.eq, building, itertools.repeat(top))), R)
    rp = next(itertools.compress(itertools.count(), map(operator.eq, parting, itertools.repeat(top))), R)
    ib = starts[rb] + off[rb] if rb < R else L
    ip = starts[rp] + off[rp] if rp < R else L
    if ib <= ip:
        return (done[rb], rn[rb] * build, f"{mods[ib]}: building a parameter")
    return (done[rp] + kept[rp], rn[rp] * D, f"{mods[ip]}: partitioning")


def zero_init_load_peak_of(inv: Inventory, W: int, D: int, Dl: int, cast: bool | None = None,
                           swap_min: int | None = None, repeat: bool = True, pf: int = 1) -> tuple[int, int, str]:
    """:func:`zero_init_load_peak` of ``inv``'s parameters (owning modules, :func:`module_names`, in
    inventory order). Where its layers are identical (``model.parallel.layer_repeat``, at least 4)
    and ``repeat``, only the first and last layer are listed and the others skipped (``skip``): the same
    figures (tests/test_layer_repeat_identity.py compares with the whole walk; a 1e5-layer model's walk
    was ~0.9 s, issue 21)."""
    from advisor.model.parallel import layer_repeat
    names = module_names(inv)
    rep = layer_repeat(inv) if repeat else None
    if rep is None or rep.count < 4:
        ns = list(map(operator.attrgetter("numel"), inv.tensors))
        if SIZE_RUNS and len(names) > 1 and not any(map(operator.eq, names, itertools.islice(names, 1, None))):
            # every module one parameter: no (module, size) pair per tensor (zero_init_load_peak's dispatch)
            build = Dl + (D if (Dl != D if cast is None else cast) else 0)
            return _single_param_load_peak_runs(names, ns, W, D, build, swap_min, pf)
        return zero_init_load_peak(list(zip(names, ns)), W, D, Dl, cast, swap_min, pf=pf)
    h, u, e = rep.head, rep.unit, rep.end
    idx = list(itertools.chain(range(h + u), range(e - u, len(names))))
    ts = inv.tensors
    sizes = [(names[i], ts[i].numel) for i in idx]
    return zero_init_load_peak(sizes, W, D, Dl, cast, swap_min, skip=(h + u, u, rep.count - 2), pf=pf)


def load_entries(ec: EffectiveConfig, ledger: Ledger, load: LoadAssumption, rank: int) -> list[Entry]:
    """Entries (life ``load``) of the load phase on one rank at its high-water mark: without
    zero.Init the full host copy (N x load-dtype bytes, twice with low_cpu_mem_usage false); under
    zero.Init (:func:`zero_init_load_peak`) the partitions built so far plus the one module
    materialised whole on the accelerator (zero.Init's ``local_device``: its tensor-constructor
    wrappers pass ``device=local_device``, partition_parameters.py _add_tensor_creation_wrappers).
    The partitions live where zero.Init's ``remote_device`` is: the accelerator, or host memory
    with ``offload_param`` (pinned when its ``pin_memory``; an NVMe partition is swapped out and
    its buffer released at once, _partition_param -> swap_out_and_release, so it counts on nvme)."""
    inv = ledger.plan.inventory
    cl = ledger.plan.cluster
    if load.zero_init:
        W = max(1, cl.zero_world_size)
        if cl.tensor_parallel > 1 and cl.expert_parallel <= 1 and not load.options.hf and not ec.builds_whole_model:
            # TENSOR_PARALLEL_LOAD: zero.Init partitions the tensor-parallel shard each rank builds over the
            # ZeRO group (the shard the ledger's resting state partitions, advisor.model.parallel.shard).
            # With --hf (HF_WHOLE_LOAD) from_pretrained builds the whole model under zero.Init, partitioned over W;
            # so does a model the config's AutoTP shards only inside deepspeed.initialize (AUTO_SHARD_WHOLE_LOAD).
            # Under expert parallelism the whole model over W too: at ZeRO-3 deepspeed.initialize refuses
            # DeepSpeed's own MoE layer (rule G008: runtime/engine.py l.2709-2710), so no rank builds only its
            # num_experts / ep_size experts; every rank builds all of them (AutoEP swaps the blocks only later,
            # inside deepspeed.initialize, engine.py l.816-821)
            inv = _whole_inventory(ledger)
        D = DTYPE_BYTES[ec.model_dtype]
        Dl = DTYPE_BYTES[load.dtype]
        cast = load.dtype != ec.model_dtype
        op = ec.offload_param_effective
        swap_min = swap_threshold_bytes(ec) if op == "nvme" else None
        # once per (tensor list, its arguments), not per plan: generate's plans share the inventory
        # hpZ: each secondary partition made beside its primary one (zero_init_load_peak's pf)
        h = min(ec.zero.zero_hpz_partition_size or 1, W)
        pf = 1 + W // h if h > 1 and W % h == 0 and op != "nvme" else 1
        parts, full, where = inv.memo(("zero_init_load_peak", W, D, Dl, cast, swap_min) + ((pf,) if pf > 1 else ()),
                                      lambda: zero_init_load_peak_of(inv, W, D, Dl, cast, swap_min, pf=pf))
        src = "runtime/zero/partition_parameters.py:Init (_post_init_method, _partition_param)"
        out = [Entry(rank, "accelerator", "parameters", "zero_init_module_whole", full, "load",
                     f"the parameters of one module whole in {ec.model_dtype}"
                     + (f" (plus the {load.dtype} tensor being cast)" if cast else "")
                     + f" before zero.Init partitions them; peak at {where}", src)]
        if op == "none":
            tier = "accelerator"
        else:
            pin = bool(ec.zero.offload_param.pin_memory)
            tier = "host_pinned" if pin else "host_pageable"
        out.append(Entry(rank, tier, "parameters", "zero_init_partitions", parts, "load",
                         "sum ceil(n_i / W) x D of the parameters partitioned before that instant"
                         + (f", x {pf} with hpZ's secondary partitions (ceil(n_i / W) x W / {h} each)" if pf > 1 else "")
                         + (f" (nvme: those below the {swap_min:,} B aio swap size, kept in host memory; "
                            "_partition_param puts them on the cpu)" if swap_min is not None else ""), src))
        if op == "nvme":
            files = zero3_param_swap_bytes_counted(ec, zero3_partition_counts(inv, W))
            if files:
                out.append(Entry(rank, "nvme", "parameters", "zero_init_partitions", files, "load",
                                 f"partitions of at least {swap_min:,} B, swapped out as each is made "
                                 "(_partition_param -> swap_out_and_release; every one by the end of the load)",
                                 "runtime/swap_tensor/partitioned_param_swapper.py:AsyncPartitionedParameterSwapper.swap_out"))
            # zero.Init itself makes the parameter swapper (partition_parameters.py Init.__init__ l. 1174:
            # AsyncPartitionedParameterSwapper(_ds_config, self.dtype)), whose pinned swap buffers are
            # allocated in its constructor, before the first parameter; the engine keeps that swapper
            # (stage3.py uses param.nvme_swapper), so these are the ledger's persistent buffers, live from load
            bufs = _swap_buffer_entries(ledger, rank, "load", "made by zero.Init, at load")
            if bufs and bufs[1].bytes > parts + full:
                # the RAM peak is the swapper's construction itself, before any parameter exists
                out = bufs + out[2:]
            else:
                out += bufs[:1]
        return out + _state_dict_instant_entries(ec, ledger, load, rank, swap_min)
    whole = "whole model"
    pp_whole = cl.pipeline_parallel > 1 and load.pipeline_build == "whole"
    if pp_whole:
        # PIPELINE_WHOLE_LOAD: every rank builds the whole model (its tensor-parallel shard), then
        # PipelineModule keeps the stage's modules and holds the others in _layer_specs
        inv = _whole_inventory(ledger)
        whole = f"whole model, built before PipelineModule keeps stage {cl.coords(rank)[0]}'s layers"
    elif cl.pipeline_parallel > 1:
        # PIPELINE_STAGE_LOAD: a PipelineModule built from LayerSpecs builds only its stage's layers
        inv = _stage_inventory(ledger, rank)
        whole = f"stage {cl.coords(rank)[0]}'s layers ({PIPELINE_STAGE_LOAD})"
    elif builds_shard(cl, load, ec):
        # TENSOR_PARALLEL_LOAD: each rank builds only its tensor-parallel shard (and its experts)
        inv = _whole_inventory(ledger)
        whole = (f"this rank's shard of the model (tensor parallel {cl.tensor_parallel}"
                 + (f", expert parallel {cl.expert_parallel}" if cl.expert_parallel > 1 else "")
                 + f"; {TENSOR_PARALLEL_LOAD})")
    elif cl.tensor_parallel > 1 or cl.expert_parallel > 1:
        # HF_WHOLE_LOAD: the HF Trainer's from_pretrained builds the whole model, all experts, on every rank
        # or AUTO_SHARD_WHOLE_LOAD: DeepSpeed's AutoTP / AutoEP shards it only inside deepspeed.initialize
        whole = f"whole model, all of it on every rank ({whole_load_words(ec, load)})"
    N = inv.numel
    Dl = DTYPE_BYTES[load.dtype]
    copies = 1 if load.low_cpu_mem_usage else 2
    out = [Entry(rank, "host_pageable", "parameters", "load_model_copy", N * Dl * copies, "load",
                 f"{'' if copies == 1 else '2 x '}N x {Dl} = {N} x {Dl}{'' if copies == 1 else ' x 2'} "
                 f"({whole} in {load.dtype} on every rank before deepspeed.initialize; no zero.Init)",
                 "engine.py:DeepSpeedEngine._configure_distributed_model (the module is built before "
                 "initialize); runtime/zero/partition_parameters.py:Init is what avoids it"
                 + ("; runtime/pipe/module.py:PipelineModule.__init__ (layers = the modules of the whole model)"
                    if pp_whole else "; runtime/pipe/module.py:PipelineModule._build (LayerSpec.build only for "
                    "this stage's layers)" if cl.pipeline_parallel > 1 else ""))]
    if pp_whole:
        Ns = _stage_inventory(ledger, rank).numel
        off = max(0, N - Ns)
        if off:
            out.append(Entry(rank, "host_pageable", "parameters", "pipe_offstage_layers", off * Dl, "after_load",
                             f"(N - N_stage) x {Dl} = ({N} - {Ns}) x {Dl} (the other stages' modules, in "
                             f"{load.dtype}, held by PipelineModule._layer_specs from the load on: "
                             f"{PIPELINE_WHOLE_LOAD})",
                             "runtime/pipe/module.py:PipelineModule.__init__ l.188 (self._layer_specs = "
                             "list(layers)), _build l.235-276 (registers specs[_local_start:_local_stop] only)"))
    return out


#: The load assumption under tensor (and expert) parallelism: the words the load entry carries. Which tier: host
#: memory, as the entry has always been counted (an upper bound of the host's share: Megatron's default puts it on
#: the accelerator instead).
TENSOR_PARALLEL_LOAD = ("each rank builds only its tensor-parallel shard: Megatron's ColumnParallelLinear allocates "
                        "output_size / tp x input_size, RowParallelLinear output_size x input_size / tp, "
                        "VocabParallelEmbedding vocab / tp x hidden (Megatron-DeepSpeed "
                        "megatron/core/tensor_parallel/layers.py __init__ of each: torch.empty(..._per_partition ...)); "
                        "norms are replicated; deepspeed/moe/layer.py MoE l.63-72 builds num_experts / ep_size "
                        "experts. Counted in host memory, as with --use-cpu-initialization; Megatron's default "
                        "(no --use-cpu-initialization) builds the shard on the accelerator in params_dtype, so "
                        "the host figure is then an upper bound")


#: The load assumption under tensor / expert parallelism with the HF Trainer (--hf): the words the load entry carries.
HF_WHOLE_LOAD = ("--hf: from_pretrained builds the whole model on every rank; the HF Trainer applies tensor "
                 "parallelism only afterwards (deepspeed.tp_model_init in transformers/integrations/deepspeed.py "
                 "deepspeed_init l.661-668), and an HF model has no DeepSpeed MoE layer, so every rank holds all "
                 "experts")


#: The load assumption when the config turns on DeepSpeed's AutoTP / AutoEP (the words the load entry carries).
AUTO_SHARD_WHOLE_LOAD = ("the config turns on DeepSpeed's AutoTP (tensor_parallel.autotp_size > 1) or AutoEP "
                         "(expert_parallel.enabled): deepspeed.initialize shards the model only inside the engine "
                         "(runtime/engine.py l.587-588 _configure_expert_parallel, l.595-596 "
                         "_configure_tensor_parallel -> _apply_autotp_partitioning l.1009), so every rank builds "
                         "the whole model, all experts, before it")


def builds_shard(cl: Any, load: LoadAssumption, ec: Any = None) -> bool:
    """Whether each rank builds only its tensor-parallel / expert shard at the load
    (:data:`TENSOR_PARALLEL_LOAD`: a Megatron(-DeepSpeed) model under TP or EP), not the whole model:
    never with the HF Trainer (``load.options.hf``, :data:`HF_WHOLE_LOAD`), nor when the config ``ec``
    (an :class:`advisor.config.effective.EffectiveConfig`) turns on AutoTP / AutoEP
    (``ec.builds_whole_model``, :data:`AUTO_SHARD_WHOLE_LOAD`)."""
    return ((cl.tensor_parallel > 1 or cl.expert_parallel > 1) and not load.options.hf
            and not (ec is not None and ec.builds_whole_model))


def whole_load_words(ec: Any, load: LoadAssumption) -> str:
    """Why every rank builds the whole model under TP / EP when :func:`builds_shard` is false: AutoTP / AutoEP
    in the config (:data:`AUTO_SHARD_WHOLE_LOAD`), else the HF Trainer (:data:`HF_WHOLE_LOAD`)."""
    return AUTO_SHARD_WHOLE_LOAD if ec is not None and ec.builds_whole_model else HF_WHOLE_LOAD


#: The load assumption under pipeline parallelism (words the load entry and the estimate's assumptions carry).
PIPELINE_STAGE_LOAD = ("PipelineModule from LayerSpecs builds only its stage: deepspeed/runtime/pipe/module.py "
                       "PipelineModule._build (l.235-276) calls LayerSpec.build / TiedLayerSpec.build only for "
                       "specs[_local_start:_local_stop], the stage's layers (_set_bounds, l.543-553), so each rank "
                       "loads its stage's shard; a model built whole and then split (nn.Module layers) is not this")


#: The load assumption under pipeline parallelism with ``--pipeline-build whole`` (the words the
#: ``pipe_offstage_layers`` entry and the estimate's load section carry).
PIPELINE_WHOLE_LOAD = ("the model built whole on every rank and its modules given to PipelineModule: "
                       "deepspeed/runtime/pipe/module.py PipelineModule.__init__ keeps every layer in "
                       "self._layer_specs = list(layers) (l.188) and _build (l.235-276) registers only the "
                       "stage's, specs[_local_start:_local_stop] (an nn.Module is added as it is, l.251-255); "
                       "nothing frees the others, so each rank holds the whole model in the load dtype at load "
                       "and the other stages' layers, in the load dtype, in host memory for the PipelineModule's "
                       "life (self.to(device) l.215, initialize's cast and module.to move only the registered "
                       "stage)")


#: The pipe entries (``state.pipeline_stage_entries``, lifetime ``persistent``) the PipelineEngine makes in its
#: first ``train_batch``, not in ``deepspeed.initialize``: the receive buffers (runtime/pipe/engine.py
#: _exec_recv_activations l.1123-1124, _exec_recv_grads l.1178-1180), the first stage's input ids
#: (_exec_load_micro_batch l.898) and the last stage's kept outputs with their graph's inputs and gradients
#: (_exec_backward_pass l.796-799): absent at the ``initialize`` instant (cell pp2_whole_z1_bf16_w2: what is live
#: after initialize was 5,616 B (stage 1) / 624 B (stage 0) under the ledger while they were counted there).
PIPE_TRAIN_BATCH_ITEMS = ("pipe_recv_buf", "pipe_grad_buf", "pipe_inputs_kept", "pipe_outputs_kept",
                          "pipe_inputs_grads_kept")

#: Lifetimes of what micro-step 1's backward leaves for the later micro-steps of an iteration (the gradients it
#: accumulates, ZeRO-1's ipg bucket): not live at a forward that runs before any backward of its iteration
#: (:func:`pipe_warmup_forwards`).
ACCUMULATED_LIVES = ("accumulated", "accumulated_forward", "compact_accumulated")

#: Under pipeline parallelism at GA > 1, the steady iteration's backward of micro-step 1: a stage's first backward
#: holds the most micro-batches in flight (min(pp - stage, ga), :func:`pipe_in_flight`; schedule.py num_pipe_buffers
#: l.247-256), with the state the first step made (its optimizer states, the pipe buffers) live. Without it the
#: steady iteration had only micro-step ga's instants, where a stage before the last holds one micro-batch (its
#: backward runs the others' back first) and, in its forward, no gradient: the peak of stage 0 of Llama-2-13B on
#: 4 stages at GA 4 read 96.55 GiB (steady forward) where the first iteration's backward 1 plus the step's state
#: is ~103.8 GiB.
STEADY_FIRST_BACKWARD = "steady:backward:1"
#: The lifetimes that follow the micro-step, not the iteration: at :data:`STEADY_FIRST_BACKWARD` they are as at
#: the first iteration's ``backward:1`` (nothing accumulated yet); the rest as at the steady iteration.
_MICROSTEP_LIVES = frozenset(("accumulated", "accumulated_backward", "first_microstep_backward",
                              "compact_accumulated", "accumulated_forward", "accumulated_reduce"))

#: Items of the engine's own all-reduce (``DeepSpeedEngine.allreduce_gradients``, lifetime ``in_backward``: made in
#: backward without pipeline parallelism) that the PipelineEngine makes in its ReduceGrads instruction instead: it
#: turns the backward's all-reduce off (runtime/pipe/engine.py l.80, ``enable_backward_allreduce = False``) and
#: all-reduces in ``_exec_reduce_grads`` (l.287-295), so under pipeline parallelism they are live at the reduce
#: instants, not at the backward ones (measured on a 2-stage PipelineModule, stage 0 fp16 FP16_Optimizer: backward
#: -26,752 / -26,816 B under the engine with them, the reduce instant = the engine's ReduceGrads within 0.06%).
#: Without pipeline parallelism the engine all-reduces only at the accumulation boundary (engine.py
#: ``allreduce_gradients`` l.3088-3095: "Communicate only at gradient accumulation boundaries" below ZeRO-2), so at
#: GA > 1 they are not live in an earlier micro-step's backward either (measured, stage 0 fp16 and bf16 at GA 2,
#: W 2: backward:1 was -86,384 B, -11.1%, on both ranks with them; cell z0_fp16_tbsga2_w2).
PIPE_REDUCE_ONLY_ITEMS = ("allreduce_bucket_flat",)


#: The items of ZeRO-3's re-fetch in micro-step 2's forward (lifetime ``refetch_forward``).
REFETCH_ITEMS = ("zero3_refetch_prefetch", "zero3_nvme_refetch")


def middle_microstep(ec: EffectiveConfig, ledger: Ledger, ga: int) -> tuple[bool, bool, bool]:
    """(forward, backward, refetch): whether the timeline has a middle micro-step's ``forward:2`` / ``backward:2``
    instant at ``ga`` micro-steps per optimizer step, and whether its ``forward:2`` is micro-step 2's alone.

    A micro-step m with 1 < m < ga holds the same state at every such m: what micro-step 1 left (the kept
    param.grad, ZeRO-2's grads_in_partition, ZeRO-3's gradient partitions: lifetimes ``accumulated*``) and, in
    its backward, the new gradient being added into it (``accumulate_grad_new``); nothing is reduced before the
    boundary below ZeRO-2 (engine.py ``allreduce_gradients`` l.3088-3095) and the optimizer steps only at the
    boundary (l.3611-3615, l.3463). So one pair stands for all (engine cells at GA 4: the rows of m = 2 and m = 3
    are compared with the same instants). Only ZeRO-3's forward differs between them: micro-step 2 fetches again
    what the first backward released (:data:`REFETCH_ITEMS`), micro-step 3 on finds them gathered, as forward:ga
    does (``refetch`` true: :func:`advisor.engine.measure.phase_instants` then compares m >= 3 with ``forward:ga``).

    None under pipeline parallelism (its 1F1B schedule puts a middle micro-batch's passes at other moments: the
    pipe instants, :func:`pipe_schedule`). Where every backward reduces or accumulates inside it
    (:func:`reduces_in_backward`: ZeRO-2, BF16_Optimizer) the middle backward is followed by its own reduce instant
    ``reduce:2`` (:data:`MICROSTEP_REDUCES`): the state of the boundary's reduce less what only the boundary makes
    (lifetimes ``boundary_reduce``, ``reduce_step``). No ``backward:2`` for ZeRO-2 under optimizer offload
    (lifetime ``first_microstep_reduce``: micro-step 1's reduce makes the host buffers a middle one finds made, a
    state no entry models yet, and no engine cell)."""
    refetch = ga > 2 and any(e.item in REFETCH_ITEMS for rl in ledger.ranks for e in rl.entries)
    if ga <= 2 or ledger.plan.cluster.pipeline_parallel > 1:
        return refetch, False, refetch
    return True, not any(e.life == "first_microstep_reduce" for rl in ledger.ranks for e in rl.entries), refetch


#: The reduce instants inside a backward before the accumulation boundary (:func:`reduces_in_backward`):
#: micro-step 1's and a middle micro-step's (:func:`middle_microstep`). The lifetimes ``boundary_reduce`` and
#: ``reduce_step`` are not live there, ``first_microstep_reduce`` only at ``reduce:1``.
MICROSTEP_REDUCES = ("reduce:1", "reduce:2")


def reduces_in_backward(ec: EffectiveConfig, ledger: Ledger, ga: int) -> bool:
    """Whether a backward before the accumulation boundary reduces (or accumulates into an optimizer buffer) inside
    it, at ``ga`` micro-steps per optimizer step: the timeline's ``reduce:1`` (and ``reduce:2`` for a middle
    micro-step, :func:`middle_microstep`). ZeRO-2: the gradient hooks and independent_gradient_partition_epilogue
    run in every backward (``runtime/zero/stage_1_and_2.py`` l.1016-1054: reduce_ipg_grads each time, only
    averaged_gradients at the boundary); BF16_Optimizer (bf16 with grad_accum_dtype fp32 at ZeRO-1 without offload,
    ``runtime/engine.py`` l.2305-2310): backward_epilogue adds every micro-step's gradients into its
    grad_accum_dtype buffer (``runtime/bf16_optimizer.py`` l.503-538), all-reducing only at the boundary."""
    return ga > 1 and (ec.zero.stage == 2 or ledger.wrapper == "BF16_Optimizer")


def _before_boundary(key: str, ga: int) -> bool:
    """Whether the timeline instant ``key`` is the backward of a micro-step before the accumulation boundary of
    its iteration: ``backward:k`` with k < ``ga`` (the first iteration's micro-steps; the steady iteration's
    ``steady:backward`` is its last, the boundary's)."""
    kind, _, num = key.partition(":")
    return kind == "backward" and num.isdigit() and int(num) < ga


def pipe_warmup_forwards(pp: int, stage: int, ga: int) -> tuple[str, ...]:
    """The forward instants of pipeline ``stage`` (of ``pp``) that run before the first backward of their
    iteration, at ``ga`` micro-batches per step. The PipelineEngine's TrainSchedule is 1F1B: a stage runs
    min(pp - stage, ga) forwards before its first backward (runtime/pipe/schedule.py TrainSchedule.steps
    l.197-245; the pipe buffers in flight, num_pipe_buffers l.247-256), so micro-batch ga's forward comes first
    where ga <= pp - stage: the timeline's ``forward:<ga>`` and ``steady:forward`` (micro-step ga of each
    iteration; ``forward:2`` too where the timeline has it) hold none of :data:`ACCUMULATED_LIVES` there.
    Measured on a real 2-stage PipelineModule (tests/engine/test_pipeline_engine.py, stage 0 at GA 2: F1 F2 B1
    B2): micro-step 1's bf16 gradients (26,752 B) and, at ZeRO-1, setup_buckets' ipg bucket (100,000 B) were
    counted at those instants before the engine made them. () without pipeline parallelism or at GA 1."""
    if pp <= 1 or ga <= 1 or ga > pp - stage:
        return ()
    return ("forward:2", f"forward:{ga}", "steady:forward")


def pipe_schedule(pp: int, stage: int, ga: int) -> list[tuple[str, int]]:
    """The forward and backward passes pipeline ``stage`` (of ``pp``) runs in one ``train_batch`` at ``ga``
    micro-batches, in order: ("F" | "B", micro-batch 1..ga). DeepSpeed's TrainSchedule.steps
    (runtime/pipe/schedule.py l.197-245) runs 2 (ga + pp - 1) steps, step ``i`` a forward where i and the stage
    have the same parity, else a backward, of the micro-batch ``_step_to_micro_batch`` (l.258-278) names:
    forward (i - i % 2) / 2 - stage // 2 (even and odd steps alike, l.280-288), backward
    i / 2 - pp + (stage + 1) // 2 on an even step (l.290-293), (i - 1) / 2 - pp + 1 + stage // 2 on an odd
    one (l.295-298); ids outside 0..ga-1 run nothing (``_valid_micro_batch`` l.80)."""
    out: list[tuple[str, int]] = []
    for i in range(2 * (ga + pp - 1)):
        fwd = i % 2 == stage % 2
        if fwd:
            mb = (i - i % 2) // 2 - stage // 2
        elif i % 2 == 0:
            mb = i // 2 - pp + (stage + 1) // 2
        else:
            mb = (i - 1) // 2 - pp + 1 + stage // 2
        if 0 <= mb < ga:
            out.append(("F" if fwd else "B", mb + 1))
    return out


def pipe_instant_passes(pp: int, stage: int, ga: int, key: str) -> tuple[int, int] | None:
    """(forwards, backwards) pipeline ``stage`` has run in its ``train_batch`` at the timeline instant ``key``
    (:func:`pipe_schedule`): ``forward:k`` is micro-batch k's forward done (it counts), ``backward:k`` and
    ``reduce:1`` (BF16_Optimizer's accumulation inside backward 1) micro-batch k's backward begun (it does not
    count; ``reduce:1`` counts backward 1); ``steady:forward`` / ``steady:backward`` are micro-step ga's and
    :data:`STEADY_FIRST_BACKWARD` micro-step 1's backward, the schedule being the same in every iteration. None for
    any other instant."""
    kind, _, num = key.partition(":")
    if key == STEADY_FIRST_BACKWARD:
        kind, k = "backward", 1
    elif kind == "steady" and num in ("forward", "backward"):
        kind, k = num, ga
    elif kind in ("forward", "backward", "reduce") and num.isdigit():
        k = int(num)
    else:
        return None
    if kind == "reduce" and k != 1 or not 1 <= k <= ga:
        return None
    order = pipe_schedule(pp, stage, ga)
    at = order.index(("F" if kind == "forward" else "B", k))
    fwd = sum(1 for c, _ in order[:at] if c == "F") + (kind == "forward")
    bwd = sum(1 for c, _ in order[:at] if c == "B") + (kind == "reduce")
    return fwd, bwd


def pipe_in_flight(pp: int, stage: int, ga: int, key: str) -> int | None:
    """Micro-batches whose activations pipeline ``stage`` holds at the timeline instant ``key``: forwards run
    minus backwards done (:func:`pipe_instant_passes`; autograd frees a micro-batch's saved tensors in its
    backward and the PipelineEngine its kept output at the backward's end, runtime/pipe/engine.py l.866). At most
    min(pp - stage, ga), the 1F1B bound the activation estimate's ``in_flight`` counts (schedule.py
    num_pipe_buffers l.247-256), reached at the first backward's start; fewer at ``forward:1`` (one) and at
    ``backward:ga`` (one: the others are run back). None where ``key`` is no such instant."""
    got = pipe_instant_passes(pp, stage, ga, key)
    return None if got is None else got[0] - got[1]


def pipe_first_batch_share(item: str, pp: int, stage: int, ga: int, key: str) -> tuple[int, int] | None:
    """(numerator, denominator) of a pipe entry's bytes (:data:`PIPE_TRAIN_BATCH_ITEMS`,
    ``state.pipeline_stage_entries``, counted whole from the first ``train_batch`` on) that the PipelineEngine has
    made at the first iteration's instant ``key``: it makes them lazily, micro-batch by micro-batch
    (runtime/pipe/engine.py): the first stage's input ids at each LoadMicroBatch (l.898), one per pipe buffer
    used; the gradient receive buffer at the first RecvGrad, just before the first backward (_allocate_zeros via
    _exec_recv_grads l.1178-1180); the last stage's outputs at each forward (l.751), kept to the step, the one
    being made counted by the activations (its logits), and the received inputs (l.1128) and their gradients
    (made in each backward) its graph holds. Measured on a 2-stage PipelineModule at GA 2
    (tests/engine/test_pipeline_engine.py): stage 0's gradient buffer (512 B) and second input ids (64 B) absent
    at its first forward, stage 1's kept logits one more per micro-batch.

    A forward instant of the last stage is its loss (l.757, the fp32 logits copy: the forward's peak), after l.751
    has put the new output in its buffer: the buffer's old output is gone by then, and so are its received input
    (replaced at RecvActivation, l.1128-1129) and that input's gradient; the kept ones are the other buffers',
    min(micro-batches before, buffers - 1), in the steady iteration too (measured: the steady forward was -2,004 B
    under the ledger with the reused buffer's logits, 1,536 B, and input gradient, 512 B, counted). None where all
    are made (the receive buffer, at the first RecvActivation before any forward; the rest of the steady
    iteration; the reduce and the step)."""
    from advisor.ledger.state import pipe_buffers_used
    if item not in PIPE_TRAIN_BATCH_ITEMS or item == "pipe_recv_buf":
        return None
    last_fwd = key == "steady:forward" and item in ("pipe_outputs_kept", "pipe_inputs_grads_kept")
    if key.startswith("steady") and not last_fwd:
        return None
    got = pipe_instant_passes(pp, stage, ga, key)
    if got is None:
        return None
    fwd, bwd = got
    nb = pipe_buffers_used(pp, stage, ga)
    backward = not key.startswith(("forward", "steady:forward"))
    if item == "pipe_grad_buf":
        return (1 if backward or bwd else 0), 1
    if item == "pipe_inputs_kept":
        return min(fwd, nb), nb
    if item == "pipe_outputs_kept":  # at a forward's loss its own output is the activations', the other buffers' kept
        return (min(fwd, nb) if backward else min(fwd - 1, nb - 1)), nb
    # pipe_inputs_grads_kept: the inputs (the forward's own among them) and the gradients of those run back
    return min(fwd, nb) + (min(bwd, nb) if backward else min(bwd, nb - 1)), 2 * nb


def _whole_inventory(ledger: Ledger) -> Any:
    """The whole model as one rank builds it before a PipelineModule keeps its stage
    (``--pipeline-build whole``): the plan's inventory, its tensor-parallel / expert shard
    (:func:`advisor.model.parallel.shard` at one pipeline stage) under TP / EP; memoised in
    ``plan.derived['whole_shard']``."""
    cl = ledger.plan.cluster
    if cl.tensor_parallel <= 1 and cl.expert_parallel <= 1:
        return ledger.plan.inventory
    got = ledger.plan.derived.get("whole_shard")
    if got is None:
        from advisor.model.parallel import shard
        got = ledger.plan.derived["whole_shard"] = shard(ledger.plan.inventory, cl.tensor_parallel, 1,
                                                         cl.expert_parallel)[0].inventory
    return got


def _stage_inventory(ledger: Ledger, rank: int) -> Any:
    """The inventory of ``rank``'s pipeline stage, tensor-parallel shard included
    (:func:`advisor.model.parallel.shard`, the split the ledger uses for the stage), memoised in
    ``plan.derived['init_shards']`` as :func:`init_entries` reads it."""
    from advisor.model.parallel import shard
    cl = ledger.plan.cluster
    shards = ledger.plan.derived.get("init_shards")
    if shards is None:
        shards = ledger.plan.derived["init_shards"] = shard(ledger.plan.inventory, cl.tensor_parallel,
                                                            cl.pipeline_parallel, cl.expert_parallel)
    return shards[min(cl.coords(rank)[0], len(shards) - 1)].inventory


def largest_gathered_module(inv: Any, W: int) -> int:
    """Elements of the largest module's own parameters gathered whole at ZeRO-3 (sum of
    ceil(n_i / W) x W over the tensors it owns, :func:`advisor.ledger.state.module_of`): what
    ``GatheredParameters`` over one module's parameters puts on each rank's accelerator."""
    def largest() -> int:
        mods: dict[str, int] = {}
        for t, m in zip(inv.tensors, module_names(inv)):
            mods[m] = mods.get(m, 0) + zero3_partition_numel(t.numel, W) * W
        return max(mods.values(), default=0)
    return inv.memo(("largest_gathered_module", W), largest)


def _state_dict_instant_entries(ec: EffectiveConfig, ledger: Ledger, load: LoadAssumption, rank: int,
                                swap_min: int | None) -> list[Entry]:
    """What every rank holds at ``load:state_dict`` (HF from_pretrained under ZeRO-3, after the
    model is built; rank 0's copy of the checkpoint is :func:`hf_state_dict_entries`): every
    zero.Init partition (sum ceil(n_i / W) x D, where offload_param puts them; with nvme those of
    at least the swap size on NVMe, and the swapper's pinned buffers) and one module's parameters
    gathered whole on the accelerator (integrations/deepspeed.py _load_state_dict_into_zero3_model:
    ``deepspeed.zero.GatheredParameters(params_to_gather, modifier_rank=0)`` per module, its own
    parameters, ``recurse=False``). Empty without ``load.state_dict_dtype``."""
    if load.state_dict_dtype is None:
        return []
    inv = ledger.plan.inventory
    W = max(1, ledger.plan.cluster.zero_world_size)
    D = DTYPE_BYTES[ec.model_dtype]
    op = ec.offload_param_effective

    def kept() -> int:
        tot = 0
        for t in inv.tensors:
            pb = zero3_partition_numel(t.numel, W) * D
            tot += 0 if swap_min is not None and pb >= swap_min else pb
        return tot
    parts = inv.memo(("zero_init_all_partitions", W, D, swap_min), kept)
    tier = "accelerator" if op == "none" else ("host_pinned" if ec.zero.offload_param.pin_memory else "host_pageable")
    src = "runtime/zero/partition_parameters.py:Init (_post_init_method, _partition_param)"
    out = [Entry(rank, tier, "parameters", "zero_init_partitions", parts, "load_state_dict",
                 "sum ceil(n_i / W) x D of every parameter (the model built under zero.Init)"
                 + (" below the aio swap size" if swap_min is not None else ""), src)]
    if op == "nvme":
        files = zero3_param_swap_bytes_counted(ec, zero3_partition_counts(inv, W))
        if files:
            out.append(Entry(rank, "nvme", "parameters", "zero_init_partitions", files, "load_state_dict",
                             f"partitions of at least {swap_min:,} B, swapped out at load", src))
        out += _swap_buffer_entries(ledger, rank, "load_state_dict", "made by zero.Init, at load")[:1]
    big = largest_gathered_module(inv, W)
    out.append(Entry(rank, "accelerator", "parameters", "hf_load_gathered_module", big * D, "load_state_dict",
                     f"largest module sum p_i x W x D = {big} x {D} (gathered one module at a time while "
                     "rank 0 copies the checkpoint into it)", HF_STATE_DICT_SOURCE))
    return out


def _swap_buffer_entries(ledger: Ledger, rank: int, life: str, why: str) -> list[Entry]:
    """The ledger's ``param_swap_buffers`` entry (offload_param nvme) with lifetime ``life``, then
    the staging copy alive while they are made: ``partitioned_param_swapper.py`` _configure_aio
    allocates ``self.buffers = torch.empty(...)`` (pageable) and then
    ``aio_read_handle.new_cpu_locked_tensor(numel, self.buffers)``, both alive until the
    assignment frees the first (measured on the engine: twice the buffers at that moment)."""
    out = []
    for e in ledger.rank(rank).entries:
        if e.item == "param_swap_buffers":
            out.append(Entry(rank, e.tier, e.cls, e.item, e.bytes, life, f"{e.formula} ({why})", e.source))
            out.append(Entry(rank, "host_pageable", e.cls, "param_swap_buffers_staging", e.bytes, life,
                             "the same bytes in the torch.empty that new_cpu_locked_tensor copies (while the swapper "
                             "is made, before any parameter is partitioned)",
                             "runtime/swap_tensor/partitioned_param_swapper.py:AsyncPartitionedParameterSwapper._configure_aio"))
    return out


def cast_peak(sizes: list[int], Dl: int, D: int) -> tuple[int, int]:
    """The high-water mark of casting a model's parameters one at a time from ``Dl`` to ``D``
    bytes per element (``engine.py`` _cast_module_mixed_precision: ``p.data = p.data.to(dtype)``
    in ``module.parameters()`` order, the old storage freed by the assignment): (bytes, index of
    the tensor being cast then). At tensor i: the earlier tensors in ``D``, this one in both, the
    later ones in ``Dl``."""
    total = sum(sizes) * Dl
    best, at, done = 0, 0, 0
    for i, n in enumerate(sizes):
        v = total - done * (Dl - D) + n * D
        if v > best:
            best, at = v, i
        done += n
    return best, at


def zero3_module_partition_peak(sizes: list[int], W: int, h: int = 1) -> tuple[int, int]:
    """Elements live on one device while ZeRO-3 partitions a whole model that is already there
    (``partition_parameters.py`` _convert_to_zero_parameters -> _partition_param, in
    ``module.parameters()`` order: each partition ``ceil(n_i / W)`` allocated on that device
    while the whole tensor is alive, then free_param drops it): (elements, index of the tensor).
    With hpZ (``h`` = zero_hpz_partition_size > 1) each tensor's secondary partition,
    ceil(n_i / W) x W / h elements, is made just before its primary one (_partition l.1768-1769 ->
    _partition_param_sec l.1912-1915) and kept. Engine z3_bf16_hpz2_w2 (TINY, W = h = 2, 2026-12-06,
    2 runs): initialize:module 132,780 B on both ranks, this 66,388 x 2 = 132,776 B at l2.weight
    (42,744 B of secondaries at site _partition_param_sec:1915; 105,682 B without them)."""
    total = sum(sizes)
    best, at, freed, parts = 0, 0, 0, 0
    for i, n in enumerate(sizes):
        parts += zero3_partition_numel(n, W) + (zero3_partition_numel(n, W) * W // h if h > 1 else 0)
        v = total - freed + parts
        if v > best:
            best, at = v, i
        freed += n
    return best, at


def init_entries(ec: EffectiveConfig, ledger: Ledger, load: LoadAssumption, rank: int) -> list[Entry]:
    """Entries of ``deepspeed.initialize`` before the optimizer partitions the model, on one rank,
    when the model was built without ``zero.Init`` (none under zero.Init: the parameters are
    already partitioned, ``engine.py`` is_zero_init_model skips the cast and the move). See the
    module docstring; DeepSpeed 0.19.8 ``runtime/engine.py`` _configure_distributed_model
    l. 2080-2094. Life ``init_cast`` (host_pageable, only when fp16/bf16 is on and the load
    dtype differs): :func:`cast_peak`. Life ``init_module`` (accelerator): the whole model,
    N x D bytes (D = the 16-bit dtype when fp16/bf16 is on, else the load dtype: DeepSpeed casts
    nothing then); at ZeRO-3 plus the first partitions being made
    (:func:`zero3_module_partition_peak`) where they go on the accelerator, or the first
    partition in host memory with offload_param cpu, beside the pinned swap buffers with nvme
    (Init(module=...) makes the swapper before partitioning). Under tensor / pipeline / expert
    parallelism N is the rank's shard (:func:`advisor.model.parallel.shard`). At ZeRO-1/2 also the entries of
    the instants inside the optimizer's construction (:func:`zero12_init_transients`); at ZeRO-3, with or without
    zero.Init, :func:`zero3_init_transients`."""
    hooks = zero3_init_transients(ec, ledger, rank) if zero3_init_transients_apply(ec, ledger, load) else []
    if load.zero_init:
        return hooks
    inv = ledger.plan.inventory
    cl = ledger.plan.cluster
    if cl.model_parallel:
        # the rank's module is its pipeline stage's tensor-parallel shard (what the engine moves)
        inv = _stage_inventory(ledger, rank)
    # the sizes and the O(tensors) peaks below are per (tensor list, dtypes, W): memoised, since
    # generate asks for them once per rank role of every plan (Inventory.memo)
    sizes = inv.memo("init_sizes", lambda: [t.numel for t in inv.tensors])
    N = inv.numel
    mp = ec.fp16_enabled or ec.bf16_enabled
    Dl = DTYPE_BYTES[load.dtype]
    dt = ec.model_dtype if mp else load.dtype
    D = DTYPE_BYTES[dt]
    src_e = "runtime/engine.py:DeepSpeedEngine._configure_distributed_model"
    out: list[Entry] = []
    if mp and load.dtype != ec.model_dtype:
        b, i = inv.memo(("cast_peak", Dl, D), lambda: cast_peak(sizes, Dl, D))
        out.append(Entry(rank, "host_pageable", "parameters", "init_cast_copy", b, "init_cast",
                         f"N x {Dl} - (earlier tensors) x {Dl - D} + n_i x {D} at tensor {i} "
                         f"({inv.tensors[i].name}): the model cast {load.dtype} -> {ec.model_dtype} one tensor "
                         "at a time in host memory, before module.to(device)",
                         src_e + " -> _cast_module_mixed_precision (p.data = p.data.to(param_dtype))"))
    acc = N * D
    formula = f"N x {D} = {N} x {D} (the whole model in {dt}, moved by self.module.to(self.device))"
    extra: list[Entry] = []
    if ec.zero.stage == 3:
        W = max(1, ledger.plan.cluster.zero_world_size)
        op = ec.offload_param_effective
        src_p = "runtime/zero/partition_parameters.py:Init._convert_to_zero_parameters (_partition_param)"
        if op == "none":
            h = min(ec.zero.zero_hpz_partition_size or 1, W)
            el, i = inv.memo(("zero3_module_partition_peak", W, h), lambda: zero3_module_partition_peak(sizes, W, h))
            acc = el * D
            formula += (f", then ZeRO-3 partitions it in place: peak {el} x {D} at tensor {i} "
                        "(its partition made before the whole tensor is freed"
                        + (f"; hpZ's secondary partitions, A_W(n_i) / {h}, made before each" if h > 1 else "") + ")")
        else:
            p0 = zero3_partition_numel(sizes[0], W) if sizes else 0
            formula += ", at ZeRO-3 before the first parameter is partitioned"
            if op == "cpu":
                tier = "host_pinned" if ec.zero.offload_param.pin_memory else "host_pageable"
                # hpZ: its secondary partition is made first, on the same remote device (_partition
                # l.1768-1769 -> _partition_param_sec l.1915, device=self.remote_device). Engine probe
                # z3_bf16_hpz2_op_w2 (TINY, W = h = 2, 2026-12-06): on the CPU accelerator both tiers are one
                # device, whose sum peaks later, at l2.weight (l1's and l2.weight's partitions and secondaries beside
                # l2 and l3 whole): 132,776 B vs this instant's 124,946 (+6.3%); a GPU's accelerator tier peaks here
                h = min(ec.zero.zero_hpz_partition_size or 1, W)
                s0 = p0 * W // h if h > 1 and W % h == 0 else 0
                extra.append(Entry(rank, tier, "parameters", "init_first_partition", (p0 + s0) * D, "init_module",
                                   f"ceil(n_0 / W) x {D} = {p0} x {D} (the first partition, in host memory)"
                                   + (f" + its hpZ secondary, ceil(n_0 / W) x W / {h} x {D} = {s0} x {D}" if s0 else ""),
                                   src_p + ("; Init._partition_param_sec" if s0 else "")))
            else:
                extra += _swap_buffer_entries(ledger, rank, "init_module", "made by Init(module=...) before it partitions")
    src = src_e + " (self.module.to(self.device), l. 2094)"
    if ec.zero.stage == 3 and ec.offload_param_effective == "none":
        # the partitions made in place are part of this entry: cite their allocation too
        # (partition_parameters.py l.1836 torch.empty(partition_size)), so measure lists them in_ledger
        src += "; " + src_p
        if (ec.zero.zero_hpz_partition_size or 1) > 1 and W > 1:
            src += "; runtime/zero/partition_parameters.py:Init._partition_param_sec (hpZ's secondary, l.1915)"
    out.append(Entry(rank, "accelerator", "parameters", "init_module_whole", acc, "init_module", formula, src))
    if zero12_init_transients_apply(ec, ledger, load):
        extra += zero12_init_transients(ec, ledger, rank)
    elif fp16_optimizer_init_transient_applies(ec, ledger, load):
        extra += fp16_optimizer_init_transients(ledger, rank)
    elif unfused_optimizer_init_transient_applies(ec, ledger, load):
        extra += unfused_optimizer_init_transients(ec, ledger, rank)
    return out + extra + hooks


def zero3_init_transients_apply(ec: EffectiveConfig, ledger: Ledger, load: LoadAssumption | None) -> bool:
    """Whether the timeline has ``initialize:grad_hooks`` (:func:`zero3_init_transients`): ZeRO-3 with trainable
    parameters, without tensor / pipeline parallelism or quantized weights (a partition carrying ds_quant_scale adds
    its scales' gather, partition_parameters.py l.2152-2157; not run: DeepSpeed's quantizer has no CPU kernel), with
    or without zero.Init. hpZ too: the hook's ``param.all_gather()`` gathers the primary partition ``ds_tensor``
    over ``param.ds_process_group`` (partition_parameters.py _all_gather l.1723-1745 ->
    _allgather_params_sequential l.2136-2142, get_partition_dp_group l.2320-2321), as without it. Engine
    (z3_bf16_hpz2_w2, TINY, W = 2, zero_hpz_partition_size 2, 2026-12-06, 2 runs): initialize's high-water mark
    362,431 B = its end + 46,356 B (l2.weight's buffer) on both ranks, the ledger 362,426 B; once rank 1 had
    46,960 B (l1.bias's 604 B buffer still held beside it: gloo's thread, the race RACY bounds)."""
    z = ec.zero
    return (z.stage == 3 and ledger.wrapper == "DeepSpeedZeroOptimizer_Stage3" and load is not None
            and not ledger.plan.cluster.model_parallel and not z.zero_quantized_weights
            and ledger.plan.inventory.has_trainable())


def zero3_fp32_convert_applies(ec: EffectiveConfig) -> bool:
    """Whether ZeRO-3's _create_fp32_partitions casts each 16-bit sub-group partition and clones the cast
    (stage3.py l.1167-1171, its last branch): fp16 / bf16 without optimizer or parameter offload (with optimizer
    offload the cast goes to host memory, l.1157-1160; in fp32 ``.to`` returns the tensor itself, l.1161-1166)."""
    return ((ec.fp16_enabled or ec.bf16_enabled) and ec.offload_optimizer_effective == "none"
            and ec.offload_param_effective == "none")


def zero3_init_transients(ec: EffectiveConfig, ledger: Ledger, rank: int) -> list[Entry]:
    """The entry of ``initialize:grad_hooks`` at ZeRO-3, bytes per rank: DeepSpeed 0.19.8
    ``runtime/zero/stage3.py`` DeepSpeedZeroOptimizer_Stage3.__init__ calls create_reduce_and_remove_grad_hooks
    (l.519), which for every trainable parameter in turn gathers it whole (``param.all_gather()`` l.1504:
    partition_parameters.py _allgather_params_sequential, a flat buffer of ceil(n / W) x W elements in the 16-bit
    dtype, l.2142) to register its gradient hook, then partitions it again (``param.partition()`` l.1531): the
    largest such buffer, beside everything live at ``initialize`` (the optimizer's partitions and buffers are made
    before it). Engine (TINY, W = 2, 2026-12-06): z3_bf16_w2 / z3_bf16_oo_cpu_w2 / z3_bf16_zinit_nvme_small_w2
    initialize's high-water mark is its end + 46,356 B = (11,589 x 2) x 2 B, l2.weight's buffer, at site
    _allgather_params_sequential:2142.

    Before it, where :func:`zero3_fp32_convert_applies`, ``init_fp32_convert`` (life ``init_fp32_partitions``,
    instant ``initialize:fp32_partitions``, beside the 16-bit partitions only: the optimizer's buffers come later):
    _create_fp32_partitions casts each sub-group's 16-bit partition to fp32 and clones the cast (l.1168-1170), so
    at sub-group i the masters made so far and the cast live together, max_i (sum_(h<=i) s_h + s_i) x 4.
    Engine: z3_bf16_smallbucket_w1 (W = 1, where the fp32 master is N x 4 and the ipg bucket small) 432,095 B =
    86,418 + 2 x 172,836 + 5 at stage3.py _create_fp32_partitions:1170, above its grad-hooks moment (412,026)."""
    from advisor.ledger.state import zero3_partition_numel
    inv = ledger.plan.inventory
    W = max(1, ledger.plan.cluster.zero_world_size)
    D = DTYPE_BYTES[ec.model_dtype]
    big = inv.memo(("zero3_hook_gather", W), lambda: max(
        (zero3_partition_numel(t.numel, W) * W for t in inv.tensors if t.trainable), default=0))
    out = []
    if zero3_fp32_convert_applies(ec):
        from advisor.ledger.state import zero3_sub_groups
        sgs = zero3_sub_groups(inv, W, ec.zero.sub_group_size)
        worst = done = 0
        for sg in sgs:
            done += sg.numel
            worst = max(worst, done + sg.numel)
        out.append(Entry(rank, "accelerator", "master_weights", "init_fp32_convert", worst * 4, "init_fp32_partitions",
                         f"max_i (sum_(h<=i) s_h + s_i) x 4 = {worst} x 4 (the fp32 masters made so far and sub-group "
                         "i's cast, cloned into its master), beside the 16-bit partitions",
                         "runtime/zero/stage3.py:DeepSpeedZeroOptimizer_Stage3._create_fp32_partitions "
                         "(converted = ....to(self.device, dtype) l.1168-1169, converted.clone() l.1170)"))
    return out + [Entry(rank, "accelerator", "parameters", "init_grad_hook_gather", big * D, "init_grad_hooks",
                  f"max_p ceil(n_p / W) x W x {D} = {big} x {D} (the largest trainable parameter gathered whole "
                  "while its gradient hook is registered)",
                  "runtime/zero/stage3.py:DeepSpeedZeroOptimizer_Stage3.create_reduce_and_remove_grad_hooks "
                  "(param.all_gather() l.1504, param.partition() l.1531) -> runtime/zero/partition_parameters.py:"
                  "_allgather_params_sequential (torch.empty l.2142)")] if big else []


def zero12_init_transients_apply(ec: EffectiveConfig, ledger: Ledger, load: LoadAssumption | None) -> bool:
    """Whether the timeline has the :data:`INIT_TRANSIENTS` instants: ZeRO-1/2's DeepSpeedZeroOptimizer
    (not BF16_Optimizer) built on a model made without zero.Init, without tensor / expert parallelism (under
    pipeline parallelism over the rank's stage, :func:`_rank_shard`; ``initialize:optimizer_states`` only
    without optimizer offload: with it the zeroed partitions are kept, the ledger's ``fp32_grad``, and DeepSpeed
    frees nothing at the end of __init__)."""
    cl = ledger.plan.cluster
    return (ec.zero.stage in (1, 2) and ledger.wrapper == "DeepSpeedZeroOptimizer" and load is not None
            and not load.zero_init and cl.tensor_parallel <= 1 and cl.expert_parallel <= 1)



def init_end_is_peak(ec: EffectiveConfig, ledger: Ledger, load: LoadAssumption | None) -> bool:
    """Whether deepspeed.initialize makes nothing above what it leaves live at its end, after the module's move (the
    timeline's ``initialize`` instant is its high-water mark; no instant inside the optimizer's construction is
    needed), on a model built without zero.Init and without tensor / expert parallelism. DeepSpeed 0.19.8:

    * ZeRO-1's BF16_Optimizer (bf16, fp32 gradient accumulation: ``runtime/bf16_optimizer.py``
      _setup_for_real_optimizer l.152-226). Per param group g it makes the flat 16-bit copy beside the group's
      parameters (l.166-171, n_pad_g x 2 over n_g x 2 until they become views of it), the fp32 master partition
      (``.clone().float()`` l.182: P_g x 2 + P_g x 4 for a moment) and keeps a zeroed flat gradient in the
      accumulation dtype (``torch.zeros_like`` l.191, n_pad_g x 4), nothing dropped: the end less group g's flatten moment is
      sum_(h>=g) (6 n_pad_h + 4 P_h - 2 n_h) - 2 n_pad_g >= 4 n_pad_g + 4 P_g > 0 bytes, less its clone moment
      4 n_pad_g - 2 P_g (+ the later groups') > 0. The engine (TINY, W = 2, 2026-12-06, 2 runs):
      z1_bf16_gaccfp32_tbsga2_w2 / _igu_tbsga2_w2 high-water mark 345,716 B = end 345,700 B + the worker's 16 B
      input (worker.py _run_cell_tracked, made before the tracker's next phase), z1_bf16_gaccfp32_groups_w2 206,208 =
      206,192 + 16.
    * Stage 0 without a 16-bit wrapper: an fp32 model and its basic optimizer FusedAdam (``runtime/engine.py``
      _configure_basic_optimizer; ``ops/adam/fused_adam.py`` __init__ l.96 makes a 4 B overflow flag, its moments
      only at the first step). Engine: z0_fp32_w1 / z0_fp32_w2 172,872 B = end 172,840 + the worker's 32 B input,
      z0_fp32_onetensor_w2 800,036 = 800,004 + 32.
    * Under pipeline parallelism BF16_Optimizer over the rank's stage (stage 0 bf16 accumulating in bf16, or ZeRO-1
      as above; the gradient buffer n_pad_g x 2 at bf16 keeps both differences > 0: 2 n_pad_g + 4 P_g and
      2 n_pad_g - 2 P_g). Engine (tests/engine/test_pipeline_engine.py pp2_z0_bf16_ga2_w2, 2 stages, DP 1,
      2026-12-06): the pipe worker's initialize (the whole of deepspeed.initialize, the cast included) high-water
      mark 107,028 / 107,284 B = its end + 4 B (stage 0 / 1).

    Not claimed (initialize is still compared at its end there, :func:`advisor.engine.measure.peak_parity`):
    another basic optimizer at stage 0 fp32 (not measured), tensor / expert parallelism, stage 0 fp32 under pipeline
    parallelism (not measured). Stage 0's FP16_UnfusedOptimizer does rise above its end (its warm-up step):
    :func:`unfused_optimizer_init_transients`."""
    cl = ledger.plan.cluster
    if load is None or load.zero_init or cl.tensor_parallel > 1 or cl.expert_parallel > 1:
        return False
    if ledger.wrapper == "BF16_Optimizer":  # stage 0 only under pipeline parallelism (state.select_optimizer)
        return ec.zero.stage in (0, 1)
    return (ec.zero.stage == 0 and ec.model_dtype == "fp32" and ledger.wrapper == "FusedAdam"
            and not cl.model_parallel)


def init_transients_excluded(ec: EffectiveConfig, ledger: Ledger, load: LoadAssumption | None) -> str | None:
    """The ``excluded`` line (estimate's JSON ``assumptions.excluded``) for a plan whose transients inside
    deepspeed.initialize are not modelled, so that the timeline's ``initialize`` figure is its end, not its
    high-water mark; None where they are (:func:`zero12_init_transients_apply`,
    :func:`fp16_optimizer_init_transient_applies`, :func:`unfused_optimizer_init_transient_applies`,
    :func:`zero3_init_transients_apply`) or where nothing rises above
    the end (:func:`init_end_is_peak`; BF16_Optimizer anywhere: the same source argument, not measured under
    pipeline parallelism), or on a plan built under zero.Init without ZeRO-3. Listed (README: "pipeline / tensor
    parallelism ... not modelled yet"):

    * ZeRO-1/2's DeepSpeedZeroOptimizer under tensor / expert parallelism (modelled under pipeline parallelism, over
      the rank's stage): ``initialize:flatten`` (a param
      group's flat 16-bit copy beside its parameters) and ``initialize:optimizer_states`` (initialize_optimizer_states'
      fp32 zeros), stage_1_and_2.py l.505-508 / l.937, :func:`zero12_init_transients`;
    * ZeRO-3 under tensor / expert parallelism (pipeline parallelism is refused there) or with quantized weights
      (zero_quantized_weights): ``initialize:grad_hooks``, each trainable parameter gathered whole while its
      gradient hook is registered (stage3.py l.1504 -> partition_parameters.py l.2142; qwZ gathers its scales too,
      a tensor-parallel shard is another inventory), and ``initialize:fp32_partitions``,
      :func:`zero3_init_transients`;
    * stage 0's FP16_Optimizer under tensor / expert parallelism: its warm-up step's zeroed fp32 flat gradient
      (fused_optimizer.py l.127), :func:`fp16_optimizer_init_transients`;
    * stage 0's FP16_UnfusedOptimizer under tensor / expert parallelism: its warm-up step's 16-bit and fp32 zero
      gradients beside a step of the basic optimizer (unfused_optimizer.py initialize_optimizer_states l.412-433),
      :func:`unfused_optimizer_init_transients`."""
    if load is None:
        return None
    cl = ledger.plan.cluster
    z = ec.zero
    w = ledger.wrapper
    par = " and ".join(x for x, d in (("pipeline", cl.pipeline_parallel), ("tensor", cl.tensor_parallel),
                                      ("expert", cl.expert_parallel)) if d > 1)
    tail = "not modelled yet, initialize is its end, not its high-water mark"
    if z.stage == 3 and w == "DeepSpeedZeroOptimizer_Stage3":
        if zero3_init_transients_apply(ec, ledger, load) or not ledger.plan.inventory.has_trainable():
            return None
        why = [x for x, on in ((f"{par} parallelism", cl.model_parallel),
                               ("quantized weights (zero_quantized_weights)", z.zero_quantized_weights)) if on]
        return (f"ZeRO-3 initialize transients under {' and '.join(why)} (initialize:grad_hooks, each trainable "
                f"parameter gathered whole while its gradient hook is registered: stage3.py l.1504, "
                f"partition_parameters.py l.2142; initialize:fp32_partitions, _create_fp32_partitions' cast and "
                f"clone l.1168-1170; timeline.zero3_init_transients): {tail}")
    if load.zero_init:
        return None
    if z.stage in (1, 2) and w == "DeepSpeedZeroOptimizer" and not zero12_init_transients_apply(ec, ledger, load):
        par = " and ".join(x for x, d in (("tensor", cl.tensor_parallel), ("expert", cl.expert_parallel)) if d > 1)
        return (f"ZeRO-{z.stage} initialize transients under {par} parallelism (initialize:flatten, a param "
                f"group's flat 16-bit copy beside its parameters, and initialize:optimizer_states, "
                f"initialize_optimizer_states' fp32 zeros: stage_1_and_2.py l.505-508, "
                f"timeline.zero12_init_transients): {tail}")
    if z.stage == 0 and w == "FP16_Optimizer" and not fp16_optimizer_init_transient_applies(ec, ledger, load):
        par = " and ".join(x for x, d in (("tensor", cl.tensor_parallel), ("expert", cl.expert_parallel)) if d > 1)
        return (f"stage 0 FP16_Optimizer's initialize transient under {par} parallelism "
                f"(initialize:optimizer_states, its warm-up step's zeroed fp32 flat gradient: fused_optimizer.py l.127, "
                f"timeline.fp16_optimizer_init_transients): {tail}")
    if z.stage == 0 and w == "FP16_UnfusedOptimizer" and not unfused_optimizer_init_transient_applies(ec, ledger, load):
        par = " and ".join(x for x, d in (("tensor", cl.tensor_parallel), ("expert", cl.expert_parallel)) if d > 1)
        return (f"stage 0 FP16_UnfusedOptimizer's initialize transients under {par} parallelism "
                "(initialize:optimizer_states, its warm-up step's 16-bit and fp32 zero gradients beside a step of the "
                "basic optimizer: unfused_optimizer.py initialize_optimizer_states l.412-433, "
                f"timeline.unfused_optimizer_init_transients): {tail}")
    return None


def zero12_init_transients(ec: EffectiveConfig, ledger: Ledger, rank: int) -> list[Entry]:
    """Entries of the two instants inside ZeRO-1/2's DeepSpeedZeroOptimizer.__init__ (DeepSpeed 0.19.8
    ``runtime/zero/stage_1_and_2.py``), bytes per rank (the same on every rank: each holds the whole flat
    group and a P-element partition of it).

    * ``init_flatten_params`` / ``init_flatten_master`` (life ``init_flatten``, instant ``initialize:flatten``):
      param group g is flattened on the accelerator (flatten_on_accelerator, l.449-453: the usual case; the host
      fallback is :func:`zero12_flat_fallback`) by flatten_dense_tensors_aligned (l.505-508), a new n_pad_g x D
      buffer made while the group's parameters are still their own storages; they become views of it only
      at _update_model_bit16_weights (l.534). Live then: the module's parameters not yet flattened
      (N - sum_{h<g} n_h) x D (frozen ones included), the flat buffers of groups h <= g, sum n_pad_h x D, and
      the fp32 master partitions of the earlier groups (l.560-561 detach().clone().to(fp32): sum_{h<g} P_h x 4,
      in host memory under optimizer offload). The instant is the group g with the most bytes.
    * ``init_optimizer_grad_zeros`` (life ``init_optimizer_states``, instant ``initialize:optimizer_states``,
      no optimizer offload only): initialize_optimizer_states (l.934-953, called at l.734) makes a zeroed
      gradient partition per group, torch.zeros(partition_size_g) in the fp32 master's dtype, all of them
      before it drops them (l.950-952: ``group.grad = None`` without cpu_offload): sum_g P_g x 4 beside what is
      live at the end of initialize (the flat buffers and the fp32 master partitions). With offload they are
      kept (the ledger's ``fp32_grad``).

    Engine (TINY, W = 2, 2026-12-06): z1_bf16_w2 / z1_fp16_w2 initialize's high-water mark 259,276 B = flat
    86,424 + master 86,424 + the zeros 86,424 (site initialize_optimizer_states:937) + 4 B, where its end is
    172,852 B; z2_fp32_w2 345,700 B = the fp32 module's 172,836 B + flat 172,848 B (the flatten; the zeros'
    moment is 4 B from it)."""
    lays = _rank_shard(ec, ledger, rank)[1]
    if not lays:
        return []
    D = DTYPE_BYTES[ec.model_dtype]
    M = 4
    off = ec.offload_optimizer_effective != "none"
    m_tier = ("host_pinned" if ec.zero.offload_optimizer.pin_memory else "host_pageable") if off else "accelerator"
    S = "runtime/zero/stage_1_and_2.py:DeepSpeedZeroOptimizer"
    g_best, parts = zero12_flatten_terms(ledger, None, rank)
    src_f = (f"{S}.__init__ (flatten_dense_tensors_aligned l.505-508 beside the group's parameters, made views of "
             "it at _update_model_bit16_weights l.534)")
    out = [Entry(rank, "accelerator", "parameters", "init_flatten_params", parts[0], "init_flatten",
                 f"(N - sum_(h<g) n_h + sum_(h<=g) n_pad_h) x {D} at param group g = {g_best}: the module's "
                 "parameters not yet flattened beside the flat buffers made so far", src_f)]
    if parts[1]:
        out.append(Entry(rank, m_tier, "master_weights", "init_flatten_master", parts[1], "init_flatten",
                         f"sum_(h<g) P_h x 4 at g = {g_best}: the earlier groups' fp32 master partitions",
                         f"{S}.__init__ (single_partition_of_fp32_groups, l.560-561)"))
    if not off:
        pt = sum(lay.P for lay in lays)
        out.append(Entry(rank, "accelerator", "gradients", "init_optimizer_grad_zeros", pt * M, "init_optimizer_states",
                         f"sum_g P_g x 4 = {pt} x 4 (a zeroed fp32 gradient partition per param group, all made "
                         "before any is dropped)",
                         f"{S}.initialize_optimizer_states (torch.zeros l.937-939; group.grad = None l.950-952)"))
    return out


def fp16_optimizer_init_transient_applies(ec: EffectiveConfig, ledger: Ledger, load: LoadAssumption | None) -> bool:
    """Whether the timeline has ``initialize:optimizer_states`` for stage 0's FP16_Optimizer (fp16 / bf16 with a
    fused Adam, no tensor / expert parallelism, no zero.Init): :func:`fp16_optimizer_init_transients`. Under
    pipeline parallelism over the rank's stage (its fp32 master is the stage's): engine
    (tests/engine/test_pipeline_engine.py pp2_z0_fp16_ga2_w2, 2 stages, DP 1, 2026-12-06) initialize's high-water
    mark 240,772 / 241,348 B = its end + the stage's 53,504 / 53,632 B at fused_optimizer.py l.127."""
    cl = ledger.plan.cluster
    return (ec.zero.stage == 0 and ledger.wrapper == "FP16_Optimizer" and load is not None and not load.zero_init
            and cl.tensor_parallel <= 1 and cl.expert_parallel <= 1)


def fp16_optimizer_init_transients(ledger: Ledger, rank: int) -> list[Entry]:
    """The entry of ``initialize:optimizer_states`` for stage 0's FP16_Optimizer, bytes per rank: DeepSpeed
    0.19.8 ``runtime/fp16/fused_optimizer.py`` FP16_Optimizer.initialize_optimizer_states (l.125-134, called
    at the end of __init__, l.123) gives each fp32 flat master a zeroed gradient of its size
    (``torch.zeros(self.fp32_groups_flat[i].size())``, l.127), runs the optimizer's step on it (which makes the
    moments, already counted from ``initialize`` on) and drops it (l.132): the fp32 master's bytes (the ledger's
    ``fp32_master``, N x 4) once more, beside everything live at ``initialize``.
    Engine (TINY, W = 2, 2026-12-06, z0_bf16_w2): initialize's high-water mark 777,766 B = its end 604,930 B +
    172,836 B at fused_optimizer.py initialize_optimizer_states:127."""
    nb = sum(e.bytes for e in ledger.rank(rank).entries if e.item == "fp32_master")
    return [Entry(rank, "accelerator", "gradients", "init_optimizer_grad_zeros", nb, "init_optimizer_states",
                  f"N x 4 = {nb // 4} x 4 (a zeroed fp32 gradient per flat fp32 master, for the warm-up step)",
                  "runtime/fp16/fused_optimizer.py:FP16_Optimizer.initialize_optimizer_states (torch.zeros l.127; "
                  ".grad = None l.132)")] if nb else []


#: The ledger's torch step-temporaries item (``state._torch_step``, life ``step_update``) -> the item of the same
#: step run once inside deepspeed.initialize by FP16_UnfusedOptimizer's warm-up
#: (:func:`unfused_optimizer_init_transients`); ``init_warmup_step_foreach`` is GPU-only like ``torch_step_foreach``
#: (``state.TORCH_STEP_GPU_ONLY``).
WARMUP_STEP_ITEMS = {"torch_step_temporaries": "init_warmup_step_temporaries",
                     "torch_step_foreach": "init_warmup_step_foreach"}


def unfused_optimizer_init_transient_applies(ec: EffectiveConfig, ledger: Ledger, load: LoadAssumption | None) -> bool:
    """Whether the timeline has ``initialize:optimizer_states`` for stage 0's FP16_UnfusedOptimizer (fp16 / bf16
    with a basic optimizer other than FusedAdam: torch's AdamW / Adam with ``torch_adam``, torch's Adagrad, a
    client's; ``state.select_optimizer``), no tensor / expert parallelism, no zero.Init (zero.Init is ZeRO-3 only):
    :func:`unfused_optimizer_init_transients`. Under pipeline parallelism over the rank's stage (:func:`_rank_shard`),
    as FP16_Optimizer's: the same constructor runs over the stage's parameters. Engine
    (tests/engine/test_pipeline_engine.py test_pipeline_unfused_optimizer_initialize_peak, 2 stages, DP 1, fp16 with
    torch's AdamW, 2026-12-06): initialize's high-water mark 298,268 / 298,912 B = the ledger's on stage 0 / 1."""
    cl = ledger.plan.cluster
    return (ec.zero.stage == 0 and ledger.wrapper == "FP16_UnfusedOptimizer" and load is not None
            and not load.zero_init and cl.tensor_parallel <= 1 and cl.expert_parallel <= 1)


def unfused_optimizer_init_transients(ec: EffectiveConfig, ledger: Ledger, rank: int) -> list[Entry]:
    """The entries of ``initialize:optimizer_states`` for stage 0's FP16_UnfusedOptimizer, bytes per rank (life
    ``init_optimizer_states``: beside everything live at ``initialize``). DeepSpeed 0.19.8
    ``runtime/fp16/unfused_optimizer.py`` FP16_UnfusedOptimizer.__init__ ends with initialize_optimizer_states
    (l.108; l.412-433), a warm-up step: every 16-bit parameter of ``fp16_groups`` (the trainable ones with elements,
    ``is_optimized_parameter``, l.73) gets ``param.grad = torch.zeros(param.size(), dtype=param.dtype)`` (l.413-417),
    then every fp32 copy of ``fp32_groups`` a zeroed fp32 gradient (l.419-423), then ``self.optimizer.step()``
    (l.425) runs the basic optimizer over the fp32 copies, and only after it returns are all the gradients dropped
    (l.427-433). So at the step's high-water mark live together, beside what ``initialize`` holds:

    * ``init_warmup_lp_grads``: N_t x D (N_t the trainable elements of the rank's model, D the 16-bit dtype's bytes);
    * ``init_warmup_fp32_grads``: N_t x 4;
    * the step's temporaries (``state.torch_step_temporaries`` over ``state.torch_step_lists``: the same
      ``self.optimizer.step()`` over the same fp32 copies as every later step, unfused_optimizer.py step l.230), of
      param group g's call (:func:`unfused_warmup_group`), item :data:`WARMUP_STEP_ITEMS` on the ledger's path (the
      GPU's foreach; a CPU run compares the single-tensor figure); none for an in-place or unmodelled kernel.

    The optimizer's state is made inside that step (torch's lazy ``_init_group``, ``torch/optim/adam.py`` l.160-184)
    and kept: the ledger's moments and step tensors, live from ``initialize`` on (``_EAGER_STATE_WRAPPERS``), are in
    the end already; nothing of the warm-up outlives it. With several param groups torch's Adam / AdamW makes a
    group's state just before its call, so at group g's call the later groups' is not there yet
    (:func:`unfused_warmup_state_bytes`, applied by :func:`role_timeline`).
    Engine (TINY, W = 2, 2026-12-06, z0_bf16_torchadam_w2): initialize's high-water mark 1,050,824 B = its end +
    86,418 (N x 2, l.415) + 172,836 (N x 4, l.421) + 186,620 (the CPU's single-tensor AdamW, (301 + 2 x 23,177) x 4,
    torch/optim/adam.py l.544)."""
    inv = _rank_shard(ec, ledger, rank)[0]
    n = inv.trainable_numel
    if not n:
        return []
    D = DTYPE_BYTES[ec.model_dtype]
    S = "runtime/fp16/unfused_optimizer.py:FP16_UnfusedOptimizer.initialize_optimizer_states"
    out = [Entry(rank, "accelerator", "gradients", "init_warmup_lp_grads", n * D, "init_optimizer_states",
                 f"N_t x {D} = {n} x {D} (a zeroed 16-bit gradient per trainable parameter, for the warm-up step)",
                 f"{S} (torch.zeros l.415; param.grad = None l.429)"),
           Entry(rank, "accelerator", "gradients", "init_warmup_fp32_grads", n * 4, "init_optimizer_states",
                 f"N_t x 4 = {n} x 4 (a zeroed fp32 gradient per fp32 copy, beside the 16-bit ones)",
                 f"{S} (torch.zeros l.421; param.grad = None l.433)")]
    g, t_g, _ = unfused_warmup_group(ec, ledger, rank)
    for e in ledger.rank(rank).entries:
        if e.item in WARMUP_STEP_ITEMS and e.life == "step_update" and e.bytes and t_g:
            what = (f"param group {g}'s step call: {t_g} B of the largest call's {e.bytes} B"
                    if t_g != e.bytes else "the warm-up step")
            out.append(Entry(rank, e.tier, e.cls, WARMUP_STEP_ITEMS[e.item], t_g, "init_optimizer_states",
                             e.formula + f" ({what}, beside both zeroed gradients)",
                             e.source + f"; {S} (self.optimizer.step() l.425)"))
    return out


#: The basic optimizers whose state the warm-up makes one param group at a time and whose ledger items
#: (``state.optimizer_states``' moments and ``step``) are the fp32 copies' state alone: torch's Adam / AdamW (torch's
#: Adam.step loops over the param groups, ``_init_group`` l.238 then ``adam()`` l.248 for each: ``torch/optim/adam.py``
#: l.229). torch's Adagrad makes its fp32 state by group too, but its ``sum`` / ``step`` items also name the 16-bit
#: parameters' state kept from its construction (``state._stage0``): there the instant counts every group's state,
#: an upper bound.
WARMUP_STATE_BY_GROUP = ("Adam", "AdamW")


def unfused_warmup_group(ec: EffectiveConfig, ledger: Ledger, rank: int) -> tuple[int, int, tuple[int, int, int, int]]:
    """(g, t_g, (n_made, N_t, k_made, K)) of FP16_UnfusedOptimizer's warm-up step on ``rank``
    (:func:`unfused_optimizer_init_transients`): torch's Adam.step runs one ``_init_group`` + ``adam()`` call per
    param group (``torch/optim/adam.py`` step l.229-248), so at group g's call the lazily made state exists for
    groups 0..g only (n_made of the N_t trainable elements, k_made of the K trainable tensors; ``torch/optim/adam.py``
    _init_group l.160-184) beside that call's temporaries t_g (``state.torch_step_temporaries`` over group g's list
    alone, on the ledger's path). g is the group where temporaries less the state not yet made is the largest (the
    last group: all state, its own temporaries). For an optimizer outside :data:`WARMUP_STATE_BY_GROUP` every group's
    state is counted (n_made = N_t) and g is the group with the largest temporaries. Engine (cell
    z0_fp16_torchadam_groups_tbsga2_w1, TINY with l2 frozen and l3 in group 1, W = 1, 2026-12-06): initialize's
    high-water mark 596,608 B, at group 0's step, = the whole-state instant 599,736 B - group 1's state not yet made
    (390 x 8 + 2 x 4 = 3,128 B)."""
    from advisor.ledger.state import (optimizer_states, placement, torch_step_lists, torch_step_path,
                                      torch_step_temporaries)
    plan = ledger.plan
    inv = _rank_shard(ec, ledger, rank)[0]
    W = max(1, plan.cluster.zero_world_size)
    pl = placement(ec, inv, W, ledger.wrapper) if plan.cluster.model_parallel else placement_of(plan)
    basic = ledger.basic_optimizer
    lists = torch_step_lists(ec, inv, W, ledger.wrapper, pl)
    path = torch_step_path(ec, basic, ec.offload_optimizer_effective != "none")
    temps = [torch_step_temporaries(ec, basic, [c], path)[0] for c in lists]
    n_t, k_t = sum(sum(c) for c in lists), sum(len(c) for c in lists)
    if not lists:
        return 0, 0, (0, 0, 0, 0)
    if basic not in WARMUP_STATE_BY_GROUP or len(lists) == 1:
        g = max(range(len(lists)), key=lambda i: (temps[i], -i))
        return g, temps[g], (n_t, n_t, k_t, k_t)
    st = optimizer_states(ec)
    per_el = 4 * len(st.items)
    per_t = st.step_bytes or 0
    best, g, made = None, 0, (0, 0)
    n = k = 0
    for i, c in enumerate(lists):
        n += sum(c)
        k += len(c)
        v = temps[i] - (n_t - n) * per_el - (k_t - k) * per_t
        if best is None or v > best:
            best, g, made = v, i, (n, k)
    return g, temps[g], (made[0], n_t, made[1], k_t)


def unfused_warmup_state_bytes(ec: EffectiveConfig, ledger: Ledger, rank: int, entries: Any) -> dict[int, int]:
    """The bytes of the lazily made optimizer-state entries among ``entries`` (``rank``'s role's) at
    FP16_UnfusedOptimizer's warm-up instant, keyed by ``id(entry)``, where they are less than the entry
    (:func:`unfused_warmup_group`: the groups stepped so far); empty where every group's state is counted there."""
    from advisor.ledger.state import optimizer_states
    _, _, (n, n_t, k, k_t) = unfused_warmup_group(ec, ledger, rank)
    if n == n_t and k == k_t:
        return {}
    moments = optimizer_states(ec).items
    out = {}
    for e in entries:
        if e.cls == "optimizer_states" and e.life == "persistent":
            if e.item in moments and n_t:
                out[id(e)] = e.bytes * n // n_t
            elif e.item == "step" and k_t:
                out[id(e)] = e.bytes * k // k_t
    return out


def zero12_flatten_terms(ledger: Ledger, free_after_move: int | None,
                         rank: int | None = None) -> tuple[int, tuple[int, int]]:
    """(g, (accelerator parameter bytes, fp32 master bytes)) per rank at the ``initialize:flatten`` instant
    (:func:`zero12_init_transients`): the param group g whose flattening has the most bytes live. A group
    flattened in host memory (:func:`zero12_flat_fallback`'s test: ``free_after_move`` < n_pad_g x D; None: every
    group on the accelerator) has its parameters moved off the accelerator first (``param.data =
    torch.empty(1)``, stage_1_and_2.py l.455-460), so only its flat buffer, moved in (l.524), counts there.
    ``rank``: under pipeline parallelism the rank's stage (:func:`_rank_shard`: a PipelineModule's optimizer sees
    only its stage's parameters, ``runtime/pipe/module.py`` _build l.235-276); None: the plan's model."""
    plan = ledger.plan
    inv, lays = _rank_shard(plan.config, ledger, rank) if rank is not None else (plan.inventory, placement_of(plan).zero12)
    D = DTYPE_BYTES[plan.config.model_dtype]
    best, g_best, parts = -1, 0, (0, 0)
    done_n = done_pad = done_p = 0
    for g, lay in enumerate(lays):
        host = free_after_move is not None and free_after_move < lay.n_pad * D
        params = (inv.numel - done_n - (lay.n if host else 0) + done_pad + lay.n_pad) * D
        master = done_p * 4
        if params + master > best:
            best, g_best, parts = params + master, g, (params, master)
        done_n += lay.n
        done_pad += lay.n_pad
        done_p += lay.P
    return g_best, parts


def zero12_flat_fallback(ledger: Ledger, free_after_move: int | None) -> int:
    """Host bytes per rank when ZeRO-1/2 flattens a param group in host memory at initialize.

    DeepSpeed 0.19.8 ``stage_1_and_2.py`` DeepSpeedZeroOptimizer.__init__ flattens each param
    group on the accelerator only when ``accelerator.available_memory() >= flat_buffer_bytes``
    (flatten_on_accelerator); otherwise it copies the group's parameters to the CPU
    (``param.cpu_data = param.data.cpu()``), builds the flat buffer there
    (flatten_dense_tensors_aligned(use_cpu_data=True)) and moves it to the accelerator: the
    group's n x D plus its flat n_pad x D in host memory at once. ``free_after_move``: the
    accelerator bytes free with the whole model on it (None: unknown, nothing counted). The
    largest such group's bytes; 0 for other stages or wrappers and under model parallelism."""
    plan = ledger.plan
    ec = plan.config
    if (free_after_move is None or ec.zero.stage not in (1, 2) or ledger.wrapper != "DeepSpeedZeroOptimizer"
            or plan.cluster.model_parallel):
        return 0
    D = DTYPE_BYTES[ec.model_dtype]
    worst = 0
    for g in placement_of(plan).zero12:
        if free_after_move < g.n_pad * D:
            worst = max(worst, (g.n + g.n_pad) * D)
    return worst


#: DeepSpeed 0.19.8 sources of the save instants (runtime/engine.py).
SAVE_16BIT_SOURCE = ("runtime/engine.py:DeepSpeedEngine.save_16bit_model l.5707-5755 -> "
                     "_zero3_consolidated_16bit_state_dict l.5631-5700 (GatheredParameters(module params, "
                     "modifier_rank=0) on every rank, rank 0 param.detach().cpu())")
SAVE_FILES_SOURCE = ("runtime/engine.py:DeepSpeedEngine.save_checkpoint l.4869-4966 -> _save_checkpoint l.5377-5405, "
                     "_save_zero_checkpoint l.5549-5566 -> runtime/checkpoint_engine/torch_checkpoint_engine.py:save "
                     "-> torch/serialization.py:_save l.1279-1310 (storage.cpu(), one storage at a time)")
#: ZeRO-3's gathered persistent parameters: the trainable ones (lp_params_gathered) and the frozen ones
#: (frozen_params_gathered). Both are ds_persist (parameter_offload.py mark_persistent_parameters l.317-329
#: looks at ds_numel only, not requires_grad), so both share one lifetime: partitioned at initialize,
#: gathered for good at their first fetch, released by the step's _partition_all_parameters and all-gathered
#: again by _post_step (stage3.py l.2840-2841), partitioned by checkpoint_event_prologue (l.3843-3845).
PERSIST_GATHERED = ("lp_params_gathered", "frozen_params_gathered")

#: Save-time items that exist only when the state is on a GPU: torch.save's host copy of an
#: accelerator storage (torch/serialization.py l.1290: skipped for a CPU storage) and the frozen
#: fragments' ``.cpu()`` copies (``Tensor.cpu()`` of a CPU tensor returns it): a CPU run has none.
SAVE_GPU_ONLY = ("save_16bit_staging", "save_model_file_staging", "save_optim_file_staging", "save_frozen_fragments",
                 "save_16bit_module_copy")
#: Every item a run on DeepSpeed's CPU accelerator does not make: the save's host copies above and partial
#: optimizer offload's backup AdamW step (:data:`advisor.ledger.state.TWIN_FLOW_GPU_ONLY`: on the CPU accelerator
#: DeepSpeedCPUAdam steps every sub-group), and torch's foreach step temporaries (:data:`advisor.ledger.state.
#: TORCH_STEP_GPU_ONLY`: on the CPU torch takes the single-tensor loop, whose figure measure compares in their place).
#: ``advisor.engine.measure.peak_parity`` compares the ledger without them.
GPU_ONLY = SAVE_GPU_ONLY + TWIN_FLOW_GPU_ONLY + TORCH_STEP_GPU_ONLY


def _rank_shard(ec: EffectiveConfig, ledger: Ledger, rank: int) -> tuple[Any, Any]:
    """(inventory, ZeRO-1/2 group layouts) of what ``rank``'s files hold: the whole model without model
    parallelism (``placement_of(plan)``, unchanged), else the rank's pipeline stage / tensor-parallel
    shard over its ZeRO group (:func:`_stage_inventory`, the split ``advisor checkpoint`` writes its
    per-rank files from: checkpoint._model_parallel_files)."""
    plan = ledger.plan
    if not plan.cluster.model_parallel:
        return plan.inventory, placement_of(plan).zero12
    from advisor.ledger.state import placement
    inv = _stage_inventory(ledger, rank)
    memo = ledger.__dict__.setdefault("_shard_zero12", {})
    got = memo.get(id(inv))
    if got is None or got[0] is not inv:
        got = memo[id(inv)] = (inv, placement(ec, inv, max(1, plan.cluster.zero_world_size), ledger.wrapper).zero12)
    return inv, got[1]


def _largest_model_file_storage(ec: EffectiveConfig, ledger: Ledger, rank: int = 0) -> tuple[int, str]:
    """(bytes, what) of the largest accelerator storage in the model-states file dp rank 0 writes
    below ZeRO-3 (the module state dict, at stage 0 with the optimizer's state dict), which
    torch.save copies to host memory: ZeRO-1/2 and BF16_Optimizer module weights are views of the
    padded flat 16-bit group buffer (n_pad x D, the whole storage is written); stage 0
    FP16_Optimizer flattens each group's 16-bit params and its fp32 copy (group numel x 4);
    otherwise one tensor (the largest, n x 4 for its fp32 master / moments, or n x D)."""
    inv, zero12 = _rank_shard(ec, ledger, rank)
    D = DTYPE_BYTES[ec.model_dtype]
    # per tensor list, not per plan: generate asks for each of its plans (issue 21)
    frozen = inv.memo(("max_frozen_numel",), lambda: max((t.numel for t in inv.tensors if not t.trainable),
                                                         default=0)) * D
    if ec.zero.stage in (1, 2) or ledger.wrapper == "BF16_Optimizer":
        lays = zero12
        b = max((lay.n_pad for lay in lays), default=0) * D
        what = "the largest param group's padded flat 16-bit buffer, n_pad x D"
        if ec.zero.stage == 0 and ec.offload_optimizer_effective == "none":
            b2 = max((lay.P for lay in lays), default=0) * 4
            if b2 > b:
                b, what = b2, "the largest fp32 partition or moment, P x 4 (in the model file at stage 0)"
        return (frozen, "the largest frozen parameter, n x D") if frozen > b else (b, what)
    if ledger.wrapper == "FP16_Optimizer":
        g = inv.memo(("largest_group_numel",),
                     lambda: max((sum(t.numel for t in grp) for grp in inv.groups()), default=0))
        return g * 4, "the largest param group's flat fp32 master (and each moment), group numel x 4"
    n = inv.memo(("max_numel",), lambda: max((t.numel for t in inv.tensors), default=0))
    return n * 4, "the largest tensor's fp32 parameter, master copy or moment, n x 4"


def _largest_optim_file_storage(ec: EffectiveConfig, ledger: Ledger, rank: int = 0) -> tuple[int, str]:
    """(bytes, what) of the largest accelerator storage in the rank's ZeRO optimizer-states file
    (zero_pp_rank_*_optim_states.pt), which torch.save copies to host memory: ZeRO-1/2 the fp32
    partition of a param group and each moment, P x 4 (the padded storage: the file holds an
    un-padded view of it); ZeRO-3 a sub-group's fp32 flat partition and moments, S x 4. 0 with
    optimizer offload (the state is in host memory or on NVMe already), except the accelerator
    sub-groups' fp32 flat partitions under partial offload (``ratio`` < 1), and without a ZeRO
    optimizer file (stage 0 without BF16_Optimizer)."""
    plan = ledger.plan
    st = ec.zero.stage
    pl = placement_of(plan) if st == 3 else None
    if pl is not None and any(pl.opt_on_accelerator):
        # partial offload: the file's fp32 flat groups (stage3.py _rigid_state_dict l.3444) include the
        # accelerator sub-groups'; the moments in it are DeepSpeedCPUAdam's (l.3443 self.optimizer.state_dict()),
        # the host sub-groups' only
        big = max(sg.numel for sg, a in zip(pl.sub_groups, pl.opt_on_accelerator) if a)
        return big * 4, "the largest accelerator sub-group's fp32 flat partition (partial offload), S x 4"
    if ec.offload_optimizer_effective != "none":
        return 0, "optimizer state already in host memory (offload_optimizer)"
    if st in (1, 2) or ledger.wrapper == "BF16_Optimizer":
        return max((lay.P for lay in _rank_shard(ec, ledger, rank)[1]), default=0) * 4, \
            "the largest param group's fp32 partition (and each moment), P x 4"
    if st == 3:
        W = max(1, plan.cluster.zero_world_size)
        sgs = zero3_sub_groups(_rank_shard(ec, ledger, rank)[0], W, ec.zero.sub_group_size)
        return max((sg.numel for sg in sgs), default=0) * 4, \
            "the largest sub-group's fp32 flat partition (and each moment), S x 4"
    return 0, "no ZeRO optimizer-states file at stage 0"


def save_16bit_gather_moment(inv: Any, W: int) -> tuple[int, int, str]:
    """(elements of rank 0's state dict before, elements of the module's own tensors, module) at
    the moment ``_zero3_consolidated_16bit_state_dict`` gathers its largest module (sum
    ceil(n_i / W) x W, :func:`largest_gathered_module`; the first of equal ones): the accelerator's
    high-water mark of the gather. Modules in inventory order (taken as the module tree's
    order, get_layer_state_dict's recursion: a module's own parameters, then its children)."""
    def moment() -> tuple[int, int, str]:
        # dicts keep the modules in order of first appearance; ceil(n / W) x W inlined
        # (zero3_partition_numel), the first largest found by C-level max and index (issue 21)
        gathered: dict[str, int] = {}
        own: dict[str, int] = {}
        gget, oget = gathered.get, own.get
        for t, m in zip(inv.tensors, module_names(inv)):
            n = t.numel
            gathered[m] = gget(m, 0) + -(-n // W) * W
            own[m] = oget(m, 0) + n
        if not gathered:
            return 0, 0, ""
        sizes = list(gathered.values())
        best = sizes.index(max(sizes))
        owns = list(own.values())
        return sum(owns[:best]), owns[best], list(gathered)[best]
    return inv.memo(("save_16bit_gather_moment", W), moment)


def save_entries(ec: EffectiveConfig, ledger: Ledger, rank: int) -> list[Entry]:
    """Entries of a checkpoint save that every rank holds (rank 0's own are
    :func:`save_rank0_entries`), bytes. DeepSpeed 0.19.8 (see :data:`SAVE_FILES_SOURCE`,
    :data:`SAVE_16BIT_SOURCE`); instants ``save:16bit`` / ``save:16bit:end`` (life ``save_16bit``,
    ``save_16bit_end``), ``save:model`` (``save_model``), ``save:optim`` (``save_optim``), ``save``:

    * ``save_16bit_model`` (the HF Trainer's save_model) at ZeRO-3 with
      ``stage3_gather_16bit_weights_on_model_save``: every rank runs GatheredParameters on each
      module's own parameters, so each holds one module whole at a time, largest sum
      ceil(n_i / W) x W x D (``save_gathered_module``; measured on rank 1: the gather allocates
      the padded buffers, partition_parameters.py _allgather_params_coalesced l.2052);
      checkpoint_event_prologue released the persistent parameters first (stage3.py l.3844).
      ``engine.save_checkpoint`` itself never gathers: it calls module_state_dict (engine.py l.4008,
      placeholders at ZeRO-3), not _zero3_consolidated_16bit_state_dict.
    * ``save_checkpoint``'s model-states file at ZeRO-2/3 (save_frozen_param, engine.py l.5383):
      ``frozen_param_fragments`` = ``.cpu()`` copies of each frozen parameter (ZeRO-3: its
      partition ceil(n / W) x D; ZeRO-2: whole, n x D), host memory, built on every rank
      (_common_checkpoint_state l.5017-5038) while the file is written.
    * the optimizer-states file (every rank from ZeRO-1 on): torch.save copies one accelerator
      storage at a time to host memory (torch/serialization.py l.1290-1310: ``storage.cpu()``, the
      copy freed as the next is made), so its largest storage is live in host memory
      (:func:`_largest_optim_file_storage`). No clone: ``clone_tensors_for_torch_save`` runs only
      on the MoE path (engine.py l.5137, 5249, 5288, 5353).
    """
    z = ec.zero
    plan = ledger.plan
    inv = plan.inventory
    W = max(1, plan.cluster.zero_world_size)
    D = DTYPE_BYTES[ec.model_dtype]
    out: list[Entry] = []
    if z.stage == 3 and z.gather_16bit_weights_on_model_save:
        big = largest_gathered_module(inv, W)
        out.append(Entry(rank, "accelerator", "parameters", "save_gathered_module", big * D, "save_gather",
                         f"largest module sum ceil(n_i / W) x W x D = {big} x {D} (every rank gathers one module "
                         "at a time)", SAVE_16BIT_SOURCE))
    if z.stage >= 2:
        fro = inv.memo(("frozen_numels",), lambda: tuple(t.numel for t in inv.tensors if not t.trainable))
        if fro:
            el = sum(zero3_partition_numel(n, W) for n in fro) if z.stage == 3 else sum(fro)
            out.append(Entry(rank, "host_pageable", "parameters", "save_frozen_fragments", el * D, "save_model",
                             ("sum ceil(n_i / W) x D" if z.stage == 3 else "sum n_i x D") + f" = {el} x {D} "
                             "(frozen_param_fragments: .cpu() copies of the frozen parameters, held while the "
                             "model-states file is written)",
                             "runtime/engine.py:DeepSpeedEngine._get_zero_frozen_param_attributes l.5430-5446 "
                             "(_get_param_fragment_func l.5426-5427)"))
    ob, what = _largest_optim_file_storage(ec, ledger, rank)
    # rank 0 counts the larger of its model file's and its optimizer file's storage itself (save_rank0_entries),
    # except under pipeline parallelism, where its module staging is the layer files' (_pipeline_layer_staging)
    if ob and (plan.cluster.pipeline_parallel > 1 or not (rank == 0 and _rank0_model_staging(ec, ledger)[0] >= ob)):
        out.append(Entry(rank, "host_pageable", "optimizer_states", "save_optim_file_staging", ob, "save_optim",
                         f"{what}: {ob:,} B (torch.save's host copy of one accelerator storage at a time)",
                         SAVE_FILES_SOURCE))
    return out


def _rank_layer_files(ledger: Ledger, rank: int) -> list[Any]:
    """The ``layer_XX-model_states.pt`` files ``rank`` writes in one ``save_checkpoint`` under
    pipeline parallelism, the entries ``advisor checkpoint`` lists
    (:func:`advisor.ledger.checkpoint.pipeline_layer_files`, memoised per tensor list): the save's
    layer staging is derived from these, one source for both views. Empty for a rank that writes none."""
    cl = ledger.plan.cluster
    if cl.pipeline_parallel <= 1:
        return []
    stage, _, m = cl.coords(rank)
    return [f for f in _layer_files(ledger).get((stage, m), []) if f.rank == rank]


def _layer_files(ledger: Ledger) -> dict[tuple[int, int], list[Any]]:
    """:func:`advisor.ledger.checkpoint.pipeline_layer_files` for the ledger's plan (who writes: rank 0 of
    each stage's data-parallel group, or its data-parallel ranks with ``checkpoint.parallel_write.pipeline_stage``,
    :func:`advisor.ledger.checkpoint.pipeline_write_dp`)."""
    from advisor.ledger.checkpoint import pipeline_layer_files, pipeline_write_dp
    plan = ledger.plan
    cl = plan.cluster
    return pipeline_layer_files(plan.inventory, cl.tensor_parallel, cl.pipeline_parallel, cl.expert_parallel,
                                max(1, cl.zero_world_size), DTYPE_BYTES[plan.config.model_dtype],
                                dp=pipeline_write_dp(plan))


def _pipeline_layer_staging(ledger: Ledger, rank: int) -> list[Entry]:
    """Host staging of ``save_checkpoint``'s module under pipeline parallelism, bytes, from the layer
    files ``rank`` writes as ``advisor checkpoint`` lists them (:func:`_rank_layer_files`):
    PipelineEngine.module_state_dict (``runtime/pipe/engine.py`` l.1308-1325) calls
    PipelineModule.save_state_dict (``runtime/pipe/module.py`` l.607-642): data-parallel rank 0 of
    the stage (per tensor-parallel rank; with ``checkpoint.parallel_write.pipeline_stage`` each
    data-parallel rank its share of the stage's layers) writes each layer's ``layer_XX-model_states.pt``,
    one layer at a time; the torch checkpoint engine preserves storage sharing (``checkpoint_engine/checkpoint_engine.py``
    l.62-63), so each layer's state dict is ``clone_tensors_for_torch_save``'d to the CPU
    (``checkpoint/utils.py`` l.41-59: ``item.detach().to('cpu')``, the view's own elements) and
    torch.save writes those host tensors (no further copy). The previous layer's clone is dropped
    when ``final_state_dict`` is rebound (module.py l.637-641), so the host peak is the largest layer
    file the rank writes, at ``save:model``; ``mp_rank_XX_model_states.pt`` holds no module. Only the
    writers hold it: a rank-only entry (:func:`rank_only_entries`), each writer a role of its own.
    Item ``save_layer_clone``, not in :data:`SAVE_GPU_ONLY`: on a tensor already on the CPU the clone is
    made too (utils.py l.53-55: ``device == item.device`` -> ``item.detach().clone()``), so a CPU run
    holds it (measured: the tracker's site ``checkpoint/utils.py:clone_tensors_for_torch_save:57``,
    10,304 B on both stages of the pipe proxy, the largest layer file;
    ``tests/engine/test_pipeline_engine.py``).
    The optimizer-states file is :func:`save_entries`' (the stage's partition, :func:`_rank_shard`)."""
    out: list[Entry] = []
    layers = _rank_layer_files(ledger, rank)
    if layers:
        big = max(layers, key=lambda f: f.bytes)
        out.append(Entry(rank, "host_pageable", "parameters", "save_layer_clone", big.bytes, "save_model",
                         f"the largest layer file this rank writes, {big.path.rsplit('/', 1)[-1]}: {big.bytes:,} B "
                         f"(its state dict cloned to the CPU, one layer at a time; {len(layers)} layer files)",
                         "runtime/pipe/module.py:PipelineModule.save_state_dict l.607-642 -> "
                         "checkpoint/utils.py:clone_tensors_for_torch_save l.41-59 (runtime/pipe/engine.py "
                         "module_state_dict l.1308-1325)"))
    return out


def pipeline_layer_writers(ledger: Ledger) -> list[int]:
    """Global ranks that write ``layer_XX-model_states.pt`` files, as
    :func:`advisor.ledger.checkpoint.pipeline_layer_files` places them (pipe/module.py save_state_dict
    l.615-626): data-parallel rank 0 of each pipeline stage per tensor-parallel rank ((stage x W_z) x t + m),
    or with ``checkpoint.parallel_write.pipeline_stage`` each data-parallel rank given a share of the stage's
    layers. Empty without pipeline parallelism."""
    if ledger.plan.cluster.pipeline_parallel <= 1:
        return []
    return sorted({f.rank for fs in _layer_files(ledger).values() for f in fs})


def _rank0_model_staging(ec: EffectiveConfig, ledger: Ledger) -> tuple[int, str]:
    """(bytes, what) rank 0's torch.save stages for its model-states file (0 at ZeRO-3)."""
    if ec.zero.stage == 3:
        return 0, ""
    memo = ledger.__dict__.setdefault("_rank0_model_staging", {})
    got = memo.get(id(ec))
    if got is None or got[0] is not ec:
        got = memo[id(ec)] = (ec, _largest_model_file_storage(ec, ledger))
    return got[1]


def save_rank0_entries(ec: EffectiveConfig, ledger: Ledger, rank: int) -> list[Entry]:
    """The save entries only global rank 0 holds, bytes (empty on other ranks; under pipeline
    parallelism instead the layer-file staging of every rank that writes layer files,
    :func:`_pipeline_layer_staging`):

    * ZeRO-3 with ``stage3_gather_16bit_weights_on_model_save``, in ``save_16bit_model``: rank 0's
      state dict of ``param.detach().cpu()`` copies grows to N x D host bytes (a CPU accelerator
      keeps the gathered padded storages instead, sum ceil(n_i / W) x W x D); it is still whole
      when checkpoint_event_epilogue all-gathers the persistent parameters again (stage3.py l.3847-3850),
      so it is live at ``save:16bit`` and ``save:16bit:end``.
    * below ZeRO-3, torch.save's host copy of the largest accelerator storage of the files rank 0
      writes (:func:`_largest_model_file_storage`): the model-states file (dp rank 0 only) and
      ``save_16bit_model``'s pytorch_model.bin (the module state dict, the same storages).
      Counted at ``save:optim`` instead of the optimizer file's storage when larger there
      (the files are written one after the other; the copy of the larger storage is the peak)."""
    if ledger.plan.cluster.pipeline_parallel > 1:
        return _pipeline_layer_staging(ledger, rank)  # the layer files' writers, rank 0 among them
    if rank != 0:
        return []
    z = ec.zero
    inv = ledger.plan.inventory
    D = DTYPE_BYTES[ec.model_dtype]
    out: list[Entry] = []
    if z.stage == 3:
        if z.gather_16bit_weights_on_model_save:
            W = max(1, ledger.plan.cluster.zero_world_size)
            prior, own, mod = save_16bit_gather_moment(inv, W)
            if prior:
                out.append(Entry(rank, "host_pageable", "parameters", "save_16bit_state_dict", prior * D, "save_gather",
                                 f"sum n_i x D = {prior} x {D} of the modules copied before {mod or 'the root'} "
                                 "(the largest gathered), in module order", SAVE_16BIT_SOURCE))
            out.append(Entry(rank, "host_pageable", "parameters", "save_16bit_module_copy", own * D, "save_gather",
                             f"sum n_i x D = {own} x {D}: rank 0's .cpu() copy of {mod or 'the root'}'s tensors, made "
                             "while it is gathered (none on a CPU accelerator: the copy is the gathered tensor)",
                             SAVE_16BIT_SOURCE))
            out.append(Entry(rank, "host_pageable", "parameters", "save_16bit_state_dict", inv.numel * D,
                             "save_16bit_end",
                             f"N x D = {inv.numel} x {D} (rank 0 copies every gathered 16-bit tensor to the CPU)",
                             SAVE_16BIT_SOURCE))
        return out
    mb, what = _rank0_model_staging(ec, ledger)
    if not mb:
        return out
    src = SAVE_FILES_SOURCE + "; only dp rank 0 writes the model-states file (engine.py l.1909-1911)"
    from advisor.ledger.checkpoint import pipeline_saves_16bit  # the PipelineEngine writes no 16-bit model
    if pipeline_saves_16bit(ledger.plan.cluster):
        out.append(Entry(rank, "host_pageable", "parameters", "save_16bit_staging", mb, "save_16bit",
                         f"{what}: {mb:,} B (save_16bit_model: torch.save of the module state dict on rank 0)",
                         "runtime/engine.py:DeepSpeedEngine.save_16bit_model l.5745-5751 -> " + SAVE_FILES_SOURCE))
    out.append(Entry(rank, "host_pageable", "parameters", "save_model_file_staging", mb, "save_model",
                     f"{what}: {mb:,} B (torch.save's host copy of one accelerator storage at a time)", src))
    ob, _ = _largest_optim_file_storage(ec, ledger, rank)
    if ob and mb >= ob:
        # the optimizer file's largest storage on rank 0, in its own file after the model file
        out.append(Entry(rank, "host_pageable", "optimizer_states", "save_optim_file_staging", ob, "save_optim",
                         f"the largest fp32 partition or moment: {ob:,} B (torch.save's host copy)", SAVE_FILES_SOURCE))
    return out


#: transformers 5.25.0, where rank 0 loads the whole checkpoint under ZeRO-3.
HF_STATE_DICT_SOURCE = ("transformers/modeling_utils.py:PreTrainedModel._load_pretrained_model l. 4576-4591 "
                        "(is_deepspeed_zero3_enabled: map_location \"cpu\" on rank 0, \"meta\" elsewhere, every "
                        "checkpoint file merged into one dict) -> integrations/deepspeed.py:"
                        "_load_state_dict_into_zero3_model l. 457-561 (GatheredParameters(modifier_rank=0) per module)")


def hf_state_dict_entries(ec: EffectiveConfig, ledger: Ledger, load: LoadAssumption, rank: int) -> list[Entry]:
    """Rank 0's copy of the checkpoint while the HF Trainer's ``from_pretrained`` loads it under
    ZeRO-3 (life ``load_state_dict``, the instant ``load:state_dict``): N x the checkpoint's dtype
    bytes in host memory. transformers 5.25.0 ``modeling_utils.py`` _load_pretrained_model
    (l. 4576-4591), once the model is built and partitioned under zero.Init: rank 0 reads every
    checkpoint file with ``map_location="cpu"`` into one merged dict, the other ranks with
    ``"meta"`` (shapes only); ``_load_state_dict_into_zero3_model`` then gathers one module at a
    time and rank 0 copies its values in; the dict is freed when _load_pretrained_model returns.
    A safetensors file (the default format) is memory-mapped, so these are file pages in rank 0's
    resident set (measured: a 150 MB bf16 file, +146 MB RssFile once its tensors are read, gone
    after ``del``): the kernel may reclaim them under pressure, so this is the most rank 0 holds.
    Empty on other ranks and without ``load.state_dict_dtype`` (not HF, or no zero.Init)."""
    if rank != 0 or not load.zero_init or load.state_dict_dtype is None:
        return []
    N = ledger.plan.inventory.numel
    Dc = DTYPE_BYTES[load.state_dict_dtype]
    return [Entry(rank, "host_pageable", "parameters", "hf_state_dict", N * Dc, "load_state_dict",
                  f"N x {Dc} = {N} x {Dc} (the checkpoint's tensors in {load.state_dict_dtype}, every file merged, "
                  "on rank 0 only while from_pretrained copies them into the gathered modules)",
                  HF_STATE_DICT_SOURCE)]


def rank_only_entries(ec: EffectiveConfig, ledger: Ledger, load: LoadAssumption, rank: int) -> list[Entry]:
    """The entries only ``rank`` carries, beyond its ledger role's and the load phase shared by
    every rank: rank 0's copy of the HF checkpoint under ZeRO-3 (:func:`hf_state_dict_entries`)
    and its save-time entries (:func:`save_rank0_entries`: the 16-bit state dict at ZeRO-3, the
    model-states file's host copies below it). A rank with any of them is a role of its own
    (:func:`advisor.views.estimate.group_roles`), so a role's timeline is true for every rank of it."""
    return hf_state_dict_entries(ec, ledger, load, rank) + save_rank0_entries(ec, ledger, rank)


def rank_only_ranks(ec: EffectiveConfig, ledger: Ledger, load: LoadAssumption) -> list[int]:
    """The ranks with :func:`rank_only_entries`: rank 0, and under pipeline parallelism every rank that
    writes layer files (:func:`pipeline_layer_writers`); each is a role of its own."""
    cands = sorted({0, *pipeline_layer_writers(ledger)})
    return [r for r in cands if rank_only_entries(ec, ledger, load, r)]


def stepped_groups(ledger: Ledger) -> int:
    """How many param groups the timeline steps one at a time: the ZeRO-1/2 plans
    :func:`advisor.ledger.state.zero12_groups_stepped_apart` accepts (without model
    parallelism, whose groups are per stage); 0 otherwise (one step instant for every group)."""
    plan = ledger.plan
    # the cheap tests first: Inventory.groups() walks every tensor (generate asks for many plans)
    if plan.cluster.model_parallel or not zero12_groups_stepped_apart(plan.config, ledger.wrapper, 2):
        return 0
    ng = len(placement_of(plan).zero12)
    return ng if ng > 1 else 0


def instants(ec: EffectiveConfig, ledger: Ledger, ga: int, load: LoadAssumption | None = None) -> list[Instant]:
    """The timeline of one plan (see the module docstring). The step instants name the
    (sub-)group whose update is largest: ZeRO-3 sub-group k (``stage3.py`` step loops over
    sub-groups), ZeRO-1/2 param group g; where :func:`stepped_groups` > 0 every group has its own
    ``prep`` and ``update`` instant (keys ``first_step:g<i>:prep`` ...). ``load``: without
    zero.Init the instants of :data:`BEFORE_PARTITION` come before ``initialize``
    (``initialize:cast`` only when fp16/bf16 is on and ``load.dtype`` differs).

    The same for every role of a ledger: computed once per (ledger, config, ``ga``, ``load``) and
    kept on the ledger (it walks the param groups and every role's entries, so per role it made a
    ZeRO-1/2 plan with ~10^3 roles of a 10^6-tensor model O(roles x (tensors + roles)))."""
    memo = ledger.__dict__.setdefault("_instants", {})
    key = (id(ec), ga, load)
    got = memo.get(key)
    if got is None or got[0] is not ec:
        got = memo[key] = (ec, tuple(_instants(ec, ledger, ga, load)))
    return list(got[1])


def _instants(ec: EffectiveConfig, ledger: Ledger, ga: int, load: LoadAssumption | None) -> list[Instant]:
    """:func:`instants`, computed."""
    st = ec.zero.stage
    inv = ledger.plan.inventory
    W = ledger.plan.cluster.zero_world_size
    ngs = stepped_groups(ledger)
    where = ""
    if ngs:
        pass
    elif st == 3 and inv.has_trainable():
        sgs = zero3_sub_groups(inv, W, ec.zero.sub_group_size)
        if sgs:
            k = max(range(len(sgs)), key=lambda i: (sgs[i].numel, -i))
            where = f", sub-group {k}" + (f" of {len(sgs)}" if len(sgs) > 1 else "")
    elif st in (1, 2):
        # each group's numel once per tensor list (generate asks per plan)
        sizes = inv.memo(("group_numel_sums",), lambda: tuple(sum(t.numel for t in g) for g in inv.groups()))
        if len(sizes) > 1:
            g = max(range(len(sizes)), key=lambda i: (sizes[i], -i))
            where = f", param group {g}"
    out = [Instant("load", "load", "load: model built before deepspeed.initialize")]
    if load is not None and load.zero_init and load.state_dict_dtype is not None:
        out.append(Instant("load:state_dict", "load",
                           "load: from_pretrained copies the checkpoint in (rank 0 holds its state dict)"))
    if load is not None and not load.zero_init:
        if (ec.fp16_enabled or ec.bf16_enabled) and load.dtype != ec.model_dtype:
            out.append(Instant("initialize:cast", "initialize",
                               f"initialize: parameters cast {load.dtype} -> {ec.model_dtype} in host memory"))
        out.append(Instant("initialize:module", "initialize",
                           "initialize: the whole model on the accelerator, not yet partitioned" if st == 3 else
                           # under a PipelineModule each rank moves only its stage's layers (engine.py
                           # _configure_distributed_model module.to; pipe/module.py builds the stage only)
                           "initialize: the stage's layers moved to the accelerator (module.to)"
                           if ledger.plan.cluster.pipeline_parallel > 1 else
                           "initialize: the whole model moved to the accelerator (module.to)"))
    if zero3_init_transients_apply(ec, ledger, load) and zero3_fp32_convert_applies(ec):
        out.append(Instant("initialize:fp32_partitions", "initialize",
                           "initialize: a sub-group's fp32 master cast and cloned"))
    if zero3_init_transients_apply(ec, ledger, load):
        out.append(Instant("initialize:grad_hooks", "initialize",
                           "initialize: a parameter gathered for its gradient hook"))
    if fp16_optimizer_init_transient_applies(ec, ledger, load):
        out.append(Instant("initialize:optimizer_states", "initialize",
                           "initialize: initialize_optimizer_states' fp32 zeros"))
    if unfused_optimizer_init_transient_applies(ec, ledger, load):
        out.append(Instant("initialize:optimizer_states", "initialize",
                           "initialize: the warm-up step on 16-bit and fp32 zero gradients"))
    if zero12_init_transients_apply(ec, ledger, load):
        out.append(Instant("initialize:flatten", "initialize",
                           "initialize: a flat 16-bit group made beside the parameters"))
        if ec.offload_optimizer_effective == "none":
            out.append(Instant("initialize:optimizer_states", "initialize",
                               "initialize: initialize_optimizer_states' fp32 zeros"))
    out.append(Instant("initialize", "initialize", "after deepspeed.initialize"))
    micro = [1] if ga <= 1 else [1, ga]
    mid_fwd, mid_bwd, refetch = middle_microstep(ec, ledger, ga)
    if mid_fwd:
        # a middle micro-step (1 < m < ga), one pair for all (middle_microstep); at ZeRO-3 micro-step 2's forward
        # fetches again what the first backward released (state.zero3_refetch_prefetch_bytes,
        # state.zero3_nvme_refetch_bytes); from micro-step 3 on they stay gathered
        micro = [1, 2, ga]
    for k in micro:
        mid = k == 2 and ga > 2
        tag = (f"micro-step {k}" + (" (accumulation boundary)" if k == ga and ga > 1 else "")) if not mid else (
            "micro-step 2" if ga == 3 else f"micro-steps 2-{ga - 1}")
        ftag = "micro-step 2" if mid and refetch else tag
        out.append(Instant(f"forward:{k}", "forward", f"first iteration, forward of {ftag}", middle=mid))
        if mid and not mid_bwd:  # forward only (middle_microstep)
            continue
        out.append(Instant(f"backward:{k}", "backward", f"first iteration, backward of {tag}", middle=mid))
        if mid and reduces_in_backward(ec, ledger, ga):
            # the middle backward's own reduce (ZeRO-2's ipg flushes, BF16_Optimizer's epilogue), as reduce:1 below
            what = "gradient reduce" if st == 2 else f"gradients added into the {ec.grad_dtype} accumulation buffer"
            out.append(Instant("reduce:2", "reduce", f"first iteration, {what} in the backward of {tag}", middle=True))
        if k == 1 and ga > 1 and st == 2:
            # ZeRO-2 reduces in every micro-step's backward (stage_1_and_2.py: the hooks and
            # independent_gradient_partition_epilogue run per backward), not only at the boundary
            out.append(Instant("reduce:1", "reduce", "first iteration, gradient reduce in the backward of micro-step 1"))
        elif k == 1 and ga > 1 and ledger.wrapper == "BF16_Optimizer":
            # BF16_Optimizer adds every micro-step's gradients into its grad_accum_dtype buffer in backward_epilogue
            # (bf16_optimizer.py l.503-538; state.bf16_optimizer_epilogue_terms), all-reducing only at the boundary
            out.append(Instant("reduce:1", "reduce",
                               f"first iteration, gradients added into the {ec.grad_dtype} accumulation buffer after the "
                               "backward of micro-step 1"))
    norm = any(e.item == "grad_norm_fp64" for rl in ledger.ranks for e in rl.entries)
    out.append(Instant("reduce", "reduce", "first iteration, gradient reduce at the accumulation boundary"))
    if norm:
        out.append(Instant("first_step:norm", "first_step", "first optimizer step: gradient norm"))
    out += _step_instants("first_step", "first", where, ngs)
    post = st == 3 and any(e.item in PERSIST_GATHERED and e.bytes for rl in ledger.ranks for e in rl.entries)
    if post:
        out.append(Instant("first_step:post", "first_step",
                           "first optimizer step: persistent parameters gathered again (_post_step)"))
    if ga > 1 and ledger.plan.cluster.pipeline_parallel > 1:
        # 1F1B: a stage holds the most micro-batches in flight at its first backward (pipe_in_flight), which in the
        # steady iteration comes after the first step's state is made: an instant of its own
        out.append(Instant(STEADY_FIRST_BACKWARD, "backward", "steady iteration, backward of micro-step 1"))
    tag = f"micro-step {ga}" + (" (accumulation boundary)" if ga > 1 else "")
    out.append(Instant("steady:forward", "forward", f"steady iteration, forward of {tag}"))
    out.append(Instant("steady:backward", "backward", f"steady iteration, backward of {tag}"))
    out.append(Instant("steady:reduce", "reduce", "steady iteration, gradient reduce at the accumulation boundary"))
    if norm:
        out.append(Instant("steady_step:norm", "steady_step", "steady optimizer step: gradient norm"))
    out += _step_instants("steady_step", "steady", where, ngs)
    if post:
        out.append(Instant("steady_step:post", "steady_step",
                           "steady optimizer step: persistent parameters gathered again (_post_step)"))
    gather = st == 3 and ec.zero.gather_16bit_weights_on_model_save
    from advisor.ledger.checkpoint import save16_instant_words  # the checkpoint section's own predicates and words
    out.append(Instant("save:16bit", "save", "save_16bit_model: " + save16_instant_words(ec, ledger.plan.cluster)))
    if gather:
        out.append(Instant("save:16bit:end", "save", "save_16bit_model: rank 0's state dict whole"))
    out.append(Instant("save:model", "save", "save_checkpoint: the model-states file"))
    out.append(Instant("save:optim", "save", "save_checkpoint: the optimizer-states file"))
    out.append(Instant("save", "save", "checkpoint saved"))
    return out


def _step_instants(phase: str, word: str, where: str, ngroups: int) -> list[Instant]:
    if not ngroups:
        return [Instant(f"{phase}:prep", phase, f"{word} optimizer step{where}: gradients flattened and cast"),
                Instant(f"{phase}:update", phase, f"{word} optimizer step{where}: update")]
    out = []
    for g in range(ngroups):
        tag = f"{word} optimizer step, param group {g} of {ngroups}"
        out.append(Instant(f"{phase}:g{g}:prep", phase, f"{tag}: gradients flattened and cast", g))
        out.append(Instant(f"{phase}:g{g}:update", phase, f"{tag}: update", g))
    return out


def _group_bytes(e: Entry, inst: Instant, groups: tuple[tuple[int, int, int, int], ...], D: int,
                 lazy: bool, shared: bool = True) -> int | None:
    """Bytes of ``e`` at the per-group step instant ``inst`` (group g of ``groups``, the rank's
    :func:`advisor.ledger.state.zero12_step_groups` terms), or None when the entry does not
    depend on the group (its generic lifetime decides). DeepSpeed order per group g
    (``stage_1_and_2.py`` DeepSpeedZeroOptimizer.step): ``prep`` = flatten(averaged_gradients[g])
    cast to fp32, every later group's gradients still live; then ``free_grad_in_param_list`` and
    ``averaged_gradients[g] = None``; ``update`` = ``_optimizer_step(g)`` (this group's moments
    created at the first step), then ``single_partition_of_fp32_groups[g].grad = None``.
    An fp32 model (D = 4) whose group-g slice lies in one tensor (flat_g = 0): flatten returns that
    view of grads_in_partition and ``.to(fp32)`` returns it again (step l.3112-3118), so the fp32
    gradient costs nothing and keeps the whole grads_in_partition storage live through the group's
    update (tests/engine/test_peak_parity.py z2_fp32_groups_w2, rank 0: step:1 +1,588 B without it).
    ``shared`` False (ZeRO-2 without ``contiguous_gradients``): there is no grads_in_partition; group g's
    averaged_gradients views the whole gradients meeting its slice themselves (get_flat_partition over
    all_grad_tensors, l.1047; kept by reduce_ipg_grads, l.2262-2270), so each group's I_g x D goes with its
    own ``averaged_gradients[g] = None`` (engine z2_bf16_noncontig_groups_w2: step:1 was 13.6% over with
    the shared storage)."""
    g = inst.group
    prep = inst.key.endswith(":prep")
    P_g, _, _, flat_g = groups[g]
    view = D == 4 and not flat_g
    if e.cls == "optimizer_states" and e.life == "persistent" and lazy:
        if inst.phase != "first_step":
            return e.bytes
        made = g if prep else g + 1        # groups whose state exists: those updated so far
        if e.item == "step":
            return e.bytes * made // len(groups)
        p_t = sum(x[0] for x in groups)
        return e.bytes * sum(x[0] for x in groups[:made]) // p_t if p_t else 0
    if e.item == "fp32_grad" and (view or not e.alias_of):
        return 0 if view else P_g * 4
    if e.item == "flat_grad_partition":
        return flat_g * D if prep else 0
    if e.item in ("torch_step_temporaries", "torch_step_foreach"):
        # torch's step on group g's one flat fp32 partition (state.torch_step_temporaries: f x P_g x 4 for a
        # one-tensor call; the entry holds the largest group's)
        p_max = max(x[0] for x in groups)
        return 0 if prep or not p_max else e.bytes * P_g // p_max
    if e.item == "averaged_gradients":
        held = groups[g:] if (prep or view) else groups[g + 1:]
        if not shared:
            return sum(x[1] + x[2] for x in held) * D
        i_t = sum(x[1] for x in groups)
        # grads_in_partition: one storage for every group, live while any later group views it
        return ((i_t if any(x[1] for x in held) else 0) + sum(x[2] for x in held)) * D
    return None


#: ZeRO++ hpZ's secondary partitions (state lp_param_secondary / lp_param_secondary_persist): :func:`hpz_secondary_live`.
HPZ_SECONDARY_LIVES = ("hpz_secondary", "hpz_secondary_backward", "hpz_secondary_persistent")


def hpz_secondary_live(life: str, k: str, ph: str, save_gather: bool = False) -> bool:
    """Whether hpZ's secondary partitions of life ``life`` are live at instant ``k`` (phase ``ph``), DeepSpeed 0.19.8.
    Each partition() makes a parameter's secondary before its primary, when it has none
    (``partition_parameters.py`` _partition l.1768-1769 -> _partition_param_sec l.1906-1915), so Init(module=...)
    / zero.Init make every one at initialize (the whole-model moment: :func:`zero3_module_partition_peak`);
    the first iteration's fetches read them (all_gather_coalesced l.1571-1575) and the releases find them made
    (l.1906). Every step's _post_step frees them all (``stage3.py`` l.2846 invalidate_secondary_tensor), after its
    all-gather of the persistent parameters (l.2841), so they are live at ``:post`` beside the gathered ones
    (engine z3_bf16_hpz2_w4 probe, W = 4, h = 2, 2026-12-06: step:1 402,617 B on every rank = ``first_step:post``
    without them 359,344 + 43,224 + 49 B of scalars) and gone from the next instant on. Then ``hpz_secondary`` (the non-persistent parameters') is made again as each
    parameter is released after its forward (``partitioned_param_coordinator.py`` __release_param l.629), so it is
    live through the later forwards (counted whole: at a forward's start only the released ones exist),
    backwards and steps; ``hpz_secondary_backward`` the same where no forward releases them (the reuse window,
    stage3_max_reuse_distance, reaches their backward use: l.653-662) and the fetch is replayed: in the later
    backwards each module's is made as it is released after its backward, which the replay's backward moments
    hold (``state.zero3_backward_fetch``), so this entry is live in the first iteration and the steps only;
    ``hpz_secondary_persistent`` (the persistent parameters', which no forward releases:
    __params_to_release skips ds_persist) is not live in the later forwards and backwards, and made again by
    each step's _partition_all_parameters (``stage3.py`` l.2878 -> release_and_reset_all), so live in every step.
    A frozen parameter's secondary is never freed (invalidate_secondary_tensor walks the optimizer's fp16_groups,
    trainable parameters only, ``stage3.py`` l.755-759): ``state`` gives it life ``persistent``
    (lp_param_secondary_frozen). Save: checkpoint_event_prologue (l.3845) partitions the persistent ones, the 16-bit gather releases the others
    after each module, and the epilogue frees them all (l.3848). Engine z3_bf16_hpz2_w2 (TINY, every parameter
    persistent, W = h = 2, 2026-12-06, 2 runs): forward:2 / backward:2 were 43,089 / 43,163 B under the ledger
    with the secondaries (43,214 B) kept, now within 0.03%; step:2 matches with them live."""
    if ph == "load" or k in BEFORE_PARTITION:
        return False
    persist = life == "hpz_secondary_persistent"
    if ph == "save":
        return (k == "save:16bit" and save_gather) or (persist and k in ("save:model", "save:optim"))
    if ph in ("first_step", "steady_step") or life == "hpz_secondary":
        return True
    return not k.startswith("steady")


#: :func:`_live`'s answers for a whole list of entries at one instant, keyed by everything it reads: per
#: ((life, item, cls) of each entry, the flags) a dict of (instant key, phase) -> a 0/1 flag per entry.
#: role_timeline asks ~12 entries x ~40 instants per rank role, ~3 roles a plan, of the same few entry kinds
#: in every plan generate tries (Kimi-K2 per-expert: 846k calls, ~0.6 s; issue 21). Bounded by
#: _LIVE_MASKS_MAX entry lists; tests/conftest.py clears it per test.
_LIVE_MASKS: dict = {}
_LIVE_MASKS_MAX = 4096


def _live_masks(ents: "list[Entry]", flags: tuple) -> dict:
    """The (instant key, phase) -> live flags dict of :data:`_LIVE_MASKS` for ``ents`` under ``flags`` (the
    arguments of :func:`_live` after the instant): filled by :func:`_live_mask`."""
    key = (tuple([(e.life, e.item, e.cls) for e in ents]), flags)
    got = _LIVE_MASKS.get(key)
    if got is None:
        if len(_LIVE_MASKS) >= _LIVE_MASKS_MAX:
            _LIVE_MASKS.clear()
        got = _LIVE_MASKS[key] = {}
    return got


def _live_mask(masks: dict, ents: "list[Entry]", inst: Instant, flags: tuple) -> bytes:
    """A 0/1 flag per entry of ``ents``: :func:`_live` at ``inst`` (which reads only its key and phase, and
    each entry's life, item and class), kept in ``masks`` (:func:`_live_masks`)."""
    k = (inst.key, inst.phase)
    m = masks.get(k)
    if m is None:
        m = masks[k] = bytes([bool(_live(e, inst, *flags)) for e in ents])
    return m


def _live(e: Entry, inst: Instant, lazy_state: bool, consumed: bool, transients: bool = False,
          first_fetch: bool = False, first_bwd: tuple[str, ...] = (), save_gather: bool = False) -> bool:
    k, ph = inst.key, inst.phase
    life = e.life
    if k == STEADY_FIRST_BACKWARD:
        k = "backward:1" if life in _MICROSTEP_LIVES else "steady:backward"
    if life in INIT_TRANSIENT_LIVES:
        return k == INIT_TRANSIENT_LIVES[life]
    if k == "initialize:flatten":  # its entries hold every byte live there (zero12_init_transients) but the
        # other stages' modules a whole build keeps (after_load: no stage's optimizer touches them)
        return life == "after_load"
    if k == "initialize:fp32_partitions":  # the 16-bit partitions beside it (zero3_init_transients), hpZ's too
        return e.item in ("lp_param_partitions", "lp_param_secondary_frozen") or life in HPZ_SECONDARY_LIVES
    if k in ("initialize:optimizer_states", "initialize:grad_hooks"):  # what is live at initialize's end, beside it
        inst = Instant("initialize", ph, inst.label)
        k = "initialize"
    if life in HPZ_SECONDARY_LIVES:
        return hpz_secondary_live(life, k, ph, save_gather)
    if life == "first_forward":
        return k == "forward:1"
    if life == "first_backward":
        return first_fetch and k in first_bwd
    if life == "steady_forward":
        # ZeRO-3's replayed fetch (state.zero3_fetch_replay): every forward after the first (reset_step at each
        # forward's start: the trace is complete from the second on, micro-steps included)
        return ph == "forward" and k != "forward:1"
    if life == "steady_backward":
        return ph in ("backward", "reduce") and k not in first_bwd and k != "reduce:1"
    if life == "steady_forward_backward":
        # the reference's gathered parameters where only the first iteration is replayed (NVMe parameters)
        return ((ph == "forward" and k != "forward:1")
                or (ph in ("backward", "reduce") and k not in first_bwd and k != "reduce:1"))
    if k.endswith(":post"):
        # after the update loop (stage3.py _post_step): fp32 gradients released, state kept
        if life not in ("persistent", "backward"):
            return False
    if transients and e.item in _IN_REDUCE_TRANSIENT and ph in ("backward", "reduce"):
        # modeled by the backward/reduce transients: averaged_gradients only exists from the
        # reduce on, and ZeRO-1's 16-bit grads are moved into the bucket by the reduce
        return e.item == "lp_grads" and ph == "backward"
    if life == "accumulated":
        # micro-steps after an iteration's first (GA > 1): forward:ga, backward:ga, the boundary's
        # reduce, and the steady iteration's (its last micro-step)
        return ph in ("forward", "backward", "reduce") and k not in ("forward:1", "backward:1", "reduce:1")
    if life == "refetch_forward":
        # ZeRO-3, GA > 1: the first iteration's forward of micro-step 2 (forward:GA at GA 2; its own
        # instant above; state.zero3_refetch_prefetch_bytes); the steady iteration's forwards
        # follow _post_step's gather, the later ones a complete trace
        return k == "forward:2"
    if life == "accumulated_forward":
        # ZeRO-1, GA > 1: the forward of every micro-step after an iteration's first
        return ph == "forward" and k != "forward:1"
    if life == "accumulated_backward":
        # ZeRO-1 and stage 0, GA > 1: the backward of every micro-step after an iteration's first
        return ph == "backward" and k != "backward:1"
    if life == "accumulated_reduce":
        # ZeRO-2 compact fp32 gradient buffer, GA > 1: the reduce of every micro-step after an iteration's first
        return ph == "reduce" and k != "reduce:1"
    if life == "first_microstep_backward":
        # ZeRO-1 under offload, GA > 1: micro-step 1's backward (no reduce before the boundary)
        return k == "backward:1"
    if life == "first_microstep_reduce":
        # ZeRO-2 under offload, GA > 1: the reduce inside micro-step 1's backward (state.zero12_offload_microstep_terms)
        return k == "reduce:1"
    if life == "boundary_reduce":
        # ZeRO-2 under offload, GA > 1: the accumulation boundary's reduce only (its fp64 norm copies); the
        # boundary's all-reduce flat copy (BF16_Optimizer, ZeRO-1's pipeline ipg bucket): not a micro-step's
        return ph == "reduce" and k not in MICROSTEP_REDUCES
    if life == "reduce_step":
        # ZeRO-1 under offload with fp32 gradient accumulation (state.zero12_offload_fp32_accum): the compact fp32
        # partition, from the boundary's reduce through the step's update
        return ((ph == "reduce" and k not in MICROSTEP_REDUCES)
                or (ph in ("first_step", "steady_step") and not k.endswith(":post")))
    if life == "compact_accumulated":
        # ZeRO-2 under offload with fp32 accumulation at GA > 1 (state.zero12_offload_compact): the compact fp32
        # partition from micro-step 1's reduce (whose moments count it themselves) through the step's update
        return ((ph in ("forward", "backward", "reduce") and k not in ("forward:1", "backward:1", "reduce:1"))
                or (ph in ("first_step", "steady_step") and not k.endswith(":post")))
    if life == "autograd":
        return ph == "backward"
    if life == "reduce":
        return ph == "reduce"
    if life == "step_norm":
        return k.endswith(":norm")
    if life == "after_load":
        # --pipeline-build whole: the other stages' modules PipelineModule._layer_specs holds (PIPELINE_WHOLE_LOAD),
        # live at every instant after the load's (whose load_model_copy is the whole model)
        return ph != "load"
    if k in BEFORE_PARTITION:
        return life == ("init_cast" if k == "initialize:cast" else "init_module")
    if life in ("init_cast", "init_module"):
        return False
    if life == "load":
        return k == "load"
    if life == "load_state_dict":
        return k == "load:state_dict"
    if life == "save":
        return ph == "save"
    if life == "save_16bit":
        return k in ("save:16bit", "save:16bit:end")
    if life == "save_gather":
        return k == "save:16bit"
    if life == "save_16bit_end":
        return k == "save:16bit:end"
    if life == "save_model":
        return k == "save:model"
    if life == "save_optim":
        return k == "save:optim"
    if ph == "load":
        return False
    if life == "from_first_reduce":
        # made by micro-step 1's reduce (ZeRO-2 under offload, GA > 1: accumulated_grads_in_cpu), kept after it
        return k not in ("initialize", "forward:1", "backward:1", "reduce:1")
    if life == "persistent":
        if k == "initialize" and e.item in PIPE_TRAIN_BATCH_ITEMS:
            # made by the first train_batch (runtime/pipe/engine.py), not by deepspeed.initialize
            return False
        if e.item in PERSIST_GATHERED and (k in ("save:model", "save:optim") or (k == "save:16bit" and save_gather)):
            # save_checkpoint / the 16-bit gather start with checkpoint_event_prologue, which partitions
            # every parameter, the persistent ones too (stage3.py l.3844-3845), until the epilogue
            # all-gathers them again (l.3847-3850)
            return False
        if e.item in PERSIST_GATHERED and (
                (first_fetch and (k == "forward:1" or k in first_bwd)) or
                (ph in ("first_step", "steady_step") and not k.endswith(":post"))):
            # forward:1: gathered and released module by module (the zero3_first_fetch entry
            # stands for them); the step: stage3.py step -> _partition_all_parameters releases
            # every parameter, the persistent ones too, until _post_step all-gathers them again
            return False
        if e.item in PERSIST_GATHERED and k == "initialize":
            # ZeRO-3 persistent parameters are partitioned like the rest at initialize and gathered
            # for good at their first fetch (partitioned_param_coordinator.py fetch_sub_module;
            # __params_to_release skips ds_persist): not yet at the end of initialize (engine: -86,423 B there)
            return False
        if lazy_state and e.cls == "optimizer_states":
            # created at the first update: absent before it (initialize and the first iteration)
            return not (k == "initialize" or k in ("first_step:norm", "first_step:prep") or
                        (ph in ("forward", "backward", "reduce") and not k.startswith("steady")))
        return True
    if life == "init":
        return ph == "initialize"
    if life == "backward":
        if ph in ("backward", "reduce"):
            return True
        if ph in ("first_step", "steady_step"):
            return not (consumed and e.item in _CONSUMED_BEFORE_UPDATE and k.endswith(":update"))
        return False
    if life == "in_backward":
        return ph in ("backward", "reduce")
    if life == "forward_backward":
        return ph in ("forward", "backward")
    if life == "step":
        return ph in ("first_step", "steady_step") and not k.endswith(":norm")
    if life == "step_prep":
        return k in ("first_step:prep", "steady_step:prep")
    if life == "first_step":
        return k == "first_step:update"
    if life == "step_update":
        return ph in ("first_step", "steady_step") and k.endswith(":update")
    return False


@dataclass
class Timeline:
    """Live bytes per ledger tier at every instant, with the entries behind them.

    ``live[i][tier]`` = bytes live at ``instants[i]``; ``entries[i]`` = (item, tier, class, bytes)
    of what is live there (aliases that cost nothing left out)."""

    instants: list[Instant]
    live: list[dict[str, int]]
    entries: list[list[tuple[str, str, str, int]]] = field(default_factory=list)

    def series(self, tiers: tuple[str, ...]) -> list[int]:
        """Live bytes of the union of ``tiers`` at every instant."""
        return [sum(d.get(t, 0) for t in tiers) for d in self.live]

    def peak(self, tiers: tuple[str, ...], exclude_phases: tuple[str, ...] = ()) -> tuple[int, int]:
        """(bytes, index of the first instant reaching them) over the instants (minus those whose
        phase or key is in ``exclude_phases``) for the union of ``tiers``; on a tie a middle micro-step's instant
        (``Instant.middle``) yields to the other: it names the peak only where it is above every other instant."""
        s = self.series(tiers)
        idx = [i for i, x in enumerate(self.instants) if x.phase not in exclude_phases and x.key not in exclude_phases]
        if not idx:
            return 0, 0
        best = max(idx, key=lambda i: (s[i], not self.instants[i].middle, -i))
        return s[best], best

    def put(self, i: int, item: str, tier: str, cls: str, nbytes: int, label: str | None = None) -> None:
        """Set ``item``'s bytes on ``tier`` at instant ``i`` to ``nbytes`` (0 removes it; a second
        call replaces the first), and its words to ``label`` when given: a term the fit decides from
        the capacity (:func:`zero12_flat_fallback` at ``initialize:module``), shown on the same
        timeline as the ledger's entries."""
        rows = self.entries[i]
        for j, row in enumerate(rows):
            if row[0] == item and row[1] == tier:
                self.live[i][tier] -= row[3]
                del rows[j]
                break
        if nbytes:
            self.live[i][tier] = self.live[i].get(tier, 0) + nbytes
            rows.append((item, tier, cls, nbytes))
        if label is not None:
            x = self.instants[i]
            self.instants[i] = replace(x, label=label)

    def by_class(self, i: int, tiers: tuple[str, ...]) -> dict[str, int]:
        """Bytes live at instant ``i`` in ``tiers``, by state class (every class of ``state.CLASSES``, 0 where
        none is live): the composition of :meth:`series`'s figure there, whose sum it is."""
        from advisor.ledger.state import CLASSES
        out = {c: 0 for c in CLASSES}
        for _item, tier, cls, n in self.entries[i]:
            if tier in tiers:
                out[cls] = out.get(cls, 0) + n
        return out

    def contributors(self, i: int, tiers: tuple[str, ...], top: int = 5) -> list[dict[str, Any]]:
        """The ``top`` largest live entries at instant ``i`` in ``tiers`` (bytes descending)."""
        rows = [e for e in self.entries[i] if e[1] in tiers and e[3] > 0]
        rows.sort(key=lambda e: -e[3])
        return [{"item": a, "tier": b, "class": c, "bytes": n} for a, b, c, n in rows[:top]]


def _load_and_init(ec: EffectiveConfig, ledger: Ledger, load: LoadAssumption, r: int) -> list[Entry]:
    """:func:`load_entries` + :func:`init_entries` of rank ``r``, computed once per ledger and
    assumption where they are the same on every rank (their ``rank`` field is not read by the
    timeline): each walks the tensor list, so per role a ZeRO-1/2 plan with ~10^3 roles of a
    10^6-tensor model paid O(roles x tensors). Computed per rank under model parallelism (the
    rank's stage) and with ZeRO-3 NVMe parameter offload (the rank's own swap buffers)."""
    cl = ledger.plan.cluster
    if cl.model_parallel or (ec.zero.stage == 3 and ec.offload_param_effective == "nvme"):
        return load_entries(ec, ledger, load, r) + init_entries(ec, ledger, load, r)
    memo = ledger.__dict__.setdefault("_load_init_entries", {})
    key = (id(ec), load, load.options.hf)  # options (--hf: HF_WHOLE_LOAD) are not part of load's equality
    got = memo.get(key)
    if got is None or got[0] is not ec:
        got = memo[key] = (ec, tuple(load_entries(ec, ledger, load, r) + init_entries(ec, ledger, load, r)))
    return list(got[1])


#: Gradients backward makes whole (ZeRO 0-2), split by the moment of backward that made them
#: (:func:`backward_grad_layout`): ``sum`` = every param.grad made so far (stage 0's and ZeRO-1's ``lp_grads``,
#: made by autograd's AccumulateGrad as each node runs, ``torch/csrc/autograd/functions/accumulate_grad.h``;
#: stage 0 keeps them to the boundary, ``engine.py`` _take_model_step l.3522-3532; ZeRO-1 reduces them only at
#: the boundary, ``engine.py`` allreduce_gradients l.3088-3092 -> ``stage_1_and_2.py`` reduce_gradients
#: l.962-968), ``max`` = the largest new gradient beside the kept param.grad
#: (``state.accumulate_grad_new_elements``: the node running now).
MADE_GRAD_ITEMS = {"lp_grads": "sum", "accumulate_grad_new": "max"}


#: issue 21: backward_grad_layout of a tensor list with no layer name by C-level sums (False: the walk, the reference;
#: tests/test_grad_layout_no_layer22.py compares them)
GRAD_LAYOUT_NO_LAYER = True
_NAME, _NUMEL, _TRAINABLE = (operator.attrgetter(a) for a in ("name", "numel", "trainable"))


def backward_grad_layout(inv: Any) -> tuple[int, int, tuple[int, ...], int, int, tuple[int, ...], int]:
    """Where backward makes each trainable gradient of ``inv`` (elements), in forward order:
    ``(pre, post, layers, pre_max, post_max, layer_maxes, N)``: ``pre`` = the tensors before the first
    decoder-layer tensor (the embedding: its backward runs last), ``post`` = the other tensors outside
    any layer (final norm, lm_head: run first, right after the loss), ``layers[i]`` = layer i's elements
    (layers by :data:`advisor.model.parallel._LAYER_RE`'s index, in tensor order); ``*_max`` = the
    largest n_p + s_p of each (s_p: ``state.autograd_siblings``, the gradient its node makes with it);
    ``N`` = all trainable elements. No layer tensor: everything is ``post`` (one moment, an upper bound).
    A tied embedding (one tensor, listed first) is ``pre``: its AccumulateGrad runs once, after the
    embedding's backward adds its part (``torch/csrc/autograd/engine.cpp``: a node runs when all its
    inputs are ready). Memoised per tensor list."""
    from advisor.ledger.state import autograd_siblings
    from advisor.model.parallel import _LAYER_RE

    def compute() -> tuple:
        sib = autograd_siblings(inv)
        tensors = inv.tensors
        if GRAD_LAYOUT_NO_LAYER and _LAYER_RE.search(".".join(map(_NAME, tensors))) is None:
            # no name holds a layer (the names joined by ".": a name's match is found in the join, where "^" is
            # the "." before it; a match across two names is only a false alarm, walked): every trainable tensor
            # goes to ``pre`` in the loop below, returned as ``post`` -- its sums at C level (issue 21: 25 PP stage
            # lists of the 1e5 nameless tensors at generate's limit, a regex search and a Python step each)
            flags = list(map(_TRAINABLE, tensors))
            ns = list(itertools.compress(map(_NUMEL, tensors), flags))
            pre = sum(ns)
            return 0, pre, (), 0, max(itertools.chain((0,), map(operator.add, ns, itertools.compress(sib, flags)))), \
                (), pre
        pre = post = pre_max = post_max = n_all = 0
        layers: dict[str, list[int]] = {}
        seen_layer = False
        for t, s in zip(inv.tensors, sib):
            if not t.trainable:
                continue
            n_all += t.numel
            m = _LAYER_RE.search(t.name)
            if m:
                seen_layer = True
                got = layers.setdefault(t.name[:m.end()], [0, 0])
                got[0] += t.numel
                got[1] = max(got[1], t.numel + s)
            elif seen_layer:
                post += t.numel
                post_max = max(post_max, t.numel + s)
            else:
                pre += t.numel
                pre_max = max(pre_max, t.numel + s)
        if not layers:
            return 0, pre, (), 0, pre_max, (), n_all
        return (pre, post, tuple(v[0] for v in layers.values()), pre_max, post_max,
                tuple(v[1] for v in layers.values()), n_all)
    return inv.memo(("backward_grad_layout", GRAD_LAYOUT_NO_LAYER), compute)


def _layer_moments(lay: tuple) -> list[int]:
    """The layer moments of backward worth evaluating, as j = layers run back before it (0 = layer L-1): all
    of them, or with identical layers (every layer's elements and largest n_p + s_p the same) j = 0, 1 and
    L-1 only: from j = 1 on a moment's gradients grow and its activations shrink by the same per layer, so
    the worst is at an end of that range (O(1) per instant for a 10^5-layer model, issue 21)."""
    layers, maxes = lay[2], lay[5]
    L = len(layers)
    if L > 3 and min(layers) == max(layers) and min(maxes) == max(maxes):
        return [0, 1, L - 1]
    return list(range(L))


def _made_grad_moments(e: Any, nb: int, lay: tuple, js: list[int], head: bool = False) -> list[int] | None:
    """Bytes of the made-gradient entry ``e`` (``nb`` at this instant) at each moment of backward:
    [start, the head's moment where ``head``, the layer moments ``js`` (j layers run back before it: layer
    L-1-j's backward), end] (:func:`_backward_activations`); None where it is not split (its bytes are not a
    whole number of bytes per element of :func:`backward_grad_layout`). Without ``head`` (pipeline
    parallelism) the head's gradients are counted with layer L-1's moment."""
    pre, post, layers, pre_max, post_max, layer_maxes, n_all = lay
    kind = MADE_GRAD_ITEMS[e.item]
    L = len(layers)
    if kind == "sum":
        if not n_all or nb % n_all or nb // n_all > 4:
            return None
        b = nb // n_all
        run = list(itertools.accumulate(reversed(layers), initial=post))  # run[j + 1]: head + layers L-1-j..L-1
        mid = [run[j + 1] * b for j in js] if L else [post * b]  # no layer: one moment, every gradient
        return [0, *([post * b] if head else []), *mid, n_all * b]
    big = max(pre_max, post_max, *layer_maxes)
    # one gradient of 2 or 4 bytes per element; an entry that holds more (state.py's ZeRO-1 offload GA > 1
    # accumulate_grad_new = the fp32 accumulation of every gradient + the largest new one) stays whole
    if not big or nb % big or nb // big > 4:
        return None
    b = nb // big
    # the head's nodes run just before layer L-1's: their own moment, or (no head moment) counted with it
    last = (layer_maxes[L - 1] if head else max(layer_maxes[L - 1], post_max)) if L else 0
    mid = [(last if j == 0 else layer_maxes[L - 1 - j]) * b for j in js] if L else [post_max * b]
    return [0, *([post_max * b] if head else []), *mid, pre_max * b]


def _backward_activations(a: Any, sized: list, d: dict[str, int], here: list, lay: tuple | None = None,
                          made: bool = True, n_flight: int = 1, kept_dup: int = 0, held: int = 0,
                          own_backward: bool = True) -> int:
    """Accelerator activation bytes at a backward instant, placed with the backward transients that
    are split by the moment of backward they belong to: the instant is the worst moment of backward,
    not the sum of each one's maximum. Split are ZeRO-3's region entries (``Entry.regions``:
    ``zero3_reduce_flush`` and the gathered parameters, (start, layers, end)) and the gradients backward
    makes whole at ZeRO 0-2 (:data:`MADE_GRAD_ITEMS`, per :func:`backward_grad_layout` of the rank's
    stage ``lay``; ``lp_grads`` only where ``made``: no param.grad kept from an earlier micro-step).

    The moments, with the activations live at each (``s`` = one layer's saved bytes of the micro-batch
    run back: its ``(saved - loss_head) / n_flight - pipe_kept`` over the inventory's layers):

    * start (the loss's backward): every saved activation + ``loss_backward_spike``; no parameter
      gradient made yet (the loss's nodes run first), beside ZeRO-3's flushes of the head's gradients;
    * the head's (lm_head's backward, ``backward_moments``; not under pipeline parallelism): the loss's nodes'
      saved tensors freed, the head's gradients made, ZeRO-3's start region;
    * layer i's backward, i = L-1 down to 0: the saved activations but those of layers i+1..L-1 of the
      run-back micro-batch (``layers_shared`` kept to the end), + ``recompute_layer`` + ``layer_backward``, beside the gradients of the head (lm_head, final norm:
      made at the head's moment, under pipeline parallelism counted with layer L-1's) and of layers i..L-1 (the whole layer's, made as its
      nodes run: an upper bound inside the layer, whose own saved tensors are counted too), ZeRO-3's
      largest flush among the layers. The loss head's saved tensors (``loss_head``) are freed from layer
      L-1's moment on (under pipeline parallelism counted at layer L-1's, an upper bound, and freed below it:
      engine, 2-stage PipelineModule, the last stage's micro-batch 1 backward: its peak is there, layer 0's);
    * end (the embedding's gradient, the epilogue's flush): the run-back micro-batch's saved tensors
      freed but what the PipelineEngine keeps of it (``pipe_kept``, until ``pipe/engine.py`` l.866)
      and the loss head's; every gradient made. The other in-flight micro-batches' saved tensors stay.

    Rules: torch's autograd releases a node's saved tensors after it runs
    (``torch/csrc/autograd/engine.cpp`` evaluate_function -> ``fn.release_variables()`` when
    ``keep_graph`` is false) and makes a parameter's gradient when its AccumulateGrad node runs;
    ``torch.utils.checkpoint`` recomputes a layer inside its own backward and its recomputed tensors go
    with that node. At the end of backward only what the modules before the first layer saved is live
    of the run-back micro-batch (the embedding's index input: counted as 0). ``kept_dup`` (the last
    pipeline stage's kept logits counted twice, :func:`_kept_output_in_activations`) is taken off the
    moments that still hold the loss head. ``held``: of the loss head, what the caller's output keeps past
    its nodes (the logits the model returns, ``ActivationEstimate.loss_head_kept``: a training loop's
    ``outputs = model(batch); engine.backward(outputs.loss)`` holds them through backward), never freed
    by the moments; 0 under pipeline parallelism, where the PipelineEngine's kept outputs
    (``pipe_outputs_kept``) are that reference and the engine measured the rest freed. Each split entry's full bytes (already in ``d``) are replaced
    by its moment's share; returns the activation bytes of the worst moment and rewrites the entries'
    row bytes to the same moment."""
    saved = a.saved_accelerator
    loss = getattr(a, "loss_backward_spike", 0)
    split = [(e, nb) for e, nb in sized if getattr(e, "regions", ()) and e.tier == "accelerator"]
    grads = []
    js = _layer_moments(lay) if lay is not None else []
    if js:  # k of L: the moments either side of the first checkpointed layer's (its recompute; layer_moment_breaks)
        js = sorted({*js, *(j + d for j in layer_moment_breaks(a, len(lay[2])) for d in (-1, 0)
                            if 0 <= j + d < len(lay[2]))})
    if lay is not None:
        for e, nb in sized:
            if e.tier == "accelerator" and e.item in MADE_GRAD_ITEMS and not e.regions and (
                    made or MADE_GRAD_ITEMS[e.item] == "max"):
                m = _made_grad_moments(e, nb, lay, js, head=own_backward)
                if m is not None:
                    grads.append((e, nb, m))
    layers = len(lay[2]) if lay is not None else 0
    if not split and not grads:
        return max(backward_moments(a, layers, [], n_flight, kept_dup, held, own_backward))
    acts = backward_moments(a, layers, js if grads else [], n_flight, kept_dup, held, own_backward)
    nm = len(acts)
    hm = 1 if own_backward else 0  # the head's moment, in the start region
    # each moment's bytes of every split entry (a ZeRO-3 entry's layers region at every layer moment)
    per = []
    for e, _ in split:
        r = e.regions
        per.append((e, [r[0]] * (1 + hm) + [r[1]] * (nm - 2 - hm) + [r[2]]))
    for e, _, m in grads:
        per.append((e, m))
    tot = [acts[k] + sum(m[k] for _, m in per) for k in range(nm)]
    k = max(range(nm), key=lambda j: (tot[j], -j))
    full = sum(nb for _, nb in split) + sum(nb for _, nb, _ in grads)
    d["accelerator"] -= full - sum(m[k] for _, m in per)
    names = {e.item: m[k] for e, m in per}
    for j, row in enumerate(here):
        if row[0] in names and row[1] == "accelerator":
            here[j] = (row[0], row[1], row[2], names[row[0]])
    return acts[k]


def _kept_output_in_activations(ledger: Ledger, rl: RankLedger, ga: int, sized: list) -> int:
    """Bytes counted twice at a backward instant of a pipeline's last stage with activations: the kept
    outputs (``state.pipeline_stage_entries``' ``pipe_outputs_kept``, one per pipe buffer used) include the
    micro-batch being run back, whose logits the activation estimate's saved tensors hold
    (``advisor.model.activations``: the 16-bit logits the model returns); one buffer's share, 0 elsewhere."""
    from advisor.ledger.state import pipe_buffers_used
    pp = ledger.plan.cluster.pipeline_parallel
    if pp <= 1 or not rl.stages:
        return 0
    kept = [(e, nb) for e, nb in sized if e.item == "pipe_outputs_kept" and e.tier == "accelerator"]
    # one buffer's share of the entry, at most what is kept at this instant (pipe_first_batch_share)
    return sum(min(nb, e.bytes // pipe_buffers_used(pp, max(rl.stages), ga)) for e, nb in kept)


def role_timeline(ledger: Ledger, rl: RankLedger, load: LoadAssumption, activations: Any = None,
                  ga: int | None = None, rank: int | None = None) -> Timeline:
    """The :class:`Timeline` of one rank role ``rl`` (bytes per ledger tier, plus the pseudo-tier
    entries of activations on ``accelerator`` / ``host_pageable``). ``rank`` = the rank the
    rank-specific transients are for (default the role's first rank: rank 0's save copy belongs
    to the role holding rank 0). ``ga`` = gradient accumulation steps (default from the config)."""
    ec = ledger.plan.config
    if ga is None:
        from advisor.config.effective import derive_batch
        ga = derive_batch(ec, batch_world_size(ec, ledger.plan.cluster))[2] or 1
    r = rl.rank if rank is None else rank
    ins = instants(ec, ledger, ga, load)
    # the ZeRO optimizers' rebuilt torch Adagrad makes its state at initialize (state.adagrad_rebuilt)
    lazy = ledger.wrapper not in _EAGER_STATE_WRAPPERS and not adagrad_rebuilt(ec, ledger.wrapper,
                                                                                ledger.basic_optimizer)
    consumed = ec.zero.stage in (1, 2)
    ents = (list(rl.entries) + _load_and_init(ec, ledger, load, r) + save_entries(ec, ledger, r)
            + rank_only_entries(ec, ledger, load, r))
    save_gather = ec.zero.stage == 3 and bool(ec.zero.gather_16bit_weights_on_model_save)
    transients = any(e.item == "reduce_transient" for e in rl.entries)
    first_fetch = any(e.item == "zero3_first_fetch" for e in rl.entries)
    # ZeRO-3's first backward still runs without a complete trace: the persistent parameters are
    # re-fetched and released module by module, so at its reduce (the end of backward) only the
    # module run last in backward (the first in forward) holds them (entry zero3_first_backward_gathered)
    first_bwd = ("backward:1", "reduce") if ga <= 1 else ("backward:1",)
    groups: tuple = ()
    if any(x.group >= 0 for x in ins):
        plan = ledger.plan
        per_rank = plan.derived.get("zero12_step_groups")  # every rank's, once per plan (roles may be ~W)
        if per_rank is None:
            per_rank = plan.derived["zero12_step_groups"] = zero12_step_groups(
                placement_of(plan).zero12, plan.cluster.zero_world_size)
        groups = per_rank[r]
    D = DTYPE_BYTES[ec.model_dtype]
    shared = ec.contiguous_gradients_effective  # one grads_in_partition for every group (_group_bytes)
    cl = ledger.plan.cluster
    pipe = cl.pipeline_parallel > 1
    warmup = pipe_warmup_forwards(cl.pipeline_parallel, cl.coords(r)[0], ga) if pipe else ()
    unfused_made = (unfused_warmup_state_bytes(ec, ledger, r, rl.entries)
                    if unfused_optimizer_init_transient_applies(ec, ledger, load) else {})
    live: list[dict[str, int]] = []
    rows: list[list[tuple[str, str, str, int]]] = []
    flags = (lazy, consumed, transients, first_fetch, first_bwd, save_gather)
    masks = _live_masks(ents, flags)
    for inst in ins:
        if inst.group >= 0:
            generic = Instant(inst.key.replace(f":g{inst.group}:", ":"), inst.phase, inst.label)
            sized = []
            for e in ents:
                nb = _group_bytes(e, inst, groups, D, lazy, shared)
                if nb is None:
                    if _live(e, generic, lazy, consumed, transients, first_fetch, first_bwd, save_gather):
                        sized.append((e, e.bytes))
                elif nb:
                    sized.append((e, nb))
        else:
            sized = [(e, e.bytes) for e in itertools.compress(ents, _live_mask(masks, ents, inst, flags))]
        if inst.key == "initialize:optimizer_states" and unfused_made:
            # FP16_UnfusedOptimizer's warm-up at its param group g: the later groups' state not made yet
            sized = [(e, unfused_made.get(id(e), nb)) for e, nb in sized]
        if inst.key in warmup:  # a 1F1B warm-up forward: no backward of this iteration before it
            sized = [(e, nb) for e, nb in sized if e.life not in ACCUMULATED_LIVES]
        if pipe:  # the pipe buffers the first train_batch has made by this instant
            st = cl.coords(r)[0]
            shares = {e.item: pipe_first_batch_share(e.item, cl.pipeline_parallel, st, ga, inst.key)
                      for e, _ in sized if e.item in PIPE_TRAIN_BATCH_ITEMS}
            if any(v is not None for v in shares.values()):
                sized = [(e, nb if shares.get(e.item) is None else nb * shares[e.item][0] // shares[e.item][1])
                         for e, nb in sized]
                sized = [(e, nb) for e, nb in sized if nb]
        if inst.phase == "backward" and (pipe or _before_boundary(inst.key, ga)):
            # the PipelineEngine all-reduces in ReduceGrads, not in backward; the engine, only at the boundary
            sized = [(e, nb) for e, nb in sized if e.item not in PIPE_REDUCE_ONLY_ITEMS]
        elif inst.phase == "backward":
            # the boundary's backward without pipeline parallelism holds two moments, not their sum: autograd adding
            # a new gradient into the kept param.grad (state accumulate_grad_new, during loss.backward, engine.py
            # l.3428) and the all-reduce's flat copy (allreduce_gradients, after it returns, no new gradient left):
            # the instant counts the larger. Engine z0_fp16_tbsga2_w2 backward:2 / backward:4: the phase's high-water
            # mark is the all-reduce's (777,790 B); with both summed the ledger was 824,270 B (+6.0%)
            flat = sum(nb for e, nb in sized if e.item in PIPE_REDUCE_ONLY_ITEMS)
            if flat:
                sized = [(e, max(0, nb - flat) if e.item == "accumulate_grad_new" else nb) for e, nb in sized]
        items_on = {e.item for e, _ in sized}
        d = {t: 0 for t in TIERS}
        here = []
        for e, nb in sized:
            if e.alias_of and e.alias_of in items_on:
                continue
            d[e.tier] += nb
            here.append((e.item, e.tier, e.cls, nb))
        a = activations
        flight = getattr(a, "in_flight", 1)
        if a is not None and pipe and inst.phase in ("forward", "backward") and getattr(a, "in_flight", 1) > 1:
            # the micro-batches in flight at this instant, not the most the stage ever holds
            n = pipe_in_flight(cl.pipeline_parallel, cl.coords(r)[0], ga, inst.key)
            if n is not None and n < a.in_flight:
                per_mb = (a.saved_accelerator - a.loss_head) // a.in_flight
                a = replace(a, saved_accelerator=a.saved_accelerator - (a.in_flight - n) * per_mb)
                flight = n
        if a is not None and inst.phase in ("forward", "backward"):
            if inst.phase == "forward":
                acc = a.saved_accelerator + a.loss_spike
            else:
                inv_r = _stage_inventory(ledger, r) if cl.model_parallel else ledger.plan.inventory
                # lp_grads is made by this backward unless an earlier micro-step's param.grad is kept into it
                # (accumulate_grad_new is live exactly there: state._add_accumulate_grad_new)
                made = not any(e.item == "accumulate_grad_new" for e, _ in sized)
                acc = _backward_activations(a, sized, d, here, backward_grad_layout(inv_r), made, flight,
                                            _kept_output_in_activations(ledger, rl, ga, sized),
                                            held=0 if pipe else _head_held(a), own_backward=not pipe)
            d["accelerator"] += acc
            here.append(("activations", "accelerator", "activations", acc))
            if a.saved_host:
                d["host_pageable"] += a.saved_host
                here.append(("activations (host checkpoints)", "host_pageable", "activations", a.saved_host))
        live.append(d)
        rows.append(here)
    return Timeline(ins, live, rows)
