"""What a reader returns for one rank."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from fsdpbench.trace.table import EventTable, StepWindows


DEVICE_NOT_RECORDED = "device activity was not recorded"
"""The words of the warning a reader gives a CPU-only profile of a GPU/NPU job."""
UNNAMED_GROUP = "?"
"""The key of ``by_group`` for collectives whose process group the trace does not name."""
ONE_RANK_WORLD = "a world of one rank"
"""The words of the warning a reader gives a trace whose process group has one rank (FSDP then issues no
collectives, so "no collectives found" would ask the wrong question)."""


@dataclass
class RankTrace:
    """One rank's profile, read into the common event table.

    Attributes:
        rank: the rank id (from the trace, else the path, else the position among the inputs).
        source: the file or folder it was read from.
        format: ``kineto`` or ``ascend``.
        table: the event table as numpy columns (see :mod:`fsdpbench.trace.table`); ``events`` is the
            same table as a ``pd.DataFrame``, made on first use.
        windows: host ``ProfilerStep#N`` windows as numpy columns ``step, start_ns, end_ns`` (may be
            empty; a reader may hand a DataFrame); ``steps`` is the same as a ``pd.DataFrame``.
        mode: ``device`` (CUDA/NPU streams) or ``cpu`` (CPU-only trace: threads are the lanes).
        warnings: problems found while reading that did not stop it.
        cross_check: the profiler's own per-step numbers when it wrote them (Ascend
            ``step_trace_time.csv`` or ``analysis.db`` ``StepTraceTime``): columns ``step, compute_us,
            comm_us, exposed_comm_us, free_us, reference`` (which of the two); a db export adds
            ``comm_tasks_us, exposed_comm_tasks_us`` (the same from the union of HCCL's tasks).
        recorded_tasks: the sync/launch task kinds (``table.TASKS``) this trace can record; the others
            are reported as ``null`` ("not recorded"), not 0. None: all of them.
        groups: the process groups the trace names for its collectives (the ``group`` column's
            values): ``{name: {"description", "ranks", "size"}}``, each null where the trace does not
            say; empty for traces without group fields (gloo, older NCCL); an Ascend text export names each
            HCCL op's group (``communication.json``) and its size (``communication_matrix.json``).
        world_size: the ``distributedInfo.world_size`` of a Kineto trace (None where it has none): the
            size of the group of collectives the trace names no group for.
    """

    rank: int | None
    source: str
    format: str
    table: EventTable
    windows: StepWindows
    mode: str = "device"
    warnings: list[str] = field(default_factory=list)
    cross_check: pd.DataFrame | None = None
    recorded_tasks: tuple[str, ...] | None = None
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    world_size: int | None = None
    _frame: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        from fsdpbench.trace.table import StepWindows

        self.windows = StepWindows.from_frame(self.windows)

    @property
    def events(self) -> pd.DataFrame:
        """The event table as a ``pd.DataFrame`` (made from ``table`` on first use)."""
        if self._frame is None:
            self._frame = self.table.to_frame()
        return self._frame

    @property
    def steps(self) -> pd.DataFrame:
        """The step windows as a ``pd.DataFrame`` (``step, start_ns, end_ns``)."""
        return self.windows.to_frame()
