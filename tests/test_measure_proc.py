"""measure leaves no process behind and does not hang on a stale torch-extensions build lock
(advisor.engine.measure.run_process_group, stale_build_locks). No torch or deepspeed needed."""

from __future__ import annotations

import os
import sys
import time

from advisor.engine.measure import run_process_group, stale_build_locks, stale_lock_message


def test_stale_build_lock_is_found_and_a_fresh_one_is_not(tmp_path):
    old = tmp_path / "py311_cpu" / "async_io" / "lock"
    old.parent.mkdir(parents=True)
    old.write_text("")
    t = time.time() - 20 * 60
    os.utime(old, (t, t))
    fresh = tmp_path / "py311_cpu" / "cpu_adam" / "lock"
    fresh.parent.mkdir(parents=True)
    fresh.write_text("")
    locks = stale_build_locks({"TORCH_EXTENSIONS_DIR": str(tmp_path)})
    assert [p for p, _ in locks] == [str(old)]
    msg = stale_lock_message(locks)
    assert str(old) in msg and "TORCH_EXTENSIONS_DIR" in msg
    assert stale_build_locks({"TORCH_EXTENSIONS_DIR": str(tmp_path / "none")}) == []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_timeout_ends_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    script = ("import subprocess, sys, time\n"
              "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
              f"open({str(pidfile)!r}, 'w').write(str(c.pid))\n"
              "time.sleep(120)\n")
    t0 = time.time()
    rc = run_process_group([sys.executable, "-c", script], 3.0)
    assert rc is None and time.time() - t0 < 30
    child = int(pidfile.read_text())
    deadline = time.time() + 10
    while _alive(child) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the launcher's child survived the timeout"


def test_stop_from_another_thread_ends_the_whole_process_group(tmp_path):
    """A launch waited on in a worker thread (no signal reaches it) is ended whole when its pool sets ``stop``:
    the launcher and the child in the launcher's group are gone within the grace period, long before the 120 s
    timeout, and the wait returns None as on a timeout."""
    import threading
    pidfile = tmp_path / "child.pid"
    script = ("import subprocess, sys, time\n"
              "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
              f"open({str(pidfile)!r}, 'w').write(str(c.pid))\n"
              "time.sleep(120)\n")
    stop = threading.Event()
    got: list = []
    t = threading.Thread(target=lambda: got.append(run_process_group([sys.executable, "-c", script], 120.0,
                                                                     stop=stop)))
    t.start()
    deadline = time.time() + 30
    while not pidfile.exists() and time.time() < deadline:
        time.sleep(0.1)
    child = int(pidfile.read_text())
    t0 = time.time()
    stop.set()
    t.join(30)
    assert not t.is_alive() and got == [None] and time.time() - t0 < 30
    deadline = time.time() + 10
    while _alive(child) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the launcher's child survived stop"


def test_side_by_side_ends_the_other_launch_when_one_fails(tmp_path):
    """The engine tests' pool (tests/engine/parity.py side_by_side): when one call fails (as on Ctrl-C, any
    exception in the waiting thread), the launch still running beside it is ended whole through ``stop`` -- its
    child gone long before its 120 s timeout -- and the failure is re-raised."""
    import pytest
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "engine"))
    try:
        from parity import side_by_side
    finally:
        sys.path.pop(0)
    pidfile = tmp_path / "child.pid"
    script = ("import subprocess, sys, time\n"
              "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
              f"open({str(pidfile)!r}, 'w').write(str(c.pid))\n"
              "time.sleep(120)\n")

    def call(a, stop):
        if a == "long":
            return run_process_group([sys.executable, "-c", script], 120.0, stop=stop)
        deadline = time.time() + 30
        while not pidfile.exists() and time.time() < deadline:
            time.sleep(0.1)
        raise RuntimeError("the other launch failed")

    t0 = time.time()
    with pytest.raises(RuntimeError, match="the other launch failed"):
        side_by_side(call, ["long", "fails"])
    assert time.time() - t0 < 45, "the pool waited for the long launch"
    child = int(pidfile.read_text())
    deadline = time.time() + 10
    while _alive(child) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the long launch's child survived"


def test_normal_exit_returns_the_status():
    assert run_process_group([sys.executable, "-c", "raise SystemExit(3)"], 30) == 3


def test_cpu_info_is_asked_once_per_process(monkeypatch):
    """The engine worker's memo of py-cpuinfo (DeepSpeedCPUAdam calls it per optimizer, each call a
    2 s subprocess): the wrapped function runs once, every caller gets an equal, separate dict."""
    import pytest
    cpuinfo = pytest.importorskip("cpuinfo")  # deepspeed's dependency (the engine extra)
    from advisor.engine.worker import memoize_cpu_info
    calls = []

    def fake():
        calls.append(1)
        return {"vendor_id_raw": "AuthenticAMD", "flags": ["avx2"]}

    monkeypatch.setattr(cpuinfo, "get_cpu_info", fake)
    memoize_cpu_info()
    memoize_cpu_info()  # a second install does not wrap the wrapper
    from cpuinfo import get_cpu_info  # as deepspeed/ops/adam/cpu_adam.py imports it, at call time
    a, b = get_cpu_info(), get_cpu_info()
    assert len(calls) == 1 and a == b == fake() and a is not b
    a["flags"].append("x")
    assert get_cpu_info()["flags"] == ["avx2"]


def test_sigterm_ends_the_whole_process_group_and_removes_the_temp_folder(tmp_path):
    """``timeout 90 ds-advisor measure ...`` sends SIGTERM: the launcher and its ranks (here a
    fake launcher whose child ignores SIGTERM, so SIGKILL after the grace period is needed) must
    not outlive measure, the ds-advisor-measure-* folder must go, and the exit status is 128 + 15."""
    import signal
    import subprocess
    pidfile = tmp_path / "pids"
    work = tmp_path / "work"
    work.mkdir()
    fake = ("import signal, subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)'])\n"
            f"open({str(pidfile)!r} + '.tmp', 'w').write(f'{{__import__(\"os\").getpid()}} {{c.pid}}')\n"
            f"__import__('os').rename({str(pidfile)!r} + '.tmp', {str(pidfile)!r})\n"
            "time.sleep(120)\n")
    driver = ("import subprocess, sys\n"
              "real = subprocess.Popen\n"
              "def popen(cmd, **kw):  # torch.distributed.run replaced by the fake launcher\n"
              f"    return real([sys.executable, '-c', {fake!r}], **kw)\n"
              "subprocess.Popen = popen\n"
              "from advisor.engine.measure import run_measure_many\n"
              "run_measure_many([{'id': 'c', 'config': {}, 'inventory': {}}], 1, "
              f"workdir={str(work)!r}, timeout_s=120)\n")
    env = {k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"}
    env["TORCH_EXTENSIONS_DIR"] = str(tmp_path / "ext")  # no stale build lock of others in the way
    p = subprocess.Popen([sys.executable, "-c", driver], env=env)
    try:
        deadline = time.time() + 60
        while not pidfile.exists() and time.time() < deadline and p.poll() is None:
            time.sleep(0.1)
        assert pidfile.exists(), "the fake launcher never started"
        leader, grandchild = map(int, pidfile.read_text().split())
        assert list(work.iterdir()), "run_measure_many made no temp folder"
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    try:
        assert rc == 128 + signal.SIGTERM
        deadline = time.time() + 10
        while (_alive(leader) or _alive(grandchild)) and time.time() < deadline:
            time.sleep(0.1)
        assert not _alive(leader) and not _alive(grandchild), "a process of the launch's group survived SIGTERM"
    finally:  # a failing run leaves nothing of its own behind either
        try:
            os.killpg(leader, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    assert list(work.iterdir()) == [], "the ds-advisor-measure-* folder was left behind"


_IGNORING_RANK = """import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
p = os.path.join(sys.argv[1], "rank" + os.environ["RANK"])
open(p + ".tmp", "w").write(str(os.getpid()))
os.rename(p + ".tmp", p + ".pid")
time.sleep(300)
"""


def test_timeout_ends_torchrun_ranks_in_their_own_sessions(tmp_path):
    """torch elastic starts each rank with start_new_session=True
    (torch/distributed/elastic/multiprocessing/subprocess_handler.py), so killing the launcher's
    group alone left ranks that ignore SIGTERM running for good (before this fix: both ranks alive
    after run_process_group returned). Every rank pid must be gone once it returns."""
    import signal
    import socket
    import pytest
    pytest.importorskip("torch")  # torch.distributed.run is the launcher under test
    script = tmp_path / "rank.py"
    script.write_text(_IGNORING_RANK)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(port), str(script), str(tmp_path)]
    with open(tmp_path / "log", "w") as log:
        rc = run_process_group(cmd, 30.0, grace_s=3.0, stdout=log, stderr=log)
    pids = [int(p.read_text()) for p in sorted(tmp_path.glob("rank*.pid"))]
    try:
        assert rc is None
        assert len(pids) == 2, "the ranks did not start within 30 s: " + (tmp_path / "log").read_text()[-2000:]
        deadline = time.time() + 5
        while any(_alive(p) for p in pids) and time.time() < deadline:
            time.sleep(0.1)
        assert [p for p in pids if _alive(p)] == [], "a rank survived the timeout"
    finally:  # a failing run leaves nothing behind
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
