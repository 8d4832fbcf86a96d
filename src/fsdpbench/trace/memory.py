"""Memory over a profiled step: the profilers' memory records as timelines of allocated bytes.

Sources:

- Kineto ``[memory]`` instant events (``profile_memory=True``): ``Bytes`` (signed) and ``Total
  Allocated`` per allocation and free, ``Device Type`` (0 = CPU, 1 = CUDA, ...). On a device the
  allocator's ``Total Allocated`` is absolute; on CPU the events count only allocations made since
  recording started, so the timeline there is ``live_at_start`` + the running sum of ``Bytes``
  (``fsdpbench.run.memory``) and ``absolute`` is False.
- Ascend text export (``ASCEND_PROFILER_OUTPUT``): ``memory_record.csv`` (allocated / reserved /
  active totals in MB per component: PTA = torch_npu's caching allocator, GE = graph engine, PTA+GE,
  APP = the whole process, reserved only), ``operator_memory.csv`` (one row per allocation with its
  operator, size, allocation and release times and the totals at both) and ``npu_module_mem.csv``
  (reserved MB per CANN module over time).
- Ascend db export (``ascend_pytorch_profiler_<rank>.db``): the same in tables ``MEMORY_RECORD``,
  ``OP_MEMORY`` and ``NPU_MODULE_MEM`` (bytes and ns; names through ``STRING_IDS``).

These readers give the timelines and their peaks; the phase and unit boundaries and the attribution
of the peak to them are in ``fsdpbench.analysis.rank.memory_timeline`` (Kineto, the worker's memory step).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fsdpbench.errors import InputError
from fsdpbench.trace.table import us_strings_to_ns

MB = 2**20
"""The Ascend exports' "MB" is MiB (their totals equal the allocator's bytes / 2**20)."""

CPU_DEVICE_TYPE = 0


@dataclasses.dataclass(frozen=True)
class MemoryTimeline:
    """Allocated (and, where recorded, reserved) bytes of one device over time."""

    source: str
    """``kineto``, ``memory_record.csv`` or ``MEMORY_RECORD``."""
    device: str
    ts_us: np.ndarray
    allocated: np.ndarray
    reserved: np.ndarray | None
    absolute: bool
    """False on CPU Kineto without ``live_at_start``: bytes are relative to the recording's start."""
    ts_ns: np.ndarray | None = None
    """The times as exact int64 ns (epoch clock) where the source writes them to the ns (the Ascend
    exports); ``ts_us`` as a double cannot hold an epoch time to the ns."""

    def peak(self) -> tuple[float, int]:
        """(time in µs, bytes) of the largest allocated figure; ``InputError`` when empty."""
        if self.allocated.size == 0:
            raise InputError(f"{self.source}: no allocated-memory records for {self.device}")
        i = int(np.argmax(self.allocated))
        return float(self.ts_us[i]), int(self.allocated[i])


def kineto_timeline(
    trace_events: Sequence[dict[str, Any]],
    device_type: int = CPU_DEVICE_TYPE,
    live_at_start: int | None = None,
) -> MemoryTimeline:
    """The ``[memory]`` events of ``device_type`` as a timeline (time order).

    CPU (``device_type`` 0): ``live_at_start`` (bytes live when recording started; None = 0 and
    ``absolute`` False) + the running sum of ``Bytes``. A device: its allocator's ``Total Allocated``
    and ``Total Reserved`` as recorded.
    """
    mem = [
        e
        for e in trace_events
        if e.get("name") == "[memory]" and (e.get("args") or {}).get("Device Type") == device_type
    ]
    mem.sort(key=lambda e: float(e["ts"]))
    ts = np.array([float(e["ts"]) for e in mem], dtype=np.float64)
    if device_type == CPU_DEVICE_TYPE:
        nbytes = np.array([int(e["args"]["Bytes"]) for e in mem], dtype=np.int64)
        allocated = np.cumsum(nbytes) + (live_at_start or 0)
        return MemoryTimeline("kineto", "CPU", ts, allocated, None, live_at_start is not None)
    allocated = np.array([int(e["args"].get("Total Allocated", 0)) for e in mem], dtype=np.int64)
    reserved = np.array([int(e["args"].get("Total Reserved", 0)) for e in mem], dtype=np.int64)
    return MemoryTimeline("kineto", f"device type {device_type}", ts, allocated, reserved, True)


def _read_csv(path: Path, columns: Sequence[str]) -> pd.DataFrame:
    """The export's cells as strings (times keep their ns digits), headers stripped."""
    try:
        frame = pd.read_csv(path, skipinitialspace=True, dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: cannot read ({exc}); is this a torch_npu text export?") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(
            f"{path}: no column {', '.join(missing)}; is this a torch_npu memory export (profile_memory=True)?"
        )
    return frame


def _num(col: pd.Series) -> np.ndarray:
    """Numbers from a column that may carry the exports' trailing tabs; blank → NaN."""
    return pd.to_numeric(
        col.astype(str).str.strip().replace({"": None, "nan": None}), errors="coerce"
    ).to_numpy(dtype=np.float64)


def _ns(col: pd.Series, path: Path, what: str) -> np.ndarray:
    """Decimal µs strings → exact int64 ns; blank → -1."""
    out = np.full(len(col), -1, dtype=np.int64)
    cells = col.astype(str).str.strip()
    filled = (cells != "").to_numpy()
    try:
        out[filled] = us_strings_to_ns(cells[filled].reset_index(drop=True))
    except (ValueError, OverflowError) as exc:
        raise InputError(f"{path}: column {what!r}: {exc}") from None
    return out


def _no_component(where: str, component: str, have: Sequence[str]) -> InputError:
    return InputError(
        f"{where}: no {component} rows (components: {', '.join(sorted(map(str, set(have))))}); "
        "PTA is torch_npu's allocator"
    )


def ascend_memory_record(output_dir: Path, component: str = "PTA") -> MemoryTimeline:
    """``memory_record.csv`` of one component (default PTA: torch_npu's allocator) in bytes, in time
    order (``ts_ns`` exact). Raises ``InputError`` for a component without allocated figures (APP)."""
    path = Path(output_dir) / "memory_record.csv"
    frame = _read_csv(path, ("Component", "Timestamp(us)", "Total Allocated(MB)", "Total Reserved(MB)"))
    components = frame["Component"].astype(str).str.strip()
    rows = frame[components == component]
    if rows.empty:
        raise _no_component(str(path), component, components.unique())
    ts_ns = _ns(rows["Timestamp(us)"], path, "Timestamp(us)")
    allocated = _num(rows["Total Allocated(MB)"])
    if np.isnan(allocated).any() or (ts_ns < 0).any():
        raise InputError(
            f"{path}: {component} rows without a time or an allocated figure (APP records reserved bytes "
            "only); pick a component with allocated bytes (PTA, GE, PTA+GE)"
        )
    order = np.argsort(ts_ns, kind="stable")
    alloc = np.rint(allocated * MB)[order].astype(np.int64)
    reserved = np.rint(np.nan_to_num(_num(rows["Total Reserved(MB)"]), nan=0.0) * MB)[order].astype(np.int64)
    device = str(rows["Device Type"].iloc[0]).strip() if "Device Type" in rows else "NPU"
    ts = _num(rows["Timestamp(us)"])[order]
    return MemoryTimeline("memory_record.csv", device, ts, alloc, reserved, True, ts_ns[order])


def ascend_operator_memory(output_dir: Path) -> pd.DataFrame:
    """``operator_memory.csv``: ``name``, ``size_bytes``, ``alloc_us``, ``release_us`` (NaN: not
    released in the window), the same as exact ns in ``alloc_ns``/``release_ns`` (-1: not released),
    ``alloc_total_allocated`` / ``release_total_allocated`` (bytes)."""
    path = Path(output_dir) / "operator_memory.csv"
    cols = ("Name", "Size(KB)", "Allocation Time(us)", "Release Time(us)", "Allocation Total Allocated(MB)")
    frame = _read_csv(path, cols)
    return pd.DataFrame(
        {
            "name": frame["Name"].astype(str).str.strip(),
            "size_bytes": np.rint(_num(frame["Size(KB)"]) * 1024),
            "alloc_us": _num(frame["Allocation Time(us)"]),
            "release_us": _num(frame["Release Time(us)"]),
            "alloc_ns": _ns(frame["Allocation Time(us)"], path, "Allocation Time(us)"),
            "release_ns": _ns(frame["Release Time(us)"], path, "Release Time(us)"),
            "alloc_total_allocated": np.rint(_num(frame["Allocation Total Allocated(MB)"]) * MB),
            "release_total_allocated": np.rint(_num(frame["Release Total Allocated(MB)"]) * MB)
            if "Release Total Allocated(MB)" in frame
            else np.nan,
        }
    )


def ascend_module_memory(output_dir: Path) -> pd.DataFrame:
    """``npu_module_mem.csv``: ``component``, ``ts_us``, ``reserved_bytes`` per CANN module."""
    path = Path(output_dir) / "npu_module_mem.csv"
    frame = _read_csv(path, ("Component", "Timestamp(us)", "Total Reserved(MB)"))
    return pd.DataFrame(
        {
            "component": frame["Component"].astype(str).str.strip(),
            "ts_us": _num(frame["Timestamp(us)"]),
            "reserved_bytes": np.rint(_num(frame["Total Reserved(MB)"]) * MB),
        }
    )


def _db_frames(db: Path) -> dict[str, pd.DataFrame]:
    from fsdpbench.trace.ascend_db import open_db

    with open_db(db) as d:
        wanted = [t for t in ("MEMORY_RECORD", "OP_MEMORY", "NPU_MODULE_MEM") if t in d.have]
        if not wanted:
            raise InputError(
                f"{db}: no MEMORY_RECORD, OP_MEMORY or NPU_MODULE_MEM table; profile with profile_memory=True"
            )
        strings = d.strings if "STRING_IDS" in d.have else pd.Series(dtype=object)
        frames = {t: d.query(f"SELECT * FROM {t}") for t in wanted}  # noqa: S608 - fixed names
    for name, col in (("MEMORY_RECORD", "component"), ("OP_MEMORY", "name")):
        if name in frames:
            frames[name][col] = frames[name][col].map(strings).fillna(frames[name][col].astype(str))
    return frames


def ascend_db_memory(db: Path, component: str = "PTA") -> tuple[MemoryTimeline, pd.DataFrame, pd.DataFrame]:
    """The db export's (MEMORY_RECORD timeline of ``component``, OP_MEMORY, NPU_MODULE_MEM), in the
    same units and columns as the CSV readers (bytes, µs)."""
    frames = _db_frames(Path(db))
    rec = frames.get("MEMORY_RECORD")
    if rec is None or rec.empty:
        raise InputError(f"{db}: MEMORY_RECORD is missing or empty")
    rows = rec[rec["component"] == component].sort_values("timestamp", kind="stable")
    if rows.empty:
        raise _no_component(f"{db} MEMORY_RECORD", component, rec["component"].unique())
    if rows["totalAllocated"].isna().any():
        raise InputError(
            f"{db} MEMORY_RECORD: {component} rows without an allocated figure (APP records reserved bytes "
            "only); pick a component with allocated bytes (PTA, GE, PTA+GE)"
        )
    timeline = MemoryTimeline(
        "MEMORY_RECORD",
        f"NPU:{int(rows['deviceId'].iloc[0])}",
        rows["timestamp"].to_numpy(dtype=np.float64) / 1e3,
        rows["totalAllocated"].to_numpy(dtype=np.int64),
        rows["totalReserved"].to_numpy(dtype=np.int64),
        True,
        rows["timestamp"].to_numpy(dtype=np.int64),
    )
    op = frames.get("OP_MEMORY", pd.DataFrame(columns=["name", "size", "allocationTime", "releaseTime"]))
    ops = pd.DataFrame(
        {
            "name": op["name"].astype(str),
            "size_bytes": pd.to_numeric(op["size"]).astype(float),
            "alloc_us": pd.to_numeric(op["allocationTime"]).astype(float) / 1e3,
            "release_us": pd.to_numeric(op["releaseTime"]).astype(float) / 1e3,
            "alloc_ns": pd.to_numeric(op["allocationTime"]).fillna(-1).astype(np.int64),
            "release_ns": pd.to_numeric(op["releaseTime"]).fillna(-1).astype(np.int64),
            "alloc_total_allocated": pd.to_numeric(op.get("allocationTotalAllocated")).astype(float),
            "release_total_allocated": pd.to_numeric(op.get("releaseTotalAllocated")).astype(float),
        }
    )
    mod = frames.get("NPU_MODULE_MEM", pd.DataFrame(columns=["moduleId", "timestampNs", "totalReserved"]))
    modules = pd.DataFrame(
        {
            "component": mod["moduleId"].astype(str),
            "ts_us": pd.to_numeric(mod["timestampNs"]).astype(float) / 1e3,
            "reserved_bytes": pd.to_numeric(mod["totalReserved"]).astype(float),
        }
    )
    return timeline, ops, modules
