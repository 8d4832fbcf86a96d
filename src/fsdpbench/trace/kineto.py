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
from pathlib import Path
from typing import Any

import numpy as np

from fsdpbench.errors import InputError
from fsdpbench.trace.kineto_comm import Identity, resolve
from fsdpbench.trace.kineto_cpu import classify_cpu
from fsdpbench.trace.kineto_decode import decode
from fsdpbench.trace.rank import DEVICE_NOT_RECORDED, RankTrace
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


def _categorical(codes: np.ndarray, uniques: list[Any]) -> Coded:
    cats = ["" if u is None else str(u) for u in uniques]
    if len(set(cats)) != len(cats):  # e.g. 1 and "1" in a hand-made trace
        recode, cats = factorize(cats)
        codes = recode[codes]
    return Coded(codes, cats)


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
    cat_names = [str(c) for c in cats.categories]
    lower = [c.lower() for c in cat_names]

    def of_cats(wanted: Any) -> np.ndarray:  # per event, from one test per category (not per event)
        return np.array([c in wanted for c in lower] + [False], dtype=bool)[cats.codes]

    pair_codes, pair_uniq = factorize(pid_codes.astype(np.int64) * (len(tid_uniq) + 1) + tid_codes)
    pairs = [(pid_uniq[p // (len(tid_uniq) + 1)], tid_uniq[p % (len(tid_uniq) + 1)]) for p in pair_uniq]
    del pid_codes, tid_codes
    n = len(start)

    is_dev_cat = of_cats(_DEVICE_CATS)
    is_annot = np.array([bool(_DEVICE_ANNOTATION.match(c)) for c in cat_names] + [False])[cats.codes]
    _unknown_categories(path, cats, is_dev_cat, is_annot, warnings)
    name_lane = [_get(thread_names, (p, t)) or f"thread {t}" for p, t in pairs]
    # step windows: the host ProfilerStep#N spans only (their device-side projections are labels)
    step_idx = [i for i, c in enumerate(names.categories) if _STEP_RE.match(c)]
    is_step = np.isin(names.codes, step_idx) & ~is_dev_cat & ~is_annot
    sel = np.flatnonzero(is_step)
    step_ids = np.array(
        [int(_STEP_RE.match(names.categories[names.codes[i]]).group(1)) for i in sel], dtype=np.int64
    )
    steps = StepWindows.of(step_ids, start[sel], end[sel])

    # category, collective and task as codes into CATEGORIES, COLLECTIVE_LABELS and TASK_LABELS
    collective = np.zeros(n, dtype=np.int8)
    nbytes = np.full(n, np.nan)
    task = task_codes(names)
    category = np.full(n, CATEGORY_CODE["other"], dtype=np.int8)
    device = np.zeros(n, dtype=bool)
    orphan = np.zeros(n, dtype=bool)
    step = assign_steps(start, steps.start_ns, steps.end_ns, steps.step)
    task[is_annot] = 0
    identity = Identity()
    groups: dict[str, dict[str, Any]] = {}

    if is_dev_cat.any():
        mode = "device"
        kcat = kernel_category_codes(names)
        # the category a device category implies (gpu_memcpy → memcpy), else -1: by the kernel's name
        by_cat = [CATEGORY_CODE[m] if (m := _DEVICE_CATS.get(c.lower())) else -1 for c in cat_names]
        mapped = np.array([*by_cat, -1], dtype=np.int8)[cats.codes]
        dev_cat = np.where(mapped < 0, kcat, mapped)
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
        comm = category == CATEGORY_CODE["comm"]
        found = {"ident": ident, "idents": cols.idents, "seq": seqs, "nbytes": sizes}
        identity = resolve(
            comm, names, is_dev_cat, is_annot, corr, start, end, pair_codes, found, collective, nbytes
        )
        groups = identity.groups
        launch_of = np.full(n, -1, dtype=np.int64)
        orphan = _join_launches(
            start, corr, step, steps, is_dev_cat, is_annot, task, pair_codes, pairs, cols.flows, launch_of
        )
        syncs = [
            TASK_LABELS.index(t) for t in ("device_synchronize", "stream_synchronize", "event_synchronize")
        ]
        host_sync = ~is_dev_cat & np.isin(task, syncs)
        category[host_sync] = CATEGORY_CODE["sync"]
        runtime = of_cats(_RUNTIME_CATS)
        recorded = (
            ("device_synchronize", "stream_synchronize", "event_synchronize", "kernel_launch")
            if runtime.any()
            else ()
        )
        if not runtime.any():
            warnings.append(
                f"{path.name}: no runtime (cuda_runtime) events; kernel launches and syncs are not recorded, "
                "and device work joins steps by time"
            )
    else:
        mode = "cpu"
        launch_of = np.full(n, -1, dtype=np.int64)
        lane = _lanes(pair_codes, name_lane)
        device_job = _device_job(path, names, cols.devices, dist, warnings)
        classify_cpu(
            names,
            np.array(lower + [""], dtype=object)[cats.codes],
            start,
            end,
            pair_codes,
            is_step,
            is_annot,
            sizes,
            category,
            device,
            collective,
            nbytes,
            warnings,
            path,
            device_job,
        )
        recorded = ()  # a CPU-only trace has no device syncs or kernel launches to record
        task[:] = 0

    # sort here, one column at a time, each unsorted column freed as its sorted copy is made (peak
    # memory: the columns plus one copy); make_table finds them in order and copies nothing
    del corr, pair_codes
    own = launch_of < 0  # no linked launch: the event's own start and lane
    launch_ns = np.where(own, start, start[np.maximum(launch_of, 0)])
    launch_lane = np.where(own, lane.codes, lane.codes[np.maximum(launch_of, 0)]).astype(np.int32)
    del launch_of, own
    cols_ = {
        "name": names,
        "category": Coded(category, CATEGORIES),
        "start_ns": start,
        "end_ns": end,
        "lane": lane,
        "device": device,
        "collective": Coded(collective, COLLECTIVE_LABELS),
        "nbytes": nbytes,
        "task": Coded(task, TASK_LABELS),
        "step": step,
        "orphan": orphan,
        "launch_ns": launch_ns,
        "launch_lane": launch_lane,
    }
    del names, category, end, lane, device, collective, nbytes, task, step, orphan, launch_ns, launch_lane
    order = np.argsort(start, kind="stable")
    del start
    for key in cols_:
        cols_[key] = cols_[key][order]
    cols_.update(identity.columns(n, order))  # sparse: made in sorted order, not sorted copies
    del order, identity
    table = make_table(**cols_)
    del cols_
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
