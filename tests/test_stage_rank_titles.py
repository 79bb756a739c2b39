"""ncb21: estimate's pipeline-stage headers named too few ranks. For TP4 x PP2 x DP2 on 16 ranks
(generate's llama-3-70b plan on two dgx-h100 nodes) the text said "pipeline stage 0: ranks 0-3 (the
worst)" and "pipeline stage 1: ranks 8-11": each stage is 8 ranks, and ranks 4-7 / 12-15 hold the same
bytes (only the data-parallel rank 0 writing the model-states file makes their timelines differ). A
header now names every rank of the stage with the shown row's bytes per tier and class, the timeline
those with its timeline too, and the stage's whole rank set where they are fewer. The stage's ranks
expected are DeepSpeed's own: PipeModelDataParallelTopology (runtime/pipe/topology.py l.244-248)
filter_match(pipe=s); which ranks share the row's bytes comes from the estimate's JSON roles."""

from __future__ import annotations

import json

import pytest

from advisor.ledger.ranks import RankSet
from tests.conftest import run_cli

PP, TP, DP = 2, 4, 2
ARGS = ["--model", "llama-3.2-1b", "--world-size", str(PP * TP * DP), "--tensor-parallel", str(TP),
        "--pipeline-parallel", str(PP), "--seq-len", "1024"]
BASE = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
#: ZeRO-1 with CPU offload: every rank of a stage has the same bytes per tier (the generate plan's case);
#: ZeRO-1 on the accelerator: data-parallel ranks keep different gradient slices (ranks 4-7 differ).
CONFIGS = {"offload": {**BASE, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}},
           "zero1": {**BASE, "zero_optimization": {"stage": 1}}}


def _stage_ranks(stage: int) -> list[int]:
    topology = pytest.importorskip("deepspeed.runtime.pipe.topology")
    return sorted(topology.PipeModelDataParallelTopology(num_pp=PP, num_mp=TP, num_dp=DP).filter_match(pipe=stage))


def _title(ranks: list[int]) -> str:
    rs = RankSet.of(ranks)
    return "ranks " + ", ".join(f"{a}" if b == a + 1 else f"{a}-{b - 1}" for a, b in rs.ranges)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_stage_headers_name_every_rank_with_the_rows_bytes(tmp_path, name):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(CONFIGS[name]))
    text = " ".join(run_cli(["estimate", str(cfg), *ARGS]).stdout.split())
    roles = json.loads(run_cli(["estimate", str(cfg), *ARGS, "--format", "json"]).stdout)["ranks"]
    for stage in range(PP):
        stage_ranks = _stage_ranks(stage)
        mine = [r for r in roles if r["stages"] == [stage]]
        got = sorted(x for r in mine for a, b in r["rank_ranges"] for x in range(a, b + 1))
        assert got == stage_ranks, (stage, got)  # the ledger's roles cover DeepSpeed's stage
        shown = max(mine, key=lambda r: r["peak"]["accelerator"]["bytes"])  # the row text shows
        same = sorted(x for r in mine if r["tiers"] == shown["tiers"] for a, b in r["rank_ranges"]
                      for x in range(a, b + 1))
        head = (f"Per-rank training state, pipeline stage {stage}: {_title(same)}" if same == stage_ranks else
                f"Per-rank training state, pipeline stage {stage} ({_title(stage_ranks)}): {_title(same)}")
        assert head in text, (head, text[:400])
        if name == "offload":  # the bug's case: the whole stage has the row's bytes
            assert same == stage_ranks
            assert f"Step timeline, pipeline stage {stage} ({_title(stage_ranks)}): " in text
        else:
            assert same != stage_ranks
