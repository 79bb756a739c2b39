"""ncb21: the data-parallel collectives of one dgx-h100 node were labelled "network" in the movement
table, the HTML chart ("network/send") and its legend ("network: what a rank sends in the data-parallel
collectives") while the step-time model timed them on NVLink (419.1 GiB/s per rank): a user read 314 GiB
over InfiniBand. The label now names the link the bytes cross, as the step-time model times them
(ledger/movement.link_bandwidth: within a node the peer link, across nodes the node's NIC bandwidth
shared by its ranks). Expected rates from the preset file (advisor/data/hardware_presets.json):
h100-sxm-80gb peer_bytes_per_s and dgx-h100 network_bytes_per_s / accelerators_per_node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
CFG = str(ROOT / "sample_configs" / "zero3_cpu_offload.json")
PRESETS = json.loads((ROOT / "advisor" / "data" / "hardware_presets.json").read_text())
ONE_NODE = ["--model", "llama-3-8b", "--world-size", "8", "--hardware", "dgx-h100", "--seq-len", "4096"]
TWO_NODES = ["--model", "llama-3-8b", "--world-size", "16", "--hardware", "dgx-h100:2", "--seq-len", "4096",
             "--set", "gradient_accumulation_steps=4"]  # 64 = 1 x 4 x 16


def _network(args):
    p = run_cli(["estimate", CFG, *args, "--format", "json"])
    d = json.loads(p.stdout)
    return [m for m in d["movement"]["ranks"][0]["movements"] if m["link"] == "network"]


@pytest.mark.parametrize("args, crosses, rate", [
    (ONE_NODE, "within_node", PRESETS["accelerators"]["h100-sxm-80gb"]["peer_bytes_per_s"]),
    (TWO_NODES, "across_nodes", PRESETS["systems"]["dgx-h100"]["network_bytes_per_s"]
     / PRESETS["systems"]["dgx-h100"]["accelerators_per_node"]),
])
def test_json_names_the_link_the_collectives_cross(args, crosses, rate):
    ms = _network(args)
    assert ms and all(m["crosses"] == crosses for m in ms), ms
    for m in ms:  # the crossing named is the one the time is computed on
        assert m["seconds"] == pytest.approx(m["bytes"] / rate, rel=1e-9), m


def test_text_and_html_say_peer_link_on_one_node(tmp_path):
    out = run_cli(["estimate", CFG, *ONE_NODE]).stdout
    table = out[out.index("Data movement per optimizer step"):]
    assert "peer link  send" in table and "network  send" not in table, table
    assert "8 ranks per node: peer link = within a node, over the peer link (NVLink/xGMI" in " ".join(table.split()), table
    two = run_cli(["estimate", CFG, *TWO_NODES]).stdout
    table2 = two[two.index("Data movement per optimizer step"):]
    assert "network  send" in table2 and "peer link  send" not in table2, table2
    assert "8 ranks per node: network = across nodes" in " ".join(table2.split()), table2
    html = tmp_path / "r.html"
    assert run_cli(["report", CFG, *ONE_NODE, "-o", str(html)]).returncode in (0, 1)
    page = html.read_text()
    assert "peer link/send" in page and "network/send" not in page
    assert ("peer link: what a rank sends in its collectives within a node, over the peer link (NVLink/xGMI"
            in page), page[page.index("id=movement"):][:600]
    assert "network: what a rank sends" not in page


# cross21: under pipeline parallelism a data-parallel group sits inside one pipe stage at stride TP
# (DeepSpeed's PipeModelDataParallelTopology, axes pipe, data, model): PP2 x DP8 on 2 nodes of 8 has
# the groups [[0..7], [8..15]], each within a node, yet the collectives were timed on the NIC share.
SHAPES = [  # (pp, tp, dp, ranks per node)
    (2, 1, 8, 8), (2, 4, 2, 8), (2, 4, 4, 8), (4, 2, 2, 8), (1, 8, 2, 8), (2, 2, 4, 4), (3, 2, 2, 8),
    (2, 16, 1, 8), (4, 1, 2, 4), (2, 2, 2, 3),
]


def _ds_groups(pp, tp, dp):
    ds = pytest.importorskip("deepspeed.runtime.pipe.topology")
    topo = ds.PipeModelDataParallelTopology(num_pp=pp, num_mp=tp, num_dp=dp)
    return topo, {axis: topo.get_axis_comm_lists(axis) for axis in ("data", "model")}


@pytest.mark.parametrize("pp, tp, dp, rpn", SHAPES)
def test_group_spans_nodes_matches_deepspeeds_topology(pp, tp, dp, rpn):
    from advisor.ledger.movement import group_spans_nodes
    topo, groups = _ds_groups(pp, tp, dp)
    node = lambda r: r // rpn  # nodes hold consecutive ranks (the launcher's --node_rank blocks)
    for axis in ("data", "model"):
        for s in range(pp):
            gs = [g for g in groups[axis] if topo.get_coord(g[0]).pipe == s] if (dp if axis == "data" else tp) > 1 \
                else [[r] for r in topo.filter_match(pipe=s)]
            want = any(len({node(r) for r in g}) > 1 for g in gs)
            assert group_spans_nodes(axis, tp, pp, dp, rpn, s) == want, (axis, s, gs)
    for s in range(pp - 1):  # stage s sends to the rank of the same (data, model) in stage s + 1
        pairs = [(r, topo.get_rank(pipe=s + 1, data=topo.get_coord(r).data, model=topo.get_coord(r).model))
                 for r in topo.filter_match(pipe=s)]
        want = any(node(a) != node(b) for a, b in pairs)
        assert group_spans_nodes("pipe", tp, pp, dp, rpn, s) == want, (s, pairs)


def test_pp_tp_data_parallel_collectives_within_a_node_take_the_peer_link(tmp_path):
    """llama-3-70b, TP4 x PP2 x DP2 on 2 dgx-h100 nodes: a stage's 8 ranks are one node, so its
    ZeRO-1 reduce-scatter / all-gather group ({0, 4}) is within it: bytes / the H100 peer link
    (preset peer_bytes_per_s), not / (network_bytes_per_s / 8) as before (8.21 GiB in 0.176 s)."""
    cfg = tmp_path / "tp70.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8,
                               "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}))
    args = ["--model", "llama-3-70b", "--world-size", "16", "--tensor-parallel", "4", "--pipeline-parallel", "2",
            "--hardware", "dgx-h100:2", "--seq-len", "4096"]
    p = run_cli(["estimate", str(cfg), *args, "--format", "json"])
    d = json.loads(p.stdout)
    peer = PRESETS["accelerators"]["h100-sxm-80gb"]["peer_bytes_per_s"]
    nic = PRESETS["systems"]["dgx-h100"]["network_bytes_per_s"] / PRESETS["systems"]["dgx-h100"]["accelerators_per_node"]
    seen = set()
    for role in d["movement"]["ranks"]:
        for m in role["movements"]:
            if m["item"] in ("grad_reduce_scatter", "param_allgather"):
                seen.add(m["item"])
                assert m["crosses"] == "within_node", m
                assert m["seconds"] == pytest.approx(m["bytes"] / peer, rel=1e-9), m
            if m["item"] in ("pp_send_activations", "pp_send_grads"):  # ranks 0..7 -> 8..15: the other node
                assert m["crosses"] == "across_nodes", m
                assert m["seconds"] == pytest.approx(m["bytes"] / nic, rel=1e-9), m
    assert seen == {"grad_reduce_scatter", "param_allgather"}, seen
