"""Words a newcomer could not act on (session 20's clean-clone check): the fit verdict of a tier with no
capacity named no flag ("give a capacity"); generate's legend said "accel: GiB per rank" for a figure that is
the need (peak + runtime overhead) where estimate's first accelerator figure is the peak alone; the movement
table's "?" times said nothing of why. The flags are advisor/cli.py OPTIONS (--gpu-memory, --host-memory,
--nvme-capacity); the h100-sxm-80gb preset has a host link (PCIe Gen5 x16) and no network bandwidth
(advisor/data/hardware_presets.json)."""

from __future__ import annotations

import json

from tests.conftest import run_cli

CFG = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
       "optimizer": {"type": "AdamW"},
       "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}}


def _cfg(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(CFG))
    return str(cfg)


def test_capacity_verdict_names_the_flag(tmp_path):
    cfg = _cfg(tmp_path)
    p = run_cli(["estimate", cfg, "--model", "gpt2", "--world-size", "8", "--seq-len", "128"], cwd=tmp_path,
                env={"COLUMNS": "80"})
    assert p.returncode in (0, 1), p.stderr
    text = " ".join(p.stdout.split())  # the lines wrap
    assert "give a capacity" not in text
    assert "capacity unknown: give --gpu-memory or a --hardware preset" in text
    assert "capacity unknown: give --host-memory or a --hardware preset with host memory" in text
    out = tmp_path / "r.html"
    assert run_cli(["report", cfg, "--model", "gpt2", "--world-size", "8", "--seq-len", "128", "-o", str(out)],
                   cwd=tmp_path).returncode in (0, 1)
    assert "give --host-memory or a --hardware preset with host memory" in out.read_text()


def test_movement_time_question_mark_says_why(tmp_path):
    cfg = _cfg(tmp_path)
    p = run_cli(["estimate", cfg, "--model", "gpt2", "--world-size", "16", "--seq-len", "128"], cwd=tmp_path,
                env={"COLUMNS": "300"})
    assert "(time ?: no --hardware, so no link bandwidths" in p.stdout, p.stdout
    p = run_cli(["estimate", cfg, "--model", "gpt2", "--world-size", "16", "--seq-len", "128",
                 "--hardware", "h100-sxm-80gb"], cwd=tmp_path, env={"COLUMNS": "300"})
    # 16 ranks at 8 per node: the collectives cross nodes, whose bandwidth the accelerator preset lacks;
    # the PCIe copies are timed at its host link
    assert "(time ?: the --hardware spec gives no bandwidth for network (network_bytes_per_s))" in p.stdout, p.stdout
    p = run_cli(["estimate", cfg, "--model", "gpt2", "--world-size", "8", "--seq-len", "128",
                 "--hardware", "dgx-h100"], cwd=tmp_path, env={"COLUMNS": "300"})
    assert "time ?" not in p.stdout  # every link of one DGX H100 node has its bandwidth


def test_generate_legend_says_accel_is_the_need(tmp_path):
    p = run_cli(["generate", "--model", "llama-3.2-1b", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node",
                 "8", "--global-batch", "64", "--seq-len", "2048"], cwd=tmp_path, env={"COLUMNS": "300"})
    assert p.returncode == 0, p.stderr
    legend = next(x for x in p.stderr.splitlines() if x.startswith("accel: "))
    assert "the peak live bytes + the runtime overhead" in legend and "need per rank" in legend, legend
    # and so it is: plan #1's accel figure is estimate's need per rank of the config generate wrote (stdout), above
    # its peak live (the runtime overhead rows are > 0: the CUDA context alone is 0.39 GiB)
    row1 = next(x for x in p.stderr.splitlines() if x.startswith("1 "))
    accel = float(row1.split()[6])
    cfg = tmp_path / "g.json"
    cfg.write_text(p.stdout)
    e = run_cli(["estimate", str(cfg), "--model", "llama-3.2-1b", "--hardware", "dgx-h100", "--world-size", "8",
                 "--seq-len", "2048", "--format", "json"], cwd=tmp_path)
    fit, = (f for f in json.loads(e.stdout)["fit"] if f["tier"] == "accelerator")
    assert accel == round(fit["need"] / 2**30, 1) and fit["need"] > fit["peak"] + 0.39 * 2**30
