"""The report's critical-path section, from each arm's step replay (the Analysis JSON's ``replay``).

Per arm: the replay's error against the measured step (always, first), the places that determine the step
(their excess over the other ranks, on the critical path), the figure of every rank's lanes with
the critical path and the rendezvous, the critical path per phase, the top places by critical time with their
slack, the near-critical places ("many almost-equal paths" when several are), and the replayed what-ifs. An arm
without a replay says why, and that its findings' what-ifs are closed forms.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fsdpbench.analysis.findings import finite
from fsdpbench.analysis.findings import replay as rp
from fsdpbench.analysis.findings.thresholds import NEAR_CRITICAL_MANY
from fsdpbench.fmt import MISSING, fmt, fmt_pct, fmt_us, fmt_us_as_ms
from fsdpbench.report.blocks import Banner, Block, Details, Figure, Heading, Para, Table
from fsdpbench.report.load import RunData
from fsdpbench.report.replay_figure import replay_lanes
from fsdpbench.report.terminal.replay import REPLAY_KINDS, error_warning, slack_parts

TOP_PLACES = 10
"""Rows of the top-places and near-critical tables."""
KIND_ORDER = REPLAY_KINDS
"""The replay's task kinds in table order (others follow in the order met)."""


def _rows(value: Any) -> list[Mapping[str, Any]]:
    return [r for r in value or [] if isinstance(r, Mapping)] if isinstance(value, list) else []


def _key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return (row.get("rank"), row.get("unit"), row.get("phase"), row.get("kind"))


def _pct(value: Any) -> str:
    """A value already in % (the replay's ``error_pct``)."""
    v = finite(value)
    return MISSING if v is None else f"{v:.1f}%"


def _text(value: Any) -> str:
    return MISSING if value in (None, "") else str(value)


def replay_section(data: RunData) -> list[Block]:
    """The "Critical path (step replay)" section; nothing when the run has no analysed profiles."""
    analysis = data.analysis or {}
    arms = [a for a in data.arms if a in analysis] + [a for a in analysis if a not in data.arms]
    if not arms:
        return []
    blocks: list[Block] = [
        Heading("Critical path (step replay)"),
        Para(
            "Each arm's profiled step replayed as a graph: per rank, program order on each thread, launches and "
            "stream order; across ranks, one rendezvous per collective whose transfer starts when the last rank "
            "arrives. Waiting is computed by the replay, never copied from the trace. The critical path is the "
            "chain of tasks that sets the step; a place's slack is how much it could grow before the step grows. "
            "The replay's error against the measured step comes first: read the path only as far as the replay "
            'reproduces the step (docs/diagnosis.md, "The critical path").'
        ),
    ]
    for arm in arms:
        blocks.extend(arm_blocks(arm, analysis[arm], len(arms) > 1))
    return blocks


def arm_blocks(arm: str, data: Mapping[str, Any], heading: bool = True) -> list[Block]:
    """The section's blocks for one arm (its Analysis JSON ``data``)."""
    blocks: list[Block] = [Heading(f"`{arm}`", 3)] if heading else []
    replay = rp.replay_of(data)
    if replay is None:
        blocks.append(
            Banner(
                "info",
                f"`{arm}`: no step replay: {rp.missing_why(data)}. Its findings' what-ifs are closed forms "
                "(labelled so in the diagnosis).",
            )
        )
        return blocks
    step = rp.replayed_step_us(replay)  # per step, as the what-ifs' predictions
    k = int(finite(replay.get("steps")) or 1)
    window = None if step is None else step * k  # the places' times are over the whole profiled window
    blocks.extend(_error(arm, replay, window))
    blocks.extend(_excess(replay, step, window))
    figure = replay.get("figure")
    if isinstance(figure, Mapping) and _rows(figure.get("lanes")):
        name = f"replay_{_safe(arm)}"
        blocks.append(
            Figure(
                name,
                replay_lanes(arm, dict(figure), name),
                f"`{arm}`: the replayed step of every rank on the aligned clock, a row per lane (thread or "
                "stream), tasks coloured by kind, full colour on the critical path and faded off it. The black "
                "line is the critical path (dashed where it crosses lanes or ranks); ▼ marks where each rank "
                "arrived at a collective (red: the last to arrive, which starts the transfer for all) and the "
                "shaded band is that collective's transfer over the ranks of its group.",
            )
        )
    blocks.extend(_by_phase(replay, window))
    blocks.extend(_places(replay, window))
    blocks.extend(_near(replay, window))
    blocks.extend(_what_ifs(replay, step))
    return blocks


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in label)


def _error(arm: str, replay: Mapping[str, Any], step: float | None) -> list[Block]:
    error = replay.get("error_pct") if isinstance(replay.get("error_pct"), Mapping) else {}
    slack = finite(replay.get("unexplained_slack_us"))
    line = (
        f"**Replay error**: median {_pct(error.get('median'))}, max {_pct(error.get('max'))} over ranks "
        "(|replayed − measured| / measured step)"
    )
    if slack is not None:
        share = f", {fmt_pct(slack / step)} of the replayed step" if step else ""
        line += (
            f"; unexplained slack {fmt_us(slack)} (time tasks started later than the graph explains{share})"
            + slack_parts(dict(replay))
        )
    notes = [str(n) for n in replay.get("notes") or [] if n] if isinstance(replay.get("notes"), list) else []
    if notes:  # the replay's own remarks (how collectives were matched, what an edit could not do)
        line += ". Replay notes: " + "; ".join(notes)
    blocks: list[Block] = [Para(line + ".")]
    worst = finite(error.get("max"))
    warning = error_warning(worst, _pct(worst))
    if warning:
        blocks.append(Banner("warning", f"`{arm}`: {warning}."))
    ranks = _rows(replay.get("ranks"))
    if ranks:
        rows = []
        for r in sorted(ranks, key=lambda r: finite(r.get("rank")) or 0.0):
            measured, replayed = finite(r.get("measured_us")), finite(r.get("replayed_us"))
            err = abs(replayed - measured) / measured if measured and replayed is not None else None
            rows.append([_text(r.get("rank")), fmt_us_as_ms(measured), fmt_us_as_ms(replayed), fmt_pct(err)])
        blocks.append(
            Details(
                f"Measured and replayed step per rank ({len(rows)} ranks)",
                [Table(["rank", "measured (ms)", "replayed (ms)", "error"], rows)],
            )
        )
    return blocks


def _by_phase(replay: Mapping[str, Any], step: float | None) -> list[Block]:
    phases = _rows(replay.get("by_phase"))
    if not phases:
        return []
    met = [k for p in phases for k in (p.get("kinds") or {}) if isinstance(p.get("kinds"), Mapping)]
    kinds = [k for k in KIND_ORDER if k in met] + list(dict.fromkeys(k for k in met if k not in KIND_ORDER))
    rows = []
    for p in phases:
        us = finite(p.get("us"))
        per = p.get("kinds") if isinstance(p.get("kinds"), Mapping) else {}
        rows.append(
            [
                _text(p.get("phase")),
                fmt_us_as_ms(us),
                fmt_pct(us / step if us is not None and step else None),
                *(fmt_us_as_ms(finite(per.get(k))) for k in kinds),
            ]
        )
    headers = [
        "phase",
        "on the critical path (ms)",
        "of the step",
        *(f"{k.replace('_', ' ')} (ms)" for k in kinds),
    ]
    return [
        Para("**The critical path per phase** (by the kind of task it runs through):"),
        Table(headers, rows),
    ]


def _excess(replay: Mapping[str, Any], step: float | None, window: float | None = None) -> list[Block]:
    """Which place determines the step: ``replay.critical_excess`` (absent in replays made before it: no
    block), the places with an excess first. ``step``: one step (the excess is per step: over several, the
    median); ``window``: the whole profiled window (the times on the path and at the place)."""
    rows_in = [r for r in _rows(replay.get("critical_excess")) if (finite(r.get("excess_us")) or 0.0) > 0]
    if "critical_excess" not in replay:
        return []
    if not rows_in:
        return [Para("**Which place determines the step:** no rank spends more than the others at any place on the "
                     "critical path (its time is the places' own, shared by every rank).")]  # fmt: skip
    rows = []
    for i, r in enumerate(rows_in[:TOP_PLACES], 1):
        us = finite(r.get("excess_us"))
        rows.append(
            [
                str(i),
                _text(r.get("rank")),
                _text(r.get("unit")),
                _text(r.get("phase")),
                fmt_us_as_ms(us),
                fmt_pct(us / step if us is not None and step else None),
                fmt_us_as_ms(finite(r.get("critical_us"))),
                fmt_us_as_ms(finite(r.get("own_us"))),
                fmt_us_as_ms(finite(r.get("peers_us"))),
            ]
        )
    return [
        Para(
            "**Which place determines the step**: per (rank, unit, phase) on the critical path, the time the rank "
            "spends there beyond the other ranks' median at the same point of the program (between the same "
            "collectives, kind by kind), as far as it lies on the path. The top row is the rank and place that holds the others up; what removing "
            "it would save is a what-if's to say (`delay:RANK:UNIT:PHASE:-MS`, `straggler:remove:RANK`)."
            + (
                f" Over the {int(finite(replay.get('steps')) or 1)} profiled steps the excess is the median of "
                "each step's (a rank stalled in one step only does not top the list); the times on the path, at "
                "this rank and at the others are over all of them."
                if (finite(replay.get("steps")) or 1) > 1
                else ""
            )
        ),
        Table(
            [
                "#",
                "rank",
                "unit",
                "phase",
                "excess (ms)",
                "of the step",
                "on the path (ms)",
                "this rank (ms)",
                "other ranks, median (ms)",
            ],
            rows,
        ),  # fmt: skip
    ]


def _places(replay: Mapping[str, Any], step: float | None) -> list[Block]:
    critical = sorted(_rows(replay.get("critical")), key=lambda c: -(finite(c.get("us")) or 0.0))
    if not critical:
        return []
    slack = {_key(s): finite(s.get("slack_us")) for s in _rows(replay.get("slack"))}
    rows = []
    for i, c in enumerate(critical[:TOP_PLACES], 1):
        us = finite(c.get("us"))
        rows.append(
            [
                str(i),
                _text(c.get("rank")),
                _text(c.get("unit")),
                _text(c.get("phase")),
                _text(c.get("kind")),
                fmt_us_as_ms(us),
                fmt_pct(us / step if us is not None and step else None),
                fmt_us_as_ms(slack.get(_key(c))),
            ]
        )
    more = f" (top {TOP_PLACES} of {len(critical)})" if len(critical) > TOP_PLACES else ""
    return [
        Para(
            f"**Top places by time on the critical path**{more}: a place is (rank, unit, phase, kind); its slack "
            "is the least over its tasks (0 = a task of it is on the path)."
        ),
        Table(["#", "rank", "unit", "phase", "kind", "on the path (ms)", "of the step", "slack (ms)"], rows),
    ]


def _near(replay: Mapping[str, Any], step: float | None) -> list[Block]:
    near = sorted(_rows(replay.get("near_critical")), key=lambda n: finite(n.get("slack_us")) or 0.0)
    limit = f"{fmt_us(0.02 * step)} (2% of the step)" if step else "2% of the step"
    if not near:
        return [
            Para(
                f"No place off the critical path is near-critical (slack under {limit}): one path sets the step."
            )
        ]
    blocks: list[Block] = []
    if len(near) >= NEAR_CRITICAL_MANY:
        blocks.append(
            Banner(
                "info",
                f"Many almost-equal paths: {len(near)} places off the critical path have slack under {limit}. "
                "Shortening the top place alone moves the step little; another path takes over.",
            )
        )
    rows = [
        [
            _text(n.get("rank")),
            _text(n.get("unit")),
            _text(n.get("phase")),
            _text(n.get("kind")),
            fmt_us_as_ms(finite(n.get("slack_us"))),
        ]  # fmt: skip
        for n in near[:TOP_PLACES]
    ]
    blocks.append(Para(f"**Near-critical places** (off the path, slack under {limit}; least slack first):"))
    blocks.append(Table(["rank", "unit", "phase", "kind", "slack (ms)"], rows))
    return blocks


def _what_ifs(replay: Mapping[str, Any], step: float | None) -> list[Block]:
    rows_in = [w for w in _rows(replay.get("what_if")) if w.get("edit")]
    if not rows_in:
        return []
    rows = []
    for w in rows_in:
        predicted = finite(w.get("predicted_step_us"))
        delta = predicted - step if predicted is not None and step is not None else None
        phases = w.get("phases") if isinstance(w.get("phases"), Mapping) else {}
        changed = sorted(_rows(w.get("changed")), key=lambda c: -abs(finite(c.get("delta_us")) or 0.0))
        rows.append(
            [
                f"`{w['edit']}`",
                fmt_us_as_ms(predicted),
                fmt_us(delta, signed=True) if delta is not None else MISSING,
                fmt_pct(delta / step if delta is not None and step else None),
                ", ".join(
                    f"{p} {fmt(finite(v) / 1e3 if finite(v) is not None else None, 2)}"
                    for p, v in phases.items()
                )
                or MISSING,
                ", ".join(
                    f"{rp.place_text(c)} {fmt_us(finite(c.get('delta_us')), signed=True)}"
                    for c in changed[:3]
                )
                or MISSING,
                _text(w.get("source")),
                _text(w.get("note")) if w.get("note") else "",
            ]
        )
    return [
        Para("**What-ifs, replayed** (each an edit of the step's graph; change against the replayed step):"),
        Table(
            [
                "edit",
                "predicted step (ms)",
                "change",
                "of the step",
                "per phase (ms)",
                "changed on the critical path",
                "source",
                "note",
            ],
            rows,
            numeric=False,
        ),
    ]
