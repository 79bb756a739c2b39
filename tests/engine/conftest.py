"""Engine tests: they run the real DeepSpeed engine (advisor.engine.measure) in subprocesses.

Skipped cleanly when torch or deepspeed is not installed. The whole parity matrix runs once per
session (one torch.distributed.run launch per batch of same-world-size cells, two launches at a
time); set ``DS_ADVISOR_PARITY_ONLY=<substring>`` to run only matching cells.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HAVE_ENGINE = all(importlib.util.find_spec(m) is not None for m in ("torch", "deepspeed"))


def pytest_collection_modifyitems(config, items):
    if HAVE_ENGINE:
        return
    skip = pytest.mark.skip(reason="torch and deepspeed are not importable (pip install -e '.[engine]')")
    for it in items:
        if "engine" in it.keywords:
            it.add_marker(skip)


_AIO_PROBE = """
import os
os.environ.setdefault("DS_ACCELERATOR", "cpu")
from deepspeed.ops.op_builder import AsyncIOBuilder
b = AsyncIOBuilder()
assert b.is_compatible(verbose=False), "async_io op not compatible (libaio missing?)"
b.load(verbose=False)
print("ok")
"""


@pytest.fixture(scope="session", autouse=True)
def run_extensions_dir():
    """This session's own TORCH_EXTENSIONS_DIR, inherited by every launch and worker it starts:
    a fresh folder seeded with the cache's finished DeepSpeed op builds (advisor/engine/extcache.py;
    ``DS_ADVISOR_EXT_CACHE`` moves the cache), so no build lock of another run can be in it and a
    cached op is loaded, not rebuilt; the ops built here are published to the cache after each
    launch and at the end. A TORCH_EXTENSIONS_DIR set by the user is used as it is. Yields the
    folder."""
    if not HAVE_ENGINE or os.environ.get("TORCH_EXTENSIONS_DIR"):
        yield os.environ.get("TORCH_EXTENSIONS_DIR")
        return
    import shutil
    import tempfile

    from advisor.engine import extcache

    root = tempfile.mkdtemp(prefix="ds-advisor-ext-")
    # the accelerator the launches use here: measure's CPU default on this machine, as the workers'
    extcache.new_run_dir(root, dict(os.environ, DS_ACCELERATOR=os.environ.get("DS_ACCELERATOR", "cpu")))
    os.environ["TORCH_EXTENSIONS_DIR"] = root
    try:
        yield root
    finally:
        del os.environ["TORCH_EXTENSIONS_DIR"]
        extcache.publish(root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def aio_available(run_extensions_dir) -> tuple[bool, str]:
    """(True, "") when DeepSpeed's async_io op builds here (needs libaio, Debian libaio-dev)."""
    if not HAVE_ENGINE:
        return False, "torch/deepspeed missing"
    from advisor.engine import extcache
    from advisor.engine.measure import run_process_group, stale_build_locks, stale_lock_message

    env = dict(os.environ, DS_ACCELERATOR=os.environ.get("DS_ACCELERATOR", "cpu"))
    locks = [] if extcache.is_run_dir(env.get("TORCH_EXTENSIONS_DIR", "")) else stale_build_locks(env)
    if locks:  # the build would wait on it forever (a stale async_io lock hung these tests 15 min)
        pytest.fail(stale_lock_message(locks))
    import tempfile
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        # its own process group, ended on timeout or Ctrl-C: no build left running behind the tests
        rc = run_process_group([sys.executable, "-c", _AIO_PROBE], 600, stdout=out, stderr=err, env=env)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if extcache.is_run_dir(env.get("TORCH_EXTENSIONS_DIR", "")):
        extcache.publish(env["TORCH_EXTENSIONS_DIR"])
    if rc is None:
        held = stale_build_locks(env, max_age_s=0)
        return False, "building the async_io op timed out" + (f" ({stale_lock_message(held)})" if held else "")
    if rc != 0 or "ok" not in stdout:
        return False, "DeepSpeed async_io op cannot be built: " + (stderr.strip().splitlines() or ["?"])[-1]
    return True, ""


def _needs_nvme(cell) -> bool:
    z = cell["config"].get("zero_optimization", {})
    return any(isinstance(z.get(k), dict) and z[k].get("device") == "nvme" and z.get("stage") == 3
               for k in ("offload_optimizer", "offload_param"))


@pytest.fixture(scope="session")
def matrix_run(aio_available, tmp_path_factory):
    """Run the parity matrix once: {"results": {id: {rank: record}}, "skipped": {id: reason}, ...}."""
    import parity
    cells = parity.matrix_cells()
    only = os.environ.get("DS_ADVISOR_PARITY_ONLY")
    if only:
        cells = [c for c in cells if only in c["id"]]
    skipped = {}
    ok, why = aio_available
    if not ok:
        skipped = {c["id"]: why for c in cells if _needs_nvme(c)}
        cells = [c for c in cells if c["id"] not in skipped]
    run = parity.run_matrix(cells, workdir=str(tmp_path_factory.mktemp("measure")), parallel=2)
    run["skipped"] = skipped
    return run
