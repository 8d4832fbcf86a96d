"""Memory timelines from the profilers' own records: the readers against the raw files read here with
the csv and sqlite3 modules, and the exports' own cross-figures (operator_memory's totals at each
allocation vs memory_record's allocator totals)."""

from __future__ import annotations

import csv
import sqlite3

import numpy as np
import pytest
import torch

from fsdpbench.errors import InputError
from fsdpbench.trace import memory as tm
from helpers import ASCEND_FIXTURES, ascend_output

TEXT = ASCEND_FIXTURES / "msinsight_pt_text_level1"
DB = ASCEND_FIXTURES / "msinsight_pt_db_level2"


@pytest.mark.parametrize("rank", [0, 1])
def test_memory_record_csv_peak_is_the_raw_pta_maximum_and_operator_memory_agrees(shared_fixtures, rank):
    out = ascend_output(TEXT, rank)
    with open(out / "memory_record.csv", newline="") as f:
        pta = [r for r in csv.DictReader(f) if r["Component"] == "PTA"]
    raw_peak = max(float(r["Total Allocated(MB)"]) for r in pta)
    timeline = tm.ascend_memory_record(out)
    assert timeline.allocated.size == len(pta)
    assert timeline.peak()[1] == round(raw_peak * 2**20)
    assert np.all(np.diff(timeline.ts_us) >= 0)
    ops = tm.ascend_operator_memory(out)
    with open(out / "operator_memory.csv", newline="") as f:
        raw_ops = list(csv.DictReader(f))
    assert len(ops) == len(raw_ops)
    assert ops["size_bytes"].iloc[0] == round(float(raw_ops[0]["Size(KB)"]) * 1024)
    # the profiler's own figures: the allocator total at the largest allocation is memory_record's peak
    assert ops["alloc_total_allocated"].max() == timeline.peak()[1]
    modules = tm.ascend_module_memory(out)
    assert set(modules["component"]) >= {"SLOG"} and (modules["reserved_bytes"] >= 0).all()


@pytest.mark.parametrize("rank", [0, 1])
def test_db_tables_read_like_the_csvs(shared_fixtures, rank):
    db = ascend_output(DB, rank) / f"ascend_pytorch_profiler_{rank}.db"
    con = sqlite3.connect(db)
    raw = con.execute(
        "SELECT max(m.totalAllocated), count(*) FROM MEMORY_RECORD m JOIN STRING_IDS s ON m.component = s.id "
        "WHERE s.value = 'PTA'"
    ).fetchone()
    n_ops = con.execute("SELECT count(*) FROM OP_MEMORY").fetchone()[0]
    n_mod = con.execute("SELECT count(*) FROM NPU_MODULE_MEM").fetchone()[0]
    con.close()
    timeline, ops, modules = tm.ascend_db_memory(db)
    assert (timeline.peak()[1], timeline.allocated.size) == raw
    assert (len(ops), len(modules)) == (n_ops, n_mod)
    assert ops["alloc_total_allocated"].max() == raw[0]
    assert ops["name"].str.startswith("aten::").any()  # names resolved through STRING_IDS
    assert timeline.device == f"NPU:{rank}"


def test_cpu_kineto_timeline_is_live_bytes_plus_the_running_sum(tmp_path):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        a = torch.ones(2**20)
        b = torch.ones(2**18)
        del a, b
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    import json

    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    timeline = tm.kineto_timeline(events, live_at_start=1000)
    assert timeline.absolute
    assert timeline.peak()[1] - 1000 >= 5 * 2**20
    assert timeline.allocated[-1] - 1000 <= 2**12  # both freed
    device = tm.kineto_timeline(
        [
            {"name": "[memory]", "ts": 2, "args": {"Device Type": 1, "Bytes": -5, "Total Allocated": 95}},
            {"name": "[memory]", "ts": 1, "args": {"Device Type": 1, "Bytes": 100, "Total Allocated": 100}},
        ],
        device_type=1,
    )
    assert list(device.allocated) == [100, 95] and device.peak() == (1.0, 100)


def test_bad_memory_exports_name_the_file(tmp_path):
    (tmp_path / "memory_record.csv").write_text("Component,Timestamp(us)\nPTA,1\n")
    with pytest.raises(InputError, match="memory_record.csv: no column"):
        tm.ascend_memory_record(tmp_path)
    (tmp_path / "memory_record.csv").write_text(
        "Component,Timestamp(us),Total Allocated(MB),Total Reserved(MB)\nGE,1,2,3\n"
    )
    with pytest.raises(InputError, match="no PTA rows"):
        tm.ascend_memory_record(tmp_path)
    db = tmp_path / "x.db"
    sqlite3.connect(db).execute("CREATE TABLE TASK (a)").connection.commit()
    with pytest.raises(InputError, match="no MEMORY_RECORD"):
        tm.ascend_db_memory(db)
    with pytest.raises(InputError, match="no allocated-memory records"):
        tm.kineto_timeline([]).peak()
