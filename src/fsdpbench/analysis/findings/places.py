"""Where the step goes, per (unit, phase): both arms' rank-mean compute and exposed communication, the
exposed part split into waiting and transferring, their deltas, and the slowest exposed collectives.

Reads the Analysis JSON of docs/DATA.md: each rank's ``units`` rows (docs/attribution.md) and
``waits.units`` / ``waits.top``. The diff (``fsdpbench.analysis.compare.diff``), its findings
(``exposed_place``), diff.md, the terminal and the report all use these rows.

Torch-free on purpose.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from fsdpbench.fmt import fmt_pct, fmt_us
from fsdpbench.records import Record, finite

PLACE_FIELDS = ("compute_us", "comm_us", "exposed_us", "exposed_wait_us", "exposed_transfer_us")
"""The per-(unit, phase) figures, µs, mean over the arm's ranks."""
TOP_PLACES = 5
"""Places shown in diff.md and the terminal (largest |exposed Δ| first)."""
TOP_WAITS = 5
"""Slowest exposed collectives shown in diff.md and the terminal."""

Place = tuple[str, str]


def _ranks(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in data.get("ranks") or [] if isinstance(r, Mapping)]


def has_units(data: Mapping[str, Any]) -> bool:
    """Whether any rank of the analysis has ``units`` rows (fsdpbench's ranges were in its trace)."""
    return any(r.get("units") for r in _ranks(data))


def arm_places(data: Mapping[str, Any]) -> dict[Place, dict[str, float | None]]:
    """``{(unit, phase): {field: rank mean}}`` in the order the places first occur.

    ``compute_us``, ``comm_us``, ``exposed_us`` from each rank's ``units`` rows; ``exposed_wait_us``,
    ``exposed_transfer_us`` from ``waits.units`` (``None`` for every place when the analysis has no
    waits: one rank). A place a rank lacks counts as 0 on that rank. ``{}`` without ``units``.
    """
    ranks = [r for r in _ranks(data) if r.get("units")]
    if not ranks:
        return {}
    sums: dict[Place, dict[str, float]] = {}
    for r in ranks:
        for row in r["units"]:
            acc = sums.setdefault(
                (str(row.get("unit")), str(row.get("phase"))), dict.fromkeys(PLACE_FIELDS, 0.0)
            )
            for f in ("compute_us", "comm_us", "exposed_us"):
                acc[f] += finite(row.get(f)) or 0.0
    waits = data.get("waits") or {}
    wait_rows = waits.get("units") or []
    n_wait_ranks = len({int(k) for w in wait_rows for k in (w.get("ranks") or {})}) or len(ranks)
    for w in wait_rows:
        acc = sums.setdefault((str(w.get("unit")), str(w.get("phase"))), dict.fromkeys(PLACE_FIELDS, 0.0))
        for split in (w.get("ranks") or {}).values():
            for f in ("exposed_wait_us", "exposed_transfer_us"):
                acc[f] += (finite(split.get(f)) or 0.0) * len(ranks) / n_wait_ranks
    n = len(ranks)
    out: dict[Place, dict[str, float | None]] = {}
    for place, acc in sums.items():
        out[place] = {f: acc[f] / n for f in PLACE_FIELDS}
        if not wait_rows:
            out[place]["exposed_wait_us"] = out[place]["exposed_transfer_us"] = None
    return out


@dataclass(frozen=True)
class TopCollective(Record):
    """One of an arm's slowest matched collectives (an entry of the Diff JSON's ``top_waits``): where it
    ran, its type and size, the largest wait and transfer over the ranks (µs), the rank that arrived last."""

    unit: str | None = None
    phase: str | None = None
    type: str | None = None
    bytes: float | None = None
    wait_us: float | None = None
    transfer_us: float | None = None
    last_rank: int | None = None


def top_collectives(data: Mapping[str, Any], n: int = TOP_WAITS) -> list[TopCollective]:
    """The analysis' slowest matched collectives (``waits.top``): unit, phase, type, bytes, the largest
    wait and transfer over ranks, the rank that arrived last; slowest (wait + transfer) first."""
    rows = [
        TopCollective.from_dict(e, "analysis", f"$.waits.top[{i}]")
        for i, e in enumerate((data.get("waits") or {}).get("top") or [])
        if isinstance(e, Mapping)
    ]
    rows.sort(key=lambda e: -((e.wait_us or 0.0) + (e.transfer_us or 0.0)))
    return rows[:n]


def waited_for(data: Mapping[str, Any], place: Place) -> int | None:
    """The rank the place's slowest collectives waited for: among ``waits.top`` in that place, the last
    arriving rank that caused the most wait; ``None`` when no listed collective is in the place."""
    by_rank: dict[int, float] = {}
    for e in (data.get("waits") or {}).get("top") or []:
        if (str(e.get("unit")), str(e.get("phase"))) == place and isinstance(e.get("last_rank"), int):
            by_rank[e["last_rank"]] = by_rank.get(e["last_rank"], 0.0) + (finite(e.get("wait_us")) or 0.0)
    if not by_rank or max(by_rank.values()) <= 0:
        return None
    return max(by_rank, key=lambda k: (by_rank[k], -k))


def collective_types(data: Mapping[str, Any], place: Place) -> dict[str, float]:
    """``{type: calls per rank}`` the place's ``units`` rows record (mean over ranks), most calls first."""
    ranks = [r for r in _ranks(data) if r.get("units")]
    counts: dict[str, float] = {}
    for r in ranks:
        for row in r["units"]:
            if (str(row.get("unit")), str(row.get("phase"))) == place:
                for kind, c in (row.get("collectives") or {}).items():
                    counts[kind] = counts.get(kind, 0.0) + (finite((c or {}).get("count")) or 0.0) / len(
                        ranks
                    )
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


@dataclass(frozen=True)
class PlaceRow(Record):
    """One (unit, phase) on both arms (a Diff JSON ``places`` row); a side is ``None`` where that arm has
    no such place (or no units)."""

    _keys: ClassVar[tuple[str, ...]] = ("unit", "phase", "base", "test", "delta")
    _written_from: ClassVar[Mapping[str, str]] = {"delta": "deltas"}

    unit: str
    phase: str
    base: dict[str, float | None] | None = None
    test: dict[str, float | None] | None = None
    compared: bool = True
    """Both arms have units and this unit (so a side without this place ran nothing there); else no
    deltas: one arm has no units, or names no such unit (another wrapping, or FSDP2's FQNs against
    fsdpbench's names). Not written: told from all the rows (:func:`mark_compared`)."""

    def value(self, side: str, key: str) -> float | None:
        values = self.test if side == "test" else self.base
        return None if values is None else values.get(key)

    def delta(self, key: str) -> float | None:
        """``test − base`` of ``key``; a place one arm lacks counts as 0 there (both arms have units)."""
        if not self.compared:
            return None
        b, t = self.value("base", key), self.value("test", key)
        if b is None and self.base is None:
            b = 0.0
        if t is None and self.test is None:
            t = 0.0
        return t - b if b is not None and t is not None else None

    @property
    def deltas(self) -> dict[str, float | None]:
        """:meth:`delta` of every ``PLACE_FIELDS`` key (the row's ``delta`` object)."""
        return {f: self.delta(f) for f in PLACE_FIELDS}


def mark_compared(rows: Sequence[PlaceRow]) -> list[PlaceRow]:
    """``rows`` with ``compared`` told from all of them: a row is compared when each arm has its unit
    in some row (a side that is not ``None``)."""
    both = {r.unit for r in rows if r.base is not None} & {r.unit for r in rows if r.test is not None}
    return [
        r if r.compared == (r.unit in both) else dataclasses.replace(r, compared=r.unit in both) for r in rows
    ]


def unmatched_units(rows: Sequence[PlaceRow]) -> tuple[list[str], list[str]]:
    """(units only the base arm has, units only the test arm has), in row order, when both arms have
    units (else two empty lists): their places are listed, not compared."""
    base = {r.unit for r in rows if r.base is not None}
    test = {r.unit for r in rows if r.test is not None}
    if not base or not test:
        return [], []
    only_base = list(dict.fromkeys(r.unit for r in rows if r.unit not in test))
    only_test = list(dict.fromkeys(r.unit for r in rows if r.unit not in base))
    return only_base, only_test


def compare_places(base: Mapping[str, Any], test: Mapping[str, Any]) -> list[PlaceRow]:
    """Both arms' places, the test arm's order first; ``[]`` when neither arm has ``units``.

    Places match by (unit, phase) name. When only one arm has units, or only one names a unit (another
    wrapping: :func:`unmatched_units`), that side is ``None`` and the deltas are ``None`` rather than a
    difference against nothing; a place of a unit both arms have counts as 0 on the arm without it.
    """
    pb, pt = arm_places(base), arm_places(test)
    if not pb and not pt:
        return []
    order = list(pt) + [p for p in pb if p not in pt]
    return mark_compared([PlaceRow(p[0], p[1], pb.get(p), pt.get(p)) for p in order])


def by_exposed_delta(rows: list[PlaceRow]) -> list[PlaceRow]:
    """Rows with a known exposed Δ, largest |Δ| first (ties: the table's order)."""
    known = [r for r in rows if r.delta("exposed_us") is not None]
    return sorted(known, key=lambda r: -abs(r.delta("exposed_us") or 0.0))


def place_phrase(row: PlaceRow, side: str, data: Mapping[str, Any], other_label: str | None = None) -> str:
    """``"layers.3 backward: reduce_scatter ×1 exposed 42 ms (+30 ms vs torch), 80% of it waiting for rank 5"``.

    ``data`` is ``side``'s Analysis JSON (collective types and the rank waited for); the Δ is shown when
    ``other_label`` is given and known.
    """
    from fsdpbench.analysis.findings.thresholds import COLLECTIVE_NAMES

    place = (row.unit, row.phase)
    exposed = row.value(side, "exposed_us")
    types = collective_types(data, place)
    what = ", ".join(f"{COLLECTIVE_NAMES.get(k, k)} ×{v:g}" for k, v in list(types.items())[:2] if v)
    text = f"{row.unit} {row.phase}: {what + ' ' if what else ''}exposed {fmt_us(exposed)}"
    delta = row.delta("exposed_us")
    if other_label is not None and delta is not None:
        text += f" ({fmt_us(delta if side == 'test' else -delta, signed=True)} vs {other_label})"
    wait = row.value(side, "exposed_wait_us")
    if wait is not None and exposed:
        rank = waited_for(data, place)
        text += f", {fmt_pct(min(max(wait / exposed, 0.0), 1.0))} of it waiting" + (
            f" for rank {rank}" if rank is not None else " for other ranks"
        )
    return text


def prefetch_chain(edges: Sequence[Mapping[str, Any]]) -> str:
    """A rank's FSDP2 prefetch edges (Analysis JSON ``prefetch``) as one line per pass: ``forward: a→b,
    b→c; backward: …`` (issuing unit → prefetched unit, in issue order; ``none`` for a pass without any)."""
    parts = []
    for kind in ("forward", "backward"):
        mine = [f"{e.get('unit')}→{e.get('target')}" for e in edges if e.get("pass") == kind]
        parts.append(f"{kind}: {', '.join(mine) if mine else 'none'}")
    return "; ".join(parts)


def units_note(data: Mapping[str, Any]) -> str | None:
    """``"units from FSDP2 ranges; prefetch chain (rank 0): …"`` from the first rank with units (its
    ``units_source`` and ``prefetch``); None without units."""
    rank = next((r for r in _ranks(data) if r.get("units")), None)
    if rank is None:
        return None
    text = f"units from {rank.get('units_source') or 'fsdpbench ranges'}"
    if rank.get("prefetch") is not None:
        text += f"; prefetch chain (rank {rank.get('rank', 0)}): {prefetch_chain(rank['prefetch'])}"
    return text
