"""Which (rank, unit, phase) determines the step: the time a rank spends at a place beyond what the other ranks
spend at the same point of the same (unit, phase), counted only where it lies on the critical path
(docs/replay.md, "Which place determines the step").

``replay.critical`` ranks (rank, unit, phase, kind) by time on the path. On a step of identical ranks the path
runs through every unit's compute and transfers, so its largest entries are the largest places, not the
rank that holds the others up: a rank sleeping 5 ms at one unit adds a 5 ms host gap to a place whose
compute and transfers hold far more. The engineer's question is which rank's place made the step longer
than its peers would have.

The comparison is made per *segment*: a rank's tasks at a place are cut at its arrivals at the collectives
it issues there (segment k of a place: after the place's k-th arrival on that rank, before the next), so
that the same segment on every rank runs the same program between the same two collectives. Per segment
and kind of task (waits left out: the replay computes them), ``min(the rank's time there on the path,
max(the rank's time there − the median of the other ranks' time in the same segment, 0))``; a place's
excess is the sum over its segments and kinds. A place where every rank spends the same has no excess
however long it is; extra time the other ranks' slack absorbs is off the path and counts for nothing; and
the other ranks' time elsewhere at the place (another segment) does not hide a rank's extra time in this one.

Over several profiled steps (``--profile-steps K``) the comparison is made per step as well (a task's step: the
``ProfilerStep`` window of its rank it starts in, :func:`task_steps`), and a place's ``excess_us`` is the median
over the K steps of its per-step excess (beside it, ``excess_per_step_us``): a delay the program makes in
every step holds the step up in a typical step, while a rank the OS stalls once, in one step, does not; the
sum or the maximum would let that one stall win.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fsdpbench.analysis.crossrank.replay_graph import K_WAIT, KINDS, _unique_inverse


def n_steps(g: Any) -> int:
    """How many profiled steps the joined graph's window holds: the most ``step_ns`` a rank has (at least 1)."""
    return max([1] + [int(getattr(gr, "step_ns", np.zeros(0)).size) for gr in g.graphs])


def task_steps(g: Any) -> np.ndarray:
    """Per task of the joined graph: its step (0-based), the last of its rank's steps that starts no later
    than its measured start (a task before them all: step 0); -1 for rendezvous tasks."""
    out = np.full(g.dur.size, -1, dtype=np.int64)
    for i, gr in enumerate(g.graphs):
        a, b = int(g.offset[i]), int(g.offset[i + 1])
        starts = np.asarray(getattr(gr, "step_ns", np.zeros(0)), dtype=np.int64) - int(g.offset_ns[i])
        if starts.size <= 1:
            out[a:b] = 0
            continue
        out[a:b] = np.maximum(np.searchsorted(starts, g.meas[a:b], side="right") - 1, 0)
    return out


def _segments(g: Any) -> np.ndarray:
    """Per task: its segment at its place (the number of its rank's arrivals at that place that start no
    later than the task); -1 for rendezvous tasks."""
    arrivals = np.array([a for x in g.rendezvous for a in x["arrivals"]], dtype=np.int64)
    arrivals = arrivals[g.rank[arrivals] >= 0] if arrivals.size else arrivals
    real = np.flatnonzero(g.rank >= 0)
    seg = np.full(g.dur.size, -1, dtype=np.int64)
    if not real.size:
        return seg
    lo = int(g.meas[real].min())
    span = int(g.meas[real].max()) - lo + 1

    def keys(t: np.ndarray) -> np.ndarray:  # place (a rank's own) major, measured start minor
        return g.place[t].astype(np.int64) * span + (g.meas[t] - lo)  # places are int32: widen first

    arr_keys = np.sort(keys(arrivals)) if arrivals.size else np.zeros(0, dtype=np.int64)
    task_keys = keys(real)
    # the arrivals before each place's first instant: one search per place, not per task
    n_places = int(g.place[real].max()) + 1
    first = np.searchsorted(arr_keys, np.arange(n_places, dtype=np.int64) * span, side="left")
    seg[real] = np.searchsorted(arr_keys, task_keys, side="right") - first[g.place[real]]
    return seg


def median(a: Any, axis: int | None = None) -> Any:
    """``np.median(a, axis)`` of finite values, the same numbers (the middle one, or ``(lo + hi) / 2`` of the
    middle two), without ``np.median``, whose NaN check imports ``numpy.ma`` on first use (~8 ms of a cold
    ``analyze``'s main process). ``a`` is not empty along ``axis``; a float where ``axis`` is None."""
    x = np.sort(np.asarray(a, dtype=np.float64), axis=axis)  # axis None: flattened
    ax = 0 if axis is None else axis
    k = x.shape[ax]
    hi = np.take(x, k // 2, axis=ax)
    out = hi if k % 2 else (np.take(x, k // 2 - 1, axis=ax) + hi) / 2.0
    return float(out) if axis is None else out


def _sum_at(rows: np.ndarray, cols: np.ndarray, weights: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """``np.add.at(zeros(shape), (rows, cols), weights)`` (the same sums, added in the same order) by a
    bincount."""
    flat = rows.astype(np.int64) * shape[1] + cols
    return np.bincount(flat, weights=weights, minlength=shape[0] * shape[1]).reshape(shape)


def critical_excess(
    g: Any, s: Any, on_path: np.ndarray, place_us: dict[tuple[int, str, str, str], float]
) -> list[dict[str, Any]]:
    """Per (rank, unit, phase) with time on the critical path: ``excess_us`` (see the module),
    ``critical_us`` (its time on the path, every kind, as ``critical``), ``own_us`` (the rank's task time
    there, waits left out) and ``peers_us`` (Σ over segments and kinds of the median of the other ranks'
    time there; a rank without it counts 0, and with no other rank it is 0), sorted by ``excess_us`` then
    ``critical_us`` descending. With several steps (:func:`n_steps`) ``excess_us`` is the median over steps of
    the per-step excess, listed in ``excess_per_step_us``; ``critical_us``, ``own_us`` and ``peers_us`` stay
    sums over the whole window.

    ``g`` is the joined graph (``StepGraph``), ``s`` its replay (``Schedule``), ``on_path`` the reading's
    per-task flag and ``place_us`` its time on the path per (rank, unit, phase, kind) in µs."""
    nk = len(KINDS)
    n_ranks = len(g.graphs)
    k_steps = n_steps(g)
    real = np.flatnonzero((g.rank >= 0) & (g.kind != K_WAIT))
    crit_place: dict[tuple[int, str, str], float] = {}
    for (rk, unit, phase, _), us in place_us.items():
        crit_place[(rk, unit, phase)] = crit_place.get((rk, unit, phase), 0.0) + us
    if not real.size or not crit_place:
        return []
    cells: dict[tuple[str, str], int] = {}
    up = np.array([cells.setdefault((u, ph), len(cells)) for _, u, ph in g.places], dtype=np.int64)
    # only the (unit, phase)s the path visits are compared: a row per rank, a column per cell of theirs
    visited = np.zeros(len(cells), dtype=bool)
    visited[[cells[(u, ph)] for _, u, ph in crit_place]] = True
    real = real[visited[up[g.place[real]]]]
    seg = _segments(g)[real]
    step = task_steps(g)[real] if k_steps > 1 else np.zeros(real.size, dtype=np.int64)
    n_seg = int(seg.max()) + 1 if seg.size else 1
    # a cell: (unit, phase) × step × segment × kind, the same on every rank
    cell_raw = ((up[g.place[real]] * k_steps + step) * n_seg + seg) * nk + g.kind[real].astype(np.int64)
    cell_ids, cell = _unique_inverse(cell_raw)
    shape = (n_ranks, cell_ids.size)
    own = _sum_at(g.rank[real], cell, g.dur[real].astype(np.float64) / 1000.0, shape)
    path = on_path[real]
    onp = _sum_at(g.rank[real][path], cell[path], (s.end[real][path] - s.start[real][path]) / 1000.0, shape)
    rk_pos = {gr.rank: i for i, gr in enumerate(g.graphs)}
    place_of_cell = cell_ids // nk // n_seg // k_steps  # the (unit, phase) code of each cell
    step_of_cell = cell_ids // nk // n_seg % k_steps
    out = []
    for (rk, unit, phase), crit in crit_place.items():
        i = rk_pos[rk]
        mine = np.flatnonzero(place_of_cell == cells.get((unit, phase), -1))
        others = np.delete(own[:, mine], i, axis=0)
        peers = median(others, axis=0) if others.shape[0] else np.zeros(mine.size)
        per_cell = np.minimum(onp[i, mine], np.maximum(own[i, mine] - peers, 0.0))
        per_step = np.bincount(step_of_cell[mine], weights=per_cell, minlength=k_steps)
        row: dict[str, Any] = {
            "rank": rk,
            "unit": unit,
            "phase": phase,
            "excess_us": float(per_cell.sum()) if k_steps == 1 else median(per_step),
            "critical_us": float(crit),
            "own_us": float(own[i, mine].sum()),
            "peers_us": float(peers.sum()),
        }
        if k_steps > 1:
            row["excess_per_step_us"] = [float(x) for x in per_step]
        out.append(row)
    out.sort(key=lambda x: (-x["excess_us"], -x["critical_us"], x["rank"], x["unit"], x["phase"]))
    return out
