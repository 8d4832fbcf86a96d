"""The what-ifs a run folder's findings read, requested of the step replay (docs/replay.md, "In run folders").

The findings (analysis/findings/*.py) take an estimate from the replay where the arm's ``replay.what_if`` holds
the edit of their scenario; this module says which edits those are, from the arms' Analysis JSON alone, and
replays them on an analysis that kept its joined graph (``Analysis._replay``):

* ``straggler:remove:<rank>`` — the rank the straggler rule names (the largest skew over the median of the
  other ranks, ≥ ``STRAGGLER_SKEW``);
* ``regroup:<type>:<count>`` and ``regroup:<type>:unit`` — each collective type the fragmentation rule
  flags against another arm (≥ ``FRAGMENTATION_COUNT_RATIO`` × its calls, similar bytes); the count is the
  other arm's calls of that type per (unit, phase) (:func:`regroup_count`), since the edit merges each
  place's collectives into that many;
* ``prefetch:<unit>:<k>`` — the unit whose exposed all-gather the per-unit prefetch estimate would hide
  most (``whatif_units.estimate_prefetch_units``), k = the arm's prefetch depth + 1.

Torch-free, like the rest of the analysis side.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

from fsdpbench.analysis import whatif_units
from fsdpbench.analysis.findings.thresholds import FRAGMENTATION_COUNT_RATIO, SIMILAR_BYTES, STRAGGLER_SKEW
from fsdpbench.records import finite

log = logging.getLogger(__name__)


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


def straggler_rank(data: Mapping[str, Any]) -> int | None:
    """The rank the straggler rule names in ``data``: the largest skew of its compute (else step time) over
    the median of the other ranks', when at least ``STRAGGLER_SKEW``; None otherwise."""
    ranks = [r for r in data.get("ranks") or [] if isinstance(r, Mapping)]
    key = "compute_us" if all(finite(r.get("compute_us")) is not None for r in ranks) else "step_time_us"
    values = [(r.get("rank", i), finite(r.get(key))) for i, r in enumerate(ranks)]
    known = [(rank, v) for rank, v in values if v is not None]
    if len(known) < 2:
        return None
    best: tuple[float, int] | None = None
    for i, (rank, v) in enumerate(known):
        others = median(w for j, (_, w) in enumerate(known) if j != i)
        if others > 0 and v >= others * (1 + STRAGGLER_SKEW):
            skew = v / others - 1
            if best is None or skew > best[0]:
                best = (skew, int(rank))
    return None if best is None else best[1]


def regroup_count(data: Mapping[str, Any], other: Mapping[str, Any], kind: str) -> int | None:
    """The other arm's calls of ``kind`` per (unit, phase), at the places where ``data`` has them (median
    over those places, at least 1): the count of ``regroup:<kind>:<count>`` that issues ``data``'s
    collectives at ``other``'s granularity. None without ``units`` rows on both sides."""
    mine = [k for k in whatif_units.unit_counts(data) if k[2] == kind]
    if not mine or not whatif_units.has_unit_rows(other):
        return None
    theirs = whatif_units.unit_counts(other)
    return max(1, round(median(theirs.get(k, 0.0) for k in mine)))


def regroup_edit(data: Mapping[str, Any], other: Mapping[str, Any], kind: str) -> str | None:
    """``regroup:<kind>:<count>`` at the other arm's granularity (:func:`regroup_count`), or None."""
    count = regroup_count(data, other, kind)
    return None if count is None else f"regroup:{kind}:{count}"


def regroup_edits(data: Mapping[str, Any], other: Mapping[str, Any], kinds: Sequence[str]) -> list[str]:
    """The regroupings that issue ``data``'s collectives of ``kinds`` at ``other``'s granularity: one edit
    of every kind together (``regroup:<a,b>:<count>``, kinds sorted) when they share the other arm's
    count per place, else one per kind; then ``regroup:<kinds>:unit`` (one call per unit and phase)."""
    kinds = sorted(kinds)
    if not kinds:
        return []
    joined = ",".join(kinds)
    counts = {k: regroup_count(data, other, k) for k in kinds}
    known = {c for c in counts.values() if c is not None}
    if len(known) == 1 and None not in counts.values():
        out = [f"regroup:{joined}:{known.pop()}"]
    else:
        out = [f"regroup:{k}:{c}" for k, c in counts.items() if c is not None]
    return [*out, f"regroup:{joined}:unit"]


def fragmented_types(data: Mapping[str, Any], other: Mapping[str, Any]) -> list[str]:
    """The collective types the fragmentation rule flags in ``data`` against ``other``."""
    mine, theirs = _type_means(data), _type_means(other)
    out = []
    for kind, (count, nbytes) in mine.items():
        count_o, bytes_o = theirs.get(kind, (0.0, None))
        if not count or not count_o or not nbytes or not bytes_o:
            continue
        if (
            count / count_o >= FRAGMENTATION_COUNT_RATIO
            and SIMILAR_BYTES[0] <= nbytes / bytes_o <= SIMILAR_BYTES[1]
        ):
            out.append(kind)
    return sorted(out)


def prefetch_edit(data: Mapping[str, Any], depth: int | None) -> str | None:
    """``prefetch:<unit>:<depth + 1>`` for the unit whose exposed all-gather transfer the per-unit prefetch
    estimate would hide most (else the largest exposed all-gather), on an arm whose all-gathers are exposed;
    None otherwise."""
    if "all_gather" not in _type_means(data):
        return None
    est = whatif_units.estimate_prefetch_units(data)
    if est is None or not est.per_unit:
        return None
    rows = [r for r in est.per_unit if (r.get("all_gather_exposed_transfer_us") or 0.0) > 0]
    if not rows:
        return None
    top = max(rows, key=lambda r: (r.get("hidden_us") or 0.0, r.get("all_gather_exposed_transfer_us") or 0.0))
    return f"prefetch:{top['unit']}:{(depth or 0) + 1}"


def wanted_edits(
    data: Mapping[str, Any], others: Sequence[Mapping[str, Any]], prefetch_depth: int | None = None
) -> list[str]:
    """The edits the findings of an arm (Analysis JSON ``data``) against ``others`` read from its replay, in
    a fixed order without repeats (module docstring). Empty when ``data`` has no replay."""
    if not isinstance(data.get("replay"), Mapping):
        return []
    out: list[str] = []
    rank = straggler_rank(data)
    if rank is not None:
        out.append(f"straggler:remove:{rank}")
    for other in others:
        out += regroup_edits(data, other, fragmented_types(data, other))
    edit = prefetch_edit(data, prefetch_depth)
    if edit is not None:
        out.append(edit)
    return list(dict.fromkeys(out))


def prefetch_depth(arm: Mapping[str, Any] | None) -> int | None:
    """The deepest prefetch (in units) of a manifest arm as run, or None when unknown."""
    from fsdpbench.config.arms import manifest_prefetch, prefetch_units

    dirs = manifest_prefetch(arm)
    if dirs is None:
        return None
    units = [prefetch_units((arm or {}).get("backend"), d, dirs[d]) for d in (0, 1)]
    known = [u for u in units if u is not None]
    return max(known) if known else None


def missing_edits(res: Any, edits: Sequence[str]) -> list[str]:
    """The ``edits`` that ``res.replay.what_if`` does not hold yet (none when it has no replay)."""
    if not isinstance(res.replay, Mapping):
        return []
    have = {w.get("edit") for w in res.replay.get("what_if") or [] if isinstance(w, Mapping)}
    return [e for e in edits if e not in have]


def add_what_ifs(res: Any, edits: Sequence[str]) -> bool:
    """Replay ``edits`` on ``res``'s joined graph (kept by the analysis that replayed it) and append their
    ``what_if`` rows (a refused edit answers in closed form, ``replay.what_if_row``). False when ``res`` kept
    no graph (an analysis read back from analysis.json: analyse its profiles again)."""
    from fsdpbench.analysis.replay import what_if_row

    kept = getattr(res, "_replay", None)
    if not isinstance(res.replay, Mapping) or kept is None:
        return False
    g, _, reading = kept
    rows = res.replay.setdefault("what_if", [])
    done: dict[str, dict[str, Any]] = {}
    for edit in edits:
        same = _same_graph_edit(edit)  # regroup:<t>:1 is regroup:<t>:unit: replayed once
        if same in done:
            rows.append({**done[same], "edit": edit, "note": _renamed(done[same].get("note"), edit)})
            continue
        done[same] = what_if_row(res, g, reading, edit)
        rows.append(done[same])
    return True


def _same_graph_edit(edit: str) -> str:
    """``edit`` with a regroup count of 1 written ``unit`` (the same edit of the graph)."""
    parts = edit.split(":")
    if len(parts) == 3 and parts[0] == "regroup" and parts[2] == "1":
        return f"regroup:{parts[1]}:unit"
    return edit


def _renamed(note: Any, edit: str) -> Any:
    """A copied row's note with the edit's own text in front (notes begin with the edit replayed)."""
    if not isinstance(note, str):
        return note
    head, sep, rest = note.partition(": ")
    return f"{edit}: {rest}" if sep and head.startswith("regroup:") else note


def wanted_for_arms(
    analyses: Mapping[str, Any], arms: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, list[str]]:
    """Per arm with a replay, the edits its findings read (:func:`wanted_edits`, against every other arm).

    Args:
        analyses: arm label → its :class:`~fsdpbench.analysis.result.Analysis`.
        arms: arm label → its manifest entry (the prefetch depth), where known.
    """
    data = {
        label: res.record().to_dict() for label, res in analyses.items() if isinstance(res.replay, Mapping)
    }
    out = {}
    for label, d in data.items():
        others = [o for lab, o in data.items() if lab != label]
        edits = wanted_edits(d, others, prefetch_depth((arms or {}).get(label)))
        if edits:
            out[label] = edits
    return out


def replay_wanted(
    analyses: Mapping[str, Any], arms: Mapping[str, Mapping[str, Any]] | None = None
) -> list[str]:
    """Replay on each analysis that kept its graph the wanted edits it lacks (:func:`wanted_for_arms`);
    returns the arms that got new ``what_if`` rows."""
    done = []
    for label, edits in wanted_for_arms(analyses, arms).items():
        missing = missing_edits(analyses[label], edits)
        if missing and add_what_ifs(analyses[label], missing):
            done.append(label)
    return done


# ---------------------------------------------------------------------------------- the closed-form fallback
def _closed_form_delta(res: Any, data: Mapping[str, Any], edit: Any) -> tuple[float | None, str]:
    """The closed form's step-time change (µs) for ``edit`` (a parsed :class:`~fsdpbench.analysis.replay.Edit`)
    and what it assumes; ``(None, why)`` where there is none."""
    from fsdpbench.analysis import whatif

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
        return est.step_time_delta_us, "each removed call saves the α of its type's fit (analysis/whatif.py)"
    if edit.op == "prefetch":
        est = whatif_units.estimate_prefetch_units(data)
        rows = [r for r in (est.per_unit if est is not None else []) if r.get("unit") == edit.unit]
        if not rows:
            return None, f"no per-unit rows for unit {edit.unit!r}"
        return -sum(r.get("hidden_us") or 0.0 for r in rows), (
            f"{edit.unit}'s exposed all-gather hidden under the previous unit's free compute "
            "(analysis/whatif_units.py)"
        )
    return None, f"no closed form for {edit.op}"


def closed_form_row(res: Any, edit: Any, why: str, step_us: float | None) -> dict[str, Any]:
    """A ``what_if`` row answered by the closed form (``source: "closed form"``) because the replay could not
    price ``edit``: ``why`` says why, then what the closed form assumes. ``predicted_step_us`` is ``step_us``
    (the replayed step) plus the closed form's change; None where there is no closed form for the edit."""
    from fsdpbench.analysis.replay import SOURCE_CLOSED

    try:
        delta, how = _closed_form_delta(res, res.record().to_dict(), edit)
    except Exception as exc:  # noqa: BLE001 - a fallback must not take the analysis down
        log.debug("closed form of %s failed", edit.text, exc_info=True)
        delta, how = None, f"its closed form failed ({type(exc).__name__}: {exc})"
    return {
        "edit": edit.text,
        "predicted_step_us": None if delta is None or step_us is None else step_us + delta,
        "phases": {},
        "changed": [],
        "source": SOURCE_CLOSED,
        "note": f"{why}; closed form: {how}",
    }
