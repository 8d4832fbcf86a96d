"""FSDP1's units from the nesting of its ranges: the (unit, phase) windows of a ``FullyShardedDataParallel``
profile, whose labels name no module (docs/attribution.md "FSDP1: units by nesting").

torch-free: numpy on the :class:`~fsdpbench.trace.table.EventTable` columns. FSDP1 writes the same labels
in every torch version 2.4–2.15 (reference: torch 2.13 ``fsdp/fully_sharded_data_parallel.py:838``,
``fsdp/_runtime_utils.py:653,722``):

* **forward**: each ``FullyShardedDataParallel.forward`` range is one unit's forward, as it is; an FSDP
  module's forward calls its children's, so the ranges nest as the units do. A unit is named by its place
  in that nesting: the outermost (the root) ``root``, the k-th unit whose forward starts inside the root's
  ``#k``, the j-th inside that one ``#k.j`` (0-based, in start order): the same names in every microbatch.
  A forward range inside an autograd engine range (activation checkpointing's recomputation) is left to
  the backward window it runs in.
* **backward**: ``FullyShardedDataParallel._pre_backward_hook`` opens a unit's backward (once per unit:
  the hook returns before its range when it already ran for the unit's handle), its
  ``FullyShardedDataParallel._post_backward_hook`` (the flat parameter's gradient is ready; the
  reduce-scatter is launched inside) closes it. The windows of one thread nest as the units do (the
  root's opens first and closes last), so a post-backward hook closes the innermost open window of its
  thread; a window no post-backward hook closes (a unit without parameters of its own, no flat
  parameter) ends with the last backward hook of its thread before the next forward. The k-th
  pre-backward hook after a forward is the unit whose forward *ended* k-th last in it (gradients arrive
  in reverse order of the outputs: the root's first, then the last block's …); when the hooks and the
  forward's units do not add up (a unit whose output needs no gradient fires no hook), FSDP1's ranges
  give no units (the phases-only source is used).
* **optimizer**: ``Optimizer.step#…`` and ``Optimizer.zero_grad#…`` (``phase_ranges.OPTIMIZER``).
"""

from __future__ import annotations

import numpy as np

from fsdpbench.analysis.rank import phase_ranges
from fsdpbench.analysis.rank.windows import ALL_UNITS, ROOT, Ranges, host_rows
from fsdpbench.trace.table import EventTable

SOURCE = "FSDP1 ranges (units by nesting)"
"""The name of this source of (unit, phase) windows in the output (``units_source``)."""
FORWARD = "FullyShardedDataParallel.forward"
PRE_BACKWARD = "FullyShardedDataParallel._pre_backward_hook"
POST_BACKWARD = "FullyShardedDataParallel._post_backward_hook"
_ENGINE = "autograd::engine::evaluate_function: "


def _codes(t: EventTable, name: str) -> list[int]:
    return [i for i, c in enumerate(t.name.categories) if str(c) == name]


def _by_start(t: EventTable, rows: np.ndarray) -> np.ndarray:
    """``rows`` in start order, the longer first at equal starts."""
    return rows[np.lexsort((-t.end_ns[rows], t.start_ns[rows]))]


def _forwards(t: EventTable) -> tuple[np.ndarray, list[str], list[list[int]]]:
    """The forward ranges (rows, start order), their unit names, and per root forward (an outermost one)
    the positions of its ranges in reverse order of their ends (the order their backward runs)."""
    rows = _by_start(t, host_rows(t, _codes(t, FORWARD)))
    engine = host_rows(t, [i for i, c in enumerate(t.name.categories) if str(c).startswith(_ENGINE)])
    if rows.size and engine.size:  # recomputation inside a backward: not a forward window
        lane_e, s_e, e_e = t.lane.codes[engine], t.start_ns[engine], t.end_ns[engine]
        inside = [
            bool(((lane_e == t.lane.codes[r]) & (s_e <= t.start_ns[r]) & (e_e >= t.end_ns[r])).any())
            for r in rows.tolist()
        ]
        rows = rows[~np.asarray(inside, dtype=bool)]
    names: list[str] = []
    roots: list[list[int]] = []
    stack: list[tuple[int, tuple[int, ...], list[int]]] = []  # (end, path, [children seen]) per open range
    for k, r in enumerate(rows.tolist()):
        start, end = int(t.start_ns[r]), int(t.end_ns[r])
        while stack and stack[-1][0] <= start:
            stack.pop()
        if not stack:
            path: tuple[int, ...] = ()
            roots.append([])
        else:
            path = (*stack[-1][1], stack[-1][2][0])
            stack[-1][2][0] += 1
        stack.append((end, path, [0]))
        names.append(ROOT if not path else "#" + ".".join(map(str, path)))
        roots[-1].append(k)
    for members in roots:
        members.sort(key=lambda k: -int(t.end_ns[rows[k]]))
    return rows, names, roots


def fsdp1_ranges(t: EventTable) -> Ranges:
    """FSDP1's (unit, phase) windows of ``t`` (module docstring); empty when ``t`` holds no
    ``FullyShardedDataParallel.forward`` range or its backward hooks do not match its forward's units."""
    none = Ranges(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), [], [])
    rows, names, roots = _forwards(t)
    if not rows.size:
        return none
    lane = [int(t.lane.codes[r]) for r in rows.tolist()]
    start = [int(t.start_ns[r]) for r in rows.tolist()]
    end = [int(t.end_ns[r]) for r in rows.tolist()]
    unit = list(names)
    phase = ["forward"] * len(names)
    root_start = [min(start[k] for k in m) for m in roots]
    root_end = [max(end[k] for k in m) for m in roots]
    used = [0] * len(roots)
    pre = host_rows(t, _codes(t, PRE_BACKWARD))
    post = host_rows(t, _codes(t, POST_BACKWARD))
    hooks = np.concatenate([pre, post])
    is_pre = np.concatenate([np.ones(pre.size, bool), np.zeros(post.size, bool)])
    order = np.lexsort((-t.end_ns[hooks], t.start_ns[hooks]))
    open_windows: dict[int, list[int]] = {}  # lane → indices of its open backward windows, innermost last
    for h, opens in zip(hooks[order].tolist(), is_pre[order].tolist(), strict=True):
        h_lane, h_start, h_end = int(t.lane.codes[h]), int(t.start_ns[h]), int(t.end_ns[h])
        if opens:
            before = [i for i in range(len(roots)) if root_end[i] <= h_start]
            if not before or used[before[-1]] >= len(roots[before[-1]]):
                return none  # a pre-backward hook no forward unit is left for
            i = before[-1]
            k = roots[i][used[i]]
            used[i] += 1
            open_windows.setdefault(h_lane, []).append(len(unit))
            lane.append(h_lane)
            start.append(h_start)
            end.append(h_end)
            unit.append(names[k])
            phase.append("backward")
        elif open_windows.get(h_lane):
            w = open_windows[h_lane].pop()
            end[w] = max(end[w], h_end)
    if any(0 < u < len(m) for u, m in zip(used, roots, strict=True)):
        return none  # a forward whose units fired only some of their hooks
    unclosed = [w for ws in open_windows.values() for w in ws]
    if unclosed:  # each ends with its thread's last backward hook before the next forward
        h_lane = t.lane.codes[hooks]
        for w in unclosed:
            nxt = [s for s in root_start if s > start[w]]
            cut = min(nxt) if nxt else np.iinfo(np.int64).max
            mine = (h_lane == lane[w]) & (t.start_ns[hooks] >= start[w]) & (t.start_ns[hooks] < cut)
            end[w] = max(end[w], int(t.end_ns[hooks][mine].max()))
    opt = host_rows(
        t, [i for i, c in enumerate(t.name.categories) if str(c).startswith(phase_ranges.OPTIMIZER)]
    )
    return Ranges(
        lane=np.concatenate([np.asarray(lane, np.int64), t.lane.codes[opt].astype(np.int64)]),
        start_ns=np.concatenate([np.asarray(start, np.int64), t.start_ns[opt]]),
        end_ns=np.concatenate([np.asarray(end, np.int64), t.end_ns[opt]]),
        unit=[*unit, *[ALL_UNITS] * opt.size],
        phase=[*phase, *["optimizer"] * opt.size],
        source=SOURCE,
    )
