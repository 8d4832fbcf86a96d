"""The typed seams between the analysis and the report: diff.json and analysis.json read back into
``DiffResult`` / ``Analysis`` objects that write the same JSON again (the reference is the file as the
test itself reads it with ``json``), and the Ascend database reader's ``AscendDbTables`` against the
sqlite tables queried here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest

from fsdpbench.analysis import Analysis, analyze
from fsdpbench.analysis.diff import DiffResult, diff_analyses
from fsdpbench.errors import InputError
from fsdpbench.trace.ascend_db import AscendDbTables, read_tables
from fsdpbench.trace.synthetic import make_trace, write_trace
from helpers import ASCEND_FIXTURES, run_cli, sql_rows

DB2 = ASCEND_FIXTURES / "msinsight_pt_db_level2"


def _synthetic(folder: Path, seed: int) -> Analysis:
    folder.mkdir()
    for rank in range(2):
        write_trace(
            folder / f"rank{rank}.json.gz",
            make_trace(rank=rank, world_size=2, device_events=300, steps=2, seed=seed + rank),
        )
    return analyze([folder], workers=1)


def _check_diff(raw: dict) -> None:
    """``raw`` (a Diff JSON object as json read it) typed and written again, and a few typed fields
    against the raw JSON."""
    typed = DiffResult.from_dict(raw)
    assert typed.to_dict() == raw
    assert (typed.base, typed.test) == (raw["base"], raw["test"])
    assert [f.id for f in typed.findings] == [f["id"] for f in raw["findings"]]
    mean = raw["side_by_side"]["mean"]
    assert typed.side_by_side.mean.base.overlap_ratio == mean["base"]["overlap_ratio"]
    assert typed.side_by_side.mean.test.step_time_us == mean["test"]["step_time_us"]
    assert [r.type for r in typed.collectives] == [r["type"] for r in raw["collectives"]]
    assert [r.op_type for r in typed.ops] == [r["op_type"] for r in raw["ops"]]


def _check_analysis(raw: dict, fit_events: bool = False) -> None:
    typed = Analysis.from_dict(raw)
    assert typed.to_dict(fit_events=fit_events) == raw
    assert [r.rank for r in typed.ranks] == [r["rank"] for r in raw["ranks"]]
    assert [r.overlap_ratio for r in typed.ranks] == [r["overlap_ratio"] for r in raw["ranks"]]
    assert [r.ops() for r in typed.ranks] == [r["ops"] for r in raw["ranks"]]


def test_a_synthetic_diff_and_its_analyses_read_back_through_json_unchanged(tmp_path):
    base, test = _synthetic(tmp_path / "a", 0), _synthetic(tmp_path / "b", 7)
    diff = diff_analyses(base, test, base_label="torch", test_label="hyper")
    raw = json.loads(orjson.dumps(diff.to_dict()))  # as diff.json holds it
    assert raw["findings"] and raw["fits"]
    _check_diff(raw)
    for a in (base, test):
        _check_analysis(json.loads(orjson.dumps(a.to_dict())))


def test_a_partial_diff_reads_with_the_parts_it_leaves_out_empty():
    """A report shows what a diff holds: parts it leaves out are empty, not an error."""
    typed = DiffResult.from_dict(
        {
            "schema_version": 1,
            "base": "a",
            "test": "b",
            "ops": [{"op_type": "Slice", "base_us": 2.0, "test_us": 5.0}],
        }
    )
    assert (typed.base, typed.test, typed.findings, typed.collectives, typed.fits) == ("a", "b", [], [], {})
    assert typed.side_by_side.mean.base.step_time_us is None
    assert [(o.op_type, o.delta_us) for o in typed.ops] == [("Slice", 3.0)]


def test_a_diff_of_another_schema_or_shape_is_one_clear_error():
    with pytest.raises(InputError, match=r"^diff\.json: \$\.schema_version is 2: this fsdpbench reads 1;"):
        DiffResult.from_dict({"schema_version": 2}, "diff.json")
    with pytest.raises(
        InputError, match=r"^diff\.json: \$\.collectives\[0\]: object missing required field `type`$"
    ):
        DiffResult.from_dict(
            {"schema_version": 1, "base": "a", "test": "b", "collectives": [{}]}, "diff.json"
        )
    with pytest.raises(InputError, match=r"^diff\.json: \$: expected `object`, got `array`$"):
        DiffResult.from_dict([], "diff.json")
    with pytest.raises(ValueError, match="schema_version"):
        Analysis.from_dict({"ranks": []})


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_the_diff_and_analysis_json_of_a_real_profiled_run_read_back_unchanged(profiled_ab_run, tmp_path):
    run = tmp_path / profiled_ab_run.name
    shutil.copytree(profiled_ab_run, run)  # the fixture is shared: write into a copy
    proc = run_cli("diff", str(run), "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    payload = json.loads((run / "diff.json").read_text())
    diffs = payload if isinstance(payload, list) else [payload]
    assert diffs
    for raw in diffs:
        _check_diff(raw)
    analysis = json.loads((run / "analysis.json").read_text())
    assert len(analysis) == 2  # one Analysis per arm
    for raw in analysis.values():
        assert all(r["collective_events"]["type"] for r in raw["ranks"])  # kept for the α–β fits
        _check_analysis(raw, fit_events=True)


@pytest.mark.parametrize("rank", [0, 1])
def test_read_tables_gives_typed_tables_that_match_the_database(shared_fixtures, rank):
    db = DB2 / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / f"ascend_pytorch_profiler_{rank}.db"
    tables = read_tables(db)
    assert isinstance(tables, AscendDbTables)
    assert tables.task_rows == sql_rows(db, "SELECT count(*) FROM TASK")[0][0]
    assert tables.cann_api_rows == sql_rows(db, "SELECT count(*) FROM CANN_API")[0][0]
    assert len(tables.comm) == sql_rows(db, "SELECT count(*) FROM COMMUNICATION_OP")[0][0]
    (hccl_tasks,) = sql_rows(
        db,
        "SELECT count(*) FROM TASK WHERE globalTaskId IN (SELECT globalTaskId FROM COMMUNICATION_TASK_INFO)",
    )[0]
    assert len(tables.comm_tasks) == hccl_tasks
    streams = sql_rows(
        db,
        "SELECT DISTINCT streamId FROM TASK WHERE globalTaskId IN "
        "(SELECT globalTaskId FROM COMMUNICATION_TASK_INFO)",
    )
    assert tables.hccl_streams == {f"Stream {s}" for (s,) in streams}
    assert tables.rank in (None, rank)
    assert list(tables.steps.columns) == ["step", "start_ns", "end_ns"]
