"""Unit tests of advisor.ledger.state against hand arithmetic from cited formulas.

Figures come from ../shared/reference/deepspeed-0.19.8-state-accounting.md (section numbers
below), whose measured examples (N = 43 209 tiny MLP; 2.1 M MLP) were also reproduced by
tests/engine against the real engine, and from the shared cases C05, C06 and C08.
"""

from __future__ import annotations

import json
import os

import pytest

from advisor.config.effective import effective_config
from advisor.model.inventory import Inventory, TensorSpec, from_dict, from_param_count
from advisor.ledger.state import (Cluster, Plan, compute_ledger, model_state_bytes, select_optimizer,
                            unsupported_reason)
from advisor.config.loading import load_config

from tests.conftest import CASES as _CASES  # noqa: E402  (tests/data/cases)
CASES = str(_CASES)

TINY = from_dict({"tensors": [{"shape": [301, 64]}, {"shape": [301]}, {"shape": [77, 301]}, {"shape": [77]},
                              {"shape": [5, 77]}, {"shape": [5]}]}, "tiny")
BIG = from_dict({"tensors": [{"shape": [1031, 1024]}, {"shape": [1031]}, {"shape": [1029, 1031]}, {"shape": [1029]}]},
                "big")


def cfg(stage, dtype="bf16", oo="none", op="none", top=None, **zero):
    z = {"stage": stage, "reduce_bucket_size": 50000, "stage3_param_persistence_threshold": 100, **zero}
    if oo != "none":
        z["offload_optimizer"] = {"device": oo, "nvme_path": "/x"}
    if op != "none":
        z["offload_param"] = {"device": op, "nvme_path": "/x", **zero.pop("_op", {})}
    c = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {}}, "zero_optimization": z}
    if dtype != "fp32":
        c[dtype] = {"enabled": True}
    c.update(top or {})
    return c


def ledger(config, inv, W):
    return compute_ledger(Plan(effective_config(config), inv, Cluster(world_size=W)))


def items(led, r, tier=None):
    out = {}
    for e in led.rank(r).entries:
        if tier is None or e.tier == tier:
            out[e.item] = out.get(e.item, 0) + e.bytes
    return out


def case(name):
    d = os.path.join(CASES, name)
    with open(os.path.join(d, "expect.json")) as fh:
        exp = json.load(fh)
    return load_config(os.path.join(d, "config.json")).data, exp


# ---- shared cases -----------------------------------------------------------------------------

def test_C05_zero2_bucket_pair():
    """C05-zero2-bucket-pair: ipg bucket RBS x D x (1 + overlap_comm) (§4.2, stage_1_and_2.py
    setup_buckets): 500,000,000 x 2 B x 2 = 2,000,000,000 bytes per rank during backward."""
    config, exp = case("C05-zero2-bucket-pair")
    led = ledger(config, from_param_count(340_000_000), 8)
    want = next(f["value"] for f in exp["figures"] if "ipg bucket" in f["name"])
    for r in (0, 7):
        (e,) = led.rank(r).by_item("ipg_bucket")
        assert (e.tier, e.cls, e.life) == ("accelerator", "workspace", "in_backward")  # freed by the backward epilogue
        assert e.bytes == want == 500_000_000 * 2 * 2
        assert "setup_buckets" in e.source
    # the pair is larger than all of the model's 16-bit gradients (340e6 x 2 B)
    assert want > 340_000_000 * 2


def test_C05_zero2_bucket_pair_overlap_off():
    """C05-zero2-bucket-pair, same config with overlap_comm false: 1,000,000,000 bytes."""
    config, _ = case("C05-zero2-bucket-pair")
    config["zero_optimization"]["overlap_comm"] = False
    led = ledger(config, from_param_count(340_000_000), 8)
    assert items(led, 3)["ipg_bucket"] == 1_000_000_000


def test_C06_zero2_32b_8gpu():
    """C06-zero2-32b-8gpu: bf16 ZeRO-2, W = 8, N = 32,763,876,352 (a multiple of 2W, no padding):
    parameters N x 2, master P x 4, moments 2 x P x 4 with P = N / 8 (§4.2)."""
    config, exp = case("C06-zero2-32b-8gpu")
    N = 32_763_876_352
    led = ledger(config, from_param_count(N), 8)
    P = N // 8
    assert P == 4_095_484_544
    want = {f["name"]: f["value"] for f in exp["figures"]}
    for r in range(8):
        rl = led.rank(r)
        assert rl.total("accelerator", "parameters") == N * 2 == want["accelerator parameters"] == 65_527_752_704
        assert rl.total("accelerator", "master_weights") == P * 4 == want["accelerator master_weights"] == 16_381_938_176
        assert (rl.total("accelerator", "optimizer_states") == 2 * P * 4 == want["accelerator optimizer_states"]
                == 32_763_876_352)
        assert items(led, r)["ipg_bucket"] == 500_000_000 * 2  # overlap_comm false
        # at least the bf16 partition kept for the step, plus the fp32 partition in the step
        assert items(led, r)["averaged_gradients"] >= P * 2 == 8_190_969_088
        assert items(led, r)["fp32_grad"] == P * 4 == 16_381_938_176
    assert led.wrapper == "DeepSpeedZeroOptimizer" and led.basic_optimizer == "FusedAdam"


def _llama_like_6_7b() -> Inventory:
    """A LLaMA-7B-shaped inventory (hidden 4096, 32 layers, MLP 11008, vocab 32000)."""
    h, f, v = 4096, 11008, 32000
    ts = [TensorSpec("embed", (v, h))]
    for i in range(32):
        ts += [TensorSpec(f"l{i}.{n}", (h, h)) for n in ("q", "k", "v", "o")]
        ts += [TensorSpec(f"l{i}.gate", (f, h)), TensorSpec(f"l{i}.up", (f, h)), TensorSpec(f"l{i}.down", (h, f))]
        ts += [TensorSpec(f"l{i}.ln1", (h,)), TensorSpec(f"l{i}.ln2", (h,))]
    ts += [TensorSpec("norm", (h,)), TensorSpec("lm_head", (v, h))]
    return Inventory("llama-like-6.7b", ts)


def test_C08_pinned_buffers_exceed_host_params():
    """C08-pinned-buffers-exceed-host with --params 6.7e9 (one tensor): the itemised pinned
    buffers of the case, and a pinned total of at least 41.4e9 (§5.2)."""
    config, exp = case("C08-pinned-buffers-exceed-host")
    floor = next(f for f in exp["figures"] if "host total" in f["name"])
    led = ledger(config, Inventory("one tensor", [TensorSpec("params", (6_700_000_000,))]), 1)
    it = items(led, 0, "host_pinned")
    # 5 x A_512(1e9) x 2 B (partitioned_param_swapper.py _configure_aio)
    assert it["param_swap_buffers"] == 5 * 1_000_000_000 * 2 == 10_000_000_000
    # P3 x G with G = 2 (fp16 grad partition buffer, pinned: stage3.py __init__)
    assert it["grad_partitions_flat_buffer"] == 6_700_000_000 * 2 == 13_400_000_000
    # min(P3, max_in_cpu) x D: no sub-group fits it, allocated anyway (stage3.py)
    assert it["max_in_cpu_buffer"] == 1_000_000_000 * 2
    # 4 x A_256(largest sub-group) x 4 B; the one sub-group is the whole 6.7e9-element tensor
    assert it["opt_swap_buffers"] == 4 * 6_700_000_000 * 4 >= 16_000_000_000
    total = led.rank(0).total("host_pinned")
    assert total >= floor["value"] * (1 - floor["rel_tol"])
    assert total >= 41_400_000_000


def test_C08_pinned_buffers_exceed_host_real_shapes():
    """C08-pinned-buffers-exceed-host with a 6.7B model of real tensor shapes: sub-groups of
    ~1e9 elements, so the pinned total is the case's figure within its tolerance."""
    config, exp = case("C08-pinned-buffers-exceed-host")
    floor = next(f for f in exp["figures"] if "host total" in f["name"])
    inv = _llama_like_6_7b()
    assert abs(inv.numel - 6.7e9) / 6.7e9 < 0.01
    led = ledger(config, inv, 1)
    total = led.rank(0).total("host_pinned")
    assert total >= floor["value"]
    assert abs(total - floor["value"]) <= floor["rel_tol"] * floor["value"]


# ---- §3.1 ZeRO-1/2 padding and straddling (measured example N = 43,209, W = 2) ----------------

def test_zero2_padding_and_straddling_w2():
    """N_pad = A_4(43,209) = 43,212, P = 21,606; I_0 = 42,742, I_1 = 23,644; kept grads
    (I_r + P - Cov_r) x 2 = 85,484 / 47,294 (§3.1, §4.2 stage_1_and_2.py)."""
    led = ledger(cfg(2, "bf16"), TINY, 2)
    for r in (0, 1):
        it = items(led, r)
        assert it["lp_params_flat"] == 43_212 * 2
        assert it["fp32_master"] == it["exp_avg"] == it["exp_avg_sq"] == 21_606 * 4
        assert it["ipg_bucket"] == 50_000 * 2
    assert items(led, 0)["averaged_gradients"] == (42_742 + 0) * 2 == 85_484
    # rank 1 covers 21,603 real elements of its 21,606 (3 padding)
    assert items(led, 1)["averaged_gradients"] == (23_644 + 3) * 2 == 47_294


def test_zero2_fp16_w4_kept_grads():
    """W = 4: N_pad = A_8(43,209) = 43,216, P = 10,804 (§3.1); reference D_z2_fp16_ws4 kept
    grads 38,528 / 85,484 / 46,354 / 47,302 bytes."""
    led = ledger(cfg(2, "fp16"), TINY, 4)
    assert [items(led, r)["averaged_gradients"] for r in range(4)] == [38_528, 85_484, 46_354, 47_302]
    assert items(led, 0)["fp32_master"] == 10_804 * 4


def test_zero2_cpu_offload_buffers():
    """§4.2 offload column: master and fp32 grad partitions pinned, moments pageable,
    bit16 staging P x D pinned, temp grad buffers max_i n_i x D (23,177 x 2)."""
    led = ledger(cfg(2, "bf16", "cpu"), TINY, 2)
    pinned = items(led, 0, "host_pinned")
    assert pinned == {"fp32_master": 86_424, "fp32_grad": 86_424, "offload_bit16_param_buffer": 43_212,
                      "offload_temp_grad_cpu": 46_354}
    assert items(led, 0, "host_pageable")["exp_avg"] == 86_424
    assert items(led, 0, "accelerator")["offload_temp_grad_accel"] == 46_354
    assert led.basic_optimizer == "DeepSpeedCPUAdam"


def test_zero1_nvme_is_cpu_offload():
    """offload_optimizer nvme at stage 1/2 allocates exactly the cpu-offload state (§2.2)."""
    a = ledger(cfg(1, "bf16", "nvme"), TINY, 2)
    b = ledger(cfg(1, "bf16", "cpu"), TINY, 2)
    assert model_state_bytes(a.rank(1)) == model_state_bytes(b.rank(1))
    assert a.rank(0).total("nvme") == 0


def test_bf16_optimizer_full_fp32_grad_accumulator():
    """Stage 1 + bf16 + grad_accum_dtype fp32 -> BF16_Optimizer with an unpartitioned
    N_pad x 4 fp32 accumulator (§4.3): 43,212 x 4 = 172,848."""
    led = ledger(cfg(1, "bf16", top={"data_types": {"grad_accum_dtype": "fp32"}}), TINY, 2)
    assert led.wrapper == "BF16_Optimizer"
    assert items(led, 1)["fp32_grad_accum"] == 172_848


# ---- §3.2 / §4.4 ZeRO-3 ----------------------------------------------------------------------

def test_zero3_partitions_and_persistence():
    """P3 = sum ceil(n_i / W): 21,607 (W = 2), 10,806 (W = 4); persistent params (threshold
    100: 77 and 5) gathered as (78 + 6) x 2 = 168 bytes at W = 2 (§3.2, §4.4)."""
    led = ledger(cfg(3, "bf16"), TINY, 2)
    it = items(led, 1)
    assert it["lp_param_partitions"] == 21_607 * 2
    assert it["grad_partitions_flat_buffer"] == 21_607 * 2
    assert it["fp32_master"] == it["exp_avg"] == 21_607 * 4
    assert it["lp_params_gathered"] == 168
    assert it["ipg_bucket"] == 50_000 * 2
    led4 = ledger(cfg(3, "bf16"), TINY, 4)
    assert items(led4, 0)["lp_param_partitions"] == 10_806 * 2
    assert items(led4, 0)["lp_params_gathered"] == (80 + 8) * 2
    # W = 1: the gathered tensor is the partition itself
    assert items(ledger(cfg(3, "bf16"), TINY, 1), 0)["lp_params_gathered"] == 0


def test_zero3_sub_groups():
    """sub_group_size 10,000, W = 2 -> S = [21,372, 235] (stage3.py _create_fp16_sub_groups):
    in-step fp32 grad = max S_k x 4; torch Adam keeps one 4-byte step per sub-group."""
    c = cfg(3, "bf16", sub_group_size=10_000)
    c["optimizer"]["params"]["torch_adam"] = True
    led = ledger(c, TINY, 2)
    (g,) = led.rank(0).by_item("fp32_grad")
    assert g.bytes == 21_372 * 4 and g.life == "step"
    assert items(led, 0)["step"] == 8


def test_zero3_fp32_keeps_two_fp32_copies():
    """fp32 training at stage 3 keeps a separate fp32 master (stage3.py device compare, §4.4)."""
    led = ledger(cfg(3, "fp32"), TINY, 2)
    it = items(led, 0)
    assert it["lp_param_partitions"] == it["fp32_master"] == 21_607 * 4
    assert it["ipg_bucket"] == 50_000 * 4


def test_zero3_nvme_pool_and_files():
    """2.1M MLP, W = 1, bf16, optimizer on NVMe: S = 2,118,703 -> pool 4 x A_256(S) x 4 =
    33,902,592 (measured, §5.2); files A_256(S) x 4 for master and each moment (§5.3)."""
    led = ledger(cfg(3, "bf16", "nvme"), BIG, 1)
    it = items(led, 0, "host_pinned")
    assert it["opt_swap_buffers"] == 4 * 2_118_912 * 4 == 33_902_592
    nv = items(led, 0, "nvme")
    assert nv["fp32_master"] == nv["exp_avg"] == nv["exp_avg_sq"] == 2_118_912 * 4
    # gradient files: floor(r_i / 256) x 256 x 4 for r_i x 4 >= 1 MiB: 1,055,744 and 1,060,864 elements
    assert nv["fp32_grad"] == (1_055_744 + 1_060_864) * 4
    assert items(led, 0, "host_pageable").get("fp32_master", 0) == 0


def test_zero3_param_swap_buffers():
    """offload_param nvme with buffer_size 2e6, bf16: 5 x A_512(2,000,000) x 2 = 20,003,840."""
    c = cfg(3, "bf16", "nvme", "nvme")
    c["zero_optimization"]["offload_param"].update({"buffer_size": 2_000_000, "max_in_cpu": 1000})
    led = ledger(c, BIG, 2)
    assert items(led, 0, "host_pinned")["param_swap_buffers"] == 20_003_840


def test_frozen_tensors_have_no_grads_or_state():
    """A frozen tensor costs only its 16-bit copy (no gradient, master or moments)."""
    inv = Inventory("x", [TensorSpec("a", (100, 10)), TensorSpec("b", (1000,), trainable=False)])
    led = ledger(cfg(0, "bf16"), inv, 1)
    it = items(led, 0)
    assert it["frozen_params"] == 1000 * 2
    assert it["lp_params_flat"] == 1000 * 2 and it["fp32_master"] == 1000 * 4 and it["lp_grads"] == 1000 * 2


def test_param_groups_padded_separately():
    """Each ZeRO-1/2 param group is aligned to 2W on its own (§1, §3.1): 3 + 5 elements at W = 2
    -> A_4(3) + A_4(5) = 4 + 8 = 12, not A_4(8) = 8."""
    inv = Inventory("g", [TensorSpec("a", (3,), group=0), TensorSpec("b", (5,), group=1)])
    led = ledger(cfg(2, "bf16"), inv, 2)
    assert items(led, 0)["lp_params_flat"] == 12 * 2
    assert items(led, 0)["fp32_master"] == (2 + 4) * 4


# ---- optimizer selection and rejected combinations -------------------------------------------

@pytest.mark.parametrize("stage,dtype,oo,torch_adam,want", [
    (0, "fp32", "none", False, ("FusedAdam", "FusedAdam")),
    (0, "bf16", "none", False, ("FP16_Optimizer", "FusedAdam")),
    (0, "fp16", "cpu", False, ("FP16_UnfusedOptimizer", "DeepSpeedCPUAdam")),
    (0, "bf16", "none", True, ("FP16_UnfusedOptimizer", "AdamW")),
    (2, "bf16", "nvme", False, ("DeepSpeedZeroOptimizer", "DeepSpeedCPUAdam")),
    (3, "fp16", "none", True, ("DeepSpeedZeroOptimizer_Stage3", "AdamW")),
])
def test_select_optimizer(stage, dtype, oo, torch_adam, want):
    """engine.py _configure_basic_optimizer / _configure_optimizer (§2.1, §2.2)."""
    c = cfg(stage, dtype, oo)
    c["optimizer"]["params"]["torch_adam"] = torch_adam
    assert select_optimizer(effective_config(c)) == want


def test_unsupported_bf16_fp32_accum_stage0():
    """bf16 + grad_accum_dtype fp32 at stage 0 raises NotImplementedError in DeepSpeed (§2.2)."""
    ec = effective_config(cfg(0, "bf16", top={"data_types": {"grad_accum_dtype": "fp32"}}))
    assert "NotImplementedError" in unsupported_reason(ec)
    with pytest.raises(ValueError):
        compute_ledger(Plan(ec, TINY, Cluster(2)))
    assert unsupported_reason(effective_config(cfg(1, "bf16", top={"data_types": {"grad_accum_dtype": "fp32"}}))) is None


def test_entries_cite_formula_and_source():
    for st, oo, op in ((0, "none", "none"), (2, "cpu", "none"), (3, "nvme", "nvme")):
        led = ledger(cfg(st, "bf16", oo, op), BIG, 2)
        for e in led.rank(0).entries:
            assert e.formula and e.source and (".py" in e.source), e


# ---- the fast per-role path against a brute-force walk over every element of every rank ---------

ODD_INVS = [
    [1031, 7, 1029 * 3, 1, 4097, 33],
    [5, 301 * 64, 301, 77 * 301, 77, 5 * 77, 5],
    [262_147, 3, 600_001, 1000],
]


def _brute_zero12(numels, W, align):
    """(I_r, Cov_r) per rank by walking the flat buffer element by element (§3.1): parameter j
    occupies [start_j, start_j + n_j) with start_{j+1} = A_align(start_j + n_j), the group is padded
    to A_2W, rank r owns [r P, (r+1) P)."""
    owner = []
    for j, n in enumerate(numels):
        owner += [j] * n
        if j < len(numels) - 1:
            owner += [None] * ((-len(owner)) % align)
    owner += [None] * ((-len(owner)) % (2 * W))
    P = len(owner) // W
    out = []
    for r in range(W):
        sl = owner[r * P:(r + 1) * P]
        touched = {j for j in sl if j is not None}
        out.append((sum(numels[j] for j in touched), sum(1 for j in sl if j is not None), P))
    return out


@pytest.mark.parametrize("numels", ODD_INVS)
@pytest.mark.parametrize("W", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize("palign", [False, True])
def test_fast_zero2_equals_brute_force(numels, W, palign):
    inv = Inventory("odd", [TensorSpec(f"m{i}.w", (n,)) for i, n in enumerate(numels)])
    led = ledger(cfg(2, "fp16", parameter_alignment=palign), inv, W)
    assert sorted(r for rl in led.ranks for r in rl.ranks) == list(range(W))
    brute = _brute_zero12(numels, W, 8 if palign else 1)
    for r, (I, cov, P) in enumerate(brute):
        (e,) = led.rank(r).by_item("averaged_gradients")
        assert e.bytes == (I + P - cov) * 2, (r, W)  # (I_r + P - Cov_r) x D, §4.2
        assert e.rank == r
    # roles hold ranks whose entries are identical, and distinct roles differ
    keys = [tuple((e.tier, e.item, e.bytes, e.formula) for e in rl.entries) for rl in led.ranks]
    assert len(set(keys)) == len(keys)


@pytest.mark.parametrize("numels", ODD_INVS)
@pytest.mark.parametrize("W", [1, 2, 3, 4, 7, 8])
def test_fast_zero2_offload_accumulation_equals_brute_force(numels, W):
    # ZeRO-2 only: ZeRO-1 never makes the host accumulation buffer (stage_1_and_2.py l.2166, micro_step_id
    # 0 at its only reduce; measured, tests/engine/test_peak_parity.py z1_bf16_oo_cpu_tbsga2_w2)
    inv = Inventory("odd", [TensorSpec(f"m{i}.w", (n,)) for i, n in enumerate(numels)])
    c = cfg(2, "bf16", oo="cpu", top={"gradient_accumulation_steps": 2, "train_batch_size": 2 * W})
    led = ledger(c, inv, W)
    for r, (I, _, _) in enumerate(_brute_zero12(numels, W, 1)):
        (e,) = led.rank(r).by_item("offload_accumulated_grads_cpu")
        assert e.bytes == I * 2  # I_r x D
    c1 = cfg(1, "bf16", oo="cpu", top={"gradient_accumulation_steps": 2, "train_batch_size": 2 * W})
    led1 = ledger(c1, inv, W)
    assert not any(rl.by_item("offload_accumulated_grads_cpu") for rl in led1.ranks)
    # ... and, reducing only at the boundary (engine.py allreduce_gradients), keeps micro-step 1's
    # param.grad (N x D) and ipg bucket (reduce_bucket_size x D) into micro-step 2's forward
    for rl in led1.ranks:
        assert [e.bytes for e in rl.by_item("lp_grads_accumulated")] == [sum(numels) * 2]
        assert [e.bytes for e in rl.by_item("ipg_bucket_accumulated")] == [
            led1.plan.config.zero.reduce_bucket_size * 2]
        # micro-step 1's backward reduces nothing: every param.grad (N x D) is whole there
        assert [(e.bytes, e.life) for e in rl.by_item("lp_grads_first_microstep")] == [
            (sum(numels) * 2, "first_microstep_backward")]


@pytest.mark.parametrize("numels", ODD_INVS)
@pytest.mark.parametrize("W", [1, 2, 3, 4, 7, 8])
def test_fast_zero3_nvme_grad_files_equal_brute_force(numels, W):
    """§5.4: per parameter of a swappable sub-group, rank r's real elements r_i (counted element by
    element: slot [r p_i, (r+1) p_i) of the padded parameter) go to NVMe as floor(r_i/256) x 256 x 4
    when r_i x 4 >= 1 MiB and that aligned part is >= 1 MiB; otherwise, or for the unaligned tail,
    r_i x 4 stays on the accelerator."""
    inv = Inventory("odd", [TensorSpec(f"m{i}.w", (n,)) for i, n in enumerate(numels)])
    led = ledger(cfg(3, "bf16", oo="nvme", sub_group_size=10 ** 9), inv, W)
    S = sum(-(-n // W) for n in numels)
    for r in range(W):
        files = tails = 0
        if S * 4 >= 1024 ** 2:
            for n in numels:
                p = -(-n // W)
                ri = sum(1 for x in range(r * p, (r + 1) * p) if x < n)
                if ri * 4 >= 1024 ** 2 and ri // 256 * 256 * 4 >= 1024 ** 2:
                    files += ri // 256 * 256 * 4
                    tails += ri * 4 if ri % 256 else 0
                else:
                    tails += ri * 4
        rl = led.rank(r)
        assert sum(e.bytes for e in rl.by_item("fp32_grad") if e.tier == "nvme") == files, (r, W)
        assert sum(e.bytes for e in rl.by_item("opt_unswapped_grad_tails")) == (tails if S * 4 >= 1024 ** 2 else 0)


def test_expanded_matches_rank_and_roles():
    inv = Inventory("odd", [TensorSpec(f"m{i}.w", (n,)) for i, n in enumerate(ODD_INVS[0])])
    led = ledger(cfg(2, "bf16"), inv, 7)
    exp = led.expanded()
    assert [rl.rank for rl in exp] == list(range(7))
    for rl in exp:
        role = led.role_of(rl.rank)
        assert rl.rank in role.ranks
        assert [(e.item, e.bytes) for e in rl.entries] == [(e.item, e.bytes) for e in role.entries]
        assert all(e.rank == rl.rank for e in rl.entries)
    with pytest.raises(IndexError):
        led.rank(7)


def test_405b_at_65536_ranks_is_a_few_roles():
    from advisor.model.specs import resolve_model
    inv = resolve_model("llama-3.1-405b")
    c = cfg(3, "bf16", oo="nvme", stage3_param_persistence_threshold=100_000)
    led = ledger(c, inv, 65_536)
    assert led.world_size == 65_536
    assert 1 <= len(led.ranks) <= 8
    r0 = led.rank(0)
    # P3 = sum ceil(n_i / 65,536) over the trainable tensors; lp_param_partitions = P3 x 2 B
    p3 = sum(-(-t.numel // 65_536) for t in inv.tensors)
    (lp,) = r0.by_item("lp_param_partitions")
    assert lp.bytes == p3 * 2
    last = led.rank(65_535)
    assert last.rank == 65_535
    # gathered parameters in a later forward (state.zero3_fetch_replay, DeepSpeed's coordinator over the
    # complete trace): every big matrix is its own all-gather (the prefetch stops once the numel taken
    # reaches min(max_live - available, 5e7): one 872M-element matrix passes it), released after its
    # forward (its backward is > 1e9 numel away). At the last layer's down_proj fetch the prefetch takes
    # the untied lm_head (128,256 x 16,384 = 2,101,346,304 elements, used again at once in backward, so
    # kept) beside down_proj (16,384 x 53,248 = 872,415,232): one parameter each, its own padded buffer
    # (both divisible by 65,536), x 2 B
    (g,) = r0.by_item("zero3_gathered_params")
    assert (g.bytes, g.life, g.cls, g.tier) == ((2_101_346_304 + 872_415_232) * 2, "steady_forward", "workspace",
                                                "accelerator")


def test_gathered_params_rules_of_reference_4_5():
    """The §4.5 table's cases (7 equal layers of 65,792 params at W = 2, persistence off, fp16),
    now by DeepSpeed 0.19.8's coordinator (state.zero3_fetch_replay), the largest moment of a later
    forward. A fetch of >= 2 params is one coalesced all-gather: its flat buffer (sum ceil(n_i/W) x W
    x D) is alive while AllGatherCoalescedHandle.wait torch.cat's every param of it (n_i x D), so a
    layer costs 131,584 x 2 at its wait (§4.5 counted the params only, 131,584 per layer)."""
    inv = Inventory("seven", [t for i in range(7) for t in (TensorSpec(f"l{i}.weight", (256, 256)),
                                                              TensorSpec(f"l{i}.bias", (256,)))])
    base = {"stage3_param_persistence_threshold": 0}
    L = 131_584  # one layer, (65,536 + 256) x 2 B

    def g(**z):
        (e,) = ledger(cfg(3, "fp16", **{**base, **z}), inv, 2).rank(0).by_item("zero3_gathered_params")
        return e.bytes
    # G1, defaults: the root module's prefetch (460,544 elements < the 5e7 bucket) takes all 14 params in
    # one all-gather; l0's wait cats all of them beside its flat buffer
    assert g() == 7 * L * 2
    # G2, no prefetch, reuse 0: one layer at a time, its flat buffer + its cats
    assert g(stage3_max_reuse_distance=0, stage3_prefetch_bucket_size=0) == L * 2
    # G4, max_live 197,376 (3 layers): the root's prefetch takes 3 layers (limit min(197,376, 5e7)), flat + cats
    assert g(stage3_max_reuse_distance=0, stage3_max_live_parameters=197_376) == 3 * L * 2
    # G7, max_live 197,376, reuse 1e9: nothing is released in forward, the available numel stays at the
    # limit, so l3..l6 are fetched on demand: at l6's wait l0..l5 (6 L) + l6's flat and cats (2 L)
    assert g(stage3_max_live_parameters=197_376) == 8 * L
    # W = 1 without parameter offload: the gathered tensor is the partition itself
    (e,) = ledger(cfg(3, "fp16", **base), inv, 1).rank(0).by_item("zero3_gathered_params")
    assert e.bytes == 0
