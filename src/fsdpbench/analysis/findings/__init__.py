"""Findings: explicit rules that turn the differences between two profiles into a ranked diagnosis.

Every rule is one row of ``RULES`` (``registry``): id, when it fires, severity, what to do, and the function
that checks it; each rule (or family of rules) is one module here, beside its row. The thresholds are the
constants of ``thresholds``; docs/diagnosis.md ("Findings: the rules") carries the same table. Rules read the
rank-mean metrics of both arms (``base`` = control, ``test``), the collective/op/sync comparison rows
built by ``fsdpbench.analysis.compare.diff`` and the α–β fits of ``fsdpbench.analysis.estimate.whatif``; ``ranking.evaluate``
runs them all and orders what they find.

Torch-free on purpose.
"""

from __future__ import annotations

from fsdpbench.analysis.findings.ascend import rule_hccl_avg_division
from fsdpbench.analysis.findings.compute import rule_compute_path, rule_straggler
from fsdpbench.analysis.findings.fragmentation import rule_fragmentation
from fsdpbench.analysis.findings.headline import rule_invalid_comparison, rule_step_time
from fsdpbench.analysis.findings.host import rule_host_bound, rule_sync_storm
from fsdpbench.analysis.findings.memory import rule_peak_memory
from fsdpbench.analysis.findings.overlap import rule_exposed_place, rule_low_overlap
from fsdpbench.analysis.findings.prefetch import (
    PREFETCH_DIRECTIONS,
    prefetch_deeper_side,
    rule_prefetch_change,
)
from fsdpbench.analysis.findings.ranking import evaluate
from fsdpbench.analysis.findings.records import (
    METRICS,
    ArmOptions,
    CollectiveRow,
    CollectiveSide,
    Finding,
    OpRow,
    OpSide,
    Pair,
    PeakMemory,
    RuleInput,
    Side,
    SideMetrics,
    SyncRow,
    collective_phrase,
    finite,
    safe_delta,
    safe_ratio,
)
from fsdpbench.analysis.findings.registry import RULE_BY_ID, RULE_ORDER, RULES
from fsdpbench.analysis.findings.rule import Rule
from fsdpbench.analysis.findings.thresholds import (
    COLLECTIVE_NAMES,
    EXPOSED_GAP_SHARE,
    EXPOSED_SHARE,
    FRAGMENTATION_COUNT_RATIO,
    FRAGMENTATION_HIGH_SHARE,
    HCCL_AVG_RE,
    IDLE_DELTA_SHARE,
    IDLE_HIGH_SHARE,
    IDLE_OF_STEP_DELTA,
    LOW_OVERLAP_RATIO,
    OP_DELTA_SHARE,
    OP_MAX_LISTED,
    OVERLAP_GAP,
    PEAK_MEMORY_RATIO,
    PLACE_DELTA_SHARE,
    PLACE_MAX_LISTED,
    PLACE_WAIT_SHARE,
    SAME_BYTES_TOL,
    SEVERITY_ORDER,
    SIMILAR_BYTES,
    STRAGGLER_SKEW,
    SYNC_MIN_DELTA,
    SYNC_NAMES,
    SYNC_RATIO,
)

__all__ = [
    "ArmOptions",
    "COLLECTIVE_NAMES",
    "CollectiveRow",
    "CollectiveSide",
    "EXPOSED_GAP_SHARE",
    "EXPOSED_SHARE",
    "FRAGMENTATION_COUNT_RATIO",
    "FRAGMENTATION_HIGH_SHARE",
    "Finding",
    "HCCL_AVG_RE",
    "IDLE_DELTA_SHARE",
    "IDLE_HIGH_SHARE",
    "IDLE_OF_STEP_DELTA",
    "LOW_OVERLAP_RATIO",
    "METRICS",
    "OP_DELTA_SHARE",
    "OP_MAX_LISTED",
    "OVERLAP_GAP",
    "OpRow",
    "OpSide",
    "PEAK_MEMORY_RATIO",
    "PLACE_DELTA_SHARE",
    "PLACE_MAX_LISTED",
    "PLACE_WAIT_SHARE",
    "PREFETCH_DIRECTIONS",
    "Pair",
    "PeakMemory",
    "RULES",
    "RULE_BY_ID",
    "RULE_ORDER",
    "Rule",
    "RuleInput",
    "SAME_BYTES_TOL",
    "SEVERITY_ORDER",
    "SIMILAR_BYTES",
    "STRAGGLER_SKEW",
    "SYNC_MIN_DELTA",
    "SYNC_NAMES",
    "SYNC_RATIO",
    "Side",
    "SideMetrics",
    "SyncRow",
    "collective_phrase",
    "evaluate",
    "finite",
    "prefetch_deeper_side",
    "rule_compute_path",
    "rule_exposed_place",
    "rule_fragmentation",
    "rule_hccl_avg_division",
    "rule_host_bound",
    "rule_invalid_comparison",
    "rule_low_overlap",
    "rule_peak_memory",
    "rule_prefetch_change",
    "rule_step_time",
    "rule_straggler",
    "rule_sync_storm",
    "safe_delta",
    "safe_ratio",
]
