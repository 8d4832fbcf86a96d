"""Memory timeline of a step recorded by torch_npu's profiler (``profile_memory=True``), with fsdpbench's ranges.

The Ascend export holds the torch_npu caching allocator's totals over time (``memory_record.csv`` /
``MEMORY_RECORD``, component ``PTA``), one row per allocation block with the operator that made it
(``operator_memory.csv`` / ``OP_MEMORY``) and the host ranges ``record_function`` opened (``trace_view.json``'s
``Python`` process / the db's ``PYTORCH_API``), all on one epoch clock. ``ascend_step_timeline`` joins them into
the ``memory_timeline`` object of docs/DATA.md (the Kineto one's fields, ``source`` ``ascend_text`` or
``ascend_db``): the allocated (and reserved) bytes over the step, the ranges, the peak's (phase, unit), and
the blocks ``operator_memory`` lists as live at the peak, by the range they were made in.

Times are read to the ns (text: decimal µs strings; db: integer ns) and are µs from the first fsdpbench
range in the result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from fsdpbench.analysis.rank.memory_timeline import PREFIX, range_fields, timeline_object
from fsdpbench.errors import InputError
from fsdpbench.trace import memory as tm
from fsdpbench.trace.table import us_strings_to_ns, us_to_ns

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
COMPONENT = "PTA"
"""torch_npu's caching allocator: the component whose allocated bytes are the torch tensors'."""
OTHER_LIVE = "other"
"""``live_at_start_bytes`` key: bytes live at the peak that neither a category known at the start nor a block
``operator_memory`` lists explains (made before the recording, or outside a listed operator; docs/memory.md)."""


@dataclasses.dataclass(frozen=True)
class AscendMemoryStep:
    """One rank's Ascend memory records in integer ns (epoch clock)."""

    source: str
    """``ascend_text`` or ``ascend_db``."""
    path: Path
    component: str
    ts_ns: np.ndarray
    allocated: np.ndarray
    reserved: np.ndarray
    blocks: pd.DataFrame
    """``name``, ``size_bytes``, ``alloc_ns``, ``release_ns`` (-1: not released in the window),
    ``alloc_total`` (the allocator's allocated bytes after the allocation), of every component."""
    ranges: list[tuple[str, int, int]]
    """fsdpbench's host ranges ``(name, start_ns, end_ns)``."""


def _trace_view_ranges(path: Path) -> list[tuple[str, int, int]]:
    """fsdpbench's ``record_function`` ranges: ``X`` events of the ``Python`` process named ``fsdpbench::…``."""
    if not path.is_file():
        return []
    try:
        events = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read ({exc}); the file is truncated or corrupt") from None
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    mine = [
        e
        for e in events
        if type(e) is dict and e.get("ph") == "X" and str(e.get("name", "")).startswith(PREFIX + "::")
    ]
    if not mine:
        return []
    try:
        start = us_strings_to_ns(pd.Series([str(e["ts"]) for e in mine], dtype=object))
        dur = us_to_ns(np.array([float(e.get("dur") or 0.0) for e in mine]))
    except (KeyError, ValueError, TypeError, OverflowError) as exc:
        raise InputError(f"{path}: an fsdpbench range has a bad 'ts' or 'dur' ({exc})") from None
    return [(str(e["name"]), int(s), int(s + d)) for e, s, d in zip(mine, start, dur, strict=True)]


def _blocks(ops: pd.DataFrame) -> pd.DataFrame:
    """``AscendMemoryStep.blocks`` from the operator-memory frame of ``fsdpbench.trace.memory``."""
    return pd.DataFrame(
        {
            "name": ops["name"].to_numpy(),
            "size_bytes": ops["size_bytes"].to_numpy(float),
            "alloc_ns": ops["alloc_ns"].to_numpy(np.int64),
            "release_ns": ops["release_ns"].to_numpy(np.int64),
            "alloc_total": ops["alloc_total_allocated"].to_numpy(float),
        }
    )


def _step(
    source: str,
    path: Path,
    component: str,
    record: tm.MemoryTimeline,
    ops: pd.DataFrame,
    ranges: list[tuple[str, int, int]],
) -> AscendMemoryStep:
    ts_ns = record.ts_ns if record.ts_ns is not None else us_to_ns(record.ts_us)  # the Ascend readers set it
    return AscendMemoryStep(
        source, path, component, ts_ns, record.allocated, record.reserved, _blocks(ops), ranges
    )


def read_text(output_dir: Path, component: str = COMPONENT) -> AscendMemoryStep:
    """The text export: ``memory_record.csv``, ``operator_memory.csv`` (``fsdpbench.trace.memory``'s
    readers) and ``trace_view.json``'s ranges."""
    record = tm.ascend_memory_record(output_dir, component)
    ops = tm.ascend_operator_memory(output_dir)
    ranges = _trace_view_ranges(output_dir / "trace_view.json")
    return _step("ascend_text", output_dir, component, record, ops, ranges)


def read_db(db: Path, component: str = COMPONENT) -> AscendMemoryStep:
    """The db export: ``MEMORY_RECORD``, ``OP_MEMORY`` (``fsdpbench.trace.memory``'s reader) and
    ``PYTORCH_API``'s ranges (names via ``STRING_IDS``)."""
    from fsdpbench.trace.ascend_db import open_db

    with open_db(db) as d:
        missing = [t for t in ("MEMORY_RECORD", "OP_MEMORY", "STRING_IDS") if t not in d.have]
        if missing:
            raise InputError(
                f"{db}: no table {', '.join(missing)}; profile with torch_npu.profiler(profile_memory=True)"
            )
        api = (
            d.query("SELECT startNs, endNs, name FROM PYTORCH_API")
            if "PYTORCH_API" in d.have
            else pd.DataFrame(columns=["startNs", "endNs", "name"])
        )
        names = d.names(api["name"])
    record, ops, _ = tm.ascend_db_memory(db, component)
    mine = names.str.startswith(PREFIX + "::").to_numpy()
    try:
        starts = pd.to_numeric(api["startNs"][mine]).astype(np.int64).to_numpy()
        ends = pd.to_numeric(api["endNs"][mine]).astype(np.int64).to_numpy()
    except (ValueError, TypeError) as exc:
        raise InputError(f"{db}: PYTORCH_API: not integer nanoseconds ({exc})") from None
    ranges = [(str(n), int(s), int(e)) for n, s, e in zip(names[mine], starts, ends, strict=True)]
    return _step("ascend_db", db, component, record, ops, ranges)


def read_export(folder: Path, component: str = COMPONENT, prefer: str = "text") -> AscendMemoryStep:
    """One rank's ``*_ascend_pt`` folder (or its ``ASCEND_PROFILER_OUTPUT``): the text export when it has
    ``memory_record.csv`` (``prefer="text"``), else the db export (``prefer="db"`` reverses the order)."""
    from fsdpbench.trace.ascend_db import find_db

    folder = Path(folder)
    out = folder if folder.name == OUTPUT_DIR else folder / OUTPUT_DIR
    text = (out / "memory_record.csv").is_file()
    db = find_db(out)
    if text and (prefer == "text" or db is None):
        return read_text(out, component)
    if db is not None:
        return read_db(db, component)
    raise InputError(
        f"{folder}: no {OUTPUT_DIR}/memory_record.csv or ascend_pytorch_profiler_<rank>.db; record the step "
        "with torch_npu.profiler(profile_memory=True) and parse it (torch_npu's analyse)"
    )


def component_blocks(step: AscendMemoryStep) -> pd.DataFrame:
    """The operator_memory blocks of ``step.component``: operator_memory lists every component's blocks
    (PTA's ``aten::``/``npu::`` operators, GE's ``cann::`` ones) without naming it; a block is the
    component's when one of its memory_record rows has the block's allocation time and allocated total."""
    records = set(zip(step.ts_ns.tolist(), step.allocated.tolist(), strict=True))
    b = step.blocks
    totals = np.rint(b["alloc_total"].fillna(-1).to_numpy(float)).astype(np.int64)
    own = [(t, v) in records for t, v in zip(b["alloc_ns"].tolist(), totals.tolist(), strict=True)]
    return b[np.asarray(own, dtype=bool)]


def ascend_step_timeline(
    step: AscendMemoryStep, live_at_start: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """The ``memory_timeline`` object of an Ascend export (docs/DATA.md; ``source`` ``ascend_text`` /
    ``ascend_db``).

    Allocated (and reserved) = ``step.component``'s totals (absolute: the allocator's own figures). The
    blocks live at the peak are ``operator_memory`` rows allocated at or before it and not released by
    then (``component_blocks``: the component's own), each counted under the range (innermost fsdpbench
    range, a collective's first) its allocation falls in. ``live_at_start_bytes``: the worker's categories
    when given, plus ``other`` = the rest of the peak (``OTHER_LIVE``); without categories, all of that rest
    is ``other``.
    """
    if step.allocated.size == 0:
        raise InputError(f"{step.path}: no {step.component} memory records")
    units, collectives = [], []
    for name, start, end in step.ranges:
        kind = range_fields(name)
        if kind is not None:
            (collectives if kind[0] else units).append({**kind[1], "start_ns": start, "end_ns": end})
    t0_ns = min([r["start_ns"] for r in units] or [int(step.ts_ns[0])])

    def rel(r: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in r.items() if not k.endswith("_ns")}
        return {**out, "start_us": (r["start_ns"] - t0_ns) / 1e3, "end_us": (r["end_ns"] - t0_ns) / 1e3}

    units = sorted((rel(r) for r in units), key=lambda r: r["start_us"])
    collectives = sorted((rel(r) for r in collectives), key=lambda r: r["start_us"])
    i_peak = int(np.argmax(step.allocated))
    t_peak_ns = int(step.ts_ns[i_peak])
    b = component_blocks(step)
    alloc, release = b["alloc_ns"].to_numpy(np.int64), b["release_ns"].to_numpy(np.int64)
    live_mask = (alloc >= 0) & (alloc <= t_peak_ns) & ((release < 0) | (release > t_peak_ns))
    live_blocks = [
        (int(size), (int(t) - t0_ns) / 1e3)
        for size, t in zip(b["size_bytes"].to_numpy()[live_mask], alloc[live_mask], strict=True)
    ]
    listed = sum(size for size, _ in live_blocks)
    live = {k: int(v) for k, v in (live_at_start or {}).items()}
    live[OTHER_LIVE] = int(step.allocated[i_peak]) - listed - sum(live.values())
    timeline = timeline_object(
        source=step.source,
        t_us=(step.ts_ns - t0_ns) / 1e3,
        allocated=step.allocated,
        reserved=step.reserved,
        units=units,
        collectives=collectives,
        live_at_start=live,
        live_allocations=live_blocks,
        t0=0.0,
        extra={"component": step.component, "n_events": int(step.allocated.size), "n_blocks": len(b)},
        peak_extra={"blocks_live": len(live_blocks)},
    )
    return timeline
