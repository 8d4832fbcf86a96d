"""analysis/rank/: one rank's measures from its event table alone: overlap, collectives, ops, syncs, units ×
phases and the windows they come from, the memory timeline.

It imports only from its own room and those below it: output, then trace/, config/, results/ and the leaves
(tests/test_layout.py, docs/architecture.md).
"""
