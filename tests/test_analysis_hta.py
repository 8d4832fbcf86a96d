"""Overlap and compute time equal HolisticTraceAnalysis' (get_comm_comp_overlap, get_temporal_breakdown)
on generated GPU-like traces, on the hand-made gloo trace and on the traces of a profiled ``fsdpbench ab``
run. HTA is a test-only tool; it cannot read CPU-only traces (it looks only at events with a stream),
so for those the device events fsdpbench found are re-emitted as kernels and HTA applies its own
interval arithmetic to them."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fsdpbench.analysis import RankMetrics, analyze
from fsdpbench.trace.synthetic import make_trace, write_trace

pytest.importorskip("hta")


def as_kernel_trace(r: RankMetrics) -> dict:
    """The rank's device events re-emitted as CUDA kernels (comm named ``ncclDevKernel_<type>``, compute
    by op type, one stream per lane), so HTA applies its own overlap arithmetic to the same intervals."""
    ev = r.events[r.events["device"]]
    lanes = ev["lane"].cat.codes.to_numpy() + 7
    comm = (ev["category"] == "comm").to_numpy()
    names = np.where(
        comm, "ncclDevKernel_" + ev["collective"].astype(str).to_numpy(), ev["op_type"].astype(str).to_numpy()
    )
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": str(n),
            "pid": 0,
            "tid": int(s),
            "ts": int(a) / 1000,
            "dur": int(b - a) / 1000,
            "args": {"stream": int(s), "correlation": i + 1, "device": 0},
        }
        for i, (n, s, a, b) in enumerate(zip(names, lanes, ev["start_ns"], ev["end_ns"], strict=True))
    ]
    return {"distributedInfo": {"rank": r.rank}, "traceEvents": events}


def write_kernel_traces(ranks: list[RankMetrics], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r in ranks:
        write_trace(folder / f"rank{r.rank}.json", as_kernel_trace(r))
    return folder


def hta_overlap_and_breakdown(trace_dir: Path) -> tuple[pd.Series, pd.DataFrame]:
    """HTA's comp_comm_overlap_pctg per rank and its temporal breakdown (ns rounding off)."""
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.WARNING)
    try:
        ta = TraceAnalysis(trace_dir=str(trace_dir))
        overlap = ta.get_comm_comp_overlap(visualize=False).set_index("rank")["comp_comm_overlap_pctg"]
        temporal = ta.get_temporal_breakdown(visualize=False).set_index("rank")
    finally:
        logging.disable(logging.NOTSET)
    return overlap, temporal


GLOO_MIN = Path(__file__).parent / "fixtures" / "traces" / "gloo_min.json"


@pytest.mark.parametrize(("seed", "gap_ns"), [(0, 4_000), (7, 60_000)])
def test_overlap_and_compute_equal_hta_on_generated_gpu_traces(tmp_path, seed, gap_ns):
    for rank in range(2):
        trace = make_trace(rank=rank, world_size=2, device_events=4000, seed=seed, compute_gap_ns=gap_ns)
        write_trace(tmp_path / f"rank{rank}.json", trace)
    ours = analyze([tmp_path], workers=1)
    overlap, temporal = hta_overlap_and_breakdown(tmp_path)
    assert sorted(overlap.index) == [0, 1]
    for r in ours.ranks:
        assert 0.05 < r.overlap_ratio < 0.999  # a non-trivial case
        assert 100 * r.overlap_ratio == pytest.approx(overlap[r.rank], abs=0.0051)  # HTA rounds to 0.01 %
        assert r.compute_us == pytest.approx(temporal.loc[r.rank, "compute_time(us)"], abs=0.01)
        dev = r.events[r.events["device"]]
        span_us = (dev["end_ns"].max() - dev["start_ns"].min()) / 1000
        assert span_us == pytest.approx(temporal.loc[r.rank, "kernel_time(us)"], abs=0.01)


def test_overlap_equals_hta_on_the_gloo_trace_events(tmp_path):
    ours = analyze([GLOO_MIN], workers=1)
    overlap, _ = hta_overlap_and_breakdown(write_kernel_traces(ours.ranks, tmp_path / "k"))
    assert 100 * ours.ranks[0].overlap_ratio == pytest.approx(overlap[1], abs=0.0051)
    assert overlap[1] == pytest.approx(100 * 13 / 14, abs=0.0051)


@pytest.mark.distributed
def test_overlap_equals_hta_on_traces_from_a_profiled_ab_run(profiled_ab_run, tmp_path):
    for arm_dir in sorted((profiled_ab_run / "profiles").iterdir()):
        ours = analyze([arm_dir], workers=1)
        assert len(ours.ranks) == 2
        overlap, temporal = hta_overlap_and_breakdown(
            write_kernel_traces(ours.ranks, tmp_path / arm_dir.name)
        )
        for r in ours.ranks:
            assert r.comm_us > 0 and r.compute_us > 0
            assert 100 * r.overlap_ratio == pytest.approx(overlap[r.rank], abs=0.0051)
            assert r.compute_us == pytest.approx(temporal.loc[r.rank, "compute_time(us)"], abs=0.01)
