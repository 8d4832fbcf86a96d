"""Collectives of one rank: the per-event columns and the per-type summary."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

import numpy as np

from fsdpbench.trace.table import EventTable, as_table

if TYPE_CHECKING:
    import pandas as pd


EVENT_COLUMNS = ("type", "bytes", "start_ns", "end_ns", "group", "seq", "dtype", "in_bytes", "out_bytes")
"""``collective_events``' columns, in order."""


def _or_none(values: np.ndarray) -> np.ndarray:
    """Object array of strings with None where the string is empty (not said by the trace)."""
    out = values.astype(object)
    out[values == ""] = None
    return out


def collective_events(events: EventTable | pd.DataFrame) -> dict[str, np.ndarray]:
    """The rank's communication events as columns (:data:`EVENT_COLUMNS`), sorted by start:
    ``type`` (object), ``bytes`` (NaN where the trace does not say), ``start_ns``, ``end_ns``, and
    their identity: ``group`` (process group name, None where the trace names none), ``seq``
    (sequence number in the group, -1 where none), ``dtype`` (None where unknown), ``in_bytes``,
    ``out_bytes`` (NaN where unknown). ``RankMetrics.collective_events`` shows them as a DataFrame."""
    t = as_table(events)
    sel = np.flatnonzero(t.device & t.category.mask("comm"))
    sel = sel[np.argsort(t.start_ns[sel], kind="stable")]
    ctype = t.collective[sel].strings("other")
    ctype[ctype == ""] = "other"
    ident = t.identity(sel)
    return {
        "type": ctype,
        "bytes": t.bytes[sel],
        "start_ns": t.start_ns[sel],
        "end_ns": t.end_ns[sel],
        "group": _or_none(ident["group"]),
        "seq": ident["seq"],
        "dtype": _or_none(ident["dtype"]),
        "in_bytes": ident["in_bytes"],
        "out_bytes": ident["out_bytes"],
    }


def summarize(ce: dict[str, Any] | pd.DataFrame) -> dict[str, dict[str, float | int | None]]:
    """Per collective type: ``count``, ``bytes`` (sum, None when unknown), ``time_us`` (sum of
    durations), ``median_bytes`` and ``bandwidth_gbps`` (GB/s = 1e9 bytes/s, over the events whose size
    is known: Σ bytes / Σ their durations; the algorithm bandwidth, not the bus bandwidth)."""
    out: dict[str, dict[str, float | int | None]] = {}
    types = np.asarray(ce["type"], dtype=object)
    if types.size == 0:
        return out
    dur = np.asarray(ce["end_ns"], dtype=np.int64) - np.asarray(ce["start_ns"], dtype=np.int64)
    nbytes = np.asarray(ce["bytes"], dtype=np.float64)
    for ctype in sorted(set(types.tolist())):
        idx = np.flatnonzero(types == ctype)
        b = nbytes[idx]
        known = ~np.isnan(b)
        d = dur[idx]
        bw = float(b[known].sum() / d[known].sum()) if known.any() and d[known].sum() > 0 else None
        out[str(ctype)] = {
            "count": int(idx.size),
            "bytes": int(b[known].sum()) if known.any() else None,
            "time_us": float(d.sum()) / 1000.0,
            # statistics.median, not np.median: the same value, without np.median's lazy numpy.ma
            # import (~12 ms in every process that measures a rank)
            "median_bytes": float(statistics.median(b[known].tolist())) if known.any() else None,
            "bandwidth_gbps": bw,  # bytes per ns == GB/s
        }
    return out
