"""Result objects of the analysis: per step, per rank, across ranks, and the Analysis JSON's one encode
and decode (docs/DATA.md).

``StepMetrics`` and ``RankMetrics`` derive from the file's records (analysis/output/result_records.py), so each
metric is declared once there; they add the tables (DataFrames built on first use from what a result cache
or a file read). ``Analysis.record`` / ``Analysis.from_record`` turn a whole analysis into its record and
back (``result_records.to_record`` / ``from_record``, generic over the fields); :func:`encode_analysis`,
:func:`decode_analysis` (``analyze --json``) and :func:`encode_analysis_file`, :func:`decode_analysis_file`
(a run folder's ``analysis.json``) write and read the files, with errors naming the file and the field.
"""

from __future__ import annotations

import array
import dataclasses
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from fsdpbench.analysis.output.result_records import (
    SCHEMA_VERSION,
    AcrossRanks,
    AnalysisRecord,
    RankCacheRecord,
    RankRecord,
    RankWithEvents,
    StepRecord,
    from_record,
    to_record,
)
from fsdpbench.errors import InputError
from fsdpbench.records import JSON_OPTIONS, convert, decode
from fsdpbench.trace.cache import frame_to_plain, plain_to_frame

if TYPE_CHECKING:
    import pandas as pd

R = TypeVar("R", bound=RankRecord)
__all__ = ["SCHEMA_VERSION", "Analysis", "RankMetrics", "StepMetrics"]
FIT_EVENT_COLUMNS = ("type", "bytes", "start_ns", "end_ns")
"""The collective events' columns the per-call α–β fits read (``whatif.fit_events``), beside
``transfer_ns`` where the cross-rank split set it."""
SCALARS = tuple(f.name for f in dataclasses.fields(StepRecord) if str(f.type).startswith("float"))
"""The scalar metrics of a window (averaged, min and max across ranks): the float fields of ``StepRecord``,
in its order."""


def _op_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """``op_stats``'s DataFrame from the ``ops`` rows (dtypes as ``analysis.rank.ops.op_stats`` gives them)."""
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
            "start_ns": _ns(cols["start_ns"]),
            "end_ns": _ns(cols["end_ns"]),
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


def _ns(values: Any) -> Any:
    """A time column as int64 ns, or as floats where a file gave fractions (kept: truncating them
    would change the per-call fits of a hand-made analysis.json)."""
    import numpy as np

    arr = np.asarray(values)
    return arr if arr.dtype.kind == "f" and arr.size else arr.astype(np.int64)


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


class _OpRows:
    """``StepMetrics.ops``: the op table's rows (:class:`OpRow` dicts, largest first), stored as given;
    once ``op_stats`` was asked for, the DataFrame is stored and the rows are read from it (so a change
    to the DataFrame shows in them). A cached ``fsdpbench analyze`` never imports pandas."""

    slot = "_ops_value"

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj.__dict__[self.slot]
        if isinstance(value, list):
            return value
        return [
            {"op_type": str(o), "count": int(c), "total_us": float(t), "mean_us": float(m)}
            for o, c, t, m in zip(
                value["op_type"], value["count"], value["total_us"], value["mean_us"], strict=True
            )
        ]

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.slot] = value


@dataclass(kw_only=True)
class StepMetrics(StepRecord):
    """The study's numbers for one window (a profiler step, or all profiled steps of a rank): the fields
    of :class:`~fsdpbench.analysis.output.result_records.StepRecord`, which also is its JSON object.

    Times in µs (floats from exact ns), ratios in 0–1, ``overlap_ratio`` None without communication;
    a ``sync`` count is None where the trace cannot record that task kind. ``free_us`` is window time
    when the device ran nothing at all; ``carried_over_us`` window time the device spent on other
    steps' work (device lagging the host); ``step_time_us`` = compute ∪ comm + carried over + free.
    ``ops`` are the op table's rows; ``op_stats`` the same as a DataFrame.
    """

    @property
    def op_stats(self) -> pd.DataFrame:
        """``ops`` as a DataFrame ``op_type, count, total_us, mean_us`` (built on first use, then kept)."""
        value = self.__dict__[_OpRows.slot]
        if isinstance(value, list):
            value = self.__dict__[_OpRows.slot] = _op_frame(value)
        return value


StepMetrics.ops = _OpRows()  # type: ignore[assignment]  # after the dataclass: the field stays required


@dataclass(kw_only=True)
class RankMetrics(StepMetrics, RankRecord):
    """One rank: the fields of :class:`~fsdpbench.analysis.output.result_records.RankRecord` (its JSON object:
    the metrics over its profiled step(s), each step, its groups and units) and its tables.

    Attributes beyond the record:
        source, format, mode (``device`` or ``cpu``); events: the rank's event table (see
        ``fsdpbench.trace.table``);
        device_span_ns: first device event start and last end (the rank's clock), or None;
        collective_events: DataFrame ``type, bytes, start_ns, end_ns, group, seq, dtype, in_bytes,
            out_bytes`` (one row per collective; group None and seq -1 where the trace does not say) and
            ``mark_group, mark_index, unit, phase`` from fsdpbench's ranges (analysis/crossrank/waits.py
            ``rank_marks``; None/-1 without);
        exposed_comm_ns: ∪ communication minus ∪ compute as (starts, ends), for the wait/transfer split;
        cross_check: the profiler's own step numbers when it wrote them (Ascend), else None.

    The record's fields (docs/DATA.md): groups ``{name: {description, ranks, size}}`` of the process
    groups the trace names; world_size: the trace's ``distributedInfo.world_size`` (Kineto), None where it
    has none; by_group: per process group, ``{comm_us, exposed_us, count, bytes, algbw_gbps,
    collectives}`` (:mod:`fsdpbench.analysis.crossrank.groups`; ``?``: group unknown); units: the unit × phase rows
    (``analysis.rank.attribution.unit_phase_rows``), None where they cannot be told; units_source: ``fsdpbench
    ranges``, ``FSDP2 ranges``, ``autograd/optimizer ranges`` or ``none``
    (``analysis.rank.unit_ranges.find_ranges``); prefetch: FSDP2's prefetch edges ``[{pass, unit, target,
    start_us}]`` in issue order, None without FSDP2 ranges; orphan_events, orphan_us, orphan_share: device
    work launched before the trace begins (count, Σ duration, share of the rank's Σ device-event time),
    left out of every other number, as HTA leaves it out.
    """

    source: str = ""
    format: str = ""
    mode: str = "device"
    collective_events: pd.DataFrame = field(default=None, repr=False)  # type: ignore[assignment]
    cross_check: pd.DataFrame | None = field(default=None, repr=False)
    device_span_ns: tuple[int, int] | None = None
    exposed_comm_ns: Any = field(default=None, repr=False)
    """(starts, ends), int64 arrays or lists (from a result cache): ∪ communication minus ∪ compute (for
    the wait/transfer split)."""
    _events: Any = field(default=None, repr=False)  # the EventTable, or its DataFrame once asked for
    replay_graph: Any = field(default=None, repr=False)
    """The rank's part of the step's graph (:class:`fsdpbench.analysis.crossrank.replay_graph.RankGraph`), built
    where the rank was measured; None from a result cache (the replay builds it again from the trace), and once
    the replay has joined it (the joined graph holds its tasks and edges)."""

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

    def record(self, top: int | None = None, record: type[R] = RankRecord, **given: Any) -> R:  # type: ignore[assignment]
        """This rank as a ``record`` (:class:`RankRecord`, or a subclass with ``given`` for its further
        fields), each window's ops cut to the ``top`` first (None: all)."""
        return to_record(
            self,
            record,
            ops=self.ops[:top],
            steps=[to_record(s, StepRecord, ops=s.ops[:top]) for s in self.steps],
            **given,
        )

    @classmethod
    def from_record(cls, rec: RankRecord, **given: Any) -> RankMetrics:
        """The inverse of :meth:`record`: what the record does not hold (the event tables, ``source``…)
        stays unset unless ``given``; a record's collective-event columns become the DataFrame on first use."""
        steps = [from_record(s, StepMetrics) for s in rec.steps]
        return from_record(rec, cls, steps=steps, **given)

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

    def cache_record(self) -> RankCacheRecord:
        """This rank as its result cache stores it (:class:`RankCacheRecord`): every op, every
        collective-event column (those of fsdpbench's marks left out while unset), the cross-check table
        as columns, and the number of exposed intervals (their bytes: :meth:`exposed_bytes`)."""
        ce = RankMetrics.__dict__["collective_events"].plain_value(self)
        if isinstance(ce, dict):
            ce = {c: v.tolist() if hasattr(v, "tolist") else list(v) for c, v in ce.items()}
        else:
            ce = self.collective_events
            ce = {c: ce[c].tolist() for c in ce.columns}
        for c, unset in _MARK_UNSET.items():  # without fsdpbench's ranges (GPU traces): left out, not stored
            if c in ce and all(v is unset or v == unset for v in ce[c]):
                del ce[c]
        return self.record(
            None,
            RankCacheRecord,
            collective_events=ce,
            cross_check=self.cross_check_columns(),
            exposed_comm_ns=None if self.exposed_comm_ns is None else len(self.exposed_comm_ns[0]),
        )

    def exposed_bytes(self) -> bytes:
        """``exposed_comm_ns`` as the bytes a result cache stores after its JSON (:meth:`cache_record`
        gives the interval count): the starts, then the ends, as little-endian int64 (empty: None)."""
        pair = self.exposed_comm_ns
        return b"" if pair is None else int64_bytes(list(pair))

    @classmethod
    def from_cache_record(cls, rec: RankCacheRecord, tail: bytes = b"") -> RankMetrics:
        """The inverse of :meth:`cache_record` and :meth:`exposed_bytes` (``tail``), the exposed
        intervals decoded on first use (a result taken from the cross-rank cache never needs them); the
        tables are built on first use, the event table read again on first use of ``events``.

        Raises:
            ValueError: ``tail`` does not hold the intervals the record counts.
        """
        n = rec.exposed_comm_ns
        if n is not None and len(tail) != 16 * n:
            raise ValueError(f"{len(tail)} bytes of exposed intervals, {16 * n} expected")
        return cls.from_record(
            rec,
            collective_events=rec.collective_events or None,
            exposed_comm_ns=None if n is None else _PackedIntervals(n, tail),
        )


RankMetrics._keys = tuple(f.name for f in dataclasses.fields(RankRecord))  # to_dict: the rank's JSON object
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
that holds only that value, and its reader (``_collective_frame``, analysis/crossrank/waits.py) fills it in again."""


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
            (:func:`fsdpbench.analysis.crossrank.groups.group_kinds`).
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
    """Waiting vs transferring across ranks (analysis/crossrank/waits.py); empty with one rank."""
    replay: dict[str, Any] | None = None
    """The step replay (analysis/crossrank/replay.py, docs/replay.md): None until asked for, or when the traces lack
    what its graph needs (``replay_note`` says why)."""
    replay_note: str | None = None
    compact_ranks: int = 0
    """How many ranks came from their compact result (analysis/rank_result.py) rather than a trace or
    cache; not in the JSON, which is the same either way."""

    @property
    def mean(self) -> dict[str, float | None]:
        """Mean over ranks of each scalar metric (ranks where it is null are left out)."""
        return {k: _stat([getattr(r, k) for r in self.ranks], "mean") for k in SCALARS}

    @property
    def slowest_rank(self) -> int | None:
        if not self.ranks:
            return None
        return max(self.ranks, key=lambda r: r.step_time_us).rank

    def across_ranks(self) -> AcrossRanks:
        """``min``/``max`` of each scalar across ranks, the slowest rank, stragglers and skews."""
        return AcrossRanks(
            min={k: _stat([getattr(r, k) for r in self.ranks], "min") for k in SCALARS},
            max={k: _stat([getattr(r, k) for r in self.ranks], "max") for k in SCALARS},
            slowest_rank=self.slowest_rank,
            stragglers=self.stragglers,
            collective_skew_us={str(k): v for k, v in self.collective_skew_us.items()},
        )

    def record(self, fit_events: bool = False) -> AnalysisRecord:
        """The Analysis JSON of docs/DATA.md as its record (``.to_dict()``: the JSON object); each rank's
        ops cut to ``top``; with ``fit_events`` each rank also carries its collective events' fit columns
        (:meth:`RankMetrics.fit_event_columns`), as analysis.json stores it."""
        ranks: list[Any] = [
            r.record(self.top, RankWithEvents, collective_events=r.fit_event_columns())
            if fit_events
            else r.record(self.top)
            for r in self.ranks
        ]
        return to_record(
            self, AnalysisRecord, schema_version=SCHEMA_VERSION, ranks=ranks, across_ranks=self.across_ranks()
        )

    @classmethod
    def from_record(cls, rec: AnalysisRecord) -> Analysis:
        """The inverse of :meth:`record`: ``mean`` and ``across_ranks``' statistics are computed again from
        the ranks; what a rank's record does not hold (``source``, the event tables) stays unset, its
        collective events are the fit columns analysis.json kept (None without).

        Raises:
            InputError: ``rec`` is of another schema version.
        """
        problem = _problem(rec)
        if problem:
            raise InputError(problem)
        return from_record(
            rec,
            cls,
            ranks=[RankMetrics.from_record(r, format=rec.format) for r in rec.ranks],
            collective_skew_us={
                int(k): v for k, v in (rec.across_ranks.get("collective_skew_us") or {}).items()
            },
            stragglers=rec.across_ranks.get("stragglers") or [],
        )


def _problem(rec: AnalysisRecord) -> str | None:
    """What msgspec cannot check of an Analysis record, as ``$.path: why`` (None when it is sound): its
    schema version, and that each rank's collective-event columns are of one length."""
    if rec.schema_version != SCHEMA_VERSION:
        return (
            f"$.schema_version is {rec.schema_version}: this fsdpbench reads {SCHEMA_VERSION}; "
            "analyze the profiles again with this version"
        )
    for i, rank in enumerate(rec.ranks):
        lengths = {c: len(v) for c, v in (rank.collective_events or {}).items()}
        if len(set(lengths.values())) > 1:
            return f"$.ranks[{i}].collective_events: columns of different lengths {lengths}"
    return None


def encode_analysis(res: Analysis) -> bytes:
    """The Analysis JSON of ``res`` as ``fsdpbench analyze --json`` writes it (indented)."""
    return orjson.dumps(res.record(), option=JSON_OPTIONS)


def encode_analysis_file(arms: Mapping[str, Analysis | AnalysisRecord]) -> bytes:
    """A run folder's ``analysis.json``: arm → its Analysis JSON with the ranks' collective events
    (an :class:`Analysis` is recorded with them; an :class:`AnalysisRecord` read back is written as read)."""
    doc = {arm: a if isinstance(a, AnalysisRecord) else a.record(fit_events=True) for arm, a in arms.items()}
    return orjson.dumps(doc, option=JSON_OPTIONS)


def decode_analysis(source: bytes | str | Path, what: str | None = None) -> Analysis:
    """An Analysis JSON file (``analyze --json``; its path or bytes) as an :class:`Analysis`.

    Raises:
        InputError: naming ``what`` (default the path) and the field, when the file is missing, not JSON,
            not an Analysis JSON object or of another schema version.
    """
    what = what or ("the analysis JSON" if isinstance(source, bytes) else str(source))
    return _typed(decode(source, AnalysisRecord, what), what)


def read_analysis_arms(path: str | Path) -> dict[str, Any]:
    """A run folder's ``analysis.json`` as read: arm → its Analysis JSON object, its fields not yet checked.

    Raises:
        InputError: naming the file, when it is missing, not JSON or not an object of arms.
    """
    from fsdpbench.results.run_folder import read_json_file

    raw = read_json_file(path)
    if not isinstance(raw, dict):
        raise InputError(f"{path}: $: expected an object of arms, got {type(raw).__name__}")
    return raw


def decode_analysis_file(path: str | Path) -> dict[str, AnalysisRecord]:
    """A run folder's ``analysis.json`` as arm → :class:`AnalysisRecord` (:meth:`Analysis.from_record`
    gives the objects).

    Raises:
        InputError: naming the file and the field (``…/analysis.json: $.torch.ranks[1].step_time_us:
            expected `float`, got `str```), as :func:`decode_analysis`.
    """
    return analysis_records(read_analysis_arms(path), path)


def analysis_records(arms_json: Mapping[str, Any], path: str | Path) -> dict[str, AnalysisRecord]:
    """analysis.json already decoded (:func:`read_analysis_arms`) as arm → :class:`AnalysisRecord`.

    Raises:
        InputError: as :func:`decode_analysis_file`.
    """
    arms = {arm: convert(doc, AnalysisRecord, str(path), f"$.{arm}") for arm, doc in arms_json.items()}
    for arm, rec in arms.items():
        problem = _problem(rec)
        if problem:
            raise InputError(f"{path}: $.{arm}{problem[1:]}")
    return arms


def convert_analysis(data: Any, what: str, at: str = "$") -> Analysis:
    """Decoded JSON (an Analysis object found at ``at`` in file ``what``) as an :class:`Analysis`, or
    ``InputError`` naming the file and the field."""
    return _typed(convert(data, AnalysisRecord, what, at), what, at)


def _typed(rec: AnalysisRecord, what: str, at: str = "$") -> Analysis:
    try:
        return Analysis.from_record(rec)
    except InputError as exc:
        raise InputError(f"{what}: {at}{str(exc)[1:]}") from None
