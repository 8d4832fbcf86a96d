"""analysis/output/: what the analysis hands out: the result objects (Analysis, RankMetrics, StepMetrics), the
Analysis JSON's typed records and its one encode and decode.

It imports nothing of analysis/ outside itself (tests/test_layout.py, docs/architecture.md).
"""
