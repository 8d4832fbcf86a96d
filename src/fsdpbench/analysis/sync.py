"""Counts of synchronisation and launch tasks (BARRIER, Launch_Ffts, device/stream/event syncs,
kernel launches)."""

from __future__ import annotations

import pandas as pd

from fsdpbench.trace.table import TASKS


def sync_counts(events: pd.DataFrame) -> dict[str, int]:
    """How many events of each task kind the table holds (every kind listed, zero when absent)."""
    counts = events["task"].value_counts()
    return {t: int(counts.get(t, 0)) for t in TASKS}
