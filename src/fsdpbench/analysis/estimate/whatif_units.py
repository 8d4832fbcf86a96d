"""What-if estimates per (unit, phase), on the Analysis JSON's ``units`` rows (docs/attribution.md): prefetch and
regrouping priced unit by unit with the fits and records of :mod:`fsdpbench.analysis.estimate.whatif`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fsdpbench.analysis.estimate.whatif import (
    BASIS_UNITS,
    AlphaBetaFit,
    Estimate,
    TypeSaving,
    idle_time_delta,
    priced_alpha,
)
from fsdpbench.records import finite

# ---- per (unit, phase): the estimates on the Analysis JSON's ``units`` rows (docs/attribution.md) ----

UnitKey = tuple[str, str]
PREFETCH_PHASES = ("forward", "backward")
"""The phases whose units run in sequence, so that one unit's all-gather can be issued under the
previous unit's compute."""


def _unit_ranks(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The ranks of an Analysis JSON that have ``units`` rows naming units (phases alone, from the
    autograd/optimizer ranges, have no neighbouring unit to prefetch from or regroup)."""
    from fsdpbench.analysis.rank.phase_ranges import SOURCE as PHASES_ONLY

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
    if split is not None and finite(split.get("transfer_us")) is not None:
        return finite(split.get("transfer_us")) or 0.0, finite(split.get("exposed_transfer_us")) or 0.0
    return finite(row.get("comm_us")) or 0.0, finite(row.get("exposed_us")) or 0.0


def _wait_saved(
    row: Mapping[str, Any], split: Mapping[str, Any] | None, removed: float
) -> tuple[float, float]:
    """``(wait_us, exposed_wait_us)`` of a unit row's split × the share of the row's calls (all types)
    that ``removed`` calls are; ``(0, 0)`` without a split (one rank) or without calls."""
    calls = sum(finite((c or {}).get("count")) or 0.0 for c in (row.get("collectives") or {}).values())
    if split is None or calls <= 0 or removed <= 0:
        return 0.0, 0.0
    share = min(removed / calls, 1.0)
    return (finite(split.get("wait_us")) or 0.0) * share, (
        finite(split.get("exposed_wait_us")) or 0.0
    ) * share


def _type_share(row: Mapping[str, Any], kind: str) -> float:
    """The share of a unit row's communication that is ``kind``: its share of the row's bytes (the β term
    dominates transfer), of its calls where a size is unknown; 0 without such calls."""
    colls = row.get("collectives") or {}
    if kind not in colls:
        return 0.0
    nbytes = {k: finite((c or {}).get("bytes")) for k, c in colls.items()}
    if all(b is not None for b in nbytes.values()) and sum(nbytes.values()) > 0:  # type: ignore[arg-type]
        return float(nbytes[kind] or 0.0) / float(sum(nbytes.values()))  # type: ignore[arg-type]
    counts = {k: finite((c or {}).get("count")) or 0.0 for k, c in colls.items()}
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
                out[key] = out.get(key, 0.0) + (finite((c or {}).get("count")) or 0.0) / len(ranks)
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
                compute = finite(row.get("compute_us")) or 0.0
                prev_slack = max(compute - (finite(row.get("overlapped_us")) or 0.0), 0.0)
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
                count = finite((c or {}).get("count")) or 0.0
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
                saved_kind = (count - target) * priced_alpha(ts, *chosen)
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
    idle_delta = idle_time_delta(result, free_us, calls_before, calls_after)
    if step_time_us is not None:
        result.step_time_delta_us = exposed_delta + idle_delta
    if compute_us is not None and comm_us is not None:
        result.step_time_lower_bound_us = max(
            float(compute_us), float(comm_us) - saved_total - wait_saved_total
        )
    return result
