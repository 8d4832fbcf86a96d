"""``fsdpbench sweep``'s overview in the terminal: the study's table of index.md, split in parts that repeat
the experiment's name where the console is narrow (only the conclusion wraps, at spaces)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsdpbench.report.terminal.fit import print_fitted


def print_overview(console: Any, tree: Path, title: str) -> None:
    """The study's overview table of the sweep tree ``tree`` (the one in index.md); nothing without rows."""
    from rich.table import Table
    from rich.text import Text

    from fsdpbench.report.index import overview

    table_data = overview(tree)
    if not table_data.rows:
        return
    table = Table(title=title)
    for header in table_data.headers:
        table.add_column(header, overflow="fold", ratio=3 if header == "conclusion" else None)
    for row in table_data.rows:
        table.add_row(*(Text(cell) for cell in row))
    print_fitted(console, table, labels=1, wrap={"conclusion"})
