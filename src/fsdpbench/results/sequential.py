"""The verdict's distributions: Student t (exact, integer degrees of freedom), group-sequential
boundaries for the paired crossover t statistic, and the anytime-valid t confidence sequence.

numpy only (no scipy, no torch): the t probabilities are the closed forms for integer degrees of freedom
(Abramowitz & Stegun 26.7.3–26.7.4), the boundaries a seeded Monte Carlo of the statistic the verdict
computes (docs/methodology.md, "The verdict").
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

MIN_ROUNDS = 3
"""The fewest rounds an interval (and so a verdict other than "cannot tell") is drawn from."""
FIRST_LOOK = 4
"""The first look of ``--rounds auto``: a look at 3 rounds (2 degrees of freedom) stops almost nothing and
costs every later look part of the error budget (``benchmarks/verdict_error.py``)."""
CALIBRATION_PATHS = 40_000
"""Monte Carlo paths of the Pocock calibration (±0.1 pt on a 5 % error rate; about 0.1 s for 20 looks)."""
CALIBRATION_SEED = 20_260_501
"""Seed of the calibration: the same boundaries on every machine and every run."""
CS_PRIOR = 0.1
"""Prior precision ``c`` of the t confidence sequence's mixture (its width at small n; valid for any c)."""


def t_central_mass(t: np.ndarray | float, df: int) -> np.ndarray:
    """``P(|T| < t)`` for Student's t with ``df`` (integer ≥ 1) degrees of freedom, exactly.

    With θ = atan(t/√df): odd df, ``(2/π)(θ + sinθ·Σ a_j cos^(2j+1)θ)``, a_0 = 1, a_j = a_(j−1)·2j/(2j+1),
    j < (df−1)/2; even df, ``sinθ·Σ b_j cos^(2j)θ``, b_0 = 1, b_j = b_(j−1)·(2j−1)/(2j), j < df/2.
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    theta = np.arctan(np.abs(np.asarray(t, dtype=float)) / math.sqrt(df))
    sin, cos2 = np.sin(theta), np.cos(theta) ** 2
    if df % 2:
        if df == 1:
            return 2.0 * theta / math.pi
        term = np.cos(theta)
        total = term.copy()
        for j in range(1, (df - 1) // 2):
            term = term * cos2 * (2 * j) / (2 * j + 1)
            total = total + term
        return np.clip(2.0 / math.pi * (theta + sin * total), 0.0, 1.0)
    term = np.ones_like(theta)
    total = term.copy()
    for j in range(1, df // 2):
        term = term * cos2 * (2 * j - 1) / (2 * j)
        total = total + term
    return np.clip(sin * total, 0.0, 1.0)


def t_two_sided_p(t: np.ndarray | float, df: int) -> np.ndarray:
    """``P(|T| ≥ |t|)``: the two-sided p-value of ``t`` on ``df`` degrees of freedom."""
    return 1.0 - t_central_mass(t, df)


@lru_cache(maxsize=4096)
def t_critical(df: int, alpha: float) -> float:
    """The ``c`` with ``P(|T| ≥ c) = alpha`` on ``df`` degrees of freedom (e.g. 4.3027 for df 2, alpha 0.05).

    Bisection on θ = atan(c/√df) in (0, π/2), where the central mass rises monotonically."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    lo, hi = 0.0, math.pi / 2
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if float(t_central_mass(math.tan(mid) * math.sqrt(df), df)) < 1.0 - alpha:
            lo = mid
        else:
            hi = mid
    return math.tan(0.5 * (lo + hi)) * math.sqrt(df)


def alternate_first(rounds: int) -> list[str]:
    """Which arm runs first in each round of the default ``alternate`` order (launches A B B A A B …):
    base, test, base, test, …"""
    return ["test" if r % 2 else "base" for r in range(rounds)]


def crossover_t(d: np.ndarray, test_first: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The crossover estimate, its standard error and t at every prefix of the rounds, for many paths.

    Args:
        d: log ratios, shape (paths, rounds).
        test_first: (rounds,) bool, the rounds where the test arm ran first.
    Returns:
        (estimate, standard error, t), each (paths, rounds); column n−1 is the look after n rounds.
        The estimate is the mean of the two order groups' means (the plain mean while one group is
        empty); its standard error ``s·√((1/n₁ + 1/n₂)/4)`` (``s/√n`` with one group), s the sample
        standard deviation of all d (n − 1 degrees of freedom).
    """
    d = np.asarray(d, dtype=float)
    g = np.asarray(test_first, dtype=bool)
    n = np.arange(1, d.shape[1] + 1, dtype=float)
    n1 = np.cumsum(g).astype(float)
    n2 = n - n1
    s1 = np.cumsum(np.where(g, d, 0.0), axis=1)
    s2 = np.cumsum(np.where(g, 0.0, d), axis=1)
    both = (n1 > 0) & (n2 > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        est = np.where(both, 0.5 * (s1 / n1 + s2 / n2), (s1 + s2) / n)
        k = np.where(both, np.sqrt(0.25 * (1.0 / n1 + 1.0 / n2)), 1.0 / np.sqrt(n))
        total = s1 + s2
        ss = np.maximum(np.cumsum(d * d, axis=1) - total * total / n, 0.0)
        sd = np.sqrt(ss / (n - 1.0))
        se = sd * k
        t = est / se
    return est, se, t


BOUNDARY_SHAPE = 0.7
"""Wang–Tsiatis shape Δ of the group-sequential boundaries: on the normal scale ``b_n = C·(n/K)^(Δ − 1/2)``
(Δ = 0 is O'Brien–Fleming, 0.5 Pocock). 0.7 spends the error a little earlier than Pocock, so that with
looks 4..16 both ≥ 95 % power at a 5 % difference under heavy-tailed launches and ≤ 6 mean rounds under
5 % step noise hold with a margin (measured: docs/methodology.md; Pocock over 3..10 gives 94 % power
there, O'Brien–Fleming needs more rounds)."""


@lru_cache(maxsize=64)
def boundaries(max_rounds: int, level: float = 0.95) -> tuple[float, ...]:
    """Group-sequential boundaries of the paired crossover t over looks ``FIRST_LOOK``..``max_rounds``.

    The nominal two-sided level of look n is ``erfc(C·(n/K)^(Δ − 1/2)/√2)`` (``BOUNDARY_SHAPE`` Δ), its
    boundary ``c_n = t_critical(n − 1, that level)``; C is set so that under no difference (Gaussian d, the
    ``alternate`` order) the chance that some look has ``|t_n| ≥ c_n`` is ``1 − level``, by bisection over
    ``CALIBRATION_PATHS`` seeded Monte Carlo paths (t is scale-free: one calibration serves every noise
    level; well under a second).

    Returns:
        ``c_n`` for n = FIRST_LOOK..max_rounds (for 16 rounds ≈ 4.26 at 4 rounds, 3.51 at 10, 3.56 at 16).
    """
    levels = nominal_levels(max_rounds, level)
    return tuple(t_critical(n - 1, a) for n, a in zip(range(FIRST_LOOK, max_rounds + 1), levels, strict=True))


@lru_cache(maxsize=64)
def nominal_levels(max_rounds: int, level: float = 0.95) -> tuple[float, ...]:
    """The nominal two-sided level of each look of ``boundaries`` (n = FIRST_LOOK..max_rounds)."""
    if max_rounds < FIRST_LOOK:
        raise ValueError(f"max_rounds must be >= {FIRST_LOOK}, got {max_rounds}")
    rng = np.random.default_rng([CALIBRATION_SEED, max_rounds])
    d = rng.standard_normal((CALIBRATION_PATHS, max_rounds))
    _, _, t = crossover_t(d, np.array([f == "test" for f in alternate_first(max_rounds)]))
    looks = range(FIRST_LOOK, max_rounds + 1)
    p = np.stack([t_two_sided_p(t[:, n - 1], n - 1) for n in looks], axis=1)
    shape = np.array([(n / max_rounds) ** (BOUNDARY_SHAPE - 0.5) for n in looks])

    def nominal(c: float) -> np.ndarray:
        return np.array([math.erfc(c * f / math.sqrt(2.0)) for f in shape])

    lo, hi = 0.5, 8.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if (p <= nominal(mid)[None, :]).any(axis=1).mean() > 1.0 - level:
            lo = mid
        else:
            hi = mid
    return tuple(float(a) for a in nominal(hi))


def cs_half_width(n_eff: float, ss: float, n: int, alpha: float, prior: float = CS_PRIOR) -> float:
    """Half-width (in the units of d) of the anytime-valid t confidence sequence after ``n`` rounds.

    The mixture e-value of a normal mean with unknown variance (Lai 1976; right-Haar prior on σ, normal
    prior of precision ``prior`` on the mean: Pérez-Ortiz et al. 2022, Wang & Ramdas 2023) is
    ``√g·((1 + u)/(1 + u·g))^(n/2)`` with ``g = c/(c + n_eff)``, ``u = n_eff·(mean − θ)²/ss``; θ stays in the
    sequence while it is below 1/alpha, i.e. ``u < (R − 1)/(1 − R·g)`` with ``R = (1/(alpha·√g))^(2/n)``
    (every θ when ``R·g ≥ 1``: ``inf``).

    Args:
        n_eff: effective rounds of the estimate (``1/k²``; n for the plain mean).
        ss: sum of squared deviations of d from their mean.
        n: rounds.
        alpha: 1 − level.
    """
    g = prior / (prior + n_eff)
    r = (1.0 / (alpha * math.sqrt(g))) ** (2.0 / n)
    if r * g >= 1.0:
        return math.inf
    u = (r - 1.0) / (1.0 - r * g)
    return math.sqrt(u * ss / n_eff)
