"""generate takes its job shape from --hardware when --nodes / --gpus-per-node are not given (newcomer
check, session 21: ``generate --hardware dgx-h100:4`` stopped with "missing option '--gpus-per-node'",
though the preset says 8 accelerators per node and ``:4`` says 4 nodes -- estimate and check already read
the shape from --hardware).

Expected values, by hand: the dgx-h100 preset is one DGX H100 node of 8 H100 80GB SXM5
(schemas/hardware presets; NVIDIA DGX H100 datasheet: 8 GPUs per system); ``NAME:N`` is N nodes
(advisor.cluster.hardware.resolve_hardware). So dgx-h100:4 is 4 x 8 = 32 ranks; dgx-h100 alone 1 x 8.
An accelerator preset alone (h100-sxm-80gb) states no node (its one accelerator per node is a placeholder,
Hardware.node_accelerators is None), so --gpus-per-node is required there: exit 2, one line naming it.
"""

from __future__ import annotations

import json

from tests.conftest import run_cli

BASE = ["generate", "--model", "gpt2", "--seq-len", "128", "--global-batch", "64", "--no-model-parallel",
        "--top", "1", "--format", "json"]


def _shape(args):
    p = run_cli([*BASE, *args])
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    return d


def test_shape_from_the_preset_and_its_node_count():
    a = _shape(["--hardware", "dgx-h100:4"])
    b = _shape(["--hardware", "dgx-h100:4", "--nodes", "4", "--gpus-per-node", "8"])
    assert a == b  # the same request: 4 nodes x 8
    c = _shape(["--hardware", "dgx-h100"])
    d = _shape(["--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8"])
    assert c == d
    assert a != c  # 32 ranks vs 8: a different search


def test_flags_still_win_over_the_preset():
    a = _shape(["--hardware", "dgx-h100:4", "--nodes", "2"])
    b = _shape(["--hardware", "dgx-h100:2", "--gpus-per-node", "8"])
    assert a == b


def test_accelerator_preset_alone_needs_gpus_per_node():
    p = run_cli([*BASE, "--hardware", "h100-sxm-80gb"])
    assert p.returncode == 2
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--gpus-per-node" in lines[0] and "h100-sxm-80gb" in lines[0], p.stderr
    assert "Traceback" not in p.stderr
    assert run_cli([*BASE, "--hardware", "h100-sxm-80gb", "--gpus-per-node", "4"]).returncode == 0


def test_world_bound_names_where_the_shape_came_from():
    p = run_cli([*BASE, "--hardware", "dgx-h100:65536", "--gpus-per-node", "1024"])
    assert p.returncode == 2
    assert "65536 node(s) of --hardware dgx-h100:65536 x --gpus-per-node 1024" in p.stderr, p.stderr
