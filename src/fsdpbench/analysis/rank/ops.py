"""Kernel (device op) statistics by op type."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fsdpbench.trace.table import EventTable, as_table

if TYPE_CHECKING:
    import pandas as pd

KERNEL_CATEGORIES = ("compute", "memcpy", "memset")


def op_stats(events: EventTable | pd.DataFrame) -> list[dict[str, Any]]:
    """Count, total and mean time per op type of the rank's non-communication device work.

    Returns:
        Rows ``{op_type, count, total_us, mean_us}`` sorted by ``total_us`` descending, then op type
        (``StepMetrics.op_stats`` shows them as a DataFrame).
    """
    t = as_table(events)
    sel = t.device & t.category.mask(*KERNEL_CATEGORIES)
    codes = t.op_type.codes[sel]
    dur = (t.end_ns - t.start_ns)[sel]
    labels = [
        *t.op_type.categories,
        "nan",
    ]  # code -1 (no op type) is counted as "nan", as astype(str) names it
    codes = np.where(codes < 0, len(labels) - 1, codes)
    count = np.bincount(codes, minlength=len(labels))
    total = np.zeros(len(labels), dtype=np.int64)
    np.add.at(total, codes, dur)  # integer ns: exact whatever the sum
    by_label: dict[str, list[int]] = {}
    for i in np.flatnonzero(count).tolist():  # equal labels (two categories named alike) are one op type
        acc = by_label.setdefault(str(labels[i]), [0, 0])
        acc[0] += int(count[i])
        acc[1] += int(total[i])
    rows = [
        {"op_type": o, "count": c, "total_us": ns / 1000.0, "mean_us": (ns / 1000.0) / c}
        for o, (c, ns) in by_label.items()
    ]
    rows.sort(key=lambda r: (-r["total_us"], r["op_type"]))
    return rows


def kernel_time_us(stats: list[dict[str, Any]] | pd.DataFrame) -> float:
    """Total kernel time (sum of durations, not a union) in µs."""
    totals = [r["total_us"] for r in stats] if isinstance(stats, list) else stats["total_us"]
    return float(np.sum(np.asarray(totals, dtype=np.float64)))  # numpy's pairwise sum, as pandas sums
