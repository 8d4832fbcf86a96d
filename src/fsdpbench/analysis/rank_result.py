"""A rank's compact result: the per-rank part of ``analyze`` written beside its trace, so that the ranks can
be joined (waits, groups, stragglers, the step replay) where the traces are not.

``rank3.json.gz`` gets ``rank3.json.gz.fsdpbench-rank`` (``rank3_ascend_pt`` gets
``rank3_ascend_pt.fsdpbench-rank`` beside the folder), written by ``fsdpbench analyze --ranks-only`` and,
on a run of several nodes, by each node for its own ranks after the profiled step. Unlike the hidden caches
(analysis/result_cache.py) it is a product of its own: visible, written whatever ``--no-cache`` says, and
read without the trace: ``analyze`` of a folder that holds a rank's compact result and not its trace
takes the rank from it (:func:`fsdpbench.trace.discover.find_sources` lists such ranks).

The file (docs/DATA.md, "Compact rank result") is one JSON header line, then the rank's result-cache
entry (:func:`result_cache.entry_bytes`: the Analysis JSON's rank part with every op and its collective
events, i.e. each collective instance's group, seq, type, bytes, arrival and end, which is what the join
matches across ranks), then the rank's step-replay graph (:func:`replay_pack.to_bytes`; empty when it
could not be built). The header says which code wrote it (the analysis and reader hashes), the step
selection, and the trace it stands for (name, format, bytes, and each file's size and mtime): with the
trace present a result is used only while these still match (a ``stat``, no byte of the trace read);
without it, only while the code and step do.
"""

from __future__ import annotations

import logging
import lzma
import os
from pathlib import Path
from typing import Any

import orjson

from fsdpbench.analysis import result_cache
from fsdpbench.errors import InputError
from fsdpbench.trace import cache as table_cache
from fsdpbench.trace.discover import RANK_RESULT_SUFFIX

log = logging.getLogger(__name__)

FORMAT = 1


def result_path(trace: Path) -> Path:
    """Where the compact result of ``trace`` lives: ``<trace name>.fsdpbench-rank`` beside it."""
    return trace.with_name(trace.name + RANK_RESULT_SUFFIX)


def trace_bytes(trace: Path) -> int:
    """The trace's size in bytes (for an Ascend rank folder, every file under it)."""
    if not trace.is_dir():
        return trace.stat().st_size
    return sum(p.stat().st_size for p in trace.rglob("*") if p.is_file())


def _stat_key(trace: Path) -> list[list[Any]]:
    """Each file of the trace that its reader may open: [name, size, mtime_ns] (stat only)."""
    if not trace.is_dir():
        st = trace.stat()
        return [[trace.name, st.st_size, st.st_mtime_ns]]
    out_dir = trace / "ASCEND_PROFILER_OUTPUT"
    files = [p for d in (trace, out_dir) if d.is_dir() for p in sorted(d.iterdir()) if p.is_file()]
    return [[p.relative_to(trace).as_posix(), (st := p.stat()).st_size, st.st_mtime_ns] for p in files]


def _code_key(step: int | None) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "analysis": result_cache.analysis_hash(),
        "reader": table_cache.reader_hash(),
        "step": step,
    }


def write(
    trace: Path,
    step: int | None,
    trace_rank: int | None,
    warnings: list[str],
    metrics: Any,
    graph: Any,
    fmt: str,
) -> int:
    """Write the compact result of ``trace`` (atomically); returns its size in bytes.

    Raises:
        InputError: the folder is not writable (the message names the file).
    """
    body = lzma.compress(result_cache.entry_bytes({}, trace_rank, warnings, metrics, packed=False), preset=6)
    from fsdpbench.analysis.crossrank.replay_pack import to_bytes  # numpy: only where a graph is packed

    tail = b"" if graph is None else to_bytes(graph)
    header = {
        **_code_key(step),
        "trace": {
            "name": trace.name,
            "format": fmt,
            "bytes": trace_bytes(trace),
            "files": _stat_key(trace),
        },
        "rank": metrics.rank,
        "result_bytes": len(body),
        "graph_bytes": len(tail),
    }
    target = result_path(trace)
    # named as the caches' temp files: one a killed process leaves behind goes with `fsdpbench cache clear`
    tmp = target.with_name(f"{table_cache.TEMP_PREFIX}{target.name}.{os.getpid()}{table_cache.TEMP_SUFFIX}")
    try:
        tmp.write_bytes(orjson.dumps(header) + b"\n" + body + tail)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(
            f"{target}: cannot write the rank's compact result ({exc.strerror or exc})"
        ) from None
    return target.stat().st_size


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of a compact result file (``InputError`` naming the file when it is not one)."""
    try:
        with path.open("rb") as f:
            line = f.readline(1 << 20)
        header = orjson.loads(line)
        if not isinstance(header, dict) or "result_bytes" not in header:
            raise ValueError("no result_bytes in its header")
        return header
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a compact rank result ({exc})") from None


def load(trace: Path, step: int | None, graph: bool) -> tuple[int | None, list[str], Any] | str | None:
    """(rank named by the trace, reader warnings, :class:`RankMetrics` with its ``replay_graph`` when
    ``graph``) from the compact result of ``trace``; None when there is none, or it is stale while the
    trace is here (it is then read as usual); a string saying why when it cannot stand for a trace that
    is not here (stale or damaged)."""
    path = result_path(trace)
    if not path.is_file():
        return None
    here = trace.exists()
    if here and not table_cache.enabled():
        return None  # --no-cache with the trace here: measure it again
    try:
        raw = path.read_bytes()
        cut = raw.index(b"\n")
        header = orjson.loads(raw[:cut])
        want = _code_key(step)
        stale = [k for k in want if header.get(k) != want[k]]
        if stale:
            why = ", ".join(
                "the step selection" if k == "step" else f"the {k} code" if k != "format" else "its format"
                for k in stale
            )
            return None if here else f"{path}: written by another fsdpbench or step selection ({why} differ)"
        if here and header["trace"]["files"] != _stat_key(trace):
            return None
        start = cut + 1
        mid = start + int(header["result_bytes"])
        hit = result_cache.entry_from_bytes(lzma.decompress(raw[start:mid]), trace, None)
        if hit is None:
            raise ValueError("no result in it")
        hit[2].rank = int(header["rank"])  # the header names the rank the result stands for
        if graph and len(raw) > mid:
            from fsdpbench.analysis.crossrank.replay_pack import from_bytes

            hit[2].replay_graph = from_bytes(raw[mid:])
            hit[2].replay_graph.rank = hit[2].rank
        return hit
    except Exception as exc:  # noqa: BLE001 - a damaged result is read again from its trace, or named
        log.debug("%s: compact result not used (%s)", path, exc)
        return None if here else f"{path}: damaged compact result ({type(exc).__name__}: {exc})"
