"""``fsdpbench analyze --units`` and ``--explain UNIT`` in the terminal: the unit × phase table per rank and
the windows a unit got, each table split in parts that repeat the row labels where the console is narrow."""

from __future__ import annotations

from pathlib import Path

from fsdpbench.fmt import fmt_us_as_ms
from fsdpbench.report.terminal.fit import print_fitted


def _ms(us: float | None) -> str:
    return fmt_us_as_ms(us, 3)


def _internal_ms(row: dict, kind: str) -> str:
    """``host/device`` ms of one FSDP2 internal step of a unit × phase row, ``—`` where not in the trace."""
    part = (row.get("fsdp_internals") or {}).get(kind)
    if part is None:
        return "—"
    return f"{_ms(part['host_us'])}/{_ms(part['device_us'])}"


def render_units(res, console) -> None:  # noqa: ANN001 (rich types kept lazy)
    """One unit × phase table per rank (``--units``); ranks without rows are named once."""
    from rich.table import Table

    from fsdpbench.analysis.findings import places as plc

    missing = [r.rank for r in res.ranks if r.units is None]
    for r in res.ranks:
        if r.units is None:
            continue
        t = Table(
            title=f"Units × phases (rank {r.rank}; from {r.units_source})",
            title_justify="left",
            caption="ms; exposed: comm − overlapped; collectives: count per type; FSDP2 internals: host/device "
            "ms of copy-in, all-gather, copy-out, reduce, rs-wait (— where not in this trace); "
            "rows sum to the step's totals (docs/attribution.md)",
            caption_justify="left",
        )
        for col in (
            "unit",
            "phase",
            "compute",
            "comm",
            "exposed",
            "collectives",
            "copy-in",
            "ag",
            "copy-out",
        ):
            t.add_column(col, justify="left" if col in ("unit", "phase", "collectives") else "right")
        t.add_column("reduce", justify="right")
        t.add_column("rs-wait", justify="right")
        for row in r.units:
            colls = " ".join(f"{k}×{v['count']}" for k, v in row["collectives"].items()) or "—"
            t.add_row(
                row["unit"],
                row["phase"],
                _ms(row["compute_us"]),
                _ms(row["comm_us"]),
                _ms(row["exposed_us"]),
                colls,
                *[_internal_ms(row, k) for k in ("copy_in", "all_gather", "copy_out", "reduce", "rs_wait")],
            )
        print_fitted(console, t, labels=2, wrap={"collectives"})
        if r.prefetch is not None:
            console.print(
                f"prefetch chain (rank {r.rank}): {plc.prefetch_chain(r.prefetch)}", highlight=False
            )
    if missing:
        console.print(
            f"no unit × phase rows for rank(s) {', '.join(map(str, missing))}: they need a Kineto trace "
            "with fsdpbench's ranges (`fsdpbench run/ab --profile`) or FSDP2's own (`FSDP::pre_forward (<fqn>)` …), "
            "or for phases alone the autograd engine's or the optimizer's ranges",
            highlight=False,
        )


def explain_rows(res, unit: str, step: int | None = None) -> list[dict]:  # noqa: ANN001 (Analysis)
    """Per rank the windows ``unit`` got (:func:`fsdpbench.analysis.rank.unit_ranges.find_ranges`, as the
    analysis found them): ``{rank, phase, thread, start_ms, end_ms, opened_by, closed_by, events}`` in
    start order, times from the start of the rank's first profiler step (else of its first event); ``events`` counts the compute and communication events placed in the window (of the
    profiled steps, or of ``step``). A rank without such a window gives one row with ``phase`` None and
    its units in ``opened_by``."""
    import numpy as np

    from fsdpbench.analysis.rank import attribution, unit_ranges, windows
    from fsdpbench.trace import Source, read_rank

    out: list[dict] = []
    for r in res.ranks:
        t = r._events if hasattr(r._events, "category") else read_rank(Source(Path(r.source), r.format)).table
        ranges = unit_ranges.find_ranges(t)
        select = (t.step == step) if step is not None else (t.step >= 0 if (t.step >= 0).any() else None)
        placed = attribution.place(t, r.mode, select, ranges)
        counts = np.bincount(placed.range_index[placed.range_index >= 0], minlength=len(ranges))
        lanes = [str(c) for c in t.lane.categories]
        steps = [i for i, c in enumerate(t.name.categories) if str(c).startswith("ProfilerStep#")]
        step_rows = windows.host_rows(t, steps)
        origin = int(t.start_ns[step_rows].min()) if step_rows.size else int(t.start_ns.min())
        mine = [i for i, u in enumerate(ranges.unit) if u == unit]
        if not mine:
            units = ", ".join(dict.fromkeys(ranges.unit)) or "none"
            out.append({"rank": r.rank, "phase": None, "opened_by": units})
            continue
        for i in sorted(mine, key=lambda i: int(ranges.start_ns[i])):
            out.append(
                {
                    "rank": r.rank,
                    "phase": ranges.phase[i],
                    "thread": lanes[int(ranges.lane[i])],
                    "start_ms": (int(ranges.start_ns[i]) - origin) / 1e6,
                    "end_ms": (int(ranges.end_ns[i]) - origin) / 1e6,
                    "opened_by": ranges.opened_by[i]
                    if ranges.opened_by
                    else f"the range itself ({ranges.source})",
                    "closed_by": ranges.closed_by[i]
                    if ranges.closed_by
                    else f"the range itself ({ranges.source})",
                    "events": int(counts[i]),
                }
            )
    return out


def render_explain(res, unit: str, console, step: int | None = None) -> None:  # noqa: ANN001 (rich types kept lazy)
    """``--explain UNIT``: the windows of :func:`explain_rows`, one table."""
    from rich.table import Table

    rows = explain_rows(res, unit, step)
    t = Table(
        title=f"Windows of unit {unit!r}",
        title_justify="left",
        caption="start, end: ms from the rank's first profiler step; events: compute and communication events placed in the window "
        "(the innermost window that contains their launch, docs/attribution.md)",
        caption_justify="left",
    )
    for col in ("rank", "phase", "thread", "start", "end", "opened by", "closed by", "events"):
        t.add_column(col, justify="right" if col in ("rank", "start", "end", "events") else "left")
    missing = []
    for row in rows:
        if row["phase"] is None:
            missing.append(f"rank {row['rank']} (its units: {row['opened_by']})")
            continue
        t.add_row(
            str(row["rank"]),
            row["phase"],
            row["thread"],
            f"{row['start_ms']:.3f}",
            f"{row['end_ms']:.3f}",
            row["opened_by"],
            row["closed_by"],
            str(row["events"]),
        )
    if t.row_count:
        print_fitted(console, t, labels=3, wrap={"opened by", "closed by"})
    for m in missing:
        console.print(f"no window of unit {unit!r} on {m}", highlight=False)
