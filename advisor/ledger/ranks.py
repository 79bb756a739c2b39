"""Ranks as ranges, per-rank figures as runs: what keeps a million-rank job O(roles), not O(ranks).

* :class:`RankSet` -- the ranks of one role, ascending and distinct, stored as disjoint
  half-open ranges ``[a, b)``. It reads like a sorted list of ints (``len``, indexing, slicing,
  ``in``, iteration), but a role of 2^20 consecutive ranks is one range, not 2^20 ints.
* :class:`Runs` -- a figure that depends on the rank (ZeRO-1/2's I_r, Cov_r, ...), as a
  piecewise-constant function over ranks ``0..W-1``: the bounds where it changes and the value
  on each piece. Ranks differ only at the few places where a tensor boundary falls inside a
  rank's partition, so a ZeRO-1/2 layout over W ranks has O(tensors) pieces whatever W is.

Neither knows anything about DeepSpeed; :mod:`advisor.ledger.state` builds them.
"""

from __future__ import annotations

import bisect
import heapq
from itertools import chain, islice, repeat
from typing import Any, Callable, Iterable, Iterator, Sequence


class RankSet(Sequence[int]):
    """Ascending distinct ranks as disjoint, non-adjacent half-open ranges ``[a, b)``.

    Behaves as a read-only sorted list of ints: ``len(s)``, ``s[i]`` and ``s[-1]`` (O(log
    ranges)), ``s[:k]`` (a list of at most k ints), ``r in s``, iteration, equality with a list.
    Union is ``s | t``, intersection ``s & t``, both O(ranges)."""

    __slots__ = ("_a", "_b", "_cum")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        rs = sorted((int(a), int(b)) for a, b in ranges if b > a)
        a_out: list[int] = []
        b_out: list[int] = []
        for a, b in rs:
            if b_out and a <= b_out[-1]:
                if b > b_out[-1]:
                    b_out[-1] = b
            else:
                a_out.append(a)
                b_out.append(b)
        self._a = tuple(a_out)
        self._b = tuple(b_out)
        cum = [0]
        for a, b in zip(a_out, b_out):
            cum.append(cum[-1] + b - a)
        self._cum = tuple(cum)

    @classmethod
    def of(cls, ranks: Iterable[int]) -> "RankSet":
        """The set of explicit ``ranks`` (any order, duplicates dropped); O(n log n)."""
        return cls((r, r + 1) for r in ranks)

    @classmethod
    def span(cls, a: int, b: int) -> "RankSet":
        """Ranks a..b-1."""
        return cls([(a, b)])

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        """The half-open ranges ``(a, b)``, ascending."""
        return tuple(zip(self._a, self._b))

    def __len__(self) -> int:
        return self._cum[-1]

    def __iter__(self) -> Iterator[int]:
        for a, b in zip(self._a, self._b):
            yield from range(a, b)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step == 1:
                return list(islice(self._from(start), max(0, stop - start)))
            return list(self)[i]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("RankSet index out of range")
        k = bisect.bisect_right(self._cum, i) - 1
        return self._a[k] + i - self._cum[k]

    def _from(self, i: int) -> Iterator[int]:
        """Ranks from position ``i`` on."""
        k = bisect.bisect_right(self._cum, i) - 1
        for j in range(k, len(self._a)):
            off = i - self._cum[j] if j == k else 0
            yield from range(self._a[j] + off, self._b[j])

    def __contains__(self, r: object) -> bool:
        if not isinstance(r, int):
            return False
        k = bisect.bisect_right(self._a, r) - 1
        return k >= 0 and r < self._b[k]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RankSet):
            return self._a == other._a and self._b == other._b
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(x == y for x, y in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._a, self._b))

    def __or__(self, other: "RankSet | Iterable[int]") -> "RankSet":
        o = other if isinstance(other, RankSet) else RankSet.of(other)
        return RankSet(list(self.ranges) + list(o.ranges))

    def __and__(self, other: "RankSet") -> "RankSet":
        out = []
        i = j = 0
        A, B = self.ranges, other.ranges
        while i < len(A) and j < len(B):
            lo, hi = max(A[i][0], B[j][0]), min(A[i][1], B[j][1])
            if hi > lo:
                out.append((lo, hi))
            if A[i][1] < B[j][1]:
                i += 1
            else:
                j += 1
        return RankSet(out)

    def scaled(self, k: int, offset: int = 0) -> "RankSet":
        """{offset + r x k + m : r in self, 0 <= m < k}: ranks of a group of k consecutive global
        ranks per member (tensor-parallel ranks of each ZeRO rank); O(ranges)."""
        return RankSet((offset + a * k, offset + b * k) for a, b in self.ranges)

    def __repr__(self) -> str:
        return "RankSet(" + ", ".join(f"{a}" if b == a + 1 else f"{a}..{b - 1}" for a, b in self.ranges) + ")"

    def describe(self) -> str:
        """'3', '0..7' or '0..3, 8..11' (inclusive), for messages."""
        return ", ".join(f"{a}" if b == a + 1 else f"{a}..{b - 1}" for a, b in self.ranges)


def rank_fields(ranks: "RankSet | Iterable[int]") -> dict[str, Any]:
    """How JSON outputs name a set of ranks: ``{"rank_count": n, "rank_ranges": [[first, last],
    ...]}`` (inclusive, ascending), O(ranges) whatever the world size. Estimate schema 2 and
    check schema 2 use it for every role, movement group and node."""
    rs = ranks if isinstance(ranks, RankSet) else RankSet.of(ranks)
    return {"rank_count": len(rs), "rank_ranges": [[a, b - 1] for a, b in rs.ranges]}


_NONE = object()  # a value no piece holds


class Runs:
    """A value per rank over ``0..W-1`` as pieces: ``bounds`` b_0 = 0 < b_1 < ... < b_k = W, value
    ``values[i]`` on ranks [b_i, b_{i+1}). Neighbouring pieces never hold equal values."""

    __slots__ = ("bounds", "values")

    def __init__(self, bounds: Sequence[int], values: Sequence[Any]) -> None:
        b_out = [bounds[0]]
        v_out: list[Any] = []
        last: Any = _NONE
        for b0, b1, v in zip(bounds, islice(bounds, 1, None), values):
            if b1 <= b0:
                continue
            if v == last:
                b_out[-1] = b1
            else:
                v_out.append(v)
                b_out.append(b1)
                last = v
        self.bounds = tuple(b_out)
        self.values = tuple(v_out)

    @property
    def W(self) -> int:
        return self.bounds[-1]

    @classmethod
    def const(cls, W: int, v: Any) -> "Runs":
        return cls((0, W), (v,))

    @classmethod
    def of(cls, vals: Sequence[Any]) -> "Runs":
        """From an explicit per-rank list (small W; tests)."""
        return cls(list(range(len(vals) + 1)), list(vals))

    @classmethod
    def at_points(cls, W: int, points: Iterable[int], value_at: Callable[[Iterable[int]], Iterable[Any]]) -> "Runs":
        """The runs of a figure that is constant between the candidate change ranks ``points``
        (0 is added): ``value_at`` is called once with the ascending piece starts and yields the
        value at each (so it can walk them with forward-only pointers)."""
        starts = sorted({0, *(p for p in points if 0 <= p < W)})
        return cls(starts + [W], list(value_at(starts)))

    @classmethod
    def from_updates(cls, W: int, updates: Iterable[tuple[int, int, Any]], default: Any,
                     best: str = "max") -> "Runs":
        """Per rank, the max (``best="max"``) or min of the values of the updates ``(a, b, x)``
        covering it (ranks a..b-1), ``default`` where none does. O(U log U) for U updates."""
        sign = -1 if best == "max" else 1
        ups = sorted((a, b, x) for a, b, x in updates if b > a)
        pts = sorted({0, W, *(min(max(a, 0), W) for a, _, _ in ups), *(min(max(b, 0), W) for _, b, _ in ups)})
        heap: list[tuple[Any, int]] = []
        k = 0
        vals = []
        for i in range(len(pts) - 1):
            p = pts[i]
            while k < len(ups) and ups[k][0] <= p:
                heapq.heappush(heap, (sign * ups[k][2], ups[k][1]))
                k += 1
            while heap and heap[0][1] <= p:
                heapq.heappop(heap)
            vals.append(sign * heap[0][0] if heap else default)
        return cls(pts, vals)

    def __getitem__(self, r: int) -> Any:
        if not 0 <= r < self.W:
            raise IndexError(f"rank {r} outside 0..{self.W - 1}")
        return self.values[bisect.bisect_right(self.bounds, r) - 1]

    def pieces(self) -> Iterator[tuple[int, int, Any]]:
        """(a, b, value) per piece, ascending."""
        for i, v in enumerate(self.values):
            yield self.bounds[i], self.bounds[i + 1], v

    def __len__(self) -> int:
        return self.W

    def to_list(self) -> list[Any]:
        """Every rank's value (O(W): for small W and tests)."""
        out: list[Any] = []
        for a, b, v in self.pieces():
            out.extend([v] * (b - a))
        return out

    def map(self, f: Callable[[Any], Any]) -> "Runs":
        return Runs(self.bounds, [f(v) for v in self.values])

    @staticmethod
    def zip(*runs: "Runs") -> "Runs":
        """Runs of tuples (one value from each), over the union of their bounds."""
        W = runs[0].W
        if any(r.W != W for r in runs):
            raise ValueError("runs over different world sizes")
        if len(runs) == 1:
            return Runs(runs[0].bounds, [(v,) for v in runs[0].values])
        pts = sorted({b for r in runs for b in r.bounds})
        # each run's value at every point of pts: its piece i covers the points from the
        # position of bounds[i] to that of bounds[i + 1] (every bound is one of pts)
        cols = []
        for r in runs:
            pos = [bisect.bisect_left(pts, b) for b in r.bounds]
            cols.append(list(chain.from_iterable(map(repeat, r.values, [j1 - j0 for j0, j1 in zip(pos, pos[1:])]))))
        return Runs(pts, list(zip(*cols)))

    def groups(self) -> dict[Any, RankSet]:
        """value -> the ranks holding it, in order of first rank."""
        by: dict[Any, list[tuple[int, int]]] = {}
        for a, b, v in self.pieces():
            by.setdefault(v, []).append((a, b))
        return {v: RankSet(rs) for v, rs in by.items()}
