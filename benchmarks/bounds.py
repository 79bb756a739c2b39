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
* generate of the 1e5-layer model on 8 GPUs vs 32 layers, at global batch 8 / sequence 128 and at
  global batch 64 / sequence 512: refused since genlim21 (exit 2, over generate's own limit of
  MAX_GENERATE_TENSORS = 100,000 tensors), as is generate of the inventory at MAX_TENSORS; generate at its
  limit, both kinds (11,110 llama layers = 99,993 tensors; 100,000 nameless tensors, no layer repeat),
  and a real model's shape at its most tensors (Kimi-K2, one module per expert: 69,975; DeepSeek-V3's, 45,395) vs
  the fused preset;
  generate at 64 micro-batch sizes (7,560 sequences per rank; genlim21's MAX_GENERATE_MICRO_BATCHES, gone since
  mb21 searched them by pieces) for gpt2 on one GPU and with the tensor limit on 8 GPUs, at 6,720 divisors
  (963,761,198,400 per rank, one GPU), and gpt2 on 65,536 nodes x 8 at global batch 2^40;
* ``check --format json`` at 2^20 ranks and ``report`` (HTML, T rules, movement) at 65,536
  nodes of 8 GPUs with NVMe offload (JSON and HTML name ranks as ranges, never every rank);
* issue 21, round 2: an accelerate YAML with 2^20 ranks on one node (refused: over 1,024 per
  node), ds_advisor.ignore with 20k "S002:KEY" entries and with 200k unknown codes vs 10
  entries, lint/check of a config with a 2M-element ``[{}, ...]`` array (8.0 MB) vs 10
  elements, estimate of a 1M-tensor inventory (48 MB) vs 10 tensors, and at 1e5 layers:
  estimate ZeRO-3 at 2^20 ranks, report and estimate ZeRO-2 at 8 ranks;
* issue 21, round 3: estimate of a 1.9M-tensor inventory (nameless entries, 40 MB), refusals of
  2.1M tensors and of the most a 64 MiB file can list (4.8M), check ZeRO-3 at 1e5 layers;
  refusals of tensors lists whose entries are not objects: 2.1M ``[64, 64]`` and 22M ``[]`` (64 MiB), and the
  22M ``[]`` after one tensor object (flat, and with an object inside it);
* issue 21, inv21 / maxt21: an inventory at the tensor limit (exactly MAX_TENSORS nameless ``[64, 64]``
  tensors: 2,000,000 until maxt21, 40 MB; 500,000 since, 10 MB): estimate and check of ZeRO-3 on 8 ranks,
  generate's refusal of it (no architecture in its meta) and generate with one; the refusals of
  MAX_TENSORS + 1 tensors: objects, ``[64, 64]`` lists, and objects nested six deep (past the regex of
  ``readers.object_list_scan``: read window by window). The round 2/3 rows of 1M and 1.9M tensors are
  refusals since maxt21 (over the limit);
* issue 21, cand21: the M100 fixes at 1e5 layers, each candidate re-estimated: ``estimate --hardware
  workstation-4090`` and ``check`` of ZeRO-1 on one 24 GB GPU (no single change fits: the pairs are
  tried), ``check`` of ZeRO-3 on 8 ranks of 6 GB;
* hfperf19: ``estimate --hf`` of the 1e5-layer model (ZeRO-3, "auto" values, no optimizer block: the plan
  regroups the inventory into the HF Trainer's decay / no-decay param groups) vs 32 layers;
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
sys.path.insert(0, str(ROOT))  # the tree measured: its limits and presets build the inputs


#: The child reports its own peak RSS (KiB on Linux) on stderr at exit: its address space's VmHWM
#: (/proc/self/status), since ru_maxrss keeps the pre-exec (vforked parent's) high-water mark across exec.
CHILD = ("import atexit, resource, runpy, sys\n"
         "def _hwm():\n"
         "    try:\n"
         "        return next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM:'))\n"
         "    except (OSError, StopIteration):\n"
         "        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
         "atexit.register(lambda: print('MAXRSS', _hwm(), file=sys.stderr))\n"
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
    z3hf = tmp / "z3hf.json"  # "auto" as the HF Trainer fills it in, no optimizer block: the Trainer's two groups
    z3hf.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                                "train_batch_size": "auto", "bf16": {"enabled": "auto"},
                                "zero_optimization": {"stage": 3}}))
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
    # generate's larger workload (~4,400 plans): sequence 512 needs max_position_embeddings >= 512.
    deep_long, shallow_long = tmp / "deep_long.json", tmp / "shallow_long.json"
    deep_long.write_text(json.dumps({**hf, "max_position_embeddings": 2048, "num_hidden_layers": 100_000}))
    shallow_long.write_text(json.dumps({**hf, "max_position_embeddings": 2048, "num_hidden_layers": 32}))
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
    acc = "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 1\n" \
          "num_machines: 1\nnum_processes: {}\n"
    z3b = tmp / "z3.json"  # no train_batch_size: sample_configs' 64 is B001 at 2^20 ranks
    z3b.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                               "zero_optimization": {"stage": 3}}))
    acc_1m, acc_8 = tmp / "acc_1m.yaml", tmp / "acc_8.yaml"
    acc_1m.write_text(acc.format(1 << 20))
    acc_8.write_text(acc.format(8))
    base_cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}
    ign_keys, ign_unknown, ign_few = tmp / "ign_keys.json", tmp / "ign_unknown.json", tmp / "ign_few.json"
    ign_keys.write_text(json.dumps({**base_cfg, "ds_advisor": {"ignore": [f"S002:x{i}" for i in range(20_000)]}}))
    ign_unknown.write_text(json.dumps({**base_cfg, "ds_advisor": {"ignore": [f"ZZ{i}" for i in range(200_000)]}}))
    ign_few.write_text(json.dumps({**base_cfg, "ds_advisor": {"ignore": [f"S002:x{i}" for i in range(10)]}}))
    arr2m, arr10 = tmp / "arr2m.json", tmp / "arr10.json"
    # Large inputs are written piece by piece: a child's peak RSS (ru_maxrss) survives exec, so a
    # parent that once held a 1M-element list would floor every child's MB figure at its own peak.
    for f, n in ((arr2m, 2_000_000), (arr10, 10)):  # 2M elements: 8.0 MB
        with f.open("w") as out:
            out.write(json.dumps(base_cfg)[:-1] + ', "x": [')
            for i in range(n):
                out.write(", {}" if i else "{}")
            out.write("]}")
    inv1m, inv10 = tmp / "inv1m.json", tmp / "inv10.json"
    for f, n in ((inv1m, 1_000_000), (inv10, 10)):  # 1M tensors: 48 MB, under the 64 MiB limit
        with f.open("w") as out:
            out.write('{"name": "inv", "tensors": [')
            for i in range(n):
                out.write((", " if i else "") + json.dumps({"name": f"layers.{i}.w", "shape": [64, 64]}))
            out.write("]}")
    # issue 21 round 3: inventories near and over MAX_TENSORS (2M), nameless entries so 1.9M fit in 64 MiB,
    # and the most a 64 MiB file can list (4.8M {"shape": [1]}), refused before parsing into objects
    inv19m, inv21m, invmax = tmp / "inv19m.json", tmp / "inv21m.json", tmp / "invmax.json"
    for f, n, entry in ((inv19m, 1_900_000, '{"shape": [64, 64]}'), (inv21m, 2_100_000, '{"shape": [64, 64]}'),
                        (invmax, (64 * 1024 * 1024 - 40) // 14, '{"shape":[1]}')):
        with f.open("w") as out:
            out.write('{"tensors": [')
            for i in range(n):
                out.write(("," if i else "") + entry)
            out.write("]}")
    # robust21: tensors lists of entries that are not objects (few "{", so not counted before the parse):
    # 2.1M shape lists, and the most a 64 MiB file can list, 22M [] (3 bytes each)
    inv21lists, inv22mempty = tmp / "inv21lists.json", tmp / "inv22mempty.json"
    for f, n, entry in ((inv21lists, 2_100_000, "[64, 64]"), (inv22mempty, (64 * 1024 * 1024 - 40) // 3, "[]")):
        with f.open("w") as out:
            out.write('{"tensors": [' + entry)
            for _ in range((n - 1) // 100_000):
                out.write(("," + entry) * 100_000)
            out.write(("," + entry) * ((n - 1) % 100_000) + "]}")
    # small21: the same 22M [] after one tensor object (flat: the one-match scan; with an object inside: the
    # collapsing scan), which passed the first-entry check and was parsed whole
    inv22after, inv22nested = tmp / "inv22after.json", tmp / "inv22nested.json"
    for f, head in ((inv22after, '{"name": "a", "shape": [1]}'),
                    (inv22nested, '{"name": "a", "shape": [1], "meta": {"x": [[1]]}}')):
        n = (64 * 1024 * 1024 - 20 - len(head)) // 3
        with f.open("w") as out:
            out.write('{"tensors": [' + head)
            for _ in range(n // 100_000):
                out.write(",[]" * 100_000)
            out.write(",[]" * (n % 100_000) + "]}")
    # inv21 / maxt21: exactly MAX_TENSORS tensors (with and without the architecture generate needs), and
    # MAX_TENSORS + 1: objects, [64, 64] lists, objects six deep (past the scan's regex)
    from advisor.model.inventory import MAX_TENSORS
    inv_at, inv_at_meta, deep6 = tmp / "inv_at_limit.json", tmp / "inv_at_limit_meta.json", tmp / "deep6.json"
    over_obj, over_lists = tmp / "inv_over_limit.json", tmp / "inv_over_limit_lists.json"
    arch = {"family": "llama", "hidden_size": 64, "num_layers": 32, "num_heads": 4, "num_kv_heads": 4,
            "intermediate_size": 128, "vocab_size": 1000, "max_seq_len": 128}
    for f, n, entry, head in ((inv_at, MAX_TENSORS, '{"shape": [64, 64]}', '{"tensors": ['),
                              (inv_at_meta, MAX_TENSORS, '{"shape": [64, 64]}', '{"meta": ' + json.dumps(arch) + ', "tensors": ['),
                              (over_obj, MAX_TENSORS + 1, '{"shape": [64, 64]}', '{"tensors": ['),
                              (over_lists, MAX_TENSORS + 1, '[64, 64]', '{"tensors": ['),
                              (deep6, MAX_TENSORS + 1, '{"a":{"a":{"a":{"a":{"a":{}}}}}}', '{"tensors": [')):
        with f.open("w") as out:
            out.write(head + entry)
            for _ in range((n - 1) // 100_000):
                out.write(("," + entry) * 100_000)
            out.write(("," + entry) * ((n - 1) % 100_000) + "]}")
    # genlim21: generate at its own limit (MAX_GENERATE_TENSORS = 100,000 tensors), both kinds: the deep llama
    # layers (9 L + 3 tensors: 11,110 layers = 99,993 tensors) and nameless tensors without a layer repeat
    # (exactly 100,000); and a real model's shape: Kimi-K2 with one module per expert (69,975 tensors)
    from advisor.config import validation
    # a tree from before genlim21 (a BEFORE run) has no such limit: the same inputs, at the value it got
    lim = getattr(validation, "MAX_GENERATE_TENSORS", 100_000)
    deep_lim, inv_lim = tmp / "deep_lim.json", tmp / "inv_lim.json"
    deep_lim.write_text(json.dumps({**hf, "num_hidden_layers": (lim - 3) // 9}))
    with inv_lim.open("w") as out:
        out.write('{"meta": ' + json.dumps(arch) + ', "tensors": [' + ",".join(['{"shape": [64, 64]}'] * lim)
                  + "]}")
    from advisor.model.specs import get_preset
    kimi = tmp / "kimi_k2_per_expert.json"
    kimi.write_text(json.dumps({**get_preset("deepseek-v3").to_dict(), "name": "kimi-k2-per-expert",
                                "expert_layout": "per_expert", "num_experts": 384, "first_dense_layers": 1}))
    # moe21: the same with DeepSeek-V3's own counts (256 experts, 3 dense layers: 45,395 tensors)
    dsv3 = tmp / "deepseek_v3_per_expert.json"
    dsv3.write_text(json.dumps({**get_preset("deepseek-v3").to_dict(), "name": "deepseek-v3-per-expert",
                                "expert_layout": "per_expert", "num_experts": 256, "first_dense_layers": 3}))
    inv10_meta = tmp / "inv10_meta.json"
    inv10_meta.write_text(json.dumps({"meta": arch, "tensors": [{"shape": [64, 64]}] * 10}))
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
        # hfperf19: --hf with no optimizer block regroups the inventory into the HF Trainer's two param groups
        ("estimate --hf, 1e5 layers", ["estimate", str(z3hf), "--model", str(deep), "--hf", "--world-size", "8",
                                       "--seq-len", "128"],
         ["estimate", str(z3hf), "--model", str(shallow), "--hf", "--world-size", "8", "--seq-len", "128"]),
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
        ("generate at its limit, 99,993 deep", ["generate", "--model", str(deep_lim), "--hardware", "dgx-h100",
                                                "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "8",
                                                "--seq-len", "128"],
         ["generate", "--model", str(shallow), "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
          "--global-batch", "8", "--seq-len", "128"]),
        ("generate at its limit, 1e5 no-rep", ["generate", "--model", str(inv_lim), "--hardware", "dgx-h100",
                                               "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "8",
                                               "--seq-len", "128"],
         ["generate", "--model", str(inv10_meta), "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
          "--global-batch", "8", "--seq-len", "128"]),
        ("generate, Kimi-K2 per-expert 16x8", ["generate", "--model", str(kimi), "--hardware", "dgx-h100",
                                               "--nodes", "16", "--gpus-per-node", "8", "--global-batch", "128",
                                               "--seq-len", "4096"],
         ["generate", "--model", "deepseek-v3", "--hardware", "dgx-h100", "--nodes", "16", "--gpus-per-node", "8",
          "--global-batch", "128", "--seq-len", "4096"]),
        ("generate, DSV3 per-expert 16x8", ["generate", "--model", str(dsv3), "--hardware", "dgx-h100",
                                                   "--nodes", "16", "--gpus-per-node", "8", "--global-batch", "128",
                                                   "--seq-len", "4096"],
         ["generate", "--model", "deepseek-v3", "--hardware", "dgx-h100", "--nodes", "16", "--gpus-per-node", "8",
          "--global-batch", "128", "--seq-len", "4096"]),
        # genlim21: the second limit, micro-batch sizes searched (MAX_GENERATE_MICRO_BATCHES = 64 divisors of the
        # sequences per rank): at it (7,560 per rank: 64 divisors) for gpt2 on one GPU and for the deep model at the
        # tensor limit on 8 GPUs, and past it (963,761,198,400 per rank: 6,720 divisors), refused
        ("generate at micro limit, gpt2 1", ["generate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1",
                                             "--gpus-per-node", "1", "--global-batch", "7560", "--seq-len", "1024"],
         ["generate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "1",
          "--global-batch", "8", "--seq-len", "1024"]),
        ("generate at both limits, deep 8", ["generate", "--model", str(deep_lim), "--hardware", "dgx-h100",
                                             "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "60480",
                                             "--seq-len", "128"],
         ["generate", "--model", str(shallow), "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
          "--global-batch", "60480", "--seq-len", "128"]),
        # mb21: the micro-batches searched by pieces (O(log divisors) per piece), the limit gone: the 6,720-divisor
        # request runs (genlim21 refused it, > 200 s before), and gpt2 on 65,536 x 8 at global batch 2^40 (22
        # divisors, each plan a 2^19-rank ledger: ~28 s before)
        ("generate, 6,720 micro-batches", ["generate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1",
                                           "--gpus-per-node", "1", "--global-batch", "963761198400", "--seq-len",
                                           "1024"],
         ["generate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "1",
          "--global-batch", "8", "--seq-len", "1024"]),
        ("generate gpt2 65536x8, gb 2^40", ["generate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes",
                                            "65536", "--gpus-per-node", "8", "--global-batch", str(1 << 40),
                                            "--seq-len", "1024"],
         ["generate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
          "--global-batch", "64", "--seq-len", "1024"]),
        ("generate, 1e5 layers, 8 GPUs", ["generate", "--model", str(deep), "--hardware", "dgx-h100", "--nodes", "1",
                                          "--gpus-per-node", "8", "--global-batch", "8", "--seq-len", "128"],
         ["generate", "--model", str(shallow), "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
          "--global-batch", "8", "--seq-len", "128"]),
        ("generate, 1e5 layers, gb64 s512", ["generate", "--model", str(deep_long), "--hardware", "dgx-h100",
                                             "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "64",
                                             "--seq-len", "512"],
         ["generate", "--model", str(shallow_long), "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
          "--global-batch", "64", "--seq-len", "512"]),
        ("check JSON ZeRO-1, 2^20 ranks", ["check", str(z1), "--model", "llama-3-8b", "--world-size", M, *cap,
                                           "--format", "json"],
         ["check", str(z1), "--model", "llama-3-8b", "--world-size", "8", *cap, "--format", "json"]),
        ("report NVMe, dgx-h100:65536", ["report", str(nvme), "--params", "1000000000", "--hardware",
                                         "dgx-h100:65536", "--seq-len", "128", "-o", html, "--force"],
         ["report", str(nvme), "--params", "1000000000", "--hardware", "dgx-h100:1", "--seq-len", "128",
          "-o", html, "--force"]),
        ("refuse accelerate 2^20 per node", ["estimate", str(acc_1m), "--params", "1000000000"],
         ["estimate", str(acc_8), "--params", "1000000000"]),
        ("check refuse accel 2^20 per node", ["check", str(acc_1m), "--params", "1000000000", *cap],
         ["check", str(acc_8), "--params", "1000000000", *cap]),
        ("lint, 20k S002:KEY ignores", ["lint", str(ign_keys)], ["lint", str(ign_few)]),
        ("lint, 200k unknown ignores", ["lint", str(ign_unknown)], ["lint", str(ign_few)]),
        ("lint, 2M {} array (8 MB)", ["lint", str(arr2m)], ["lint", str(arr10)]),
        ("check, 2M {} array (8 MB)", ["check", str(arr2m), "--params", "1000000", *cap],
         ["check", str(arr10), "--params", "1000000", *cap]),
        ("refuse 1M-tensor inventory", ["estimate", str(z3b), "--model", str(inv1m)],
         ["estimate", str(z3b), "--model", str(inv10)]),
        ("estimate ZeRO-3, 1e5 layers, 2^20", ["estimate", str(z3b), "--model", str(deep), "--world-size", M],
         ["estimate", str(z3b), "--model", str(shallow), "--world-size", M]),
        ("report, 1e5 layers, 8 ranks", ["report", str(z3b), "--model", str(deep), "--world-size", "8",
                                         "-o", html, "--force"],
         ["report", str(z3b), "--model", str(shallow), "--world-size", "8", "-o", html, "--force"]),
        ("estimate ZeRO-2, 1e5 layers, 8", ["estimate", str(z2), "--model", str(deep), "--world-size", "8"],
         ["estimate", str(z2), "--model", str(shallow), "--world-size", "8"]),
        ("refuse 1.9M-tensor inventory", ["estimate", str(z3b), "--model", str(inv19m)],
         ["estimate", str(z3b), "--model", str(inv10)]),
        ("refuse 2.1M-tensor inventory", ["estimate", str(z3b), "--model", str(inv21m)],
         ["estimate", str(z3b), "--model", str(inv10)]),
        ("refuse 4.8M-tensor inventory", ["estimate", str(z3b), "--model", str(invmax)],
         ["estimate", str(z3b), "--model", str(inv10)]),
        ("refuse 2.1M [64, 64] inventory", ["estimate", str(z3b), "--model", str(inv21lists)],
         ["estimate", str(z3b), "--model", str(inv10)]),
        ("refuse 22M [] inventory (64 MiB)", ["estimate", str(z3b), "--model", str(inv22mempty)],
         ["estimate", str(z3b), "--model", str(inv10)]),
        ("refuse {tensor}, 22M [] (64 MiB)", ["estimate", str(z3b), "--model", str(inv22after)],
         ["estimate", str(z3b), "--model", str(inv10)]),
        ("refuse {nested}, 22M [] (64 MiB)", ["estimate", str(z3b), "--model", str(inv22nested)],
         ["estimate", str(z3b), "--model", str(inv10)]),
        ("check ZeRO-3, 1e5 layers, 8", ["check", str(z3b), "--model", str(deep), "--world-size", "8", *cap],
         ["check", str(z3b), "--model", str(shallow), "--world-size", "8", *cap]),
        (f"estimate, {MAX_TENSORS // 1000}k-tensor inventory", ["estimate", str(z3b), "--model", str(inv_at)],
         ["estimate", str(z3b), "--model", str(inv10)]),
        (f"check, {MAX_TENSORS // 1000}k-tensor inventory, 8", ["check", str(z3b), "--model", str(inv_at), "--world-size", "8", *cap],
         ["check", str(z3b), "--model", str(inv10), "--world-size", "8", *cap]),
        (f"generate refuse, {MAX_TENSORS // 1000}k no arch", ["generate", "--model", str(inv_at), "--hardware", "dgx-h100", "--nodes", "1",
                                         "--gpus-per-node", "8", "--global-batch", "8", "--seq-len", "128"],
         ["generate", "--model", str(inv10), "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
          "--global-batch", "8", "--seq-len", "128"]),
        (f"generate, {MAX_TENSORS // 1000}k-tensor inventory", ["generate", "--model", str(inv_at_meta), "--hardware", "dgx-h100",
                                           "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "8",
                                           "--seq-len", "128"],
         ["generate", "--model", str(inv10_meta), "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
          "--global-batch", "8", "--seq-len", "128"]),
        (f"refuse {MAX_TENSORS + 1:,} objects", ["estimate", str(z3b), "--model", str(over_obj)],
         ["estimate", str(z3b), "--model", str(inv10)]),
        (f"refuse {MAX_TENSORS + 1:,} [64, 64]", ["estimate", str(z3b), "--model", str(over_lists)],
         ["estimate", str(z3b), "--model", str(inv10)]),
        (f"refuse {MAX_TENSORS + 1:,} six-deep", ["estimate", str(z3b), "--model", str(deep6)],
         ["estimate", str(z3b), "--model", str(inv10)]),
        # issue 21, cand21: the M100 fixes re-estimate each candidate (ZeRO-1 on one 24 GB GPU: the optimizer to
        # host, ZeRO-2, ZeRO-3, checkpointing, one more rank, then the pairs, since no single change fits)
        ("estimate --hardware fixes, 1e5", ["estimate", str(z1), "--model", str(deep), "--hardware", "workstation-4090"],
         ["estimate", str(z1), "--model", str(shallow), "--hardware", "workstation-4090"]),
        ("check fixes ZeRO-1, 1e5 layers", ["check", str(z1), "--model", str(deep), "--world-size", "1",
                                            "--gpu-memory", "24GB", "--host-memory", "119GB"],
         ["check", str(z1), "--model", str(shallow), "--world-size", "1", "--gpu-memory", "24GB",
          "--host-memory", "119GB"]),
        ("check fixes ZeRO-3, 1e5 layers", ["check", str(z3b), "--model", str(deep), "--world-size", "8",
                                            "--gpu-memory", "6GB", "--host-memory", "2TB"],
         ["check", str(z3b), "--model", str(shallow), "--world-size", "8", "--gpu-memory", "6GB",
          "--host-memory", "2TB"]),
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
