"""The Ascend cross-check names its real reference (analysis.db's StepTraceTime for a db export,
step_trace_time.csv for a text export) and, when it holds, the known cause of a communication
difference: an older profiler took communication as the union of HCCL's tasks, fsdpbench takes whole
HCCL operations. References: unions computed here in plain Python from the raw database tables."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from fsdpbench.analysis import analyze
from helpers import ASCEND_FIXTURES, ascend_output

DB2 = ASCEND_FIXTURES / "msinsight_pt_db_level2"
TEXT1 = ASCEND_FIXTURES / "msinsight_pt_text_level1"


def _union_us(intervals: list[tuple[int, int]]) -> float:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return (total + (0 if cur_e is None else cur_e - cur_s)) / 1000.0


def _raw_comm(run: Path, rank: int) -> tuple[float, float, float]:
    """(union of COMMUNICATION_OP, union of HCCL's TASK rows, analysis.db communication) in µs."""
    with sqlite3.connect(ascend_output(run, rank) / f"ascend_pytorch_profiler_{rank}.db") as con:
        ops = con.execute("SELECT startNs, endNs FROM COMMUNICATION_OP").fetchall()
        tasks = con.execute(
            "SELECT t.startNs, t.endNs FROM TASK t WHERE t.globalTaskId IN "
            "(SELECT globalTaskId FROM COMMUNICATION_TASK_INFO)"
        ).fetchall()
    with sqlite3.connect(ascend_output(run, rank) / "analysis.db") as con:
        theirs = con.execute("SELECT communication FROM StepTraceTime").fetchone()[0]
    return _union_us(ops), _union_us(tasks), float(theirs)


@pytest.fixture
def db_run(tmp_path, shared_fixtures):
    run = tmp_path / "run"
    shutil.copytree(DB2, run, ignore=shutil.ignore_patterns(".*"))
    return run


def test_todays_profiler_takes_whole_operations_as_fsdpbench_does(db_run):
    """The 2025 export: the profiler's communication is the union of whole HCCL operations (what
    fsdpbench reports), and differs from the union of HCCL's tasks, so the two definitions differ."""
    res = analyze([db_run], workers=1)
    for r in res.ranks:
        ops, tasks, theirs = _raw_comm(db_run, r.rank)
        assert abs(theirs - ops) < 0.001 and abs(r.comm_us - ops) < 0.001
        assert ops - tasks > 50.0
    assert not [w for w in res.warnings if "differs" in w]


def test_a_db_difference_names_analysis_db_and_the_task_level_cause(db_run):
    """An export whose StepTraceTime holds the task-level union (as the 2024 exports of Ascend/msinsight
    c1e639ee2 do): the warning names analysis.db StepTraceTime and the cause, with the union computed here."""
    tasks_us = {}
    for rank in (0, 1):
        _, tasks_us[rank], _ = _raw_comm(db_run, rank)
        with sqlite3.connect(ascend_output(db_run, rank) / "analysis.db") as con:
            con.execute("UPDATE StepTraceTime SET communication = ?", (tasks_us[rank],))
        con.close()
    res = analyze([db_run], workers=1)
    comm = [w for w in res.warnings if "comm_us" in w and "exposed" not in w]
    assert len(comm) == 2
    for rank, w in zip((0, 1), sorted(comm), strict=True):
        assert w.startswith(f"rank {rank} step ") and "analysis.db StepTraceTime" in w
        assert "step_trace_time.csv" not in w
        assert f"task-level one ({tasks_us[rank]:.3f})" in w and "whole HCCL operations" in w


def test_a_db_difference_of_unknown_cause_names_only_the_reference(db_run):
    for rank in (0, 1):
        with sqlite3.connect(ascend_output(db_run, rank) / "analysis.db") as con:
            con.execute("UPDATE StepTraceTime SET computing = computing + 500")
        con.close()
    res = analyze([db_run], workers=1)
    warned = [w for w in res.warnings if "differs" in w]
    assert len(warned) == 2 and all("compute_us" in w and "analysis.db StepTraceTime" in w for w in warned)
    assert not [w for w in warned if "task-level" in w]


def test_a_text_difference_names_step_trace_time_csv(tmp_path, shared_fixtures):
    run = tmp_path / "run"
    shutil.copytree(TEXT1, run, ignore=shutil.ignore_patterns(".*"))
    csv = ascend_output(run, 0) / "step_trace_time.csv"
    df = pd.read_csv(csv)
    df["Computing"] = df["Computing"] + 500
    df.to_csv(csv, index=False)
    res = analyze([run], workers=1)
    warned = [w for w in res.warnings if "differs" in w]
    assert warned and all("step_trace_time.csv" in w and w.startswith("rank 0 ") for w in warned)
