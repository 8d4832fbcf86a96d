"""Counts of synchronisation and launch tasks (BARRIER, Launch_Ffts, device/stream/event syncs,
kernel launches)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from fsdpbench.trace.table import TASKS


def sync_counts(events: pd.DataFrame, recorded: Sequence[str] | None = None) -> dict[str, int | None]:
    """How many events of each task kind the table holds (every kind listed, zero when absent).

    Args:
        events: an event table.
        recorded: the task kinds the trace can record (``RankTrace.recorded_tasks``); the others are
            ``None`` ("not recorded": a CPU-only trace has no kernel launches, CUDA no BARRIER task).
            None: all of them.
    """
    counts = events["task"].value_counts()
    return {t: int(counts.get(t, 0)) if recorded is None or t in recorded else None for t in TASKS}
