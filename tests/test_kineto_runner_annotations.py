"""End to end: the traces of a profiled ``fsdpbench ab`` run, with the GPU-side annotations the CUDA
profiler would add (``gpu_user_annotation`` projections of ``ProfilerStep#N``, ``FSDP::*`` and ``gloo:*``
ranges, written by trace.synthetic.add_gpu_annotations), give the same numbers as without them."""

from __future__ import annotations

import gzip
import shutil

import orjson
import pytest

from fsdpbench.analysis import analyze
from fsdpbench.trace.synthetic import add_gpu_annotations, write_trace

NUMBERS = (
    "step_time_us",
    "compute_us",
    "comm_us",
    "overlapped_us",
    "exposed_comm_us",
    "free_us",
    "kernel_time_us",
    "overlap_ratio",
)


@pytest.mark.distributed
@pytest.mark.parametrize("mode", ["exact", "short", "missing"])
def test_runner_traces_with_gpu_side_annotations_give_the_same_numbers(profiled_ab_run, tmp_path, mode):
    arm = sorted(p for p in (profiled_ab_run / "profiles").iterdir() if p.is_dir())[0]
    plain = tmp_path / "plain"
    shutil.copytree(arm, plain)
    annotated = tmp_path / "annotated"
    projected = 0
    for path in sorted(plain.rglob("*.json*")):
        if path.name.startswith("."):  # fsdpbench's caches beside the traces
            continue
        raw = path.read_bytes()
        trace = orjson.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
        if not isinstance(trace, dict) or "traceEvents" not in trace:
            continue
        n = len(trace["traceEvents"])
        add_gpu_annotations(trace, mode)
        projected += len(trace["traceEvents"]) - n
        out = annotated / path.relative_to(plain)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_trace(out, trace)
    assert projected > 0
    a, b = analyze([plain], workers=1), analyze([annotated], workers=1)
    assert len(a.ranks) == len(b.ranks) == 2
    for ra, rb in zip(a.ranks, b.ranks, strict=True):
        assert ra.comm_us > 0 and ra.compute_us > 0
        for key in NUMBERS:
            assert getattr(ra, key) == getattr(rb, key), key
        assert ra.collectives == rb.collectives
        assert [s.step for s in ra.steps] == [s.step for s in rb.steps]
        assert ra.op_stats.equals(rb.op_stats)
