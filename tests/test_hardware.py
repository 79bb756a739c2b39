"""Hardware specs: presets against the schema, the loader's one-line errors, nvme_path -> tier."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from advisor.errors import HardwareSpecError
from advisor.cluster.hardware import (Endurance, from_dict, list_hardware, load_hardware, preset_data,
                              resolve_hardware)

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "schemas" / "hardware.schema.json").read_text())


def _validator(defn: str | None = None):
    s = SCHEMA if defn is None else {**SCHEMA["$defs"][defn], "$defs": SCHEMA["$defs"]}
    return jsonschema.Draft202012Validator(s)


def test_schema_is_valid_2020_12():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("name", sorted(preset_data()["systems"]))
def test_system_presets_validate_against_the_schema(name):
    errs = [e.message for e in _validator().iter_errors(preset_data()["systems"][name])]
    assert not errs


@pytest.mark.parametrize("name", sorted(preset_data()["accelerators"]))
def test_accelerator_presets_validate_and_cite_a_data_sheet(name):
    a = preset_data()["accelerators"][name]
    assert not [e.message for e in _validator("accelerator").iter_errors(a)]
    assert "data sheet" in a["source"] or "whitepaper" in a["source"]


def test_every_storage_tier_says_where_its_numbers_come_from():
    for name, s in preset_data()["systems"].items():
        for t in s.get("storage", []):
            assert t.get("source"), (name, t["name"])


@pytest.mark.parametrize("preset,total_gpu_memory", [
    # totals as NVIDIA's DGX BasePOD reference architecture states them (independent of the
    # per-GPU figures in the preset file): 1,440 GB ("1.4TB", B200). This preset has no
    # driver-reported total, so it keeps the data sheet's GB. (H200: the driver's figure below.)
    ("dgx-b200", 1440e9)])
def test_node_gpu_memory_matches_the_system_data_sheet_total(preset, total_gpu_memory):
    hw = resolve_hardware(preset)
    assert hw.accelerators_per_node * hw.accelerator.memory_bytes == total_gpu_memory


@pytest.mark.parametrize("preset,smi_mib", [
    # nvidia-smi's memory.total as users' public reports print it (not the data sheet's GB):
    # H100 80GB HBM3 81559MiB (NVIDIA/nccl#1264), A100 80GB 81920MiB and 40GB 40960MiB and
    # L40S 46068MiB (modal-labs/modal-client#2797), RTX 4090 24564MiB (RLinf/RLinf#255); H200
    # 143771MiB as nvidia-smi printed it on the device tool's lent H200 (its KINDS.md, 2026-10-27)
    ("h100-sxm-80gb", 81559), ("a100-80gb", 81920), ("a100-40gb", 40960), ("l40s", 46068), ("rtx-4090", 24564),
    ("h200", 143771)])
def test_capacity_is_what_the_driver_reports(preset, smi_mib):
    acc = resolve_hardware(preset).accelerator
    assert acc.memory_bytes == smi_mib * 2**20 and f"{smi_mib}MiB" in acc.source
    # the H100 data sheet's "80GB" is 80e9 bytes, 6.9% less than what check reads on the node
    if preset == "h100-sxm-80gb":
        assert acc.memory_bytes / 80e9 - 1 == pytest.approx(0.069, abs=0.001)


def test_dense_flops_are_half_the_sparsity_figure_where_the_sheet_prints_sparsity():
    # H100 SXM data sheet: BF16 1,979 TFLOPS "with sparsity"; MI300X: 2,614.9 with sparsity.
    assert resolve_hardware("h100-sxm-80gb").accelerator.peak_bf16_flops == pytest.approx(1979e12 / 2, rel=1e-3)
    assert resolve_hardware("mi300x").accelerator.peak_bf16_flops == pytest.approx(2614.9e12 / 2, rel=1e-3)


def test_list_and_resolve_every_preset():
    names = [h.name for h in list_hardware()]
    for needed in ("a100-40gb", "a100-80gb", "h100-sxm-80gb", "h200", "b200", "mi300x", "l40s", "rtx-4090",
                   "dgx-h100", "workstation-4090"):
        assert needed in names
    hw = resolve_hardware("DGX-H100:4")
    assert (hw.nodes, hw.accelerators_per_node, hw.total_accelerators) == (4, 8, 32)
    only = resolve_hardware("h200")
    assert only.storage == () and only.host_memory_bytes is None and only.accelerator.memory_bytes == 143771 * 2**20


def test_unknown_preset_suggests_close_names():
    with pytest.raises(HardwareSpecError, match="did you mean dgx-h100"):
        resolve_hardware("dgx-h10")
    with pytest.raises(HardwareSpecError, match="node count"):
        resolve_hardware("dgx-h100:0")


# ---------------------------------------------------------------------------------------------
# nvme_path -> storage tier


def _tiers_hw():
    return from_dict({
        "nodes": 1, "accelerators_per_node": 8, "accelerator": "h100-sxm-80gb",
        "storage": [
            {"name": "root", "mounts": ["/"], "capacity_bytes": 1e12, "read_bytes_per_s": 1e9,
             "write_bytes_per_s": 1e9, "access": "read-write"},
            {"name": "raid", "mounts": ["/raid"], "capacity_bytes": 3e13, "read_bytes_per_s": 5e10,
             "write_bytes_per_s": 3e10, "access": "read-write"},
            {"name": "qlc", "mounts": ["/raid/qlc", "/mnt/flash"], "capacity_bytes": 6e13, "read_bytes_per_s": 7e9,
             "write_bytes_per_s": 3e9, "access": "read-oriented", "endurance": {"dwpd": 0.5, "warranty_years": 5}},
        ]}, "t.json")


@pytest.mark.parametrize("path,tier", [
    ("/raid/ds_swap", "raid"),
    ("/raid", "raid"),
    ("/raid/", "raid"),
    ("/raid/qlc/swap", "qlc"),      # longest mount wins
    ("/raid/qlcx/swap", "raid"),    # component-wise: /raid/qlcx is not under /raid/qlc
    ("/raid2/swap", "root"),        # nor is /raid2 under /raid
    ("/mnt/flash/x", "qlc"),        # second mount point of the same tier
    ("/raid/qlc/../swap", "raid"),  # normalised
    ("/home/u", "root"),
])
def test_nvme_path_maps_to_the_longest_mount_prefix(path, tier):
    assert _tiers_hw().tier_for_path(path).name == tier


def test_no_tier_for_relative_or_missing_paths():
    hw = _tiers_hw()
    assert hw.tier_for_path(None) is None and hw.tier_for_path("relative/dir") is None
    no_root = from_dict({"base": "dgx-h200"})
    assert no_root.tier_for_path("/scratch/x") is None


def test_capacity_for_estimate_from_a_spec_with_base_override():
    # C08's workstation: a 24 GB GPU with 31 GB of host memory
    hw = from_dict({"base": "workstation-4090", "host_memory_bytes": 31e9})
    cap = hw.capacity("/mnt/nvme0/ds_swap")
    assert (cap.accelerator, cap.host, cap.nvme) == (24564 * 2**20, 31e9, 2e12)


# ---------------------------------------------------------------------------------------------
# endurance rating, by hand


def test_rated_write_bytes_by_hand():
    # 1,200 TBW = 1.2e15 bytes
    assert Endurance(tbw=1200).rated_bytes(2e12) == 1.2e15
    # 1 DWPD for 5 years on 3.84 TB: 3.84e12 x 365 x 5 = 7.008e15 bytes
    assert Endurance(dwpd=1, warranty_years=5).rated_bytes(3.84e12) == pytest.approx(7.008e15)
    assert _tiers_hw().storage[2].rated_write_bytes == pytest.approx(0.5 * 6e13 * 365 * 5)


# ---------------------------------------------------------------------------------------------
# spec files: one-line errors naming the file and the key; the schema agrees


BAD = [
    ({"nodes": 1, "accelerators_per_node": 1, "accelerator": "h100-sxm-80gb", "hostmemory_bytes": 1}, "/hostmemory_bytes"),
    ({"nodes": 0, "accelerators_per_node": 1, "accelerator": "h100-sxm-80gb"}, "/nodes"),
    ({"nodes": 1, "accelerators_per_node": 1, "accelerator": "h100-pcie"}, "/accelerator"),
    ({"nodes": 1, "accelerators_per_node": 1, "accelerator": {"name": "x"}}, "/accelerator"),
    ({"base": "workstation-4090", "storage": [{"name": "s", "mounts": ["/"], "capacity_bytes": 1,
                                               "read_bytes_per_s": 1, "write_bytes_per_s": 1,
                                               "access": "write-mostly"}]}, "/storage/0/access"),
    ({"base": "workstation-4090", "storage": [{"name": "s", "mounts": ["scratch"], "capacity_bytes": 1,
                                               "read_bytes_per_s": 1, "write_bytes_per_s": 1,
                                               "access": "read-write"}]}, "/storage/0/mounts/0"),
    ({"base": "workstation-4090", "storage": [{"name": "s", "mounts": ["/"], "capacity_bytes": 1,
                                               "read_bytes_per_s": 1, "write_bytes_per_s": -1,
                                               "access": "read-write"}]}, "/storage/0/write_bytes_per_s"),
    ({"base": "workstation-4090", "storage": [{"name": "s", "mounts": ["/"], "capacity_bytes": 1,
                                               "read_bytes_per_s": 1, "write_bytes_per_s": 1,
                                               "access": "read-write",
                                               "endurance": {"tbw": 600, "dwpd": 1}}]}, "/storage/0/endurance"),
    ({"base": "workstation-4090", "storage": [{"name": "s", "mounts": ["/"], "capacity_bytes": 1,
                                               "read_bytes_per_s": 1, "write_bytes_per_s": 1,
                                               "access": "read-write", "endurance": {"dwpd": 1}}]},
     "/storage/0/endurance"),
]


@pytest.mark.parametrize("spec,pointer", BAD)
def test_bad_specs_fail_in_loader_and_schema(tmp_path, spec, pointer):
    f = tmp_path / "spec.json"
    f.write_text(json.dumps(spec))
    with pytest.raises(HardwareSpecError) as ei:
        load_hardware(str(f))
    msg = str(ei.value)
    assert "\n" not in msg and msg.startswith(str(f)) and pointer in msg
    if spec.get("accelerator") != "h100-pcie":  # an unknown preset name is only the loader's business
        assert list(_validator().iter_errors(spec)), f"schema accepts {spec}"


def test_unknown_key_gets_a_did_you_mean(tmp_path):
    f = tmp_path / "spec.json"
    f.write_text(json.dumps({"base": "dgx-h100", "network_byte_per_s": 1}))
    with pytest.raises(HardwareSpecError, match="did you mean 'network_bytes_per_s'"):
        load_hardware(str(f))


def test_unreadable_files(tmp_path):
    with pytest.raises(HardwareSpecError, match="cannot read"):
        load_hardware(str(tmp_path / "missing.json"))
    f = tmp_path / "bad.json"
    f.write_text('{"nodes": 1,,}')
    with pytest.raises(HardwareSpecError, match=r"bad\.json:1:\d+: not valid JSON"):
        load_hardware(str(f))


def test_good_spec_file_round_trip(tmp_path):
    spec = {"name": "lab", "nodes": 2, "accelerators_per_node": 4,
            "accelerator": {"name": "X1", "memory_bytes": 64e9, "peak_bf16_flops": 4e14,
                            "host_link": {"name": "PCIe Gen5 x16", "bytes_per_s": 6.4e10}},
            "host_memory_bytes": 1e12, "network_bytes_per_s": 1e11,
            "storage": [{"name": "scratch", "mounts": ["/scratch"], "capacity_bytes": 7.68e12,
                         "read_bytes_per_s": 1.4e10, "write_bytes_per_s": 6e9, "access": "read-oriented",
                         "endurance": {"tbw": 14000}}]}
    assert not list(_validator().iter_errors(spec))
    f = tmp_path / "lab.json"
    f.write_text(json.dumps(spec))
    hw = resolve_hardware(str(f))
    assert (hw.name, hw.total_accelerators, hw.host_link_bytes_per_s) == ("lab", 8, 6.4e10)
    t = hw.tier_for_path("/scratch/ds")
    assert t.read_oriented and t.rated_write_bytes == 1.4e16


# ---------------------------------------------------------------------------------------------
# the `hardware` command


def run_cli(args):
    import os
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True, text=True, timeout=120,
                       env={k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "SLURM_NTASKS")})
    return p


def test_hardware_command_lists_and_shows_presets(tmp_path):
    p = run_cli(["hardware"])
    assert p.returncode == 0
    for name in ("dgx-h100", "workstation-4090", "mi300x", "rtx-4090"):
        assert name in p.stdout
    p = run_cli(["hardware", "workstation-4090", "--format", "json"])
    d = json.loads(p.stdout)
    assert d["storage"][0]["endurance"]["tbw"] == 1200  # 1,200 TBW (the preset's data sheet figure)
    p = run_cli(["hardware", "dgx-h10"])
    assert p.returncode == 2 and "did you mean dgx-h100" in p.stderr and p.stderr.count("\n") == 1
    f = tmp_path / "bad.json"
    f.write_text('{"base": "dgx-h100", "storage": [{"name": "x"}]}')
    p = run_cli(["hardware", str(f)])
    assert p.returncode == 2 and "bad.json: /storage/0" in p.stderr


@pytest.mark.parametrize("text,expect", [("80GB", 80e9), ("80 GiB", 80 * 2**30), ("31e9B", 31e9), ("512MiB", 2**29)])
def test_sizes_with_units(text, expect):
    from advisor.units import parse_size
    assert parse_size(text) == expect


@pytest.mark.parametrize("flag", ["--gpu-memory", "--host-memory"])
def test_a_bare_number_for_a_memory_flag_is_refused_not_read_as_bytes(tmp_path, flag):
    from tests.conftest import run_cli
    cfg = tmp_path / "ds.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": 1}')
    p = run_cli(["estimate", str(cfg), "--params", "1000000", flag, "80"])
    assert p.returncode == 2 and "no unit" in p.stderr and "80GB" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("units,base", [("GiB", 2**30), ("GB", 1e9)])
def test_hardware_listing_has_labelled_columns_in_the_chosen_units(units, base):
    """Each row's memory and host-memory columns equal the preset's bytes (--format json) / 2^30
    or / 1e9 by hand; the header names the unit; no figure of the other unit system is printed."""
    presets = {h["name"]: h for h in json.loads(run_cli(["hardware", "--format", "json"]).stdout)}
    p = run_cli(["hardware", "--units", units])
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["preset", "GPUs", "accelerator", "memory", units, "host", units, "storage",
                                "(tier:mount)"]
    h100 = next(x for x in lines if x.startswith("dgx-h100 "))
    mem = presets["dgx-h100"]["accelerator"]["memory_bytes"]  # 81,559 MiB (nvidia-smi)
    host = presets["dgx-h100"]["host_memory_bytes"]  # 2 TB
    assert f" {mem / base:,.1f} " in h100 and f" {host / base:,.0f} " in h100, h100
    one = run_cli(["hardware", "dgx-h100", "--units", units]).stdout
    other = "GB" if units == "GiB" else "GiB"
    assert f"{mem / base:,.2f} {units}," in one and f"host memory {host / base:,.2f} {units} per node" in one
    raid = presets["dgx-h100"]["storage"][0]
    tb = 2**40 if units == "GiB" else 1e12
    assert f"{raid['capacity_bytes'] / tb:,.2f} {'TiB' if units == 'GiB' else 'TB'}" in one
    assert f"write {raid['write_bytes_per_s'] / base:,.2f} {units}/s" in one
    body = one.split("\n  source:")[0]  # the last entry, folded or not: the data sheet's own words
    assert not re.search(rf"[0-9] {other}\b", body), body


def test_hardware_text_names_each_tiers_request_latency():
    """The aio model's request latencies per tier (advisor.ledger.movement.nvme_rate): a tier's own
    read_latency_s / write_latency_s in microseconds, else the assumed NVME_LATENCY_S (85 / 20 us),
    said to be assumed; the aio settings a tier's figures were measured at."""
    from advisor.render.text import hardware_text
    base = {"nodes": 1, "accelerators_per_node": 1, "accelerator": {"name": "toy", "memory_bytes": 1e11}}
    tier = {"name": "n", "mounts": ["/n"], "capacity_bytes": 1e13, "read_bytes_per_s": 1e9, "write_bytes_per_s": 1e9,
            "access": "read-write"}
    own = from_dict({**base, "storage": [{**tier, "read_latency_s": 1.3e-3, "write_latency_s": 6.5e-5,
                                          "aio": {"queue_depth": 32}}]})
    text = hardware_text([own], one=True)
    assert "requests start in 1,300 us reading, 65 us writing; figures measured at aio queue_depth 32" in text
    assert "assumed" not in text.split("storage n", 1)[1].split("\n", 1)[0]
    sheet = hardware_text([from_dict({**base, "storage": [tier]})], one=True)
    assert "requests start in 85 us reading, 20 us writing (assumed" in sheet


@pytest.mark.parametrize("key,value", [("peak_bf16_flops", 1e-300), ("memory_bytes", 1e308),
                                       ("memory_bandwidth_bytes_per_s", 1e300)])
def test_absurd_finite_hardware_numbers_are_refused_naming_the_key(tmp_path, key, value):
    """Finite but absurd values passed the validation layer: peak_bf16_flops 1e-300 made
    estimate's step_time_s Infinity in JSON and SARIF, memory_bytes 1e308 printed 300-digit
    headroom (newcomers nc21, nc21b). One range for every hardware number, one line naming it."""
    from tests.conftest import run_cli
    data = preset_data()
    spec = dict(data["systems"]["dgx-h100"])
    acc = dict(data["accelerators"][spec["accelerator"]])
    acc[key] = value
    f = tmp_path / "hw.json"
    f.write_text(json.dumps({**spec, "accelerator": acc}))
    p = run_cli(["estimate", "sample_configs/zero2.json", "--model", "gpt2", "--hardware", str(f), "--format", "json"])
    assert p.returncode == 2 and "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
    assert key in p.stderr and "hw.json" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
