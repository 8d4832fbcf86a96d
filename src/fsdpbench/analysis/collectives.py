"""Collectives of one rank: the per-event frame and the per-type summary."""

from __future__ import annotations

import numpy as np
import pandas as pd


def collective_events(events: pd.DataFrame) -> pd.DataFrame:
    """The rank's communication events: columns ``type, bytes, start_ns, end_ns`` sorted by start
    (``bytes`` NaN where the trace does not say)."""
    sel = events["device"].to_numpy() & (events["category"] == "comm").to_numpy()
    ce = events.loc[sel, ["collective", "bytes", "start_ns", "end_ns"]].rename(columns={"collective": "type"})
    ce["type"] = ce["type"].astype(str).replace("", "other")
    return ce.sort_values("start_ns", kind="stable", ignore_index=True)


def summarize(ce: pd.DataFrame) -> dict[str, dict[str, float | int | None]]:
    """Per collective type: ``count``, ``bytes`` (sum, None when unknown), ``time_us`` (sum of
    durations), ``median_bytes`` and ``bandwidth_gbps`` (GB/s = 1e9 bytes/s, over the events whose size
    is known: Σ bytes / Σ their durations; the algorithm bandwidth, not the bus bandwidth)."""
    out: dict[str, dict[str, float | int | None]] = {}
    if ce.empty:
        return out
    dur = (ce["end_ns"] - ce["start_ns"]).to_numpy()
    for ctype, idx in ce.groupby("type", sort=True).indices.items():
        b = ce["bytes"].to_numpy()[idx]
        known = ~np.isnan(b)
        d = dur[idx]
        bw = float(b[known].sum() / d[known].sum()) if known.any() and d[known].sum() > 0 else None
        out[str(ctype)] = {
            "count": int(idx.size),
            "bytes": int(b[known].sum()) if known.any() else None,
            "time_us": float(d.sum()) / 1000.0,
            "median_bytes": float(np.median(b[known])) if known.any() else None,
            "bandwidth_gbps": bw,  # bytes per ns == GB/s
        }
    return out
