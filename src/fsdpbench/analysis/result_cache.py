"""A per-rank cache of the analysis result beside a trace (a Kineto file or an Ascend rank folder), so
that analysing unchanged traces again neither reads the event table nor recomputes the metrics.

``rank0.json.gz`` gets ``.rank0.json.gz.fsdpbench.metrics`` (``rank0_ascend_pt`` gets
``.rank0_ascend_pt.fsdpbench.metrics`` beside the folder): the rank's :class:`RankMetrics` as
``RankMetrics.cache_record()`` gives it (``result_records.RankCacheRecord``: the Analysis JSON's rank part
with every op, plus the collective events the α–β fits of ``diff`` need), the reader's warnings and the rank
the trace names (``ResultCacheEntry``; read back by ``from_plain``, unchecked: the key ties it to this code), as JSON,
then a newline and the exposed-communication intervals as bytes (:meth:`RankMetrics.exposed_bytes`), the
whole zlib-compressed when under 128 KiB (:func:`_packed`, docs/caches.md). It is used
only while its key matches: the event-table cache's key of the trace (size, mtime, head hash, reader
source hash; :func:`fsdpbench.trace.cache.trace_key`), the step selection, and a hash of the analysis
code (``analysis/**/*.py`` and ``trace/table.py``), so any change to the analysis recomputes it. It obeys
``FSDPBENCH_NO_CACHE`` / ``--no-cache`` as the table cache does, and is skipped quietly in a folder
that is not writable.

The cross-rank wait/transfer result (analysis/crossrank/waits.py) of a Kineto rank set is cached likewise beside its
first rank's trace (``.rank0.json.gz.fsdpbench.waits``: :func:`load_cross`, :func:`store_cross`), keyed by
every rank's key above and id, so a fully cached analyze neither matches collectives again nor imports numpy.
"""

from __future__ import annotations

import functools
import logging
import zlib
from pathlib import Path
from typing import Any

import orjson

from fsdpbench.analysis.output.result_records import RankCacheRecord, ResultCacheEntry, from_plain
from fsdpbench.trace import cache as table_cache

log = logging.getLogger(__name__)

_FORMAT = 7  # 2: collective identity (group, seq, dtype, bytes in/out) and groups; 3: marks, exposed;
# 4: unit × phase rows; 5: the exposed intervals as bytes after the JSON; 6: small files zlib-compressed;
# 7: the typed records (result_records.ResultCacheEntry)
_COMPRESS_BELOW = 128 << 10
"""Files of fewer bytes are stored zlib-compressed (level 1, a third of the bytes): beside a small trace
their size is what counts, and inflating them takes microseconds. Larger ones are stored as they are,
so that a warm analysis reads them at memory speed (inflating 0.6 MB takes ~1.5 ms a rank)."""


def _packed(blob: bytes) -> bytes:
    return zlib.compress(blob, 1) if len(blob) < _COMPRESS_BELOW else blob


def _unpacked(raw: bytes) -> bytes:
    """The bytes :func:`_packed` stored: JSON starts with ``{``, a zlib stream never does."""
    return raw if raw[:1] == b"{" else zlib.decompress(raw)


def cache_path(trace: Path) -> Path:
    """Where the result cache of ``trace`` lives: a hidden file beside it."""
    return trace.with_name(f".{trace.name}.fsdpbench.metrics")


@functools.cache
def analysis_hash() -> str:
    """BLAKE2b of the analysis code's source: every ``analysis/**/*.py`` and ``trace/table.py``."""
    here = Path(__file__).parent
    return table_cache.source_hash(_FORMAT, [*sorted(here.rglob("*.py")), here.parent / "trace" / "table.py"])


def key(trace: Path, step: int | None, table_key: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a result cache must match to stand for ``trace`` analysed at ``step``. ``table_key``:
    :func:`fsdpbench.trace.cache.trace_key` of the trace, when the caller already took it."""
    table = table_cache.trace_key(trace) if table_key is None else table_key
    return {"table": table, "step": step, "analysis": analysis_hash()}


def load(
    trace: Path, step: int | None, want: dict[str, Any] | None = None
) -> tuple[int | None, list[str], Any] | None:
    """(rank named by the trace, reader warnings, :class:`RankMetrics`) from the cache of ``trace``, or
    None when the cache is off, missing, damaged or stale. ``want``: :func:`key`, when already taken."""
    path = cache_path(trace)
    if not table_cache.enabled() or not path.is_file():
        return None
    try:
        want = key(trace, step) if want is None else want
        return entry_from_bytes(path.read_bytes(), trace, want)
    except Exception as exc:  # noqa: BLE001 - a damaged or foreign cache is ignored, never fatal
        log.debug("%s: result cache not used (%s)", path, exc)
        return None


def entry_from_bytes(
    raw: bytes, trace: Path, want: dict[str, Any] | None
) -> tuple[int | None, list[str], Any] | None:
    """What :func:`load` returns, from the bytes :func:`entry_bytes` gave (None: its key is not ``want``;
    ``want`` None: any key). Raises on bytes that are not such an entry."""
    raw = _unpacked(raw)
    cut = raw.find(b"\n")  # the JSON, then the exposed intervals' bytes (orjson writes no newline)
    entry: ResultCacheEntry = orjson.loads(memoryview(raw)[:cut] if cut >= 0 else raw)
    if want is not None and entry.get("key") != want:
        return None
    from fsdpbench.analysis.output.result import RankMetrics

    record = from_plain(RankCacheRecord, entry["metrics"])
    metrics = RankMetrics.from_cache_record(record, raw[cut + 1 :] if cut >= 0 else b"")
    metrics.source = str(trace)  # where it is now (a trace copied with its cache keeps its key)
    return entry["trace_rank"], list(entry["warnings"]), metrics


def entry_bytes(
    want: dict[str, Any], trace_rank: int | None, warnings: list[str], metrics: Any, packed: bool = True
) -> bytes:
    """The result cache's bytes of one rank (:func:`store` writes them; :func:`entry_from_bytes` reads);
    ``packed``: small ones zlib-compressed (:func:`_packed`), else as they are."""
    entry: ResultCacheEntry = {
        "key": want,
        "trace_rank": trace_rank,
        "warnings": warnings,
        "metrics": metrics.cache_record(),
    }
    blob = orjson.dumps(entry, option=orjson.OPT_SERIALIZE_NUMPY)
    raw = b"%b\n%b" % (blob, metrics.exposed_bytes())
    return _packed(raw) if packed else raw


def store(
    trace: Path, want: dict[str, Any], trace_rank: int | None, warnings: list[str], metrics: Any
) -> None:
    """Write the result cache of ``trace`` under ``want`` (:func:`key`, taken before the trace was
    read), atomically and with the trace's permissions; skip quietly when the folder is not writable
    or the write fails."""

    def write(f: Any) -> None:
        f.write(entry_bytes(want, trace_rank, warnings, metrics))

    table_cache.write_beside(trace, cache_path(trace), write)


def graph_path(trace: Path) -> Path:
    """Where the rank's step-replay graph is cached: a hidden file beside the trace (``.fsdpbench.replay``)."""
    return trace.with_name(f".{trace.name}.fsdpbench.replay")


def store_graph(trace: Path, want: dict[str, Any], graph: Any) -> None:
    """Write the rank's replay graph (:mod:`fsdpbench.analysis.crossrank.replay_graph`) under ``want`` beside ``trace``
    (skipped quietly as :func:`store` is)."""
    from fsdpbench.analysis.crossrank.replay_pack import to_bytes

    head = orjson.dumps(want)

    def write(f: Any) -> None:
        f.write(head + b"\n" + to_bytes(graph))

    table_cache.write_beside(trace, graph_path(trace), write)


def load_graph(trace: Path, want: dict[str, Any]) -> Any:
    """The cached replay graph of ``trace`` when its key is ``want``, else None (missing, stale, damaged)."""
    path = graph_path(trace)
    if not table_cache.enabled() or not path.is_file():
        return None
    try:
        raw = path.read_bytes()
        cut = raw.index(b"\n")
        if orjson.loads(raw[:cut]) != want:
            return None
        from fsdpbench.analysis.crossrank.replay_pack import from_bytes

        return from_bytes(raw[cut + 1 :])
    except Exception as exc:  # noqa: BLE001 - a damaged or foreign cache is ignored, never fatal
        log.debug("%s: replay graph cache not used (%s)", path, exc)
        return None


def cross_path(trace: Path) -> Path:
    """Where the cross-rank result (wait/transfer) of a rank set whose first rank is ``trace`` lives."""
    return trace.with_name(f".{trace.name}.fsdpbench.waits")


def load_cross(trace: Path, want: dict[str, Any]) -> tuple[dict[str, Any], list[Any]] | None:
    """The cross-rank result stored beside ``trace`` under ``want`` (every rank's :func:`key` and id) and
    each rank's ``transfer_ns`` column (``array.array('q')``, or None), or None when the cache is off,
    missing, damaged or stale."""
    path = cross_path(trace)
    if not table_cache.enabled() or not path.is_file():
        return None
    try:
        raw = _unpacked(path.read_bytes())
        cut = raw.index(b"\n")  # the JSON, then the columns' bytes (orjson writes no newline)
        data = orjson.loads(memoryview(raw)[:cut])
        if data.get("key") != want:
            return None
        from fsdpbench.analysis.output.result import int64_columns

        return data, int64_columns(raw[cut + 1 :], data["transfer_counts"])
    except Exception as exc:  # noqa: BLE001 - a damaged or foreign cache is ignored, never fatal
        log.debug("%s: cross-rank cache not used (%s)", path, exc)
        return None


def store_cross(trace: Path, want: dict[str, Any], data: dict[str, Any], transfer: list[Any]) -> None:
    """Write the cross-rank result ``data`` and the ranks' ``transfer_ns`` columns (None: none) beside
    ``trace`` under ``want``, only when ``data`` reads back equal (JSON keeps every value it holds: no
    tuple, NaN or int key), atomically; skip quietly otherwise."""
    from fsdpbench.analysis.output.result import int64_bytes

    doc = {"key": want, **data, "transfer_counts": [None if c is None else len(c) for c in transfer]}
    blob = orjson.dumps(doc)
    if orjson.loads(blob) != doc:
        log.debug("%s: cross-rank result does not survive JSON; not cached", cross_path(trace))
        return
    tail = int64_bytes([c for c in transfer if c is not None])
    table_cache.write_beside(trace, cross_path(trace), lambda f: f.write(_packed(b"%b\n%b" % (blob, tail))))


def replayed_path(trace: Path) -> Path:
    """Where the step replay's result (the Analysis JSON's ``replay``) of a rank set whose first rank is
    ``trace`` lives, beside the cross-rank waits."""
    return trace.with_name(f".{trace.name}.fsdpbench.replayed")


def load_replayed(trace: Path, want: dict[str, Any]) -> dict[str, Any] | None:
    """The replay's result stored beside ``trace`` under ``want`` (every rank's :func:`key` and the
    what-if edits): ``{"replay", "replay_note"}``, or None when the cache is off, missing, damaged or
    stale. A second ``analyze --json`` of unchanged traces then neither replays nor imports numpy."""
    path = replayed_path(trace)
    if not table_cache.enabled() or not path.is_file():
        return None
    try:
        data = orjson.loads(_unpacked(path.read_bytes()))
        return data if data.get("key") == want else None
    except Exception as exc:  # noqa: BLE001 - a damaged or foreign cache is ignored, never fatal
        log.debug("%s: replay cache not used (%s)", path, exc)
        return None


def store_replayed(trace: Path, want: dict[str, Any], replay: Any, note: str | None) -> None:
    """Write the replay's result beside ``trace`` under ``want``, only when it reads back equal (JSON keeps
    every value it holds), atomically; skip quietly otherwise."""
    doc = {"key": want, "replay": replay, "replay_note": note}
    blob = orjson.dumps(doc)
    if orjson.loads(blob) != doc:
        log.debug("%s: replay result does not survive JSON; not cached", replayed_path(trace))
        return
    table_cache.write_beside(trace, replayed_path(trace), lambda f: f.write(_packed(blob)))
