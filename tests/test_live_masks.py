"""timeline._LIVE_MASKS (issue 21): role_timeline's memo of timeline._live per entry list, flags and instant
gives _live's own answers, and is keyed by every input _live reads -- two entry lists or flag sets that differ
only in one of them get different answers, the ones the rule gives by hand."""
from advisor.ledger import timeline
from advisor.ledger.state import Entry
from advisor.ledger.timeline import Instant

INIT = Instant("initialize", "initialize", "end of deepspeed.initialize")
STEP = Instant("first_step:update", "first_step", "first step's update")
FLAGS = (False, False, False, False, ("backward:1", "reduce"), False)  # lazy, consumed, transients, ...


def _mask(ents, inst, flags):
    return list(timeline._live_mask(timeline._live_masks(ents, flags), ents, inst, flags))


def test_lazy_state_flag_is_in_the_key():
    # persistent optimizer state: made at the first update under a lazy optimizer (torch Adam's state at its
    # first step), so not live at initialize's end; live there when eager
    ents = [Entry(0, "accelerator", "optimizer_states", "exp_avg", 8, "persistent")]
    lazy = (True,) + FLAGS[1:]
    assert _mask(ents, INIT, FLAGS) == [1]
    assert _mask(ents, INIT, lazy) == [0]  # the eager answer kept above is not reused
    assert _mask(ents, INIT, FLAGS) == [1]
    assert _mask(ents, STEP, lazy) == [1]


def test_entry_class_and_life_are_in_the_key():
    # the same item and life, another class: the lazy rule applies to optimizer_states only
    lazy = (True,) + FLAGS[1:]
    a = [Entry(0, "accelerator", "optimizer_states", "x", 8, "persistent")]
    b = [Entry(0, "accelerator", "parameters", "x", 8, "persistent")]
    assert _mask(a, INIT, lazy) == [0]
    assert _mask(b, INIT, lazy) == [1]
    # the same item and class, another life: "step" entries live only in a step's phases
    c = [Entry(0, "accelerator", "parameters", "x", 8, "step")]
    assert _mask(c, INIT, lazy) == [0]
    assert _mask(c, STEP, lazy) == [1]


def test_masks_equal_live_on_mixed_entries():
    lives = ["persistent", "step", "backward", "reduce", "autograd", "first_forward", "steady_forward", "save"]
    ents = [Entry(0, "accelerator", cls, f"i{j}", 8, life)
            for j, (cls, life) in enumerate((c, l) for c in ("parameters", "optimizer_states") for l in lives)]
    insts = [INIT, STEP, Instant("forward:1", "forward", "f1"), Instant("forward:2", "forward", "f2"),
             Instant("backward:1", "backward", "b1"), Instant("reduce:1", "reduce", "r1"),
             Instant("save:model", "save", "s")]
    for flags in (FLAGS, (True, True, True, True, ("backward:1",), True)):
        for inst in insts:
            assert _mask(ents, inst, flags) == [int(bool(timeline._live(e, inst, *flags))) for e in ents]
