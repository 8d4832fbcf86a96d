"""The step replay over several profiled steps (``--profile-steps K``, docs/replay.md "Several profiled steps"):
hand-built CPU/gloo traces of 3 ranks × K steps whose per-step critical path and excess are worked out by hand
below, the delay what-ifs applied in every step, and the replay graph cache carrying the step windows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# Times in µs after T0. Every step k of every rank has the same program, two places, each a host gap (a sleep
# where the unit's range opens), a 10 µs compute, a 1 µs all_reduce launch, then the thread blocks until the
# gloo span (launch end → transfer end) is over; the transfer is 10 µs after the last arrival:
#   layers.0 forward: gap gA, mm [+gA, +10), launch [.., +1), arrival = S + gA + 11; ends L_A + 10
#   layers.1 forward: gap gB, mm 10, launch 1, arrival = (L_A + 10) + gB + 11; the step ends at L_B + 10,
# then a 5 µs compute outside the units (the optimizer's place), and the step ends, where the next step's
# ProfilerStep starts on every rank (so the ranks' steps stay aligned).
# Rank 0 stalls 100 µs once, at layers.0 in step 2 (the OS stalling a rank that shares a core); rank 1 sleeps
# 20 µs at layers.1 in every step (a delay= arm); rank 2 has no gap.
#   a step without the stall: layers.0 all arrive at 11 → ends at 21; layers.1 rank 1 arrives last at
#     21 + 20 + 11 = 52 → ends at 62; the step ends at 67.
#   step 2: layers.0 rank 0 arrives last at 111 → ends at 121; layers.1 121 + 31 = 152 → ends at 162; the
#     step ends at 167.
# The critical path runs through rank 0's stall (100 µs of host gap) in step 2 and through rank 1's 20 µs gap
# at layers.1 in every step; the other ranks have no gap there, so the excess (own − the others' median,
# as far as it lies on the path) is 100 for (0, layers.0, forward) in step 2 only and 20 for
# (1, layers.1, forward) in each step. Over 3 steps: medians 0 and 20 → rank 1's place is first; step 2 alone
# (one profiled step, as before): 100 against 20 → the stall is first.
T0 = 1_000.0
STALL_STEP = 1  # 0-based: ProfilerStep#2


def _gaps(rank: int, step: int) -> tuple[float, float]:
    """(gap at layers.0, gap at layers.1) of ``rank`` in ``step`` (0-based)."""
    return (100.0 if rank == 0 and step == STALL_STEP else 0.0, 20.0 if rank == 1 else 0.0)


def _x(name: str, ts: float, dur: float, tid: int = 100, cat: str = "cpu_op") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": T0 + ts, "dur": dur}


def _steps_rank(rank: int, n_steps: int, ranks: int = 3) -> dict:
    ann = "user_annotation"
    ev = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 100, "args": {"name": "thread 100 (python3)"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 200, "args": {"name": "thread 200 (pt_gloo_runloop)"}},
    ]  # fmt: skip
    start = 0.0
    for k in range(n_steps):
        ends = []
        s = start
        for unit, i in (("layers.0", 0), ("layers.1", 1)):
            arrivals = [s + _gaps(r, k)[i] + 11 for r in range(ranks)]
            last = max(arrivals)
            mine = s + _gaps(rank, k)[i]
            ev += [
                _x(f"fsdpbench::forward::{unit}", s, last + 10 - s, cat=ann),
                _x("aten::mm", mine, 10),
                _x("c10d::allreduce_", mine + 10, 1),
                _x("gloo:all_reduce", mine + 11, last + 10 - (mine + 11), tid=200, cat=ann),
            ]
            s = last + 10
            ends.append(s)
        ev.append(_x("aten::add_", s, 5))
        s += 5
        ev.append(_x(f"ProfilerStep#{k + 1}", start, s - start, cat=ann))
        start = s
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": ranks},
        "traceEvents": ev,
    }


def _write_ranks(out: Path, steps: int) -> Path:
    """The three ranks' traces of ``steps`` steps (:func:`_steps_rank`) written into ``out``."""
    for r in range(3):
        (out / f"rank{r}.trace.json").write_text(json.dumps(_steps_rank(r, steps)))
    return out


@pytest.fixture(scope="module")
def three_steps(tmp_path_factory) -> Path:
    return _write_ranks(tmp_path_factory.mktemp("steps3"), 3)


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory) -> Path:
    return _write_ranks(tmp_path_factory.mktemp("steps2"), 2)


def _analysis(path: Path, *edits: str, step: int | None = None):
    from fsdpbench.analysis import analyze

    res = analyze([str(path)], workers=1, what_if=list(edits), step=step)
    assert res.replay is not None, res.replay_note
    return res


def test_a_delay_in_every_step_outranks_one_steps_stall(three_steps):
    """Over 3 steps: rank 1's 20 µs at layers.1 in every step (median 20) comes before rank 0's 100 µs stall
    in step 2 only (per step 0, 100, 0: median 0); the window is 67 + 167 + 67 = 301 µs, 100.33 µs a step."""
    rp = _analysis(three_steps).replay
    assert rp["steps"] == 3
    assert [r["measured_us"] for r in rp["ranks"]] == pytest.approx([301.0] * 3)
    assert rp["figure"]["step_us"] == pytest.approx(301.0)
    assert rp["step_us"] == pytest.approx(301.0 / 3)
    got = {(x["rank"], x["unit"], x["phase"]): x for x in rp["critical_excess"]}
    first = rp["critical_excess"][0]
    assert (first["rank"], first["unit"], first["phase"]) == (1, "layers.1", "forward")
    assert first["excess_us"] == pytest.approx(20.0)
    assert first["excess_per_step_us"] == pytest.approx([20.0, 20.0, 20.0])
    stall = got[(0, "layers.0", "forward")]
    assert stall["excess_per_step_us"] == pytest.approx([0.0, 100.0, 0.0])
    assert stall["excess_us"] == pytest.approx(0.0)
    # the window's sums stay beside the median: at layers.1 rank 1 spends 3 × (gap 20 + compute 10 + launch 1 +
    # transfer 10), the others 3 × 21 (waits left out of both)
    assert got[(1, "layers.1", "forward")]["own_us"] == pytest.approx(123.0)
    assert got[(1, "layers.1", "forward")]["peers_us"] == pytest.approx(63.0)


def test_one_profiled_step_lets_the_stall_win(three_steps):
    """Step 2 alone (``--step 2``: one step, as before ``--profile-steps``): the stall's 100 µs against the
    delay's 20; no per-step list; the step is 167 µs."""
    rp = _analysis(three_steps, step=2).replay
    assert rp["steps"] == 1
    assert rp["step_us"] == pytest.approx(167.0) == pytest.approx(rp["figure"]["step_us"])
    top = [(x["rank"], x["unit"], x["phase"], x["excess_us"]) for x in rp["critical_excess"][:2]]
    assert top == [
        (0, "layers.0", "forward", pytest.approx(100.0)),
        (1, "layers.1", "forward", pytest.approx(20.0)),
    ]
    assert all("excess_per_step_us" not in x for x in rp["critical_excess"])


def test_delay_edits_act_in_every_step(two_steps):
    """2 steps (67 + 167 = 234 µs, 117 a step). Removing rank 1's 20 µs at layers.1 takes it from both steps:
    47 + 147 = 194 → 97 a step (−20; taken from the first step only it would be −10). Adding 30 µs at
    layers.0 on rank 2 in both steps: step 1's layers.0 then ends at 30 + 11 + 10 = 51 (+30), step 2's rank 0
    still arrives last at 111 (masked: +0) → 264 → 132 a step (+15)."""
    rp = _analysis(two_steps, "delay:1:layers.1:forward:-0.02", "delay:2:layers.0:forward:0.03").replay
    assert rp["steps"] == 2
    assert rp["step_us"] == pytest.approx(117.0)
    pred = {w["edit"]: w["predicted_step_us"] for w in rp["what_if"]}
    assert pred == pytest.approx(
        {"delay:1:layers.1:forward:-0.02": 97.0, "delay:2:layers.0:forward:0.03": 132.0}
    )
    assert all(w["source"] == "replay" and w["note"] is None for w in rp["what_if"])


def test_removing_more_than_a_step_holds_says_so_per_step(two_steps):
    """Removing 25 µs where rank 1 has 20 µs of host gap and 1 µs of launch per step finds 21 in each step."""
    rp = _analysis(two_steps, "delay:1:layers.1:forward:-0.025").replay
    (w,) = rp["what_if"]
    assert w["note"] == (
        "delay:1:layers.1:forward:-0.025: only 0.021 ms in step 1, 0.021 ms in step 2 of host time found there "
        "to remove"
    )


def test_the_graph_cache_carries_the_step_windows_and_refuses_a_pack_without_them(three_steps):
    """``to_bytes``/``from_bytes`` keep each rank's ProfilerStep starts (T0, T0 + 67, T0 + 234 µs, in ns); a
    pack written without them (an older fsdpbench) is refused, so the cache is rebuilt, never read as one step."""
    import dataclasses
    import lzma

    import numpy as np
    import orjson

    from fsdpbench.analysis.crossrank import replay_pack as replay_graph

    res = _analysis(three_steps)
    graph = res._replay[0].graphs[0]
    back = replay_graph.from_bytes(replay_graph.to_bytes(graph))
    want = [int(T0 * 1000) + x for x in (0, 67_000, 234_000)]
    assert back.step_ns.tolist() == want == graph.step_ns.tolist()
    raw = lzma.decompress(replay_graph.to_bytes(graph))
    cut = raw.index(b"\n")
    head = orjson.loads(raw[:cut])
    # drop the step_ns array from the pack, as an older fsdpbench wrote it
    pos, blobs, arrays = cut + 1, [], []
    for name, how, dtype, count, first in head["arrays"]:
        size = np.dtype(dtype).itemsize * count
        if name != "step_ns":
            arrays.append([name, how, dtype, count, first])
            blobs.append(raw[pos : pos + size])
        pos += size
    head["arrays"] = arrays
    head["dtypes"].pop("step_ns")
    old = lzma.compress(orjson.dumps(head) + b"\n" + b"".join(blobs))
    with pytest.raises(ValueError, match="step windows"):
        replay_graph.from_bytes(old)
    assert dataclasses.fields(graph)  # a RankGraph, as built


def test_a_findings_replayed_estimate_is_on_the_clock_of_the_analysis_totals():
    """The replay's figures are per step (a window of 3 steps of 100 µs: ``step_us`` 100); the analysis's own
    figures, the closed forms and the diff's deltas are totals over the 3 steps, so a finding's estimate from a
    what-if predicting 90 µs a step is −10 × 3 = −30 µs; one step: −10."""
    from fsdpbench.analysis.findings.replay import estimate_from_what_if

    row = {"edit": "scale:all_gather:0.5", "predicted_step_us": 90.0, "changed": [], "source": "replay"}
    three = {"replay": {"steps": 3, "step_us": 100.0, "figure": {"step_us": 300.0}, "what_if": [row]}}
    assert estimate_from_what_if(three, row, "s").step_time_delta_us == pytest.approx(-30.0)
    old = {"replay": {"figure": {"step_us": 100.0}, "what_if": [row]}}  # a replay from before `steps`
    assert estimate_from_what_if(old, row, "s").step_time_delta_us == pytest.approx(-10.0)


def test_the_report_says_how_many_steps_were_profiled():
    from fsdpbench.report.build import _profiled

    assert _profiled({"profile": True, "profile_steps": 3}) == ", 3 steps profiled"
    assert _profiled({"profile": True}) == ", profiled"  # a run recorded before --profile-steps
    assert _profiled({"profile": False, "profile_steps": 3}) == ""
