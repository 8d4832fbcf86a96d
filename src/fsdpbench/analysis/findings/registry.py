"""The rules table: every rule in its documented order (docs/diagnosis.md, "Findings: the rules")."""

from __future__ import annotations

from fsdpbench.analysis.findings import (
    ascend,
    compute,
    fragmentation,
    headline,
    host,
    memory,
    overlap,
    prefetch,
    replay,
)
from fsdpbench.analysis.findings.rule import Rule

RULES: tuple[Rule, ...] = (
    headline.INVALID_COMPARISON,
    headline.STEP_TIME,
    fragmentation.FRAGMENTATION,
    overlap.LOW_OVERLAP,
    overlap.EXPOSED_PLACE,
    prefetch.PREFETCH_CHANGE,
    host.HOST_BOUND,
    host.SYNC_STORM,
    memory.PEAK_MEMORY,
    compute.COMPUTE_PATH,
    compute.STRAGGLER,
    replay.CRITICAL_PATH,
    ascend.HCCL_AVG_DIVISION,
)
RULE_ORDER = {r.id: i for i, r in enumerate(RULES)}
RULE_BY_ID = {r.id: r for r in RULES}
