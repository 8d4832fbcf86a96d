"""The ranking of the findings every rule returns."""

from __future__ import annotations

from fsdpbench.analysis.findings.records import Finding, RuleInput
from fsdpbench.analysis.findings.registry import RULE_ORDER, RULES
from fsdpbench.analysis.findings.thresholds import SEVERITY_ORDER


def _gain(f: Finding) -> float:
    delta = None if f.estimate is None else f.estimate.step_time_delta_us
    return 0.0 if delta is None else -delta


def evaluate(x: RuleInput) -> list[Finding]:
    """Run every rule and rank the findings.

    Order: an invalid comparison first, the step-time headline second, then by severity, then by
    the estimated step-time gain (largest first), then by the order of ``RULES``.
    """
    findings = [f for rule in RULES for f in rule.check(x)]
    if all(f.id in ("invalid_comparison", "step_time") for f in findings):
        for f in findings:
            if f.id == "step_time":
                f.cause = "no rule found a cause: the breakdown in the evidence is all there is"
                f.action = "none from the rules: compare the op types and the timeline of the two arms"
    pinned = {"invalid_comparison": 0, "step_time": 1}
    return sorted(
        findings,
        key=lambda f: (pinned.get(f.id, 2), SEVERITY_ORDER.get(f.severity, 9), -_gain(f), RULE_ORDER[f.id]),
    )
