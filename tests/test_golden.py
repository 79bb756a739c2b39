"""Golden (exact-output) tests for the text renderers.

Each entry of :data:`GOLDENS` runs one ``ds-advisor`` command with ``--format text`` (the
default) on a fixed input, as a real process with a fixed terminal (no colour, 120 columns,
stand-in probes for ``check``), and compares stdout (then stderr, after a ``---- stderr ----`` line, when there is any) byte for
byte with ``tests/golden/NAME.txt``.
On a difference the test fails with a unified diff (golden -> now).

What they pin is the wording and layout a user reads: lint's finding lines
(advisor/render/text.py ``lint_text``), estimate's tables, fit, data movement lines
(``movement_lines``) and assumptions (``estimate_text``), ``checkpoint_text``, ``check_text`` and
generate's plan table (advisor/views/generate.py ``table_text``). The numbers in them are
asserted independently elsewhere (by hand from a cited formula or against the engine:
tests/test_cases.py, test_ledger.py, test_checkpoint.py, test_check.py, test_traffic.py,
test_generate.py); a golden is never the source of a number's truth.

To change a renderer's output deliberately, regenerate the goldens and review the diff::

    DS_ADVISOR_UPDATE_GOLDEN=1 PYTHONPATH=$PWD python3 -m pytest -q tests/test_golden.py
    git diff tests/golden/

With DS_ADVISOR_UPDATE_GOLDEN=1 each test writes its golden and passes; never set it in CI.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

import pytest

from tests.conftest import CASES, ROOT, run_cli

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("DS_ADVISOR_UPDATE_GOLDEN") == "1"
H100 = ("NVIDIA H100 80GB HBM3", 81559)
V = ("--deepspeed-version", "0.19.8")
TORCHRUN_8 = {"WORLD_SIZE": "8", "RANK": "0", "LOCAL_WORLD_SIZE": "8", "LOCAL_RANK": "0"}


def _fake_smi(tmp_path: Path, n: int, spec=H100) -> Path:
    """A bin/ folder with an nvidia-smi answering check's query for ``n`` idle ``spec`` GPUs."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    lines = "\n".join(f"{i}, {spec[0]}, {spec[1]}, 0" for i in range(n))
    smi = bin_ / "nvidia-smi"
    smi.write_text("#!/bin/sh\n"
                   'if [ "$1" = "--query-gpu=index,name,memory.total,memory.used" ] && '
                   '[ "$2" = "--format=csv,noheader,nounits" ]; then\n'
                   f"cat <<'EOF'\n{lines}\nEOF\nexit 0\nfi\nexit 6\n")
    smi.chmod(0o755)
    return bin_


def _case(name: str) -> Path:
    return CASES / name


#: name -> (ds-advisor arguments, cwd, number of stand-in H100s for check or None)
GOLDENS = {
    # lint_text: a misplaced section (C01), "auto" outside the HF Trainer (C04), a clean config
    # (--deepspeed-version everywhere: every report names the release, else whatever is installed)
    "lint_c01_misplaced_offload": (["lint", "config.json", *V], _case("C01-misplaced-offload"), None),
    "lint_c04_auto_outside_hf": (["lint", "config.json", *V], _case("C04-auto-outside-hf"), None),
    "lint_sample_zero2_clean": (["lint", "sample_configs/zero2.json", *V], ROOT, None),
    # estimate_text: ZeRO-2 32B on 8 x 141 GB (does not fit, C06); NVMe offload with the data
    # movement lines and the checkpoint section (C10); --explain (C05)
    "estimate_c06_zero2_32b": (["estimate", "config.json", "--params", "32763876352", "--world-size", "8",
                                "--gpu-memory", "141GB", *V], _case("C06-zero2-32b-8gpu"), None),
    "estimate_c10_nvme_movement": (["estimate", "config.json", "--params", "6700000000", "--world-size", "1", *V],
                                   _case("C10-nvme-writes-per-step"), None),
    "estimate_c05_explain": (["estimate", "config.json", "--params", "340000000", "--world-size", "8",
                              "--explain", *V], _case("C05-zero2-bucket-pair"), None),
    # checkpoint_text: C09's 8B model, save/restore times and the Young/Daly interval
    "checkpoint_c09": (["checkpoint", "config.json", "--params", "8030261248", "--world-size", "8",
                        "--write-bandwidth", "2GB/s", "--node-mtbf-hours", "20000", *V],
                       _case("C09-checkpoint-size-8b"), None),
    # check_text: a go (GPT-2 small, its activations at 128 tokens counted: with --params the need leaves them
    # out and is a lower bound, M104, never GO) and a no-go (C06's 32B on 80 GB H100s), 8 stand-in GPUs
    "check_go_small_model": (["check", "sample_configs/zero2.json", "--model", "gpt2", "--seq-len", "128",
                              "--host-memory", "512GB", *V], ROOT, 8),
    "check_nogo_c06_on_h100": (["check", "config.json", "--params", "32763876352", "--host-memory", "512GB", *V],
                               _case("C06-zero2-32b-8gpu"), 8),
    # a 70B model at ZeRO-3 with both offloads fits the step on 80 GB H100s, but built without
    # deepspeed.zero.Init it is whole on each accelerator inside deepspeed.initialize (M103)
    "check_nogo_70b_zero3_no_zero_init": (["check", "sample_configs/zero3_cpu_offload.json", "--params",
                                           "70000000000", "--host-memory", "4TB", "--no-zero-init", *V], ROOT, 8),
    # generate's table (on stderr; the chosen config on stdout): the plans that fit a 1B model on one DGX H100
    "generate_llama1b_dgx_h100": (["generate", "--model", "llama-3.2-1b", "--hardware", "dgx-h100", "--nodes", "1",
                                   "--gpus-per-node", "8", "--global-batch", "64", "--seq-len", "2048", *V], ROOT, None),
}


def _env(tmp_path: Path, gpus: int | None) -> dict[str, str]:
    pp = [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8",
           "PYTHONPATH": os.pathsep.join(pp), "NO_COLOR": "1", "COLUMNS": "120", "TERM": "dumb"}
    if gpus is not None:
        # check names the stand-in nvidia-smi by its path under tmp_path, whose length varies:
        # lines wide enough that where they wrap does not depend on it
        env["COLUMNS"] = "300"
        env["PATH"] = f"{_fake_smi(tmp_path, gpus)}:{env['PATH']}"
        env.update(TORCHRUN_8)
    return env


#: check's probe of this machine's /proc/meminfo (no test hook on the CLI): its figures vary
_MEMINFO = re.compile(r"(host memory +)[0-9.,]+ GiB available of [0-9.,]+ GiB( from /proc/meminfo)")


def _scrub(text: str, tmp_path: Path) -> str:
    """What differs per run -> fixed placeholders: the stand-in nvidia-smi's folder, the
    checkout's path, and this machine's /proc/meminfo figures."""
    text = text.replace(str(tmp_path), "<tmp>").replace(str(ROOT), "<repo>")
    return _MEMINFO.sub(r"\1<MemAvailable> of <MemTotal>\2", text)


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_text_output_matches_golden(name, tmp_path):
    args, cwd, gpus = GOLDENS[name]
    p = run_cli(args, cwd=cwd, env=_env(tmp_path, gpus))
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    assert p.returncode in (0, 1), (p.returncode, p.stderr[-1000:])
    got = _scrub(p.stdout + (f"---- stderr ----\n{p.stderr}" if p.stderr else ""), tmp_path)
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(got)
        return
    assert path.is_file(), f"{path} missing: run with DS_ADVISOR_UPDATE_GOLDEN=1 to create it, then review it"
    want = path.read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                            f"tests/golden/{name}.txt (golden)", f"ds-advisor {' '.join(args)} (now)"))
        pytest.fail(f"text output differs from its golden (regenerate deliberately with "
                    f"DS_ADVISOR_UPDATE_GOLDEN=1, see tests/test_golden.py):\n{diff}", pytrace=False)


def test_every_golden_file_has_a_test():
    """No stale golden: every tests/golden/*.txt belongs to an entry of GOLDENS."""
    assert {p.stem for p in GOLDEN.glob("*.txt")} == set(GOLDENS)
