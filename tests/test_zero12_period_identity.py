"""Issue 21: the ZeRO-1/2 flush replay's period skip gives what the plain per-flush walk gives.

``advisor.ledger.state._zero12_flush_replay_compute`` walks a bucket flush at a time (generate at 1e5
layers and reduce_bucket_size = h^2: ~9e5 flushes, the flat copy and rank ranges of each). Where the hook
order's sizes repeat (identical layers, ``state._zero12_flush_period``), a flush start's phase in the period
seen again means the flushes between repeat shifted; ``state.ZERO12_FLUSH_PERIOD`` skips whole periods
(checking again after each skip) and gives ``Runs.from_updates`` each rank range's first flush only; False
selects the plain walk. Compared on seeded layered models (24-300 identical layers, heads and tails, nn.Linear
pairs, tensors over the bucket, frozen tensors) and configs (ZeRO-1/2, overlap_comm, contiguous_gradients,
GA 1-3, CPU offload, fp32 communication, W 1-64, buckets smaller and larger than a layer): every column of the
replay and the whole ledger, equal both ways; and the skip must be taken in most cases (a change that makes
it always decline fails here, as one that shifts or counts a period wrong does in the comparison).
"""

from __future__ import annotations

import random

import pytest

from advisor.config.effective import effective_config
from advisor.ledger import state
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.model.inventory import Inventory, TensorSpec


def _model(rng: random.Random) -> tuple[Inventory, int]:
    layers = rng.choice([24, 25, 40, 64, 97, rng.randint(24, 300)])
    h = rng.choice([4, 8, 16])
    unit = []
    for mi in range(rng.randint(1, 6)):
        o, i = rng.randint(1, 40), rng.randint(1, 40)
        unit.append((f"m{mi}.weight", (o, i), rng.random() > 0.05))
        if rng.random() < 0.5:
            unit.append((f"m{mi}.bias", (o,), True))
    if rng.random() < 0.3:
        unit.append(("norm.weight", (h,), True))
    if not any(tr for _, _, tr in unit):
        unit[0] = (unit[0][0], unit[0][1], True)
    per_layer = sum(s[0] * (s[1] if len(s) > 1 else 1) for _, s, tr in unit if tr)
    # no head or tail at times: the period then starts at hook position 0, where the walk's first flush (an empty
    # bucket when the first gradient is over the bucket) is no period's
    tensors = [TensorSpec("model.embed_tokens.weight", (rng.randint(1, 400), h), True, 0, "bf16")][:rng.randint(0, 1)]
    for t in range(layers):
        tensors += [TensorSpec(f"model.layers.{t}.{n}", s, tr, 0, "bf16") for n, s, tr in unit]
    tail = [("model.norm.weight", (h,)), ("lm_head.weight", (rng.randint(1, 900), h))]
    tensors += [TensorSpec(n, s, True, 0, "bf16") for n, s in tail[:rng.choice([0, 0, 1, 2])]]
    return Inventory("rand", tensors, "test", {}), per_layer


def _config(rng: random.Random, inv: Inventory, per_layer: int, W: int) -> dict:
    largest = max(t.numel for t in inv.tensors if t.trainable)
    rbs = rng.choice([max(1, largest // 2), max(1, largest // 2), largest, largest + 1, max(1, per_layer // 3), per_layer - 1,
                      per_layer + 7, 3 * per_layer + 1, rng.randint(1, 5 * per_layer)])
    return _bf16_zero12_config(rng, rbs, W, offload_p=0.25, comm_fp32_p=0.25)


def _bf16_zero12_config(rng: random.Random, rbs: int, W: int, offload_p: float, comm_fp32_p: float | None) -> dict:
    """A random bf16 ZeRO-1/2 AdamW config at reduce_bucket_size ``rbs`` (at least 1) and world size ``W``: GA 1-3,
    overlap_comm / contiguous_gradients drawn, CPU optimizer offload with probability ``offload_p``, fp32
    communication with probability ``comm_fp32_p`` (None: not drawn)."""
    ga = rng.choice([1, 1, 2, 3])
    z = {"stage": rng.choice([1, 2]), "reduce_bucket_size": max(1, rbs), "overlap_comm": rng.random() < 0.5,
         "contiguous_gradients": rng.random() < 0.8}
    if rng.random() < offload_p:
        z["offload_optimizer"] = {"device": "cpu"}
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": ga, "train_batch_size": ga * W,
           "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": z}
    if comm_fp32_p is not None and rng.random() < comm_fp32_p:
        cfg["communication_data_type"] = "fp32"
    return cfg


def _columns(out: tuple) -> tuple:
    D, rbs, st, order, sizes, hooked, T, csum, flushes, touched, copies, xl = out
    return (D, rbs, st, list(order.starts), list(order.numels), list(sizes), list(hooked), T, list(csum),
            list(flushes.starts), list(flushes.trig), list(touched.ra), list(touched.rb), list(touched.fj),
            len(touched), list(copies), list(xl))


def _run(monkeypatch, seed: int, period: bool):
    rng = random.Random(seed)
    inv, per_layer = _model(rng)
    W = rng.choice([1, 2, 3, 4, 8, 9, 16, 64])
    return _replay_and_ledger(monkeypatch, _config(rng, inv, per_layer, W), inv, W, period)


def _replay_and_ledger(monkeypatch, cfg: dict, inv: Inventory, W: int, period: bool) -> tuple:
    """The flush replay's columns and the ledger (its repr, or the ValueError's text) of ``cfg`` on ``inv``
    at world size ``W``, with the period skip on or off (``state.ZERO12_FLUSH_PERIOD``)."""
    with monkeypatch.context() as m:
        m.setattr(state, "ZERO12_FLUSH_PERIOD", period)
        ec = effective_config(cfg)
        try:
            led = repr([(rl.rank, list(rl.ranks.ranges), rl.entries)
                        for rl in compute_ledger(Plan(ec, inv, Cluster(world_size=W))).ranks])
        except ValueError as e:
            led = f"ValueError: {e}"
        layouts = state.zero12_layouts(ec, inv, W, state.select_optimizer(ec)[0])
        cols = _columns(state._zero12_flush_replay_compute(ec, inv, layouts, W))
    return cols, led


def _skips_taken(monkeypatch, run, seeds) -> int:
    """For each seed, ``run(monkeypatch, seed, True)`` (the period skip on) equals ``run(monkeypatch,
    seed, False)`` (fresh layouts and replay, nothing shared: the plain walk) in replay columns and
    ledger; returns how many seeds took the skip (``state._shifted_periods`` called)."""
    skipped = [0]
    shifted = state._shifted_periods

    def counted(base, d, m):
        skipped[0] += 1
        return shifted(base, d, m)
    monkeypatch.setattr(state, "_shifted_periods", counted)
    taken = 0
    for seed in seeds:
        before = skipped[0]
        fast = run(monkeypatch, seed, True)
        taken += skipped[0] > before
        walk = run(monkeypatch, seed, False)
        assert fast[0] == walk[0], ("replay columns", seed)
        assert fast[1] == walk[1], ("ledger", seed)
    return taken


@pytest.mark.parametrize("block", range(6))
def test_period_skip_equals_the_plain_walk(monkeypatch, block):
    n = 20
    taken = _skips_taken(monkeypatch, _run, [block * 1000 + i for i in range(n)])
    assert taken >= n // 2, taken  # the skip is exercised, not declined everywhere


def test_skip_covers_most_flushes_of_a_deep_model(monkeypatch):
    """A 3,000-layer llama-like unit at reduce_bucket_size = h^2 (generate's HF value) and W 8: the walk
    computes a few periods per rank partition, the rest are skipped; the columns equal the plain walk's."""
    h = 64
    unit = [("self_attn.q_proj.weight", (h, h)), ("self_attn.k_proj.weight", (h, h)),
            ("self_attn.v_proj.weight", (h, h)), ("self_attn.o_proj.weight", (h, h)),
            ("mlp.gate_proj.weight", (2 * h, h)), ("mlp.up_proj.weight", (2 * h, h)),
            ("mlp.down_proj.weight", (h, 2 * h)), ("input_layernorm.weight", (h,)),
            ("post_attention_layernorm.weight", (h,))]
    tensors = [TensorSpec("model.embed_tokens.weight", (1000, h), True, 0, "bf16")]
    for t in range(3000):
        tensors += [TensorSpec(f"model.layers.{t}.{n}", s, True, 0, "bf16") for n, s in unit]
    tensors += [TensorSpec("model.norm.weight", (h,), True, 0, "bf16"),
                TensorSpec("lm_head.weight", (1000, h), True, 0, "bf16")]
    for stage in (1, 2):
        cfg = {"train_micro_batch_size_per_gpu": 1, "train_batch_size": 8, "bf16": {"enabled": True},
               "zero_optimization": {"stage": stage, "reduce_bucket_size": h * h}}
        calls = []
        copy_walk = state._zero12_flush_replay_compute
        outs = []
        for period in (True, False):
            with monkeypatch.context() as m:
                m.setattr(state, "ZERO12_FLUSH_PERIOD", period)
                inv = Inventory("deep", list(tensors), "test", {})
                ec = effective_config(cfg)
                layouts = state.zero12_layouts(ec, inv, 8, state.select_optimizer(ec)[0])
                if period:
                    m.setattr(state, "_shifted_periods", lambda b, d, k, f=state._shifted_periods:
                              (calls.append(len(b) * k), f(b, d, k))[1])
                outs.append(_columns(copy_walk(ec, inv, layouts, 8)))
        assert outs[0] == outs[1], stage
        F = len(outs[1][9]) - 1
        assert F > 20_000  # one flush per q/k/v/o projection, one per extra-large MLP weight
        # flush starts (the first call: values a skipped period each) are skipped over most of the flushes,
        # and so are their rank ranges (the later calls: one a rank partition), whatever W 8's boundaries cut
        assert calls[0] * 2 > F and sum(calls[2:]) * 2 > F, (stage, F, calls)


@pytest.mark.parametrize("seed", range(8))
def test_a_wrong_period_hint_is_refused(monkeypatch, seed):
    """The period comes from ``model.parallel.layer_repeat``; the replay checks it on the sizes themselves. A hint
    one tensor short of the layer (sizes that do not repeat with it) must give the plain walk's columns."""
    from advisor.model import parallel
    real = parallel.layer_repeat

    def wrong(inv):
        lr = real(inv)
        if lr is None or lr.unit < 2:
            return lr
        return parallel.LayerRepeat(lr.head, lr.unit - 1, lr.count, lr.prefix, lr.first)
    walk = _run(monkeypatch, 50_000 + seed, False)
    monkeypatch.setattr(parallel, "layer_repeat", wrong)
    assert _run(monkeypatch, 50_000 + seed, True) == walk


def _runs_model(rng: random.Random) -> Inventory:
    """Tensors without layer names (no ``layer_repeat``): runs of equal shapes, some of them long (the period-1
    repeat ``state._equal_sizes_run`` finds), short ones and frozen tensors between."""
    tensors = []
    for r in range(rng.randint(1, 5)):
        shape = rng.choice([(64, 64), (rng.randint(1, 90), rng.randint(1, 40)), (rng.randint(1, 300),)])
        length = rng.choice([1, 3, 63, 64, 65, rng.randint(64, 700)])
        tensors += [TensorSpec(f"w{r}_{i}", shape, rng.random() > 0.02, 0, "bf16") for i in range(length)]
    if not any(t.trainable for t in tensors):
        tensors.append(TensorSpec("last", (8, 8), True, 0, "bf16"))
    return Inventory("runs", tensors, "test", {})


def _runs_run(monkeypatch, seed: int, period: bool):
    rng = random.Random(seed)
    inv = _runs_model(rng)
    W = rng.choice([1, 2, 3, 4, 8, 9, 16, 64])
    largest = max(t.numel for t in inv.tensors if t.trainable)
    rbs = rng.choice([largest, largest + 1, 2 * largest - 1, 3 * largest + 5, rng.randint(1, 4 * largest),
                      rng.randint(1, 40 * largest)])
    cfg = _bf16_zero12_config(rng, rbs, W, offload_p=0.3, comm_fp32_p=None)
    return _replay_and_ledger(monkeypatch, cfg, inv, W, period)


@pytest.mark.parametrize("block", range(3))
def test_equal_size_runs_skip_equals_the_plain_walk(monkeypatch, block):
    """perf17b: without identical layers the period is the longest run of equal sizes (period 1, at least
    ``state.ZERO12_EQUAL_RUN`` long); its skip gives the plain walk's replay columns and ledger."""
    n = 20
    taken = _skips_taken(monkeypatch, _runs_run, [70_000 + block * 1000 + i for i in range(n)])
    assert taken >= n // 3, taken


def test_equal_sizes_run_found():
    """The run is the first longest one of equal consecutive sizes, and none shorter than the threshold."""
    k = state.ZERO12_EQUAL_RUN
    sizes = [5] * 3 + [7] * (k + 2) + [5] + [9] * (k + 2) + [7] * k
    assert state._equal_sizes_run(sizes, len(sizes)) == (3, 3 + k + 2, 1)
    short = [1, 2] * k
    assert state._equal_sizes_run(short, len(short)) is None
    assert state._equal_sizes_run([4] * k, k) == (0, k, 1)
    assert state._equal_sizes_run([4] * (k - 1), k - 1) is None
