"""What real accelerator traces hold, reproduced on generated traces (trace.synthetic): GPU-side
``ProfilerStep#N`` projections that are exact, short or missing; FBGEMM ``*_async_*`` compute kernels;
orphan device work; ac2g flows instead of correlation ids; unknown device categories; 2021-era
categories; integer-ns timestamps; sync counts a trace cannot record. References: HTA in exact mode
(``HTA_DISABLE_NS_ROUNDING=1``), counts and sums taken from the generated dict by hand, or the same
trace without the quirk (a quirk that must change nothing)."""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path

import pytest

from fsdpbench.analysis import Analysis, analyze
from fsdpbench.errors import InputError
from fsdpbench.trace.synthetic import ASYNC_NAME, add_gpu_annotations, make_trace, write_trace

NUMBERS = (
    "step_time_us",
    "compute_us",
    "comm_us",
    "overlapped_us",
    "exposed_comm_us",
    "free_us",
    "kernel_time_us",
)


def one(tmp_path: Path, name: str, trace: dict) -> Analysis:
    folder = tmp_path / name
    folder.mkdir()
    write_trace(folder / "rank0.json", trace)
    return analyze([folder], workers=1)


def same_numbers(a: Analysis, b: Analysis) -> None:
    for ra, rb in zip(a.ranks, b.ranks, strict=True):
        for key in NUMBERS:
            assert getattr(ra, key) == getattr(rb, key), key
        assert ra.overlap_ratio == rb.overlap_ratio
        assert ra.collectives == rb.collectives
        assert ra.sync == rb.sync
        assert [s.step for s in ra.steps] == [s.step for s in rb.steps]
        for sa, sb in zip(ra.steps, rb.steps, strict=True):
            assert (sa.compute_us, sa.comm_us, sa.step_time_us) == (
                sb.compute_us,
                sb.comm_us,
                sb.step_time_us,
            )


def hta_exact(folder: Path) -> tuple[float, float]:
    """HTA's (compute time µs, overlap %) of rank 0 with ns rounding off and every profiled step kept."""
    pytest.importorskip("hta")
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.WARNING)
    try:
        ta = TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True)
        overlap = ta.get_comm_comp_overlap(visualize=False).set_index("rank")["comp_comm_overlap_pctg"]
        temporal = ta.get_temporal_breakdown(visualize=False).set_index("rank")
    finally:
        logging.disable(logging.NOTSET)
    return float(temporal["compute_time(us)"].iloc[0]), float(overlap.iloc[0])


@pytest.mark.parametrize("mode", ["exact", "short", "missing"])
def test_gpu_side_profiler_step_spans_change_no_number(tmp_path, mode):
    plain = make_trace(device_events=3000, steps=3, seed=3)
    annotated = add_gpu_annotations(copy.deepcopy(plain), mode)
    projected = [e for e in annotated["traceEvents"] if e.get("cat") == "gpu_user_annotation"]
    assert len({e["tid"] for e in projected}) == 3  # one projection per stream: each step "duplicated" 3×
    a, b = one(tmp_path, "plain", plain), one(tmp_path, "annotated", annotated)
    same_numbers(a, b)
    assert [s.step for s in b.ranks[0].steps] == [3, 4, 5]
    ev = b.ranks[0].events
    labels = ev[
        ev["name"].astype(str).str.startswith("ProfilerStep#")
        & ev["lane"].astype(str).str.startswith("stream")
    ]
    assert len(labels) == sum(e["name"].startswith("ProfilerStep#") for e in projected) > 0
    assert set(labels["category"].astype(str)) == {"other"} and not labels["device"].any()


def test_a_trace_with_gpu_annotations_equals_hta_on_it(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    write_trace(
        folder / "rank0.json", add_gpu_annotations(make_trace(device_events=3000, steps=2, seed=5), "short")
    )
    ours = analyze([folder], workers=1).ranks[0]
    compute, overlap = hta_exact(folder)
    assert ours.compute_us == pytest.approx(compute, abs=0.01)
    assert 100 * ours.overlap_ratio == pytest.approx(overlap, abs=0.0051)


def test_async_named_kernels_are_compute_not_syncs(tmp_path):
    trace = make_trace(device_events=3000, steps=2, seed=1, async_kernels=40)
    n_async = sum(e["name"] == ASYNC_NAME for e in trace["traceEvents"])
    assert n_async >= 40
    res = one(tmp_path, "t", trace)
    r = res.ranks[0]
    ops = r.op_stats.set_index("op_type")
    assert ops.loc[ASYNC_NAME, "count"] == n_async
    assert r.sync["device_synchronize"] == r.sync["stream_synchronize"] == r.sync["event_synchronize"] == 0
    compute, _ = hta_exact(tmp_path / "t")  # HTA's compute rule takes them as compute too
    assert r.compute_us == pytest.approx(compute, abs=0.01)


def test_orphan_device_work_is_left_out_and_reported(tmp_path):
    base = one(tmp_path, "base", make_trace(device_events=2000, steps=2, seed=2))
    trace = make_trace(device_events=2000, steps=2, seed=2, orphans=25)
    res = one(tmp_path, "orphans", trace)
    same_numbers(base, res)
    r = res.ranks[0]
    dev = [e for e in trace["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    total_us = sum(round(e["dur"] * 1000) for e in dev) / 1000
    assert (r.orphan_events, r.orphan_us) == (25, pytest.approx(25 * 2.5))
    assert r.orphan_share == pytest.approx(25 * 2.5 / total_us)
    assert any("25 device events" in w and "left out" in w for w in res.warnings)
    assert res.record().to_dict()["ranks"][0]["orphan_events"] == 25
    compute, _ = hta_exact(tmp_path / "orphans")  # HTA drops them too
    assert r.compute_us == pytest.approx(compute, abs=0.01)


def test_orphans_are_left_out_of_a_trace_without_step_markers(tmp_path):
    trace = make_trace(device_events=500, steps=1, seed=4, orphans=5)
    plain = make_trace(device_events=500, steps=1, seed=4)
    for t in (trace, plain):
        t["traceEvents"] = [
            e for e in t["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")
        ]
    a, b = one(tmp_path, "a", plain), one(tmp_path, "b", trace)
    assert b.ranks[0].orphan_events == 5
    assert (a.ranks[0].compute_us, a.ranks[0].kernel_time_us) == (
        b.ranks[0].compute_us,
        b.ranks[0].kernel_time_us,
    )


def test_ac2g_flows_join_device_work_to_its_launch_without_correlation_args(tmp_path):
    trace = make_trace(device_events=1500, steps=3, seed=6)
    runtime = {e["args"]["correlation"]: e for e in trace["traceEvents"] if e.get("cat") == "cuda_runtime"}
    flows = []
    for e in trace["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy"):
            c = e["args"].pop("correlation")
            flows.append(
                {
                    "ph": "s",
                    "cat": "ac2g",
                    "name": "ac2g",
                    "id": c,
                    "ts": runtime[c]["ts"],
                    "pid": 0,
                    "tid": 1,
                }
            )
            flows.append(
                {
                    "ph": "f",
                    "cat": "ac2g",
                    "name": "ac2g",
                    "id": c,
                    "ts": e["ts"],
                    "pid": 0,
                    "tid": e["tid"],
                    "bp": "e",
                }
            )
    with_corr = one(tmp_path, "corr", make_trace(device_events=1500, steps=3, seed=6))
    trace["traceEvents"].extend(flows)
    with_flows = one(tmp_path, "flows", trace)
    same_numbers(with_corr, with_flows)
    assert with_flows.ranks[0].orphan_events == 0
    ev = with_flows.ranks[0].events
    assert (ev.loc[ev["device"], "step"] >= 0).all()


def test_unknown_categories_beside_cuda_work_are_named_with_counts(tmp_path):
    trace = make_trace(device_events=1000, steps=2, seed=7)
    plain = copy.deepcopy(trace)
    for k in range(4):
        trace["traceEvents"].append(
            {
                "ph": "X",
                "cat": "cuda_profiler_range",
                "name": f"range{k}",
                "pid": 0,
                "tid": 7,
                "ts": 1e9 + k,
                "dur": 100.0,
            }
        )
    res = one(tmp_path, "t", trace)
    same_numbers(one(tmp_path, "plain", plain), res)
    msg = next(w for w in res.warnings if "cuda_profiler_range" in w)
    assert "cuda_profiler_range (4 events)" in msg and "device events" in msg and "analysed" in msg


def test_device_activity_of_no_known_kind_is_refused(tmp_path):
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0.0,
            "dur": 100.0,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 10.0},
        *[
            {
                "ph": "X",
                "cat": "mtia_runtime",
                "name": "launch",
                "pid": 1,
                "tid": 1,
                "ts": 20.0 + k,
                "dur": 0.5,
            }
            for k in range(3)
        ],
        *[
            {
                "ph": "X",
                "cat": "mtia_ccp_events",
                "name": "gemm",
                "pid": 2,
                "tid": 3,
                "ts": 30.0 + k,
                "dur": 0.5,
            }
            for k in range(5)
        ],
    ]
    write_trace(tmp_path / "rank0.json", {"traceEvents": events})
    with pytest.raises(
        InputError,
        match=r"mtia_runtime \(3 events\).*mtia_ccp_events \(5 events\)|mtia_ccp_events \(5 events\).*mtia_runtime \(3 events\)",
    ) as e:  # noqa: E501
        analyze([tmp_path / "rank0.json"], workers=1)
    assert "rank0.json" in str(e.value)


def test_unknown_host_only_categories_warn_and_say_what_was_analysed(tmp_path):
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0.0,
            "dur": 100.0,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 10.0},
        {"ph": "X", "cat": "python_gc_pass", "name": "gc", "pid": 1, "tid": 1, "ts": 50.0, "dur": 1.0},
    ]
    write_trace(tmp_path / "rank0.json", {"traceEvents": events})
    res = analyze([tmp_path / "rank0.json"], workers=1)
    assert any("python_gc_pass (1 events)" in w and "CPU-only" in w for w in res.warnings)
    assert res.ranks[0].compute_us == 10.0


def test_2021_categories_read_like_current_ones(tmp_path):
    old = make_trace(device_events=1500, steps=2, seed=8, categories="2021")
    assert {e.get("cat") for e in old["traceEvents"]} >= {"Kernel", "Memcpy", "Runtime"}
    same_numbers(
        one(tmp_path, "now", make_trace(device_events=1500, steps=2, seed=8)), one(tmp_path, "old", old)
    )


def test_integer_nanosecond_timestamps_are_refused_naming_the_unit(tmp_path):
    write_trace(tmp_path / "rank0.json", make_trace(device_events=200, ns_integers=True))
    with pytest.raises(InputError, match="nanoseconds") as e:
        analyze([tmp_path / "rank0.json"], workers=1)
    assert "rank0.json" in str(e.value) and "microseconds" in str(e.value)


def test_sync_counts_a_trace_cannot_record_are_null(tmp_path):
    cuda = one(tmp_path, "cuda", make_trace(device_events=300, steps=1)).ranks[0].sync
    assert cuda["barrier"] is None and cuda["launch_ffts"] is None
    assert cuda["kernel_launch"] == 300 and cuda["stream_synchronize"] == 0
    gloo = analyze([Path(__file__).parent / "fixtures" / "traces" / "gloo_min.json"], workers=1)
    assert set(gloo.ranks[0].sync.values()) == {None}
    assert gloo.record().to_dict()["ranks"][0]["sync"]["kernel_launch"] is None
