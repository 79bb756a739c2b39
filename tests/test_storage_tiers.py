"""Storage tiers as the hardware spec states them (issue 23, the newcomer's defects): a shared
tier's aggregate and per-client limits hold for NVMe swap traffic as for checkpoint saves, and a
shared tier's wear counts every node's writes. Expected values are computed here by hand from the
rule (min(aggregate, nodes x per-client)) and DeepSpeed's aio request window."""

from __future__ import annotations

import json

import pytest

from advisor.cluster.hardware import from_dict
from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan
from advisor.model.inventory import Inventory, TensorSpec

N = 4_194_304  # 2^22 elements: a multiple of every aio alignment


def _lustre(nodes: int = 4, per_client: float | None = 20e9, scope: str = "shared") -> object:
    tier = {"name": "lustre", "mounts": ["/lustre"], "capacity_bytes": 1e15, "read_bytes_per_s": 100e9,
            "write_bytes_per_s": 100e9, "access": "read-write", "scope": scope, "endurance": {"tbw": 100_000}}
    if per_client:
        tier.update(per_client_write_bytes_per_s=per_client, per_client_read_bytes_per_s=per_client)
    return from_dict({"nodes": nodes, "accelerators_per_node": 8, "host_memory_bandwidth_bytes_per_s": 5e11,
                      "network_bytes_per_s": 4e11,
                      "accelerator": {"name": "toy", "memory_bytes": 8e10, "peak_bf16_flops": 1e15,
                                      "host_link": {"bytes_per_s": 5e10}, "peer_bytes_per_s": 4.5e11},
                      "storage": [tier]})


def _swap_plan(world: int) -> Plan:
    inv = Inventory("one", [TensorSpec("w", (N * world,), trainable=True)])
    raw = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/lustre/swap"}}}
    return Plan(effective_config(raw), inv, Cluster(world_size=world, gpus_per_node=8))


def test_shared_tier_rate_is_min_of_aggregate_and_nodes_times_per_client_by_hand():
    t = _lustre().storage[0]
    # 100 GB/s aggregate, 20 GB/s per client: 4 nodes -> min(100, 80) = 80 GB/s, 20 GB/s each;
    # 8 nodes -> min(100, 160) = 100 GB/s, 12.5 GB/s each; 1 node -> 20 GB/s
    assert t.cluster_rate("write", 4) == 80e9 and t.node_rate("write", 4) == 20e9
    assert t.cluster_rate("read", 8) == 100e9 and t.node_rate("read", 8) == 12.5e9
    assert t.node_rate("write", 1) == 20e9
    # no per-client limit stated: the aggregate shared by the nodes
    assert _lustre(per_client=None).storage[0].node_rate("write", 4) == 25e9
    # node-local: each node its own figure
    assert _lustre(scope="node-local").storage[0].node_rate("write", 4) == 100e9


def test_nvme_swap_on_a_shared_tier_runs_at_the_nodes_share_per_rank_by_hand():
    """The newcomer's case: 100 GB/s aggregate, 20 GB/s per client, 4 nodes x 8 ranks, nvme_path
    on /lustre. Each node gets min(100 / 4, 20) = 20 GB/s; DeepSpeed's default aio window (8 ranks
    x 1 thread x queue 8 x 1 MiB = 64 MiB in flight) over 20 us write / 85 us read latency
    (movement.NVME_LATENCY_S, the tier states none) plus the window at 20 GB/s; the node's 8 ranks
    share it: about 2.49 GB/s per rank writing (it was about 12 GB/s, the aggregate as one node's
    rate: Lustre looked faster than a local drive)."""
    from advisor.ledger.movement import movement_roles

    hw = _lustre()
    plan = _swap_plan(32)
    ms = movement_roles(plan, hw)[0][1]
    o = 8 * 1 * 8 * 1_048_576
    want = {"write": o / (20e-6 + o / 20e9) / 8, "read": o / (85e-6 + o / 20e9) / 8}
    assert want["write"] == pytest.approx(2.4852e9, rel=1e-4)
    seen = set()
    for m in ms:
        if m.link != "nvme":
            continue
        d = "write" if m.direction == "write" else "read"
        # one file each (one sub-group's master / moment, one gradient piece): + 91 us written, 66 us read
        # (movement.AIO_PER_FILE_S)
        assert m.files == 1
        assert m.seconds == pytest.approx(m.bytes / want[d] + {"write": 91e-6, "read": 66e-6}[d], rel=1e-9), m.item
        assert m.bytes / (m.seconds - m.files * {"write": 91e-6, "read": 66e-6}[d]) <= 2.5e9
        seen.add(d)
    assert seen == {"read", "write"}
    # the step time's breakdown states the node's share and where it comes from
    from advisor.ledger.steptime import breakdown_lines, step_time
    st = step_time(plan, hw, seq_len=1000)
    r = st.assumptions["nvme_aio_rates"]["lustre"]["write"]
    assert r["tier_bytes_per_s"] == 20e9 and r["nodes"] == 4 and r["scope"] == "shared"
    assert any("NVMe tier lustre (shared): writes at 18.63 GiB/s per node = min(aggregate 93.13 GiB/s / 4 nodes, "
               "per-client 18.63 GiB/s)" in x for x in breakdown_lines(st))


def test_nvme_swap_on_one_node_of_a_shared_tier_is_capped_by_the_per_client_limit():
    # 1 node of 8 ranks: min(100, 1 x 20) = 20 GB/s: the per-client limit, not the aggregate
    from advisor.ledger.movement import movement_roles
    ms = movement_roles(_swap_plan(8), _lustre(nodes=1))[0][1]
    w = next(m for m in ms if m.link == "nvme" and m.direction == "write")
    o = 8 * 8 * 1_048_576
    assert w.files == 1  # + 91 us for its one file (movement.AIO_PER_FILE_S)
    assert w.seconds == pytest.approx(w.bytes / (o / (20e-6 + o / 20e9) / 8) + 91e-6, rel=1e-9)


def _ckpt(scope: str):
    from advisor.ledger.checkpoint import checkpoint_plan
    from advisor.model.inventory import from_param_count
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                           "zero_optimization": {"stage": 3}})
    hw = _lustre(scope=scope)
    return checkpoint_plan(Plan(ec, from_param_count(1_000_000_000), Cluster(world_size=32, gpus_per_node=8)),
                           hardware=hw, save_dir="/lustre/ck", save_interval_s=600.0)


def test_checkpoint_wear_on_a_shared_tier_counts_every_nodes_writes_by_hand():
    """A shared filesystem takes every node's checkpoint files: writes per day = the whole save x
    86,400 / interval, not the busiest node's share (4 nodes: drive life was 4x too long, 5,988
    days against ~1,497 in the newcomer's report). 1B parameters, ZeRO-3, 32 ranks on 4 nodes,
    one save every 600 s, 100,000 TBW = 1e17 bytes."""
    shared = _ckpt("shared")
    total = sum(shared.files.per_rank_bytes().values())  # every rank's files
    st = shared.storage()
    assert st["bytes_written_per_save"] == total
    assert st["bytes_written_per_day"] == pytest.approx(total * 86_400 / 600)
    assert st["days_of_life"] == pytest.approx(1e17 / (total * 144), rel=1e-12)
    assert st["written_by"] == "all 4 nodes together (shared tier)"
    # node-local: each node's drive takes its own ranks' files, the busiest node's (ranks 0-7)
    local = _ckpt("node-local").storage()
    node0 = sum(b for r, b in shared.files.per_rank_bytes().items() if r < 8)
    assert local["bytes_written_per_save"] == node0 and local["written_by"] == "the busiest node"
    assert st["days_of_life"] == pytest.approx(local["days_of_life"] * node0 / total, rel=1e-12)
    assert 3.9 < local["days_of_life"] / st["days_of_life"] <= 4.0


def test_nvme_path_under_no_tier_mount_but_root_says_which_tier_was_assumed():
    """sample_configs/zero_infinity_nvme.json swaps to /local_nvme; dgx-h100's tiers are raid
    (/raid) and os (/): the path falls to the OS drive at 3.8 GB/s. The step time says so, names
    the other tier and how to describe the drive; /raid/x, a tier's own mount, gets no note."""
    import os
    from advisor.cluster.hardware import resolve_hardware
    from advisor.config.loading import load_config
    from advisor.ledger.steptime import breakdown_lines, step_time
    from advisor.model.specs import resolve_model

    hw = resolve_hardware("dgx-h100")
    assert hw.tier_for_path("/local_nvme").name == "os"
    note = hw.root_fallback_note("/local_nvme")
    assert note.startswith("nvme_path /local_nvme is under no storage tier's mount point of ")
    assert "taken as tier 'os' (/, the root filesystem, 3.8 GB/s write)" in note and "raid (/raid)" in note
    assert hw.root_fallback_note("/raid/swap") is None and hw.root_fallback_note("/") is None
    cfg = os.path.join(os.path.dirname(__file__), "..", "sample_configs", "zero_infinity_nvme.json")
    plan = Plan(effective_config(load_config(cfg).data), resolve_model("llama-3.2-1b"),
                Cluster(world_size=8, gpus_per_node=8))
    st = step_time(plan, hw, seq_len=1024)
    assert st.assumptions["nvme_tier_assumed"] == {"/local_nvme": note}
    assert any(x.startswith("  NVMe tier assumed: nvme_path /local_nvme") for x in breakdown_lines(st))
    raw = json.loads(open(cfg).read().replace("/local_nvme", "/raid/swap"))
    st2 = step_time(Plan(effective_config(raw), resolve_model("llama-3.2-1b"), Cluster(world_size=8, gpus_per_node=8)),
                    hw, seq_len=1024)
    assert st2.assumptions["nvme_tier_assumed"] is None


def test_nvme_swap_wear_on_a_shared_tier_counts_every_nodes_writes_by_hand():
    """The swap's per-day writes on a shared tier: the filesystem takes all 4 nodes' swap writes,
    so bytes/day = one node's bytes per step x 4 x 86,400 / step, and the rated 1e17 B last a
    quarter as long as one node's writes would say; a node-local tier of the same figures keeps one
    node's."""
    from advisor.ledger.movement import movement_section

    plan = _swap_plan(32)
    sh = next(x for x in movement_section(plan, _lustre(), step_time_s=10.0)["endurance"] if x["tier"] == "lustre")
    node = sh["write_bytes_per_step"]
    assert node > 0 and sh["writing_nodes"] == 4
    assert sh["write_bytes_per_day"] == pytest.approx(node * 4 * 8640)
    assert sh["days_of_life"] == pytest.approx(1e17 / (node * 4 * 8640), rel=1e-12)
    loc = next(x for x in movement_section(plan, _lustre(scope="node-local"), step_time_s=10.0)["endurance"]
               if x["tier"] == "lustre")
    assert loc["write_bytes_per_step"] == node and loc["writing_nodes"] == 1
    assert loc["write_bytes_per_day"] == pytest.approx(node * 8640)


def test_nvme_capacity_of_a_shared_tier_holds_every_nodes_swap_by_hand():
    """A shared filesystem's space holds the swap files of every node's ranks, not one node's.
    ZeRO-3 optimizer swap to NVMe, 32 ranks on 4 nodes, one tensor of 32 N elements: each rank
    swaps its N-element partition's fp32 master, exp_avg, exp_avg_sq
    (partitioned_optimizer_swapper.py swap_out_optimizer_state) and fp32 gradient
    (optimizer_utils.py _swap_out_gradients), 4 x 4 B x N. Node-local: 8 ranks x 16 N against one
    node's drive; shared: 32 ranks x 16 N = 2 GiB against the filesystem, which a 1e9-byte tier
    no longer holds."""
    from advisor.cluster.hardware import Capacity
    from advisor.views.estimate import plan_fit

    plan = _swap_plan(32)
    local = next(r for r in plan_fit(plan, Capacity(nvme=10**9)).rows if r.tier == "nvme")
    assert local.need == 8 * 16 * N == 536_870_912 and local.fits and local.scope == "per node (8 ranks)"
    pf = plan_fit(plan, Capacity(nvme=10**9, nvme_shared=True))
    shared = next(r for r in pf.rows if r.tier == "nvme")
    assert shared.need == 32 * 16 * N == 2_147_483_648 and shared.fits is False
    assert shared.scope == "all 4 nodes together (32 ranks, shared tier)" and shared.ranks == 32
    m100 = [f for f in pf.findings if f.code == "M100"]
    message, fix = m100[0].text("GiB")
    assert message.startswith("nvme all 4 nodes together (32 ranks, shared tier): the step needs 2.00 GiB")
    assert fix.startswith("more space on the shared filesystem")


def test_hardware_spec_shared_tier_reaches_estimates_nvme_fit(tmp_path):
    """The CLI takes the tier's scope from the spec: the same 4-node spec with the swap tier
    shared needs 4 x what it needs node-local (every node's ranks alike), and 1e10 bytes of
    lustre hold one node's 1B-parameter swap (16 B x 1e9 / 4 nodes = 4e9) but not all four
    (1.6e10)."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                               "optimizer": {"type": "AdamW"},
                               "zero_optimization": {"stage": 3, "offload_optimizer": {
                                   "device": "nvme", "nvme_path": "/lustre/swap"}}}))
    from tests.conftest import run_cli
    rows = {}
    for scope in ("shared", "node-local"):
        hw = tmp_path / f"{scope}.json"
        tier = {"name": "lustre", "mounts": ["/lustre"], "capacity_bytes": 1e10, "read_bytes_per_s": 100e9,
                "write_bytes_per_s": 100e9, "access": "read-write", "scope": scope}
        d = {"nodes": 4, "accelerators_per_node": 8, "host_memory_bytes": 1e12,
             "accelerator": {"name": "toy", "memory_bytes": 8e10}, "storage": [tier]}
        hw.write_text(json.dumps(d))
        p = run_cli(["estimate", str(cfg), "--params", "1e9", "--hardware", str(hw), "--seq-len", "1024",
                     "--format", "json"])
        assert p.returncode in (0, 1), p.stderr
        rows[scope] = next(r for r in json.loads(p.stdout)["fit"] if r["tier"] == "nvme")
    s, loc = rows["shared"], rows["node-local"]
    assert s["need"] == 4 * loc["need"] and 16e9 <= s["need"] < 16e9 * 1.0001
    assert loc["verdict"] == "fits" and s["verdict"] == "does not fit"
    assert s["scope"] == "all 4 nodes together (32 ranks, shared tier)" and loc["scope"] == "per node (8 ranks)"


def test_checkpoint_wear_counts_the_nvme_swap_on_the_same_tier_by_hand():
    """The save dir and the swap's nvme_path on one tier wear the same drive: per day it takes the
    saves and the swap. Node-local lustre tier (rated 100,000 TBW = 1e17 B), 32 ranks on 4 nodes,
    one tensor of 32 N elements, ZeRO-3 optimizer swap: each rank writes its N-element partition's
    fp32 master, exp_avg, exp_avg_sq and fp32 gradient, 16 N B per step, so one node's drive takes
    8 x 16 N B x 8,640 steps/day at 10 s; the saves the busiest node's files (ranks 0-7) x 144
    saves/day at 600 s."""
    from advisor.views.estimate import checkpoint_with_step_time

    plan = _swap_plan(32)
    cp = checkpoint_with_step_time(plan, hardware=_lustre(scope="node-local"), save_dir="/lustre/ck",
                                   save_interval_s=600.0, step_time_s=10.0)
    swap = 8 * 16 * N * 8640
    saves = sum(b for r, b in cp.files.per_rank_bytes().items() if r < 8) * 144
    st = cp.storage()
    assert st["swap_bytes_per_day"] == swap and st["checkpoint_bytes_per_day"] == pytest.approx(saves)
    assert st["bytes_written_per_day"] == pytest.approx(swap + saves)
    assert st["days_of_life"] == pytest.approx(1e17 / (swap + saves), rel=1e-12)
    assert st["shares_tier_with"] == "NVMe swap (/lustre/swap)"
    # saves elsewhere (no tier holds the path): the swap is not theirs to count
    other = checkpoint_with_step_time(plan, hardware=_lustre(scope="node-local"), save_dir="/home/ck",
                                      save_interval_s=600.0, step_time_s=10.0)
    assert other.swap_writes is None


def test_estimate_swap_wear_counts_checkpoint_saves_to_the_same_tier(tmp_path):
    """estimate --save-dir on the swap's tier: the tier's per-day writes are the swap's
    (16 B x 1e9 parameters / 4 nodes per node per step, x 8,640 steps/day at 10 s) plus the
    saves' (the checkpoint section's bytes per save x 144 saves/day at 600 s), the drive life
    1e17 B over that sum, the same figures in the checkpoint section; the text says so."""
    from tests.conftest import run_cli
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                               "optimizer": {"type": "AdamW"},
                               "zero_optimization": {"stage": 3, "offload_optimizer": {
                                   "device": "nvme", "nvme_path": "/lustre/swap"}}}))
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({"nodes": 4, "accelerators_per_node": 8, "host_memory_bytes": 1e12,
                              "accelerator": {"name": "toy", "memory_bytes": 8e10},
                              "storage": [{"name": "lustre", "mounts": ["/lustre"], "capacity_bytes": 1e15,
                                           "read_bytes_per_s": 100e9, "write_bytes_per_s": 100e9,
                                           "access": "read-write", "endurance": {"tbw": 100_000}}]}))
    args = ["estimate", str(cfg), "--params", "1e9", "--hardware", str(hw), "--seq-len", "1024",
            "--step-time", "10", "--save-dir", "/lustre/ck", "--save-interval", "600"]
    p = run_cli([*args, "--format", "json"])
    assert p.returncode in (0, 1), p.stderr
    d = json.loads(p.stdout)
    ln = next(x for x in d["movement"]["endurance"] if x["tier"] == "lustre")
    assert ln["write_bytes_per_step"] == pytest.approx(16 * 1e9 / 4, rel=1e-4)
    swap = ln["write_bytes_per_step"] * 8640
    st = d["checkpoint"]["storage"]
    saves = st["bytes_written_per_save"] * 144
    assert ln["swap_bytes_per_day"] == pytest.approx(swap) and ln["checkpoint_bytes_per_day"] == pytest.approx(saves)
    assert ln["write_bytes_per_day"] == pytest.approx(swap + saves)
    assert ln["days_of_life"] == pytest.approx(1e17 / (swap + saves), rel=1e-9)
    assert st["bytes_written_per_day"] == pytest.approx(swap + saves) and st["days_of_life"] == pytest.approx(
        ln["days_of_life"], rel=1e-9)
    text = run_cli(args, env={"COLUMNS": "400"}).stdout
    assert "of checkpoint saves to /lustre/ck on the same tier" in text
    ck = run_cli(["checkpoint", *args[1:]], env={"COLUMNS": "400"})
    assert ck.returncode == 0, ck.stderr
    assert " of the NVMe swap (/lustre/swap), which writes to the same tier)" in ck.stdout
    # without --save-dir: the swap alone, as before
    alone = json.loads(run_cli([*args[:-4], "--format", "json"]).stdout)
    ln0 = next(x for x in alone["movement"]["endurance"] if x["tier"] == "lustre")
    assert ln0["write_bytes_per_day"] == pytest.approx(swap) and ln0["checkpoint_bytes_per_day"] is None


def test_estimate_save_interval_without_save_dir_is_one_line(tmp_path):
    from tests.conftest import run_cli
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}))
    p = run_cli(["estimate", str(cfg), "--params", "1e9", "--save-interval", "600"])
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [
        "ds-advisor: estimate: --save-interval: the saves' writes per day need --save-dir (the tier they go to) "
        "(see ds-advisor estimate --help)"]


def test_T002_counts_checkpoint_saves_on_the_swap_tier(tmp_path):
    """T002 under estimate --save-dir on the swap's tier takes the tier's whole per-day writes.
    By hand: ZeRO-3 optimizer swap of 1e9 parameters over 32 ranks (4 nodes x 8) writes the fp32
    master, exp_avg, exp_avg_sq and fp32 gradient, 16 B x 1e9 / 4 per node per step, x 8,640
    steps/day at 10 s = 3.456e13 B/day; a save writes each rank's optimizer-state shard (fp32
    master and two moments, 12 B per element; zero/stage3.py _save_zero_checkpoint), the busiest
    node 12 B x 1e9 / 4 = 3e9 B, x 1,440 saves/day at 60 s = 4.32e12 B/day. A drive rated
    13,824 TBW lasts 400 days under the swap alone (no T002: over a year) and 355.6 under both
    (T002, naming both parts), the figure estimate's endurance line shows."""
    from tests.conftest import run_cli
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                               "optimizer": {"type": "AdamW"},
                               "zero_optimization": {"stage": 3, "offload_optimizer": {
                                   "device": "nvme", "nvme_path": "/lustre/swap"}}}))
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({"nodes": 4, "accelerators_per_node": 8, "host_memory_bytes": 1e12,
                              "accelerator": {"name": "toy", "memory_bytes": 8e10},
                              "storage": [{"name": "lustre", "mounts": ["/lustre"], "capacity_bytes": 1e15,
                                           "read_bytes_per_s": 100e9, "write_bytes_per_s": 100e9,
                                           "access": "read-write", "endurance": {"tbw": 13_824}}]}))
    base = ["estimate", str(cfg), "--params", "1e9", "--hardware", str(hw), "--seq-len", "1024",
            "--step-time", "10", "--format", "json"]
    alone = json.loads(run_cli(base).stdout)
    assert not [f for f in alone["findings"] if f["code"] == "T002"]
    ln0 = next(x for x in alone["movement"]["endurance"] if x["tier"] == "lustre")
    assert ln0["days_of_life"] == pytest.approx(1.3824e16 / 3.456e13, rel=1e-4)  # 400 days
    p = run_cli([*base, "--save-dir", "/lustre/ck", "--save-interval", "60"])
    assert p.returncode in (0, 1), p.stderr
    d = json.loads(p.stdout)
    (f,) = [f for f in d["findings"] if f["code"] == "T002"]
    swap, saves = 16e9 / 4 * 8640, 12e9 / 4 * 1440
    assert f["data"]["swap_bytes_per_day"] == pytest.approx(swap, rel=1e-4)
    assert f["data"]["checkpoint_bytes_per_day"] == pytest.approx(saves, rel=1e-4)
    assert f["data"]["bytes_written_per_day"] == pytest.approx(swap + saves, rel=1e-4)
    assert f["data"]["days_of_life"] == pytest.approx(1.3824e16 / (swap + saves), rel=1e-4)  # 355.6 days
    ln = next(x for x in d["movement"]["endurance"] if x["tier"] == "lustre")
    assert f["data"]["bytes_written_per_day"] == ln["write_bytes_per_day"]
    assert f["data"]["days_of_life"] == ln["days_of_life"]
    assert "of checkpoint saves to /lustre/ck, on the same tier" in f["message"]
    # saves on another path no tier holds: the swap alone, no T002
    other = json.loads(run_cli([*base, "--save-dir", "/home/ck", "--save-interval", "60"]).stdout)
    assert not [f for f in other["findings"] if f["code"] == "T002"]
