"""The compute rules: op types whose time differs, and a rank that computes longer."""

from __future__ import annotations

from statistics import median

from fsdpbench.analysis.estimate.whatif import Estimate
from fsdpbench.analysis.findings import replay as rp
from fsdpbench.analysis.findings.records import Finding, RuleInput
from fsdpbench.analysis.findings.rule import Rule
from fsdpbench.analysis.findings.thresholds import OP_DELTA_SHARE, OP_MAX_LISTED, STRAGGLER_SKEW
from fsdpbench.fmt import fmt_count, fmt_pct, fmt_us


def rule_compute_path(x: RuleInput) -> list[Finding]:
    step = x.mean.base.step_time_us
    if not step:
        return []
    hits = [r for r in x.ops if abs(r.delta_us) >= OP_DELTA_SHARE * step]
    if not hits:
        return []
    hits = sorted(hits, key=lambda r: -abs(r.delta_us))[:OP_MAX_LISTED]
    lb, lt = x.labels.base, x.labels.test
    net = sum(r.delta_us for r in hits)
    evidence = "; ".join(
        f"{r.op_type} {fmt_us(r.delta_us, signed=True)} ({fmt_us(r.base.us)} → "
        f"{fmt_us(r.test.us)}, count {fmt_count(r.base.count)} → {fmt_count(r.test.count)})"
        for r in hits
    )
    slower = [r for r in hits if r.delta_us > 0]
    faster = [r for r in hits if r.delta_us < 0]
    if net < 0:  # the test arm is faster overall: price what the base would gain from the test's ops
        title, adopter, donor, gain_rows = f"{lt}'s compute path is faster on ", lb, lt, faster
    else:
        title, adopter, donor, gain_rows = f"{lt}'s compute path is slower on ", lt, lb, slower
    title += ", ".join(r.op_type for r in gain_rows)
    return [
        Finding(
            "compute_path",
            "medium" if net > 0 else "info",
            title,
            f"{lt} − {lb} kernel time: {evidence}",
            "the arms run different ops for the same model step (e.g. copies/slices around the flat buffers, "
            "casts for mixed precision)",
            f"adopt {donor}'s path for {', '.join(r.op_type for r in gain_rows)} in {adopter}",
            rp.closed_form(
                Estimate(
                    step_time_delta_us=-sum(abs(r.delta_us) for r in gain_rows),
                    scenario=f"{adopter} runs {donor}'s faster ops; an upper bound on the gain, as compute may "
                    "overlap comm",
                ),
                x.analysis["base" if adopter == lb else "test"],
                f"scale:{gain_rows[0].op_type}:<factor>",
            ),
        )
    ]


def rule_straggler(x: RuleInput) -> list[Finding]:
    findings = []
    for side in ("base", "test"):
        ranks = x.ranks[side]
        key = "compute_us" if all(r.compute_us is not None for r in ranks) else "step_time_us"
        values = [(r.rank, getattr(r, key)) for r in ranks if getattr(r, key) is not None]
        if len(values) < 2:
            continue
        # compare each rank with the median of the *other* ranks (with 2 ranks: the other rank)
        skews = []
        for i, (rank, v) in enumerate(values):
            others = median(w for j, (_, w) in enumerate(values) if j != i)
            if others > 0 and v >= others * (1 + STRAGGLER_SKEW):
                skews.append((v / others - 1, rank, v, others))
        if not skews:
            continue
        _, rank, worst, mid = max(skews)
        lab = x.labels[side]
        what = "compute" if key == "compute_us" else "step time"
        findings.append(
            Finding(
                "straggler",
                "medium",
                f"rank {rank} is a straggler in {lab}",
                f"rank {rank} {what} {fmt_us(worst)} vs {fmt_us(mid)} "
                + (
                    "on the other rank "
                    if len(values) == 2
                    else f"(median of the other {len(values) - 1} ranks) "
                )
                + f"(+{fmt_pct(worst / mid - 1)})",
                "one rank computes longer and every collective waits for it",
                f"find why rank {rank} of {lab} computes longer (placement, imbalance, a noisy neighbour)",
                rp.replay_or_closed_form(
                    x.analysis[side],
                    lambda edit, rank=rank: edit in ("straggler:remove", f"straggler:remove:{rank}"),
                    f"straggler:remove:{rank}",
                    f"rank {rank}'s work at each place is the median of the other ranks' there",
                    Estimate(
                        step_time_delta_us=-(worst - mid),
                        scenario=f"rank {rank} computes as fast as the other ranks (median)",
                    ),
                    rp.preferring(f"straggler:remove:{rank}"),
                ),
                subject=lab,
            )
        )
    return findings


COMPUTE_PATH = Rule(
    "compute_path",
    f"op types whose time differs by >= {OP_DELTA_SHARE:.0%} of the base step (top {OP_MAX_LISTED})",
    "medium when the test arm is slower in total, else info",
    "adopt the faster arm's op path for those op types",
    rule_compute_path,
)
"""Row of the rules table."""

STRAGGLER = Rule(
    "straggler",
    f"a rank's compute time >= {STRAGGLER_SKEW:.0%} above the median of the other ranks",
    "medium",
    "find why that rank computes longer (placement, imbalance, a noisy neighbour)",
    rule_straggler,
)
"""Row of the rules table."""
