"""The α–β fit recovers known parameters; the what-if estimates follow their documented arithmetic."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdpbench.analysis.estimate import whatif


def test_fit_recovers_alpha_beta_from_noisy_synthetic_collectives():
    rng = np.random.default_rng(7)
    nbytes = np.exp(rng.uniform(np.log(1e3), np.log(5e7), 400))
    alpha, beta = 25.0, 1 / 12e3  # 25 µs latency, 12 GB/s
    dur = (alpha + beta * nbytes) * (1 + 0.03 * rng.standard_normal(400)) + rng.normal(0, 2.0, 400)
    fit = whatif.fit_alpha_beta(nbytes, dur)
    assert fit.status == "ok" and fit.n == 400
    assert fit.alpha_us == pytest.approx(alpha, rel=0.15)
    assert fit.beta_us_per_byte == pytest.approx(beta, rel=0.02)
    assert 0.95 < fit.r2 <= 1.0


@settings(max_examples=40, deadline=None)
@given(alpha=st.floats(0.1, 1e4), beta=st.floats(1e-7, 1e-2), n=st.integers(3, 50))
def test_fit_is_exact_on_noise_free_collectives_of_distinct_sizes(alpha, beta, n):
    nbytes = np.linspace(1e3, 1e6, n)
    fit = whatif.fit_alpha_beta(nbytes, alpha + beta * nbytes)
    assert fit.ok
    assert fit.alpha_us == pytest.approx(alpha, rel=1e-5, abs=1e-6 * (1 + beta * 1e6))
    assert fit.beta_us_per_byte == pytest.approx(beta, rel=1e-5)


def test_fit_reports_same_size_calls_instead_of_inventing_alpha_and_beta():
    fit = whatif.fit_alpha_beta([4096] * 10, [10.0, 12.0] * 5)
    assert fit.status == "same_size" and fit.alpha_us is None and fit.beta_us_per_byte is None
    assert fit.mean_us == pytest.approx(11.0) and fit.mean_bytes == 4096 and not fit.ok


def test_fit_reports_too_few_points_and_unknown_sizes():
    assert whatif.fit_alpha_beta([1, 2], [3.0, 4.0]).status == "too_few_points"
    no_bytes = whatif.fit_alpha_beta([None, float("nan"), None], [1.0, 2.0, 3.0])
    assert no_bytes.status == "no_bytes" and no_bytes.n == 3 and no_bytes.mean_us == pytest.approx(2.0)


def test_fit_events_fits_each_collective_type_from_start_and_end_times():
    rows = [("all_gather", b, 0.0, (5.0 + 1e-3 * b) * 1e3) for b in (1e3, 2e3, 4e3, 8e3)]
    rows += [("reduce_scatter", b, 10.0, 10.0 + (9.0 + 2e-3 * b) * 1e3) for b in (1e3, 3e3, 9e3)]
    fits = whatif.fit_events(pd.DataFrame(rows, columns=["type", "bytes", "start_ns", "end_ns"]))
    assert set(fits) == {"all_gather", "reduce_scatter"}
    assert fits["all_gather"].alpha_us == pytest.approx(5.0) and fits[
        "all_gather"
    ].beta_us_per_byte == pytest.approx(1e-3)
    assert fits["reduce_scatter"].alpha_us == pytest.approx(9.0)
    assert fits["reduce_scatter"].beta_us_per_byte == pytest.approx(2e-3)


def test_aggregate_fit_separates_alpha_from_beta_when_arms_move_same_bytes_in_different_call_counts():
    alpha, beta, total = 30.0, 1e-4, 2e8
    counts = [12, 12, 124, 124]
    times = [
        alpha * n + beta * total + jitter for n, jitter in zip(counts, (1.0, -1.0, 2.0, -2.0), strict=True)
    ]
    fit = whatif.fit_aggregates(counts, [total] * 4, times)
    assert (
        fit.ok
        and fit.alpha_us == pytest.approx(alpha, rel=0.01)
        and fit.beta_us_per_byte == pytest.approx(beta, rel=1e-3)
    )
    assert whatif.fit_aggregates([12, 12, 12], [total] * 3, [1.0, 1.0, 1.0]).status == "same_size"


def test_regrouping_estimate_prices_removed_calls_at_alpha_and_keeps_the_overlap_ratio():
    fit = whatif.AlphaBetaFit(10.0, 1e-4, 0.99, 124, "ok")
    est = whatif.estimate_regrouping(
        {"all_gather": (124, 5000.0)},
        {"all_gather": 12},
        {"all_gather": ("test", fit)},
        step_time_us=10_000.0,
        compute_us=7_000.0,
        comm_us=5_000.0,
        exposed_comm_us=2_500.0,
    )
    saved = (124 - 12) * 10.0  # 1120 µs
    comm_new = 5000.0 - saved
    assert est.label == "estimate"
    assert est.per_type["all_gather"].saved_us == pytest.approx(saved)
    assert est.comm_delta_us == pytest.approx(-saved)
    assert est.exposed_comm_delta_us == pytest.approx(2500.0 * comm_new / 5000.0 - 2500.0)
    assert est.step_time_delta_us == est.exposed_comm_delta_us
    assert est.step_time_lower_bound_us == pytest.approx(max(7000.0, comm_new))


def test_regrouping_estimate_counts_a_negative_alpha_as_no_gain_and_says_so():
    fit = whatif.AlphaBetaFit(-3.0, 1e-4, 0.9, 50, "ok")
    est = whatif.estimate_regrouping(
        {"all_gather": (50, 100.0)},
        {"all_gather": 5},
        {"all_gather": ("test", fit)},
        step_time_us=1e3,
        compute_us=900.0,
        comm_us=100.0,
        exposed_comm_us=50.0,
    )
    assert est.per_type["all_gather"].saved_us == 0.0 and "negative" in est.per_type["all_gather"].note
    assert est.step_time_delta_us == 0.0


def test_regrouping_estimate_without_a_usable_fit_gives_no_numbers():
    est = whatif.estimate_regrouping(
        {"all_gather": (50, 100.0)},
        {"all_gather": 5},
        {},
        step_time_us=1e3,
        compute_us=900.0,
        comm_us=100.0,
        exposed_comm_us=50.0,
    )
    assert est.step_time_delta_us is None and "no usable" in est.per_type["all_gather"].note


def test_overlap_estimate_hides_comm_up_to_the_target_ratio():
    est = whatif.estimate_overlap(
        target_overlap_ratio=0.5, step_time_us=2000.0, compute_us=900.0, comm_us=1000.0, exposed_comm_us=800.0
    )
    assert est.exposed_comm_delta_us == pytest.approx(1000.0 * 0.5 - 800.0)
    assert est.step_time_lower_bound_us == 1000.0
    worse = whatif.estimate_overlap(
        target_overlap_ratio=0.1, step_time_us=2000.0, compute_us=900.0, comm_us=1000.0, exposed_comm_us=800.0
    )
    assert worse.exposed_comm_delta_us == 0.0
    unknown = whatif.estimate_overlap(
        target_overlap_ratio=0.5, step_time_us=None, compute_us=None, comm_us=None, exposed_comm_us=None
    )
    assert unknown.exposed_comm_delta_us is None


def test_layer_bucket_counts_match_fsdp2_collective_counts():
    # reference/fsdp_backends.md §3: FSDP2 with N=4 blocks gives 9 all-gathers and 5 reduce-scatters
    assert whatif.layer_bucket_counts(4) == {"all_gather": 9, "reduce_scatter": 5}
    assert whatif.layer_bucket_counts(16) == {"all_gather": 33, "reduce_scatter": 17}
    assert whatif.layer_bucket_counts(4, reshard_after_forward=False, hsdp=True) == {
        "all_gather": 5,
        "reduce_scatter": 5,
        "all_reduce": 5,
    }


def test_choose_fit_prefers_a_good_fit_with_non_negative_alpha():
    poor = whatif.AlphaBetaFit(5.0, 1e-4, 0.1, 10, "ok")
    negative = whatif.AlphaBetaFit(-5.0, 1e-4, 0.99, 10, "ok")
    good = whatif.AlphaBetaFit(7.0, 1e-4, 0.95, 10, "ok")
    same = whatif.AlphaBetaFit(None, None, None, 10, "same_size")
    cands = [
        ("test", {"ag": same}),
        ("pooled", {"ag": negative}),
        ("aggregate", {"ag": poor}),
        ("base", {"ag": good}),
    ]
    assert whatif.choose_fit("ag", *cands) == ("base", good)
    assert whatif.choose_fit("ag", *cands[:3]) == ("aggregate", poor)
    assert whatif.choose_fit("ag", *cands[:2]) == ("pooled", negative)
    assert whatif.choose_fit("ag", cands[0]) is None and whatif.choose_fit("rs", *cands) is None


def test_estimate_round_trips_through_its_json_and_reads_the_old_grouping_key():
    fit = whatif.AlphaBetaFit(10.0, 1e-4, 0.99, 124, "ok")
    est = whatif.estimate_regrouping(
        {"all_gather": (124, 5000.0)},
        {"all_gather": 12},
        {"all_gather": ("test", fit)},
        step_time_us=10_000.0,
        compute_us=7_000.0,
        comm_us=5_000.0,
        exposed_comm_us=2_500.0,
    )
    est.scenario = "hyper at torch's granularity"
    est.one_bucket_per_layer = whatif.Estimate(comm_delta_us=-100.0, target_counts={"all_gather": 9})
    data = est.to_dict()
    assert None not in data.values() and data["per_type"]["all_gather"]["fit_source"] == "test"
    assert whatif.Estimate.from_dict(data) == est
    old = whatif.Estimate.from_dict({"label": "estimate", "grouping": "g", "step_time_delta_us": None})
    assert old.scenario == "g" and old.step_time_delta_us is None
    assert whatif.AlphaBetaFit.from_dict(fit.to_dict()) == fit
