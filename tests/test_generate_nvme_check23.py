"""generate's NVMe configs pass check on a fresh node (issue fixj23).

generate writes ``nvme_path`` as ``<the spec's drive mount>/deepspeed_offload``, a folder that does
not exist before the first run. DeepSpeed creates it itself at initialize: ``os.makedirs(self.swap_folder,
exist_ok=True)`` (DeepSpeed 0.19.8 runtime/swap_tensor/partitioned_param_swapper.py l.89 and
optimizer_utils.py l.175; the swap folders lie under ``nvme_path``). So check must not call the
missing folder an error when it would be created on the filesystem of the drive the hardware spec
names, and must still call it one when it would land on another filesystem.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ROOT / "advisor" / "data" / "hardware_presets.json"


def _spec(tmp_path: Path, mount: str) -> Path:
    """The workstation-4090 preset with its one drive mounted at ``mount`` (a spec file)."""
    s = dict(json.loads(PRESETS.read_text())["systems"]["workstation-4090"])
    s["storage"] = [dict(s["storage"][0], mounts=[mount])]
    p = tmp_path / "ws.json"
    p.write_text(json.dumps(s))
    return p


def _run(cmd: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    pp = [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    e = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8",
         "PYTHONPATH": os.pathsep.join(pp), **(env or {})}
    return subprocess.run([sys.executable, "-m", "advisor", cmd, *args], capture_output=True, text=True, env=e,
                          timeout=600)


def _generate_nvme(tmp_path: Path, spec: Path) -> tuple[Path, str]:
    out = tmp_path / "n1.json"
    r = _run("generate", ["--model", "llama-3-8b", "--hardware", str(spec), "--global-batch", "16", "--seq-len",
                          "2048", "-o", str(out)])
    assert r.returncode == 0, r.stderr
    z = json.loads(out.read_text())["zero_optimization"]
    paths = {z[k]["nvme_path"] for k in ("offload_optimizer", "offload_param")
             if z.get(k, {}).get("device") == "nvme"}
    assert len(paths) == 1, z  # a 4090 (24 GB) and 128 GB of host memory: llama-3-8b's AdamW state swaps to NVMe
    return out, paths.pop()


def _check(config: Path, spec: Path, nvme_path: str) -> tuple[int, dict]:
    env = {"DS_ADVISOR_TEST_DISK_FREE": json.dumps({nvme_path: "2TB"}), "DS_ADVISOR_TEST_LIBAIO": "1"}
    r = _run("check", [str(config), "--model", "llama-3-8b", "--hardware", str(spec), "--host-memory", "128GB",
                       "--format", "json"], env)
    return r.returncode, json.loads(r.stdout)


def test_generated_nvme_config_passes_check(tmp_path):
    drive = tmp_path / "nvme"
    drive.mkdir()
    spec = _spec(tmp_path, str(drive))
    config, nvme_path = _generate_nvme(tmp_path, spec)
    assert os.path.dirname(nvme_path) == str(drive) and not os.path.exists(nvme_path)
    rc, d = _check(config, spec, nvme_path)
    errors = [f for f in d["findings"] if f["severity"] == "error"]
    assert not errors and d["verdict"] != "no-go" and rc in (0, 4), (rc, errors, d["tiers"])
    k102 = [f for f in d["findings"] if f["code"] == "K102"]
    assert [f["severity"] for f in k102] == ["info"] and str(drive) in k102[0]["message"], k102
    [p] = d["resources"]["nvme"]
    assert p["creates_under"] == str(drive) and p["writable"] and p["free"] == 2_000_000_000_000
    nvme_rows = [t for t in d["tiers"] if t["tier"].startswith("nvme")]
    assert [t["verdict"] for t in nvme_rows] == ["go"]  # the swap files still counted against the drive
    assert not os.path.exists(nvme_path)  # check never creates it


def test_missing_nvme_path_off_the_spec_drive_is_an_error(tmp_path):
    """The spec's drive is another filesystem (/proc stands in: a different st_dev from tmp_path's)
    than the one the missing folder would be created on: K102 error, NO-GO."""
    drive = tmp_path / "nvme"
    drive.mkdir()
    config, nvme_path = _generate_nvme(tmp_path, _spec(tmp_path, str(drive)))
    assert os.stat("/proc").st_dev != os.stat(tmp_path).st_dev
    other = _spec(tmp_path, "/proc")
    rc, d = _check(config, other, nvme_path)
    k102 = [f for f in d["findings"] if f["code"] == "K102"]
    assert rc == 1 and d["verdict"] == "no-go" and [f["severity"] for f in k102] == ["error"], (rc, k102)
    assert "not the hardware spec's drive" in k102[0]["message"]


def test_probe_of_a_missing_path_reads_its_nearest_existing_ancestor(tmp_path):
    """os.makedirs creates every missing level, so the filesystem is the deepest existing folder's."""
    from advisor.views.check import NvmePath, probe_nvme_path
    (tmp_path / "a").mkdir()
    target = tmp_path / "a" / "b" / "c"
    p = probe_nvme_path(NvmePath(path=str(target), roles=["offload_optimizer"], pointers=["/x"]),
                        {str(tmp_path / "a"): 123})
    assert (p.exists, p.creates_under, p.device, p.free) == (False, str(tmp_path / "a"),
                                                             os.stat(tmp_path).st_dev, 123)
    assert not target.parent.exists()
