"""Live activations per rank for one micro-batch: what autograd saves for backward.

Per-layer bytes follow Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models" (arXiv:2205.05198, section 4: sbh(34 + 5as/h) for a GPT layer with
16-bit activations and dropout), re-derived op by op for the blocks that open models actually
use, as Hugging Face transformers implements them (``modeling_llama.py`` and friends):

* RMSNorm (``LlamaRMSNorm``): ``x.to(float32)`` is saved by ``pow`` (4 sbh), ``rsqrt`` saves its
  fp32 output (4 sb), ``weight * x_normed.to(dtype)`` saves the normalised tensor (D sbh);
  LayerNorm (gpt2, bloom) saves its input (D sbh) and mean/rstd (8 sb).
* Linear layers save their input (D x input numel); the q/k/v projections share one input.
* Attention, SDPA / FlashAttention-style (``attention="flash"``): q and k after RoPE, v, the
  output (D each at their head counts) and the fp32 log-sum-exp (4 b a s); no s^2 term.
  Eager (``modeling_llama.eager_attention_forward``): q, k and v repeated to all heads
  (``repeat_kv``), the fp32 softmax output (4 b a s^2) and its 16-bit copy (D b a s^2).
* Gated MLP (SwiGLU): gate output, SiLU output, up output and their product (4 D s b f);
  plain MLP (GELU): 2 D s b f. MoE: each token's k routed experts (k x (D sbh + 4 D sb f_e))
  plus the fp32 router softmax (4 sb E) and shared experts.
* Loss head: final norm, lm_head input (D sbh), the log-softmax output in fp32 (4 sbV,
  ``ForCausalLMLoss`` upcasts logits), plus the 16-bit logits the model returns (D sbV); at the
  loss the fp32 copy of the logits (4 sbV) exists as well: the transient spike.
Dropout is assumed off (p = 0, as in current LLM training configs).

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

Verified against autograd's saved tensors on a plain-torch Llama proxy
(``advisor.engine.proxy_activations``, tests/engine/test_activations_engine.py).
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
    #: Extra forward FLOPs from recomputation as a fraction of the step's FLOPs without it.
    recompute_flops_fraction: float
    breakdown: dict[str, int] = field(default_factory=dict)

    @property
    def peak_accelerator(self) -> int:
        """Largest activation footprint on the accelerator during the step (bytes): the end of
        forward plus the loss spike, or (checkpointing) the kept inputs plus one recomputed layer."""
        return self.saved_accelerator + max(self.loss_spike, self.recompute_layer)


def _m(meta: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if meta.get(n) is not None:
            return meta[n]
    return default


def layer_terms(meta: dict[str, Any], s: int, b: int, D: int, attention: Attention, t: int = 1,
                sp: bool = False, moe: bool | None = None) -> dict[str, int]:
    """Saved-activation bytes of one transformer layer by term (see module docstring).

    ``meta``: architecture (hidden_size, num_heads, num_kv_heads, head_dim, intermediate_size,
    norm, mlp, num_experts, experts_per_token, moe_intermediate_size, num_shared_experts,
    shared_expert_intermediate_size). ``t``: tensor-parallel size; ``sp``: sequence parallel.
    Raises KeyError naming the missing architecture field.
    """
    h = int(meta["hidden_size"])
    a = int(meta["num_heads"])
    kv = int(_m(meta, "num_kv_heads", default=a))
    d = int(_m(meta, "head_dim", default=h // a))
    v_d = int(_m(meta, "v_head_dim", default=d))
    f = int(meta["intermediate_size"])
    norm = _m(meta, "norm", default="rmsnorm")
    gated = _m(meta, "mlp", default="gated") == "gated"
    n_sh = s * b * h
    rs = t if sp else 1  # norm/residual regions: sharded only with sequence parallelism
    terms: dict[str, int] = {}
    if norm == "rmsnorm":
        one_norm = 4 * n_sh + 4 * s * b + D * n_sh
    else:  # layernorm: input + mean and rstd in fp32
        one_norm = D * n_sh + 8 * s * b
    terms["norms"] = 2 * one_norm // rs
    terms["linear_inputs"] = 2 * D * n_sh // rs  # q/k/v input and MLP input (norm outputs)
    a_t, kv_t = max(1, a // t), max(1, kv // t)
    if attention == "flash":
        terms["attention"] = (D * s * b * a_t * d + D * s * b * kv_t * d + D * s * b * kv_t * v_d
                              + D * s * b * a_t * v_d + 4 * b * a_t * s)
    else:
        terms["attention"] = (D * s * b * a_t * d + D * s * b * a_t * d + D * s * b * a_t * v_d
                              + D * s * b * a_t * v_d + (4 + D) * b * a_t * s * s)
    experts = int(_m(meta, "num_experts", default=0) or 0)
    use_moe = (experts > 0) if moe is None else moe
    per_f = 4 if gated else 2
    if use_moe:
        k = int(_m(meta, "experts_per_token", default=1))
        fe = int(_m(meta, "moe_intermediate_size", default=f))
        terms["mlp"] = k * (D * n_sh + per_f * D * s * b * fe) // t + 4 * s * b * experts
        n_shared = int(_m(meta, "num_shared_experts", default=0) or 0)
        if n_shared:
            fs = int(_m(meta, "shared_expert_intermediate_size", default=fe * n_shared))
            terms["mlp_shared"] = per_f * D * s * b * fs // t
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
    dense = layer_terms(meta, s, b, D, x.attention, t, x.sequence_parallel, moe=False)
    per_dense = sum(dense.values())
    if moe:
        mt = layer_terms(meta, s, b, D, x.attention, t, x.sequence_parallel, moe=True)
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
    norm = _m(meta, "norm", default="rmsnorm")
    head_norm = (4 * s * b * h + 4 * s * b + D * s * b * h) if norm == "rmsnorm" else (D * s * b * h + 8 * s * b)
    loss_saved = head_norm // rs + D * s * b * h // rs + 4 * s * b * V // t + D * s * b * V // t + 8 * s * b
    loss_spike = 4 * s * b * V // t
    if not last:  # only the last pipeline stage runs the head and the loss
        loss_saved = loss_spike = 0
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
                              loss_spike=loss_spike, recompute_flops_fraction=frac_flops, breakdown=breakdown)
