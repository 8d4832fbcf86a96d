"""Step replay: every rank's graph (:mod:`fsdpbench.analysis.replay_graph`) joined by one rendezvous per
collective instance, replayed as a list schedule; the cross-rank critical path, slack, and what-ifs as
edits of the graph (docs/replay.md).

Public entry points (documented in docs/replay.md):

* :func:`replay_step` — ``replay_step(res, edits=()) -> dict | None``: the ``replay`` object of
  docs/DATA.md for an :class:`~fsdpbench.analysis.result.Analysis` (None, with the reason in
  ``res.replay_note``, when its traces lack what the graph needs);
* :func:`parse_edit` — ``parse_edit("scale:all_gather:0.5") -> Edit``;
* :func:`apply_edit` — ``apply_edit(graph, edit) -> StepGraph``: a copy of the joined graph with the
  edit applied (replay it with :func:`schedule`).

The rendezvous: collective instance c (matched across ranks by (group, seq), else fsdpbench's c10d
ranges, else order in its group: the same keys as analysis/waits.py) has an arrival task on each rank
holding it; its transfer starts when the last of them has arrived (on the aligned clocks), and rank r's
part lasts ``max(e_r - L, 0)``, its measured end after the measured last arrival ``L`` (aligned). The
waits are what the replay computes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fsdpbench.analysis.replay_graph import K_GAP, K_LAUNCH, K_TRANSFER, K_WAIT, KINDS, RankGraph
from fsdpbench.errors import ConfigError

NEAR_CRITICAL = 0.02
"""Places off the critical path with slack below this share of the step are near-critical."""
MAX_SEGMENTS = 2000
MAX_RENDEZVOUS = 300
SOURCE_REPLAY = "replay"
SOURCE_CLOSED = "closed form"


@dataclass
class StepGraph:
    """All ranks' tasks in one graph (aligned clock, ns), plus one rendezvous task per collective instance
    (rank -1, length 0)."""

    rank: np.ndarray
    """Per task: position of its rank in ``graphs`` (-1: a rendezvous)."""
    local: np.ndarray
    """Per task: its index in its rank's graph (-1: a rendezvous)."""
    dur: np.ndarray
    meas: np.ndarray
    """Per task: measured start on the aligned clock."""
    kind: np.ndarray
    place: np.ndarray
    """Per task: index into ``places`` ((rank, unit, phase)); -1 for rendezvous."""
    places: list[tuple[int, str, str]]
    esrc: np.ndarray
    edst: np.ndarray
    ew: np.ndarray
    ekind: np.ndarray
    base: np.ndarray
    """Per task: earliest start (each rank's step start for its node 0; very negative otherwise)."""
    graphs: list[RankGraph]
    offset_ns: list[int]
    offset: np.ndarray
    """Per rank: first task's position in the joined arrays."""
    rendezvous: list[dict[str, Any]] = field(default_factory=list)
    """Per instance: ``{key, type, task, arrivals: [task], xfers: [task], ranks: [rank position]}``."""
    notes: list[str] = field(default_factory=list)

    def copy(self) -> StepGraph:
        return replace(
            self,
            dur=self.dur.copy(),
            esrc=self.esrc.copy(),
            edst=self.edst.copy(),
            ew=self.ew.copy(),
            ekind=self.ekind.copy(),
        )


# ------------------------------------------------------------------------------------------ building
def join_graphs(graphs: list[RankGraph], keys: list[list[Any]], offset_ns: list[int]) -> StepGraph:
    """The joined graph: each rank's tasks moved onto the aligned clock (``- offset_ns``), and one
    rendezvous per key shared by the ranks' collectives (``keys[i][j]``: key of rank i's j-th collective)."""
    sizes = [len(g) for g in graphs]
    offset = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offset[-1])
    place_index: dict[tuple[int, str, str], int] = {}
    parts_place = []
    for g in graphs:
        m = np.array(
            [place_index.setdefault((g.rank, u, p), len(place_index)) for u, p in g.places], dtype=np.int64
        )
        parts_place.append(m[g.place] if m.size else np.zeros(len(g), np.int64))
    rank = np.concatenate([np.full(len(g), i, dtype=np.int64) for i, g in enumerate(graphs)])
    local = np.concatenate([np.arange(len(g), dtype=np.int64) for g in graphs])
    dur = np.concatenate([g.dur for g in graphs]).astype(np.int64)
    meas = np.concatenate([g.start - o for g, o in zip(graphs, offset_ns, strict=True)])
    kind = np.concatenate([g.kind for g in graphs]).astype(np.int8)
    place = np.concatenate(parts_place)
    esrc = [g.esrc + offset[i] for i, g in enumerate(graphs)]
    edst = [g.edst + offset[i] for i, g in enumerate(graphs)]
    ew = [g.ew for g in graphs]
    ek = [g.ekind for g in graphs]
    # rendezvous
    by_key: dict[Any, list[tuple[int, int]]] = {}
    for i, ks in enumerate(keys):
        for j, k in enumerate(ks):
            by_key.setdefault(k, []).append((i, j))
    rv = []
    r_src, r_dst = [], []
    extra = 0
    for k, holders in by_key.items():
        task = n + extra
        extra += 1
        arr = [int(offset[i] + graphs[i].c_arrive[j]) for i, j in holders]
        xf = [int(offset[i] + graphs[i].c_xfer[j]) for i, j in holders]
        a_meas = [int(graphs[i].c_start[j]) - offset_ns[i] for i, j in holders]
        e_meas = [int(graphs[i].c_end[j]) - offset_ns[i] for i, j in holders]
        last = max(a_meas)
        for x, e in zip(xf, e_meas, strict=True):
            dur[x] = max(e - last, 0)
            meas[x] = last
        r_src += arr
        r_dst += [task] * len(arr)
        r_src += [task] * len(xf)
        r_dst += xf
        i0, j0 = holders[0]
        rv.append({"key": k, "type": graphs[i0].c_type[j0], "task": task, "arrivals": arr, "xfers": xf,
                   "ranks": [i for i, _ in holders], "measured_last": last})  # fmt: skip
    nrv = len(rv)
    rank = np.concatenate([rank, np.full(nrv, -1, np.int64)])
    local = np.concatenate([local, np.full(nrv, -1, np.int64)])
    dur = np.concatenate([dur, np.zeros(nrv, np.int64)])
    meas = np.concatenate([meas, np.array([x["measured_last"] for x in rv], dtype=np.int64)])
    kind = np.concatenate([kind, np.full(nrv, K_WAIT, np.int8)])
    place = np.concatenate([place, np.full(nrv, -1, np.int64)])
    esrc.append(np.array(r_src, dtype=np.int64))
    edst.append(np.array(r_dst, dtype=np.int64))
    ew.append(np.zeros(len(r_src), dtype=np.int64))
    ek.append(np.full(len(r_src), K_WAIT, dtype=np.int8))
    base = np.full(n + nrv, np.iinfo(np.int64).min // 4, dtype=np.int64)
    for i, g in enumerate(graphs):
        base[offset[i]] = g.ws_ns - offset_ns[i]
    return StepGraph(
        rank=rank, local=local, dur=dur, meas=meas, kind=kind, place=place, places=list(place_index),
        esrc=np.concatenate(esrc), edst=np.concatenate(edst), ew=np.concatenate(ew), ekind=np.concatenate(ek),
        base=base, graphs=graphs, offset_ns=list(offset_ns), offset=offset, rendezvous=rv,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------ replay
@dataclass
class Schedule:
    """A replay of a :class:`StepGraph`: per task its start and end, the edge that bound its start
    (-1: its earliest start), and the topological order used."""

    start: np.ndarray
    end: np.ndarray
    binding: np.ndarray
    order: np.ndarray


class CycleError(ValueError):
    """The graph has a cycle (collectives matched wrongly, or an edit that makes a task wait for itself)."""


def _topo_order(n: int, esrc: np.ndarray, edst: np.ndarray, hint: np.ndarray) -> np.ndarray:
    """A topological order: the tasks sorted by ``hint`` (measured start) when every edge goes forward
    in it (the usual case, checked at numpy speed), else Kahn's algorithm."""
    order = np.lexsort((np.arange(n), hint))
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    if esrc.size == 0 or bool((pos[esrc] < pos[edst]).all()):
        return order
    indeg = np.bincount(edst, minlength=n).astype(np.int64)
    by_src = np.argsort(esrc, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(esrc, minlength=n))])
    dst_sorted = edst[by_src].tolist()
    ptr_l = ptr.tolist()
    deg = indeg.tolist()
    import heapq

    hint_l = hint.tolist()
    ready = [(hint_l[v], v) for v in np.flatnonzero(indeg == 0).tolist()]
    heapq.heapify(ready)
    out = []
    while ready:
        _, v = heapq.heappop(ready)
        out.append(v)
        for k in range(ptr_l[v], ptr_l[v + 1]):
            d = dst_sorted[k]
            deg[d] -= 1
            if deg[d] == 0:
                heapq.heappush(ready, (hint_l[d], d))
    if len(out) != n:
        raise CycleError(f"{n - len(out)} tasks are on a cycle")
    return np.array(out, dtype=np.int64)


def schedule(g: StepGraph) -> Schedule:
    """Replay ``g``: every task starts when the last of its predecessors has ended (plus the edge's
    latency), and not before its earliest start."""
    n = g.dur.size
    order = _topo_order(n, g.esrc, g.edst, g.meas)
    by_dst = np.argsort(g.edst, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(g.edst, minlength=n))]).tolist()
    src_l = g.esrc[by_dst].tolist()
    w_l = g.ew[by_dst].tolist()
    eid_l = by_dst.tolist()
    dur_l = g.dur.tolist()
    start = g.base.tolist()
    end = [0] * n
    bind = [-1] * n
    for v in order.tolist():
        s = start[v]
        b = -1
        for k in range(ptr[v], ptr[v + 1]):
            x = end[src_l[k]] + w_l[k]
            if x > s or (x == s and b >= 0):
                s = x
                b = eid_l[k]
        start[v] = s
        bind[v] = b
        end[v] = s + dur_l[v]
    return Schedule(
        np.array(start, dtype=np.int64), np.array(end, dtype=np.int64), np.array(bind, dtype=np.int64), order
    )


def latest_starts(g: StepGraph, s: Schedule, deadline: int) -> np.ndarray:
    """Per task the latest start that does not delay the step's end past ``deadline``."""
    n = g.dur.size
    by_src = np.argsort(g.esrc, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(g.esrc, minlength=n))]).tolist()
    dst_l = g.edst[by_src].tolist()
    w_l = g.ew[by_src].tolist()
    dur_l = g.dur.tolist()
    lf = [deadline] * n
    ls = [0] * n
    for v in s.order[::-1].tolist():
        f = lf[v]
        for k in range(ptr[v], ptr[v + 1]):
            x = ls[dst_l[k]] - w_l[k]
            if x < f:
                f = x
        lf[v] = f
        ls[v] = f - dur_l[v]
    return np.array(ls, dtype=np.int64)


# ------------------------------------------------------------------------------------------ reading
def _rank_ends(g: StepGraph, s: Schedule) -> np.ndarray:
    """Per rank the end of its last task (aligned clock)."""
    out = np.zeros(len(g.graphs), dtype=np.int64)
    for i in range(len(g.graphs)):
        a, b = int(g.offset[i]), int(g.offset[i + 1])
        out[i] = s.end[a:b].max()
    return out


def critical_path(g: StepGraph, s: Schedule) -> list[tuple[int, int, int, int]]:
    """The critical path from the step's end back to a rank's start: ``(task, edge kind or -1, edge
    latency, edge's destination)`` per step back; the task ending last starts it; each task's binding
    predecessor (at a rendezvous, the last rank to arrive) gives the next."""
    real = g.rank >= 0
    v = int(np.flatnonzero(real)[np.argmax(s.end[real])])
    path = []
    while v >= 0:
        e = int(s.binding[v])
        if e < 0:
            path.append((v, -1, 0, v))
            break
        path.append((v, int(g.ekind[e]), int(g.ew[e]), v))
        v = int(g.esrc[e])
    return path


def unexplained(g: StepGraph) -> np.ndarray:
    """Per rank: Σ over its tasks of how much later it started (measured) than its predecessors' measured
    ends (plus latencies) explain (ns)."""
    meas_end = g.meas + g.dur
    x = meas_end[g.esrc] + g.ew
    ready = np.full(g.dur.size, np.iinfo(np.int64).min // 4, dtype=np.int64)
    np.maximum.at(ready, g.edst, x)
    ready = np.maximum(ready, g.base)
    gap = np.maximum(g.meas - ready, 0)
    real = g.rank >= 0
    return np.bincount(g.rank[real], weights=gap[real], minlength=len(g.graphs))


@dataclass
class Reading:
    """What a replay says: steps per rank, the critical path per place and phase, slack per place."""

    step_us: float
    ranks: list[dict[str, Any]]
    critical: list[dict[str, Any]]
    by_phase: list[dict[str, Any]]
    slack: list[dict[str, Any]]
    near_critical: list[dict[str, Any]]
    on_path: np.ndarray
    path: list[tuple[int, int, int, int]]
    place_us: dict[tuple[int, str, str, str], float]


def read(g: StepGraph, s: Schedule) -> Reading:
    """The figures of one replay of ``g``."""
    ends = _rank_ends(g, s)
    starts = np.array([gr.ws_ns - o for gr, o in zip(g.graphs, g.offset_ns, strict=True)], dtype=np.int64)
    step_start = int(starts.min())
    step_end = int(ends.max())
    step_ns = step_end - step_start
    ranks = [
        {
            "rank": gr.rank,
            "measured_us": (gr.we_ns - gr.ws_ns) / 1000.0,
            "replayed_us": int(ends[i] - starts[i]) / 1000.0,
        }
        for i, gr in enumerate(g.graphs)
    ]
    path = critical_path(g, s)
    on_path = np.zeros(g.dur.size, dtype=bool)
    acc: dict[tuple[int, str, str, str], int] = {}
    for v, ek, w, _ in path:
        on_path[v] = True
        r = int(g.rank[v])
        if r < 0:
            continue
        rk, unit, phase = g.places[int(g.place[v])]
        d = int(s.end[v] - s.start[v])
        if d:
            key = (rk, unit, phase, KINDS[int(g.kind[v])])
            acc[key] = acc.get(key, 0) + d
        if ek >= 0 and w:
            kname = KINDS[ek] if ek in (K_LAUNCH, K_GAP) else "launch"
            key = (rk, unit, phase, kname)
            acc[key] = acc.get(key, 0) + w
    critical = sorted(
        ({"rank": k[0], "unit": k[1], "phase": k[2], "kind": k[3], "us": v / 1000.0} for k, v in acc.items()),
        key=lambda x: (-x["us"], x["rank"], x["unit"], x["phase"], x["kind"]),
    )
    phases: dict[str, dict[str, float]] = {}
    for k, v in acc.items():
        phases.setdefault(k[2], {})
        phases[k[2]][k[3]] = phases[k[2]].get(k[3], 0.0) + v / 1000.0
    by_phase = [
        {"phase": p, "us": sum(kk.values()), "kinds": dict(sorted(kk.items(), key=lambda x: -x[1]))}
        for p, kk in sorted(phases.items(), key=lambda x: -sum(x[1].values()))
    ]
    ls = latest_starts(g, s, step_end)
    slack_t = ls - s.start
    real = (g.rank >= 0) & (g.dur > 0) & (g.kind != K_WAIT)  # waits are computed: they have no slack
    key_t = g.place * len(KINDS) + g.kind.astype(np.int64)
    best: dict[int, int] = {}
    sel = np.flatnonzero(real)
    if sel.size:
        k_sel = key_t[sel]
        o = np.lexsort((slack_t[sel], k_sel))
        first = np.ones(o.size, dtype=bool)
        first[1:] = k_sel[o][1:] != k_sel[o][:-1]
        for k, v in zip(k_sel[o][first].tolist(), slack_t[sel][o][first].tolist(), strict=True):
            best[k] = v
    slack = []
    path_keys = {(k[0], k[1], k[2], k[3]) for k in acc}
    for k in path_keys:  # a place on the path only through an edge's latency has no task of its own
        code = g.places.index(k[:3]) * len(KINDS) + KINDS.index(k[3])
        best.setdefault(code, 0)
    near = []
    for k, v in best.items():
        rk, unit, phase = g.places[k // len(KINDS)]
        kind = KINDS[k % len(KINDS)]
        on = (rk, unit, phase, kind) in path_keys  # a place with time on the path has no slack
        row = {
            "rank": rk,
            "unit": unit,
            "phase": phase,
            "kind": kind,
            "slack_us": 0.0 if on else max(v, 0) / 1000.0,
        }
        slack.append(row)
        if (rk, unit, phase, kind) not in path_keys and v < NEAR_CRITICAL * step_ns:
            near.append(row)
    slack.sort(key=lambda x: (x["slack_us"], x["rank"], x["unit"], x["phase"], x["kind"]))
    near.sort(key=lambda x: (x["slack_us"], x["rank"], x["unit"], x["phase"], x["kind"]))
    return Reading(
        step_us=step_ns / 1000.0, ranks=ranks, critical=critical, by_phase=by_phase, slack=slack,
        near_critical=near, on_path=on_path, path=path, place_us={k: v / 1000.0 for k, v in acc.items()},
    )  # fmt: skip


# ------------------------------------------------------------------------------------------ the analysis
def _rank_graph(r: Any) -> RankGraph | None:
    """The rank's graph: built by its worker (``RankMetrics.replay_graph``), else from its trace now."""
    g = getattr(r, "replay_graph", None)
    if g is not None:
        return g
    if not r.source:
        return None
    from fsdpbench.analysis.replay_graph import build_rank_graph
    from fsdpbench.trace import Source, read_rank

    trace = read_rank(Source(__import__("pathlib").Path(r.source), r.format))
    steps = [s.step for s in r.steps if s.step is not None]
    return build_rank_graph(trace, steps)


def _keys(ranks: list[Any], graphs: list[RankGraph]) -> tuple[list[list[Any]], str]:
    """Each graph collective's cross-rank key (analysis/waits.py's keys, one method for all ranks)."""
    from fsdpbench.analysis import waits

    cols = [r.collective_columns() for r in ranks]
    first = [waits._keys(c) for c in cols]
    order = [waits.MATCH_SEQ, waits.MATCH_MARKS, waits.MATCH_ORDER]
    method = max((m for _, m in first), key=order.index) if first else waits.MATCH_ORDER
    out = []
    for i, (c, g) in enumerate(zip(cols, graphs, strict=True)):
        keys, m = first[i]
        if m != method:
            sub = {k: c[k] for k in c if k != "seq"}
            if method == waits.MATCH_ORDER:
                sub = {k: c[k] for k in ("type", "start_ns", "end_ns", "group") if k in c}
            keys, _ = waits._keys(sub)
        row = {(int(s), int(e)): j for j, (s, e) in enumerate(zip(c["start_ns"], c["end_ns"], strict=True))}
        mine = []
        for s, e in zip(g.c_start.tolist(), g.c_end.tolist(), strict=True):
            j = row.get((s, e))
            mine.append(keys[j] if j is not None else ("unmatched", i, s))
        out.append(mine)
    return out, method


def build_step_graph(res: Any) -> tuple[StepGraph | None, str | None]:
    """The joined graph of an analysis' ranks, or (None, why not)."""
    ranks = [r for r in res.ranks if r.device_span_ns]
    if not ranks:
        return None, "no rank has device work (or CPU compute) to replay"
    graphs = []
    for r in ranks:
        g = _rank_graph(r)
        if g is None:
            return None, f"rank {r.rank}: its trace cannot be read again to build its graph"
        graphs.append(g)
    offsets = {int(x["rank"]): x.get("clock_offset_us") for x in (res.waits or {}).get("ranks", [])}
    off_ns = [int(round((offsets.get(r.rank) or 0.0) * 1000)) for r in ranks]
    keys, method = _keys(ranks, graphs)
    sg = join_graphs(graphs, keys, off_ns)
    sg.notes.append(f"collectives matched by {method}")
    return sg, None


def _figure(g: StepGraph, s: Schedule, rd: Reading) -> dict[str, Any]:
    """The ``figure`` block of docs/DATA.md: every rank's lanes over the replayed step (segments of one
    kind merged, short ones dropped past :data:`MAX_SEGMENTS`), the path, the rendezvous."""
    starts = [gr.ws_ns - o for gr, o in zip(g.graphs, g.offset_ns, strict=True)]
    t0 = int(min(starts))
    real = np.flatnonzero(g.rank >= 0)
    # a wait is drawn from its start to the start of the task after it on its lane
    lane_key = g.rank[real] * 100_000 + np.concatenate([gr.lane for gr in g.graphs]).astype(np.int64)
    o = np.lexsort((s.start[real], lane_key))
    tasks = real[o]
    keys = lane_key[o]
    seg_s = s.start[tasks].copy()
    seg_e = s.end[tasks].copy()
    nxt_same = np.zeros(tasks.size, dtype=bool)
    nxt_same[:-1] = keys[1:] == keys[:-1]
    wait = (g.kind[tasks] == K_WAIT) & nxt_same
    idx = np.flatnonzero(wait)
    seg_e[idx] = np.maximum(seg_e[idx], s.start[tasks[idx + 1]])
    keep = seg_e > seg_s
    tasks, keys, seg_s, seg_e = tasks[keep], keys[keep], seg_s[keep], seg_e[keep]
    kinds = g.kind[tasks].astype(np.int64)
    path = rd.on_path[tasks].astype(np.int64)
    # merge neighbours of one lane, kind and path flag
    cut = np.ones(tasks.size, dtype=bool)
    cut[1:] = (keys[1:] != keys[:-1]) | (kinds[1:] != kinds[:-1]) | (path[1:] != path[:-1])
    grp = np.cumsum(cut) - 1
    m_s = np.minimum.reduceat(seg_s, np.flatnonzero(cut)) if tasks.size else seg_s
    m_e = np.maximum.reduceat(seg_e, np.flatnonzero(cut)) if tasks.size else seg_e
    m_key, m_kind, m_path = keys[cut], kinds[cut], path[cut]
    del grp
    if m_s.size > MAX_SEGMENTS:  # keep the path and the longest of the rest
        length = (m_e - m_s) + m_path * (1 << 50)
        top = np.sort(np.argsort(-length, kind="stable")[:MAX_SEGMENTS])
        m_s, m_e, m_key, m_kind, m_path = m_s[top], m_e[top], m_key[top], m_kind[top], m_path[top]
    lanes = []
    lane_of: dict[int, int] = {}
    for k in sorted(set(m_key.tolist())):
        i, ln = divmod(k, 100_000)
        lane_of[k] = len(lanes)
        lanes.append({"rank": g.graphs[i].rank, "lane": g.graphs[i].lanes[ln], "segments": []})
    for a, b, k, kd, p in zip(
        m_s.tolist(), m_e.tolist(), m_key.tolist(), m_kind.tolist(), m_path.tolist(), strict=True
    ):
        lanes[lane_of[k]]["segments"].append([(a - t0) / 1000.0, (b - t0) / 1000.0, kd, p])
    path_rows = []
    for v, *_ in reversed(rd.path):
        r = int(g.rank[v])
        if r < 0 or s.end[v] <= s.start[v]:
            continue
        k = r * 100_000 + int(g.graphs[r].lane[int(g.local[v])])
        if k in lane_of:
            path_rows.append(
                [g.graphs[r].rank, lane_of[k], (int(s.start[v]) - t0) / 1000.0, (int(s.end[v]) - t0) / 1000.0]
            )
    rvs = []
    for x in g.rendezvous[:MAX_RENDEZVOUS]:
        arr = [
            [g.graphs[i].rank, (int(s.end[a]) - t0) / 1000.0]
            for i, a in zip(x["ranks"], x["arrivals"], strict=True)
        ]
        last = max(range(len(arr)), key=lambda j: arr[j][1])
        key = list(x["key"]) if isinstance(x["key"], tuple) else [x["key"]]
        rvs.append({
            "group": None if key[0] is None else str(key[0]),
            "seq": key[-1] if isinstance(key[-1], int) else None,
            "type": x["type"],
            "arrivals": arr,
            "last_rank": arr[last][0],
            "transfer_start_us": (int(s.start[x["task"]]) - t0) / 1000.0,
            "transfer_end_us": (int(max(s.end[xf] for xf in x["xfers"])) - t0) / 1000.0,
        })  # fmt: skip
    return {"step_us": rd.step_us, "kinds": list(KINDS), "lanes": lanes, "path": path_rows, "rendezvous": rvs}


def replay_step(res: Any, edits: list[str] | tuple[str, ...] = ()) -> dict[str, Any] | None:
    """The ``replay`` object of docs/DATA.md for ``res`` (an Analysis), with a ``what_if`` entry per edit
    (:func:`parse_edit`'s syntax). None, with ``res.replay_note`` saying why, when the traces lack what the
    graph needs. Also keeps the joined graph and its identity replay on ``res`` (``_replay``) for the
    Perfetto trace."""
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
    rd = read(g, s)
    errs = [
        abs(r["replayed_us"] - r["measured_us"]) / r["measured_us"] * 100
        for r in rd.ranks
        if r["measured_us"] > 0
    ]
    out: dict[str, Any] = {
        "error_pct": {"median": float(np.median(errs)) if errs else None, "max": max(errs) if errs else None},
        "ranks": rd.ranks,
        "unexplained_slack_us": float(unexplained(g).sum()) / 1000.0,
        "critical": rd.critical,
        "near_critical": rd.near_critical,
        "slack": rd.slack,
        "by_phase": rd.by_phase,
        "what_if": [what_if(g, rd, e) for e in parsed],
        "figure": _figure(g, s, rd),
        "notes": g.notes,
    }
    res._replay = (g, s, rd)
    return out


# ------------------------------------------------------------------------------------------ what-ifs
EDIT_HELP = (
    "scale:<collective type, kind or op regex>:<factor>, straggler:remove[:RANK], delay:RANK:UNIT:PHASE:MS "
    "(negative MS removes a delay)"
)


@dataclass(frozen=True)
class Edit:
    """One what-if edit of the graph (:func:`parse_edit`)."""

    text: str
    op: str
    target: str = ""
    factor: float = 1.0
    rank: int | None = None
    unit: str = ""
    phase: str = ""
    ms: float = 0.0


def parse_edit(text: str) -> Edit:
    """An edit from its text: ``scale:<what>:<factor>`` (``what``: a collective type such as
    ``all_gather``, a task kind such as ``compute``, else a regular expression on operator names),
    ``straggler:remove`` (every rank's work at each place becomes the median of the ranks' there) or
    ``straggler:remove:RANK`` (that rank's becomes the median of the others'), ``delay:RANK:UNIT:PHASE:MS``
    (a host delay of MS ms on RANK at the start of UNIT's PHASE; negative MS removes that much host time
    there). Raises ConfigError naming the edit and the syntax."""
    from fsdpbench.trace.table import COLLECTIVE_TYPES

    parts = text.split(":")
    bad = ConfigError(f"--what-if {text!r}: expected one of {EDIT_HELP}")
    try:
        if parts[0] == "scale" and len(parts) >= 3:
            what = ":".join(parts[1:-1])
            factor = float(parts[-1])
            if factor < 0:
                raise ConfigError(f"--what-if {text!r}: the factor must be ≥ 0")
            if what not in COLLECTIVE_TYPES and what not in KINDS:
                try:
                    re.compile(what)
                except re.error as exc:
                    raise ConfigError(
                        f"--what-if {text!r}: {what!r} is no collective type, kind or regex ({exc})"
                    ) from None
            return Edit(text, "scale", target=what, factor=factor)
        if parts[0] == "straggler" and len(parts) in (2, 3) and parts[1] == "remove":
            return Edit(text, "straggler", rank=int(parts[2]) if len(parts) == 3 else None)
        if parts[0] == "delay" and len(parts) == 5:
            return Edit(text, "delay", rank=int(parts[1]), unit=parts[2], phase=parts[3], ms=float(parts[4]))
    except ValueError:
        raise bad from None
    if parts[0] in ("regroup", "prefetch"):
        raise ConfigError(
            f"--what-if {text!r}: the {parts[0]} edit is not in the replay yet (docs/replay.md)"
        )
    raise bad


def _rank_pos(g: StepGraph, rank: int, edit: Edit) -> int:
    for i, gr in enumerate(g.graphs):
        if gr.rank == rank:
            return i
    raise ConfigError(
        f"--what-if {edit.text!r}: no rank {rank} in the profiles (ranks: {[x.rank for x in g.graphs]})"
    )


def apply_edit(g: StepGraph, edit: Edit) -> StepGraph:
    """A copy of ``g`` with ``edit`` applied (durations and latencies changed; the replay re-times every
    wait). Raises ConfigError when the edit names a rank or place the graph does not have."""
    out = g.copy()
    real = out.rank >= 0
    if edit.op == "scale":
        from fsdpbench.trace.table import COLLECTIVE_TYPES

        if edit.target in COLLECTIVE_TYPES:
            sel = np.zeros(out.dur.size, dtype=bool)
            for x in out.rendezvous:
                if x["type"] == edit.target:
                    sel[x["xfers"]] = True
        elif edit.target in KINDS:
            sel = real & (out.kind == KINDS.index(edit.target))
        else:
            pat = re.compile(edit.target)
            sel = np.zeros(out.dur.size, dtype=bool)
            for i, gr in enumerate(out.graphs):
                hit = np.array([bool(pat.search(o)) for o in gr.ops] + [False])
                a, b = int(out.offset[i]), int(out.offset[i + 1])
                sel[a:b] = hit[gr.op] & (gr.kind != K_TRANSFER)
        if not sel.any():
            raise ConfigError(f"--what-if {edit.text!r}: no task of the graph matches {edit.target!r}")
        out.dur[sel] = np.rint(out.dur[sel] * edit.factor).astype(np.int64)
        return out
    if edit.op == "straggler":
        # per (unit, phase, kind) the ranks' totals; a rank's tasks there are scaled to the median
        work = real & ~np.isin(out.kind, [K_WAIT, K_TRANSFER])
        keys: dict[tuple[str, str, int], dict[int, int]] = {}
        for v in np.flatnonzero(work & (out.dur > 0)).tolist():
            rk, unit, phase = out.places[int(out.place[v])]
            d = keys.setdefault((unit, phase, int(out.kind[v])), {})
            d[int(out.rank[v])] = d.get(int(out.rank[v]), 0) + int(out.dur[v])
        only = None if edit.rank is None else _rank_pos(out, edit.rank, edit)
        factor = np.ones(out.dur.size)
        n = len(out.graphs)
        for (unit, phase, kind), per in keys.items():
            totals = [per.get(i, 0) for i in range(n)]
            for i in range(n) if only is None else [only]:
                others = totals if only is None else [x for j, x in enumerate(totals) if j != i]
                target = float(np.median(others)) if others else totals[i]
                if totals[i] > 0:
                    pl = [
                        p
                        for p, (rk, u, ph) in enumerate(out.places)
                        if rk == out.graphs[i].rank and u == unit and ph == phase
                    ]
                    sel = work & (out.rank == i) & np.isin(out.place, pl) & (out.kind == kind)
                    factor[sel] = target / totals[i]
        out.dur = np.rint(out.dur * factor).astype(np.int64)
        return out
    if edit.op == "delay":
        i = _rank_pos(out, edit.rank, edit)  # type: ignore[arg-type]
        gr = out.graphs[i]
        pl = [
            p
            for p, (rk, u, ph) in enumerate(out.places)
            if rk == gr.rank and u == edit.unit and ph == edit.phase
        ]
        if not pl:
            have = sorted({(u, ph) for rk, u, ph in out.places if rk == gr.rank})
            raise ConfigError(
                f"--what-if {edit.text!r}: rank {gr.rank} has no place ({edit.unit}, {edit.phase}); it has {have}"
            )
        a = int(out.offset[i])
        on_main = np.zeros(out.dur.size, dtype=bool)
        on_main[a : int(out.offset[i + 1])] = gr.lane == gr.main_lane
        sel = np.flatnonzero(on_main & np.isin(out.place, pl))
        ns = int(round(edit.ms * 1e6))
        if ns >= 0:
            first = sel[np.argmin(out.meas[sel])]
            out.dur[first] += ns
            return out
        # remove: host time (host gaps first, the longest first) at that place
        left = -ns
        for kind in (K_GAP, K_LAUNCH):
            cand = sel[out.kind[sel] == kind]
            for v in cand[np.argsort(-out.dur[cand], kind="stable")].tolist():
                take = min(left, int(out.dur[v]))
                out.dur[v] -= take
                left -= take
                if not left:
                    return out
        out.notes.append(f"{edit.text}: only {(-ns - left) / 1e6:.3f} ms of host time found there to remove")
        return out
    raise ConfigError(f"--what-if {edit.text!r}: unknown edit")


def what_if(g: StepGraph, base: Reading, edit: Edit) -> dict[str, Any]:
    """The ``what_if`` entry of one edit: its replay's step, per phase, and what changed on the path."""
    try:
        e = apply_edit(g, edit)
        s = schedule(e)
    except CycleError as exc:
        return {"edit": edit.text, "predicted_step_us": None, "phases": {}, "changed": [], "source": SOURCE_REPLAY,
                "note": f"the edited graph has a cycle ({exc})"}  # fmt: skip
    rd = read(e, s)
    keys = set(rd.place_us) | set(base.place_us)
    changed = []
    for k in keys:
        d = rd.place_us.get(k, 0.0) - base.place_us.get(k, 0.0)
        if abs(d) >= 1.0:
            changed.append({"rank": k[0], "unit": k[1], "phase": k[2], "kind": k[3], "delta_us": d})
    changed.sort(key=lambda x: -abs(x["delta_us"]))
    return {
        "edit": edit.text,
        "predicted_step_us": rd.step_us,
        "phases": {p["phase"]: p["us"] for p in rd.by_phase},
        "changed": changed[:20],
        "source": SOURCE_REPLAY,
        "note": "; ".join(e.notes[len(g.notes) :]) or None,
    }
