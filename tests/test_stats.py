"""Statistics against independent references: exact bootstrap enumeration, pyperf's sample-size rule."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest

from fsdpbench.results import stats


def _exact_bootstrap_quantiles(base, test, qs):
    """Every equally likely resample of both arms, enumerated (the bootstrap distribution itself)."""
    ratios = [
        statistics.median(t) / statistics.median(b)
        for b in itertools.product(base, repeat=len(base))
        for t in itertools.product(test, repeat=len(test))
    ]
    return np.quantile(ratios, qs)


def test_bootstrap_ci_matches_exact_enumeration_of_resamples():
    base, test = [100.0, 104.0, 97.0], [120.0, 118.0, 126.0, 121.0]
    lo, hi = stats.bootstrap_ratio_ci(base, test, n_resamples=40_000, seed=1)
    exact_lo, exact_hi = _exact_bootstrap_quantiles(base, test, [0.025, 0.975])
    assert lo == pytest.approx(exact_lo, rel=5e-3)
    assert hi == pytest.approx(exact_hi, rel=5e-3)


def test_bootstrap_ci_of_constant_rounds_is_the_ratio():
    assert stats.bootstrap_ratio_ci([50.0] * 3, [60.0] * 3) == pytest.approx((1.2, 1.2))


def test_rounds_needed_follows_pyperf_sample_size_rule():
    base, test = [100.0, 102.0, 98.0], [110.0, 111.0, 112.0]
    var = (statistics.stdev(base) / statistics.mean(base)) ** 2 + (
        statistics.stdev(test) / statistics.mean(test)
    ) ** 2
    assert stats.rounds_needed(base, test) == math.ceil(1.959963984540054**2 * var / 0.01**2)
    assert stats.rounds_needed([1.0], test) is None


def test_rounds_needed_for_one_percent_sigma_matches_pyperf_example():
    # pyperf: σ = 1% with a total width of 1% (±0.5%) needs 16 processes; same σ² sum, ±0.5%
    vals = [99.0, 101.0]  # relative std (ddof=1) ≈ 1.414% → σ² = 2e-4
    assert stats.rounds_needed(vals, [100.0, 100.0], half_width=0.005) == math.ceil(
        1.96**2 * 2e-4 / 0.005**2 - 1e-9
    )


def test_verdict_says_the_time_ratio_first_then_the_step_time_change():
    """125 ms vs 100 ms: 1.25× the time, +25% step time (one meaning of %: the time change)."""
    comp = stats.compare_arms("torch", "hyper", [100.0, 101.0, 99.0], [125.0, 126.0, 124.0])
    assert comp.significant and comp.ratio == pytest.approx(1.25)
    assert comp.time_change_pct == pytest.approx(25.0)
    assert comp.verdict.startswith("hyper is 1.25× slower than torch (+25.0%; 95% CI ")
    lo, hi = comp.ci95
    assert comp.verdict.endswith(f"CI {lo:.2f}×–{hi:.2f}×)")


def test_verdict_says_faster_when_test_is_quicker():
    """80 ms vs 100 ms: the base takes 1.25× the test's time; the test's step time changed by −20%."""
    comp = stats.compare_arms("a", "b", [100.0, 101.0, 99.0], [80.0, 80.5, 79.5])
    assert comp.verdict.startswith("b is 1.25× faster than a (−20.0%; 95% CI ")
    lo, hi = comp.ci95
    assert comp.verdict.endswith(f"CI {1 / hi:.2f}×–{1 / lo:.2f}×)")


def test_overlapping_rounds_give_no_difference_detected():
    comp = stats.compare_arms("a", "b", [100.0, 110.0, 90.0], [105.0, 95.0, 100.0])
    assert not comp.significant
    assert comp.verdict.startswith("no difference detected between b and a")


def test_one_round_per_arm_gives_no_ci_and_says_it_cannot_tell_yet():
    """3.99× from one round per arm is not "no difference detected": without a CI nothing is decided."""
    comp = stats.compare_arms("torch", "hyper", [100.0], [399.0])
    assert comp.ci95 is None and not comp.significant and comp.rounds == (1, 1)
    assert comp.verdict == (
        "cannot tell yet whether hyper differs from torch: ratio 3.990 from 1 round per arm has no "
        "confidence interval (a CI needs at least 2 rounds per arm; rerun with --rounds 3 or more)"
    )
    assert "no difference" not in comp.verdict
    assert comp.to_dict()["rounds"] == [1, 1] and comp.to_dict()["verdict"] == comp.verdict


def test_an_arm_with_one_round_names_each_arms_rounds():
    comp = stats.compare_arms("torch", "hyper", [100.0, 102.0], [150.0])
    assert comp.ci95 is None
    assert "ratio 1.485 from 2 rounds of torch and 1 of hyper has no confidence interval" in comp.verdict


def test_percentiles_and_median_match_numpy_definition():
    v = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert stats.median(v) == 3.0
    assert stats.percentile(v, 10) == pytest.approx(1.4)
    assert stats.percentile(v, 90) == pytest.approx(4.6)
