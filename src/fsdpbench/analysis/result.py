"""Result objects of the analysis: per step, per rank, across ranks; ``to_dict`` gives the
"Analysis" JSON of docs/DATA.md."""

from __future__ import annotations

import array
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdpbench.trace.cache import frame_to_plain, plain_to_frame

if TYPE_CHECKING:
    import pandas as pd

SCHEMA_VERSION = 1
FIT_EVENT_COLUMNS = ("type", "bytes", "start_ns", "end_ns")
"""The collective events' columns the per-call α–β fits read (``whatif.fit_events``), beside
``transfer_ns`` where the cross-rank split set it."""
# scalar metrics averaged / min / max across ranks
SCALARS = (
    "step_time_us",
    "overlap_ratio",
    "compute_us",
    "comm_us",
    "overlapped_us",
    "exposed_comm_us",
    "free_us",
    "carried_over_us",
    "kernel_time_us",
)


def _op_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """``op_stats``'s DataFrame from the rows ``StepMetrics.to_dict`` writes (same dtypes)."""
    import numpy as np
    import pandas as pd

    return pd.DataFrame(
        {
            "op_type": pd.Series([o["op_type"] for o in rows], dtype=object).astype(str),  # as op_stats
            "count": np.array([o["count"] for o in rows], dtype=np.int64),
            "total_us": np.array([o["total_us"] for o in rows], dtype=np.float64),
            "mean_us": np.array([o["mean_us"] for o in rows], dtype=np.float64),
        }
    )


def _collective_frame(cols: dict[str, list[Any]] | None) -> pd.DataFrame:
    """``collective_events``'s DataFrame from its columns as lists or arrays (None: an empty frame)."""
    import numpy as np
    import pandas as pd

    if cols is None:
        return pd.DataFrame()
    n = len(cols["type"])
    return pd.DataFrame(
        {
            "type": pd.Series(cols["type"], dtype=object).astype(str),  # as collective_events
            "bytes": np.array(cols["bytes"], dtype=np.float64),  # null (NaN when written) → NaN
            "start_ns": np.array(cols["start_ns"], dtype=np.int64),
            "end_ns": np.array(cols["end_ns"], dtype=np.int64),
            "group": pd.Series(cols.get("group", [None] * n), dtype=object),
            "seq": np.array(cols.get("seq", [-1] * n), dtype=np.int64),
            "dtype": pd.Series(cols.get("dtype", [None] * n), dtype=object),
            "in_bytes": np.array(cols.get("in_bytes", [None] * n), dtype=np.float64),
            "out_bytes": np.array(cols.get("out_bytes", [None] * n), dtype=np.float64),
            "mark_group": pd.Series(cols.get("mark_group", [None] * n), dtype=object),
            "mark_index": np.array(cols.get("mark_index", [-1] * n), dtype=np.int64),
            "unit": pd.Series(cols.get("unit", [None] * n), dtype=object),
            "phase": pd.Series(cols.get("phase", [None] * n), dtype=object),
            **(
                {"transfer_ns": np.array(cols["transfer_ns"], dtype=np.int64)}
                if "transfer_ns" in cols
                else {}
            ),
        }
    )


class _LazyFrame:
    """A dataclass field holding a DataFrame, or the plain rows/columns a result cache read, turned
    into the DataFrame on first access: a cached ``fsdpbench analyze`` never imports pandas."""

    def __init__(self, name: str, build: Any, plain: type) -> None:
        self.slot, self.build, self.plain = f"_{name}_value", build, plain

    @classmethod
    def install(cls, owner: type, name: str, build: Any, plain: type) -> None:
        """Put the descriptor on dataclass ``owner``'s field ``name`` (after the dataclass is made, so
        the field keeps its declared default and repr)."""
        setattr(owner, name, cls(name, build, plain))

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj.__dict__[self.slot]
        if value is None or isinstance(value, self.plain):
            value = obj.__dict__[self.slot] = self.build(value)
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.slot] = value

    def plain_value(self, obj: Any) -> Any:
        """What is stored: the plain rows/columns when not yet turned into a DataFrame."""
        return obj.__dict__[self.slot]


@dataclass
class StepMetrics:
    """The study's numbers for one window (a profiler step, or all profiled steps of a rank).

    Times in µs (floats from exact ns), ratios in 0–1, ``overlap_ratio`` None without communication;
    a ``sync`` count is None where the trace cannot record that task kind. ``free_us`` is window time
    when the device ran nothing at all; ``carried_over_us`` window time the device spent on other
    steps' work (device lagging the host); ``step_time_us`` = compute ∪ comm + carried over + free.
    """

    step: int | None
    step_time_us: float
    overlap_ratio: float | None
    compute_us: float
    comm_us: float
    overlapped_us: float
    exposed_comm_us: float
    free_us: float
    kernel_time_us: float
    collectives: dict[str, dict[str, Any]]
    op_stats: pd.DataFrame
    sync: dict[str, int | None]
    carried_over_us: float = 0.0

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        return {
            "step": self.step,
            "step_time_us": self.step_time_us,
            "overlap_ratio": self.overlap_ratio,
            "compute_us": self.compute_us,
            "comm_us": self.comm_us,
            "overlapped_us": self.overlapped_us,
            "exposed_comm_us": self.exposed_comm_us,
            "free_us": self.free_us,
            "carried_over_us": self.carried_over_us,
            "kernel_time_us": self.kernel_time_us,
            "collectives": self.collectives,
            "ops": self.ops(top),
            "sync": self.sync,
        }

    def ops(self, top: int | None = None) -> list[dict[str, Any]]:
        """The first ``top`` rows of ``op_stats`` (None: all) as dicts ``op_type, count, total_us,
        mean_us``, read without pandas when they came from a result cache."""
        plain = StepMetrics.__dict__["op_stats"].plain_value(self)
        if isinstance(plain, list):  # fresh dicts, as below: a caller may change what it gets
            return [dict(o) for o in (plain if top is None else plain[:top])]
        ops = self.op_stats if top is None else self.op_stats.head(top)
        return [
            {"op_type": str(o), "count": int(c), "total_us": float(t), "mean_us": float(m)}
            for o, c, t, m in zip(ops["op_type"], ops["count"], ops["total_us"], ops["mean_us"], strict=True)
        ]

    def step_fields(self) -> dict[str, Any]:
        """This object's constructor arguments (``op_stats`` as stored, not turned into a DataFrame)."""
        from dataclasses import fields

        out = {f.name: getattr(self, f.name) for f in fields(StepMetrics) if f.name != "op_stats"}
        return {**out, "op_stats": StepMetrics.__dict__["op_stats"].plain_value(self)}

    @staticmethod
    def _fields_from_dict(d: dict[str, Any]) -> dict[str, Any]:
        """The constructor arguments of a :class:`StepMetrics` from its ``to_dict()`` (all ops)."""
        return {
            **{k: d[k] for k in (*SCALARS, "step")},
            "collectives": d["collectives"],
            "op_stats": list(d["ops"]),  # a DataFrame on first use of op_stats
            "sync": d["sync"],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepMetrics:
        """The inverse of ``to_dict()`` (written with ``top=None``): equal numbers, op table included."""
        return cls(**cls._fields_from_dict(d))


_LazyFrame.install(StepMetrics, "op_stats", _op_frame, list)


@dataclass
class RankMetrics(StepMetrics):
    """One rank: the metrics over its profiled step(s), each step, and its tables.

    Attributes beyond :class:`StepMetrics`:
        rank, source, format, mode (``device`` or ``cpu``);
        steps: per profiler step; events: the rank's event table (see ``fsdpbench.trace.table``);
        device_span_ns: first device event start and last end (the rank's clock), or None;
        collective_events: DataFrame ``type, bytes, start_ns, end_ns, group, seq, dtype, in_bytes,
            out_bytes`` (one row per collective; group None and seq -1 where the trace does not say) and
            ``mark_group, mark_index, unit, phase`` from fsdpbench's ranges (analysis/waits.py
            ``rank_marks``; None/-1 without);
        exposed_comm_ns: ∪ communication minus ∪ compute as (starts, ends), for the wait/transfer split;
        groups: ``{name: {description, ranks, size}}`` of the process groups the trace names;
        world_size: the trace's ``distributedInfo.world_size`` (Kineto), None where it has none;
        by_group: per process group, ``{comm_us, exposed_us, count, bytes, algbw_gbps, collectives}``
            over the analysed step(s) (:mod:`fsdpbench.analysis.groups`; ``?``: group unknown);
        units: the unit × phase rows of the profiled step(s) (``analysis.attribution.unit_phase_rows``),
            None where they cannot be told (none of the sources of units in the trace);
        units_source: where the units' windows came from: ``fsdpbench ranges``, ``FSDP2 ranges``,
            ``autograd/optimizer ranges`` (phases only, unit ``(all)``: :mod:`fsdpbench.analysis.phase_ranges`)
            or ``none`` (``analysis.unit_ranges.find_ranges``);
        prefetch: FSDP2's prefetch edges ``[{pass, unit, target, start_us}]`` in issue order
            (``analysis.attribution.prefetches``), None where the trace has no FSDP2 ranges;
        cross_check: the profiler's own step numbers when it wrote them (Ascend), else None;
        orphan_events, orphan_us, orphan_share: device work launched before the trace begins (its launch
        is not in the trace): count, Σ duration, and share of the rank's Σ device-event time. It is
        left out of every other number, as HTA leaves it out.
    """

    rank: int = 0
    source: str = ""
    format: str = ""
    mode: str = "device"
    steps: list[StepMetrics] = field(default_factory=list)
    collective_events: pd.DataFrame = field(default=None, repr=False)  # type: ignore[assignment]
    cross_check: pd.DataFrame | None = field(default=None, repr=False)
    device_span_ns: tuple[int, int] | None = None
    orphan_events: int = 0
    orphan_us: float = 0.0
    orphan_share: float | None = None
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    world_size: int | None = None
    by_group: dict[str, dict[str, Any]] = field(default_factory=dict)
    exposed_comm_ns: Any = field(default=None, repr=False)
    """(starts, ends), int64 arrays or lists (from a result cache): ∪ communication minus ∪ compute (for
    the wait/transfer split)."""
    units: list[dict[str, Any]] | None = None
    units_source: str = "none"
    prefetch: list[dict[str, Any]] | None = None
    _events: Any = field(default=None, repr=False)  # the EventTable, or its DataFrame once asked for

    @property
    def events(self) -> pd.DataFrame:
        """The rank's event table as a DataFrame. Ranks analysed in worker processes do not ship it
        back (it is the bulk of the memory); it is read again from ``source`` on first use."""
        if self._events is None:
            from fsdpbench.trace import Source, read_rank

            self._events = read_rank(Source(Path(self.source), self.format)).table
        if not hasattr(self._events, "columns"):  # an EventTable: made a DataFrame once
            self._events = self._events.to_frame()
        return self._events

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        d = {
            "rank": self.rank,
            **super().to_dict(top),
            "orphan_events": self.orphan_events,
            "orphan_us": self.orphan_us,
            "orphan_share": self.orphan_share,
            "groups": self.groups,
            "world_size": self.world_size,
            "by_group": self.by_group,
            "units": self.units,
            "units_source": self.units_source,
            "prefetch": self.prefetch,
        }
        d["steps"] = [s.to_dict(top) for s in self.steps]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], format: str = "") -> RankMetrics:
        """A rank of the Analysis JSON (``to_dict()``) as typed metrics, for readers of analysis.json (the
        report). What the JSON does not hold stays unset: ``source``, ``mode``, ``device_span_ns``, the
        cross-check and event tables, and the collective events unless analysis.json kept their fit
        columns (empty, or None); ``format`` is the Analysis'.
        A metric the JSON leaves out is None (as a report shows it), unlike :meth:`from_cache`, which
        refuses an incomplete cache."""
        return cls(
            **_json_step_fields(d),
            rank=d.get("rank", 0),
            format=format,
            steps=[StepMetrics(**_json_step_fields(s)) for s in d.get("steps") or []],
            orphan_events=d.get("orphan_events", 0),
            orphan_us=d.get("orphan_us", 0.0),
            orphan_share=d.get("orphan_share"),
            groups=d.get("groups") or {},
            world_size=d.get("world_size"),
            by_group=d.get("by_group") or {},
            units=d.get("units"),
            units_source=d.get("units_source") or "none",
            prefetch=d.get("prefetch"),
            # analysis.json's fit columns (``fit_event_columns``): a DataFrame on first use
            collective_events=events if isinstance(events := d.get("collective_events"), dict) else None,
        )

    def set_transfer_ns(self, split: dict[int, tuple[float, float]]) -> None:
        """Add ``collective_events``' ``transfer_ns`` column: each collective's transfer time (ns) from the
        cross-rank split ``{row: (wait µs, transfer µs)}``; the whole duration where a row has none (the
        further kernels of a coalesced collective). The α–β fits use it (docs/attribution.md)."""
        ce = self.collective_columns()
        start, end = list(ce["start_ns"]), list(ce["end_ns"])
        transfer = [int(e) - int(s) for s, e in zip(start, end, strict=True)]
        for j, (_, t_us) in split.items():
            transfer[j] = round(t_us * 1000.0)
        self.set_transfer_column(transfer)

    def set_transfer_column(self, transfer: Sequence[int]) -> None:
        """Set ``collective_events``' ``transfer_ns`` column to ``transfer`` (as :meth:`set_transfer_ns`
        computes it; a list or ``array.array`` in a cache's columns, an int64 array in a DataFrame)."""
        ce = self.collective_columns()
        if isinstance(ce, dict):
            ce["transfer_ns"] = transfer
        else:
            import numpy as np

            ce["transfer_ns"] = np.asarray(transfer, dtype=np.int64)
        # per type Σ transfer time beside the Σ durations (``time_us``): the aggregate α–β fits use it
        per_type: dict[str, int] = {}
        for kind, t_ns in zip(ce["type"], transfer, strict=True):
            per_type[str(kind)] = per_type.get(str(kind), 0) + int(t_ns)
        self.collectives = {
            kind: {**row, "transfer_us": per_type[kind] / 1000.0} if kind in per_type else row
            for kind, row in self.collectives.items()
        }

    def collective_columns(self) -> Any:
        """``collective_events`` as stored: the DataFrame, or the columns (``type, bytes, start_ns,
        end_ns`` as lists) a result cache read, without importing pandas; both index by column name."""
        ce = RankMetrics.__dict__["collective_events"].plain_value(self)
        return self.collective_events if ce is None else ce

    def fit_event_columns(self) -> dict[str, list[Any]]:
        """The collective events' ``FIT_EVENT_COLUMNS`` (and ``transfer_ns`` where set) as JSON lists: all
        the per-call α–β fits read, so that a stored analysis gives the same fits as the traces."""
        ce = self.collective_columns()
        names = [*FIT_EVENT_COLUMNS, *(["transfer_ns"] if "transfer_ns" in ce else [])]
        if not all(c in ce for c in FIT_EVENT_COLUMNS):  # no collectives: an empty frame without columns
            return {c: [] for c in FIT_EVENT_COLUMNS}
        out: dict[str, list[Any]] = {}
        for c in names:
            values = ce[c]
            values = values.tolist() if hasattr(values, "tolist") else list(values)
            # unknown sizes: NaN in a frame, None in a cache's columns; null in JSON either way
            out[c] = [None if v is None or v != v else v for v in values] if c == "bytes" else values
        return out

    def cross_check_columns(self) -> dict[str, Any] | None:
        """``cross_check`` as ``{"columns": {name: list}, "dtypes": …}`` (None without one), read
        without pandas when it came from a result cache."""
        plain = RankMetrics.__dict__["cross_check"].plain_value(self)
        return plain if plain is None or isinstance(plain, dict) else frame_to_plain(plain)

    def to_cache(self) -> dict[str, Any]:
        """``to_dict()`` with every op, plus what the Analysis JSON leaves out but :func:`from_cache`
        needs (source, format, mode, device span, collective events as columns, the profiler's
        cross-check table as columns)."""
        ce = RankMetrics.__dict__["collective_events"].plain_value(self)
        if isinstance(ce, dict):
            ce = {c: v.tolist() if hasattr(v, "tolist") else list(v) for c, v in ce.items()}
        else:
            ce = self.collective_events
            ce = {c: ce[c].tolist() for c in ce.columns}
        for c, unset in _MARK_UNSET.items():  # without fsdpbench's ranges (GPU traces): left out, not stored
            if c in ce and all(v is unset or v == unset for v in ce[c]):
                del ce[c]
        return {
            **self.to_dict(None),
            "source": self.source,
            "format": self.format,
            "mode": self.mode,
            "device_span_ns": None if self.device_span_ns is None else list(self.device_span_ns),
            "collective_events": ce,
            "cross_check": self.cross_check_columns(),
            "exposed_comm_ns": None if self.exposed_comm_ns is None else len(self.exposed_comm_ns[0]),
        }

    def exposed_bytes(self) -> bytes:
        """``exposed_comm_ns`` as the bytes a result cache stores after its JSON (:meth:`to_cache` gives
        the interval count): the starts, then the ends, as little-endian int64 (empty: None)."""
        pair = self.exposed_comm_ns
        return b"" if pair is None else int64_bytes(list(pair))

    @classmethod
    def from_cache(cls, d: dict[str, Any], tail: bytes = b"") -> RankMetrics:
        """The inverse of :meth:`to_cache` and :meth:`exposed_bytes` (``tail``), the exposed intervals
        decoded on first use (a result taken from the cross-rank cache never needs them); the event
        table is read again on first use of ``events``.

        Raises:
            ValueError: ``tail`` does not hold the intervals the JSON counts.
        """
        n = d.get("exposed_comm_ns")
        if n is not None and len(tail) != 16 * n:
            raise ValueError(f"{len(tail)} bytes of exposed intervals, {16 * n} expected")
        ce = d["collective_events"] or None
        span = d["device_span_ns"]
        return cls(
            **StepMetrics._fields_from_dict(d),
            rank=d["rank"],
            source=d["source"],
            format=d["format"],
            mode=d["mode"],
            steps=[StepMetrics.from_dict(s) for s in d["steps"]],
            collective_events=ce,  # a DataFrame on first use
            cross_check=d.get("cross_check"),  # likewise
            device_span_ns=None if span is None else (span[0], span[1]),
            orphan_events=d["orphan_events"],
            orphan_us=d["orphan_us"],
            orphan_share=d["orphan_share"],
            groups=d["groups"],
            world_size=d.get("world_size"),
            by_group=d.get("by_group") or {},
            exposed_comm_ns=None if n is None else _PackedIntervals(n, tail),
            units=d.get("units"),
            units_source=d.get("units_source") or "none",
            prefetch=d.get("prefetch"),
        )


def _json_step_fields(d: dict[str, Any]) -> dict[str, Any]:
    """:class:`StepMetrics`' constructor arguments from an Analysis JSON step or rank; what it leaves out
    is None (a metric) or empty (a table)."""
    return {
        **{k: d.get(k) for k in (*SCALARS, "step")},
        "collectives": d.get("collectives") or {},
        "op_stats": list(d.get("ops") or []),  # a DataFrame on first use of op_stats
        "sync": d.get("sync") or {},
    }


_LazyFrame.install(RankMetrics, "collective_events", _collective_frame, dict)
_LazyFrame.install(RankMetrics, "cross_check", plain_to_frame, dict)


def int64_bytes(columns: list[Any]) -> bytes:
    """``columns`` (sequences or arrays of ints) one after the other as little-endian int64 bytes (what a
    cache stores after its JSON, read back by :func:`int64_columns` without numpy)."""
    return b"".join(_le(array.array("q", _ints(c))).tobytes() for c in columns)


def int64_columns(data: bytes, counts: list[int | None]) -> list[array.array | None]:
    """The inverse of :func:`int64_bytes`: ``counts[i]`` values for column i (None: no column there).

    Raises:
        ValueError: ``data`` does not hold exactly the values ``counts`` says.
    """
    if 8 * sum(c for c in counts if c is not None) != len(data):
        raise ValueError(f"{len(data)} bytes for columns of {counts} int64 values")
    out: list[array.array | None] = []
    pos = 0
    for c in counts:
        if c is None:
            out.append(None)
            continue
        arr = array.array("q")
        arr.frombytes(data[pos : pos + 8 * c])
        out.append(_le(arr))
        pos += 8 * c
    return out


_MARK_UNSET = {"mark_group": None, "mark_index": -1, "unit": None, "phase": None}
"""``rank_marks``' columns and their value where a collective has none: a cache leaves out a column
that holds only that value, and its reader (``_collective_frame``, analysis/waits.py) fills it in again."""


def _ints(values: Any) -> Any:
    return values.tolist() if hasattr(values, "tolist") else values


def _le(arr: array.array) -> array.array:
    """``arr`` in little-endian byte order (in place)."""
    if sys.byteorder != "little":
        arr.byteswap()
    return arr


class _PackedIntervals:
    """``n`` intervals as :meth:`RankMetrics.exposed_bytes` wrote them, not yet decoded."""

    def __init__(self, n: int, data: bytes) -> None:
        self.n, self.data = n, data


def _intervals(packed: _PackedIntervals | None) -> Any:
    """(starts, ends) as ``array.array('q')`` from :class:`_PackedIntervals`."""
    if packed is None:
        return None
    starts, ends = int64_columns(packed.data, [packed.n, packed.n])
    return starts, ends


_LazyFrame.install(RankMetrics, "exposed_comm_ns", _intervals, _PackedIntervals)


def _stat(values: list[float | None], how: str) -> float | None:
    """``mean``, ``min`` or ``max`` of the values that are not None (None when there are none); plain
    Python, so that a fully cached analysis never imports numpy. The mean adds in order, as numpy
    does below 8 values (above, numpy's pairwise sum may differ in the last bit)."""
    v = [float(x) for x in values if x is not None]
    if not v:
        return None
    if any(x != x for x in v):  # NaN wins, as in numpy
        return float("nan")
    return sum(v) / len(v) if how == "mean" else (min(v) if how == "min" else max(v))


@dataclass
class Analysis:
    """All ranks of one profile set (one arm).

    Attributes:
        sources: the paths given; format: ``kineto`` or ``ascend``; ranks: per rank, by rank id;
        warnings: everything a reader of the numbers should know;
        collective_skew_us: median lateness of each rank at collectives (µs);
        stragglers: ``[{rank, skew_us}]``, latest first;
        process_groups: ``{group: {kind, ranks, rule}}``: shard / replicate / world / other / unknown
            (:func:`fsdpbench.analysis.groups.group_kinds`).
    """

    sources: list[str]
    format: str
    ranks: list[RankMetrics]
    warnings: list[str] = field(default_factory=list)
    collective_skew_us: dict[int, float] = field(default_factory=dict)
    stragglers: list[dict[str, Any]] = field(default_factory=list)
    top: int | None = None
    process_groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    waits: dict[str, Any] = field(default_factory=dict)
    """Waiting vs transferring across ranks (analysis/waits.py); empty with one rank."""

    @property
    def mean(self) -> dict[str, float | None]:
        """Mean over ranks of each scalar metric (ranks where it is null are left out)."""
        return {k: _stat([getattr(r, k) for r in self.ranks], "mean") for k in SCALARS}

    @property
    def slowest_rank(self) -> int | None:
        if not self.ranks:
            return None
        return max(self.ranks, key=lambda r: r.step_time_us).rank

    def across_ranks(self) -> dict[str, Any]:
        return {
            "min": {k: _stat([getattr(r, k) for r in self.ranks], "min") for k in SCALARS},
            "max": {k: _stat([getattr(r, k) for r in self.ranks], "max") for k in SCALARS},
            "slowest_rank": self.slowest_rank,
            "stragglers": self.stragglers,
            "collective_skew_us": {str(k): v for k, v in self.collective_skew_us.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Analysis:
        """The "Analysis" JSON object of docs/DATA.md (one arm of analysis.json) as typed objects
        (:meth:`RankMetrics.from_dict`); ``mean`` and ``across_ranks``' statistics are computed again
        from the ranks. ``to_dict()`` gives ``d`` back when it was written with every op (``top=None``).

        Raises:
            ValueError: ``d`` is not an Analysis JSON object of this schema version.
        """
        if not isinstance(d, dict) or d.get("schema_version") != SCHEMA_VERSION:
            version = d.get("schema_version") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"not an Analysis JSON object of schema_version {SCHEMA_VERSION} ({version!r})")
        across = d.get("across_ranks") or {}
        fmt = d.get("format") or ""
        return cls(
            sources=list(d.get("sources") or []),
            format=fmt,
            ranks=[RankMetrics.from_dict(r, fmt) for r in d["ranks"]],
            warnings=list(d.get("warnings") or []),
            collective_skew_us={int(k): v for k, v in (across.get("collective_skew_us") or {}).items()},
            stragglers=list(across.get("stragglers") or []),
            process_groups=d.get("process_groups") or {},
            waits=d.get("waits") or {},
        )

    def to_dict(self, fit_events: bool = False) -> dict[str, Any]:
        """The "Analysis" JSON object of docs/DATA.md; with ``fit_events`` each rank also carries
        ``collective_events`` (:meth:`RankMetrics.fit_event_columns`), as analysis.json stores it."""
        ranks = [r.to_dict(self.top) for r in self.ranks]
        if fit_events:
            for d, r in zip(ranks, self.ranks, strict=True):
                d["collective_events"] = r.fit_event_columns()
        return {
            "schema_version": SCHEMA_VERSION,
            "sources": self.sources,
            "format": self.format,
            "warnings": self.warnings,
            "ranks": ranks,
            "mean": self.mean,
            "across_ranks": self.across_ranks(),
            "process_groups": self.process_groups,
            "waits": self.waits,
        }
