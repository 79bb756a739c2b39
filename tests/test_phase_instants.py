"""measure's tracker phases -> the ledger timeline's instants under gradient accumulation.

The worker names phases by micro-step k (one forward, backward and engine.step() each); DeepSpeed
0.19.8 steps the optimizer only at the accumulation boundary (runtime/engine.py
DeepSpeedEngine.step l.3611-3615: ``if self.is_gradient_accumulation_boundary()`` ->
``_take_model_step``), and is_gradient_accumulation_boundary is ``(micro_steps + 1) %
gradient_accumulation_steps == 0`` (l.3463). The
expectations below are that rule written out by hand for GA = 2 and 3, beside the timeline's
instants (advisor.ledger.timeline._instants: micro-steps 1 and GA of the first iteration, the
reduce at the boundary, then the steady iteration)."""

from __future__ import annotations

from advisor.engine.measure import phase_instants

FIRST = ("first_step:norm", "first_step:prep", "first_step:update")
STEADY = ("steady_step:norm", "steady_step:prep", "steady_step:update")


def test_ga1_is_one_micro_step_per_optimizer_step():
    assert phase_instants("forward:1") == (("forward:1",), None)
    assert phase_instants("backward:1") == (("backward:1", "reduce"), None)
    assert phase_instants("step:1") == (FIRST, "first_step")
    assert phase_instants("forward:2") == (("steady:forward",), None)
    assert phase_instants("backward:2") == (("steady:backward", "steady:reduce"), None)
    assert phase_instants("step:2") == (STEADY, "steady_step")
    assert phase_instants("forward:3") == ((), None)
    assert phase_instants("load") == (("load",), None)
    assert phase_instants("initialize:cast", 4) == (("initialize:cast",), None)


def test_ga2_boundaries_at_micro_steps_2_and_4():
    ga = 2
    assert phase_instants("forward:1", ga) == (("forward:1",), None)
    # ZeRO-2 reduces inside every micro-step's backward (the timeline's reduce:1; none at ZeRO-1)
    assert phase_instants("backward:1", ga) == (("backward:1", "reduce:1"), None)
    assert phase_instants("step:1", ga) == ((), None)  # micro-step 1: (0 + 1) % 2 != 0, no optimizer step
    assert phase_instants("forward:2", ga) == (("forward:2",), None)
    assert phase_instants("backward:2", ga) == (("backward:2", "reduce"), None)
    assert phase_instants("step:2", ga) == (FIRST, "first_step")  # (1 + 1) % 2 == 0
    assert phase_instants("forward:3", ga) == ((), None)  # the steady iteration's micro-step 1: no instant
    assert phase_instants("step:3", ga) == ((), None)
    assert phase_instants("forward:4", ga) == (("steady:forward",), None)
    assert phase_instants("backward:4", ga) == (("steady:backward", "steady:reduce"), None)
    assert phase_instants("step:4", ga) == (STEADY, "steady_step")
    assert phase_instants("step:6", ga) == ((), None)


def test_ga3_middle_micro_step_maps_to_the_middle_instants():
    ga = 3
    # micro-step 2 (1 < m < ga) maps to the timeline's middle pair forward:2 / backward:2 (DeepSpeed steps only at
    # the boundary, engine.py l.3463: (micro_steps + 1) % 3 == 0 at k = 3, 6)
    assert phase_instants("forward:2", ga) == (("forward:2",), None)
    assert phase_instants("forward:2", ga, refetch=True) == (("forward:2",), None)  # ZeRO-3's re-fetch: m = 2 itself
    assert phase_instants("forward:5", ga) == ((), None)  # the steady iteration's micro-step 2
    # with the middle backward's own reduce where the timeline has one (ZeRO-2, BF16_Optimizer: as micro-step 1's
    # reduce:1); a timeline without reduce:2 compares backward:2 alone
    assert phase_instants("backward:2", ga) == (("backward:2", "reduce:2"), None)
    assert phase_instants("backward:5", ga) == ((), None)
    assert phase_instants("step:2", ga) == ((), None)
    assert phase_instants("backward:3", ga) == (("backward:3", "reduce"), None)
    assert phase_instants("step:3", ga) == (FIRST, "first_step")
    assert phase_instants("step:6", ga) == (STEADY, "steady_step")
    assert phase_instants("forward:bogus", ga) == ((), None)


def test_measure_compares_a_ga_that_train_batch_size_gives():
    """train_batch_size 4, micro-batch 1, 2 ranks: DeepSpeed derives GA = 4 // 1 // 2 = 2
    (runtime/config.py _set_batch_related_parameters l.620-623). measure compared GA 1 only
    (``compared`` false, the verdict true); now micro-step k maps by DeepSpeed's boundary rule
    (engine.py l.3463: the optimizer steps when (micro_steps + 1) % GA == 0, i.e. at k = 2 and 4):
    forward:2 is the boundary micro-step's forward (timeline instant ``forward:2``, not the steady
    iteration's), step:1 is no optimizer step (no row), step:2 is the first optimizer step. The
    engine's side is stubbed (1 B): only the mapping is tested; the GA-2 bytes are the engine
    cells' (tests/engine/test_peak_parity.py ``*_tbsga2_w2``)."""
    from advisor.engine.measure import measure_phases
    from advisor.model.inventory import from_dict

    inv = from_dict({"name": "t", "tensors": [{"name": "a.weight", "shape": [8, 8]}]}, "t")
    cfg = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 2}}
    rec = {"accelerator": "cpu", "tracker": [{"phase": p, "peak": 1, "end": 1, "unattributed": []}
                                             for p in ("forward:1", "step:1", "forward:2", "step:2")]}
    got = measure_phases(cfg, inv, 2, {0: rec, 1: rec})
    assert got["compared"] is True and got["ga"] == 2 and got["reason"] == ""
    inst = {r["phase"]: r["ledger_instant"] for r in got["rows"] if r["rank"] == 0}
    assert inst["forward:1"] == "forward:1" and inst["forward:2"] == "forward:2"
    assert "step:1" not in inst and inst["step:2"].startswith("first_step:")
    # 1 B against a ledger of kilobytes: the phases fail, so the verdict cannot be true by default
    assert got["matches"] is False
    # 2 micro-steps of GA 2: the steady iteration (micro-steps 3-4) was not reached, and it says so
    assert "steady iteration was not compared" in got["ga_note"] and "--steps 4" in got["ga_note"]
    # the same batch on 4 ranks is GA 1: nothing to note
    assert measure_phases(cfg, inv, 4, {0: rec})["ga_note"] == ""


def test_save_phases_span_the_save_instants_at_any_ga():
    # the worker saves once, after its last micro-step (worker._save_phases): save_16bit_model
    # (engine.py l.5707) then save_checkpoint (l.4869, the model-states file, then the
    # optimizer-states files), whatever the accumulation; the timeline's save instants follow the
    # steady iteration
    for ga in (1, 2, 3):
        assert phase_instants("save:16bit", ga) == (("save:16bit", "save:16bit:end"), None)
        assert phase_instants("save", ga) == (("save:model", "save:optim", "save"), None)


def test_ga4_every_middle_micro_step_maps_to_one_pair():
    """At GA 4 micro-steps 2 and 3 are both middle ones (k = 4, 8 are the boundaries, engine.py l.3463): both map to
    forward:2 / backward:2; with ZeRO-3's re-fetch (only micro-step 2's forward fetches again what the first backward
    released) micro-step 3's forward maps to forward:4, the boundary's, which holds the same."""
    ga = 4
    for m in (2, 3):
        assert phase_instants(f"forward:{m}", ga) == (("forward:2",), None)
        assert phase_instants(f"backward:{m}", ga) == (("backward:2", "reduce:2"), None)
        assert phase_instants(f"step:{m}", ga) == ((), None)
    assert phase_instants("forward:2", ga, refetch=True) == (("forward:2",), None)
    assert phase_instants("forward:3", ga, refetch=True) == (("forward:4",), None)
    assert phase_instants("backward:3", ga, refetch=True) == (("backward:2", "reduce:2"), None)
    assert phase_instants("backward:4", ga) == (("backward:4", "reduce"), None)
    assert phase_instants("forward:6", ga) == ((), None)  # the steady iteration's micro-step 2
