"""G005 ulysses-heads: a DeepSpeed-Ulysses degree that does not divide the attention heads.

What DeepSpeed does: Ulysses (``sequence_parallel_size`` U) swaps the sequence split for a head
split around attention with an all-to-all, so every rank of the group gets heads / U whole heads.

* ``runtime/sequence_parallel/ulysses_sp.py`` ``UlyssesSPAttentionHF.__init__`` (the
  HF / ALST integration, what DeepSpeed's own ``sequence_parallel_size`` groups run), l. 147:
  ``raise ValueError(f"Attention head count {attn_head_count} is not divisible by SP size
  {self.world_size}")``; l. 149-152: ``"KV attention head count {kv} is not divisible by SP size
  {U} or vice versa"`` unless kv % U == 0 or U % kv == 0 (fewer KV heads than U are replicated).
* ``sequence/layer.py`` ``_generate_layout_params`` (``DistributedAttention``, Megatron-DeepSpeed's
  Ulysses, with tensor parallelism the heads of one TP rank), l. 64: ``assert num_total_head %
  seq_world_size == 0, f"Number of heads ({num_total_head}) must be divisible by the sequence
  parallel size ({seq_world_size})!"``, for the query and for the key/value tensors alike.

With tensor or pipeline parallelism (Megatron-DeepSpeed's path) the heads and KV heads of one TP
rank must each divide by U; without, the HF/ALST rules apply. The job stops at its first forward
(or at ``register_with_transformers``): an error.

Anti-pattern: ``--sequence-parallel 3`` with Llama-3-8B's 32 heads.

Fix: a sequence-parallel size that divides the attention heads (and the key/value heads).
"""

from __future__ import annotations

from advisor.rules import LintContext, Rule, register


def ulysses_heads_problem(heads: int | None, kv_heads: int | None, sp: int, tp: int = 1,
                          pp: int = 1) -> str | None:
    """DeepSpeed's own refusal (message and source) of Ulysses degree ``sp`` for a model of
    ``heads`` attention heads and ``kv_heads`` key/value heads (None: as many as heads) under
    tensor parallelism ``tp`` / pipeline ``pp``; None when DeepSpeed accepts it (or heads are
    unknown). T = P = 1: ``ulysses_sp.py`` l. 147-152; otherwise ``sequence/layer.py`` l. 64 on each
    TP rank's heads (heads / tp; a tp not dividing them is Megatron's own error, not this one)."""
    if sp <= 1 or not heads:
        return None
    kv = kv_heads or heads
    if tp == 1 and pp == 1:
        if heads % sp:
            return (f"DeepSpeed raises \"Attention head count {heads} is not divisible by SP size {sp}\" "
                    "(runtime/sequence_parallel/ulysses_sp.py:147) and asserts \"Number of heads "
                    f"({heads}) must be divisible by the sequence parallel size ({sp})!\" (sequence/layer.py:64)")
        if kv % sp and sp % kv:
            return (f"DeepSpeed raises \"KV attention head count {kv} is not divisible by SP size {sp} or vice "
                    "versa\" (runtime/sequence_parallel/ulysses_sp.py:149)")
        return None
    for n, what in ((heads, "attention heads"), (kv, "key/value heads")):
        if n % tp == 0 and (n // tp) % sp:
            return (f"each tensor-parallel rank's {n // tp} {what} do not divide by it: DeepSpeed asserts "
                    f"\"Number of heads ({n // tp}) must be divisible by the sequence parallel size ({sp})!\" "
                    "(sequence/layer.py:64)")
    return None


@register
class UlyssesHeads(Rule):
    code = "G005"
    name = "ulysses-heads"
    severity = "error"
    refuses = True
    needs_model = True

    def check(self, ctx: LintContext):
        cl = ctx.cluster
        from advisor.config.effective import config_sequence_parallel
        csp = config_sequence_parallel(ctx.raw)
        sp = getattr(cl, "sequence_parallel", None) or csp
        if sp <= 1 or ctx.inventory is None:
            return
        meta = ctx.inventory.meta or {}
        tp = getattr(cl, "tensor_parallel", 1) or 1
        pp = getattr(cl, "pipeline_parallel", 1) or 1
        problem = ulysses_heads_problem(meta.get("num_heads"), meta.get("num_kv_heads"), sp, tp, pp)
        if problem:
            heads = meta.get("num_heads")
            yield self.finding("/sequence_parallel_size" if sp == csp and csp > 1 else "",
                               f"sequence parallel size {sp} (DeepSpeed-Ulysses) with {heads} attention heads"
                               + (f" and {meta.get('num_kv_heads')} key/value heads" if meta.get("num_kv_heads") else "")
                               + f": {problem}",
                               "choose a sequence-parallel size that divides the attention heads (and the key/value "
                               "heads)", sequence_parallel=sp, heads=heads, kv_heads=meta.get("num_kv_heads"))
