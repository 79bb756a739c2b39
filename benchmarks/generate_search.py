"""Benchmark: the full generate search for llama-3.1-405b on 128 nodes x 8 GPUs (dgx-h100 preset,
H100 80GB), against baselines measured in the same run on the same machine.

Prints absolute seconds and ratios (median of --repeat runs):
* search: ``advisor.views.generate.search`` alone (model already expanded);
* end to end: ``python -m advisor generate ...`` as a process (what the issue's 2-second budget
  is about), against ``python -c pass``;
* one plan: estimate's fit of one ZeRO-3 plan (advisor.views.estimate.plan_fit: ledger,
  activations, timeline, fit rows), what the search runs per plan, so it reads in units of one
  estimate.

No assertion: timings depend on the machine (tests do not time anything).
Usage: python benchmarks/generate_search.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from dataclasses import replace


def _median(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    from advisor.views import generate as gen
    from advisor.config.effective import effective_config
    from advisor.plan import Cluster, Plan, Workload
    from advisor.views.estimate import plan_fit
    from advisor.cluster.hardware import resolve_hardware
    from advisor.model.specs import resolve_model

    inv = resolve_model("llama-3.1-405b")
    hw = replace(resolve_hardware("dgx-h100"), nodes=128, accelerators_per_node=8)
    req = gen.Request(global_batch=1024, seq_len=8192, nodes=128, gpus_per_node=8)
    res = gen.search(inv, hw, req)
    search_s = _median(lambda: gen.search(inv, hw, req), a.repeat)

    cfg = gen.build_config(gen.Combo(3), 1, 1, 1024, "full", inv, req, None)

    def one_plan():
        plan_fit(Plan(effective_config(cfg), inv, Cluster(world_size=1024, gpus_per_node=8),
                      Workload(8192, 1, "full")), gen._capacity(hw, gen.choose_nvme_tier(hw)))

    one_s = _median(one_plan, a.repeat)
    argv = [sys.executable, "-m", "advisor", "generate", "--model", "llama-3.1-405b", "--hardware", "dgx-h100",
            "--nodes", "128", "--gpus-per-node", "8", "--global-batch", "1024", "--seq-len", "8192"]
    cli_s = _median(lambda: subprocess.run(argv, capture_output=True, check=True), a.repeat)
    bare_s = _median(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), a.repeat)
    print(f"plans evaluated: {res.evaluated}, fitting: {len(res.ranked)}, best: ZeRO-{res.best.combo.stage} "
          f"{res.best.combo.label()} micro {res.best.micro} GA {res.best.ga} ckpt {res.best.checkpointing}")
    print(f"search (in process):      {search_s:8.3f} s  = {search_s / one_s:8.1f} x one plan estimate "
          f"({one_s * 1e3:.2f} ms)")
    print(f"generate CLI (process):   {cli_s:8.3f} s  = {cli_s / bare_s:8.1f} x `python -c pass` "
          f"({bare_s * 1e3:.0f} ms)")
    print(f"budget 2 s, end to end: {'within' if cli_s < 2 else 'OVER'}")


if __name__ == "__main__":
    main()
