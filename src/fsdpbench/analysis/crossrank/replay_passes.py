"""The step replay's data and its two passes (docs/replay.md "The replay"): the joined graph's type
(:class:`StepGraph`), its topological order, the forward contraction and the schedule (:func:`schedule`),
and the latest starts behind slack (:func:`latest_starts`), each with numpy where a run of tasks is a
chain. The joining, the reading and the figure are :mod:`fsdpbench.analysis.crossrank.replay_schedule`,
which re-exports these names."""

from __future__ import annotations

import array
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fsdpbench.analysis.crossrank.replay_graph import RankGraph


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


@dataclass
class Schedule:
    """A replay of a :class:`StepGraph`: per task its start and end, the edge that bound its start
    (-1: its earliest start), and the topological order used."""

    start: np.ndarray
    end: np.ndarray
    binding: np.ndarray
    order: np.ndarray
    same: np.ndarray | None = None
    """Per edge of the graph scheduled: it joins a task to the next one of its rank (from :func:`contract`,
    for :func:`latest_starts` on the same graph; None: computed there)."""
    merged: np.ndarray | None = None
    """Per edge: the forward contraction merged its target into its source's node (likewise)."""


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


def _stable_argsort(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")``, as a radix sort where the keys fit 16 bits unsigned."""
    if keys.size and 0 <= int(keys.min()) and int(keys.max()) < 1 << 16:
        keys = keys.astype(np.uint16)
    return np.argsort(keys, kind="stable")


def _by_chunks(
    order: np.ndarray, local: np.ndarray, esrc: np.ndarray, edst: np.ndarray, group: np.ndarray
) -> np.ndarray | None:
    """A topological order where only edges between groups (ranks; each rendezvous its own) go backward in
    ``order``: each group's nodes in ``local``'s order (a permutation of the nodes), cut into chunks where
    an edge from another group arrives, and the chunks (a few per collective, not per task) put in a
    topological order by Kahn's algorithm, ready chunks taken in ``order``. None where an edge within a
    group goes backward in ``local``, or the chunks do not order (a tie the cuts cannot separate)."""
    n = order.size
    og = local[_stable_argsort(group[local])]
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
    return og[_stable_argsort(c_pos[chunk_at])]


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
    order = np.lexsort((tier, hint))  # a stable sort: ties stay in index order
    if esrc.size == 0 or _forward(order, esrc, edst):
        return order
    if group is not None:
        local = order if own is None else np.lexsort((tier, own))
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
    same: np.ndarray | None = None
    """Per edge of the task graph: :func:`_same`; and whether it is merged (:func:`_merged`)."""
    merged: np.ndarray | None = None


def contract(g: StepGraph) -> Chains:
    """The forward contraction of ``g`` (:class:`Chains`)."""
    n = g.dur.size
    same = _same(g)
    chain = _merged(g, same)
    merged = np.zeros(n, dtype=bool)
    merged[g.edst[chain]] = True
    chain_edge = np.full(n, -1, dtype=np.int64)
    chain_edge[g.edst[chain]] = np.flatnonzero(chain)
    node = np.cumsum(~merged) - 1
    heads = np.flatnonzero(~merged)
    del merged
    step = np.zeros(n, dtype=np.int64)  # a merged task starts this long after the one before it starts
    into = g.edst[chain]
    step[into] = g.dur[into - 1] + g.ew[chain]
    csum = np.cumsum(step)
    offset = csum - csum[heads][node]
    del step, csum, into
    # a node's tasks are consecutive: Σ of their lengths by a reduceat (integers, not bincount's floats)
    dur = np.add.reduceat(g.dur.astype(np.int64, copy=False), heads) if n else np.zeros(0, dtype=np.int64)
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
        group=group, own=own, same=same, merged=chain,
    )  # fmt: skip


def _same(g: StepGraph) -> np.ndarray:
    """Per edge: it joins a task to the next one of its rank (rendezvous tasks have no rank of their own but
    share -1: no edge joins two). A rank's tasks are consecutive, from ``g.offset[i]``, the rendezvous after
    them all: a task and the next one differ in rank only where the next one starts a rank's tasks (or the
    rendezvous)."""
    same = g.edst == g.esrc + 1
    first = np.zeros(g.dur.size + 1, dtype=bool)  # a rank's first task, and the first rendezvous
    first[g.offset[1:]] = True
    at = np.flatnonzero(same)  # there, the ranks differ only where the target is the first of its rank
    same[at] = ~first[g.edst[at]]
    return same


def _merged(g: StepGraph, same: np.ndarray) -> np.ndarray:
    """Per edge: the forward contraction merges its target into its source's node (:class:`Chains`): it joins
    the task before to the next one of a rank, which has no other predecessor and no earliest start."""
    indeg = np.bincount(g.edst, minlength=g.dur.size)
    free = (indeg == 1) & (g.base <= _NO_BASE)  # per task
    del indeg
    chain = same.copy()
    at = np.flatnonzero(chain)
    chain[at] = free[g.edst[at]]
    return chain


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
    visit = order[mode[order] >= 0]  # a run's other nodes are replayed at its last
    for v, m in zip(_q(visit), _q(mode[visit]), strict=True):
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
        else:  # a lane run: nodes v - m + 1 … v
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
    return Schedule(t_start, t_start + g.dur, binding, t_order, c.same, c.merged)


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
    fresh = s.same is None or s.merged is None or s.same.size != esrc.size
    same = _same(g) if fresh else s.same
    fchain = _merged(g, same) if fresh else s.merged  # contract's rule
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
    del ptr_np  # the runs read numpy views of the typed arrays' memory, not second copies
    dst_np, w_np = np.frombuffer(dst_l, dtype=np.int64), np.frombuffer(w_l, dtype=np.int64)
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
