"""The joined step graph and its replay: every rank's graph (:mod:`fsdpbench.analysis.crossrank.replay_graph`) joined
by one rendezvous per collective instance, replayed as a list schedule, and read: the cross-rank critical
path, slack, and the figure's data (docs/replay.md). The public face is :mod:`fsdpbench.analysis.crossrank.replay`;
the what-ifs (edits of this graph) are :mod:`fsdpbench.analysis.crossrank.replay_whatif`.

The rendezvous: collective instance c (matched across ranks by (group, seq), else fsdpbench's c10d
ranges, else order in its group: the same keys as analysis/crossrank/waits.py) has an arrival task on each rank
holding it; its transfer starts when the last of them has arrived (on the aligned clocks), and rank r's
part lasts ``max(e_r - L, 0)``, its measured end after the measured last arrival ``L`` (aligned). The
waits are what the replay computes.
"""

from __future__ import annotations

import array
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fsdpbench.analysis.crossrank.replay_graph import (
    K_GAP,
    K_LAUNCH,
    K_SYNC,
    K_TRANSFER,
    K_WAIT,
    KINDS,
    RankGraph,
)

NEAR_CRITICAL = 0.02
"""Places off the critical path with slack below this share of the step are near-critical."""
MAX_SEGMENTS = 2000
MAX_RENDEZVOUS = 300


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
        parts_place.append(m[g.place].astype(np.int32) if m.size else np.zeros(len(g), np.int32))
    rank = np.concatenate([np.full(len(g), i, dtype=np.int32) for i, g in enumerate(graphs)])
    local = np.concatenate([np.arange(len(g), dtype=np.int32) for g in graphs])
    dur = np.concatenate([g.dur for g in graphs]).astype(np.int64)
    meas = np.concatenate([g.start - o for g, o in zip(graphs, offset_ns, strict=True)])
    kind = np.concatenate([g.kind for g in graphs]).astype(np.int8)
    place = np.concatenate(parts_place)
    # task indices (the rendezvous' included) as int32: half the edges' memory
    idx = np.int32 if n + sum(len(k) for k in keys) < 2**31 else np.int64
    esrc = [(g.esrc + offset[i]).astype(idx) for i, g in enumerate(graphs)]
    edst = [(g.edst + offset[i]).astype(idx) for i, g in enumerate(graphs)]
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
        arriving = set(holders)
        more = [h for h in all_holders if h not in arriving]  # once per key, not per holder (1,024 ranks)
        extra_x = [int(offset[i] + graphs[i].c_xfer[j]) for i, j in more]
        extra_e = [int(graphs[i].c_end[j]) - offset_ns[i] for i, j in more]
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
    rank = np.concatenate([rank, np.full(nrv, -1, np.int32)])
    local = np.concatenate([local, np.full(nrv, -1, np.int32)])
    dur = np.concatenate([dur, np.zeros(nrv, np.int64)])
    meas = np.concatenate([meas, np.array([x["measured_last"] for x in rv], dtype=np.int64)])
    kind = np.concatenate([kind, np.full(nrv, K_WAIT, np.int8)])
    place = np.concatenate([place, np.full(nrv, -1, np.int32)])
    esrc.append(np.array(r_src, dtype=idx))
    edst.append(np.array(r_dst, dtype=idx))
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


def _kahn(n: int, esrc: np.ndarray, edst: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Kahn's algorithm (ready nodes taken in ``seed``'s order, then as they become ready): the nodes it
    could order, all ``n`` unless some are on a cycle."""
    from collections import deque

    deg = np.bincount(edst, minlength=n).tolist()
    by_src = np.argsort(esrc, kind="stable")
    ptr_l = np.concatenate([[0], np.cumsum(np.bincount(esrc, minlength=n))]).tolist()
    dst_sorted = edst[by_src].tolist()
    ready = deque(v for v in seed.tolist() if deg[v] == 0)
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
    return np.array(out, dtype=np.int64)


def _forward(order: np.ndarray, esrc: np.ndarray, edst: np.ndarray) -> bool:
    """Whether every edge goes forward in ``order``."""
    pos = np.empty(order.size, dtype=np.int64)
    pos[order] = np.arange(order.size)
    return bool((pos[esrc] < pos[edst]).all())


def _by_chunks(
    order: np.ndarray, local: np.ndarray, esrc: np.ndarray, edst: np.ndarray, group: np.ndarray
) -> np.ndarray | None:
    """A topological order where only edges between groups (ranks; each rendezvous its own) go backward in
    ``order``: each group's nodes in ``local``'s order (a permutation of the nodes), cut into chunks where
    an edge from another group arrives, and the chunks (a few per collective, not per task) put in a
    topological order by Kahn's algorithm, ready chunks taken in ``order``. None where an edge within a
    group goes backward in ``local``, or the chunks do not order (a tie the cuts cannot separate)."""
    n = order.size
    og = local[np.argsort(group[local], kind="stable")]
    gpos = np.empty(n, dtype=np.int64)
    gpos[og] = np.arange(n)
    inside = group[esrc] == group[edst]
    if (gpos[esrc[inside]] >= gpos[edst[inside]]).any():
        return None
    cut = np.zeros(n, dtype=bool)
    cut[0] = True
    gs = group[og]
    cut[1:] = gs[1:] != gs[:-1]
    cut[gpos[edst[~inside]]] = True
    chunk_at = np.cumsum(cut) - 1  # per position in og
    chunk = chunk_at[gpos]
    nc = int(chunk_at[-1]) + 1
    firsts = np.flatnonzero(cut)
    seq = np.flatnonzero(gs[firsts[1:]] == gs[firsts[:-1]])  # a group's chunks follow each other
    c_src = np.concatenate([seq, chunk[esrc[~inside]]])
    c_dst = np.concatenate([seq + 1, chunk[edst[~inside]]])
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    c_order = _kahn(nc, c_src, c_dst, np.argsort(pos[og[firsts]], kind="stable"))
    if c_order.size < nc:
        return None
    c_pos = np.empty(nc, dtype=np.int64)
    c_pos[c_order] = np.arange(nc)
    return og[np.argsort(c_pos[chunk_at], kind="stable")]


def _topo_order(
    n: int,
    esrc: np.ndarray,
    edst: np.ndarray,
    hint: np.ndarray,
    tier: np.ndarray,
    group: np.ndarray | None = None,
    own: np.ndarray | None = None,
) -> np.ndarray:
    """A topological order: the tasks sorted by ``hint`` (measured start), then ``tier`` (zero-length
    tasks, then rendezvous, then transfers, at one instant), when every edge goes forward in it (the usual
    case, checked at numpy speed); else, where only edges between ``group``s (ranks; each rendezvous its own)
    go backward when each group is sorted by ``own`` (a rank's own measured times: a transfer at its
    arrival, not at the last rank's), the groups' orders joined chunk by chunk (:func:`_by_chunks`: the
    ranks' clocks put one rank's end before another's arrival); else Kahn's algorithm. Every topological
    order gives the same schedule."""
    order = np.lexsort((np.arange(n), tier, hint))
    if esrc.size == 0 or _forward(order, esrc, edst):
        return order
    if group is not None:
        local = order if own is None else np.lexsort((np.arange(n), tier, own))
        out = _by_chunks(order, local, esrc, edst, group)
        if out is not None and _forward(out, esrc, edst):
            return out
    out = _kahn(n, esrc, edst, order)
    if out.size < n:
        raise CycleError(f"{n - out.size} tasks are on a cycle")
    return out


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
    group: np.ndarray | None = None
    """Per node: its rank's position, or for a rendezvous a number of its own (:func:`_by_chunks`)."""
    own: np.ndarray | None = None
    """Per node: ``meas``, but a transfer's is its rank's arrival's (:func:`_topo_order`)."""


def contract(g: StepGraph) -> Chains:
    """The forward contraction of ``g`` (:class:`Chains`)."""
    n = g.dur.size
    indeg = np.bincount(g.edst, minlength=n)
    chain = (g.edst == g.esrc + 1) & (indeg[g.edst] == 1) & (g.rank[g.esrc] == g.rank[g.edst])
    chain &= g.base[g.edst] <= _NO_BASE
    del indeg
    merged = np.zeros(n, dtype=bool)
    merged[g.edst[chain]] = True
    chain_edge = np.full(n, -1, dtype=np.int64)
    chain_edge[g.edst[chain]] = np.flatnonzero(chain)
    node = np.cumsum(~merged) - 1
    nn = int(node[-1]) + 1 if n else 0
    heads = np.flatnonzero(~merged)
    del merged
    step = np.zeros(n, dtype=np.int64)  # a merged task starts this long after the one before it starts
    into = g.edst[chain]
    step[into] = g.dur[into - 1] + g.ew[chain]
    csum = np.cumsum(step)
    offset = csum - csum[heads][node]
    del step, csum, into
    dur = np.bincount(node, weights=g.dur, minlength=nn).astype(np.int64)
    keep = np.flatnonzero(~chain)
    src = g.esrc[keep]
    tier = np.where(dur > 0, 3, 0).astype(np.int8)
    tier[node[[x["task"] for x in g.rendezvous]]] = 1
    group = g.rank[heads].astype(np.int64)
    lone = group < 0
    group[lone] = len(g.offset) + np.arange(int(lone.sum()))  # a rendezvous: a group of its own
    xf = [t for x in g.rendezvous for t in x["xfers"]]
    own = g.meas[heads]
    xf_arr = np.array(xf, dtype=np.int64)
    xf_arr = xf_arr[(xf_arr > 0) & (chain_edge[xf_arr] < 0)]  # transfers heading a node: after their arrival
    own[node[xf_arr]] = g.meas[xf_arr - 1]
    tier[node[xf]] = np.where(dur[node[xf]] > 0, 3, 2)
    return Chains(
        node=node, offset=offset, dur=dur, base=g.base[heads], meas=g.meas[heads], tier=tier, esrc=node[src],
        edst=node[g.edst[keep]], src_end=offset[src] + g.dur[src] + g.ew[keep], eid=keep, chain_edge=chain_edge,
        group=group, own=own,
    )  # fmt: skip


def _q(a: np.ndarray) -> array.array:
    """An int64 numpy array as an ``array.array('q')`` (a copy)."""
    out = array.array("q")
    out.frombytes(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    return out


def _lane_runs(c: Chains) -> np.ndarray:
    """Per node of ``c``: 0, or for the last node of a *lane run* its length, or -1 for the run's other
    nodes. A lane run is at least :data:`SCAN_MIN` consecutive one-task nodes each of whose tasks but the last
    has one successor, the task after it (same rank): a device queue's kernels between two cross-lane
    edges, each after its launch and after the one before it. (A one-task node's edges are its task's.)"""
    nn = c.base.size
    one = np.diff(np.flatnonzero(c.chain_edge < 0), append=c.chain_edge.size) == 1  # per node
    outdeg = np.bincount(c.esrc, minlength=nn)
    link = (c.edst == c.esrc + 1) & (outdeg[c.esrc] == 1)
    del outdeg
    src = c.esrc[link]
    src = src[one[src] & one[src + 1] & (c.group[src] == c.group[src + 1])]
    joined = np.zeros(nn, dtype=bool)  # node v + 1 continues node v's run
    joined[src] = True
    starts = np.flatnonzero(~np.concatenate([[False], joined[:-1]]))
    length = np.diff(starts, append=nn)
    mode = np.zeros(nn, dtype=np.int64)
    long = length >= SCAN_MIN
    mode[np.repeat(long, length)] = -1
    mode[(starts + length - 1)[long]] = length[long]
    return mode


def schedule(g: StepGraph) -> Schedule:
    """Replay ``g``: every task starts when the last of its predecessors has ended (plus the edge's
    latency), and not before its earliest start (on the contracted graph, :func:`contract`).

    The Python loop runs over the contracted graph's nodes in topological order, one iteration a node,
    except for lane runs (:func:`_lane_runs`), each replayed at its last node by numpy: each task's latest
    ready time over the edges into it from outside the run, then the run's own chain as a running maximum
    (exact for any lengths and latencies). A run's binding edges are read afterwards: the last edge (in
    edge order) reaching each task's start, none where the earliest start alone does, as the loop takes
    them."""
    c = contract(g)
    n = c.base.size
    order = _topo_order(n, c.esrc, c.edst, c.meas, c.tier, c.group, c.own)
    mode = _lane_runs(c)
    by_dst = np.argsort(c.edst, kind="stable")
    # typed arrays, not lists: 8 bytes an entry instead of ~36 (the loop is the same speed); numpy views of
    # the same memory for the runs
    ptr = _q(np.concatenate([[0], np.cumsum(np.bincount(c.edst, minlength=n))]))
    src_l = _q(c.esrc[by_dst])
    w_l = _q(c.src_end[by_dst])
    eid_l = _q(c.eid[by_dst])
    dst_np = c.edst[by_dst]
    del by_dst
    c.esrc = c.edst = c.src_end = c.eid = c.meas = c.own = None  # in the typed arrays now
    src_np = np.frombuffer(src_l, dtype=np.int64)
    w_np = np.frombuffer(w_l, dtype=np.int64)
    start = _q(c.base)
    start_np = np.frombuffer(start, dtype=np.int64)
    bind = _q(np.full(n, -1, dtype=np.int64))
    for v, m in zip(_q(order), _q(mode[order]), strict=True):
        if not m:
            s = start[v]
            b = -1
            for k in range(ptr[v], ptr[v + 1]):
                x = start[src_l[k]] + w_l[k]
                if x > s or (x == s and b >= 0):
                    s = x
                    b = eid_l[k]
            start[v] = s
            bind[v] = b
        elif m > 0:  # a lane run: nodes v - m + 1 … v
            a = v - m + 1
            lo, hi = ptr[a], ptr[v + 1]
            src = src_np[lo:hi]
            inside = (src >= a) & (src < v)  # the run's own chain: node i to i + 1
            ready = c.base[a : v + 1].copy()
            out = ~inside
            np.maximum.at(ready, dst_np[lo:hi][out] - a, start_np[src[out]] + w_np[lo:hi][out])
            step = np.zeros(m, dtype=np.int64)
            step[src[inside] - a] = w_np[lo:hi][inside]  # length + latency to the next task
            before = np.cumsum(step) - step
            start_np[a : v + 1] = np.maximum.accumulate(ready - before) + before
    del ptr
    runs = np.flatnonzero(mode != 0)
    if (
        runs.size
    ):  # the runs' binding edges: the last edge reaching the start, where the start is not the base
        on = np.zeros(n, dtype=bool)
        on[runs] = True
        at = np.flatnonzero(on[dst_np])
        d = dst_np[at]
        hit = (start_np[src_np[at]] + w_np[at] == start_np[d]) & (start_np[d] > c.base[d])
        bind_np = np.frombuffer(bind, dtype=np.int64)
        bind_np[runs] = -1
        np.maximum.at(bind_np, d[hit], np.frombuffer(eid_l, dtype=np.int64)[at[hit]])
    del src_l, w_l, eid_l, src_np, w_np, dst_np
    n_start = np.frombuffer(start, dtype=np.int64)
    t_start = n_start[c.node] + c.offset
    binding = np.where(c.chain_edge >= 0, c.chain_edge, np.frombuffer(bind, dtype=np.int64)[c.node])
    # the tasks in their nodes' order (a node's tasks are consecutive, in index order)
    heads = np.flatnonzero(c.chain_edge < 0)
    size = np.diff(heads, append=g.dur.size)[order]
    t_order = np.arange(g.dur.size) + np.repeat(heads[order] - (np.cumsum(size) - size), size)
    return Schedule(t_start, t_start + g.dur, binding, t_order)


SCAN_MIN = 64
"""A run of at least this many tasks each of which has one predecessor, the task before it (a host thread
between two joins: the forward contraction's node), gets its latest starts by numpy scans in
:func:`latest_starts`, not task by task."""


def latest_starts(g: StepGraph, s: Schedule, deadline: int) -> np.ndarray:
    """Per task the latest start that does not delay the step's end past ``deadline``.

    The Python loop runs in reverse topological order over two kinds of nodes. A *forward run* (the forward
    contraction's node of at least :data:`SCAN_MIN` tasks: a host thread between joins, whose launches are
    the edges out of it) is read by numpy: each task's latest start from the edges leaving the run, then the
    run's own chain as a reverse running minimum (exact for any lengths and latencies). The other tasks are
    contracted backward: a task whose one successor is the task after it (same rank) is merged into that
    task's node (its latest start is the next one's minus its length and the latency: exact where no
    length or latency is negative; else nothing is merged), and a node is one iteration. Nodes are ordered
    by the schedule's task order (``s.order``): a backward node at its last task, a forward run at its first
    (every edge into a forward run arrives at its first task, every edge out of a backward node leaves its
    last)."""
    n = g.dur.size
    esrc, edst = g.esrc, g.edst
    same = (edst == esrc + 1) & (g.rank[esrc] == g.rank[edst])
    indeg = np.bincount(edst, minlength=n)
    fchain = same & (indeg[edst] == 1) & (g.base[edst] <= _NO_BASE)  # contract's rule
    del indeg
    head = np.ones(n, dtype=bool)
    head[edst[fchain]] = False
    heads = np.flatnonzero(head)
    del head
    flen = np.diff(heads, append=n)
    long = flen >= SCAN_MIN
    in_run = np.repeat(long, flen)
    inner = fchain & in_run[esrc]  # a forward run's own chain
    del fchain
    outdeg = np.bincount(esrc, minlength=n)
    chain = same & (outdeg[esrc] == 1) & ~in_run[esrc] & ~in_run[edst]
    del outdeg, same
    if (g.dur < 0).any() or (g.ew < 0).any():
        chain[:] = False
    merged = np.zeros(n, dtype=bool)
    merged[esrc[chain]] = True
    tail = ~merged  # a node's last task; every task of a forward run is a node of its own here
    del merged
    tails = np.flatnonzero(tail)
    node = np.cumsum(tail) - tail  # a task's node: the first tail at or after it (the tails before it)
    step = np.zeros(n, dtype=np.int64)  # a merged task's latest start is the next one's minus this
    out_of = esrc[chain]
    step[out_of] = g.dur[out_of] + g.ew[chain]
    del out_of
    csum = np.cumsum(step)
    before = csum[tails][node] - csum + step  # Σ step from the task to its node's tail
    del csum, step
    keep = np.flatnonzero(~chain & ~inner)
    del chain
    lat = np.zeros(n, dtype=np.int64)  # a forward run's task: the latency to the task after it
    lat[esrc[inner]] = g.ew[inner]
    del inner
    dst = edst[keep]
    nt = tails.size
    src_n = node[esrc[keep]]
    by_src = np.argsort(src_n, kind="stable")
    ptr_np = np.concatenate([[0], np.cumsum(np.bincount(src_n, minlength=nt))])
    src_np = src_n[by_src]
    dst_np = node[dst][by_src]
    w_np = (before[dst] + g.ew[keep])[by_src]
    del src_n, by_src, dst, keep
    ptr, dst_l, w_l = _q(ptr_np), _q(dst_np), _q(w_np)
    dur_l = _q(g.dur[tails])
    # the nodes in reverse topological order: backward nodes at their tail, forward runs at their first task
    pos = np.empty(n, dtype=np.int64)
    pos[s.order] = np.arange(n)
    runs = heads[long]
    items = np.concatenate([np.flatnonzero(tail & ~in_run), runs])
    size = np.concatenate([np.zeros(items.size - runs.size, dtype=np.int64), flen[long]])
    del in_run, tail
    o = np.argsort(-pos[items], kind="stable")
    del pos
    ls = _q(np.zeros(nt, dtype=np.int64))
    ls_np = np.frombuffer(ls, dtype=np.int64)  # the same memory, for the runs' scans
    for v, m in zip(_q(node[items[o]]), _q(size[o]), strict=True):
        if not m:
            f = deadline
            for k in range(ptr[v], ptr[v + 1]):
                x = ls[dst_l[k]] - w_l[k]
                if x < f:
                    f = x
            ls[v] = f - dur_l[v]
            continue
        t = int(tails[v])  # a forward run: tasks t … t + m - 1, nodes v … v + m - 1
        y = np.full(m, deadline, dtype=np.int64)
        lo, hi = ptr[v], ptr[v + m]
        if hi > lo:
            np.minimum.at(y, src_np[lo:hi] - v, ls_np[dst_np[lo:hi]] - w_np[lo:hi])
        d = g.dur[t : t + m]
        c = d + lat[t : t + m]
        q = np.cumsum(c) - c  # Σ (length + latency) of the run's tasks before each
        # ls_i = min(y_i - d_i, ls_{i+1} - c_i): a reverse running minimum of y - d - q, plus q
        ls_np[v : v + m] = np.minimum.accumulate((y - d - q)[::-1])[::-1] + q
    return ls_np[node] - before


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
    one = np.bincount(g.edst, minlength=g.dur.size)[g.edst] == 1  # a task's only edge: no maximum to take
    ready[g.edst[one]] = np.maximum(x[one], _NO_BASE)
    np.maximum.at(ready, g.edst[~one], x[~one])
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
        small = k_sel.astype(np.uint16) if int(k_sel.max()) < 1 << 16 else k_sel  # a radix sort
        o = np.argsort(small, kind="stable")
        k_sel = k_sel[o]
        at = np.flatnonzero(np.concatenate([[True], k_sel[1:] != k_sel[:-1]]))
        low = np.minimum.reduceat(slack_t[sel][o], at)  # the least slack of each (place, kind)
        for k, v in zip(k_sel[at].tolist(), low.tolist(), strict=True):
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
    from fsdpbench.analysis.crossrank.replay_graph import build_rank_graph
    from fsdpbench.trace import Source, read_rank

    trace = read_rank(Source(__import__("pathlib").Path(r.source), r.format))
    steps = [s.step for s in r.steps if s.step is not None]
    return build_rank_graph(trace, steps)


def _keys(ranks: list[Any], graphs: list[RankGraph]) -> tuple[list[list[Any]], str]:
    """Each graph collective's cross-rank key (analysis/crossrank/waits.py's keys, one method for all ranks)."""
    from fsdpbench.analysis.crossrank import waits

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
    # the joined arrays hold the ranks' tasks and edges again: keep one copy (a later join reads the traces)
    sg.graphs = [gr.slim() for gr in graphs]
    for r in ranks:
        r.replay_graph = None
    return sg, None


def _longest(length: np.ndarray, k: int) -> np.ndarray:
    """The positions of the ``k`` largest of ``length``, ties to the earlier (a stable sort's first ``k``), in
    ascending order: by a partition, not a sort."""
    if length.size <= k:
        return np.arange(length.size)
    cut = np.partition(length, length.size - k)[length.size - k]  # the k-th largest
    above = np.flatnonzero(length > cut)
    return np.sort(np.concatenate([above, np.flatnonzero(length == cut)[: k - above.size]]))


def _figure(g: StepGraph, s: Schedule, rd: Reading) -> dict[str, Any]:
    """The ``figure`` block of docs/DATA.md: every rank's lanes over the replayed step (segments of one
    kind merged, short ones dropped past :data:`MAX_SEGMENTS`), the path, the rendezvous."""
    starts = [gr.ws_ns - o for gr, o in zip(g.graphs, g.offset_ns, strict=True)]
    t0 = int(min(starts))
    real = np.flatnonzero(g.rank >= 0)
    # a wait is drawn from its start to the start of the task after it on its lane
    lane_key = g.rank[real].astype(np.int64) * 100_000 + np.concatenate([gr.lane for gr in g.graphs]).astype(
        np.int64
    )
    o = np.argsort(lane_key, kind="stable")  # by lane, then start: a lane's tasks start in index order …
    st = s.start[real][o]
    k = lane_key[o]
    if not bool(((st[1:] >= st[:-1]) | (k[1:] != k[:-1])).all()):
        o = np.lexsort((s.start[real], lane_key))  # … unless an edit took a lane-order edge away
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
    kinds = g.kind[tasks]
    path = rd.on_path[tasks]
    # merge neighbours of one lane, kind and path flag
    cut = np.ones(tasks.size, dtype=bool)
    cut[1:] = (keys[1:] != keys[:-1]) | (kinds[1:] != kinds[:-1]) | (path[1:] != path[:-1])
    m_s = np.minimum.reduceat(seg_s, np.flatnonzero(cut)) if tasks.size else seg_s
    m_e = np.maximum.reduceat(seg_e, np.flatnonzero(cut)) if tasks.size else seg_e
    m_key, m_kind, m_path = keys[cut], kinds[cut].astype(np.int64), path[cut].astype(np.int64)
    if m_s.size > MAX_SEGMENTS:  # keep the path and the longest of the rest
        length = (m_e - m_s) + m_path * (1 << 50)
        top = _longest(length, MAX_SEGMENTS)
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
    pk = g.rank[pv].astype(np.int64) * 100_000 + all_lanes[pv]
    if pv.size:  # consecutive path tasks on one lane: one row
        cut = np.ones(pv.size, dtype=bool)
        cut[1:] = pk[1:] != pk[:-1]
        at = np.flatnonzero(cut)
        p_s = np.minimum.reduceat(s.start[pv], at)
        p_e = np.maximum.reduceat(s.end[pv], at)
        p_r, p_k = g.rank[pv][at], pk[at]
        if at.size > MAX_SEGMENTS:  # the longest stretches
            top = _longest(p_e - p_s, MAX_SEGMENTS)
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
