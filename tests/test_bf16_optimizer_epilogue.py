"""BF16_Optimizer's gradient epilogue (ZeRO-1 + bf16 + ``data_types.grad_accum_dtype`` fp32), by hand from
DeepSpeed 0.19.8's code (``state.bf16_optimizer_epilogue_terms``):

* every micro-step, ``backward_epilogue`` (bf16_optimizer.py l.503-505) adds each param.grad into the fp32 flat
  buffer through ``lp.grad.data.to(fp32)`` (l.523): one n_i x 4 B copy at a time beside every 16-bit gradient;
* at the boundary ``buffered_allreduce_fallback`` (engine.py l.3921) all-reduces the groups' fp32 flat buffers
  (N_pad,g elements each, l.191) in buckets closed once their numel exceeds 5e8 (allreduce_no_retain l.3828-3839);
  ``allreduce_bucket`` flattens a bucket (a copy for several buffers, a view for one) and casts it to
  ``communication_data_type`` when that differs (l.3796-3801);
* before the boundary nothing frees param.grad (clear_lp_grads zeroes it in place, l.612-623).

The engine measured TINY at W = 2 (tests/engine/test_peak_parity.py z1_bf16_gaccfp32_tbsga2_w2): backward
524,850 B in every micro-step, the figure below + 28 B of scalars."""

from __future__ import annotations

from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan, bf16_optimizer_epilogue_terms, compute_ledger, zero12_layouts
from advisor.ledger.timeline import resolve_load, role_timeline
from advisor.model.inventory import Inventory, TensorSpec

#: n = [19264, 301, 23177, 77, 385, 5], N = 43,209; at W = 2 N_pad = A_4(N) = 43,212, P = 21,606
TINY = Inventory(name="tiny", tensors=[TensorSpec(f"l{i}.w", (n,)) for i, n in
                                       enumerate([19264, 301, 23177, 77, 385, 5])], source="test")
#: two trainable groups: [19264, 301] (N_pad 19,568 at W = 2) and [385, 5] (392); 23177 + 77 frozen
GROUPS = Inventory(name="groups", tensors=[
    TensorSpec("l1.weight", (301, 64)), TensorSpec("l1.bias", (301,)),
    TensorSpec("l2.weight", (77, 301), trainable=False), TensorSpec("l2.bias", (77,), trainable=False),
    TensorSpec("l3.weight", (5, 77), group=1), TensorSpec("l3.bias", (5,), group=1)], source="test")


def _cfg(**top):
    return {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1},
            "data_types": {"grad_accum_dtype": "fp32"}, **top}


def _led(cfg, inv, W=2):
    return compute_ledger(Plan(effective_config(cfg), inv, Cluster(world_size=W)))


def _items(led, r=0):
    return {e.item: e for e in led.rank(r).entries}


def test_one_group_bf16_comm_the_cast_moment_holds_more():
    led = _led(_cfg(), TINY)
    assert led.wrapper == "BF16_Optimizer"
    it = _items(led)
    # H: the largest gradient's fp32 copy, 23177 x 4; F: one buffer (a view) cast to bf16, 43212 x 2 < H
    assert it["bf16_hp_grad_cast"].bytes == 23177 * 4
    assert "bf16_allreduce_flat" not in it
    assert "lp_grads_accumulated" not in it          # GA 1: zero_grad(set_to_none) after every step


def test_comm_fp32_makes_no_copy():
    ec = effective_config(_cfg(communication_data_type="fp32"))
    assert bf16_optimizer_epilogue_terms(ec, zero12_layouts(ec, TINY, 2)) == (23177 * 4, 0)


def test_two_groups_flat_copy_and_cast():
    ec = effective_config(_cfg())
    # one bucket of both buffers: torch.cat (19568 + 392) x 4 and its bf16 cast (19568 + 392) x 2
    assert bf16_optimizer_epilogue_terms(ec, zero12_layouts(ec, GROUPS, 2)) == (19264 * 4, 19960 * 6)
    it = _items(_led(_cfg(), GROUPS))
    assert it["bf16_allreduce_flat"].bytes == 19960 * 6 - 19264 * 4
    assert it["bf16_allreduce_flat"].life == "boundary_reduce"


def test_buckets_close_past_5e8_elements():
    # groups of 6e8 and 1e8 elements (W = 2: N_pad the same): the first buffer alone exceeds 5e8 and is
    # flushed alone (a view, cast to bf16: 6e8 x 2); the second alone (1e8 x 2). With 3e8 + 3e8 both go in one
    # bucket: cat 6e8 x 4 + cast 6e8 x 2
    ec = effective_config(_cfg())
    big = Inventory(name="b", tensors=[TensorSpec("a", (600_000_000,)), TensorSpec("b", (100_000_000,), group=1)],
                    source="test")
    assert bf16_optimizer_epilogue_terms(ec, zero12_layouts(ec, big, 2))[1] == 600_000_000 * 2
    two = Inventory(name="t", tensors=[TensorSpec("a", (300_000_000,)), TensorSpec("b", (300_000_000,), group=1)],
                    source="test")
    assert bf16_optimizer_epilogue_terms(ec, zero12_layouts(ec, two, 2))[1] == 600_000_000 * 6


def test_timeline_every_micro_step_epilogue_and_kept_grads():
    ec = effective_config(_cfg(train_batch_size=4))          # GA = 4 / (1 x 2) = 2
    led = _led(_cfg(train_batch_size=4), TINY)
    tl = role_timeline(led, led.rank(0), resolve_load(ec), ga=2, rank=0)
    keys = [x.key for x in tl.instants]
    acc = tl.series(("accelerator",))
    at = dict(zip(keys, acc))
    # resting: 16-bit flat 43212 x 2 + fp32 master P x 4 + fp32 accumulation buffer 43212 x 4 (moments lazily at
    # the first update)
    rest = 43212 * 2 + 21606 * 4 + 43212 * 4
    grads = 43209 * 2
    # micro-step 1's epilogue (its own instant) and the boundary's: every param.grad + l2's fp32 copy
    assert at["reduce:1"] == at["reduce"] == rest + grads + 23177 * 4
    # micro-step 2's forward still holds micro-step 1's param.grad (zeroed in place, not freed)
    assert at["forward:2"] == rest + grads
    assert at["forward:1"] == rest
    moments = 2 * 21606 * 4
    assert at["steady:reduce"] == rest + moments + grads + 23177 * 4


def test_immediate_grad_update_adds_in_the_hook_and_frees_param_grad():
    # bf16.immediate_grad_update: each post-accumulate hook adds its gradient's fp32 copy and sets param.grad = None
    # (bf16_optimizer.py accumulate_hp_grads_and_remove_lp l.707-715): the hook moment is the parameter's 16-bit
    # gradient and its copy, l2's 23177 x (2 + 4); no 16-bit gradient outlives its hook. Engine probe (TINY W 2, GA 2):
    # backward 484,794 B on both ranks = this + 36 B of scalars; forward:2 and the steps hold no param.grad
    cfg = _cfg(bf16={"enabled": True, "immediate_grad_update": True}, train_batch_size=4)
    ec = effective_config(cfg)
    assert ec.bf16_immediate_grad_update
    led = _led(cfg, TINY)
    it = _items(led)
    assert it["bf16_hp_grad_cast"].bytes == 23177 * 6 and it["bf16_hp_grad_cast"].life == "autograd"
    assert it["bf16_allreduce_flat"].bytes == 43212 * 2          # the one buffer's bf16 cast, alone at the boundary
    assert "lp_grads" not in it and "lp_grads_accumulated" not in it
    tl = role_timeline(led, led.rank(0), resolve_load(ec), ga=2, rank=0)
    at = dict(zip([x.key for x in tl.instants], tl.series(("accelerator",))))
    rest = 43212 * 2 + 21606 * 4 + 43212 * 4
    assert at["backward:1"] == at["backward:2"] == rest + 23177 * 6
    assert at["forward:2"] == rest
    assert at["reduce"] == rest + 43212 * 2
    assert at["first_step:update"] == rest + 2 * 21606 * 4
    # an nn.Linear's bias hook runs with its weight's gradient whole (autograd_siblings): l1.bias's moment
    # (301 + 19264) x 2 + 301 x 4 = 40,334 B is under l1.weight's own, 19264 x 6
    ec2 = effective_config(_cfg(bf16={"enabled": True, "immediate_grad_update": True}))
    assert bf16_optimizer_epilogue_terms(ec2, zero12_layouts(ec2, GROUPS, 2), GROUPS)[0] == 19264 * 6


def test_casts_are_decided_by_dtype_not_by_size():
    # allreduce_bucket casts when ``self.communication_data_type != tensor.dtype`` (engine.py l.3800-3801), a dtype
    # test: a bf16 flat buffer sent in fp16 is a copy of the same 2 B per element. BF16_Optimizer with a bf16 buffer
    # (grad_acc_dtype bf16, bf16_optimizer.py l.71-73, l.191) is DeepSpeed's pipeline-parallel bf16 path (engine.py
    # l.2315-2320; select_optimizer builds the ledger's BF16_Optimizer with fp32 accumulation only), so the function
    # is called directly: one group's buffer (43,212 elements at W 2) is a view, its fp16 cast 43,212 x 2 B; no hp
    # copy (l.523: ``.to(bf16)`` of a bf16 gradient is itself). The byte comparison gave (0, 0)
    ec = effective_config(_cfg(communication_data_type="fp16", data_types={"grad_accum_dtype": "bf16"}))
    assert bf16_optimizer_epilogue_terms(ec, zero12_layouts(ec, TINY, 2)) == (0, 43212 * 2)
    # and the bf16 communication of a bf16 buffer copies nothing
    ec = effective_config(_cfg(data_types={"grad_accum_dtype": "bf16"}))
    assert ec.comm_dtype == "bf16"
    assert bf16_optimizer_epilogue_terms(ec, zero12_layouts(ec, TINY, 2)) == (0, 0)
