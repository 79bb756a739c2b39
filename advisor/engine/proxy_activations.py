"""Engine-side check of the activation formulas: a plain-torch Llama-style proxy whose
blocks are written as Hugging Face transformers writes them (``LlamaRMSNorm``, RoPE,
``repeat_kv`` + eager softmax in fp32, or ``scaled_dot_product_attention``, SwiGLU MLP,
lm_head with the fp32-upcast cross-entropy of ``ForCausalLMLoss``), and a counter of the bytes
autograd saves for backward (``torch.autograd.graph.saved_tensors_hooks``, de-duplicated by
storage, parameters excluded).

Imports torch lazily: only the engine-backed tests and ``measure`` use this module.
"""

from __future__ import annotations

import math
from typing import Any


def _build(meta: dict[str, Any], dtype: Any):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    h, a = int(meta["hidden_size"]), int(meta["num_heads"])
    kv = int(meta.get("num_kv_heads") or a)
    d = int(meta.get("head_dim") or h // a)
    f, V, L = int(meta["intermediate_size"]), int(meta["vocab_size"]), int(meta["num_layers"])

    class RMSNorm(nn.Module):  # transformers LlamaRMSNorm
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(h))

        def forward(self, x):
            in_dtype = x.dtype
            x = x.to(torch.float32)
            var = x.pow(2).mean(-1, keepdim=True)
            x = x * torch.rsqrt(var + 1e-6)
            return self.weight * x.to(in_dtype)

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def repeat_kv(x, n):
        if n == 1:
            return x
        bb, k, s, dd = x.shape
        return x[:, :, None, :, :].expand(bb, k, n, s, dd).reshape(bb, k * n, s, dd)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = RMSNorm(), RMSNorm()
            self.q_proj = nn.Linear(h, a * d, bias=False)
            self.k_proj = nn.Linear(h, kv * d, bias=False)
            self.v_proj = nn.Linear(h, kv * d, bias=False)
            self.o_proj = nn.Linear(a * d, h, bias=False)
            self.gate_proj = nn.Linear(h, f, bias=False)
            self.up_proj = nn.Linear(h, f, bias=False)
            self.down_proj = nn.Linear(f, h, bias=False)
            self.attention = "flash"

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            res = x
            y = self.input_layernorm(x)
            q = self.q_proj(y).view(b, s, a, d).transpose(1, 2)
            k = self.k_proj(y).view(b, s, kv, d).transpose(1, 2)
            v = self.v_proj(y).view(b, s, kv, d).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if self.attention == "flash":
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != a)
            else:
                k2, v2 = repeat_kv(k, a // kv), repeat_kv(v, a // kv)
                w = torch.matmul(q, k2.transpose(2, 3)) * (1.0 / math.sqrt(d))
                mask = torch.full((s, s), float("-inf"), dtype=w.dtype).triu(1)
                w = torch.softmax(w + mask, dim=-1, dtype=torch.float32).to(q.dtype)
                o = torch.matmul(w, v2)
            o = o.transpose(1, 2).reshape(b, s, a * d)
            x = res + self.o_proj(o)
            y = self.post_attention_layernorm(x)
            return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(V, h)
            self.layers = nn.ModuleList(Layer() for _ in range(L))
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(h, V, bias=False)
            self.checkpointing = False

        def forward(self, ids, labels):
            b, s = ids.shape
            pos = torch.arange(s, dtype=torch.float32)[:, None] / (10000 ** (torch.arange(0, d, 2) / d))[None]
            emb = torch.cat((pos, pos), dim=-1)
            cos, sin = emb.cos().to(dtype)[None, None], emb.sin().to(dtype)[None, None]
            x = self.embed_tokens(ids)
            for layer in self.layers:
                x = checkpoint(layer, x, cos, sin, use_reentrant=True) if self.checkpointing else layer(x, cos, sin)
            logits = self.lm_head(self.norm(x))
            loss = F.cross_entropy(logits.float().view(-1, V), labels.view(-1))  # ForCausalLMLoss upcast
            return loss, logits

    return Model().to(dtype)


def measure_saved_bytes(meta: dict[str, Any], seq_len: int, micro_batch: int, attention: str = "flash",
                        checkpointing: str = "none", dtype: str = "bf16", seed: int = 0) -> dict[str, int]:
    """Run one forward of the proxy and count what autograd holds for backward (bytes).

    Returns {"saved": bytes saved by autograd (unique storages, parameters excluded),
    "logits": bytes of the 16-bit logits returned, "total": saved + logits,
    "per_layer": one layer's saved bytes without checkpointing (measured on layer 0)}.
    """
    import torch

    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    torch.manual_seed(seed)
    model = _build(meta, tdt)
    for layer in model.layers:
        layer.attention = attention
    model.checkpointing = checkpointing == "full"
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    ids = torch.randint(0, int(meta["vocab_size"]), (micro_batch, seq_len))
    labels = torch.randint(0, int(meta["vocab_size"]), (micro_batch, seq_len))

    def count(fn):
        seen: dict[int, int] = {}

        def pack(t):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in params and ptr != 0:
                seen[ptr] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = fn()
        return sum(seen.values()), out

    saved, (loss, logits) = count(lambda: model(ids, labels))
    loss.backward()
    # one layer alone, no checkpointing, on a fresh input that requires grad
    layer0 = model.layers[0]
    x = torch.randn(micro_batch, seq_len, int(meta["hidden_size"]), dtype=tdt, requires_grad=True)
    d = int(meta.get("head_dim") or int(meta["hidden_size"]) // int(meta["num_heads"]))
    cos = torch.ones(1, 1, seq_len, d, dtype=tdt)
    sin = torch.zeros(1, 1, seq_len, d, dtype=tdt)
    per_layer, _ = count(lambda: layer0(x, cos, sin))
    logits_b = logits.untyped_storage().nbytes()
    return {"saved": saved, "logits": logits_b, "total": saved + logits_b, "per_layer": per_layer}
