"""Statistics of step times: per-round medians, percentiles, the verdict (``decide``) and how many rounds
a ±1% CI would need.

The sampling unit is the round (one fresh launch), as in pyperf: steps inside one launch share its
launch-level randomness. Both arms launch back to back in a round, so the verdict compares them on the
paired per-round log ratio (docs/methodology.md, "The verdict"). numpy only (no torch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fsdpbench.fmt import speed_phrase
from fsdpbench.records import Record
from fsdpbench.results import sequential

Z95 = 1.959963984540054


def median(values: Sequence[float]) -> float:
    """Median of ``values`` (must be non-empty)."""
    return float(np.median(np.asarray(values, dtype=float)))


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100, linear interpolation) of ``values``."""
    return float(np.percentile(np.asarray(values, dtype=float), q))


BOOTSTRAP_RULE = "percentile bootstrap, unpaired"
"""The rule of summaries before schema 2 (``summary.json`` ``schema_version`` 1): a 95 % percentile
bootstrap of median(test)/median(base) over each arm's rounds resampled independently; at 3 rounds it
is the [min/max, max/min] range and says "slower/faster" for 10 % of identical arms (docs/methodology.md)."""
PAIRED_T = "paired t"
GROUP_SEQUENTIAL = "group-sequential"
CONFIDENCE_SEQUENCE = "confidence sequence"

SLOWER = "slower"
FASTER = "faster"
NO_DIFFERENCE = "no difference"
CANNOT_TELL = "cannot tell"


@dataclass(frozen=True, slots=True)
class Decision(Record):
    """What ``decide`` makes of the rounds so far (``summary.json`` ``comparisons[]`` carries it)."""

    ratio: float
    """``exp`` of the crossover mean of d_r = log(test_r / base_r): > 1 means the test arm is slower."""
    lo: float | None
    """Low end of the interval of ``ratio`` (None below ``sequential.MIN_ROUNDS`` rounds, or before the first
    look of ``--rounds auto``)."""
    hi: float | None
    verdict: str
    """``slower``, ``faster``, ``no difference``, ``no difference larger than X %`` (the interval is
    narrower than ``--ci-target``: X is its larger distance from 1) or ``cannot tell``."""
    stop: bool
    """Under ``--rounds auto``: stop after this round. Under ``--rounds N``: N rounds are done."""
    reason: str
    """Why this verdict and ``stop``, in words."""
    method: str
    """``paired t``, ``group-sequential``, ``confidence sequence`` or "" (no interval)."""
    rounds: int
    """Rounds paired (both arms ran)."""
    look: int | None = None
    """Group-sequential: this look's number (rounds − 3) …"""
    looks: int | None = None
    """… of this many planned (max rounds − 3); the confidence sequence: the planned looks it went past."""
    level: float = 0.95
    spread: float | None = None
    """Standard deviation of d_r (≈ the relative spread of the per-round ratio); None below 2 rounds."""

    @property
    def interval_name(self) -> str:
        """``"95 % CI (paired t, 3 rounds)"``, ``"95 % CI (group-sequential, look 3 of 8)"`` or
        ``"95 % confidence sequence (past the 8 planned looks, 11 rounds)"``: what ``lo``..``hi`` is."""
        return interval_name(self.method, self.level, self.rounds, self.look, self.looks)


def interval_name(
    method: str | None, level: float | None, rounds: int | None, look: int | None, looks: int | None
) -> str:
    """The closing words of a verdict's interval, from the fields a summary records (``Decision.interval_name``)."""
    pct = f"{(level or 0.95) * 100:g} %"
    if method == GROUP_SEQUENTIAL:
        return f"{pct} CI ({GROUP_SEQUENTIAL}, look {look} of {looks})"
    if method == CONFIDENCE_SEQUENCE:
        return f"{pct} confidence sequence (past the {looks} planned look{'' if looks == 1 else 's'}, {rounds} rounds)"
    if method == PAIRED_T:
        return f"{pct} CI ({PAIRED_T}, {rounds} rounds)"
    if method == BOOTSTRAP_RULE:
        return f"95% CI ({BOOTSTRAP_RULE}: the rule of schema 1)"
    if method:
        return f"{pct} CI ({method})"
    return "95% CI"


def paired_log_ratios(base: Sequence[float], test: Sequence[float]) -> list[float]:
    """d_r = log(test_r / base_r) of per-round medians in round order (every value > 0)."""
    if len(base) != len(test):
        raise ValueError(f"base has {len(base)} rounds and test {len(test)}: pair them round by round")
    bad = [v for v in (*base, *test) if not v > 0]
    if bad:
        raise ValueError(f"round medians must be > 0 (log ratios), got {bad[0]!r}")
    return [math.log(t / b) for b, t in zip(base, test, strict=True)]


def crossover_estimate(d: Sequence[float], first: Sequence[str]) -> tuple[float, float, float | None]:
    """(estimate, k, s): the crossover mean of ``d``, its standard-error factor and the spread of d.

    The estimate is the average of the mean over rounds where the test ran first and the mean over rounds
    where the base did, so a first-in-round effect cancels whatever the counts (the plain mean while one
    order has no round); its standard error is ``s·k`` with ``k = √((1/n₁ + 1/n₂)/4)`` (``1/√n`` with one
    order) and s the sample standard deviation of all d (n − 1 degrees of freedom; a first-in-round effect
    can only widen it). At balanced counts (every even n of the ``alternate`` or ``shuffle`` order) this is
    the textbook paired t."""
    if len(first) != len(d):
        raise ValueError(f"first names {len(first)} rounds, the arms have {len(d)}")
    if any(f not in ("base", "test") for f in first):
        raise ValueError(f"first[r] must be 'base' or 'test', got {sorted(set(first))}")
    n = len(d)
    g1 = [x for x, f in zip(d, first, strict=True) if f == "test"]
    g2 = [x for x, f in zip(d, first, strict=True) if f == "base"]
    if g1 and g2:
        est = 0.5 * (sum(g1) / len(g1) + sum(g2) / len(g2))
        k = math.sqrt(0.25 * (1.0 / len(g1) + 1.0 / len(g2)))
    else:
        est, k = sum(d) / n, 1.0 / math.sqrt(n)
    if n < 2:
        return est, k, None
    mean = sum(d) / n
    return est, k, math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))


def decide(
    base: Sequence[float],
    test: Sequence[float],
    first: Sequence[str],
    *,
    max_rounds: int,
    ci_target: float,
    level: float = 0.95,
    planned: int | None = None,
) -> Decision:
    """The verdict of test against base from their per-round medians: the one rule of fsdpbench.

    d_r = log(test_r / base_r); the ratio is exp of its crossover mean (``crossover_estimate``).
    - ``planned`` = N (``--rounds N``): the paired t interval at ``level`` (n − 1 degrees of freedom);
      "cannot tell" below 3 rounds; ``stop`` once N rounds are in.
    - ``planned`` None (``--rounds auto``): a group-sequential test over looks 4..``max_rounds``
      (``sequential.boundaries``: Pocock-type, Wang–Tsiatis Δ 0.7), reported as the repeated CI
      ``exp(est ± c_n·s·k)``; stop when it excludes 1 (slower/faster), when it is narrower than
      ``ci_target`` % of the ratio ("no difference larger than X %") or at look ``max_rounds``.
      Past ``max_rounds`` (a continuation the plan did not foresee: a ``--resume`` that raised
      ``--max-rounds``) the anytime-valid t confidence sequence (``sequential.cs_half_width``) instead;
      ``stop`` is then never forced by the count (the caller's limit is).

    Args:
        base, test: per-round medians of the two arms, in round order, paired by round.
        first: per round, ``"base"`` or ``"test"``: the arm that ran first.
        max_rounds: the rounds the group-sequential plan covers (``--max-rounds``).
        ci_target: the futility width, in % of the ratio (``--ci-target``).
        level: confidence level.
        planned: N under ``--rounds N``, None under ``--rounds auto``.
    """
    d = paired_log_ratios(base, test)
    n = len(d)
    if n == 0:
        raise ValueError("decide needs at least one round of each arm")
    est, k, sd = crossover_estimate(d, first)
    ratio = math.exp(est)
    alpha = 1.0 - level
    if n < sequential.MIN_ROUNDS or (planned is None and n < sequential.FIRST_LOOK):
        need = sequential.MIN_ROUNDS if planned is not None else sequential.FIRST_LOOK
        return Decision(
            ratio, None, None, CANNOT_TELL, planned is not None and n >= planned,
            f"{n} round{'s' if n > 1 else ''}: " + (
                f"an interval needs at least {need}" if planned is not None
                else f"--rounds auto looks first after {need}"),
            "", n, level=level, spread=sd,
        )  # fmt: skip
    se = (sd or 0.0) * k
    look = looks = None
    if planned is not None:
        method, half = PAIRED_T, sequential.t_critical(n - 1, alpha) * se
        stop = n >= planned
    elif n <= max_rounds:
        method = GROUP_SEQUENTIAL
        look, looks = n - sequential.FIRST_LOOK + 1, max_rounds - sequential.FIRST_LOOK + 1
        half = sequential.boundaries(max_rounds, level)[n - sequential.FIRST_LOOK] * se
        stop = n >= max_rounds
    else:
        method, looks = CONFIDENCE_SEQUENCE, max_rounds - sequential.FIRST_LOOK + 1
        half = sequential.cs_half_width(1.0 / k**2, (sd or 0.0) ** 2 * (n - 1), n, alpha)
        stop = False
    if math.isinf(half):  # the confidence sequence is still the whole line (not past 4 rounds: never here)
        return Decision(ratio, None, None, CANNOT_TELL, stop, "the confidence sequence is unbounded yet",
                        method, n, look, looks, level, sd)  # fmt: skip
    lo, hi = math.exp(est - half), math.exp(est + half)
    width_pct = (hi - lo) / ratio * 100.0
    if lo > 1.0 or hi < 1.0:
        verdict, stop = (SLOWER if lo > 1.0 else FASTER), stop or planned is None
        reason = "the interval excludes 1"
    elif planned is None and width_pct < ci_target:
        verdict, stop = f"{NO_DIFFERENCE} larger than {max(hi - 1.0, 1.0 - lo) * 100:.1f} %", True
        reason = (
            f"the interval holds 1 and is {width_pct:.1f} % wide, narrower than the target {ci_target:g} %"
        )
    else:
        verdict = NO_DIFFERENCE
        reason = f"the interval holds 1 and is {width_pct:.1f} % wide"
        if planned is None and stop:
            reason += f" at the last planned look ({max_rounds} rounds)"
    if method == CONFIDENCE_SEQUENCE:
        reason += f"; past the {max_rounds} rounds the group-sequential plan covered: anytime-valid confidence sequence"
    return Decision(ratio, lo, hi, verdict, stop, reason, method, n, look, looks, level, sd)


def rounds_needed(base: Sequence[float], test: Sequence[float], half_width: float = 0.01) -> int | None:
    """Rounds for a 95% CI of the ratio of ±``half_width`` (relative), from the paired spread.

    pyperf's sample-size rule ``n = z²σ²/h²`` (``required_nprocesses`` with W = 2h) with σ the standard
    deviation of the per-round log ratios d_r = log(test_r / base_r) (rounds paired in order; the shorter
    arm's count). ``None`` with fewer than two paired rounds."""
    n = min(len(base), len(test))
    if n < 2:
        return None
    d = paired_log_ratios(list(base)[:n], list(test)[:n])
    sd = float(np.std(d, ddof=1))
    return max(1, math.ceil(Z95**2 * sd**2 / half_width**2))


def rounds_phrase(base: str, test: str, rounds: tuple[int, int] | None) -> str:
    """``"1 round per arm"``, ``"1 round of torch and 3 of hyper"``, or ``"fewer than 3 rounds in an arm"``."""
    if rounds is None:
        return f"fewer than {sequential.MIN_ROUNDS} rounds in an arm"
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
    *,
    interval: str = "95% CI",
    decision: str | None = None,
) -> str:
    """The one verdict sentence of a comparison, from its numbers.

    A ``decision`` of slower/faster (or, without one, an interval that excludes 1) → ``speed_phrase``
    ("hyper is 1.25× slower than torch (+25.0%; 95 % CI (paired t, 3 rounds) 1.21×–1.29×)"); "no difference
    larger than X %" → that, then the ratio and interval; an interval that holds 1 → "no difference detected";
    no interval → "cannot tell yet", never "no difference".

    Args:
        base, test: the arms' labels.
        ratio: test time / base time.
        ci95: the interval of ``ratio``; None when it has none.
        rounds: (base rounds, test rounds), named in the "cannot tell yet" text when known.
        interval: what the interval is (``Decision.interval_name``; the rule of an older summary).
        decision: ``Decision.verdict`` when known.
    """
    if ci95 is None:
        counts = rounds_phrase(base, test, rounds)
        return (
            f"cannot tell yet whether {test} differs from {base}: ratio {ratio:.3f} from {counts} has no "
            f"confidence interval (an interval needs at least {sequential.MIN_ROUNDS} rounds per arm, "
            f"--rounds auto looks first after {sequential.FIRST_LOOK})"
        )
    shown = f"{interval} {ci95[0]:.3f}..{ci95[1]:.3f}"
    if decision and decision.startswith(f"{NO_DIFFERENCE} larger than"):
        return f"{decision} between {test} and {base} (ratio {ratio:.3f}, {shown})"
    if ci95[0] <= 1.0 <= ci95[1]:
        return f"no difference detected between {test} and {base} (ratio {ratio:.3f}, {shown})"
    return speed_phrase(test, base, ratio, ci95, ci_name=interval)


@dataclass(frozen=True)
class Comparison(Record):
    """Test arm against base arm (ratio > 1 means the test arm is slower): ``decide``'s decision with the
    arms' labels, as ``summary.json`` ``comparisons[]`` stores it."""

    _keys: ClassVar[tuple[str, ...]] = (
        "base",
        "test",
        "ratio",
        "ci95",
        "rounds",
        "time_change_pct",
        "significant",
        "rounds_needed_1pct",
        "method",
        "look",
        "looks",
        "level",
        "decision",
        "stop",
        "reason",
        "verdict",
    )

    base: str
    test: str
    decided: Decision
    rounds: tuple[int, int] | None = None
    """Rounds (base, test) each arm has; the decision pairs the rounds both have."""
    rounds_needed_1pct: int | None = None

    @property
    def ratio(self) -> float:
        return self.decided.ratio

    @property
    def ci95(self) -> tuple[float, float] | None:
        """The decision's interval (named by ``method``; the key keeps its old name)."""
        d = self.decided
        return None if d.lo is None or d.hi is None else (d.lo, d.hi)

    @property
    def significant(self) -> bool:
        return self.decided.verdict in (SLOWER, FASTER)

    @property
    def method(self) -> str:
        return self.decided.method

    @property
    def look(self) -> int | None:
        return self.decided.look

    @property
    def looks(self) -> int | None:
        return self.decided.looks

    @property
    def level(self) -> float:
        return self.decided.level

    @property
    def decision(self) -> str:
        return self.decided.verdict

    @property
    def stop(self) -> bool:
        return self.decided.stop

    @property
    def reason(self) -> str:
        return self.decided.reason

    @property
    def time_change_pct(self) -> float:
        """The test arm's step time relative to the base arm's, in % (``(ratio − 1) · 100``; > 0 = slower)."""
        return (self.ratio - 1.0) * 100.0

    @property
    def verdict(self) -> str:
        """``verdict_text``: "<test> is 1.25× slower than <base> (+25.0%; 95 % CI (paired t, 3 rounds) …)",
        "no difference detected …", "no difference larger than 1.2 % …" or "cannot tell yet …"."""
        return verdict_text(
            self.base,
            self.test,
            self.ratio,
            self.ci95,
            self.rounds,
            interval=self.decided.interval_name,
            decision=self.decision,
        )


def compare_arms(
    base_label: str,
    test_label: str,
    base: Mapping[int, float],
    test: Mapping[int, float],
    first: Mapping[int, str],
    *,
    max_rounds: int,
    ci_target: float,
    level: float = 0.95,
    planned: int | None = None,
) -> Comparison:
    """``decide`` on the rounds both arms have (round → median; ``first``: round → "base"/"test"),
    with the arms' labels, their round counts and the rounds-needed advice."""
    paired = sorted(set(base) & set(test))
    b, t = [base[r] for r in paired], [test[r] for r in paired]
    counts = (len(base), len(test))
    if not paired:
        ratio = median(list(test.values())) / median(list(base.values())) if base and test else math.nan
        decided = Decision(ratio, None, None, CANNOT_TELL, False, "no round in which both arms ran", "", 0)
        return Comparison(base_label, test_label, decided, counts, None)
    decided = decide(
        b,
        t,
        [first.get(r, "base") for r in paired],
        max_rounds=max_rounds,
        ci_target=ci_target,
        level=level,
        planned=planned,
    )
    return Comparison(base_label, test_label, decided, counts, rounds_needed(b, t))


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
