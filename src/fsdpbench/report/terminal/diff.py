"""A ``DiffResult`` in the terminal: rich tables of the side by side, collectives, op deltas and syncs,
then the findings."""

from __future__ import annotations

from typing import Any

from fsdpbench.analysis.compare.diff import METRIC_NAMES, METRICS, DiffResult
from fsdpbench.fmt import fmt_bytes, fmt_count, fmt_us, fmt_x, shorten_unique
from fsdpbench.report.diff_md import (
    CALIBRATION_NOTE,
    calibration_rows,
    distortion_text,
    memory_lines,
    metric_cells,
    place_lines,
)
from fsdpbench.report.estimate import estimate_lines, subject_timed_scale
from fsdpbench.report.terminal.fit import natural_width, print_fitted

OPS_IN_TERMINAL = 10
SEVERITY_COLOURS = {"high": "red", "medium": "yellow", "low": "cyan", "info": "blue"}


def render_diff(result: DiffResult, console: Any = None) -> None:
    """Print rich tables: the side by side, collectives, top op deltas, syncs, then the findings.

    The tables fit the console's width: the two sides' labels head the columns when they fit, else
    "base" and "test" do and the caption names them; op type names are shortened in the middle; a table
    still too wide is split in parts that repeat its first column (:mod:`fsdpbench.report.terminal.fit`).
    """
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    b, t = result.base, result.test
    short = False

    def table(title: str, columns: list[str], caption: str | None = None) -> Table:
        tab = Table(title=title, caption=caption, caption_justify="left")
        for i, col in enumerate(columns):
            tab.add_column(col, justify="left" if i == 0 else "right")
        return tab

    def fitted(build: Any) -> Table:
        """``build(base_header, test_header)``, with the labels as headers when that fits."""
        nonlocal short
        tab = build(b, t)
        if not short and natural_width(tab) <= console.width:
            return tab
        if not short:  # from here on every table says base/test
            console.print(f"base = {b}; test = {t}", highlight=False)
            short = True
        return build("base", "test")

    for w in result.warnings:
        console.print(f"[bold yellow]warning:[/] {w}")
    sbs = result.side_by_side

    def side_table(hb: str, ht: str) -> Table:
        side = table(f"{t} vs {b}: profiled step, rank mean", ["metric", hb, ht, "Δ"])
        for key in METRICS:
            base, test = getattr(sbs.mean.base, key), getattr(sbs.mean.test, key)
            side.add_row(METRIC_NAMES[key], *metric_cells(key, base, test, sbs.delta(key)))
        return side

    print_fitted(console, fitted(side_table))
    distortion = distortion_text(result)
    if distortion:
        console.print(distortion, highlight=False)
    for line in memory_lines(result):
        console.print(line, highlight=False, markup=False)
    if result.collectives:

        def coll_table(hb: str, ht: str) -> Table:
            coll = table(
                "collectives (calls per rank)",
                ["type", f"calls {hb}", f"calls {ht}", "ratio", f"bytes {hb}", f"bytes {ht}"],
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
            return coll

        print_fitted(console, fitted(coll_table))
    where = place_lines(result)
    if where:  # lines, not a table: they fit any width
        console.print("[bold]where: units × phases, largest exposed-comm Δ first; slowest collectives[/]")
        for line in where:
            console.print(f"   {line}", highlight=False)
    if result.ops:
        rows = result.ops[:OPS_IN_TERMINAL]

        def ops_table(hb: str, ht: str, name_width: int | None = None) -> Table:
            ops = table(
                "kernel time by op type, largest differences",
                ["op type", hb, ht, "Δ", f"n {hb}", f"n {ht}"],
                caption="kernel time (mean over ranks); n: calls",
            )
            labels = [r.label for r in rows]
            names = labels if name_width is None else shorten_unique(labels, name_width)
            for r, name in zip(rows, names, strict=True):
                ops.add_row(
                    name,
                    fmt_us(r.base.us),
                    fmt_us(r.test.us),
                    fmt_us(r.delta_us, signed=True),
                    fmt_count(r.base.count),
                    fmt_count(r.test.count),
                )
            return ops

        # the names get what the numbers leave (at least 16 characters), shortened in the middle
        numbers = fitted(lambda hb, ht: ops_table(hb, ht, name_width=len("op type")))
        spare = console.width - natural_width(numbers) + len("op type")
        print_fitted(console, fitted(lambda hb, ht: ops_table(hb, ht, name_width=max(16, spare))))
    sync_rows = [r for r in result.sync if r.base or r.test]
    if sync_rows:

        def sync_table(hb: str, ht: str) -> Table:
            sync = table("sync / launch tasks per rank", ["task", hb, ht, "Δ"])
            for r in sync_rows:
                sync.add_row(r.label, fmt_count(r.base), fmt_count(r.test), fmt_count(r.delta, signed=True))
            return sync

        print_fitted(console, fitted(sync_table))
    for i, f in enumerate(result.findings, 1):
        console.print(f"{i}. [{SEVERITY_COLOURS.get(f.severity, 'white')}]{f.severity}[/] [bold]{f.title}[/]")
        console.print(f"   evidence: {f.evidence}", highlight=False)
        console.print(f"   action: {f.action}", highlight=False)
        scale = subject_timed_scale(f, (result.distortion or {}).get("ratio"))
        for line in estimate_lines(f.estimate, timed_scale=scale):
            console.print(f"   {line}", highlight=False)
    if result.calibration:  # lines, not a table: they fit any width
        console.print("[bold]calibration: estimates vs the measured counterfactual arm[/]")
        for row in calibration_rows(result.calibration):
            estimate, pair, predicted, measured, error, _, _, profiled, error_profiled = row
            console.print(
                f"   {estimate}, {pair}: predicted {predicted} (estimate); measured {measured} timed "
                f"(error {error}), {profiled} profiled (error {error_profiled})",
                highlight=False,
            )
        console.print(CALIBRATION_NOTE, highlight=False)
