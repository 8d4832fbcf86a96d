"""The one event table every reader returns, and the vectorised helpers that build it.

Readers return an :class:`EventTable`: numpy columns, the categorical ones as :class:`Coded` (codes
into categories), so that measuring a rank never imports pandas; ``EventTable.to_frame()`` (what
``RankTrace.events`` returns) gives the same table as a ``pd.DataFrame`` with ``category`` dtypes.

Columns (one row per complete event; times are integer nanoseconds on the rank's own clock):

| column | dtype | meaning |
|---|---|---|
| ``name`` | category | event name as the profiler wrote it |
| ``category`` | category | ``compute``, ``comm``, ``memcpy``, ``memset``, ``sync`` or ``other`` |
| ``start_ns``, ``end_ns`` | int64 | start and end, exact to the ns (no float-µs rounding) |
| ``lane`` | category | where it ran: ``stream 7``, ``thread 123 (main)``, ``Stream 2``, ``HCCL`` … |
| ``device`` | bool | True for work on a device lane (what the busy/overlap metrics use) |
| ``collective`` | category | collective type (``all_gather`` …) or ``""`` |
| ``bytes`` | float64 | message size of a collective in bytes, NaN when unknown |
| ``op_type`` | category | the op type used for kernel statistics (kernel name, Ascend ``Type``, aten op) |
| ``task`` | category | ``barrier``, ``launch_ffts``, ``device_synchronize``, ``stream_synchronize``, ``event_synchronize``, ``kernel_launch`` or ``""`` |
| ``step`` | int64 | profiler step (``ProfilerStep#N``) the event belongs to, ``-1`` when none |
| ``orphan`` | bool | device work whose launching call is not in the trace (launched before the profiler started): left out of every total |
| ``launch_ns``, ``launch_lane`` | int64, int32 | where the host call that launched the event began: its start and its lane's code (into ``lane``'s categories); Ascend: the host operator the profiler links to the task (:mod:`fsdpbench.trace.ascend_launch`); an event's own start and lane where the trace does not link one (host events, CPU-only traces) |
| ``group`` | category | a collective's process group (``Process Group Name``, else ``Process Group ID``), ``""`` when the trace does not say |
| ``seq`` | int64 | a collective's sequence number in its group (``Seq``), ``-1`` when the trace does not say |
| ``dtype`` | category | a collective's element type as the trace writes it (``Float``, ``BFloat16`` …), ``""`` when unknown |
| ``in_bytes``, ``out_bytes`` | float64 | a collective's input and output buffer in bytes, NaN when unknown |

The identity columns are stored once per collective (``EventTable.comm``, pointed to by the
``comm_row`` column, -1 off collectives) and read as full columns through properties. The group's
description, ranks and size are per group, not per event: ``RankTrace.groups``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

CATEGORIES = ["compute", "comm", "memcpy", "memset", "sync", "other"]
COLLECTIVE_TYPES = [
    "all_gather",
    "reduce_scatter",
    "all_reduce",
    "broadcast",
    "all_to_all",
    "send_recv",
    "barrier",
    "other",
]
TASKS = [
    "barrier",
    "launch_ffts",
    "device_synchronize",
    "stream_synchronize",
    "event_synchronize",
    "kernel_launch",
]
COLUMNS = [
    "name",
    "category",
    "start_ns",
    "end_ns",
    "lane",
    "device",
    "collective",
    "bytes",
    "op_type",
    "task",
    "step",
    "orphan",
    "group",
    "seq",
    "dtype",
    "in_bytes",
    "out_bytes",
]
# columns a table made before they existed (a DataFrame from elsewhere) may lack: their empty values
_OPTIONAL = ("group", "seq", "dtype", "in_bytes", "out_bytes")

# Checked in order on the lower-cased name with "_" removed; the first match wins.
_COLLECTIVE_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("all_gather", re.compile(r"allgather")),
    ("reduce_scatter", re.compile(r"reducescatter")),
    ("all_reduce", re.compile(r"allreduce")),
    ("broadcast", re.compile(r"broadcast|bcast")),
    ("all_to_all", re.compile(r"alltoall")),
    ("send_recv", re.compile(r"sendrecv|send|recv|receive|batchput|batchget")),
    ("barrier", re.compile(r"barrier")),
]

# Device-work names → category, checked in order (the first match wins; no match: compute). Every
# pattern is anchored or bounded by words, never a bare substring: "a*sync*" in FBGEMM's
# ``recat_copy_async_kernel<float>`` or "memcpy" inside a compute kernel's template arguments must
# not decide the category. Widened from HTA's ``^nccl``/``^Memcpy``/``^Memset``/``^dma`` to RCCL, MSCCL,
# HCCL, NCCL 2.4-era ``void ncclAllReduceRingLLKernel_*``, any case.
KERNEL_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("comm", re.compile(r"^(?:void\s+)?(?:nccl|rccl|msccl|hccl)|^hcom_", re.IGNORECASE)),
    ("memcpy", re.compile(r"^(?:hip|cuda)?memcpy(?-i:(?![a-z]))|^dma(?-i:(?![a-z]))", re.IGNORECASE)),
    ("memset", re.compile(r"^(?:hip|cuda)?memset(?-i:(?![a-z]))", re.IGNORECASE)),
    (
        "sync",
        re.compile(
            r"^(?:stream wait event|(?:stream|event|context|device) sync(?:hronize)?)$", re.IGNORECASE
        ),
    ),
]

# Host API / device-side names → sync and launch task kinds. An optional ``Prefix@`` is Ascend's API
# layer (``AscendCL@``, ``Runtime@``, ``Hccl@``); the rest must match the whole name.
_API = r"^(?:\w+@)?"
TASK_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("launch_ffts", re.compile(_API + r"launch_ffts$", re.IGNORECASE)),
    ("barrier", re.compile(_API + r"barrier(?:tasklaunch)?$", re.IGNORECASE)),
    (
        "device_synchronize",
        re.compile(
            _API + r"(?:(?:cuda|hip|cu)?(?:device|ctx)synchronize|aclrtsynchronizedevice(?:withtimeout)?"
            r"|devicesynchronize|context sync)$",
            re.IGNORECASE,
        ),
    ),
    (
        "stream_synchronize",
        re.compile(
            _API
            + r"(?:(?:cuda|hip|cu)?streamsynchronize|aclrtsynchronizestream(?:withtimeout)?|stream sync)$",
            re.IGNORECASE,
        ),
    ),
    (
        "event_synchronize",
        re.compile(
            _API + r"(?:(?:cuda|hip|cu)?eventsynchronize|aclrtsynchronizeevent(?:withtimeout)?|event sync)$",
            re.IGNORECASE,
        ),
    ),
    (
        "kernel_launch",
        re.compile(
            r"^(?:cuda|cu|hip)(?:ext)?(?:module)?launch(?:cooperative)?kernel\w*$|^node@launch$",
            re.IGNORECASE,
        ),
    ),
]


def collective_type(name: str) -> str:
    """Collective type of a communication event name (``other`` when none matches)."""
    key = name.lower().replace("_", "").replace(" ", "")
    for ctype, pat in _COLLECTIVE_PATTERNS:
        if pat.search(key):
            return ctype
    return "other"


COLLECTIVE_LABELS = ["", *COLLECTIVE_TYPES]
"""The ``collective`` column's categories (``""``: not a collective)."""
TASK_LABELS = ["", *TASKS]
"""The ``task`` column's categories (``""``: no task)."""
CATEGORY_CODE = {c: i for i, c in enumerate(CATEGORIES)}
"""Code of each ``category`` value."""


def _first_rule(name: str, rules: Sequence[tuple[str, re.Pattern[str]]], default: str) -> str:
    return next((lab for lab, pat in rules if pat.search(name)), default)


def label_codes(names: Any, label_of: Any, labels: Sequence[str], default: str) -> np.ndarray:
    """Per event the code (into ``labels``) of ``label_of(name)``: computed once per distinct name
    (the *categories* of ``names``, a :class:`Coded` or ``pd.Categorical``) and broadcast by code."""
    index = {lab: i for i, lab in enumerate(labels)}
    per_name = [index[label_of(str(c))] for c in names.categories] + [index[default]]
    return np.array(per_name, dtype=np.int8)[names.codes]  # code -1 (NaN) picks the trailing default


def kernel_category_codes(names: Any) -> np.ndarray:
    """Codes into :data:`CATEGORIES` of the device work's category by name (:func:`kernel_category`)."""
    return label_codes(names, lambda c: _first_rule(c, KERNEL_RULES, "compute"), CATEGORIES, "compute")


def collective_codes(names: Any) -> np.ndarray:
    """Codes into :data:`COLLECTIVE_LABELS` of the collective type by name (:func:`collective_of`)."""
    return label_codes(names, collective_type, COLLECTIVE_LABELS, "other")


def task_codes(names: Any) -> np.ndarray:
    """Codes into :data:`TASK_LABELS` of the sync/launch task kind by name (:func:`task_of`)."""
    return label_codes(names, lambda c: _first_rule(c, TASK_RULES, ""), TASK_LABELS, "")


def kernel_category(names: pd.Categorical | Coded) -> np.ndarray:
    """Category of device work from its name by :data:`KERNEL_RULES` (comm → memcpy → memset → sync,
    else compute)."""
    return np.array(CATEGORIES, dtype=object)[kernel_category_codes(names)]


def collective_of(names: pd.Categorical | Coded) -> np.ndarray:
    """Collective type per event from its name (``other`` when unrecognised)."""
    return np.array(COLLECTIVE_LABELS, dtype=object)[collective_codes(names)]


def task_of(names: pd.Categorical | Coded) -> np.ndarray:
    """Sync/launch task kind per event name, ``""`` for none."""
    return np.array(TASK_LABELS, dtype=object)[task_codes(names)]


# ---------------------------------------------------------------------------------------------
# exact µs → ns conversion

_EXACT_LIMIT_US = float(2**43)  # below this a double resolves 3 decimals of µs to < 0.5 ns


def us_to_ns(values: np.ndarray) -> np.ndarray:
    """Convert µs given as doubles (as JSON decoders return them) to exact int64 ns.

    A decimal with at most 3 fraction digits (Kineto and Ascend write µs with ns resolution) is
    recovered exactly as long as |value| < 2**43 µs (about 101 days): the integer part is exact in a
    double, and the fraction (exact by Sterbenz) is within 0.5 ns of the written one. Larger
    values (epoch-based clocks) keep the double's precision; pass those as strings to
    :func:`us_strings_to_ns` instead.
    """
    v = np.asarray(values, dtype=np.float64)
    whole = np.floor(v)
    frac_ns = np.rint((v - whole) * 1000.0)
    return whole.astype(np.int64) * 1000 + frac_ns.astype(np.int64)


def needs_string_parse(values: np.ndarray) -> bool:
    """True when some µs values are too large for :func:`us_to_ns` to be exact."""
    return bool(np.abs(np.asarray(values, dtype=np.float64)).max(initial=0.0) >= _EXACT_LIMIT_US)


def us_strings_to_ns(values: pd.Series) -> np.ndarray:
    """Convert decimal µs strings (``"1736408883704643.212"``, cells with stray tabs) to int64 ns.

    Raises ValueError on a cell that is not a plain non-negative or negative decimal number.
    """
    if len(values) == 0:
        return np.empty(0, dtype=np.int64)
    s = values.astype(str).str.strip()
    neg = s.str.startswith("-")
    s = s.str.lstrip("-")
    parts = s.str.partition(".")
    whole, frac = parts[0], parts[2]
    bad = ~whole.str.fullmatch(r"\d+") | ~frac.str.fullmatch(r"\d*")
    if bad.any():
        raise ValueError(f"not a decimal number: {values[bad].iloc[0]!r}")
    frac3 = frac.str.ljust(3, "0").str[:3].astype(np.int64).to_numpy()
    # round half up on a 4th digit (profilers write at most 3, so this is rarely used)
    carry = (frac.str[3:4].str.ljust(1, "0").astype(np.int64).to_numpy() >= 5).astype(np.int64)
    ns = whole.astype(np.int64).to_numpy() * 1000 + frac3 + carry
    return np.where(neg.to_numpy(), -ns, ns)


def object_full(n: int, value: str) -> np.ndarray:
    """An object array holding one shared ``value`` (``np.full`` would create n string objects)."""
    out = np.empty(n, dtype=object)
    out.fill(value)
    return out


def factorize(values: Sequence[Any] | np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """(codes, uniques in first-seen order) of hashable values, at C speed (one dict lookup each;
    integer arrays by sorting)."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iub":
        uniq, first, inverse = np.unique(values, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty(order.size, dtype=np.int64)
        rank[order] = np.arange(order.size)
        return rank[inverse.ravel()], uniq[order].tolist()
    items = (
        values
        if isinstance(values, list)
        else values.tolist()
        if isinstance(values, np.ndarray)
        else list(values)
    )
    index = dict.fromkeys(items)
    uniques = list(index)
    for i, u in enumerate(uniques):
        index[u] = i
    return np.fromiter(map(index.__getitem__, items), dtype=np.int64, count=len(items)), uniques


class Coded:
    """A categorical column without pandas: integer ``codes`` into ``categories`` (-1: missing).

    It has the ``codes``/``categories`` of a ``pd.Categorical``, so the name rules above read either;
    the cold analysis path never imports pandas (its import alone costs more than a rank's metrics).
    """

    __slots__ = ("categories", "codes")

    def __init__(self, codes: np.ndarray, categories: Sequence[str]) -> None:
        self.codes = np.asarray(codes)
        self.categories = list(categories)

    @classmethod
    def of(cls, values: Any, categories: Sequence[str] | None = None) -> Coded:
        """Code ``values`` (a Coded, a ``pd.Categorical`` or a sequence of strings; None/NaN: missing).
        Without ``categories`` they are the distinct strings sorted, as ``pd.Categorical(values)``
        makes them; with ``categories`` values outside them become missing."""
        if hasattr(values, "codes") and hasattr(values, "categories"):
            have = cls(values.codes, [str(c) for c in values.categories])
            return have if categories is None else have.recoded(categories)
        codes, uniques = factorize(values)
        if categories is None:
            categories = sorted(u for u in uniques if isinstance(u, str))
        index = {c: i for i, c in enumerate(categories)}
        to_code = np.array([index.get(u, -1) if isinstance(u, str) else -1 for u in uniques] + [-1], np.int64)
        return cls(to_code[codes], categories)

    def recoded(self, categories: Sequence[str]) -> Coded:
        """The same values coded against ``categories`` (values outside them become missing)."""
        index = {c: i for i, c in enumerate(categories)}
        to_code = np.array([index.get(c, -1) for c in self.categories] + [-1], dtype=np.int64)
        return Coded(to_code[self.codes], categories)

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, index: Any) -> Coded:
        return Coded(self.codes[index], self.categories)

    def mask(self, *values: str) -> np.ndarray:
        """True where the value is one of ``values``."""
        wanted = [i for i, c in enumerate(self.categories) if c in values]
        if len(wanted) == 1:
            return self.codes == wanted[0]
        return np.isin(self.codes, wanted)

    def strings(self, missing: str = "nan") -> np.ndarray:
        """The values as an object array of str (``missing`` where there is none, as pandas' ``astype(str)``)."""
        return np.array([*self.categories, missing], dtype=object)[self.codes]

    def to_categorical(self) -> pd.Categorical:
        """The ``pd.Categorical`` of these codes and categories."""
        import pandas as pd

        dtype = pd.CategoricalDtype(pd.Index(self.categories, dtype=object))
        return pd.Categorical.from_codes(self.codes, dtype=dtype)


@dataclass
class CommInfo:
    """The identity of a table's collectives, one entry per row that has one (``EventTable.comm_row``
    points here): ``group`` and ``dtype`` (:class:`Coded`, ``""`` first: not said), ``seq`` (-1: none),
    ``in_bytes``, ``out_bytes`` (NaN: unknown). Shared, not copied, by the tables ``take`` makes."""

    group: Coded
    seq: np.ndarray
    dtype: Coded
    in_bytes: np.ndarray
    out_bytes: np.ndarray

    def __len__(self) -> int:
        return len(self.seq)

    @classmethod
    def of(cls, group: Any, seq: Any, dtype: Any, in_bytes: Any, out_bytes: Any) -> CommInfo:
        """From per-collective values (strings or :class:`Coded` for group/dtype, ``""`` for none)."""
        return cls(
            _blank_first(Coded.of(group)),
            np.asarray(seq, dtype=np.int64),
            _blank_first(Coded.of(dtype)),
            np.asarray(in_bytes, dtype=np.float64),
            np.asarray(out_bytes, dtype=np.float64),
        )


def _blank_first(c: Coded) -> Coded:
    """``c`` with ``""`` as its category 0 (what an event without a value reads), codes as small ints."""
    if not c.categories or c.categories[0] != "":
        c = c.recoded(["", *[x for x in c.categories if x != ""]])
    small = np.int8 if len(c.categories) < 2**7 else np.int16 if len(c.categories) < 2**15 else np.int32
    return Coded(np.where(c.codes < 0, 0, c.codes).astype(small), c.categories)


def comm_of_columns(
    n: int, group: Any = None, seq: Any = None, dtype: Any = None, in_bytes: Any = None, out_bytes: Any = None
) -> tuple[np.ndarray, CommInfo]:
    """(``comm_row``, :class:`CommInfo`) from full-length identity columns (None: said nowhere)."""
    g = np.full(n, "", dtype=object) if group is None else Coded.of(group).strings("")
    d = np.full(n, "", dtype=object) if dtype is None else Coded.of(dtype).strings("")
    sq = np.full(n, -1, np.int64) if seq is None else np.asarray(seq, dtype=np.int64)
    ib = np.full(n, np.nan) if in_bytes is None else np.asarray(in_bytes, dtype=np.float64)
    ob = np.full(n, np.nan) if out_bytes is None else np.asarray(out_bytes, dtype=np.float64)
    has = np.flatnonzero((g != "") | (d != "") | (sq >= 0) | ~np.isnan(ib) | ~np.isnan(ob))
    row = np.full(n, -1, dtype=np.int32)
    row[has] = np.arange(has.size, dtype=np.int32)
    return row, CommInfo.of(g[has].tolist(), sq[has], d[has].tolist(), ib[has], ob[has])


@dataclass
class EventTable:
    """The event table as numpy columns (the columns of the module docstring; categoricals as
    :class:`Coded`), sorted by start. ``to_frame()`` gives the ``pd.DataFrame`` callers read.

    The identity columns (``group, seq, dtype, in_bytes, out_bytes``) are properties: only collectives
    have values, kept once in ``comm`` (:class:`CommInfo`) and pointed to by ``comm_row`` (-1: none),
    so that the tables ``take`` makes do not copy five mostly empty columns."""

    name: Coded
    category: Coded
    start_ns: np.ndarray
    end_ns: np.ndarray
    lane: Coded
    device: np.ndarray
    collective: Coded
    bytes: np.ndarray
    op_type: Coded
    task: Coded
    step: np.ndarray
    orphan: np.ndarray
    launch_ns: np.ndarray
    launch_lane: np.ndarray
    comm_row: np.ndarray
    comm: CommInfo

    def __len__(self) -> int:
        return len(self.start_ns)

    def take(self, index: np.ndarray) -> EventTable:
        """The rows at ``index`` (a boolean mask or positions), in order (``comm`` shared)."""
        return EventTable(
            **{f.name: getattr(self, f.name)[index] for f in fields(self) if f.name != "comm"}, comm=self.comm
        )

    def identity(self, index: Any = slice(None)) -> dict[str, np.ndarray]:
        """The identity columns at ``index`` (all rows by default): ``group`` and ``dtype`` as object
        arrays of str (``""``: not said), ``seq`` (-1), ``in_bytes``, ``out_bytes`` (NaN)."""
        rows = self.comm_row[index]
        has = rows >= 0
        r = rows[has]
        c = self.comm
        group = np.full(rows.size, "", dtype=object)
        dtype = np.full(rows.size, "", dtype=object)
        group[has] = np.array(c.group.categories, dtype=object)[c.group.codes[r]]
        dtype[has] = np.array(c.dtype.categories, dtype=object)[c.dtype.codes[r]]
        seq = np.full(rows.size, -1, dtype=np.int64)
        seq[has] = c.seq[r]
        in_b, out_b = np.full(rows.size, np.nan), np.full(rows.size, np.nan)
        in_b[has], out_b[has] = c.in_bytes[r], c.out_bytes[r]
        return {"group": group, "seq": seq, "dtype": dtype, "in_bytes": in_b, "out_bytes": out_b}

    def _coded(self, part: Coded) -> Coded:
        out = np.zeros(len(self), dtype=part.codes.dtype)
        has = self.comm_row >= 0
        out[has] = part.codes[self.comm_row[has]]
        return Coded(out, part.categories)

    @property
    def group(self) -> Coded:
        """Process group name per event (``""``: none)."""
        return self._coded(self.comm.group)

    @property
    def dtype(self) -> Coded:
        """Element type per event as the trace writes it (``""``: unknown)."""
        return self._coded(self.comm.dtype)

    @property
    def seq(self) -> np.ndarray:
        """Sequence number in its group per event (-1: none)."""
        return self.identity()["seq"]

    @property
    def in_bytes(self) -> np.ndarray:
        """Input buffer bytes per event (NaN: unknown)."""
        return self.identity()["in_bytes"]

    @property
    def out_bytes(self) -> np.ndarray:
        """Output buffer bytes per event (NaN: unknown)."""
        return self.identity()["out_bytes"]

    def to_frame(self) -> pd.DataFrame:
        """The table as a ``pd.DataFrame`` (categoricals as ``category`` dtype)."""
        import pandas as pd

        cols = {c: getattr(self, c) for c in COLUMNS}
        return pd.DataFrame(
            {c: v.to_categorical() if isinstance(v, Coded) else v for c, v in cols.items()}, copy=False
        )

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> EventTable:
        """The numpy columns of a table built as a ``pd.DataFrame`` (see :func:`as_table`)."""
        fixed = {"category": CATEGORIES, "collective": COLLECTIVE_LABELS, "task": TASK_LABELS}
        cols: dict[str, Any] = {}
        for c in COLUMNS:
            if c in _OPTIONAL:
                continue
            col = df[c]
            if c in _CODED:
                cols[c] = Coded.of(col.array if hasattr(col, "cat") else col.to_numpy(object), fixed.get(c))
            else:
                cols[c] = col.to_numpy()
        ident = {}
        for c in _OPTIONAL:
            if c in df.columns:
                col = df[c]
                ident[c] = (
                    (col.array if hasattr(col, "cat") else col.to_numpy(object)) if c in _CODED else col
                )
        cols["comm_row"], cols["comm"] = comm_of_columns(len(df), **ident)
        cols["launch_ns"] = cols["start_ns"].astype(np.int64)
        cols["launch_lane"] = cols["lane"].codes.astype(np.int32)
        return cls(**cols)


_CODED = ("name", "category", "lane", "collective", "op_type", "task", "group", "dtype")
STORED = [c for c in COLUMNS if c not in _OPTIONAL] + ["launch_ns", "launch_lane", "comm_row"]
"""The table's own columns (what a cache stores, beside ``comm``)."""


def as_table(events: EventTable | pd.DataFrame) -> EventTable:
    """``events`` as an :class:`EventTable` (a DataFrame made by :meth:`EventTable.to_frame` is converted)."""
    return events if isinstance(events, EventTable) else EventTable.from_frame(events)


@dataclass
class StepWindows:
    """The host ``ProfilerStep#N`` windows of a rank, sorted by start: ``step``, ``start_ns``,
    ``end_ns`` (int64 arrays); ``windows["step"]`` reads a column as a DataFrame's would."""

    step: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray

    def __len__(self) -> int:
        return len(self.step)

    def __getitem__(self, column: str) -> np.ndarray:
        return getattr(self, column)

    @classmethod
    def of(cls, step: Any, start_ns: Any, end_ns: Any) -> StepWindows:
        """Windows from three columns, sorted by start (stable)."""
        step, start, end = (np.asarray(v, dtype=np.int64) for v in (step, start_ns, end_ns))
        order = np.argsort(start, kind="stable")
        return cls(step[order], start[order], end[order])

    @classmethod
    def from_frame(cls, df: Any) -> StepWindows:
        """Windows from a frame with ``step, start_ns, end_ns`` columns."""
        if isinstance(df, StepWindows):
            return df
        return cls.of(df["step"], df["start_ns"], df["end_ns"])

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame({"step": self.step, "start_ns": self.start_ns, "end_ns": self.end_ns})


def make_table(
    *,
    name: Any,
    category: Any,
    start_ns: np.ndarray,
    end_ns: np.ndarray,
    lane: Any,
    device: np.ndarray,
    collective: Any = None,
    nbytes: np.ndarray | None = None,
    op_type: Any = None,
    task: Any = None,
    step: np.ndarray | None = None,
    orphan: np.ndarray | None = None,
    group: Any = None,
    seq: np.ndarray | None = None,
    dtype: Any = None,
    in_bytes: np.ndarray | None = None,
    out_bytes: np.ndarray | None = None,
    comm_row: np.ndarray | None = None,
    comm: CommInfo | None = None,
    launch_ns: np.ndarray | None = None,
    launch_lane: np.ndarray | None = None,
) -> EventTable:
    """Assemble the event table with the dtypes of the module docstring, sorted by start. Categorical
    columns may be given as strings, :class:`Coded` or ``pd.Categorical``; the identity of collectives
    either as full columns (``group`` … ``out_bytes``; not given: "not said", ``""``/-1/NaN) or as
    ``comm_row`` + ``comm`` (see :class:`EventTable`); ``launch_ns``/``launch_lane`` (codes into the
    categories of ``lane`` as given) default to each event's own start and lane."""
    n = len(start_ns)
    start_ns = np.asarray(start_ns, dtype=np.int64)
    # columns already in order (a reader that sorted them itself) are used as they are: no copies
    ordered = n < 2 or bool((start_ns[1:] >= start_ns[:-1]).all())
    order = slice(None) if ordered else np.argsort(start_ns, kind="stable")
    names = Coded.of(name)[order]
    lanes = Coded.of(lane)
    if launch_ns is None or launch_lane is None:
        launch_ns, launch_lane = start_ns, lanes.codes
    if comm is None or comm_row is None:
        comm_row, comm = comm_of_columns(n, group, seq, dtype, in_bytes, out_bytes)
    return EventTable(
        name=names,
        category=Coded.of(category, CATEGORIES)[order],
        start_ns=start_ns[order],
        end_ns=np.asarray(end_ns, dtype=np.int64)[order],
        lane=lanes[order],
        device=np.asarray(device, dtype=bool)[order],
        collective=Coded(np.zeros(n, np.int8), COLLECTIVE_LABELS)
        if collective is None
        else Coded.of(collective, COLLECTIVE_LABELS)[order],
        bytes=np.full(n, np.nan) if nbytes is None else np.asarray(nbytes, dtype=np.float64)[order],
        op_type=names if op_type is None else Coded.of(op_type)[order],
        task=Coded(np.zeros(n, np.int8), TASK_LABELS) if task is None else Coded.of(task, TASK_LABELS)[order],
        step=np.full(n, -1, dtype=np.int64) if step is None else np.asarray(step, dtype=np.int64)[order],
        orphan=np.zeros(n, dtype=bool) if orphan is None else np.asarray(orphan, dtype=bool)[order],
        launch_ns=np.asarray(launch_ns, dtype=np.int64)[order],
        launch_lane=np.asarray(launch_lane, dtype=np.int32)[order],
        comm_row=np.asarray(comm_row, dtype=np.int32)[order],
        comm=comm,
    )


def assign_steps(
    starts_ns: np.ndarray, step_starts: np.ndarray, step_ends: np.ndarray, step_ids: np.ndarray
) -> np.ndarray:
    """Step id of each time point: the step window ``[start, end)`` containing it, else -1."""
    out = np.full(len(starts_ns), -1, dtype=np.int64)
    if len(step_ids) == 0:
        return out
    order = np.argsort(step_starts)
    ss, se, sid = step_starts[order], step_ends[order], step_ids[order]
    idx = np.searchsorted(ss, starts_ns, side="right") - 1
    ok = idx >= 0
    ok[ok] &= starts_ns[ok] < se[idx[ok]]
    out[ok] = sid[idx[ok]]
    return out
