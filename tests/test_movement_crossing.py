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
