"""The end of ``fsdpbench ab``/``run`` in the terminal, beside :mod:`fsdpbench.report.console`: the phase
table per arm, split in parts that repeat the arm and its ranks where the console is narrow (a long arm
label and the four phases do not fit 80 columns side by side)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fsdpbench.report.terminal.fit import print_fitted
from fsdpbench.results.phases import PHASES, table_rows


def print_phase_table(console: Any, summary: Mapping[str, Any]) -> None:
    """``ab``'s phase table: per arm one row for the slowest rank and one for rank 0; nothing when no arm
    has phase times."""
    from rich.table import Table

    arms = summary.get("arms") or {}
    if not any(a.get("phases") for a in arms.values()):
        return
    table = Table(
        title="phase times per arm (ms)",
        caption="median of per-round medians of the timed steps; max: per phase the slowest rank (does not "
        "sum to the step); rank 0: its own split (sums to its step time)",
        caption_justify="left",
    )
    table.add_column("arm", no_wrap=True)
    table.add_column("ranks", no_wrap=True)
    for p in PHASES:
        table.add_column(p, justify="right", no_wrap=True)
    slowest, rank0 = table_rows(arms), table_rows(arms, "rank0")
    for label in arms:
        table.add_row(label, "max", *slowest[label])
        table.add_row("", "rank 0", *rank0[label], end_section=True)
    print_fitted(console, table, labels=2)
