"""Properties of the state ledger that follow from how ZeRO works (hypothesis).

Inputs are generated: configs (stage 0-3, fp16/bf16/fp32, fp32 gradient accumulation or not,
offload_optimizer and offload_param none/cpu/nvme, bucket and sub-group sizes, overlap_comm,
torch or fused/CPU Adam, parameter persistence), inventories (random tensor shapes, odd sizes,
frozen tensors, two param groups) and data-parallel world sizes. Every assertion is a relation
between ledger outputs (stage s against s+1, W against W', offloaded against not, the sum over
ranks against the unsharded stage-0 ledger, N against k x N) or a number derived by hand from a
cited formula of ../shared/reference/deepspeed-0.19.8-state-accounting.md (cited as §x).

Where DeepSpeed's real code paths break a textbook invariant, the exception is stated in the
test with its cause (the ledger item responsible), not dropped:

* ZeRO-3 allocates its gradient partition buffer (``grad_partitions_flat_buffer``, P3 x G) at
  initialize and keeps it (§4.4), while ZeRO-1/2 gradients live only from backward to step. In
  the steady state ZeRO-3 therefore holds G/W bytes per parameter that ZeRO-2 does not, and saves
  D x (1 - 1/W): stage 3 is larger at W = 1, ties at W = 2 (G = D) up to padding, and with fp32
  accumulation (G = 4, D = 2) up to W = 3.
* Persistent parameters (n_i <= stage3_param_persistence_threshold) are gathered in full on
  every rank (``lp_params_gathered``, §3.2, §4.4): they do not shrink with W.
* The ZeRO-3 ipg bucket is reduce_bucket_size x C of accelerator memory from initialize (§4.4,
  §10.2), whatever the model's size: a tiny model needs more accelerator memory at stage 3
  than at stage 2 (workspace, not model state: shown separately).
* At W = 1 ZeRO shards nothing but still pads the flat buffer to 2W elements (§3.1), and fp32
  models keep a separate fp32 master at stages 1-3 (§4.2 note, §4.4 note).
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import assume, example, given, note
from hypothesis import strategies as st

from advisor.config.effective import DTYPE_BYTES, effective_config
from advisor.model.inventory import Inventory, TensorSpec
from advisor.ledger.state import Cluster, Plan, compute_ledger, unsupported_reason

from robust_helpers import clean_env, run_cli


MS = ("parameters", "gradients", "master_weights", "optimizer_states")
PERSISTENT = ("persistent", "init")

# --- generators ----------------------------------------------------------------------------------


@st.composite
def inventories(draw, min_numel: int = 1, max_tensors: int = 6, frozen: bool = True) -> Inventory:
    """1-6 tensors of 1 or 2 dims (odd sizes included), each with >= ``min_numel`` elements,
    some frozen, in one or two optimizer param groups; at least one trainable."""
    n = draw(st.integers(1, max_tensors))
    ts = []
    for i in range(n):
        if draw(st.booleans()):
            shape: tuple[int, ...] = (draw(st.integers(min_numel, min_numel + 300_000)),)
        else:
            a = draw(st.integers(1, 300))
            shape = (a, draw(st.integers(max(1, -(-min_numel // a)), max(1, -(-min_numel // a)) + 3000)))
        trainable = i == 0 or not frozen or draw(st.integers(0, 4)) > 0
        ts.append(TensorSpec(f"t{i}", shape, trainable, draw(st.integers(0, 1)) if trainable else 0))
    return Inventory("generated", ts, source="hypothesis")


@st.composite
def knobs(draw, dtypes=("fp16", "bf16", "fp32"), offload=("none", "cpu", "nvme"), gacc=(None, "fp32"),
          persistence=(0, 100_000)) -> dict:
    return {
        "dtype": draw(st.sampled_from(dtypes)),
        "grad_accum": draw(st.sampled_from(gacc)),
        "oo": draw(st.sampled_from(offload)),
        "op": draw(st.sampled_from(offload)),
        "rbs": draw(st.sampled_from([1, 1000, 200_000, 5 * 10 ** 8]) | st.integers(1, 10 ** 9)),
        "overlap": draw(st.sampled_from([None, True, False])),
        "sgs": draw(st.sampled_from([1000, 10 ** 6, 10 ** 9])),
        "torch_adam": draw(st.booleans()),
        "persist": draw(st.sampled_from(persistence)),
        "pin": draw(st.booleans()),
        "contiguous": draw(st.booleans()),
    }


def make_config(k: dict, stage: int, **over) -> dict:
    k = {**k, **over}
    z: dict = {"stage": stage, "reduce_bucket_size": k["rbs"], "sub_group_size": k["sgs"],
               "stage3_param_persistence_threshold": k["persist"], "contiguous_gradients": k["contiguous"],
               "offload_optimizer": {"device": k["oo"], "nvme_path": "/local_nvme", "pin_memory": k["pin"]},
               "offload_param": {"device": k["op"], "nvme_path": "/local_nvme", "pin_memory": k["pin"]}}
    if k["overlap"] is not None:
        z["overlap_comm"] = k["overlap"]
    cfg: dict = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": z,
                 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": k["torch_adam"]}}}
    if k["dtype"] != "fp32":
        cfg[k["dtype"]] = {"enabled": True}
    if k["grad_accum"]:
        cfg["data_types"] = {"grad_accum_dtype": k["grad_accum"]}
    return cfg


def ledger(cfg: dict, inv: Inventory, W: int):
    ec = effective_config(cfg)
    assume(unsupported_reason(ec, W) is None)
    return compute_ledger(Plan(ec, inv, Cluster(world_size=W)))


def worst(led, tier: str | None = "accelerator", classes=MS, lives=PERSISTENT, items=None, skip_items=()) -> int:
    """Largest per-rank sum over roles, filtered."""
    return max((sum(e.bytes for e in rl.entries
                    if (tier is None or e.tier == tier) and e.cls in classes and (lives is None or e.life in lives)
                    and (items is None or e.item in items) and e.item not in skip_items)
                for rl in led.ranks), default=0)


def training_peak(led, tier: str = "accelerator", classes=MS) -> int:
    """Largest bytes of ``classes`` (None: every class) on ``tier`` live at one training instant (timeline.role_timeline;
    load, initialize and save left out), over the rank roles."""
    from advisor.ledger.timeline import resolve_load, role_timeline
    skip = ("load", "initialize", "save")
    best = 0
    for rl in led.ranks:
        tl = role_timeline(led, rl, resolve_load(led.plan.config))
        for inst, rows in zip(tl.instants, tl.entries):
            if inst.phase not in skip:
                best = max(best, sum(n for _, t, c, n in rows if t == tier and (classes is None or c in classes)))
    return best


def item_bytes(led, item: str, tier: str | None = None, rank: int = 0) -> int:
    rl = led.role_of(rank)
    return sum(e.bytes for e in rl.entries if e.item == item and (tier is None or e.tier == tier))


def summed_over_ranks(led, item: str) -> int:
    """Sum over every data-parallel rank (roles weighted by how many ranks they stand for)."""
    return sum(len(rl.ranks) * sum(e.bytes for e in rl.entries if e.item == item) for rl in led.ranks)


def _grad_bytes(k: dict) -> int:
    return 4 if k["grad_accum"] == "fp32" else DTYPE_BYTES[k["dtype"]]


# --- stage monotonicity ----------------------------------------------------------------------------

@given(k=knobs(), W=st.integers(2, 64), data=st.data())
def test_steady_state_model_states_do_not_grow_with_the_stage(k, W, data):
    """Steady state (persistent buffers, what the engine holds after the first step) of the
    worst rank's model states on the accelerator: stage 0 >= 1 >= 2, and stage 3 <= stage 2 once
    the buffers ZeRO-3 keeps that ZeRO-2 does not (the gradient partition buffer, the persistent
    parameters gathered in full) are set aside. Tensors have >= 64 W elements so that the
    alignment padding (< 2W per group at ZeRO-1/2, < W per tensor at ZeRO-3, §3) is small."""
    inv = data.draw(inventories(min_numel=64 * W))
    m = {}
    leds = {}
    for s in range(4):
        ec = effective_config(make_config(k, s))
        if unsupported_reason(ec, W) is None:
            leds[s] = compute_ledger(Plan(ec, inv, Cluster(W)))
            m[s] = worst(leds[s])
    note(f"per-stage steady accelerator model states: {m}")
    for s in (0, 1):
        if s in m and s + 1 in m:
            assert m[s + 1] <= m[s], f"stage {s + 1} holds more than stage {s}"
    if 2 in m and 3 in m:
        l3 = leds[3]
        grad_buf = max(item_bytes(l3, "grad_partitions_flat_buffer", "accelerator", r.rank) for r in l3.ranks)
        gathered = max(item_bytes(l3, "lp_params_gathered", "accelerator", r.rank) for r in l3.ranks)
        # Frozen persistent parameters hold their partition *and* the full gathered copy at
        # stage 3 (frozen_params), against one full copy at stages 0-2: compare trainable state.
        frozen3 = max(item_bytes(l3, "frozen_params", "accelerator", r.rank) for r in l3.ranks)
        frozen2 = min(item_bytes(leds[2], "frozen_params", "accelerator", r.rank) for r in leds[2].ranks)
        assert m[3] - grad_buf - gathered - frozen3 <= m[2] - frozen2
        D, G = DTYPE_BYTES[k["dtype"]], _grad_bytes(k)
        if k["persist"] == 0 and G < D * (W - 1):
            # The grad buffer (G/W per parameter) is paid for by the sharded 16-bit parameters
            # (D x (1 - 1/W) per parameter saved): the textbook order holds.
            assert m[3] <= m[2]


@given(k=knobs(dtypes=("fp16", "bf16"), gacc=(None,)), W=st.integers(2, 64), data=st.data())
def test_peak_model_states_never_exceed_stage_0_16bit(k, W, data):
    """The training peak of the model states (the timeline's maximum over forward, backward, the
    reduce and the optimizer steps of what is live at once; load, initialize and save left out)
    for 16-bit models accumulating in the model dtype: no stage above stage 0's on the worst rank
    (stage 3 without persistent parameters). Not the sum of every lifetime: ZeRO-3's transients
    (the first backward's re-fetch, the step's flat copy) are never live together, and their sum
    exceeded stage 2's for a one-tensor model (W 2, 128 elements: 1,664 B against 1,536 B)."""
    inv = data.draw(inventories(min_numel=64 * W))
    k = {**k, "persist": 0}
    m = [training_peak(ledger(make_config(k, s), inv, W)) for s in range(4)]
    note(f"per-stage training peak of the model states on the accelerator: {m}")
    # No ZeRO stage holds more at its peak than stage 0's full replica. The order among stages 1-3
    # is not a law at the peak, only at rest (test_steady_state_model_states_do_not_grow_with_the_stage): found
    # here and true of DeepSpeed, ZeRO-2 with CPU offload clones a gradient of more than
    # reduce_bucket_size in its hook beside the autograd one (stage_1_and_2.py l.1443-1446; engine
    # cell z2_bf16_oo_cpu_bigtensor_w2), and ZeRO-3 holds a module gathered beside its partition
    # (one 128-element tensor, W 2, CPU offload: 384 B against ZeRO-2's 256 B).
    assert max(m[1:]) <= m[0]


@pytest.mark.parametrize("gacc, floor", [("bf16", True), ("fp32", False)])
def test_accumulation_unlike_the_model_at_stage_1_declares_what_it_leaves_out(gacc, floor):
    """Why the peak property above keeps grad_accum_dtype to the model's: at ZeRO-1 without offload a 16-bit
    accumulation dtype unlike the model's (fp16 model, bf16 accumulation) leaves the flushes' casts and the
    param.grad_accum copies (stage_1_and_2.py l.1237, l.2377) unitemised, so stage 1 would look smaller than it
    is (an engine probe, README's M104 list: forward:2 +50%); the ledger must say so. fp32 accumulation is
    itemised since the ZeRO-1 fp32-accumulation walk (state.zero1_compact_grad_accum, engine cells
    z1_fp16_gaccfp32_*): then there is nothing to declare, and the fp32 grad_accum copies are entries."""
    inv = Inventory("x", [TensorSpec("w", (4096, 17))])
    cfg = make_config({"dtype": "fp16", "grad_accum": gacc, "oo": "none", "op": "none", "rbs": 1000,
                       "overlap": None, "sgs": 10 ** 9, "torch_adam": False, "persist": 0, "pin": True,
                       "contiguous": True}, 1)
    led = compute_ledger(Plan(effective_config(cfg), inv, Cluster(4)))
    assert led.wrapper == "DeepSpeedZeroOptimizer"
    declared = [x for x in led.excluded if "grad_accum" in x]
    assert bool(declared) == floor, led.excluded
    assert bool(led.peak_lower_bound) == floor, led.peak_lower_bound
    if not floor:
        # the hooks' fp32 grad_accum (4 B per element of the one 4096 x 17 tensor, l.1237) is an entry
        hooks = sum(e.bytes for e in led.ranks[0].entries if e.item == "grad_accum_hooks")
        assert hooks >= 4096 * 17 * 4, hooks


def _k(**over) -> dict:
    base = {"dtype": "bf16", "grad_accum": None, "oo": "none", "op": "none", "rbs": 1000, "overlap": None,
            "sgs": 10 ** 9, "torch_adam": False, "persist": 0, "pin": True, "contiguous": True}
    base.update(over)
    return base


@pytest.mark.parametrize("dtype,n,expect", [
    # bf16, N = 1001 (odd), W = 1: the flat buffer is padded to 2W = 2 elements (§3.1): one
    # padding element costs D + 4 (master) + 8 (moments) = 14 bytes more at stage 1 (§4.1, §4.2).
    ("bf16", 1001, 14),
    # fp32, N = 1001, W = 1: stage 0 holds 4N params + 8N moments (no master, §4.1); stage 1 holds
    # 4 N_pad params + a *separate* 4 N_pad fp32 master + 8 N_pad moments (§4.2 note):
    # 16 x 1002 - 12 x 1001 = 4020 bytes more.
    ("fp32", 1001, 4020),
])
def test_world_size_1_exception_stage_1_vs_0(dtype, n, expect):
    inv = Inventory("x", [TensorSpec("w", (n,))])
    m0 = worst(compute_ledger(Plan(effective_config(make_config(_k(dtype=dtype), 0)), inv, Cluster(1))))
    m1 = worst(compute_ledger(Plan(effective_config(make_config(_k(dtype=dtype), 1)), inv, Cluster(1))))
    assert m1 - m0 == expect


def test_world_size_2_exception_stage_3_grad_buffer():
    """bf16, W = 2, two tensors of 4097 and 3 elements. Stage 2 (§3.1, §4.2): N = 4100,
    N_pad = A_4(4100) = 4100, P = 2050: 2 x 4100 + 12 x 2050 = 32 800 bytes. Stage 3 (§3.2,
    §4.4): p = [2049, 2], P3 = 2051: params 2 P3 + grad buffer 2 P3 + master and moments 12 P3
    = 16 x 2051 = 32 816 bytes: 16 more, all of it per-tensor padding; without the grad buffer
    (4102 bytes) stage 3 is below stage 2."""
    inv = Inventory("x", [TensorSpec("a", (4097,)), TensorSpec("b", (3,))])
    m2 = compute_ledger(Plan(effective_config(make_config(_k(), 2)), inv, Cluster(2)))
    m3 = compute_ledger(Plan(effective_config(make_config(_k(), 3)), inv, Cluster(2)))
    assert worst(m2) == 32_800
    assert worst(m3) == 32_816
    assert item_bytes(m3, "grad_partitions_flat_buffer", "accelerator") == 4102
    assert worst(m3) - 4102 < worst(m2)


def test_stage_3_ipg_bucket_makes_a_tiny_model_bigger():
    """Workspace, not model state: the default reduce_bucket_size (5e8 elements) allocates a
    1 GB bf16 ipg bucket at initialize at stage 3 (§4.4; measured 1,000,000,000 B for a 43 k
    model, §8), kept for the whole run, while stage 2 allocates its bucket only inside backward."""
    inv = Inventory("x", [TensorSpec("w", (64, 301)), TensorSpec("b", (301,))])
    cfg2 = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}
    cfg3 = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}
    l2 = compute_ledger(Plan(effective_config(cfg2), inv, Cluster(2)))
    l3 = compute_ledger(Plan(effective_config(cfg3), inv, Cluster(2)))
    steady2 = worst(l2, classes=MS + ("workspace",))
    steady3 = worst(l3, classes=MS + ("workspace",))
    bucket = [e for e in l3.ranks[0].entries if e.item == "ipg_bucket"]
    assert [(e.tier, e.bytes, e.life) for e in bucket] == [("accelerator", 10 ** 9, "persistent")]
    assert steady3 > steady2
    # Without the bucket, stage 3 is back at stage 2's size up to the two other stage-3 buffers
    # named in the module docstring (the gradient partition buffer and, with the default
    # persistence threshold of 1e5 elements, both tensors gathered in full on every rank).
    others = item_bytes(l3, "grad_partitions_flat_buffer") + item_bytes(l3, "lp_params_gathered")
    assert others > 0
    assert steady3 - 10 ** 9 - others <= steady2


# --- data-parallel world size at stage 3 --------------------------------------------------------------

@given(k=knobs(), W=st.integers(1, 48), extra=st.integers(1, 80), data=st.data())
def test_stage_3_model_states_do_not_grow_with_the_world_size(k, W, extra, data):
    """Stage 3, W -> W' > W: each rank's steady model states on the accelerator do not grow,
    except by the growth of the persistent parameters gathered in full, trainable or frozen (they do
    not shard, §3.2, and at W = 1 alias their partition)."""
    inv = data.draw(inventories())
    W2 = W + extra
    a = ledger(make_config(k, 3), inv, W)
    b = ledger(make_config(k, 3), inv, W2)
    # Gathered persistent parameters: trainable (lp_params_gathered) and frozen (frozen_params_gathered;
    # frozen_params, their partitions, as before).
    ga = max(item_bytes(a, "lp_params_gathered", "accelerator", r.rank) + item_bytes(a, "frozen_params", "accelerator", r.rank)
             + item_bytes(a, "frozen_params_gathered", "accelerator", r.rank) for r in a.ranks)
    gb = max(item_bytes(b, "lp_params_gathered", "accelerator", r.rank) + item_bytes(b, "frozen_params", "accelerator", r.rank)
             + item_bytes(b, "frozen_params_gathered", "accelerator", r.rank) for r in b.ranks)
    assert worst(b) - worst(a) <= max(0, gb - ga)
    if k["persist"] == 0:
        assert worst(b) <= worst(a)
    # Off the accelerator (host and NVMe together) per rank shrinks as well, up to the NVMe
    # alignment (§5.3). Not per tier: a ZeRO-3 sub-group whose fp32 bytes fall below 1 MiB is not
    # swapped and stays in host memory (§5.1), so growing W can move bytes from NVMe to host.
    def off(led):
        return max(sum(e.bytes for e in rl.entries if e.tier != "accelerator" and e.cls in MS
                       and e.life in PERSISTENT and e.item != "max_in_cpu_buffer") for rl in led.ranks)
    assert off(b) <= off(a) + 4 * 1024 * (len(inv.tensors) + sum(t.numel for t in inv.tensors) // k["sgs"] + 1)


# --- offloading moves bytes, keeps totals ----------------------------------------------------------------

OPT_ITEMS = ("fp32_master", "exp_avg", "exp_avg_sq")


def _total(led, item: str, rank: int = 0, tiers=None) -> int:
    rl = led.role_of(rank)
    return sum(e.bytes for e in rl.entries if e.item == item and (tiers is None or e.tier in tiers))


@given(k=knobs(offload=("none",)), stage=st.integers(1, 3), dev=st.sampled_from(["cpu", "nvme"]),
       W=st.integers(1, 16), data=st.data())
def test_offload_optimizer_moves_master_and_moments(k, stage, dev, W, data):
    """offload_optimizer moves the fp32 master and the Adam moments off the accelerator and keeps
    their total: exactly with cpu (and with "nvme" at stage 1/2, which is CPU offload, §2.2);
    at stage 3 with nvme the swap files pad each sub-group to 256 elements (§5.3), so the total
    grows by less than 256 x 4 bytes per sub-group and item. (Staging buffers DeepSpeed adds
    for offload are other items: not compared.)"""
    inv = data.draw(inventories())
    k = {**k, "torch_adam": False}
    base = ledger(make_config(k, stage), inv, W)
    off = ledger(make_config(k, stage, oo=dev), inv, W)
    ec = effective_config(make_config(k, stage, oo=dev))
    assume(ec.offload_optimizer_effective != "none")
    for r in range(min(W, 3)):
        for item in OPT_ITEMS:
            before, after = _total(base, item, r), _total(off, item, r)
            assert _total(off, item, r, tiers=("accelerator",)) == 0, f"{item} still on the accelerator"
            if ec.offload_optimizer_effective == "cpu":
                assert after == before, item
            else:
                n_sub = len(inv.tensors) + sum(t.numel for t in inv.tensors) // k["sgs"] + 1
                assert before <= after < before + n_sub * 256 * 4, item


@given(k=knobs(offload=("none",), persistence=(0,)), W=st.integers(1, 16), data=st.data())
def test_offload_param_moves_partitions(k, W, data):
    """offload_param cpu at stage 3 moves the 16-bit partitions to pinned host memory, same bytes
    (§4.4). Below stage 3 it is ignored (§2.2): the ledger is unchanged."""
    inv = data.draw(inventories())
    base = ledger(make_config(k, 3), inv, W)
    off = ledger(make_config(k, 3, op="cpu"), inv, W)
    for r in range(min(W, 3)):
        assert _total(off, "lp_param_partitions", r) == _total(base, "lp_param_partitions", r)
        assert _total(off, "lp_param_partitions", r, tiers=("accelerator",)) == 0
    for stage in (0, 1, 2):
        a = ledger(make_config(k, stage), inv, W)
        b = ledger(make_config(k, stage, op=data.draw(st.sampled_from(["cpu", "nvme"]))), inv, W)
        assert _entries(a) == _entries(b)


def _entries(led) -> list:
    return [sorted((e.tier, e.cls, e.item, e.bytes, e.life) for e in rl.entries) + [tuple(rl.ranks)]
            for rl in led.ranks]


@given(k=knobs(offload=("none",)), stage=st.sampled_from([1, 2]), W=st.integers(1, 16), data=st.data())
def test_nvme_optimizer_offload_below_stage_3_is_cpu_offload(k, stage, W, data):
    """§2.2, §10.6: at stage 1/2 offload_optimizer nvme allocates exactly the CPU-offload state
    (measured: D_z2_bf16_optnvme), except stage 1 + bf16 + fp32 accumulation, where
    BF16_Optimizer ignores the block and everything stays on the accelerator."""
    inv = data.draw(inventories())
    nv = ledger(make_config(k, stage, oo="nvme"), inv, W)
    if stage == 1 and k["dtype"] == "bf16" and k["grad_accum"] == "fp32":
        assert _entries(nv) == _entries(ledger(make_config(k, stage), inv, W))
    else:
        assert _entries(nv) == _entries(ledger(make_config(k, stage, oo="cpu"), inv, W))


# --- shards sum to the whole ---------------------------------------------------------------------------------

@given(k=knobs(offload=("none", "cpu")), stage=st.integers(1, 3), W=st.integers(1, 64), data=st.data())
def test_shards_sum_to_the_unsharded_class_plus_padding(k, stage, W, data):
    """Sum over ranks of the Adam moments and the fp32 master = the stage-0 (unsharded) ledger's
    bytes + padding, padding >= 0 and below one alignment unit per rank: 2 elements per param
    group at ZeRO-1/2 (the group is padded to 2W, §3.1), 1 element per tensor at ZeRO-3 (each
    tensor is padded to a multiple of W, §3.2). Every rank holds the same shard size."""
    inv = data.draw(inventories())
    k = {**k, "torch_adam": False}
    if k["dtype"] == "bf16" and k["grad_accum"] == "fp32":
        k["grad_accum"] = None  # stage 0 refuses it (§2.2): no unsharded reference
    whole = ledger(make_config(k, 0), inv, 1)
    part = ledger(make_config(k, stage), inv, W)
    groups = len(inv.groups())
    trainable = sum(1 for t in inv.tensors if t.trainable)
    unit = (2 * groups) if stage in (1, 2) else trainable  # elements per rank
    for item in ("exp_avg", "exp_avg_sq"):
        full = _total(whole, item)
        assert full == 4 * inv.trainable_numel  # fp32 moments, one per trainable element (§4.1)
        pad = summed_over_ranks(part, item) - full
        assert 0 <= pad < W * unit * 4, (item, pad)
        assert len({sum(e.bytes for e in rl.entries if e.item == item) for rl in part.ranks}) == 1
    if k["dtype"] != "fp32":
        full = _total(whole, "fp32_master")
        pad = summed_over_ranks(part, "fp32_master") - full
        assert 0 <= pad < W * unit * 4


# --- linear in the parameter count -------------------------------------------------------------------------

@given(k=knobs(offload=("none", "cpu"), persistence=(0,)), stage=st.integers(0, 3), W=st.integers(1, 32),
       scale=st.integers(2, 8), data=st.data())
def test_model_states_scale_linearly_with_the_parameter_count(k, stage, W, scale, data):
    """Scaling every tensor's first dimension by s scales each rank's steady model-state bytes
    (all tiers) by s, up to partition padding: at most (s + 1) x (tensors + 2W per group) padding
    elements per rank (ZeRO-1/2 flat buffers held whole on every rank carry the group's padding
    to 2W, §3.1), times at most 32 bytes per element (D + G + 4 master + 8 moments + 4
    fp32 grad <= 24, rounded up), plus the per-tensor Adam step counters (4 bytes, §2.1)."""
    inv = data.draw(inventories(min_numel=1, frozen=False))
    big = Inventory("scaled", [TensorSpec(t.name, (t.shape[0] * scale, *t.shape[1:]), t.trainable, t.group)
                               for t in inv.tensors])
    a = ledger(make_config(k, stage), inv, W)
    b = ledger(make_config(k, stage), big, W)
    T, G = len(inv.tensors), len(inv.groups())
    slack = (scale + 1) * (T + 2 * W * G) * 32 + (scale + 1) * 4 * T * 2
    for r in sorted({0, W - 1}):
        ma = sum(e.bytes for e in a.role_of(r).entries if e.cls in MS and e.life in PERSISTENT)
        mb = sum(e.bytes for e in b.role_of(r).entries if e.cls in MS and e.life in PERSISTENT)
        assert abs(mb - scale * ma) <= slack, (ma, mb, slack)


# --- generate's plan, fed back ---------------------------------------------------------------------------

GEN_CASES = [
    ("llama-3.2-1b", "dgx-h100", 1, 8, 64, 2048),
    ("llama-2-7b", "dgx-h100", 1, 8, 32, 4096),
    ("llama-2-13b", "dgx-h100", 2, 8, 256, 4096),
]


@pytest.mark.parametrize("model,hw,nodes,gpn,batch,seq", GEN_CASES)
def test_generated_config_lints_clean_and_fits(tmp_path, model, hw, nodes, gpn, batch, seq):
    """generate's best plan: lint finds nothing in what it wrote (idempotent: lint adds no
    findings), and estimate of that file on the same model and cluster fits every tier within
    the requested margin (10%)."""
    out = tmp_path / "ds_config.json"
    env = clean_env(PATH=str(tmp_path / "nobin"))
    p = run_cli(["generate", "--model", model, "--hardware", hw, "--nodes", str(nodes), "--gpus-per-node", str(gpn),
                 "--global-batch", str(batch), "--seq-len", str(seq), "--margin", "10%", "--output", str(out),
                 "--format", "json"], env=env, timeout=300)
    assert "Traceback" not in p.stderr
    if p.returncode == 1:
        pytest.skip(f"nothing fits for {model} on {nodes}x{gpn} {hw}: {p.stderr[-300:]}")
    assert p.returncode == 0, p.stderr[-2000:]
    cfg = json.loads(out.read_text())
    lint = run_cli(["lint", "--format", "json", "--fail-on", "info", "--model", model,
                    "--world-size", str(nodes * gpn), str(out)], env=env)
    findings = json.loads(lint.stdout)["files"][0]["findings"]
    assert findings == [] and lint.returncode == 0, findings
    plan = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
    args = ["estimate", str(out), "--model", model, "--world-size", str(nodes * gpn), "--gpus-per-node", str(gpn),
            "--hardware", hw, "--seq-len", str(seq), "--format", "json"]
    ckpt = cfg.get("activation_checkpointing") or {}
    best = (plan.get("plans") or plan.get("top") or [{}])[0] if isinstance(plan, dict) else {}
    if best.get("checkpointing") in ("full", True) or ckpt.get("partition_activations") or best.get("activation_checkpointing"):
        args += ["--checkpointing", "full"]
    est = run_cli(args, env=env)
    assert est.returncode == 0, est.stdout[-1500:] + est.stderr[-1500:]
    doc = json.loads(est.stdout)
    for row in doc["fit"]:
        if row["capacity"] is not None:
            assert row["need"] <= 0.9 * row["capacity"] * 1.0000001, row


# --- the exceptions, measured on the real engine ---------------------------------------------------------

def _have_engine() -> bool:
    import importlib.util
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "deepspeed"))


@pytest.mark.engine
@pytest.mark.skipif(not _have_engine(), reason="torch and deepspeed are not importable (pip install -e '.[engine]')")
def test_engine_shows_the_stage_3_exceptions():
    """DeepSpeed itself (advisor.engine.measure, W = 2, CPU accelerator, a 19 565-parameter bf16 model):
    at stage 3 the steady state holds an ipg bucket of reduce_bucket_size x 2 bytes from
    initialize and the gradient partition buffer, neither of which stage 2 keeps after the step,
    so the tiny model's steady state is larger at stage 3 than at stage 2; with the default
    persistence threshold both tensors are also gathered in full on every rank. The ledger
    agrees with the engine on each of these items."""
    from advisor.ledger.state import fold_for_cpu, model_state_bytes
    from advisor.engine.measure import run_measure_many

    inv = Inventory("tiny", [TensorSpec("w", (64, 301)), TensorSpec("b", (301,))])
    rbs = 200_000
    base = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}}}
    cells = {
        "z2": {**base, "zero_optimization": {"stage": 2, "reduce_bucket_size": rbs}},
        "z3": {**base, "zero_optimization": {"stage": 3, "reduce_bucket_size": rbs,
                                             "stage3_param_persistence_threshold": 0}},
        "z3p": {**base, "zero_optimization": {"stage": 3, "reduce_bucket_size": rbs}},
    }
    res = {c.id: c for c in run_measure_many([{"id": k, "config": v, "inventory": inv, "steps": 1}
                                              for k, v in cells.items()], world_size=2, timeout_s=420)}
    steady = {k: res[k].ranks[0]["snapshots"]["steady"] for k in cells}
    total = {k: sum(sum(t.values()) for t in steady[k].values()) for k in cells}
    assert sum(steady["z3"]["ipg_bucket"].values()) == rbs * 2
    assert "ipg_bucket" not in steady["z2"] or sum(steady["z2"]["ipg_bucket"].values()) == 0
    assert sum(steady["z3"]["grad_partitions_flat_buffer"].values()) > 0
    assert total["z3"] > total["z2"]
    assert sum(steady["z3p"].get("lp_params_gathered", {}).values()) > 0
    assert sum(steady["z3"].get("lp_params_gathered", {}).values()) == 0
    for k, cfg in cells.items():
        led = compute_ledger(Plan(effective_config(cfg), inv, Cluster(2)))
        want = fold_for_cpu(model_state_bytes(led.role_of(0), lives=("persistent", "init")))
        for item in ("ipg_bucket", "grad_partitions_flat_buffer", "lp_params_gathered", "lp_param_partitions"):
            got = {t: b for t, b in steady[k].get(item, {}).items() if b}
            assert got == want.get(item, {}), (k, item, got, want.get(item))
