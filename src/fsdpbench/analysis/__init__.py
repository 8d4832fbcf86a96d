"""Profile analysis: the study's numbers from raw traces (never imports torch).

``analyze(paths)`` finds the rank profiles under ``paths``, reads them in parallel processes and
returns an :class:`Analysis`: per rank and per profiler step, compute / communication / overlapped /
exposed / free time, overlap ratio, collectives by type, kernel time by op type, sync and launch
counts; across ranks, mean / min / max, the slowest rank and stragglers. The pipeline is in
:mod:`fsdpbench.analysis.pipeline`, the result types in :mod:`fsdpbench.analysis.result`.
"""

from fsdpbench.analysis.pipeline import NO_COLLECTIVES, RankOutcome, analyze, rank_metrics
from fsdpbench.analysis.result import Analysis, RankMetrics, StepMetrics

__all__ = [
    "NO_COLLECTIVES",
    "Analysis",
    "RankMetrics",
    "RankOutcome",
    "StepMetrics",
    "analyze",
    "rank_metrics",
]
