"""Checks of the phase times in raw steps.jsonl records, shared by the tests that launch real arms."""

from __future__ import annotations

import math

import pytest

PHASE_NAMES = ("forward", "backward", "optimizer", "remainder")


def assert_phase_split(records: list[dict], world: int, clock: str = "host_clock") -> None:
    """Every record carries each rank's forward/backward/optimizer split; per rank the remainder is the
    rank's own step time minus the three (computed here by hand), so the four sum to it; the record's
    ``time_ms`` (all_reduce MAX of the same times) is the slowest rank's."""
    assert records
    for rec in records:
        ranks = rec["rank_time_ms"]
        assert len(ranks) == world and rec["phase_clock"] == clock, rec
        assert set(rec["phases_ms"]) == set(PHASE_NAMES), rec
        for r in range(world):
            marked = [rec["phases_ms"][p][r] for p in PHASE_NAMES[:3]]
            assert all(v > 0 for v in marked), (rec, r)
            assert rec["phases_ms"]["remainder"][r] == pytest.approx(ranks[r] - math.fsum(marked), abs=1e-9)
            assert rec["phases_ms"]["remainder"][r] >= 0, (rec, r)  # the marks lie inside the timed window
            total = math.fsum(rec["phases_ms"][p][r] for p in PHASE_NAMES)
            assert total == pytest.approx(ranks[r], rel=1e-12), (rec, r)
        assert rec["time_ms"] == max(ranks), rec
