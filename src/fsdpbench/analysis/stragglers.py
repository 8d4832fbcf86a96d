"""Across-rank timing: straggler ranks from the skew of collective start times, and clock checks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

# a rank is a straggler when it reaches collectives this much later than the first rank (median)
MIN_SKEW_NS = 10_000


def clock_offset_warning(ranks: Sequence[int], spans: Sequence[tuple[int, int]]) -> str | None:
    """A warning when the ranks' device activity never overlaps in time: their clocks are offset
    (traces from different hosts, or re-based timestamps), so cross-rank timing is meaningless."""
    if len(spans) < 2:
        return None
    starts = np.array([s for s, _ in spans], dtype=np.int64)
    ends = np.array([e for _, e in spans], dtype=np.int64)
    if starts.max() < ends.min():
        return None
    ref = int(np.argmin(starts))
    worst = int(np.argmax(starts - starts[ref]))
    return (
        f"rank {ranks[worst]}'s trace starts {(starts[worst] - starts[ref]) / 1e6:.3f} ms after rank {ranks[ref]}'s "
        "and the ranks' activity never overlaps: their clocks are offset, so collective skew and stragglers "
        "are not computed (per-rank metrics are unaffected)"
    )


def collective_skew(
    ranks: Sequence[int], events: Sequence[pd.DataFrame | dict[str, list]]
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
    late: list[np.ndarray] = []
    types = sorted(set().union(*[set(e["type"]) for e in events]))
    for t in types:
        starts = [
            np.sort(np.asarray(e["start_ns"], dtype=np.int64)[np.asarray(e["type"], dtype=object) == t])
            for e in events
        ]
        counts = [s.size for s in starts]
        n = min(counts)
        if len(set(counts)) > 1:
            warnings.append(
                f"ranks issued different numbers of {t} ("
                + ", ".join(f"rank {r}: {c}" for r, c in zip(ranks, counts, strict=True))
                + f"); skew uses the first {n}"
            )
        if n == 0:
            continue
        m = np.stack([s[:n] for s in starts])  # ranks × collectives
        late.append(m - m.min(axis=0))
    if not late:
        return {}, warnings
    lateness = np.concatenate(late, axis=1)
    return {int(r): float(np.median(lateness[i])) / 1000.0 for i, r in enumerate(ranks)}, warnings


def stragglers(skew_us: dict[int, float]) -> list[dict[str, float | int]]:
    """Ranks whose median lateness exceeds both 10 µs and twice the median lateness of the other
    ranks, latest first."""
    out = []
    for r, s in skew_us.items():
        others = [v for k, v in skew_us.items() if k != r]
        if others and s > max(MIN_SKEW_NS / 1000.0, 2 * float(np.median(others))):
            out.append({"rank": r, "skew_us": s})
    return sorted(out, key=lambda d: -d["skew_us"])
