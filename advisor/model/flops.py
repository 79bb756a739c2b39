"""FLOPs per token of one training step of a decoder transformer, and what activation
recomputation adds to them: the one place these counts live (the step time,
:mod:`advisor.ledger.steptime`, generate's layout bound and the activations' recompute fraction,
:mod:`advisor.model.activations`, read them).

Per token, forward + backward (Kaplan et al. 2020, "Scaling Laws for Neural Language Models",
s.2.1: 2 N forward, 4 N backward):

    step = 6 x N_active + A

with N_active the parameters one token uses (the inventory's numel; a MoE model's active
parameters) and A the attention scores and weighted values that 6 N does not count
(:func:`attention_flops_per_token`: 6 x L x s x a x (d_qk + d_v), PaLM's 12 L H Q T; forward
A / 3, backward 2 A / 3).

Recomputation runs a forward again in backward (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", arXiv:2205.05198):

* **full** (every layer checkpointed): one more forward of the layers, 2 x N_layers + A / 3 per
  token, N_layers = N_active less the parameters outside the decoder layers (embeddings, final
  norm, output head: the layer checkpoints do not recompute them). For a model that is all layers
  this is the paper's 8 N against 6 N: the step grows by 4/3 exactly (its 96 B s l h^2 (1 + s/6h)
  against 72 B s l h^2 (1 + s/6h), the logit term aside);
* **k of L layers**: k / L_rank of that (Megatron's block method: whole layers);
* **selective** (the attention core of every layer: QK^T, softmax, dropout, the product with V):
  one forward of the core, A / 3 per token, i.e. 2 x s x a x (d_qk + d_v) per layer, 4 s h with
  d_qk = d_v = h / a: the core's two matmuls, 2 B s^2 h each per layer forward (Narayanan et
  al. 2021, arXiv:2104.04473, the 4 B s^2 h of a layer's 24 B s h^2 + 4 B s^2 h forward). The
  paper's section 5 defines what selective recomputes; this count of its cost is ours.

No torch or deepspeed import.
"""

from __future__ import annotations

from typing import Any

#: The forward's share of a matmul's forward + backward FLOPs (2 of 6 per parameter and token).
FORWARD_SHARE = 2 / 6


def attention_flops_per_token(meta: dict[str, Any] | None, seq_len: int) -> float:
    """Forward + backward FLOPs per token of the attention scores (Q K^T) and the weighted values
    (softmax x V) at sequence length ``seq_len``, over all layers: 6 x L x s x a x (d_qk + d_v),
    i.e. forward 2 x s x a x d_qk + 2 x s x a x d_v per layer, backward twice that. With
    d_v = d_qk = Q this is PaLM's 12 x L x H x Q x T (Chowdhery et al. 2022, "PaLM", Appendix B:
    6N + 12LHQT FLOPs per token), and with H x Q = h Megatron-LM's attention term 12 x l x s x h
    per token (Narayanan et al. SC'21 s.5.1 eq. 3: 72 B s l h^2 x s/(6h) per batch). Full s x s
    scores as both formulas count them: no causal halving, no sliding window. ``meta`` gives
    num_layers, num_heads, hidden_size (head_dim = hidden / heads and v_head_dim = head_dim by
    default, as transformers' configs). 0.0 when any of the three is missing (no architecture)."""
    meta = meta or {}
    try:
        L, a, h = int(meta["num_layers"]), int(meta["num_heads"]), int(meta["hidden_size"])
    except (KeyError, TypeError, ValueError):
        return 0.0
    d = int(meta.get("head_dim") or h // a)
    dv = int(meta.get("v_head_dim") or d)
    return 6.0 * L * seq_len * a * (d + dv)


def active_params(inventory: Any) -> int:
    """N_active: the parameters one token uses (``meta["active_params"]`` of a MoE preset, else
    every element of the inventory)."""
    return int((inventory.meta or {}).get("active_params") or inventory.numel)


def outside_layer_params(inventory: Any) -> int:
    """Elements of the tensors outside the decoder layers (no ``layers.i.`` / ``h.i.`` /
    ``blocks.i.`` in the name: embeddings, final norm, output head), which layer checkpointing
    never recomputes. Memoised per tensor list (:meth:`Inventory.memo`). 0 when no tensor is in a
    layer (a ``--params`` inventory): the whole model is then counted as layers."""
    import itertools
    import operator

    from advisor.model.parallel import in_layer_flags

    def count() -> int:
        numels = list(map(operator.attrgetter("numel"), inventory.tensors))
        inside = sum(itertools.compress(numels, in_layer_flags(inventory)))
        return sum(numels) - inside if inside else 0

    return inventory.memo(("outside_layer_params",), count)


def step_flops_per_token(meta: dict[str, Any] | None, seq_len: int, n_active: float) -> float:
    """6 x N_active + A (:func:`attention_flops_per_token`): forward + backward FLOPs per token
    without recomputation (Kaplan et al. 2020 s.2.1; PaLM Appendix B)."""
    return 6.0 * n_active + attention_flops_per_token(meta, seq_len)


def recompute_flops_per_token(meta: dict[str, Any] | None, seq_len: int, mode: str, share: float,
                              n_active: float, n_outside: float = 0.0) -> float:
    """Extra forward FLOPs per token that recomputation adds (module docstring): ``mode`` "full"
    or "layers": ``share`` (checkpointed layers / the rank's layers) x (2 x (N_active -
    N_outside) + A / 3); "selective": A / 3, one forward of every layer's attention core; else 0.
    ``n_outside``: :func:`outside_layer_params` (0: all parameters are in layers, the paper's
    2 N)."""
    attn_fwd = attention_flops_per_token(meta, seq_len) * FORWARD_SHARE
    if mode in ("full", "layers"):
        return share * (2.0 * max(0.0, n_active - n_outside) + attn_fwd)
    if mode == "selective":
        return attn_fwd
    return 0.0


def recompute_fraction(meta: dict[str, Any] | None, seq_len: int, mode: str, share: float,
                       n_active: float, n_outside: float = 0.0) -> float:
    """:func:`recompute_flops_per_token` over :func:`step_flops_per_token`: the recompute as a
    fraction of the step's FLOPs without it (0.0 when the step has none)."""
    step = step_flops_per_token(meta, seq_len, n_active)
    return recompute_flops_per_token(meta, seq_len, mode, share, n_active, n_outside) / step if step else 0.0
