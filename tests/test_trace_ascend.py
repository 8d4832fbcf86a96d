"""The Ascend reader against torch_npu's own outputs (step_trace_time.csv, op_statistic.csv,
communication.json) on the real 2-rank fixtures, and its quirks on one-quirk copies."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pandas as pd
import pytest

from fsdpbench.analysis import analyze
from fsdpbench.analysis.rank.overlap import breakdown
from fsdpbench.errors import InputError
from fsdpbench.trace.ascend import read_ascend
from fsdpbench.trace.ascend_ops import op_type_from_name
from helpers import ASCEND_FIXTURES

LEVEL1 = ASCEND_FIXTURES / "msinsight_pt_text_level1"
RANKS = [LEVEL1 / "rank0_ascend_pt", LEVEL1 / "rank1_ascend_pt"]


def _stt(folder: Path) -> pd.Series:
    return pd.read_csv(folder / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv").iloc[0]


@pytest.fixture(scope="module")
def level1(shared_fixtures):
    return analyze([LEVEL1], workers=1)


@pytest.mark.parametrize("rank", [0, 1])
def test_compute_comm_and_exposed_equal_step_trace_time_within_1us(level1, rank):
    r = level1.ranks[rank]
    ref = _stt(RANKS[rank])
    assert r.rank == rank and r.step == 50
    assert abs(r.compute_us - ref["Computing"]) < 1.0
    assert abs(r.comm_us - ref["Communication"]) < 1.0
    assert abs(r.exposed_comm_us - ref["Communication(Not Overlapped)"]) < 1.0
    assert abs(r.overlapped_us - ref["Overlapped"]) < 1.0
    assert r.overlap_ratio == pytest.approx(ref["Overlapped"] / ref["Communication"], abs=1e-5)
    assert not [w for w in level1.warnings if "step_trace_time" in w]


@pytest.mark.parametrize("rank", [0, 1])
def test_free_over_the_device_span_equals_step_trace_time_free(rank, shared_fixtures):
    """Ascend's Free is measured over the device span (first to last task); ours over the wall step."""
    t = read_ascend(RANKS[rank])
    assert abs(breakdown(t.events).free_ns / 1000 - _stt(RANKS[rank])["Free"]) < 1.0


@pytest.mark.parametrize("rank", [0, 1])
def test_op_stats_equal_torch_npu_op_statistic(level1, rank):
    ref = pd.read_csv(RANKS[rank] / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv")
    ref = ref.groupby("OP Type").agg(count=("Count", "sum"), total=("Total Time(us)", "sum"))
    ours = level1.ranks[rank].op_stats.set_index("op_type")
    assert sorted(ours.index) == sorted(ref.index)
    assert (ours.loc[ref.index, "count"].to_numpy() == ref["count"].to_numpy()).all()
    assert ((ours.loc[ref.index, "total_us"] - ref["total"]).abs() < 0.01).all()


def test_collective_counts_match_communication_json(level1):
    for rank, folder in enumerate(RANKS):
        comm = orjson.loads((folder / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_bytes())
        ops = [k for step in comm.values() for k in step["collective"] if k != "Total Op Info"]
        assert level1.ranks[rank].collectives["all_reduce"]["count"] == len(ops) == 4
        assert level1.ranks[rank].collectives["all_reduce"]["bytes"] > 0


def test_launch_ffts_and_stream_syncs_are_counted(level1):
    sync = level1.ranks[0].sync
    assert sync["launch_ffts"] == 4  # one Hccl@Launch_Ffts per collective
    assert sync["stream_synchronize"] > 0 and sync["kernel_launch"] > 0


def test_level0_na_op_types_are_derived_from_the_name():
    assert op_type_from_name("aclnnMm_MatMulCommon_MatMulV2") == "MatMulV2"
    assert op_type_from_name("trans_TransData_0") == "TransData"
    assert op_type_from_name("hcom_allReduce__586_0_1") == "hcom_allReduce_"
    # aclop single ops: type + instance number (real Level0 names), and a versioned type
    assert op_type_from_name("Conv2D1") == "Conv2D"
    assert op_type_from_name("ReduceSum7") == "ReduceSum"
    assert op_type_from_name("Conv2DBackpropFilter10_MemSet") == "MemSet"
    assert op_type_from_name("MatMulV21") == "MatMulV2"
    assert op_type_from_name("AdaptiveAvgPool3d12") == "AdaptiveAvgPool3d"


def _copy(tmp_path: Path, rank: int = 0) -> Path:
    dst = tmp_path / f"rank{rank}_ascend_pt"
    shutil.copytree(
        RANKS[rank],
        dst,
        ignore=shutil.ignore_patterns("operator_*", "memory_record.csv", "npu_module_mem.csv"),
    )
    return dst


def test_level0_style_kernel_details_still_classify_hccl_rows(tmp_path, shared_fixtures):
    dst = _copy(tmp_path)
    kd = dst / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    df = pd.read_csv(kd, dtype=str, keep_default_na=False)
    df.loc[df["Accelerator Core"] != "HCCL", ["Type", "Accelerator Core"]] = "N/A"
    df.to_csv(kd, index=False)
    r = analyze([dst], workers=1).ranks[0]
    assert r.collectives["all_reduce"]["count"] == 4
    assert "MatMulV2" in set(r.op_stats["op_type"])
    assert abs(r.compute_us - _stt(RANKS[0])["Computing"]) < 1.0


def test_kernel_details_missing_a_column_names_the_file_and_column(tmp_path, shared_fixtures):
    dst = _copy(tmp_path)
    kd = dst / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    pd.read_csv(kd, dtype=str).drop(columns=["Duration(us)"]).to_csv(kd, index=False)
    with pytest.raises(InputError, match=r"kernel_details\.csv: missing column 'Duration\(us\)'"):
        read_ascend(dst)


def test_rank_comes_from_profiler_info(tmp_path, shared_fixtures):
    dst = _copy(tmp_path, 1)
    renamed = dst.rename(tmp_path / "host_123_20260101_ascend_pt")
    assert read_ascend(renamed).rank == 1


@pytest.mark.parametrize("rank", [0, 1])
def test_without_kernel_details_trace_view_lanes_give_the_same_numbers(tmp_path, rank, shared_fixtures):
    """Ascend Hardware compute tasks + HCCL op lanes of trace_view.json reproduce step_trace_time too."""
    dst = _copy(tmp_path, rank)
    (dst / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").unlink()
    res = analyze([dst], workers=1)
    r, ref = res.ranks[0], _stt(RANKS[rank])
    assert any("no ASCEND_PROFILER_OUTPUT/kernel_details.csv" in w for w in res.warnings)
    assert r.step == 50 and r.collectives["all_reduce"]["count"] == 4
    assert abs(r.compute_us - ref["Computing"]) < 1.0
    assert abs(r.comm_us - ref["Communication"]) < 1.0
    assert abs(r.exposed_comm_us - ref["Communication(Not Overlapped)"]) < 1.0


def test_a_folder_with_neither_csv_nor_trace_view_is_an_error(tmp_path):
    (tmp_path / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    with pytest.raises(InputError, match="none of ASCEND_PROFILER_OUTPUT/kernel_details.csv"):
        read_ascend(tmp_path / "x_ascend_pt")


def test_a_runtime_sync_nested_in_its_ascendcl_call_is_one_sync(tmp_path, shared_fixtures):
    """Level2 traces record ``Runtime@StreamSynchronize`` inside each ``AscendCL@aclrtSynchronizeStream*``
    on the same thread (generated here from the Level1 trace): one user call, counted once, as
    api_statistic.csv counts it."""
    dst = _copy(tmp_path)
    tv = dst / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    events = orjson.loads(tv.read_bytes())
    outer = [
        e
        for e in events
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("AscendCL@aclrtSynchronizeStream")
    ]
    nested = [
        {**e, "name": "Runtime@StreamSynchronize", "ts": f"{float(e['ts']) + 0.5:.3f}", "dur": e["dur"] - 1}
        for e in outer
    ]
    tv.write_bytes(orjson.dumps(events + nested))
    api = pd.read_csv(RANKS[0] / "ASCEND_PROFILER_OUTPUT" / "api_statistic.csv")
    n_api = int(api.loc[api["API Name"].str.startswith("aclrtSynchronizeStream"), "Count"].sum())
    assert len(outer) == n_api > 0
    assert analyze([dst], workers=1).ranks[0].sync["stream_synchronize"] == n_api


def test_kernel_details_without_step_ids_take_the_host_step(tmp_path, shared_fixtures):
    dst = _copy(tmp_path)
    kd = dst / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    pd.read_csv(kd, dtype=str, keep_default_na=False).drop(columns=["Step Id"]).to_csv(kd, index=False)
    r = analyze([dst], workers=1).ranks[0]
    assert r.step == 50
    assert abs(r.exposed_comm_us - _stt(RANKS[0])["Communication(Not Overlapped)"]) < 1.0
