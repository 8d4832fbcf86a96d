"""The regrouping estimate's idle-time term, checked against a hand computation."""

from __future__ import annotations

import pytest

from fsdpbench.analysis.estimate import whatif


def _estimate(free_us):
    fit = whatif.AlphaBetaFit(2000.0, 1e-3, 0.9, 100, "ok")
    return whatif.estimate_regrouping(
        {"all_gather": (121, 900e3), "reduce_scatter": (62, 500e3)},
        {"all_gather": 9, "reduce_scatter": 5},
        {"all_gather": ("base", fit), "reduce_scatter": ("base", fit)},
        step_time_us=2100e3,
        compute_us=120e3,
        comm_us=1400e3,
        exposed_comm_us=1400e3,
        free_us=free_us,
    ).to_dict()


def test_idle_time_shrinks_with_the_share_of_calls_removed():
    # by hand: saved = (112 + 57) · 2 ms = 338 ms of 1400 ms comm, all exposed; calls 183 → 14, so idle
    # 500 ms shrinks by 500 · (1 − 14/183) = 461.75 ms; step −338 − 461.75 ms
    est = _estimate(500e3)
    assert est["comm_delta_us"] == pytest.approx(-338e3)
    assert est["idle_delta_us"] == pytest.approx(-500e3 * (1 - 14 / 183))
    assert est["step_time_delta_us"] == pytest.approx(-338e3 - 500e3 * (1 - 14 / 183))
    assert any("idle time" in a for a in est["assumptions"])


def test_without_idle_time_the_step_changes_by_the_exposed_comm_only():
    est = _estimate(None)
    assert "idle_delta_us" not in est and est["step_time_delta_us"] == pytest.approx(-338e3)
    assert not any("idle time" in a for a in est["assumptions"])
