"""The per-rank part of ``analyze`` alone (``fsdpbench analyze --ranks-only``): each selected rank read and
measured where its trace is, its compact result written beside the trace (:mod:`rank_result`), for a later
``analyze`` of the folder to join without reading a trace; the launcher runs it on each node of a multi-node
run. Split out of :mod:`fsdpbench.analysis.pipeline`, whose per-rank reading it reuses."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from fsdpbench.analysis import rank_result
from fsdpbench.analysis.pipeline import _analyze_one, _cache_keys, _freed_memory_kept, _lost, _prepare_workers
from fsdpbench.errors import ConfigError, InputError
from fsdpbench.trace import Source, find_all


def parse_ranks(spec: str) -> set[int]:
    """The ranks of a range list such as ``0-3``, ``0,2,5-7`` (``ConfigError`` naming the bad part)."""
    out: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            first, last = (int(lo), int(hi)) if sep else (int(part), int(part))
        except ValueError:
            raise ConfigError(f"--ranks {spec!r}: {part!r} is not a rank or a range such as 0-3") from None
        if first < 0 or last < first:
            raise ConfigError(f"--ranks {spec!r}: {part!r} is not a range of ranks (first ≤ last, from 0)")
        out.update(range(first, last + 1))
    return out


def source_rank(source: Source, position: int) -> int:
    """The rank a source stands for without reading its trace: the number in its path (``rank3``), for an
    Ascend folder its ``profiler_info_<rank>.json``; else its position among the sources."""
    path = Path(source.path)
    if source.format == "ascend" and path.is_dir():
        from fsdpbench.trace.ascend import rank_of_folder

        found = rank_of_folder(path)
        if found is not None:
            return found
    from fsdpbench.trace.kineto import rank_from_path

    found = rank_from_path(path)
    return position if found is None else found


LAUNCHER_ENVS = (
    ("RANK", "WORLD_SIZE"),  # torchrun
    ("SLURM_PROCID", "SLURM_NTASKS"),  # srun
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),  # Open MPI's mpirun
    ("PMI_RANK", "PMI_SIZE"),  # MPICH / Intel MPI
)
"""(this process' index, processes) as each launcher names them, in the order they are looked for."""


def launcher_share(env: dict[str, str] | None = None) -> tuple[int, int]:
    """(index, count) of this process among those its launcher started (:data:`LAUNCHER_ENVS`), for
    ``--ranks share`` (``ConfigError`` when no launcher's variables are set)."""
    env = dict(os.environ) if env is None else env
    for index, count in LAUNCHER_ENVS:
        if env.get(index, "").isdigit() and env.get(count, "").isdigit() and int(env[count]) > 0:
            return int(env[index]), int(env[count])
    names = ", ".join(f"{i}/{c}" for i, c in LAUNCHER_ENVS)
    raise ConfigError(f"--ranks share: started by no launcher this knows (none of {names} is set)")


class RankWritten(NamedTuple):
    """One rank of :func:`analyze_ranks`: where its compact result went and how large it is."""

    rank: int
    trace: str
    trace_bytes: int | None
    result_bytes: int | None
    """None when the rank could not be analysed (``error`` says why)."""
    warnings: list[str]
    error: str | None


class _RanksOnlyJob:
    """:func:`_write_rank_result` of one ``(rank, source)``, as a :class:`fanout.Fanout` item."""

    def __init__(self, step: int | None) -> None:
        self.step = step

    def __call__(self, item: tuple[int, Source]) -> RankWritten:
        return _write_rank_result(item[1], item[0], self.step)


def _write_rank_result(source: Source, rank: int, step: int | None) -> RankWritten:
    """Read and measure one rank (its caches used and written as ``analyze`` does), build its replay
    graph, and write its compact result beside the trace."""
    path = Path(source.path)
    if not path.exists():
        return RankWritten(rank, str(path), None, None, [], f"{path}: the trace is not here")
    outcome = _analyze_one(source, step, False, _cache_keys(source, step), graph=True)
    if outcome.error or outcome.metrics is None:
        return RankWritten(rank, str(path), None, None, outcome.warnings, outcome.error or "not measured")
    try:
        size = rank_result.write(
            path,
            step,
            outcome.trace_rank,
            outcome.warnings,
            outcome.metrics,
            outcome.metrics.replay_graph,
            source.format,
        )
    except InputError as exc:
        return RankWritten(rank, str(path), None, None, outcome.warnings, str(exc))
    return RankWritten(rank, str(path), rank_result.trace_bytes(path), size, outcome.warnings, None)


def _lost_written(item: tuple[int, Source], why: str) -> RankWritten:
    return RankWritten(item[0], str(item[1].path), None, None, [], _lost((0, item[1]), why).error)


def analyze_ranks(
    paths: Sequence[str | Path],
    *,
    ranks: str | None = None,
    step: int | None = None,
    workers: int | None = None,
) -> list[RankWritten]:
    """The per-rank part of :func:`analyze` alone: each selected rank's compact result written beside its
    trace (:mod:`fsdpbench.analysis.rank_result`), for a later ``analyze`` of the folder to join without
    reading a trace. Hosts of a cluster can run it over disjoint ``ranks`` of one shared folder.

    Args:
        paths: as :func:`analyze`'s.
        ranks: the ranks to analyse (:func:`parse_ranks`: ``0-3``, ``0,8,16``); a rank is the number in its
            path (:func:`source_rank`); ``share``: this process' contiguous share of the ranks found, by its
            index and count as its launcher sets them (:func:`launcher_share`: torchrun, srun, mpirun);
            None: every rank found.
        step: as :func:`analyze`'s (the join must use the same).
        workers: processes reading ranks (default: min(ranks, CPUs); 1 = in-process).
    Returns:
        One :class:`RankWritten` per selected rank, by rank.
    Raises:
        InputError: no rank of ``ranks`` under ``paths`` (the message lists those found).
    """
    sources = find_all(paths)
    by_rank = sorted(((source_rank(s, i), s) for i, s in enumerate(sources)), key=lambda x: x[0])
    if ranks is None or ranks == "share":  # ranks here as a compact result alone were analysed elsewhere
        by_rank = [(r, s) for r, s in by_rank if Path(s.path).exists()]
    if ranks == "share":  # this process' contiguous share of the ranks, as its launcher numbers it
        index, count = launcher_share()
        chosen = by_rank[len(by_rank) * index // count : len(by_rank) * (index + 1) // count]
        if not chosen:
            return []
    else:
        wanted = None if ranks is None else parse_ranks(ranks)
        chosen = [(r, s) for r, s in by_rank if wanted is None or r in wanted]
    if not chosen:
        found = [r for r, _ in by_rank]
        if ranks is None:
            raise InputError(
                f"no trace to analyse under {', '.join(map(str, paths))}: every rank there is a compact "
                "result alone (analysed elsewhere); join them with a plain `fsdpbench analyze`"
            )
        raise InputError(
            f"no rank of --ranks {ranks} under {', '.join(map(str, paths))} (ranks found: "
            f"{found[:8]}{' …' if len(found) > 8 else ''})"
        )
    workers = min(len(chosen), os.cpu_count() or 1) if workers is None else max(1, min(workers, len(chosen)))
    from fsdpbench.analysis import fanout

    if workers == 1 or not fanout.available() or len(chosen) > fanout.MAX_ITEMS:
        return [_write_rank_result(s, r, step) for r, s in chosen]
    _prepare_workers()
    with _freed_memory_kept(), fanout.Fanout(_RanksOnlyJob(step), chosen, workers, _lost_written) as fan:
        return fan.results()
