"""Allocated memory over the memory-recording step, with fsdpbench's phase and unit ranges on it.

The worker records one step of its own with ``profile_memory=True`` and fsdpbench's ranges installed
(``worker.record_memory_step``; docs/memory.md "Memory timeline of a step"), so the ``[memory]``
events and the ``fsdpbench::forward|backward::<unit>`` / ``fsdpbench::optimizer`` ranges share one
clock. From its Chrome trace and the bytes live at its start (by category, from the model and
optimizer state) ``step_timeline`` gives the allocated bytes over the step, the ranges, and the peak:
the (phase, unit) range it falls in, the collective range if any, and what makes it up — the
live-at-start bytes by category, and the step's own allocations still live at the peak by the range
they were made in (matched allocation to free by address).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fsdpbench.errors import InputError
from fsdpbench.trace.memory import CPU_DEVICE_TYPE

LIVE_CATEGORIES = ("parameters", "gradients", "optimizer_states", "batch")
"""Categories of the bytes live at the step's start (``worker.live_at_start``)."""
IN_STEP_CATEGORIES = {
    "forward": "forward_allocations",
    "backward": "backward_allocations",
    "optimizer": "optimizer_allocations",
    "collective": "communication_buffers",
    None: "outside_ranges",
}
"""Category of a step allocation by the range it was made in (the innermost collective range first)."""
PREFIX = "fsdpbench"
"""``profile_marks.PREFIX`` (not imported: this module runs without torch)."""
MAX_POINTS = 1500
"""Largest number of (time, bytes) points kept for the figure (the peak and each bucket's max are kept)."""


def range_fields(name: str) -> tuple[bool, dict[str, Any]] | None:
    """What an fsdpbench range called ``name`` is: ``(True, {"name"})`` for a c10d range,
    ``(False, {"phase", "unit"})`` for a unit's forward/backward or the optimizer, None for any other
    name (docs/DATA.md, "Ranges in the profiled step")."""
    parts = name.split("::")
    if parts[0] != PREFIX or len(parts) < 2:
        return None
    if parts[1] == "c10d":
        return True, {"name": name}
    if parts[1] in ("forward", "backward") and len(parts) >= 3:
        return False, {"phase": parts[1], "unit": "::".join(parts[2:])}
    if parts[1] == "optimizer":
        return False, {"phase": "optimizer", "unit": None}
    return None


def _ranges(events: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(phase/unit ranges, collective ranges) of fsdpbench's ``X`` events, in start order."""
    units, collectives = [], []
    for e in events:
        name = e.get("name")
        kind = range_fields(name) if e.get("ph") == "X" and isinstance(name, str) else None
        if kind is None:
            continue
        start, end = float(e["ts"]), float(e["ts"]) + float(e.get("dur") or 0.0)
        (collectives if kind[0] else units).append({**kind[1], "start_us": start, "end_us": end})
    units.sort(key=lambda r: r["start_us"])
    collectives.sort(key=lambda r: r["start_us"])
    return units, collectives


def _innermost(ranges: Sequence[Mapping[str, Any]], t: float) -> Mapping[str, Any] | None:
    """The shortest range holding ``t`` (ranges nest: the root's forward holds every layer's)."""
    best = None
    for r in ranges:
        if r["start_us"] <= t <= r["end_us"] and (
            best is None or r["end_us"] - r["start_us"] < best["end_us"] - best["start_us"]
        ):
            best = r
    return best


def _thin_index(y: np.ndarray, keep: int) -> np.ndarray:
    """Indices of at most ~``2 * MAX_POINTS`` points: each bucket's first and largest (and ``keep``, the peak)."""
    if y.size <= MAX_POINTS:
        return np.arange(y.size)
    edges = np.linspace(0, y.size, MAX_POINTS + 1).astype(int)
    idx = {keep}
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        if b > a:
            idx.add(a)
            idx.add(a + int(np.argmax(y[a:b])))
    return np.array(sorted(idx))


def step_timeline(
    trace_events: Sequence[Mapping[str, Any]],
    live_at_start: Mapping[str, int],
    device_type: int = CPU_DEVICE_TYPE,
) -> dict[str, Any]:
    """The memory timeline of a recorded step (the ``memory_timeline`` object of docs/DATA.md).

    CPU (``device_type`` 0): allocated = the live-at-start bytes + the running sum of the events'
    ``Bytes``. A device: the allocator's ``Total Allocated``. Times are µs from the first fsdpbench range
    (else the first event). Raises ``InputError`` when the trace holds no memory events of that device.
    """
    mem = [
        e
        for e in trace_events
        if e.get("name") == "[memory]" and (e.get("args") or {}).get("Device Type") == device_type
    ]
    if not mem:
        raise InputError(
            f"no [memory] events of device type {device_type} in the trace; record it with profile_memory=True"
        )
    mem.sort(key=lambda e: float(e["ts"]))
    ts = np.array([float(e["ts"]) for e in mem])
    nbytes = np.array([int(e["args"]["Bytes"]) for e in mem], dtype=np.int64)
    live = {k: int(v) for k, v in live_at_start.items()}
    live_total = sum(live.values())
    if device_type == CPU_DEVICE_TYPE:
        allocated = live_total + np.cumsum(nbytes)
    else:
        allocated = np.array([int(e["args"].get("Total Allocated", 0)) for e in mem], dtype=np.int64)
    units, collectives = _ranges(trace_events)
    t0 = min([r["start_us"] for r in units] or [float(ts[0])])
    i_peak = int(np.argmax(allocated))

    # the step's allocations still live at the peak, by the range they were made in
    # An address can hold two live entries at once: events from different threads share a µs timestamp,
    # so a reuse's allocation may be listed before the free of the block that held the address. A free
    # therefore closes the entry at its address with its size, and counts as unmatched where none has it.
    open_: dict[Any, list[tuple[int, float]]] = {}
    unmatched_free = 0
    for e, b in zip(mem[: i_peak + 1], nbytes[: i_peak + 1], strict=True):
        addr = e["args"].get("Addr")
        if b > 0:
            open_.setdefault(addr, []).append((int(b), float(e["ts"])))
        elif b < 0:
            held = open_.get(addr, [])
            match = next((k for k, (size, _) in enumerate(held) if size == -b), None)
            if match is None:
                unmatched_free += int(-b)
            else:
                del held[match]
    return timeline_object(
        source="kineto",
        t_us=ts,
        allocated=allocated,
        units=units,
        collectives=collectives,
        live_at_start=live,
        live_allocations=[entry for held in open_.values() for entry in held],
        t0=t0,
        extra={"device_type": device_type, "n_events": len(mem)},
        peak_extra={"unmatched_free_bytes": unmatched_free},
    )


def timeline_object(
    *,
    source: str,
    t_us: np.ndarray,
    allocated: np.ndarray,
    units: Sequence[Mapping[str, Any]],
    collectives: Sequence[Mapping[str, Any]],
    live_at_start: Mapping[str, int],
    live_allocations: Sequence[tuple[int, float]],
    t0: float,
    extra: Mapping[str, Any] | None = None,
    peak_extra: Mapping[str, Any] | None = None,
    reserved: np.ndarray | None = None,
) -> dict[str, Any]:
    """The ``memory_timeline`` object from an allocated series (µs, time order), the fsdpbench ranges
    (``_ranges``' form), the bytes live at the start by category and the step's allocations still live at
    the peak as ``(bytes, time made)``; times in the object are µs from ``t0``. ``reserved`` (same length
    as ``allocated``) adds ``reserved_bytes`` and ``peak.reserved_bytes``."""
    live = {k: int(v) for k, v in live_at_start.items()}
    live_total = sum(live.values())
    i_peak = int(np.argmax(allocated))
    t_peak = float(t_us[i_peak])
    by_range: dict[tuple[str | None, str | None], int] = {}
    by_category: dict[str, int] = dict.fromkeys(IN_STEP_CATEGORIES.values(), 0)
    for size, t_alloc in live_allocations:
        coll = _innermost(collectives, t_alloc)
        rng = _innermost(units, t_alloc)
        key = (rng["phase"], rng["unit"]) if rng else (None, None)
        by_range[key] = by_range.get(key, 0) + int(size)
        by_category[IN_STEP_CATEGORIES["collective" if coll else key[0]]] += int(size)
    at_peak = _innermost(units, t_peak)
    coll_at_peak = _innermost(collectives, t_peak)
    keep = _thin_index(allocated, i_peak)
    out: dict[str, Any] = {
        "source": source,
        **(extra or {}),
        "t_us": [round(float(t - t0), 3) for t in t_us[keep]],
        "allocated_bytes": [int(v) for v in allocated[keep]],
        **({"reserved_bytes": [int(v) for v in reserved[keep]]} if reserved is not None else {}),
        "ranges": [{**r, "start_us": r["start_us"] - t0, "end_us": r["end_us"] - t0} for r in units],
        "live_at_start_bytes": live,
        "peak": {
            "bytes": int(allocated[i_peak]),
            "t_us": t_peak - t0,
            "phase": at_peak["phase"] if at_peak else None,
            "unit": at_peak["unit"] if at_peak else None,
            "collective": coll_at_peak["name"] if coll_at_peak else None,
            "live_at_start_bytes": live_total,
            "in_step_bytes": int(allocated[i_peak]) - live_total,
            "in_step_by_category": by_category,
            "in_step_by_range": [
                {"phase": p, "unit": u, "bytes": n}
                for (p, u), n in sorted(by_range.items(), key=lambda kv: -kv[1])
            ],
            **({"reserved_bytes": int(reserved[i_peak])} if reserved is not None else {}),
            **(peak_extra or {}),
        },
        "end_bytes": int(allocated[-1]),
    }
    return out


def where(peak: Mapping[str, Any]) -> str:
    """``backward of layers.2`` / ``optimizer`` / ``outside fsdpbench's ranges`` for a timeline's peak."""
    phase, unit = peak.get("phase"), peak.get("unit")
    if phase is None:
        return "outside fsdpbench's ranges"
    return f"{phase} of {unit}" if unit else phase


def peak_summary(timeline: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The peak part of a ``memory_timeline`` (diff JSON's ``memory_timeline.base|test``); None without one."""
    if not timeline or "peak" not in timeline:
        return None
    peak = timeline["peak"]
    return {
        "rank": timeline.get("rank", 0),
        "source": timeline.get("source", "kineto"),
        "peak_bytes": peak["bytes"],
        "where": where(peak),
        "phase": peak["phase"],
        "unit": peak["unit"],
        "collective": peak["collective"],
        "live_at_start_bytes": dict(timeline["live_at_start_bytes"]),
        "in_step_by_category": dict(peak["in_step_by_category"]),
        "in_step_by_range": [dict(r) for r in peak["in_step_by_range"]],
    }


def peak_difference(base: Mapping[str, Any], test: Mapping[str, Any]) -> dict[str, Any]:
    """Where two peaks differ (test − base): the total, the category and the (phase, unit) range of the
    step's allocations with the largest difference, and the live-at-start category with the largest."""

    def largest(b: Mapping[Any, int], t: Mapping[Any, int]) -> tuple[Any, int]:
        deltas = {k: t.get(k, 0) - b.get(k, 0) for k in {*b, *t}}
        key = max(sorted(deltas, key=str), key=lambda k: abs(deltas[k]), default=None)
        return key, deltas.get(key, 0)

    def ranges(side: Mapping[str, Any]) -> dict[tuple[Any, Any], int]:
        return {(r["phase"], r["unit"]): r["bytes"] for r in side["in_step_by_range"]}

    category, d_category = largest(base["in_step_by_category"], test["in_step_by_category"])
    (phase, unit), d_range = (
        largest(ranges(base), ranges(test))
        if ranges(base) or ranges(test)
        else (
            (None, None),
            0,
        )
    )
    live, d_live = largest(base["live_at_start_bytes"], test["live_at_start_bytes"])
    return {
        "delta_bytes": test["peak_bytes"] - base["peak_bytes"],
        "same_place": (base["phase"], base["unit"]) == (test["phase"], test["unit"]),
        "category": category,
        "category_delta_bytes": d_category,
        "range": {"phase": phase, "unit": unit},
        "range_delta_bytes": d_range,
        "live_category": live,
        "live_delta_bytes": d_live,
    }


def difference_text(
    base_label: str, test_label: str, base: Mapping[str, Any], test: Mapping[str, Any]
) -> str:
    """One sentence on where two arms' peaks differ (the finding and the diff text)."""
    d = peak_difference(base, test)
    place = (
        f"both peak in {base['where']}"
        if d["same_place"]
        else f"{base_label} peaks in {base['where']}, {test_label} in {test['where']}"
    )
    rng = d["range"]
    parts = [place]
    if d["range_delta_bytes"]:
        what = where({"phase": rng["phase"], "unit": rng["unit"]})
        parts.append(
            f"the largest difference is in what {what} allocated and still holds at the peak "
            f"({_signed_bytes(d['range_delta_bytes'])}, {d['category'].replace('_', ' ')} "
            f"{_signed_bytes(d['category_delta_bytes'])})"
        )
    if d["live_delta_bytes"]:
        parts.append(
            f"live at the start: {d['live_category'].replace('_', ' ')} {_signed_bytes(d['live_delta_bytes'])}"
        )
    return "; ".join(parts)


def _signed_bytes(n: int) -> str:
    from fsdpbench.fmt import fmt_bytes

    return ("+" if n >= 0 else "−") + fmt_bytes(abs(n))
