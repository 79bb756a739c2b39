"""Hardware: accelerators, nodes, links and storage tiers, from built-in presets or a spec file.

Shape and units are those of ``schemas/hardware.schema.json``: bytes (GB = 1e9, as data sheets
count), bytes per second **per direction**, FLOP/s **dense** (data sheets often print the 2:4
sparsity figure, twice as large). The built-in presets live in
``advisor/data/hardware_presets.json``; every entry there names the data sheet it comes from and
marks values that are assumptions (e.g. the internal drives of DGX systems, whose data sheets
give capacity but neither bandwidth nor endurance).

* :func:`resolve_hardware` takes a preset name (``dgx-h100``, ``h100-sxm-80gb``), optionally
  with a node count (``dgx-h100:4``), or a JSON spec file path.
* :func:`load_hardware` reads a spec file; any problem is a :class:`HardwareSpecError` whose
  message is one line naming the file and the key (``spec.json: /storage/0/access: ...``).
* :meth:`Hardware.tier_for_path` maps a config's ``nvme_path`` to its storage tier by the
  longest mount-point prefix (path-component aware: ``/raid2`` is not under ``/raid``).
* :meth:`StorageTier.rated_write_bytes`: TBW x 1e12, or DWPD x capacity x 365 x warranty years
  (the JEDEC JESD218 endurance rating as drive vendors state it).

No torch import.
"""

from __future__ import annotations

import copy
import json
import os
import posixpath
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any

from advisor.cluster.overhead import MIB, OverheadDefaults
from advisor.config.validation import (MAX_GPUS_PER_NODE, MAX_NODES, InputValueError, finite_number, number_in,
                                       json_quoted, json_shown, shown)
from advisor.errors import HardwareSpecError

ACCESS_CLASSES = ("read-write", "read-oriented")
_PRESET_FILE = "hardware_presets.json"


# ---------------------------------------------------------------------------------------------
# data


@dataclass
class Capacity:
    """Per-rank accelerator memory, per-node host memory, per-node NVMe space (bytes; None = unknown).

    ``nvme_shared``: the NVMe space is one shared filesystem's (a ``scope: shared`` tier) that
    every node's ranks swap to, so the fit compares it with the sum over all nodes, not one
    node's need (``views/estimate.fit_rows``)."""

    accelerator: int | None = None
    host: int | None = None
    nvme: int | None = None
    nvme_shared: bool = False


@dataclass(frozen=True)
class Accelerator:
    """One accelerator. Bytes, bytes/s per direction, dense FLOP/s; None = unknown."""

    name: str
    memory_bytes: int
    peak_bf16_flops: float | None = None
    peak_fp16_flops: float | None = None
    memory_bandwidth_bytes_per_s: float | None = None
    #: Host-accelerator link (PCIe) bandwidth, bytes/s per direction.
    host_link_bytes_per_s: float | None = None
    host_link_name: str | None = None
    #: Accelerator-to-accelerator bandwidth in a node (NVLink/xGMI), bytes/s per direction.
    peer_bytes_per_s: float | None = None
    #: Model FLOPs utilisation the step-time model assumes (None: advisor.ledger.steptime.MFU).
    assumed_mfu: float | None = None
    #: This accelerator's CUDA-context / allocator overhead defaults
    #: (:class:`advisor.cluster.overhead.OverheadDefaults`; None: the generic figures).
    runtime_overhead: "OverheadDefaults | None" = None
    source: str = ""


@dataclass(frozen=True)
class Endurance:
    """Rated write endurance: ``tbw`` terabytes written (1 TB = 1e12 bytes), or ``dwpd`` drive
    writes per day over ``warranty_years``."""

    tbw: float | None = None
    dwpd: float | None = None
    warranty_years: float | None = None

    def rated_bytes(self, capacity_bytes: float) -> float | None:
        """Bytes the drive is rated to absorb: TBW x 1e12, else DWPD x capacity x 365 x years."""
        if self.tbw is not None:
            return float(self.tbw) * 1e12
        if self.dwpd is not None and self.warranty_years is not None:
            return float(self.dwpd) * float(capacity_bytes) * 365.0 * float(self.warranty_years)
        return None

    def describe(self) -> str:
        if self.tbw is not None:
            return f"{self.tbw:,.0f} TBW" + (f" ({self.warranty_years:g}-year warranty)" if self.warranty_years else "")
        if self.dwpd is not None:
            return f"{self.dwpd:g} DWPD x {self.warranty_years:g} years"
        return "unknown"


@dataclass(frozen=True)
class StorageTier:
    """A storage tier of a node (a drive or an array), identified by its mount points."""

    name: str
    mounts: tuple[str, ...]
    capacity_bytes: int
    read_bytes_per_s: float
    write_bytes_per_s: float
    access: str = "read-write"
    endurance: Endurance | None = None
    #: "node-local" (each node has its own, the default: bandwidths are per node) or "shared"
    #: (one filesystem for the cluster: bandwidths are its aggregate).
    scope: str = "node-local"
    #: A shared filesystem's limit per client node, bytes/s (None = no limit stated).
    per_client_write_bytes_per_s: float | None = None
    per_client_read_bytes_per_s: float | None = None
    #: The DeepSpeed ``aio`` settings the read/write figures were measured at (``block_size``,
    #: ``queue_depth``, ``intra_op_parallelism``), as DeepSpeed's own tuning sweep
    #: (``deepspeed/nvme/perf_run_sweep.py``, ``ds_nvme_tune``) or
    #: ``benchmarks/steptime_calibration.py`` reports them; None: a data-sheet figure, measured
    #: at no DeepSpeed setting.
    aio: tuple[tuple[str, int], ...] | None = None
    #: One request's access latency at queue depth 1, before its transfer, seconds (reads /
    #: writes); None: :data:`advisor.ledger.movement.NVME_LATENCY_S`. The aio model
    #: (:func:`advisor.ledger.movement.aio_bandwidth`) divides the bytes DeepSpeed keeps in flight
    #: by it.
    read_latency_s: float | None = None
    write_latency_s: float | None = None
    source: str = ""

    #: The ``aio`` keys a tier may state.
    AIO_KEYS = ("block_size", "queue_depth", "intra_op_parallelism")

    def aio_mismatch(self, config_aio: Any) -> list[str]:
        """The aio settings of a config (an object with ``block_size``, ``queue_depth``,
        ``intra_op_parallelism``) that differ from those this tier's bandwidths were measured at,
        as ``"queue_depth 8 (measured at 32)"``; [] when they match or the tier states none."""
        if not self.aio:
            return []
        return [f"{k} {getattr(config_aio, k)} (measured at {v})" for k, v in self.aio
                if getattr(config_aio, k, v) != v]

    @property
    def read_oriented(self) -> bool:
        return self.access == "read-oriented"

    @property
    def shared(self) -> bool:
        """Whether the tier is one filesystem for the whole cluster (``scope`` "shared")."""
        return self.scope == "shared"

    def cluster_rate(self, direction: str, nodes: int) -> float:
        """Bytes/s ``nodes`` client nodes get from this tier together for ``direction``
        (``read`` / ``write``), all using it at once: the one rule for a save and for swap traffic.

        * node-local: each node has its own drive (or array), so nodes x the tier's figure;
        * shared: the figure is the filesystem's aggregate, and each client node is limited to
          ``per_client_{direction}_bytes_per_s`` when stated: min(aggregate, nodes x per-client).

        E.g. a shared tier of 100 GB/s aggregate, 20 GB/s per client, on 4 nodes: min(100, 4 x 20)
        = 80 GB/s; on 8 nodes min(100, 160) = 100 GB/s."""
        fig = float(self.write_bytes_per_s if direction == "write" else self.read_bytes_per_s)
        n = max(1, int(nodes))
        if not self.shared:
            return fig * n
        cap = self.per_client_write_bytes_per_s if direction == "write" else self.per_client_read_bytes_per_s
        return min(fig, n * float(cap)) if cap else fig

    def node_rate(self, direction: str, nodes: int) -> float:
        """Bytes/s one of ``nodes`` client nodes gets from this tier for ``direction`` when all of
        them use it at once: :meth:`cluster_rate` / nodes (node-local: the tier's figure; shared:
        min(aggregate / nodes, per-client limit), e.g. min(100 / 4, 20) = 20 GB/s)."""
        n = max(1, int(nodes))
        return self.cluster_rate(direction, n) / n

    @property
    def rated_write_bytes(self) -> float | None:
        """Rated endurance in bytes (None when the spec gives none)."""
        return self.endurance.rated_bytes(self.capacity_bytes) if self.endurance else None


@dataclass(frozen=True)
class Hardware:
    """A cluster of identical nodes."""

    name: str
    nodes: int = 1
    accelerators_per_node: int = 1
    accelerator: Accelerator | None = None
    host_memory_bytes: int | None = None
    #: Host memory bandwidth per node, read + write bytes/s (STREAM's count); None = unknown.
    host_memory_bandwidth_bytes_per_s: float | None = None
    #: Physical CPU cores per node (all sockets): what torch's OpenMP uses per process when
    #: OMP_NUM_THREADS is unset, and what DeepSpeed's ``--bind_cores_to_rank`` divides among the
    #: node's ranks (``deepspeed/utils/numa.py`` get_numactl_cmd); None = unknown.
    host_cores_per_node: int | None = None
    #: Host memory bandwidth ONE core streams (read + write bytes/s, STREAM's count): a rank's
    #: DeepSpeedCPUAdam with k OpenMP threads streams at most k x this; None = unknown.
    host_core_bandwidth_bytes_per_s: float | None = None
    #: Host-accelerator link bandwidth per accelerator, bytes/s per direction.
    host_link_bytes_per_s: float | None = None
    host_link_name: str | None = None
    peer_bytes_per_s: float | None = None
    #: Inter-node bandwidth per node, bytes/s per direction (0 / None = none or unknown).
    network_bytes_per_s: float | None = None
    storage: tuple[StorageTier, ...] = ()
    source: str = ""
    description: str = ""
    #: "preset" or the spec file path.
    origin: str = "preset"
    #: False for an accelerator preset alone (``--hardware h100-sxm-80gb``): its one accelerator
    #: per node is a placeholder, not the node's GPU count. Provenance, not hardware: left out of
    #: equality (a spec file written from it states 1 per node, and is read as a node).
    node_known: bool = field(default=True, compare=False)
    #: True when the user named the node count (``--hardware NAME:N`` / ``FILE:N``): the job runs on
    #: those N nodes, so a world size other than N x ranks per node contradicts it
    #: (:func:`advisor.cluster.launch.checked_node_count`). Provenance, left out of equality.
    nodes_given: bool = field(default=False, compare=False)

    @property
    def node_accelerators(self) -> int | None:
        """Accelerators on one node, as far as the spec says: ``accelerators_per_node``, or None
        for an accelerator preset alone (:attr:`node_known` False: its one per node is a
        placeholder, so the ranks per node come from the flags, the environment or the world size)."""
        return self.accelerators_per_node if self.node_known and self.accelerators_per_node else None

    @property
    def total_accelerators(self) -> int:
        return self.nodes * self.accelerators_per_node

    def ranks_per_node_problem(self, ranks: int, source: str, label: str | None = None) -> str | None:
        """The one-line refusal when ``ranks`` per node (from ``source``, e.g. "--gpus-per-node")
        exceed the spec's accelerators per node: one rank drives one accelerator (the launchers
        start one process per GPU, each on the device of its ``LOCAL_RANK``), so a 16-rank node of
        an 8-GPU system has no GPU for half its ranks. None when it fits, when the spec is an
        accelerator alone (:attr:`node_known` False) or gives no count."""
        n = self.accelerators_per_node
        if not self.node_known or not n or ranks <= n:
            return None
        what = label or f"--hardware {self.name}"
        return (f"{source} {ranks} is more ranks per node than the {n} accelerators per node of {what} "
                f"({self.description or self.name}): each rank needs its own accelerator; give at most {n}, or a "
                "hardware spec whose accelerators_per_node is the node's")

    def tier_for_path(self, path: str | None) -> StorageTier | None:
        """The storage tier holding ``path``: the tier with the longest mount point that is
        ``path`` itself or a parent folder of it (component-wise; ``/`` matches everything).
        None when no tier's mount point contains the path, or path is None/relative."""
        m = self.mount_for_path(path)
        return m[1] if m else None

    def mount_for_path(self, path: str | None) -> tuple[str, StorageTier] | None:
        """(the mount point, its tier) :meth:`tier_for_path` takes for ``path``; None as there.
        A mount of ``/`` for a path other than ``/`` means no tier's own mount holds the path:
        the root filesystem's tier is assumed (:func:`root_fallback_note` says so)."""
        if not path or not isinstance(path, str):
            return None
        p = posixpath.normpath(path)
        if not p.startswith("/"):
            return None
        best: tuple[str, StorageTier] | None = None
        for t in self.storage:
            for m in t.mounts:
                mm = posixpath.normpath(m)
                if mm == "/" or p == mm or p.startswith(mm + "/"):
                    if best is None or len(mm) > len(best[0]):
                        best = (mm, t)
        return best

    def root_fallback_note(self, path: str | None) -> str | None:
        """When ``path`` (a config's ``nvme_path``) lies under no storage tier's mount point but
        ``/``: which tier was assumed and why, naming the tiers with mounts of their own; None
        when a tier's own mount holds it (or none holds it at all)."""
        m = self.mount_for_path(path)
        if m is None or m[0] != "/" or posixpath.normpath(path) == "/":
            return None
        t = m[1]
        others = [f"{x.name} ({', '.join(x.mounts)})" for x in self.storage
                  if x is not t and any(posixpath.normpath(y) != "/" for y in x.mounts)]
        return (f"nvme_path {path} is under no storage tier's mount point of {self.name} but /: taken as tier "
                f"'{t.name}' ({', '.join(t.mounts)}, the root filesystem"
                + (f", {t.write_bytes_per_s / 1e9:g} GB/s write" if t.write_bytes_per_s else "") + ")"
                + (f"; the spec's other tiers: {', '.join(others)}" if others else "")
                + f". If {path} is a drive of its own, add it as a storage tier (mounts [\"{path}\"]) in a "
                  "--hardware JSON; else point nvme_path at a listed tier")

    def capacity(self, nvme_path: str | None = None):
        """A :class:`Capacity` (per-rank accelerator memory, per-node host
        memory, and the capacity of the tier holding ``nvme_path``, marked ``nvme_shared`` when
        that tier is a shared filesystem), bytes; None when unknown."""

        t = self.tier_for_path(nvme_path)
        return Capacity(accelerator=self.accelerator.memory_bytes if self.accelerator else None,
                        host=self.host_memory_bytes, nvme=t.capacity_bytes if t else None,
                        nvme_shared=bool(t and t.shared))

    def summary(self, units: str = "GiB") -> str:
        """One line: nodes x accelerators, host memory per node (in ``units``: GiB = 2^30 or
        GB = 1e9 bytes, :func:`advisor.units.size`) and the storage tiers."""
        from advisor.units import size

        a = self.accelerator
        parts = [f"{self.nodes} node(s) x {self.accelerators_per_node} x {a.name if a else 'no accelerator'}"]
        if self.host_memory_bytes:
            parts.append(f"{size(self.host_memory_bytes, units, digits=0)} host memory per node")
        for t in self.storage:
            parts.append(f"{t.name} ({', '.join(t.mounts)}, {t.access})")
        return "; ".join(parts)


# ---------------------------------------------------------------------------------------------
# parsing (one-line errors naming the file and the key)


#: The range every positive number of a hardware spec is read in (bytes, bytes/s, FLOP/s, seconds,
#: fractions): wide enough for any machine (an exabyte, a nanosecond), narrow enough that no derived
#: time or headroom overflows to Infinity or prints hundreds of digits (issue 21).
HW_NUMBER_MIN, HW_NUMBER_MAX = 1e-9, 1e21


#: The keys of each object of a hardware spec (``schemas/hardware.schema.json``): the one list each reader
#: below checks, and what an unknown key's "did you mean" searches, nested paths included (:data:`_NESTED`).
LINK_KEYS = frozenset({"name", "bytes_per_s"})
OVERHEAD_KEYS = frozenset({"cuda_context_mib", "allocator_fraction", "source", "cuda_context_source",
                           "allocator_source"})
ACCELERATOR_KEYS = frozenset({"name", "memory_bytes", "peak_bf16_flops", "peak_fp16_flops",
                              "memory_bandwidth_bytes_per_s", "host_link", "peer_bytes_per_s", "assumed_mfu",
                              "runtime_overhead", "source"})
ENDURANCE_KEYS = frozenset({"tbw", "dwpd", "warranty_years"})
TIER_KEYS = frozenset({"name", "mounts", "capacity_bytes", "read_bytes_per_s", "write_bytes_per_s", "endurance",
                       "access", "scope", "per_client_write_bytes_per_s", "per_client_read_bytes_per_s", "aio",
                       "read_latency_s", "write_latency_s", "source"})
HARDWARE_KEYS = frozenset({"name", "description", "base", "nodes", "accelerators_per_node", "accelerator",
                           "host_memory_bytes", "host_memory_bandwidth_bytes_per_s", "host_cores_per_node",
                           "host_core_bandwidth_bytes_per_s", "host_link", "peer_bytes_per_s", "network_bytes_per_s",
                           "storage", "source"})
#: Object-valued keys of each object: key -> the keys inside it (a list of storage tiers is not an object path).
_NESTED = {HARDWARE_KEYS: {"accelerator": ACCELERATOR_KEYS, "host_link": LINK_KEYS},
           ACCELERATOR_KEYS: {"host_link": LINK_KEYS, "runtime_overhead": OVERHEAD_KEYS},
           TIER_KEYS: {"endurance": ENDURANCE_KEYS}}


def key_paths(allowed: frozenset) -> list[str]:
    """The keys of an object with key set ``allowed`` and, for each object-valued one (:data:`_NESTED`), the
    dotted paths of the keys inside it (``accelerator.memory_bytes``, ``accelerator.host_link.bytes_per_s``)."""
    out = sorted(allowed)
    for k, sub in sorted(_NESTED.get(allowed, {}).items()):
        out += [f"{k}.{p}" for p in key_paths(sub)]
    return out


def near_key(key: str, allowed: frozenset) -> str | None:
    """The allowed key or nested key path (:func:`key_paths`) closest to unknown ``key``, compared with the
    path's dots read as underscores (``accelerator_memory_bytes`` is ``accelerator.memory_bytes``, not
    ``host_memory_bytes``), else a nested path whose last key is close to ``key`` (ratio >= 0.8: a tier's
    ``dwpdd`` is ``endurance.dwpd``); None when none is close (difflib's ratio >= 0.6)."""
    import difflib
    paths = key_paths(allowed)
    flat = {p.replace(".", "_"): p for p in paths}
    if key in flat:
        return flat[key]
    near = difflib.get_close_matches(key, list(flat), n=1)
    if near:
        return flat[near[0]]
    # a nested key's own name misspelt at the outer level (a tier's ``dwpdd`` is ``endurance.dwpd``)
    leaves = {p.rsplit(".", 1)[1]: p for p in paths if "." in p}
    near = difflib.get_close_matches(key, list(leaves), n=1, cutoff=0.8)
    return leaves[near[0]] if near else None


class _P:
    def __init__(self, source: str):
        self.source = source

    def err(self, ptr: str, problem: str) -> HardwareSpecError:
        return HardwareSpecError(f"{self.source}: {ptr or '/'}: {problem}")

    def num(self, d: dict, key: str, ptr: str, required: bool = False, allow_zero: bool = False) -> float | None:
        if key not in d:
            if required:
                raise self.err(ptr, f"missing required key '{key}'")
            return None
        try:  # the one validation layer: a 400-digit integer is "too large", never float()'d (issue 21)
            return number_in(d[key], f"{ptr}/{key}", lo=HW_NUMBER_MIN, hi=HW_NUMBER_MAX, allow_zero=allow_zero,
                             what="the range a hardware spec's bytes, bytes/s, FLOP/s and seconds are read in")
        except InputValueError as e:
            # finite but absurd (1e-300 FLOP/s, 1e308 bytes) made step times Infinity in JSON/SARIF
            raise self.err(e.source, e.problem) from None

    def int_(self, d: dict, key: str, ptr: str, minimum: int, maximum: int) -> int | None:
        if key not in d:
            return None
        v = d[key]
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v <= maximum:
            raise self.err(f"{ptr}/{key}", f"expected an integer from {minimum} to {maximum}, got {json_shown(v)}")
        return v

    def str_(self, d: dict, key: str, ptr: str, required: bool = False) -> str | None:
        if key not in d:
            if required:
                raise self.err(ptr, f"missing required key '{key}'")
            return None
        v = d[key]
        if not isinstance(v, str) or not v:
            raise self.err(f"{ptr}/{key}", f"expected a non-empty string, got {json_shown(v)}")
        return v

    def keys(self, d: Any, allowed: set[str], ptr: str) -> dict:
        if not isinstance(d, dict):
            raise self.err(ptr, f"expected an object, got {json_shown(d)}")
        extra = sorted(set(d) - allowed)
        if extra:
            near = near_key(extra[0], frozenset(allowed)) if len(extra[0]) < 200 else None
            raise self.err(f"{ptr}/{extra[0]}", "unknown key" + (
                f"; did you mean '{near}'" + (f" (key {near.rsplit('.', 1)[1]!r} inside the "
                                              f"{near.rsplit('.', 1)[0]!r} object)" if "." in near else "") + "?"
                if near else f" (allowed: {', '.join(sorted(allowed))})"))
        return d

    def link(self, d: Any, ptr: str) -> tuple[float, str | None]:
        self.keys(d, LINK_KEYS, ptr)
        return self.num(d, "bytes_per_s", ptr, required=True), self.str_(d, "name", ptr)

    def accelerator(self, d: Any, ptr: str) -> Accelerator:
        if isinstance(d, str):
            acc = _presets()["accelerators"].get(d)
            if acc is None:
                raise self.err(ptr, f"unknown accelerator preset {json_quoted(d)} (known: {', '.join(sorted(_presets()['accelerators']))})")
            return _P(f"preset {d}").accelerator(acc, "")
        self.keys(d, ACCELERATOR_KEYS, ptr)
        hl, hn = self.link(d["host_link"], f"{ptr}/host_link") if "host_link" in d else (None, None)
        return Accelerator(
            name=self.str_(d, "name", ptr, required=True),
            memory_bytes=int(self.num(d, "memory_bytes", ptr, required=True)),
            peak_bf16_flops=self.num(d, "peak_bf16_flops", ptr),
            peak_fp16_flops=self.num(d, "peak_fp16_flops", ptr),
            memory_bandwidth_bytes_per_s=self.num(d, "memory_bandwidth_bytes_per_s", ptr),
            host_link_bytes_per_s=hl, host_link_name=hn,
            peer_bytes_per_s=self.num(d, "peer_bytes_per_s", ptr),
            assumed_mfu=self._mfu(d, ptr),
            runtime_overhead=(self.overhead_defaults(d["runtime_overhead"], f"{ptr}/runtime_overhead")
                              if "runtime_overhead" in d else None),
            source=d.get("source", "") if isinstance(d.get("source", ""), str) else "",
        )

    def overhead_defaults(self, d: Any, ptr: str) -> OverheadDefaults:
        """``runtime_overhead``: ``cuda_context_mib`` [default, low, high] (MiB, as nvidia-smi
        counts), ``allocator_fraction`` [default, low, high] of the tracked peak, ``source``, and optionally
        ``cuda_context_source`` / ``allocator_source`` (each term's own source; default ``source``)."""
        self.keys(d, OVERHEAD_KEYS, ptr)
        vals = {}
        for k in ("cuda_context_mib", "allocator_fraction"):
            v = d.get(k)
            top = 1 << 30 if k == "cuda_context_mib" else 1  # 1 PiB of context; a fraction below 1
            if (not isinstance(v, list) or len(v) != 3
                    or any(not finite_number(x) or not 0 <= x < top for x in v)):
                raise self.err(f"{ptr}/{k}", f"expected [default, low, high] of numbers from 0 to below {top:,}, "
                                             f"got {json_shown(v)}")
            vals[k] = v
        src = d.get("source")
        if not isinstance(src, str) or not src:
            raise self.err(f"{ptr}/source", "expected a non-empty string: where the figures come from")
        own = {}
        for k in ("cuda_context_source", "allocator_source"):
            v = d.get(k, "")
            if not isinstance(v, str):
                raise self.err(f"{ptr}/{k}", f"expected a string: where that term's figure comes from, got {json_shown(v)}")
            own[k] = v
        try:
            return OverheadDefaults(tuple(int(x * MIB) for x in vals["cuda_context_mib"]),
                                    tuple(float(x) for x in vals["allocator_fraction"]), src, **own)
        except ValueError as e:
            raise self.err(ptr, str(e).split(": ", 1)[-1]) from None

    def _mfu(self, d: dict, ptr: str) -> float | None:
        v = self.num(d, "assumed_mfu", ptr)
        if v is not None and v > 1:
            raise self.err(f"{ptr}/assumed_mfu", f"expected a fraction from 0 to 1, got {json_shown(v)}")
        return v

    def endurance(self, d: Any, ptr: str) -> Endurance:
        self.keys(d, ENDURANCE_KEYS, ptr)
        tbw, dwpd, yrs = self.num(d, "tbw", ptr), self.num(d, "dwpd", ptr), self.num(d, "warranty_years", ptr)
        if tbw is not None and dwpd is not None:
            raise self.err(ptr, "give either 'tbw' or 'dwpd' with 'warranty_years', not both")
        if tbw is None and dwpd is None:
            raise self.err(ptr, "missing 'tbw' (terabytes written) or 'dwpd' with 'warranty_years'")
        if dwpd is not None and yrs is None:
            raise self.err(ptr, "'dwpd' needs 'warranty_years'")
        return Endurance(tbw=tbw, dwpd=dwpd, warranty_years=yrs)

    def tier(self, d: Any, ptr: str) -> StorageTier:
        self.keys(d, TIER_KEYS, ptr)
        scope = d.get("scope", "node-local")
        if scope not in ("node-local", "shared"):
            raise self.err(f"{ptr}/scope", f"expected node-local or shared, got {json_shown(scope)}")
        mounts = d.get("mounts")
        if not isinstance(mounts, list) or not mounts:
            raise self.err(f"{ptr}/mounts", f"expected a non-empty list of absolute paths, got {json_shown(mounts)}")
        for i, m in enumerate(mounts):
            if not isinstance(m, str) or not m.startswith("/"):
                raise self.err(f"{ptr}/mounts/{i}", f"expected an absolute path, got {json_shown(m)}")
        access = d.get("access")
        if access not in ACCESS_CLASSES:
            raise self.err(f"{ptr}/access", f"expected one of {', '.join(ACCESS_CLASSES)}, got {json_shown(access)}")
        return StorageTier(
            name=self.str_(d, "name", ptr, required=True),
            mounts=tuple(mounts),
            capacity_bytes=int(self.num(d, "capacity_bytes", ptr, required=True)),
            read_bytes_per_s=self.num(d, "read_bytes_per_s", ptr, required=True),
            write_bytes_per_s=self.num(d, "write_bytes_per_s", ptr, required=True),
            access=access,
            endurance=self.endurance(d["endurance"], f"{ptr}/endurance") if "endurance" in d else None,
            scope=scope,
            per_client_write_bytes_per_s=self.num(d, "per_client_write_bytes_per_s", ptr),
            per_client_read_bytes_per_s=self.num(d, "per_client_read_bytes_per_s", ptr),
            aio=self.aio(d["aio"], f"{ptr}/aio") if "aio" in d else None,
            read_latency_s=self._latency(d, "read_latency_s", ptr),
            write_latency_s=self._latency(d, "write_latency_s", ptr),
            source=d.get("source", "") if isinstance(d.get("source", ""), str) else "",
        )

    def _latency(self, d: dict, key: str, ptr: str) -> float | None:
        v = self.num(d, key, ptr)
        if v is not None and not 0 < v <= 10:
            raise self.err(f"{ptr}/{key}", f"expected seconds above 0 and at most 10, got {json_shown(v)}")
        return v

    def aio(self, d: Any, ptr: str) -> tuple[tuple[str, int], ...]:
        self.keys(d, set(StorageTier.AIO_KEYS), ptr)
        out = []
        for k in StorageTier.AIO_KEYS:
            if k in d:
                v = d[k]
                if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 1 << 40:
                    raise self.err(f"{ptr}/{k}", f"expected a positive integer up to 2^40, got {json_shown(v)}")
                out.append((k, v))
        if not out:
            raise self.err(ptr, f"expected at least one of {', '.join(StorageTier.AIO_KEYS)}")
        return tuple(out)

    def hardware(self, d: Any, origin: str, default_name: str) -> Hardware:
        self.keys(d, HARDWARE_KEYS, "")
        if "base" in d:
            base_name = self.str_(d, "base", "")
            base = _presets()["systems"].get(base_name)
            if base is None:
                raise self.err("/base", f"unknown preset {json_quoted(base_name)} (known: {', '.join(sorted(_presets()['systems']))})")
            merged = copy.deepcopy(base)
            merged.update({k: v for k, v in d.items() if k != "base"})
            d = merged
        for k in ("nodes", "accelerators_per_node", "accelerator"):
            if k not in d:
                raise self.err("", f"missing required key '{k}' (or start from a preset with 'base')")
        acc = self.accelerator(d["accelerator"], "/accelerator")
        hl, hn = acc.host_link_bytes_per_s, acc.host_link_name
        if "host_link" in d:
            hl, hn = self.link(d["host_link"], "/host_link")
        storage = d.get("storage", [])
        if not isinstance(storage, list):
            raise self.err("/storage", f"expected a list of storage tiers, got {json_shown(storage)}")
        tiers = tuple(self.tier(t, f"/storage/{i}") for i, t in enumerate(storage))
        names = [t.name for t in tiers]
        if len(set(names)) != len(names):
            raise self.err("/storage", f"duplicate tier names in {names}")
        hm = self.num(d, "host_memory_bytes", "")
        peer = self.num(d, "peer_bytes_per_s", "")
        return Hardware(
            name=self.str_(d, "name", "") or default_name,
            nodes=self.int_(d, "nodes", "", 1, MAX_NODES),
            accelerators_per_node=self.int_(d, "accelerators_per_node", "", 0, MAX_GPUS_PER_NODE),
            accelerator=acc,
            host_memory_bytes=int(hm) if hm is not None else None,
            host_memory_bandwidth_bytes_per_s=self.num(d, "host_memory_bandwidth_bytes_per_s", ""),
            host_cores_per_node=self.int_(d, "host_cores_per_node", "", 1, 1 << 16),
            host_core_bandwidth_bytes_per_s=self.num(d, "host_core_bandwidth_bytes_per_s", ""),
            host_link_bytes_per_s=hl, host_link_name=hn,
            peer_bytes_per_s=peer if peer is not None else acc.peer_bytes_per_s,
            network_bytes_per_s=self.num(d, "network_bytes_per_s", "", allow_zero=True),
            storage=tiers,
            source=d.get("source", "") if isinstance(d.get("source", ""), str) else "",
            description=d.get("description", "") if isinstance(d.get("description", ""), str) else "",
            origin=origin,
        )


_CACHE: dict[str, Any] = {}


def _presets() -> dict[str, Any]:
    """The preset file, parsed once."""
    if "p" not in _CACHE:
        text = resources.files("advisor").joinpath("data", _PRESET_FILE).read_text(encoding="utf-8")
        _CACHE["p"] = json.loads(text)
    return _CACHE["p"]


def _link_spec(bytes_per_s: float | None, name: str | None) -> dict[str, Any] | None:
    if not bytes_per_s:
        return None
    return {**({"name": name} if name else {}), "bytes_per_s": bytes_per_s}


def _present(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` without the keys whose value is unknown (None) or empty, as a spec file leaves them out."""
    return {k: v for k, v in d.items() if v is not None and v != "" and v != ()}


def to_spec(h: Hardware) -> dict[str, Any]:
    """``h`` as a hardware spec (``schemas/hardware.schema.json``): the JSON ``hardware --format
    json`` prints, which :func:`from_dict` / ``--hardware FILE`` read back to the same
    :class:`Hardware` (but its ``origin``). Sizes in bytes, bandwidths in bytes/s per direction;
    unknown values are left out, as in a spec file."""
    a = h.accelerator
    acc = None if a is None else _present({
        "name": a.name, "memory_bytes": a.memory_bytes, "peak_bf16_flops": a.peak_bf16_flops,
        "peak_fp16_flops": a.peak_fp16_flops, "memory_bandwidth_bytes_per_s": a.memory_bandwidth_bytes_per_s,
        "host_link": _link_spec(a.host_link_bytes_per_s, a.host_link_name), "peer_bytes_per_s": a.peer_bytes_per_s,
        "assumed_mfu": a.assumed_mfu, "runtime_overhead": None if a.runtime_overhead is None else {
            "cuda_context_mib": [x / MIB for x in a.runtime_overhead.cuda_context],
            "allocator_fraction": list(a.runtime_overhead.allocator_fraction),
            "source": a.runtime_overhead.source,
            **{k: v for k, v in (("cuda_context_source", a.runtime_overhead.cuda_context_source),
                                 ("allocator_source", a.runtime_overhead.allocator_source)) if v}},
        "source": a.source})
    tiers = [_present({
        "name": t.name, "mounts": list(t.mounts), "capacity_bytes": t.capacity_bytes,
        "read_bytes_per_s": t.read_bytes_per_s, "write_bytes_per_s": t.write_bytes_per_s, "access": t.access,
        "endurance": None if t.endurance is None else _present(
            {"tbw": t.endurance.tbw, "dwpd": t.endurance.dwpd, "warranty_years": t.endurance.warranty_years}),
        "scope": t.scope, "per_client_write_bytes_per_s": t.per_client_write_bytes_per_s,
        "per_client_read_bytes_per_s": t.per_client_read_bytes_per_s, "aio": dict(t.aio) if t.aio else None,
        "read_latency_s": t.read_latency_s, "write_latency_s": t.write_latency_s,
        "source": t.source}) for t in h.storage]
    return {**_present({
        "name": h.name, "description": h.description, "nodes": h.nodes,
        "accelerators_per_node": h.accelerators_per_node, "accelerator": acc,
        "host_memory_bytes": h.host_memory_bytes,
        "host_memory_bandwidth_bytes_per_s": h.host_memory_bandwidth_bytes_per_s,
        "host_cores_per_node": h.host_cores_per_node,
        "host_core_bandwidth_bytes_per_s": h.host_core_bandwidth_bytes_per_s,
        "host_link": _link_spec(h.host_link_bytes_per_s, h.host_link_name), "peer_bytes_per_s": h.peer_bytes_per_s,
        "network_bytes_per_s": h.network_bytes_per_s, "source": h.source}), "storage": tiers}


def from_dict(d: Any, source: str = "<hardware>") -> Hardware:
    """Build a :class:`Hardware` from its JSON form; raises HardwareSpecError naming ``source``
    and the JSON pointer of the offending key."""
    return _P(source).hardware(d, origin=source, default_name=os.path.basename(source))


def load_hardware(path: str) -> Hardware:
    """Read a hardware spec JSON file (``schemas/hardware.schema.json``).

    Raises HardwareSpecError (one line: file, key, problem) when the file is missing, is not
    JSON, or has a bad value.
    """
    from advisor.config.readers import MAX_HARDWARE_BYTES, error_as, read_json_file
    d = read_json_file(path, limit=MAX_HARDWARE_BYTES, what="hardware spec", error=error_as(HardwareSpecError))
    return from_dict(d, path)


def _accelerator_only(key: str) -> Hardware:
    acc = _P(f"preset {key}").accelerator(key, "")
    return Hardware(name=key, nodes=1, accelerators_per_node=1, accelerator=acc,
                    host_link_bytes_per_s=acc.host_link_bytes_per_s, host_link_name=acc.host_link_name,
                    peer_bytes_per_s=acc.peer_bytes_per_s, source=acc.source,
                    description=f"one {acc.name} (host, network and storage unknown)", node_known=False)


def _node_count(spec: str, count: str) -> int:
    """The N of ``--hardware NAME:N`` / ``FILE:N``: an integer from 1 to MAX_NODES, else HardwareSpecError."""
    if not count.isdigit() or len(count) > 7 or not 1 <= int(count) <= MAX_NODES:
        raise HardwareSpecError(f"--hardware {shown(spec)}: the node count after ':' must be an integer from 1 "
                                f"to {MAX_NODES}")
    return int(count)


def resolve_hardware(spec: str) -> Hardware:
    """``--hardware`` value -> Hardware: an existing file path (JSON spec), else a preset name
    (case-insensitive) or a spec file's path, either followed by ``:N`` for N nodes (``dgx-h100:4``,
    ``hw.json:2``; the count after the last ':', so a path may itself hold ':' -- and a path that exists
    as given wins over reading its tail as a count). An accelerator preset alone (``h100-sxm-80gb``) is
    one accelerator with unknown host, network and storage. Raises HardwareSpecError with close
    matches for an unknown name."""
    if not isinstance(spec, str) or not spec.strip():
        raise HardwareSpecError("--hardware: expected a preset name or a spec file")
    if os.path.exists(spec) or spec.endswith(".json"):
        return load_hardware(spec)
    path, colon, tail = spec.rpartition(":")
    if colon and path and os.path.isfile(path):
        # FILE:N, the spec file's node count replaced as NAME:N replaces the preset's
        nodes = _node_count(spec, tail)
        hw = load_hardware(path)
        return replace(hw, nodes=nodes, name=f"{hw.name}:{nodes}", nodes_given=True)
    name, colon, count = spec.strip().lower().partition(":")
    # "dgx-h100:" (a ':' with no count) is refused as "dgx-h100:0" is, not read as the preset's 1 node
    nodes = _node_count(spec, count) if colon else None
    p = _presets()
    if name in p["systems"]:
        hw = _P(f"preset {name}").hardware(copy.deepcopy(p["systems"][name]), origin="preset", default_name=name)
        hw = replace(hw, name=name, description=hw.name)
    elif name in p["accelerators"]:
        hw = _accelerator_only(name)
    else:
        import difflib
        known = sorted(p["systems"]) + sorted(p["accelerators"])
        near = difflib.get_close_matches(name, known, n=3) if len(name) < 200 else []
        raise HardwareSpecError(f"--hardware: unknown hardware {shown(spec)}" + (f"; did you mean {', '.join(near)}?" if near else "")
                                + " (see `ds-advisor hardware`, or give a JSON spec file)")
    if nodes is not None:
        hw = replace(hw, nodes=nodes, name=f"{hw.name}:{nodes}", nodes_given=True)
    return hw


def list_hardware() -> list[Hardware]:
    """Every built-in preset: node shapes first, then single accelerators, each sorted by name."""
    p = _presets()
    return [resolve_hardware(k) for k in sorted(p["systems"])] + [resolve_hardware(k) for k in sorted(p["accelerators"])]


def preset_data() -> dict[str, Any]:
    """The raw preset file (a deep copy), e.g. for schema validation."""
    return copy.deepcopy(_presets())
