"""A ``DiffResult`` in the terminal: rich tables of the side by side, collectives, op deltas and syncs,
then the findings."""

from __future__ import annotations

from typing import Any

from fsdpbench.analysis.diff import METRIC_NAMES, METRICS, DiffResult
from fsdpbench.fmt import fmt_bytes, fmt_count, fmt_us, fmt_x
from fsdpbench.report.diff_md import metric_cells
from fsdpbench.report.estimate import estimate_lines

OPS_IN_TERMINAL = 10
SEVERITY_COLOURS = {"high": "red", "medium": "yellow", "low": "cyan", "info": "blue"}


def render_diff(result: DiffResult, console: Any = None) -> None:
    """Print rich tables: the side by side, collectives, top op deltas, syncs, then the findings."""
    from rich.console import Console
    from rich.table import Table

    def table(title: str, columns: list[str]) -> Table:
        t = Table(title=title)
        for i, col in enumerate(columns):
            t.add_column(col, justify="left" if i == 0 else "right")
        return t

    console = console or Console()
    b, t = result.base, result.test
    for w in result.warnings:
        console.print(f"[bold yellow]warning:[/] {w}")
    sbs = result.side_by_side
    side = table(f"{t} vs {b}: profiled step, rank mean", ["metric", b, t, "Δ"])
    for key in METRICS:
        base, test = getattr(sbs.mean.base, key), getattr(sbs.mean.test, key)
        side.add_row(METRIC_NAMES[key], *metric_cells(key, base, test, sbs.delta(key)))
    console.print(side)
    if result.collectives:
        coll = table(
            "collectives (calls per rank)",
            ["type", f"calls {b}", f"calls {t}", "ratio", f"bytes {b}", f"bytes {t}"],
        )
        for r in result.collectives:
            coll.add_row(
                r.name,
                fmt_count(r.base.count),
                fmt_count(r.test.count),
                fmt_x(r.count_ratio),
                fmt_bytes(r.base.bytes),
                fmt_bytes(r.test.bytes),
            )
        console.print(coll)
    if result.ops:
        ops = table(
            "kernel time by op type, largest differences", ["op type", b, t, "Δ", f"calls {b}", f"calls {t}"]
        )
        for r in result.ops[:OPS_IN_TERMINAL]:
            ops.add_row(
                r.op_type,
                fmt_us(r.base.us),
                fmt_us(r.test.us),
                fmt_us(r.delta_us, signed=True),
                fmt_count(r.base.count),
                fmt_count(r.test.count),
            )
        console.print(ops)
    sync_rows = [r for r in result.sync if r.base or r.test]
    if sync_rows:
        sync = table("sync / launch tasks per rank", ["task", b, t, "Δ"])
        for r in sync_rows:
            sync.add_row(r.label, fmt_count(r.base), fmt_count(r.test), fmt_count(r.delta, signed=True))
        console.print(sync)
    for i, f in enumerate(result.findings, 1):
        console.print(f"{i}. [{SEVERITY_COLOURS.get(f.severity, 'white')}]{f.severity}[/] [bold]{f.title}[/]")
        console.print(f"   evidence: {f.evidence}", highlight=False)
        console.print(f"   action: {f.action}", highlight=False)
        for line in estimate_lines(f.estimate):
            console.print(f"   {line}", highlight=False)
