"""Units × phases: every device event of the profiled step assigned to the (unit, phase) whose
window was open where it was launched, and per (unit, phase) compute, communication, overlapped and exposed time
and the collectives by type, partitioning the step's totals exactly (docs/attribution.md).

torch-free: numpy on the :class:`~fsdpbench.trace.table.EventTable` columns.

* **Windows**: :func:`fsdpbench.analysis.rank.unit_ranges.find_ranges`: fsdpbench's own host ranges
  ``fsdpbench::forward::<unit>``, ``fsdpbench::backward::<unit>`` and ``fsdpbench::optimizer``
  (:mod:`fsdpbench.run.profile_marks`, docs/DATA.md "Ranges in the profiled step"), else windows built
  from FSDP2's own hook ranges (``FSDP::pre_forward (<fqn>)`` …); ``Ranges.source`` says which.
* **Launch point** of a device event: on device (CUDA/ROCm) traces the runtime call linked to the
  kernel by correlation id (the table's ``launch_ns``/``launch_lane``); on CPU/gloo traces a compute event is the training thread's own
  operator (its own start and thread); a gloo worker span is launched by the k-th collective launch op
  of the training thread (the reader's own pairing, ``kineto_cpu.classify_cpu``), so it takes that op's
  start and thread. The innermost window that contains that point on that thread wins (a layer's
  backward beats the root's; a window that crosses another never takes its work: :func:`innermost`);
  no range → the ``(outside)`` bucket.
* **Partition**: within each category (compute, communication) every instant of the union belongs to
  exactly one event, the one that started first (ties: table order); an event's *share* is
  ``[max(start, furthest end of the events that started before it), end)``. A bucket's compute
  (communication) is the length of its events' shares; its overlapped time is the part of its
  communication shares that lies in the union of *all* compute (any bucket): communication hidden by
  some compute, as in :mod:`fsdpbench.analysis.rank.overlap`; exposed = communication − overlapped. Summed
  over buckets these give |∪compute|, |∪comm|, |∪comm ∩ ∪compute| and the exposed time exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fsdpbench.analysis.rank.unit_ranges import FSDP2_PREFIXES, PREFETCH_NAME, find_ranges
from fsdpbench.analysis.rank.windows import ROOT, Ranges, host_rows
from fsdpbench.trace import intervals as iv
from fsdpbench.trace.table import EventTable, as_table

UNKNOWN_TARGET = "?"
"""Target of a prefetch whose range names none (torch 2.3/2.4's bare ``FSDP::backward_prefetch``)."""
OUTSIDE = "(outside)"
"""Unit and phase of the bucket for events launched outside every (unit, phase) window."""
PHASES = ("forward", "backward", "optimizer", OUTSIDE)

FSDP_INTERNALS: dict[str, tuple[tuple[str, ...], str]] = {
    "copy_in": (("fsdp::all_gather_copy_in", "FSDP::all_gather_copy_in"), "compute"),
    "all_gather": (("FSDP::all_gather",), "comm"),
    "copy_out": (("FSDP::all_gather_copy_out",), "compute"),
    "reduce": (("FSDP::post_backward_reduce",), "comm"),
    "rs_wait": (("FSDP::post_backward_rs_wait",), "comm"),
}
"""Per internal step of FSDP2: the host spans that mark it (FSDP2 appends `` (<fqn>)``, and
`` [pg=…]`` with several groups) and the category of the device work launched inside them that is its
device time (copy steps: compute/copies; collective steps: communication; ``rs_wait`` waits on an
earlier reduce-scatter's event and launches none of its own, so its device time is what a trace shows
launched inside it, 0 on the traces seen)."""


def _marks(name: str, spellings: tuple[str, ...]) -> bool:
    return any(name == s or name.startswith(s + " ") for s in spellings)


def innermost(ranges: Ranges, lane: np.ndarray, time_ns: np.ndarray) -> np.ndarray:
    """Per query point (lane code, time) the index of the innermost range that contains it (-1: none).

    Ranges are painted in start order (at equal starts the longer first); a range takes a point from the
    range painted there before only when it lies inside that range, so a nested range wins over its
    enclosing ones and a range that *crosses* another (starts inside it, ends after it) never takes its
    work (docs/attribution.md "Which row an event belongs to"); ``[start, end)``.
    """
    out = np.full(time_ns.size, -1, dtype=np.int64)
    if not len(ranges) or not time_ns.size:
        return out
    order = np.lexsort((-(ranges.end_ns - ranges.start_ns), ranges.start_ns))
    starts, ends = ranges.start_ns, ranges.end_ns
    # sorted(set(…)), not np.unique: numpy 2's np.unique imports numpy.ma on first use (~30 ms a worker process)
    for lane_code in sorted(set(ranges.lane.tolist())):
        q = np.flatnonzero(lane == lane_code)
        if not q.size:
            continue
        q = q[np.argsort(time_ns[q], kind="stable")]
        qt = time_ns[q]
        for r in order[ranges.lane[order] == lane_code]:
            lo = np.searchsorted(qt, starts[r], side="left")
            hi = np.searchsorted(qt, ends[r], side="left")
            if lo == hi:
                continue
            held = out[q[lo:hi]]
            inside = (held < 0) | ((starts[held] <= starts[r]) & (ends[r] <= ends[held]))
            out[q[lo:hi][inside]] = r
    return out


def launch_points(
    t: EventTable, mode: str, ranges: Ranges | None = None
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per row of ``t``: (lane code, time) of the host call that launched it, and warnings.

    Device traces: the runtime call linked by correlation id (the table's ``launch_ns``/``launch_lane``;
    an event without one keeps its own lane, a stream, and so lands in ``(outside)``). CPU/gloo
    (``mode == "cpu"``): every row's own lane and start, except the gloo worker spans (communication),
    which take the k-th collective launch op's (the reader pairs them in start order); when the counts
    differ, the span's own start on the training thread.
    """
    lane = t.launch_lane.astype(np.int64)
    time = t.launch_ns.copy()
    warnings: list[str] = []
    if mode != "cpu":
        return lane, time, warnings
    comm = np.flatnonzero(t.device & t.category.mask("comm"))
    launches = np.flatnonzero(~t.device & (t.collective.codes != 0))
    if not comm.size:
        return lane, time, warnings
    if launches.size == comm.size:
        comm = comm[np.argsort(t.start_ns[comm], kind="stable")]
        launches = launches[np.argsort(t.start_ns[launches], kind="stable")]
        lane[comm] = t.lane.codes[launches]
        time[comm] = t.start_ns[launches]
    else:
        main = _main_lane(t, ranges)
        on_main = t.lane.codes[comm] == main
        lane[comm] = main
        if launches.size and not on_main.all():
            warnings.append(
                f"{launches.size} collective launches but {comm.size} collective spans: each span is attributed "
                "by its own start on the training thread"
            )
    return lane, time, warnings


def _main_lane(t: EventTable, ranges: Ranges | None = None) -> int:
    """The training thread: the lane holding the most (unit, phase) windows, else the most compute."""
    r = find_ranges(t) if ranges is None else ranges
    if len(r):
        return int(np.bincount(r.lane).argmax())
    comp = t.lane.codes[t.device & t.category.mask("compute")]
    return int(np.bincount(comp).argmax()) if comp.size else 0


def shares(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per interval the start of its share of the union: ``max(start, furthest end of the intervals
    before it in start order)``; ``[share start, end)`` (empty when ≥ end) are disjoint, their union is
    the union of the intervals, and the first-started interval owns every instant."""
    if not start.size:
        return start.copy()
    order = np.argsort(start, kind="stable")
    reach = np.maximum.accumulate(end[order])
    prev = np.empty_like(reach)
    prev[0] = start[order[0]]
    prev[1:] = reach[:-1]
    out = np.empty_like(start)
    out[order] = np.maximum(start[order], prev)
    return out


def covered(u: iv.Intervals, x: np.ndarray) -> np.ndarray:
    """|u ∩ (−∞, x)| for each x, for a union ``u`` (vectorised prefix lengths)."""
    s, e = u
    if not s.size:
        return np.zeros(x.size, dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(e - s)])
    k = np.searchsorted(s, x, side="right")  # intervals starting at or before x
    last_end = e[np.maximum(k - 1, 0)]
    return cum[k] - np.where(k > 0, np.maximum(last_end - x, 0), 0)


def partition(
    start: np.ndarray, end: np.ndarray, is_comm: np.ndarray, bucket: np.ndarray, n_buckets: int
) -> dict[str, np.ndarray]:
    """Per bucket ``compute_ns``, ``comm_ns``, ``overlapped_ns``, ``exposed_ns`` (int64) of the events
    (compute where ``is_comm`` is false), each event counted in ``bucket`` (module docstring)."""
    out = {}
    comp = ~is_comm
    for key, sel in (("compute_ns", comp), ("comm_ns", is_comm)):
        s0 = shares(start[sel], end[sel])
        out[key] = np.bincount(bucket[sel], weights=np.maximum(end[sel] - s0, 0), minlength=n_buckets)
        if key == "comm_ns":
            c_union = iv.union(start[comp], end[comp])
            e1 = end[sel]
            s1 = np.minimum(s0, e1)
            hidden = covered(c_union, e1) - covered(c_union, s1)
            out["overlapped_ns"] = np.bincount(bucket[sel], weights=hidden, minlength=n_buckets)
    out = {k: np.rint(v).astype(np.int64) for k, v in out.items()}
    out["exposed_ns"] = out["comm_ns"] - out["overlapped_ns"]
    return out


@dataclass
class Placed:
    """Device events (compute and communication) of a selection with their (unit, phase)."""

    rows: np.ndarray
    """Row positions in the table."""
    unit: np.ndarray
    phase: np.ndarray
    warnings: list[str]
    range_index: np.ndarray
    """Per event the index into :func:`find_ranges` of its range (-1: outside)."""

    def buckets(self, ranges: Ranges, keys: list[tuple[str, str]]) -> np.ndarray:
        """Per event its position in ``keys`` ((unit, phase) pairs holding every range's and OUTSIDE)."""
        index = {k: i for i, k in enumerate(keys)}
        of_range = np.array(
            [
                *(index[(u, p)] for u, p in zip(ranges.unit, ranges.phase, strict=True)),
                index[(OUTSIDE, OUTSIDE)],
            ],
            dtype=np.int64,
        )
        return of_range[self.range_index]


def place(t: EventTable, mode: str, select: np.ndarray | None = None, ranges: Ranges | None = None) -> Placed:
    """Every compute/communication device event of ``t`` (within ``select``, a mask) with the (unit,
    phase) of the innermost window of ``ranges`` (default :func:`find_ranges`) open at its launch
    point; ``(outside)`` for none."""
    ranges = find_ranges(t) if ranges is None else ranges
    lane, time, warnings = launch_points(t, mode, ranges)
    mask = t.device & t.category.mask("compute", "comm")
    if select is not None:
        mask &= select
    rows = np.flatnonzero(mask)
    r = innermost(ranges, lane[rows], time[rows])
    units = np.array([*ranges.unit, OUTSIDE], dtype=object)
    phases = np.array([*ranges.phase, OUTSIDE], dtype=object)
    return Placed(rows=rows, unit=units[r], phase=phases[r], warnings=warnings, range_index=r)


def collective_places(
    t: EventTable | Any, mode: str, select: np.ndarray | None = None, ranges: Ranges | None = None
) -> dict[str, Any]:
    """Each communication event's (unit, phase), for the wait/transfer split per unit and phase.

    Returns columns sorted by start as :func:`fsdpbench.analysis.rank.collectives.collective_events` is
    (the same events, in the same order, for the same ``select``): ``start_ns``, ``end_ns``, ``type``,
    ``unit``, ``phase``.
    """
    t = as_table(t)
    p = place(t, mode, select, ranges)
    comm = t.category.mask("comm")[p.rows]
    rows, unit, phase = p.rows[comm], p.unit[comm], p.phase[comm]
    order = np.argsort(t.start_ns[rows], kind="stable")
    rows, unit, phase = rows[order], unit[order], phase[order]
    ctype = t.collective[rows].strings("other")
    ctype[ctype == ""] = "other"
    return {
        "start_ns": t.start_ns[rows],
        "end_ns": t.end_ns[rows],
        "type": ctype,
        "unit": unit,
        "phase": phase,
    }


def _internals(
    t: EventTable,
    placed: Placed,
    keys: list[tuple[str, str]],
    launch: tuple[np.ndarray, ...],
    select: np.ndarray | None,
    ranges: Ranges,
) -> list[dict[str, Any] | None]:
    """Per bucket ``{copy_in|all_gather|copy_out|reduce|rs_wait: {host_us, device_us}}`` from FSDP2's own
    ranges (those in ``select``), or None for every bucket when the trace has none of them; a step whose
    name the trace never holds is None in every bucket ("not in this trace": torch_npu 2.8–2.10 replaces
    ``fsdp::all_gather_copy_in``, torch 2.3/2.4 record no all-gather range), not 0."""
    names = [str(c) for c in t.name.categories]
    kinds = {k: [i for i, c in enumerate(names) if _marks(c, sp)] for k, (sp, _) in FSDP_INTERNALS.items()}
    if not any(kinds.values()):
        return [None] * len(keys)
    index = {k: i for i, k in enumerate(keys)}
    lane, time = launch
    out: list[dict[str, Any]] = [{} for _ in keys]
    for kind, codes in kinds.items():
        if not codes:  # a name the trace never holds: unknown there, not 0
            for part in out:
                part[kind] = None
            continue
        host = np.zeros(len(keys))
        dev = np.zeros(len(keys))
        # on CPU traces an operator (fsdp::all_gather_copy_in) is its own host span and device event
        mark = np.isin(t.name.codes, codes)
        spans = np.flatnonzero(mark if select is None else mark & select)
        if spans.size:
            # the outermost spans per lane (a spelling nested in another counts once)
            from fsdpbench.trace.kineto_cpu import outermost

            spans = outermost(spans, t.start_ns, t.end_ns, t.lane.codes.astype(np.int64))
            r = innermost(ranges, t.lane.codes[spans].astype(np.int64), t.start_ns[spans])
            b = np.array([index.get(_key(ranges, i), -1) for i in r.tolist()])
            ok = b >= 0
            np.add.at(host, b[ok], (t.end_ns[spans] - t.start_ns[spans])[ok])
            # device events launched inside one of these spans (same lane, inside its extent)
            sp = Ranges(
                t.lane.codes[spans].astype(np.int64),
                t.start_ns[spans],
                t.end_ns[spans],
                [""] * spans.size,
                [""] * spans.size,
            )
            rows = placed.rows
            want = t.category.mask(FSDP_INTERNALS[kind][1])[rows]
            inside = (innermost(sp, lane[rows], time[rows]) >= 0) & want
            pb = placed.buckets(ranges, keys)
            np.add.at(dev, pb[inside], (t.end_ns[rows] - t.start_ns[rows])[inside])
        for i in range(len(keys)):
            out[i][kind] = {"host_us": float(host[i]) / 1000.0, "device_us": float(dev[i]) / 1000.0}
    return out


def _key(ranges: Ranges, r: int) -> tuple[str, str]:
    return (ranges.unit[r], ranges.phase[r]) if r >= 0 else (OUTSIDE, OUTSIDE)


def unit_phase_rows(
    t: EventTable | Any, mode: str, select: np.ndarray | None = None, ranges: Ranges | None = None
) -> list[dict[str, Any]]:
    """The unit × phase rows of the events in ``select`` (a mask; None: all): per (unit, phase)
    ``compute_us, comm_us, overlapped_us, exposed_us``, ``collectives`` ``{type: {count, bytes}}``
    (bytes None when no event of that type there has a known size) and ``fsdp_internals`` (None when
    the trace has no FSDP2 ranges). Rows in range order (units in the order their ranges start, then
    the optimizer), ``(outside)`` last when it holds anything."""
    t = as_table(t)
    ranges = find_ranges(t) if ranges is None else ranges
    placed = place(t, mode, select, ranges)
    keys: list[tuple[str, str]] = []
    order = np.argsort(ranges.start_ns, kind="stable")
    for r in order.tolist():
        k = (ranges.unit[r], ranges.phase[r])
        if k not in keys:
            keys.append(k)
    keys.append((OUTSIDE, OUTSIDE))
    rows = placed.rows
    bucket = placed.buckets(ranges, keys)
    is_comm = t.category.mask("comm")[rows]
    parts = partition(t.start_ns[rows], t.end_ns[rows], is_comm, bucket, len(keys))
    ctype = t.collective[rows].strings("other")
    ctype[ctype == ""] = "other"
    nbytes = t.bytes[rows]
    launch = launch_points(t, mode, ranges)[:2]
    internals = _internals(t, placed, keys, launch, select, ranges)
    out = []
    for i, (unit, phase) in enumerate(keys):
        mine = bucket == i
        colls: dict[str, dict[str, Any]] = {}
        for ty in sorted(set(ctype[mine & is_comm].tolist())):
            sel = mine & is_comm & (ctype == ty)
            b = nbytes[sel]
            known = ~np.isnan(b)
            colls[ty] = {"count": int(sel.sum()), "bytes": int(b[known].sum()) if known.any() else None}
        if unit == OUTSIDE and not mine.any():
            continue
        out.append(
            {
                "unit": unit,
                "phase": phase,
                "compute_us": int(parts["compute_ns"][i]) / 1000.0,
                "comm_us": int(parts["comm_ns"][i]) / 1000.0,
                "overlapped_us": int(parts["overlapped_ns"][i]) / 1000.0,
                "exposed_us": int(parts["exposed_ns"][i]) / 1000.0,
                "collectives": colls,
                "fsdp_internals": internals[i],
            }
        )
    return out


def prefetches(t: EventTable, ranges: Ranges, select: np.ndarray | None = None) -> list[dict[str, object]]:
    """FSDP2's prefetch edges of ``t`` (within ``select``, a mask): per ``FSDP::<pass>_prefetch for
    <fqn>`` range, in start order, ``{pass, unit, target, start_us}``: the unit whose window (of
    ``ranges``) was open on that thread when it was issued (``(outside)`` for none), the unit it
    prefetched (``root`` for FQN ""; with fsdpbench's ranges, the one unit of theirs whose name ends the
    FQN, e.g. ``layers.1`` for ``model.layers.1``, so both ends of an edge are named alike; ``?`` when
    the range names none, torch 2.3/2.4; prefixed ``root#k/`` when its issuer is a unit of another root
    of the pass), and its start (µs, the trace's clock)."""
    found = {
        i: m
        for i, c in enumerate(t.name.categories)
        if str(c).startswith(FSDP2_PREFIXES) and (m := PREFETCH_NAME.fullmatch(str(c))) is not None
    }
    rows = host_rows(t, list(found))
    if select is not None:
        rows = rows[select[rows]]
    if not rows.size:
        return []
    rows = rows[np.argsort(t.start_ns[rows], kind="stable")]
    issuer = innermost(ranges, t.lane.codes[rows].astype(np.int64), t.start_ns[rows])
    names = set(ranges.unit)
    out: list[dict[str, object]] = []
    for row, r in zip(rows.tolist(), issuer.tolist(), strict=True):
        m = found[int(t.name.codes[row])]
        unit = ranges.unit[r] if r >= 0 else OUTSIDE
        target = UNKNOWN_TARGET if m.group(2) is None else (m.group(2) or ROOT)
        prefix = unit.partition("/")[0] + "/" if unit.startswith(ROOT + "#") else ""
        if prefix:  # a unit of another root of the pass (fsdp2_windows): so is the one it prefetches
            target = prefix[:-1] if target == ROOT else prefix + target
        if target not in names and target != UNKNOWN_TARGET:
            ends = [u for u in names if target.endswith("." + u)]
            target = ends[0] if len(ends) == 1 else target
        out.append(
            {
                "pass": m.group(1),
                "unit": unit,
                "target": target,
                "start_us": int(t.start_ns[row]) / 1000.0,
            }
        )
    return out
