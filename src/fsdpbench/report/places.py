"""The report's "where" section: per arm and per pair (test − base) a unit × phase table and heatmap of
exposed communication and compute, and the slowest exposed collectives (``fsdpbench.analysis.findings.places``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fsdpbench.analysis.crossrank.groups import seen_text
from fsdpbench.analysis.findings import places as plc
from fsdpbench.fmt import MISSING, fmt_bytes, fmt_us_as_ms
from fsdpbench.report import figures
from fsdpbench.report.blocks import Block, Figure, Heading, Para, Table

PHASE_ORDER = ("forward", "backward", "optimizer", "(outside)")


def _axes(keys: Sequence[plc.Place]) -> tuple[list[str], list[str]]:
    """Units in first-occurrence order; phases forward, backward, optimizer, (outside), then others."""
    units = list(dict.fromkeys(u for u, _ in keys))
    seen = list(dict.fromkeys(p for _, p in keys))
    phases = [p for p in PHASE_ORDER if p in seen] + [p for p in seen if p not in PHASE_ORDER]
    return units, phases


def _grid(units: list[str], phases: list[str], values: Mapping[plc.Place, float | None]) -> np.ndarray:
    """``values`` in ms as a (unit × phase) array, NaN where a place is absent or unknown."""
    out = np.full((len(units), len(phases)), np.nan)
    for (u, p), v in values.items():
        if v is not None:
            out[units.index(u), phases.index(p)] = v / 1000
    return out


def _ms(value: float | None) -> str:
    return fmt_us_as_ms(value, 1)


def _signed_ms(value: float | None) -> str:
    return MISSING if value is None else (f"{value / 1000:+.1f}").replace("-", "−")


def _top_table(rows: list[plc.TopCollective]) -> Table:
    return Table(
        ["unit", "phase", "type", "bytes", "wait (ms)", "transfer (ms)", "last rank"],
        [
            [
                e.unit or MISSING,
                e.phase or MISSING,
                e.type or MISSING,
                fmt_bytes(e.bytes),
                _ms(e.wait_us),
                _ms(e.transfer_us),
                MISSING if e.last_rank is None else str(e.last_rank),
            ]
            for e in rows
        ],
    )


def _arm_blocks(arm: str, data: Mapping[str, Any], index: int) -> list[Block]:
    places = plc.arm_places(data)
    blocks: list[Block] = [Heading(f"Units × phases: `{arm}`", 4)]
    if not places:
        return blocks + [
            Para(
                "No units: the trace has none of fsdpbench's ranges, FSDP2's own, or the autograd and "
                "optimizer ranges (e.g. an Ascend export without trace_view.json)."
            )
        ]
    units, phases = _axes(list(places))
    panels = {
        "exposed comm (ms)": _grid(units, phases, {k: v["exposed_us"] for k, v in places.items()}),
        "compute (ms)": _grid(units, phases, {k: v["compute_us"] for k, v in places.items()}),
    }
    blocks.append(
        Figure(
            f"places_{index}",
            figures.unit_phase_heatmap(units, phases, panels, f"places_{index}"),
            f"{arm}: exposed communication and compute per unit and phase, ms, mean over ranks.",
        )
    )
    rows = [
        [
            u,
            p,
            _ms(v["compute_us"]),
            _ms(v["comm_us"]),
            _ms(v["exposed_us"]),
            _ms(v["exposed_wait_us"]),
            _ms(v["exposed_transfer_us"]),
        ]
        for (u, p), v in places.items()
    ]
    header = [
        "unit",
        "phase",
        "compute (ms)",
        "comm (ms)",
        "exposed (ms)",
        "exposed wait (ms)",
        "exposed transfer (ms)",
    ]
    blocks.append(Table(header, rows))
    note = plc.units_note(data)
    if note:
        blocks.append(Para(note[0].upper() + note[1:] + "."))
    seen = seen_text((data.get("waits") or {}).get("ranks_seen"))  # --profile-ranks: k of N ranks
    if seen:
        blocks.append(Para(f"Waits and transfers over {seen}: the last arrival may be a rank outside."))
    top = plc.top_collectives(data, n=10)
    if top:
        blocks.append(Para(f"Slowest collectives of `{arm}` (largest wait + transfer over its ranks):"))
        blocks.append(_top_table(top))
    return blocks


def _pair_blocks(
    base: str, test: str, db: Mapping[str, Any], dt: Mapping[str, Any], index: int
) -> list[Block]:
    rows = plc.compare_places(db, dt)
    if not any(r.compared for r in rows):
        return []
    blocks: list[Block] = [Heading(f"Units × phases: `{test}` − `{base}`", 4)]
    units, phases = _axes([(r.unit, r.phase) for r in rows])
    panels = {
        "Δ exposed comm (ms)": _grid(units, phases, {(r.unit, r.phase): r.delta("exposed_us") for r in rows}),
        "Δ compute (ms)": _grid(units, phases, {(r.unit, r.phase): r.delta("compute_us") for r in rows}),
    }
    blocks.append(
        Figure(
            f"places_delta_{index}",
            figures.unit_phase_heatmap(units, phases, panels, f"places_delta_{index}", diverging=True),
            f"{test} − {base} per unit and phase, ms (red = {test} spends more).",
        )
    )
    table_rows = [
        [
            r.unit,
            r.phase,
            _ms(r.value("base", "exposed_us")),
            _ms(r.value("test", "exposed_us")),
            _signed_ms(r.delta("exposed_us")),
            _signed_ms(r.delta("exposed_wait_us")),
            _ms(r.value("base", "compute_us")),
            _ms(r.value("test", "compute_us")),
            _signed_ms(r.delta("compute_us")),
        ]
        for r in plc.by_exposed_delta(rows)
    ]
    header = [
        "unit",
        "phase",
        f"exposed {base}",
        f"exposed {test}",
        "Δ exposed",
        "Δ exposed wait",
        f"compute {base}",
        f"compute {test}",
        "Δ compute",
    ]
    blocks.append(Table(header, table_rows))
    blocks.append(Para("ms, mean over ranks; largest |Δ exposed| first; Δ = test − base."))
    return blocks


def places_section(analysis: Mapping[str, Mapping[str, Any]], arms: list[str]) -> list[Block]:
    """ "Where: units × phases": each arm's table, heatmap and slowest collectives, then each other arm
    against the first (test − base). ``[]`` when no arm has units."""
    if not any(plc.has_units(analysis[a]) for a in arms):
        return []
    blocks: list[Block] = [
        Heading("Where: units × phases", 3),
        Para(
            "Per FSDP unit and phase (docs/attribution.md): compute, communication, exposed communication and "
            "its split into waiting for the last rank and transferring. The phase times with their CIs are in "
            'the section "Phase times per arm".'
        ),
    ]
    for i, arm in enumerate(arms):
        blocks.extend(_arm_blocks(arm, analysis[arm], i))
    for i, arm in enumerate(arms[1:], 1):
        blocks.extend(_pair_blocks(arms[0], arm, analysis[arms[0]], analysis[arm], i))
    return blocks
