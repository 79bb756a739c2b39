"""Op-level selective activation checkpointing (advisor.engine.sac) against what the real model
keeps when run with torch's selective checkpoint contexts.

The policy is chosen on fake tensors (torch's SACEstimator + ILP/greedy). Here the same small
model (built in code, no downloads) runs for real on the CPU with that policy applied through
``torch.utils.checkpoint.create_selective_checkpoint_contexts``, and what each checkpointed
layer keeps for backward is measured independently of the estimator: every tensor storage an
op creates inside the layer (not a view of an input) is recorded with a weak reference
(``torch.multiprocessing.reductions.StorageWeakRef``); the ones still alive when forward
returns are what the layer keeps. That must be the policy's saved bytes plus the layer's
output, to the byte.

Why not count with ``saved_tensors_hooks`` alone: inside a non-reentrant checkpoint the
checkpoint's own hooks replace every tensor autograd saves with an empty holder
(``_checkpoint_hook.pack_hook``, torch/utils/checkpoint.py), and the ops SAC keeps live in its
cache (``_CachingTorchDispatchMode``), not in autograd's saved tensors. An outer
saved_tensors_hooks sees, inside the layers, only each checkpoint's saved input (the layer
input, ``_CheckpointFrame.save_inputs``), which the test asserts too."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_small import SMALL, with_layers  # noqa: E402

from advisor.engine import sac  # noqa: E402
from advisor.engine.trace import _decoder_layers, build_config, trace_activations  # noqa: E402

SEQ, BATCH = 32, 2


def _has_pulp() -> bool:
    import importlib.util

    return importlib.util.find_spec("pulp") is not None


def run_with_policy(cfg_dict: dict, policy: sac.SACPolicy, attention: str, dropout: float | None):
    """The real model (fp32, CPU, train mode) with ``policy`` applied: per layer, the bytes of
    storages born in it and alive at the end of forward, its output bytes, the tensors an
    outer saved_tensors_hooks saw inside layers; then backward, and the parameter gradients."""
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = build_config(cfg_dict, dropout=dropout)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation=attention).train()
    if policy is not None:
        policy.apply(model)
    where: list = [None]
    out_bytes: dict[int, int] = {}
    births: dict[int, tuple] = {}

    class Births(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if where[0] is not None and torch.is_grad_enabled():
                ins = {a.untyped_storage().data_ptr() for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)}
                for o in tree_leaves(out):
                    if isinstance(o, torch.Tensor) and o.untyped_storage().nbytes():
                        st = o.untyped_storage()
                        if st.data_ptr() not in ins:
                            births[st.data_ptr()] = (where[0], st.nbytes(), StorageWeakRef(st))
            return out

    def post(m, a, o, i):
        where[0] = None
        t = o[0] if isinstance(o, tuple) else o
        out_bytes[i] = t.untyped_storage().nbytes()

    inputs: list[int] = []
    arg_storages: set[int] = set()

    def pre(m, a, kw, i):
        where[0] = i
        t = a[0] if a else kw["hidden_states"]
        inputs.append(t.untyped_storage().data_ptr())
        arg_storages.update(x.untyped_storage().data_ptr() for x in tree_leaves((a, kw)) if isinstance(x, torch.Tensor))

    for i, blk in enumerate(_decoder_layers(model)):
        blk.register_forward_pre_hook(lambda m, a, kw, i=i: pre(m, a, kw, i), with_kwargs=True)
        blk.register_forward_hook(lambda m, a, o, i=i: post(m, a, o, i))
    packed_inside: list[int] = []

    def pack(t):
        if where[0] is not None:
            packed_inside.append(t.untyped_storage().data_ptr())
        return t

    ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), Births():
        out = model(input_ids=ids, labels=ids, use_cache=False)
    kept: dict[int, int] = {}
    for w, n, ref in births.values():
        if not ref.expired():
            kept[w] = kept.get(w, 0) + n
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return {"kept": kept, "out_bytes": out_bytes, "packed_inside": packed_inside, "inputs": inputs, "args": arg_storages, "grads": grads}


CASES = [("llama", "sdpa", None, 0.3), ("llama", "eager", None, 0.0), ("gpt2", "eager", 0.1, 0.3),
         ("gpt2", "sdpa", 0.0, 1.0), ("qwen3", "sdpa", None, 0.5)]


@pytest.mark.parametrize("solver", ["greedy", pytest.param("ilp", marks=pytest.mark.skipif(
    not _has_pulp(), reason="the ILP solver needs the optional pulp package"))])
@pytest.mark.parametrize("family,attention,dropout,budget", CASES)
def test_policy_saved_bytes_equal_what_the_checkpointed_layer_keeps(family, attention, dropout, budget, solver):
    cfg = with_layers(SMALL[family], 2)
    pol = sac.sac_policy(cfg, SEQ, BATCH, budget, dtype="fp32", attention=attention, dropout=dropout, solver=solver)
    assert pol.solver == solver and len(pol.layers) == 2
    real = run_with_policy(cfg, pol, attention, dropout)
    # what autograd saves inside the layers, as an outer saved_tensors_hooks sees it: only the
    # checkpoints' inputs (each layer's input hidden state, and its mask or position tensors);
    # the rest is hidden
    assert set(real["inputs"]) <= set(real["packed_inside"]) <= real["args"]
    for i, lp in enumerate(pol.layers):
        assert real["kept"][i] == lp.saved_bytes + real["out_bytes"][i], (i, real["kept"], lp.saved_ops())
        # torch's budget: saved op-output bytes at most budget x the layer's (SACEstimator's accounting)
        assert lp.saved_bytes <= budget * lp.total_bytes + 1
    if not dropout:  # the policy changes what is recomputed, never the gradients
        base = run_with_policy(cfg, None, attention, dropout)["grads"]
        assert base.keys() == real["grads"].keys()
        for n, g in base.items():
            torch.testing.assert_close(real["grads"][n], g, rtol=1e-5, atol=1e-6, msg=n)


def test_trace_with_the_policy_measures_what_the_real_run_keeps():
    """The trace (fake tensors, MemTracker) with the SAC policy: a middle layer's bytes are the
    real run's kept bytes of that layer (saved ops + output; its input belongs to the layer
    before), and fewer than without checkpointing, more than with full checkpointing."""
    cfg = with_layers(SMALL["llama"], 3)
    pol = sac.sac_policy(cfg, SEQ, BATCH, 0.3, dtype="fp32", attention="sdpa", solver="greedy")
    tr = trace_activations(cfg, SEQ, BATCH, dtype="fp32", attention="sdpa", checkpointing="sac", sac=pol)
    real = run_with_policy(cfg, pol, "sdpa", None)
    assert tr.checkpointing == "sac:0.3" and tr.per_layer[1] == real["kept"][1]
    none = trace_activations(cfg, SEQ, BATCH, dtype="fp32", attention="sdpa")
    full = trace_activations(cfg, SEQ, BATCH, dtype="fp32", attention="sdpa", checkpointing="full")
    assert full.per_layer[1] < tr.per_layer[1] < none.per_layer[1]


def test_budget_ends():
    """Budget 0 keeps only what torch's estimator must keep (here nothing: no in-place or
    forced-stored ops in a Llama layer); budget 1 recomputes nothing of FLOPs."""
    cfg = with_layers(SMALL["llama"], 2)
    lo = sac.sac_policy(cfg, SEQ, BATCH, 0.0, dtype="fp32", solver="greedy")
    hi = sac.sac_policy(cfg, SEQ, BATCH, 1.0, dtype="fp32", solver="greedy")
    assert lo.layers[0].saved_bytes == 0 and lo.layers[0].recompute_flops == lo.layers[0].forward_flops > 0
    assert hi.layers[0].recompute_flops == 0
    # hand count of one layer's matmul FLOPs (2mnk each; torch.utils.flop_counter): q,k,v,o
    # projections, gate/up/down, and sdpa's two (b x heads x s x s x head_dim) products
    h, inter, heads, kv = 64, 128, 4, 2
    d = h // heads
    t = SEQ * BATCH
    proj = 2 * t * h * (h + 2 * kv * d + h) + 2 * t * h * inter * 3
    attn = 2 * 2 * BATCH * heads * SEQ * SEQ * d
    assert lo.layers[0].forward_flops == proj + attn


def test_bad_budget_and_solver():
    with pytest.raises(ValueError, match="fraction"):
        sac.sac_policy(SMALL["llama"], SEQ, BATCH, 1.5)
    with pytest.raises(ValueError, match="solver"):
        sac.sac_policy(SMALL["llama"], SEQ, BATCH, 0.5, solver="magic")


def test_estimate_checkpointing_sac_in_trace_mode(tmp_path, cli):
    """estimate --activations trace --checkpointing sac:0.3: the JSON's activations are the
    trace's with that policy, the note names the solver and the FLOPs recomputed; without
    trace mode, or with a bad budget, or on check: one line, exit 2."""
    import json

    from tests.conftest import run_json

    cfg = with_layers(SMALL["llama"], 3)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": BATCH, "bf16": {"enabled": True}}))
    args = ["estimate", str(ds), "--model", str(tmp_path / "config.json"), "--seq-len", str(SEQ)]
    # a trace subprocess imports torch and transformers: give it time on a loaded machine
    rc, js = run_json(args + ["--activations", "trace", "--checkpointing", "sac:0.3", "--format", "json"], timeout=600)
    assert rc == 0
    a = js["ranks"][0]["activations"]
    pol = sac.sac_policy(cfg, SEQ, BATCH, 0.3, dtype="bf16")
    tr = trace_activations(cfg, SEQ, BATCH, checkpointing="sac", sac=pol)
    assert a["saved_accelerator"] == tr.end_of_forward
    assert a["recompute_flops_fraction"] == pytest.approx(pol.recompute_flops_fraction())
    notes = json.dumps(js)
    assert "op-level SAC" in notes and "FLOPs" in notes
    assert a["recompute"] == "sac"
    # the policy is emitted: per traced layer, which ops are kept and which recomputed
    assert [lp["save"] for lp in a["sac_policy"]["layers"]] == [lp.save for lp in pol.layers]
    assert a["peak_without_recompute"] == trace_activations(cfg, SEQ, BATCH).peak
    from advisor.render.text import activation_words

    assert activation_words(a, a["recompute"]).startswith("op-level selective checkpointing in the 3 layers")
    for bad in (args + ["--checkpointing", "sac:0.3"], args + ["--activations", "trace", "--checkpointing", "sac:2"],
                ["check", str(ds), "--model", str(tmp_path / "config.json"), "--checkpointing", "sac",
                 "--world-size", "1", "--gpu-memory", "80GB", "--host-memory", "100GB"]):
        p = cli(bad)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert "sac" in p.stderr


def test_sac_refusal_names_the_config_it_was_given():
    """sac_policy passes its ``source`` to build_config, so its refusal names the file or preset."""
    from advisor.engine.sac import sac_policy
    from advisor.engine.trace import TraceUnavailable

    src = "preset mine (config.json)"
    with pytest.raises(TraceUnavailable) as e:
        sac_policy({"model_type": "no_such_model"}, 8, 1, 0.5, source=src)
    assert str(e.value).startswith(f"{src}: transformers does not know model_type 'no_such_model'"), e.value


# --- the whole-model choice: torch's MILP (sac_ilp.sac_milp) under a byte budget ---------------


def _has_milp() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(p) is not None for p in sac.MILP_PACKAGES)


@pytest.mark.skipif(not _has_milp(), reason="torch's whole-model MILP needs pulp and pwlf (the sac extra)")
def test_whole_model_milp_policy_keeps_the_traced_peak_near_its_budget():
    """sac_model_policy on a 4-layer Llama (128 tokens x 2, bf16) at 80% and 60% of the peak
    traced without recompute: the trace run with the emitted policy (an independent measurement:
    MemTracker on the checkpointed model) peaks below the no-recompute peak and within 8% above
    the budget -- torch's MILP (sac_ilp.sac_milp) bounds the memory at each module without the
    recompute of the layer being back-propagated, which the trace includes (measured here: 3%
    over at 80%, 5.5% at 60%). A smaller budget checkpoints more and recomputes more FLOPs; the
    MILP chooses decoder layers only, and a layer it leaves out keeps every op, unchecked."""
    cfg = with_layers(SMALL["llama"], 4)
    none = trace_activations(cfg, 128, 2)
    got = {}
    for frac in (0.8, 0.6):
        budget = int(frac * none.peak)
        pol = sac.sac_model_policy(cfg, 128, 2, budget)
        assert pol.scope == "model" and pol.solver == "milp" and pol.budget_bytes == budget
        assert set(pol.discard) <= {f"model.layers.{i}" for i in range(4)} and pol.discard
        for lp in pol.layers:
            assert lp.checkpointed == (lp.module in pol.discard)
            if not lp.checkpointed:
                assert all(lp.save) and lp.recompute_flops == 0
        tr = trace_activations(cfg, 128, 2, checkpointing="sac", sac=pol)
        assert tr.checkpointing == f"sac:{budget}B"
        assert tr.peak < none.peak and tr.peak <= 1.08 * budget, (frac, tr.peak, budget)
        got[frac] = (tr.peak, pol.recompute_flops_fraction(), sum(lp.checkpointed for lp in pol.layers))
    assert got[0.6][0] < got[0.8][0] and got[0.6][1] > got[0.8][1] and got[0.6][2] >= got[0.8][2]


@pytest.mark.skipif(not _has_milp(), reason="torch's whole-model MILP needs pulp and pwlf (the sac extra)")
def test_whole_model_milp_refuses_a_budget_below_what_recompute_can_reach():
    from advisor.engine.trace import TraceUnavailable

    cfg = with_layers(SMALL["llama"], 2)
    with pytest.raises(TraceUnavailable, match="no policy within .* without recompute the peak is"):
        sac.sac_model_policy(cfg, 128, 2, 1000)
    with pytest.raises(ValueError, match="positive number of bytes"):
        sac.sac_model_policy(cfg, 128, 2, 0)


def test_parse_sac_bytes():
    """``sac:SIZE`` (a unit) is the whole-model budget in bytes; ``sac:0.3`` stays the per-layer
    fraction; a size that is not one is a one-line error."""
    from advisor.model.activations import parse_sac, parse_sac_bytes

    assert parse_sac_bytes("sac:24GiB") == 24 * 2**30 and parse_sac("sac:24GiB") is None
    assert parse_sac_bytes("sac:3.5MB") == 3_500_000
    assert parse_sac_bytes("sac:0.3") is None and parse_sac("sac:0.3") == 0.3
    assert parse_sac_bytes("sac") is None and parse_sac_bytes("full") is None
    with pytest.raises(ValueError, match="sac budget"):
        parse_sac_bytes("sac:12parsecs")


@pytest.mark.skipif(not _has_milp(), reason="torch's whole-model MILP needs pulp and pwlf (the sac extra)")
def test_estimate_checkpointing_sac_with_a_size_runs_the_whole_model_milp(tmp_path, cli):
    """estimate --activations trace --checkpointing sac:SIZE: the emitted policy is the
    whole-model one (scope model, its budget in bytes, the layers chosen), the activations are
    the trace's with it; without trace mode it is refused in one line."""
    import json

    from tests.conftest import run_json

    cfg = with_layers(SMALL["llama"], 4)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True}}))
    args = ["estimate", str(ds), "--model", str(tmp_path / "config.json"), "--seq-len", "128", "--world-size", "1"]
    rc, js = run_json(args + ["--activations", "trace", "--checkpointing", "sac:3.5MB", "--format", "json"],
                      timeout=600)
    assert rc in (0, 1)
    a = js["ranks"][0]["activations"]
    pol = a["sac_policy"]
    assert (a["recompute"], pol["scope"], pol["budget_bytes"], pol["solver"]) == ("sac", "model", 3_500_000, "milp")
    assert a["checkpointed_layers"] == sum(lp["checkpointed"] for lp in pol["layers"]) == len(pol["discard"])
    assert a["saved_accelerator"] + max(a["loss_spike"], a["loss_backward_spike"], a["recompute_layer"]) \
        <= 1.08 * 3_500_000
    p = cli(args + ["--checkpointing", "sac:3.5MB"])
    assert p.returncode == 2 and "Traceback" not in p.stderr and "trace" in p.stderr, p.stderr


def test_estimator_never_names_two_storages_alike(monkeypatch):
    """SACEstimator names an op's output storages by ``hash(st)`` (the Python object's id) and
    finds an in-place op's parent by those names (``_get_inplace_metadata``). A name reused for
    another storage during the pass gives an in-place op a wrong parent: dropout's ``empty_like``
    was then saved apart from its ``bernoulli_``/``div_`` and the real run failed torch's check
    ("Tensor cached during selective activation checkpoint has been mutated"), in some processes
    only. Over a whole estimation pass (gpt2 eager with dropout: three in-place chains per
    layer), each name must stand for one storage (identified by its C++ pointer) and each
    storage have one name."""
    from torch.distributed._tools.sac_estimator import SACEstimator

    seen: list[tuple[int, int]] = []
    orig = SACEstimator._get_inplace_metadata

    def spy(self, func, out_storages):
        seen.extend((hash(st), st._cdata) for st in out_storages)
        return orig(self, func, out_storages)

    monkeypatch.setattr(SACEstimator, "_get_inplace_metadata", spy)
    import gc

    for _ in range(3):  # the pass allocates and frees many temporaries; GC between passes too
        seen.clear()
        sac.sac_policy(with_layers(SMALL["gpt2"], 2), SEQ, BATCH, 0.3, dtype="fp32", attention="eager", dropout=0.1,
                       solver="greedy")
        gc.collect()
        by_name: dict[int, set[int]] = {}
        by_storage: dict[int, set[int]] = {}
        for h, c in seen:
            by_name.setdefault(h, set()).add(c)
            by_storage.setdefault(c, set()).add(h)
        assert seen and all(len(v) == 1 for v in by_name.values()), "a name reused for another storage"
        assert all(len(v) == 1 for v in by_storage.values()), "a storage seen under two names"
