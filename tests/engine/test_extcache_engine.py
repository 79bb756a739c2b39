"""A folder seeded from the cache of finished op builds (advisor/engine/extcache.py) loads
DeepSpeed's cpu_adam op without compiling: DeepSpeed's OpBuilder.jit_load runs
torch.utils.cpp_extension.load, which runs ninja in <TORCH_EXTENSIONS_DIR>/cpu_adam/; in the copy
ninja finds nothing to do (no file of the folder is rewritten) and torch loads the copied .so."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import run_group

pytestmark = pytest.mark.engine

_LOAD = """
import os
os.environ.setdefault("DS_ACCELERATOR", "cpu")
from deepspeed.ops.op_builder import CPUAdamBuilder
m = CPUAdamBuilder().load(verbose=True)
print("loaded", m.__file__)
"""


def _load(ext_dir: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=ext_dir, DS_ACCELERATOR=os.environ.get("DS_ACCELERATOR", "cpu"))
    return run_group([sys.executable, "-c", _LOAD], 1200, env=env)


def _files(d: str) -> dict[str, int]:
    return {n: os.stat(os.path.join(d, n)).st_mtime_ns for n in os.listdir(d)}


def test_a_seeded_folder_loads_cpu_adam_without_compiling(run_extensions_dir, tmp_path):
    from advisor.engine import extcache

    if not extcache.is_run_dir(run_extensions_dir or ""):
        pytest.skip("TORCH_EXTENSIONS_DIR is set by the user: this session uses no cache of builds")
    p = _load(run_extensions_dir)  # built here unless the cache already held it (then loaded)
    assert p.returncode == 0 and "loaded" in p.stdout, p.stderr[-2000:]
    extcache.publish(run_extensions_dir)

    seeded = str(tmp_path / "ext")
    assert "cpu_adam" in extcache.new_run_dir(seeded, dict(os.environ, DS_ACCELERATOR="cpu"))
    op = os.path.join(seeded, "cpu_adam")
    before = _files(op)
    p = _load(seeded)
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"loaded {os.path.join(op, 'cpu_adam.so')}" in p.stdout, p.stdout[-2000:]
    out = p.stdout + p.stderr
    assert "ninja: no work to do" in out and "Building extension module" not in out, out[-2000:]
    after = _files(op)
    assert {n: after.get(n) for n in before} == before  # no object or library rewritten
    assert set(after) - set(before) == set()  # no new .o: nothing compiled
