"""The headline rules: a comparison that may mislead, and the profiled step time."""

from __future__ import annotations

from fsdpbench.analysis.findings.records import Finding, RuleInput
from fsdpbench.analysis.findings.rule import Rule
from fsdpbench.fmt import fmt_us, speed_phrase


def rule_invalid_comparison(x: RuleInput) -> list[Finding]:
    if not x.problems:
        return []
    return [
        Finding(
            "invalid_comparison",
            "high",
            f"Comparison may mislead: {x.labels.base} vs {x.labels.test}",
            "; ".join(x.problems),
            "the arms did not run the same workload under the same conditions, so differences mix causes",
            INVALID_COMPARISON.action,
        )
    ]


def rule_step_time(x: RuleInput) -> list[Finding]:
    b, t = x.mean.base, x.mean.test
    sb, st = b.step_time_us, t.step_time_us
    if sb is None or st is None or sb <= 0:
        return []
    parts = []
    for key, name in (("compute_us", "compute"), ("exposed_comm_us", "exposed comm"), ("free_us", "free")):
        vb, vt = getattr(b, key), getattr(t, key)
        if vb is not None and vt is not None:
            parts.append(f"{name} {fmt_us(vb)} → {fmt_us(vt)} ({fmt_us(vt - vb, signed=True)})")
    return [
        Finding(
            "step_time",
            "info",
            f"Profiled step: {speed_phrase(x.labels.test, x.labels.base, st / sb)}",
            f"step {fmt_us(sb)} → {fmt_us(st)} ({fmt_us(st - sb, signed=True)}); " + "; ".join(parts),
            "the findings below attribute the difference",
            STEP_TIME.action,
        )
    ]


INVALID_COMPARISON = Rule(
    "invalid_comparison",
    "parity failed, or world size, analysed ranks, model or profiled steps differ between the arms",
    "high",
    "compare like with like: same model, world size and step; fix parity first",
    rule_invalid_comparison,
)
"""Row of the rules table."""

STEP_TIME = Rule(
    "step_time",
    "always (both step times known): the headline and its breakdown",
    "info",
    "none: read the findings below for the causes",
    rule_step_time,
)
"""Row of the rules table."""
