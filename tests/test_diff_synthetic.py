"""Synthetic analyses (hand-built metric tables with known collectives) and the diff on a fragmented case."""

from __future__ import annotations

import pytest

from fsdpbench.analysis.compare.diff import diff_analyses
from fsdpbench.report.diff_md import collective_lines
from helpers import ALPHA_US, BETA_US_PER_BYTE, synthetic_analysis


def fragmented_pair(noise: float = 0.0):
    base = synthetic_analysis(overlap_ratio=0.5)
    test = synthetic_analysis(per_param=True, overlap_ratio=0.5, noise=noise, seed=1)
    return base, test


def test_synthetic_fragmented_case_states_the_count_ratio_at_same_bytes():
    base, test = fragmented_pair()
    d = diff_analyses(base, test, base_label="torch", test_label="hyper")
    assert collective_lines(d) == [
        "all_gather 120 vs 12 (10.0×), same bytes",
        "reduce_scatter 60 vs 6 (10.0×), same bytes",
    ]
    assert d.findings[1].id == "fragmentation" and d.findings[1].severity == "high"


def test_fragmentation_estimate_matches_removing_calls_at_the_true_alpha():
    base, test = fragmented_pair()
    d = diff_analyses(base, test, base_label="torch", test_label="hyper", context={"num_layers": 6})
    assert d.fits["test"]["all_gather"].alpha_us == pytest.approx(ALPHA_US)
    assert d.fits["test"]["all_gather"].beta_us_per_byte == pytest.approx(BETA_US_PER_BYTE)
    assert d.fits["base"]["all_gather"].status == "same_size"  # one bucket size per layer: honest, not fitted
    est = d.finding("fragmentation").estimate
    removed_calls = (120 - 12) + (60 - 6)
    comm = test["ranks"][0]["comm_us"]
    comm_new = comm - removed_calls * ALPHA_US
    assert est.comm_delta_us == pytest.approx(comm_new - comm)
    exposed = test["ranks"][0]["exposed_comm_us"]
    assert est.exposed_comm_delta_us == pytest.approx(exposed * comm_new / comm - exposed)
    assert est.step_time_lower_bound_us == pytest.approx(max(test["ranks"][0]["compute_us"], comm_new))
    # one bucket per layer for 6 layers is FSDP2's 13 all-gathers / 7 reduce-scatters: one call more each
    per_layer = est.one_bucket_per_layer
    assert per_layer.target_counts == {"all_gather": 13, "reduce_scatter": 7}
    assert per_layer.comm_delta_us == pytest.approx(-(removed_calls - 2) * ALPHA_US)


def test_fits_with_noise_stay_close_to_the_true_parameters():
    base, test = fragmented_pair(noise=0.05)
    fit = diff_analyses(base, test).fits["test"]["all_gather"]
    assert fit.ok and fit.n == 240 and fit.r2 > 0.9
    assert fit.alpha_us == pytest.approx(ALPHA_US, rel=0.25)
    assert fit.beta_us_per_byte == pytest.approx(BETA_US_PER_BYTE, rel=0.05)
