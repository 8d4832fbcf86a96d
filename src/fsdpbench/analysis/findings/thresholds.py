"""The findings' thresholds (documented in the rules table and docs/diagnosis.md) and the names they match."""

from __future__ import annotations

import re

from fsdpbench.trace.table import COLLECTIVE_TYPES

# ---- thresholds (documented in RULES and docs/diagnosis.md ("Findings: the rules")) ---------------------------------
FRAGMENTATION_COUNT_RATIO = 3.0
"""A collective type issued at least this many times more often by one arm ..."""
SIMILAR_BYTES = (0.8, 1.25)
"""... while moving bytes within this ratio of the other's, is fragmented."""
FRAGMENTATION_HIGH_SHARE = 0.10
"""Fragmentation is ``high`` when the fragmented collectives take this share of the step, else ``medium``."""
LOW_OVERLAP_RATIO = 0.5
"""An arm whose overlap ratio is below this ..."""
EXPOSED_SHARE = 0.10
"""... and whose exposed comm is at least this share of its step has a low-overlap finding."""
OVERLAP_GAP = 0.15
"""Also low overlap: an arm whose overlap is this much below the other's ..."""
EXPOSED_GAP_SHARE = 0.05
"""... with exposed comm larger by at least this share of the other arm's step."""
SYNC_RATIO = 2.0
"""A sync/launch count at least this many times the other arm's ..."""
SYNC_MIN_DELTA = 50
"""... and larger by at least this many calls (per rank) is a storm."""
OP_DELTA_SHARE = 0.02
"""An op type whose time differs by at least this share of the base step is a compute-path difference."""
OP_MAX_LISTED = 5
"""At most this many op types are named in the compute-path finding."""
STRAGGLER_SKEW = 0.10
"""A rank whose compute time exceeds the median of the other ranks by this share is a straggler."""
PEAK_MEMORY_RATIO = 1.05
"""Two arms' peak memory (the same measure on both) differing by more than this factor is a finding."""
PLACE_DELTA_SHARE = 0.02
"""A (unit, phase) whose exposed comm is larger in one arm by this share of the base step is named ..."""
PLACE_MAX_LISTED = 3
"""... at most this many places per arm; ``high`` when the largest is at least ``EXPOSED_SHARE`` of the step."""
CRITICAL_MAX_LISTED = 3
"""The critical-path finding names at most this many places (the replay's ``critical``, largest first) ..."""
NEAR_CRITICAL_MANY = 2
"""... and says "many almost-equal paths" when at least this many places are near-critical (slack < 2 % of the
step, the replay's ``near_critical``)."""
PLACE_WAIT_SHARE = 0.5
"""A place whose exposed comm is at least this share waiting (for a late rank) is blamed on that rank."""
IDLE_DELTA_SHARE = 0.10
"""An arm whose idle ("free") time is larger by at least this share of the base step ..."""
IDLE_OF_STEP_DELTA = 0.5
"""... and makes up at least this share of the step-time difference is host-bound by that much."""
IDLE_HIGH_SHARE = 0.5
"""``high`` when the host-bound arm's idle time is at least this share of its own step."""
HCCL_AVG_RE = re.compile(r"^(?P<op>\S+) \(HCCL AVG of (?P<collective>\w+)\)$")
"""Op types the Ascend reader gives the divide kernels torch_npu runs after an AVG collective
(``fsdpbench.trace.ascend.HCCL_AVG_LABEL``)."""

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}

COLLECTIVE_NAMES = {t: t for t in COLLECTIVE_TYPES}
"""Collective types in the order findings and diffs list them, each written as ``analyze`` and the JSON
write it (one spelling everywhere: ``all_gather``, never ``AllGather``)."""
SYNC_NAMES = {
    "barrier": "BARRIER",
    "launch_ffts": "Launch_Ffts",
    "device_synchronize": "DeviceSynchronize",
    "stream_synchronize": "StreamSynchronize",
    "event_synchronize": "EventSynchronize",
    "kernel_launch": "kernel launches",
}


SAME_BYTES_TOL = 0.01
"""Bytes within this relative difference are "same bytes"."""
