"""``--rounds auto``: whether one more interleaved round is worth its launches.

Each comparison's ``stats.decide`` says whether it may stop (``stop``): its group-sequential repeated CI
excludes 1 (the arms differ) or is narrower than ``--ci-target`` (whatever difference there is, is
smaller), or the plan's last look is reached. Choosing the number of rounds from the data needs such a
sequential rule: pyperf, criterion.rs, hyperfine, Google Benchmark and asv all fix the count per
comparison (docs/methodology.md). The run stops when every comparison may stop, when the losses disagree
(more rounds cannot make an invalid comparison valid), or at a limit. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fsdpbench.results.summary import RoundsCheck

STOP_SETTLED = "settled"
STOP_MAX_ROUNDS = "max_rounds"
STOP_MAX_TIME = "max_time"
STOP_PARITY = "parity_failed"


def ci_width_pct(ratio: float, ci95: Sequence[float]) -> float:
    """The CI's full width in % of the ratio: ``(high − low) / ratio · 100``."""
    return (ci95[1] - ci95[0]) / ratio * 100.0


def unsettled(comparisons: Sequence[Mapping[str, Any]]) -> list[str]:
    """One phrase per comparison that more rounds could still decide: ``decide`` did not stop it, or stopped it
    only because the plan's last look came without a decision (the run then stops at ``--max-rounds``, not sure)."""
    out = []
    for c in comparisons:
        if c.get("stop") and c.get("decision") != "no difference":
            continue
        name = f"{c['test']}/{c['base']}"
        ci = c.get("ci95")
        if not ci:
            out.append(f"{name} has no interval yet")
        else:
            out.append(
                f"{name}: {c.get('method') or 'CI'} {ci[0]:.3f}..{ci[1]:.3f} holds 1 and is "
                f"{ci_width_pct(c['ratio'], ci):.1f} % wide"
            )
    return out


def check(
    comparisons: Sequence[Mapping[str, Any]],
    *,
    parity_valid: bool,
    rounds: int,
    ci_target_pct: float,
    max_rounds: int,
    elapsed_s: float,
    round_s: float,
    max_time_s: float,
) -> RoundsCheck:
    """After ``rounds`` complete rounds per arm: stop, or add one.

    Args:
        comparisons: summary.json's ``comparisons`` (``test``, ``base``, ``ratio``, ``ci95``, ``stop``).
        parity_valid: summary.json's ``parity.valid``.
        rounds: complete rounds per arm so far.
        ci_target_pct: the futility width (% of the ratio) the comparisons' ``stop`` was decided with.
        max_rounds: no round beyond this many.
        elapsed_s: wall time of the run's launches so far.
        round_s: wall time of the last round (all its arms' launches): the next one's estimate.
        max_time_s: no round that would end past this many seconds of launches (0: no limit).
    """
    if not parity_valid:
        return RoundsCheck(
            rounds, True, STOP_PARITY, f"stopped after {rounds} rounds: the losses differ (parity failed)"
        )
    if not comparisons:
        return RoundsCheck(rounds, True, STOP_SETTLED, f"stopped after {rounds} rounds: nothing to compare")
    open_ = unsettled(comparisons)
    if not open_:
        return RoundsCheck(
            rounds,
            True,
            STOP_SETTLED,
            f"stopped after {rounds} rounds: every comparison's group-sequential 95 % CI excludes 1 or is "
            f"narrower than {ci_target_pct:g} %",
        )
    if rounds >= max_rounds:
        return RoundsCheck(
            rounds,
            True,
            STOP_MAX_ROUNDS,
            f"stopped at --max-rounds {max_rounds}, not sure: {'; '.join(open_)}",
        )
    if max_time_s > 0 and elapsed_s + round_s > max_time_s:
        return RoundsCheck(
            rounds,
            True,
            STOP_MAX_TIME,
            f"stopped after {rounds} rounds: another ({round_s:.0f} s) would pass --max-time {max_time_s:g} s "
            f"({elapsed_s:.0f} s spent), not sure: {'; '.join(open_)}",
        )
    return RoundsCheck(rounds, False, None, f"round {rounds + 1}: {'; '.join(open_)}")
