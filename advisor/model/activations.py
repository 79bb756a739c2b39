"""Live activations per rank for one micro-batch: what autograd saves for backward.

Per-layer bytes follow Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models" (arXiv:2205.05198, section 4: sbh(34 + 5as/h) for a GPT layer with
16-bit activations and dropout), re-derived op by op for the blocks that open models actually
use, as Hugging Face transformers implements them (``modeling_llama.py`` and friends), and
checked term by term against the trace of transformers' own models
(:mod:`advisor.engine.trace`, tests/test_activations.py):

* Norms (:func:`norm_bytes`): LlamaRMSNorm 4 sbh (fp32 input) + 4 sb (rsqrt) + D sbh
  (normalised); GemmaRMSNorm 8 sbh + 4 sb (fp32 input and fp32 normalised, no 16-bit copy);
  LayerNorm (gpt2, bloom) its input (D sbh) and mean/rstd (fp32 on CUDA: 8 sb). Gemma 2 has
  four norms per layer; Qwen3 adds a per-head RMSNorm on q and k.
* Linear layers save their input (D x input numel); the q/k/v projections share one input.
  Phi-3's fused ``qkv_proj``: v is a view of its output, so all of it stays alive.
* Attention, SDPA / FlashAttention-style (``attention="flash"``): q and k after RoPE, v, the
  output (D each at their head counts) and the fp32 log-sum-exp (4 b a s); no s^2 term, and
  attention dropout is regenerated from the RNG state inside the kernel. Eager
  (``eager_attention_forward``): q, k and v repeated to all heads (``repeat_kv``), the fp32
  softmax output (4 b a s^2) and its 16-bit copy (D b a s^2); GPT-2's softmax stays in the
  model dtype (D b a s^2 only); Gemma 2's logit soft-capping keeps its tanh (D b a s^2).
* MLP: a gated MLP (SwiGLU/GeGLU) saves gate, up, product and the activation's tensors; a plain
  MLP (GPT-2, BLOOM) the activation's tensors and the second linear's input. SiLU/GELU save one
  tensor, GPT-2's ``gelu_new`` four (:data:`ACTIVATION_SAVED`). MoE: transformers' grouped_mm
  experts: each token's k routed copies (D sbk h), their MLPs, their outputs, the router's fp32
  softmax (4 sb E) and index/weight tensors, plus shared experts.
* Dropout (probabilities from config.json: GPT-2 ``attn_pdrop``/``resid_pdrop``/``embd_pdrop``
  default 0.1): a mask per residual dropout (2 per layer) and on the embedding, 1 byte per
  element (CUDA ``native_dropout``: bool); eager attention dropout keeps its mask (b a s^2).
* Loss head: final norm, lm_head input (D sbh), the log-softmax output in fp32 (4 sbV,
  ``ForCausalLMLoss`` upcasts logits), plus the 16-bit logits the model returns (D sbV); at the
  loss the fp32 copy of the logits (4 sbV) exists as well: the forward spike. In backward the
  fp32 gradients of the log-probabilities and of the logits (8 sbV) are live together with
  the saved log-probabilities: the backward spike, usually the step's activation peak.

Checkpointing "full" (DeepSpeed ``activation_checkpointing`` / HF gradient checkpointing):
each layer keeps only its input (D sbh); backward recomputes one layer at a time, so one
layer's full activations are live on top. ``partition_activations`` splits the kept inputs
over the tensor-parallel group; ``cpu_checkpointing`` moves them to host memory.

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

Checkpointing = Literal["none", "full"]
Attention = Literal["flash", "eager"]


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
    partition_activations: bool = False
    cpu_checkpointing: bool = False
    #: Pipeline stage this rank is on (None: the worst case, the first stage's in-flight
    #: micro-batches together with the last stage's loss head).
    stage: int | None = None
    #: Micro-batches per optimizer step (gradient accumulation): 1F1B keeps at most this many
    #: in flight.
    micro_batches: int | None = None
    #: DeepSpeed-Ulysses sequence_parallel_size: each rank holds s / sp of the sequence outside
    #: attention and a / sp of the heads inside it (all-to-all), so every term divides by sp.
    ulysses: int = 1
    #: Kernel conventions: bytes per dropout-mask element (CUDA native_dropout: bool, 1; the
    #: CPU kernel: the model dtype) and per LayerNorm mean/rstd element (CUDA: fp32, 4).
    dropout_mask_bytes: int = 1
    norm_stat_bytes: int = 4


@dataclass
class ActivationEstimate:
    """Bytes per rank. ``per_layer`` is one layer's saved activations with no checkpointing."""

    per_layer: int
    layers_on_rank: int
    #: Saved for backward at the end of forward, on the accelerator (bytes).
    saved_accelerator: int
    #: Checkpointed layer inputs moved to host by cpu_checkpointing (bytes).
    saved_host: int
    #: Extra live during backward: one recomputed layer (full checkpointing), else 0.
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

    @property
    def peak_accelerator(self) -> int:
        """Largest activation footprint on the accelerator during the step (bytes): what the end
        of forward keeps plus the largest transient -- the loss spike in forward, the loss
        gradients in backward, or (checkpointing) one recomputed layer."""
        return self.saved_accelerator + max(self.loss_spike, self.loss_backward_spike, self.recompute_layer)


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
#: Families whose RMSNorm computes in fp32 and scales by (1 + weight) in fp32 (GemmaRMSNorm):
#: it saves the fp32 input and the fp32 normalised tensor, no 16-bit copy.
_GEMMA_NORM = frozenset({"gemma", "gemma2"})
#: Families whose eager softmax runs in the model dtype (GPT-2 ``eager_attention_forward``:
#: ``softmax(attn_weights, dim=-1)``); the others upcast to fp32 and copy back.
_SOFTMAX_MODEL_DTYPE = frozenset({"gpt2"})
#: Families with one fused q/k/v projection whose v is a view of its output, so saving v keeps
#: the whole q/k/v output alive (Phi-3 ``qkv_proj``; GPT-2/BLOOM have no RoPE, q and k are views too).
_FUSED_QKV_ROPE = frozenset({"phi3"})


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
    rows (input, mean and rstd: fp32 on CUDA, ``layer_norm_kernel.cu``)."""
    if _m(meta, "norm", default="rmsnorm") == "layernorm":
        return D * n + 2 * stat_bytes * rows
    if meta.get("family") in _GEMMA_NORM:
        return 8 * n + 4 * rows + 4 * int(meta["hidden_size"])  # + the fp32 (1 + weight)
    return 4 * n + 4 * rows + D * n


def layer_terms(meta: dict[str, Any], s: int, b: int, D: int, attention: Attention, t: int = 1,
                sp: bool = False, moe: bool | None = None, mask_bytes: int = 1,
                stat_bytes: int = 4) -> dict[str, int]:
    """Saved-activation bytes of one transformer layer by term (see module docstring).

    ``meta``: architecture (hidden_size, num_heads, num_kv_heads, head_dim, intermediate_size,
    norm, mlp, activation, family, qk_norm, sandwich_norm, num_experts, experts_per_token,
    moe_intermediate_size, num_shared_experts, shared_expert_intermediate_size,
    attention_dropout, residual_dropout). ``t``: tensor-parallel size; ``sp``: sequence parallel.
    ``mask_bytes``: bytes per element of a dropout mask (CUDA ``native_dropout``: bool, 1; the
    CPU kernel keeps it in the model dtype). ``stat_bytes``: LayerNorm mean/rstd element (CUDA 4).
    Raises KeyError naming the missing architecture field.
    """
    h = int(meta["hidden_size"])
    a = int(meta["num_heads"])
    kv = int(_m(meta, "num_kv_heads", default=a))
    d = int(_m(meta, "head_dim", default=h // a))
    v_d = int(_m(meta, "v_head_dim", default=d))
    f = int(meta["intermediate_size"])
    fam = meta.get("family")
    gated = _m(meta, "mlp", default="gated") == "gated"
    act_saved = ACTIVATION_SAVED.get(str(_m(meta, "activation", default="silu")), 1)
    p_attn = float(_m(meta, "attention_dropout", default=0.0) or 0.0)
    p_res = float(_m(meta, "residual_dropout", default=0.0) or 0.0)
    n_sh = s * b * h
    rs = t if sp else 1  # norm/residual regions: sharded only with sequence parallelism
    terms: dict[str, int] = {}
    n_norms = 4 if _m(meta, "sandwich_norm", default=False) else 2
    terms["norms"] = n_norms * norm_bytes(meta, n_sh, s * b, D, stat_bytes) // rs
    terms["linear_inputs"] = 2 * D * n_sh // rs  # q/k/v input and MLP input (norm outputs)
    a_t, kv_t = max(1, a // t), max(1, kv // t)
    if attention == "flash":
        # q and k after RoPE, v, the output and the fp32 log-sum-exp; k/v at their own heads
        # (transformers passes enable_gqa to sdpa when there is no mask); dropout inside the
        # kernel regenerates its mask from the RNG state: nothing saved for it
        att = (D * s * b * a_t * d + D * s * b * kv_t * d + D * s * b * kv_t * v_d
               + D * s * b * a_t * v_d + 4 * b * a_t * s)
    else:
        # eager: k and v repeated to all heads (repeat_kv), the softmax output in fp32 and its
        # 16-bit copy (GPT-2: one softmax output in the model dtype)
        sm = D if fam in _SOFTMAX_MODEL_DTYPE else 4 + D
        att = (D * s * b * a_t * d + D * s * b * a_t * d + D * s * b * a_t * v_d
               + D * s * b * a_t * v_d + sm * b * a_t * s * s)
        if fam == "gemma2":  # attn_logit_softcapping: tanh(scores / cap) saves its output
            att += D * b * a_t * s * s
        if p_attn > 0:
            # the dropout's mask; the matmul then saves the dropped probabilities instead of the
            # 16-bit copy, so that costs more only where softmax saves its own 16-bit output (GPT-2)
            att += (mask_bytes + (D if fam in _SOFTMAX_MODEL_DTYPE else 0)) * b * a_t * s * s
    if fam in _FUSED_QKV_ROPE and (attention == "flash" or kv_t == a_t):
        # v is a view of the fused q/k/v output and is saved as such (eager with GQA saves the
        # repeat_kv copy instead): all of the q/k/v output stays alive
        att += D * s * b * (a_t + kv_t) * d
    if _m(meta, "qk_norm", default=False):  # Qwen3: RMSNorm per head on q and k
        qk = (a_t + kv_t) * d
        att += 4 * s * b * qk + 4 * s * b * (a_t + kv_t) + D * s * b * qk
    terms["attention"] = att
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
        terms["mlp"] = (D * tk * (2 * h + per_f * fe)) // t + 4 * s * b * experts + 4 * s * b + 40 * tk + 4 * experts
        n_shared = int(_m(meta, "num_shared_experts", default=0) or 0)
        if n_shared:
            fs = int(_m(meta, "shared_expert_intermediate_size", default=fe * n_shared))
            terms["mlp_shared"] = per_f * D * s * b * fs // t
            if fam == "qwen2_moe":  # sigmoid gate on the shared expert: its output and the expert's
                terms["mlp_shared"] += D * n_sh // t + D * s * b
    else:
        terms["mlp"] = per_f * D * s * b * f // t
    return terms


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
    dense = layer_terms(meta, s, b, D, x.attention, t, x.sequence_parallel, moe=False, **kern)
    per_dense = sum(dense.values())
    if moe:
        mt = layer_terms(meta, s, b, D, x.attention, t, x.sequence_parallel, moe=True, **kern)
        per_moe = sum(mt.values())
        n_dense, n_moe = dense_first, L - dense_first
    else:
        per_moe, n_dense, n_moe = 0, L, 0
    p = max(1, x.pipeline_parallel)
    if x.stage is None:
        layers_on_rank = math.ceil(L / p)
        in_flight = p  # 1F1B: the first stage holds p micro-batches' activations
        last = True
    else:
        from advisor.model.parallel import partition_uniform
        bounds = partition_uniform(L, p)
        layers_on_rank = bounds[x.stage + 1] - bounds[x.stage]
        # runtime/pipe/schedule.py:TrainSchedule.num_pipe_buffers: min(stages - stage_id, micro_batches)
        in_flight = min(p - x.stage, x.micro_batches or p)
        last = x.stage == p - 1
    frac = layers_on_rank / L
    all_layers = int((n_dense * per_dense + n_moe * per_moe) * frac)
    largest_layer = max(per_dense if n_dense else 0, per_moe if n_moe else 0) if layers_on_rank else 0
    rs = t if x.sequence_parallel else 1
    head_norm = norm_bytes(meta, s * b * h, s * b, D, x.norm_stat_bytes)
    loss_saved = head_norm // rs + D * s * b * h // rs + 4 * s * b * V // t + D * s * b * V // t + 8 * s * b
    if meta.get("family") == "gemma2":  # final_logit_softcapping: tanh(logits / cap) saves its output
        loss_saved += D * s * b * V // t
    if float(_m(meta, "embedding_dropout", default=0.0) or 0.0) > 0:  # the embedding dropout's mask
        loss_saved += x.dropout_mask_bytes * s * b * h // rs
    loss_spike = 4 * s * b * V // t
    loss_backward_spike = 8 * s * b * V // t
    if not last:  # only the last pipeline stage runs the head and the loss
        loss_saved = loss_spike = loss_backward_spike = 0
    saved_host = 0
    if x.checkpointing == "full":
        kept = D * s * b * h // rs * layers_on_rank
        if x.partition_activations and t > 1 and not x.sequence_parallel:
            kept //= t
        if x.cpu_checkpointing:
            saved_host, kept = kept, 0
        saved_acc = kept * in_flight + loss_saved
        recompute = largest_layer
        # recompute adds one forward of the layers: F_fwd(layers) / (3 x F_fwd(all))
        layer_flops = 24 * h * h + 4 * s * h  # per token, forward, rough (Narayanan et al. 2021)
        head_flops = 2 * h * V
        frac_flops = (L * layer_flops) / (3 * (L * layer_flops + head_flops))
    else:
        saved_acc = all_layers * in_flight + loss_saved
        recompute = 0
        frac_flops = 0.0
    breakdown = {f"layer.{k}": v for k, v in dense.items()}
    breakdown["loss_head"] = loss_saved
    return ActivationEstimate(per_layer=largest_layer, layers_on_rank=layers_on_rank, saved_accelerator=saved_acc,
                              saved_host=saved_host, recompute_layer=recompute, loss_head=loss_saved,
                              loss_spike=loss_spike, loss_backward_spike=loss_backward_spike,
                              recompute_flops_fraction=frac_flops, breakdown=breakdown)
