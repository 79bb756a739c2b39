"""generate and step-time parts the hardware spec gives no rate for (issue 23): such a part counts
0 in the step time, so generate must not rank a plan that needs it as if it were free. Without
host_memory_bandwidth_bytes_per_s the optimizer-offload plans' CPU optimizer step was 0 and they
ranked first, silently; estimate lists the term as unknown."""

from __future__ import annotations

import copy
import json

from advisor.cluster.hardware import _presets, from_dict
from advisor.model.specs import resolve_model
from advisor.views import generate as gen


def _cand(t: float, unknown: list[str], stage: int = 3, opt: str = "none") -> gen.Candidate:
    c = gen.Candidate(combo=gen.Combo(stage, opt), micro=1, ga=1, checkpointing="none", accelerator=1, host=1, nvme=0,
                      activations=0, states_source="test", step_time_s=t)
    c.unknown = list(unknown)
    return c


def test_rank_puts_plans_with_an_extra_unknown_part_after_the_complete_ones():
    # 8 s with the CPU step unknown (a lower bound) is not faster than 10 s complete: ranked after
    a, b, c = _cand(10.0, []), _cand(12.0, []), _cand(8.0, ["cpu_optimizer"], opt="cpu")
    assert gen.rank([c, b, a]) == [a, b, c]
    assert (a.incomplete, b.incomplete, c.incomplete) == (False, False, True)
    # a part every plan leaves out (no network bandwidth) is no reason to reorder: ranked on the rest
    x, y = _cand(9.0, ["network"]), _cand(7.0, ["network"])
    assert gen.rank([x, y]) == [y, x] and not x.incomplete and not y.incomplete
    # ... and a plan that also lacks the CPU step still follows them
    z = _cand(5.0, ["network", "cpu_optimizer"], opt="cpu")
    assert gen.rank([z, x, y]) == [y, x, z] and z.incomplete


def test_every_plan_incomplete_in_a_different_part_is_ranked_and_explained():
    """Two plans, each missing a part the other has (no common unknown part): both are incomplete,
    ranked by their (lower-bound) times, and the rank explanation must not look for a complete plan
    that does not exist (min() of nothing raised ValueError before)."""
    p, q = _cand(6.0, ["nvme"], opt="nvme"), _cand(4.0, ["cpu_optimizer"], opt="cpu")
    ranked = gen.rank([p, q])
    assert ranked == [q, p] and p.incomplete and q.incomplete
    res = gen.SearchResult(request=None, hardware=None, inventory=None, ranked=ranked, rejected=[], nvme_path=None)
    res.request = type("R", (), {"tie_tolerance": 0.03, "world_size": 8})()  # data-parallel 8
    gen._explain_ranks(res)
    assert q.why.startswith("fastest")


def _no_host_bw() -> object:
    d = copy.deepcopy(_presets()["systems"]["dgx-h100"])
    del d["host_memory_bandwidth_bytes_per_s"], d["host_core_bandwidth_bytes_per_s"]
    d["nodes"] = 1
    return from_dict(d)


def test_generate_without_host_memory_bandwidth_ranks_cpu_offload_after_complete_plans():
    """llama-3-8b on 1 node x 4 H100 (dgx-h100 without its host memory bandwidth), 16 sequences of
    4,096: plans with and without optimizer offload fit. Each offloading plan's CPU step is unknown;
    every plan without it ranks before them, the table marks their times as lower bounds, and a
    note and each plan's why say what is unknown."""
    inv = resolve_model("llama-3-8b")
    req = gen.Request(global_batch=16, seq_len=4096, nodes=1, gpus_per_node=4, model_parallel=False)
    res = gen.search(inv, _no_host_bw(), req, top=100)
    offl = [c.combo.offload_optimizer != "none" for c in res.ranked]
    assert any(offl) and not all(offl)
    assert offl == sorted(offl), "a plan with an unknown CPU optimizer step ranked before a complete one"
    for c in res.ranked:
        assert ("cpu_optimizer" in c.unknown) == (c.combo.offload_optimizer != "none") == c.incomplete
    assert res.best.combo.offload_optimizer == "none"
    inc = [c for c in res.ranked if c.incomplete]
    assert all(c.why.startswith("incomplete: CPU optimizer step (no host_memory_bandwidth_bytes_per_s) unknown")
               for c in inc)
    assert any(n.startswith(f"{len(inc)} plans need CPU optimizer step (no host_memory_bandwidth_bytes_per_s)")
               for n in res.notes), res.notes
    text = gen.table_text(res, top=100)
    first_inc = next(i for i, c in enumerate(res.ranked) if c.incomplete)
    row = next(x for x in text.splitlines() if x.startswith(f"{first_inc + 1} "))
    assert f">={res.ranked[first_inc].step_time_s:,.2f}" in row, row
    js = gen.result_json(res, top=100)
    assert [p["unknown_parts"] for p in js["plans"]] == [c.unknown for c in res.ranked]
    assert all(p["step_time_is_lower_bound"] == p["incomplete"] for p in js["plans"])
    json.dumps(js)


def test_generate_with_only_the_core_figure_marks_the_cpu_step_a_lower_bound():
    """Newcomer D1 (issue 23): dgx-h100 without host_memory_bandwidth_bytes_per_s but with its
    one-core figure. The CPU step is then timed at the threads' rate only (torchrun's default, 1
    thread per rank with 4 ranks per node: 1 x the preset's host_core_bandwidth_bytes_per_s), the
    most a rank can stream, so it was ranked as if complete (unknown_parts [], lower bound false).
    Each offloading plan must name it unknown, be a lower bound, follow the complete plans, and
    print its rate as "<="; the threads flag is a JSON boolean (D10), not 1.0."""
    d = copy.deepcopy(_presets()["systems"]["dgx-h100"])
    del d["host_memory_bandwidth_bytes_per_s"]
    d["nodes"] = 1
    core_bw = d["host_core_bandwidth_bytes_per_s"]
    inv = resolve_model("llama-3-8b")
    req = gen.Request(global_batch=16, seq_len=4096, nodes=1, gpus_per_node=4, model_parallel=False)
    res = gen.search(inv, from_dict(d), req, top=100)
    offl = [c.combo.offload_optimizer != "none" for c in res.ranked]
    assert any(offl) and not all(offl) and offl == sorted(offl)
    for c in res.ranked:
        assert ("cpu_optimizer" in c.unknown) == (c.combo.offload_optimizer != "none") == c.incomplete
    inc = [c for c in res.ranked if c.incomplete]
    for c in inc:
        co = c.cpu_optimizer
        assert co["cpu_optimizer_bytes_per_s_per_rank"] == core_bw  # 1 thread x one core
        assert c.parts["cpu_optimizer"] == co["cpu_optimizer_bytes_per_rank"] / core_bw
        assert co["cpu_optimizer_threads_limited"] is True
    assert not any("below the rank's share" in n for n in res.notes), res.notes
    text = gen.table_text(res, top=100)
    assert "/rank at <= " in text and "/rank at 2" not in text, text
    js = gen.result_json(res, top=100)
    for p in js["plans"]:
        assert p["step_time_is_lower_bound"] == p["incomplete"] == ("cpu_optimizer" in p["unknown_parts"])
        if p["cpu_optimizer"]:
            assert json.loads(json.dumps(p["cpu_optimizer"]))["cpu_optimizer_threads_limited"] is True


def test_generate_without_network_bandwidth_says_every_time_leaves_it_out():
    """4 nodes without network_bytes_per_s: every plan's collectives across nodes have no rate.
    No plan is ranked as complete-against-incomplete (all share it); the note says the ranking is
    on the other parts and every time is a lower bound."""
    d = copy.deepcopy(_presets()["systems"]["dgx-h100"])
    del d["network_bytes_per_s"]
    d["nodes"] = 2
    inv = resolve_model("llama-3-8b")
    req = gen.Request(global_batch=16, seq_len=4096, nodes=2, gpus_per_node=8, model_parallel=False)
    res = gen.search(inv, from_dict(d), req)
    assert res.ranked and all("network" in c.unknown and not c.incomplete for c in res.ranked)
    assert any(n.startswith("step time leaves out collectives (no network_bytes_per_s across nodes, or "
                            "peer_bytes_per_s within one) for every plan") for n in res.notes), res.notes


def test_a_tie_breaks_toward_less_recompute_then_the_faster_plan():
    """Two hand-built plans within 3 % of each other: ZeRO-2 recomputing 40 of 80 layers at 10.20 s
    (16 % of the step's FLOPs recomputed) and ZeRO-3 recomputing nothing at 10.00 s. The old key
    (offloads, stage, recompute kind, micro-batch) put the slower ZeRO-2 plan first for its lower
    stage; ties now break toward less recompute. Two plans that recompute the same (K = 8 each) are
    ordered by time, the larger micro-batch no longer first when it is slower (10.25 s vs 10.05 s);
    K = 8 against K = 40, same stage and time order reversed: K = 8 first (the kind "k of L" alone
    cannot tell them apart)."""
    z2 = _cand(10.20, [], stage=2)
    z2.checkpointing, z2.recompute = "40", 0.16
    z3 = _cand(10.00, [], stage=3)
    assert gen.rank([z2, z3]) == [z3, z2]
    big, small = _cand(10.25, [], stage=3), _cand(10.05, [], stage=3)
    for c, m in ((big, 4), (small, 2)):
        c.checkpointing, c.recompute, c.micro = "8", 0.032, m
    assert gen.rank([big, small]) == [small, big]
    few, many = _cand(10.10, [], stage=3), _cand(10.00, [], stage=3)
    few.checkpointing, few.recompute = "8", 0.032
    many.checkpointing, many.recompute = "40", 0.16
    ranked = gen.rank([many, few])
    assert ranked == [few, many]
    res = gen.SearchResult(request=None, hardware=None, inventory=None, ranked=ranked, rejected=[], nvme_path=None)
    res.request = type("R", (), {"tie_tolerance": 0.03, "world_size": 8})()  # data-parallel 8
    gen._explain_ranks(res)
    assert few.why.startswith("within 3% of the fastest and simplest")
    assert many.why == ("faster than #1 by 0.10 s (within 3%: #1 is simpler, this one recomputes more: "
                        "checkpointing 40, 16.0% of the step's FLOPs vs 3.2%)")
    assert few.why.endswith("; the fastest is #2 (10.00 s)")
    # beyond the tie the faster plan leads whatever it recomputes
    slow = _cand(10.40, [], stage=3)
    assert gen.rank([slow, many]) == [many, slow]


def test_after_the_tie_winner_every_plan_follows_by_step_time():
    """The simplest plan within 3 % of the fastest goes first (the config written); every other
    plan follows by its step time, not by simplicity. Hand-built: A 10.00 s (data parallel, no
    offload), B 9.90 s (optimizer offload), C 9.80 s (TP2), D 10.50 s (beyond the tie, 10.5 >
    9.8 x 1.03 = 10.094). A wins the tie; then C (9.80) before B (9.90), though B is simpler
    (no model parallelism): the old order was A, B, C, D. Equal times go simplest first: B before
    E, a TP2 plan at B's 9.90 s."""
    a = _cand(10.00, [])
    b = _cand(9.90, [], opt="cpu")
    c = _cand(9.80, [])
    c.tp = 2
    d = _cand(10.50, [])
    assert gen.rank([d, b, c, a]) == [a, c, b, d]
    e = _cand(9.90, [])
    e.tp = 2
    assert gen.rank([e, d, b, c, a]) == [a, c, b, e, d]
    res = gen.SearchResult(request=None, hardware=None, inventory=None, ranked=gen.rank([d, b, c, a]), rejected=[],
                           nvme_path=None)
    res.request = type("R", (), {"tie_tolerance": 0.03, "world_size": 8})()  # data-parallel 8
    gen._explain_ranks(res)
    assert a.why == "within 3% of the fastest and simplest; compute 0.00 s of 10.00 s; the fastest is #2 (9.80 s)"
    assert c.why.startswith("faster than #1 by 0.20 s (within 3%: #1 is simpler, this one is model parallel (TP2+SP))")
    assert b.why.startswith("faster than #1 by 0.10 s (within 3%: #1 is simpler, this one offloads more)")
    assert not d.why.startswith("faster") and "within 3%" not in d.why and "tie" not in d.why
