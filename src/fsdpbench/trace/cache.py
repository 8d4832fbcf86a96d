"""A columnar cache of a rank's event table beside its trace file, read instead of the trace next time.

``rank0.json.gz`` gets ``.rank0.json.gz.fsdpbench.npz`` in the same folder, an Ascend rank folder
``rank0_ascend_pt`` gets ``.rank0_ascend_pt.fsdpbench.npz`` beside it: the table's columns as numpy
arrays (categoricals as codes, no pickles) and the :class:`RankTrace` fields and the categories as JSON, in a
compressed ``.npz`` (deflate level 1), integer columns in the narrowest integer type that
holds them and times as differences (``start_ns`` from the row before, ``end_ns`` and ``launch_ns`` from
the row's start): a tenth of the raw columns, well under the trace's own size (docs/caches.md).
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
_FORMAT = 5  # 2: columns by name, steps as three arrays, the cross-check table; 3: collective identity;
# 4: launch_ns/launch_lane; 5: compressed, narrowed integers, times as differences
_HEAD_BYTES = 1 << 20
# the modules whose code decides the cached table: a change in any of them invalidates every cache
_READER_FILES = (
    "kineto.py",
    "kineto_decode.py",
    "kineto_cpu.py",
    "kineto_comm.py",
    "ascend.py",
    "ascend_comm.py",
    "ascend_csv.py",
    "ascend_db.py",
    "ascend_launch.py",
    "ascend_ops.py",
    "intervals.py",
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


def reader_hash() -> str:
    """The readers' source hash (a key part of every cache that stands for a trace's table)."""
    return _reader_hash()


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
            return orjson.loads(z["meta"].tobytes()).get("key") == key
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
            meta = orjson.loads(z["meta"].tobytes())
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
        table=_table(meta["events"], meta["categories"], arrays),
        windows=StepWindows(arrays["s.step"], arrays["s.start_ns"], arrays["s.end_ns"]),
        mode=meta["mode"],
        warnings=list(meta["warnings"]),
        cross_check=plain_to_frame(meta["cross_check"]),
        recorded_tasks=None if meta["recorded_tasks"] is None else tuple(meta["recorded_tasks"]),
        groups=meta["groups"],
        world_size=meta.get("world_size"),
    )


def store(trace: Path, rt: RankTrace, key: dict[str, Any]) -> None:
    """Write the cache of ``trace`` under ``key`` (taken before the trace was read, so that a trace
    changed meanwhile is read again next time), atomically; skip quietly when its folder is not
    writable or the write fails."""
    import numpy as np

    arrays: dict[str, np.ndarray] = {}
    categories: list[list[str]] = []
    meta = {
        "key": key,
        "rank": rt.rank,
        "format": rt.format,
        "mode": rt.mode,
        "warnings": rt.warnings,
        "recorded_tasks": None if rt.recorded_tasks is None else list(rt.recorded_tasks),
        "events": _columns(rt.table, arrays, categories),
        "categories": categories,
        "cross_check": frame_to_plain(rt.cross_check),
        "groups": rt.groups,
        "world_size": rt.world_size,
    }
    for column in ("step", "start_ns", "end_ns"):
        arrays[f"s.{column}"] = rt.windows[column]
    arrays["meta"] = np.frombuffer(orjson.dumps(meta), dtype=np.uint8)  # UTF-8 JSON (a str array is UCS-4)
    write_beside(trace, cache_path(trace), lambda f: _savez_fast(f, arrays))


def _savez_fast(f: IO[bytes], arrays: dict[str, np.ndarray]) -> None:
    """:func:`numpy.savez_compressed` at deflate level 1 (numpy's own uses 6): the same file format, a
    tenth more bytes, a sixth of the time to write (~25 ms for 120k events), as fast to read. With ISA-L
    (``isal``, the ``fast`` extra) each member is deflated by its level 1 instead of zlib's: the same
    raw deflate stream format that any zip reader inflates, 4× faster to write (~6 ms) and a little smaller."""
    import zipfile

    import numpy as np

    fast = _fast_deflate()
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for name, array in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                # zipfile takes no compressor of ours: its member writer's own (a raw deflate object made
                # before anything is written) is swapped for ISA-L's; without either, zlib's stays
                if fast is not None and getattr(member, "_compressor", None) is not None:
                    member._compressor = fast.compressobj(1, fast.DEFLATED, -15)
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)


def _fast_deflate() -> Any:
    """``isal.isal_zlib`` when installed, else None."""
    try:
        from isal import isal_zlib
    except ImportError:
        return None
    return isal_zlib


TEMP_PREFIX, TEMP_SUFFIX = ".fsdpbench-", ".tmp"
"""How ``write_beside`` names its temporary files (a failed write can leave one; ``fsdpbench cache`` finds it)."""


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

        with tempfile.NamedTemporaryFile(
            dir=folder, prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, delete=False
        ) as f:
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


# stored as the difference from another column (PREVIOUS: from the row before), so that they compress
_PREVIOUS = "previous"
_DIFFERENCE_OF = {"e.start_ns": _PREVIOUS, "e.end_ns": "e.start_ns", "e.launch_ns": "e.start_ns"}
_NARROW = ("int8", "int16", "int32")


def _packed(key: str, col: np.ndarray, cols: dict[str, np.ndarray]) -> tuple[np.ndarray, list[str]]:
    """``col`` as stored (the difference of :data:`_DIFFERENCE_OF`, in the narrowest integer type that
    holds it) and [its dtype, what it is the difference from or ""] to undo that (:func:`_unpacked`)."""
    import numpy as np

    dtype, base = str(col.dtype), _DIFFERENCE_OF.get(key, "")
    if col.dtype.kind != "i" or not len(col):
        return col, [dtype, ""]
    if base == _PREVIOUS:  # int64 arithmetic wraps, and wraps back in _unpacked: exact for every value
        col = np.diff(col.astype(np.int64), prepend=np.int64(0))
    elif base:
        col = col.astype(np.int64) - cols[base]
    low, high = int(col.min()), int(col.max())
    for narrow in _NARROW:
        info = np.iinfo(narrow)
        if info.bits < col.dtype.itemsize * 8 and info.min <= low and high <= info.max:
            col = col.astype(narrow)
            break
    return col, [dtype, base]


def _unpacked(stored: np.ndarray, dtype: str, base: str, cols: dict[str, np.ndarray]) -> np.ndarray:
    """The column that :func:`_packed` stored as ``stored``."""
    import numpy as np

    if not base:
        return stored if stored.dtype == dtype else stored.astype(dtype)
    wide = stored.astype(np.int64)
    out = np.cumsum(wide, out=wide) if base == _PREVIOUS else np.add(wide, cols[base], out=wide)
    return out if out.dtype == dtype else out.astype(dtype)


def _columns(
    table: EventTable, arrays: dict[str, np.ndarray], categories: list[list[str]]
) -> list[list[Any]]:
    """Put ``table``'s columns (``table.STORED``) and its collectives' identity (``c.*``) into
    ``arrays`` as :func:`_packed` stores them, and the categoricals' distinct category lists into
    ``categories`` (for the JSON); returns [[column, kind, dtype, base, category list index or None], ...]
    in column order (kind "category": codes + categories)."""

    from fsdpbench.trace.table import STORED, Coded

    spec = []
    plain: dict[str, np.ndarray] = {}  # the unpacked columns, that later ones are differences from
    for prefix, obj, names in (
        ("e", table, STORED),
        ("c", table.comm, ("group", "seq", "dtype", "in_bytes", "out_bytes")),
    ):
        for name in names:
            col = getattr(obj, name)
            key = f"{prefix}.{name}"
            if isinstance(col, Coded):
                arrays[f"{key}.codes"], how = _packed(key, col.codes, plain)
                cats = list(col.categories)  # name and op_type often share theirs: kept once
                if cats not in categories:
                    categories.append(cats)
                spec.append([key, "category", *how, categories.index(cats)])
            else:
                plain[key] = col
                arrays[key], how = _packed(key, col, plain)
                spec.append([key, "array", *how, None])
    return spec


def _table(spec: list[list[Any]], categories: list[list[str]], arrays: dict[str, np.ndarray]) -> EventTable:
    from fsdpbench.trace.table import Coded, CommInfo, EventTable

    cols: dict[str, dict[str, Any]] = {"e": {}, "c": {}}
    plain: dict[str, np.ndarray] = {}
    for key, kind, dtype, base, cats in spec:
        prefix, name = key.split(".", 1)
        if kind == "category":
            codes = _unpacked(arrays[f"{key}.codes"], dtype, base, plain)
            cols[prefix][name] = Coded(codes, categories[cats])
        else:
            cols[prefix][name] = plain[key] = _unpacked(arrays[key], dtype, base, plain)
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
