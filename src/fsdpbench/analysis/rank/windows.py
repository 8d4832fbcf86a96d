"""The (unit, phase) windows' record, shared by every source that makes them (unit_ranges,
fsdp2_windows, fsdp1_units, phase_ranges), and the host rows they are read from."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fsdpbench.trace.table import EventTable

ALL_UNITS = "(all)"
"""Unit of the optimizer phase (the optimizer step is not per unit)."""
ROOT = "root"
"""Unit name of the root module (fsdpbench's own name for it; FSDP2's root group has the FQN "")."""

SOURCE_NONE = "none"


@dataclass(frozen=True)
class Ranges:
    """The (unit, phase) windows of a trace: per window its lane code, start, end, unit, phase, and
    the source they all came from (``fsdpbench ranges``, ``FSDP2 ranges``, ``none``)."""

    lane: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    unit: list[str]
    phase: list[str]
    source: str = SOURCE_NONE
    opened_by: list[str] | None = None
    """Per window the range that opened it, as ``--explain`` lists it (None: the window is a range)."""
    closed_by: list[str] | None = None
    """Per window the range (or the rule) that closed it."""
    notes: tuple[str, ...] = ()
    """What the output must say about how the windows were made (unnamed units, skipped post-forwards)."""

    def __len__(self) -> int:
        return len(self.unit)


def empty(source: str = SOURCE_NONE) -> Ranges:
    none = np.empty(0, np.int64)
    return Ranges(none, none.copy(), none.copy(), [], [], source)


def host_rows(t: EventTable, codes: list[int]) -> np.ndarray:
    """Host rows of ``t`` whose name code is among ``codes``, leaving out the device-side projections of
    host ranges (``gpu_user_annotation``: labels, never windows) by their lane: a stream, which holds
    device events launched from another lane."""
    if not codes:
        return np.empty(0, np.int64)
    rows = np.flatnonzero(np.isin(t.name.codes, codes) & ~t.device)
    linked = t.device & (t.launch_lane != t.lane.codes)
    if rows.size and linked.any():
        rows = rows[~np.isin(t.lane.codes[rows], t.lane.codes[linked])]
    return rows
