"""Diff two profile analyses (base = control, test): side by side, collectives, ops, syncs, fits, findings.

``diff_analyses(base, test)`` works on the Analysis JSON of docs/DATA.md (or an ``Analysis`` object, whose
``record()`` gives it) plus, when present, each rank's ``collective_events`` table for the α–β fits.
``fsdpbench.analysis.derived.diff_run(run_dir)`` does it for a profiled ``fsdpbench ab`` run: the first arm of the
manifest is the base, every other arm a test. The vocabulary follows HTA's TraceDiff (control/test, ``test − base``
deltas, change categories added/deleted/increased/decreased/unchanged). The result is data; its
markdown and terminal renderings are in ``fsdpbench.report.diff_md`` and ``fsdpbench.report.terminal``.

Torch-free on purpose.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pandas as pd

from fsdpbench.analysis import findings as fnd
from fsdpbench.analysis.compare import calibration
from fsdpbench.analysis.estimate import whatif, whatif_units
from fsdpbench.analysis.findings import (
    METRICS,
    CollectiveRow,
    CollectiveSide,
    OpRow,
    OpSide,
    Pair,
    SideMetrics,
    SyncRow,
    finite,
    safe_delta,
    safe_ratio,
)
from fsdpbench.analysis.findings import places as plc
from fsdpbench.analysis.output.result import FIT_EVENT_COLUMNS, Analysis
from fsdpbench.analysis.rank import memory_timeline as mt
from fsdpbench.errors import InputError
from fsdpbench.records import Record

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
METRIC_NAMES = {
    "step_time_us": "step time",
    "compute_us": "compute",
    "comm_us": "communication",
    "overlap_ratio": "overlap ratio",
    "exposed_comm_us": "exposed comm",
    "free_us": "free",
    "kernel_time_us": "total kernel time",
}


# ---- input normalisation ----------------------------------------------------------------------------


def _events_table(value: Any, what: str) -> pd.DataFrame | None:
    """A rank's collective events as the fits' DataFrame: given as one, as columns (analysis.json:
    ``RankMetrics.fit_event_columns``) or as ``[type, bytes, start_ns, end_ns]`` records."""
    if value is None:
        return None
    if isinstance(value, pd.DataFrame):
        return value
    if not isinstance(value, Mapping):
        return pd.DataFrame(list(value), columns=list(FIT_EVENT_COLUMNS))
    missing = [c for c in FIT_EVENT_COLUMNS if c not in value]
    lengths = {len(v) if hasattr(v, "__len__") and not isinstance(v, str) else -1 for v in value.values()}
    if missing or len(lengths) != 1 or -1 in lengths:
        raise InputError(
            f"{what}: a rank's collective_events must be columns {list(FIT_EVENT_COLUMNS)} of one "
            f"length (missing: {missing or 'none'}); analyze the profiles again (fsdpbench diff --reanalyze)"
        )
    frame = pd.DataFrame({c: value[c] for c in value})
    frame["bytes"] = frame["bytes"].astype(float)  # null (unknown size) → NaN, as in a fresh analysis
    return frame


def normalise(analysis: Any, what: str) -> tuple[dict[str, Any], list[pd.DataFrame | None]]:
    """The Analysis JSON dict and the per-rank collective event tables (``None`` where absent).

    Accepts an ``Analysis`` object (its ``record()``; events from ``.ranks[i].collective_events``)
    or the dict itself (events from each rank dict's optional ``collective_events``: a DataFrame or
    records). Raises ``InputError`` naming ``what`` when it is neither or has no ranks.
    """
    events: list[pd.DataFrame | None] = []
    if isinstance(analysis, Analysis):
        data = analysis.record().to_dict()
        for rank in getattr(analysis, "ranks", None) or []:
            events.append(_events_table(getattr(rank, "collective_events", None), what))
    elif isinstance(analysis, Mapping):
        data = dict(analysis)
        ranks = []
        for rank in data.get("ranks") or []:
            rank = dict(rank)
            events.append(_events_table(rank.pop("collective_events", None), what))
            ranks.append(rank)
        data["ranks"] = ranks
    else:
        raise InputError(
            f"{what}: expected an analysis (Analysis or its JSON dict), got {type(analysis).__name__}"
        )
    if not data.get("ranks"):
        raise InputError(f"{what}: the analysis has no ranks; analyze the profiles first (fsdpbench analyze)")
    events += [None] * (len(data["ranks"]) - len(events))
    return data, events


def _rank_metrics(data: Mapping[str, Any]) -> list[SideMetrics]:
    return [SideMetrics.from_mapping(r, rank=r.get("rank", i)) for i, r in enumerate(data["ranks"])]


def _mean_metrics(data: Mapping[str, Any], ranks: list[SideMetrics]) -> SideMetrics:
    """The analysis' own ``mean`` where it gives a metric, else the mean over the ranks that have it."""
    given = SideMetrics.from_mapping(data.get("mean") or {})
    out = {}
    for key in METRICS:
        values = [getattr(r, key) for r in ranks if getattr(r, key) is not None]
        own = getattr(given, key)
        out[key] = own if own is not None else (sum(values) / len(values) if values else None)
    return SideMetrics(**out)


def _mean_table(
    ranks: list[Mapping[str, Any]],
    rows_of: Callable[[Mapping[str, Any]], list[dict[str, Any]]],
    key: str,
    fields: tuple[str, ...],
) -> dict[str, dict[str, float | None]]:
    """Mean over ranks of ``fields`` per ``key`` value; a key missing on a rank counts as 0 there."""
    per_rank = [{str(row[key]): row for row in rows_of(r)} for r in ranks]
    keys = sorted({k for table in per_rank for k in table})
    out: dict[str, dict[str, float | None]] = {}
    for k in keys:
        out[k] = {}
        for f in fields:
            values = [finite(table[k].get(f)) if k in table else 0.0 for table in per_rank]
            known = [v for v in values if v is not None]
            out[k][f] = sum(known) / len(known) if known else None
    return out


def _collective_rows(rank: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"type": t, **v} for t, v in (rank.get("collectives") or {}).items()]


def _sync_rows(rank: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"name": n, "value": v} for n, v in (rank.get("sync") or {}).items()]


# ---- the result ---------------------------------------------------------------------------------------


def _metric_deltas(base: SideMetrics, test: SideMetrics) -> dict[str, float | None]:
    """``test − base`` per metric."""
    return {k: safe_delta(getattr(test, k), getattr(base, k)) for k in METRICS}


@dataclass(frozen=True)
class RankPair(Record):
    """One rank on both sides (``None`` where a side has no profile of that rank)."""

    _keys: ClassVar[tuple[str, ...]] = ("rank", "base", "test", "delta")

    rank: int | None = None
    base: SideMetrics | None = None
    test: SideMetrics | None = None

    def __post_init__(self) -> None:
        # the sides' rank is the pair's (a file writes it once, on the pair)
        for side in ("base", "test"):
            metrics = getattr(self, side)
            if metrics is not None and metrics.rank != self.rank:
                object.__setattr__(self, side, dataclasses.replace(metrics, rank=self.rank))

    @property
    def delta(self) -> dict[str, float | None] | None:
        """``test − base`` per metric; ``None`` unless both sides have this rank."""
        return None if self.base is None or self.test is None else _metric_deltas(self.base, self.test)


@dataclass(frozen=True)
class MeanPair(Pair[SideMetrics]):
    """Both arms' rank-mean metrics (the Diff JSON's ``side_by_side.mean``) with their deltas and ratios
    (``ratio`` omits ``overlap_ratio``: its delta is in points); a side the file leaves out has no metrics."""

    _keys: ClassVar[tuple[str, ...]] = ("base", "test", "delta", "ratio")

    base: SideMetrics = field(default_factory=SideMetrics)
    test: SideMetrics = field(default_factory=SideMetrics)

    @property
    def delta(self) -> dict[str, float | None]:
        return _metric_deltas(self.base, self.test)

    @property
    def ratio(self) -> dict[str, float | None]:
        return {
            k: safe_ratio(getattr(self.test, k), getattr(self.base, k))
            for k in METRICS
            if k != "overlap_ratio"
        }


@dataclass(frozen=True)
class SideBySide(Record):
    """The step breakdown of both arms: the mean over ranks and each rank; deltas are ``test − base``."""

    _keys: ClassVar[tuple[str, ...]] = ("metrics", "mean", "ranks")

    mean: MeanPair = field(default_factory=MeanPair)
    ranks: list[RankPair] = field(default_factory=list)

    @property
    def metrics(self) -> list[str]:
        """The metric keys, in the order every table shows them."""
        return list(METRICS)

    def delta(self, key: str) -> float | None:
        """The rank-mean ``test − base`` of one metric."""
        return safe_delta(getattr(self.mean.test, key), getattr(self.mean.base, key))


def _no_estimates() -> Pair[whatif.Estimate | None]:
    return Pair(None, None)


def _no_waits() -> Pair[list[plc.TopCollective]]:
    return Pair([], [])


@dataclass
class DiffResult(Record):
    """The comparison of a test arm against a base arm: the Diff JSON of docs/DATA.md, one entry of diff.json.

    Every part is typed (``SideBySide`` here, the rows and findings in ``fsdpbench.analysis.findings``);
    ``to_dict()`` gives the JSON object and ``from_dict`` reads one, checking ``schema_version`` first
    and then every field's type (errors name the file, where the caller gives it, and the field). What
    the JSON derives (deltas, ratios) is computed again; a part the object leaves out is empty (a report
    shows what is there).
    """

    _keys: ClassVar[tuple[str, ...]] = (
        "schema_version",
        "base",
        "test",
        "warnings",
        "side_by_side",
        "collectives",
        "ops",
        "sync",
        "fits",
        "findings",
        "calibration",
        "distortion",
        "memory_timeline",
        "places",
        "top_waits",
        "prefetch_estimates",
    )
    _omit_if_none: ClassVar[frozenset[str]] = frozenset({"distortion", "memory_timeline"})
    _schema_version: ClassVar[int | None] = SCHEMA_VERSION

    base: str
    test: str
    side_by_side: SideBySide = field(default_factory=SideBySide)
    collectives: list[CollectiveRow] = field(default_factory=list)
    ops: list[OpRow] = field(default_factory=list)
    sync: list[SyncRow] = field(default_factory=list)
    fits: dict[str, dict[str, whatif.AlphaBetaFit]] = field(default_factory=dict)
    """α–β fits by source and collective type; a source without any fit is left out."""
    findings: list[fnd.Finding] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    calibration: list[dict[str, Any]] = field(default_factory=list)
    """Estimates checked against their counterfactual arm (``fsdpbench.analysis.compare.calibration`` entries)."""
    distortion: dict[str, Any] | None = None
    """Each arm's profiled/timed step ratio (``calibration.distortion``); ``None`` without timed medians."""
    memory_timeline: dict[str, Any] | None = None
    """``{"base", "test", "difference"}``: the memory step's peaks (``memory_timeline.peak_summary``) and
    ``peak_difference``; ``None`` unless both arms have a memory timeline."""
    places: list[plc.PlaceRow] = field(default_factory=list)
    """Both arms per (unit, phase) (``analysis.findings.places``); ``[]`` when neither trace has fsdpbench's ranges."""
    top_waits: Pair[list[plc.TopCollective]] = field(default_factory=_no_waits)
    """Each arm's slowest matched collectives (``places.top_collectives``)."""
    prefetch_estimates: Pair[whatif.Estimate | None] = field(default_factory=_no_estimates)
    """Each arm's per-(unit, phase) prefetch estimate (``whatif_units.estimate_prefetch_units``; ``None`` without
    units), whether or not a finding fired: the calibration's prefetch prediction."""

    def __post_init__(self) -> None:
        # as diff.json holds them: no empty fit source, and whether a place is compared told from all rows
        self.fits = {source: fits for source, fits in self.fits.items() if fits}
        self.places = plc.mark_compared(self.places)

    @property
    def schema_version(self) -> int:
        return SCHEMA_VERSION

    def finding(self, rule_id: str) -> fnd.Finding | None:
        """The first finding of ``rule_id``, or ``None``."""
        return next((f for f in self.findings if f.id == rule_id), None)


def diffs_from_json(
    entries: Sequence[Any], what: str, skipped: Callable[[InputError], None] | None = None
) -> list[DiffResult]:
    """diff.json's entries (``run_folder.diff_list``: one object, or a list of them) as typed diffs.

    Args:
        entries: the file's Diff JSON objects.
        what: the file, as errors name it (``results/x/diff.json``).
        skipped: given each entry that is not a Diff JSON object of this schema (its ``InputError`` names
            ``what`` and the field: ``$.ops[2].base_us`` in a file of one diff, ``$[1].ops[2].base_us`` in a
            list), which is then left out; ``None``: such an entry raises that error.
    """
    out = []
    for i, entry in enumerate(entries):
        try:
            out.append(DiffResult.from_dict(entry, what, "$" if len(entries) == 1 else f"$[{i}]"))
        except InputError as exc:
            if skipped is None:
                raise
            skipped(exc)
    return out


def add_calibration(
    result: DiffResult,
    arms: Mapping[str, Mapping[str, Any]],
    timed_ms: Mapping[str, float | None],
    pair_diffs: Sequence[Mapping[str, Any]] = (),
) -> DiffResult:
    """Check the diff's estimates against the measured counterfactual and record each arm's distortion.

    Args:
        result: the diff (its own estimates are calibrated when its arms form a counterfactual pair).
        arms: manifest arm dicts by label (at least the diff's two arms).
        timed_ms: timed median step time (ms) by arm label (summary.json ``arms[label].median_ms``).
        pair_diffs: Diff JSON dicts of other arm pairs (computed in memory) whose entries belong here.
    Returns:
        ``result``, with ``calibration`` extended, ``distortion`` set for its two arms (when both have a
        timed median), and the distortion warning added to ``warnings``.
    """
    for d in [result.to_dict(), *pair_diffs]:
        result.calibration += calibration.calibrate_diff(d, arms, timed_ms)
    timed = {label: timed_ms.get(label) for label in (result.base, result.test)}
    if all(v is not None for v in timed.values()):
        mean = result.side_by_side.mean
        profiled = {
            result.base: None if mean.base.step_time_us is None else mean.base.step_time_us / 1e3,
            result.test: None if mean.test.step_time_us is None else mean.test.step_time_us / 1e3,
        }
        result.distortion = calibration.distortion(timed, profiled)
        result.warnings += [w for w in result.distortion["warnings"] if w not in result.warnings]
    return result


# ---- comparison ---------------------------------------------------------------------------------------


def _side_by_side(ranks: Pair[list[SideMetrics]], mean: Pair[SideMetrics]) -> SideBySide:
    by_rank_b = {r.rank: r for r in ranks.base}
    by_rank_t = {r.rank: r for r in ranks.test}
    order = sorted(set(by_rank_b) | set(by_rank_t), key=lambda x: (x is None, x))
    return SideBySide(
        MeanPair(mean.base, mean.test),
        [RankPair(rank, by_rank_b.get(rank), by_rank_t.get(rank)) for rank in order],
    )


def _collectives(db: Mapping[str, Any], dt: Mapping[str, Any]) -> list[CollectiveRow]:
    fields = ("count", "bytes", "time_us")
    cb = _mean_table(db["ranks"], _collective_rows, "type", fields)
    ct = _mean_table(dt["ranks"], _collective_rows, "type", fields)
    order = list(fnd.COLLECTIVE_NAMES)
    return [
        CollectiveRow.from_sides(kind, CollectiveSide(**cb.get(kind, {})), CollectiveSide(**ct.get(kind, {})))
        for kind in sorted(set(cb) | set(ct), key=lambda k: (order.index(k) if k in order else len(order), k))
    ]


def _ops(db: Mapping[str, Any], dt: Mapping[str, Any]) -> list[OpRow]:
    """Op types of both sides, the names CANN lists as one operator (``ReduceSumD`` and ``ReduceSum``,
    :data:`~fsdpbench.trace.ascend_ops.OP_ALIASES`) compared as one row under the operator's name."""
    from fsdpbench.trace.ascend_ops import canonical_op_type

    fields = ("total_us", "count")
    ob = _mean_table(db["ranks"], lambda r: r.get("ops") or [], "op_type", fields)
    ot = _mean_table(dt["ranks"], lambda r: r.get("ops") or [], "op_type", fields)
    groups: dict[str, set[str]] = {}
    for op in set(ob) | set(ot):
        groups.setdefault(canonical_op_type(op), set()).add(op)
    rows = []
    for op, names in groups.items():
        sides = []
        for table in (ob, ot):
            mine = [table[n] for n in names if n in table]
            sides.append(
                OpSide(sum(m["total_us"] or 0.0 for m in mine), sum(m["count"] or 0.0 for m in mine))
                if mine
                else OpSide()
            )
        b, t = sides
        delta = t.us - b.us
        change = (
            "added"
            if not b.count
            else "deleted"
            if not t.count
            else "unchanged"
            if delta == 0
            else "increased"
            if delta > 0
            else "decreased"
        )
        rows.append(OpRow.from_sides(op, b, t, change, tuple(sorted(names - {op}))))
    return sorted(rows, key=lambda r: (-abs(r.delta_us), r.op_type))


def _sync(db: Mapping[str, Any], dt: Mapping[str, Any]) -> list[SyncRow]:
    sb = _mean_table(db["ranks"], _sync_rows, "name", ("value",))
    st = _mean_table(dt["ranks"], _sync_rows, "name", ("value",))
    order = list(fnd.SYNC_NAMES)
    return [
        SyncRow(name, sb.get(name, {}).get("value"), st.get(name, {}).get("value"))
        for name in sorted(set(sb) | set(st), key=lambda k: (order.index(k) if k in order else len(order), k))
    ]


def _aggregate_fits(db: Mapping[str, Any], dt: Mapping[str, Any]) -> dict[str, whatif.AlphaBetaFit]:
    points: dict[str, list[tuple[Any, Any, Any]]] = {}
    for data in (db, dt):
        for rank in data["ranks"]:
            for kind, c in (rank.get("collectives") or {}).items():
                # transfer time where the analysis split it (waiting is not the link's cost)
                time_us = c.get("transfer_us") if c.get("transfer_us") is not None else c.get("time_us")
                points.setdefault(kind, []).append((c.get("count"), c.get("bytes"), time_us))
    return {k: whatif.fit_aggregates(*zip(*pts, strict=True)) for k, pts in sorted(points.items())}


def _labelled(label: str, warning: str) -> str:
    """``warning`` prefixed by its side's label, unless it already begins with that name (a one-rank
    side labelled by its folder, ``test_rank_0``, whose reader names the folder itself)."""
    return warning if warning.startswith(f"{label}: ") else f"{label}: {warning}"


def _describe(label: str, data: Mapping[str, Any], side_ctx: Mapping[str, Any]) -> str:
    ws = side_ctx.get("world_size") or len(data["ranks"])
    steps = sorted({r.get("step") for r in data["ranks"] if r.get("step") is not None})
    src = ", ".join(str(s) for s in (data.get("sources") or [])) or "in-memory analysis"
    return f"{label} ({ws} ranks{f', step {steps[0]}' if len(steps) == 1 else ''}; {src})"


def _problems(db: Mapping[str, Any], dt: Mapping[str, Any], context: Mapping[str, Any]) -> list[str]:
    problems = []
    parity = context.get("parity") or {}
    if parity.get("valid") is False:
        problems.append(
            f"numerical parity failed ({parity.get('reason') or 'losses differ'}): the arms may not "
            "compute the same thing"
        )
    cb, ct = context.get("base") or {}, context.get("test") or {}
    wb, wt = cb.get("world_size") or len(db["ranks"]), ct.get("world_size") or len(dt["ranks"])
    if wb != wt:
        problems.append(f"world size differs ({wb} vs {wt} ranks): per-rank communication is not comparable")
    elif len(db["ranks"]) != len(dt["ranks"]):
        problems.append(
            f"ranks analysed differ ({len(db['ranks'])} vs {len(dt['ranks'])} of {wb}): a rank's "
            "profile is missing or unreadable, so the means cover different ranks"
        )
    mb, mt = cb.get("model"), ct.get("model")
    if isinstance(mb, Mapping) and isinstance(mt, Mapping) and mb != mt:
        keys = sorted(k for k in set(mb) | set(mt) if mb.get(k) != mt.get(k))
        shown = ", ".join(f"{k} {mb.get(k)!r} vs {mt.get(k)!r}" for k in keys[:5])
        problems.append(f"model differs ({shown}): the arms ran different workloads")
    nb = {len(r.get("steps") or []) for r in db["ranks"]} - {0}
    nt = {len(r.get("steps") or []) for r in dt["ranks"]} - {0}
    if nb and nt and nb != nt:
        problems.append(
            f"number of profiled steps differs ({sorted(nb)} vs {sorted(nt)}): totals cover different work"
        )
    sb = {r.get("step") for r in db["ranks"]} - {None}
    st = {r.get("step") for r in dt["ranks"]} - {None}
    if sb and st and sb != st:
        problems.append(
            f"profiled step differs (step {sorted(sb)} vs {sorted(st)}): warm-up effects may differ"
        )
    return problems


def _peak_memory(context: Mapping[str, Any], label: str) -> fnd.PeakMemory | None:
    """An arm's peak memory from ``context["peak_memory"][label]`` (``[bytes, measure]``), if given."""
    entry = (context.get("peak_memory") or {}).get(label)
    if not entry or entry[0] is None:
        return None
    return fnd.PeakMemory(float(entry[0]), str(entry[1]))


def _memory(context: Mapping[str, Any], base_label: str, test_label: str) -> dict[str, Any] | None:
    """The diff's ``memory_timeline`` from ``context["memory_timeline"][label]`` (summary.json's timelines)."""
    timelines = context.get("memory_timeline") or {}
    base, test = (mt.peak_summary(timelines.get(label)) for label in (base_label, test_label))
    if base is None or test is None:
        return None
    return {"base": base, "test": test, "difference": mt.peak_difference(base, test)}


def diff_analyses(
    base: Any,
    test: Any,
    *,
    base_label: str = "base",
    test_label: str = "test",
    base_arm: dict[str, Any] | None = None,
    test_arm: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
) -> DiffResult:
    """Compare a test analysis against a base (control) analysis.

    Args:
        base, test: ``Analysis`` objects or their JSON dicts (docs/DATA.md); per-rank
            ``collective_events`` tables, when present, feed the per-call α–β fits.
        base_label, test_label: the names used in every table and sentence.
        base_arm, test_arm: the arms' options from manifest.json (``prefetch``, ``comm_fusion``,
            ``reshard_after_forward``); the prefetch finding names them.
        context: ``{"parity": summary.json parity, "base": {"world_size", "model"}, "test": {...},
            "num_layers": int, "peak_memory": {label: [bytes, measure]},
            "memory_timeline": {label: summary.json's memory_timeline}}``; differences make an
            ``invalid_comparison`` finding and a warning.

    Returns:
        The ``DiffResult``: deltas are ``test − base`` in µs, ratios ``test / base``; counts are per rank
        (mean over ranks).
    """
    context = dict(context or {})
    db, eb = normalise(base, f"base ({base_label})")
    dt, et = normalise(test, f"test ({test_label})")
    warnings = [
        _labelled(lab, w) for lab, d in ((base_label, db), (test_label, dt)) for w in d.get("warnings") or []
    ]
    problems = _problems(db, dt, context)
    if problems:
        what = (
            f"comparing {_describe(base_label, db, context.get('base') or {})} with "
            f"{_describe(test_label, dt, context.get('test') or {})}"
        )
        warnings += [f"{what}: {p}" for p in problems]
    fits = {
        "base": whatif.fit_ranks(eb),
        "test": whatif.fit_ranks(et),
        "pooled": whatif.fit_ranks(eb + et),
        "aggregate": _aggregate_fits(db, dt),
    }
    ranks = Pair(_rank_metrics(db), _rank_metrics(dt))
    mean = Pair(_mean_metrics(db, ranks.base), _mean_metrics(dt, ranks.test))
    side = _side_by_side(ranks, mean)
    collectives, ops, sync = _collectives(db, dt), _ops(db, dt), _sync(db, dt)
    for lab, which in ((base_label, "base"), (test_label, "test")):
        if not any(r[which].count for r in collectives):
            warnings.append(
                f"{lab}: no collectives recognised; its overlap and comm numbers are not meaningful"
            )
    memory = _memory(context, base_label, test_label)
    rule_input = fnd.RuleInput(
        labels=Pair(base_label, test_label),
        mean=mean,
        ranks=ranks,
        collectives=collectives,
        ops=ops,
        sync=sync,
        fits=fits,
        arms=Pair(fnd.ArmOptions.from_manifest(base_arm), fnd.ArmOptions.from_manifest(test_arm)),
        problems=problems,
        num_layers=context.get("num_layers"),
        peak_memory=Pair(*(_peak_memory(context, label) for label in (base_label, test_label))),
        memory_peaks=Pair(memory["base"], memory["test"]) if memory else Pair(None, None),
        places=plc.compare_places(db, dt),
        analysis=Pair(db, dt),
    )
    return DiffResult(
        base_label,
        test_label,
        side,
        collectives,
        ops,
        sync,
        fits,
        fnd.evaluate(rule_input),
        warnings,
        memory_timeline=memory,
        places=rule_input.places,
        top_waits=Pair(plc.top_collectives(db), plc.top_collectives(dt)),
        prefetch_estimates=Pair(
            *(
                whatif_units.estimate_prefetch_units(
                    d, **{k: v for k, v in m.breakdown().items() if k != "exposed_comm_us"}
                )
                for d, m in ((db, mean.base), (dt, mean.test))
            )
        ),
    )
