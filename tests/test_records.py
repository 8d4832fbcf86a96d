"""Records that read and write themselves (``fsdpbench.records``): a malformed file names the file and the
field, and what was written reads back and writes again byte for byte (expected texts written by hand here,
the bytes compared against the file itself)."""

from __future__ import annotations

import json

import orjson
import pytest

from fsdpbench import records
from fsdpbench.analysis.diff import DiffResult
from fsdpbench.errors import InputError
from fsdpbench.results.summary import Summary

SUMMARY_TEXT = """{
  "schema_version": 1,
  "arms": {
    "torch": {
      "status": "ok",
      "rounds": [
        {
          "round": 0,
          "median_ms": 12.5,
          "n_steps": 2
        }
      ],
      "median_ms": 12.5,
      "p10_ms": 12.25,
      "p90_ms": 1e-7,
      "tokens_per_s_per_device": 40960.0,
      "tflops_per_device": null,
      "mfu": null,
      "peak_flops_per_device": null,
      "peak_mem_allocated_bytes": 1024,
      "peak_mem_reserved_bytes": 2048,
      "phases": {
        "forward": {
          "median_ms": 3.0
        }
      },
      "peak_rss_bytes": 123456789,
      "peak_rss_since": "process start"
    }
  },
  "comparisons": [
    {
      "base": "torch",
      "test": "hyper",
      "ratio": 1.25,
      "ci95": [
        1.2,
        1.3
      ],
      "rounds": [
        3,
        3
      ],
      "time_change_pct": 25.0,
      "significant": true,
      "rounds_needed_1pct": 4,
      "verdict": "hyper is 1.25\u00d7 slower",
      "phases": null,
      "memory": null
    }
  ],
  "verdict": "v",
  "parity": {
    "valid": true,
    "mode": "exact",
    "tolerance": 0.0,
    "steps_compared": 2,
    "max_abs_diff": 0.0,
    "max_rel_diff": 0.0,
    "reason": null
  },
  "missing": [],
  "profiles": {
    "torch": "profiles/torch"
  },
  "flops_per_token": 123.0,
  "peak_bf16_flops_per_device": null,
  "failures": [],
  "collected": null,
  "launch_time": null,
  "rounds_auto": null
}"""
"""A summary.json as the launcher writes it (orjson, 2-space indent): ints stay ints, ``memory_timeline``
absent while None, a float in orjson's exponent form (``1e-7``)."""


def test_a_summary_decodes_and_encodes_to_the_same_bytes(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text(SUMMARY_TEXT)
    summary = Summary.read(path)
    assert summary.arms["torch"].peak_rss_bytes == 123456789 and summary.comparisons[0].ci95 == (1.2, 1.3)
    assert records.encode(summary) == path.read_bytes()
    assert "memory_timeline" not in summary.to_dict()["arms"]["torch"]


def test_a_summary_field_of_the_wrong_type_names_the_file_and_the_field(tmp_path):
    data = json.loads(SUMMARY_TEXT)
    data["arms"]["torch"]["median_ms"] = "12.5"
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        Summary.read(path)
    assert str(err.value).startswith(f"{path}: $.arms[...].median_ms: expected `float | null`, got `str`; ")
    assert "--resume" in str(err.value) and "\n" not in str(err.value)


def test_a_summary_that_is_not_json_names_the_file(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text('{"schema_version": 1, "arms": ')
    with pytest.raises(InputError, match=rf"^{path}: not valid JSON"):
        Summary.read(path)


def test_a_comparison_list_field_of_the_wrong_type_names_its_index(tmp_path):
    data = json.loads(SUMMARY_TEXT)
    data["comparisons"][0]["ci95"] = [1.2]
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(data))
    with pytest.raises(
        InputError, match=r"summary\.json: \$\.comparisons\[0\]\.ci95: expected `array` of length 2"
    ):
        Summary.read(path)


DIFF = {
    "schema_version": 1,
    "base": "torch",
    "test": "hyper",
    "findings": [
        {"id": "a", "severity": "info", "title": "t", "evidence": "e", "cause": "c", "action": "x"},
        {"id": "b", "severity": 3},
    ],
}


def test_a_diff_field_of_the_wrong_type_names_the_file_and_the_field():
    with pytest.raises(InputError) as err:
        DiffResult.from_dict(DIFF, "results/x/diff.json")
    assert str(err.value) == "results/x/diff.json: $.findings[1].severity: expected `str`, got `int`"


def test_a_diff_fit_and_sync_row_of_the_wrong_type_name_their_place():
    """msgspec names a mapping's key ``[...]`` (the fits' source and type)."""
    bad_fit = {**DIFF, "findings": [], "fits": {"base": {"all_gather": {"n": "12", "status": "ok"}}}}
    with pytest.raises(InputError, match=r": \$\.fits\[\.\.\.\]\[\.\.\.\]\.n: expected `int`, got `str`$"):
        DiffResult.from_dict(bad_fit)
    bad_sync = {**DIFF, "findings": [], "sync": [{"name": "cudaStreamSynchronize", "base": "3"}]}
    with pytest.raises(InputError, match=r": \$\.sync\[0\]\.base: expected `float \| null`, got `str`$"):
        DiffResult.from_dict(bad_sync)


@pytest.mark.distributed
def test_the_summary_and_diff_of_a_real_run_encode_to_the_files_bytes(profiled_ab_run):
    """The shared profiled run's summary.json decodes and encodes to its exact bytes; each diff in its
    diff.json object for object (the deltas and ratios computed again)."""
    summary_path = profiled_ab_run / "summary.json"
    assert records.encode(Summary.read(summary_path)) == summary_path.read_bytes()
    diff_path = profiled_ab_run / "diff.json"
    if diff_path.is_file():
        raw = orjson.loads(diff_path.read_bytes())
        for entry in raw if isinstance(raw, list) else [raw]:
            assert orjson.dumps(DiffResult.from_dict(entry).to_dict()) == orjson.dumps(entry)


def test_the_report_names_a_summary_field_of_the_wrong_type_under_missing_pieces(tmp_path):
    from fsdpbench.report.load import RunData, load_summary

    data = json.loads(SUMMARY_TEXT)
    data["parity"]["valid"] = "yes"
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(data))
    run = RunData(tmp_path)
    assert load_summary(path, run) is None
    assert run.missing == [
        "the summary `summary.json` is not an fsdpbench summary "
        "(summary.json: $.parity.valid: expected `bool | null`, got `str`); it is left out."
    ]
