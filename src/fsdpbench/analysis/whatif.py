"""What-if estimates: a latency + bandwidth model of each collective type, and what regrouping would buy.

Each collective type gets the model ``time_us = alpha_us + beta_us_per_byte * bytes`` fitted by least
squares to the trace's own collectives (one point per collective call). ``alpha`` is the fixed cost of
one call (launch, synchronisation, protocol latency); ``beta`` the inverse bandwidth. Issuing the same
bytes in fewer calls saves ``alpha`` per call removed, which is what bucketing per module buys.

Every number this module produces is an *estimate* and is labelled so. The fits use each collective's
transfer time where the analysis split it from the waiting for the slowest peer (analysis/waits.py),
its duration otherwise (then ``alpha`` absorbs skew). The regrouping and prefetch estimates are made per
(unit, phase) where the trace has fsdpbench's unit ranges (``estimate_regrouping_units``,
``estimate_prefetch_units``: docs/calibration.md), from whole-step totals otherwise (``estimate_regrouping``,
``estimate_overlap``: same overlap ratio assumed); ``Estimate.basis`` says which.

Torch-free on purpose.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd

from fsdpbench.records import Record

BASIS_UNITS = "units"
"""``Estimate.basis``: computed per (unit, phase) from the ranks' ``units`` rows (and ``waits.units``)."""
BASIS_STEP = "step totals"
"""``Estimate.basis``: computed from whole-step totals (the trace has no fsdpbench ranges)."""
MIN_FIT_POINTS = 3
"""Fewer collectives than this cannot give a meaningful two-parameter fit."""
POOR_FIT_R2 = 0.5
"""Below this R² a fit is reported but flagged as poor; estimates that use it say so."""


@dataclass(frozen=True)
class AlphaBetaFit(Record):
    """The fitted ``alpha + beta * bytes`` model of one collective type in one trace.

    ``status``: ``ok``; ``too_few_points`` (n < MIN_FIT_POINTS); ``same_size`` (every call moved the same
    bytes, so the fixed and per-byte costs cannot be told apart); ``no_bytes`` (sizes unknown).
    ``alpha_us``/``beta_us_per_byte``/``r2`` are ``None`` unless ``status == "ok"`` (``r2`` is also ``None``
    when all durations are equal). ``mean_us`` and ``mean_bytes`` are always the plain averages.
    Fits are non-negative least squares: ``alpha_us, beta_us_per_byte >= 0`` always, and ``constrained``
    is true when the unconstrained optimum had a negative coefficient, so one (or both) was held at 0 and
    ``r2`` is that of the constrained model.
    """

    alpha_us: float | None = None
    beta_us_per_byte: float | None = None
    r2: float | None = None
    n: int = 0
    status: str = "unknown"
    mean_us: float | None = None
    mean_bytes: float | None = None
    constrained: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def poor(self) -> bool:
        return self.ok and (self.r2 is None or self.r2 < POOR_FIT_R2)

    @property
    def status_text(self) -> str:
        """The status in words, flagging a poor fit and an unresolved (negative) alpha."""
        if self.poor:
            return f"poor fit (R² < {POOR_FIT_R2})"
        if self.ok and self.alpha_us is not None and self.alpha_us < 0:
            return "ok, α < 0 (not resolved)"
        return self.status.replace("_", " ")


@dataclass
class TypeSaving(Record):
    """What regrouping one collective type buys: calls now and after, the time saved and how it was priced."""

    _omit_empty: ClassVar[bool] = True

    count: float
    target_count: float
    saved_us: float | None = None
    alpha_us: float | None = None
    fit_source: str | None = None
    fit_r2: float | None = None
    note: str | None = None


@dataclass
class Estimate(Record):
    """A finding's what-if (``label="estimate"``, modelled) or the measured change it rests on
    (``label="measured"``). Deltas are in µs, negative = a gain; ``None`` = not priced.

    ``best_case_step_time_delta_us`` is a bound (everything hidden), given instead of
    ``step_time_delta_us`` when no arm shows what is achievable. ``one_bucket_per_layer`` is a second
    scenario (FSDP2's grouping: one bucket per layer, ``target_counts`` calls) for the fragmentation rule.
    ``to_dict()`` leaves out what is ``None`` or empty; ``from_dict`` reads it back (diff.json).
    """

    _omit_empty: ClassVar[bool] = True

    label: Literal["estimate", "measured"] = "estimate"
    scenario: str | None = None
    comm_delta_us: float | None = None
    exposed_comm_delta_us: float | None = None
    step_time_delta_us: float | None = None
    idle_delta_us: float | None = None
    wait_delta_us: float | None = None
    """The part of ``comm_delta_us`` that is less waiting for the last rank (regrouping, two ranks or more); its
    exposed part is in ``exposed_comm_delta_us`` and the step-time change."""
    best_case_step_time_delta_us: float | None = None
    step_time_lower_bound_us: float | None = None
    target_overlap_ratio: float | None = None
    per_type: dict[str, TypeSaving] = field(default_factory=dict)
    one_bucket_per_layer: Estimate | None = None
    target_counts: dict[str, int] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)
    note: str | None = None
    basis: str | None = None
    """What the estimate was computed from: :data:`BASIS_UNITS` (the per-(unit, phase) rows of the
    Analysis JSON) or :data:`BASIS_STEP` (whole-step totals: traces without fsdpbench's ranges)."""
    per_unit: list[dict[str, Any]] = field(default_factory=list)
    """Per (unit, phase), rank means: what the per-unit estimate found there (``BASIS_UNITS`` only)."""
    grouping: str | None = None
    """``scenario``'s name in diff.json files before the two were one field: read into ``scenario``, never
    written (it is None after ``__post_init__``, and ``to_dict`` leaves out what is None)."""

    def __post_init__(self) -> None:
        if self.grouping is not None:
            self.scenario = self.scenario or self.grouping
            self.grouping = None


def _nnls2(design: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, bool]:
    """Non-negative least squares with two columns: ``(coefficients, constrained)``.

    The optimum is the unconstrained one when both coefficients are >= 0; otherwise it lies on a face of
    the feasible quadrant, i.e. it is the better of the two one-column fits (each clamped at 0) and 0.
    """
    coef, *_ = np.linalg.lstsq(design, t, rcond=None)
    if (coef >= 0).all():
        return coef, False
    candidates = [np.zeros(2)]
    for j in range(2):
        col = design[:, j]
        norm = float(col @ col)
        one = np.zeros(2)
        one[j] = max(float(col @ t) / norm, 0.0) if norm > 0 else 0.0
        candidates.append(one)
    best = min(candidates, key=lambda c: float(((t - design @ c) ** 2).sum()))
    return best, True


def fit_alpha_beta(nbytes: Any, dur_us: Any) -> AlphaBetaFit:
    """Non-negative least-squares fit of ``dur_us = alpha_us + beta_us_per_byte * nbytes``
    (``alpha_us, beta_us_per_byte >= 0``; ``constrained`` says when a bound was active).

    Args:
        nbytes: bytes moved by each call (array-like; NaN/None entries are dropped with their duration).
        dur_us: duration of each call in µs.

    Returns:
        The fit, with ``status`` saying honestly when it could not be made (see ``AlphaBetaFit``).
    """
    b = pd.to_numeric(pd.Series(nbytes, dtype="object"), errors="coerce").to_numpy(dtype=float)
    t = pd.to_numeric(pd.Series(dur_us, dtype="object"), errors="coerce").to_numpy(dtype=float)
    if b.shape != t.shape:
        raise ValueError(f"fit_alpha_beta: {b.size} byte counts but {t.size} durations")
    t_ok = np.isfinite(t)
    keep = t_ok & np.isfinite(b)
    mean_us = float(t[t_ok].mean()) if t_ok.any() else None
    if not keep.any():
        return AlphaBetaFit(None, None, None, int(t_ok.sum()), "no_bytes", mean_us, None)
    b, t = b[keep], t[keep]
    n = int(b.size)
    mean_us, mean_bytes = float(t.mean()), float(b.mean())
    if n < MIN_FIT_POINTS:
        return AlphaBetaFit(None, None, None, n, "too_few_points", mean_us, mean_bytes)
    if np.unique(b).size < 2:
        return AlphaBetaFit(None, None, None, n, "same_size", mean_us, mean_bytes)
    design = np.column_stack([np.ones(n), b])
    (alpha, beta), constrained = _nnls2(design, t)
    ss_tot = float(((t - mean_us) ** 2).sum())
    ss_res = float(((t - design @ np.array([alpha, beta])) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else None
    return AlphaBetaFit(float(alpha), float(beta), r2, n, "ok", mean_us, mean_bytes, constrained)


def fit_events(events: pd.DataFrame | None) -> dict[str, AlphaBetaFit]:
    """One fit per collective type from an events table (columns ``type, bytes, start_ns, end_ns``); on
    each collective's transfer time (``transfer_ns``, analysis/waits.py) where the table has it, else on
    its duration."""
    if events is None or len(events) == 0:
        return {}
    missing = {"type", "bytes", "start_ns", "end_ns"} - set(events.columns)
    if missing:
        raise ValueError(f"collective events table lacks columns {sorted(missing)}")
    dur_us = (events["end_ns"].astype(float) - events["start_ns"].astype(float)) / 1e3
    if (
        "transfer_ns" in events.columns
    ):  # the cross-rank split's transfer time: waiting is not the link's cost
        transfer = events["transfer_ns"].astype(float) / 1e3
        dur_us = transfer.where(transfer.notna(), dur_us)
    frame = pd.DataFrame({"type": events["type"].astype(str), "bytes": events["bytes"], "dur_us": dur_us})
    return {
        str(kind): fit_alpha_beta(group["bytes"].to_numpy(), group["dur_us"].to_numpy())
        for kind, group in frame.groupby("type", sort=True, observed=True)
    }


def fit_ranks(event_tables: list[pd.DataFrame | None]) -> dict[str, AlphaBetaFit]:
    """Fits per collective type over all ranks' collectives of one trace pooled together."""
    tables = [e for e in event_tables if e is not None and len(e)]
    if not tables:
        return {}
    return fit_events(pd.concat(tables, ignore_index=True))


def fit_aggregates(counts: Any, nbytes: Any, time_us: Any) -> AlphaBetaFit:
    """Fit ``time_us = alpha_us * count + beta_us_per_byte * bytes`` to per-rank totals of one type.

    The fallback when the per-call events are not available (e.g. a cached analysis.json): each point is
    one rank of one arm (its call count, total bytes and total time of that collective type). Arms that
    move the same bytes in different numbers of calls separate alpha from beta. Non-negative least
    squares (``constrained`` says when a bound was active); ``r2`` is the coefficient of determination of
    the (constrained) model around the mean total time.
    """
    n_arr, b_arr, t_arr = (
        pd.to_numeric(pd.Series(v, dtype="object"), errors="coerce").to_numpy(dtype=float)
        for v in (counts, nbytes, time_us)
    )
    keep = np.isfinite(n_arr) & np.isfinite(b_arr) & np.isfinite(t_arr) & (n_arr > 0)
    n_arr, b_arr, t_arr = n_arr[keep], b_arr[keep], t_arr[keep]
    npts = int(n_arr.size)
    mean_us = float((t_arr / n_arr).mean()) if npts else None
    mean_bytes = float((b_arr / n_arr).mean()) if npts else None
    if npts < MIN_FIT_POINTS:
        return AlphaBetaFit(None, None, None, npts, "too_few_points", mean_us, mean_bytes)
    design = np.column_stack([n_arr, b_arr])
    if np.linalg.matrix_rank(design) < 2:
        return AlphaBetaFit(None, None, None, npts, "same_size", mean_us, mean_bytes)
    (alpha, beta), constrained = _nnls2(design, t_arr)
    ss_tot = float(((t_arr - t_arr.mean()) ** 2).sum())
    ss_res = float(((t_arr - design @ np.array([alpha, beta])) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else None
    return AlphaBetaFit(float(alpha), float(beta), r2, npts, "ok", mean_us, mean_bytes, constrained)


def choose_fit(
    kind: str, *candidates: tuple[str, Mapping[str, AlphaBetaFit]]
) -> tuple[str, AlphaBetaFit] | None:
    """The best usable fit of ``kind`` among ``(source_name, fits)`` candidates, given in preference order.

    Preference: the first ``ok`` fit that is not poor (R² >= POOR_FIT_R2) and has ``alpha >= 0``; else
    the first ``ok`` fit with ``alpha >= 0``; else the first ``ok`` fit; ``None`` when none is ``ok``.
    """
    usable = [(source, fits[kind]) for source, fits in candidates if kind in fits and fits[kind].ok]
    tiers = (
        [c for c in usable if not c[1].poor and (c[1].alpha_us or 0.0) >= 0],
        [c for c in usable if (c[1].alpha_us or 0.0) >= 0],
        usable,
    )
    return next((tier[0] for tier in tiers if tier), None)


def layer_bucket_counts(
    num_layers: int, *, reshard_after_forward: bool = True, hsdp: bool = False
) -> dict[str, int]:
    """Collective calls per step if every layer were one bucket plus one root bucket (FSDP2's grouping).

    From reference/fsdp_backends.md §3: all-gather ``2L+1`` with reshard after forward (forward and the
    backward re-gather) or ``L+1`` without; reduce-scatter ``L+1``; all-reduce ``L+1`` for HSDP only.
    """
    counts = {
        "all_gather": (2 * num_layers + 1) if reshard_after_forward else (num_layers + 1),
        "reduce_scatter": num_layers + 1,
    }
    if hsdp:
        counts["all_reduce"] = num_layers + 1
    return counts


@dataclass(frozen=True)
class StepWaits:
    """A step's waiting for the last rank, rank means: ``wait_us`` and its exposed part, and the calls
    of every collective type it is spread over (the step-totals regrouping's wait term)."""

    wait_us: float
    exposed_wait_us: float
    calls: float


def step_waits(data: Mapping[str, Any]) -> StepWaits | None:
    """:class:`StepWaits` of an Analysis JSON (``waits.ranks`` and each rank's ``collectives``); None
    without a wait/transfer split (one rank) or without calls."""
    split = [r for r in (data.get("waits") or {}).get("ranks") or [] if _num(r.get("wait_us")) is not None]
    ranks = [r for r in data.get("ranks") or [] if isinstance(r, Mapping)]
    if not split or not ranks:
        return None
    calls = sum(
        _num((c or {}).get("count")) or 0.0 for r in ranks for c in (r.get("collectives") or {}).values()
    ) / len(ranks)
    if calls <= 0:
        return None
    return StepWaits(
        wait_us=sum(_num(r.get("wait_us")) or 0.0 for r in split) / len(split),
        exposed_wait_us=sum(_num(r.get("exposed_wait_us")) or 0.0 for r in split) / len(split),
        calls=calls,
    )


def _priced_alpha(row: TypeSaving, source: str, fit: AlphaBetaFit) -> float:
    """The fixed cost a removed call saves, ``max(alpha, 0)`` of ``fit``, recorded on ``row`` with the
    fit's source and R², and a note where the fit is negative or poor."""
    alpha = max(float(fit.alpha_us or 0.0), 0.0)
    row.alpha_us, row.fit_source, row.fit_r2 = alpha, source, fit.r2
    if fit.alpha_us is not None and fit.alpha_us < 0:
        row.note = "fitted alpha is negative (per-call cost not resolved); counted as 0"
    elif fit.poor:
        row.note = f"poor fit (R² {fit.r2 if fit.r2 is None else round(fit.r2, 2)}); treat with care"
    return alpha


def _idle_delta(result: Estimate, free_us: float | None, calls_before: int, calls_after: int) -> float:
    """The idle-time change of a regrouping (idle scales with the number of collective calls), recorded
    on ``result`` with its assumption; 0 where there is no idle figure or no call."""
    if free_us is None or calls_before <= 0:
        return 0.0
    result.idle_delta_us = -float(free_us) * (1.0 - calls_after / calls_before)
    result.assumptions.append(
        "idle time (neither compute nor comm) scales with the number of collective calls"
    )
    return result.idle_delta_us


def estimate_regrouping(
    per_type: Mapping[str, tuple[float | None, float | None]],
    target_counts: Mapping[str, float],
    fit_for: Mapping[str, tuple[str, AlphaBetaFit]],
    *,
    step_time_us: float | None,
    compute_us: float | None,
    comm_us: float | None,
    exposed_comm_us: float | None,
    free_us: float | None = None,
    waits: StepWaits | None = None,
) -> Estimate:
    """Estimate the effect of issuing each collective type's bytes in ``target_counts`` calls.

    Args:
        per_type: per collective type, the measured ``(count, time_us)`` (mean per rank).
        target_counts: per type, the call count after regrouping (types not listed stay as they are).
        fit_for: per type, ``(source, fit)``: the α–β fit to price a removed call at ``alpha_us``.
        step_time_us, compute_us, comm_us, exposed_comm_us: the measured rank-mean step breakdown.
        free_us: the step's idle time (the device ran nothing at all: neither this step's compute or
            comm nor work carried over from another step, ``StepMetrics.free_us``), when known: per-unit host work (FSDP
            hooks, copy-in/out bookkeeping outside operators) and the gap before each collective starts.
            It is assumed to scale with the number of collective calls, so it shrinks by the share of
            calls removed (``idle_delta_us``, added to the step-time change). ``None`` keeps it unchanged.
        waits: the step's waiting for the last rank (rank means of ``waits.ranks``) and its calls of
            every type: every call is a rendezvous, so the wait shrinks by the share of all calls
            removed (``wait_delta_us``, in the comm, exposed-comm and step changes). ``None`` (one
            rank, no split) leaves waiting out.

    Returns:
        An ``Estimate`` with ``comm_delta_us``, ``exposed_comm_delta_us``, ``step_time_delta_us``,
        ``step_time_lower_bound_us``, ``per_type`` and ``assumptions``; the deltas are ``None`` when no
        type could be priced. Saved time per type = ``(count − target) · max(alpha, 0)``; comm shrinks by
        the saved share of the summed collective time; exposed comm keeps its share of comm (same overlap
        ratio); compute is unchanged, so the step shrinks by the exposed-comm change (plus
        ``idle_delta_us`` when ``free_us`` is given).
        ``step_time_lower_bound_us = max(compute, new comm)``: perfect overlap, no idle time.
    """
    rows: dict[str, TypeSaving] = {}
    saved_total = 0.0
    calls_before = calls_after = 0.0
    summed_time = sum(float(time_us or 0.0) for _, time_us in per_type.values())
    result = Estimate(
        assumptions=[
            "a removed call saves the fitted fixed cost alpha; the bytes and per-byte cost stay the same",
            "the overlap ratio stays the same, so exposed comm shrinks in proportion to comm",
            "compute time is unchanged",
        ],
        per_type=rows,
    )
    for kind, (count, time_us) in per_type.items():
        if kind not in target_counts or count is None:
            continue
        row = TypeSaving(count=count, target_count=float(target_counts[kind]))
        calls_before += float(count)
        calls_after += min(row.target_count, float(count))
        chosen = fit_for.get(kind)
        if chosen is None:
            row.note = "no usable alpha-beta fit for this type; not priced"
        elif row.target_count >= count:
            row.saved_us = 0.0
            row.note = "already at or below the target granularity"
        else:
            saved = (float(count) - row.target_count) * _priced_alpha(row, *chosen)
            if time_us is not None:
                saved = min(saved, float(time_us))  # cannot save more than the type takes
            row.saved_us = saved
            saved_total += saved
        rows[kind] = row
    priced = any(r.saved_us is not None for r in rows.values())
    if not priced or comm_us is None or not summed_time:
        return result
    comm_new = float(comm_us) * (1.0 - min(saved_total / summed_time, 1.0))
    wait_saved = exposed_wait_saved = 0.0
    if waits is not None and waits.calls > 0:
        share = min(max(calls_before - calls_after, 0.0) / waits.calls, 1.0)
        wait_saved, exposed_wait_saved = waits.wait_us * share, waits.exposed_wait_us * share
        result.wait_delta_us = -wait_saved
        result.assumptions.append(
            "every call is a rendezvous: the step's waiting for the last rank shrinks with the share of "
            "its calls removed"
        )
    result.comm_delta_us = comm_new - float(comm_us) - wait_saved
    idle_delta = _idle_delta(result, free_us, calls_before, calls_after)
    if exposed_comm_us is not None and comm_us:
        exposed_delta = (
            float(exposed_comm_us) * (comm_new / float(comm_us)) - float(exposed_comm_us) - exposed_wait_saved
        )
        result.exposed_comm_delta_us = exposed_delta
        if step_time_us is not None:
            result.step_time_delta_us = exposed_delta + idle_delta
    if compute_us is not None:
        result.step_time_lower_bound_us = max(float(compute_us), comm_new - wait_saved)
    return result


def estimate_overlap(
    *,
    target_overlap_ratio: float,
    step_time_us: float | None,
    compute_us: float | None,
    comm_us: float | None,
    exposed_comm_us: float | None,
) -> Estimate:
    """Estimate the effect of hiding comm up to ``target_overlap_ratio`` (e.g. the other arm's, via prefetch).

    New exposed comm = ``comm · (1 − target)``; the step changes by the exposed-comm change (compute and
    comm unchanged); ``step_time_lower_bound_us = max(compute, comm)``. Deltas are ``None`` when the
    breakdown is missing; a target below the current overlap gives no gain (delta 0).
    """
    out = Estimate(
        target_overlap_ratio=target_overlap_ratio,
        assumptions=["compute and total comm time unchanged; only the hidden share of comm changes"],
    )
    if comm_us is None or exposed_comm_us is None or not math.isfinite(target_overlap_ratio):
        return out
    delta = min(float(comm_us) * (1.0 - target_overlap_ratio) - float(exposed_comm_us), 0.0)
    out.exposed_comm_delta_us = delta
    if step_time_us is not None:
        out.step_time_delta_us = delta
    if compute_us is not None:
        out.step_time_lower_bound_us = max(float(compute_us), float(comm_us))
    return out


# ---- per (unit, phase): the estimates on the Analysis JSON's ``units`` rows (docs/attribution.md) ----

UnitKey = tuple[str, str]
PREFETCH_PHASES = ("forward", "backward")
"""The phases whose units run in sequence, so that one unit's all-gather can be issued under the
previous unit's compute."""


def _num(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _unit_ranks(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The ranks of an Analysis JSON that have ``units`` rows naming units (phases alone, from the
    autograd/optimizer ranges, have no neighbouring unit to prefetch from or regroup)."""
    from fsdpbench.analysis.phase_ranges import SOURCE as PHASES_ONLY

    return [
        r
        for r in data.get("ranks") or []
        if isinstance(r, Mapping) and r.get("units") and r.get("units_source") != PHASES_ONLY
    ]


def has_unit_rows(data: Mapping[str, Any] | None) -> bool:
    """Whether the per-unit estimates can be made from ``data`` (some rank has ``units`` rows)."""
    return bool(data) and bool(_unit_ranks(data))


def _split_of(data: Mapping[str, Any]) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    """``{(unit, phase, rank): {wait_us, transfer_us, exposed_wait_us, exposed_transfer_us}}`` of
    ``waits.units`` (empty without waits: one rank)."""
    out = {}
    for w in (data.get("waits") or {}).get("units") or []:
        for rank, split in (w.get("ranks") or {}).items():
            out[(str(w.get("unit")), str(w.get("phase")), str(rank))] = split
    return out


def _transfer(row: Mapping[str, Any], split: Mapping[str, Any] | None) -> tuple[float, float]:
    """``(transfer_us, exposed_transfer_us)`` of a unit row: the cross-rank split's where the analysis
    has it for this place and rank, else the row's whole communication (no split: one rank)."""
    if split is not None and _num(split.get("transfer_us")) is not None:
        return _num(split.get("transfer_us")) or 0.0, _num(split.get("exposed_transfer_us")) or 0.0
    return _num(row.get("comm_us")) or 0.0, _num(row.get("exposed_us")) or 0.0


def _wait_saved(
    row: Mapping[str, Any], split: Mapping[str, Any] | None, removed: float
) -> tuple[float, float]:
    """``(wait_us, exposed_wait_us)`` of a unit row's split × the share of the row's calls (all types)
    that ``removed`` calls are; ``(0, 0)`` without a split (one rank) or without calls."""
    calls = sum(_num((c or {}).get("count")) or 0.0 for c in (row.get("collectives") or {}).values())
    if split is None or calls <= 0 or removed <= 0:
        return 0.0, 0.0
    share = min(removed / calls, 1.0)
    return (_num(split.get("wait_us")) or 0.0) * share, (_num(split.get("exposed_wait_us")) or 0.0) * share


def _type_share(row: Mapping[str, Any], kind: str) -> float:
    """The share of a unit row's communication that is ``kind``: its share of the row's bytes (the β term
    dominates transfer), of its calls where a size is unknown; 0 without such calls."""
    colls = row.get("collectives") or {}
    if kind not in colls:
        return 0.0
    nbytes = {k: _num((c or {}).get("bytes")) for k, c in colls.items()}
    if all(b is not None for b in nbytes.values()) and sum(nbytes.values()) > 0:  # type: ignore[arg-type]
        return float(nbytes[kind] or 0.0) / float(sum(nbytes.values()))  # type: ignore[arg-type]
    counts = {k: _num((c or {}).get("count")) or 0.0 for k, c in colls.items()}
    return counts[kind] / sum(counts.values()) if sum(counts.values()) else 0.0


def unit_counts(data: Mapping[str, Any]) -> dict[tuple[str, str, str], float]:
    """``{(unit, phase, type): calls per rank}`` of an analysis' ``units`` rows (mean over its ranks with
    units; a place a rank lacks counts as 0 there)."""
    ranks = _unit_ranks(data)
    out: dict[tuple[str, str, str], float] = {}
    for r in ranks:
        for row in r["units"]:
            for kind, c in (row.get("collectives") or {}).items():
                key = (str(row.get("unit")), str(row.get("phase")), str(kind))
                out[key] = out.get(key, 0.0) + (_num((c or {}).get("count")) or 0.0) / len(ranks)
    return out


def _add(acc: dict[UnitKey, dict[str, float]], key: UnitKey, values: Mapping[str, float], n: int) -> None:
    row = acc.setdefault(key, {})
    for k, v in values.items():
        row[k] = row.get(k, 0.0) + v / n


def _per_unit_list(acc: dict[UnitKey, dict[str, float]]) -> list[dict[str, Any]]:
    return [{"unit": u, "phase": p, **values} for (u, p), values in acc.items()]


def estimate_prefetch_units(
    data: Mapping[str, Any],
    *,
    step_time_us: float | None = None,
    compute_us: float | None = None,
    comm_us: float | None = None,
) -> Estimate | None:
    """What prefetching one unit further ahead would hide, per (unit, phase), from an Analysis JSON.

    Per rank and phase (forward, backward), the units in the order their ranges started: unit *i*'s
    exposed all-gather transfer (``waits.units``' ``exposed_transfer_us`` of the place, times the
    all-gather's share of the place's bytes; the place's ``exposed_us`` when the analysis has no waits)
    could run under unit *i−1*'s compute that hides nothing yet (``compute_us − overlapped_us`` of that
    row, ≥ 0): hidden_i = min(those two). The first unit of a phase has no such neighbour. Summed over
    units, mean over ranks: ``exposed_comm_delta_us`` = ``step_time_delta_us`` = −Σ hidden. Waiting for
    a late rank is not hidden (prefetch moves the transfer, not the other rank's arrival).

    Args:
        data: the arm's Analysis JSON (``ranks[].units``; ``waits.units`` where it has them).
        step_time_us, compute_us, comm_us: the rank-mean breakdown, for the lower bound.
    Returns:
        The estimate (``basis`` :data:`BASIS_UNITS`, ``per_unit`` with ``exposed_transfer_us``, the
        all-gather part ``all_gather_exposed_transfer_us``, ``slack_us`` of the previous unit and
        ``hidden_us``), or None when no rank has ``units`` rows.
    """
    ranks = _unit_ranks(data)
    if not ranks:
        return None
    split = _split_of(data)
    acc: dict[UnitKey, dict[str, float]] = {}
    gain = 0.0
    with_waits = bool(split)  # one rank: no wait/transfer split at all
    for r in ranks:
        rank = str(r.get("rank"))
        for phase in PREFETCH_PHASES:
            rows = [row for row in r["units"] if row.get("phase") == phase]
            prev_slack: float | None = None
            for row in rows:
                unit = str(row.get("unit"))
                _, exposed_transfer = _transfer(row, split.get((unit, phase, rank)))
                gather = exposed_transfer * _type_share(row, "all_gather")
                hidden = min(gather, prev_slack) if prev_slack is not None else 0.0
                gain += hidden / len(ranks)
                _add(
                    acc,
                    (unit, phase),
                    {
                        "exposed_transfer_us": exposed_transfer,
                        "all_gather_exposed_transfer_us": gather,
                        "slack_us": prev_slack or 0.0,
                        "hidden_us": hidden,
                    },
                    len(ranks),
                )
                compute = _num(row.get("compute_us")) or 0.0
                prev_slack = max(compute - (_num(row.get("overlapped_us")) or 0.0), 0.0)
    out = Estimate(
        basis=BASIS_UNITS,
        scenario="prefetch one unit further ahead: each unit's exposed all-gather transfer runs under the "
        "previous unit's compute (per unit and phase)",
        exposed_comm_delta_us=-gain,
        step_time_delta_us=None if step_time_us is None else -gain,
        per_unit=_per_unit_list(acc),
        assumptions=[
            "a unit's exposed all-gather transfer can be hidden under the previous unit's (same phase) "
            "compute that hides no communication yet, up to that compute",
            "waiting for a late rank is not hidden; compute and total comm time unchanged",
            "the all-gather's share of a place's transfer is its share of the place's bytes",
        ],
    )
    if not with_waits:
        out.assumptions.append(
            "no wait/transfer split (one rank): a place's whole exposed comm counts as transfer"
        )
    if compute_us is not None and comm_us is not None:
        out.step_time_lower_bound_us = max(float(compute_us), float(comm_us))
    return out


def estimate_regrouping_units(
    data: Mapping[str, Any],
    target_counts: Mapping[tuple[str, str, str], float],
    fit_for: Mapping[str, tuple[str, AlphaBetaFit]],
    *,
    types: Any = None,
    step_time_us: float | None,
    compute_us: float | None,
    comm_us: float | None,
    exposed_comm_us: float | None,
    free_us: float | None = None,
) -> Estimate | None:
    """:func:`estimate_regrouping` per (unit, phase): each place's calls of a type merged into
    ``target_counts[(unit, phase, type)]`` calls (at least one; a place or type not listed keeps its
    calls).

    Per rank and place: saved = Σ over types of (count − min(count, target)) · max(α, 0) with α the
    type's fit on transfer time, at most the place's transfer time (``waits.units``; its comm without
    waits); the exposed part of it is saved × the place's exposed share of its transfer (each place keeps
    its own overlap, not the step's). Every call is a rendezvous, so the place's waiting for the last
    rank shrinks with the share of its calls removed: wait saved = ``wait_us`` × removed / all calls of
    the place (exposed: ``exposed_wait_us`` × the same share; no term without the split: one rank).
    Rank means: ``wait_delta_us`` = −Σ wait saved, ``comm_delta_us`` = −Σ (saved + wait saved),
    ``exposed_comm_delta_us`` = −Σ (exposed saved + exposed wait saved), the idle-time term as in
    :func:`estimate_regrouping` (the step's ``free_us`` × the share of calls removed) and
    ``step_time_delta_us`` = exposed + idle change.

    Args:
        data: the subject arm's Analysis JSON (``ranks[].units``, ``waits.units``).
        target_counts: calls per rank after regrouping, per (unit, phase, type).
        fit_for: per type ``(source, fit)``; a type without one is not priced.
        types: the types to regroup (None: all types with a target).
        step_time_us, compute_us, comm_us, exposed_comm_us, free_us: the subject's rank-mean breakdown.
    Returns:
        The estimate (``basis`` :data:`BASIS_UNITS`; ``per_type`` rank means; ``per_unit`` with
        ``count``, ``target_count``, ``saved_us``, ``exposed_saved_us``, ``wait_saved_us``,
        ``exposed_wait_saved_us``), or None when no rank has units.
    """
    ranks = _unit_ranks(data)
    if not ranks:
        return None
    wanted = None if types is None else {str(t) for t in types}
    split = _split_of(data)
    n = len(ranks)
    acc: dict[UnitKey, dict[str, float]] = {}
    rows_t: dict[str, TypeSaving] = {}
    saved_total = exposed_saved_total = wait_saved_total = exposed_wait_saved_total = 0.0
    calls_before = calls_after = 0.0
    priced = False
    with_waits = bool(split)  # one rank: no wait/transfer split at all
    for r in ranks:
        rank = str(r.get("rank"))
        for row in r["units"]:
            unit, phase = str(row.get("unit")), str(row.get("phase"))
            place_split = split.get((unit, phase, rank))
            transfer, exposed_transfer = _transfer(row, place_split)
            saved = count_row = target_row = 0.0
            for kind, c in (row.get("collectives") or {}).items():
                count = _num((c or {}).get("count")) or 0.0
                key = (unit, phase, str(kind))
                if (wanted is not None and kind not in wanted) or not count:
                    continue
                # a place or type the target does not list keeps its calls; at least one call stays
                target = min(max(float(target_counts.get(key, count)), 1.0), count)
                calls_before += count / n
                calls_after += target / n
                count_row += count
                target_row += target
                ts = rows_t.setdefault(kind, TypeSaving(count=0.0, target_count=0.0))
                ts.count += count / n
                ts.target_count += target / n
                chosen = fit_for.get(kind)
                if chosen is None:
                    ts.note = "no usable alpha-beta fit for this type; not priced"
                    continue
                priced = True
                saved_kind = (count - target) * _priced_alpha(ts, *chosen)
                ts.saved_us = (ts.saved_us or 0.0) + saved_kind / n
                saved += saved_kind
            if not count_row:
                continue
            saved = min(saved, transfer)  # cannot save more than the place transfers
            exposed_saved = saved * (exposed_transfer / transfer) if transfer > 0 else 0.0
            wait_saved, exposed_wait_saved = _wait_saved(row, place_split, count_row - target_row)
            saved_total += saved / n
            exposed_saved_total += exposed_saved / n
            wait_saved_total += wait_saved / n
            exposed_wait_saved_total += exposed_wait_saved / n
            _add(
                acc,
                (unit, phase),
                {
                    "count": count_row,
                    "target_count": target_row,
                    "saved_us": saved,
                    "exposed_saved_us": exposed_saved,
                    "wait_saved_us": wait_saved,
                    "exposed_wait_saved_us": exposed_wait_saved,
                },
                n,
            )
    result = Estimate(
        basis=BASIS_UNITS,
        per_type=rows_t,
        per_unit=_per_unit_list(acc),
        assumptions=[
            "per unit and phase, a removed call saves the fitted fixed cost alpha (fit on transfer time); "
            "the bytes and per-byte cost stay the same",
            "each unit and phase keeps its own exposed share of transfer time",
            "compute time is unchanged",
        ],
    )
    if with_waits:
        result.assumptions.append(
            "every call is a rendezvous: a unit and phase's waiting for the last rank shrinks with the "
            "share of its calls removed"
        )
    else:
        result.assumptions.append(
            "no wait/transfer split (one rank): a place's whole comm counts as transfer"
        )
    if not priced:
        return result
    if with_waits:
        result.wait_delta_us = -wait_saved_total
    result.comm_delta_us = -(saved_total + wait_saved_total)
    exposed_delta = -(exposed_saved_total + exposed_wait_saved_total)
    result.exposed_comm_delta_us = exposed_delta
    idle_delta = _idle_delta(result, free_us, calls_before, calls_after)
    if step_time_us is not None:
        result.step_time_delta_us = exposed_delta + idle_delta
    if compute_us is not None and comm_us is not None:
        result.step_time_lower_bound_us = max(
            float(compute_us), float(comm_us) - saved_total - wait_saved_total
        )
    return result
