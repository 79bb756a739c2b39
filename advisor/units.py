"""Byte sizes: parsing "80GB" / "141 GiB" and printing both units.

GB = 10^9 bytes (vendors' data sheets, drive capacities); GiB = 2^30 bytes (what
``torch.cuda.memory_allocated`` and ``free -g`` count). Every printed figure names its unit.
"""

from __future__ import annotations

import re

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?(?:[eE][0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str, *, bare_bytes: bool = False) -> int:
    """Parse "80GB", "141 GiB", "31e9B", "512MiB" into bytes.

    A bare number ("80", "31e9") has no unit and is refused (ValueError naming the forms):
    ``--gpu-memory 80`` meant 80 GB, and reading it as 80 bytes would make every job "not fit"
    silently. ``bare_bytes=True`` reads a bare number as bytes, for machine-written values
    (test fixtures, probe output that is documented to be bytes).

    Raises ValueError with the accepted forms when ``text`` is not a size.
    """
    m = _SIZE.match(str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 80GB, 141GiB, 31e9B)")
    if not m.group(2) and not bare_bytes:
        raise ValueError(f"{text!r} has no unit: write {m.group(1)}GB (10^9 bytes), {m.group(1)}GiB (2^30 bytes) "
                         f"or {m.group(1)}B (bytes)")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0 or value > 1e21:
        raise ValueError(f"size out of range: {text!r}")
    return int(round(value))


def gib(n: int | float) -> str:
    """Bytes as GiB with the unit, e.g. "12.50 GiB"."""
    return f"{n / 2**30:,.2f} GiB"


def gb(n: int | float) -> str:
    """Bytes as GB (10^9) with the unit, e.g. "13.42 GB"."""
    return f"{n / 1e9:,.2f} GB"


def human(n: int | float) -> str:
    """Bytes in the most readable binary unit with the unit named ("0 B", "4.00 KiB", "1.25 GiB")."""
    n = float(n)
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{int(n)} B"


def duration_text(s: float | None, none: str = "n/a") -> str:
    """A duration in seconds as people read it: ``12.3 s`` below 2 minutes, ``4.5 min`` below 2
    hours, else ``1.25 h``; ``none`` for None."""
    if s is None:
        return none
    if s < 120:
        return f"{s:,.1f} s"
    if s < 7200:
        return f"{s / 60:,.1f} min"
    return f"{s / 3600:,.2f} h"


def days_text(d: float | None, none: str = "unknown") -> str:
    """A span in days: ``123.4 days`` below ten years, else ``27 years`` (365-day years); ``none``
    for None."""
    if d is None:
        return none
    return f"{d:,.1f} days" if d < 3650 else f"{d / 365:,.0f} years"
