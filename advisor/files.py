"""Writing output files safely: never a partial file, never an overwrite without --force.

Used by ``generate --output`` and ``report --output``.
"""

from __future__ import annotations

import os
import tempfile


def write_atomic(path: str, text: str, force: bool = False) -> None:
    """Write ``text`` to ``path`` atomically: a temporary file in the same folder, flushed and
    fsynced, then ``os.replace`` (with ``force``) or ``os.link`` (without: fails if ``path``
    exists, so a file created meanwhile is never overwritten). Raises FileExistsError without
    ``force`` when ``path`` exists, OSError on I/O problems; the temporary file is removed."""
    folder = os.path.dirname(os.path.abspath(path))
    if not force and os.path.lexists(path):
        raise FileExistsError(f"{path} exists (use --force to overwrite)")
    fd, tmp = tempfile.mkstemp(prefix=".ds-advisor-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        if force:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise FileExistsError(f"{path} exists (use --force to overwrite)")
            except OSError:  # filesystems without hard links: check-then-replace
                if os.path.lexists(path):
                    raise FileExistsError(f"{path} exists (use --force to overwrite)")
                os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
