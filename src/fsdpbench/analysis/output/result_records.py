"""The analysis' files as typed records: the Analysis JSON of docs/DATA.md (``analyze --json``, each arm of
a run folder's ``analysis.json``) and the per-rank result cache (analysis/result_cache.py).

Each record is a dataclass whose fields are the file's keys in the file's order; msgspec decodes it and
checks every field's type (an error names the file and the field: ``analysis.json: $.torch.ranks[1].
step_time_us: expected float, got str``), orjson encodes it as it is (no per-key code, fast on the long
collective-event columns). The in-memory result objects of analysis/output/result.py derive from these records
(``StepMetrics`` from :class:`StepRecord`, ``RankMetrics`` from :class:`RankRecord`), so a metric is
declared once: add a field here and it is computed, written, read back and cached.

:func:`to_record` and :func:`from_record` are the one pair that turns an object into a record and back,
generic over the fields: they copy the fields both sides declare by name, and take the few that differ
(nested records, computed keys, the op table's cut) as keyword arguments.

Torch-free and pandas-free; imports nothing of fsdpbench but the base record.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeVar

from fsdpbench.records import Record

SCHEMA_VERSION = 1
T = TypeVar("T")
_MISSING = dataclasses.MISSING


class _FileRecord(Record):
    """Base of the records here: dataclasses made with ``init=False, repr=False, eq=False``, which share
    this one ``__init__`` (keyword arguments, the fields' defaults) instead of a generated one each. A
    cached ``analyze`` imports them all; generating their methods cost it ~2 ms (msgspec builds them without
    ``__init__``; the in-memory classes of analysis/output/result.py generate their own)."""

    __slots__ = ()

    def __init__(self, **kwargs: Any) -> None:
        for f in _fields(type(self)):
            if f.name in kwargs:
                value = kwargs.pop(f.name)
            elif f.default is not _MISSING:
                value = f.default
            elif f.default_factory is not _MISSING:
                value = f.default_factory()
            else:
                raise TypeError(f"{type(self).__name__}: missing keyword argument {f.name!r}")
            object.__setattr__(self, f.name, value)
        if kwargs:
            raise TypeError(f"{type(self).__name__}: unexpected keyword arguments {sorted(kwargs)}")


@functools.cache
def _fields(cls: type) -> tuple[dataclasses.Field, ...]:
    return dataclasses.fields(cls)


_record = dataclass(kw_only=True, init=False, repr=False, eq=False)


class OpRow(TypedDict):
    """One op type of a window's kernel time (``ops``; a plain dict in memory)."""

    op_type: str
    count: int
    total_us: float
    mean_us: float | None


class _FitColumns(TypedDict):
    type: list[str]
    bytes: list[int | float | None]
    start_ns: list[int | float]
    end_ns: list[int | float]


class FitEvents(_FitColumns, total=False):
    """A rank's collective events as the columns the per-call α–β fits read (one entry per call), and
    ``transfer_ns`` where the cross-rank split set it; a result cache keeps further columns."""

    transfer_ns: list[int]


@_record
class StepRecord(_FileRecord):
    """One window of a rank (its analysed steps together, or one profiler step): µs from exact ns, ratios
    in 0–1. ``step_time_us`` and the collectives, ops and sync counts are required; a metric a file leaves
    out reads as None."""

    step: int | None = None
    step_time_us: float
    overlap_ratio: float | None = None
    compute_us: float | None = None
    comm_us: float | None = None
    overlapped_us: float | None = None
    exposed_comm_us: float | None = None
    free_us: float | None = None
    carried_over_us: float | None = None
    kernel_time_us: float | None = None
    collectives: dict[str, dict[str, Any]]
    ops: list[OpRow]
    sync: dict[str, int | None]


@_record
class _RankId(_FileRecord):
    """``rank``, the first key of a rank's object (a base of :class:`RankRecord`, listed after
    :class:`StepRecord`, so that dataclasses put its field first)."""

    rank: int


@_record
class RankRecord(StepRecord, _RankId):
    """One rank of the Analysis JSON: its window's metrics, then the rank's own keys and each step."""

    orphan_events: int = 0
    orphan_us: float = 0.0
    orphan_share: float | None = None
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    world_size: int | None = None
    by_group: dict[str, dict[str, Any]] = field(default_factory=dict)
    units: list[dict[str, Any]] | None = None
    units_source: str = "none"
    prefetch: list[dict[str, Any]] | None = None
    steps: list[StepRecord] = field(default_factory=list)


@_record
class RankWithEvents(RankRecord):
    """A rank as analysis.json stores it: also its collective events as columns (``FIT_EVENT_COLUMNS``
    and ``transfer_ns`` where set: what the per-call α–β fits read). Left out of ``analyze --json``;
    None in a file written before analysis.json kept them."""

    collective_events: FitEvents | None = None


@_record
class RankCacheRecord(RankWithEvents):
    """A rank as its result cache stores it: every op, every collective-event column, and what the
    Analysis JSON leaves out (where the trace is, its clock span, the profiler's cross-check table as
    columns, the number of exposed intervals whose bytes follow the JSON)."""

    source: str
    format: str
    mode: str
    device_span_ns: tuple[int, int] | None
    cross_check: dict[str, Any] | None
    exposed_comm_ns: int | None


class AcrossRanks(TypedDict, total=False):
    """The statistics across ranks: ``min``/``max`` of each scalar, the slowest rank, stragglers
    (``[{rank, skew_us}]``, latest first) and each rank's median lateness at collectives (µs, by rank).
    A dict (a TypedDict, which msgspec checks): nothing reads it by attribute."""

    min: dict[str, float | None]
    max: dict[str, float | None]
    slowest_rank: int | None
    stragglers: list[dict[str, Any]]
    collective_skew_us: dict[str, float]


@_record
class AnalysisRecord(_FileRecord):
    """The Analysis JSON of one profile set (one arm). ``schema_version`` and ``ranks`` are required;
    ``mean`` and ``across_ranks`` are written for readers and computed again from the ranks on reading."""

    schema_version: int
    sources: list[str] = field(default_factory=list)
    format: str = ""
    warnings: list[str] = field(default_factory=list)
    ranks: list[RankWithEvents]
    mean: dict[str, float | None] = field(default_factory=dict)
    across_ranks: AcrossRanks = field(default_factory=dict)  # type: ignore[assignment]
    process_groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    waits: dict[str, Any] = field(default_factory=dict)
    replay: dict[str, Any] | None = None
    replay_note: str | None = None


class ResultCacheEntry(TypedDict):
    """A result cache's JSON: the key it stands for, the rank the trace names, the reader's warnings and
    the rank's metrics (read back with :func:`from_plain` once the key matched)."""

    key: dict[str, Any]
    trace_rank: int | None
    warnings: list[str]
    metrics: RankCacheRecord


@functools.cache
def _init_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.init)


def to_record(obj: Any, record: type[T], **given: Any) -> T:
    """``obj`` as a ``record``: each of the record's fields read off ``obj`` by name, or taken from
    ``given`` (nested records, computed keys)."""
    return record(**{n: given[n] if n in given else getattr(obj, n) for n in _init_names(record)})


def from_record(rec: Any, cls: type[T], **given: Any) -> T:
    """A ``cls`` built from record ``rec``: each of ``cls``'s constructor arguments that ``rec`` has as a
    field, by name, and ``given`` (nested objects, what the record does not hold)."""
    names = set(_init_names(type(rec)))
    kwargs = {n: getattr(rec, n) for n in _init_names(cls) if n in names and n not in given}
    return cls(**kwargs, **given)


@functools.cache
def _nested(cls: type) -> dict[str, tuple[str, Any]]:
    """``cls``'s fields that hold records, lists of records or tuples: name → (how, record type). Read
    from the annotations' text (this module's names), not ``typing.get_type_hints``: ~1 ms less."""
    out: dict[str, tuple[str, Any]] = {}
    for f in dataclasses.fields(cls):
        hint = (f.type if isinstance(f.type, str) else f.type.__name__).removesuffix(" | None")
        inner = hint[5:-1] if hint.startswith("list[") else hint
        sub = globals().get(inner)
        if isinstance(sub, type) and issubclass(sub, Record):
            out[f.name] = ("list" if inner != hint else "record", sub)
        elif hint.startswith("tuple["):
            out[f.name] = ("tuple", None)
    return out


def from_plain(cls: type[T], data: dict[str, Any]) -> T:
    """A record of ``cls`` from JSON as ``orjson.loads`` gives it, without checking types: for fsdpbench's
    private files only (a result cache, whose key ties it to this code; a damaged one raises and is
    ignored), where msgspec's import would cost a cached ``analyze`` more than the decode itself."""
    nested = _nested(cls)
    kwargs = {}
    for name in _init_names(cls):
        if name not in data:
            continue
        value = data[name]
        how, sub = nested.get(name, ("", None))
        if value is not None and how == "record":
            value = from_plain(sub, value)
        elif value is not None and how == "list":
            value = [from_plain(sub, v) for v in value]
        elif value is not None and how == "tuple":
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)
