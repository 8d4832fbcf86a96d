"""Reports: one page per run (``write_report``) and one index per sweep (``write_index``).

The report side never imports torch. ``write_report`` fills in what a run folder lacks before it
writes: ``analysis.json`` from the profiles (when absent or older than them), ``diff.json`` /
``diff.md`` (when absent or older than the analysis), then ``report.md`` with ``figures/*.svg``
beside it and a self-contained ``report.html``. Any piece that is missing or fails is named in the
report's "Missing pieces" section; the rest is still shown.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from fsdpbench.report.blocks import Figure, to_html, to_markdown
from fsdpbench.report.load import RunData, Timeline, load_run

__all__ = ["write_report", "write_index", "load_run", "RunData"]

log = logging.getLogger(__name__)


def _atomic_write(path: Path, content: str | bytes) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(content.encode() if isinstance(content, str) else content)
    os.replace(tmp, path)
    return path


def _newest_mtime(root: Path) -> float:
    newest = 0.0
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                newest = max(newest, os.stat(os.path.join(dirpath, f)).st_mtime)
            except OSError:
                pass
    return newest


def _stale(target: Path, source_mtime: float) -> bool:
    return not target.is_file() or target.stat().st_mtime < source_mtime


def _ensure_analysis(data: RunData, written: list[Path]) -> dict[str, Any]:
    """Analyse each arm's profiles when analysis.json is absent or stale. Returns arm → Analysis objects
    (empty when the existing analysis.json was reused)."""
    profile_dirs = data.profile_dirs()
    if not profile_dirs:
        return {}
    target = data.run_dir / "analysis.json"
    if not _stale(target, _newest_mtime(data.run_dir / "profiles")) and data.analysis:
        return {}
    try:
        from fsdpbench.analysis import analyze
    except ImportError as exc:
        data.missing.append(
            f"the profiles could not be analysed: the analysis module is unavailable ({exc})."
        )
        return {}
    results: dict[str, Any] = {}
    as_json: dict[str, Any] = {}
    for arm, folder in profile_dirs.items():
        try:
            results[arm] = analyze([folder])
            as_json[arm] = results[arm].to_dict()
        except Exception as exc:  # one arm's bad trace must not hide the others
            log.warning("analysis of %s failed", folder, exc_info=True)
            data.missing.append(f"the profiles of arm `{arm}` (`{folder}`) could not be analysed: {exc}")
    if as_json:
        written.append(
            _atomic_write(
                target, orjson.dumps(as_json, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
            )
        )
        data.analysis = as_json
    return results


def _ensure_diff(data: RunData, written: list[Path]) -> None:
    """Run ``diff_run`` when at least two arms are analysed and diff.json is absent or stale."""
    if len(data.analysis or {}) < 2:
        return
    target = data.run_dir / "diff.json"
    analysis_file = data.run_dir / "analysis.json"
    source_mtime = analysis_file.stat().st_mtime if analysis_file.is_file() else 0.0
    if data.diffs and not _stale(target, source_mtime):
        return
    try:
        from fsdpbench.analysis.diff import diff_run
    except ImportError as exc:
        data.missing.append(f"no diff: the diff module is unavailable ({exc}).")
        return
    try:
        results = diff_run(data.run_dir)
    except Exception as exc:
        log.warning("diff of %s failed", data.run_dir, exc_info=True)
        data.missing.append(f"the diff of the arms failed: {exc}")
        return
    dicts = [r.to_dict() for r in results]
    if not dicts:
        return
    payload = dicts[0] if len(dicts) == 1 else dicts
    written.append(
        _atomic_write(target, orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    )
    from fsdpbench.report.diff_md import to_markdown as diff_markdown

    written.append(_atomic_write(data.run_dir / "diff.md", "\n\n".join(diff_markdown(r) for r in results)))
    data.diffs = dicts


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


def write_report(run_dir: Path | str) -> list[Path]:
    """Write analysis.json and diff.json/diff.md where missing or stale, then report.md (with
    figures/*.svg beside it) and a self-contained report.html.

    Args:
        run_dir: a results folder of ``fsdpbench ab`` / ``run`` (docs/DATA.md).

    Returns:
        The paths written, report.html last.

    Raises:
        InputError: ``run_dir`` is not a run folder (none of manifest.json, summary.json, steps.jsonl).
    """
    from fsdpbench.report.build import build_report

    data = load_run(Path(run_dir))
    written: list[Path] = []
    analysed = _ensure_analysis(data, written)
    _ensure_diff(data, written)
    if data.profile_dirs():
        _ensure_timelines(data, analysed)
    title, blocks = build_report(data)
    return written + render(data.run_dir, "report", title, blocks)


def render(folder: Path, stem: str, title: str, blocks: list) -> list[Path]:
    """Write ``{stem}.md`` + ``figures/*.svg`` and ``{stem}.html`` under ``folder``; return their paths."""
    written: list[Path] = []
    figs = [b for b in _walk(blocks) if isinstance(b, Figure)]
    fig_dir = folder / "figures"
    if figs:
        fig_dir.mkdir(exist_ok=True)
    for fig in figs:
        written.append(
            _atomic_write(fig_dir / f"{fig.name}.svg", '<?xml version="1.0" encoding="utf-8"?>\n' + fig.svg)
        )
    written.append(_atomic_write(folder / f"{stem}.md", to_markdown(title, blocks)))
    written.append(_atomic_write(folder / f"{stem}.html", to_html(title, blocks)))
    return written


def _walk(blocks: list):
    for b in blocks:
        yield b
        yield from _walk(getattr(b, "blocks", []) or [])


def write_index(tree: Path | str) -> list[Path]:
    """The sweep index (index.md, index.html) of a sweep results tree; see ``fsdpbench.report.index``."""
    from fsdpbench.report.index import write_index as _write_index

    return _write_index(Path(tree))
