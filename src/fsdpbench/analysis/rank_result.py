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
matches across ranks), then the rank's step-replay graph (:func:`replay_graph.to_bytes`; empty when it
could not be built). The header says which code wrote it (the analysis and reader hashes), the step
selection, and the trace it stands for (name, format, bytes, and each file's size and mtime): with the
trace present a result is used only while these still match (a ``stat``, no byte of the trace read);
without it, only while the code and step do.
"""

from __future__ import annotations

import dataclasses
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
_RELATIVE = {"edst": "esrc"}
"""Graph arrays stored as differences from another (an edge's target lies near its source)."""


def _narrowest(a: Any) -> Any:
    import numpy as np

    if a.size == 0:
        return a
    lo, hi = int(a.min()), int(a.max())
    for t in (np.int8, np.int16, np.int32):
        if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
            return a.astype(t)
    return a.astype(np.int64)


def pack_graph(graph: Any) -> bytes:
    """A rank's replay graph (:class:`fsdpbench.analysis.replay_graph.RankGraph`) in few bytes, to be
    shipped: each integer array as differences (from the element before, or from ``_RELATIVE``'s array)
    when that narrows it, in the narrowest integer type, its bytes split into byte planes, the whole
    LZMA-compressed: about a quarter of the ``.npz`` cache's bytes (docs/DATA.md)."""
    import numpy as np

    meta: dict[str, Any] = {}
    arrays: list[list[Any]] = []  # [name, how, dtype, count, first value (diff)]
    blobs: list[bytes] = []
    for f in dataclasses.fields(graph):
        value = getattr(graph, f.name)
        if not isinstance(value, np.ndarray):
            meta[f.name] = value
            continue
        how, out, first = "raw", value, 0
        if value.dtype.kind in "iu" and value.size:
            out = _narrowest(value)
            base = _RELATIVE.get(f.name)
            first = int(value[0])
            cands = [("diff", np.diff(value.astype(np.int64), prepend=np.int64(first)))]
            if (
                base is not None
                and getattr(graph, base) is not None
                and getattr(graph, base).size == value.size
            ):
                cands.append(("rel", value.astype(np.int64) - getattr(graph, base).astype(np.int64)))
            for name, cand in cands:
                cand = _narrowest(cand)
                if cand.itemsize < out.itemsize:
                    how, out = name, cand
        out = np.ascontiguousarray(out)
        arrays.append([f.name, how, out.dtype.str, int(out.size), first])
        blobs.append(out.view(np.uint8).reshape(-1, out.itemsize).T.tobytes())
    head = orjson.dumps({"meta": meta, "arrays": arrays, "dtypes": {
        n: getattr(graph, n).dtype.str for n, *_ in arrays}})  # fmt: skip
    return lzma.compress(head + b"\n" + b"".join(blobs), preset=6)


def unpack_graph(data: bytes) -> Any:
    """The :class:`RankGraph` that :func:`pack_graph` packed."""
    import numpy as np

    from fsdpbench.analysis.replay_graph import RankGraph

    raw = lzma.decompress(data)
    cut = raw.index(b"\n")
    head = orjson.loads(raw[:cut])
    pos = cut + 1
    values: dict[str, Any] = {}
    for name, how, dtype, count, first in head["arrays"]:
        dt = np.dtype(dtype)
        size = dt.itemsize * count
        planes = np.frombuffer(raw, np.uint8, size, pos).reshape(dt.itemsize, count)
        pos += size
        a = np.ascontiguousarray(planes.T).view(dt).reshape(count).astype(np.dtype(head["dtypes"][name]))
        if how == "diff":
            a = (np.cumsum(a.astype(np.int64)) + first).astype(a.dtype)
        elif how == "rel":
            a = (a.astype(np.int64) + values[_RELATIVE[name]].astype(np.int64)).astype(a.dtype)
        values[name] = a
    meta = head["meta"]
    if "places" in meta:
        meta["places"] = [tuple(p) for p in meta["places"]]
    return RankGraph(**meta, **values)


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
    tail = b"" if graph is None else pack_graph(graph)
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
            hit[2].replay_graph = unpack_graph(raw[mid:])
            hit[2].replay_graph.rank = hit[2].rank
        return hit
    except Exception as exc:  # noqa: BLE001 - a damaged result is read again from its trace, or named
        log.debug("%s: compact result not used (%s)", path, exc)
        return None if here else f"{path}: damaged compact result ({type(exc).__name__}: {exc})"
