"""The profiled step (shared session fixture): it runs after the timed steps of each arm's first round, in
that launch, with per-rank Kineto traces, and stays out of the statistics; and every launch says where its
time went."""

from __future__ import annotations

import gzip
import math

import orjson
import pytest

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(420)]

ARMS = ("torch", "torch-prefetch1")


def _steps(run):
    return [orjson.loads(ln) for ln in (run / "steps.jsonl").read_bytes().splitlines()]


def test_the_first_round_profiles_after_its_timed_steps_in_the_same_launch(profiled_ab_run):
    run = profiled_ab_run
    cfg = orjson.loads((run / "manifest.json").read_bytes())["config"]
    n_timed = cfg["warmup"] + cfg["steps"]
    for arm in ARMS:
        for rank in (0, 1):
            (trace,) = (run / "profiles" / arm / f"rank{rank}").glob("*.json.gz")
            events = orjson.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
            steps = {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
            # the profiler's own numbering: one step it warms up on (#0), the recorded one (#1)
            assert steps == {"ProfilerStep#1"}
            assert any("Input Dims" in e.get("args", {}) for e in events)  # record_shapes
        assert not (run / "launches" / arm / "profile").exists()  # no launch only to profile
        status = orjson.loads((run / "launches" / arm / "round0" / "status.json").read_bytes())
        assert status["rc"] == 0 and status["kind"] == "timed" and status["round"] == 0
        kinds = [(s["step"], s["kind"]) for s in _steps(run) if s["arm"] == arm and s["round"] == 0]
        assert kinds == [(i, "warmup") for i in range(cfg["warmup"])] + [
            (i, "timed") for i in range(cfg["warmup"], n_timed)
        ] + [(n_timed, "profile"), (n_timed + 1, "profile")]
        assert (run / "memory_step" / arm / "rank0.trace.json.gz").is_file()


def test_profile_steps_never_enter_the_timing_statistics(profiled_ab_run):
    steps = _steps(profiled_ab_run)
    summary = orjson.loads((profiled_ab_run / "summary.json").read_bytes())
    timed = [s["time_ms"] for s in steps if s["kind"] == "timed" and s["arm"] == "torch"]
    assert summary["arms"]["torch"]["rounds"][0]["n_steps"] == len(timed) == 2
    assert summary["arms"]["torch"]["median_ms"] == pytest.approx(sorted(timed)[0] / 2 + sorted(timed)[1] / 2)
    assert summary["profiles"] == {"torch": "profiles/torch", "torch-prefetch1": "profiles/torch-prefetch1"}


def test_each_launch_says_where_its_time_went(profiled_ab_run):
    """status.json's parts add up to the launcher's own wall time; the warm-up, timed and profiled parts
    hold rank 0's own times of those steps (steps.jsonl ``rank_time_ms``: the parts are rank 0's stamps, and
    the slowest rank's first step can include waiting for rank 0 to finish building); summary.json's shares
    are the parts' totals over the launches' wall time, read here from the status files."""
    run = profiled_ab_run
    steps = _steps(run)
    walls, timed_s, init_s = [], [], []
    for arm in ARMS:
        status = orjson.loads((run / "launches" / arm / "round0" / "status.json").read_bytes())
        parts = status["parts_s"]
        assert list(parts) == [
            "start",
            "process_group",
            "model",
            "warmup",
            "timed",
            "profile",
            "teardown",
            "after",
        ]
        assert all(v >= 0 for v in parts.values()), parts
        assert math.fsum(parts.values()) == pytest.approx(status["wall_s"], abs=0.05)
        for kind in ("warmup", "timed", "profile"):
            own = (
                math.fsum(s["rank_time_ms"][0] for s in steps if s["arm"] == arm and s["kind"] == kind) / 1e3
            )
            assert own <= parts[kind] < own + 5.0, (kind, own, parts)
        walls.append(status["wall_s"])
        timed_s.append(parts["timed"])
        init_s.append(parts["start"] + parts["process_group"] + parts["model"])
    share = orjson.loads((run / "summary.json").read_bytes())["launch_time"]
    assert share["launches"] == 2 and share["wall_s"] == pytest.approx(sum(walls), abs=0.01)
    assert share["timed_pct"] == pytest.approx(100 * sum(timed_s) / sum(walls), abs=0.1)
    assert share["init_pct"] == pytest.approx(100 * sum(init_s) / sum(walls), abs=0.1)
    assert sorted((x["arm"], x["round"]) for x in share["per_launch"]) == [(a, 0) for a in ARMS]
