"""estimate's text lists a checkpoint's per-rank files once per kind (newcomer check, 2026-12-06:
eight identical optim_states lines for ranks 0-7), with the bytes each rank writes; the JSON keeps
one entry per file."""
import json
import subprocess
import sys
from pathlib import Path

from advisor.render.text import checkpoint_rank_rows

ROOT = Path(__file__).resolve().parents[1]


def test_rank_files_with_equal_bytes_are_one_row_and_unequal_ones_are_not():
    files = [{"path": f"global_step{{N}}/bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt", "rank": r,
              "bytes": 100} for r in range(4)]
    files.append({"path": "global_step{N}/bf16_zero_pp_rank_4_mp_rank_00_optim_states.pt", "rank": 4, "bytes": 99})
    files.append({"path": "global_step{N}/mp_rank_00_model_states.pt", "rank": 0, "bytes": 7})
    files.append({"name": "exp_avg.swp", "count": 3, "bytes": 5})
    assert checkpoint_rank_rows(files) == [
        ("global_step{N}/bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt", "ranks 0-3, each", 100),
        ("global_step{N}/bf16_zero_pp_rank_4_mp_rank_00_optim_states.pt", "rank 4", 99),
        ("global_step{N}/mp_rank_00_model_states.pt", "rank 0", 7),
        ("exp_avg.swp", "3 ranks, each", 5)]


def test_estimate_text_names_each_ranks_file_once_with_the_jsons_bytes():
    args = [sys.executable, "-m", "advisor", "estimate", str(ROOT / "sample_configs" / "zero3_cpu_offload.json"),
            "--model", "llama-3-8b", "--world-size", "8", "--seq-len", "2048"]
    js = json.loads(subprocess.run(args + ["--format", "json"], capture_output=True, text=True, check=True).stdout)
    optim = [f for f in js["checkpoint"]["files"] if "optim_states" in (f.get("path") or f["name"])]
    assert sorted(f["rank"] for f in optim) == list(range(8)) and len({f["bytes"] for f in optim}) == 1
    text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    lines = [x for x in text.splitlines() if "optim_states.pt" in x]
    assert len(lines) == 1 and "rank_{r}_" in lines[0], lines
    after = text.split(lines[0], 1)[1].split("per save:", 1)[0]  # the row's other cells, however laid out
    assert "ranks 0-7, each" in after and f"{optim[0]['bytes']:,}" in after, after
