"""The replayed step as a Chrome/Perfetto trace (``replay.perfetto.json``, docs/replay.md): one process per
rank, one thread per lane, every task as a complete event (``args``: kind, unit, phase, slack_us,
on_path), the critical path as flow events from each path task to the next, and each rendezvous as an
instant event on the lane of its last arrival."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson

from fsdpbench.analysis.crossrank.replay_graph import KINDS


def trace_events(g: Any, s: Any, rd: Any) -> list[dict[str, Any]]:
    """The events of the trace (``g``, ``s``, ``rd``: the joined graph, its schedule, its reading)."""
    from fsdpbench.analysis.crossrank.replay_schedule import latest_starts

    t0 = min(gr.ws_ns - o for gr, o in zip(g.graphs, g.offset_ns, strict=True))
    end = int(s.end[g.rank >= 0].max())
    slack = latest_starts(g, s, end) - s.start
    out: list[dict[str, Any]] = []
    for gr in g.graphs:
        out.append({"ph": "M", "name": "process_name", "pid": gr.rank, "args": {"name": f"rank {gr.rank}"}})
        for li, name in enumerate(gr.lanes):
            out.append({"ph": "M", "name": "thread_name", "pid": gr.rank, "tid": li, "args": {"name": name}})
    show = np.flatnonzero((g.rank >= 0) & (s.end > s.start))
    for v in show.tolist():
        i = int(g.rank[v])
        gr = g.graphs[i]
        loc = int(g.local[v])
        _, unit, phase = g.places[int(g.place[v])]
        op = int(gr.op[loc])
        kind = KINDS[int(g.kind[v])]
        out.append(
            {
                "ph": "X",
                "name": gr.ops[op] if op >= 0 else kind,
                "cat": kind,
                "pid": gr.rank,
                "tid": int(gr.lane[loc]),
                "ts": (int(s.start[v]) - t0) / 1000.0,
                "dur": (int(s.end[v]) - int(s.start[v])) / 1000.0,
                "args": {
                    "kind": kind,
                    "unit": unit,
                    "phase": phase,
                    "slack_us": max(int(slack[v]), 0) / 1000.0,
                    "on_path": bool(rd.on_path[v]),
                },  # fmt: skip
            }
        )
    # the critical path: a flow from each task on it to the next (start of the step first)
    path = [v for v in rd.path[::-1].tolist() if g.rank[v] >= 0 and s.end[v] > s.start[v]]
    for k, v in enumerate(path):
        gr = g.graphs[int(g.rank[v])]
        loc = int(g.local[v])
        base = {
            "name": "critical path",
            "cat": "critical_path",
            "id": 1,
            "pid": gr.rank,
            "tid": int(gr.lane[loc]),
        }
        if k == 0:
            out.append({**base, "ph": "s", "ts": (int(s.start[v]) - t0) / 1000.0})
        elif k == len(path) - 1:
            out.append({**base, "ph": "f", "bp": "e", "ts": (int(s.start[v]) - t0) / 1000.0})
        else:
            out.append({**base, "ph": "t", "ts": (int(s.start[v]) - t0) / 1000.0})
    for x in g.rendezvous:
        last = max(x["arrivals"], key=lambda a: int(s.end[a]))
        gr = g.graphs[int(g.rank[last])]
        out.append(
            {
                "ph": "i",
                "s": "t",
                "name": f"rendezvous {x['type']}",
                "pid": gr.rank,
                "tid": int(gr.lane[int(g.local[last])]),
                "ts": (int(s.start[x["task"]]) - t0) / 1000.0,
                "args": {"key": str(x["key"]), "last_rank": gr.rank},
            }
        )
    return out


def write_trace(path: str | Path, g: Any, s: Any, rd: Any) -> None:
    """Write the trace (a JSON object with ``traceEvents``) to ``path``."""
    doc = {"traceEvents": trace_events(g, s, rd), "displayTimeUnit": "ms"}
    Path(path).write_bytes(orjson.dumps(doc))
