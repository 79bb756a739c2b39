"""tests.conftest.run_group, the launcher the engine tests use: output comes back like
subprocess.run's, and a timeout fails the test and ends a descendant that left the group in its
own session (as torchrun's ranks do), which subprocess.run(timeout=...) leaves running."""

from __future__ import annotations

import os
import sys
import time

import pytest

from tests.conftest import run_group

# the child starts a grandchild in its own session (like torch elastic's ranks), prints its pid, waits
_SPAWN = ("import subprocess, sys, time\n"
          "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
          "print(g.pid, flush=True)\n"
          "time.sleep(120)\n")


def test_output_and_return_code_come_back():
    p = run_group([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"], 60)
    assert (p.returncode, p.stdout, p.stderr) == (3, "out\n", "err\n")


def test_a_timeout_fails_and_ends_the_grandchild_in_its_own_session(tmp_path):
    with pytest.raises(pytest.fail.Exception, match="timed out after 3 s") as e:
        run_group([sys.executable, "-c", _SPAWN], 3, grace_s=1)
    gpid = int(str(e.value).splitlines()[1].split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{gpid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        os.kill(gpid, 9)
        pytest.fail(f"grandchild {gpid} still running after the timeout")
