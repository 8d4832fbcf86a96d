"""Statistics of step times: per-round medians, percentiles, a bootstrap CI of the A/B ratio, and
how many rounds a ±1% CI would need.

The sampling unit is the round (one fresh launch), as in pyperf: steps inside one launch share its
launch-level randomness, so the CI resamples rounds, not steps. numpy only (no torch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fsdpbench.fmt import speed_phrase
from fsdpbench.records import Record

Z95 = 1.959963984540054


def median(values: Sequence[float]) -> float:
    """Median of ``values`` (must be non-empty)."""
    return float(np.median(np.asarray(values, dtype=float)))


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100, linear interpolation) of ``values``."""
    return float(np.percentile(np.asarray(values, dtype=float), q))


def bootstrap_ratio_ci(
    base: Sequence[float],
    test: Sequence[float],
    *,
    n_resamples: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap CI of ``median(test) / median(base)``.

    Each resample draws ``len(base)`` base rounds and ``len(test)`` test rounds with replacement,
    independently, and takes the ratio of their medians.

    Args:
        base, test: per-round median step times of the two arms (any unit, the same for both).
        n_resamples: bootstrap resamples.
        level: confidence level (0.95 → the 2.5th and 97.5th percentiles).
        seed: seed of the resampling generator (the CI is reproducible).
    Returns:
        (low, high) of the ratio.
    """
    b = np.asarray(base, dtype=float)
    t = np.asarray(test, dtype=float)
    if b.size == 0 or t.size == 0:
        raise ValueError("bootstrap_ratio_ci needs at least one round per arm")
    rng = np.random.default_rng(seed)
    b_med = np.median(b[rng.integers(0, b.size, (n_resamples, b.size))], axis=1)
    t_med = np.median(t[rng.integers(0, t.size, (n_resamples, t.size))], axis=1)
    ratios = t_med / b_med
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(ratios, [alpha, 1.0 - alpha])
    return float(low), float(high)


def relative_std(values: Sequence[float]) -> float | None:
    """Sample standard deviation / mean (ddof=1); ``None`` with fewer than two values."""
    v = np.asarray(values, dtype=float)
    if v.size < 2:
        return None
    return float(np.std(v, ddof=1) / np.mean(v))


def rounds_needed(base: Sequence[float], test: Sequence[float], half_width: float = 0.01) -> int | None:
    """Rounds per arm for a 95% CI of the ratio of ±``half_width`` (relative).

    pyperf's sample-size rule ``n = z²σ²/h²`` (``required_nprocesses`` with W = 2h), with σ² the sum
    of the two arms' relative variances of per-round medians (the variance of a ratio, to first
    order). ``None`` when an arm has fewer than two rounds.
    """
    sb, st = relative_std(base), relative_std(test)
    if sb is None or st is None:
        return None
    return max(1, math.ceil(Z95**2 * (sb**2 + st**2) / half_width**2))


def rounds_phrase(base: str, test: str, rounds: tuple[int, int] | None) -> str:
    """``"1 round per arm"``, ``"1 round of torch and 3 of hyper"``, or ``"fewer than 2 rounds in an arm"``."""
    if rounds is None:
        return "fewer than 2 rounds in an arm"
    n_base, n_test = rounds
    if n_base == n_test:
        return f"{n_base} round{'' if n_base == 1 else 's'} per arm"
    return f"{n_base} round{'' if n_base == 1 else 's'} of {base} and {n_test} of {test}"


def verdict_text(
    base: str,
    test: str,
    ratio: float,
    ci95: tuple[float, float] | None,
    rounds: tuple[int, int] | None = None,
) -> str:
    """The one verdict of a comparison, from its numbers alone.

    Three outcomes: a CI that excludes 1 → ``speed_phrase`` ("hyper is 1.25× slower than torch (+25.0%; 95% CI
    ...)"); a CI that contains 1 → "no difference detected"; no CI (an arm with fewer than 2 rounds) →
    "cannot tell yet", never "no difference": one round per arm says nothing about the spread.

    Args:
        base, test: the arms' labels.
        ratio: median(test) / median(base).
        ci95: the bootstrap CI of ``ratio``, ``None`` when an arm has fewer than 2 rounds.
        rounds: (base rounds, test rounds), named in the "cannot tell yet" text when known.
    """
    if ci95 is None:
        counts = rounds_phrase(base, test, rounds)
        return (
            f"cannot tell yet whether {test} differs from {base}: ratio {ratio:.3f} from {counts} has no "
            "confidence interval (a CI needs at least 2 rounds per arm; rerun with --rounds 3 or more)"
        )
    if ci95[0] <= 1.0 <= ci95[1]:
        return (
            f"no difference detected between {test} and {base} "
            f"(ratio {ratio:.3f}, CI {ci95[0]:.3f}..{ci95[1]:.3f})"
        )
    return speed_phrase(test, base, ratio, ci95)


@dataclass(frozen=True)
class Comparison(Record):
    """Test arm against base arm (ratio > 1 means the test arm is slower)."""

    _keys: ClassVar[tuple[str, ...]] = (
        "base",
        "test",
        "ratio",
        "ci95",
        "rounds",
        "time_change_pct",
        "significant",
        "rounds_needed_1pct",
        "verdict",
    )

    base: str
    test: str
    ratio: float
    ci95: tuple[float, float] | None
    significant: bool
    rounds_needed_1pct: int | None
    rounds: tuple[int, int] | None = None
    """Rounds (base, test) the ratio and CI come from."""

    @property
    def time_change_pct(self) -> float:
        """The test arm's step time relative to the base arm's, in % (``(ratio − 1) · 100``; > 0 = slower)."""
        return (self.ratio - 1.0) * 100.0

    @property
    def verdict(self) -> str:
        """``verdict_text``: "<test> is 1.25× slower than <base> (+25.0%; 95% CI 1.21×–1.29×)", "no difference
        detected ..." when the CI contains 1, "cannot tell yet ..." when there is no CI."""
        return verdict_text(self.base, self.test, self.ratio, self.ci95, self.rounds)


def compare_arms(
    base_label: str, test_label: str, base: Sequence[float], test: Sequence[float], *, seed: int = 0
) -> Comparison:
    """Compare per-round medians of two arms: ratio of medians, bootstrap CI (2+ rounds per arm), significance."""
    ratio = median(test) / median(base)
    ci = None
    if len(base) >= 2 and len(test) >= 2:
        ci = bootstrap_ratio_ci(base, test, seed=seed)
    significant = ci is not None and (ci[0] > 1.0 or ci[1] < 1.0)
    return Comparison(
        base_label, test_label, ratio, ci, significant, rounds_needed(base, test), (len(base), len(test))
    )


PEAK_MEMORY_MEASURES = (
    ("peak_mem_allocated_bytes", "peak allocated (device allocator)"),
    ("peak_rss_bytes", "peak resident set (process)"),
)
"""The figures a memory ratio is taken from, in order of preference: the device allocator's peak
allocated where both arms have it (GPU/NPU), else the processes' peak resident set (CPU)."""


def peak_memory_figure(arm: dict[str, Any]) -> tuple[int | None, str | None]:
    """(bytes, label) of an arm's peak memory: the first of ``PEAK_MEMORY_MEASURES`` it has."""
    for key, label in PEAK_MEMORY_MEASURES:
        if arm.get(key) is not None:
            if key == "peak_rss_bytes" and arm.get("peak_rss_since") == "process start":
                label += ", since process start"
            return arm[key], label
    return None, None


def with_memory_ratio(comp: dict[str, Any], base: dict[str, Any], test: dict[str, Any]) -> dict[str, Any]:
    """``comp`` with ``memory`` (the peak-memory ratio test/base and what it measures) and the ratio
    beside the time ratio in its verdict; ``memory`` is None when the arms share no measure."""
    for key, label in PEAK_MEMORY_MEASURES:
        b, t = base.get(key), test.get(key)
        if b and t is not None:
            if key == "peak_rss_bytes" and "process start" in (
                base.get("peak_rss_since"),
                test.get("peak_rss_since"),
            ):
                label += ", since process start"
            comp["memory"] = {"measure": label, "base_bytes": b, "test_bytes": t, "ratio": t / b}
            comp["verdict"] = (
                f"{comp['verdict']}; peak memory {comp['test']}/{comp['base']} {t / b:.3f} ({label})"
            )
            return comp
    comp["memory"] = None
    return comp
