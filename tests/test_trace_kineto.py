"""The Kineto reader: exact ns times, CUDA kernel classification, CPU/gloo semantics, ranks, steps."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdpbench.analysis import analyze, rank_metrics
from fsdpbench.errors import InputError
from fsdpbench.trace import read_rank
from fsdpbench.trace.kineto import read_kineto
from fsdpbench.trace.table import us_strings_to_ns, us_to_ns
from helpers import SHARED

FIXTURES = Path(__file__).parent / "fixtures" / "traces"


def write(path: Path, events: list[dict], **top) -> Path:
    path.write_bytes(orjson.dumps({"traceEvents": events, **top}))
    return path


def kernel(
    name: str, ts: float, dur: float, stream: int = 7, corr: int = -1, cat: str = "kernel", **args
) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"stream": stream, "correlation": corr, **args},
    }


def test_a_1_234_us_kernel_keeps_1234_ns(tmp_path):
    t = read_kineto(write(tmp_path / "t.json", [kernel("k", 5355446845132.159, 1.234)]))
    row = t.events.iloc[0]
    assert row.start_ns == 5355446845132159
    assert row.end_ns - row.start_ns == 1234


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**43 * 1000 - 1))
def test_us_doubles_with_3_decimals_convert_to_the_exact_ns(ns):
    text = f"{ns // 1000}.{ns % 1000:03d}"
    assert us_to_ns(np.array([float(text)]))[0] == ns
    assert us_strings_to_ns(pd.Series([text + "\t"]))[0] == ns


def test_epoch_us_strings_parse_exactly():
    assert us_strings_to_ns(pd.Series(["1736408883704643.212\t", "1699529622790614.8", "7"])).tolist() == [
        1736408883704643212,
        1699529622790614800,
        7000,
    ]


@pytest.mark.parametrize(
    ("name", "ctype"),
    [
        ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", "all_gather"),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "reduce_scatter"),
        ("nccldevkernel_allreduce_sum_f32_ring_ll", "all_reduce"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "send_recv"),
        ("ncclKernel_Broadcast_RING_LL_Sum_int8_t", "broadcast"),
    ],
)
def test_nccl_kernel_names_old_new_and_lowercase_are_communication(tmp_path, name, ctype):
    t = read_kineto(
        write(tmp_path / "t.json", [kernel(name, 10.0, 5.0, stream=20), kernel("gemm", 10.0, 2.0)])
    )
    comm = t.events[t.events.category == "comm"]
    assert comm["collective"].tolist() == [ctype]
    assert comm["lane"].astype(str).tolist() == ["stream 20"]


def test_memcpy_memset_and_sync_are_neither_compute_nor_comm(tmp_path):
    evs = [
        kernel("Memcpy DtoD (Device -> Device)", 0.0, 1.0, cat="gpu_memcpy"),
        kernel("Memset (Device)", 1.0, 1.0, cat="gpu_memset"),
        kernel("Stream Wait Event", 2.0, 0.0, cat="cuda_sync"),
        kernel("void gemm_kernel<float>()", 3.0, 1.0),
    ]
    cats = read_kineto(write(tmp_path / "t.json", evs)).events.set_index("name")["category"].astype(str)
    assert cats.to_dict() == {
        "Memcpy DtoD (Device -> Device)": "memcpy",
        "Memset (Device)": "memset",
        "Stream Wait Event": "sync",
        "void gemm_kernel<float>()": "compute",
    }


def test_kernels_take_the_step_of_the_runtime_call_that_launched_them(tmp_path):
    evs = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#3",
            "pid": 0,
            "tid": 1,
            "ts": 0.0,
            "dur": 10.0,
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#4",
            "pid": 0,
            "tid": 1,
            "ts": 10.0,
            "dur": 10.0,
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 0,
            "tid": 1,
            "ts": 9.0,
            "dur": 0.5,
            "args": {"correlation": 77},
        },
        kernel("late_kernel", 12.0, 3.0, corr=77),  # runs during step 4's host window, launched in step 3
    ]
    t = read_kineto(write(tmp_path / "t.json", evs))
    ev = t.events.set_index("name")
    assert ev.loc["late_kernel", "step"] == 3
    assert ev.loc["cudaLaunchKernel", "task"] == "kernel_launch"


def test_comm_bytes_come_from_kineto_message_args(tmp_path):
    evs = [
        kernel(
            "ncclDevKernel_AllGather_RING_LL",
            0.0,
            4.0,
            stream=20,
            **{"In msg nelems": 1024, "Out msg nelems": 8192, "dtype": "BFloat16"},
        )
    ]
    assert read_kineto(write(tmp_path / "t.json", evs)).events["bytes"].tolist() == [8192 * 2]


def test_rank_comes_from_distributed_info_else_the_path(tmp_path):
    ev = [kernel("k", 0.0, 1.0)]
    assert read_kineto(write(tmp_path / "x.json", ev, distributedInfo={"rank": 5})).rank == 5
    d = tmp_path / "rank3"
    d.mkdir()
    assert read_kineto(write(d / "host.123.pt.trace.json", ev)).rank == 3


def test_gzip_traces_read_like_plain_json(tmp_path):
    data = orjson.dumps({"traceEvents": [kernel("k", 1.5, 2.25)]})
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(data))
    t = read_rank(tmp_path / "t.json.gz")
    assert t.events[["start_ns", "end_ns"]].values.tolist() == [[1500, 3750]]


def test_cpu_gloo_trace_semantics_on_a_hand_made_trace():
    """Compute = outermost operators of the training thread outside collective launches and outside
    wrappers; comm = gloo worker spans."""
    t = read_kineto(FIXTURES / "gloo_min.json")
    assert t.mode == "cpu" and t.rank == 1
    ev = t.events
    cat = ev.groupby(["name", "start_ns"], observed=True)["category"].first().astype(str)
    assert cat[("aten::mm", 1000000)] == "compute"
    assert cat[("aten::linear", 1012000)] == "compute"
    assert cat[("aten::addmm", 1013000)] == "other"  # nested in aten::linear
    assert cat[("aten::mm", 1031000)] == "compute"  # inside an autograd wrapper
    assert cat[("autograd::engine::evaluate_function: AddmmBackward0", 1030000)] == "other"
    assert cat[("aten::empty", 1010500)] == "other"  # inside the c10d launch
    assert cat[("c10d::_allgather_base_", 1010000)] == "other"  # the launch only enqueues
    gloo = ev[ev.name == "gloo:all_gather"].iloc[0]
    assert (gloo.category, gloo.collective, gloo.bytes) == (
        "comm",
        "all_gather",
        16 * 4,
    )  # size from the launch
    m = rank_metrics(t)
    # compute [0,10)+[12,30)+[31,33) = 30 µs, comm [11,25) = 14 µs, overlap [12,25) = 13 µs, step 40 µs
    assert (m.compute_us, m.comm_us, m.overlapped_us, m.exposed_comm_us) == (30.0, 14.0, 13.0, 1.0)
    assert m.overlap_ratio == 13 / 14
    assert (m.step, m.step_time_us, m.free_us) == (5, 40.0, 9.0)
    assert m.op_stats.set_index("op_type").loc["aten::mm", "count"] == 2


def test_reduce_scatter_run_as_gloo_all_reduce_keeps_the_launch_type(tmp_path):
    main, worker = 1, 2
    evs = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "c10d::_reduce_scatter_base_",
            "pid": 1,
            "tid": main,
            "ts": 0.0,
            "dur": 1.0,
            "args": {"Input Dims": [[4], [8]], "Input type": ["float", "float"]},
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "gloo:all_reduce",
            "pid": 1,
            "tid": worker,
            "ts": 0.5,
            "dur": 3.0,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": main, "ts": 2.0, "dur": 1.0},
    ]
    m = rank_metrics(read_kineto(write(tmp_path / "t.json", evs)))
    assert list(m.collectives) == ["reduce_scatter"]
    assert m.collectives["reduce_scatter"]["bytes"] == 32


def test_analyze_a_multi_step_cpu_trace_reports_each_step(tmp_path):
    evs = []
    for k, t0 in ((1, 0.0), (2, 100.0)):
        evs += [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{k}",
                "pid": 1,
                "tid": 1,
                "ts": t0,
                "dur": 100.0,
            },
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t0, "dur": 10.0 * k},
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "gloo:all_reduce",
                "pid": 1,
                "tid": 2,
                "ts": t0 + 5,
                "dur": 20.0,
            },
        ]
    res = analyze([write(tmp_path / "rank0.json", evs)], workers=1)
    r = res.ranks[0]
    assert [s.step for s in r.steps] == [1, 2]
    assert [s.compute_us for s in r.steps] == [10.0, 20.0]
    assert [s.overlapped_us for s in r.steps] == [5.0, 15.0]
    assert r.compute_us == 30.0 and r.step is None and r.step_time_us == 200.0
    only2 = analyze([tmp_path / "rank0.json"], step=2, workers=1).ranks[0]
    assert only2.step == 2 and only2.compute_us == 20.0 and only2.overlap_ratio == 0.75


def test_chunked_decode_gives_the_same_table_as_a_whole_decode(tmp_path, monkeypatch):
    from fsdpbench.trace import kineto_decode as kineto
    from fsdpbench.trace.synthetic import make_trace, write_trace

    doc = make_trace(device_events=400, seed=2)
    # a split point inside a string, nested lists of objects in args, metadata after the events
    doc["traceEvents"].insert(5, kernel('weird "},{" name', 3.0, 1.0, **{"list": [{"a": 1}, {"b": 2}]}))
    doc["traceName"] = "x]"
    path = write_trace(tmp_path / "t.json", doc)
    monkeypatch.setattr(kineto, "_CHUNK_BYTES", 300)  # many chunks
    calls = []
    add = kineto.Columns.add
    monkeypatch.setattr(kineto.Columns, "add", lambda self, ev, p: (calls.append(len(ev)), add(self, ev, p)))
    chunked = read_kineto(path)
    assert len(calls) > 10 and sum(calls) == len(doc["traceEvents"])  # decoded chunk by chunk
    monkeypatch.setattr(kineto, "_EVENTS_KEY", re.compile(rb"(?!)"))  # never matches: whole decode
    reference = read_kineto(path)
    pd.testing.assert_frame_equal(chunked.events, reference.events)
    assert chunked.rank == reference.rank == 0
    assert len(chunked.events) == 2 * 400 + 2  # kernels, their launches, the odd kernel, one step


def test_outermost_keeps_spans_not_nested_in_another_on_their_lane():
    from fsdpbench.trace.kineto_cpu import outermost

    # lane 0: [0,10] holds [2,5] and [5,10]; [10,12] touches it (not nested); a same-start longer span wins.
    # lane 1: [3,4] is outermost on its own lane although lane 0's [0,10] covers it in time.
    start = np.array([0, 2, 5, 10, 3, 20, 20])
    end = np.array([10, 5, 10, 12, 4, 21, 25])
    lane = np.array([0, 0, 0, 0, 1, 1, 1])
    idx = np.arange(7)
    assert outermost(idx, start, end, lane).tolist() == [0, 3, 4, 6]
    assert outermost(idx, start, end).tolist() == [0, 3, 6]  # one lane: [3,4] is inside [0,10]
    assert outermost(idx[:0], start, end).size == 0


@pytest.mark.parametrize("name", ["ns_resolution_trace", "trace_diff_test"])
def test_typed_msgspec_decode_gives_the_orjson_table(monkeypatch, name, shared_fixtures):
    """The msgspec typed-struct decode and the plain orjson decode read a real trace into the same table."""
    from fsdpbench.trace import kineto_decode

    pytest.importorskip("msgspec")
    path = next((SHARED / "fixtures" / "kineto" / name).glob("*.json.gz"))
    typed = read_kineto(path)
    monkeypatch.setattr(kineto_decode, "_TYPED", (None, None))
    plain = read_kineto(path)
    pd.testing.assert_frame_equal(typed.events, plain.events)
    pd.testing.assert_frame_equal(typed.steps, plain.steps)
    assert typed.warnings == plain.warnings and typed.rank == plain.rank


def test_a_trace_that_does_not_fit_the_typed_structs_is_read_with_orjson(tmp_path):
    """A hand-made trace with a string ``ts`` is valid JSON but not the typed schema: read as before."""
    doc = {"traceEvents": [kernel("k", 1.0, 2.0), {**kernel("k2", 5.0, 1.0), "ts": "oops"}]}
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps(doc))
    with pytest.raises(InputError, match="'ts' holds values that are not numbers"):
        read_kineto(path)
