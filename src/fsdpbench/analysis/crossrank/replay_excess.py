"""Which (rank, unit, phase) determines the step: the time a rank spends at a place beyond what the other ranks
spend at the same (unit, phase), counted only where it lies on the critical path (docs/replay.md, "Which
place determines the step").

``replay.critical`` ranks (rank, unit, phase, kind) by time on the path. On a step of identical ranks the path
runs through every unit's compute and transfers, so its largest entries are the largest places, not the
rank that holds the others up: a rank sleeping 5 ms at one unit adds a 5 ms host gap to a place whose
compute and transfers hold far more. The engineer's question is which rank's place made the step longer
than its peers would have: per kind, ``min(time on the path, max(the rank's time − the median of the other
ranks' time at the same unit, phase and kind, 0))``, summed over the kinds. A place where every rank
spends the same has no excess, however long it is; a rank's extra time that the others' slack absorbs is
not on the path and counts for nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fsdpbench.analysis.crossrank.replay_graph import K_WAIT, KINDS


def critical_excess(g: Any, place_us: dict[tuple[int, str, str, str], float]) -> list[dict[str, Any]]:
    """Per (rank, unit, phase) with time on the critical path: ``excess_us`` (see the module), ``critical_us``
    (its time on the path, every kind), ``own_us`` (the rank's task time there, waits left out: the replay
    computes them) and ``peers_us`` (Σ over kinds of the median of the other ranks' time at the same unit,
    phase and kind; a rank without that place counts 0, and with no other rank it is 0), sorted by ``excess_us`` then ``critical_us`` descending.

    ``g`` is the joined graph (``StepGraph``); ``place_us`` the reading's time on the path per (rank, unit,
    phase, kind) in µs (``Reading.place_us``)."""
    nk = len(KINDS)
    ranks = [gr.rank for gr in g.graphs]
    real = (g.rank >= 0) & (g.kind != K_WAIT)
    # every rank's task time per (unit, phase, kind): rows the ranks' positions
    cells: dict[tuple[str, str], int] = {}
    code = np.array([cells.setdefault((u, ph), len(cells)) for _, u, ph in g.places], dtype=np.int64)
    own = np.zeros((len(ranks), max(len(cells), 1) * nk), dtype=np.float64)
    if real.any():
        col = code[g.place[real]] * nk + g.kind[real].astype(np.int64)
        np.add.at(own, (g.rank[real], col), g.dur[real].astype(np.float64) / 1000.0)
    pos = {r: i for i, r in enumerate(ranks)}
    on_path: dict[tuple[int, str, str], dict[int, float]] = {}
    for (rk, unit, phase, kind), us in place_us.items():
        on_path.setdefault((rk, unit, phase), {})[KINDS.index(kind)] = us
    out = []
    for (rk, unit, phase), kinds in on_path.items():
        i = pos[rk]
        base = cells[(unit, phase)] * nk
        others = np.delete(own[:, base : base + nk], i, axis=0)
        peers = np.median(others, axis=0) if others.shape[0] else np.zeros(nk)
        mine = own[i, base : base + nk]
        excess = sum(min(us, max(mine[k] - peers[k], 0.0)) for k, us in kinds.items() if k != K_WAIT)
        keep = np.arange(nk) != K_WAIT
        out.append(
            {
                "rank": rk,
                "unit": unit,
                "phase": phase,
                "excess_us": float(excess),
                "critical_us": float(sum(kinds.values())),
                "own_us": float(mine[keep].sum()),
                "peers_us": float(peers[keep].sum()),
            }
        )
    out.sort(key=lambda x: (-x["excess_us"], -x["critical_us"], x["rank"], x["unit"], x["phase"]))
    return out
