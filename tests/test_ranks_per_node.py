"""More ranks per node than the hardware spec's accelerators per node is refused, the same way
by every command (issue 17): one line naming the flag, the value and the spec's count, exit 2.
The DGX H100 preset has 8 GPUs per node (advisor/data/hardware_presets.json, NVIDIA's DGX H100
datasheet); 16 ranks on it would leave half of them without a GPU."""

from __future__ import annotations

import json

import pytest

from advisor.cluster.hardware import resolve_hardware
from advisor.cluster.launch import job_shape
from advisor.errors import AdvisorError
from tests.conftest import run_cli

CFG = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
       "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3}}


def test_preset_has_eight():
    assert resolve_hardware("dgx-h100").accelerators_per_node == 8


@pytest.mark.parametrize("cmd", ["estimate", "check", "checkpoint", "report", "generate"])
def test_every_command_refuses_16_ranks_on_an_8_gpu_node(cmd, tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(CFG))
    if cmd == "generate":
        args = ["generate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "16",
                "--global-batch", "16", "--seq-len", "512"]
    else:
        args = [cmd, str(cfg), "--model", "gpt2", "--hardware", "dgx-h100", "--world-size", "16",
                "--gpus-per-node", "16", "--seq-len", "512"]
        if cmd == "checkpoint":
            args.remove("--seq-len"), args.remove("512")
        if cmd == "report":
            args += ["--output", str(tmp_path / "r.html")]
    p = run_cli(args, cwd=tmp_path)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr
    assert "--gpus-per-node 16" in lines[0] and "8 accelerators per node" in lines[0] and "dgx-h100" in lines[0]


def test_within_the_node_and_accelerator_only_specs_pass():
    hw = resolve_hardware("dgx-h100")
    assert job_shape(world_size=16, gpus_per_node=8, hardware=hw).gpus_per_node.value == 8
    # an accelerator preset alone says nothing about the node: its "1 per node" is a placeholder
    acc = resolve_hardware("h100-sxm-80gb")
    assert job_shape(world_size=16, gpus_per_node=8, hardware=acc).gpus_per_node.value == 8
    with pytest.raises(AdvisorError, match="--gpus-per-node 9 is more ranks per node than the 8"):
        job_shape(world_size=16, gpus_per_node=9, hardware=hw)


ACC_1M = """compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  zero_stage: 1
mixed_precision: bf16
num_machines: {machines}
num_processes: {procs}
"""


@pytest.mark.parametrize("cmd", ["estimate", "check", "checkpoint"])
def test_accelerate_yaml_over_the_per_node_limit_is_refused(cmd, tmp_path):
    """Issue 21: num_processes 2^20 on one machine is 2^20 ranks per node, over MAX_GPUS_PER_NODE
    (1,024); it ran 22 s / 626 MB instead of being refused. Every command refuses it in one line
    naming the YAML; 2^20 over 1,024 machines (1,024 per node) is within the limit and accepted."""
    from advisor.config.validation import MAX_GPUS_PER_NODE
    y = tmp_path / "acc.yaml"
    y.write_text(ACC_1M.format(machines=1, procs=1 << 20))
    p = run_cli([cmd, str(y), "--params", "1000000"], cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr, (p.stdout, p.stderr)
    line, = p.stderr.strip().splitlines()
    assert f"{1 << 20} ranks per node" in line and str(y) in line and f"limit of {MAX_GPUS_PER_NODE}" in line


def test_every_source_of_ranks_per_node_passes_the_limit():
    """job_shape refuses more than MAX_GPUS_PER_NODE ranks per node whatever says it: a world
    size over --nodes, an accelerate launch; the same count at the limit passes."""
    from types import SimpleNamespace
    from advisor.config.validation import MAX_GPUS_PER_NODE
    with pytest.raises(AdvisorError, match="--nodes 1.*over the limit"):
        job_shape(world_size=MAX_GPUS_PER_NODE + 1, nodes=1)
    assert job_shape(world_size=MAX_GPUS_PER_NODE, nodes=1).gpus_per_node.value == MAX_GPUS_PER_NODE
    launch = SimpleNamespace(world_size=1 << 20, world_size_source="yaml", num_machines=1,
                             ranks_per_node=1 << 20, ranks_per_node_source="num_processes in a.yaml")
    with pytest.raises(AdvisorError, match="num_processes in a.yaml.*over the limit"):
        job_shape(launch=launch, env={})


def test_accelerator_preset_alone_does_not_make_one_rank_per_node(tmp_path):
    """An accelerator preset alone (``--hardware h100-sxm-80gb``) says nothing about the node (README):
    its "1 accelerator per node" placeholder made the host need per node 1 rank's, 8x too small at
    world size 8. With nothing else giving ranks per node, a world of 8 is 8 ranks on a node (the
    default min(world size, 8)). By hand, ZeRO-3 with both offloads on 8,000,000 parameters at
    data-parallel 8, bf16 + AdamW: per rank on the host 1,000,000 parameters x (2 bf16 partition + 2
    bf16 gradient + 4 fp32 gradient + 4 fp32 master + 8 two fp32 moments) = 20,000,000 bytes, so per
    node 8 x 20,000,000 = 160,000,000 bytes."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                               "bf16": {"enabled": True}, "optimizer": {"type": "AdamW"},
                               "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                                     "offload_param": {"device": "cpu"}}}))
    env = None  # run_cli's environment: no launcher variables give ranks per node
    p = run_cli(["estimate", str(cfg), "--params", "8000000", "--world-size", "8", "--hardware", "h100-sxm-80gb",
                 "--seq-len", "16", "--format", "json"], cwd=tmp_path, env=env)
    assert p.returncode in (0, 1), p.stderr
    d = json.loads(p.stdout)
    assert d["ranks"][0]["peak"]["host"]["bytes"] == 20_000_000
    host, = (f for f in d["fit"] if f["tier"] == "host")
    assert host["need"] == 8 * 20_000_000 and host["scope"] == "per node (8 ranks)"
    assert d["load"]["ranks_per_node"] == 8
    assert d["step_time"]["assumptions"]["ranks_per_node"] == 8
    p = run_cli(["estimate", str(cfg), "--params", "8000000", "--world-size", "8", "--hardware", "h100-sxm-80gb",
                 "--seq-len", "16"], cwd=tmp_path, env=env)
    assert "per node (8 ranks)" in p.stdout and "(1 rank)" not in p.stdout, p.stdout
    assert job_shape(world_size=8, hardware=resolve_hardware("h100-sxm-80gb"), env={}).gpus_per_node is None


def test_accelerator_preset_alone_gives_no_world_size():
    """Nor does the accelerator preset alone give a world size (its "1 node x 1" is the placeholder):
    a sidecar's recorded world of 4 x 4 ranks stands, where a node spec (dgx-h100: 1 node x 8) wins."""
    acc, node = resolve_hardware("h100-sxm-80gb"), resolve_hardware("dgx-h100")
    rec = ({"world_size": 16, "gpus_per_node": 4}, "ds.workload.json")
    s = job_shape(hardware=acc, env={}, recorded=rec)
    assert (s.world_size.value, s.gpus_per_node.value, s.nodes.value) == (16, 4, 4)
    assert job_shape(hardware=node, env={}, recorded=rec).world_size.value == 8
    assert job_shape(hardware=acc, env={}).world_size.value == 1


def test_the_launchers_ranks_per_node_win_over_the_spec():
    """torchrun / the deepspeed launcher set LOCAL_WORLD_SIZE to the ranks they start on a node (torch
    distributed/run.py --nproc-per-node), Slurm SLURM_GPUS_ON_NODE: the job's shape, where a hardware spec
    only states the node's capacity. WORLD_SIZE already beat the spec for the world size; the ranks per
    node now follow it (a lint21 helper saw LOCAL_WORLD_SIZE=4 WORLD_SIZE=8 estimate --hardware dgx-h100
    size 8 ranks per node while check said 4). By hand: 8 ranks at 4 per node = 2 nodes."""
    hw = resolve_hardware("dgx-h100")
    s = job_shape(hardware=hw, env={"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"})
    assert (s.world_size.value, s.gpus_per_node.value, s.nodes.value) == (8, 4, 2)
    assert s.gpus_per_node.source == "LOCAL_WORLD_SIZE"
    s = job_shape(hardware=hw, env={"WORLD_SIZE": "8", "SLURM_GPUS_ON_NODE": "2"})
    assert (s.gpus_per_node.value, s.nodes.value) == (2, 4)
    # the visible devices of the machine the tool runs on are not the job's: the spec stays
    s = job_shape(hardware=hw, env={"WORLD_SIZE": "8", "CUDA_VISIBLE_DEVICES": "0"})
    assert s.gpus_per_node.value == 8
    # no WORLD_SIZE (an sbatch script before torchrun): the spec's nodes x the launcher's ranks per node, as
    # check's discover_launch counts them (review 2026-12-07: SLURM_GPUS_ON_NODE=4 on dgx-h100:2 was 16 ranks in
    # estimate, 8 in check): 1 node x 4, 2 nodes x 4
    s = job_shape(hardware=hw, env={"LOCAL_WORLD_SIZE": "4"})
    assert (s.world_size.value, s.gpus_per_node.value, s.nodes.value) == (4, 4, 1)
    s = job_shape(hardware=resolve_hardware("dgx-h100:2"), env={"SLURM_GPUS_ON_NODE": "4"})
    assert (s.world_size.value, s.gpus_per_node.value, s.nodes.value) == (8, 4, 2)
    s = job_shape(hardware=resolve_hardware("dgx-h100:2"), env={})
    assert (s.world_size.value, s.gpus_per_node.value, s.nodes.value) == (16, 8, 2)
    # the spec's capacity still bounds it
    with pytest.raises(AdvisorError):
        job_shape(hardware=hw, env={"WORLD_SIZE": "32", "LOCAL_WORLD_SIZE": "16"})


Z3 = ["--model", "llama-3-8b", "--seq-len", "2048", "--set", "train_batch_size=256"]


@pytest.mark.parametrize("cmd", ["estimate", "check"])
def test_launcher_ranks_over_the_node_are_refused_by_estimate_and_check(cmd, tmp_path):
    """fixa22 (newcomer 22, finding 1): under torchrun's WORLD_SIZE=32 LOCAL_WORLD_SIZE=16 on --hardware
    dgx-h100 (8 GPUs per node, data/hardware_presets.json) estimate refused, check said GO (exit 0). Both
    now go through launch.checked_ranks_per_node: exit 2, one line naming LOCAL_WORLD_SIZE 16 and the 8."""
    from tests.conftest import ROOT
    env = {"WORLD_SIZE": "32", "LOCAL_WORLD_SIZE": "16", "RANK": "0", "LOCAL_RANK": "0"}
    p = run_cli([cmd, str(ROOT / "sample_configs" / "zero3.json"), "--hardware", "dgx-h100", *Z3],
                cwd=tmp_path, env=env)
    assert p.returncode == 2, (p.stdout, p.stderr)
    line, = p.stderr.strip().splitlines()
    assert "LOCAL_WORLD_SIZE 16" in line and "8 accelerators per node" in line and not p.stdout
    # 8 per node on 4 nodes of the same preset is the node's count: accepted by both
    env.update(LOCAL_WORLD_SIZE="8")
    p = run_cli([cmd, str(ROOT / "sample_configs" / "zero3.json"), "--hardware", "dgx-h100", *Z3],
                cwd=tmp_path, env=env)
    assert p.returncode != 2, p.stderr


@pytest.mark.parametrize("cmd", ["estimate", "check"])
def test_a_node_larger_than_the_launchers_world_is_a_malformed_launch(cmd, tmp_path):
    """WORLD_SIZE=8 with LOCAL_WORLD_SIZE=16 cannot come from torchrun (the world size is the sum of
    the nodes' local world sizes: torch/distributed/elastic/agent/server/api.py l.620 / l.647): check
    printed "ranks per node 16 / this node ranks 0-7" and estimate capped it silently. Both refuse it,
    naming both variables; given as --world-size 8 (a job the user asks about), the 16 is capped at 8."""
    from tests.conftest import ROOT
    cfg = str(ROOT / "sample_configs" / "zero3.json")
    p = run_cli([cmd, cfg, *Z3], cwd=tmp_path, env={"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "16"})
    assert p.returncode == 2, (p.stdout, p.stderr)
    line, = p.stderr.strip().splitlines()
    assert "LOCAL_WORLD_SIZE=16" in line and "WORLD_SIZE=8" in line and "malformed" in line
    p = run_cli([cmd, cfg, *Z3[:4], "--world-size", "8", "--format", "json"], cwd=tmp_path,
                env={"LOCAL_WORLD_SIZE": "16"})
    assert p.returncode != 2, p.stderr
    d = json.loads(p.stdout)
    if cmd == "check":
        assert d["launch"]["gpus_per_node"]["value"] == 8 and d["launch"]["num_nodes"]["value"] == 1
        assert "capped at the world size 8" in d["launch"]["gpus_per_node"]["source"]
    else:
        assert d["cluster"]["gpus_per_node"] == 8


SLURM_PER_NODE = [
    # (environment, world size by hand): srun --ntasks-per-node=1 torchrun --nproc-per-node=8 on 2 nodes
    # starts 8 ranks on each of the 2 nodes (torch/distributed/elastic/agent/server/api.py: the world size
    # is the sum of the nodes' local_world_size, l.620 / l.647): 2 x 8 = 16, whether the 8 comes from
    # torchrun's LOCAL_WORLD_SIZE or Slurm's SLURM_GPUS_ON_NODE (before torchrun starts)
    ({"LOCAL_WORLD_SIZE": "8", "SLURM_NTASKS": "2", "SLURM_JOB_NUM_NODES": "2"}, 16, 8, 2),
    ({"SLURM_GPUS_ON_NODE": "8", "SLURM_NTASKS": "2", "SLURM_JOB_NUM_NODES": "2"}, 16, 8, 2),
    # one rank per Slurm task (srun --ntasks=16 on 2 nodes, no per-node launcher): the tasks are the ranks
    ({"SLURM_GPUS_ON_NODE": "8", "SLURM_NTASKS": "16", "SLURM_JOB_NUM_NODES": "2"}, 16, 8, 2),
]


@pytest.mark.parametrize("cmd", ["estimate", "check"])
@pytest.mark.parametrize("env,world,per_node,nodes", SLURM_PER_NODE)
def test_one_launcher_per_node_under_slurm_is_one_world_in_estimate_and_check(cmd, env, world, per_node, nodes,
                                                                              tmp_path):
    """fixd22 (review of 45b1d22): LOCAL_WORLD_SIZE=8 SLURM_NTASKS=2 SLURM_JOB_NUM_NODES=2 on dgx-h100 was
    world 16 in check (SLURM_JOB_NUM_NODES x LOCAL_WORLD_SIZE) and exit 2 in estimate ("LOCAL_WORLD_SIZE=8
    is more ranks on this node than the whole job's SLURM_NTASKS=2"), world 2 before 45b1d22; with
    SLURM_GPUS_ON_NODE=8 instead, world 2 in estimate and 16 in check. Both now read the world through
    launch.launcher_world_size: the world size, ranks per node and nodes computed by hand above."""
    from tests.conftest import ROOT
    p = run_cli([cmd, str(ROOT / "sample_configs" / "zero3.json"), "--hardware", "dgx-h100", *Z3,
                 "--format", "json"], cwd=tmp_path, env=env)
    assert p.returncode != 2, p.stderr
    d = json.loads(p.stdout)
    if cmd == "check":
        got = (d["launch"]["world_size"]["value"], d["launch"]["gpus_per_node"]["value"],
               d["launch"]["num_nodes"]["value"])
        assert got == (world, per_node, nodes)
    else:
        assert (d["cluster"]["world_size"], d["cluster"]["gpus_per_node"]) == (world, per_node)


@pytest.mark.parametrize("bad", [{"LOCAL_WORLD_SIZE": "0"}, {"WORLD_SIZE": "abc"}])
def test_a_malformed_launcher_variable_is_exit_2_in_estimate_and_a_named_warning_in_check(bad, tmp_path):
    """A malformed launcher variable next to a one-launcher-per-node Slurm job: estimate exits 2 with one
    line naming it; check (which runs inside the launch) warns naming it (K112) and models the world the
    remaining variables give, by the same derivation: WORLD_SIZE=abc is skipped and the world is 2 nodes x
    LOCAL_WORLD_SIZE 8 = 16; LOCAL_WORLD_SIZE=0 is skipped, no other per-node count is set, so SLURM_NTASKS=2
    stays the world (one rank per task)."""
    from tests.conftest import ROOT
    env = {"LOCAL_WORLD_SIZE": "8", "SLURM_NTASKS": "2", "SLURM_JOB_NUM_NODES": "2", **bad}
    name, = bad
    cfg = str(ROOT / "sample_configs" / "zero3.json")
    p = run_cli(["estimate", cfg, "--hardware", "dgx-h100", *Z3], cwd=tmp_path, env=env)
    assert p.returncode == 2, (p.stdout, p.stderr)
    line, = p.stderr.strip().splitlines()
    assert f"{name}=" in line
    p = run_cli(["check", cfg, "--hardware", "dgx-h100", *Z3, "--format", "json"], cwd=tmp_path, env=env)
    assert p.returncode != 2, p.stderr
    d = json.loads(p.stdout)
    assert any(name in n for n in d["launch"]["invalid"])
    assert d["launch"]["world_size"]["value"] == (16 if name == "WORLD_SIZE" else 2)
    # without the malformed variable, estimate agrees with check's world (the test above)
