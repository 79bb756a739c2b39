"""Engine proof of rule M001 (NVMe parameter swap buffer smaller than a partition).

DeepSpeed 0.19.8 ``runtime/swap_tensor/partitioned_param_swapper.py``
``AsyncPartitionedParameterSwapper.get_buffer`` asserts ``numel <= self.elements_per_buffer``
("More elements {numel} than buffer size {elements_per_buffer}") when ZeRO-3 partitions a
parameter whose partition is large enough to swap (``swappable_tensor``: numel x D >=
max(1 MiB, aio.block_size)) with ``offload_param.device: nvme``; ``elements_per_buffer`` is
``offload_param.buffer_size``. It runs inside ``deepspeed.initialize``.

The model is the reference's NVMe MLP (1024 -> 1031 -> 1029, bf16): its largest tensor is the
second weight, 1029 x 1031 = 1,060,899 elements (2,121,798 B, above the 1 MiB threshold), at
world size 1 its whole partition; the first one over 1,000,000 in parameter order is the first
weight, 1031 x 1024 = 1,055,744. With ``buffer_size`` 1,000,000 the real engine must refuse the
config with the assertion naming 1,055,744 (measured: it does) and M001 must flag it, naming the
same number; with the buffer size M001 computes, the engine
must initialise and train a step and M001 must be silent.

Skips when torch, deepspeed or a working libaio (async_io op) are missing.
"""

from __future__ import annotations

import json
import os
import socket
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
WIDTHS = [1024, 1031, 1029]
#: by hand: nn.Linear(1024, 1031).weight is (1031, 1024), the first parameter and the first
#: partition get_buffer refuses; nn.Linear(1031, 1029).weight (1029, 1031) is the largest, which
#: the fix must hold
FIRST = 1031 * 1024
LARGEST = 1029 * 1031
TOO_SMALL = 1_000_000


def _aio_ok() -> bool:
    try:
        from deepspeed.ops.op_builder import AsyncIOBuilder
        return bool(AsyncIOBuilder().is_compatible(verbose=False))
    except Exception:
        return False


def _config(nvme: str, buffer_size: int) -> dict:
    return {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": nvme,
                                                               "buffer_count": 5, "buffer_size": buffer_size}}}


def _inventory() -> Inventory:
    ts = []
    for li, (a, b) in enumerate(zip(WIDTHS[:-1], WIDTHS[1:])):
        ts += [TensorSpec(f"{2 * li}.weight", (b, a)), TensorSpec(f"{2 * li}.bias", (b,))]
    return Inventory(name="mlp-1024-1031-1029", tensors=ts)


def _m001(cfg: dict) -> list:
    loaded = parse_text(json.dumps(cfg), "m001.json")
    return lint_config(loaded, world_size=1, world_size_source="--world-size", inventory=_inventory(),
                       select={"M001"})


def _launch(cell: dict, base: Path, stop=None) -> dict:
    """One cell in its own single-rank torch.distributed.run launch (a refused initialize leaves
    nothing behind for the other cell), ended whole when ``stop`` is set (:func:`_both`); the worker's record
    for rank 0."""
    job = base / f"{cell['id']}.job.json"
    job.write_text(json.dumps({"cells": [cell]}))
    out = base / f"out_{cell['id']}"
    out.mkdir()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "1",
           "--master_addr", "127.0.0.1", "--master_port", str(port), str(HERE / "nvme_traffic_worker.py"), str(job),
           str(out)]
    from advisor.engine.measure import run_process_group
    log_path = out / "launch.log"
    with open(log_path, "w") as fh:  # its own process group, ended on timeout or Ctrl-C
        rc = run_process_group(cmd, 900, stop=stop, stdout=fh, stderr=subprocess.STDOUT, env=env)
    f = out / f"{cell['id']}.rank0.json"
    log = log_path.read_text(errors="replace")[-6000:] if rc is not None else "timed out after 900 s"
    assert f.exists(), f"no result for {cell['id']} (rc={rc}):\n{log}"
    return json.loads(f.read_text())


@pytest.fixture(scope="module")
def fix_value() -> int:
    bad = _m001(_config("/nvme", TOO_SMALL))
    assert [f.pointer for f in bad] == ["/zero_optimization/offload_param/buffer_size"], [f.to_dict() for f in bad]
    assert bad[0].data["largest_partition"] == LARGEST and bad[0].data["first_refused"] == FIRST
    assert f"'More elements {FIRST} than buffer size {TOO_SMALL}'" in bad[0].message
    return bad[0].data["suggested_buffer_size"]


@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory, fix_value):
    if not _aio_ok():
        pytest.skip("DeepSpeed async_io op unavailable (libaio-dev missing?)")
    base = tmp_path_factory.mktemp("nvme_param_buffer")

    def run(cid_size, stop):  # one rank each: both at once on two cores (as chain_runs)
        cid, size = cid_size
        nv = base / f"nvme_{cid}"
        nv.mkdir()
        return cid, _launch({"id": cid, "nvme_path": str(nv), "steps": 1, "widths": WIDTHS,
                             "config": _config(str(nv), size)}, base, stop)

    return _both(run, (("too_small", TOO_SMALL), ("fixed", fix_value)))


def _both(fn, args) -> dict:
    """``dict(fn(a, stop) for a in args)``, two at a time (each run is one single-rank process, so two side by
    side use both cores of a 2-core runner), every launch ended on Ctrl-C or the first failure:
    ``parity.side_by_side``."""
    from parity import side_by_side

    return dict(side_by_side(fn, args, 2))


def test_engine_refuses_what_m001_flags(engine_runs):
    d = engine_runs["too_small"]
    assert "error" in d, "DeepSpeed initialised a buffer_size M001 says it refuses"
    assert f"More elements {FIRST} than buffer size {TOO_SMALL}" in d["error"], d.get("traceback")


def test_engine_accepts_m001s_computed_fix(engine_runs, fix_value):
    assert fix_value >= LARGEST
    d = engine_runs["fixed"]
    assert "error" not in d, f"{d.get('error')}\n{d.get('traceback')}"
    assert len(d["steps"]) == 1
    assert _m001(_config("/nvme", fix_value)) == []


# ---------------------------------------------------------------------------------------------
# M004: a module whose own NVMe-resident partitions outnumber offload_param.buffer_count

TWO_NUMEL = 1031 * 1024  # each of the module's two weights (2,111,488 B in bf16 >= 1 MiB: swapped)


def _m004_config(nvme: str, buffer_count: int) -> dict:
    return {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": 3, "offload_param": {
                "device": "nvme", "nvme_path": nvme, "buffer_count": buffer_count, "buffer_size": 1_100_000}}}


def _m004_inventory() -> Inventory:
    return Inventory(name="two-frozen", tensors=[TensorSpec("m.a", (1031, 1024), trainable=False),
                                                 TensorSpec("m.b", (1031, 1024), trainable=False),
                                                 TensorSpec("head.weight", (8, 1031)), TensorSpec("head.bias", (8,))])


def _m004(cfg: dict, inventory: Inventory | None = None) -> list:
    """M004's findings for ``cfg`` on ``inventory`` (default: the two-frozen-weight module)."""
    loaded = parse_text(json.dumps(cfg), "m004.json")
    return lint_config(loaded, world_size=1, world_size_source="--world-size",
                       inventory=inventory or _m004_inventory(), select={"M004"})


def _run_m004_worker(base, cid: str, buffer_count: int, timeout: int, stop=None, **job) -> dict:
    """One m004_worker.py run of :func:`_m004_config` with ``buffer_count`` (its NVMe folder made
    under ``base``) and the worker's ``job`` keys, in its own process group (ended on timeout, or when
    ``stop`` is set: :func:`_both`); the worker's record."""
    from advisor.engine.measure import run_process_group
    nv = base / f"nvme_{cid}"
    nv.mkdir()
    jpath, out = base / f"{cid}.json", base / f"{cid}.out.json"
    jpath.write_text(json.dumps({"config": _m004_config(str(nv), buffer_count), **job}))
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    with open(base / f"{cid}.log", "w") as fh:
        rc = run_process_group([sys.executable, str(HERE / "m004_worker.py"), str(jpath), str(out)], timeout,
                               stop=stop, stdout=fh, stderr=subprocess.STDOUT, env=env)
    assert out.exists(), f"{cid}: no result (rc={rc}): {(base / f'{cid}.log').read_text()[-3000:]}"
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def m004_runs(tmp_path_factory):
    if not _aio_ok():
        pytest.skip("DeepSpeed async_io op unavailable (libaio-dev missing?)")
    base = tmp_path_factory.mktemp("m004")
    bad = _m004(_m004_config("/nvme", 1))
    assert [(f.severity, f.data["partitions"]) for f in bad] == [("error", 2)], [f.to_dict() for f in bad]
    fix = int(bad[0].data["set"][0].rsplit("=", 1)[1])
    return {"fix": fix, **_both(lambda a, stop: (a[0], _run_m004_worker(base, a[0], a[1], 900, stop, steps=1,
                                                                        frozen=True)),
                                (("one_buffer", 1), ("fixed", fix)))}


def test_engine_refuses_a_module_with_more_nvme_partitions_than_buffers(m004_runs):
    d = m004_runs["one_buffer"]
    assert "error" in d, "DeepSpeed ran a module with 2 NVMe partitions on 1 swap buffer"
    # swap_in (partitioned_param_swapper.py): both frozen weights of module m are swapped in together
    assert "Not enough buffers 1 for swapping 2" in d["error"], d.get("traceback")


def test_engine_accepts_m004s_buffer_count(m004_runs):
    assert m004_runs["fix"] == 2
    d = m004_runs["fixed"]
    assert "error" not in d, f"{d.get('error')}\n{d.get('traceback')}"
    assert _m004(_m004_config("/nvme", 2)) == []


# ---------------------------------------------------------------------------------------------
# M004, partitions held across modules: stage3_max_reuse_distance keeps a module's NVMe
# partitions in swap buffers for its reuse in backward (partitioned_param_coordinator.py
# __params_to_release), from the second step (the first with a complete trace)

CHAIN = 6  # m004_worker's chain: trainable scale 'pre', 6 x one frozen 1024 x 1024 weight, a head


def _chain_inventory() -> Inventory:
    return Inventory(name="chain", tensors=[TensorSpec("pre.weight", (1024,))]
                     + [TensorSpec(f"layers.{i}.w", (1024, 1024), trainable=False) for i in range(CHAIN)]
                     + [TensorSpec("head.weight", (8, 1024)), TensorSpec("head.bias", (8,))])


@pytest.fixture(scope="module")
def chain_runs(tmp_path_factory):
    if not _aio_ok():
        pytest.skip("DeepSpeed async_io op unavailable (libaio-dev missing?)")
    base = tmp_path_factory.mktemp("m004_chain")
    bad = _m004(_m004_config("/nvme", 2), _chain_inventory())
    assert [(f.severity, f.data["module"], f.data["held"], f.data["partitions"]) for f in bad] == \
        [("error", "layers.2", 2, CHAIN)], [f.to_dict() for f in bad]
    assert "'Not enough buffers 0 for swapping 1'" in bad[0].message
    fix = int(bad[0].data["set"][0].rsplit("=", 1)[1])
    return {"fix": fix, **_both(lambda a, stop: (a[0], _run_m004_worker(base, a[0], a[1], 1500, stop, steps=3,
                                                                        chain=CHAIN)),
                                (("two_buffers", 2), ("fixed", fix)))}


def test_engine_runs_out_of_buffers_held_for_reuse(chain_runs):
    d = chain_runs["two_buffers"]
    assert "error" in d, "DeepSpeed ran 6 reused NVMe partitions through 2 swap buffers"
    # step 1 records the trace and releases every module; step 2 keeps them for backward
    assert d["steps_done"] == 1, d
    assert "Not enough buffers 0 for swapping 1" in d["error"], d.get("traceback")


def test_engine_trains_with_m004s_held_buffer_count(chain_runs):
    assert chain_runs["fix"] == CHAIN
    d = chain_runs["fixed"]
    assert "error" not in d, f"{d.get('error')}\n{d.get('traceback')}"
    assert d["steps_done"] == 3
    assert _m004(_m004_config("/nvme", CHAIN), _chain_inventory()) == []


# ---------------------------------------------------------------------------------------------
# M004, both at once: a module's own partitions outnumber the buffers *and* an earlier module's
# partition is held for reuse. The computed fix must cover both (issue 19: it proposed 2, and the
# re-lint then asked for 3): 1 held + 2 own = 3.


def _mixed_inventory() -> Inventory:
    return Inventory(name="mixed", tensors=[TensorSpec("pre.weight", (1024,)),
                                            TensorSpec("layers.0.w", (1024, 1024), trainable=False),
                                            TensorSpec("m.a", (1031, 1024), trainable=False),
                                            TensorSpec("m.b", (1031, 1024), trainable=False),
                                            TensorSpec("head.weight", (8, 1031)), TensorSpec("head.bias", (8,))])


@pytest.fixture(scope="module")
def mixed_runs(tmp_path_factory):
    if not _aio_ok():
        pytest.skip("DeepSpeed async_io op unavailable (libaio-dev missing?)")
    base = tmp_path_factory.mktemp("m004_mixed")
    bad = _m004(_m004_config("/nvme", 1), _mixed_inventory())
    assert [(f.severity, f.data["partitions"]) for f in bad] == [("error", 2)], [f.to_dict() for f in bad]
    fix = int(bad[0].data["set"][0].rsplit("=", 1)[1])
    # own_only, 2: the module's own partitions, the old fix
    return {"fix": fix, **_both(lambda a, stop: (a[0], _run_m004_worker(base, a[0], a[1], 1500, stop, steps=3,
                                                                        mixed=True, frozen=True)),
                                (("own_only", 2), ("fixed", fix)))}


def test_engine_needs_the_held_buffer_too(mixed_runs):
    d = mixed_runs["own_only"]
    assert "error" in d, "DeepSpeed ran 1 held + 2 own NVMe partitions through 2 swap buffers"
    # the engine counts the buffers left after the held one and the first own partition
    assert d["steps_done"] == 1 and "Not enough buffers 0 for swapping 1" in d["error"], d


def test_engine_trains_with_m004s_computed_fix_covering_both(mixed_runs):
    assert mixed_runs["fix"] == 3
    d = mixed_runs["fixed"]
    assert "error" not in d, f"{d.get('error')}\n{d.get('traceback')}"
    assert d["steps_done"] == 3
    assert _m004(_m004_config("/nvme", 3), _mixed_inventory()) == []
