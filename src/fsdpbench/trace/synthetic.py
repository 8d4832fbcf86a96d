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
) -> dict[str, Any]:
    """A Kineto-shaped dict with about ``device_events`` device events over ``steps`` profiler steps.

    ``skew_ns`` delays every event of this rank (to make a straggler); ``compute_gap_ns`` is the
    largest idle gap between compute kernels of a stream (larger: sparser compute, less overlap);
    ``async_kernels`` compute kernels are named ``void recat_copy_async_kernel<float>(…)``;
    ``orphans`` extra compute kernels run before the first step with no runtime event of their
    correlation id; ``categories="2021"`` writes ``Kernel``/``Memcpy``/``Runtime``/``Operator`` as
    PyTorch 1.8–1.10 did; ``ns_integers`` writes ``ts``/``dur`` as integer nanoseconds of an epoch clock."""
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
