"""What-ifs as edits of the joined step graph (:mod:`fsdpbench.analysis.crossrank.replay_schedule`), replayed
(docs/replay.md "What-ifs"): :func:`parse_edit`, :func:`apply_edit` (scale, straggler, regroup with the
α–β fits and the host work's per-call price, prefetch, delay), :func:`what_if` / :func:`what_if_row`, and
the closed-form fallback (:func:`closed_form_row`) that answers where the graph refuses an edit.

Imports go one way: ``replay_edits`` → this module → ``replay_schedule``; the facade
:mod:`fsdpbench.analysis.crossrank.replay` imports both.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from statistics import median
from typing import Any

import numpy as np

from fsdpbench.analysis.crossrank.replay_excess import median as median_np  # np.median's numbers
from fsdpbench.analysis.crossrank.replay_excess import n_steps, task_steps
from fsdpbench.analysis.crossrank.replay_graph import (
    K_GAP,
    K_LAUNCH,
    K_QUEUE_GAP,
    K_TRANSFER,
    K_WAIT,
    KINDS,
    _unique_sorted,
)
from fsdpbench.analysis.crossrank.replay_schedule import CycleError, Reading, StepGraph, read, schedule
from fsdpbench.errors import ConfigError
from fsdpbench.records import finite

log = logging.getLogger(__name__)

SOURCE_REPLAY = "replay"
SOURCE_CLOSED = "closed form"

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

        if edit.target == "queue_gap":  # an edge latency, not a task: the lanes' kept dispatch gaps × f
            qg = out.ekind == K_QUEUE_GAP
            if not qg.any():
                raise ConfigError(f"--what-if {edit.text!r}: the graph keeps no queue gap")
            out.ew[qg] = np.rint(out.ew[qg] * edit.factor).astype(np.int64)
            return out
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
                target = median_np(others) if others else totals[i]
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
        at_place = np.flatnonzero(on_main & np.isin(out.place, pl))
        if not at_place.size:
            raise ConfigError(
                f"--what-if {edit.text!r}: rank {gr.rank} has no task of its training thread at ({edit.unit}, "
                f"{edit.phase})"
            )
        # a delay= arm sleeps in every step: the edit adds or removes MS in each step of the window
        steps = task_steps(out)[at_place] if n_steps(out) > 1 else np.zeros(at_place.size, dtype=np.int64)
        ns = int(round(edit.ms * 1e6))
        short = []
        for k in _unique_sorted(steps).tolist():
            left = _delay_in_step(out, at_place[steps == k], ns)
            if left:
                short.append(
                    f"{(-ns - left) / 1e6:.3f} ms" + (f" in step {k + 1}" if n_steps(out) > 1 else "")
                )
        if short:
            out.notes.append(f"{edit.text}: only {', '.join(short)} of host time found there to remove")
        return out
    if edit.op == "regroup":
        return _regroup(out, edit)
    if edit.op == "prefetch":
        return _prefetch(out, edit)
    raise ConfigError(f"--what-if {edit.text!r}: unknown edit")


def _delay_in_step(out: StepGraph, sel: np.ndarray, ns: int) -> int:
    """Add ``ns`` (≥ 0) to the first host gap of ``sel`` (a place's main-thread tasks in one step; a sleep is
    host time between operators), or remove ``-ns`` of host time there: where "add" puts it first (the
    first host gap: a delay at the start of the unit's phase, docs/replay.md), then the other host gaps, the
    longest first, then launch calls. Returns the ns it could not remove (0: all of it)."""
    if ns >= 0:
        gaps = sel[out.kind[sel] == K_GAP]
        first = gaps[np.argmin(out.meas[gaps])] if gaps.size else sel[np.argmin(out.meas[sel])]
        out.dur[first] += ns
        return 0
    left = -ns
    gaps = sel[out.kind[sel] == K_GAP]
    first = gaps[np.argmin(out.meas[gaps])] if gaps.size else None
    for kind in (K_GAP, K_LAUNCH):
        cand = sel[out.kind[sel] == kind]
        cand = cand[np.argsort(-out.dur[cand], kind="stable")]
        if kind == K_GAP and first is not None:
            cand = np.concatenate([[first], cand[cand != first]])
        for v in cand.tolist():
            take = min(left, int(out.dur[v]))
            out.dur[v] -= take
            left -= take
            if not left:
                return 0
    return left


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
    return np.where(g.rank >= 0, g.rank.astype(np.int64) * 100_000 + lanes, -1)


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
    over the graph's places that hold a collective (non-negative least squares, as analysis/estimate/whatif.py fits α
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
    from fsdpbench.analysis.estimate.whatif import _nnls2

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
    (the type's fit, analysis/estimate/whatif.py); a launching thread no longer blocks between members, and a queue lane
    runs a member's successors once the member has arrived. Counts the calls merged away per (rank, place) in
    ``removed``."""
    from fsdpbench.analysis.estimate.whatif import fit_alpha_beta

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
                        add.append((pred_lane, int(g.edst[e]), int(g.ew[e]), int(g.ekind[e])))
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
        "predicted_step_us": rd.step_us / n_steps(e),
        "phases": {p["phase"]: p["us"] for p in rd.by_phase},
        "changed": changed[:20],
        "source": SOURCE_REPLAY,
        "note": "; ".join(e.notes[len(g.notes) :]) or None,
    }


def what_if_row(res: Any, g: StepGraph, base: Reading, edit: Edit | str) -> dict[str, Any]:
    """:func:`what_if` of ``edit`` on ``res``'s joined graph; where the graph refuses the edit (a rank, unit or
    collective it does not have) or its replay fails (a cycle), the closed form answers instead, with
    ``source: "closed form"`` and a ``note`` saying why (:func:`closed_form_row`).
    A malformed edit, or one naming a rank the profiles do not hold, still raises ConfigError."""
    parsed = parse_edit(edit) if isinstance(edit, str) else edit
    if parsed.rank is not None:
        _rank_pos(g, parsed.rank, parsed)  # no closed form answers for a rank that is not there
    k = n_steps(g)
    try:
        row = what_if(g, base, parsed)
    except ConfigError as exc:
        return closed_form_row(res, parsed, f"the replay cannot apply it ({exc})", base.step_us / k, k)
    if row["predicted_step_us"] is None:
        return closed_form_row(res, parsed, f"its replay gave no step ({row['note']})", base.step_us / k, k)
    return row


def _type_means(data: Mapping[str, Any]) -> dict[str, tuple[float, float | None]]:
    """``{type: (calls, bytes)}`` per rank (mean over ranks; a type a rank lacks counts as 0 there)."""
    ranks = [r for r in data.get("ranks") or [] if isinstance(r, Mapping)]
    out: dict[str, list[float]] = {}
    sizes: dict[str, list[float]] = {}
    for r in ranks:
        for kind, c in (r.get("collectives") or {}).items():
            out.setdefault(kind, []).append(finite((c or {}).get("count")) or 0.0)
            b = finite((c or {}).get("bytes"))
            if b is not None:
                sizes.setdefault(kind, []).append(b)
    n = max(len(ranks), 1)
    return {k: (sum(v) / n, sum(sizes[k]) / n if k in sizes else None) for k, v in out.items()}


# ---------------------------------------------------------------------------------- the closed-form fallback
def _closed_form_delta(res: Any, data: Mapping[str, Any], edit: Any) -> tuple[float | None, str]:
    """The closed form's step-time change (µs) for ``edit`` (a parsed :class:`Edit`)
    and what it assumes; ``(None, why)`` where there is none."""
    from fsdpbench.analysis.estimate import whatif, whatif_units  # the fallback's: imported when it runs

    mean = data.get("mean") or {}
    ranks = [r for r in data.get("ranks") or [] if isinstance(r, Mapping)]
    if edit.op == "delay":
        return edit.ms * 1000.0, "the delay adds to (or comes off) the step in full"
    if edit.op == "straggler":
        key = "compute_us" if all(finite(r.get("compute_us")) is not None for r in ranks) else "step_time_us"
        values = {int(r.get("rank", i)): finite(r.get(key)) for i, r in enumerate(ranks)}
        known = {k: v for k, v in values.items() if v is not None}
        if len(known) < 2:
            return None, "one rank: no other rank to take the median of"
        rank = edit.rank if edit.rank is not None else max(known, key=lambda k: known[k])
        if rank not in known:
            return None, f"no rank {rank} in the analysis"
        others = median(v for k, v in known.items() if k != rank)
        return -max(
            known[rank] - others, 0.0
        ), f"rank {rank}'s {key[:-3]} becomes the median of the other ranks'"
    if edit.op == "scale":
        types = _type_means(data)
        if edit.target not in types:
            return None, f"no closed form for scaling {edit.target!r} (only collective types)"
        times = [
            finite(((r.get("collectives") or {}).get(edit.target) or {}).get("time_us")) or 0.0 for r in ranks
        ]
        comm, exposed = finite(mean.get("comm_us")), finite(mean.get("exposed_comm_us"))
        share = exposed / comm if comm and exposed is not None else 1.0
        delta = (edit.factor - 1.0) * (sum(times) / max(len(times), 1)) * share
        return delta, f"the {edit.target} time × {edit.factor:g}, exposed in the step's exposed share of comm"
    if edit.op == "regroup":
        counts = whatif_units.unit_counts(data)
        types = [t for t in _type_means(data) if edit.target in ("all", t)]
        per_type = {}
        targets = {}
        for t in types:
            count, _ = _type_means(data)[t]
            time_us = [finite(((r.get("collectives") or {}).get(t) or {}).get("time_us")) for r in ranks]
            known_t = [v for v in time_us if v is not None]
            per_type[t] = (count, sum(known_t) / len(known_t) if known_t else None)
            places = [k for k in counts if k[2] == t]
            per_place = 1 if edit.factor == 0 else int(edit.factor)
            targets[t] = float(sum(min(per_place, counts[k]) for k in places)) if places else float(per_place)
        fits = whatif.fit_ranks([getattr(r, "collective_events", None) for r in res.ranks])
        fit_for = {t: ("this arm", fits[t]) for t in types if t in fits and fits[t].ok}
        est = whatif.estimate_regrouping(
            per_type,
            targets,
            fit_for,
            step_time_us=finite(mean.get("step_time_us")),
            compute_us=finite(mean.get("compute_us")),
            comm_us=finite(mean.get("comm_us")),
            exposed_comm_us=finite(mean.get("exposed_comm_us")),
            free_us=finite(mean.get("free_us")),
            waits=whatif.step_waits(data),
        )
        return (
            est.step_time_delta_us,
            "each removed call saves the α of its type's fit (analysis/estimate/whatif.py)",
        )
    if edit.op == "prefetch":
        est = whatif_units.estimate_prefetch_units(data)
        rows = [r for r in (est.per_unit if est is not None else []) if r.get("unit") == edit.unit]
        if not rows:
            return None, f"no per-unit rows for unit {edit.unit!r}"
        return -sum(r.get("hidden_us") or 0.0 for r in rows), (
            f"{edit.unit}'s exposed all-gather hidden under the previous unit's free compute "
            "(analysis/estimate/whatif_units.py)"
        )
    return None, f"no closed form for {edit.op}"


def closed_form_row(res: Any, edit: Any, why: str, step_us: float | None, steps: int = 1) -> dict[str, Any]:
    """A ``what_if`` row answered by the closed form (``source: "closed form"``) because the replay could not
    price ``edit``: ``why`` says why, then what the closed form assumes. ``predicted_step_us`` is ``step_us``
    (the replayed step, per step) plus the closed form's change per step (the analysis's totals over its
    ``steps`` profiled steps / ``steps``; a delay's is per step already); None where there is no closed form
    for the edit."""
    try:
        delta, how = _closed_form_delta(res, res.record().to_dict(), edit)
    except Exception as exc:  # noqa: BLE001 - a fallback must not take the analysis down
        log.debug("closed form of %s failed", edit.text, exc_info=True)
        delta, how = None, f"its closed form failed ({type(exc).__name__}: {exc})"
    if delta is not None and edit.op != "delay" and steps > 1:
        delta /= steps
        how += f" (over {steps} profiled steps: per step, the total / {steps})"
    return {
        "edit": edit.text,
        "predicted_step_us": None if delta is None or step_us is None else step_us + delta,
        "phases": {},
        "changed": [],
        "source": SOURCE_CLOSED,
        "note": f"{why}; closed form: {how}",
    }
