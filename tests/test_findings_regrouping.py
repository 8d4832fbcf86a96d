"""The fragmentation finding's regrouping estimate with the idle-time term, its cause text per backend, and
the comm-only → comm+idle range in words and in the calibration entries (hand-computed)."""

from __future__ import annotations

import pytest

from fsdpbench.analysis.compare import calibration as cal
from fsdpbench.analysis.compare.diff import diff_analyses
from fsdpbench.analysis.estimate.whatif import Estimate
from fsdpbench.fmt import fmt_us
from fsdpbench.report.diff_md import calibration_rows
from fsdpbench.report.estimate import estimate_lines
from helpers import analysis, fragmented, rank

FREE_US = 200_000.0


def _with_free(data: dict, free: float = FREE_US) -> dict:
    for r in data["ranks"]:
        r["free_us"] = free
    return data


def test_fragmentation_estimate_adds_the_idle_time_that_scales_with_the_calls():
    base = analysis(rank(0, free=FREE_US), rank(1, free=FREE_US))
    d = diff_analyses(base, _with_free(fragmented(10.0)), base_label="torch", test_label="hyper")
    est = d.finding("fragmentation").estimate
    # only all_gather is fragmented: 120 calls → 12, so the idle time shrinks by 1 − 12/120
    assert est.idle_delta_us == pytest.approx(-FREE_US * (1 - 12 / 120))
    assert est.step_time_delta_us == pytest.approx(est.exposed_comm_delta_us + est.idle_delta_us)
    line = estimate_lines(est)[0]
    comm_only = est.step_time_delta_us - est.idle_delta_us
    assert f"step time {fmt_us(comm_only, signed=True)} (comm only) to −180.0 ms (comm + idle time)" in line


def _cause(arm: dict) -> str:
    return (
        diff_analyses(analysis(), fragmented(10.0), test_label="x", base_label="other", test_arm=arm)
        .finding("fragmentation")
        .cause
    )


@pytest.mark.parametrize(
    ("arm", "per_parameter"),
    [
        ({"backend": "torch", "unit": "layer"}, False),
        ({"backend": "deepspeed"}, False),
        ({"backend": "hyper", "comm_fusion": True}, False),
        ({"backend": "hyper", "comm_fusion": False}, True),
        ({"backend": "torch", "unit": "module"}, True),
        ({"backend": "fsdp1", "unit": "module"}, True),
    ],
)
def test_cause_says_per_parameter_only_for_hyper_without_fusion_or_unit_module(arm, per_parameter):
    cause = _cause(arm)
    assert cause.startswith("per-parameter collectives") == per_parameter
    assert ("more, smaller collectives than other" in cause) == (not per_parameter)


def test_estimate_without_idle_term_shows_one_step_time():
    line = estimate_lines(Estimate(step_time_delta_us=-5_000.0, exposed_comm_delta_us=-5_000.0))[0]
    assert "step time −5.0 ms" in line and "comm only" not in line


def test_calibration_entry_carries_both_predictions_and_the_table_shows_the_range():
    arms = {
        "m": {"label": "m", "backend": "torch", "unit": "module"},
        "t": {"label": "t", "backend": "torch"},
    }
    diff = {
        "base": "m",
        "test": "t",
        "side_by_side": {"mean": {"base": {"step_time_us": 400_000.0}, "test": {"step_time_us": 300_000.0}}},
        "collectives": [{"type": "all_gather", "base_count": 120, "test_count": 12}],
        "findings": [
            {
                "id": "fragmentation",
                "estimate": {
                    "step_time_delta_us": -90_000.0,
                    "idle_delta_us": -30_000.0,
                    "per_type": {"all_gather": {"count": 120}},
                },
            }
        ],
    }
    [e] = cal.calibrate_diff(diff, arms, {"m": 500.0, "t": 400.0})
    assert e["predicted_ms"] == pytest.approx(-90.0)
    assert e["predicted_comm_only_ms"] == pytest.approx(-60.0)
    assert e["error_comm_only_pct"] == pytest.approx((-60 + 100) / 100 * 100)
    assert e["error_pct"] == pytest.approx((-90 + 100) / 100 * 100)
    assert calibration_rows([e])[0][2] == "−60.0 ms (comm only) … −90.0 ms (comm + idle)"
