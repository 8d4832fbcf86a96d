"""Collective identity in a Kineto device trace: type, dtype, bytes in/out, process group and sequence
number of each communication kernel, read from the trace's own fields (see docs/analysis-formats.md).

In order of preference, each field comes from

1. the kernel's own ``args`` (recent PyTorch writes ``Collective name``, ``In msg nelems``,
   ``Out msg nelems``, ``dtype``, ``Group size``, ``Process Group Name``/``Description``/``Ranks`` and,
   in later versions ``Seq`` on NCCL/RCCL kernels);
2. the ``record_param_comms`` host op that encloses the kernel's launch (the runtime call with the
   kernel's correlation id) on the launching thread: the same keys (2.1–2.2: ``Process Group ID``
   instead of the name);
3. the ``nccl:<op>`` user annotation that encloses the launch (2022–2023 traces): its name gives the
   type (``nccl:all_to_all`` is an all-to-all even though NCCL runs it as ``ncclKernel_SendRecv``) and
   its ``Input Dims``/``Input type`` the input size;
4. the kernel's name (``table.collective_type``), only where none of the above says.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from fsdpbench.trace.table import COLLECTIVE_LABELS, Coded, CommInfo, collective_type

# host spans that may carry the identity of the collectives launched inside them
_LAUNCHER = re.compile(r"^(?:record_param_comms$|(?:nccl|rccl|hccl):)")
_SCAN = 16  # enclosing candidates looked at per launch, innermost first
_LABEL = {lab: i for i, lab in enumerate(COLLECTIVE_LABELS)}


class Identity:
    """The identity of one rank's communication kernels: per event of ``index`` (ascending event
    indices), codes into ``group_names``/``dtype_names``, ``seq`` (-1: none) and bytes in/out (NaN:
    unknown); ``groups`` the named groups' description, ranks and size."""

    def __init__(self, index: np.ndarray | None = None) -> None:
        self.index = np.empty(0, np.int64) if index is None else index
        k = self.index.size
        self.group_codes = np.zeros(k, np.int32)
        self.group_names = [""]
        self.seq = np.full(k, -1, dtype=np.int64)
        self.dtype_codes = np.zeros(k, np.int32)
        self.dtype_names = [""]
        self.in_bytes = np.full(k, np.nan)
        self.out_bytes = np.full(k, np.nan)
        self.groups: dict[str, dict[str, Any]] = {}

    def columns(self, n: int, order: np.ndarray) -> dict[str, Any]:
        """The event table's ``comm_row`` and ``comm`` (:class:`~fsdpbench.trace.table.CommInfo`) for
        ``n`` events put in ``order`` (the table's sort)."""
        is_comm = np.zeros(n, dtype=bool)
        is_comm[self.index] = True
        pos = np.flatnonzero(is_comm[order])  # where the kernels land in sorted order
        k = np.searchsorted(self.index, order[pos])
        row = np.full(n, -1, dtype=np.int32)
        row[pos] = np.arange(pos.size, dtype=np.int32)
        comm = CommInfo(
            Coded(self.group_codes[k], self.group_names),
            self.seq[k],
            Coded(self.dtype_codes[k], self.dtype_names),
            self.in_bytes[k],
            self.out_bytes[k],
        )
        return {"comm_row": row, "comm": comm}


def _lookup(
    mapping: dict[int, Any], index: np.ndarray, missing: Any = -1, dtype: Any = np.int64
) -> np.ndarray:
    """``mapping[i]`` for each i of ``index`` (``missing`` where absent), without an array per event of
    the trace or a dict lookup per event."""
    out = np.full(index.size, missing, dtype=dtype)
    if not mapping or index.size == 0:
        return out
    keys = np.fromiter(mapping, np.int64, len(mapping))
    values = np.fromiter(mapping.values(), dtype, len(mapping))
    if keys.size > 1 and not (keys[1:] > keys[:-1]).all():
        order = np.argsort(keys)
        keys, values = keys[order], values[order]
    pos = np.minimum(np.searchsorted(keys, index), keys.size - 1)
    hit = keys[pos] == index
    out[hit] = values[pos[hit]]
    return out


def _launchers(
    dev: np.ndarray,
    names: Coded,
    is_dev: np.ndarray,
    is_annot: np.ndarray,
    corr: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    lane: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """For each device event of ``dev``: the innermost enclosing ``record_param_comms`` and the
    innermost enclosing ``nccl:<op>``-style annotation around its launch (same thread), -1 for none."""
    rpc = np.full(dev.size, -1, dtype=np.int64)
    ann = np.full(dev.size, -1, dtype=np.int64)
    kind_of_name = [
        1 if c == "record_param_comms" else 2 if _LAUNCHER.match(c) else 0 for c in names.categories
    ]
    kind = np.array([*kind_of_name, 0], dtype=np.int8)[names.codes]
    kind[is_dev | is_annot] = 0
    cand = np.flatnonzero(kind > 0)
    host = np.flatnonzero(~is_dev & ~is_annot & (corr >= 0))
    if cand.size == 0 or host.size == 0 or dev.size == 0:
        return rpc, ann
    ids, first = np.unique(corr[host], return_index=True)
    pos = np.minimum(np.searchsorted(ids, corr[dev]), ids.size - 1)
    found = (ids[pos] == corr[dev]) & (corr[dev] >= 0)
    launch = np.where(found, host[first[pos]], -1)
    # candidates by (lane, start): a launch's enclosing spans start before it on its lane
    order = np.lexsort((start[cand], lane[cand]))
    cand = cand[order]
    c_lane, c_start, c_end, c_kind = lane[cand], start[cand], end[cand], kind[cand]
    for j in np.flatnonzero(found).tolist():
        li = int(launch[j])
        lo = int(np.searchsorted(c_lane, lane[li], side="left"))
        hi = int(np.searchsorted(c_lane, lane[li], side="right"))
        p = lo + int(np.searchsorted(c_start[lo:hi], start[li], side="right"))
        for q in range(p - 1, max(lo, p - _SCAN) - 1, -1):
            if c_end[q] < end[li]:
                continue  # ended before the launch did: not around it
            if c_kind[q] == 1 and rpc[j] < 0:
                rpc[j] = cand[q]
            elif c_kind[q] == 2 and ann[j] < 0:
                ann[j] = cand[q]
            if rpc[j] >= 0 and ann[j] >= 0:
                break
    return rpc, ann


def _merge(own: tuple[Any, ...] | None, launcher: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """Field by field: the kernel's own value, else its launcher's."""
    if own is None or launcher is None:
        return own if launcher is None else launcher
    return tuple(a if a is not None and a == a else b for a, b in zip(own, launcher, strict=True))


def resolve(
    comm: np.ndarray,
    names: Coded,
    is_dev: np.ndarray,
    is_annot: np.ndarray,
    corr: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    lane: np.ndarray,
    found: dict[str, Any],
    collective: np.ndarray,
    nbytes: np.ndarray,
) -> Identity:
    """Fill ``collective`` (codes into ``COLLECTIVE_LABELS``) and ``nbytes`` for the communication
    kernels ``comm`` (a boolean mask) in place, from the trace's own fields in the order of the
    module docstring, and return their group, sequence number, dtype and bytes in/out.
    ``found`` holds what the decoder read (:class:`~fsdpbench.trace.kineto_decode.Columns`), by event
    index: ``ident`` (code into ``idents``), ``idents``, ``seq`` and ``nbytes``."""
    dev = np.flatnonzero(comm)
    out = Identity(dev)
    by_name = np.array([_LABEL[collective_type(c)] for c in names.categories] + [_LABEL["other"]], np.int8)
    collective[dev] = by_name[names.codes[dev]]
    if dev.size == 0:
        return out
    idents = found["idents"]
    own = _lookup(found["ident"], dev)
    own_named = np.array([t[0] is not None for t in idents] + [False], dtype=bool)[own]
    rpc = np.full(dev.size, -1, dtype=np.int64)
    ann = np.full(dev.size, -1, dtype=np.int64)
    need = ~own_named
    if need.any():
        rpc[need], ann[need] = _launchers(dev[need], names, is_dev, is_annot, corr, start, end, lane)
    rpc_code = _lookup(found["ident"], rpc)
    ann_name = np.where(ann >= 0, names.codes[np.maximum(ann, 0)], -1)
    # one code per (own identity, launcher identity, annotation name): resolved once each
    m_ident, m_name = len(idents) + 1, len(names.categories) + 1
    combo = ((own + 1) * m_ident + (rpc_code + 1)) * m_name + (ann_name + 1)
    uniq, inverse = np.unique(combo, return_inverse=True)
    inverse = inverse.ravel()
    combos = np.stack(
        [uniq // m_name // m_ident - 1, uniq // m_name % m_ident - 1, uniq % m_name - 1], axis=1
    )
    c_type = np.empty(len(combos), dtype=np.int16)
    c_group = np.zeros(len(combos), dtype=np.int32)
    c_dtype = np.zeros(len(combos), dtype=np.int32)
    c_in = np.full(len(combos), np.nan)
    c_out = np.full(len(combos), np.nan)
    groups, dtypes = [""], [""]
    for k, (o, r, a) in enumerate(combos.tolist()):
        merged = _merge(idents[o] if o >= 0 else None, idents[r] if r >= 0 else None)
        coll = merged[0] if merged is not None else None
        if coll is not None:
            c_type[k] = _LABEL[collective_type(coll)]
        elif a >= 0:
            c_type[k] = _LABEL[collective_type(names.categories[a])]
        else:
            c_type[k] = -1  # by the kernel's name
        if merged is None:
            continue
        _, dt, b_in, b_out, g_name, g_desc, g_ranks, g_size = merged
        c_in[k], c_out[k] = b_in, b_out
        if dt is not None:
            if dt not in dtypes:
                dtypes.append(dt)
            c_dtype[k] = dtypes.index(dt)
        if g_name is not None:
            if g_name not in groups:
                groups.append(g_name)
            c_group[k] = groups.index(g_name)
            info = out.groups.setdefault(g_name, {"description": None, "ranks": None, "size": None})
            for field, value in (("description", g_desc), ("ranks", g_ranks), ("size", g_size)):
                if info[field] is None and value is not None:
                    info[field] = list(value) if isinstance(value, tuple) else value
    ev_type = c_type[inverse]
    typed = ev_type >= 0
    collective[dev[typed]] = ev_type[typed]
    out.group_names, out.group_codes = groups, c_group[inverse]
    out.dtype_names, out.dtype_codes = dtypes, c_dtype[inverse]
    out.in_bytes, out.out_bytes = c_in[inverse], c_out[inverse]
    own_seq = _lookup(found["seq"], dev)
    out.seq = np.where(own_seq >= 0, own_seq, _lookup(found["seq"], rpc))
    # bytes: the kernel's own message size (as before identity was read: the larger buffer, NaN when
    # its args are odd); without args of its own, the larger buffer its launcher's identity gives,
    # else the launching annotation's Input Dims (its input: all the annotation says)
    sizes = found["nbytes"]
    with np.errstate(invalid="ignore"):
        best = np.fmax(out.in_bytes, out.out_bytes)
    has_own = own >= 0
    best[has_own] = _lookup(sizes, dev[has_own], np.nan, np.float64)
    for j in np.flatnonzero(np.isnan(best) & (own < 0)).tolist():
        i = int(dev[j])
        b = sizes.get(i, np.nan)
        if b != b and ann[j] >= 0:
            b = sizes.get(int(ann[j]), np.nan)
            if b == b and np.isnan(out.in_bytes[j]):
                out.in_bytes[j] = b
        best[j] = b
    nbytes[dev] = best
    return out
