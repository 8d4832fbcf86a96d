"""What a reader returns for one rank."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class RankTrace:
    """One rank's profile, read into the common event table.

    Attributes:
        rank: the rank id (from the trace, else the path, else the position among the inputs).
        source: the file or folder it was read from.
        format: ``kineto`` or ``ascend``.
        events: the event table (see :mod:`fsdpbench.trace.table`).
        steps: host ``ProfilerStep#N`` windows: columns ``step, start_ns, end_ns`` (may be empty).
        mode: ``device`` (CUDA/NPU streams) or ``cpu`` (CPU-only trace: threads are the lanes).
        warnings: problems found while reading that did not stop it.
        cross_check: the profiler's own per-step numbers when it wrote them (Ascend
            ``step_trace_time.csv``): columns ``step, compute_us, comm_us, exposed_comm_us, free_us``.
        recorded_tasks: the sync/launch task kinds (``table.TASKS``) this trace can record; the others
            are reported as ``null`` ("not recorded"), not 0. None: all of them.
    """

    rank: int | None
    source: str
    format: str
    events: pd.DataFrame
    steps: pd.DataFrame
    mode: str = "device"
    warnings: list[str] = field(default_factory=list)
    cross_check: pd.DataFrame | None = None
    recorded_tasks: tuple[str, ...] | None = None
