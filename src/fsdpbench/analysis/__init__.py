"""Profile analysis: the study's numbers from raw traces (never imports torch).

``analyze(paths)`` finds the rank profiles under ``paths``, reads them in parallel processes and
returns an :class:`Analysis`: per rank and per profiler step, compute / communication / overlapped /
exposed / free time, overlap ratio, collectives by type, kernel time by op type, sync and launch
counts; across ranks, mean / min / max, the slowest rank and stragglers. The pipeline is in
:mod:`fsdpbench.analysis.pipeline`, the result types in :mod:`fsdpbench.analysis.output.result`.

Its rooms, top to bottom (each imports only from its own room or a lower one; docs/architecture.md): this top
level (the pipeline, its caches, a run folder's derived files), ``compare/`` (two arms side by side),
``findings/`` (the rules), ``crossrank/`` (measures that need every rank), ``estimate/`` (what a change would
buy), ``rank/`` (one rank's measures from its event table), ``output/`` (the result objects).
"""

from fsdpbench.analysis.output.result import Analysis, RankMetrics, StepMetrics
from fsdpbench.analysis.pipeline import NO_COLLECTIVES, RankOutcome, analyze, rank_metrics

__all__ = [
    "NO_COLLECTIVES",
    "Analysis",
    "RankMetrics",
    "RankOutcome",
    "StepMetrics",
    "analyze",
    "rank_metrics",
]
