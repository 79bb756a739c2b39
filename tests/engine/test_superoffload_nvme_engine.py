"""Engine proof of rule O010 (SuperOffload with an NVMe offload stops at the first step).

DeepSpeed 0.19.8 builds SuperOffloadOptimizer_Stage3 for ``offload_optimizer.super_offload`` at ZeRO-3
whatever the offload devices (``engine.py`` l.2748-2750). Its ``partition_grads`` writes the boundary's
gradients into ``fp32_partitioned_groups_flat[i].grad`` (``superoffload_stage3.py`` l.158-160), None for a
sub-group swapped to NVMe (``stage3.py`` l.1117-1118, l.2781), and its
``_reassign_or_swap_out_partitioned_parameters`` copies into ``fp16_partitioned_groups_flat[i]`` (l.116-121),
None past ``offload_param.max_in_cpu`` (``stage3.py`` l.984-998). The worker runs the real engine on the
CPU (SuperOffload's CUDA check and the missing CPU stream patched in that module only,
``superoffload_nvme_worker.py``) on two 1024 x 1024 Linears (with biases) at W = 1, sub_group_size 2^20:
sub-groups [w0], [b0, w1], [b1] (DeepSpeed's greedy cut, each closing at >= 2^20 elements), the first two
of 4 MiB fp32, swapped; three cells:

* ``cpu``: both offloads on the CPU -- trains two steps (the patches alone break nothing);
* ``opt_nvme``: ``offload_optimizer: nvme`` -- raises AttributeError at superoffload_stage3.py:159 in
  the first backward;
* ``param_nvme``: the optimizer on the CPU, ``offload_param: nvme`` with ``max_in_cpu`` 0 -- raises
  AttributeError at superoffload_stage3.py:118 in the first step where the CPU has mkldnn fp16; without it
  DeepSpeed gives the NVMe parameter swapper bf16 (partition_parameters.py _set_dtype l.409-410) and this fp32
  model stops earlier, in the first forward (zero/linear.py l.90).

O010 must flag exactly the two that stop (error, refusing) and name the same attribute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

torch = pytest.importorskip("torch")
deepspeed = pytest.importorskip("deepspeed")

from advisor.config.loading import parse_text  # noqa: E402
from advisor.model.inventory import Inventory, TensorSpec  # noqa: E402
from advisor.views.lint import lint_config  # noqa: E402

HERE = Path(__file__).resolve().parent


def _config(cell: str, nvme: str) -> dict:
    z: dict = {"stage": 3, "sub_group_size": 1 << 20,
               "offload_optimizer": {"device": "nvme" if cell == "opt_nvme" else "cpu", "nvme_path": nvme,
                                     "super_offload": True}}
    if cell == "param_nvme":
        z["offload_param"] = {"device": "nvme", "nvme_path": nvme, "max_in_cpu": 0}
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "gradient_clipping": 0.0,
            "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "zero_optimization": z}


def _inventory() -> Inventory:
    return Inventory("two-linears", [TensorSpec("0.weight", (1024, 1024)), TensorSpec("0.bias", (1024,)),
                                     TensorSpec("1.weight", (1024, 1024)), TensorSpec("1.bias", (1024,))])


def _o010(cfg: dict) -> list:
    loaded = parse_text(json.dumps(cfg), "o010.json")
    return lint_config(loaded, world_size=1, world_size_source="--world-size", inventory=_inventory(),
                       select={"O010"})


@pytest.fixture(scope="module")
def runs(tmp_path_factory, aio_available):
    ok, why = aio_available
    if not ok:
        pytest.skip(why)
    from advisor.engine.measure import run_process_group
    base = tmp_path_factory.mktemp("superoffload_nvme")
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    out = {}
    for cell in ("cpu", "opt_nvme", "param_nvme"):
        nv = base / f"nvme_{cell}"
        nv.mkdir()
        job, res = base / f"{cell}.json", base / f"{cell}.out.json"
        job.write_text(json.dumps({"config": _config(cell, str(nv)), "steps": 2}))
        with open(base / f"{cell}.log", "w") as fh:  # its own process group, ended on timeout
            rc = run_process_group([sys.executable, str(HERE / "superoffload_nvme_worker.py"), str(job), str(res)],
                                   600, stdout=fh, stderr=subprocess.STDOUT, env=env)
        assert res.exists(), f"{cell}: no result (rc={rc}): {(base / f'{cell}.log').read_text()[-3000:]}"
        out[cell] = json.loads(res.read_text())
    return out


def test_superoffload_trains_with_both_offloads_on_the_cpu(runs):
    d = runs["cpu"]
    assert "error" not in d, f"{d.get('error')}\n{d.get('traceback')}"
    assert d["optimizer"] == "SuperOffloadOptimizer_Stage3" and d["steps"] == 2
    assert _o010(_config("cpu", "/nvme")) == []


def test_superoffload_with_an_nvme_optimizer_stops_in_the_first_backward_as_o010_says(runs):
    d = runs["opt_nvme"]
    assert d.get("where") == "superoffload_stage3.py:159" and d["phase"] == "backward" and d["steps_done"] == 0, d
    assert "'NoneType' object has no attribute 'narrow'" in d["error"]
    (f,) = _o010(_config("opt_nvme", "/nvme"))
    assert f.severity == "error" and "2 of each rank's 3 sub-group(s) are swapped" in f.message
    assert "'narrow'" in f.message


def _cpu_fp16() -> bool:
    """DeepSpeed's CPU accelerator's is_fp16_supported (accelerator/cpu_accelerator.py l.228-233): torch's mkldnn
    fp16 support, which depends on the CPU."""
    import torch
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    except Exception:  # noqa: BLE001  (as DeepSpeed: no mkldnn fp16 -> not supported)
        return False


def test_superoffload_with_nvme_parameters_stops_in_the_first_step_as_o010_says(runs):
    d = runs["param_nvme"]
    if _cpu_fp16():
        assert d.get("where") == "superoffload_stage3.py:118" and d["phase"] == "step" and d["steps_done"] == 0, d
        assert "'NoneType' object has no attribute 'data'" in d["error"]
    else:
        # a CPU without mkldnn fp16 (AMD EPYC, 2026-12-07): the engine's partitioning takes its dtype from the
        # accelerator, not the config (partition_parameters.py _set_dtype l.409: fp16 if is_fp16_supported() else
        # bf16), so the NVMe parameter swapper holds this fp32 model's weights in bf16 and the first forward stops
        # before the step (zero/linear.py l.90): no step is taken either way, which is what O010 refuses
        assert d.get("where") == "linear.py:90" and d["phase"] == "backward" and d["steps_done"] == 0, d
        assert "must have the same dtype, but got Float and BFloat16" in d["error"]
    (f,) = _o010(_config("param_nvme", "/nvme"))
    assert f.severity == "error" and "3 of each rank's 3 sub-group(s) lie past the max_in_cpu buffer" in f.message
    assert "'data'" in f.message
    # the message is true on both machines: the step's stop where the accelerator has fp16, the forward's where not
    assert "partition_parameters.py l.409-410" in f.message and "zero/linear.py l.90" in f.message


def test_o010_refuses():
    from advisor.rules import all_rules, refusals
    assert all_rules()["O010"].refuses
    assert [f.code for f in refusals(_o010(_config("opt_nvme", "/nvme")))] == ["O010"]
