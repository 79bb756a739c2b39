"""Backward's moments (``advisor.ledger.timeline.backward_moments`` over an ``ActivationEstimate``: start, each
decoder layer's backward, end) against transformers' own backward: a real CPU forward + backward of a small model
(tests/hf_small.py, 4 layers, s 128, b 2) under torch's ``MemTracker``, the same tracker as
``advisor.engine.trace``. Activations at an instant = every storage the tracker sees live, less the parameters,
buffers and input ids (live before forward) and less the parameter gradients made so far, counted by hand as
numel x element size when each parameter's AccumulateGrad runs (``register_post_accumulate_grad_hook``). Each moment
is the largest such instant of its window: start = from ``loss.backward()`` to layer L-1's pre-backward (the loss
and the head's nodes), layer i = from its pre-backward to layer i-1's, end = after backward."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest

from advisor.model.activations import backward_moments
from advisor.model.activations import head_held as _head_held
from advisor.model.activations import ActivationInputs, estimate_activations
from hf_small import SMALL, with_layers

L, S, B = 4, 128, 2
NO_DROPOUT = {"gpt2": {"attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0}}


def _measure(family: str, dtype: str, attention: str, checkpointing: str, hold: bool = True, s: int = S,
             b: int = B) -> list[int]:
    """[start, the head's, layer L-1, ..., layer 0, end] activation bytes of transformers' real CPU backward (module
    doc). ``checkpointing``: none, full (transformers' own, every layer), a layer count k (the first k layers
    checkpointed, Megatron's block method, as ``advisor.engine.trace``), selective (the attention core in
    ``torch.utils.checkpoint``, ``advisor.engine.trace._selective_attention``)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from torch.distributed._tools.mem_tracker import MemTracker
    from transformers import AutoModelForCausalLM

    from advisor.engine.trace import _checkpointing_enable, _decoder_layers, _selective_attention, build_config

    def total(snap) -> int:
        return sum(dev.get("Total", 0) for dev in snap.values())

    class Moments(MemTracker):
        """MemTracker whose every op also updates the largest activation bytes of the current window; a decoder
        layer's pre-backward closes the window (torch's own ``_pre_bw_hook``, ModTracker's multi-grad hook)."""

        def __init__(self, layers, head):
            super().__init__()
            self.index = {id(m): i for i, m in enumerate(layers)}
            self.head = head
            self.base = self.grads = 0
            self.win: int | None = None
            self.moments: list[int] = []
            self.grads_at: dict[int, int] = {}

        def act(self) -> int:
            return total(self._curr_mem_snap) - self.base - self.grads

        def _update_peak_stats(self, peak_state) -> None:
            super()._update_peak_stats(peak_state)
            if self.win is not None:
                self.win = max(self.win, self.act())

        def _pre_bw_hook(self, module, args) -> None:
            if module is not None and module is self.head and self.win is not None and not self.moments:
                self.moments.append(self.win)  # the loss's nodes have run: lm_head's backward starts
                self.win = self.act()
            if module is not None and id(module) in self.index and self.win is not None:
                self.moments.append(self.win)
                self.grads_at[self.index[id(module)]] = self.grads
                self.win = self.act()
            super()._pre_bw_hook(module, args)

    cfg_d = with_layers(dict(SMALL[family], **NO_DROPOUT.get(family, {})), L)
    cfg = build_config(cfg_d, dropout=0.0)
    kw = {"experts_implementation": "grouped_mm"} if "moe" in family else {}
    torch.manual_seed(0)
    impl = _selective_attention(attention) if checkpointing == "selective" else attention
    model = AutoModelForCausalLM.from_config(cfg, dtype={"bf16": torch.bfloat16, "fp32": torch.float32}[dtype],
                                             attn_implementation=impl, **kw)
    model.train()
    layers = _decoder_layers(model)
    assert len(layers) == L
    if checkpointing not in ("none", "selective"):
        _checkpointing_enable(model)
        if checkpointing != "full":  # k of L: the first k layers
            for i, layer in enumerate(layers):
                layer.gradient_checkpointing = i < int(checkpointing)
    mt = Moments(layers, model.get_output_embeddings())

    def made(p):
        mt.grads += p.numel() * p.element_size()
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(made)
    ids = torch.randint(0, cfg.vocab_size, (b, s))
    mt.track_external(model, ids)
    with mt, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # MemTracker warns on every None gradient slot
        mt.base = total(mt.get_tracker_snapshot())
        out = model(input_ids=ids, labels=ids, use_cache=False)
        mt.win = mt.act()
        if hold:  # outputs = model(batch); engine.backward(outputs.loss)
            out.loss.backward()
        else:  # the HF Trainer: compute_loss returns the loss alone (trainer.py l.2254), the outputs go
            loss = out.loss
            del out
            loss.backward()
        mt.moments.append(mt.win)
        end = mt.act()

    # the gradients subtracted are those of the modules whose backward ran: at layer i's pre-backward the head's
    # (every parameter outside the layers and the embeddings: lm_head, final norm) and layers i+1..L-1's
    def nbytes(ps) -> int:
        return sum(p.numel() * p.element_size() for p in ps)
    emb = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    in_layers = {id(p) for m in layers for p in m.parameters()}
    head = nbytes(p for p in model.parameters() if id(p) not in emb and id(p) not in in_layers)
    for i in range(L):
        assert mt.grads_at[i] == head + nbytes(p for m in layers[i + 1:] for p in m.parameters()), i
    assert mt.grads == nbytes(model.parameters())
    # lm_head's own weight gradient is an output of its backward: live in that window until its AccumulateGrad runs
    # (the timeline counts it as a made gradient there, not as activations); tied, it waits in autograd's buffer
    # until the embedding's backward, an activation (``head_backward``)
    w = model.get_output_embeddings().weight
    lm_grad = 0 if any(w is p for p in model.get_input_embeddings().parameters()) else nbytes([w])
    return mt.moments + [end], lm_grad


def _model(family: str, dtype: str, attention: str, checkpointing: str, s: int = S, b: int = B):
    from advisor.model.specs import expand, spec_from_hf_config

    meta = expand(spec_from_hf_config(with_layers(dict(SMALL[family], **NO_DROPOUT.get(family, {})), L),
                                      source=family)).meta
    D = 2 if dtype == "bf16" else 4
    # CPU kernels keep LayerNorm's mean/rstd in the model dtype (advisor.engine.trace's docstring)
    # transformers' own gradient checkpointing, not DeepSpeed's
    a = estimate_activations(meta, ActivationInputs(s, b, D, checkpointing, "flash" if attention == "sdpa" else "eager",
                                                    dropout_mask_bytes=D, norm_stat_bytes=D,
                                                    deepspeed_checkpointing=False))
    return a, backward_moments(a, L, list(range(L)), held=_head_held(a))


def _close(a: int, b: int, rel: float = 0.01) -> bool:
    return abs(a - b) <= rel * b


CELLS = [("llama", d, att, ck) for d in ("bf16", "fp32") for att in ("sdpa", "eager") for ck in ("none", "full")] + [
    ("gpt2", "bf16", "sdpa", "none"), ("gpt2", "bf16", "eager", "full"),
    ("qwen3_moe", "bf16", "sdpa", "none"), ("qwen3_moe", "bf16", "sdpa", "full"), ("qwen3_moe", "bf16", "eager", "none")]
# k of L (the first 2 of 4 layers checkpointed: layers 3 and 2 run back with no recompute, then 1 and 0 recomputed)
# and selective (every layer's attention core recomputed in its backward)
CELLS += [("llama", "bf16", "sdpa", "2"), ("llama", "bf16", "eager", "2"), ("llama", "fp32", "sdpa", "2"),
          ("gpt2", "bf16", "eager", "2"), ("qwen3_moe", "bf16", "sdpa", "2"),
          ("llama", "bf16", "sdpa", "selective"), ("llama", "bf16", "eager", "selective"),
          ("llama", "fp32", "eager", "selective"), ("qwen3_moe", "bf16", "eager", "selective")]


@pytest.mark.parametrize("family,dtype,attention,checkpointing", CELLS, ids=["-".join(c) for c in CELLS])
def test_backward_moments_match_transformers_backward(family, dtype, attention, checkpointing):
    """Every moment within 1%: start (every saved tensor + the loss backward's fp32 gradients); the head's (lm_head's
    backward, from its pre-backward to layer L-1's: the log-probabilities and labels freed, the logits' and the
    hidden state's gradients live, ``loss_freed`` / ``head_backward``; the measure holds lm_head's weight gradient
    until its AccumulateGrad too, which the timeline counts as a made gradient); each layer's, L-1 included (the
    head's saved tensors freed, its saved tensors gone layer by layer, the layer's own backward on top:
    ``layer_backward``); end (the logits the caller's output holds)."""
    meas, lm_grad = _measure(family, dtype, attention, checkpointing)
    _, want = _model(family, dtype, attention, checkpointing)
    assert len(meas) == len(want) == L + 3
    want = [want[0], want[1] + lm_grad, *want[2:]]
    names = ["start", "head", *(f"layer {L - 1 - j}" for j in range(L)), "end"]
    for n, w, m in zip(names, want, meas):
        assert _close(w, m), (n, w, m, want, meas)


def test_logits_freed_before_backward_when_the_loop_drops_the_outputs():
    """``loss_head_kept`` is the safe side: where the loop keeps only the loss (the HF Trainer's compute_loss,
    trainer.py l.2254), the 16-bit logits the model returns are freed before backward starts (autograd does not
    save them: ``ForCausalLMLoss`` upcasts with ``logits.float()``, whose backward saves nothing, and log_softmax
    saves its output), so every moment is lower by exactly them; with the outputs held, the end holds them."""
    a, want = _model("llama", "bf16", "sdpa", "none")
    kept = a.loss_head_kept
    assert kept == 2 * S * B * 512  # D s b V, the bf16 logits
    meas, lm_grad = _measure("llama", "bf16", "sdpa", "none", hold=False)
    assert meas[-1] < 0.01 * kept  # the loss scalar alone
    assert _close(want[0] - kept, meas[0]), (want[0] - kept, meas[0])
    assert _close(want[1] + lm_grad - kept, meas[1]), (want, meas)
    for j in range(2, L + 2):
        assert _close(want[j] - kept, meas[j]), (want, meas)


def test_head_backward_by_hand():
    """Llama, bf16 (hidden 64, vocab 512, s 128, b 2): by lm_head's backward the loss's nodes have freed the fp32
    log-probabilities (4 s b V = 524,288) and the int64 labels (8 s b = 2,048); live are the logits' gradient cast
    back to bf16 (2 s b V = 262,144) and the hidden state's (2 s b h = 32,768). GPT-2 ties lm_head to the embedding:
    its gradient (V h D = 65,536) waits too."""
    a, _ = _model("llama", "bf16", "sdpa", "none")
    assert (a.loss_freed, a.head_backward) == (526_336, 294_912)
    assert _model("gpt2", "bf16", "sdpa", "none")[0].head_backward == 294_912 + 65_536


def test_layer_backward_by_hand():
    """Llama with SDPA, no recompute (hidden 64, intermediate 128, s 128, b 2, bf16): a layer's backward holds, beside
    its saved tensors, the gradient of its output (D s b h) and the gated MLP's first two gradients, of down_proj's
    input and of the product (D s b f each): 32,768 + 2 x 65,536; with an fp32 model 2 x that."""
    a, _ = _model("llama", "bf16", "sdpa", "none")
    assert a.layer_backward == 2 * S * B * 64 + 2 * 2 * S * B * 128 == 163_840
    assert _model("llama", "fp32", "sdpa", "none")[0].layer_backward == 2 * 163_840
    # with eager recompute the recomputed layer's peak holds it already
    assert _model("llama", "bf16", "eager", "full")[0].layer_backward == 0


def test_backward_moments_by_hand():
    """saved 2,000 (head 400 of it, 100 held by the caller: 300 gone), 4 layers of 400 of which 200 shared (the eager
    mask, freed with layer 0), layer_backward 50, recompute 30 (gross 60, 30 freed before it of which 20 the head's),
    the loss's nodes free 120 and lm_head's backward holds 90: start 2,000 + spike 500; head 2,000 - 120 + 90 =
    1,970; layer 3: 2,000 + 50 + (60 - 10) - 300 = 1,800; layer 2: 2,000 - (1,600 - 200) / 4 + 50 + 60 - 300 =
    1,460; layer 1 1,110; layer 0 760; end: the held 100. Selective recompute: the 10 not the head's are the layer's
    own kept tensors, which eager selective's peak holds: net of them at every layer, layer 2 1,450, 1 1,100, 0 750.
    Under pipeline parallelism (``own_backward`` False) no head moment, layer 3 holds the head: 2,000 + 30; no
    layer_backward and none of the head held (0): layer 2 2,000 - 350 + 60 - 400 = 1,310.

    k of L, 2 of 4 (``recompute`` "layers"): the same saved bytes, each checkpointed layer keeping 50
    (``checkpoint_kept``), so each un-checkpointed one (1,600 - 200 - 2 x 50) / 2 = 650; an un-checkpointed layer's
    backward holds 40 more (``uncheckpointed_backward``), a checkpointed one its recompute peak 300 + 20
    (``layer_backward``): layer 3 2,000 - 300 + 40 = 1,740; layer 2 1,740 - 650 = 1,090; layer 1 (recomputed) 2,000 -
    300 - 2 x 650 + 300 + 20 = 720; layer 0 720 - 50 = 670; without layer moments asked, layer 3's and layer 1's."""
    a = SimpleNamespace(saved_accelerator=2000, loss_head=400, loss_backward_spike=500, recompute_layer=30,
                        recompute_freed=30, recompute_freed_head=20, layer_backward=50, layers_shared=200,
                        pipe_kept=0, loss_freed=120, head_backward=90)
    assert backward_moments(a, 4, [0, 1, 2, 3], held=100) == [2500, 1970, 1800, 1460, 1110, 760, 100]
    sel = SimpleNamespace(**vars(a), recompute="selective")
    assert backward_moments(sel, 4, [0, 1, 2, 3], held=100) == [2500, 1970, 1800, 1450, 1100, 750, 100]
    assert backward_moments(a, 4, [0, 1, 2, 3], held=0, own_backward=False) == [2500, 2030, 1310, 960, 610, 0]
    k = SimpleNamespace(saved_accelerator=2000, loss_head=400, loss_backward_spike=500, recompute_layer=0,
                        recompute_layer_peak=300, recompute_freed=1300, recompute_freed_head=0, layer_backward=20,
                        layers_shared=200, pipe_kept=0, loss_freed=120, head_backward=90, recompute="layers",
                        checkpointed_layers=2, checkpoint_kept=50, uncheckpointed_backward=40)
    assert backward_moments(k, 4, [0, 1, 2, 3], held=100) == [2500, 1970, 1740, 1090, 720, 670, 100]
    assert backward_moments(k, 4, [], held=100) == [2500, 1970, 1740, 720, 100]


def test_activations_row_holds_lm_heads_moment_tied_embedding():
    """The accelerator activations row (``ActivationEstimate.peak_accelerator``; estimate's table: each row is its
    class's largest size) must hold backward's largest moment. GPT-2 (tied lm_head, hidden 64, vocab 512, 4 layers,
    bf16, SDPA, no recompute) at s 8, b 1: the row adds to the saved tensors the largest loss spike, the backward one
    8 s b V = 32,768 B; at lm_head's backward the tied embedding's gradient waits (V h D = 65,536) beside the logits'
    (D s b V = 8,192) and the hidden state's (D s b h = 1,024) gradients, the log-probabilities (4 s b V = 16,384) and
    labels (8 s b = 64) freed: saved + 58,304, above the row. Measured with MemTracker over transformers' real CPU
    backward (:func:`_measure`; tied, lm_head's weight gradient is no made gradient there): the head's window is
    above saved + 8 s b V, and the row must be within 1% of it. (The layer windows of this toy also hold each
    Conv1D's weight gradient until its AccumulateGrad, ~29 KB here, under 1% at s 128: the timeline counts those as
    the layer's made gradients, not as activations, so they are not compared here.)"""
    s, b = 8, 1
    meas, lm_grad = _measure("gpt2", "bf16", "sdpa", "none", s=s, b=b)
    assert lm_grad == 0  # tied: its gradient waits as an activation until the embedding's backward
    a, _ = _model("gpt2", "bf16", "sdpa", "none", s=s, b=b)
    head = meas[1]
    assert head > a.saved_accelerator + 8 * s * b * 512 + 20_000  # a backward moment well above the old row's sum
    assert meas[0] <= 1.01 * a.peak_accelerator
    assert _close(a.peak_accelerator, head), (a.peak_accelerator, head, meas)


def test_activations_row_by_hand_tied_and_pipeline():
    """The row by hand, a tied Llama-7B shape (hidden 4096, vocab 32,000, 32 layers, bf16), s 128, b 1, no recompute:
    at lm_head's backward the tied embedding's gradient waits (V h D = 262,144,000) with the logits' (2 s b V =
    8,192,000) and the hidden state's (2 s b h = 1,048,576), the log-probabilities (4 s b V = 16,384,000) and labels
    (8 s b = 1,024) freed: saved + 254,999,552, above saved + the loss backward's 8 s b V = 32,768,000 -- and above
    every layer moment (each frees the head's 4 s b V + final norm; the layer's backward adds the waiting 262 MB, the
    output's and the MLP's first gradients: 2 s b h + 2 x 2 s b f = 6,684,672). Under pipeline parallelism the
    moments are the PipelineEngine-measured ones (no head moment, no layer_backward): the row is saved + the
    largest of the loss spikes and the recompute, as the engine cells measured."""
    meta = dict(hidden_size=4096, num_heads=32, num_kv_heads=32, intermediate_size=11008, vocab_size=32000,
                num_layers=32)
    tied = estimate_activations(dict(meta, tie_word_embeddings=True), ActivationInputs(128, 1))
    assert tied.peak_accelerator == tied.saved_accelerator + 262_144_000 + 8_192_000 + 1_048_576 - 16_385_024
    untied = estimate_activations(meta, ActivationInputs(128, 1))
    assert untied.peak_accelerator == untied.saved_accelerator + 8 * 128 * 32000
    for st in (0, 1):
        pp = estimate_activations(dict(meta, tie_word_embeddings=True),
                                  ActivationInputs(128, 1, pipeline_parallel=2, stage=st, micro_batches=4))
        assert not pp.own_backward
        assert pp.peak_accelerator == pp.saved_accelerator + max(pp.loss_spike, pp.loss_backward_spike,
                                                                 pp.recompute_layer)
