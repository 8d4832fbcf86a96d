"""Vectorised interval arithmetic on half-open ``[start, end)`` integer-ns intervals.

Every function takes or returns a pair of int64 arrays (starts, ends). A *union* is sorted,
non-overlapping and non-touching: intervals that touch (``end == next start``) are merged, as HTA's
``merge_kernel_intervals`` does. Nothing here loops over intervals in Python.
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]

_EMPTY = np.empty(0, dtype=np.int64)


def empty() -> Intervals:
    """An empty interval set."""
    return _EMPTY, _EMPTY


def union(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Merge intervals into a sorted union; zero-length and inverted intervals are dropped.

    Args:
        starts, ends: int64 arrays of equal length (ns).
    Returns:
        (starts, ends) of the union, sorted, with touching intervals merged.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    if starts.size == 0:
        return empty()
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    # a new group starts where the start lies beyond everything seen so far
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first], reach[last]


def length(iv: Intervals) -> int:
    """Total length (ns) of a union."""
    s, e = iv
    return int((e - s).sum()) if s.size else 0


def _sweep(a: Intervals, b: Intervals, state_kept: int) -> Intervals:
    """The parts of two unions where a sweep's running state equals ``state_kept``: +1/-1 at a's edges,
    +2/-2 at b's, so 1 = only a, 3 = both."""
    (sa, ea), (sb, eb) = a, b
    times = np.concatenate([sa, ea, sb, eb])
    delta = np.concatenate(
        [
            np.ones(sa.size, np.int8),
            -np.ones(ea.size, np.int8),
            np.full(sb.size, 2, np.int8),
            np.full(eb.size, -2, np.int8),
        ]
    )
    order = np.lexsort((delta, times))  # at equal times, ends (negative) before starts
    t, state = times[order], np.cumsum(delta[order], dtype=np.int64)
    kept = state == state_kept
    return union(t[:-1][kept[:-1]], t[1:][kept[:-1]])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two unions, as a union."""
    if a[0].size == 0 or b[0].size == 0:
        return empty()
    return _sweep(a, b, 3)


def intersection_length(a: Intervals, b: Intervals) -> int:
    """|a ∩ b| in ns for two unions."""
    return length(intersect(a, b))


def union_of(a: Intervals, b: Intervals) -> Intervals:
    """Union of two interval sets."""
    return union(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))


def clip(iv: Intervals, lo: int, hi: int) -> Intervals:
    """Restrict a union to the window ``[lo, hi)``."""
    s, e = iv
    s2, e2 = np.maximum(s, lo), np.minimum(e, hi)
    keep = e2 > s2
    return s2[keep], e2[keep]


def difference(a: Intervals, b: Intervals) -> Intervals:
    """``a`` minus ``b`` for two unions, as a union."""
    if a[0].size == 0 or b[0].size == 0:
        return a
    return _sweep(a, b, 1)
