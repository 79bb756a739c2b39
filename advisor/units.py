"""Byte sizes: parsing "80GB" / "141 GiB" and printing both units.

GB = 10^9 bytes (vendors' data sheets, drive capacities); GiB = 2^30 bytes (what
``torch.cuda.memory_allocated`` and ``free -g`` count). Every printed figure names its unit.
"""

from __future__ import annotations

import re
from advisor.errors import MAX_ECHO_CHARS, cut

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?(?:[eE][0-9]+)?)\s*([a-zA-Z]*)\s*$")


#: A bare number at least this large is a byte count (no memory or disk is 10^6 GB): the error for
#: its missing unit suggests ``B`` with what it is in GB and GiB, not "80000000000GB".
BARE_BYTES_FROM = 10**6


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
        raise ValueError(f"not a size: {cut(repr(text))} (use e.g. 80GB, 141GiB, 31e9B)")
    if not m.group(2) and not bare_bytes:
        num = m.group(1)
        if len(num) > MAX_ECHO_CHARS or not float(num) < 1e21:  # no example built from it: it is no size
            raise ValueError(f"{cut(repr(text))} has no unit and is no size (use e.g. 80GB, 141GiB, 31e9B)")
        if float(num) >= BARE_BYTES_FROM:  # a byte count, not a number of GB: say what it is as bytes
            n = float(num)
            p = "T" if n >= 1e12 else "G" if n >= 1e9 else "M"
            raise ValueError(f"{cut(repr(text))} has no unit: write {cut(num)}B if it is bytes ({size(n, 'GB', prefix=p)} = "
                             f"{size(n, 'GiB', prefix=p)}), or a size with its unit (e.g. 80GB, 141GiB)")
        raise ValueError(f"{cut(repr(text))} has no unit: write {cut(num)}GB (10^9 bytes), {cut(num)}GiB (2^30 bytes) or "
                         f"{cut(num)}B (bytes)")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0 or value > 1e21:
        raise ValueError(f"size out of range: {cut(repr(text))}")
    return int(round(value))


def unit_system(text: str) -> str | None:
    """The unit system a size is written in: "GB" for a decimal suffix (kB, MB, GB, TB, PB, K, M,
    G, T: powers of 10^3), "GiB" for a binary one (KiB ... PiB: powers of 2^10), None for bytes
    ("B", a bare number) or text that is not a size (:func:`parse_size` judges that)."""
    m = _SIZE.match(str(text))
    u = m.group(2).lower() if m else ""
    if u not in _UNITS or _UNITS[u] == 1:
        return None
    return "GiB" if u.endswith("ib") else "GB"


#: Quotients at or above this are written in scientific notation ("8.11e+298"): no real size,
#: rate or duration comes near it (10^15 GiB is a zettabyte), and a config value such as
#: ``buffer_count: 1e308`` made figures of 300 digits, one unbreakable line each (issue 21).
MAX_FIXED = 1e15


def _fixed(n: int | float, base: int | float, digits: int) -> str:
    """``n / base`` with thousands separators and ``digits`` decimals, or in scientific notation
    from :data:`MAX_FIXED` on; an int too large for a float (``n / base`` raises OverflowError
    past ~1.8e308) is written from its base-10 logarithm. The one formatting of a quotient in
    this module."""
    import math
    try:
        x = n / base
    except OverflowError:
        e = math.log10(abs(n)) - math.log10(base)  # a negative headroom of that size too
        return f"{'-' if n < 0 else ''}{10 ** (e - math.floor(e)):.{digits}f}e+{math.floor(e)}"
    return f"{x:,.{digits}f}" if abs(x) < MAX_FIXED or x != x else f"{x:.{digits}e}"


def quotient(n: int | float, base: int | float) -> float:
    """``n / base`` as a float for a chart or a ratio, where an int past the float range (bytes
    from a config's 400-digit bucket size: ``n / base`` raises OverflowError) is the largest
    float of its sign."""
    try:
        return n / base
    except OverflowError:
        return 1.7976931348623157e308 if (n > 0) == (base > 0) else -1.7976931348623157e308


def gib(n: int | float, digits: int = 2) -> str:
    """Bytes as GiB with the unit, e.g. "12.50 GiB"."""
    return f"{_fixed(n, 2**30, digits)} GiB"


def gb(n: int | float) -> str:
    """Bytes as GB (10^9) with the unit, e.g. "13.42 GB"."""
    return f"{_fixed(n, 1e9, 2)} GB"


def human(n: int | float) -> str:
    """Bytes in the most readable binary unit with the unit named ("0 B", "4.00 KiB", "1.25 GiB")."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{_fixed(n, size, 2)} {unit}"
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
    return f"{_fixed(s, 3600, 2)} h"


def days_text(d: float | None, none: str = "unknown") -> str:
    """A span in days: ``123.4 days`` below ten years, else ``27 years`` (365-day years); ``none``
    for None."""
    if d is None:
        return none
    return f"{d:,.1f} days" if d < 3650 else f"{_fixed(d, 365, 0)} years"


# --- the report's unit system (``--units``) ------------------------------------------------------

#: The unit systems every report can print bytes in (``--units``), and their base sizes.
UNITS: dict[str, int] = {"GiB": 2**30, "GB": 10**9}
#: The default: GiB, what ``torch.cuda.memory_allocated`` / ``nvidia-smi`` MiB and the OOM
#: message ("Tried to allocate 2.00 GiB") count in.
DEFAULT_UNITS = "GiB"
_PREFIX = {"GiB": {"M": ("MiB", 2**20), "G": ("GiB", 2**30), "T": ("TiB", 2**40)},
           "GB": {"M": ("MB", 10**6), "G": ("GB", 10**9), "T": ("TB", 10**12)}}


def check_units(units: str) -> str:
    """``units`` spelled as :data:`UNITS` does ("gib" -> "GiB"). Raises ValueError naming the choices."""
    for u in UNITS:
        if str(units).lower() == u.lower():
            return u
    raise ValueError(f"unknown units {units!r} (use {' or '.join(UNITS)})")


def unit_name(units: str = DEFAULT_UNITS, prefix: str = "G") -> str:
    """The unit's symbol in ``units``' system: prefix "G" -> "GiB" / "GB", "T" -> "TiB" / "TB"."""
    return _PREFIX[check_units(units)][prefix][0]


def unit_note(units: str = DEFAULT_UNITS) -> str:
    """What the unit means, for a table title: "GiB = 2^30 bytes" / "GB = 1e9 bytes"."""
    return "GiB = 2^30 bytes" if check_units(units) == "GiB" else "GB = 1e9 bytes"


def size_base(units: str = DEFAULT_UNITS, prefix: str = "G") -> int:
    """Bytes in one unit of ``units``' system at ``prefix``: ("GiB", "G") -> 2^30, ("GB", "M") -> 10^6."""
    return _PREFIX[check_units(units)][prefix][1]


def size(n: int | float | None, units: str = DEFAULT_UNITS, *, suffix: bool = True, prefix: str = "G",
         digits: int = 2, zero: str | None = None, none: str = "unknown") -> str:
    """Bytes in the report's unit system, the one formatting every renderer uses.

    ``size(2**31)`` -> "2.00 GiB"; ``size(2e9, "GB")`` -> "2.00 GB"; ``suffix=False`` gives the
    bare number for a column whose heading names the unit; ``prefix`` "M"/"T" picks MiB/TiB (MB/TB);
    ``zero`` is what 0 prints as (e.g. "-" in a table), ``none`` what None prints as.
    Raises ValueError for an unknown ``units``."""
    if n is None:
        return none
    if n == 0 and zero is not None:
        return zero
    name, base = _PREFIX[check_units(units)][prefix]
    text = _fixed(n, base, digits)
    return f"{text} {name}" if suffix else text


def rate(n: int | float | None, units: str = DEFAULT_UNITS, digits: int = 2) -> str:
    """Bytes per second in the report's unit system: "1.86 GiB/s" / "2.00 GB/s"."""
    return "unknown" if n is None else size(n, units, digits=digits) + "/s"


def digits_to_compare(a: float, b: float, units: str = DEFAULT_UNITS, *, least: int = 1, most: int = 6) -> int:
    """The fewest decimals (from ``least``, at most ``most``) at which :func:`size` shows the
    byte counts ``a`` and ``b`` so that the shown numbers compare as the bytes do (a < b shows
    as a smaller number, not as two equal ones, e.g. "10.2 GiB < 10.2 GiB")."""
    for d in range(least, most + 1):
        x, y = (float(size(v, units, suffix=False, digits=d).replace(",", "")) for v in (a, b))
        if (x < y) == (a < b) and (x > y) == (a > b):
            return d
    return most
