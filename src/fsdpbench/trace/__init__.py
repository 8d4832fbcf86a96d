"""Profiler traces → one columnar event table per rank (never imports torch).

``read_rank(source)`` reads a Kineto file or an Ascend ``*_ascend_pt`` folder; ``find_all(paths)``
discovers the rank profiles under files and folders. The table's columns are documented in
:mod:`fsdpbench.trace.table`.
"""

from __future__ import annotations

from pathlib import Path

from fsdpbench.trace.discover import Source, find_all, find_sources
from fsdpbench.trace.rank import RankTrace
from fsdpbench.trace.table import CATEGORIES, COLLECTIVE_TYPES, COLUMNS, TASKS

__all__ = [
    "CATEGORIES", "COLLECTIVE_TYPES", "COLUMNS", "TASKS", "RankTrace", "Source", "find_all", "find_sources",
    "read_rank",
]  # fmt: skip


def read_rank(source: Source | str | Path) -> RankTrace:
    """Read one rank's profile (format from the path when given a path)."""
    if not isinstance(source, Source):
        found = find_sources(source)
        if len(found) != 1:
            from fsdpbench.errors import InputError

            raise InputError(f"{source}: holds {len(found)} rank profiles; pass one of them")
        source = found[0]
    if source.format == "ascend":
        from fsdpbench.trace.ascend import read_ascend

        return read_ascend(source.path)
    from fsdpbench.trace.kineto import read_kineto

    return read_kineto(source.path)
