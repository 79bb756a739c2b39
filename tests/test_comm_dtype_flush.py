"""ZeRO-1/2 (DeepSpeedZeroOptimizer) on a bf16 model with ``communication_data_type`` fp32, by hand from DeepSpeed
0.19.8's code: allreduce_bucket (stage_1_and_2.py l.2367-2377) flattens a run of gradient slices (a copy for several,
a view for one) and casts it to the communication dtype; both live through the all-reduce, so a flush holds
run x (D + C), a run of one slice run x C (``state._zero12_flush_replay``'s copies).
Engine (tests/engine/test_peak_parity.py's probe runs, TINY at W = 2, one flush at reduce_bucket_size 50,000):
backward:1 532,134 B on both ranks at ZeRO-2 and ZeRO-1, the figure below + 32 B of scalars; before, the ledger kept
coarse lifetimes for it (ZeRO-2: +173,802 / +211,992 B on ranks 0 / 1)."""

from __future__ import annotations

from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan, compute_ledger
from advisor.ledger.timeline import resolve_load, role_timeline
from advisor.model.inventory import Inventory, TensorSpec

#: n = [19264, 301, 23177, 77, 385, 5], N = 43,209; at W = 2 N_pad = A_4(N) = 43,212, P = 21,606
TINY = Inventory(name="tiny", tensors=[TensorSpec(f"l{i}.w", (n,)) for i, n in
                                       enumerate([19264, 301, 23177, 77, 385, 5])], source="test")


def _led(cfg, inv, W=2):
    return compute_ledger(Plan(effective_config(cfg), inv, Cluster(world_size=W)))


def _z12(stage, comm=None, rbs=50000):
    c = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
         "zero_optimization": {"stage": stage, "reduce_bucket_size": rbs, "overlap_comm": False,
                               "contiguous_gradients": True}}
    if comm:
        c["communication_data_type"] = comm
    return c


def _reduce_at(cfg, inv, W, r=0):
    ec = effective_config(cfg)
    led = _led(cfg, inv, W)
    tl = role_timeline(led, led.rank(r), resolve_load(ec), ga=1, rank=r)
    return dict(zip([x.key for x in tl.instants], tl.series(("accelerator",))))


def test_zero2_fp32_communication_flush_holds_flat_copy_and_cast():
    at = _reduce_at(_z12(2, "fp32"), TINY, 2)
    # 16-bit flat 43212 x 2 + fp32 master 21606 x 4 + one ipg bucket 50000 x 2 + the flush of all 43,209
    # elements (several slices: a flat copy) x 2 and its fp32 cast x 4
    assert at["reduce"] == 43212 * 2 + 21606 * 4 + 50000 * 2 + 43209 * 2 + 43209 * 4
    for r in (0, 1):
        a, b = _reduce_at(_z12(2, "fp32"), TINY, 2, r), _reduce_at(_z12(2), TINY, 2, r)
        assert a["reduce"] - b["reduce"] == 43209 * 4


def test_fp32_communication_casts_a_one_slice_run_from_its_view():
    one = Inventory(name="one", tensors=[TensorSpec("w", (30000,))], source="test")
    for stage in (1, 2):
        a, b = _reduce_at(_z12(stage, "fp32"), one, 1), _reduce_at(_z12(stage), one, 1)
        # W 1: one slice, flattened as a view and cast, 30,000 x 4; the reduce instant is the larger of that flush
        # moment and the allocation of grads_in_partition after it (I_r x D = 30,000 x 2, the flush's copies
        # freed), which alone was the instant without the cast
        assert a["reduce"] - b["reduce"] == 30000 * 4 - 30000 * 2
