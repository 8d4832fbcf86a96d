"""The host-side rules: idle time the host causes, and storms of syncs and launches."""

from __future__ import annotations

from fsdpbench.analysis.estimate.whatif import Estimate
from fsdpbench.analysis.findings.records import Finding, RuleInput, Side
from fsdpbench.analysis.findings.rule import Rule
from fsdpbench.analysis.findings.thresholds import (
    FRAGMENTATION_COUNT_RATIO,
    IDLE_DELTA_SHARE,
    IDLE_HIGH_SHARE,
    IDLE_OF_STEP_DELTA,
    SYNC_MIN_DELTA,
    SYNC_RATIO,
)
from fsdpbench.fmt import fmt_count, fmt_pct, fmt_us


def rule_host_bound(x: RuleInput) -> list[Finding]:
    """An arm whose idle time (the device, or on CPU the training thread, running neither compute nor
    communication) makes up most of its step-time difference: the host sets its pace."""
    b, t = x.mean.base, x.mean.test
    if None in (b.free_us, t.free_us, b.step_time_us, t.step_time_us) or not b.step_time_us:
        return []
    d_free, d_step = t.free_us - b.free_us, t.step_time_us - b.step_time_us
    if abs(d_free) < IDLE_DELTA_SHARE * b.step_time_us or d_free * d_step <= 0:
        return []
    if abs(d_free) < IDLE_OF_STEP_DELTA * abs(d_step):
        return []
    side: Side = "test" if d_free > 0 else "base"
    other = x.other(side)
    m, o = x.mean[side], x.mean[other]
    lab, lab_o = x.labels[side], x.labels[other]
    share = m.free_us / m.step_time_us if m.step_time_us else None
    launches = next((r for r in x.sync if r.name == "kernel_launch"), None)
    evidence = (
        f"idle {fmt_us(m.free_us)} of {lab}'s {fmt_us(m.step_time_us)} step ({fmt_pct(share)}) vs "
        f"{fmt_us(o.free_us)} of {lab_o}'s {fmt_us(o.step_time_us)}: {fmt_us(abs(d_free))} of the "
        f"{fmt_us(abs(d_step))} step difference; compute {fmt_us(o.compute_us)} → {fmt_us(m.compute_us)}"
    )
    if launches is not None and launches[side] is not None and launches[other] is not None:
        evidence += f"; kernel launches {fmt_count(launches[other])} → {fmt_count(launches[side])} per rank"
    cause = (
        "the device (on CPU, the training thread) waits for the host between its work: Python and FSDP "
        "hook work per unit, kernel launches, allocator and synchronisation calls"
    )
    severity = "high" if share is not None and share >= IDLE_HIGH_SHARE else "medium"
    fragmented = any(
        r[side].count and r[other].count and r[side].count / r[other].count >= FRAGMENTATION_COUNT_RATIO
        for r in x.collectives
    )
    if fragmented:  # the cause is the fragmentation finding's: keep this symptom below it
        severity = "medium"
        cause += (
            f"; {lab} also issues several times {lab_o}'s collective calls, and much of its idle time is the "
            "host work around each call, which the fragmentation finding prices"
        )
    return [
        Finding(
            "host_bound",
            severity,
            f"{lab} is host-bound: {fmt_us(abs(d_free))} more idle time than {lab_o}",
            evidence,
            cause,
            HOST_BOUND.action,
            Estimate(label="measured", step_time_delta_us=-abs(d_free), note="the idle-time difference"),
            subject=lab,
        )
    ]


def rule_sync_storm(x: RuleInput) -> list[Finding]:
    findings = []
    for side in ("test", "base"):
        other = x.other(side)
        hits = [
            r
            for r in x.sync
            if r[side] is not None
            and r[other] is not None
            and r[side] - r[other] >= SYNC_MIN_DELTA
            and r[side] >= SYNC_RATIO * r[other]
        ]
        if not hits:
            continue
        lab, lab_o = x.labels[side], x.labels[other]
        evidence = "; ".join(
            f"{r.label} {fmt_count(r[side])} vs {fmt_count(r[other])} (+{fmt_count(r[side] - r[other])} per rank)"
            for r in hits
        )
        findings.append(
            Finding(
                "sync_storm",
                "medium",
                f"{lab} issues far more sync/launch tasks than {lab_o}",
                evidence,
                "synchronisation or a launch per parameter or per collective: each one stalls the host or the "
                "device queue",
                SYNC_STORM.action,
                Estimate(note="not priced: the trace does not give the cost of one sync"),
                subject=lab,
            )
        )
    return findings


HOST_BOUND = Rule(
    "host_bound",
    f"an arm's idle time (neither compute nor comm) is larger by >= {IDLE_DELTA_SHARE:.0%} of the base "
    f"step and makes up >= {IDLE_OF_STEP_DELTA:.0%} of the step-time difference",
    f"high if that idle time is >= {IDLE_HIGH_SHARE:.0%} of the arm's step and the arm is not fragmented "
    "(then the fragmentation finding comes first), else medium",
    "cut host work per step: fewer, larger FSDP units and collectives (fewer hooks and launches), "
    "CUDA/NPU graphs or torch.compile, or a larger batch or sequence so device work covers the host",
    rule_host_bound,
)
"""Row of the rules table."""

SYNC_STORM = Rule(
    "sync_storm",
    f"a sync/launch count >= {SYNC_RATIO:g}x the other arm's and >= {SYNC_MIN_DELTA} more per rank",
    "medium",
    "remove per-parameter synchronisation and launches (fewer, larger operations)",
    rule_sync_storm,
)
"""Row of the rules table."""
