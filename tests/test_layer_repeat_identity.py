"""Identical layers walked once (issue 21: a model built from a config.json is N copies of one decoder
layer): model.parallel.layer_repeat finds them, and the passes that use it (state.zero3_container_steps,
timeline.zero_init_load_peak_of) give what the whole walk gives. Compared on seeded random inventories
(heads, tails, nn.Linear pairs, containers one and two levels deep, frozen tensors, a second param
group, 1-14 layers, layer numbers from 0 or not) and, for the whole estimate, on random configs (ZeRO
stages 0-3, CPU/NVMe offload, GA, world sizes, buckets, zero.Init loads): every figure and word of
estimate's JSON equal with the repeat found and with it hidden (layer_repeat -> None, the full walk).
Perturbed inventories (one layer's tensor resized, renamed or frozen) must not be taken as repeating."""
import dataclasses
import json
import random

import pytest

from advisor.config.effective import effective_config
from advisor.ledger import state, timeline
from advisor.ledger.state import Cluster, Plan
from advisor.model import parallel
from advisor.model.inventory import Inventory, TensorSpec
from layer_repeat_cases import fresh_copy, random_zero_config


def _layered(rng: random.Random, layers: tuple[int, int] = (1, 14)) -> tuple[Inventory, tuple[int, int, int] | None]:
    """A random model of identical layers, and (head, unit, count) of its layers, None where a
    perturbation breaks the repetition."""
    prefix = rng.choice(["model.layers.", "transformer.h.", "blocks.", "layers.", "enc.blocks."])
    head = [TensorSpec(n, s) for n, s in rng.sample([("embed.weight", (rng.randint(1, 90), 4)),
                                                     ("pos.weight", (rng.randint(1, 40),)),
                                                     ("model.embed_tokens.weight", (rng.randint(1, 90), 3))],
                                                    rng.randint(0, 3))]
    unit = []
    for mi in range(rng.randint(1, 5)):
        grp = rng.choice(["", "attn.", "mlp."]) if rng.random() < 0.6 else ""
        o, i = rng.randint(1, 60), rng.randint(1, 60)
        frozen = rng.random() < 0.1
        g = rng.choice([0, 0, 1])
        r = rng.random()
        if r < 0.4:  # an nn.Linear
            unit.append((f"{grp}m{mi}.weight", (o, i), not frozen, g))
            if rng.random() < 0.7:
                unit.append((f"{grp}m{mi}.bias", (o,), not frozen, g))
        elif r < 0.6:  # a GPT-2 Conv1D (in, out) or a LayerNorm: an autograd sibling at ZeRO-3 too
            unit.append((f"{grp}m{mi}.weight", (i, o) if r < 0.5 else (o,), not frozen, g))
            unit.append((f"{grp}m{mi}.bias", (o,), not frozen, g))
        else:
            for pn in rng.sample(["weight", "bias", "scale"], rng.randint(1, 3)):
                unit.append((f"{grp}m{mi}.{pn}", (rng.randint(1, 400),), not frozen, g))
    count = rng.randint(*layers)
    first = rng.choice([0, 0, 0, 3])
    layers = [TensorSpec(f"{prefix}{first + li}.{s}", shape, tr, g)
              for li in range(count) for s, shape, tr, g in unit]
    tail = [TensorSpec(n, s) for n, s in rng.sample([("norm.weight", (rng.randint(1, 50),)),
                                                     ("lm_head.weight", (rng.randint(1, 90), 4)),
                                                     ("model.norm.weight", (rng.randint(1, 50),))],
                                                    rng.randint(0, 3))]
    want = (len(head), len(unit), count) if count >= 2 else None
    if count >= 2 and rng.random() < 0.3:
        j = rng.randrange(len(layers))
        t = layers[j]
        how = rng.choice(["shape", "name", "frozen"])
        if how == "shape":
            layers[j] = TensorSpec(t.name, (t.numel + 1,), t.trainable, t.group)
        elif how == "name":
            layers[j] = TensorSpec(t.name + "x", t.shape, t.trainable, t.group)
        else:
            layers[j] = TensorSpec(t.name, t.shape, not t.trainable, t.group)
        want = None
    return Inventory("rand", head + layers + tail), want


def want_head(inv: Inventory) -> int:
    """The first layer tensor's index."""
    return parallel.in_layer_flags(inv).find(1)


_copy = fresh_copy


@pytest.fixture
def no_repeat(monkeypatch):
    """Run ``f(inv)`` on a fresh copy of ``inv`` with layer_repeat hidden: the whole walk."""
    def run(f, inv):
        with monkeypatch.context() as m:
            m.setattr(parallel, "layer_repeat", lambda inv: None)
            return f(_copy(inv))
    return run


@pytest.mark.parametrize("seed", range(20))
def test_layer_repeat_found_only_for_identical_layers(seed):
    """All layers identical: found as built (lead 0). A perturbed layer: none with parallel.LEADING_LAYERS off;
    with it on, at most the identical layers after the perturbed one, which the property check below holds to."""
    rng = random.Random(seed)
    for _ in range(30):
        inv, want = _layered(rng)
        rep = parallel.layer_repeat(inv)
        if want is not None or rep is None:
            assert (None if rep is None else (rep.head, rep.unit, rep.count, rep.lead)) == \
                (None if want is None else (*want, 0))
        else:
            assert rep.lead > 0 and rep.head >= want_head(inv)
            parallel.LEADING_LAYERS = False
            try:
                assert parallel.layer_repeat(_copy(inv)) is None
            finally:
                parallel.LEADING_LAYERS = True
        if rep is not None:  # the property it claims, tensor by tensor
            for t in range(rep.count):
                for j in range(rep.unit):
                    a, b = inv.tensors[rep.head + j], inv.tensors[rep.head + t * rep.unit + j]
                    assert b.name == a.name.replace(f"{rep.prefix}{rep.first}.", f"{rep.prefix}{rep.first + t}.", 1)
                    assert (a.shape, a.trainable, a.group, a.dtype) == (b.shape, b.trainable, b.group, b.dtype)


@pytest.mark.parametrize("seed", range(20))
def test_container_steps_and_load_peak_equal_whole_walk(seed, no_repeat):
    rng = random.Random(100 + seed)
    for _ in range(30):
        inv, _ = _layered(rng)
        fast = state.zero3_container_steps(inv)
        full = no_repeat(state.zero3_container_steps, inv)
        assert (list(fast[0]), list(fast[1])) == (list(full[0]), list(full[1]))
        W, D, Dl = rng.randint(1, 9), rng.choice([2, 4]), rng.choice([2, 4])
        cast = rng.choice([None, True, False])
        swap_min = rng.choice([None, None, 64, 1000])
        assert timeline.zero_init_load_peak_of(inv, W, D, Dl, cast, swap_min) == \
            timeline.zero_init_load_peak_of(inv, W, D, Dl, cast, swap_min, repeat=False)


def _config(rng: random.Random) -> dict:
    return random_zero_config(rng)  # the draws this file always made (tests/layer_repeat_cases.py)


@pytest.mark.parametrize("seed", range(12))
def test_estimate_equal_with_and_without_repeat(seed, no_repeat):
    from advisor.views.estimate import estimate
    rng = random.Random(1000 + seed)
    for _ in range(6):
        inv, _ = _layered(rng)
        if not inv.has_trainable():
            continue
        ec = effective_config(_config(rng))
        W = rng.choice([1, 2, 3, 4, 8])
        load = dataclasses.replace(timeline.LoadAssumption(), zero_init=rng.random() < 0.6,
                                   dtype=rng.choice(["fp32", "bf16"]))

        def run(i: Inventory) -> str:
            return json.dumps(estimate(Plan(ec, i, Cluster(world_size=W, gpus_per_node=W)), load=load).to_dict(),
                              sort_keys=True, default=str)
        assert run(_copy(inv)) == no_repeat(run, inv)


@pytest.mark.parametrize("name", __import__("advisor.model.specs", fromlist=["preset_names"]).preset_names())
def test_config_built_models_note_what_the_scans_find(name):
    # specs.expand records layer_repeat and in_layer_flags as it builds the layers; the scans over the
    # names (parallel._layer_repeat, the layer regex per tensor) must find the same, for every preset and
    # for shallow / one-layer / MoE-with-dense-layers variants of it
    from advisor.model import specs
    base = specs.get_preset(name)
    variants = [base, dataclasses.replace(base, num_layers=2), dataclasses.replace(base, num_layers=1)]
    if base.is_moe:
        variants.append(dataclasses.replace(base, first_dense_layers=min(1, base.num_layers)))
    for spec in variants:
        try:
            inv = specs.expand(spec)
        except Exception:  # a variant the spec's own checks refuse
            continue
        noted = parallel.layer_repeat(inv), parallel.in_layer_flags(inv)
        scanned = parallel._layer_repeat(_copy(inv)), bytes(map(bool, map(parallel._LAYER_RE.search,
                                                                          (t.name for t in inv.tensors))))
        assert noted == scanned


@pytest.mark.parametrize("seed", range(25))
def test_reduce_flush_pass_equals_whole_columns(seed, no_repeat):
    # state._zero3_reduce_flush_bytes over identical layers (state._flush_periodic: one layer's values, the
    # flushes and the rest) against its whole columns: buckets from below one layer to all of them,
    # W, 2/4-byte gradients, reduce_scatter, the fp64 norm copy, and gathered bytes per module that are
    # the same in every layer but a few at each end (as the fetch replay's backward gives them)
    rng = random.Random(500 + seed)
    for _ in range(20):
        inv, _ = _layered(rng)
        if not inv.has_trainable():
            continue
        total = sum(t.numel for t in inv.tensors if t.trainable)
        largest = max(t.numel for t in inv.tensors if t.trainable)
        rbs = rng.choice([largest, largest + rng.randint(0, 300), total // 7 + largest, total + 1])
        W, C = rng.randint(1, 8), rng.choice([2, 4])
        rs, norm, linear = rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.8
        gathered = None
        if rng.random() < 0.6:
            _, mod_of, names, _ = state.module_index(inv)
            rep = state._module_repeat(inv)
            M = len(names)
            at_fetch = [rng.randint(0, 900) for _ in range(M)]
            during = [rng.randint(0, 900) for _ in range(M)]
            if rep is not None:
                h, mu, c = rep
                ua, ud = [rng.randint(0, 900) for _ in range(mu)], [rng.randint(0, 900) for _ in range(mu)]
                e0, e1 = rng.randint(0, 2), rng.randint(0, 2)  # layers at each end left random
                for t in range(e0, c - e1):
                    at_fetch[h + t * mu:h + (t + 1) * mu] = ua
                    during[h + t * mu:h + (t + 1) * mu] = ud
            gathered = (list(mod_of), at_fetch, during, rng.randint(0, 900))

        def run(i: Inventory):
            return state._zero3_reduce_flush_bytes(i, W, C, rbs, True, rs, norm, gathered=gathered, linear=linear)
        assert run(_copy(inv)) == no_repeat(run, inv)


def _fields(z) -> tuple:
    return tuple(list(v) if not isinstance(v, (tuple, int)) else v for v in dataclasses.astuple(z))


@pytest.mark.parametrize("seed", range(30))
def test_fetch_replay_periodic_forward_equals_reference_walk(seed):
    # state._ReplayJump: the forward over 8-60 identical layers skips whole periods once its state repeats;
    # every field of the Zero3Fetch equals the reference walk's (state._zero3_fetch_replay_reference, which
    # walks every step), with prefetch buckets and max live of a few layers (a steady state) and others
    rng = random.Random(700 + seed)
    jumps = 0
    orig = state._ReplayJump.step

    def counting(self, *a):
        nonlocal jumps
        r = orig(self, *a)
        jumps += r is not None
        return r
    state._ReplayJump.step = counting
    try:
        for _ in range(20):
            inv, _ = _layered(rng, (8, 60))
            total = sum(t.numel for t in inv.tensors)
            rep = parallel.layer_repeat(inv)
            layer = sum(t.numel for t in inv.tensors[rep.head:rep.head + rep.unit]) if rep else total // 8 + 1
            import types
            zero = types.SimpleNamespace(
                param_persistence_threshold=rng.choice([0, 0, 50, 10**9]),
                model_persistence_threshold=rng.choice([10**18, 10**18, total // 2]),
                prefetch_bucket_size=rng.choice([0, layer // 2 + 1, layer, 2 * layer + 7, 5 * layer, total]),
                max_live_parameters=rng.choice([layer, 3 * layer + 1, 6 * layer, 20 * layer + 3, 37 * layer, 10**9]),
                max_reuse_distance=rng.choice([0, layer, 4 * layer, 10**9]),
                allgather_sequential=rng.random() < 0.15)
            W, D = rng.randint(2, 8), rng.choice([2, 4])
            assert _fields(state._zero3_fetch_replay(inv, zero, W, D)) == \
                _fields(state._zero3_fetch_replay_reference(inv, zero, W, D))
    finally:
        state._ReplayJump.step = orig
    assert jumps  # the periods were found and skipped (else this compares nothing new)


@pytest.mark.parametrize("seed", range(25))
def test_reduce_flush_walk_equals_whole_walk(seed, no_repeat):
    # state._zero3_reduce_flush_walk (a gradient over the bucket, or contiguous_gradients off) skips whole
    # periods of identical layers once the bucket's state at a layer's start repeats; against the walk over
    # every gradient, on 4-40 layers, buckets from below the largest gradient to several layers, with and
    # without gathered bytes per module (the same in every layer but a few at each end)
    rng = random.Random(900 + seed)
    for _ in range(20):
        inv, _ = _layered(rng, (4, 40))
        if not inv.has_trainable():
            continue
        largest = max(t.numel for t in inv.tensors if t.trainable)
        rep = parallel.layer_repeat(inv)
        layer = sum(t.numel for t in inv.tensors[rep.head:rep.head + rep.unit]) if rep else largest
        rbs = rng.choice([max(1, largest // 2), largest, layer // 3 + 1, layer, 2 * layer + 5, 7 * layer // 3])
        W, C = rng.randint(1, 8), rng.choice([2, 4])
        contiguous, rs, norm, linear = rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.8
        gathered = None
        if rng.random() < 0.5:
            _, mod_of, names, _ = state.module_index(inv)
            mrep = state._module_repeat(inv)
            M = len(names)
            at_fetch = [rng.randint(0, 900) for _ in range(M)]
            during = [rng.randint(0, 900) for _ in range(M)]
            if mrep is not None:
                h, mu, c = mrep
                ua, ud = [rng.randint(0, 900) for _ in range(mu)], [rng.randint(0, 900) for _ in range(mu)]
                e0, e1 = rng.randint(0, 2), rng.randint(0, 2)
                for t in range(e0, c - e1):
                    at_fetch[h + t * mu:h + (t + 1) * mu] = ua
                    during[h + t * mu:h + (t + 1) * mu] = ud
            gathered = (list(mod_of), at_fetch, during, rng.randint(0, 900))

        def run(i: Inventory):
            return state._zero3_reduce_flush_walk(i, W, C, rbs, contiguous, rs, norm, gathered, linear)
        assert run(_copy(inv)) == no_repeat(run, inv)


def _back_zero(rng: random.Random, inv: Inventory):
    """A ZeRO-3 section whose backward reaches a steady state over a few layers (buckets and max live of
    a few layers, reuse distances that keep none, some or all of the last layers after the forward)."""
    import types
    total = sum(t.numel for t in inv.tensors)
    rep = parallel.layer_repeat(inv)
    layer = sum(t.numel for t in inv.tensors[rep.head:rep.head + rep.unit]) if rep else total // 8 + 1
    return types.SimpleNamespace(
        param_persistence_threshold=rng.choice([0, 0, 0, 50, 10**9]),
        model_persistence_threshold=rng.choice([10**18, 10**18, total // 2]),
        prefetch_bucket_size=rng.choice([0, layer // 3 + 1, layer, 2 * layer + 7, 5 * layer, total]),
        max_live_parameters=rng.choice([layer, 3 * layer + 1, 6 * layer, 20 * layer + 3, 10**9]),
        max_reuse_distance=rng.choice([0, 0, layer, 4 * layer, 15 * layer, 10**9]),
        allgather_sequential=rng.random() < 0.1)


@pytest.mark.parametrize("seed", range(30))
def test_fetch_replay_periodic_backward_equals_reference_walk(seed, monkeypatch):
    # state._ReplayJump.back: the backward over 8-90 identical layers skips whole periods once its state
    # repeats (non-persistent parameters, prefetch buckets, max live, reuse distances keeping some of the last
    # layers after the forward); every field of the Zero3Fetch (the GA-1 backward and the GA-2 refetch) equals
    # the reference walk's (state._zero3_fetch_replay_reference, every step walked) and the fast walk's with
    # the backward's periods off (state.BACKWARD_PERIODS)
    rng = random.Random(1700 + seed)
    skipped = []
    orig = state._ReplayJump.back

    def counting(self, *a):
        r = orig(self, *a)
        if r is not None:
            skipped.append(r)
        return r
    monkeypatch.setattr(state._ReplayJump, "back", counting)
    for _ in range(20):
        inv, _ = _layered(rng, (8, 90))
        zero = _back_zero(rng, inv)
        W, D = rng.randint(2, 8), rng.choice([2, 4])
        fast = _fields(state._zero3_fetch_replay(inv, zero, W, D))
        assert fast == _fields(state._zero3_fetch_replay_reference(_copy(inv), zero, W, D))
        with monkeypatch.context() as m:
            m.setattr(state, "BACKWARD_PERIODS", False)
            assert fast == _fields(state._zero3_fetch_replay(_copy(inv), zero, W, D))
    assert skipped  # the backward's periods were found and skipped (else this compares nothing new)


@pytest.mark.parametrize("wrong", [lambda m: m - 1, lambda m: 0], ids=["one fewer", "none"])
def test_wrong_backward_repeat_count_is_caught(wrong, monkeypatch):
    # the comparison above must fail when the skipped layers and their fetch columns are written for fewer
    # periods than the state moved (state._BACK_PERIODS_HOOK): a wrong repeat count is caught. (One more is
    # not an error: it writes layers the walk then reaches and writes again.)
    rng = random.Random(4242)
    monkeypatch.setattr(state, "_BACK_PERIODS_HOOK", wrong)
    caught = tried = 0
    for _ in range(60):
        inv, _ = _layered(rng, (8, 90))
        zero = _back_zero(rng, inv)
        W, D = rng.randint(2, 8), rng.choice([2, 4])
        got = []
        orig = state._ReplayJump.back

        def record(self, *a):
            r = orig(self, *a)
            got.append(r)
            return r
        with monkeypatch.context() as m:
            m.setattr(state._ReplayJump, "back", record)
            fast = _fields(state._zero3_fetch_replay(inv, zero, W, D))
        if not any(r is not None for r in got):
            continue
        tried += 1
        caught += fast != _fields(state._zero3_fetch_replay_reference(_copy(inv), zero, W, D))
    assert tried >= 5 and caught >= tried // 2, (tried, caught)


@pytest.mark.parametrize("seed", range(6))
def test_estimate_equal_with_backward_periods_off(seed, monkeypatch):
    # the ledger over the replay (ZeRO-3, GA 1 and 2): estimate's JSON is the same with the backward's periods
    # skipped and walked (state.BACKWARD_PERIODS), on configs whose buckets / max live / reuse are a few layers
    from advisor.views.estimate import estimate
    rng = random.Random(2300 + seed)
    skipped = []
    orig = state._ReplayJump.back

    def counting(self, *a):
        r = orig(self, *a)
        skipped.append(r is not None)
        return r
    monkeypatch.setattr(state._ReplayJump, "back", counting)
    for _ in range(8):
        inv, _ = _layered(rng, (8, 60))
        if not inv.has_trainable():
            continue
        zero = _back_zero(rng, inv)
        z = {"stage": 3, "stage3_param_persistence_threshold": zero.param_persistence_threshold,
             "stage3_prefetch_bucket_size": zero.prefetch_bucket_size,
             "stage3_max_live_parameters": zero.max_live_parameters,
             "stage3_max_reuse_distance": zero.max_reuse_distance}
        ec = effective_config({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": rng.choice([1, 2]),
                               "optimizer": {"type": "Adam", "params": {"lr": 1e-4}}, "zero_optimization": z,
                               "bf16": {"enabled": True}})
        W = rng.choice([2, 4, 8])

        def run(i: Inventory) -> str:
            return json.dumps(estimate(Plan(ec, i, Cluster(world_size=W, gpus_per_node=W))).to_dict(),
                              sort_keys=True, default=str)
        on = run(_copy(inv))
        with monkeypatch.context() as m:
            m.setattr(state, "BACKWARD_PERIODS", False)
            assert on == run(_copy(inv))
    assert any(skipped)


@pytest.mark.parametrize("seed", range(10))
def test_fetch_replay_periods_with_growing_n_equal_reference_walk(seed, monkeypatch):
    # the GA-2 refetch keeps every persistent parameter it gathers, so n grows by a constant per period:
    # _ReplayJump.step skips periods only while every prefetch's limit stays the bucket (n + growth below max
    # live - bucket); the Zero3Fetch equals the reference walk's and the pass is taken
    rng = random.Random(5100 + seed)
    monkeypatch.setattr(state, "PASSES", __import__("collections").Counter())
    for _ in range(30):
        inv, _ = _layered(rng, (16, 90))
        zero = _back_zero(rng, inv)
        total = sum(t.numel for t in inv.tensors)
        zero.param_persistence_threshold = rng.choice([10**9, 50])
        zero.prefetch_bucket_size = rng.choice([1, total // 40 + 1, total // 10])
        zero.max_live_parameters = rng.choice([total // 2, total, 10**9])
        W, D = rng.randint(2, 8), rng.choice([2, 4])
        assert _fields(state._zero3_fetch_replay(inv, zero, W, D)) == \
            _fields(state._zero3_fetch_replay_reference(_copy(inv), zero, W, D))
    assert state.PASSES["forward_periods_n_growing"]


@pytest.mark.parametrize("seed", range(8))
def test_fetch_replay_periods_with_growing_bytes_equal_reference_walk(seed, monkeypatch):
    # a reuse distance over the whole model keeps every gathered layer through the forward: cur grows by one
    # layer's bytes a layer. _ReplayJump.step skips periods with cur shifted by a constant, the forward's largest
    # moment moved to the last skipped period's copy of the source period's; equal to the reference walk's
    rng = random.Random(6100 + seed)
    monkeypatch.setattr(state, "PASSES", __import__("collections").Counter())
    for _ in range(30):
        inv, _ = _layered(rng, (16, 90))
        zero = _back_zero(rng, inv)
        zero.max_reuse_distance = 10**9
        zero.param_persistence_threshold = rng.choice([0, 50])
        W, D = rng.randint(2, 8), rng.choice([2, 4])
        assert _fields(state._zero3_fetch_replay(inv, zero, W, D)) == \
            _fields(state._zero3_fetch_replay_reference(_copy(inv), zero, W, D))
    assert state.PASSES["forward_periods_cur_growing"]


@pytest.mark.parametrize("seed", range(10))
def test_fetch_replay_plain_window_and_frozen_equal_reference_walk(seed, monkeypatch):
    # _ReplayJump.plain_step (issue 21, generate's ZeRO-3 candidate): prefetch buckets below one parameter (each
    # prefetch takes one, so the queue's front runs ahead further each layer and step's window never repeats), a
    # few persistent parameters, max live reached mid-forward or never, reuse distances keeping none, some or all
    # layers; the window skipped while it grows, holds or shrinks, in forward and backward (plain_back), and the
    # forward's layers where nothing changes skipped whole. Every field of the Zero3Fetch equals the reference
    # walk's and the fast walk's with FORWARD_PLAIN off, and both directions' skips are taken
    rng = random.Random(8100 + seed)
    monkeypatch.setattr(state, "PASSES", __import__("collections").Counter())
    for _ in range(16):
        inv, _ = _layered(rng, (24, 120))
        zero = _back_zero(rng, inv)
        rep = parallel.layer_repeat(inv)
        layer = sum(t.numel for t in inv.tensors[rep.head:rep.head + rep.unit]) if rep else 1
        total = sum(t.numel for t in inv.tensors)
        zero.param_persistence_threshold = rng.choice([0, 30, 50])
        zero.prefetch_bucket_size = rng.choice([1, 2, 20, layer // 4 + 1])
        zero.max_live_parameters = rng.choice([10**9, total // 3, total // 2, 8 * layer, 20 * layer + 3])
        zero.max_reuse_distance = rng.choice([0, 10 * layer, 40 * layer, 10**9])
        zero.allgather_sequential = rng.random() < 0.1
        W, D = rng.randint(2, 8), rng.choice([2, 4])
        fast = _fields(state._zero3_fetch_replay(inv, zero, W, D))
        assert fast == _fields(state._zero3_fetch_replay_reference(_copy(inv), zero, W, D))
        with monkeypatch.context() as m:
            m.setattr(state, "FORWARD_PLAIN", False)
            assert fast == _fields(state._zero3_fetch_replay(_copy(inv), zero, W, D))
    assert state.PASSES["forward_plain_periods"] and state.PASSES["backward_plain_periods"], state.PASSES
