"""A fresh torch-extensions folder per run, seeded from a cache of FINISHED DeepSpeed op builds.

DeepSpeed JIT-builds its ops (cpu_adam, async_io, pin_memory, ...) with
``torch.utils.cpp_extension.load`` (``deepspeed/ops/op_builder/builder.py`` OpBuilder.jit_load)
under ``TORCH_EXTENSIONS_DIR``; when that variable is set, each op builds in
``<TORCH_EXTENSIONS_DIR>/<op>/`` (``torch/utils/cpp_extension.py`` _get_build_directory; the
``py311_cpu`` level only exists under torch's default root). A build holds ``<op>/lock``
(``torch/utils/file_baton.py``) and an interrupted one leaves it behind, so every later build of
that op in a shared folder waits forever. Each run (a pytest session of tests/engine, a
``ds-advisor measure``) therefore builds in a folder of its own, and pays no build twice:

* the cache (:func:`cache_dir`) holds only finished op folders, published whole by
  :func:`publish` (copied to a temporary name beside the target, then renamed), so no build ever
  runs in it and it can hold no build lock;
* :func:`new_run_dir` copies the cached op folders, mtimes preserved, into the run's folder. torch
  always runs ``ninja`` in the op folder; ``build.ninja`` names the op folder's files relatively
  (its only absolute paths are the sources and include folders of the installed deepspeed and
  torch) and ninja's ``.ninja_log``/``.ninja_deps`` hold each output's mtime and command hash, so a
  copy with the same mtimes is up to date: "ninja: no work to do", nothing compiled (measured: a
  seeded cpu_adam loads in 2.5 s, async_io in 2.6 s, no file in the folder changed; built fresh
  they took about 180 s and 515 s on the 2-core machine). A seed that does not match (other flags,
  changed sources) is rebuilt by ninja in the run's folder, never trusted.

No torch or deepspeed import: versions come from package metadata.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from importlib import metadata

#: Overrides where the cache of finished op builds lives (default
#: ``$XDG_CACHE_HOME/ds-advisor/torch_extensions`` or ``~/.cache/ds-advisor/torch_extensions``).
CACHE_ENV = "DS_ADVISOR_EXT_CACHE"

#: A file in a run's folder marking it as made by :func:`new_run_dir` (builds in it are published).
RUN_MARK = ".ds-advisor-run"

#: A leftover temporary folder of a publisher that died is removed after this many seconds.
_TMP_MAX_AGE_S = 3600.0


def cache_key(env: dict[str, str] | None = None) -> str:
    """The cache's folder name for this interpreter and these packages:
    ``py<major><minor><abiflags>-torch<version>-deepspeed<version>-<DS_ACCELERATOR or auto>``.
    A build is only reused by the same Python (the ``.so`` links its ABI), torch (its headers and
    libraries; ``+cpu``/``+cu121`` are in torch's version) and deepspeed (the op sources), and for the
    same DeepSpeed accelerator (the CPU accelerator's op builders differ from CUDA's)."""
    env = os.environ if env is None else env

    def ver(pkg: str) -> str:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return "none"

    py = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    return f"{py}-torch{ver('torch')}-deepspeed{ver('deepspeed')}-{env.get('DS_ACCELERATOR') or 'auto'}"


def cache_dir(env: dict[str, str] | None = None) -> str:
    """The folder of finished op builds for :func:`cache_key`: ``$DS_ADVISOR_EXT_CACHE/<key>``,
    else ``<$XDG_CACHE_HOME or ~/.cache>/ds-advisor/torch_extensions/<key>``."""
    env = os.environ if env is None else env
    root = env.get(CACHE_ENV) or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "ds-advisor", "torch_extensions")
    return os.path.join(root, cache_key(env))


def _op_dirs(root: str) -> list[str]:
    """The op folder names directly under ``root`` (hidden temporaries left out)."""
    try:
        return sorted(n for n in os.listdir(root) if not n.startswith(".") and os.path.isdir(os.path.join(root, n)))
    except OSError:
        return []


def cached_ops(env: dict[str, str] | None = None) -> list[str]:
    """The op names :func:`cache_dir` holds finished builds of."""
    return _op_dirs(cache_dir(env))


def new_run_dir(path: str, env: dict[str, str] | None = None) -> list[str]:
    """Make ``path`` a run's own torch-extensions folder: create it, mark it (:data:`RUN_MARK`,
    holding the cache folder its builds are published to, decided here once) and copy every finished op folder of :func:`cache_dir` into it, file mtimes preserved (so ninja
    finds them up to date). Returns the op names copied in."""
    os.makedirs(path, exist_ok=True)
    src = cache_dir(env)
    with open(os.path.join(path, RUN_MARK), "w") as fh:  # where this run's finished builds go
        fh.write(src + "\n")
    seeded = []
    for op in _op_dirs(src):
        try:
            shutil.copytree(os.path.join(src, op), os.path.join(path, op), copy_function=shutil.copy2)
            seeded.append(op)
        except (OSError, shutil.Error):  # replaced by a publisher meanwhile: this run builds it
            shutil.rmtree(os.path.join(path, op), ignore_errors=True)
    return seeded


def is_run_dir(path: str) -> bool:
    """True when ``path`` was made by :func:`new_run_dir` (a run's own folder)."""
    return os.path.isfile(os.path.join(path, RUN_MARK))


def _finished(op_dir: str, env: dict[str, str]) -> bool:
    """True when ``op_dir`` is a finished build: no ``lock`` (no build running or interrupted), a
    ``.so``, and ``ninja -n`` (a dry run, it writes nothing) says there is no work to do."""
    try:
        names = os.listdir(op_dir)
    except OSError:
        return False
    if "lock" in names or "build.ninja" not in names or not any(n.endswith(".so") for n in names):
        return False
    ninja = shutil.which("ninja", path=env.get("PATH"))
    if ninja is None:
        return False
    try:
        p = subprocess.run([ninja, "-n"], cwd=op_dir, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return p.returncode == 0 and "no work to do" in p.stdout


def _same_build(a: str, b: str) -> bool:
    """True when op folders ``a`` and ``b`` hold the same ``.so`` files (size and mtime in ns)."""
    def sig(d: str) -> dict[str, tuple[int, int]]:
        out = {}
        for n in os.listdir(d):
            if n.endswith(".so"):
                st = os.stat(os.path.join(d, n))
                out[n] = (st.st_size, st.st_mtime_ns)
        return out
    try:
        return sig(a) == sig(b)
    except OSError:
        return False


def _sweep(parent: str) -> None:
    """Remove temporaries of :func:`publish` older than an hour (a publisher that died)."""
    now = time.time()
    for n in os.listdir(parent):
        if n.startswith((".tmp-", ".old-")):
            p = os.path.join(parent, n)
            try:
                if now - os.path.getmtime(p) > _TMP_MAX_AGE_S:
                    shutil.rmtree(p, ignore_errors=True)
            except OSError:
                pass


def publish(run_dir: str, env: dict[str, str] | None = None) -> list[str]:
    """Copy each op folder that finished building in ``run_dir`` (:func:`_finished`) and that the
    cache does not already hold (same ``.so``) into the cache folder its :data:`RUN_MARK` names
    (nothing when ``run_dir`` is not a run's folder): whole, to a temporary
    name in the cache folder, then renamed into place, so a reader sees the old build or the new
    one, never half of one. A publisher that loses a race to another leaves the winner's copy.
    Returns the op names published. Never raises: the cache only saves time."""
    env = dict(os.environ) if env is None else env
    done: list[str] = []
    try:
        with open(os.path.join(run_dir, RUN_MARK)) as fh:
            dest = fh.read().strip()
    except OSError:
        return done
    try:
        os.makedirs(dest, exist_ok=True)
        _sweep(dest)
    except OSError:
        return done
    for op in _op_dirs(run_dir):
        src, final = os.path.join(run_dir, op), os.path.join(dest, op)
        if os.path.isdir(final) and _same_build(src, final):
            continue
        if not _finished(src, env):
            continue
        tag = f"{op}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp, old = os.path.join(dest, ".tmp-" + tag), os.path.join(dest, ".old-" + tag)
        try:
            shutil.copytree(src, tmp, copy_function=shutil.copy2)
            if os.path.isdir(final):  # an older build of the op (other sources or flags): replace it
                os.rename(final, old)
            os.rename(tmp, final)
            done.append(op)
        except OSError:  # another publisher renamed its copy in first: keep that one
            pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(old, ignore_errors=True)
    return done


# --- build locks in a folder the user set (TORCH_EXTENSIONS_DIR) ---------------------------------
#
# torch's FileBaton (torch/utils/file_baton.py) creates ``<op>/lock`` with O_CREAT | O_EXCL and
# waits, polling, while the file exists; its holder deletes it after the build
# (torch/utils/cpp_extension.py _jit_compile: baton.release() in a finally). A process killed
# while it holds the baton leaves the file, and every later build of that op waits on it forever.
# The holder runs the build with the op folder as its working directory (_run_ninja_build:
# subprocess.run(..., cwd=build_directory)), which is how a held lock is told from a left-over one.


def build_locks(root: str, now: float | None = None) -> list[tuple[str, float]]:
    """(path, age in seconds) of every op build ``lock`` under ``root`` (``<root>/<op>/lock`` or
    ``<root>/<python_tag>/<op>/lock``, torch/utils/cpp_extension.py _get_build_directory), any age."""
    now = time.time() if now is None else now
    out = []
    if not os.path.isdir(root):
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath[len(root):].count(os.sep) > 2:
            dirnames[:] = []
            continue
        if "lock" in filenames:
            p = os.path.join(dirpath, "lock")
            try:
                out.append((p, now - os.path.getmtime(p)))
            except OSError:
                continue
    return sorted(out)


def building_pids(op_dir: str, proc: str = "/proc") -> list[int]:
    """Processes (of this user: /proc/<pid>/cwd of another user's cannot be read) whose working
    directory is ``op_dir``: the ninja / compiler of a build holding that folder's lock. Empty
    where /proc does not exist."""
    want = os.path.realpath(op_dir)
    pids = []
    try:
        names = os.listdir(proc)
    except OSError:
        return pids
    for n in names:
        if not n.isdigit():
            continue
        try:
            if os.path.realpath(os.readlink(os.path.join(proc, n, "cwd"))) == want:
                pids.append(int(n))
        except OSError:
            continue
    return pids


def orphan_locks(root: str, samples: int = 3, interval_s: float = 1.0, proc: str = "/proc",
                 now: float | None = None) -> list[tuple[str, float]]:
    """The locks of :func:`build_locks` with no build running in their folder (no process there,
    :func:`building_pids`) in any of ``samples`` looks ``interval_s`` seconds apart (the holder
    writes build.ninja before it starts ninja): left by a killed build, so a build of that op here
    would wait forever. Takes about ``(samples - 1) x interval_s`` seconds when a lock exists."""
    locks = build_locks(root, now)
    for k in range(samples):
        if not locks:
            break
        if k:
            time.sleep(interval_s)
        locks = [(p, a) for p, a in locks if os.path.exists(p) and not building_pids(os.path.dirname(p), proc)]
    return locks


def held_lock_message(locks: list[tuple[str, float]]) -> str:
    """One line naming each lock, its age and how to remove it."""
    def age(s: float) -> str:
        return f"{s:.0f} s old" if s < 120 else f"{s / 60:.0f} min old"

    return ("torch-extensions build lock(s) held with no build running in their folder: "
            + ", ".join(f"{p} ({age(a)})" for p, a in locks)
            + "; DeepSpeed's op build would wait on them until the timeout. If no build of that op runs, "
              "remove them (rm " + " ".join(p for p, _ in locks)
            + "), or unset TORCH_EXTENSIONS_DIR (each run then builds in a folder of its own)")


def remove_new_locks(root: str, before: "set[str] | frozenset[str]", proc: str = "/proc") -> list[str]:
    """After a run that was killed or timed out: remove the locks under ``root`` that were not
    there before it (``before``: :func:`build_locks`' paths at its launch), i.e. its own builds'
    batons, which its killed ranks never released; a lock whose folder another process is building
    in (:func:`building_pids`) is that build's and stays. Returns the paths removed."""
    gone = []
    for p, _ in build_locks(root):
        if p in before or building_pids(os.path.dirname(p), proc):
            continue
        try:
            os.remove(p)
            gone.append(p)
        except OSError:
            continue
    return gone
