"""FSDP2's hook ranges cut into (unit, phase) windows, for every layout and torch version that writes them
(docs/attribution.md "FSDP2's windows", with the library source line behind each rule).

Pure Python over a few ranges per unit and step (never over the events): :func:`windows` takes the
parsed hook ranges of one trace (:class:`Hook`) and returns :class:`Window` s. The rules:

* **Sessions**: each ``FSDP::root_pre_forward`` opens a forward *session* of one root on its thread,
  bounded by the next ``root_pre_forward`` there, the first backward range or the first optimizer step
  after it. The root's forward window is the session: from ``root_pre_forward`` to the end of the last
  forward range in it (the root's own group when it has one, else the last unit's ``post_forward``: a
  root without parameters of its own, torchtitan's layout, records no ``pre_forward``/``post_forward``).
* **Passes**: sessions with no backward range or optimizer step between them make one forward pass.
  Several roots in one pass (an RL actor and its reference model, teacher and student) write the same
  FQNs: every root but the last of the pass gets its units prefixed ``root#2/``, ``root#3/`` … (its root
  ``root#2`` …); a session whose units are a strict subset of an earlier one's in the pass (a standalone
  call of one unit, e.g. a chunked loss calling the output layer) belongs to that earlier root, and so
  does a session whose units all skipped their ``post_forward`` (torch_npu: their groups ran a forward
  before, so they are that earlier root's).
* **Named units** (torch ≥ 2.5, ``_with_fqn``): per unit and thread, a window opens at an opening range
  (``pre_forward``, ``pre_backward``) that follows a closing one, or a new session, and ends at the
  furthest end of the ranges up to the next such opening. A forward window with no ``post_forward``
  (torch_npu's patched ``post_forward`` returns early after an earlier forward until the next
  post-backward) closes at the next unit's ``pre_forward`` on its thread, or the forward's end.
* **Root backward**: the root's backward window opens at its own group's ``pre_backward`` (no FQN) when
  it has one, else at the first backward range after the forward (a root without parameters records
  only ``root_post_backward_callback``), and ends with the last ``root_post_backward_callback``.
* **Unnamed units** (torch 2.3/2.4, no FQN in any label; or each block its own root, FQN ""): forward
  ranges are paired by nesting (a ``post_forward`` closes the innermost open ``pre_forward``; repeated
  `` [pg=N]`` ranges of one module's parameter groups count once), windows
  numbered ``unit#1`` … in forward order within a pass (the module type added, ``unit#2 (Block)``, where
  the trace holds ``nn.Module: <type>_<n>`` ranges), the one that contains its session's others being the
  root's group; backward windows take the units in reverse order of their forward's end (autograd runs
  the backward in reverse), and a run of ``post_backward_*`` ranges closes the most recently opened unit,
  or inside ``root_post_backward_callback`` (which post-backwards the groups whose inputs need no grad,
  root first) the first opened in forward order.

Windows are assigned to events by containment (:func:`fsdpbench.analysis.rank.attribution.innermost`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

ROOT = "root"
FORWARD_KINDS = ("root_pre_forward", "pre_forward", "post_forward")
BACKWARD_KINDS = (
    "pre_backward",
    "post_backward_accumulate",
    "post_backward_reshard",
    "post_backward_rs_wait",
    "post_backward_reduce",
    "root_post_backward_callback",
    "finalize_backward",
)
ROOT_BACKWARD_KINDS = ("root_post_backward_callback", "finalize_backward")
"""A state's ranges with no FQN that end a backward: the engine's final callback, and torch 2.15's
``FSDP::finalize_backward`` (``_fsdp_state.py:466``; run inside the callback, or alone by the manual
finalization API): the root's backward extends to their end."""
_INF = 1 << 62
_PG = " [pg="


@dataclass(frozen=True)
class Hook:
    """One FSDP2 hook range: kind (``pre_forward`` …), the FQN of its label (None: no ``(…)``; "" for
    ``()``), thread (lane code), [start, end) ns, and its name as written."""

    kind: str
    fqn: str | None
    lane: int
    start: int
    end: int
    name: str

    def describe(self) -> str:
        """The range as ``--explain`` lists it: its name (a window starts at its opener's start and ends
        at its closer's end)."""
        return self.name


@dataclass
class Window:
    """A (unit, phase) window on one thread, with the ranges that opened and closed it."""

    unit: str
    phase: str
    lane: int
    start: int
    end: int
    opened_by: str
    closed_by: str
    session: int = -1
    closes: bool = False
    """A closing range (``post_forward``, ``post_backward_*``) came since it opened."""
    forward_start: int = 0
    pending: int = 0
    """Further parameter groups of the unit (`` [pg=N]``, torch 2.12+) whose opening range joined this
    unnamed window: as many closing ranges (or post-backward runs) more before it is closed."""


@dataclass
class Built:
    """The windows of a trace, with what the output must say about how they were made."""

    windows: list[Window] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class _Session:
    hook: Hook
    bound: int
    index: int
    units: set[str] = field(default_factory=set)
    prefix: str = ""
    skipped: bool = False
    """Every unit window of the session lacks its ``post_forward``: torch_npu skipped them, so its groups
    ran a forward before (the same root as an earlier session with these units)."""


class _Sessions(list):
    """The sessions in start order, and per thread their starts and themselves (for :func:`_session_of`)."""

    def __init__(self, sessions: list[_Session]) -> None:
        super().__init__(sessions)
        self.by_lane: dict[int, tuple[list[int], list[_Session]]] = {}
        self.of_hook = {id(s.hook): s for s in sessions}
        for s in sessions:
            starts, found = self.by_lane.setdefault(s.hook.lane, ([], []))
            starts.append(s.hook.start)
            found.append(s)


def _first_after(sorted_starts: list[int], t: int) -> int:
    i = bisect.bisect_right(sorted_starts, t)
    return sorted_starts[i] if i < len(sorted_starts) else _INF


def windows(
    hooks: list[Hook], optimizer_starts: list[int], module_types: dict[int, list[tuple[int, int, str]]]
) -> Built:
    """The (unit, phase) windows of one trace's FSDP2 hook ranges (module docstring).

    Args:
        hooks: every host FSDP2 hook range of the trace.
        optimizer_starts: starts (ns) of the optimizer steps (a forward pass ends at one).
        module_types: per lane, ``(start, end, type)`` of the ``nn.Module: <type>_<n>`` ranges (may be
            empty), to name unnamed units.
    """
    hooks = sorted(hooks, key=lambda h: (h.start, -h.end))
    out = Built()
    bwd_starts = sorted(h.start for h in hooks if h.kind in BACKWARD_KINDS)
    opt_starts = sorted(optimizer_starts)
    sessions = _sessions(hooks, bwd_starts, opt_starts)
    named = any(h.fqn for h in hooks if h.kind in ("pre_forward", "post_forward", "pre_backward"))
    if named:
        _named(hooks, sessions, bwd_starts, opt_starts, out)
    else:
        _unnamed(hooks, sessions, bwd_starts, opt_starts, module_types, out)
    _root_backward(hooks, sessions, opt_starts, out)
    return out


def _sessions(hooks: list[Hook], bwd_starts: list[int], opt_starts: list[int]) -> _Sessions:
    """Each ``root_pre_forward``'s session, its bound (module docstring), in start order."""
    rpf = [h for h in hooks if h.kind == "root_pre_forward"]
    out = []
    for i, h in enumerate(rpf):
        nxt = next((g.start for g in rpf[i + 1 :] if g.lane == h.lane), _INF)
        bound = min(nxt, _first_after(bwd_starts, h.start), _first_after(opt_starts, h.start))
        out.append(_Session(h, bound, i))
    return _Sessions(out)


def _session_of(sessions: _Sessions, h: Hook) -> int:
    """Index of the session ``h`` lies in (same thread, inside its bound), -1 for none."""
    starts, found = sessions.by_lane.get(h.lane, ([], []))
    i = bisect.bisect_right(starts, h.start) - 1
    if i >= 0 and h.start < found[i].bound:
        return found[i].index
    return -1


def _passes(sessions: list[_Session], bwd_starts: list[int], opt_starts: list[int]) -> list[list[_Session]]:
    """Sessions grouped into forward passes: no backward range or optimizer step between two of a pass."""
    out: list[list[_Session]] = []
    for s in sessions:
        if out:
            prev = out[-1][-1].hook.start
            cut = min(_first_after(bwd_starts, prev), _first_after(opt_starts, prev))
            if cut > s.hook.start:
                out[-1].append(s)
                continue
        out.append([s])
    return out


def _forward_end(
    h_start: int, sessions: _Sessions, session: int, bwd_starts: list[int], opt_starts: list[int]
) -> int:
    if session >= 0:
        return sessions[session].bound
    return min(_first_after(bwd_starts, h_start), _first_after(opt_starts, h_start))


def _close_skipped(
    fwd: list[Window],
    pre_starts: dict[int, list[tuple[int, str, str]]],
    sessions: _Sessions,
    bwd_starts: list[int],
    opt_starts: list[int],
    out: Built,
) -> None:
    """Forward windows without a ``post_forward``: closed at the next unit's ``pre_forward`` on their
    thread or the forward's end (torch_npu's skipped post-forward)."""
    skipped = 0
    for w in fwd:
        if w.closes:
            continue
        starts = pre_starts.get(w.lane, [])
        i = bisect.bisect_right(starts, (w.start, "\uffff", ""))
        nxt = next(((s, name) for s, unit, name in starts[i:] if unit != w.unit), None)
        end = _forward_end(w.start, sessions, w.session, bwd_starts, opt_starts)
        if nxt is not None and nxt[0] < end:
            end, why = nxt[0], f"the next unit's {nxt[1]}"
        else:
            why = "the forward's end (the next root_pre_forward, backward range or optimizer step)"
        if end >= _INF:
            continue
        w.end = max(w.end, end)
        w.closed_by = f"no post_forward: {why}"
        skipped += 1
    if skipped:
        out.notes.append(
            f"{skipped} FSDP2 forward window(s) without FSDP::post_forward (torch_npu's fully_shard skips it "
            "after an earlier forward until the next backward): closed at the next unit's pre_forward or the "
            "forward's end"
        )


def _prefix_roots(sessions: _Sessions, bwd_starts: list[int], opt_starts: list[int], out: Built) -> None:
    """Every root but the last of a pass named ``root#2`` …, its units prefixed (module docstring)."""
    n_roots = 0
    for p in _passes(sessions, bwd_starts, opt_starts):
        roots: list[list[_Session]] = []
        for s in p:
            owner = next(
                (
                    r
                    for r in reversed(roots)
                    if any(s.units < o.units or (s.skipped and s.units <= o.units) for o in r)
                ),
                None,
            )
            if owner is not None:
                owner.append(s)
            else:
                roots.append([s])
        for k, r in enumerate(roots[:-1]):
            for s in r:
                s.prefix = f"{ROOT}#{k + 2}"
        n_roots = max(n_roots, len(roots))
    if n_roots > 1:
        out.notes.append(
            f"{n_roots} FSDP2 roots in one forward pass: the units of all but the last are named root#2/… "
            "(FQNs are relative to each root)"
        )


def _named(
    hooks: list[Hook], sessions: _Sessions, bwd_starts: list[int], opt_starts: list[int], out: Built
) -> None:
    open_at: dict[tuple[str, str, int], Window] = {}
    fwd: list[Window] = []
    pre_starts: dict[int, list[tuple[int, str, str]]] = {}
    root_fwd: dict[int, Window] = {}
    for h in hooks:
        if h.kind == "root_pre_forward":
            s = sessions.of_hook[id(h)]
            w = Window(ROOT, "forward", h.lane, h.start, h.end, h.describe(), h.describe(), s.index, True)
            root_fwd[s.index] = w
            out.windows.append(w)
            continue
        if h.kind in ROOT_BACKWARD_KINDS:
            continue  # _root_backward
        unit = h.fqn or ROOT
        phase = "forward" if h.kind in FORWARD_KINDS else "backward"
        session = _session_of(sessions, h) if phase == "forward" else -1
        if phase == "forward" and h.kind == "pre_forward":
            pre_starts.setdefault(h.lane, []).append((h.start, unit, h.name))
        if phase == "forward" and session >= 0:
            sessions[session].units.add(unit)
            if unit == ROOT:  # the root's own group: inside the session's window
                r = root_fwd[session]
                if h.end > r.end:
                    r.end, r.closed_by = h.end, h.describe()
                continue
        opens = h.kind in ("pre_forward", "pre_backward")
        key = (unit, phase, h.lane)
        w = open_at.get(key)
        if w is None or (opens and (w.closes or (phase == "forward" and w.session != session))):
            w = Window(unit, phase, h.lane, h.start, h.end, h.describe(), h.describe(), session)
            open_at[key] = w
            out.windows.append(w)
            if phase == "forward":
                fwd.append(w)
        elif h.end > w.end:
            w.end, w.closed_by = h.end, h.describe()
        if not opens:
            w.closes = True
    by_session: dict[int, list[Window]] = {}
    for w in fwd:
        by_session.setdefault(w.session, []).append(w)
    _extend_roots(root_fwd, by_session)
    for s in sessions:
        mine = by_session.get(s.index, [])
        s.skipped = bool(mine) and not any(w.closes for w in mine)
    for starts in pre_starts.values():
        starts.sort()
    _close_skipped(fwd, pre_starts, sessions, bwd_starts, opt_starts, out)
    _extend_roots(root_fwd, by_session)  # a skipped post_forward may now end a unit later
    _prefix_roots(sessions, bwd_starts, opt_starts, out)
    for w in out.windows:
        if w.phase == "forward" and w.session >= 0 and (p := sessions[w.session].prefix):
            w.unit = p if w.unit == ROOT else f"{p}/{w.unit}"


def _extend_roots(root_fwd: dict[int, Window], by_session: dict[int, list[Window]]) -> None:
    """Each root's forward window to the end of the last forward window of its session."""
    for index, r in root_fwd.items():
        for w in by_session.get(index, []):
            if w.end > r.end:
                r.end, r.closed_by = w.end, w.closed_by


def _module_type(module_types: dict[int, list[tuple[int, int, str]]], lane: int, t: int) -> str | None:
    """The innermost ``nn.Module`` range's type on ``lane`` around ``t`` (the module whose hook ran)."""
    best = None
    for s, e, typ in module_types.get(lane, []):
        if s <= t < e and (best is None or s >= best[0]):
            best = (s, e, typ)
    return None if best is None else best[2]


def _unnamed(
    hooks: list[Hook],
    sessions: _Sessions,
    bwd_starts: list[int],
    opt_starts: list[int],
    module_types: dict[int, list[tuple[int, int, str]]],
    out: Built,
) -> None:
    passes = _passes(sessions, bwd_starts, opt_starts)
    pass_of = {s.index: k for k, p in enumerate(passes) for s in p}
    fwd_by_pass: dict[int, list[Window]] = {}
    stacks: dict[int, list[Window]] = {}
    pre_starts: dict[int, list[tuple[int, str, str]]] = {}
    all_fwd: list[Window] = []
    for h in hooks:
        if h.kind not in ("pre_forward", "post_forward"):
            continue
        session = _session_of(sessions, h)
        if session < 0:
            continue  # outside a root's forward (a recomputation): no number to give it
        stack = stacks.setdefault(session, [])
        if h.kind == "pre_forward" and stack and _PG in h.name and stack[-1].opened_by == h.name:
            stack[-1].pending += 1  # another parameter group of the same module
            continue
        if h.kind == "pre_forward":
            w = Window("", "forward", h.lane, h.start, h.end, h.describe(), h.describe(), session)
            w.forward_start = h.start
            stack.append(w)
            fwd_by_pass.setdefault(pass_of[session], []).append(w)
            all_fwd.append(w)
            pre_starts.setdefault(h.lane, []).append((h.start, str(id(w)), h.name))
        elif stack:
            w = stack[-1]
            if w.pending:
                w.pending -= 1
            else:
                stack.pop()
            w.end, w.closed_by, w.closes = max(w.end, h.end), h.describe(), True
    for w in all_fwd:
        w.unit = str(id(w))  # distinct until named, for the skipped-post_forward rule
    for starts in pre_starts.values():
        starts.sort()
    _close_skipped(all_fwd, pre_starts, sessions, bwd_starts, opt_starts, out)
    for k, p in enumerate(passes):
        ws = fwd_by_pass.get(k, [])
        roots: set[int] = set()
        for s in p:
            mine = [w for w in ws if w.session == s.index]
            first = mine[0] if mine else None
            if (
                first is not None
                and (len(p) == 1 or len(mine) > 1)
                and all(first.start <= w.start and w.end <= first.end for w in mine)
            ):
                roots.add(id(first))  # the root's own group
                first.unit, first.start, first.opened_by = ROOT, s.hook.start, s.hook.describe()
            else:
                end = max([s.hook.end, *(w.end for w in mine)])
                if len(mine) == 1 and len(p) > 1:  # each block its own root: the block's window from there
                    mine[0].start, mine[0].opened_by = s.hook.start, s.hook.describe()
                    continue
                out.windows.append(
                    Window(
                        ROOT,
                        "forward",
                        s.hook.lane,
                        s.hook.start,
                        end,
                        s.hook.describe(),
                        max(mine, key=lambda w: w.end).closed_by if mine else s.hook.describe(),
                        s.index,
                        True,
                    )
                )
        n = 0
        for w in ws:
            if id(w) in roots:
                continue
            n += 1
            typ = _module_type(module_types, w.lane, w.forward_start)
            w.unit = f"unit#{n}" + (f" ({typ})" if typ else "")
        out.windows.extend(ws)
        nxt = passes[k + 1][0].hook.start if k + 1 < len(passes) else _INF
        _unnamed_backward(hooks, ws, p[0].hook.start, nxt, opt_starts, out)
    if any(w.unit.startswith("unit#") for w in out.windows):
        out.notes.append(
            "FSDP2 ranges name no module (torch 2.3/2.4, or each block its own root): units are numbered in "
            "forward order (unit#1 …, with the module type where the trace names it), the root's group by "
            "nesting"
        )


def _unnamed_backward(
    hooks: list[Hook], fwd: list[Window], start: int, stop: int, opt_starts: list[int], out: Built
) -> None:
    """The backward windows of one pass's unnamed units (module docstring)."""
    stop = min(stop, _first_after(opt_starts, start))
    bwd = [h for h in hooks if h.kind in BACKWARD_KINDS and start <= h.start < stop]
    if not bwd:
        return
    order = sorted(fwd, key=lambda w: (-w.end, -w.start))  # autograd: reverse of the forward
    callbacks = [h for h in bwd if h.kind == "root_post_backward_callback"]
    accumulate = any(h.kind == "post_backward_accumulate" for h in hooks)
    first_kind = "post_backward_accumulate" if accumulate else "post_backward_reshard"
    opened: list[tuple[Window, int]] = []  # (backward window, forward start), open ones
    made: list[Window] = []
    k = 0
    run: Window | None = None
    for h in bwd:
        if h.kind in ROOT_BACKWARD_KINDS:
            continue
        if h.kind == "pre_backward":
            last_open = opened[-1][0] if opened else None
            if (
                run is None
                and made
                and last_open is made[-1]
                and _PG in h.name
                and made[-1].opened_by == h.name
            ):
                made[-1].pending += 1  # another parameter group of the same module
                continue
            run = None
            k += 1
            if k > len(order):
                continue
            unit = order[k - 1]
            w = Window(unit.unit, "backward", h.lane, h.start, h.end, h.describe(), h.describe())
            opened.append((w, unit.forward_start))
            made.append(w)
            continue
        if run is None or h.kind == first_kind:
            in_cb = any(c.lane == h.lane and c.start <= h.start < c.end for c in callbacks)
            if not opened:
                run = None
                continue
            pick = min(opened, key=lambda x: x[1]) if in_cb else opened[-1]
            if pick[0].pending:
                pick[0].pending -= 1
            else:
                opened.remove(pick)
            run = pick[0]
            run.closes = True
        if h.end > run.end:
            run.end, run.closed_by = h.end, h.describe()
    if k != len(order):
        out.notes.append(
            f"{k} unnamed FSDP2 backward units but {len(order)} forward units in a pass: backward windows "
            "named by order may be off"
        )
    out.windows.extend(made)


def _root_backward(hooks: list[Hook], sessions: list[_Session], opt_starts: list[int], out: Built) -> None:
    """The root's backward windows (module docstring): its own group's, else from the first backward
    range after the forward, to the end of ``root_post_backward_callback``."""
    callbacks = [h for h in hooks if h.kind in ROOT_BACKWARD_KINDS]
    root_bwd = [w for w in out.windows if w.unit == ROOT and w.phase == "backward"]
    session_starts = sorted(s.hook.start for s in sessions)
    opt = sorted(opt_starts)
    bwd_by_lane: dict[int, tuple[list[int], list[Hook]]] = {}
    for h in hooks:  # in start order
        if h.kind in BACKWARD_KINDS:
            starts, found = bwd_by_lane.setdefault(h.lane, ([], []))
            starts.append(h.start)
            found.append(h)
    for c in callbacks:
        i = bisect.bisect_right(session_starts, c.start)
        last_session = session_starts[i - 1] if i else -_INF
        # the root's backward window this callback ends: the latest on its thread opened since the forward
        own = [w for w in root_bwd if w.lane == c.lane and last_session <= w.start <= c.start]
        if own:
            w = own[-1]
            if c.end > w.end:
                w.end, w.closed_by = c.end, c.describe()
            continue
        # a root without a group of its own: from the first backward range since the forward
        j = bisect.bisect_right(opt, c.start)
        since = max(last_session, opt[j - 1] if j else -_INF)
        since = max([since, *(w.end for w in root_bwd if w.lane == c.lane and w.end <= c.start)])
        starts, found = bwd_by_lane[c.lane]
        k = bisect.bisect_left(starts, since)
        first = found[k] if k < len(found) and found[k].start <= c.start else c
        w = Window(ROOT, "backward", c.lane, first.start, c.end, first.describe(), c.describe(), closes=True)
        out.windows.append(w)
        root_bwd.append(w)
