"""Trace mode (advisor.engine.trace) against autograd on transformers' own models.

The trace runs on fake tensors under MemTracker. Here the same small model (built in code from
a config dict, no downloads) runs for real on the CPU, and what autograd saves for backward is
counted with ``torch.autograd.graph.saved_tensors_hooks``: distinct storages counted once,
parameters, buffers and the integer input ids excluded. Alive at the end of forward, besides the saved
tensors, are only the returned logits and the loss scalar; so the trace's ``end_of_forward``
must equal saved + logits + loss, to the byte. A middle layer's bytes must equal the tensors
first saved inside it (with three layers, layer 1 has a layer on each side).

With activation checkpointing (transformers' own ``gradient_checkpointing_enable``,
non-reentrant ``torch.utils.checkpoint``) the outer hooks see what the checkpoints save: each
checkpointed layer's positional input (``_NoopSaveInputs``) and every op outside the
checkpointed layers; the tensors a checkpoint's recompute closure holds (the keyword arguments
transformers binds with ``functools.partial``: the rotary cos/sin, eager's attention mask) are
read from the real call, distinct storages counted once with the rest."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_small import SMALL, with_layers  # noqa: E402

from advisor.engine.trace import TraceUnavailable, build_config, trace_activations  # noqa: E402


def autograd_saved(cfg_dict: dict, seq: int, batch: int, attention: str, dropout: float,
                   checkpointing: str | int = "none") -> dict:
    """Run the real model once (bf16, CPU, train mode) and count saved tensors by storage;
    ``checkpointing``: "full" or the first k layers, through transformers' gradient checkpointing."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = build_config(cfg_dict, dropout=dropout)
    kw = {"experts_implementation": "grouped_mm"} if any(
        getattr(cfg, k, None) for k in ("num_local_experts", "num_experts", "n_routed_experts")) else {}
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation=attention, **kw).train()
    blocks = [m for m in model.modules() if type(m).__name__ in set(model._no_split_modules)]
    held: list = []  # tensors each checkpoint's recompute closure holds
    if checkpointing != "none":
        on = getattr(model, "activation_checkpointing_enable", None)  # transformers 5.x; 4.x: gradient_...
        if on is not None:
            on(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        for i, blk in enumerate(blocks):
            blk.gradient_checkpointing = checkpointing == "full" or i < checkpointing

            def record(fn, *args, inner=blk._gradient_checkpointing_func, **kw):
                for v in (*args, *fn.keywords.values()):
                    held.extend(t for t in (v if isinstance(v, tuple) else (v,)) if isinstance(t, torch.Tensor))
                return inner(fn, *args, **kw)

            blk._gradient_checkpointing_func = record
    where = ["outside"]
    for i, blk in enumerate(blocks):
        blk.register_forward_pre_hook(lambda m, a, i=i: where.__setitem__(0, i))
        blk.register_forward_hook(lambda m, a, o: where.__setitem__(0, "outside"))
    params = {p.untyped_storage().data_ptr() for p in (*model.parameters(), *model.buffers())}
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    skip = params | {ids.untyped_storage().data_ptr()}
    seen: dict[int, tuple] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in skip and st.data_ptr() not in seen:
            seen[st.data_ptr()] = (where[0], st.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids, labels=ids, use_cache=False)
    for t in held:  # after the saved tensors: a storage both saved and held counts once, as saved
        st = t.untyped_storage()
        if st.data_ptr() not in skip and st.data_ptr() not in seen:
            seen[st.data_ptr()] = ("held", st.nbytes())
    per_block: dict = {}
    for w, n in seen.values():
        per_block[w] = per_block.get(w, 0) + n
    return {"saved": sum(n for _, n in seen.values()), "per_block": per_block,
            "logits": out.logits.untyped_storage().nbytes(), "loss": out.loss.untyped_storage().nbytes()}


@pytest.mark.parametrize("family,attention,dropout", [
    ("llama", "sdpa", 0.0), ("llama", "eager", 0.0), ("gpt2", "sdpa", 0.0), ("gpt2", "eager", 0.1),
    ("qwen3", "sdpa", 0.0), ("mixtral", "sdpa", 0.0), ("phi3", "eager", 0.1), ("gemma2", "eager", 0.0),
])
def test_trace_equals_autograd_saved_tensors(family, attention, dropout):
    cfg = with_layers(SMALL[family], 3)
    real = autograd_saved(cfg, 64, 2, attention, dropout)
    tr = trace_activations(cfg, 64, 2, attention=attention, dropout=dropout)
    assert not tr.extrapolated and tr.layers_traced == 3
    assert tr.end_of_forward == real["saved"] + real["logits"] + real["loss"], (tr, real)
    assert tr.per_layer[1] == real["per_block"][1], (tr.per_layer, real["per_block"])


@pytest.mark.parametrize("family,attention,dropout,checkpointing", [
    ("llama", "sdpa", 0.0, "full"), ("llama", "eager", 0.0, 2), ("gpt2", "eager", 0.1, 2), ("mixtral", "sdpa", 0.0, "full"),
])
def test_checkpointed_trace_equals_autograd_saved_tensors(family, attention, dropout, checkpointing):
    """Full and k-of-L checkpointing (3 layers; k = 2: layers 0 and 1 checkpointed, layer 2
    not): the trace's end of forward is what the real run's checkpoints and ops keep, to the
    byte; a checkpointed layer's bytes are its bf16 input (2 s b h), the one its checkpoint saves."""
    cfg = with_layers(SMALL[family], 3)
    real = autograd_saved(cfg, 64, 2, attention, dropout, checkpointing)
    tr = trace_activations(cfg, 64, 2, attention=attention, dropout=dropout, checkpointing=checkpointing)
    assert not tr.extrapolated
    assert tr.end_of_forward == real["saved"] + real["logits"] + real["loss"], (tr, real)
    assert tr.per_layer[1] == real["per_block"][1] == 2 * 64 * 2 * 64, (tr.per_layer, real["per_block"])
    if checkpointing == 2:  # the un-checkpointed last layer keeps everything, as without checkpointing
        assert tr.per_layer[2] > 4 * tr.per_layer[1]


def test_dropout_masks_are_saved():
    off = trace_activations(SMALL["gpt2"], 64, 2, attention="eager", dropout=0.0)
    on = trace_activations(SMALL["gpt2"], 64, 2, attention="eager", dropout=0.1)
    s, b, h, a, D = 64, 2, 64, 4, 2
    # per layer, as the CPU kernel stores them (aten _dropout_impl: input * noise, the noise in
    # the input dtype; CUDA's fused native_dropout keeps a bool mask instead): a mask per
    # residual dropout (2 x sbh) and per attention probability (b a s^2), plus the dropped
    # probabilities (D b a s^2) the next matmul saves beside the softmax output
    assert on.per_layer[1] - off.per_layer[1] == 2 * D * s * b * h + (D + D) * b * a * s * s


def test_full_checkpointing_keeps_layer_inputs_and_recomputes_one_layer():
    cfg = with_layers(SMALL["llama"], 3)
    none = trace_activations(cfg, 64, 2)
    full = trace_activations(cfg, 64, 2, checkpointing="full")
    s, b, h = 64, 2, 64
    assert full.per_layer[1] == 2 * s * b * h  # the bf16 layer input only
    assert none.backward_peak > full.backward_peak


def test_k_of_l_extrapolates_kept_and_full_layers():
    cfg = with_layers(SMALL["llama"], 8)
    none = trace_activations(cfg, 64, 2, max_layers=8)
    full = trace_activations(cfg, 64, 2, max_layers=8, checkpointing="full")
    part = trace_activations(cfg, 64, 2, max_layers=3, checkpointing=5)
    assert part.extrapolated and part.layers_traced == 3
    kept, whole = full.per_layer[3], none.per_layer[3]
    assert part.end_of_forward == pytest.approx(none.end_of_forward - 5 * (whole - kept), abs=4 * kept)


def test_extrapolation_adds_identical_layers():
    cfg8 = with_layers(SMALL["llama"], 8)
    whole = trace_activations(cfg8, 64, 2, max_layers=8)
    cut = trace_activations(cfg8, 64, 2, max_layers=3)
    assert cut.extrapolated and cut.notes
    assert cut.end_of_forward == whole.end_of_forward
    assert cut.backward_peak == whole.backward_peak


# every other family is traced in tests/test_activations.py (against the formulas)
@pytest.mark.parametrize("family", ["deepseek_v3"])
def test_a_family_without_formula_traces(family):
    tr = trace_activations(SMALL[family], 32, 1)
    assert tr.model_type == family and all(x > 0 for x in tr.per_layer)
    assert tr.loss_spike > 0 and tr.backward_peak > tr.end_of_forward


def test_unknown_model_type_is_one_line():
    with pytest.raises(TraceUnavailable, match="model_type 'no_such_model'"):
        trace_activations({"model_type": "no_such_model"}, 8, 1)


def test_estimate_activations_trace_agrees_with_formula(tmp_path):
    """estimate --activations trace on a config.json: the JSON's activations are the trace's,
    and for llama (formula exact per layer) within 1% of the formula's."""
    import json

    from tests.conftest import run_json

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(with_layers(SMALL["llama"], 3)))
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True}}))
    args = ["estimate", str(ds), "--model", str(cfg), "--seq-len", "64", "--format", "json"]
    rc_t, tr = run_json(args + ["--activations", "trace"])
    rc_f, fo = run_json(args)
    assert rc_t == rc_f == 0
    at, af = tr["ranks"][0]["activations"], fo["ranks"][0]["activations"]
    direct = trace_activations(with_layers(SMALL["llama"], 3), 64, 2)
    assert at["saved_accelerator"] == direct.end_of_forward
    assert abs(at["saved_accelerator"] - af["saved_accelerator"]) <= 0.01 * af["saved_accelerator"]


def test_estimate_activations_trace_without_a_config_is_one_line(tmp_path, cli):
    import json

    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1}))
    p = cli(["estimate", str(ds), "--model", "llama-3-8b", "--seq-len", "64", "--tensor-parallel", "2",
             "--world-size", "2", "--activations", "trace"])
    assert p.returncode == 2 and "use --activations formula" in p.stderr and "Traceback" not in p.stderr


def test_a_model_type_without_builtin_architecture_is_built_by_transformers(tmp_path, cli):
    """OLMo 2 has no built-in architecture: without the trace, estimate stops with one line that
    names the ways on; with --activations trace, transformers builds it and its parameter count
    is the real model's (built here on the CPU, every parameter once)."""
    import json

    from transformers import AutoModelForCausalLM

    from advisor.engine.trace import inventory_from_hf_config

    cfg = dict(SMALL["llama"], model_type="olmo2")
    real = AutoModelForCausalLM.from_config(build_config(cfg))
    inv = inventory_from_hf_config(cfg)
    assert inv.numel == sum(p.numel() for p in real.parameters())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}}))
    args = ["estimate", str(ds), "--model", str(tmp_path / "config.json"), "--seq-len", "64"]
    p = cli(args)
    assert p.returncode == 2 and "--activations trace" in p.stderr and "--params N" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    p = cli(args + ["--activations", "trace", "--format", "json"])
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["ranks"][0]["activations"]["saved_accelerator"] > 0


def test_estimate_text_names_the_traced_checkpointing(tmp_path, cli):
    """estimate --activations trace --checkpointing 2: the activations line names the k of L
    layers the trace checkpointed (it said "no checkpointing"), and the memory recompute saves
    against the trace without it is not negative."""
    import json

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(with_layers(SMALL["llama"], 3)))
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True}}))
    p = cli(["estimate", str(ds), "--model", str(cfg), "--seq-len", "64", "--activations", "trace",
             "--checkpointing", "2", "--units", "gb"])
    assert p.returncode in (0, 1), p.stderr
    out = " ".join(p.stdout.split())
    assert "2 of the 3 layers checkpointed" in out and "no checkpointing" not in out
    assert "gradient checkpointing on the first 2 layers" in out
    assert "recomputation saves " in out and "recomputation saves -" not in out


def test_trace_refusal_names_the_config_it_was_given():
    """trace_activations passes its ``source`` to build_config (it dropped it: every refusal said
    "config.json" whatever the file), so the one-line refusal names the file or preset."""
    src = "/models/mine/config.json"
    with pytest.raises(TraceUnavailable) as e:
        trace_activations({"model_type": "no_such_model"}, 8, 1, source=src)
    assert str(e.value).startswith(f"{src}: transformers does not know model_type 'no_such_model'"), e.value


def test_flash_is_refused_where_the_cpu_trace_would_run_another_kernel():
    """Issue #16: asked for flash, the trace would silently run eager for a model without sdpa in
    transformers (Gemma 2: 2x the formula per layer) or torch's CPU math kernel when attention
    dropout > 0 (GPT-2's default attn_pdrop 0.1: +178%), and report it as flash. It refuses in
    one line and points to the formula, which counts the fused kernel."""
    with pytest.raises(TraceUnavailable, match="cannot stand for flash attention: use --activations formula, or --attention eager"):
        trace_activations(SMALL["gemma2"], 64, 2, attention="flash")
    with pytest.raises(TraceUnavailable, match="flash attention with attention dropout.*--activations formula"):
        trace_activations(SMALL["gpt2"], 64, 2, attention="flash", dropout=0.1)
    # sdpa still traces (Gemma 2 as transformers runs it: eager, said in a note) and flash without
    # attention dropout too
    tr = trace_activations(SMALL["gemma2"], 64, 2, attention="sdpa")
    assert tr.attention == "eager" and any("no sdpa attention" in n for n in tr.notes)
    assert trace_activations(SMALL["gpt2"], 64, 2, attention="flash", dropout=0.0).attention == "sdpa"


def test_no_dropout_note_for_heads_a_causal_lm_does_not_run():
    """GPT-2's config defaults summary_first_dropout to 0.1 (its double-heads summary, never run
    by GPT2LMHeadModel): with attn/resid/embd_pdrop 0 nothing is masked, so no dropout note, and
    the trace saves what it saves with every dropout key 0."""
    cfg = dict(SMALL["gpt2"], attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
    assert build_config(cfg).summary_first_dropout > 0
    tr = trace_activations(cfg, 64, 2, attention="eager")
    assert not any("dropout" in n for n in tr.notes), tr.notes
    assert tr.per_layer == trace_activations(SMALL["gpt2"], 64, 2, attention="eager", dropout=0.0).per_layer


def test_use_cache_false_is_said():
    """Issue #16: the trace runs use_cache=False, as transformers' Trainer does (trainer.py:
    model.config.use_cache = args.use_cache, TrainingArguments.use_cache defaults to False); a
    plain forward takes config.use_cache and saves other bytes, so the output says which it ran.
    Full checkpointing drops the cache in every layer, so nothing to say there."""
    assert any("use_cache=False" in n for n in trace_activations(SMALL["llama"], 64, 2, attention="sdpa").notes)
    full = trace_activations(SMALL["llama"], 64, 2, attention="sdpa", checkpointing="full")
    assert not any("use_cache" in n for n in full.notes)
