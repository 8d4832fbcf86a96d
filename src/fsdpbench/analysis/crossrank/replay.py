"""Step replay: every rank's graph (:mod:`fsdpbench.analysis.crossrank.replay_graph`) joined by one rendezvous per
collective instance, replayed as a list schedule; the cross-rank critical path, slack, and what-ifs as
edits of the graph (docs/replay.md). This module is the face: :func:`replay_step`, and the public names of
:mod:`~fsdpbench.analysis.crossrank.replay_schedule` (join, read, the figure's data; the schedule from
:mod:`~fsdpbench.analysis.crossrank.replay_passes`),
:mod:`~fsdpbench.analysis.crossrank.replay_whatif` (the edits and their closed-form fallback) and
:func:`~fsdpbench.analysis.crossrank.replay_excess.critical_excess` (which place determines the step)
re-exported.

Public entry points (documented in docs/replay.md):

* :func:`replay_step` — ``replay_step(res, edits=()) -> dict | None``: the ``replay`` object of
  docs/DATA.md for an :class:`~fsdpbench.analysis.output.result.Analysis` (None, with the reason in
  ``res.replay_note``, when its traces lack what the graph needs);
* :func:`parse_edit` — ``parse_edit("scale:all_gather:0.5") -> Edit``;
* :func:`apply_edit` — ``apply_edit(graph, edit) -> StepGraph``: a copy of the joined graph with the
  edit applied (replay it with :func:`schedule`).

The rendezvous (one per collective instance, across ranks) and what the replay computes of it:
:mod:`fsdpbench.analysis.crossrank.replay_schedule`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from fsdpbench.analysis.crossrank.replay_excess import critical_excess, median, n_steps, task_steps
from fsdpbench.analysis.crossrank.replay_schedule import (
    MAX_RENDEZVOUS,
    MAX_SEGMENTS,
    NEAR_CRITICAL,
    Chains,
    CycleError,
    Reading,
    Schedule,
    StepGraph,
    _figure,
    build_step_graph,
    contract,
    critical_path,
    join_graphs,
    latest_starts,
    queue_gap_us,
    read,
    read_slack,
    schedule,
    unexplained,
    unexplained_gaps,
    unexplained_split,
)
from fsdpbench.analysis.crossrank.replay_whatif import (
    EDIT_HELP,
    SOURCE_CLOSED,
    SOURCE_REPLAY,
    Edit,
    HostFit,
    apply_edit,
    closed_form_row,
    host_per_call,
    parse_edit,
    what_if,
    what_if_row,
)

__all__ = [
    "EDIT_HELP", "MAX_RENDEZVOUS", "MAX_SEGMENTS", "NEAR_CRITICAL", "SOURCE_CLOSED", "SOURCE_REPLAY", "Chains",
    "CycleError", "Edit", "HostFit", "Reading", "Schedule", "StepGraph", "apply_edit", "build_step_graph",
    "closed_form_row", "contract", "critical_excess", "critical_path", "host_per_call", "join_graphs",
    "latest_starts", "n_steps", "parse_edit", "queue_gap_us", "read", "read_slack", "replay_step", "schedule",
    "task_steps", "unexplained", "unexplained_split", "what_if", "what_if_row",
]  # fmt: skip
"""The replay's public names, wherever they live (``replay_schedule``: the joined graph, its schedule and
reading; ``replay_whatif``: the edits), importable from here as before the split."""


SHARE_MIN_TASKS = 100_000
"""``replay_step`` gives its jobs to ``share`` when it has what-ifs (each a replay of the whole edited graph) on
a graph of this many tasks or more. Without what-ifs it keeps them: the reading passes alone (~0.2 s on
700k tasks) gain less from a forked child than it costs (~0.05–0.1 CPU s of fork and copy-on-write faults for
a 300 MB process; docs/benchmarks.md, "The cost round")."""


def replay_step(
    res: Any,
    edits: list[str] | tuple[str, ...] = (),
    share: Callable[[list[Callable[[], Any]]], list[Any]] | None = None,
) -> dict[str, Any] | None:
    """The ``replay`` object of docs/DATA.md for ``res`` (an Analysis), with a ``what_if`` entry per edit
    (:func:`parse_edit`'s syntax). None, with ``res.replay_note`` saying why, when the traces lack what the
    graph needs. Also keeps the joined graph and its identity replay on ``res`` (``_replay``) for the
    Perfetto trace.

    Once the schedule and the critical path are read, the passes that only read them (the slack; the
    excess, the unexplained slack and the figure; each what-if) are jobs given to ``share``, which returns
    their results in order (:func:`fsdpbench.analysis.fanout.share`: beside forked children) when there are
    what-ifs and :data:`SHARE_MIN_TASKS` tasks or more; else (and with None) they run here."""
    parsed = [parse_edit(e) for e in edits]
    try:
        g, why = build_step_graph(res)
    except CycleError as exc:
        g, why = None, f"the graph has a cycle ({exc}): collectives matched wrongly?"
    if g is None:
        res.replay_note = why
        return None
    try:
        s = schedule(g)
    except CycleError as exc:
        res.replay_note = f"the graph has a cycle ({exc}): collectives matched wrongly?"
        return None
    rd = read(g, s, slack=False)
    from fsdpbench.analysis.crossrank.groups import ranks_seen, seen_text

    seen = ranks_seen([r for r in res.ranks if r.device_span_ns])  # the ranks build_step_graph joined
    said = seen_text(seen)
    partial = {str(x["group"]) for x in (getattr(res, "waits", None) or {}).get("partial_groups") or []}
    if said:  # --profile-ranks: the others are not in the graph
        g.notes.append(f"replayed over {said}: a collective's last arrival may be a rank outside")

    def the_rest() -> tuple[Any, ...]:
        s.same = s.merged = None  # the contraction's edge masks (read_slack finds them again without)
        gap = unexplained_gaps(g)
        parts = (
            float(unexplained(g, gap).sum()) / 1000.0,
            unexplained_split(g, bool(said), frozenset(partial), gap),
        )
        del gap
        return critical_excess(g, s, rd.on_path, rd.place_us), *parts, _figure(g, s, rd)

    # about even halves (the slack's latest starts; the excess, the unexplained slack and the figure)
    jobs: list[Callable[[], Any]] = [functools.partial(read_slack, g, s, rd), the_rest]
    jobs += [functools.partial(what_if_row, res, g, rd, e) for e in parsed]
    big = bool(parsed) and g.dur.size >= SHARE_MIN_TASKS
    done = share(jobs) if share is not None and big else [job() for job in jobs]
    rd.slack, rd.near_critical = done[0]
    s.same = s.merged = None
    excess, unexplained_us, unexplained_parts, figure = done[1]
    errs = [
        abs(r["replayed_us"] - r["measured_us"]) / r["measured_us"] * 100
        for r in rd.ranks
        if r["measured_us"] > 0
    ]
    k_steps = n_steps(g)
    out: dict[str, Any] = {
        "error_pct": {"median": median(errs) if errs else None, "max": max(errs) if errs else None},
        "steps": k_steps,
        "step_us": rd.step_us / k_steps,
        "ranks": rd.ranks,
        "unexplained_slack_us": unexplained_us,
        "unexplained_slack_split_us": unexplained_parts,
        "queue_gap_us": queue_gap_us(g),
        "critical": rd.critical,
        "critical_excess": excess,
        "near_critical": rd.near_critical,
        "slack": rd.slack,
        "by_phase": rd.by_phase,
        "what_if": done[2:],
        "figure": figure,
        "notes": g.notes,
        "ranks_seen": seen,
    }
    res._replay = (g, s, rd)
    return out
