"""Compute / communication / overlap / free time of one rank from its event table.

Definitions (HTA's ``get_comm_comp_overlap`` and CANN's Overlap Analysis agree on them):
C = ∪ compute events, M = ∪ communication events, over all device lanes of the rank;
overlapped = |C ∩ M|, exposed communication = |M| − overlapped, overlap ratio = overlapped / |M|
(None without communication), free = window − |C ∪ M|.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fsdpbench.analysis import intervals as iv
from fsdpbench.trace.table import EventTable, as_table

if TYPE_CHECKING:
    import pandas as pd


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


def category_union(events: EventTable | pd.DataFrame, category: str) -> iv.Intervals:
    """Union of the device events of one category."""
    t = as_table(events)
    sel = t.device & t.category.mask(category)
    return iv.union(t.start_ns[sel], t.end_ns[sel])


def breakdown(events: EventTable | pd.DataFrame, window_ns: int | None = None) -> Breakdown:
    """Compute, communication and overlapped time of ``events``.

    Args:
        events: an event table (already restricted to the step(s) of interest).
        window_ns: the length of the window the events cover (step time); default the span of
            the device events.
    """
    t = as_table(events)
    comp = category_union(t, "compute")
    comm = category_union(t, "comm")
    if window_ns is None:
        s, e = t.start_ns[t.device], t.end_ns[t.device]
        window_ns = int(e.max() - s.min()) if s.size else 0
    return Breakdown(
        window_ns=int(window_ns),
        compute_ns=iv.length(comp),
        comm_ns=iv.length(comm),
        overlapped_ns=iv.intersection_length(comp, comm),
    )
