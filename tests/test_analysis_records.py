"""The Analysis JSON as typed records (analysis/output/result_records.py): every fixture's analysis decodes and
encodes to the same bytes, as ``analyze --json`` and as a run folder's analysis.json (with the collective
events), through the records alone and through the in-memory objects built from them; ``top`` cuts every
window's ops; the file is the records' fields in order. References: the bytes as written and the file as
``json`` reads it."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from fsdpbench.analysis import analyze
from fsdpbench.analysis.output.result import (
    SCALARS,
    Analysis,
    decode_analysis,
    decode_analysis_file,
    encode_analysis,
    encode_analysis_file,
)
from fsdpbench.analysis.output.result_records import RankRecord, StepRecord
from fsdpbench.trace import cache as table_cache
from helpers import REPO, SHARED

FIXTURES = [
    REPO / "tests/fixtures/traces/gloo_min.json",
    REPO / "tests/fixtures/ascend_level0",
    REPO / "tests/fixtures/ascend_server_2rank",
    REPO / "tests/fixtures/hta_ddp_step",
    SHARED / "fixtures/kineto/trace_diff_test",
    SHARED / "fixtures/kineto/ns_resolution_trace",
    SHARED / "fixtures/ascend/msinsight_pt_text_level1",
]


@pytest.fixture(scope="module", params=FIXTURES, ids=lambda p: p.name)
def analysed(request) -> Analysis:
    if not request.param.exists():
        pytest.skip(f"{request.param} is not here")
    with pytest.MonkeyPatch.context() as mp:  # module scope: before conftest's autouse no-cache fixture
        mp.setenv(table_cache.NO_CACHE_ENV, "1")  # no cache written beside the repo's fixtures
        return analyze([request.param], workers=1)


def test_an_analysis_json_decodes_and_encodes_to_the_same_bytes(analysed):
    blob = encode_analysis(analysed)
    assert analysed.ranks and json.loads(blob)["ranks"]
    again = decode_analysis(blob, "fixture.json")
    assert encode_analysis(again) == blob
    assert again.record().to_dict() == json.loads(blob)


def test_a_run_folders_analysis_json_reads_back_to_the_same_bytes_with_its_events(analysed, tmp_path):
    path = tmp_path / "analysis.json"
    blob = encode_analysis_file({"torch": analysed})
    path.write_bytes(blob)
    raw = json.loads(blob)
    assert all(isinstance(r["collective_events"]["type"], list) for r in raw["torch"]["ranks"])
    records = decode_analysis_file(path)
    assert encode_analysis_file(records) == blob  # the records as read
    objects = {arm: Analysis.from_record(rec) for arm, rec in records.items()}
    assert encode_analysis_file(objects) == blob  # the objects built from them, events included
    # the events' fit columns are what the file holds, column for column
    for rank, stored in zip(objects["torch"].ranks, raw["torch"]["ranks"], strict=True):
        columns = rank.fit_event_columns()
        assert {c: columns[c] for c in stored["collective_events"]} == stored["collective_events"]


def test_top_cuts_every_windows_ops_to_the_first_rows(tmp_path):
    trace = REPO / "tests/fixtures/traces/gloo_min.json"
    full = json.loads(encode_analysis(analyze([trace], workers=1)))
    cut = json.loads(encode_analysis(analyze([trace], workers=1, top=1)))
    windows = [(r, c) for r, c in zip(full["ranks"], cut["ranks"], strict=True)]
    windows += [(s, t) for r, c in windows for s, t in zip(r["steps"], c["steps"], strict=True)]
    assert max(len(r["ops"]) for r, _ in windows) > 1  # the cut cuts something
    for whole, part in windows:
        assert part["ops"] == whole["ops"][:1]
        assert {k: v for k, v in part.items() if k not in ("ops", "steps")} == {
            k: v for k, v in whole.items() if k not in ("ops", "steps")
        }


def test_the_json_keys_are_the_records_fields_in_order(analysed):
    """A metric is declared once, in the record: the file's keys are the fields, rank first."""
    raw = json.loads(encode_analysis(analysed))
    rank = raw["ranks"][0]
    assert list(rank) == [f.name for f in fields(RankRecord)]
    assert list(rank)[0] == "rank" and list(rank["steps"][0]) == [f.name for f in fields(StepRecord)]
    assert (
        list(raw["mean"])
        == list(SCALARS)
        == [f.name for f in fields(StepRecord) if f.name not in ("step", "collectives", "ops", "sync")]
    )


def test_a_file_left_out_metric_reads_as_none_and_unknown_keys_are_dropped(tmp_path):
    path = Path(tmp_path) / "a.json"
    rank = {"rank": 3, "step_time_us": 5.0, "collectives": {}, "ops": [], "sync": {}, "from_the_future": 1}
    path.write_text(json.dumps({"schema_version": 1, "ranks": [rank]}))
    got = decode_analysis(path)
    assert (got.ranks[0].rank, got.ranks[0].step_time_us, got.ranks[0].compute_us) == (3, 5.0, None)
    assert "from_the_future" not in got.record().to_dict()["ranks"][0]
