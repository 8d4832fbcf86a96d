"""Real CUDA/NCCL traces nobody on this project wrote (HolisticTraceAnalysis' test data, see
../shared/fixtures/kineto/PROVENANCE.md) against independent references: HTA in exact mode
(``HTA_DISABLE_NS_ROUNDING=1``, every profiled step kept) for compute and overlap, and counts taken
from the raw JSON by plain Python here (orphans, syncs, collectives)."""

from __future__ import annotations

import gzip
import logging
import os

import orjson
import pytest

from fsdpbench.analysis import analyze
from helpers import SHARED, run_cli

KINETO = SHARED / "fixtures" / "kineto"
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")

pytestmark = pytest.mark.skipif(not KINETO.is_dir(), reason="shared Kineto fixtures not present")


def raw_events(name: str) -> list[dict]:
    (path,) = (KINETO / name).glob("*.json.gz")
    return orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def hta_exact(name: str) -> tuple[float, float | None]:
    """HTA's (compute time µs, overlap % or None) of the trace's rank, ns rounding off, last step kept."""
    pytest.importorskip("hta")
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.WARNING)
    try:
        ta = TraceAnalysis(trace_dir=str(KINETO / name), include_last_profiler_step=True)
        temporal = ta.get_temporal_breakdown(visualize=False)
        overlap = ta.get_comm_comp_overlap(visualize=False)["comp_comm_overlap_pctg"].iloc[0]
    finally:
        logging.disable(logging.NOTSET)
    return float(temporal["compute_time(us)"].iloc[0]), None if overlap != overlap else float(overlap)


def orphans_by_hand(name: str) -> tuple[int, float]:
    """(count, Σ dur µs) of device events whose correlation id no runtime call in the trace carries."""
    ev = [e for e in raw_events(name) if e.get("ph") == "X"]
    launched = {
        e["args"]["correlation"]
        for e in ev
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    orphans = [e for e in ev if e.get("cat") in DEVICE_CATS and e["args"].get("correlation") not in launched]
    return len(orphans), sum(e["dur"] for e in orphans)


@pytest.mark.parametrize(
    ("name", "has_comm"),
    [("trace_diff_test", True), ("negative_queue_length_values_check", True), ("ns_resolution_trace", False)],
)
def test_compute_and_overlap_equal_hta_exact_mode(name, has_comm):
    r = analyze([KINETO / name], workers=1).ranks[0]
    compute, overlap = hta_exact(name)
    assert r.compute_us == pytest.approx(compute, abs=0.001)
    if has_comm:
        assert 100 * r.overlap_ratio == pytest.approx(overlap, abs=0.0051)  # HTA rounds to 0.01 %
    else:
        assert overlap is None and r.overlap_ratio is None


@pytest.mark.parametrize(
    "name", ["trace_diff_test", "negative_queue_length_values_check", "ns_resolution_trace"]
)
def test_orphans_are_counted_per_rank_as_the_raw_trace_has_them(name):
    res = analyze([KINETO / name], workers=1)
    r = res.ranks[0]
    count, dur_us = orphans_by_hand(name)
    assert r.orphan_events == count
    assert r.orphan_us == pytest.approx(dur_us, abs=0.001)
    assert res.record().to_dict()["ranks"][0]["orphan_share"] == r.orphan_share
    assert (count > 0) == any("launched before the trace begins" in w for w in res.warnings)


def test_collectives_exclude_orphans_and_include_everything_launched_in_a_step():
    ev = [e for e in raw_events("negative_queue_length_values_check") if e.get("ph") == "X"]
    steps = [
        (e["ts"], e["ts"] + e["dur"])
        for e in ev
        if e["name"].startswith("ProfilerStep#") and e.get("cat") == "user_annotation"
    ]
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime"}
    nccl = [e for e in ev if e.get("cat") == "kernel" and e["name"].startswith("nccl")]
    in_steps = [
        e for e in nccl if any(a <= launch_ts.get(e["args"]["correlation"], -1) < b for a, b in steps)
    ]
    r = analyze([KINETO / "negative_queue_length_values_check"], workers=1).ranks[0]
    assert sum(c["count"] for c in r.collectives.values()) == len(in_steps) < len(nccl)


def test_sync_calls_are_counted_once_per_host_call():
    ev = raw_events("critical_path_alexnet")
    by_hand = {
        k: sum(e.get("name") == k and e.get("cat") == "cuda_runtime" for e in ev)
        for k in ("cudaDeviceSynchronize", "cudaStreamSynchronize")
    }
    assert by_hand == {"cudaDeviceSynchronize": 5, "cudaStreamSynchronize": 16}
    assert sum(e.get("cat") == "cuda_sync" for e in ev) > 0  # the device side records each sync too
    sync = analyze([KINETO / "critical_path_alexnet"], workers=1).ranks[0].sync
    assert sync["device_synchronize"] == by_hand["cudaDeviceSynchronize"]
    assert sync["stream_synchronize"] == by_hand["cudaStreamSynchronize"]
    assert sync["barrier"] is None and sync["launch_ffts"] is None  # no such task on CUDA


def test_fbgemm_async_kernels_are_compute():
    r = analyze([KINETO / "trace_diff_test"], workers=1).ranks[0]
    ev = r.events
    recat = ev[ev["name"].astype(str).str.contains("recat_copy_async_kernel")]
    assert len(recat) == 7
    assert set(recat["category"].astype(str)) == {"compute"}
    launched = recat[~recat["orphan"]]
    assert r.op_stats.set_index("op_type").loc[str(launched["name"].iloc[0]), "count"] == len(launched)


def test_analyze_cli_reports_orphans_per_rank(tmp_path):
    count, dur_us = orphans_by_hand("negative_queue_length_values_check")
    out = tmp_path / "a.json"
    proc = run_cli(
        "analyze", str(KINETO / "negative_queue_length_values_check"), "--json", str(out), timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert f"{count} device events ({dur_us / 1000:.3f} ms" in " ".join(proc.stdout.split())
    rank = orjson.loads(out.read_bytes())["ranks"][0]
    assert (rank["orphan_events"], rank["orphan_us"]) == (count, pytest.approx(dur_us))
    assert rank["sync"]["barrier"] is None and "n/r" in proc.stdout
