"""Kernel (device op) statistics by op type."""

from __future__ import annotations

import pandas as pd

KERNEL_CATEGORIES = ("compute", "memcpy", "memset")


def op_stats(events: pd.DataFrame) -> pd.DataFrame:
    """Count, total and mean time per op type of the rank's non-communication device work.

    Returns:
        DataFrame ``op_type, count, total_us, mean_us`` sorted by ``total_us`` descending.
    """
    sel = events["device"].to_numpy() & events["category"].isin(KERNEL_CATEGORIES).to_numpy()
    k = events.loc[sel, ["op_type", "start_ns", "end_ns"]]
    dur = (k["end_ns"] - k["start_ns"]).rename("dur")
    g = dur.groupby(k["op_type"].astype(str), sort=False).agg(["count", "sum"])
    out = pd.DataFrame(
        {
            "op_type": g.index.astype(str),
            "count": g["count"].to_numpy(int),
            "total_us": g["sum"].to_numpy(float) / 1000.0,
        }
    )
    out["mean_us"] = out["total_us"] / out["count"]
    return out.sort_values(["total_us", "op_type"], ascending=[False, True], ignore_index=True)


def kernel_time_us(stats: pd.DataFrame) -> float:
    """Total kernel time (sum of durations, not a union) in µs."""
    return float(stats["total_us"].sum())
