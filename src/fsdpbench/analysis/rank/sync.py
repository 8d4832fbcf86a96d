"""Counts of synchronisation and launch tasks (BARRIER, Launch_Ffts, device/stream/event syncs,
kernel launches)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from fsdpbench.trace.table import TASKS, EventTable, as_table

if TYPE_CHECKING:
    import pandas as pd


def sync_counts(
    events: EventTable | pd.DataFrame, recorded: Sequence[str] | None = None
) -> dict[str, int | None]:
    """How many events of each task kind the table holds (every kind listed, zero when absent).

    Args:
        events: an event table.
        recorded: the task kinds the trace can record (``RankTrace.recorded_tasks``); the others are
            ``None`` ("not recorded": a CPU-only trace has no kernel launches, CUDA no BARRIER task).
            None: all of them.
    """
    task = as_table(events).task
    codes = task.codes[task.codes >= 0]
    counts = dict(
        zip(task.categories, np.bincount(codes, minlength=len(task.categories)).tolist(), strict=True)
    )
    return {t: int(counts.get(t, 0)) if recorded is None or t in recorded else None for t in TASKS}
