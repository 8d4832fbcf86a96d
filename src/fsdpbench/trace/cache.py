"""A columnar cache of a rank's event table beside its trace file, read instead of the trace next time.

``rank0.json.gz`` gets ``.rank0.json.gz.fsdpbench.npz`` in the same folder, an Ascend rank folder
``rank0_ascend_pt`` gets ``.rank0_ascend_pt.fsdpbench.npz`` beside it: the table's columns as numpy
arrays (categoricals as codes + categories, no pickles) and the :class:`RankTrace` fields as JSON.
The cache is used only while its key still matches: the trace's size, mtime (ns) and a hash of its
first 1 MiB (for an Ascend folder, those of every file the reader may read: the folder's own files and
those of ``ASCEND_PROFILER_OUTPUT``), plus a hash of the readers' own source, so a new fsdpbench
version re-reads. A folder
that is not writable gets no cache (quietly); a cache that cannot be read is ignored and rewritten.
Set ``FSDPBENCH_NO_CACHE=1`` (what ``--no-cache`` does) to neither read nor write it.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from fsdpbench.trace.rank import RankTrace

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from fsdpbench.trace.table import EventTable

log = logging.getLogger(__name__)

NO_CACHE_ENV = "FSDPBENCH_NO_CACHE"
_FORMAT = 4  # 2: columns by name, steps as three arrays, the cross-check table; 3: collective identity;
# 4: launch_ns/launch_lane
_HEAD_BYTES = 1 << 20
# the modules whose code decides the cached table: a change in any of them invalidates every cache
_READER_FILES = (
    "kineto.py",
    "kineto_decode.py",
    "kineto_cpu.py",
    "kineto_comm.py",
    "ascend.py",
    "ascend_db.py",
    "table.py",
    "rank.py",
    "cache.py",
)
_ASCEND_OUTPUT = "ASCEND_PROFILER_OUTPUT"


def enabled() -> bool:
    """False when ``FSDPBENCH_NO_CACHE`` is set to anything but ``""``/``0``."""
    return os.environ.get(NO_CACHE_ENV, "") in ("", "0")


def cache_path(trace: Path) -> Path:
    """Where the cache of ``trace`` lives: a hidden file beside it."""
    return trace.with_name(f".{trace.name}.fsdpbench.npz")


def source_hash(salt: int, paths: Iterable[Path]) -> str:
    """BLAKE2b of ``salt`` (a cache format number) and the names and bytes of ``paths``: a cache key part
    that changes whenever the code that computed the cached data changes."""
    h = hashlib.blake2b(str(salt).encode(), digest_size=16)
    for path in paths:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@functools.cache
def _reader_hash() -> str:
    here = Path(__file__).parent
    return source_hash(_FORMAT, (here / name for name in _READER_FILES))


def _file_key(path: Path) -> tuple[int, int, str]:
    st = path.stat()
    with path.open("rb") as f:
        head = hashlib.blake2b(f.read(_HEAD_BYTES), digest_size=16).hexdigest()
    return st.st_size, st.st_mtime_ns, head


def trace_key(trace: Path) -> dict[str, Any]:
    """What a cache must match to stand for ``trace``: size, mtime, a hash of its head, the reader's
    hash; for an Ascend rank folder the first three of every file in it and in its
    ``ASCEND_PROFILER_OUTPUT`` (the files its reader may open)."""
    if not trace.is_dir():
        size, mtime_ns, head = _file_key(trace)
        return {"size": size, "mtime_ns": mtime_ns, "head": head, "reader": _reader_hash()}
    files = [
        p for d in (trace, trace / _ASCEND_OUTPUT) if d.is_dir() for p in sorted(d.iterdir()) if p.is_file()
    ]
    return {
        "files": [[p.relative_to(trace).as_posix(), *_file_key(p)] for p in files],
        "reader": _reader_hash(),
    }


def fresh(trace: Path, key: dict[str, Any] | None = None) -> bool:
    """True when the cache is on and ``trace`` has a cache that matches it (only the cache's small
    ``meta`` member is read): reading it is then cheaper than starting a worker process. ``key``:
    :func:`trace_key` of the trace, when the caller already took it."""
    import numpy as np

    if not enabled() or not cache_path(trace).is_file():
        return False
    try:
        key = trace_key(trace) if key is None else key
        with np.load(cache_path(trace), allow_pickle=False) as z:
            return orjson.loads(z["meta"].item()).get("key") == key
    except Exception as exc:  # noqa: BLE001 - a damaged or foreign cache is ignored, never fatal
        log.debug("%s: cache not used (%s)", cache_path(trace), exc)
        return False


def load(trace: Path, key: dict[str, Any]) -> RankTrace | None:
    """The cached table of ``trace``, or None when there is none or it does not match ``key``
    (:func:`trace_key` of the trace)."""
    import numpy as np

    path = cache_path(trace)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = orjson.loads(z["meta"].item())
            if meta.get("key") != key:
                return None
            arrays = {k: z[k] for k in z.files if k != "meta"}
    except Exception as exc:  # noqa: BLE001 - a damaged or foreign cache is ignored, never fatal
        log.debug("%s: cache not used (%s)", path, exc)
        return None
    from fsdpbench.trace.table import StepWindows

    return RankTrace(
        rank=meta["rank"],
        source=str(trace),
        format=meta["format"],
        table=_table(meta["events"], arrays),
        windows=StepWindows(arrays["s.step"], arrays["s.start_ns"], arrays["s.end_ns"]),
        mode=meta["mode"],
        warnings=list(meta["warnings"]),
        cross_check=plain_to_frame(meta["cross_check"]),
        recorded_tasks=None if meta["recorded_tasks"] is None else tuple(meta["recorded_tasks"]),
        groups=meta["groups"],
    )


def store(trace: Path, rt: RankTrace, key: dict[str, Any]) -> None:
    """Write the cache of ``trace`` under ``key`` (taken before the trace was read, so that a trace
    changed meanwhile is read again next time), atomically; skip quietly when its folder is not
    writable or the write fails."""
    import numpy as np

    arrays: dict[str, np.ndarray] = {}
    meta = {
        "key": key,
        "rank": rt.rank,
        "format": rt.format,
        "mode": rt.mode,
        "warnings": rt.warnings,
        "recorded_tasks": None if rt.recorded_tasks is None else list(rt.recorded_tasks),
        "events": _columns(rt.table, arrays),
        "cross_check": frame_to_plain(rt.cross_check),
        "groups": rt.groups,
    }
    for column in ("step", "start_ns", "end_ns"):
        arrays[f"s.{column}"] = rt.windows[column]
    arrays["meta"] = np.array(orjson.dumps(meta).decode())
    write_beside(trace, cache_path(trace), lambda f: np.savez(f, **arrays))


def write_beside(trace: Path, target: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Write a cache file ``target`` beside ``trace`` atomically (``write`` fills an open temp file),
    with the trace's read/write permissions; skip quietly when the folder is not writable, the cache is
    off, or the write fails (a cache is never worth an error)."""
    folder = trace.parent
    if not enabled() or not _writable(folder):
        return
    tmp = None
    try:
        import tempfile  # only when writing (with shutil under it, ~15 ms a cached run need not pay)

        with tempfile.NamedTemporaryFile(dir=folder, prefix=".fsdpbench-", suffix=".tmp", delete=False) as f:
            tmp = Path(f.name)
            write(f)
        os.chmod(tmp, trace.stat().st_mode & 0o666)  # readable by whoever may read the trace
        os.replace(tmp, target)
    except (OSError, TypeError, ValueError) as exc:
        log.debug("%s: cache not written (%s)", target, exc)
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def _writable(folder: Path) -> bool:
    """Writable for us, and not made read-only for everyone (root passes ``os.access`` even then)."""
    try:
        return os.access(folder, os.W_OK) and bool(folder.stat().st_mode & 0o222)
    except OSError:
        return False


def _columns(table: EventTable, arrays: dict[str, np.ndarray]) -> list[list[str]]:
    """Put ``table``'s columns (``table.STORED``) and its collectives' identity (``c.*``) into
    ``arrays``; returns [[column, kind], ...] in column order."""
    import numpy as np

    from fsdpbench.trace.table import STORED, Coded

    spec = []
    for prefix, obj, names in (
        ("e", table, STORED),
        ("c", table.comm, ("group", "seq", "dtype", "in_bytes", "out_bytes")),
    ):
        for name in names:
            col = getattr(obj, name)
            if isinstance(col, Coded):
                arrays[f"{prefix}.{name}.codes"] = col.codes
                arrays[f"{prefix}.{name}.cats"] = np.array(col.categories, dtype=str)
                spec.append([f"{prefix}.{name}", "category"])
            else:
                arrays[f"{prefix}.{name}"] = col
                spec.append([f"{prefix}.{name}", "array"])
    return spec


def _table(spec: list[list[str]], arrays: dict[str, np.ndarray]) -> EventTable:
    from fsdpbench.trace.table import Coded, CommInfo, EventTable

    cols: dict[str, dict[str, Any]] = {"e": {}, "c": {}}
    for key, kind in spec:
        prefix, name = key.split(".", 1)
        if kind == "category":
            cols[prefix][name] = Coded(arrays[f"{key}.codes"], arrays[f"{key}.cats"].tolist())
        else:
            cols[prefix][name] = arrays[key]
    return EventTable(**cols["e"], comm=CommInfo(**cols["c"]))


def frame_to_plain(df: pd.DataFrame | None) -> dict[str, Any] | None:
    """A small DataFrame (a profiler cross-check table) as JSON-ready ``{"columns", "dtypes"}``."""
    if df is None:
        return None
    return {
        "columns": {str(c): df[c].tolist() for c in df.columns},
        "dtypes": {str(c): str(df[c].dtype) for c in df.columns},
    }


def plain_to_frame(plain: dict[str, Any] | None) -> pd.DataFrame | None:
    """The inverse of :func:`frame_to_plain` (null numbers come back as NaN)."""
    if plain is None:
        return None
    import pandas as pd

    return pd.DataFrame(
        {c: pd.Series(v, dtype=plain["dtypes"][c]) for c, v in plain["columns"].items()}, copy=False
    )
