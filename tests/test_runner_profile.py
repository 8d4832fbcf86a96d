"""The profiling launch (shared session fixture): per-rank Kineto traces, separate from timed rounds."""

from __future__ import annotations

import gzip

import orjson
import pytest

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(420)]


def test_profile_launch_writes_one_kineto_trace_per_rank_recording_the_profile_step(profiled_ab_run):
    run = profiled_ab_run
    manifest = orjson.loads((run / "manifest.json").read_bytes())
    profile_step = manifest["config"]["profile_step"]
    for arm in ("torch", "torch-prefetch1"):
        for rank in (0, 1):
            (trace,) = (run / "profiles" / arm / f"rank{rank}").glob("*.json.gz")
            events = orjson.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
            steps = {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
            assert steps == {f"ProfilerStep#{profile_step}"}
            assert any("Input Dims" in e.get("args", {}) for e in events)  # record_shapes
        status = orjson.loads((run / "launches" / arm / "profile" / "status.json").read_bytes())
        assert status["rc"] == 0 and status["kind"] == "profile" and status["round"] == -1


def test_profile_steps_never_enter_the_timing_statistics(profiled_ab_run):
    steps = [orjson.loads(ln) for ln in (profiled_ab_run / "steps.jsonl").read_bytes().splitlines()]
    assert {s["kind"] for s in steps if s["round"] == -1} == {"profile"}
    summary = orjson.loads((profiled_ab_run / "summary.json").read_bytes())
    timed = sum(1 for s in steps if s["kind"] == "timed" and s["arm"] == "torch")
    assert summary["arms"]["torch"]["rounds"][0]["n_steps"] == timed == 2
    assert summary["profiles"] == {"torch": "profiles/torch", "torch-prefetch1": "profiles/torch-prefetch1"}
