"""The step-time model (advisor.ledger.steptime) against hand-computed cases: a ring all-gather,
the exposed part of an overlapped transfer, the critical path of an NVMe-offloaded step, and the
CPU optimizer term generate now ranks by (issue 23)."""

from __future__ import annotations

import pytest

from advisor.cluster.hardware import from_dict, resolve_hardware
from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan
from advisor.ledger.steptime import ring_seconds, step_time, window
from advisor.model.inventory import Inventory, TensorSpec

N = 4_194_304  # 2^22 elements: a multiple of every aio alignment, 16 MiB in fp32 (swappable)


def test_ring_all_gather_by_hand():
    # 8 GB gathered over 8 ranks at 100 GB/s: each rank sends 7/8 x 8 GB = 7 GB -> 0.07 s
    assert ring_seconds("all_gather", 8e9, 8, 100e9) == pytest.approx(0.07)
    assert ring_seconds("reduce_scatter", 8e9, 8, 100e9) == pytest.approx(0.07)
    # all-reduce = reduce-scatter + all-gather: 0.14 s; one rank moves nothing
    assert ring_seconds("all_reduce", 8e9, 8, 100e9) == pytest.approx(0.14)
    assert ring_seconds("all_gather", 8e9, 1, 100e9) == 0
    with pytest.raises(ValueError):
        ring_seconds("broadcast", 1, 2, 1)


def test_exposed_part_under_overlap_by_hand():
    # 1.0 s of backward compute with 1.5 s of reduce-scatter and 0.4 s of PCIe copies alongside:
    # the window lasts 1.5 s; 0.5 s of the network is exposed, nothing of PCIe
    w, exposed = window(1.0, {"network": 1.5, "pcie": 0.4})
    assert w == 1.5
    assert exposed == {"network": pytest.approx(0.5), "pcie": 0.0}


def _hw() -> object:
    return from_dict({"nodes": 1, "accelerators_per_node": 1, "host_memory_bandwidth_bytes_per_s": 1e10,
                      "accelerator": {"name": "toy", "memory_bytes": 1e11, "peak_bf16_flops": 1e12,
                                      "host_link": {"bytes_per_s": 1e10}},
                      "storage": [{"name": "n", "mounts": ["/nvme"], "capacity_bytes": 1e13, "read_bytes_per_s": 1e9,
                                   "write_bytes_per_s": 1e9, "access": "read-write"}]})


def _nvme_plan(pipeline: bool) -> Plan:
    inv = Inventory("one", [TensorSpec("w", (N,), trainable=True)])
    raw = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme",
                                                                   "pipeline_read": pipeline,
                                                                   "pipeline_write": pipeline}}}
    return Plan(effective_config(raw), inv, Cluster(world_size=1, gpus_per_node=1))


@pytest.mark.parametrize("pipeline", [True, False])
def test_critical_path_of_an_nvme_offloaded_step_by_hand(pipeline):
    # One rank, one 2^22-element tensor, ZeRO-3 with the optimizer swapped to NVMe, 1,000 tokens:
    # compute 6 N T / (1e12 x 0.4) = 0.06291 s (forward 1/3, backward 2/3);
    # PCIe in backward (bf16 grads to host and back 2N + 2N, fp32 grad 4N = 8N B at 1e10 B/s =
    #   3.4 ms) hides behind 42 ms of backward; the 16-bit partitions back after the step (2N B) are
    #   synchronous: 0.839 ms;
    # NVMe at 1e9 B/s: the step reads master + 2 moments + the fp32 grad (16N B) and writes master
    #   + 2 moments (12N B): 28N / 1e9 = 0.11744 s; the grad write at the boundary (4N B) is
    #   synchronous: 16.8 ms;
    # CPU Adam: N x (28 + 4 + 2) B / 1e10 B/s = 14.3 ms.
    # Pipelined: step = max(CPU, NVMe swap); not pipelined: their sum.
    st = step_time(_nvme_plan(pipeline), _hw(), seq_len=1000)
    compute = 6 * N * 1000 / 4e11
    swap = 28 * N / 1e9
    cpu = 34 * N / 1e10
    sync = 4 * N / 1e9 + 2 * N / 1e10
    step = max(cpu, swap) if pipeline else cpu + swap
    assert st.total == pytest.approx(compute + step + sync, rel=1e-9)
    exp = st.by_resource()
    assert exp["host_memory"] == pytest.approx(cpu)
    assert exp["pcie"] == pytest.approx(2 * N / 1e10)
    assert exp["nvme"] == pytest.approx(swap - cpu + 4 * N / 1e9 if pipeline else swap + 4 * N / 1e9)
    assert not st.unknown


def test_cpu_optimizer_unknown_without_host_bandwidth():
    hw = from_dict({"nodes": 1, "accelerators_per_node": 1,
                    "accelerator": {"name": "toy", "memory_bytes": 1e11, "peak_bf16_flops": 1e12}})
    st = step_time(_nvme_plan(True), hw, seq_len=1000)
    assert any("cpu_optimizer" in u for u in st.unknown)


def _search(nodes: int):
    from advisor.model.specs import resolve_model
    from advisor.views import generate as gen
    inv = resolve_model("llama-3-70b")
    # ZeRO-Offload's CPU step against ZeRO-3 without offload: data parallelism only
    req = gen.Request(global_batch=256, seq_len=4096, nodes=nodes, gpus_per_node=8, model_parallel=False)
    return inv, gen.search(inv, resolve_hardware(f"dgx-h100:{nodes}"), req)


def test_70b_on_4_nodes_optimizer_offload_pays_its_cpu_step():
    # ZeRO-3, optimizer on the CPU, 32 ranks: each rank updates N/32 elements, streaming 34 B each
    # (Adam kernel 28 B + 16-bit copy 6 B); 8 ranks share the node's 614.4 GB/s (2 x 8 DDR5-4800
    # channels): N/32 x 34 x 8 / 614.4e9 s.
    inv, res = _search(4)
    off = [c for c in res.ranked if c.combo.offload_optimizer == "cpu"]
    none = [c for c in res.ranked if c.combo.offload_optimizer == "none"]
    assert off and none
    want = inv.numel / 32 * 34 * 8 / 614.4e9
    for c in off:
        assert c.parts["cpu_optimizer"] == pytest.approx(want, rel=2e-3)
    # the CPU step is exposed: it adds to the step beside the compute (recompute included)
    first = next(c for c in res.ranked if c.combo.offload_optimizer == "cpu" and c.combo.offload_param == "none")
    assert first.step_time_s >= first.parts["compute"] + 0.9 * want
    assert "CPU optimizer step" not in first.why or "GiB/s host memory" in first.why  # one unit system
    # same micro-batch and parameter placement: outside compute, the offloaded plan is slower by at
    # least its CPU step (its compute may be smaller: the memory the offload frees lets generate
    # checkpoint fewer layers, so it recomputes less)
    for c in off:
        twin = [d for d in none if (d.micro, d.combo.offload_param) == (c.micro, c.combo.offload_param)]
        for d in twin:
            assert c.step_time_s - c.parts["compute"] >= d.step_time_s - d.parts["compute"] + 0.9 * want
            assert c.parts["compute"] <= d.parts["compute"]


def test_70b_on_2_nodes_step_includes_cpu_optimizer():
    inv, res = _search(2)
    best = res.best
    assert best.combo.offload_optimizer == "cpu"
    want = inv.numel / 16 * 34 * 8 / 614.4e9
    assert best.parts["cpu_optimizer"] == pytest.approx(want, rel=2e-3)
    assert best.step_time_s >= best.parts["compute"] + want


@pytest.mark.parametrize("units,base", [("GiB", 2**30), ("GB", 1e9)])
def test_generate_why_names_the_cpu_step_in_the_tables_units(units, base):
    """A plan slower by its CPU optimizer step says how much it streams: the candidate's bytes per
    rank and bytes/s per rank (cpu_optimizer, by hand above) / 2^30 or / 1e9, as the table's units."""
    from advisor.views.generate import table_text
    inv, res = _search(4)
    text = table_text(res, top=len(res.ranked), units=units)
    shown = [c for c in res.ranked if c.why.startswith("+") and "CPU optimizer step (" in c.why]
    assert shown, [c.why for c in res.ranked]
    for c in shown:
        co = c.cpu_optimizer
        want = (f"{co['cpu_optimizer_bytes_per_rank'] / base:,.1f} {units} per rank at "
                f"{co['cpu_optimizer_bytes_per_s_per_rank'] / base:,.1f} {units}/s host memory per rank")
        assert want in text, (want, text)
    assert ("GB/s" if units == "GiB" else "GiB/s") not in text


def _hw_aio(aio) -> object:
    tier = {"name": "n", "mounts": ["/nvme"], "capacity_bytes": 1e13, "read_bytes_per_s": 1e9,
            "write_bytes_per_s": 1e9, "access": "read-write"}
    if aio is not None:
        tier["aio"] = aio
    return from_dict({"nodes": 1, "accelerators_per_node": 1, "host_memory_bandwidth_bytes_per_s": 1e10,
                      "accelerator": {"name": "toy", "memory_bytes": 1e11, "peak_bf16_flops": 1e12,
                                      "host_link": {"bytes_per_s": 1e10}},
                      "storage": [tier]})


def test_nvme_tier_measured_at_the_configs_aio_settings():
    """The NVMe seconds divide by the tier's figures; whether those hold at the config's aio
    settings (DeepSpeed's defaults: runtime/swap_tensor/constants.py block_size 1048576,
    queue_depth 8, intra_op_parallelism 1) is said per tier, and a mismatch is printed."""
    from advisor.ledger.steptime import breakdown_lines
    plan = _nvme_plan(True)
    same = step_time(plan, _hw_aio({"block_size": 1048576, "queue_depth": 8, "intra_op_parallelism": 1}), seq_len=1000)
    assert same.assumptions["nvme_aio"] == {"n": "measured at the config's aio settings"}
    other = step_time(plan, _hw_aio({"queue_depth": 32, "block_size": 1048576}), seq_len=1000)
    note = other.assumptions["nvme_aio"]["n"]
    assert "queue_depth 8 (measured at 32)" in note and "block_size" not in note
    assert any("NVMe tier n: measured at other aio settings" in ln for ln in breakdown_lines(other))
    sheet = step_time(plan, _hw_aio(None), seq_len=1000)
    assert "not measured at the config's aio settings (block_size 1048576, queue_depth 8" in sheet.assumptions["nvme_aio"]["n"]
    # the seconds themselves are the tier's figures in every case (the note does not rescale them)
    assert same.total == other.total == sheet.total


@pytest.mark.parametrize("aio,msg", [({}, "expected at least one of"), ({"queue_depth": 0}, "queue_depth: expected a positive"),
                                     ({"queue_depth": True}, "positive integer"), ({"depth": 8}, "unknown key")])
def test_tier_aio_spec_errors_are_one_line(aio, msg):
    from advisor.errors import HardwareSpecError
    with pytest.raises(HardwareSpecError, match=msg) as ei:
        _hw_aio(aio)
    assert "/storage/0/aio" in str(ei.value) and "\n" not in str(ei.value)


def test_70b_tied_optimizer_offload_says_what_its_cpu_step_costs_and_what_pays_for_it():
    """On 4 DGX-H100 nodes an optimizer-offloaded plan within 3 % of the fastest is no plain
    "tie": its why names its CPU step (N/32 x 34 B per rank at 614.4e9 / 8 B/s per rank, by hand
    as above) and, when it recomputes less than the best plan, the compute it saves."""
    inv, res = _search(4)
    tol = res.request.tie_tolerance
    fastest = min(c.step_time_s for c in res.ranked)
    best = res.ranked[0]
    tied = [c for c in res.ranked[1:] if c.step_time_s <= fastest * (1 + tol) and c.combo.offload_optimizer == "cpu"
            and c.why.startswith("tie")]
    assert tied
    want = inv.numel / 32 * 34 * 8 / 614.4e9
    for c in tied:
        assert c.why.startswith(f"tie; offloads more: +{want:,.2f} s CPU optimizer step ("), c.why
        saved = best.parts["compute"] - c.parts["compute"]
        if saved > 0.005:
            assert f"{saved:,.2f} s less compute" in c.why
