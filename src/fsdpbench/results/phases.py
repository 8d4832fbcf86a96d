"""Phase times of the timed steps: forward, backward, optimizer step and the remainder (docs/phases.md).

The worker (``phase_marks.PhaseMarks``) writes each rank's split into ``steps.jsonl``; this module
turns those records into ``summary.json``'s per-arm medians and per-phase comparisons. No torch here:
the summary and the report run without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fsdpbench.results import stats

MARKED_PHASES = ("forward", "backward", "optimizer")
"""Phases between marks on the compute stream, in step order."""
PHASES = (*MARKED_PHASES, "remainder")
"""Every phase of ``phases_ms``: the remainder is the rank's step time minus the marked phases."""
VIEWS = ("max_over_ranks", "rank0")
"""Across ranks: per phase the slowest rank (does not sum to the step) and rank 0's own split (does)."""


def step_phases(record: Mapping[str, Any]) -> dict[str, dict[str, float]] | None:
    """``{"max_over_ranks": {phase: ms}, "rank0": {phase: ms}}`` of one steps.jsonl record, or None
    when the record has no phase times (written before they existed)."""
    per_rank = record.get("phases_ms")
    if not isinstance(per_rank, Mapping) or any(not per_rank.get(p) for p in PHASES):
        return None
    return {
        "max_over_ranks": {p: max(float(v) for v in per_rank[p]) for p in PHASES},
        "rank0": {p: float(per_rank[p][0]) for p in PHASES},
    }


def arm_phases(rounds: Mapping[int, Sequence[Mapping[str, Any]]]) -> dict[str, Any] | None:
    """An arm's ``phases`` entry of summary.json from its timed records by round: per round the median
    over steps, per arm the median of the round medians (like ``median_ms``), for both ``VIEWS``.
    None when no timed record carries phase times."""
    per_round = []
    clocks = set()
    for rnd, records in sorted(rounds.items()):
        split = [s for s in (step_phases(r) for r in records) if s is not None]
        if not split:
            continue
        clocks.update(str(r.get("phase_clock")) for r in records if r.get("phases_ms"))
        per_round.append(
            {
                "round": rnd,
                "n_steps": len(split),
                **{view: {p: stats.median([s[view][p] for s in split]) for p in PHASES} for view in VIEWS},
            }
        )
    if not per_round:
        return None
    return {
        "clock": "+".join(sorted(clocks)),
        **{view: {p: stats.median([r[view][p] for r in per_round]) for p in PHASES} for view in VIEWS},
        "rounds": per_round,
    }


def round_medians(entry: Mapping[str, Any] | None, phase: str, view: str = "max_over_ranks") -> list[float]:
    """The per-round medians of one phase in an arm's ``phases`` entry ([] without one)."""
    return [float(r[view][phase]) for r in (entry or {}).get("rounds") or []]


def compare_phases(
    base: str,
    test: str,
    base_entry: Mapping[str, Any] | None,
    test_entry: Mapping[str, Any] | None,
    first: Mapping[int, str],
    **rule: Any,
) -> dict[str, Any] | None:
    """Per marked phase, ``stats.compare_arms`` (the step time's rule: ``rule`` are ``decide``'s settings,
    ``first`` round → the arm that ran first) of the slowest rank's per-round medians (as the step time is the
    slowest rank's) plus a ``verdict`` "backward: hyper is 1.06× slower than torch (...)". None when an arm
    has no phase times; a phase whose base median is 0 gets no ratio."""
    if not base_entry or not test_entry:
        return None
    out: dict[str, Any] = {}
    for phase in MARKED_PHASES:
        b, t = round_medians_by_round(base_entry, phase), round_medians_by_round(test_entry, phase)
        if not b or not t or stats.median(list(b.values())) <= 0 or min((*b.values(), *t.values())) <= 0:
            out[phase] = None
            continue
        comp = stats.compare_arms(base, test, b, t, first, **rule).to_dict()
        comp["verdict"] = f"{phase}: {comp['verdict']}"
        out[phase] = comp
    return out


def round_medians_by_round(
    entry: Mapping[str, Any] | None, phase: str, view: str = "max_over_ranks"
) -> dict[int, float]:
    """Round → the median of one phase in an arm's ``phases`` entry ({} without one)."""
    return {int(r["round"]): float(r[view][phase]) for r in (entry or {}).get("rounds") or []}


def phase_verdicts(comparison: Mapping[str, Any]) -> list[str]:
    """The per-phase verdict lines of one summary comparison (empty without phase times)."""
    return [c["verdict"] for c in (comparison.get("phases") or {}).values() if c]


def table_rows(arms: Mapping[str, Mapping[str, Any]], view: str = "max_over_ranks") -> dict[str, list[str]]:
    """``{arm: [forward, backward, optimizer, remainder]}`` medians in ms (one decimal; "—" when absent)."""
    rows = {}
    for label, arm in arms.items():
        entry = (arm.get("phases") or {}).get(view) or {}
        rows[label] = ["—" if entry.get(p) is None else f"{entry[p]:.1f}" for p in PHASES]
    return rows


def print_phase_verdicts(console: Any, summary: Mapping[str, Any]) -> None:
    """The per-phase verdicts of every comparison, one indented line each, under ``ab``'s verdict."""
    for comp in summary.get("comparisons") or []:
        for line in phase_verdicts(comp):
            console.print(f"  {line}")
