"""ZeRO++ hpZ's secondary partitions on the step timeline, by hand from DeepSpeed 0.19.8's source.

Each partition() makes a parameter's secondary partition, ceil(n / W) x W / h elements in the 16-bit
dtype, before its primary one when it has none (runtime/zero/partition_parameters.py _partition
l.1768-1769 -> _partition_param_sec l.1912-1915); every step's _post_step frees them all (stage3.py
l.2846 invalidate_secondary_tensor); the step's _partition_all_parameters (l.2878) makes the
persistent parameters' again, a release after a forward the others' (partitioned_param_coordinator.py
__release_param l.629). The fetches gather into buffers of the primary's size (l.1341, l.1378), so an
hpZ plan's timeline is the plain plan's plus the secondaries live at that instant.
"""
from __future__ import annotations

from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.ledger.timeline import resolve_load, role_timeline
from advisor.model.inventory import Inventory, TensorSpec

#: tests/engine/parity.py TINY: l1 301 x 64, l2 77 x 301, l3 5 x 77 with biases
SIZES = [("l1.weight", (301, 64)), ("l1.bias", (301,)), ("l2.weight", (77, 301)), ("l2.bias", (77,)),
         ("l3.weight", (5, 77)), ("l3.bias", (5,))]
TINY = Inventory("tiny", [TensorSpec(n, s) for n, s in SIZES])


def _cfg(hpz, **zero):
    return {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "bf16": {"enabled": True},
            "zero_optimization": {"stage": 3, "reduce_bucket_size": 50000, "zero_hpz_partition_size": hpz, **zero}}


def _series(cfg, W):
    ec = effective_config(cfg)
    led = compute_ledger(Plan(ec, TINY, Cluster(world_size=W)))
    tl = role_timeline(led, led.rank(0), resolve_load(ec, zero_init=False, dtype=None), ga=1, rank=0)
    ser = tl.series(("accelerator", "host_pinned", "host_pageable"))
    return {x.key: ser[i] for i, x in enumerate(tl.instants)}


def test_initialize_module_holds_the_secondaries_made_so_far_by_hand():
    """W = h = 2: at l2.weight (the third tensor) its whole bf16 tensor and the later ones (23,177 + 77 + 385
    + 5 elements), the primaries of l1.weight, l1.bias, l2.weight (9,632 + 151 + 11,589) and as many secondary
    elements (ceil(n / 2) x 2 / 2): 66,388 x 2 B = 132,776 B (engine z3_bf16_hpz2_w2: 132,780 B, FusedAdam's
    4 B beside it). Without hpZ the peak is at l1.weight: 43,209 + 9,632 = 52,841 elements."""
    assert _series(_cfg(2), 2)["initialize:module"] == (23177 + 77 + 385 + 5 + 2 * (9632 + 151 + 11589)) * 2
    assert _series(_cfg(1), 2)["initialize:module"] == (43209 + 9632) * 2
    # W = 4, h = 2: secondaries of ceil(n / 4) x 4 / 2 elements; at l2.weight: whole 23,644, primaries
    # 4,816 + 76 + 5,795, secondaries 9,632 + 152 + 11,590 = 55,705, under the moment at l1.weight: whole
    # 43,209, its primary 4,816 and secondary 9,632 = 57,657
    assert _series(_cfg(2), 4)["initialize:module"] == max(23644 + 4816 + 76 + 5795 + 9632 + 152 + 11590,
                                                           43209 + 4816 + 9632) * 2 == 115314


def test_secondaries_live_in_the_first_iteration_and_each_step_by_hand():
    """Every TINY parameter persistent (the default threshold 1e5): the secondaries (43,214 elements x 2 B at
    W = h = 2: sum ceil(n / 2) x 2 / 2 = 9,632 + 151 + 11,589 + 39 + 193 + 3 = 21,607) are live from initialize
    through the first step's _post_step (its all-gather of the persistent parameters comes before
    invalidate_secondary_tensor, stage3.py l.2841-2846), not in the later forward and backward (no persistent
    parameter is released there), and again in the steady step."""
    hp, plain = _series(_cfg(2), 2), _series(_cfg(1), 2)
    S = 21607 * 2
    for k, want in (("initialize", S), ("forward:1", S), ("backward:1", S), ("first_step:update", S),
                    ("first_step:post", S), ("steady:forward", 0), ("steady:backward", 0),
                    ("steady_step:prep", S), ("steady_step:update", S), ("steady_step:post", S)):
        assert hp[k] - plain[k] == want, (k, hp[k] - plain[k])


def test_non_persistent_secondaries_made_again_at_their_release_by_hand():
    """stage3_param_persistence_threshold 1,000: l1.weight and l2.weight are not persistent, so their release makes
    their secondaries again (9,632 + 11,589 elements x 2 B = 42,442 B); the biases and l3.weight (151 + 39 + 193 + 3
    = 386 elements, 772 B) only the step. With the default stage3_max_reuse_distance (1e9 elements > 2 N) no forward
    releases them (the reuse window reaches their backward use, partitioned_param_coordinator.py l.653-662): from
    the later backward on, module by module (engine probe: forward:2 617,067 B with and without hpZ). With a window
    of 1,000 elements the forward releases them: from the later forward on, counted whole."""
    plain = _series(_cfg(1, stage3_param_persistence_threshold=1000), 2)
    hp = _series(_cfg(2, stage3_param_persistence_threshold=1000), 2)
    for k, want in (("forward:1", 42442 + 772), ("first_step:post", 42442 + 772), ("steady:forward", 0),
                    ("steady_step:update", 42442 + 772), ("steady_step:post", 42442 + 772)):
        assert hp[k] - plain[k] == want, (k, hp[k] - plain[k])
    # the later backward: each module's made as it is released after its backward (state.zero3_backward_fetch's
    # moments); engine probes 2026-12-06 (W = 2, both ranks): backward:2 595,441 B with hpZ, 578,543 B without
    assert hp["steady:backward"] - plain["steady:backward"] == 595441 - 578543
    plain = _series(_cfg(1, stage3_param_persistence_threshold=1000, stage3_max_reuse_distance=1000), 2)
    hp = _series(_cfg(2, stage3_param_persistence_threshold=1000, stage3_max_reuse_distance=1000), 2)
    for k, want in (("steady:forward", 42442), ("steady:backward", 42442), ("steady_step:post", 42442 + 772)):
        assert hp[k] - plain[k] == want, (k, hp[k] - plain[k])


def test_zero_init_load_holds_the_secondaries_by_hand():
    """Under zero.Init (TINY built in fp32, cast to bf16: 6 B an element while cast) the load's high-water mark is
    l2.weight being built (23,177 x 6 = 139,062 B) beside l1's partitions ((9,632 + 151) x 2 = 19,566 B) and, with
    hpZ at W = h = 2, l1's secondary partitions made before them (19,566 B more): 178,194 B, the engine's
    (probe z3_bf16_hpz2_zinit_w2, 2026-12-06, both ranks); 158,628 B without hpZ."""
    def load(hpz):
        ec = effective_config(_cfg(hpz))
        led = compute_ledger(Plan(ec, TINY, Cluster(world_size=2)))
        tl = role_timeline(led, led.rank(0), resolve_load(ec, zero_init=True, dtype=None), ga=1, rank=0)
        ser = tl.series(("accelerator", "host_pinned", "host_pageable"))
        return dict(zip((x.key for x in tl.instants), ser))["load"]
    assert load(2) == 2 * 19566 + 23177 * 6 == 178194
    assert load(1) == 19566 + 23177 * 6 == 158628


def test_frozen_parameters_keep_their_secondaries_by_hand():
    """l2 frozen: invalidate_secondary_tensor walks the optimizer's fp16_groups, trainable parameters only
    (stage3.py l.755-759; partitioned_param_coordinator.py l.594 'not trainable so their secondary tensor never
    expire'), so l2's secondaries, (11,589 + 39) x 2 B = 23,256 B at W = h = 2, stay through the later forward,
    where the trainable ones' are gone. Engine probes (TINY_FROZEN_GROUPS, W = 2, 2026-12-06, both ranks), hpZ 2
    less without: forward:2 392,729 - 369,473 and backward:2 432,567 - 409,311 = 23,256 B; initialize and step:1
    43,214 B (every secondary)."""
    frozen = Inventory("tiny-frozen", [TensorSpec(n, s, trainable=not n.startswith("l2")) for n, s in SIZES])

    def at(hpz, key):
        ec = effective_config(_cfg(hpz))
        led = compute_ledger(Plan(ec, frozen, Cluster(world_size=2)))
        tl = role_timeline(led, led.rank(0), resolve_load(ec, zero_init=False, dtype=None), ga=1, rank=0)
        ser = tl.series(("accelerator", "host_pinned", "host_pageable"))
        return dict(zip((x.key for x in tl.instants), ser))[key]
    assert at(2, "steady:forward") - at(1, "steady:forward") == (11589 + 39) * 2
    # the first forward: every secondary, (9,632 + 151 + 11,589 + 39 + 193 + 3) x 2
    assert at(2, "forward:1") - at(1, "forward:1") == 21607 * 2
