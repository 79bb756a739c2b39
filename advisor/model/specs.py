"""Model architectures: presets, Hugging Face ``config.json`` reading, and expansion into the
tensor inventory the state ledger uses.

A :class:`ModelSpec` describes a decoder-only transformer by its architecture. :func:`expand`
turns it into an :class:`~advisor.model.inventory.Inventory` whose tensors have the same names, shapes
and order as ``model.named_parameters()`` of the Hugging Face transformers model for that
architecture (transformers 5.x module layout; shared/tied tensors appear once, as
``named_parameters`` deduplicates them). Counts are elements, never bytes.

Three ways in, all through :func:`resolve_model`:

* a built-in preset name (``llama-3-8b``; case-insensitive; the Hugging Face repo id works too);
* a local Hugging Face ``config.json`` (or a checkpoint folder holding one) -- read as JSON, no
  network, no transformers import;
* an inventory JSON file (``schemas/inventory.schema.json``), or a model spec JSON file
  (``schemas/model.schema.json``).

Every preset is built from the shape-relevant fields of the official ``config.json`` of its
Hugging Face repository, copied verbatim (the repo is named next to each preset), through the
same reader a user's ``config.json`` goes through. Parameter counts therefore follow from the
architecture; ``tests/test_models.py`` checks them against the published counts.

Import cost: standard library and ``advisor.model.inventory`` only. Nothing here imports torch,
deepspeed or transformers.
"""

from __future__ import annotations

import difflib
import gc
import os
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Callable

from advisor.config.validation import MAX_DIM, MAX_LAYERS, MAX_SEQ_LEN, json_shown, shown
from advisor.errors import ModelSpecError, cut
from advisor.model.inventory import LAYERNORM_META, Inventory, LayerTensorSpec, TensorSpec, from_dict

#: Families :func:`expand` knows, keyed by Hugging Face ``model_type``.
FAMILIES: tuple[str, ...] = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
    "gemma", "gemma2", "phi3", "gpt2", "bloom", "deepseek_v3",
)
#: Families whose tensors live under ``model.`` (the Llama naming scheme).
_LLAMA_LIKE = frozenset(FAMILIES) - {"gpt2", "bloom"}
_MOE = frozenset({"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3"})


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer described by its architecture.

    Sizes are counts of elements (features, heads, tokens), never bytes. ``None`` for
    ``num_kv_heads`` / ``head_dim`` means the usual default (``num_heads``;
    ``hidden_size // num_heads``); use :meth:`kv_heads` / :meth:`dim_per_head` to read them.
    """

    name: str
    #: Hugging Face ``model_type`` whose module layout (tensor names) this follows.
    family: str
    num_layers: int
    hidden_size: int
    num_heads: int
    intermediate_size: int
    vocab_size: int
    #: Longest sequence the model was configured for (``max_position_embeddings``), tokens.
    max_seq_len: int
    num_kv_heads: int | None = None
    head_dim: int | None = None
    tie_word_embeddings: bool = False
    #: ``rmsnorm`` (weight only) or ``layernorm`` (weight and bias).
    norm: str = "rmsnorm"
    #: Bias on the q/k/v projections (Qwen2: true) and on the attention output projection.
    attention_qkv_bias: bool = False
    attention_out_bias: bool = False
    #: Bias on the MLP projections.
    mlp_bias: bool = False
    #: ``gated`` (SwiGLU/GeGLU: gate, up, down) or ``plain`` (up, down: GPT-2, BLOOM).
    mlp: str = "gated"
    activation: str = "silu"
    #: ``rope``, ``learned`` (GPT-2 absolute positions: a max_seq_len x hidden table) or ``alibi``.
    position_embedding: str = "rope"
    #: RMSNorm on each head's queries and keys (Qwen3), ``head_dim`` elements each.
    qk_norm: bool = False
    #: Extra norms before and after the MLP (Gemma 2: four norms per layer).
    sandwich_norm: bool = False
    #: LayerNorm right after the token embedding (BLOOM).
    embedding_norm: bool = False
    # --- mixture of experts (num_experts == 0: dense) ---
    num_experts: int = 0
    experts_per_token: int = 0
    #: Width of one routed expert's MLP (Mixtral: ``intermediate_size``).
    moe_intermediate_size: int | None = None
    #: Shared experts (DeepSeek: ``n_shared_experts`` experts of ``moe_intermediate_size``;
    #: Qwen2-MoE: one shared MLP of ``shared_expert_intermediate_size`` plus a sigmoid gate).
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int | None = None
    #: The first N layers keep a dense MLP of ``intermediate_size`` (DeepSeek ``first_k_dense_replace``).
    first_dense_layers: int = 0
    #: Per-expert router score bias (DeepSeek-V3 ``e_score_correction_bias``, ``noaux_tc``):
    #: a buffer in transformers, a parameter in DeepSeek's own code; listed as a frozen tensor.
    router_score_bias: bool = False
    #: ``fused`` (transformers >= 5: ``experts.gate_up_proj`` / ``experts.down_proj`` 3-D tensors)
    #: or ``per_expert`` (transformers 4.x: one module per expert).
    expert_layout: str = "fused"
    # --- multi-head latent attention (DeepSeek); kv_lora_rank set means MLA ---
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    # --- dropout probabilities from config.json (activations only: each keeps a mask) ---
    #: On the attention probabilities (GPT-2 ``attn_pdrop``; ``attention_dropout`` elsewhere).
    attention_dropout: float = 0.0
    #: On each residual branch's output, twice per layer (GPT-2/Phi-3 ``resid_pdrop``, BLOOM
    #: ``hidden_dropout``).
    residual_dropout: float = 0.0
    #: On the embedding output (GPT-2 ``embd_pdrop``; Phi-3's config has it but Phi3Model never applies it).
    embedding_dropout: float = 0.0
    #: Multi-token-prediction modules appended after the main layers (DeepSeek-V3
    #: ``num_nextn_predict_layers``). transformers does not build them, so 0 unless asked.
    mtp_layers: int = 0
    description: str = ""
    #: Where the numbers come from (e.g. the HF repo whose config.json was read).
    source: str = ""

    # -- derived --------------------------------------------------------------------------
    def kv_heads(self) -> int:
        """Key/value heads (GQA/MQA); ``num_heads`` when not set."""
        return self.num_kv_heads if self.num_kv_heads is not None else self.num_heads

    def dim_per_head(self) -> int:
        """Per-head width in elements; ``hidden_size // num_heads`` when not set."""
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_heads

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``schemas/model.schema.json``); ``None`` fields are left out."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: Any, source: str = "<spec>") -> "ModelSpec":
        """Build from the JSON form; raises ModelSpecError naming ``source`` on unknown or
        missing fields. The result is validated (see :func:`validate_spec`)."""
        if not isinstance(d, dict):
            raise ModelSpecError(f"{source}: a model spec must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ModelSpecError(f"{source}: unknown model spec field(s) {', '.join(unknown)}")
        missing = [k for k in ("name", "family", "num_layers", "hidden_size", "num_heads",
                               "intermediate_size", "vocab_size", "max_seq_len") if k not in d]
        if missing:
            raise ModelSpecError(f"{source}: model spec is missing {', '.join(missing)}")
        spec = cls(**d)
        validate_spec(spec, source)
        return spec


def _posint(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


#: Documented limits of a model spec (bounded work: the inventory has one entry per tensor). Most layers:
#: MAX_LAYERS (config.validation, with the other tensor limits). Largest width (hidden, intermediate, vocab, heads, head_dim, ...): MAX_DIM (config.validation,
#: shared with --hidden-size). Most positions (max_seq_len): MAX_SEQ_LEN (config.validation,
#: the one bound of tokens per sequence, shared with --seq-len and a workload sidecar's seq_len).
#: Most routed experts per layer.
MAX_EXPERTS = 1 << 12
#: At most this many layer x expert blocks, num_layers x num_experts (per-expert layouts have
#: tensors per expert per layer).
MAX_LAYER_EXPERTS = 1 << 20


#: Counts a spec (or an inventory's ``meta``) may hold at 0; every other count is at least 1.
_NONNEG = ("num_experts", "experts_per_token", "num_shared_experts", "first_dense_layers", "mtp_layers")


def _count_limits() -> dict[str, int]:
    """The upper bound of each count field (:func:`validate_spec`'s, and an inventory meta's)."""
    from advisor.config.validation import MAX_PARAMS
    limits = {k: MAX_DIM for k in ("hidden_size", "num_heads", "intermediate_size", "vocab_size", "num_kv_heads",
                                   "head_dim", "moe_intermediate_size", "shared_expert_intermediate_size",
                                   "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}
    limits.update(num_layers=MAX_LAYERS, max_seq_len=MAX_SEQ_LEN, num_experts=MAX_EXPERTS, experts_per_token=MAX_EXPERTS,
                  num_shared_experts=MAX_EXPERTS, mtp_layers=MAX_LAYERS, first_dense_layers=MAX_LAYERS,
                  params=MAX_PARAMS, active_params=MAX_PARAMS)
    return limits


def checked_meta(meta: dict[str, Any], source: str) -> dict[str, Any]:
    """``meta`` without its null fields (null is "not known": a missing field, which the readers
    of meta handle; a null ``hidden_size`` reached ``int(None)``), after raising ModelSpecError (one line: ``source: /meta/KEY: ...``) when an inventory file's
    ``meta`` (``schemas/inventory.schema.json``) holds a field of :class:`ModelSpec` (or
    ``params`` / ``active_params``) of the wrong type or out of range: each count an integer
    from 1 (0 for :data:`_NONNEG`) to its bound (:func:`_count_limits`), each flag a boolean,
    each dropout a probability in [0, 1), each name a string, ``layernorm_params``
    (:data:`advisor.model.inventory.LAYERNORM_META`) an array of strings. Other keys are free
    (``additionalProperties``). The activation formulas read ``meta`` as :func:`expand` writes
    it; a hand-written ``"vocab_size": "x"`` ended in int()'s ValueError (issue 21, fuzz round c)."""
    kinds = {f.name: str(f.type) for f in fields(ModelSpec)}
    kinds.update(params="int", active_params="int")
    kinds[LAYERNORM_META] = "names"
    limits = _count_limits()
    for k, v in meta.items():
        t = kinds.get(k)
        if t is None or v is None:
            continue
        where = f"{source}: /meta/{cut(k)}"
        if t == "names":
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise ModelSpecError(f"{where}: expected an array of parameter names (strings), got {json_shown(v)}")
            continue
        if t.startswith("int"):
            lo, hi = (0 if k in _NONNEG else 1), limits.get(k, MAX_DIM)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ModelSpecError(f"{where}: expected an integer from {lo} to {hi:,}, got {json_shown(v)}")
        elif t == "bool" and not isinstance(v, bool):
            raise ModelSpecError(f"{where}: expected true or false, got {json_shown(v)}")
        elif t == "float" and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1):
            raise ModelSpecError(f"{where}: expected a probability in [0, 1), got {json_shown(v)}")
        elif t == "str" and not isinstance(v, str):
            raise ModelSpecError(f"{where}: expected a string, got {json_shown(v)}")
    return {k: v for k, v in meta.items() if v is not None}


def validate_spec(spec: ModelSpec, source: str | None = None, names: "dict[str, str] | None" = None) -> None:
    """Raise ModelSpecError (one line naming ``source`` or the spec's name) when the
    architecture is inconsistent: unknown family, non-positive sizes, heads not dividing,
    MoE or MLA fields incomplete. ``names`` maps a spec field to the key its source wrote
    (an HF config.json's ``num_hidden_layers`` / ``n_layer`` for ``num_layers``:
    :func:`spec_from_hf_config`); each message names a field by that key."""
    where = source or spec.name
    names = names or {}

    def n(field: str) -> str:
        return names.get(field, field)

    def bad(msg: str) -> ModelSpecError:
        return ModelSpecError(f"{where}: {msg}")

    if spec.family not in FAMILIES:
        raise bad(f"unsupported family {shown(spec.family)}; supported: {', '.join(FAMILIES)}")
    for k in ("num_layers", "hidden_size", "num_heads", "intermediate_size", "vocab_size", "max_seq_len"):
        if not _posint(getattr(spec, k)):
            raise bad(f"{n(k)} must be a positive integer, got {json_shown(getattr(spec, k))}")
    # every count's type before any arithmetic on it: a spec's "num_experts": null or "8" reached
    # num_layers * num_experts below as a TypeError (issue 21, fuzz round c)
    for k in ("num_experts", "experts_per_token", "num_shared_experts", "first_dense_layers", "mtp_layers"):
        v = getattr(spec, k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise bad(f"{n(k)} must be a non-negative integer, got {json_shown(v)}")
    for k, hi in (("num_layers", MAX_LAYERS), ("hidden_size", MAX_DIM), ("num_heads", MAX_DIM),
                  ("intermediate_size", MAX_DIM), ("vocab_size", MAX_DIM), ("max_seq_len", MAX_SEQ_LEN),
                  ("num_kv_heads", MAX_DIM), ("head_dim", MAX_DIM), ("moe_intermediate_size", MAX_DIM),
                  ("shared_expert_intermediate_size", MAX_DIM), ("q_lora_rank", MAX_DIM), ("kv_lora_rank", MAX_DIM),
                  ("qk_nope_head_dim", MAX_DIM), ("qk_rope_head_dim", MAX_DIM), ("v_head_dim", MAX_DIM),
                  ("num_experts", MAX_EXPERTS), ("experts_per_token", MAX_EXPERTS),
                  ("num_shared_experts", MAX_EXPERTS), ("mtp_layers", MAX_LAYERS)):
        v = getattr(spec, k)
        if isinstance(v, int) and not isinstance(v, bool) and v > hi:
            why = ("ds-advisor's bound on tokens per sequence, as --seq-len's" if k == "max_seq_len"
                   else "refused: the inventory would not be bounded")
            raise bad(f"{n(k)} is {cut(f'{v:,}')}, over the limit {hi:,} ({why})")  # cut: any length
    # the documented limit is "at most" (README): a product equal to it is accepted. The check
    # and the message use the same product (the check once used layers x (1 + experts), so a
    # product equal to the limit was refused as "over" it)
    blocks = spec.num_layers * spec.num_experts
    if blocks > MAX_LAYER_EXPERTS:
        raise bad(f"{n('num_layers')} x {n('num_experts')} = {blocks:,} is over the limit: at most {MAX_LAYER_EXPERTS:,} "
                  "(2^20) layer x expert blocks")
    for k in ("num_kv_heads", "head_dim", "moe_intermediate_size", "shared_expert_intermediate_size",
              "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        v = getattr(spec, k)
        if v is not None and not _posint(v):
            raise bad(f"{n(k)} must be a positive integer or absent, got {json_shown(v)}")
    for k in ("attention_dropout", "residual_dropout", "embedding_dropout"):
        v = getattr(spec, k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise bad(f"{n(k)} must be a probability in [0, 1), got {json_shown(v)}")
    for k, allowed in (("norm", ("rmsnorm", "layernorm")), ("mlp", ("gated", "plain")),
                       ("position_embedding", ("rope", "learned", "alibi")),
                       ("expert_layout", ("fused", "per_expert"))):
        if getattr(spec, k) not in allowed:
            raise bad(f"{k} must be one of {', '.join(allowed)}, got {json_shown(getattr(spec, k))}")
    if spec.head_dim is None and not spec.is_mla and spec.hidden_size % spec.num_heads:
        raise bad(f"{n('hidden_size')} {spec.hidden_size} is not divisible by {n('num_heads')} {spec.num_heads}; "
                  "give head_dim")
    if spec.num_heads % spec.kv_heads():
        raise bad(f"{n('num_heads')} {spec.num_heads} is not a multiple of {n('num_kv_heads')} {spec.kv_heads()}")
    if spec.family in _MOE:
        if spec.num_experts < 1 or not (1 <= spec.experts_per_token <= spec.num_experts):
            raise bad(f"family {spec.family} needs {n('num_experts')} >= 1 and 1 <= {n('experts_per_token')} <= "
                      f"{n('num_experts')}")
    elif spec.num_experts:
        raise bad(f"family {spec.family} is dense; {n('num_experts')} must be 0")
    if spec.first_dense_layers > spec.num_layers:
        raise bad(f"{n('first_dense_layers')} exceeds {n('num_layers')}")
    if spec.family == "deepseek_v3":
        if None in (spec.kv_lora_rank, spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim):
            raise bad("deepseek_v3 needs kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim")
    elif spec.is_mla or spec.mtp_layers:
        raise bad(f"MLA attention and MTP layers are only modelled for deepseek_v3, not {spec.family}")
    if spec.family in ("gpt2", "bloom") and (spec.norm != "layernorm" or spec.mlp != "plain"):
        raise bad(f"{spec.family} uses layernorm and a plain MLP")


# --------------------------------------------------------------------------------------------
# expansion
# --------------------------------------------------------------------------------------------

def _linear(out: list[TensorSpec], name: str, n_out: int, n_in: int, bias: bool) -> None:
    out.append(TensorSpec(f"{name}.weight", (n_out, n_in)))
    if bias:
        out.append(TensorSpec(f"{name}.bias", (n_out,)))


def _norm(out: list[TensorSpec], name: str, n: int, layernorm: bool) -> None:
    out.append(TensorSpec(f"{name}.weight", (n,)))
    if layernorm:
        out.append(TensorSpec(f"{name}.bias", (n,)))


def _gated_mlp(out: list[TensorSpec], p: str, h: int, inter: int, bias: bool) -> None:
    _linear(out, f"{p}.gate_proj", inter, h, bias)
    _linear(out, f"{p}.up_proj", inter, h, bias)
    _linear(out, f"{p}.down_proj", h, inter, bias)


def _attention(out: list[TensorSpec], s: ModelSpec, p: str) -> None:
    h = s.hidden_size
    if s.is_mla:
        qk_head = s.qk_nope_head_dim + s.qk_rope_head_dim  # type: ignore[operator]
        if s.q_lora_rank is None:
            _linear(out, f"{p}.q_proj", s.num_heads * qk_head, h, False)
        else:
            _linear(out, f"{p}.q_a_proj", s.q_lora_rank, h, s.attention_qkv_bias)
            _norm(out, f"{p}.q_a_layernorm", s.q_lora_rank, False)
            _linear(out, f"{p}.q_b_proj", s.num_heads * qk_head, s.q_lora_rank, False)
        _linear(out, f"{p}.kv_a_proj_with_mqa", s.kv_lora_rank + s.qk_rope_head_dim, h,  # type: ignore[operator]
                s.attention_qkv_bias)
        _norm(out, f"{p}.kv_a_layernorm", s.kv_lora_rank, False)  # type: ignore[arg-type]
        _linear(out, f"{p}.kv_b_proj", s.num_heads * (s.qk_nope_head_dim + s.v_head_dim),  # type: ignore[operator]
                s.kv_lora_rank, False)  # type: ignore[arg-type]
        _linear(out, f"{p}.o_proj", h, s.num_heads * s.v_head_dim, s.attention_out_bias)  # type: ignore[operator]
        return
    d, q, kv = s.dim_per_head(), s.num_heads, s.kv_heads()
    if s.family == "phi3":  # Phi3Attention registers o_proj first, then the fused qkv_proj
        _linear(out, f"{p}.o_proj", h, q * d, s.attention_out_bias)
        _linear(out, f"{p}.qkv_proj", (q + 2 * kv) * d, h, s.attention_qkv_bias)
        return
    _linear(out, f"{p}.q_proj", q * d, h, s.attention_qkv_bias)
    _linear(out, f"{p}.k_proj", kv * d, h, s.attention_qkv_bias)
    _linear(out, f"{p}.v_proj", kv * d, h, s.attention_qkv_bias)
    _linear(out, f"{p}.o_proj", h, q * d, s.attention_out_bias)
    if s.qk_norm:
        _norm(out, f"{p}.q_norm", d, False)
        _norm(out, f"{p}.k_norm", d, False)


def _experts(out: list[TensorSpec], s: ModelSpec, p: str, mixtral_v4: bool = False) -> None:
    """Routed experts of one layer under prefix ``p``."""
    h, e, m = s.hidden_size, s.num_experts, s.moe_intermediate_size or s.intermediate_size
    if s.expert_layout == "fused":
        out.append(TensorSpec(f"{p}.gate_up_proj", (e, 2 * m, h)))
        out.append(TensorSpec(f"{p}.down_proj", (e, h, m)))
        return
    for i in range(e):
        if mixtral_v4:  # MixtralBlockSparseTop2MLP: w1 (gate), w2 (down), w3 (up), in that order
            _linear(out, f"{p}.{i}.w1", m, h, False)
            _linear(out, f"{p}.{i}.w2", h, m, False)
            _linear(out, f"{p}.{i}.w3", m, h, False)
        else:
            _gated_mlp(out, f"{p}.{i}", h, m, False)


def _moe_block(out: list[TensorSpec], s: ModelSpec, p: str) -> None:
    """The sparse MLP of one layer, in each family's registration order."""
    h, e = s.hidden_size, s.num_experts
    fam = s.family
    if fam == "mixtral":
        if s.expert_layout == "fused":
            _linear(out, f"{p}.mlp.gate", e, h, False)
            _experts(out, s, f"{p}.mlp.experts")
        else:
            _linear(out, f"{p}.block_sparse_moe.gate", e, h, False)
            _experts(out, s, f"{p}.block_sparse_moe.experts", mixtral_v4=True)
    elif fam == "qwen2_moe":
        _linear(out, f"{p}.mlp.gate", e, h, False)
        _experts(out, s, f"{p}.mlp.experts")
        if s.shared_expert_intermediate_size:
            _gated_mlp(out, f"{p}.mlp.shared_expert", h, s.shared_expert_intermediate_size, False)
            _linear(out, f"{p}.mlp.shared_expert_gate", 1, h, False)
    elif fam == "qwen3_moe":
        if s.expert_layout == "fused":  # transformers 5: experts, then gate
            _experts(out, s, f"{p}.mlp.experts")
            _linear(out, f"{p}.mlp.gate", e, h, False)
        else:
            _linear(out, f"{p}.mlp.gate", e, h, False)
            _experts(out, s, f"{p}.mlp.experts")
    elif fam == "deepseek_v3":
        _experts(out, s, f"{p}.mlp.experts")
        _linear(out, f"{p}.mlp.gate", e, h, False)
        if s.router_score_bias:
            out.append(TensorSpec(f"{p}.mlp.gate.e_score_correction_bias", (e,), trainable=False))
        if s.num_shared_experts:
            _gated_mlp(out, f"{p}.mlp.shared_experts", h,
                       (s.moe_intermediate_size or s.intermediate_size) * s.num_shared_experts, False)
    else:  # pragma: no cover - validate_spec keeps dense families out
        raise ModelSpecError(f"{s.name}: family {fam} has no MoE block")


def _llama_like_layer(out: list[TensorSpec], s: ModelSpec, p: str, i: int) -> None:
    h = s.hidden_size
    _attention(out, s, f"{p}.self_attn")
    if s.is_moe and i >= s.first_dense_layers:
        _moe_block(out, s, p)
    elif s.family == "phi3":
        _linear(out, f"{p}.mlp.gate_up_proj", 2 * s.intermediate_size, h, s.mlp_bias)
        _linear(out, f"{p}.mlp.down_proj", h, s.intermediate_size, s.mlp_bias)
    else:
        _gated_mlp(out, f"{p}.mlp", h, s.intermediate_size, s.mlp_bias)
    ln = s.norm == "layernorm"
    _norm(out, f"{p}.input_layernorm", h, ln)
    _norm(out, f"{p}.post_attention_layernorm", h, ln)
    if s.sandwich_norm:
        _norm(out, f"{p}.pre_feedforward_layernorm", h, ln)
        _norm(out, f"{p}.post_feedforward_layernorm", h, ln)


def _repeat_layers(out: list[TensorSpec], build: "Callable[[list[TensorSpec], str], None]", prefixes: list[str]) -> None:
    """The tensors of identical layers, one per prefix in ``prefixes``: ``build(out, prefix)``
    runs once, for the first prefix, and the other layers are copies of its TensorSpecs with
    the prefix swapped (numel already computed). A 1e5-layer model has 9e5 tensors; building
    each through its helpers and dataclass __init__ took 14 s of CPU, copying them takes ~1 s.
    The copies equal what ``build`` would give (same fields; TensorSpec is frozen)."""
    if not prefixes:
        return
    first: list[TensorSpec] = []
    build(first, prefixes[0])
    p0 = prefixes[0]
    if not all(t.name.startswith(p0 + ".") for t in first):  # pragma: no cover - every layer helper prefixes
        for p in prefixes[1:]:
            build(first, p)
        out.extend(first)
        return
    out.extend(first)
    # TensorSpec has slots (no __dict__): each copy's slots are set through their descriptors,
    # the shape tuple and numel shared with the template; a copy is a LayerTensorSpec, its name
    # the layer's prefix and the template's suffix, joined when read (no name string per tensor)
    slots = [getattr(TensorSpec, f).__set__ for f in ("shape", "trainable", "group", "dtype", "numel")]
    set_prefix, set_suffix = LayerTensorSpec.prefix.__set__, LayerTensorSpec.suffix.__set__
    tmpl = [(t.name[len(p0):], [(st, getattr(t, f)) for st, f in
                                zip(slots, ("shape", "trainable", "group", "dtype", "numel"))]) for t in first]
    new = object.__new__
    append = out.append
    # No cyclic GC while the copies are made: they hold no cycles, and each collection would
    # walk the whole growing list (most of the time for 9e5 tensors went there).
    was = gc.isenabled()
    gc.disable()
    try:
        for p in prefixes[1:]:
            for suffix, d in tmpl:
                c = new(LayerTensorSpec)
                for st, v in d:
                    st(c, v)
                set_prefix(c, p)
                set_suffix(c, suffix)
                append(c)
    finally:
        if was:
            gc.enable()


def _gpt2_layer(out: list[TensorSpec], s: ModelSpec, p: str) -> None:
    h, m = s.hidden_size, s.intermediate_size
    _norm(out, f"{p}.ln_1", h, True)
    out += [TensorSpec(f"{p}.attn.c_attn.weight", (h, 3 * h)), TensorSpec(f"{p}.attn.c_attn.bias", (3 * h,)),
            TensorSpec(f"{p}.attn.c_proj.weight", (h, h)), TensorSpec(f"{p}.attn.c_proj.bias", (h,))]
    _norm(out, f"{p}.ln_2", h, True)
    out += [TensorSpec(f"{p}.mlp.c_fc.weight", (h, m)), TensorSpec(f"{p}.mlp.c_fc.bias", (m,)),
            TensorSpec(f"{p}.mlp.c_proj.weight", (m, h)), TensorSpec(f"{p}.mlp.c_proj.bias", (h,))]


def _bloom_layer(out: list[TensorSpec], s: ModelSpec, p: str) -> None:
    h = s.hidden_size
    _norm(out, f"{p}.input_layernorm", h, True)
    _linear(out, f"{p}.self_attention.query_key_value", 3 * h, h, True)
    _linear(out, f"{p}.self_attention.dense", h, h, True)
    _norm(out, f"{p}.post_attention_layernorm", h, True)
    _linear(out, f"{p}.mlp.dense_h_to_4h", s.intermediate_size, h, True)
    _linear(out, f"{p}.mlp.dense_4h_to_h", h, s.intermediate_size, True)


def _tensors(s: ModelSpec) -> list[TensorSpec]:
    h, v = s.hidden_size, s.vocab_size
    out: list[TensorSpec] = []
    if s.family == "gpt2":
        # GPT-2 uses Conv1D: weights are stored (in_features, out_features).
        out.append(TensorSpec("transformer.wte.weight", (v, h)))
        out.append(TensorSpec("transformer.wpe.weight", (s.max_seq_len, h)))
        _repeat_layers(out, lambda o, p: _gpt2_layer(o, s, p), [f"transformer.h.{i}" for i in range(s.num_layers)])
        _norm(out, "transformer.ln_f", h, True)
        if not s.tie_word_embeddings:
            out.append(TensorSpec("lm_head.weight", (v, h)))
        return out
    if s.family == "bloom":
        out.append(TensorSpec("transformer.word_embeddings.weight", (v, h)))
        _norm(out, "transformer.word_embeddings_layernorm", h, True)
        _repeat_layers(out, lambda o, p: _bloom_layer(o, s, p), [f"transformer.h.{i}" for i in range(s.num_layers)])
        _norm(out, "transformer.ln_f", h, True)
        if not s.tie_word_embeddings:
            out.append(TensorSpec("lm_head.weight", (v, h)))
        return out
    # Llama naming scheme
    ln = s.norm == "layernorm"
    out.append(TensorSpec("model.embed_tokens.weight", (v, h)))
    # Layers 0..first_dense_layers-1 are dense, the rest MoE (when the model is); within each
    # run every layer has the same tensors (_llama_like_layer depends on i only through that).
    split = min(s.first_dense_layers, s.num_layers) if s.is_moe else s.num_layers
    for lo, hi in ((0, split), (split, s.num_layers)):
        _repeat_layers(out, lambda o, p, i=lo: _llama_like_layer(o, s, p, i),
                       [f"model.layers.{i}" for i in range(lo, hi)])
    _norm(out, "model.norm", h, ln)
    if not s.tie_word_embeddings:
        out.append(TensorSpec("lm_head.weight", (v, h)))
    for j in range(s.mtp_layers):
        # DeepSeek-V3 MTP module, named as in the checkpoint (model.layers.61.*). Its embedding
        # and output head are shared with the main model, so they are not listed again.
        p = f"model.layers.{s.num_layers + j}"
        _norm(out, f"{p}.enorm", h, False)
        _norm(out, f"{p}.hnorm", h, False)
        _linear(out, f"{p}.eh_proj", h, 2 * h, False)
        _llama_like_layer(out, s, p, s.num_layers + j)
        _norm(out, f"{p}.shared_head.norm", h, False)
    return out


def _routed_expert_numel(s: ModelSpec) -> int:
    """Elements of one routed expert in one layer."""
    if not s.is_moe:
        return 0
    return 3 * s.hidden_size * (s.moe_intermediate_size or s.intermediate_size)


def active_param_count(spec: ModelSpec) -> int:
    """Parameters one token passes through (elements): all of them for a dense model; for a
    MoE model, everything except the routed experts it is not sent to (``num_experts -
    experts_per_token`` per MoE layer). Embedding and head are included."""
    total = expand(spec).numel
    moe_layers = spec.num_layers - spec.first_dense_layers + spec.mtp_layers if spec.is_moe else 0
    return total - moe_layers * (spec.num_experts - spec.experts_per_token) * _routed_expert_numel(spec)


def expand(spec: ModelSpec) -> Inventory:
    """The parameter inventory of ``spec``: one TensorSpec per ``named_parameters()`` entry of
    the Hugging Face model, same order, names and shapes (element counts, not bytes), all in
    optimizer group 0 and trainable (DeepSeek's router score bias excepted: frozen).

    ``meta`` carries the architecture (the spec's fields with defaults resolved, e.g.
    ``num_kv_heads`` and ``head_dim``) plus ``params`` (total elements) and, for MoE models,
    ``active_params`` (elements one token uses). Raises ModelSpecError on an inconsistent spec.
    """
    validate_spec(spec)
    tensors = _tensors(spec)
    meta: dict[str, Any] = {k: v for k, v in spec.to_dict().items() if k not in ("name", "description", "source")}
    meta["num_kv_heads"] = spec.kv_heads()
    if not spec.is_mla:
        meta["head_dim"] = spec.dim_per_head()
    total = sum(t.numel for t in tensors)
    meta["params"] = total
    if spec.is_moe:
        moe_layers = spec.num_layers - spec.first_dense_layers + spec.mtp_layers
        meta["active_params"] = total - moe_layers * (spec.num_experts - spec.experts_per_token) * _routed_expert_numel(spec)
    inv = Inventory(name=spec.name, tensors=tensors, source=spec.source or f"spec {spec.name}", meta=meta)
    _note_layer_repeat(inv, spec)
    return inv


def _note_layer_repeat(inv: Inventory, spec: ModelSpec) -> None:
    """Record in ``inv``'s memo what :func:`advisor.model.parallel.layer_repeat` and ``in_layer_flags``
    would find, as :func:`_tensors` built it: ``num_layers`` copies of one layer (:func:`_repeat_layers`)
    named ``model.layers.i`` / ``transformer.h.i``, between tensors outside any layer -- unless the model
    has two kinds of layer (MoE after ``first_dense_layers`` dense ones) or MTP layers after them. Saves
    their C-level scans of 9e5 names at 1e5 layers (~0.6 s, issue 21); tests/test_layer_repeat_identity.py
    checks the two against the scans for every preset and model family. The memo is per tensor list, so
    any later change to ``inv.tensors`` drops it."""
    from advisor.model.parallel import LayerRepeat
    L = spec.num_layers
    if L < 2 or spec.mtp_layers or (spec.is_moe and 0 < spec.first_dense_layers < L):
        return
    prefix = "transformer.h." if spec.family in ("gpt2", "bloom") else "model.layers."
    ts = inv.tensors
    head = next((i for i, t in enumerate(ts) if t.name.startswith(prefix + "0.")), None)
    if head is None:  # pragma: no cover - every family names its layers so
        return
    tail = next(i for i in range(len(ts) - 1, -1, -1) if ts[i].name.startswith(f"{prefix}{L - 1}.")) + 1
    unit, rest = divmod(tail - head, L)
    if rest:  # pragma: no cover - the layers are copies
        return
    rep = LayerRepeat(head, unit, L, prefix, 0)
    inv.memo(("layer_repeat",), lambda: rep)
    inv.memo(("in_layer_flags",), lambda: bytes(head) + b"\x01" * (tail - head) + bytes(len(ts) - tail))


# --------------------------------------------------------------------------------------------
# Hugging Face config.json
# --------------------------------------------------------------------------------------------

_MISSING = object()


def _get(cfg: dict, source: str, *keys: str, default: Any = _MISSING) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    if default is _MISSING:
        raise ModelSpecError(f"{source}: config.json ({cfg.get('model_type')}) has no {' / '.join(keys)}")
    return default


def unsupported_model_type(source: str, model_type: Any) -> str:
    """The one message for a config.json whose ``model_type`` has no built-in architecture:
    it names the built-in types (``ds-advisor models --types``) and the two ways on --
    ``--activations trace`` (transformers builds the model on fake tensors: parameters and
    activations measured) and ``--params N`` (model states only)."""
    return (f"{source}: unsupported model_type {model_type!r} (built in: {', '.join(FAMILIES)}; see "
            "`ds-advisor models --types`): give --activations trace to build it with transformers "
            "(needs the trace extra), or --params N for the model states only")


def _float(v: Any) -> float:
    """``float(v)`` of a config.json value (a dropout probability), where an integer past the float
    range is :func:`advisor.config.validation.float_of`'s largest float (``float()`` raised
    OverflowError: an internal error, issue 21), so the spec's own range check names it."""
    from advisor.config.validation import float_of
    f = float_of(v)
    return f if f is not None else float(v)


def checked_hf_dtype(cfg: dict, source: str) -> None:
    """Raise ModelSpecError (``FILE: /KEY: unknown dtype ... (one of torch's: ...)``) when the
    config.json's ``dtype`` (transformers >= 5) or ``torch_dtype`` is set and names no torch dtype
    (advisor.config.dtypes, the one table): from_pretrained would fail on it (``getattr(torch,
    name)``), and it was read as "no dtype", fp32, without a word (issue 21)."""
    from advisor.config.dtypes import dtype_problem
    for key in ("dtype", "torch_dtype"):
        v = cfg.get(key)
        if v is not None and (problem := dtype_problem(v)):
            raise ModelSpecError(f"{source}: /{key}: {problem}")


def spec_from_hf_config(cfg: Any, source: str = "config.json", name: str | None = None) -> ModelSpec:
    """A ModelSpec from a parsed Hugging Face ``config.json`` dict, using transformers' own
    defaults for keys the file leaves out. Raises ModelSpecError (naming ``source``, and a bad
    value by the key the file wrote: ``num_hidden_layers``, not the spec's ``num_layers``) for an
    unsupported ``model_type``, a missing size or a value :func:`validate_spec` refuses."""
    def _validated(spec: ModelSpec, names: dict[str, str]) -> ModelSpec:
        validate_spec(spec, source, names)
        return spec
    if not isinstance(cfg, dict):
        raise ModelSpecError(f"{source}: config.json must be a JSON object")
    checked_hf_dtype(cfg, source)
    mt = cfg.get("model_type")
    if mt not in FAMILIES:
        raise ModelSpecError(unsupported_model_type(source, mt))
    g = lambda *keys, default=_MISSING: _get(cfg, source, *keys, default=default)  # noqa: E731
    #: spec field -> the config.json key its value came from: a bad value is named as the file
    #: writes it (num_hidden_layers, n_layer), not as the spec field it fills (num_layers)
    names: dict[str, str] = {}

    def gf(field: str, *keys: str, default: Any = _MISSING) -> Any:
        """:func:`_get` for the spec field ``field``, recording which key gave it."""
        for k in keys:
            if k in cfg and cfg[k] is not None:
                names[field] = k
                break
        return _get(cfg, source, *keys, default=default)
    # named by what the file says (its hub id, else its architecture), else by the file itself:
    # the folder holding it is often just "models" or "config"
    arch = cfg.get("architectures")
    arch = ", ".join(map(str, arch)) if isinstance(arch, list) and arch else None
    nm = name or cfg.get("_name_or_path") or (f"{arch} ({source})" if arch else None) or source
    common: dict[str, Any] = dict(name=str(nm), family=mt, source=source)

    if mt == "gpt2":
        h = gf("hidden_size", "n_embd", "hidden_size")
        return _validated(ModelSpec(**common, num_layers=gf("num_layers", "n_layer", "num_hidden_layers"), hidden_size=h,
                         num_heads=gf("num_heads", "n_head", "num_attention_heads"),
                         intermediate_size=gf("intermediate_size", "n_inner", default=4 * h),
                         vocab_size=gf("vocab_size", "vocab_size", default=50257),
                         max_seq_len=gf("max_seq_len", "n_positions", "max_position_embeddings", default=1024),
                         tie_word_embeddings=gf("tie_word_embeddings", "tie_word_embeddings", default=True), norm="layernorm",
                         attention_qkv_bias=True, attention_out_bias=True, mlp_bias=True, mlp="plain",
                         activation=gf("activation", "activation_function", default="gelu_new"), position_embedding="learned",
                         # GPT2Config defaults: 0.1 each (transformers configuration_gpt2.py)
                         attention_dropout=_float(gf("attention_dropout", "attn_pdrop", default=0.1)),
                         residual_dropout=_float(gf("residual_dropout", "resid_pdrop", default=0.1)),
                         embedding_dropout=_float(gf("embedding_dropout", "embd_pdrop", default=0.1))), names)
    if mt == "bloom":
        h = g("hidden_size", "n_embed", default=64)
        return _validated(ModelSpec(**common, num_layers=gf("num_layers", "n_layer", "num_hidden_layers", default=2),
                                    hidden_size=h,
                         num_heads=gf("num_heads", "n_head", "num_attention_heads", default=8), intermediate_size=4 * h,
                         vocab_size=gf("vocab_size", "vocab_size", default=250880),
                         # ALiBi has no position table; BLOOM was trained on 2048-token sequences.
                         max_seq_len=gf("max_seq_len", "seq_length", "max_position_embeddings", default=2048),
                         tie_word_embeddings=gf("tie_word_embeddings", "tie_word_embeddings", default=True), norm="layernorm",
                         attention_qkv_bias=True, attention_out_bias=True, mlp_bias=True, mlp="plain",
                         activation="gelu", position_embedding="alibi", embedding_norm=True,
                         attention_dropout=_float(gf("attention_dropout", "attention_dropout", default=0.0)),
                         residual_dropout=_float(gf("residual_dropout", "hidden_dropout", default=0.0))), names)

    heads = gf("num_heads", "num_attention_heads")
    base: dict[str, Any] = dict(
        **common,
        num_layers=gf("num_layers", "num_hidden_layers"), hidden_size=gf("hidden_size", "hidden_size"),
        num_heads=heads,
        num_kv_heads=gf("num_kv_heads", "num_key_value_heads", default=heads),
        intermediate_size=gf("intermediate_size", "intermediate_size"), vocab_size=gf("vocab_size", "vocab_size"),
        max_seq_len=gf("max_seq_len", "max_position_embeddings"),
        activation=gf("activation", "hidden_activation", "hidden_act", default="silu"),
        head_dim=gf("head_dim", "head_dim", default=None),
        tie_word_embeddings=gf("tie_word_embeddings", "tie_word_embeddings", default=mt in ("gemma", "gemma2")),
        attention_dropout=_float(gf("attention_dropout", "attention_dropout", default=0.0)),
    )
    if mt == "phi3":
        # Phi3DecoderLayer's resid_attn_dropout / resid_mlp_dropout; Phi3Config still reads
        # embd_pdrop, but Phi3Model (transformers 5 modeling_phi3.py) applies no embedding
        # dropout: the embedding output goes straight to the layers, no mask kept
        base.update(residual_dropout=_float(gf("residual_dropout", "resid_pdrop", default=0.0)))
    attn_bias = bool(g("attention_bias", default=False))
    if mt in ("llama", "gemma", "gemma2", "qwen3", "qwen3_moe"):
        base.update(attention_qkv_bias=attn_bias, attention_out_bias=attn_bias)
    if mt == "llama":
        base["mlp_bias"] = bool(g("mlp_bias", default=False))
    if mt in ("qwen2", "qwen2_moe"):
        base.update(attention_qkv_bias=True)  # Qwen2: q/k/v always biased, o_proj not
    if mt in ("qwen3", "qwen3_moe"):
        base.update(qk_norm=True, head_dim=gf("head_dim", "head_dim", default=128))
    if mt in ("gemma", "gemma2"):
        base.update(head_dim=gf("head_dim", "head_dim", default=256))
        if mt == "gemma2":
            base["sandwich_norm"] = True
    if mt == "mixtral":
        base.update(num_experts=gf("num_experts", "num_local_experts", default=8),
                    experts_per_token=gf("experts_per_token", "num_experts_per_tok", default=2))
    if mt in ("qwen2_moe", "qwen3_moe"):
        if g("mlp_only_layers", default=[]) or g("decoder_sparse_step", default=1) != 1:
            raise ModelSpecError(f"{source}: {mt} with mlp_only_layers or decoder_sparse_step != 1 is not supported")
        base.update(num_experts=gf("num_experts", "num_experts"),
                    experts_per_token=gf("experts_per_token", "num_experts_per_tok"),
                    moe_intermediate_size=gf("moe_intermediate_size", "moe_intermediate_size"))
        if mt == "qwen2_moe":
            sh = g("shared_expert_intermediate_size", default=0)
            base.update(shared_expert_intermediate_size=sh or None, num_shared_experts=1 if sh else 0)
    if mt == "deepseek_v3":
        if g("moe_layer_freq", default=1) != 1:
            raise ModelSpecError(f"{source}: deepseek_v3 with moe_layer_freq != 1 is not supported")
        base.update(num_experts=gf("num_experts", "n_routed_experts"), experts_per_token=gf("experts_per_token", "num_experts_per_tok"),
                    moe_intermediate_size=gf("moe_intermediate_size", "moe_intermediate_size"),
                    num_shared_experts=gf("num_shared_experts", "n_shared_experts", default=0),
                    first_dense_layers=gf("first_dense_layers", "first_k_dense_replace", default=0),
                    router_score_bias=gf("router_score_bias", "topk_method", default="noaux_tc") == "noaux_tc",
                    q_lora_rank=gf("q_lora_rank", "q_lora_rank", default=None), kv_lora_rank=gf("kv_lora_rank", "kv_lora_rank"),
                    qk_nope_head_dim=gf("qk_nope_head_dim", "qk_nope_head_dim"), qk_rope_head_dim=gf("qk_rope_head_dim", "qk_rope_head_dim"),
                    v_head_dim=gf("v_head_dim", "v_head_dim"), head_dim=None,
                    attention_qkv_bias=attn_bias, attention_out_bias=attn_bias)
    return _validated(ModelSpec(**base), names)


# --------------------------------------------------------------------------------------------
# presets
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Preset:
    name: str
    repo: str           # Hugging Face repo whose config.json the fields below are copied from
    description: str
    #: the shape-relevant fields of that config.json, verbatim, and its torch_dtype (the dtype
    #: from_pretrained loads in by default, dtype="auto": the load phase under --hf); gpt2 and
    #: bloom's configs are left without one (gpt2's config.json names none: fp32, as stored)
    config: dict
    aliases: tuple[str, ...] = ()


def _llama(h: int, inter: int, layers: int, heads: int, kv: int, vocab: int, max_pos: int, **kw: Any) -> dict:
    return {"model_type": "llama", "hidden_size": h, "intermediate_size": inter, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": vocab,
            "max_position_embeddings": max_pos, "tie_word_embeddings": False, **kw}


def _qwen2(h: int, inter: int, layers: int, heads: int, kv: int) -> dict:
    return {"model_type": "qwen2", "hidden_size": h, "intermediate_size": inter, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": 152064,
            "max_position_embeddings": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


_PRESETS: tuple[_Preset, ...] = (
    # https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json
    _Preset("llama-2-7b", "meta-llama/Llama-2-7b-hf", "Llama 2 7B (MHA, 4k context)",
            _llama(4096, 11008, 32, 32, 32, 32000, 4096, torch_dtype="float16"), ("llama2-7b",)),
    # https://huggingface.co/meta-llama/Llama-2-13b-hf/blob/main/config.json
    _Preset("llama-2-13b", "meta-llama/Llama-2-13b-hf", "Llama 2 13B (MHA, 4k context)",
            _llama(5120, 13824, 40, 40, 40, 32000, 4096, torch_dtype="float16"), ("llama2-13b",)),
    # https://huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json
    _Preset("llama-2-70b", "meta-llama/Llama-2-70b-hf", "Llama 2 70B (GQA 8 KV heads, 4k context)",
            _llama(8192, 28672, 80, 64, 8, 32000, 4096, torch_dtype="float16"), ("llama2-70b",)),
    # https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json
    _Preset("llama-3-8b", "meta-llama/Meta-Llama-3-8B", "Llama 3 8B (GQA, 128k vocab, 8k context)",
            _llama(4096, 14336, 32, 32, 8, 128256, 8192, rope_theta=500000.0, torch_dtype="bfloat16"), ("llama3-8b",)),
    # https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json
    _Preset("llama-3-70b", "meta-llama/Meta-Llama-3-70B", "Llama 3 70B (GQA, 128k vocab, 8k context)",
            _llama(8192, 28672, 80, 64, 8, 128256, 8192, rope_theta=500000.0, torch_dtype="bfloat16"), ("llama3-70b",)),
    # https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
    _Preset("llama-3.1-8b", "meta-llama/Llama-3.1-8B", "Llama 3.1 8B (GQA, 128k context)",
            _llama(4096, 14336, 32, 32, 8, 128256, 131072, rope_theta=500000.0, torch_dtype="bfloat16"),
            ("llama3.1-8b", "meta-llama-3.1-8b")),
    # https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json
    _Preset("llama-3.1-70b", "meta-llama/Llama-3.1-70B", "Llama 3.1 70B (GQA, 128k context)",
            _llama(8192, 28672, 80, 64, 8, 128256, 131072, rope_theta=500000.0, torch_dtype="bfloat16"),
            ("llama3.1-70b", "meta-llama-3.1-70b")),
    # https://huggingface.co/meta-llama/Llama-3.1-405B/blob/main/config.json
    _Preset("llama-3.1-405b", "meta-llama/Llama-3.1-405B", "Llama 3.1 405B (GQA, 128k context)",
            _llama(16384, 53248, 126, 128, 8, 128256, 131072, rope_theta=500000.0, torch_dtype="bfloat16"),
            ("llama3.1-405b", "meta-llama-3.1-405b")),
    # https://huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json
    _Preset("llama-3.2-1b", "meta-llama/Llama-3.2-1B", "Llama 3.2 1B (GQA, tied embeddings)",
            _llama(2048, 8192, 16, 32, 8, 128256, 131072, head_dim=64, tie_word_embeddings=True,
                   rope_theta=500000.0, torch_dtype="bfloat16"), ("llama3.2-1b",)),
    # https://huggingface.co/meta-llama/Llama-3.2-3B/blob/main/config.json
    _Preset("llama-3.2-3b", "meta-llama/Llama-3.2-3B", "Llama 3.2 3B (GQA, tied embeddings)",
            _llama(3072, 8192, 28, 24, 8, 128256, 131072, head_dim=128, tie_word_embeddings=True,
                   rope_theta=500000.0, torch_dtype="bfloat16"), ("llama3.2-3b",)),
    # https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json
    _Preset("mistral-7b", "mistralai/Mistral-7B-v0.1", "Mistral 7B v0.1 (GQA, sliding window 4096)",
            {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
             "max_position_embeddings": 32768, "sliding_window": 4096, "tie_word_embeddings": False,
             "torch_dtype": "bfloat16"},
            ("mistral-7b-v0.1",)),
    # https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
    _Preset("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", "Mixtral 8x7B (MoE: 8 experts, 2 per token)",
            {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
             "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2,
             "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
            ("mixtral-8x7b-v0.1",)),
    # https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json
    _Preset("qwen2.5-7b", "Qwen/Qwen2.5-7B", "Qwen2.5 7B (GQA 4 KV heads, qkv bias)", _qwen2(3584, 18944, 28, 28, 4)),
    # https://huggingface.co/Qwen/Qwen2.5-32B/blob/main/config.json
    _Preset("qwen2.5-32b", "Qwen/Qwen2.5-32B", "Qwen2.5 32B (GQA 8 KV heads, qkv bias)", _qwen2(5120, 27648, 64, 40, 8)),
    # https://huggingface.co/Qwen/Qwen2.5-72B/blob/main/config.json
    _Preset("qwen2.5-72b", "Qwen/Qwen2.5-72B", "Qwen2.5 72B (GQA 8 KV heads, qkv bias)", _qwen2(8192, 29568, 80, 64, 8)),
    # https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json
    _Preset("qwen3-8b", "Qwen/Qwen3-8B", "Qwen3 8B (GQA, QK-norm)",
            {"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
             "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
             "max_position_embeddings": 40960, "attention_bias": False, "tie_word_embeddings": False,
             "torch_dtype": "bfloat16"}),
    # https://huggingface.co/google/gemma-7b/blob/main/config.json (tied: the GemmaConfig default)
    _Preset("gemma-7b", "google/gemma-7b", "Gemma 7B (MHA, head_dim 256, tied embeddings)",
            {"model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
             "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "vocab_size": 256000,
             "max_position_embeddings": 8192, "hidden_activation": "gelu_pytorch_tanh", "torch_dtype": "bfloat16"}),
    # https://huggingface.co/google/gemma-2-9b/blob/main/config.json (tie_word_embeddings: the
    # Gemma2Config default, true; head_dim 256 != hidden_size / heads; the base checkpoint is stored
    # in float32, torch_dtype "float32", unlike gemma-2-9b-it's bfloat16)
    _Preset("gemma-2-9b", "google/gemma-2-9b", "Gemma 2 9B (tied embeddings, 4 norms per layer)",
            {"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
             "max_position_embeddings": 8192, "attention_bias": False,
             "hidden_activation": "gelu_pytorch_tanh", "torch_dtype": "float32"}),
    # https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json
    _Preset("phi-3-mini", "microsoft/Phi-3-mini-4k-instruct", "Phi-3 mini 4k (fused qkv and gate_up)",
            {"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064,
             "max_position_embeddings": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
            ("phi-3-mini-4k",)),
    # https://huggingface.co/openai-community/gpt2/blob/main/config.json
    _Preset("gpt2", "openai-community/gpt2", "GPT-2 small 124M (learned positions, tied head)",
            {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None,
             "n_positions": 1024, "vocab_size": 50257}, ("gpt2-small",)),
    # https://huggingface.co/bigscience/bloom/blob/main/config.json (no seq_length key: ALiBi;
    # 2048 is the training sequence length from the BLOOM paper)
    _Preset("bloom-176b", "bigscience/bloom", "BLOOM 176B (ALiBi, LayerNorm with bias, tied head)",
            {"model_type": "bloom", "hidden_size": 14336, "n_layer": 70, "n_head": 112, "vocab_size": 250880,
             "seq_length": 2048}, ("bloom",)),
    # https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json
    # Main model only (61 layers): transformers does not build the MTP module (config
    # num_nextn_predict_layers: 1, checkpoint layer 61); use spec mtp_layers=1 to add it.
    # torch_dtype "bfloat16" as the config writes it; the stored weights are fp8 with block scales
    # (its quantization_config, not copied: the load dtypes here are fp32/fp16/bf16), so the
    # checkpoint's bytes at load are about half what bf16 gives.
    _Preset("deepseek-v3", "deepseek-ai/DeepSeek-V3", "DeepSeek-V3 671B (MLA, MoE 256 routed + 1 shared, 8 per token)",
            {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
             "moe_intermediate_size": 2048, "num_hidden_layers": 61, "first_k_dense_replace": 3,
             "moe_layer_freq": 1, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
             "num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
             "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
             "max_position_embeddings": 163840, "num_nextn_predict_layers": 1, "topk_method": "noaux_tc",
             "attention_bias": False, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
            ("deepseek-v3-base",)),
)


def _norm_key(name: str) -> str:
    return name.strip().lower()


_INDEX: dict[str, _Preset] | None = None


def _index() -> dict[str, _Preset]:
    global _INDEX
    if _INDEX is None:
        idx: dict[str, _Preset] = {}
        for p in _PRESETS:
            for k in (p.name, p.repo, p.repo.split("/")[-1], *p.aliases):
                idx.setdefault(_norm_key(k), p)
        _INDEX = idx
    return _INDEX


def preset_names() -> list[str]:
    """Canonical preset names, in listing order."""
    return [p.name for p in _PRESETS]


def get_preset(name: str) -> ModelSpec:
    """The ModelSpec of a preset (case-insensitive; the HF repo id or its last part works too).
    Raises ModelSpecError with a did-you-mean suggestion for an unknown name."""
    p = _index().get(_norm_key(name))
    if p is None:
        # a name far longer than any preset's is near none of them (and difflib would compare it whole)
        close = difflib.get_close_matches(_norm_key(name), preset_names(), n=3, cutoff=0.5) if len(name) < 200 else []
        hint = f"; did you mean {' or '.join(close)}?" if close else f"; see `ds-advisor models` ({len(_PRESETS)} presets)"
        raise ModelSpecError(f"unknown model preset {shown(name)}{hint}")
    spec = spec_from_hf_config(p.config, source=f"preset {p.name} (https://huggingface.co/{p.repo} config.json)",
                               name=p.name)
    return replace(spec, description=p.description)


def preset_inventory(name: str) -> Inventory:
    """The inventory of a preset, carrying its config.json fields (for the trace)."""
    inv = expand(get_preset(name))
    inv.hf_config = dict(_index()[_norm_key(name)].config)
    return inv


def list_presets() -> list[tuple[str, int, str, str]]:
    """``(name, parameters, family, description)`` for every preset; parameters in elements
    (all ``named_parameters`` of the HF model, embedding counted once when tied)."""
    rows = []
    for p in _PRESETS:
        spec = get_preset(p.name)
        rows.append((p.name, expand(spec).numel, spec.family, p.description))
    return rows


# --------------------------------------------------------------------------------------------
# resolve
# --------------------------------------------------------------------------------------------

def _read_json(path: str, architecture: bool = False) -> Any:
    """A model file through the guarded reader (regular files only, size and depth bounded,
    finite numbers); ModelSpecError with one line ``file:line:col: problem``. An inventory
    listing more than MAX_TENSORS tensors is refused before it is parsed into objects.

    An inventory whose tensors list ``inventory.chunked_text`` reads run by run comes back built (an
    Inventory, its meta checked), so the whole list's dicts are never alive at once (issue 21); not with
    ``architecture`` (generate: its refusals read the meta and the list's length first). Anything else,
    and any inventory the chunked read declines, is the whole parse's dict."""
    from advisor.config.readers import MAX_MODEL_BYTES, error_as, gc_paused, parse_json, read_text
    from advisor.model.inventory import chunked_text, refuse_over_limit
    error = error_as(ModelSpecError)
    text = read_text(path, limit=MAX_MODEL_BYTES, what="model file", error=error)
    source = "<stdin>" if path == "-" else path
    refuse_over_limit(text, path)  # an inventory over MAX_TENSORS, before its objects are built
    # generate (``architecture``) refuses on the meta and on the list's length before any entry is parsed
    # (resolve_model): the whole parse's path, as before
    chunked = None if architecture else chunked_text(text)
    if chunked is not None:
        with gc_paused():  # a million TensorSpecs, no cycles (see gc_paused)
            inv = chunked.build(path)
        if inv is not None:
            inv.meta = checked_meta(inv.meta, path)
            return inv
        del chunked
    return parse_json(text, source, what="model file", error=error)


def _architecture_problem(d: dict, path: str) -> str | None:
    """:func:`architecture_missing` of an inventory's JSON form ``d`` (a null field is a missing one:
    checked_meta drops it before search reads the meta)."""
    meta = d.get("meta")
    known = {k: v for k, v in meta.items() if v is not None} if isinstance(meta, dict) else {}
    return architecture_missing(known, str(d.get("name", os.path.basename(path))))


#: The architecture facts generate's search needs of a model (``advisor.views.generate.search``), checked on an
#: inventory file's meta before its tensors are built when :func:`resolve_model` is asked (``architecture``).
ARCHITECTURE_KEYS = ("hidden_size", "num_layers", "num_heads", "intermediate_size", "vocab_size")


def architecture_missing(meta: dict[str, Any], name: str) -> str | None:
    """The message for a model whose ``meta`` lacks a key of :data:`ARCHITECTURE_KEYS`, naming the model
    ``name`` and the first such key; None when none is missing."""
    k = next((k for k in ARCHITECTURE_KEYS if k not in meta), None)
    return None if k is None else (f"model {name}: generate needs the architecture ({k} missing): give a preset "
                                   "or a Hugging Face config.json, not a bare parameter count")


def resolve_model(spec: str, build_unknown: Any = None, flag: str | None = "--model",
                  architecture: bool = False) -> Inventory:
    """``--model``: a preset name, a local HF ``config.json`` (or a folder holding one), an
    inventory JSON (has ``tensors``) or a model spec JSON (has ``family``) -> Inventory.
    ``build_unknown(config_dict, path)``: called for a config.json whose model_type is not
    built in (``--activations trace``: :func:`advisor.engine.trace.inventory_from_hf_config`).

    ``architecture``: an inventory file whose meta lacks what generate needs (:func:`architecture_missing`), or
    that lists more tensors than generate's limit (``advisor.config.validation.MAX_GENERATE_TENSORS``), is
    refused before its tensors are built (2M tensors took ~5.5 s and 650 MB to be refused after; issue 21).

    Files are told apart by content, not by name. Raises ModelSpecError (one line naming the
    file or preset and the problem; a name that is neither a file nor a preset is named with
    ``flag``, where it was given: ``--model``, or None for a settings file's ``model``, which its
    caller names)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ModelSpecError("--model needs a preset name or a file path")
    path = spec
    if os.path.isdir(path):
        from advisor.config.readers import error_as, regular_file_at
        cand = os.path.join(path, "config.json")
        # a FIFO, device or folder named config.json is refused as not a regular file (from stat,
        # never opened), not called missing
        there = regular_file_at(cand, what="model config.json", error=error_as(ModelSpecError))
        if not there and _norm_key(spec) in _index():
            return preset_inventory(spec)  # a folder that happens to share a preset's name
        if not there:
            raise ModelSpecError(f"{path}: a folder given as --model must hold a config.json")
        path = cand
    if os.path.lexists(path) and not os.path.isdir(path):
        d = _read_json(path, architecture)
        if isinstance(d, Inventory):
            return d
        if isinstance(d, dict) and "tensors" in d:
            from advisor.config.readers import gc_paused
            ts = d["tensors"]
            # a tensors value that is not a non-empty list of objects is the file's real defect: from_dict names
            # it (/tensors or /tensors/i, what was found) before generate asks for the architecture
            if architecture and isinstance(ts, list) and ts and all(isinstance(t, dict) for t in ts):
                # then generate's own work limit, from the list's length before its entries become objects
                from advisor.config.validation import generate_tensors_problem
                problem = _architecture_problem(d, path) or generate_tensors_problem(len(ts), path)
                if problem:
                    raise ModelSpecError(problem)
            del ts
            with gc_paused():  # a million TensorSpecs, no cycles (see gc_paused)
                inv = from_dict(d, path, consume=True)  # d's tensors are not read again
            inv.meta = checked_meta(inv.meta, path)
            return inv
        if isinstance(d, dict) and "model_type" in d:
            checked_hf_dtype(d, path)
            if build_unknown is not None and d.get("model_type") not in FAMILIES:
                return build_unknown(d, path)
            s = spec_from_hf_config(d, source=path)
            inv = expand(s)
            inv.hf_config = dict(d)
            return inv
        if isinstance(d, dict) and "family" in d:
            return expand(ModelSpec.from_dict(d, source=path))
        if not isinstance(d, dict):  # what was found, in JSON's words (validation.json_kind)
            from advisor.config.validation import json_kind
            raise ModelSpecError(f"{path}: expected an object (a Hugging Face config.json, an inventory with "
                                 f"tensors or a model spec with family), got {json_kind(d)}")
        raise ModelSpecError(f"{path}: not a Hugging Face config.json (no model_type), an inventory "
                             "(no tensors) or a model spec (no family)")
    if _norm_key(spec) in _index():
        return preset_inventory(spec)
    named = f"{flag}: " if flag else ""
    if os.sep in spec or spec.lower().endswith(".json"):
        raise ModelSpecError(f"{named}{cut(spec)}: no such file (and not a model preset)")
    try:
        return preset_inventory(spec)
    except ModelSpecError as e:  # an unknown preset: say where the name came from
        raise ModelSpecError(f"{named}{e}") from None
