"""A run folder's derived files: ``analysis.json`` and ``diff.json`` (kept fresh against the profiles), and the
memory-step timelines the report and the diff read. Torch-free; the analysis proper is imported only when it runs.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from fsdpbench.errors import InputError
from fsdpbench.results.run_folder import (
    ANALYSIS,
    DIFF_JSON,
    DIFF_MD,
    LAUNCHES,
    MANIFEST,
    MEMORY_STEP,
    SUMMARY,
    diff_list,
    memory_step_files,
    memory_step_npu_dir,
    profile_dir,
    profiled_arms,
    read_json_file,
    read_json_if_readable,
    write_atomic,
    write_json,
)
from fsdpbench.results.stats import peak_memory_figure

if TYPE_CHECKING:
    from fsdpbench.analysis.compare.diff import DiffResult
    from fsdpbench.analysis.output.result import Analysis
    from fsdpbench.analysis.output.result_records import AnalysisRecord

log = logging.getLogger(__name__)

BROKEN_ANALYSIS_HINT = "remove it: fsdpbench analyzes the profiles again"
"""What an error about a broken analysis.json ends with (every reader of the file says the same)."""


def memory_timelines(run_dir: str | Path, labels: list[str], rank: int = 0) -> dict[str, Any]:
    """``{arm: memory_timeline}`` of ``rank`` for the arms whose memory step was recorded
    (``analysis.rank.memory_timeline.step_timeline``; on NPU ``analysis.rank.ascend_memory_timeline``); an arm whose
    files cannot be read gets ``{"error": why}``."""
    import gzip

    from fsdpbench.analysis.rank.memory_timeline import step_timeline

    out: dict[str, Any] = {}
    for arm in labels:
        trace, live = memory_step_files(run_dir, arm, rank)
        npu_dir = memory_step_npu_dir(run_dir, arm, rank)
        if not trace.is_file() and npu_dir.is_dir():
            out[arm] = _ascend_memory_timeline(npu_dir, live, rank)
            continue
        if not trace.is_file() or not live.is_file():
            continue
        try:
            events = orjson.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
            facts = read_json_file(live)
            out[arm] = step_timeline(events, facts["live_at_start_bytes"], facts.get("device_type", 0))
            out[arm]["rank"] = rank
        except (OSError, ValueError, KeyError, TypeError, InputError) as exc:
            out[arm] = {"error": f"{trace}: {exc}"}
    return out


def memory_timelines_of_rank(run_dir: str | Path, summary: Mapping[str, Any], rank: int) -> dict[str, Any]:
    """``{arm: memory_timeline}`` for the report and the diff: summary.json's (rank 0) for ``rank`` 0, else
    read from ``memory_step/<arm>/`` (``--memory-rank``). Raises ``InputError`` when no arm recorded ``rank``."""
    labels = list(summary.get("arms") or {})
    if rank == 0:
        return {label: (summary["arms"].get(label) or {}).get("memory_timeline") for label in labels}
    if rank < 0:
        raise InputError(f"--memory-rank {rank}: a rank is 0 or more")
    found = memory_timelines(run_dir, labels, rank)
    if not found:
        have = sorted(
            {p.name.split(".")[0].removeprefix("rank") for p in (Path(run_dir) / MEMORY_STEP).glob("*/rank*")}
        )
        raise InputError(
            f"{Path(run_dir) / MEMORY_STEP}: no arm recorded a memory step of rank {rank} "
            f"(ranks recorded: {', '.join(have) or 'none'}); pick one of those with --memory-rank"
        )
    return {label: found.get(label) for label in labels}


def _ascend_memory_timeline(npu_dir: Path, live: Path, rank: int) -> dict[str, Any]:
    """The memory timeline of one rank's parsed torch_npu memory step (``*_ascend_pt`` under ``npu_dir``)."""
    from fsdpbench.analysis.rank.ascend_memory_timeline import ascend_step_timeline, read_export

    folders = sorted(npu_dir.glob("*_ascend_pt"))
    if not folders:
        return {
            "error": f"{npu_dir}: no *_ascend_pt folder; the memory step's torch_npu profile was not parsed "
            "(see the profiling launch's ascend_parse.log: launches/<arm>/round0/, or profile/)"
        }
    try:
        facts = read_json_file(live) if live.is_file() else {}
        timeline = ascend_step_timeline(read_export(folders[-1]), facts.get("live_at_start_bytes"))
    except (OSError, ValueError, KeyError, TypeError, InputError) as exc:
        return {"error": f"{folders[-1]}: {exc}"}
    timeline["rank"] = rank
    return timeline


def _newest_mtime(folder: Path) -> float:
    """The newest modification time of the profiler output under ``folder`` (0 when it holds none).

    Hidden files are skipped: the trace readers' event-table caches (``.<trace>.fsdpbench.npz``) and
    temporary files are written beside the traces when they are read, and are not new profiles."""
    newest = 0.0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            if name.startswith("."):
                continue
            try:
                newest = max(newest, os.stat(os.path.join(dirpath, name)).st_mtime)
            except OSError:  # removed while we walk
                pass
    return newest


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _has_fit_events(entry: AnalysisRecord) -> bool:
    """Whether an analysis.json entry keeps every rank's collective events (the per-call α–β fits'
    input). One written before they were kept would give a diff without those fits, unlike the traces
    it stands for, so it counts as stale while those traces are there."""
    return all(r.collective_events is not None for r in entry.ranks)


def read_analysis_json(path: Path, decoded: Mapping[str, Any] | None = None) -> dict[str, AnalysisRecord]:
    """A run folder's analysis.json as arm → its record; ``InputError`` naming the file and the field
    (and how to get a good one) when it is not JSON or not such a file. ``decoded``: the file's JSON as the
    caller already read it (``result.read_analysis_arms``), typed without reading the file again."""
    from fsdpbench.analysis.output.result import analysis_records, decode_analysis_file

    try:
        return decode_analysis_file(path) if decoded is None else analysis_records(decoded, path)
    except InputError as exc:
        raise InputError(f"{exc} ({BROKEN_ANALYSIS_HINT})") from None


def ensure_analysis(
    run_dir: str | Path,
    arms: Iterable[str] | None = None,
    *,
    step: int | None = None,
    reanalyze: bool = False,
    failed: dict[str, Exception] | None = None,
    decoded: Mapping[str, Any] | None = None,
) -> dict[str, Analysis]:
    """Each arm's analysis: its ``analysis.json`` entry when fresh, else a new analysis of its profiles.

    An entry is fresh when ``analysis.json`` is no older than every file under ``profiles/<arm>`` and
    keeps each rank's collective events. New analyses of the default steps (``step`` None) are written
    back into ``analysis.json``, with those events (``result.encode_analysis_file``), in one atomic
    write, which keeps the other fresh entries and drops stale ones, so the next call reuses them.

    Args:
        run_dir: a run folder (docs/DATA.md).
        arms: arm labels (default: ``profiled_arms``).
        step: analyse only this profiler step (never cached: ``analysis.json`` holds the default).
        reanalyze: analyse even fresh arms. An entry without its ranks' collective events (the per-call
            α–β fits' input; written before analysis.json kept them) is fresh only while the arm has
            no profiles to analyse again.
        failed: when given, an arm whose profiles are missing or cannot be analysed is put here and left
            out of the result; when None the error propagates.
        decoded: ``analysis.json`` as the caller already decoded it (the report's ``load_run``): typed from
            that, not read again (None: read the file, when there is one).
    Returns:
        arm → its ``Analysis`` (read back from ``analysis.json``, or analysed now), in ``arms`` order.
    Raises:
        InputError: analysis.json is not JSON or not an analysis file (naming the field); (``failed``
            None) an arm has no profiles, or its analysis failed.
    """
    from fsdpbench.analysis.output.result import Analysis, encode_analysis_file

    run_dir = Path(run_dir)
    arms = profiled_arms(run_dir) if arms is None else list(arms)
    path = run_dir / ANALYSIS
    saved_at = _mtime(path)
    cached = read_analysis_json(path, decoded) if saved_at is not None else {}
    newest = {arm: _newest_mtime(profile_dir(run_dir, arm)) for arm in cached}
    fresh = {
        arm: entry
        for arm, entry in cached.items()
        if saved_at is not None
        and saved_at >= newest[arm]
        # without its events only while there are no profiles to analyse (an analysis.json kept alone)
        and (_has_fit_events(entry) or newest[arm] == 0.0)
    }
    out: dict[str, Analysis] = {}
    new: dict[str, Analysis] = {}
    for arm in arms:
        if arm in fresh and step is None and not reanalyze:
            log.debug("arm %s: using %s", arm, path)
            out[arm] = Analysis.from_record(fresh[arm])
            continue
        folder = profile_dir(run_dir, arm)
        try:
            if not folder.is_dir() or _newest_mtime(folder) == 0.0:
                raise InputError(
                    f"arm {arm!r}: no profiles under {folder}; rerun with `fsdpbench ab --profile` "
                    f"(or the arm failed: see {LAUNCHES}/<arm>/round0/, or profile/ with --separate-profile)"
                )
            from fsdpbench.analysis import analyze  # pandas and the trace readers: only when analysing

            log.debug("arm %s: analyzing %s", arm, folder)
            out[arm] = analyze([folder], step=step)
        except Exception as exc:
            if failed is None:
                raise
            log.debug("analysis of %s failed", folder, exc_info=True)
            failed[arm] = exc
            fresh.pop(arm, None)
            continue
        if step is None:
            new[arm] = out[arm]
    for arm in _replay_wanted(run_dir, out, step, failed):
        if step is None:
            new[arm] = out[arm]
    if new:
        write_atomic(path, encode_analysis_file({**fresh, **new}))
    return out


def _replay_wanted(
    run_dir: Path, out: dict[str, Analysis], step: int | None, failed: dict[str, Exception] | None
) -> list[str]:
    """Replay on each arm of ``out`` the what-ifs its findings read (``replay_edits.wanted_edits``: the
    straggler, the regroupings at the other arms' granularity, the prefetch of the most exposed unit) that
    its ``replay.what_if`` lacks; an arm read back from analysis.json without them (written before, or the
    other arms changed) is analysed again from its profiles, which keeps the joined graph. Returns the arms
    whose analyses changed (``out`` updated in place)."""
    from fsdpbench.analysis.findings import replay_edits

    manifest = read_json_if_readable(run_dir / MANIFEST) or {}
    arms = {a.get("label"): a for a in manifest.get("arms") or [] if isinstance(a, Mapping)}
    wanted = replay_edits.wanted_for_arms(out, arms)
    changed = []
    for arm, all_edits in wanted.items():
        edits = replay_edits.missing_edits(out[arm], all_edits)
        if not edits:
            continue
        if getattr(out[arm], "_replay", None) is None:
            folder = profile_dir(run_dir, arm)
            if not folder.is_dir() or _newest_mtime(folder) == 0.0:
                continue  # an analysis.json kept alone: its what-ifs stay as they are
            from fsdpbench.analysis import analyze

            try:
                out[arm] = analyze([folder], step=step)
            except Exception as exc:
                if failed is None:
                    raise
                log.debug("analysis of %s failed", folder, exc_info=True)
                failed[arm] = exc
                out.pop(arm)
                continue
            edits = replay_edits.missing_edits(out[arm], all_edits)
        log.debug("arm %s: replaying %s", arm, ", ".join(edits))
        replay_edits.add_what_ifs(out[arm], edits)
        changed.append(arm)
    return changed


def write_diffs(
    diffs: list[dict[str, Any]], json_path: str | Path | None, md_path: str | Path | None, markdown: str
) -> list[Path]:
    """Write diff.json (one object for one test arm, else a list; docs/DATA.md) and diff.md atomically;
    a ``None`` path is skipped. Returns the paths written."""
    written = []
    if json_path is not None:
        written.append(write_json(json_path, diffs[0] if len(diffs) == 1 else diffs))
    if md_path is not None:
        written.append(write_atomic(md_path, markdown))
    return written


def _run_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / MANIFEST
    if not path.is_file():
        raise InputError(
            f"{run_dir} is not a fsdpbench run folder (no {MANIFEST}); pass a run folder "
            "written by `fsdpbench ab --profile`, or two trace paths BASE TEST"
        )
    manifest = read_json_file(path)
    if len(manifest.get("arms") or []) < 2:
        raise InputError(
            f"{path} lists {len(manifest.get('arms') or [])} arm(s); a diff needs at least two (base and test)"
        )
    return manifest


def _diff_arms(
    run_dir: Path, manifest: dict[str, Any], analyses: Mapping[str, Any], memory_rank: int = 0
) -> list[DiffResult]:
    from fsdpbench.analysis.compare.calibration import calibration_pairs
    from fsdpbench.analysis.compare.diff import add_calibration, diff_analyses

    summary = read_json_file(run_dir / SUMMARY) if (run_dir / SUMMARY).is_file() else {}
    arms = {a["label"]: a for a in manifest["arms"]}
    env = manifest.get("environment") or {}
    model = (manifest.get("config") or {}).get("model")
    side = {"world_size": env.get("world_size"), "model": model}
    context = {
        "parity": summary.get("parity"),
        "base": side,
        "test": side,
        "num_layers": (model or {}).get("num_hidden_layers") if isinstance(model, Mapping) else None,
        "peak_memory": {
            label: list(peak_memory_figure(stats)) for label, stats in (summary.get("arms") or {}).items()
        },
        "memory_timeline": memory_timelines_of_rank(run_dir, summary, memory_rank),
    }
    labels = list(arms)
    base = labels[0]

    def pair(x: str, y: str) -> DiffResult:
        return diff_analyses(
            analyses[x],
            analyses[y],
            base_label=x,
            test_label=y,
            base_arm=arms[x],
            test_arm=arms[y],
            context=context,
        )

    results = [pair(base, label) for label in labels[1:]]
    # calibration covers every counterfactual pair: a pair between two test arms is diffed in memory only,
    # and its entries go with the diff of its later arm
    timed = {label: ((summary.get("arms") or {}).get(label) or {}).get("median_ms") for label in labels}
    extra: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for x, y in calibration_pairs(arms):
        if x != base:
            extra[y].append(pair(x, y).to_dict())
    for result in results:
        add_calibration(result, arms, timed, extra[result.test])
    return results


def diff_run(
    run_dir: str | Path, *, reanalyze: bool = False, step: int | None = None, memory_rank: int = 0
) -> list[DiffResult]:
    """One ``DiffResult`` per test arm of a profiled run, each against the manifest's first arm; the memory
    timelines are ``memory_rank``'s (``memory_timelines_of_rank``).

    The analyses come from ``ensure_analysis``; parity from summary.json, the world size and model from
    manifest.json, the arms' options (prefetch, comm_fusion) from the manifest's arm entries.

    Raises:
        InputError: the folder is not a run, has fewer than two arms, or an arm has no profiles.
    """
    run_dir = Path(run_dir)
    manifest = _run_manifest(run_dir)
    labels = [a.get("label") for a in manifest["arms"]]
    analyses = ensure_analysis(run_dir, labels, step=step, reanalyze=reanalyze)
    return _diff_arms(run_dir, manifest, analyses, memory_rank)


def ensure_diffs(run_dir: str | Path, markdown: Callable[[list[DiffResult]], str]) -> list[dict[str, Any]]:
    """The diff JSON of every test arm: ``diff.json`` while it is no older than ``analysis.json`` (itself no
    older than the profiles), else a new diff (analysing what is stale) written to ``diff.json`` and
    ``diff.md``.

    Args:
        run_dir: a profiled run folder.
        markdown: renders the new diffs as the text of ``diff.md``.
    Returns:
        One diff dict per test arm, in manifest order (always a list).
    Raises:
        InputError: as ``diff_run``.
    """
    run_dir = Path(run_dir)
    manifest = _run_manifest(run_dir)
    labels = [a.get("label") for a in manifest["arms"]]
    saved_at, analysed_at = _mtime(run_dir / DIFF_JSON), _mtime(run_dir / ANALYSIS)
    if (
        saved_at is not None
        and analysed_at is not None
        and saved_at >= analysed_at
        and all(analysed_at >= _newest_mtime(profile_dir(run_dir, arm)) for arm in labels)
    ):
        diffs = diff_list(read_json_if_readable(run_dir / DIFF_JSON))
        if diffs:
            return diffs
    analyses = ensure_analysis(run_dir, labels)
    results = _diff_arms(run_dir, manifest, analyses)
    diffs = [r.to_dict() for r in results]
    write_diffs(diffs, run_dir / DIFF_JSON, run_dir / DIFF_MD, markdown(results))
    return diffs
