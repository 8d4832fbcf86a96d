"""Reader for PyTorch profiler (Kineto) Chrome traces: ``.json`` and ``.json.gz``.

In three parts: :mod:`~fsdpbench.trace.kineto_decode` turns the file's bytes into columns, this
module classifies those columns into the event table, and :mod:`~fsdpbench.trace.kineto_cpu` holds
the CPU/gloo lane rules.

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
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fsdpbench.errors import InputError
from fsdpbench.trace.kineto_comm import Identity, resolve
from fsdpbench.trace.kineto_cpu import classify_cpu
from fsdpbench.trace.kineto_decode import decode
from fsdpbench.trace.rank import DEVICE_NOT_RECORDED, ONE_RANK_WORLD, RankTrace
from fsdpbench.trace.table import (
    CATEGORIES,
    CATEGORY_CODE,
    COLLECTIVE_LABELS,
    TASK_LABELS,
    Coded,
    StepWindows,
    assign_steps,
    factorize,
    kernel_category_codes,
    make_table,
    needs_string_parse,
    task_codes,
    us_to_ns,
)

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_RANK_IN_PATH = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
# device work (lower-cased category → table category; None: by name). ``Memcpy``/``Memset``/``Kernel``
# are the 2021-era (PyTorch 1.8–1.10) spellings.
_DEVICE_CATS = {
    "kernel": None,
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cuda_sync": "sync",
    "memcpy": "memcpy",
    "memset": "memset",
}
# host-side categories read as such (``Runtime``/``Operator``: 2021-era spellings; "" in hand-made traces)
_HOST_CATS = {
    "",
    "cpu_op",
    "operator",
    "user_annotation",
    "cuda_runtime",
    "runtime",
    "cuda_driver",
    "driver",
    "hip_runtime",
    "python_function",
    "python",
    "trace",
    "overhead",
    "cpu_instant_event",
}
_RUNTIME_CATS = ["cuda_runtime", "runtime", "cuda_driver", "driver", "hip_runtime"]
# Device-side projections of host annotations (``gpu_user_annotation``, and any other
# ``<device>_user_annotation``): labels only, never compute, communication or step windows.
_DEVICE_ANNOTATION = re.compile(r"^(?!user_annotation$)\w*annotation$", re.IGNORECASE)
# an unknown category with one of these words is taken as device activity
_DEVICEISH = re.compile(
    r"runtime|driver|kernel|memcpy|memset|ccp|gpu|cuda|hip|rocm|mtia|xpu|npu|hpu|device|dma|stream",
    re.IGNORECASE,
)
_NS_EPOCH_TS = 1e17  # as µs this is past the year 5000: such timestamps are nanoseconds


def _get(d: dict, key: Any) -> Any:
    try:
        return d.get(key)
    except TypeError:
        return None


def _lanes(pair_codes: np.ndarray, pair_names: list[str]) -> Coded:
    """Lane per event from its (pid, tid) code; pairs that share a name share the lane."""
    codes, uniq = factorize([str(x) for x in pair_names])
    return Coded(codes[pair_codes], uniq)


def rank_from_path(path: Path) -> int | None:
    """The rank number in a file or folder name (``rank3``, ``rank_3``), innermost first."""
    for part in [path.name, *[p.name for p in path.parents][:3]]:
        m = _RANK_IN_PATH.search(part)
        if m:
            return int(m.group(1))
    return None


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


def _of_categories(lower: list[str], codes: np.ndarray, wanted: Any) -> np.ndarray:
    """Per event, whether its lower-cased category is in ``wanted``: one test per category, not per event
    (``codes`` index ``lower``; -1, no category, is not wanted)."""
    return np.array([x in wanted for x in lower] + [False], dtype=bool)[codes]


def _categorical(codes: np.ndarray, uniques: list[Any]) -> Coded:
    cats = ["" if u is None else str(u) for u in uniques]
    if len(set(cats)) != len(cats):  # e.g. 1 and "1" in a hand-made trace
        recode, cats = factorize(cats)
        codes = recode[codes]
    return Coded(codes, cats)


@dataclass
class _Columns:
    """A trace's timed events after the checks: ns times, coded names/categories/lanes, and the sparse
    per-event fields the decoder found (by event index)."""

    start: np.ndarray
    end: np.ndarray
    corr: np.ndarray
    names: Coded
    cats: Coded
    pair_codes: np.ndarray
    """(pid, tid) pair per event, an index into ``pairs``."""
    pairs: list[tuple[Any, Any]]
    sizes: dict[int, Any]
    ident: dict[int, Any]
    seqs: dict[int, Any]


def _timed_columns(path: Path, cols: Any, warnings: list[str]) -> _Columns:
    """The decoded chunks as whole columns: refuses ns timestamps, skips (and warns of) events without a
    valid ts/dur, converts to int64 ns. The chunks' arrays are released as they are joined."""
    ts, dur = np.concatenate(cols.ts), np.concatenate(cols.dur)
    fields = cols.fields()
    name_codes, name_uniq = fields["name"]
    cat_codes, cat_uniq = fields["cat"]
    pid_codes, pid_uniq = fields["pid"]
    tid_codes, tid_uniq = fields["tid"]
    del fields
    corr = np.concatenate(cols.corr)
    cols.ts = cols.dur = cols.corr = cols.x_keys = []  # concatenated: the chunks' arrays can go
    sizes, ident, seqs = cols.nbytes, cols.ident, cols.seq
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
        sizes = {int(new_index[i]): b for i, b in sizes.items() if good[i]}
        ident = {int(new_index[i]): c for i, c in ident.items() if good[i]}
        seqs = {int(new_index[i]): c for i, c in seqs.items() if good[i]}
        ts, dur, corr = ts[keep], dur[keep], corr[keep]
        name_codes, cat_codes, pid_codes, tid_codes = (
            name_codes[keep],
            cat_codes[keep],
            pid_codes[keep],
            tid_codes[keep],
        )
    if needs_string_parse(ts) and not np.array_equal(ts, np.floor(ts)):
        warnings.append(
            f"{path.name}: timestamps beyond 2**43 µs with fractions; times are exact only to the double's precision"
        )
    start = us_to_ns(ts)
    end = start + us_to_ns(dur)
    del ts, dur
    names = _categorical(name_codes, name_uniq)
    cats = _categorical(cat_codes, cat_uniq)
    del name_codes, cat_codes
    pair_codes, pair_uniq = factorize(pid_codes.astype(np.int64) * (len(tid_uniq) + 1) + tid_codes)
    pairs = [(pid_uniq[p // (len(tid_uniq) + 1)], tid_uniq[p % (len(tid_uniq) + 1)]) for p in pair_uniq]
    return _Columns(start, end, corr, names, cats, pair_codes, pairs, sizes, ident, seqs)


def _step_windows(c: _Columns, not_steps: np.ndarray) -> tuple[np.ndarray, StepWindows]:
    """Which events are step windows (the host ``ProfilerStep#N`` spans; ``not_steps`` marks device events
    and annotations, whose projections are labels) and the windows themselves."""
    names = c.names
    step_idx = [i for i, cat in enumerate(names.categories) if _STEP_RE.match(cat)]
    is_step = np.isin(names.codes, step_idx) & ~not_steps
    sel = np.flatnonzero(is_step)
    step_ids = np.array(
        [int(_STEP_RE.match(names.categories[names.codes[i]]).group(1)) for i in sel], dtype=np.int64
    )
    return is_step, StepWindows.of(step_ids, c.start[sel], c.end[sel])


@dataclass
class _Classified:
    """The per-event codes a reader fills in (into CATEGORIES, COLLECTIVE_LABELS and TASK_LABELS)."""

    category: np.ndarray
    device: np.ndarray
    collective: np.ndarray
    nbytes: np.ndarray
    task: np.ndarray
    orphan: np.ndarray
    launch_of: np.ndarray
    """The index of the runtime call that launched a device event, -1 for none."""

    @classmethod
    def empty(cls, n: int, task: np.ndarray) -> _Classified:
        return cls(
            category=np.full(n, CATEGORY_CODE["other"], dtype=np.int8),
            device=np.zeros(n, dtype=bool),
            collective=np.zeros(n, dtype=np.int8),
            nbytes=np.full(n, np.nan),
            task=task,
            orphan=np.zeros(n, dtype=bool),
            launch_of=np.full(n, -1, dtype=np.int64),
        )


def _classify_device(
    path: Path,
    c: _Columns,
    cols: Any,
    out: _Classified,
    has_runtime: bool,
    is_dev_cat: np.ndarray,
    is_annot: np.ndarray,
    name_lane: list[str],
    step: np.ndarray,
    steps: StepWindows,
    warnings: list[str],
) -> tuple[Coded, Identity, tuple[str, ...]]:
    """A device trace: kernels by category and name, lanes as streams, collectives' identity, launches
    joined (``out`` filled in). Returns the lanes, the collectives' identity and the tasks recorded."""
    names, pairs, pair_codes = c.names, c.pairs, c.pair_codes
    cat_names = [str(x) for x in c.cats.categories]
    kcat = kernel_category_codes(names)
    # the category a device category implies (gpu_memcpy → memcpy), else -1: by the kernel's name
    by_cat = [CATEGORY_CODE[m] if (m := _DEVICE_CATS.get(x.lower())) else -1 for x in cat_names]
    mapped = np.array([*by_cat, -1], dtype=np.int8)[c.cats.codes]
    dev_cat = np.where(mapped < 0, kcat, mapped)
    out.category[is_dev_cat] = dev_cat[is_dev_cat]
    out.device[is_dev_cat] = True
    # device lanes are streams: Kineto writes the stream as the tid of GPU events (2021-era: "stream 7")
    lane_names = np.array(name_lane + ["?"], dtype=object)
    pair_is_dev = np.zeros(len(pairs), dtype=bool)
    pair_is_dev[pair_codes[is_dev_cat]] = True
    lane_names[: len(pairs)][pair_is_dev] = [
        str(pairs[i][1]) if str(pairs[i][1]).startswith("stream") else f"stream {pairs[i][1]}"
        for i in np.flatnonzero(pair_is_dev)
    ]
    lane = _lanes(pair_codes, list(lane_names[: len(pairs)]))
    comm = out.category == CATEGORY_CODE["comm"]
    found = {"ident": c.ident, "idents": cols.idents, "seq": c.seqs, "nbytes": c.sizes}
    identity = resolve(
        comm,
        names,
        is_dev_cat,
        is_annot,
        c.corr,
        c.start,
        c.end,
        pair_codes,
        found,
        out.collective,
        out.nbytes,
    )
    out.orphan = _join_launches(
        c.start,
        c.corr,
        step,
        steps,
        is_dev_cat,
        is_annot,
        out.task,
        pair_codes,
        pairs,
        cols.flows,
        out.launch_of,
    )
    syncs = [TASK_LABELS.index(t) for t in ("device_synchronize", "stream_synchronize", "event_synchronize")]
    host_sync = ~is_dev_cat & np.isin(out.task, syncs)
    out.category[host_sync] = CATEGORY_CODE["sync"]
    if not has_runtime:
        warnings.append(
            f"{path.name}: no runtime (cuda_runtime) events; kernel launches and syncs are not recorded, "
            "and device work joins steps by time"
        )
        return lane, identity, ()
    return lane, identity, ("device_synchronize", "stream_synchronize", "event_synchronize", "kernel_launch")


def _sorted_table(columns: dict[str, Any], identity: Identity, n: int) -> Any:
    """The event table in start order. The caller hands over its only references to the columns:
    each is sorted in turn and its unsorted copy freed (peak memory: the columns plus one copy), and
    ``make_table`` finds them in order and copies nothing."""
    order = np.argsort(columns["start_ns"], kind="stable")
    for key in columns:
        columns[key] = columns[key][order]
    columns.update(identity.columns(n, order))  # sparse: made in sorted order, not sorted copies
    del order
    return make_table(**columns)


def _read_kineto(path: Path) -> RankTrace:
    dist, cols = decode(path)
    warnings: list[str] = []
    rank = None
    if isinstance(dist, dict) and isinstance(dist.get("rank"), int):
        rank = dist["rank"]
    if rank is None:
        rank = rank_from_path(path)
    if cols.n == 0:
        raise InputError(f"{path}: no timed ('ph': 'X') events; the profiler recorded nothing")
    thread_names = cols.thread_names
    c = _timed_columns(path, cols, warnings)
    names, cats = c.names, c.cats
    cat_names = [str(x) for x in cats.categories]
    lower = [x.lower() for x in cat_names]

    n = len(c.start)
    is_dev_cat = _of_categories(lower, cats.codes, _DEVICE_CATS)
    is_annot = np.array([bool(_DEVICE_ANNOTATION.match(x)) for x in cat_names] + [False])[cats.codes]
    _unknown_categories(path, cats, is_dev_cat, is_annot, warnings)
    name_lane = [_get(thread_names, (p, t)) or f"thread {t}" for p, t in c.pairs]
    is_step, steps = _step_windows(c, is_dev_cat | is_annot)
    out = _Classified.empty(n, task_codes(names))
    step = assign_steps(c.start, steps.start_ns, steps.end_ns, steps.step)
    out.task[is_annot] = 0
    if is_dev_cat.any():
        mode = "device"
        has_runtime = bool(_of_categories(lower, cats.codes, _RUNTIME_CATS).any())
        lane, identity, recorded = _classify_device(
            path, c, cols, out, has_runtime, is_dev_cat, is_annot, name_lane, step, steps, warnings
        )
    else:
        mode = "cpu"
        identity = Identity()
        lane = _lanes(c.pair_codes, name_lane)
        device_job = _device_job(path, names, cols.devices, dist, warnings)
        classify_cpu(
            names,
            np.array(lower + [""], dtype=object)[cats.codes],
            c.start,
            c.end,
            c.pair_codes,
            is_step,
            is_annot,
            c.sizes,
            out.category,
            out.device,
            out.collective,
            out.nbytes,
            warnings,
            path,
            device_job,
        )
        recorded = ()  # a CPU-only trace has no device syncs or kernel launches to record
        out.task[:] = 0

    if (
        isinstance(dist, dict)
        and dist.get("world_size") == 1
        and not (out.category == CATEGORY_CODE["comm"]).any()
    ):
        warnings.append(
            f"{path.name}: {ONE_RANK_WORLD} (distributedInfo world_size 1) and no collectives: FSDP issues none "
            "at that size, so there is no communication to analyse"
        )
    c.corr = c.pair_codes = np.empty(0, dtype=np.int64)  # used up: freed before the launch columns are made
    start, launch_of = c.start, out.launch_of
    own = launch_of < 0  # no linked launch: the event's own start and lane
    columns = {
        "name": names,
        "category": Coded(out.category, CATEGORIES),
        "start_ns": start,
        "end_ns": c.end,
        "lane": lane,
        "device": out.device,
        "collective": Coded(out.collective, COLLECTIVE_LABELS),
        "nbytes": out.nbytes,
        "task": Coded(out.task, TASK_LABELS),
        "step": step,
        "orphan": out.orphan,
        "launch_ns": np.where(own, start, start[np.maximum(launch_of, 0)]),
        "launch_lane": np.where(own, lane.codes, lane.codes[np.maximum(launch_of, 0)]).astype(np.int32),
    }
    groups = identity.groups
    world = dist.get("world_size") if isinstance(dist, dict) else None
    # hand the columns over: their only references are in ``columns`` from here
    del c, out, names, cats, lane, step, start, launch_of, own, is_dev_cat, is_annot, is_step
    table = _sorted_table(columns, identity, n)
    del columns, identity
    return RankTrace(
        rank=rank,
        source=str(path),
        format="kineto",
        table=table,
        windows=steps,
        mode=mode,
        warnings=warnings,
        recorded_tasks=recorded,
        groups=groups,
        world_size=world if isinstance(world, int) and not isinstance(world, bool) and world > 0 else None,
    )


_DEVICE_COMM_OP = re.compile(r"^(?:nccl|rccl|hccl|hcom):", re.IGNORECASE)
_DEVICE_BACKENDS = ("nccl", "rccl", "hccl", "xccl", "mccl")


def _device_job(path: Path, names: Coded, devices: int, dist: Any, warnings: list[str]) -> bool:
    """True (with a warning) when a trace without device activity comes from a GPU/NPU job: it holds
    ``nccl:*``/``hccl:*`` ops, its ``distributedInfo`` names a device backend, or its
    ``deviceProperties`` lists devices; never when ``gloo:*`` ops or a gloo backend say the collectives
    ran on the CPU. Devices alone do not decide it when the trace has c10d collective launches: Kineto
    lists the machine's GPUs for a gloo job too, and an older gloo trace may lack its worker spans."""
    if any(c.lower().startswith("gloo:") for c in names.categories):
        return False
    backend = str(_get(dist, "backend") or "").lower() if isinstance(dist, dict) else ""
    if backend == "gloo":
        return False
    ops = sorted({c.split(":", 1)[0].lower() for c in names.categories if _DEVICE_COMM_OP.match(c)})
    why = []
    if ops:
        why.append(f"it holds {'/'.join(o + ':*' for o in ops)} ops")
    if backend in _DEVICE_BACKENDS:
        why.append(f"the backend is {backend}")
    if devices and (why or not any(c.startswith("c10d::") for c in names.categories)):
        why.append(f"deviceProperties lists {devices} device(s)")
    if not why:
        return False
    warnings.append(
        f"{path.name}: {DEVICE_NOT_RECORDED} (no kernels, memcpys or runtime calls) although this is a "
        f"GPU/NPU job ({'; '.join(why)}): communication and device time are unknown, no host span is counted as "
        "a collective, and 'compute' is the training thread's host operators; profile with "
        "ProfilerActivity.CUDA (or the NPU activity) to measure the device"
    )
    return True


def _unknown_categories(
    path: Path, cats: Coded, is_dev_cat: np.ndarray, is_annot: np.ndarray, warnings: list[str]
) -> None:
    """Warn about event categories the reader does not know (naming each and its count), or raise
    InputError when the trace's only device activity is of such categories."""
    counts = np.bincount(cats.codes[cats.codes >= 0], minlength=len(cats.categories))
    unknown = [
        (c, int(k))
        for c, k in zip(cats.categories, counts, strict=True)
        if k
        and c.lower() not in _DEVICE_CATS
        and c.lower() not in _HOST_CATS
        and not _DEVICE_ANNOTATION.match(c)
    ]
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
        what = (
            f"{int(is_dev_cat.sum())} device events of the categories "
            f"{', '.join(sorted({c for c, k in zip(cats.categories, np.bincount(cats.codes[is_dev_cat], minlength=len(cats.categories)), strict=True) if k}))}"
            " were analysed"
        )
    else:
        what = "it was analysed as a CPU-only trace (training-thread operators as compute, gloo spans as communication)"
    warnings.append(f"{path.name}: event categories not read, left out of every number: {listed}; {what}")


def _join_launches(
    start: np.ndarray,
    corr: np.ndarray,
    step: np.ndarray,
    steps: StepWindows,
    is_dev: np.ndarray,
    is_annot: np.ndarray,
    task: np.ndarray,
    pair_codes: np.ndarray,
    pairs: list[tuple[Any, Any]],
    flows: list[tuple[Any, Any, Any, Any, Any]],
    launch_of: np.ndarray,
) -> np.ndarray:
    """Give each device event the step of the runtime call that launched it (in place in ``step``),
    and that call's index (in place in ``launch_of``; correlation-id links only, -1 otherwise),
    joined by correlation id, else by an ``ac2g`` flow. Returns the orphans: device events whose
    launch is not in a trace that records launches (left out of every total, as HTA does).
    Device events of a trace with no launch records keep their step by time. A device-side sync
    (``Context Sync``) whose host call is in the trace is not counted again as a task."""
    dev = np.flatnonzero(is_dev)
    host = ~is_dev & ~is_annot & (corr >= 0)
    linked = np.zeros(dev.size, dtype=bool)
    if host.any():
        # the first host event of each correlation id launched it
        ids, first = np.unique(corr[host], return_index=True)
        launch_step = step[host][first]
        pos = np.minimum(np.searchsorted(ids, corr[dev]), ids.size - 1)
        linked = (ids[pos] == corr[dev]) & (corr[dev] >= 0)
        step[dev[linked]] = launch_step[pos[linked]]
        launch_of[dev[linked]] = np.flatnonzero(host)[first][pos[linked]]
    flow_links = _flow_steps(start, dev[~linked], steps, pair_codes, pairs, flows)
    for i, st in flow_links.items():
        step[i] = st
    if flow_links:
        linked |= np.isin(dev, np.fromiter(flow_links, dtype=np.int64, count=len(flow_links)))
    task[dev[linked]] = 0
    orphan = np.zeros(len(start), dtype=bool)
    if host.any() or flows:
        orphan[dev[~linked]] = True
        step[dev[~linked]] = -1
    return orphan


def _flow_steps(
    start: np.ndarray,
    candidates: np.ndarray,
    steps: StepWindows,
    pair_codes: np.ndarray,
    pairs: list[tuple[Any, Any]],
    flows: list[tuple[Any, Any, Any, Any, Any]],
) -> dict[int, int]:
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
    st = assign_steps(s_ns, steps.start_ns, steps.end_ns, steps.step)
    for f, fns, s in zip(ids, f_ns.tolist(), st.tolist(), strict=True):
        i = by_key.get((ends[f][0], ends[f][1], fns))
        if i is not None:
            out[i] = s
    return out
