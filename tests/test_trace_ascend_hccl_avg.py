"""torch_npu has no HCCL AVG: it reduces with SUM and divides on the HCCL stream afterwards
(ProcessGroupHCCL.cpp). Divide kernels on an HCCL stream are labelled with the collective they
complete; divides on compute streams (the real fixtures' two DDP RealDivs) stay plain.

The positive cases are generated from the real Level1 text and Level2 db fixtures by moving one
RealDiv onto the HCCL stream (stream 4 there: the ``stream id`` of HCCL's task lanes in
trace_view.json, the streamId of COMMUNICATION_TASK_INFO's tasks in the db) right after an all-reduce.
"""

from __future__ import annotations

import shutil
import sqlite3
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest

from fsdpbench.analysis import analyze
from fsdpbench.analysis.findings import HCCL_AVG_RE
from fsdpbench.trace.ascend import read_ascend
from helpers import ASCEND_FIXTURES

TEXT = ASCEND_FIXTURES / "msinsight_pt_text_level1" / "rank0_ascend_pt"
DB = ASCEND_FIXTURES / "msinsight_pt_db_level2" / "rank0_ascend_pt"
LABEL = "RealDiv (HCCL AVG of all_reduce)"
pytestmark = pytest.mark.usefixtures("shared_fixtures")  # every test reads the real exports


def _op_counts(folder: Path) -> dict[str, int]:
    stats = analyze([folder], workers=1).ranks[0].op_stats
    return dict(zip(stats["op_type"], stats["count"], strict=True))


@pytest.mark.parametrize("folder", [TEXT, DB], ids=["text", "db"])
def test_divides_on_compute_streams_are_not_hccl_avg(folder):
    ops = _op_counts(folder)
    assert ops["RealDiv"] == 2 and not any(HCCL_AVG_RE.match(op) for op in ops)


def test_text_realdiv_on_the_hccl_stream_is_the_avg_of_the_all_reduce_before_it(tmp_path):
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(
        TEXT, dst, ignore=shutil.ignore_patterns("operator_*", "memory_record.csv", "npu_module_mem.csv")
    )
    kd = dst / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    df = pd.read_csv(kd, dtype=str, keep_default_na=False)
    hccl = df[df["Accelerator Core"] == "HCCL"]
    first = hccl.index[0]
    end = Decimal(hccl.loc[first, "Start Time(us)"].strip()) + Decimal(
        hccl.loc[first, "Duration(us)"].strip()
    )
    div = df.index[df["Type"] == "RealDiv"][0]
    df.loc[div, ["Stream ID", "Start Time(us)"]] = ["4", f"{end + Decimal('1.5'):.3f}"]
    df.to_csv(kd, index=False)
    ops = _op_counts(dst)
    assert ops[LABEL] == 1 and ops["RealDiv"] == 1
    assert HCCL_AVG_RE.match(LABEL)["collective"] == "all_reduce"


def test_db_realdiv_on_the_hccl_stream_is_the_avg_of_the_all_reduce_before_it(tmp_path):
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(DB, dst)
    con = sqlite3.connect(dst / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db")
    (end,) = con.execute("SELECT endNs FROM COMMUNICATION_OP ORDER BY startNs LIMIT 1").fetchone()
    (task,) = con.execute(
        "SELECT c.globalTaskId FROM COMPUTE_TASK_INFO c JOIN STRING_IDS s ON s.id = c.opType "
        "WHERE s.value = 'RealDiv' LIMIT 1"
    ).fetchone()
    con.execute(
        "UPDATE TASK SET streamId = 4, startNs = ?, endNs = ? WHERE globalTaskId = ?",
        (end + 1500, end + 3000, task),
    )
    con.commit()
    con.close()
    t = read_ascend(dst)
    assert (t.events["op_type"] == LABEL).sum() == 1
    assert _op_counts(dst)[LABEL] == 1


def test_db_divides_are_matched_to_the_collective_on_their_own_stream(tmp_path):
    """HSDP-like: each process group has its own HCCL stream. The second collective becomes a
    reduce-scatter on stream 5; a divide on stream 4 right after it still belongs to stream 4's
    all-reduce, and one on stream 5 to the reduce-scatter."""
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(DB, dst)
    con = sqlite3.connect(dst / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db")
    (new_id,) = con.execute("SELECT max(id) + 1 FROM STRING_IDS").fetchone()
    con.execute("INSERT INTO STRING_IDS (id, value) VALUES (?, 'hcom_reduceScatter__865_1_1')", (new_id,))
    con.execute("UPDATE COMMUNICATION_OP SET opName = ? WHERE opId = 2", (new_id,))
    con.execute(
        "UPDATE TASK SET streamId = 5 WHERE globalTaskId IN "
        "(SELECT globalTaskId FROM COMMUNICATION_TASK_INFO WHERE opId = 2)"
    )
    (end,) = con.execute("SELECT endNs FROM COMMUNICATION_OP WHERE opId = 2").fetchone()
    divs = [
        t
        for (t,) in con.execute(
            "SELECT c.globalTaskId FROM COMPUTE_TASK_INFO c JOIN STRING_IDS s ON s.id = c.opType WHERE s.value = 'RealDiv'"
        )
    ]
    assert len(divs) == 2
    for task, stream in zip(divs, (4, 5), strict=True):
        con.execute(
            "UPDATE TASK SET streamId = ?, startNs = ?, endNs = ? WHERE globalTaskId = ?",
            (stream, end + 1500, end + 3000, task),
        )
    con.commit()
    con.close()
    ops = _op_counts(dst)
    assert ops[LABEL] == 1 and ops["RealDiv (HCCL AVG of reduce_scatter)"] == 1 and "RealDiv" not in ops
