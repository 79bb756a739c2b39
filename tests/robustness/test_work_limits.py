"""Work limits of the ZeRO-1/2 per-rank accounting (issue 21, round 4).

ZeRO-2 at 1e5 layers x 2^20 ranks took 112 s CPU and 1.4 GB: a rank's slice of the flat partition
held about one tensor boundary, so every rank needed its own figures, and ~10^3 roles each
re-walked the 9e5 tensors. An inventory of 65,536 tensors of distinct sizes at 65,536 ranks (both
inside the documented limits) gave 65,536 roles: 25 s and 2.2 GB. Past
:data:`MAX_ZERO12_CHANGE_RANKS` change ranks or :data:`MAX_RANK_ROLES` roles a command now refuses
with one line; below them the per-rank figures are still DeepSpeed's, now also through the
change-point path for W up to 4 x tensors (checked here against the O(tensors) per-rank formula
:func:`zero12_rank_coverage`, ``stage_1_and_2.py`` get_data_parallel_partitions, and a
brute-force largest slice)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import advisor.ledger.state as st
from advisor.config.validation import MAX_RANK_ROLES, MAX_ZERO12_CHANGE_RANKS
from robust_helpers import clean_env, run_cli

HF = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
      "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 128}
Z2 = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}


def _largest_part(lay: st.Zero12Layout, r: int) -> int:
    """Brute force: the largest part of one parameter inside rank r's slice [r P, (r+1) P)."""
    lo, hi = r * lay.P, (r + 1) * lay.P
    return max([min(a + n, hi) - max(a, lo) for a, n in zip(lay.starts, lay.numels) if a < hi and a + n > lo]
               or [0])


def test_change_point_path_is_the_per_rank_formula(monkeypatch) -> None:
    """With the limit lowered below W (W <= 4 x tensors), every rank's (I_r, Cov_r, K_r) and largest
    slice come from the change points, and equal the per-rank formulas at every rank."""
    monkeypatch.setattr(st, "MAX_ZERO12_CHANGE_RANKS", 8)
    rng = random.Random(21)
    for W, T, align in ((48, 20, True), (64, 40, False), (200, 60, True)):
        numels = [rng.choice((1, 7, 64, 100, 333, 0, 1024)) for _ in range(T)]
        lay = st.zero12_group_layout(numels, W, 2, align)
        assert W <= 4 * T and W > st.MAX_ZERO12_CHANGE_RANKS
        runs = st.zero12_all_ranks(lay, W)
        assert runs.to_list() == [st.zero12_rank_coverage(lay, r) for r in range(W)]
        assert st._largest_slices_one(lay, W).to_list() == [_largest_part(lay, r) for r in range(W)]
        # the count bounds the pieces every per-rank figure is made of
        assert len(runs.values) <= st.zero12_change_ranks([lay], W) <= W


def test_change_ranks_counts_the_ranks_holding_a_boundary(monkeypatch) -> None:
    """Tensors of 10 elements, P = 4: the boundaries 0, 10, 20, ... fall in ranks 0, 2, 5, 7, 10, ...;
    each tensor's first and last rank and the rank after each are the change candidates."""
    monkeypatch.setattr(st, "MAX_ZERO12_CHANGE_RANKS", 4)
    lay = st.zero12_group_layout([10] * 8, 20, 4, False)  # n = 80 = n_pad, P = 4
    assert lay.P == 4
    firsts = {10 * j // 4 for j in range(8)}
    lasts = {(10 * j + 9) // 4 for j in range(8)}
    want = {0} | firsts | {f + 1 for f in firsts} | lasts | {x + 1 for x in lasts}
    assert st.zero12_change_ranks([lay], 20) == len({p for p in want if p < 20})


def test_zero2_at_1e5_layers_and_2_20_ranks_is_refused_in_one_line(tmp_path: Path) -> None:
    """The case that took 112 s: a tiny llama (9 tensors of <= 8,192 elements per layer) at 1e5 layers
    has n = 4.1e9 elements, so P = n / 2^20 ~ 3,918 elements: nearly every rank's slice holds a
    tensor boundary, far more than the limit."""
    cfg, model = tmp_path / "z2.json", tmp_path / "deep.json"
    cfg.write_text(json.dumps(Z2))
    model.write_text(json.dumps({**HF, "num_hidden_layers": 100_000}))
    for cmd in (["estimate", "--seq-len", "128"], ["check", "--seq-len", "128", "--gpu-memory", "80GB",
                                                  "--host-memory", "2TB"], ["checkpoint"]):
        p = run_cli([cmd[0], str(cfg), "--model", str(model), "--world-size", str(1 << 20), *cmd[1:]],
                    env=clean_env(), timeout=240)
        assert p.returncode == 2, (cmd, p.stderr[-500:])
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
        assert f"more than the {MAX_ZERO12_CHANGE_RANKS:,}" in lines[0] and "1,048,576" in lines[0], lines[0]


def test_many_distinct_roles_are_refused_in_one_line(tmp_path: Path) -> None:
    """65,536 tensors of distinct sizes 1,000..66,535 at 65,536 ranks: P ~ n / W ~ 33,768 elements,
    so each rank's slice meets one to three tensors of its own sizes, and I_r (the full numel of
    the tensors meeting the slice) takes far more than 8,192 distinct values."""
    cfg, inv = tmp_path / "z2.json", tmp_path / "inv.json"
    cfg.write_text(json.dumps(Z2))
    inv.write_text(json.dumps({"name": "distinct", "tensors": [{"name": f"layers.{i}.w", "shape": [1000 + i]}
                                                               for i in range(65_536)]}))
    p = run_cli(["estimate", str(cfg), "--model", str(inv), "--world-size", "65536"], env=clean_env(), timeout=240)
    assert p.returncode == 2, p.stderr[-500:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and f"more than the {MAX_RANK_ROLES:,}" in lines[0], p.stderr


def test_generate_skips_the_stages_past_a_limit_and_says_so(monkeypatch) -> None:
    """With the change-rank limit at 1, every ZeRO-1/2 plan of 8 ranks is past it (rank 0 and
    the rank after the first tensor's end are two change ranks): generate still searches ZeRO-0
    and ZeRO-3, ranks no ZeRO-1/2 plan, names the limit in its notes, and every fitted candidate
    is still counted once (evaluated = ranked + superseded + rejected)."""
    from dataclasses import replace

    from advisor.cluster.hardware import resolve_hardware
    from advisor.model.specs import resolve_model
    from advisor.views import generate as gen

    monkeypatch.setattr(st, "MAX_ZERO12_CHANGE_RANKS", 1)
    inv = resolve_model("llama-3.2-1b")
    hw = replace(resolve_hardware("dgx-h100"), nodes=1, accelerators_per_node=8)
    res = gen.search(inv, hw, gen.Request(global_batch=8, seq_len=512, nodes=1, gpus_per_node=8))
    stages = {c.combo.stage for c in res.ranked} | {c.combo.stage for c in res.rejected}
    assert stages and not stages & {1, 2} and 3 in stages, stages
    assert any("over a documented work limit" in n and "more than the 1 " in n for n in res.notes), res.notes
    assert res.evaluated == len(res.ranked) + res.superseded + len(res.rejected)
