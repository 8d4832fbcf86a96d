"""Property tests: whatever the bytes, the readers and metrics either work or raise a fsdpbench
error (one clear line); nothing else escapes."""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsdpbench.analysis import rank_metrics
from fsdpbench.errors import FsdpbenchError
from fsdpbench.trace.ascend import read_ascend
from fsdpbench.trace.kineto import read_kineto

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=6,
)
names = st.sampled_from(
    [
        "ProfilerStep#1",
        "ncclDevKernel_AllGather",
        "gloo:all_reduce",
        "c10d::allreduce_",
        "aten::mm",
        "cudaLaunchKernel",
        "Memcpy DtoD",
        "x",
    ]
) | st.text(max_size=8)
event = st.fixed_dictionaries(
    {},
    optional={
        "ph": st.sampled_from(["X", "M", "i", "s"]) | values,
        "name": names | values,
        "cat": st.sampled_from(
            ["kernel", "cpu_op", "user_annotation", "gpu_memcpy", "cuda_runtime", "cuda_sync"]
        )
        | values,
        "ts": st.floats(-1e6, 1e13) | st.integers(-10, 10**13) | values,
        "dur": st.floats(-5, 1e6) | values,
        "pid": st.integers(0, 3) | values,
        "tid": st.integers(0, 30) | values,
        "args": st.dictionaries(
            st.sampled_from(
                [
                    "stream",
                    "correlation",
                    "In msg nelems",
                    "Out msg nelems",
                    "dtype",
                    "Input Dims",
                    "Input type",
                    "name",
                ]
            ),
            values,
            max_size=4,
        )
        | values,
    },
)
documents = st.one_of(
    st.fixed_dictionaries(
        {"traceEvents": st.lists(event, max_size=12)},
        optional={"distributedInfo": values | st.fixed_dictionaries({"rank": values})},
    ),
    st.lists(event, max_size=8),
    values,
)


def _check(fn) -> None:
    try:
        fn()
    except FsdpbenchError as exc:
        assert str(exc) and "\n" not in str(exc)


@SETTINGS
@given(documents, st.booleans())
def test_no_kineto_document_crashes_the_reader(doc, gz):
    with tempfile.TemporaryDirectory() as d:
        data = orjson.dumps(doc)
        path = Path(d) / ("t.json.gz" if gz else "t.json")
        path.write_bytes(gzip.compress(data) if gz else data)
        _check(lambda: rank_metrics(read_kineto(path)))


@SETTINGS
@given(st.binary(max_size=200), st.sampled_from(["t.json", "t.json.gz"]))
def test_no_byte_string_crashes_the_reader(data, name):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / name
        path.write_bytes(data)
        _check(lambda: read_kineto(path))


csv_cell = st.sampled_from(
    [
        "",
        "N/A",
        "HCCL",
        "AI_CORE",
        "1736408883704643.212\t",
        "12.5",
        "-3",
        "x",
        '"a,b"',
        "hcom_allGather__1_0_1",
        "50",
        "99999999999999999999999.5",
    ]
)
csv_header = st.lists(
    st.sampled_from(
        ["Step Id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)", "Stream ID", "Junk"]
    ),
    min_size=0,
    max_size=7,
    unique=True,
)


@SETTINGS
@given(csv_header, st.lists(st.lists(csv_cell, min_size=0, max_size=8), max_size=5), st.binary(max_size=40))
def test_no_kernel_details_csv_crashes_the_ascend_reader(header, rows, trace_view):
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        out.mkdir(parents=True)
        text = ",".join(header) + "\n" + "\n".join(",".join(r) for r in rows)
        (out / "kernel_details.csv").write_text(text)
        (out / "trace_view.json").write_bytes(trace_view)
        _check(lambda: rank_metrics(read_ascend(out.parent)))
