"""Profiler traces → one columnar event table per rank (never imports torch).

``read_rank(source)`` reads a Kineto file or an Ascend ``*_ascend_pt`` folder; ``find_all(paths)``
discovers the rank profiles under files and folders. The table's columns are documented in
:mod:`fsdpbench.trace.table`.
"""

from __future__ import annotations

from typing import Any

from fsdpbench.trace.discover import Source, find_all, find_sources
from fsdpbench.trace.rank import RankTrace
from fsdpbench.trace.read import read_rank

_TABLE_NAMES = ("CATEGORIES", "COLLECTIVE_TYPES", "COLUMNS", "TASKS")


def __getattr__(name: str) -> Any:
    """The table's constants, imported on first use (the table module imports pandas)."""
    if name in _TABLE_NAMES:
        from fsdpbench.trace import table

        return getattr(table, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CATEGORIES",
    "COLLECTIVE_TYPES",
    "COLUMNS",
    "TASKS",
    "RankTrace",
    "Source",
    "find_all",
    "find_sources",
    "read_rank",
]
