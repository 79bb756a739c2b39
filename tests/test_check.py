"""ds-advisor check: the pre-launch gate, run as a real process in controlled environments.

Each CLI test builds its own environment from scratch (no inherited launcher variables): a
PATH whose first entry holds a stand-in ``nvidia-smi`` that prints the real
``--query-gpu=index,name,memory.total,memory.used --format=csv,noheader,nounits`` output for
given GPUs (and fails on any other query), launcher variables set per test, and real
temporary directories as nvme_path. Numbers asserted are the ones the probes must report
(81559 MiB per H100 80GB HBM3 -> 85,520,809,984 bytes) and robust fit outcomes (a 1M-parameter
model fits anywhere; a 32B model's full bf16 copy alone, 65.5 GB, plus its ZeRO-2 shards does
not fit an 85.5 GB H100).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.views.check import parse_nvidia_smi_csv, parse_rocm_smi_json, probe_host, probe_nvme_path, NvmePath
from advisor.cluster.launch import discover_launch
from advisor.errors import EXIT_TIGHT

#: A small model with its architecture (GPT-2 small, 124M), so its activations are estimated: with
#: --params the accelerator need leaves them out and is a lower bound (M104), never GO, at best TIGHT.
TINY = ["--model", "gpt2", "--seq-len", "128"]

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_configs"
from tests.conftest import CASES as _CASES  # noqa: E402  (tests/data/cases)
C06 = _CASES / "C06-zero2-32b-8gpu" / "config.json"
MIB = 1 << 20
H100 = ("NVIDIA H100 80GB HBM3", 81559)
H200 = ("NVIDIA H200", 143771)
P32B = 32763876352




# --- helpers ---------------------------------------------------------------------------------

def fake_smi(tmp_path: Path, gpus: list[tuple[str, int, int]]) -> Path:
    """A bin/ folder with an nvidia-smi that answers the real query for ``gpus`` (name, total
    MiB, used MiB) and exits 6 for any other arguments. Returns the folder."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    lines = "\n".join(f"{i}, {name}, {total}, {used}" for i, (name, total, used) in enumerate(gpus))
    script = bin_ / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--query-gpu=index,name,memory.total,memory.used" ] && '
        '[ "$2" = "--format=csv,noheader,nounits" ]; then\n'
        f"cat <<'EOF'\n{lines}\nEOF\nexit 0\nfi\n"
        'echo "unexpected arguments: $*" >&2; exit 6\n')
    script.chmod(0o755)
    return bin_


def gpus(spec: tuple[str, int], n: int, used: int = 0) -> list[tuple[str, int, int]]:
    return [(spec[0], spec[1], used)] * n


def base_env(bin_: Path | None = None, env: dict[str, str] | None = None) -> dict[str, str]:
    """A fresh environment: PATH (``bin_`` first), HOME, LANG, PYTHONPATH (this repo first), plus ``env``."""
    pp = [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    e = {"PATH": (f"{bin_}:" if bin_ else "") + "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
         "LANG": "C.UTF-8", "PYTHONPATH": os.pathsep.join(pp)}
    e.update(env or {})
    return e


def check(args: list[str], env: dict[str, str] | None = None, bin_: Path | None = None,
          fmt_json: bool = True) -> tuple[int, dict | str, str]:
    """Run ``python -m advisor check ARGS`` in :func:`base_env` (no inherited launcher variables)."""
    e = base_env(bin_, env)
    cmd = [sys.executable, "-m", "advisor", "check", *args] + (["--format", "json"] if fmt_json else [])
    p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=120, cwd=ROOT)
    out: dict | str = p.stdout
    if fmt_json and p.stdout.strip():
        out = json.loads(p.stdout)
    return p.returncode, out, p.stderr


def tier(d: dict, name: str) -> dict:
    rows = [t for t in d["tiers"] if t["tier"] == name or t["tier"].startswith(name + " ")]
    assert len(rows) == 1, d["tiers"]
    return rows[0]


def codes(d: dict) -> set[str]:
    return {f["code"] for f in d["findings"]}


def nvme_config(tmp_path: Path, nvme_path: str, name: str = "nvme.json") -> Path:
    """sample_configs/zero_infinity_nvme.json with both nvme_paths pointed at ``nvme_path``."""
    cfg = json.loads((SAMPLES / "zero_infinity_nvme.json").read_text())
    cfg["zero_optimization"]["offload_optimizer"]["nvme_path"] = nvme_path
    cfg["zero_optimization"]["offload_param"]["nvme_path"] = nvme_path
    p = tmp_path / name
    p.write_text(json.dumps(cfg, indent=2))
    return p


TORCHRUN_8 = {"WORLD_SIZE": "8", "RANK": "0", "LOCAL_WORLD_SIZE": "8", "LOCAL_RANK": "0"}


# --- pure probes (no ledger needed) ----------------------------------------------------------

def test_nvidia_smi_csv_is_parsed_in_mib():
    devs = parse_nvidia_smi_csv("0, NVIDIA H100 80GB HBM3, 81559, 0\n1, NVIDIA H100 80GB HBM3, 81559, 1024\n")
    assert [d.index for d in devs] == ["0", "1"]
    assert devs[0].name == "NVIDIA H100 80GB HBM3"
    assert devs[0].total == 85_520_809_984
    assert devs[1].free == (81559 - 1024) * MIB
    with pytest.raises(ValueError, match="no memory size"):
        parse_nvidia_smi_csv("0, NVIDIA A100-SXM4-80GB, [N/A], [N/A]")


def test_nvidia_smi_line_with_more_fields_than_asked_is_not_probed(tmp_path):
    # newcomer D9: the query asks 4 fields (index, name, memory.total, memory.used: NVIDIA_SMI_QUERY);
    # a 5-field line shifted the columns and read as 0 MiB total -> NO-GO on 0 GiB. It must be
    # "could not be probed" like any other unreadable answer; a comma inside the name still reads.
    assert parse_nvidia_smi_csv("0, Foo, Bar GPU, 81559, 0")[0].name == "Foo, Bar GPU"
    for bad in ("0, NVIDIA H100 80GB HBM3, 81559, 0, 0", "0, NVIDIA H100 80GB HBM3, 0, 0", "x, NVIDIA H100, 81559, 0"):
        with pytest.raises(ValueError):
            parse_nvidia_smi_csv(bad)
    bin_ = fake_smi(tmp_path, [("NVIDIA H100 80GB HBM3, 81559", 0, 0)] * 8)  # prints the 5-field line
    assert "0, NVIDIA H100 80GB HBM3, 81559, 0, 0" in (bin_ / "nvidia-smi").read_text()
    args = [str(SAMPLES / "zero2.json"), "--params", "1000000", "--gpu-memory", "80GB"]
    rc, d, _ = check(args, TORCHRUN_8, bin_)
    assert d["probe_failed"] is True and any("accelerators could not be probed" in w for w in d["warnings"])
    assert tier(d, "accelerator")["capacity"] == 80 * 10**9 and rc == EXIT_TIGHT  # --params: a floor (M104)
    rc, d, _ = check(args + ["--strict"], TORCHRUN_8, bin_)
    assert rc == 3


def test_rocm_smi_json_is_parsed():
    text = json.dumps({"card0": {"VRAM Total Memory (B)": "68702699520", "VRAM Total Used Memory (B)": "10960896"},
                       "card1": {"VRAM Total Memory (B)": "68702699520", "VRAM Total Used Memory (B)": "0"},
                       "system": {"Driver version": "6.7"}})
    devs = parse_rocm_smi_json(text)
    assert [(d.index, d.total, d.used) for d in devs] == [("0", 68702699520, 10960896), ("1", 68702699520, 0)]


def test_torchrun_environment():
    s = discover_launch({"WORLD_SIZE": "16", "RANK": "9", "LOCAL_WORLD_SIZE": "8"})
    assert (s.world_size.value, s.world_size.source) == (16, "WORLD_SIZE")
    assert (s.gpus_per_node.value, s.gpus_per_node.source) == (8, "LOCAL_WORLD_SIZE")
    assert s.node_rank.value == 1 and s.node_rank.source == "RANK // LOCAL_WORLD_SIZE"
    assert list(s.node_ranks()) == list(range(8, 16))
    assert (s.num_nodes.value, s.rank.value) == (2, 9)


def test_flags_beat_the_environment():
    s = discover_launch({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}, world_size=4, gpus_per_node=4)
    assert (s.world_size.value, s.world_size.source) == (4, "--world-size")
    assert (s.gpus_per_node.value, s.gpus_per_node.source) == (4, "--gpus-per-node")


def test_slurm_one_task_per_gpu():
    s = discover_launch({"SLURM_NTASKS": "16", "SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "8",
                         "SLURM_NODEID": "1"})
    assert (s.world_size.value, s.world_size.source) == (16, "SLURM_NTASKS")
    assert (s.node_rank.value, s.node_rank.source) == (1, "SLURM_NODEID")
    assert list(s.node_ranks()) == list(range(8, 16))


def test_slurm_one_launcher_task_per_node_means_nodes_times_gpus():
    s = discover_launch({"SLURM_NTASKS": "2", "SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_PER_NODE": "h100:4"})
    assert s.world_size.value == 8
    assert "SLURM_JOB_NUM_NODES x SLURM_GPUS_PER_NODE" in s.world_size.source
    assert (s.gpus_per_node.value, s.gpus_per_node.source) == (4, "SLURM_GPUS_PER_NODE")


def test_visible_devices_count_as_ranks_per_node_last():
    s = discover_launch({"ROCR_VISIBLE_DEVICES": "0,1,2"})
    assert (s.gpus_per_node.value, s.gpus_per_node.source) == (3, "ROCR_VISIBLE_DEVICES")
    assert s.visible_devices == ["0", "1", "2"] and s.world_size is None


def test_host_memory_from_meminfo(tmp_path):
    mi = tmp_path / "meminfo"
    mi.write_text("MemTotal:       2113445888 kB\nMemFree:        1000000000 kB\nMemAvailable:   2000000000 kB\n")
    h = probe_host(str(mi))
    assert (h.available, h.total, h.error) == (2000000000 * 1024, 2113445888 * 1024, None)
    assert probe_host(str(tmp_path / "absent")).error is not None


def test_nvme_path_probe_missing_and_writable(tmp_path):
    # a missing folder: DeepSpeed's os.makedirs creates it (partitioned_param_swapper.py l.89), so the probe
    # reads the nearest existing folder above it -- creatable, its filesystem's free space -- and creates nothing
    missing = probe_nvme_path(NvmePath(str(tmp_path / "nope"), ["offload_optimizer"], ["/p"]),
                              disk_free={str(tmp_path): 777})
    assert (missing.exists, missing.creates_under, missing.writable, missing.free) == (False, str(tmp_path), True, 777)
    assert not (tmp_path / "nope").exists()
    ok = probe_nvme_path(NvmePath(str(tmp_path), ["offload_optimizer"], ["/p"]), disk_free={str(tmp_path): 12345})
    assert (ok.exists, ok.writable, ok.free) == (True, True, 12345)
    assert list(tmp_path.iterdir()) == []  # the probe's temporary file is gone
    real = probe_nvme_path(NvmePath(str(tmp_path), ["offload_optimizer"], ["/p"]))
    assert real.free_source == "statvfs" and real.free > 0


def test_nvme_path_probe_under_proc_is_not_writable():
    p = probe_nvme_path(NvmePath("/proc", ["offload_param"], ["/p"]))
    assert p.exists and not p.writable and p.write_error


def test_rocm_smi_is_used_when_there_is_no_nvidia_smi_and_filtered_by_rocr_visible_devices(tmp_path):
    from advisor.views.check import probe_accelerators

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    cards = {f"card{i}": {"VRAM Total Memory (B)": "206141652992", "VRAM Total Used Memory (B)": str(i * 10**9)}
             for i in range(8)}
    (bin_ / "rocm-smi").write_text("#!/bin/sh\n[ \"$*\" = \"--showmeminfo vram --json\" ] || exit 5\n"
                                   f"echo '{json.dumps(cards)}'\n")
    (bin_ / "rocm-smi").chmod(0o755)
    p = probe_accelerators({"PATH": f"{bin_}:/usr/bin:/bin"}, ["2", "3"], "ROCR_VISIBLE_DEVICES")
    assert p.ok and p.source == f"rocm-smi ({bin_}/rocm-smi)"
    assert [(d.index, d.free) for d in p.devices] == [("2", 206141652992 - 2 * 10**9), ("3", 206141652992 - 3 * 10**9)]
    assert p.per_rank_capacity() == 206141652992 - 3 * 10**9


def test_torch_is_asked_only_when_the_caller_already_imported_it(tmp_path, monkeypatch):
    import types

    from advisor.views.check import probe_accelerators

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    p = probe_accelerators({"PATH": str(tmp_path)})
    assert not p.ok and "torch is not imported" in p.error and "torch" not in sys.modules
    props = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=85_520_809_984)
    cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 2,
                                 get_device_properties=lambda i: props, memory_reserved=lambda i: 2**30 * i)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    p = probe_accelerators({"PATH": str(tmp_path)})
    assert p.ok and p.source.startswith("torch.cuda")
    assert [d.free for d in p.devices] == [85_520_809_984, 85_520_809_984 - 2**30]


# --- import hygiene ----------------------------------------------------------------------------

def test_import_leaves_torch_and_deepspeed_out():
    code = ("import sys, advisor.views.check, advisor.cli, advisor.cluster.launch; "
            "print(sorted(m for m in ('torch', 'deepspeed') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_help_documents_exit_codes():
    rc, out, _ = check(["--help"], fmt_json=False)
    assert rc == 0
    for line in ("0  go", "1  no-go", "2  bad usage", "3  --strict only", "4  tight", "--allow-tight"):
        assert line in out


def test_bad_usage_is_exit_2(tmp_path):
    bin_ = fake_smi(tmp_path, gpus(H100, 8))
    rc, _, err = check([str(tmp_path / "absent.json"), "--params", "1000000"], TORCHRUN_8, bin_)
    assert rc == 2 and "absent.json" in err
    rc, _, err = check([str(SAMPLES / "zero2.json")], TORCHRUN_8, bin_)
    assert rc == 2 and "--params" in err
    rc, _, err = check([str(SAMPLES / "zero2.json"), "--params", "1000000", "--gpu-memory", "lots"], TORCHRUN_8, bin_)
    assert rc == 2 and "not a size" in err


# --- whole runs (need the ledger) --------------------------------------------------------------

def test_tiny_model_on_8_h100_is_go(tmp_path):
    bin_ = fake_smi(tmp_path, gpus(H100, 8))
    rc, d, err = check([str(SAMPLES / "zero2.json"), *TINY], TORCHRUN_8, bin_)
    assert rc == 0, (d, err)
    assert d["verdict"] == "go" and d["exit_code"] == 0
    assert d["launch"]["world_size"] == {"value": 8, "source": "WORLD_SIZE"}
    assert d["launch"]["gpus_per_node"] == {"value": 8, "source": "LOCAL_WORLD_SIZE"}
    acc = d["resources"]["accelerators"]
    assert len(acc["devices"]) == 8 and acc["devices"][0]["total"] == 81559 * MIB
    assert acc["source"].startswith("nvidia-smi (" + str(bin_))
    t = tier(d, "accelerator")
    assert t["capacity"] == 81559 * MIB and t["verdict"] == "go"
    # GPT-2 small: 4 B x 124M bf16 parameters and gradients, its fp32 states' 1/8, ZeRO-2's buckets, the
    # overhead rows: a few GB of 80
    assert 0 < t["need"] < 4e9 and t["headroom"] == t["capacity"] - t["need"]
    assert tier(d, "host")["capacity_source"] == "/proc/meminfo MemAvailable"


def test_quiet_success_prints_nothing_and_no_go_prints_the_verdict(tmp_path):
    bin_ = fake_smi(tmp_path, gpus(H100, 8))
    assert check([str(SAMPLES / "zero2.json"), *TINY, "-q"], TORCHRUN_8, bin_,
                 fmt_json=False) == (0, "", "")
    rc, out, _ = check([str(C06), "--params", str(P32B), "-q"], TORCHRUN_8, bin_, fmt_json=False)
    assert rc == 1 and out.rstrip().endswith("NO-GO (exit 1)") and "M100" in out


def test_32b_zero2_does_not_fit_8_h100(tmp_path):
    bin_ = fake_smi(tmp_path, gpus(H100, 8))
    rc, d, _ = check([str(C06), "--params", str(P32B)], TORCHRUN_8, bin_)
    assert rc == 1 and d["verdict"] == "no-go"
    t = tier(d, "accelerator")
    # bf16 full copy 65,527,752,704 + fp32 master and Adam moments partitions 49,145,814,528.
    assert t["need"] >= 65_527_752_704 + 16_381_938_176 + 32_763_876_352
    assert t["verdict"] == "no-go" and t["headroom"] < -29e9
    assert "M100" in codes(d)


def test_32b_zero2_on_141gb_is_within_a_few_gb_and_zero3_fits(tmp_path):
    bin_ = fake_smi(tmp_path, gpus(H200, 8))
    rc, d, _ = check([str(C06), "--params", str(P32B), "--gpu-memory", "141GB"], TORCHRUN_8, bin_)
    t = tier(d, "accelerator")
    assert (t["capacity"], t["capacity_source"]) == (141 * 10**9, "--gpu-memory")  # the flag beats the probe
    # C06: model states at the step are about 139.2 GB of 141 GB (activations come on top).
    assert t["need"] >= 139.2e9 and t["headroom"] < 2e9
    cfg = json.loads(C06.read_text())
    cfg["zero_optimization"]["stage"] = 3
    z3 = tmp_path / "c06_zero3.json"
    z3.write_text(json.dumps(cfg))
    # --host-memory: the save stages each rank's 4 GB fp32 sub-group in host memory at once (32 GB a
    # node), more than this test machine may have free; the accelerator is the question here
    rc, d, _ = check([str(z3), "--params", str(P32B), "--host-memory", "2TB"], TORCHRUN_8, bin_)
    t = tier(d, "accelerator")
    assert t["capacity"] == 143771 * MIB
    # --params: no activations, so the need is a lower bound (M104): TIGHT however large the headroom
    assert rc == EXIT_TIGHT and d["verdict"] == "tight" and t["verdict"] == "tight" and t["lower_bound"]
    assert 73.7e9 <= t["need"] < 100e9


def test_busy_gpu_sets_the_capacity_and_too_few_visible_gpus_is_no_go(tmp_path):
    bin_ = fake_smi(tmp_path, gpus(H100, 7) + [(H100[0], H100[1], 40000)])
    rc, d, _ = check([str(SAMPLES / "zero2.json"), "--params", "1000000"], TORCHRUN_8, bin_)
    t = tier(d, "accelerator")
    assert t["capacity"] == (81559 - 40000) * MIB and "GPU 7" in t["capacity_source"]
    assert rc == EXIT_TIGHT and t["lower_bound"]  # --params: a floor (M104)
    env = {**TORCHRUN_8, "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    rc, d, _ = check([str(SAMPLES / "zero2.json"), "--params", "1000000"], env, bin_)
    assert rc == 1 and d["verdict"] == "no-go" and "K110" in codes(d)
    assert [x["index"] for x in d["resources"]["accelerators"]["devices"]] == ["0", "1", "2", "3"]


def test_no_nvidia_smi_warns_and_uses_flags_but_strict_exits_3(tmp_path):
    args = [str(SAMPLES / "zero2.json"), "--params", "1000000", "--gpu-memory", "80GB"]
    rc, d, _ = check(args, TORCHRUN_8)
    assert rc == EXIT_TIGHT and d["probe_failed"] is True  # --params: a floor (M104)
    assert any("accelerators could not be probed" in w for w in d["warnings"])
    assert tier(d, "accelerator")["capacity"] == 80 * 10**9
    rc, d, _ = check(args + ["--strict"], TORCHRUN_8)
    assert rc == 3 and d["exit_code"] == 3
    # a broken driver: nvidia-smi is there but fails
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it couldn'\"'\"'t communicate "
                                     "with the NVIDIA driver.' >&2\nexit 9\n")
    (bin_ / "nvidia-smi").chmod(0o755)
    rc, out, _ = check(args + ["--strict"], TORCHRUN_8, bin_, fmt_json=False)
    assert rc == 3 and "exited 9: NVIDIA-SMI has failed" in " ".join(out.split())  # piped text wraps at 100


def test_slurm_environment_is_reported_with_sources(tmp_path):
    bin_ = fake_smi(tmp_path, gpus(H100, 8))
    env = {"SLURM_NTASKS": "2", "SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "4", "SLURM_NODEID": "1",
           "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    cfg = json.loads((SAMPLES / "zero2.json").read_text())
    cfg["train_batch_size"] = 64  # 4 x 2 x 8
    p = tmp_path / "z2.json"
    p.write_text(json.dumps(cfg))
    rc, d, _ = check([str(p), *TINY], env, bin_)
    assert rc == 0, d["findings"]
    ls = d["launch"]
    assert ls["world_size"]["value"] == 8 and ls["world_size"]["source"].startswith("SLURM_JOB_NUM_NODES x")
    assert ls["node_rank"] == {"value": 1, "source": "SLURM_NODEID"} and ls["node_ranks"] == {"rank_count": 4, "rank_ranges": [[4, 7]]}
    assert ls["visible_devices"] == {"value": ["0", "1", "2", "3"], "source": "CUDA_VISIBLE_DEVICES"}
    rc, out, _ = check([str(p), *TINY], env, bin_, fmt_json=False)
    assert "from SLURM_NODEID" in out and "visible devices  0,1,2,3 from CUDA_VISIBLE_DEVICES" in out


# --- NVMe ------------------------------------------------------------------------------------------

NVME_ARGS = ["--params", "100000000", "--host-memory", "2TB"]


def test_nvme_path_that_fits_is_go(tmp_path):
    nv = tmp_path / "nvme"
    nv.mkdir()
    bin_ = fake_smi(tmp_path, gpus(H100, 8))
    env = {**TORCHRUN_8, "DS_ADVISOR_TEST_DISK_FREE": json.dumps({str(nv): "3.84TB"}), "DS_ADVISOR_TEST_LIBAIO": "1"}
    rc, d, err = check([str(nvme_config(tmp_path, str(nv)))] + NVME_ARGS, env, bin_)
    # the NVMe tier is GO; --params leaves the activations out, so the accelerator is TIGHT (M104), exit 4
    assert rc == EXIT_TIGHT and tier(d, "accelerator")["lower_bound"], (d["findings"], d["tiers"])
    [p] = d["resources"]["nvme"]
    assert (p["exists"], p["writable"], p["free"]) == (True, True, 3_840_000_000_000)
    assert sorted(p["roles"]) == ["offload_optimizer", "offload_param"]
    t = tier(d, "nvme")
    assert t["verdict"] == "go" and t["need"] == p["need"] > 0 and t["capacity"] == 3_840_000_000_000
    assert d["resources"]["libaio"] == {"found": True, "detail": "DS_ADVISOR_TEST_LIBAIO=1 (test hook)"}
    assert list(nv.iterdir()) == []


def test_nvme_path_missing_is_no_go(tmp_path):
    bin_ = fake_smi(tmp_path, gpus(H100, 8))
    missing = tmp_path / "not-mounted"
    rc, d, _ = check([str(nvme_config(tmp_path, str(missing)))] + NVME_ARGS, TORCHRUN_8, bin_)
    assert rc == 1 and d["verdict"] == "no-go"
    k = [f for f in d["findings"] if f["code"] == "K102"]
    assert len(k) == 1 and "does not exist" in k[0]["message"] and k[0]["line"] is not None
    assert not missing.exists()  # check never creates it


def _optimizer_swap_config(tmp_path: Path, nvme_path: str) -> Path:
    """ZeRO-3 bf16 AdamW with only the optimizer swapped to ``nvme_path`` (defaults otherwise:
    sub_group_size 1e9, aio block_size 1 MiB, intra_op_parallelism 1)."""
    p = tmp_path / "opt_nvme.json"
    p.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                             "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
                             "zero_optimization": {"stage": 3, "offload_optimizer": {
                                 "device": "nvme", "nvme_path": nvme_path}}}))
    return p


def _swap_bytes_by_hand(n: int, ranks: int) -> int:
    """NVMe bytes one node's ``ranks`` ranks write for ``--params n`` (n a power of two >= 2^23,
    so every partition is aligned): each rank's partition n / ranks elements is one sub-group
    (sub_group_size 1e9 > n / ranks up to 2^32 params) of >= 1 MiB at 4 B/element, so it is swapped
    (stage3.py:_swappable_optimizer_subgroup, optimizer_utils.py:180 min_aio_bytes = max(1 MiB,
    block_size)); its files are the fp32 master and both Adam moments
    (partitioned_optimizer_swapper.py:swap_out_optimizer_state) and the fp32 gradient
    (optimizer_utils.py:_swap_out_gradients), 4 B per element each, padded to 1024 B x
    intra_op_parallelism (optimizer_utils.py:181), which a power of two already is."""
    return ranks * (n // ranks) * (4 + 4 + 4 + 4)


def _statvfs_free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def test_nvme_need_by_hand_against_the_real_free_space(tmp_path):
    """check compares the swap bytes of this node's 8 ranks with the free space statvfs gives
    for the nvme_path's filesystem (no test hook): 2^23 parameters need 16 B x 2^23 =
    134,217,728 B, which a real temporary directory holds (go, no K104); a model whose need is over
    twice that filesystem's free space is no-go with K104 naming both figures."""
    nv = tmp_path / "nvme"
    nv.mkdir()
    bin_ = fake_smi(tmp_path, gpus(H100, 8))
    env = {**TORCHRUN_8, "DS_ADVISOR_TEST_LIBAIO": "1"}
    args = ["--host-memory", "1PB", "--gpu-memory", "1PB"]
    cfg = _optimizer_swap_config(tmp_path, str(nv))
    rc, d, err = check([str(cfg), "--params", str(1 << 23), *args], env, bin_)
    t = tier(d, "nvme")
    assert t["need"] == _swap_bytes_by_hand(1 << 23, 8) == 134_217_728
    assert t["capacity_source"] == "free space (statvfs)"
    free = _statvfs_free(nv)
    assert abs(t["capacity"] - free) <= max(1 << 30, free // 100)  # the disk is shared: it moves a little
    assert t["verdict"] == "go" and "K104" not in codes(d), (d["findings"], err)
    # 16 B x n > 2 x free: no-go, by the real statvfs figure
    n = 1 << 23
    while _swap_bytes_by_hand(n, 8) <= 2 * free:
        n <<= 1
    rc, d, err = check([str(cfg), "--params", str(n), *args], env, bin_)
    t = tier(d, "nvme")
    assert t["need"] == _swap_bytes_by_hand(n, 8) and t["verdict"] == "no-go"
    assert rc == 1 and d["verdict"] == "no-go", err
    (k,) = [f for f in d["findings"] if f["code"] == "K104"]
    assert k["data"]["need"] == t["need"] and k["data"]["free"] == t["capacity"]
    assert k["pointer"] == "/zero_optimization/offload_optimizer/nvme_path" and "Traceback" not in err
    assert list(nv.iterdir()) == []  # the probe leaves nothing behind


def test_nvme_free_space_unreadable_is_a_warning_not_a_silent_go(tmp_path, monkeypatch):
    """statvfs failing on an existing nvme_path leaves no capacity to compare with: check says
    so (a warning naming the path and the need), no traceback and no nvme verdict row."""
    import shutil
    from advisor.config.loading import load_config
    from advisor.model.inventory import from_param_count
    from advisor.views import check as chk

    nv = tmp_path / "nvme"
    nv.mkdir()

    def broken(path):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(shutil, "disk_usage", broken)
    res = chk.run_check(load_config(str(_optimizer_swap_config(tmp_path, str(nv)))), from_param_count(1 << 23),
                        env={"PATH": "", "DS_ADVISOR_TEST_LIBAIO": "1", **TORCHRUN_8}, gpu_memory=10**15,
                        host_memory=10**15)
    assert not [t for t in res.tiers if t.tier.startswith("nvme")]
    (w,) = [w for w in res.warnings if w.startswith(f"nvme_path {nv}")]
    assert "free space unknown (cannot stat the filesystem: Input/output error)" in w and "0.12 GiB" in w


def test_nvme_path_read_only_is_no_go(tmp_path):
    """A read-only bind mount of a real temporary directory (root ignores chmod); /proc when
    mounting is not allowed here."""
    ro = tmp_path / "ro"
    ro.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(ro), str(ro)], capture_output=True).returncode == 0
    if mounted and subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], capture_output=True).returncode != 0:
        subprocess.run(["umount", str(ro)], check=False)
        mounted = False
    target = str(ro) if mounted else "/proc"
    try:
        bin_ = fake_smi(tmp_path, gpus(H100, 8))
        env = {**TORCHRUN_8, "DS_ADVISOR_TEST_DISK_FREE": json.dumps({target: "3.84TB"})}
        rc, d, _ = check([str(nvme_config(tmp_path, target))] + NVME_ARGS, env, bin_)
    finally:
        if mounted:
            subprocess.run(["umount", str(ro)], check=False)
    assert rc == 1 and d["verdict"] == "no-go"
    [p] = d["resources"]["nvme"]
    assert p["exists"] and not p["writable"]
    assert "K103" in codes(d)


def test_nvme_too_small_by_test_hook_is_no_go(tmp_path):
    nv = tmp_path / "nvme"
    nv.mkdir()
    bin_ = fake_smi(tmp_path, gpus(H100, 8))
    env = {**TORCHRUN_8, "DS_ADVISOR_TEST_DISK_FREE": json.dumps({str(nv): 1_000_000})}
    rc, d, _ = check([str(nvme_config(tmp_path, str(nv)))] + NVME_ARGS, env, bin_)
    assert rc == 1 and d["verdict"] == "no-go"
    t = tier(d, "nvme")
    assert t["capacity"] == 1_000_000 and t["need"] > 1_000_000 and t["verdict"] == "no-go"
    assert "K104" in codes(d)


def test_nvme_too_small_on_a_real_tmpfs_is_no_go(tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root?); the test-hook variant covers the logic")
    try:
        bin_ = fake_smi(tmp_path, gpus(H100, 8))
        rc, d, _ = check([str(nvme_config(tmp_path, str(small)))] + NVME_ARGS, TORCHRUN_8, bin_)
    finally:
        subprocess.run(["umount", str(small)], check=False)
    t = tier(d, "nvme")
    assert t["capacity_source"] == "free space (statvfs)" and t["capacity"] <= 1 * MIB
    assert rc == 1 and t["verdict"] == "no-go" and "K104" in codes(d)


def test_nvme_without_libaio_is_no_go(tmp_path):
    nv = tmp_path / "nvme"
    nv.mkdir()
    bin_ = fake_smi(tmp_path, gpus(H100, 8))
    env = {**TORCHRUN_8, "DS_ADVISOR_TEST_DISK_FREE": json.dumps({str(nv): "3.84TB"}), "DS_ADVISOR_TEST_LIBAIO": "0"}
    rc, d, _ = check([str(nvme_config(tmp_path, str(nv)))] + NVME_ARGS, env, bin_)
    assert rc == 1 and "K105" in codes(d) and d["resources"]["libaio"]["found"] is False


def test_nvme_at_stage_2_is_cpu_offload_and_no_path_is_probed(tmp_path):
    cfg = json.loads((SAMPLES / "zero2.json").read_text())
    cfg["zero_optimization"]["offload_optimizer"] = {"device": "nvme", "nvme_path": str(tmp_path / "absent")}
    p = tmp_path / "z2nvme.json"
    p.write_text(json.dumps(cfg))
    bin_ = fake_smi(tmp_path, gpus(H100, 8))
    rc, d, _ = check([str(p), *TINY, "--host-memory", "2TB"], TORCHRUN_8, bin_)
    assert d["resources"]["nvme"] == [] and not {"K102", "K104"} & codes(d)
    assert rc == 0


def test_check_never_imports_torch_or_deepspeed(tmp_path):
    bin_ = fake_smi(tmp_path, gpus(H100, 8))
    code = ("import sys\nfrom advisor.cli import main\n"
            f"try:\n    main(['check', {str(SAMPLES / 'zero2.json')!r}, *{TINY!r}, '-q'])\n"
            "except SystemExit as e:\n    rc = e.code\n"
            "print(rc, sorted(m for m in ('torch', 'deepspeed') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=base_env(bin_, TORCHRUN_8)).stdout
    assert out.strip() == "0 []"


def test_hardware_preset_fills_in_what_the_node_cannot_tell(tmp_path):
    cfg = json.loads(C06.read_text())
    cfg["zero_optimization"]["stage"] = 3
    z3 = tmp_path / "c06_zero3.json"
    z3.write_text(json.dumps(cfg))
    # No nvidia-smi, no launcher variables: the preset gives the shape and the GPU memory.
    # --host-memory: the save's host staging (8 x 4 GB) may exceed this test machine's free memory
    rc, d, _ = check([str(z3), "--params", str(P32B), "--hardware", "dgx-h200", "--host-memory", "2TB"], {})
    assert d["launch"]["world_size"]["value"] == 8 and d["launch"]["world_size"]["source"].startswith("--hardware")
    t = tier(d, "accelerator")
    assert (t["capacity"], t["capacity_source"]) == (143771 * MIB, "--hardware dgx-h200")
    # --params: no activations, the need a lower bound (M104): TIGHT, not GO
    assert rc == EXIT_TIGHT and t["verdict"] == "tight" and d["probe_failed"] is True
    rc, d, _ = check([str(z3), "--params", str(P32B), "--hardware", "dgx-h200", "--strict"], {})
    assert rc == 3
    # The probe beats the preset, with a warning when they disagree.
    bin_ = fake_smi(tmp_path, gpus(H100, 8))
    rc, d, _ = check([str(z3), "--params", str(P32B), "--hardware", "dgx-h200"], TORCHRUN_8, bin_)
    assert tier(d, "accelerator")["capacity"] == 81559 * MIB
    # JSON's warnings name sizes in the default unit system, GiB: 143,771 MiB / 1,024 = 140.40 GiB by hand
    assert any(f"--hardware dgx-h200 says {143771 / 1024:,.2f} GiB" in w for w in d["warnings"]), d["warnings"]
    # the text report names it in its --units, as every other size there: 143,771 MiB and 81,559 MiB / 1e9
    _, text, _ = check([str(z3), "--params", str(P32B), "--hardware", "dgx-h200", "--units", "GB"], TORCHRUN_8, bin_,
                       fmt_json=False)
    text = " ".join(text.split())
    assert f"says {143771 * MIB / 1e9:,.2f} GB per accelerator but this node's smallest has {81559 * MIB / 1e9:,.2f} GB" in text, text
    assert not re.search(r"[0-9] (?:GiB|MiB|TiB)\b", text.replace("4,194,304 B", "")), text
    rc, _, err = check([str(z3), "--params", str(P32B), "--hardware", "dgx-h900"], {})
    assert rc == 2 and "dgx-h" in err


def test_preset_overhead_defaults_apply_only_to_the_presets_gpu(tmp_path):
    """--hardware dgx-h200 gives the fit table the H200 preset's runtime_overhead (its source names
    itself); on a node whose nvidia-smi shows H100s the probe's capacity is used, and so are the
    generic overhead figures (overhead.py's cited source), not the H200's."""
    cfg = json.loads(C06.read_text())
    cfg["zero_optimization"]["stage"] = 3
    z3 = tmp_path / "c06_zero3.json"
    z3.write_text(json.dumps(cfg))

    def sources(d):
        return {o["key"]: o["source"] for o in tier(d, "accelerator")["overhead"]}

    from advisor.cluster.hardware import resolve_hardware
    ro = resolve_hardware("h200").accelerator.runtime_overhead
    preset_src, alloc_src = ro.context_source, ro.allocator_term_source
    _, d, _ = check([str(z3), "--params", str(P32B), "--hardware", "dgx-h200"], {})
    # at ZeRO-3 the allocator's source adds the citations of its wider band after the preset's
    assert sources(d)["cuda_context"] == preset_src and sources(d)["allocator"].startswith(alloc_src + "; ZeRO-3 band")
    bin_ = fake_smi(tmp_path, gpus(H100, 8))
    _, d, _ = check([str(z3), "--params", str(P32B), "--hardware", "dgx-h200"], TORCHRUN_8, bin_)
    assert not any(s.startswith((preset_src, alloc_src)) for s in sources(d).values())
    assert sources(d)["cuda_context"].startswith("pytorch/pytorch issues #107667 and #109888")
    assert any("the generic runtime-overhead figures, not the preset's" in w for w in d["warnings"])


def test_nvme_without_path_reported_once(tmp_path):
    from tests.conftest import run_cli

    """A ZeRO-3 NVMe block with no nvme_path is one finding (lint's O003), not a second check code."""
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                               "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}}))
    p = run_cli(["check", str(cfg), "--params", "1000000", "--world-size", "1", "--gpus-per-node", "1",
                 "--gpu-memory", "80GB", "--host-memory", "64GB", "--format", "json"], env={"PATH": "/nonexistent"})
    d = json.loads(p.stdout)
    at = [f["code"] for f in d["findings"] if f["pointer"].startswith("/zero_optimization/offload_optimizer")]
    assert at.count("O003") == 1 and "K101" not in at, at
    assert p.returncode == 1


def test_check_hf_resolves_auto_like_estimate_hf(tmp_path):
    """check --hf applies the HF Trainer's resolution of "auto" exactly as estimate --hf does
    (one advisor.planning.build_plan), and both equal the estimate of the config resolved by hand
    from the Trainer's rules (transformers integrations/deepspeed.py trainer_config_process /
    trainer_config_finalize with TrainingArguments' defaults: per_device_train_batch_size 8,
    gradient_accumulation_steps 1, no bf16/fp16 flag -> bf16 off; hidden size h = 2048 for
    llama-3.2-1b: reduce_bucket_size h^2, stage3_prefetch_bucket_size int(0.9 h^2),
    stage3_param_persistence_threshold 10 h)."""
    auto = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "train_batch_size": "auto", "bf16": {"enabled": "auto"},
            "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
            "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                                  "stage3_param_persistence_threshold": "auto"}}
    h = 2048
    by_hand = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "train_batch_size": 8 * 8,
               "bf16": {"enabled": False}, "optimizer": {"type": "AdamW", "params": {"lr": 5e-5}},
               "zero_optimization": {"stage": 3, "reduce_bucket_size": h * h,
                                     "stage3_prefetch_bucket_size": int(0.9 * h * h),
                                     "stage3_param_persistence_threshold": 10 * h}}
    (tmp_path / "auto.json").write_text(json.dumps(auto))
    (tmp_path / "hand.json").write_text(json.dumps(by_hand))
    common = ["--model", "llama-3.2-1b", "--world-size", "8", "--gpus-per-node", "8", "--gpu-memory", "80GB",
              "--host-memory", "1TB"]

    def est(cfg, *extra):
        p = subprocess.run([sys.executable, "-m", "advisor", "estimate", str(tmp_path / cfg), *common, *extra,
                            "--format", "json"], env=base_env(), capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert "Traceback" not in p.stderr, p.stderr
        return {r["tier"]: r["need"] for r in json.loads(p.stdout)["fit"]}

    hand = est("hand.json")
    # one difference, the load: under ZeRO-3 the HF Trainer's from_pretrained reads the checkpoint on
    # rank 0 (timeline.hf_state_dict_entries), N x 2 B for llama-3.2-1b's bf16 checkpoint, host
    # memory otherwise empty (no offload); a plain script builds the model itself under zero.Init
    via_hf = est("auto.json", "--hf")
    # ... but the host's need is the checkpoint save's on both: each of the 8 ranks' torch.save
    # copies its fp32 sub-group partition (N / 8 elements x 4 B; llama-3.2-1b's tensors divide by
    # 8) to the host at once (torch/serialization.py l.1290-1310): N x 4 B, more than the load's N x 2 B
    assert via_hf == hand and hand["host"] == 1_235_814_400 * 4
    code, d, err = check([str(tmp_path / "auto.json"), *common, "--hf"])
    assert "Traceback" not in err, err
    assert {t["tier"]: t["need"] for t in d["tiers"]} == {k: v for k, v in via_hf.items() if k != "nvme"}
    # and without --hf DeepSpeed itself reads "auto" raw: train_batch_size "auto" is a TypeError while
    # the config is built (rule A001's docstring, verified on 0.19.8), so no verdict per tier, exit 1
    code, d2, err = check([str(tmp_path / "auto.json"), *common])
    assert code == 1 and d2["tiers"] == [] and "A001" in {f["code"] for f in d2["findings"]}


RTX4090 = ("NVIDIA GeForce RTX 4090", 24564)  # 24 GiB card as nvidia-smi reports it (MiB)


def test_7b_zero3_on_24gb_cards_is_tight_exit_4_and_allow_tight_makes_it_0(tmp_path):
    """The issue's example on 8 x 24 GB cards with 1,700 MiB used by something else (a display):
    free 22,864 MiB = 23.97 GB. Tracked peak about 18.0 GB + CUDA context 400 MiB + NCCL 256 MiB
    (1 communicator x 16 channels x 2 x 4 MiB x 2) + allocator 10% leaves about 3.5 GB, inside
    the overhead's band (up to +0.6 GiB context, +256 MiB NCCL, +40% allocator: at ZeRO-3 the band
    reaches 50%, meta-llama/llama-cookbook #120's max reserved 63 GB over max allocated 42 GB): tight,
    exit 4."""
    cfg = tmp_path / "z3.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                               "zero_optimization": {"stage": 3}, "optimizer": {"type": "AdamW"}}))
    bin_ = fake_smi(tmp_path, gpus(RTX4090, 8, used=1700))
    args = [str(cfg), "--model", "llama-2-7b", "--seq-len", "2048", "--checkpointing", "full",
            "--host-memory", "256GB"]
    rc, d, err = check(args, TORCHRUN_8, bin_)
    t = tier(d, "accelerator")
    assert t["capacity"] == (24564 - 1700) * MIB
    by_hand = t["tracked"] + 400 * MIB + 256 * MIB + -(-t["tracked"] // 10)
    assert t["need"] == by_hand
    unc = (1024 - 400) * MIB + 256 * MIB + (-(-t["tracked"] * (63 - 42) // 42) - -(-t["tracked"] // 10))
    assert 0 <= t["headroom"] < unc == t["uncertainty"]
    assert (rc, d["verdict"], t["verdict"], d["exit_code"]) == (4, "tight", "tight", 4), err
    assert {o["key"] for o in t["overhead"]} == {"cuda_context", "nccl", "allocator", "deepspeed"}
    assert "M102" in codes(d)
    rc, d, _ = check(args + ["--allow-tight"], TORCHRUN_8, bin_)
    assert (rc, d["verdict"]) == (0, "tight") and any("--allow-tight" in w for w in d["warnings"])
    rc, out, _ = check(args, TORCHRUN_8, bin_, fmt_json=False)
    assert rc == 4 and "TIGHT (exit 4)" in out and "+ NCCL communicator buffers" in out
    # a measured overhead, given per term, collapses the band: the same node then goes
    rc, d, _ = check(args + ["--runtime-overhead", "cuda_context=500MiB,nccl=300MiB,allocator=1GiB,deepspeed=0"],
                     TORCHRUN_8, bin_)
    assert rc == 0 and d["verdict"] == "go"


def test_check_set_equals_the_edited_file(tmp_path):
    """check --set KEY.PATH=VALUE goes through the same override as lint/estimate
    (advisor.config.overrides, applied in read_input): C06 at ZeRO-2 is no-go on 8 x H200, and
    --set zero_optimization.stage=3 gives the verdict and need of the file edited to stage 3,
    leaving the file as it was."""
    bin_ = fake_smi(tmp_path, gpus(H200, 8))
    before = C06.read_text()
    rc2, d2, _ = check([str(C06), "--params", str(P32B), "--gpu-memory", "100GB"], TORCHRUN_8, bin_)
    assert rc2 == 1 and d2["verdict"] == "no-go"
    # --host-memory: the save's host staging (8 x 4 GB) may exceed this test machine's free memory
    rc, via_set, _ = check([str(C06), "--params", str(P32B), "--set", "zero_optimization.stage=3",
                            "--host-memory", "2TB"], TORCHRUN_8, bin_)
    cfg = json.loads(before)
    cfg["zero_optimization"]["stage"] = 3
    z3 = tmp_path / "c06_zero3.json"
    z3.write_text(json.dumps(cfg))
    rc3, edited, _ = check([str(z3), "--params", str(P32B), "--host-memory", "2TB"], TORCHRUN_8, bin_)
    assert (rc, via_set["verdict"]) == (rc3, edited["verdict"]) == (EXIT_TIGHT, "tight")  # --params: M104's floor
    assert tier(via_set, "accelerator")["need"] == tier(edited, "accelerator")["need"]
    assert C06.read_text() == before
    rc, _, err = check([str(C06), "--params", str(P32B), "--set", "zero_optimization"], TORCHRUN_8, bin_)
    assert rc == 2 and "--set" in err and "Traceback" not in err


def test_check_and_estimate_hf_refuse_what_the_trainer_refuses_with_its_default_arguments(tmp_path):
    """Issue #19 (newcomer 3): check --hf printed GO and estimate --hf an estimate for a config the
    Trainer refuses with TrainingArguments' defaults, while lint --hf reported the H001 errors.
    The refusal is transformers' own: HfTrainerDeepSpeedConfig.trainer_config_process with a default
    TrainingArguments (gradient_accumulation_steps 1, bf16 False) then trainer_config_finalize
    raises the mismatch ValueError naming both keys. check --hf must then be NO-GO (exit 1, no tier
    verdict), estimate --hf give no fit rows, both with lint --hf's H001 findings."""
    pytest.importorskip("transformers")
    import types

    from transformers import TrainingArguments
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    raw = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 4, "train_batch_size": "auto",
           "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}
    cfg = tmp_path / "ga.json"
    cfg.write_text(json.dumps(raw))
    targs = TrainingArguments(output_dir=str(tmp_path / "out"))
    c = HfTrainerDeepSpeedConfig(json.loads(json.dumps(raw)))
    c.trainer_config_process(targs)
    model = types.SimpleNamespace(config=types.SimpleNamespace(hidden_size=768))
    with pytest.raises(ValueError) as e:
        c.trainer_config_finalize(targs, model, 10)
    refused = {k for k in ("gradient_accumulation_steps", "bf16.enabled") if f"- ds {k}=" in str(e.value)}
    assert refused == {"gradient_accumulation_steps", "bf16.enabled"}, str(e.value)

    def h001(findings):
        return sorted(f["data"]["key"] for f in findings if f["code"] == "H001")

    common = ["--model", "gpt2", "--world-size", "1", "--hf"]
    p = subprocess.run([sys.executable, "-m", "advisor", "lint", str(cfg), "--hf", "--format", "json"],
                       env=base_env(), capture_output=True, text=True, timeout=120, cwd=ROOT)
    lint_h001 = h001([f for file in json.loads(p.stdout)["files"] for f in file["findings"]])
    assert set(lint_h001) == refused
    code, d, err = check([str(cfg), *common, "--gpu-memory", "80GB", "--host-memory", "1TB"])
    assert "Traceback" not in err, err
    assert code == 1 and d["tiers"] == [] and h001(d["findings"]) == lint_h001, d
    p = subprocess.run([sys.executable, "-m", "advisor", "estimate", str(cfg), *common, "--format", "json"],
                       env=base_env(), capture_output=True, text=True, timeout=120, cwd=ROOT)
    out = json.loads(p.stdout)
    assert not out.get("fit") and h001(out["findings"]) == lint_h001, out


def test_world_size_from_hardware_names_the_flag_once(tmp_path):
    """Issue #17 item 6: the launch table said "from --hardware dgx-h100:2: 2 nodes x --hardware
    dgx-h100:2". dgx-h100 is 8 GPUs per node (data/hardware_presets.json), so 2 nodes = 16 ranks."""
    rc, d, err = check([str(SAMPLES / "zero2.json"), "--params", "1000000", "--hardware", "dgx-h100:2"])
    src = d["launch"]["world_size"]["source"]
    assert d["launch"]["world_size"]["value"] == 16
    assert src.count("--hardware dgx-h100:2") == 1 and "2 nodes x 8 ranks per node" in src, src


def test_check_takes_estimates_load_options_c11_20b_zero2_on_256gb(tmp_path):
    """Issue #15's example: a 20B model, ZeRO-2, 4 ranks on a node with 256 GB of host memory.
    Without deepspeed.zero.Init every rank builds the whole model in host memory before
    deepspeed.initialize: 4 ranks x 4 B x 20e9 = 320 GB > 256 GB, so check says no-go with M101;
    check takes estimate's load options with the same meaning (cli._load_options)."""
    from tests.test_timeline import C11
    cfg = tmp_path / "c11.json"
    cfg.write_text(json.dumps(C11))
    bin_ = fake_smi(tmp_path, gpus(H200, 4))
    env = {"WORLD_SIZE": "4", "RANK": "0", "LOCAL_WORLD_SIZE": "4", "LOCAL_RANK": "0"}
    args = [str(cfg), "--params", "20000000000", "--host-memory", "256GB"]
    N = 20_000_000_000
    rc, d, err = check(args, env, bin_)
    assert (rc, d["verdict"]) == (1, "no-go") and "M101" in codes(d), err
    assert d["load"]["host_per_node"] == 4 * 4 * N and d["load"]["ranks_per_node"] == 4
    assert not d["load"]["zero_init"] and d["load"]["dtype"] == "fp32"
    # --load-dtype bf16: 2 B instead of 4 per parameter on each of the 4 ranks: 160 GB less per node
    rc, d16, _ = check(args + ["--load-dtype", "bf16"], env, bin_)
    assert d["load"]["host_per_node"] - d16["load"]["host_per_node"] == 4 * (4 - 2) * N
    assert d16["load"]["dtype"] == "bf16" and "M101" not in codes(d16)
    # --no-low-cpu-mem-usage: the random-init model plus the loaded state dict, twice the bytes
    rc, d2, _ = check(args + ["--load-dtype", "bf16", "--no-low-cpu-mem-usage"], env, bin_)
    assert d2["load"]["host_per_node"] == 2 * 4 * 2 * N and "M101" in codes(d2)
    # zero.Init partitions for ZeRO-3 only: at stage 2 --zero-init is ignored, said so, verdict unchanged
    rc, dz, _ = check(args + ["--zero-init"], env, bin_)
    assert not dz["load"]["zero_init"] and "ignored" in dz["load"]["zero_init_source"]
    assert dz["verdict"] == "no-go" and "M101" in codes(dz)
    # M101's fix: ZeRO-3 under zero.Init (the default there): nothing whole at load, go
    z3 = args + ["--set", "zero_optimization.stage=3"]
    rc, d3, err = check(z3, env, bin_)
    assert (rc, d3["verdict"]) == (EXIT_TIGHT, "tight"), (err, d3["findings"])  # fits; --params: a floor (M104)
    assert d3["load"]["zero_init"] and d3["load"]["host_per_node"] == 0
    # ... and the same ZeRO-3 config built without zero.Init is no-go at load again
    rc, dn, _ = check(z3 + ["--no-zero-init"], env, bin_)
    assert (rc, dn["verdict"]) == (1, "no-go") and "M101" in codes(dn)
    assert dn["load"]["host_per_node"] == 4 * 4 * N


def test_more_ranks_per_node_than_world_size_is_refused_naming_both(tmp_path):
    # newcomer D10, then fixa22: torchrun sets LOCAL_WORLD_SIZE to the ranks on this node, all counted
    # in WORLD_SIZE; LOCAL_WORLD_SIZE=8 with WORLD_SIZE=4 was a K111 warning beside "ranks per node 8 /
    # this node ranks 0-3". A malformed launch is refused (exit 2, one line naming both), as estimate does.
    bin_ = fake_smi(tmp_path, gpus(H100, 8))
    args = [str(SAMPLES / "zero2.json"), "--params", "1000000"]
    rc, _, err = check(args, {"WORLD_SIZE": "4", "RANK": "0", "LOCAL_WORLD_SIZE": "8", "LOCAL_RANK": "0"}, bin_)
    line, = err.strip().splitlines()
    assert rc == 2 and "LOCAL_WORLD_SIZE=8" in line and "WORLD_SIZE=4" in line, err
    _, d, _ = check(args, {"WORLD_SIZE": "4", "RANK": "0", "LOCAL_WORLD_SIZE": "4", "LOCAL_RANK": "0"}, bin_)
    assert "K111" not in codes(d)
