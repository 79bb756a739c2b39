"""Issue 21: the launch shape's caps hold in every command, through the CLI.

* generate applies the one world-size cap (advisor.config.validation.MAX_WORLD_SIZE = 2^20 ranks)
  to --nodes x --gpus-per-node, as estimate/check/checkpoint apply it to a spec's nodes x
  accelerators: refused in one line, exit 2, before any search (it used to search 17 s and write a
  config for 67,108,864 ranks).
* checkpoint refuses more nodes than ranks (each node runs at least one rank), and a world size
  nothing gave is named as the default in its text and JSON.
"""

from __future__ import annotations

import json

from tests.robustness.robust_helpers import run_cli

CAP = 1 << 20  # README "Inputs, limits and outputs": at most 2^20 ranks


def _hw(tmp_path, nodes: int, per_node: int) -> str:
    p = run_cli(["hardware", "dgx-h100", "--format", "json"])
    assert p.returncode == 0, p.stderr
    spec = json.loads(p.stdout)
    spec = spec[0] if isinstance(spec, list) else spec
    spec["nodes"], spec["accelerators_per_node"] = nodes, per_node
    f = tmp_path / "hw.json"
    f.write_text(json.dumps(spec))
    return str(f)


def _cfg(tmp_path) -> str:
    f = tmp_path / "z3.json"
    f.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                             "zero_optimization": {"stage": 3}}))
    return str(f)


def test_generate_refuses_world_over_the_cap(tmp_path):
    hw = _hw(tmp_path, 65536, 1024)
    for gb in ("67108864", "8"):  # a batch that divides 2^26 ranks, and one whose error would suggest 2^26
        p = run_cli(["generate", "--model", "llama-3-8b", "--hardware", hw, "--nodes", "65536",
                     "--gpus-per-node", "1024", "--global-batch", gb, "--seq-len", "512",
                     "-o", str(tmp_path / "out.json")], timeout=120)
        assert p.returncode == 2, (p.returncode, p.stdout[-500:], p.stderr)
        assert p.stdout == ""
        err = p.stderr.strip()
        assert "\n" not in err and "Traceback" not in err, err
        assert f"{65536 * 1024} is over the limit {CAP}" in err, err
        assert "67108864" not in err.split("over the limit")[1], err  # never suggested as a fix
        assert not (tmp_path / "out.json").exists()
    # the same spec's nodes x accelerators, as estimate reads it: the same words
    p = run_cli(["estimate", _cfg(tmp_path), "--model", "llama-3-8b", "--hardware", hw])
    assert p.returncode == 2 and f"67108864 is over the limit {CAP}" in p.stderr, p.stderr


def test_generate_at_the_cap_is_not_refused_by_it(tmp_path):
    # 1024 x 1024 = 2^20 ranks is allowed; one more node is not
    hw = _hw(tmp_path, 1025, 1024)
    p = run_cli(["generate", "--model", "llama-3-8b", "--hardware", hw, "--nodes", "1025", "--gpus-per-node", "1024",
                 "--global-batch", str(1025 * 1024), "--seq-len", "512"], timeout=120)
    assert p.returncode == 2 and f"{1025 * 1024} is over the limit {CAP}" in p.stderr, p.stderr
    p = run_cli(["generate", "--model", "llama-3-8b", "--hardware", hw, "--nodes", "1024", "--gpus-per-node", "1024",
                 "--global-batch", "8", "--seq-len", "512"], timeout=120)
    assert p.returncode == 2, p.stderr
    # no degree given: every layout's data-parallel size (2^20 / (T x P), T | 8 GPUs... and heads, P | 32
    # layers) is above 8, the smallest 2^20 / (8 x 32) = 4096, so the batch is refused, naming that multiple
    assert "over the limit" not in p.stderr and "not a multiple of any data-parallel size" in p.stderr, p.stderr
    assert "(1048576, 524288," in p.stderr and p.stderr.rstrip().endswith("use 4096"), p.stderr


def test_checkpoint_refuses_more_nodes_than_ranks(tmp_path):
    cfg = _cfg(tmp_path)
    common = ["--model", "llama-3-8b", "--node-mtbf-hours", "1000", "--write-bandwidth", "10GB/s"]
    for args, ws in ((["--world-size", "8", "--nodes", "65536"], 8), (["--nodes", "4"], 1)):
        for fmt in ("text", "json"):
            p = run_cli(["checkpoint", cfg, *common, *args, "--format", fmt])
            assert p.returncode == 2, (args, p.stdout[-300:], p.stderr)
            err = p.stderr.strip().splitlines()[-1]
            assert f"is more nodes than the world size {ws}" in err and "Traceback" not in p.stderr, p.stderr
            assert p.stdout == ""
    # as many nodes as ranks is a job (one rank per node): MTBF of 8 nodes = 1000 h / 8 = 125 h
    p = run_cli(["checkpoint", cfg, *common, "--world-size", "8", "--nodes", "8", "--format", "json"])
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["world_size"] == 8 and d["world_size_source"] == "--world-size"


def test_checkpoint_names_a_default_world_size(tmp_path):
    cfg = _cfg(tmp_path)
    p = run_cli(["checkpoint", cfg, "--model", "llama-3-8b", "--format", "json"])
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["world_size"] == 1 and d["world_size_source"].startswith("default"), d.get("world_size_source")
    p = run_cli(["checkpoint", cfg, "--model", "llama-3-8b", "--color", "never"])
    assert p.returncode == 0, p.stderr
    head = " ".join(p.stdout.split("Checkpoint:", 1)[1].split("file (under save_dir)")[0].split())
    assert "world size 1 (the default:" in head, head
    p = run_cli(["checkpoint", cfg, "--model", "llama-3-8b", "--world-size", "16"])
    assert p.returncode == 0 and "the default" not in p.stdout.split("file (under")[0], p.stdout[:400]
