"""The verdict (``stats.decide``) against independent references: printed t tables, intervals worked out by
hand with the ``statistics`` module, the exact enumeration of 3-round splits, a fresh Monte Carlo of the
boundaries' error rate, the mixture e-value evaluated at the interval's ends, and pyperf's sample-size rule."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest

from fsdpbench.results import sequential, stats

ALT3 = ["base", "test", "base"]
ALT4 = ["base", "test", "base", "test"]

# two-sided 95 % critical values of Student's t (any printed table, e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2)
T_TABLE_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 9: 2.262, 30: 2.042}


@pytest.mark.parametrize(("df", "value"), sorted(T_TABLE_975.items()))
def test_t_critical_matches_the_printed_table(df, value):
    assert sequential.t_critical(df, 0.05) == pytest.approx(value, abs=6e-4)
    assert float(sequential.t_two_sided_p(value, df)) == pytest.approx(0.05, abs=2e-4)


def test_t_probability_of_one_degree_of_freedom_is_the_cauchy_law():
    """df 1 is Cauchy: P(|T| < t) = 2·atan(t)/π; df 2 has P(|T| < t) = t/√(2 + t²)."""
    for t in (0.3, 1.0, 7.0):
        assert float(sequential.t_central_mass(t, 1)) == pytest.approx(2 * math.atan(t) / math.pi)
        assert float(sequential.t_central_mass(t, 2)) == pytest.approx(t / math.sqrt(2 + t * t))


def _d(base, test):
    return [math.log(t / b) for b, t in zip(base, test, strict=True)]


def test_fixed_rounds_give_the_textbook_paired_t_interval_at_a_balanced_count():
    """4 rounds, the alternate order (2 with each arm first): exp(mean d ± t(3)·s/√4), t(3) = 3.182."""
    base, test = [100.0, 102.0, 99.0, 101.0], [103.0, 104.5, 101.0, 104.0]
    d = _d(base, test)
    mean, s = statistics.mean(d), statistics.stdev(d)
    got = stats.decide(base, test, ALT4, max_rounds=16, ci_target=2.0, planned=4)
    half = 3.182446305284263 * s / 2
    assert (got.method, got.rounds, got.stop) == (stats.PAIRED_T, 4, True)
    assert got.ratio == pytest.approx(math.exp(mean))
    assert (got.lo, got.hi) == pytest.approx((math.exp(mean - half), math.exp(mean + half)))
    assert got.verdict == stats.SLOWER and got.interval_name == "95 % CI (paired t, 4 rounds)"
    partial = stats.decide(base, test, ALT4, max_rounds=16, ci_target=2.0, planned=10)
    assert (partial.verdict, partial.stop) == (stats.SLOWER, False)  # --rounds 10, 4 in: not done yet


def test_three_rounds_use_the_crossover_mean_and_its_standard_error():
    """Rounds 0 and 2 had the base first, round 1 the test: estimate (d1 + (d0 + d2)/2)/2, standard
    error s·√((1/1 + 1/2)/4), t(2) = 4.303."""
    base, test = [100.0, 101.0, 99.0], [101.0, 103.5, 99.5]
    d = _d(base, test)
    est = (d[1] + (d[0] + d[2]) / 2) / 2
    half = 4.302652729749464 * statistics.stdev(d) * math.sqrt((1 + 1 / 2) / 4)
    got = stats.decide(base, test, ALT3, max_rounds=16, ci_target=2.0, planned=3)
    assert got.ratio == pytest.approx(math.exp(est))
    assert (got.lo, got.hi) == pytest.approx((math.exp(est - half), math.exp(est + half)))
    assert got.verdict == stats.NO_DIFFERENCE


def test_the_crossover_estimate_removes_a_known_first_in_round_effect():
    """d_r = δ + π when the test runs first and δ − π when the base does (δ 1 %, π 0.5 %): at 5 rounds (3 base-
    first, 2 test-first) the plain mean is δ − π/5, the crossover mean δ exactly; with noise, over 4,000
    seeded data sets, its mean is δ within Monte Carlo error while the plain mean stays π/5 off."""
    delta, pi = 0.01, 0.005
    first = ["base", "test", "base", "test", "base"]
    d = [delta + (pi if f == "test" else -pi) for f in first]
    est, _, _ = stats.crossover_estimate(d, first)
    assert est == pytest.approx(delta, abs=1e-15) and statistics.mean(d) == pytest.approx(delta - pi / 5)
    rng = np.random.default_rng(5)
    noisy = np.array(d) + rng.normal(0, 0.01, (4000, 5))
    ests = [stats.crossover_estimate(list(row), first)[0] for row in noisy]
    se = 0.01 * math.sqrt((1 / 2 + 1 / 3) / 4) / math.sqrt(4000)
    assert abs(statistics.mean(ests) - delta) < 4 * se
    assert abs(float(noisy.mean()) - delta + pi / 5) < 4 * 0.01 / math.sqrt(5 * 4000)


def test_fewer_than_three_rounds_cannot_tell_and_auto_first_looks_at_four():
    two = stats.decide(
        [100.0, 101.0], [150.0, 152.0], ["base", "test"], max_rounds=16, ci_target=2, planned=2
    )
    assert (two.verdict, two.lo, two.hi, two.stop) == (stats.CANNOT_TELL, None, None, True)
    three = stats.decide([100.0] * 3, [150.0, 152.0, 151.0], ALT3, max_rounds=16, ci_target=2)
    assert (three.verdict, three.stop) == (stats.CANNOT_TELL, False) and "looks first after 4" in three.reason


def test_the_exact_case_three_rounds_of_identical_arms_are_wrong_at_most_one_split_in_twenty():
    """Six launch times of identical arms are exchangeable: each of the 720 ways to put six distinct values
    into the six slots (3 rounds × 2 arms) is equally likely, 36 per split of the values into 3 + 3. The old
    rule said "slower/faster" for exactly 2 of the 20 splits (all of one arm above the other: its CI is the
    [min/max, max/min] range), 72 of 720, whatever the values. The paired t says so for at most one split's
    worth (36 of 720) on average over seeded log-normal draws of the six values."""
    rng = np.random.default_rng(38)

    def verdicts(values):
        count = 0
        for slots in itertools.permutations(values):
            base, test = list(slots[:3]), list(slots[3:])
            got = stats.decide(base, test, ALT3, max_rounds=16, ci_target=2.0, planned=3)
            count += got.verdict != stats.NO_DIFFERENCE
        return count

    def old_rule(values):  # the bootstrap's verdict at 3 rounds: one arm entirely above the other
        return (
            sum(
                36
                for split in itertools.combinations(values, 3)
                if min(split) > max(set(values) - set(split))
            )
            * 2
        )

    draws = [list(100 * np.exp(rng.normal(0, 0.01, 6))) for _ in range(150)]
    assert all(old_rule(v) == 72 for v in draws)
    counts = [verdicts(v) for v in draws]
    assert statistics.mean(counts) <= 36  # ≤ 1 split of 20 (5 %); measured ≈ 31 (4.4 %)


def test_group_sequential_boundaries_hold_the_error_rate_in_a_fresh_monte_carlo():
    """An independent check of ``boundaries``: 40,000 new Gaussian paths (another seed), the crossover t
    computed here with plain numpy, the share crossing some look's boundary is 5 % ± 0.35 pt (3 SE)."""
    max_rounds = 16
    c = np.array(sequential.boundaries(max_rounds))
    rng = np.random.default_rng(123)
    d = rng.standard_normal((40_000, max_rounds))
    first = np.array([r % 2 == 1 for r in range(max_rounds)])  # alternate: the test first in odd rounds
    crossed = np.zeros(len(d), dtype=bool)
    for i, n in enumerate(range(sequential.FIRST_LOOK, max_rounds + 1)):
        x, g = d[:, :n], first[:n]
        est = 0.5 * (x[:, g].mean(axis=1) + x[:, ~g].mean(axis=1))
        se = x.std(axis=1, ddof=1) * math.sqrt(0.25 * (1 / g.sum() + 1 / (~g).sum()))
        crossed |= np.abs(est / se) >= c[i]
    assert abs(crossed.mean() - 0.05) < 0.0035
    # a look's boundary is the t quantile of its nominal level, and the levels follow (n/K)^(Δ − 1/2)
    levels = sequential.nominal_levels(max_rounds)
    assert c[0] == pytest.approx(sequential.t_critical(3, levels[0]))
    assert all(0 < a < 0.05 for a in levels)


def test_with_pocock_shape_the_boundaries_are_the_statistics_reviews(monkeypatch):
    """Shape 0.5 and looks 3..10 is the Pocock design reference/verdict_statistics.md computed on its own:
    |t| ≥ 9.04, 5.47, 4.36, 3.85, 3.55, 3.36, 3.23, 3.14 (nominal 1.20 % per look)."""
    monkeypatch.setattr(sequential, "BOUNDARY_SHAPE", 0.5)
    monkeypatch.setattr(sequential, "FIRST_LOOK", 3)
    sequential.boundaries.cache_clear()
    sequential.nominal_levels.cache_clear()
    try:
        got = sequential.boundaries(10)
        assert got == pytest.approx([9.04, 5.47, 4.36, 3.85, 3.55, 3.36, 3.23, 3.14], abs=0.1)
        assert sequential.nominal_levels(10)[0] == pytest.approx(0.0120, abs=0.0006)
    finally:
        sequential.boundaries.cache_clear()
        sequential.nominal_levels.cache_clear()


def test_auto_reports_the_repeated_ci_of_its_look_and_stops_when_it_excludes_1():
    base, test = [100.0, 101.0, 99.0, 100.5, 100.0], [103.0, 103.5, 102.5, 103.0, 103.5]
    first = ALT4 + ["base"]
    d = _d(base, test)
    c = sequential.boundaries(16)[5 - sequential.FIRST_LOOK]
    k = math.sqrt(0.25 * (1 / 2 + 1 / 3))
    est = 0.5 * (statistics.mean(d[1::2]) + statistics.mean(d[0::2]))
    got = stats.decide(base, test, first, max_rounds=16, ci_target=2.0)
    assert (got.method, got.look, got.looks) == (stats.GROUP_SEQUENTIAL, 2, 13)
    half = c * statistics.stdev(d) * k
    assert (got.lo, got.hi) == pytest.approx((math.exp(est - half), math.exp(est + half)))
    assert (got.verdict, got.stop) == (stats.SLOWER, True)
    assert got.interval_name == "95 % CI (group-sequential, look 2 of 13)"


def test_auto_futility_says_no_difference_larger_than_the_intervals_reach():
    base = [100.0, 100.1, 99.9, 100.0]
    test = [100.05, 100.0, 100.0, 100.1]
    got = stats.decide(base, test, ALT4, max_rounds=16, ci_target=2.0)
    reach = max(got.hi - 1, 1 - got.lo) * 100
    assert got.lo < 1 < got.hi and (got.hi - got.lo) / got.ratio * 100 < 2.0
    assert got.stop and got.verdict == f"no difference larger than {reach:.1f} %"
    wide = stats.decide(base, test, ALT4, max_rounds=16, ci_target=0.05)
    assert (wide.verdict, wide.stop) == (stats.NO_DIFFERENCE, False)
    last = stats.decide(base, test, ALT4, max_rounds=4, ci_target=0.05)
    assert (last.verdict, last.stop) == (stats.NO_DIFFERENCE, True) and "last planned look" in last.reason


def test_past_the_planned_looks_the_interval_is_the_confidence_sequence():
    """Rounds beyond ``max_rounds`` (a resume that raised --max-rounds): the anytime-valid t confidence
    sequence. At its ends the mixture e-value √g·((1 + u)/(1 + u·g))^(n/2) is exactly 1/α = 20."""
    rng = np.random.default_rng(2)
    base = list(100 + rng.normal(0, 1, 6))
    test = list(101 + rng.normal(0, 1, 6))
    first = ALT4 + ["base", "test"]
    got = stats.decide(base, test, first, max_rounds=4, ci_target=0.1)
    assert got.method == stats.CONFIDENCE_SEQUENCE and got.stop is False
    assert "anytime-valid confidence sequence" in got.reason
    assert got.interval_name == "95 % confidence sequence (past the 1 planned look, 6 rounds)"
    d = _d(base, test)
    n, mean, ss = 6, statistics.mean(d), sum((x - statistics.mean(d)) ** 2 for x in d)
    g = 0.1 / (0.1 + n)  # balanced: the crossover mean is the plain mean, n_eff = n
    for end in (got.lo, got.hi):
        u = n * (mean - math.log(end)) ** 2 / ss
        assert math.sqrt(g) * ((1 + u) / (1 + u * g)) ** (n / 2) == pytest.approx(20.0)
    gs = stats.decide(base, test, first, max_rounds=6, ci_target=0.1)
    assert gs.method == stats.GROUP_SEQUENTIAL and gs.hi - gs.lo < got.hi - got.lo


def test_bad_input_is_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match="base has 2 rounds and test 3"):
        stats.decide([1.0, 2.0], [1.0, 2.0, 3.0], ALT3, max_rounds=16, ci_target=2)
    with pytest.raises(ValueError, match="must be 'base' or 'test'"):
        stats.decide([1.0] * 3, [1.0] * 3, ["a", "b", "a"], max_rounds=16, ci_target=2)
    with pytest.raises(ValueError, match="must be > 0"):
        stats.decide([1.0, 0.0, 1.0], [1.0] * 3, ALT3, max_rounds=16, ci_target=2)


def test_rounds_needed_follows_pyperf_sample_size_rule_on_the_paired_spread():
    base, test = [100.0, 102.0, 98.0], [110.0, 111.0, 112.0]
    sd = statistics.stdev(_d(base, test))
    assert stats.rounds_needed(base, test) == math.ceil(1.959963984540054**2 * sd**2 / 0.01**2)
    assert stats.rounds_needed([1.0], test) is None


def _compare(base, test, planned=3):
    rounds = range(len(base))
    first = {r: "test" if r % 2 else "base" for r in rounds}
    return stats.compare_arms(
        "torch", "hyper", dict(zip(rounds, base, strict=True)), dict(zip(rounds, test, strict=True)), first,
        max_rounds=16, ci_target=2.0, planned=planned,
    )  # fmt: skip


def test_verdict_says_the_time_ratio_first_then_the_step_time_change_and_the_rule():
    """125 ms vs 100 ms: 1.25× the time, +25% step time, and what the interval is."""
    comp = _compare([100.0, 101.0, 99.0], [125.0, 126.25, 123.75])
    assert comp.significant and comp.ratio == pytest.approx(1.25, rel=1e-3)
    assert comp.verdict.startswith("hyper is 1.25× slower than torch (+25.0%; 95 % CI (paired t, 3 rounds) ")
    lo, hi = comp.ci95
    assert comp.verdict.endswith(f" {lo:.2f}×–{hi:.2f}×)")
    assert comp.to_dict()["method"] == "paired t" and comp.to_dict()["decision"] == "slower"


def test_verdict_says_faster_when_test_is_quicker():
    comp = _compare([100.0, 101.0, 99.0], [80.0, 80.8, 79.2])
    assert comp.verdict.startswith("hyper is 1.25× faster than torch (−20.0%; 95 % CI (paired t, 3 rounds) ")


def test_overlapping_rounds_give_no_difference_detected():
    comp = _compare([100.0, 110.0, 90.0], [105.0, 95.0, 100.0])
    assert not comp.significant
    assert comp.verdict.startswith("no difference detected between hyper and torch")


def test_one_round_per_arm_gives_no_ci_and_says_it_cannot_tell_yet():
    """3.99× from one round per arm is not "no difference detected": without an interval nothing is decided."""
    comp = _compare([100.0], [399.0], planned=1)
    assert comp.ci95 is None and not comp.significant and comp.rounds == (1, 1)
    assert comp.verdict == (
        "cannot tell yet whether hyper differs from torch: ratio 3.990 from 1 round per arm has no "
        "confidence interval (an interval needs at least 3 rounds per arm, --rounds auto looks first after 4)"
    )
    assert comp.to_dict()["rounds"] == [1, 1] and comp.to_dict()["verdict"] == comp.verdict


def test_percentiles_and_median_match_numpy_definition():
    v = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert stats.median(v) == 3.0
    assert stats.percentile(v, 10) == pytest.approx(1.4)
    assert stats.percentile(v, 90) == pytest.approx(4.6)
