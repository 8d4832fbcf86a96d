"""Reader for PyTorch profiler (Kineto) Chrome traces: ``.json`` and ``.json.gz``.

Two kinds of trace come out of ``torch.profiler``:

* **Device traces** (CUDA/ROCm): device lanes are the streams. Kernels are classified by name
  (``table.KERNEL_RULES``: NCCL/RCCL/HCCL names old and new, any case → comm; memcpy/memset; sync; the
  rest compute). Step windows are the host ``ProfilerStep#N`` spans only, and a device event belongs to
  the step of the runtime call that launched it (correlation id, else the ``ac2g`` flow).
  ``gpu_user_annotation`` events (device-side projections of host ranges, known to be short or
  missing) are labels, never windows, compute or communication. Device events whose launch is not in
  a trace that records launches are orphans: left out of every total (``orphan`` column).
  Unknown categories are warned about by name and count, or refused when they are the only device
  activity; integer-ns timestamps are refused.
* **CPU-only traces** (gloo runs): there is no device, so the lanes are threads.
  - *Communication* is the collective's work on gloo's worker threads (``pt_gloo_runloop``): the
    ``gloo:<op>`` spans. The ``c10d::*`` op on the training thread only enqueues that work (its
    length is the enqueue, not the transfer), so it is counted as a launch, not as communication.
    Its type and byte count are given to the matching worker span (the k-th launch ↔ the k-th span;
    gloo runs a reduce-scatter as ``gloo:all_reduce``, so the type comes from the launch).
  - *Compute* is the training thread's operator work: the outermost namespaced operators
    (``aten::*``, ``fsdp::*``, custom ``ns::op``) outside any collective launch. Wrappers (autograd
    nodes such as ``AddmmBackward0``, ``autograd::engine::evaluate_function: …``, ``FSDP::*``
    annotations) are not compute themselves, only the operators inside them: FSDP's hooks run inside
    such wrappers and block there in ``work.wait()``, and that waiting is not compute.
  - A gloo run whose worker threads were not profiled falls back to the launch ops as communication
    (then they block the training thread and overlap is zero by construction); a warning says so.
"""

from __future__ import annotations

import gc
import gzip
import re
import zlib
from collections.abc import Iterator
from itertools import compress, repeat
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from fsdpbench.errors import InputError
from fsdpbench.trace.rank import RankTrace
from fsdpbench.trace.table import (
    assign_steps,
    build_table,
    collective_of,
    kernel_category,
    needs_string_parse,
    object_full,
    task_of,
    us_to_ns,
)

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_RANK_IN_PATH = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
# device work (lower-cased category → table category; None: by name). ``Memcpy``/``Memset``/``Kernel``
# are the 2021-era (PyTorch 1.8–1.10) spellings.
_DEVICE_CATS = {
    "kernel": None, "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_sync": "sync", "memcpy": "memcpy",
    "memset": "memset",
}  # fmt: skip
# host-side categories read as such (``Runtime``/``Operator``: 2021-era spellings; "" in hand-made traces)
_HOST_CATS = {
    "", "cpu_op", "operator", "user_annotation", "cuda_runtime", "runtime", "cuda_driver", "driver", "hip_runtime",
    "python_function", "python", "trace", "overhead", "cpu_instant_event",
}  # fmt: skip
_RUNTIME_CATS = ["cuda_runtime", "runtime", "cuda_driver", "driver", "hip_runtime"]
# Device-side projections of host annotations (``gpu_user_annotation``, and any other
# ``<device>_user_annotation``): labels only, never compute, communication or step windows.
_DEVICE_ANNOTATION = re.compile(r"^(?!user_annotation$)\w*annotation$", re.IGNORECASE)
# an unknown category with one of these words is taken as device activity
_DEVICEISH = re.compile(r"runtime|driver|kernel|memcpy|memset|ccp|gpu|cuda|hip|rocm|mtia|xpu|npu|hpu|device|dma|stream",
                        re.IGNORECASE)  # fmt: skip
_NS_EPOCH_TS = 1e17  # as µs this is past the year 5000: such timestamps are nanoseconds
_LAUNCH_RE = re.compile(r"^(c10d::|record_param_comms$|nccl:|c10d_functional::|_c10d_functional::)")
_ITEMSIZE = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "c10::half": 2, "half": 2, "float16": 2,
    "c10::bfloat16": 2, "bfloat16": 2, "long": 8, "long int": 8, "int64": 8, "int": 4, "int32": 4,
    "short": 2, "int16": 2, "signed char": 1, "unsigned char": 1, "int8": 1, "uint8": 1, "bool": 1,
    "c10::complex<float>": 8, "c10::complex<double>": 16, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
}  # fmt: skip


def read_bytes(path: Path) -> bytes:
    """The decompressed bytes of a trace file; InputError naming the file on any read problem."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not data:
        raise InputError(f"{path}: the file is empty; re-export the profile")
    if path.suffix == ".gz" or data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"{path}: corrupt or truncated gzip ({exc}); re-export the profile") from None
        if not data:
            raise InputError(f"{path}: the file is empty after decompression; re-export the profile")
    return data


def _factorize(values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """(codes, uniques in first-seen order) of raw JSON values, at C speed (dict hashing);
    unhashable values (lists, dicts in a broken trace) are compared as their JSON text."""
    try:
        index = dict.fromkeys(values)
    except TypeError:
        values = [v if isinstance(v, str | int | float | type(None)) else orjson.dumps(v).decode() for v in values]
        index = dict.fromkeys(values)
    uniques = list(index)
    for i, u in enumerate(uniques):
        index[u] = i
    return np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values)), uniques


def _get(d: dict, key: Any) -> Any:
    try:
        return d.get(key)
    except TypeError:
        return None


def _lanes(pair_codes: np.ndarray, pair_names: list[str]) -> pd.Categorical:
    """Lane per event from its (pid, tid) code; pairs that share a name share the lane."""
    codes, uniq = pd.factorize(pd.Series([str(x) for x in pair_names], dtype=object))
    return pd.Categorical.from_codes(codes[pair_codes], categories=pd.Index(uniq))


def _numbers(values: list[Any], what: str, path: Path) -> np.ndarray:
    try:
        out = np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        out = None
    if out is None or out.ndim != 1 or out.size != len(values):
        raise InputError(f"{path}: event field '{what}' holds values that are not numbers")
    return out


def _message_bytes(args: Any) -> float:
    """Collective message size from an event's args (Kineto comm args or recorded shapes), else NaN.

    The size is the larger of the input and output buffers (for all-gather the gathered output, for
    reduce-scatter the full input, for all-reduce the tensor), as nccl-tests report it.
    """
    if not isinstance(args, dict):
        return np.nan
    try:
        if "In msg nelems" in args or "Out msg nelems" in args:
            size = _ITEMSIZE.get(str(args.get("dtype", "")).lower())
            if size is None:
                return np.nan
            return float(max(int(args.get("In msg nelems", 0)), int(args.get("Out msg nelems", 0))) * size)
        dims, types = args.get("Input Dims"), args.get("Input type")
        if not isinstance(dims, list) or not isinstance(types, list):
            return np.nan
        best = np.nan
        for d, t in zip(dims, types, strict=False):
            size = _ITEMSIZE.get(str(t).lower())
            if size is None or not isinstance(d, list):
                continue
            shapes = d if d and all(isinstance(x, list) for x in d) else [d]
            n = sum(int(np.prod(s)) for s in shapes if all(isinstance(x, int) for x in s))
            best = float(n * size) if np.isnan(best) else max(best, float(n * size))
        return best
    except (TypeError, ValueError, OverflowError):
        return np.nan


def rank_from_path(path: Path) -> int | None:
    """The rank number in a file or folder name (``rank3``, ``rank_3``), innermost first."""
    for part in [path.name, *[p.name for p in path.parents][:3]]:
        m = _RANK_IN_PATH.search(part)
        if m:
            return int(m.group(1))
    return None


def _field(events: list[dict], key: str, default: Any = None) -> list[Any]:
    """``[e.get(key, default) for e in events]`` at C speed (``events`` must all be dicts)."""
    if default is None:
        return list(map(dict.get, events, repeat(key)))
    return list(map(dict.get, events, repeat(key), repeat(default)))


def _floats(events: list[dict], key: str, default: Any, path: Path) -> np.ndarray:
    try:
        return np.fromiter(map(dict.get, events, repeat(key), repeat(default)), dtype=np.float64, count=len(events))
    except (TypeError, ValueError, OverflowError):  # strings, lists or None in a hand-made trace
        return _numbers(_field(events, key, default), key, path)


def read_kineto(path: str | Path) -> RankTrace:
    """Read one Kineto trace file into a :class:`RankTrace`.

    Raises:
        InputError: unreadable, corrupt, truncated or empty file, or a trace with no timed events.
    """
    path = Path(path)
    # decoding builds millions of objects: without the cyclic GC running over them it is ~30% faster
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _read_kineto(path)
    finally:
        if gc_was_enabled:
            gc.enable()


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_CHUNK_BYTES = 1 << 20
# events whose args we keep (message sizes, correlation is read for all): collectives and launches
_ARGS_NAME = re.compile(r"nccl|rccl|hccl|hcom|gloo|c10d|record_param_comms", re.IGNORECASE)


class _ChunkError(Exception):
    """The fast chunked decode cannot split this document; decode it whole instead."""


def _pieces(path: Path, size: int = 1 << 18) -> Iterator[bytes]:
    """The file's (decompressed) bytes, piece by piece; InputError on a read or gzip problem."""
    try:
        with path.open("rb") as f:
            first = f.read(size)
            if not first:
                raise InputError(f"{path}: the file is empty; re-export the profile")
            if not (path.suffix == ".gz" or first[:2] == b"\x1f\x8b"):
                while first:
                    yield first
                    first = f.read(size)
                return
            d = zlib.decompressobj(wbits=47)  # gzip or zlib header
            data, produced = first, False
            while data:
                out = d.decompress(data)
                produced |= bool(out)
                if out:
                    yield out
                while d.unused_data and d.eof:  # concatenated gzip members
                    rest, d = d.unused_data, zlib.decompressobj(wbits=47)
                    out = d.decompress(rest)
                    produced |= bool(out)
                    if out:
                        yield out
                data = f.read(size)
            if not d.eof:
                raise InputError(f"{path}: corrupt or truncated gzip (the stream ends early); re-export the profile")
            if not produced:
                raise InputError(f"{path}: the file is empty after decompression; re-export the profile")
    except zlib.error as exc:
        raise InputError(f"{path}: corrupt or truncated gzip ({exc}); re-export the profile") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _decode_streaming(path: Path, cols: _Columns) -> Any:
    """Decode the ``traceEvents`` array chunk by chunk while the file is read and decompressed, so
    that neither the whole text nor all event objects are ever in memory at once. Returns the
    document without its events (for ``distributedInfo``). Raises _ChunkError when the document
    does not split cleanly (each chunk must parse on its own, so a wrong split cannot go unnoticed)."""
    buf = b""
    head = None
    for piece in _pieces(path):
        buf += piece
        if head is None:
            m = _EVENTS_KEY.search(buf)
            if m is None:
                if len(buf) > (64 << 20):
                    raise _ChunkError
                continue
            head, buf = buf[: m.start()], buf[m.end() :]
        while len(buf) > _CHUNK_BYTES:
            cut = _BOUNDARY.search(buf, _CHUNK_BYTES)
            if cut is None:
                break
            try:
                events = orjson.loads(b"[" + buf[: cut.start() + 1] + b"]")
            except orjson.JSONDecodeError:
                raise _ChunkError from None
            buf = buf[cut.end() - 1 :]
            cols.add(events, path)
            del events
    if head is None:
        raise _ChunkError
    pos = len(buf)
    for _ in range(32):  # the array ends at one of the last ']' (metadata may follow it)
        pos = buf.rfind(b"]", 0, pos)
        if pos < 0:
            break
        try:
            meta = orjson.loads(head + b'"traceEvents":[]' + buf[pos + 1 :])
            events = orjson.loads(b"[" + buf[:pos] + b"]")
        except orjson.JSONDecodeError:
            continue
        if isinstance(meta, dict):
            cols.add(events, path)
            return meta
    raise _ChunkError


class _Interner:
    """Global codes for values factorized chunk by chunk."""

    def __init__(self) -> None:
        self.index: dict[Any, int] = {}
        self.codes: list[np.ndarray] = []

    def add(self, values: list[Any]) -> None:
        codes, uniques = _factorize(values)
        to_global = np.array([self.index.setdefault(u, len(self.index)) for u in uniques] + [0], dtype=np.int32)
        self.codes.append(to_global[codes] if len(uniques) else np.zeros(len(values), np.int32))

    def result(self) -> tuple[np.ndarray, list[Any]]:
        codes = np.concatenate(self.codes) if self.codes else np.empty(0, np.int32)
        return codes, list(self.index)


class _Columns:
    """The X events' fields, gathered chunk by chunk so that only one chunk's objects live at a time."""

    def __init__(self) -> None:
        self.ts: list[np.ndarray] = []
        self.dur: list[np.ndarray] = []
        self.corr: list[np.ndarray] = []
        self.name, self.cat, self.pid, self.tid = _Interner(), _Interner(), _Interner(), _Interner()
        self.args: dict[int, Any] = {}
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.flows: list[tuple[Any, Any, Any, Any, Any]] = []  # ac2g flow ends: (ph, id, ts, pid, tid)
        self.n = 0

    def add(self, events: list[Any], path: Path) -> None:
        try:
            ph = _field(events, "ph")
        except TypeError:  # an entry that is not an object
            events = [e for e in events if type(e) is dict]
            ph = _field(events, "ph")
        ph_codes, ph_uniq = _factorize(ph)
        is_ph = {v: ph_codes == i for i, v in enumerate(ph_uniq) if v in ("X", "M", "s", "f") and type(v) is str}
        no = np.zeros(len(ph), dtype=bool)
        for i in np.flatnonzero(is_ph.get("s", no) | is_ph.get("f", no)):
            e = events[i]
            if e.get("cat") == "ac2g":  # launch (runtime call) → device work
                self.flows.append((e.get("ph"), e.get("id"), e.get("ts"), e.get("pid"), e.get("tid")))
        for i in np.flatnonzero(is_ph.get("M", no)):
            e = events[i]
            a = e.get("args")
            if e.get("name") == "thread_name" and type(a) is dict:
                try:
                    self.thread_names[(e.get("pid"), e.get("tid"))] = str(a.get("name", ""))
                except TypeError:  # an unhashable pid/tid in a broken trace
                    pass
        xs = list(compress(events, is_ph.get("X", no)))
        if not xs:
            return
        k = len(xs)
        self.ts.append(_floats(xs, "ts", np.nan, path))
        self.dur.append(_floats(xs, "dur", 0, path))
        names = _field(xs, "name", "")
        self.name.add(names)
        self.cat.add(_field(xs, "cat", ""))
        self.pid.add(_field(xs, "pid"))
        self.tid.add(_field(xs, "tid"))
        args = _field(xs, "args")
        has_args = np.fromiter(map(isinstance, args, repeat(dict)), dtype=bool, count=k)
        corr = np.full(k, -1, dtype=np.int64)
        try:
            corr[has_args] = np.fromiter(
                map(dict.get, compress(args, has_args), repeat("correlation"), repeat(-1)), dtype=np.int64,
                count=int(has_args.sum()),
            )  # fmt: skip
        except (TypeError, ValueError, OverflowError):  # odd values in a hand-made trace
            raw_corr = [a.get("correlation", -1) if type(a) is dict else -1 for a in args]
            corr = pd.to_numeric(pd.Series(raw_corr, dtype=object), errors="coerce").fillna(-1).to_numpy(np.int64)
        self.corr.append(corr)
        codes, uniques = _factorize(names)
        wanted = np.array([isinstance(u, str) and bool(_ARGS_NAME.search(u)) for u in uniques] + [False])[codes]
        for i in np.flatnonzero(wanted & has_args):
            self.args[self.n + int(i)] = args[i]
        self.n += k


def _decode(path: Path) -> tuple[Any, _Columns]:
    """(distributedInfo, columns) of a trace: streamed chunk by chunk when the document splits
    cleanly (peak memory: one chunk), else decoded whole."""
    cols = _Columns()
    try:
        meta = _decode_streaming(path, cols)
        return meta.get("distributedInfo"), cols
    except _ChunkError:
        cols = _Columns()
    raw = read_bytes(path)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc}); the trace is truncated or corrupt, re-export it") from None
    del raw
    if isinstance(doc, dict):
        events, dist = doc.get("traceEvents"), doc.get("distributedInfo")
    else:
        events, dist = doc, None
    if not isinstance(events, list):
        raise InputError(f"{path}: no 'traceEvents' list; this is not a PyTorch profiler trace")
    cols.add(events, path)
    return dist, cols


def _categorical(codes: np.ndarray, uniques: list[Any]) -> pd.Categorical:
    cats = pd.Index(["" if u is None else str(u) for u in uniques], dtype=object)
    if not cats.is_unique:  # e.g. 1 and "1" in a hand-made trace
        recode, cats = pd.factorize(cats)
        codes = recode[codes]
        cats = pd.Index(cats, dtype=object)
    return pd.Categorical.from_codes(codes, categories=cats) if len(cats) else pd.Categorical([])


def _read_kineto(path: Path) -> RankTrace:
    dist, cols = _decode(path)
    warnings: list[str] = []
    rank = None
    if isinstance(dist, dict) and isinstance(dist.get("rank"), int):
        rank = dist["rank"]
    if rank is None:
        rank = rank_from_path(path)
    if cols.n == 0:
        raise InputError(f"{path}: no timed ('ph': 'X') events; the profiler recorded nothing")
    thread_names = cols.thread_names
    ts, dur = np.concatenate(cols.ts), np.concatenate(cols.dur)
    name_codes, name_uniq = cols.name.result()
    cat_codes, cat_uniq = cols.cat.result()
    pid_codes, pid_uniq = cols.pid.result()
    tid_codes, tid_uniq = cols.tid.result()
    corr = np.concatenate(cols.corr)
    args = cols.args
    finite_ts = ts[np.isfinite(ts)]
    if finite_ts.size and np.abs(finite_ts).max() >= _NS_EPOCH_TS:
        raise InputError(
            f"{path}: timestamps look like integer nanoseconds (ts up to {np.abs(finite_ts).max():.4g}; read as "
            "µs that is after the year 5000); Kineto traces give 'ts' and 'dur' in microseconds: divide both by "
            "1000 (keeping 3 decimals) and analyse again"
        )
    # |ts| beyond ~285 years of µs would overflow int64 ns
    good = np.isfinite(ts) & np.isfinite(dur) & (dur >= 0) & (np.abs(ts) < 9e15) & (dur < 9e15)
    if not good.all():
        warnings.append(f"{path.name}: {int((~good).sum())} events without a valid ts/dur were skipped")
        keep = np.flatnonzero(good)
        if keep.size == 0:
            raise InputError(f"{path}: no event has a valid 'ts' and 'dur'")
        new_index = np.cumsum(good) - 1
        args = {int(new_index[i]): a for i, a in args.items() if good[i]}
        ts, dur, corr = ts[keep], dur[keep], corr[keep]
        name_codes, cat_codes, pid_codes, tid_codes = name_codes[keep], cat_codes[keep], pid_codes[keep], tid_codes[keep]
    if needs_string_parse(ts) and not np.array_equal(ts, np.floor(ts)):
        warnings.append(f"{path.name}: timestamps beyond 2**43 µs with fractions; times are exact only to the double's precision")
    start = us_to_ns(ts)
    end = start + us_to_ns(dur)
    del ts, dur
    names = _categorical(name_codes, name_uniq)
    cats = _categorical(cat_codes, cat_uniq)
    cat_names = [str(c) for c in cats.categories]
    cat_lower = np.array([c.lower() for c in cat_names] + [""], dtype=object)[cats.codes]
    pair_codes, pair_uniq = pd.factorize(pid_codes.astype(np.int64) * (len(tid_uniq) + 1) + tid_codes)
    pairs = [(pid_uniq[p // (len(tid_uniq) + 1)], tid_uniq[p % (len(tid_uniq) + 1)]) for p in pair_uniq]
    n = len(start)

    is_dev_cat = np.isin(cat_lower, list(_DEVICE_CATS))
    is_annot = np.array([bool(_DEVICE_ANNOTATION.match(c)) for c in cat_names] + [False])[cats.codes]
    _unknown_categories(path, cats, is_dev_cat, is_annot, warnings)
    name_lane = [_get(thread_names, (p, t)) or f"thread {t}" for p, t in pairs]
    # step windows: the host ProfilerStep#N spans only (their device-side projections are labels)
    step_idx = [i for i, c in enumerate(names.categories) if _STEP_RE.match(c)]
    is_step = np.isin(names.codes, step_idx) & ~is_dev_cat & ~is_annot
    sel = np.flatnonzero(is_step)
    step_ids = np.array([int(_STEP_RE.match(names.categories[names.codes[i]]).group(1)) for i in sel], dtype=np.int64)
    steps = pd.DataFrame({"step": step_ids, "start_ns": start[sel], "end_ns": end[sel]})
    steps = steps.sort_values("start_ns", ignore_index=True)

    collective = object_full(n, "")
    nbytes = np.full(n, np.nan)
    task = task_of(names)
    category = object_full(n, "other")
    device = np.zeros(n, dtype=bool)
    orphan = np.zeros(n, dtype=bool)
    step = assign_steps(start, steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy(), steps["step"].to_numpy())
    task[is_annot] = ""

    if is_dev_cat.any():
        mode = "device"
        kcat = kernel_category(names)
        mapped = np.array([_DEVICE_CATS.get(c.lower()) or "" for c in cat_names] + [""], dtype=object)
        mapped = mapped[cats.codes]
        dev_cat = np.where(mapped == "", kcat, mapped)
        category[is_dev_cat] = dev_cat[is_dev_cat]
        device[is_dev_cat] = True
        # device lanes are streams: Kineto writes the stream as the tid of GPU events (2021-era: "stream 7")
        lane_names = np.array(name_lane + ["?"], dtype=object)
        pair_is_dev = np.zeros(len(pairs), dtype=bool)
        pair_is_dev[pair_codes[is_dev_cat]] = True
        lane_names[: len(pairs)][pair_is_dev] = [
            str(pairs[i][1]) if str(pairs[i][1]).startswith("stream") else f"stream {pairs[i][1]}"
            for i in np.flatnonzero(pair_is_dev)
        ]
        lane = _lanes(pair_codes, list(lane_names[: len(pairs)]))
        comm = category == "comm"
        collective[comm] = collective_of(names)[comm]
        for i in np.flatnonzero(comm):
            nbytes[i] = _message_bytes(args.get(int(i)))
        orphan = _join_launches(start, corr, step, steps, is_dev_cat, is_annot, task, pair_codes, pairs, cols.flows)
        host_sync = ~is_dev_cat & np.isin(task, ["device_synchronize", "stream_synchronize", "event_synchronize"])
        category[host_sync] = "sync"
        runtime = np.isin(cat_lower, _RUNTIME_CATS)
        recorded = ("device_synchronize", "stream_synchronize", "event_synchronize", "kernel_launch") if runtime.any() else ()
        if not runtime.any():
            warnings.append(
                f"{path.name}: no runtime (cuda_runtime) events; kernel launches and syncs are not recorded, "
                "and device work joins steps by time"
            )
    else:
        mode = "cpu"
        lane = _lanes(pair_codes, name_lane)
        _classify_cpu(names, cat_lower, start, end, pair_codes, is_step, is_annot, args, category, device, collective,
                      nbytes, warnings, path)  # fmt: skip
        recorded = ()  # a CPU-only trace has no device syncs or kernel launches to record
        task[:] = ""

    table = build_table(
        name=names, category=category, start_ns=start, end_ns=end, lane=lane, device=device,
        collective=collective, nbytes=nbytes, task=task, step=step, orphan=orphan,
    )  # fmt: skip
    return RankTrace(rank=rank, source=str(path), format="kineto", events=table, steps=steps, mode=mode,
                     warnings=warnings, recorded_tasks=recorded)  # fmt: skip


def _unknown_categories(
    path: Path, cats: pd.Categorical, is_dev_cat: np.ndarray, is_annot: np.ndarray, warnings: list[str]
) -> None:
    """Warn about event categories the reader does not know (naming each and its count), or raise
    InputError when the trace's only device activity is of such categories."""
    counts = np.bincount(cats.codes[cats.codes >= 0], minlength=len(cats.categories))
    unknown = [(c, int(k)) for c, k in zip(cats.categories, counts, strict=True)
               if k and c.lower() not in _DEVICE_CATS and c.lower() not in _HOST_CATS and not _DEVICE_ANNOTATION.match(c)]  # fmt: skip
    if not unknown:
        return
    listed = ", ".join(f"{c} ({k} events)" for c, k in unknown)
    if not is_dev_cat.any() and any(_DEVICEISH.search(c) for c, _ in unknown):
        raise InputError(
            f"{path}: device activity of a kind fsdpbench does not read ({listed}); it reads CUDA/ROCm Kineto "
            f"device categories ({', '.join(sorted(_DEVICE_CATS))}) and CPU-only (gloo) traces, so no numbers "
            "would be right for this trace"
        )
    if is_dev_cat.any():
        what = (f"{int(is_dev_cat.sum())} device events of the categories "
                f"{', '.join(sorted({c for c, k in zip(cats.categories, np.bincount(cats.codes[is_dev_cat], minlength=len(cats.categories)), strict=True) if k}))}"
                " were analysed")  # fmt: skip
    else:
        what = "it was analysed as a CPU-only trace (training-thread operators as compute, gloo spans as communication)"
    warnings.append(f"{path.name}: event categories not read, left out of every number: {listed}; {what}")


def _join_launches(
    start: np.ndarray, corr: np.ndarray, step: np.ndarray, steps: pd.DataFrame, is_dev: np.ndarray,
    is_annot: np.ndarray, task: np.ndarray, pair_codes: np.ndarray, pairs: list[tuple[Any, Any]],
    flows: list[tuple[Any, Any, Any, Any, Any]],
) -> np.ndarray:  # fmt: skip
    """Give each device event the step of the runtime call that launched it (in place in ``step``),
    joined by correlation id, else by an ``ac2g`` flow. Returns the orphans: device events whose
    launch is not in a trace that records launches (left out of every total, as HTA does).
    Device events of a trace with no launch records keep their step by time. A device-side sync
    (``Context Sync``) whose host call is in the trace is not counted again as a task."""
    dev = np.flatnonzero(is_dev)
    host = ~is_dev & ~is_annot & (corr >= 0)
    linked = np.zeros(dev.size, dtype=bool)
    if host.any():
        launch_step = pd.Series(step[host], index=corr[host])
        launch_step = launch_step[~launch_step.index.duplicated()]
        got = launch_step.reindex(corr[dev]).to_numpy()
        linked = ~np.isnan(got) & (corr[dev] >= 0)
        step[dev[linked]] = got[linked].astype(np.int64)
    flow_links = _flow_steps(start, dev[~linked], steps, pair_codes, pairs, flows)
    for i, st in flow_links.items():
        step[i] = st
    if flow_links:
        linked |= np.isin(dev, np.fromiter(flow_links, dtype=np.int64, count=len(flow_links)))
    task[dev[linked]] = ""
    orphan = np.zeros(len(start), dtype=bool)
    if host.any() or flows:
        orphan[dev[~linked]] = True
        step[dev[~linked]] = -1
    return orphan


def _flow_steps(
    start: np.ndarray, candidates: np.ndarray, steps: pd.DataFrame, pair_codes: np.ndarray,
    pairs: list[tuple[Any, Any]], flows: list[tuple[Any, Any, Any, Any, Any]],
) -> dict[int, int]:  # fmt: skip
    """{device event index: step of its launch} through ``ac2g`` flows: the flow's start ('s') is at the
    runtime call, its end ('f') at the device event's start on the device event's (pid, tid)."""
    if not flows or candidates.size == 0:
        return {}
    by_key = {(pairs[pair_codes[i]][0], pairs[pair_codes[i]][1], int(start[i])): int(i) for i in candidates}
    launch_ts: dict[Any, float] = {}
    ends: dict[Any, tuple[Any, Any, Any]] = {}
    for ph, fid, ts, pid, tid in flows:
        if not isinstance(ts, int | float) or fid is None:
            continue
        if ph == "s":
            launch_ts[fid] = ts
        else:
            ends[fid] = (pid, tid, ts)
    out: dict[int, int] = {}
    ids = [f for f in ends if f in launch_ts]
    if not ids:
        return out
    s_ns = us_to_ns(np.array([launch_ts[f] for f in ids], dtype=np.float64))
    f_ns = us_to_ns(np.array([ends[f][2] for f in ids], dtype=np.float64))
    st = assign_steps(s_ns, steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy(), steps["step"].to_numpy())
    for f, fns, s in zip(ids, f_ns.tolist(), st.tolist(), strict=True):
        i = by_key.get((ends[f][0], ends[f][1], fns))
        if i is not None:
            out[i] = s
    return out


# namespaces of wrappers (autograd nodes, FSDP hooks, profiler, collectives): they can contain a
# blocking wait, so they are never compute themselves; the operators inside them are
_WRAPPER_PREFIXES = ("autograd::", "torch::autograd::", "FSDP::", "c10d::", "_c10d_functional::",
                     "c10d_functional::", "profiler::", "torch::jit::")  # fmt: skip
_OP_NAME = re.compile(r"^[A-Za-z_]\w*::[A-Za-z_]")


def _is_operator(name: str) -> bool:
    """True for a namespaced operator (``aten::mm``, ``fsdp::chunk_cat``) that is not a wrapper."""
    return bool(_OP_NAME.match(name)) and not name.startswith(_WRAPPER_PREFIXES)


def _classify_cpu(
    names: pd.Categorical, cat_lower: np.ndarray, start: np.ndarray, end: np.ndarray, lane_codes: np.ndarray,
    is_step: np.ndarray, is_annot: np.ndarray, args: dict[int, Any], category: np.ndarray, device: np.ndarray,
    collective: np.ndarray, nbytes: np.ndarray, warnings: list[str], path: Path,
) -> None:  # fmt: skip
    """Fill category/device/collective/bytes in place for a CPU-only trace (see module docstring).
    Device-side annotations (``is_annot``) are labels: never a collective, a launch or compute."""
    is_cpu_op = cat_lower == "cpu_op"
    # the training thread holds the ProfilerStep spans, else the most cpu_ops
    if is_step.any():
        main = np.bincount(lane_codes[is_step]).argmax()
    elif is_cpu_op.any():
        main = np.bincount(lane_codes[is_cpu_op]).argmax()
    else:
        main = np.bincount(lane_codes).argmax()
    on_main = lane_codes == main
    is_gloo = np.array([c.lower().startswith("gloo:") for c in names.categories] + [False])[names.codes] & ~is_annot
    is_launch = ~is_annot & on_main & np.array([bool(_LAUNCH_RE.match(c)) for c in names.categories] + [False])[names.codes]
    is_launch &= ~is_gloo

    # outermost launch ops, and everything nested inside them on the training thread
    li = np.flatnonzero(is_launch)
    li = li[np.lexsort((-end[li], start[li]))]
    if li.size:
        reach = np.maximum.accumulate(end[li])
        outer = np.ones(li.size, dtype=bool)
        outer[1:] = start[li[1:]] >= reach[:-1]
        launches = li[outer]
    else:
        launches = li
    inside = np.zeros(len(start), dtype=bool)
    if launches.size:
        ls, le = start[launches], end[launches]
        m = np.flatnonzero(on_main)
        k = np.searchsorted(ls, start[m], side="right") - 1
        ok = k >= 0
        inside[m[ok]] = end[m[ok]] <= le[k[ok]]

    # operators of the training thread: namespaced ops (aten::, fsdp::, custom ns) that are not
    # wrappers; the outermost of them, outside collective launches, are the compute
    op_name = np.array([_is_operator(c) for c in names.categories] + [False])[names.codes]
    ops = np.flatnonzero(on_main & is_cpu_op & op_name & ~inside)
    ops = ops[np.lexsort((-end[ops], start[ops]))]
    leaf = np.zeros(len(start), dtype=bool)
    if ops.size:
        reach = np.maximum.accumulate(end[ops])
        outer = np.ones(ops.size, dtype=bool)
        outer[1:] = start[ops[1:]] >= reach[:-1]
        leaf[ops[outer]] = True
    compute = leaf & ~inside
    category[compute] = "compute"
    device[compute] = True

    # gloo worker spans: the top-level gloo:* events on each thread
    gi = np.flatnonzero(is_gloo)
    gi = gi[np.lexsort((-end[gi], start[gi], lane_codes[gi]))]
    if gi.size:
        top = np.ones(gi.size, dtype=bool)
        same = lane_codes[gi[1:]] == lane_codes[gi[:-1]]
        reach = end[gi[0]]
        # nested gloo:* spans on one thread are rare; mark those starting inside the previous top span
        for j in range(1, gi.size):  # loop over collectives only (a few hundred), not over events
            if same[j - 1] and start[gi[j]] < reach:
                top[j] = False
            else:
                reach = end[gi[j]]
        gi = gi[top]
        gi = gi[np.argsort(start[gi], kind="stable")]
        category[gi] = "comm"
        device[gi] = True
        span_type = collective_of(names)[gi]
        launch_order = launches[np.argsort(start[launches], kind="stable")] if launches.size else launches
        launch_type = collective_of(names)[launch_order] if launches.size else np.array([])
        launch_bytes = np.array([_message_bytes(args.get(int(i))) for i in launch_order])
        if launch_order.size == gi.size:
            collective[gi] = launch_type
            nbytes[gi] = launch_bytes
        else:
            collective[gi] = span_type
            if launch_order.size:
                warnings.append(
                    f"{path.name}: {launch_order.size} collective launches but {gi.size} gloo worker spans; "
                    "types taken from the worker spans and sizes unknown"
                )
        collective[launch_order] = launch_type
        nbytes[launch_order] = launch_bytes
    elif launches.size:
        category[launches] = "comm"
        device[launches] = True
        collective[launches] = collective_of(names)[launches]
        nbytes[launches] = [_message_bytes(args.get(int(i))) for i in launches]
        warnings.append(
            f"{path.name}: no gloo worker-thread spans; the collective launch ops on the training thread are "
            "counted as communication (they block it, so overlap is zero by construction)"
        )
