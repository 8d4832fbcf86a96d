"""The Ascend rule: torch_npu's ReduceOp.AVG divides on the HCCL stream."""

from __future__ import annotations

from fsdpbench.analysis.estimate.whatif import Estimate
from fsdpbench.analysis.findings.records import Finding, OpSide, RuleInput, Side
from fsdpbench.analysis.findings.rule import Rule
from fsdpbench.analysis.findings.thresholds import COLLECTIVE_NAMES, HCCL_AVG_RE, OP_DELTA_SHARE
from fsdpbench.fmt import fmt_count, fmt_us


def rule_hccl_avg_division(x: RuleInput) -> list[Finding]:
    """HCCL has no AVG reduce: torch_npu sums, then divides on the HCCL stream, once per collective, so
    an arm that issues more reduce-scatters also runs more divides (the study's "RealDiv 173 vs 73")."""
    per: dict[str, dict[str, OpSide]] = {"base": {}, "test": {}}
    for r in x.ops:
        m = HCCL_AVG_RE.match(r.op_type)
        if not m:
            continue
        for side in ("base", "test"):
            acc = per[side].get(m["collective"], OpSide())
            per[side][m["collective"]] = OpSide(acc.us + r[side].us, acc.count + r[side].count)
    n = {side: sum(v.count for v in per[side].values()) for side in per}
    us = {side: sum(v.us for v in per[side].values()) for side in per}
    if not (n["base"] or n["test"]) or n["base"] == n["test"]:
        return []
    more: Side = "test" if n["test"] > n["base"] else "base"
    fewer = x.other(more)
    lab, lab_o = x.labels[more], x.labels[fewer]
    delta = us[more] - us[fewer]
    step = x.mean.base.step_time_us
    severity = "medium" if step and delta >= OP_DELTA_SHARE * step else "info"

    def side_text(side: str) -> str:
        parts = [
            f"{fmt_count(v.count)} after {COLLECTIVE_NAMES.get(c, c)}"
            for c, v in sorted(per[side].items())
            if v.count
        ]
        return f"{fmt_count(n[side])} ({', '.join(parts) or 'none'}; {fmt_us(us[side])})"

    return [
        Finding(
            "hccl_avg_division",
            severity,
            f"{lab} runs {fmt_count(n[more])} HCCL AVG divides vs {fmt_count(n[fewer])} in {lab_o}",
            f"divide kernels on the HCCL stream: {lab} {side_text(more)}; {lab_o} {side_text(fewer)}",
            "HCCL has no AVG reduce: torch_npu reduces with SUM and then divides on the HCCL stream, one divide "
            "kernel per reduce-scatter/all-reduce, so more (per-parameter) collectives mean as many more divides, "
            "counted as compute",
            HCCL_AVG_DIVISION.action,
            Estimate(
                step_time_delta_us=-delta if delta > 0 else None,
                scenario=f"{lab} runs as many divides as {lab_o}; an upper bound, as they may overlap other work",
            ),
            subject=lab,
        )
    ]


HCCL_AVG_DIVISION = Rule(
    "hccl_avg_division",
    "an arm runs divide kernels on the HCCL stream (torch_npu's ReduceOp.AVG = SUM + one divide per "
    "reduce-scatter/all-reduce) and the arms' counts differ",
    f"medium when the divides' time differs by >= {OP_DELTA_SHARE:.0%} of the base step, else info",
    "fewer, bucketed reduce-scatters (one divide per bucket), or reduce with SUM and scale the gradients once",
    rule_hccl_avg_division,
)
"""Row of the rules table."""
