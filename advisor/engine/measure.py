"""``ds-advisor measure``: run the real DeepSpeed engine and census its live tensors.

:func:`run_measure` launches ``python -m torch.distributed.run`` (torch's own launcher; no
hand-written process launcher) with ``advisor.engine.worker`` on every rank. Without a GPU
it sets ``DS_ACCELERATOR=cpu`` and DeepSpeed uses gloo. Each rank builds a proxy model made of
``nn.Parameter``s with the inventory's exact shapes, runs K steps and reports, per snapshot
(``bwd``, ``in_step``, ``steady``), the bytes of each ledger item per tier (see the worker's
docstring for how tensors are attributed and how pinned memory is detected). Swap files under
the nvme path are counted into the ``nvme`` tier of the ``steady`` snapshot.

Temporary files (job file, per-rank results, NVMe swap folders) live under a fresh folder
inside ``workdir`` (or the system temp dir) and are removed afterwards. When a rank fails,
torch.distributed.run stops the others; the failure is reported with each rank's error.

This module and the worker are the only parts of ``advisor`` that use torch and deepspeed, and
they import them only inside the worker process (this module itself only spawns it).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import socket
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from advisor.engine import extcache
from advisor.model.inventory import Inventory, from_dict as inventory_from_dict


class MeasureError(RuntimeError):
    """The launch failed as a whole (launcher error, timeout, a rank crashed)."""


class MeasureTimeout(MeasureError):
    """The launch ran past its timeout and :func:`run_process_group` ended it whole. ``str(err)``
    is one line: the launcher's log then only holds the SignalException traceback of the SIGTERM
    it was sent (torch ``elastic/multiprocessing/api.py`` _terminate_process_handler), which says
    nothing about the run, so it is left out. The CLI exits :data:`advisor.errors.EXIT_TIMEOUT`."""


@dataclass
class CellResult:
    """One config measured on every rank.

    ``ranks[r]`` is ``{"snapshots": {snapshot: {item: {tier: bytes}}}, "wrapper": ...,
    "basic_optimizer": ..., "nvme_files": int}``, or ``{"error": "..."}`` when DeepSpeed
    rejected the config on that rank. Tiers: ``accelerator``, ``host_pinned``,
    ``host_pageable``, ``nvme``, and on a CPU accelerator ``unpinned`` (device memory and
    pageable host memory are the same RAM there).
    """

    id: str
    ranks: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def error(self) -> str | None:
        errs = {r["error"] for r in self.ranks.values() if "error" in r}
        return "; ".join(sorted(errs)) if errs else None


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _gpu_available() -> bool:
    return shutil.which("nvidia-smi") is not None and os.environ.get("DS_ACCELERATOR", "") in ("", "cuda")


#: A torch-extensions build lock older than this is taken as stale (a cpu_adam / async_io build
#: takes 1-3 minutes; torch's FileBaton waits forever while the lock file exists).
STALE_LOCK_S = 600.0


def package_path(env: dict[str, str] | None = None) -> str:
    """PYTHONPATH for a launched rank: the folder holding this ``advisor`` package first, so every
    rank runs the same code as the caller (not whatever copy is pip-installed, if any)."""
    env = os.environ if env is None else env
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rest = env.get("PYTHONPATH", "")
    return root + (os.pathsep + rest if rest else "")


def extensions_root(env: dict[str, str] | None = None) -> str:
    """Where torch builds DeepSpeed's ops: ``TORCH_EXTENSIONS_DIR``, else torch's default
    ``~/.cache/torch_extensions`` (``torch/utils/cpp_extension.py`` _get_build_directory)."""
    env = os.environ if env is None else env
    return env.get("TORCH_EXTENSIONS_DIR") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "torch_extensions")


def stale_build_locks(env: dict[str, str] | None = None, max_age_s: float = STALE_LOCK_S,
                      now: float | None = None) -> list[tuple[str, float]]:
    """(path, age in seconds) of every torch-extensions ``lock`` file older than ``max_age_s``
    under :func:`extensions_root` (``<root>/<python_tag>/<op>/lock`` or ``<root>/<op>/lock``):
    an interrupted build leaves it behind and every later build of that op waits on it forever
    (``torch/utils/file_baton.py`` FileBaton.wait)."""
    return [(p, age) for p, age in extcache.build_locks(extensions_root(env), now) if age > max_age_s]


def stale_lock_message(locks: list[tuple[str, float]]) -> str:
    """One line naming the stale locks and the two ways out."""
    return ("stale torch-extensions build lock(s) "
            + ", ".join(f"{p} ({a / 60:.0f} min old)" for p, a in locks)
            + ": an interrupted build left them and DeepSpeed's op build would wait forever; remove them "
              "(rm), or unset TORCH_EXTENSIONS_DIR (each run then builds in a folder of its own)")


class Terminated(SystemExit):
    """Raised (in the main thread) when the process gets SIGTERM or SIGHUP while
    :func:`run_process_group` waits: a SystemExit with the conventional status 128 + signal number
    (143 for SIGTERM, 129 for SIGHUP), so ``finally`` blocks (the temp folder of
    :func:`run_measure_many`) run on the way out and the CLI's last guard lets it through."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum


#: The signals that end a launch as Ctrl-C does (``timeout`` sends SIGTERM; a closed terminal SIGHUP).
END_SIGNALS = ("SIGTERM", "SIGHUP")


def _proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgrp, session) of ``pid`` from ``/proc/<pid>/stat`` (proc(5): fields 3-6,
    read after the last ``)`` since the command name may hold spaces or parentheses); None when
    the process is gone or there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            rest = fh.read().rsplit(")", 1)[1].split()
        return rest[0], int(rest[1]), int(rest[2]), int(rest[3])
    except (OSError, IndexError, ValueError):
        return None


def descendants(roots: set[int] | list[int]) -> set[int]:
    """Every live process below ``roots`` (pids), found by walking the ppid links of
    ``/proc/*/stat``; the roots themselves are not included. Empty where there is no /proc.
    A process whose parent already died was reparented (to init or a subreaper) and is not found:
    call this while the parents are alive."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return set()
    for name in names:
        if name.isdigit():
            st = _proc_stat(int(name))
            if st is not None:
                children.setdefault(st[1], []).append(int(name))
    out: set[int] = set()
    todo = list(roots)
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out - set(roots)


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    st = _proc_stat(pid)
    if st is None:
        try:
            os.kill(pid, 0)  # no /proc: existence is all we can tell
        except (ProcessLookupError, PermissionError):
            return False
        return not os.path.exists("/proc/self")
    return st[0] != "Z"


def run_process_group(cmd: list[str], timeout_s: float, grace_s: float = 5.0, clean_locks: bool = True,
                      stop: "threading.Event | None" = None, **kw) -> int | None:
    """Run ``cmd`` in a new session (its own process group) and wait up to ``timeout_s`` seconds.
    On timeout return None; on timeout, Ctrl-C (KeyboardInterrupt, re-raised) or SIGTERM/SIGHUP
    (:class:`Terminated`, raised; handlers installed for the wait when called from the main
    thread, the previous ones restored after) end the launch whole: SIGTERM, then SIGKILL after
    ``grace_s`` seconds, so no rank or launcher is left behind.

    "Whole" means the launcher's process group and the process group of every descendant: torch
    elastic starts each rank with ``start_new_session=True``
    (``torch/distributed/elastic/multiprocessing/subprocess_handler.py``), so ranks are outside the
    launcher's group and, once the launcher is SIGKILLed, nobody else would end them. The
    descendants (:func:`descendants`) are collected before the SIGTERM, collected again (below the
    launcher and below every one already known) before the SIGKILL, and each one's group is
    signalled as well as the pid itself.

    An op build the launch was running when it was ended leaves its ``lock`` behind, and every later
    build of that op in the same ``TORCH_EXTENSIONS_DIR`` would wait on it until its own timeout
    (``torch/utils/file_baton.py`` FileBaton.wait): a loaded machine's async_io build outlived the probe's
    600 s and each NVMe test after it then hung for its whole timeout. So with ``clean_locks`` (the default)
    the locks under the launch's ``TORCH_EXTENSIONS_DIR`` (``env``, else this process's) that appeared during
    the launch and have no build running in their folder are removed once the group is ended
    (:func:`advisor.engine.extcache.remove_new_locks`); :func:`run` does it itself, to name them.

    ``stop``: an event another thread sets to end the launch whole, as on timeout (None is returned). A signal
    reaches only the main thread, so a launch waited on in a worker thread (launches side by side in a thread
    pool) is ended by its pool setting ``stop`` when the main thread is interrupted or another launch fails;
    the wait then polls ``stop`` every 0.2 s."""
    import signal
    env = kw.get("env")
    root = ((os.environ if env is None else env).get("TORCH_EXTENSIONS_DIR") or "") if clean_locks else ""
    before = {p for p, _ in extcache.build_locks(root)} if root else set()
    proc = subprocess.Popen(cmd, start_new_session=True, **kw)
    own_group = os.getpgrp()

    def signal_all(pids: set[int], sig: int) -> None:
        groups = {proc.pid}
        for pid in pids:
            st = _proc_stat(pid)
            if st is not None and st[0] != "Z":
                groups.add(st[2])
        for target, kill in [(g, os.killpg) for g in groups if g != own_group] + [(p, os.kill) for p in pids]:
            try:
                kill(target, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def end_group() -> None:
        known = descendants({proc.pid}) if proc.poll() is None else set()
        signal_all(known, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            # reap the leader as soon as it exits (a zombie leader would look alive)
            if proc.poll() is not None and not any(_running(p) for p in known):
                break
            time.sleep(0.05)
        known |= descendants(known | ({proc.pid} if proc.poll() is None else set()))
        signal_all(known, signal.SIGKILL)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        if root:  # its killed builds' batons, which nobody would release
            extcache.remove_new_locks(root, before)

    got: list[int] = []

    def on_signal(signum, frame) -> None:
        if not got:  # a second signal while the group is being ended does not cut that short
            got.append(signum)
            raise Terminated(signum)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for name in END_SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None:
                previous[sig] = signal.signal(sig, on_signal)
    try:
        if stop is None:
            return proc.wait(timeout=timeout_s)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return proc.wait(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                if stop.is_set() or time.monotonic() >= deadline:
                    raise
    except subprocess.TimeoutExpired:
        end_group()
        return None
    except BaseException:
        end_group()
        raise
    finally:
        try:  # children of a leader that exited on its own
            os.killpg(proc.pid, 0)
            end_group()
        except (ProcessLookupError, PermissionError):
            pass
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _prepare_config(config: dict[str, Any], nvme_dir: str) -> dict[str, Any]:
    """A copy of ``config`` with offload nvme paths redirected to ``nvme_dir`` and a micro
    batch size set when none is given (the proxy model takes a batch of 2)."""
    cfg = copy.deepcopy(config)
    if "train_batch_size" not in cfg and "train_micro_batch_size_per_gpu" not in cfg:
        cfg["train_micro_batch_size_per_gpu"] = 1
    z = cfg.get("zero_optimization")
    if isinstance(z, dict):
        for k in ("offload_optimizer", "offload_param"):
            o = z.get(k)
            if isinstance(o, dict) and o.get("device") == "nvme":
                o["nvme_path"] = nvme_dir
    return cfg


#: What the launch log says while DeepSpeed builds or loads an op (torch.utils.cpp_extension and
#: deepspeed/ops/op_builder/builder.py:OpBuilder.jit_load print these), as (pattern, words).
_LOG_MILESTONES = (
    (re.compile(r"Building extension module (\w+)"), "building DeepSpeed op {0} (the first build takes minutes; "
                                                    "then it is reused)"),
    (re.compile(r"Loading extension module (\w+)"), "loaded DeepSpeed op {0}"),
    (re.compile(r"Time to load (\w+) op: ([0-9.]+) seconds"), "op {0} ready after {1} s"),
)


def _watch_log(path: str, progress: Callable[[str], None], stop: threading.Event, every_s: float = 30.0) -> None:
    """Report ``path``'s op-build milestones through ``progress`` until ``stop``, and a line every
    ``every_s`` seconds that the launch is still running (reads the log only)."""
    start = last = time.monotonic()
    pos = 0
    while not stop.wait(0.5):
        try:
            with open(path, errors="replace") as fh:
                fh.seek(pos)
                chunk = fh.read()
                pos = fh.tell()
        except OSError:
            chunk = ""
        for line in chunk.splitlines():
            for pat, words in _LOG_MILESTONES:
                m = pat.search(line)
                if m:
                    progress(words.format(*m.groups()))
                    last = time.monotonic()
        if time.monotonic() - last >= every_s:
            progress(f"still running ({time.monotonic() - start:,.0f} s)")
            last = time.monotonic()


def build_note(env: dict[str, str] | None = None) -> str:
    """The line ``measure`` prints before it launches: DeepSpeed JIT-compiles the ops the config
    needs (cpu_adam for a CPU optimizer, async_io for NVMe, ...) on first use, through
    ``torch.utils.cpp_extension.load`` (``deepspeed/ops/op_builder/builder.py`` OpBuilder.jit_load),
    under :func:`extensions_root` (``TORCH_EXTENSIONS_DIR``); an op already built there (its
    ``.so``) is loaded, not rebuilt. A run's own folder (:func:`advisor.engine.extcache.new_run_dir`)
    is named as such, with the cache its finished builds were copied from."""
    root = extensions_root(env)
    built = set()
    if os.path.isdir(root):
        for dirpath, dirnames, filenames in os.walk(root):
            if dirpath[len(root):].count(os.sep) >= 2:
                dirnames[:] = []
            built.update(f[:-3] for f in filenames if f.endswith(".so"))
    if extcache.is_run_dir(root):
        with open(os.path.join(root, extcache.RUN_MARK)) as fh:
            cache = fh.read().strip()
        return ("building DeepSpeed's ops on first use (1-3 minutes per op, once) in this run's own folder " + root
                + "; finished builds are kept in " + cache
                + ("; copied in from there: " + ", ".join(sorted(built)) if built else " (none yet)"))
    return ("building DeepSpeed's ops on first use (1-3 minutes per op, once) under " + root
            + (" (TORCH_EXTENSIONS_DIR)" if (env if env is not None else os.environ).get("TORCH_EXTENSIONS_DIR")
               else " (torch's default; set TORCH_EXTENSIONS_DIR to move it)")
            + ("; already built there: " + ", ".join(sorted(built)) if built else ""))


def run_measure_many(cells: list[dict[str, Any]], world_size: int, workdir: str | None = None,
                     timeout_s: float = 600.0, keep: bool = False, partial_ok: bool = False,
                     progress: Callable[[str], None] | None = None,
                     abort: threading.Event | None = None) -> list[CellResult]:
    """Measure several cells in one launch of ``world_size`` ranks (one DeepSpeed import per
    rank; engines are built one after another in the same process group).

    ``cells``: dicts with ``id``, ``config`` (a DeepSpeed config dict), ``inventory``
    (:class:`Inventory` or its dict form) and optionally ``steps`` (default 2), ``submodules``
    (the per-module proxy; default: only when ``zero_init``), ``linear`` (each weight and bias the
    ledger takes as made by one autograd node at the config's ZeRO stage,
    :func:`advisor.ledger.state.autograd_node_pairs`, runs that node: ``F.linear`` for an nn.Linear's,
    ``torch.addmm`` for a GPT-2 Conv1D's, ``F.layer_norm`` for a LayerNorm's),
    ``containers`` (the module tree the dotted names spell: parameterless containers, numbered ones in an
    ``nn.ModuleList``, worker ``_build_model``), ``trainer_optimizer`` (the HF Trainer's own optimizer passed as
    the client one: ``{"hf_config": config.json dict, "weight_decay", "lr", "fused"}``, its param groups made by
    transformers' own code on the real module, worker ``_trainer_optimizer``; the record then holds
    ``group_numels``, the param groups DeepSpeed kept).
    Raises :class:`MeasureError` when the launch itself fails (a crashed rank, a timeout);
    with ``partial_ok`` it returns what the ranks reported instead, each missing rank record
    being ``{"error": "launch failed: ..."}``. ``progress`` (one line of words) is told where the
    ops are built (:func:`build_note`) and that the launch starts, before it does; then when
    DeepSpeed builds or loads an op, and every 30 s while it runs. ``abort``: an event another thread sets to end
    the launch whole, as on timeout (:func:`run_process_group`'s ``stop``; a test's pool sets it on Ctrl-C).
    """
    base = tempfile.mkdtemp(prefix="ds-advisor-measure-", dir=workdir)
    try:
        job_cells = []
        for c in cells:
            inv = c["inventory"]
            inv_d = inv.to_dict() if isinstance(inv, Inventory) else inv
            pairs: dict[int, tuple[int, str]] = {}
            if c.get("linear"):  # the ledger's own rule, not a copy of it
                from advisor.config.effective import effective_config
                from advisor.ledger.state import autograd_node_pairs
                inv_o = inv if isinstance(inv, Inventory) else inventory_from_dict(inv, "measure")
                pairs = autograd_node_pairs(inv_o, effective_config(c["config"]).zero.stage)
            nvme_dir = os.path.join(base, "nvme", str(c["id"]).replace("/", "_"))
            os.makedirs(nvme_dir, exist_ok=True)
            job_cells.append({"id": c["id"], "config": _prepare_config(c["config"], nvme_dir),
                              "inventory": inv_d, "steps": int(c.get("steps", 2)), "nvme_path": nvme_dir,
                              "track": bool(c.get("track")), "zero_init": bool(c.get("zero_init")),
                              "load_dtype": c.get("load_dtype"),
                              # the per-module proxy (worker _build_model(submodules=True));
                              # default: only under zero.Init
                              "submodules": bool(c.get("submodules", c.get("zero_init"))),
                              # biased Linears as nn.Linear's one autograd node (worker _build_model)
                              "linear_pairs": sorted((w, b) for w, (b, kind) in pairs.items() if kind == "linear"),
                              # GPT-2 Conv1D and LayerNorm pairs as their own nodes (worker _build_model)
                              "node_pairs": sorted((w, b, kind) for w, (b, kind) in pairs.items() if kind != "linear"),
                              # the module tree of the dotted names (worker _build_model)
                              "containers": bool(c.get("containers")),
                              # tests only: an unknown buffer in forward (worker._injected_buffer)
                              "inject_forward_bytes": int(c.get("inject_forward_bytes", 0)),
                              # a checkpoint save after the last step (worker._save_phases)
                              "save": bool(c.get("save")), "save_16bit": bool(c.get("save_16bit")),
                              # the HF Trainer's optimizer as the client one (worker._trainer_optimizer)
                              "trainer_optimizer": c.get("trainer_optimizer")})
        job_path = os.path.join(base, "job.json")
        with open(job_path, "w") as fh:
            json.dump({"cells": job_cells}, fh)
        out_dir = os.path.join(base, "out")
        os.makedirs(out_dir)
        env = dict(os.environ)
        if not _gpu_available():
            env["DS_ACCELERATOR"] = "cpu"
        env.setdefault("OMP_NUM_THREADS", "1")
        env["PYTHONWARNINGS"] = "ignore"
        env["PYTHONPATH"] = package_path(env)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(world_size),
               "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
               "-m", "advisor.engine.worker", job_path, out_dir]
        log_path = os.path.join(base, "launch.log")
        if not env.get("TORCH_EXTENSIONS_DIR"):
            # this run's own op-build folder, seeded with the finished builds of the cache: no
            # build lock of another run can be in it (advisor/engine/extcache.py)
            env["TORCH_EXTENSIONS_DIR"] = os.path.join(base, "torch_extensions")
            extcache.new_run_dir(env["TORCH_EXTENSIONS_DIR"], env)
        own_dir = extcache.is_run_dir(env["TORCH_EXTENSIONS_DIR"])
        locks = [] if own_dir else stale_build_locks(env)  # a folder the user set may hold one
        if locks:
            raise MeasureError(stale_lock_message(locks))
        root = env["TORCH_EXTENSIONS_DIR"]
        if not own_dir:
            # a younger lock with no build running in its folder (a killed run's): say so within
            # seconds, not after the whole timeout (extcache.orphan_locks)
            orphans = extcache.orphan_locks(root)
            if orphans:
                raise MeasureError(extcache.held_lock_message(orphans))
        before = {p for p, _ in extcache.build_locks(root)}  # this run's own locks are the others
        if before and progress is not None:
            progress("waiting on the op build(s) running in " + ", ".join(sorted(os.path.dirname(p) for p in before))
                     + " (their lock is held)")
        removed: list[str] = []
        with open(log_path, "w") as log:
            stop = threading.Event()
            watcher = None
            if progress is not None:
                progress(build_note(env))  # before the launch: the first op build is minutes of silence
                progress(f"launching {world_size} rank(s) of DeepSpeed ({len(job_cells)} config(s))")
                watcher = threading.Thread(target=_watch_log, args=(log_path, progress, stop), daemon=True)
                watcher.start()
            rc = done = None
            try:
                rc = run_process_group(cmd, timeout_s, clean_locks=False, stop=abort, stdout=log,
                                       stderr=subprocess.STDOUT, env=env)
                done = True
            finally:
                stop.set()
                if watcher is not None:
                    watcher.join(timeout=5)
                if not done or rc is None:  # killed or timed out: its ranks never released their batons
                    removed = extcache.remove_new_locks(root, before)
        if own_dir:  # the ops this launch finished building, for the next run (also after a failure)
            extcache.publish(env["TORCH_EXTENSIONS_DIR"], env)
        results: dict[str, CellResult] = {c["id"]: CellResult(c["id"]) for c in job_cells}
        for r in range(world_size):
            p = os.path.join(out_dir, f"rank{r}.jsonl")
            if not os.path.exists(p):
                continue
            with open(p) as fh:
                for line in fh:
                    line = line.strip()
                    if not line:
                        continue
                    rec = json.loads(line)
                    results[rec["id"]].ranks[rec["rank"]] = rec
        incomplete = [cid for cid, cr in results.items() if len(cr.ranks) != world_size]
        if rc != 0 or incomplete:
            with open(log_path, errors="replace") as fh:
                tail = fh.read()[-4000:]
            why = "timed out" if rc is None else f"exit status {rc}"
            if rc is None:
                fresh = stale_build_locks(env, max_age_s=0)
                if fresh:
                    why += " while " + stale_lock_message(fresh).replace("stale ", "", 1)
                if removed:
                    why += "; removed the build lock(s) this run left: " + ", ".join(removed)
            if partial_ok:
                last = [ln for ln in tail.splitlines() if "error" in ln.lower() or "exitcode" in ln]
                for cid in incomplete:
                    for r in range(world_size):
                        results[cid].ranks.setdefault(r, {"error": f"launch failed ({why}): "
                                                          + (last[-1][:300] if last else "")})
                return [results[c["id"]] for c in job_cells]
            if rc is None:
                raise MeasureTimeout(f"measure launch ({world_size} ranks) {why} after {timeout_s:g} s "
                                     "(--timeout); its processes were ended")
            raise MeasureError(f"measure launch ({world_size} ranks) {why}; cells without results on every rank: "
                               f"{incomplete[:5]}\n{tail}")
        return [results[c["id"]] for c in job_cells]
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)


def run_measure(config_path_or_dict: str | dict[str, Any], inventory: Inventory | dict[str, Any],
                world_size: int, steps: int = 2, workdir: str | None = None,
                timeout_s: float = 600.0, progress: Callable[[str], None] | None = None,
                track: bool = True, inject_forward_bytes: int = 0) -> dict[int, dict[str, Any]]:
    """Run the real DeepSpeed engine on ``world_size`` ranks for ``steps`` steps and return,
    per rank, ``{"snapshots": {snapshot: {item: {tier: bytes}}}, "wrapper", "basic_optimizer",
    "nvme_files"}`` (bytes, not elements), or ``{"error": ...}`` for a rank where DeepSpeed
    rejected the config. A config path is read with the project's loader (hjson, like
    DeepSpeed). Raises :class:`MeasureError` when the launch fails.

    At ZeRO-3 the proxy has one child module per owning module of the inventory's names
    (worker ``_build_model(submodules=True)``), as a real model's layers: ZeRO-3 fetches and
    releases parameters per module (``partitioned_param_coordinator.py`` fetch_sub_module /
    release_sub_module), so a flat one-module proxy gathers every parameter at once in forward,
    as no real model does (the peak-parity cells' ZeRO-3 proxy, tests/engine/test_peak_parity.py).
    With non-persistent parameters the ledger's fetch model is still off per phase there
    (UNMATCHED["z3_bf16_nonpersist_w2"]), so such a run exits 1 on those phases.
    """
    from advisor.config.effective import effective_config

    if isinstance(config_path_or_dict, dict):
        config = config_path_or_dict
    else:
        from advisor.config.loading import load_config
        config = load_config(config_path_or_dict).data
    per_module = effective_config(config).zero.stage == 3
    # real F.linear nodes where the ledger sees an nn.Linear (state.linear_pairs), at every stage:
    # at ZeRO-1/2 the ledger keeps a Linear's weight gradient whole beside its bias's hook
    # (state.autograd_siblings), which a proxy touching each parameter alone never does (issue 15)
    res = run_measure_many([{"id": "measure", "config": config, "inventory": inventory, "steps": steps,
                             "track": track, "inject_forward_bytes": inject_forward_bytes,
                             "submodules": per_module, "linear": True}],
                           world_size, workdir=workdir, timeout_s=timeout_s, progress=progress)
    return res[0].ranks


def measure_vs_ledger(config: dict[str, Any], inventory: Inventory, world_size: int,
                      measured: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows putting the engine's bytes beside the ledger's, for ``ds-advisor measure``.

    One row per (rank, snapshot, item, tier): ``measured`` and ``ledger`` bytes and ``diff``
    (measured - ledger). Snapshots compare the ledger's lifetimes: ``steady`` = persistent,
    ``bwd`` = backward, ``in_step`` = step. On a CPU accelerator the ledger's ``accelerator``
    and ``host_pageable`` tiers are folded into ``unpinned`` as the measurement sees them.
    A rank that failed gives one row with its ``error``.
    """
    from advisor.config.effective import effective_config
    from advisor.ledger.state import Cluster, Plan, compute_ledger, fold_for_cpu, model_state_bytes

    led = compute_ledger(Plan(effective_config(config), inventory, Cluster(world_size=world_size)))
    rows: list[dict[str, Any]] = []
    lives = {"steady": ("persistent",), "bwd": ("backward",), "in_step": ("step",)}
    for r, rec in sorted(measured.items()):
        if "error" in rec:
            rows.append({"rank": r, "error": rec["error"]})
            continue
        if rec.get("skipped_steps"):  # an overflowed fp16 step makes no optimizer state
            rows.append({"rank": r, "error": f"the engine skipped {rec['skipped_steps']} step(s) on "
                         "fp16 overflow, so no step's state was measured"})
            continue
        cpu = rec.get("accelerator") == "cpu"
        for snap, lv in lives.items():
            exp = model_state_bytes(led.rank(r), lv)
            if snap == "bwd":  # the census adds the ipg bucket as allocated inside that backward
                exp.update({k: v for k, v in model_state_bytes(led.rank(r), ("in_backward",)).items()
                            if k == "ipg_bucket"})
            if cpu:
                exp = fold_for_cpu(exp)
            got = rec["snapshots"].get(snap, {})
            names = set(exp) | (set(got) if snap == "steady" else set())
            for item in sorted(names):
                for tier in sorted(set(exp.get(item, {})) | set(got.get(item, {}))):
                    m = got.get(item, {}).get(tier, 0)
                    e = exp.get(item, {}).get(tier, 0)
                    if m or e:
                        rows.append({"rank": r, "snapshot": snap, "item": item, "tier": tier,
                                     "measured": m, "ledger": e, "diff": m - e})
    return rows


#: Allocation sites whose storages exist only because the CPU run uses gloo, subtracted from the
#: engine's peak (and reported as ``cpu_only``) since the ledger models the NCCL path of a GPU run:
#: ``comm/torch.py`` reduce_scatter_tensor -> torch.distributed.reduce_scatter_tensor, which on gloo
#: allocates a buffer the size of its input inside torch (measured: sum ceil(n_i/W) x W x C, the
#: same as ZeRO-3's reduce_scatter_coalesced flat buffer); NCCL's reduce-scatter writes into the
#: output chunk. The worker's tracker keeps a second high-water mark without these storages
#: (``peak_excl_cpu_only``: without them a phase may peak at another instant), compared here.
CPU_ONLY_SITES = ("deepspeed/comm/torch.py:reduce_scatter_tensor:",)

#: Tracker phase -> the ledger timeline instants it spans at GA = 1 (see advisor.ledger.timeline);
#: :func:`phase_instants` gives them for any GA.
PHASE_INSTANTS = {
    "load": ("load",), "initialize:cast": ("initialize:cast",), "initialize:module": ("initialize:module",),
    "initialize": ("initialize",),
    "forward:1": ("forward:1",), "backward:1": ("backward:1", "reduce"),
    "step:1": ("first_step:norm", "first_step:prep", "first_step:update"),
    "forward:2": ("steady:forward",), "backward:2": ("steady:backward", "steady:reduce"),
    "step:2": ("steady_step:norm", "steady_step:prep", "steady_step:update"),
    # after the last step (worker._save_phases): save_16bit_model, then save_checkpoint
    "save:16bit": ("save:16bit", "save:16bit:end"), "save": ("save:model", "save:optim", "save"),
}
#: The instants the tracker's ``initialize`` phase (from the end of the cast, or of ZeRO-3's partitioning, to
#: deepspeed.initialize's return) is compared with at its high-water mark, where the plan's timeline has the
#: instants inside the optimizer's construction (advisor.ledger.timeline.INIT_TRANSIENTS: ZeRO-1/2's
#: DeepSpeedZeroOptimizer, the flatten and, without optimizer offload, initialize_optimizer_states' zeros;
#: stage 0's FP16_Optimizer, its warm-up step's zeros; stage 0's FP16_UnfusedOptimizer, its warm-up step's 16-bit and
#: fp32 zeros and the step, timeline.unfused_optimizer_init_transients; ZeRO-3 without quantized weights, hpZ too, the
#: gather for each gradient hook), or where nothing in it rises above its end (timeline.init_end_is_peak: ZeRO-1's
#: BF16_Optimizer, stage 0 fp32 with FusedAdam; the instant ``initialize``). Elsewhere (another basic optimizer at
#: fp32, ZeRO-3 with quantized weights, tensor parallelism: no cell) initialize is compared at its end only: see
#: :func:`peak_parity`. Under pipeline parallelism
#: :func:`pipeline_peak_parity` compares it the same way (ZeRO-1/2 and FP16_Optimizer over the rank's stage,
#: BF16_Optimizer).
INIT_PEAK_INSTANTS = ("initialize:flatten", "initialize:optimizer_states", "initialize:fp32_partitions",
                      "initialize:grad_hooks", "initialize")
#: Tracker step phase -> the timeline event whose every instant it spans (per-group instants too), GA = 1.
STEP_PHASES = {"step:1": "first_step", "step:2": "steady_step"}


def phase_instants(phase: str, ga: int = 1, refetch: bool = False) -> tuple[tuple[str, ...], str | None]:
    """(timeline instant keys, timeline step event or None) that the worker's tracker phase
    ``phase`` spans when DeepSpeed runs ``ga`` micro-steps per optimizer step; ``((), None)`` when
    the ledger's timeline has no instant for it.

    The worker names its phases by micro-step k (``forward:k``, ``backward:k``, ``step:k``: one
    ``engine.step()`` per micro-step). DeepSpeed 0.19.8 steps the optimizer only at the
    accumulation boundary (``runtime/engine.py`` l.3611-3615 ``DeepSpeedEngine.step``: ``if
    self.is_gradient_accumulation_boundary(): ... self._take_model_step``; l.3463: ``(micro_steps
    + 1) % gradient_accumulation_steps == 0``), i.e. at k = ga and k = 2 ga. The timeline
    (advisor.ledger.timeline._instants) has the first iteration's micro-steps 1 and ga, its reduce
    at the boundary and the first optimizer step, then the steady iteration's last micro-step,
    reduce and step; at ga > 2 also a middle micro-step's ``forward:2`` / ``backward:2``, one pair for
    every 1 < m < ga (timeline.middle_microstep: the same state at each m), with ``reduce:2`` where that backward
    reduces inside it (timeline.reduces_in_backward: ZeRO-2, BF16_Optimizer; as ``reduce:1`` in micro-step 1's). So
    k = 1 -> ``forward:1``/``backward:1`` (+ ``reduce:1``), 1 < k < ga -> ``forward:2``/``backward:2`` (+
    ``reduce:2``; each middle micro-step's row is compared with the same instants), k = ga -> ``forward:ga``/``backward:ga`` + ``reduce`` and ``step:ga`` ->
    first_step, k = 2 ga -> steady. ``refetch`` (timeline.middle_microstep's third value): ``forward:2`` is
    micro-step 2's alone (ZeRO-3 fetches again there what the first backward released), so a middle forward
    from m = 3 on is compared with ``forward:ga``, which holds the same (the parameters stay gathered, nothing
    is reduced in a forward). A non-boundary ``step:k`` and the steady iteration's earlier micro-steps have no
    instant (not compared), nor has a middle backward where the timeline has no ``backward:2`` (ZeRO-2 under
    optimizer offload, pipeline parallelism: the caller finds no instant). At ga = 1 this is
    :data:`PHASE_INSTANTS`."""
    if ga <= 1 or phase in ("load", "initialize") or phase.startswith(("initialize:", "save")):
        return PHASE_INSTANTS.get(phase, ()), STEP_PHASES.get(phase)
    kind, _, num = phase.partition(":")
    if kind not in ("forward", "backward", "step") or not num.isdigit() or int(num) < 1:
        return (), None
    it, m = divmod(int(num) - 1, ga)
    m += 1
    if it == 0 and m == 1:
        return {"forward": (("forward:1",), None), "backward": (("backward:1", "reduce:1"), None),
                "step": ((), None)}[kind]
    if it == 0 and 1 < m < ga:
        # the middle micro-step's instants (timeline.middle_microstep); where the timeline has none, the caller
        # finds no instant and compares nothing
        return {"forward": ((f"forward:{ga}",) if refetch and m > 2 else ("forward:2",), None),
                "backward": (("backward:2", "reduce:2"), None), "step": ((), None)}[kind]
    if m != ga or it > 1:
        return (), None
    if it == 0:
        return {"forward": ((f"forward:{ga}",), None), "backward": ((f"backward:{ga}", "reduce"), None),
                "step": (PHASE_INSTANTS["step:1"], "first_step")}[kind]
    return PHASE_INSTANTS[f"{kind}:2"], STEP_PHASES.get(f"{kind}:2")


def torch_step_cpu_figures(led: Any, rank: int = 0) -> tuple[int, int]:
    """(GPU bytes, CPU bytes) of torch's optimizer step temporaries for the ledger ``led``'s plan where a GPU
    run takes torch's foreach step and DeepSpeed's CPU accelerator the single-tensor loop (the ledger's item
    ``torch_step_foreach``, :data:`advisor.ledger.state.TORCH_STEP_GPU_ONLY`), else (0, 0). The CPU figure is
    :func:`advisor.ledger.state.torch_step_temporaries` on the single-tensor path (``torch/optim/adam.py``
    _single_tensor_adam l.544: max_i (n_(i-1) + 2 n_i) x 4 for AdamW; ``adagrad.py`` l.425), the one the
    engine on this machine makes; the GPU figure (foreach, l.790) is the ledger's, read from torch's source and
    not measured here. A per-group step instant holds the group's share of both (f x P_g x 4). Under model
    parallelism the figures of ``rank``'s shard (its pipeline stage: timeline._rank_shard)."""
    from advisor.ledger.state import (placement, placement_of, torch_step_lists, torch_step_path,
                                      torch_step_temporaries)
    from advisor.ledger.timeline import _rank_shard
    plan, basic = led.plan, led.basic_optimizer
    host = plan.config.offload_optimizer_effective != "none"
    if (torch_step_path(plan.config, basic, host) != "foreach" or torch_step_path(plan.config, basic, host, "cpu")
            != "single" or not plan.inventory.has_trainable()):
        return 0, 0
    W = max(1, plan.cluster.zero_world_size)
    if plan.cluster.model_parallel:
        inv = _rank_shard(plan.config, led, rank)[0]
        pl = placement(plan.config, inv, W, led.wrapper)
    else:
        inv, pl = plan.inventory, placement_of(plan)
    if not inv.has_trainable():
        return 0, 0
    lists = torch_step_lists(plan.config, inv, W, led.wrapper, pl)
    return (torch_step_temporaries(plan.config, basic, lists, "foreach")[0],
            torch_step_temporaries(plan.config, basic, lists, "single")[0])


def peak_parity(config: dict[str, Any], inventory: Inventory, world_size: int,
                measured: dict[int, dict[str, Any]], zero_init: bool = False,
                load_dtype: str | None = None, plan: Any = None) -> list[dict[str, Any]]:
    """Per rank and tracker phase: the engine's high-water mark of live bytes (every storage the
    allocation tracker saw created and not yet freed) beside the ledger timeline's largest
    instant in that phase, and the relative difference; plus the storages no census claimed at the
    engine's peak (for ``initialize``, compared at its end: those at its end, the tracker's
    ``end_unattributed``), split by :func:`split_unclaimed` into ``unattributed`` (no live ledger
    entry cites their allocation site) and ``in_ledger`` (one does); gloo's own buffers
    (:data:`CPU_ONLY_SITES`) are in neither list: they are the row's ``cpu_only`` bytes.

    Open world: the engine side counts *every* storage, not only those the census knows, so a
    buffer neither side names shows up as a difference. On a CPU accelerator the accelerator and
    pageable host tiers are the same RAM, so both sides are totals over every tier except nvme:
    the tier split is not proven by a CPU run. The ``initialize`` phase compares its high-water mark
    with the largest of :data:`INIT_PEAK_INSTANTS` where the plan's timeline models the transients inside
    the optimizer's construction (ZeRO-1/2 with DeepSpeedZeroOptimizer, with and without CPU optimizer
    offload, fp16 / bf16 / fp32: the flatten and initialize_optimizer_states' zeros,
    advisor.ledger.timeline.zero12_init_transients; stage 0's FP16_Optimizer: the zeroed fp32 flat gradient of
    its warm-up step, timeline.fp16_optimizer_init_transients; stage 0's FP16_UnfusedOptimizer: its warm-up step's
    16-bit and fp32 zero gradients and the basic optimizer's step temporaries (on a CPU run the single-tensor loop's,
    as at the step), timeline.unfused_optimizer_init_transients; ZeRO-3, with and without zero.Init, offload and hpZ:
    each parameter gathered whole for its gradient hook, timeline.zero3_init_transients; ZeRO-1's BF16_Optimizer and
    stage 0
    fp32 with FusedAdam, whose initialize makes nothing above its end, timeline.init_end_is_peak, against the instant
    ``initialize``; its unclaimed storages are the peak's); elsewhere it
    compares the bytes live at its end (the tracker's ``end``, its unclaimed storages ``end_unattributed``),
    since a transient of the phase is not modelled there (ZeRO-3 with quantized weights, tensor parallelism: no cell
    measures them; pipeline parallelism:
    :func:`pipeline_peak_parity`). Before it, without zero.Init, ``initialize:cast`` (the worker's phase up to
    ``_configure_distributed_model``'s return: the parameters cast one at a time, compared where
    the ledger has that instant) and, at ZeRO-3, ``initialize:module`` (up to the end of the
    in-place partitioning) compare their peaks with the timeline's instants of those names.
    The engine's peak compared is the tracker's high-water mark without the storages of
    :data:`CPU_ONLY_SITES` (gloo's reduce-scatter buffer; the ledger models the NCCL path), the
    difference reported as ``cpu_only``.
    Phases beyond the second optimizer step are not compared; with gradient accumulation (GA
    as DeepSpeed derives it, from ``gradient_accumulation_steps`` or ``train_batch_size`` /
    (micro-batch x world size): :func:`advisor.config.effective.derive_batch`) the phases map to
    the timeline by :func:`phase_instants`. ``load_dtype``: the dtype the proxy was built in
    (default fp32). ``plan``: the ledger's :class:`advisor.plan.Plan` when it is not ``config`` on ``inventory``
    (``planning.build_plan``'s under ``--hf``: the Trainer's optimizer and param groups); ``config`` and
    ``inventory`` are then not read."""
    from advisor.config.effective import batch_world_size, derive_batch, effective_config
    from advisor.ledger.state import Cluster, Plan, compute_ledger
    from advisor.ledger.state import TORCH_STEP_GPU_ONLY
    from advisor.ledger.timeline import (GPU_ONLY, INIT_TRANSIENTS, init_end_is_peak, init_entries, load_entries,
                                         middle_microstep, rank_only_entries, resolve_load, role_timeline, save_entries)

    ec = plan.config if plan is not None else effective_config(config)
    led = compute_ledger(plan if plan is not None else Plan(ec, inventory, Cluster(world_size=world_size)))
    ga = derive_batch(ec, batch_world_size(ec, led.plan.cluster))[2] or 1
    load = resolve_load(ec, zero_init=zero_init, dtype=load_dtype)
    tiers = ("accelerator", "host_pinned", "host_pageable")
    rows = []
    for r, rec in sorted(measured.items()):
        if "error" in rec or "tracker" not in rec:
            rows.append({"rank": r, "error": rec.get("error", "no tracker record")})
            continue
        torch_gpu, torch_cpu = torch_step_cpu_figures(led, r)
        tl = role_timeline(led, led.rank(r), load, ga=ga, rank=r)
        every = (list(led.rank(r).entries) + load_entries(ec, led, load, r) + init_entries(ec, led, load, r)
                 + save_entries(ec, led, r) + rank_only_entries(ec, led, load, r))
        sources = {e.item: e.source for e in every}
        model = {e.item for e in every if e.cls == "parameters" and e.life in MODEL_BUILD_LIVES}
        keys = [x.key for x in tl.instants]
        ser = tl.series(tiers)
        refetch = middle_microstep(ec, led, ga)[2]
        for ph in rec["tracker"]:
            want, event = phase_instants(ph["phase"], ga, refetch)
            if not want:
                continue
            # the :norm instants are ZeRO-1/2 only; a step updating one param group at a time has
            # a prep and an update instant per group (timeline.stepped_groups): all of the phase's
            # initialize at its high-water mark where the timeline models the transients inside it
            # (timeline.INIT_TRANSIENTS) or none rises above its end (timeline.init_end_is_peak), else at its end
            # (the tracker's end against the instant initialize)
            init_peak = ph["phase"] == "initialize" and (any(x.key in INIT_TRANSIENTS for x in tl.instants)
                                                         or init_end_is_peak(ec, led, load))
            if init_peak:
                want = INIT_PEAK_INSTANTS
            idx = [i for i, x in enumerate(tl.instants) if x.key in want or (event and x.phase == event)]
            if not idx:  # initialize:cast without a cast (the ledger has no such instant): nothing to compare
                continue
            # a CPU run makes no host copy of a CPU storage at save, nor partial offload's backup AdamW step
            # (timeline.GPU_ONLY): the ledger's figure without them is compared, the difference reported as gpu_only
            gpu_only = [0] * len(ser)
            cpu_path = [0] * len(ser)
            if rec.get("accelerator") == "cpu":
                gpu_only = [sum(x[3] for x in tl.entries[i] if x[0] in GPU_ONLY and x[1] in tiers)
                            for i in range(len(ser))]
                # torch's step on the CPU: the single-tensor loop's temporaries in place of the GPU's foreach ones
                cpu_path = [sum(x[3] * torch_cpu // torch_gpu for x in tl.entries[i] if x[0] in TORCH_STEP_GPU_ONLY)
                            for i in range(len(ser))] if torch_gpu else cpu_path
                gpu_only = [g - c for g, c in zip(gpu_only, cpu_path)]
            best = max(idx, key=lambda i: ser[i] - gpu_only[i])
            at_end = ph["phase"] == "initialize" and not init_peak
            got = ph["end"] if at_end else ph["peak"]
            cpu_only = 0
            if not at_end and "peak_excl_cpu_only" in ph:
                cpu_only = got - ph["peak_excl_cpu_only"]
                got = ph["peak_excl_cpu_only"]
            exp = ser[best] - gpu_only[best]
            # the storages at the instant compared: initialize's end (the tracker's end_unattributed),
            # else the phase's high-water mark
            at = ph.get("end_unattributed", ph["unattributed"]) if at_end else ph["unattributed"]
            # gloo's own buffers (CPU_ONLY_SITES) are the row's cpu_only bytes, outside the comparison: not
            # listed as unattributed (issue 15: gloo's reduce-scatter buffer was, on a ZeRO-3 --params run)
            at = [u for u in at if not u["site"].startswith(CPU_ONLY_SITES)]
            unattributed, in_ledger = split_unclaimed(at, tl.entries[best], sources, tiers, model)
            rows.append({"rank": r, "phase": ph["phase"], "measured": got, "cpu_only": cpu_only, "ledger": exp,
                         "gpu_only": gpu_only[best], "cpu_path": cpu_path[best],
                         "ledger_instant": keys[best], "rel_diff": (got - exp) / exp if exp else (0.0 if not got else 1.0),
                         "unattributed": unattributed, "in_ledger": in_ledger})
    return rows


#: The timeline instants a PipelineEngine ``train_batch`` spans (the pipe worker's tracker phases): the
#: first call runs the first iteration (every micro-step's forward and backward, the boundary's reduce, the
#: first optimizer step), the second the steady one.
TRAIN_BATCH_PHASES = {"train_batch:1": ("forward", "backward", "reduce", "first_step"),
                      "train_batch:2": ("steady",)}

#: The timeline's optimizer-step events (:func:`pipe_instruction_instants` names them for every instant of theirs).
STEP_EVENTS = ("first_step", "steady_step")


def pipe_instruction_instants(phase: str, ga: int) -> tuple[str, ...] | None:
    """The timeline instant keys that the pipe worker's instruction phase ``phase``
    (``train_batch:<k>/<Instruction>:<n>``, tests/engine/pipe_worker.py: the n-th run of that pipe instruction
    in the k-th ``train_batch``, from its start to the next instruction's) spans at ``ga`` micro-batches;
    ``()`` where the timeline has no instant for it (a middle micro-batch, the steady iteration's earlier
    micro-batches, the send / receive / load instructions, the phases before the first and after the last
    instruction); None for a phase that is not an instruction phase.

    Each stage's TrainSchedule runs every micro-batch's ForwardPass and BackwardPass, then ReduceTiedGrads,
    ReduceGrads and OptimizerStep (runtime/pipe/schedule.py TrainSchedule.steps l.197-245: the reduce and the
    step only at the last step, l.238-241), so for k = 1: ForwardPass:n -> ``forward:n`` (n = 1 or ga, and ``forward:2``
    where the timeline has it), BackwardPass:1 -> ``backward:1`` and ``reduce:1`` (BF16_Optimizer's
    accumulation into its fp32 buffer: update_hp_grads, runtime/pipe/engine.py _exec_backward_pass l.859-862),
    BackwardPass:ga -> ``backward:ga``, ReduceGrads -> ``reduce`` (the PipelineEngine turns the backward's own
    allreduce off, engine.py l.80: the boundary's reduce is _exec_reduce_grads, l.287-295; ZeRO-1's second ipg
    buffer is made there); ReduceTiedGrads, which runs before it (the tied weights' in-place all-reduce,
    l.269-285; ZeRO-2's epilogue never runs, ZeRO-2/3 being refused with pipeline parallelism, l.76-77), has no
    instant of its own: what it holds is backward:ga's remainder, in the step's row;
    OptimizerStep -> every ``first_step`` instant (the event's name, :data:`STEP_EVENTS`); for k = 2 the same
    at ga with the ``steady`` instants."""
    head, sep, tail = phase.partition("/")
    if not sep or head not in TRAIN_BATCH_PHASES:
        return None
    it = int(head.rsplit(":", 1)[1])
    name, _, num = tail.partition(":")
    n = int(num) if num.isdigit() else 0
    if it == 1:
        if name == "ForwardPass" and (n in (1, 2) or n == ga):
            return (f"forward:{n}",)
        if name == "BackwardPass" and n == 1:
            return ("backward:1", "reduce:1") if ga > 1 else ("backward:1",)
        if name == "BackwardPass" and n == ga:
            return (f"backward:{ga}",)
        if name == "ReduceGrads":
            return ("reduce",)
        if name == "OptimizerStep":
            return ("first_step",)
        return ()
    if name == "ForwardPass" and n == ga:
        return ("steady:forward",)
    if name == "BackwardPass" and n == ga:
        return ("steady:backward",)
    if name == "ReduceGrads":
        return ("steady:reduce",)
    if name == "OptimizerStep":
        return ("steady_step",)
    return ()


def pipeline_peak_parity(config: dict[str, Any], inventory: Inventory, world_size: int, pipeline_parallel: int,
                         seq_len: int, measured: dict[int, dict[str, Any]], load: Any = None,
                         build_rows: bool = False, activations: bool = True) -> list[dict[str, Any]]:
    """Per rank and ``train_batch`` call: the real PipelineEngine's high-water mark of live bytes
    (``measured[r]["phases"]``: the allocation tracker's report, tests/engine/pipe_worker.py with tracking)
    beside the ledger timeline's largest instant of that step, for the plan on ``world_size`` ranks in
    ``pipeline_parallel`` stages at sequence length ``seq_len`` (``Workload.seq_len``: the pipe buffers of
    ``advisor.ledger.state.pipeline_stage_entries``), and the relative difference.

    ``PipelineEngine.train_batch`` runs the pipe schedule (``runtime/pipe/schedule.py`` TrainSchedule: 1F1B,
    the micro-steps' forwards and backwards of different micro-batches interleaved, then the boundary's
    reduce and the optimizer step) in one call. Its row ``train_batch:<k>`` (the tracker's high-water mark
    over the whole call: what says OOM or not) is compared with the largest instant of the timeline's
    iteration (:data:`TRAIN_BATCH_PHASES`). The worker splits each call into phases by the schedule's
    instructions (``train_batch:<k>/<Instruction>:<n>``, tests/engine/pipe_worker.py ``_instruction_phases``);
    each one with timeline instants (:func:`pipe_instruction_instants`: the forwards and backwards of
    micro-batches 1 and ga, the boundary's reduce, the optimizer step) gives a row of that name against the
    largest of its instants, and the ``train_batch`` row carries the instant of the step's peak:
    ``engine_peak_phase`` (the instruction phase holding the engine's high-water mark), ``engine_peak_instants``
    (the instants it spans) and ``same_instant`` (the ledger's largest instant is one of them). Totals over
    every tier but nvme (a CPU run), gloo's own buffers (:data:`CPU_ONLY_SITES`) left out as in
    :func:`peak_parity`; ``unattributed``: the tracker's storages no census claimed at the peak, by
    allocation site.

    The worker's ``save`` phase (``engine.save_checkpoint`` after the second ``train_batch``) gives two rows:
    ``save``, its high-water mark against the largest of the timeline's ``save:model`` / ``save:optim`` /
    ``save`` instants (:data:`PHASE_INSTANTS`), and ``save:after``, what is live once it has returned (the
    tracker's phase end, its unclaimed storages ``end_unattributed``) against the ``save`` instant. On a CPU
    run the ledger's items that only a GPU makes (:data:`advisor.ledger.timeline.GPU_ONLY`: torch.save's host
    copy of an accelerator storage) are left out of the ledger's figure, as in :func:`peak_parity`, and
    reported as ``gpu_only``.

    ``load``: the :class:`advisor.ledger.timeline.LoadAssumption` the worker's model build matches (default:
    no zero.Init, fp32, the stage built from LayerSpecs); ``build_rows``: also the rows ``load`` (the tracker's
    load phase, PipelineModule's construction, its high-water mark against the ``load`` instant) and
    ``activations`` (default True): each stage's timeline carries that stage's activations as the estimate
    view computes them (:func:`advisor.views.estimate.activations_for` at ``seq_len``, the config's
    micro-batch, no recompute; the formulas of :mod:`advisor.model.activations`, where the inventory's ``meta``
    gives an architecture), so a forward or backward row holds the micro-batches in flight at its instant
    (``timeline.pipe_in_flight``); False, or a model without an architecture: none.

    ``initialize``: where the plan's timeline models its high-water mark (ZeRO-1/2's DeepSpeedZeroOptimizer over the
    rank's stage, timeline.zero12_init_transients; stage 0's FP16_Optimizer, timeline.fp16_optimizer_init_transients,
    FP16_UnfusedOptimizer, timeline.unfused_optimizer_init_transients;
    BF16_Optimizer, timeline.init_end_is_peak) its high-water mark
    against the largest of the timeline's ``initialize:cast`` / ``initialize:module`` and :data:`INIT_PEAK_INSTANTS`
    (the pipe worker's phase spans the whole of deepspeed.initialize), else what is live when it has returned
    against the ``initialize`` instant (its end, as :func:`peak_parity` compares it there). Measured 2026-12-06
    (2 stages, DP 1): pp2_z1_bf16_ga2_w2's high-water mark 133,764 / 134,084 B (ledger 133,760 / 134,080 at
    ``initialize:optimizer_states``, the stage's zeroed fp32 partition, stage_1_and_2.py l.937), where its end is
    80,272 / 80,464 B."""
    from advisor.config.effective import batch_world_size, derive_batch, effective_config
    from advisor.ledger.state import Cluster, Plan, compute_ledger
    from advisor.ledger.state import TORCH_STEP_GPU_ONLY
    from advisor.ledger.timeline import (BEFORE_PARTITION, GPU_ONLY, INIT_TRANSIENTS, init_end_is_peak, resolve_load,
                                         role_timeline)
    from advisor.plan import Workload

    ec = effective_config(config)
    led = compute_ledger(Plan(ec, inventory, Cluster(world_size=world_size, pipeline_parallel=pipeline_parallel),
                              Workload(seq_len=seq_len)))
    acts: dict[int, Any] = {}
    if activations:
        from advisor.views.estimate import activations_for, stage_of
        cl = led.plan.cluster
        for s in range(pipeline_parallel):
            acts[s] = activations_for(ec, inventory, cl, Workload(seq_len=seq_len), stage=s)[0]
    ga = derive_batch(ec, batch_world_size(ec, led.plan.cluster))[2] or 1
    load = load if load is not None else resolve_load(ec, zero_init=False)
    tiers = ("accelerator", "host_pinned", "host_pageable")
    rows: list[dict[str, Any]] = []
    for r, rec in sorted(measured.items()):
        tl = role_timeline(led, led.rank(r), load, activations=acts.get(stage_of(led.plan.cluster, r)) if acts else None,
                           ga=ga, rank=r)
        ser = tl.series(tiers)
        gpu_only = [sum(x[3] for x in tl.entries[i] if x[0] in GPU_ONLY and x[1] in tiers) for i in range(len(ser))]
        # torch's step on the CPU: the single-tensor loop's temporaries in place of the GPU's foreach ones (peak_parity)
        torch_gpu, torch_cpu = torch_step_cpu_figures(led, r)
        if torch_gpu:
            gpu_only = [g - sum(x[3] * torch_cpu // torch_gpu for x in tl.entries[i] if x[0] in TORCH_STEP_GPU_ONLY)
                        for i, g in enumerate(gpu_only)]
        cpu = rec.get("accelerator", "cpu") == "cpu"  # the pipe worker runs on DS_ACCELERATOR=cpu
        # initialize at its high-water mark where the timeline models it, as in peak_parity
        init_peak = any(x.key in INIT_TRANSIENTS for x in tl.instants) or init_end_is_peak(ec, led, load)
        for ph in rec["phases"]:
            kinds = TRAIN_BATCH_PHASES.get(ph["phase"])
            compared = []  # (row phase, instant keys, engine bytes, its unclaimed storages)
            at_end = {"save:after"} | ({"initialize"} if not init_peak else set())  # rows of the phase's end
            if ph["phase"] == "save":
                compared = [("save", PHASE_INSTANTS["save"], ph.get("peak_excl_cpu_only", ph["peak"]),
                             ph["unattributed"]),
                            ("save:after", ("save",), ph["end"], ph.get("end_unattributed", ph["unattributed"]))]
            elif build_rows and ph["phase"] == "load":
                compared = [("load", ("load",), ph.get("peak_excl_cpu_only", ph["peak"]), ph["unattributed"])]
            elif build_rows and ph["phase"] == "initialize" and init_peak:
                # the pipe worker's initialize spans the whole of deepspeed.initialize, the cast and the move too
                compared = [("initialize", BEFORE_PARTITION + INIT_PEAK_INSTANTS, ph.get("peak_excl_cpu_only", ph["peak"]),
                             ph["unattributed"])]
            elif build_rows and ph["phase"] == "initialize":
                # compared at its end, as peak_parity does where the optimizer's construction has no instant
                compared = [("initialize", ("initialize",), ph["end"], ph.get("end_unattributed", ph["unattributed"]))]
            elif kinds:
                idx = [i for i, x in enumerate(tl.instants)
                       if (x.key.startswith("steady") if kinds == ("steady",)
                           else x.phase in kinds and not x.key.startswith("steady"))]
                compared = [(ph["phase"], tuple(tl.instants[i].key for i in idx),
                             ph.get("peak_excl_cpu_only", ph["peak"]), ph["unattributed"])]
            elif pipe_instruction_instants(ph["phase"], ga):
                # an instruction of the pipe schedule with instants of its own (an event name: all its instants)
                want = pipe_instruction_instants(ph["phase"], ga)
                keys = tuple(x.key for x in tl.instants
                             if x.key in want or x.phase in want and x.phase in STEP_EVENTS)
                if keys:
                    compared = [(ph["phase"], keys, ph.get("peak_excl_cpu_only", ph["peak"]), ph["unattributed"])]
            for name, keys, got, unclaimed in compared:
                idx = [i for i, x in enumerate(tl.instants) if x.key in keys]
                off = gpu_only if cpu else [0] * len(ser)
                best = max(idx, key=lambda i: ser[i] - off[i])
                exp = ser[best] - off[best]
                at = [u for u in unclaimed if not u["site"].startswith(CPU_ONLY_SITES)]
                row = {"rank": r, "stage": rec.get("stage"), "phase": name, "measured": got,
                       "cpu_only": 0 if name in at_end else ph["peak"] - got, "ledger": exp,
                       "gpu_only": off[best], "ledger_instant": tl.instants[best].key,
                       "rel_diff": (got - exp) / exp if exp else (0.0 if not got else 1.0), "unattributed": at}
                if kinds and "peak_phase" in ph:
                    # the instant of the step's peak: the instruction phase where the engine peaks, the
                    # timeline instants it spans, and whether the ledger's largest instant is one of them
                    want = pipe_instruction_instants(f"{name}/{ph['peak_phase']}", ga) or ()
                    spans = tuple(x.key for x in tl.instants
                                  if x.key in want or x.phase in want and x.phase in STEP_EVENTS)
                    row.update(engine_peak_phase=ph["peak_phase"], engine_peak_instants=spans,
                               same_instant=row["ledger_instant"] in spans)
                rows.append(row)
    return rows


#: The worker's allocation site of the proxy model's parameters (worker ``_build_model._param``):
#: the model a training script builds, which the ledger counts as its load / initialize entries of
#: class ``parameters`` (:data:`MODEL_BUILD_LIVES`; no DeepSpeed source to cite: the user's code).
PROXY_MODEL_SITES = ("advisor/engine/worker.py:_param:",)
#: Lifetimes of the ledger's entries for the model as built before and inside deepspeed.initialize.
MODEL_BUILD_LIVES = ("load", "load_state_dict", "init_cast", "init_module")


def _site_file_function(site: str) -> tuple[str, str] | None:
    """(file name, function) of a tracker allocation site ``deepspeed/<path>:<function>:<line>``
    (worker ``StorageTracker._site``); None for a site outside DeepSpeed (torch, the worker)."""
    parts = site.rsplit(":", 2)
    if len(parts) != 3 or not parts[0].startswith("deepspeed/"):
        return None
    return parts[0].rsplit("/", 1)[-1], parts[1]


def split_unclaimed(unclaimed: list[dict[str, Any]], live: list[tuple[str, str, str, int]],
                    sources: dict[str, str], tiers: tuple[str, ...],
                    model_items: "set[str] | frozenset[str]" = frozenset()) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Split the tracker's storages that no census claimed at a phase's high-water mark (by
    allocation site, bytes) into (unattributed, in_ledger).

    The worker's censuses name the engine's objects at a few snapshots, so a transient the ledger
    does count (the ipg bucket inside backward, an fp64 norm copy, a clone) is unclaimed at the
    peak too. A site is *in the ledger* when an entry live at the compared timeline instant
    (``live``: the timeline's rows (item, tier, class, bytes), in ``tiers``) cites its DeepSpeed
    file and function in its source (``sources``: item -> ``Entry.source``, e.g. ``setup_buckets``
    in ``runtime/zero/stage_1_and_2.py:DeepSpeedZeroOptimizer.setup_buckets``): listed with those
    items and their bytes at the instant; so is the proxy model's parameters' site
    (:data:`PROXY_MODEL_SITES`) when one of ``model_items``, the ledger's entries for the model as
    built (:data:`MODEL_BUILD_LIVES`), is live there. The rest is *unattributed*: bytes no live
    ledger entry accounts for by its source (the worker's own storages, torch internals, a buffer
    the ledger lacks)."""
    import re

    live_bytes: dict[str, int] = {}
    for item, tier, _, nb in live:
        if tier in tiers and nb:
            live_bytes[item] = live_bytes.get(item, 0) + nb
    unattributed, in_ledger = [], []
    for u in unclaimed:
        ff = _site_file_function(u["site"])
        items = []
        if u["site"].startswith(PROXY_MODEL_SITES):
            items = sorted(it for it in live_bytes if it in model_items)
        elif ff is not None:
            fname, func = ff
            pat = re.compile(rf"(?<![\w]){re.escape(func)}(?![\w])")
            items = sorted(it for it in live_bytes if fname in sources.get(it, "") and pat.search(sources[it]))
        if items:
            in_ledger.append({**u, "items": items, "ledger_bytes": sum(live_bytes[it] for it in items)})
        else:
            unattributed.append(u)
    return unattributed, in_ledger


def peak_instant(rows: list[dict[str, Any]], rank: int = 0) -> tuple[str, str]:
    """(phase where the engine peaked, phase where the ledger peaks) for one rank, over the
    training phases (load and initialize, with its initialize:* parts, excluded)."""
    rr = [x for x in rows if x.get("rank") == rank and "phase" in x and x["phase"] != "load"
          and not x["phase"].startswith("initialize")]
    if not rr:
        return "", ""
    return max(rr, key=lambda x: x["measured"])["phase"], max(rr, key=lambda x: x["ledger"])["phase"]


#: A tracker phase whose engine high-water mark differs from the ledger's instant by more than
#: this fraction fails ``measure`` (exit 1), as a byte difference in the census does.
PHASE_TOLERANCE = 0.01

#: What a CPU run cannot prove (peak_parity compares totals over every tier but nvme).
CPU_TIER_NOTE = ("on CPU the accelerator and pageable host tiers are one device (RAM): the phase parity "
                 "folds them, so the tier split is not proven by this run")


def measure_phases(config: dict[str, Any], inventory: Inventory, world_size: int,
                   measured: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The phase part of ``ds-advisor measure``: :func:`peak_parity`'s rows (bytes; per rank and
    tracker phase load, initialize, forward/backward/step of the micro-steps that have a timeline
    instant), each with ``ok`` (``|rel_diff| <= PHASE_TOLERANCE``), the peak instant on both sides
    per rank (:func:`peak_instant`), the tier note when the run was on CPU, and ``matches``.

    Any gradient accumulation (GA as DeepSpeed derives it: ``gradient_accumulation_steps`` or
    ``train_batch_size`` / (micro-batch x world size), :func:`advisor.config.effective.derive_batch`)
    is compared: :func:`phase_instants` maps micro-step k's phases to the GA timeline's instants
    (the ones tests/engine/test_peak_parity.py checks at GA 2 for ZeRO-1, -2 and -3: the
    ``*_tbsga2_w2`` cells); ``ga`` is in the result, and ``ga_note`` says which iteration the run's
    micro-steps did not reach (the worker runs one micro-step per ``--steps``; the steady
    iteration's boundary is micro-step 2 x GA). ``compared`` is False with a ``reason`` only when
    no rank had a tracker record."""
    from advisor.config.effective import derive_batch, effective_config

    ga = derive_batch(effective_config(config), world_size)[2] or 1
    rows = peak_parity(config, inventory, world_size, measured)
    for r in rows:
        if "phase" in r:
            r["ok"] = abs(r["rel_diff"]) <= PHASE_TOLERANCE
    ranks = sorted({r["rank"] for r in rows if "phase" in r})
    peaks = [dict(zip(("rank", "engine", "ledger"), (k, *peak_instant(rows, k)))) for k in ranks]
    cpu = any(rec.get("accelerator") == "cpu" for rec in measured.values())
    last = max((int(ph["phase"].partition(":")[2]) for rec in measured.values() for ph in rec.get("tracker", ())
                if ph["phase"].startswith("forward:") and ph["phase"].partition(":")[2].isdigit()), default=0)
    note = ""
    if ga > 1 and ranks and last < 2 * ga:
        note = (f"gradient accumulation is {ga} micro-steps and the run made {last}: "
                + ("no optimizer step was compared" if last < ga else "the steady iteration was not compared")
                + f" (run --steps {2 * ga} to reach micro-step {2 * ga})")
    # no tracker record on any rank proves nothing: not a match
    return {"compared": bool(ranks), "reason": "" if ranks else "no rank reported a tracker record",
            "ga": ga, "ga_note": note,
            "rows": rows, "peak_instant": peaks, "tier_note": CPU_TIER_NOTE if cpu else "",
            "matches": bool(ranks) and all(r.get("ok", False) for r in rows)}


def measure_verdict(rows: list[dict[str, Any]], phases: dict[str, Any]) -> dict[str, Any]:
    """The verdict of ``ds-advisor measure`` from its two parts: ``census_matches`` (every row of
    the resting census, :func:`measure_vs_ledger`, equal to the byte and no rank's error),
    ``phases_match`` (:func:`measure_phases`' ``matches``: every phase row within
    :data:`PHASE_TOLERANCE`, at any gradient accumulation; False when no phase was compared) and
    ``matches``, their
    conjunction: the top-level answer, which decides the exit code (1 when False)."""
    census = bool(rows) and not any("error" in r or r.get("diff", 0) != 0 for r in rows)
    ph = bool(phases.get("matches", False))
    return {"matches": census and ph, "census_matches": census, "phases_match": ph}
