"""Work bounds (issue 21): every command at the documented limits, in seconds and MB.

Each case runs ``python -m advisor`` as a whole process and is printed next to a baseline of
the same command on a small input measured in the same run, with the ratio, so the numbers
mean something on a loaded machine too:

* estimate, check and checkpoint at the maximum world size (2^20 ranks; ZeRO-1 and ZeRO-3)
  vs the same at 8 ranks (ZeRO-1/2 ranks differ, so their roles are ranges of ranks and their
  per-rank figures runs: advisor.ledger.ranks);
* lint of a 100k-key config vs a 10-key one (key positions were mapped in quadratic time,
  unknown keys searched for a did-you-mean one by one);
* estimate of a 1e5-layer model (the most layers a model spec may have) vs 32 layers, ZeRO-3
  and ZeRO-1 (ZeRO-1/2 partition per tensor: 9e5 tensors); ZeRO-2 at 1e5 layers and 2^20 ranks
  (a rank's slice holds a tensor boundary almost everywhere: ~10^6 change ranks, refused past
  MAX_ZERO12_CHANGE_RANKS), and the largest accepted neighbours: 3,600 layers at 2^20 ranks
  (~53k change ranks) and 8,000 tensors of distinct sizes at 8,192 ranks (~8k rank roles, near
  MAX_RANK_ROLES), with 65,536 of them at 65,536 ranks refused;
* generate of the 1e5-layer model on 8 GPUs vs 32 layers;
* ``check --format json`` at 2^20 ranks and ``report`` (HTML, T rules, movement) at 65,536
  nodes of 8 GPUs with NVMe offload (JSON and HTML name ranks as ranges, never every rank);
* refusals beyond the limits (a 1e6-layer config.json, ``--hardware dgx-h100:999999999``, a
  455-byte YAML alias bomb), which must answer at once.

Run: python benchmarks/bounds.py [CASE-SUBSTRING ...]. Prints wall and CPU seconds, peak RSS (MB)
and exit codes, and the CPU ratio to the baseline; asserts nothing (it is not a timed test).
Results: benchmarks/results/bounds.txt.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


#: The child reports its own peak RSS (KiB on Linux) on stderr at exit.
CHILD = ("import atexit, resource, runpy, sys\n"
         "atexit.register(lambda: print('MAXRSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr))\n"
         "sys.argv = ['ds-advisor'] + sys.argv[1:]\n"
         "runpy.run_module('advisor', run_name='__main__')\n")


def run(args: list[str]) -> tuple[float, float, float, int]:
    """(wall seconds, CPU seconds (user + system), peak RSS in MB, exit code) of ``python -m
    advisor ARGS``. CPU seconds are the figure to read on a shared, loaded machine."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for k in ("WORLD_SIZE", "SLURM_NTASKS", "LOCAL_WORLD_SIZE"):
        env.pop(k, None)
    t0 = time.perf_counter()
    c0 = os.times()
    p = subprocess.run([sys.executable, "-c", CHILD, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       env=env, check=False, text=True, errors="replace")
    wall = time.perf_counter() - t0
    c1 = os.times()
    cpu = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    rss = [int(x.split()[1]) for x in p.stderr.splitlines() if x.startswith("MAXRSS ")]
    return wall, cpu, (rss[-1] / 1024 if rss else float("nan")), p.returncode


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="ds-advisor-bounds-"))
    z1 = tmp / "z1.json"
    z1.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": 1}}))
    z2 = tmp / "z2.json"
    z2.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": 2}}))
    z3 = ROOT / "sample_configs" / "zero3_cpu_offload.json"
    wide = tmp / "wide.json"
    wide.write_text(json.dumps({"train_batch_size": 8, **{f"key_{i}": i for i in range(100_000)}}, indent=1))
    narrow = tmp / "narrow.json"
    narrow.write_text(json.dumps({"train_batch_size": 8, **{f"key_{i}": i for i in range(10)}}, indent=1))
    hf = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
          "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 128}
    deep, shallow, deeper = tmp / "deep.json", tmp / "shallow.json", tmp / "deeper.json"
    deep.write_text(json.dumps({**hf, "num_hidden_layers": 100_000}))
    mid = tmp / "mid.json"
    mid.write_text(json.dumps({**hf, "num_hidden_layers": 3_600}))
    distinct8k, distinct64k = tmp / "distinct8k.json", tmp / "distinct64k.json"
    for f, n in ((distinct8k, 8_000), (distinct64k, 65_536)):
        f.write_text(json.dumps({"name": "distinct", "tensors": [{"name": f"layers.{i}.w", "shape": [1000 + i]}
                                                                 for i in range(n)]}))
    shallow.write_text(json.dumps({**hf, "num_hidden_layers": 32}))
    deeper.write_text(json.dumps({**hf, "num_hidden_layers": 1_000_000}))
    rows = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    rows += [f"{n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]" for p, n in zip("abcdefgh", "bcdefghi")]
    bomb = tmp / "bomb.yaml"
    bomb.write_text("distributed_type: DEEPSPEED\n" + "\n".join(rows) + "\n")
    nvme = tmp / "nvme.json"
    nvme.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                "optimizer": {"type": "Adam", "params": {"lr": 1e-4}},
                                "zero_optimization": {"stage": 3,
                                                      "offload_optimizer": {"device": "nvme", "nvme_path": "/raid/ds"},
                                                      "offload_param": {"device": "nvme", "nvme_path": "/raid/ds"}}}))
    html = str(tmp / "r.html")
    cap = ["--gpu-memory", "80GB", "--host-memory", "2TB"]
    M = str(1 << 20)
    cases = [
        ("estimate ZeRO-3, 2^20 ranks", ["estimate", str(z3), "--model", "llama-3-8b", "--world-size", M],
         ["estimate", str(z3), "--model", "llama-3-8b", "--world-size", "8"]),
        ("estimate ZeRO-1, 2^20 ranks", ["estimate", str(z1), "--model", "llama-3-8b", "--world-size", M],
         ["estimate", str(z1), "--model", "llama-3-8b", "--world-size", "8"]),
        ("check ZeRO-1, 2^20 ranks", ["check", str(z1), "--model", "llama-3-8b", "--world-size", M, *cap],
         ["check", str(z1), "--model", "llama-3-8b", "--world-size", "8", *cap]),
        ("estimate ZeRO-1 JSON, 2^20 ranks", ["estimate", str(z1), "--model", "llama-3-8b", "--world-size", M,
                                              "--format", "json"],
         ["estimate", str(z1), "--model", "llama-3-8b", "--world-size", "8", "--format", "json"]),
        ("check ZeRO-3, 2^20 ranks", ["check", str(z3), "--model", "llama-3-8b", "--world-size", M, *cap],
         ["check", str(z3), "--model", "llama-3-8b", "--world-size", "8", *cap]),
        ("checkpoint ZeRO-3, 2^20 ranks", ["checkpoint", str(z3), "--model", "llama-3-8b", "--world-size", M],
         ["checkpoint", str(z3), "--model", "llama-3-8b", "--world-size", "8"]),
        ("checkpoint ZeRO-1, 2^20 ranks", ["checkpoint", str(z1), "--model", "llama-3-8b", "--world-size", M],
         ["checkpoint", str(z1), "--model", "llama-3-8b", "--world-size", "8"]),
        ("lint, 100k keys", ["lint", str(wide)], ["lint", str(narrow)]),
        ("estimate, 1e5 layers", ["estimate", str(z3), "--model", str(deep)],
         ["estimate", str(z3), "--model", str(shallow)]),
        ("estimate ZeRO-1, 1e5 layers", ["estimate", str(z1), "--model", str(deep), "--seq-len", "128"],
         ["estimate", str(z1), "--model", str(shallow), "--seq-len", "128"]),
        ("refuse ZeRO-2, 1e5 layers, 2^20", ["estimate", str(z2), "--model", str(deep), "--seq-len", "128",
                                             "--world-size", M],
         ["estimate", str(z2), "--model", str(shallow), "--seq-len", "128", "--world-size", M]),
        ("estimate ZeRO-2, 3600 layers, 2^20", ["estimate", str(z2), "--model", str(mid), "--seq-len", "128",
                                                "--world-size", M],
         ["estimate", str(z2), "--model", str(shallow), "--seq-len", "128", "--world-size", M]),
        ("estimate ZeRO-2, 8k sizes, 8192", ["estimate", str(z2), "--model", str(distinct8k), "--world-size", "8192"],
         ["estimate", str(z2), "--model", str(distinct8k), "--world-size", "8"]),
        ("refuse ZeRO-2, 64k sizes, 65536", ["estimate", str(z2), "--model", str(distinct64k), "--world-size", "65536"],
         ["estimate", str(z2), "--model", str(distinct8k), "--world-size", "8"]),
        ("generate, 1e5 layers, 8 GPUs", ["generate", "--model", str(deep), "--hardware", "dgx-h100", "--nodes", "1",
                                          "--gpus-per-node", "8", "--global-batch", "8", "--seq-len", "128"],
         ["generate", "--model", str(shallow), "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
          "--global-batch", "8", "--seq-len", "128"]),
        ("check JSON ZeRO-1, 2^20 ranks", ["check", str(z1), "--model", "llama-3-8b", "--world-size", M, *cap,
                                           "--format", "json"],
         ["check", str(z1), "--model", "llama-3-8b", "--world-size", "8", *cap, "--format", "json"]),
        ("report NVMe, dgx-h100:65536", ["report", str(nvme), "--params", "1000000000", "--hardware",
                                         "dgx-h100:65536", "--seq-len", "128", "-o", html, "--force"],
         ["report", str(nvme), "--params", "1000000000", "--hardware", "dgx-h100:1", "--seq-len", "128",
          "-o", html, "--force"]),
        ("refuse 1e6 layers", ["estimate", str(z3), "--model", str(deeper)],
         ["estimate", str(z3), "--model", str(shallow)]),
        ("refuse dgx-h100:999999999", ["estimate", str(z3), "--model", "gpt2", "--hardware", "dgx-h100:999999999"],
         ["estimate", str(z3), "--model", "gpt2", "--hardware", "dgx-h100:1"]),
        ("refuse YAML alias bomb", ["resolve", str(bomb)], ["resolve", str(ROOT / "sample_configs" /
                                                                     "zero3_cpu_offload.json"), "--hf"]),
    ]
    only = sys.argv[1:]  # optional: case-name substrings to run
    print(f"{'case':<32} {'wall s':>7} {'CPU s':>6} {'MB':>6} {'rc':>3}   {'base CPU s':>10} {'MB':>6}   {'CPU ratio':>9}")
    for name, args, base in cases:
        if only and not any(o in name for o in only):
            continue
        _, bc, bm, _ = run(base)
        w, c, m, rc = run(args)
        print(f"{name:<32} {w:7.2f} {c:6.2f} {m:6.0f} {rc:3d}   {bc:10.2f} {bm:6.0f}   {c / bc:8.1f}x", flush=True)

if __name__ == "__main__":
    main()
