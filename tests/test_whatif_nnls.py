"""The α–β fits never report a negative fixed or per-byte cost: they are the non-negative least-squares
optimum, checked by its optimality (KKT) conditions and, where scipy is installed, against
``scipy.optimize.nnls`` (scipy is not a dependency of fsdpbench)."""

from __future__ import annotations

import numpy as np
import pytest

from fsdpbench.analysis.estimate import whatif

try:
    from scipy import optimize
except ImportError:  # the KKT check below still proves optimality
    optimize = None


def _kkt(design: np.ndarray, t: np.ndarray, coef: np.ndarray) -> None:
    """NNLS is convex, so ``coef`` is optimal iff the gradient of ½‖Dc − t‖² is 0 on each positive
    coefficient and >= 0 on each coefficient held at 0."""
    grad = design.T @ (design @ coef - t)
    tol = 1e-7 * np.abs(design).sum(axis=0) * (np.abs(t).max() + np.abs(design @ coef).max())
    for j in range(2):
        assert coef[j] >= 0
        if coef[j] > 0:
            assert abs(grad[j]) <= tol[j], (j, coef, grad)
        else:
            assert grad[j] >= -tol[j], (j, coef, grad)


def _nnls(design: np.ndarray, t: np.ndarray) -> np.ndarray:
    """scipy's NNLS on unit-scaled columns (bytes are ~1e6 times the counts), scaled back."""
    scale = np.abs(design).max(axis=0)
    scale[scale == 0] = 1.0
    coef, _ = optimize.nnls(design / scale, t)
    return coef / scale


def _r2(design: np.ndarray, t: np.ndarray, coef: np.ndarray) -> float:
    return 1.0 - float(((t - design @ coef) ** 2).sum()) / float(((t - t.mean()) ** 2).sum())


def _check(fit: whatif.AlphaBetaFit, design: np.ndarray, t: np.ndarray) -> None:
    assert fit.ok and fit.alpha_us >= 0 and fit.beta_us_per_byte >= 0
    got = np.array([fit.alpha_us, fit.beta_us_per_byte])
    _kkt(design, t, got)
    unconstrained, *_ = np.linalg.lstsq(design, t, rcond=None)
    assert fit.constrained == bool((unconstrained < 0).any())
    assert fit.r2 == pytest.approx(_r2(design, t, got), abs=1e-9)
    if optimize is None:
        return
    want = _nnls(design, t)
    # same objective as scipy (the optimum is unique when the columns are independent)
    sse = lambda c: float(((t - design @ c) ** 2).sum())  # noqa: E731
    assert sse(got) == pytest.approx(sse(want), rel=1e-7, abs=1e-9)
    assert got == pytest.approx(want, rel=1e-5, abs=1e-9 * (1 + abs(want).max()))
    assert fit.r2 == pytest.approx(_r2(design, t, want), abs=1e-7)


@pytest.mark.parametrize("seed", range(40))
def test_per_call_fit_is_scipys_nnls_on_random_data(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 60))
    b = np.exp(rng.uniform(np.log(1e3), np.log(5e7), n))
    alpha, beta = rng.uniform(-50, 50), rng.uniform(-1e-4, 1e-4)  # the signs a noisy trace can give
    t = alpha + beta * b + rng.normal(0, 20, n)
    fit = whatif.fit_alpha_beta(b, t)
    _check(fit, np.column_stack([np.ones(n), b]), t)


@pytest.mark.parametrize("seed", range(40))
def test_aggregate_fit_is_scipys_nnls_on_random_data(seed):
    rng = np.random.default_rng(100 + seed)
    m = int(rng.integers(3, 16))
    counts = rng.choice([9, 121, 141], m).astype(float)
    nbytes = rng.uniform(1e6, 3e6, m)
    t = rng.uniform(-30, 60) * counts + rng.uniform(-2e-3, 2e-3) * nbytes + rng.normal(0, 500, m)
    fit = whatif.fit_aggregates(counts, nbytes, t)
    _check(fit, np.column_stack([counts, nbytes]), t)


def test_four_rank_reduce_scatter_with_negative_unconstrained_beta_is_held_at_zero():
    """The shape of the 4-rank CPU case (unconstrained β ≈ −4,975 µs/MB, R² 0.94): larger calls took less
    time. The fit keeps β = 0, α ≥ 0, says the bound was active, and its R² is the constrained model's."""
    nbytes = np.array([0.2e6, 0.4e6, 0.6e6, 0.8e6, 1.0e6, 1.2e6])
    dur = 9000.0 - 4975e-6 * nbytes + np.array([30.0, -40.0, 10.0, 25.0, -35.0, 5.0])
    unconstrained, *_ = np.linalg.lstsq(np.column_stack([np.ones(6), nbytes]), dur, rcond=None)
    assert unconstrained[1] * 1e6 == pytest.approx(-4975, rel=0.02)
    fit = whatif.fit_alpha_beta(nbytes, dur)
    assert fit.constrained and fit.beta_us_per_byte == 0.0
    assert fit.alpha_us == pytest.approx(dur.mean())  # β held at 0: α is the mean duration
    assert fit.r2 == pytest.approx(0.0, abs=1e-9)  # a constant explains none of the variance
    _check(fit, np.column_stack([np.ones(6), nbytes]), dur)


def test_aggregate_fit_with_negative_alpha_keeps_alpha_at_zero():
    counts = np.array([9.0, 9.0, 121.0, 121.0])
    nbytes = np.array([2.0e6, 2.1e6, 2.0e6, 2.1e6])
    t = -5.0 * counts + 1e-3 * nbytes  # more calls, less time: not a physical latency
    fit = whatif.fit_aggregates(counts, nbytes, t)
    assert fit.constrained and fit.alpha_us == 0.0 and fit.beta_us_per_byte > 0
    _check(fit, np.column_stack([counts, nbytes]), t)


def test_unconstrained_optimum_is_kept_and_not_flagged():
    b = np.array([1e3, 1e4, 1e5, 1e6])
    fit = whatif.fit_alpha_beta(b, 20.0 + 1e-4 * b)
    assert not fit.constrained and fit.alpha_us == pytest.approx(20.0) and fit.r2 == pytest.approx(1.0)
