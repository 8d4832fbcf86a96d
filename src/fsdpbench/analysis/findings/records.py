"""The typed inputs and outputs of the rules: both arms' metrics, the comparison rows, a finding."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, TypeVar

from fsdpbench.analysis.estimate import whatif
from fsdpbench.analysis.estimate.whatif import Estimate
from fsdpbench.analysis.findings import places as plc
from fsdpbench.analysis.findings.thresholds import COLLECTIVE_NAMES, SAME_BYTES_TOL, SYNC_NAMES
from fsdpbench.config.arms import Depth, manifest_prefetch
from fsdpbench.fmt import fmt_count, fmt_x
from fsdpbench.records import Record, finite

Side = Literal["base", "test"]
T = TypeVar("T")


def safe_ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or ``None`` when either is unknown or ``b`` is 0."""
    return a / b if a is not None and b else None


def safe_delta(a: float | None, b: float | None) -> float | None:
    """``a − b``, or ``None`` when either is unknown."""
    return a - b if a is not None and b is not None else None


@dataclass(frozen=True)
class Pair(Record, Generic[T]):
    """One value per side: ``pair["base"]`` / ``pair["test"]``; in a file ``{"base": …, "test": …}``."""

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
class SideMetrics(Record):
    """One arm's step breakdown (one rank, or the mean over ranks): µs and a 0–1 overlap ratio.

    ``None`` = not measured (e.g. no overlap ratio without communication). ``rank`` is set for one rank;
    a file holds the ``METRICS`` only (Diff JSON ``side_by_side``: the rank is the pair's).
    """

    _keys: ClassVar[tuple[str, ...]] = METRICS

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
class CollectiveRow(Record):
    """One collective type compared (a Diff JSON ``collectives`` row): each side's calls, bytes and time per
    rank; ``row["test"]`` is the test side as a :class:`CollectiveSide`. Ratios are test / base."""

    _keys: ClassVar[tuple[str, ...]] = (
        "type",
        "base_count",
        "test_count",
        "count_ratio",
        "base_bytes",
        "test_bytes",
        "bytes_ratio",
        "base_time_us",
        "test_time_us",
        "time_delta_us",
    )

    type: str
    base_count: float | None = None
    test_count: float | None = None
    base_bytes: float | None = None
    test_bytes: float | None = None
    base_time_us: float | None = None
    test_time_us: float | None = None

    @classmethod
    def from_sides(cls, type: str, base: CollectiveSide, test: CollectiveSide) -> CollectiveRow:
        """The row of one collective type from both sides' figures."""
        return cls(type, base.count, test.count, base.bytes, test.bytes, base.time_us, test.time_us)

    @property
    def base(self) -> CollectiveSide:
        return CollectiveSide(self.base_count, self.base_bytes, self.base_time_us)

    @property
    def test(self) -> CollectiveSide:
        return CollectiveSide(self.test_count, self.test_bytes, self.test_time_us)

    def __getitem__(self, side: Side) -> CollectiveSide:
        return self.test if side == "test" else self.base

    @property
    def name(self) -> str:
        return COLLECTIVE_NAMES.get(self.type, self.type)

    @property
    def count_ratio(self) -> float | None:
        return safe_ratio(self.test_count, self.base_count)

    @property
    def bytes_ratio(self) -> float | None:
        return safe_ratio(self.test_bytes, self.base_bytes)

    @property
    def time_delta_us(self) -> float | None:
        return safe_delta(self.test_time_us, self.base_time_us)


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
class OpRow(Record):
    """One op type compared (a Diff JSON ``ops`` row): kernel time and calls per rank on each side, with
    HTA's change category (added/deleted/increased/decreased/unchanged); ``row["test"]`` is an :class:`OpSide`."""

    _keys: ClassVar[tuple[str, ...]] = (
        "op_type",
        "base_us",
        "test_us",
        "delta_us",
        "base_count",
        "test_count",
        "change",
        "same_as",
    )
    _omit_if_empty: ClassVar[frozenset[str]] = frozenset({"same_as"})

    op_type: str
    base_us: float = 0.0
    test_us: float = 0.0
    base_count: float = 0.0
    test_count: float = 0.0
    change: str = ""
    same_as: tuple[str, ...] = ()
    """Other names of the same operator merged into this row (CANN aliases: ``ReduceSumD`` for ``ReduceSum``)."""

    @classmethod
    def from_sides(
        cls, op_type: str, base: OpSide, test: OpSide, change: str, same_as: tuple[str, ...] = ()
    ) -> OpRow:
        """The row of one op type from both sides' figures."""
        return cls(op_type, base.us, test.us, base.count, test.count, change, same_as)

    @property
    def base(self) -> OpSide:
        return OpSide(self.base_us, self.base_count)

    @property
    def test(self) -> OpSide:
        return OpSide(self.test_us, self.test_count)

    @property
    def label(self) -> str:
        """``op_type``, with the merged names when there are any: ``ReduceSum (= ReduceSumD)``."""
        return f"{self.op_type} (= {', '.join(self.same_as)})" if self.same_as else self.op_type

    def __getitem__(self, side: Side) -> OpSide:
        return self.test if side == "test" else self.base

    @property
    def delta_us(self) -> float:
        return self.test_us - self.base_us


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
    """Both arms per (unit, phase) (``analysis.findings.places.compare_places``); ``[]`` without units."""
    analysis: Pair[Mapping[str, Any]] = field(default_factory=lambda: Pair({}, {}))
    """Both arms' Analysis JSON (the places' collective types and the ranks waited for)."""

    def other(self, side: Side) -> Side:
        return "test" if side == "base" else "base"
