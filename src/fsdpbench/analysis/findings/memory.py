"""The peak-memory rule: the arms' peaks differ."""

from __future__ import annotations

from fsdpbench.analysis.findings.records import Finding, RuleInput
from fsdpbench.analysis.findings.rule import Rule
from fsdpbench.analysis.findings.thresholds import PEAK_MEMORY_RATIO
from fsdpbench.analysis.rank import memory_timeline
from fsdpbench.fmt import fmt_bytes


def rule_peak_memory(x: RuleInput) -> list[Finding]:
    b, t = x.peak_memory.base, x.peak_memory.test
    if b is None or t is None or b.measure != t.measure or b.bytes <= 0:
        return []
    ratio = t.bytes / b.bytes
    if 1 / PEAK_MEMORY_RATIO <= ratio <= PEAK_MEMORY_RATIO:
        return []
    higher = "test" if ratio > 1 else "base"
    causes = []
    ab, at = x.arms.base, x.arms.test
    if ab.prefetch is not None and at.prefetch is not None and ab.prefetch != at.prefetch:
        causes.append(f"prefetch {ab.prefetch} vs {at.prefetch} (each prefetched unit is held unsharded)")
    if ab.reshard_after_forward != at.reshard_after_forward:
        causes.append("reshard_after_forward differs (unresharded units stay gathered until backward)")
    if ab.backend != at.backend:
        causes.append(
            f"backends {ab.backend} vs {at.backend} (their communication buffers and caches differ)"
        )
    cause = (
        "; ".join(causes)
        if causes
        else "the arm options the diff knows do not differ in a memory-relevant way"
    )
    mb, mtest = x.memory_peaks.base, x.memory_peaks.test
    if mb is not None and mtest is not None:
        cause += f"; in the memory step (rank {mb['rank']}): " + memory_timeline.difference_text(
            x.labels.base, x.labels.test, mb, mtest
        )
    else:
        cause += "; where in the step (phase, unit, category): no memory timeline (profile the run)"
    return [
        Finding(
            "peak_memory",
            "medium" if higher == "test" else "info",
            f"{x.labels.test} peaks {abs(ratio - 1):.0%} {'higher' if ratio > 1 else 'lower'} in memory "
            f"than {x.labels.base}",
            f"{b.measure}: {fmt_bytes(b.bytes)} ({x.labels.base}) → {fmt_bytes(t.bytes)} ({x.labels.test}), "
            f"test/base {ratio:.3f}",
            cause,
            PEAK_MEMORY.action,
            subject=x.labels[higher],
        )
    ]


PEAK_MEMORY = Rule(
    "peak_memory",
    f"the arms' peak memory (same measure on both) differs by more than {PEAK_MEMORY_RATIO - 1:.0%}",
    "medium when the test arm peaks higher, else info",
    "check the higher arm fits the target device with `fsdpbench model --device`; trade prefetch depth "
    "or activation checkpointing for memory",
    rule_peak_memory,
)
"""Row of the rules table."""
