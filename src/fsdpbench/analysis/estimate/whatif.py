"""What-if estimates: a latency + bandwidth model of each collective type, and what regrouping would buy.

Each collective type gets the model ``time_us = alpha_us + beta_us_per_byte * bytes`` fitted by least
squares to the trace's own collectives (one point per collective call). ``alpha`` is the fixed cost of
one call (launch, synchronisation, protocol latency); ``beta`` the inverse bandwidth. Issuing the same
bytes in fewer calls saves ``alpha`` per call removed, which is what bucketing per module buys.

Every number this module produces is an *estimate* and is labelled so. The fits use each collective's
transfer time where the analysis split it from the waiting for the slowest peer (analysis/crossrank/waits.py),
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
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from fsdpbench.records import Record, finite

if TYPE_CHECKING:  # pandas only where a fit reads a frame: the replay prices edits without it
    import pandas as pd

BASIS_UNITS = "units"
"""``Estimate.basis``: computed per (unit, phase) from the ranks' ``units`` rows (and ``waits.units``)."""
BASIS_STEP = "step totals"
"""``Estimate.basis``: computed from whole-step totals (the trace has no fsdpbench ranges)."""
SOURCE_REPLAY = "replay"
"""``Estimate.source``: the step replay's what-if (the Analysis JSON's ``replay.what_if``, an edit of the step's
dependency graph replayed)."""
SOURCE_CLOSED_FORM = "closed form"
"""``Estimate.source``: a closed-form sum per rank (this module, ``whatif_units``), the fallback where the replay
had not what it needed; ``Estimate.source_note`` says why."""
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
    source: str | None = None
    """:data:`SOURCE_REPLAY` or :data:`SOURCE_CLOSED_FORM`; ``None`` in diff.json files written before the
    replay (closed form, unlabelled)."""
    source_note: str | None = None
    """Closed form: why the replay could not price it ("the replay had not what it needed because …")."""
    edit: str | None = None
    """Replay: the graph edit replayed (``scale:all_gather:0.5``, ``straggler:remove``, ``regroup:…``)."""
    changed: list[dict[str, Any]] = field(default_factory=list)
    """Replay: the critical-path places the edit changed, ``{rank, unit, phase, kind, delta_us}``, largest first."""
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


def _floats(values: Any) -> np.ndarray:
    """``values`` as floats, NaN where one is missing or not a number (pandas' ``to_numeric(errors="coerce")``
    without importing pandas)."""

    try:
        return np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        pass

    def one(v: Any) -> float:
        try:
            return float(v)
        except (TypeError, ValueError):
            return math.nan

    return np.array([one(v) for v in values], dtype=float)


def fit_alpha_beta(nbytes: Any, dur_us: Any) -> AlphaBetaFit:
    """Non-negative least-squares fit of ``dur_us = alpha_us + beta_us_per_byte * nbytes``
    (``alpha_us, beta_us_per_byte >= 0``; ``constrained`` says when a bound was active).

    Args:
        nbytes: bytes moved by each call (array-like; NaN/None entries are dropped with their duration).
        dur_us: duration of each call in µs.

    Returns:
        The fit, with ``status`` saying honestly when it could not be made (see ``AlphaBetaFit``).
    """
    b = _floats(nbytes)
    t = _floats(dur_us)
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
    each collective's transfer time (``transfer_ns``, analysis/crossrank/waits.py) where the table has it, else on
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
    import pandas as pd

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
    import pandas as pd

    return fit_events(pd.concat(tables, ignore_index=True))


def fit_aggregates(counts: Any, nbytes: Any, time_us: Any) -> AlphaBetaFit:
    """Fit ``time_us = alpha_us * count + beta_us_per_byte * bytes`` to per-rank totals of one type.

    The fallback when the per-call events are not available (e.g. a cached analysis.json): each point is
    one rank of one arm (its call count, total bytes and total time of that collective type). Arms that
    move the same bytes in different numbers of calls separate alpha from beta. Non-negative least
    squares (``constrained`` says when a bound was active); ``r2`` is the coefficient of determination of
    the (constrained) model around the mean total time.
    """
    n_arr, b_arr, t_arr = (_floats(v) for v in (counts, nbytes, time_us))
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
    split = [r for r in (data.get("waits") or {}).get("ranks") or [] if finite(r.get("wait_us")) is not None]
    ranks = [r for r in data.get("ranks") or [] if isinstance(r, Mapping)]
    if not split or not ranks:
        return None
    calls = sum(
        finite((c or {}).get("count")) or 0.0 for r in ranks for c in (r.get("collectives") or {}).values()
    ) / len(ranks)
    if calls <= 0:
        return None
    return StepWaits(
        wait_us=sum(finite(r.get("wait_us")) or 0.0 for r in split) / len(split),
        exposed_wait_us=sum(finite(r.get("exposed_wait_us")) or 0.0 for r in split) / len(split),
        calls=calls,
    )


def priced_alpha(row: TypeSaving, source: str, fit: AlphaBetaFit) -> float:
    """The fixed cost a removed call saves, ``max(alpha, 0)`` of ``fit``, recorded on ``row`` with the
    fit's source and R², and a note where the fit is negative or poor."""
    alpha = max(float(fit.alpha_us or 0.0), 0.0)
    row.alpha_us, row.fit_source, row.fit_r2 = alpha, source, fit.r2
    if fit.alpha_us is not None and fit.alpha_us < 0:
        row.note = "fitted alpha is negative (per-call cost not resolved); counted as 0"
    elif fit.poor:
        row.note = f"poor fit (R² {fit.r2 if fit.r2 is None else round(fit.r2, 2)}); treat with care"
    return alpha


def idle_time_delta(result: Estimate, free_us: float | None, calls_before: int, calls_after: int) -> float:
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
            saved = (float(count) - row.target_count) * priced_alpha(row, *chosen)
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
    idle_delta = idle_time_delta(result, free_us, calls_before, calls_after)
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
