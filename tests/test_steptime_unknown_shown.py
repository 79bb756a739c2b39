"""An unknown part of the step time is never shown as free (README: "an unknown part ... is never ranked
as free"). The accelerator preset h100-sxm-80gb gives no host memory bandwidth and no network bandwidth
(advisor/data/hardware_presets.json: its entry has neither), so with the optimizer offloaded to the CPU the
CPU optimizer step's seconds are unknown, and at 16 ranks (8 per node by default: 2 nodes) so are the
collectives across nodes. The step time table showed them as "busy 0.000 s exposed 0.000 s" and its
``unknown:`` lines stopped after three, leaving the CPU optimizer's off the list."""

from __future__ import annotations

import html
import json
import re

from tests.conftest import run_cli

CFG = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
       "optimizer": {"type": "AdamW"},
       "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}}
ARGS = ["--model", "llama-3-8b", "--world-size", "16", "--seq-len", "16"]


def test_unknown_cpu_step_and_network_are_question_marks(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(CFG))
    p = run_cli(["estimate", str(cfg), *ARGS, "--hardware", "h100-sxm-80gb"], cwd=tmp_path)
    assert p.returncode in (0, 1), p.stderr
    assert re.search(r"CPU optimizer step\s+busy\s+\? s\s+exposed\s+\? s", p.stdout), p.stdout
    assert re.search(r"collectives\s+busy\s+\? s\s+exposed\s+\? s", p.stdout), p.stdout
    assert "CPU optimizer step   busy     0.000 s" not in p.stdout
    unknown = [x.strip() for x in p.stdout.splitlines() if x.startswith("  unknown: ")]
    # ZeRO-3's network collectives (parameter all-gathers, the gradient reduce-scatter: three here, where the
    # list was cut) and after them the CPU step
    assert len(unknown) >= 4 and all(u.startswith("unknown: network ") for u in unknown[:-1]), unknown
    assert unknown[-1] == "unknown: cpu_optimizer (no host_memory_bandwidth_bytes_per_s in the hardware spec)"
    d = json.loads(run_cli(["estimate", str(cfg), *ARGS, "--hardware", "h100-sxm-80gb", "--format", "json"],
                           cwd=tmp_path).stdout)
    assert d["step_time"]["unknown_resources"] == {"host_memory": "?", "network": "?"}
    out = tmp_path / "r.html"
    assert run_cli(["report", str(cfg), *ARGS, "--hardware", "h100-sxm-80gb", "-o", str(out)],
                   cwd=tmp_path).returncode in (0, 1)
    row = re.search(r"<tr id=step-time-host_memory><td>[^<]+</td><td class=num>([^<]*)</td><td class=num>([^<]*)</td>",
                    out.read_text())
    assert row and (html.unescape(row.group(1)), html.unescape(row.group(2))) == ("?", "?")


def test_cpu_step_at_the_threads_rate_alone_is_a_lower_bound(tmp_path):
    """With one core's bandwidth and the cores but no node host memory bandwidth, the CPU step is timed at
    its OpenMP threads' rate, the fastest it can run (steptime's issue 23): shown ">= x", not as a figure."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(CFG))
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({"name": "t", "nodes": 2, "accelerators_per_node": 8, "accelerator": "h100-sxm-80gb",
                              "host_cores_per_node": 64, "host_core_bandwidth_bytes_per_s": 1e10,
                              "network_bytes_per_s": 5e10}))
    p = run_cli(["estimate", str(cfg), *ARGS, "--hardware", str(hw), "--format", "json"], cwd=tmp_path)
    assert p.returncode in (0, 1), p.stderr
    assert json.loads(p.stdout)["step_time"]["unknown_resources"] == {"host_memory": ">="}
    p = run_cli(["estimate", str(cfg), *ARGS, "--hardware", str(hw)], cwd=tmp_path)
    assert re.search(r"CPU optimizer step\s+busy\s+>= [0-9.,]+ s", p.stdout), p.stdout
    assert re.search(r"collectives\s+busy\s+[0-9.,]+ s", p.stdout), p.stdout
