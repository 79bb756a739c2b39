"""W001 seq-len-beyond-positions: The sequence length is longer than the model's position range.

``--seq-len`` (or the workload sidecar) asks for more tokens than the model was configured for
(``max_position_embeddings``; GPT-2's ``n_positions``, 1,024). What happens depends on how the
model encodes positions:

* learned absolute positions (GPT-2: ``wpe``, an ``n_positions x hidden`` table,
  ``transformers/models/gpt2/modeling_gpt2.py`` ``self.wpe = nn.Embedding(config.max_position_embeddings,
  ...)``): position ids past the table index outside it and the forward fails (``nn.Embedding``:
  "index out of range in self"). An error: the estimate is for a run that cannot start.
* rotary (RoPE) and ALiBi positions are computed, not looked up: the model runs past its
  configured length, but it was not trained there (quality degrades unless the RoPE is scaled,
  e.g. ``rope_scaling``, and the model fine-tuned at that length). A warning: the memory figures
  hold.

Anti-pattern: ``estimate --model gpt2 --seq-len 2048``.

Fix: a ``--seq-len`` at most the model's maximum; for a RoPE model, extend its context
(``rope_scaling``) deliberately and say so.
"""

from __future__ import annotations

from typing import Any

from advisor.rules import LintContext, Rule, emit, register


@register
class SeqLenBeyondPositions(Rule):
    """Explanation and registry entry for W001; the findings come from estimate (so check and
    report) and generate's notes (:func:`positions_problem`)."""

    code = "W001"
    name = "seq-len-beyond-positions"
    produced_by = "estimate"
    severity = "warning"

    def check(self, ctx: LintContext):
        return ()


def positions_problem(meta: dict[str, Any] | None, seq_len: int | None) -> tuple[str, str] | None:
    """(severity, message) when ``seq_len`` (tokens) exceeds the model's ``max_seq_len``
    (``max_position_embeddings``): "error" for learned absolute positions (the table has no row
    for them), "warning" for RoPE, ALiBi or an unknown kind. None when it fits or either is unknown."""
    meta = meta or {}
    mx = meta.get("max_seq_len")
    if not seq_len or not mx or int(seq_len) <= int(mx):
        return None
    kind = meta.get("position_embedding")
    head = f"sequence length {int(seq_len):,} is longer than the model's {int(mx):,} positions (max_position_embeddings)"
    if kind == "learned":
        return "error", (head + ": its learned absolute position table (wpe) has no row past position "
                         f"{int(mx) - 1:,}, so the forward fails (nn.Embedding: index out of range)")
    how = {"rope": "rotary (RoPE) positions", "alibi": "ALiBi positions"}.get(str(kind), "its positions")
    return "warning", (head + f": {how} run past it, but the model was not trained there (quality degrades "
                       "unless the context is extended, e.g. rope_scaling, and trained); memory figures hold")


def positions_finding(meta: dict[str, Any] | None, seq_len: int | None):
    """The W001 finding for :func:`positions_problem`, or None."""
    p = positions_problem(meta, seq_len)
    if p is None:
        return None
    sev, msg = p
    return emit(code="W001", severity=sev, pointer="", message=msg,
                fix=f"give --seq-len at most {int((meta or {})['max_seq_len']):,}, or a model configured for the length")
