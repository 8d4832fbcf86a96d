"""Sync and launch counts of an Ascend export without the host runtime layer (no CANN API events, as a
Level0 profile writes): "not recorded" (null), never 0, whatever files exist. References: the
trace_view.json / database the test itself writes or edits, and the counts it reads from them."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import orjson
import pytest

from fsdpbench.analysis import analyze
from fsdpbench.trace.table import TASKS
from helpers import ASCEND_FIXTURES

LEVEL0 = Path(__file__).parent / "fixtures" / "ascend_level0"
HOST_KINDS = [t for t in TASKS if t != "barrier"]


def _meta(pid: int, name: str, tid: int, thread: str) -> list[dict]:
    return [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}},
    ]


def _level0_trace_view(with_cann: bool) -> list[dict]:
    """The process layout of the real Level0 trace_view.json (Ascend/msinsight 4e16fca1f,
    test/data/pytorch/text/level0/rank0_ascend_pt: Python, Ascend Hardware, HCCL, Overlap Analysis and
    counters, no CANN): the step, one host op, one AI_CORE task, one BARRIER task."""
    ev = _meta(1, "Python", 1, "Thread 1") + _meta(2, "Ascend Hardware", 2, "Stream 2")
    ev += [
        {"ph": "X", "name": "ProfilerStep#50", "pid": 1, "tid": 1, "ts": "990.0", "dur": 50.0, "args": {}},
        {"ph": "X", "name": "aten::add", "pid": 1, "tid": 1, "ts": "1000.0", "dur": 5.0, "args": {}},
        {
            "ph": "X",
            "name": "Add1",
            "pid": 2,
            "tid": 2,
            "ts": "1010.0",
            "dur": 2.0,
            "args": {"Task Type": "AI_CORE"},
        },
        {
            "ph": "X",
            "name": "BARRIER",
            "pid": 2,
            "tid": 2,
            "ts": "1020.0",
            "dur": 1.0,
            "args": {"Task Type": "BARRIER"},
        },
    ]
    if with_cann:
        ev += _meta(3, "CANN", 3, "Thread 1")
        ev.append(
            {"ph": "X", "name": "Node@launch", "pid": 3, "tid": 3, "ts": "1001.0", "dur": 1.0, "args": {}}
        )
    return ev


@pytest.mark.parametrize("with_cann", [False, True])
def test_level0_trace_view_without_cann_events_reads_not_recorded(tmp_path, with_cann):
    run = tmp_path / "run"
    shutil.copytree(LEVEL0, run, ignore=shutil.ignore_patterns("PROVENANCE.md", ".*"))
    events = _level0_trace_view(with_cann)
    for rank in (0, 1):
        (run / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_bytes(
            orjson.dumps(events)
        )
    barriers = sum(e.get("name") == "BARRIER" and e["ph"] == "X" for e in events)
    launches = sum(e.get("name") == "Node@launch" for e in events)
    res = analyze([run], workers=1)
    for r in res.ranks:
        assert r.sync["barrier"] == barriers == 1  # the device task list is there
        if with_cann:
            assert r.sync["kernel_launch"] == launches == 1
            assert all(isinstance(r.sync[k], int) for k in HOST_KINDS)
        else:
            assert all(r.sync[k] is None for k in HOST_KINDS)
            assert all(s.sync[k] is None for s in r.steps for k in HOST_KINDS)
    warned = [w for w in res.warnings if "no host runtime layer" in w]
    assert len(warned) == (0 if with_cann else 2)


def test_db_export_without_cann_api_reads_not_recorded(tmp_path, shared_fixtures):
    run = tmp_path / "run"
    shutil.copytree(ASCEND_FIXTURES / "msinsight_pt_db_level2", run, ignore=shutil.ignore_patterns(".*"))
    barriers = {}
    for rank in (0, 1):
        db = run / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / f"ascend_pytorch_profiler_{rank}.db"
        with sqlite3.connect(db) as con:
            assert con.execute("SELECT count(*) FROM CANN_API").fetchone()[0] > 0
            con.execute("DELETE FROM CANN_API")
            barriers[rank] = con.execute(
                "SELECT count(*) FROM TASK t JOIN STRING_IDS s ON t.taskType = s.id WHERE s.value = 'BARRIER'"
            ).fetchone()[0]
        con.close()
    res = analyze([run], workers=1)
    for r in res.ranks:
        assert r.sync["barrier"] == barriers[r.rank]
        assert all(r.sync[k] is None for k in HOST_KINDS)
    assert sum("no host runtime layer" in w for w in res.warnings) == 2
