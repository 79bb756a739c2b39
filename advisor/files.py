"""Writing output files safely: never a partial file, never an overwrite without --force,
never a special file replaced.

Used by ``generate --output`` and ``report --output``. The rules (:func:`write_atomic`):

* ``-`` means standard output;
* the text goes to a temporary file in the target's folder, is flushed and fsynced, then
  moved into place in one step (``os.replace`` with ``force``, ``os.link`` without it, so a
  file created meanwhile is never overwritten);
* only a regular file is ever replaced: a FIFO, a character or block device (``/dev/null``),
  a socket or a directory at the target is refused, even with ``force`` (replacing
  ``/dev/null`` with a regular file, as root, breaks the machine);
* a symlink is written *through*: its target (a regular file, or a new file) is what is
  replaced, the link itself stays a link; a dangling link chain that cannot be resolved is
  refused;
* the temporary file is removed on every failure, on Ctrl-C and on SIGTERM (the handler is
  installed for the duration of the write and re-raises as ``SystemExit(143)``). One left by
  SIGKILL is named ``.<target>.ds-advisor-<pid>.tmp``: the next write into that folder finds
  it and removes it once process ``<pid>`` is gone.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import sys
import tempfile
import threading

#: Temporary files are ``.<name>.ds-advisor-<pid>.<random>.tmp``.
_TMP_RE = re.compile(r"^\.(?P<name>.+)\.ds-advisor-(?P<pid>\d+)\.[A-Za-z0-9_]+\.tmp$")


class SpecialFileError(OSError):
    """The output path names something that is not a regular file (device, FIFO, socket, directory)."""


def _kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


#: Largest process id Linux can hand out (PID_MAX_LIMIT, include/linux/threads.h: 4 x 1024 x 1024).
PID_MAX_LIMIT = 1 << 22


def _pid_alive(pid: int) -> bool:
    """True while process ``pid`` may still be writing. A pid no process can have (<= 0 or over
    :data:`PID_MAX_LIMIT`, e.g. a 20-digit one in a hand-made name) is not alive: os.kill would raise
    OverflowError on it."""
    if pid == os.getpid():
        return True
    if not 0 < pid <= PID_MAX_LIMIT:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: alive, another user's
        return True
    return True


def stale_temp_files(folder: str) -> list[str]:
    """Temporary files of :func:`write_atomic` in ``folder`` whose writing process is gone
    (left by SIGKILL or a power cut), as paths."""
    out = []
    try:
        names = os.listdir(folder)
    except OSError:
        return out
    for n in names:
        m = _TMP_RE.match(n)
        if m and not _pid_alive(int(m.group("pid"))):
            out.append(os.path.join(folder, n))
    return out


def _resolve_target(path: str) -> str:
    """The file a write to ``path`` must replace: ``path``, or for a symlink its final target."""
    if not os.path.islink(path):
        return path
    real = os.path.realpath(path)
    if os.path.islink(real):  # a loop realpath gave up on
        raise SpecialFileError(f"{path}: symlink loop; not written")
    return real


@contextlib.contextmanager
def _sigterm_raises():
    """While the block runs, SIGTERM raises SystemExit(143) (so ``finally`` cleanup runs) instead
    of killing the process outright. Only in the main thread (Python's rule for handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def write_atomic(path: str, text: str, force: bool = False) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see the module docstring for the rules).

    Raises FileExistsError without ``force`` when ``path`` exists; SpecialFileError (an
    OSError) when ``path`` is, or links to, something other than a regular file; OSError on
    I/O problems. The temporary file never outlives the call."""
    from advisor.render.escape import escape_surrogates
    if path == "-":  # the same text as a file gets: lone surrogates escaped (stdout cannot encode them)
        sys.stdout.write(escape_surrogates(text))
        sys.stdout.flush()
        return
    target = _resolve_target(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None:
        kind = _kind(st.st_mode)
        if kind is not None:
            shown = path if target == path else f"{path} (-> {target})"
            raise SpecialFileError(f"{shown} is {kind}, not a regular file: refusing to replace it")
        if not force:
            raise FileExistsError(f"{path} exists (use --force to overwrite)")
    elif os.path.lexists(path) and not force:
        raise FileExistsError(f"{path} exists (use --force to overwrite)")
    folder = os.path.dirname(os.path.abspath(target))
    for old in stale_temp_files(folder):
        with contextlib.suppress(OSError):
            os.unlink(old)
    base = os.path.basename(target)
    tmp = None
    with _sigterm_raises():
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{base}.ds-advisor-{os.getpid()}.", suffix=".tmp", dir=folder)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(escape_surrogates(text))
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, stat.S_IMODE(st.st_mode) if st is not None else 0o644)
            if force:
                os.replace(tmp, target)
            else:
                try:
                    os.link(tmp, target)
                except FileExistsError:
                    raise FileExistsError(f"{path} exists (use --force to overwrite)")
                except OSError:  # filesystems without hard links: check-then-replace
                    if os.path.lexists(target):
                        raise FileExistsError(f"{path} exists (use --force to overwrite)")
                    os.replace(tmp, target)
        finally:
            if tmp is not None and os.path.lexists(tmp):
                os.unlink(tmp)


def output_problem(path: str | None, force: bool) -> str | None:
    """Why writing to ``path`` would be refused before any work is done (one line), or None:
    its folder does not exist, it exists without ``force``, or it is (or links to) a special
    file. ``-`` and None: never."""
    if not path or path == "-":
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"{path}: cannot write: no folder {folder}"
    try:
        target = _resolve_target(path)
        st = os.stat(target)
    except SpecialFileError as e:
        return str(e)
    except OSError:
        return None if not os.path.lexists(path) or force else f"{path} exists (use --force to overwrite)"
    kind = _kind(st.st_mode)
    if kind is not None:
        return f"{path} is {kind}, not a regular file: refusing to replace it"
    if not force:
        return f"{path} exists (use --force to overwrite)"
    return None
