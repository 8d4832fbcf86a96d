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

from fsdpbench.analysis.crossrank.replay_whatif import _type_means
from fsdpbench.analysis.estimate import whatif_units
from fsdpbench.analysis.findings.thresholds import FRAGMENTATION_COUNT_RATIO, SIMILAR_BYTES, STRAGGLER_SKEW
from fsdpbench.records import finite

log = logging.getLogger(__name__)


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
    estimate would hide most (else the largest exposed all-gather), among the (unit, phase)s with at least
    depth + 1 units before them in the phase (the units' rows' order) on some rank, on an arm whose
    all-gathers are exposed; None otherwise."""
    if "all_gather" not in _type_means(data):
        return None
    est = whatif_units.estimate_prefetch_units(data)
    if est is None or not est.per_unit:
        return None
    k = (depth or 0) + 1
    # the step replay issues a unit's all-gathers where the unit k places before it begins: a unit with fewer
    # than k units before it in its phase on every rank (a phase's first units) cannot be moved so far
    far_enough = {
        (unit, phase)
        for r in data.get("ranks") or []
        for phase in whatif_units.PREFETCH_PHASES
        for unit in [str(row.get("unit")) for row in r.get("units") or [] if row.get("phase") == phase][k:]
    }
    rows = [
        r
        for r in est.per_unit
        if (r.get("all_gather_exposed_transfer_us") or 0.0) > 0
        and (r.get("unit"), r.get("phase")) in far_enough
    ]
    if not rows:
        return None
    top = max(rows, key=lambda r: (r.get("hidden_us") or 0.0, r.get("all_gather_exposed_transfer_us") or 0.0))
    return f"prefetch:{top['unit']}:{k}"


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
    from fsdpbench.analysis.crossrank.replay_whatif import what_if_row

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
        analyses: arm label → its :class:`~fsdpbench.analysis.output.result.Analysis`.
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
