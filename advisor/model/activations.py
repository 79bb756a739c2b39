"""Live activations per rank for one micro-batch: what autograd saves for backward.

Per-layer bytes follow Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models" (arXiv:2205.05198), re-derived op by op for the blocks that open models
actually use, as Hugging Face transformers implements them (``modeling_llama.py`` and friends),
and checked term by term against the trace of transformers' own models
(:mod:`advisor.engine.trace`, tests/test_activations.py). The paper's figures are for a GPT layer
(16-bit activations, 1-byte dropout masks, a 4h MLP whose GeLU saves its input, materialised
attention scores with dropout), main contributors only: section 4.1, sbh(34 + 5as/h) (attention
11 sbh + 5 as^2 b, MLP 19 sbh, the two LayerNorms 4 sbh); section 4.2.1, tensor parallelism t,
sbh(10 + 24/t + 5as/(ht)) (LayerNorm inputs, the q/k/v and first MLP inputs and both dropout
masks, 10 sbh, replicated); section 4.2.2, with sequence parallelism sbh/t (34 + 5as/h);
section 5, selective recompute removes the 5as/h term: sbh(10 + 24/t), or 34 sbh / t with
sequence parallelism. :func:`layer_terms` gives exactly these for such a layer, plus the
LayerNorms' fp32 mean and rstd the paper leaves out (tests/test_activations.py
``test_gpt_layer_matches_korthikanti_per_layer_memory``), and so does transformers' GPT-2 with
that GeLU, traced (``test_korthikanti_per_layer_memory_on_transformers_gpt2``); for other
blocks it departs where transformers' code does (below).

* Norms (:func:`norm_bytes`): LlamaRMSNorm 4 sbh (fp32 input) + 4 sb (rsqrt) + D sbh
  (normalised); GemmaRMSNorm 8 sbh + 4 sb (fp32 input and fp32 normalised, no 16-bit copy);
  LayerNorm (gpt2, bloom) its input (D sbh) and mean/rstd (fp32 on CUDA: 8 sb). Gemma 2 has
  four norms per layer; Qwen3 adds a per-head RMSNorm on q and k. BLOOM also normalises the
  embedding output (``word_embeddings_layernorm``; counted with the loss head, outside the
  layers) and its checkpointed layers keep the shared ALiBi bias (D b a s) alive.
* Linear layers save their input (D x input numel); the q/k/v projections share one input.
  Phi-3's fused ``qkv_proj``: v is a view of its output, so all of it stays alive; its RoPE
  (``torch.cat``) leaves q contiguous, so a flash kernel's output (laid out like q) is copied by
  the reshape before ``o_proj``: one more D sbh with flash/sdpa, not under selective recompute.
* Attention, SDPA / FlashAttention-style (``attention="flash"``): q and k after RoPE, v, the
  output (D each at their head counts) and the fp32 log-sum-exp (4 b a s); no s^2 term, and
  attention dropout is regenerated from the RNG state inside the kernel. Eager
  (``eager_attention_forward``): q, k and v repeated to all heads (``repeat_kv``), the fp32
  softmax output (4 b a s^2) and its 16-bit copy (D b a s^2; none in an fp32 model); GPT-2's softmax stays in the
  model dtype (D b a s^2 only); Gemma 2's logit soft-capping keeps its tanh (D b a s^2).
* MLP: a gated MLP (SwiGLU/GeGLU) saves gate, up, product and the activation's tensors; a plain
  MLP (GPT-2, BLOOM) the activation's tensors and the second linear's input. SiLU/GELU save one
  tensor, GPT-2's ``gelu_new`` four (:data:`ACTIVATION_SAVED`); ReLU saves its output, which the next
  op saves as its input too: one tensor fewer (:data:`ACTIVATION_SAVES_OUTPUT`; traced Llama with
  ``hidden_act: relu``, tests/test_activations.py). An inventory's meta may describe a block without
  attention (``attention_free``: one norm and the MLP on a residual) and a ``scale`` norm (``x * weight``). MoE: transformers' grouped_mm
  experts: each token's k routed copies (D sbk h), their MLPs, their outputs, the router's fp32
  softmax (4 sb E) and index/weight tensors, plus shared experts. DeepSpeed's MoE layer
  (``deepspeed.moe.layer.MoE``, ``moe_capacity_factor`` given: :func:`moe_capacity`) instead
  dispatches into a fixed (E, C, h) buffer of C = max(ceil(S / E x capacity_factor x k),
  min_capacity) slots per expert, S = the rank's s b tokens (``moe/sharded_moe.py`` of 0.19.8:
  ``_capacity`` :152-162; ``top1gating`` :232 capacity_factor, ``top2gating`` :364
  capacity_factor x 2, ``topkgating`` :446 capacity_factor x k; ``MoE.__init__``
  ``moe/layer.py`` :44-46 defaults capacity_factor 1.0, min_capacity 4): the experts' linears
  save all E x C slots (padding included: ``_sparse_encode`` :185-200 fills empty slots with a
  zero row), split over the tensor-parallel ranks by ``drop_tokens`` along C (``MOELayer.forward``
  :698, ``mappings.py:_drop_tokens`` asserts C % tp == 0); ``_sparse_decode`` :203-213 saves
  each route's gathered output (k s b h, model dtype) and its fp32 gate for the weighted sum;
  the gate (``TopKGate.forward`` :566-570) saves the fp32 copy of its input (4 sbh) and its
  softmax (4 sbE); the route slots (int64) are saved by the gathers. After the all-to-all over
  ``ep_size`` ranks a rank runs E / ep experts on ep x C slots each: the same E x C slots.
* Dropout (probabilities from config.json: GPT-2 ``attn_pdrop``/``resid_pdrop``/``embd_pdrop``
  default 0.1): a mask per residual dropout (2 per layer) and on the embedding, 1 byte per
  element (CUDA ``native_dropout``: bool); eager attention dropout keeps its mask (b a s^2).
* Pipeline parallelism (``stage`` given): a stage holds the activations of min(stages - stage,
  micro-batches) micro-batches at most (1F1B, ``in_flight``; the timeline counts those in flight at
  each instant), each with what the PipelineEngine keeps of it (``pipe_kept``): a stage before the last
  its output (D sbh, ``runtime/pipe/engine.py`` l.751 to l.866), the first stage the clone of the input
  ids its embedding saves (8 sb, l.705).
* Loss head: final norm, lm_head input (D sbh), the log-softmax output in fp32 (4 sbV,
  ``ForCausalLMLoss`` upcasts logits), plus the 16-bit logits the model returns (D sbV); at the
  loss the fp32 copy of the logits (4 sbV) exists as well: the forward spike. In backward the
  fp32 gradients of the log-probabilities and of the logits (8 sbV) are live together with
  the saved log-probabilities: the backward spike, usually the step's activation peak.
* RoPE's cos and sin (1 x s x rotary dim each, model dtype): computed once per forward and saved by every
  layer's ``apply_rotary_pos_emb``, one storage each (``layers_shared``; not under pipeline parallelism).
* The head's backward (``head_backward``): once the loss's nodes have freed the log-probabilities and the
  labels (``loss_freed``), lm_head's backward holds the logits' gradient in the model dtype (D sbV), the
  hidden state's (D sbh) and a tied embedding's gradient (V h D): the head's moment of backward.
* A layer's backward (``layer_backward``): beside the saved tensors, the gradient of the layer's output
  (D sbh) and its first nodes' gradients (a gated MLP's two, D sbf each; the other cases as
  :func:`eager_recompute_peak`'s start; eager: or the softmax backward's s^2 gradients), and a tied
  embedding's waiting gradient; the timeline adds it at each layer moment of backward. Measured with
  MemTracker over transformers' real CPU backward (tests/test_backward_moments.py).

Activation checkpointing (recomputation), ``checkpointing`` (:func:`parse_checkpointing`):

* ``full``: every layer is checkpointed (HF ``gradient_checkpointing_enable()``, Megatron
  ``--recompute-granularity full``, ``deepspeed.checkpointing.checkpoint`` per layer): each
  layer keeps only its input (D sbh); backward recomputes one layer at a time, so one layer's
  activations are live on top. Cost: one extra forward of the layers, 2 x N_layers + A / 3
  FLOPs per token (:mod:`advisor.model.flops`: Korthikanti's 8 N against 6 N). With eager attention the
  recompute's peak is not that (:func:`eager_recompute_peak`): the first layer recomputed is the
  last, whose backward runs after the loss head's is done (its saved tensors freed but the
  logits the model returns); inside it the attention backward adds its s^2 gradients, and a
  MoE layer's backward starts with its experts' routing-weight combine (k s b x h gradients).
* ``k`` (an integer, 0 < k < layers): the first k layers of each pipeline stage are
  checkpointed and the rest keep everything (Megatron ``--recompute-method block
  --recompute-num-layers k``; HF: ``gradient_checkpointing`` set on k decoder layers). Cost: k
  layers' extra forward.
* ``selective``: Megatron's selective recompute (Korthikanti section 5, ``--recompute-granularity
  selective``): only the attention core (scores, softmax, dropout, weighted sum of v) is
  recomputed; its inputs q, k, v (k and v at their own heads: ``repeat_kv`` is inside) are kept,
  and the output projection's input (the paper's 34 sbh keeps Q, K, V and that input too).
  It removes the eager s^2 tensors; with flash attention only the fp32 log-sum-exp (4 b a s)
  goes. Cost: the core's forward, 4 s h FLOPs per token and layer (A / 3 over the layers,
  :mod:`advisor.model.flops`). ``recompute_flops_fraction`` is that cost over the step's
  6 N_active + A per token (N from the inventory: ``ActivationInputs.params_active``).

DeepSpeed's ``activation_checkpointing`` section applies to layers checkpointed through
``deepspeed.checkpointing.checkpoint`` (Megatron-DeepSpeed; read only by
``deepspeed.checkpointing.configure(mpu, deepspeed_config=...)``,
``runtime/activation_checkpointing/checkpointing.py:configure`` / ``_configure_using_config_file``;
the engine never reads it, and HF gradient checkpointing, ``torch.utils.checkpoint``, ignores it),
as DeepSpeed 0.19.8 implements it (checkpointing.py, line numbers of 0.19.8):

* ``partition_activations``: each floating-point checkpoint input is cut to numel / mp_size on
  this rank (``partition_activations`` :387-401, ``get_partition_size`` :268-273: mp_size is the
  tensor-model-parallel world size from the mpu, ``configure`` :1236-1242); the full tensor is
  freed (``get_partitioned_activations_for_backward`` :456) and gathered again into a full-size
  buffer on the accelerator before the layer is recomputed (``gather_partitioned_activations``
  :276-313): one layer input on top of the recompute.
* ``cpu_checkpointing``: with partitioning, the partitions go to host memory (:403, :436);
  without, on an accelerator with streams, the async offload engine keeps the newest checkpoint
  on the accelerator and copies the others to host, the last of them also still held on the
  accelerator by its forward stash (``max_fwd_stash_count=2``) until its backward (``_get_cpu_offload_engine`` :498-511, 
  ``_ActivationOffloadEngine(keep_last_count=1)``, ``offload_activations.py:offload_input``);
  on a synchronized device, all of them (``copy_to_device(..., cpu)`` :613-614). Before a
  recompute the input comes back to the accelerator (one layer input on top).
* ``contiguous_memory_optimization`` (needs ``partition_activations`` and ``number_checkpoints``,
  asserted in ``configure`` :1228-1231): at the first checkpoint, ``number_checkpoints`` buffers
  of one partition each are allocated per input (``partition_activations`` :404-417), on the host
  with ``cpu_checkpointing``: the kept bytes are number_checkpoints partitions, however many layers
  are checkpointed (fewer buffers than checkpointed layers: DeepSpeed's index runs past the list).
* ``number_checkpoints`` (read at :1130) has no other use.

Tensor parallelism t shards the attention and MLP internals by t; norm and residual regions
are sharded only with sequence parallelism (Korthikanti section 4.2.2), which then shards
everything by t. Pipeline parallelism p: a stage holds L/p layers and, with 1F1B, up to p
micro-batches in flight on the first stage (Korthikanti section 4.2.3). Given a ``stage``, the
stage's own layers (``runtime/utils.py:partition_uniform``) and its own in-flight count,
min(p - stage, micro-batches) (DeepSpeed ``runtime/pipe/schedule.py:TrainSchedule.num_pipe_buffers``);
only the last stage holds the loss head. DeepSpeed-Ulysses (``sequence_parallel_size`` u; Jacobs
et al. 2023, arXiv:2309.14509): each rank holds s / u tokens outside attention and a / u heads of
the full sequence inside it, the same bytes as s / u tokens with all heads, so s becomes s / u.

Not covered: multi-head latent attention (DeepSeek-V3, :func:`formula_gap`): use the trace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from advisor.errors import cut, digits_problem
from advisor.model.flops import recompute_fraction

Checkpointing = str  # "none" | "full" | "selective" | "<k>": see parse_checkpointing
Attention = Literal["flash", "eager"]

#: Recompute settings from the cheapest to the most expensive in extra FLOPs (what generate tries
#: in this order; "layers" stands for k of L).
RECOMPUTE_ORDER = ("none", "selective", "layers", "full")


def parse_checkpointing(value: str | int | None, layers: int | None = None) -> tuple[str, int]:
    """``--checkpointing`` to (mode, k): ``none`` -> ("none", 0), ``full`` -> ("full", layers),
    ``selective`` -> ("selective", 0), an integer k (or its digits) -> ("layers", k) -- k
    checkpointed layers per pipeline stage; given ``layers`` (the stage's), k == 0 is "none" and
    k >= layers is "full". Raises ValueError naming the accepted values."""
    if value is None:
        return "none", 0
    if isinstance(value, bool):
        raise ValueError(f"checkpointing: {value!r} is not one of none, full, selective or a layer count")
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        too_long = digits_problem(value) if isinstance(value, str) else None
        if too_long:  # int() would raise Python's "Exceeds the limit (4300 digits)"
            raise ValueError(f"checkpointing: {cut(repr(value))} is {too_long}")
        k = int(value)
        if layers is not None:
            if k <= 0:
                return "none", 0
            if k >= layers:
                return "full", layers
        return "layers", k
    v = str(value).strip().lower()
    if v == "sac" or v.startswith("sac:"):
        raise ValueError("checkpointing: sac (op-level selective checkpointing) needs --activations trace")
    if v in ("none", "full", "selective"):
        return v, (layers or 0) if v == "full" else 0
    raise ValueError(f"checkpointing: {cut(repr(value))} is not one of none, full, selective or a number of layers")


def checkpointing_problem(value: str | int | None, inventory: Any, pipeline_parallel: int = 1) -> str | None:
    """Why a layer count K for activation checkpointing cannot be, or None: K checkpointed layers
    per pipeline stage is at most the layers a stage holds, ceil(num_layers / pipeline_parallel)
    (the first stage's, :func:`advisor.model.parallel.partition_uniform`). Without the
    architecture (``--params``) or for none/full/selective there is nothing to check.
    :func:`parse_checkpointing` would read a larger K as "full"; the callers refuse it instead."""
    try:
        mode, k = parse_checkpointing(value)
    except ValueError:
        return None
    layers = int(((getattr(inventory, "meta", None) or {}).get("num_layers")) or 0)
    if mode != "layers" or not layers:
        return None
    p = max(1, int(pipeline_parallel or 1))
    per_stage = math.ceil(layers / p)
    if k <= per_stage:
        return None
    name = getattr(inventory, "name", "the model")
    where = f"{name} has {layers} layers" + (f", {per_stage} per pipeline stage (pipeline parallel {p})" if p > 1 else "")
    return (f"{k} checkpointed layers, but {where}: give at most {per_stage}, or full to checkpoint every layer")


#: Budget of ``--checkpointing sac`` without ``:BUDGET``.
SAC_DEFAULT_BUDGET = 0.5


def parse_sac(value: str | int | None) -> float | None:
    """``--checkpointing sac[:BUDGET]`` to its budget (a fraction 0..1 of a layer's op-output
    bytes the op-level policy may keep; ``sac`` alone: :data:`SAC_DEFAULT_BUDGET`), None for
    any other setting (``sac:SIZE``, a whole-model budget in bytes, is :func:`parse_sac_bytes`'s).
    Raises ValueError on a budget that is not a number from 0 to 1."""
    v = str(value).strip().lower() if isinstance(value, str) else ""
    if v != "sac" and not v.startswith("sac:"):
        return None
    if v == "sac":
        return SAC_DEFAULT_BUDGET
    txt = v[4:]
    if parse_sac_bytes(value) is not None:  # a size: the whole-model budget
        return None
    try:
        b = float(txt)
    except ValueError:
        b = float("nan")
    if not 0.0 <= b <= 1.0:  # NaN fails too
        raise ValueError(f"checkpointing: sac budget {txt!r} is not a fraction from 0 to 1 (e.g. sac:0.3)")
    return b


def parse_sac_bytes(value: str | int | None) -> int | None:
    """``--checkpointing sac:SIZE`` (a size with its unit, e.g. ``sac:24GiB``, ``sac:20GB``) to
    bytes: the whole model's activation budget, for which torch's whole-model MILP chooses the
    layers to checkpoint and each one's ops (:func:`advisor.engine.sac.sac_model_policy`, trace
    mode). None for any other setting (``sac:0.3``, a fraction of each layer, is
    :func:`parse_sac`'s). Raises ValueError when the size is not one (:func:`advisor.units.parse_size`)."""
    v = str(value).strip() if isinstance(value, str) else ""
    if not v.lower().startswith("sac:") or not any(c.isalpha() for c in v[4:]) or v[4:].strip().lower() == "nan":
        return None
    from advisor.units import parse_size

    try:
        return parse_size(v[4:])
    except ValueError as e:
        raise ValueError(f"checkpointing: sac budget {v[4:]!r}: {e}") from None


@dataclass(frozen=True)
class ActivationInputs:
    """Shape of the work: sequence length s, micro-batch b (per rank), activation bytes D."""

    seq_len: int
    micro_batch: int
    dtype_bytes: int = 2
    checkpointing: Checkpointing = "none"
    attention: Attention = "flash"
    tensor_parallel: int = 1
    sequence_parallel: bool = False
    pipeline_parallel: int = 1
    #: DeepSpeed activation_checkpointing (see the module docstring); they act only where the
    #: model checkpoints through deepspeed.checkpointing (``deepspeed_checkpointing``; HF
    #: gradient checkpointing is torch.utils.checkpoint and ignores them).
    partition_activations: bool = False
    cpu_checkpointing: bool = False
    contiguous_memory_optimization: bool = False
    number_checkpoints: int | None = None
    deepspeed_checkpointing: bool = True
    #: Accelerator with side streams (CUDA, ROCm): cpu_checkpointing without partitioning goes
    #: through the async offload engine, which keeps the newest checkpoint on the accelerator.
    offload_keeps_newest: bool = True
    #: Pipeline stage this rank is on (None: the worst case, the first stage's in-flight
    #: micro-batches together with the last stage's loss head).
    stage: int | None = None
    #: Micro-batches per optimizer step (gradient accumulation): 1F1B keeps at most this many
    #: in flight.
    micro_batches: int | None = None
    #: DeepSpeed-Ulysses sequence_parallel_size: each rank holds s / sp of the sequence outside
    #: attention and a / sp of the heads inside it (all-to-all), so every term divides by sp.
    ulysses: int = 1
    #: DeepSpeed MoE (``deepspeed.moe.layer.MoE``) capacity factor: routed tokens go into a
    #: fixed buffer of :func:`moe_capacity` slots per expert. None: dropless routing as
    #: transformers' MoE blocks do it (each token's k routed copies).
    moe_capacity_factor: float | None = None
    #: DeepSpeed MoE ``min_capacity`` (moe/layer.py MoE.__init__ default 4).
    moe_min_capacity: int = 4
    #: Kernel conventions: bytes per dropout-mask element (CUDA native_dropout: bool, 1; the
    #: CPU kernel: the model dtype) and per LayerNorm mean/rstd element (CUDA: fp32, 4).
    dropout_mask_bytes: int = 1
    norm_stat_bytes: int = 4
    #: The model's N_active and the parameters outside its decoder layers (the inventory's:
    #: :func:`advisor.model.flops.active_params` / :func:`~advisor.model.flops.outside_layer_params`),
    #: for the recompute's FLOPs against the step's 6 N + attention. None: ``meta``'s ``active_params``
    #: or ``params`` and 0 outside the layers, else 12 L h^2 (Kaplan et al. 2020 s.2.1's N).
    params_active: int | None = None
    params_outside_layers: int = 0


#: Where a pipeline stage's in-flight micro-batches come from: DeepSpeed's 1F1B ``TrainSchedule.num_pipe_buffers``
#: (runtime/pipe/schedule.py l.247-256), "the maximum number of in-flight forward passes, since we need to remember
#: the activations of forward passes in order to run backpropagation": min(stages - stage_id, micro_batches) before
#: its max(2, .) floor for the buffers (the activations are those of forwards run, not of buffers allocated).
IN_FLIGHT_SOURCE = "1F1B: min(stages - stage, micro-batches), runtime/pipe/schedule.py TrainSchedule.num_pipe_buffers"


@dataclass
class ActivationEstimate:
    """Bytes per rank. ``per_layer`` is one layer's saved activations with no checkpointing
    (``selective``: what a layer keeps under selective recompute; ``sac``: under the policy)."""

    per_layer: int
    layers_on_rank: int
    #: Saved for backward at the end of forward, on the accelerator (bytes).
    saved_accelerator: int
    #: Checkpointed layer inputs moved to host by cpu_checkpointing (bytes).
    saved_host: int
    #: Extra live during backward on top of saved_accelerator: one recomputed layer (with the
    #: input gathered back from its partitions or the host), net of the un-checkpointed layers
    #: freed before it (k of L); selective: one layer's attention core; else 0.
    recompute_layer: int
    #: Loss head: saved log-softmax output + 16-bit logits (bytes), included in saved_accelerator.
    loss_head: int
    #: Transient fp32 logits copy at the loss (bytes), on top of saved_accelerator.
    loss_spike: int
    #: Transient at the loss in backward (bytes), on top of saved_accelerator: the fp32
    #: gradients of the log-probabilities and of the logits (nll_loss and log_softmax backward),
    #: alive together with the saved log-probabilities. 0 when the rank has no loss head.
    loss_backward_spike: int = 0
    #: Extra forward FLOPs from recomputation as a fraction of the step's FLOPs without it.
    recompute_flops_fraction: float = 0.0
    breakdown: dict[str, int] = field(default_factory=dict)
    #: The recompute setting as resolved for this rank: none, selective, layers (k of L), full.
    recompute: str = "none"
    #: Layers checkpointed on this rank (k; all for full, 0 for none/selective).
    checkpointed_layers: int = 0
    #: What the estimate could not follow (e.g. a DeepSpeed setting that would fail).
    notes: list[str] = field(default_factory=list)
    #: Micro-batches whose saved activations a rank holds at once (:data:`IN_FLIGHT_SOURCE`): 1 without
    #: pipeline parallelism; a pipeline stage's 1F1B forwards before its first backward, min(stages - stage,
    #: micro-batches); the stage-less worst case, the stages. The layers' saved bytes are x this (the loss head not).
    in_flight: int = 1
    #: Accelerator activation peak of the same rank without recomputation (bytes): what the
    #: recompute setting saves is this minus peak_accelerator (0 when not computed).
    peak_without_recompute: int = 0
    #: cpu_checkpointing's PCIe traffic per micro-batch (bytes, :func:`cpu_checkpoint_traffic`):
    #: checkpointed layer inputs copied to host in forward, and back to the accelerator before
    #: their recompute in backward; 0 without cpu_checkpointing (or where it does not act).
    host_offload_bytes: int = 0
    host_restore_bytes: int = 0
    #: True when those copies run on DeepSpeed's async offload engine's side stream (overlapped).
    host_offload_overlapped: bool = False
    #: ``--checkpointing sac``: the op-level policy the trace applied, JSON-ready
    #: (:meth:`advisor.engine.sac.SACPolicy.to_dict`: per traced layer its aten ops, which are
    #: saved (1) or recomputed (0), their output bytes and FLOPs); None otherwise.
    sac_policy: dict[str, Any] | None = None

    #: ``recompute_layer`` before what is freed ahead of it: the recomputed layer's own backward
    #: peak (with its gathered input), and what backward has released by then (the loss head's
    #: saved tensors with eager attention, the un-checkpointed layers' activations under k of L);
    #: ``recompute_layer = max(0, recompute_layer_peak - recompute_freed)``. Kept so the text
    #: says what is added and what is freed, not only the net (0 and 0 where not split).
    recompute_layer_peak: int = 0
    recompute_freed: int = 0
    #: Of each in-flight micro-batch's (saved_accelerator - loss_head) / in_flight bytes (:attr:`in_flight`: the
    #: most a stage holds; the timeline counts, per instant, the ones in flight there,
    #: ``advisor.ledger.timeline.pipe_in_flight``): what the PipelineEngine itself keeps of it (the stage's output on a
    #: stage before the last, the clone of the input ids on the first), 0 without pipeline parallelism.
    pipe_kept: int = 0
    #: Of ``loss_head``, the logits the model returns (bytes): held by the caller's output, not by autograd,
    #: so backward's freeing of the head's saved tensors leaves them (``head_freed`` below; the timeline's
    #: backward moments, ``advisor.ledger.timeline._backward_activations``). A training loop that drops the
    #: output before ``backward`` (the HF Trainer's compute_loss returns the loss alone) frees them too:
    #: counted as kept, the safe side. 0 where not computed (a traced estimate) or not the last stage.
    loss_head_kept: int = 0
    #: Of ``loss_head``, what backward frees once the head's nodes have run (bytes): the log-softmax output and
    #: the final norm's saved tensors (``head_freed`` below) -- not the logits (``loss_head_kept``) nor the
    #: tensors saved before the first layer (the embedding-dropout mask, BLOOM's embedding LayerNorm), live
    #: until the embedding's backward. None where not computed (a traced estimate): nothing of the head freed.
    loss_head_freed: int | None = None
    #: What a layer's backward holds beyond the saved tensors its moment counts (bytes): the gradient of the
    #: layer's output and its first nodes' gradients (the MLP's; eager: the larger of that and the softmax
    #: backward's s^2 gradients, :func:`eager_recompute_peak`), a tied embedding's waiting gradient. Without
    #: recompute it is ``eager_recompute_peak(whole=per_layer) - per_layer``; with flash recompute the same start
    #: on top of the rebuilt layer; 0 with eager recompute, whose ``recompute_layer_peak`` holds it already.
    #: Added at each layer moment of backward (``advisor.ledger.timeline.backward_moments``); measured with
    #: MemTracker over transformers' real CPU backward (tests/test_backward_moments.py).
    layer_backward: int = 0
    #: Of one micro-batch's layers' saved bytes, what all layers share and the first layer's backward frees (bytes):
    #: RoPE's cos and sin; with checkpointing, the eager 4-D attention mask transformers hands every checkpointed
    #: layer, BLOOM's ALiBi bias. Not freed layer by layer as backward runs back (``backward_moments``).
    layers_shared: int = 0
    #: Of ``loss_head``, what the loss's own nodes (nll_loss, log_softmax, the fp32 upcast, Gemma 2's soft-capping)
    #: free once they have run, before lm_head's backward (bytes): the log-probabilities (4 sbV), the labels (8 sb),
    #: Gemma 2's tanh output (D sbV). 0 where the rank has no loss head.
    loss_freed: int = 0
    #: What lm_head's backward holds beyond the saved tensors less ``loss_freed`` (bytes): the logits' gradient in
    #: the model dtype (D sbV: the fp32 upcast's backward casts it back), the hidden state's (D sbh), a tied
    #: embedding's waiting gradient (V h D). lm_head's own weight gradient is the ledger's (a made gradient). The
    #: head's moment of backward (``advisor.ledger.timeline.backward_moments``), measured with MemTracker over
    #: transformers' real CPU backward (tests/test_backward_moments.py). 0 where the rank has no loss head.
    head_backward: int = 0
    #: Of ``recompute_freed``, the loss head's share (bytes): the head's saved tensors eager recompute counts as
    #: freed before the first recomputed layer (``recompute_layer`` is net of them); 0 otherwise.
    recompute_freed_head: int = 0
    #: k of L (``recompute`` "layers"): what one checkpointed layer keeps on the accelerator for backward (bytes per
    #: micro-batch: its input, partitioned or offloaded as DeepSpeed's settings say; ``layers_shared`` apart), and
    #: what one un-checkpointed layer's backward holds beyond its saved tensors (``layer_backward`` without recompute:
    #: ``eager_recompute_peak(whole=per_layer) - per_layer``). Backward runs the L - k un-checkpointed layers first
    #: (Megatron's block method checkpoints the first k), each with no recompute, then the k checkpointed ones, each
    #: recomputed (:func:`backward_moments`); measured with MemTracker over transformers' real CPU backward of Llama,
    #: 2 of 4 layers checkpointed (tests/test_backward_moments.py). 0 and 0 otherwise.
    checkpoint_kept: int = 0
    uncheckpointed_backward: int = 0

    #: False under pipeline parallelism: backward's moments are the PipelineEngine-measured ones there (no head
    #: moment, no ``layer_backward``; :func:`backward_moments`), as the timeline takes them.
    own_backward: bool = True

    def backward_moments(self) -> list[int]:
        """Accelerator activation bytes at backward's moments (:func:`backward_moments` over this estimate: start,
        the head's where ``own_backward``, layer L-1's and, under k of L, the first checkpointed layer's -- within a
        run of layers each moment holds one layer's saved bytes less than the one before --, end), the run-back
        micro-batch among ``in_flight``, with what the caller's output holds of the head kept (:func:`head_held`;
        none under pipeline parallelism), as ``advisor.ledger.timeline.role_timeline`` takes them."""
        own = self.own_backward
        return backward_moments(self, self.layers_on_rank, [], max(1, self.in_flight),
                                held=head_held(self) if own else 0, own_backward=own)

    @property
    def peak_accelerator(self) -> int:
        """Largest activation footprint on the accelerator during the step (bytes): the larger of forward's peak
        (the saved tensors + the loss's fp32 logits copy) and backward's worst moment (:meth:`backward_moments`: the
        loss gradients at its start, lm_head's backward, a layer's own backward with its recompute) -- the moments
        the timeline places its backward instants at, so the row is the largest of what the timeline counts.
        Measured: tests/test_backward_moments.py."""
        return max(self.saved_accelerator + self.loss_spike, *self.backward_moments())


def _m(meta: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if meta.get(n) is not None:
            return meta[n]
    return default


#: Tensors an activation function saves for backward, per element of its input, as
#: transformers implements it (``activations.py``): SiLU, GELU (``F.gelu``, also with
#: ``approximate="tanh"``: ``gelu_pytorch_tanh``) and ReLU save one tensor; ``gelu_new``
#: (NewGELUActivation, written out in Python: 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))))
#: saves four (its input, the tanh output, 1 + tanh, 0.5 x).
ACTIVATION_SAVED = {"silu": 1, "swish": 1, "gelu": 1, "gelu_pytorch_tanh": 1, "relu": 1, "gelu_new": 4,
                    "gelu_fast": 4}
#: Activation functions whose one saved tensor is their output (torch ``tools/autograd/derivatives.yaml``:
#: ``relu: threshold_backward(grad, result, 0)``), the tensor the next op (the second linear of a plain MLP,
#: the product of a gated one) saves as its input too: one storage, counted once.
ACTIVATION_SAVES_OUTPUT = frozenset({"relu"})
#: Families whose RMSNorm computes in fp32 and scales by (1 + weight) in fp32 (GemmaRMSNorm):
#: it saves the fp32 input and the fp32 normalised tensor, no 16-bit copy.
_GEMMA_NORM = frozenset({"gemma", "gemma2"})
#: Families whose eager softmax runs in the model dtype (GPT-2 ``eager_attention_forward``:
#: ``softmax(attn_weights, dim=-1)``); the others upcast to fp32 and copy back.
_SOFTMAX_MODEL_DTYPE = frozenset({"gpt2"})
#: MoE families whose router hands the experts fp32 routing weights (``MixtralTopKRouter``:
#: softmax in fp32 and no cast back), so the weighted expert outputs and their gradients are
#: fp32; Qwen2/Qwen3-MoE's routers cast the weights to the model dtype.
_FP32_ROUTING_WEIGHTS = frozenset({"mixtral"})
#: Families with one fused q/k/v projection whose v is a view of its output, so saving v keeps
#: the whole q/k/v output alive (Phi-3 ``qkv_proj``; GPT-2/BLOOM have no RoPE, q and k are views too).
_FUSED_QKV_ROPE = frozenset({"phi3"})
#: Families whose q leaves RoPE contiguous in (b, a, s, d) (Phi-3's ``apply_rotary_pos_emb`` ends
#: in ``torch.cat([q_rot, q_pass], dim=-1)``), where Llama's elementwise RoPE keeps the (b, s, a, d)
#: layout of its q_proj view. Flash kernels allocate their output like q (torch
#: ``flash_api.cpp`` ``mha_fwd``: ``out = at::empty_like(q_padded)`` on CUDA; the CPU flash kernel
#: likewise), so ``attn_output.transpose(1, 2).reshape(...)`` before o_proj copies it: o_proj
#: saves the copy while sdpa's backward keeps its own output (one D s b a d more). Measured by the
#: trace at hidden 64 / head_dim 16 and hidden 256 / head_dim 64 (issue #16).
_Q_CONTIGUOUS_AFTER_ROPE = frozenset({"phi3"})


#: Built-in model types without an activation formula, and why (the trace measures them).
FORMULA_GAPS = {"deepseek_v3": "multi-head latent attention: no formula; --activations trace"}
#: Built-in model types whose formulas are not checked against the trace for one setting.
FORMULA_UNTRACED = {"bloom": "selective recompute not traced (its attention is not transformers' attention interface)"}


def coverage(families: tuple[str, ...]) -> list[dict[str, Any]]:
    """Per built-in model type: whether the activation formulas cover it, and a note (what has no
    formula, what the trace could not check). Every type transformers can build is traced."""
    return [{"model_type": f, "parameters": True, "activation_formula": f not in FORMULA_GAPS,
             "note": FORMULA_GAPS.get(f) or FORMULA_UNTRACED.get(f) or ""} for f in families]


def formula_gap(meta: dict[str, Any]) -> str | None:
    """Why the formulas do not cover this architecture (None when they do): multi-head latent
    attention (DeepSeek-V3: low-rank q/kv projections and their norms) has no formula; the
    trace (``--activations trace``) measures it."""
    if meta.get("kv_lora_rank") is not None:
        return "multi-head latent attention (deepseek_v3) has no activation formula; use --activations trace"
    return None


def norm_bytes(meta: dict[str, Any], n: int, rows: int, D: int, stat_bytes: int = 4) -> int:
    """Bytes one norm saves for ``n`` elements in ``rows`` rows: LlamaRMSNorm 4n (fp32 input,
    saved by pow) + 4 rows (fp32 rsqrt) + D n (normalised, saved by the weight multiply);
    GemmaRMSNorm 8n + 4 rows (fp32 input and fp32 normalised) + 4h (fp32 1 + weight); LayerNorm D n + 2 stat_bytes
    rows (input, mean and rstd: fp32 on CUDA, ``layer_norm_kernel.cu``); ``norm: scale`` (a learned scale with
    no normalisation, ``x * weight``: an inventory's meta, e.g. tests/pipe_proxy.py) D n, its input, which
    ``MulBackward0`` saves because the weight requires grad (torch ``tools/autograd/derivatives.yaml``
    ``mul.Tensor``: self's gradient needs other, other's needs self)."""
    if _m(meta, "norm", default="rmsnorm") == "layernorm":
        return D * n + 2 * stat_bytes * rows
    if _m(meta, "norm", default="rmsnorm") == "scale":
        return D * n
    if meta.get("family") in _GEMMA_NORM:
        return 8 * n + 4 * rows + 4 * int(meta["hidden_size"])  # + the fp32 (1 + weight)
    return 4 * n + 4 * rows + D * n


def moe_capacity(tokens: int, num_experts: int, k: int, capacity_factor: float, min_capacity: int = 4) -> int:
    """Slots per expert in DeepSpeed's dispatch buffer (tokens): max(ceil(tokens / num_experts x
    capacity_factor x k), min_capacity), ``deepspeed/moe/sharded_moe.py:_capacity`` (0.19.8
    :152-162) as ``top1gating`` (:232, factor x 1), ``top2gating`` (:364, x 2) and
    ``topkgating`` (:446, x k) call it with ``drop_tokens=True``. ``tokens``: the rank's tokens
    entering the gate (s x b). Raises ValueError for a non-positive factor or expert count."""
    if num_experts < 1 or k < 1 or not capacity_factor > 0:
        raise ValueError("moe_capacity needs num_experts >= 1, k >= 1 and capacity_factor > 0")
    return max(math.ceil((tokens / num_experts) * (capacity_factor * k)), int(min_capacity))


def _dims(meta: dict[str, Any]) -> tuple[int, int, int, int, int, int, Any]:
    """(hidden, heads, kv heads, head dim, v head dim, intermediate, family) of an architecture
    dict, with the defaults transformers' configs use (kv heads = heads, head dim = hidden / heads,
    v head dim = head dim). Raises KeyError naming a missing required field."""
    h = int(meta["hidden_size"])
    # an attention-free block (``attention_free``) has no heads: 1 stands in, its attention term is 0
    a = int(meta.get("num_heads") or 1) if _m(meta, "attention_free", default=False) else int(meta["num_heads"])
    kv = int(_m(meta, "num_kv_heads", default=a))
    d = int(_m(meta, "head_dim", default=h // a))
    return h, a, kv, d, int(_m(meta, "v_head_dim", default=d)), int(meta["intermediate_size"]), meta.get("family")


def layer_terms(meta: dict[str, Any], s: int, b: int, D: int, attention: Attention, t: int = 1,
                sp: bool = False, moe: bool | None = None, mask_bytes: int = 1,
                stat_bytes: int = 4, selective: bool = False, capacity_factor: float | None = None,
                min_capacity: int = 4) -> dict[str, int]:
    """Saved-activation bytes of one transformer layer by term (see module docstring).

    ``meta``: architecture (hidden_size, num_heads, num_kv_heads, head_dim, intermediate_size,
    norm, mlp, activation, family, qk_norm, sandwich_norm, num_experts, experts_per_token,
    moe_intermediate_size, num_shared_experts, shared_expert_intermediate_size,
    attention_dropout, residual_dropout). ``t``: tensor-parallel size; ``sp``: sequence parallel.
    ``mask_bytes``: bytes per element of a dropout mask (CUDA ``native_dropout``: bool, 1; the
    CPU kernel keeps it in the model dtype). ``stat_bytes``: LayerNorm mean/rstd element (CUDA 4).
    ``selective``: Megatron's selective recompute -- the attention core keeps only its inputs
    q, k, v (at their own heads) and hands its output on; its internals are recomputed.
    ``capacity_factor`` / ``min_capacity``: DeepSpeed MoE's fixed-capacity dispatch
    (:func:`moe_capacity`); None: dropless routing (transformers).
    Raises KeyError naming the missing architecture field.
    """
    h, a, kv, d, v_d, f, fam = _dims(meta)
    gated = _m(meta, "mlp", default="gated") == "gated"
    act = str(_m(meta, "activation", default="silu"))
    act_saved = ACTIVATION_SAVED.get(act, 1) - (act in ACTIVATION_SAVES_OUTPUT)
    attention_free = bool(_m(meta, "attention_free", default=False))
    p_attn = float(_m(meta, "attention_dropout", default=0.0) or 0.0)
    p_res = float(_m(meta, "residual_dropout", default=0.0) or 0.0)
    n_sh = s * b * h
    rs = t if sp else 1  # norm/residual regions: sharded only with sequence parallelism
    terms: dict[str, int] = {}
    n_norms = 4 if _m(meta, "sandwich_norm", default=False) else 2
    if attention_free:
        # ``attention_free`` (an inventory's meta): a block of one norm and the MLP on a residual,
        # ``x + mlp(norm(x))`` (tests/pipe_proxy.py); the residual add saves nothing (AddBackward0)
        terms["norms"] = norm_bytes(meta, n_sh, s * b, D, stat_bytes) // rs
        terms["linear_inputs"] = D * n_sh // rs  # the MLP's input (the norm's output)
    else:
        terms["norms"] = n_norms * norm_bytes(meta, n_sh, s * b, D, stat_bytes) // rs
        terms["linear_inputs"] = 2 * D * n_sh // rs  # q/k/v input and MLP input (norm outputs)
    a_t, kv_t = max(1, a // t), max(1, kv // t)
    if selective:
        # the checkpointed core keeps its inputs q, k (after RoPE), v at their own heads; its
        # output is saved by o_proj (the linear's input); scores, softmax, dropout mask, the
        # repeat_kv copies and flash's log-sum-exp are recomputed in backward
        att = (D * s * b * a_t * d + D * s * b * kv_t * d + D * s * b * kv_t * v_d + D * s * b * a_t * v_d)
    elif attention == "flash":
        # q and k after RoPE, v, the output and the fp32 log-sum-exp; k/v at their own heads
        # (transformers passes enable_gqa to sdpa when there is no mask); dropout inside the
        # kernel regenerates its mask from the RNG state: nothing saved for it
        att = (D * s * b * a_t * d + D * s * b * kv_t * d + D * s * b * kv_t * v_d
               + D * s * b * a_t * v_d + 4 * b * a_t * s)
    else:
        # eager: k and v repeated to all heads (repeat_kv), the softmax output in fp32 and its
        # 16-bit copy (GPT-2: one softmax output in the model dtype); an fp32 model has no copy
        # (``eager_attention_forward``'s ``.to(query.dtype)`` returns its input when the dtype is the
        # same: torch ``Tensor.to`` docs; a real CPU Llama in fp32, tests/test_backward_moments.py)
        one = fam in _SOFTMAX_MODEL_DTYPE or D >= 4
        sm = D if one else 4 + D
        att = (D * s * b * a_t * d + D * s * b * a_t * d + D * s * b * a_t * v_d
               + D * s * b * a_t * v_d + sm * b * a_t * s * s)
        if fam == "gemma2":  # attn_logit_softcapping: tanh(scores / cap) saves its output
            att += D * b * a_t * s * s
        if p_attn > 0:
            # the dropout's mask; the matmul then saves the dropped probabilities instead of the
            # 16-bit copy, so that costs more only where softmax saves its own 16-bit output (GPT-2)
            att += (mask_bytes + (D if one else 0)) * b * a_t * s * s
    if fam in _FUSED_QKV_ROPE and (attention == "flash" or kv_t == a_t or selective):
        # v is a view of the fused q/k/v output and is saved as such (eager with GQA saves the
        # repeat_kv copy instead): all of the q/k/v output stays alive
        att += D * s * b * (a_t + kv_t) * d
    if fam in _Q_CONTIGUOUS_AFTER_ROPE and attention == "flash" and not selective:
        # the flash output laid out like q: the reshape for o_proj copies it (D sbh at a_t v_d);
        # under selective recompute the core's output is not saved, so the copy is the only one
        att += D * s * b * a_t * v_d
    if _m(meta, "qk_norm", default=False):  # Qwen3: RMSNorm per head on q and k
        qk = (a_t + kv_t) * d
        att += 4 * s * b * qk + 4 * s * b * (a_t + kv_t) + D * s * b * qk
    terms["attention"] = 0 if attention_free else att
    if p_res > 0:
        terms["dropout"] = 2 * mask_bytes * n_sh // rs
    experts = int(_m(meta, "num_experts", default=0) or 0)
    use_moe = (experts > 0) if moe is None else moe
    per_f = (3 + act_saved) if gated else (1 + act_saved)  # gate/up/product + activation | activation + fc2 input
    if use_moe:
        k = int(_m(meta, "experts_per_token", default=1))
        fe = int(_m(meta, "moe_intermediate_size", default=f))
        tk = s * b * k
        # transformers' grouped_mm experts (integrations/moe.py): the routed copies of the
        # tokens, each expert's MLP, its output (saved for the routing-weight multiply); the
        # router: fp32 softmax over experts, top-k weights and indices, sort permutation
        if capacity_factor is None:
            terms["mlp"] = (D * tk * (2 * h + per_f * fe)) // t + 4 * s * b * experts + 4 * s * b + 40 * tk + 4 * experts
        else:
            # DeepSpeed MoE: E x C slots through the experts (split along C by drop_tokens under
            # TP), each route's gathered output and fp32 gate, the gate's fp32 input and softmax,
            # the int64 route slots (see the module docstring)
            slots = experts * moe_capacity(s * b, experts, k, capacity_factor, min_capacity)
            terms["mlp"] = (D * slots * (h + per_f * fe) // t + (D * h + 4 + 8) * tk // rs
                            + 4 * n_sh // rs + 4 * s * b * experts // rs)
        n_shared = int(_m(meta, "num_shared_experts", default=0) or 0)
        if n_shared:
            fs = int(_m(meta, "shared_expert_intermediate_size", default=fe * n_shared))
            terms["mlp_shared"] = per_f * D * s * b * fs // t
            if fam == "qwen2_moe":  # sigmoid gate on the shared expert: its output and the expert's
                terms["mlp_shared"] += D * n_sh // t + D * s * b
    else:
        terms["mlp"] = per_f * D * s * b * f // t
    return terms


#: Checkpointed inputs the async offload engine leaves on the accelerator at the end of forward:
#: the newest (``keep_last_count=1``) and the last one copied out, still referenced by the forward
#: stash until its backward (``max_fwd_stash_count=2``; :func:`cpu_checkpoint_traffic`). The
#: host holds a copy of every input but the newest.
ASYNC_OFFLOAD_ON_ACCELERATOR = 2


def cpu_checkpoint_traffic(inputs: int, piece: int, async_engine: bool) -> tuple[int, int]:
    """``cpu_checkpointing``'s PCIe bytes per micro-batch, (device -> host in forward, host ->
    device in backward), for ``inputs`` checkpointed layer inputs of ``piece`` bytes each (the
    input, or its partition of ceil(input / mp_size) with ``partition_activations``).

    DeepSpeed 0.19.8, ``runtime/activation_checkpointing/checkpointing.py``: with partitioning each
    partition is copied to host (``partition_activations`` :403, :432 / :436) and back into the
    gather buffer before the recompute (``gather_partitioned_activations`` :290-306, device = the
    accelerator under CPU_CHECKPOINT, ``CheckpointFunction.backward`` :706-708); without it, on a
    synchronized device, every input is copied out (``copy_to_device(..., cpu)`` :613-614) and
    back (``saved_data.to(t.device)`` :699-702): ``inputs x piece`` each way. On an accelerator with
    streams the async engine (``_get_cpu_offload_engine`` :498-511, ``keep_last_count=1``;
    ``offload_activations.py`` defaults ``max_fwd_stash_count=2``) keeps the newest input on the
    accelerator (``offload_input`` / ``_flush_keep_last`` :212-230: inputs - 1 copied out) and the
    last one copied out still referenced in its forward stash, restored without a copy
    (``_reap_forward_stash`` :132-138, ``_restore_tensor`` :244-262): inputs - 2 copied back."""
    if inputs <= 0:
        return 0, 0
    if async_engine:
        return max(0, inputs - 1) * piece, max(0, inputs - 2) * piece
    return inputs * piece, inputs * piece


def eager_recompute_peak(meta: dict[str, Any], s: int, b: int, D: int, whole: int, t: int = 1, sp: bool = False,
                         stat_bytes: int = 4, moe_layer: bool = False, capacity_factor: float | None = None,
                         mask_bytes: int = 1, attention: str = "eager") -> int:
    """Bytes live at the backward peak of one recomputed layer with eager attention, beyond the
    other layers' kept inputs: the larger of two instants of its backward (``whole`` = the
    layer's saved activations, what the recompute rebuilds; t / sp as :func:`layer_terms`).

    ``torch.utils.checkpoint`` (non-reentrant) reruns the layer's forward when backward reaches
    it, so all of the layer's saved tensors exist again, and autograd then frees each node's
    saved tensors once that node has run, in reverse order of creation:

    * start of the layer's backward: ``whole`` + the gradient of the layer's output (D sbh) +
      the first nodes' temporaries: BLOOM's ``bloom_gelu_back`` (modeling_bloom.py: tanh_out
      and four more products of x, D sbf each; the gradient of the GeLU output replaces the
      freed dense_4h_to_h input), Gemma 2's fp32 RMSNorm backward (Gemma2RMSNorm computes in
      fp32: four fp32 sbh gradients), otherwise the gated MLP's two gradients (D sbf each); in a
      MoE layer (``moe_layer``, transformers' dropless experts: ``capacity_factor`` None) the
      routing-weight multiply's backward (``integrations/moe.py:grouped_mm_experts_forward``,
      ``weighted_out = proj_out * sample_weights_g``): autograd's MulBackward0 holds the
      incoming gradient of the k s b routed rows and makes both products, grad x weights and
      grad x proj_out, before the engine casts and sum-reduces them: three (k s b, h) tensors
      in the weights' dtype, fp32 where the router leaves them fp32 (Mixtral's
      ``MixtralTopKRouter``: softmax in fp32, no cast back; :data:`_FP32_ROUTING_WEIGHTS`),
      the model dtype where it casts (Qwen2/Qwen3-MoE: ``router_top_value.to(router_logits.dtype)``).
      Qwen2-MoE's sigmoid-gated shared expert has run its gating multiply by then: its saved
      output (D sbh) is freed, and the gradient of that output and the shared gate's gradient
      of the layer's MLP input (D sbh each) wait: one D sbh more. (Under a torch dispatch mode,
      as in the trace, the index backward just before also holds three such tensors:
      ``index_backward`` takes the out-of-place ``index_put`` when ``areAnyTensorSubclassLike``,
      which is true whenever a mode is active; without one it fills its zeros in place.);
    * the attention's softmax backward (transformers ``eager_attention_forward``: softmax in
      fp32, ``.to(query.dtype)``, matmul with v): the MLP's and o_proj's saved tensors and the
      probabilities' 16-bit copy and v are freed; alive are the first norm's saved tensors, the
      q/k/v input, q and k (k repeated to every head), Gemma 2's tanh soft-capping output, the
      softmax output, and the gradients: of the hidden state (D sbh), of v at every head
      (D sbad, waiting for repeat_kv's backward), of the probabilities cast to fp32 and of the
      scores (4 b a s^2 each; GPT-2: model dtype).

    With residual dropout (GPT-2 ``GPT2MLP.dropout``, BLOOM ``dropout_add``, Phi-3
    ``resid_mlp_dropout``) the layer's last op is that dropout: its backward runs first and
    frees its mask (``mask_bytes`` per element, as :func:`layer_terms`) before the instants
    above, so the start holds one mask less than ``whole`` (a storage tracker over GPT-2's
    backward: the attention's and the attention-output dropout's masks live, the MLP's gone).

    A tied embedding's gradient (V h D) waits in autograd's input buffer from lm_head's backward
    to the embedding's, so it is live at both (``tie_word_embeddings``).

    ``attention="flash"``: the start instant only (a fused kernel's backward holds no s^2 tensor):
    the peak of a layer's backward with SDPA, measured with MemTracker over transformers' real CPU
    backward of Llama, GPT-2 and Qwen3-MoE (tests/test_backward_moments.py: whole + this within 1%)."""
    h, a, kv, d, v_d, f, fam = _dims(meta)
    a_t, kv_t = max(1, a // t), max(1, kv // t)
    rs = t if sp else 1
    n_sh = s * b * h
    grad_h = D * n_sh // rs
    tied = D * int(meta["vocab_size"]) * h // t if _m(meta, "tie_word_embeddings", default=False) else 0
    if moe_layer and capacity_factor is None:
        k = int(_m(meta, "experts_per_token", default=1))
        w = 4 if fam in _FP32_ROUTING_WEIGHTS else D
        first = 3 * w * s * b * k * h // t
        if fam == "qwen2_moe":
            first += D * n_sh // rs
    elif fam == "bloom":
        first = 5 * D * s * b * f // t
    elif fam == "gemma2":
        first = 4 * 4 * n_sh // rs
    else:
        first = 2 * D * s * b * f // t
    start = whole + grad_h + first
    if float(_m(meta, "residual_dropout", default=0.0) or 0.0) > 0:
        start -= mask_bytes * n_sh // rs  # the MLP-side residual dropout's mask, freed first
    if attention != "eager":
        return start + tied
    sm = D if fam in _SOFTMAX_MODEL_DTYPE else 4
    s2 = b * a_t * s * s
    att = norm_bytes(meta, n_sh, s * b, D, stat_bytes) // rs + D * n_sh // rs + 2 * D * s * b * a_t * d + sm * s2
    if fam == "gemma2":
        att += D * s2
    if fam in _FUSED_QKV_ROPE and kv_t == a_t:
        att += D * s * b * (a_t + kv_t) * d
    if _m(meta, "qk_norm", default=False):
        qk = (a_t + kv_t) * d
        att += 4 * s * b * qk + 4 * s * b * (a_t + kv_t) + D * s * b * qk
    grads_s2 = 2 * sm * s2
    if float(_m(meta, "attention_dropout", default=0.0) or 0.0) > 0:
        # the attention dropout's backward, just before: the softmax output, the dropout's mask, the
        # incoming gradient and the one it makes (model dtype) -- more than the softmax backward's
        # two gradients where the softmax stays in the model dtype (GPT-2)
        grads_s2 = max(grads_s2, (mask_bytes + 2 * D) * s2)
    softmax_bwd = att + grad_h + D * s * b * a_t * v_d + grads_s2
    return max(start, softmax_bwd) + tied


def estimate_activations(meta: dict[str, Any], x: ActivationInputs) -> ActivationEstimate:
    """Activation bytes per rank for one micro-batch (see the module docstring for formulas).

    ``meta`` needs hidden_size, num_layers, num_heads, intermediate_size, vocab_size (and
    optionally num_kv_heads, head_dim, norm, mlp, MoE fields, first_dense_layers).
    Raises KeyError when a required architecture field is missing.
    """
    s, b, D, t = x.seq_len, x.micro_batch, x.dtype_bytes, x.tensor_parallel
    if x.ulysses > 1:  # DeepSpeed-Ulysses (arXiv:2309.14509 section 3): the local sequence is s / sp
        s = -(-s // x.ulysses)
    h = int(meta["hidden_size"])
    L = int(meta["num_layers"])
    V = int(meta["vocab_size"])
    dense_first = int(_m(meta, "first_dense_layers", default=0) or 0)
    moe = int(_m(meta, "num_experts", default=0) or 0) > 0
    kern = {"mask_bytes": x.dropout_mask_bytes, "stat_bytes": x.norm_stat_bytes}
    moe_kw = {"capacity_factor": x.moe_capacity_factor, "min_capacity": x.moe_min_capacity}
    dense = layer_terms(meta, s, b, D, x.attention, t, x.sequence_parallel, moe=False, **kern)
    per_dense = sum(dense.values())
    if moe:
        mt = layer_terms(meta, s, b, D, x.attention, t, x.sequence_parallel, moe=True, **kern, **moe_kw)
        per_moe = sum(mt.values())
        n_dense, n_moe = dense_first, L - dense_first
    else:
        per_moe, n_dense, n_moe = 0, L, 0
    p = max(1, x.pipeline_parallel)
    from advisor.model.parallel import partition_uniform
    if x.stage is None:
        layers_on_rank = math.ceil(L / p)
        in_flight = p  # 1F1B: the first stage holds p micro-batches' activations
        last = True
    else:
        bounds = partition_uniform(L, p)
        layers_on_rank = bounds[x.stage + 1] - bounds[x.stage]
        # IN_FLIGHT_SOURCE: min(stages - stage_id, micro_batches)
        in_flight = min(p - x.stage, x.micro_batches or p)
        last = x.stage == p - 1
    frac = layers_on_rank / L
    # what the PipelineEngine keeps of each in-flight micro-batch beside autograd's saved tensors
    # (runtime/pipe/engine.py): a stage before the last keeps its output, the hidden state it sends on,
    # in pipe_buffers['outputs'] from its forward (_exec_forward_pass l.751) to the end of its backward
    # (_exec_backward_pass l.866); the first stage's forward runs on a clone of the loaded input ids
    # (l.705), which the embedding saves for its backward (int64)
    pipe_kept = 0
    if p > 1 and x.stage is not None:
        if x.stage < p - 1:
            pipe_kept += D * s * b * h // (t if x.sequence_parallel else 1)
        if x.stage == 0:
            pipe_kept += 8 * s * b
    all_layers = int((n_dense * per_dense + n_moe * per_moe) * frac)
    largest_layer = max(per_dense if n_dense else 0, per_moe if n_moe else 0) if layers_on_rank else 0
    rs = t if x.sequence_parallel else 1
    head_norm = norm_bytes(meta, s * b * h, s * b, D, x.norm_stat_bytes)
    loss_saved = head_norm // rs + D * s * b * h // rs + 4 * s * b * V // t + D * s * b * V // t + 8 * s * b
    if meta.get("family") == "gemma2":  # final_logit_softcapping: tanh(logits / cap) saves its output
        loss_saved += D * s * b * V // t
    # what the head's backward frees before the layers' backward: all of it but the logits the
    # model returns (held by its output, not by autograd)
    head_freed = loss_saved - D * s * b * V // t
    logits_kept = D * s * b * V // t
    if float(_m(meta, "embedding_dropout", default=0.0) or 0.0) > 0:  # the embedding dropout's mask
        loss_saved += x.dropout_mask_bytes * s * b * h // rs
    if meta.get("family") == "bloom":
        # BloomModel.word_embeddings_layernorm: a LayerNorm on the embedding output saves its
        # input and mean/rstd (modeling_bloom.py), outside the layers
        loss_saved += D * s * b * h // rs + 2 * x.norm_stat_bytes * s * b // rs
    loss_spike = 4 * s * b * V // t
    loss_backward_spike = 8 * s * b * V // t
    # lm_head's backward: the loss's nodes have released the log-probabilities, the labels (and Gemma 2's tanh
    # output); live are the logits' gradient (model dtype), the hidden state's and a tied embedding's
    loss_freed = 4 * s * b * V // t + 8 * s * b + (D * s * b * V // t if meta.get("family") == "gemma2" else 0)
    head_bwd = D * s * b * V // t + D * s * b * h // rs
    if _m(meta, "tie_word_embeddings", default=False):
        head_bwd += D * V * h // t
    if not last:  # only the last pipeline stage runs the head and the loss
        loss_saved = loss_spike = loss_backward_spike = head_freed = logits_kept = loss_freed = head_bwd = 0
    mode, k = parse_checkpointing(x.checkpointing, layers_on_rank)
    notes: list[str] = []
    if moe and x.moe_capacity_factor is not None and t > 1:
        n_exp = int(meta["num_experts"])
        cap = moe_capacity(s * b, n_exp, int(_m(meta, "experts_per_token", default=1)), x.moe_capacity_factor,
                           x.moe_min_capacity)
        if cap % t:
            notes.append(f"DeepSpeed MoE capacity {cap} slots per expert is not divisible by tensor parallel {t}: "
                         f"drop_tokens asserts \"input dimension 1 ({cap}) is not divisible by tensor parallel world "
                         "size\" (moe/mappings.py:_drop_tokens)")
    # recompute adds forward FLOPs, as a fraction of the step's 6 N + attention per token
    # (advisor.model.flops: full / k of L one forward of the layers, 2 N_layers + A / 3; selective
    # the attention core's forward, A / 3), at the full sequence (each token attends to all s)
    n_act = x.params_active or int(_m(meta, "active_params", default=0) or _m(meta, "params", default=0) or 0) \
        or 12 * L * h * h
    n_out = x.params_outside_layers if x.params_active else 0

    def flops_fraction(kind: str, share: float = 1.0) -> float:
        return recompute_fraction(meta, x.seq_len, kind, share, n_act, n_out)
    saved_host = host_out = host_in = 0
    async_engine = False
    recompute_freed_head = 0
    if mode == "selective":
        sel = layer_terms(meta, s, b, D, x.attention, t, x.sequence_parallel, moe=False, selective=True, **kern)
        cut = dense["attention"] - sel["attention"]  # what the core no longer keeps, per layer
        saved_acc = (all_layers - cut * layers_on_rank) * in_flight + loss_saved
        recompute = recompute_gross = cut  # one layer's core, recomputed in its backward
        recompute_freed = 0
        frac_flops = flops_fraction("selective")
        largest_layer -= cut
        if x.attention == "eager" and layers_on_rank:
            # the first core recomputed is the last layer's, after the loss head's backward (its
            # tensors freed, the logits aside), and it peaks at the softmax backward, where that
            # layer's MLP and o_proj tensors are freed: eager_recompute_peak's instant, which
            # counts the layer's still-live kept tensors itself (so the layer's kept bytes go)
            recompute_gross = eager_recompute_peak(meta, s, b, D, 0, t, x.sequence_parallel, x.norm_stat_bytes,
                                                   moe_layer=moe and n_moe > 0,
                                                   capacity_factor=x.moe_capacity_factor,
                                                   mask_bytes=x.dropout_mask_bytes)
            # beside it, the core's own inputs k and v at their own heads, which its checkpoint
            # holds until the core's backward ends (live at that instant in a storage tracker's
            # list over Llama: the v_proj output and k after RoPE)
            _, a_h, kv_h, d_h, vd_h, _, _ = _dims(meta)
            recompute_gross += D * s * b * max(1, kv_h // t) * (d_h + vd_h)
            # and one tensor of the core's output's shape (b, s, heads, v head dim; model dtype): measured with
            # MemTracker over transformers' real CPU backward with the core in torch.utils.checkpoint (Llama bf16 /
            # fp32, Qwen3-MoE: every layer moment D sbh above the formula without it, tests/test_backward_moments.py);
            # the core's output gradient, held by the checkpoint's backward while the core is rebuilt and run back
            recompute_gross += D * s * b * max(1, a_h // t) * vd_h
            recompute_freed = head_freed + largest_layer
            recompute_freed_head = head_freed
            recompute = max(0, recompute_gross - recompute_freed)
    elif mode in ("full", "layers"):
        inp = D * s * b * h // rs  # one layer's kept input
        lo = 0 if x.stage is None else partition_uniform(L, p)[x.stage]
        ckpt_layers = range(lo, lo + k)  # Megatron's block method: the stage's first k layers
        if mode == "full":
            replaced = all_layers
        elif type(per_dense) is int and type(per_moe) is int:
            # the same sum counted, not walked (generate asks for every K at 1e5 layers, issue 21):
            # the stage's first k layers, those below first_dense_layers dense (all dense without MoE)
            nk = len(ckpt_layers)
            nd = nk if not moe else max(0, min(ckpt_layers.stop, dense_first) - ckpt_layers.start)
            nd = min(nd, nk)
            replaced = nd * per_dense + (nk - nd) * per_moe
        else:
            replaced = sum(per_dense if i < dense_first or not moe else per_moe for i in ckpt_layers)
        kept, acc_keep, gathered = inp * k, None, 0
        ds = x.deepspeed_checkpointing
        if ds and x.partition_activations and t > 1:
            # checkpointing.py:get_partition_size: numel / mp_size of each checkpoint input
            kept = -(-inp // t) * k
            gathered = inp  # gather_partitioned_activations: a full-size buffer before recompute
        if ds and x.contiguous_memory_optimization and x.partition_activations:
            n_buf = x.number_checkpoints if x.number_checkpoints else k
            if n_buf < k:
                notes.append(f"activation_checkpointing.number_checkpoints {n_buf} < {k} checkpointed layers: "
                             "DeepSpeed's contiguous buffers run out (IndexError at checkpoint "
                             f"{n_buf + 1}, checkpointing.py:partition_activations)")
            kept = kept // max(k, 1) * n_buf  # number_checkpoints partitions, allocated at once
        if ds and x.cpu_checkpointing:
            gathered = inp
            async_engine = not x.partition_activations and x.offload_keeps_newest
            piece = -(-inp // t) if x.partition_activations and t > 1 else inp
            host_out, host_in = cpu_checkpoint_traffic(k, piece, async_engine)
            if x.partition_activations or not x.offload_keeps_newest:
                saved_host, kept = kept, 0
            else:  # the async offload engine: see cpu_checkpoint_traffic
                saved_host, kept = max(0, kept - inp), min(kept, ASYNC_OFFLOAD_ON_ACCELERATOR * inp)
        shared = 0
        if x.attention == "eager":
            # transformers hands the checkpointed layers its 4-D attention mask (model dtype, b x
            # 1 x s x s, one tensor shared by all layers): the checkpoint keeps it alive; Gemma 2
            # alternates sliding-window and full layers, two masks
            shared += D * b * s * s * (2 if meta.get("family") == "gemma2" and k >= 2 else 1)
        if meta.get("family") == "bloom":
            # and BLOOM its ALiBi bias (b x heads, 1, s), model dtype (modeling_bloom.py build_alibi_tensor)
            shared += D * b * int(meta["num_heads"]) * s // t
        ckpt_kept = kept // max(k, 1)
        kept += shared
        saved_acc = (all_layers - replaced + kept) * in_flight + loss_saved
        # backward runs from the last layer: the un-checkpointed ones are freed before the first
        # checkpointed layer is recomputed, so only what exceeds them adds to the peak
        layer_peak, freed_head = largest_layer, 0
        if x.attention == "eager" and layers_on_rank:
            # eager_recompute_peak: the head is done by then (the logits aside)
            layer_peak = eager_recompute_peak(meta, s, b, D, largest_layer, t, x.sequence_parallel,
                                              x.norm_stat_bytes, moe_layer=moe and n_moe > 0,
                                              capacity_factor=x.moe_capacity_factor,
                                              mask_bytes=x.dropout_mask_bytes)
            freed_head = head_freed
        # the recomputed first norm saves the layer's input itself where it does not copy it (LayerNorm and a scale
        # norm in any dtype; an RMSNorm's fp32 upcast, ``hidden_states.to(torch.float32)``, in an fp32 model returns
        # its input): that storage is the checkpoint's input (or the gathered buffer), counted already (a real CPU
        # fp32 Llama under full recompute: tests/test_backward_moments.py)
        if layers_on_rank and k and (_m(meta, "norm", default="rmsnorm") in ("layernorm", "scale") or D >= 4):
            layer_peak = max(0, layer_peak - inp)
        recompute_gross, recompute_freed = layer_peak + gathered, freed_head + (all_layers - replaced)
        recompute_freed_head = freed_head
        recompute = max(0, recompute_gross - recompute_freed)
        frac_flops = flops_fraction("full", k / layers_on_rank if layers_on_rank else 0.0)
    else:
        saved_acc = all_layers * in_flight + loss_saved
        recompute = recompute_gross = recompute_freed = 0
        frac_flops = 0.0
    if mode not in ("full", "layers"):
        ckpt_kept = 0
    saved_acc += pipe_kept * in_flight
    # a layer's backward beyond its saved tensors (eager_recompute_peak's instants without the layer itself):
    # without recompute, on top of the layer's saved tensors; with flash recompute, on top of the rebuilt layer;
    # eager recompute's recompute_gross already holds it
    bwd_kw = dict(t=t, sp=x.sequence_parallel, stat_bytes=x.norm_stat_bytes, moe_layer=moe and n_moe > 0,
                  capacity_factor=x.moe_capacity_factor, mask_bytes=x.dropout_mask_bytes)
    if not layers_on_rank or (mode != "none" and x.attention == "eager"):
        layer_bwd = 0
    elif mode == "none":
        layer_bwd = eager_recompute_peak(meta, s, b, D, largest_layer, attention=x.attention, **bwd_kw) - largest_layer
    else:
        layer_bwd = eager_recompute_peak(meta, s, b, D, 0, attention="flash", **bwd_kw)
    # k of L: the un-checkpointed layers' backward, as without recompute
    unckpt_bwd = (eager_recompute_peak(meta, s, b, D, largest_layer, attention=x.attention, **bwd_kw) - largest_layer
                  if mode == "layers" and 0 < k < layers_on_rank else 0)
    if mode not in ("full", "layers"):
        shared = 0
    # RoPE's cos and sin (1 x s x rotary dim, model dtype): transformers' rotary embedding computes them once per
    # forward and every layer's apply_rotary_pos_emb saves the same two tensors (q * cos, rotate_half(q) * sin),
    # live until the first layer's backward, with or without checkpointing (the checkpoint keeps them as its input);
    # measured with MemTracker over Llama's and Qwen3-MoE's real CPU backward (tests/test_backward_moments.py).
    # Not under pipeline parallelism (a PipelineModule's layers are the user's own), nor where DeepSpeed's
    # checkpoint partitions or moves to host every floating input of each checkpoint (partition_activations,
    # cpu_checkpointing: runtime/activation_checkpointing/checkpointing.py is_activation_to_checkpoint l.377-384):
    # not measured there
    moved = mode in ("full", "layers") and x.deepspeed_checkpointing and (x.partition_activations
                                                                          or x.cpu_checkpointing)
    if layers_on_rank and p == 1 and not moved and _m(meta, "position_embedding", default="rope") == "rope" \
            and not _m(meta, "attention_free", default=False):
        rope = 2 * D * s * int(_m(meta, "qk_rope_head_dim", default=0) or _dims(meta)[3])
        saved_acc += rope
        shared += rope
    if mode != "none":
        from dataclasses import replace as _replace

        base = estimate_activations(meta, _replace(x, checkpointing="none", cpu_checkpointing=False))
        peak_none = base.peak_accelerator
    else:
        peak_none = 0  # the row itself (below)
    breakdown = {f"layer.{k}": v for k, v in dense.items()}
    breakdown["loss_head"] = loss_saved
    est = ActivationEstimate(per_layer=largest_layer, layers_on_rank=layers_on_rank, saved_accelerator=saved_acc,
                              saved_host=saved_host, recompute_layer=recompute, loss_head=loss_saved,
                              loss_head_kept=logits_kept, loss_head_freed=head_freed,
                              loss_spike=loss_spike, loss_backward_spike=loss_backward_spike,
                              recompute_flops_fraction=frac_flops, breakdown=breakdown, recompute=mode,
                              checkpointed_layers=k if mode in ("full", "layers") else 0, notes=notes,
                              peak_without_recompute=peak_none, host_offload_bytes=host_out,
                              host_restore_bytes=host_in, host_offload_overlapped=async_engine and host_out > 0,
                              recompute_layer_peak=recompute_gross, recompute_freed=recompute_freed,
                              in_flight=in_flight, pipe_kept=pipe_kept, layer_backward=max(0, layer_bwd),
                              layers_shared=shared, loss_freed=loss_freed, head_backward=head_bwd,
                              recompute_freed_head=recompute_freed_head, checkpoint_kept=ckpt_kept,
                              uncheckpointed_backward=max(0, unckpt_bwd), own_backward=p <= 1)
    if mode == "none":
        est.peak_without_recompute = est.peak_accelerator
    return est


def head_held(a: Any) -> int:
    """Of the loss head's saved bytes (``a.loss_head``), what backward does not free once the head's nodes have
    run, outside pipeline parallelism: all but ``loss_head_freed`` (the log-softmax output and the final
    norm's tensors; the logits stay, held by the caller's output, and so do the tensors saved before the
    first layer -- the embedding-dropout mask, BLOOM's embedding LayerNorm -- until the embedding's backward);
    an estimate without that figure (a traced one) frees none of it."""
    head = getattr(a, "loss_head", 0)
    freed = getattr(a, "loss_head_freed", None)
    if freed is None:
        return getattr(a, "loss_head_kept", head)
    return max(0, head - freed)


def layer_moment_breaks(a: Any, layers: int) -> list[int]:
    """The layer moments (j = layers run back before it) where backward's activations can be largest: j = 0 (layer
    L-1's) and, under k of L, j = L - k, the first checkpointed layer's (its recompute; the un-checkpointed layers
    above run first, :func:`backward_moments`); within each run of layers a moment holds one layer's saved bytes less
    than the one before. Bytes-free: the indexes only."""
    k = _k_of_l(a, layers)
    return [0] + ([layers - k] if k else [])


def _k_of_l(a: Any, layers: int) -> int:
    """k where the estimate ``a`` checkpoints k of its ``layers`` layers (0 < k < layers) and says what a checkpointed
    and an un-checkpointed layer keep (a formula estimate: ``recompute_layer_peak`` set); else 0 -- a traced estimate
    (``advisor.engine.traced``) measures one backward peak, ``recompute_layer``, and keeps the uniform moments."""
    k = getattr(a, "checkpointed_layers", 0) if getattr(a, "recompute", "none") == "layers" else 0
    return k if 0 < k < layers and getattr(a, "recompute_layer_peak", 0) else 0


def backward_moments(a: Any, layers: int, js: list[int], n_flight: int = 1, kept_dup: int = 0,
                     held: int = 0, own_backward: bool = True) -> list[int]:
    """Accelerator activation bytes of the ActivationEstimate ``a`` at each moment of backward (see
    ``advisor.ledger.timeline._backward_activations``): [start, the head's moment (``own_backward`` only), the layer
    moments ``js`` (j = layers run back before it: layer ``layers``-1-j's backward), end]; with no ``js``, the layer
    moments :func:`layer_moment_breaks` (layer L-1's; under k of L also the first checkpointed layer's).

    The head's moment is lm_head's backward: the loss's nodes have run and released their saved tensors
    (``loss_freed``: the log-probabilities, the labels), the head's gradients are live (``head_backward``: the
    logits' in the model dtype, the hidden state's, a tied embedding's). Layer L-1's moment then holds none of the
    head's freed tensors (``gone`` = ``loss_head`` - ``held``): torch releases a node's saved tensors once it has
    run (``torch/csrc/autograd/engine.cpp`` evaluate_function: ``fn.release_variables()`` after
    ``call_function`` when ``keep_graph`` is false), and the final norm's backward, the head's last node, runs
    before layer L-1's. Under pipeline parallelism (``own_backward`` False) the head stays counted at layer
    L-1's moment, as the engine cells measured it.

    Per layer, of the micro-batch run back: ``layers_shared`` (RoPE's cos and sin every layer saves, the eager mask
    and BLOOM's ALiBi bias every checkpointed layer holds) is freed with the first layer, at the end; the rest,
    ``own - layers_shared`` with ``own = (saved - loss_head) / n_flight - pipe_kept``, layer by layer as backward
    runs back. Without recompute, selective or full, every layer keeps the same ``s = (own - layers_shared) /
    layers`` and its moment adds ``layer_backward`` (the layer's output gradient and its first nodes' gradients, a
    tied embedding's waiting gradient) and its recompute: whole below layer L-1, at layer L-1 net of
    ``recompute_freed`` less the head's share; under selective recompute net of it at every layer
    (``recompute_layer_peak - (recompute_freed - recompute_freed_head)``: eager selective recompute's peak holds the
    layer's own kept tensors, which the moment counts as saved). Under k of L (``recompute`` "layers", k = ``checkpointed_layers``) the L - k
    un-checkpointed layers run back first: each keeps ``u = (own - layers_shared - k checkpoint_kept) / (L - k)``
    and its moment adds ``uncheckpointed_backward``, no recompute; then the k checkpointed layers, each keeping
    ``checkpoint_kept`` (its input, live through its own recompute) and adding the recompute
    (``recompute_layer_peak``) and ``layer_backward``. Measured with MemTracker over transformers' real CPU backward
    (tests/test_backward_moments.py: Llama sdpa/eager, GPT-2, Qwen3-MoE, bf16 and fp32, no, full, 2-of-4 and
    selective checkpointing, every moment within 1%). ``own_backward`` False (pipeline parallelism) keeps the
    engine-proved moments: no head moment, ``layer_backward`` left out (there the gradient of the stage's output
    is the PipelineEngine's own buffer, ``pipe_grad_buf``, and the engine cells, tests/engine/test_pipeline_engine.py,
    a ReLU MLP proxy, measured the layer's transient as one D sbF gradient, not the formula's gated-MLP pair), the
    recompute net of the un-checkpointed layers at layer L-1 and whole below it."""
    saved = a.saved_accelerator
    loss = getattr(a, "loss_backward_spike", 0)
    bwd = getattr(a, "layer_backward", 0) if own_backward else 0
    head = getattr(a, "loss_head", 0)
    own = max(0, (saved - head) // max(1, n_flight) - getattr(a, "pipe_kept", 0))
    shared = min(own, getattr(a, "layers_shared", 0))
    gone = max(0, head - held)  # what of the head backward frees once its nodes have run
    s = (own - shared) // layers if layers else 0
    acts = [saved + loss - kept_dup]
    freed = getattr(a, "recompute_freed", 0)
    gross = a.recompute_layer + freed
    if own_backward:
        # the head's own moment (lm_head's backward: the loss's nodes' saved tensors freed, the logits' and the
        # hidden state's gradients live), then the layers with the head's saved tensors freed (torch releases a
        # node's saved tensors right after it runs: engine.cpp evaluate_function -> release_variables)
        acts.append(saved - getattr(a, "loss_freed", 0) + getattr(a, "head_backward", 0) - kept_dup)
        js = js if layers and js else layer_moment_breaks(a, layers) if layers else [0]
        k = _k_of_l(a, layers)
        n_u = layers - k if k else 0  # the un-checkpointed layers, run back first
        if n_u:
            c = getattr(a, "checkpoint_kept", 0)
            u = max(0, own - shared - k * c) // n_u
            ub = getattr(a, "uncheckpointed_backward", 0)
            # the recomputed layer's whole peak (recompute_layer is net of the un-checkpointed layers, clamped at 0)
            peak = getattr(a, "recompute_layer_peak", 0) or gross
            acts += [saved - gone + (ub - j * u if j < n_u else peak + bwd - n_u * u - (j - n_u) * c)
                     for j in js]
        else:
            # layer L-1's recompute is net of what of recompute_freed the moment does not free itself (the head's share
            # is ``gone``); below it the moment frees what has run back itself, so the recomputed layer is its whole
            # peak -- but selective recompute's peak (eager: eager_recompute_peak) holds the layer's own kept
            # tensors, which its moment counts as saved already: net of them at every layer
            rec0 = max(0, gross - (freed - getattr(a, "recompute_freed_head", 0)))
            sel = getattr(a, "recompute", "none") == "selective"
            acts += [saved - gone - j * s + bwd + (rec0 if j == 0 or sel else gross) for j in js]
    elif layers and js:
        # layer L-1 with the loss head's saved tensors (the head's nodes run just before it); below it freed
        acts += [saved - j * s + bwd + (a.recompute_layer - kept_dup if j == 0 else gross - gone) for j in js]
    else:
        acts.append(saved + a.recompute_layer + bwd - kept_dup)
    acts.append(saved - gone - own)
    return acts
