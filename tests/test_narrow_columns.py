"""state._narrow (issue 21, memory at 1e5 layers): the fetch replay's columns at 4 bytes a value where every
value fits a C int (2^31 - 1 the largest), else the 8-byte column or the list :func:`state._packed` gives,
always the same values in the same order, whichever chunk the first wide value falls in."""

from __future__ import annotations

import array

import pytest

from advisor.ledger.state import _narrow

INT_MAX = 2**31 - 1  # C int, array('i') (Python's array module: signed int, 4 bytes on every platform tested)


@pytest.mark.parametrize("at", [0, 1, 65535, 65536, 65537, 200_000])
def test_values_kept_wherever_the_first_wide_one_is(at: int) -> None:
    vals = list(range(-5, 200_001 - 5))
    vals[at] = INT_MAX + 1
    got = _narrow(iter(vals))
    assert list(got) == vals and isinstance(got, array.array) and got.typecode == "q"


def test_narrow_and_past_int64() -> None:
    small = [0, -1, INT_MAX, -INT_MAX - 1, 7]
    got = _narrow(small)
    assert got.typecode == "i" and got.itemsize == 4 and list(got) == small
    huge = [1, 2**63, 3]
    assert list(_narrow(huge)) == huge
    assert list(_narrow([])) == []
