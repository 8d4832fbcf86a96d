"""analysis/crossrank/: measures that need every rank: collectives matched across ranks (waiting vs
transferring), process groups, stragglers, and the step replay (each rank's graph, the joined schedule, the
critical path, what-ifs as edits).

It imports only from its own room and those below it: estimate, rank, output, then trace/, config/, results/
and the leaves (tests/test_layout.py, docs/architecture.md).
"""
