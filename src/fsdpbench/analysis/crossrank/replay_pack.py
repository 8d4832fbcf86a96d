"""A rank's step-replay graph (:class:`fsdpbench.analysis.crossrank.replay_graph.RankGraph`) in few bytes: the
``.replay`` cache beside a trace (docs/caches.md) and the compact rank result a node ships (docs/multi-node.md)."""

from __future__ import annotations

import dataclasses
import lzma
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson

from fsdpbench.analysis.crossrank.replay_graph import K_QUEUE_GAP, RankGraph

_RELATIVE = {"edst": "esrc"}
"""Graph arrays stored as differences from another (an edge's target lies near its source)."""


def _narrowest(a: Any) -> Any:
    if a.size == 0:
        return a
    lo, hi = int(a.min()), int(a.max())
    for t in (np.int8, np.int16, np.int32):
        if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
            return a.astype(t)
    return a.astype(np.int64)


def _queue_gap_fit(a: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """Per edge, its destination's start − its source's end, from a graph's arrays by field name (what a kept
    queue gap measures, so the cache stores only its difference from it: 0 where the gap was taken from these
    very times); None where there are no starts or lengths to take it from (a slimmed graph)."""
    n = a["dur"].size
    if not (
        n and a["start"].size == n and a["esrc"].size == a["edst"].size == a["ew"].size == a["ekind"].size
    ):
        return None
    src = a["esrc"].astype(np.int64)
    return (
        a["start"][a["edst"]].astype(np.int64)
        - a["start"][src].astype(np.int64)
        - a["dur"][src].astype(np.int64)
    )


def to_bytes(graph: RankGraph) -> bytes:
    """A rank's replay graph in few bytes, for its cache beside the trace and the compact rank result that
    a node ships: each integer array as differences (from the element before, or from ``_RELATIVE``'s array)
    when that narrows it, in the narrowest integer type, its bytes split into byte planes, the whole
    LZMA-compressed at preset 1: about a quarter of an ``.npz`` of the same arrays (docs/DATA.md); ~4× faster to
    write than preset 6, which packs before it used (38 against 145 ms for a rank of 70k tasks), for ~5 % more
    bytes. Deflate would be 4× faster again, but at ~1.8× the bytes the caches would outgrow the trace."""
    meta: dict[str, Any] = {}
    arrays: list[list[Any]] = []  # [name, how, dtype, count, first value (diff)]
    blobs: list[bytes] = []
    gap_fit = _queue_gap_fit(vars(graph))
    for f in dataclasses.fields(graph):
        value = getattr(graph, f.name)
        if not isinstance(value, np.ndarray):
            meta[f.name] = value
            continue
        if f.name == "ew" and gap_fit is not None:  # a queue gap is its lane's start − end before: 0 left
            value = value - np.where(graph.ekind == K_QUEUE_GAP, gap_fit, 0)
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
    head = orjson.dumps({"meta": meta, "arrays": arrays, "queue_gaps_relative": gap_fit is not None, "dtypes": {
        n: getattr(graph, n).dtype.str for n, *_ in arrays}})  # fmt: skip
    return lzma.compress(head + b"\n" + b"".join(blobs), preset=1)


def from_bytes(data: bytes) -> RankGraph:
    """The :class:`RankGraph` that :func:`to_bytes` packed (ValueError/KeyError/LZMAError on bytes that are not one)."""
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
    if head.get("queue_gaps_relative"):
        fit = _queue_gap_fit(values)
        if fit is None:
            raise ValueError("a replay graph packed with relative queue gaps has no starts, lengths or edges")
        values["ew"] = (values["ew"] + np.where(values["ekind"] == K_QUEUE_GAP, fit, 0)).astype(
            values["ew"].dtype
        )
    if "step_ns" not in values:  # packed before the graph held its step windows: rebuild, never read one step
        raise ValueError(
            "a replay graph packed without its step windows (step_ns): written by an older fsdpbench"
        )
    meta = head["meta"]
    if "places" in meta:
        meta["places"] = [tuple(p) for p in meta["places"]]
    return RankGraph(**meta, **values)
