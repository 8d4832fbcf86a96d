"""analysis/estimate/: cost models that price a change: the α–β fit of each collective type and what regrouping
or prefetch would buy, per type and per (unit, phase).

It imports only from its own room and those below it: rank, output, then trace/, config/, results/ and the
leaves (tests/test_layout.py, docs/architecture.md).
"""
