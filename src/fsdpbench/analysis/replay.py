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

import array
import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fsdpbench.analysis.replay_graph import K_GAP, K_LAUNCH, K_SYNC, K_TRANSFER, K_WAIT, KINDS, RankGraph
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
        """A copy whose durations, edges and notes an edit may change (the rest shared)."""
        return replace(
            self, dur=self.dur.copy(), esrc=self.esrc.copy(), edst=self.edst.copy(), ew=self.ew.copy(),
            ekind=self.ekind.copy(), notes=list(self.notes),
        )  # fmt: skip


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
    for k, all_holders in by_key.items():
        task = n + extra
        extra += 1
        # several tasks of one rank with one key (a coalesced collective's kernels): the rank arrives with
        # its first; every one of them ends with the transfer
        seen: set[int] = set()
        holders = [h for h in all_holders if not (h[0] in seen or seen.add(h[0]))]
        extra_x = [int(offset[i] + graphs[i].c_xfer[j]) for i, j in all_holders if (i, j) not in set(holders)]
        extra_e = [
            int(graphs[i].c_end[j]) - offset_ns[i] for i, j in all_holders if (i, j) not in set(holders)
        ]
        arr = [int(offset[i] + graphs[i].c_arrive[j]) for i, j in holders]
        xf = [int(offset[i] + graphs[i].c_xfer[j]) for i, j in holders]
        a_meas = [int(graphs[i].c_start[j]) - offset_ns[i] for i, j in holders]
        e_meas = [int(graphs[i].c_end[j]) - offset_ns[i] for i, j in holders]
        last = max(a_meas)
        xf += extra_x
        for x, e in zip(xf, e_meas + extra_e, strict=True):
            dur[x] = max(e - last, 0)
            meas[x] = last
        r_src += arr
        r_dst += [task] * len(arr)
        r_src += [task] * len(xf)
        r_dst += xf
        i0, j0 = holders[0]
        cb = graphs[i0].c_bytes
        nbytes = float(cb[j0]) if cb is not None and j0 < len(cb) and cb[j0] == cb[j0] else None
        rv.append({"key": k, "type": graphs[i0].c_type[j0], "task": task, "arrivals": arr, "xfers": xf,
                   "ranks": [i for i, _ in holders], "measured_last": last, "bytes": nbytes})  # fmt: skip

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
    chains: Any = None
    """The contracted graph replayed (:class:`Chains`) and its nodes' topological order."""
    node_order: Any = None


class CycleError(ValueError):
    """The graph has a cycle (collectives matched wrongly, or an edit that makes a task wait for itself)."""


def _topo_order(n: int, esrc: np.ndarray, edst: np.ndarray, hint: np.ndarray, tier: np.ndarray) -> np.ndarray:
    """A topological order: the tasks sorted by ``hint`` (measured start), then ``tier`` (zero-length
    tasks, then rendezvous, then transfers, at one instant), when every edge goes forward in it (the usual
    case, checked at numpy speed); else Kahn's algorithm."""
    order = np.lexsort((np.arange(n), tier, hint))
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    if esrc.size == 0 or bool((pos[esrc] < pos[edst]).all()):
        return order
    from collections import deque

    deg = np.bincount(edst, minlength=n).tolist()
    by_src = np.argsort(esrc, kind="stable")
    ptr_l = np.concatenate([[0], np.cumsum(np.bincount(esrc, minlength=n))]).tolist()
    dst_sorted = edst[by_src].tolist()
    ready = deque(v for v in order.tolist() if deg[v] == 0)
    out = []
    pop, push = ready.popleft, ready.append
    while ready:
        v = pop()
        out.append(v)
        for k in range(ptr_l[v], ptr_l[v + 1]):
            d = dst_sorted[k]
            deg[d] -= 1
            if deg[d] == 0:
                push(d)
    if len(out) != n:
        raise CycleError(f"{n - len(out)} tasks are on a cycle")
    return np.array(out, dtype=np.int64)


_NO_BASE = np.iinfo(np.int64).min // 4
"""``StepGraph.base`` of a task that has no earliest start of its own."""


@dataclass
class Chains:
    """The graph contracted for the forward replay: a task whose one predecessor is the task before it (same
    rank, any latency) is merged into that task's node, whatever else depends on the task before it. Exact
    for the replay (such a task starts when the one before it ends, plus the latency, whatever the edit), so
    every task's start is its node's start plus a constant (``offset``) and an edge may leave a node from any
    of its tasks. A host thread between two joins is one node, its launches included: the replay's Python
    loop runs over nodes (heads of such runs), not tasks."""

    node: np.ndarray
    """Per task: its node."""
    offset: np.ndarray
    """Per task: its start minus its node's start (Σ length + latency of the tasks before it in its node, ns)."""
    dur: np.ndarray
    """Per node: Σ length of its tasks (ns; the topological order's tie-break only)."""
    base: np.ndarray
    meas: np.ndarray
    tier: np.ndarray
    """Per node: its place among nodes of one measured start (:func:`_topo_order`)."""
    esrc: np.ndarray
    """Per edge between nodes: its source node, its target node, the source task's end minus its node's start
    plus the latency (``src_end``: the target may start at ``start[esrc] + src_end``), the task edge."""
    edst: np.ndarray
    src_end: np.ndarray
    eid: np.ndarray
    chain_edge: np.ndarray
    """Per task: the edge from the task before it in its node (-1 for a node's first task)."""


def contract(g: StepGraph) -> Chains:
    """The forward contraction of ``g`` (:class:`Chains`)."""
    n = g.dur.size
    indeg = np.bincount(g.edst, minlength=n)
    chain = (g.edst == g.esrc + 1) & (indeg[g.edst] == 1) & (g.rank[g.esrc] == g.rank[g.edst])
    chain &= g.base[g.edst] <= _NO_BASE
    merged = np.zeros(n, dtype=bool)
    merged[g.edst[chain]] = True
    chain_edge = np.full(n, -1, dtype=np.int64)
    chain_edge[g.edst[chain]] = np.flatnonzero(chain)
    node = np.cumsum(~merged) - 1
    nn = int(node[-1]) + 1 if n else 0
    heads = np.flatnonzero(~merged)
    step = np.zeros(n, dtype=np.int64)  # a merged task starts this long after the one before it starts
    into = g.edst[chain]
    step[into] = g.dur[into - 1] + g.ew[chain]
    csum = np.cumsum(step)
    offset = csum - csum[heads][node]
    dur = np.bincount(node, weights=g.dur, minlength=nn).astype(np.int64)
    keep = np.flatnonzero(~chain)
    src = g.esrc[keep]
    tier = np.where(dur > 0, 3, 0).astype(np.int8)
    tier[node[[x["task"] for x in g.rendezvous]]] = 1
    xf = [t for x in g.rendezvous for t in x["xfers"]]
    tier[node[xf]] = np.where(dur[node[xf]] > 0, 3, 2)
    return Chains(
        node=node, offset=offset, dur=dur, base=g.base[heads], meas=g.meas[heads], tier=tier, esrc=node[src],
        edst=node[g.edst[keep]], src_end=offset[src] + g.dur[src] + g.ew[keep], eid=keep, chain_edge=chain_edge,
    )  # fmt: skip


def _q(a: np.ndarray) -> array.array:
    """An int64 numpy array as an ``array.array('q')`` (a copy)."""
    out = array.array("q")
    out.frombytes(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    return out


def schedule(g: StepGraph) -> Schedule:
    """Replay ``g``: every task starts when the last of its predecessors has ended (plus the edge's
    latency), and not before its earliest start (on the contracted graph, :func:`contract`)."""
    c = contract(g)
    n = c.base.size
    order = _topo_order(n, c.esrc, c.edst, c.meas, c.tier)
    by_dst = np.argsort(c.edst, kind="stable")
    # typed arrays, not lists: 8 bytes an entry instead of ~36 (the loop is the same speed)
    ptr = _q(np.concatenate([[0], np.cumsum(np.bincount(c.edst, minlength=n))]))
    src_l = _q(c.esrc[by_dst])
    w_l = _q(c.src_end[by_dst])
    eid_l = _q(c.eid[by_dst])
    start = _q(c.base)
    bind = _q(np.full(n, -1, dtype=np.int64))
    for v in _q(order):
        s = start[v]
        b = -1
        for k in range(ptr[v], ptr[v + 1]):
            x = start[src_l[k]] + w_l[k]
            if x > s or (x == s and b >= 0):
                s = x
                b = eid_l[k]
        start[v] = s
        bind[v] = b
    n_start = np.frombuffer(start, dtype=np.int64)
    t_start = n_start[c.node] + c.offset
    binding = np.where(c.chain_edge >= 0, c.chain_edge, np.frombuffer(bind, dtype=np.int64)[c.node])
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    t_order = np.lexsort((np.arange(g.dur.size), pos[c.node]))
    return Schedule(t_start, t_start + g.dur, binding, t_order, c, order)


def latest_starts(g: StepGraph, s: Schedule, deadline: int) -> np.ndarray:
    """Per task the latest start that does not delay the step's end past ``deadline``.

    On the backward contraction: a task whose one successor is the task after it (same rank) is merged into
    that task's node (its latest start is the next one's minus its length and the latency: exact where no
    length or latency is negative; else nothing is merged); the Python loop runs over the nodes' last tasks,
    in reverse topological order (``s.order``)."""
    n = g.dur.size
    outdeg = np.bincount(g.esrc, minlength=n)
    chain = (g.edst == g.esrc + 1) & (outdeg[g.esrc] == 1) & (g.rank[g.esrc] == g.rank[g.edst])
    if (g.dur < 0).any() or (g.ew < 0).any():
        chain[:] = False
    merged = np.zeros(n, dtype=bool)
    merged[g.esrc[chain]] = True
    tails = np.flatnonzero(~merged)
    node = np.searchsorted(tails, np.arange(n))  # a task's node: the first tail at or after it
    step = np.zeros(n, dtype=np.int64)  # a merged task's latest start is the next one's minus this
    out_of = g.esrc[chain]
    step[out_of] = g.dur[out_of] + g.ew[chain]
    csum = np.cumsum(step)
    before = csum[tails][node] - csum + step  # Σ step from the task to its node's tail
    keep = np.flatnonzero(~chain)
    dst = g.edst[keep]
    pos = np.empty(n, dtype=np.int64)
    pos[s.order] = np.arange(n)
    t_order = tails[np.argsort(-pos[tails], kind="stable")]
    nt = tails.size
    src_n = node[g.esrc[keep]]
    by_src = np.argsort(src_n, kind="stable")
    ptr = _q(np.concatenate([[0], np.cumsum(np.bincount(src_n, minlength=nt))]))
    dst_l = _q(node[dst][by_src])
    w_l = _q((before[dst] + g.ew[keep])[by_src])
    dur_l = _q(g.dur[tails])
    ls = _q(np.zeros(nt, dtype=np.int64))
    for v in _q(node[t_order]):
        f = deadline
        for k in range(ptr[v], ptr[v + 1]):
            x = ls[dst_l[k]] - w_l[k]
            if x < f:
                f = x
        ls[v] = f - dur_l[v]
    return np.frombuffer(ls, dtype=np.int64)[node] - before


# ------------------------------------------------------------------------------------------ reading
def _rank_ends(g: StepGraph, s: Schedule) -> np.ndarray:
    """Per rank the end of its last task (aligned clock)."""
    out = np.zeros(len(g.graphs), dtype=np.int64)
    for i in range(len(g.graphs)):
        a, b = int(g.offset[i]), int(g.offset[i + 1])
        out[i] = s.end[a:b].max()
    return out


def critical_path(g: StepGraph, s: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """The critical path from the step's end back to a rank's start, as (tasks, binding edges; -1 at the
    origin), from the end backwards: the task ending last starts it; each task's binding predecessor (at a
    rendezvous, the last rank to arrive) gives the next."""
    real = np.flatnonzero(g.rank >= 0)
    v = int(real[np.argmax(s.end[real])])
    bind = _q(s.binding)  # typed arrays: a copy of 8 bytes an entry, not a list of Python ints
    src = _q(g.esrc)
    tasks, edges = [], []
    while v >= 0:
        e = bind[v]
        tasks.append(v)
        edges.append(e)
        v = src[e] if e >= 0 else -1
    return np.array(tasks, dtype=np.int64), np.array(edges, dtype=np.int64)


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
    path: list[tuple[int, int]]
    """(task, binding edge) from the end back to the origin."""
    place_us: dict[tuple[int, str, str, str], float]


def read(g: StepGraph, s: Schedule, slack: bool = True) -> Reading:
    """The figures of one replay of ``g`` (``slack``: also every place's slack)."""
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
    p_tasks, p_edges = critical_path(g, s)
    on_path = np.zeros(g.dur.size, dtype=bool)
    on_path[p_tasks] = True
    nk = len(KINDS)
    # time on the path per (place, kind): the tasks' lengths, and the edges' latencies (launch kind)
    mine = p_tasks[g.rank[p_tasks] >= 0]
    keys = [g.place[mine] * nk + g.kind[mine].astype(np.int64)]
    weights = [(s.end[mine] - s.start[mine]).astype(np.float64)]
    he = p_edges >= 0
    lat_e, lat_t = p_edges[he], p_tasks[he]
    lat = (g.ew[lat_e] > 0) & (g.rank[lat_t] >= 0)
    lat_e, lat_t = lat_e[lat], lat_t[lat]
    ek = g.ekind[lat_e]
    lk = np.where(np.isin(ek, [K_GAP, K_SYNC]), ek, K_LAUNCH).astype(np.int64)
    keys.append(g.place[lat_t] * nk + lk)
    weights.append(g.ew[lat_e].astype(np.float64))
    key_all = np.concatenate(keys)
    w_all = np.concatenate(weights)
    acc: dict[tuple[int, str, str, str], int] = {}
    if key_all.size:
        uk, inv = np.unique(key_all, return_inverse=True)
        tot = np.bincount(inv, weights=w_all)
        for k, v in zip(uk.tolist(), tot.tolist(), strict=True):
            if v > 0:
                rk, unit, phase = g.places[k // nk]
                acc[(rk, unit, phase, KINDS[k % nk])] = int(round(v))
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
    path = list(zip(p_tasks.tolist(), p_edges.tolist(), strict=True))
    if not slack:
        return Reading(
            step_us=step_ns / 1000.0, ranks=ranks, critical=critical, by_phase=by_phase, slack=[],
            near_critical=[], on_path=on_path, path=path, place_us={k: v / 1000.0 for k, v in acc.items()},
        )  # fmt: skip
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
    place_code = {p: i for i, p in enumerate(g.places)}
    for k in path_keys:  # a place on the path only through an edge's latency has no task of its own
        best.setdefault(place_code[k[:3]] * len(KINDS) + KINDS.index(k[3]), 0)
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
    # an arrival's wait: from it to its transfer's start; a blocked thread's: from its previous task's end
    wait = g.kind[tasks] == K_WAIT
    arrival = np.zeros(tasks.size, dtype=bool)
    arrival[:-1] = wait[:-1] & nxt_same[:-1] & (g.kind[tasks[1:]] == K_TRANSFER)
    idx = np.flatnonzero(arrival)
    seg_e[idx] = np.maximum(seg_e[idx], s.start[tasks[idx + 1]])
    prv_same = np.zeros(tasks.size, dtype=bool)
    prv_same[1:] = nxt_same[:-1]
    idx = np.flatnonzero(wait & ~arrival & prv_same)
    seg_s[idx] = np.minimum(seg_s[idx], s.end[tasks[idx - 1]])
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
    pv = np.array([v for v, _ in reversed(rd.path)], dtype=np.int64)
    pv = pv[(g.rank[pv] >= 0) & (s.end[pv] > s.start[pv])]
    all_lanes = np.concatenate([gr.lane for gr in g.graphs]).astype(np.int64)
    pk = g.rank[pv] * 100_000 + all_lanes[pv]
    if pv.size:  # consecutive path tasks on one lane: one row
        cut = np.ones(pv.size, dtype=bool)
        cut[1:] = pk[1:] != pk[:-1]
        at = np.flatnonzero(cut)
        p_s = np.minimum.reduceat(s.start[pv], at)
        p_e = np.maximum.reduceat(s.end[pv], at)
        p_r, p_k = g.rank[pv][at], pk[at]
        if at.size > MAX_SEGMENTS:  # the longest stretches
            top = np.sort(np.argsort(-(p_e - p_s), kind="stable")[:MAX_SEGMENTS])
            p_s, p_e, p_r, p_k = p_s[top], p_e[top], p_r[top], p_k[top]
        ranks_of = [gr.rank for gr in g.graphs]
        for r, k, a, b in zip(p_r.tolist(), p_k.tolist(), p_s.tolist(), p_e.tolist(), strict=True):
            if k not in lane_of:  # a lane whose segments were all capped away
                i, ln = divmod(k, 100_000)
                lane_of[k] = len(lanes)
                lanes.append({"rank": g.graphs[i].rank, "lane": g.graphs[i].lanes[ln], "segments": []})
            path_rows.append([ranks_of[r], lane_of[k], (a - t0) / 1000.0, (b - t0) / 1000.0])
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
    from fsdpbench.analysis.groups import ranks_seen, seen_text

    seen = ranks_seen([r for r in res.ranks if r.device_span_ns])  # the ranks build_step_graph joined
    said = seen_text(seen)
    if said:  # --profile-ranks: the others are not in the graph
        g.notes.append(f"replayed over {said}: a collective's last arrival may be a rank outside")
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
        "what_if": [what_if_row(res, g, rd, e) for e in parsed],
        "figure": _figure(g, s, rd),
        "notes": g.notes,
        "ranks_seen": seen,
    }
    res._replay = (g, s, rd)
    return out


# ------------------------------------------------------------------------------------------ what-ifs
EDIT_HELP = (
    "scale:<collective type, kind or op regex>:<factor>, straggler:remove[:RANK], regroup:<type[,type]|all>:<count>|unit, "
    "prefetch:<unit>:<k>, delay:RANK:UNIT:PHASE:MS (negative MS removes a delay)"
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
        if parts[0] == "regroup" and len(parts) == 3:
            if parts[2] != "unit" and int(parts[2]) < 1:
                raise ConfigError(f"--what-if {text!r}: the count must be at least 1 (or 'unit')")
            return Edit(
                text, "regroup", target=parts[1], factor=0.0 if parts[2] == "unit" else float(int(parts[2]))
            )
        if parts[0] == "prefetch" and len(parts) == 3:
            if int(parts[2]) < 1:
                raise ConfigError(f"--what-if {text!r}: k must be at least 1")
            return Edit(text, "prefetch", unit=parts[1], factor=float(int(parts[2])))
    except ValueError:
        raise bad from None
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
            gaps = sel[out.kind[sel] == K_GAP]  # a sleep is host time between operators: its first such task
            first = gaps[np.argmin(out.meas[gaps])] if gaps.size else sel[np.argmin(out.meas[sel])]
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
    if edit.op == "regroup":
        return _regroup(out, edit)
    if edit.op == "prefetch":
        return _prefetch(out, edit)
    raise ConfigError(f"--what-if {edit.text!r}: unknown edit")


def _rv_place(g: StepGraph, x: dict[str, Any]) -> tuple[str, str]:
    """The (unit, phase) of a rendezvous: its first holder's arrival's."""
    _, unit, phase = g.places[int(g.place[x["arrivals"][0]])]
    return unit, phase


def _drop_and_add(g: StepGraph, keep: np.ndarray, add: list[tuple[int, int, int, int]]) -> None:
    """Keep the edges where ``keep`` and append ``add`` ((src, dst, latency, kind) each)."""
    a = np.array(add, dtype=np.int64).reshape(-1, 4)
    g.esrc = np.concatenate([g.esrc[keep], a[:, 0]])
    g.edst = np.concatenate([g.edst[keep], a[:, 1]])
    g.ew = np.concatenate([g.ew[keep], a[:, 2]])
    g.ekind = np.concatenate([g.ekind[keep], a[:, 3].astype(np.int8)])


def _lane_key(g: StepGraph) -> np.ndarray:
    """Per task: rank position × 100,000 + lane (rendezvous: -1)."""
    lanes = np.concatenate([gr.lane for gr in g.graphs]).astype(np.int64)
    lanes = np.concatenate([lanes, np.zeros(g.dur.size - lanes.size, dtype=np.int64)])
    return np.where(g.rank >= 0, g.rank * 100_000 + lanes, -1)


def _regroup(g: StepGraph, edit: Edit) -> StepGraph:
    """Merge each (unit, phase)'s collectives of one type (a list ``a,b``, or ``all``: each type on its own)
    into ``count`` (or one per unit and phase) (:func:`_merge_type`), then price the host work of the calls
    merged away (:func:`_price_host_work`)."""
    if edit.target == "all":
        types = sorted({x["type"] for x in g.rendezvous})
    else:
        types = edit.target.split(",")
    host = host_per_call(g)  # fitted on the graph before the merge
    removed: dict[tuple[int, int], int] = {}
    for ctype in types:
        g = _merge_type(g, replace(edit, target=ctype), removed)
    return _price_host_work(g, edit, host, removed)


HOST_KINDS = (K_GAP,)
"""The host work a collective call brings on its launching thread (FSDP's hooks and copy bookkeeping between
operators, the dispatch and launch calls): priced per call and kind by :func:`host_per_call`."""


@dataclass(frozen=True)
class HostFit:
    """One kind of the training threads' host work per (rank, unit, phase) fitted as ``a + b · calls`` (µs)
    over the graph's places that hold a collective (non-negative least squares, as analysis/whatif.py fits α
    and β)."""

    kind: int
    a_us: float
    b_us: float
    r2: float | None
    places: int


def _host_points(g: StepGraph, kind: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per place of ``g`` (index into ``g.places``): its collective calls, and the time of ``kind`` tasks on
    its rank's training thread (ns); and the mask of those tasks."""
    n_places = len(g.places)
    calls = np.zeros(n_places, dtype=np.float64)
    for x in g.rendezvous:
        for a in x["arrivals"]:
            calls[int(g.place[a])] += 1
    on_main = np.zeros(g.dur.size, dtype=bool)
    for i, gr in enumerate(g.graphs):
        lo, hi = int(g.offset[i]), int(g.offset[i + 1])
        on_main[lo:hi] = gr.lane == gr.main_lane
    host = on_main & (g.kind == kind) & (g.place >= 0)
    work = np.bincount(g.place[host], weights=g.dur[host], minlength=n_places).astype(np.float64)
    return calls, work, host


def host_per_call(g: StepGraph) -> list[HostFit]:
    """Per kind of :data:`HOST_KINDS`, the training threads' host work per collective call (:class:`HostFit`),
    over the places that hold a collective; none with fewer than 3 such places or no spread in their calls."""
    from fsdpbench.analysis.whatif import _nnls2

    out = []
    for kind in HOST_KINDS:
        calls, work, _ = _host_points(g, kind)
        sel = calls > 0
        if sel.sum() < 3 or np.ptp(calls[sel]) == 0:
            continue
        x, y = calls[sel], work[sel] / 1000.0
        (a, b), _ = _nnls2(np.column_stack([np.ones_like(x), x]), y)
        ss_tot = float(((y - y.mean()) ** 2).sum())
        ss_res = float(((y - (a + b * x)) ** 2).sum())
        r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else None
        out.append(HostFit(kind, float(a), float(b), r2, int(sel.sum())))
    return out


def _price_host_work(
    g: StepGraph, edit: Edit, fits: list[HostFit], removed: dict[tuple[int, int], int]
) -> StepGraph:
    """Per host kind, take ``b`` (µs per call, :func:`host_per_call`) × the calls merged away at each place
    off that kind's time at the place on its training thread (its tasks scaled alike; never below 0)."""
    if not removed:
        return g
    priced = [f for f in fits if f.b_us > 0]
    if not priced:
        g.notes.append(
            f"{edit.text}: no host work per call could be fitted; the members' launch work is kept"
        )
        return g
    parts = []
    for fit in priced:
        _, work, host = _host_points(g, fit.kind)
        factor = np.ones(len(g.places))
        saved = 0.0
        for (_, place), n in removed.items():
            if work[place] > 0:
                cut = min(fit.b_us * 1000.0 * n, work[place])
                factor[place] = 1.0 - cut / work[place]
                saved += cut
        sel = np.flatnonzero(host)
        g.dur[sel] = np.rint(g.dur[sel] * factor[g.place[sel]]).astype(np.int64)
        r2 = "" if fit.r2 is None else f", R² {fit.r2:.2f}"
        parts.append(
            f"{KINDS[fit.kind]} {fit.b_us:.1f} µs per call ({fit.a_us:.1f} µs + {fit.b_us:.1f} µs × calls per "
            f"place over {fit.places} places{r2}; {saved / 1e6 / max(1, len(g.graphs)):.1f} ms per rank removed)"
        )
    g.notes.append(f"{edit.text}: the merged calls' host work on the training threads: " + "; ".join(parts))
    return g


def _merge_type(g: StepGraph, edit: Edit, removed: dict[tuple[int, int], int]) -> StepGraph:
    """Merge each (unit, phase)'s collectives of ``edit.target`` (one type) into ``count`` (or one per unit and
    phase): every member's transfer starts when the last member's last rank has arrived and lasts α + β Σ bytes
    (the type's fit, analysis/whatif.py); a launching thread no longer blocks between members, and a queue lane
    runs a member's successors once the member has arrived. Counts the calls merged away per (rank, place) in
    ``removed``."""
    from fsdpbench.analysis.whatif import fit_alpha_beta

    inst = [x for x in g.rendezvous if x["type"] == edit.target]
    if not inst:
        raise ConfigError(f"--what-if {edit.text!r}: the profiles have no {edit.target} collective")
    xfer_us = [max(int(g.dur[t]) for t in x["xfers"]) / 1000.0 for x in inst]
    fit = fit_alpha_beta([x["bytes"] for x in inst], xfer_us)
    by_place: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for x in inst:
        by_place.setdefault(_rv_place(g, x), []).append(x)
    chunks: list[list[dict[str, Any]]] = []
    for members in by_place.values():
        n = 1 if edit.factor == 0 else min(int(edit.factor), len(members))
        for c in np.array_split(np.arange(len(members)), n):
            if len(c) > 1:
                chunks.append([members[i] for i in c.tolist()])
    if not chunks:
        g.notes.append(f"{edit.text}: no place holds more {edit.target} collectives than the count asked")
        return g
    priced = fit.status == "ok"
    if not priced:
        g.notes.append(
            f"{edit.text}: the {edit.target} fit is {fit.status}: a merged collective lasts the sum of its "
            "members' transfers (no fixed cost saved)"
        )
    add: list[tuple[int, int, int, int]] = []
    merged_away: list[int] = []  # the arrivals of the members merged into a later one
    x_set: dict[int, int] = {}  # a merged member's transfer task → the chunk's last member's on its rank
    a_of: dict[int, int] = {}  # a member's transfer task → its arrival task
    for chunk in chunks:
        last = chunk[-1]
        last_x = {int(g.rank[t]): t for t in last["xfers"]}
        if priced:
            b = sum(x["bytes"] or 0.0 for x in chunk)
            merged_ns = int(round((fit.alpha_us + fit.beta_us_per_byte * b) * 1000))  # type: ignore[operator]
        else:
            merged_ns = int(sum(max(int(g.dur[t]) for t in x["xfers"]) for x in chunk))
        for m in chunk:
            for a in m["arrivals"]:
                add.append((a, last["task"], 0, K_WAIT))
            for t in m["xfers"]:
                add.append((last["task"], t, 0, K_WAIT))
                g.dur[t] = merged_ns
            if m is not last:
                for a, t in zip(m["arrivals"], m["xfers"][: len(m["arrivals"])], strict=True):
                    x_set[t] = int(last_x.get(int(g.rank[t]), t))
                    a_of[t] = a
                    key = (int(g.rank[a]), int(g.place[a]))
                    removed[key] = removed.get(key, 0) + 1
                    merged_away.append(a)
    keep = np.ones(g.esrc.size, dtype=bool)
    if x_set:
        lk = _lane_key(g)
        from_x = np.flatnonzero(np.isin(g.esrc, list(x_set)))
        for e in from_x.tolist():
            t, d, w, kind = int(g.esrc[e]), int(g.edst[e]), int(g.ew[e]), int(g.ekind[e])
            if lk[t] == lk[d]:  # the lane goes on once the member has arrived
                add.append((a_of[t], d, w, kind))
            elif kind != K_WAIT:  # work that waited for a member waits for the merged collective
                add.append((x_set[t], d, w, kind))
            # (a thread blocked on a member no longer blocks: the last member's join stays)
            keep[e] = False
    _drop_and_add(g, keep, add)
    dropped_ns = _drop_launch_calls(g, merged_away)
    g.notes.append(
        f"{edit.text}: {sum(len(c) for c in chunks)} {edit.target} collectives merged into {len(chunks)}"
        + (
            f", each α + β·bytes = {fit.alpha_us:.1f} µs + {fit.beta_us_per_byte * 2**20:.3f} µs/MiB"  # type: ignore[operator]
            if priced
            else ""
        )
        + f"; the merged-away members' launch calls removed ({dropped_ns / 1e6 / max(1, len(g.graphs)):.1f} ms per rank)"
    )
    return g


def _drop_launch_calls(g: StepGraph, arrivals: list[int]) -> int:
    """Set to 0 the launch call of each collective arrival in ``arrivals`` (the ``launch`` task on the launching
    thread right after the host task its launch edge leaves from): one call launches a merged collective.
    Returns the host time removed (ns)."""
    if not arrivals:
        return 0
    lk = _lane_key(g)
    sel = np.isin(g.edst, arrivals) & (g.ekind == K_LAUNCH)
    calls = g.esrc[sel] + 1
    calls = calls[calls < g.dur.size]
    calls = calls[(lk[calls] == lk[calls - 1]) & (g.kind[calls] == K_LAUNCH)]
    calls = np.unique(calls)
    removed = int(g.dur[calls].sum())
    g.dur[calls] = 0
    return removed


def _prefetch(g: StepGraph, edit: Edit) -> StepGraph:
    """Issue ``unit``'s all-gathers (in each phase where it has some) k units earlier: each rank's arrival at
    them is launched from where the unit k places before it (that phase's order on the training thread)
    begins, and leaves its queue lane's order; the thread still waits for it where it did. The extra
    memory: the all-gathered bytes, live from that earlier unit's start."""
    k = int(edit.factor)
    ags = [x for x in g.rendezvous if x["type"] == "all_gather" and _rv_place(g, x)[0] == edit.unit]
    if not ags:
        raise ConfigError(f"--what-if {edit.text!r}: no all_gather is attributed to unit {edit.unit!r}")
    lk = _lane_key(g)
    # only the edges into the moved arrivals and out of their transfers (numpy: not a loop over every edge)
    into: dict[int, list[int]] = {}
    for e in np.flatnonzero(np.isin(g.edst, [a for x in ags for a in x["arrivals"]])).tolist():
        into.setdefault(int(g.edst[e]), []).append(e)
    outof: dict[int, list[int]] = {}
    for e in np.flatnonzero(np.isin(g.esrc, [t for x in ags for t in x["xfers"]])).tolist():
        outof.setdefault(int(g.esrc[e]), []).append(e)
    order_of: dict[tuple[int, str], list[str]] = {}  # per rank and phase, units in the order they begin
    first_task: dict[tuple[int, str, str], int] = {}
    for i, gr in enumerate(g.graphs):
        lo = int(g.offset[i])
        main = np.flatnonzero(gr.lane == gr.main_lane) + lo
        main = main[np.argsort(g.meas[main], kind="stable")]
        _, first = np.unique(g.place[main], return_index=True)  # each place's first task on the thread
        for v in main[np.sort(first)].tolist():
            _, unit, phase = g.places[int(g.place[v])]
            if (i, unit, phase) not in first_task:
                first_task[(i, unit, phase)] = v
                order_of.setdefault((i, phase), []).append(unit)
    keep = np.ones(g.esrc.size, dtype=bool)
    add: list[tuple[int, int, int, int]] = []
    moved, moved_bytes = 0, 0.0
    for x in ags:
        _, phase = _rv_place(g, x)
        for a, t in zip(x["arrivals"], x["xfers"][: len(x["arrivals"])], strict=True):
            i = int(g.rank[a])
            units = order_of.get((i, phase), [])
            if edit.unit not in units or units.index(edit.unit) < k:
                continue
            first = first_task[(i, units[units.index(edit.unit) - k], phase)]
            pred_lane = None
            for e in into.get(a, []):
                src = int(g.esrc[e])
                if int(g.ekind[e]) == K_LAUNCH or (lk[src] == lk[a] and int(g.ekind[e]) != K_WAIT):
                    keep[e] = False
                    if lk[src] == lk[a]:
                        pred_lane = src
            for e in outof.get(t, []):
                if lk[int(g.edst[e])] == lk[a]:  # the lane's order closes over the moved collective
                    keep[e] = False
                    if pred_lane is not None:
                        add.append((pred_lane, int(g.edst[e]), 0, int(g.ekind[e])))
            add.append((first, a, 0, K_LAUNCH))
            moved += 1
            moved_bytes += x["bytes"] or 0.0
    if not moved:
        raise ConfigError(
            f"--what-if {edit.text!r}: unit {edit.unit!r} has fewer than {k} units before it in its phase"
        )
    _drop_and_add(g, keep, add)
    g.notes.append(
        f"{edit.text}: {edit.unit}'s all-gathers issued {k} unit(s) earlier ({moved} rank-instances); extra memory "
        f"kept live: {moved_bytes / max(1, len(g.graphs)) / 2**20:.2f} MiB per rank of all-gathered parameters, "
        f"from {k} unit(s) earlier (sizes the trace does not give count as 0)"
    )
    return g


def what_if(g: StepGraph, base: Reading, edit: Edit) -> dict[str, Any]:
    """The ``what_if`` entry of one edit: its replay's step, per phase, and what changed on the path."""
    try:
        e = apply_edit(g, edit)
        s = schedule(e)
    except CycleError as exc:
        return {"edit": edit.text, "predicted_step_us": None, "phases": {}, "changed": [], "source": SOURCE_REPLAY,
                "note": f"the edited graph has a cycle ({exc})"}  # fmt: skip
    rd = read(e, s, slack=False)
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


def what_if_row(res: Any, g: StepGraph, base: Reading, edit: Edit | str) -> dict[str, Any]:
    """:func:`what_if` of ``edit`` on ``res``'s joined graph; where the graph refuses the edit (a rank, unit or
    collective it does not have) or its replay fails (a cycle), the closed form answers instead, with
    ``source: "closed form"`` and a ``note`` saying why (:func:`fsdpbench.analysis.replay_edits.closed_form_row`).
    A malformed edit, or one naming a rank the profiles do not hold, still raises ConfigError."""
    from fsdpbench.analysis.replay_edits import closed_form_row

    parsed = parse_edit(edit) if isinstance(edit, str) else edit
    if parsed.rank is not None:
        _rank_pos(g, parsed.rank, parsed)  # no closed form answers for a rank that is not there
    try:
        row = what_if(g, base, parsed)
    except ConfigError as exc:
        return closed_form_row(res, parsed, f"the replay cannot apply it ({exc})", base.step_us)
    if row["predicted_step_us"] is None:
        return closed_form_row(res, parsed, f"its replay gave no step ({row['note']})", base.step_us)
    return row
