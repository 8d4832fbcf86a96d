"""Waiting vs transferring: each collective matched across ranks, the ranks' clocks aligned, and its time
on each rank split into waiting for the last rank to arrive and transferring (docs/attribution.md,
"Waiting vs transferring").

For one collective instance, with every rank's start ``s_r`` and end ``e_r`` moved onto rank ``ref``'s
clock (``- offset_r``): last arrival ``L = max_r s_r``; on rank r, arrival skew = ``s_r - min_r s_r``,
wait = ``min(max(L - s_r, 0), e_r - s_r)``, transfer = ``e_r - s_r - wait`` (= ``max(e_r - L, 0)`` when
``s_r <= L <= e_r``; never negative). Per rank, the wait intervals ``[s_r, s_r + wait)`` and transfer
intervals ``[s_r + wait, e_r)`` (on the rank's own clock) are unioned: ``transfer_us`` = |∪ transfer|,
``wait_us`` = |∪ wait \\ ∪ transfer| (a collective waiting while another moves bytes counts as
transferring), so ``wait_us + transfer_us`` = ``comm_us``. The exposed communication ``E`` (∪ comm minus
∪ compute, analysis/rank/overlap.py) splits the same way: ``exposed_transfer_us`` = |∪ transfer ∩ E|,
``exposed_wait_us`` = |(∪ wait \\ ∪ transfer) ∩ E|.

Clock offsets: the ranks of a collective finish it together (the last arrival releases them all), so
rank r's offset to the reference rank (the lowest) is the median over shared instances of
``e_r - e_ref``, clipped to what causality allows (no rank ends a collective before the other arrived:
``max(s_r - e_ref) <= offset <= min(e_r - s_ref)``), which on one host keeps scheduling noise in the
ends from inventing an offset.
"""

from __future__ import annotations

import array
import bisect
import heapq
import itertools
import operator
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from fsdpbench.trace.table import EventTable

# The cross-rank part is plain Python (no numpy): a fully cached `fsdpbench analyze` never imports numpy.
Pairs = list[list[int]]

MARK_RE = re.compile(r"^fsdpbench::c10d::(?P<kind>[^:]+)::group=(?P<group>.*)::index=(?P<index>\d+)$")
MARK_COLUMNS = ("mark_group", "mark_index", "unit", "phase")
"""Columns :func:`rank_marks` adds to ``collective_events``."""
TOP_N = 10
ROW_SPLIT = "_rows"
"""Key of the per-rank {row of collective_events: (wait µs, transfer µs)} in ``wait_transfer``'s result
(taken out by ``analyze``, never in the JSON)."""

# nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): busbw = algbw * factor(n)
BUSBW_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}

MATCH_SEQ = "group_seq"
MATCH_MARKS = "c10d_ranges"
MATCH_ORDER = "order"
MATCH_TEXT = {
    MATCH_SEQ: "(process group, sequence number) from the trace",
    MATCH_MARKS: "fsdpbench's c10d ranges (process group, per-group index)",
    MATCH_ORDER: "order within (process group, type): the trace names no sequence number and has no "
    "fsdpbench c10d ranges",
}


# ------------------------------------------------------------------------------------------ one rank
def _sorted_comm(t: EventTable) -> np.ndarray:
    """The comm events' positions in ``collective_events``' order (by start, stable)."""
    import numpy as np

    sel = np.flatnonzero(t.device & t.category.mask("comm"))
    return sel[np.argsort(t.start_ns[sel], kind="stable")]


def rank_marks(
    t: EventTable, by_order: bool = True, places: dict[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """Per collective (``collective_events``' order): ``mark_group``/``mark_index`` from fsdpbench's
    ``fsdpbench::c10d::<kind>::group=<g>::index=<k>`` ranges (None/-1 without), and its ``unit`` and
    ``phase`` from ``places`` (None without).

    The k-th c10d range (by start) names the k-th collective, as the CPU reader pairs launches with
    gloo's worker spans; used only when the counts agree and ``by_order`` (CPU traces: on a device,
    kernels on several streams need not start in launch order), else the marks are None/-1.
    ``places``: :func:`fsdpbench.analysis.rank.attribution.collective_places` of the same collectives (the
    (unit, phase) of the fsdpbench range that launched each one, on CPU and device traces alike:
    docs/attribution.md); ignored when its length differs.
    """
    import numpy as np

    comm = _sorted_comm(t)
    n = comm.size
    out: dict[str, np.ndarray] = {
        "mark_group": np.full(n, None, dtype=object),
        "mark_index": np.full(n, -1, dtype=np.int64),
        "unit": np.full(n, None, dtype=object),
        "phase": np.full(n, None, dtype=object),
    }
    if places is not None and len(places["unit"]) == n:
        out["unit"] = np.asarray(places["unit"], dtype=object)
        out["phase"] = np.asarray(places["phase"], dtype=object)
    cats = t.name.categories
    parsed = [MARK_RE.match(c) for c in cats]
    host = ~t.device
    is_mark = np.array([m is not None for m in parsed] + [False])[t.name.codes] & host
    marks = np.flatnonzero(is_mark)
    if n == 0 or marks.size != n or not by_order:
        return out
    marks = marks[np.argsort(t.start_ns[marks], kind="stable")]
    codes = t.name.codes[marks]
    out["mark_group"] = np.array([parsed[c].group("group") for c in codes.tolist()], dtype=object)
    out["mark_index"] = np.array([int(parsed[c].group("index")) for c in codes.tolist()], dtype=np.int64)
    return out


def exposed_intervals(t: EventTable) -> tuple[np.ndarray, np.ndarray]:
    """∪ communication minus ∪ compute of ``t`` (the exposed communication, as intervals)."""
    from fsdpbench.analysis.rank.overlap import category_union
    from fsdpbench.trace import intervals as iv

    return iv.difference(category_union(t, "comm"), category_union(t, "compute"))


# ------------------------------------------------------------------------------------------ across ranks
def _numpy_loaded() -> bool:
    """Whether numpy is imported already (a fresh analysis): then the cross-rank part uses it; an
    analysis read from result caches runs the plain-Python path and never imports it."""
    return "numpy" in sys.modules


def _col(ce: Any, name: str, n: int, default: Any) -> list[Any]:
    try:
        values = ce[name]
    except KeyError:
        return [default] * n
    return list(values.tolist() if hasattr(values, "tolist") else values)


def _none(v: Any) -> Any:
    return None if v is None or (isinstance(v, float) and v != v) else v


def _keys(ce: Any) -> tuple[list[tuple[Any, ...]], str]:
    """Each collective's cross-rank key and the method that gave it (for one rank)."""
    types = [str(x) for x in _col(ce, "type", 0, None)]
    n = len(types)
    group = [_none(g) for g in _col(ce, "group", n, None)]
    seq = [int(s) for s in _col(ce, "seq", n, -1)]
    if n and all(g is not None and s >= 0 for g, s in zip(group, seq, strict=True)):
        return [(g, s) for g, s in zip(group, seq, strict=True)], MATCH_SEQ
    mg = [_none(g) for g in _col(ce, "mark_group", n, None)]
    mi = [int(i) for i in _col(ce, "mark_index", n, -1)]
    if n and all(g is not None and i >= 0 for g, i in zip(mg, mi, strict=True)):
        return [(g, i) for g, i in zip(mg, mi, strict=True)], MATCH_MARKS
    count: defaultdict[tuple[Any, str], int] = defaultdict(int)
    keys = []
    for g, t in zip(group, types, strict=True):
        keys.append((g, t, count[(g, t)]))
        count[(g, t)] += 1
    return keys, MATCH_ORDER


def _union(starts: Sequence[int], ends: Sequence[int]) -> Pairs:
    """Sorted union of [start, end) intervals (touching ones merged; empty ones dropped)."""
    out: Pairs = []
    for a, b in sorted((a, b) for a, b in zip(starts, ends, strict=True) if b > a):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1][1] = b
        else:
            out.append([a, b])
    return out


def _length(x: Pairs) -> int:
    return sum(b - a for a, b in x)


def _intersection_length(x: Pairs, y: Pairs) -> int:
    """|x ∩ y| of two unions (a merge of the two sorted lists)."""
    i = j = total = 0
    while i < len(x) and j < len(y):
        lo, hi = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if hi > lo:
            total += hi - lo
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


def _difference(x: Pairs, y: Pairs) -> Pairs:
    """x minus y for two unions."""
    out: Pairs = []
    j = 0
    for a, b in x:
        cur = a
        while j < len(y) and y[j][1] <= cur:
            j += 1
        k = j
        while k < len(y) and y[k][0] < b:
            if y[k][0] > cur:
                out.append([cur, y[k][0]])
            cur = max(cur, y[k][1])
            k += 1
        if cur < b:
            out.append([cur, b])
    return out


class _Exposed:
    """A rank's exposed-communication union as sorted starts/ends and the running length before each
    interval: ``|E ∩ U|`` for a union U of k intervals in O(k log n), with no per-interval Python work
    on the n intervals of E beyond one C-level accumulate."""

    def __init__(self, exposed: Any) -> None:
        s, e = exposed
        # numpy arrays (a fresh analysis) as lists; array.array (from a result cache) index as they are
        self.s = s.tolist() if hasattr(s, "dtype") else s
        self.e = e.tolist() if hasattr(e, "dtype") else e
        self.cum = array.array("q", [0])
        self.cum.extend(itertools.accumulate(map(operator.sub, self.e, self.s)))

    def before(self, t: int) -> int:
        """|E ∩ (-inf, t)|."""
        k = bisect.bisect_right(self.s, t) - 1
        if k < 0:
            return 0
        return self.cum[k] + min(t, self.e[k]) - self.s[k]

    def overlap(self, u: Pairs) -> int:
        """|E ∩ u| for a union u (``before`` inlined: this runs once per interval of u)."""
        s, e, cum, right = self.s, self.e, self.cum, bisect.bisect_right
        total = 0
        for a, b in u:
            k = right(s, b) - 1
            if k >= 0:
                total += cum[k] + (b if b < e[k] else e[k]) - s[k]
            k = right(s, a) - 1
            if k >= 0:
                total -= cum[k] + (a if a < e[k] else e[k]) - s[k]
        return total


class _ExposedArrays:
    """:class:`_Exposed` on numpy arrays, for when numpy is loaded anyway (a fresh analysis): the same
    integer arithmetic, vectorised over the intervals of the union asked about."""

    def __init__(self, exposed: Any) -> None:
        import numpy as np

        self.s, self.e = (np.asarray(x, dtype=np.int64) for x in exposed)
        self.cum = np.concatenate([[0], np.cumsum(self.e - self.s)]).astype(np.int64)

    def _before(self, t: np.ndarray) -> np.ndarray:
        import numpy as np

        if self.s.size == 0:
            return np.zeros(t.size, dtype=np.int64)
        k = np.searchsorted(self.s, t, side="right") - 1
        ok = k >= 0
        k = np.where(ok, k, 0)
        return np.where(ok, self.cum[k] + np.minimum(t, self.e[k]) - self.s[k], 0)

    def overlap(self, u: Any) -> int:
        """|E ∩ u| for a union u given as (starts, ends) arrays."""
        a, b = u
        if a.size == 0:
            return 0
        return int(self._before(b).sum() - self._before(a).sum())


def _split_arrays(
    starts: list[int], wait_end: list[int], ends: list[int], exposed: _ExposedArrays | None
) -> dict[str, float | None]:
    """:func:`_split` with numpy (trace/intervals.py): the same exact integer unions and lengths."""
    import numpy as np

    from fsdpbench.trace import intervals as iv

    s, w, e = (np.asarray(x, dtype=np.int64) for x in (starts, wait_end, ends))
    transfer_u = iv.union(w, e)
    wait_only = iv.difference(iv.union(s, w), transfer_u)
    out: dict[str, float | None] = {
        "wait_us": iv.length(wait_only) / 1000.0,
        "transfer_us": iv.length(transfer_u) / 1000.0,
    }
    if exposed is None:
        out["exposed_wait_us"] = out["exposed_transfer_us"] = None
    else:
        out["exposed_wait_us"] = exposed.overlap(wait_only) / 1000.0
        out["exposed_transfer_us"] = exposed.overlap(transfer_u) / 1000.0
    return out


def _split(
    starts: list[int], wait_end: list[int], ends: list[int], exposed: _Exposed | _ExposedArrays | None
) -> dict[str, float | None]:
    """Union-based wait/transfer (and their exposed parts) of one rank's collectives (with numpy when
    it is loaded already: a fresh analysis; plain Python otherwise: from result caches)."""
    if isinstance(exposed, _ExposedArrays) or (exposed is None and _numpy_loaded()):
        return _split_arrays(starts, wait_end, ends, exposed)
    transfer_u = _union(wait_end, ends)
    wait_only = _difference(_union(starts, wait_end), transfer_u)
    out: dict[str, float | None] = {
        "wait_us": _length(wait_only) / 1000.0,
        "transfer_us": _length(transfer_u) / 1000.0,
    }
    if exposed is None:
        out["exposed_wait_us"] = out["exposed_transfer_us"] = None
    else:
        out["exposed_wait_us"] = exposed.overlap(wait_only) / 1000.0
        out["exposed_transfer_us"] = exposed.overlap(transfer_u) / 1000.0
    return out


def _clamped_offset(est: float, lo: float, hi: float, rank: Any, ref: Any, warnings: list[str]) -> int:
    """The clock offset (ns) of ``rank`` to ``ref``: the median ``est`` clamped to ``[lo, hi]``, the bounds
    within which neither rank ends a shared collective before the other arrived; the median itself, with a
    warning, when no offset satisfies them all."""
    if lo <= hi:
        est = min(max(est, lo), hi)
    else:
        warnings.append(
            f"rank {rank}: no single clock offset to rank {ref} lets every shared collective end "
            "after both ranks arrived (clock drift, or collectives matched wrongly); the median is used"
        )
    return int(round(est))


def _no_shared_collective(rank: Any, ref: Any) -> str:
    return f"rank {rank} shares no collective with rank {ref}: its clock offset is unknown (0 used)"


def wait_transfer(
    ranks: Sequence[int],
    events: Sequence[Any],
    exposed: Sequence[Any] | None = None,
    top: int = TOP_N,
) -> tuple[dict[str, Any], list[str]]:
    """Wait and transfer of every collective of ``ranks``.

    Args:
        ranks: rank ids; events: per rank the ``collective_events`` columns (``type, bytes, start_ns,
            end_ns, group, seq`` and, where fsdpbench ranges were read, ``mark_group, mark_index, unit,
            phase``); exposed: per rank its exposed-communication intervals (None: not split).
    Returns:
        (the ``waits`` object of docs/DATA.md, plus :data:`ROW_SPLIT`; warnings).
    """
    warnings: list[str] = []
    if len(ranks) < 2:
        return {}, warnings
    fast = _ExposedArrays if _numpy_loaded() else _Exposed  # numpy only when loaded already
    exposed = (
        [None if x is None else fast(x) for x in exposed] if exposed is not None else [None] * len(ranks)
    )
    first = [_keys(ce) for ce in events]
    methods = [m for _, m in first]
    per_rank: list[dict[tuple[Any, ...], list[Any]]] = [{} for _ in events]
    # one method for all ranks: the weakest any rank allows
    order = [MATCH_SEQ, MATCH_MARKS, MATCH_ORDER]
    method = max(methods, key=order.index)
    columns = []
    for i, ce in enumerate(events):
        keys, m = first[i]
        if m != method:
            if method == MATCH_ORDER:
                ce = {k: ce[k] for k in ("type", "start_ns", "end_ns", "group") if k in ce}
            else:  # group_seq on some ranks, marks on others: use the marks
                ce = {k: ce[k] for k in ce if k not in ("seq",)}
            keys, _ = _keys(ce)
        n = len(keys)
        types = [str(t) for t in _col(ce, "type", n, "other")]
        nbytes = [_none(b) for b in _col(ce, "bytes", n, None)]
        st, en = _col(ce, "start_ns", n, 0), _col(ce, "end_ns", n, 0)
        unit, phase = _col(ce, "unit", n, None), _col(ce, "phase", n, None)
        columns.append((keys, types, nbytes, st, en, unit, phase))
    if _numpy_loaded():  # loaded already (a fresh analysis): the same integers, vectorised
        return _wait_transfer_arrays(ranks, columns, exposed, method, top)
    for i, (keys, types, nbytes, st, en, unit, phase) in enumerate(columns):
        mine = per_rank[i]
        for j, k in enumerate(keys):
            item = mine.get(k)
            if item is None:  # [type, bytes, start, end, unit, phase, first row]
                mine[k] = [types[j], nbytes[j], int(st[j]), int(en[j]), _none(unit[j]), _none(phase[j]), j]
            else:  # several kernels of one collective (coalesced): its span
                item[2] = min(item[2], int(st[j]))
                item[3] = max(item[3], int(en[j]))
    # clock offsets from the ends of shared instances, to the lowest rank
    ref = per_rank[0]
    offsets: dict[int, float | None] = {int(ranks[0]): 0.0}
    off_ns = [0] * len(ranks)
    for i in range(1, len(ranks)):
        shared = [(v, ref[k]) for k, v in per_rank[i].items() if k in ref]
        if shared:
            est = statistics.median(v[3] - w[3] for v, w in shared)
            # causality: neither rank ends a collective before the other arrived
            lo = max(v[2] - w[3] for v, w in shared)
            hi = min(v[3] - w[2] for v, w in shared)
            off_ns[i] = _clamped_offset(est, lo, hi, ranks[i], ranks[0], warnings)
            offsets[int(ranks[i])] = off_ns[i] / 1000.0
        else:
            offsets[int(ranks[i])] = None
            warnings.append(_no_shared_collective(ranks[i], ranks[0]))
    all_keys: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for i, d in enumerate(per_rank):
        for k in d:
            all_keys[k].append(i)
    unmatched = [0] * len(ranks)
    instances = []
    starts_r: list[list[int]] = [[] for _ in ranks]
    wait_end_r: list[list[int]] = [[] for _ in ranks]
    ends_r: list[list[int]] = [[] for _ in ranks]
    place_r: list[list[tuple[Any, Any]]] = [[] for _ in ranks]
    row_split: list[dict[int, tuple[float, float]]] = [{} for _ in ranks]
    for k, holders in all_keys.items():
        if len(holders) < 2:
            i = holders[0]
            _, _, start, end, u, ph, row = per_rank[i][k]
            unmatched[i] += 1
            starts_r[i].append(start)
            wait_end_r[i].append(start)  # wait unknown: all of it transfer
            ends_r[i].append(end)
            place_r[i].append((u, ph))
            row_split[i][row] = (0.0, (end - start) / 1000.0)
            continue
        vs = [per_rank[i][k] for i in holders]
        aligned = [(v[2] - off_ns[i], v[3] - off_ns[i]) for i, v in zip(holders, vs, strict=True)]
        last = max([a for a, _ in aligned])
        last_end = max([b for _, b in aligned])
        waits = []
        for i, v, (a, b) in zip(holders, vs, aligned, strict=True):
            wait = last - a
            if wait < 0:
                wait = 0
            elif wait > b - a:
                wait = b - a
            waits.append(wait)
            start = v[2]
            starts_r[i].append(start)
            wait_end_r[i].append(start + wait)
            ends_r[i].append(v[3])
            place_r[i].append((v[4], v[5]))
            row_split[i][v[6]] = (wait / 1000.0, (b - a - wait) / 1000.0)
        # (wait + transfer of the slowest, key, holders, aligned, waits): dicts only for the top ones
        transfer_ns = last_end - last if last_end > last else 0
        instances.append((max(waits) + transfer_ns, transfer_ns, k, holders, aligned, waits))
    kinds = [per_rank[x[3][0]][x[2]][:2] for x in instances]
    bandwidth = _bandwidth([(kb[0], kb[1], x[1], len(x[3])) for kb, x in zip(kinds, instances, strict=True)])
    tops = [_instance(per_rank, ranks, x) for x in heapq.nlargest(top, instances, key=lambda x: x[0])]
    late: list[list[int]] = [[] for _ in ranks]
    for _, _, _, holders, aligned, _ in instances:
        first = min(a for a, _ in aligned)
        for i, (a, _) in zip(holders, aligned, strict=True):
            late[i].append(a - first)
    return _result(
        ranks, method, offsets, warnings, unmatched, len(instances), starts_r, wait_end_r, ends_r, place_r,
        exposed, bandwidth, tops, row_split, late,
    )  # fmt: skip


def _result(
    ranks: Sequence[int],
    method: str,
    offsets: dict[int, float | None],
    warnings: list[str],
    unmatched: list[int],
    instances: int,
    starts_r: list[list[int]],
    wait_end_r: list[list[int]],
    ends_r: list[list[int]],
    place_r: list[list[tuple[Any, Any]]],
    exposed: list[Any],
    bandwidth: dict[str, dict[str, Any]],
    tops: list[dict[str, Any]],
    row_split: list[dict[int, tuple[float, float]]],
    late: list[list[int]],
) -> tuple[dict[str, Any], list[str]]:
    """The ``waits`` object from the per-rank wait/transfer intervals (both paths of :func:`wait_transfer`);
    ``late``: per rank, its arrival after the first holder of each matched instance it holds (ns, aligned)."""
    if any(unmatched):
        warnings.append(
            "collectives found on one rank only (counted as transfer, their wait cannot be told): "
            + ", ".join(f"rank {r}: {u}" for r, u in zip(ranks, unmatched, strict=True) if u)
        )
    rank_rows = []
    by_place: dict[tuple[Any, Any], dict[int, dict[str, float | None]]] = defaultdict(dict)
    for i, r in enumerate(ranks):
        split = _split(starts_r[i], wait_end_r[i], ends_r[i], exposed[i])
        rank_rows.append(
            {"rank": int(r), "clock_offset_us": offsets[int(r)], **split, "unmatched": unmatched[i]}
        )
        places = sorted(set(place_r[i]), key=lambda p: (str(p[0]), str(p[1])))
        if places == [(None, None)]:
            continue
        rows_of: defaultdict[tuple[Any, Any], list[int]] = defaultdict(list)
        for j, q in enumerate(place_r[i]):
            rows_of[q].append(j)
        for p in places:
            sel = rows_of[p]
            by_place[p][int(r)] = _split(
                [starts_r[i][j] for j in sel],
                [wait_end_r[i][j] for j in sel],
                [ends_r[i][j] for j in sel],
                exposed[i],
            )
    units = [
        {"unit": u, "phase": ph, "ranks": {str(r): v for r, v in sorted(d.items())}}
        for (u, ph), d in sorted(by_place.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1])))
    ]
    return (
        {
            "match": method,
            "match_text": MATCH_TEXT[method],
            "reference_rank": int(ranks[0]),
            "instances": instances,
            "ranks": rank_rows,
            "bandwidth": bandwidth,
            # integer ns: the median of an even count, (a + b) / 2, is exact
            "skew_us": {str(r): statistics.median(x) / 1000.0 for r, x in zip(ranks, late, strict=True) if x},
            "units": units,
            "top": tops,
            ROW_SPLIT: row_split,
        },
        warnings,
    )


def _wait_transfer_arrays(
    ranks: Sequence[int], columns: list[tuple], exposed: list[Any], method: str, top: int
) -> tuple[dict[str, Any], list[str]]:
    """:func:`wait_transfer` after the keys, with numpy: instance x rank matrices of the coalesced start
    and end, the same integer arithmetic per instance, and Python only for the offsets' median, the
    bandwidth sums (in instance order, as the plain path adds them) and the top instances."""
    import numpy as np

    warnings: list[str] = []
    nr = len(ranks)
    index: dict[tuple[Any, ...], int] = {}  # key: id, in first appearance over ranks in order
    ids_r = []
    for keys, *_ in columns:
        ids_r.append(np.array([index.setdefault(k, len(index)) for k in keys], dtype=np.int64))
    nk = len(index)
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    start = np.full((nk, nr), big, dtype=np.int64)
    end = np.full((nk, nr), small, dtype=np.int64)
    row = np.full((nk, nr), -1, dtype=np.int64)  # first row of the key on the rank
    for i, (ids, (_, _, _, st, en, _, _)) in enumerate(zip(ids_r, columns, strict=True)):
        if ids.size == 0:
            continue
        np.minimum.at(start[:, i], ids, np.asarray(st, dtype=np.int64))
        np.maximum.at(end[:, i], ids, np.asarray(en, dtype=np.int64))
        uniq, firstpos = np.unique(ids, return_index=True)
        row[uniq, i] = firstpos
    have = row >= 0
    # clock offsets from the ends of shared instances, to the lowest rank
    offsets: dict[int, float | None] = {int(ranks[0]): 0.0}
    off_ns = [0] * nr
    for i in range(1, nr):
        shared = have[:, i] & have[:, 0]
        if shared.any():
            est = statistics.median((end[shared, i] - end[shared, 0]).tolist())
            lo = int((start[shared, i] - end[shared, 0]).max())
            hi = int((end[shared, i] - start[shared, 0]).min())
            off_ns[i] = _clamped_offset(est, lo, hi, ranks[i], ranks[0], warnings)
            offsets[int(ranks[i])] = off_ns[i] / 1000.0
        else:
            offsets[int(ranks[i])] = None
            warnings.append(_no_shared_collective(ranks[i], ranks[0]))
    off = np.array(off_ns, dtype=np.int64)
    count = have.sum(axis=1)
    matched = count >= 2
    a = np.where(have, start - off, 0)
    b = np.where(have, end - off, 0)
    last = np.where(have, a, small).max(axis=1)
    last_end = np.where(have, b, small).max(axis=1)
    span = b - a
    x = last[:, None] - a
    wait = np.where(x < 0, 0, np.where(x > span, span, x))
    wait = np.where(have & matched[:, None], wait, 0)  # one rank only: wait unknown, all of it transfer
    unmatched = [int(u) for u in (have & ~matched[:, None]).sum(axis=0)]
    transfer_ns = np.where(last_end > last, last_end - last, 0)
    score = np.where(have, wait, small).max(axis=1) + transfer_ns
    starts_r, wait_end_r, ends_r, place_r, row_split = [], [], [], [], []
    for i, (_, _, _, _, _, unit, phase) in enumerate(columns):
        sel = np.flatnonzero(have[:, i])  # in key order, as the plain path appends
        s_i, w_i, e_i, r_i = start[sel, i], wait[sel, i], end[sel, i], row[sel, i]
        starts_r.append(s_i.tolist())
        wait_end_r.append((s_i + w_i).tolist())
        ends_r.append(e_i.tolist())
        rows = r_i.tolist()
        place_r.append([(_none(unit[j]), _none(phase[j])) for j in rows])
        row_split.append(
            dict(
                zip(
                    rows,
                    zip(
                        [w / 1000.0 for w in w_i.tolist()],
                        [t / 1000.0 for t in (e_i - s_i - w_i).tolist()],
                        strict=True,
                    ),
                    strict=True,
                )
            )
        )
    inst = np.flatnonzero(matched)  # instances in key order
    first_rank = np.argmax(have, axis=1)  # holders[0]: the lowest rank holding the key
    first_row = row[np.arange(nk), first_rank]
    keys_by_id = list(index)
    types = [
        columns[fr][1][j] for fr, j in zip(first_rank[inst].tolist(), first_row[inst].tolist(), strict=True)
    ]
    nbytes = [
        columns[fr][2][j] for fr, j in zip(first_rank[inst].tolist(), first_row[inst].tolist(), strict=True)
    ]
    bandwidth = _bandwidth(
        list(zip(types, nbytes, transfer_ns[inst].tolist(), count[inst].tolist(), strict=True))
    )
    order = inst[np.argsort(-score[inst], kind="stable")[:top]]  # = heapq.nlargest (stable) on score
    per_rank: list[dict[Any, list[Any]]] = [{} for _ in ranks]
    tops = []
    for k_id in order.tolist():
        holders = np.flatnonzero(have[k_id]).tolist()
        k = keys_by_id[k_id]
        for i in holders:
            j = int(row[k_id, i])
            _, types_i, nbytes_i, _, _, unit, phase = columns[i]
            per_rank[i][k] = [types_i[j], nbytes_i[j], 0, 0, _none(unit[j]), _none(phase[j]), j]
        aligned = [(int(a[k_id, i]), int(b[k_id, i])) for i in holders]
        waits = [int(wait[k_id, i]) for i in holders]
        tops.append(_instance(per_rank, ranks, (0, int(transfer_ns[k_id]), k, holders, aligned, waits)))
    first_start = np.where(have, a, big).min(axis=1)
    late = [
        (a[inst, i] - first_start[inst])[have[inst, i]].tolist() for i in range(nr)
    ]  # matched instances, in key order
    return _result(
        ranks, method, offsets, warnings, unmatched, int(inst.size), starts_r, wait_end_r, ends_r, place_r,
        exposed, bandwidth, tops, row_split, late,
    )  # fmt: skip


def _instance(per_rank: list[dict[Any, list[Any]]], ranks: Sequence[int], x: tuple) -> dict[str, Any]:
    """One matched collective as the ``top`` entry of docs/DATA.md."""
    _, transfer_ns, k, holders, aligned, waits = x
    v0 = per_rank[holders[0]][k]
    first = min(s for s, _ in aligned)
    v0 = {"type": v0[0], "bytes": v0[1], "unit": v0[4], "phase": v0[5]}
    rows = [
        {
            "rank": int(ranks[i]),
            "skew_us": (s - first) / 1000.0,
            "wait_us": w / 1000.0,
            "transfer_us": (e - s - w) / 1000.0,
        }
        for i, (s, e), w in zip(holders, aligned, waits, strict=True)
    ]
    return {
        "key": list(k),
        "type": v0["type"],
        "bytes": v0["bytes"],
        "unit": v0["unit"],
        "phase": v0["phase"],
        "ranks": len(holders),
        "last_rank": int(ranks[holders[max(range(len(aligned)), key=lambda j: aligned[j][0])]]),
        "wait_us": max(waits) / 1000.0,
        "transfer_us": transfer_ns / 1000.0,
        "per_rank": rows,
    }


def _bandwidth(instances: list[tuple[str, Any, int, int]]) -> dict[str, dict[str, Any]]:
    """Per type: ``count`` and ``transfer_us`` (Σ transfer time: last arrival to last end) over every
    matched instance; ``sized`` of them have a known size, and over those: algbw = Σ bytes / Σ their
    transfer time, busbw = Σ (bytes x nccl-tests factor(n)) / the same time; GB/s (1e9 B/s).
    ``instances``: (type, bytes or None, transfer ns, ranks) of each matched instance, in key order."""
    # [Σ bytes, Σ bus bytes, Σ sized transfer ns, count, Σ transfer ns, sized count]
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0, 0, 0])
    for kind, b, transfer_ns, n in instances:
        a = acc[kind]
        a[3] += 1
        a[4] += max(transfer_ns, 0)
        if b is None:
            continue
        a[5] += 1
        if transfer_ns <= 0:
            continue
        factor = BUSBW_FACTOR.get(kind)
        a[0] += b
        a[1] += b * (factor(n) if factor else float("nan"))
        a[2] += transfer_ns
    return {
        t: {
            "count": int(a[3]),
            "sized": int(a[5]),
            "transfer_us": a[4] / 1000.0,
            "algbw_gbps": a[0] / a[2] if a[2] else None,
            "busbw_gbps": (a[1] / a[2] if a[1] == a[1] else None) if a[2] else None,
        }
        for t, a in sorted(acc.items())
    }
