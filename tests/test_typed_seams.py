"""The typed seams between the analysis and the report: diff.json and analysis.json read back into
``DiffResult`` / ``Analysis`` objects that write the same JSON again (the reference is the file as the
test itself reads it with ``json``), and the Ascend database reader's ``AscendDbTables`` against the
sqlite tables queried here."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import orjson
import pytest

from fsdpbench.analysis import Analysis, analyze
from fsdpbench.analysis.compare.diff import DiffResult, diff_analyses
from fsdpbench.analysis.output.result import convert_analysis
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
    typed = convert_analysis(raw, "analysis")
    assert typed.record(fit_events=fit_events).to_dict() == raw
    assert [r.rank for r in typed.ranks] == [r["rank"] for r in raw["ranks"]]
    assert [r.overlap_ratio for r in typed.ranks] == [r["overlap_ratio"] for r in raw["ranks"]]
    assert [r.ops for r in typed.ranks] == [r["ops"] for r in raw["ranks"]]


def test_a_synthetic_diff_and_its_analyses_read_back_through_json_unchanged(tmp_path):
    base, test = _synthetic(tmp_path / "a", 0), _synthetic(tmp_path / "b", 7)
    diff = diff_analyses(base, test, base_label="torch", test_label="hyper")
    raw = json.loads(orjson.dumps(diff.to_dict()))  # as diff.json holds it
    assert raw["findings"] and raw["fits"]
    _check_diff(raw)
    for a in (base, test):
        _check_analysis(json.loads(orjson.dumps(a.record().to_dict())))


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
    with pytest.raises(InputError, match=r"^x.json: \$: object missing required field `schema_version`$"):
        convert_analysis({"ranks": []}, "x.json")
    with pytest.raises(InputError, match=r"^x.json: \$.schema_version is 2: this fsdpbench reads 1; analyze"):
        convert_analysis({"schema_version": 2, "ranks": []}, "x.json")


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


def _set(arm: str, rank: int, key: str, value) -> object:
    def change(a: dict) -> bytes:
        a[arm]["ranks"][rank][key] = value
        return orjson.dumps(a)

    return change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            _set("hyper", 1, "step_time_us", "slow"),
            r"analysis.json: \$.hyper.ranks\[1\].step_time_us: expected `float`, got `str`",
        ),
        (
            lambda a: orjson.dumps({**a, "torch": {k: v for k, v in a["torch"].items() if k != "ranks"}}),
            r"analysis.json: \$.torch: object missing required field `ranks`",
        ),
        (lambda a: orjson.dumps(a)[:-9], r"analysis.json: .*(JSON|json)"),
    ],
    ids=["wrong type", "missing key", "not JSON"],
)
@pytest.mark.parametrize("command", ["diff", "report"])
def test_a_malformed_analysis_json_is_one_line_naming_the_file_and_field(tmp_path, change, message, command):
    """Through ``diff RUN_DIR`` and ``report``: exit 2, one line naming the file and the field, no traceback
    (before, a wrong type went through the diff unnoticed and a torn file was silently analysed again)."""
    from helpers import hand_built_run

    run = hand_built_run(tmp_path, ["torch", "hyper"])
    (run / "analysis.json").write_bytes(change(orjson.loads((run / "analysis.json").read_bytes())))
    proc = run_cli(command, str(run), *(["--quiet"] if command == "diff" else []))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert re.search(message, proc.stderr), proc.stderr
    assert "remove it: fsdpbench analyzes the profiles again" in proc.stderr


def test_an_analysis_json_file_given_to_diff_names_its_field(tmp_path):
    from helpers import synthetic_analysis

    good, bad = synthetic_analysis(seed=0), synthetic_analysis(seed=1)
    for a in (good, bad):
        for r in a["ranks"]:
            r.pop("collective_events")
    bad["ranks"][1]["compute_us"] = "fast"
    (tmp_path / "a.json").write_bytes(orjson.dumps(good))
    (tmp_path / "b.json").write_bytes(orjson.dumps(bad))
    proc = run_cli("diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--quiet")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert re.search(r"b.json: \$.ranks\[1\].compute_us: expected `float \| null`, got `str`", proc.stderr)
