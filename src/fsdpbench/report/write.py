"""Write a run's report: fill in what the run folder lacks (``analysis.json``, ``diff.json`` /
``diff.md``, one step's timeline per arm), then render ``report.md`` + ``figures/*.svg`` and a
self-contained ``report.html`` (``write_report``); the sweep index (``write_index``). Re-exported by
:mod:`fsdpbench.report`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from fsdpbench.analysis import derived
from fsdpbench.report.blocks import render
from fsdpbench.report.diff_md import diff_markdown
from fsdpbench.report.load import RunData, Timeline, load_run
from fsdpbench.results import run_folder

__all__ = ["render", "timeline_from_analysis", "write_index", "write_report"]

log = logging.getLogger(__name__)


def _ensure_analysis(data: RunData, written: list[Path]) -> dict[str, Any]:
    """``derived.ensure_analysis`` of every profiled arm; an arm that fails is named in the report.
    Returns arm → the ``Analysis`` objects analysed now (empty when analysis.json was reused)."""
    if not data.profile_dirs():
        return {}
    path = data.run_dir / run_folder.ANALYSIS
    before = path.stat().st_mtime_ns if path.is_file() else None
    failed: dict[str, Exception] = {}
    analyses = derived.ensure_analysis(
        data.run_dir, list(data.profile_dirs()), failed=failed, decoded=data.analysis
    )  # the analysis.json load_run decoded: not decoded again
    for arm, exc in failed.items():
        log.warning("analysis of arm %s failed: %s", arm, exc)
        data.missing.append(
            f"the profiles of arm `{arm}` (`{run_folder.profile_dir(data.run_dir, arm)}`) could not be "
            f"analysed: {exc}"
        )
    if path.is_file() and path.stat().st_mtime_ns != before:
        written.append(path)
        data.analysis = run_folder.read_json_file(path)
    # analysed now: their ranks know their traces (read back from analysis.json they do not)
    return {a: r for a, r in analyses.items() if r.ranks and all(rank.source for rank in r.ranks)}


def _ensure_diff(data: RunData, written: list[Path]) -> None:
    """``derived.ensure_diffs`` when at least two arms are analysed; a failure is named in the report."""
    if len(data.analysis or {}) < 2:
        return
    paths = [data.run_dir / run_folder.DIFF_JSON, data.run_dir / run_folder.DIFF_MD]
    before = [p.stat().st_mtime_ns if p.is_file() else None for p in paths]
    try:
        data.diffs = derived.ensure_diffs(
            data.run_dir, lambda diffs: "\n\n".join(diff_markdown(r) for r in diffs)
        )
    except Exception as exc:
        log.warning("diff of %s failed", data.run_dir, exc_info=True)
        data.missing.append(f"the diff of the arms failed: {exc}")
        return
    written += [p for p, t in zip(paths, before, strict=True) if p.is_file() and p.stat().st_mtime_ns != t]


def _column(events: Any, name: str) -> np.ndarray | None:
    try:
        col = events[name]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return np.asarray(col)


def timeline_from_analysis(arm: str, analysis: Any) -> Timeline | None:
    """The first rank's events of one profiler step, shifted to start at 0 (``None`` when absent).

    The step is the rank's analysed step when set, else the last step in the table (the profiled
    active step); with no step column the whole trace is used.
    """
    ranks = getattr(analysis, "ranks", None) or []
    if not ranks:
        return None
    rank = min(ranks, key=lambda r: getattr(r, "rank", 0))
    events = getattr(rank, "events", None)
    if events is None:
        return None
    start, end = _column(events, "start_ns"), _column(events, "end_ns")
    if start is None or end is None or len(start) == 0:
        return None
    names = _column(events, "name")
    category = _column(events, "category")
    lane = _column(events, "lane")
    n = len(start)
    mask = np.ones(n, dtype=bool)
    step_col = _column(events, "step")
    chosen = getattr(rank, "step", None)
    if step_col is not None:
        valid = (
            step_col[np.asarray([v is not None for v in step_col])] if step_col.dtype == object else step_col
        )
        valid = np.asarray(valid, dtype=np.float64)
        valid = valid[np.isfinite(valid) & (valid >= 0)]
        if chosen is None and valid.size:
            chosen = int(valid.max())
        if chosen is not None:
            mask = np.asarray(step_col == chosen, dtype=bool)
    if not mask.any():
        mask = np.ones(n, dtype=bool)
    start = start[mask].astype(np.int64)
    end = end[mask].astype(np.int64)
    t0 = start.min()
    return Timeline(
        arm=arm,
        rank=int(getattr(rank, "rank", 0)),
        step=int(chosen) if chosen is not None else None,
        name=list(names[mask].astype(str)) if names is not None else [""] * len(start),
        category=list(category[mask].astype(str)) if category is not None else ["other"] * len(start),
        lane=list(lane[mask].astype(str)) if lane is not None else ["events"] * len(start),
        start_ns=start - t0,
        end_ns=end - t0,
    )


def _ensure_timelines(data: RunData, analysed: dict[str, Any]) -> None:
    """One step of one rank per arm; analyses rank 0's folder alone when only analysis.json was reused."""
    for arm, folder in data.profile_dirs().items():
        result = analysed.get(arm)
        if result is None:
            rank_dirs = sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith("rank"))
            try:
                from fsdpbench.analysis import analyze

                result = analyze([rank_dirs[0] if rank_dirs else folder])
            except Exception as exc:
                data.missing.append(f"no timeline for arm `{arm}`: its events could not be read ({exc}).")
                continue
        try:
            timeline = timeline_from_analysis(arm, result)
        except Exception as exc:
            log.warning("timeline of %s failed", arm, exc_info=True)
            data.missing.append(f"no timeline for arm `{arm}`: {exc}")
            continue
        if timeline is not None:
            data.timelines[arm] = timeline


def write_report(run_dir: Path | str, memory_rank: int = 0) -> list[Path]:
    """Write analysis.json and diff.json/diff.md where missing or stale, then report.md (with
    figures/*.svg beside it) and a self-contained report.html.

    Args:
        run_dir: a results folder of ``fsdpbench ab`` / ``run`` (docs/DATA.md).
        memory_rank: the rank whose memory step the memory timelines show (0: summary.json's).

    Returns:
        The paths written, report.html last.

    Raises:
        InputError: ``run_dir`` is not a run folder (none of manifest.json, summary.json, steps.jsonl).
    """
    from fsdpbench.report.build import build_report

    data = load_run(Path(run_dir))
    if memory_rank and data.summary is not None:
        for arm, timeline in derived.memory_timelines_of_rank(
            data.run_dir, data.summary.to_dict(), memory_rank
        ).items():
            data.summary.arms[arm].memory_timeline = timeline
    written: list[Path] = []
    analysed = _ensure_analysis(data, written)
    _ensure_diff(data, written)
    if data.profile_dirs():
        _ensure_timelines(data, analysed)
        from fsdpbench.report import rank_timeline

        rank_timeline.ensure(data)
    title, blocks = build_report(data)
    return written + render(data.run_dir, run_folder.REPORT, title, blocks)


def write_index(tree: Path | str) -> list[Path]:
    """The sweep index (index.md, index.html) of a sweep results tree; see ``fsdpbench.report.index``."""
    from fsdpbench.report.index import write_index as _write_index

    return _write_index(Path(tree))
