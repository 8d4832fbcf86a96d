"""The reader of torch_npu's database export (``export_type=db``) against the profiler's own
``analysis.db`` (StepTraceTime, CommAnalyzerTime), read here with sqlite3, on the real 2-rank
Level2 fixture; and its bad-input errors."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from fsdpbench.analysis import analyze
from fsdpbench.analysis.rank.overlap import breakdown
from fsdpbench.errors import InputError
from fsdpbench.trace.ascend import read_ascend
from helpers import ASCEND_FIXTURES, sql_rows

DB2 = ASCEND_FIXTURES / "msinsight_pt_db_level2"
RANKS = [DB2 / "rank0_ascend_pt", DB2 / "rank1_ascend_pt"]


def _step_trace_time(rank: int) -> dict[str, float]:
    (row,) = sql_rows(
        RANKS[rank] / "ASCEND_PROFILER_OUTPUT" / "analysis.db",
        "SELECT step, computing, communication, overlapped, communication_not_overlapped, free FROM StepTraceTime",
    )
    return dict(
        zip(["step", "computing", "communication", "overlapped", "not_overlapped", "free"], row, strict=True)
    )


@pytest.fixture(scope="module")
def db2(shared_fixtures):
    return analyze([DB2], workers=1)


@pytest.mark.parametrize("rank", [0, 1])
def test_db_export_matches_analysis_db_step_trace_time_within_1us(db2, rank):
    r, ref = db2.ranks[rank], _step_trace_time(rank)
    assert r.rank == rank and r.step == int(ref["step"]) == 50
    assert abs(r.compute_us - ref["computing"]) < 1.0
    assert abs(r.comm_us - ref["communication"]) < 1.0
    assert abs(r.overlapped_us - ref["overlapped"]) < 1.0
    assert abs(r.exposed_comm_us - ref["not_overlapped"]) < 1.0
    assert r.overlap_ratio == pytest.approx(ref["overlapped"] / ref["communication"], abs=1e-6)
    # the analysis.db cross-check found no difference either; the one warning: 2 of the group's 8 ranks
    assert [w for w in db2.warnings if not w.startswith("waits and stragglers cover 2 of 8 ranks")] == []


@pytest.mark.parametrize("rank", [0, 1])
def test_db_free_over_the_device_span_equals_analysis_db_free(rank, shared_fixtures):
    t = read_ascend(RANKS[rank])
    assert abs(breakdown(t.events).free_ns / 1000 - _step_trace_time(rank)["free"]) < 1.0


@pytest.mark.parametrize("rank", [0, 1])
def test_db_collectives_equal_comm_analyzer_time(db2, rank):
    ops = sql_rows(
        RANKS[rank] / "ASCEND_PROFILER_OUTPUT" / "analysis.db", "SELECT hccl_op_name FROM CommAnalyzerTime"
    )
    assert len(ops) == 4 and all(name.startswith("hcom_allReduce_") for (name,) in ops)
    coll = db2.ranks[rank].collectives
    assert list(coll) == ["all_reduce"] and coll["all_reduce"]["count"] == len(ops)
    assert coll["all_reduce"]["bytes"] > 0


def test_db_op_stats_equal_a_sql_group_by_of_the_compute_tasks(db2):
    db = RANKS[0] / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    ref = dict(
        (op, (n, total / 1000))
        for op, n, total in sql_rows(
            db,
            "SELECT s.value, count(*), sum(t.endNs - t.startNs) FROM TASK t JOIN COMPUTE_TASK_INFO c "
            "USING (globalTaskId) JOIN STRING_IDS s ON s.id = c.opType GROUP BY s.value",
        )
    )
    ours = db2.ranks[0].op_stats.set_index("op_type")
    assert len(ref) == 33 and sorted(ours.index) == sorted(ref)
    for op, (n, total_us) in ref.items():
        assert ours.loc[op, "count"] == n and abs(ours.loc[op, "total_us"] - total_us) < 0.001


def test_db_sync_counts_one_per_host_call_not_per_nested_runtime_call(db2):
    """Level2 records aclrtSynchronizeStreamWithTimeout and the Runtime StreamSynchronize inside it:
    7 user calls in step 50, not 14."""
    db = RANKS[0] / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    (window,) = sql_rows(db, "SELECT startNs, endNs FROM STEP_TIME WHERE id = 50")
    acl, runtime = (
        sql_rows(
            db,
            f"SELECT count(*) FROM CANN_API a JOIN STRING_IDS s ON s.id = a.name WHERE s.value = '{n}' "
            f"AND a.startNs >= {window[0]} AND a.startNs < {window[1]}",
        )[0][0]
        for n in ("aclrtSynchronizeStreamWithTimeout", "StreamSynchronize")
    )
    assert acl == runtime == 7
    sync = db2.ranks[0].sync
    assert sync["stream_synchronize"] == acl
    assert sync["launch_ffts"] == 4 and sync["kernel_launch"] > 0


def test_db_folder_is_found_under_a_parent_and_ranks_come_from_profiler_info(tmp_path, shared_fixtures):
    dst = tmp_path / "run"
    shutil.copytree(DB2, dst)
    (dst / "rank1_ascend_pt").rename(dst / "host_99_20260101_ascend_pt")
    res = analyze([dst], workers=1)
    assert [r.rank for r in res.ranks] == [0, 1]


def _one_rank(tmp_path: Path) -> Path:
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(RANKS[0], dst)
    return dst


def test_a_corrupt_database_names_the_file(tmp_path, shared_fixtures):
    dst = _one_rank(tmp_path)
    (dst / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db").write_bytes(b"not a database" * 100)
    with pytest.raises(InputError, match=r"ascend_pytorch_profiler_0\.db: not a readable sqlite database"):
        read_ascend(dst)


def test_a_database_without_task_table_says_what_it_expected(tmp_path, shared_fixtures):
    dst = _one_rank(tmp_path)
    db = dst / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    con = sqlite3.connect(db)
    con.execute("DROP TABLE TASK")
    con.commit()
    con.close()
    with pytest.raises(
        InputError, match=r"ascend_pytorch_profiler_0\.db: no table TASK; is this a torch_npu export_type=db"
    ):
        read_ascend(dst)


def test_a_folder_with_no_export_at_all_names_all_three_files(tmp_path):
    (tmp_path / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    with pytest.raises(
        InputError, match=r"kernel_details\.csv, trace_view\.json or ascend_pytorch_profiler_<rank>\.db"
    ):
        read_ascend(tmp_path / "x_ascend_pt")


def test_the_database_file_itself_can_be_passed(db2, shared_fixtures):
    db = RANKS[1] / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_1.db"
    r = analyze([db], workers=1).ranks[0]
    assert r.rank == 1 and r.compute_us == db2.ranks[1].compute_us


def test_a_database_outside_its_output_folder_asks_for_the_rank_folder(tmp_path, shared_fixtures):
    db = tmp_path / "ascend_pytorch_profiler_0.db"
    shutil.copy(RANKS[0] / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db", db)
    with pytest.raises(
        InputError, match=r"outside its ASCEND_PROFILER_OUTPUT/ folder; pass the \*_ascend_pt folder"
    ):
        analyze([db], workers=1)
