"""The pre-launch gate: will this config fit on the node it is about to run on?

``ds-advisor check`` runs as the first line of an sbatch or torchrun script, on each node. It

1. discovers the launch shape from flags and the launcher's environment
   (:func:`advisor.cluster.launch.discover_launch`), each value with its source;
2. probes this node: accelerator memory (``nvidia-smi``'s CSV query, else ``rocm-smi --json``,
   else torch *only if the caller already imported it*: this module never imports torch or
   deepspeed), host memory (``/proc/meminfo`` MemAvailable), and every ``nvme_path`` that
   ZeRO-3 will swap to (exists, writable, free space against the swap files of this node's
   ranks, libaio loadable);
3. runs lint and the estimate (the ledger) against what it found, and gives a go / no-go
   verdict per tier with the headroom.

Capacities, in order of precedence: a flag (``--gpu-memory``, ``--host-memory``), the probe,
then the ``--hardware`` spec (:func:`advisor.cluster.hardware.resolve_hardware`). Exit codes (:data:`EXIT_OK` ...): 0 go; 1 no-go (a tier does not fit,
or an error-level finding); 2 bad usage or unreadable input (raised by the caller); 3 with
``strict`` only: a probe failed (without ``strict`` that is a warning and the flags / spec
are used; a tier with no capacity at all is reported "unknown" and does not block); 4 tight:
a tier fits only inside the uncertainty of the runtime overhead terms (the estimate's
fits / tight / does not fit verdict, rule M102); with ``allow_tight`` that is a warning and 0.

Test-only hooks (documented so that nobody uses them in production):

* ``DS_ADVISOR_TEST_DISK_FREE``: a JSON object ``{"<nvme_path>": bytes or "10GB", ...}`` that
  replaces the free space :func:`shutil.disk_usage` reports for those paths (same as the
  ``disk_free`` parameter of :func:`probe_nvme_paths` / :func:`run_check`);
* ``DS_ADVISOR_TEST_LIBAIO``: ``0`` or ``1`` forces libaio to be reported missing or present.
"""

from __future__ import annotations

from advisor.config.versions import accounting_note, current_release, release_dict

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from advisor.errors import EXIT_FINDINGS, EXIT_OK, EXIT_PROBE, EXIT_TIGHT
from advisor.rules import emit
from advisor.findings import Finding, literal, render_sized, sort_findings
from advisor.errors import cut
from advisor.cluster.launch import (Found, LaunchShape, accelerator_alone_problem, checked_node_count, discover_launch,
                                    unlaunched_world_size)
from advisor.ledger.ranks import RankSet
from advisor.config.validation import MAX_GPUS_PER_NODE, as_float, as_int
from advisor.units import DEFAULT_UNITS

if TYPE_CHECKING:
    from advisor.views.workload import ResolvedWorkload  # imported lazily at run time
    from advisor.config.effective import EffectiveConfig
    from advisor.views.estimate import EstimateResult
    from advisor.cluster.hardware import Hardware
    from advisor.model.inventory import Inventory
    from advisor.config.loading import LoadedConfig

CHECK_SCHEMA_VERSION = 3  # 3: "deepspeed" (always 0.19.8) -> accounting_release; 2: launch.node_ranks is {rank_count, rank_ranges} (1 listed every rank)
#: Seconds an accelerator tool (nvidia-smi, rocm-smi) may take before the probe gives up.
PROBE_TIMEOUT_S = 10.0
NVIDIA_SMI_QUERY = ["--query-gpu=index,name,memory.total,memory.used", "--format=csv,noheader,nounits"]
ROCM_SMI_QUERY = ["--showmeminfo", "vram", "--json"]
MIB = 1 << 20
#: At most this many bytes of a probe tool's stdout (and of its stderr) are read; past it the tool
#: is killed (nvidia-smi's CSV for 8 GPUs is ~400 bytes).
MAX_PROBE_BYTES = 1 << 20
#: Largest accelerator memory a probe may report, MiB (1 PiB: any more is a broken tool or driver).
MAX_DEVICE_MIB = 1 << 30


def _probe_error(source: str, problem: str, line: int | None = None, column: int | None = None) -> Exception:
    where = source + (f":{line}:{column}" if line is not None else "")
    return ValueError(f"{where}: {problem}")


# --- accelerators ------------------------------------------------------------------------

@dataclass(frozen=True)
class Device:
    """One accelerator as the probe saw it (bytes)."""

    index: str
    name: str
    total: int
    used: int

    @property
    def free(self) -> int:
        """Total minus used: what a new process can still allocate."""
        return max(0, self.total - self.used)


@dataclass
class AcceleratorProbe:
    """The accelerators this node's ranks may use, or why they could not be found.

    ``devices`` is already filtered by CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES when the ids
    are indices the tool reported. ``source`` names the tool (with its path) or "torch".
    """

    devices: list[Device] = field(default_factory=list)
    source: str | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when at least one device was found and no tool failed."""
        return self.error is None and bool(self.devices)

    def per_rank_capacity(self) -> int | None:
        """The smallest free memory among the devices (a rank may land on any of them)."""
        return min((d.free for d in self.devices), default=None)


def parse_nvidia_smi_csv(text: str) -> list[Device]:
    """Parse ``nvidia-smi --query-gpu=index,name,memory.total,memory.used
    --format=csv,noheader,nounits`` output (memory in MiB), e.g.
    ``0, NVIDIA H100 80GB HBM3, 81559, 0``. Raises ValueError on a malformed line; a line whose
    memory reads ``[N/A]`` / ``[Not Supported]`` raises too (MIG or a broken driver)."""
    out: list[Device] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            raise ValueError(f"unexpected nvidia-smi line: {cut(repr(line.strip()), 200)}")
        index, name, total, used = parts[0], ", ".join(parts[1:-2]), parts[-2], parts[-1]
        # four fields were asked for (NVIDIA_SMI_QUERY); a name may hold commas, but a name part
        # that is a number (or [N/A]) means more fields than asked: the columns would be shifted
        # (newcomer D9: "0, NVIDIA H100 80GB HBM3, 81559, 0, 0" read as 0 MiB total)
        extra = [x for x in parts[2:-2] if _numeric_field(x)]
        if extra:
            raise ValueError(f"unexpected nvidia-smi line ({len(parts)} fields, expected 4: index, name, "
                             f"memory.total, memory.used): {cut(repr(line.strip()), 200)}")
        if not index.isdigit():
            raise ValueError(f"unexpected nvidia-smi line (index {cut(repr(index), 40)} is not a GPU number): "
                             f"{cut(repr(line.strip()), 200)}")
        try:
            t = as_float(total, f"nvidia-smi memory.total of GPU {index}", lo=0, hi=MAX_DEVICE_MIB)
            u = as_float(used, f"nvidia-smi memory.used of GPU {index}", lo=0, hi=MAX_DEVICE_MIB)
        except ValueError as e:
            raise ValueError(f"nvidia-smi reports no memory size for GPU {index} ({name}): {e}") from None
        if int(t) <= 0:
            raise ValueError(f"nvidia-smi reports no memory size for GPU {index} ({name}): memory.total {total} MiB")
        out.append(Device(index, name, int(t) * MIB, int(u) * MIB))
    return out


def _numeric_field(x: str) -> bool:
    """True for what nvidia-smi writes in a numeric column: a number or ``[N/A]``-like."""
    if x.startswith("[") and x.endswith("]"):
        return True
    try:
        float(x)
        return True
    except ValueError:
        return False


def parse_rocm_smi_json(text: str) -> list[Device]:
    """Parse ``rocm-smi --showmeminfo vram --json``: ``{"card0": {"VRAM Total Memory (B)":
    "68702699520", "VRAM Total Used Memory (B)": "10960896", ...}, ...}``."""
    from advisor.config.readers import parse_json
    data = parse_json(text, "rocm-smi --json output", what="rocm-smi JSON", error=_probe_error)
    if not isinstance(data, dict):
        raise ValueError("rocm-smi JSON is not an object")
    out: list[Device] = []
    for card, info in data.items():
        if not (isinstance(card, str) and card.lower().startswith("card") and isinstance(info, dict)):
            continue
        total = used = None
        for k, v in info.items():
            kl = k.lower()
            if "total memory" in kl and "used" not in kl:
                total = as_int(v, f"rocm-smi {card} {k!r}", lo=0, hi=MAX_DEVICE_MIB * MIB)
            elif "used" in kl:
                used = as_int(v, f"rocm-smi {card} {k!r}", lo=0, hi=MAX_DEVICE_MIB * MIB)
        if total is None:
            raise ValueError(f"rocm-smi reports no VRAM total for {card}")
        out.append(Device(card[4:], str(info.get("Card series", info.get("Card SKU", "AMD GPU"))), total, used or 0))
    return sorted(out, key=lambda d: int(d.index) if d.index.isdigit() else 0)


def _run_tool(path: str, args: list[str], timeout: float) -> str:
    """Run ``path args`` and return its stdout as text; raise RuntimeError with one line on any
    failure. Each of stdout and stderr is read to at most :data:`MAX_PROBE_BYTES`: a tool that
    writes more is killed and reported (a broken driver printing one 300 MB line took 29 s and
    2.6 GB, and was echoed whole). Output that is not UTF-8 is reported naming the tool and the
    byte; what is echoed of it is cut (:func:`advisor.errors.cut`)."""
    import threading
    from advisor.errors import cut
    try:
        proc = subprocess.Popen([path, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        raise RuntimeError(f"{path}: {e.strerror or e}") from None

    def kill() -> None:  # the tool and any child holding its pipes (a wrapper script's pipeline)
        import signal
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
    got: dict[str, bytes] = {}
    over: list[str] = []

    def pump(name: str, stream) -> None:
        data = bytearray()
        while len(data) <= MAX_PROBE_BYTES:
            b = stream.read1(1 << 16)
            if not b:
                break
            data += b
        if len(data) > MAX_PROBE_BYTES:
            over.append(name)
            kill()
        got[name] = bytes(data[:MAX_PROBE_BYTES])

    threads = [threading.Thread(target=pump, args=(n, s), daemon=True)
               for n, s in (("stdout", proc.stdout), ("stderr", proc.stderr))]
    for t in threads:
        t.start()
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill()
        proc.wait()
        raise RuntimeError(f"{path} did not answer within {timeout:g} s") from None
    finally:
        for t in threads:
            t.join(timeout=5)
        for s in (proc.stdout, proc.stderr):
            s.close()
    if over:
        raise RuntimeError(f"{path} wrote more than {MAX_PROBE_BYTES:,} bytes to {over[0]}; stopped it")

    def text(name: str) -> str:
        raw = got.get(name, b"")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RuntimeError(f"{path}: its {name} is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset "
                               f"{e.start})") from None
    if rc != 0:
        err = got.get("stderr", b"").decode("utf-8", "backslashreplace")
        msg = (err.strip() or got.get("stdout", b"").decode("utf-8", "backslashreplace").strip()).splitlines()
        raise RuntimeError(f"{path} exited {rc}" + (f": {cut(msg[0], 200)}" if msg else ""))
    return text("stdout")


def _filter_visible(devices: list[Device], visible: list[str] | None, var: str | None,
                    notes: list[str]) -> list[Device]:
    if not visible:
        return devices
    by_index = {d.index: d for d in devices}
    if all(v.isdigit() for v in visible) and all(v in by_index for v in visible):
        return [by_index[v] for v in visible]
    notes.append(f"{var}={','.join(visible)} does not name indices the tool reported "
                 f"({','.join(by_index)}); all {len(devices)} reported devices are considered")
    return devices


def probe_accelerators(env: Mapping[str, str] | None = None, visible: list[str] | None = None,
                       visible_source: str | None = None, timeout: float = PROBE_TIMEOUT_S) -> AcceleratorProbe:
    """Find this node's accelerators: nvidia-smi on PATH (from ``env``), else rocm-smi, else
    torch when it is already in ``sys.modules`` (never imported here).

    ``visible``: device ids from CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES; the tools list
    every device on the node, so the result is filtered to these.
    """
    env = os.environ if env is None else env
    path_var = env.get("PATH", os.defpath)
    errors: list[str] = []
    for tool, args, parse in (("nvidia-smi", NVIDIA_SMI_QUERY, parse_nvidia_smi_csv),
                              ("rocm-smi", ROCM_SMI_QUERY, parse_rocm_smi_json)):
        exe = shutil.which(tool, path=path_var)
        if exe is None:
            continue
        try:
            devices = parse(_run_tool(exe, args, timeout))
        except (RuntimeError, ValueError) as e:
            errors.append(str(e))
            continue
        if not devices:
            errors.append(f"{exe} lists no devices")
            continue
        if len(devices) > MAX_GPUS_PER_NODE:
            # a broken tool or driver: 10,000 devices were listed whole, 20,000 characters on one
            # line of the report and 1.6 MB of JSON (issue 21, fuzz round c)
            errors.append(f"{exe} lists {len(devices):,} devices, more than the {MAX_GPUS_PER_NODE:,} a node may have "
                          "(--gpus-per-node's bound)")
            continue
        probe = AcceleratorProbe(source=f"{tool} ({exe})")
        probe.devices = _filter_visible(devices, visible, visible_source, probe.notes)
        return probe
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            cuda = torch.cuda
            if cuda.is_available():
                devs = []
                for i in range(cuda.device_count()):
                    p = cuda.get_device_properties(i)
                    devs.append(Device(str(i), str(p.name), int(p.total_memory), int(cuda.memory_reserved(i))))
                if devs:
                    return AcceleratorProbe(devices=devs, source="torch.cuda (already imported by the caller)")
            errors.append("torch is imported but sees no accelerator")
        except Exception as e:  # noqa: BLE001 - a probe never crashes the gate
            errors.append(f"torch.cuda: {type(e).__name__}: {e}")
    if not errors:
        errors.append("neither nvidia-smi nor rocm-smi is on PATH (and torch is not imported)")
    return AcceleratorProbe(error="; ".join(errors))


# --- host memory -------------------------------------------------------------------------

@dataclass
class HostProbe:
    """Host memory of this node (bytes): MemAvailable is what a new job can get."""

    available: int | None = None
    total: int | None = None
    source: str | None = None
    error: str | None = None


def probe_host(meminfo_path: str = "/proc/meminfo") -> HostProbe:
    """Read MemAvailable and MemTotal (kB = KiB) from ``meminfo_path``."""
    try:
        with open(meminfo_path, encoding="ascii", errors="replace") as fh:
            text = fh.read(1 << 16)
    except OSError as e:
        return HostProbe(error=f"{meminfo_path}: {e.strerror or e}")
    vals: dict[str, int] = {}
    for line in text.splitlines():
        k, _, rest = line.partition(":")
        f = rest.split()
        if f and f[0].isdigit():
            vals[k.strip()] = int(f[0]) * (1024 if len(f) > 1 and f[1].lower() == "kb" else 1)
    if "MemAvailable" not in vals:
        return HostProbe(total=vals.get("MemTotal"), error=f"{meminfo_path} has no MemAvailable line")
    return HostProbe(available=vals["MemAvailable"], total=vals.get("MemTotal"), source=meminfo_path)


# --- NVMe ----------------------------------------------------------------------------------

@dataclass
class LibaioProbe:
    """Whether libaio (what DeepSpeed's async_io op links against) can be loaded."""

    found: bool
    detail: str


def probe_libaio(env: Mapping[str, str] | None = None) -> LibaioProbe:
    """dlopen libaio.so.1, else look for it with ctypes.util.find_library("aio")."""
    env = os.environ if env is None else env
    forced = env.get("DS_ADVISOR_TEST_LIBAIO")
    if forced in ("0", "1"):
        return LibaioProbe(forced == "1", f"DS_ADVISOR_TEST_LIBAIO={forced} (test hook)")
    import ctypes

    try:
        ctypes.CDLL("libaio.so.1")
        return LibaioProbe(True, "libaio.so.1 loads")
    except OSError as e:
        err = str(e)
    import ctypes.util

    name = ctypes.util.find_library("aio")
    if name:
        try:
            ctypes.CDLL(name)
            return LibaioProbe(True, f"{name} loads")
        except OSError as e:
            err = str(e)
    return LibaioProbe(False, f"libaio not loadable ({err}); install libaio1 / libaio (e.g. apt install libaio1t64)")


@dataclass
class NvmePath:
    """One ``nvme_path`` from the config and what the probe found there."""

    path: str
    #: "offload_optimizer" and/or "offload_param".
    roles: list[str]
    pointers: list[str]
    exists: bool = False
    is_dir: bool = False
    writable: bool = False
    write_error: str | None = None
    free: int | None = None
    free_source: str | None = None
    #: Filesystem id (st_dev) so that paths on one filesystem share its free space.
    device: int | None = None
    #: Swap-file bytes this node's ranks will write under this path (from the ledger).
    need: int = 0
    #: Bytes on disk (allocated blocks) of swap files an earlier run of this node's ranks left in
    #: the folders this run's DeepSpeed empties or rewrites (:func:`stale_swap_files`): free for it.
    reusable: int = 0
    #: How many such files; True in ``reusable_capped`` when the count stopped at MAX_SWAP_FILES_SCANNED.
    reusable_files: int = 0
    reusable_capped: bool = False
    #: For a path that does not exist yet: its nearest existing ancestor, under which DeepSpeed's
    #: ``os.makedirs(swap_folder, exist_ok=True)`` creates it at initialize (DeepSpeed 0.19.8
    #: runtime/swap_tensor/partitioned_param_swapper.py l.89, optimizer_utils.py l.175); ``device``
    #: and ``free`` are then that ancestor's filesystem's. None when the path exists.
    creates_under: str | None = None


#: Most swap-file entries :func:`stale_swap_files` reads per nvme_path (bounded work; a ZeRO-3 rank
#: writes a few per sub-group or parameter, so a node's ranks far fewer than this for most models).
MAX_SWAP_FILES_SCANNED = 1_000_000


def stale_swap_files(p: NvmePath, node_ranks: range, model_dtype: str) -> NvmePath:
    """Count, in place, the swap files (``*.tensor.swp``) an earlier run -- a killed one leaves them
    -- holds in the folders DeepSpeed will write for this node's ranks under ``p.path`` for its
    roles (:func:`advisor.ledger.state.swap_folder`): the parameter folder, which the swapper
    empties at start, and the optimizer folder, whose files are rewritten by name. Their
    allocated bytes (``st_blocks`` x 512, what deleting or overwriting them gives back) are free
    space for the new run (``reusable``): statvfs counts them as used. Symlinks and other
    non-regular entries are not counted; at most :data:`MAX_SWAP_FILES_SCANNED` entries are read."""
    from advisor.ledger.state import SWAP_FILE_SUFFIX, swap_folder
    seen = 0
    for role in p.roles:
        for r in node_ranks:
            try:
                it = os.scandir(swap_folder(p.path, role, r, model_dtype))
            except OSError:  # no such folder (the usual case), or unreadable: nothing counted
                continue
            with it:
                for e in it:
                    seen += 1
                    if seen > MAX_SWAP_FILES_SCANNED:
                        p.reusable_capped = True
                        return p
                    try:
                        if e.name.endswith(SWAP_FILE_SUFFIX) and e.is_file(follow_symlinks=False):
                            p.reusable += e.stat(follow_symlinks=False).st_blocks * 512
                            p.reusable_files += 1
                    except OSError:
                        continue
    return p


def nearest_existing_ancestor(path: str) -> str | None:
    """The deepest existing folder above ``path`` (absolute), where ``os.makedirs`` starts creating;
    None when none is a directory (a file in the way: makedirs fails)."""
    cur = os.path.abspath(path)
    while True:
        parent = os.path.dirname(cur)
        if os.path.exists(parent):
            return parent if os.path.isdir(parent) else None
        if parent == cur:
            return None
        cur = parent


def _probe_missing(p: NvmePath, disk_free: Mapping[str, int] | None) -> NvmePath:
    """A path that does not exist: DeepSpeed creates it (``os.makedirs(swap_folder, exist_ok=True)``,
    partitioned_param_swapper.py l.89 and optimizer_utils.py l.175, the swap folders under
    ``nvme_path``), on its nearest existing ancestor's filesystem. Probe that ancestor: its device,
    whether the job's user may create folders there (os.access), its free space."""
    anc = nearest_existing_ancestor(p.path)
    p.creates_under = anc
    if anc is None:
        return p
    try:
        p.device = os.stat(anc).st_dev
    except OSError:
        p.device = None
    if os.access(anc, os.W_OK | os.X_OK):
        p.writable = True
    else:
        p.write_error = f"{anc} is not writable (os.access): DeepSpeed cannot create the folder"
    hook = disk_free or {}
    override = hook.get(os.path.normpath(p.path), hook.get(os.path.normpath(anc)))
    if override is not None:
        p.free, p.free_source = override, "test hook (DS_ADVISOR_TEST_DISK_FREE / disk_free)"
    else:
        try:
            p.free, p.free_source = shutil.disk_usage(anc).free, f"statvfs of {anc}"
        except OSError as e:
            p.write_error = p.write_error or f"cannot stat the filesystem: {e.strerror or e}"
    return p


def spec_drives(hardware: Any) -> list[tuple[str, str, int]]:
    """The read-write storage tiers ``--hardware`` names whose mount point exists on this node:
    (tier name, mount, st_dev). generate writes nvme_path under such a mount
    (:func:`advisor.views.generate.choose_nvme_tier`)."""
    out = []
    for t in getattr(hardware, "storage", ()) or ():
        if t.read_oriented:
            continue
        for m in t.mounts:
            try:
                out.append((t.name, m, os.stat(m).st_dev))
            except OSError:
                continue
    return out


def _test_disk_free(env: Mapping[str, str]) -> dict[str, int]:
    raw = env.get("DS_ADVISOR_TEST_DISK_FREE")
    if not raw:
        return {}
    from advisor.units import parse_size

    d = json.loads(raw)
    return {os.path.normpath(k): (int(v) if isinstance(v, int) else parse_size(str(v), bare_bytes=True)) for k, v in d.items()}


def probe_nvme_path(p: NvmePath, disk_free: Mapping[str, int] | None = None) -> NvmePath:
    """Fill in exists / writable (os.access and actually creating a temporary file) / free
    space for ``p`` in place and return it. ``disk_free``: test hook, path -> free bytes."""
    path = p.path
    p.exists = os.path.exists(path)
    p.is_dir = os.path.isdir(path)
    if not p.exists:
        return _probe_missing(p, disk_free)
    if not p.is_dir:
        return p
    try:
        p.device = os.stat(path).st_dev
    except OSError:
        p.device = None
    if not os.access(path, os.W_OK | os.X_OK):
        p.write_error = "no write permission (os.access)"
    else:
        try:
            with tempfile.NamedTemporaryFile(dir=path, prefix=".ds-advisor-check-") as fh:
                fh.write(b"\0")
                fh.flush()
            p.writable = True
        except OSError as e:
            p.write_error = f"cannot create a file: {e.strerror or e}"
    override = (disk_free or {}).get(os.path.normpath(path))
    if override is not None:
        p.free, p.free_source = override, "test hook (DS_ADVISOR_TEST_DISK_FREE / disk_free)"
    else:
        try:
            p.free, p.free_source = shutil.disk_usage(path).free, "statvfs"
        except OSError as e:
            p.write_error = p.write_error or f"cannot stat the filesystem: {e.strerror or e}"
    return p


def nvme_paths_of(ec: "EffectiveConfig") -> tuple[list[NvmePath], list[Finding]]:
    """The nvme_paths ZeRO will really swap to (offload device ``nvme`` *effective*, i.e. stage 3),
    merged when both blocks name the same folder. A missing nvme_path is lint's O003 (check runs
    lint), so it is not reported again here; the second value stays for callers (always empty)."""
    from advisor.rules.O003_nvme_without_path import nvme_path_unset

    paths: dict[str, NvmePath] = {}
    findings: list[Finding] = []
    for role, eff, block in (("offload_optimizer", ec.offload_optimizer_effective, ec.zero.offload_optimizer),
                             ("offload_param", ec.offload_param_effective, ec.zero.offload_param)):
        if eff != "nvme":
            continue
        ptr = f"/zero_optimization/{role}"
        if nvme_path_unset(block.nvme_path):  # O003's finding (check runs lint): not probed again
            continue
        key = os.path.normpath(block.nvme_path)
        if key not in paths:
            paths[key] = NvmePath(path=block.nvme_path, roles=[], pointers=[])
        paths[key].roles.append(role)
        paths[key].pointers.append(ptr + "/nvme_path")
    return list(paths.values()), findings


# --- verdict -------------------------------------------------------------------------------

@dataclass
class TierVerdict:
    """One row of the verdict: a tier (accelerator, host, or nvme:<path>) on this node."""

    tier: str
    scope: str
    need: int
    capacity: int | None
    capacity_source: str | None
    #: Where in the config this tier comes from (nvme rows: the first nvme_path's pointer).
    pointer: str = "/zero_optimization"
    #: The estimate's fit row (advisor.views.estimate.FitRow) for accelerator and host: its
    #: runtime overhead terms and their uncertainty decide "tight".
    fit: Any = None

    @property
    def headroom(self) -> int | None:
        """Capacity minus need (negative: over by that much); None when the capacity is unknown."""
        return None if self.capacity is None else self.capacity - self.need

    @property
    def verdict(self) -> str:
        """"go", "tight" (the estimate's verdict: fits only inside the overhead's uncertainty),
        "no-go", or "unknown" (no capacity known)."""
        if self.capacity is None:
            return "unknown"
        if self.need > self.capacity:
            return "no-go"
        return "tight" if self.fit is not None and self.fit.verdict == "tight" else "go"

    @property
    def lower_bound(self) -> bool:
        """The need is a floor: the accelerator's tracked peak leaves transients off (rule M104)."""
        return bool(self.fit is not None and getattr(self.fit, "lower_bound", ""))

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of one verdict row (accelerator: with its overhead terms)."""
        d = {"tier": self.tier, "scope": self.scope, "need": self.need, "capacity": self.capacity,
             "capacity_source": self.capacity_source, "headroom": self.headroom, "verdict": self.verdict,
             "lower_bound": self.lower_bound}
        if self.fit is not None and self.fit.overhead:
            d.update(tracked=self.fit.tracked, overhead=[t.to_dict() for t in self.fit.overhead],
                     uncertainty=self.fit.uncertainty, uncertain_terms=self.fit.uncertain)
        return d


@dataclass
class CheckResult:
    """Everything check found, and the verdict. ``exit_code`` follows the contract above."""

    source: str
    model: str
    parameters: int
    launch: LaunchShape
    accelerators: AcceleratorProbe
    host: HostProbe
    nvme: list[NvmePath]
    libaio: LibaioProbe | None
    tiers: list[TierVerdict]
    findings: list[Finding]
    warnings: list[str]
    excluded: list[str]
    probe_failed: bool
    strict: bool
    #: A tight verdict exits 0 (a warning) instead of 4.
    allow_tight: bool = False
    #: index in ``warnings`` -> (template, sizes) for a warning naming sizes
    #: (:func:`advisor.findings.render_sized`): the text report prints it in its ``--units``;
    #: ``warnings`` holds it in the default units (GiB).
    warning_sizes: dict[int, tuple[str, dict]] = field(default_factory=dict)
    #: The load phase as estimate's JSON gives it (:meth:`advisor.views.estimate.EstimateResult.load_section`:
    #: the assumption with its sources, host bytes per rank and per node); None without an estimate.
    load: dict[str, Any] | None = None

    @property
    def verdict(self) -> str:
        """"no-go" (any tier that does not fit, or any error-level finding), else "tight" (a tier
        fits only inside the runtime overhead's uncertainty, or its need is a lower bound: M104), else "go"."""
        if any(t.verdict == "no-go" for t in self.tiers) or any(f.severity == "error" for f in self.findings):
            return "no-go"
        return "tight" if any(t.verdict == "tight" for t in self.tiers) else "go"

    @property
    def exit_code(self) -> int:
        """3 (strict and a probe failed), else 1 for no-go, 4 for tight (0 with ``allow_tight``), else 0."""
        if self.strict and self.probe_failed:
            return EXIT_PROBE
        v = self.verdict
        return EXIT_FINDINGS if v == "no-go" else EXIT_TIGHT if v == "tight" and not self.allow_tight else EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``check --format json`` (versioned by ``schema_version``)."""
        from advisor import DEEPSPEED_VERSION, __version__

        acc = self.accelerators
        return {
            "schema_version": CHECK_SCHEMA_VERSION,
            "tool": f"ds-advisor {__version__}",
            "accounting_release": DEEPSPEED_VERSION,  # the checked release is deepspeed_release.checked
            "deepspeed_release": release_dict(current_release()),
            "accounting": accounting_note(current_release()),
            "config": self.source,
            "model": {"name": self.model, "parameters": self.parameters},
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "probe_failed": self.probe_failed,
            "launch": self.launch.to_dict(),
            "resources": {
                "accelerators": {"source": acc.source, "error": acc.error, "notes": acc.notes,
                                 "devices": [{"index": d.index, "name": d.name, "total": d.total, "used": d.used,
                                              "free": d.free} for d in acc.devices]},
                "host": {"available": self.host.available, "total": self.host.total, "source": self.host.source,
                         "error": self.host.error},
                "nvme": [{"path": p.path, "roles": p.roles, "exists": p.exists, "writable": p.writable,
                          "write_error": p.write_error, "free": p.free, "free_source": p.free_source,
                          "need": p.need, "reusable": p.reusable, "creates_under": p.creates_under}
                         for p in self.nvme],
                "libaio": None if self.libaio is None else {"found": self.libaio.found, "detail": self.libaio.detail},
            },
            "tiers": [t.to_dict() for t in self.tiers],
            "findings": [f.to_dict() for f in self.findings],
            "warnings": list(self.warnings),
            "excluded": list(self.excluded),
            "load": self.load,
        }


def _nvme_need_by_path(result: "EstimateResult", paths: list[NvmePath], node_ranks: range) -> None:
    """Swap-file bytes per nvme_path for this node's ranks: parameter files go to
    offload_param.nvme_path, everything else (fp32 master, moments, gradients) to
    offload_optimizer.nvme_path. O(roles): each role counts once per rank of it on the node."""
    by_role = {"offload_param": 0, "offload_optimizer": 0}
    led = result.ledger
    dp = led.world_size
    on = RankSet.span(node_ranks.start, min(node_ranks.stop, dp))
    if not len(on):
        on = RankSet.span(0, min(len(node_ranks), dp))
    n_ranks = 0
    for rl in led.ranks:
        k = len(rl.ranks & on)
        n_ranks += k
        for e in rl.entries:
            if e.tier == "nvme" and k:
                by_role["offload_param" if e.cls == "parameters" else "offload_optimizer"] += e.bytes * k
    # With tensor/pipeline parallelism the ledger's ranks are data-parallel ranks.
    scale = max(1, len(node_ranks) // max(1, n_ranks))
    for p in paths:
        p.need = sum(by_role[r] for r in p.roles) * scale


def _nvme_tiers(paths: list[NvmePath]) -> list[TierVerdict]:
    """One row per filesystem: paths on the same device share its free space."""
    groups: dict[Any, list[NvmePath]] = {}
    for p in paths:
        if p.free is None:
            continue
        groups.setdefault(p.device if p.device is not None else p.path, []).append(p)
    rows = []
    for ps in groups.values():
        frees = [p.free for p in ps if p.free is not None]
        reusable = sum(p.reusable for p in ps)  # an earlier run's swap files, which this run frees (K106)
        rows.append(TierVerdict(tier="nvme " + ", ".join(p.path for p in ps), scope="per node (this node's ranks)",
                                need=sum(p.need for p in ps), capacity=min(frees) + reusable,
                                capacity_source=f"free space ({ps[0].free_source})"
                                + (" + an earlier run's swap files (K106)" if reusable else ""),
                                pointer=ps[0].pointers[0]))
    return rows


def _missing_path_finding(p: NvmePath, drives: list[tuple[str, str, int]]) -> list[Finding]:
    """K102/K103 for an nvme_path that does not exist. DeepSpeed creates it under its nearest existing
    ancestor (:func:`_probe_missing`): fine (info) where that ancestor is on the filesystem of a drive
    the hardware spec names (st_dev equal to the drive's mount's); an error where it is on another
    filesystem, or where no drive is named (nothing says which filesystem is the NVMe drive)."""
    ptr = p.pointers[0]
    anc = p.creates_under
    parent = anc if anc is not None else os.path.dirname(os.path.abspath(p.path))
    if anc is None:
        return [emit("K102", "error", ptr, f"nvme_path {p.path} does not exist on this node and cannot be created "
                     "(a file is in the way of the folder)", fix="point nvme_path at a folder on the NVMe drive")]
    out: list[Finding] = []
    on = [d for d in drives if p.device is not None and d[2] == p.device]
    if on:
        name, mount, _ = on[0]
        out.append(emit("K102", "info", ptr, f"nvme_path {p.path} does not exist yet: DeepSpeed creates it at "
                        f"initialize (os.makedirs) under {anc}, on the drive {name} the hardware spec mounts at "
                        f"{mount}"))
    elif drives:
        names = ", ".join(f"{n} (mounted at {m})" for n, m, _ in drives)
        out.append(emit("K102", "error", ptr, f"nvme_path {p.path} does not exist on this node (DeepSpeed would "
                        f"create it on {parent}'s filesystem, which is not the hardware spec's drive {names})",
                        fix="mount the NVMe drive there, or point nvme_path at a folder on the drive's mount"))
    else:  # no drive named to compare with: today's error, whatever filesystem the ancestor is on
        out.append(emit("K102", "error", ptr, f"nvme_path {p.path} does not exist on this node "
                        f"(DeepSpeed would create it on {parent}'s filesystem, which is probably not the NVMe "
                        "drive)", fix="mount the NVMe drive there, or point nvme_path at its mount point, or give "
                        "--hardware naming the drive's mount"))
    if not p.writable and p.write_error:
        out.append(emit("K103", "error", ptr, f"nvme_path {p.path} cannot be created: {p.write_error}",
                        fix="fix the mount (read-only?) or the permissions for the job's user, or create the "
                            "folder before the launch"))
    return out


def _nvme_findings(paths: list[NvmePath], rows: list[TierVerdict], libaio: LibaioProbe | None,
                   drives: list[tuple[str, str, int]] = ()) -> list[Finding]:
    """Check's NVMe findings: K102-K106 per path and tier row. ``drives``: :func:`spec_drives`."""
    out: list[Finding] = []
    for p in paths:
        ptr = p.pointers[0]
        if not p.exists:
            out.extend(_missing_path_finding(p, list(drives)))
        elif not p.is_dir:
            out.append(emit("K102", "error", ptr, f"nvme_path {p.path} is not a directory",
                               fix="point nvme_path at a directory on the NVMe drive"))
        elif not p.writable:
            out.append(emit("K103", "error", ptr, f"nvme_path {p.path} is not writable: {p.write_error}",
                               fix="fix the mount (read-only?) or the permissions for the job's user"))
    for r in rows:
        if r.verdict == "no-go":
            out.append(emit("K104", "error", r.pointer,
                               literal(f"{r.tier}") + ": swap files of this node's ranks need {need} but only "
                               "{free} is free: over by {over}",
                               fix="free space on the drive, use a larger drive, or spread ranks over more nodes",
                               data={"need": r.need, "free": r.capacity},
                               sizes={"need": r.need, "free": r.capacity or 0, "over": r.need - (r.capacity or 0)}))
    for p in paths:
        if p.reusable_files:
            folder = os.path.join(p.path, "zero_stage_3")
            out.append(emit("K106", "info", p.pointers[0],
                            literal(f"nvme_path {p.path}: ") + "{reusable} in "
                            + f"{'at least ' if p.reusable_capped else ''}{p.reusable_files:,} swap "
                            + ("file" if p.reusable_files == 1 else "files") + " an earlier run "
                            "left under " + literal(folder) + " for this node's ranks, which this run's DeepSpeed "
                            "empties (parameters) or rewrites (optimizer state): counted as free space",
                            fix="nothing to do for a rerun of the same job; for another model or layout, delete "
                                + literal(folder) + " before the run (its optimizer files are rewritten by name only)",
                            data={"folder": folder, "reusable": p.reusable, "files": p.reusable_files},
                            sizes={"reusable": p.reusable}))
    if paths and libaio is not None and not libaio.found:
        out.append(emit("K105", "error", paths[0].pointers[0], f"NVMe offload needs libaio: {libaio.detail}",
                           fix="install libaio on every node (DeepSpeed's async_io op loads libaio.so.1)"))
    return out


def run_check(loaded: "LoadedConfig", inventory: "Inventory", *, env: Mapping[str, str] | None = None,
              world_size: int | None = None, gpus_per_node: int | None = None, gpu_memory: int | None = None,
              host_memory: int | None = None, hardware: "Hardware | None" = None, hf: bool = False, strict: bool = False,
              disk_free: Mapping[str, int] | None = None, meminfo_path: str = "/proc/meminfo",
              timeout: float = PROBE_TIMEOUT_S, workload: "ResolvedWorkload | None" = None,
              config_input: Any = None, trainer_args: dict | None = None, overhead: Any = None,
              allow_tight: bool = False, world_size_source: str = "--world-size",
              zero_init: bool | None = None, load_dtype: str | None = None,
              low_cpu_mem_usage: bool | None = None, pipeline_build: str | None = None) -> CheckResult:
    """Probe this node, run lint and the estimate, and judge every tier.

    ``config_input``: the :class:`advisor.config.inputs.ConfigInput` when CONFIG is an accelerate
    file (``loaded`` is then the DeepSpeed config accelerate builds): its launch findings replace
    lint's, and its ``num_processes`` is the world size when no flag gives one.

    ``env``: the environment to read launcher variables and PATH from (default os.environ).
    ``world_size`` / ``gpus_per_node`` / ``gpu_memory`` (bytes per rank) / ``host_memory``
    (bytes per node): flags, which beat the environment and the probes. ``hardware``: an
    :class:`advisor.cluster.hardware.Hardware` (``--hardware``), last in line for accelerator and host
    memory (after flags and probes), ranks per node and, without launcher variables, the world
    size (nodes x accelerators per node); a warning when it disagrees with the probed GPUs. ``disk_free``: test hook, nvme_path -> free bytes (also read from
    DS_ADVISOR_TEST_DISK_FREE). ``strict``: a failed probe makes the exit code 3.
    ``workload``: the sequence length, micro-batch, checkpointing, attention and parallel sizes
    (:func:`advisor.views.workload.resolve`: flags, the sidecar generate wrote, defaults); every
    value not given as a flag is listed in the result's warnings as an assumption.
    ``hf`` / ``trainer_args``: the config goes through the HF Trainer; "auto" is resolved exactly
    as ``estimate --hf`` resolves it (:func:`advisor.planning.build_plan`), so both give the same bytes;
    ``hf`` without ``trainer_args`` means TrainingArguments' defaults (as ``lint --hf``), so a
    config the Trainer refuses with them (H001) gets no verdict.
    ``overhead``: the :class:`advisor.cluster.overhead.OverheadSettings` of the accelerator row's
    runtime overhead terms (default: the cited defaults, ``env``'s NCCL/CUDA variables read).
    The probe's free memory (total - used) is read before the job starts, so every overhead term
    applies. ``allow_tight``: a "tight" verdict exits 0 with a warning instead of 4.
    ``zero_init`` / ``load_dtype`` / ``low_cpu_mem_usage`` / ``pipeline_build``: the load phase, as estimate takes them
    (None: not given; :func:`advisor.views.estimate.load_assumption`): without zero.Init every rank
    builds the whole model in host memory (ranks per node x N x load-dtype bytes per node, M101) and
    initialize holds it whole on each accelerator (the timeline's ``initialize:module``, rule M103).
    """
    from advisor.cluster.hardware import Capacity
    from advisor.plan import Cluster
    from advisor.planning import build_plan
    from advisor.views.estimate import estimate
    from advisor.views.lint import lint_config

    env = os.environ if env is None else env
    warnings: list[str] = []
    warning_sizes: dict[int, tuple[str, dict]] = {}
    probe_failed = False
    ws_given, ws_label = world_size, world_size_source
    gpn_given, gpn_label, nodes_given = gpus_per_node, "--gpus-per-node", None
    al = config_input.launch if config_input is not None else None
    if world_size is None and al is not None and al.world_size:
        # accelerate launch starts num_processes // num_machines per machine (accelerate/utils/launch.py),
        # the same shape estimate and checkpoint read (advisor.cluster.launch.job_shape)
        ws_given, ws_label = al.world_size, al.world_size_source
        if gpus_per_node is None:
            gpn_given, gpn_label = al.ranks_per_node, al.ranks_per_node_source
            nodes_given = Found(al.num_machines, f"num_machines in {al.source}")
    # the ranks per node pass the validation estimate's job_shape applies (launch.checked_ranks_per_node):
    # more than the --hardware spec's node, or LOCAL_WORLD_SIZE above WORLD_SIZE, is exit 2 in both
    launch = discover_launch(env, world_size=ws_given, gpus_per_node=gpn_given, world_size_source=ws_label,
                             gpus_per_node_source=gpn_label, nodes=nodes_given, hardware=hardware,
                             hardware_label=f"--hardware {hardware.name}" if hardware is not None else None)

    warnings.extend(launch.warnings)  # SLURM_NTASKS kept where only devices suggested per-node launchers
    acc = probe_accelerators(env, launch.visible_devices, launch.visible_source, timeout)
    if not acc.ok:
        probe_failed = True
        warnings.append(f"accelerators could not be probed: {acc.error}")
    warnings.extend(acc.notes)
    hw_name = f"--hardware {hardware.name}" if hardware is not None else None
    if launch.gpus_per_node is None and acc.ok:
        launch.gpus_per_node = Found(len(acc.devices), f"{acc.source.split(' ')[0]} (visible devices)")
    if launch.gpus_per_node is None and hardware is not None and hardware.node_accelerators:
        launch.gpus_per_node = Found(hardware.accelerators_per_node, hw_name)
    if launch.world_size is None:
        # the fallback estimate's job_shape takes too (launch.unlaunched_world_size); the ranks per node here
        # add this node's probed devices, which estimate (run anywhere) does not read; the nodes are the launch's
        # (SLURM_JOB_NUM_NODES) where it states them, as in estimate
        launch.world_size = unlaunched_world_size(hardware, launch.gpus_per_node, hw_name, launch.num_nodes)
        if launch.world_size is None and hardware is not None and hardware.nodes_given:
            # --hardware h100-sxm-80gb:4 and no ranks per node anywhere: refused as estimate refuses it
            from advisor.errors import AdvisorError
            raise AdvisorError(accelerator_alone_problem(hardware, hw_name))
        launch.world_size = launch.world_size or Found(1, "default 1")
        launch.notes.append(f"no launcher variables: world size {launch.world_size.value} ({launch.world_size.source})")
    # a node count --hardware names (NAME:N) holds the world size: N x ranks per node, else exit 2, as in
    # estimate and checkpoint (launch.checked_node_count; the probe's count is this node's ranks per node)
    launch.gpus_per_node = checked_node_count(launch.world_size, launch.gpus_per_node, hardware, hw_name)
    if launch.num_nodes is None and launch.gpus_per_node:
        launch.num_nodes = Found(max(1, -(-launch.world_size.value // launch.gpus_per_node.value)),
                                 f"{launch.world_size.source} / {launch.gpus_per_node.source}")
    ws = launch.world_size.value
    gpn = launch.gpus_per_node.value if launch.gpus_per_node else None

    host = probe_host(meminfo_path)
    if host.error:
        probe_failed = True
        warnings.append(f"host memory could not be probed: {host.error}")

    # Capacities: flag > probe > hardware spec.
    hw_gpu = hardware.accelerator.memory_bytes if hardware is not None and hardware.accelerator else None
    hw_host = hardware.host_memory_bytes if hardware is not None else None
    other_gpu = False  # the node's GPUs are not the preset's: its overhead defaults do not apply
    if hw_gpu and acc.ok:
        smallest = min(d.total for d in acc.devices)
        if abs(smallest - hw_gpu) > 0.1 * hw_gpu:
            other_gpu = True
            warning_sizes[len(warnings)] = t = (
                literal(hw_name) + " says {hw_gpu} per accelerator but this node's smallest has {smallest} "
                + literal(f"({acc.source}): the probe is used, and the generic runtime-overhead figures, not "
                          "the preset's"), {"hw_gpu": hw_gpu, "smallest": smallest})
            warnings.append(render_sized(*t, DEFAULT_UNITS))
    if gpu_memory is not None:
        acc_cap, acc_src = gpu_memory, "--gpu-memory"
    elif acc.ok:
        worst = min(acc.devices, key=lambda d: d.free)
        acc_cap, acc_src = worst.free, f"{acc.source}: GPU {worst.index} free (total - used)"
    elif hw_gpu:
        acc_cap, acc_src = int(hw_gpu), hw_name
    else:
        acc_cap, acc_src = None, None
    if host_memory is not None:
        host_cap, host_src = host_memory, "--host-memory"
    elif host.available is not None:
        host_cap, host_src = host.available, f"{host.source} MemAvailable"
    elif hw_host:
        host_cap, host_src = int(hw_host), hw_name
    else:
        host_cap, host_src = None, None

    from advisor.plan import Workload
    from advisor.views.workload import resolve as resolve_workload
    wl = workload or resolve_workload(None, {})
    v = wl.values
    sp = v["sequence_parallel"]
    if sp is None:
        from advisor.config.effective import config_sequence_parallel
        sp = config_sequence_parallel(loaded.data)
    cluster = Cluster(world_size=ws, gpus_per_node=gpn, tensor_parallel=v["tensor_parallel"],
                      pipeline_parallel=v["pipeline_parallel"], sequence_parallel=sp,
                      expert_parallel=v["expert_parallel"], megatron_sequence_parallel=v["megatron_sp"])
    if ws % (cluster.tensor_parallel * cluster.pipeline_parallel * sp):
        cluster = Cluster(world_size=ws, gpus_per_node=gpn)  # G002 reports it; estimate refuses the shape
        lint_cluster = Cluster(world_size=ws, gpus_per_node=gpn, tensor_parallel=v["tensor_parallel"],
                               pipeline_parallel=v["pipeline_parallel"], sequence_parallel=sp)
    else:
        lint_cluster = cluster
    assumed = wl.assumed()
    if assumed:
        warnings.append("workload assumed (not given as flags): " + "; ".join(assumed))
    # the one plan of this command (with hf: the same HF Trainer resolution as estimate --hf)
    accelerate = config_input is not None and config_input.launch is not None
    if hf and trainer_args is None:  # the Trainer's defaults, as lint --hf assumes them: H001 refuses (issue #19)
        trainer_args = {}
    plan = build_plan(loaded, inventory, cluster, hf=hf and not accelerate, trainer_args=None if accelerate else trainer_args,
                      hf_model=accelerate,
                      workload=Workload(v["seq_len"], v["micro_batch"], v["checkpointing"], v["attention"],
                                        moe_capacity_factor=v.get("moe_capacity_factor")))
    if plan.cluster is not cluster:  # the config's AutoTP / AutoEP size (advisor.planning.config_parallel)
        lint_cluster = plan.cluster if lint_cluster is cluster else lint_cluster
        cluster = plan.cluster
    if accelerate:  # M100's fixes tell a Trainer argument from a config key by it (advisor.views.fixes)
        import dataclasses
        plan = dataclasses.replace(plan, trainer_written=getattr(config_input.resolution, "base", None),
                                   accelerate_fields=not config_input.launch.deepspeed_config_file)
    ec = plan.config
    from advisor.config.effective import batch_world_size
    from advisor.views.estimate import micro_batch_what_if  # --micro-batch is a what-if: say what DeepSpeed runs
    warnings.extend(n["message"] for n in micro_batch_what_if(ec, batch_world_size(ec, cluster), v["micro_batch"]))
    if accelerate:
        from advisor.views.lint import lint_accelerate
        findings = lint_accelerate(config_input, trainer_args_given=trainer_args is not None, world_size=ws,
                                   inventory=inventory, trainer_args=trainer_args)
    else:
        findings = lint_config(loaded, world_size=ws, world_size_source=launch.world_size.source,
                               dp_world_size=cluster.dp_world_size,  # as estimate: the batch is over DP ranks
                               inventory=inventory, hf=plan.hf is not None, trainer_args=trainer_args,
                               cluster=lint_cluster, plan=plan, keep_refusals=True, workload=wl)
    from advisor.cluster.overhead import OverheadSettings
    ovh = overhead if overhead is not None else OverheadSettings(env=env)
    if other_gpu and ovh.defaults is not None:
        import dataclasses
        ovh = dataclasses.replace(ovh, defaults=None)
    from advisor.views.estimate import load_assumption
    load = load_assumption(plan, zero_init, load_dtype, low_cpu_mem_usage,
                           config_input=config_input if accelerate else None, pipeline_build=pipeline_build)
    from advisor.ledger.timeline import load_ignored_warnings
    # --zero-init below ZeRO-3, --pipeline-build without pipeline parallelism do nothing: a warning each
    warnings.extend(load_ignored_warnings(load))
    result = estimate(plan, Capacity(accelerator=acc_cap, host=host_cap, nvme=None), findings, hf=plan.hf is not None,
                      overhead=ovh, load=load)
    tiers: list[TierVerdict] = []
    for r in result.fit:
        if r.tier == "nvme":
            continue
        src = acc_src if r.tier == "accelerator" else host_src
        tiers.append(TierVerdict(r.tier, r.scope, r.need, r.capacity, src, fit=r))

    # Launch shape against the devices found.
    if acc.ok and gpn and gpn > len(acc.devices):
        findings_extra = [emit("K110", "error", "", f"{gpn} ranks per node ({launch.gpus_per_node.source}) but only "
                                  f"{len(acc.devices)} accelerator(s) visible on this node ({acc.source})",
                                  fix="request as many GPUs per node as ranks per node, or lower the rank count")]
    else:
        findings_extra = []
    for n in launch.notes:
        if "not a multiple" in n or "< world size" in n or "> world size" in n:
            findings_extra.append(emit("K111", "warning", "", f"launch shape: {n}"))
    for n in launch.invalid:
        findings_extra.append(emit("K112", "warning", "", f"{n}: ignored; the launch shape comes from the next "
                                      "source in line", fix="fix or unset the variable, or pass --world-size / "
                                      "--gpus-per-node"))

    # NVMe: only the paths ZeRO-3 really swaps to.
    paths, nv_findings = nvme_paths_of(ec)
    libaio = None
    if paths or nv_findings:
        free_hook = dict(_test_disk_free(env))
        free_hook.update({os.path.normpath(k): v for k, v in (disk_free or {}).items()})
        for p in paths:
            probe_nvme_path(p, free_hook)
            if p.is_dir:
                stale_swap_files(p, launch.node_ranks(), ec.model_dtype)
        _nvme_need_by_path(result, paths, launch.node_ranks())
        libaio = probe_libaio(env)
        nv_rows = _nvme_tiers(paths)
        tiers.extend(nv_rows)
        for p in paths:  # a folder whose filesystem statvfs cannot read: no row, so say it is unchecked
            if p.is_dir and p.free is None:
                warning_sizes[len(warnings)] = t = (
                    literal(f"nvme_path {p.path}: free space unknown ({p.write_error}): ") + "its swap files "
                    "({need}) are not checked against it", {"need": p.need})
                warnings.append(render_sized(*t, DEFAULT_UNITS))
        nv_findings += _nvme_findings(paths, nv_rows, libaio, spec_drives(hardware))
    for t in tiers:
        if t.capacity is None:
            warnings.append(f"{t.tier} capacity unknown: not checked (give "
                            + ("--gpu-memory" if t.tier == "accelerator" else "--host-memory") + " or --hardware)")

    # a lower-bound accelerator peak (ledger.peak_lower_bound) is rule M104's finding among result.findings,
    # and the accelerator row's verdict is at best "tight" (FitRow.verdict)
    extra = [f.located(loaded.positions, loaded.source, loaded.data, loaded.overrides)
             for f in findings_extra + nv_findings]
    all_findings = sort_findings(list(result.findings) + extra)
    return CheckResult(source=loaded.source, model=inventory.name, parameters=inventory.numel, launch=launch,
                       accelerators=acc, host=host, nvme=paths, libaio=libaio, tiers=tiers, findings=all_findings,
                       warnings=warnings, excluded=list(result.assumptions()["excluded"]), probe_failed=probe_failed,
                       strict=strict, allow_tight=allow_tight, warning_sizes=warning_sizes,
                       load=result.load_section() if result.load is not None and result.roles else None)


# --- text ----------------------------------------------------------------------------------

