"""Compute / communication / overlap / free time of one rank from its event table.

Definitions (HTA's ``get_comm_comp_overlap`` and CANN's Overlap Analysis agree on them):
C = ∪ compute events, M = ∪ communication events, over all device lanes of the rank;
overlapped = |C ∩ M|, exposed communication = |M| − overlapped, overlap ratio = overlapped / |M|
(None without communication). When the device lags the host, a step's window also holds device work of
other steps: with ``B`` = ∪ of every compute/communication event of the rank (any step) and ``W`` the
window, carried over = |B ∩ W| − |C ∪ M| (the device busy with other steps' work) and free =
|W| − |B ∩ W| (the device ran nothing at all). Without ``B`` (no window intervals) carried over is 0
and free = window − |C ∪ M|. See docs/analysis-definitions.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fsdpbench.trace import intervals as iv
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
    carried_over_ns: int = 0
    """Device time inside the window spent on other steps' work (never counted as free)."""

    @property
    def exposed_comm_ns(self) -> int:
        return self.comm_ns - self.overlapped_ns

    @property
    def busy_ns(self) -> int:
        return self.compute_ns + self.comm_ns - self.overlapped_ns

    @property
    def free_ns(self) -> int:
        """Window time when the device ran nothing at all (neither this step's work nor another's)."""
        return max(self.window_ns - self.busy_ns - self.carried_over_ns, 0)

    @property
    def overlap_ratio(self) -> float | None:
        return self.overlapped_ns / self.comm_ns if self.comm_ns > 0 else None


def category_union(events: EventTable | pd.DataFrame, category: str) -> iv.Intervals:
    """Union of the device events of one category."""
    t = as_table(events)
    sel = t.device & t.category.mask(category)
    return iv.union(t.start_ns[sel], t.end_ns[sel])


def breakdown(
    events: EventTable | pd.DataFrame,
    window_ns: int | None = None,
    *,
    window: iv.Intervals | None = None,
    busy_all: iv.Intervals | None = None,
    unions: tuple[iv.Intervals, iv.Intervals] | None = None,
) -> Breakdown:
    """Compute, communication and overlapped time of ``events``, and the carried-over time.

    Args:
        events: an event table (already restricted to the step(s) of interest).
        window_ns: the length of the window the events cover (step time); default the length of
            ``window``, else the span of the device events.
        window: the window as intervals (a union); with ``busy_all`` it gives the carried-over time.
        busy_all: ∪ of the compute and communication device events of the rank's whole table (every
            step's work: when the device ran anything).
        unions: (compute, communication) :func:`category_union` of ``events``, when already computed.
    """
    t = as_table(events)
    comp, comm = unions if unions is not None else (category_union(t, "compute"), category_union(t, "comm"))
    if window_ns is None and window is not None:
        window_ns = iv.length(window)
    if window_ns is None:
        s, e = t.start_ns[t.device], t.end_ns[t.device]
        window_ns = int(e.max() - s.min()) if s.size else 0
    compute_ns, comm_ns = iv.length(comp), iv.length(comm)
    overlapped_ns = iv.intersection_length(comp, comm)
    carried = 0
    if window is not None and busy_all is not None and window[0].size:
        lo, hi = int(window[0][0]), int(window[1][-1])
        inside = iv.intersection_length(iv.clip(busy_all, lo, hi), window)
        carried = max(inside - (compute_ns + comm_ns - overlapped_ns), 0)
    return Breakdown(
        window_ns=int(window_ns),
        compute_ns=compute_ns,
        comm_ns=comm_ns,
        overlapped_ns=overlapped_ns,
        carried_over_ns=carried,
    )
