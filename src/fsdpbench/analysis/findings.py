"""Findings: explicit rules that turn the differences between two profiles into a ranked diagnosis.

Every rule is one row of ``RULES``: id, when it fires, severity, what to do, and the function that checks it.
The thresholds are the module constants; docs/diagnosis.md ("Findings: the rules") carries the same table. Rules read the
rank-mean metrics of both arms (``base`` = control, ``test``), the collective/op/sync comparison rows
built by ``fsdpbench.analysis.diff`` and the α–β fits of ``fsdpbench.analysis.whatif``.

Torch-free on purpose.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from statistics import median
from typing import Any, Generic, Literal, TypeVar

from fsdpbench.analysis import memory_timeline, whatif
from fsdpbench.analysis import places as plc
from fsdpbench.analysis.whatif import Estimate
from fsdpbench.config.arms import Depth, manifest_prefetch, prefetch_units
from fsdpbench.fmt import fmt_bytes, fmt_count, fmt_pct, fmt_points, fmt_us, fmt_x, speed_phrase

# ---- thresholds (documented in RULES and docs/diagnosis.md ("Findings: the rules")) ---------------------------------
FRAGMENTATION_COUNT_RATIO = 3.0
"""A collective type issued at least this many times more often by one arm ..."""
SIMILAR_BYTES = (0.8, 1.25)
"""... while moving bytes within this ratio of the other's, is fragmented."""
FRAGMENTATION_HIGH_SHARE = 0.10
"""Fragmentation is ``high`` when the fragmented collectives take this share of the step, else ``medium``."""
LOW_OVERLAP_RATIO = 0.5
"""An arm whose overlap ratio is below this ..."""
EXPOSED_SHARE = 0.10
"""... and whose exposed comm is at least this share of its step has a low-overlap finding."""
OVERLAP_GAP = 0.15
"""Also low overlap: an arm whose overlap is this much below the other's ..."""
EXPOSED_GAP_SHARE = 0.05
"""... with exposed comm larger by at least this share of the other arm's step."""
SYNC_RATIO = 2.0
"""A sync/launch count at least this many times the other arm's ..."""
SYNC_MIN_DELTA = 50
"""... and larger by at least this many calls (per rank) is a storm."""
OP_DELTA_SHARE = 0.02
"""An op type whose time differs by at least this share of the base step is a compute-path difference."""
OP_MAX_LISTED = 5
"""At most this many op types are named in the compute-path finding."""
STRAGGLER_SKEW = 0.10
"""A rank whose compute time exceeds the median of the other ranks by this share is a straggler."""
PEAK_MEMORY_RATIO = 1.05
"""Two arms' peak memory (the same measure on both) differing by more than this factor is a finding."""
PLACE_DELTA_SHARE = 0.02
"""A (unit, phase) whose exposed comm is larger in one arm by this share of the base step is named ..."""
PLACE_MAX_LISTED = 3
"""... at most this many places per arm; ``high`` when the largest is at least ``EXPOSED_SHARE`` of the step."""
PLACE_WAIT_SHARE = 0.5
"""A place whose exposed comm is at least this share waiting (for a late rank) is blamed on that rank."""
IDLE_DELTA_SHARE = 0.10
"""An arm whose idle ("free") time is larger by at least this share of the base step ..."""
IDLE_OF_STEP_DELTA = 0.5
"""... and makes up at least this share of the step-time difference is host-bound by that much."""
IDLE_HIGH_SHARE = 0.5
"""``high`` when the host-bound arm's idle time is at least this share of its own step."""
HCCL_AVG_RE = re.compile(r"^(?P<op>\S+) \(HCCL AVG of (?P<collective>\w+)\)$")
"""Op types the Ascend reader gives the divide kernels torch_npu runs after an AVG collective
(``fsdpbench.trace.ascend.HCCL_AVG_LABEL``)."""

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}

COLLECTIVE_NAMES = {
    t: t
    for t in (
        "all_gather",
        "reduce_scatter",
        "all_reduce",
        "broadcast",
        "all_to_all",
        "send_recv",
        "barrier",
        "other",
    )
}
"""Collective types in the order findings and diffs list them, each written as ``analyze`` and the JSON
write it (one spelling everywhere: ``all_gather``, never ``AllGather``)."""
SYNC_NAMES = {
    "barrier": "BARRIER",
    "launch_ffts": "Launch_Ffts",
    "device_synchronize": "DeviceSynchronize",
    "stream_synchronize": "StreamSynchronize",
    "event_synchronize": "EventSynchronize",
    "kernel_launch": "kernel launches",
}


SAME_BYTES_TOL = 0.01
"""Bytes within this relative difference are "same bytes"."""

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
class SyncRow:
    """One sync/launch task kind compared: calls per rank on each side (``None`` = not recordable)."""

    name: str
    base: float | None
    test: float | None

    def __getitem__(self, side: Side) -> float | None:
        return self.test if side == "test" else self.base

    @property
    def delta(self) -> float | None:
        return safe_delta(self.test, self.base)

    @property
    def label(self) -> str:
        return SYNC_NAMES.get(self.name, self.name)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "base": self.base, "test": self.test, "delta": self.delta}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SyncRow:
        """The inverse of :meth:`to_dict` (a Diff JSON ``sync`` row; ``delta`` is computed again)."""
        return cls(str(data["name"]), data.get("base"), data.get("test"))


@dataclass
class Finding:
    """One diagnosis: ``to_dict()`` gives ``{id, severity, title, evidence, cause, action, estimate, subject}``.

    ``subject`` is the label of the arm the finding (and its estimate) is about; ``None`` when it is about
    the pair (e.g. the step-time comparison).
    """

    id: str
    severity: str
    title: str
    evidence: str
    cause: str
    action: str
    estimate: Estimate | None = None
    subject: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "severity": self.severity,
            "title": self.title,
            "evidence": self.evidence,
            "cause": self.cause,
            "action": self.action,
            "estimate": None if self.estimate is None else self.estimate.to_dict(),
            "subject": self.subject,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        """A finding read back from diff.json (missing texts are empty)."""
        kw = {
            f.name: str(data.get(f.name) or "") for f in fields(cls) if f.name not in ("estimate", "subject")
        }
        est = data.get("estimate")
        return cls(
            **kw,
            estimate=Estimate.from_dict(est) if isinstance(est, Mapping) and est else None,
            subject=str(data["subject"]) if data.get("subject") else None,
        )


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


def _share(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole else None


def _action(rule_id: str) -> str:
    return RULE_BY_ID[rule_id].action


# ---- the rules ------------------------------------------------------------------------------------


def rule_invalid_comparison(x: RuleInput) -> list[Finding]:
    if not x.problems:
        return []
    return [
        Finding(
            "invalid_comparison",
            "high",
            f"Comparison may mislead: {x.labels.base} vs {x.labels.test}",
            "; ".join(x.problems),
            "the arms did not run the same workload under the same conditions, so differences mix causes",
            _action("invalid_comparison"),
        )
    ]


def rule_step_time(x: RuleInput) -> list[Finding]:
    b, t = x.mean.base, x.mean.test
    sb, st = b.step_time_us, t.step_time_us
    if sb is None or st is None or sb <= 0:
        return []
    parts = []
    for key, name in (("compute_us", "compute"), ("exposed_comm_us", "exposed comm"), ("free_us", "free")):
        vb, vt = getattr(b, key), getattr(t, key)
        if vb is not None and vt is not None:
            parts.append(f"{name} {fmt_us(vb)} → {fmt_us(vt)} ({fmt_us(vt - vb, signed=True)})")
    return [
        Finding(
            "step_time",
            "info",
            f"Profiled step: {speed_phrase(x.labels.test, x.labels.base, st / sb)}",
            f"step {fmt_us(sb)} → {fmt_us(st)} ({fmt_us(st - sb, signed=True)}); " + "; ".join(parts),
            "the findings below attribute the difference",
            _action("step_time"),
        )
    ]


def _fit_candidates(x: RuleInput, side: Side) -> list[tuple[str, Mapping[str, whatif.AlphaBetaFit]]]:
    order = (side, "pooled", "aggregate", x.other(side))
    return [(source, x.fits.get(source, {})) for source in order]


def _bucket_summary(estimate: Estimate, target_counts: dict[str, int], basis: str) -> Estimate:
    """The figures of a one-bucket-per-layer (per-unit) regrouping ``estimate``, as the fragmentation
    estimate's ``one_bucket_per_layer`` carries them (deltas, bound, targets, basis)."""
    return Estimate(
        comm_delta_us=estimate.comm_delta_us,
        exposed_comm_delta_us=estimate.exposed_comm_delta_us,
        step_time_delta_us=estimate.step_time_delta_us,
        idle_delta_us=estimate.idle_delta_us,
        wait_delta_us=estimate.wait_delta_us,
        step_time_lower_bound_us=estimate.step_time_lower_bound_us,
        target_counts=target_counts,
        basis=basis,
    )


def rule_fragmentation(x: RuleInput) -> list[Finding]:
    findings = []
    for side in ("test", "base"):
        other = x.other(side)
        hits = []
        for row in x.collectives:
            s, o = row[side], row[other]
            if not s.count or not o.count or not s.bytes or not o.bytes:
                continue
            if (
                s.count / o.count >= FRAGMENTATION_COUNT_RATIO
                and SIMILAR_BYTES[0] <= s.bytes / o.bytes <= SIMILAR_BYTES[1]
            ):
                hits.append(row)
        if not hits:
            continue
        lab, lab_o = x.labels[side], x.labels[other]
        evidence = "; ".join(
            collective_phrase(r.name, r[side], r[other])
            + (
                f", {fmt_us(r[side].time_us)} vs {fmt_us(r[other].time_us)}"
                if r[side].time_us is not None
                else ""
            )
            for r in hits
        )
        per_type = {r.type: (r[side].count, r[side].time_us) for r in hits}
        fit_for = {}
        for r in hits:
            chosen = whatif.choose_fit(r.type, *_fit_candidates(x, side))
            if chosen is not None:
                fit_for[r.type] = chosen
        m = x.mean[side]
        # the idle term (idle time scales with the calls) brackets the measured change with the comm-only
        # prediction on CPU/gloo (docs/diagnosis.md, "Calibration"); both are shown
        data, data_o = x.analysis[side], x.analysis[other]
        by_unit = whatif.has_unit_rows(data) and whatif.has_unit_rows(data_o)
        priced = {**m.breakdown(), "free_us": m.free_us}
        step_waits = None if by_unit else whatif.step_waits(data)  # the step-totals path's wait term
        # per (unit, phase): each place's calls at the other arm's count there
        estimate = (
            whatif.estimate_regrouping_units(
                data, whatif.unit_counts(data_o), fit_for, types=per_type, **priced
            )
            if by_unit
            else None
        )
        if estimate is None:  # traces without fsdpbench's ranges: whole-step totals
            estimate = whatif.estimate_regrouping(
                per_type, {r.type: r[other].count for r in hits}, fit_for, **priced, waits=step_waits
            )
            estimate.basis = whatif.BASIS_STEP
        estimate.scenario = f"{lab}'s collectives issued at {lab_o}'s granularity"
        per_unit = (  # one bucket per unit: one call of each type per (unit, phase)
            whatif.estimate_regrouping_units(
                data, {k: 1.0 for k in whatif.unit_counts(data)}, fit_for, types=per_type, **priced
            )
            if by_unit
            else None
        )
        if per_unit is not None:
            estimate.one_bucket_per_layer = _bucket_summary(
                per_unit, {k: round(t.target_count) for k, t in per_unit.per_type.items()}, whatif.BASIS_UNITS
            )
        elif x.num_layers:
            layer = whatif.layer_bucket_counts(
                x.num_layers, reshard_after_forward=x.arms[side].reshard_after_forward
            )
            per_layer = whatif.estimate_regrouping(
                per_type,
                {k: v for k, v in layer.items() if k in per_type},
                fit_for,
                **priced,
                waits=step_waits,
            )
            estimate.one_bucket_per_layer = _bucket_summary(per_layer, layer, whatif.BASIS_STEP)
        frag_time = sum(r[side].time_us or 0.0 for r in hits)
        share = _share(frag_time, m.step_time_us)
        severity = "high" if share is not None and share >= FRAGMENTATION_HIGH_SHARE else "medium"
        if share is None:
            share_text = ""
        elif share <= 1.0:
            share_text = f"; these collectives take {fmt_pct(share)} of {lab}'s step"
        else:  # calls on several comm threads/streams run concurrently, so their sum can exceed the step
            share_text = (
                f"; their calls add up to {fmt_us(frag_time)}, more than {lab}'s whole step "
                f"({fmt_us(m.step_time_us)}): they run concurrently"
            )
        arm = x.arms[side]
        action = (
            "bucket per-parameter collectives per module: one all-gather and one reduce-scatter per "
            "shard unit over a flat buffer, as FSDP2 does"
        )
        if arm.backend in (None, "hyper") and arm.comm_fusion is False:  # comm_fusion is hyper's option only
            action += f"; or enable comm fusion (arm {lab} runs comm_fusion=false)"
        elif arm.backend == "deepspeed" and not arm.prefetch:
            action += (
                f"; for DeepSpeed, let it coalesce a prefetch bucket into one all-gather (arm {lab}: "
                "prefetch=1 or a larger stage3_prefetch_bucket_size)"
            )
        max_ratio = max(r[side].count / r[other].count for r in hits)
        if arm.unit == "module" or (arm.backend == "hyper" and arm.comm_fusion is False):
            cause = "per-parameter collectives (one call per tensor) instead of one per module"
        else:  # e.g. FSDP2's per-unit reduce-scatters vs DeepSpeed's one bucket: not per-parameter
            cause = f"more, smaller collectives than {lab_o}"
        findings.append(
            Finding(
                "fragmentation",
                severity,
                f"{lab}'s communication is {fmt_x(max_ratio)} more fragmented than {lab_o}'s",
                evidence + share_text,
                f"{cause}: every call pays the fixed latency alpha again, and small calls use the link poorly",
                action,
                estimate,
                subject=lab,
            )
        )
    return findings


def _prefetch_phrase(x: RuleInput, side: Side) -> tuple[str, int | None]:
    depth = x.arms[side].prefetch
    lab = x.labels[side]
    if depth is None:
        return f"arm {lab}'s prefetch setting is unknown (no manifest)", None
    return f"arm {lab} runs prefetch={depth}", depth


def _no_gather_action(lab: str, kinds: list[str]) -> str:
    """The low-overlap advice for an arm that gathers no parameters (layer prefetch moves all-gathers,
    so it cannot help): all-reduce only is DDP-style gradient sync."""
    said = f"{lab} issues {', '.join(kinds)} and no all_gather, so layer prefetch does not apply"
    if kinds == ["all_reduce"]:
        return (
            f"{said}: start the gradient all-reduces during backward (smaller buckets, e.g. DDP's "
            "bucket_cap_mb) or issue fewer (no_sync over gradient-accumulation steps)"
        )
    return f"{said}: issue these collectives earlier, beside compute that does not depend on them"


def rule_low_overlap(x: RuleInput) -> list[Finding]:
    findings = []
    for side in ("test", "base"):
        other = x.other(side)
        m, mo = x.mean[side], x.mean[other]
        ov, ov_o = m.overlap_ratio, mo.overlap_ratio
        exp, exp_o = m.exposed_comm_us, mo.exposed_comm_us
        step, step_o = m.step_time_us, mo.step_time_us
        if ov is None or exp is None or not step:
            continue
        absolute = ov < LOW_OVERLAP_RATIO and exp / step >= EXPOSED_SHARE
        relative = (
            ov_o is not None
            and exp_o is not None
            and bool(step_o)
            and ov <= ov_o - OVERLAP_GAP
            and exp - exp_o >= EXPOSED_GAP_SHARE * step_o
        )
        if not (absolute or relative):
            continue
        lab, lab_o = x.labels[side], x.labels[other]
        phrase, depth = _prefetch_phrase(x, side)
        kinds = sorted({r.type for r in x.collectives if r[side].count})
        action = (
            _no_gather_action(lab, kinds)
            if kinds and "all_gather" not in kinds
            else f"{phrase}: enable explicit layer prefetch (prefetch=1)"
            if depth == 0
            else f"{phrase}: try prefetch={depth + 1}"
            if depth is not None
            else f"{phrase}: enable explicit layer prefetch (prefetch=1 or deeper)"
        )
        evidence = (
            f"overlap {fmt_pct(ov)} ({lab}) vs {fmt_pct(ov_o)} ({lab_o}); exposed comm "
            f"{fmt_us(exp)} = {fmt_pct(exp / step)} of {lab}'s step"
            + (f" vs {fmt_us(exp_o)} ({lab_o})" if exp_o is not None else "")
        )
        per_unit = whatif.estimate_prefetch_units(
            x.analysis[side], **{k: v for k, v in m.breakdown().items() if k != "exposed_comm_us"}
        )
        if per_unit is not None:  # per (unit, phase): the exposed all-gathers one unit further ahead
            estimate = per_unit
            if ov_o is None or ov_o < ov + OVERLAP_GAP:  # and the bound, as without units
                best = whatif.estimate_overlap(target_overlap_ratio=1.0, **m.breakdown())
                estimate.best_case_step_time_delta_us = best.step_time_delta_us
        elif ov_o is not None and ov_o >= ov + OVERLAP_GAP:
            estimate = whatif.estimate_overlap(target_overlap_ratio=ov_o, **m.breakdown())
            estimate.scenario = f"{lab} hides comm as well as {lab_o} does ({fmt_pct(ov_o)})"
            estimate.basis = whatif.BASIS_STEP
        else:  # no arm shows what is achievable: give only the best case, which is a bound, not an estimate
            best = whatif.estimate_overlap(target_overlap_ratio=1.0, **m.breakdown())
            estimate = replace(
                best,
                exposed_comm_delta_us=None,
                step_time_delta_us=None,
                best_case_step_time_delta_us=best.step_time_delta_us,
                scenario=f"no arm overlaps much better than {lab}; best case = all comm hidden",
                basis=whatif.BASIS_STEP,
            )
        findings.append(
            Finding(
                "low_overlap",
                "high",
                f"{lab} leaves {fmt_us(exp)} of communication exposed (overlap {fmt_pct(ov)})",
                evidence,
                "collectives are issued when their layer needs them, not ahead of time, so compute waits",
                action,
                estimate,
                subject=lab,
            )
        )
    return findings


def rule_exposed_place(x: RuleInput) -> list[Finding]:
    """The (unit, phase) places where one arm exposes more communication than the other, each with its
    collectives, its exposed time and Δ, and how much of it was waiting for the rank that arrived last."""
    step = x.mean.base.step_time_us
    if not step or not x.places:
        return []
    findings = []
    for side in ("test", "base"):
        other = x.other(side)
        sign = 1.0 if side == "test" else -1.0
        hits = [
            r
            for r in plc.by_exposed_delta(x.places)
            if sign * (r.delta("exposed_us") or 0.0) >= PLACE_DELTA_SHARE * step
        ][:PLACE_MAX_LISTED]
        if not hits:
            continue
        lab, lab_o = x.labels[side], x.labels[other]
        data = x.analysis[side]
        phrases = [plc.place_phrase(r, side, data, lab_o) for r in hits]
        extra = sum(sign * (r.delta("exposed_us") or 0.0) for r in hits)
        total = safe_delta(x.mean[side].exposed_comm_us, x.mean[other].exposed_comm_us)
        top = hits[0]
        exposed, wait = top.value(side, "exposed_us"), top.value(side, "exposed_wait_us")
        waiting = wait is not None and bool(exposed) and wait / exposed >= PLACE_WAIT_SHARE
        rank = plc.waited_for(data, (top.unit, top.phase))
        if waiting:
            cause = (
                f"in {top.unit} {top.phase} the ranks mostly wait for "
                + (f"rank {rank}" if rank is not None else "the last rank")
                + " to arrive at the collective: the delay is that rank's work before it, not the transfer"
            )
            action = (
                f"find what delays {'rank ' + str(rank) if rank is not None else 'the last rank'} before "
                f"{top.unit} {top.phase}'s collective (imbalance, a host stall, a slow rank)"
            )
        else:
            cause = (
                f"in {top.unit} {top.phase} the collectives transfer while nothing computes: they are issued "
                "too late (or too fragmented) to overlap"
            )
            action = f"overlap {top.unit} {top.phase}'s collectives: prefetch them earlier or bucket them"
        findings.append(
            Finding(
                "exposed_place",
                "high" if sign * (top.delta("exposed_us") or 0.0) >= EXPOSED_SHARE * step else "medium",
                f"{lab}: {phrases[0]}",
                "; ".join(phrases)
                + f"; these {len(hits)} place(s) expose {fmt_us(extra, signed=True)} vs {lab_o}"
                + (f" of the step's {fmt_us(total, signed=True)}" if total is not None else ""),
                cause,
                action,
                subject=lab,
            )
        )
    return findings


PREFETCH_DIRECTIONS = ("forward", "backward")


def _prefetch_setting(directions: tuple[Depth, Depth], changed: list[int]) -> str:
    """One arm's prefetch in the directions that differ: ``prefetch=1`` when both differ and are equal,
    else ``backward prefetch=none`` (joined with ``, ``)."""
    if len(changed) == 2 and directions[0] == directions[1]:
        return f"prefetch={directions[0]}"
    return ", ".join(f"{PREFETCH_DIRECTIONS[d]} prefetch={directions[d]}" for d in changed)


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def prefetch_deeper_side(
    base: tuple[Depth, Depth], test: tuple[Depth, Depth], backends: tuple[str | None, str | None]
) -> Side | None:
    """The side that prefetches at least as far in both directions and further in one, ``default`` read as
    each side's backend's own (``config.arms.prefetch_units``); ``None`` when neither does or a depth is
    not in units."""
    units = [
        [prefetch_units(backend, d, dirs[d]) for d in (0, 1)]
        for dirs, backend in zip((base, test), backends, strict=True)
    ]
    if any(u is None for side in units for u in side):
        return None
    (b_fwd, b_bwd), (t_fwd, t_bwd) = units
    if t_fwd >= b_fwd and t_bwd >= b_bwd and (t_fwd, t_bwd) != (b_fwd, b_bwd):  # type: ignore[operator]
        return "test"
    if b_fwd >= t_fwd and b_bwd >= t_bwd and (t_fwd, t_bwd) != (b_fwd, b_bwd):  # type: ignore[operator]
        return "base"
    return None


def rule_prefetch_change(x: RuleInput) -> list[Finding]:
    """Two arms whose prefetch settings differ, per direction (``fwd_prefetch``/``bwd_prefetch``)."""
    db, dt = x.arms.base.prefetch_directions, x.arms.test.prefetch_directions
    if db is None or dt is None or db == dt:
        return []
    changed = [d for d in (0, 1) if db[d] != dt[d]]
    b, t = x.mean.base, x.mean.test
    lb, lt = x.labels.base, x.labels.test
    ovb, ovt = b.overlap_ratio, t.overlap_ratio
    eb, et = b.exposed_comm_us, t.exposed_comm_us
    sb, st = _prefetch_setting(db, changed), _prefetch_setting(dt, changed)
    if len(changed) == 2 and db[0] == db[1] and dt[0] == dt[1]:
        what = f"prefetch {db[0]} → {dt[0]}"
    else:
        what = ", ".join(f"{PREFETCH_DIRECTIONS[d]} prefetch {db[d]} → {dt[d]}" for d in changed)
    change = "" if ovb is None or ovt is None else f" ({fmt_points(ovt - ovb)})"
    measured = safe_delta(et, eb)
    evidence = (
        f"{what} ({lb} → {lt}): overlap {fmt_pct(ovb)} → {fmt_pct(ovt)}{change}; "
        f"exposed comm {fmt_us(eb)} → {fmt_us(et)}"
        + (f" ({fmt_us(measured, signed=True)})" if measured is not None else "")
    )
    deeper = prefetch_deeper_side(db, dt, (x.arms.base.backend, x.arms.test.backend))
    why = "explicit prefetch issues the next layer's all-gather while the current layer computes"
    if not b.comm_us and not t.comm_us:  # one rank (FSDP issues no collectives) or none recognised
        return [
            Finding(
                "prefetch_change",
                "info",
                f"{_capital(what)}: neither profile has communication to prefetch",
                f"{what} ({lb} → {lt}): no collectives in either arm's profiled step (one rank, where FSDP "
                "issues none, or collectives fsdpbench does not recognise); any step-time difference between "
                "them is not exposed communication",
                why,
                "profile with two ranks or more to see what the prefetch depth does to exposed communication",
            )
        ]
    estimate = None if measured is None else Estimate(label="measured", exposed_comm_delta_us=measured)
    if deeper is None:  # e.g. deeper forward but shallower backward, or DeepSpeed's bucket vs N layers
        lower = "test" if measured is not None and measured < 0 else "base"
        title = f"{_capital(what)}: exposed communication " + (
            fmt_us(measured, signed=True) if measured is not None else "not measured"
        )
        action = (
            f"neither arm prefetches further in every direction; keep the setting that exposes less "
            f"communication (arm {x.labels[lower]})"
            if measured is not None
            else "profile both arms to see which setting exposes less communication"
        )
        return [Finding("prefetch_change", "info", title, evidence, why, action, estimate)]
    shallower = "base" if deeper == "test" else "test"
    deep_text, shallow_text = (st, sb) if deeper == "test" else (sb, st)
    e_deep, e_shallow = (et, eb) if deeper == "test" else (eb, et)
    helped = e_deep is not None and e_shallow is not None and e_deep < e_shallow
    gap = safe_delta(e_deep, e_shallow)
    if helped:
        title = f"{_capital(deep_text)} exposes {fmt_us(-gap)} less communication than {shallow_text}"
        action = f"keep {deep_text} (arm {x.labels[deeper]})"
    else:
        title = f"{_capital(deep_text)} did not reduce exposed communication" + (
            f" ({fmt_us(gap, signed=True)} vs {shallow_text})" if gap is not None else ""
        )
        step_gap = safe_delta(x.mean[deeper].step_time_us, x.mean[shallower].step_time_us)
        shallower_step = x.mean[shallower].step_time_us
        if step_gap is not None and shallower_step and step_gap < -0.01 * shallower_step:
            action = (  # faster for another reason: do not advise against it on exposed comm alone
                f"its profiled step is {fmt_us(-step_gap)} shorter all the same, for a reason other than "
                f"exposed communication: check the timed verdict before choosing between {x.labels[deeper]} "
                f"and {x.labels[shallower]}"
            )
        else:
            action = (
                f"keep the shallower prefetch (arm {x.labels[shallower]}); deeper prefetch only costs memory "
                "here"
            )
    return [
        Finding("prefetch_change", "info" if helped else "medium", title, evidence, why, action, estimate)
    ]


def rule_host_bound(x: RuleInput) -> list[Finding]:
    """An arm whose idle time (the device, or on CPU the training thread, running neither compute nor
    communication) makes up most of its step-time difference: the host sets its pace."""
    b, t = x.mean.base, x.mean.test
    if None in (b.free_us, t.free_us, b.step_time_us, t.step_time_us) or not b.step_time_us:
        return []
    d_free, d_step = t.free_us - b.free_us, t.step_time_us - b.step_time_us
    if abs(d_free) < IDLE_DELTA_SHARE * b.step_time_us or d_free * d_step <= 0:
        return []
    if abs(d_free) < IDLE_OF_STEP_DELTA * abs(d_step):
        return []
    side: Side = "test" if d_free > 0 else "base"
    other = x.other(side)
    m, o = x.mean[side], x.mean[other]
    lab, lab_o = x.labels[side], x.labels[other]
    share = m.free_us / m.step_time_us if m.step_time_us else None
    launches = next((r for r in x.sync if r.name == "kernel_launch"), None)
    evidence = (
        f"idle {fmt_us(m.free_us)} of {lab}'s {fmt_us(m.step_time_us)} step ({fmt_pct(share)}) vs "
        f"{fmt_us(o.free_us)} of {lab_o}'s {fmt_us(o.step_time_us)}: {fmt_us(abs(d_free))} of the "
        f"{fmt_us(abs(d_step))} step difference; compute {fmt_us(o.compute_us)} → {fmt_us(m.compute_us)}"
    )
    if launches is not None and launches[side] is not None and launches[other] is not None:
        evidence += f"; kernel launches {fmt_count(launches[other])} → {fmt_count(launches[side])} per rank"
    cause = (
        "the device (on CPU, the training thread) waits for the host between its work: Python and FSDP "
        "hook work per unit, kernel launches, allocator and synchronisation calls"
    )
    severity = "high" if share is not None and share >= IDLE_HIGH_SHARE else "medium"
    fragmented = any(
        r[side].count and r[other].count and r[side].count / r[other].count >= FRAGMENTATION_COUNT_RATIO
        for r in x.collectives
    )
    if fragmented:  # the cause is the fragmentation finding's: keep this symptom below it
        severity = "medium"
        cause += (
            f"; {lab} also issues several times {lab_o}'s collective calls, and much of its idle time is the "
            "host work around each call, which the fragmentation finding prices"
        )
    return [
        Finding(
            "host_bound",
            severity,
            f"{lab} is host-bound: {fmt_us(abs(d_free))} more idle time than {lab_o}",
            evidence,
            cause,
            _action("host_bound"),
            Estimate(label="measured", step_time_delta_us=-abs(d_free), note="the idle-time difference"),
            subject=lab,
        )
    ]


def rule_peak_memory(x: RuleInput) -> list[Finding]:
    b, t = x.peak_memory.base, x.peak_memory.test
    if b is None or t is None or b.measure != t.measure or b.bytes <= 0:
        return []
    ratio = t.bytes / b.bytes
    if 1 / PEAK_MEMORY_RATIO <= ratio <= PEAK_MEMORY_RATIO:
        return []
    higher = "test" if ratio > 1 else "base"
    causes = []
    ab, at = x.arms.base, x.arms.test
    if ab.prefetch is not None and at.prefetch is not None and ab.prefetch != at.prefetch:
        causes.append(f"prefetch {ab.prefetch} vs {at.prefetch} (each prefetched unit is held unsharded)")
    if ab.reshard_after_forward != at.reshard_after_forward:
        causes.append("reshard_after_forward differs (unresharded units stay gathered until backward)")
    if ab.backend != at.backend:
        causes.append(
            f"backends {ab.backend} vs {at.backend} (their communication buffers and caches differ)"
        )
    cause = (
        "; ".join(causes)
        if causes
        else "the arm options the diff knows do not differ in a memory-relevant way"
    )
    mb, mtest = x.memory_peaks.base, x.memory_peaks.test
    if mb is not None and mtest is not None:
        cause += f"; in the memory step (rank {mb['rank']}): " + memory_timeline.difference_text(
            x.labels.base, x.labels.test, mb, mtest
        )
    else:
        cause += "; where in the step (phase, unit, category): no memory timeline (profile the run)"
    return [
        Finding(
            "peak_memory",
            "medium" if higher == "test" else "info",
            f"{x.labels.test} peaks {abs(ratio - 1):.0%} {'higher' if ratio > 1 else 'lower'} in memory "
            f"than {x.labels.base}",
            f"{b.measure}: {fmt_bytes(b.bytes)} ({x.labels.base}) → {fmt_bytes(t.bytes)} ({x.labels.test}), "
            f"test/base {ratio:.3f}",
            cause,
            _action("peak_memory"),
            subject=x.labels[higher],
        )
    ]


def rule_sync_storm(x: RuleInput) -> list[Finding]:
    findings = []
    for side in ("test", "base"):
        other = x.other(side)
        hits = [
            r
            for r in x.sync
            if r[side] is not None
            and r[other] is not None
            and r[side] - r[other] >= SYNC_MIN_DELTA
            and r[side] >= SYNC_RATIO * r[other]
        ]
        if not hits:
            continue
        lab, lab_o = x.labels[side], x.labels[other]
        evidence = "; ".join(
            f"{r.label} {fmt_count(r[side])} vs {fmt_count(r[other])} (+{fmt_count(r[side] - r[other])} per rank)"
            for r in hits
        )
        findings.append(
            Finding(
                "sync_storm",
                "medium",
                f"{lab} issues far more sync/launch tasks than {lab_o}",
                evidence,
                "synchronisation or a launch per parameter or per collective: each one stalls the host or the "
                "device queue",
                _action("sync_storm"),
                Estimate(note="not priced: the trace does not give the cost of one sync"),
                subject=lab,
            )
        )
    return findings


def rule_compute_path(x: RuleInput) -> list[Finding]:
    step = x.mean.base.step_time_us
    if not step:
        return []
    hits = [r for r in x.ops if abs(r.delta_us) >= OP_DELTA_SHARE * step]
    if not hits:
        return []
    hits = sorted(hits, key=lambda r: -abs(r.delta_us))[:OP_MAX_LISTED]
    lb, lt = x.labels.base, x.labels.test
    net = sum(r.delta_us for r in hits)
    evidence = "; ".join(
        f"{r.op_type} {fmt_us(r.delta_us, signed=True)} ({fmt_us(r.base.us)} → "
        f"{fmt_us(r.test.us)}, count {fmt_count(r.base.count)} → {fmt_count(r.test.count)})"
        for r in hits
    )
    slower = [r for r in hits if r.delta_us > 0]
    faster = [r for r in hits if r.delta_us < 0]
    if net < 0:  # the test arm is faster overall: price what the base would gain from the test's ops
        title, adopter, donor, gain_rows = f"{lt}'s compute path is faster on ", lb, lt, faster
    else:
        title, adopter, donor, gain_rows = f"{lt}'s compute path is slower on ", lt, lb, slower
    title += ", ".join(r.op_type for r in gain_rows)
    return [
        Finding(
            "compute_path",
            "medium" if net > 0 else "info",
            title,
            f"{lt} − {lb} kernel time: {evidence}",
            "the arms run different ops for the same model step (e.g. copies/slices around the flat buffers, "
            "casts for mixed precision)",
            f"adopt {donor}'s path for {', '.join(r.op_type for r in gain_rows)} in {adopter}",
            Estimate(
                step_time_delta_us=-sum(abs(r.delta_us) for r in gain_rows),
                scenario=f"{adopter} runs {donor}'s faster ops; an upper bound on the gain, as compute may overlap comm",
            ),
        )
    ]


def rule_straggler(x: RuleInput) -> list[Finding]:
    findings = []
    for side in ("base", "test"):
        ranks = x.ranks[side]
        key = "compute_us" if all(r.compute_us is not None for r in ranks) else "step_time_us"
        values = [(r.rank, getattr(r, key)) for r in ranks if getattr(r, key) is not None]
        if len(values) < 2:
            continue
        # compare each rank with the median of the *other* ranks (with 2 ranks: the other rank)
        skews = []
        for i, (rank, v) in enumerate(values):
            others = median(w for j, (_, w) in enumerate(values) if j != i)
            if others > 0 and v >= others * (1 + STRAGGLER_SKEW):
                skews.append((v / others - 1, rank, v, others))
        if not skews:
            continue
        _, rank, worst, mid = max(skews)
        lab = x.labels[side]
        what = "compute" if key == "compute_us" else "step time"
        findings.append(
            Finding(
                "straggler",
                "medium",
                f"rank {rank} is a straggler in {lab}",
                f"rank {rank} {what} {fmt_us(worst)} vs {fmt_us(mid)} "
                + (
                    "on the other rank "
                    if len(values) == 2
                    else f"(median of the other {len(values) - 1} ranks) "
                )
                + f"(+{fmt_pct(worst / mid - 1)})",
                "one rank computes longer and every collective waits for it",
                f"find why rank {rank} of {lab} computes longer (placement, imbalance, a noisy neighbour)",
                Estimate(
                    step_time_delta_us=-(worst - mid),
                    scenario=f"rank {rank} computes as fast as the other ranks (median)",
                ),
                subject=lab,
            )
        )
    return findings


def rule_hccl_avg_division(x: RuleInput) -> list[Finding]:
    """HCCL has no AVG reduce: torch_npu sums, then divides on the HCCL stream, once per collective, so
    an arm that issues more reduce-scatters also runs more divides (the study's "RealDiv 173 vs 73")."""
    per: dict[str, dict[str, OpSide]] = {"base": {}, "test": {}}
    for r in x.ops:
        m = HCCL_AVG_RE.match(r.op_type)
        if not m:
            continue
        for side in ("base", "test"):
            acc = per[side].get(m["collective"], OpSide())
            per[side][m["collective"]] = OpSide(acc.us + r[side].us, acc.count + r[side].count)
    n = {side: sum(v.count for v in per[side].values()) for side in per}
    us = {side: sum(v.us for v in per[side].values()) for side in per}
    if not (n["base"] or n["test"]) or n["base"] == n["test"]:
        return []
    more: Side = "test" if n["test"] > n["base"] else "base"
    fewer = x.other(more)
    lab, lab_o = x.labels[more], x.labels[fewer]
    delta = us[more] - us[fewer]
    step = x.mean.base.step_time_us
    severity = "medium" if step and delta >= OP_DELTA_SHARE * step else "info"

    def side_text(side: str) -> str:
        parts = [
            f"{fmt_count(v.count)} after {COLLECTIVE_NAMES.get(c, c)}"
            for c, v in sorted(per[side].items())
            if v.count
        ]
        return f"{fmt_count(n[side])} ({', '.join(parts) or 'none'}; {fmt_us(us[side])})"

    return [
        Finding(
            "hccl_avg_division",
            severity,
            f"{lab} runs {fmt_count(n[more])} HCCL AVG divides vs {fmt_count(n[fewer])} in {lab_o}",
            f"divide kernels on the HCCL stream: {lab} {side_text(more)}; {lab_o} {side_text(fewer)}",
            "HCCL has no AVG reduce: torch_npu reduces with SUM and then divides on the HCCL stream, one divide "
            "kernel per reduce-scatter/all-reduce, so more (per-parameter) collectives mean as many more divides, "
            "counted as compute",
            _action("hccl_avg_division"),
            Estimate(
                step_time_delta_us=-delta if delta > 0 else None,
                scenario=f"{lab} runs as many divides as {lab_o}; an upper bound, as they may overlap other work",
            ),
            subject=lab,
        )
    ]


# ---- the rules table --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One documented rule: its id, when it fires, its severity, the action it recommends, its check."""

    id: str
    fires_when: str
    severity: str
    action: str
    check: Callable[[RuleInput], list[Finding]] = field(repr=False, compare=False)


RULES: tuple[Rule, ...] = (
    Rule(
        "invalid_comparison",
        "parity failed, or world size, analysed ranks, model or profiled steps differ between the arms",
        "high",
        "compare like with like: same model, world size and step; fix parity first",
        rule_invalid_comparison,
    ),
    Rule(
        "step_time",
        "always (both step times known): the headline and its breakdown",
        "info",
        "none: read the findings below for the causes",
        rule_step_time,
    ),
    Rule(
        "fragmentation",
        f"a collective type's count ratio >= {FRAGMENTATION_COUNT_RATIO:g}x with bytes ratio in "
        f"[{SIMILAR_BYTES[0]}, {SIMILAR_BYTES[1]}]",
        f"high if those collectives take >= {FRAGMENTATION_HIGH_SHARE:.0%} of the step, else medium",
        "bucket per-parameter collectives per module (one all-gather/reduce-scatter per shard unit); "
        "or enable comm fusion (hyper arms) or let DeepSpeed coalesce a prefetch bucket (prefetch=1 or a larger "
        "`stage3_prefetch_bucket_size`)",
        rule_fragmentation,
    ),
    Rule(
        "low_overlap",
        f"an arm's overlap ratio < {LOW_OVERLAP_RATIO} with exposed comm >= {EXPOSED_SHARE:.0%} of its step, "
        f"or its overlap is >= {OVERLAP_GAP} below the other arm's with exposed comm larger by >= "
        f"{EXPOSED_GAP_SHARE:.0%} of the other's step",
        "high",
        "explicit layer prefetch (the arm's prefetch setting is named; try one deeper); for an arm with no "
        "all_gather (all_reduce only: DDP-style), gradient all-reduces started during backward instead",
        rule_low_overlap,
    ),
    Rule(
        "exposed_place",
        f"a (unit, phase) exposes more comm in one arm by >= {PLACE_DELTA_SHARE:.0%} of the base step "
        f"(top {PLACE_MAX_LISTED} per arm, from the profiles' units and waits)",
        f"high if the largest is >= {EXPOSED_SHARE:.0%} of the step, else medium",
        f"waiting >= {PLACE_WAIT_SHARE:.0%} of it: find what delays the rank that arrives last; else overlap "
        "that unit's collectives (prefetch earlier, bucket)",
        rule_exposed_place,
    ),
    Rule(
        "prefetch_change",
        "the arms' prefetch settings differ in either direction (from the manifest, as run)",
        "info, or medium when the deeper prefetch did not reduce exposed comm",
        "keep the prefetch depth that exposes less comm",
        rule_prefetch_change,
    ),
    Rule(
        "host_bound",
        f"an arm's idle time (neither compute nor comm) is larger by >= {IDLE_DELTA_SHARE:.0%} of the base "
        f"step and makes up >= {IDLE_OF_STEP_DELTA:.0%} of the step-time difference",
        f"high if that idle time is >= {IDLE_HIGH_SHARE:.0%} of the arm's step and the arm is not fragmented "
        "(then the fragmentation finding comes first), else medium",
        "cut host work per step: fewer, larger FSDP units and collectives (fewer hooks and launches), "
        "CUDA/NPU graphs or torch.compile, or a larger batch or sequence so device work covers the host",
        rule_host_bound,
    ),
    Rule(
        "sync_storm",
        f"a sync/launch count >= {SYNC_RATIO:g}x the other arm's and >= {SYNC_MIN_DELTA} more per rank",
        "medium",
        "remove per-parameter synchronisation and launches (fewer, larger operations)",
        rule_sync_storm,
    ),
    Rule(
        "peak_memory",
        f"the arms' peak memory (same measure on both) differs by more than {PEAK_MEMORY_RATIO - 1:.0%}",
        "medium when the test arm peaks higher, else info",
        "check the higher arm fits the target device with `fsdpbench model --device`; trade prefetch depth "
        "or activation checkpointing for memory",
        rule_peak_memory,
    ),
    Rule(
        "compute_path",
        f"op types whose time differs by >= {OP_DELTA_SHARE:.0%} of the base step (top {OP_MAX_LISTED})",
        "medium when the test arm is slower in total, else info",
        "adopt the faster arm's op path for those op types",
        rule_compute_path,
    ),
    Rule(
        "straggler",
        f"a rank's compute time >= {STRAGGLER_SKEW:.0%} above the median of the other ranks",
        "medium",
        "find why that rank computes longer (placement, imbalance, a noisy neighbour)",
        rule_straggler,
    ),
    Rule(
        "hccl_avg_division",
        "an arm runs divide kernels on the HCCL stream (torch_npu's ReduceOp.AVG = SUM + one divide per "
        "reduce-scatter/all-reduce) and the arms' counts differ",
        f"medium when the divides' time differs by >= {OP_DELTA_SHARE:.0%} of the base step, else info",
        "fewer, bucketed reduce-scatters (one divide per bucket), or reduce with SUM and scale the gradients once",
        rule_hccl_avg_division,
    ),
)
RULE_ORDER = {r.id: i for i, r in enumerate(RULES)}
RULE_BY_ID = {r.id: r for r in RULES}


def _gain(f: Finding) -> float:
    delta = None if f.estimate is None else f.estimate.step_time_delta_us
    return 0.0 if delta is None else -delta


def evaluate(x: RuleInput) -> list[Finding]:
    """Run every rule and rank the findings.

    Order: an invalid comparison first, the step-time headline second, then by severity, then by
    the estimated step-time gain (largest first), then by the order of ``RULES``.
    """
    findings = [f for rule in RULES for f in rule.check(x)]
    if all(f.id in ("invalid_comparison", "step_time") for f in findings):
        for f in findings:
            if f.id == "step_time":
                f.cause = "no rule found a cause: the breakdown in the evidence is all there is"
                f.action = "none from the rules: compare the op types and the timeline of the two arms"
    pinned = {"invalid_comparison": 0, "step_time": 1}
    return sorted(
        findings,
        key=lambda f: (pinned.get(f.id, 2), SEVERITY_ORDER.get(f.severity, 9), -_gain(f), RULE_ORDER[f.id]),
    )
