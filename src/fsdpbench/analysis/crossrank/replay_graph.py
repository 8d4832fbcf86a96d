"""One rank's part of the step's dependency graph, built from its event table alone (docs/replay.md).

Built where the rank is measured (the per-rank worker, :func:`fsdpbench.analysis.pipeline.rank_metrics`)
and shipped back as a :class:`RankGraph`: numpy arrays of tasks and zero-or-latency edges, no event
table. The cross-rank part (one rendezvous per collective instance) and the replay are in
:mod:`fsdpbench.analysis.crossrank.replay`.

What a rank's graph holds (times are the rank's own clock, ns):

* **Host threads** (lanes with host operators): the thread's time from its first operator (the
  training thread: from the step's start) to its last (the training thread: to the ``ProfilerStep``'s
  end) cut into consecutive tasks in program order, every instant in exactly one: ``compute`` (inside a
  CPU compute operator), ``sync`` (inside a stream/device/event synchronise call), ``launch`` (inside a
  kernel/collective launch call or any other operator: the host's dispatch work), ``host_gap`` (no
  operator open: Python, the framework, a ``time.sleep``). Tasks are cut where a device task was
  launched, where a blocking call returned, and where one of the lane's (unit, phase) ranges opens or
  closes (each task has one place: the range it runs in).
* **Queue lanes** (CUDA/NPU streams; gloo's worker threads on CPU): their outermost device tasks in
  lane order, each after its launch (the host task that ended where the launch call began; a launch
  latency on that edge where the lane was idle at the launch) and after the lane's previous task (with
  the measured gap as a fixed latency, kind ``queue_gap``, where the lane was busy at the launch and
  the gap is under :data:`QUEUE_GAP_NS` and no inferred cross-lane wait explains the start). A
  collective is two tasks: its *arrival* (length 0) and its *transfer* (its length is set across ranks:
  the instance's measured transfer on this rank).
* **Blocking waits**: a host thread that waits for a collective (CPU/gloo: the host task in progress on
  the launching thread when the collective's worker span ends, when it is not compute) or for device work
  (a synchronise call: the latest device task ending inside it) is cut there; the part before is a
  ``wait`` (or ``sync``) task of length 0 that ends only when the awaited task has ended (its real length,
  from the thread's previous task, is what the replay computes; its measured start is the awaited end), so
  what follows, a launch from that point included, comes after it. Waiting is never an input.
* **Inferred cross-lane waits**: a device task that starts later than its launch and its lane's previous
  task explain, and within :data:`INFER_WINDOW_NS` after a task on another lane of the rank ended, waits
  for that task (a stream waiting on an event recorded on another stream: the trace does not link them);
  within :data:`WAITED_WINDOW_NS` where its launching thread called a stream-wait before launching it and no
  queue gap explains its start.
* A lane's first task with no predecessor (a thread the trace shows no trigger for) is released at its
  measured offset from the step's start.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fsdpbench.trace.table import EventTable

KINDS = ["compute", "transfer", "wait", "host_gap", "launch", "sync", "queue_gap"]
"""Task kinds, in the order of their codes (``queue_gap`` is an edge's only: no task has it)."""
K_COMPUTE, K_TRANSFER, K_WAIT, K_GAP, K_LAUNCH, K_SYNC, K_QUEUE_GAP = range(7)
_NOT_OPS = ("fsdpbench::", "ProfilerStep#", "Optimizer.")
"""Ranges that mark where the program is, not operators (their own time is host time between operators)."""
_SYNC_TASKS = ("device_synchronize", "stream_synchronize", "event_synchronize")
_LAUNCH_TASKS = ("kernel_launch", "launch_ffts")
# host-segment classes, by priority (the highest class open wins)
_C_NONE, _C_OP, _C_COMPUTE, _C_LAUNCH, _C_SYNC = range(5)
INFER_WINDOW_NS = 50_000
"""A device task that starts later than its launch and its lane explain, within this much after a task on
another lane of its rank ended, is taken to have waited for that task (an inferred edge)."""
WAITED_WINDOW_NS = 1_500_000
"""A device task that starts later than its launch and its lane explain, whose launch the launching thread preceded
with a stream-wait call (``cudaStreamWaitEvent``, ``hipStreamWaitEvent``, ``aclrtStreamWaitEvent``) since its
lane's previous launch, and that no other rule explains, waits for the task on another lane of its rank that ended
last before it, within this much (an inferred edge: the call names neither the event nor the stream it waits
for, and a Kineto trace without ``cudaEventRecord`` calls cannot link them; docs/replay.md)."""
_STREAM_WAIT = re.compile(r"^(?:\w+@)?(?:cuda|hip|cu|aclrt)StreamWaitEvent$", re.IGNORECASE)
QUEUE_GAP_NS = 1_500_000
"""A device task that starts later than its launch explains, less than this after its queue lane's previous
task ended, and not explained by an inferred cross-lane wait, keeps that gap as a fixed latency on its
lane-order edge (kind ``queue_gap``: the stream's dispatch gap). HTA's critical path keeps the same gap as a
``KERNEL_KERNEL_DELAY`` edge below ``KERNEL_KERNEL_DELAY_THRESHOLD_US`` = 1,500 µs ("anything beyond 1.5ms
probably indicates an unrecognized dependency"; hta/analyzers/critical_path_analysis.py, commit ce386f4,
July 2025; HTA 0.5.0 keeps it unbounded)."""
_CLASS_KIND = np.array([K_GAP, K_LAUNCH, K_COMPUTE, K_LAUNCH, K_SYNC], dtype=np.int8)


@dataclass
class RankGraph:
    """One rank's tasks and edges (module docstring). Node 0 is the step's start (length 0)."""

    rank: int
    ws_ns: int
    """The step window's start and end (the rank's clock): the measured step is ``we_ns - ws_ns``."""
    we_ns: int
    dur: np.ndarray
    """Per task: length (ns, int64; collective transfers 0 until set across ranks)."""
    start: np.ndarray
    """Per task: measured start (ns, the rank's clock)."""
    kind: np.ndarray
    """Per task: code into :data:`KINDS`."""
    lane: np.ndarray
    """Per task: index into ``lanes``."""
    place: np.ndarray
    """Per task: index into ``places`` ((unit, phase))."""
    op: np.ndarray
    """Per task: index into ``ops`` (the compute operator or device kernel; -1: none)."""
    lanes: list[str]
    places: list[tuple[str, str]]
    ops: list[str]
    esrc: np.ndarray
    """Edges (int64): ``esrc`` → ``edst`` with a latency ``ew`` (ns) of kind ``ekind``."""
    edst: np.ndarray
    ew: np.ndarray
    ekind: np.ndarray
    c_arrive: np.ndarray
    """Per collective (``collective_events``' order): its arrival task, its transfer task, its measured
    start and end (the rank's clock) and type."""
    c_xfer: np.ndarray
    c_start: np.ndarray
    c_end: np.ndarray
    c_type: list[str] = field(default_factory=list)
    c_bytes: np.ndarray | None = None
    """Per collective: its message size (bytes, NaN unknown)."""
    main_lane: int = 0
    notes: list[str] = field(default_factory=list)
    step_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """The start of each chosen step's ``ProfilerStep`` span (the rank's clock, ascending): a task belongs to
    the last step that starts no later than it (the first step before them all); empty: one step."""

    def __len__(self) -> int:
        return len(self.lane)

    def slim(self) -> RankGraph:
        """A copy without the arrays that the joined graph holds again (lengths, starts, places, edges): what
        the replay reads of a rank once it is joined (lanes, ops, kinds, collectives, names)."""
        none = np.empty(0, dtype=np.int64)
        return dataclasses.replace(
            self, dur=none, start=none, place=none, esrc=none, edst=none, ew=none, ekind=none
        )


def _unique_sorted(x: np.ndarray) -> np.ndarray:
    """``np.unique(x)`` by a sort (numpy 2's ``np.unique`` imports numpy.ma on first use: ~30 ms a worker)."""
    x = np.sort(x, kind="stable")
    keep = np.ones(x.size, dtype=bool)
    keep[1:] = x[1:] != x[:-1]
    return x[keep]


def _unique_inverse(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(x, return_inverse=True)``: for non-negative integers whose largest is not far above their
    count by a table of the values present (no sort), else by a sort (see :func:`_unique_sorted`)."""
    top = int(x.max()) if x.size else -1
    if x.size and x.dtype.kind in "iu" and int(x.min()) >= 0 and top < 4 * x.size + 4096:
        present = np.zeros(top + 1, dtype=bool)
        present[x] = True
        return np.flatnonzero(present).astype(x.dtype, copy=False), (np.cumsum(present) - 1)[x]
    u = _unique_sorted(x)
    return u, np.searchsorted(u, x).astype(np.int64)


def _isin(a: np.ndarray, values: object) -> np.ndarray:
    """``np.isin(a, values)`` by a binary search (numpy 2's ``np.isin`` may call ``np.unique``)."""
    v = _unique_sorted(np.asarray(values, dtype=np.int64).ravel())
    a = np.asarray(a)
    if not v.size:
        return np.zeros(a.shape, dtype=bool)
    i = np.minimum(np.searchsorted(v, a), v.size - 1)
    return v[i] == a


def _by_start(rows: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``rows`` in (start, -end) order, ties in their order (``rows[np.lexsort((-ends, starts))]``); unchanged,
    without a sort, where they are in that order already (a table's rows are)."""
    if starts.size < 2 or bool(
        ((starts[1:] > starts[:-1]) | ((starts[1:] == starts[:-1]) & (ends[1:] <= ends[:-1]))).all()
    ):
        return rows
    return rows[np.lexsort((-ends, starts))]


def _laminar(starts: np.ndarray, ends: np.ndarray) -> bool:
    """Whether events of positive length (in (start, -end) order) nest properly as the stack of
    :func:`_host_segments_loop` takes them (an event ending where another starts has closed first): every
    close pairs, by depth, with its own open. The opens (in index order) and the closes (by end, the last
    opened first at one end) are two sorted runs, merged by one stable sort, closes first at one time."""
    m = starts.size
    if m < 2:
        return True
    closes = (m - 1) - np.argsort(ends[::-1], kind="stable")  # by end, the later index first at one end
    merged = np.argsort(np.concatenate([ends[closes], starts]), kind="stable")  # two runs: one merge
    is_open = merged >= m
    depth = np.cumsum(np.where(is_open, 1, -1))
    if depth.min() < 0:
        return False
    o_level = depth[is_open]  # per open, in index order
    c_level = depth[~is_open] + 1  # per close, in the closes' order
    if int(depth.max()) < 1 << 15:  # the nesting depth: a radix sort
        o_level, c_level = o_level.astype(np.uint16), c_level.astype(np.uint16)
    return bool((np.argsort(o_level, kind="stable") == closes[np.argsort(c_level, kind="stable")]).all())


def _host_segments(
    starts: np.ndarray, ends: np.ndarray, cls: np.ndarray, op: np.ndarray, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The lane's time [lo, hi) as consecutive segments (starts, class, op) from its nested events (in
    (start, -end) order): each instant takes the highest class among the events open there, and the op
    of the outermost open event of that class.

    Vectorised where the events nest properly (the usual case), with exactly the segments of
    :func:`_host_segments_loop` (the reference; used where they do not): a segment starts at an event's
    start or end t where the class before t differs from the class of the events open across t, after t,
    or of a zero-length event at t (the loop's intermediate states there), and takes the state after t."""
    if (ends < starts).any() or (starts.size and int(starts.min()) < lo):
        return _host_segments_loop(starts, ends, cls, op, lo, hi)
    nz = ends > starts
    s, e, c, o = starts[nz], ends[nz], cls[nz], op[nz]
    if not _laminar(s, e):
        return _host_segments_loop(starts, ends, cls, op, lo, hi)
    pts = _unique_sorted(np.concatenate([np.array([lo], dtype=np.int64), starts, ends]))
    npt = pts.size
    ks = np.searchsorted(pts, s)
    ke = np.searchsorted(pts, e)
    after = np.zeros(npt, dtype=np.int8)  # highest class open on [pts[k], pts[k + 1])
    before = np.zeros(npt, dtype=np.int8)  # … on the interval ending at pts[k]
    across = np.zeros(npt, dtype=np.int8)  # … of the events open across pts[k] (started before, ending after)
    for cl in range(_C_OP, _C_SYNC + 1):  # by rising class: the highest open one wins
        sel = c == cl
        if not sel.any():
            continue
        n_end = np.bincount(ke[sel], minlength=npt)[:npt]
        cnt = np.cumsum(np.bincount(ks[sel], minlength=npt)[:npt] - n_end)
        prev = np.concatenate([[0], cnt[:-1]])
        after[cnt > 0] = cl
        before[prev > 0] = cl
        across[prev - n_end > 0] = cl
    zero = np.zeros(npt, dtype=np.int8)
    if not nz.all():
        np.maximum.at(zero, np.searchsorted(pts, starts[~nz]), cls[~nz])
    seg = (across != before) | (after != before) | (zero > after)
    seg[0] = True
    seg_o = np.full(npt, -1, dtype=np.int64)
    at = np.flatnonzero(after == _C_COMPUTE)
    if at.size:  # the outermost open compute event: one not inside an earlier one
        comp = c == _C_COMPUTE
        cs, ce, co = s[comp], e[comp], o[comp]
        outer = np.ones(cs.size, dtype=bool)
        outer[1:] = np.maximum.accumulate(ce)[:-1] <= cs[1:]
        j = np.searchsorted(cs[outer], pts[at], side="right") - 1
        seg_o[at] = co[outer][j]
    keep = seg & (pts >= lo) & (pts < hi)
    keep[0] = True
    return pts[keep], after[keep], seg_o[keep]


def _host_segments_loop(
    starts: np.ndarray, ends: np.ndarray, cls: np.ndarray, op: np.ndarray, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_host_segments` by a stack over the events, one at a time (any nesting): each event's start
    and each popped event's end sets the state there (the last segment's, where nothing later started)."""
    import array

    # typed arrays, not lists: 17 bytes a segment instead of ~100 (a rank of 100k events)
    seg_s = array.array("q")
    seg_c = array.array("b")
    seg_o = array.array("q")
    cur_s, cur_c, cur_o = lo, _C_NONE, -1  # the last segment, not yet stored
    st_e: list[int] = []  # the stack: each open event's end, and the prefix max class and its op
    st_c: list[int] = []
    st_o: list[int] = []
    for s, e, c, o in zip(starts.tolist(), ends.tolist(), cls.tolist(), op.tolist(), strict=True):
        while st_e and st_e[-1] <= s:
            t = st_e.pop()
            st_c.pop()
            st_o.pop()
            pc, po = (st_c[-1], st_o[-1]) if st_c else (_C_NONE, -1)
            if t <= cur_s:
                cur_c, cur_o = pc, po
            elif cur_c != pc or cur_o != po:
                seg_s.append(cur_s)
                seg_c.append(cur_c)
                seg_o.append(cur_o)
                cur_s, cur_c, cur_o = t, pc, po
        if st_c and c <= st_c[-1]:
            pc, po = st_c[-1], st_o[-1]
        else:
            pc, po = c, o
        st_e.append(e)
        st_c.append(pc)
        st_o.append(po)
        if s <= cur_s:
            cur_c, cur_o = pc, po
        elif cur_c != pc or cur_o != po:
            seg_s.append(cur_s)
            seg_c.append(cur_c)
            seg_o.append(cur_o)
            cur_s, cur_c, cur_o = s, pc, po
    # the events still open, popped as above (written out again: a sentinel event past every end, to let the
    # loop do it, made this loop ~5 % slower, and it is the replay's largest cost on overlapping launches)
    while st_e:
        t = st_e.pop()
        st_c.pop()
        st_o.pop()
        pc, po = (st_c[-1], st_o[-1]) if st_c else (_C_NONE, -1)
        if t <= cur_s:
            cur_c, cur_o = pc, po
        elif cur_c != pc or cur_o != po:
            seg_s.append(cur_s)
            seg_c.append(cur_c)
            seg_o.append(cur_o)
            cur_s, cur_c, cur_o = t, pc, po
    seg_s.append(cur_s)
    seg_c.append(cur_c)
    seg_o.append(cur_o)
    s_arr = np.frombuffer(seg_s, dtype=np.int64)
    keep = (s_arr >= lo) & (s_arr < hi)
    keep[0] = True
    return (
        s_arr[keep],
        np.frombuffer(seg_c, dtype=np.int8)[keep],
        np.frombuffer(seg_o, dtype=np.int64)[keep],
    )


def _stream_waited(
    t: EventTable, host_ev: np.ndarray, lane_codes: np.ndarray, q_ll: np.ndarray, q_lt: np.ndarray,
    qlanes: np.ndarray, which: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Per queue task ``which``: whether its launching thread called a stream-wait (:data:`_STREAM_WAIT`) after
    its previous launch onto the same queue lane and before this one (``q_ll``/``q_lt``/``qlanes``: every queue
    task's launch lane, launch time and lane)."""
    out = np.zeros(which.size, dtype=bool)
    codes = [i for i, c in enumerate(t.name.categories) if _STREAM_WAIT.match(str(c))]
    if not which.size or not codes:
        return out
    calls = np.flatnonzero(host_ev & _isin(t.name.codes, codes))
    call_starts = {lane: t.start_ns[calls[lane_codes[calls] == lane]] for lane in set(q_ll[which].tolist())}
    for i, k in enumerate(which.tolist()):
        lane, at = int(q_ll[k]), int(q_lt[k])
        if lane < 0:
            continue
        before = (q_ll == lane) & (qlanes == qlanes[k]) & (q_lt < at)
        since = int(q_lt[before].max()) if before.any() else np.iinfo(np.int64).min
        starts = call_starts[lane]
        out[i] = bool(((starts > since) & (starts < at)).any())
    return out


def _step_window(t: EventTable, windows: Any, chosen: list[int]) -> tuple[int, int, int]:
    """(start, end, host end) of the chosen steps' window, as the analysis takes it (the host
    ``ProfilerStep`` span widened to the device work of those steps)."""
    sel_w = _isin(windows.step, chosen) if chosen else np.zeros(len(windows), dtype=bool)
    dev = t.device & ~t.orphan & (_isin(t.step, chosen) if chosen else True)
    starts = windows.start_ns[sel_w].tolist()
    ends = windows.end_ns[sel_w].tolist()
    host_end = max(ends) if ends else None
    if dev.any():
        starts.append(int(t.start_ns[dev].min()))
        ends.append(int(t.end_ns[dev].max()))
    if not starts:
        return int(t.start_ns.min()), int(t.end_ns.max()), int(t.end_ns.max())
    return min(starts), max(ends), int(host_end if host_end is not None else max(ends))


def build_rank_graph(trace: Any, chosen: list[int], ranges: Any = None) -> RankGraph | None:
    """The graph of one rank (``trace``: a :class:`fsdpbench.trace.RankTrace`) over the chosen steps'
    window; ``ranges``: its (unit, phase) windows (:func:`fsdpbench.analysis.rank.unit_ranges.find_ranges`).
    None when the table has no event in the window."""
    from fsdpbench.analysis.rank import attribution, unit_ranges
    from fsdpbench.trace.kineto_cpu import _is_operator, outermost

    t: EventTable = trace.table
    if not len(t):
        return None
    ranges = unit_ranges.find_ranges(t) if ranges is None else ranges
    ws, we, host_end = _step_window(t, trace.windows, chosen)
    cpu = trace.mode == "cpu"
    in_win = (t.start_ns >= ws) & (t.start_ns < we) & ~(t.orphan & t.device)
    lane_codes = t.lane.codes.astype(np.int64)
    is_comm = t.category.mask("comm")
    queue_ev = t.device & in_win & t.category.mask("compute", "comm", "memcpy", "memset", "sync")
    if cpu:
        comm_lanes = set(lane_codes[queue_ev & is_comm].tolist())
        comp_lanes = set(lane_codes[t.device & t.category.mask("compute")].tolist())
        queue_lanes = comm_lanes - comp_lanes
    else:
        queue_lanes = set(lane_codes[queue_ev].tolist())
    is_queue_lane = _isin(lane_codes, sorted(queue_lanes))
    queue_ev &= is_queue_lane
    # the training thread: the one holding the ProfilerStep spans, else the most host events
    names = t.name.categories
    step_codes = [i for i, c in enumerate(names) if str(c).startswith("ProfilerStep#")]
    host_ev = in_win & ~is_queue_lane
    step_rows = np.flatnonzero(_isin(t.name.codes, step_codes) & ~t.device)
    if step_rows.size:
        main = int(np.bincount(lane_codes[step_rows]).argmax())
    elif host_ev.any():
        main = int(np.bincount(lane_codes[host_ev]).argmax())
    else:
        main = -1

    # class of each event on host lanes
    is_op_name = np.array(
        [_is_operator(str(c)) and not str(c).startswith(_NOT_OPS) for c in names] + [False]
    )[t.name.codes]
    cls = np.full(len(t), _C_NONE, dtype=np.int8)
    cls[is_op_name] = _C_OP
    cls[t.device & t.category.mask("compute")] = _C_COMPUTE
    cls[t.task.mask(*_LAUNCH_TASKS) | (~t.device & (t.collective.codes != 0))] = _C_LAUNCH
    cls[t.task.mask(*_SYNC_TASKS) | (~t.device & t.category.mask("sync"))] = _C_SYNC

    # queue tasks: outermost device events of each queue lane, with their launch points
    q = outermost(np.flatnonzero(queue_ev), t.start_ns, t.end_ns, lane_codes)
    q = q[np.lexsort((t.start_ns[q], lane_codes[q]))]
    if cpu:
        ll, lt, _ = attribution.launch_points(t, "cpu", ranges)
    else:
        ll, lt = t.launch_lane.astype(np.int64), t.launch_ns
    q_ll, q_lt = ll[q], lt[q]
    own = q_ll == lane_codes[q]
    q_ll = np.where(own, -1, q_ll)  # no launch recorded: released at its offset

    host_lanes = sorted(set(lane_codes[host_ev].tolist()) | ({main} if main >= 0 else set()))
    # joins: (lane, time, queue task position) where a host thread waited for a queue task
    joins: list[tuple[int, int, int]] = []
    seg_by_lane: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, int]] = {}
    for lane in host_lanes:
        rows = np.flatnonzero(host_ev & (lane_codes == lane))
        rows = _by_start(rows, t.start_ns[rows], t.end_ns[rows])
        if lane == main:
            lo, hi = ws, max(host_end, int(t.end_ns[rows].max()) if rows.size else host_end)
        elif rows.size:
            lo, hi = int(t.start_ns[rows].min()), int(t.end_ns[rows].max())
        else:
            continue
        ss, sc, so = _host_segments(
            t.start_ns[rows],
            t.end_ns[rows],
            cls[rows],
            np.where(cls[rows] == _C_COMPUTE, t.name.codes[rows], -1),
            lo,
            hi,
        )
        seg_by_lane[lane] = (ss, sc, so, hi)
    q_end = t.end_ns[q]
    if cpu:  # a launching thread blocked until its collective's worker span ended
        for k in np.flatnonzero(is_comm[q] & (q_ll >= 0)).tolist():
            lane = int(q_ll[k])
            if lane not in seg_by_lane:
                continue
            ss, sc, _, hi = seg_by_lane[lane]
            e = int(q_end[k])
            j = int(np.searchsorted(ss, e, side="left")) - 1  # the segment running just before e
            if j >= 0 and e < hi and sc[j] != _C_COMPUTE and e > int(q_lt[k]):
                joins.append((lane, e, k))
    else:  # a synchronise call returned after the latest device task ending inside it
        order = np.argsort(q_end, kind="stable")
        ends_sorted = q_end[order]
        for lane, (ss, sc, _, hi) in seg_by_lane.items():
            seg_e = np.append(ss[1:], hi)
            for j in np.flatnonzero(sc == _C_SYNC).tolist():
                a, b = int(ss[j]), int(seg_e[j])
                i = int(np.searchsorted(ends_sorted, b, side="right")) - 1
                if i >= 0 and ends_sorted[i] > a:
                    k = int(order[i])
                    if q_ll[k] < 0 or q_lt[k] <= a:
                        joins.append((lane, int(ends_sorted[i]), k))

    # host tasks: the segments cut at launch points and join points, neighbours of one class merged
    lanes_list = [str(c) for c in t.lane.categories]
    place_index: dict[tuple[str, str], int] = {}
    units = np.array([*ranges.unit, attribution.OUTSIDE], dtype=object)
    phases = np.array([*ranges.phase, attribution.OUTSIDE], dtype=object)

    def places_of(lane_arr: np.ndarray, time_arr: np.ndarray) -> np.ndarray:
        r = attribution.innermost(ranges, lane_arr, time_arr)
        used, inv = _unique_inverse(r)
        codes = [place_index.setdefault((units[x], phases[x]), len(place_index)) for x in used.tolist()]
        return np.array(codes, dtype=np.int64)[inv.ravel()] if codes else np.zeros(0, dtype=np.int64)

    n_start: list[np.ndarray] = [np.array([ws], dtype=np.int64)]
    n_dur: list[np.ndarray] = [np.array([0], dtype=np.int64)]
    n_kind: list[np.ndarray] = [np.array([K_GAP], dtype=np.int8)]
    n_lane: list[np.ndarray] = [np.array([main if main >= 0 else 0], dtype=np.int64)]
    n_place: list[np.ndarray] = [places_of(np.array([main]), np.array([ws]))]
    n_op: list[np.ndarray] = [np.array([-1], dtype=np.int64)]
    count = 1
    esrc: list[Any] = []
    edst: list[Any] = []
    ew: list[Any] = []
    ek: list[Any] = []
    host_nodes: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # lane: (starts, node ids)
    join_at: dict[tuple[int, int], int] = {}
    launch_t = {lane: q_lt[q_ll == lane] for lane in seg_by_lane}
    join_t: dict[int, list[int]] = {}
    for lane, e, _ in joins:
        join_t.setdefault(lane, []).append(e)
    for lane, (ss, sc, so, hi) in seg_by_lane.items():
        cuts = np.concatenate(
            [launch_t.get(lane, np.empty(0, np.int64)), np.array(join_t.get(lane, []), np.int64)]
        )
        cuts = cuts[(cuts > ss[0]) & (cuts < hi)]
        # the lane's (unit, phase) range starts and ends: a segment running across one (a host gap, or an
        # operator such as autograd's backward-hook node, in which a unit's range opens) is cut there, so
        # the time after it is charged to the range's place, not to the place where the segment began
        on_lane = ranges.lane == lane
        edges = np.concatenate([ranges.start_ns[on_lane], ranges.end_ns[on_lane]]).astype(np.int64)
        edges = edges[(edges > ss[0]) & (edges < hi)]
        b = _unique_sorted(np.concatenate([ss, cuts, edges]))
        j = np.searchsorted(ss, b, side="right") - 1
        c, o = sc[j], so[j]
        pl = places_of(np.full(b.size, lane), b)
        forced = _isin(b, cuts)
        keep = np.ones(b.size, dtype=bool)
        keep[1:] = forced[1:] | (c[1:] != c[:-1]) | (o[1:] != o[:-1]) | (pl[1:] != pl[:-1])
        b, c, o, pl = b[keep], c[keep], o[keep], pl[keep]
        e = np.append(b[1:], hi)
        kind = _CLASS_KIND[c].copy()
        ids = np.arange(count, count + b.size, dtype=np.int64)
        dur = e - b
        # the task ending at a join point is the wait: length 0, computed by the replay
        jt = np.array(join_t.get(lane, []), dtype=np.int64)
        if jt.size:
            before = np.searchsorted(b, jt, side="left") - 1
            ok = before >= 0
            dur[before[ok]] = 0
            kind[before[ok]] = np.where(kind[before[ok]] == K_SYNC, K_SYNC, K_WAIT)
        meas = b.copy()
        if jt.size:  # a wait is measured as released where the awaited task ended
            meas[before[ok]] = jt[ok]
        n_start.append(meas)
        n_dur.append(dur)
        n_kind.append(kind)
        n_lane.append(np.full(b.size, lane, dtype=np.int64))
        n_place.append(pl)
        n_op.append(o)
        host_nodes[lane] = (b, ids)
        # program order, and the first task released at its offset from the step's start
        esrc.append(ids[:-1])
        edst.append(ids[1:])
        ew.append(np.zeros(ids.size - 1, dtype=np.int64))
        ek.append(np.full(ids.size - 1, K_GAP, dtype=np.int8))
        esrc.append(np.array([0]))
        edst.append(ids[:1])
        ew.append(np.array([int(b[0]) - ws]))
        ek.append(np.array([K_GAP], dtype=np.int8))
        count += b.size

    # queue tasks (a collective: arrival then transfer)
    nq = q.size
    comm_q = is_comm[q]
    width = np.where(comm_q, 2, 1)
    first = (
        count + np.concatenate([[0], np.cumsum(width)[:-1]]).astype(np.int64) if nq else np.zeros(0, np.int64)
    )
    last = first + width - 1
    qkind = np.where(t.category.mask("sync")[q], K_SYNC, K_COMPUTE).astype(np.int8)
    rep = np.repeat(np.arange(nq), width)
    second = np.zeros(rep.size, dtype=bool)
    second[(first - count + 1)[comm_q]] = True  # the transfer task of a collective
    k_start = t.start_ns[q][rep]
    k_dur = np.where(comm_q[rep], 0, (t.end_ns[q] - t.start_ns[q])[rep])
    k_kind = np.where(comm_q[rep], np.where(second, K_TRANSFER, K_WAIT), qkind[rep]).astype(np.int8)
    k_lane = lane_codes[q][rep]
    k_op = t.name.codes[q][rep].astype(np.int64)
    count += int(width.sum())
    if nq:
        k_lane_arr = k_lane
        # place: where it was launched (its own lane and start where no launch is recorded)
        pl_lane = np.where(q_ll >= 0, q_ll, lane_codes[q])
        pl_time = np.where(q_ll >= 0, q_lt, t.start_ns[q])
        qp = places_of(pl_lane, pl_time)
        per_node_place = np.repeat(qp, np.where(comm_q, 2, 1))
        n_start.append(k_start)
        n_dur.append(k_dur)
        n_kind.append(k_kind)
        n_lane.append(k_lane_arr)
        n_place.append(per_node_place)
        n_op.append(k_op)
        # arrival → transfer
        cq = np.flatnonzero(comm_q)
        esrc.append(first[cq])
        edst.append(last[cq])
        ew.append(np.zeros(cq.size, dtype=np.int64))
        ek.append(np.full(cq.size, K_WAIT, dtype=np.int8))
        # lane order
        qlanes = lane_codes[q]
        same = np.flatnonzero(qlanes[1:] == qlanes[:-1])
        lane_w = np.zeros(same.size, dtype=np.int64)  # the queue gaps kept below (filled in place)
        lane_k = np.full(same.size, K_COMPUTE, dtype=np.int8)
        esrc.append(last[same])
        edst.append(first[same + 1])
        ew.append(lane_w)
        ek.append(lane_k)
        prev_end = np.full(nq, np.iinfo(np.int64).min)
        prev_end[same + 1] = t.end_ns[q[same]]
        # launch: from the host task that ended where the launch call began
        src = np.full(nq, -1, dtype=np.int64)
        for lane, (b, ids) in host_nodes.items():
            sel = np.flatnonzero(q_ll == lane)
            if not sel.size:
                continue
            pos = np.searchsorted(b, q_lt[sel], side="left") - 1
            ok = pos >= 0
            src[sel[ok]] = ids[pos[ok]]
        has = src >= 0
        lat = np.where(prev_end <= q_lt, np.maximum(t.start_ns[q] - q_lt, 0), 0)
        # a launch from before the window (or an unknown thread): released at its offset
        first_on_lane = np.ones(nq, dtype=bool)
        first_on_lane[same + 1] = False
        free = ~has & first_on_lane
        esrc.append(src[has])
        edst.append(first[has])
        ew.append(lat[has])
        ek.append(np.full(int(has.sum()), K_LAUNCH, dtype=np.int8))
        esrc.append(np.zeros(int(free.sum()), dtype=np.int64))
        edst.append(first[free])
        ew.append(t.start_ns[q][free] - ws)
        ek.append(np.full(int(free.sum()), K_GAP, dtype=np.int8))
        # a start no edge explains, just after a task on another lane ended: an inferred cross-lane wait
        # (a stream waiting for an event recorded on another, which the trace does not link)
        q_start = t.start_ns[q]
        ready = np.where(has, q_lt + lat, np.iinfo(np.int64).min)
        ready = np.maximum(ready, prev_end)
        late = np.flatnonzero(~free & (q_start > ready))
        if late.size:
            by_end = np.argsort(q_end, kind="stable")
            ends_sorted = q_end[by_end]
            j = np.searchsorted(ends_sorted, q_start[late], side="right") - 1
            ok = j >= 0
            cand = np.where(ok, ends_sorted[np.maximum(j, 0)], np.iinfo(np.int64).min)
            ok &= (cand > ready[late]) & (q_start[late] - cand <= INFER_WINDOW_NS)
            src_i = by_end[j[ok]]
            esrc.append(last[src_i])
            edst.append(first[late[ok]])
            ew.append(q_start[late[ok]] - cand[ok])
            ek.append(np.full(int(ok.sum()), K_SYNC, dtype=np.int8))
            # the rest, less than QUEUE_GAP_NS after the lane's previous task (its ready time: a launch
            # edge carries no latency where the lane was busy at the launch): the lane's dispatch gap
            rest = late[~ok]
            gap = ~first_on_lane[rest] & (q_start[rest] - prev_end[rest] < QUEUE_GAP_NS)
            pos = np.searchsorted(same + 1, rest[gap])  # its lane-order edge
            lane_w[pos] = q_start[rest[gap]] - prev_end[rest[gap]]
            lane_k[pos] = K_QUEUE_GAP
            # what is still unexplained, after a stream-wait call: the wait, within WAITED_WINDOW_NS
            left = rest[~gap]
            j_left = j[~ok][~gap]
            waited = _stream_waited(t, host_ev, lane_codes, q_ll, q_lt, qlanes, left)
            w_ok = waited & (j_left >= 0)
            cand_w = np.where(w_ok, ends_sorted[np.maximum(j_left, 0)], np.iinfo(np.int64).min)
            w_ok &= (cand_w > ready[left]) & (q_start[left] - cand_w <= WAITED_WINDOW_NS)
            esrc.append(last[by_end[j_left[w_ok]]])
            edst.append(first[left[w_ok]])
            ew.append(q_start[left[w_ok]] - cand_w[w_ok])
            ek.append(np.full(int(w_ok.sum()), K_SYNC, dtype=np.int8))
        # joins: the host task starting at the join point waits for the queue task's end
        for lane, e, k in joins:
            b, ids = host_nodes[lane]
            pos = int(np.searchsorted(b, e, side="left"))
            if (
                0 < pos < b.size and b[pos] == e
            ):  # the wait (the task before e) ends when the awaited one does
                join_at[(lane, e)] = int(ids[pos - 1])
                esrc.append(np.array([last[k]]))
                edst.append(np.array([ids[pos - 1]]))
                ew.append(np.array([0]))
                ek.append(np.array([K_WAIT], dtype=np.int8))
    cat = np.concatenate
    used_ops = cat(n_op)
    op_codes, op_index = _unique_inverse(used_ops[used_ops >= 0])
    op_arr = np.full(used_ops.size, -1, dtype=np.int64)
    op_arr[used_ops >= 0] = op_index
    lanes_used = cat(n_lane)
    lane_codes_used, lane_index = _unique_inverse(lanes_used)
    cq = np.flatnonzero(comm_q) if nq else np.empty(0, dtype=np.int64)
    # collectives in collective_events' order (start, stable)
    comm_rows = q[cq]
    order = np.lexsort((comm_rows, t.start_ns[comm_rows])) if cq.size else cq
    ctype = t.collective[comm_rows[order]].strings("other") if cq.size else np.empty(0, dtype=object)
    return RankGraph(
        rank=int(trace.rank or 0),
        ws_ns=int(ws),
        we_ns=int(we),
        dur=cat(n_dur).astype(np.int64),
        start=cat(n_start).astype(np.int64),
        kind=cat(n_kind).astype(np.int8),
        lane=lane_index.astype(np.int32),
        place=cat(n_place).astype(np.int32),
        op=op_arr.astype(np.int32),
        lanes=[lanes_list[c] for c in lane_codes_used.tolist()],
        places=list(place_index),
        ops=[str(names[c]) for c in op_codes.tolist()],
        esrc=cat(esrc).astype(np.int64) if esrc else np.empty(0, np.int64),
        edst=cat(edst).astype(np.int64) if edst else np.empty(0, np.int64),
        ew=cat(ew).astype(np.int64) if ew else np.empty(0, np.int64),
        ekind=cat(ek).astype(np.int8) if ek else np.empty(0, np.int8),
        c_arrive=first[cq][order] if cq.size else cq,
        c_xfer=last[cq][order] if cq.size else cq,
        c_start=t.start_ns[comm_rows[order]] if cq.size else cq,
        c_end=t.end_ns[comm_rows[order]] if cq.size else cq,
        c_type=[x if x else "other" for x in ctype.tolist()],
        c_bytes=t.bytes[comm_rows[order]] if cq.size else np.zeros(0),
        main_lane=int(np.searchsorted(lane_codes_used, main)) if main >= 0 else 0,
        step_ns=_step_starts(trace.windows, chosen),
    )


def _step_starts(windows: Any, chosen: list[int]) -> np.ndarray:
    """The chosen steps' ``ProfilerStep`` span starts, ascending (int64 ns; empty with none)."""
    sel = _isin(windows.step, chosen) if chosen else np.zeros(len(windows), dtype=bool)
    return np.sort(np.asarray(windows.start_ns)[sel].astype(np.int64))
