"""The replay engine's fast paths (analysis/crossrank/replay_passes.py's contracted schedule and latest starts,
with their numpy runs, and its chunk-by-chunk topological order;
analysis/crossrank/replay_graph.py's vectorised host segments) against plain references: a task-by-task longest path
in index order, written out below, and host segments worked out by hand (and the one-event-at-a-time stack
on random nestings)."""

from __future__ import annotations

import numpy as np
import pytest

from fsdpbench.analysis.crossrank import replay as R
from fsdpbench.analysis.crossrank import replay_graph as RG

NO_BASE = np.iinfo(np.int64).min // 4


def _graph(rng: np.random.Generator, n_per_rank: int, ranks: int, negative: bool) -> R.StepGraph:
    """Random ranks of lanes (chains in index order) with random forward edges between any tasks (launches,
    joins, rendezvous-like fan-ins across ranks); every edge goes forward in index order."""
    n = n_per_rank * ranks
    rank = np.repeat(np.arange(ranks), n_per_rank)
    dur = rng.integers(0, 50, n)
    dur[rng.random(n) < 0.2] = 0
    src, dst = [], []
    for r in range(ranks):
        lo = r * n_per_rank
        cut = np.sort(rng.choice(np.arange(lo + 1, lo + n_per_rank), size=3, replace=False))
        for a, b in zip([lo, *cut.tolist()], [*cut.tolist(), lo + n_per_rank], strict=True):
            src += list(range(a, b - 1))
            dst += list(range(a + 1, b))
            if a != lo:
                src.append(lo)  # every lane released from its rank's start
                dst.append(a)
    for _ in range(n):  # forks and joins, within and across ranks
        a, b = sorted(rng.choice(n, size=2, replace=False).tolist())
        src.append(a)
        dst.append(b)
    esrc = np.array(src, dtype=np.int64)
    edst = np.array(dst, dtype=np.int64)
    ew = rng.integers(0, 5, esrc.size) * (rng.random(esrc.size) < 0.3)
    if negative:
        ew[rng.random(esrc.size) < 0.05] = -3
    base = np.full(n, NO_BASE, dtype=np.int64)
    base[np.arange(ranks) * n_per_rank] = rng.integers(0, 20, ranks)
    meas = np.arange(n, dtype=np.int64) * 10
    if rng.random() < 0.5:  # a measured order that is no topological order: Kahn's algorithm
        meas = rng.permutation(meas)
    z = np.zeros(n, dtype=np.int64)
    return R.StepGraph(
        rank=rank, local=z, dur=dur.astype(np.int64), meas=meas, kind=np.zeros(n, np.int8), place=z,
        places=[], esrc=esrc, edst=edst, ew=ew.astype(np.int64), ekind=np.zeros(esrc.size, np.int8), base=base,
        graphs=[], offset_ns=[], offset=np.arange(ranks + 1) * n_per_rank,
    )  # fmt: skip


def _reference(g: R.StepGraph, deadline: int | None) -> tuple[list[int], list[int], list[int]]:
    """Start, binding edge and latest start of every task, one task at a time in index order (every edge goes
    forward in it): a task starts at the latest of its earliest start and its predecessors' ends plus the
    latencies; the binding edge is the last edge (in edge order) reaching that start, none where the
    earliest start alone does; the latest start is the earliest of the deadline and the successors' latest
    starts less the latencies, less its length."""
    n = g.dur.size
    into: list[list[int]] = [[] for _ in range(n)]
    out: list[list[int]] = [[] for _ in range(n)]
    for e, (a, b) in enumerate(zip(g.esrc.tolist(), g.edst.tolist(), strict=True)):
        into[b].append(e)
        out[a].append(e)
    start, bind, end = [0] * n, [-1] * n, [0] * n
    for v in range(n):
        s, b = int(g.base[v]), -1
        for e in into[v]:
            x = end[int(g.esrc[e])] + int(g.ew[e])
            if x > s or (x == s and b >= 0):
                s, b = x, e
        start[v], bind[v], end[v] = s, b, s + int(g.dur[v])
    dl = max(end) if deadline is None else deadline
    ls = [0] * n
    for v in reversed(range(n)):
        f = dl
        for e in out[v]:
            f = min(f, ls[int(g.edst[e])] - int(g.ew[e]))
        ls[v] = f - int(g.dur[v])
    return start, bind, ls


@pytest.mark.parametrize("scan_min", [2, 64])
@pytest.mark.parametrize("seed", range(12))
def test_contracted_schedule_and_latest_starts_equal_a_task_by_task_longest_path(seed, scan_min, monkeypatch):
    """``scan_min``: the shortest forward run that latest_starts reads by numpy scans (2: every run of the
    random lanes; 64: almost none, the backward contraction alone)."""
    from fsdpbench.analysis.crossrank import replay_passes as RS

    monkeypatch.setattr(RS, "SCAN_MIN", scan_min)
    rng = np.random.default_rng(seed)
    g = _graph(
        rng, n_per_rank=int(rng.integers(5, 60)), ranks=int(rng.integers(1, 4)), negative=seed % 3 == 2
    )
    s = R.schedule(g)
    start, bind, _ = _reference(g, None)
    assert s.start.tolist() == start
    assert s.binding.tolist() == bind
    assert (s.end - s.start).tolist() == g.dur.tolist()
    deadline = int(s.end.max())
    _, _, ls = _reference(g, deadline)
    assert R.latest_starts(g, s, deadline).tolist() == ls
    bare = R.Schedule(s.start, s.end, s.binding, s.order)  # the edge masks found again, not the schedule's
    assert R.latest_starts(g, bare, deadline).tolist() == ls
    pos = np.empty(g.dur.size, dtype=np.int64)
    pos[s.order] = np.arange(g.dur.size)
    assert (pos[g.esrc] < pos[g.edst]).all()  # the order is topological
    # the critical path: from the task ending last (the first of them), each task's binding edge back
    v = int(np.argmax(s.end))
    walk = []
    while v >= 0:
        walk.append((v, bind[v]))
        v = int(g.esrc[bind[v]]) if bind[v] >= 0 else -1
    tasks, edges = R.critical_path(g, s)
    assert list(zip(tasks.tolist(), edges.tolist(), strict=True)) == walk


@pytest.mark.parametrize("seed", range(12))
def test_ranks_whose_clocks_disagree_are_ordered_chunk_by_chunk(seed, monkeypatch):
    """Each rank's measured order is its index order, but the ranks' clocks are shifted so that edges across
    ranks go backward in the measured order (a rank's end before another's arrival): the schedule orders each
    rank's tasks as measured and only the chunks between arriving cross-rank edges by Kahn's algorithm
    (``_by_chunks``), and replays exactly what the task-by-task reference computes."""
    from fsdpbench.analysis.crossrank import replay_passes as RS

    monkeypatch.setattr(RS, "SCAN_MIN", 2 + seed % 4)
    rng = np.random.default_rng(100 + seed)
    ranks = int(rng.integers(2, 5))
    g = _graph(rng, n_per_rank=int(rng.integers(5, 60)), ranks=ranks, negative=seed % 3 == 2)
    shift = rng.permutation(ranks) * 10 * g.dur.size  # later ranks may run on an earlier clock
    g.meas = np.arange(g.dur.size, dtype=np.int64) * 10 - shift[g.rank]
    s = R.schedule(g)
    start, bind, _ = _reference(g, None)
    assert s.start.tolist() == start
    assert s.binding.tolist() == bind
    deadline = int(s.end.max())
    assert R.latest_starts(g, s, deadline).tolist() == _reference(g, deadline)[2]
    pos = np.empty(g.dur.size, dtype=np.int64)
    pos[s.order] = np.arange(g.dur.size)
    assert (pos[g.esrc] < pos[g.edst]).all()
    # the chunk path itself (not Kahn's fallback) gives a topological order of the contracted graph
    c = RS.contract(g)
    n = c.base.size
    order = np.lexsort((np.arange(n), c.tier, c.meas))
    cross = c.group[c.esrc] != c.group[c.edst]
    if cross.any() and not RS._forward(order, c.esrc, c.edst):
        out = RS._by_chunks(order, np.lexsort((np.arange(n), c.tier, c.own)), c.esrc, c.edst, c.group)
        assert out is not None
        assert sorted(out.tolist()) == list(range(n))
        assert RS._forward(out, c.esrc, c.edst)


@pytest.mark.parametrize("scan_min", [2, 64])
def test_a_lane_run_keeps_the_loops_binding_rule(scan_min, monkeypatch):
    """Tasks 2-5 are a lane run (each after task 0 and after the one before it); task 3 has an earliest start
    (30) that its lane predecessor's end reaches exactly: the loop keeps no binding edge there (the earliest
    start alone explains the start), and the run's numpy replay must do the same."""
    from fsdpbench.analysis.crossrank import replay_passes as RS

    monkeypatch.setattr(RS, "SCAN_MIN", scan_min)
    n = 6
    base = np.full(n, NO_BASE, dtype=np.int64)
    base[0], base[3] = 0, 30
    esrc = np.array([0, 1, 2, 3, 4, 0, 0, 0, 0])
    edst = np.array([1, 2, 3, 4, 5, 2, 3, 4, 5])
    z = np.zeros(n, dtype=np.int64)
    g = R.StepGraph(
        rank=z, local=z, dur=np.full(n, 10, np.int64), meas=np.arange(n) * 10, kind=np.zeros(n, np.int8), place=z,
        places=[], esrc=esrc, edst=edst, ew=np.zeros(esrc.size, np.int64), ekind=np.zeros(esrc.size, np.int8),
        base=base, graphs=[], offset_ns=[], offset=np.array([0, n]),
    )  # fmt: skip
    s = R.schedule(g)
    start, bind, _ = _reference(g, None)
    assert start == [0, 10, 20, 30, 40, 50]
    assert bind == [-1, 0, 1, -1, 3, 4]  # task 3: its earliest start, not the edge from task 2
    assert s.start.tolist() == start
    assert s.binding.tolist() == bind


def test_a_cycle_is_still_an_error():
    """Two ranks, each waiting for the other's later task: no order exists, and the schedule says so."""
    z = np.zeros(4, dtype=np.int64)
    base = np.array([0, NO_BASE, 0, NO_BASE])
    g = R.StepGraph(
        rank=np.array([0, 0, 1, 1]), local=z, dur=np.ones(4, np.int64), meas=np.array([0, 10, 5, 15]),
        kind=np.zeros(4, np.int8), place=z, places=[], esrc=np.array([0, 2, 1, 3]), edst=np.array([1, 3, 2, 0]),
        ew=np.zeros(4, np.int64), ekind=np.zeros(4, np.int8), base=base, graphs=[], offset_ns=[],
        offset=np.array([0, 2, 4]),
    )  # fmt: skip
    with pytest.raises(R.CycleError):
        R.schedule(g)


# ------------------------------------------------------------------------------------------ host segments
C_NONE, C_OP, C_COMPUTE, C_LAUNCH, C_SYNC = range(5)


def _segments(events: list[tuple[int, int, int, int]], lo: int, hi: int) -> list[tuple[int, int, int]]:
    ev = sorted(events, key=lambda x: (x[0], -x[1]))
    arr = [np.array([x[i] for x in ev], dtype=np.int64) for i in range(4)]
    s, c, o = RG._host_segments(arr[0], arr[1], arr[2].astype(np.int8), arr[3], lo, hi)
    return list(zip(s.tolist(), c.tolist(), o.tolist(), strict=True))


def test_host_segments_by_hand():
    # compute op 7 [0, 100) holding a launch [10, 20) and a nested compute op 8 [30, 60); a sync [120, 150)
    # with a zero-length compute at 130; a host gap to hi = 200
    ev = [(0, 100, C_COMPUTE, 7), (10, 20, C_LAUNCH, -1), (30, 60, C_COMPUTE, 8), (120, 150, C_SYNC, -1),
          (130, 130, C_COMPUTE, 9)]  # fmt: skip
    assert _segments(ev, 0, 200) == [
        (0, C_COMPUTE, 7),  # the outermost compute op names the time, not the nested one
        (10, C_LAUNCH, -1),
        (20, C_COMPUTE, 7),
        (100, C_NONE, -1),
        (120, C_SYNC, -1),  # the zero-length event inside the sync changes nothing
        (150, C_NONE, -1),
    ]
    # two launch calls back to back: the second starts a segment of its own (the stack closes the first, then
    # opens the second at 20: two tasks, one per call, as the loop has always cut them)
    assert _segments([(10, 20, C_LAUNCH, -1), (20, 30, C_LAUNCH, -1)], 0, 40) == [
        (0, C_NONE, -1), (10, C_LAUNCH, -1), (20, C_LAUNCH, -1), (30, C_NONE, -1),
    ]  # fmt: skip
    # a zero-length sync inside a host gap: a segment at its time, back to the gap's state
    assert _segments([(10, 10, C_SYNC, -1)], 0, 40) == [(0, C_NONE, -1), (10, C_NONE, -1)]


def _random_nesting(rng: np.random.Generator, laminar: bool) -> list[tuple[int, int, int, int]]:
    events: list[tuple[int, int, int, int]] = []

    def fill(a: int, b: int, depth: int) -> None:
        t = a
        while t < b and depth < 4:
            s = int(rng.integers(t, b + 1))
            e = int(rng.integers(s, b + 1)) if rng.random() < 0.9 else s
            cls = int(rng.integers(1, 5))
            events.append((s, e, cls, int(rng.integers(0, 3)) if cls == C_COMPUTE else -1))
            if e > s:
                fill(s, e, depth + 1)
            t = e + int(rng.integers(0, 3))

    fill(0, 200, 0)
    if not laminar:  # a few calls overlapping their neighbours
        for _ in range(3):
            s = int(rng.integers(0, 190))
            events.append((s, s + int(rng.integers(1, 30)), int(rng.integers(1, 5)), -1))
    return events


@pytest.mark.parametrize("seed", range(40))
def test_vectorised_host_segments_equal_the_stack(seed):
    rng = np.random.default_rng(seed)
    ev = sorted(_random_nesting(rng, laminar=seed % 4 != 0), key=lambda x: (x[0], -x[1]))
    arr = [np.array([x[i] for x in ev], dtype=np.int64) for i in range(4)]
    lo = int(rng.integers(-5, 20))  # an event may start before the lane's first instant (the stack's rule)
    args = (arr[0], arr[1], arr[2].astype(np.int8), arr[3], lo, 220)
    fast = RG._host_segments(*args)
    loop = RG._host_segments_loop(*args)
    for a, b in zip(fast, loop, strict=True):
        assert a.tolist() == b.tolist()


@pytest.mark.parametrize("seed", range(40))
def test_laminar_is_the_stacks_answer(seed):
    """``_laminar`` against a stack over the events of positive length in (start, -end) order: an event
    that starts inside the one on top of the stack (after popping those ended by its start) must end by
    that one's end."""
    rng = np.random.default_rng(300 + seed)
    ev = sorted(
        ((s, e) for s, e, _, _ in _random_nesting(rng, laminar=seed % 2 == 0) if e > s),
        key=lambda x: (x[0], -x[1]),
    )
    stack: list[int] = []
    nested = True
    for s, e in ev:
        while stack and stack[-1] <= s:
            stack.pop()
        nested &= not stack or e <= stack[-1]
        stack.append(e)
    starts, ends = (np.array([x[i] for x in ev], dtype=np.int64) for i in range(2))
    assert RG._laminar(starts, ends) is nested


def test_median_gives_numpys_numbers():
    """``replay_excess.median`` (no numpy.ma import) equals ``np.median``: per column and of a list, odd and
    even counts."""
    from fsdpbench.analysis.crossrank.replay_excess import median

    rng = np.random.default_rng(7)
    for _ in range(300):
        a = rng.random((int(rng.integers(1, 8)), int(rng.integers(1, 5)))) * 10.0 ** int(rng.integers(-3, 9))
        assert median(a, axis=0).tolist() == np.median(a, axis=0).tolist()
        col = a[:, 0].tolist()
        assert median(col) == float(np.median(col))


def test_the_figures_cap_keeps_what_a_stable_sort_keeps():
    """The figure keeps its longest segments by a partition: the same positions as the first k of a stable
    sort by decreasing length (ties to the earlier), on random lengths with many ties."""
    from fsdpbench.analysis.crossrank.replay_schedule import _longest

    rng = np.random.default_rng(0)
    for _ in range(300):
        x = rng.integers(0, 5, int(rng.integers(0, 50)))
        k = int(rng.integers(1, 20))
        assert _longest(x, k).tolist() == sorted(np.argsort(-x, kind="stable")[:k].tolist())


def test_shared_jobs_give_each_result_in_order_and_a_dead_childs_job_runs_here():
    """fanout.share (the replay's reading passes beside a forked child): every job's result in the jobs'
    order, whichever process ran it; a job whose process dies (here: any but this one) is run again here."""
    import os

    from fsdpbench.analysis import fanout

    me = os.getpid()

    def dies_elsewhere() -> str:
        if os.getpid() != me:
            os._exit(3)
        return "here"

    jobs = [lambda: 1, dies_elsewhere, lambda: [2, 3], dies_elsewhere, lambda: {"a": 4}]
    assert fanout.share(jobs, 2) == [1, "here", [2, 3], "here", {"a": 4}]
    assert fanout.share(jobs, 1) == [1, "here", [2, 3], "here", {"a": 4}]


def test_replay_step_with_a_forked_child_equals_it_in_one_process(tmp_path, monkeypatch):
    """The ``replay`` object (with what-ifs) is the same whether its reading passes ran beside a forked child
    or not (on two ranks of the synthetic GPU trace)."""
    import pickle

    import orjson

    from fsdpbench.analysis import fanout
    from fsdpbench.analysis.pipeline import analyze
    from fsdpbench.trace.synthetic import make_trace, write_trace

    for r in range(2):
        trace = make_trace(rank=r, world_size=2, device_events=600, seed=3, host_ops=True)
        write_trace(tmp_path / f"rank{r}.json.gz", trace)
    res = analyze([tmp_path], workers=1, replay=False)  # the graphs are built from the traces by replay_step
    kept = pickle.dumps(res)
    edits = ["scale:all_gather:0.5", "straggler:remove"]
    one = R.replay_step(pickle.loads(kept), edits)
    monkeypatch.setattr(R, "SHARE_MIN_TASKS", 0)  # a small graph: shared all the same
    forked: list[int] = []
    two = R.replay_step(
        pickle.loads(kept), edits, share=lambda jobs: forked.append(1) or fanout.share(jobs, 2)
    )
    assert forked
    assert one is not None and one["figure"]["lanes"] and one["slack"]
    assert orjson.dumps(one, option=orjson.OPT_SORT_KEYS) == orjson.dumps(two, option=orjson.OPT_SORT_KEYS)
