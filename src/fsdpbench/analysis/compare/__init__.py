"""analysis/compare/: two arms side by side: the diff (collectives, ops, syncs, fits, the findings run, the
estimates) and the calibration of each estimate against the arm that measures the change.

It imports only from its own room and those below it: findings, crossrank, estimate, rank, output, then
trace/, config/, results/ and the leaves (tests/test_layout.py, docs/architecture.md).
"""
