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
    assert checkpoint_rank_rows(files) == [  # largest first; (path, written by, bytes each, files)
        ("global_step{N}/bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt", "ranks 0-3, each", 100, 4),
        ("global_step{N}/bf16_zero_pp_rank_4_mp_rank_00_optim_states.pt", "rank 4", 99, 1),
        ("global_step{N}/mp_rank_00_model_states.pt", "rank 0", 7, 1),
        ("exp_avg.swp", "3 ranks, each", 5, 3)]


def test_pipeline_parallel_rows_show_the_largest_files_and_count_files_not_rows(tmp_path):
    """Second newcomer check: at PP 2 the ranks-4-7 optimizer file (the largest) sat behind
    '... 28 more files of the same kind', and 28 counted rows, one of them 4 files."""
    cfg = tmp_path / "z1.json"  # ZeRO-1 (pipeline parallelism refuses ZeRO-2/3: G001)
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8,
                               "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}))
    args = [sys.executable, "-m", "advisor", "estimate", str(cfg),
            "--model", "llama-3-8b", "--world-size", "8", "--seq-len", "2048", "--pipeline-parallel", "2"]
    js = json.loads(subprocess.run(args + ["--format", "json"], capture_output=True, text=True, check=True).stdout)
    big = [f for f in js["checkpoint"]["files"] if f["bytes"] >= 2**20]
    largest = max(f["bytes"] for f in big)
    text = subprocess.run(args, capture_output=True, text=True, check=True, env={
        **__import__("os").environ, "COLUMNS": "200"}).stdout
    table = text.split("Durable checkpoint", 1)[1].split("per save:", 1)[0]
    assert f"{largest:,}" in table
    optim = [f for f in big if "optim_states" in (f.get("path") or f["name"])]
    assert {f"mp_rank_0{m}_optim" for m in {int(f['path'].split('mp_rank_')[1][:2]) for f in optim}} <= {
        x for x in ("mp_rank_00_optim", "mp_rank_01_optim") if x in table}
    shown = sum(1 for f in big if (f.get("path") or f["name"]) in table)
    rows_grouped = table.count("_rank_{r}_")
    import re
    m = re.search(r"\.\.\. ([\d,]+) more files", table)
    if m:  # every file is either named, in a grouped row, or counted in the "more" line
        grouped_files = sum(1 for f in big if "optim_states" in (f.get("path") or f["name"])
                            and (f.get("path") or f["name"]) not in table)
        assert shown + grouped_files + int(m.group(1).replace(",", "")) == len(big), (shown, grouped_files, m.group(1))
    assert rows_grouped >= 1


def test_estimate_text_names_each_ranks_file_once_with_the_jsons_bytes():
    args = [sys.executable, "-m", "advisor", "estimate", str(ROOT / "sample_configs" / "zero3_cpu_offload.json"),
            "--model", "llama-3-8b", "--world-size", "8", "--seq-len", "2048"]
    js = json.loads(subprocess.run(args + ["--format", "json"], capture_output=True, text=True, check=True).stdout)
    optim = [f for f in js["checkpoint"]["files"] if "optim_states" in (f.get("path") or f["name"])]
    assert sorted(f["rank"] for f in optim) == list(range(8)) and len({f["bytes"] for f in optim}) == 1
    text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    lines = [x for x in text.splitlines() if "optim_states.pt" in x]
    assert len(lines) == 1 and "rank_{r}_" in lines[0], lines
    after = text[text.index(lines[0]):].split("per save:", 1)[0]  # the row's cells, as a table row or a record
    assert "ranks 0-7, each" in after and f"{optim[0]['bytes']:,}" in after, after
