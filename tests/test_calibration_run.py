"""Calibration wired into the diff of real profiled runs (CPU/gloo, 2 ranks, tiny): an entry appears exactly
when the counterfactual arm exists, and its measured change is the run's own summary.json medians."""

from __future__ import annotations

import orjson
import pytest

from fsdpbench.analysis.compare import calibration as cal
from fsdpbench.analysis.derived import diff_run
from fsdpbench.report.diff_md import CALIBRATION_HEADER, calibration_rows
from helpers import run_cli, run_profiled_ab

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def three_arm_run(tmp_path_factory):
    """``torch:unit=module,torch,torch:ac=full``: one regrouping pair (unit=module vs torch) and arms that
    differ in ``ac`` (no estimate predicts it); diffed once through the CLI."""
    run = run_profiled_ab(
        tmp_path_factory.mktemp("calibration_run"), "torch:unit=module,torch,torch:ac=full", "cal"
    )
    proc = run_cli("diff", str(run), timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run, proc.stdout


def _medians(run) -> dict[str, float]:
    summary = orjson.loads((run / "summary.json").read_bytes())
    return {label: arm["median_ms"] for label, arm in summary["arms"].items()}


def test_regrouping_entry_carries_the_runs_own_timed_change_and_ac_full_has_none(three_arm_run):
    run, _ = three_arm_run
    diffs = orjson.loads((run / "diff.json").read_bytes())
    assert [(d["base"], d["test"]) for d in diffs] == [
        ("torch-unitmodule", "torch"),
        ("torch-unitmodule", "torch-acfull"),
    ]
    entries = [e for d in diffs for e in d["calibration"]]
    assert {e["estimate"] for e in entries} <= {"regrouping", "one_bucket_per_layer"}
    assert not [e for e in entries if "torch-acfull" in (e["subject"], e["counterfactual"])]
    assert diffs[1]["calibration"] == []  # unit and ac differ together: no estimate predicts that pair
    [regrouping] = [e for e in diffs[0]["calibration"] if e["estimate"] == "regrouping"]
    medians = _medians(run)
    assert (regrouping["subject"], regrouping["counterfactual"], regrouping["match"]) == (
        "torch-unitmodule",
        "torch",
        "exact",
    )
    assert regrouping["measured_ms"] == pytest.approx(medians["torch"] - medians["torch-unitmodule"])
    frag = next(f for f in diffs[0]["findings"] if f["id"] == "fragmentation")
    predicted = frag["estimate"]["step_time_delta_us"] / 1e3
    assert regrouping["predicted_ms"] == pytest.approx(predicted)
    measured = regrouping["measured_ms"]
    assert regrouping["error_pct"] == pytest.approx((predicted - measured) / abs(measured) * 100)
    # each diff names its two arms' profiled/timed ratios
    for d in diffs:
        assert set(d["distortion"]["ratio"]) == {d["base"], d["test"]}


def test_calibration_table_in_diff_md_and_the_terminal(three_arm_run):
    run, stdout = three_arm_run
    md = (run / "diff.md").read_text()
    assert "### Calibration: estimates vs the measured counterfactual arm" in md
    assert "| " + " | ".join(CALIBRATION_HEADER) + " |" in md
    assert "torch-unitmodule → torch |" in md and "→ torch-acfull" not in md
    assert "Profiled/timed step (profiler distortion): torch-unitmodule" in md
    assert "calibration: estimates vs the measured counterfactual arm" in stdout.replace("\n", " ")


def test_two_runs_profiles_given_to_diff_are_calibrated_by_their_manifest_arms(three_arm_run, tmp_path):
    run, _ = three_arm_run
    prof = run / "profiles"
    medians = _medians(run)
    for test_arm, expected in (("torch", {"regrouping"}), ("torch-acfull", set())):
        out = tmp_path / f"{test_arm}.json"
        proc = run_cli(
            "diff", str(prof / "torch-unitmodule"), str(prof / test_arm), "--quiet", "--json", str(out)
        )
        assert proc.returncode == 0, proc.stderr
        d = orjson.loads(out.read_bytes())
        assert {e["estimate"] for e in d["calibration"]} - {"one_bucket_per_layer"} == expected
        for e in d["calibration"]:
            assert e["measured_ms"] == pytest.approx(medians[test_arm] - medians["torch-unitmodule"])


def test_prefetch_pair_gets_a_prefetch_overlap_entry(profiled_ab_run):
    """The shared ``torch,torch:prefetch=1`` run: prefetch=0 is the subject, prefetch=1 its counterfactual
    (on gloo every arm's overlap is 0, so the prediction is 0; the entry still carries the measurement)."""
    [result] = diff_run(profiled_ab_run)
    [entry] = result.calibration
    medians = _medians(profiled_ab_run)
    assert (entry["estimate"], entry["subject"], entry["counterfactual"]) == (
        "prefetch_overlap",
        "torch",
        "torch-prefetch1",
    )
    assert entry["measured_ms"] == pytest.approx(medians["torch-prefetch1"] - medians["torch"])


def test_calibration_pairs_cover_every_counterfactual_pair_not_only_those_vs_the_first_arm():
    arms = {
        "m": {"backend": "torch", "unit": "module", "prefetch": 0},
        "t": {"backend": "torch", "unit": "layer", "prefetch": 0},
        "p": {"backend": "torch", "unit": "layer", "prefetch": 1},
        "ac": {"backend": "torch", "unit": "layer", "prefetch": 0, "ac": "full"},
        "h": {"backend": "hyper", "unit": "layer", "prefetch": 0, "comm_fusion": False},
    }
    assert cal.calibration_pairs(arms) == [("m", "t"), ("m", "h"), ("t", "p"), ("t", "h")]


def test_calibration_rows_format_ms_and_percent_with_missing_glyph():
    entry = {
        "estimate": "regrouping",
        "match": "approximate: different backends",
        "subject": "hyper",
        "counterfactual": "torch",
        "predicted_ms": -60.0,
        "measured_ms": -100.0,
        "error_pct": 40.0,
        "predicted_timed_ms": None,
        "error_timed_pct": None,
        "measured_profiled_ms": -80.0,
        "error_profiled_pct": 25.0,
    }
    [row] = calibration_rows([entry])
    assert row == [
        "regrouping (approximate)",
        "hyper → torch",
        "−60.0 ms",
        "−100.0 ms",
        "+40%",
        "—",
        "—",
        "−80.0 ms",
        "+25%",
    ]
