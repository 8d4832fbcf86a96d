"""Across-rank timing: straggler ranks from the skew of collective start times, and clock checks."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

# Plain Python, no numpy: a second `fsdpbench analyze` (every rank from its result cache) then never
# imports numpy (~0.1 s, half of such a run); at 64 ranks x 20k collectives this is 1.5x the numpy
# version's time, and faster below that.

# a rank is a straggler when it reaches collectives this much later than the first rank (median)
MIN_SKEW_NS = 10_000


def clock_offset_warning(ranks: Sequence[int], spans: Sequence[tuple[int, int]]) -> str | None:
    """A warning when the ranks' device activity never overlaps in time: their clocks are offset
    (traces from different hosts, or re-based timestamps), so cross-rank timing is meaningless."""
    if len(spans) < 2:
        return None
    starts = [int(s) for s, _ in spans]
    if max(starts) < min(int(e) for _, e in spans):
        return None
    ref = starts.index(min(starts))
    late = [s - starts[ref] for s in starts]
    worst = late.index(max(late))
    return (
        f"rank {ranks[worst]}'s trace starts {late[worst] / 1e6:.3f} ms after rank {ranks[ref]}'s "
        "and the ranks' activity never overlaps: their clocks are offset, so collective skew and stragglers "
        "are not computed (per-rank metrics are unaffected)"
    )


def collective_skew(
    ranks: Sequence[int], events: Sequence[pd.DataFrame | dict[str, Any]]
) -> tuple[dict[int, float], list[str]]:
    """Median lateness (µs) of each rank at collectives: for the k-th collective of each type, the
    rank's start minus the earliest start over ranks. ``events``: per rank, the collective events
    (``type``, ``start_ns`` columns) as a DataFrame or a dict of columns.

    Collectives are matched by type and order; when ranks issued different numbers of a type, only
    the common prefix is used and a warning says so.
    """
    warnings: list[str] = []
    if len(ranks) < 2:
        return {}, warnings
    by_type: list[dict[str, list[int]]] = []
    for e in events:
        starts: defaultdict[str, list[int]] = defaultdict(list)
        for t, start in zip(e["type"], e["start_ns"], strict=True):
            starts[str(t)].append(int(start))
        for v in starts.values():
            v.sort()
        by_type.append(starts)
    late: list[list[int]] = [[] for _ in ranks]
    for t in sorted(set().union(*by_type)):
        starts_t = [s.get(t, []) for s in by_type]
        counts = [len(s) for s in starts_t]
        n = min(counts)
        if len(set(counts)) > 1:
            warnings.append(
                f"ranks issued different numbers of {t} ("
                + ", ".join(f"rank {r}: {c}" for r, c in zip(ranks, counts, strict=True))
                + f"); skew uses the first {n}"
            )
        for column in zip(
            *(s[:n] for s in starts_t), strict=True
        ):  # the k-th collective of this type on each rank
            first = min(column)
            for i, start in enumerate(column):
                late[i].append(start - first)
    if not late[0]:
        return {}, warnings
    # integer ns: the median of an even count, (a + b) / 2, is exact as numpy's would be
    return {int(r): statistics.median(late[i]) / 1000.0 for i, r in enumerate(ranks)}, warnings


def stragglers(skew_us: dict[int, float]) -> list[dict[str, float | int]]:
    """Ranks whose median lateness exceeds both 10 µs and twice the median lateness of the other
    ranks, latest first."""
    out = []
    for r, s in skew_us.items():
        others = [v for k, v in skew_us.items() if k != r]
        if others and s > max(MIN_SKEW_NS / 1000.0, 2 * statistics.median(others)):
            out.append({"rank": r, "skew_us": s})
    return sorted(out, key=lambda d: -d["skew_us"])
