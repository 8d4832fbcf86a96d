"""Compute / communication / overlap / free time of one rank from its event table.

Definitions (HTA's ``get_comm_comp_overlap`` and CANN's Overlap Analysis agree on them):
C = ∪ compute events, M = ∪ communication events, over all device lanes of the rank;
overlapped = |C ∩ M|, exposed communication = |M| − overlapped, overlap ratio = overlapped / |M|
(None without communication), free = window − |C ∪ M|.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from fsdpbench.analysis import intervals as iv


@dataclass(frozen=True)
class Breakdown:
    """Times of one window in ns (integers, exact)."""

    window_ns: int
    compute_ns: int
    comm_ns: int
    overlapped_ns: int

    @property
    def exposed_comm_ns(self) -> int:
        return self.comm_ns - self.overlapped_ns

    @property
    def busy_ns(self) -> int:
        return self.compute_ns + self.comm_ns - self.overlapped_ns

    @property
    def free_ns(self) -> int:
        return max(self.window_ns - self.busy_ns, 0)

    @property
    def overlap_ratio(self) -> float | None:
        return self.overlapped_ns / self.comm_ns if self.comm_ns > 0 else None


def category_union(events: pd.DataFrame, category: str) -> iv.Intervals:
    """Union of the device events of one category."""
    sel = events["device"].to_numpy() & (events["category"] == category).to_numpy()
    return iv.union(events["start_ns"].to_numpy()[sel], events["end_ns"].to_numpy()[sel])


def breakdown(events: pd.DataFrame, window_ns: int | None = None) -> Breakdown:
    """Compute, communication and overlapped time of ``events``.

    Args:
        events: an event table (already restricted to the step(s) of interest).
        window_ns: the length of the window the events cover (step time); default the span of
            the device events.
    """
    comp = category_union(events, "compute")
    comm = category_union(events, "comm")
    if window_ns is None:
        dev = events["device"].to_numpy()
        s, e = events["start_ns"].to_numpy()[dev], events["end_ns"].to_numpy()[dev]
        window_ns = int(e.max() - s.min()) if s.size else 0
    return Breakdown(
        window_ns=int(window_ns),
        compute_ns=iv.length(comp),
        comm_ns=iv.length(comm),
        overlapped_ns=iv.intersection_length(comp, comm),
    )
