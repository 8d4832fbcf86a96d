"""The typed inputs and outputs of the rules: both arms' metrics, the comparison rows, a finding."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, TypeVar

from fsdpbench.analysis import places as plc
from fsdpbench.analysis import whatif
from fsdpbench.analysis.findings.thresholds import COLLECTIVE_NAMES, SAME_BYTES_TOL, SYNC_NAMES
from fsdpbench.analysis.whatif import Estimate
from fsdpbench.config.arms import Depth, manifest_prefetch
from fsdpbench.fmt import fmt_count, fmt_x
from fsdpbench.records import Record

Side = Literal["base", "test"]
T = TypeVar("T")


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else ``None``.

    The one check of numbers read from JSON, applied where JSON enters: ``compare`` on an Analysis dict
    (so every typed value below is a float or ``None``) and the report on summary/analysis JSON.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def safe_ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or ``None`` when either is unknown or ``b`` is 0."""
    return a / b if a is not None and b else None


def safe_delta(a: float | None, b: float | None) -> float | None:
    """``a − b``, or ``None`` when either is unknown."""
    return a - b if a is not None and b is not None else None


@dataclass(frozen=True)
class Pair(Generic[T]):
    """One value per side: ``pair["base"]`` / ``pair["test"]``."""

    base: T
    test: T

    def __getitem__(self, side: Side) -> T:
        return self.test if side == "test" else self.base


METRICS = (
    "step_time_us",
    "compute_us",
    "comm_us",
    "overlap_ratio",
    "exposed_comm_us",
    "free_us",
    "kernel_time_us",
)
"""The step breakdown compared side by side (Analysis-JSON keys)."""


@dataclass(frozen=True)
class SideMetrics:
    """One arm's step breakdown (one rank, or the mean over ranks): µs and a 0–1 overlap ratio.

    ``None`` = not measured (e.g. no overlap ratio without communication). ``rank`` is set for one rank.
    """

    step_time_us: float | None = None
    compute_us: float | None = None
    comm_us: float | None = None
    overlap_ratio: float | None = None
    exposed_comm_us: float | None = None
    free_us: float | None = None
    kernel_time_us: float | None = None
    rank: int | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], rank: int | None = None) -> SideMetrics:
        """The metrics of an Analysis-JSON rank (or mean) dict; anything not a finite number is ``None``."""
        return cls(**{k: finite(data.get(k)) for k in METRICS}, rank=rank)

    def to_dict(self) -> dict[str, float | None]:
        """``{metric: value}`` for the ``METRICS`` keys (Diff JSON ``side_by_side``)."""
        return {k: getattr(self, k) for k in METRICS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], rank: int | None = None) -> SideMetrics:
        """The inverse of :meth:`to_dict` (values as written: a Diff JSON's are numbers or null)."""
        return cls(**{k: data.get(k) for k in METRICS}, rank=rank)

    def breakdown(self) -> dict[str, float | None]:
        """The keyword arguments of the ``whatif`` estimators."""
        return {
            "step_time_us": self.step_time_us,
            "compute_us": self.compute_us,
            "comm_us": self.comm_us,
            "exposed_comm_us": self.exposed_comm_us,
        }


@dataclass(frozen=True)
class ArmOptions:
    """The arm options the rules read (from manifest.json's arm entry); ``None`` = unknown."""

    backend: str | None = None
    prefetch: int | None = None
    comm_fusion: bool | None = None
    reshard_after_forward: bool = True
    unit: str | None = None
    prefetch_directions: tuple[Depth, Depth] | None = None
    """(forward, backward) prefetch as run: ``default``, ``none`` or N (``Arm.prefetch_directions``)."""

    @classmethod
    def from_manifest(cls, arm: Mapping[str, Any] | None) -> ArmOptions:
        arm = arm or {}
        prefetch = arm.get("prefetch")
        return cls(
            backend=arm.get("backend"),
            prefetch=None if prefetch is None else int(prefetch),
            prefetch_directions=manifest_prefetch(arm),
            comm_fusion=arm.get("comm_fusion"),
            reshard_after_forward=bool(arm.get("reshard_after_forward", True)),
            unit=arm.get("unit"),
        )


@dataclass(frozen=True)
class CollectiveSide:
    """One collective type on one side: calls, bytes and time per rank (mean over ranks)."""

    count: float | None = None
    bytes: float | None = None
    time_us: float | None = None


@dataclass(frozen=True)
class CollectiveRow:
    """One collective type compared; ``row["test"]`` is the test side. Ratios are test / base."""

    type: str
    base: CollectiveSide
    test: CollectiveSide

    def __getitem__(self, side: Side) -> CollectiveSide:
        return self.test if side == "test" else self.base

    @property
    def name(self) -> str:
        return COLLECTIVE_NAMES.get(self.type, self.type)

    @property
    def count_ratio(self) -> float | None:
        return safe_ratio(self.test.count, self.base.count)

    @property
    def bytes_ratio(self) -> float | None:
        return safe_ratio(self.test.bytes, self.base.bytes)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CollectiveRow:
        """The inverse of :meth:`to_dict` (a Diff JSON ``collectives`` row; the ratios and delta are
        computed again from the sides)."""
        sides = (
            CollectiveSide(data.get(f"{side}_count"), data.get(f"{side}_bytes"), data.get(f"{side}_time_us"))
            for side in ("base", "test")
        )
        return cls(str(data["type"]), *sides)

    def to_dict(self) -> dict[str, Any]:
        b, t = self.base, self.test
        return {
            "type": self.type,
            "base_count": b.count,
            "test_count": t.count,
            "count_ratio": self.count_ratio,
            "base_bytes": b.bytes,
            "test_bytes": t.bytes,
            "bytes_ratio": self.bytes_ratio,
            "base_time_us": b.time_us,
            "test_time_us": t.time_us,
            "time_delta_us": safe_delta(t.time_us, b.time_us),
        }


def collective_phrase(name: str, side: CollectiveSide, other: CollectiveSide) -> str:
    """``"all_gather 124 vs 12 (10.3×), same bytes"``: ``side``'s calls against ``other``'s."""
    n = f"{name} {fmt_count(side.count)} vs {fmt_count(other.count)}"
    count_ratio = safe_ratio(side.count, other.count)
    if count_ratio is not None:
        n += f" ({fmt_x(count_ratio)})"
    bytes_ratio = safe_ratio(side.bytes, other.bytes)
    if bytes_ratio is None:
        return f"{n}, bytes unknown"
    return f"{n}, " + (
        "same bytes" if abs(bytes_ratio - 1) <= SAME_BYTES_TOL else f"bytes {fmt_x(bytes_ratio, 2)}"
    )


@dataclass(frozen=True)
class OpSide:
    """One op type on one side: kernel time and calls per rank (0 where the side does not run it)."""

    us: float = 0.0
    count: float = 0.0


@dataclass(frozen=True)
class OpRow:
    """One op type compared, with HTA's change category (added/deleted/increased/decreased/unchanged)."""

    op_type: str
    base: OpSide
    test: OpSide
    change: str
    same_as: tuple[str, ...] = ()
    """Other names of the same operator merged into this row (CANN aliases: ``ReduceSumD`` for ``ReduceSum``)."""

    @property
    def label(self) -> str:
        """``op_type``, with the merged names when there are any: ``ReduceSum (= ReduceSumD)``."""
        return f"{self.op_type} (= {', '.join(self.same_as)})" if self.same_as else self.op_type

    def __getitem__(self, side: Side) -> OpSide:
        return self.test if side == "test" else self.base

    @property
    def delta_us(self) -> float:
        return self.test.us - self.base.us

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OpRow:
        """The inverse of :meth:`to_dict` (a Diff JSON ``ops`` row; ``delta_us`` is computed again)."""
        return cls(
            str(data["op_type"]),
            OpSide(data.get("base_us", 0.0), data.get("base_count", 0.0)),
            OpSide(data.get("test_us", 0.0), data.get("test_count", 0.0)),
            str(data.get("change", "")),
            tuple(data.get("same_as") or ()),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "op_type": self.op_type,
            "base_us": self.base.us,
            "test_us": self.test.us,
            "delta_us": self.delta_us,
            "base_count": self.base.count,
            "test_count": self.test.count,
            "change": self.change,
            **({"same_as": list(self.same_as)} if self.same_as else {}),
        }


@dataclass(frozen=True)
class SyncRow(Record):
    """One sync/launch task kind compared: calls per rank on each side (``None`` = not recordable)."""

    _keys: ClassVar[tuple[str, ...]] = ("name", "base", "test", "delta")

    name: str
    base: float | None = None
    test: float | None = None

    def __getitem__(self, side: Side) -> float | None:
        return self.test if side == "test" else self.base

    @property
    def delta(self) -> float | None:
        return safe_delta(self.test, self.base)

    @property
    def label(self) -> str:
        return SYNC_NAMES.get(self.name, self.name)


@dataclass
class Finding(Record):
    """One diagnosis: ``to_dict()`` gives ``{id, severity, title, evidence, cause, action, estimate, subject}``.

    ``subject`` is the label of the arm the finding (and its estimate) is about; ``None`` when it is about
    the pair (e.g. the step-time comparison).
    """

    id: str = ""
    severity: str = ""
    title: str = ""
    evidence: str = ""
    cause: str = ""
    action: str = ""
    estimate: Estimate | None = None
    subject: str | None = None


@dataclass(frozen=True)
class PeakMemory:
    """An arm's peak memory per rank from summary.json and what it measures (``results.peak_memory_figure``)."""

    bytes: float
    measure: str


@dataclass
class RuleInput:
    """Everything the rules read: labels, rank-mean metrics, per-rank metrics, comparison rows, fits.

    ``fits[source][type]`` are the α–β fits (sources ``base``, ``test``, ``pooled`` = both traces' calls
    together, ``aggregate`` = per-rank totals when the per-call events are missing; estimates prefer
    them in the order side, pooled, aggregate, other side). ``problems`` lists why the comparison may
    mislead; ``num_layers`` enables per-layer targets.
    """

    labels: Pair[str]
    mean: Pair[SideMetrics]
    ranks: Pair[list[SideMetrics]]
    collectives: list[CollectiveRow]
    ops: list[OpRow]
    sync: list[SyncRow]
    fits: dict[str, Mapping[str, whatif.AlphaBetaFit]]
    arms: Pair[ArmOptions] = field(default_factory=lambda: Pair(ArmOptions(), ArmOptions()))
    problems: list[str] = field(default_factory=list)
    num_layers: int | None = None
    peak_memory: Pair[PeakMemory | None] = field(default_factory=lambda: Pair(None, None))
    memory_peaks: Pair[dict[str, Any] | None] = field(default_factory=lambda: Pair(None, None))
    """The memory step's peaks (``memory_timeline.peak_summary``), where the run recorded one."""
    places: list[plc.PlaceRow] = field(default_factory=list)
    """Both arms per (unit, phase) (``analysis.places.compare_places``); ``[]`` without units."""
    analysis: Pair[Mapping[str, Any]] = field(default_factory=lambda: Pair({}, {}))
    """Both arms' Analysis JSON (the places' collective types and the ranks waited for)."""

    def other(self, side: Side) -> Side:
        return "test" if side == "base" else "base"
