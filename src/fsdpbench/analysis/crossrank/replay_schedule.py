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

from dataclasses import dataclass
from typing import Any

import numpy as np

from fsdpbench.analysis.crossrank.replay_graph import (
    K_GAP,
    K_LAUNCH,
    K_QUEUE_GAP,
    K_SYNC,
    K_TRANSFER,
    K_WAIT,
    KINDS,
    RankGraph,
)
from fsdpbench.analysis.crossrank.replay_passes import (  # noqa: F401 - re-exported: replay.py, replay_whatif.py
    Chains,
    CycleError,
    Schedule,
    StepGraph,
    contract,
    latest_starts,
    schedule,
)

NEAR_CRITICAL = 0.02
"""Places off the critical path with slack below this share of the step are near-critical."""
MAX_SEGMENTS = 2000
MAX_RENDEZVOUS = 300


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
    by_key: dict[Any, list[tuple[int, int]]] = {}  # the rendezvous: one per key
    for i, ks in enumerate(keys):
        for j, k in enumerate(ks):
            by_key.setdefault(k, []).append((i, j))
    total = n + len(by_key)

    def joined(parts: list[np.ndarray], dtype: Any, tail: int) -> np.ndarray:
        """The ranks' ``parts`` one after the other, then ``tail`` for each rendezvous: one array, one copy."""
        out = np.empty(total, dtype=dtype)
        if parts:
            np.concatenate(parts, out=out[:n], casting="unsafe")
        out[n:] = tail
        return out

    rank = joined([np.full(len(g), i, dtype=np.int32) for i, g in enumerate(graphs)], np.int32, -1)
    local = joined([np.arange(len(g), dtype=np.int32) for g in graphs], np.int32, -1)
    dur = joined([g.dur for g in graphs], np.int64, 0)
    meas = joined([g.start - o for g, o in zip(graphs, offset_ns, strict=True)], np.int64, 0)
    kind = joined([g.kind for g in graphs], np.int8, K_WAIT)
    place = joined(parts_place, np.int32, -1)
    # task indices (the rendezvous' included) as int32: half the edges' memory
    idx = np.int32 if n + sum(len(k) for k in keys) < 2**31 else np.int64
    esrc = [(g.esrc + offset[i]).astype(idx) for i, g in enumerate(graphs)]
    edst = [(g.edst + offset[i]).astype(idx) for i, g in enumerate(graphs)]
    ew = [g.ew for g in graphs]
    ek = [g.ekind for g in graphs]
    rv = []
    r_src, r_dst = [], []
    # each rank's collectives as Python ints once (tasks in the joined arrays, times on the aligned clock)
    c_arrive = [(g.c_arrive + offset[i]).tolist() for i, g in enumerate(graphs)]
    c_xfer = [(g.c_xfer + offset[i]).tolist() for i, g in enumerate(graphs)]
    c_start = [(g.c_start - o).tolist() for g, o in zip(graphs, offset_ns, strict=True)]
    c_end = [(g.c_end - o).tolist() for g, o in zip(graphs, offset_ns, strict=True)]
    x_task: list[int] = []  # every transfer: its length and measured start, set once the loop is done
    x_dur: list[int] = []
    x_meas: list[int] = []
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
        extra_x = [c_xfer[i][j] for i, j in more]
        extra_e = [c_end[i][j] for i, j in more]
        arr = [c_arrive[i][j] for i, j in holders]
        xf = [c_xfer[i][j] for i, j in holders]
        a_meas = [c_start[i][j] for i, j in holders]
        e_meas = [c_end[i][j] for i, j in holders]
        last = max(a_meas)
        xf += extra_x
        x_task += xf
        x_dur += [max(e - last, 0) for e in e_meas + extra_e]
        x_meas += [last] * len(xf)
        r_src += arr
        r_dst += [task] * len(arr)
        r_src += [task] * len(xf)
        r_dst += xf
        i0, j0 = holders[0]
        cb = graphs[i0].c_bytes
        nbytes = float(cb[j0]) if cb is not None and j0 < len(cb) and cb[j0] == cb[j0] else None
        rv.append({"key": k, "type": graphs[i0].c_type[j0], "task": task, "arrivals": arr, "xfers": xf,
                   "ranks": [i for i, _ in holders], "measured_last": last, "bytes": nbytes})  # fmt: skip

    if x_task:
        dur[x_task] = x_dur
        meas[x_task] = x_meas
    nrv = len(rv)
    meas[n:] = [x["measured_last"] for x in rv]
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
    rendezvous, the last rank to arrive) gives the next. Where that predecessor is the task before it (a
    lane's or a thread's run: most of the path), numpy takes the whole run at once: the loop runs once per
    jump between runs."""
    n = g.dur.size
    real = np.flatnonzero(g.rank >= 0)
    v = int(real[np.argmax(s.end[real])])
    bind = s.binding
    pred = np.full(n, -1, dtype=np.int64)  # per task: its binding predecessor (-1: none)
    has = bind >= 0
    pred[has] = g.esrc[bind[has]]
    idx = np.arange(n, dtype=np.int64)
    # per task: the first task of its run (the tasks before it, back to there, each bound by the one before)
    head = np.maximum.accumulate(np.where(pred == idx - 1, 0, idx))
    del has, idx
    top, low = [], []
    while v >= 0:
        h = int(head[v])
        top.append(v)
        low.append(h)
        v = int(pred[h])
    top_a = np.array(top, dtype=np.int64)
    size = top_a - np.array(low, dtype=np.int64) + 1
    tasks = np.repeat(top_a, size) - (
        np.arange(int(size.sum()), dtype=np.int64) - np.repeat(np.cumsum(size) - size, size)
    )
    return tasks, bind[tasks].astype(np.int64)


def unexplained_gaps(g: StepGraph) -> np.ndarray:
    """Per task: how much later it started (measured) than its predecessors' measured ends (plus the edges'
    latencies) explain (ns; 0 for the rendezvous)."""
    meas_end = g.meas + g.dur
    x = meas_end[g.esrc] + g.ew
    ready = np.full(g.dur.size, np.iinfo(np.int64).min // 4, dtype=np.int64)
    np.maximum.at(ready, g.edst, x)
    ready = np.maximum(ready, g.base)
    gap = np.maximum(g.meas - ready, 0)
    gap[g.rank < 0] = 0
    return gap


def unexplained(g: StepGraph, gap: np.ndarray | None = None) -> np.ndarray:
    """Per rank: Σ over its tasks of :func:`unexplained_gaps` (ns; ``gap``: those gaps, if already read)."""
    gap = unexplained_gaps(g) if gap is None else gap
    real = g.rank >= 0
    return np.bincount(g.rank[real], weights=gap[real], minlength=len(g.graphs))


def unexplained_split(
    g: StepGraph,
    world_partial: bool = False,
    partial_groups: frozenset[str] = frozenset(),
    gap: np.ndarray | None = None,
) -> dict[str, float]:
    """The unexplained slack (µs) split by where it is: ``peers_outside`` (at the arrival or transfer of a
    collective some of whose ranks are not in the input: ``world_partial``, the replay holds part of the
    job's ranks, or the instance's group is in ``partial_groups``), ``collectives`` (at the other
    collectives' arrivals and transfers) and ``other``. The parts sum to ``unexplained_slack_us``.
    ``gap``: :func:`unexplained_gaps`, if already read."""
    gap = unexplained_gaps(g) if gap is None else gap
    coll = np.zeros(gap.size, dtype=bool)
    outside = np.zeros(gap.size, dtype=bool)
    for x in g.rendezvous:
        key = x["key"]
        group = key[0] if isinstance(key, tuple) and key and isinstance(key[0], str) else None
        mark = outside if world_partial or group in partial_groups else coll
        mark[x["arrivals"]] = True
        mark[x["xfers"]] = True
    return {
        "peers_outside": float(gap[outside].sum()) / 1000.0,
        "collectives": float(gap[coll & ~outside].sum()) / 1000.0,
        "other": float(gap[~coll & ~outside].sum()) / 1000.0,
    }


def queue_gap_us(g: StepGraph) -> float:
    """Σ of the queue gaps the graph keeps as latencies on lane-order edges (µs): the late starts their
    queue lane explains (:data:`fsdpbench.analysis.crossrank.replay_graph.QUEUE_GAP_NS`)."""
    return float(g.ew[g.ekind == K_QUEUE_GAP].sum()) / 1000.0


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
    path: np.ndarray
    """The critical path's tasks, from the end back to the origin (:func:`critical_path`)."""
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
    # time on the path per (place, kind): the tasks' lengths, and the edges' latencies (their own kind where
    # host_gap, sync or queue_gap; launch otherwise) at the place of the task they delay
    mine = p_tasks[g.rank[p_tasks] >= 0]
    keys = [g.place[mine] * nk + g.kind[mine].astype(np.int64)]
    weights = [(s.end[mine] - s.start[mine]).astype(np.float64)]
    he = p_edges >= 0
    lat_e, lat_t = p_edges[he], p_tasks[he]
    lat = (g.ew[lat_e] > 0) & (g.rank[lat_t] >= 0)
    lat_e, lat_t = lat_e[lat], lat_t[lat]
    ek = g.ekind[lat_e]
    lk = np.where(np.isin(ek, [K_GAP, K_SYNC, K_QUEUE_GAP]), ek, K_LAUNCH).astype(np.int64)
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
    rd = Reading(
        step_us=step_ns / 1000.0, ranks=ranks, critical=critical, by_phase=by_phase, slack=[],
        near_critical=[], on_path=on_path, path=p_tasks, place_us={k: v / 1000.0 for k, v in acc.items()},
    )  # fmt: skip
    if slack:
        rd.slack, rd.near_critical = read_slack(g, s, rd)
    return rd


def read_slack(g: StepGraph, s: Schedule, rd: Reading) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(slack, near_critical)`` of :class:`Reading` for ``rd``, a reading of ``s`` without them
    (``read(g, s, slack=False)``): every place's slack, from the latest starts, and the near-critical places."""
    ends = _rank_ends(g, s)
    step_end = int(ends.max())
    step_ns = step_end - int(min(gr.ws_ns - o for gr, o in zip(g.graphs, g.offset_ns, strict=True)))
    ls = latest_starts(g, s, step_end)
    slack_t = ls - s.start
    del ls
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
    path_keys = set(rd.place_us)
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
    return slack, near


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
    # per real task (they come first): its lane
    all_lanes = np.concatenate([gr.lane for gr in g.graphs]).astype(np.int64)
    # a wait is drawn from its start to the start of the task after it on its lane
    lane_key = g.rank[real].astype(np.int64) * 100_000 + all_lanes
    o = np.argsort(lane_key, kind="stable")  # by lane, then start: a lane's tasks start in index order …
    st = s.start[real][o]
    k = lane_key[o]
    if not bool(((st[1:] >= st[:-1]) | (k[1:] != k[:-1])).all()):
        o = np.lexsort((s.start[real], lane_key))  # … unless an edit took a lane-order edge away
    tasks = real[o]
    keys = lane_key[o]
    del real, lane_key, o, st, k  # the figure's temporaries are the replay's peak: freed as they go
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
    del nxt_same, prv_same, wait, arrival, idx
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
    pv = rd.path[::-1]
    pv = pv[(g.rank[pv] >= 0) & (s.end[pv] > s.start[pv])]
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
