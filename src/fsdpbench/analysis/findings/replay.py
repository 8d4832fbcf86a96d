"""The step replay in the findings: what-ifs taken from the replay where it has them, closed forms labelled as
the fallback, and the critical-path rule.

An arm's Analysis JSON carries ``replay`` (docs/DATA.md; null with ``replay_note`` when the traces lack what
the step's graph needs). Its ``what_if`` rows are edits of the graph, replayed: where a rule's scenario is one
of them, the rule's estimate is the replay's (``Estimate.source == "replay"``); otherwise the rule's closed
form stays, labelled ``"closed form"`` with why the replay could not price it (``Estimate.source_note``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fsdpbench.analysis.estimate import whatif
from fsdpbench.analysis.estimate.whatif import Estimate
from fsdpbench.analysis.findings.records import Finding, RuleInput, finite
from fsdpbench.analysis.findings.rule import Rule
from fsdpbench.analysis.findings.thresholds import CRITICAL_MAX_LISTED, NEAR_CRITICAL_MANY
from fsdpbench.fmt import MISSING, fmt_pct, fmt_us

CHANGED_MAX_LISTED = 5
"""At most this many changed critical-path places are carried by a replayed estimate."""


def replay_of(data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The arm's ``replay`` block, or ``None`` when it has none (null, absent, or not an object)."""
    replay = data.get("replay")
    return replay if isinstance(replay, Mapping) else None


def missing_why(data: Mapping[str, Any]) -> str:
    """Why an arm has no replay, in words (its ``replay_note``, or that the analysis predates the replay)."""
    note = data.get("replay_note")
    if isinstance(note, str) and note:
        return note
    if "replay" in data:
        return "the analysis gives no reason"
    return "this analysis has no replay (written before fsdpbench replayed steps; analyse the profiles again)"


def replayed_step_us(replay: Mapping[str, Any]) -> float | None:
    """The replayed step of the unedited graph (µs), per step as ``what_if``'s ``predicted_step_us``: the
    replay's ``step_us`` (its window / ``steps``), else (replays made before it, one step) the figure's
    ``step_us``, else the longest rank's."""
    step = finite(replay.get("step_us"))
    if step is not None:
        return step
    figure = replay.get("figure")
    step = finite(figure.get("step_us")) if isinstance(figure, Mapping) else None
    if step is not None:
        return step
    replayed = [finite(r.get("replayed_us")) for r in replay.get("ranks") or [] if isinstance(r, Mapping)]
    known = [v for v in replayed if v is not None]
    return max(known) if known else None


def place_text(row: Mapping[str, Any]) -> str:
    """``rank 1 layers.2 backward compute``: a place of the replay (rank, unit, phase, kind)."""
    bits = [f"rank {row.get('rank')}", row.get("unit"), row.get("phase"), row.get("kind")]
    return " ".join(str(b) for b in bits if b not in (None, ""))


def what_ifs(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The replay's ``what_if`` rows (empty without a replay)."""
    replay = replay_of(data)
    rows = replay.get("what_if") if replay else None
    return [w for w in rows or [] if isinstance(w, Mapping) and isinstance(w.get("edit"), str)]


def estimate_from_what_if(data: Mapping[str, Any], row: Mapping[str, Any], scenario: str) -> Estimate:
    """The estimate of one replayed ``what_if`` row: predicted step − replayed step, the places it changed.
    Over several profiled steps (``replay.steps``) the change per step × the steps: on the clock of the
    analysis's own figures (totals over the profiled steps), as the closed forms and the diff's deltas."""
    replay = replay_of(data) or {}
    base = replayed_step_us(replay)
    predicted = finite(row.get("predicted_step_us"))
    steps = int(finite(replay.get("steps")) or 1)
    changed = [c for c in row.get("changed") or [] if isinstance(c, Mapping) and finite(c.get("delta_us"))]
    changed.sort(key=lambda c: -abs(finite(c.get("delta_us")) or 0.0))
    source = row.get("source") or whatif.SOURCE_REPLAY
    return Estimate(
        scenario=scenario,
        step_time_delta_us=None if predicted is None or base is None else (predicted - base) * steps,
        source=str(source),
        source_note=None if source == whatif.SOURCE_REPLAY else (row.get("note") or None),
        note=row.get("note") if source == whatif.SOURCE_REPLAY and row.get("note") else None,
        edit=str(row["edit"]),
        changed=[dict(c) for c in changed[:CHANGED_MAX_LISTED]],
    )


def closed_form(
    estimate: Estimate | None, data: Mapping[str, Any], wanted: str, failed: str | None = None
) -> Estimate | None:
    """``estimate`` (a closed form) labelled as the fallback, saying why the replay could not price it.

    ``wanted`` names the edit the replay would need (``regroup:all_gather:12``); ``failed`` says why the replay
    of a matching edit gave no step, where it had one."""
    if estimate is None:
        return None
    estimate.source = whatif.SOURCE_CLOSED_FORM
    if replay_of(data) is None:
        why = missing_why(data)
    elif failed:
        why = failed
    else:
        why = f"the replay has no `{wanted}` what-if (`fsdpbench analyze --what-if {wanted}` replays it)"
    estimate.source_note = f"the replay had not what it needed because {why}"
    return estimate


def replay_or_closed_form(
    data: Mapping[str, Any],
    match: Callable[[str], bool],
    wanted: str,
    scenario: str,
    fallback: Estimate | None,
    pick: Callable[[Sequence[Mapping[str, Any]]], Mapping[str, Any]] | None = None,
) -> Estimate | None:
    """The replay's estimate of the first ``what_if`` row whose edit ``match``es (``pick`` chooses among
    several), else ``fallback`` (the rule's closed form) labelled as such."""
    rows = [w for w in what_ifs(data) if match(w["edit"])]
    priced = [w for w in rows if finite(w.get("predicted_step_us")) is not None]
    if priced:
        chosen = pick(priced) if pick is not None else priced[0]
        return estimate_from_what_if(data, chosen, scenario)
    failed = (
        f"its `{rows[0]['edit']}` replay gave no step ({rows[0].get('note') or 'no reason given'})"
        if rows
        else None
    )
    return closed_form(fallback, data, wanted, failed)


def is_regroup(edit: str, types: Mapping[str, Any] | Sequence[str], *, per_unit: bool = False) -> bool:
    """Whether ``edit`` regroups some of ``types`` (and no other): ``regroup:<type>[,<type>…]:<count>``, or
    (``per_unit``) ``regroup:<type>[,<type>…]:unit``."""
    parts = edit.split(":")
    if len(parts) != 3 or parts[0] != "regroup" or not all(t in types for t in parts[1].split(",")):
        return False
    return (parts[2] == "unit") == per_unit


def preferring(edit: str) -> Callable[[Sequence[Mapping[str, Any]]], Mapping[str, Any]]:
    """A ``pick`` that takes the row of ``edit`` where there is one, else the first."""

    def pick(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
        return next((w for w in rows if w["edit"] == edit), rows[0])

    return pick


def fastest(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The row with the smallest predicted step (rows without one last)."""
    return min(rows, key=lambda w: finite(w.get("predicted_step_us")) or float("inf"))


def rule_critical_path(x: RuleInput) -> list[Finding]:
    """Per arm with a replay: the places that hold the step's critical path, their share of the step, and
    whether many places are near-critical (then no one place decides the step)."""
    findings = []
    for side in ("test", "base"):
        data = x.analysis[side]
        replay = replay_of(data)
        if replay is None:
            continue
        critical = [c for c in replay.get("critical") or [] if isinstance(c, Mapping) and finite(c.get("us"))]
        step = replayed_step_us(replay)
        if not critical or not step:
            continue
        critical.sort(key=lambda c: -(finite(c.get("us")) or 0.0))
        top = critical[:CRITICAL_MAX_LISTED]
        lab = x.labels[side]
        near = [n for n in replay.get("near_critical") or [] if isinstance(n, Mapping)]
        error = replay.get("error_pct") if isinstance(replay.get("error_pct"), Mapping) else {}
        evidence = "; ".join(
            f"{place_text(c)} {fmt_us(finite(c.get('us')))} ({fmt_pct((finite(c.get('us')) or 0.0) / step)})"
            for c in top
        )
        evidence += (
            f" of the replayed step {fmt_us(step)} (replay error median "
            f"{_pct_text(error.get('median'))}, max {_pct_text(error.get('max'))} over ranks)"
        )
        excess = [
            e
            for e in replay.get("critical_excess") or []
            if isinstance(e, Mapping) and (finite(e.get("excess_us")) or 0.0) > 0
        ]
        if excess:  # the rank and place that holds the others up (docs/replay.md)
            e = excess[0]
            evidence += (
                f"; the place that determines the step: rank {e.get('rank')} {e.get('unit')} {e.get('phase')}, "
                f"{fmt_us(finite(e.get('excess_us')))} on the path beyond the other ranks' median there "
                "(`replay.critical_excess`)"
            )
        many = len(near) >= NEAR_CRITICAL_MANY
        if near:
            evidence += f"; {len(near)} place(s) off the path are near-critical (slack < 2% of the step)"
        cause = (
            "the step is the longest chain of dependent tasks across ranks (program and stream order, and every "
            "collective waiting for its last rank); the places above hold most of it"
        )
        if many:
            cause += (
                "; many almost-equal paths: the near-critical places are within 2% of the step of being on the "
                "path, so shrinking the top place alone moves the step little"
            )
        action = (
            f"shorten {place_text(top[0])} first; a place with slack gains nothing until its slack is used up"
            + ("; shorten the near-critical places with it (many almost-equal paths)" if many else "")
        )
        findings.append(
            Finding(
                "critical_path",
                "info",
                f"{lab}'s step is held by {place_text(top[0])} "
                f"({fmt_pct((finite(top[0].get('us')) or 0.0) / step)} of it on the critical path)",
                evidence,
                cause,
                action,
                subject=lab,
            )
        )
    return findings


def _pct_text(value: Any) -> str:
    """A percentage already in % (the replay's ``error_pct``), or — when unknown."""
    v = finite(value)
    return MISSING if v is None else f"{v:.1f}%"


CRITICAL_PATH = Rule(
    "critical_path",
    "an arm's analysis has a step replay with a critical path (`replay.critical`)",
    "info",
    "shorten the top critical place first (places with slack gain nothing); with many near-critical places "
    "(many almost-equal paths) shorten them together",
    rule_critical_path,
)
"""Row of the rules table."""
