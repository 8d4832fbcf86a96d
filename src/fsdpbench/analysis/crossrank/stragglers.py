"""Across-rank timing: straggler ranks from the skew of collective start times, and clock checks.

The skew itself (each rank's median lateness at the collectives it shares with others) is measured by
:func:`fsdpbench.analysis.crossrank.waits.wait_transfer` on the collectives it matches and the clocks it aligns, so
that stragglers and waits read the same instances on the same clocks."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

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


def stragglers(skew_us: dict[int, float]) -> list[dict[str, float | int]]:
    """Ranks whose median lateness exceeds both 10 µs and twice the median lateness of the other
    ranks, latest first. ``skew_us``: each rank's median lateness (µs, the ``skew_us`` of
    ``wait_transfer``)."""
    out = []
    for r, s in skew_us.items():
        others = [v for k, v in skew_us.items() if k != r]
        if others and s > max(MIN_SKEW_NS / 1000.0, 2 * statistics.median(others)):
            out.append({"rank": r, "skew_us": s})
    return sorted(out, key=lambda d: -d["skew_us"])
