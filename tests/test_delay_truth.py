"""Issue 39's known-delay checks on one real interleaved run (CPU/gloo, 4 ranks, tiny, one `ab` launch per
arm): ``torch``, ``torch`` with D ms on rank 2 at layers.1's backward, and the same plus D2 ms on rank 1 at
the same place (the masking arm). The run is conftest's ``delay_ab_run``, whose clean arm test_replay.py's
4-rank checks read too (one 4-rank launch per arm in the whole suite).

References, each independent of fsdpbench's analysis: the delays injected (D, D2); the profiler's own
Chrome traces read as plain JSON; the worker's host-clock phase times. The replay's checks (the place
that determines the step, ``replay.critical_excess[0]``, "remove"/"add the delay" and masking predicted from the traces) run once the replay
exists (``fsdpbench.analysis.crossrank.replay``, issue 39 points 1-4); the full statistics over many runs with the
5/20/50 ms delays and the timed step as the judge are ``benchmarks/replay_truth.py`` (docs/calibration.md).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import orjson
import pytest

from helpers import (
    DELAY2_MS,
    DELAY_LABELS,
    DELAY_MS,
    DELAY_PHASE,
    DELAY_PROFILE_STEPS,
    DELAY_RANK,
    DELAY_RANK2,
    DELAY_UNIT,
    REPO,
)

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]

D_MS, D2_MS = DELAY_MS, DELAY2_MS
RANK, UNIT, PHASE, RANK2 = DELAY_RANK, DELAY_UNIT, DELAY_PHASE, DELAY_RANK2
CLEAN, DELAYED, MASKED = DELAY_LABELS
HAS_REPLAY = importlib.util.find_spec("fsdpbench.analysis.crossrank.replay") is not None


@pytest.fixture(scope="module")
def delay_run(delay_ab_run) -> Path:
    """The session's known-delay A/B (conftest's ``delay_ab_run``, shared with test_replay.py)."""
    return delay_ab_run


def _records(run: Path, arm: str, kind: str) -> list[dict]:
    rows = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r["arm"] == arm and r["kind"] == kind]


def _range_gaps_us(run: Path, arm: str, rank: int, name: str) -> list[float]:
    """Range start → first operator inside it, in µs, for each range ``name`` on ``rank`` (one per profiled
    step), from the profiler's own trace (plain JSON)."""
    (path,) = (run / "profiles" / arm / f"rank{rank}").glob("*.pt.trace.json*")
    raw = path.read_bytes()
    events = [e for e in orjson.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)["traceEvents"]]
    complete = [e for e in events if e.get("ph") == "X"]
    steps = [e for e in complete if str(e["name"]).startswith("ProfilerStep#")]
    assert len(steps) == DELAY_PROFILE_STEPS, (arm, rank, [e["name"] for e in steps])
    gaps = []
    for rng in (e for e in complete if e["name"] == name):
        start, end = float(rng["ts"]), float(rng["ts"]) + float(rng["dur"])
        first = min(
            float(e["ts"])
            for e in complete
            if e.get("cat") == "cpu_op" and e["tid"] == rng["tid"] and start < float(e["ts"]) < end
        )
        gaps.append(first - start)
    assert len(gaps) == DELAY_PROFILE_STEPS, (arm, rank, name, gaps)  # the range in every profiled step
    return gaps


def test_the_manifest_records_each_arms_delays(delay_run):
    arms = {a["label"]: a for a in orjson.loads((delay_run / "manifest.json").read_bytes())["arms"]}
    assert "delay" not in arms[CLEAN]
    assert arms[DELAYED]["delay"] == [f"{RANK}/{UNIT}/{PHASE}/{D_MS:g}"]
    assert arms[MASKED]["delay"] == [f"{RANK}/{UNIT}/{PHASE}/{D_MS:g}", f"{RANK2}/{UNIT}/{PHASE}/{D2_MS:g}"]


@pytest.mark.parametrize("kind", ["warmup", "timed", "profile"])
def test_every_step_of_a_delayed_arm_holds_the_delay_in_every_ranks_backward(delay_run, kind):
    """The delayed rank sleeps D in its backward; the others wait for it at layers.1's collectives, so every
    rank's backward (host clock, steps.jsonl) lasts at least about D, in the timed steps as in the
    profiled ones."""
    for arm in (DELAYED, MASKED):
        rows = _records(delay_run, arm, kind)
        assert rows, (arm, kind)
        for r in rows:
            backward = r["phases_ms"]["backward"]
            assert backward[RANK] >= D_MS, (arm, r["step"], backward)
            assert min(backward) >= 0.8 * D_MS, (arm, r["step"], backward)


def test_in_every_profiled_step_the_sleep_opens_the_delayed_ranks_unit_range(delay_run):
    """``--profile-steps 2``: both recorded steps hold the unit's range, and the sleep opens it in each."""
    name = f"fsdpbench::{PHASE}::{UNIT}"
    assert min(_range_gaps_us(delay_run, DELAYED, RANK, name)) >= 0.95 * D_MS * 1e3
    assert min(_range_gaps_us(delay_run, MASKED, RANK2, name)) >= 0.95 * D2_MS * 1e3
    for rank in (0, 1, 3):  # no sleep where none was asked
        gaps = _range_gaps_us(delay_run, DELAYED, rank, name)
        assert max(gaps) < 0.5 * D2_MS * 1e3, (rank, gaps)
    assert max(_range_gaps_us(delay_run, CLEAN, RANK, name)) < 0.5 * D2_MS * 1e3


# ------------------------------------------------------------------------------------ the replay
def _replay(run: Path, arm: str, *edits: str) -> dict:
    """The arm's replay with each edit as a what-if (several joined by ``+``: applied together), through
    the benchmark's helper (benchmarks/replay_truth.py ``replay_with_edits``)."""
    spec = importlib.util.spec_from_file_location("replay_truth", REPO / "benchmarks" / "replay_truth.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    replay = bench.replay_with_edits([run / "profiles" / arm], list(edits), what=arm)
    assert replay, f"no replay for {arm}"
    return replay


def _predicted_change_ms(replay: dict, edit: str) -> float:
    """The edit's predicted change per step (both figures per step: the window over ``replay.steps``)."""
    (entry,) = [w for w in replay["what_if"] if w["edit"] == edit]
    return (entry["predicted_step_us"] - replay["step_us"]) / 1e3


def _within(predicted_ms: float, truth_ms: float, step_ms: float) -> bool:
    """Issue 39's bound: max(10 % of the delay, 2 % of the step)."""
    return abs(predicted_ms - truth_ms) <= max(0.10 * abs(truth_ms), 0.02 * step_ms)


@pytest.mark.skipif(
    not HAS_REPLAY, reason="needs the step replay (fsdpbench.analysis.crossrank.replay, branch replay)"
)
def test_the_replay_puts_the_delayed_place_on_top_and_predicts_removing_and_adding_it(delay_run):
    place = (RANK, UNIT, PHASE)
    remove, add = f"delay:{RANK}:{UNIT}:{PHASE}:-{D_MS:g}", f"delay:{RANK}:{UNIT}:{PHASE}:{D_MS:g}"
    delayed = _replay(delay_run, DELAYED, remove)
    top = delayed["critical_excess"][0]  # the place that determines the step (docs/replay.md)
    assert (top["rank"], top["unit"], top["phase"]) == place, delayed["critical_excess"][:3]
    assert top["excess_us"] >= 0.9 * D_MS * 1e3, top  # the sleep, which the other ranks do not have
    assert delayed["steps"] == DELAY_PROFILE_STEPS
    assert min(top["excess_per_step_us"]) >= 0.9 * D_MS * 1e3, top  # in each step: the median is one of them
    step = delayed["step_us"] / 1e3
    removed = _predicted_change_ms(delayed, remove)
    assert _within(removed, -D_MS, step), removed
    clean = _replay(delay_run, CLEAN, add)
    added = _predicted_change_ms(clean, add)
    assert _within(added, D_MS, step), added


@pytest.mark.skipif(
    not HAS_REPLAY, reason="needs the step replay (fsdpbench.analysis.crossrank.replay, branch replay)"
)
def test_the_replay_masks_the_smaller_delay_at_the_same_place(delay_run):
    """D on rank 2 and D2 on rank 1 at one place cost D, not D + D2: predicted by adding both to the clean
    arm's trace, and measured (the lowest of each arm's timed and profiled steps, the least disturbed by
    the machine's load): the masking arm's step closer to the delayed arm's than to it + D2."""
    both = f"delay:{RANK2}:{UNIT}:{PHASE}:{D2_MS:g}+delay:{RANK}:{UNIT}:{PHASE}:{D_MS:g}"
    clean = _replay(delay_run, CLEAN, both)
    step = clean["step_us"] / 1e3
    predicted = _predicted_change_ms(clean, both)
    assert _within(predicted, D_MS, step), predicted

    def lowest(arm: str) -> float:
        return min(r["time_ms"] for kind in ("timed", "profile") for r in _records(delay_run, arm, kind))

    # judged against the delayed arm of the same run, not against D: on this CPU box a sleep costs the step
    # more than itself (150 ms measured +178 to +191 ms here: the other ranks' waits compete for the cores
    # when the sleeper wakes, docs/calibration.md), so D2 masked means the masking arm's step is the delayed
    # arm's, not the delayed arm's + D2
    added = lowest(MASKED) - lowest(DELAYED)
    assert abs(added) < abs(added - D2_MS), (lowest(CLEAN), lowest(DELAYED), lowest(MASKED))
    masked = _replay(delay_run, MASKED, f"delay:{RANK2}:{UNIT}:{PHASE}:-{D2_MS:g}")
    top = masked["critical_excess"][0]
    assert (top["rank"], top["unit"], top["phase"]) == (RANK, UNIT, PHASE), masked["critical_excess"][:3]
    assert abs(_predicted_change_ms(masked, f"delay:{RANK2}:{UNIT}:{PHASE}:-{D2_MS:g}")) <= 0.10 * D_MS
