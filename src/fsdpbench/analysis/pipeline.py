"""The analysis pipeline: find the rank profiles, read and measure each rank (in worker processes, or from
its caches), then the cross-rank numbers (skew, stragglers, waiting vs transferring).

``analyze(paths)`` returns an :class:`~fsdpbench.analysis.output.result.Analysis`; ``rank_metrics(trace)``
measures one rank read by :func:`fsdpbench.trace.read_rank`. Re-exported by :mod:`fsdpbench.analysis`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from fsdpbench.analysis import rank_result, result_cache
from fsdpbench.analysis.crossrank.stragglers import clock_offset_warning, stragglers
from fsdpbench.analysis.output.result import Analysis, RankMetrics, StepMetrics
from fsdpbench.analysis.output.result_records import from_record
from fsdpbench.errors import ConfigError, FsdpbenchError, InputError
from fsdpbench.trace import RankTrace, Source, find_all, read_rank
from fsdpbench.trace import cache as table_cache
from fsdpbench.trace.rank import DEVICE_NOT_RECORDED, ONE_RANK_WORLD

if TYPE_CHECKING:
    from fsdpbench.trace.table import EventTable

# The metric modules and numpy are imported where a rank is measured, not here: a second `fsdpbench
# analyze` on unchanged traces takes every rank from its result cache and never needs them (importing
# numpy alone is ~0.1 s, half of such a run; pandas is not needed even by a cold run).

__all__ = ["RankOutcome", "analyze", "rank_metrics"]

NO_COLLECTIVES = "no collectives found — is this a distributed trace?"
PROGRESS_MIN_RANKS = 4  # more ranks than this get a progress bar (on a terminal)
NUMPY_WAITS_MIN_RANKS = 16
"""From this many ranks the cross-rank waits are matched with numpy (imported for it: ~0.1 s) even when every
rank came from a cache or a compact result: the join of 1,024 ranks × 1,000 collectives took 9.2 CPU s
instead of 29.5 s here, 7.7 s with :func:`_gc_paused` as well (docs/benchmarks.md, "The join")."""


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while ranks are joined: it would walk every live object again
    and again as millions of small ones are made (half the join's CPU time at 1,024 ranks without numpy)."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _window(trace: RankTrace, events: EventTable, steps: Sequence[int]) -> tuple[Any, Any]:
    """The union (intervals) of the steps' windows: each is the host ProfilerStep span widened to the
    device work launched from it (device work lags the host), as torch_npu's step range is."""
    import numpy as np

    s_all, e_all = [], []
    windows = trace.windows
    for st in steps:
        host = windows.step == st
        sel = events.device & (events.step == st)
        starts = windows.start_ns[host].tolist()
        ends = windows.end_ns[host].tolist()
        if sel.any():
            starts.append(int(events.start_ns[sel].min()))
            ends.append(int(events.end_ns[sel].max()))
        if starts and ends:
            s_all.append(min(starts))
            e_all.append(max(ends))
    from fsdpbench.trace import intervals as iv

    return iv.union(np.array(s_all, np.int64), np.array(e_all, np.int64))


def _metrics(
    trace: RankTrace,
    events: EventTable,
    steps: Sequence[int],
    step: int | None,
    busy_all: Any = None,
    unions: Any = None,
) -> StepMetrics:
    from fsdpbench.analysis.rank.collectives import collective_events, summarize
    from fsdpbench.analysis.rank.ops import kernel_time_us, op_stats
    from fsdpbench.analysis.rank.overlap import breakdown
    from fsdpbench.analysis.rank.sync import sync_counts

    window = _window(trace, events, steps) if steps else None
    b = breakdown(events, window=window, busy_all=busy_all, unions=unions)
    stats = op_stats(events)
    return StepMetrics(
        step=step,
        step_time_us=b.window_ns / 1000.0,
        overlap_ratio=b.overlap_ratio,
        compute_us=b.compute_ns / 1000.0,
        comm_us=b.comm_ns / 1000.0,
        overlapped_us=b.overlapped_ns / 1000.0,
        exposed_comm_us=b.exposed_comm_ns / 1000.0,
        free_us=b.free_ns / 1000.0,
        carried_over_us=b.carried_over_ns / 1000.0,
        kernel_time_us=kernel_time_us(stats),
        collectives=summarize(collective_events(events)),
        ops=stats,
        sync=sync_counts(events, trace.recorded_tasks),
    )


def rank_metrics(trace: RankTrace, step: int | None = None) -> RankMetrics:
    """The metrics of one rank's trace.

    Args:
        trace: a rank read by :func:`fsdpbench.trace.read_rank`.
        step: restrict to this profiler step (``ProfilerStep#N``); None = every profiled step
            together (or the whole trace when it has no step markers).
    Raises:
        InputError: ``step`` was not profiled on this rank.
    """
    import numpy as np

    from fsdpbench.analysis.rank.collectives import collective_events

    all_ev = trace.table
    orphans = all_ev.orphan & all_ev.device
    ev = all_ev.take(~orphans) if orphans.any() else all_ev  # orphans are left out of every total
    stepped = ev.step[ev.step >= 0]
    # one step in the events (the usual profile): no Python set of every event's step
    one = stepped.size > 0 and stepped.min() == stepped.max()
    event_steps = {int(stepped[0])} if one else set(stepped.tolist())
    known = sorted(int(s) for s in set(trace.windows.step.tolist()) | event_steps)
    if step is not None:
        if step not in known:
            raise InputError(
                f"{trace.source}: step {step} was not profiled (steps in the trace: {known or 'none'})"
            )
        chosen = [step]
    else:
        chosen = known
    from fsdpbench.analysis.rank.overlap import category_union
    from fsdpbench.trace import intervals as iv

    # every step's device work (what is not free inside a step's window): ∪ compute ∪ comm of the whole
    # table, its two unions kept for when they are also the chosen steps' ones
    unions_all = category_union(ev, "compute"), category_union(ev, "comm")
    busy_all = iv.union_of(*unions_all)
    in_chosen = np.isin(ev.step, chosen) if chosen else None
    # every event in the chosen steps (one profiled step, as usual): the table itself, not a copy of it
    sel = ev if in_chosen is None or in_chosen.all() else ev.take(in_chosen)
    # ∪ compute and ∪ comm of the chosen steps: for the totals, exposed comm and the groups
    unions = unions_all if sel is ev else (category_union(sel, "compute"), category_union(sel, "comm"))
    total = _metrics(trace, sel, chosen, chosen[0] if len(chosen) == 1 else None, busy_all, unions)
    per_step = (
        [_metrics(trace, ev.take(ev.step == s), [s], s, busy_all) for s in chosen]
        if len(chosen) > 1
        else [total]
    )
    trace.warnings.extend(_fallback_window_warnings(trace, chosen, per_step, total))
    from fsdpbench.analysis.crossrank.groups import group_metrics

    by_group, group_warning = group_metrics(sel, compute=unions[0])
    if group_warning:
        trace.warnings.append(f"rank {trace.rank}: {group_warning}")
    dev = ev.device
    span = (int(ev.start_ns[dev].min()), int(ev.end_ns[dev].max())) if dev.any() else None
    from fsdpbench.analysis.crossrank.waits import rank_marks

    ce = collective_events(sel)
    units, places, units_source, prefetch = _units(trace, ev, chosen)
    ce.update(rank_marks(sel, by_order=trace.mode == "cpu", places=places))
    dur = all_ev.end_ns - all_ev.start_ns
    all_dev_ns = int(dur[all_ev.device].sum())
    orphan_ns = int(dur[orphans].sum())
    return from_record(
        total,
        RankMetrics,
        rank=int(trace.rank or 0),
        source=trace.source,
        format=trace.format,
        mode=trace.mode,
        steps=per_step,
        collective_events=ce,
        exposed_comm_ns=iv.difference(unions[1], unions[0]),  # = waits.exposed_intervals(sel)
        cross_check=trace.cross_check,
        device_span_ns=span,
        orphan_events=int(orphans.sum()),
        orphan_us=orphan_ns / 1000.0,
        orphan_share=orphan_ns / all_dev_ns if all_dev_ns else None,
        groups=trace.groups,
        world_size=trace.world_size,
        by_group=by_group,
        units=units,
        units_source=units_source,
        prefetch=prefetch,
        _events=all_ev,
    )


def _fallback_window_warnings(
    trace: RankTrace, chosen: Sequence[int], per_step: Sequence[StepMetrics], total: StepMetrics
) -> list[str]:
    """A warning for each window not taken from a host ``ProfilerStep#N`` range (docs/analysis-definitions.md,
    "Part of a group, a bad row, a fallback window"): a step the trace numbers but has no host range for (an Ascend export without
    trace_view.json) is the span of its device work; a trace with no step at all is analysed whole."""
    if (total.step_time_us or 0) <= 0:
        return []
    if not chosen:
        return [
            f"rank {trace.rank}: {Path(trace.source).name} has no ProfilerStep# range: the whole trace is "
            f"analysed as one step, its window the span of its device work ({total.step_time_us / 1000:.3f} ms)"
        ]
    hosted = set(trace.windows.step.tolist())
    out = []
    for m in per_step:
        if m.step is not None and m.step not in hosted:
            why = "no trace_view.json" if trace.format == "ascend" else "the trace has no such range"
            out.append(
                f"rank {trace.rank} step {m.step}: no host ProfilerStep#{m.step} range ({why}): the step's "
                f"window is the span of its device tasks ({m.step_time_us / 1000:.3f} ms), without the host "
                "time before the first and after the last"
            )
    return out


def _units(
    trace: RankTrace, ev: EventTable, chosen: Sequence[int]
) -> tuple[list[dict[str, Any]] | None, dict[str, Any] | None, str, list[dict[str, Any]] | None]:
    """The unit × phase rows of the chosen steps, each collective's (unit, phase) in
    ``collective_events``' order (``attribution.collective_places``: through its launching host call,
    CPU and device traces alike), the source of the units (``unit_ranges.find_ranges``) and FSDP2's
    prefetch edges (``attribution.prefetches``; None without FSDP2 ranges). Rows and places are None
    where the trace has no (unit, phase) windows. Ascend exports take part through the host operator
    the profiler links to each device task (:mod:`fsdpbench.trace.ascend_launch`)."""
    import numpy as np

    from fsdpbench.analysis.rank import attribution, unit_ranges

    if trace.format not in ("kineto", "ascend"):
        return None, None, unit_ranges.SOURCE_NONE, None
    if trace.format == "ascend" and not (ev.device & (ev.launch_lane != ev.lane.codes)).any():
        # no device task linked to a host operator (an export without flows or connection ids):
        # every row would be (outside)
        return None, None, unit_ranges.SOURCE_NONE, None
    ranges = unit_ranges.find_ranges(ev)
    trace.warnings.extend(f"rank {trace.rank}: {note}" for note in ranges.notes)
    select = np.isin(ev.step, chosen) if chosen else None
    edges = attribution.prefetches(ev, ranges, select)
    prefetch = (
        edges if edges or ranges.source in (unit_ranges.SOURCE_FSDP2, unit_ranges.SOURCE_REPLICATE) else None
    )
    if not len(ranges):
        return None, None, ranges.source, prefetch
    rows = attribution.unit_phase_rows(ev, trace.mode, select, ranges)
    places = attribution.collective_places(ev, trace.mode, select, ranges)
    return rows, places, ranges.source, prefetch


def _prepare_workers() -> None:
    """Import what reading and measuring a rank needs (numpy, the decoder, the metric modules), so
    that worker processes forked afterwards inherit them instead of each importing them again."""
    import fsdpbench.analysis.crossrank.groups
    import fsdpbench.analysis.crossrank.replay_graph
    import fsdpbench.analysis.crossrank.waits
    import fsdpbench.analysis.rank.attribution
    import fsdpbench.analysis.rank.collectives
    import fsdpbench.analysis.rank.ops
    import fsdpbench.analysis.rank.overlap
    import fsdpbench.analysis.rank.sync
    import fsdpbench.trace.intervals
    import fsdpbench.trace.kineto  # noqa: F401 - the decoder (msgspec) and the table


# glibc's malloc.h: mallopt's parameters and their defaults
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_GLIBC_DEFAULTS = {_M_TRIM_THRESHOLD: 128 << 10, _M_TOP_PAD: 128 << 10, _M_MMAP_THRESHOLD: 128 << 10}


@contextlib.contextmanager
def _freed_memory_kept() -> Iterator[None]:
    """While ranks are read: glibc's malloc keeps the memory it frees (up to 256 MiB) instead of handing
    it back to the system at once. Reading a rank frees and takes again its chunks' objects and arrays
    over and over, and each page handed back is a page fault (kernel time) when it is taken again:
    ~5,000 a 60k-kernel rank. Entered before the workers fork (they inherit it); on leaving, this
    process hands back what it kept and goes back to glibc's defaults. Peak memory does not change.
    Nothing happens off glibc."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            raise ValueError
        import ctypes  # numpy imports it already

        libc = ctypes.CDLL(None)
        mallopt, malloc_trim = libc.mallopt, libc.malloc_trim
    except (ValueError, OSError, AttributeError):
        yield
        return
    mallopt(_M_TRIM_THRESHOLD, 256 << 20)
    mallopt(_M_TOP_PAD, 64 << 20)
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)  # glibc's own ceiling; arrays above it stay mmapped
    try:
        yield
    finally:
        for param, value in _GLIBC_DEFAULTS.items():
            mallopt(param, value)
        malloc_trim(0)


class _Job:
    """:func:`_analyze_one` of one ``(index, source)`` of ``analyze``'s ranks, as a :class:`fanout.Fanout`
    item (the step and cache keys shared by all)."""

    def __init__(self, step: int | None, keys: list[CacheKeys | None], graph: bool = True) -> None:
        self.step, self.keys, self.graph = step, keys, graph

    def __call__(self, item: tuple[int, Source]) -> RankOutcome:
        i, source = item
        return _analyze_one(source, self.step, False, self.keys[i], self.graph)


def _lost(item: tuple[int, Source], why: str) -> RankOutcome:
    """The outcome of a rank whose worker process died while reading it."""
    path = item[1].path
    return RankOutcome(
        False,
        None,
        [],
        None,
        f"{path}: the worker process reading it died ({why}); analyse it alone with --workers 1 to see why",
    )


class CacheKeys(NamedTuple):
    """The cache keys of one trace, taken once per analysis before it is read (so that a trace changed
    meanwhile is read again next time): the hash of its first MiB (of every file of an Ascend folder) is
    computed once, whichever cache uses it."""

    table: dict[str, Any]
    """:func:`fsdpbench.trace.cache.trace_key`: the event-table cache's key."""
    result: dict[str, Any]
    """:func:`fsdpbench.analysis.result_cache.key`: the result cache's key (and, with the other ranks',
    the cross-rank cache's)."""


def _cache_keys(source: Source, step: int | None) -> CacheKeys | None:
    """The cache keys of ``source`` (None with the cache off or a file that cannot be read: its reader
    then says what is wrong)."""
    if not table_cache.enabled():
        return None
    path = Path(source.path)
    try:
        table = table_cache.trace_key(path)
    except OSError:
        return None
    return CacheKeys(table, result_cache.key(path, step, table))


class RankOutcome(NamedTuple):
    """What reading and measuring one rank gave (:func:`_analyze_one`, or the rank's result cache)."""

    read: bool
    """The trace could be read."""
    trace_rank: int | None
    """The rank the trace (or its path) names; None: it names none."""
    warnings: list[str]
    """The reader's warnings."""
    metrics: RankMetrics | None
    """None when the rank could not be read or measured."""
    error: str | None
    """Why the rank could not be read or measured (None: it could)."""


def _rank_graph(trace: RankTrace, metrics: RankMetrics) -> Any:
    """The rank's part of the step replay's graph (:func:`fsdpbench.analysis.crossrank.replay_graph.build_rank_graph`):
    small arrays, shipped back from the worker instead of the table; None (and a warning) when it cannot
    be built: the replay must never take the rank's metrics down with it."""
    from fsdpbench.analysis.crossrank.replay_graph import build_rank_graph

    steps = [s.step for s in metrics.steps if s.step is not None]
    try:
        return build_rank_graph(trace, steps)
    except Exception as exc:  # noqa: BLE001
        trace.warnings.append(
            f"rank {trace.rank}: its replay graph could not be built ({type(exc).__name__}: {exc})"
        )
        return None


def _analyze_one(
    source: Source,
    step: int | None,
    keep_events: bool = True,
    keys: CacheKeys | None = None,
    graph: bool = True,
) -> RankOutcome:
    """Read and measure one rank (runs in a worker process). Reads the event-table cache and writes the
    table and result caches under ``keys`` (:func:`_cache_keys`, taken before reading; None: the
    table cache takes its own key when it is on, and the result cache is not written)."""
    try:
        trace = read_rank(source, key=None if keys is None else keys.table)
    except FsdpbenchError as exc:
        return RankOutcome(False, None, [], None, str(exc))
    try:
        metrics = rank_metrics(trace, step)
    except FsdpbenchError as exc:
        return RankOutcome(True, trace.rank, trace.warnings, None, str(exc))
    if graph:  # the step replay's part of this rank (not built when the replay is not asked for)
        metrics.replay_graph = _rank_graph(trace, metrics)
    if keys is not None:
        result_cache.store(Path(source.path), keys.result, trace.rank, trace.warnings, metrics)
        if metrics.replay_graph is not None:
            result_cache.store_graph(Path(source.path), keys.result, metrics.replay_graph)
    if not keep_events:
        metrics._events = None  # the bulk of the memory: read again on first use
    return RankOutcome(True, trace.rank, trace.warnings, metrics, None)


@contextlib.contextmanager
def _progress_bar(total: int, show: bool) -> Iterator[Callable[[], None]]:
    """A rich progress bar over the ranks on stderr (never stdout, which may carry ``--json -``);
    yields the function that counts one rank done (a no-op when ``show`` is false)."""
    if not show:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("reading ranks"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
    task = bar.add_task("ranks", total=total)
    with bar:
        yield lambda: bar.advance(task)


def _as_completed(futures: dict[Any, int]) -> Iterator[Any]:
    if not futures:
        return iter(())
    from concurrent.futures import as_completed

    return as_completed(futures)


def _cross_check_warnings(r: RankMetrics) -> list[str]:
    """Differences over 1 µs between our numbers and the profiler's own per-step summary
    (``step_trace_time.csv``, or ``analysis.db`` ``StepTraceTime`` for a db export), with the cause
    when it is known: an older profiler's communication is the union of HCCL tasks, ours of whole
    operations (the reader gives the task-level figures as ``comm_tasks_us``/``exposed_comm_tasks_us``)."""
    plain = r.cross_check_columns()
    if not plain or not plain["columns"]:
        return []
    cols = plain["columns"]
    refs = cols.get("reference") or []
    out = []
    by_step = {s.step: s for s in r.steps}
    for i, step in enumerate(cols["step"]):  # a handful of rows, one per step
        mine = by_step.get(int(step)) or (r.steps[0] if len(r.steps) == 1 else None)
        if mine is None:
            continue
        ref = refs[i] if i < len(refs) and refs[i] else "per-step summary"
        for key in ("compute_us", "comm_us", "exposed_comm_us"):
            theirs, ours = cols[key][i], getattr(mine, key)
            if theirs is not None and theirs == theirs and abs(ours - theirs) > 1.0:  # not null or NaN
                msg = (
                    f"rank {r.rank} step {step}: {key} {ours:.3f} differs from the profiler's "
                    f"{ref} ({theirs:.3f}) by more than 1 µs"
                )
                tasks = (cols.get(key.replace("comm_us", "comm_tasks_us")) or [None] * (i + 1))[i]
                if key != "compute_us" and tasks is not None and abs(tasks - theirs) <= 1.0:
                    msg += (
                        f": the profiler's figure is the task-level one ({tasks:.3f}); it took communication "
                        "as the union of HCCL's tasks, as older torch_npu profilers do, fsdpbench takes "
                        "whole HCCL operations (docs/analysis-definitions.md)"
                    )
                out.append(msg)
    return out


def analyze(
    paths: Sequence[str | Path],
    *,
    step: int | None = None,
    workers: int | None = None,
    top: int | None = None,
    progress: bool | None = None,
    replay: bool = True,
    what_if: Sequence[str] = (),
) -> Analysis:
    """Analyse the rank profiles under ``paths``.

    A rank whose result cache is valid (:mod:`fsdpbench.analysis.result_cache`) is taken from it, with
    neither its event table read nor its metrics computed; ranks whose event-table cache is valid
    (:mod:`fsdpbench.trace.cache`) are read in this process; the others in worker processes, one rank at a time each. Only the small per-rank metrics come
    back, never an event table, so memory is bounded by one table per process whatever the rank count
    (``RankMetrics.events`` reads a rank again on first use).

    Args:
        paths: Kineto trace files (.json/.json.gz), rank folders, ``*_ascend_pt`` folders, or folders
            of ranks (e.g. ``results/<run>/profiles/<arm>``).
        step: only this profiler step (None: all profiled steps).
        workers: processes reading uncached ranks in parallel (default: min(uncached ranks, CPUs);
            1 = in-process); the replay shares its what-ifs with one forked child unless it is 1
            (or there is one CPU).
        top: how many op types each rank lists in its JSON (``Analysis.record``; None: all).
        progress: a progress bar on stderr; None: when more than 4 ranks are read and stderr is a terminal.
        replay: replay the step (``Analysis.replay``, :mod:`fsdpbench.analysis.crossrank.replay`).
        what_if: edits replayed beside it (:func:`fsdpbench.analysis.crossrank.replay.parse_edit`; ``replay.what_if``).
    Returns:
        The :class:`Analysis`; ranks that could not be read are left out and named in ``warnings``.
    Raises:
        InputError: no rank could be analysed (the message names each file and its problem), or two
            inputs claim the same rank.
    """
    sources = find_all(paths)
    n = len(sources)
    keep = n == 1  # one rank's table is kept; with more, memory stays at one table at a time
    results: list[RankOutcome | None] = [None] * n
    compact = 0
    with _gc_paused():
        loaded = [rank_result.load(Path(s.path), step, replay or bool(what_if)) for s in sources]
    for i, s in enumerate(sources):  # ranks with a compact result (rank_result.py): no byte of the trace read
        got = loaded[i]
        if isinstance(got, str):
            results[i] = RankOutcome(False, None, [], None, got)
        elif got is not None:
            results[i] = RankOutcome(True, got[0], got[1], got[2], None)
            compact += 1
        elif not Path(s.path).exists():
            results[i] = RankOutcome(False, None, [], None, f"{s.path}: no such file or folder")
    # each trace hashed once, whichever cache uses it
    keys = [None if results[i] is not None else _cache_keys(s, step) for i, s in enumerate(sources)]
    deferred_graphs: list[tuple[RankMetrics, Path, dict[str, Any]]] = []
    for i, s in enumerate(sources):  # ranks whose result is cached: neither their table nor their metrics
        if results[i] is not None:
            continue
        k = keys[i]
        hit = None if k is None else result_cache.load(Path(s.path), step, k.result)
        if hit is not None and (replay or what_if) and k is not None:
            # its replay graph, cached beside it, read only if the replay's own result is not cached
            deferred_graphs.append((hit[2], Path(s.path), k.result))
        if hit is not None:
            results[i] = RankOutcome(True, hit[0], hit[1], hit[2], None)
    cached = [
        results[i] is not None or (k is not None and table_cache.fresh(Path(s.path), k.table))
        for i, (s, k) in enumerate(zip(sources, keys, strict=True))
    ]
    todo = [i for i in range(n) if not cached[i]]
    replay_processes = min(os.cpu_count() or 1, 2) if workers is None else max(1, min(workers, 2))
    workers = min(len(todo), os.cpu_count() or 1) if workers is None else max(1, min(workers, len(todo)))
    if progress is None:
        progress = n > PROGRESS_MIN_RANKS and sys.stderr.isatty()
    parallel = workers > 1 and bool(todo)
    with contextlib.ExitStack() as stack:
        futures = {}
        fan = None
        if parallel:  # forked before the progress bar starts its thread
            _prepare_workers()  # once here, inherited by every forked worker
            stack.enter_context(_freed_memory_kept())
            from fsdpbench.analysis import fanout  # not imported when every rank is cached

            # forked: this process is one of the workers (fanout's docstring says why)
            if fanout.available() and len(todo) <= fanout.MAX_ITEMS:
                job = _Job(step, keys, replay or bool(what_if))
                fan = stack.enter_context(fanout.Fanout(job, [(i, sources[i]) for i in todo], workers, _lost))
            else:
                from concurrent.futures import ProcessPoolExecutor  # not imported when every rank is cached
                from concurrent.futures.process import BrokenProcessPool

                pool = stack.enter_context(ProcessPoolExecutor(max_workers=workers))
                futures = {
                    pool.submit(_analyze_one, sources[i], step, False, keys[i], replay or bool(what_if)): i
                    for i in todo
                }
        advance = stack.enter_context(_progress_bar(n, progress))
        for i in range(n):
            if results[i] is not None:
                advance()
            elif not parallel or cached[i]:  # cached ranks: here, while the workers decode the others
                results[i] = _analyze_one(sources[i], step, keep, keys[i], replay or bool(what_if))
                advance()
        if fan is not None:
            for i, outcome in zip(todo, fan.results(advance), strict=True):
                results[i] = outcome
        for fut in _as_completed(futures):
            i = futures[fut]
            try:
                results[i] = fut.result()
            except BrokenProcessPool:
                results[i] = _lost((i, sources[i]), "a process of the pool was terminated abruptly")
            advance()
    warnings: list[str] = []
    errors: list[str] = []
    ranks: list[RankMetrics] = []
    outcomes = [r for r in results if r is not None]  # every rank has one by now
    origin: dict[int, tuple[Path, dict[str, Any] | None]] = {}  # id(metrics): (trace, result cache key)
    for src, k, outcome in zip(sources, keys, outcomes, strict=True):
        warnings.extend(outcome.warnings)
        if outcome.error:
            errors.append(outcome.error)
            continue
        if outcome.trace_rank is None:
            warnings.append(
                f"{src.path}: no rank in the trace or its path; using its position ({len(ranks)})"
            )
        ranks.append(outcome.metrics)  # type: ignore[arg-type]
        origin[id(outcome.metrics)] = (Path(src.path), None if k is None else k.result)
    if not ranks:
        raise InputError("nothing could be analysed: " + "; ".join(errors))
    warnings.extend(f"skipped: {e}" for e in errors)
    ids = [r.rank for r in ranks]
    if any(o.read and o.trace_rank is None and o.metrics is not None for o in outcomes):
        ids = list(range(len(ranks))) if len(set(ids)) != len(ids) else ids
        for r, i in zip(ranks, ids, strict=True):
            r.rank = i
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        clash = [r.source for r in ranks if r.rank == dup[0]]
        raise InputError(
            f"two inputs claim rank {dup[0]}: {clash[0]} and {clash[1]}; pass one profile per rank"
        )
    ranks.sort(key=lambda r: r.rank)
    for r in ranks:
        # a CPU-only profile of a GPU job already says why it has none (its reader's warning)
        said = (DEVICE_NOT_RECORDED, ONE_RANK_WORLD)  # why it has none, said by its reader already
        unrecorded = any(w.startswith(f"{Path(r.source).name}: {x}") for w in warnings for x in said)
        if not r.collectives and not unrecorded:
            warnings.append(f"rank {r.rank}: {NO_COLLECTIVES}")
        if r.orphan_events:
            warnings.append(
                f"rank {r.rank}: {r.orphan_events} device events ({r.orphan_us / 1000:.3f} ms, "
                f"{100 * (r.orphan_share or 0):.1f}% of device time) were launched before the trace begins; "
                "they are left out of every number (as HTA does)"
            )
        warnings.extend(_cross_check_warnings(r))
    timed = [
        r for r in ranks if r.device_span_ns
    ]  # a rank with no device events has no steps or clock to compare
    step_sets = {r.rank: tuple(s.step for s in r.steps) for r in timed}
    if len(set(step_sets.values())) > 1:
        warnings.append(
            "ranks profiled different steps ("
            + ", ".join(f"rank {k}: {list(v)}" for k, v in step_sets.items())
            + "); per-rank figures are valid, cross-rank comparisons mix steps"
        )
    from fsdpbench.analysis.crossrank.groups import group_kinds

    res = Analysis(
        sources=[str(p) for p in paths],
        format=sources[0].format,
        ranks=ranks,
        warnings=warnings,
        top=top,
        process_groups=group_kinds(ranks),
        compact_ranks=compact,
    )
    offset = clock_offset_warning([r.rank for r in timed], [r.device_span_ns for r in timed])
    if offset:
        warnings.append(offset)
    if len(timed) > 1:  # matched by identity, not time: valid with offset clocks too (offsets estimated)
        with _gc_paused():  # millions of small objects, no cycles: the collector's passes grow with them
            row_split = _waits(res, timed, [origin[id(r)] for r in timed])
        # stragglers: the waits' matched collectives on their aligned clocks (one rule for both)
        skew = res.waits.pop("skew_us", None) or {}
        if not offset:
            res.collective_skew_us = {int(k): float(v) for k, v in skew.items()}
            res.stragglers = stragglers(res.collective_skew_us)
        if res.waits:
            from fsdpbench.analysis.crossrank.groups import coverage_text, partial_groups, ranks_seen

            res.waits["partial_groups"] = partial_groups(res.process_groups, timed)
            res.waits["ranks_seen"] = ranks_seen(timed)  # k of N ranks (--profile-ranks)
            covers = coverage_text(res.waits["partial_groups"], res.waits["ranks_seen"])
            if covers:  # said here too, so that the diff's wait lines carry it
                warnings.append(f"waits and stragglers cover {covers}")
        if res.format == "ascend" and row_split is not None:  # the profiler's own split, beside ours
            ce = [r.collective_columns() for r in timed]
            from fsdpbench.trace.ascend_comm import profiler_split

            try:
                totals, ops, ascend_warnings = profiler_split(
                    [r.rank for r in timed],
                    [r.source for r in timed],
                    row_split,
                    [_group_seq(c) for c in ce],
                )
            except FsdpbenchError as exc:
                warnings.append(f"the profiler's communication split is not shown: {exc}")
            else:
                res.waits["profiler"], res.waits["profiler_ops"] = totals, ops
                warnings.extend(ascend_warnings)
    if replay or what_if:
        origins = [origin[id(r)] for r in timed] if len(timed) > 1 else []
        _replay(res, what_if, origins, deferred_graphs, replay_processes)
    return res


def _replay(
    res: Analysis,
    what_if: Sequence[str],
    origin: list[tuple[Path, dict[str, Any] | None]] = (),
    deferred_graphs: Sequence[tuple[RankMetrics, Path, dict[str, Any]]] = (),
    processes: int = 1,
) -> None:
    """Set ``res.replay`` (or ``res.replay_note``): a replay that fails on a trace it does not understand
    says so there and in the warnings, and leaves the rest of the analysis standing. Taken from the replay
    cache beside the first rank's trace when every rank's result cache key and the edits match.
    ``processes``: those sharing the replay's reading passes (:func:`fsdpbench.analysis.fanout.share`)."""
    if what_if:
        from fsdpbench.analysis.crossrank.replay import parse_edit

        for e in what_if:
            parse_edit(e)  # a bad edit is the user's error: raised before any work
    want = None
    if origin and all(k is not None for _, k in origin):
        want = {"ranks": [k for _, k in origin], "what_if": list(what_if)}
        hit = result_cache.load_replayed(origin[0][0], want)
        if hit is not None:
            res.replay, res.replay_note = hit["replay"], hit["replay_note"]
            if res.replay is None and res.replay_note:
                res.warnings.append(f"no step replay: {res.replay_note}")
            return
    from fsdpbench.analysis.crossrank.replay import replay_step

    for metrics, trace, key in deferred_graphs:  # cached rank graphs (else rebuilt)
        metrics.replay_graph = result_cache.load_graph(trace, key)
    from fsdpbench.analysis import fanout

    share = functools.partial(fanout.share, processes=processes) if processes > 1 else None
    try:
        # the figure's and the readings' small objects hold no cycles; the replay's temporary arrays (tens of
        # MB, taken and freed over and over) reuse freed memory instead of page-faulting fresh maps
        with _gc_paused(), _freed_memory_kept():
            res.replay = replay_step(res, list(what_if), share)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - the replay must never take the analysis down with it
        res.replay, res.replay_note = None, f"the replay failed: {type(exc).__name__}: {exc}"
    else:
        if want is not None:
            result_cache.store_replayed(origin[0][0], want, res.replay, res.replay_note)
    if res.replay is None and res.replay_note:
        res.warnings.append(f"no step replay: {res.replay_note}")


def _group_seq(ce: Any) -> list[tuple[Any, int]]:
    """Each collective's (group, seq) of ``collective_events`` (None, -1 where the trace does not say)."""
    n = len(ce["start_ns"])
    group = list(ce["group"]) if "group" in ce else [None] * n
    seq = list(ce["seq"]) if "seq" in ce else [-1] * n
    return [(g if isinstance(g, str) and g else None, int(q)) for g, q in zip(group, seq, strict=True)]


def _waits(
    res: Analysis, timed: list[RankMetrics], origin: list[tuple[Path, dict[str, Any] | None]]
) -> list[dict[int, tuple[float, float]]] | None:
    """Set ``res.waits`` (and its warnings) and each rank's ``transfer_ns`` column from
    :func:`fsdpbench.analysis.crossrank.waits.wait_transfer`, or from the cross-rank cache beside the first rank's
    trace when every rank's result cache key and id match: a second analyze of unchanged traces then
    neither matches the collectives again nor imports numpy. Returns the per-rank row split of a fresh
    computation (None from the cache, which is not used for Ascend exports: their profiler's own split
    needs the rows, and is read from the files every time anyway)."""
    want = None
    if res.format != "ascend" and all(k is not None for _, k in origin):
        want = {"ranks": [[r.rank, k] for r, (_, k) in zip(timed, origin, strict=True)]}
        hit = result_cache.load_cross(origin[0][0], want)
        if hit is not None:
            data, transfer = hit
            res.waits = data["waits"]
            res.warnings.extend(data["warnings"])
            for r, col in zip(timed, transfer, strict=True):
                if col is not None:
                    r.set_transfer_column(col)
            return None
    from fsdpbench.analysis.crossrank.waits import ROW_SPLIT, wait_transfer

    if len(timed) >= NUMPY_WAITS_MIN_RANKS:
        import numpy  # noqa: F401 - wait_transfer takes its vectorised path when numpy is loaded

    ce = [r.collective_columns() for r in timed]
    res.waits, wait_warnings = wait_transfer([r.rank for r in timed], ce, [r.exposed_comm_ns for r in timed])
    res.warnings.extend(wait_warnings)
    row_split = res.waits.pop(ROW_SPLIT, None)
    if row_split is not None:
        for r, split in zip(timed, row_split, strict=True):
            r.set_transfer_ns(split)
    if want is not None:
        columns = (r.collective_columns() for r in timed)
        transfer = [c["transfer_ns"] if "transfer_ns" in c else None for c in columns]
        result_cache.store_cross(
            origin[0][0], want, {"waits": res.waits, "warnings": wait_warnings}, transfer
        )
    return row_split
