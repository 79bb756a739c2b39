"""The per-run torch-extensions folder and its cache of finished op builds
(advisor/engine/extcache.py), with the real ``ninja`` that torch.utils.cpp_extension runs in an op
folder (a copy-rule build.ninja stands in for a compile: same up-to-date logic, mtimes in
.ninja_log and the command hash). No torch or deepspeed needed; the engine proof (a seeded
cpu_adam / async_io loads without compiling) is tests/engine/test_extcache_engine.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from advisor.engine import extcache

NINJA = shutil.which("ninja")
needs_ninja = pytest.mark.skipif(NINJA is None, reason="ninja is not installed (pip install ninja)")

# The layout torch writes in <TORCH_EXTENSIONS_DIR>/<op>/: relative outputs, an absolute source.
_BUILD = """ninja_required_version = 1.3
rule compile
  command = cp $in $out
rule link
  command = cat $in > $out
build {op}.o: compile {src}
build {op}.so: link {op}.o
default {op}.so
"""


def _build(op_dir, src):
    """Write build.ninja for ``op`` (only when its text changes) and run ninja there, as torch's
    _jit_compile / _write_ninja_file_and_build_library does."""
    os.makedirs(op_dir, exist_ok=True)
    op = os.path.basename(op_dir)
    path, text = os.path.join(op_dir, "build.ninja"), _BUILD.format(op=op, src=src)
    if not os.path.exists(path) or open(path).read() != text:  # torch's _maybe_write: only when changed
        with open(path, "w") as fh:
            fh.write(text)
    subprocess.run([NINJA], cwd=op_dir, check=True, capture_output=True)


def _dry(op_dir):
    return subprocess.run([NINJA, "-n"], cwd=op_dir, capture_output=True, text=True).stdout


@pytest.fixture
def env(tmp_path):
    return {"DS_ADVISOR_EXT_CACHE": str(tmp_path / "cache"), "DS_ACCELERATOR": "cpu",
            "PATH": os.environ.get("PATH", "")}


def test_cache_dir_is_keyed_by_python_torch_deepspeed_and_accelerator(tmp_path, env):
    import sys
    from importlib import metadata

    def ver(p):
        try:
            return metadata.version(p)
        except metadata.PackageNotFoundError:
            return "none"
    key = (f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
           f"-torch{ver('torch')}-deepspeed{ver('deepspeed')}-cpu")
    assert extcache.cache_dir(env) == os.path.join(str(tmp_path / "cache"), key)
    home = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert extcache.cache_dir(home) == os.path.join(str(tmp_path / "xdg"), "ds-advisor", "torch_extensions",
                                                    key[:-len("cpu")] + "auto")


@needs_ninja
def test_a_published_build_seeds_a_fresh_folder_that_ninja_finds_up_to_date(tmp_path, env):
    src = tmp_path / "op.cpp"
    src.write_text("int x;\n")
    run1 = str(tmp_path / "run1")
    assert extcache.new_run_dir(run1, env) == []  # empty cache: nothing to copy in
    _build(os.path.join(run1, "myop"), str(src))
    assert extcache.publish(run1, env) == ["myop"]
    cached = os.path.join(extcache.cache_dir(env), "myop")
    assert not os.path.exists(os.path.join(cached, "lock"))
    assert [n for n in os.listdir(extcache.cache_dir(env)) if n.startswith(".")] == []  # no temporaries left
    assert extcache.publish(run1, env) == []  # the cache already holds this very build

    run2 = str(tmp_path / "run2")
    assert extcache.new_run_dir(run2, env) == ["myop"]
    op2 = os.path.join(run2, "myop")
    for n in os.listdir(op2):  # mtimes preserved to the nanosecond: ninja's log compares them
        assert os.stat(os.path.join(op2, n)).st_mtime_ns == os.stat(os.path.join(cached, n)).st_mtime_ns, n
    assert "no work to do" in _dry(op2)
    before = {n: os.stat(os.path.join(op2, n)).st_mtime_ns for n in os.listdir(op2)}
    _build(op2, str(src))  # what torch does on load: run ninja; nothing is rebuilt
    assert {n: os.stat(os.path.join(op2, n)).st_mtime_ns for n in os.listdir(op2) if n in before} == before

    # a plain copy (mtimes not kept) is rebuilt by ninja: the preservation is what makes the seed work
    plain = tmp_path / "plain"
    shutil.copytree(cached, plain, copy_function=shutil.copy)
    assert "no work to do" not in _dry(str(plain))


@needs_ninja
def test_unfinished_builds_are_not_published(tmp_path, env):
    src = tmp_path / "op.cpp"
    src.write_text("int x;\n")
    run = str(tmp_path / "run")
    extcache.new_run_dir(run, env)
    _build(os.path.join(run, "locked"), str(src))
    open(os.path.join(run, "locked", "lock"), "w").close()  # a build running (or interrupted)
    _build(os.path.join(run, "stale"), str(src))
    os.utime(src, ns=(os.stat(src).st_atime_ns, os.stat(src).st_mtime_ns + 10**9))
    os.makedirs(os.path.join(run, "noso"))
    open(os.path.join(run, "noso", "build.ninja"), "w").close()
    assert extcache.publish(run, env) == []
    assert extcache.cached_ops(env) == []


@needs_ninja
def test_a_rebuilt_op_replaces_the_cached_one_and_a_folder_the_user_set_is_never_published(tmp_path, env):
    src = tmp_path / "op.cpp"
    src.write_text("int x;\n")
    os.utime(src, (1e9, 1e9))  # old sources: the edit below is newer than every output
    run1 = str(tmp_path / "run1")
    extcache.new_run_dir(run1, env)
    _build(os.path.join(run1, "myop"), str(src))
    extcache.publish(run1, env)
    run2 = str(tmp_path / "run2")
    extcache.new_run_dir(run2, env)
    src.write_text("int y;\n")  # the sources changed (mtime now): ninja rebuilds in the run's folder
    _build(os.path.join(run2, "myop"), str(src))
    assert extcache.publish(run2, env) == ["myop"]
    with open(os.path.join(extcache.cache_dir(env), "myop", "myop.so")) as fh:
        assert fh.read() == "int y;\n"

    user = tmp_path / "user"  # not made by new_run_dir: no mark, nothing published from it
    _build(str(user / "other"), str(src))
    assert extcache.publish(str(user), env) == []
    assert extcache.cached_ops(env) == ["myop"]


def test_measure_builds_in_its_own_seeded_folder_and_ignores_locks_elsewhere(tmp_path, monkeypatch):
    """Without TORCH_EXTENSIONS_DIR, measure's launch gets a fresh folder inside its temp folder,
    seeded from the cache (DS_ADVISOR_EXT_CACHE), and says so before launching; a stale lock in
    torch's default folder no longer stops it (the launch itself mocked: no engine runs)."""
    import advisor.engine.measure as m

    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("DS_ADVISOR_EXT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    old = tmp_path / "xdg" / "torch_extensions" / "py311_cpu" / "cpu_adam" / "lock"
    old.parent.mkdir(parents=True)
    old.touch()
    os.utime(old, (0, 0))
    cached = tmp_path / "cache" / extcache.cache_key(dict(os.environ)) / "cpu_adam"
    cached.mkdir(parents=True)
    (cached / "cpu_adam.so").write_bytes(b"x")
    (tmp_path / "work").mkdir()
    seen = {}

    def launch(cmd, timeout_s, env=None, **kw):
        root = env["TORCH_EXTENSIONS_DIR"]
        seen.update(root=root, seeded=os.listdir(os.path.join(root, "cpu_adam")), own=extcache.is_run_dir(root))
        return 1

    got: list[str] = []
    monkeypatch.setattr(m, "run_process_group", launch)
    cell = {"id": "c", "config": {"train_micro_batch_size_per_gpu": 1}, "inventory": {"tensors": []}}
    with pytest.raises(m.MeasureError) as e:
        m.run_measure_many([cell], 1, workdir=str(tmp_path / "work"), progress=got.append)
    assert "stale" not in str(e.value)
    assert seen["own"] and seen["seeded"] == ["cpu_adam.so"]
    assert seen["root"].startswith(str(tmp_path / "work" / "ds-advisor-measure-"))
    assert got[0] == (f"building DeepSpeed's ops on first use (1-3 minutes per op, once) in this run's own folder "
                      f"{seen['root']}; finished builds are kept in {cached.parent}; copied in from there: cpu_adam")
    assert not os.path.exists(seen["root"])  # removed with the run's temp folder

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(old.parent.parent.parent))  # set by the user: checked
    with pytest.raises(m.MeasureError, match="stale torch-extensions build lock"):
        m.run_measure_many([cell], 1, workdir=str(tmp_path / "work"))


# --- build locks in a folder the user set (issue 15) ----------------------------------------------


def _lock(root, op):
    p = root / op / "lock"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("")
    return str(p)


def test_a_fresh_lock_with_no_build_in_its_folder_is_an_orphan_named_with_its_age_and_how_to_remove_it(tmp_path):
    lock = _lock(tmp_path, "deepspeed_shm_comm")  # a killed run's, seconds old: under the 10-minute stale mark
    os.utime(lock, (time.time() - 30, time.time() - 30))
    (found,) = extcache.build_locks(str(tmp_path))
    assert found[0] == lock and 29 <= found[1] < 600
    assert [p for p, _ in extcache.orphan_locks(str(tmp_path), samples=2, interval_s=0.05)] == [lock]
    msg = extcache.held_lock_message([(lock, 30.0)])
    assert lock in msg and "30 s old" in msg and f"rm {lock}" in msg and "\n" not in msg


def test_a_lock_whose_folder_a_build_runs_in_is_held_not_an_orphan(tmp_path):
    lock = _lock(tmp_path, "cpu_adam")
    # a stand-in for the baton holder's ninja: torch runs it with the op folder as its cwd
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=os.path.dirname(lock))
    try:
        deadline = time.time() + 10
        while not extcache.building_pids(os.path.dirname(lock)) and time.time() < deadline:
            time.sleep(0.05)
        assert p.pid in extcache.building_pids(os.path.dirname(lock))
        assert extcache.orphan_locks(str(tmp_path), samples=2, interval_s=0.05) == []
        # nor is it removed after a killed run: it is that build's
        assert extcache.remove_new_locks(str(tmp_path), set()) == [] and os.path.exists(lock)
    finally:
        p.kill()
        p.wait()


def test_a_killed_run_removes_the_locks_it_made_and_only_those(tmp_path):
    before = _lock(tmp_path, "async_io")
    mine = _lock(tmp_path / "py311_cpu", "deepspeed_shm_comm")
    assert extcache.remove_new_locks(str(tmp_path), {before}) == [mine]
    assert os.path.exists(before) and not os.path.exists(mine)


def _cells():
    return [{"id": "c", "config": {}, "inventory": {}}]


def test_measure_refuses_at_once_on_an_orphan_lock_in_the_folder_the_user_set(tmp_path, monkeypatch):
    from advisor.engine import measure
    lock = _lock(tmp_path / "ext", "deepspeed_shm_comm")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))

    def launch(*a, **k):
        raise AssertionError("launched although a lock no build holds was in the way")
    monkeypatch.setattr(measure, "run_process_group", launch)
    with pytest.raises(measure.MeasureError) as e:
        measure.run_measure_many(_cells(), 1, workdir=str(tmp_path), timeout_s=600)
    assert lock in str(e.value) and f"rm {lock}" in str(e.value)


def test_a_timed_out_measure_removes_the_lock_its_ranks_left(tmp_path, monkeypatch):
    from advisor.engine import measure
    ext = tmp_path / "ext"
    ext.mkdir()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(ext))
    made = []

    def launch(cmd, timeout_s, **kw):  # a rank took the shm_comm baton, then the launch timed out
        made.append(_lock(ext, "deepspeed_shm_comm"))
        return None
    monkeypatch.setattr(measure, "run_process_group", launch)
    with pytest.raises(measure.MeasureError) as e:
        measure.run_measure_many(_cells(), 1, workdir=str(tmp_path), timeout_s=600)
    assert made and not os.path.exists(made[0])
    assert "timed out" in str(e.value) and f"removed the build lock(s) this run left: {made[0]}" in str(e.value)


def test_a_launch_ended_on_timeout_removes_the_build_lock_it_left(tmp_path):
    """A launch ended by run_process_group (timeout) while it held an op build's lock leaves the lock behind, and
    every later build of that op in the same TORCH_EXTENSIONS_DIR would wait on it (torch/utils/file_baton.py
    FileBaton.wait): on a loaded machine the async_io probe's build outlived its 600 s and each NVMe engine test
    after it hung for its own timeout (2026-12-06). The ended launch's new lock goes, one that was there before it
    stays (it is not this launch's), and with clean_locks=False (measure.run, which names what it removes) none."""
    from advisor.engine.measure import run_process_group

    old = _lock(tmp_path, "cpu_adam")
    # a stand-in for a rank whose op build takes the baton (os.open O_CREAT | O_EXCL, file_baton.py) and is killed
    take = ("import os, sys, time; os.makedirs(sys.argv[1], exist_ok=True); "
            "os.close(os.open(os.path.join(sys.argv[1], 'lock'), os.O_CREAT | os.O_EXCL)); time.sleep(60)")
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(tmp_path))
    mine = tmp_path / "async_io" / "lock"
    assert run_process_group([sys.executable, "-c", take, str(mine.parent)], 3, grace_s=1, env=env) is None
    assert not mine.exists() and os.path.exists(old)
    assert run_process_group([sys.executable, "-c", take, str(mine.parent)], 3, grace_s=1, env=env,
                             clean_locks=False) is None
    assert mine.exists() and os.path.exists(old)
