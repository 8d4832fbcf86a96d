"""The profiled step of every rank of an arm on one time axis: compute and communication per rank, the
communication coloured by process group (HSDP: shard = intra-node, replicate = inter-node).

Clocks: the analysis' clock check (:func:`fsdpbench.analysis.crossrank.stragglers.clock_offset_warning`) tells
whether the ranks' clocks can be compared. When they can, every rank is drawn on the common clock from the
earliest rank's step start, so a rank that starts or waits late is seen late; when they cannot (traces from
hosts whose clocks differ), each rank is drawn from its own step start and the caption says so.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

log = logging.getLogger(__name__)
_RANK = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)

MAX_RANKS = 32
"""Ranks drawn per arm (the first ones by rank id); the caption names what is left out."""


@dataclass
class RankRow:
    """One rank's profiled step: intervals in ns from the arm's time origin."""

    rank: int
    compute: tuple[np.ndarray, np.ndarray]
    comm: dict[str, tuple[np.ndarray, np.ndarray]]
    """Per process group name (``?``: unknown): starts, ends."""


@dataclass
class RankTimeline:
    """All ranks of one arm, aligned (``aligned``: on the common clock; False: each from its own step start)."""

    arm: str
    step: int | None
    rows: list[RankRow]
    kinds: dict[str, str] = field(default_factory=dict)
    """Group name → kind (shard, replicate, world, other, unknown)."""
    aligned: bool = True
    left_out: int = 0


def _rank_row(table: Any, windows: Any, step: int | None) -> tuple[RankRow, int, tuple[int, int]] | None:
    """(row with absolute times, its step start, its device span) of one rank's table."""
    from fsdpbench.analysis.crossrank.groups import UNKNOWN, event_groups

    dev = table.device & ((table.step == step) if step is not None else True)
    if not np.any(dev):
        return None
    comp = np.flatnonzero(dev & table.category.mask("compute"))
    idx, names, _ = event_groups(table)  # the whole table: the host ranges that name the groups too
    keep = dev[idx]
    idx, names = idx[keep], names[keep]
    comm: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in sorted(set(names.tolist())):
        sel = idx[names == name]
        comm[name or UNKNOWN] = (table.start_ns[sel], table.end_ns[sel])
    first, last = int(table.start_ns[dev].min()), int(table.end_ns[dev].max())
    host = windows.step == step if step is not None else np.zeros(len(windows.step), bool)
    starts = [first, *windows.start_ns[host].tolist()]
    return RankRow(0, (table.start_ns[comp], table.end_ns[comp]), comm), min(starts), (first, last)


def build(arm: str, folder: Path) -> RankTimeline | None:
    """The aligned timeline of the last profiled step of every rank under ``folder`` (None: no events)."""
    from fsdpbench.analysis.crossrank.groups import group_kinds
    from fsdpbench.analysis.crossrank.stragglers import clock_offset_warning
    from fsdpbench.trace import find_all, read_rank

    found = find_all([folder])
    # a rank analysed on another node is here as its compact result alone: it is not drawn (counted)
    sources = [s for s in found if s.path.exists()]
    numbered = [
        (int(m.group(1)) if (m := _RANK.search(str(s.path))) else i, s) for i, s in enumerate(sources)
    ]
    numbered.sort(key=lambda x: x[0])  # by the rank in the path, so only the drawn ranks are read
    left_out = max(len(numbered) - MAX_RANKS, 0) + len(found) - len(sources)
    traces = []
    for i, src in numbered[:MAX_RANKS]:
        trace = read_rank(src)
        traces.append((trace.rank if trace.rank is not None else i, trace))
    traces.sort(key=lambda x: x[0])
    steps = [int(s) for _, t in traces for s in t.windows.step.tolist()]
    step = max(steps) if steps else None
    rows, origins, spans, metas = [], [], [], []
    for rank, trace in traces:
        got = _rank_row(trace.table, trace.windows, step)
        if got is None:
            continue
        row, origin, span = got
        row.rank = int(rank)
        rows.append(row)
        origins.append(origin)
        spans.append(span)
        metas.append(SimpleNamespace(rank=int(rank), groups=trace.groups, by_group=dict.fromkeys(row.comm)))
    if not rows:
        return None
    aligned = clock_offset_warning([r.rank for r in rows], spans) is None
    zero = min(origins)
    for row, origin in zip(rows, origins, strict=True):
        shift = zero if aligned else origin
        row.compute = (row.compute[0] - shift, row.compute[1] - shift)
        row.comm = {g: (s - shift, e - shift) for g, (s, e) in row.comm.items()}
    kinds = {g: info["kind"] for g, info in group_kinds(metas).items()}
    return RankTimeline(arm, step, rows, kinds, aligned, left_out)


def ensure(data: Any) -> None:
    """Fill ``data.rank_timelines`` (arm → :class:`RankTimeline`) from each profiled arm's folder; an arm
    whose traces cannot be read is named in ``data.missing``."""
    for arm, folder in data.profile_dirs().items():
        try:
            timeline = build(arm, folder)
        except Exception as exc:  # the report shows what it can; this figure is one part of it
            log.warning("rank timeline of %s failed", arm, exc_info=True)
            data.missing.append(f"no all-ranks timeline for arm `{arm}`: {exc}")
            continue
        if timeline is not None:
            data.rank_timelines[arm] = timeline
