"""Synthetic GPU-like Kineto traces, for tests and ``benchmarks/analyze_speed.py``.

A trace has host ``ProfilerStep#N`` spans and one ``cudaLaunchKernel`` runtime event per device
event (linked by ``correlation``), compute kernels on two streams, NCCL kernels (old and new names,
with Kineto's ``In msg nelems``/``dtype`` args) on a third, and memcpy/memset. Times are integer ns
written as µs with 3 decimals, as Kineto writes them. Generation is vectorised (numpy).

Options reproduce what real traces hold: FBGEMM-style ``*_async_*`` compute kernels, orphan device
work (launched before the profiler window opened), 2021-era category names, integer-ns timestamps;
:func:`add_gpu_annotations` adds the device-side ``gpu_user_annotation`` projections that the CUDA
profiler writes for every host annotation, exact, short (pytorch/kineto#1022) or missing
(pytorch/pytorch#192021).
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import numpy as np
import orjson

COMM_NAMES = [
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclKernel_ReduceScatter_RING_LL_Sum_float(ncclWorkElem, unsigned long, ncclDevComm*)",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
]
COMPUTE_NAMES = [
    "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(Params)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, F, A)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(R)",
    "triton_poi_fused_cat_slice_0",
    "flash_fwd_kernel",
]
ASYNC_NAME = (
    "void recat_copy_async_kernel<float>(long const*, long const*, float const*, float*, long, long, long)"
)
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
_RUNTIME_CATS = ("cuda_runtime", "Runtime")


def make_trace(
    *,
    rank: int = 0,
    world_size: int = 8,
    device_events: int = 2000,
    steps: int = 1,
    seed: int = 0,
    skew_ns: int = 0,
    compute_gap_ns: int = 4_000,
    async_kernels: int = 0,
    orphans: int = 0,
    categories: str = "current",
    ns_integers: bool = False,
    host_ops: bool = False,
) -> dict[str, Any]:
    """A Kineto-shaped dict with about ``device_events`` device events over ``steps`` profiler steps.

    ``skew_ns`` delays every event of this rank (to make a straggler); ``compute_gap_ns`` is the
    largest idle gap between compute kernels of a stream (larger: sparser compute, less overlap);
    ``async_kernels`` compute kernels are named ``void recat_copy_async_kernel<float>(…)``;
    ``orphans`` extra compute kernels run before the first step with no runtime event of their
    correlation id; ``categories="2021"`` writes ``Kernel``/``Memcpy``/``Runtime``/``Operator`` as
    PyTorch 1.8–1.10 did; ``ns_integers`` writes ``ts``/``dur`` as integer nanoseconds of an epoch clock;
    ``host_ops`` adds the host operators a real trace holds around its launches (:func:`_host_ops`: about
    4.4 host events per device event, as in ``tests/fixtures/hta_ddp_step``; :func:`device_events_for`
    gives the device events of a trace of N events in all)."""
    rng = np.random.default_rng(seed + 1000 * rank)
    n_comm = max(device_events // 20, 1)
    n_mem = max(device_events // 50, 1)
    n_comp = max(device_events - n_comm - n_mem, 1)
    # compute: two streams of back-to-back kernels with small gaps (stream 7 gets 3/4)
    stream = np.where(rng.random(n_comp) < 0.75, 7, 8)
    comp_dur = np.maximum(rng.lognormal(np.log(8_000), 1.0, n_comp).astype(np.int64), 1_000)
    comp_dur[:5] = [1_234, 1_001, 999, 57, 2_000_001]  # short kernels keep their exact length
    comp_gap = rng.integers(0, compute_gap_ns, n_comp)
    comp_start = np.empty(n_comp, dtype=np.int64)
    for s in (7, 8):
        m = stream == s
        t = np.cumsum(comp_gap[m] + comp_dur[m]) - comp_dur[m]
        comp_start[m] = t
    span = int(max((comp_start + comp_dur).max(), 1))
    # comm: one stream, sorted random starts, durations up to the gap to the next one
    comm_start = np.sort(rng.integers(0, span, n_comm))
    room = np.diff(np.append(comm_start, span))
    comm_dur = np.maximum((room * rng.uniform(0.3, 0.95, n_comm)).astype(np.int64), 500)
    comm_dur = np.minimum(comm_dur, np.maximum(room, 1))
    shared = np.random.default_rng(seed)  # every rank issues the same collectives in the same order
    comm_kind = shared.integers(0, len(COMM_NAMES), n_comm)
    nelems = (2 ** shared.integers(10, 24, n_comm)).astype(np.int64)
    mem_start = np.sort(rng.integers(0, span, n_mem))
    mem_dur = rng.integers(1_000, 20_000, n_mem)

    base = 1_000_000_000_000 + skew_ns  # ~11.6 days in ns: realistic monotonic-clock magnitude
    starts = np.concatenate([comp_start, comm_start, mem_start]) + base
    durs = np.concatenate([comp_dur, comm_dur, mem_dur])
    n = starts.size
    lanes = np.concatenate([stream, np.full(n_comm, 20), np.full(n_mem, 7)])
    step_len = (span + steps - 1) // steps + 1
    step_of = (starts - base) // step_len
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "thread 1 (python)"}},
    ]
    for k in range(steps):
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{k + 3}",
                "pid": 0,
                "tid": 1,
                "ts": (base + k * step_len - 500) / 1000,
                "dur": step_len / 1000,
            }
        )
    comp_names = np.array(COMPUTE_NAMES + [ASYNC_NAME])[rng.integers(0, len(COMPUTE_NAMES), n_comp)]
    comp_names[rng.permutation(n_comp)[: min(async_kernels, n_comp)]] = ASYNC_NAME
    names = np.concatenate(
        [comp_names, np.array(COMM_NAMES)[comm_kind], np.full(n_mem, "Memcpy DtoD (Device -> Device)")]
    )
    cats = np.concatenate(
        [np.full(n_comp, "kernel"), np.full(n_comm, "kernel"), np.full(n_mem, "gpu_memcpy")]
    )
    # launches: 2-6 µs before the kernel's step-local start, clamped into its step
    launch = np.maximum(starts - rng.integers(2_000, 6_000, n), base + step_of * step_len)
    # one host thread's calls follow each other: each lasts 1.5 µs or up to the next one's start
    by_time = np.argsort(launch, kind="stable")
    launch_dur = np.full(n, 1_500, dtype=np.int64)
    host_events: list[dict[str, Any]] = []
    if host_ops:
        step_open = base + step_of * step_len - 500  # ProfilerStep#N's start
        launch, launch_dur, host_events = _host_ops(launch, by_time, starts, step_open, rng)
    else:
        launch_dur[by_time[:-1]] = np.minimum(np.diff(launch[by_time]), 1_500)
    ts_us = (starts / 1000).tolist()
    dur_us = (durs / 1000).tolist()
    launch_us = (launch / 1000).tolist()
    launch_dur_us = (launch_dur / 1000).tolist()
    names_l, cats_l, lanes_l = names.tolist(), cats.tolist(), lanes.tolist()
    comm_set = set(range(n_comp, n_comp + n_comm))
    for i in range(n):
        # real correlation ids are large; small ones also trip an int16 downcast in HTA 0.5.0 + pandas 3
        corr = 1_000_000 + i
        args: dict[str, Any] = {"device": 0, "stream": lanes_l[i], "correlation": corr}
        if i in comm_set:
            j = i - n_comp
            ne = int(nelems[j])
            kind = int(comm_kind[j])
            args.update(
                {
                    "In msg nelems": ne // world_size if kind == 0 else ne,
                    "Out msg nelems": ne if kind != 1 else ne // world_size,
                    "Group size": world_size,
                    "dtype": "Float",
                }
            )
        events.append(
            {
                "ph": "X",
                "cat": cats_l[i],
                "name": names_l[i],
                "pid": 0,
                "tid": lanes_l[i],
                "ts": ts_us[i],
                "dur": dur_us[i],
                "args": args,
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 0,
                "tid": 1,
                "ts": launch_us[i],
                "dur": launch_dur_us[i],
                "args": {"correlation": corr},
            }
        )
    events.extend(host_events)
    for k in range(orphans):  # device work launched before the profiler started: no runtime event
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": COMPUTE_NAMES[k % len(COMPUTE_NAMES)],
                "pid": 0,
                "tid": 7,
                "ts": (base - 400_000 + 3_000 * k) / 1000,
                "dur": 2.5,
                "args": {"device": 0, "stream": 7, "correlation": 500_000 + k},
            }
        )
    if categories == "2021":
        old = {"kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset", "cuda_runtime": "Runtime"}
        for e in events:
            if e.get("cat") in old:
                e["cat"] = old[e["cat"]]
    elif categories != "current":
        raise ValueError(f"categories must be 'current' or '2021' (got {categories!r})")
    if ns_integers:
        for e in events:
            if "ts" in e:
                e["ts"] = (
                    round(e["ts"] * 1000) + 1_700_000_000 * 10**9
                )  # on an epoch clock, as exporters write ns
                e["dur"] = round(e["dur"] * 1000)
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "Synthetic GPU"}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size},
        "traceEvents": events,
    }


HOST_PER_DEVICE = {"cpu_op": 2.54, "cuda_runtime": 1.90}
"""Host events per device event in ``tests/fixtures/hta_ddp_step`` (one step of a real CUDA DDP trace: 11,336
``cpu_op`` and 8,474 ``cuda_runtime`` events around 4,458 device events), which :func:`_host_ops` writes."""
_LAUNCH_OPS = ["aten::addmm", "aten::mm", "aten::add", "aten::mul", "aten::fill_", "aten::copy_", "aten::sum"]
_OUTER_OPS = ["aten::linear", "aten::zero_", "aten::clone", "aten::relu"]


def device_events_for(events: int) -> int:
    """The device events of a ``host_ops`` trace of about ``events`` events in all (device + host)."""
    return max(round(events / (1 + sum(HOST_PER_DEVICE.values()))), 1)


def _host_ops(
    launch: np.ndarray,
    by_time: np.ndarray,
    kernel_start: np.ndarray,
    step_open: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
    """The host side of a real trace around the launches at ``launch`` (ns; ``by_time`` their order):
    (launch starts, launch lengths, the host events). As in ``tests/fixtures/hta_ddp_step`` (per device
    event 2.54 ``cpu_op`` and 1.90 ``cuda_runtime``): each launch inside an ``aten::`` operator (half of
    them inside a second one, e.g. ``aten::linear`` > ``aten::addmm``), 27 % with a
    ``cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags`` call before it in that operator, and in the
    time between operators ones that launch nothing (``aten::view``, ``aten::t`` > ``aten::transpose`` >
    ``aten::as_strided``) and ``cudaEventQuery`` calls. Launches are at least 200 ns apart on their thread
    (a launch moved later stays before its kernel) and last 1.5 µs or half the time to the next; the
    operators share the time between launches, so nothing overlaps but the nesting, and none starts before
    its launch's step (``step_open``: per device event). One host thread."""
    n = launch.size
    lt = launch[by_time].copy()
    lt = np.maximum.accumulate(lt - 200 * np.arange(n)) + 200 * np.arange(n)  # ≥ 200 ns apart
    lt = np.minimum(lt, kernel_start[by_time] - 1)
    if (np.diff(lt) <= 0).any():
        raise ValueError("host_ops: launches too dense to keep 200 ns apart before their kernels")
    nxt = np.append(lt[1:], lt[-1] + 4_000)
    ld = np.minimum(1_500, (nxt - lt) // 2)
    gap = nxt - lt - ld  # free time after each launch, up to the next one's start
    post = gap // 5  # the enclosing operators' end after the launch
    pre = np.concatenate([[2_000], gap[:-1] // 5])  # … and their start before it, inside its step
    pre = np.minimum(pre, lt - step_open[by_time] - 1)
    mid_lo = lt + ld + post
    mid = np.maximum(gap - post - np.append(pre[1:], 0), 0)  # the room for operators that launch nothing
    outer = rng.random(n) < 0.5
    occ = rng.random(n) < 0.27
    # kernel-less items per launch: 0.44 one-op, 0.20 three-op (aten::t > transpose > as_strided), 0.63 queries
    kinds = np.repeat([0, 1, 2], [round(0.44 * n), round(0.20 * n), round(0.63 * n)])
    where = rng.choice(n, size=kinds.size, p=mid / mid.sum()) if mid.sum() else np.zeros(0, np.int64)
    host: list[dict[str, Any]] = []

    def ev(name: str, cat: str, t0: int, t1: int) -> None:
        host.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": 0,
                "tid": 1,
                "ts": t0 / 1000,
                "dur": (t1 - t0) / 1000,
            }
        )

    names = rng.integers(0, len(_LAUNCH_OPS), n).tolist()
    outer_names = rng.integers(0, len(_OUTER_OPS), n).tolist()
    for i, (t, d, a, b) in enumerate(zip(lt.tolist(), ld.tolist(), pre.tolist(), post.tolist(), strict=True)):
        ev(_LAUNCH_OPS[names[i]], "cpu_op", t - a * 4 // 5, t + d + b * 2 // 5)
        if outer[i]:
            ev(_OUTER_OPS[outer_names[i]], "cpu_op", t - a, t + d + b * 4 // 5)
        if occ[i]:
            ev(
                "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
                "cuda_runtime",
                t - a * 3 // 5,
                t - a // 5,
            )
    order = np.lexsort((kinds, where))
    where, kinds = where[order], kinds[order]
    count = np.bincount(where, minlength=n)
    slot_of = np.arange(where.size) - np.repeat(np.cumsum(count) - count, count)
    for i, k, j in zip(where.tolist(), kinds.tolist(), slot_of.tolist(), strict=True):
        w = int(mid[i]) // int(count[i])
        t0 = int(mid_lo[i]) + j * w + w // 10
        t1 = t0 + w * 4 // 5
        if t1 - t0 < 8:
            continue  # no room: left out
        if k == 0:
            ev("aten::view", "cpu_op", t0, t1)
        elif k == 1:
            q = (t1 - t0) // 8
            ev("aten::t", "cpu_op", t0, t1)
            ev("aten::transpose", "cpu_op", t0 + q, t1 - q)
            ev("aten::as_strided", "cpu_op", t0 + 2 * q, t1 - 2 * q)
        else:
            ev("cudaEventQuery", "cuda_runtime", t0, t1)
    out_t = np.empty(n, dtype=np.int64)
    out_d = np.empty(n, dtype=np.int64)
    out_t[by_time] = lt
    out_d[by_time] = ld
    return out_t, out_d, host


def write_trace(path: str | Path, trace: dict[str, Any]) -> Path:
    """Write a trace dict as ``.json`` or ``.json.gz`` (by suffix).

    ``"rank": N`` is written with a space, as Kineto does: HTA finds the rank with ``"rank":\\s+(\\d+)``."""
    path = Path(path)
    data = orjson.dumps(trace).replace(b'"rank":', b'"rank": ', 1)
    if path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=1)
    path.write_bytes(data)
    return path


def add_gpu_annotations(trace: dict[str, Any], mode: str = "exact", *, stream: int = 7) -> dict[str, Any]:
    """Add the ``gpu_user_annotation`` events the CUDA profiler writes (PyTorch ≥ 1.12): each host
    ``user_annotation`` (``ProfilerStep#N``, ``record_function`` ranges, ``gloo:*``) projected onto every
    stream as the span of the device work launched inside it, with ``External id`` but no correlation.
    A trace without device work (CPU/gloo) gets each projection on ``stream`` with the host span.

    Args:
        trace: a Kineto dict (changed in place and returned).
        mode: ``exact``; ``short``: ``ProfilerStep#N`` covers only the first device event of each stream
            (pytorch/kineto#1022); ``missing``: every other ``ProfilerStep#N`` has no projection
            (pytorch/pytorch#192021).
    """
    if mode not in ("exact", "short", "missing"):
        raise ValueError(f"mode must be exact, short or missing (got {mode!r})")
    evs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    host = [e for e in evs if e.get("cat") == "user_annotation"]
    launch_ts = {
        e["args"]["correlation"]: e["ts"]
        for e in evs
        if e.get("cat") in _RUNTIME_CATS and isinstance(e.get("args"), dict) and "correlation" in e["args"]
    }
    dev = [
        e for e in evs if e.get("cat") in _DEVICE_CATS and e.get("args", {}).get("correlation") in launch_ts
    ]
    d_launch = np.array([launch_ts[e["args"]["correlation"]] for e in dev], dtype=np.float64)
    d_start = np.array([e["ts"] for e in dev], dtype=np.float64)
    d_end = d_start + np.array([e["dur"] for e in dev], dtype=np.float64)
    d_stream = np.array([e["tid"] for e in dev])
    out = []
    steps_seen = 0
    for k, h in enumerate(host):
        is_step = str(h["name"]).startswith("ProfilerStep#")
        if is_step:
            steps_seen += 1
            if mode == "missing" and steps_seen % 2 == 0:
                continue
        base = {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": h["name"],
            "args": {"External id": 900_000 + k},
        }
        if not dev:
            dur = h["dur"] * (0.01 if is_step and mode == "short" else 1.0)
            out.append({**base, "pid": 0, "tid": stream, "ts": h["ts"], "dur": dur})
            continue
        inside = (d_launch >= h["ts"]) & (d_launch < h["ts"] + h["dur"])
        for s in np.unique(d_stream[inside]).tolist():
            m = inside & (d_stream == s)
            first = np.flatnonzero(m)[np.argmin(d_start[m])]
            t0 = float(d_start[m].min())
            t1 = float(d_end[first]) if is_step and mode == "short" else float(d_end[m].max())
            out.append({**base, "pid": 0, "tid": s, "ts": t0, "dur": round(t1 - t0, 3)})
    trace["traceEvents"].extend(out)
    return trace
