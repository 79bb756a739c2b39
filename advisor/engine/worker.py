"""Per-rank worker of ``advisor.engine.measure`` (run by ``python -m torch.distributed.run``).

Each rank reads a job file (JSON: a list of cells, each a DeepSpeed config, an inventory and a
step count), and for every cell builds a proxy model made of ``nn.Parameter``s with exactly the
inventory's shapes, initialises the real DeepSpeed engine, runs K training steps and takes
censuses of the engine's live tensors:

* ``bwd``: after the last ``engine.backward``, before ``engine.step`` (plus the ZeRO-1/2 ipg
  bucket as allocated inside that backward, recorded by wrapping ``setup_buckets``);
* ``in_step``: inside the basic optimizer's ``step`` (the census with the most bytes, i.e. the
  largest ZeRO-3 sub-group);
* ``steady``: after the last ``engine.step``.

A census walks the engine's own structures (``engine.optimizer`` and the basic optimizer) and
attributes each tensor *storage* (de-duplicated by data pointer) to the first item that
references it; the item names are the vocabulary of ``advisor.ledger.state``. Tiers: ``host_pinned``
when DeepSpeed page-locked it (every tensor returned by ``get_accelerator().pin_memory`` or by
an aio handle's ``new_cpu_locked_tensor`` is recorded, since on a CPU accelerator pinning is a
no-op that ``tensor.is_pinned()`` cannot see), ``accelerator`` for tensors on a non-CPU device,
and on a CPU accelerator ``unpinned`` (accelerator or pageable host: indistinguishable there).
NVMe swap files under the cell's nvme path are listed per rank and attributed by file name.

This module imports torch and deepspeed; nothing else in ``advisor`` may (besides measure).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback


# ---------------------------------------------------------------------------------------------
# pinned-memory tracking

_PINNED: dict[int, int] = {}  # storage data_ptr -> nbytes


def _storage_key(t):
    st = t.untyped_storage()
    return st.data_ptr(), st.nbytes()


_TRACKER: list = []  # the active StorageTracker, if any
_CLAIMED: dict[int, str] = {}  # data_ptr -> ledger item, from every census of the cell
#: id(tracker live entry) -> (that entry, ledger item): the censuses' claims on the exact
#: allocations the tracker recorded (the entry is kept so its id is not reused)
_CLAIMED_ENTRIES: dict[int, tuple] = {}


def _record_pinned(t):
    if _TRACKER:
        _TRACKER[0].track(t)
    try:
        ptr, nb = _storage_key(t)
        if ptr:
            _PINNED[ptr] = nb
    except Exception:  # pragma: no cover - defensive
        pass
    return t


def memoize_cpu_info() -> None:
    """Make ``cpuinfo.get_cpu_info`` compute once per process and hand out copies.

    DeepSpeed 0.19.8 calls it in every ``DeepSpeedCPUAdam.__init__`` (``ops/adam/cpu_adam.py``
    l. 75-76, to read ``vendor_id_raw`` for an fp16-on-AMD warning) and py-cpuinfo 9 answers each
    call from a fresh ``python cpuinfo.py --json`` subprocess that times the CPU clock (about 2 s
    wall per call, measured), so a rank building one engine per cell with CPU or NVMe optimizer
    offload paid 2 s per cell. The CPU does not change within a process; the answer is a dict of
    strings and numbers that allocates no tensor, so the engine's memory is unchanged. No-op
    without py-cpuinfo or when already done."""
    try:
        import cpuinfo
    except ImportError:  # pragma: no cover - deepspeed requires py-cpuinfo
        return
    orig = cpuinfo.get_cpu_info
    if getattr(orig, "_ds_advisor_memo", False):
        return
    import copy
    cache: list = []

    def get_cpu_info():
        if not cache:
            cache.append(orig())
        return copy.deepcopy(cache[0])

    get_cpu_info._ds_advisor_memo = True  # type: ignore[attr-defined]
    cpuinfo.get_cpu_info = get_cpu_info


def _install_patches():
    import torch  # noqa: F401
    from deepspeed.accelerator import get_accelerator

    acc = get_accelerator()
    cls = type(acc)
    if acc.device_name() == "cpu":
        # torch runs fp16 math on CPU; DeepSpeed's CPU accelerator reports fp16 unsupported
        # when mkldnn lacks fp16. Memory accounting is unaffected (this process only).
        cls.is_fp16_supported = lambda self: True
    orig_pin = cls.pin_memory

    def pin_memory(self, tensor, *a, **k):
        return _record_pinned(orig_pin(self, tensor, *a, **k))

    cls.pin_memory = pin_memory
    memoize_cpu_info()

    try:
        from deepspeed.ops.op_builder import AsyncIOBuilder
    except Exception:  # pragma: no cover
        return
    orig_load = AsyncIOBuilder.load

    class _HandleProxy:
        def __init__(self, h):
            object.__setattr__(self, "_h", h)

        def __getattr__(self, name):
            return getattr(self._h, name)

        def new_cpu_locked_tensor(self, *a, **k):
            return _record_pinned(self._h.new_cpu_locked_tensor(*a, **k))

    class _ModProxy:
        def __init__(self, mod):
            self._mod = mod

        def __getattr__(self, name):
            attr = getattr(self._mod, name)
            if name == "aio_handle":
                return lambda *a, **k: _HandleProxy(attr(*a, **k))
            return attr

    def load(self, *a, **k):
        return _ModProxy(orig_load(self, *a, **k))

    AsyncIOBuilder.load = load


# ---------------------------------------------------------------------------------------------
# allocation tracker (every storage created and freed, per timeline phase)


class StorageTracker:
    """Every tensor storage created while active, freed when its last reference goes, with the
    high-water mark of live bytes per phase (``set_phase``) and what was live at that mark.

    Built on ``torch.utils._python_dispatch.TorchDispatchMode`` (every aten op's outputs, factory
    functions and ops called from C++ extensions included) plus explicit :meth:`track` calls for
    memory no aten op returns (aio ``new_cpu_locked_tensor``). A storage is freed when its
    ``UntypedStorage`` object dies (torch preserves one Python object per StorageImpl, the same
    mechanism ``torch.distributed._tools.mem_tracker`` relies on). The site of each allocation is
    the innermost stack frame in deepspeed or advisor (else the innermost outside torch)."""

    def __init__(self):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        from advisor.engine.measure import CPU_ONLY_SITES
        self.live: dict[int, tuple[int, int, str]] = {}   # storage key -> (bytes, data_ptr, site)
        self.total = 0
        # the same without the storages of CPU_ONLY_SITES (gloo-only buffers): its own high-water
        # mark, since without them the phase may peak at another instant
        self.cpu_only_sites = CPU_ONLY_SITES
        self.cpu_only: set[int] = set()
        self.total_excl = 0
        self.phase = "start"
        self.peaks: dict[str, dict] = {}
        self.order: list[str] = []
        tracker = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in torch.utils._pytree.tree_flatten(out)[0]:
                    if isinstance(t, torch.Tensor):
                        tracker.track(t)
                return out

        self.mode = _Mode()

    @staticmethod
    def _site() -> str:
        import traceback
        frames = traceback.extract_stack()[:-3]
        pick = None
        for f in reversed(frames):
            fn = f.filename.replace("\\", "/")
            if "/deepspeed/" in fn or "/advisor/" in fn:
                pick = f
                break
            if pick is None and "/torch/" not in fn:
                pick = f
        if pick is None:
            return "?"
        fn = pick.filename.replace("\\", "/")
        for root in ("/deepspeed/", "/advisor/", "/torch/"):
            if root in fn:
                fn = root.strip("/") + "/" + fn.split(root, 1)[1]
                break
        return f"{fn}:{pick.name}:{pick.lineno}"

    def track(self, t) -> None:
        import weakref
        try:
            st = t.untyped_storage()
        except Exception:
            return
        nb = st.nbytes()
        if nb == 0 or st.device.type == "meta":  # meta tensors own no memory
            return
        key = st._cdata
        if key in self.live:
            return
        site = self._site()
        self.live[key] = (nb, st.data_ptr(), site)
        self.total += nb
        if site.startswith(self.cpu_only_sites):
            self.cpu_only.add(key)
        else:
            self.total_excl += nb
        weakref.finalize(st, self._free, key)
        pk = self.peaks.get(self.phase)
        if pk is not None and self.total > pk["bytes"]:
            self._mark(pk)
        if pk is not None and self.total_excl > pk.get("excl", -1):
            pk["excl"] = self.total_excl

    def _free(self, key) -> None:
        e = self.live.pop(key, None)
        if e is not None:
            self.total -= e[0]
            if key in self.cpu_only:
                self.cpu_only.discard(key)
            else:
                self.total_excl -= e[0]

    def _mark(self, pk: dict) -> None:
        pk["bytes"] = self.total
        pk["live"] = dict(self.live)

    def set_phase(self, phase: str) -> None:
        """Start a phase: its high-water mark starts at what is live now."""
        import gc
        gc.collect()
        self.phase = phase
        if phase not in self.peaks:
            self.order.append(phase)
            self.peaks[phase] = {"bytes": -1}
        self._mark(self.peaks[phase])
        self.peaks[phase]["excl"] = max(self.peaks[phase].get("excl", -1), self.total_excl)

    def end_phase(self) -> None:
        import gc
        gc.collect()
        pk = self.peaks.get(self.phase)
        if pk is not None:
            pk["end"] = self.total
            pk["end_live"] = dict(self.live)

    def report(self, claimed: dict[int, str]) -> list[dict]:
        """Per phase (in order): peak and end bytes, the peak's live bytes by ledger item
        (claimed by a census on the tracker's record of that allocation; ``claimed``, data_ptr -> item,
        is kept for callers) and, for storages no census claims, by
        allocation site (the unattributed ones, with their sizes)."""
        def split(live: dict) -> tuple[dict[str, int], list[dict]]:
            by_item: dict[str, int] = {}
            unattributed: dict[str, int] = {}
            for e in live.values():
                nb, ptr, site = e
                # claimed by the census that saw this allocation; an address alone is not enough:
                # a freed storage's address is reused (a forward buffer at a later exp_avg's address)
                item = _CLAIMED_ENTRIES[id(e)][1] if id(e) in _CLAIMED_ENTRIES else None
                if item:
                    by_item[item] = by_item.get(item, 0) + nb
                else:
                    unattributed[site] = unattributed.get(site, 0) + nb
            return by_item, sorted(({"site": k, "bytes": v} for k, v in unattributed.items()),
                                   key=lambda r: -r["bytes"])[:40]

        out = []
        for ph in self.order:
            pk = self.peaks[ph]
            by_item, unattributed = split(pk.get("live", {}))
            # what no census claims at the phase's end too: measure compares initialize at its end
            # (a transient of the phase, e.g. initialize_optimizer_states' zeros, is gone there)
            end_unattributed = split(pk["end_live"])[1] if "end_live" in pk else unattributed
            out.append({"phase": ph, "peak": pk["bytes"], "end": pk.get("end", pk["bytes"]),
                        "peak_excl_cpu_only": pk.get("excl", pk["bytes"]),
                        "by_item": by_item, "unattributed": unattributed,
                        "end_unattributed": end_unattributed})
        return out


# ---------------------------------------------------------------------------------------------
# census


class Census:
    """Bytes per item per tier, each storage counted once (first item that claims it)."""

    def __init__(self, cpu_accel: bool):
        self.seen: set[int] = set()
        self.claimed: dict[int, str] = {}
        self.items: dict[str, dict[str, int]] = {}
        self.cpu_accel = cpu_accel

    def tier(self, t) -> str:
        ptr, nb = _storage_key(t)
        if _PINNED.get(ptr) == nb or (t.device.type == "cpu" and t.is_pinned()):
            return "host_pinned"
        if t.device.type != "cpu":
            return "accelerator"
        return "unpinned" if self.cpu_accel else "host_pageable"

    def add(self, item: str, t) -> None:
        import torch
        if t is None or not isinstance(t, torch.Tensor):
            return
        try:
            ptr, nb = _storage_key(t)
        except Exception:
            return
        if ptr == 0 or nb == 0 or ptr in self.seen:
            self.items.setdefault(item, {})
            return
        self.seen.add(ptr)
        self.claimed[ptr] = item
        _CLAIMED.setdefault(ptr, item)
        if _TRACKER:  # the tracker's record of this very allocation (an address alone is reused)
            try:
                e = _TRACKER[0].live.get(t.untyped_storage()._cdata)
            except Exception:
                e = None
            if e is not None and e[1] == ptr:
                _CLAIMED_ENTRIES.setdefault(id(e), (e, item))
        d = self.items.setdefault(item, {})
        tier = self.tier(t)
        d[tier] = d.get(tier, 0) + nb

    def add_all(self, item: str, obj) -> None:
        import torch
        if obj is None:
            return
        if isinstance(obj, torch.Tensor):
            self.add(item, obj)
        elif isinstance(obj, dict):
            for v in obj.values():
                self.add_all(item, v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                self.add_all(item, v)

    def result(self) -> dict[str, dict[str, int]]:
        return {k: v for k, v in self.items.items()}


def _basic_optimizer(engine):
    opt = engine.optimizer
    inner = getattr(opt, "optimizer", None)
    import torch
    if isinstance(inner, torch.optim.Optimizer):
        return inner
    return opt


def _walk(engine, c: Census, extra: dict | None = None) -> None:
    """Attribute the engine's tensors to ledger items (order = attribution priority)."""
    opt = engine.optimizer
    basic = _basic_optimizer(engine)
    module = engine.module
    name = type(opt).__name__

    # ---- parameters
    if hasattr(opt, "bit16_groups_flat"):
        c.add_all("lp_params_flat", opt.bit16_groups_flat)
    if hasattr(opt, "bf16_groups_flat"):
        c.add_all("lp_params_flat", opt.bf16_groups_flat)
    if hasattr(opt, "fp16_groups_flat"):
        c.add_all("lp_params_flat", opt.fp16_groups_flat)
    stage3 = hasattr(opt, "fp16_partitioned_groups_flat")
    if stage3:
        for g in opt.fp16_groups:
            for p in g:
                c.add("lp_param_partitions", p.ds_tensor)
        for p in module.parameters():
            if getattr(p, "ds_tensor", None) is not None and p.requires_grad:
                c.add("lp_param_partitions", p.ds_tensor)
        c.add_all("max_in_cpu_buffer", getattr(opt, "param_groups_fp16_flat_cpu_memory", None))
        for p in module.parameters():
            if p.requires_grad and p.data.numel() > 0:
                c.add("lp_params_gathered", p.data)
    elif name in ("FP16_UnfusedOptimizer",):
        c.add_all("lp_params_flat", [[p.data for p in g] for g in opt.fp16_groups])
    # frozen parameters (stage 3: their partitions / gathered copies)
    for p in module.parameters():
        if not p.requires_grad:
            c.add("frozen_params", getattr(p, "ds_tensor", None))
            if p.data.numel() > 0:  # ZeRO-3: only a persistent one's gathered copy is non-empty
                c.add("frozen_params_gathered" if stage3 else "frozen_params", p.data)
    for p in module.parameters():
        if p.requires_grad and not stage3:
            c.add("lp_params_flat", p.data)

    # ---- master weights and their fp32 grads
    masters = []
    for attr in ("single_partition_of_fp32_groups", "fp32_groups_flat_partition", "fp32_groups_flat",
                 "fp32_partitioned_groups_flat"):
        if hasattr(opt, attr):
            masters.extend(getattr(opt, attr))
    if name == "FP16_UnfusedOptimizer":
        for g in opt.fp32_groups:
            masters.extend(g)
    for m in masters:
        c.add("fp32_master", m)
    if name == "BF16_Optimizer":
        c.add_all("fp32_grad_accum", getattr(opt, "fp32_groups_gradients_flat", None))
    # kept 16-bit/fp32 grads first: an fp32 model's fp32 grad can be a view of them
    c.add_all("grad_partitions_flat_buffer", getattr(opt, "grad_partitions_flat_buffer", None))
    c.add_all("averaged_gradients", getattr(opt, "averaged_gradients", None))
    c.add_all("averaged_gradients", getattr(opt, "grads_in_partition", None))
    for m in masters:
        c.add("fp32_grad", m.grad)

    # ---- optimizer state
    for p, st in basic.state.items():
        for k, v in st.items():
            item = k if k in ("exp_avg", "exp_avg_sq", "sum", "step") else f"optim_{k}"
            c.add_all(item, v)
    # the first torch Adagrad, replaced by ZeRO-1/2's rebuilt one over the fp32 partitions (stage_1_and_2.py
    # l.943-946) and kept by the engine (engine.py l.2353 self.basic_optimizer): its 16-bit parameters' state
    # (advisor.ledger.state.adagrad_rebuilt; stage3.py l.1357-1358 likewise)
    first = getattr(engine, "basic_optimizer", None)
    if first is not None and first is not basic and first is not opt:
        for p, st in first.state.items():
            for k, v in st.items():
                c.add_all({"sum": "adagrad_lp_state", "step": "adagrad_lp_step"}.get(k, f"optim_{k}"), v)

    # ---- gradients
    c.add_all("grad_partitions_flat_buffer", getattr(opt, "grad_partitions_flat_buffer", None))
    c.add_all("averaged_gradients", getattr(opt, "averaged_gradients", None))
    c.add_all("averaged_gradients", getattr(opt, "grads_in_partition", None))
    c.add_all("offload_accumulated_grads_cpu", getattr(opt, "accumulated_grads_in_cpu", None))
    swapper = getattr(opt, "optimizer_swapper", None)
    if swapper is not None:
        for info in getattr(swapper, "swap_params_info", {}).values():
            c.add_all("opt_unswapped_grad_tails", getattr(info, "unswapped_gradients", None))
    for p in module.parameters():
        c.add("lp_grads", p.grad)
        c.add("fp32_grad_accum", getattr(p, "grad_accum", None))

    # ---- workspace
    buckets = getattr(opt, "ipg_buckets", None)
    if isinstance(buckets, dict):
        for b in buckets.values():
            c.add_all("ipg_bucket", getattr(b, "buffer", None))
    c.add_all("offload_bit16_param_buffer", getattr(opt, "param_buffer_of_bit16_for_cpu_offload_groups", None))
    c.add_all("offload_temp_grad_cpu", getattr(opt, "temp_grad_buffer_for_cpu_offload", None))
    c.add_all("offload_temp_grad_accel", getattr(opt, "temp_grad_buffer_for_gpu_offload", None))
    if swapper is not None:
        mgr = getattr(swapper, "swap_buffer_manager", None)
        c.add_all("opt_swap_buffers", getattr(mgr, "all_buffers", None))
    pswap = None
    for p in module.parameters():
        pswap = getattr(p, "nvme_swapper", None)
        if pswap is not None:
            break
    if pswap is not None:
        c.add_all("param_swap_buffers", getattr(pswap, "buffers", None))
        c.add_all("param_partitioned_swap_buffer", getattr(pswap, "partitioned_swap_buffer", None))
    if extra:
        for item, ts in extra.items():
            c.add_all(item, ts)


def _nvme_files(nvme_path: str | None, rank: int, frozen_ids: "set[int] | None" = None) -> dict[str, dict[str, int]]:
    """Swap files this rank wrote under ``nvme_path`` (``zero_stage_3/*/rank{r}``), by item.

    A parameter swap file is ``{ds_id}_param.tensor.swp`` (``partitioned_param_swapper.py``
    _get_swap_paths); those of parameters in ``frozen_ids`` (trainable=False) are
    ``frozen_params``, the others ``lp_param_partitions``."""
    out: dict[str, dict[str, int]] = {}
    if not nvme_path:
        return out
    base = os.path.join(nvme_path, "zero_stage_3")
    if not os.path.isdir(base):
        return out
    for kind in os.listdir(base):
        d = os.path.join(base, kind, f"rank{rank}")
        if not os.path.isdir(d):
            continue
        for fn in os.listdir(d):
            size = os.path.getsize(os.path.join(d, fn))
            if kind.endswith("params"):
                head = fn.split("_", 1)[0]
                frozen = frozen_ids is not None and head.isdigit() and int(head) in frozen_ids
                item = "frozen_params" if frozen else "lp_param_partitions"
            elif fn.startswith("exp_avg_sq-"):
                item = "exp_avg_sq"
            elif fn.startswith("exp_avg-"):
                item = "exp_avg"
            elif "_gradient_" in fn:
                item = "fp32_grad"
            else:
                item = "fp32_master"
            e = out.setdefault(item, {})
            e["nvme"] = e.get("nvme", 0) + size
            out.setdefault("_files", {})
            out["_files"]["count"] = out["_files"].get("count", 0) + 1
    return out


# ---------------------------------------------------------------------------------------------
# proxy model


_GRAD_FACTOR = 2.0 ** -8


def _build_model(inventory: dict, submodules: bool = False, linear: "dict[int, int] | None" = None,
                 containers: bool = False, nodes: "dict[int, tuple[int, str]] | None" = None):
    """The proxy model of ``inventory`` and its optimizer param groups (trainable tensors by their
    ``group``). Flat (``submodules`` false): every parameter registered on one module. With
    ``submodules``: one child module per owning module of the inventory's names
    (:func:`advisor.ledger.state.module_of`, in order of first appearance), each registering its
    own parameters in its ``__init__`` as a real model's layers do; ``deepspeed.zero.Init``
    partitions a module's parameters when that module's ``__init__`` returns
    (``partition_parameters.py`` InsertPostInitMethodToModuleSubClasses.partition_after), so
    only this structure shows its load transient (one module materialised at a time).
    ``linear`` ({weight index: bias index} of the inventory, as :func:`advisor.ledger.state.linear_pairs`
    gives them; a non-empty one implies ``submodules``): each such weight (out, in) and bias (out)
    runs ``F.linear`` on a constant input that needs no gradient, an ``nn.Linear``'s own autograd
    node (AddmmBackward0), which makes the weight's and the bias's gradients together; the input is
    a 2-byte scalar expanded to (1, in), so no activation of any size is saved (addmm saves mat2
    only when the input needs a gradient). The module's other parameters are touched alone.
    ``nodes`` ({weight index: (bias index, kind)}, :func:`advisor.ledger.state.autograd_node_pairs`'
    others; implies ``submodules``): a GPT-2 Conv1D's weight (in, out) and bias run ``torch.addmm(bias, x,
    weight)`` (AddmmBackward0 makes both gradients, the weight's without a transpose), a LayerNorm's
    ``F.layer_norm`` (native_layer_norm_backward makes both; its contiguous (1, n) input, saved for
    backward, is n x D bytes of the proxy's own).
    ``containers`` (implies ``submodules``): the module tree the dotted names spell, as a real
    model's (``model.layers.0.mlp.up_proj``): every prefix of an owning module's name is a module
    owning no parameter; one whose children are numbered (``stack`` of ``stack.0.l1``) is an
    ``nn.ModuleList``, never called itself (``model.layers``' role), its parent runs its items; any
    other runs its children in order (``LlamaDecoderLayer``'s role). DeepSpeed hooks and traces
    every one of them (``parameter_offload.py`` _register_deepspeed_module, ``partitioned_param_coordinator.py``
    record_module); the ledger's replay reads the same structure from the names
    (:func:`advisor.ledger.state.zero3_container_steps`). Owning modules must not nest. The inventory's
    ``modules`` (:class:`advisor.model.inventory.ModuleSpec`, read under ``containers`` only): a numbered
    container declared ``sequential`` is an ``nn.Sequential``, called, which runs its items itself; a
    declared parameterless leaf is a ``Plain`` module placed right before its ``before`` module (last
    without one)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from advisor.ledger.state import module_of

    g = torch.Generator().manual_seed(0)

    def _param(t):
        # built in place: no temporary at construction (the load phase is exactly N x 4 B)
        x = torch.empty(*t["shape"])
        return nn.Parameter(x.normal_(0.0, 0.02, generator=g if x.device.type == "cpu" else None),
                            requires_grad=bool(t.get("trainable", True)))

    def _touch(mod, names, s):
        # p.mean() saves no activation and allocates only a scalar, so what is live in
        # forward/backward is the engine's own state. The fp32 factor 2**-8 keeps fp16 finite:
        # the gradient reaching the 16-bit mean is loss_scale x factor, and fp16's initial
        # loss scale 2**16 is itself past fp16's largest value (65,504), so without it every
        # fp16 step overflows, is skipped, and no optimizer state is ever created.
        for n in names:
            s = s + getattr(mod, n).mean().float() * _GRAD_FACTOR
        return s

    class Proxy(nn.Module):
        """Parameters with exactly the inventory's shapes, in order; forward touches each."""

        def __init__(self, tensors):
            super().__init__()
            self._names = []
            for i, t in enumerate(tensors):
                self.register_parameter(f"p{i}", _param(t))
                self._names.append(f"p{i}")

        def forward(self, x):
            return _touch(self, self._names, x.float().mean())

    class Leaf(nn.Module):
        """One owning module: its parameters (local names p0, p1, ...), created in its __init__."""

        def __init__(self, tensors, pair=None):
            super().__init__()
            self._names = []
            for j, t in enumerate(tensors):
                self.register_parameter(f"p{j}", _param(t))
                self._names.append(f"p{j}")
            #: (local weight index, local bias index, kind) run as one node, or None; kind "linear"
            #: (F.linear), "conv1d" (HF Conv1D's torch.addmm(bias, x, weight)), "layer_norm" (F.layer_norm)
            self._pair = pair

        def forward(self, s):
            if self._pair is None:
                return _touch(self, self._names, s)
            jw, jb, kind = self._pair
            for j, n in enumerate(self._names):
                if j == min(jw, jb):
                    w, b = getattr(self, f"p{jw}"), getattr(self, f"p{jb}")
                    one = torch.ones((), dtype=w.dtype, device=w.device)
                    if kind == "linear":
                        y = F.linear(one.expand(1, w.shape[1]), w, b)
                    elif kind == "conv1d":
                        # addmm saves its mat1 (the expanded 2-byte scalar), not a copy
                        y = torch.addmm(b, one.expand(1, w.shape[0]), w)
                    else:
                        # native_layer_norm takes a contiguous input and saves it for backward: (1, n) x D
                        # bytes of the proxy's own, an activation of the real model's
                        y = F.layer_norm(one.expand(1, w.shape[0]).contiguous(), (w.shape[0],), w, b)
                    # mean before the fp32 cast, as _touch: only the (1, out) output is made in forward
                    s = s + y.mean().float() * _GRAD_FACTOR
                elif j != max(jw, jb):
                    s = _touch(self, (n,), s)
            return s

    class Node(nn.Module):
        """A container: no parameter of its own; its forward runs its children in order, a
        ModuleList child's items one after another (an nn.Sequential child is called: it runs its own)."""

        def forward(self, s):
            for child in self.children():
                for m in (child if isinstance(child, nn.ModuleList) else (child,)):
                    out = m(s)
                    # a leaf whose output needs no gradient (Plain(backward=False)) is added beside the stream
                    s = out if getattr(m, "_grad_out", True) else s + out
            return s

    class Plain(nn.Module):
        """A declared parameterless leaf (``Inventory.modules``: a rotary embedding, an activation, a
        dropout): with ``backward`` its output is its input (no allocation), so its pre-backward hook
        fires when the gradient reaches it; without, a new scalar that needs no gradient (as a rotary
        embedding's cos/sin), so that hook never fires."""

        def __init__(self, backward: bool):
            super().__init__()
            self._grad_out = backward

        def forward(self, s):
            return s if self._grad_out else torch.zeros((), dtype=s.dtype, device=s.device)

    def _place(root, path: str, leaf, sequential: "set[str]" = frozenset()) -> None:
        # put ``leaf`` at the dotted ``path`` under ``root``, making the containers on the way (a
        # numbered one an nn.Sequential where the inventory declares it, else an nn.ModuleList)
        parts = path.split(".")
        cur = root

        def make(j):
            if not parts[j + 1].isdigit():
                return Node()
            return nn.Sequential() if ".".join(parts[:j + 1]) in sequential else nn.ModuleList()
        for j, c in enumerate(parts):
            last = j == len(parts) - 1
            if isinstance(cur, (nn.ModuleList, nn.Sequential)):
                if not c.isdigit() or int(c) > len(cur):
                    raise ValueError(f"containers: {path!r}: ModuleList items must be numbered 0, 1, ... in order")
                if isinstance(cur, nn.Sequential) and not getattr(leaf, "_grad_out", True):
                    raise ValueError(f"containers: {path!r}: an nn.Sequential item's output is the next one's input")
                if int(c) == len(cur):
                    cur.append(leaf if last else make(j))
                nxt = cur[int(c)]
            elif c in cur._modules:
                nxt = cur._modules[c]
            else:
                nxt = leaf if last else make(j)
                cur.add_module(c, nxt)
            if last and nxt is not leaf:
                raise ValueError(f"containers: {path!r} owns parameters and contains modules")
            cur = nxt

    class Modular(nn.Module):
        """The inventory's owning modules as children (in order); forward runs each child."""

        def __init__(self, tensors):
            super().__init__()
            owners: dict[str, list[int]] = {}
            for i, t in enumerate(tensors):
                owners.setdefault(module_of(t["name"]), []).append(i)
            #: inventory index of each leaf's parameters, in the leaf's order
            self.index = list(owners.values())
            pairs = {iw: (ib, "linear") for iw, ib in (linear or {}).items()}
            pairs.update({iw: (ib, kind) for iw, (ib, kind) in (nodes or {}).items()})
            built = []
            for ix in self.index:
                pos = {i: j for j, i in enumerate(ix)}
                pair = next(((pos[iw], pos[pairs[iw][0]], pairs[iw][1]) for iw in ix
                             if iw in pairs and pairs[iw][0] in pos), None)
                built.append(Leaf([tensors[i] for i in ix], pair))
            if containers:
                # the inventory's declared modules owning no parameter (advisor.model.inventory.ModuleSpec):
                # nn.Sequential containers, and parameterless leaves placed right before their ``before``
                decl = inventory.get("modules") or []
                seq = {m["name"] for m in decl if m.get("sequential")}
                plain: dict = {}
                for m in decl:
                    if not m.get("sequential"):
                        plain.setdefault(m.get("before"), []).append(m)
                self.tree = Node()
                for path, leaf in zip(owners, built):
                    for m in plain.get(path, ()):
                        _place(self.tree, m["name"], Plain(bool(m.get("backward", True))), seq)
                    _place(self.tree, path, leaf, seq)
                for m in plain.get(None, ()):
                    _place(self.tree, m["name"], Plain(bool(m.get("backward", True))), seq)
                #: not registered (a plain list): the owning modules, in the inventory's order
                self.__dict__["owners"] = built
            else:
                self.leaves = nn.ModuleList(built)

        def forward(self, x):
            s = x.float().mean()
            if containers:
                # the tree's root runs its children itself: no extra module between this one and them
                return Node.forward(self.tree, s)
            for leaf in self.leaves:
                s = leaf(s)
            return s

    tensors = inventory["tensors"]
    submodules = submodules or bool(linear) or bool(nodes) or containers
    model = Modular(tensors) if submodules else Proxy(tensors)
    if submodules:
        by_index = {i: getattr(leaf, n) for leaf, ix in zip(model.owners if containers else model.leaves, model.index)
                    for i, n in zip(ix, leaf._names)}
    else:
        by_index = {i: getattr(model, f"p{i}") for i in range(len(tensors))}
    groups: dict[int, list] = {}
    for i, t in enumerate(tensors):
        if t.get("trainable", True):
            groups.setdefault(int(t.get("group", 0)), []).append(by_index[i])
    param_groups = [{"params": groups[k]} for k in sorted(groups)]
    #: each inventory tensor's parameter, in inventory order (not registered: a plain attribute)
    model.__dict__["inventory_params"] = [by_index[i] for i in range(len(tensors))]
    return model, param_groups


# ---------------------------------------------------------------------------------------------


def _run_cell(cell: dict, rank: int, cpu_accel: bool) -> dict:
    import torch
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    config = cell["config"]
    steps = int(cell.get("steps", 2))
    nvme_path = cell.get("nvme_path")
    _PINNED.clear()
    _CLAIMED.clear()
    _CLAIMED_ENTRIES.clear()
    tracker = StorageTracker() if cell.get("track") else None
    restore = None
    if tracker is not None:
        _TRACKER[:] = [tracker]
        restore = _settle_collectives()
        tracker.mode.__enter__()
    try:
        return _run_cell_tracked(cell, rank, cpu_accel, tracker)
    finally:
        if tracker is not None:
            tracker.mode.__exit__(None, None, None)
            _TRACKER.clear()
            restore()


def _settle_collectives(timeout_s: float = 0.2):
    """While the tracker runs, make each blocking ``torch.distributed.all_reduce`` / ``reduce`` / ``broadcast``
    return only once the backend has dropped its reference to the tensor (or ``timeout_s``
    passed); returns the function that undoes it.

    gloo's worker thread holds a finished collective's tensor for a moment after the blocking
    call has returned, so whether a DeepSpeed temporary (``stage_1_and_2.py`` allreduce_bucket's
    flat copy) is still alive when the next buffer is allocated depends on thread timing, and the
    tracker's peak with it. Waiting for that reference makes the measurement what DeepSpeed's own
    code holds. Nothing is allocated or kept."""
    import torch.distributed as tdist

    saved = {}

    def wrap(name):
        orig = getattr(tdist, name)
        saved[name] = orig

        def call(*a, **k):
            tensor = a[0] if a else k["tensor"]  # deepspeed.comm passes broadcast's tensor by keyword
            n0 = tensor._use_count()
            out = orig(*a, **k)
            if not k.get("async_op"):
                end = time.monotonic() + timeout_s
                while tensor._use_count() > n0 and time.monotonic() < end:
                    time.sleep(0.0002)
            return out
        setattr(tdist, name, call)

    # broadcast: zero.Init's _zero_init_param broadcasts each parameter before partitioning it;
    # gloo's hold on it kept a module's whole parameters alive into the next module's build
    for name in ("all_reduce", "reduce", "broadcast"):
        wrap(name)

    def restore():
        for name, orig in saved.items():
            setattr(tdist, name, orig)
    return restore


def _phase(tracker, name: str | None) -> None:
    """End the tracker's current phase and start ``name`` (None: just end it)."""
    if tracker is None:
        return
    tracker.end_phase()
    if name:
        tracker.set_phase(name)


@contextlib.contextmanager
def _initialize_phases(tracker, zero_init: bool, module_after: dict):
    """Inside ``deepspeed.initialize``: the tracker phases ``initialize:cast`` (from its start
    until ``DeepSpeedEngine._configure_distributed_model`` returns: the cast and
    ``self.module.to(self.device)``), then, without zero.Init at ZeRO-3, ``initialize:module``
    (until ``DeepSpeedZeRoOffload._convert_to_zero_parameters`` returns: the whole model
    partitioned in place), then ``initialize``. ``module_after`` gets the module's parameter
    bytes by dtype when ``_configure_distributed_model`` returns (``p.data``: empty under zero.Init)."""
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.runtime.zero.parameter_offload import DeepSpeedZeRoOffload

    orig_cdm = DeepSpeedEngine._configure_distributed_model
    orig_conv = DeepSpeedZeRoOffload._convert_to_zero_parameters

    def cdm(self, *a, **k):
        out = orig_cdm(self, *a, **k)
        for p in self.module.parameters():
            d = str(p.data.dtype).replace("torch.", "")
            module_after[d] = module_after.get(d, 0) + p.data.numel() * p.data.element_size()
        _phase(tracker, "initialize" if zero_init or not self.zero_optimization_partition_weights()
               else "initialize:module")
        return out

    def conv(self, *a, **k):
        out = orig_conv(self, *a, **k)
        if tracker is not None and tracker.phase == "initialize:module":
            _phase(tracker, "initialize")
        return out

    DeepSpeedEngine._configure_distributed_model = cdm
    DeepSpeedZeRoOffload._convert_to_zero_parameters = conv
    _phase(tracker, "initialize:cast")
    try:
        yield
    finally:
        DeepSpeedEngine._configure_distributed_model = orig_cdm
        DeepSpeedZeRoOffload._convert_to_zero_parameters = orig_conv


def _build_in_load_phase(cell: dict, submodules: bool):
    """The proxy model and its param groups, under ``deepspeed.zero.Init`` when the cell says ``zero_init``."""
    import deepspeed
    import torch
    from deepspeed.runtime.zero.partition_parameters import InsertPostInitMethodToModuleSubClasses as _Ins
    # the ledger's nn.Linear pairs (state.linear_pairs, asked by measure.run_measure_many)
    linear = {int(w): int(b) for w, b in cell.get("linear_pairs") or ()}
    # and its Conv1D / LayerNorm pairs (state.autograd_node_pairs)
    nodes = {int(w): (int(b), str(k)) for w, b, k in cell.get("node_pairs") or ()}
    containers = bool(cell.get("containers"))
    # a ZeRO-3 engine built by an earlier cell of this process replaced F.linear with
    # zero3_linear_wrap for good (partition_parameters.py _enable_mem_efficient_linear: "This will
    # persist unless manually reset"); a cell's own process would have torch's, so put it back
    if hasattr(_Ins, "linear_bk"):
        torch.nn.functional.linear = _Ins.linear_bk
    # an earlier hpZ cell's engine left its intra-node group in deepspeed.utils.groups (stage3.py l.753
    # _create_zero_param_parallel_group, never released), and every later ZeRO-3 engine of the process takes it
    # whatever its zero_hpz_partition_size (stage3.py l.267; partition_parameters.py _partition_param_sec l.1915
    # then makes secondary partitions: z3_bf16_nonpersist_w4 after z3_bf16_hpz2_w4, +43,224 B from initialize on
    # every rank); a cell's own process starts without it
    from deepspeed.utils import groups as _groups
    _groups._ZERO_PARAM_INTRA_PARALLEL_GROUP = None
    if cell.get("zero_init"):
        # torch imports torch._dynamo on the first call through a torch._compile-wrapped function
        # (torch.empty here); imported while zero.Init has replaced torch.Tensor.__new__, dynamo's
        # polyfill registration rejects the replacement's signature (TypeError): import it first
        import torch._dynamo  # noqa: F401
        with deepspeed.zero.Init(config_dict_or_path=cell["config"]):
            return _build_model(cell["inventory"], submodules, linear, containers, nodes)
    return _build_model(cell["inventory"], submodules, linear, containers, nodes)


def _trainer_optimizer(spec: dict, model, inventory: dict):
    """The HF Trainer's own optimizer over the proxy ``model`` (cell option ``trainer_optimizer``): the real
    transformers model of ``spec["hf_config"]`` (a config.json dict) is built on the meta device, its parameter names
    checked to be the proxy's ``inventory``'s (in ``model.parameters()`` order), and the two param groups made exactly as
    transformers 5.25.0 ``trainer.py`` create_optimizer l.1284-1300 makes them -- its own
    ``Trainer.get_decay_parameter_names`` (l.1423-1433, which reads nothing of the Trainer) on the real module;
    the decay group at ``spec["weight_decay"]``, the rest at 0.0, an empty group kept as the Trainer keeps it --
    then ``torch.optim.AdamW(groups, lr=..., fused=spec["fused"])`` (``trainer_optimizer.py`` _get_adamw_torch
    l.201-208; fused AdamW runs on the CPU in torch 2.13). A tensor the proxy has and transformers does not (the
    DeepSeek-V3 router score bias: a buffer there) is refused."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, Trainer
    cfg = dict(spec["hf_config"])
    mt = cfg.pop("model_type")
    with torch.device("meta"):
        real = AutoModelForCausalLM.from_config(AutoConfig.for_model(mt, **cfg))
    real_names = [n for n, _ in real.named_parameters()]
    proxy = model.inventory_params
    names = [t["name"] for t in inventory["tensors"]]
    if names != real_names:
        raise ValueError(f"trainer_optimizer: the proxy's names are not {mt}'s: "
                         f"{sorted(set(names) ^ set(real_names))[:4]}")
    decay = set(Trainer.get_decay_parameter_names(None, real))
    groups = [{"params": [p for n, p in zip(names, proxy) if n in decay and p.requires_grad],
               "weight_decay": float(spec.get("weight_decay", 0.0))},
              {"params": [p for n, p in zip(names, proxy) if n not in decay and p.requires_grad],
               "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=float(spec.get("lr", 5e-5)), fused=bool(spec.get("fused")))


def _group_numels(opt) -> "list[int] | None":
    """Elements of each param group as the ZeRO optimizer ``opt`` holds them (ZeRO-1/2 ``bit16_groups``, ZeRO-3
    ``trainable_param_groups`` from stage3.py l.440, BF16_Optimizer ``bf16_groups``), None for another wrapper."""
    for attr in ("bit16_groups", "bf16_groups"):
        gs = getattr(opt, attr, None)
        if gs is not None:
            return [sum(int(getattr(p, "ds_numel", p.numel())) for p in g) for g in gs]
    gs = getattr(opt, "trainable_param_groups", None)
    if gs is not None:
        return [sum(int(getattr(p, "ds_numel", p.numel())) for p in g["params"]) for g in gs]
    return None


def _injected_buffer(nbytes: int, dev):
    """``nbytes`` bytes (uint8) on ``dev`` that nothing in DeepSpeed or the ledger accounts for, or
    None for 0: the cell option ``inject_forward_bytes`` (tests/engine/test_measure_cli.py) proves
    ``measure`` reports an unknown buffer as unattributed at this function's site."""
    import torch
    return torch.empty(nbytes, dtype=torch.uint8, device=dev) if nbytes > 0 else None


def _save_phases(engine, tracker, save_16bit: bool) -> None:
    """After the last step, the tracker phases of a checkpoint save into a temporary folder:
    ``save:16bit`` (``save_16bit``: ``engine.save_16bit_model``, what the HF Trainer's save_model
    runs, ``runtime/engine.py`` l.5707-5755) and ``save`` (``engine.save_checkpoint``, l.4869-4966:
    the model-states file, then the ZeRO optimizer-states file of every rank)."""
    import shutil
    import tempfile

    import torch.distributed as tdist
    d = tempfile.mkdtemp(prefix="ds-advisor-save-")
    try:
        if save_16bit:
            if tracker is not None:
                tracker.set_phase("save:16bit")
            engine.save_16bit_model(d)
            _phase(tracker, None)
        if tracker is not None:
            tracker.set_phase("save")
        engine.save_checkpoint(d)
        _phase(tracker, None)
        tdist.barrier()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _run_cell_tracked(cell: dict, rank: int, cpu_accel: bool, tracker) -> dict:
    """The body of :func:`_run_cell`; ``tracker`` (a :class:`StorageTracker` or None) is told
    the phases: load (model construction, under ``deepspeed.zero.Init`` when the cell says
    ``zero_init``), initialize, and forward/backward/step of every step k as ``forward:k`` ..."""
    import torch
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    config = cell["config"]
    steps = int(cell.get("steps", 2))
    nvme_path = cell.get("nvme_path")
    if tracker is not None:
        tracker.set_phase("load")
    # under zero.Init, the inventory's modules as child modules (a flat proxy would be one module,
    # materialised whole before zero.Init partitions it, which no real model is)
    submodules = bool(cell.get("submodules", cell.get("zero_init")))
    # the load dtype (HF from_pretrained's torch_dtype sets torch's default dtype while it builds)
    load_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[cell.get("load_dtype") or "fp32"]
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(load_dtype)
    try:
        model, groups = _build_in_load_phase(cell, submodules)
    finally:
        torch.set_default_dtype(default_dtype)
    client = (_trainer_optimizer(cell["trainer_optimizer"], model, cell["inventory"])
              if cell.get("trainer_optimizer") else None)
    t0 = time.time()
    module_after: dict[str, int] = {}
    with _initialize_phases(tracker, bool(cell.get("zero_init")), module_after):
        if client is not None:  # as accelerate hands the Trainer's optimizer over (accelerator.py l.2329-2347)
            engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=client, config=config)
        else:
            engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=groups, config=config)
    _phase(tracker, None)
    opt = engine.optimizer
    basic = _basic_optimizer(engine)
    dev = get_accelerator().current_device_name()
    dtype = next(engine.module.parameters()).dtype
    if get_accelerator().device_name() != "cpu":
        torch.cuda.reset_peak_memory_stats()

    snaps: dict[str, dict] = {}
    captured: dict[str, list] = {"ipg": []}
    if hasattr(opt, "setup_buckets") and not hasattr(opt, "fp16_partitioned_groups_flat"):
        orig_setup = opt.setup_buckets

        def setup_buckets(*a, **k):
            r = orig_setup(*a, **k)
            for b in opt.ipg_buckets.values():
                for buf in b.buffer:
                    captured["ipg"].append(buf)
            return r

        opt.setup_buckets = setup_buckets

    in_step_best: list = [None, -1]
    orig_step = basic.step
    state = {"last": False}

    def step(*a, **k):
        if state["last"]:
            c = Census(cpu_accel)
            _walk(engine, c)
            tot = sum(sum(v.values()) for v in c.items.values())
            if tot > in_step_best[1]:
                in_step_best[0], in_step_best[1] = c.result(), tot
        return orig_step(*a, **k)

    basic.step = step

    x = torch.ones(2, 4, device=dev, dtype=dtype)
    for s in range(steps):
        state["last"] = s == steps - 1
        captured["ipg"] = []
        if tracker is not None:
            tracker.set_phase(f"forward:{s + 1}")
        loss = engine(x)
        # a buffer neither the ledger nor any census knows (cell option, tests only): measure must
        # report it as unattributed, with its size and site, and fail the forward phase's parity
        injected = _injected_buffer(int(cell.get("inject_forward_bytes", 0)), dev)
        _phase(tracker, f"backward:{s + 1}")
        engine.backward(loss)
        _phase(tracker, None)
        if state["last"]:
            c = Census(cpu_accel)
            _walk(engine, c, extra={"ipg_bucket": captured["ipg"]})
            snaps["bwd"] = c.result()
        # drop the census's hold on the ipg buckets: DeepSpeed released them in the backward
        # epilogue (stage_1_and_2.py:_release_ipg_buffers), and a reference kept here would keep
        # them live through the step the tracker measures next
        captured["ipg"] = []
        if tracker is not None:
            tracker.set_phase(f"step:{s + 1}")
        engine.step()
        _phase(tracker, None)
        del loss, injected
    c = Census(cpu_accel)
    _walk(engine, c)
    snaps["steady"] = c.result()
    snaps["in_step"] = in_step_best[0] or {}
    del c
    if cell.get("save"):
        _save_phases(engine, tracker, bool(cell.get("save_16bit")))
    frozen_ids = {int(p.ds_id) for p in engine.module.parameters() if not p.requires_grad and hasattr(p, "ds_id")}
    files = _nvme_files(nvme_path, rank, frozen_ids)
    nfiles = files.pop("_files", {}).get("count", 0)
    for item, tiers in files.items():
        snaps["steady"].setdefault(item, {}).update(tiers)
    out = {
        "snapshots": snaps,
        "wrapper": type(opt).__name__,
        "basic_optimizer": type(basic).__name__,
        "nvme_files": nfiles,
        "seconds": round(time.time() - t0, 3),
        "accelerator": get_accelerator().device_name(),
        # fp16 steps skipped on overflow: no optimizer step ran, so the census is not of a step
        "skipped_steps": int(getattr(engine, "skipped_steps", 0) or 0),
        # the module's parameter bytes by dtype when _configure_distributed_model returned
        "module_after_to": module_after,
        # the elements of each param group the ZeRO optimizer holds (DeepSpeed's, after it dropped empty ones)
        "group_numels": _group_numels(opt),
    }
    if get_accelerator().device_name() != "cpu":
        out["max_memory_allocated"] = int(torch.cuda.max_memory_allocated())
    if tracker is not None:
        out["tracker"] = tracker.report(_CLAIMED)
    # release the engine before the next cell
    try:
        if hasattr(opt, "destroy"):
            opt.destroy()
    except Exception:
        pass
    del engine, optimizer, opt, basic, model
    import gc
    gc.collect()
    return out


def main(argv: list[str]) -> int:
    job_path, out_dir = argv[0], argv[1]
    with open(job_path) as fh:
        job = json.load(fh)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    import torch.distributed as tdist
    from deepspeed.accelerator import get_accelerator

    cpu_accel = get_accelerator().device_name() == "cpu"
    _install_patches()
    deepspeed.init_distributed(dist_backend="gloo" if cpu_accel else None)
    rank = tdist.get_rank()
    out_path = os.path.join(out_dir, f"rank{rank}.jsonl")
    with open(out_path, "w") as out:
        for cell in job["cells"]:
            rec = {"id": cell["id"], "rank": rank}
            t_cell = time.time()
            try:
                rec.update(_run_cell(cell, rank, cpu_accel))
            except Exception as e:  # a rejected config: every rank raises the same way
                rec["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:500]
                rec["traceback"] = traceback.format_exc()[-2000:]
            rec["wall"] = round(time.time() - t_cell, 3)
            out.write(json.dumps(rec) + "\n")
            out.flush()
            try:
                tdist.barrier()
            except Exception:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
