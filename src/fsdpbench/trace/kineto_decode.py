"""Kineto trace bytes → columns: the decode step of the Kineto reader (see :mod:`fsdpbench.trace.kineto`).

The file is read and gunzipped piece by piece (with ISA-L's inflate when ``isal`` is installed, the
``fast`` extra, else zlib's) and its ``traceEvents`` array decoded chunk by chunk, so that neither
the whole text nor all event objects are in memory at once. Only what the analysis reads is kept:
the ``X`` events' ts/dur/name/cat/pid/tid/correlation, the message size of collectives and launches
(from their ``args``), thread names and ``ac2g`` flow ends.

Each chunk is decoded by msgspec into typed structs that declare only those fields (the rest is
skipped without building objects; ``benchmarks/analyze_speed.py --decoders`` compares the options).
A trace whose JSON does not fit the structs (a hand-made one with odd types), or a machine without
msgspec, is decoded with orjson into dicts, with the same result.
"""

from __future__ import annotations

import gzip
import operator
import re
import zlib
from collections import defaultdict
from collections.abc import Iterator
from itertools import compress, count, repeat
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson

try:
    import msgspec
except ImportError:  # optional: without it the events are decoded with orjson alone
    msgspec = None

try:  # optional (the ``fast`` extra): ISA-L's inflate, 2.5-3.5x faster than zlib's on these traces
    from isal import isal_zlib as _inflate

    _INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, _inflate.error)
except ImportError:
    _inflate = zlib
    _INFLATE_ERRORS = (zlib.error,)

from fsdpbench.errors import InputError
from fsdpbench.trace.table import factorize

_ITEMSIZE = {
    "float": 4,
    "float32": 4,
    "double": 8,
    "float64": 8,
    "c10::half": 2,
    "half": 2,
    "float16": 2,
    "c10::bfloat16": 2,
    "bfloat16": 2,
    "long": 8,
    "long int": 8,
    "int64": 8,
    "int": 4,
    "int32": 4,
    "short": 2,
    "int16": 2,
    "signed char": 1,
    "unsigned char": 1,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1,
    # the c10 ScalarType names ``record_param_comms`` writes as ``dtype`` (``Float``, ``BFloat16``, …)
    "byte": 1,
    "char": 1,
    "complexfloat": 8,
    "complexdouble": 16,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
}


def message_bytes(args: Any) -> float:
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


IDENTITY_KEYS = (
    "Collective name",
    "dtype",
    "In msg nelems",
    "Out msg nelems",
    "Process Group Name",
    "Process Group ID",
    "Process Group Description",
    "Process Group Ranks",
    "Group size",
)
"""The ``args`` a collective's identity is read from (on its kernel or its ``record_param_comms``)."""


def _nelems_bytes(n: Any, size: int | None) -> float:
    if size is None or isinstance(n, bool) or not isinstance(n, int | float):
        return np.nan
    return float(n) * size


def _ranks(value: Any) -> tuple[int, ...] | str | None:
    """``Process Group Ranks`` (a JSON-like string ``"[0, 1]"``, or a list) as a tuple of ints; the
    string as written when it is not one (a truncated list)."""
    if value is None:
        return None
    if isinstance(value, list):
        return tuple(int(v) for v in value if isinstance(v, int))
    try:
        parsed = orjson.loads(str(value))
    except orjson.JSONDecodeError:
        return str(value)
    return tuple(int(v) for v in parsed if isinstance(v, int)) if isinstance(parsed, list) else str(value)


def identity(args: Any) -> tuple[Any, ...] | None:
    """A collective's identity from the args Kineto writes on its kernel or ``record_param_comms``:
    ``(collective name, dtype, in bytes, out bytes, group name, group description, group ranks,
    group size)`` (None for what the args do not say; the group name is ``Process Group Name``, else
    the older ``Process Group ID``), or None when the args hold none of :data:`IDENTITY_KEYS`."""
    if not isinstance(args, dict) or not any(k in args for k in IDENTITY_KEYS):
        return None
    dtype = args.get("dtype")
    size = _ITEMSIZE.get(str(dtype).lower()) if dtype is not None else None
    name = args.get("Process Group Name")
    if name is None and args.get("Process Group ID") is not None:
        name = args["Process Group ID"]
    gsize = args.get("Group size")
    coll = args.get("Collective name")
    desc = args.get("Process Group Description")
    return (
        None if coll is None else str(coll),
        None if dtype is None else str(dtype),
        _nelems_bytes(args.get("In msg nelems"), size),
        _nelems_bytes(args.get("Out msg nelems"), size),
        None if name is None else str(name),
        None if desc is None else str(desc),
        _ranks(args.get("Process Group Ranks")),
        gsize if isinstance(gsize, int) and not isinstance(gsize, bool) else None,
    )


def sequence_number(args: Any) -> int | None:
    """The collective's sequence number in its process group (``Seq``), None when not written."""
    seq = args.get("Seq") if isinstance(args, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


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
    """:func:`fsdpbench.trace.table.factorize` of raw JSON values; unhashable values (lists, dicts in a
    broken trace) are compared as their JSON text."""
    try:
        return factorize(values)
    except TypeError:
        return factorize(
            [v if isinstance(v, str | int | float | type(None)) else orjson.dumps(v).decode() for v in values]
        )


def _numbers(values: list[Any], what: str, path: Path) -> np.ndarray:
    try:
        out = np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        out = None
    if out is None or out.ndim != 1 or out.size != len(values):
        raise InputError(f"{path}: event field '{what}' holds values that are not numbers")
    return out


def _field(events: list[dict], key: str, default: Any = None) -> list[Any]:
    """``[e.get(key, default) for e in events]`` at C speed (``events`` must all be dicts)."""
    if default is None:
        return list(map(dict.get, events, repeat(key)))
    return list(map(dict.get, events, repeat(key), repeat(default)))


def _floats(events: list[dict], key: str, default: Any, path: Path) -> np.ndarray:
    try:
        return np.fromiter(
            map(dict.get, events, repeat(key), repeat(default)), dtype=np.float64, count=len(events)
        )
    except (TypeError, ValueError, OverflowError):  # strings, lists or None in a hand-made trace
        return _numbers(_field(events, key, default), key, path)


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_CHUNK_BYTES = 1 << 20
# events whose message size is read from their args (correlation is read for all): collectives and launches
_ARGS_NAME = re.compile(r"nccl|rccl|hccl|hcom|gloo|c10d|record_param_comms", re.IGNORECASE)


class _TypedError(Exception):
    """Valid JSON whose events do not fit the typed structs (a hand-made trace): decode with orjson."""


_ARG_KEYS = (
    "correlation",
    "name",
    "dtype",
    "In msg nelems",
    "Out msg nelems",
    "Input Dims",
    "Input type",
    "Collective name",
    "Process Group Name",
    "Process Group ID",
    "Process Group Description",
    "Process Group Ranks",
    "Group size",
    "Seq",
)
_ARG_ATTRS = (
    "correlation",
    "name",
    "dtype",
    "in_nelems",
    "out_nelems",
    "input_dims",
    "input_type",
    "coll_name",
    "pg_name",
    "pg_id",
    "pg_desc",
    "pg_ranks",
    "group_size",
    "seq",
)
# the identity args beyond the size ones: an event with any of them gets an identity
_GROUP_ATTRS = ("coll_name", "pg_name", "pg_id", "pg_desc", "pg_ranks", "group_size", "seq")


# every event phase of the Trace Event Format: a Literal decodes to one shared string per phase (no
# string built per event, its hash cached); a phase outside it sends the trace to the orjson path
_PHASES = tuple("BEXiICbneSTpFstfPNODMVvRc()")
_RAW_ATTRS = ("input_dims", "input_type")  # kept as raw JSON text: decoded only for the few sized events


def _typed_decoder() -> tuple[type | None, Any]:
    """(event struct, msgspec decoder of a list of them), or (None, None) without msgspec. Only the
    fields the reader uses are declared: msgspec skips the others without building objects, and
    builds no dict for ``args`` (1.6× faster than ``orjson.loads`` on a 60k-kernel rank).

    The structs hold no cycles, so they are not tracked by the GC (``gc=False``). The recorded
    shapes (``Input Dims``/``Input type``, on every CPU op of a real trace) are kept as
    ``msgspec.Raw`` slices of the input and decoded only for the events whose message size is read;
    building their nested lists for every op was a third of the decode on a real trace.
    """
    if msgspec is None:
        return None, None
    unset = msgspec.UNSET
    args = msgspec.defstruct(
        "KinetoArgs",
        [
            ("correlation", int | None, -1),
            *[(a, msgspec.Raw if a in _RAW_ATTRS else Any, unset) for a in _ARG_ATTRS[1:]],
        ],
        rename=dict(zip(_ARG_ATTRS, _ARG_KEYS, strict=True)),
        gc=False,
    )
    event = msgspec.defstruct(
        "KinetoEvent",
        [
            ("ph", Literal[_PHASES] | None, None),
            ("name", Any, ""),
            ("cat", Any, ""),
            ("ts", float | None, float("nan")),
            ("dur", float | None, 0.0),
            ("pid", Any, None),
            ("tid", Any, None),
            ("id", Any, None),
            ("args", args | None, None),
        ],
        gc=False,
    )
    return event, msgspec.json.Decoder(list[event])


def _attr(name: str) -> Any:
    return operator.attrgetter(name)


_KEY = operator.attrgetter("ph", "name", "cat", "pid", "tid")
_FIELDS = ("name", "cat", "pid", "tid")
_OTHER, _X, _META, _FLOW = 0, 1, 2, 3
_KINDS = {"X": _X, "M": _META, "s": _FLOW, "f": _FLOW}
_FLOW_END = operator.attrgetter("ph", "id", "ts", "pid", "tid")  # Columns.flows' tuple
_CORR, _NO_CORR = repeat("correlation"), repeat(-1)
# the args a typed event's message size and identity are computed from (Seq apart: it differs per call)
_SIGNATURE = operator.attrgetter(
    "dtype", "in_nelems", "out_nelems", "coll_name", "pg_name", "pg_id", "pg_desc", "pg_ranks", "group_size"
)


def _args_dict(a: Any) -> dict[str, Any]:
    """The kept ``args`` fields of a typed event as the dict :func:`message_bytes` reads (the raw
    JSON fields decoded, as orjson would have)."""
    out = {}
    for k, attr in zip(_ARG_KEYS, _ARG_ATTRS, strict=True):
        v = getattr(a, attr)
        if v is not _UNSET:
            out[k] = msgspec.json.decode(v) if attr in _RAW_ATTRS else v
    return out


_TYPED = _typed_decoder()
_UNSET = msgspec.UNSET if msgspec is not None else object()


class _ChunkError(Exception):
    """The fast chunked decode cannot split this document; decode it whole instead."""


_PIECE_OUT = 1 << 16  # most bytes one inflate call returns


def _pieces(path: Path, size: int = 1 << 16) -> Iterator[bytes]:
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
            d = _inflate.decompressobj(wbits=47)  # gzip or zlib header
            data, produced = first, False
            while data:
                while data:
                    # bounded output: pieces small enough for malloc to reuse, not fresh mmap'd
                    # pages each time (the page faults doubled isal's inflate in a fresh process)
                    out = d.decompress(data, _PIECE_OUT)
                    if out:
                        produced = True
                        yield out
                    if d.eof and d.unused_data:  # concatenated gzip members
                        data, d = d.unused_data, _inflate.decompressobj(wbits=47)
                    else:
                        data = d.unconsumed_tail
                data = f.read(size)
            out = d.flush()  # output the last bounded call may have held back
            if out:
                produced = True
                yield out
            if not d.eof:
                raise InputError(
                    f"{path}: corrupt or truncated gzip (the stream ends early); re-export the profile"
                )
            if not produced:
                raise InputError(f"{path}: the file is empty after decompression; re-export the profile")
    except _INFLATE_ERRORS as exc:
        raise InputError(f"{path}: corrupt or truncated gzip ({exc}); re-export the profile") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _decode_streaming(path: Path, cols: Columns, typed: Any = None) -> Any:
    """Decode the ``traceEvents`` array chunk by chunk while the file is read and decompressed, so
    that neither the whole text nor all event objects are ever in memory at once. Returns the
    document without its events (for ``distributedInfo``). Raises _ChunkError when the document
    does not split cleanly (each chunk must parse on its own, so a wrong split cannot go unnoticed)."""
    # buf[0] is the slot before the next event ('[' or the ',' after the last one): each chunk is
    # decoded in place, as buf[0:end + 1] with '[' and ']' written into its two ends, without copies
    buf = bytearray()
    head = None
    for piece in _pieces(path):
        buf += piece
        if head is None:
            m = _EVENTS_KEY.search(buf)
            if m is None:
                if len(buf) > (64 << 20):
                    raise _ChunkError
                continue
            head = bytes(buf[: m.start()])
            del buf[: m.end() - 1]
        while len(buf) > _CHUNK_BYTES:
            cut = _BOUNDARY.search(buf, _CHUNK_BYTES)
            if cut is None:
                break
            end = cut.start() + 1  # just after the chunk's last '}'
            buf[0], buf[end] = ord("["), ord("]")
            chunk = memoryview(buf)[: end + 1]
            events = _loads(chunk, typed)
            if events is None:
                raise _ChunkError
            # the events' Raw fields are views of the chunk: gather them before the buffer moves on
            cols.add(events, path)
            del events
            chunk.release()
            del buf[: cut.end() - 2]  # keep the byte before the next '{' as its slot
    if head is None:
        raise _ChunkError
    buf[0] = ord("[")
    pos = len(buf)
    for _ in range(32):  # the array ends at one of the last ']' (metadata may follow it)
        pos = buf.rfind(b"]", 0, pos)
        if pos <= 0:
            break
        try:
            meta = orjson.loads(head + b'"traceEvents":[]' + buf[pos + 1 :])
        except orjson.JSONDecodeError:
            continue
        rest = memoryview(buf)[: pos + 1]
        events = _loads(rest, typed)
        done = events is not None and isinstance(meta, dict)
        if done:
            cols.add(events, path)
        del events
        rest.release()
        if done:
            return meta
    raise _ChunkError


def _loads(text: bytes | memoryview, typed: Any) -> list[Any] | None:
    """The events of a JSON array (typed structs when ``typed``), or None when it is not valid JSON;
    _TypedError when valid JSON does not fit the typed structs."""
    if typed is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
    try:
        return typed.decode(text)
    except msgspec.ValidationError:
        raise _TypedError from None
    except msgspec.DecodeError:
        return None


class _Interner:
    """Global codes for values factorized chunk by chunk."""

    def __init__(self) -> None:
        self.index: dict[Any, int] = {}
        self.codes: list[np.ndarray] = []

    def add(self, values: list[Any]) -> None:
        codes, uniques = _factorize(values)
        to_global = np.array(
            [self.index.setdefault(u, len(self.index)) for u in uniques] + [0], dtype=np.int32
        )
        self.codes.append(to_global[codes] if len(uniques) else np.zeros(len(values), np.int32))

    def result(self) -> tuple[np.ndarray, list[Any]]:
        codes = np.concatenate(self.codes) if self.codes else np.empty(0, np.int32)
        return codes, list(self.index)


class Columns:
    """The X events' fields, gathered chunk by chunk so that only one chunk's objects live at a time;
    ``nbytes`` holds the message size of the events whose name marks a collective or a launch."""

    def __init__(self) -> None:
        self.ts: list[np.ndarray] = []
        self.dur: list[np.ndarray] = []
        self.corr: list[np.ndarray] = []
        self.name, self.cat, self.pid, self.tid = _Interner(), _Interner(), _Interner(), _Interner()
        self.nbytes: dict[int, float] = {}  # event index → message bytes (collectives and launches)
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.flows: list[tuple[Any, Any, Any, Any, Any]] = []  # ac2g flow ends: (ph, id, ts, pid, tid)
        self.n = 0
        # typed path: one code per distinct (ph, name, cat, pid, tid), numbered in first-seen order
        self.keys: defaultdict[tuple[Any, ...], int] = defaultdict(count().__next__)
        self.key_kind = np.zeros(0, dtype=np.int8)  # per key: _OTHER, _X, _META or _FLOW
        self.key_sized = np.zeros(0, dtype=bool)  # per key: a name whose message size is read
        self.key_ac2g = np.zeros(0, dtype=bool)  # per key: an ac2g flow end ('s'/'f' with cat ac2g)
        self.x_keys: list[np.ndarray] = []  # the X events' key codes, chunk by chunk
        # the identifying args of a sized typed event (:data:`_SIGNATURE`) → (bytes, identity code)
        self.size_memo: dict[tuple[Any, ...], tuple[float, int]] = {}
        # collectives' identity (:func:`identity`), interned: event index → code into ``idents``
        self.ident: dict[int, int] = {}
        self.idents: list[tuple[Any, ...]] = []
        self.ident_code: dict[tuple[Any, ...], int] = {}
        self.seq: dict[int, int] = {}  # event index → ``Seq``
        self.devices = 0  # devices in the trace's ``deviceProperties``

    def intern(self, ident: tuple[Any, ...] | None) -> int:
        """The code of an identity in ``idents`` (-1 for None)."""
        if ident is None:
            return -1
        code = self.ident_code.get(ident)
        if code is None:
            code = self.ident_code[ident] = len(self.idents)
            self.idents.append(ident)
        return code

    def fields(self) -> dict[str, tuple[np.ndarray, list[Any]]]:
        """Codes of the X events and the values in first-seen order, of ``name, cat, pid, tid``."""
        if not self.x_keys:
            return {f: interner.result() for f, interner in zip(_FIELDS, self._interners(), strict=True)}
        keys = list(self.keys)
        used = np.flatnonzero(self.key_kind == _X)  # X keys, in the order their first event came
        remap = np.zeros(len(keys), dtype=np.int64)
        remap[used] = np.arange(used.size)
        x_codes = remap[np.concatenate(self.x_keys)]
        out = {}
        for j, f in enumerate(_FIELDS, start=1):
            codes, uniques = _factorize([keys[u][j] for u in used.tolist()])
            out[f] = (codes[x_codes], uniques)
        return out

    def _interners(self) -> tuple[_Interner, ...]:
        return self.name, self.cat, self.pid, self.tid

    def add(self, events: list[Any], path: Path) -> None:
        """Gather one chunk of decoded events (dicts from orjson, or the typed structs of msgspec)."""
        if events and type(events[0]) is _TYPED[0]:
            self._add_typed(events)
            return
        try:
            ph = _field(events, "ph")
        except TypeError:  # an entry that is not an object
            events = [e for e in events if type(e) is dict]
            ph = _field(events, "ph")
        ph_codes, ph_uniq = _factorize(ph)
        is_ph = {
            v: ph_codes == i for i, v in enumerate(ph_uniq) if v in ("X", "M", "s", "f") and type(v) is str
        }
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
                map(dict.get, compress(args, has_args), repeat("correlation"), repeat(-1)),
                dtype=np.int64,
                count=int(has_args.sum()),
            )
        except (TypeError, ValueError, OverflowError):  # odd values in a hand-made trace
            import pandas as pd  # only here: a cold decode does not pay for importing pandas

            raw_corr = [a.get("correlation", -1) if type(a) is dict else -1 for a in args]
            corr = (
                pd.to_numeric(pd.Series(raw_corr, dtype=object), errors="coerce")
                .fillna(-1)
                .to_numpy(np.int64)
            )
        self.corr.append(corr)
        self._sizes(names, has_args, args, lambda a: a)
        self.n += len(xs)

    def _sizes(self, names: list[Any], has_args: np.ndarray, args: list[Any], as_dict: Any) -> None:
        codes, uniques = _factorize(names)
        wanted = np.array([isinstance(u, str) and bool(_ARGS_NAME.search(u)) for u in uniques] + [False])[
            codes
        ]
        for i in np.flatnonzero(wanted & has_args):
            a = as_dict(args[i])
            self.nbytes[self.n + int(i)] = message_bytes(a)
            try:
                code = self.intern(identity(a))
            except (TypeError, ValueError, OverflowError):  # odd values in a hand-made trace
                code = -1
            if code >= 0:
                self.ident[self.n + int(i)] = code
            seq = sequence_number(a)
            if seq is not None:
                self.seq[self.n + int(i)] = seq

    def _add_typed(self, events: list[Any]) -> None:
        """:meth:`add` for msgspec structs (``_TYPED``): one C-level pass codes each event by its
        (ph, name, cat, pid, tid), and the kind of event, the fields and whether its message size is
        read are then looked up per distinct key rather than per event."""
        try:
            codes = np.fromiter(
                map(self.keys.__getitem__, map(_KEY, events)), dtype=np.int64, count=len(events)
            )
        except TypeError:  # a list or an object as name/pid/… (hand-made trace): the orjson path reads it
            raise _TypedError from None
        if len(self.keys) > self.key_kind.size:
            new = list(self.keys)[self.key_kind.size :]
            self.key_kind = np.concatenate(
                [
                    self.key_kind,
                    np.array(
                        [_KINDS.get(k[0], _OTHER) if type(k[0]) is str else _OTHER for k in new], np.int8
                    ),
                ]
            )
            self.key_sized = np.concatenate(
                [
                    self.key_sized,
                    np.array([type(k[1]) is str and bool(_ARGS_NAME.search(k[1])) for k in new], bool),
                ]
            )
            self.key_ac2g = np.concatenate(
                [self.key_ac2g, np.array([_KINDS.get(k[0]) == _FLOW and k[2] == "ac2g" for k in new], bool)]
            )
        kind = self.key_kind[codes]
        self.flows.extend(map(_FLOW_END, compress(events, self.key_ac2g[codes])))
        for i in np.flatnonzero(kind == _META):
            e = events[i]
            if e.name == "thread_name" and e.args is not None:
                try:
                    self.thread_names[(e.pid, e.tid)] = "" if e.args.name is _UNSET else str(e.args.name)
                except TypeError:
                    pass
        is_x = kind == _X
        xs = list(compress(events, is_x))
        if not xs:
            return
        k = len(xs)
        x_codes = codes[is_x]
        self.x_keys.append(x_codes)
        self.ts.append(_attr_floats(xs, "ts"))  # null → NaN (skipped later)
        self.dur.append(_attr_floats(xs, "dur"))
        args = list(map(_attr("args"), xs))
        # no args (None) and no correlation in them both read -1, in one pass
        try:
            try:
                corr = np.fromiter(map(getattr, args, _CORR, _NO_CORR), dtype=np.int64, count=k)
            except TypeError:  # "correlation": null
                corr = np.array(
                    [-1 if c is None else c for c in map(getattr, args, _CORR, _NO_CORR)], dtype=np.int64
                )
        except OverflowError:  # beyond int64 (hand-made trace): the orjson path reads it
            raise _TypedError from None
        self.corr.append(corr)
        memo, nbytes, ident, seqs, first = self.size_memo, self.nbytes, self.ident, self.seq, self.n
        for i in np.flatnonzero(self.key_sized[x_codes]).tolist():
            a = args[i]
            if a is None:
                continue
            seq = a.seq
            if seq is not _UNSET and type(seq) is int:
                seqs[first + i] = seq
            if a.in_nelems is _UNSET and a.out_nelems is _UNSET:  # sized by its Input Dims
                nbytes[first + i] = message_bytes(_args_dict(a))
                code = self._ident_of(a)
                if code >= 0:
                    ident[first + i] = code
                continue
            # sized by the args that identify it: one computation per distinct combination
            sig = _SIGNATURE(a)
            try:
                size, code = memo[sig]
            except KeyError:
                size, code = memo[sig] = (message_bytes(_args_dict(a)), self._ident_of(a))
            except TypeError:  # a list where a number or string belongs (hand-made trace)
                size, code = message_bytes(_args_dict(a)), self._ident_of(a)
            nbytes[first + i] = size
            if code >= 0:
                ident[first + i] = code
        self.n += k

    def _ident_of(self, a: Any) -> int:
        try:
            return self.intern(identity(_args_dict(a)))
        except (TypeError, ValueError, OverflowError):
            return -1


def _attr_floats(xs: list[Any], name: str) -> np.ndarray:
    """A float attribute of every struct as an array; null (None) becomes NaN."""
    try:
        return np.fromiter(map(_attr(name), xs), dtype=np.float64, count=len(xs))
    except TypeError:
        return np.array(list(map(_attr(name), xs)), dtype=np.float64)


def _devices(meta: Any) -> int:
    """How many devices the trace's ``deviceProperties`` lists (0 without it)."""
    props = meta.get("deviceProperties") if isinstance(meta, dict) else None
    return len(props) if isinstance(props, list) else 0


def decode(path: Path) -> tuple[Any, Columns]:
    """(distributedInfo, columns) of a trace: streamed chunk by chunk when the document splits
    cleanly (peak memory: one chunk), else decoded whole. ``columns.devices`` is the number of
    devices in the trace's ``deviceProperties``."""
    if _TYPED[1] is not None:
        cols = Columns()
        try:
            meta = _decode_streaming(path, cols, _TYPED[1])
            cols.devices = _devices(meta)
            return meta.get("distributedInfo"), cols
        except (_ChunkError, _TypedError):
            pass  # odd splits or types: the orjson path below reads what the typed decoder refused
    cols = Columns()
    try:
        meta = _decode_streaming(path, cols)
        cols.devices = _devices(meta)
        return meta.get("distributedInfo"), cols
    except _ChunkError:
        cols = Columns()
    raw = read_bytes(path)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError(
            f"{path}: not valid JSON ({exc}); the trace is truncated or corrupt, re-export it"
        ) from None
    del raw
    if isinstance(doc, dict):
        events, dist = doc.get("traceEvents"), doc.get("distributedInfo")
    else:
        events, dist = doc, None
    if not isinstance(events, list):
        raise InputError(f"{path}: no 'traceEvents' list; this is not a PyTorch profiler trace")
    cols.add(events, path)
    cols.devices = _devices(doc)
    return dist, cols
