"""fixb23 (newcomer check 23): the node count of ``--hardware NAME:N`` and checkpoint's ``--set``.

The shapes are counted by hand from the presets (advisor/data/hardware_presets.json): dgx-h100 is a node of
8 H100s; h100-sxm-80gb is one accelerator with no node around it. A launcher starts the same number of
ranks on every node (torch/distributed/run.py --nproc-per-node; DeepSpeed's launcher/runner.py gives each
host its --num_gpus slots), so N named nodes hold N x ranks-per-node ranks.

1. ``--hardware h100-sxm-80gb:4`` names 4 nodes of unknown size: estimate took world size 1 and said
   --hardware gave none, check took 4 x the placeholder 1, generate refused; now every command refuses it
   (exit 2, one line naming --gpus-per-node), and with --gpus-per-node 8 every command counts 4 x 8 = 32.
2. ``--hardware dgx-h100:2 --world-size 32``: 2 nodes of 8 are 16 ranks, yet checkpoint printed "node MTBF
   1,000 h / 4 nodes" and estimate ran 32 ranks without a word; now exit 2 naming both sources.
3. ``--hardware dgx-h100:`` (no count) was 1 node, while ``dgx-h100:0`` is refused: now refused the same way.
4. ``checkpoint`` had no ``--set``.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, run_cli

CFG = str(ROOT / "sample_configs" / "zero3.json")
# a small model and no train_batch_size: the shape is all these tests read (the batch follows the world size)
SMALL = ["--params", "1000000", "--seq-len", "2048", "--set", "train_batch_size=null"]
CLEAN_ENV = {"LOCAL_WORLD_SIZE": "", "SLURM_GPUS_ON_NODE": "", "SLURM_GPUS_PER_NODE": "", "SLURM_JOB_NUM_NODES": "",
             "SLURM_NNODES": "", "CUDA_VISIBLE_DEVICES": ""}


def _run(cmd: str, *args: str, env: dict | None = None, tmp_path=None):
    extra = ["-o", str(tmp_path / f"{cmd}.html")] if cmd == "report" else []
    return run_cli([cmd, CFG, *SMALL, *args, *extra], env={**CLEAN_ENV, **(env or {})}, cwd=tmp_path)


def _shape(cmd: str, *args: str, env: dict | None = None, tmp_path=None) -> tuple[int, int]:
    """(world size, nodes) the command models, from its JSON."""
    p = _run(cmd, *args, "--format", "json", env=env, tmp_path=tmp_path)
    assert p.returncode in (0, 1, 4), (cmd, p.stderr)
    d = json.loads(p.stdout)
    if cmd == "check":
        return d["launch"]["world_size"]["value"], d["launch"]["num_nodes"]["value"]
    if cmd == "checkpoint":
        return d["world_size"], d["nodes"]
    c = d["cluster"]
    return c["world_size"], -(-c["world_size"] // c["gpus_per_node"])


def _refused(p) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout[:300], p.stderr)
    line, = p.stderr.strip().splitlines()
    assert "Traceback" not in p.stderr and not p.stdout.strip(), p.stdout[:300]
    return line


SHAPED = ["estimate", "check", "checkpoint"]


@pytest.mark.parametrize("cmd", SHAPED + ["report"])
def test_an_accelerator_preset_on_named_nodes_without_a_node_size_is_refused(cmd, tmp_path):
    """The newcomer's own command (llama-3-8b, --set train_batch_size=8) and its estimate printed "world size 1
    (... --hardware gave one)"; every command now says the 4 nodes have no size and names --gpus-per-node."""
    p = run_cli([cmd, CFG, "--model", "llama-3-8b", "--hardware", "h100-sxm-80gb:4", "--seq-len", "2048",
                 "--set", "train_batch_size=8"] + (["-o", str(tmp_path / "r.html")] if cmd == "report" else []),
                env=CLEAN_ENV, cwd=tmp_path)
    line = _refused(p)
    assert "h100-sxm-80gb:4" in line and "4 nodes" in line and "--gpus-per-node" in line, line
    assert not (tmp_path / "r.html").exists()


def test_generate_refuses_it_in_the_same_words(tmp_path):
    p = run_cli(["generate", "--model", "llama-3-8b", "--hardware", "h100-sxm-80gb:4", "--seq-len", "2048",
                 "--global-batch", "8", "-o", str(tmp_path / "g.json")], env=CLEAN_ENV)
    est = _refused(_run("estimate", "--hardware", "h100-sxm-80gb:4", tmp_path=tmp_path))
    line = _refused(p)
    # one message (cluster/launch.accelerator_alone_problem): the same words up to the flags each command takes
    words = est.split(" so it gives no world size")[0].split(" names ")[1]
    assert "h100-sxm-80gb:4" in line and f" names {words} so it gives no world size: give --gpus-per-node," in line, \
        (est, line)


@pytest.mark.parametrize("cmd", SHAPED)
def test_an_accelerator_preset_on_named_nodes_with_its_ranks_per_node(cmd, tmp_path):
    """4 named nodes x --gpus-per-node 8 = 32 ranks on 4 nodes; --world-size 32 on them = 8 per node, 4 nodes;
    --world-size 30 does not split over 4 nodes: refused."""
    assert _shape(cmd, "--hardware", "h100-sxm-80gb:4", "--gpus-per-node", "8", tmp_path=tmp_path) == (4 * 8, 4)
    assert _shape(cmd, "--hardware", "h100-sxm-80gb:4", "--world-size", "32", tmp_path=tmp_path) == (32, 4)
    line = _refused(_run(cmd, "--hardware", "h100-sxm-80gb:4", "--world-size", "30", tmp_path=tmp_path))
    assert "30" in line and "4 nodes" in line, line


@pytest.mark.parametrize("cmd", SHAPED + ["report"])
def test_a_world_size_other_than_the_named_nodes_is_refused(cmd, tmp_path):
    """dgx-h100:2 = 2 x 8 = 16 ranks: --world-size 32 contradicts it (it was run as 4 nodes), and so does
    WORLD_SIZE=32 from a launcher; the line names both sources and the fixes (dgx-h100:4, or 16)."""
    line = _refused(_run(cmd, "--hardware", "dgx-h100:2", "--world-size", "32", "--node-mtbf-hours", "1000",
                         "--save-dir", "/raid/c", tmp_path=tmp_path) if cmd == "checkpoint" else
                    _run(cmd, "--hardware", "dgx-h100:2", "--world-size", "32", tmp_path=tmp_path))
    assert "32 (--world-size)" in line and "--hardware dgx-h100:2" in line and "16" in line, line
    assert "dgx-h100:4" in line, line
    line = _refused(_run(cmd, "--hardware", "dgx-h100:2", env={"WORLD_SIZE": "32"}, tmp_path=tmp_path))
    assert "WORLD_SIZE" in line and "dgx-h100:2" in line, line
    # fewer ranks than the named nodes hold, with nothing saying fewer per node: 8 on 2 x 8
    line = _refused(_run(cmd, "--hardware", "dgx-h100:2", "--world-size", "8", tmp_path=tmp_path))
    assert "--gpus-per-node 4" in line, line


@pytest.mark.parametrize("cmd", SHAPED)
def test_the_shapes_a_named_node_count_still_takes(cmd, tmp_path):
    """The legit cases, in every command: the named nodes at the spec's 8 per node (2 x 8 = 16); fewer ranks
    per node stated by --gpus-per-node or the launcher (2 x 4 = 8, with or without --world-size 8); and a
    spec that names no node count, whose nodes follow the world size (32 / 8 = 4)."""
    assert _shape(cmd, "--hardware", "dgx-h100:2", tmp_path=tmp_path) == (16, 2)
    assert _shape(cmd, "--hardware", "dgx-h100:2", "--gpus-per-node", "4", tmp_path=tmp_path) == (8, 2)
    assert _shape(cmd, "--hardware", "dgx-h100:2", "--world-size", "8", "--gpus-per-node", "4",
                  tmp_path=tmp_path) == (8, 2)
    assert _shape(cmd, "--hardware", "dgx-h100:2", env={"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"},
                  tmp_path=tmp_path) == (8, 2)
    assert _shape(cmd, "--hardware", "dgx-h100", "--world-size", "32", tmp_path=tmp_path) == (32, 4)


def test_checkpoints_cluster_mtbf_is_over_the_named_nodes(tmp_path):
    """The newcomer's checkpoint: node MTBF 1,000 h on dgx-h100:2 is 1,000 / 2 = 500 h for the job (not / 4)."""
    p = _run("checkpoint", "--hardware", "dgx-h100:2", "--node-mtbf-hours", "1000", "--write-bandwidth", "1GB/s",
             "--format", "json", tmp_path=tmp_path)
    d = json.loads(p.stdout)
    assert (d["world_size"], d["nodes"]) == (16, 2)
    assert d["resilience"]["cluster_mtbf_s"] == pytest.approx(1000 * 3600 / 2)


@pytest.mark.parametrize("cmd", SHAPED + ["generate", "hardware"])
def test_an_empty_node_count_is_refused_as_zero_is(cmd, tmp_path):
    def run(spec):
        if cmd == "hardware":
            return run_cli(["hardware", spec])
        if cmd == "generate":
            return run_cli(["generate", "--model", "llama-3.2-1b", "--hardware", spec, "--seq-len", "2048",
                            "--global-batch", "16", "-o", str(tmp_path / "g.json")])
        return _run(cmd, "--hardware", spec, tmp_path=tmp_path)
    zero, empty = _refused(run("dgx-h100:0")), _refused(run("dgx-h100:"))
    assert "must be an integer from 1 to" in zero
    assert empty == zero.replace("dgx-h100:0", "dgx-h100:"), (zero, empty)


def test_checkpoint_takes_set_and_places_its_findings_at_the_argument(tmp_path):
    """--set on checkpoint, as on estimate: the value is the config's (train_batch_size 7 at 1 rank of
    micro-batch 2 x accumulation 4 = 8 is DeepSpeed's batch assertion, B001), and the finding is placed at
    the --set argument, not at a line of the file, in text and JSON; a malformed --set is exit 2."""
    args = [CFG, "--params", "1000000", "--set", "train_batch_size=7"]
    t = run_cli(["checkpoint", *args])
    assert t.returncode == 1, t.stderr
    assert f"--set 'train_batch_size=7' (on {CFG}): error B001" in " ".join(t.stdout.split()), t.stdout
    d = json.loads(run_cli(["checkpoint", *args, "--format", "json"]).stdout)
    b001, = [f for f in d["findings"] if f["code"] == "B001"]
    assert b001["set"] == "--set 'train_batch_size=7'" and b001["line"] is None, b001
    ok = run_cli(["checkpoint", CFG, "--params", "1000000", "--set", "train_batch_size=8"])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    _refused(run_cli(["checkpoint", CFG, "--params", "1000000", "--set", "train_batch_size"]))
