"""Records that read and write themselves (``fsdpbench.records``): a malformed file names the file and the
field, and what was written reads back and writes again byte for byte (expected texts written by hand here,
the bytes compared against the file itself)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from fsdpbench import records
from fsdpbench.analysis.compare.diff import DiffResult
from fsdpbench.config.run import RunConfig
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
    assert str(err.value).startswith(f"{path}: $.arms.torch.median_ms: expected `float | null`, got `str`; ")
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
    """A mapping's key (the fits' source and type, ``[...]`` in msgspec's path) is named from the object."""
    bad_fit = {**DIFF, "findings": [], "fits": {"base": {"all_gather": {"n": "12", "status": "ok"}}}}
    with pytest.raises(InputError, match=r": \$\.fits\.base\.all_gather\.n: expected `int`, got `str`$"):
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
        _assert_diff_file_reencodes(diff_path)
    manifest = orjson.loads((profiled_ab_run / "manifest.json").read_bytes())
    config = RunConfig.from_dict(manifest["config"], "manifest.json", "$.config")
    assert orjson.dumps(config.to_dict()) == orjson.dumps(manifest["config"])
    assert orjson.dumps([a.options() for a in config.arms]) == orjson.dumps(manifest["arms"])


def _assert_diff_file_reencodes(path: Path) -> None:
    """diff.json (one object or a list) decoded and written again gives the file's bytes."""
    from fsdpbench.analysis.compare.diff import diffs_from_json
    from fsdpbench.results.run_folder import diff_list

    raw = orjson.loads(path.read_bytes())
    diffs = diffs_from_json(diff_list(raw), str(path))
    again = [d.to_dict() for d in diffs]
    option = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
    assert orjson.dumps(again if isinstance(raw, list) else again[0], option=option) == path.read_bytes()


def test_the_diff_json_of_the_fixtures_decodes_and_encodes_to_the_files_bytes(tmp_path):
    """``fsdpbench diff`` of two Ascend ranks of tests/fixtures writes a diff.json that reads back and writes
    the same bytes (the reference is the file)."""
    from helpers import REPO, run_cli

    path = tmp_path / "diff.json"
    base, test = (REPO / "tests" / "fixtures" / "ascend_server_2rank" / f"test_rank_{r}" for r in (0, 1))
    proc = run_cli("diff", str(base), str(test), "--json", str(path), "--quiet", "--no-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _assert_diff_file_reencodes(path)


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


def _metrics(step: float | None, compute: float | None, comm: float | None, overlap: float | None) -> dict:
    exposed = None if comm is None or overlap is None else comm * (1 - overlap)
    return {
        "step_time_us": step,
        "compute_us": compute,
        "comm_us": comm,
        "overlap_ratio": overlap,
        "exposed_comm_us": exposed,
        "free_us": None,
        "kernel_time_us": 100.0,
    }


METRIC_KEYS = [
    "step_time_us",
    "compute_us",
    "comm_us",
    "overlap_ratio",
    "exposed_comm_us",
    "free_us",
    "kernel_time_us",
]
BASE_METRICS, TEST_METRICS = _metrics(100.0, 60.0, 40.0, 0.5), _metrics(150.0, 90.0, 80.0, 0.25)
MEAN_DELTA = {  # test − base, by hand
    "step_time_us": 50.0,
    "compute_us": 30.0,
    "comm_us": 40.0,
    "overlap_ratio": -0.25,
    "exposed_comm_us": 40.0,  # 80·0.75 − 40·0.5
    "free_us": None,
    "kernel_time_us": 0.0,
}
MEAN_RATIO = {  # test / base, overlap_ratio left out
    "step_time_us": 1.5,
    "compute_us": 1.5,
    "comm_us": 2.0,
    "exposed_comm_us": 3.0,
    "free_us": None,
    "kernel_time_us": 1.0,
}
PLACE = {
    "compute_us": 10.0,
    "comm_us": 4.0,
    "exposed_us": 2.0,
    "exposed_wait_us": None,
    "exposed_transfer_us": None,
}
DIFF_OBJECT = {
    "schema_version": 1,
    "base": "torch",
    "test": "hyper",
    "warnings": ["hyper: a warning"],
    "side_by_side": {
        "metrics": METRIC_KEYS,
        "mean": {"base": BASE_METRICS, "test": TEST_METRICS, "delta": MEAN_DELTA, "ratio": MEAN_RATIO},
        "ranks": [
            {"rank": 0, "base": BASE_METRICS, "test": TEST_METRICS, "delta": MEAN_DELTA},
            {"rank": 1, "base": BASE_METRICS, "test": None, "delta": None},
        ],
    },
    "collectives": [
        {
            "type": "all_gather",
            "base_count": 10.0,
            "test_count": 40.0,
            "count_ratio": 4.0,
            "base_bytes": 1000.0,
            "test_bytes": 1000.0,
            "bytes_ratio": 1.0,
            "base_time_us": 10.0,
            "test_time_us": 30.0,
            "time_delta_us": 20.0,
        },
        {
            "type": "reduce_scatter",
            "base_count": 0.0,
            "test_count": 2.0,
            "count_ratio": None,  # no calls on the base: no ratio
            "base_bytes": None,
            "test_bytes": 64.0,
            "bytes_ratio": None,
            "base_time_us": 0.0,
            "test_time_us": 5.0,
            "time_delta_us": 5.0,
        },
    ],
    "ops": [
        {
            "op_type": "Slice",
            "base_us": 100.0,
            "test_us": 36.0,
            "delta_us": -64.0,
            "base_count": 10.0,
            "test_count": 4.0,
            "change": "decreased",
        },
        {
            "op_type": "ReduceSum",
            "base_us": 30.0,
            "test_us": 20.0,
            "delta_us": -10.0,
            "base_count": 3.0,
            "test_count": 3.0,
            "change": "decreased",
            "same_as": ["ReduceSumD"],
        },
    ],
    "sync": [{"name": "launch_ffts", "base": 59.0, "test": 365.0, "delta": 306.0}],
    "fits": {
        "test": {
            "all_gather": {
                "alpha_us": 10.0,
                "beta_us_per_byte": 0.0001,
                "r2": 0.98,
                "n": 124,
                "status": "ok",
                "mean_us": 30.0,
                "mean_bytes": 200000.0,
                "constrained": False,
            }
        }
    },
    "findings": [
        {
            "id": "fragmentation",
            "severity": "high",
            "title": "t",
            "evidence": "e",
            "cause": "c",
            "action": "a",
            "estimate": {"label": "estimate", "step_time_delta_us": -150.0},
            "subject": "hyper",
        }
    ],
    "calibration": [
        {"estimate": "regrouping", "predicted_ms": -60.0, "measured_ms": None, "fit_sources": ["base"]}
    ],
    "memory_timeline": {"base": {"rank": 0, "peak_bytes": 10392904}, "test": {"rank": 0}, "difference": {}},
    "places": [
        {
            "unit": "layers.0",
            "phase": "backward",
            "base": PLACE,
            "test": {**PLACE, "exposed_us": 5.0},
            "delta": {
                "compute_us": 0.0,
                "comm_us": 0.0,
                "exposed_us": 3.0,
                "exposed_wait_us": None,
                "exposed_transfer_us": None,
            },
        },
        # a unit only the base names: listed, not compared (no delta against nothing)
        {"unit": "blocks.0", "phase": "forward", "base": PLACE, "test": None, "delta": dict.fromkeys(PLACE)},
    ],
    "top_waits": {
        "base": [],
        "test": [
            {
                "unit": "layers.0",
                "phase": "backward",
                "type": "reduce_scatter",
                "bytes": 4096.0,
                "wait_us": 40000.0,
                "transfer_us": 2000.0,
                "last_rank": 1,
            }
        ],
    },
    "prefetch_estimates": {"base": None, "test": {"label": "estimate", "basis": "units"}},
}
"""A Diff JSON object written by hand, every computed key (deltas, ratios) computed here by hand."""


def test_a_diff_file_decodes_and_encodes_to_the_same_bytes(tmp_path):
    """diff.json of two test arms (a list) reads through the one decode and writes the same bytes; the computed
    keys come out as computed by hand above, and what the file does not hold (a side's rank, whether a place is
    compared) is told again."""
    from fsdpbench.analysis.compare.diff import diffs_from_json
    from fsdpbench.results.run_folder import write_json

    second = {k: v for k, v in DIFF_OBJECT.items() if k != "memory_timeline"} | {"test": "fsdp1"}
    path = write_json(tmp_path / "diff.json", [DIFF_OBJECT, second])
    expected = orjson.dumps([DIFF_OBJECT, second], option=orjson.OPT_INDENT_2)
    assert path.read_bytes() == expected
    diffs = diffs_from_json(orjson.loads(path.read_bytes()), str(path))
    assert orjson.dumps([d.to_dict() for d in diffs], option=orjson.OPT_INDENT_2) == expected
    one = diffs[0]
    assert [r.rank for r in one.side_by_side.ranks] == [0, 1]
    assert [r.base.rank for r in one.side_by_side.ranks] == [
        0,
        1,
    ]  # the pair's rank, which the file writes once
    assert [p.compared for p in one.places] == [True, False]
    assert one.collectives[0]["test"].count == 40.0 and one.ops[1].label == "ReduceSum (= ReduceSumD)"
    assert one.memory_timeline["base"]["peak_bytes"] == 10392904 and diffs[1].memory_timeline is None


def test_a_diff_file_with_a_broken_field_names_the_file_the_entry_and_the_field(tmp_path):
    """The report leaves out the diff with the broken field and names the file, the entry and the field under
    its missing pieces; the other diff of the file reads."""
    from fsdpbench.report.load import RunData
    from fsdpbench.results.run_folder import diff_list

    broken = json.loads(json.dumps(DIFF_OBJECT))
    broken["test"] = "fsdp1"
    broken["collectives"][1]["base_count"] = "3"
    run = RunData(tmp_path)
    run.diffs = diff_list([DIFF_OBJECT, broken])
    assert [d.test for d in run.diff_results] == ["hyper"]
    assert run.missing == [
        "a diff in `diff.json` could not be read (diff.json: $[1].collectives[1].base_count: expected "
        "`float | null`, got `str`); it is left out."
    ]
    newer = {**DIFF_OBJECT, "schema_version": 2}
    run = RunData(tmp_path)
    run.diffs = diff_list(newer)
    assert run.diff_results == []
    assert "(diff.json: $.schema_version is 2: this fsdpbench reads 1;" in run.missing[0]


def test_a_manifest_config_with_a_broken_field_names_the_manifest_and_the_field(tmp_path):
    """``--resume`` reads the manifest's config through msgspec: a field of the wrong type is one line naming
    manifest.json and the field, before anything is launched; a key this version does not know is dropped."""
    from fsdpbench.config.run import RunConfig
    from fsdpbench.run.launcher import run_ab

    cfg = RunConfig(name="x")
    config = json.loads(json.dumps(cfg.to_dict()))
    assert RunConfig.from_dict({**config, "a_newer_option": 1}) == cfg
    config["steps"] = "8"
    manifest = tmp_path / "manifest.json"
    manifest.write_bytes(orjson.dumps({"schema_version": 1, "config": config}))
    with pytest.raises(InputError) as err:
        run_ab(cfg, resume=tmp_path)
    assert str(err.value) == f"{manifest}: $.config.steps: expected `int`, got `str`"
    config["steps"] = 8
    config["arms"][0]["comm_fusion"] = "yes"
    manifest.write_bytes(orjson.dumps({"schema_version": 1, "config": config}))
    with pytest.raises(
        InputError, match=r"manifest\.json: \$\.config\.arms\[0\]\.comm_fusion: expected `bool`, got `str`$"
    ):
        run_ab(cfg, resume=tmp_path)


def test_the_rounds_auto_decision_writes_its_rounds_and_why():
    from fsdpbench.run import rounds

    decision = rounds.check(
        [],
        parity_valid=False,
        rounds=3,
        ci_target_pct=2.0,
        max_rounds=10,
        elapsed_s=1.0,
        round_s=1.0,
        max_time_s=0.0,
    )
    assert decision.to_dict() == {
        "rounds": 3,
        "stopped": True,
        "reason": "parity_failed",
        "why": "stopped after 3 rounds: the losses differ (parity failed)",
    }


def test_a_mapping_key_is_named_only_where_one_key_leads_to_the_wrong_value():
    """Two fits with the wrong ``n``: no key is guessed, msgspec's ``[...]`` stays."""
    fits = {"base": {"all_gather": {"n": "1", "status": "ok"}, "all reduce": {"n": "2", "status": "ok"}}}
    with pytest.raises(InputError, match=r": \$\.fits\[\.\.\.\]\[\.\.\.\]\.n: expected `int`, got `str`$"):
        DiffResult.from_dict({**DIFF, "findings": [], "fits": fits})
    fits["base"]["all_gather"]["n"] = 1
    with pytest.raises(InputError, match=r': \$\.fits\.base\["all reduce"\]\.n: expected `int`, got `str`$'):
        DiffResult.from_dict({**DIFF, "findings": [], "fits": fits})


def test_one_finite_number_check_for_json_values():
    """``records.finite`` is the one check (the findings, the what-ifs and the places share it): a finite int
    or float as a float, anything else (bool, NaN, ±inf, text, None) as None."""
    import math

    from fsdpbench.analysis.estimate import whatif
    from fsdpbench.analysis.findings import places
    from fsdpbench.analysis.findings import records as finding_records
    from fsdpbench.records import finite

    assert [finite(v) for v in (3, 2.5, -0.0, True, math.nan, math.inf, -math.inf, "1", None)] == [
        3.0,
        2.5,
        -0.0,
        None,
        None,
        None,
        None,
        None,
        None,
    ]
    assert type(finite(3)) is float
    assert finding_records.finite is finite
    assert not hasattr(whatif, "finite_or_none") and not hasattr(places, "_num")
